//! SSE event logs in Redis Streams, so a stream can be resumed on any replica: every event a
//! replica records locally is mirrored, in order, by the replica's one writer
//! (`mirror.rs`: `XADD <key> 0-<seq>`, a stream's events queued together in one entry,
//! bounded length, the events of all streams queued at that moment in one round trip, the
//! TTL set per stream rather than per write); another
//! replica replays and follows a stream by polling `XRANGE` (no blocking reads on the shared
//! multiplexed connection).
//!
//! `events: durable` (the default): each stream's queue carries the stream's watermark
//! (`mirror::Watermark`), which the local log's readers are held behind, and never leaves a
//! notification out of the copy — the log's unread backlog, which counts the events not yet
//! written, bounds what waits for Redis instead (see the README's *Floods*).

use std::sync::atomic::Ordering;
use std::sync::{Arc, OnceLock};
use std::time::Duration;

use bytes::Bytes;
use tokio::sync::mpsc;

use super::Redis;
use super::mirror::{self, Mirrored, Queued, Shared, StreamCopy, WRITE_ATTEMPTS};
use crate::config::EventDurability;
use crate::store::{SessionKey, StoreError};

/// Events read back from Redis.
#[derive(Debug, Default)]
pub struct Replayed {
    pub events: Vec<Bytes>,
    /// Sequence number of the last entry read (the position to continue from).
    pub last_seq: u64,
    /// The stream's last entry was read: nothing follows. (Entries trimmed away or left out
    /// before the first one read are skipped, as a local reader skips them.)
    pub done: bool,
}

pub struct RedisEvents {
    shared: Arc<Shared>,
    durability: EventDurability,
    /// How long a reader waits for events recorded but not yet written (durable mode).
    patience: Duration,
    /// The queue to the replica's writer, started with the first mirrored stream.
    writer: OnceLock<mpsc::UnboundedSender<Queued>>,
}

/// Most entries read per `XRANGE`.
const READ_BATCH: usize = 512;
/// Events queued for one stream beyond which its notifications are left out of the Redis
/// copy (they stay in the local log; a resumer elsewhere skips them): a flood faster than
/// Redis never grows the queue without bound. Responses and requests always go. (Fast mode
/// only: a durable stream's log holds notifications back before they get an id.)
const MIRROR_BACKLOG: usize = 4096;

impl RedisEvents {
    /// Copies of event logs that outlive their last write by at least `ttl` and keep their
    /// last `max_len` events; `durability` says whether readers wait for them.
    pub fn new(
        redis: Redis,
        ttl: Duration,
        max_len: usize,
        durability: EventDurability,
    ) -> RedisEvents {
        // As long as the fast mode tries an event before giving up on it, and its pauses.
        let patience = redis.timeout * WRITE_ATTEMPTS + Duration::from_secs(1);
        RedisEvents {
            shared: Arc::new(Shared::new(redis, ttl, max_len)),
            durability,
            patience,
            writer: OnceLock::new(),
        }
    }

    /// The queue of one stream's events to Redis: they reach Redis in order, with the other
    /// streams' events queued at the same moment in one round trip.
    pub fn mirror(&self, session: &SessionKey, stream: &str) -> MirrorQueue {
        let tx = self.writer.get_or_init(|| {
            let (tx, rx) = mpsc::unbounded_channel();
            tokio::spawn(mirror::run(self.shared.clone(), rx));
            tx
        });
        MirrorQueue {
            tx: tx.clone(),
            stream: Arc::new(StreamCopy::new(
                self.shared.redis.keys.events(session, stream),
                self.durability == EventDurability::Durable,
            )),
            shared: self.shared.clone(),
            patience: self.patience,
        }
    }

    /// Waits (bounded) until every queued event is in Redis.
    pub async fn flush(&self, limit: Duration) -> bool {
        let shared = &self.shared;
        let wait = async {
            loop {
                let notified = shared.drained.notified();
                tokio::pin!(notified);
                notified.as_mut().enable();
                if shared.pending.load(Ordering::Acquire) == 0 {
                    return;
                }
                notified.await;
            }
        };
        tokio::time::timeout(limit, wait).await.is_ok()
    }

    /// The events of a stream after `after`; `None` when Redis has no such stream.
    pub async fn read_after(
        &self,
        session: &SessionKey,
        stream: &str,
        after: u64,
    ) -> Result<Option<Replayed>, StoreError> {
        let redis = &self.shared.redis;
        let key = redis.keys.events(session, stream);
        let mut conn = redis.conn.clone();
        let (exists, reply): (i64, redis::streams::StreamRangeReply) = redis
            .run("event_read", async move {
                redis::pipe()
                    .cmd("EXISTS")
                    .arg(&key)
                    .cmd("XRANGE")
                    .arg(&key)
                    .arg(format!("(0-{after}"))
                    .arg("+")
                    .arg("COUNT")
                    .arg(READ_BATCH)
                    .query_async(&mut conn)
                    .await
            })
            .await?;
        if exists == 0 {
            return Ok(None);
        }
        let mut out = Replayed {
            last_seq: after,
            ..Replayed::default()
        };
        for mut entry in reply.ids {
            let seq = entry
                .id
                .split_once('-')
                .and_then(|(_, s)| s.parse().ok())
                .ok_or_else(|| StoreError::Corrupt(format!("event entry id {}", entry.id)))?;
            out.last_seq = seq;
            // Taken out of the reply, not copied.
            if let Some(redis::Value::BulkString(d)) = entry.map.remove("d")
                && !d.is_empty()
            {
                let corrupt = || StoreError::Corrupt(format!("event entry {} parts", entry.id));
                let d = Bytes::from(d);
                match entry.map.get("p") {
                    None => out.events.push(d),
                    Some(redis::Value::BulkString(parts)) => {
                        split_group(&d, parts, after, &mut out.events).ok_or_else(corrupt)?;
                    }
                    Some(_) => return Err(corrupt()),
                }
            }
            if entry.map.contains_key("f") {
                out.done = true;
            }
        }
        Ok(Some(out))
    }
}

/// Appends to `out` the events of a group entry (`d`, cut where its `p` says: `<seq>:<length>`
/// of each event, comma-separated) numbered above `after`: a reader resuming in the middle of
/// a group leaves out what the client has. `None` when `p` does not describe `d`.
fn split_group(d: &Bytes, parts: &[u8], after: u64, out: &mut Vec<Bytes>) -> Option<()> {
    let mut at = 0usize;
    for part in parts.split(|&b| b == b',') {
        let colon = memchr::memchr(b':', part)?;
        let seq: u64 = std::str::from_utf8(&part[..colon]).ok()?.parse().ok()?;
        let len: usize = std::str::from_utf8(&part[colon + 1..]).ok()?.parse().ok()?;
        let end = at.checked_add(len).filter(|&end| end <= d.len())?;
        if seq > after && len > 0 {
            out.push(d.slice(at..end));
        }
        at = end;
    }
    (at == d.len()).then_some(())
}

/// The ordered queue of one stream's events to the replica's Redis writer.
pub struct MirrorQueue {
    tx: mpsc::UnboundedSender<Queued>,
    stream: Arc<StreamCopy>,
    shared: Arc<Shared>,
    patience: Duration,
}

/// Where a durable stream's copy stands, for its readers.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Written {
    /// Every event up to this sequence number is in Redis.
    UpTo(u64),
    /// An event could not be written in order: nothing more will be (see `mirror.rs`).
    Broken,
}

impl MirrorQueue {
    /// Queues `m`; in fast mode a `droppable` event (a notification) is left out while the
    /// stream has more than `MIRROR_BACKLOG` events queued.
    pub fn send(&self, m: Mirrored, droppable: bool) {
        let queued = &self.stream.queued;
        if droppable
            && self.stream.watermark.is_none()
            && queued.load(Ordering::Acquire) >= MIRROR_BACKLOG
        {
            crate::metrics::get().dropped_notification("mirror_backlog");
            return;
        }
        queued.fetch_add(1, Ordering::AcqRel);
        self.shared.pending.fetch_add(1, Ordering::AcqRel);
        let item = Queued {
            stream: self.stream.clone(),
            event: m,
        };
        if self.tx.send(item).is_err() {
            queued.fetch_sub(1, Ordering::AcqRel);
            if self.shared.pending.fetch_sub(1, Ordering::AcqRel) == 1 {
                self.shared.drained.notify_waiters();
            }
        }
    }
}

impl MirrorQueue {
    /// How far a durable stream's copy is written; `None` in fast mode (readers do not wait).
    pub fn written(&self) -> Option<Written> {
        let w = self.stream.watermark.as_ref()?;
        Some(if w.broken.load(Ordering::Acquire) {
            Written::Broken
        } else {
            Written::UpTo(w.written.load(Ordering::Acquire))
        })
    }

    /// Resolves when `written` may have changed (enable it before reading `written`); `None`
    /// in fast mode.
    pub fn written_changed(&self) -> Option<tokio::sync::futures::Notified<'_>> {
        Some(self.stream.watermark.as_ref()?.changed.notified())
    }

    /// How long a reader waits for events recorded but not yet written before it ends its
    /// body with a `retry` hint: as long as the fast mode tries an event (`WRITE_ATTEMPTS`
    /// round trips of the Redis `timeout`), and a second.
    pub fn patience(&self) -> Duration {
        self.patience
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn try_split(d: &'static str, parts: &str, after: u64) -> Option<Vec<Bytes>> {
        let mut out = Vec::new();
        let d = Bytes::from_static(d.as_bytes());
        split_group(&d, parts.as_bytes(), after, &mut out).map(|()| out)
    }

    fn split(d: &'static str, parts: &str, after: u64) -> Vec<Bytes> {
        try_split(d, parts, after).expect("well formed")
    }

    #[test]
    fn a_group_is_cut_into_its_events_and_resumed_between_them() {
        let d = "id: s.4\ndata: a\n\nid: s.5\ndata: bb\n\nid: s.7\ndata: c\n\n";
        let parts = "4:17,5:18,7:17";
        let all = split(d, parts, 0);
        assert_eq!(
            all,
            [
                "id: s.4\ndata: a\n\n",
                "id: s.5\ndata: bb\n\n",
                "id: s.7\ndata: c\n\n"
            ]
        );
        assert_eq!(split(d, parts, 4), all[1..]);
        assert_eq!(split(d, parts, 6), all[2..]);
        assert!(split(d, parts, 7).is_empty());
        // The end marker's empty frame is no event.
        assert_eq!(split("id: s.1\ndata: a\n\n", "1:17,2:0", 0).len(), 1);
    }

    #[test]
    fn parts_that_do_not_describe_the_group_are_refused() {
        let d = "id: s.4\ndata: a\n\n";
        for parts in [
            "4:16", "4:18", "4:17,5:1", "4", "x:17", "4:x", "4:-1", "", "4:17,",
        ] {
            assert!(try_split(d, parts, 0).is_none(), "{parts:?}");
        }
        assert!(try_split(d, "4:99999999999999999999999", 0).is_none());
    }
}
