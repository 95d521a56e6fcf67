//! A bounded HTTP fuzz test kept in the suite: mutated JSON-RPC bodies (bytes flipped, cut,
//! spliced with JSON tokens, members duplicated, deep nesting, batches) under mutated headers,
//! methods and paths, sent over raw sockets to a real gateway process with real stdio
//! upstreams. A fixed seed and a time budget make it repeatable and short; it asserts no 5xx,
//! no panic in the log, bounded memory, and a gateway that still answers afterwards.
//!
//! `SWITCHYARD_FUZZ_SECS` (default 20) and `SWITCHYARD_FUZZ_SEED` change the budget and seed.

use std::time::{Duration, Instant};

use rand::rngs::StdRng;
use rand::{RngExt, SeedableRng};
use serde_json::{Value, json};
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::TcpStream;

use crate::support::TempDir;
use crate::support::client::RawClient;
use crate::support::config::demo_server_exe;
use crate::support::process::GatewayProcess;

const VERSIONS: [&str; 5] = [
    "2025-03-26",
    "2025-06-18",
    "2025-11-25",
    "2024-11-05",
    "2026-07-28",
];

/// JSON fragments spliced into bodies.
const TOKENS: [&str; 24] = [
    "{",
    "}",
    "[",
    "]",
    "\"",
    ":",
    ",",
    "null",
    "1e999",
    "-0",
    "18446744073709551616",
    "\"\\ud800\"",
    "\"\\u0000\"",
    "\"name\":\"x\",",
    "\"_meta\":{},",
    "\"progressToken\":1,",
    "\"id\":",
    "\"method\":\"ping\",",
    "\"params\":",
    "\"jsonrpc\":\"2.0\",",
    "\"uri\":\"demo+x\",",
    "\u{feff}",
    "\u{1f600}",
    "\\",
];

/// Valid messages the mutations start from.
fn seeds() -> Vec<Value> {
    vec![
        json!({"jsonrpc":"2.0","id":1,"method":"tools/list"}),
        json!({"jsonrpc":"2.0","id":2,"method":"tools/call","params":{"name":"demo__echo","arguments":{"message":"hi"}}}),
        json!({"jsonrpc":"2.0","id":3,"method":"tools/call","params":{"name":"demo__sleep","arguments":{"ms":5,"steps":2},"_meta":{"progressToken":"p"}}}),
        json!({"jsonrpc":"2.0","id":4,"method":"tools/call","params":{"name":"per__add","arguments":{"a":1,"b":2}}}),
        json!({"jsonrpc":"2.0","id":5,"method":"resources/list","params":{"cursor":"x"}}),
        json!({"jsonrpc":"2.0","id":6,"method":"resources/read","params":{"uri":"demo+demo://x"}}),
        json!({"jsonrpc":"2.0","id":7,"method":"prompts/get","params":{"name":"demo__greet","arguments":{}}}),
        json!({"jsonrpc":"2.0","id":8,"method":"completion/complete","params":{"ref":{"type":"ref/prompt","name":"demo__greet"},"argument":{"name":"x","value":""}}}),
        json!({"jsonrpc":"2.0","id":9,"method":"ping"}),
        json!({"jsonrpc":"2.0","id":10,"method":"logging/setLevel","params":{"level":"debug"}}),
        json!({"jsonrpc":"2.0","method":"notifications/cancelled","params":{"requestId":3}}),
        json!({"jsonrpc":"2.0","method":"notifications/progress","params":{"progressToken":"sy-p1-1","progress":1}}),
        json!({"jsonrpc":"2.0","id":"sy-x-1","result":{}}),
        json!({"jsonrpc":"2.0","id":11,"method":"initialize","params":{"protocolVersion":"2025-11-25","capabilities":{},"clientInfo":{"name":"f","version":"1"}}}),
        json!({"jsonrpc":"2.0","id":12,"method":"server/discover","params":{"_meta":{"io.modelcontextprotocol/protocolVersion":"2026-07-28"}}}),
        json!([{"jsonrpc":"2.0","id":13,"method":"ping"},{"jsonrpc":"2.0","id":14,"method":"tools/call","params":{"name":"demo__echo","arguments":{"message":"b"}}}]),
    ]
}

fn pick<'a, T>(rng: &mut StdRng, items: &'a [T]) -> &'a T {
    &items[rng.random_range(0..items.len())]
}

/// One mutated body.
fn body(rng: &mut StdRng, seeds: &[Value]) -> Vec<u8> {
    let mut text = pick(rng, seeds).to_string().into_bytes();
    for _ in 0..rng.random_range(0..4) {
        let len = text.len().max(1);
        match rng.random_range(0..9) {
            0 => {
                let at = rng.random_range(0..len).min(text.len().saturating_sub(1));
                if let Some(b) = text.get_mut(at) {
                    *b ^= 1 << rng.random_range(0..8);
                }
            }
            1 => text.truncate(rng.random_range(0..len)),
            2 | 3 => {
                let at = rng.random_range(0..=text.len());
                let token = pick(rng, &TOKENS).as_bytes().to_vec();
                text.splice(at..at, token);
            }
            4 => {
                // Duplicate a member right after an opening brace.
                if let Some(at) = text.iter().position(|b| *b == b'{') {
                    let member = pick(
                        rng,
                        &[
                            "\"name\":\"demo__echo\",",
                            "\"id\":99,",
                            "\"method\":\"ping\",",
                        ],
                    )
                    .as_bytes()
                    .to_vec();
                    text.splice(at + 1..at + 1, member);
                }
            }
            5 => {
                // Deep nesting around the whole body or inside params.
                let depth = rng.random_range(1..20_000);
                let (open, close) = if rng.random_bool(0.5) {
                    ("[", "]")
                } else {
                    ("{\"a\":", "}")
                };
                let mut nested = open.repeat(depth).into_bytes();
                nested.extend_from_slice(&text);
                nested.extend_from_slice(close.repeat(depth).as_bytes());
                text = nested;
            }
            6 => {
                // A batch of mutated and plain members.
                let n = rng.random_range(0..30);
                let members: Vec<String> = (0..n).map(|_| pick(rng, seeds).to_string()).collect();
                text = format!("[{}]", members.join(",")).into_bytes();
            }
            7 => {
                let at = rng.random_range(0..=text.len());
                let end = (at + rng.random_range(0..64)).min(text.len());
                let copy = text[at..end].to_vec();
                text.splice(at..at, copy);
            }
            _ => {
                // A long string value.
                let long = format!("\"{}\"", "x".repeat(rng.random_range(0..200_000)));
                let at = rng.random_range(0..=text.len());
                text.splice(at..at, long.into_bytes());
            }
        }
    }
    text
}

struct Target {
    sessions: Vec<(String, &'static str)>,
    port: u16,
}

/// Request head lines: mostly what a client sends, mutated.
fn headers(rng: &mut StdRng, target: &Target) -> Vec<(String, String)> {
    let mut h: Vec<(String, String)> = Vec::new();
    let mut add = |k: &str, v: String| h.push((k.to_owned(), v));
    if rng.random_bool(0.85) {
        add("Content-Type", "application/json".into());
    } else if rng.random_bool(0.7) {
        let ct = pick(
            rng,
            &[
                "application/json",
                "application/json; charset=utf-8",
                "text/plain",
                "application/json; charset=utf-16",
                "",
                "application/*",
            ],
        );
        add("Content-Type", ct.to_string());
    }
    if rng.random_bool(0.85) {
        add("Accept", "application/json, text/event-stream".into());
    } else if rng.random_bool(0.7) {
        let accept = pick(
            rng,
            &[
                "application/json, text/event-stream",
                "application/json",
                "text/event-stream",
                "*/*",
                "",
            ],
        );
        add("Accept", accept.to_string());
    }
    let (session, version) = pick(rng, &target.sessions).clone();
    match rng.random_range(0..10) {
        0 => {}
        1 => add("Mcp-Session-Id", "x".repeat(rng.random_range(0..9000))),
        2 => add("Mcp-Session-Id", format!("{session}\u{7f}")),
        3 => {
            add("Mcp-Session-Id", session.clone());
            add("Mcp-Session-Id", "other".into());
        }
        _ => add("Mcp-Session-Id", session.clone()),
    }
    match rng.random_range(0..8) {
        0 => {}
        1 => add("MCP-Protocol-Version", pick(rng, &VERSIONS).to_string()),
        2 => add("MCP-Protocol-Version", "garbage".into()),
        _ => add("MCP-Protocol-Version", version.to_string()),
    }
    if rng.random_bool(0.05) {
        add(
            "Last-Event-ID",
            pick(rng, &["x.1", "", "0-0.99999999999999999999", "\u{1}"]).to_string(),
        );
    }
    if rng.random_bool(0.05) {
        add(
            "Origin",
            pick(
                rng,
                &[
                    "http://evil.example",
                    "null",
                    "http://localhost:1",
                    "http://[::1",
                ],
            )
            .to_string(),
        );
    }
    match rng.random_range(0..30) {
        0 => add("Host", "evil.example".into()),
        1 => add("Host", "localhost:evil".into()),
        2 => add("Host", format!("user@127.0.0.1:{}", target.port)),
        _ => add("Host", format!("127.0.0.1:{}", target.port)),
    }
    if rng.random_bool(0.03) {
        add("Authorization", "Bearer a.b.c".into());
    }
    if rng.random_bool(0.03) {
        add("Mcp-Method", "tools/call".into());
        add("Mcp-Name", "demo__echo".into());
    }
    if rng.random_bool(0.02) {
        add("X-Many", "y".repeat(rng.random_range(0..20_000)));
    }
    h
}

/// Sends one request and reads only the status line (bounded); `None` when the connection
/// closed without an answer or timed out.
async fn send(
    port: u16,
    method: &str,
    path: &str,
    headers: &[(String, String)],
    body: &[u8],
) -> Result<u16, &'static str> {
    let mut stream = TcpStream::connect(("127.0.0.1", port))
        .await
        .map_err(|_| "connect failed")?;
    let mut head = format!("{method} {path} HTTP/1.1\r\nConnection: close\r\n").into_bytes();
    for (k, v) in headers {
        head.extend_from_slice(k.as_bytes());
        head.extend_from_slice(b": ");
        head.extend_from_slice(v.as_bytes());
        head.extend_from_slice(b"\r\n");
    }
    head.extend_from_slice(format!("Content-Length: {}\r\n\r\n", body.len()).as_bytes());
    if stream.write_all(&head).await.is_err() || stream.write_all(body).await.is_err() {
        return Err("write failed");
    }
    let mut buf = Vec::new();
    let mut chunk = [0u8; 1024];
    let deadline = Instant::now() + Duration::from_secs(5);
    while !buf.windows(2).any(|w| w == b"\r\n") {
        let left = deadline.saturating_duration_since(Instant::now());
        match tokio::time::timeout(left, stream.read(&mut chunk)).await {
            Ok(Ok(0)) | Ok(Err(_)) => return Err("closed without an answer"),
            Ok(Ok(n)) => buf.extend_from_slice(&chunk[..n]),
            Err(_) => return Err("timed out"),
        }
    }
    let line = String::from_utf8_lossy(&buf);
    line.split_whitespace()
        .nth(1)
        .and_then(|s| s.parse().ok())
        .ok_or("no status line")
}

async fn open_sessions(url: &str) -> Vec<(String, &'static str)> {
    let mut out = Vec::new();
    for version in ["2025-03-26", "2025-06-18", "2025-11-25"] {
        let mut c = RawClient::new(url);
        c.protocol_version = version.into();
        c.initialize().await;
        out.push((c.session.clone().expect("a session id"), version));
    }
    out
}

fn vm(pid: u32, field: &str) -> u64 {
    std::fs::read_to_string(format!("/proc/{pid}/status"))
        .unwrap_or_default()
        .lines()
        .find_map(|l| l.strip_prefix(field))
        .and_then(|v| v.split_whitespace().next())
        .and_then(|kb| kb.parse().ok())
        .unwrap_or(0)
}

#[tokio::test]
#[allow(clippy::print_stderr)] // the run's figures, for whoever reads the test output
async fn mutated_requests_never_get_a_5xx_a_panic_or_unbounded_memory() {
    let budget = Duration::from_secs(
        std::env::var("SWITCHYARD_FUZZ_SECS")
            .ok()
            .and_then(|s| s.parse().ok())
            .unwrap_or(20),
    );
    let seed: u64 = std::env::var("SWITCHYARD_FUZZ_SEED")
        .ok()
        .and_then(|s| s.parse().ok())
        .unwrap_or(0x00f0_2218);
    let dir = TempDir::new("fuzz");
    let exe = demo_server_exe().display().to_string();
    let yaml = format!(
        r#"limits: {{max_body: 256KiB}}
sessions: {{ttl: 10m}}
tenants:
  - name: fz
    upstreams:
      - name: demo
        stdio: {{command: "{exe}", args: [--stdio]}}
      - name: per
        stdio: {{command: "{exe}", args: [--stdio], sharing: per-session}}
"#
    );
    let gw = GatewayProcess::start(&yaml, &dir, "fuzz").await;
    let url = gw.url("fz");
    let pid = gw.pid();
    let mut target = Target {
        sessions: open_sessions(&url).await,
        port: gw.port,
    };
    let rss_before = vm(pid, "VmRSS:");
    let seeds = seeds();
    let mut rng = StdRng::seed_from_u64(seed);
    let started = Instant::now();
    let (mut sent, mut statuses) = (0u32, std::collections::BTreeMap::<u16, u32>::new());
    let mut no_answer: Vec<String> = Vec::new();
    while started.elapsed() < budget && sent < 50_000 {
        // Fresh sessions now and then (mutations end some: DELETE, expiry of per-session links).
        if sent % 500 == 499 {
            target.sessions = open_sessions(&url).await;
        }
        let method = match rng.random_range(0..100) {
            0..85 => "POST",
            85..93 => "GET",
            93..96 => "DELETE",
            96..98 => "PUT",
            _ => "OPTIONS",
        };
        let path = match rng.random_range(0..40) {
            0 => "/t/fz/mcp/sse".to_owned(),
            1 => format!("/t/fz/mcp/messages?sessionId={}", target.sessions[0].0),
            2 => "/t/fz/mcp/messages?sessionId=%ZZ".to_owned(),
            3 => "/.well-known/oauth-protected-resource/t/fz/mcp".to_owned(),
            4 => "/t/fz/mcp/../mcp".to_owned(),
            5 => "/t/nope/mcp".to_owned(),
            6 => "/t/fz/mcp?access_token=x".to_owned(),
            _ => "/t/fz/mcp".to_owned(),
        };
        let h = headers(&mut rng, &target);
        let b = if method == "POST" {
            body(&mut rng, &seeds)
        } else {
            Vec::new()
        };
        sent += 1;
        match send(gw.port, method, &path, &h, &b).await {
            Ok(status) => {
                *statuses.entry(status).or_default() += 1;
                assert!(
                    status < 500,
                    "{status} for {method} {path}\n{h:?}\n{}",
                    String::from_utf8_lossy(&b[..b.len().min(2000)])
                );
            }
            Err(why) => no_answer.push(format!(
                "{why}: {method} {path} {:?}",
                String::from_utf8_lossy(&b[..b.len().min(200)])
            )),
        }
    }
    // Slow tool calls (a mutated sleep) may outlast the 5 s read: rare, never the rule.
    assert!(
        no_answer.len() * 100 <= sent as usize,
        "{} of {sent} requests got no answer: {no_answer:#?}",
        no_answer.len()
    );
    assert!(sent >= 500, "only {sent} requests in {budget:?}");

    // Still serving, still bounded.
    let mut c = RawClient::new(&url);
    c.initialize().await;
    let r = c
        .call_tool("demo__echo", json!({"message": "still here"}))
        .await;
    assert_eq!(
        crate::support::client::text(r.last()),
        "still here",
        "{r:?}"
    );
    let health = reqwest::get(format!("http://127.0.0.1:{}/healthz", gw.port))
        .await
        .expect("healthz");
    assert_eq!(health.status(), 200);
    let (rss_after, peak) = (vm(pid, "VmRSS:"), vm(pid, "VmHWM:"));
    let logs = gw.stop().await;
    assert!(!logs.contains("panicked"), "a panic was logged:\n{logs}");
    eprintln!(
        "fuzz: seed {seed:#x}, {sent} requests in {:?}, statuses {statuses:?}, {} without an answer; RSS {rss_before} KiB before, {rss_after} KiB after, peak {peak} KiB",
        started.elapsed(),
        no_answer.len()
    );
    assert!(peak < 256 * 1024, "peak RSS {peak} KiB");
}
