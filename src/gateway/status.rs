//! The status of this replica for its admins (`Gateway::status`, served by `http::status` as
//! a page and as JSON): tenants and their endpoints, each upstream's state, what it lists and
//! which policies hide its tools, the live sessions and streams, and how the config file's
//! last load or reload went. Built from what the gateway holds, without asking upstreams
//! anything. Nothing secret goes in: no header or environment values, tokens, URLs past
//! their origin, command arguments, session ids or user identities; an upstream's error text
//! has the upstream's configured secrets masked.

use std::sync::Mutex;
use std::time::SystemTime;

use serde::Serialize;

use super::Gateway;
use crate::config::{ConfigErrors, FailurePolicy, UpstreamConfig, UpstreamTransport};
use crate::protocol::ListKind;
use crate::session::DirectoryUsage;
use crate::tenant::Tenant;
use crate::upstream::Upstream;

/// What the status page shows, as of `now_ms`.
#[derive(Debug, Clone, Serialize)]
pub struct Status {
    /// This replica's id (a status page shows one replica).
    pub replica: String,
    /// Milliseconds since the Unix epoch, as every `*_ms` time here.
    pub now_ms: u64,
    pub config: ConfigStatus,
    /// By name.
    pub tenants: Vec<TenantStatus>,
}

/// How the config file's last load or reload went.
#[derive(Debug, Clone, Serialize)]
pub struct ConfigStatus {
    /// The file, as given on the command line (none for a config built in memory).
    pub file: Option<String>,
    pub outcome: ConfigOutcome,
    pub at_ms: u64,
    /// When the config that is running was loaded or applied.
    pub running_since_ms: u64,
    /// Every problem of a rejected file, in file order.
    pub errors: Vec<ConfigProblem>,
}

/// The outcome of the last attempt to load the config.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
#[serde(rename_all = "lowercase")]
pub enum ConfigOutcome {
    /// Loaded at startup; no reload since.
    Loaded,
    /// A reload changed the routing.
    Applied,
    /// A reload found no routing change.
    Unchanged,
    /// A reload was refused: the running config stays.
    Rejected,
}

/// One problem of a rejected config: where (`line` 0: the file as a whole) and what.
#[derive(Debug, Clone, Serialize)]
pub struct ConfigProblem {
    pub file: String,
    pub line: usize,
    pub col: usize,
    /// The place in the document, like `tenants[0].upstreams[1].http.url`.
    pub path: String,
    pub message: String,
    /// `file:line:col: path: message`, as logs and `switchyard check` print it.
    pub text: String,
}

#[derive(Debug, Clone, Serialize)]
pub struct TenantStatus {
    pub name: String,
    /// The Streamable HTTP endpoint's path (the 2024-11-05 transport is below it).
    pub endpoint: String,
    /// Whether clients need a bearer token.
    pub auth: bool,
    pub failure_policy: &'static str,
    /// What its clients hold on this replica.
    pub sessions: DirectoryUsage,
    pub upstreams: Vec<UpstreamStatus>,
    pub tool_policies: Vec<PolicyStatus>,
}

#[derive(Debug, Clone, Serialize)]
pub struct UpstreamStatus {
    pub name: String,
    /// `stdio`, `http` or `sse`.
    pub transport: &'static str,
    /// The command of a stdio upstream (never its arguments or environment); the origin of
    /// an HTTP one (never its path, query or credentials).
    pub target: String,
    /// `shared` or `per-session` for stdio upstreams.
    pub sharing: Option<&'static str>,
    /// `up`, `down`, `restarting`, `starting`, `idle` (connects when a session needs it) or
    /// `stopped`.
    pub state: &'static str,
    /// Shared processes running (handshake done) and configured.
    pub processes: Option<Processes>,
    /// Restarts of the shared processes after they exited.
    pub restarts: u64,
    /// The last successful handshake with it.
    pub connected: Option<Connected>,
    /// The last failure to connect (or a process exit), whatever happened since.
    pub last_error: Option<LastError>,
    /// Items last listed (`null`: never listed since it started or its lists changed).
    pub tools: Option<usize>,
    pub prompts: Option<usize>,
    pub resources: Option<usize>,
    pub resource_templates: Option<usize>,
    /// Every tool last listed, by the name clients see, with the policies that may hide it.
    pub tool_names: Vec<ToolStatus>,
}

#[derive(Debug, Clone, Copy, Serialize)]
pub struct Processes {
    pub ready: usize,
    pub configured: usize,
}

#[derive(Debug, Clone, Serialize)]
pub struct Connected {
    pub at_ms: u64,
    pub protocol_version: String,
    pub server_name: Option<String>,
    pub server_version: Option<String>,
}

#[derive(Debug, Clone, Serialize)]
pub struct LastError {
    pub at_ms: u64,
    pub message: String,
}

#[derive(Debug, Clone, Serialize)]
pub struct ToolStatus {
    /// The public name.
    pub name: String,
    /// Indexes in the tenant's `tool_policies` matching the tool: a caller must satisfy all
    /// of them to see it (none: every caller sees it).
    pub policies: Vec<usize>,
}

/// A tool policy as configured, its claims by name only (their values may name people).
#[derive(Debug, Clone, Serialize)]
pub struct PolicyStatus {
    pub index: usize,
    pub upstream: String,
    pub tools: Vec<String>,
    pub scopes: Vec<String>,
    pub claims: Vec<String>,
}

/// The config status the gateway keeps: set at start, replaced by each reload.
pub(super) struct ConfigRecord(Mutex<ConfigStatus>);

impl ConfigRecord {
    pub(super) fn loaded(file: Option<String>) -> ConfigRecord {
        let now = unix_ms(SystemTime::now());
        ConfigRecord(Mutex::new(ConfigStatus {
            file,
            outcome: ConfigOutcome::Loaded,
            at_ms: now,
            running_since_ms: now,
            errors: Vec::new(),
        }))
    }
}

impl Gateway {
    /// Records how a reload of `file` went: `errors` for a rejected one.
    pub fn record_reload(&self, file: &str, outcome: ConfigOutcome, errors: Vec<ConfigProblem>) {
        let now = unix_ms(SystemTime::now());
        if let Ok(mut c) = self.config_status.0.lock() {
            c.file = Some(file.to_owned());
            c.outcome = outcome;
            c.at_ms = now;
            if outcome == ConfigOutcome::Applied {
                c.running_since_ms = now;
            }
            c.errors = errors;
        }
    }

    /// The status of this replica now.
    pub fn status(&self) -> Status {
        let config = self
            .config_status
            .0
            .lock()
            .map(|c| c.clone())
            .unwrap_or_else(|poisoned| poisoned.into_inner().clone());
        let mut tenants: Vec<TenantStatus> = self.tenants().iter().map(|t| tenant(t)).collect();
        tenants.sort_by(|a, b| a.name.cmp(&b.name));
        Status {
            replica: self.bus.replica.to_string(),
            now_ms: unix_ms(SystemTime::now()),
            config,
            tenants,
        }
    }
}

impl ConfigProblem {
    /// The problems of a rejected file.
    pub fn all(errors: &ConfigErrors) -> Vec<ConfigProblem> {
        errors
            .errors
            .iter()
            .map(|e| ConfigProblem {
                file: e.file.clone(),
                line: e.line,
                col: e.col,
                path: e.path.clone(),
                message: e.message.clone(),
                text: e.to_string(),
            })
            .collect()
    }

    /// A problem with the file as a whole (it validated, but could not be applied).
    pub fn whole(file: &str, message: &str) -> ConfigProblem {
        ConfigProblem {
            file: file.to_owned(),
            line: 0,
            col: 0,
            path: String::new(),
            message: message.to_owned(),
            text: format!("{file}: {message}"),
        }
    }
}

fn tenant(t: &Tenant) -> TenantStatus {
    TenantStatus {
        name: t.name.to_string(),
        endpoint: t.config.path.clone(),
        auth: t.config.auth.is_some(),
        failure_policy: match t.config.failure_policy {
            FailurePolicy::Open => "open",
            FailurePolicy::Closed => "closed",
        },
        sessions: t.directory.usage(),
        upstreams: t.upstreams.iter().map(|u| upstream(t, u)).collect(),
        tool_policies: t
            .policies
            .rules()
            .iter()
            .enumerate()
            .map(|(index, p)| PolicyStatus {
                index,
                upstream: p.upstream.clone(),
                tools: p.tools.clone(),
                scopes: p.scopes.clone(),
                claims: p.claims.keys().cloned().collect(),
            })
            .collect(),
    }
}

fn upstream(t: &Tenant, u: &Upstream) -> UpstreamStatus {
    let health = u.info.health.report();
    let catalog = &u.info.catalog;
    let tools = catalog.listed(ListKind::Tools);
    let count = |kind| catalog.listed(kind).map(|ids| ids.len());
    let pool = u.pool();
    UpstreamStatus {
        name: u.name().to_owned(),
        transport: u.transport(),
        target: target(&u.config),
        sharing: match &u.config.transport {
            UpstreamTransport::Stdio(_) if u.is_shared() => Some("shared"),
            UpstreamTransport::Stdio(_) => Some("per-session"),
            UpstreamTransport::Http(_) | UpstreamTransport::Sse(_) => None,
        },
        state: u.state().as_str(),
        processes: (!pool.is_empty()).then(|| Processes {
            ready: pool.iter().filter(|c| c.is_ready()).count(),
            configured: pool.len(),
        }),
        restarts: pool.iter().map(|c| c.restarts()).sum(),
        connected: health.connected.map(|c| Connected {
            at_ms: unix_ms(c.at),
            protocol_version: c.protocol_version.to_string(),
            server_name: c.server_name,
            server_version: c.server_version,
        }),
        last_error: health.failed.map(|f| LastError {
            at_ms: unix_ms(f.at),
            message: masked(&f.reason, &u.config),
        }),
        tool_names: tools
            .iter()
            .flatten()
            .map(|own| ToolStatus {
                name: u.public_name(own),
                policies: t.policies.matching(u.name(), own),
            })
            .collect(),
        tools: tools.as_ref().map(Vec::len),
        prompts: count(ListKind::Prompts),
        resources: count(ListKind::Resources),
        resource_templates: count(ListKind::ResourceTemplates),
    }
}

/// What an upstream is, without anything secret: a stdio command without its arguments, an
/// HTTP URL's origin.
fn target(config: &UpstreamConfig) -> String {
    match &config.transport {
        UpstreamTransport::Stdio(s) => s.command.clone(),
        UpstreamTransport::Http(h) | UpstreamTransport::Sse(h) => match url::Url::parse(&h.url) {
            Ok(url) => url.origin().ascii_serialization(),
            Err(_) => String::new(),
        },
    }
}

/// `text` with every secret of the upstream's config (header and environment values, the
/// OAuth client secret, the URL's query, a stdio upstream's arguments) replaced by `***`: an upstream's
/// error text is upstream-controlled and may echo what it was sent.
fn masked(text: &str, config: &UpstreamConfig) -> String {
    let mut secrets: Vec<String> = Vec::new();
    match &config.transport {
        UpstreamTransport::Stdio(s) => {
            secrets.extend(s.env.values().map(|v| v.expose().to_owned()));
            secrets.extend(s.args.iter().cloned());
        }
        UpstreamTransport::Http(h) | UpstreamTransport::Sse(h) => {
            secrets.extend(h.headers.iter().map(|(_, v)| v.expose().to_owned()));
            if let Some(o) = &h.oauth2 {
                secrets.push(o.client_secret.expose().to_owned());
            }
            // (Credentials in the URL are refused by the config.)
            if let Ok(url) = url::Url::parse(&h.url) {
                secrets.extend(url.query().map(str::to_owned));
            }
        }
    }
    // Longest first, so a secret containing another is masked whole.
    secrets.retain(|s| s.len() >= 4);
    secrets.sort_by_key(|s| std::cmp::Reverse(s.len()));
    let mut out = text.to_owned();
    for s in &secrets {
        out = out.replace(s.as_str(), "***");
    }
    out
}

/// Milliseconds since the Unix epoch (0 before it).
pub fn unix_ms(at: SystemTime) -> u64 {
    at.duration_since(SystemTime::UNIX_EPOCH)
        .map(|d| u64::try_from(d.as_millis()).unwrap_or(u64::MAX))
        .unwrap_or(0)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn upstream_config(yaml: &str) -> UpstreamConfig {
        let text = format!("tenants:\n  - name: a\n    upstreams:\n      - {yaml}\n");
        match crate::config::parse(&text, "t.yaml", &|_| None) {
            Ok(mut c) => c.tenants.remove(0).upstreams.remove(0),
            Err(e) => panic!("{e}"),
        }
    }

    #[test]
    fn secrets_are_masked_in_error_texts() {
        let config = upstream_config(
            "{name: u, http: {url: \"http://127.0.0.1:9/mcp?key=qs-secret\", headers: {Authorization: \"Bearer hdr-secret\"}}}",
        );
        let text = "401: Bearer hdr-secret refused at /mcp?key=qs-secret";
        assert_eq!(masked(text, &config), "401: *** refused at /mcp?***");
        assert_eq!(target(&config), "http://127.0.0.1:9");
    }

    #[test]
    fn a_stdio_target_is_its_command_alone() {
        let config = upstream_config(
            "{name: u, stdio: {command: npx, args: [server, --api-key, arg-secret], env: {TOKEN: env-secret}}}",
        );
        assert_eq!(target(&config), "npx");
        assert_eq!(
            masked("exited: env-secret arg-secret", &config),
            "exited: *** ***"
        );
    }
}
