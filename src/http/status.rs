//! The admin status page (`GET /admin/status`, server-rendered HTML refreshing itself, no
//! script and no external asset) and its JSON twin (`GET /admin/api/status`), on the admin
//! listener only, behind the optional `admin_token` (bearer, compared in constant time).
//! What they show is `gateway::status::Status`; every text from the config or an upstream is
//! HTML-escaped here.

use std::fmt::Write as _;
use std::sync::Arc;

use axum::body::Body;
use axum::extract::State;
use axum::http::{HeaderMap, HeaderValue, Response, Uri, header};

use crate::error::GatewayError;
use crate::gateway::Gateway;
use crate::gateway::status::{ConfigOutcome, Status, TenantStatus, UpstreamStatus};

/// The challenge of a refused request (RFC 6750).
const REALM: &str = "Bearer realm=\"switchyard-admin\"";
/// Seconds between the page's reloads unless `?refresh=` says otherwise (0: never).
const DEFAULT_REFRESH_S: u32 = 5;

/// `GET /admin/api/status`: the status as JSON.
pub async fn api(State(gateway): State<Arc<Gateway>>, headers: HeaderMap) -> Response<Body> {
    if let Err(e) = authorize(&gateway, &headers) {
        return e.into_response(None);
    }
    let body = serde_json::to_vec(&gateway.status()).unwrap_or_default();
    private(Response::new(Body::from(body)), "application/json")
}

/// `GET /admin/status`: the status as a page that reloads itself every `?refresh=` seconds.
pub async fn page(
    State(gateway): State<Arc<Gateway>>,
    uri: Uri,
    headers: HeaderMap,
) -> Response<Body> {
    if let Err(e) = authorize(&gateway, &headers) {
        return e.into_response(None);
    }
    let refresh = refresh_of(uri.query()).min(3600);
    let html = render(&gateway.status(), refresh);
    let mut resp = private(Response::new(Body::from(html)), "text/html; charset=utf-8");
    // Nothing but the page's own inline style: no script, no frame, no other resource.
    resp.headers_mut().insert(
        header::CONTENT_SECURITY_POLICY,
        HeaderValue::from_static(
            "default-src 'none'; style-src 'unsafe-inline'; frame-ancestors 'none'; base-uri 'none'; form-action 'none'",
        ),
    );
    resp
}

/// `?refresh=<seconds>`, else the default (also for a value that is not a number).
fn refresh_of(query: Option<&str>) -> u32 {
    query
        .into_iter()
        .flat_map(|q| q.split('&'))
        .find_map(|pair| pair.strip_prefix("refresh="))
        .and_then(|v| v.parse().ok())
        .unwrap_or(DEFAULT_REFRESH_S)
}

/// Whether the request may see the status: always without `admin_token`; with it, only with
/// `Authorization: Bearer <token>` (one header).
fn authorize(gateway: &Gateway, headers: &HeaderMap) -> Result<(), GatewayError> {
    let Some(token) = &gateway.admin_token else {
        return Ok(());
    };
    let mut values = headers.get_all(header::AUTHORIZATION).iter();
    let (presented, extra) = (values.next(), values.next());
    if extra.is_some() {
        return Err(GatewayError::MalformedCredentials {
            www_authenticate: format!("{REALM}, error=\"invalid_request\""),
            reason: "more than one Authorization header",
        });
    }
    let bearer = presented.and_then(|v| {
        let v = v.as_bytes();
        let (scheme, rest) = v.split_at_checked(7)?;
        scheme.eq_ignore_ascii_case(b"bearer ").then_some(rest)
    });
    match bearer {
        None => Err(GatewayError::Unauthorized {
            www_authenticate: REALM.to_owned(),
            reason: "the status page needs the admin token".into(),
        }),
        Some(t) if token.matches(t) => Ok(()),
        Some(_) => Err(GatewayError::Unauthorized {
            www_authenticate: format!("{REALM}, error=\"invalid_token\""),
            reason: "not the admin token".into(),
        }),
    }
}

/// An answer nobody may cache or sniff.
fn private(mut resp: Response<Body>, content_type: &'static str) -> Response<Body> {
    let h = resp.headers_mut();
    h.insert(header::CONTENT_TYPE, HeaderValue::from_static(content_type));
    h.insert(header::CACHE_CONTROL, HeaderValue::from_static("no-store"));
    h.insert(
        header::X_CONTENT_TYPE_OPTIONS,
        HeaderValue::from_static("nosniff"),
    );
    h.insert(
        header::REFERRER_POLICY,
        HeaderValue::from_static("no-referrer"),
    );
    resp
}

const STYLE: &str = "body{font:14px/1.4 system-ui,sans-serif;margin:1.5em;color:#222}\
h1{font-size:1.4em;margin:0}h2{font-size:1.2em;margin:1.4em 0 .3em}\
h3{font-size:1em;margin:1em 0 .3em}.meta{color:#666}\
table{border-collapse:collapse;margin:.3em 0}th,td{border:1px solid #ccc;padding:.25em .5em;\
text-align:left;vertical-align:top}th{background:#f4f4f4}code{font-size:.95em}\
.state{font-weight:bold;padding:0 .4em;border-radius:3px}.up,.ok{background:#d9f2d9}\
.down,.rejected{background:#f8d0d0}.restarting,.starting{background:#fbeec0}\
.idle,.stopped{background:#e8e8e8}.err{color:#a00}";

/// The page.
fn render(status: &Status, refresh: u32) -> String {
    let upstreams: Vec<&UpstreamStatus> =
        status.tenants.iter().flat_map(|t| &t.upstreams).collect();
    let up = upstreams.iter().filter(|u| u.state == "up").count();
    let down = upstreams.iter().filter(|u| u.state == "down").count();
    let config = outcome_word(status.config.outcome);
    let mut h = String::with_capacity(8 * 1024);
    h.push_str("<!doctype html><html lang=\"en\"><head><meta charset=\"utf-8\">");
    if refresh > 0 {
        let _ = write!(h, "<meta http-equiv=\"refresh\" content=\"{refresh}\">");
    }
    let _ = write!(
        h,
        "<title>switchyard status: {up}/{} upstreams up, {down} down, config {config}</title>\
         <style>{STYLE}</style></head><body><h1>Switchyard status</h1>\
         <p class=\"meta\">replica <code>{}</code> · {} · ",
        upstreams.len(),
        esc(&status.replica),
        utc(status.now_ms),
    );
    if refresh > 0 {
        let _ = write!(h, "refreshes every {refresh} s · ");
    }
    h.push_str("<a href=\"/admin/api/status\">JSON</a></p>");
    render_config(&mut h, status);
    for t in &status.tenants {
        render_tenant(&mut h, t, status.now_ms);
    }
    h.push_str("</body></html>\n");
    h
}

fn render_config(h: &mut String, status: &Status) {
    let c = &status.config;
    let word = outcome_word(c.outcome);
    let class = if c.outcome == ConfigOutcome::Rejected {
        "rejected"
    } else {
        "ok"
    };
    let _ = write!(
        h,
        "<h2>Config</h2><p id=\"config\">file <code>{}</code>: last {} <span class=\"state {class}\">{word}</span> {} ({}); the running config dates from {}.</p>",
        esc(c.file.as_deref().unwrap_or("(in memory)")),
        if c.outcome == ConfigOutcome::Loaded {
            "load"
        } else {
            "reload"
        },
        utc(c.at_ms),
        ago(status.now_ms, c.at_ms),
        utc(c.running_since_ms),
    );
    if !c.errors.is_empty() {
        let _ = write!(
            h,
            "<p class=\"err\">{} problem{} (the running config stays in effect):</p><ol id=\"config-errors\">",
            c.errors.len(),
            if c.errors.len() == 1 { "" } else { "s" }
        );
        for e in &c.errors {
            let _ = write!(h, "<li><code>{}</code></li>", esc(&e.text));
        }
        h.push_str("</ol>");
    }
}

fn render_tenant(h: &mut String, t: &TenantStatus, now_ms: u64) {
    let s = &t.sessions;
    let _ = write!(
        h,
        "<h2>Tenant <code>{}</code></h2><p>endpoint <code>{}</code> · {} · failure policy {} · \
         <span class=\"sessions\">{} live session{} ({} initialized) · {} GET stream{} · \
         {} 2024-11-05 stream{} · {} request{} in flight</span></p>",
        esc(&t.name),
        esc(&t.endpoint),
        if t.auth {
            "OAuth bearer tokens"
        } else {
            "no client auth"
        },
        t.failure_policy,
        s.sessions,
        plural(s.sessions),
        s.initialized,
        s.get_streams,
        plural(s.get_streams),
        s.legacy_streams,
        plural(s.legacy_streams),
        s.requests_in_flight,
        plural(s.requests_in_flight),
    );
    h.push_str(
        "<table class=\"upstreams\"><tr><th>Upstream</th><th>Transport</th><th>State</th>\
         <th>Protocol</th><th>Server</th><th>Restarts</th><th>Last error</th><th>Tools</th>\
         <th>Prompts</th><th>Resources</th><th>Templates</th></tr>",
    );
    for u in &t.upstreams {
        let transport = match u.sharing {
            Some(sharing) => format!("{} ({sharing})", u.transport),
            None => u.transport.to_owned(),
        };
        let processes = u
            .processes
            .map(|p| format!(" {}/{} processes", p.ready, p.configured))
            .unwrap_or_default();
        let (protocol, server) = match &u.connected {
            Some(c) => (
                esc(&c.protocol_version),
                format!(
                    "{} {}",
                    esc(c.server_name.as_deref().unwrap_or("")),
                    esc(c.server_version.as_deref().unwrap_or(""))
                ),
            ),
            None => ("—".to_owned(), "—".to_owned()),
        };
        let error = match &u.last_error {
            Some(e) => format!(
                "<span class=\"err\">{}</span> <span class=\"meta\">({})</span>",
                esc(&e.message),
                ago(now_ms, e.at_ms)
            ),
            None => "—".to_owned(),
        };
        let _ = write!(
            h,
            "<tr id=\"upstream-{}-{}\"><td><code>{}</code></td><td>{} <code>{}</code></td>\
             <td><span class=\"state {}\">{}</span>{processes}</td><td>{protocol}</td>\
             <td>{server}</td><td>{}</td><td>{error}</td><td>{}</td><td>{}</td><td>{}</td><td>{}</td></tr>",
            esc(&t.name),
            esc(&u.name),
            esc(&u.name),
            transport,
            esc(&u.target),
            u.state,
            u.state,
            u.restarts,
            count(u.tools),
            count(u.prompts),
            count(u.resources),
            count(u.resource_templates),
        );
    }
    h.push_str("</table>");
    let tools: Vec<(&UpstreamStatus, &crate::gateway::status::ToolStatus)> = t
        .upstreams
        .iter()
        .flat_map(|u| u.tool_names.iter().map(move |tool| (u, tool)))
        .collect();
    if tools.is_empty() {
        h.push_str(
            "<p class=\"meta\">No tools listed yet (lists are fetched when a client asks).</p>",
        );
    } else {
        h.push_str(
            "<h3>Tools</h3><table class=\"tools\"><tr><th>Public name</th><th>Upstream</th>\
             <th>Hidden unless the caller satisfies</th></tr>",
        );
        for (u, tool) in tools {
            let policies = if tool.policies.is_empty() {
                "— (every caller)".to_owned()
            } else {
                tool.policies
                    .iter()
                    .filter_map(|i| t.tool_policies.get(*i))
                    .map(|p| {
                        let mut needs = Vec::new();
                        if !p.scopes.is_empty() {
                            needs.push(format!("scopes {}", esc(&p.scopes.join(" "))));
                        }
                        if !p.claims.is_empty() {
                            needs.push(format!("claims {}", esc(&p.claims.join(", "))));
                        }
                        format!("tool_policies[{}]: {}", p.index, needs.join("; "))
                    })
                    .collect::<Vec<_>>()
                    .join("<br>")
            };
            let _ = write!(
                h,
                "<tr><td><code>{}</code></td><td><code>{}</code></td><td>{policies}</td></tr>",
                esc(&tool.name),
                esc(&u.name)
            );
        }
        h.push_str("</table>");
    }
}

fn outcome_word(outcome: ConfigOutcome) -> &'static str {
    match outcome {
        ConfigOutcome::Loaded => "loaded",
        ConfigOutcome::Applied => "applied",
        ConfigOutcome::Unchanged => "unchanged",
        ConfigOutcome::Rejected => "rejected",
    }
}

fn count(n: Option<usize>) -> String {
    n.map_or_else(|| "—".to_owned(), |n| n.to_string())
}

fn plural(n: usize) -> &'static str {
    if n == 1 { "" } else { "s" }
}

/// `text` safe in HTML text and in quoted attribute values.
fn esc(text: &str) -> String {
    let mut out = String::with_capacity(text.len());
    for c in text.chars() {
        match c {
            '&' => out.push_str("&amp;"),
            '<' => out.push_str("&lt;"),
            '>' => out.push_str("&gt;"),
            '"' => out.push_str("&quot;"),
            '\'' => out.push_str("&#39;"),
            c => out.push(c),
        }
    }
    out
}

/// `2026-11-24 20:31:05 UTC` of a time in milliseconds since the Unix epoch.
fn utc(ms: u64) -> String {
    let t = crate::clock::utc(ms);
    format!(
        "{:04}-{:02}-{:02} {:02}:{:02}:{:02} UTC",
        t.year, t.month, t.day, t.hour, t.minute, t.second
    )
}

/// `12 s ago`, `3 min ago`, `2 h ago`.
fn ago(now_ms: u64, at_ms: u64) -> String {
    let s = now_ms.saturating_sub(at_ms) / 1000;
    match s {
        0..120 => format!("{s} s ago"),
        120..7200 => format!("{} min ago", s / 60),
        _ => format!("{} h ago", s / 3600),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn escaping_and_times() {
        assert_eq!(
            esc("<b a=\"1\">'x' & y</b>"),
            "&lt;b a=&quot;1&quot;&gt;&#39;x&#39; &amp; y&lt;/b&gt;"
        );
        assert_eq!(utc(0), "1970-01-01 00:00:00 UTC");
        assert_eq!(utc(1_709_251_199_000), "2024-02-29 23:59:59 UTC");
        assert_eq!(utc(1_795_552_265_000), "2026-11-24 20:31:05 UTC");
        assert_eq!(ago(10_000, 4_000), "6 s ago");
        assert_eq!(ago(4_000, 10_000), "0 s ago");
        assert_eq!(refresh_of(None), DEFAULT_REFRESH_S);
        assert_eq!(refresh_of(Some("a=b&refresh=1")), 1);
        assert_eq!(refresh_of(Some("refresh=x")), DEFAULT_REFRESH_S);
    }
}
