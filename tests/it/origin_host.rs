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
