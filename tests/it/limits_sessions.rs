//! Session-level caps (`tenants[].limits`: `sessions_per_user`, `sessions`,
//! `handshake_timeout`, `session_processes`, `in_flight_per_session`, `max_batch`; and
//! `limits.max_session_processes`) over real sockets: a gateway process whose per-session
//! stdio children are counted in `/proc`, two replicas on one real `redis-server`, the demo
//! server as the upstream (its `pid` and `sleep` tools, its trace file).
//!
//! Anonymous clients are told apart as a proxy would name them: `trusted_proxies:
//! [127.0.0.1/32]` and a distinct `X-Forwarded-For` per client.

use std::time::Duration;

use futures_util::StreamExt;
use serde_json::{Value, json};
use switchyard::config::{Cidr, Config, StdioSharing, TenantConfig, TenantLimits};
use switchyard::session::SessionId;

use crate::cluster::{clustered, replicas};
use crate::support::client::{self, ACCEPT_BOTH, RawClient, Reply, into_reply};
use crate::support::config::{config, demo_server_exe, demo_stdio, tenant, upstream};
use crate::support::gateway::TestGateway;
use crate::support::legacy::LegacyClient;
use crate::support::limits::{assert_refused_before_session, refusals};
use crate::support::process::GatewayProcess;
use crate::support::redis::RedisServer;
use crate::support::{TempDir, eventually, process_alive, process_gone, read_trace};

/// A tenant of the demo server over stdio (`sharing`), with `limits`.
fn demo_tenant(name: &str, sharing: StdioSharing, limits: TenantLimits) -> TenantConfig {
    let mut stdio = demo_stdio(None);
    stdio.sharing = sharing;
    let mut t = tenant(
        name,
        vec![upstream(
            "demo",
            switchyard::config::UpstreamTransport::Stdio(stdio),
        )],
    );
    t.limits = limits;
    t
}

/// Clients are named by `X-Forwarded-For` from 127.0.0.1.
fn behind_proxy(mut c: Config) -> Config {
    c.trusted_proxies = vec![Cidr::parse("127.0.0.1/32").expect("cidr")];
    c
}

/// One `initialize` on behalf of the client at `address` (through the trusted proxy).
async fn initialize(http: &reqwest::Client, url: &str, address: &str, version: &str) -> Reply {
    let body = json!({
        "jsonrpc": "2.0", "id": 0, "method": "initialize",
        "params": {
            "protocolVersion": version,
            "capabilities": {},
            "clientInfo": {"name": "limits-sessions", "version": "0"}
        }
    });
    let sent = http
        .post(url)
        .header("content-type", "application/json")
        .header("accept", ACCEPT_BOTH)
        .header("x-forwarded-for", address)
        .body(body.to_string())
        .send()
        .await
        .expect("POST reaches the gateway");
    into_reply(sent).await
}

/// A client with a session opened for `address`; with `handshake`, also initialized.
async fn session(url: &str, address: &str, handshake: bool) -> Result<RawClient, Reply> {
    session_on(url, address, handshake, "2025-11-25").await
}

async fn session_on(
    url: &str,
    address: &str,
    handshake: bool,
    version: &str,
) -> Result<RawClient, Reply> {
    let mut c = RawClient::new(url);
    c.protocol_version = version.into();
    let r = initialize(&c.http, url, address, version).await;
    if r.status != 200 {
        return Err(r);
    }
    c.session = r.header("mcp-session-id").map(str::to_owned);
    assert!(c.session.is_some(), "{r:?}");
    if handshake {
        let n = c
            .post(&json!({"jsonrpc": "2.0", "method": "notifications/initialized"}))
            .await;
        assert_eq!(n.status, 202, "{n:?}");
    }
    Ok(c)
}

/// The processes whose parent is `pid` (from `/proc/<n>/stat`).
pub(crate) fn children_of(pid: u32) -> Vec<u32> {
    let Ok(entries) = std::fs::read_dir("/proc") else {
        return Vec::new();
    };
    entries
        .filter_map(|e| e.ok()?.file_name().to_str()?.parse::<u32>().ok())
        .filter(|n| {
            std::fs::read_to_string(format!("/proc/{n}/stat"))
                .ok()
                .and_then(|stat| {
                    // `pid (comm) state ppid ...`: comm may hold spaces and parentheses.
                    let rest = &stat[stat.rfind(')')? + 1..];
                    rest.split_whitespace().nth(1)?.parse::<u32>().ok()
                })
                == Some(pid)
        })
        .collect()
}

/// The pid the demo server behind `c`'s session reports.
async fn upstream_pid(c: &RawClient) -> u32 {
    let r = c.call_tool("pid", json!({})).await;
    r.last()["result"]["content"][0]["text"]
        .as_str()
        .and_then(|t| t.parse().ok())
        .unwrap_or_else(|| panic!("no pid: {r:?}"))
}

/// The scenario with the default limit: one anonymous client sends 130 `initialize`
/// to a tenant whose upstream is a per-session stdio server. 100 get a session, 30 get 429
/// with `Retry-After`; the gateway never has more than 100 children; another client (another
/// address behind the trusted proxy) still gets a session and a working tool.
#[tokio::test]
async fn one_client_flooding_initialize_gets_100_sessions_then_429_and_children_stay_bounded() {
    let dir = TempDir::new("flood-sessions");
    let exe = demo_server_exe().display().to_string();
    let yaml = format!(
        "trusted_proxies: [127.0.0.1/32]\n\
         tenants:\n\
         \x20 - name: flood\n\
         \x20   upstreams:\n\
         \x20     - name: demo\n\
         \x20       stdio: {{command: {exe}, args: [--stdio, --test-tools], sharing: per-session}}\n"
    );
    let gw = GatewayProcess::start(&yaml, &dir, "flood").await;
    let url = gw.url("flood");
    let http = reqwest::Client::builder()
        .timeout(Duration::from_secs(120))
        .build()
        .expect("client");
    let mut most_children = 0;
    let mut replies = futures_util::stream::iter(0..130)
        .map(|_| initialize(&http, &url, "198.51.100.7", "2025-11-25"))
        .buffer_unordered(8);
    let (mut opened, mut refused) = (Vec::new(), 0);
    while let Some(r) = replies.next().await {
        most_children = most_children.max(children_of(gw.pid()).len());
        match r.status {
            200 => opened.push(r.header("mcp-session-id").expect("session id").to_owned()),
            _ => {
                assert_refused_before_session(&r, "sessions_per_user", 10);
                refused += 1;
            }
        }
    }
    drop(replies);
    assert_eq!((opened.len(), refused), (100, 30));
    let children = children_of(gw.pid()).len();
    assert_eq!(children, 100, "one process per live session");
    assert!(most_children <= 100, "{most_children} children at once");

    // Another client is not affected.
    let other = session(&url, "198.51.100.8", true)
        .await
        .unwrap_or_else(|r| panic!("another client refused: {r:?}"));
    assert_eq!(
        client::text(
            other
                .call_tool("echo", json!({"message": "mine"}))
                .await
                .last()
        ),
        "mine"
    );
    assert_eq!(children_of(gw.pid()).len(), 101);
    // And the flooding client is still refused.
    let again = initialize(&http, &url, "198.51.100.7", "2025-11-25").await;
    assert_refused_before_session(&again, "sessions_per_user", 10);
    assert_eq!(children_of(gw.pid()).len(), 101, "a refusal spawns nothing");
    gw.stop().await;
}

/// Two replicas on one Redis enforce one `sessions_per_user` and one `sessions`: 3 per user
/// in total (not 6), 4 for the tenant; a DELETE on either replica makes room on both.
#[tokio::test]
async fn two_replicas_on_one_redis_hold_one_session_count() {
    let redis = RedisServer::start().await;
    let limits = TenantLimits {
        sessions_per_user: 3,
        sessions: Some(4),
        ..TenantLimits::default()
    };
    let t = demo_tenant("s2", StdioSharing::Shared, limits);
    let cfg = behind_proxy(clustered(&redis, "ls", vec![t]));
    let gws = replicas(&cfg, 2).await;
    let urls = [gws[0].url("s2"), gws[1].url("s2")];
    let before = refusals("s2", "sessions_per_user");

    let mut alice = Vec::new();
    for i in 0..3 {
        alice.push(
            session(&urls[i % 2], "203.0.113.1", true)
                .await
                .unwrap_or_else(|r| panic!("alice's session {i}: {r:?}")),
        );
    }
    for url in &urls {
        let r = session(url, "203.0.113.1", true)
            .await
            .err()
            .expect("refused");
        assert_refused_before_session(&r, "sessions_per_user", 10);
    }
    assert_eq!(refusals("s2", "sessions_per_user") - before, 2);

    // Bob has his own budget, but the tenant has room for one more session only.
    let _bob = session(&urls[1], "203.0.113.2", true)
        .await
        .unwrap_or_else(|r| panic!("bob: {r:?}"));
    let r = session(&urls[0], "203.0.113.2", true)
        .await
        .err()
        .expect("refused");
    assert_refused_before_session(&r, "sessions", 10);

    // One of alice's sessions ends on the replica that did not open it: room again.
    let mut gone = alice.remove(0);
    gone.url = urls[1].clone();
    let d = gone.delete().await;
    assert!(d.status < 300, "DELETE: {d:?}");
    let replacement = session(&urls[1], "203.0.113.1", true)
        .await
        .unwrap_or_else(|r| panic!("after DELETE: {r:?}"));
    let r = session(&urls[0], "203.0.113.1", true)
        .await
        .err()
        .expect("refused");
    assert_refused_before_session(&r, "sessions_per_user", 10);
    // The sessions that were kept work.
    for c in alice.iter().chain([&replacement]) {
        assert_eq!(c.request("ping", json!({})).await.status, 200);
    }
    for g in gws {
        g.stop().await;
    }
}

/// The live session of `c` on `gw`, if any.
fn live(
    gw: &TestGateway,
    tenant: &str,
    c: &RawClient,
) -> Option<std::sync::Arc<switchyard::session::LiveSession>> {
    let id = SessionId::from_presented(c.session.as_deref()?)?;
    gw.gateway.tenants().by_name(tenant)?.directory.get(&id)
}

/// The child process of `c`'s session (per-session stdio), read off the live session.
fn session_process(gw: &TestGateway, tenant: &str, c: &RawClient) -> Option<u32> {
    let tenants = gw.gateway.tenants();
    let upstream = tenants.by_name(tenant)?.upstreams.first()?.info.id;
    live(gw, tenant, c)?.link(upstream)?.pid()
}

/// A session that never sends `notifications/initialized` is closed at the (lowered)
/// handshake deadline: its child exits, its next request gets 404, and it no longer counts
/// against `sessions_per_user`. One that finished the handshake is kept.
#[tokio::test]
async fn a_session_without_initialized_is_closed_at_the_handshake_deadline() {
    let limits = TenantLimits {
        sessions_per_user: 2,
        handshake_timeout: Duration::from_secs(1),
        ..TenantLimits::default()
    };
    let cfg = behind_proxy(config(vec![demo_tenant(
        "hs",
        StdioSharing::PerSession,
        limits,
    )]));
    let gw = TestGateway::start(cfg).await;
    let url = gw.url("hs");
    let silent = session(&url, "192.0.2.1", false)
        .await
        .expect("silent opens");
    let polite = session(&url, "192.0.2.1", true)
        .await
        .expect("polite opens");
    let silent_pid = session_process(&gw, "hs", &silent).expect("silent's process");
    let polite_pid = upstream_pid(&polite).await;
    assert!(process_alive(silent_pid));
    // Full: two live sessions for this client.
    let r = session(&url, "192.0.2.1", true)
        .await
        .err()
        .expect("refused");
    assert_refused_before_session(&r, "sessions_per_user", 10);

    assert!(
        eventually(Duration::from_secs(15), || process_gone(silent_pid)).await,
        "the silent session's process still runs"
    );
    let r = silent.request("ping", json!({})).await;
    assert_eq!(r.status, 404, "{r:?}");
    // Counted out: room for a new session.
    let third = session(&url, "192.0.2.1", true)
        .await
        .unwrap_or_else(|r| panic!("after the deadline: {r:?}"));
    assert_eq!(
        client::text(
            polite
                .call_tool("echo", json!({"message": "kept"}))
                .await
                .last()
        ),
        "kept"
    );
    assert!(process_alive(polite_pid));
    assert_eq!(third.request("ping", json!({})).await.status, 200);
    gw.stop().await;
}

/// `limits.max_session_processes: 3`: the fourth session needing a per-session process is
/// refused with 429 and no fourth process starts; a DELETE frees a place.
#[tokio::test]
async fn the_process_wide_cap_refuses_the_fourth_per_session_process() {
    let dir = TempDir::new("process-cap");
    let exe = demo_server_exe().display().to_string();
    let yaml = format!(
        "trusted_proxies: [127.0.0.1/32]\n\
         limits: {{max_session_processes: 3}}\n\
         tenants:\n\
         \x20 - name: procs\n\
         \x20   upstreams:\n\
         \x20     - name: demo\n\
         \x20       stdio: {{command: {exe}, args: [--stdio, --test-tools], sharing: per-session}}\n"
    );
    let gw = GatewayProcess::start(&yaml, &dir, "procs").await;
    let url = gw.url("procs");
    let mut clients = Vec::new();
    for i in 0..3 {
        let address = format!("192.0.2.{}", 10 + i);
        clients.push(session(&url, &address, true).await.expect("within the cap"));
    }
    assert_eq!(children_of(gw.pid()).len(), 3);
    let r = session(&url, "192.0.2.20", true)
        .await
        .err()
        .expect("refused");
    assert_refused_before_session(&r, "session_processes", 10);
    assert_eq!(children_of(gw.pid()).len(), 3, "no fourth process");

    let first = clients.remove(0);
    let pid = upstream_pid(&first).await;
    assert!(first.delete().await.status < 300);
    assert!(eventually(Duration::from_secs(10), || process_gone(pid)).await);
    let fourth = session(&url, "192.0.2.20", true)
        .await
        .unwrap_or_else(|r| panic!("after a DELETE: {r:?}"));
    assert_eq!(
        client::text(
            fourth
                .call_tool("echo", json!({"message": "in"}))
                .await
                .last()
        ),
        "in"
    );
    assert_eq!(children_of(gw.pid()).len(), 3);
    gw.stop().await;
}

/// `in_flight_per_session: 2`: with two slow calls running, a third request of the session
/// gets `-32029` at once (HTTP 200, `data.limit`); once they end, requests pass again.
#[tokio::test]
async fn a_third_concurrent_request_beyond_in_flight_per_session_gets_32029() {
    let limits = TenantLimits {
        in_flight_per_session: 2,
        ..TenantLimits::default()
    };
    let cfg = behind_proxy(config(vec![demo_tenant(
        "inflight",
        StdioSharing::Shared,
        limits,
    )]));
    let gw = TestGateway::start(cfg).await;
    let c = std::sync::Arc::new(
        session(&gw.url("inflight"), "192.0.2.30", true)
            .await
            .expect("session"),
    );
    let before = refusals("inflight", "in_flight_per_session");
    let slow: Vec<_> = (0..2)
        .map(|_| {
            let c = c.clone();
            tokio::spawn(async move { c.call_tool("sleep", json!({"ms": 4000})).await })
        })
        .collect();
    let live_session = live(&gw, "inflight", &c).expect("live");
    assert!(
        eventually(Duration::from_secs(10), || live_session.in_flight.count()
            == 2)
        .await,
        "the slow calls are in flight"
    );
    let r = c.call_tool("echo", json!({"message": "third"})).await;
    assert_eq!(r.status, 200, "{r:?}");
    let error = &r.last()["error"];
    assert_eq!(error["code"], -32029, "{r:?}");
    assert_eq!(error["data"]["limit"], "in_flight_per_session", "{r:?}");
    assert!(error["data"]["retryAfterSeconds"].as_u64() >= Some(1));
    assert_eq!(refusals("inflight", "in_flight_per_session") - before, 1);
    for s in slow {
        let done = s.await.expect("slow call");
        assert!(done.last()["result"].is_object(), "{done:?}");
    }
    assert_eq!(live_session.in_flight.count(), 0);
    assert_eq!(
        client::text(
            c.call_tool("echo", json!({"message": "later"}))
                .await
                .last()
        ),
        "later"
    );
    gw.stop().await;
}

/// `max_batch: 3`: a batch of four gets 400 with a JSON-RPC error and none of it reaches the
/// upstream; a batch of three runs.
#[tokio::test]
async fn a_batch_longer_than_max_batch_gets_400_and_nothing_runs() {
    let dir = TempDir::new("max-batch");
    let trace = dir.path("trace.jsonl");
    let mut t = tenant(
        "batch",
        vec![upstream(
            "demo",
            switchyard::config::UpstreamTransport::Stdio(demo_stdio(Some(&trace))),
        )],
    );
    t.limits.max_batch = 3;
    let gw = TestGateway::start(behind_proxy(config(vec![t]))).await;
    let c = session_on(&gw.url("batch"), "192.0.2.40", true, "2025-03-26")
        .await
        .expect("session");
    let call = |i: u64, message: &str| {
        json!({"jsonrpc": "2.0", "id": i, "method": "tools/call",
               "params": {"name": "echo", "arguments": {"message": message}}})
    };
    let before = refusals("batch", "max_batch");
    let four: Vec<Value> = (1..=4).map(|i| call(i, &format!("too-long-{i}"))).collect();
    let r = c.post(&Value::Array(four)).await;
    assert_eq!(r.status, 400, "{r:?}");
    let error = &r.last()["error"];
    assert_eq!(error["code"], -32600, "{r:?}");
    assert_eq!(error["data"]["maxBatch"], 3, "{r:?}");
    assert!(
        error["message"]
            .as_str()
            .unwrap_or_default()
            .contains("at most 3"),
        "{r:?}"
    );
    assert_eq!(refusals("batch", "max_batch") - before, 1);

    let three: Vec<Value> = (5..=7).map(|i| call(i, &format!("fits-{i}"))).collect();
    let r = c.post(&Value::Array(three)).await;
    assert_eq!(r.status, 200, "{r:?}");
    let answered = r.last().as_array().map_or(0, Vec::len);
    assert_eq!(answered, 3, "{r:?}");
    let seen = read_trace(&trace)
        .iter()
        .map(Value::to_string)
        .collect::<Vec<_>>()
        .join("\n");
    assert!(seen.contains("fits-5"), "the trace records calls: {seen}");
    assert!(
        !seen.contains("too-long"),
        "a refused batch reached the upstream"
    );
    gw.stop().await;
}

/// A reload changes `sessions_per_user`: sessions already open are kept (beyond a lowered
/// limit too), and the new limit holds for new ones.
#[tokio::test]
async fn a_reload_changes_sessions_per_user_and_keeps_open_sessions() {
    let with = |n: u32| {
        behind_proxy(config(vec![demo_tenant(
            "reload",
            StdioSharing::Shared,
            TenantLimits {
                sessions_per_user: n,
                ..TenantLimits::default()
            },
        )]))
    };
    let gw = TestGateway::start(with(2)).await;
    let url = gw.url("reload");
    let mut open = Vec::new();
    for _ in 0..2 {
        open.push(session(&url, "192.0.2.50", true).await.expect("within 2"));
    }
    let r = session(&url, "192.0.2.50", true)
        .await
        .err()
        .expect("refused");
    assert_refused_before_session(&r, "sessions_per_user", 10);

    gw.gateway.apply(&with(3)).await.expect("reload applies");
    open.push(session(&url, "192.0.2.50", true).await.expect("within 3"));
    let r = session(&url, "192.0.2.50", true)
        .await
        .err()
        .expect("refused");
    assert_refused_before_session(&r, "sessions_per_user", 10);

    gw.gateway.apply(&with(1)).await.expect("reload applies");
    for c in &open {
        assert_eq!(
            client::text(c.call_tool("echo", json!({"message": "kept"})).await.last()),
            "kept"
        );
    }
    let r = session(&url, "192.0.2.50", true)
        .await
        .err()
        .expect("refused");
    assert_refused_before_session(&r, "sessions_per_user", 10);
    // Another client has its own budget under the new limit.
    session(&url, "192.0.2.51", true)
        .await
        .expect("another client");
    gw.stop().await;
}

/// 2024-11-05 sessions count too: with `sessions_per_user: 1`, a second client at the same
/// address gets 429 on its `initialize` POST; when the first client's stream closes (which
/// ends its session), the second one's retry on its still open stream succeeds.
#[tokio::test]
async fn legacy_sse_sessions_count_and_a_closed_stream_makes_room() {
    let limits = TenantLimits {
        sessions_per_user: 1,
        ..TenantLimits::default()
    };
    let cfg = config(vec![demo_tenant("legacy", StdioSharing::Shared, limits)]);
    let gw = TestGateway::start(cfg).await;
    let url = gw.url("legacy");
    let mut first = LegacyClient::connect(&url, None).await;
    first.initialize("2024-11-05").await;
    let mut second = LegacyClient::connect(&url, None).await;
    let init = json!({"jsonrpc": "2.0", "id": 1, "method": "initialize",
                      "params": {"protocolVersion": "2024-11-05", "capabilities": {},
                                 "clientInfo": {"name": "second", "version": "0"}}});
    let posted = second.post(&init).await;
    assert_eq!(posted.status, 429, "{posted:?}");
    assert_eq!(posted.body["error"]["code"], -32029, "{posted:?}");
    assert_eq!(posted.body["error"]["data"]["limit"], "sessions_per_user");

    drop(first);
    let mut admitted = false;
    for _ in 0..100 {
        if second.post(&init).await.status == 202 {
            admitted = true;
            break;
        }
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    assert!(admitted, "the first stream's session still counts");
    let reply = second.next_message().await;
    assert!(reply["result"]["serverInfo"].is_object(), "{reply}");
    gw.stop().await;
}

/// The stateless revision (2026-07-28) has no sessions: with `sessions_per_user: 1` taken by
/// a session, the same client's stateless calls still pass, and they take no place either.
#[tokio::test]
async fn stateless_requests_count_no_sessions() {
    let limits = TenantLimits {
        sessions_per_user: 1,
        ..TenantLimits::default()
    };
    let cfg = config(vec![demo_tenant("nosess", StdioSharing::Shared, limits)]);
    let gw = TestGateway::start(cfg).await;
    let url = gw.url("nosess");
    let _held = session(&url, "192.0.2.60", true)
        .await
        .expect("the one session");
    let c = RawClient::new(&url);
    for i in 1..=3u64 {
        let message = format!("stateless-{i}");
        let body = json!({"jsonrpc": "2.0", "id": i, "method": "tools/call", "params": {
            "name": "echo", "arguments": {"message": message},
            "_meta": {
                "io.modelcontextprotocol/protocolVersion": "2026-07-28",
                "io.modelcontextprotocol/clientCapabilities": {},
                "io.modelcontextprotocol/clientInfo": {"name": "raw", "version": "1"},
            }
        }});
        let r = c
            .post_raw(
                body.to_string(),
                &[
                    ("content-type", "application/json"),
                    ("accept", ACCEPT_BOTH),
                    ("mcp-protocol-version", "2026-07-28"),
                    ("mcp-method", "tools/call"),
                    ("mcp-name", "echo"),
                ],
            )
            .await;
        assert_eq!(r.status, 200, "{r:?}");
        assert_eq!(client::text(r.last()), message);
    }
    // Still one session for this client: a second one is refused, as before.
    let r = session(&url, "192.0.2.60", true)
        .await
        .err()
        .expect("refused");
    assert_refused_before_session(&r, "sessions_per_user", 10);
    gw.stop().await;
}
