//! A future polled only once it has been woken ([`Woken`]). A connection's task selects over
//! its connection and its watchdog (a timer that fires rarely); every wake-up of the task for
//! the connection (about three per request) polled the watchdog's timer again, ~110
//! instructions each for nothing. Wrapped, the watchdog is given a waker of its own, which
//! marks it woken and wakes the task: between its wake-ups, a poll of it is a flag test. The
//! task that runs a stdio child does the same with the wait for the child's exit beside the
//! reading of its output (one wake-up per message from the child).

use std::future::Future;
use std::pin::Pin;
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::task::{Context, Poll, Wake, Waker};

use futures_util::task::AtomicWaker;

pin_project_lite::pin_project! {
    /// `inner`, polled on the first poll and then only after it woke its waker.
    pub struct Woken<F> {
        #[pin]
        inner: F,
        gate: Arc<Gate>,
        // The gate as a waker, made once.
        waker: Waker,
    }
}

/// Whether the inner future has been woken since it was last polled, and the task to wake.
struct Gate {
    woken: AtomicBool,
    task: AtomicWaker,
}

impl Wake for Gate {
    fn wake(self: Arc<Self>) {
        self.wake_by_ref();
    }

    fn wake_by_ref(self: &Arc<Self>) {
        // Marked before the task is woken, so the poll that follows sees it.
        self.woken.store(true, Ordering::Release);
        self.task.wake();
    }
}

impl<F> Woken<F> {
    pub fn new(inner: F) -> Woken<F> {
        let gate = Arc::new(Gate {
            woken: AtomicBool::new(true),
            task: AtomicWaker::new(),
        });
        let waker = Waker::from(Arc::clone(&gate));
        Woken { inner, gate, waker }
    }
}

impl<F: Future> Future for Woken<F> {
    type Output = F::Output;

    fn poll(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<F::Output> {
        let this = self.project();
        // Registered before the flag is read: a wake-up in between wakes this task again.
        this.gate.task.register(cx.waker());
        if !this.gate.woken.swap(false, Ordering::AcqRel) {
            return Poll::Pending;
        }
        this.inner.poll(&mut Context::from_waker(this.waker))
    }
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used)]
    use std::sync::atomic::AtomicUsize;
    use std::time::Duration;

    use super::*;

    /// Counts its polls; pending (waking its task at once) until `ready` polls were made.
    struct Busy<'a> {
        polls: &'a AtomicUsize,
        ready: usize,
    }

    impl Future for Busy<'_> {
        type Output = ();

        fn poll(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<()> {
            let n = self.polls.fetch_add(1, Ordering::SeqCst) + 1;
            if n >= self.ready {
                return Poll::Ready(());
            }
            cx.waker().wake_by_ref();
            Poll::Pending
        }
    }

    pin_project_lite::pin_project! {
        /// `inner`, its polls counted.
        struct Polled<'a, F> {
            #[pin]
            inner: F,
            polls: &'a AtomicUsize,
        }
    }

    impl<F: Future> Future for Polled<'_, F> {
        type Output = F::Output;

        fn poll(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<F::Output> {
            let this = self.project();
            this.polls.fetch_add(1, Ordering::SeqCst);
            this.inner.poll(cx)
        }
    }

    #[tokio::test(start_paused = true)]
    async fn a_timer_fires_through_the_gate_and_other_wake_ups_do_not_poll_it() {
        let polls = AtomicUsize::new(0);
        let timer = Woken::new(Polled {
            inner: tokio::time::sleep(Duration::from_secs(5)),
            polls: &polls,
        });
        // A busy neighbour in the same task: wakes it on every poll, a hundred times.
        let busy_polls = AtomicUsize::new(0);
        let busy = Busy {
            polls: &busy_polls,
            ready: 100,
        };
        let mut timer = std::pin::pin!(timer);
        tokio::select! {
            biased;
            () = busy => {}
            () = &mut timer => panic!("the timer fired early"),
        }
        assert_eq!(busy_polls.load(Ordering::SeqCst), 100);
        assert_eq!(
            polls.load(Ordering::SeqCst),
            1,
            "the timer was polled once (to arm it), not on each of the task's wake-ups"
        );
        let start = tokio::time::Instant::now();
        timer.await;
        assert_eq!(start.elapsed(), Duration::from_secs(5));
        assert_eq!(
            polls.load(Ordering::SeqCst),
            2,
            "polled again once it fired"
        );
    }

    #[tokio::test]
    async fn a_wake_up_from_another_thread_reaches_the_task() {
        let (tx, rx) = tokio::sync::oneshot::channel();
        let waiting = tokio::spawn(Woken::new(rx));
        tokio::time::sleep(Duration::from_millis(20)).await;
        std::thread::spawn(move || tx.send(7))
            .join()
            .unwrap()
            .unwrap();
        let got = tokio::time::timeout(Duration::from_secs(10), waiting).await;
        assert_eq!(got.unwrap().unwrap(), Ok(7));
    }
}
