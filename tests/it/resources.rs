//! Resources across upstreams that offer different things: `resources/metadata` and resource
//! types (SEP-2093) with one upstream implementing the method (the demo server) and one that
//! does not (the hand-written catalog server), "resource not found" for clients of every era
//! (SEP-2164), subscriptions only where the owner offers them, and resource URIs in tool
//! results namespaced only for upstreams whose resources can be read back; the same with one
//! upstream and no prefixes.

use serde_json::{Value, json};

use crate::catalog::catalog_server;
use crate::support::client::RawClient;
use crate::support::config::{config, demo_server_exe, demo_stdio, stdio, tenant, upstream};
use crate::support::gateway::TestGateway;
use crate::support::{TempDir, read_trace};
use switchyard::config::{UpstreamConfig, UpstreamTransport};

fn demo(trace: Option<&std::path::Path>) -> UpstreamConfig {
    upstream("demo", UpstreamTransport::Stdio(demo_stdio(trace)))
}

fn fixture() -> UpstreamConfig {
    let s = stdio(
        demo_server_exe().display().to_string(),
        &["--stdio", "--conformance"],
    );
    upstream("fixture", UpstreamTransport::Stdio(s))
}

fn uris(contents: &Value) -> Vec<&str> {
    contents
        .as_array()
        .unwrap_or_else(|| panic!("not an array: {contents}"))
        .iter()
        .filter_map(|c| c["uri"].as_str())
        .collect()
}

#[tokio::test]
async fn resource_metadata_from_the_owner_or_from_the_catalog() {
    let gw = TestGateway::start(config(vec![tenant(
        "res",
        vec![demo(None), catalog_server("cat", &["--resources", "3"])],
    )]))
    .await;
    let mut c = RawClient::new(gw.url("res"));
    let init = c.initialize().await;
    let caps = &init["capabilities"]["resources"];
    assert!(caps.is_object(), "{init}");
    assert!(
        caps.get("subscribe").is_none(),
        "no upstream offers it: {caps}"
    );

    // Lists keep the resource types.
    let list = c.request("resources/list", json!({})).await;
    let listed = &list.last()["result"]["resources"];
    let docs = listed
        .as_array()
        .and_then(|a| a.iter().find(|r| r["uri"] == "demo+demo://docs/"))
        .unwrap_or_else(|| panic!("the collection is listed: {listed}"));
    assert_eq!(docs["resourceType"], "collection");
    assert_eq!(listed[0]["resourceType"], "document", "{listed}");

    // A collection reads as its documents: every entry's URI is namespaced.
    let read = c
        .request("resources/read", json!({"uri": "demo+demo://docs/"}))
        .await;
    let contents = &read.last()["result"]["contents"];
    assert_eq!(
        uris(contents),
        ["demo+demo://docs/echo", "demo+demo://docs/add"]
    );
    assert_eq!(contents[0]["resourceType"], "document");
    assert_eq!(contents[0]["name"], "echo");

    // The owner implements resources/metadata: its answer, the URI namespaced.
    let meta = c
        .request("resources/metadata", json!({"uri": "demo+demo://docs/"}))
        .await;
    let resource = &meta.last()["result"]["resource"];
    assert_eq!(resource["uri"], "demo+demo://docs/", "{:?}", meta.last());
    assert_eq!(resource["resourceType"], "collection");
    assert!(meta.last()["result"].get("contents").is_none());
    // A child the list does not show is the owner's to describe.
    let meta = c
        .request("resources/metadata", json!({"uri": "demo+demo://docs/add"}))
        .await;
    let resource = &meta.last()["result"]["resource"];
    assert_eq!(resource["uri"], "demo+demo://docs/add", "{:?}", meta.last());
    assert_eq!(resource["size"], "add {a, b} answers with the sum.".len());
    // Its own "not found" passes as the owner said it (this client is of 2025-11-25).
    let meta = c
        .request("resources/metadata", json!({"uri": "demo+demo://nothing"}))
        .await;
    assert_eq!(meta.error_code(), Some(-32002), "{:?}", meta.last());

    // The catalog server answers -32601: the gateway answers from the listed Resource.
    let meta = c
        .request("resources/metadata", json!({"uri": "cat+res://item/1"}))
        .await;
    assert_eq!(
        meta.last()["result"],
        json!({"resource": {"uri": "cat+res://item/1", "name": "item1", "mimeType": "text/plain"}}),
        "{:?}",
        meta.last()
    );
    for missing in ["cat+res://item/9", "nowhere+res://item/1"] {
        let meta = c
            .request("resources/metadata", json!({"uri": missing}))
            .await;
        assert_eq!(meta.error_code(), Some(-32602), "{:?}", meta.last());
        assert_eq!(meta.last()["error"]["data"]["uri"], missing);
    }
    let meta = c.request("resources/metadata", json!({})).await;
    assert_eq!(meta.error_code(), Some(-32602), "{:?}", meta.last());

    // A 2026-07-28 client gets SEP-2164's -32602 with the URI it asked for, for the owner's
    // -32002 too (translated at the era bridge).
    let s = RawClient::new(gw.url("res"));
    let params = |uri: &str| json!({"uri": uri, "_meta": crate::stateless::meta(json!({}))});
    for (i, method) in ["resources/read", "resources/metadata"].iter().enumerate() {
        let r =
            crate::stateless::send(&s, i as u64 + 1, method, params("demo+demo://nothing"), &[])
                .await;
        assert_eq!(r.status, 200, "{r:?}");
        assert_eq!(r.error_code(), Some(-32602), "{method}: {:?}", r.last());
        assert_eq!(r.last()["error"]["data"]["uri"], "demo+demo://nothing");
    }
    let r =
        crate::stateless::send(&s, 3, "resources/metadata", params("cat+res://item/2"), &[]).await;
    assert_eq!(
        r.last()["result"]["resource"]["uri"],
        "cat+res://item/2",
        "{:?}",
        r.last()
    );
    assert_eq!(r.last()["result"]["resultType"], "complete");
    gw.stop().await;
}

#[tokio::test]
async fn subscriptions_and_tool_links_follow_what_the_owner_offers() {
    let trace = TempDir::new("resources-trace");
    let trace_file = trace.0.join("demo.jsonl");
    let gw = TestGateway::start(config(vec![tenant(
        "mixed",
        vec![
            demo(Some(&trace_file)),
            fixture(),
            catalog_server("cat", &["--links"]),
            catalog_server("bare", &["--links", "--no-resources"]),
        ],
    )]))
    .await;
    let mut c = RawClient::new(gw.url("mixed"));
    let init = c.initialize().await;
    assert_eq!(
        init["capabilities"]["resources"]["subscribe"], true,
        "the fixture offers subscriptions: {init}"
    );

    // The demo server did not advertise subscriptions: refused here, never forwarded.
    for method in ["resources/subscribe", "resources/unsubscribe"] {
        let r = c
            .request(method, json!({"uri": "demo+demo://readme"}))
            .await;
        assert_eq!(r.error_code(), Some(-32602), "{method}: {:?}", r.last());
        let error = &r.last()["error"];
        assert_eq!(
            error["data"],
            json!({"uri": "demo+demo://readme", "upstream": "demo"})
        );
        assert!(
            error["message"]
                .as_str()
                .is_some_and(|m| m.contains("does not offer resource subscriptions")),
            "{error}"
        );
    }
    // A read of the same resource does reach it (the trace is written).
    let r = c
        .request("resources/read", json!({"uri": "demo+demo://readme"}))
        .await;
    assert!(r.last()["result"]["contents"].is_array(), "{:?}", r.last());
    let methods: Vec<String> = read_trace(&trace_file)
        .iter()
        .filter_map(|m| m["method"].as_str().map(str::to_owned))
        .collect();
    assert!(methods.iter().any(|m| m == "resources/read"), "{methods:?}");
    assert!(
        !methods.iter().any(|m| m.starts_with("resources/subscribe")
            || m.starts_with("resources/unsubscribe")),
        "{methods:?}"
    );
    // The fixture offers them: forwarded and answered.
    let r = c
        .request(
            "resources/subscribe",
            json!({"uri": "fixture+test://watched-resource"}),
        )
        .await;
    assert_eq!(r.last()["result"], json!({}), "{:?}", r.last());

    // Resource URIs in tool results: namespaced for an upstream with resources (they read
    // back through the gateway), left as they are for one without.
    let r = c.call_tool("cat__link", json!({})).await;
    let content = &r.last()["result"]["content"];
    assert_eq!(content[0]["uri"], "cat+res://item/0", "{content}");
    assert_eq!(
        content[1]["resource"]["uri"], "cat+res://embedded",
        "{content}"
    );
    let back = c
        .request("resources/read", json!({"uri": content[0]["uri"]}))
        .await;
    assert!(
        back.last()["result"]["contents"].is_array(),
        "{:?}",
        back.last()
    );
    let r = c.call_tool("bare__link", json!({})).await;
    let content = &r.last()["result"]["content"];
    assert_eq!(content[0]["uri"], "res://item/0", "{content}");
    assert_eq!(content[1]["resource"]["uri"], "res://embedded", "{content}");
    gw.stop().await;
}

#[tokio::test]
async fn one_upstream_behind_the_gateway_gets_the_same_answers_unprefixed() {
    let trace = TempDir::new("resources-transparent");
    let trace_file = trace.0.join("demo.jsonl");
    let gw = TestGateway::start(config(vec![
        tenant("solo", vec![demo(Some(&trace_file))]),
        tenant("cat", vec![catalog_server("cat", &["--resources", "2"])]),
    ]))
    .await;
    let mut c = RawClient::new(gw.url("solo"));
    c.initialize().await;
    let r = c
        .request("resources/subscribe", json!({"uri": "demo://readme"}))
        .await;
    assert_eq!(r.error_code(), Some(-32602), "{:?}", r.last());
    assert_eq!(r.last()["error"]["data"]["upstream"], "demo");
    let methods: Vec<String> = read_trace(&trace_file)
        .iter()
        .filter_map(|m| m["method"].as_str().map(str::to_owned))
        .collect();
    assert!(
        methods.iter().any(|m| m == "initialize")
            && !methods.iter().any(|m| m == "resources/subscribe"),
        "{methods:?}"
    );
    let r = c
        .request("resources/metadata", json!({"uri": "demo://docs/echo"}))
        .await;
    assert_eq!(r.last()["result"]["resource"]["uri"], "demo://docs/echo");

    let mut c = RawClient::new(gw.url("cat"));
    c.initialize().await;
    let r = c
        .request("resources/metadata", json!({"uri": "res://item/0"}))
        .await;
    assert_eq!(
        r.last()["result"]["resource"],
        json!({"uri": "res://item/0", "name": "item0", "mimeType": "text/plain"}),
        "{:?}",
        r.last()
    );
    let r = c
        .request("resources/metadata", json!({"uri": "res://item/5"}))
        .await;
    assert_eq!(r.error_code(), Some(-32602), "{:?}", r.last());
    assert_eq!(r.last()["error"]["data"]["uri"], "res://item/5");
    gw.stop().await;
}
