//! The per-connection timers hyper does not have: the first request must arrive within
//! `header_read_timeout` of accept (hyper's HTTP/1.1 header timer only starts once the
//! protocol is known, so a client that sends nothing, or half of the HTTP/2 preface, would
//! otherwise stay forever), and a connection with no request in flight is closed after
//! `idle_timeout` (HTTP/2 has no such timer at all).
//!
//! A request is in flight from the moment the service is called until its response body is
//! dropped: the body is wrapped in [`Tracked`] (a field, not a box: no allocation). The
//! watchdog sleeps until the next moment the connection could have expired and looks again,
//! so it costs one timer per connection and no work per request.

use std::pin::Pin;
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, AtomicU64, AtomicUsize, Ordering};
use std::task::{Context, Poll};
use std::time::Duration;

use hyper::body::{Body, Frame, SizeHint};
use tokio::time::Instant;

/// What a connection has been doing, shared by its service (requests begin), its response
/// bodies (requests end) and its watchdog.
#[derive(Debug)]
pub struct Activity {
    accepted: Instant,
    /// A request has begun on this connection.
    started: AtomicBool,
    in_flight: AtomicUsize,
    /// When `in_flight` last dropped to zero, in milliseconds after `accepted`.
    idle_since_ms: AtomicU64,
}

/// Why the watchdog closed a connection.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Expiry {
    /// No complete request within `header_read_timeout` of accept.
    Header,
    /// No request in flight for `idle_timeout`.
    Idle,
}

impl Expiry {
    /// The metrics label.
    pub fn label(self) -> &'static str {
        match self {
            Expiry::Header => "header_timeout",
            Expiry::Idle => "idle_timeout",
        }
    }
}

/// One request in flight; ends when dropped.
#[derive(Debug)]
pub struct InFlight(Arc<Activity>);

impl Activity {
    pub fn new(accepted: Instant) -> Arc<Activity> {
        Arc::new(Activity {
            accepted,
            started: AtomicBool::new(false),
            in_flight: AtomicUsize::new(0),
            idle_since_ms: AtomicU64::new(0),
        })
    }

    /// A request (its head complete) is handed to the service.
    pub fn begin(self: &Arc<Self>) -> InFlight {
        self.in_flight.fetch_add(1, Ordering::AcqRel);
        self.started.store(true, Ordering::Release);
        InFlight(self.clone())
    }

    fn idle_since(&self) -> Instant {
        self.accepted + Duration::from_millis(self.idle_since_ms.load(Ordering::Acquire))
    }
}

impl Drop for InFlight {
    fn drop(&mut self) {
        let activity = &self.0;
        // Recorded by every request that ends (whichever is last is not known without a
        // lock), before the count drops, so a watchdog that sees zero sees this time.
        let since = u64::try_from(activity.accepted.elapsed().as_millis()).unwrap_or(u64::MAX);
        activity.idle_since_ms.fetch_max(since, Ordering::AcqRel);
        activity.in_flight.fetch_sub(1, Ordering::AcqRel);
    }
}

/// Resolves when the connection has expired (and is to be closed); pending forever while
/// it is busy. `header_timeout` counts from accept until the first request begins;
/// `idle_timeout` from the end of the last request in flight.
pub async fn expire(
    activity: &Activity,
    header_timeout: Duration,
    idle_timeout: Duration,
) -> Expiry {
    loop {
        let now = Instant::now();
        let wake = if !activity.started.load(Ordering::Acquire) {
            let deadline = activity.accepted + header_timeout;
            if now >= deadline {
                return Expiry::Header;
            }
            // Looked at again within an idle period, so a first request that comes and goes
            // early is not left idle until the header deadline.
            deadline.min(now + idle_timeout)
        } else if activity.in_flight.load(Ordering::Acquire) > 0 {
            now + idle_timeout
        } else {
            let deadline = activity.idle_since() + idle_timeout;
            if now >= deadline {
                return Expiry::Idle;
            }
            deadline
        };
        tokio::time::sleep_until(wake).await;
    }
}

/// A response body that keeps its request in flight until it is dropped.
#[derive(Debug)]
pub struct Tracked<B> {
    inner: B,
    _in_flight: InFlight,
}

impl<B> Tracked<B> {
    pub fn new(inner: B, in_flight: InFlight) -> Tracked<B> {
        Tracked {
            inner,
            _in_flight: in_flight,
        }
    }
}

impl<B: Body + Unpin> Body for Tracked<B> {
    type Data = B::Data;
    type Error = B::Error;

    fn poll_frame(
        mut self: Pin<&mut Self>,
        cx: &mut Context<'_>,
    ) -> Poll<Option<Result<Frame<Self::Data>, Self::Error>>> {
        Pin::new(&mut self.inner).poll_frame(cx)
    }

    fn is_end_stream(&self) -> bool {
        self.inner.is_end_stream()
    }

    fn size_hint(&self) -> SizeHint {
        self.inner.size_hint()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const HEADER: Duration = Duration::from_secs(10);
    const IDLE: Duration = Duration::from_secs(3);

    #[tokio::test(start_paused = true)]
    async fn a_connection_without_a_request_expires_at_the_header_timeout() {
        let activity = Activity::new(Instant::now());
        assert_eq!(expire(&activity, HEADER, IDLE).await, Expiry::Header);
        assert_eq!(activity.accepted.elapsed(), HEADER);
    }

    #[tokio::test(start_paused = true)]
    async fn an_early_first_request_starts_the_idle_clock_when_it_ends() {
        let activity = Activity::new(Instant::now());
        tokio::time::sleep(Duration::from_millis(500)).await;
        drop(activity.begin());
        assert_eq!(expire(&activity, HEADER, IDLE).await, Expiry::Idle);
        assert_eq!(
            activity.accepted.elapsed(),
            Duration::from_millis(500) + IDLE,
            "idle from the end of the request, not from the header deadline"
        );
    }

    #[tokio::test(start_paused = true)]
    async fn a_request_in_flight_keeps_the_connection_whatever_its_length() {
        let activity = Activity::new(Instant::now());
        let request = activity.begin();
        let watchdog =
            tokio::time::timeout(Duration::from_secs(600), expire(&activity, HEADER, IDLE));
        assert!(watchdog.await.is_err(), "never expired while busy");
        let ended = Instant::now();
        drop(request);
        assert_eq!(expire(&activity, HEADER, IDLE).await, Expiry::Idle);
        assert_eq!(ended.elapsed(), IDLE);
    }

    #[tokio::test(start_paused = true)]
    async fn concurrent_requests_are_idle_only_when_the_last_one_ends() {
        let activity = Activity::new(Instant::now());
        let first = activity.begin();
        let second = activity.begin();
        tokio::time::sleep(Duration::from_secs(1)).await;
        drop(first);
        tokio::time::sleep(Duration::from_secs(5)).await;
        let last_end = Instant::now();
        drop(second);
        assert_eq!(expire(&activity, HEADER, IDLE).await, Expiry::Idle);
        assert_eq!(last_end.elapsed(), IDLE);
    }
}
