//! One endpoint in front of three upstreams at once — server-everything as a stdio child and
//! over HTTP, and the project's conformance fixture: prefixed catalog, routed calls, sampling
//! and elicitation round trips with the official SDK clients, and cancellation that reaches
//! only the upstream that owns the request.

use std::time::Duration;

use serde_json::json;

use crate::support::client::{RawClient, text};
use crate::support::config::{config, demo_server_exe, demo_stdio, http, stdio, tenant, upstream};
use crate::support::gateway::TestGateway;
use crate::support::peers::{HttpPeer, Sdk, everything_stdio, free_port, run_client};
use crate::support::{TempDir, eventually, read_trace};
use switchyard::config::{StdioSharing, UpstreamConfig, UpstreamTransport};

fn per_session(mut s: switchyard::config::StdioConfig) -> UpstreamTransport {
    s.sharing = StdioSharing::PerSession;
    UpstreamTransport::Stdio(s)
}

fn fixture() -> UpstreamConfig {
    let s = stdio(
        demo_server_exe().display().to_string(),
        &["--stdio", "--conformance"],
    );
    upstream("fixture", per_session(s))
}

#[tokio::test]
async fn three_upstreams_catalog_calls_and_round_trips() {
    let remote = HttpPeer::everything(free_port()).await;
    let gw = TestGateway::start(config(vec![tenant(
        "three",
        vec![
            upstream("local", per_session(everything_stdio())),
            upstream("remote", http(&remote.url())),
            fixture(),
        ],
    )]))
    .await;

    let mut c = RawClient::new(gw.url("three"));
    let init = c.initialize().await;
    let instructions = init["instructions"].as_str().unwrap_or_default();
    assert!(
        instructions.contains("## fixture"),
        "per-upstream instructions: {instructions}"
    );
    let r = c.request("tools/list", json!({})).await;
    let tools: Vec<&str> = r.last()["result"]["tools"]
        .as_array()
        .map(|a| a.iter().filter_map(|t| t["name"].as_str()).collect())
        .unwrap_or_default();
    for t in [
        "local__echo",
        "remote__echo",
        "fixture__test_simple_text",
        "remote__get-sum",
    ] {
        assert!(tools.contains(&t), "{t} missing from {tools:?}");
    }
    assert!(
        tools.iter().all(|t| ["local__", "remote__", "fixture__"]
            .iter()
            .any(|p| t.starts_with(p))),
        "every name carries its upstream: {tools:?}"
    );
    let first_local = tools.iter().position(|t| t.starts_with("local__"));
    let first_fixture = tools.iter().position(|t| t.starts_with("fixture__"));
    assert!(first_local < first_fixture, "upstream order is kept");

    assert_eq!(
        text(
            c.call_tool("local__get-sum", json!({"a": 20, "b": 22}))
                .await
                .last()
        ),
        "The sum of 20 and 22 is 42."
    );
    assert_eq!(
        text(
            c.call_tool("remote__echo", json!({"message": "far"}))
                .await
                .last()
        ),
        "Echo: far"
    );
    assert_eq!(
        text(
            c.call_tool("fixture__test_simple_text", json!({}))
                .await
                .last()
        ),
        "This is a simple text response for testing."
    );
    let r = c
        .request(
            "prompts/get",
            json!({"name": "fixture__test_simple_prompt"}),
        )
        .await;
    assert!(r.last()["result"]["messages"].is_array(), "{:?}", r.last());
    // Completions are routed by their ref: a prompt name or a (namespaced) resource URI.
    let r = c
        .request(
            "completion/complete",
            json!({
            "ref": {"type": "ref/prompt", "name": "fixture__test_prompt_with_arguments"},
            "argument": {"name": "arg1", "value": "hel"}}),
        )
        .await;
    assert_eq!(
        r.last()["result"]["completion"]["values"],
        json!(["hello", "help"]),
        "{:?}",
        r.last()
    );
    let r = c
        .request(
            "completion/complete",
            json!({
            "ref": {"type": "ref/resource", "uri": "fixture+test://template/{id}/data"},
            "argument": {"name": "id", "value": "4"}}),
        )
        .await;
    assert_eq!(
        r.last()["result"]["completion"]["values"],
        json!(["42"]),
        "{:?}",
        r.last()
    );
    let r = c
        .request(
            "resources/read",
            json!({"uri": "fixture+test://template/42/data"}),
        )
        .await;
    assert_eq!(
        r.last()["result"]["contents"][0]["uri"],
        "fixture+test://template/42/data"
    );
    // logging/setLevel goes to every upstream that logs; the gateway answers once.
    let r = c
        .request("logging/setLevel", json!({"level": "warning"}))
        .await;
    assert_eq!(r.last()["result"], json!({}));

    // Sampling and elicitation: the upstream asks, the SDK client answers through the gateway.
    let url = gw.url("three");
    for (sdk, label) in [
        (Sdk::Python, "python"),
        (Sdk::TsV1, "ts-sdk-v1"),
        (Sdk::TsV2, "ts-sdk-v2"),
    ] {
        for prefix in ["local__", "remote__"] {
            let report = run_client(sdk, &url, "roundtrips", &["--prefix", prefix]).await;
            let sampling = report["sampling"].as_str().unwrap_or_default();
            assert!(
                sampling.contains(&format!("sampled by {label}")),
                "{sdk:?} {prefix}: {report}"
            );
            assert_eq!(
                report["samplingRequest"],
                format!("Resource trigger-sampling-request context: ping from {label}")
            );
            let elicitation = report["elicitation"].as_str().unwrap_or_default();
            assert!(
                elicitation.contains(&format!("- Name: Ada {label}")),
                "{sdk:?} {prefix}: {report}"
            );
            assert!(elicitation.contains("- Agreed to terms: true"));
        }
    }
    gw.stop().await;
    remote.kill().await;
}

#[tokio::test]
async fn cancellation_reaches_only_the_owner() {
    let dir = TempDir::new("owner");
    let traces = ["a", "b", "c"].map(|n| dir.path(&format!("{n}.jsonl")));
    let c_trace = traces[2].display().to_string();
    let peer_c = HttpPeer::demo(free_port(), &["--trace", &c_trace]).await;
    let mut b = demo_stdio(Some(&traces[1]));
    b.sharing = StdioSharing::PerSession;
    let gw = TestGateway::start(config(vec![tenant(
        "own",
        vec![
            upstream("a", UpstreamTransport::Stdio(demo_stdio(Some(&traces[0])))),
            upstream("b", UpstreamTransport::Stdio(b)),
            upstream("c", http(&peer_c.url())),
        ],
    )]))
    .await;
    let mut c = RawClient::new(gw.url("own"));
    c.initialize().await;
    // Everyone is busy with something; only b's request gets cancelled.
    let mut calls = vec![];
    for (name, id) in [("a__sleep", "ca"), ("b__sleep", "cb"), ("c__sleep", "cc")] {
        let mut other = RawClient::new(gw.url("own"));
        other.session = c.session.clone();
        calls.push(tokio::spawn(async move {
            other
                .post(&json!({"jsonrpc": "2.0", "id": id, "method": "tools/call",
                              "params": {"name": name, "arguments": {"ms": 1500}}}))
                .await
        }));
    }
    let all_started = eventually(Duration::from_secs(10), || {
        traces
            .iter()
            .all(|t| read_trace(t).iter().any(|m| m["params"]["name"] == "sleep"))
    })
    .await;
    assert!(all_started);
    let r = c
        .post(&json!({"jsonrpc": "2.0", "method": "notifications/cancelled", "params": {"requestId": "cb"}}))
        .await;
    assert_eq!(r.status, 202);
    let mut replies = vec![];
    for call in calls {
        replies.push(call.await.expect("call task"));
    }
    // b was cancelled: no response for it (the spec's guidance), its stream just ends.
    assert_eq!(replies[1].status, 200);
    assert_eq!(replies[1].content_type(), "text/event-stream");
    assert!(
        replies[1].messages.is_empty(),
        "no response to a cancelled request: {:?}",
        replies[1].messages
    );
    assert_eq!(
        replies[0].last()["result"]["content"][0]["text"],
        "slept 1500ms"
    );
    assert_eq!(
        replies[2].last()["result"]["content"][0]["text"],
        "slept 1500ms"
    );
    let cancelled = |t: &std::path::Path| {
        read_trace(t)
            .iter()
            .filter(|m| m["method"] == "notifications/cancelled")
            .count()
    };
    assert!(eventually(Duration::from_secs(5), || cancelled(&traces[1]) == 1).await);
    assert_eq!(cancelled(&traces[0]), 0, "a never hears of it");
    assert_eq!(cancelled(&traces[2]), 0, "c never hears of it");
    gw.stop().await;
    peer_c.kill().await;
}
