//! DNS-rebinding protection: Host validation and Origin validation per tenant, with the
//! loopback defaults and with configured allowlists. Refusals are 403 with a JSON-RPC error
//! body without id.

use serde_json::json;

use crate::support::client::{ACCEPT_BOTH, Reply};
use crate::support::config::{config, demo_stdio, tenant, upstream};
use crate::support::gateway::TestGateway;
use crate::support::rawhttp;
use switchyard::config::UpstreamTransport;

fn init() -> String {
    json!({"jsonrpc": "2.0", "id": 1, "method": "initialize", "params": {
        "protocolVersion": "2025-11-25", "capabilities": {}, "clientInfo": {"name": "t", "version": "0"}}})
    .to_string()
}

async fn post(url: &str, host: &str, origin: Option<&str>) -> Reply {
    let mut headers = vec![
        ("Host", host),
        ("content-type", "application/json"),
        ("accept", ACCEPT_BOTH),
    ];
    if let Some(o) = origin {
        headers.push(("Origin", o));
    }
    rawhttp::exchange(url, "POST", &headers, init().as_bytes()).await
}

fn assert_forbidden(r: &Reply, what: &str) {
    assert_eq!(r.status, 403, "{what}: {r:?}");
    assert_eq!(r.last()["id"], serde_json::Value::Null);
    assert!(
        r.last()["error"]["message"]
            .as_str()
            .unwrap_or("")
            .contains(what),
        "{:?}",
        r.last()
    );
}

#[tokio::test]
async fn loopback_defaults_accept_local_hosts_and_origins_only() {
    let gw = TestGateway::start(config(vec![tenant(
        "local",
        vec![upstream("demo", UpstreamTransport::Stdio(demo_stdio(None)))],
    )]))
    .await;
    let url = gw.url("local");
    let port = gw.addr.port();
    for host in [
        format!("127.0.0.1:{port}"),
        format!("localhost:{port}"),
        "[::1]:1".into(),
        "localhost".into(),
    ] {
        let r = post(&url, &host, None).await;
        assert_eq!(r.status, 200, "{host}: {r:?}");
    }
    for host in [
        "evil.example.com",
        "evil.example.com:80",
        "127.0.0.1.evil.example",
        "localhost.evil",
    ] {
        let r = post(&url, host, None).await;
        assert_forbidden(&r, "Host");
    }
    let host = format!("127.0.0.1:{port}");
    for origin in [
        "http://localhost:3000",
        "https://127.0.0.1",
        &format!("http://127.0.0.1:{port}"),
    ] {
        let r = post(&url, &host, Some(origin)).await;
        assert_eq!(r.status, 200, "{origin}: {r:?}");
    }
    for origin in [
        "http://evil.example.com",
        "null",
        "http://localhost.evil.example",
    ] {
        let r = post(&url, &host, Some(origin)).await;
        assert_forbidden(&r, "Origin");
    }
    gw.stop().await;
}

#[tokio::test]
async fn configured_allowlists_replace_the_defaults() {
    let mut t = tenant(
        "pub",
        vec![upstream("demo", UpstreamTransport::Stdio(demo_stdio(None)))],
    );
    t.allowed_hosts = vec!["mcp.example.com".into(), "127.0.0.1:9".into()];
    t.allowed_origins = vec!["https://app.example.com".into()];
    let gw = TestGateway::start(config(vec![t])).await;
    let url = gw.url("pub");
    for host in [
        "mcp.example.com",
        "mcp.example.com:443",
        "MCP.Example.com",
        "127.0.0.1:9",
    ] {
        assert_eq!(post(&url, host, None).await.status, 200, "{host}");
    }
    for host in [
        "localhost",
        &format!("127.0.0.1:{}", gw.addr.port()),
        "other.example.com",
    ] {
        assert_forbidden(&post(&url, host, None).await, "Host");
    }
    let r = post(&url, "mcp.example.com", Some("https://app.example.com")).await;
    assert_eq!(r.status, 200);
    // Same origin as the request is always fine.
    let r = post(&url, "mcp.example.com", Some("http://mcp.example.com")).await;
    assert_eq!(r.status, 200);
    let r = post(&url, "mcp.example.com", Some("http://localhost:3000")).await;
    assert_forbidden(&r, "Origin");
    gw.stop().await;
}

fn assert_bad_request(r: &Reply, what: &str) {
    assert_eq!(r.status, 400, "{what}: {r:?}");
    assert_eq!(r.last()["id"], serde_json::Value::Null, "{what}");
    assert_eq!(r.last()["error"]["code"], -32600, "{what}");
}

fn local_gateway_config() -> switchyard::config::Config {
    config(vec![tenant(
        "local",
        vec![upstream("demo", UpstreamTransport::Stdio(demo_stdio(None)))],
    )])
}

/// RFC 9112 §3.2: a Host that is not a valid `host[:port]` is a 400, not something to match
/// leniently (a port-less prefix like `localhost:evil.example` used to pass as `localhost`).
#[tokio::test]
async fn malformed_hosts_are_refused_with_400() {
    let gw = TestGateway::start(local_gateway_config()).await;
    let url = gw.url("local");
    let port = gw.addr.port();
    for host in [
        "localhost:evil.example".to_owned(),
        "127.0.0.1:evil.example".to_owned(),
        "[::1]evil.example".to_owned(),
        "[::1]:evil".to_owned(),
        format!("user@localhost:{port}"),
        format!("localhost:{port}@evil.example"),
        "localhost:".to_owned(),
        "localhost:0".to_owned(),
        "localhost:65536".to_owned(),
        "localhost:+80".to_owned(),
        format!("localhost:{port}:{port}"),
        "localhost/t/local/mcp".to_owned(),
        "::1".to_owned(),
        "[::1".to_owned(),
        "[localhost]".to_owned(),
        "local host".to_owned(),
        ".localhost".to_owned(),
        "localhost..".to_owned(),
        "127.1".to_owned(),
        "".to_owned(),
    ] {
        let r = post(&url, &host, None).await;
        assert_bad_request(&r, &format!("Host {host:?}"));
        assert!(
            r.last()["error"]["message"]
                .as_str()
                .unwrap_or("")
                .contains("Host"),
            "{host:?}: {:?}",
            r.last()
        );
    }
    gw.stop().await;
}

#[tokio::test]
async fn mapped_and_trailing_dot_loopback_forms_count_as_loopback() {
    let gw = TestGateway::start(local_gateway_config()).await;
    let url = gw.url("local");
    let port = gw.addr.port();
    for host in [
        format!("[::ffff:127.0.0.1]:{port}"),
        "[::FFFF:7f00:1]".to_owned(),
        format!("localhost.:{port}"),
        "LocalHost".to_owned(),
    ] {
        let r = post(&url, &host, None).await;
        assert_eq!(r.status, 200, "{host}: {r:?}");
    }
    let host = format!("127.0.0.1:{port}");
    for origin in ["http://[::ffff:127.0.0.1]:3000", "http://localhost.:3000"] {
        let r = post(&url, &host, Some(origin)).await;
        assert_eq!(r.status, 200, "{origin}: {r:?}");
    }
    // Mapped addresses outside loopback are not.
    assert_forbidden(&post(&url, "[::ffff:10.0.0.1]", None).await, "Host");
    gw.stop().await;
}

#[tokio::test]
async fn malformed_origins_and_repeated_security_headers_are_400() {
    let gw = TestGateway::start(local_gateway_config()).await;
    let url = gw.url("local");
    let host = format!("127.0.0.1:{}", gw.addr.port());
    for origin in [
        "http://localhost:evil.example",
        "http://[::1]evil.example",
        "http://user@localhost",
        "http://localhost:3000/path",
        "http://localhost:0",
        "http://",
    ] {
        let r = post(&url, &host, Some(origin)).await;
        assert_bad_request(&r, &format!("Origin {origin:?}"));
    }
    let base = [
        ("content-type", "application/json"),
        ("accept", ACCEPT_BOTH),
    ];
    let repeated: [(&str, [(&str, &str); 2]); 3] = [
        ("Host", [("Host", &host), ("Host", &host)]),
        (
            "Origin",
            [
                ("Origin", "http://localhost:3000"),
                ("Origin", "http://localhost:3000"),
            ],
        ),
        (
            "Origin",
            [
                ("Origin", "http://localhost:3000"),
                ("Origin", "http://evil.example"),
            ],
        ),
    ];
    for (name, pair) in repeated {
        let mut headers = base.to_vec();
        headers.extend_from_slice(&pair);
        if name != "Host" {
            headers.push(("Host", &host));
        }
        let r = rawhttp::exchange(&url, "POST", &headers, init().as_bytes()).await;
        assert_bad_request(&r, &format!("two {name} headers: {pair:?}"));
    }
    gw.stop().await;
}

/// An absolute-form request target names the host itself (RFC 9112 §3.2.2); one that differs
/// from the Host header is refused rather than trusting either.
#[tokio::test]
async fn an_absolute_target_must_agree_with_the_host_header() {
    let gw = TestGateway::start(local_gateway_config()).await;
    let authority = gw.addr.to_string();
    let headers = [
        ("Host", authority.as_str()),
        ("content-type", "application/json"),
        ("accept", ACCEPT_BOTH),
    ];
    let forged = rawhttp::exchange_target(
        &authority,
        "http://evil.example/t/local/mcp",
        "POST",
        &headers,
        init().as_bytes(),
    )
    .await;
    assert_bad_request(&forged, "absolute target naming another host");
    let same = rawhttp::exchange_target(
        &authority,
        &format!("http://{authority}/t/local/mcp"),
        "POST",
        &headers,
        init().as_bytes(),
    )
    .await;
    assert_eq!(same.status, 200, "{same:?}");
    gw.stop().await;
}

/// The RFC 9728 document is served under the same Host rules as the endpoint: a forged Host
/// cannot make the gateway name a resource on the attacker's host.
#[tokio::test]
async fn protected_resource_metadata_obeys_the_host_rules() {
    let auth = switchyard::config::AuthConfig {
        issuer: "http://127.0.0.1:9".into(),
        jwks_url: None,
        audiences: vec![],
        algorithms: vec![switchyard::config::JwtAlgorithm::ES256],
        clock_skew: std::time::Duration::ZERO,
        required_scopes: vec![],
        scopes_supported: vec![],
        token_type: switchyard::config::TokenType::Any,
    };
    let mut local = tenant(
        "local",
        vec![upstream("demo", UpstreamTransport::Stdio(demo_stdio(None)))],
    );
    local.auth = Some(auth.clone());
    let mut public = tenant(
        "pub",
        vec![upstream("demo", UpstreamTransport::Stdio(demo_stdio(None)))],
    );
    public.auth = Some(auth);
    public.allowed_hosts = vec!["mcp.example.com".into()];
    public.resource = Some("https://mcp.example.com/t/pub/mcp".into());
    let gw = TestGateway::start(config(vec![local, public])).await;
    let authority = gw.addr.to_string();
    let get = |path: &'static str, host: String| {
        let authority = authority.clone();
        async move {
            rawhttp::exchange_target(
                &authority,
                &format!("/.well-known/oauth-protected-resource{path}"),
                "GET",
                &[("Host", &host)],
                b"",
            )
            .await
        }
    };
    let r = get("/t/local/mcp", authority.clone()).await;
    assert_eq!(r.status, 200, "{r:?}");
    assert_eq!(
        r.last()["resource"],
        format!("http://{authority}/t/local/mcp")
    );
    let r = get("/t/local/mcp", "evil.example".into()).await;
    assert_forbidden(&r, "Host");
    let r = get("/t/local/mcp", "localhost:evil.example".into()).await;
    assert_bad_request(&r, "malformed Host");

    let r = get("/t/pub/mcp", "mcp.example.com".into()).await;
    assert_eq!(r.status, 200, "{r:?}");
    assert_eq!(r.last()["resource"], "https://mcp.example.com/t/pub/mcp");
    let r = get("/t/pub/mcp", "evil.example".into()).await;
    assert_forbidden(&r, "Host");
    gw.stop().await;
}
