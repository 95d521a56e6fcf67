//! The Redis copies of SSE streams (`cluster::RedisEvents`) against a real `redis-server`:
//! many streams written at once arrive complete and in order with one `EXPIRE` per stream
//! (not per write) and a TTL of at least the session's; a stream's events queued together are
//! one entry, which a reader resumes in the middle of; a key that vanished mid-stream comes
//! back with its TTL; a write whose answer was lost is neither lost nor doubled; the TTL is
//! refreshed on a long-lived stream. Durable streams (`events: durable`): the watermark
//! follows what Redis has, waits while Redis does not answer, and nothing is given up on or
//! left out.

#![allow(clippy::unwrap_used)] // a failing Redis operation is the test failure itself

use std::sync::Arc;
use std::time::Duration;

use bytes::Bytes;
use switchyard::cluster::{MirrorQueue, Mirrored, Redis, RedisEvents, Written};
use switchyard::config::EventDurability;
use switchyard::session::{SessionId, SessionKey};

use crate::session_store::redis_config;
use crate::support::redis::RedisServer;

fn session() -> SessionKey {
    SessionKey {
        tenant: "acme".into(),
        user: "alice".into(),
        id: SessionId::generate(),
    }
}

async fn events(server: &RedisServer, prefix: &str, ttl: Duration) -> (Redis, Arc<RedisEvents>) {
    events_with(server, prefix, ttl, EventDurability::Fast).await
}

async fn events_with(
    server: &RedisServer,
    prefix: &str,
    ttl: Duration,
    durability: EventDurability,
) -> (Redis, Arc<RedisEvents>) {
    events_bounded(server, prefix, ttl, durability, 10_000).await
}

/// The copies of at most about `max_len` events per stream.
async fn events_bounded(
    server: &RedisServer,
    prefix: &str,
    ttl: Duration,
    durability: EventDurability,
    max_len: usize,
) -> (Redis, Arc<RedisEvents>) {
    let redis = Redis::connect(&redis_config(server, prefix).await)
        .await
        .unwrap();
    let events = Arc::new(RedisEvents::new(redis.clone(), ttl, max_len, durability));
    (redis, events)
}

/// Waits (at most 10 s) until `queue`'s watermark reaches `seq`.
async fn written_up_to(queue: &MirrorQueue, seq: u64) {
    let reached = crate::support::eventually(Duration::from_secs(10), || {
        queue.written() == Some(Written::UpTo(seq))
    })
    .await;
    assert!(reached, "watermark at {:?}, not {seq}", queue.written());
}

fn event(stream: &str, seq: u64) -> Bytes {
    Bytes::from(format!("id: {stream}.{seq}\ndata: {{\"n\":{seq}}}\n\n"))
}

/// Queues events `seqs` of `stream` (a response, never dropped, unless `droppable`); the one
/// numbered `last` ends the stream.
fn send_events(
    queue: &MirrorQueue,
    stream: &str,
    seqs: std::ops::RangeInclusive<u64>,
    last: Option<u64>,
    droppable: bool,
) {
    for seq in seqs {
        queue.send(
            Mirrored {
                seq,
                framed: event(stream, seq),
                last: Some(seq) == last,
            },
            droppable,
        );
    }
}

/// Calls of one command so far, from `INFO commandstats`.
async fn calls(conn: &mut redis::aio::MultiplexedConnection, command: &str) -> u64 {
    let info: String = redis::cmd("INFO")
        .arg("commandstats")
        .query_async(conn)
        .await
        .unwrap();
    let prefix = format!("cmdstat_{command}:calls=");
    info.lines()
        .find_map(|l| l.strip_prefix(&prefix)?.split(',').next()?.parse().ok())
        .unwrap_or(0)
}

/// Reads the whole stream back (batch by batch): its events' sequence numbers, and whether
/// it ended.
async fn read_all(events: &RedisEvents, session: &SessionKey, stream: &str) -> (Vec<u64>, bool) {
    let (mut seqs, mut after) = (Vec::new(), 0);
    for _ in 0..1_000 {
        let replayed = events
            .read_after(session, stream, after)
            .await
            .unwrap()
            .unwrap_or_else(|| panic!("stream {stream} is in Redis"));
        seqs.extend(replayed.events.iter().map(|e| {
            let text = std::str::from_utf8(e).unwrap();
            let id = text.lines().next().unwrap().rsplit('.').next().unwrap();
            id.parse::<u64>().unwrap()
        }));
        if replayed.done || replayed.last_seq == after {
            return (seqs, replayed.done);
        }
        after = replayed.last_seq;
    }
    panic!("stream {stream}: more than 1,000 batches");
}

#[tokio::test]
async fn streams_written_at_once_arrive_in_order_with_one_ttl_each() {
    let server = RedisServer::start().await;
    let (redis, events) = events(&server, "mir", Duration::from_secs(60)).await;
    let mut conn = server.conn().await;
    let (xadd0, expire0) = (
        calls(&mut conn, "xadd").await,
        calls(&mut conn, "expire").await,
    );
    let session = session();
    const STREAMS: u64 = 20;
    const EVENTS: u64 = 50;
    // Twenty producers at once, each recording its stream's events one at a time.
    let mut producers = Vec::new();
    for s in 0..STREAMS {
        let queue = events.mirror(&session, &format!("r-p{s}"));
        producers.push(tokio::spawn(async move {
            for seq in 1..=EVENTS {
                let m = Mirrored {
                    seq,
                    framed: event(&format!("r-p{s}"), seq),
                    last: seq == EVENTS,
                };
                queue.send(m, seq != EVENTS);
                if seq % 7 == 0 {
                    tokio::task::yield_now().await;
                }
            }
        }));
    }
    for p in producers {
        p.await.unwrap();
    }
    assert!(events.flush(Duration::from_secs(10)).await, "flushed");
    for s in 0..STREAMS {
        let (seqs, done) = read_all(&events, &session, &format!("r-p{s}")).await;
        assert_eq!(seqs, (1..=EVENTS).collect::<Vec<_>>(), "stream {s}");
        assert!(done, "stream {s} ended");
        let key = redis.keys.events(&session, &format!("r-p{s}"));
        let ttl: i64 = redis::cmd("TTL")
            .arg(&key)
            .query_async(&mut conn)
            .await
            .unwrap();
        assert!(
            (59..=75).contains(&ttl),
            "stream {s}: the key outlives its last write by the session TTL (60 s) plus at most a quarter: {ttl}"
        );
    }
    let xadd = calls(&mut conn, "xadd").await - xadd0;
    let expire = calls(&mut conn, "expire").await - expire0;
    assert!(
        (STREAMS..=STREAMS * EVENTS).contains(&xadd),
        "at most one XADD per event: {xadd}"
    );
    assert_eq!(expire, STREAMS, "one EXPIRE per stream, not per write");
}

/// A stream's copy keeps about its last `max_len` events (`MINID`: its entries' ids are their
/// last event's number; Redis trims whole nodes with `~`), and Redis is asked to trim only
/// once the stream could hold more than that: ids rise, so until the `max_len`-th event
/// there is nothing to trim and the writes carry no `MINID` (read back from Redis's slow log,
/// which logs every command here). Events go in bursts of ten, each burst one entry.
#[tokio::test]
async fn a_streams_copy_is_trimmed_only_once_it_could_exceed_its_bound() {
    const BOUND: u64 = 100;
    const EVENTS: u64 = 1_000;
    const BURST: u64 = 10;
    let server = RedisServer::start().await;
    let (redis, events) = events_bounded(
        &server,
        "trim",
        Duration::from_secs(60),
        EventDurability::Durable,
        BOUND as usize,
    )
    .await;
    let mut conn = server.conn().await;
    for (name, value) in [
        ("slowlog-log-slower-than", "0"),
        ("slowlog-max-len", "100000"),
    ] {
        let _: () = redis::cmd("CONFIG")
            .arg("SET")
            .arg(name)
            .arg(value)
            .query_async(&mut conn)
            .await
            .unwrap();
    }
    let _: () = redis::cmd("SLOWLOG")
        .arg("RESET")
        .query_async(&mut conn)
        .await
        .unwrap();
    let session = session();
    let queue = events.mirror(&session, "long");
    for from in (1..=EVENTS).step_by(BURST as usize) {
        let to = from + BURST - 1;
        send_events(&queue, "long", from..=to, Some(EVENTS), false);
        written_up_to(&queue, to).await;
    }

    let (seqs, done) = read_all(&events, &session, "long").await;
    assert!(done);
    let kept = seqs.len() as u64;
    assert!(
        (BOUND..=3 * BOUND).contains(&kept),
        "the copy keeps about its bound ({BOUND}) of {EVENTS} events, not {kept}"
    );
    assert_eq!(
        seqs,
        (EVENTS - kept + 1..=EVENTS).collect::<Vec<_>>(),
        "the last events, in order"
    );
    // Each slow-log entry: id, time, duration, the command's arguments, ...
    let log: Vec<(u64, u64, u64, Vec<Vec<u8>>)> = {
        let raw: Vec<redis::Value> = redis::cmd("SLOWLOG")
            .arg("GET")
            .arg(-1)
            .query_async(&mut conn)
            .await
            .unwrap();
        raw.into_iter()
            .map(|entry| {
                let redis::Value::Array(fields) = entry else {
                    panic!("a slow-log entry is an array: {entry:?}")
                };
                redis::from_redis_value(redis::Value::Array(fields[..4].to_vec())).unwrap()
            })
            .collect()
    };
    let key = redis.keys.events(&session, "long");
    let seq_of = |id: &[u8]| -> u64 { std::str::from_utf8(&id[2..]).unwrap().parse().unwrap() };
    let mut trimming = Vec::new();
    for (_, _, _, args) in &log {
        if !args[0].eq_ignore_ascii_case(b"XADD") || args[1] != key.as_bytes() {
            continue;
        }
        let minid = args.iter().position(|a| a.eq_ignore_ascii_case(b"MINID"));
        // The entry id follows the trimming arguments (`MINID ~ <id>`), if any.
        let ids: Vec<u64> = args
            .iter()
            .filter(|a| a.starts_with(b"0-"))
            .map(|a| seq_of(a))
            .collect();
        let seq = *ids.last().expect("an explicit entry id");
        trimming.push((seq, minid.map(|i| seq_of(&args[i + 2]))));
        assert!(
            !args.iter().any(|a| a.eq_ignore_ascii_case(b"MAXLEN")),
            "trimmed by id"
        );
    }
    trimming.sort_unstable();
    assert_eq!(
        trimming.len() as u64,
        EVENTS / BURST,
        "one XADD per burst in the slow log"
    );
    for (seq, minid) in trimming {
        assert_eq!(
            minid,
            (seq > BOUND).then(|| seq - BOUND + 1),
            "entry {seq}: trimmed to its last {BOUND} events only once the stream could hold more"
        );
    }
}

/// Events of a stream queued at once (here before the writer runs: the test's runtime has one
/// thread) are one entry: one `XADD`, whose `d` is their frames one after the other (what a
/// reader of an earlier build replays) and whose `p` says where each starts. A reader resuming
/// in the middle of the entry gets only the events after its position.
#[tokio::test]
async fn a_streams_events_queued_together_are_one_entry_read_from_any_position() {
    let server = RedisServer::start().await;
    let (redis, events) = events_with(
        &server,
        "grp",
        Duration::from_secs(60),
        EventDurability::Durable,
    )
    .await;
    let mut conn = server.conn().await;
    let xadd0 = calls(&mut conn, "xadd").await;
    let session = session();
    let queue = events.mirror(&session, "r-p1");
    send_events(&queue, "r-p1", 1..=5, Some(5), false);
    written_up_to(&queue, 5).await;
    assert_eq!(calls(&mut conn, "xadd").await - xadd0, 1, "one entry");

    let key = redis.keys.events(&session, "r-p1");
    let raw: redis::streams::StreamRangeReply = redis::cmd("XRANGE")
        .arg(&key)
        .arg("-")
        .arg("+")
        .query_async(&mut conn)
        .await
        .unwrap();
    assert_eq!(raw.ids.len(), 1);
    let entry = &raw.ids[0];
    assert_eq!(entry.id, "0-5", "the id of its last event");
    let field = |name: &str| -> Vec<u8> { entry.get(name).unwrap() };
    let frames: Vec<Bytes> = (1..=5).map(|seq| event("r-p1", seq)).collect();
    assert_eq!(field("d"), frames.concat());
    let parts: Vec<String> = frames
        .iter()
        .zip(1..)
        .map(|(f, seq)| format!("{seq}:{}", f.len()))
        .collect();
    assert_eq!(String::from_utf8(field("p")).unwrap(), parts.join(","));
    assert!(entry.map.contains_key("f"), "it ends the stream");

    for after in 0..=5 {
        let replayed = events
            .read_after(&session, "r-p1", after)
            .await
            .unwrap()
            .expect("in Redis");
        assert_eq!(
            replayed.events,
            frames[after as usize..],
            "resumed after {after}"
        );
        assert_eq!(replayed.last_seq, 5);
        assert_eq!(
            replayed.done,
            after < 5,
            "the end marker is read with the entry"
        );
    }
}

#[tokio::test]
async fn a_key_gone_mid_stream_comes_back_with_its_ttl() {
    let server = RedisServer::start().await;
    let (redis, events) = events(&server, "gone", Duration::from_secs(60)).await;
    let mut conn = server.conn().await;
    let session = session();
    let queue = events.mirror(&session, "r-p1");
    let key = redis.keys.events(&session, "r-p1");
    send_events(&queue, "r-p1", 1..=2, None, false);
    assert!(events.flush(Duration::from_secs(5)).await);
    // Deleted (or evicted) behind the writer's back, within the TTL it set.
    let _: () = redis::cmd("DEL")
        .arg(&key)
        .query_async(&mut conn)
        .await
        .unwrap();
    send_events(&queue, "r-p1", 3..=4, Some(4), false);
    assert!(events.flush(Duration::from_secs(5)).await);
    let (seqs, done) = read_all(&events, &session, "r-p1").await;
    assert_eq!(
        seqs,
        vec![3, 4],
        "the events after the deletion are written"
    );
    assert!(done);
    let ttl: i64 = redis::cmd("TTL")
        .arg(&key)
        .query_async(&mut conn)
        .await
        .unwrap();
    assert!(ttl > 59, "the recreated key has a TTL again: {ttl}");
}

#[tokio::test]
async fn a_write_whose_answer_is_lost_is_neither_lost_nor_doubled() {
    let server = RedisServer::start().await;
    // The gateway's Redis timeout here is 500 ms; writes are held for 700 ms, so the first
    // round trip gets no answer in time, is applied later, and is sent again.
    let (_redis, events) = events(&server, "lost", Duration::from_secs(60)).await;
    let mut conn = server.conn().await;
    let session = session();
    let queue = events.mirror(&session, "r-p1");
    let _: () = redis::cmd("CLIENT")
        .arg("PAUSE")
        .arg(700)
        .arg("WRITE")
        .query_async(&mut conn)
        .await
        .unwrap();
    send_events(&queue, "r-p1", 1..=3, None, false);
    tokio::time::sleep(Duration::from_millis(550)).await;
    // Queued while the first round trip is being retried: they follow it.
    send_events(&queue, "r-p1", 4..=6, Some(6), false);
    assert!(events.flush(Duration::from_secs(10)).await, "flushed");
    let (seqs, done) = read_all(&events, &session, "r-p1").await;
    assert_eq!(
        seqs,
        (1..=6).collect::<Vec<_>>(),
        "every event once, in order"
    );
    assert!(done);
}

#[tokio::test]
async fn a_long_lived_stream_refreshes_its_ttl_at_most_every_quarter_ttl() {
    let server = RedisServer::start().await;
    // TTL 4 s: the key is set to expire 5 s after it is created, refreshed after 1 s.
    let (redis, events) = events(&server, "long", Duration::from_secs(4)).await;
    let mut conn = server.conn().await;
    let session = session();
    let queue = events.mirror(&session, "r-g1");
    let key = redis.keys.events(&session, "r-g1");
    let expire0 = calls(&mut conn, "expire").await;
    let mut seq = 0;
    let mut send = |n: u64| {
        send_events(&queue, "r-g1", seq + 1..=seq + n, None, true);
        seq += n;
    };
    send(3);
    assert!(events.flush(Duration::from_secs(5)).await);
    send(3);
    assert!(events.flush(Duration::from_secs(5)).await);
    assert_eq!(
        calls(&mut conn, "expire").await - expire0,
        1,
        "within a quarter TTL: no refresh"
    );
    tokio::time::sleep(Duration::from_millis(2_100)).await;
    send(1);
    assert!(events.flush(Duration::from_secs(5)).await);
    assert_eq!(
        calls(&mut conn, "expire").await - expire0,
        2,
        "refreshed after a quarter TTL"
    );
    let pttl: i64 = redis::cmd("PTTL")
        .arg(&key)
        .query_async(&mut conn)
        .await
        .unwrap();
    assert!(
        pttl > 4_000,
        "the key outlives the last write by at least the TTL: {pttl} ms"
    );
    let (seqs, _) = read_all(&events, &session, "r-g1").await;
    assert_eq!(seqs, (1..=7).collect::<Vec<_>>());
}

#[tokio::test]
async fn a_durable_watermark_waits_for_redis_and_nothing_is_given_up_or_left_out() {
    let server = RedisServer::start().await;
    let ttl = Duration::from_secs(60);
    let (_r1, durable) = events_with(&server, "dur", ttl, EventDurability::Durable).await;
    let (_r2, fast) = events_with(&server, "fst", ttl, EventDurability::Fast).await;
    let mut conn = server.conn().await;
    let session = session();
    let d = durable.mirror(&session, "r-p1");
    let f = fast.mirror(&session, "r-p1");
    assert_eq!(f.written(), None, "fast streams have no watermark");
    send_events(&d, "r-p1", 1..=3, None, false);
    written_up_to(&d, 3).await;

    // Redis takes no writes for 2.5 s: the Redis timeout is 500 ms, so a fast stream's events
    // would have had their three attempts long before it answers again.
    let _: () = redis::cmd("CLIENT")
        .arg("PAUSE")
        .arg(2_500)
        .arg("WRITE")
        .query_async(&mut conn)
        .await
        .unwrap();
    // A flood of notifications beyond the fast mode's 4,096 queued, then the response.
    send_events(&d, "r-p1", 4..=5_003, None, true);
    send_events(&d, "r-p1", 5_004..=5_004, Some(5_004), false);
    tokio::time::sleep(Duration::from_millis(2_000)).await;
    assert_eq!(
        d.written(),
        Some(Written::UpTo(3)),
        "nothing is counted written while Redis does not answer"
    );
    written_up_to(&d, 5_004).await;
    assert!(durable.flush(Duration::from_secs(10)).await, "flushed");
    let (seqs, done) = read_all(&durable, &session, "r-p1").await;
    assert_eq!(
        seqs,
        (1..=5_004).collect::<Vec<_>>(),
        "every durable event, the notifications too, once, in order"
    );
    assert!(done);
}
