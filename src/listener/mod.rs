//! The accept loop: plain HTTP or TLS (`tls.rs`, certificates reloaded by `reload.rs`) in
//! front of a [`Service`] (the MCP front, or an axum router), HTTP/1.1 and HTTP/2 per
//! connection, no body in an answer to HEAD, the drain at shutdown, and the connection-level
//! limits: the caps (`admission.rs`, refusals in `refuse.rs`, the default cap derived from the
//! descriptor limit in `fds.rs`), the header, idle and HTTP/2 bounds given to hyper, the
//! timers hyper lacks (`watchdog.rs`), and the bounded lingering close of every connection
//! (`linger.rs`). The bounds on a request body (size, deadline and minimum
//! rate, the process-wide budget) are here too (`body.rs`): the handlers read every body
//! through that one reader.
//!
//! Every request is served with the [`ConnInfo`] of its connection, so handlers know whether
//! it came over TLS and from where: passed beside the request (an extension would cost every
//! request an extension map), as an extension to axum routers.

mod admission;
pub mod body;
pub mod fds;
mod linger;
mod refuse;
pub mod reload;
mod repoll;
pub mod tls;
mod watchdog;

#[cfg(test)]
mod serve_tests;
#[cfg(test)]
pub(crate) mod tests;

use std::convert::Infallible;
use std::future::Future;
use std::io;
use std::net::SocketAddr;
use std::sync::Arc;
use std::time::Duration;

use axum::Router;
use axum::body::Body;
use axum::http::{HeaderValue, Method, Request, Response, Version, header};
use hyper::body::Incoming;
use hyper_util::rt::{TokioExecutor, TokioIo, TokioTimer};
use hyper_util::server::conn::auto::Builder;
use prometheus::IntCounter;
use tokio::io::{AsyncRead, AsyncWrite};
use tokio::net::{TcpListener, TcpStream};
use tokio::sync::watch;
use tokio::task::JoinSet;
use tokio::time::Instant;
use tokio_rustls::TlsAcceptor;

pub use tls::{CertError, ServerTls};

use admission::{Admission, Refusal, Ticket};
use linger::Lingering;
use refuse::Refuser;
use watchdog::{Activity, Expiry, Timeouts, Tracked, Watch};

use crate::config::ConnectionLimits;
use crate::workers::Workers;

/// Connections the admin listener serves at once (probes and scrapes): its own budget, so
/// `/healthz` and `/readyz` answer while the MCP listener is full. Counted in the descriptor
/// reserve (`fds::BASE_RESERVE`).
pub const ADMIN_MAX_CONNECTIONS: usize = 32;
/// At most one log line per this period says connections are being refused.
const REFUSAL_LOG_EVERY: Duration = Duration::from_secs(10);
/// hyper's own HTTP/1.1 header count; any other value makes hyper allocate the header array
/// per request, so it is only passed on when it differs.
const HYPER_MAX_HEADERS: usize = 100;

/// The connection a request arrived on, given to the [`Service`] with each request.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct ConnInfo {
    /// The connection is TLS (the listener terminates it).
    pub tls: bool,
    /// The peer's address.
    pub remote: SocketAddr,
}

/// The connection limits of one listener, resolved (the cap known).
#[derive(Debug, Clone)]
pub struct ListenerLimits {
    /// `listener` label of the connection metrics (`mcp`, `admin`).
    pub name: &'static str,
    pub max_connections: usize,
    pub max_connections_per_client: usize,
    /// From accept to the first request (TLS handshake included); HTTP/1.1: also from the end
    /// of each answer to the next head.
    pub header_read_timeout: Duration,
    pub idle_timeout: Duration,
    pub max_header_bytes: usize,
    pub max_headers: usize,
    pub http2_max_concurrent_streams: u32,
    pub http2_keep_alive_interval: Duration,
    /// Once shutdown begins, how long an HTTP/1.1 connection may stay idle.
    pub drain_grace: Duration,
}

impl ListenerLimits {
    /// The MCP listener's: `limits` as configured, with the cap resolved by `fds`.
    pub fn mcp(limits: &ConnectionLimits, max_connections: usize) -> ListenerLimits {
        ListenerLimits {
            name: "mcp",
            max_connections,
            max_connections_per_client: limits.max_connections_per_client,
            header_read_timeout: limits.header_read_timeout,
            idle_timeout: limits.idle_timeout,
            max_header_bytes: limits.max_header_bytes,
            max_headers: limits.max_headers,
            http2_max_concurrent_streams: limits.http2_max_concurrent_streams,
            http2_keep_alive_interval: limits.http2_keep_alive_interval,
            drain_grace: limits.drain_grace,
        }
    }

    /// The admin listener's: the MCP listener's timeouts and header bounds, its own small cap
    /// ([`ADMIN_MAX_CONNECTIONS`], not per client: probes come from few addresses), and no
    /// drain grace (probes and scrapes are retried).
    pub fn admin(limits: &ConnectionLimits) -> ListenerLimits {
        ListenerLimits {
            name: "admin",
            max_connections: ADMIN_MAX_CONNECTIONS,
            max_connections_per_client: ADMIN_MAX_CONNECTIONS,
            drain_grace: Duration::ZERO,
            ..ListenerLimits::mcp(limits, ADMIN_MAX_CONNECTIONS)
        }
    }
}

/// The connection metrics of one listener, looked up once.
struct Counters {
    refused_full: IntCounter,
    refused_per_client: IntCounter,
    header_timeout: IntCounter,
    idle_timeout: IntCounter,
}

impl Counters {
    fn new(listener: &str) -> Counters {
        let m = crate::metrics::get();
        let refused = |reason: Refusal| {
            m.connections_refused
                .with_label_values(&[listener, reason.label()])
        };
        let closed = |reason: Expiry| {
            m.connections_timed_out
                .with_label_values(&[listener, reason.label()])
        };
        Counters {
            refused_full: refused(Refusal::Full),
            refused_per_client: refused(Refusal::PerClient),
            header_timeout: closed(Expiry::Header),
            idle_timeout: closed(Expiry::Idle),
        }
    }

    fn refused(&self, why: Refusal) {
        match why {
            Refusal::Full => self.refused_full.inc(),
            Refusal::PerClient => self.refused_per_client.inc(),
        }
    }

    fn expired(&self, why: Expiry) {
        match why {
            Expiry::Header => self.header_timeout.inc(),
            Expiry::Idle => self.idle_timeout.inc(),
            // Not a timeout: the drain's normal end.
            Expiry::Drained => {}
        }
    }
}

/// The HTTP builders per negotiated protocol (ALPN), shared by every connection.
struct Builders {
    /// No ALPN (plain TCP, or a TLS client that offered none): detected from the preface.
    auto: Builder<TokioExecutor>,
    http1: Builder<TokioExecutor>,
    http2: Builder<TokioExecutor>,
}

impl Builders {
    fn new(limits: &ListenerLimits) -> Builders {
        let mut auto = Builder::new(TokioExecutor::new());
        {
            let mut http1 = auto.http1();
            // No header timer of hyper's (it would box, register and drop a timer per
            // request): the watchdog bounds the wait for every head, the first from accept
            // and each next one from the end of the last answer.
            http1
                .header_read_timeout(None)
                // The head must fit hyper's read buffer: this bounds the request line and
                // headers (431 beyond). hyper panics below 8 KiB; config refuses less.
                .max_buf_size(limits.max_header_bytes.max(8 << 10));
            if limits.max_headers != HYPER_MAX_HEADERS {
                http1.max_headers(limits.max_headers);
            }
        }
        auto.http2()
            .timer(TokioTimer::new())
            .max_concurrent_streams(limits.http2_max_concurrent_streams)
            .max_header_list_size(u32::try_from(limits.max_header_bytes).unwrap_or(u32::MAX))
            .keep_alive_interval(limits.http2_keep_alive_interval);
        Builders {
            http1: auto.clone().http1_only(),
            http2: auto.clone().http2_only(),
            auto,
        }
    }

    fn for_alpn(&self, alpn: Option<&[u8]>) -> &Builder<TokioExecutor> {
        match alpn {
            Some(b"h2") => &self.http2,
            Some(b"http/1.1") => &self.http1,
            _ => &self.auto,
        }
    }
}

/// What a listener serves: each request (its body read through hyper) to its response.
pub trait Service: Clone + Send + Sync + 'static {
    /// Serves `req`, which came on `conn`.
    fn call(
        &self,
        req: Request<Body>,
        conn: ConnInfo,
    ) -> impl Future<Output = Response<Body>> + Send + use<Self>;
}

/// An axum router gets the connection as a request extension (`Extension<ConnInfo>`).
impl Service for Router {
    fn call(
        &self,
        mut req: Request<Body>,
        conn: ConnInfo,
    ) -> impl Future<Output = Response<Body>> + Send + use<> {
        req.extensions_mut().insert(conn);
        // Router is always ready (its `poll_ready` returns Ready): call it directly.
        let call = tower_service::Service::call(&mut self.clone(), req);
        async move {
            match call.await {
                Ok(resp) => resp,
                Err(never) => match never {},
            }
        }
    }
}

/// Accepts connections on `listener` and serves `service` on each (over TLS when `tls` is set)
/// under `limits` until `shutdown` resolves; then stops accepting, drains open connections
/// (HTTP/1.1: served on with `Connection: close`, closed once idle for `drain_grace`; HTTP/2:
/// GOAWAY) and returns once they all have closed. Dropping the returned future closes every
/// remaining connection. With `workers`, each connection is served on one of them (round
/// robin) instead of on the runtime that accepts.
///
/// Accept errors, handshake failures, connection errors and refusals never end the loop.
pub async fn serve<S: Service>(
    listener: TcpListener,
    service: S,
    tls: Option<TlsAcceptor>,
    limits: ListenerLimits,
    workers: Option<&Workers>,
    shutdown: impl Future<Output = ()>,
) -> io::Result<()> {
    let builders = Arc::new(Builders::new(&limits));
    let counters = Arc::new(Counters::new(limits.name));
    let admission = Admission::new(
        limits.max_connections,
        limits.max_connections_per_client,
        crate::metrics::get()
            .connections_open
            .with_label_values(&[limits.name]),
    );
    let refuser = Refuser::default();
    let limits = Arc::new(limits);
    // Dropped when shutdown begins: connections still in the TLS handshake give up, the
    // others drain.
    let (stop_tx, stop_rx) = watch::channel(());
    // Owns every connection task: dropping it (drain deadline) aborts them.
    let mut connections = JoinSet::new();
    let mut shutdown = std::pin::pin!(shutdown);
    // Refusals are counted in the metrics; the log says so at most every REFUSAL_LOG_EVERY.
    let mut refusals_logged: Option<Instant> = None;
    loop {
        tokio::select! {
            accepted = listener.accept() => match accepted {
                Ok((tcp, remote)) => {
                    let ticket = match admission.admit(remote.ip()) {
                        Ok(ticket) => ticket,
                        Err(why) => {
                            counters.refused(why);
                            if refusals_logged.is_none_or(|at| at.elapsed() >= REFUSAL_LOG_EVERY) {
                                refusals_logged = Some(Instant::now());
                                tracing::warn!(
                                    listener = limits.name,
                                    %remote,
                                    reason = why.label(),
                                    "refusing connections (switchyard_connections_refused_total counts them)"
                                );
                            }
                            refuser.refuse(tcp, why, tls.is_some());
                            continue;
                        }
                    };
                    if let Err(e) = tcp.set_nodelay(true) {
                        tracing::debug!(%remote, error = %e, "cannot set TCP_NODELAY");
                    }
                    let conn = Connection {
                        service: service.clone(),
                        builders: builders.clone(),
                        limits: limits.clone(),
                        counters: counters.clone(),
                        stop: stop_rx.clone(),
                        remote,
                        accepted: Instant::now(),
                        _ticket: ticket,
                    };
                    match workers {
                        None => {
                            connections.spawn(repoll::Repoll::new(conn.run(tcp, tls.clone())));
                        }
                        // Handed over as a plain socket: it is registered again with the
                        // chosen worker's I/O driver, which then serves it for its life.
                        Some(workers) => match tcp.into_std() {
                            Ok(tcp) => {
                                let run = conn.run_moved(tcp, tls.clone());
                                connections.spawn_on(repoll::Repoll::new(run), workers.pick());
                            }
                            Err(e) => tracing::debug!(%remote, error = %e, "cannot hand the connection to a worker"),
                        },
                    }
                }
                Err(e) => accept_error(e).await,
            },
            Some(done) = connections.join_next(), if !connections.is_empty() => {
                if let Err(e) = done {
                    tracing::error!(error = %e, "connection task failed");
                }
            }
            () = &mut shutdown => break,
        }
    }
    drop(listener);
    drop(stop_tx);
    tracing::debug!(
        open = connections.len(),
        "listener closed; draining connections"
    );
    while connections.join_next().await.is_some() {}
    Ok(())
}

/// As hyper 0.14 and axum do: connection-level errors are the peer's business; anything else
/// (e.g. out of file descriptors) is logged and the loop pauses a second.
async fn accept_error(e: io::Error) {
    if matches!(
        e.kind(),
        io::ErrorKind::ConnectionRefused
            | io::ErrorKind::ConnectionAborted
            | io::ErrorKind::ConnectionReset
    ) {
        tracing::debug!(error = %e, "accept failed");
        return;
    }
    tracing::error!(error = %e, "accept failed; pausing 1s");
    tokio::time::sleep(Duration::from_secs(1)).await;
}

/// Empties the answer to a HEAD request (RFC 9110 §9.3.2: the fields of a GET, no content),
/// whatever served it: the length it would have had stays in `Content-Length`. (HTTP/1.1
/// would leave the body out by itself; HTTP/2 would send it.)
fn without_body(resp: &mut Response<Body>) {
    let body = std::mem::replace(resp.body_mut(), Body::empty());
    if let Some(len) = hyper::body::Body::size_hint(&body).exact()
        && !resp.headers().contains_key(header::CONTENT_LENGTH)
    {
        resp.headers_mut()
            .insert(header::CONTENT_LENGTH, HeaderValue::from(len));
    }
}

/// One accepted connection, before its protocol is known.
struct Connection<S> {
    service: S,
    builders: Arc<Builders>,
    limits: Arc<ListenerLimits>,
    counters: Arc<Counters>,
    /// Changes (the sender is dropped) when shutdown begins.
    stop: watch::Receiver<()>,
    remote: SocketAddr,
    accepted: Instant,
    /// Its place in the listener's counts, given back when the connection ends.
    _ticket: Ticket,
}

impl<S: Service> Connection<S> {
    /// [`run`](Self::run) on a connection handed over from another runtime.
    async fn run_moved(self, tcp: std::net::TcpStream, tls: Option<TlsAcceptor>) {
        match TcpStream::from_std(tcp) {
            Ok(tcp) => self.run(tcp, tls).await,
            Err(e) => {
                tracing::debug!(remote = %self.remote, error = %e, "cannot register a handed-over connection")
            }
        }
    }

    async fn run(self, tcp: TcpStream, tls: Option<TlsAcceptor>) {
        let remote = self.remote;
        let tcp = Lingering::new(tcp);
        let Some(acceptor) = tls else {
            self.serve(tcp, None, false).await;
            return;
        };
        let mut stop = self.stop.clone();
        // The handshake is part of the time allowed for the first request head.
        let deadline = self.accepted + self.limits.header_read_timeout;
        let handshake = tokio::time::timeout_at(deadline, acceptor.accept(tcp));
        let stream = tokio::select! {
            r = handshake => match r {
                Ok(Ok(stream)) => stream,
                Ok(Err(e)) => {
                    tracing::debug!(%remote, error = %e, "TLS handshake failed");
                    return;
                }
                Err(_) => {
                    self.counters.expired(Expiry::Header);
                    tracing::debug!(%remote, "TLS handshake timed out");
                    return;
                }
            },
            // Only ever Err: the sender is dropped when shutdown begins.
            _ = stop.changed() => return,
        };
        let alpn = stream.get_ref().1.alpn_protocol().map(<[u8]>::to_vec);
        self.serve(stream, alpn.as_deref(), true).await;
    }

    async fn serve<I>(self, io: I, alpn: Option<&[u8]>, tls: bool)
    where
        I: AsyncRead + AsyncWrite + Unpin + Send + 'static,
    {
        let info = ConnInfo {
            tls,
            remote: self.remote,
        };
        let activity = Activity::new(self.accepted);
        if alpn == Some(b"h2") {
            activity.saw_http2();
        }
        let inner = self.service;
        let requests = activity.clone();
        let service = hyper::service::service_fn(move |req: Request<Incoming>| {
            let in_flight = requests.begin();
            let head = req.method() == Method::HEAD;
            let http1 = req.version() != Version::HTTP_2;
            if !http1 {
                requests.saw_http2();
            }
            let call = inner.call(req.map(Body::new), info);
            async move {
                let mut resp = call.await;
                if head {
                    without_body(&mut resp);
                }
                if http1 && in_flight.draining() {
                    // hyper closes the connection once this answer is written.
                    resp.headers_mut()
                        .insert(header::CONNECTION, HeaderValue::from_static("close"));
                }
                Ok::<_, Infallible>(resp.map(|body| Tracked::new(body, in_flight)))
            }
        });
        let builder = self.builders.for_alpn(alpn);
        let mut conn =
            std::pin::pin!(builder.serve_connection_with_upgrades(TokioIo::new(io), service));
        let limits = Timeouts {
            header: self.limits.header_read_timeout,
            idle: self.limits.idle_timeout,
            drain_grace: self.limits.drain_grace,
        };
        // Polled only when its timer fires (or shutdown begins), not on each of the
        // connection's wake-ups.
        let mut watchdog = std::pin::pin!(crate::woken::Woken::new(watchdog::watch(
            &activity,
            limits,
            Some(self.stop)
        )));
        loop {
            tokio::select! {
                ended = conn.as_mut() => {
                    if let Err(e) = ended {
                        tracing::debug!(remote = %info.remote, tls, error = %e, "connection ended with an error");
                    }
                    break;
                }
                watched = watchdog.as_mut() => match watched {
                    // Dropping the connection closes it: nothing is in flight.
                    Watch::Expired(why) => {
                        self.counters.expired(why);
                        tracing::debug!(remote = %info.remote, tls, reason = why.label(), "connection closed");
                        break;
                    }
                    Watch::Drain => {
                        activity.drain();
                        // HTTP/1.1 has no way to announce its end but on an answer (closing
                        // an idle connection races the client's next request); HTTP/2 has
                        // GOAWAY, after which the client sends nothing new on it.
                        if activity.is_http2() {
                            conn.as_mut().graceful_shutdown();
                        }
                        watchdog.set(crate::woken::Woken::new(watchdog::watch(&activity, limits, None)));
                    }
                },
            }
        }
    }
}
