//! Gateway replicas on a real Redis Cluster (three primaries with a replica each, started by
//! the test): `switchyard check` and `migrate` against it and the startup layout check scanning
//! every primary, sessions spread over the primaries and continued on another replica, a GET
//! stream resumed on another replica from the cluster, server messages crossing to the replica
//! holding the GET stream over sharded pub/sub, and a primary killed under traffic.

use std::time::{Duration, Instant};

use serde_json::json;
use switchyard::config::{
    Config, EventDurability, RedisConfig, RedisTarget, Secret, StdioSharing, StoreConfig,
    TenantConfig, UpstreamTransport,
};

use crate::cluster::{read_until, replicas};
use crate::support::TempDir;
use crate::support::client::{self, RawClient};
use crate::support::config::{config, demo_stdio, gateway_exe, http, tenant, upstream};
use crate::support::gateway::TestGateway;
use crate::support::limits::assert_refused_before_session;
use crate::support::peers::{HttpPeer, everything_stdio, free_port};
use crate::support::redis_cluster::RedisCluster;

/// A config whose sessions live on the test's cluster under `prefix`.
fn on_cluster(
    cluster: &RedisCluster,
    prefix: &str,
    timeout: Duration,
    tenants: Vec<TenantConfig>,
) -> Config {
    let mut c = config(tenants);
    c.sessions.store = StoreConfig::Redis(RedisConfig {
        target: RedisTarget::Cluster(cluster.seeds().into_iter().map(Secret::new).collect()),
        prefix: prefix.into(),
        timeout,
        events: EventDurability::Durable,
    });
    c
}

/// A raw client on `url` continuing `from`'s session.
fn continuing(url: String, from: &RawClient) -> RawClient {
    let mut c = RawClient::new(url);
    c.session = from.session.clone();
    c.protocol_version = from.protocol_version.clone();
    c
}

async fn switchyard(args: &[&str], path: &std::path::Path) -> std::process::Output {
    tokio::time::timeout(
        Duration::from_secs(30),
        tokio::process::Command::new(gateway_exe())
            .args(args)
            .arg(path)
            .output(),
    )
    .await
    .expect("switchyard finished within 30s")
    .expect("switchyard runs")
}

#[tokio::test]
async fn check_migrate_and_sessions_spread_over_the_primaries_across_replicas() {
    let cluster = RedisCluster::start().await;
    let peer = HttpPeer::demo(free_port(), &[]).await;
    let dir = TempDir::new("cluster-cfg");
    let path = dir.path("gw.yaml");
    // The seeds name one node only: the others are discovered.
    std::fs::write(
        &path,
        format!(
            "sessions:\n  store: {{redis: {{cluster: [\"{}\"], prefix: spread}}}}\n\
             tenants:\n  - name: t\n    limits: {{sessions_per_user: 30}}\n    upstreams:\n      - {{name: r, http: {{url: \"{url}\"}}}}\n\
             \x20 - name: tight\n    limits: {{requests_per_user: {{rate: 1/h, burst: 6}}}}\n    upstreams:\n      - {{name: r, http: {{url: \"{url}\"}}}}\n",
            cluster.seeds()[0],
            url = peer.url()
        ),
    )
    .expect("config");
    let out = switchyard(&["check", "--config"], &path).await;
    assert!(out.status.success(), "{out:?}");
    assert!(
        String::from_utf8_lossy(&out.stdout).contains("ok (2 tenant(s)"),
        "{out:?}"
    );
    let cfg = switchyard::config::load(&path).expect("valid config");

    // Startup on a keyspace without a layout record looks at every primary: a key of another
    // layout anywhere makes it refuse.
    let mut conn = cluster.conn().await;
    for i in 0..6 {
        let _: () = redis::cmd("SET")
            .arg(format!("spread:v0:old-{i}"))
            .arg("x")
            .query_async(&mut conn)
            .await
            .expect("SET");
    }
    let holding: Vec<u16> = {
        let mut v = Vec::new();
        for port in cluster.primaries().await {
            if !cluster.keys_on(port, "spread:v0:*").await.is_empty() {
                v.push(port);
            }
        }
        v
    };
    assert!(holding.len() > 1, "old keys on {holding:?}");
    let err = switchyard::app::build(&cfg).await.err().expect("refused");
    assert!(err.contains("switchyard migrate"), "{err}");
    for i in 0..6 {
        let _: () = redis::cmd("DEL")
            .arg(format!("spread:v0:old-{i}"))
            .query_async(&mut conn)
            .await
            .expect("DEL");
    }

    let out = switchyard(&["migrate", "--config"], &path).await;
    assert!(out.status.success(), "{out:?}");
    let first = String::from_utf8_lossy(&out.stdout).into_owned();
    assert!(
        first.contains("migrated to layout 1 (applied: 1)"),
        "{first}"
    );
    let out = switchyard(&["migrate", "--config"], &path).await;
    let second = String::from_utf8_lossy(&out.stdout).into_owned();
    assert!(second.contains("already at layout 1"), "{second}");
    // The layout records share a hash tag (one slot), so the migration script could run.
    let layout: Option<u32> = redis::cmd("GET")
        .arg("spread:meta:{spread}:layout")
        .query_async(&mut conn)
        .await
        .expect("GET");
    assert_eq!(layout, Some(1));

    // The session store's contract (create, load, update, touch, delete, the owner index on
    // another slot than the record) holds on the cluster as on one primary.
    let suite = on_cluster(&cluster, "suite", Duration::from_secs(2), Vec::new());
    let StoreConfig::Redis(suite) = &suite.sessions.store else {
        unreachable!("on_cluster configures Redis")
    };
    let redis = switchyard::cluster::Redis::connect(suite)
        .await
        .expect("connect to the cluster");
    assert!(redis.is_cluster());
    redis.migrate().await.expect("migrate");
    crate::session_store::contract(
        &switchyard::session::SessionBackend::Redis(switchyard::cluster::RedisSessionStore::new(
            redis,
        )),
        "redis cluster",
    )
    .await;

    let a = TestGateway::start(cfg.clone()).await;
    let b = TestGateway::start(cfg).await;
    let mut sessions = Vec::new();
    for i in 0..30 {
        let mut c = RawClient::new(a.url("t"));
        c.initialize().await;
        let on_b = continuing(b.url("t"), &c);
        let r = on_b
            .call_tool("echo", json!({"message": format!("m{i}")}))
            .await;
        assert_eq!(r.status, 200, "{r:?}");
        assert_eq!(client::text(r.last()), format!("m{i}"));
        sessions.push(c);
    }
    let mut per_primary = Vec::new();
    for port in cluster.primaries().await {
        per_primary.push(cluster.keys_on(port, "spread:v1:sess:*").await.len());
    }
    assert_eq!(per_primary.iter().sum::<usize>(), 30, "{per_primary:?}");
    assert!(
        per_primary.iter().filter(|n| **n > 0).count() > 1,
        "session records on more than one primary: {per_primary:?}"
    );
    // The limits are counted on the cluster (each tenant's keys on one slot), for both
    // replicas together: a 31st session of the same user is refused on B, and a tenant's
    // request bucket runs dry across A and B.
    let extra = RawClient::new(b.url("t"));
    let id = extra.next_id();
    let refused = extra
        .post(
            &json!({"jsonrpc": "2.0", "id": id, "method": "initialize", "params": {
            "protocolVersion": "2025-11-25", "capabilities": {},
            "clientInfo": {"name": "t", "version": "0"}}}),
        )
        .await;
    assert_refused_before_session(&refused, "sessions_per_user", 3600);
    let mut tight = RawClient::new(a.url("tight"));
    tight.initialize().await;
    let mut refused_at = None;
    for n in 0..10 {
        let gw = if n % 2 == 0 { &b } else { &a };
        let r = continuing(gw.url("tight"), &tight)
            .request("ping", json!({}))
            .await;
        if r.status == 429 || r.error_code() == Some(-32029) {
            refused_at = Some(n);
            break;
        }
        assert_eq!(r.status, 200, "{r:?}");
    }
    assert!(refused_at.is_some(), "the bucket of 6 never ran dry");

    // Ending a session on B ends it on A too, as soon as A gets the broadcast.
    let ended = continuing(b.url("t"), &sessions[0]);
    assert_eq!(ended.delete().await.status, 200);
    let r = sessions[0].ping_until_ended().await;
    assert_eq!(r.status, 404, "the session ended on A within 1s: {r:?}");
    for gw in [&a, &b] {
        let ready = reqwest::get(format!("http://{}/readyz", gw.addr))
            .await
            .expect("readyz");
        assert_eq!(ready.status(), 200);
    }
    a.stop().await;
    b.stop().await;
    peer.kill().await;
}

#[tokio::test]
async fn get_streams_resume_and_server_messages_cross_replicas_on_the_cluster() {
    let cluster = RedisCluster::start().await;
    let mut per_session = everything_stdio();
    per_session.sharing = StdioSharing::PerSession;
    let cfg = on_cluster(
        &cluster,
        "cross",
        Duration::from_millis(1000),
        vec![
            tenant(
                "r",
                vec![upstream("demo", UpstreamTransport::Stdio(demo_stdio(None)))],
            ),
            tenant(
                "ev",
                vec![upstream(
                    "everything",
                    UpstreamTransport::Stdio(per_session),
                )],
            ),
        ],
    );
    let gws = replicas(&cfg, 2).await;

    // 1,000 progress notifications cut at random and resumed on the other replica from the
    // cluster's copy of the stream, exactly once and in order.
    let mut c = RawClient::new(gws[0].url("r"));
    c.initialize().await;
    let seen = crate::resume::cut_and_resume(&c, &[gws[1].url("r"), gws[0].url("r")], 21).await;
    assert!(seen.connections > 3, "{} connections", seen.connections);

    // A log message produced by replica B's upstream reaches Alice's GET stream on replica A
    // (over the sharded channel of replica A).
    let mut alice = RawClient::new(gws[0].url("ev"));
    alice.initialize().await;
    let headers = [
        ("accept", "text/event-stream".to_owned()),
        ("mcp-session-id", alice.session.clone().unwrap_or_default()),
        ("mcp-protocol-version", alice.protocol_version.clone()),
    ];
    let headers: Vec<(&str, &str)> = headers.iter().map(|(k, v)| (*k, v.as_str())).collect();
    let mut stream = alice.get_stream(&headers).await;
    assert_eq!(stream.status(), 200);
    let alice_b = continuing(gws[1].url("ev"), &alice);
    let r = alice_b
        .request("logging/setLevel", json!({"level": "debug"}))
        .await;
    assert_eq!(r.status, 200, "{r:?}");
    let r = alice_b
        .call_tool("toggle-simulated-logging", json!({}))
        .await;
    assert_eq!(r.status, 200, "{r:?}");
    let line = read_until(
        &mut stream,
        "notifications/message",
        Duration::from_secs(20),
    )
    .await
    .expect("a log message from replica B's upstream on the GET stream on replica A");
    assert!(line.contains("\"level\""), "{line}");
    let _ = alice_b
        .call_tool("toggle-simulated-logging", json!({}))
        .await;
    drop(stream);
    for gw in gws {
        gw.stop().await;
    }
}

/// The handshake, which may be refused (503) while the store is unavailable.
async fn try_initialize(c: &mut RawClient) -> client::Reply {
    let id = c.next_id();
    let reply = c
        .post(
            &json!({"jsonrpc": "2.0", "id": id, "method": "initialize", "params": {
            "protocolVersion": c.protocol_version, "capabilities": {},
            "clientInfo": {"name": "failover", "version": "0"}}}),
        )
        .await;
    if reply.status == 200 {
        c.session = reply.header("mcp-session-id").map(str::to_owned);
        let notified = c
            .post(&json!({"jsonrpc": "2.0", "method": "notifications/initialized"}))
            .await;
        assert_eq!(notified.status, 202, "{notified:?}");
    }
    reply
}

/// How a call during the failover ended.
#[derive(Debug)]
enum Outcome {
    Ok,
    /// 503 with `Retry-After`.
    Unavailable,
}

#[tokio::test]
async fn a_primary_killed_under_traffic_fails_over_without_restarting_the_gateway() {
    let mut cluster = RedisCluster::start().await;
    let peer = HttpPeer::demo(free_port(), &[]).await;
    let timeout = Duration::from_millis(1000);
    let cfg = on_cluster(
        &cluster,
        "fo",
        timeout,
        vec![tenant("t", vec![upstream("remote", http(&peer.url()))])],
    );
    let gws = replicas(&cfg, 2).await;
    // The primary to kill: the one serving the broadcast channel (the bus must follow it to
    // the promoted replica), once it holds session records and is in sync with its replica.
    let victim = cluster.owner_of("fo:v1:broadcast").await;
    let mut sessions = Vec::new();
    let mut victim_keys = Vec::new();
    for _ in 0..60 {
        let mut c = RawClient::new(gws[0].url("t"));
        c.initialize().await;
        sessions.push(c);
        if sessions.len() >= 12 {
            victim_keys = cluster.keys_on(victim, "fo:v1:sess:*").await;
            if victim_keys.len() >= 2 {
                break;
            }
        }
    }
    cluster.wait_healthy(Duration::from_secs(20)).await;
    let on_victim: Vec<usize> = sessions
        .iter()
        .enumerate()
        .filter(|(_, c)| {
            let id = c.session.clone().unwrap_or_default();
            victim_keys.iter().any(|k| k.contains(&id))
        })
        .map(|(i, _)| i)
        .collect();
    assert!(on_victim.len() >= 2, "{victim_keys:?}");

    // Traffic: every session in turn, alternately on each replica, each call bounded.
    let bound = timeout * 4 + Duration::from_secs(2);
    let call = |i: usize, round: usize| {
        let c = continuing(gws[round % 2].url("t"), &sessions[i]);
        async move {
            let started = Instant::now();
            let r = tokio::time::timeout(
                bound,
                c.call_tool("echo", json!({"message": format!("r{round}")})),
            )
            .await
            .unwrap_or_else(|_| panic!("a call hung beyond {bound:?} (round {round})"));
            let outcome = match r.status {
                200 => {
                    assert_eq!(client::text(r.last()), format!("r{round}"), "{r:?}");
                    Outcome::Ok
                }
                503 => {
                    assert!(r.header("retry-after").is_some(), "{r:?}");
                    Outcome::Unavailable
                }
                other => panic!("unexpected status {other} during the failover: {r:?}"),
            };
            (outcome, started.elapsed())
        }
    };
    let ready = |gw: &TestGateway| {
        let url = format!("http://{}/readyz", gw.addr);
        async move {
            reqwest::get(url)
                .await
                .map(|r| r.status().as_u16())
                .unwrap_or(0)
        }
    };
    let mut outcomes = Vec::new();
    let mut created: Vec<RawClient> = Vec::new();
    let mut initialized_while_down = 0;
    let mut round = 0;
    let kill_at = Instant::now() + Duration::from_millis(500);
    let mut killed_at = None;
    loop {
        if killed_at.is_none() && Instant::now() >= kill_at {
            cluster.kill(victim).await;
            killed_at = Some(Instant::now());
            // Readiness pings every primary: it reports the lost one before the promotion.
            let mut seen_unready = false;
            for _ in 0..40 {
                if ready(&gws[0]).await == 503 {
                    seen_unready = true;
                    break;
                }
                tokio::time::sleep(Duration::from_millis(25)).await;
            }
            assert!(seen_unready, "/readyz stayed 200 with a primary down");
        }
        for i in 0..sessions.len() {
            outcomes.push(call(i, round).await);
        }
        // A new session needs the store (its record goes to its id's slot): some land on the
        // killed primary's slots while it is down.
        let mut fresh = RawClient::new(gws[round % 2].url("t"));
        let started = Instant::now();
        let reply = tokio::time::timeout(bound, try_initialize(&mut fresh))
            .await
            .unwrap_or_else(|_| panic!("an initialize hung beyond {bound:?}"));
        let outcome = match reply.status {
            200 => {
                created.push(fresh);
                Outcome::Ok
            }
            503 => {
                assert!(reply.header("retry-after").is_some(), "{reply:?}");
                Outcome::Unavailable
            }
            other => panic!("unexpected status {other} for initialize: {reply:?}"),
        };
        if killed_at.is_some() {
            initialized_while_down += 1;
        }
        outcomes.push((outcome, started.elapsed()));
        round += 1;
        if killed_at.is_some_and(|t| t.elapsed() > Duration::from_secs(4)) {
            break;
        }
        assert!(round < 10_000);
    }
    cluster.wait_promoted(Duration::from_secs(20)).await;
    assert!(!cluster.primaries().await.contains(&victim));
    assert!(initialized_while_down > 3, "{initialized_while_down}");

    // After the promotion every session works on both replicas, those whose records lived on
    // the killed primary included, within a few seconds and without restarting anything.
    let deadline = Instant::now() + Duration::from_secs(15);
    loop {
        let mut all_ok = true;
        for i in 0..sessions.len() {
            for r in 0..2 {
                let (outcome, took) = call(i, round + r).await;
                all_ok &= matches!(outcome, Outcome::Ok);
                outcomes.push((outcome, took));
            }
        }
        round += 2;
        if all_ok {
            break;
        }
        assert!(
            Instant::now() < deadline,
            "calls did not all succeed within 15s of the promotion"
        );
        tokio::time::sleep(Duration::from_millis(200)).await;
    }
    let unavailable = outcomes
        .iter()
        .filter(|(o, _)| matches!(o, Outcome::Unavailable))
        .count();
    let slowest = outcomes.iter().map(|(_, t)| *t).max().unwrap_or_default();
    #[allow(clippy::print_stderr)] // the failover's figures, in the test's output
    {
        eprintln!(
            "failover: {} calls, {unavailable} answered 503, slowest {slowest:?}, {} sessions on the killed primary, {} created during the failover",
            outcomes.len(),
            on_victim.len(),
            created.len()
        );
    }
    // The sessions created during the failover work on the other replica.
    for (n, c) in created.iter().enumerate() {
        let other = continuing(gws[(n + 1) % 2].url("t"), c);
        let r = other.call_tool("echo", json!({"message": "later"})).await;
        assert_eq!(r.status, 200, "{r:?}");
    }
    // New sessions too, and readiness is back on both replicas.
    let mut fresh = RawClient::new(gws[1].url("t"));
    fresh.initialize().await;
    assert_eq!(fresh.request("ping", json!({})).await.status, 200);
    for gw in &gws {
        assert_eq!(ready(gw).await, 200);
    }
    // The promoted replica holds the records of the sessions that lived on the killed primary.
    let promoted = cluster.primaries().await;
    let mut found = 0;
    for port in promoted {
        let keys = cluster.keys_on(port, "fo:v1:sess:*").await;
        found += on_victim
            .iter()
            .filter(|i| {
                let id = sessions[**i].session.clone().unwrap_or_default();
                keys.iter().any(|k| k.contains(&id))
            })
            .count();
    }
    assert_eq!(found, on_victim.len());

    // The bus followed the broadcast channel to the promoted replica: a session ended on B
    // closes its GET stream held on A.
    let ending = &sessions[on_victim[0]];
    let headers = [
        ("accept", "text/event-stream".to_owned()),
        ("mcp-session-id", ending.session.clone().unwrap_or_default()),
        ("mcp-protocol-version", ending.protocol_version.clone()),
    ];
    let headers: Vec<(&str, &str)> = headers.iter().map(|(k, v)| (*k, v.as_str())).collect();
    let mut stream = continuing(gws[0].url("t"), ending)
        .get_stream(&headers)
        .await;
    assert_eq!(stream.status(), 200);
    assert_eq!(
        continuing(gws[1].url("t"), ending).delete().await.status,
        200
    );
    let closed = tokio::time::timeout(Duration::from_secs(10), async {
        while let Ok(Some(_)) = stream.chunk().await {}
    })
    .await;
    assert!(
        closed.is_ok(),
        "the GET stream on A was not closed within 10s of the session's end on B"
    );

    for gw in gws {
        gw.stop().await;
    }
    peer.kill().await;
}
