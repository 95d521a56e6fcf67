//! SSE event logs in Redis Streams, so a stream can be resumed on any replica: every event a
//! replica records locally is mirrored, in order, by one writer task per stream (`XADD
//! <key> 0-<seq>`, bounded length, the session's TTL); another replica replays and follows a
//! stream by polling `XRANGE` (no blocking reads on the shared multiplexed connection).

use std::sync::Arc;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::time::Duration;

use bytes::Bytes;
use tokio::sync::{Notify, mpsc};

use super::Redis;
use crate::store::{SessionKey, StoreError};

/// One event on its way to Redis.
#[derive(Debug)]
pub struct Mirrored {
    pub seq: u64,
    /// The framed SSE event; empty for the end-of-stream marker.
    pub framed: Bytes,
    pub last: bool,
}

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
    redis: Redis,
    ttl_secs: u64,
    max_len: usize,
    /// Events queued for Redis and not yet written (drained before shutdown).
    pending: AtomicUsize,
    drained: Notify,
}

/// Most entries read per `XRANGE`.
const READ_BATCH: usize = 512;
/// Attempts per `XADD` before the event is given up on (it stays in the local log).
const WRITE_ATTEMPTS: u32 = 3;
/// Most events written per round trip.
const WRITE_BATCH: usize = 256;
/// Events queued for one stream's writer beyond which notifications are left out of the
/// Redis copy (they stay in the local log; a resumer elsewhere skips them): a flood faster
/// than Redis never grows the queue without bound. Responses and requests always go.
const MIRROR_BACKLOG: usize = 4096;

impl RedisEvents {
    pub fn new(redis: Redis, ttl: Duration, max_len: usize) -> RedisEvents {
        RedisEvents {
            redis,
            ttl_secs: ttl.as_secs().max(1),
            max_len,
            pending: AtomicUsize::new(0),
            drained: Notify::new(),
        }
    }

    /// Starts the writer of one stream; events sent to the returned queue reach Redis in
    /// order, as many per round trip as are queued.
    pub fn mirror(self: &Arc<Self>, session: &SessionKey, stream: &str) -> MirrorQueue {
        let (tx, mut rx) = mpsc::unbounded_channel::<Mirrored>();
        let queued = Arc::new(AtomicUsize::new(0));
        let key = self.redis.keys.events(session, stream);
        let (this, backlog) = (self.clone(), queued.clone());
        tokio::spawn(async move {
            let mut batch = Vec::with_capacity(WRITE_BATCH);
            while rx.recv_many(&mut batch, WRITE_BATCH).await > 0 {
                if this.write_batch(&key, &batch).await.is_err() {
                    // One by one, each retried: a failed round trip may have written part of
                    // the batch, and an entry already there is refused by its id.
                    for m in &batch {
                        this.write_retried(&key, m).await;
                    }
                }
                let n = batch.len();
                batch.clear();
                backlog.fetch_sub(n, Ordering::AcqRel);
                if this.pending.fetch_sub(n, Ordering::AcqRel) == n {
                    this.drained.notify_waiters();
                }
            }
        });
        MirrorQueue {
            tx,
            queued,
            owner: self.clone(),
        }
    }

    async fn write_retried(&self, key: &str, m: &Mirrored) {
        let mut attempt = 0;
        loop {
            attempt += 1;
            match self.write_batch(key, std::slice::from_ref(m)).await {
                Ok(()) => return,
                Err(e) if attempt < WRITE_ATTEMPTS => {
                    tracing::debug!(error = %e, "event not yet written to Redis; retrying");
                    tokio::time::sleep(Duration::from_millis(100 * u64::from(attempt))).await;
                }
                Err(e) => {
                    tracing::warn!(error = %e, "an SSE event could not be written to Redis; only this replica can replay it");
                    return;
                }
            }
        }
    }

    /// Appends `events` to the stream in one round trip and restarts its time-to-live.
    async fn write_batch(&self, key: &str, events: &[Mirrored]) -> Result<(), StoreError> {
        let mut conn = self.redis.conn.clone();
        let mut pipe = redis::pipe();
        for m in events {
            let add = pipe
                .cmd("XADD")
                .arg(key)
                .arg("MAXLEN")
                .arg("~")
                .arg(self.max_len)
                .arg(format!("0-{}", m.seq))
                .arg("d")
                .arg(m.framed.as_ref());
            if m.last {
                add.arg("f").arg(1);
            }
            add.ignore();
        }
        pipe.cmd("EXPIRE").arg(key).arg(self.ttl_secs).ignore();
        self.redis
            .run("event_write", async move {
                pipe.query_async::<()>(&mut conn).await
            })
            .await
    }

    /// Waits (bounded) until every queued event is in Redis.
    pub async fn flush(&self, limit: Duration) -> bool {
        let wait = async {
            loop {
                let notified = self.drained.notified();
                tokio::pin!(notified);
                notified.as_mut().enable();
                if self.pending.load(Ordering::Acquire) == 0 {
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
        let key = self.redis.keys.events(session, stream);
        let mut conn = self.redis.conn.clone();
        let (exists, reply): (i64, redis::streams::StreamRangeReply) = self
            .redis
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
        for entry in reply.ids {
            let seq = entry
                .id
                .split_once('-')
                .and_then(|(_, s)| s.parse().ok())
                .ok_or_else(|| StoreError::Corrupt(format!("event entry id {}", entry.id)))?;
            out.last_seq = seq;
            if let Some(redis::Value::BulkString(d)) = entry.map.get("d")
                && !d.is_empty()
            {
                out.events.push(Bytes::copy_from_slice(d));
            }
            if entry.map.contains_key("f") {
                out.done = true;
            }
        }
        Ok(Some(out))
    }
}

/// The ordered queue to one stream's Redis writer.
pub struct MirrorQueue {
    tx: mpsc::UnboundedSender<Mirrored>,
    /// Events queued and not yet written, for this stream.
    queued: Arc<AtomicUsize>,
    owner: Arc<RedisEvents>,
}

impl MirrorQueue {
    /// Queues `m`; a `droppable` event (a notification) is left out while the queue is over
    /// its bound.
    pub fn send(&self, m: Mirrored, droppable: bool) {
        if droppable && self.queued.load(Ordering::Acquire) >= MIRROR_BACKLOG {
            crate::metrics::get().dropped_notification("mirror_backlog");
            return;
        }
        self.queued.fetch_add(1, Ordering::AcqRel);
        self.owner.pending.fetch_add(1, Ordering::AcqRel);
        if self.tx.send(m).is_err() {
            self.queued.fetch_sub(1, Ordering::AcqRel);
            if self.owner.pending.fetch_sub(1, Ordering::AcqRel) == 1 {
                self.owner.drained.notify_waiters();
            }
        }
    }
}
