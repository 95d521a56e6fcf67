//! 2024-11-05 HTTP+SSE upstreams: server-everything in `sse` mode behind the gateway, used by
//! the official Python SDK over Streamable HTTP and by raw clients; the upstream negotiates
//! 2024-11-05; the end of the client session closes the upstream one; a stream that drops
//! fails the requests in flight and the next request opens a new upstream session.

use std::path::Path;
use std::time::Duration;

use serde_json::json;
use switchyard::protocol::ProtocolVersion;

use crate::sdk_clients::assert_everything;
use crate::support::client::{RawClient, text};
use crate::support::config::{config, sse, tenant, upstream};
use crate::support::gateway::TestGateway;
use crate::support::peers::{HttpPeer, Sdk, free_port, run_client};
use crate::support::{TempDir, eventually};

/// How many times server-everything logged `marker` (`Client Connected` / `Disconnected`).
fn logged(log: &Path, marker: &str) -> usize {
    std::fs::read_to_string(log)
        .unwrap_or_default()
        .matches(marker)
        .count()
}

async fn gateway(peer: &HttpPeer) -> TestGateway {
    TestGateway::start(config(vec![tenant(
        "old",
        vec![upstream("everything", sse(&peer.sse_url()))],
    )]))
    .await
}

#[tokio::test]
async fn python_sdk_through_an_sse_upstream() {
    let dir = TempDir::new("sse-upstream-sdk");
    let log = dir.path("everything.log");
    let peer = HttpPeer::everything_sse(free_port(), &log).await;
    let gw = gateway(&peer).await;
    let url = gw.url("old");

    let report = run_client(Sdk::Python, &url, "everything", &["--mode", "legacy"]).await;
    assert_everything(&report, "python", "");
    // Sampling and elicitation requests come on the upstream's stream, unrelated to any
    // request: with one request in flight they belong to it.
    let report = run_client(Sdk::Python, &url, "roundtrips", &["--mode", "legacy"]).await;
    assert_eq!(
        report["samplingRequest"], "Resource trigger-sampling-request context: ping from python",
        "{report}"
    );
    assert!(
        report["elicitation"]
            .as_str()
            .is_some_and(|e| e.contains("- Name: Ada python")),
        "{report}"
    );

    // Each client session had its own upstream session, closed when the client's ended.
    let closed = eventually(Duration::from_secs(10), || {
        logged(&log, "Client Disconnected") == 2
    })
    .await;
    assert!(
        closed && logged(&log, "Client Connected") == 2,
        "{}",
        std::fs::read_to_string(&log).unwrap_or_default()
    );
    gw.stop().await;
    peer.kill().await;
}

#[tokio::test]
async fn the_upstream_speaks_2024_11_05_and_ends_with_the_session() {
    let dir = TempDir::new("sse-upstream-raw");
    let log = dir.path("everything.log");
    let peer = HttpPeer::everything_sse(free_port(), &log).await;
    let gw = gateway(&peer).await;
    let mut c = RawClient::new(gw.url("old"));
    c.protocol_version = "2024-11-05".into();
    let init = c.initialize().await;
    assert_eq!(init["protocolVersion"], "2024-11-05", "{init}");

    // The gateway initialized the upstream with the client's version, and it agreed.
    let tenants = gw.gateway.tenants();
    let t = tenants.by_name("old").expect("tenant");
    let sessions = t.directory.all();
    let server = sessions[0]
        .link(t.upstreams[0].info.id)
        .and_then(|conn| conn.server())
        .expect("an initialized upstream session");
    assert_eq!(server.protocol_version, ProtocolVersion::V2024_11_05);

    let r = c.request("tools/list", json!({})).await;
    assert!(
        crate::support::client::tool_names(r.last()).contains("echo"),
        "{:?}",
        r.last()
    );
    let r = c.call_tool("echo", json!({"message": "old server"})).await;
    assert_eq!(text(r.last()), "Echo: old server");

    assert_eq!(c.delete().await.status, 200);
    let closed = eventually(Duration::from_secs(10), || {
        logged(&log, "Client Disconnected") == 1
    })
    .await;
    assert!(
        closed,
        "{}",
        std::fs::read_to_string(&log).unwrap_or_default()
    );
    gw.stop().await;
    peer.kill().await;
}

#[tokio::test]
async fn a_dropped_stream_fails_requests_in_flight_and_the_next_one_reconnects() {
    let dir = TempDir::new("sse-upstream-drop");
    let port = free_port();
    let peer = HttpPeer::everything_sse(port, &dir.path("first.log")).await;
    let gw = gateway(&peer).await;
    let mut c = RawClient::new(gw.url("old"));
    c.initialize().await;

    let url = c.url.clone();
    let session = c.session.clone();
    let slow = tokio::spawn(async move {
        let mut c = RawClient::new(url);
        c.session = session;
        c.call_tool(
            "trigger-long-running-operation",
            json!({"duration": 20, "steps": 10}),
        )
        .await
    });
    tokio::time::sleep(Duration::from_millis(1000)).await;
    peer.kill().await;
    let r = tokio::time::timeout(Duration::from_secs(15), slow)
        .await
        .expect("the request in flight is answered at once")
        .expect("the request task");
    let err = &r.last()["error"];
    assert_eq!(err["code"], -32000, "{:?}", r.last());
    let message = err["message"].as_str().unwrap_or_default();
    assert!(
        message.starts_with("upstream \"everything\" closed the connection before answering"),
        "{message}"
    );

    // A new server on the same port: the next request opens a new upstream session.
    let log = dir.path("second.log");
    let peer = HttpPeer::everything_sse(port, &log).await;
    let r = c.call_tool("echo", json!({"message": "again"})).await;
    assert_eq!(text(r.last()), "Echo: again", "{:?}", r.last());
    assert_eq!(logged(&log, "Client Connected"), 1);
    gw.stop().await;
    peer.kill().await;
}
