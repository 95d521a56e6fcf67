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
use crate::session::{SessionKey, StoreError};

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
    /// The stream's last entry was read: nothing follows.
    pub done: bool,
    /// Entries right after the position were already trimmed away.
    pub gap: bool,
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
    /// order.
    pub fn mirror(self: &Arc<Self>, session: &SessionKey, stream: &str) -> MirrorQueue {
        let (tx, mut rx) = mpsc::unbounded_channel::<Mirrored>();
        let key = self.redis.keys.events(session, stream);
        let this = self.clone();
        tokio::spawn(async move {
            while let Some(m) = rx.recv().await {
                let mut attempt = 0;
                loop {
                    attempt += 1;
                    match this.write(&key, &m).await {
                        Ok(()) => break,
                        Err(e) if attempt < WRITE_ATTEMPTS => {
                            tracing::debug!(error = %e, "event not yet written to Redis; retrying");
                            tokio::time::sleep(Duration::from_millis(100 * u64::from(attempt)))
                                .await;
                        }
                        Err(e) => {
                            tracing::warn!(error = %e, "an SSE event could not be written to Redis; only this replica can replay it");
                            break;
                        }
                    }
                }
                if this.pending.fetch_sub(1, Ordering::AcqRel) == 1 {
                    this.drained.notify_waiters();
                }
            }
        });
        MirrorQueue {
            tx,
            owner: self.clone(),
        }
    }

    async fn write(&self, key: &str, m: &Mirrored) -> Result<(), StoreError> {
        let mut conn = self.redis.conn.clone();
        let mut pipe = redis::pipe();
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
        pipe.cmd("EXPIRE").arg(key).arg(self.ttl_secs).ignore();
        self.redis
            .run("event_write", async move {
                pipe.query_async::<(String,)>(&mut conn).await
            })
            .await
            .map(|_| ())
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
        for (i, entry) in reply.ids.into_iter().enumerate() {
            let seq = entry
                .id
                .split_once('-')
                .and_then(|(_, s)| s.parse().ok())
                .ok_or_else(|| StoreError::Corrupt(format!("event entry id {}", entry.id)))?;
            if i == 0 && seq > after + 1 {
                out.gap = true;
            }
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
    owner: Arc<RedisEvents>,
}

impl MirrorQueue {
    pub fn send(&self, m: Mirrored) {
        self.owner.pending.fetch_add(1, Ordering::AcqRel);
        if self.tx.send(m).is_err() && self.owner.pending.fetch_sub(1, Ordering::AcqRel) == 1 {
            self.owner.drained.notify_waiters();
        }
    }
}
