//! The queue of one forwarded request's events, from the upstream link (which must never wait:
//! a shared stdio connection carries every session's answers) to the request's
//! `ForwardStream`. The answer, failures and requests to the client always pass; notifications
//! beyond a bound are dropped and counted — progress coalesced: the latest one waits aside and
//! goes in first when there is room again or anything else follows — so an upstream flooding
//! a request whose stream is not being read (a parked request, a slow pump) cannot grow the
//! gateway's memory with it, and the client still sees the last progress before the answer.
//!
//! Every forwarded call makes one, and most carry a single event (the answer), so the queue is
//! one allocation: a per-request lock (taken by the link's reader and the request's stream, no
//! one else) around the first event held in place and a `VecDeque` for any that follow it.
//! A general channel cost three allocations here, one of them a block of 32 slots.

use std::collections::VecDeque;
use std::future::poll_fn;
use std::sync::{Arc, Mutex, MutexGuard};
use std::task::{Poll, Waker};

use bytes::Bytes;

use super::StreamEvent;

/// Notifications queued for one request beyond which more are dropped.
const MAX_QUEUED: usize = 10_000;
/// Bytes of queued notifications beyond which more are dropped (one is always taken).
const MAX_QUEUED_BYTES: usize = 4 * 1024 * 1024;

/// The queue's two ends.
pub(crate) fn channel() -> (EventSink, EventSource) {
    let shared = Arc::new(Mutex::new(Queue {
        first: None,
        rest: VecDeque::new(),
        waker: None,
        senders: 1,
        listening: true,
        notifications: 0,
        bytes: 0,
        stashed: None,
        warned: false,
    }));
    (
        EventSink {
            shared: shared.clone(),
        },
        EventSource { shared },
    )
}

/// The queue and both ends' state, under the request's lock.
struct Queue {
    /// The oldest event, when there is one (so a single event needs no buffer).
    first: Option<StreamEvent>,
    /// The events after `first`, oldest first (empty while `first` is `None`).
    rest: VecDeque<StreamEvent>,
    /// The request's stream, waiting for an event.
    waker: Option<Waker>,
    /// Sending ends alive; none left means nothing more comes.
    senders: usize,
    /// Whether the receiving end is alive.
    listening: bool,
    /// Notifications queued, and their bytes (nothing else is bounded).
    notifications: usize,
    bytes: usize,
    /// The latest progress that found the queue full.
    stashed: Option<Bytes>,
    /// Whether a drop was logged for this request already.
    warned: bool,
}

impl Queue {
    fn push(&mut self, event: StreamEvent) -> Option<Waker> {
        if let StreamEvent::Message(b) | StreamEvent::Progress(b) = &event {
            self.notifications += 1;
            self.bytes += b.len();
        }
        if self.first.is_none() {
            self.first = Some(event);
        } else {
            self.rest.push_back(event);
        }
        self.waker.take()
    }

    fn pop(&mut self) -> Option<StreamEvent> {
        let event = self.first.take()?;
        self.first = self.rest.pop_front();
        if let StreamEvent::Message(b) | StreamEvent::Progress(b) = &event {
            self.notifications -= 1;
            self.bytes -= b.len();
        }
        Some(event)
    }

    fn is_full(&self, size: usize) -> bool {
        self.notifications > 0
            && (self.notifications >= MAX_QUEUED || self.bytes + size > MAX_QUEUED_BYTES)
    }

    /// Queues the progress kept aside, if any: when `always`, or when it fits. Returns whether
    /// nothing is left aside, and whom to wake.
    fn unstash(&mut self, always: bool) -> (bool, Option<Waker>) {
        let Some(size) = self.stashed.as_ref().map(Bytes::len) else {
            return (true, None);
        };
        if !always && self.is_full(size) {
            return (false, None);
        }
        match self.stashed.take() {
            Some(progress) => (true, self.push(StreamEvent::Progress(progress))),
            None => (true, None),
        }
    }
}

/// What happened to a notification that did not fit.
enum Dropped {
    /// It was progress and took the place of the one kept aside (nothing was lost yet).
    Stashed,
    /// A notification was dropped; the first time for this request, with the queue's length.
    Counted(Option<usize>),
}

/// The request's end of the queue is gone (the request finished or was cancelled).
#[derive(Debug)]
pub(crate) struct Closed;

/// A sending end, kept in the request's pending entry.
pub(crate) struct EventSink {
    shared: Arc<Mutex<Queue>>,
}

/// The queue, even if a thread panicked while holding it (its state stays consistent: every
/// change is made in one step).
fn lock(shared: &Mutex<Queue>) -> MutexGuard<'_, Queue> {
    shared
        .lock()
        .unwrap_or_else(std::sync::PoisonError::into_inner)
}

impl Clone for EventSink {
    fn clone(&self) -> Self {
        lock(&self.shared).senders += 1;
        Self {
            shared: self.shared.clone(),
        }
    }
}

impl Drop for EventSink {
    fn drop(&mut self) {
        let waker = {
            let mut q = lock(&self.shared);
            q.senders -= 1;
            if q.senders == 0 { q.waker.take() } else { None }
        };
        if let Some(w) = waker {
            w.wake();
        }
    }
}

impl EventSink {
    /// Queues `event`. A notification that finds the queue full is dropped, or for progress
    /// kept aside as the latest (`Ok` either way: the request still listens; its client just
    /// falls behind).
    pub(crate) fn send(&self, event: StreamEvent) -> Result<(), Closed> {
        let (wake, dropped) = {
            let mut q = lock(&self.shared);
            if !q.listening {
                return Err(Closed);
            }
            match &event {
                StreamEvent::Message(b) | StreamEvent::Progress(b) => {
                    let size = b.len();
                    let (clear, w1) = if q.stashed.is_some() {
                        q.unstash(false)
                    } else {
                        (true, None)
                    };
                    if clear && !q.is_full(size) {
                        let w2 = q.push(event);
                        (w1.or(w2), None)
                    } else {
                        (w1, Some(set_aside(&mut q, event)))
                    }
                }
                StreamEvent::Request(_) | StreamEvent::Response(..) | StreamEvent::Failed(_) => {
                    // The latest progress goes first: it came before.
                    let (_, w1) = q.unstash(true);
                    let w2 = q.push(event);
                    (w1.or(w2), None)
                }
            }
        };
        if let Some(w) = wake {
            w.wake();
        }
        if let Some(Dropped::Counted(first)) = dropped {
            crate::metrics::get().dropped_notification("request_queue");
            if let Some(queued) = first {
                tracing::warn!(
                    queued,
                    "an upstream sends notifications faster than its request's stream takes them: dropping them (keeping the latest progress) until it catches up"
                );
            }
        }
        Ok(())
    }
}

/// A notification that does not fit: progress replaces the one kept aside, anything else is
/// dropped.
fn set_aside(q: &mut Queue, event: StreamEvent) -> Dropped {
    let replaced = match event {
        StreamEvent::Progress(b) => q.stashed.replace(b).is_some(),
        _ => true,
    };
    if !replaced {
        return Dropped::Stashed;
    }
    let first = !std::mem::replace(&mut q.warned, true);
    Dropped::Counted(first.then_some(q.notifications))
}

/// The receiving end, read by the request's `ForwardStream`.
pub(crate) struct EventSource {
    shared: Arc<Mutex<Queue>>,
}

impl EventSource {
    /// The next event; `None` once every sending end is gone and the queue is empty.
    /// Cancel-safe: an event is taken only when it is returned.
    pub(crate) async fn recv(&mut self) -> Option<StreamEvent> {
        poll_fn(|cx| {
            let mut q = lock(&self.shared);
            if let Some(event) = q.pop() {
                return Poll::Ready(Some(event));
            }
            if q.senders == 0 {
                return Poll::Ready(None);
            }
            match &mut q.waker {
                Some(w) => w.clone_from(cx.waker()),
                None => q.waker = Some(cx.waker().clone()),
            }
            Poll::Pending
        })
        .await
    }
}

impl Drop for EventSource {
    fn drop(&mut self) {
        // What is queued goes now, not when the last sending end does.
        let (first, rest, stashed) = {
            let mut q = lock(&self.shared);
            q.listening = false;
            q.waker = None;
            (
                q.first.take(),
                std::mem::take(&mut q.rest),
                q.stashed.take(),
            )
        };
        drop((first, rest, stashed));
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
    async fn events_come_in_order_and_the_end_only_after_the_last_sending_end() {
        let (sink, mut source) = channel();
        let other = sink.clone();
        sink.send(StreamEvent::Message(Bytes::from_static(b"1")))
            .unwrap();
        other
            .send(StreamEvent::Request(Bytes::from_static(b"2")))
            .unwrap();
        sink.send(StreamEvent::Progress(Bytes::from_static(b"3")))
            .unwrap();
        drop(sink);
        let Some(StreamEvent::Message(m)) = source.recv().await else {
            panic!("the first event first")
        };
        assert_eq!(&m[..], b"1");
        other
            .send(StreamEvent::Response(Bytes::from_static(b"4"), Verdict::Ok))
            .unwrap();
        drop(other);
        let mut rest = Vec::new();
        while let Some(ev) = source.recv().await {
            rest.push(match ev {
                StreamEvent::Request(b)
                | StreamEvent::Progress(b)
                | StreamEvent::Response(b, _) => b,
                _ => panic!("no other kind was sent"),
            });
        }
        assert_eq!(
            rest,
            [&b"2"[..], b"3", b"4"],
            "queued events outlive their senders"
        );
    }

    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
    async fn a_waiting_stream_is_woken_by_a_send_from_another_thread() {
        let (sink, mut source) = channel();
        let waiting = tokio::spawn(async move { source.recv().await });
        let sender = std::thread::spawn(move || {
            std::thread::sleep(std::time::Duration::from_millis(20));
            sink.send(StreamEvent::Response(
                Bytes::from_static(b"{}"),
                Verdict::Ok,
            ))
            .unwrap();
        });
        let got = tokio::time::timeout(std::time::Duration::from_secs(5), waiting)
            .await
            .expect("woken")
            .unwrap();
        assert!(matches!(got, Some(StreamEvent::Response(..))));
        sender.join().unwrap();
    }

    #[tokio::test]
    async fn a_stream_whose_senders_all_left_ends_while_it_waits() {
        let (sink, mut source) = channel();
        let waiting = tokio::spawn(async move { source.recv().await });
        tokio::task::yield_now().await;
        drop(sink);
        let got = tokio::time::timeout(std::time::Duration::from_secs(5), waiting)
            .await
            .expect("woken by the last sender leaving")
            .unwrap();
        assert!(got.is_none());
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
