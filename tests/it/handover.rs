//! Hand-over of what lives only in one replica: two `switchyard run` processes sharing a real
//! `redis-server`, a client that subscribed to a resource and set its log level through
//! replica A, A killed (SIGKILL) or stopped (SIGTERM, a rolling restart), and the client's next
//! requests on replica B. B starts its own per-session stdio process (the demo server's
//! conformance fixture) or opens its own 2024-11-05 SSE stream (server-everything), and sets
//! them up again with the client's level and subscriptions before the client's request goes
//! on: the new process reports the level and the subscription, and a change of the resource
//! reaches the client's GET stream on B. With a shared process pool, B's process is
//! subscribed when the session first uses it; a process of B that crashes is set up again
//! the same way when it restarts. A request in flight on A when it is killed
//! fails (its connection is cut); on SIGTERM it finishes.

use std::time::{Duration, Instant};

use nix::sys::signal::Signal;
use serde_json::{Value, json};

use crate::cluster::read_until;
use crate::limits_sessions::children_of;
use crate::support::TempDir;
use crate::support::client::{RawClient, text};
use crate::support::config::demo_server_exe;
use crate::support::peers::{HttpPeer, free_port};
use crate::support::process::GatewayProcess;
use crate::support::redis::RedisServer;

/// Two replicas of one config on one Redis: `tenant_yaml` is the tenant list's entry.
async fn two_replicas(
    redis: &RedisServer,
    dir: &TempDir,
    prefix: &str,
    tenant_yaml: &str,
) -> (GatewayProcess, GatewayProcess) {
    let yaml = format!(
        "sessions:\n\
         \x20 store: {{redis: {{url: \"{redis}\", prefix: {prefix}}}}}\n\
         tenants:\n{tenant_yaml}",
        redis = redis.url(),
    );
    let a = GatewayProcess::start(&yaml, dir, "a").await;
    let b = GatewayProcess::start(&yaml, dir, "b").await;
    (a, b)
}

/// The client `from` as a load balancer would send it to replica `to`.
fn on(to: &GatewayProcess, tenant: &str, from: &RawClient) -> RawClient {
    let mut c = RawClient::new(to.url(tenant));
    c.session = from.session.clone();
    c.protocol_version = from.protocol_version.clone();
    c
}

/// The session's GET stream on the client's replica.
async fn get_stream(c: &RawClient) -> reqwest::Response {
    let session = c.session.clone().unwrap_or_default();
    let stream = c
        .get_stream(&[
            ("accept", "text/event-stream"),
            ("mcp-session-id", &session),
            ("mcp-protocol-version", &c.protocol_version),
        ])
        .await;
    assert_eq!(stream.status(), 200, "GET stream");
    stream
}

/// The result of a request, failing the test with the whole reply when there is none.
async fn result_of(c: &RawClient, method: &str, params: Value) -> Value {
    let r = c.request(method, params.clone()).await;
    let result = r.last()["result"].clone();
    assert!(
        r.status == 200 && result.is_object(),
        "{method} {params}: {r:?}"
    );
    result
}

/// Starts a 2 s call that reports progress (server-everything's long-running operation) and
/// reads its stream up to the first progress event: the stream, and that event's id.
async fn streamed_call(c: &RawClient) -> (reqwest::Response, String) {
    let id = c.next_id();
    let body = json!({"jsonrpc": "2.0", "id": id, "method": "tools/call", "params": {
        "name": "trigger-long-running-operation",
        "arguments": {"duration": 2, "steps": 4},
        "_meta": {"progressToken": "p1"}}});
    let mut resp = c.post_open(&body).await;
    let deadline = tokio::time::Instant::now() + Duration::from_secs(10);
    let mut seen = String::new();
    loop {
        let chunk = tokio::time::timeout_at(deadline, resp.chunk()).await;
        let Ok(Ok(Some(chunk))) = chunk else {
            panic!("no progress event on the call's stream: {seen}");
        };
        seen.push_str(&String::from_utf8_lossy(&chunk));
        let event = seen
            .split("\n\n")
            .find(|e| e.contains("notifications/progress"));
        if let Some(id) = event.and_then(|e| e.lines().find_map(|l| l.strip_prefix("id:"))) {
            return (resp, id.trim().to_owned());
        }
    }
}

/// Stops replica A with `signal` and waits for its exit; returns its log.
async fn stop_with(a: GatewayProcess, signal: Signal) -> String {
    a.signal(signal);
    a.stop().await
}

/// What the gateway logged as warnings about setting up a new upstream session again.
fn replay_warnings(log: &str) -> Vec<&str> {
    log.lines()
        .filter(|l| l.contains("set up again") || l.contains("had set up on the old one"))
        .collect()
}

/// How the stdio upstream's processes are shared: `per-session` (the process is the client's:
/// it gets the level and subscriptions) or `shared` (a pool per replica: the session's
/// subscriptions are made on B's process when the session first uses it there; the level is
/// the gateway's to filter and is not set on a process other sessions share).
async fn stdio_process_handed_over(signal: Signal, sharing: &str) {
    let started = Instant::now();
    let redis = RedisServer::start().await;
    let dir = TempDir::new("handover-stdio");
    let level_on_b = match sharing {
        "per-session" => "level=error",
        _ => "level=debug",
    };
    let tenant = format!(
        "\x20 - name: acme\n\
         \x20   prefix: {{mode: always}}\n\
         \x20   upstreams:\n\
         \x20     - name: fx\n\
         \x20       stdio:\n\
         \x20         command: \"{demo}\"\n\
         \x20         args: [--stdio, --conformance, --test-tools]\n\
         \x20         sharing: {sharing}\n",
        demo = demo_server_exe().display(),
    );
    let (a, b) = two_replicas(&redis, &dir, "hos", &tenant).await;

    // Through A: a level and a subscription, which A's process for the session holds.
    let mut c = RawClient::new(a.url("acme"));
    c.initialize().await;
    let _a_stream = get_stream(&c).await;
    result_of(&c, "logging/setLevel", json!({"level": "error"})).await;
    let uri = "fx+test://watched-resource";
    result_of(&c, "resources/subscribe", json!({ "uri": uri })).await;
    let state = c.call_tool("fx__test_session_state", json!({})).await;
    assert_eq!(
        text(state.last()),
        "level=error subscriptions=test://watched-resource",
        "{state:?}"
    );

    // A request in flight on A when A goes away.
    let slow = {
        let c = on(&a, "acme", &c);
        let id = c.next_id();
        let body = json!({"jsonrpc": "2.0", "id": id, "method": "tools/call",
                          "params": {"name": "fx__slow_compute", "arguments": {"seconds": 2}}});
        tokio::spawn(async move {
            let mut req = c.http.post(&c.url).body(body.to_string());
            for (k, v) in c.standard_headers() {
                req = req.header(k, v);
            }
            match req.send().await {
                Ok(resp) => resp.text().await.map_err(|e| e.to_string()),
                Err(e) => Err(e.to_string()),
            }
        })
    };
    tokio::time::sleep(Duration::from_millis(500)).await;
    let a_log = stop_with(a, signal).await;
    let in_flight = slow.await.expect("the in-flight request's task");
    match signal {
        // The drain lets it finish: the client gets its answer.
        Signal::SIGTERM => {
            let body = in_flight.unwrap_or_else(|e| panic!("drained, not cut: {e}\n{a_log}"));
            assert!(body.contains("computed  in 2000ms"), "{body}");
        }
        // Killed: the connection is cut and the answer never comes.
        _ => assert!(in_flight.is_err(), "{in_flight:?}"),
    }

    // The client goes on through B: its GET stream there, then its requests.
    let cb = on(&b, "acme", &c);
    let mut b_stream = get_stream(&cb).await;
    let state = cb.call_tool("fx__test_session_state", json!({})).await;
    assert_eq!(
        text(state.last()),
        format!("{level_on_b} subscriptions=test://watched-resource"),
        "B's process was given the subscription (and its own, the level) before the call: \
         {state:?}"
    );
    let touched = cb.call_tool("fx__test_touch_subscribed", json!({})).await;
    assert_eq!(
        text(touched.last()),
        "updated: test://watched-resource",
        "{touched:?}"
    );
    let updated = read_until(
        &mut b_stream,
        "notifications/resources/updated",
        Duration::from_secs(10),
    )
    .await
    .expect("the resource update on the client's GET stream from B");
    assert!(updated.contains(uri), "{updated}");

    // B's process crashes: the one started in its place is set up again too (per-session: the
    // client's level and subscriptions; shared: the subscriptions of its sessions).
    let children = children_of(b.pid());
    assert_eq!(children.len(), 1, "B runs one process: {children:?}");
    let crashed = nix::unistd::Pid::from_raw(i32::try_from(children[0]).expect("pid"));
    nix::sys::signal::kill(crashed, Signal::SIGKILL).expect("the process is killed");
    let expected = format!("{level_on_b} subscriptions=test://watched-resource");
    let deadline = Instant::now() + Duration::from_secs(10);
    loop {
        let state = cb.call_tool("fx__test_session_state", json!({})).await;
        let seen = state.last()["result"]["content"][0]["text"].as_str() == Some(&expected);
        if seen && !children_of(b.pid()).contains(&children[0]) {
            break;
        }
        assert!(Instant::now() < deadline, "after the crash: {state:?}");
        tokio::time::sleep(Duration::from_millis(100)).await;
    }

    // Unsubscribed through B: a later process is not subscribed again.
    result_of(&cb, "resources/unsubscribe", json!({ "uri": uri })).await;
    let state = cb.call_tool("fx__test_session_state", json!({})).await;
    assert_eq!(
        text(state.last()),
        format!("{level_on_b} subscriptions="),
        "{state:?}"
    );

    let b_log = b.stop().await;
    assert!(
        b_log.contains("session continued on this replica"),
        "{b_log}"
    );
    if sharing == "per-session" {
        assert!(
            b_log.contains("resource subscriptions made again on a new upstream session"),
            "{b_log}"
        );
    }
    assert!(replay_warnings(&b_log).is_empty(), "{b_log}");
    assert!(
        started.elapsed() < Duration::from_secs(30),
        "took {:?}",
        started.elapsed()
    );
}

#[tokio::test]
async fn a_killed_replicas_per_session_process_is_replaced_with_level_and_subscriptions() {
    stdio_process_handed_over(Signal::SIGKILL, "per-session").await;
}

#[tokio::test]
async fn a_stopped_replicas_per_session_process_is_replaced_with_level_and_subscriptions() {
    stdio_process_handed_over(Signal::SIGTERM, "per-session").await;
}

#[tokio::test]
async fn a_killed_replicas_subscriptions_are_made_on_the_next_replicas_shared_process() {
    stdio_process_handed_over(Signal::SIGKILL, "shared").await;
}

async fn sse_stream_handed_over(signal: Signal) {
    let started = Instant::now();
    let redis = RedisServer::start().await;
    let dir = TempDir::new("handover-sse");
    let peer_log = dir.path("everything.log");
    let peer = HttpPeer::everything_sse(free_port(), &peer_log).await;
    // One upstream, no prefixes: the transparent path.
    let tenant = format!(
        "\x20 - name: old\n\
         \x20   upstreams:\n\
         \x20     - {{name: everything, sse: {{url: \"{url}\"}}}}\n",
        url = peer.sse_url(),
    );
    let (a, b) = two_replicas(&redis, &dir, "hoe", &tenant).await;

    let mut c = RawClient::new(a.url("old"));
    c.initialize().await;
    let listed = result_of(&c, "resources/list", json!({})).await;
    let uri = listed["resources"][0]["uri"]
        .as_str()
        .unwrap_or_else(|| panic!("a resource: {listed}"))
        .to_owned();
    result_of(&c, "logging/setLevel", json!({"level": "error"})).await;
    result_of(&c, "resources/subscribe", json!({ "uri": uri })).await;
    // A streamed call in flight on A: its first progress event is recorded, then A goes away.
    let (mut in_flight, last_event) = streamed_call(&c).await;
    let a_log = stop_with(a, signal).await;
    assert!(replay_warnings(&a_log).is_empty(), "{a_log}");
    let rest = read_until(&mut in_flight, "\"result\"", Duration::from_secs(10)).await;

    // On B, a new upstream stream: the subscription is made again before the tool call, which
    // starts the upstream's updates of what this stream's session subscribed to.
    let cb = on(&b, "old", &c);
    // The call's stream on A ends before the response either way: SIGTERM closes it with a
    // `retry` hint, SIGKILL cuts it. Resumed on B from the last event the client saw, it gives
    // the response the drain recorded (SIGTERM) or, killed, what A recorded and never the
    // response: nothing runs the call any more.
    assert_eq!(rest, None, "the stream on A ends before the response");
    let session = cb.session.clone().unwrap_or_default();
    let mut resumed = cb
        .get_stream(&[
            ("accept", "text/event-stream"),
            ("mcp-session-id", &session),
            ("mcp-protocol-version", &cb.protocol_version),
            ("last-event-id", &last_event),
        ])
        .await;
    assert_eq!(resumed.status(), 200, "the stream resumes on B");
    let answer = read_until(&mut resumed, "\"result\"", Duration::from_secs(5)).await;
    match signal {
        Signal::SIGTERM => assert!(
            answer.is_some_and(|a| a.contains("Long running operation completed")),
            "the drained call's response, resumed on B"
        ),
        _ => assert_eq!(answer, None, "no replica runs the call: no response comes"),
    }
    drop(resumed);
    let mut b_stream = get_stream(&cb).await;
    let toggled = cb.call_tool("toggle-subscriber-updates", json!({})).await;
    assert!(
        text(toggled.last()).starts_with("Started simulated resource updated notifications"),
        "{toggled:?}"
    );
    let updated = read_until(
        &mut b_stream,
        "notifications/resources/updated",
        Duration::from_secs(10),
    )
    .await
    .expect("an update of the subscribed resource on the client's GET stream from B");
    assert!(updated.contains(&uri), "{updated}");
    let _ = cb.call_tool("toggle-subscriber-updates", json!({})).await;

    let b_log = b.stop().await;
    assert!(
        b_log.contains("resource subscriptions made again on a new upstream session"),
        "{b_log}"
    );
    assert!(replay_warnings(&b_log).is_empty(), "{b_log}");
    // One upstream session per replica that served the client.
    let log = std::fs::read_to_string(&peer_log).unwrap_or_default();
    assert_eq!(log.matches("Client Connected").count(), 2, "{log}");
    peer.kill().await;
    assert!(
        started.elapsed() < Duration::from_secs(30),
        "took {:?}",
        started.elapsed()
    );
}

#[tokio::test]
async fn a_killed_replicas_sse_upstream_stream_is_replaced_with_the_subscriptions() {
    sse_stream_handed_over(Signal::SIGKILL).await;
}

#[tokio::test]
async fn a_stopped_replicas_sse_upstream_stream_is_replaced_with_the_subscriptions() {
    sse_stream_handed_over(Signal::SIGTERM).await;
}
