//! Browser clients (CORS): preflights and answers over real sockets for allowed and refused
//! origins on every kind of tenant path (Streamable HTTP, the 2024-11-05 paths, the RFC 9728
//! metadata), and a real headless Chromium running the official TypeScript SDK in a page: the
//! whole session from an allowed origin, nothing from another one.

use std::time::Duration;

use reqwest::Method;
use reqwest::header::HeaderMap;
use serde_json::{Value, json};

use crate::support::TempDir;
use crate::support::browser::{Browser, PageServer, bundle};
use crate::support::config::{config, demo_stdio, tenant, upstream};
use crate::support::gateway::TestGateway;
use switchyard::config::{AuthConfig, JwtAlgorithm, Rate, TenantConfig, UpstreamTransport};

const APP: &str = "http://app.example";
const EVIL: &str = "http://evil.example";
const EXPOSED: &str = "Mcp-Session-Id, MCP-Protocol-Version, WWW-Authenticate, Retry-After";
const ACCEPT_BOTH: &str = "application/json, text/event-stream";

fn demo_tenant(name: &str) -> TenantConfig {
    tenant(
        name,
        vec![upstream("demo", UpstreamTransport::Stdio(demo_stdio(None)))],
    )
}

fn init() -> String {
    json!({"jsonrpc": "2.0", "id": 1, "method": "initialize", "params": {
        "protocolVersion": "2025-11-25", "capabilities": {},
        "clientInfo": {"name": "cors-test", "version": "0"}}})
    .to_string()
}

/// One request with exactly `headers` (and `body`); the answer's head, and its body unless it
/// is an event stream (left open: only its head matters here).
async fn send(
    method: Method,
    url: &str,
    headers: &[(&str, &str)],
    body: &str,
) -> (u16, HeaderMap, String) {
    let client = reqwest::Client::builder()
        .timeout(Duration::from_secs(30))
        .build()
        .expect("client");
    let mut req = client.request(method, url).body(body.to_owned());
    for (name, value) in headers {
        req = req.header(*name, *value);
    }
    let resp = req.send().await.expect("the gateway answers");
    let (status, head) = (resp.status().as_u16(), resp.headers().clone());
    let streams = head
        .get("content-type")
        .is_some_and(|v| v.as_bytes().starts_with(b"text/event-stream"));
    let text = match streams {
        true => String::new(),
        false => resp.text().await.unwrap_or_default(),
    };
    (status, head, text)
}

async fn preflight(url: &str, origin: &str, method: &str, headers: &str) -> (u16, HeaderMap) {
    let mut sent = vec![
        ("origin", origin),
        ("access-control-request-method", method),
    ];
    if !headers.is_empty() {
        sent.push(("access-control-request-headers", headers));
    }
    let (status, head, body) = send(Method::OPTIONS, url, &sent, "").await;
    if status == 204 {
        assert!(
            body.is_empty(),
            "a preflight's answer has no body: {body:?}"
        );
    }
    (status, head)
}

fn get<'h>(head: &'h HeaderMap, name: &str) -> Option<&'h str> {
    head.get(name).and_then(|v| v.to_str().ok())
}

/// The grant of an answer to `origin`: the origin echoed, `Vary: Origin`, the exposed
/// headers, and never credentials.
fn assert_granted(head: &HeaderMap, origin: &str, what: &str) {
    assert_eq!(
        get(head, "access-control-allow-origin"),
        Some(origin),
        "{what}: {head:?}"
    );
    assert!(
        head.get_all("vary")
            .iter()
            .any(|v| v.to_str().is_ok_and(|v| v.contains("Origin"))),
        "{what}: {head:?}"
    );
    assert_eq!(
        get(head, "access-control-expose-headers"),
        Some(EXPOSED),
        "{what}: {head:?}"
    );
    assert_eq!(
        get(head, "access-control-allow-credentials"),
        None,
        "{what}"
    );
}

fn assert_no_cors(head: &HeaderMap, what: &str) {
    let named: Vec<_> = head
        .keys()
        .filter(|k| k.as_str().starts_with("access-control-"))
        .collect();
    assert!(named.is_empty(), "{what}: {named:?} in {head:?}");
}

fn live_sessions(gw: &TestGateway, tenant: &str) -> i64 {
    gw.gateway.refresh_gauges();
    switchyard::metrics::get()
        .sessions
        .with_label_values(&[tenant])
        .get()
}

#[tokio::test]
async fn an_allowed_origin_is_granted_preflights_and_every_answer() {
    let mut t = demo_tenant("cors1");
    t.allowed_origins = vec![APP.into()];
    // One request an hour: preflights must not spend it.
    t.limits.requests = Some(Rate {
        count: 1,
        per: Duration::from_secs(3600),
        burst: 1,
    });
    let gw = TestGateway::start(config(vec![t])).await;
    let url = gw.url("cors1");

    for _ in 0..3 {
        let (status, head) = preflight(
            &url,
            APP,
            "POST",
            "authorization,content-type,mcp-param-region,mcp-protocol-version,x-evil",
        )
        .await;
        assert_eq!(status, 204, "{head:?}");
        assert_eq!(get(&head, "access-control-allow-origin"), Some(APP));
        assert_eq!(get(&head, "vary"), Some("Origin"));
        assert_eq!(
            get(&head, "access-control-allow-methods"),
            Some("GET, POST, DELETE, OPTIONS")
        );
        assert_eq!(
            get(&head, "access-control-allow-headers"),
            Some("authorization, content-type, mcp-param-region, mcp-protocol-version")
        );
        assert_eq!(get(&head, "access-control-max-age"), Some("7200"));
        assert_eq!(get(&head, "access-control-allow-credentials"), None);
    }
    let (_, head) = preflight(&url, APP, "GET", "mcp-session-id,last-event-id").await;
    assert_eq!(
        get(&head, "access-control-allow-headers"),
        Some("mcp-session-id,last-event-id"),
        "all allowed: the request's own list"
    );
    assert_eq!(
        live_sessions(&gw, "cors1"),
        0,
        "a preflight opens no session"
    );

    // The one request of the hour: initialize, granted.
    let with_origin = [
        ("origin", APP),
        ("content-type", "application/json"),
        ("accept", ACCEPT_BOTH),
    ];
    let (status, head, body) = send(Method::POST, &url, &with_origin, &init()).await;
    assert_eq!(status, 200, "{body}");
    assert_granted(&head, APP, "initialize");
    let session = get(&head, "mcp-session-id").expect("a session").to_owned();
    // The next is over the rate: a 429 a page can read, Retry-After included.
    let (status, head, _) = send(Method::POST, &url, &with_origin, &init()).await;
    assert_eq!(status, 429);
    assert!(get(&head, "retry-after").is_some(), "{head:?}");
    assert_granted(&head, APP, "429");

    // A notification (not charged), the GET stream, a JSON-RPC error, DELETE, and an OPTIONS
    // that is no preflight: all granted.
    let in_session = [
        ("origin", APP),
        ("content-type", "application/json"),
        ("accept", ACCEPT_BOTH),
        ("mcp-session-id", session.as_str()),
        ("mcp-protocol-version", "2025-11-25"),
    ];
    let initialized = json!({"jsonrpc": "2.0", "method": "notifications/initialized"});
    let (status, head, _) = send(Method::POST, &url, &in_session, &initialized.to_string()).await;
    assert_eq!(status, 202);
    assert_granted(&head, APP, "202");
    let (status, head, _) = send(Method::GET, &url, &in_session, "").await;
    assert_eq!(status, 200, "{head:?}");
    assert_eq!(get(&head, "content-type"), Some("text/event-stream"));
    assert_granted(&head, APP, "GET stream");
    let (status, head, _) = send(
        Method::POST,
        &url,
        &[("origin", APP), ("content-type", "text/plain")],
        "{}",
    )
    .await;
    assert_eq!(status, 415);
    assert_granted(&head, APP, "415");
    let (status, head, _) = send(Method::DELETE, &url, &in_session, "").await;
    assert_eq!(status, 200);
    assert_granted(&head, APP, "DELETE");
    let (status, head, _) = send(Method::OPTIONS, &url, &[("origin", APP)], "").await;
    assert_eq!(status, 405);
    assert_granted(&head, APP, "OPTIONS without Access-Control-Request-Method");

    // Without Origin (not a browser): nothing added.
    let (_, head, _) = send(Method::POST, &url, &[("content-type", "text/plain")], "").await;
    assert_no_cors(&head, "no Origin");
    gw.stop().await;
}

#[tokio::test]
async fn the_2024_11_05_paths_grant_their_own_methods() {
    let mut t = demo_tenant("cors2");
    t.allowed_origins = vec![APP.into()];
    let gw = TestGateway::start(config(vec![t])).await;
    let base = gw.url("cors2");

    let (status, head) = preflight(&format!("{base}/sse"), APP, "GET", "").await;
    assert_eq!(status, 204);
    assert_eq!(
        get(&head, "access-control-allow-methods"),
        Some("GET, OPTIONS")
    );
    assert_eq!(get(&head, "access-control-allow-headers"), None);
    let (status, head) = preflight(
        &format!("{base}/messages?sessionId=x"),
        APP,
        "POST",
        "content-type",
    )
    .await;
    assert_eq!(status, 204);
    assert_eq!(
        get(&head, "access-control-allow-methods"),
        Some("POST, OPTIONS")
    );
    assert_eq!(
        get(&head, "access-control-allow-headers"),
        Some("content-type")
    );

    let (status, head, _) = send(
        Method::GET,
        &format!("{base}/sse"),
        &[("origin", APP), ("accept", "text/event-stream")],
        "",
    )
    .await;
    assert_eq!(status, 200);
    assert_granted(&head, APP, "the 2024-11-05 stream");
    let (status, head, _) = send(
        Method::POST,
        &format!("{base}/messages?sessionId=unknown"),
        &[("origin", APP), ("content-type", "application/json")],
        &init(),
    )
    .await;
    assert_eq!(status, 404);
    assert_granted(&head, APP, "a message for an unknown session");
    gw.stop().await;
}

#[tokio::test]
async fn other_origins_get_no_grant_at_all() {
    let mut listed = demo_tenant("cors3");
    listed.allowed_origins = vec![APP.into()];
    // Nothing listed, loopback listener: loopback origins only (the Origin check's default).
    let defaults = demo_tenant("cors4");
    let gw = TestGateway::start(config(vec![listed, defaults])).await;
    let listed = gw.url("cors3");
    let defaults = gw.url("cors4");

    for (url, origin) in [
        (&listed, EVIL),
        (&listed, "http://localhost:3000"),
        (&listed, "https://app.example"),
        (&listed, "null"),
        (&defaults, EVIL),
    ] {
        let (status, head) = preflight(url, origin, "POST", "content-type").await;
        assert_eq!(status, 403, "{origin}");
        assert_no_cors(&head, origin);
        let (status, head, _) = send(
            Method::POST,
            url,
            &[
                ("origin", origin),
                ("content-type", "application/json"),
                ("accept", ACCEPT_BOTH),
            ],
            &init(),
        )
        .await;
        assert_eq!(status, 403, "{origin}");
        assert_no_cors(&head, origin);
    }
    let (status, head) = preflight(&listed, "http://app.example/path", "POST", "").await;
    assert_eq!(status, 400, "a malformed Origin");
    assert_no_cors(&head, "malformed");
    let (status, head) = preflight(&defaults, "http://localhost:3000", "POST", "").await;
    assert_eq!(status, 204);
    assert_eq!(
        get(&head, "access-control-allow-origin"),
        Some("http://localhost:3000")
    );
    assert_eq!(live_sessions(&gw, "cors3"), 0);
    assert_eq!(live_sessions(&gw, "cors4"), 0);
    gw.stop().await;
}

#[tokio::test]
async fn a_protected_tenant_answers_preflights_without_a_token_and_exposes_its_challenge() {
    let mut t = demo_tenant("cors5");
    t.allowed_origins = vec![APP.into()];
    t.auth = Some(AuthConfig {
        // Never reached: no token is ever validated here.
        issuer: "http://127.0.0.1:9".into(),
        jwks_url: None,
        audiences: vec![],
        algorithms: vec![JwtAlgorithm::RS256],
        clock_skew: Duration::ZERO,
        required_scopes: vec![],
        scopes_supported: vec![],
        token_type: switchyard::config::TokenType::Any,
    });
    let gw = TestGateway::start(config(vec![t])).await;
    let url = gw.url("cors5");

    let (status, head) = preflight(&url, APP, "POST", "authorization,content-type").await;
    assert_eq!(status, 204, "no token needed for a preflight: {head:?}");
    assert_eq!(
        get(&head, "access-control-allow-headers"),
        Some("authorization,content-type")
    );
    let (status, head, _) = send(
        Method::POST,
        &url,
        &[
            ("origin", APP),
            ("content-type", "application/json"),
            ("accept", ACCEPT_BOTH),
        ],
        &init(),
    )
    .await;
    assert_eq!(status, 401);
    assert!(
        get(&head, "www-authenticate").is_some_and(|c| c.starts_with("Bearer ")),
        "{head:?}"
    );
    assert_granted(&head, APP, "401");
    let (status, head) = preflight(&url, EVIL, "POST", "authorization").await;
    assert_eq!(status, 403);
    assert_no_cors(&head, "another origin");

    // The metadata is public: any origin reads it, `*`, and may preflight it.
    let port = gw.addr.port();
    let metadata =
        format!("http://127.0.0.1:{port}/.well-known/oauth-protected-resource/t/cors5/mcp");
    let (status, head, body) = send(Method::GET, &metadata, &[("origin", EVIL)], "").await;
    assert_eq!(status, 200, "{body}");
    assert_eq!(get(&head, "access-control-allow-origin"), Some("*"));
    assert_eq!(get(&head, "access-control-allow-credentials"), None);
    let doc: Value = serde_json::from_str(&body).expect("metadata JSON");
    assert!(
        doc["resource"]
            .as_str()
            .is_some_and(|r| r.ends_with("/t/cors5/mcp"))
    );
    let (status, head) = preflight(&metadata, EVIL, "GET", "mcp-protocol-version").await;
    assert_eq!(status, 204);
    assert_eq!(get(&head, "access-control-allow-origin"), Some("*"));
    assert_eq!(
        get(&head, "access-control-allow-methods"),
        Some("GET, OPTIONS")
    );
    assert_eq!(
        get(&head, "access-control-allow-headers"),
        Some("mcp-protocol-version")
    );
    gw.stop().await;
}

/// How long a page may take to report (a cold Chromium start included).
const PAGE_REPORT: Duration = Duration::from_secs(60);

#[tokio::test]
async fn a_browser_page_uses_the_gateway_from_an_allowed_origin_only() {
    let dir = TempDir::new("cors-page");
    let script = bundle("browser_client.mjs", &dir);
    let mut pages = PageServer::start(&script, 2).await;
    let (allowed, refused) = (pages.origins[0].clone(), pages.origins[1].clone());

    let mut t = demo_tenant("web");
    t.allowed_origins = vec![allowed.clone()];
    let gw = TestGateway::start(config(vec![t.clone()])).await;
    let endpoint = gw.url("web");

    // From the other origin the SDK gets nothing: its preflight is refused, so the browser
    // never sends the request.
    let browser = Browser::open(&format!("{refused}/?gateway={endpoint}"));
    let report = pages.report(&refused, PAGE_REPORT, &browser).await;
    let console = browser.console();
    browser.close().await;
    assert_eq!(report["phase"], "done", "{report}");
    let error = report["error"].as_str().unwrap_or_default();
    assert!(error.contains("Failed to fetch"), "{report}\n{console}");
    assert!(report["sessionId"].is_null(), "{report}");
    assert!(
        console.contains("blocked by CORS policy"),
        "Chromium names CORS as the reason: {console}"
    );
    assert_eq!(live_sessions(&gw, "web"), 0);

    // From the allowed origin: the whole session.
    let browser = Browser::open(&format!("{allowed}/?gateway={endpoint}"));
    let report = pages.report(&allowed, PAGE_REPORT, &browser).await;
    assert_eq!(
        report["phase"],
        "connected",
        "{report}\n{}",
        browser.console()
    );
    assert!(
        report["sessionId"].as_str().is_some_and(|s| !s.is_empty()),
        "the SDK read Mcp-Session-Id: {report}"
    );
    assert_eq!(report["protocolVersion"], "2025-11-25", "{report}");
    assert_eq!(report["server"], "switchyard-web", "{report}");
    let tools = &report["tools"];
    assert!(
        ["echo", "add", "sleep"]
            .iter()
            .all(|t| tools.as_array().is_some_and(|a| a.contains(&json!(t)))),
        "{report}"
    );
    assert_eq!(report["call"], "slept 600ms", "{report}");
    assert_eq!(
        report["progress"],
        json!([[1, 3], [2, 3], [3, 3]]),
        "the call's progress: {report}"
    );
    assert_eq!(live_sessions(&gw, "web"), 1);

    // A second upstream changes the tenant's tools: the page hears it on its GET stream.
    let mut wider = t.clone();
    wider
        .upstreams
        .push(upstream("more", UpstreamTransport::Stdio(demo_stdio(None))));
    gw.gateway
        .apply(&config(vec![wider]))
        .await
        .expect("reload applies");
    let report = pages.report(&allowed, PAGE_REPORT, &browser).await;
    let console = browser.console();
    browser.close().await;
    assert_eq!(report["phase"], "done", "{report}\n{console}");
    assert!(report["error"].is_null(), "{report}\n{console}");
    assert_eq!(
        report["listChanged"], true,
        "list_changed came on the GET stream: {report}\n{console}"
    );
    assert!(
        report["toolsAfter"]
            .as_array()
            .is_some_and(|a| a.contains(&json!("more__echo"))),
        "{report}"
    );
    assert_eq!(report["terminated"], true, "{report}");
    assert_eq!(
        report["errors"],
        json!([]),
        "no error outside requests (the GET stream's): {report}\n{console}"
    );
    assert_eq!(live_sessions(&gw, "web"), 0, "DELETE ended the session");
    gw.stop().await;
}
