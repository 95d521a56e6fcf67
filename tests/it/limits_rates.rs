//! Request rates, tool-call rates and quotas (`tenants[].limits`: `requests_per_user`,
//! `requests`, `calls`, `quotas`, `on_store_error`) over real sockets: two replicas on one
//! real `redis-server` enforcing one limit, the memory store on one replica, refusals as 429 +
//! `Retry-After` before a session and `-32029` inside one, the audit event of a refused call
//! (from a gateway process's log), Redis killed under `open` and `closed`, and reloads.
//!
//! Anonymous clients are told apart as a proxy would name them: `trusted_proxies:
//! [127.0.0.1/32]` and a distinct `X-Forwarded-For` per client. Rates are per hour (a token
//! every few minutes), so "exactly N pass" holds however slow the machine is.

use std::time::{Duration, SystemTime, UNIX_EPOCH};

use serde_json::{Value, json};
use switchyard::config::{
    Cidr, Config, Quotas, Rate, StoreErrorPolicy, TenantConfig, TenantLimits,
};

use crate::cluster::{clustered, replicas};
use crate::support::TempDir;
use crate::support::client::{self, ACCEPT_BOTH, Reply, into_reply};
use crate::support::config::{config, demo_server_exe, demo_stdio, http, tenant, upstream};
use crate::support::gateway::TestGateway;
use crate::support::limits::{
    assert_refused_before_session, assert_refused_in_session, refusals, script_calls,
};
use crate::support::peers::{HttpPeer, free_port};
use crate::support::process::GatewayProcess;
use crate::support::redis::RedisServer;

/// `count` per hour, burst `count`.
fn per_hour(count: u32) -> Rate {
    Rate {
        count,
        per: Duration::from_secs(3600),
        burst: count,
    }
}

/// A tenant of the demo server (over stdio, shared) with `limits`.
fn limited(name: &str, limits: TenantLimits) -> TenantConfig {
    let mut t = tenant(
        name,
        vec![upstream(
            "demo",
            switchyard::config::UpstreamTransport::Stdio(demo_stdio(None)),
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

/// An MCP client whose requests come through the trusted proxy on behalf of `address`.
struct Client {
    http: reqwest::Client,
    url: String,
    address: String,
    session: Option<String>,
    protocol_version: String,
    next_id: u64,
}

impl Client {
    fn new(url: String, address: &str) -> Client {
        switchyard::app::install_crypto_provider();
        Client {
            http: reqwest::Client::builder()
                .timeout(Duration::from_secs(60))
                .build()
                .expect("client"),
            url,
            address: address.into(),
            session: None,
            protocol_version: "2025-11-25".into(),
            next_id: 1,
        }
    }

    /// The same client and session, on another replica.
    fn on(&self, url: String) -> Client {
        Client {
            url,
            session: self.session.clone(),
            protocol_version: self.protocol_version.clone(),
            ..Client::new(String::new(), &self.address)
        }
    }

    async fn post_with(&self, body: &Value, extra: &[(&str, &str)]) -> Reply {
        let mut req = self
            .http
            .post(&self.url)
            .header("content-type", "application/json")
            .header("accept", ACCEPT_BOTH)
            .header("x-forwarded-for", &self.address)
            .body(body.to_string());
        if let Some(s) = &self.session {
            req = req
                .header("mcp-session-id", s)
                .header("mcp-protocol-version", &self.protocol_version);
        }
        for (k, v) in extra {
            req = req.header(*k, *v);
        }
        into_reply(req.send().await.expect("POST reaches the gateway")).await
    }

    async fn post(&self, body: &Value) -> Reply {
        self.post_with(body, &[]).await
    }

    async fn initialize(&mut self) {
        let r = self
            .post(&json!({
                "jsonrpc": "2.0", "id": 0, "method": "initialize",
                "params": {
                    "protocolVersion": self.protocol_version,
                    "capabilities": {},
                    "clientInfo": {"name": "limits-tests", "version": "0"}
                }
            }))
            .await;
        assert_eq!(r.status, 200, "initialize: {r:?}");
        self.session = r.header("mcp-session-id").map(str::to_owned);
        let n = self
            .post(&json!({"jsonrpc": "2.0", "method": "notifications/initialized"}))
            .await;
        assert_eq!(n.status, 202, "notifications/initialized: {n:?}");
    }

    async fn request(&mut self, method: &str, params: Value) -> Reply {
        self.next_id += 1;
        let id = self.next_id;
        self.post(&json!({"jsonrpc": "2.0", "id": id, "method": method, "params": params}))
            .await
    }

    async fn call(&mut self, tool: &str, arguments: Value) -> Reply {
        self.request("tools/call", json!({"name": tool, "arguments": arguments}))
            .await
    }
}

#[tokio::test]
async fn a_per_user_rate_holds_once_across_two_replicas_on_one_redis() {
    let redis = RedisServer::start().await;
    let peer = HttpPeer::demo(free_port(), &[]).await;
    let mut t = tenant("rr2", vec![upstream("demo", http(&peer.url()))]);
    t.limits.requests_per_user = Some(per_hour(10));
    let cfg = behind_proxy(clustered(&redis, "rl", vec![t]));
    let gws = replicas(&cfg, 2).await;
    let urls = [gws[0].url("rr2"), gws[1].url("rr2")];

    // Alice alternates replicas; `initialize` is a request too (the notification is not).
    let mut alice = Client::new(urls[0].clone(), "203.0.113.10");
    alice.initialize().await;
    let mut passed = 1;
    let mut refusal = None;
    for i in 0..30 {
        let mut c = alice.on(urls[i % 2].clone());
        c.next_id = 100 + i as u64;
        let r = c.request("ping", json!({})).await;
        if r.status == 200 {
            assert_eq!(r.last()["result"], json!({}), "{r:?}");
            passed += 1;
        } else {
            refusal = Some((r, c.next_id));
            break;
        }
    }
    assert_eq!(passed, 10, "10 per hour per user across both replicas");
    let (r, id) = refusal.expect("refused within 30 requests");
    // The next token comes in 6 minutes.
    let wait = assert_refused_before_session(&r, "requests_per_user", 360);
    assert!(wait > 300, "a token every 360 s: {wait}");
    assert_eq!(r.last()["id"], id, "the refused request's id: {r:?}");
    // Refused on the other replica too; a notification is not charged.
    let r = alice.on(urls[1].clone()).request("ping", json!({})).await;
    assert_refused_before_session(&r, "requests_per_user", 360);
    let n = alice
        .post(&json!({"jsonrpc": "2.0", "method": "notifications/cancelled", "params": {"requestId": 1}}))
        .await;
    assert_eq!(n.status, 202, "{n:?}");

    // Bob, another client address, is not affected, on either replica.
    let mut bob = Client::new(urls[1].clone(), "203.0.113.11");
    bob.initialize().await;
    for url in &urls {
        let r = bob
            .on(url.clone())
            .call("echo", json!({"message": "bob"}))
            .await;
        assert_eq!(client::text(r.last()), "bob");
    }

    // Concurrent requests racing on both replicas: still exactly the budget (one script per
    // check, atomic in Redis).
    let mut dave = Client::new(urls[0].clone(), "203.0.113.12");
    dave.initialize().await; // 1 of 10
    let racing = (0..20).map(|i| {
        let mut c = dave.on(urls[i % 2].clone());
        async move { c.request("ping", json!({})).await.status }
    });
    let statuses = futures_util::future::join_all(racing).await;
    let ok = statuses.iter().filter(|s| **s == 200).count();
    let limited = statuses.iter().filter(|s| **s == 429).count();
    assert_eq!((ok, limited), (9, 11), "{statuses:?}");

    // One bucket per user in Redis, under the tenant's hash tag, expiring when full again.
    let mut conn = redis.conn().await;
    let keys: Vec<String> = redis::cmd("KEYS")
        .arg("rl:v1:lim:{rr2}:rate:rpu:*")
        .query_async(&mut conn)
        .await
        .expect("KEYS");
    assert_eq!(keys.len(), 3, "{keys:?}");
    for k in &keys {
        let ttl: i64 = redis::cmd("PTTL")
            .arg(k)
            .query_async(&mut conn)
            .await
            .expect("PTTL");
        assert!(ttl > 0 && ttl <= 3_600_000, "{k}: {ttl}");
    }
    assert!(refusals("rr2", "requests_per_user") >= 2);

    // A spent budget is refused by each replica without asking Redis again until a token is
    // back: a flood from it costs Redis (almost) nothing.
    let scripts_before = script_calls(&mut conn).await;
    for i in 0..60 {
        let r = alice
            .on(urls[i % 2].clone())
            .request("ping", json!({}))
            .await;
        assert_refused_before_session(&r, "requests_per_user", 360);
    }
    let scripts = script_calls(&mut conn).await - scripts_before;
    assert!(
        scripts < 10,
        "60 refused requests ran {scripts} scripts in Redis"
    );
}

#[tokio::test]
async fn a_busy_budget_is_charged_in_blocks_and_still_lets_through_exactly_its_size() {
    let redis = RedisServer::start().await;
    let peer = HttpPeer::demo(free_port(), &[]).await;
    let mut t = tenant("rblk", vec![upstream("demo", http(&peer.url()))]);
    t.limits.requests_per_user = Some(per_hour(200));
    let cfg = behind_proxy(clustered(&redis, "rb", vec![t]));
    let gws = replicas(&cfg, 2).await;
    let mut conn = redis.conn().await;

    // Erin alternates replicas, one request at a time, far past her budget.
    let mut erin = Client::new(gws[0].url("rblk"), "203.0.113.20");
    erin.initialize().await; // 1 of 200
    let mut other = erin.on(gws[1].url("rblk"));
    let scripts_before = script_calls(&mut conn).await;
    let (mut passed, mut refused) = (1, 0);
    for i in 0..300 {
        let c = if i % 2 == 0 { &mut erin } else { &mut other };
        let r = c.request("ping", json!({})).await;
        match r.status {
            200 => passed += 1,
            429 => refused += 1,
            _ => panic!("neither an answer nor a refusal: {r:?}"),
        }
    }
    let scripts = script_calls(&mut conn).await - scripts_before;
    // Credit granted out of plenty is spent by the replica holding it, and none is granted
    // near the end: both replicas together let through exactly the budget...
    assert_eq!(
        (passed, refused),
        (200, 101),
        "200 per hour across both replicas"
    );
    // ...with far fewer round trips than checks (one per check without credit: 300).
    assert!(scripts < 100, "300 checks ran {scripts} scripts in Redis");
}

#[tokio::test]
async fn request_rates_on_the_memory_store_count_every_transport_before_the_session() {
    let per_user = limited(
        "rmem",
        TenantLimits {
            requests_per_user: Some(per_hour(5)),
            ..TenantLimits::default()
        },
    );
    let shared = limited(
        "rten",
        TenantLimits {
            requests: Some(per_hour(6)),
            ..TenantLimits::default()
        },
    );
    let gw = TestGateway::start(behind_proxy(config(vec![per_user, shared]))).await;

    // Per user: 5 requests (initialize and 4 calls), then 429.
    let mut alice = Client::new(gw.url("rmem"), "198.51.100.1");
    alice.initialize().await;
    for i in 0..4 {
        let r = alice
            .call("echo", json!({"message": format!("m{i}")}))
            .await;
        assert_eq!(client::text(r.last()), format!("m{i}"));
    }
    let r = alice.request("ping", json!({})).await;
    assert_refused_before_session(&r, "requests_per_user", 720);
    // Before the session is looked up: an unknown session id is 429, not 404; a stateless
    // (2026-07-28) request and a 2024-11-05 message POST are charged alike.
    let mut stranger = alice.on(gw.url("rmem"));
    stranger.session = Some("0".repeat(48));
    let r = stranger.request("ping", json!({})).await;
    assert_refused_before_session(&r, "requests_per_user", 720);
    let stateless = Client::new(gw.url("rmem"), "198.51.100.1");
    let r = stateless
        .post_with(
            &json!({"jsonrpc": "2.0", "id": 9, "method": "tools/list", "params": {}}),
            &[("mcp-protocol-version", "2026-07-28")],
        )
        .await;
    assert_refused_before_session(&r, "requests_per_user", 720);
    let legacy = Client::new(
        format!("{}/messages?sessionId=nosuchsession", gw.url("rmem")),
        "198.51.100.1",
    );
    let r = legacy
        .post(&json!({"jsonrpc": "2.0", "id": 1, "method": "ping"}))
        .await;
    assert_refused_before_session(&r, "requests_per_user", 720);
    // Another client is not affected; its session is alice's neighbour on the same tenant.
    let mut bob = Client::new(gw.url("rmem"), "198.51.100.2");
    bob.initialize().await;
    assert_eq!(bob.request("ping", json!({})).await.status, 200);

    // A batch (2025-03-26) takes a token per request, all at once or none.
    let mut carol = Client::new(gw.url("rmem"), "198.51.100.3");
    carol.protocol_version = "2025-03-26".into();
    carol.initialize().await; // 1 token; 4 left
    let batch = |ids: std::ops::Range<u64>| {
        let mut members: Vec<Value> = ids
            .map(|id| json!({"jsonrpc": "2.0", "id": id, "method": "ping"}))
            .collect();
        members.push(json!({"jsonrpc": "2.0", "method": "notifications/progress", "params": {"progressToken": "x", "progress": 1}}));
        Value::Array(members)
    };
    let r = carol.post(&batch(10..13)).await; // 3 requests and a notification
    assert_eq!(r.status, 200, "{r:?}");
    assert_eq!(r.last().as_array().map(Vec::len), Some(3), "{r:?}");
    let r = carol.post(&batch(20..22)).await; // 2 more: 1 left, refused whole
    assert_refused_before_session(&r, "requests_per_user", 720);
    let r = carol.request("ping", json!({})).await; // the last token was not taken
    assert_eq!(r.status, 200, "{r:?}");

    // Tenant-wide: 6 requests for everyone together.
    let mut a = Client::new(gw.url("rten"), "192.0.2.1");
    let mut b = Client::new(gw.url("rten"), "192.0.2.2");
    a.initialize().await;
    b.initialize().await;
    for _ in 0..2 {
        assert_eq!(a.request("ping", json!({})).await.status, 200);
        assert_eq!(b.request("ping", json!({})).await.status, 200);
    }
    for c in [&mut a, &mut b] {
        let r = c.request("ping", json!({})).await;
        assert_refused_before_session(&r, "requests", 600);
    }
    assert!(refusals("rten", "requests") >= 2);
    assert!(refusals("rmem", "requests_per_user") >= 5);
}

#[tokio::test]
async fn call_limits_select_the_tool_itself_and_refusals_are_audited() {
    let dir = TempDir::new("call-limits");
    let exe = demo_server_exe();
    let demo = format!(
        "{{command: \"{}\", args: [--stdio], sharing: shared}}",
        exe.display()
    );
    let yaml = format!(
        "trusted_proxies: [127.0.0.1/32]\n\
         tenants:\n\
         \x20 - name: calls\n\
         \x20   limits:\n\
         \x20     calls:\n\
         \x20       - {{upstream: demo, tools: [echo], rate: 3/h}}\n\
         \x20       - {{upstream: \"*\", tools: [add], rate: 2/h, per: tenant}}\n\
         \x20   upstreams:\n\
         \x20     - {{name: demo, stdio: {demo}}}\n\
         \x20     - {{name: other, stdio: {demo}}}\n"
    );
    let gw = GatewayProcess::start(&yaml, &dir, "calls").await;
    let url = gw.url("calls");
    let mut alice = Client::new(url.clone(), "203.0.113.20");
    let mut bob = Client::new(url.clone(), "203.0.113.21");
    alice.initialize().await;
    bob.initialize().await;

    // calls[0]: echo of `demo` (public name demo__echo), 3 per hour per user.
    for i in 0..3 {
        let r = alice
            .call("demo__echo", json!({"message": i.to_string()}))
            .await;
        assert_eq!(client::text(r.last()), i.to_string());
    }
    let r = alice.call("demo__echo", json!({"message": "4th"})).await;
    let wait = assert_refused_in_session(&r, "calls[0]");
    assert!((1..=1200).contains(&wait), "{wait}");
    assert!(
        r.last()["error"]["message"]
            .as_str()
            .is_some_and(|m| m.contains("demo tools echo")),
        "{r:?}"
    );
    // Refused inside the session: the session goes on, other tools and upstreams too.
    let r = alice
        .call("other__echo", json!({"message": "other upstream"}))
        .await;
    assert_eq!(client::text(r.last()), "other upstream");
    assert_eq!(alice.request("ping", json!({})).await.status, 200);
    // Per user: bob has his own 3.
    for _ in 0..3 {
        let r = bob.call("demo__echo", json!({"message": "bob"})).await;
        assert_eq!(client::text(r.last()), "bob");
    }

    // calls[1]: `add` of any upstream, 2 per hour for the whole tenant.
    let r = alice.call("demo__add", json!({"a": 1, "b": 2})).await;
    assert_eq!(client::text(r.last()), "3");
    let r = bob.call("other__add", json!({"a": 2, "b": 2})).await;
    assert_eq!(client::text(r.last()), "4");
    let r = bob.call("demo__add", json!({"a": 1, "b": 1})).await;
    assert_refused_in_session(&r, "calls[1]");
    let r = alice.call("other__add", json!({"a": 1, "b": 1})).await;
    assert_refused_in_session(&r, "calls[1]");

    // Every refused call is audited like any tool call, with the limit.
    let logs = gw.stop().await;
    let audits: Vec<Value> = crate::support::json_lines(&logs)
        .filter(|v| v["target"] == "switchyard::audit")
        .collect();
    let limited: Vec<&Value> = audits
        .iter()
        .filter(|a| a["outcome"] == "limited")
        .collect();
    assert_eq!(limited.len(), 3, "{audits:#?}");
    let first = limited[0];
    assert_eq!(
        (
            &first["tenant"],
            &first["tool"],
            &first["upstream"],
            &first["limit"]
        ),
        (
            &json!("calls"),
            &json!("echo"),
            &json!("demo"),
            &json!("calls[0]")
        ),
        "{first}"
    );
    assert_eq!(limited[2]["limit"], "calls[1]", "{audits:#?}");
    assert_eq!(limited[2]["upstream"], "other", "{audits:#?}");
    let served = audits.iter().filter(|a| a["outcome"] == "ok").count();
    assert_eq!(served, 3 + 1 + 3 + 2, "{audits:#?}");
}

/// Seconds to the next 00:00 UTC.
fn seconds_to_midnight() -> u64 {
    let now = SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .expect("clock")
        .as_secs();
    86_400 - now % 86_400
}

#[tokio::test]
async fn a_daily_quota_holds_across_replicas_and_ends_with_the_utc_day() {
    let redis = RedisServer::start().await;
    let peer = HttpPeer::demo(free_port(), &[]).await;
    let mut t = tenant("quota", vec![upstream("demo", http(&peer.url()))]);
    t.limits.quotas = Quotas {
        calls_per_user_per_day: Some(4),
        calls_per_user_per_month: Some(1000),
    };
    let cfg = behind_proxy(clustered(&redis, "qt", vec![t]));
    let gws = replicas(&cfg, 2).await;
    let mut alice = Client::new(gws[0].url("quota"), "203.0.113.30");
    alice.initialize().await;
    for i in 0..4 {
        let mut c = alice.on(gws[i % 2].url("quota"));
        c.next_id = 10 + i as u64;
        let r = c.call("echo", json!({"message": "q"})).await;
        assert_eq!(client::text(r.last()), "q", "call {i}");
    }
    let r = alice
        .on(gws[1].url("quota"))
        .call("echo", json!({"message": "5th"}))
        .await;
    let wait = assert_refused_in_session(&r, "quotas.calls_per_user_per_day");
    let expected = seconds_to_midnight();
    assert!(
        wait.abs_diff(expected) <= 5,
        "retry at the end of the UTC day: {wait} vs {expected}"
    );
    // Other requests are not calls; another user has a quota of their own.
    assert_eq!(alice.request("tools/list", json!({})).await.status, 200);
    let mut bob = Client::new(gws[1].url("quota"), "203.0.113.31");
    bob.initialize().await;
    assert_eq!(
        client::text(bob.call("echo", json!({"message": "b"})).await.last()),
        "b"
    );

    // The counters: one per user per day and per month, expiring after their period.
    let mut conn = redis.conn().await;
    let keys: Vec<String> = redis::cmd("KEYS")
        .arg("qt:v1:lim:{quota}:quota:*")
        .query_async(&mut conn)
        .await
        .expect("KEYS");
    assert_eq!(keys.len(), 4, "{keys:?}");
    for k in keys.iter().filter(|k| k.contains(":quota:d")) {
        let ttl: i64 = redis::cmd("TTL")
            .arg(k)
            .query_async(&mut conn)
            .await
            .expect("TTL");
        let ttl = u64::try_from(ttl).expect("an expiry");
        assert!(ttl <= expected + 3600 && ttl + 10 >= expected, "{k}: {ttl}");
    }
    let used: Vec<Option<u64>> = redis::cmd("MGET")
        .arg(&keys)
        .query_async(&mut conn)
        .await
        .expect("MGET");
    let mut used: Vec<u64> = used.into_iter().flatten().collect();
    used.sort_unstable();
    assert_eq!(used, [1, 1, 4, 4], "{keys:?}");
}

#[tokio::test]
async fn redis_down_lets_requests_through_or_refuses_them_as_each_tenant_chose() {
    let mut redis = RedisServer::start().await;
    let peer = HttpPeer::demo(free_port(), &[]).await;
    let with = |name: &str, policy| {
        let mut t = tenant(name, vec![upstream("demo", http(&peer.url()))]);
        t.limits.requests_per_user = Some(per_hour(1000));
        t.limits.quotas.calls_per_user_per_day = Some(1000);
        t.limits.on_store_error = policy;
        t
    };
    let cfg = behind_proxy(clustered(
        &redis,
        "se",
        vec![
            with("se-open", StoreErrorPolicy::Open),
            with("se-closed", StoreErrorPolicy::Closed),
        ],
    ));
    let gws = replicas(&cfg, 1).await;
    let gw = &gws[0];
    let mut open = Client::new(gw.url("se-open"), "203.0.113.40");
    let mut closed = Client::new(gw.url("se-closed"), "203.0.113.40");
    open.initialize().await;
    closed.initialize().await;
    assert_eq!(
        client::text(open.call("echo", json!({"message": "a"})).await.last()),
        "a"
    );
    assert_eq!(
        client::text(closed.call("echo", json!({"message": "b"})).await.last()),
        "b"
    );

    // Redis killed: the sessions live on this replica and go on; the limits cannot be
    // checked. `open` lets requests and calls through, `closed` refuses them with 503.
    redis.kill().await;
    for i in 0..3 {
        let r = open.call("echo", json!({"message": format!("o{i}")})).await;
        assert_eq!(client::text(r.last()), format!("o{i}"));
    }
    let before = refusals("se-closed", "store_error");
    let r = closed.call("echo", json!({"message": "refused"})).await;
    assert_eq!(r.status, 503, "{r:?}");
    assert!(
        r.header("retry-after")
            .and_then(|v| v.parse::<u64>().ok())
            .is_some_and(|s| s >= 1),
        "{r:?}"
    );
    assert!(refusals("se-closed", "store_error") > before);

    // Redis back: `closed` serves again (the connection is re-established on its own).
    redis.restart().await;
    let mut recovered = false;
    for _ in 0..60 {
        let r = closed.call("echo", json!({"message": "back"})).await;
        if r.status == 200 {
            assert_eq!(client::text(r.last()), "back");
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

#[tokio::test]
async fn a_reload_changes_the_rate_and_keeps_both_the_session_and_what_it_used() {
    let rate = |count, burst| {
        Some(Rate {
            burst,
            ..per_hour(count)
        })
    };
    let with = |requests_per_user| {
        behind_proxy(config(vec![limited(
            "reload",
            TenantLimits {
                requests_per_user,
                ..TenantLimits::default()
            },
        )]))
    };
    let gw = TestGateway::start(with(rate(3, 3))).await;
    let mut alice = Client::new(gw.url("reload"), "203.0.113.50");
    alice.initialize().await;
    for _ in 0..2 {
        assert_eq!(alice.request("ping", json!({})).await.status, 200);
    }
    let r = alice.request("ping", json!({})).await;
    assert_refused_before_session(&r, "requests_per_user", 1200);

    // A reload that changes something else: what alice used still counts.
    let mut other = with(rate(3, 3));
    other.tenants[0].server.instructions = Some("reloaded".into());
    gw.gateway.apply(&other).await.expect("reload applies");
    let r = alice.request("ping", json!({})).await;
    assert_refused_before_session(&r, "requests_per_user", 1200);

    // A larger burst: 4 more at once, on the same session.
    gw.gateway
        .apply(&with(rate(3, 7)))
        .await
        .expect("reload applies");
    for i in 0..4 {
        let r = alice
            .call("echo", json!({"message": format!("r{i}")}))
            .await;
        assert_eq!(client::text(r.last()), format!("r{i}"), "{r:?}");
    }
    let r = alice.request("ping", json!({})).await;
    assert_refused_before_session(&r, "requests_per_user", 1200);

    // No request rate any more: nothing is counted, the session is still there.
    gw.gateway.apply(&with(None)).await.expect("reload applies");
    for _ in 0..20 {
        assert_eq!(alice.request("ping", json!({})).await.status, 200);
    }
}
