//! One endpoint over several upstreams: prefix modes, namespaced resource URIs (in lists, read
//! results and update notifications), collisions, cursors, failure policies.

use std::time::Duration;

use futures_util::StreamExt;
use serde_json::{Value, json};

use crate::support::client::RawClient;
use crate::support::config::{config, demo_stdio, http, tenant, upstream};
use crate::support::gateway::TestGateway;
use crate::support::peers::{everything_stdio, free_port};
use switchyard::config::{FailurePolicy, PrefixMode, TenantConfig, UpstreamTransport};
use switchyard::upstream::sse::SseParser;

fn demo(name: &str) -> switchyard::config::UpstreamConfig {
    upstream(name, UpstreamTransport::Stdio(demo_stdio(None)))
}

fn with_mode(mut t: TenantConfig, mode: PrefixMode) -> TenantConfig {
    t.prefix.mode = mode;
    t
}

async fn session(gw: &TestGateway, tenant: &str) -> RawClient {
    let mut c = RawClient::new(gw.url(tenant));
    c.initialize().await;
    c
}

fn names(reply: &Value, key: &str, field: &str) -> Vec<String> {
    reply["result"][key]
        .as_array()
        .unwrap_or_else(|| panic!("no {key} in {reply}"))
        .iter()
        .filter_map(|t| t[field].as_str().map(str::to_owned))
        .collect()
}

#[tokio::test]
async fn prefix_modes_shape_public_names() {
    let gw = TestGateway::start(config(vec![
        with_mode(tenant("always", vec![demo("one")]), PrefixMode::Always),
        tenant("cond", vec![demo("one")]),
        tenant("two", vec![demo("a"), demo("b")]),
    ]))
    .await;

    let c = session(&gw, "always").await;
    let tools = names(
        c.request("tools/list", json!({})).await.last(),
        "tools",
        "name",
    );
    assert_eq!(
        tools,
        [
            "one__echo",
            "one__add",
            "one__sleep",
            "one__crash",
            "one__stderr",
            "one__pid"
        ]
    );
    let r = c.call_tool("one__echo", json!({"message": "hi"})).await;
    assert_eq!(r.last()["result"]["content"][0]["text"], "hi");

    let c = session(&gw, "cond").await;
    let tools = names(
        c.request("tools/list", json!({})).await.last(),
        "tools",
        "name",
    );
    assert_eq!(tools[0], "echo", "one upstream, conditional: no prefix");

    let c = session(&gw, "two").await;
    let tools = names(
        c.request("tools/list", json!({})).await.last(),
        "tools",
        "name",
    );
    assert_eq!(tools.len(), 12);
    assert_eq!(
        &tools[..2],
        ["a__echo", "a__add"],
        "upstream order, then the upstream's order"
    );
    assert_eq!(&tools[6..8], ["b__echo", "b__add"]);
    let prompts = names(
        c.request("prompts/list", json!({})).await.last(),
        "prompts",
        "name",
    );
    assert_eq!(prompts, ["a__greeting", "b__greeting"]);
    let r = c
        .request(
            "prompts/get",
            json!({"name": "b__greeting", "arguments": {"name": "Ada"}}),
        )
        .await;
    assert_eq!(
        r.last()["result"]["messages"][0]["content"]["text"],
        "Hello, Ada!"
    );

    // Unknown names: -32602 saying how names are formed here.
    let r = c.call_tool("echo", json!({"message": "x"})).await;
    assert_eq!(r.last()["error"]["code"], -32602);
    let msg = r.last()["error"]["message"].as_str().unwrap_or_default();
    assert!(
        msg.contains("Unknown tool: \"echo\"")
            && msg.contains("<upstream>__<name>")
            && msg.contains("a, b"),
        "{msg}"
    );
    let r = c.call_tool("zz__echo", json!({"message": "x"})).await;
    assert_eq!(r.last()["error"]["code"], -32602);
    gw.stop().await;
}

#[tokio::test]
async fn resource_uris_are_namespaced_and_reversible() {
    let gw = TestGateway::start(config(vec![tenant("two", vec![demo("a"), demo("b")])])).await;
    let c = session(&gw, "two").await;
    let uris = names(
        c.request("resources/list", json!({})).await.last(),
        "resources",
        "uri",
    );
    assert_eq!(
        uris,
        [
            "a+demo://readme",
            "a+demo://docs/",
            "b+demo://readme",
            "b+demo://docs/"
        ]
    );
    let r = c
        .request("resources/read", json!({"uri": "b+demo://readme"}))
        .await;
    let contents = &r.last()["result"]["contents"];
    assert_eq!(
        contents[0]["uri"], "b+demo://readme",
        "read results carry the public URI: {r:?}"
    );
    assert!(
        contents[0]["text"]
            .as_str()
            .is_some_and(|t| t.contains("Switchyard"))
    );
    // URI schemes are case-insensitive.
    let r = c
        .request("resources/read", json!({"uri": "B+demo://readme"}))
        .await;
    assert!(r.last()["result"].is_object(), "{:?}", r.last());
    let r = c
        .request("resources/read", json!({"uri": "demo://readme"}))
        .await;
    assert_eq!(r.last()["error"]["code"], -32602);
    assert!(
        r.last()["error"]["message"]
            .as_str()
            .unwrap_or("")
            .contains("<upstream>+<uri>")
    );
    gw.stop().await;
}

#[tokio::test]
async fn never_mode_keeps_names_reports_collisions_and_routes_to_the_first() {
    let gw = TestGateway::start(config(vec![with_mode(
        tenant(
            "flat",
            vec![
                demo("a"),
                upstream("ev", UpstreamTransport::Stdio(everything_stdio())),
            ],
        ),
        PrefixMode::Never,
    )]))
    .await;
    let c = session(&gw, "flat").await;
    let reply = c.request("tools/list", json!({})).await;
    let tools = names(reply.last(), "tools", "name");
    assert!(
        tools.contains(&"add".to_string()) && tools.contains(&"get-sum".to_string()),
        "{tools:?}"
    );
    assert_eq!(
        tools.iter().filter(|t| *t == "echo").count(),
        1,
        "one echo offered"
    );
    let collisions = &reply.last()["result"]["_meta"]["io.switchyard/collisions"];
    assert_eq!(
        collisions,
        &json!([{"name": "echo", "upstream": "ev"}]),
        "{reply:?}"
    );
    // The first upstream keeps the name: the demo's echo answers without "Echo: ".
    let r = c.call_tool("echo", json!({"message": "who"})).await;
    assert_eq!(r.last()["result"]["content"][0]["text"], "who");
    // Names only the second upstream has are routed there.
    let r = c.call_tool("get-sum", json!({"a": 1, "b": 2})).await;
    assert_eq!(
        r.last()["result"]["content"][0]["text"],
        "The sum of 1 and 2 is 3."
    );
    // Resources without prefixes are routed by who lists them.
    let r = c
        .request("resources/read", json!({"uri": "demo://readme"}))
        .await;
    assert_eq!(r.last()["result"]["contents"][0]["uri"], "demo://readme");
    gw.stop().await;
}

#[tokio::test]
async fn cursors_are_opaque_and_tamper_proof() {
    let gw = TestGateway::start(config(vec![tenant("two", vec![demo("a"), demo("b")])])).await;
    let c = session(&gw, "two").await;
    for cursor in [
        "",
        "not-a-cursor",
        "eyJrIjoidG9vbHMvbGlzdCIsInUiOltdfQ.AAAA",
    ] {
        let r = c.request("tools/list", json!({"cursor": cursor})).await;
        assert_eq!(
            r.last()["error"]["code"],
            -32602,
            "{cursor:?}: {:?}",
            r.last()
        );
        assert!(
            r.last()["error"]["message"]
                .as_str()
                .unwrap_or("")
                .contains("Invalid cursor")
        );
    }
    gw.stop().await;
}

#[tokio::test]
async fn failure_policy_open_leaves_out_closed_refuses() {
    let dead = format!("http://127.0.0.1:{}/mcp", free_port());
    let mut closed = tenant("closed", vec![demo("a"), upstream("gone", http(&dead))]);
    closed.failure_policy = FailurePolicy::Closed;
    let gw = TestGateway::start(config(vec![
        tenant("open", vec![demo("a"), upstream("gone", http(&dead))]),
        closed,
    ]))
    .await;

    let c = session(&gw, "open").await;
    let tools = names(
        c.request("tools/list", json!({})).await.last(),
        "tools",
        "name",
    );
    assert_eq!(tools[0], "a__echo");
    assert!(tools.iter().all(|t| t.starts_with("a__")), "{tools:?}");
    let r = c.call_tool("gone__echo", json!({"message": "x"})).await;
    assert_eq!(r.last()["error"]["code"], -32010);
    assert!(
        r.last()["error"]["message"]
            .as_str()
            .unwrap_or("")
            .starts_with("upstream \"gone\" is unavailable")
    );

    let c = RawClient::new(gw.url("closed"));
    let id = c.next_id();
    let r = c
        .post(&json!({"jsonrpc": "2.0", "id": id, "method": "initialize", "params": {
            "protocolVersion": "2025-11-25", "capabilities": {}, "clientInfo": {"name": "t", "version": "0"}}}))
        .await;
    assert_eq!(r.status, 200);
    assert_eq!(r.last()["error"]["code"], -32010, "{:?}", r.last());
    assert!(
        r.header("mcp-session-id").is_none(),
        "no session on a refused initialize"
    );
    gw.stop().await;
}

/// On a process shared by all sessions, two sessions may use the same progress token at the
/// same time: each gets only its own progress.
#[tokio::test]
async fn progress_reaches_only_the_request_that_asked() {
    let gw = TestGateway::start(config(vec![tenant("p", vec![demo("d")])])).await;
    let a = session(&gw, "p").await;
    let b = session(&gw, "p").await;
    async fn call(c: &RawClient, ms: u64, steps: u64) -> crate::support::client::Reply {
        c.request(
            "tools/call",
            json!({"name": "sleep", "arguments": {"ms": ms, "steps": steps}, "_meta": {"progressToken": 1}}),
        )
        .await
    }
    let (ra, rb) = tokio::join!(call(&a, 600, 3), call(&b, 800, 4));
    for (r, steps) in [(ra, 3), (rb, 4)] {
        let progress: Vec<&Value> = r
            .messages
            .iter()
            .filter(|m| m["method"] == "notifications/progress")
            .collect();
        assert_eq!(progress.len(), steps, "{:?}", r.messages);
        assert!(
            progress
                .iter()
                .all(|p| p["params"]["progressToken"] == 1 && p["params"]["total"] == steps)
        );
        assert_eq!(
            r.last()["result"]["content"][0]["text"],
            format!("slept {}ms", if steps == 3 { 600 } else { 800 })
        );
    }
    gw.stop().await;
}

/// server-everything (one shared stdio process) sends resource updates; they reach only the
/// session that subscribed, on its GET stream, with the public URI.
#[tokio::test]
async fn resource_updates_reach_only_subscribers() {
    let gw = TestGateway::start(config(vec![with_mode(
        tenant(
            "ev",
            vec![upstream("ev", UpstreamTransport::Stdio(everything_stdio()))],
        ),
        PrefixMode::Always,
    )]))
    .await;
    let a = session(&gw, "ev").await;
    let b = session(&gw, "ev").await;
    let uri = names(
        a.request("resources/list", json!({})).await.last(),
        "resources",
        "uri",
    )
    .into_iter()
    .next()
    .expect("server-everything lists resources");
    assert!(uri.starts_with("ev+demo://"), "{uri}");

    let open = |c: &RawClient| {
        c.http
            .get(&c.url)
            .header("accept", "text/event-stream")
            .header("mcp-session-id", c.session.clone().unwrap_or_default())
            .send()
    };
    let (sa, sb) = (
        open(&a).await.expect("GET a"),
        open(&b).await.expect("GET b"),
    );
    let r = a.request("resources/subscribe", json!({"uri": uri})).await;
    assert_eq!(r.last()["result"], json!({}), "{:?}", r.last());
    let r = a
        .call_tool("ev__toggle-subscriber-updates", json!({}))
        .await;
    assert!(r.last()["result"].is_object(), "{:?}", r.last());

    let first_update = |resp: reqwest::Response, limit: Duration| async move {
        let mut body = resp.bytes_stream();
        let mut parser = SseParser::new(1 << 20);
        tokio::time::timeout(limit, async move {
            while let Some(Ok(chunk)) = body.next().await {
                parser.push(&chunk);
                while let Ok(Some(ev)) = parser.next_event() {
                    if let Ok(msg) = serde_json::from_slice::<Value>(&ev.data)
                        && msg["method"] == "notifications/resources/updated"
                    {
                        return Some(msg);
                    }
                }
            }
            None
        })
        .await
        .ok()
        .flatten()
    };
    let (got_a, got_b) = tokio::join!(
        first_update(sa, Duration::from_secs(15)),
        first_update(sb, Duration::from_secs(7))
    );
    let got_a = got_a.expect("the subscriber gets an update");
    assert_eq!(
        got_a["params"]["uri"], uri,
        "public URI in the notification"
    );
    assert!(
        got_b.is_none(),
        "a session that did not subscribe gets nothing: {got_b:?}"
    );
    gw.stop().await;
}
