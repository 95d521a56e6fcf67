//! Upstreams of the stateless revision (2026-07-28) behind the gateway: found with
//! `server/discover`, spoken to without a handshake. Their `input_required` results pass
//! through to stateless clients (the upstream's `requestState` wrapped by the gateway) and are
//! turned into server-to-client requests for session-based clients (the gateway retries the
//! request with the answers). Peers: a server of the official Python SDK 2.x, the official
//! Python and TypeScript v2 SDK clients, and the project's fixture run with `--stateless`.

use serde_json::{Value, json};

use crate::support::client::{ACCEPT_BOTH, RawClient};
use crate::support::config::{config, demo_server_exe, http, stdio, tenant, upstream};
use crate::support::gateway::TestGateway;
use crate::support::peers::{HttpPeer, Sdk, free_port, run_client};
use switchyard::config::{StdioSharing, UpstreamTransport};

const V: &str = "2026-07-28";

/// Checks a `roundtrips` report against the Python SDK server's answers.
fn assert_roundtrips(report: &Value, label: &str, version: &str) {
    assert_eq!(report["protocolVersion"], version, "{report}");
    let sampling = report["sampling"].as_str().unwrap_or_default();
    assert!(
        sampling.contains(&format!("LLM sampling result: sampled by {label}")),
        "{report}"
    );
    assert_eq!(
        report["samplingRequest"],
        format!("ping from {label}"),
        "{report}"
    );
    let elicitation = report["elicitation"].as_str().unwrap_or_default();
    assert!(
        elicitation.contains(&format!("elicited name: Ada {label}")),
        "{report}"
    );
}

#[tokio::test]
async fn sdk_clients_of_every_era_reach_a_python_sdk_2026_upstream() {
    let peer = HttpPeer::python_server(free_port()).await;
    let gw = TestGateway::start(config(vec![tenant(
        "py",
        vec![upstream("py", http(&peer.url()))],
    )]))
    .await;
    let url = gw.url("py");
    // Stateless clients: the upstream's input requests pass through (auto discovers 2026).
    for mode in ["auto", V] {
        let report = run_client(Sdk::Python, &url, "roundtrips", &["--mode", mode]).await;
        assert_roundtrips(&report, "python", V);
    }
    let report = run_client(Sdk::TsV2, &url, "roundtrips", &[]).await;
    assert_roundtrips(&report, "ts-sdk-v2", V);
    // Session-based clients: the gateway asks them and retries for them.
    let report = run_client(Sdk::Python, &url, "roundtrips", &["--mode", "legacy"]).await;
    assert_roundtrips(&report, "python", "2025-11-25");
    let report = run_client(Sdk::TsV1, &url, "roundtrips", &[]).await;
    assert_roundtrips(&report, "ts-sdk-v1", "2025-11-25");
    gw.stop().await;
    peer.kill().await;
}

fn meta() -> Value {
    json!({
        "io.modelcontextprotocol/protocolVersion": V,
        "io.modelcontextprotocol/clientCapabilities": {"elicitation": {}},
        "io.modelcontextprotocol/clientInfo": {"name": "raw", "version": "1"},
    })
}

async fn call(c: &RawClient, id: u64, params: Value) -> Value {
    let body = json!({"jsonrpc": "2.0", "id": id, "method": "tools/call", "params": params});
    let name = params["name"].as_str().unwrap_or_default().to_owned();
    let r = c
        .post_raw(
            body.to_string(),
            &[
                ("content-type", "application/json"),
                ("accept", ACCEPT_BOTH),
                ("mcp-protocol-version", V),
                ("mcp-method", "tools/call"),
                ("mcp-name", &name),
            ],
        )
        .await;
    r.last().clone()
}

#[tokio::test]
async fn an_upstream_request_state_reaches_the_client_wrapped_and_bound() {
    let peer = HttpPeer::python_server(free_port()).await;
    let gw = TestGateway::start(config(vec![tenant(
        "py",
        vec![upstream("py", http(&peer.url()))],
    )]))
    .await;
    let c = RawClient::new(gw.url("py"));
    let tool = "trigger-elicitation-request";
    let first = call(
        &c,
        1,
        json!({"name": tool, "arguments": {}, "_meta": meta()}),
    )
    .await;
    let result = &first["result"];
    assert_eq!(result["resultType"], "input_required", "{first}");
    let (key, request) = result["inputRequests"]
        .as_object()
        .and_then(|m| m.iter().next())
        .expect("one input request");
    assert_eq!(request["method"], "elicitation/create", "{first}");
    let state = result["requestState"].as_str().expect("a requestState");
    // The SDK's own tokens start with its format prefix; the client sees the gateway's.
    assert!(
        !state.starts_with("v1."),
        "the upstream's state leaked: {state}"
    );

    let answer = json!({ key: {"action": "accept", "content": {"name": "Zoe"}} });
    // Altered, or sent with another request: refused by the gateway.
    let tampered = format!("{state}x");
    let r = call(
        &c,
        2,
        json!({"name": tool, "arguments": {}, "_meta": meta(),
               "inputResponses": answer, "requestState": tampered}),
    )
    .await;
    assert_eq!(r["error"]["code"], -32602, "{r}");
    let r = call(
        &c,
        3,
        json!({"name": "echo", "arguments": {"message": "x"}, "_meta": meta(),
               "inputResponses": answer, "requestState": state}),
    )
    .await;
    assert_eq!(r["error"]["code"], -32602, "{r}");

    let done = call(
        &c,
        4,
        json!({"name": tool, "arguments": {}, "_meta": meta(),
               "inputResponses": answer, "requestState": state}),
    )
    .await;
    assert_eq!(done["id"], 4, "{done}");
    assert_eq!(done["result"]["resultType"], "complete", "{done}");
    assert!(done.to_string().contains("elicited name: Zoe"), "{done}");
    gw.stop().await;
    peer.kill().await;
}

#[tokio::test]
async fn a_session_based_client_goes_through_multi_round_input_of_a_stateless_stdio_upstream() {
    let mut s = stdio(
        demo_server_exe().display().to_string(),
        &["--stdio", "--conformance", "--stateless"],
    );
    s.sharing = StdioSharing::PerSession;
    let gw = TestGateway::start(config(vec![tenant(
        "fx",
        vec![upstream("fixture", UpstreamTransport::Stdio(s))],
    )]))
    .await;
    let report = run_client(
        Sdk::Python,
        &gw.url("fx"),
        "multiround",
        &["--mode", "legacy"],
    )
    .await;
    assert_eq!(report["protocolVersion"], "2025-11-25", "{report}");
    let one = report["test_input_required_result_elicitation"]
        .as_str()
        .unwrap_or_default();
    assert!(one.contains("Hello, Ada python!"), "{report}");
    let two = report["test_input_required_result_multi_round"]
        .as_str()
        .unwrap_or_default();
    assert!(two.contains("Ada python likes blue"), "{report}");
    assert_eq!(
        report["elicitationMessages"],
        json!([
            "What is your name?",
            "Step 1: What is your name?",
            "Step 2: What is your favorite color?"
        ]),
        "{report}"
    );
    gw.stop().await;
}

/// A session-based client's `logging/setLevel` in front of a 2026-07-28 upstream (which has no
/// such method): answered by the gateway, kept in the session, and sent as `_meta` logLevel on
/// every request, so the upstream logs only when (and at the level) the client asked.
#[tokio::test]
async fn log_level_reaches_a_stateless_upstream_in_meta() {
    let peer = HttpPeer::demo(free_port(), &["--conformance", "--stateless"]).await;
    let (gw, c) = session_behind_gateway(&peer.url()).await;
    let logs = |r: &crate::support::client::Reply| {
        r.messages
            .iter()
            .filter(|m| m["method"] == "notifications/message")
            .count()
    };
    let call = || c.call_tool("test_tool_with_logging", json!({}));

    // Not asked for: the upstream sends no log messages.
    let r = call().await;
    assert!(r.last()["result"].is_object(), "{:?}", r.messages);
    assert_eq!(logs(&r), 0, "{:?}", r.messages);
    // Asked for at info: the three info messages come on the call's stream.
    let r = c
        .request("logging/setLevel", json!({"level": "info"}))
        .await;
    assert_eq!(r.last()["result"], json!({}), "{:?}", r.last());
    let r = call().await;
    assert_eq!(logs(&r), 3, "{:?}", r.messages);
    // Above info: none again.
    let r = c
        .request("logging/setLevel", json!({"level": "error"}))
        .await;
    assert_eq!(r.last()["result"], json!({}), "{:?}", r.last());
    let r = call().await;
    assert_eq!(logs(&r), 0, "{:?}", r.messages);
    // An error the upstream answers with a 4xx status (404 for an unknown method on this
    // revision) is the request's answer, not an unavailable upstream.
    let r = c.request("no/such/method", json!({})).await;
    assert_eq!(r.error_code(), Some(-32601), "{:?}", r.last());
    gw.stop().await;
    peer.kill().await;
}

/// A 2026-07-28 upstream has no GET stream: the gateway keeps a `subscriptions/listen` open
/// on it while its clients listen, so a tool added at run time reaches a session-based
/// client's GET stream as `notifications/tools/list_changed` and the cached list is
/// refreshed.
#[tokio::test]
async fn list_changes_of_a_stateless_upstream_reach_listening_clients() {
    let peer = HttpPeer::python_server(free_port()).await;
    let (gw, c) = session_behind_gateway(&peer.url()).await;
    let before =
        crate::support::client::tool_names(c.request("tools/list", json!({})).await.last());
    assert!(
        before.contains("add-tool") && !before.contains("fresh"),
        "{before:?}"
    );
    let mut stream = get_stream(&c).await;
    assert_eq!(stream.status(), 200);
    // The subscription is opened when the client starts listening: give it a moment.
    tokio::time::sleep(std::time::Duration::from_millis(500)).await;
    let r = c.call_tool("add-tool", json!({"name": "fresh"})).await;
    assert!(r.last()["result"].is_object(), "{:?}", r.last());
    let line = crate::cluster::read_until(
        &mut stream,
        "notifications/tools/list_changed",
        std::time::Duration::from_secs(10),
    )
    .await;
    assert!(line.is_some(), "no list_changed on the GET stream");
    let after = crate::support::client::tool_names(c.request("tools/list", json!({})).await.last());
    assert!(after.contains("fresh"), "{after:?}");
    let r = c.call_tool("fresh", json!({})).await;
    assert!(
        r.last().to_string().contains("fresh called"),
        "{:?}",
        r.last()
    );
    gw.stop().await;
    peer.kill().await;
}

/// On 2026-07-28 over HTTP, closing a request's response stream is its cancellation: a
/// session-based client's `notifications/cancelled` makes the gateway drop the upstream
/// exchange (the upstream sees the disconnect), and no `notifications/cancelled` is posted.
#[tokio::test]
async fn cancelling_towards_a_stateless_http_upstream_closes_its_stream() {
    let dir = crate::support::TempDir::new("cancel-stateless");
    let trace = dir.path("trace.jsonl");
    let trace_arg = trace.display().to_string();
    let peer = HttpPeer::demo(free_port(), &["--stateless", "--trace", &trace_arg]).await;
    let (gw, c) = session_behind_gateway(&peer.url()).await;
    let call = json!({"jsonrpc": "2.0", "id": 50, "method": "tools/call", "params": {
        "name": "sleep", "arguments": {"ms": 20000, "steps": 200},
        "_meta": {"progressToken": "slow"}}});
    let mut resp = c.post_open(&call).await;
    let progress = crate::cluster::read_until(
        &mut resp,
        "notifications/progress",
        std::time::Duration::from_secs(10),
    )
    .await;
    assert!(progress.is_some(), "the slow call is under way");
    let r = c
        .post(
            &json!({"jsonrpc": "2.0", "method": "notifications/cancelled",
                      "params": {"requestId": 50, "reason": "changed my mind"}}),
        )
        .await;
    assert_eq!(r.status, 202, "{r:?}");
    let lines = || crate::support::read_trace(&trace);
    let closed = crate::support::eventually(std::time::Duration::from_secs(10), || {
        lines()
            .iter()
            .any(|l| l["cancelled_by_disconnect"] == json!(true))
    })
    .await;
    assert!(closed, "the upstream saw no disconnect: {:?}", lines());
    assert!(
        !lines()
            .iter()
            .any(|l| l["method"] == "notifications/cancelled"),
        "{:?}",
        lines()
    );
    gw.stop().await;
    peer.kill().await;
}

/// A 2026-07-28 upstream has no `resources/subscribe`: a session-based client's subscription
/// is answered by the gateway and followed through its `subscriptions/listen` (renewed with
/// the resource), so the upstream's update reaches the client's GET stream; after
/// unsubscribing, no more updates come.
#[tokio::test]
async fn resource_subscriptions_reach_a_stateless_upstream_through_listen() {
    let peer = HttpPeer::python_server(free_port()).await;
    let (gw, c) = session_behind_gateway(&peer.url()).await;
    let mut stream = get_stream(&c).await;
    assert_eq!(stream.status(), 200);
    let r = c
        .request("resources/subscribe", json!({"uri": "res://counter"}))
        .await;
    assert_eq!(r.last()["result"], json!({}), "{:?}", r.last());
    // The renewed subscription is opened in the background: touch until an update arrives.
    let mut update = None;
    for _ in 0..10 {
        let r = c.call_tool("touch", json!({})).await;
        assert!(r.last()["result"].is_object(), "{:?}", r.last());
        update = crate::cluster::read_until(
            &mut stream,
            "notifications/resources/updated",
            std::time::Duration::from_millis(500),
        )
        .await;
        if update.is_some() {
            break;
        }
    }
    let update = update.expect("no resources/updated on the GET stream");
    assert!(update.contains("res://counter"), "{update}");
    let r = c
        .request("resources/unsubscribe", json!({"uri": "res://counter"}))
        .await;
    assert_eq!(r.last()["result"], json!({}), "{:?}", r.last());
    tokio::time::sleep(std::time::Duration::from_millis(500)).await;
    let r = c.call_tool("touch", json!({})).await;
    assert!(r.last()["result"].is_object(), "{:?}", r.last());
    let late = crate::cluster::read_until(
        &mut stream,
        "notifications/resources/updated",
        std::time::Duration::from_secs(1),
    )
    .await;
    assert!(late.is_none(), "an update after unsubscribing: {late:?}");
    gw.stop().await;
    peer.kill().await;
}

/// Opens the session's GET stream (the client listens for what the server sends unasked).
async fn get_stream(c: &RawClient) -> reqwest::Response {
    let headers: Vec<(&str, String)> = c
        .standard_headers()
        .into_iter()
        .map(|(k, v)| match k {
            "accept" => (k, "text/event-stream".to_owned()),
            _ => (k, v),
        })
        .collect();
    let h: Vec<(&str, &str)> = headers.iter().map(|(k, v)| (*k, v.as_str())).collect();
    c.get_stream(&h).await
}

/// A gateway fronting the HTTP upstream at `url` alone, and a session-based (2025-11-25) client
/// with its session open.
async fn session_behind_gateway(url: &str) -> (TestGateway, RawClient) {
    let gw = TestGateway::start(config(vec![tenant("up", vec![upstream("up", http(url))])])).await;
    let mut c = RawClient::new(gw.url("up"));
    c.protocol_version = "2025-11-25".into();
    c.initialize().await;
    (gw, c)
}
