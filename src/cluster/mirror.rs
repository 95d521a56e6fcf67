//! The replica's one writer of its SSE streams' Redis copies: it takes the events of every
//! stream queued at that moment into one pipeline per round trip (`XADD <key> 0-<seq>`, one
//! entry per event, in each stream's order), and sets a stream's time-to-live only when it is
//! created and then at most every quarter TTL, instead of with every write.
//!
//! Durability: an event leaves the queue only once Redis has it (or after `WRITE_ATTEMPTS`
//! failed round trips, with a warning: it stays in the local log). A round trip that failed
//! without an answer may have been applied, so it is sent again as it was: an entry already
//! there is refused by its id and counts as written. A key is only ever created by a pipeline
//! that also sets its TTL: later writes use `NOMKSTREAM`, and one that finds the key gone
//! (expired, deleted) is sent again with the TTL.
//!
//! Durable streams (`events: durable`) have a [`Watermark`]: after each round trip's answer the
//! writer advances it to the stream's last event that Redis has with every one before it, and
//! readers of the local log are given nothing beyond it. Their events are never given up on
//! while Redis does not answer (they are retried, the pause growing to `MAX_PAUSE`); an event
//! that can no longer be written in order (a later one of its stream got in first, after a
//! per-entry error) breaks the stream's watermark: its readers end with a `retry` hint.

use std::sync::Arc;
use std::sync::atomic::{AtomicBool, AtomicU64, AtomicUsize, Ordering};
use std::time::{Duration, Instant};

use bytes::Bytes;
use redis::Value;
use tokio::sync::{Notify, mpsc};

use super::Redis;

/// One event on its way to Redis.
#[derive(Debug)]
pub struct Mirrored {
    pub seq: u64,
    /// The framed SSE event; empty for the end-of-stream marker.
    pub framed: Bytes,
    pub last: bool,
}

/// What the writer shares with the queues feeding it.
pub(super) struct Shared {
    pub redis: Redis,
    /// What every `EXPIRE` sets: the session TTL plus `refresh`, so a key outlives its last
    /// write by at least the session TTL (and at most `refresh` more).
    pub expire_secs: u64,
    /// How long a stream's TTL stands before a write refreshes it (a quarter of the TTL).
    pub refresh: Duration,
    pub max_len: usize,
    /// Events queued and not yet written, over all streams (drained before shutdown).
    pub pending: AtomicUsize,
    pub drained: Notify,
    /// The origin of the streams' `ttl_set_at` clocks.
    epoch: Instant,
}

impl Shared {
    pub fn new(redis: Redis, ttl: Duration, max_len: usize) -> Shared {
        let ttl_secs = ttl.as_secs().max(1);
        let refresh_secs = (ttl_secs / 4).max(1);
        Shared {
            redis,
            expire_secs: ttl_secs + refresh_secs,
            refresh: Duration::from_secs(refresh_secs),
            max_len,
            pending: AtomicUsize::new(0),
            drained: Notify::new(),
            epoch: Instant::now(),
        }
    }

    /// Milliseconds since `epoch`, at least 1 (0 means "never" in `ttl_set_at`).
    fn now_ms(&self) -> u64 {
        u64::try_from(self.epoch.elapsed().as_millis())
            .unwrap_or(u64::MAX)
            .max(1)
    }

    /// `n` events are done with (written or given up on).
    fn done(&self, n: usize) {
        if n > 0 && self.pending.fetch_sub(n, Ordering::AcqRel) == n {
            self.drained.notify_waiters();
        }
    }
}

/// One stream's Redis copy, as the writer and its queue see it.
pub(super) struct StreamCopy {
    pub key: String,
    /// This stream's events queued and not yet written (bounds a flood's notifications).
    pub queued: AtomicUsize,
    /// When the writer last sent this key's `EXPIRE` (`Shared::now_ms`), 0 if it has not
    /// (or the key may be gone). Only the writer touches it.
    ttl_set_at: AtomicU64,
    /// How far the copy is written, for a durable stream; `None` in fast mode.
    pub watermark: Option<Watermark>,
    /// The lowest sequence number of this stream still held by the writer after the current
    /// round trip (0: none). Only the writer touches it, within one round trip.
    held_from: AtomicU64,
    /// The highest sequence number of this stream written so far (durable streams). Only the
    /// writer touches it.
    written_max: AtomicU64,
}

impl StreamCopy {
    pub fn new(key: String, durable: bool) -> StreamCopy {
        StreamCopy {
            key,
            queued: AtomicUsize::new(0),
            ttl_set_at: AtomicU64::new(0),
            watermark: durable.then(Watermark::default),
            held_from: AtomicU64::new(0),
            written_max: AtomicU64::new(0),
        }
    }
}

/// How far a durable stream's copy is written: every event up to `written` (and none after
/// it is known to be) is in Redis. The writer advances it when a round trip's answer arrives;
/// the stream's readers wait on `changed`.
#[derive(Default)]
pub(super) struct Watermark {
    pub written: AtomicU64,
    /// An event of the stream can no longer be written in order: `written` stays where it is.
    pub broken: AtomicBool,
    pub changed: Notify,
}

impl Watermark {
    /// Once broken, a watermark stays where it is.
    fn advance(&self, seq: u64) {
        if self.broken.load(Ordering::Acquire) {
            return;
        }
        if self.written.fetch_max(seq, Ordering::AcqRel) < seq {
            self.changed.notify_waiters();
        }
    }

    fn break_off(&self) {
        if !self.broken.swap(true, Ordering::AcqRel) {
            self.changed.notify_waiters();
        }
    }
}

/// An event in the writer's queue.
pub(super) struct Queued {
    pub stream: Arc<StreamCopy>,
    pub event: Mirrored,
}

/// Attempts per event before it is given up on (it stays in the local log); a durable
/// stream's events are never given up on.
pub(super) const WRITE_ATTEMPTS: u32 = 3;
/// The longest pause between round trips while Redis does not answer.
const MAX_PAUSE: Duration = Duration::from_secs(1);
/// Most events written per round trip.
const WRITE_BATCH: usize = 1024;

/// An event the writer holds.
struct Entry {
    queued: Queued,
    /// Round trips that failed for it.
    failures: u32,
    /// A round trip that carried it got no answer: it may be in Redis already.
    maybe_written: bool,
}

/// Writes what arrives on `rx` until every sender is gone and the queue is empty.
pub(super) async fn run(shared: Arc<Shared>, mut rx: mpsc::UnboundedReceiver<Queued>) {
    let mut todo: Vec<Entry> = Vec::with_capacity(WRITE_BATCH);
    let mut arrived: Vec<Queued> = Vec::with_capacity(WRITE_BATCH);
    loop {
        // Block only when nothing is left over from the last round trip; else take what has
        // been queued since, behind it (a stream's events stay in order).
        let room = WRITE_BATCH.saturating_sub(todo.len());
        if todo.is_empty() {
            if rx.recv_many(&mut arrived, room).await == 0 {
                return;
            }
        } else {
            while arrived.len() < room {
                match rx.try_recv() {
                    Ok(q) => arrived.push(q),
                    Err(_) => break,
                }
            }
        }
        todo.extend(arrived.drain(..).map(|queued| Entry {
            queued,
            failures: 0,
            maybe_written: false,
        }));
        if let Some(pause) = write(&shared, &mut todo).await {
            tokio::time::sleep(pause).await;
        }
    }
}

/// Sends `todo` and keeps in it what is still to be written: in one pipeline on one primary;
/// on a cluster in one pipeline per session (a pipeline must stay on one slot, and a session's
/// streams share its hash tag), all sent at once, so the writes to one node go out back to back
/// on its connection and the whole takes about one round trip.
async fn write(shared: &Shared, todo: &mut Vec<Entry>) -> Option<Duration> {
    if !shared.redis.is_cluster() {
        return round_trip(shared, todo).await;
    }
    let mut groups: Vec<Vec<Entry>> = Vec::new();
    // A tag is copied once per session, not once per event.
    let mut index: std::collections::HashMap<String, usize> = std::collections::HashMap::new();
    for e in todo.drain(..) {
        let tag = hash_tag(&e.queued.stream.key);
        let i = match index.get(tag) {
            Some(&i) => i,
            None => {
                index.insert(tag.to_owned(), groups.len());
                groups.push(Vec::new());
                groups.len() - 1
            }
        };
        groups[i].push(e);
    }
    let pauses =
        futures_util::future::join_all(groups.iter_mut().map(|g| round_trip(shared, g))).await;
    todo.extend(groups.into_iter().flatten());
    pauses.into_iter().flatten().max()
}

/// The part of a key Redis Cluster hashes: the first `{...}` with something inside, else the
/// whole key.
fn hash_tag(key: &str) -> &str {
    key.split_once('{')
        .and_then(|(_, rest)| rest.split_once('}'))
        .map(|(tag, _)| tag)
        .filter(|tag| !tag.is_empty())
        .unwrap_or(key)
}

/// A stream entry id, `0-<seq>`, written without `core::fmt` (at most 22 bytes).
struct EntryId {
    bytes: [u8; 22],
    len: usize,
}

impl EntryId {
    fn of(seq: u64) -> EntryId {
        let mut digits = itoa::Buffer::new();
        let digits = digits.format(seq).as_bytes();
        let mut bytes = [0u8; 22];
        bytes[..2].copy_from_slice(b"0-");
        bytes[2..2 + digits.len()].copy_from_slice(digits);
        EntryId {
            bytes,
            len: 2 + digits.len(),
        }
    }

    fn as_bytes(&self) -> &[u8] {
        &self.bytes[..self.len]
    }
}

/// Sends `todo` in one pipeline and keeps in it what is still to be written. Returns how long
/// to wait before the next attempt when Redis did not answer, or refused an event kept.
async fn round_trip(shared: &Shared, todo: &mut Vec<Entry>) -> Option<Duration> {
    let now = shared.now_ms();
    let refresh_ms = u64::try_from(shared.refresh.as_millis()).unwrap_or(u64::MAX);
    let mut pipe = redis::Pipeline::with_capacity(todo.len() + 1);
    pipe.ignore_errors();
    // The streams whose TTL this round trip sets, after their events.
    let mut expiring: Vec<Arc<StreamCopy>> = Vec::new();
    for e in todo.iter() {
        let stream = &e.queued.stream;
        let set = stream.ttl_set_at.load(Ordering::Relaxed);
        // The first event of a stream due for its TTL may create the key; its others here
        // follow it in the pipeline, so they find the key.
        let create = set == 0 || now.saturating_sub(set) >= refresh_ms;
        if create {
            stream.ttl_set_at.store(now, Ordering::Relaxed);
            expiring.push(stream.clone());
        }
        let framed = e.queued.event.framed.as_ref();
        // Sized at once for its arguments (not grown as each is added).
        let mut add = redis::Cmd::with_capacity(12, stream.key.len() + framed.len() + 64);
        add.arg("XADD").arg(&stream.key);
        if !create {
            add.arg("NOMKSTREAM");
        }
        // Entry ids are `0-<seq>` and rise within a key, so a stream holds at most `seq`
        // entries once this one is in: until `max_len`, there is nothing to trim and Redis is
        // not asked to look (three arguments fewer to pack and parse on most writes).
        if usize::try_from(e.queued.event.seq).map_or(true, |seq| seq > shared.max_len) {
            add.arg("MAXLEN").arg("~").arg(shared.max_len);
        }
        add.arg(EntryId::of(e.queued.event.seq).as_bytes())
            .arg("d")
            .arg(framed);
        if e.queued.event.last {
            add.arg("f").arg(1);
        }
        pipe.add_command(add);
    }
    for stream in &expiring {
        pipe.cmd("EXPIRE").arg(&stream.key).arg(shared.expire_secs);
    }
    let mut conn = shared.redis.conn.clone();
    let replies = shared
        .redis
        .run("event_write", async move {
            pipe.query_async::<Vec<Value>>(&mut conn).await
        })
        .await
        .ok()
        .filter(|r| r.len() == todo.len() + expiring.len());
    let Some(replies) = replies else {
        // No answer: any of it may have been applied, all of it is sent again.
        for stream in &expiring {
            stream.ttl_set_at.store(0, Ordering::Relaxed);
        }
        let mut worst = 0;
        for e in todo.iter_mut() {
            e.failures += 1;
            e.maybe_written = true;
            worst = worst.max(e.failures);
        }
        give_up_exhausted(shared, todo);
        return (!todo.is_empty())
            .then(|| Duration::from_millis(100 * u64::from(worst)).min(MAX_PAUSE));
    };
    let (adds, expires) = replies.split_at(todo.len());
    for (stream, reply) in expiring.iter().zip(expires) {
        if !matches!(reply, Value::Int(1)) {
            stream.ttl_set_at.store(0, Ordering::Relaxed);
        }
    }
    let mut finished = 0;
    let mut lost = 0;
    // Durable streams' events written by this round trip, in order.
    let mut written: Vec<(Arc<StreamCopy>, u64)> = Vec::new();
    // The most failures of an event Redis refused (0: none was).
    let mut refused = 0;
    let mut replies = adds.iter();
    todo.retain_mut(|e| {
        let keep = match replies.next() {
            // `NOMKSTREAM` and the key is gone: sent again with the TTL.
            Some(Value::Nil) => {
                e.queued.stream.ttl_set_at.store(0, Ordering::Relaxed);
                true
            }
            Some(Value::ServerError(err)) if already_there(err) => {
                // Sent again after a lost answer: it is there. Otherwise a later event of the
                // stream got in first, and this one cannot follow it.
                if !e.maybe_written {
                    lost += 1;
                    if let Some(w) = &e.queued.stream.watermark {
                        w.break_off();
                    }
                }
                false
            }
            Some(Value::ServerError(err)) => {
                tracing::debug!(error = %err, "event not yet written to Redis; retrying");
                e.failures += 1;
                refused = refused.max(e.failures);
                true
            }
            _ => false,
        };
        if !keep {
            finished += 1;
            e.queued.stream.queued.fetch_sub(1, Ordering::AcqRel);
            if e.queued.stream.watermark.is_some() {
                written.push((e.queued.stream.clone(), e.queued.event.seq));
            }
        }
        keep
    });
    advance_watermarks(todo, &written);
    if lost > 0 {
        tracing::warn!(
            events = lost,
            "SSE events could not be written to Redis; only this replica can replay them"
        );
    }
    shared.done(finished);
    give_up_exhausted(shared, todo);
    // Refused events still held (durable ones): not at once again.
    (refused > 0 && !todo.is_empty())
        .then(|| Duration::from_millis(100 * u64::from(refused)).min(MAX_PAUSE))
}

/// Advances the watermark of every durable stream with events in `written` to its highest
/// event written so far, but not past an event of the stream still in `todo` (held for
/// another attempt): a watermark covers only events with every one before them in Redis.
fn advance_watermarks(todo: &[Entry], written: &[(Arc<StreamCopy>, u64)]) {
    if written.is_empty() {
        return;
    }
    for (stream, seq) in written {
        stream.written_max.fetch_max(*seq, Ordering::Relaxed);
    }
    // `todo` is in each stream's order: its first entry of a stream is the lowest held.
    for e in todo {
        let stream = &e.queued.stream;
        if stream.watermark.is_some() && stream.held_from.load(Ordering::Relaxed) == 0 {
            stream
                .held_from
                .store(e.queued.event.seq, Ordering::Relaxed);
        }
    }
    for (stream, _) in written {
        let Some(w) = &stream.watermark else { continue };
        let up_to = stream.written_max.load(Ordering::Relaxed);
        match stream.held_from.load(Ordering::Relaxed) {
            0 => w.advance(up_to),
            held => w.advance(up_to.min(held - 1)),
        }
    }
    for e in todo {
        e.queued.stream.held_from.store(0, Ordering::Relaxed);
    }
}

/// Drops the events that failed `WRITE_ATTEMPTS` times (they stay in the local log); a
/// durable stream's are kept until written.
fn give_up_exhausted(shared: &Shared, todo: &mut Vec<Entry>) {
    let before = todo.len();
    todo.retain(|e| {
        let keep = e.failures < WRITE_ATTEMPTS || e.queued.stream.watermark.is_some();
        if !keep {
            e.queued.stream.queued.fetch_sub(1, Ordering::AcqRel);
        }
        keep
    });
    let given_up = before - todo.len();
    if given_up > 0 {
        tracing::warn!(
            events = given_up,
            "SSE events could not be written to Redis; only this replica can replay them"
        );
        shared.done(given_up);
    }
}

/// The refusal of an entry id not above the stream's last one: what a write sent again
/// after a lost answer gets when the first one was applied.
fn already_there(err: &redis::ServerError) -> bool {
    err.to_string()
        .contains("equal or smaller than the target stream top item")
}

#[cfg(test)]
mod tests {
    use super::*;

    fn entry(stream: &Arc<StreamCopy>, seq: u64) -> Entry {
        Entry {
            queued: Queued {
                stream: stream.clone(),
                event: Mirrored {
                    seq,
                    framed: Bytes::new(),
                    last: false,
                },
            },
            failures: 0,
            maybe_written: false,
        }
    }

    fn written(stream: &StreamCopy) -> u64 {
        let w = stream.watermark.as_ref().map(|w| &w.written);
        w.map_or(0, |w| w.load(Ordering::Acquire))
    }

    #[test]
    fn a_watermark_covers_only_events_with_every_one_before_them_written() {
        let a = Arc::new(StreamCopy::new("a".into(), true));
        let b = Arc::new(StreamCopy::new("b".into(), true));
        let fast = Arc::new(StreamCopy::new("f".into(), false));
        // a: 1 and 2 written, 3 held (refused), 4 written; b: 1 written.
        let held = vec![entry(&a, 3)];
        let done = vec![
            (a.clone(), 1),
            (a.clone(), 2),
            (b.clone(), 1),
            (a.clone(), 4),
            (fast.clone(), 7),
        ];
        advance_watermarks(&held, &done);
        assert_eq!((written(&a), written(&b)), (2, 1));
        assert!(fast.watermark.is_none());
        // 3 is written on the next round trip: 4 was already, so a reaches 4.
        advance_watermarks(&[], &[(a.clone(), 3)]);
        assert_eq!(written(&a), 4);
        advance_watermarks(&[], &[(a.clone(), 5)]);
        assert_eq!(written(&a), 5);
        assert_eq!(
            a.held_from.load(Ordering::Relaxed),
            0,
            "reset for the next round trip"
        );
    }

    #[test]
    fn a_broken_watermark_stays_where_it_is() {
        let a = Arc::new(StreamCopy::new("a".into(), true));
        advance_watermarks(&[], &[(a.clone(), 2)]);
        let w = a.watermark.as_ref().expect("durable");
        w.break_off();
        advance_watermarks(&[], &[(a.clone(), 9)]);
        assert_eq!(written(&a), 2);
        assert!(w.broken.load(Ordering::Acquire));
    }

    #[test]
    fn entry_ids_are_zero_dash_the_sequence_number() {
        for seq in [0, 7, 1_000, u64::MAX] {
            assert_eq!(EntryId::of(seq).as_bytes(), format!("0-{seq}").as_bytes());
        }
    }

    #[test]
    fn hash_tags_follow_redis_cluster_rules() {
        assert_eq!(hash_tag("sy:v1:ev:{a:u:s}:0"), "a:u:s");
        assert_eq!(hash_tag("sy:v1:ev:{a:u:s}:{x}"), "a:u:s");
        assert_eq!(hash_tag("plain"), "plain");
        assert_eq!(hash_tag("a{}b"), "a{}b");
        assert_eq!(hash_tag("a{b"), "a{b");
    }
}
