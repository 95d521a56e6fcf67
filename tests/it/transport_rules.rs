//! Every Streamable HTTP header and lifecycle rule, checked by status code and body over real
//! sockets against a gateway fronting the demo server (stdio child process).

use serde_json::{Value, json};

use crate::support::client::{ACCEPT_BOTH, RawClient};
use crate::support::config::{config, demo_stdio, tenant, upstream};
use crate::support::gateway::TestGateway;
use switchyard::config::UpstreamTransport;

async fn gateway() -> TestGateway {
    TestGateway::start(config(vec![tenant(
        "rules",
        vec![upstream("demo", UpstreamTransport::Stdio(demo_stdio(None)))],
    )]))
    .await
}

fn init_body(id: u64) -> String {
    json!({"jsonrpc": "2.0", "id": id, "method": "initialize", "params": {
        "protocolVersion": "2025-11-25", "capabilities": {},
        "clientInfo": {"name": "t", "version": "0"}}})
    .to_string()
}

/// A transport-level error: the status, `application/json`, a JSON-RPC error with `id: null`.
fn assert_transport_error(
    reply: &crate::support::client::Reply,
    status: u16,
    code: i64,
    text: &str,
) {
    assert_eq!(reply.status, status, "{reply:?}");
    assert_eq!(reply.content_type(), "application/json");
    let body = reply.last();
    assert_eq!(body["jsonrpc"], "2.0");
    assert_eq!(body["id"], Value::Null, "{body}");
    assert_eq!(body["error"]["code"], code, "{body}");
    let message = body["error"]["message"].as_str().unwrap_or_default();
    assert!(
        message.contains(text),
        "message {message:?} should mention {text:?}"
    );
}

#[tokio::test]
async fn post_header_rules() {
    let gw = gateway().await;
    let c = RawClient::new(gw.url("rules"));

    let r = c
        .post_raw(init_body(1), &[("content-type", "application/json")])
        .await;
    assert_transport_error(&r, 406, -32600, "application/json and text/event-stream");
    let r = c
        .post_raw(
            init_body(1),
            &[
                ("content-type", "application/json"),
                ("accept", "application/json"),
            ],
        )
        .await;
    assert_transport_error(&r, 406, -32600, "text/event-stream");
    let r = c
        .post_raw(
            init_body(1),
            &[("content-type", "text/plain"), ("accept", ACCEPT_BOTH)],
        )
        .await;
    assert_transport_error(&r, 415, -32600, "application/json");
    let r = c.post_raw(init_body(1), &[("accept", ACCEPT_BOTH)]).await;
    assert_transport_error(&r, 415, -32600, "Content-Type");

    let json_headers = [
        ("content-type", "application/json"),
        ("accept", ACCEPT_BOTH),
    ];
    let r = c
        .post_raw("{\"jsonrpc\": \"2.0\", \"id\": 1,", &json_headers)
        .await;
    assert_transport_error(&r, 400, -32700, "Parse error");
    let r = c
        .post_raw(
            "[{\"jsonrpc\":\"2.0\",\"id\":1,\"method\":\"ping\"}]",
            &json_headers,
        )
        .await;
    // A batch needs a session of protocol version 2025-03-26 (tests/it/batch.rs).
    assert_transport_error(&r, 400, -32600, "Mcp-Session-Id");
    let r = c
        .post_raw(
            "{\"jsonrpc\":\"1.0\",\"id\":1,\"method\":\"ping\"}",
            &json_headers,
        )
        .await;
    // An invalid request whose id could be read is answered with that id.
    assert_eq!((r.status, r.error_code()), (400, Some(-32600)), "{r:?}");
    assert_eq!(r.last()["id"], 1, "{r:?}");
    let r = c
        .post_raw("{\"jsonrpc\":\"1.0\",\"method\":\"ping\"}", &json_headers)
        .await;
    assert_transport_error(&r, 400, -32600, "jsonrpc");
    let big = format!(
        "{{\"jsonrpc\":\"2.0\",\"id\":1,\"method\":\"ping\",\"params\":{{\"pad\":\"{}\"}}}}",
        "x".repeat(300 * 1024)
    );
    let r = c.post_raw(big, &json_headers).await;
    assert_transport_error(&r, 413, -32600, "262144 bytes");

    gw.stop().await;
}

#[tokio::test]
async fn session_rules() {
    let gw = gateway().await;
    let mut c = RawClient::new(gw.url("rules"));

    // No session yet: anything but initialize is a 400.
    let r = c
        .post(&json!({"jsonrpc":"2.0","id":1,"method":"tools/list"}))
        .await;
    assert_transport_error(&r, 400, -32600, "Mcp-Session-Id header is required");

    let init = c.initialize_only().await;
    assert_eq!(init.content_type(), "application/json");
    let id = c.session.clone().expect("initialize issues Mcp-Session-Id");
    assert!(id.len() >= 32, "at least 128 bits of hex: {id}");
    assert!(
        id.bytes().all(|b| (0x21..=0x7e).contains(&b)),
        "visible ASCII: {id}"
    );
    let result = &init.last()["result"];
    assert_eq!(result["protocolVersion"], "2025-11-25");
    assert_eq!(result["serverInfo"]["name"], "switchyard-rules");
    assert!(result["capabilities"]["tools"].is_object(), "{result}");

    // A second session gets a different id.
    let mut other = RawClient::new(gw.url("rules"));
    other.initialize_only().await;
    assert_ne!(other.session, c.session);

    // Lifecycle gating: ping is allowed before notifications/initialized, nothing else.
    let r = c.request("ping", json!({})).await;
    assert_eq!(r.status, 200);
    assert_eq!(r.last()["result"], json!({}));
    let r = c.request("tools/list", json!({})).await;
    assert_eq!(r.status, 200);
    assert_eq!(r.error_code(), Some(-32600));
    assert!(
        r.last()["error"]["message"]
            .as_str()
            .unwrap_or("")
            .contains("notifications/initialized")
    );
    let r = c
        .post(&json!({"jsonrpc":"2.0","method":"notifications/initialized"}))
        .await;
    assert_eq!(r.status, 202);
    assert!(r.body.is_empty());
    let r = c.request("tools/list", json!({})).await;
    assert_eq!(r.status, 200, "{r:?}");
    assert!(r.last()["result"]["tools"].is_array());

    // initialize again on a session, or with a session header, is refused.
    let r = c
        .post(&json!({"jsonrpc":"2.0","id":99,"method":"initialize","params":{"protocolVersion":"2025-11-25","capabilities":{},"clientInfo":{"name":"x","version":"0"}}}))
        .await;
    assert_eq!(r.status, 400);
    assert_eq!(r.last()["id"], 99);

    // Unknown method: a JSON-RPC error with the request's id.
    let r = c.request("no/such/method", json!({})).await;
    assert_eq!(r.status, 200);
    assert_eq!(r.error_code(), Some(-32601));

    // Unknown and malformed session ids.
    let mut stranger = RawClient::new(gw.url("rules"));
    stranger.session = Some("0".repeat(48));
    let r = stranger.request("ping", json!({})).await;
    assert_transport_error(&r, 404, -32001, "Session not found");

    // Responses from the client to unknown requests are accepted and dropped.
    let r = c
        .post(&json!({"jsonrpc":"2.0","id":"sy-999","result":{}}))
        .await;
    assert_eq!(r.status, 202);

    // DELETE ends the session; afterwards it is 404 everywhere.
    let r = c.delete().await;
    assert_eq!(r.status, 200);
    let r = c.request("ping", json!({})).await;
    assert_transport_error(&r, 404, -32001, "Session not found");
    let r = c.delete().await;
    assert_transport_error(&r, 404, -32001, "Session not found");
    let mut no_session = RawClient::new(gw.url("rules"));
    no_session.session = None;
    let r = no_session.delete().await;
    assert_transport_error(&r, 400, -32600, "Mcp-Session-Id");

    gw.stop().await;
}

#[tokio::test]
async fn protocol_version_header_rules() {
    let gw = gateway().await;
    let mut c = RawClient::new(gw.url("rules"));
    c.initialize().await;

    for good in ["2025-11-25", "2025-06-18", "2025-03-26"] {
        c.protocol_version = good.into();
        let r = c.request("ping", json!({})).await;
        assert_eq!(r.status, 200, "{good}");
    }
    for bad in ["1999-01-01", "latest"] {
        c.protocol_version = bad.into();
        let r = c.request("ping", json!({})).await;
        assert_eq!(r.status, 400, "{bad}: {r:?}");
        let body = r.last();
        assert_eq!(body["error"]["code"], -32022);
        assert_eq!(body["error"]["data"]["requested"], bad);
        assert_eq!(
            body["error"]["data"]["supported"],
            json!([
                "2026-07-28",
                "2025-11-25",
                "2025-06-18",
                "2025-03-26",
                "2024-11-05"
            ])
        );
    }
    // Without the header the session's negotiated version applies.
    let headers = [
        ("content-type", "application/json"),
        ("accept", ACCEPT_BOTH),
        ("mcp-session-id", c.session.as_deref().unwrap_or_default()),
    ];
    let r = c
        .post_raw(
            "{\"jsonrpc\":\"2.0\",\"id\":5,\"method\":\"ping\"}",
            &headers,
        )
        .await;
    assert_eq!(r.status, 200);

    gw.stop().await;
}

/// A sessionless `server/discover` in the stateless revision without its `_meta`: a clear
/// Invalid params error (tests/it/stateless.rs covers the full discover).
#[tokio::test]
async fn server_discover_gets_a_fallback_error() {
    let gw = gateway().await;
    let c = RawClient::new(gw.url("rules"));
    let body = "{\"jsonrpc\":\"2.0\",\"id\":1,\"method\":\"server/discover\",\"params\":{}}";
    let r = c
        .post_raw(
            body,
            &[
                ("content-type", "application/json"),
                ("accept", ACCEPT_BOTH),
                ("mcp-protocol-version", "2026-07-28"),
                ("mcp-method", "server/discover"),
            ],
        )
        .await;
    assert_eq!(r.status, 400);
    let msg = r.last();
    assert_eq!(msg["id"], 1);
    assert_eq!(msg["error"]["code"], -32602, "{msg}");
    gw.stop().await;
}

#[tokio::test]
async fn get_and_other_methods() {
    let gw = gateway().await;
    let mut c = RawClient::new(gw.url("rules"));
    c.initialize().await;
    let session = c.session.clone().unwrap_or_default();

    let r = c.get_raw(&[("mcp-session-id", &session)]).await;
    assert_transport_error(&r, 406, -32600, "text/event-stream");
    let r = c
        .get_raw(&[("accept", "application/json"), ("mcp-session-id", &session)])
        .await;
    assert_transport_error(&r, 406, -32600, "text/event-stream");
    let r = c.get_raw(&[("accept", "text/event-stream")]).await;
    assert_transport_error(&r, 400, -32600, "Mcp-Session-Id");
    let r = c
        .get_raw(&[("accept", "text/event-stream"), ("mcp-session-id", "nope")])
        .await;
    assert_transport_error(&r, 404, -32001, "Session not found");
    let r = c
        .get_raw(&[
            ("accept", "text/event-stream"),
            ("mcp-session-id", &session),
            ("mcp-protocol-version", "2099-01-01"),
        ])
        .await;
    assert_eq!(r.status, 400);
    let r = c
        .get_raw(&[
            ("accept", "text/event-stream"),
            ("mcp-session-id", &session),
        ])
        .await;
    assert_eq!(r.status, 200);
    assert_eq!(r.content_type(), "text/event-stream");
    assert_eq!(r.header("x-accel-buffering"), Some("no"));

    let put = c
        .http
        .put(&c.url)
        .body("{}")
        .send()
        .await
        .expect("PUT reaches the gateway");
    assert_eq!(put.status(), 405);
    assert_eq!(
        put.headers().get("allow").and_then(|v| v.to_str().ok()),
        Some("GET, POST, DELETE")
    );
    let elsewhere = c
        .http
        .post(format!("http://{}/t/nope/mcp", gw.addr))
        .send()
        .await
        .expect("reaches the gateway");
    assert_eq!(elsewhere.status(), 404);
    let health = c
        .http
        .get(format!("http://{}/healthz", gw.addr))
        .send()
        .await
        .expect("reaches the gateway");
    assert_eq!(health.status(), 200);
    gw.stop().await;
}

/// Sessions expire after the TTL without activity; an open GET stream keeps one alive.
#[tokio::test]
async fn idle_sessions_expire_but_listening_ones_stay() {
    let mut cfg = config(vec![tenant(
        "rules",
        vec![upstream("demo", UpstreamTransport::Stdio(demo_stdio(None)))],
    )]);
    cfg.sessions.ttl = std::time::Duration::from_millis(300);
    let gw = TestGateway::start(cfg).await;
    let mut idle = RawClient::new(gw.url("rules"));
    idle.initialize().await;
    let mut listening = RawClient::new(gw.url("rules"));
    listening.initialize().await;
    let stream = listening
        .http
        .get(&listening.url)
        .header("accept", "text/event-stream")
        .header(
            "mcp-session-id",
            listening.session.clone().unwrap_or_default(),
        )
        .send()
        .await
        .expect("GET stream");
    assert_eq!(stream.status(), 200);

    tokio::time::sleep(std::time::Duration::from_millis(1200)).await;
    let r = idle.request("ping", json!({})).await;
    assert_transport_error(&r, 404, -32001, "Session not found");
    let r = listening.request("ping", json!({})).await;
    assert_eq!(r.status, 200, "a listening session is not idle: {r:?}");
    drop(stream);
    gw.stop().await;
}
