//! The per-connection timers (hyper's HTTP/1.1 header timer is not used: it costs a boxed,
//! registered timer per request, and starts only once the protocol is known, so a client
//! that sends nothing, or half of the HTTP/2 preface, would stay forever): the first request
//! must arrive within `header_read_timeout` of accept, on HTTP/1.1 each next head within
//! `header_read_timeout` of the last answer, and a connection with no request in flight is
//! closed after `idle_timeout` (HTTP/2 has no such timer at all). Once shutdown begins (the
//! watchdog reports it, [`Watch::Drain`]), the idle limit becomes `drain_grace`.
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
use tokio::sync::watch;
use tokio::time::Instant;

/// The shortest wait before a busy connection is looked at again.
const BUSY_RECHECK: Duration = Duration::from_millis(50);

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
    /// Shutdown has begun: HTTP/1.1 answers ask the client to close.
    draining: AtomicBool,
    /// A request came over HTTP/2 (the protocol of a connection without ALPN is detected).
    http2: AtomicBool,
}

/// The watchdog's limits.
#[derive(Debug, Clone, Copy)]
pub struct Timeouts {
    pub header: Duration,
    pub idle: Duration,
    /// The idle limit once shutdown has begun (when shorter).
    pub drain_grace: Duration,
}

/// Why the watchdog closed a connection.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Expiry {
    /// No complete request head within `header_read_timeout` of accept (HTTP/1.1: or of the
    /// last answer).
    Header,
    /// No request in flight for `idle_timeout`.
    Idle,
    /// Shutting down, and no request in flight for `drain_grace`.
    Drained,
}

/// What the watchdog saw.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Watch {
    /// The connection is to be closed.
    Expired(Expiry),
    /// Shutdown began: the connection drains (and is watched again, with [`watch`]'s `stop`
    /// left out).
    Drain,
}

impl Expiry {
    /// The metrics label.
    pub fn label(self) -> &'static str {
        match self {
            Expiry::Header => "header_timeout",
            Expiry::Idle => "idle_timeout",
            Expiry::Drained => "drained",
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
            draining: AtomicBool::new(false),
            http2: AtomicBool::new(false),
        })
    }

    /// Shutdown has begun for this connection.
    pub fn drain(&self) {
        self.draining.store(true, Ordering::Release);
    }

    /// A request came over HTTP/2.
    pub fn saw_http2(&self) {
        self.http2.store(true, Ordering::Relaxed);
    }

    pub fn is_http2(&self) -> bool {
        self.http2.load(Ordering::Relaxed)
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

impl InFlight {
    /// Shutdown has begun: the answer should close an HTTP/1.1 connection.
    pub fn draining(&self) -> bool {
        self.0.draining.load(Ordering::Acquire)
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

/// Resolves when the connection has expired (and is to be closed), or with
/// [`Watch::Drain`] when `stop` (given while the listener runs) says shutdown began; pending
/// forever while the connection is busy. `header` counts from accept until the first request
/// begins and, on HTTP/1.1, from the end of the last request in flight until the next; `idle`
/// from the end of the last request in flight; without `stop` (draining) both are at most
/// `drain_grace`.
pub async fn watch(
    activity: &Activity,
    limits: Timeouts,
    mut stop: Option<watch::Receiver<()>>,
) -> Watch {
    let (header_timeout, idle_timeout, header, idle) = match stop {
        Some(_) => (limits.header, limits.idle, Expiry::Header, Expiry::Idle),
        None => (
            limits.header.min(limits.drain_grace),
            limits.idle.min(limits.drain_grace),
            Expiry::Drained,
            Expiry::Drained,
        ),
    };
    loop {
        let now = Instant::now();
        let wake = if !activity.started.load(Ordering::Acquire) {
            let deadline = activity.accepted + header_timeout;
            if now >= deadline {
                return Watch::Expired(header);
            }
            // Looked at again within an idle period, so a first request that comes and goes
            // early is not left idle until the header deadline.
            deadline.min(now + idle_timeout)
        } else if activity.in_flight.load(Ordering::Acquire) > 0 {
            // Looked at again later (an ending request does not wake the watchdog); not in a
            // loop when the drain grace is zero.
            now + idle_timeout.max(BUSY_RECHECK)
        } else {
            // HTTP/1.1 waits for each next head as for the first, from the end of the last
            // answer (HTTP/2 has streams, not heads, to wait for).
            let (limit, why) = if header_timeout < idle_timeout && !activity.is_http2() {
                (header_timeout, header)
            } else {
                (idle_timeout, idle)
            };
            let deadline = activity.idle_since() + limit;
            if now >= deadline {
                return Watch::Expired(why);
            }
            deadline
        };
        match stop.as_mut() {
            None => tokio::time::sleep_until(wake).await,
            Some(stop) => tokio::select! {
                () = tokio::time::sleep_until(wake) => {}
                // Only ever Err: the sender is dropped when shutdown begins.
                _ = stop.changed() => return Watch::Drain,
            },
        }
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
    const GRACE: Duration = Duration::from_secs(2);
    const LIMITS: Timeouts = Timeouts {
        header: HEADER,
        idle: IDLE,
        drain_grace: GRACE,
    };

    /// The watchdog of a listener that is not shutting down.
    async fn expire(activity: &Activity, header: Duration, idle: Duration) -> Expiry {
        let (_running, stop) = watch::channel(());
        let limits = Timeouts {
            header,
            idle,
            drain_grace: GRACE,
        };
        match watch(activity, limits, Some(stop)).await {
            Watch::Expired(why) => why,
            Watch::Drain => panic!("no shutdown here"),
        }
    }

    #[tokio::test(start_paused = true)]
    async fn http1_waits_for_each_next_head_as_for_the_first_http2_only_for_idle() {
        let header = Duration::from_secs(1);
        for http2 in [false, true] {
            let activity = Activity::new(Instant::now());
            if http2 {
                activity.saw_http2();
            }
            tokio::time::sleep(Duration::from_millis(200)).await;
            let request = activity.begin();
            tokio::time::sleep(Duration::from_secs(4)).await;
            let answered = Instant::now();
            drop(request);
            let why = expire(&activity, header, IDLE).await;
            match http2 {
                false => assert_eq!((why, answered.elapsed()), (Expiry::Header, header)),
                true => assert_eq!((why, answered.elapsed()), (Expiry::Idle, IDLE)),
            }
        }
    }

    #[tokio::test(start_paused = true)]
    async fn shutdown_is_reported_at_once_whatever_the_timers() {
        let activity = Activity::new(Instant::now());
        let (running, stop) = watch::channel(());
        let watchdog = tokio::spawn({
            let activity = activity.clone();
            async move { watch(&activity, LIMITS, Some(stop)).await }
        });
        tokio::time::sleep(Duration::from_millis(700)).await;
        drop(running);
        assert_eq!(watchdog.await.expect("watchdog task"), Watch::Drain);
        assert_eq!(activity.accepted.elapsed(), Duration::from_millis(700));
    }

    #[tokio::test(start_paused = true)]
    async fn draining_a_connection_idle_for_the_grace_closes_it_at_once() {
        let activity = Activity::new(Instant::now());
        drop(activity.begin());
        tokio::time::sleep(GRACE).await;
        let draining = Instant::now();
        assert_eq!(
            watch(&activity, LIMITS, None).await,
            Watch::Expired(Expiry::Drained)
        );
        assert_eq!(draining.elapsed(), Duration::ZERO);
    }

    #[tokio::test(start_paused = true)]
    async fn a_draining_connection_closes_once_idle_for_the_grace_not_the_idle_timeout() {
        let activity = Activity::new(Instant::now());
        let request = activity.begin();
        let watchdog =
            tokio::time::timeout(Duration::from_secs(600), watch(&activity, LIMITS, None));
        assert!(watchdog.await.is_err(), "a request in flight is never cut");
        tokio::time::sleep(Duration::from_millis(300)).await;
        let ended = Instant::now();
        drop(request);
        assert_eq!(
            watch(&activity, LIMITS, None).await,
            Watch::Expired(Expiry::Drained)
        );
        assert_eq!(ended.elapsed(), GRACE);
    }

    #[tokio::test(start_paused = true)]
    async fn without_a_grace_a_busy_connection_is_closed_soon_after_its_request_ends() {
        let limits = Timeouts {
            drain_grace: Duration::ZERO,
            ..LIMITS
        };
        let activity = Activity::new(Instant::now());
        let request = activity.begin();
        let watchdog = tokio::spawn({
            let activity = activity.clone();
            async move { watch(&activity, limits, None).await }
        });
        tokio::time::sleep(Duration::from_secs(5)).await;
        assert!(!watchdog.is_finished(), "a request in flight is never cut");
        let ended = Instant::now();
        drop(request);
        let closed = tokio::time::timeout(Duration::from_secs(5), watchdog).await;
        assert_eq!(
            closed.expect("closed").expect("watchdog task"),
            Watch::Expired(Expiry::Drained)
        );
        assert!(ended.elapsed() <= BUSY_RECHECK, "{:?}", ended.elapsed());
    }

    #[tokio::test(start_paused = true)]
    async fn a_draining_connection_that_never_had_a_request_gets_the_grace() {
        let activity = Activity::new(Instant::now());
        assert_eq!(
            watch(&activity, LIMITS, None).await,
            Watch::Expired(Expiry::Drained)
        );
        assert_eq!(activity.accepted.elapsed(), GRACE);
    }

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
