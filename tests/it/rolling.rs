//! A rolling restart under load: three replicas sharing a real `redis-server`, official Python
//! SDK clients making streamed tool calls (progress notifications, then the result) through a
//! round-robin balancer without affinity, and each replica restarted in turn (graceful
//! shutdown: streams closed with a `retry` hint, in-flight calls drained and recorded). Every
//! call must complete exactly once with every progress notification exactly once.

use std::time::{Duration, Instant};

use serde_json::Value;
use switchyard::config::{ConnectionLimits, RedisConfig, Secret, StoreConfig};

use crate::support::config::{config, http, tenant, upstream};
use crate::support::gateway::TestGateway;
use crate::support::peers::{HttpPeer, Sdk, free_port, run_client};
use crate::support::redis::RedisServer;

const CLIENTS: usize = 3;
const CALLS: usize = 10;

#[tokio::test]
async fn rolling_restart_under_streamed_load_loses_and_duplicates_nothing() {
    let redis = RedisServer::start().await;
    let remote = HttpPeer::everything(free_port()).await;
    let mut cfg = config(vec![tenant(
        "roll",
        vec![upstream("ev", http(&remote.url()))],
    )]);
    cfg.sessions.store = StoreConfig::Redis(RedisConfig {
        target: switchyard::config::RedisTarget::Single(Secret::new(redis.url())),
        prefix: "roll".into(),
        timeout: Duration::from_millis(500),
        events: switchyard::config::EventDurability::Durable,
    });
    // The production default: a client's keep-alive connection to a stopping replica is
    // answered with `Connection: close`, not closed under its next request.
    cfg.limits.connections.drain_grace = ConnectionLimits::default().drain_grace;
    crate::cluster::migrate(&cfg).await;
    let ports: Vec<u16> = (0..3).map(|_| free_port()).collect();
    let mut replicas = Vec::new();
    for p in &ports {
        replicas.push(Some(TestGateway::start_on(cfg.clone(), *p).await));
    }
    let list = ports
        .iter()
        .map(|p| format!("http://127.0.0.1:{p}"))
        .collect::<Vec<_>>()
        .join(",");
    let url = format!("http://127.0.0.1:{}/t/roll/mcp", ports[0]);

    let started = Instant::now();
    let clients: Vec<_> = (0..CLIENTS)
        .map(|_| {
            let (url, list) = (url.clone(), list.clone());
            tokio::spawn(async move {
                run_client(
                    Sdk::Python,
                    &url,
                    "steady",
                    &[
                        // Resumable streams across replicas: the session-based revision.
                        "--mode",
                        "legacy",
                        "--calls",
                        &CALLS.to_string(),
                        "--replicas",
                        &list,
                        "--timeout",
                        "240",
                    ],
                )
                .await
            })
        })
        .collect();

    // Restart each replica in turn while the calls run.
    tokio::time::sleep(Duration::from_secs(3)).await;
    let mut restarts = Vec::new();
    for (i, port) in ports.iter().enumerate() {
        let t = Instant::now();
        if let Some(gw) = replicas[i].take() {
            gw.stop().await;
        }
        replicas[i] = Some(TestGateway::start_on(cfg.clone(), *port).await);
        restarts.push(t.elapsed());
        tokio::time::sleep(Duration::from_secs(2)).await;
    }

    let (mut total, mut resumed) = (0, 0);
    for c in clients {
        let report: Value = c.await.expect("client task");
        let results = report["results"].as_array().expect("results");
        assert_eq!(results.len(), CALLS, "{report}");
        for r in results {
            assert_eq!(
                r, "Long running operation completed. Duration: 1 seconds, Steps: 5.",
                "{report}"
            );
        }
        let counts = report["progressCounts"]
            .as_array()
            .expect("progress counts");
        assert!(
            counts.iter().all(|c| c.as_u64() == Some(5)),
            "every progress notification exactly once: {report}"
        );
        let hits = report["replicaHits"].as_array().expect("hits");
        assert!(hits.iter().all(|h| h.as_u64().unwrap_or(0) > 0), "{report}");
        total += results.len();
        resumed += report["reconnections"].as_u64().unwrap_or(0);
    }
    assert!(
        resumed > 0,
        "no stream was cut by the restarts: the test did not test resumption"
    );
    // The figures of the run, for the record (shown with --nocapture).
    #[allow(clippy::print_stderr)]
    {
        eprintln!(
            "rolling restart: {total} streamed calls by {CLIENTS} SDK clients in {:.1}s, 3 replicas restarted in turn (stop+start {:?}), {resumed} streams resumed with Last-Event-ID; 0 lost, 0 duplicated",
            started.elapsed().as_secs_f64(),
            restarts
        );
    }
    for gw in replicas.into_iter().flatten() {
        gw.stop().await;
    }
    remote.kill().await;
}
