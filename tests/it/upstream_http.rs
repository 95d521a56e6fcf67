//! Streamable HTTP upstreams: a restarted upstream that forgot its sessions (404 from the demo
//! server, 400 from server-everything) is re-initialized transparently; timeouts send a
//! cancellation; an unreachable upstream gets a clear error; unsolicited upstream messages
//! reach the client's GET stream.

use std::time::Duration;

use futures_util::StreamExt;
use serde_json::{Value, json};

use crate::support::client::RawClient;
use crate::support::config::{config, http, tenant, upstream};
use crate::support::gateway::TestGateway;
use crate::support::peers::{HttpPeer, free_port};
use crate::support::{TempDir, eventually, read_trace};
use switchyard::upstream::sse::SseParser;

fn text_of(reply: &Value) -> String {
    reply["result"]["content"][0]["text"]
        .as_str()
        .unwrap_or_else(|| panic!("no text result in {reply}"))
        .to_owned()
}

#[tokio::test]
async fn demo_upstream_restart_404_is_reinitialized() {
    let port = free_port();
    let peer = HttpPeer::demo(port, &[]).await;
    let gw = TestGateway::start(config(vec![tenant(
        "h",
        vec![upstream("demo", http(&peer.url()))],
    )]))
    .await;
    let mut c = RawClient::new(gw.url("h"));
    c.initialize().await;
    let r = c.call_tool("echo", json!({"message": "before"})).await;
    assert_eq!(text_of(r.last()), "before");

    // A new process on the same port knows none of the old sessions (answers 404).
    peer.kill().await;
    let peer = HttpPeer::demo(port, &[]).await;
    let r = c.call_tool("echo", json!({"message": "after"})).await;
    assert_eq!(text_of(r.last()), "after", "{:?}", r.last());
    gw.stop().await;
    peer.kill().await;
}

#[tokio::test]
async fn everything_restart_400_is_reinitialized() {
    let port = free_port();
    let peer = HttpPeer::everything(port).await;
    let gw = TestGateway::start(config(vec![tenant(
        "h",
        vec![upstream("ev", http(&peer.url()))],
    )]))
    .await;
    let mut c = RawClient::new(gw.url("h"));
    c.initialize().await;
    let r = c.call_tool("echo", json!({"message": "before"})).await;
    assert_eq!(text_of(r.last()), "Echo: before");

    // server-everything answers an unknown session with 400, not 404.
    peer.kill().await;
    let peer = HttpPeer::everything(port).await;
    let r = c.call_tool("echo", json!({"message": "after"})).await;
    assert_eq!(text_of(r.last()), "Echo: after", "{:?}", r.last());
    gw.stop().await;
    peer.kill().await;
}

#[tokio::test]
async fn http_upstream_timeout_sends_cancellation() {
    let dir = TempDir::new("http-timeout");
    let trace = dir.path("trace.jsonl");
    let trace_arg = trace.display().to_string();
    let peer = HttpPeer::demo(free_port(), &["--trace", &trace_arg]).await;
    let mut up = upstream("demo", http(&peer.url()));
    up.request_timeout = Duration::from_millis(300);
    let gw = TestGateway::start(config(vec![tenant("h", vec![up])])).await;
    let mut c = RawClient::new(gw.url("h"));
    c.initialize().await;
    let r = c.call_tool("sleep", json!({"ms": 5000})).await;
    assert_eq!(r.last()["error"]["code"], -32001);
    assert_eq!(
        r.last()["error"]["message"],
        "upstream \"demo\" did not answer within 300ms"
    );
    let cancelled = eventually(Duration::from_secs(5), || {
        let msgs = read_trace(&trace);
        let id = msgs
            .iter()
            .find(|m| m["params"]["name"] == "sleep")
            .map(|m| m["id"].clone());
        id.is_some_and(|id| {
            msgs.iter()
                .any(|m| m["method"] == "notifications/cancelled" && m["params"]["requestId"] == id)
        })
    })
    .await;
    assert!(cancelled, "trace: {:?}", read_trace(&trace));
    gw.stop().await;
    peer.kill().await;
}

#[tokio::test]
async fn unreachable_http_upstream_gets_a_clear_error() {
    let port = free_port();
    let gw = TestGateway::start(config(vec![tenant(
        "h",
        vec![upstream(
            "gone",
            http(&format!("http://127.0.0.1:{port}/mcp")),
        )],
    )]))
    .await;
    let mut c = RawClient::new(gw.url("h"));
    c.initialize().await;
    let r = c.call_tool("echo", json!({"message": "x"})).await;
    assert_eq!(r.status, 200);
    let err = &r.last()["error"];
    assert_eq!(err["code"], -32010, "{err}");
    let msg = err["message"].as_str().unwrap_or_default();
    assert!(
        msg.starts_with("upstream \"gone\" is unavailable: connection failed"),
        "{msg}"
    );
    assert_eq!(err["data"]["upstream"], "gone");

    // Once it is there, the same session recovers without reconnecting.
    let peer = HttpPeer::demo(port, &[]).await;
    let r = c.call_tool("echo", json!({"message": "back"})).await;
    assert_eq!(text_of(r.last()), "back", "{:?}", r.last());
    gw.stop().await;
    peer.kill().await;
}

/// server-everything's simulated logging sends `notifications/message` outside any request;
/// the gateway relays them from the upstream's GET stream to the client's GET stream.
#[tokio::test]
async fn unsolicited_upstream_messages_reach_the_get_stream() {
    let peer = HttpPeer::everything(free_port()).await;
    let gw = TestGateway::start(config(vec![tenant(
        "h",
        vec![upstream("ev", http(&peer.url()))],
    )]))
    .await;
    let mut c = RawClient::new(gw.url("h"));
    c.initialize().await;
    let session = c.session.clone().unwrap_or_default();
    let stream = c
        .http
        .get(&c.url)
        .header("accept", "text/event-stream")
        .header("mcp-session-id", &session)
        .send()
        .await
        .expect("GET stream opens");
    assert_eq!(stream.status(), 200);
    let r = c
        .request("logging/setLevel", json!({"level": "debug"}))
        .await;
    assert!(r.last()["result"].is_object(), "{:?}", r.last());
    let r = c.call_tool("toggle-simulated-logging", json!({})).await;
    assert!(r.last()["result"].is_object(), "{:?}", r.last());

    let mut body = stream.bytes_stream();
    let mut parser = SseParser::new(1 << 20);
    let found = tokio::time::timeout(Duration::from_secs(20), async {
        while let Some(Ok(chunk)) = body.next().await {
            parser.push(&chunk);
            while let Ok(Some(ev)) = parser.next_event() {
                if ev.data.is_empty() {
                    continue;
                }
                let msg: Value = serde_json::from_slice(&ev.data).expect("JSON event");
                if msg["method"] == "notifications/message" {
                    return msg;
                }
            }
        }
        Value::Null
    })
    .await
    .expect("a log message arrives on the GET stream within 20s");
    assert!(found["params"]["level"].is_string(), "{found}");
    gw.stop().await;
    peer.kill().await;
}

/// The gateway's `server/discover` probe, refused by a session-based upstream (the demo
/// server answers 400 without a session), is the expected way to find its revision: sessions
/// opened at once (each probes) all work and the gateway's log (a real process, as run) holds
/// no warning. (All but the first refusal used to warn: the level was chosen by whether the
/// upstream's era was decided, and the first answer decided it.)
#[tokio::test]
async fn a_session_based_upstream_refusing_the_version_probe_is_not_a_warning() {
    let peer = HttpPeer::demo(free_port(), &[]).await;
    let dir = TempDir::new("probe-quiet");
    let yaml = format!(
        "tenants:\n  - name: quiet\n    upstreams:\n      - {{name: remote, http: {{url: \"{}\"}}}}\n",
        peer.url()
    );
    let gw = crate::support::process::GatewayProcess::start(&yaml, &dir, "quiet").await;
    let sums = futures_util::future::join_all((0..24).map(|i| {
        let mut c = RawClient::new(gw.url("quiet"));
        async move {
            c.initialize().await;
            let r = c.call_tool("add", json!({"a": i, "b": 40})).await;
            crate::support::client::text(r.last())
        }
    }))
    .await;
    let want: Vec<String> = (0..24).map(|i| (i + 40).to_string()).collect();
    assert_eq!(sums, want);
    let logs = gw.stop().await;
    assert!(logs.contains("session created"), "{logs}");
    let noisy: Vec<&str> = logs
        .lines()
        .filter(|l| l.contains(r#""level":"WARN""#) || l.contains(r#""level":"ERROR""#))
        .collect();
    assert!(
        noisy.is_empty(),
        "warnings on healthy first sessions: {noisy:#?}"
    );
}

/// A stateless client's `tools/call` of the `roots` tool of `get_stream_server.py` (id `id`),
/// with `extra` members in its params (a retry's `requestState` and `inputResponses`).
async fn call_roots(c: &RawClient, id: u64, extra: Value) -> crate::support::client::Reply {
    const V: &str = "2026-07-28";
    let mut params = json!({"name": "roots", "arguments": {}, "_meta": {
        "io.modelcontextprotocol/protocolVersion": V,
        "io.modelcontextprotocol/clientCapabilities": {"roots": {}},
        "io.modelcontextprotocol/clientInfo": {"name": "raw", "version": "1"}}});
    if let (Some(p), Value::Object(more)) = (params.as_object_mut(), extra) {
        p.extend(more);
    }
    let body = json!({"jsonrpc": "2.0", "id": id, "method": "tools/call", "params": params});
    c.post_raw(
        body.to_string(),
        &[
            ("content-type", "application/json"),
            ("accept", crate::support::client::ACCEPT_BOTH),
            ("mcp-protocol-version", V),
            ("mcp-method", "tools/call"),
            ("mcp-name", "roots"),
        ],
    )
    .await
}

/// An upstream whose GET stream never answers (no head: stuck or slow there) holds the first
/// request of a link no longer than the bound (2 s), which is then answered; later requests
/// do not wait again. The wait for the stream is never a hang.
#[tokio::test]
async fn a_get_stream_that_never_answers_holds_the_first_call_for_the_bound_only() {
    let port = free_port();
    let peer = HttpPeer::get_stream_server_with(port, &["--silent-get"]).await;
    let gw = TestGateway::start(config(vec![tenant(
        "g",
        vec![upstream("gs", http(&peer.url()))],
    )]))
    .await;
    let c = RawClient::new(gw.url("g"));
    let started = std::time::Instant::now();
    let r = tokio::time::timeout(Duration::from_secs(15), call_roots(&c, 1, json!({})))
        .await
        .expect("the first call is answered");
    let took = started.elapsed();
    // The tool found no stream open upstream, and says so.
    assert_eq!(text_of(r.last()), "no GET stream", "{:?}", r.last());
    assert!(
        took >= Duration::from_millis(1900) && took < Duration::from_secs(10),
        "held for the bound, then sent: {took:?}"
    );
    let started = std::time::Instant::now();
    let r = call_roots(&c, 2, json!({})).await;
    assert_eq!(text_of(r.last()), "no GET stream", "{:?}", r.last());
    assert!(
        started.elapsed() < Duration::from_millis(1900),
        "a later call does not wait again: {:?}",
        started.elapsed()
    );
    gw.stop().await;
}

/// A session-based upstream that asks its questions on its standalone GET stream (as the
/// Python SDK 1.x's `list_roots()` does), reached by a 2026-07-28 client, which has no stream
/// of its own: the gateway listens on the upstream's GET stream, relates the question to the
/// one call in flight, and the client gets it as that call's `input_required` result.
#[tokio::test]
async fn an_upstream_request_on_its_get_stream_reaches_a_stateless_client() {
    let port = free_port();
    let peer = HttpPeer::get_stream_server(port).await;
    let gw = TestGateway::start(config(vec![tenant(
        "g",
        vec![upstream("gs", http(&peer.url()))],
    )]))
    .await;
    let c = RawClient::new(gw.url("g"));
    let r = tokio::time::timeout(Duration::from_secs(15), call_roots(&c, 1, json!({})))
        .await
        .expect("the question is not left to time out");
    let first = r.last()["result"].clone();
    assert_eq!(first["resultType"], "input_required", "{:?}", r.last());
    let requests = first["inputRequests"].as_object().expect("inputRequests");
    let (key, question) = requests.iter().next().expect("one input request");
    assert_eq!(question["method"], "roots/list", "{question}");
    let answer = json!({
        "requestState": first["requestState"],
        "inputResponses": {key.clone(): {"roots": [{"uri": "file:///work/project", "name": "p"}]}}
    });
    let r = call_roots(&c, 2, answer).await;
    let done = &r.last()["result"];
    assert_eq!(done["resultType"], "complete", "{:?}", r.last());
    assert_eq!(text_of(r.last()), "file:///work/project");
    gw.stop().await;
}
