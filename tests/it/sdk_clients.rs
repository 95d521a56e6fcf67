//! The official SDK clients (Python `mcp` 2.x, TypeScript SDK v1 and v2) through the gateway,
//! in front of the reference `server-everything` run as a stdio child and over HTTP: list and
//! call tools, including a streamed long-running operation with progress. The Python client
//! runs in `auto` mode: it discovers and uses the stateless revision (2026-07-28).

use serde_json::{Value, json};

use crate::support::config::{config, tenant, upstream};
use crate::support::gateway::TestGateway;
use crate::support::peers::{HttpPeer, Sdk, everything_stdio, free_port, run_client};
use switchyard::config::{StdioSharing, UpstreamTransport};

/// Checks one client's report of the `everything` scenario. `prefix` is what the gateway put
/// in front of the tool names (empty for a single upstream).
pub(crate) fn assert_everything(report: &Value, sdk_label: &str, prefix: &str) {
    // The Python SDK 2.x and TS SDK v2 discover the stateless revision unless told `legacy`.
    let version = match (sdk_label, report["mode"].as_str()) {
        ("python" | "ts-sdk-v2", Some(mode)) if mode != "legacy" => "2026-07-28",
        _ => "2025-11-25",
    };
    assert_eq!(report["protocolVersion"], version, "{report}");
    let tools: Vec<&str> = report["tools"]
        .as_array()
        .unwrap_or_else(|| panic!("no tools in {report}"))
        .iter()
        .filter_map(Value::as_str)
        .collect();
    for t in ["echo", "get-sum", "trigger-long-running-operation"] {
        let name = format!("{prefix}{t}");
        assert!(
            tools.contains(&name.as_str()),
            "{name} missing from {tools:?}"
        );
    }
    assert_eq!(
        report["echo"],
        format!("Echo: hello from {sdk_label}"),
        "{report}"
    );
    assert_eq!(report["sum"], "The sum of 2 and 3 is 5.");
    assert_eq!(
        report["longRunning"],
        "Long running operation completed. Duration: 1 seconds, Steps: 4."
    );
    assert_eq!(
        report["progress"],
        json!([[1, 4], [2, 4], [3, 4], [4, 4]]),
        "{report}"
    );
}

async fn all_sdks(url: &str, prefix: &str, extra: &[&str]) {
    let py = run_client(Sdk::Python, url, "everything", extra).await;
    assert_everything(&py, "python", prefix);
    let ts1 = run_client(Sdk::TsV1, url, "everything", extra).await;
    assert_everything(&ts1, "ts-sdk-v1", prefix);
    let ts2 = run_client(Sdk::TsV2, url, "everything", extra).await;
    assert_everything(&ts2, "ts-sdk-v2", prefix);
}

#[tokio::test]
async fn sdks_through_stdio_everything() {
    let gw = TestGateway::start(config(vec![tenant(
        "ev",
        vec![upstream(
            "everything",
            UpstreamTransport::Stdio(everything_stdio()),
        )],
    )]))
    .await;
    all_sdks(&gw.url("ev"), "", &[]).await;
    gw.stop().await;
}

#[tokio::test]
async fn sdks_through_per_session_stdio_everything() {
    let mut stdio = everything_stdio();
    stdio.sharing = StdioSharing::PerSession;
    let gw = TestGateway::start(config(vec![tenant(
        "ev",
        vec![upstream("everything", UpstreamTransport::Stdio(stdio))],
    )]))
    .await;
    all_sdks(&gw.url("ev"), "", &[]).await;
    gw.stop().await;
}

#[tokio::test]
async fn sdks_through_http_everything() {
    let peer = HttpPeer::everything(free_port()).await;
    let gw = TestGateway::start(config(vec![tenant(
        "ev",
        vec![upstream(
            "everything",
            crate::support::config::http(&peer.url()),
        )],
    )]))
    .await;
    all_sdks(&gw.url("ev"), "", &[]).await;
    gw.stop().await;
    peer.kill().await;
}

/// Both at once on one endpoint: names carry the upstream prefix and calls reach the owner.
#[tokio::test]
async fn sdks_through_two_everything_upstreams() {
    let peer = HttpPeer::everything(free_port()).await;
    let gw = TestGateway::start(config(vec![tenant(
        "both",
        vec![
            upstream("local", UpstreamTransport::Stdio(everything_stdio())),
            upstream("remote", crate::support::config::http(&peer.url())),
        ],
    )]))
    .await;
    all_sdks(&gw.url("both"), "remote__", &["--prefix", "remote__"]).await;
    all_sdks(&gw.url("both"), "local__", &["--prefix", "local__"]).await;
    gw.stop().await;
    peer.kill().await;
}
