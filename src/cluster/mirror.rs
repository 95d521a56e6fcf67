//! The replica's one writer of its SSE streams' Redis copies: it takes the events of every
//! stream queued at that moment into one pipeline per round trip, and sets a stream's
//! time-to-live only when it is created and then at most every quarter TTL, instead of with
//! every write.
//!
//! Entries: a stream's events queued together (a tool's progress notifications and its
//! response, say) go into one entry, `XADD <key> 0-<seq of the last> d <the events' frames, one
//! after the other> p <seq>:<length>,...` (at most `GROUP_EVENTS` events and `GROUP_BYTES`
//! bytes); a lone event is `XADD <key> 0-<seq> d <frame>`. `d` is the SSE text to replay
//! either way, and `p` says where each event of a group starts, so a reader resuming in the
//! middle of one leaves out what the client has (see `events.rs`).
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
/// Most events in one stream entry.
const GROUP_EVENTS: usize = 64;
/// A stream entry takes no further event once its frames are this long.
const GROUP_BYTES: usize = 64 * 1024;

/// One stream entry the writer holds: events of one stream, in order, that arrived together.
/// An entry is sent again as it was after a failed round trip (its id is its last event's).
struct Entry {
    stream: Arc<StreamCopy>,
    first: Mirrored,
    /// The events after `first`, for a group.
    more: Vec<Mirrored>,
    /// The frames' length, all events together.
    bytes: usize,
    /// Round trips that failed for it.
    failures: u32,
    /// A round trip that carried it got no answer: it may be in Redis already.
    maybe_written: bool,
}

impl Entry {
    fn new(stream: Arc<StreamCopy>, first: Mirrored) -> Entry {
        Entry {
            stream,
            bytes: first.framed.len(),
            first,
            more: Vec::new(),
            failures: 0,
            maybe_written: false,
        }
    }

    /// Adds the next event of the entry's stream, unless the entry is full.
    fn take(&mut self, event: Mirrored) -> Result<(), Mirrored> {
        if self.more.len() + 1 >= GROUP_EVENTS || self.bytes >= GROUP_BYTES {
            return Err(event);
        }
        self.bytes += event.framed.len();
        self.more.push(event);
        Ok(())
    }

    fn events(&self) -> impl Iterator<Item = &Mirrored> {
        std::iter::once(&self.first).chain(&self.more)
    }

    fn count(&self) -> usize {
        1 + self.more.len()
    }

    fn last(&self) -> &Mirrored {
        self.more.last().unwrap_or(&self.first)
    }
}

/// A group's `d`: its events' frames, one after the other, written straight into the command.
struct Frames<'a>(&'a Entry);

impl redis::ToRedisArgs for Frames<'_> {
    fn write_redis_args<W: ?Sized + redis::RedisWrite>(&self, out: &mut W) {
        let mut w = out.writer_for_next_arg();
        for e in self.0.events() {
            // Into the command's own buffer: cannot fail.
            let _ = std::io::Write::write_all(&mut w, &e.framed);
        }
    }
}

/// A group's `p`: `<seq>:<length>` of each event, comma-separated.
struct Parts<'a>(&'a Entry);

impl redis::ToRedisArgs for Parts<'_> {
    fn write_redis_args<W: ?Sized + redis::RedisWrite>(&self, out: &mut W) {
        let mut w = out.writer_for_next_arg();
        for (i, e) in self.0.events().enumerate() {
            let mut seq = itoa::Buffer::new();
            let mut len = itoa::Buffer::new();
            let sep: &[u8] = if i == 0 { b"" } else { b"," };
            for piece in [
                sep,
                seq.format(e.seq).as_bytes(),
                b":",
                len.format(e.framed.len()).as_bytes(),
            ] {
                let _ = std::io::Write::write_all(&mut w, piece);
            }
        }
    }
}

/// Writes what arrives on `rx` until every sender is gone and the queue is empty.
pub(super) async fn run(shared: Arc<Shared>, mut rx: mpsc::UnboundedReceiver<Queued>) {
    let mut todo: Vec<Entry> = Vec::with_capacity(WRITE_BATCH);
    let mut arrived: Vec<Queued> = Vec::with_capacity(WRITE_BATCH);
    // This round's open entry of each stream (its address → an index into `todo`).
    let mut open = foldhash::HashMap::default();
    loop {
        // Block only when nothing is left over from the last round trip; else take what has
        // been queued since, behind it (a stream's events stay in order).
        let room = WRITE_BATCH.saturating_sub(todo.iter().map(Entry::count).sum());
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
        group(&mut todo, &mut arrived, &mut open);
        if let Some(pause) = write(&shared, &mut todo).await {
            tokio::time::sleep(pause).await;
        }
    }
}

/// Appends the events of `arrived` to `todo`, a stream's events that arrived together in one
/// entry (in their order) while it has room. Entries held from an earlier round trip are not
/// added to: they are sent again as they were.
fn group(
    todo: &mut Vec<Entry>,
    arrived: &mut Vec<Queued>,
    open: &mut foldhash::HashMap<usize, usize>,
) {
    for queued in arrived.drain(..) {
        let stream = Arc::as_ptr(&queued.stream).addr();
        let event = match open.get(&stream) {
            Some(&i) => match todo[i].take(queued.event) {
                Ok(()) => continue,
                Err(event) => event,
            },
            None => queued.event,
        };
        open.insert(stream, todo.len());
        todo.push(Entry::new(queued.stream, event));
    }
    open.clear();
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
        let tag = hash_tag(&e.stream.key);
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
        let stream = &e.stream;
        let set = stream.ttl_set_at.load(Ordering::Relaxed);
        // The first entry of a stream due for its TTL may create the key; its others here
        // follow it in the pipeline, so they find the key.
        let create = set == 0 || now.saturating_sub(set) >= refresh_ms;
        if create {
            stream.ttl_set_at.store(now, Ordering::Relaxed);
            expiring.push(stream.clone());
        }
        let last = e.last();
        let group = !e.more.is_empty();
        // Sized at once for its arguments (not grown as each is added).
        // `p`: at most 20 digits, a colon, at most 20 digits and a comma per event.
        let parts = if group { 42 * e.count() } else { 0 };
        let mut add = redis::Cmd::with_capacity(14, stream.key.len() + e.bytes + parts + 96);
        add.arg("XADD").arg(&stream.key);
        if !create {
            add.arg("NOMKSTREAM");
        }
        // The copy keeps the events numbered above `last.seq - max_len` (entry ids are `0-<seq
        // of an entry's last event>`; `~`: Redis trims whole nodes). Ids rise within a key, so
        // until the `max_len`-th event there is nothing to trim and Redis is not asked to
        // look (three arguments fewer to pack and parse on most writes).
        if let Some(keep_from) = last
            .seq
            .checked_sub(u64::try_from(shared.max_len).unwrap_or(u64::MAX))
            .filter(|&over| over > 0)
        {
            add.arg("MINID")
                .arg("~")
                .arg(EntryId::of(keep_from + 1).as_bytes());
        }
        add.arg(EntryId::of(last.seq).as_bytes()).arg("d");
        if group {
            add.arg(Frames(e)).arg("p").arg(Parts(e));
        } else {
            add.arg(e.first.framed.as_ref());
        }
        if last.last {
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
                e.stream.ttl_set_at.store(0, Ordering::Relaxed);
                true
            }
            Some(Value::ServerError(err)) if already_there(err) => {
                // Sent again after a lost answer: it is there. Otherwise a later event of the
                // stream got in first, and this one cannot follow it.
                if !e.maybe_written {
                    lost += e.count();
                    if let Some(w) = &e.stream.watermark {
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
            finished += e.count();
            e.stream.queued.fetch_sub(e.count(), Ordering::AcqRel);
            if e.stream.watermark.is_some() {
                written.push((e.stream.clone(), e.last().seq));
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
        let stream = &e.stream;
        if stream.watermark.is_some() && stream.held_from.load(Ordering::Relaxed) == 0 {
            stream.held_from.store(e.first.seq, Ordering::Relaxed);
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
        e.stream.held_from.store(0, Ordering::Relaxed);
    }
}

/// Drops the events that failed `WRITE_ATTEMPTS` times (they stay in the local log); a
/// durable stream's are kept until written.
fn give_up_exhausted(shared: &Shared, todo: &mut Vec<Entry>) {
    let mut given_up = 0;
    todo.retain(|e| {
        let keep = e.failures < WRITE_ATTEMPTS || e.stream.watermark.is_some();
        if !keep {
            given_up += e.count();
            e.stream.queued.fetch_sub(e.count(), Ordering::AcqRel);
        }
        keep
    });
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

    fn queued(stream: &Arc<StreamCopy>, seq: u64, framed: &'static str) -> Queued {
        Queued {
            stream: stream.clone(),
            event: Mirrored {
                seq,
                framed: Bytes::from_static(framed.as_bytes()),
                last: false,
            },
        }
    }

    fn entry(stream: &Arc<StreamCopy>, seq: u64) -> Entry {
        let q = queued(stream, seq, "");
        Entry::new(q.stream, q.event)
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

    /// The events of each entry: (stream key, sequence numbers).
    fn entries(todo: &[Entry]) -> Vec<(&str, Vec<u64>)> {
        todo.iter()
            .map(|e| (e.stream.key.as_str(), e.events().map(|m| m.seq).collect()))
            .collect()
    }

    #[test]
    fn a_streams_events_that_arrive_together_are_one_entry_in_order() {
        let a = Arc::new(StreamCopy::new("a".into(), true));
        let b = Arc::new(StreamCopy::new("b".into(), false));
        let mut open = foldhash::HashMap::default();
        // Held from an earlier round trip: sent again as it was, not added to.
        let mut todo = vec![entry(&a, 1)];
        let mut arrived = vec![
            queued(&a, 2, "x"),
            queued(&b, 1, "y"),
            queued(&a, 3, "zz"),
            queued(&b, 2, ""),
        ];
        group(&mut todo, &mut arrived, &mut open);
        assert_eq!(
            entries(&todo),
            [("a", vec![1]), ("a", vec![2, 3]), ("b", vec![1, 2])]
        );
        assert_eq!(todo[1].bytes, 3);
        assert!(arrived.is_empty() && open.is_empty());
        // The next round's arrivals start entries of their own.
        let mut arrived = vec![queued(&a, 4, "w")];
        group(&mut todo, &mut arrived, &mut open);
        assert_eq!(entries(&todo)[3], ("a", vec![4]));
    }

    #[test]
    fn an_entry_holds_at_most_its_bound_of_events_and_bytes() {
        let a = Arc::new(StreamCopy::new("a".into(), false));
        let mut open = foldhash::HashMap::default();
        let mut todo = Vec::new();
        let mut arrived: Vec<Queued> = (1..=GROUP_EVENTS as u64 * 2 + 1)
            .map(|seq| queued(&a, seq, "e"))
            .collect();
        group(&mut todo, &mut arrived, &mut open);
        let sizes: Vec<usize> = todo.iter().map(Entry::count).collect();
        assert_eq!(sizes, [GROUP_EVENTS, GROUP_EVENTS, 1]);
        let seqs: Vec<u64> = todo
            .iter()
            .flat_map(|e| e.events().map(|m| m.seq))
            .collect();
        assert_eq!(seqs, (1..=GROUP_EVENTS as u64 * 2 + 1).collect::<Vec<_>>());

        static BIG: [u8; GROUP_BYTES] = [b'x'; GROUP_BYTES];
        let big = |seq| Queued {
            stream: a.clone(),
            event: Mirrored {
                seq,
                framed: Bytes::from_static(&BIG),
                last: false,
            },
        };
        let mut todo = Vec::new();
        let mut arrived = vec![queued(&a, 1, "e"), big(2), big(3)];
        group(&mut todo, &mut arrived, &mut open);
        assert_eq!(entries(&todo), [("a", vec![1, 2]), ("a", vec![3])]);
    }

    #[test]
    fn a_group_is_written_as_its_frames_one_after_the_other_and_where_each_starts() {
        let a = Arc::new(StreamCopy::new("a".into(), false));
        let q = queued(&a, 9, "id: a.9\n");
        let mut e = Entry::new(q.stream, q.event);
        for (seq, framed) in [(10, "id: a.10\n\n"), (12, "")] {
            e.take(Mirrored {
                seq,
                framed: Bytes::from_static(framed.as_bytes()),
                last: seq == 12,
            })
            .expect("room");
        }
        let packed = redis::cmd("X")
            .arg(Frames(&e))
            .arg(Parts(&e))
            .get_packed_command();
        let frames = "id: a.9\nid: a.10\n\n";
        let parts = "9:8,10:10,12:0";
        let expected = format!(
            "*3\r\n$1\r\nX\r\n${}\r\n{frames}\r\n${}\r\n{parts}\r\n",
            frames.len(),
            parts.len()
        );
        assert_eq!(String::from_utf8_lossy(&packed), expected);
        assert_eq!((e.count(), e.last().seq, e.bytes), (3, 12, 18));
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
