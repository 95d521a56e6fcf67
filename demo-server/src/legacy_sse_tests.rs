//! End-to-end test of the demo's 2024-11-05 HTTP+SSE transport over a real loopback socket.
#![allow(clippy::unwrap_used)]

use std::time::Duration;

use reqwest::header::{ACCEPT, CONTENT_TYPE};
use reqwest::{Client, StatusCode};
use serde_json::{Value, json};
use tokio::time::timeout;

use super::{DemoOptions, serve_http};

const LIMIT: Duration = Duration::from_secs(10);

/// Reads the stream until it holds a whole event; returns its `event` and `data` lines.
async fn next_event(stream: &mut reqwest::Response, buffer: &mut String) -> (String, String) {
    loop {
        if let Some(end) = buffer.find("\n\n") {
            let event: String = buffer.drain(..end + 2).collect();
            let field = |name: &str| {
                event
                    .lines()
                    .find_map(|l| l.strip_prefix(name))
                    .unwrap_or_default()
                    .to_owned()
            };
            return (field("event: "), field("data: "));
        }
        let chunk = timeout(LIMIT, stream.chunk()).await.unwrap().unwrap();
        buffer.push_str(std::str::from_utf8(&chunk.expect("the stream ended")).unwrap());
    }
}

#[tokio::test]
async fn legacy_sse_end_to_end() {
    switchyard::app::install_crypto_provider();
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let base = format!("http://{}", listener.local_addr().unwrap());
    let (stop_tx, stop_rx) = tokio::sync::oneshot::channel::<()>();
    let server = tokio::spawn(serve_http(listener, DemoOptions::default(), async move {
        let _ = stop_rx.await;
    }));
    let c = Client::builder().build().unwrap();

    let mut stream = timeout(
        LIMIT,
        c.get(format!("{base}/sse"))
            .header(ACCEPT, "text/event-stream")
            .send(),
    )
    .await
    .unwrap()
    .unwrap();
    assert_eq!(stream.status(), StatusCode::OK);
    assert_eq!(stream.headers()[CONTENT_TYPE], "text/event-stream");
    let mut buffer = String::new();
    let (event, endpoint) = next_event(&mut stream, &mut buffer).await;
    assert_eq!(event, "endpoint");
    assert!(endpoint.starts_with("/messages?sessionId="), "{endpoint}");
    let messages = format!("{base}{endpoint}");

    // Every message is accepted with 202; answers come on the stream.
    let post = |body: Value| {
        let (c, url) = (c.clone(), messages.clone());
        async move {
            let resp = timeout(
                LIMIT,
                c.post(url)
                    .header(CONTENT_TYPE, "application/json")
                    .body(body.to_string())
                    .send(),
            )
            .await
            .unwrap()
            .unwrap();
            resp.status()
        }
    };
    let init = json!({"jsonrpc":"2.0","id":1,"method":"initialize","params":{"protocolVersion":"2024-11-05","capabilities":{},"clientInfo":{"name":"t","version":"0"}}});
    assert_eq!(post(init).await, StatusCode::ACCEPTED);
    let (event, data) = next_event(&mut stream, &mut buffer).await;
    assert_eq!(event, "message");
    let v: Value = serde_json::from_str(&data).unwrap();
    assert_eq!(v["id"], 1, "{v}");
    assert_eq!(v["result"]["protocolVersion"], "2024-11-05", "{v}");

    let initialized = json!({"jsonrpc":"2.0","method":"notifications/initialized"});
    assert_eq!(post(initialized).await, StatusCode::ACCEPTED);
    let echo = json!({"jsonrpc":"2.0","id":"e","method":"tools/call","params":{"name":"echo","arguments":{"message":"hello"}}});
    assert_eq!(post(echo).await, StatusCode::ACCEPTED);
    let (_, data) = next_event(&mut stream, &mut buffer).await;
    let v: Value = serde_json::from_str(&data).unwrap();
    assert_eq!(v["id"], "e", "{v}");
    assert_eq!(v["result"]["content"][0]["text"], "hello", "{v}");

    // The session ends with its stream: its endpoint is then unknown.
    drop(stream);
    let ping = json!({"jsonrpc":"2.0","id":2,"method":"ping"});
    let mut status = StatusCode::ACCEPTED;
    for _ in 0..100 {
        status = post(ping.clone()).await;
        if status == StatusCode::NOT_FOUND {
            break;
        }
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    assert_eq!(status, StatusCode::NOT_FOUND);

    stop_tx.send(()).unwrap();
    timeout(LIMIT, server).await.unwrap().unwrap().unwrap();
}
