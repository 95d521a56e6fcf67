//! Gateways (real `switchyard run` processes) whose sessions live in a real Redis Sentinel
//! deployment (`support/sentinel.rs`: a primary, two replicas, three sentinels): `check` and
//! `migrate` through the sentinels, two replicas sharing a session, a failover under traffic
//! (primary killed) that the gateways follow without a restart, and a planned failover
//! (`SENTINEL FAILOVER`: the old primary stays up as a replica).

use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::{Duration, Instant};

use serde_json::json;

use crate::support::TempDir;
use crate::support::client::{self, RawClient};
use crate::support::config::{demo_server_exe, gateway_exe};
use crate::support::peers::free_port;
use crate::support::process::GatewayProcess;
use crate::support::sentinel::{MASTER, SentinelSetup, query};

/// A gateway config whose store is the setup's Sentinel deployment (keyspace `prefix`,
/// operations bounded by 500 ms), with the demo server over stdio as the one upstream.
fn sentinel_config(nodes_yaml: &str, prefix: &str) -> String {
    format!(
        "sessions:\n\
         \x20 store:\n\
         \x20   redis:\n\
         \x20     sentinel: {{master: {MASTER}, nodes: {nodes_yaml}}}\n\
         \x20     prefix: {prefix}\n\
         \x20     timeout: 500ms\n\
         tenants:\n\
         \x20 - name: t\n\
         \x20   upstreams:\n\
         \x20     - {{name: demo, stdio: {{command: \"{demo}\", args: [\"--stdio\"]}}}}\n",
        demo = demo_server_exe().display()
    )
}

/// Runs `switchyard <command> --config <path>`; (success, stdout, stderr).
async fn cli(command: &str, path: &std::path::Path) -> (bool, String, String) {
    let out = tokio::time::timeout(
        Duration::from_secs(30),
        tokio::process::Command::new(gateway_exe())
            .arg(command)
            .arg("--config")
            .arg(path)
            .output(),
    )
    .await
    .expect("the CLI ends within 30s")
    .expect("the CLI runs");
    (
        out.status.success(),
        String::from_utf8_lossy(&out.stdout).into_owned(),
        String::from_utf8_lossy(&out.stderr).into_owned(),
    )
}

async fn status_of(url: &str) -> Option<u16> {
    let client = reqwest::Client::builder()
        .timeout(Duration::from_secs(5))
        .build()
        .ok()?;
    Some(client.get(url).send().await.ok()?.status().as_u16())
}

fn echo_text(reply: &client::Reply) -> String {
    client::text(reply.last())
}

#[tokio::test]
async fn check_migrate_and_two_gateways_sharing_a_session_through_sentinel() {
    let setup = SentinelSetup::start().await;
    let dir = TempDir::new("sentinel-share");
    let yaml = sentinel_config(&setup.nodes_yaml(), "sh");
    let path = dir.path("gw.yaml");
    std::fs::write(&path, format!("listen: 127.0.0.1:{}\n{yaml}", free_port())).expect("config");

    let (ok, stdout, stderr) = cli("check", &path).await;
    assert!(ok && stdout.contains(": ok ("), "{stdout}{stderr}");
    let (ok, stdout, stderr) = cli("migrate", &path).await;
    assert!(ok, "{stdout}{stderr}");
    assert!(
        stdout.contains("keyspace `sh` migrated to layout 1"),
        "{stdout}{stderr}"
    );
    let (ok, stdout, stderr) = cli("migrate", &path).await;
    assert!(
        ok && stdout.contains("keyspace `sh` already at layout 1"),
        "{stdout}{stderr}"
    );
    // The layout record is on the primary the sentinels name.
    let primary = setup.primary_port().await.expect("a primary");
    let layout: Option<Vec<String>> = query(primary, redis::cmd("KEYS").arg("sh:meta:*")).await;
    assert!(
        layout.is_some_and(|k| !k.is_empty()),
        "no layout record on the primary"
    );

    // Sentinels nobody runs: migrate fails in bounded time, saying so without the password.
    let dead = dir.path("dead.yaml");
    let dead_nodes = format!("[\"redis://:hunter2@127.0.0.1:{}\"]", free_port());
    std::fs::write(&dead, sentinel_config(&dead_nodes, "sh")).expect("config");
    let started = Instant::now();
    let (ok, stdout, stderr) = cli("migrate", &dead).await;
    assert!(!ok, "{stdout}{stderr}");
    assert!(started.elapsed() < Duration::from_secs(10));
    assert!(
        stderr.contains("no sentinel named the primary of `sy-main`"),
        "{stderr}"
    );
    assert!(!stderr.contains("hunter2") && !stdout.contains("hunter2"));

    let admin_port = free_port();
    let a = GatewayProcess::start(
        &format!("admin_listen: 127.0.0.1:{admin_port}\n{yaml}"),
        &dir,
        "a",
    )
    .await;
    let b = GatewayProcess::start(&yaml, &dir, "b").await;
    let mut on_a = RawClient::new(a.url("t"));
    on_a.initialize().await;
    let r = on_a.call_tool("echo", json!({"message": "via a"})).await;
    assert_eq!((r.status, echo_text(&r).as_str()), (200, "via a"), "{r:?}");
    let mut on_b = RawClient::new(b.url("t"));
    on_b.session = on_a.session.clone();
    on_b.protocol_version = on_a.protocol_version.clone();
    let r = on_b.call_tool("echo", json!({"message": "via b"})).await;
    assert_eq!((r.status, echo_text(&r).as_str()), (200, "via b"), "{r:?}");
    let keys: Option<Vec<String>> = query(primary, redis::cmd("KEYS").arg("sh:v1:sess:*")).await;
    assert!(
        keys.is_some_and(|k| !k.is_empty()),
        "the session record is on the primary"
    );
    for gw in [&a, &b] {
        let base = format!("http://127.0.0.1:{}", gw.port);
        assert_eq!(status_of(&format!("{base}/readyz")).await, Some(200));
    }
    // The Redis operations through Sentinel are measured like any others.
    let metrics = reqwest::get(format!("http://127.0.0.1:{admin_port}/metrics"))
        .await
        .expect("metrics")
        .text()
        .await
        .unwrap_or_default();
    assert!(
        metrics.contains("switchyard_redis_operation_duration_seconds_count{op=\"ping\"}"),
        "{metrics}"
    );
    // DELETE on B ends the session on A too.
    assert_eq!(on_b.delete().await.status, 200);
    let r = on_a.ping_until_ended().await;
    assert_eq!(r.status, 404, "the session ended on A within 1s: {r:?}");
    for gw in [a, b] {
        let logs = gw.stop().await;
        assert!(!logs.contains("panicked"), "{logs}");
    }
}

/// What one call in the traffic loop saw.
#[derive(Debug)]
struct Outcome {
    /// `initialize` (needs Redis: the new record is written) or `tools/call` on the session.
    method: &'static str,
    status: u16,
    retry_after: bool,
    took: Duration,
    /// Sent after the sentinels named the new primary.
    after_switch: bool,
}

#[tokio::test]
#[allow(clippy::print_stderr)] // the failover's figures, for whoever reads the test output
async fn a_failover_under_traffic_is_followed_without_restarting_the_gateway() {
    let mut setup = SentinelSetup::start().await;
    let dir = TempDir::new("sentinel-failover");
    let yaml = sentinel_config(&setup.nodes_yaml(), "fo");
    // No `migrate`: the first gateway sets the empty keyspace up itself.
    let a = GatewayProcess::start(&yaml, &dir, "a").await;
    let b = GatewayProcess::start(&yaml, &dir, "b").await;
    let mut on_a = RawClient::new(a.url("t"));
    on_a.initialize().await;
    let r = on_a.call_tool("echo", json!({"message": "before"})).await;
    assert_eq!((r.status, echo_text(&r).as_str()), (200, "before"), "{r:?}");

    // The session record must be on the replicas before the crash: a write of our own, then
    // `WAIT 2` on it — replication is one ordered stream, so both replicas acknowledging our
    // write means they have every earlier write, the gateway's included.
    let old = setup.primary_port().await.expect("a primary");
    let acked: Option<i64> = {
        let client = redis::Client::open(format!("redis://127.0.0.1:{old}")).expect("url");
        let mut conn = client
            .get_multiplexed_async_connection()
            .await
            .expect("connect to the primary");
        let _: () = redis::cmd("SET")
            .arg("fo-barrier")
            .arg(1)
            .query_async(&mut conn)
            .await
            .expect("SET");
        redis::cmd("WAIT")
            .arg(2)
            .arg(5000)
            .query_async(&mut conn)
            .await
            .ok()
    };
    assert_eq!(acked, Some(2), "both replicas acknowledged the writes");

    // Traffic through A, one request after another until told to stop, alternating a
    // tools/call on the session (live on A: needs no Redis) and a new session's `initialize`
    // (its record is written to the primary, so it fails while there is none).
    let switched = Arc::new(AtomicBool::new(false));
    let stop = Arc::new(AtomicBool::new(false));
    let traffic = {
        let (switched, stop) = (switched.clone(), stop.clone());
        let mut client = RawClient::new(a.url("t"));
        client.session = on_a.session.clone();
        client.protocol_version = on_a.protocol_version.clone();
        let url = a.url("t");
        tokio::spawn(async move {
            let mut outcomes = Vec::new();
            let mut n = 0;
            while !stop.load(Ordering::Relaxed) {
                n += 1;
                let after_switch = switched.load(Ordering::Relaxed);
                let started = Instant::now();
                let (method, call) = if n % 2 == 0 {
                    let fresh = RawClient::new(url.clone());
                    let body = json!({
                        "jsonrpc": "2.0", "id": 1, "method": "initialize",
                        "params": {
                            "protocolVersion": "2025-11-25",
                            "capabilities": {},
                            "clientInfo": {"name": "failover-traffic", "version": "0"}
                        }
                    });
                    let call: std::pin::Pin<
                        Box<dyn std::future::Future<Output = client::Reply> + Send>,
                    > = Box::pin(async move { fresh.post(&body).await });
                    ("initialize", call)
                } else {
                    let message = format!("call {n}");
                    let client = &client;
                    let call: std::pin::Pin<
                        Box<dyn std::future::Future<Output = client::Reply> + Send>,
                    > = Box::pin(async move {
                        client.call_tool("echo", json!({"message": message})).await
                    });
                    ("tools/call", call)
                };
                let Ok(r) = tokio::time::timeout(Duration::from_secs(10), call).await else {
                    panic!("{method} {n} hung for 10s");
                };
                if r.status == 200 && method == "tools/call" {
                    assert_eq!(echo_text(&r), format!("call {n}"), "{r:?}");
                }
                outcomes.push(Outcome {
                    method,
                    status: r.status,
                    retry_after: r.header("retry-after").is_some(),
                    took: started.elapsed(),
                    after_switch,
                });
                tokio::time::sleep(Duration::from_millis(20)).await;
            }
            outcomes
        })
    };
    tokio::time::sleep(Duration::from_millis(300)).await;
    let killed_at = Instant::now();
    setup.kill_data(old).await;
    let new = setup
        .await_new_primary(old, Duration::from_secs(30))
        .await
        .expect("the sentinels promoted a replica within 30s");
    switched.store(true, Ordering::Relaxed);
    let promoted_after = killed_at.elapsed();

    // The session opened before the crash, first used on B now: B loads its record from the
    // new primary (B never held it). Retried for a bounded time while B finds the primary;
    // every refusal on the way is a 503 with Retry-After.
    let mut on_b = RawClient::new(b.url("t"));
    on_b.session = on_a.session.clone();
    on_b.protocol_version = on_a.protocol_version.clone();
    let started = Instant::now();
    let mut refusals = 0;
    let followed_after = loop {
        let r = on_b.call_tool("echo", json!({"message": "on b"})).await;
        if r.status == 200 {
            assert_eq!(echo_text(&r), "on b");
            break started.elapsed();
        }
        assert_eq!(r.status, 503, "{r:?}");
        assert!(r.header("retry-after").is_some(), "{r:?}");
        refusals += 1;
        assert!(
            started.elapsed() < Duration::from_secs(15),
            "B did not serve the session within 15s of the promotion"
        );
        tokio::time::sleep(Duration::from_millis(100)).await;
    };
    // Both gateways answer ready again: `/readyz` pings the primary they now use.
    for gw in [&a, &b] {
        let url = format!("http://127.0.0.1:{}/readyz", gw.port);
        let mut ready = status_of(&url).await;
        while ready != Some(200) && started.elapsed() < Duration::from_secs(15) {
            tokio::time::sleep(Duration::from_millis(100)).await;
            ready = status_of(&url).await;
        }
        assert_eq!(ready, Some(200), "a gateway did not follow within 15s");
    }
    let all_ready_after = started.elapsed();
    // New sessions are written to the new primary, by both gateways.
    let mut fresh_a = RawClient::new(a.url("t"));
    fresh_a.initialize().await;
    let mut fresh_b = RawClient::new(b.url("t"));
    fresh_b.initialize().await;
    let keys: Option<Vec<String>> = query(new, redis::cmd("KEYS").arg("fo:v1:sess:*")).await;
    let keys = keys.unwrap_or_default();
    assert!(keys.len() >= 3, "records on the new primary: {keys:?}");

    // Let the traffic run on a little after the switch, then stop it.
    tokio::time::sleep(Duration::from_secs(1)).await;
    stop.store(true, Ordering::Relaxed);
    let outcomes = tokio::time::timeout(Duration::from_secs(15), traffic)
        .await
        .expect("the traffic loop stops")
        .expect("no call hung or answered wrongly");
    for o in &outcomes {
        assert!(
            o.status == 200 || (o.status == 503 && o.retry_after),
            "a call in the window got something else than 200 or 503 with Retry-After: {o:?}"
        );
        assert!(
            o.took < Duration::from_secs(3),
            "a call took longer than the Redis timeout allows: {o:?}"
        );
    }
    let after: Vec<&Outcome> = outcomes.iter().filter(|o| o.after_switch).collect();
    assert!(
        after.len() >= 6 && after.iter().rev().take(6).all(|o| o.status == 200),
        "calls and new sessions work again after the switch: {outcomes:?}"
    );
    // The window was real: new sessions were refused (503 + Retry-After) while no primary
    // was reachable, before the switch.
    assert!(
        outcomes
            .iter()
            .any(|o| o.method == "initialize" && o.status == 503 && !o.after_switch),
        "no request met the missing primary: {outcomes:?}"
    );
    // Both gateways' bus subscribers moved to the primary. Asked of the node the sentinels
    // name at each look: on a loaded machine they may have replaced `new` in turn (a failover
    // timed out, or `new` itself seen down), and the gateways follow every switch.
    let numsub = |port: u16| async move {
        let n: Option<(String, i64)> = query(
            port,
            redis::cmd("PUBSUB").arg("NUMSUB").arg("fo:v1:broadcast"),
        )
        .await;
        n.map_or(0, |(_, n)| n)
    };
    let mut subscribers = 0;
    let mut primary = Some(new);
    let deadline = Instant::now() + Duration::from_secs(10);
    while Instant::now() < deadline {
        primary = setup.primary_port().await;
        subscribers = match primary {
            Some(port) => numsub(port).await,
            None => 0,
        };
        if subscribers == 2 {
            break;
        }
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    if subscribers != 2 {
        let mut nodes = Vec::new();
        for node in setup.data.iter().filter(|n| n.port != old) {
            nodes.push((node.port, numsub(node.port).await));
        }
        let about_primary = |logs: String| -> Vec<String> {
            logs.lines()
                .filter(|l| l.contains("primary") || l.contains("bus"))
                .map(str::to_owned)
                .collect()
        };
        panic!(
            "both buses listen on the primary: {subscribers} subscribers on {primary:?} \
             (promoted first: {new}); subscribers per live node: {nodes:?}\n\
             A: {:#?}\nB: {:#?}",
            about_primary(a.logs()),
            about_primary(b.logs())
        );
    }
    let refused = outcomes.iter().filter(|o| o.status == 503).count();
    let calls_refused = outcomes
        .iter()
        .filter(|o| o.status == 503 && o.method == "tools/call")
        .count();
    let slowest = outcomes.iter().map(|o| o.took).max().unwrap_or_default();
    eprintln!(
        "failover: promoted {promoted_after:?} after the kill; B served the old session {followed_after:?} after the promotion ({refusals} refusals), both ready {all_ready_after:?} after it; traffic on A: {} requests, {refused} answered 503 ({calls_refused} of them tools/call), slowest {slowest:?}",
        outcomes.len()
    );
    for gw in [a, b] {
        let logs = gw.stop().await;
        assert!(!logs.contains("panicked"), "{logs}");
        assert!(logs.contains("the Redis primary changed"), "{logs}");
    }
}

#[tokio::test]
async fn a_planned_failover_moves_the_gateway_off_the_demoted_primary() {
    let setup = SentinelSetup::start().await;
    let dir = TempDir::new("sentinel-planned");
    let yaml = sentinel_config(&setup.nodes_yaml(), "pl");
    let a = GatewayProcess::start(&yaml, &dir, "a").await;
    let mut first = RawClient::new(a.url("t"));
    first.initialize().await;

    // `SENTINEL FAILOVER`: the old primary stays up but is made a replica (writes to it would
    // now be refused with READONLY).
    let old = setup.primary_port().await.expect("a primary");
    let asked: Option<String> = query(
        setup.sentinels[0].port,
        redis::cmd("SENTINEL").arg("FAILOVER").arg(MASTER),
    )
    .await;
    assert_eq!(asked.as_deref(), Some("OK"));
    let new = setup
        .await_new_primary(old, Duration::from_secs(30))
        .await
        .expect("the sentinels switched the primary within 30s");
    // Until the old primary is demoted both answer as primaries, and a write the old one takes
    // then is lost with its resync (Redis replicates asynchronously): wait for the demotion.
    let started = Instant::now();
    let mut role = None;
    while started.elapsed() < Duration::from_secs(30) {
        let answer: Option<Vec<redis::Value>> = query(old, &mut redis::cmd("ROLE")).await;
        role = answer
            .and_then(|r| r.into_iter().next())
            .and_then(|v| redis::from_redis_value::<String>(v).ok());
        if role.as_deref() == Some("slave") {
            break;
        }
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    assert_eq!(
        role.as_deref(),
        Some("slave"),
        "the old primary was demoted within 30s"
    );

    // New sessions are written again within a bounded time; every refusal meanwhile is a 503
    // with Retry-After.
    let started = Instant::now();
    let fresh = loop {
        let mut c = RawClient::new(a.url("t"));
        let r = c
            .post(&json!({
                "jsonrpc": "2.0", "id": 1, "method": "initialize",
                "params": {
                    "protocolVersion": "2025-11-25",
                    "capabilities": {},
                    "clientInfo": {"name": "planned", "version": "0"}
                }
            }))
            .await;
        if r.status == 200 {
            c.session = r.header("mcp-session-id").map(str::to_owned);
            break c;
        }
        assert!(
            r.status == 503 && r.header("retry-after").is_some(),
            "{r:?}"
        );
        assert!(
            started.elapsed() < Duration::from_secs(10),
            "no new session within 10s of the switch"
        );
        tokio::time::sleep(Duration::from_millis(100)).await;
    };
    let session = fresh.session.clone().expect("a session id");
    let keys: Option<Vec<String>> = query(new, redis::cmd("KEYS").arg("pl:v1:sess:*")).await;
    assert!(
        keys.unwrap_or_default()
            .iter()
            .any(|k| k.contains(&session)),
        "the new session's record is on the new primary"
    );
    // The session from before the switch goes on.
    let r = first
        .call_tool("echo", json!({"message": "still here"}))
        .await;
    assert_eq!(
        (r.status, echo_text(&r).as_str()),
        (200, "still here"),
        "{r:?}"
    );
    let logs = a.stop().await;
    assert!(!logs.contains("panicked"), "{logs}");
    assert!(logs.contains("the Redis primary changed"), "{logs}");
}
