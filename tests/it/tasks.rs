//! Tasks through the gateway (the 2026-07-28 tasks extension, SEP-2663): two fixture
//! upstreams that implement it over HTTP, stateless clients of two users with their own
//! tokens. A created task's id reaches the client as the gateway's public id; task methods
//! find the owning upstream by it; another user's id is "not found"; a client that did not
//! declare the extension gets -32021.

use std::time::Duration;

use serde_json::{Value, json};

use crate::support::client::{ACCEPT_BOTH, RawClient};
use crate::support::config::{config, http, tenant, upstream};
use crate::support::gateway::TestGateway;
use crate::support::jws::{TestKey, claims, jwks};
use crate::support::key_server::KeyServer;
use crate::support::peers::{HttpPeer, free_port};
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
