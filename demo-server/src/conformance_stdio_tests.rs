//! Tests of server-to-client requests: the round trip over the in-memory stdio pipes, the
//! timeout, and the cancellation of the tool call waiting for the answer.
#![allow(clippy::unwrap_used)]

use std::time::Duration;

use serde_json::{Value, json};
use tokio::io::{AsyncBufReadExt as _, AsyncWriteExt as _, BufReader, DuplexStream, Lines};
use tokio::sync::mpsc;
use tokio::task::JoinHandle;
use tokio::time::timeout;

use super::conformance_tests::{call_msg, deferred, fixture, fixture_opts, init_msg, json_of};
use super::server::{Outcome, Server};
use super::tests::LIMIT;

#[tokio::test]
async fn cancelled_call_forgets_its_request_to_the_client() {
    let s = fixture(&json!({"sampling":{}}));
    let d = deferred(
        &s,
        &call_msg(&json!("c"), "test_sampling", &json!({"prompt":"p"})),
    );
    let (tx, mut rx) = mpsc::channel(4);
    let task = tokio::spawn(async move { d.run(Some(&tx)).await });
    let sent = json_of(&timeout(LIMIT, rx.recv()).await.unwrap().unwrap());
    assert_eq!(
        (sent["id"].as_str(), sent["method"].as_str()),
        (Some("fx-1"), Some("sampling/createMessage"))
    );
    assert_eq!(s.peer.pending(), 1);
    let cancel =
        r#"{"jsonrpc":"2.0","method":"notifications/cancelled","params":{"requestId":"c"}}"#;
    assert!(matches!(
        s.handle_bytes(cancel.as_bytes()),
        Outcome::Nothing
    ));
    assert_eq!(timeout(LIMIT, task).await.unwrap().unwrap(), None);
    assert_eq!(s.peer.pending(), 0);
    // A late answer is dropped quietly.
    let late = r#"{"jsonrpc":"2.0","id":"fx-1","result":{}}"#;
    assert!(matches!(s.handle_bytes(late.as_bytes()), Outcome::Nothing));
}

/// The fixture served over in-memory stdio pipes.
struct Pipes {
    input: DuplexStream,
    output: Lines<BufReader<DuplexStream>>,
    serving: JoinHandle<std::io::Result<()>>,
}

impl Pipes {
    fn start(peer_timeout: Duration) -> Pipes {
        let server = Server::with_peer_timeout(&fixture_opts(), peer_timeout).unwrap();
        let (input, server_r) = tokio::io::duplex(64 * 1024);
        let (server_w, client_r) = tokio::io::duplex(64 * 1024);
        let serving = tokio::spawn(super::stdio::serve(
            server,
            BufReader::new(server_r),
            server_w,
        ));
        let output = BufReader::new(client_r).lines();
        Pipes {
            input,
            output,
            serving,
        }
    }

    async fn send(&mut self, msg: &Value) {
        let line = format!("{msg}\n");
        self.input.write_all(line.as_bytes()).await.unwrap();
    }

    async fn recv(&mut self) -> Value {
        let line = timeout(LIMIT, self.output.next_line()).await.unwrap();
        serde_json::from_str(&line.unwrap().unwrap()).unwrap()
    }

    async fn initialize(&mut self, capabilities: &Value) {
        self.send(&serde_json::from_str(&init_msg(capabilities)).unwrap())
            .await;
        assert_eq!(self.recv().await["id"], 0);
        self.send(&json!({"jsonrpc":"2.0","method":"notifications/initialized"}))
            .await;
    }

    async fn close(self) {
        drop(self.input);
        timeout(LIMIT, self.serving)
            .await
            .unwrap()
            .unwrap()
            .unwrap();
    }
}

#[tokio::test]
async fn stdio_round_trips_requests_to_the_client() {
    let mut io = Pipes::start(Duration::from_secs(30));
    io.initialize(&json!({"sampling":{},"elicitation":{}}))
        .await;

    let call = |id: i64, tool: &str, args: Value| -> Value {
        serde_json::from_str(&call_msg(&json!(id), tool, &args)).unwrap()
    };
    io.send(&call(1, "test_sampling", json!({"prompt":"Say hi"})))
        .await;
    let req = io.recv().await;
    assert_eq!(req["id"], "fx-1");
    assert_eq!(req["method"], "sampling/createMessage");
    assert_eq!(
        req["params"],
        json!({"messages":[{"role":"user","content":{"type":"text","text":"Say hi"}}],"maxTokens":100})
    );
    // The session keeps serving while the tool waits.
    io.send(&json!({"jsonrpc":"2.0","id":2,"method":"ping"}))
        .await;
    assert_eq!(io.recv().await, json!({"jsonrpc":"2.0","id":2,"result":{}}));
    io.send(
        &json!({"jsonrpc":"2.0","id":"fx-1","result":{"role":"assistant",
        "content":{"type":"text","text":"hi"},"model":"m","stopReason":"endTurn"}}),
    )
    .await;
    let done = io.recv().await;
    assert_eq!(done["id"], 1);
    assert_eq!(done["result"]["content"][0]["text"], "LLM response: hi");

    io.send(&call(3, "test_elicitation", json!({"message":"Who?"})))
        .await;
    let req = io.recv().await;
    assert_eq!(
        (&req["id"], &req["method"]),
        (&json!("fx-2"), &json!("elicitation/create"))
    );
    assert_eq!(req["params"]["message"], "Who?");
    assert_eq!(
        req["params"]["requestedSchema"]["required"],
        json!(["username", "email"])
    );
    io.send(
        &json!({"jsonrpc":"2.0","id":"fx-2","result":{"action":"accept",
        "content":{"username":"u","email":"e@x"}}}),
    )
    .await;
    let done = io.recv().await;
    assert_eq!(
        done["result"]["content"][0]["text"],
        // The content is passed through as sent (serde_json sorted the keys on our side).
        r#"User response: action=accept, content={"email":"e@x","username":"u"}"#
    );

    io.send(&call(4, "test_elicitation_sep1034_defaults", json!({})))
        .await;
    let req = io.recv().await;
    let props = &req["params"]["requestedSchema"]["properties"];
    assert_eq!(
        (&props["age"]["default"], &props["score"]["default"]),
        (&json!(30), &json!(95.5))
    );
    io.send(&json!({"jsonrpc":"2.0","id":"fx-3","error":{"code":-1,"message":"user said no"}}))
        .await;
    let done = io.recv().await;
    let text = done["result"]["content"][0]["text"].as_str().unwrap();
    assert_eq!(done["result"]["isError"], true);
    assert!(text.contains("user said no"), "{text}");
    io.close().await;
}

#[tokio::test]
async fn stdio_unanswered_request_times_out() {
    let mut io = Pipes::start(Duration::from_millis(100));
    io.initialize(&json!({"elicitation":{}})).await;
    let msg = call_msg(&json!("t"), "test_elicitation_sep1330_enums", &json!({}));
    io.send(&serde_json::from_str(&msg).unwrap()).await;
    let req = io.recv().await;
    assert_eq!(req["id"], "fx-1");
    let props = &req["params"]["requestedSchema"]["properties"];
    assert_eq!(
        props["legacyEnum"]["enumNames"].as_array().unwrap().len(),
        3
    );
    assert!(props["titledMulti"]["items"]["anyOf"].is_array());
    let cancelled = io.recv().await;
    assert_eq!(cancelled["method"], "notifications/cancelled");
    assert_eq!(cancelled["params"]["requestId"], "fx-1");
    let done = io.recv().await;
    let text = done["result"]["content"][0]["text"].as_str().unwrap();
    assert_eq!(
        (done["id"].as_str(), done["result"]["isError"].as_bool()),
        (Some("t"), Some(true))
    );
    assert!(text.contains("did not answer elicitation/create"), "{text}");
    // A late answer produces nothing; the next output is the ping's answer.
    io.send(&json!({"jsonrpc":"2.0","id":"fx-1","result":{"action":"cancel"}}))
        .await;
    io.send(&json!({"jsonrpc":"2.0","id":9,"method":"ping"}))
        .await;
    assert_eq!(io.recv().await["id"], 9);
    io.close().await;
}
