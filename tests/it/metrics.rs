//! Prometheus metrics on the admin listener after real traffic: requests by tenant, method
//! and outcome with latency, upstream calls, live sessions, SSE streams, stdio processes,
//! security-front refusals by reason, Redis operations — and no ids or secrets as labels.

use std::collections::HashMap;
use std::time::Duration;

use serde_json::json;
use switchyard::config::{RedisConfig, Secret, StoreConfig, UpstreamTransport};

use crate::support::client::RawClient;
use crate::support::config::{config, demo_stdio, tenant, upstream};
use crate::support::gateway::TestGateway;
use crate::support::redis::RedisServer;

/// `name{labels} value` lines of the exposition, by series text.
fn series(text: &str) -> HashMap<String, f64> {
    text.lines()
        .filter(|l| !l.starts_with('#') && !l.is_empty())
        .filter_map(|l| {
            let (k, v) = l.rsplit_once(' ')?;
            Some((k.to_owned(), v.parse().ok()?))
        })
        .collect()
}

fn value(all: &HashMap<String, f64>, key: &str) -> f64 {
    *all.get(key)
        .unwrap_or_else(|| panic!("series {key} missing; have:\n{}", keys(all)))
}

fn keys(all: &HashMap<String, f64>) -> String {
    let mut k: Vec<&String> = all.keys().filter(|k| k.contains("metrics-t")).collect();
    k.sort();
    k.iter().map(|s| s.as_str()).collect::<Vec<_>>().join("\n")
}

#[tokio::test]
async fn metrics_after_real_traffic() {
    let redis = RedisServer::start().await;
    let mut cfg = config(vec![tenant(
        "metrics-t",
        vec![upstream("demo", UpstreamTransport::Stdio(demo_stdio(None)))],
    )]);
    cfg.sessions.store = StoreConfig::Redis(RedisConfig {
        target: switchyard::config::RedisTarget::Single(Secret::new(redis.url())),
        prefix: "met".into(),
        timeout: Duration::from_millis(500),
        events: switchyard::config::EventDurability::Durable,
    });
    crate::cluster::migrate(&cfg).await;
    let gw = TestGateway::start(cfg).await;
    let admin = tokio::net::TcpListener::bind("127.0.0.1:0")
        .await
        .expect("bind");
    let admin_addr = admin.local_addr().expect("addr");
    tokio::spawn(switchyard::app::serve_admin(admin, gw.gateway.clone()));

    let mut c = RawClient::new(gw.url("metrics-t"));
    c.initialize().await;
    assert_eq!(c.request("tools/list", json!({})).await.status, 200);
    // One upstream, no prefix: tool calls are forwarded as they are, the unknown one too (the
    // upstream answers it with its own -32602): three `ok` exchanges; with the list page the
    // catalog fetched, four upstream calls.
    let r = c.call_tool("echo", json!({"message": "m"})).await;
    assert!(r.last()["result"].is_object());
    let r = c
        .request(
            "tools/call",
            json!({"name": "sleep", "arguments": {"ms": 200, "steps": 2},
                   "_meta": {"progressToken": 1}}),
        )
        .await;
    assert!(r.content_type().starts_with("text/event-stream"));
    let r = c.call_tool("no-such-tool", json!({})).await;
    assert_eq!(r.error_code(), Some(-32602));
    // Refused by the security front: a foreign Origin.
    let id = c.next_id();
    let ping = json!({"jsonrpc": "2.0", "id": id, "method": "ping"}).to_string();
    let session = c.session.clone().unwrap_or_default();
    let refused = c
        .post_raw(
            ping.as_bytes(),
            &[
                ("content-type", "application/json"),
                ("accept", "application/json, text/event-stream"),
                ("origin", "http://evil.example"),
                ("mcp-session-id", &session),
            ],
        )
        .await;
    assert_eq!(refused.status, 403);

    let resp = reqwest::get(format!("http://{admin_addr}/metrics"))
        .await
        .expect("scrape");
    assert_eq!(resp.status(), 200);
    assert!(
        resp.headers()["content-type"]
            .to_str()
            .unwrap_or_default()
            .starts_with("text/plain; version=0.0.4")
    );
    let text = resp.text().await.expect("body");
    let all = series(&text);
    let t = "tenant=\"metrics-t\"";
    assert_eq!(
        value(
            &all,
            &format!("switchyard_requests_total{{method=\"initialize\",outcome=\"ok\",{t}}}")
        ),
        1.0
    );
    assert_eq!(
        value(
            &all,
            &format!("switchyard_requests_total{{method=\"tools/call\",outcome=\"ok\",{t}}}")
        ),
        3.0
    );
    assert_eq!(
        value(
            &all,
            &format!(
                "switchyard_requests_total{{method=\"notifications/initialized\",outcome=\"ok\",{t}}}"
            )
        ),
        1.0
    );
    assert_eq!(
        value(
            &all,
            &format!("switchyard_request_duration_seconds_count{{method=\"tools/list\",{t}}}")
        ),
        1.0
    );
    assert_eq!(
        value(
            &all,
            &format!("switchyard_upstream_calls_total{{outcome=\"ok\",{t},upstream=\"demo\"}}")
        ),
        4.0
    );
    assert_eq!(
        value(
            &all,
            &format!("switchyard_upstream_call_duration_seconds_count{{{t},upstream=\"demo\"}}")
        ),
        4.0
    );
    assert!(
        value(
            &all,
            &format!("switchyard_upstream_call_duration_seconds_sum{{{t},upstream=\"demo\"}}")
        ) >= 0.2
    );
    assert_eq!(
        value(&all, &format!("switchyard_sessions_active{{{t}}}")),
        1.0
    );
    assert_eq!(
        value(
            &all,
            &format!("switchyard_auth_failures_total{{reason=\"origin_not_allowed\",{t}}}")
        ),
        1.0
    );
    assert!(value(&all, "switchyard_stdio_processes") >= 1.0);
    assert!(
        value(
            &all,
            "switchyard_redis_operation_duration_seconds_count{op=\"session_create\"}"
        ) >= 1.0
    );
    assert!(all.contains_key("switchyard_sse_streams_open{kind=\"post\"}"));
    // Bounded labels: no session id, no user, no tool arguments.
    assert!(!text.contains(&session), "a session id is in the metrics");
    assert!(!text.contains("anonymous"));
    assert!(!text.contains("no-such-tool"));
    gw.stop().await;
}

/// `/readyz` judges standing upstream processes by the tenant's failure policy, and
/// `switchyard probe` (the container health check) follows the status.
#[tokio::test]
async fn readiness_follows_the_failure_policy_and_the_probe_follows_readiness() {
    use switchyard::config::FailurePolicy;
    let broken = || {
        let mut s = crate::support::config::stdio("/nonexistent/switchyard-test-upstream", &[]);
        s.sharing = switchyard::config::StdioSharing::Shared;
        upstream("broken", UpstreamTransport::Stdio(s))
    };
    let probe = |url: String| async move {
        tokio::process::Command::new(crate::support::config::gateway_exe())
            .args(["probe", "--url", &url])
            .output()
            .await
            .expect("probe runs")
            .status
            .success()
    };
    for (policy, ready) in [(FailurePolicy::Open, true), (FailurePolicy::Closed, false)] {
        let mut t = tenant("ready-t", vec![broken()]);
        t.failure_policy = policy;
        let gw = TestGateway::start(config(vec![t])).await;
        let url = format!("http://{}/readyz", gw.addr);
        // Give the process a moment to fail its start.
        tokio::time::sleep(Duration::from_millis(300)).await;
        let resp = reqwest::get(&url).await.expect("readyz");
        let status = resp.status().as_u16();
        let text = resp.text().await.expect("body");
        assert_eq!(status, if ready { 200 } else { 503 }, "{policy:?}: {text}");
        assert!(
            text.contains("ready-t/broken: 0 of 1 processes up"),
            "{text}"
        );
        assert_eq!(probe(url).await, ready, "{policy:?}");
        assert!(
            probe(format!("http://{}/healthz", gw.addr)).await,
            "alive either way"
        );
        gw.stop().await;
    }
}
