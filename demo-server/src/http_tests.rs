//! End-to-end test of the demo's Streamable HTTP transport over a real loopback socket.
#![allow(clippy::unwrap_used)]

use std::time::Duration;

use reqwest::header::{ACCEPT, CONTENT_TYPE};
use reqwest::{Client, RequestBuilder, StatusCode};
use serde_json::{Value, json};
use tokio::time::timeout;

use super::{DemoOptions, serve_http};

const LIMIT: Duration = Duration::from_secs(10);
const BOTH: &str = "application/json, text/event-stream";

fn post(c: &Client, url: &str, session: Option<&str>, body: &Value) -> RequestBuilder {
    post_as(c, url, session, body, BOTH, "application/json")
}

fn post_as(
    c: &Client,
    url: &str,
    session: Option<&str>,
    body: &Value,
    accept: &str,
    ctype: &str,
) -> RequestBuilder {
    let mut rb = c
        .post(url)
        .header(ACCEPT, accept)
        .header(CONTENT_TYPE, ctype)
        .body(body.to_string());
    if let Some(s) = session {
        rb = rb
            .header("mcp-session-id", s)
            .header("mcp-protocol-version", "2025-11-25");
    }
    rb
}

async fn send(rb: RequestBuilder) -> reqwest::Response {
    timeout(LIMIT, rb.send()).await.unwrap().unwrap()
}

async fn body_json(resp: reqwest::Response) -> Value {
    assert_eq!(resp.headers()[CONTENT_TYPE], "application/json");
    serde_json::from_slice(&timeout(LIMIT, resp.bytes()).await.unwrap().unwrap()).unwrap()
}

/// Splits an SSE body into the JSON of its `data:` events.
fn sse_events(body: &str) -> Vec<Value> {
    body.split("\n\n")
        .filter(|ev| !ev.trim().is_empty())
        .map(|ev| serde_json::from_str(ev.strip_prefix("data: ").unwrap()).unwrap())
        .collect()
}

#[tokio::test]
async fn streamable_http_end_to_end() {
    switchyard::app::install_crypto_provider();
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let url = format!("http://{}/mcp", listener.local_addr().unwrap());
    let (stop_tx, stop_rx) = tokio::sync::oneshot::channel::<()>();
    let server = tokio::spawn(serve_http(listener, DemoOptions::default(), async move {
        let _ = stop_rx.await;
    }));
    let c = Client::builder().build().unwrap();

    // initialize → session id
    let init = json!({"jsonrpc":"2.0","id":1,"method":"initialize","params":{"protocolVersion":"2025-11-25","capabilities":{},"clientInfo":{"name":"t","version":"0"}}});
    let resp = send(post(&c, &url, None, &init)).await;
    assert_eq!(resp.status(), StatusCode::OK);
    let sid = resp.headers()["mcp-session-id"]
        .to_str()
        .unwrap()
        .to_owned();
    assert!(
        sid.len() >= 32 && sid.bytes().all(|b| b.is_ascii_hexdigit()),
        "{sid}"
    );
    assert_eq!(
        body_json(resp).await["result"]["protocolVersion"],
        "2025-11-25"
    );
    let sid_str = sid.as_str();
    let sid = Some(sid_str);

    let resp = send(post(
        &c,
        &url,
        sid,
        &json!({"jsonrpc":"2.0","method":"notifications/initialized"}),
    ))
    .await;
    assert_eq!(resp.status(), StatusCode::ACCEPTED);
    assert!(
        timeout(LIMIT, resp.bytes())
            .await
            .unwrap()
            .unwrap()
            .is_empty()
    );

    // tools/call echo → JSON
    let echo = json!({"jsonrpc":"2.0","id":"e","method":"tools/call","params":{"name":"echo","arguments":{"message":"hello"}}});
    let v = body_json(send(post(&c, &url, sid, &echo)).await).await;
    assert_eq!(v["id"], "e");
    assert_eq!(v["result"]["content"][0]["text"], "hello");

    // sleep with progress → SSE: three progress events, then the result
    let sleep = json!({"jsonrpc":"2.0","id":2,"method":"tools/call","params":{"name":"sleep","arguments":{"ms":90,"steps":3},"_meta":{"progressToken":42}}});
    let resp = send(post(&c, &url, sid, &sleep)).await;
    assert_eq!(resp.status(), StatusCode::OK);
    assert_eq!(resp.headers()[CONTENT_TYPE], "text/event-stream");
    let body = String::from_utf8(
        timeout(LIMIT, resp.bytes())
            .await
            .unwrap()
            .unwrap()
            .to_vec(),
    )
    .unwrap();
    let events = sse_events(&body);
    assert_eq!(events.len(), 4, "{body}");
    for (i, ev) in events[..3].iter().enumerate() {
        assert_eq!(ev["method"], "notifications/progress");
        assert_eq!(
            ev["params"],
            json!({"progressToken":42,"progress":i + 1,"total":3})
        );
    }
    assert_eq!(events[3]["id"], 2);
    assert_eq!(events[3]["result"]["content"][0]["text"], "slept 90ms");

    // cancellation: the long sleep's POST ends with an empty event stream
    let long = json!({"jsonrpc":"2.0","id":3,"method":"tools/call","params":{"name":"sleep","arguments":{"ms":60000}}});
    let pending = tokio::spawn(post(&c, &url, sid, &long).send());
    tokio::time::sleep(Duration::from_millis(100)).await;
    let cancel =
        json!({"jsonrpc":"2.0","method":"notifications/cancelled","params":{"requestId":3}});
    assert_eq!(
        send(post(&c, &url, sid, &cancel)).await.status(),
        StatusCode::ACCEPTED
    );
    let resp = timeout(LIMIT, pending).await.unwrap().unwrap().unwrap();
    assert_eq!(resp.headers()[CONTENT_TYPE], "text/event-stream");
    assert!(
        timeout(LIMIT, resp.bytes())
            .await
            .unwrap()
            .unwrap()
            .is_empty()
    );

    // header and session checks
    let ping = json!({"jsonrpc":"2.0","id":4,"method":"ping"});
    let wrong_accept = post_as(&c, &url, sid, &ping, "application/json", "application/json");
    assert_eq!(
        send(wrong_accept).await.status(),
        StatusCode::NOT_ACCEPTABLE
    );
    let wrong_type = post_as(&c, &url, sid, &ping, BOTH, "text/plain");
    assert_eq!(
        send(wrong_type).await.status(),
        StatusCode::UNSUPPORTED_MEDIA_TYPE
    );
    assert_eq!(
        send(post(&c, &url, None, &ping)).await.status(),
        StatusCode::BAD_REQUEST
    );
    assert_eq!(
        send(post(&c, &url, Some("feed"), &ping)).await.status(),
        StatusCode::NOT_FOUND
    );
    let resp = send(
        c.post(&url)
            .header(ACCEPT, BOTH)
            .header(CONTENT_TYPE, "application/json")
            .body("{oops"),
    )
    .await;
    assert_eq!(resp.status(), StatusCode::BAD_REQUEST);
    assert_eq!(body_json(resp).await["error"]["code"], -32700);

    // GET → 405; DELETE → 200, then 404
    let get = c
        .get(&url)
        .header(ACCEPT, "text/event-stream")
        .header("mcp-session-id", sid_str);
    assert_eq!(send(get).await.status(), StatusCode::METHOD_NOT_ALLOWED);
    let delete = || c.delete(&url).header("mcp-session-id", sid_str);
    assert_eq!(send(delete()).await.status(), StatusCode::OK);
    assert_eq!(send(delete()).await.status(), StatusCode::NOT_FOUND);
    assert_eq!(
        send(post(&c, &url, sid, &ping)).await.status(),
        StatusCode::NOT_FOUND
    );

    stop_tx.send(()).unwrap();
    timeout(LIMIT, server).await.unwrap().unwrap().unwrap();
}
