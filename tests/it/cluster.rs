//! Several gateway replicas sharing one real `redis-server` (started by the test on a free
//! port), with no session affinity: an official SDK client switching replicas on every HTTP
//! request, upstream HTTP sessions continued by id, server-initiated messages crossing to the
//! replica that holds the GET stream, DELETE ending a session everywhere, stolen ids answered
//! 404 and logged, Redis killed and restarted mid-session, and the keyspace layout check.

use std::time::Duration;

use serde_json::{Value, json};
use switchyard::config::{
    Config, Secret, StdioSharing, StoreConfig, TenantConfig, UpstreamTransport,
};

use crate::support::client::{self, RawClient};
use crate::support::config::{config, gateway_exe, http, tenant, upstream};
use crate::support::gateway::TestGateway;
use crate::support::oidc::OidcProvider;
use crate::support::peers::{HttpPeer, Sdk, everything_stdio, free_port, run_client};
use crate::support::process::GatewayProcess;
use crate::support::redis::RedisServer;
use crate::support::{TempDir, read_trace};

/// A config whose sessions live in the test's Redis under `prefix`.
pub(crate) fn clustered(redis: &RedisServer, prefix: &str, tenants: Vec<TenantConfig>) -> Config {
    let mut c = config(tenants);
    c.sessions.store = StoreConfig::Redis(switchyard::config::RedisConfig {
        target: switchyard::config::RedisTarget::Single(Secret::new(redis.url())),
        prefix: prefix.into(),
        timeout: Duration::from_millis(500),
        events: switchyard::config::EventDurability::Durable,
    });
    c
}

/// Migrates `config`'s keyspace as an operator does before replicas start. That step is not
/// what a test measures, so it gets a longer Redis timeout than the replicas' short one (a
/// first connection on a loaded CI machine may take longer than 500 ms).
pub(crate) async fn migrate(config: &Config) -> String {
    let mut admin = config.clone();
    if let StoreConfig::Redis(redis) = &mut admin.sessions.store {
        redis.timeout = Duration::from_secs(10);
    }
    switchyard::cluster::migrate(&admin).await.expect("migrate")
}

/// Migrates the keyspace and starts `n` replicas of `config`.
pub(crate) async fn replicas(config: &Config, n: usize) -> Vec<TestGateway> {
    let report = migrate(config).await;
    assert!(report.contains("layout 1"), "{report}");
    let mut out = Vec::new();
    for _ in 0..n {
        out.push(TestGateway::start(config.clone()).await);
    }
    out
}

fn base(gw: &TestGateway) -> String {
    format!("http://{}", gw.addr)
}

/// A raw client on replica `gw` continuing `session` (as a load balancer would send it there).
fn on(gw: &TestGateway, tenant: &str, from: &RawClient) -> RawClient {
    let mut c = RawClient::new(gw.url(tenant));
    c.session = from.session.clone();
    c.protocol_version = from.protocol_version.clone();
    c.bearer = from.bearer.clone();
    c
}

#[tokio::test]
async fn sdk_client_switching_replicas_on_every_request() {
    let redis = RedisServer::start().await;
    let remote = HttpPeer::everything(free_port()).await;
    // Per session, with the client's capabilities (so sampling and elicitation are offered):
    // every replica that serves the session starts and initializes its own process.
    let mut local = everything_stdio();
    local.sharing = StdioSharing::PerSession;
    let cfg = clustered(
        &redis,
        "rr",
        vec![tenant(
            "ev",
            vec![
                upstream("local", UpstreamTransport::Stdio(local)),
                upstream("remote", http(&remote.url())),
            ],
        )],
    );
    let gws = replicas(&cfg, 2).await;
    let list = gws.iter().map(base).collect::<Vec<_>>().join(",");
    let url = gws[0].url("ev");
    for prefix in ["local__", "remote__"] {
        let report = run_client(
            Sdk::Python,
            &url,
            "everything",
            // Sessions across replicas: the session-based revision.
            &["--mode", "legacy", "--prefix", prefix, "--replicas", &list],
        )
        .await;
        crate::sdk_clients::assert_everything(&report, "python", prefix);
        assert_replicas_used(&report, 2);

        // Sampling and elicitation: the upstream asks through replica A, the client answers
        // through replica B, and the answer crosses back to the upstream that asked.
        let report = run_client(
            Sdk::Python,
            &url,
            "roundtrips",
            &["--mode", "legacy", "--prefix", prefix, "--replicas", &list],
        )
        .await;
        let sampling = report["sampling"].as_str().unwrap_or_default();
        assert!(sampling.contains("sampled by python"), "{prefix}: {report}");
        let elicitation = report["elicitation"].as_str().unwrap_or_default();
        assert!(
            elicitation.contains("- Name: Ada python"),
            "{prefix}: {report}"
        );
        assert_replicas_used(&report, 2);
    }
    // The SDK deleted its sessions on exit: nothing is left in Redis but the layout records.
    let mut conn = redis.conn().await;
    let keys: Vec<String> = redis::cmd("KEYS")
        .arg("rr:v1:sess:*")
        .query_async(&mut conn)
        .await
        .expect("KEYS");
    assert!(keys.is_empty(), "sessions left behind: {keys:?}");
    for gw in gws {
        gw.stop().await;
    }
    remote.kill().await;
}

fn assert_replicas_used(report: &Value, n: usize) {
    let hits = report["replicaHits"]
        .as_array()
        .unwrap_or_else(|| panic!("no replicaHits in {report}"));
    assert_eq!(hits.len(), n, "{report}");
    assert!(
        hits.iter().all(|h| h.as_u64().unwrap_or(0) >= 2),
        "every replica served requests: {report}"
    );
}

#[tokio::test]
async fn three_replicas_continue_one_upstream_session_and_delete_ends_it_everywhere() {
    let redis = RedisServer::start().await;
    let dir = TempDir::new("cluster3");
    let trace = dir.path("remote.jsonl");
    let trace_arg = trace.display().to_string();
    let remote = HttpPeer::demo(free_port(), &["--trace", &trace_arg]).await;
    let cfg = clustered(
        &redis,
        "three",
        vec![tenant("t", vec![upstream("remote", http(&remote.url()))])],
    );
    let gws = replicas(&cfg, 3).await;

    let mut first = RawClient::new(gws[0].url("t"));
    first.initialize().await;
    let clients: Vec<RawClient> = gws.iter().map(|g| on(g, "t", &first)).collect();
    for round in 0..3 {
        for (i, c) in clients.iter().enumerate() {
            let msg = format!("round {round} via replica {i}");
            let r = c.call_tool("echo", json!({"message": msg})).await;
            assert_eq!(r.status, 200, "{r:?}");
            assert_eq!(client::text(r.last()), msg);
        }
    }
    // One upstream session served all nine calls: one initialize, and every call carried the
    // same upstream session id, whichever replica sent it.
    let seen = read_trace(&trace);
    let inits = seen.iter().filter(|m| m["method"] == "initialize").count();
    assert_eq!(inits, 1, "the upstream was initialized once: {seen:?}");
    let calls = seen.iter().filter(|m| m["method"] == "tools/call").count();
    assert_eq!(calls, 9);

    // Another client's session, created on replica 2.
    let mut other = RawClient::new(gws[2].url("t"));
    other.initialize().await;
    assert_ne!(other.session, first.session);

    // DELETE on replica 1 removes the record at once and ends the live state everywhere as
    // soon as the other replicas get the broadcast (pub/sub: milliseconds).
    let r = clients[1].delete().await;
    assert_eq!(r.status, 200, "{r:?}");
    let mut conn = redis.conn().await;
    let left: Vec<String> = redis::cmd("KEYS")
        .arg("three:v1:sess:*")
        .query_async(&mut conn)
        .await
        .expect("KEYS");
    assert_eq!(
        left.len(),
        1,
        "only the other session's record is left: {left:?}"
    );
    for c in &clients {
        let r = c.ping_until_ended().await;
        assert_eq!(
            r.status, 404,
            "the session ended on every replica within 1s: {r:?}"
        );
    }
    // ... and only that session.
    assert_eq!(other.request("ping", json!({})).await.status, 200);
    for gw in gws {
        gw.stop().await;
    }
    remote.kill().await;
}

/// Reads an SSE response until a data line contains `needle` or `limit` passes.
pub(crate) async fn read_until(
    resp: &mut reqwest::Response,
    needle: &str,
    limit: Duration,
) -> Option<String> {
    let deadline = tokio::time::Instant::now() + limit;
    let mut seen = String::new();
    loop {
        let chunk = tokio::time::timeout_at(deadline, resp.chunk()).await.ok()?;
        let Ok(Some(chunk)) = chunk else {
            return None;
        };
        seen.push_str(&String::from_utf8_lossy(&chunk));
        if let Some(line) = seen
            .lines()
            .find(|l| l.starts_with("data:") && l.contains(needle))
        {
            return Some(line.to_owned());
        }
    }
}

#[tokio::test]
async fn server_messages_reach_the_get_stream_held_by_another_replica_only() {
    let redis = RedisServer::start().await;
    // Each replica runs its own server-everything process for the session.
    let mut per_session = everything_stdio();
    per_session.sharing = StdioSharing::PerSession;
    let cfg = clustered(
        &redis,
        "get",
        vec![tenant(
            "ev",
            vec![upstream(
                "everything",
                UpstreamTransport::Stdio(per_session),
            )],
        )],
    );
    let gws = replicas(&cfg, 2).await;
    let mut alice = RawClient::new(gws[0].url("ev"));
    alice.initialize().await;
    let mut bystander = RawClient::new(gws[0].url("ev"));
    bystander.initialize().await;

    let stream_headers = |c: &RawClient| {
        vec![
            ("accept", "text/event-stream".to_owned()),
            ("mcp-session-id", c.session.clone().unwrap_or_default()),
            ("mcp-protocol-version", c.protocol_version.clone()),
        ]
    };
    let open = |c: &RawClient| {
        let h = stream_headers(c);
        let c2 = on(&gws[0], "ev", c);
        async move {
            let h: Vec<(&str, &str)> = h.iter().map(|(k, v)| (*k, v.as_str())).collect();
            c2.get_stream(&h).await
        }
    };
    let mut alice_stream = open(&alice).await;
    assert_eq!(alice_stream.status(), 200);
    let mut bystander_stream = open(&bystander).await;
    assert_eq!(bystander_stream.status(), 200);

    // Through replica B, Alice turns on the upstream's periodic log messages. They are produced
    // by B's upstream connection and must come out of the GET stream Alice holds on A.
    let alice_b = on(&gws[1], "ev", &alice);
    let r = alice_b
        .request("logging/setLevel", json!({"level": "debug"}))
        .await;
    assert_eq!(r.status, 200, "{r:?}");
    let r = alice_b
        .call_tool("toggle-simulated-logging", json!({}))
        .await;
    assert_eq!(r.status, 200, "{r:?}");
    let line = read_until(
        &mut alice_stream,
        "notifications/message",
        Duration::from_secs(20),
    )
    .await
    .expect("a log message from replica B's upstream on Alice's GET stream on replica A");
    // server-everything words its messages by level ("Debug-level message", "Alert
    // level-message"); what matters is that a log notification with a level arrived.
    let message: Value =
        serde_json::from_str(line.trim_start_matches("data:").trim()).expect("JSON event data");
    assert!(message["params"]["level"].is_string(), "{line}");
    assert!(message["params"]["data"].is_string(), "{line}");

    // The other session on the same replica, same (anonymous) user, got none of it.
    let leaked = read_until(
        &mut bystander_stream,
        "notifications/message",
        Duration::from_secs(1),
    )
    .await;
    assert_eq!(
        leaked, None,
        "another session's stream received Alice's messages"
    );
    let _ = alice_b
        .call_tool("toggle-simulated-logging", json!({}))
        .await;
    drop(alice_stream);
    drop(bystander_stream);
    for gw in gws {
        gw.stop().await;
    }
}

#[tokio::test]
async fn a_stolen_session_id_is_404_on_every_replica_and_logged() {
    let redis = RedisServer::start().await;
    let idp = OidcProvider::start(free_port(), "k").await;
    let peer = HttpPeer::demo(free_port(), &[]).await;
    let dir = TempDir::new("hijack");
    // One canonical resource for the whole cluster: tokens are valid on every replica.
    let resource = "http://mcp.cluster.test/t/acme/mcp";
    let yaml = format!(
        "sessions:\n\
         \x20 store: {{redis: {{url: \"{redis}\", prefix: hj}}}}\n\
         tenants:\n\
         \x20 - name: acme\n\
         \x20   resource: \"{resource}\"\n\
         \x20   auth: {{issuer: \"{issuer}\", clock_skew: 0s, required_scopes: [mcp]}}\n\
         \x20   upstreams:\n\
         \x20     - {{name: remote, http: {{url: \"{upstream}\"}}}}\n\
         \x20 - name: other\n\
         \x20   upstreams:\n\
         \x20     - {{name: remote, http: {{url: \"{upstream}\"}}}}\n",
        redis = redis.url(),
        issuer = idp.issuer,
        upstream = peer.url(),
    );
    std::fs::write(dir.path("migrate.yaml"), &yaml).expect("config");
    let migrated = tokio::process::Command::new(gateway_exe())
        .arg("migrate")
        .arg("--config")
        .arg(dir.path("migrate.yaml"))
        .output()
        .await
        .expect("switchyard migrate runs");
    assert!(migrated.status.success(), "{migrated:?}");
    let a = GatewayProcess::start(&yaml, &dir, "a").await;
    let b = GatewayProcess::start(&yaml, &dir, "b").await;

    let alice_token = idp.token(resource, "mcp").await;
    let mallory_token = idp.token_for_other_client(resource, "mcp").await;
    let mut alice = RawClient::new(a.url("acme"));
    alice.bearer = Some(alice_token.clone());
    alice.initialize().await;
    let stolen = alice.session.clone().expect("session id");

    // Alice herself is served by replica B.
    let mut alice_b = RawClient::new(b.url("acme"));
    alice_b.bearer = Some(alice_token);
    alice_b.session = Some(stolen.clone());
    assert_eq!(alice_b.request("ping", json!({})).await.status, 200);

    // The reference answer: an id nobody was ever given.
    let mut unknown = RawClient::new(b.url("acme"));
    unknown.bearer = Some(mallory_token.clone());
    unknown.session = Some("0".repeat(48));
    let reference = unknown.request("ping", json!({})).await;
    assert_eq!(reference.status, 404);

    // Mallory, with her own valid token, on both replicas; and the id on another tenant.
    let mut attempts = Vec::new();
    for url in [a.url("acme"), b.url("acme")] {
        let mut m = RawClient::new(url);
        m.bearer = Some(mallory_token.clone());
        m.session = Some(stolen.clone());
        attempts.push(m);
    }
    let mut cross = RawClient::new(b.url("other"));
    cross.session = Some(stolen.clone());
    attempts.push(cross);
    for m in &attempts {
        let r = m.request("ping", json!({})).await;
        assert_eq!(r.status, 404, "{r:?}");
        assert_eq!(
            r.body, reference.body,
            "no oracle: same body as an unknown id"
        );
        assert_eq!(m.delete().await.status, 404);
    }
    // Alice's session survived every attempt, and her tool call is audited.
    assert_eq!(alice.request("ping", json!({})).await.status, 200);
    let r = alice.call_tool("echo", json!({"message": "audited"})).await;
    assert_eq!(client::text(r.last()), "audited");
    assert_eq!(alice_b.request("ping", json!({})).await.status, 200);

    let logs = b.stop().await + &a.stop().await;
    let events: Vec<Value> = crate::support::json_lines(&logs)
        .filter(|v| v["target"] == "switchyard::security")
        .collect();
    assert!(
        events.len() >= 3,
        "each stolen-id request is a security event: {events:?}\n{logs}"
    );
    assert!(events.iter().all(|e| e["level"] == "WARN"), "{events:?}");
    let audits: Vec<Value> = crate::support::json_lines(&logs)
        .filter(|v| v["target"] == "switchyard::audit")
        .collect();
    assert_eq!(audits.len(), 1, "one audit event per tool call: {audits:?}");
    let audit = &audits[0];
    assert_eq!(
        (
            &audit["tenant"],
            &audit["tool"],
            &audit["upstream"],
            &audit["outcome"]
        ),
        (
            &json!("acme"),
            &json!("echo"),
            &json!("remote"),
            &json!("ok")
        ),
        "{audit}"
    );
    // The user as the gateway keys it: a pseudonymous digest of issuer + subject.
    let user = audit["user"].as_str().unwrap_or_default();
    assert!(user.starts_with("u-") && user.len() > 10, "{audit}");
    assert!(audit["duration_ms"].is_u64(), "{audit}");
    assert!(
        !logs.contains(&stolen),
        "the full session id never reaches the logs"
    );
    idp.stop().await;
    peer.kill().await;
}

#[tokio::test]
async fn redis_killed_and_restarted_mid_session() {
    let mut redis = RedisServer::start().await;
    let peer = HttpPeer::demo(free_port(), &[]).await;
    let cfg = clustered(
        &redis,
        "crash",
        vec![tenant("t", vec![upstream("remote", http(&peer.url()))])],
    );
    let gws = replicas(&cfg, 2).await;
    let mut c = RawClient::new(gws[0].url("t"));
    c.initialize().await;
    assert_eq!(
        c.call_tool("echo", json!({"message": "before"}))
            .await
            .status,
        200
    );
    let on_b = on(&gws[1], "t", &c);
    let ready = |gw: &TestGateway| {
        let url = format!("http://{}/readyz", gw.addr);
        async move {
            reqwest::get(url)
                .await
                .map(|r| r.status().as_u16())
                .unwrap_or(0)
        }
    };
    assert_eq!(ready(&gws[0]).await, 200);

    redis.kill().await;
    // Replica B has never seen the session: it needs the store, and says so.
    let r = on_b.call_tool("echo", json!({"message": "during"})).await;
    assert_eq!(r.status, 503, "{r:?}");
    assert!(r.header("retry-after").is_some(), "{r:?}");
    assert_eq!(r.error_code(), Some(-32000), "{:?}", r.last());
    let message = r.last()["error"]["message"].as_str().unwrap_or_default();
    assert!(message.contains("session store"), "{message}");
    // New sessions cannot be created either; readiness reports it on both replicas.
    let mut fresh = RawClient::new(gws[1].url("t"));
    let id = fresh.next_id();
    let r = fresh
        .post(
            &json!({"jsonrpc": "2.0", "id": id, "method": "initialize", "params": {
            "protocolVersion": "2025-11-25", "capabilities": {},
            "clientInfo": {"name": "t", "version": "0"}}}),
        )
        .await;
    assert_eq!(r.status, 503, "{r:?}");
    fresh.session = None;
    assert_eq!(ready(&gws[0]).await, 503);
    assert_eq!(ready(&gws[1]).await, 503);
    // Replica A still holds the live session and keeps serving it.
    let r = c.call_tool("echo", json!({"message": "live"})).await;
    assert_eq!(client::text(r.last()), "live");

    redis.restart().await;
    let mut recovered = false;
    for _ in 0..100 {
        if ready(&gws[0]).await == 200 && ready(&gws[1]).await == 200 {
            recovered = true;
            break;
        }
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    assert!(
        recovered,
        "replicas ready again within 10s of Redis coming back"
    );
    // Nothing was lost: replica B now serves the session created before the crash.
    let r = on_b.call_tool("echo", json!({"message": "after"})).await;
    assert_eq!(r.status, 200, "{r:?}");
    assert_eq!(client::text(r.last()), "after");
    fresh.initialize().await;
    assert_eq!(fresh.request("ping", json!({})).await.status, 200);
    for gw in gws {
        gw.stop().await;
    }
    peer.kill().await;
}

#[tokio::test]
async fn keyspace_layout_is_checked_at_startup_and_migrate_is_idempotent() {
    let redis = RedisServer::start().await;
    let dir = TempDir::new("layout");
    let path = dir.path("gw.yaml");
    std::fs::write(
        &path,
        format!(
            "sessions:\n  store: {{redis: {{url: \"{}\", prefix: lay}}}}\n\
             tenants:\n  - name: t\n    upstreams:\n      - {{name: r, http: {{url: \"http://127.0.0.1:9/mcp\"}}}}\n",
            redis.url()
        ),
    )
    .expect("config");
    let cfg = switchyard::config::load(&path).expect("valid config");

    let mut conn = redis.conn().await;
    let layout = |conn: &mut redis::aio::MultiplexedConnection| {
        let mut conn = conn.clone();
        async move {
            let v: Option<u32> = redis::cmd("GET")
                .arg("lay:meta:layout")
                .query_async(&mut conn)
                .await
                .expect("GET");
            v
        }
    };
    let flush = |conn: &mut redis::aio::MultiplexedConnection| {
        let mut conn = conn.clone();
        async move {
            let _: () = redis::cmd("FLUSHALL")
                .query_async(&mut conn)
                .await
                .expect("FLUSHALL");
        }
    };

    // An empty keyspace (a new Redis, or a failover to a node without data): the gateway
    // records the layout itself and starts.
    let gw = switchyard::app::build(&cfg)
        .await
        .expect("starts on an empty keyspace");
    gw.shutdown().await;
    assert_eq!(layout(&mut conn).await, Some(1));

    // Keys of this layout but no record (the record alone was lost): restored, starts.
    flush(&mut conn).await;
    let _: () = redis::cmd("SET")
        .arg("lay:v1:sess:{t:u:s}")
        .arg("{}")
        .query_async(&mut conn)
        .await
        .expect("SET");
    let gw = switchyard::app::build(&cfg)
        .await
        .expect("starts when only the record is missing");
    gw.shutdown().await;
    assert_eq!(layout(&mut conn).await, Some(1));

    // Keys of another layout without a record: the gateway refuses and names the command.
    flush(&mut conn).await;
    let _: () = redis::cmd("SET")
        .arg("lay:v0:something")
        .arg("x")
        .query_async(&mut conn)
        .await
        .expect("SET");
    let err = switchyard::app::build(&cfg).await.err().expect("refused");
    assert!(err.contains("switchyard migrate"), "{err}");
    assert_eq!(layout(&mut conn).await, None, "nothing was recorded");

    let migrate = || async {
        let out = tokio::process::Command::new(gateway_exe())
            .args(["migrate", "--config"])
            .arg(&path)
            .output()
            .await
            .expect("switchyard migrate runs");
        assert!(out.status.success(), "{out:?}");
        String::from_utf8_lossy(&out.stdout).into_owned()
    };
    let first = migrate().await;
    assert!(
        first.contains("migrated to layout 1 (applied: 1)"),
        "{first}"
    );
    let second = migrate().await;
    assert!(second.contains("already at layout 1"), "{second}");
    let applied: Vec<(String, String)> = redis::cmd("HGETALL")
        .arg("lay:meta:migrations")
        .query_async(&mut conn)
        .await
        .expect("HGETALL");
    assert_eq!(applied.len(), 1, "{applied:?}");
    assert_eq!(applied[0].0, "1");
    let gw = switchyard::app::build(&cfg)
        .await
        .expect("starts once migrated");
    gw.shutdown().await;

    // A layout from a newer gateway: refuse to start, and refuse to migrate it.
    let _: () = redis::cmd("SET")
        .arg("lay:meta:layout")
        .arg(7)
        .query_async(&mut conn)
        .await
        .expect("SET");
    let err = switchyard::app::build(&cfg).await.err().expect("refused");
    assert!(err.contains("layout 7, newer than"), "{err}");
    let out = tokio::process::Command::new(gateway_exe())
        .args(["migrate", "--config"])
        .arg(&path)
        .output()
        .await
        .expect("switchyard migrate runs");
    assert!(!out.status.success());
    assert!(
        String::from_utf8_lossy(&out.stderr).contains("newer than this build"),
        "{out:?}"
    );
}

/// Every replica signs with the same tenant key (derived from the secret the first replica
/// stored in Redis): a list cursor one replica gave out pages on at another.
#[tokio::test]
async fn a_list_cursor_from_one_replica_pages_on_at_another() {
    let redis = RedisServer::start().await;
    let cfg = clustered(
        &redis,
        "cur",
        vec![tenant(
            "cur",
            vec![crate::catalog::catalog_server(
                "cat",
                &["--tools", "5", "--page-size", "2"],
            )],
        )],
    );
    let gws = replicas(&cfg, 2).await;
    let mut a = RawClient::new(gws[0].url("cur"));
    a.initialize().await;
    let b = on(&gws[1], "cur", &a);
    let first = a.request("tools/list", json!({})).await;
    let cursor = first.last()["result"]["nextCursor"].clone();
    assert!(cursor.is_string(), "{:?}", first.last());
    let next = b.request("tools/list", json!({"cursor": cursor})).await;
    let tools = next.last()["result"]["tools"]
        .as_array()
        .unwrap_or_else(|| panic!("{:?}", next.last()))
        .clone();
    assert_eq!(tools.len(), 2, "{tools:?}");
    assert_eq!(tools[0]["name"], "t2", "{tools:?}");
    // The secret is one, stored once.
    let mut conn = redis.conn().await;
    let secret: Option<String> = redis::cmd("GET")
        .arg("cur:v1:signing-secret")
        .query_async(&mut conn)
        .await
        .expect("GET");
    assert_eq!(secret.map(|s| s.len()), Some(64));
    for gw in gws {
        gw.stop().await;
    }
}
