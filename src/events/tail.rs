//! `tail`: the SSE body of one stream — every event recorded after a position, then new ones
//! as they are recorded. A reader that fell behind the log's window skips to what the log
//! still holds (the newest events, the stream's last one always among them) instead of being
//! cut off.

use std::pin::Pin;
use std::sync::Arc;
use std::time::Duration;

use bytes::{BufMut, Bytes, BytesMut};
use futures_util::Stream;
use tokio::sync::watch;
use tokio::time::Sleep;

use super::log::{Read, StreamLog};

/// Why a tailing body ends early.
pub struct TailEnd {
    /// Comment sent on idle streams.
    pub keep_alive: Bytes,
    pub keep_alive_every: Duration,
    /// Flips to true when the replica shuts down: the body ends with a `retry` hint so the
    /// client reconnects (to another replica) and resumes.
    pub shutdown: watch::Receiver<bool>,
    /// Called on every keep-alive (e.g. to refresh a claim on the stream).
    pub on_keep_alive: Option<Box<dyn Fn() + Send + Sync>>,
}

/// The SSE body of a stream: every event after `after`, then new ones as they are recorded,
/// until the stream is done or the replica shuts down. With a durable Redis mirror, events
/// go out once Redis has them; if it has not for the mirror's patience (Redis down), the body
/// ends with a `retry` hint, so the request ends and the client resumes with `Last-Event-ID`.
pub fn tail(
    log: Arc<StreamLog>,
    after: u64,
    end: TailEnd,
) -> impl Stream<Item = Result<Bytes, std::convert::Infallible>> + Send {
    log.reader_joined();
    crate::metrics::get()
        .sse_streams
        .with_label_values(&[log.kind.label()])
        .inc();
    let state = Reader {
        guard: ReaderGuard(log),
        after,
        keep_alive: None,
        give_up: None,
        end,
        ready: None,
        finished: false,
        waiting_since: None,
    };
    futures_util::stream::unfold(state, |mut r| async move {
        if r.finished {
            return None;
        }
        let log = r.guard.0.clone();
        loop {
            if let Some(b) = r.ready.take() {
                // The next keep-alive is due a period after this chunk (a deadline moved
                // later: no timer-wheel work).
                if let Some(timer) = &mut r.keep_alive {
                    let next = tokio::time::Instant::now() + r.end.keep_alive_every;
                    timer.as_mut().reset(next);
                }
                return Some((Ok(b), r));
            }
            let notified = log.changed();
            tokio::pin!(notified);
            notified.as_mut().enable();
            let written = log.written_changed();
            tokio::pin!(written);
            if let Some(w) = written.as_mut().as_pin_mut() {
                w.enable();
            }
            let mut fresh = Vec::new();
            let before = r.after;
            match log.read_after(&mut r.after, &mut fresh) {
                Read::Some => {
                    r.waiting_since = None;
                    let skipped = (r.after - before).saturating_sub(fresh.len() as u64);
                    if skipped > 0 {
                        tracing::debug!(stream = %log.id, skipped, "a client fell behind the stream's window; it continues with the events still recorded");
                    }
                    // What is ready goes out as one chunk: fewer writes, same bytes (one event
                    // as it was framed, not copied).
                    r.ready = Some(match fresh.len() {
                        1 => fresh.swap_remove(0),
                        _ => {
                            let mut chunk =
                                BytesMut::with_capacity(fresh.iter().map(Bytes::len).sum());
                            for e in &fresh {
                                chunk.put_slice(e);
                            }
                            chunk.freeze()
                        }
                    });
                    continue;
                }
                Read::Done => return None,
                Read::Nothing => r.waiting_since = None,
                Read::Unwritten => {
                    let patience = log.patience().unwrap_or_default();
                    let since = match r.waiting_since {
                        Some(since) => since,
                        None => {
                            let now = tokio::time::Instant::now();
                            r.waiting_since = Some(now);
                            match &mut r.give_up {
                                Some(timer) => timer.as_mut().reset(now + patience),
                                None => {
                                    r.give_up = Some(Box::pin(tokio::time::sleep(patience)));
                                }
                            }
                            now
                        }
                    };
                    if since.elapsed() >= patience {
                        tracing::warn!(stream = %log.id, waited_ms = patience.as_millis() as u64, "SSE events were not stored in Redis in time: the stream ends with a retry hint, and the client gets them when it resumes once Redis has them");
                        r.finished = true;
                        return Some((Ok(Bytes::from_static(REDIS_RETRY)), r));
                    }
                }
                Read::Unwritable => {
                    tracing::error!(stream = %log.id, "SSE events of this stream cannot be stored in Redis in order: the stream ends (its client is not given events a resumption elsewhere would lack)");
                    r.finished = true;
                    return Some((Ok(Bytes::from_static(REDIS_RETRY)), r));
                }
            }
            let shutting_down = *r.end.shutdown.borrow();
            // Events recorded but not yet in Redis are handed out first: the drain writes them
            // within moments, and a client closed on before its first event id could not
            // resume at all (the wait stays bounded by the mirror's patience).
            if shutting_down && r.waiting_since.is_none() {
                // Polling hand-off: tell the client when to come back, then close.
                r.finished = true;
                return Some((Ok(Bytes::from_static(b"retry: 500\n\n")), r));
            }
            let waiting = r.waiting_since.is_some();
            let every = r.end.keep_alive_every;
            let keep_alive = r
                .keep_alive
                .get_or_insert_with(|| Box::pin(tokio::time::sleep(every)));
            tokio::select! {
                _ = &mut notified => {}
                // Both `None` (a branch disabled) without a durable mirror or a wait.
                Some(()) = async {
                    written.as_mut().as_pin_mut()?.await;
                    Some(())
                } => {}
                Some(()) = async {
                    r.give_up.as_mut()?.as_mut().await;
                    Some(())
                }, if waiting => {}
                () = keep_alive.as_mut() => {
                    if let Some(f) = &r.end.on_keep_alive {
                        f();
                    }
                    r.ready = Some(r.end.keep_alive.clone());
                }
                _ = r.end.shutdown.changed(), if !shutting_down => {}
            }
        }
    })
}

/// The end of a body whose events Redis did not store in time: the client comes back (here
/// or on another replica) a second later and resumes with `Last-Event-ID`.
const REDIS_RETRY: &[u8] = b"retry: 1000\n\n";

/// A tailing body's state between its chunks.
struct Reader {
    guard: ReaderGuard,
    /// The last event handed to the client.
    after: u64,
    end: TailEnd,
    /// The next chunk, already read.
    ready: Option<Bytes>,
    /// The last chunk was sent: the body ends.
    finished: bool,
    /// Since when events recorded after `after` wait for Redis (durable mirror).
    waiting_since: Option<tokio::time::Instant>,
    /// When a keep-alive is due: a period after the last chunk. One timer for the body's
    /// life (made at its first wait, in the runtime that polls it), its deadline moved on
    /// — not a timer made and dropped at every wait.
    keep_alive: Option<Pin<Box<Sleep>>>,
    /// When a wait for Redis gives up (`waiting_since` plus the mirror's patience): made at
    /// the first such wait, moved on at the next; polled only during one.
    give_up: Option<Pin<Box<Sleep>>>,
}

/// One connected reader of a log, for as long as its body lives.
struct ReaderGuard(Arc<StreamLog>);

impl Drop for ReaderGuard {
    fn drop(&mut self) {
        self.0.reader_left();
        crate::metrics::get()
            .sse_streams
            .with_label_values(&[self.0.kind.label()])
            .dec();
    }
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used)]
    use std::sync::atomic::{AtomicUsize, Ordering};

    use futures_util::StreamExt;

    use super::*;
    use crate::events::{LogLimits, StreamId, StreamKind};

    const KA: &[u8] = b": keep-alive\n\n";

    /// Whether `took` is one keep-alive period (the timer's millisecond ticks allowed).
    fn one_period(took: Duration) -> bool {
        took >= Duration::from_secs(15) && took < Duration::from_millis(15_010)
    }

    #[tokio::test(start_paused = true)]
    async fn keep_alives_come_a_period_after_the_last_chunk_and_the_last_event_ends_the_body() {
        let log = Arc::new(StreamLog::new(
            StreamId::from("abcd1234-1"),
            StreamKind::Get,
            LogLimits {
                max_events: 10,
                max_bytes: 1 << 20,
            },
        ));
        let hooked = Arc::new(AtomicUsize::new(0));
        let (_shutdown_tx, shutdown) = watch::channel(false);
        let hook = hooked.clone();
        let end = TailEnd {
            keep_alive: Bytes::from_static(KA),
            keep_alive_every: Duration::from_secs(15),
            shutdown,
            on_keep_alive: Some(Box::new(move || {
                hook.fetch_add(1, Ordering::Relaxed);
            })),
        };
        let body = tail(log.clone(), 0, end);
        tokio::pin!(body);

        // Idle: a keep-alive after one period, and the hook called with it.
        let started = tokio::time::Instant::now();
        assert_eq!(&body.next().await.unwrap().unwrap()[..], KA);
        assert!(one_period(started.elapsed()), "{:?}", started.elapsed());
        assert_eq!(hooked.load(Ordering::Relaxed), 1);

        // An event ten seconds later goes out at once; the next keep-alive is due a period
        // after it, not after the keep-alive before.
        tokio::time::sleep(Duration::from_secs(10)).await;
        assert!(log.append(b"{\"a\":1}", false));
        let event = body.next().await.unwrap().unwrap();
        assert_eq!(&event[..], b"id: abcd1234-1.1\ndata: {\"a\":1}\n\n");
        let sent = tokio::time::Instant::now();
        assert_eq!(&body.next().await.unwrap().unwrap()[..], KA);
        assert!(one_period(sent.elapsed()), "{:?}", sent.elapsed());
        assert_eq!(hooked.load(Ordering::Relaxed), 2);

        assert!(log.append(b"{}", true));
        let last = body.next().await.unwrap().unwrap();
        assert_eq!(&last[..], b"id: abcd1234-1.2\ndata: {}\n\n");
        assert!(
            body.next().await.is_none(),
            "the body ends after the last event"
        );
    }
}
