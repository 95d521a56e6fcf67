//! Nothing lost, nothing unbounded under floods (real gateway, real stdio demo upstream, real
//! sockets): a client that reads a flood of notifications slowly, or leaves and resumes with
//! `Last-Event-ID`, still gets the response; an upstream's requests for capabilities the
//! client did not declare are answered with an error to the upstream and never forwarded;
//! the requests waiting for the client are bounded and expire; a GET stream waits for the
//! handshake and is capped per session; upstream stderr cannot forge log lines; a grandchild
//! cannot keep a dead child's output read.

use std::time::{Duration, Instant};

use serde_json::{Value, json};

use crate::support::client::{RawClient, text};
use crate::support::config::{config, demo_server_exe, demo_stdio, tenant, upstream};
use crate::support::gateway::TestGateway;
use crate::support::process::GatewayProcess;
use crate::support::{TempDir, eventually, read_trace};
use switchyard::config::{Config, SessionBounds, UpstreamTransport};
use switchyard::session::LiveSession;

/// Notifications the flooding tool sends: ten times what a stream's log keeps.
const FLOOD: u64 = 100_000;

/// A tenant `f` in front of the demo server over stdio with its misbehaving tools.
fn demo_config(trace: Option<&std::path::Path>) -> Config {
    let mut stdio = demo_stdio(trace);
    stdio.args.push("--hostile-tools".into());
    config(vec![tenant(
        "f",
        vec![upstream("demo", UpstreamTransport::Stdio(stdio))],
    )])
}

/// The live session of `c` on the in-process gateway.
fn live_session(gw: &TestGateway, c: &RawClient) -> std::sync::Arc<LiveSession> {
    gw.gateway
        .tenants()
        .iter()
        .next()
        .expect("tenant")
        .directory
        .all()
        .into_iter()
        .find(|s| Some(s.key.id.as_str()) == c.session.as_deref())
        .expect("live session")
}

/// A GET on `c`'s session with `extra` headers.
async fn get_open(c: &RawClient, extra: &[(&str, &str)]) -> reqwest::Response {
    let mut req = c
        .http
        .get(&c.url)
        .header("accept", "text/event-stream")
        .header("mcp-session-id", c.session.clone().unwrap_or_default())
        .header("mcp-protocol-version", &c.protocol_version);
    for (k, v) in extra {
        req = req.header(*k, *v);
    }
    req.send().await.expect("GET reaches the gateway")
}

/// One SSE event: its id (if any) and its data parsed (`None` for a priming event).
struct Event {
    id: Option<String>,
    message: Option<Value>,
}

/// Splits the complete events off the front of `buf`.
fn take_events(buf: &mut String) -> Vec<Event> {
    let mut out = Vec::new();
    while let Some(end) = buf.find("\n\n") {
        let block: String = buf.drain(..end + 2).collect();
        let (mut id, mut data) = (None, String::new());
        for line in block.lines() {
            if let Some(v) = line.strip_prefix("id: ") {
                id = Some(v.to_owned());
            } else if let Some(v) = line.strip_prefix("data: ") {
                data.push_str(v);
            }
        }
        if id.is_some() || !data.is_empty() {
            let message =
                (!data.is_empty()).then(|| serde_json::from_str(&data).expect("SSE data is JSON"));
            out.push(Event { id, message });
        }
    }
    out
}

/// What a client read of a flood.
#[derive(Default)]
struct Read {
    progress: Vec<u64>,
    messages: u64,
    response: Option<Value>,
    last_id: Option<String>,
}

impl Read {
    fn take(&mut self, e: Event, request_id: u64) {
        if e.id.is_some() {
            self.last_id = e.id;
        }
        let Some(m) = e.message else { return };
        match m["method"].as_str() {
            Some("notifications/progress") => {
                self.progress
                    .push(m["params"]["progress"].as_u64().expect("progress"));
            }
            Some("notifications/message") => self.messages += 1,
            _ if m["id"] == request_id => {
                assert!(self.response.is_none(), "the response arrived twice");
                self.response = Some(m);
            }
            _ => panic!("unexpected message {m}"),
        }
    }
}

/// Reads `resp` until the response arrives or the stream ends, `pause` between chunks, at
/// most `limit` in all; `stop_after_first` returns after the first event.
async fn read_stream(
    resp: &mut reqwest::Response,
    read: &mut Read,
    request_id: u64,
    pause: Duration,
    limit: Duration,
    stop_after_first: bool,
) {
    let started = Instant::now();
    let mut buf = String::new();
    while read.response.is_none() {
        let left = limit.saturating_sub(started.elapsed());
        let chunk = tokio::time::timeout(left, resp.chunk())
            .await
            .unwrap_or_else(|_| panic!("no response within {limit:?}"))
            .expect("stream read");
        let Some(chunk) = chunk else { return };
        buf.push_str(&String::from_utf8_lossy(&chunk));
        let events = take_events(&mut buf);
        let any = !events.is_empty();
        for e in events {
            read.take(e, request_id);
        }
        if stop_after_first && any {
            return;
        }
        tokio::time::sleep(pause).await;
    }
}

/// Starts `flood` (`count` progress and log notifications, alternating) and returns the open
/// response stream and the request id.
async fn start_flood(c: &RawClient, count: u64) -> (reqwest::Response, u64) {
    let id = c.next_id();
    let body = json!({"jsonrpc": "2.0", "id": id, "method": "tools/call", "params": {
        "name": "flood", "arguments": {"count": count, "kind": "both"},
        "_meta": {"progressToken": "flood"}}});
    let resp = c.post_open(&body).await;
    assert_eq!(resp.status(), 200);
    assert_eq!(
        resp.headers()["content-type"],
        "text/event-stream",
        "a flood is streamed"
    );
    (resp, id)
}

/// The checks every flood reader makes: the response, progress in order ending with the last.
fn assert_flood_read(read: &Read) {
    let response = read.response.as_ref().expect("the response arrived");
    assert_eq!(text(response), format!("flooded {FLOOD}"));
    assert!(
        read.progress.windows(2).all(|w| w[0] < w[1]),
        "progress only goes forward"
    );
    assert_eq!(
        read.progress.last(),
        Some(&(FLOOD - 1)),
        "the last progress (coalesced, never dropped) comes before the response"
    );
}

#[tokio::test]
async fn a_slow_reader_of_a_notification_flood_still_gets_the_response() {
    let gw = TestGateway::start(demo_config(None)).await;
    let mut c = RawClient::new(gw.url("f"));
    c.initialize().await;
    let session = live_session(&gw, &c);
    let (mut resp, id) = start_flood(&c, FLOOD).await;
    let mut read = Read::default();
    let limit = Duration::from_secs(120);
    read_stream(&mut resp, &mut read, id, Duration::ZERO, limit, true).await;
    // The client stops reading while the whole flood comes (the socket's buffers fill, the
    // stream's log fills), then reads on, slowly.
    let done = eventually(limit, || !session.is_attached()).await;
    assert!(done, "the flood ended upstream");
    read_stream(
        &mut resp,
        &mut read,
        id,
        Duration::from_millis(2),
        limit,
        false,
    )
    .await;
    assert_flood_read(&read);
    let received = read.progress.len() as u64 + read.messages;
    assert!(
        received < FLOOD,
        "notifications the client could not keep up with were dropped ({received} received)"
    );
    gw.stop().await;
}

#[tokio::test]
async fn a_client_that_leaves_during_a_flood_resumes_and_gets_the_response() {
    let gw = TestGateway::start(demo_config(None)).await;
    let mut c = RawClient::new(gw.url("f"));
    c.initialize().await;
    let session = live_session(&gw, &c);
    let (mut resp, id) = start_flood(&c, FLOOD).await;
    let mut read = Read::default();
    let limit = Duration::from_secs(120);
    read_stream(&mut resp, &mut read, id, Duration::ZERO, limit, true).await;
    let primed = read.last_id.clone().expect("the priming event's id");
    let before = read.progress.len() as u64 + read.messages;
    drop(resp);
    // The request runs on without anyone listening, to its end.
    let done = eventually(limit, || !session.is_attached()).await;
    assert!(done, "the flood ended upstream");
    let mut resumed = get_open(&c, &[("last-event-id", &primed)]).await;
    assert_eq!(resumed.status(), 200, "resuming far behind is not an error");
    read_stream(&mut resumed, &mut read, id, Duration::ZERO, limit, false).await;
    assert_flood_read(&read);
    let resumed = read.progress.len() as u64 + read.messages - before;
    assert!(
        resumed < 10_000,
        "a resume replays at most the stream's window ({resumed} notifications)"
    );
    gw.stop().await;
}

// ---- Requests from the upstream to the client

/// Calls the demo's `ask` tool (`count` requests `method` with `params` to the client) while
/// reading the response stream; `answer` says what to reply to each request the client gets
/// (`None`: no reply). Returns the tool's summary and the requests the client received.
async fn ask(
    c: &RawClient,
    method: &str,
    params: Value,
    count: u64,
    answer: impl Fn(&Value) -> Option<Value>,
) -> (Value, Vec<Value>) {
    let id = c.next_id();
    let body = json!({"jsonrpc": "2.0", "id": id, "method": "tools/call", "params": {
        "name": "ask", "arguments": {"method": method, "params": params, "count": count}}});
    let mut resp = c.post_open(&body).await;
    assert_eq!(resp.status(), 200);
    let mut requests = Vec::new();
    let deadline = Instant::now() + Duration::from_secs(30);
    let response = if resp.headers()["content-type"] == "application/json" {
        let body = resp.bytes().await.expect("JSON response");
        serde_json::from_slice(&body).expect("JSON response")
    } else {
        let mut buf = String::new();
        loop {
            let left = deadline.saturating_duration_since(Instant::now());
            let chunk = tokio::time::timeout(left, resp.chunk())
                .await
                .expect("the tool answers within 30s")
                .expect("stream read")
                .expect("the stream ends with the response");
            buf.push_str(&String::from_utf8_lossy(&chunk));
            let mut done = None;
            for e in take_events(&mut buf) {
                let Some(m) = e.message else { continue };
                if m["id"] == id {
                    done = Some(m);
                } else if m.get("method").is_some() && m.get("id").is_some() {
                    if let Some(result) = answer(&m) {
                        let reply = json!({"jsonrpc": "2.0", "id": m["id"], "result": result});
                        assert_eq!(c.post(&reply).await.status, 202);
                    }
                    requests.push(m);
                }
            }
            if let Some(m) = done {
                break m;
            }
        }
    };
    let summary: Value = serde_json::from_str(&text(&response)).expect("a JSON summary");
    (summary, requests)
}

/// A client that declares `capabilities` at initialize.
async fn client_with(gw: &TestGateway, capabilities: Value) -> RawClient {
    let mut c = RawClient::new(gw.url("f"));
    let reply = c
        .post(
            &json!({"jsonrpc": "2.0", "id": 0, "method": "initialize", "params": {
            "protocolVersion": "2025-11-25", "capabilities": capabilities,
            "clientInfo": {"name": "floods", "version": "0"}}}),
        )
        .await;
    c.session = reply.header("mcp-session-id").map(str::to_owned);
    let ok = c
        .post(&json!({"jsonrpc": "2.0", "method": "notifications/initialized"}))
        .await;
    assert_eq!(ok.status, 202);
    c
}

#[tokio::test]
async fn requests_for_undeclared_capabilities_are_refused_to_the_upstream_not_forwarded() {
    let gw = TestGateway::start(demo_config(None)).await;
    let c = client_with(&gw, json!({"elicitation": {}})).await;
    let none = |_: &Value| None;
    let cases = [
        (
            "sampling/createMessage",
            json!({"messages": [], "maxTokens": 5}),
            -32601,
            "`sampling`",
        ),
        ("roots/list", json!({}), -32601, "`roots`"),
        // `elicitation: {}` is form mode only (2025-11-25).
        (
            "elicitation/create",
            json!({"mode": "url", "message": "m", "url": "https://example.com/x", "elicitationId": "e"}),
            -32602,
            "`elicitation.url`",
        ),
    ];
    for (method, params, code, names) in cases {
        let (summary, requests) = ask(&c, method, params, 1, none).await;
        assert!(
            requests.is_empty(),
            "{method} reached the client: {requests:?}"
        );
        assert_eq!(summary["errors"][0]["code"], code, "{method}: {summary}");
        let message = summary["errors"][0]["message"].as_str().unwrap_or_default();
        assert!(message.contains(names), "{method}: {message}");
    }
    // What the client declared, and ping, reach it; its answers reach the upstream.
    let answered = |m: &Value| Some(json!({"seen": m["method"]}));
    let form = json!({"message": "m", "requestedSchema": {"type": "object", "properties": {}}});
    let (summary, requests) = ask(&c, "elicitation/create", form, 1, answered).await;
    assert_eq!(requests.len(), 1);
    assert_eq!(
        summary["results"][0]["seen"], "elicitation/create",
        "{summary}"
    );
    let (summary, requests) = ask(&c, "ping", json!({}), 1, answered).await;
    assert_eq!(requests.len(), 1);
    assert_eq!(summary["results"][0]["seen"], "ping", "{summary}");
    gw.stop().await;
}

fn bounded_config(trace: &std::path::Path, max_server_requests: usize) -> Config {
    let mut cfg = demo_config(Some(trace));
    cfg.sessions.bounds = SessionBounds {
        max_server_requests,
        server_request_timeout: Duration::from_millis(1500),
        ..SessionBounds::default()
    };
    cfg
}

#[tokio::test]
async fn requests_waiting_for_the_client_are_bounded_and_expire() {
    let dir = TempDir::new("floods-pending");
    let trace = dir.path("demo.jsonl");
    let gw = TestGateway::start(bounded_config(&trace, 3)).await;
    let c = client_with(&gw, json!({"sampling": {}})).await;
    let params = json!({"messages": [], "maxTokens": 5});
    let started = Instant::now();
    // Five at once; the client answers none.
    let (summary, requests) = ask(&c, "sampling/createMessage", params, 5, |_| None).await;
    assert_eq!(requests.len(), 3, "only the bound reaches the client");
    let errors = summary["errors"].as_array().expect("errors");
    let codes: Vec<i64> = errors.iter().filter_map(|e| e["code"].as_i64()).collect();
    assert_eq!(codes.len(), 5, "{summary}");
    assert_eq!(
        codes.iter().filter(|c| **c == -32603).count(),
        2,
        "{summary}"
    );
    assert_eq!(
        codes.iter().filter(|c| **c == -32001).count(),
        3,
        "{summary}"
    );
    assert!(
        errors.iter().any(|e| e["message"]
            .as_str()
            .unwrap_or_default()
            .contains("3 requests waiting")),
        "{summary}"
    );
    assert!(
        started.elapsed() >= Duration::from_millis(1500),
        "the three waited for their expiry"
    );
    assert_eq!(
        summary["timeouts"], 0,
        "the gateway answered before the upstream gave up"
    );
    assert_eq!(live_session(&gw, &c).server_requests_waiting(), 0);

    // A late answer finds nothing: the upstream never gets it.
    let late = requests[0]["id"].clone();
    let reply = json!({"jsonrpc": "2.0", "id": late, "result": {"late": true}});
    assert_eq!(c.post(&reply).await.status, 202);
    let sent = eventually(Duration::from_secs(2), || {
        read_trace(&trace)
            .iter()
            .any(|m| m["result"]["late"] == true)
    })
    .await;
    assert!(!sent, "a late answer reached the upstream");
    // Room again: the next request is forwarded and answered.
    let (summary, _) = ask(
        &c,
        "sampling/createMessage",
        json!({"messages": [], "maxTokens": 5}),
        1,
        |_| Some(json!({"role": "assistant", "content": {"type": "text", "text": "hi"}})),
    )
    .await;
    assert_eq!(summary["results"][0]["role"], "assistant", "{summary}");
    gw.stop().await;
}

// ---- GET streams

#[tokio::test]
async fn a_get_stream_waits_for_the_handshake_then_is_refused() {
    let gw = TestGateway::start(demo_config(None)).await;
    let mut c = RawClient::new(gw.url("f"));
    c.initialize_only().await;
    let started = Instant::now();
    let r = c
        .get_raw(&[
            ("accept", "text/event-stream"),
            ("mcp-session-id", c.session.as_deref().unwrap_or_default()),
        ])
        .await;
    assert_eq!(r.status, 400, "{r:?}");
    assert_eq!(r.content_type(), "application/json");
    assert_eq!(r.last()["error"]["code"], -32600);
    let message = r.last()["error"]["message"].as_str().unwrap_or_default();
    assert!(message.contains("notifications/initialized"), "{message}");
    assert!(
        started.elapsed() >= Duration::from_secs(2),
        "after the grace"
    );

    // A GET sent together with the notification (as the Python SDK does) is served.
    let get = {
        let (url, session) = (c.url.clone(), c.session.clone().unwrap_or_default());
        tokio::spawn(async move {
            reqwest::Client::new()
                .get(url)
                .header("accept", "text/event-stream")
                .header("mcp-session-id", session)
                .send()
                .await
                .expect("GET")
                .status()
        })
    };
    tokio::time::sleep(Duration::from_millis(200)).await;
    let ok = c
        .post(&json!({"jsonrpc": "2.0", "method": "notifications/initialized"}))
        .await;
    assert_eq!(ok.status, 202);
    assert_eq!(get.await.expect("GET task"), 200);
    gw.stop().await;
}

#[tokio::test]
async fn get_streams_per_session_are_capped() {
    let mut cfg = demo_config(None);
    cfg.sessions.bounds.max_get_streams = 2;
    let gw = TestGateway::start(cfg).await;
    let mut c = RawClient::new(gw.url("f"));
    c.initialize().await;
    // A call that streams for a while: its stream can be resumed by GETs that stay open.
    let id = c.next_id();
    let body = json!({"jsonrpc": "2.0", "id": id, "method": "tools/call", "params": {
        "name": "sleep", "arguments": {"ms": 20000, "steps": 20},
        "_meta": {"progressToken": "s"}}});
    let mut call = c.post_open(&body).await;
    let mut read = Read::default();
    read_stream(
        &mut call,
        &mut read,
        id,
        Duration::ZERO,
        Duration::from_secs(30),
        true,
    )
    .await;
    let primed = read.last_id.clone().expect("priming event id");

    let first = get_open(&c, &[]).await;
    assert_eq!(first.status(), 200);
    let second = get_open(&c, &[("last-event-id", &primed)]).await;
    assert_eq!(second.status(), 200);
    let third = get_open(&c, &[("last-event-id", &primed)]).await;
    assert_eq!(third.status(), 429);
    assert_eq!(third.headers()["retry-after"], "5");
    let err: Value =
        serde_json::from_slice(&third.bytes().await.expect("body")).expect("JSON-RPC error body");
    assert_eq!(err["error"]["code"], -32600);
    assert!(
        err["error"]["message"]
            .as_str()
            .unwrap_or_default()
            .contains("2 GET streams open"),
        "{err}"
    );
    // A closed one makes room.
    drop(second);
    let mut again = None;
    for _ in 0..50 {
        let r = get_open(&c, &[("last-event-id", &primed)]).await;
        if r.status() == 200 {
            again = Some(r);
            break;
        }
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    assert!(again.is_some(), "the slot of a closed GET is freed");
    drop(first);
    drop(call);
    gw.stop().await;
}

// ---- Upstream stderr in the logs

/// Runs a gateway process logging in `format` whose stdio upstream writes `line` to its
/// stderr; returns the gateway's whole log.
async fn log_of_stderr_line(format: &str, line: &str) -> String {
    let dir = TempDir::new(&format!("floods-stderr-{format}"));
    let exe = demo_server_exe().display().to_string();
    let yaml = format!(
        "tenants:\n\
         \x20 - name: f\n\
         \x20   upstreams:\n\
         \x20     - {{name: demo, stdio: {{command: \"{exe}\", args: [--stdio, --test-tools]}}}}\n"
    );
    let gw = GatewayProcess::start_with_log_format(&yaml, &dir, "stderr", format).await;
    let mut c = RawClient::new(gw.url("f"));
    c.initialize().await;
    let r = c.call_tool("stderr", json!({"text": line})).await;
    assert_eq!(text(r.last()), "ok");
    let logged = eventually(Duration::from_secs(10), || gw.logs().contains("innocent")).await;
    assert!(logged, "the stderr line was logged");
    gw.stop().await
}

const FORGERY: &str =
    "innocent\r2099-01-01T00:00:00Z  INFO switchyard: forged line\u{0}after\u{1b}[2J";

#[tokio::test]
async fn upstream_stderr_cannot_forge_text_log_lines() {
    let log = log_of_stderr_line("text", FORGERY).await;
    assert!(!log.contains('\r'), "a carriage return reached the log");
    assert!(!log.contains('\0'), "a NUL reached the log");
    assert!(!log.contains('\u{1b}'), "an escape reached the log");
    let line = log
        .lines()
        .find(|l| l.contains("innocent"))
        .expect("the stderr line");
    assert!(
        line.contains(
            r"innocent\r2099-01-01T00:00:00Z  INFO switchyard: forged line\0after\u{1b}[2J"
        ),
        "escaped, on the upstream's own line: {line:?}"
    );
    assert!(line.contains("switchyard::upstream::stderr"), "{line:?}");
}

#[tokio::test]
async fn upstream_stderr_is_escaped_in_json_logs_too() {
    let log = log_of_stderr_line("json", FORGERY).await;
    assert!(!log.contains('\r') && !log.contains('\0') && !log.contains('\u{1b}'));
    let line = log
        .lines()
        .find(|l| l.contains("innocent"))
        .expect("the stderr line");
    let entry: Value = serde_json::from_str(line).expect("one JSON object per line");
    assert_eq!(
        entry["message"],
        r"innocent\r2099-01-01T00:00:00Z  INFO switchyard: forged line\0after\u{1b}[2J"
    );
}

/// A stdio server that leaves a grandchild behind on its stderr: the grandchild writes a line
/// naming itself and its parent every 50 ms (for at most 20 s), and the server exits with
/// status 3 at its first tool call.
const LEAVES_A_GRANDCHILD: &str = r#"
import json, os, subprocess, sys
subprocess.Popen(["sh", "-c", "for i in $(seq 1 400); do echo \"grandchild $$ of %d\" >&2; sleep 0.05; done" % os.getpid()])
for line in sys.stdin:
    msg = json.loads(line)
    method = msg.get("method")
    if method == "initialize":
        result = {"protocolVersion": msg["params"]["protocolVersion"], "capabilities": {"tools": {}},
                  "serverInfo": {"name": "leaves-a-grandchild", "version": "1"}}
    elif method == "tools/list":
        result = {"tools": [{"name": "exit", "inputSchema": {"type": "object"}}]}
    elif method == "tools/call":
        sys.exit(3)
    else:
        continue
    sys.stdout.write(json.dumps({"jsonrpc": "2.0", "id": msg["id"], "result": result}) + "\n")
    sys.stdout.flush()
"#;

/// The lines of `logs` a grandchild of `parent` wrote, and the grandchild's pid.
fn grandchild_lines(logs: &str, parent: &str) -> (usize, Option<u32>) {
    let suffix = format!(" of {parent}");
    let lines: Vec<&str> = logs
        .lines()
        .filter(|l| l.contains("grandchild ") && l.trim_end().ends_with(&suffix))
        .collect();
    let pid = lines.first().and_then(|l| {
        let rest = &l[l.find("grandchild ")? + "grandchild ".len()..];
        rest.split(' ').next()?.parse().ok()
    });
    (lines.len(), pid)
}

/// A child that exits and leaves a grandchild writing to its pipes: what the child wrote
/// is still read, but its output is read for at most a second after the exit (then the pipes
/// are closed: the grandchild's next write fails, and the gateway holds nothing of the old
/// process while the new one runs). Before, a reader kept the pipes for the grandchild's life.
#[tokio::test]
async fn a_grandchild_cannot_hold_a_dead_childs_output_open() {
    let dir = TempDir::new("floods-grandchild");
    let script = dir.0.join("server.py");
    std::fs::write(&script, LEAVES_A_GRANDCHILD).expect("write the server");
    let python = crate::support::peers::python().display().to_string();
    let yaml = format!(
        "tenants:\n\
         \x20 - name: f\n\
         \x20   upstreams:\n\
         \x20     - {{name: leaves, stdio: {{command: \"{python}\", args: [\"{}\"]}}}}\n",
        script.display()
    );
    let gw = GatewayProcess::start(&yaml, &dir, "grandchild").await;
    let mut c = RawClient::new(gw.url("f"));
    c.initialize().await;
    let parent = {
        let mut parent = None;
        let found = eventually(Duration::from_secs(10), || {
            parent = gw
                .logs()
                .lines()
                .find_map(|l| {
                    l.trim_end()
                        .rsplit_once("grandchild ")
                        .map(|(_, r)| r.to_owned())
                })
                .and_then(|r| r.rsplit_once(" of ").map(|(_, p)| p.to_owned()));
            parent.is_some()
        })
        .await;
        assert!(found, "the grandchild's stderr was logged: {}", gw.logs());
        parent.unwrap_or_default()
    };
    let r = c.call_tool("leaves__exit", json!({})).await;
    let message = r.last()["error"]["message"]
        .as_str()
        .unwrap_or_default()
        .to_owned();
    assert!(message.contains("exited with status 3"), "{r:?}");
    let exited = Instant::now();

    // Read for at most a second after the exit (and the log's 50 ms batches): after that,
    // no more of the grandchild's lines, although it would write for 20 s.
    tokio::time::sleep(Duration::from_millis(2_500)).await;
    let (settled, grandchild) = grandchild_lines(&gw.logs(), &parent);
    let grandchild = grandchild.expect("the grandchild's pid");
    tokio::time::sleep(Duration::from_millis(1_500)).await;
    let (later, _) = grandchild_lines(&gw.logs(), &parent);
    assert!(settled > 0);
    assert_eq!(
        later,
        settled,
        "the dead child's pipes were still read {:?} after it exited",
        exited.elapsed()
    );
    // Its pipes closed, the grandchild's next write fails and it ends.
    let gone = eventually(Duration::from_secs(5), || {
        crate::support::process_gone(grandchild)
    })
    .await;
    assert!(gone, "the grandchild still writes into a pipe nobody reads");
    gw.stop().await;
}
