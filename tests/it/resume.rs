//! Resumable SSE: a client whose connection is cut at random byte positions in the middle of
//! a stream of 1,000 progress notifications reconnects with `Last-Event-ID` until the
//! response arrives, and must have received every message exactly once, in order. Also: the
//! GET stream resumes, priming events for 2025-11-25 sessions, ids useless to another session.

use std::time::Duration;

use rand::{RngExt, SeedableRng};
use serde_json::{Value, json};

use crate::support::client::RawClient;
use crate::support::config::{config, demo_stdio, tenant, upstream};
use crate::support::gateway::TestGateway;
use switchyard::config::UpstreamTransport;

/// One parsed SSE event.
#[derive(Debug)]
pub(crate) struct Event {
    pub id: Option<String>,
    pub data: String,
}

/// Splits complete events off the front of `buf` (an event ends with a blank line).
pub(crate) fn take_events(buf: &mut String) -> Vec<Event> {
    let mut out = Vec::new();
    while let Some(end) = buf.find("\n\n") {
        let block: String = buf.drain(..end + 2).collect();
        let (mut id, mut data, mut any) = (None, String::new(), false);
        for line in block.lines() {
            if let Some(v) = line.strip_prefix("id:") {
                id = Some(v.trim_start().to_owned());
                any = true;
            } else if let Some(v) = line.strip_prefix("data:") {
                data.push_str(v.strip_prefix(' ').unwrap_or(v));
                any = true;
            }
        }
        if any {
            out.push(Event { id, data });
        }
    }
    out
}

/// What a resuming client saw.
#[derive(Default)]
pub(crate) struct Seen {
    progress: Vec<u64>,
    response: Option<Value>,
    last_id: Option<String>,
    pub(crate) connections: usize,
    primed: bool,
}

impl Seen {
    fn take(&mut self, e: Event, request_id: u64) {
        if let Some(id) = e.id {
            self.last_id = Some(id);
        }
        if e.data.is_empty() {
            self.primed = true;
            return;
        }
        let msg: Value = serde_json::from_str(&e.data)
            .unwrap_or_else(|err| panic!("bad event data {:?}: {err}", e.data));
        if msg["method"] == "notifications/progress" {
            self.progress
                .push(msg["params"]["progress"].as_u64().unwrap_or_default());
        } else if msg["id"] == request_id {
            assert!(self.response.is_none(), "the response arrived twice");
            self.response = Some(msg);
        }
    }
}

/// Reads `resp` until the response arrives or, after a random number of bytes, cuts the
/// connection (dropping a partial event, as a real cut would).
async fn read_some(
    resp: reqwest::Response,
    seen: &mut Seen,
    request_id: u64,
    rng: &mut rand::rngs::StdRng,
) {
    let mut resp = resp;
    let budget: usize = rng.random_range(1..6_000);
    let mut read = 0usize;
    let mut buf = String::new();
    seen.connections += 1;
    while seen.response.is_none() {
        let chunk = tokio::time::timeout(Duration::from_secs(30), resp.chunk())
            .await
            .expect("the stream stalls no longer than 30s")
            .expect("stream read");
        let Some(chunk) = chunk else { return };
        let text = String::from_utf8_lossy(&chunk);
        if read + text.len() > budget {
            // Cut inside this chunk: keep only what arrived before the cut.
            let keep = budget.saturating_sub(read).min(text.len());
            let cut = (0..=keep)
                .rev()
                .find(|i| text.is_char_boundary(*i))
                .unwrap_or(0);
            buf.push_str(&text[..cut]);
            for e in take_events(&mut buf) {
                seen.take(e, request_id);
            }
            return;
        }
        read += text.len();
        buf.push_str(&text);
        for e in take_events(&mut buf) {
            seen.take(e, request_id);
        }
    }
}

/// Calls the demo `sleep` tool with 1,000 progress steps on `post_url`, cutting and resuming
/// on `resume_urls` in turn, and checks exactly-once, in-order delivery.
pub(crate) async fn cut_and_resume(c: &RawClient, resume_urls: &[String], seed: u64) -> Seen {
    let mut rng = rand::rngs::StdRng::seed_from_u64(seed);
    let request_id = c.next_id();
    let body = json!({"jsonrpc": "2.0", "id": request_id, "method": "tools/call", "params": {
        "name": "sleep", "arguments": {"ms": 3000, "steps": 1000},
        "_meta": {"progressToken": "p"}}});
    let resp = c.post_open(&body).await;
    assert_eq!(resp.status(), 200);
    let mut seen = Seen::default();
    read_some(resp, &mut seen, request_id, &mut rng).await;
    let mut turn = 0;
    while seen.response.is_none() {
        assert!(
            turn < 2_000,
            "seed {seed}: no response after {turn} reconnections"
        );
        let last = seen
            .last_id
            .clone()
            .unwrap_or_else(|| panic!("seed {seed}: cut before any event id"));
        let url = &resume_urls[turn % resume_urls.len()];
        turn += 1;
        let resp = c
            .http
            .get(url)
            .header("accept", "text/event-stream")
            .header("mcp-session-id", c.session.clone().unwrap_or_default())
            .header("mcp-protocol-version", &c.protocol_version)
            .header("last-event-id", last)
            .send()
            .await
            .expect("GET");
        assert_eq!(resp.status(), 200, "seed {seed}");
        read_some(resp, &mut seen, request_id, &mut rng).await;
    }
    let expected: Vec<u64> = (1..=1000).collect();
    assert_eq!(
        seen.progress, expected,
        "seed {seed}: every progress notification exactly once, in order ({} connections)",
        seen.connections
    );
    let result = seen.response.as_ref().expect("response");
    assert!(result["result"].is_object(), "seed {seed}: {result}");
    seen
}

fn demo_gateway_config() -> switchyard::config::Config {
    config(vec![tenant(
        "r",
        vec![upstream("demo", UpstreamTransport::Stdio(demo_stdio(None)))],
    )])
}

#[tokio::test]
async fn random_cuts_during_1000_progress_notifications_lose_nothing() {
    let gw = TestGateway::start(demo_gateway_config()).await;
    for (seed, version) in [
        (1u64, "2025-11-25"),
        (2, "2025-11-25"),
        (3, "2025-06-18"),
        (4, "2025-03-26"),
    ] {
        let mut c = RawClient::new(gw.url("r"));
        c.protocol_version = version.into();
        c.initialize().await;
        let seen = cut_and_resume(&c, &[gw.url("r")], seed).await;
        assert!(
            seen.connections > 3,
            "seed {seed}: the stream was actually cut ({} connections)",
            seen.connections
        );
        assert_eq!(
            seen.primed,
            version == "2025-11-25",
            "priming events only for clients that expect them"
        );
    }
    gw.stop().await;
}

#[tokio::test]
async fn the_get_stream_resumes_and_ids_are_useless_to_another_session() {
    let gw = TestGateway::start(demo_gateway_config()).await;
    let mut a = RawClient::new(gw.url("r"));
    a.initialize().await;
    let get = |c: &RawClient, last: Option<&str>| {
        let mut req = c
            .http
            .get(&c.url)
            .header("accept", "text/event-stream")
            .header("mcp-session-id", c.session.clone().unwrap_or_default())
            .header("mcp-protocol-version", &c.protocol_version);
        if let Some(l) = last {
            req = req.header("last-event-id", l);
        }
        req.send()
    };
    // The priming event gives the GET stream an id before any message.
    let mut resp = get(&a, None).await.expect("GET");
    assert_eq!(resp.status(), 200);
    let mut buf = String::new();
    let first = loop {
        let chunk = resp.chunk().await.expect("read").expect("not ended");
        buf.push_str(&String::from_utf8_lossy(&chunk));
        if let Some(e) = take_events(&mut buf).into_iter().next() {
            break e;
        }
    };
    let primed = first.id.expect("priming event id");
    assert!(first.data.is_empty());
    drop(resp);

    // While nobody listens, a message for the GET stream is recorded, not lost.
    let session = gw
        .gateway
        .tenants()
        .iter()
        .next()
        .expect("tenant")
        .directory
        .all()
        .into_iter()
        .find(|s| Some(s.key.id.as_str()) == a.session.as_deref())
        .expect("live session");
    assert!(session.deliver_unsolicited(bytes::Bytes::from_static(
        br#"{"jsonrpc":"2.0","method":"notifications/message","params":{"level":"info","data":"while away"}}"#
    )));

    // Another session presenting the id gets a fresh stream, not Alice's events.
    let mut b = RawClient::new(gw.url("r"));
    b.initialize().await;
    let mut other = get(&b, Some(&primed)).await.expect("GET");
    assert_eq!(other.status(), 200);
    let mut obuf = String::new();
    let chunk = tokio::time::timeout(Duration::from_millis(500), other.chunk()).await;
    if let Ok(Ok(Some(c))) = chunk {
        obuf.push_str(&String::from_utf8_lossy(&c));
    }
    assert!(!obuf.contains("while away"), "{obuf}");

    // Alice resumes after the priming event and gets the message she missed.
    let mut resumed = get(&a, Some(&primed)).await.expect("GET");
    assert_eq!(resumed.status(), 200);
    let mut buf = String::new();
    let event = loop {
        let chunk = tokio::time::timeout(Duration::from_secs(5), resumed.chunk())
            .await
            .expect("replayed within 5s")
            .expect("read")
            .expect("not ended");
        buf.push_str(&String::from_utf8_lossy(&chunk));
        if let Some(e) = take_events(&mut buf).into_iter().next() {
            break e;
        }
    };
    assert!(event.data.contains("while away"), "{event:?}");
    let (stream, seq) = event
        .id
        .as_deref()
        .and_then(|i| i.rsplit_once('.'))
        .expect("id");
    let (pstream, pseq) = primed.rsplit_once('.').expect("id");
    assert_eq!(stream, pstream, "the same stream continues");
    assert_eq!(
        seq.parse::<u64>().ok(),
        pseq.parse::<u64>().ok().map(|s| s + 1)
    );
    gw.stop().await;
}

#[tokio::test]
async fn random_cuts_resumed_on_other_replicas_through_redis() {
    let redis = crate::support::redis::RedisServer::start().await;
    let mut cfg = demo_gateway_config();
    cfg.sessions.store = switchyard::config::StoreConfig::Redis(switchyard::config::RedisConfig {
        target: switchyard::config::RedisTarget::Single(switchyard::config::Secret::new(
            redis.url(),
        )),
        prefix: "resume".into(),
        timeout: Duration::from_millis(500),
        events: switchyard::config::EventDurability::Durable,
    });
    crate::cluster::migrate(&cfg).await;
    let a = TestGateway::start(cfg.clone()).await;
    let b = TestGateway::start(cfg).await;
    for (seed, version) in [(11u64, "2025-11-25"), (12, "2025-06-18")] {
        let mut c = RawClient::new(a.url("r"));
        c.protocol_version = version.into();
        c.initialize().await;
        // Resume on B (from Redis, while A still produces), then A, then B...
        let seen = cut_and_resume(&c, &[b.url("r"), a.url("r")], seed).await;
        assert!(
            seen.connections > 3,
            "seed {seed}: {} connections",
            seen.connections
        );
    }
    a.stop().await;
    b.stop().await;
}
