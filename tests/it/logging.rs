//! MCP's logging utility through the gateway: `logging` is advertised whatever the upstreams
//! offer (the gateway answers `logging/setLevel`), a bad level is -32602, and log messages
//! below the client's level are dropped at the gateway even when the upstream sends them
//! regardless.

use serde_json::{Value, json};

use crate::support::client::RawClient;
use crate::support::config::{config, demo_stdio, tenant, upstream};
use crate::support::gateway::TestGateway;
use crate::support::peers::python_peer;
use switchyard::config::UpstreamTransport;

fn log_messages(messages: &[Value]) -> usize {
    messages
        .iter()
        .filter(|m| m["method"] == "notifications/message")
        .count()
}

#[tokio::test]
async fn logging_is_offered_and_the_clients_level_holds_for_every_upstream() {
    // `demo` sends its `flood` log messages (level info) whatever level it was told.
    let mut demo = demo_stdio(None);
    demo.args.push("--hostile-tools".into());
    let gw = TestGateway::start(config(vec![
        tenant(
            "quiet",
            vec![
                python_peer("a", "lastwins_server.py", &[]),
                python_peer("b", "lastwins_server.py", &[]),
            ],
        ),
        tenant(
            "loud",
            vec![
                python_peer("lw", "lastwins_server.py", &[]),
                upstream("demo", UpstreamTransport::Stdio(demo)),
            ],
        ),
    ]))
    .await;

    // Neither upstream offers logging; the endpoint does, and takes the level.
    let mut c = RawClient::new(gw.url("quiet"));
    let init = c.initialize().await;
    assert_eq!(init["capabilities"]["logging"], json!({}), "{init}");
    let set = c
        .request("logging/setLevel", json!({"level": "warning"}))
        .await;
    assert_eq!(set.last()["result"], json!({}), "{:?}", set.messages);
    let bad = c
        .request("logging/setLevel", json!({"level": "loud"}))
        .await;
    assert_eq!(bad.error_code(), Some(-32602), "{:?}", bad.messages);
    let none = c.request("logging/setLevel", json!({})).await;
    assert_eq!(none.error_code(), Some(-32602), "{:?}", none.messages);

    let mut c = RawClient::new(gw.url("loud"));
    c.initialize().await;
    let flood = json!({"count": 6, "kind": "message"});
    let before = c.call_tool("demo__flood", flood.clone()).await;
    assert_eq!(log_messages(&before.messages), 6, "{:?}", before.messages);
    c.request("logging/setLevel", json!({"level": "warning"}))
        .await;
    let quiet = c.call_tool("demo__flood", flood.clone()).await;
    assert_eq!(log_messages(&quiet.messages), 0, "{:?}", quiet.messages);
    assert_eq!(
        quiet.last()["result"]["content"][0]["text"],
        "flooded 6",
        "{:?}",
        quiet.messages
    );
    c.request("logging/setLevel", json!({"level": "info"}))
        .await;
    let again = c.call_tool("demo__flood", flood).await;
    assert_eq!(log_messages(&again.messages), 6, "{:?}", again.messages);
    gw.stop().await;
}
