//! Tasks through the gateway (the 2026-07-28 tasks extension, SEP-2663). Two fixture
//! upstreams that implement it over HTTP, stateless clients of two users with their own
//! tokens: a created task's id reaches the client as the gateway's public id, task methods
//! find the owning upstream by it, another user's id is "not found", a client that did not
//! declare the extension gets -32021. An upstream without tasks behind two replicas sharing
//! a real Redis: the gateway runs the tasks, and either replica serves them. Session-based
//! clients (raw, and the official TypeScript SDK's task client) and the 2025-11-25 utility.

use std::time::Duration;

use serde_json::{Value, json};

use crate::cluster::{clustered, replicas};
use crate::support::client::{ACCEPT_BOTH, RawClient};
use crate::support::config::{config, http, tenant, upstream};
use crate::support::gateway::TestGateway;
use crate::support::jws::{TestKey, claims, jwks};
use crate::support::key_server::KeyServer;
use crate::support::peers::{HttpPeer, Sdk, free_port, run_client};
use crate::support::redis::RedisServer;
use switchyard::config::{AuthConfig, JwtAlgorithm};

const V: &str = "2026-07-28";
const EXTENSION: &str = "io.modelcontextprotocol/tasks";

fn meta(tasks: bool) -> Value {
    let mut caps = json!({"elicitation": {}});
    if tasks {
        caps["extensions"] = json!({ EXTENSION: {} });
    }
    json!({
        "io.modelcontextprotocol/protocolVersion": V,
        "io.modelcontextprotocol/clientCapabilities": caps,
        "io.modelcontextprotocol/clientInfo": {"name": "raw", "version": "1"},
    })
}

/// A stateless request; `name` is what `Mcp-Name` mirrors (tool name or task id).
async fn send(
    c: &RawClient,
    method: &str,
    name: Option<&str>,
    mut params: Value,
    tasks: bool,
) -> Value {
    params["_meta"] = meta(tasks);
    let body = json!({"jsonrpc": "2.0", "id": c.next_id(), "method": method, "params": params});
    let mut headers = vec![
        ("content-type", "application/json"),
        ("accept", ACCEPT_BOTH),
        ("mcp-protocol-version", V),
        ("mcp-method", method),
    ];
    if let Some(n) = name {
        headers.push(("mcp-name", n));
    }
    let bearer = c.bearer.as_ref().map(|t| format!("Bearer {t}"));
    if let Some(b) = &bearer {
        headers.push(("authorization", b));
    }
    c.post_raw(body.to_string(), &headers).await.last().clone()
}

async fn call(c: &RawClient, tool: &str, arguments: Value) -> Value {
    let params = json!({"name": tool, "arguments": arguments});
    send(c, "tools/call", Some(tool), params, true).await
}

async fn task(c: &RawClient, method: &str, id: &str, extra: Value) -> Value {
    let mut params = json!({ "taskId": id });
    if let (Some(p), Value::Object(e)) = (params.as_object_mut(), extra) {
        p.extend(e);
    }
    send(c, method, Some(id), params, true).await
}

/// Polls until the task leaves `working`.
async fn settled(c: &RawClient, id: &str) -> Value {
    for _ in 0..100 {
        let r = task(c, "tasks/get", id, json!({})).await;
        if r["result"]["status"] != "working" {
            return r;
        }
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    panic!("task {id} still working after 10 s");
}

#[tokio::test]
async fn task_ids_are_bound_to_their_user_and_routed_to_their_upstream() {
    let a = HttpPeer::demo(free_port(), &["--conformance", "--stateless"]).await;
    let b = HttpPeer::demo(free_port(), &["--conformance", "--stateless"]).await;
    let key = TestKey::generate("k1");
    let server = KeyServer::start(jwks(&[&key])).await;
    let mut t = tenant(
        "acme",
        vec![upstream("a", http(&a.url())), upstream("b", http(&b.url()))],
    );
    t.auth = Some(AuthConfig {
        issuer: server.issuer().into(),
        jwks_url: Some(server.jwks_url()),
        audiences: vec![],
        algorithms: vec![JwtAlgorithm::ES256],
        clock_skew: Duration::ZERO,
        required_scopes: vec!["mcp".into()],
        scopes_supported: vec![],
        token_type: switchyard::config::TokenType::Any,
    });
    let gw = TestGateway::start(config(vec![t])).await;
    let url = gw.url("acme");
    let client_of = |sub: &str| {
        let mut c = RawClient::new(url.clone());
        let mut claims = claims(server.issuer(), &url);
        claims["sub"] = sub.into();
        let header = json!({"alg": "ES256", "typ": "at+jwt", "kid": key.kid});
        c.bearer = Some(key.sign(&header, &claims));
        c
    };
    let alice = client_of("alice");
    let bob = client_of("bob");

    // The gateway offers the extension its upstreams offer.
    let d = send(&alice, "server/discover", None, json!({}), true).await;
    assert!(
        d["result"]["capabilities"]["extensions"][EXTENSION].is_object(),
        "{d}"
    );

    // One task on each upstream; the ids the client sees are the gateway's.
    let created = call(
        &alice,
        "a__slow_compute",
        json!({"seconds": 0.3, "label": "x"}),
    )
    .await;
    assert_eq!(created["result"]["resultType"], "task", "{created}");
    let on_a = created["result"]["taskId"]
        .as_str()
        .unwrap_or_default()
        .to_owned();
    assert!(!on_a.is_empty() && !on_a.starts_with("task-"), "{created}");
    let created = call(&alice, "b__confirm_delete", json!({"filename": "f.txt"})).await;
    let on_b = created["result"]["taskId"]
        .as_str()
        .unwrap_or_default()
        .to_owned();
    assert!(!on_b.is_empty() && !on_b.starts_with("task-"), "{created}");

    // Each is found on its own upstream, under the id the client holds.
    let done = settled(&alice, &on_a).await;
    assert_eq!(done["result"]["status"], "completed", "{done}");
    assert_eq!(done["result"]["taskId"], on_a.as_str(), "{done}");
    assert!(done.to_string().contains("computed x"), "{done}");
    let asks = task(&alice, "tasks/get", &on_b, json!({})).await;
    assert_eq!(asks["result"]["status"], "input_required", "{asks}");
    let keys: Vec<String> = asks["result"]["inputRequests"]
        .as_object()
        .map(|m| m.keys().cloned().collect())
        .unwrap_or_default();
    assert_eq!(keys.len(), 1, "{asks}");

    // Another user holding the ids finds nothing, and cannot act on them.
    for (method, id) in [("tasks/get", &on_a), ("tasks/cancel", &on_b)] {
        let r = task(&bob, method, id, json!({})).await;
        assert_eq!(r["error"]["code"], -32602, "{method} as bob: {r}");
    }
    let r = task(
        &bob,
        "tasks/update",
        &on_b,
        json!({"inputResponses": {keys[0].clone(): {"action": "accept", "content": {"confirm": true}}}}),
    )
    .await;
    assert_eq!(r["error"]["code"], -32602, "{r}");
    // An altered id is as unknown; the upstream's own id too.
    let r = task(&alice, "tasks/get", &format!("{on_a}x"), json!({})).await;
    assert_eq!(r["error"]["code"], -32602, "{r}");
    // Without the extension declared, the task methods are refused whatever the id.
    let r = send(
        &alice,
        "tasks/get",
        Some(&on_a),
        json!({"taskId": on_a}),
        false,
    )
    .await;
    assert_eq!(r["error"]["code"], -32021, "{r}");
    assert!(
        r["error"]["data"]["requiredCapabilities"]["extensions"][EXTENSION].is_object(),
        "{r}"
    );

    // The owner answers and the task completes.
    let ack = task(
        &alice,
        "tasks/update",
        &on_b,
        json!({"inputResponses": {keys[0].clone(): {"action": "accept", "content": {"confirm": true}}}}),
    )
    .await;
    assert_eq!(ack["result"], json!({"resultType": "complete"}), "{ack}");
    let done = task(&alice, "tasks/get", &on_b, json!({})).await;
    assert_eq!(done["result"]["status"], "completed", "{done}");
    assert!(done.to_string().contains("deleted f.txt"), "{done}");
    gw.stop().await;
    a.kill().await;
    b.kill().await;
}

/// Polls `c` until the task is terminal.
async fn finished(c: &RawClient, id: &str) -> Value {
    let mut r = Value::Null;
    for _ in 0..100 {
        r = task(c, "tasks/get", id, json!({})).await;
        let status = r["result"]["status"]
            .as_str()
            .unwrap_or_default()
            .to_owned();
        if !["working", "input_required"].contains(&status.as_str()) {
            return r;
        }
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    panic!("task {id} not finished after 10 s: {r}");
}

/// An upstream without tasks (the session-based fixture, over HTTP) behind two replicas sharing
/// a real Redis: the gateway runs its task-supporting tools as tasks, keeps their records in
/// Redis, and either replica serves them.
#[tokio::test]
async fn gateway_run_tasks_are_kept_in_redis_and_served_by_any_replica() {
    let redis = RedisServer::start().await;
    let peer = HttpPeer::demo(free_port(), &["--conformance"]).await;
    let cfg = clustered(
        &redis,
        "tk",
        vec![tenant("acme", vec![upstream("fx", http(&peer.url()))])],
    );
    let gws = replicas(&cfg, 2).await;
    let (a, b) = (
        RawClient::new(gws[0].url("acme")),
        RawClient::new(gws[1].url("acme")),
    );

    let d = send(&a, "server/discover", None, json!({}), true).await;
    assert!(
        d["result"]["capabilities"]["extensions"][EXTENSION].is_object(),
        "{d}"
    );
    // Created on A, read on B at once (stored before the answer), completed there.
    let created = call(&a, "slow_compute", json!({"seconds": 0.5, "label": "x"})).await;
    assert_eq!(created["result"]["resultType"], "task", "{created}");
    assert_eq!(created["result"]["status"], "working", "{created}");
    let id = created["result"]["taskId"]
        .as_str()
        .unwrap_or_default()
        .to_owned();
    let now = task(&b, "tasks/get", &id, json!({})).await;
    assert_eq!(now["result"]["taskId"], id.as_str(), "{now}");
    let done = finished(&b, &id).await;
    assert_eq!(done["result"]["status"], "completed", "{done}");
    assert!(done.to_string().contains("computed x"), "{done}");
    let mut conn = redis.conn().await;
    let keys: Vec<String> = redis::cmd("KEYS")
        .arg("tk:v1:task:*")
        .query_async(&mut conn)
        .await
        .unwrap_or_default();
    assert!(!keys.is_empty(), "task records are in Redis");

    // A tool error completes the task (isError); a JSON-RPC error fails it.
    let created = call(&a, "failing_job", json!({})).await;
    let id = created["result"]["taskId"]
        .as_str()
        .unwrap_or_default()
        .to_owned();
    let done = finished(&b, &id).await;
    assert_eq!(done["result"]["status"], "completed", "{done}");
    assert_eq!(done["result"]["result"]["isError"], true, "{done}");
    let created = call(&a, "protocol_error_job", json!({})).await;
    let id = created["result"]["taskId"]
        .as_str()
        .unwrap_or_default()
        .to_owned();
    let done = finished(&b, &id).await;
    assert_eq!(done["result"]["status"], "failed", "{done}");
    assert!(done["result"]["error"]["code"].is_i64(), "{done}");

    // The upstream asks during the call: the task waits with its question; an answer given
    // to the replica running it, or to the other one (queued in Redis), completes it.
    let created = call(&a, "confirm_delete", json!({"filename": "f.txt"})).await;
    let id = created["result"]["taskId"]
        .as_str()
        .unwrap_or_default()
        .to_owned();
    let asks = settled(&b, &id).await;
    assert_eq!(asks["result"]["status"], "input_required", "{asks}");
    let key = asks["result"]["inputRequests"]
        .as_object()
        .and_then(|m| m.keys().next().cloned())
        .unwrap_or_default();
    let ack = task(
        &a,
        "tasks/update",
        &id,
        json!({"inputResponses": {key: {"action": "accept", "content": {"confirm": true}}}}),
    )
    .await;
    assert_eq!(ack["result"], json!({"resultType": "complete"}), "{ack}");
    let done = finished(&b, &id).await;
    assert_eq!(done["result"]["status"], "completed", "{done}");
    assert!(done.to_string().contains("deleted f.txt"), "{done}");
    let created = call(&a, "confirm_delete", json!({"filename": "g.txt"})).await;
    let id = created["result"]["taskId"]
        .as_str()
        .unwrap_or_default()
        .to_owned();
    let asks = settled(&a, &id).await;
    let key = asks["result"]["inputRequests"]
        .as_object()
        .and_then(|m| m.keys().next().cloned())
        .unwrap_or_default();
    let ack = task(
        &b,
        "tasks/update",
        &id,
        json!({"inputResponses": {key: {"action": "accept", "content": {"confirm": true}}}}),
    )
    .await;
    assert_eq!(ack["result"], json!({"resultType": "complete"}), "{ack}");
    let done = finished(&a, &id).await;
    assert_eq!(done["result"]["status"], "completed", "{done}");
    assert!(done.to_string().contains("deleted g.txt"), "{done}");

    // Cancelled on B while A runs it: cancelled it stays (A drops the call, not the status).
    let created = call(&a, "slow_compute", json!({"seconds": 2, "label": "y"})).await;
    let id = created["result"]["taskId"]
        .as_str()
        .unwrap_or_default()
        .to_owned();
    let ack = task(&b, "tasks/cancel", &id, json!({})).await;
    assert_eq!(ack["result"], json!({"resultType": "complete"}), "{ack}");
    tokio::time::sleep(Duration::from_millis(2500)).await;
    let after = task(&a, "tasks/get", &id, json!({})).await;
    assert_eq!(after["result"]["status"], "cancelled", "{after}");

    // Without the extension: a tool that requires a task is refused, an optional one runs.
    let r = send(
        &a,
        "tools/call",
        Some("failing_job"),
        json!({"name": "failing_job", "arguments": {}}),
        false,
    )
    .await;
    assert_eq!(r["error"]["code"], -32021, "{r}");
    let r = send(
        &a,
        "tools/call",
        Some("slow_compute"),
        json!({"name": "slow_compute", "arguments": {"seconds": 0}}),
        false,
    )
    .await;
    assert!(r["result"]["content"].is_array(), "{r}");
    for gw in gws {
        gw.stop().await;
    }
    peer.kill().await;
}

/// Session-based clients (2025-11-25) and the `tasks` utility of two upstreams (the demo
/// server with `--tasks`): the capability merged, `params.task` calls routed to their owner,
/// task ids made public, `tasks/get|result|cancel` routed back by them, `tasks/list`
/// aggregated and paginated with the gateway's cursor.
#[tokio::test]
async fn session_clients_use_their_upstreams_tasks_through_public_ids() {
    let a = HttpPeer::demo(free_port(), &["--tasks"]).await;
    let b = HttpPeer::demo(free_port(), &["--tasks"]).await;
    let gw = TestGateway::start(config(vec![tenant(
        "acme",
        vec![upstream("a", http(&a.url())), upstream("b", http(&b.url()))],
    )]))
    .await;
    let mut c = RawClient::new(gw.url("acme"));
    let init = c.initialize().await;
    assert_eq!(
        init["capabilities"]["tasks"],
        json!({"list": {}, "cancel": {}, "requests": {"tools": {"call": {}}}}),
        "{init}"
    );
    let tools = c.request("tools/list", json!({})).await;
    let sleep = tools.last()["result"]["tools"]
        .as_array()
        .and_then(|t| t.iter().find(|t| t["name"] == "a__sleep").cloned())
        .unwrap_or_default();
    assert_eq!(sleep["execution"]["taskSupport"], "optional", "{sleep}");

    let create = |tool: &'static str, ms: u64| {
        let c = &c;
        async move {
            let r = c
                .request(
                    "tools/call",
                    json!({"name": tool, "arguments": {"ms": ms}, "task": {"ttl": 60000}}),
                )
                .await;
            let v = r.last().clone();
            let id = v["result"]["task"]["taskId"]
                .as_str()
                .unwrap_or_default()
                .to_owned();
            assert!(!id.is_empty() && !id.starts_with("task-"), "{v}");
            id
        }
    };
    let mut created = vec![
        create("a__sleep", 200).await,
        create("a__sleep", 200).await,
        create("a__sleep", 5000).await,
        create("b__sleep", 200).await,
    ];

    // tasks/result waits for the end; the related task is named by the public id.
    let r = c
        .request("tasks/result", json!({"taskId": created[3]}))
        .await;
    let v = r.last();
    assert!(v.to_string().contains("slept 200ms"), "{v}");
    assert_eq!(
        v["result"]["_meta"]["io.modelcontextprotocol/related-task"]["taskId"],
        created[3].as_str(),
        "{v}"
    );
    let r = c.request("tasks/get", json!({"taskId": created[0]})).await;
    assert_eq!(r.last()["result"]["taskId"], created[0].as_str(), "{r:?}");

    // Cancelled at its owner.
    let r = c
        .request("tasks/cancel", json!({"taskId": created[2]}))
        .await;
    assert_eq!(r.last()["result"]["status"], "cancelled", "{r:?}");
    let r = c
        .request("tasks/get", json!({"taskId": format!("{}x", created[2])}))
        .await;
    assert_eq!(r.last()["error"]["code"], -32602, "{r:?}");

    // Listed across both upstreams, two per upstream page: a second page holds the rest.
    let mut listed = Vec::new();
    let mut cursor: Option<String> = None;
    for _ in 0..5 {
        let params = match &cursor {
            Some(c) => json!({ "cursor": c }),
            None => json!({}),
        };
        let r = c.request("tasks/list", params).await;
        let v = r.last().clone();
        for t in v["result"]["tasks"].as_array().into_iter().flatten() {
            listed.push(t["taskId"].as_str().unwrap_or_default().to_owned());
        }
        cursor = v["result"]["nextCursor"].as_str().map(str::to_owned);
        if cursor.is_none() {
            break;
        }
    }
    listed.sort();
    created.sort();
    assert_eq!(listed, created);
    let r = c.request("tasks/list", json!({"cursor": "forged"})).await;
    assert_eq!(r.last()["error"]["code"], -32602, "{r:?}");

    // The official TypeScript SDK's (experimental) task client, through the gateway.
    let report = run_client(Sdk::TsV1, &gw.url("acme"), "tasks", &["--prefix", "b__"]).await;
    assert_eq!(report["events"][0], "taskCreated", "{report}");
    assert_eq!(report["result"], "slept 300ms", "{report}");
    assert_eq!(report["streamResult"], "slept 300ms", "{report}");
    assert_eq!(report["listed"], true, "{report}");
    gw.stop().await;
    a.kill().await;
    b.kill().await;
}

/// Each gateway-run task holds a call upstream after its client's request ended: a user has
/// at most 64 running at once on a replica, and a cancelled one gives its place back.
#[tokio::test]
async fn gateway_run_tasks_are_capped_per_user() {
    let peer = HttpPeer::demo(free_port(), &["--conformance"]).await;
    let gw = TestGateway::start(config(vec![tenant(
        "acme",
        vec![upstream("fx", http(&peer.url()))],
    )]))
    .await;
    let c = RawClient::new(gw.url("acme"));
    let mut ids = Vec::new();
    for _ in 0..64 {
        let r = call(&c, "slow_compute", json!({"seconds": 30})).await;
        assert_eq!(r["result"]["resultType"], "task", "{r}");
        ids.push(
            r["result"]["taskId"]
                .as_str()
                .unwrap_or_default()
                .to_owned(),
        );
    }
    let refused = call(&c, "slow_compute", json!({"seconds": 30})).await;
    assert_eq!(refused["error"]["code"], -32029, "{refused}");
    let ack = task(&c, "tasks/cancel", &ids[0], json!({})).await;
    assert_eq!(ack["result"], json!({"resultType": "complete"}), "{ack}");
    let again = call(&c, "slow_compute", json!({"seconds": 30})).await;
    assert_eq!(again["result"]["resultType"], "task", "{again}");
    ids.push(
        again["result"]["taskId"]
            .as_str()
            .unwrap_or_default()
            .to_owned(),
    );
    for id in &ids[1..] {
        task(&c, "tasks/cancel", id, json!({})).await;
    }
    gw.stop().await;
    peer.kill().await;
}

/// A replica stopping (a rolling restart) lets the tasks it runs finish within the drain
/// deadline, as it does forwarded requests: the record another replica serves says
/// `completed`, not `failed` by the stop.
#[tokio::test]
async fn a_stopping_replica_finishes_the_tasks_it_runs() {
    let redis = RedisServer::start().await;
    let peer = HttpPeer::demo(free_port(), &["--conformance"]).await;
    let cfg = clustered(
        &redis,
        "tkstop",
        vec![tenant("acme", vec![upstream("fx", http(&peer.url()))])],
    );
    let mut gws = replicas(&cfg, 2).await;
    let b = RawClient::new(gws[1].url("acme"));
    let a = RawClient::new(gws[0].url("acme"));
    let created = call(&a, "slow_compute", json!({"seconds": 1.5, "label": "stop"})).await;
    assert_eq!(created["result"]["resultType"], "task", "{created}");
    let id = created["result"]["taskId"]
        .as_str()
        .unwrap_or_default()
        .to_owned();
    let stopping = gws.remove(0);
    stopping.stop().await;
    let done = finished(&b, &id).await;
    assert_eq!(done["result"]["status"], "completed", "{done}");
    assert!(done.to_string().contains("computed stop"), "{done}");
    for gw in gws {
        gw.stop().await;
    }
    peer.kill().await;
}
