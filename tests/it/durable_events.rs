//! Durable SSE events (`sessions.store.redis.events`): two `switchyard run` replicas share a
//! real `redis-server`; a client streams a call of 1,000 progress notifications from replica A,
//! reads up to a random event, and A is killed with SIGKILL. Whatever A had already written to
//! the client's socket counts as sent; the client then resumes on replica B with
//! `Last-Event-ID` and must get every event after its position that A sent. Durable mode: 0
//! lost, over several cuts. With Redis holding writes back for a moment before the kill, the
//! fast mode loses what it sent meanwhile (the test can fail), the durable mode still nothing.
//! `SY_TEST_EVENTS=fast` runs the plain cuts in fast mode: they fail on a cut where A sent
//! events its writer had not yet stored (seen: the first three cuts lost nothing, the fourth
//! lost 3). And while Redis takes no writes, a durable stream waits, ends with a `retry` hint
//! after its patience, and the client's resumption gets the rest once Redis is back.

use std::collections::BTreeSet;
use std::time::Duration;

use nix::sys::signal::Signal;
use rand::{RngExt, SeedableRng};
use serde_json::json;

use crate::resume::take_events;
use crate::support::TempDir;
use crate::support::client::RawClient;
use crate::support::config::demo_server_exe;
use crate::support::process::GatewayProcess;
use crate::support::redis::RedisServer;

/// What one cut showed.
struct Cut {
    /// The last event the client took before A was killed.
    position: u64,
    /// Every event A wrote to the client's connection after the position.
    sent_after: BTreeSet<u64>,
    /// The events B gave on resumption, in order.
    resumed: Vec<u64>,
}

impl Cut {
    /// Events A sent that the resumption did not give.
    fn lost(&self) -> usize {
        let resumed: BTreeSet<u64> = self.resumed.iter().copied().collect();
        self.sent_after.difference(&resumed).count()
    }
}

fn config_yaml(redis: &RedisServer, events: &str) -> String {
    format!(
        "sessions:\n  store: {{redis: {{url: \"{}\", prefix: kill, timeout: 500ms, events: {events}}}}}\n\
         tenants:\n  - name: r\n    upstreams:\n      - {{name: demo, stdio: {{command: \"{}\", args: [--stdio, --test-tools]}}}}\n",
        redis.url(),
        demo_server_exe().display()
    )
}

/// The sequence number of an event id (`<stream>.<seq>`).
fn seq_of(id: &str) -> u64 {
    id.rsplit_once('.')
        .and_then(|(_, s)| s.parse().ok())
        .unwrap_or_else(|| panic!("event id {id}"))
}

/// Starts a 1,000-event call on `a`, reads it up to a random event, (optionally has Redis hold
/// writes back for a moment while the client keeps reading), kills A, takes what A had sent,
/// and resumes on `b`.
async fn kill_mid_stream(
    a: &GatewayProcess,
    b: &GatewayProcess,
    redis: &RedisServer,
    hold_redis: bool,
    seed: u64,
) -> Cut {
    let mut rng = rand::rngs::StdRng::seed_from_u64(seed);
    let stop_at: u64 = rng.random_range(50..800);
    let mut c = RawClient::new(a.url("r"));
    c.protocol_version = "2025-06-18".into();
    c.initialize().await;
    let request_id = c.next_id();
    let body = json!({"jsonrpc": "2.0", "id": request_id, "method": "tools/call", "params": {
        "name": "sleep", "arguments": {"ms": 2000, "steps": 1000},
        "_meta": {"progressToken": "p"}}});
    let mut resp = c.post_open(&body).await;
    assert_eq!(resp.status(), 200);
    let (mut buf, mut stream_id, mut position) = (String::new(), None::<String>, 0);
    let mut sent_after = BTreeSet::new();
    // Up to the chosen event (or the end, if the stream is faster than expected).
    while position < stop_at {
        let chunk = tokio::time::timeout(Duration::from_secs(30), resp.chunk())
            .await
            .expect("A streams")
            .expect("read");
        let Some(chunk) = chunk else { break };
        buf.push_str(&String::from_utf8_lossy(&chunk));
        for e in take_events(&mut buf) {
            let id = e.id.expect("every event has an id");
            let seq = seq_of(&id);
            if position >= stop_at {
                // Already in the client's hands, but past the event it processed.
                sent_after.insert(seq);
                continue;
            }
            stream_id = id.rsplit_once('.').map(|(s, _)| s.to_owned());
            position = seq;
        }
    }
    assert!(
        position >= stop_at,
        "seed {seed}: the stream ended early at {position}"
    );
    let mut admin = redis.conn().await;
    if hold_redis {
        // Redis takes no writes for a moment while the client keeps reading A's stream.
        let _: () = redis::cmd("CLIENT")
            .arg("PAUSE")
            .arg(1_500)
            .arg("WRITE")
            .query_async(&mut admin)
            .await
            .expect("CLIENT PAUSE");
        let until = tokio::time::Instant::now() + Duration::from_millis(300);
        while let Ok(Ok(Some(chunk))) = tokio::time::timeout_at(until, resp.chunk()).await {
            buf.push_str(&String::from_utf8_lossy(&chunk));
        }
    }
    a.signal(Signal::SIGKILL);
    // What A wrote before it died is still delivered: it was sent.
    while let Ok(Ok(Some(chunk))) = tokio::time::timeout(Duration::from_secs(5), resp.chunk()).await
    {
        buf.push_str(&String::from_utf8_lossy(&chunk));
    }
    for e in take_events(&mut buf) {
        sent_after.insert(seq_of(&e.id.expect("id")));
    }
    if hold_redis {
        // Until Redis takes writes again (its pause is 1.5 s).
        tokio::time::sleep(Duration::from_millis(1_300)).await;
    }

    let last = format!("{}.{position}", stream_id.expect("an event id"));
    let mut resp = c
        .http
        .get(b.url("r"))
        .header("accept", "text/event-stream")
        .header("mcp-session-id", c.session.clone().unwrap_or_default())
        .header("mcp-protocol-version", &c.protocol_version)
        .header("last-event-id", &last)
        .send()
        .await
        .expect("GET on B");
    assert_eq!(resp.status(), 200, "seed {seed}");
    // A is gone, so the stream never ends: read until it has been quiet for a second.
    let (mut resumed, mut buf) = (Vec::new(), String::new());
    let deadline = tokio::time::Instant::now() + Duration::from_secs(30);
    while tokio::time::Instant::now() < deadline {
        match tokio::time::timeout(Duration::from_secs(1), resp.chunk()).await {
            Ok(Ok(Some(chunk))) => {
                buf.push_str(&String::from_utf8_lossy(&chunk));
                for e in take_events(&mut buf) {
                    if let Some(id) = e.id {
                        resumed.push(seq_of(&id));
                    }
                }
            }
            _ => break,
        }
    }
    Cut {
        position,
        sent_after,
        resumed,
    }
}

/// Runs `cuts` cuts against replicas on `events` mode, A restarted after each kill.
async fn cuts(events: &str, hold_redis: bool, seeds: &[u64]) -> Vec<Cut> {
    let redis = RedisServer::start().await;
    let dir = TempDir::new("durable-events");
    let yaml = config_yaml(&redis, events);
    let b = GatewayProcess::start(&yaml, &dir, "b").await;
    let mut out = Vec::new();
    for (i, seed) in seeds.iter().enumerate() {
        let a = GatewayProcess::start(&yaml, &dir, &format!("a{i}")).await;
        out.push(kill_mid_stream(&a, &b, &redis, hold_redis, *seed).await);
    }
    out
}

#[tokio::test]
async fn a_replica_killed_mid_stream_loses_no_event_it_sent_in_durable_mode() {
    let mode = std::env::var("SY_TEST_EVENTS").unwrap_or_else(|_| "durable".into());
    for (cut, seed) in cuts(&mode, false, &[1, 2, 3, 4, 5]).await.iter().zip(1..) {
        #[allow(clippy::print_stderr)]
        {
            eprintln!(
                "cut {seed}: client at {}, A had sent {} more, B resumed {} ({} lost)",
                cut.position,
                cut.sent_after.len(),
                cut.resumed.len(),
                cut.lost()
            );
        }
        let expected: Vec<u64> =
            (cut.position + 1..cut.position + 1 + cut.resumed.len() as u64).collect();
        assert_eq!(
            cut.resumed, expected,
            "seed {seed}: the resumption continues right after the client's event {}",
            cut.position
        );
        assert_eq!(
            cut.lost(),
            0,
            "seed {seed}: every event A sent after {} is resumed (sent {:?}, resumed {:?})",
            cut.position,
            cut.sent_after,
            cut.resumed
        );
    }
}

#[tokio::test]
async fn with_redis_lagging_at_the_kill_fast_mode_loses_what_it_sent_and_durable_mode_nothing() {
    let fast = cuts("fast", true, &[7]).await;
    let durable = cuts("durable", true, &[7]).await;
    let (fast, durable) = (&fast[0], &durable[0]);
    #[allow(clippy::print_stderr)]
    {
        eprintln!(
            "SIGKILL with Redis holding writes back for 1.5 s: fast mode sent {} events after the client's position that no replica can resume ({} sent), durable mode {} ({} sent)",
            fast.lost(),
            fast.sent_after.len(),
            durable.lost(),
            durable.sent_after.len()
        );
    }
    assert!(
        fast.lost() > 0,
        "fast mode: A kept sending while Redis held its writes, so the resumption lacks them (sent {:?}, resumed {:?})",
        fast.sent_after,
        fast.resumed
    );
    assert_eq!(durable.lost(), 0, "durable mode: {:?}", durable.resumed);
}

#[tokio::test]
async fn while_redis_takes_no_writes_a_durable_stream_waits_then_ends_with_a_retry_hint() {
    use crate::support::config::{config, demo_stdio, tenant, upstream};
    use crate::support::gateway::TestGateway;
    use switchyard::config::{
        EventDurability, RedisConfig, RedisTarget, Secret, StoreConfig, UpstreamTransport,
    };

    let redis = RedisServer::start().await;
    let mut cfg = config(vec![tenant(
        "r",
        vec![upstream("demo", UpstreamTransport::Stdio(demo_stdio(None)))],
    )]);
    // Patience: 3 × 300 ms + 1 s = 1.9 s.
    cfg.sessions.store = StoreConfig::Redis(RedisConfig {
        target: RedisTarget::Single(Secret::new(redis.url())),
        prefix: "wait".into(),
        timeout: Duration::from_millis(300),
        events: EventDurability::Durable,
    });
    crate::cluster::migrate(&cfg).await;
    let gw = TestGateway::start(cfg).await;
    let mut c = RawClient::new(gw.url("r"));
    c.protocol_version = "2025-06-18".into();
    c.initialize().await;
    let request_id = c.next_id();
    let body = json!({"jsonrpc": "2.0", "id": request_id, "method": "tools/call", "params": {
        "name": "sleep", "arguments": {"ms": 3000, "steps": 30},
        "_meta": {"progressToken": "p"}}});
    let mut resp = c.post_open(&body).await;
    assert_eq!(resp.status(), 200);
    let (mut text, mut seqs, mut last_id) = (String::new(), Vec::new(), None);
    let take = |text: &mut String, seqs: &mut Vec<u64>, last_id: &mut Option<String>| {
        for e in take_events(text) {
            if let Some(id) = e.id {
                seqs.push(seq_of(&id));
                *last_id = Some(id);
            }
        }
    };
    while seqs.is_empty() {
        let chunk = tokio::time::timeout(Duration::from_secs(10), resp.chunk())
            .await
            .expect("the first event within 10 s")
            .expect("read")
            .expect("not ended");
        text.push_str(&String::from_utf8_lossy(&chunk));
        take(&mut text, &mut seqs, &mut last_id);
    }
    let mut admin = redis.conn().await;
    let _: () = redis::cmd("CLIENT")
        .arg("PAUSE")
        .arg(4_000)
        .arg("WRITE")
        .query_async(&mut admin)
        .await
        .expect("CLIENT PAUSE");
    let paused = tokio::time::Instant::now();
    // The body waits for Redis, then ends with a retry hint (well before the pause ends).
    let mut rest = String::new();
    while let Some(chunk) = tokio::time::timeout(Duration::from_secs(10), resp.chunk())
        .await
        .expect("the body ends within 10 s")
        .expect("read")
    {
        rest.push_str(&String::from_utf8_lossy(&chunk));
    }
    let waited = paused.elapsed();
    assert!(
        rest.ends_with("retry: 1000\n\n"),
        "the body ends with a retry hint: {rest:?}"
    );
    assert!(
        waited >= Duration::from_millis(1_500) && waited < Duration::from_millis(3_900),
        "it waited for the patience (1.9 s), not for Redis: {waited:?}"
    );
    text.push_str(&rest);
    take(&mut text, &mut seqs, &mut last_id);
    let before_pause = seqs.len();
    // Once Redis takes writes again, the client resumes and gets the rest, the response too.
    tokio::time::sleep_until(paused + Duration::from_millis(4_200)).await;
    let mut resp = c
        .http
        .get(&c.url)
        .header("accept", "text/event-stream")
        .header("mcp-session-id", c.session.clone().unwrap_or_default())
        .header("mcp-protocol-version", &c.protocol_version)
        .header("last-event-id", last_id.clone().expect("an id"))
        .send()
        .await
        .expect("GET");
    assert_eq!(resp.status(), 200);
    let mut text = String::new();
    while !text.contains(&format!("\"id\":{request_id}")) {
        let chunk = tokio::time::timeout(Duration::from_secs(10), resp.chunk())
            .await
            .expect("the rest within 10 s")
            .expect("read")
            .expect("not ended before the response");
        text.push_str(&String::from_utf8_lossy(&chunk));
    }
    text.push_str("\n\n");
    take(&mut text, &mut seqs, &mut last_id);
    let expected: Vec<u64> = (seqs[0]..seqs[0] + seqs.len() as u64).collect();
    assert_eq!(
        seqs, expected,
        "every event once, in order ({before_pause} before the resumption)"
    );
    gw.stop().await;
}
