//! Stdio upstreams under stress: a crash mid-request (clear error, restart), a slow upstream
//! (timeout error, cancellation sent), progress extending the idle timeout, the hard cap,
//! client cancellation, and the child's clean environment.

use std::time::{Duration, Instant};

use serde_json::{Value, json};

use crate::support::client::RawClient;
use crate::support::config::{config, demo_stdio, stdio, tenant, upstream};
use crate::support::gateway::TestGateway;
use crate::support::peers::everything_stdio;
use crate::support::{TempDir, eventually, process_gone, read_trace};
use switchyard::config::{Secret, StdioSharing, UpstreamConfig, UpstreamTransport};

fn demo_upstream(trace: Option<&std::path::Path>, sharing: StdioSharing) -> UpstreamConfig {
    let mut stdio = demo_stdio(trace);
    stdio.sharing = sharing;
    upstream("demo", UpstreamTransport::Stdio(stdio))
}

fn text_of(reply: &Value) -> String {
    reply["result"]["content"][0]["text"]
        .as_str()
        .unwrap_or_else(|| panic!("no text result in {reply}"))
        .to_owned()
}

async fn pid_of(c: &RawClient) -> u32 {
    let r = c.call_tool("pid", json!({})).await;
    text_of(r.last())
        .parse()
        .expect("pid tool answers a number")
}

async fn crash_and_restart(sharing: StdioSharing) {
    let gw = TestGateway::start(config(vec![tenant(
        "s",
        vec![demo_upstream(None, sharing)],
    )]))
    .await;
    let mut c = RawClient::new(gw.url("s"));
    c.initialize().await;
    let first_pid = pid_of(&c).await;

    // A request in flight when the process dies gets a clear error, as does the crash call.
    let slow = {
        let url = gw.url("s");
        let session = c.session.clone();
        tokio::spawn(async move {
            let mut other = RawClient::new(url);
            other.session = session;
            other.call_tool("sleep", json!({"ms": 20000})).await
        })
    };
    tokio::time::sleep(Duration::from_millis(200)).await;
    let crash = c.call_tool("crash", json!({"exit_code": 7})).await;
    for reply in [crash, slow.await.expect("slow call task")] {
        assert_eq!(reply.status, 200);
        let err = &reply.last()["error"];
        assert_eq!(err["code"], -32000, "{err}");
        let msg = err["message"].as_str().unwrap_or_default();
        assert!(
            msg.contains("\"demo\"") && msg.contains("exited with status 7"),
            "message names the upstream and the exit: {msg}"
        );
    }
    let reaped = eventually(Duration::from_secs(5), || process_gone(first_pid)).await;
    assert!(reaped, "the crashed child was reaped, not left a zombie");

    // It comes back by itself, with a new process.
    let mut second_pid = None;
    let start = Instant::now();
    while start.elapsed() < Duration::from_secs(10) {
        let r = c.call_tool("pid", json!({})).await;
        if r.last()["result"].is_object() {
            second_pid = Some(text_of(r.last()).parse::<u32>().expect("pid"));
            break;
        }
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    let second_pid = second_pid.expect("the upstream restarted within 10s");
    assert_ne!(first_pid, second_pid);
    let r = c
        .call_tool("echo", json!({"message": "after restart"}))
        .await;
    assert_eq!(text_of(r.last()), "after restart");
    gw.stop().await;
    let reaped = eventually(Duration::from_secs(5), || process_gone(second_pid)).await;
    assert!(reaped, "the child is stopped and reaped with the gateway");
}

#[tokio::test]
async fn shared_process_crash_fails_in_flight_and_restarts() {
    crash_and_restart(StdioSharing::Shared).await;
}

#[tokio::test]
async fn per_session_process_crash_fails_in_flight_and_restarts() {
    crash_and_restart(StdioSharing::PerSession).await;
}

#[tokio::test]
async fn slow_upstream_times_out_and_gets_cancelled() {
    let dir = TempDir::new("slow");
    let trace = dir.path("trace.jsonl");
    let mut up = demo_upstream(Some(&trace), StdioSharing::Shared);
    up.request_timeout = Duration::from_millis(300);
    let gw = TestGateway::start(config(vec![tenant("s", vec![up])])).await;
    let mut c = RawClient::new(gw.url("s"));
    c.initialize().await;

    let start = Instant::now();
    let r = c.call_tool("sleep", json!({"ms": 5000})).await;
    let elapsed = start.elapsed();
    assert!(
        elapsed >= Duration::from_millis(300) && elapsed < Duration::from_secs(3),
        "{elapsed:?}"
    );
    let err = &r.last()["error"];
    assert_eq!(err["code"], -32001, "{err}");
    assert_eq!(
        err["message"],
        "upstream \"demo\" did not answer within 300ms"
    );
    assert_eq!(err["data"]["upstream"], "demo");

    // The upstream saw the call, then a cancellation for exactly that request id.
    let cancelled_for_call = eventually(Duration::from_secs(5), || {
        let msgs = read_trace(&trace);
        let call_id = msgs
            .iter()
            .find(|m| m["method"] == "tools/call" && m["params"]["name"] == "sleep")
            .map(|m| m["id"].clone());
        call_id.is_some_and(|id| {
            msgs.iter()
                .any(|m| m["method"] == "notifications/cancelled" && m["params"]["requestId"] == id)
        })
    })
    .await;
    assert!(cancelled_for_call, "trace: {:?}", read_trace(&trace));
    gw.stop().await;
}

#[tokio::test]
async fn progress_restarts_the_idle_timeout_until_the_hard_cap() {
    let mut up = demo_upstream(None, StdioSharing::Shared);
    up.request_timeout = Duration::from_millis(400);
    up.max_request_timeout = Duration::from_millis(2500);
    let gw = TestGateway::start(config(vec![tenant("s", vec![up])])).await;
    let mut c = RawClient::new(gw.url("s"));
    c.initialize().await;

    // 1.5s of work with progress every 100ms: never idle for 400ms, so it completes.
    let r = c
        .request(
            "tools/call",
            json!({"name": "sleep", "arguments": {"ms": 1500, "steps": 15},
                   "_meta": {"progressToken": "tok-A"}}),
        )
        .await;
    assert_eq!(
        r.content_type(),
        "text/event-stream",
        "progress makes it a stream"
    );
    let progress: Vec<&Value> = r
        .messages
        .iter()
        .filter(|m| m["method"] == "notifications/progress")
        .collect();
    assert_eq!(progress.len(), 15, "{:#?}", r.messages);
    assert!(
        progress
            .iter()
            .all(|p| p["params"]["progressToken"] == "tok-A")
    );
    assert_eq!(progress[14]["params"]["progress"], 15);
    assert_eq!(text_of(r.last()), "slept 1500ms");

    // Progress cannot keep a request alive past max_timeout.
    let start = Instant::now();
    let r = c
        .request(
            "tools/call",
            json!({"name": "sleep", "arguments": {"ms": 10000, "steps": 100},
                   "_meta": {"progressToken": 7}}),
        )
        .await;
    let elapsed = start.elapsed();
    assert!(
        elapsed >= Duration::from_millis(2500) && elapsed < Duration::from_secs(5),
        "{elapsed:?}"
    );
    assert!(r.messages.len() > 10, "progress arrived before the cap");
    assert!(r.messages[0]["params"]["progressToken"] == 7);
    assert_eq!(r.last()["error"]["code"], -32001);
    assert_eq!(
        r.last()["error"]["message"],
        "upstream \"demo\" did not answer within 2500ms"
    );
    gw.stop().await;
}

#[tokio::test]
async fn client_cancellation_is_relayed_with_the_upstream_id() {
    let dir = TempDir::new("cancel");
    let trace = dir.path("trace.jsonl");
    let gw = TestGateway::start(config(vec![tenant(
        "s",
        vec![demo_upstream(Some(&trace), StdioSharing::Shared)],
    )]))
    .await;
    let mut c = RawClient::new(gw.url("s"));
    c.initialize().await;
    let call = {
        let mut other = RawClient::new(gw.url("s"));
        other.session = c.session.clone();
        tokio::spawn(async move {
            other
                .post(
                    &json!({"jsonrpc": "2.0", "id": "call-1", "method": "tools/call",
                              "params": {"name": "sleep", "arguments": {"ms": 20000}}}),
                )
                .await
        })
    };
    let seen = eventually(Duration::from_secs(5), || {
        read_trace(&trace)
            .iter()
            .any(|m| m["params"]["name"] == "sleep")
    })
    .await;
    assert!(seen, "the call reached the upstream");
    let r = c
        .post(
            &json!({"jsonrpc": "2.0", "method": "notifications/cancelled",
                      "params": {"requestId": "call-1", "reason": "user abort"}}),
        )
        .await;
    assert_eq!(r.status, 202);
    let reply = tokio::time::timeout(Duration::from_secs(5), call)
        .await
        .expect("the cancelled call ends promptly")
        .expect("task");
    // No response to a cancelled request (the spec's guidance): the POST's stream ends empty.
    assert_eq!(reply.status, 200);
    assert_eq!(reply.content_type(), "text/event-stream");
    assert!(reply.messages.is_empty(), "{:?}", reply.messages);

    let msgs = read_trace(&trace);
    let upstream_id = msgs
        .iter()
        .find(|m| m["params"]["name"] == "sleep")
        .map(|m| m["id"].clone())
        .expect("call in trace");
    assert_ne!(
        upstream_id,
        json!("call-1"),
        "the upstream sees the gateway's own id"
    );
    let relayed = eventually(Duration::from_secs(5), || {
        read_trace(&trace).iter().any(|m| {
            m["method"] == "notifications/cancelled"
                && m["params"]["requestId"] == upstream_id
                && m["params"]["reason"] == "user abort"
        })
    })
    .await;
    assert!(relayed, "trace: {:?}", read_trace(&trace));
    gw.stop().await;
}

/// The child sees the safe variables and what config adds, not the gateway's environment.
#[tokio::test]
async fn stdio_children_get_a_clean_environment() {
    let mut stdio = everything_stdio();
    stdio
        .env
        .insert("SWITCHYARD_TEST_SETTING".into(), Secret::new("from-config"));
    let gw = TestGateway::start(config(vec![tenant(
        "env",
        vec![upstream("everything", UpstreamTransport::Stdio(stdio))],
    )]))
    .await;
    let mut c = RawClient::new(gw.url("env"));
    c.initialize().await;
    let r = c.call_tool("get-env", json!({})).await;
    let text = r.last()["result"]["content"][0]["text"]
        .as_str()
        .unwrap_or_default()
        .to_owned();
    assert!(text.contains("SWITCHYARD_TEST_SETTING"), "{text}");
    assert!(text.contains("from-config"));
    assert!(text.contains("\"PATH\""), "PATH is inherited: {text}");
    // Cargo sets this for the test process (and so the in-process gateway); it must not leak.
    assert!(
        !text.contains("CARGO_MANIFEST_DIR"),
        "gateway env leaked: {text}"
    );
    gw.stop().await;
}

#[tokio::test]
async fn a_shared_pool_pins_each_session_to_one_of_its_processes() {
    let mut stdio = demo_stdio(None);
    stdio.sharing = StdioSharing::Shared;
    stdio.pool_size = 3;
    let gw = TestGateway::start(config(vec![tenant(
        "pool",
        vec![upstream("demo", UpstreamTransport::Stdio(stdio))],
    )]))
    .await;
    let mut pids = std::collections::BTreeSet::new();
    for _ in 0..12 {
        let mut c = RawClient::new(gw.url("pool"));
        c.initialize().await;
        let pid = pid_of(&c).await;
        // Every request of a session goes to the same process.
        for _ in 0..3 {
            assert_eq!(pid_of(&c).await, pid);
        }
        pids.insert(pid);
        c.delete().await;
    }
    // Twelve sessions over three processes: more than one used, never more than three.
    assert!(
        (2..=3).contains(&pids.len()),
        "sessions spread over {pids:?}"
    );
    let tenants = gw.gateway.tenants();
    let pool: Vec<u32> = tenants.iter().next().expect("tenant").upstreams[0]
        .pool()
        .iter()
        .filter_map(|c| c.pid())
        .collect();
    assert_eq!(pool.len(), 3, "three processes running: {pool:?}");
    assert!(
        pids.iter().all(|p| pool.contains(p)),
        "{pids:?} within {pool:?}"
    );
    gw.stop().await;
    for pid in pool {
        assert!(
            eventually(Duration::from_secs(10), || process_gone(pid)).await,
            "pool process {pid} stopped with the gateway"
        );
    }
}

/// `era` pins what the probe would find: `legacy` sends `initialize` first, never
/// `server/discover` (for servers that complain about the probe), and `modern` against a
/// session-based server is a clear error instead of a fallback.
#[tokio::test]
async fn the_admin_may_pin_an_upstreams_era() {
    let dir = TempDir::new("era-pin");
    let (auto_trace, legacy_trace) = (dir.path("auto.jsonl"), dir.path("legacy.jsonl"));
    let mut auto = upstream(
        "auto",
        UpstreamTransport::Stdio(demo_stdio(Some(&auto_trace))),
    );
    auto.era = switchyard::config::UpstreamEra::Auto;
    let mut legacy = upstream(
        "legacy",
        UpstreamTransport::Stdio(demo_stdio(Some(&legacy_trace))),
    );
    legacy.era = switchyard::config::UpstreamEra::Legacy;
    let mut modern = crate::support::peers::python_peer("modern", "lastwins_server.py", &[]);
    modern.era = switchyard::config::UpstreamEra::Modern;
    let gw = TestGateway::start(config(vec![tenant("p", vec![auto, legacy, modern])])).await;
    let mut c = RawClient::new(gw.url("p"));
    c.initialize().await;
    for name in ["auto__echo", "legacy__echo"] {
        let r = c.call_tool(name, json!({"message": "hi"})).await;
        assert_eq!(text_of(r.last()), "hi", "{name}");
    }
    let methods = |t: &std::path::Path| -> Vec<String> {
        read_trace(t)
            .iter()
            .filter_map(|m| m["method"].as_str().map(str::to_owned))
            .collect()
    };
    let (auto_seen, legacy_seen) = (methods(&auto_trace), methods(&legacy_trace));
    assert_eq!(
        auto_seen.first().map(String::as_str),
        Some("server/discover"),
        "auto probes: {auto_seen:?}"
    );
    assert_eq!(
        legacy_seen.first().map(String::as_str),
        Some("initialize"),
        "legacy is not probed: {legacy_seen:?}"
    );
    assert!(!legacy_seen.iter().any(|m| m == "server/discover"));
    let r = c.call_tool("modern__echo", json!({})).await;
    let message = r.last()["error"]["message"].as_str().unwrap_or_default();
    assert!(
        message.contains("era: modern"),
        "a pinned era that does not hold is a clear error: {:?}",
        r.last()
    );
    gw.stop().await;
}

/// A stateless-only server slow to start (silent past the probe's 5 s) is not taken for a
/// session-based one: when it then refuses `initialize`, the probe is asked again, and the
/// connection serves 2026-07-28.
#[tokio::test]
async fn a_slow_starting_stateless_server_is_not_mistaken_for_a_session_based_one() {
    let gw = TestGateway::start(config(vec![tenant(
        "slow",
        vec![crate::support::peers::python_peer(
            "slow",
            "slow_modern_server.py",
            &["--delay", "6"],
        )],
    )]))
    .await;
    let mut c = RawClient::new(gw.url("slow"));
    c.initialize().await;
    let r = c
        .call_tool("echo", json!({"message": "late but here"}))
        .await;
    assert_eq!(text_of(r.last()), "late but here", "{:?}", r.last());
    gw.stop().await;
}

/// Messages several times larger than a pipe holds, from concurrent sessions to one shared
/// process: the gateway writes what fits and queues the rest in order, so every call is
/// answered with its own message, whole.
#[tokio::test]
async fn messages_larger_than_the_pipe_arrive_whole_from_concurrent_sessions() {
    let gw = TestGateway::start(config(vec![tenant(
        "big",
        vec![demo_upstream(None, StdioSharing::Shared)],
    )]))
    .await;
    let mut sessions = vec![];
    for s in 0..4 {
        let url = gw.url("big");
        sessions.push(tokio::spawn(async move {
            let mut c = RawClient::new(url);
            c.initialize().await;
            for i in 0..6 {
                // 100-185 KB each (the body limit is 256 KiB): the pipe holds 64 KiB.
                let message = format!("{s}:{i}:{}", "x".repeat(100_000 + 17_000 * i));
                let r = c.call_tool("echo", json!({ "message": message })).await;
                assert_eq!(text_of(r.last()), message, "session {s}, call {i}");
            }
            c.delete().await;
        }));
    }
    for s in sessions {
        tokio::time::timeout(Duration::from_secs(60), s)
            .await
            .expect("large messages answered in time")
            .expect("session task");
    }
    gw.stop().await;
}

/// A stdio server that answers the handshake and `tools/list`, then stops reading its input
/// for good at the first `notifications/roots/list_changed` (its pipe made small first, so the
/// gateway's side fills sooner).
const STOPS_READING: &str = r#"
import fcntl, json, sys, time
try:
    fcntl.fcntl(0, 1031, 4096)  # F_SETPIPE_SZ
except OSError:
    pass
for line in sys.stdin:
    msg = json.loads(line)
    method = msg.get("method")
    if method == "initialize":
        result = {"protocolVersion": msg["params"]["protocolVersion"], "capabilities": {"tools": {}},
                  "serverInfo": {"name": "stops-reading", "version": "1"}}
    elif method == "tools/list":
        result = {"tools": [{"name": "wait", "inputSchema": {"type": "object"}}]}
    elif method == "notifications/roots/list_changed":
        time.sleep(3600)
    else:
        continue
    sys.stdout.write(json.dumps({"jsonrpc": "2.0", "id": msg["id"], "result": result}) + "\n")
    sys.stdout.flush()
"#;

/// A child that stops reading its input: the client's notifications for it are relayed while
/// the process's queue has room and dropped beyond (never more than a bounded number waiting),
/// a tool call that finds the queue full gets `-32010` after the upstream's request timeout
/// instead of waiting as long as the child does not read, and the tenant's other upstream
/// goes on answering at once.
#[tokio::test]
async fn a_child_that_stops_reading_costs_bounded_waits_and_clear_errors() {
    let dir = TempDir::new("stops-reading");
    let script = dir.0.join("server.py");
    std::fs::write(&script, STOPS_READING).expect("write the server");
    let python = crate::support::peers::python().display().to_string();
    let mut stalled = upstream(
        "stalled",
        UpstreamTransport::Stdio(stdio(python, &[&script.display().to_string()])),
    );
    stalled.request_timeout = Duration::from_secs(1);
    let gw = TestGateway::start(config(vec![tenant(
        "stop",
        vec![stalled, demo_upstream(None, StdioSharing::Shared)],
    )]))
    .await;
    let mut c = RawClient::new(gw.url("stop"));
    c.initialize().await;
    let tools = c.request("tools/list", json!({})).await;
    let names: Vec<String> = tools.last()["result"]["tools"]
        .as_array()
        .expect("tools")
        .iter()
        .filter_map(|t| t["name"].as_str().map(str::to_owned))
        .collect();
    let wait = names
        .iter()
        .find(|n| n.ends_with("wait"))
        .expect("the stalled upstream's tool");
    let echo = names
        .iter()
        .find(|n| n.ends_with("echo"))
        .expect("the demo's echo");

    // More notifications than the pipe, the process's queue (1,024) and the relays allowed to
    // wait (64) hold together: each is accepted at once, none makes the client wait.
    let started = Instant::now();
    let pad = "x".repeat(200);
    for _ in 0..1_300 {
        let r = c
            .post(
                &json!({"jsonrpc": "2.0", "method": "notifications/roots/list_changed",
                "params": {"_meta": {"pad": pad}}}),
            )
            .await;
        assert_eq!(r.status, 202, "{r:?}");
    }
    assert!(
        started.elapsed() < Duration::from_secs(20),
        "notifications were held up"
    );
    tokio::time::sleep(Duration::from_millis(300)).await;

    // The queue is full: a call waits at most the request timeout, then a clear error.
    let started = Instant::now();
    let r = c.call_tool(wait, json!({})).await;
    let took = started.elapsed();
    let error = &r.last()["error"];
    assert_eq!(error["code"], -32010, "{r:?}");
    let message = error["message"].as_str().unwrap_or_default();
    assert!(message.contains("has not read its input"), "{message}");
    assert!(
        took >= Duration::from_millis(900) && took < Duration::from_secs(10),
        "answered after {took:?}"
    );

    // The other upstream is not held up by it.
    let started = Instant::now();
    let r = c.call_tool(echo, json!({"message": "still here"})).await;
    assert_eq!(text_of(r.last()), "still here");
    assert!(started.elapsed() < Duration::from_secs(2));

    // Dropped relays are counted (the metrics are the process's, shared by the tests here).
    let metrics = String::from_utf8(switchyard::metrics::get().render()).expect("text");
    let dropped = metrics
        .lines()
        .find(|l| {
            l.starts_with("switchyard_notifications_dropped_total{reason=\"upstream_backlog\"}")
        })
        .and_then(|l| l.rsplit(' ').next())
        .and_then(|n| n.parse::<f64>().ok())
        .unwrap_or(0.0);
    assert!(dropped > 0.0, "no dropped relay counted:\n{metrics}");
    gw.stop().await;
}

/// A client's body that is pretty-printed (raw line feeds and carriage returns between its
/// tokens) reaches a stdio process as one line: the blanks become spaces, a `\n` escaped inside
/// a string stays what it was, and the framing holds for the calls after it.
#[tokio::test]
async fn a_pretty_printed_request_reaches_a_stdio_process_as_one_line() {
    let gw = TestGateway::start(config(vec![tenant(
        "pretty",
        vec![demo_upstream(None, StdioSharing::Shared)],
    )]))
    .await;
    let mut c = RawClient::new(gw.url("pretty"));
    c.initialize().await;
    for i in 0..3 {
        let body = format!(
            "{{\r\n  \"jsonrpc\": \"2.0\",\n  \"id\": {i},\r\n  \"method\": \"tools/call\",\n  \
             \"params\": {{\n    \"name\": \"echo\",\r\n    \"arguments\": {{\"message\": \
             \"line {i}\\nnext\\r\\nlast\"}}\n  }}\n}}\r\n"
        );
        let reply = tokio::time::timeout(Duration::from_secs(10), c.post_text(&body))
            .await
            .expect("a pretty-printed call answered in time");
        assert_eq!(reply.status, 200, "call {i}");
        assert_eq!(reply.last()["id"], json!(i), "call {i}: its own answer");
        assert_eq!(text_of(reply.last()), format!("line {i}\nnext\r\nlast"));
    }
    gw.stop().await;
}
