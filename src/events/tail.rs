//! `tail`: the SSE body of one stream — every event recorded after a position, then new ones
//! as they are recorded. A reader that fell behind the log's window skips to what the log
//! still holds (the newest events, the stream's last one always among them) instead of being
//! cut off.

use std::sync::Arc;
use std::time::Duration;

use bytes::{BufMut, Bytes, BytesMut};
use futures_util::Stream;
use tokio::sync::watch;

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
/// until the stream is done or the replica shuts down.
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
    let guard = ReaderGuard(log.clone());
    let state = (guard, after, end, None::<Bytes>, false);
    futures_util::stream::unfold(
        state,
        |(guard, mut after, mut end, mut ready, finished)| async move {
            if finished {
                return None;
            }
            let log = guard.0.clone();
            loop {
                if let Some(b) = ready.take() {
                    return Some((Ok(b), (guard, after, end, None, false)));
                }
                let notified = log.changed();
                tokio::pin!(notified);
                notified.as_mut().enable();
                let mut fresh = Vec::new();
                let before = after;
                match log.read_after(&mut after, &mut fresh) {
                    Read::Some => {
                        let skipped = (after - before).saturating_sub(fresh.len() as u64);
                        if skipped > 0 {
                            tracing::debug!(stream = %log.id, skipped, "a client fell behind the stream's window; it continues with the events still recorded");
                        }
                        // What is ready goes out as one chunk: fewer writes, same bytes.
                        let mut chunk = BytesMut::with_capacity(fresh.iter().map(Bytes::len).sum());
                        for e in &fresh {
                            chunk.put_slice(e);
                        }
                        ready = Some(chunk.freeze());
                        continue;
                    }
                    Read::Done => return None,
                    Read::Nothing => {}
                }
                if *end.shutdown.borrow() {
                    // Polling hand-off: tell the client when to come back, then close.
                    return Some((
                        Ok(Bytes::from_static(b"retry: 500\n\n")),
                        (guard, after, end, None, true),
                    ));
                }
                tokio::select! {
                    _ = &mut notified => {}
                    _ = tokio::time::sleep(end.keep_alive_every) => {
                        if let Some(f) = &end.on_keep_alive {
                            f();
                        }
                        let ka = end.keep_alive.clone();
                        return Some((Ok(ka), (guard, after, end, None, false)));
                    }
                    _ = end.shutdown.changed() => {}
                }
            }
        },
    )
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
