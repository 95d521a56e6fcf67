//! A connection's future polled again at once when it wakes itself while being polled, instead
//! of being sent round the scheduler.
//!
//! hyper's HTTP/1.1 server wakes its own connection task once per request with a body: the
//! handler asks for the body (waking the connection's reader, the same task), the reader hands
//! over the bytes (waking the handler, the same task). Tokio treats a task notified during its
//! own poll as a yield: it goes to the back of the worker's queue and the runtime wakes a
//! parked worker to steal it — at moderate load a futex wake, the other worker's wake-up and
//! park, and often the task moving to the other core, for every call. Here such a wake is
//! noted and the future polled again in the same turn, a few times at most and only while the
//! task has cooperative budget left, so a connection still cannot keep its worker from others.

use std::future::Future;
use std::pin::Pin;
use std::sync::Arc;
use std::sync::atomic::{AtomicU8, Ordering};
use std::task::{Context, Poll, Wake, Waker};

use futures_util::task::AtomicWaker;

/// Polls in one turn at most: a request's own wake needs one more; pipelined requests a few.
const MAX_POLLS: usize = 4;

/// The future is being polled: a wake now only marks it.
const POLLING: u8 = 1;
/// The future woke itself (or was woken from elsewhere) while being polled.
const WOKEN: u8 = 2;

/// `inner`, re-polled on its own wakes (see the module's note).
pub(crate) struct Repoll<F> {
    inner: Pin<Box<F>>,
    signal: Arc<Signal>,
    /// The waker handed to `inner`: one for the connection's life, so `will_wake` holds and
    /// the futures inside need not clone a new one at every poll.
    waker: Waker,
}

struct Signal {
    state: AtomicU8,
    /// The task's own waker, for wakes that come while the future is not being polled.
    task: AtomicWaker,
}

impl Wake for Signal {
    fn wake(self: Arc<Self>) {
        self.wake_by_ref();
    }

    fn wake_by_ref(self: &Arc<Self>) {
        let before = self.state.fetch_or(WOKEN, Ordering::AcqRel);
        if before & POLLING == 0 {
            self.task.wake();
        }
    }
}

impl<F: Future> Repoll<F> {
    pub(crate) fn new(inner: F) -> Self {
        let signal = Arc::new(Signal {
            state: AtomicU8::new(0),
            task: AtomicWaker::new(),
        });
        let waker = Waker::from(signal.clone());
        Repoll {
            inner: Box::pin(inner),
            signal,
            waker,
        }
    }
}

impl<F: Future> Future for Repoll<F> {
    type Output = F::Output;

    fn poll(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<F::Output> {
        let this = self.get_mut();
        this.signal.task.register(cx.waker());
        let mut inner_cx = Context::from_waker(&this.waker);
        for _ in 0..MAX_POLLS {
            this.signal.state.store(POLLING, Ordering::Release);
            if let Poll::Ready(out) = this.inner.as_mut().poll(&mut inner_cx) {
                this.signal.state.store(0, Ordering::Release);
                return Poll::Ready(out);
            }
            // Not woken meanwhile: wakes from now on go to the task.
            if this
                .signal
                .state
                .compare_exchange(POLLING, 0, Ordering::AcqRel, Ordering::Acquire)
                .is_ok()
            {
                return Poll::Pending;
            }
            if !tokio::task::coop::has_budget_remaining() {
                break;
            }
        }
        // Woken during every poll, or out of budget: through the scheduler like any task.
        this.signal.state.store(0, Ordering::Release);
        cx.waker().wake_by_ref();
        Poll::Pending
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::sync::atomic::AtomicUsize;

    /// Wakes itself `wakes` times, once per poll, then is ready; counts its polls.
    struct SelfWaking {
        wakes: usize,
        polls: Arc<AtomicUsize>,
    }

    impl Future for SelfWaking {
        type Output = ();
        fn poll(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<()> {
            self.polls.fetch_add(1, Ordering::Relaxed);
            if self.wakes == 0 {
                return Poll::Ready(());
            }
            self.wakes -= 1;
            cx.waker().wake_by_ref();
            Poll::Pending
        }
    }

    /// Counts the wakes of the task that polls the future under test.
    struct CountingWaker(AtomicUsize);
    impl Wake for CountingWaker {
        fn wake(self: Arc<Self>) {
            self.0.fetch_add(1, Ordering::Relaxed);
        }
    }

    fn poll_once<F: Future>(f: &mut Pin<Box<Repoll<F>>>, task: &Arc<CountingWaker>) -> bool {
        let waker = Waker::from(task.clone());
        f.as_mut().poll(&mut Context::from_waker(&waker)).is_ready()
    }

    #[test]
    fn a_self_wake_is_polled_again_in_the_same_turn() {
        let polls = Arc::new(AtomicUsize::new(0));
        let task = Arc::new(CountingWaker(AtomicUsize::new(0)));
        let mut f = Box::pin(Repoll::new(SelfWaking {
            wakes: 2,
            polls: polls.clone(),
        }));
        assert!(poll_once(&mut f, &task));
        assert_eq!(polls.load(Ordering::Relaxed), 3);
        assert_eq!(
            task.0.load(Ordering::Relaxed),
            0,
            "the task was never woken"
        );
    }

    #[test]
    fn a_future_that_keeps_waking_itself_goes_through_the_scheduler() {
        let polls = Arc::new(AtomicUsize::new(0));
        let task = Arc::new(CountingWaker(AtomicUsize::new(0)));
        let mut f = Box::pin(Repoll::new(SelfWaking {
            wakes: 100,
            polls: polls.clone(),
        }));
        assert!(!poll_once(&mut f, &task));
        assert_eq!(polls.load(Ordering::Relaxed), MAX_POLLS);
        assert_eq!(
            task.0.load(Ordering::Relaxed),
            1,
            "woken once, to run again later"
        );
    }

    #[test]
    fn a_wake_between_polls_reaches_the_task() {
        let task = Arc::new(CountingWaker(AtomicUsize::new(0)));
        let (tx, rx) = tokio::sync::oneshot::channel::<u8>();
        let mut f = Box::pin(Repoll::new(rx));
        assert!(!poll_once(&mut f, &task));
        assert_eq!(task.0.load(Ordering::Relaxed), 0);
        assert!(tx.send(7).is_ok());
        assert_eq!(task.0.load(Ordering::Relaxed), 1);
        assert!(poll_once(&mut f, &task));
    }

    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
    async fn wakes_from_other_threads_are_never_lost() {
        // A channel fed from another thread while the receiving task is polled: every value
        // arrives, however the wakes fall between and during polls.
        let (tx, mut rx) = tokio::sync::mpsc::channel::<u32>(4);
        let receiver = tokio::spawn(Repoll::new(async move {
            let mut sum = 0u64;
            while let Some(v) = rx.recv().await {
                sum += u64::from(v);
            }
            sum
        }));
        let sender = std::thread::spawn(move || {
            for v in 0..20_000u32 {
                if tx.blocking_send(v).is_err() {
                    return;
                }
            }
        });
        let sum = tokio::time::timeout(std::time::Duration::from_secs(30), receiver)
            .await
            .expect("the receiver finishes")
            .expect("no panic");
        sender.join().expect("sender");
        assert_eq!(sum, (0..20_000u64).sum::<u64>());
    }
}
