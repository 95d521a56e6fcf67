//! Following a stream recorded by another replica: the SSE body that replays a stream from
//! Redis after a position and then polls for what the producing replica still records, until
//! the stream's end marker, the client leaving, or this replica shutting down.

use std::convert::Infallible;
use std::sync::Arc;
use std::time::Duration;

use bytes::{BufMut, Bytes, BytesMut};
use futures_util::Stream;

use super::TailEnd;
use crate::cluster::{RedisEvents, Replayed};
use crate::store::SessionKey;

/// How often a followed remote stream is polled.
const POLL_EVERY: Duration = Duration::from_millis(50);

/// The events of `first` (already read), then whatever follows on `stream` in Redis.
pub fn remote_tail(
    redis: Arc<RedisEvents>,
    session: SessionKey,
    stream: String,
    first: Replayed,
    end: TailEnd,
) -> impl Stream<Item = Result<Bytes, Infallible>> + Send {
    let after = first.last_seq;
    let done = first.done;
    let pending = join(&first.events);
    let state = (
        redis,
        session,
        stream,
        after,
        done,
        pending,
        end,
        tokio::time::Instant::now(),
    );
    futures_util::stream::unfold(
        state,
        |(redis, session, stream, mut after, mut done, pending, mut end, mut last_sent)| async move {
            if let Some(chunk) = pending {
                let next = (
                    redis,
                    session,
                    stream,
                    after,
                    done,
                    None,
                    end,
                    tokio::time::Instant::now(),
                );
                return Some((Ok(chunk), next));
            }
            loop {
                if done {
                    return None;
                }
                if *end.shutdown.borrow() {
                    let next = (redis, session, stream, after, true, None, end, last_sent);
                    return Some((Ok(Bytes::from_static(b"retry: 500\n\n")), next));
                }
                match redis.read_after(&session, &stream, after).await {
                    Ok(Some(r)) => {
                        after = r.last_seq;
                        done = r.done;
                        if let Some(chunk) = join(&r.events) {
                            last_sent = tokio::time::Instant::now();
                            let next = (redis, session, stream, after, done, None, end, last_sent);
                            return Some((Ok(chunk), next));
                        }
                    }
                    Ok(None) => return None,
                    Err(e) => {
                        tracing::warn!(error = %e, "a resumed stream could not be read from Redis; closing it (the client may resume again)");
                        return None;
                    }
                }
                if last_sent.elapsed() >= end.keep_alive_every {
                    last_sent = tokio::time::Instant::now();
                    let ka = end.keep_alive.clone();
                    let next = (redis, session, stream, after, done, None, end, last_sent);
                    return Some((Ok(ka), next));
                }
                tokio::select! {
                    _ = tokio::time::sleep(POLL_EVERY) => {}
                    _ = end.shutdown.changed() => {}
                }
            }
        },
    )
}

/// All events as one chunk, or `None` when there are none.
pub fn join(events: &[Bytes]) -> Option<Bytes> {
    if events.is_empty() {
        return None;
    }
    let mut chunk = BytesMut::with_capacity(events.iter().map(Bytes::len).sum());
    for e in events {
        chunk.put_slice(e);
    }
    Some(chunk.freeze())
}
