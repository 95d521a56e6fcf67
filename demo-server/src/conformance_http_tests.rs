//! End-to-end test of the conformance fixture over Streamable HTTP on a loopback socket: a
//! request to the client travels on the tool call's SSE stream, its answer arrives as a POST.
#![allow(clippy::unwrap_used)]

use std::time::Duration;

use reqwest::header::{ACCEPT, CONTENT_TYPE};
use reqwest::{Client, StatusCode};
use serde_json::{Value, json};
use tokio::time::timeout;

use super::{DemoOptions, serve_http};

const LIMIT: Duration = Duration::from_secs(10);

struct Conn {
    client: Client,
    url: String,
    session: Option<String>,
}

impl Conn {
    async fn post(&self, body: &Value) -> reqwest::Response {
        let mut rb = self
            .client
            .post(&self.url)
            .header(ACCEPT, "application/json, text/event-stream")
            .header(CONTENT_TYPE, "application/json")
            .body(body.to_string());
        if let Some(s) = &self.session {
            rb = rb
                .header("mcp-session-id", s)
                .header("mcp-protocol-version", "2025-11-25");
        }
        timeout(LIMIT, rb.send()).await.unwrap().unwrap()
    }
}

/// Reads SSE events (their `data:` JSON) from a streaming response.
struct Events {
    resp: reqwest::Response,
    buf: String,
}

impl Events {
    fn new(resp: reqwest::Response) -> Events {
        assert_eq!(resp.headers()[CONTENT_TYPE], "text/event-stream");
        Events {
            resp,
            buf: String::new(),
        }
    }

    /// The next event, or `None` at the end of the stream.
    async fn next(&mut self) -> Option<Value> {
        loop {
            if let Some(end) = self.buf.find("\n\n") {
                let event: String = self.buf.drain(..end + 2).collect();
                let data = event.trim().strip_prefix("data: ").unwrap();
                return Some(serde_json::from_str(data).unwrap());
            }
            let chunk = timeout(LIMIT, self.resp.chunk()).await.unwrap().unwrap()?;
            self.buf.push_str(std::str::from_utf8(&chunk).unwrap());
        }
    }
}

#[tokio::test]
async fn http_fixture_talks_back_on_the_call_stream() {
    switchyard::app::install_crypto_provider();
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let url = format!("http://{}/mcp", listener.local_addr().unwrap());
    let (stop_tx, stop_rx) = tokio::sync::oneshot::channel::<()>();
    let opts = DemoOptions {
        conformance: true,
        ..DemoOptions::default()
    };
    let server = tokio::spawn(serve_http(listener, opts, async move {
        let _ = stop_rx.await;
    }));
    let mut conn = Conn {
        client: Client::builder().build().unwrap(),
        url,
        session: None,
    };
    let init = json!({"jsonrpc":"2.0","id":1,"method":"initialize","params":{
        "protocolVersion":"2025-11-25","capabilities":{"sampling":{}},
        "clientInfo":{"name":"t","version":"0"}}});
    let resp = conn.post(&init).await;
    assert_eq!(resp.status(), StatusCode::OK);
    conn.session = Some(
        resp.headers()["mcp-session-id"]
            .to_str()
            .unwrap()
            .to_owned(),
    );
    let initialized = json!({"jsonrpc":"2.0","method":"notifications/initialized"});
    assert_eq!(conn.post(&initialized).await.status(), StatusCode::ACCEPTED);

    // A plain content tool answers with JSON.
    let simple =
        json!({"jsonrpc":"2.0","id":2,"method":"tools/call","params":{"name":"test_simple_text"}});
    let resp = conn.post(&simple).await;
    assert_eq!(resp.headers()[CONTENT_TYPE], "application/json");

    // Sampling: the request arrives on the call's stream, the answer is POSTed (202), then
    // the result ends the stream.
    let sampling = json!({"jsonrpc":"2.0","id":3,"method":"tools/call","params":{
        "name":"test_sampling","arguments":{"prompt":"Say hi"}}});
    let mut events = Events::new(conn.post(&sampling).await);
    let req = events.next().await.unwrap();
    assert_eq!(
        (req["id"].as_str(), req["method"].as_str()),
        (Some("fx-1"), Some("sampling/createMessage"))
    );
    let answer = json!({"jsonrpc":"2.0","id":"fx-1","result":{"role":"assistant",
        "content":{"type":"text","text":"hello"},"model":"m","stopReason":"endTurn"}});
    let resp = conn.post(&answer).await;
    assert_eq!(resp.status(), StatusCode::ACCEPTED);
    let done = events.next().await.unwrap();
    assert_eq!(done["id"], 3);
    assert_eq!(done["result"]["content"][0]["text"], "LLM response: hello");
    assert!(events.next().await.is_none());

    // Elicitation was not declared: an immediate tool error, as JSON.
    let elicit = json!({"jsonrpc":"2.0","id":4,"method":"tools/call","params":{
        "name":"test_elicitation","arguments":{"message":"m"}}});
    let resp = conn.post(&elicit).await;
    assert_eq!(resp.headers()[CONTENT_TYPE], "application/json");
    let v: Value = serde_json::from_slice(&resp.bytes().await.unwrap()).unwrap();
    assert_eq!(v["result"]["isError"], true);

    // Logging: three log messages, then the result.
    let logging = json!({"jsonrpc":"2.0","id":5,"method":"tools/call","params":{
        "name":"test_tool_with_logging","arguments":{}}});
    let mut events = Events::new(conn.post(&logging).await);
    for _ in 0..3 {
        assert_eq!(
            events.next().await.unwrap()["method"],
            "notifications/message"
        );
    }
    assert_eq!(events.next().await.unwrap()["id"], 5);
    assert!(events.next().await.is_none());

    stop_tx.send(()).unwrap();
    timeout(LIMIT, server).await.unwrap().unwrap().unwrap();
}
