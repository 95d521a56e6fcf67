//! JSON-RPC batches over real sockets, against a gateway fronting the demo server (stdio child
//! process): accepted on sessions of protocol version 2025-03-26 (answered as one JSON array,
//! or one SSE stream when a member streams), refused with 400 for later revisions; and an
//! upstream on 2025-03-26 that batches what it sends.

use std::collections::BTreeMap;

use serde_json::{Value, json};

use crate::support::client::{ACCEPT_BOTH, RawClient, Reply};
use crate::support::config::{config, demo_stdio, tenant, upstream};
use crate::support::gateway::TestGateway;
use switchyard::config::UpstreamTransport;

async fn gateway() -> TestGateway {
    TestGateway::start(config(vec![tenant(
        "batch",
        vec![upstream("demo", UpstreamTransport::Stdio(demo_stdio(None)))],
    )]))
    .await
}

async fn client(gw: &TestGateway, version: &str) -> RawClient {
    let mut c = RawClient::new(gw.url("batch"));
    c.protocol_version = version.into();
    c.initialize().await;
    c
}

/// The responses of a batch reply by id: the JSON array's members (or the SSE messages).
fn by_id(reply: &Reply) -> BTreeMap<String, Value> {
    let mut messages = reply.messages.clone();
    if let [Value::Array(members)] = messages.as_slice() {
        messages = members.clone();
    }
    messages
        .into_iter()
        .filter(|m| m.get("result").is_some() || m.get("error").is_some())
        .map(|m| (m["id"].to_string(), m))
        .collect()
}

fn assert_batch_refused(reply: &Reply, text: &str) {
    assert_eq!(reply.status, 400, "{reply:?}");
    let body = reply.last();
    assert_eq!(body["error"]["code"], -32600, "{body}");
    let message = body["error"]["message"].as_str().unwrap_or_default();
    assert!(
        message.contains(text),
        "{message:?} should mention {text:?}"
    );
}

#[tokio::test]
async fn batches_on_2025_03_26_sessions_are_answered_member_by_member() {
    let gw = gateway().await;
    let c = client(&gw, "2025-03-26").await;

    // Requests answered together as one JSON array; a notification in the batch answers nothing.
    let r = c
        .post(&json!([
            {"jsonrpc": "2.0", "id": "a", "method": "tools/call",
             "params": {"name": "add", "arguments": {"a": 2, "b": 40}}},
            {"jsonrpc": "2.0", "method": "notifications/roots/list_changed"},
            {"jsonrpc": "2.0", "id": 7, "method": "ping"},
            {"jsonrpc": "2.0", "id": 8, "method": "tools/list"},
        ]))
        .await;
    assert_eq!(r.status, 200, "{r:?}");
    assert_eq!(r.content_type(), "application/json");
    let array = r.last().as_array().expect("a JSON array").clone();
    assert_eq!(array.len(), 3, "{array:?}");
    let answers = by_id(&r);
    assert_eq!(
        answers["\"a\""]["result"]["content"][0]["text"], "42",
        "{answers:?}"
    );
    assert_eq!(answers["7"]["result"], json!({}));
    assert!(
        answers["8"]["result"]["tools"]
            .as_array()
            .is_some_and(|t| t.iter().any(|t| t["name"] == "sleep")),
        "{answers:?}"
    );

    // A member that is not a valid message gets its own error; the others are served.
    let r = c
        .post(&json!([
            {"jsonrpc": "1.0", "id": 9, "method": "ping"},
            {"jsonrpc": "2.0", "id": 10, "method": "no/such/method"},
            42,
            {"jsonrpc": "2.0", "id": 11, "method": "ping"},
        ]))
        .await;
    assert_eq!(r.status, 200, "{r:?}");
    let array = r.last().as_array().expect("a JSON array").clone();
    assert_eq!(array.len(), 4, "{array:?}");
    assert_eq!(array[0]["id"], 9);
    assert_eq!(array[0]["error"]["code"], -32600);
    assert_eq!(array[1]["id"], 10);
    assert_eq!(array[1]["error"]["code"], -32601);
    assert_eq!(array[2]["id"], Value::Null);
    assert_eq!(array[2]["error"]["code"], -32600);
    assert_eq!(array[3]["result"], json!({}));

    // Only notifications: 202 and no body. Only invalid members: 400 with their errors.
    let r = c
        .post(&json!([
            {"jsonrpc": "2.0", "method": "notifications/roots/list_changed"},
            {"jsonrpc": "2.0", "method": "notifications/roots/list_changed"},
        ]))
        .await;
    assert_eq!(r.status, 202, "{r:?}");
    assert!(r.body.is_empty());
    let r = c.post(&json!([1, 2])).await;
    assert_eq!(r.status, 400, "{r:?}");
    assert_eq!(r.last().as_array().map(Vec::len), Some(2), "{r:?}");

    // A member that streams (progress before its response): the batch is one SSE stream with
    // every member's messages and every response, closed after the last one.
    let r = c
        .post(&json!([
            {"jsonrpc": "2.0", "id": 20, "method": "tools/call",
             "params": {"name": "sleep", "arguments": {"ms": 300, "steps": 3},
                        "_meta": {"progressToken": "p20"}}},
            {"jsonrpc": "2.0", "id": 21, "method": "tools/call",
             "params": {"name": "sleep", "arguments": {"ms": 100, "steps": 2},
                        "_meta": {"progressToken": "p21"}}},
            {"jsonrpc": "2.0", "id": 22, "method": "tools/call",
             "params": {"name": "echo", "arguments": {"message": "hi"}}},
        ]))
        .await;
    assert_eq!(r.status, 200, "{r:?}");
    assert!(r.content_type().starts_with("text/event-stream"), "{r:?}");
    let progress = |token: &str| {
        r.messages
            .iter()
            .filter(|m| {
                m["method"] == "notifications/progress" && m["params"]["progressToken"] == token
            })
            .count()
    };
    assert_eq!(progress("p20"), 3, "{:?}", r.messages);
    assert_eq!(progress("p21"), 2, "{:?}", r.messages);
    let answers = by_id(&r);
    assert_eq!(answers.len(), 3, "{answers:?}");
    assert_eq!(answers["20"]["result"]["content"][0]["text"], "slept 300ms");
    assert_eq!(answers["21"]["result"]["content"][0]["text"], "slept 100ms");
    assert_eq!(answers["22"]["result"]["content"][0]["text"], "hi");
    // The stream closed after the last response: nothing follows it.
    let last_response = r
        .messages
        .iter()
        .rposition(|m| m.get("result").is_some())
        .unwrap_or_default();
    assert_eq!(last_response, r.messages.len() - 1, "{:?}", r.messages);

    // initialize never rides in a batch; an empty batch is invalid.
    let r = c
        .post(
            &json!([{"jsonrpc": "2.0", "id": 30, "method": "initialize", "params": {
            "protocolVersion": "2025-03-26", "capabilities": {},
            "clientInfo": {"name": "t", "version": "0"}}}]),
        )
        .await;
    assert_batch_refused(&r, "initialize must not be part of a JSON-RPC batch");
    let r = c.post(&json!([])).await;
    assert_batch_refused(&r, "at least one message");
    gw.stop().await;
}

#[tokio::test]
async fn batches_are_refused_by_later_revisions() {
    let gw = gateway().await;
    let batch = json!([{"jsonrpc": "2.0", "id": 1, "method": "ping"}]);
    for version in ["2025-06-18", "2025-11-25"] {
        let c = client(&gw, version).await;
        let r = c.post(&batch).await;
        assert_batch_refused(&r, "2025-03-26");
        // The session goes on.
        assert_eq!(
            c.request("ping", json!({})).await.last()["result"],
            json!({})
        );
    }
    // Without a session there is nothing to batch on; the stateless revision has no batches.
    let c = RawClient::new(gw.url("batch"));
    let headers = [
        ("content-type", "application/json"),
        ("accept", ACCEPT_BOTH),
    ];
    let r = c.post_raw(batch.to_string(), &headers).await;
    assert_eq!(r.status, 400, "{r:?}");
    assert_eq!(r.error_code(), Some(-32600), "{r:?}");
    let mut stateless = headers.to_vec();
    stateless.push(("mcp-protocol-version", "2026-07-28"));
    let r = c.post_raw(batch.to_string(), &stateless).await;
    assert_batch_refused(&r, "2025-03-26");
    gw.stop().await;
}

/// An upstream on 2025-03-26 may batch its messages: a progress notification and the
/// response in one array (tests/peers/catalog_server.py --batch) reach the client one by one.
#[tokio::test]
async fn an_upstream_batch_is_taken_apart() {
    let gw = TestGateway::start(config(vec![tenant(
        "batch",
        vec![crate::catalog::catalog_server(
            "cat",
            &["--tools", "1", "--batch"],
        )],
    )]))
    .await;
    let c = client(&gw, "2025-11-25").await;
    let r = c
        .request(
            "tools/call",
            json!({"name": "t0", "arguments": {}, "_meta": {"progressToken": "b"}}),
        )
        .await;
    assert_eq!(r.status, 200, "{r:?}");
    assert!(r.content_type().starts_with("text/event-stream"), "{r:?}");
    assert_eq!(r.messages.len(), 2, "{:?}", r.messages);
    assert_eq!(r.messages[0]["method"], "notifications/progress");
    assert_eq!(r.messages[0]["params"]["progressToken"], "b");
    assert_eq!(r.messages[1]["result"]["content"][0]["text"], "t0 called");
    gw.stop().await;
}

#[tokio::test]
async fn a_cancelled_member_of_a_batch_gets_no_response() {
    let dir = crate::support::TempDir::new("batch-cancel");
    let trace = dir.path("trace.jsonl");
    let gw = TestGateway::start(config(vec![tenant(
        "batch",
        vec![upstream(
            "demo",
            UpstreamTransport::Stdio(demo_stdio(Some(&trace))),
        )],
    )]))
    .await;
    let c = client(&gw, "2025-03-26").await;
    let mut other = RawClient::new(gw.url("batch"));
    other.session = c.session.clone();
    other.protocol_version = "2025-03-26".into();
    let batch = tokio::spawn(async move {
        other
            .post(&json!([
                {"jsonrpc": "2.0", "id": "slow", "method": "tools/call",
                 "params": {"name": "sleep", "arguments": {"ms": 20000}}},
                {"jsonrpc": "2.0", "id": "quick", "method": "tools/call",
                 "params": {"name": "echo", "arguments": {"message": "still here"}}}
            ]))
            .await
    });
    let started = crate::support::eventually(std::time::Duration::from_secs(10), || {
        crate::support::read_trace(&trace)
            .iter()
            .any(|m| m["params"]["name"] == "sleep")
    })
    .await;
    assert!(started, "the slow member reached the upstream");
    let r = c
        .post(
            &json!({"jsonrpc": "2.0", "method": "notifications/cancelled",
                      "params": {"requestId": "slow"}}),
        )
        .await;
    assert_eq!(r.status, 202);
    let reply = tokio::time::timeout(std::time::Duration::from_secs(5), batch)
        .await
        .expect("the batch ends promptly once its slow member is cancelled")
        .expect("task");
    let answers = by_id(&reply);
    assert_eq!(
        answers.keys().collect::<Vec<_>>(),
        vec!["\"quick\""],
        "only the member not cancelled is answered: {reply:?}"
    );
    assert_eq!(
        answers["\"quick\""]["result"]["content"][0]["text"],
        "still here"
    );
    gw.stop().await;
}
