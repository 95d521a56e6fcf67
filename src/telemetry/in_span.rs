//! A future polled inside a span it borrows ([`in_span`]): what `tracing::Instrument` does for
//! a request's future, without the span handle of its own and without entering the span again
//! to drop a future that has completed.

use std::future::Future;
use std::pin::Pin;
use std::task::{Context, Poll};

use tracing::Span;

/// Polls `fut` inside `span`, as `fut.instrument(span.clone())` would, for a span its caller
/// holds longer anyway (a request's). `Instrument` takes a handle of its own (a clone, and a
/// close when dropped) and enters the span once more to drop the future even when it has
/// completed: with the enter and exit, four trips through the span registry and its layers
/// per request. Here the future is dropped in its last poll, inside the span, and nothing
/// else is needed. A future dropped unfinished (its request abandoned) is still dropped
/// inside the span, so what its drop logs keeps the request's context.
pub fn in_span<F: Future>(span: &Span, fut: F) -> InSpan<'_, F> {
    InSpan {
        span,
        fut: Some(fut),
    }
}

pin_project_lite::pin_project! {
    /// The future of [`in_span`]. (A type, not an `async fn`: an `async fn` would keep its
    /// argument and the future it polls as two copies of the request's future.)
    pub struct InSpan<'a, F> {
        span: &'a Span,
        // `None` once completed (and dropped).
        #[pin]
        fut: Option<F>,
    }

    impl<'a, F> PinnedDrop for InSpan<'a, F> {
        fn drop(this: Pin<&mut Self>) {
            let mut this = this.project();
            if this.fut.is_some() {
                let _entered = this.span.enter();
                this.fut.set(None);
            }
        }
    }
}

impl<F: Future> Future for InSpan<'_, F> {
    type Output = F::Output;

    fn poll(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<F::Output> {
        let mut this = self.project();
        let _entered = this.span.enter();
        let Some(fut) = this.fut.as_mut().as_pin_mut() else {
            unreachable!("InSpan polled after it completed");
        };
        let out = std::task::ready!(fut.poll(cx));
        this.fut.set(None);
        Poll::Ready(out)
    }
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used)]

    use std::sync::{Arc, Mutex};

    use super::*;

    /// Where a future was polled and dropped: whether the span in question was the current
    /// one each time.
    #[derive(Default)]
    struct Seen {
        polled_inside: Vec<bool>,
        dropped_inside: Option<bool>,
    }

    /// Pending `pending` times, then ready with 7; notes where it runs and is dropped.
    struct Probe {
        span_id: tracing::Id,
        pending: usize,
        seen: Arc<Mutex<Seen>>,
    }

    impl Probe {
        /// A probe for `span`, and what it will see.
        fn new(span: &Span, pending: usize) -> (Probe, Arc<Mutex<Seen>>) {
            let seen = Arc::default();
            let probe = Probe {
                span_id: span.id().unwrap(),
                pending,
                seen: Arc::clone(&seen),
            };
            (probe, seen)
        }

        fn inside(&self) -> bool {
            Span::current().id().as_ref() == Some(&self.span_id)
        }
    }

    impl Future for Probe {
        type Output = u32;
        fn poll(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<u32> {
            let inside = self.inside();
            self.seen.lock().unwrap().polled_inside.push(inside);
            if self.pending == 0 {
                return Poll::Ready(7);
            }
            self.pending -= 1;
            cx.waker().wake_by_ref();
            Poll::Pending
        }
    }

    impl Drop for Probe {
        fn drop(&mut self) {
            let inside = self.inside();
            self.seen.lock().unwrap().dropped_inside = Some(inside);
        }
    }

    fn with_span(test: impl FnOnce(&Span)) {
        let subscriber = tracing_subscriber::registry();
        tracing::subscriber::with_default(subscriber, || {
            let span = tracing::info_span!("request");
            assert!(span.id().is_some(), "the registry records the span");
            test(&span);
        });
    }

    fn block_on<F: Future>(fut: F) -> F::Output {
        tokio::runtime::Builder::new_current_thread()
            .build()
            .unwrap()
            .block_on(fut)
    }

    #[test]
    fn polls_and_drops_a_completed_future_inside_the_span() {
        with_span(|span| {
            let (probe, seen) = Probe::new(span, 2);
            assert_eq!(block_on(in_span(span, probe)), 7);
            let seen = seen.lock().unwrap();
            assert_eq!(seen.polled_inside, [true, true, true]);
            assert_eq!(seen.dropped_inside, Some(true));
            assert!(
                Span::current().is_none(),
                "the span is left after the last poll"
            );
        });
    }

    #[test]
    fn an_unfinished_future_dropped_is_dropped_inside_the_span_and_the_span_left() {
        with_span(|span| {
            let (probe, seen) = Probe::new(span, usize::MAX);
            let mut fut = Box::pin(in_span(span, probe));
            let waker = std::task::Waker::noop();
            let mut cx = Context::from_waker(waker);
            assert!(fut.as_mut().poll(&mut cx).is_pending());
            assert!(Span::current().is_none(), "not left entered between polls");
            drop(fut);
            assert_eq!(seen.lock().unwrap().dropped_inside, Some(true));
            assert!(Span::current().is_none(), "the span is left after the drop");
        });
    }

    #[test]
    fn a_future_never_polled_is_dropped_inside_the_span() {
        with_span(|span| {
            let (probe, seen) = Probe::new(span, 0);
            drop(in_span(span, probe));
            let seen = seen.lock().unwrap();
            assert!(seen.polled_inside.is_empty());
            assert_eq!(seen.dropped_inside, Some(true));
            assert!(Span::current().is_none(), "the span is left after the drop");
        });
    }
}
