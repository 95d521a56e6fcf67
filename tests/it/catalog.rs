//! The aggregated catalog over several upstreams: pages walked with composite cursors (raw and
//! by the official SDK clients), refresh on `list_changed` relayed to listening sessions, and
//! invalid tool definitions left out.

use std::time::Duration;

use futures_util::StreamExt;
use serde_json::{Value, json};

use crate::support::client::RawClient;
use crate::support::config::{config, demo_stdio, tenant, upstream};
use crate::support::gateway::TestGateway;
use crate::support::peers::{Sdk, run_client};
use switchyard::config::{UpstreamConfig, UpstreamTransport};
use switchyard::upstream::sse::SseParser;

/// The hand-written paginating test server (tests/peers/catalog_server.py).
pub(crate) fn catalog_server(name: &str, args: &[&str]) -> UpstreamConfig {
    crate::support::peers::python_peer(name, "catalog_server.py", args)
}

async fn session(gw: &TestGateway, tenant: &str) -> RawClient {
    let mut c = RawClient::new(gw.url(tenant));
    c.initialize().await;
    c
}

/// Walks every page of `method`; returns the page sizes and the identifiers.
async fn walk(c: &RawClient, method: &str, key: &str, field: &str) -> (Vec<usize>, Vec<String>) {
    let mut cursor: Option<String> = None;
    let (mut pages, mut ids) = (vec![], vec![]);
    for _ in 0..20 {
        let params = match &cursor {
            Some(c) => json!({"cursor": c}),
            None => json!({}),
        };
        let r = c.request(method, params).await;
        let result = &r.last()["result"];
        let items = result[key]
            .as_array()
            .unwrap_or_else(|| panic!("{method}: {:?}", r.last()));
        pages.push(items.len());
        ids.extend(
            items
                .iter()
                .filter_map(|i| i[field].as_str().map(str::to_owned)),
        );
        match result["nextCursor"].as_str() {
            Some(next) => cursor = Some(next.to_owned()),
            None => return (pages, ids),
        }
    }
    panic!("{method} did not end after 20 pages");
}

#[tokio::test]
async fn pages_across_upstreams_keep_every_upstream_cursor() {
    let gw = TestGateway::start(config(vec![tenant(
        "pages",
        vec![
            catalog_server("one", &["--tools", "5", "--page-size", "2"]),
            catalog_server(
                "two",
                &["--tools", "4", "--page-size", "3", "--resources", "4"],
            ),
            upstream("demo", UpstreamTransport::Stdio(demo_stdio(None))),
        ],
    )]))
    .await;
    let c = session(&gw, "pages").await;
    let (pages, tools) = walk(&c, "tools/list", "tools", "name").await;
    // one: 6 tools in pages of 2; two: 5 in pages of 3; demo: 6 in one page.
    assert_eq!(pages, [2 + 3 + 6, 2 + 2, 2], "{tools:?}");
    let expected: Vec<String> = ["t0", "t1"]
        .map(|t| format!("one__{t}"))
        .into_iter()
        .chain(["t0", "t1", "t2"].map(|t| format!("two__{t}")))
        .chain(["echo", "add", "sleep", "crash", "stderr", "pid"].map(|t| format!("demo__{t}")))
        .chain(["t2", "t3"].map(|t| format!("one__{t}")))
        .chain(["t3", "add_tool"].map(|t| format!("two__{t}")))
        .chain(["t4", "add_tool"].map(|t| format!("one__{t}")))
        .collect();
    assert_eq!(
        tools, expected,
        "page by page, upstream order within a page"
    );
    let (pages, uris) = walk(&c, "resources/list", "resources", "uri").await;
    // one: 5 resources in pages of 2; two: 4 in pages of 3; demo: 2 in one page.
    assert_eq!(pages, [2 + 3 + 2, 2 + 1, 1]);
    assert_eq!(uris.len(), 5 + 4 + 2);
    assert!(
        uris.contains(&"two+res://item/3".to_string())
            && uris.contains(&"demo+demo://readme".to_string())
    );
    let r = c
        .request("resources/read", json!({"uri": "two+res://item/3"}))
        .await;
    assert_eq!(
        r.last()["result"]["contents"][0]["text"],
        "content of res://item/3"
    );
    let r = c.call_tool("one__t4", json!({})).await;
    assert_eq!(r.last()["result"]["content"][0]["text"], "t4 called");

    // The official SDK clients page through the same composite cursors.
    let url = gw.url("pages");
    for sdk in [Sdk::Python, Sdk::TsV1, Sdk::TsV2] {
        let report = run_client(sdk, &url, "paging", &[]).await;
        assert_eq!(
            report["tools"]["names"],
            json!(expected),
            "{sdk:?}: {report}"
        );
        assert_eq!(report["tools"]["pages"], json!([11, 4, 2]), "{sdk:?}");
        assert_eq!(report["resources"]["pages"], json!([7, 3, 1]), "{sdk:?}");
    }
    gw.stop().await;
}

#[tokio::test]
async fn list_changed_refreshes_the_catalog_and_reaches_listeners() {
    let gw = TestGateway::start(config(vec![tenant(
        "dyn",
        vec![
            catalog_server("cat", &["--tools", "1", "--page-size", "10"]),
            upstream("demo", UpstreamTransport::Stdio(demo_stdio(None))),
        ],
    )]))
    .await;
    let a = session(&gw, "dyn").await;
    let b = session(&gw, "dyn").await;
    let names = crate::support::client::tool_names;
    let before = names(b.request("tools/list", json!({})).await.last());
    assert!(before.contains("cat__t0") && !before.contains("cat__fresh"));

    let open = |c: &RawClient| {
        c.http
            .get(&c.url)
            .header("accept", "text/event-stream")
            .header("mcp-session-id", c.session.clone().unwrap_or_default())
            .send()
    };
    let (sa, sb) = (open(&a).await.expect("GET"), open(&b).await.expect("GET"));
    let r = a.call_tool("cat__add_tool", json!({"name": "fresh"})).await;
    assert_eq!(r.last()["result"]["content"][0]["text"], "added fresh");

    let wait_for_change = |resp: reqwest::Response| async move {
        let mut body = resp.bytes_stream();
        let mut parser = SseParser::new(1 << 20);
        tokio::time::timeout(Duration::from_secs(10), async move {
            while let Some(Ok(chunk)) = body.next().await {
                parser.push(&chunk);
                while let Ok(Some(ev)) = parser.next_event() {
                    if let Ok(m) = serde_json::from_slice::<Value>(&ev.data)
                        && m["method"] == "notifications/tools/list_changed"
                    {
                        return true;
                    }
                }
            }
            false
        })
        .await
        .unwrap_or(false)
    };
    let (got_a, got_b) = tokio::join!(wait_for_change(sa), wait_for_change(sb));
    assert!(
        got_a && got_b,
        "both listening sessions hear about it: {got_a} {got_b}"
    );
    let after = names(b.request("tools/list", json!({})).await.last());
    assert!(
        after.contains("cat__fresh"),
        "the cached catalog was refreshed: {after:?}"
    );
    let r = b.call_tool("cat__fresh", json!({})).await;
    assert_eq!(r.last()["result"]["content"][0]["text"], "fresh called");
    gw.stop().await;
}

#[tokio::test]
async fn invalid_tool_definitions_are_left_out() {
    let gw = TestGateway::start(config(vec![tenant(
        "bad",
        vec![catalog_server(
            "cat",
            &["--tools", "2", "--page-size", "50", "--invalid"],
        )],
    )]))
    .await;
    let c = session(&gw, "bad").await;
    let (_, tools) = walk(&c, "tools/list", "tools", "name").await;
    assert_eq!(tools, ["t0", "t1", "add_tool", "good_header"]);
    gw.stop().await;
}
