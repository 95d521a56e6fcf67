//! A future polled inside a request's span or log context ([`in_span`]): what
//! `tracing::Instrument` does for a request's future, without the span handle of its own and
//! without entering the span again to drop a future that has completed; and the same for a
//! task a request spawns ([`carry`]).

use std::borrow::Borrow;
use std::future::Future;
use std::pin::Pin;
use std::sync::Arc;
use std::task::{Context, Poll};

use tracing::Span;

use super::RequestSpan;
use super::log_context::{self, Current, LogContext};

/// Polls `fut` inside `request`'s span (or its own log context), as
/// `fut.instrument(span.clone())` would, for a span its caller holds longer anyway.
/// `Instrument` takes a handle of its own (a clone, and a close when dropped) and enters the
/// span once more to drop the future even when it has completed: with the enter and exit,
/// four trips through the span registry and its layers per request. Here the future is
/// dropped in its last poll, inside the span, and nothing else is needed. A future dropped
/// unfinished (its request abandoned) is still dropped inside the span, so what its drop logs
/// keeps the request's context.
pub fn in_span<F: Future>(request: &RequestSpan, fut: F) -> InSpan<&Span, F> {
    within(&request.span, request.context.clone(), fut)
}

/// `fut` inside the span and the log context current now: for a task a request spawns (a
/// stream's pump), which goes on in the request's context after the request's own future.
pub fn carry<F: Future>(fut: F) -> InSpan<Span, F> {
    within(Span::current(), log_context::current(), fut)
}

fn within<S: Borrow<Span>, F: Future>(
    span: S,
    context: Option<Arc<LogContext>>,
    fut: F,
) -> InSpan<S, F> {
    InSpan {
        span,
        context,
        fut: Some(fut),
    }
}

pin_project_lite::pin_project! {
    /// The future of [`in_span`] and [`carry`]. (A type, not an `async fn`: an `async fn`
    /// would keep its argument and the future it polls as two copies of the request's
    /// future.)
    pub struct InSpan<S: Borrow<Span>, F> {
        span: S,
        // Made current while `fut` is polled or dropped (`None`: the span is the context).
        context: Option<Arc<LogContext>>,
        // `None` once completed (and dropped).
        #[pin]
        fut: Option<F>,
    }

    impl<S: Borrow<Span>, F> PinnedDrop for InSpan<S, F> {
        fn drop(this: Pin<&mut Self>) {
            let mut this = this.project();
            if this.fut.is_some() {
                let _entered = Borrow::<Span>::borrow(&*this.span).enter();
                let _current = Current::enter(this.context);
                this.fut.set(None);
            }
        }
    }
}

impl<S: Borrow<Span>, F: Future> Future for InSpan<S, F> {
    type Output = F::Output;

    fn poll(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<F::Output> {
        let mut this = self.project();
        let _entered = Borrow::<Span>::borrow(&*this.span).enter();
        let _current = Current::enter(this.context);
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
            assert_eq!(block_on(within(span, None, probe)), 7);
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
            let mut fut = Box::pin(within(span, None, probe));
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
            drop(within(span, None, probe));
            let seen = seen.lock().unwrap();
            assert!(seen.polled_inside.is_empty());
            assert_eq!(seen.dropped_inside, Some(true));
            assert!(Span::current().is_none(), "the span is left after the drop");
        });
    }

    /// Pending `pending` times, then ready; notes whether `context` was current at each poll
    /// and at its drop.
    struct ContextProbe {
        context: Arc<LogContext>,
        pending: usize,
        seen: Arc<Mutex<Seen>>,
    }

    impl ContextProbe {
        fn inside(&self) -> bool {
            log_context::current().is_some_and(|c| Arc::ptr_eq(&c, &self.context))
        }
    }

    impl Future for ContextProbe {
        type Output = ();
        fn poll(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<()> {
            let inside = self.inside();
            self.seen.lock().unwrap().polled_inside.push(inside);
            if self.pending == 0 {
                return Poll::Ready(());
            }
            self.pending -= 1;
            cx.waker().wake_by_ref();
            Poll::Pending
        }
    }

    impl Drop for ContextProbe {
        fn drop(&mut self) {
            let inside = self.inside();
            self.seen.lock().unwrap().dropped_inside = Some(inside);
        }
    }

    fn own_context() -> (RequestSpan, Arc<LogContext>) {
        let context = Arc::new(LogContext::new(
            &Arc::from("acme"),
            &http::Method::POST,
            Some(("tools/call", Some("1"))),
        ));
        let request = RequestSpan {
            span: Span::none(),
            context: Some(Arc::clone(&context)),
        };
        (request, context)
    }

    #[test]
    fn a_requests_own_context_is_current_while_polled_and_dropped_and_carried() {
        let (request, context) = own_context();
        let seen = Arc::new(Mutex::new(Seen::default()));
        let carried = Arc::new(Mutex::new(Seen::default()));
        let probe = ContextProbe {
            context: Arc::clone(&context),
            pending: 2,
            seen: Arc::clone(&seen),
        };
        let spawned = ContextProbe {
            context: Arc::clone(&context),
            pending: 1,
            seen: Arc::clone(&carried),
        };
        let fut = async move {
            // What a request spawns from inside its future carries the context.
            let task = carry(spawned);
            probe.await;
            task.await;
        };
        block_on(in_span(&request, fut));
        assert!(log_context::current().is_none(), "left after the last poll");
        let seen = seen.lock().unwrap();
        assert_eq!(seen.polled_inside, [true, true, true]);
        assert_eq!(seen.dropped_inside, Some(true));
        let carried = carried.lock().unwrap();
        assert_eq!(carried.polled_inside, [true, true]);
        assert_eq!(carried.dropped_inside, Some(true));
    }

    #[test]
    fn an_unfinished_future_is_dropped_inside_its_requests_own_context() {
        let (request, context) = own_context();
        let seen = Arc::new(Mutex::new(Seen::default()));
        let probe = ContextProbe {
            context,
            pending: usize::MAX,
            seen: Arc::clone(&seen),
        };
        let mut fut = Box::pin(in_span(&request, probe));
        let mut cx = Context::from_waker(std::task::Waker::noop());
        assert!(fut.as_mut().poll(&mut cx).is_pending());
        assert!(
            log_context::current().is_none(),
            "not current between polls"
        );
        drop(fut);
        assert_eq!(seen.lock().unwrap().dropped_inside, Some(true));
        assert!(log_context::current().is_none(), "left after the drop");
    }
}
