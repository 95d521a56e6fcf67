//! The queue of one forwarded request's events, from the upstream link (which must never wait:
//! a shared stdio connection carries every session's answers) to the request's
//! `ForwardStream`. The answer, failures and requests to the client always pass; notifications
//! beyond a bound are dropped and counted — progress coalesced: the latest one waits aside and
//! goes in first when there is room again or anything else follows — so an upstream flooding
//! a request whose stream is not being read (a parked request, a slow pump) cannot grow the
//! gateway's memory with it, and the client still sees the last progress before the answer.

use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};

use bytes::Bytes;

use tokio::sync::mpsc;

use super::StreamEvent;

/// Notifications queued for one request beyond which more are dropped.
const MAX_QUEUED: usize = 10_000;
/// Bytes of queued notifications beyond which more are dropped (one is always taken).
const MAX_QUEUED_BYTES: usize = 4 * 1024 * 1024;

/// The queue's two ends.
pub(crate) fn channel() -> (EventSink, EventSource) {
    let (tx, rx) = mpsc::unbounded_channel();
    let queued = Arc::new(Queued::default());
    (
        EventSink {
            tx,
            queued: queued.clone(),
        },
        EventSource { rx, queued },
    )
}

/// What is in the queue now (notifications only: nothing else is bounded).
#[derive(Default)]
struct Queued {
    events: AtomicUsize,
    bytes: AtomicUsize,
    /// Whether a drop was logged for this request already.
    warned: AtomicBool,
    /// The latest progress that found the queue full, and whether there is one.
    stashed: Mutex<Option<Bytes>>,
    has_stash: AtomicBool,
}

/// The request's end of the queue is gone (the request finished or was cancelled).
#[derive(Debug)]
pub(crate) struct Closed;

/// The sending end, kept in the request's pending entry.
#[derive(Clone)]
pub(crate) struct EventSink {
    tx: mpsc::UnboundedSender<StreamEvent>,
    queued: Arc<Queued>,
}

impl EventSink {
    /// Queues `event`. A notification that finds the queue full is dropped, or for progress
    /// kept aside as the latest (`Ok` either way: the request still listens; its client just
    /// falls behind).
    pub(crate) fn send(&self, event: StreamEvent) -> Result<(), Closed> {
        let notification = match &event {
            StreamEvent::Message(b) | StreamEvent::Progress(b) => Some(b.len()),
            StreamEvent::Request(_) | StreamEvent::Response(..) | StreamEvent::Failed(_) => None,
        };
        let Some(size) = notification else {
            // The latest progress goes first: it came before.
            self.unstash(true)?;
            return self.tx.send(event).map_err(|_| Closed);
        };
        if self.tx.is_closed() {
            return Err(Closed);
        }
        if self.is_full(size) || !self.unstash(false)? {
            self.set_aside(event);
            return Ok(());
        }
        self.enqueue(event)
    }

    fn is_full(&self, size: usize) -> bool {
        let events = self.queued.events.load(Ordering::Acquire);
        let bytes = self.queued.bytes.load(Ordering::Acquire);
        events > 0 && (events >= MAX_QUEUED || bytes + size > MAX_QUEUED_BYTES)
    }

    fn enqueue(&self, event: StreamEvent) -> Result<(), Closed> {
        if let StreamEvent::Message(b) | StreamEvent::Progress(b) = &event {
            self.queued.events.fetch_add(1, Ordering::AcqRel);
            self.queued.bytes.fetch_add(b.len(), Ordering::AcqRel);
        }
        self.tx.send(event).map_err(|_| Closed)
    }

    /// Queues the progress kept aside, if any: when `always`, or when it fits. Returns whether
    /// nothing is left aside.
    fn unstash(&self, always: bool) -> Result<bool, Closed> {
        if !self.queued.has_stash.load(Ordering::Acquire) {
            return Ok(true);
        }
        let Ok(mut stashed) = self.queued.stashed.lock() else {
            return Ok(true);
        };
        let Some(progress) = stashed.take_if(|p| always || !self.is_full(p.len())) else {
            return Ok(false);
        };
        self.queued.has_stash.store(false, Ordering::Release);
        drop(stashed);
        self.enqueue(StreamEvent::Progress(progress))?;
        Ok(true)
    }

    /// A notification that does not fit: progress replaces the one kept aside, anything else
    /// is dropped.
    fn set_aside(&self, event: StreamEvent) {
        let replaced = match event {
            StreamEvent::Progress(b) => match self.queued.stashed.lock() {
                Ok(mut stashed) => {
                    self.queued.has_stash.store(true, Ordering::Release);
                    stashed.replace(b).is_some()
                }
                Err(_) => true,
            },
            _ => true,
        };
        if !replaced {
            return;
        }
        crate::metrics::get().dropped_notification("request_queue");
        if !self.queued.warned.swap(true, Ordering::AcqRel) {
            tracing::warn!(
                queued = self.queued.events.load(Ordering::Acquire),
                "an upstream sends notifications faster than its request's stream takes them: dropping them (keeping the latest progress) until it catches up"
            );
        }
    }
}

/// The receiving end, read by the request's `ForwardStream`.
pub(crate) struct EventSource {
    rx: mpsc::UnboundedReceiver<StreamEvent>,
    queued: Arc<Queued>,
}

impl EventSource {
    pub(crate) async fn recv(&mut self) -> Option<StreamEvent> {
        let event = self.rx.recv().await?;
        if let StreamEvent::Message(b) | StreamEvent::Progress(b) = &event {
            self.queued.events.fetch_sub(1, Ordering::AcqRel);
            self.queued.bytes.fetch_sub(b.len(), Ordering::AcqRel);
        }
        Some(event)
    }
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used)]
    use super::*;
    use crate::upstream::Verdict;

    #[tokio::test]
    async fn notifications_beyond_the_bound_are_dropped_but_the_answer_always_passes() {
        let (sink, mut source) = channel();
        for _ in 0..MAX_QUEUED + 500 {
            sink.send(StreamEvent::Progress(Bytes::from_static(b"{}")))
                .unwrap();
        }
        sink.send(StreamEvent::Progress(Bytes::from_static(b"{\"last\":1}")))
            .unwrap();
        sink.send(StreamEvent::Request(Bytes::from_static(b"{\"id\":1}")))
            .unwrap();
        sink.send(StreamEvent::Response(
            Bytes::from_static(b"{\"id\":2}"),
            Verdict::Ok,
        ))
        .unwrap();
        let mut notifications = 0;
        let mut rest = Vec::new();
        while let Ok(Some(ev)) =
            tokio::time::timeout(std::time::Duration::from_millis(50), source.recv()).await
        {
            match ev {
                StreamEvent::Progress(_) => notifications += 1,
                other => rest.push(other),
            }
        }
        assert_eq!(
            notifications,
            MAX_QUEUED + 1,
            "the queue's, then the latest kept aside"
        );
        assert!(matches!(rest[0], StreamEvent::Request(_)));
        assert!(matches!(rest[1], StreamEvent::Response(..)));
        // Drained: notifications are taken again.
        sink.send(StreamEvent::Message(Bytes::from_static(b"{}")))
            .unwrap();
        assert!(matches!(source.recv().await, Some(StreamEvent::Message(_))));
    }

    #[tokio::test]
    async fn the_latest_progress_kept_aside_goes_first_when_there_is_room() {
        let (sink, mut source) = channel();
        for _ in 0..MAX_QUEUED {
            sink.send(StreamEvent::Message(Bytes::from_static(b"{}")))
                .unwrap();
        }
        sink.send(StreamEvent::Progress(Bytes::from_static(b"1")))
            .unwrap();
        sink.send(StreamEvent::Progress(Bytes::from_static(b"2")))
            .unwrap();
        for _ in 0..MAX_QUEUED {
            assert!(matches!(source.recv().await, Some(StreamEvent::Message(_))));
        }
        sink.send(StreamEvent::Message(Bytes::from_static(b"after")))
            .unwrap();
        let Some(StreamEvent::Progress(p)) = source.recv().await else {
            panic!("the progress kept aside comes first")
        };
        assert_eq!(&p[..], b"2");
        let Some(StreamEvent::Message(m)) = source.recv().await else {
            panic!("then what followed")
        };
        assert_eq!(&m[..], b"after");
    }

    #[tokio::test]
    async fn bytes_are_bounded_too_but_one_notification_always_fits() {
        let (sink, mut source) = channel();
        let big = Bytes::from(vec![b' '; MAX_QUEUED_BYTES + 1]);
        sink.send(StreamEvent::Message(big.clone())).unwrap();
        sink.send(StreamEvent::Message(big)).unwrap();
        assert!(source.recv().await.is_some());
        let next = tokio::time::timeout(std::time::Duration::from_millis(50), source.recv()).await;
        assert!(next.is_err(), "the second one was dropped");
    }

    #[tokio::test]
    async fn a_closed_queue_is_reported() {
        let (sink, source) = channel();
        drop(source);
        assert!(sink.send(StreamEvent::Progress(Bytes::new())).is_err());
        assert!(
            sink.send(StreamEvent::Response(Bytes::new(), Verdict::Ok))
                .is_err()
        );
    }
}
