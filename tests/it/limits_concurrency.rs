//! Calls in flight at an upstream (`tenants[].limits.concurrency`) over real sockets, counted
//! AT THE UPSTREAM: a slow MCP server over HTTP (a small Python process written here) whose
//! `slow` tool sleeps and records how many calls it holds at once; `GET /stats` reads that
//! without going through the gateway. Memory store (one replica) and Redis store (two
//! replicas on one real `redis-server`), the bounded queue and its timeout, refusals as
//! `-32029` naming `concurrency[<i>]` (audited, from a gateway process's log), slots that come
//! back after abandoned and cancelled calls, `prompts/get` and `resources/read` gated like
//! `tools/call` (lists not), and Redis killed under `open` and `closed`.

use std::time::Duration;

use serde_json::{Value, json};
use switchyard::config::{ConcurrencyLimit, Config, StoreErrorPolicy, TenantConfig};
use tokio::io::AsyncBufReadExt;

use crate::cluster::{clustered, replicas};
use crate::support::TempDir;
use crate::support::client::{RawClient, Reply};
use crate::support::config::{config, http, tenant, upstream};
use crate::support::gateway::TestGateway;
use crate::support::limits::{refusals, script_calls};
use crate::support::process::GatewayProcess;
use crate::support::redis::RedisServer;

/// The slow upstream: MCP over HTTP (JSON answers, no sessions) on 127.0.0.1, port printed on
/// the first line. `slow {ms}` sleeps; `/stats` says how many calls are in flight, the most
/// ever at once, and how many were served.
const SLOW_SERVER: &str = r#"
import json, sys, threading, time
from http.server import ThreadingHTTPServer, BaseHTTPRequestHandler

lock = threading.Lock()
stats = {"now": 0, "peak": 0, "served": 0}

class Handler(BaseHTTPRequestHandler):
    protocol_version = "HTTP/1.1"

    def log_message(self, *args):
        pass

    def send(self, status, body=b"", kind="application/json"):
        self.send_response(status)
        self.send_header("content-type", kind)
        self.send_header("content-length", str(len(body)))
        self.end_headers()
        self.wfile.write(body)

    def do_GET(self):
        if self.path == "/stats":
            with lock:
                self.send(200, json.dumps(stats).encode())
        else:
            self.send(405)

    def do_DELETE(self):
        self.send(405)

    def do_POST(self):
        msg = json.loads(self.rfile.read(int(self.headers.get("content-length", "0"))))
        if "id" not in msg or "method" not in msg:
            return self.send(202)
        method, params = msg["method"], msg.get("params") or {}
        result, error = None, None
        if method == "initialize":
            result = {"protocolVersion": params.get("protocolVersion", "2025-06-18"),
                      "capabilities": {"tools": {}, "prompts": {}, "resources": {}}, "serverInfo": {"name": "slow", "version": "0"}}
        elif method == "ping":
            result = {}
        elif method == "prompts/get":
            result = {"messages": []}
        elif method == "resources/read":
            result = {"contents": [{"uri": params.get("uri"), "text": "r"}]}
        elif method == "tools/list":
            result = {"tools": [{"name": "slow", "inputSchema": {"type": "object"}}]}
        elif method == "tools/call" and params.get("name") == "slow":
            with lock:
                stats["now"] += 1
                stats["peak"] = max(stats["peak"], stats["now"])
            try:
                time.sleep((params.get("arguments") or {}).get("ms", 300) / 1000)
            finally:
                with lock:
                    stats["now"] -= 1
                    stats["served"] += 1
            result = {"content": [{"type": "text", "text": "slept"}]}
        else:
            error = {"code": -32601, "message": "Method not found"}
        reply = {"jsonrpc": "2.0", "id": msg["id"]}
        reply["error" if error else "result"] = error or result
        self.send(200, json.dumps(reply).encode())

server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
server.daemon_threads = True
print(server.server_address[1], flush=True)
server.serve_forever()
"#;

/// The slow upstream's process, killed on drop.
struct SlowUpstream {
    _child: tokio::process::Child,
    _dir: TempDir,
    port: u16,
    http: reqwest::Client,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
struct Stats {
    now: u64,
    peak: u64,
    served: u64,
}

impl SlowUpstream {
    async fn start() -> SlowUpstream {
        switchyard::app::install_crypto_provider();
        let dir = TempDir::new("slow-upstream");
        let script = dir.path("slow.py");
        std::fs::write(&script, SLOW_SERVER).expect("script");
        let mut child = tokio::process::Command::new("python3")
            .arg(&script)
            .stdout(std::process::Stdio::piped())
            .kill_on_drop(true)
            .spawn()
            .expect("python3 runs");
        let stdout = child.stdout.take().expect("stdout");
        let mut line = String::new();
        tokio::time::timeout(
            Duration::from_secs(20),
            tokio::io::BufReader::new(stdout).read_line(&mut line),
        )
        .await
        .expect("the slow upstream says its port")
        .expect("read the port");
        SlowUpstream {
            _child: child,
            _dir: dir,
            port: line.trim().parse().expect("a port"),
            http: reqwest::Client::new(),
        }
    }

    fn url(&self) -> String {
        format!("http://127.0.0.1:{}/mcp", self.port)
    }

    async fn stats(&self) -> Stats {
        let v: Value = self
            .http
            .get(format!("http://127.0.0.1:{}/stats", self.port))
            .send()
            .await
            .expect("stats")
            .bytes()
            .await
            .map(|b| serde_json::from_slice(&b).expect("stats JSON"))
            .expect("stats body");
        let n = |k: &str| v[k].as_u64().expect("a count");
        Stats {
            now: n("now"),
            peak: n("peak"),
            served: n("served"),
        }
    }

    /// Waits (bounded) until no call is in flight at the upstream.
    async fn idle(&self) -> Stats {
        for _ in 0..300 {
            let s = self.stats().await;
            if s.now == 0 {
                return s;
            }
            tokio::time::sleep(Duration::from_millis(50)).await;
        }
        panic!(
            "calls still in flight at the upstream: {:?}",
            self.stats().await
        );
    }
}

/// Calls to the slow upstream of `tenant` this process has ended, however they ended.
fn ended_calls(tenant: &str) -> u64 {
    let calls = &switchyard::metrics::get().upstream_calls;
    ["ok", "failed", "timeout", "cancelled"]
        .iter()
        .map(|o| calls.with_label_values(&[tenant, "slow", o]).get())
        .sum()
}

fn cap(max_in_flight: u32, queue: u32, queue_timeout: Duration) -> ConcurrencyLimit {
    ConcurrencyLimit {
        upstream: "slow".into(),
        max_in_flight,
        queue,
        queue_timeout,
    }
}

/// A tenant with the slow upstream, capped by `limit`.
fn gated(name: &str, slow: &SlowUpstream, limit: ConcurrencyLimit) -> TenantConfig {
    let mut t = tenant(name, vec![upstream("slow", http(&slow.url()))]);
    t.limits.concurrency = vec![limit];
    t
}

/// `sessions` initialized sessions of one tenant, spread over `urls`.
async fn sessions(urls: &[String], sessions: usize) -> Vec<RawClient> {
    let mut out = Vec::new();
    for i in 0..sessions {
        let mut c = RawClient::new(urls[i % urls.len()].clone());
        c.initialize().await;
        out.push(c);
    }
    out
}

/// How a burst of calls ended: answered, or refused with `-32029` naming `concurrency[0]`.
#[derive(Debug, Default)]
struct Burst {
    answered: usize,
    refused: usize,
}

/// `calls` concurrent `slow` calls of `ms`, round robin over `clients`; every reply must be
/// an answer or a `-32029` refusal (nothing lost, nothing hung: the client's own timeout is
/// 60 s, far above any queue here).
async fn burst(clients: &[RawClient], calls: usize, ms: u64) -> Burst {
    let replies = futures_util::future::join_all(
        (0..calls).map(|i| clients[i % clients.len()].call_tool("slow", json!({"ms": ms}))),
    )
    .await;
    let mut b = Burst::default();
    for r in &replies {
        if is_refusal(r) {
            b.refused += 1;
        } else {
            assert_eq!(
                r.last()["result"]["content"][0]["text"],
                "slept",
                "neither an answer nor a refusal: {r:?}"
            );
            b.answered += 1;
        }
    }
    b
}

/// A `-32029` inside the session naming `concurrency[0]`, retry after 1 s.
fn is_refusal(r: &Reply) -> bool {
    let error = &r.last()["error"];
    if error.is_null() {
        return false;
    }
    assert_eq!(r.status, 200, "{r:?}");
    assert_eq!(error["code"], -32029, "{r:?}");
    assert_eq!(error["data"]["limit"], "concurrency[0]", "{r:?}");
    assert_eq!(error["data"]["retryAfterSeconds"], 1, "{r:?}");
    true
}

#[tokio::test]
async fn a_cap_of_four_holds_at_the_upstream_and_a_large_queue_serves_every_call() {
    let slow = SlowUpstream::start().await;
    let roomy = gated("cc-roomy", &slow, cap(4, 32, Duration::from_secs(30)));
    let gw = TestGateway::start(config(vec![roomy])).await;
    let clients = sessions(&[gw.url("cc-roomy")], 5).await;

    // While the burst runs, the usage gauge shows the calls in flight: 4, never more.
    let watch = async {
        let mut seen = Vec::new();
        for _ in 0..40 {
            tokio::time::sleep(Duration::from_millis(25)).await;
            seen.push(usage(&gw, "cc-roomy"));
        }
        seen
    };
    let (b, seen) = tokio::join!(burst(&clients, 20, 300), watch);
    assert_eq!((b.answered, b.refused), (20, 0), "{b:?}");
    assert!(
        seen.contains(&4) && seen.iter().all(|n| *n <= 4),
        "{seen:?}"
    );
    assert_eq!(usage(&gw, "cc-roomy"), 0);
    let s = slow.idle().await;
    assert_eq!(s.served, 20, "{s:?}");
    assert!(
        s.peak <= 4,
        "at most 4 calls in flight at the upstream: {s:?}"
    );
    assert!(s.peak >= 2, "the burst overlapped at the upstream: {s:?}");

    // Other methods are not gated by a tools/call in flight, and the session goes on.
    assert_eq!(clients[0].request("ping", json!({})).await.status, 200);
}

#[tokio::test]
async fn prompts_and_resource_reads_take_slots_too() {
    let slow = SlowUpstream::start().await;
    let t = gated("cc-other", &slow, cap(1, 0, Duration::from_millis(10)));
    let gw = TestGateway::start(config(vec![t])).await;
    let clients = sessions(&[gw.url("cc-other")], 2).await;
    let (busy, other) = (&clients[0], &clients[1]);
    let holding = busy.call_tool("slow", json!({"ms": 1500}));
    let probe = async {
        for _ in 0..200 {
            if slow.stats().await.now == 1 {
                break;
            }
            tokio::time::sleep(Duration::from_millis(10)).await;
        }
        // The one slot is held by the tool call: a prompt and a read are refused.
        let p = other.request("prompts/get", json!({"name": "p"})).await;
        let r = other
            .request("resources/read", json!({"uri": "file:///r"}))
            .await;
        // Lists are not calls: never gated.
        let l = other.request("tools/list", json!({})).await;
        (p, r, l)
    };
    let (answer, (p, r, l)) = tokio::join!(holding, probe);
    assert_eq!(
        answer.last()["result"]["content"][0]["text"],
        "slept",
        "{answer:?}"
    );
    assert!(is_refusal(&p), "{p:?}");
    assert!(is_refusal(&r), "{r:?}");
    assert!(l.last()["result"]["tools"].is_array(), "{l:?}");
    // Free again: both pass.
    let p = other.request("prompts/get", json!({"name": "p"})).await;
    assert!(p.last()["result"]["messages"].is_array(), "{p:?}");
    let r = other
        .request("resources/read", json!({"uri": "file:///r"}))
        .await;
    assert_eq!(r.last()["result"]["contents"][0]["text"], "r", "{r:?}");
}

#[tokio::test]
async fn beyond_a_short_queue_calls_are_refused_counted_and_audited() {
    let slow = SlowUpstream::start().await;
    let dir = TempDir::new("concurrency-audit");
    let admin = crate::support::peers::free_port();
    let yaml = format!(
        "admin_listen: 127.0.0.1:{admin}\n\
         tenants:\n\
         \x20 - name: cc-tight\n\
         \x20   limits:\n\
         \x20     concurrency:\n\
         \x20       - {{upstream: \"sl*\", max_in_flight: 4, queue: 2, queue_timeout: 100ms}}\n\
         \x20   upstreams:\n\
         \x20     - {{name: slow, http: {{url: \"{}\"}}}}\n",
        slow.url()
    );
    let gw = GatewayProcess::start(&yaml, &dir, "cc-tight").await;
    let clients = sessions(&[gw.url("cc-tight")], 5).await;

    let first = burst(&clients, 20, 1000).await;
    let b = &first;
    assert_eq!(b.answered + b.refused, 20, "{b:?}");
    // 4 in flight for 1 s, 2 waiting 100 ms at most: the rest refused at once, the waiting
    // ones when their 100 ms are up.
    assert!(b.answered >= 4, "{b:?}");
    assert!(b.refused >= 10, "{b:?}");
    let s = slow.idle().await;
    assert!(s.peak <= 4, "{s:?}");
    assert_eq!(s.served as usize, b.answered, "{s:?}");

    // Slots are back: the next calls pass.
    let b = burst(&clients, 4, 50).await;
    assert_eq!((b.answered, b.refused), (4, 0), "{b:?}");

    let metrics = reqwest::get(format!("http://127.0.0.1:{admin}/metrics"))
        .await
        .expect("metrics")
        .text()
        .await
        .expect("metrics text");
    let logs = gw.stop().await;
    let counted = metrics
        .lines()
        .find(|l| {
            l.starts_with("switchyard_limit_refusals_total")
                && l.contains("tenant=\"cc-tight\"")
                && l.contains("limit=\"concurrency[0]\"")
        })
        .unwrap_or_else(|| panic!("refusals counted: {metrics}"));
    assert!(
        counted.ends_with(&format!(" {}", first.refused)),
        "every refusal counted ({}): {counted}",
        first.refused
    );
    let limited: Vec<Value> = crate::support::json_lines(&logs)
        .filter(|v| v["target"] == "switchyard::audit" && v["outcome"] == "limited")
        .collect();
    assert_eq!(
        limited.len(),
        first.refused,
        "every refusal audited: {limited:#?}"
    );
    let first = &limited[0];
    assert_eq!(
        (
            &first["tenant"],
            &first["tool"],
            &first["upstream"],
            &first["limit"]
        ),
        (
            &json!("cc-tight"),
            &json!("slow"),
            &json!("slow"),
            &json!("concurrency[0]")
        ),
        "{first}"
    );
}

#[tokio::test]
async fn abandoned_and_cancelled_calls_give_their_slots_back() {
    let slow = SlowUpstream::start().await;
    // No queue: a slot that leaked would refuse a call at once.
    let t = gated("cc-leak", &slow, cap(4, 0, Duration::from_millis(10)));
    let gw = TestGateway::start(config(vec![t])).await;
    let clients = sessions(&[gw.url("cc-leak")], 4).await;
    let before = refusals("cc-leak", "concurrency[0]");
    let calls_before = ended_calls("cc-leak");

    // Clients that leave mid-call (their HTTP request times out at 500 ms; the upstream
    // takes 2 s): the slot is held until the upstream answers, then given back.
    let impatient = reqwest::Client::builder()
        .timeout(Duration::from_millis(500))
        .build()
        .expect("client");
    let abandon = clients.iter().enumerate().map(|(i, c)| {
        let mut req = impatient.post(&c.url).body(
            json!({"jsonrpc": "2.0", "id": 1000 + i, "method": "tools/call",
                   "params": {"name": "slow", "arguments": {"ms": 2000}}})
            .to_string(),
        );
        for (k, v) in c.standard_headers() {
            req = req.header(k, v);
        }
        async move {
            // The response's head may come at once (an event stream); its body cannot.
            let answered = match req.send().await {
                Ok(r) => r.bytes().await.is_ok_and(|b| !b.is_empty()),
                Err(_) => false,
            };
            assert!(!answered, "the client left before the answer");
        }
    });
    futures_util::future::join_all(abandon).await;
    let s = slow.stats().await;
    assert_eq!(
        (s.now, s.served),
        (4, 0),
        "the four run on at the upstream: {s:?}"
    );
    // The four still run at the upstream and hold the four slots: a fifth call is refused.
    let r = clients[0].call_tool("slow", json!({"ms": 10})).await;
    assert!(
        is_refusal(&r),
        "every slot is held by an abandoned call: {r:?}"
    );
    let s = slow.idle().await;
    assert_eq!(s.served, 4, "{s:?}");
    // The upstream counts a call done before its answer is on the wire: wait (bounded) until
    // the gateway has read the four answers and ended the calls.
    let deadline = tokio::time::Instant::now() + Duration::from_secs(2);
    while ended_calls("cc-leak") < calls_before + 4 && tokio::time::Instant::now() < deadline {
        tokio::time::sleep(Duration::from_millis(5)).await;
    }
    assert_eq!(
        ended_calls("cc-leak"),
        calls_before + 4,
        "the gateway ended the four calls"
    );
    // They ended: four calls at once pass again, without any queue.
    let b = burst(&clients, 4, 200).await;
    assert_eq!((b.answered, b.refused), (4, 0), "{b:?}");

    // Cancelled by the client (`notifications/cancelled`): the slot comes back at once.
    let running =
        futures_util::future::join_all(clients.iter().enumerate().map(|(i, c)| async move {
            let body = json!({"jsonrpc": "2.0", "id": 2000 + i, "method": "tools/call",
                          "params": {"name": "slow", "arguments": {"ms": 3000}}});
            c.post(&body).await
        }));
    let cancel = async {
        // Wait (bounded) until the four calls are at the upstream, then cancel them.
        for _ in 0..200 {
            if slow.stats().await.now == 4 {
                break;
            }
            tokio::time::sleep(Duration::from_millis(20)).await;
        }
        assert_eq!(slow.stats().await.now, 4);
        for (i, c) in clients.iter().enumerate() {
            let n = c
                .post(
                    &json!({"jsonrpc": "2.0", "method": "notifications/cancelled",
                               "params": {"requestId": 2000 + i, "reason": "test"}}),
                )
                .await;
            assert_eq!(n.status, 202, "{n:?}");
        }
    };
    let (_, ()) = tokio::join!(running, cancel);
    // The upstream still sleeps on them, but the gateway no longer waits for them.
    assert!(
        slow.stats().await.now > 0,
        "the cancelled calls were given back early"
    );
    let b = burst(&clients, 4, 10).await;
    assert_eq!((b.answered, b.refused), (4, 0), "{b:?}");
    assert_eq!(refusals("cc-leak", "concurrency[0]"), before + 1);
    slow.idle().await;
}

#[tokio::test]
async fn two_replicas_on_one_redis_hold_one_cap() {
    let redis = RedisServer::start().await;
    let slow = SlowUpstream::start().await;
    let cfg = clustered(
        &redis,
        "cc",
        vec![gated("cc-two", &slow, cap(4, 32, Duration::from_secs(30)))],
    );
    let gws = replicas(&cfg, 2).await;
    let urls = [gws[0].url("cc-two"), gws[1].url("cc-two")];
    let clients = sessions(&urls, 6).await;

    let b = burst(&clients, 24, 300).await;
    assert_eq!((b.answered, b.refused), (24, 0), "{b:?}");
    let s = slow.idle().await;
    assert_eq!(s.served, 24, "{s:?}");
    assert!(s.peak <= 4, "4 across both replicas, not 8: {s:?}");
    assert!(s.peak >= 2, "{s:?}");

    // Every lease is given back: the set empties (and is gone).
    let mut conn = redis.conn().await;
    let key = "cc:v1:lim:{cc-two}:gate:slow";
    assert_eq!(leases_left(&mut conn, key).await, 0, "leases given back");

    // Leases of another replica count (4 held: a call waits, then is refused), and a
    // crashed replica's lapse (expired: the call passes).
    let (secs, micros): (u64, u64) = redis::cmd("TIME")
        .query_async(&mut conn)
        .await
        .expect("TIME");
    let now_ms = secs * 1000 + micros / 1000;
    let tight = {
        let mut c = cfg.clone();
        c.tenants[0].limits.concurrency = vec![cap(4, 1, Duration::from_millis(300))];
        c
    };
    gws[0].gateway.apply(&tight).await.expect("reload");
    for i in 0..4 {
        let _: u64 = redis::cmd("ZADD")
            .arg(key)
            .arg(now_ms + 60_000)
            .arg(format!("elsewhere:{i}"))
            .query_async(&mut conn)
            .await
            .expect("ZADD");
    }
    let r = on(&clients[0]).call_tool("slow", json!({"ms": 10})).await;
    assert!(is_refusal(&r), "4 slots held elsewhere: {r:?}");
    for i in 0..4 {
        let _: u64 = redis::cmd("ZADD")
            .arg(key)
            .arg(now_ms.saturating_sub(1))
            .arg(format!("elsewhere:{i}"))
            .query_async(&mut conn)
            .await
            .expect("ZADD");
    }
    let r = on(&clients[0]).call_tool("slow", json!({"ms": 10})).await;
    assert!(!is_refusal(&r), "the lapsed leases are dropped: {r:?}");
}

#[tokio::test]
async fn a_busy_replica_takes_leases_in_blocks_and_gives_back_what_it_does_not_use() {
    let redis = RedisServer::start().await;
    let slow = SlowUpstream::start().await;
    let cfg = clustered(
        &redis,
        "cb",
        vec![gated("cc-blk", &slow, cap(1000, 0, Duration::from_secs(1)))],
    );
    let gws = replicas(&cfg, 2).await;
    let clients = sessions(&[gws[0].url("cc-blk"), gws[1].url("cc-blk")], 2).await;
    let mut conn = redis.conn().await;
    let key = "cb:v1:lim:{cc-blk}:gate:slow";

    // 100 calls one after another, alternating replicas: most slots come from each
    // replica's pool, not from a script in Redis.
    let scripts_before = script_calls(&mut conn).await;
    for i in 0..100 {
        let r = clients[i % 2].call_tool("slow", json!({"ms": 0})).await;
        assert_eq!(r.last()["result"]["content"][0]["text"], "slept", "{r:?}");
    }
    let scripts = script_calls(&mut conn).await - scripts_before;
    assert!(scripts <= 30, "100 calls ran {scripts} scripts in Redis");
    assert_eq!(slow.idle().await.served, 100);
    assert_eq!((usage(&gws[0], "cc-blk"), usage(&gws[1], "cc-blk")), (0, 0));

    // Idle, the pools give every lease back within a few sweeps.
    assert_eq!(
        leases_left(&mut conn, key).await,
        0,
        "pooled leases given back"
    );
}

#[tokio::test]
async fn a_call_longer_than_the_renewal_period_keeps_its_lease_alive() {
    let redis = RedisServer::start().await;
    let slow = SlowUpstream::start().await;
    let cfg = clustered(
        &redis,
        "cr",
        vec![gated("cc-long", &slow, cap(4, 0, Duration::from_secs(1)))],
    );
    let gws = replicas(&cfg, 1).await;
    let clients = sessions(&[gws[0].url("cc-long")], 1).await;
    let mut conn = redis.conn().await;
    let key = "cr:v1:lim:{cc-long}:gate:slow";
    let expiry = |conn: &mut redis::aio::MultiplexedConnection| {
        let mut conn = conn.clone();
        async move {
            let held: Vec<(String, f64)> = redis::cmd("ZRANGE")
                .arg(key)
                .arg(0)
                .arg(-1)
                .arg("WITHSCORES")
                .query_async(&mut conn)
                .await
                .expect("ZRANGE");
            held
        }
    };

    // One call of 12 s: longer than the 10 s renewal period, shorter than the 30 s lease.
    let call = clients[0].call_tool("slow", json!({"ms": 12_000}));
    let watch = async {
        // The lease as soon as the call holds it (a fixed second was not always enough on a
        // loaded machine), then again 10 s later, before the call ends.
        let mut first = Vec::new();
        for _ in 0..50 {
            first = expiry(&mut conn).await;
            if !first.is_empty() {
                break;
            }
            tokio::time::sleep(Duration::from_millis(100)).await;
        }
        tokio::time::sleep(Duration::from_secs(10)).await;
        (first, expiry(&mut conn).await)
    };
    let (r, (first, renewed)) = tokio::join!(call, watch);
    assert_eq!(r.last()["result"]["content"][0]["text"], "slept", "{r:?}");
    assert_eq!(first.len(), 1, "one lease while the call runs: {first:?}");
    assert_eq!(renewed.len(), 1, "{renewed:?}");
    assert_eq!(first[0].0, renewed[0].0, "the same lease");
    assert!(
        renewed[0].1 >= first[0].1 + 8_000.0,
        "renewed about 10 s later: {first:?} then {renewed:?}"
    );
}

/// The leases held in `key`, once it is empty or after 2 s of waiting for it to empty.
async fn leases_left(conn: &mut redis::aio::MultiplexedConnection, key: &str) -> u64 {
    let mut held = u64::MAX;
    for _ in 0..100 {
        held = redis::cmd("ZCARD")
            .arg(key)
            .query_async(conn)
            .await
            .expect("ZCARD");
        if held == 0 {
            break;
        }
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    held
}

/// `switchyard_limit_usage{tenant, limit="concurrency[0]"}` as `gw`'s scrape sets it.
fn usage(gw: &TestGateway, tenant: &str) -> i64 {
    gw.gateway.refresh_gauges();
    switchyard::metrics::get()
        .limit_usage
        .with_label_values(&[tenant, "concurrency[0]"])
        .get()
}

/// A client continuing `c`'s session (on the same replica).
fn on(c: &RawClient) -> RawClient {
    let mut n = RawClient::new(c.url.clone());
    n.session = c.session.clone();
    n.protocol_version = c.protocol_version.clone();
    n
}

#[tokio::test]
async fn redis_down_lets_calls_through_or_refuses_them_as_each_tenant_chose() {
    let mut redis = RedisServer::start().await;
    let slow = SlowUpstream::start().await;
    let with = |name: &str, policy| {
        let mut t = gated(name, &slow, cap(4, 4, Duration::from_secs(5)));
        t.limits.on_store_error = policy;
        t
    };
    let cfg: Config = clustered(
        &redis,
        "ccse",
        vec![
            with("cc-open", StoreErrorPolicy::Open),
            with("cc-closed", StoreErrorPolicy::Closed),
        ],
    );
    let gws = replicas(&cfg, 1).await;
    let open = sessions(&[gws[0].url("cc-open")], 1).await;
    let closed = sessions(&[gws[0].url("cc-closed")], 1).await;
    assert_eq!(burst(&open, 2, 10).await.answered, 2);
    assert_eq!(burst(&closed, 2, 10).await.answered, 2);

    redis.kill().await;
    let b = burst(&open, 3, 10).await;
    assert_eq!((b.answered, b.refused), (3, 0), "open: let through: {b:?}");
    let before = refusals("cc-closed", "store_error");
    let r = closed[0].call_tool("slow", json!({"ms": 10})).await;
    assert_eq!(r.status, 503, "closed: refused while Redis is down: {r:?}");
    assert!(
        r.header("retry-after")
            .and_then(|v| v.parse::<u64>().ok())
            .is_some_and(|s| s >= 1),
        "{r:?}"
    );
    assert!(refusals("cc-closed", "store_error") > before);
    let served = slow.idle().await.served;
    assert_eq!(
        served,
        2 + 2 + 3,
        "the refused call never reached the upstream"
    );

    // Redis back: the closed tenant's calls pass again.
    redis.restart().await;
    let mut recovered = false;
    for _ in 0..60 {
        let r = closed[0].call_tool("slow", json!({"ms": 10})).await;
        if r.status == 200 {
            assert_eq!(r.last()["result"]["content"][0]["text"], "slept", "{r:?}");
            recovered = true;
            break;
        }
        assert_eq!(r.status, 503, "{r:?}");
        tokio::time::sleep(Duration::from_millis(250)).await;
    }
    assert!(
        recovered,
        "the closed tenant serves again once Redis is back"
    );
}
