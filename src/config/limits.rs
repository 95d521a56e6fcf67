//! The validated connection and request-body limits (`limits:` beside `max_body`) and their
//! defaults. What each protects, and the figures behind the defaults, are in the README
//! ("Limits").

use std::time::Duration;

use super::Limits;

/// Default `max_body`.
pub(super) const DEFAULT_MAX_BODY: u64 = 4 << 20;
/// Default `max_session_processes`.
pub(super) const DEFAULT_MAX_SESSION_PROCESSES: u64 = 256;
/// Default `max_upstream_message`.
pub(super) const DEFAULT_MAX_UPSTREAM_MESSAGE: u64 = 16 << 20;
/// How long a stopping replica gives open connections and requests to finish (from SIGTERM);
/// `drain_grace` lies within it.
pub const DRAIN_DEADLINE: Duration = Duration::from_secs(10);

/// How request bodies are read: every body goes through one reader (`listener::body`).
#[derive(Debug, Clone, PartialEq)]
pub struct BodyLimits {
    /// A body gets this long to arrive (default 10s) ...
    pub read_timeout: Duration,
    /// ... and longer only while it averages at least this many bytes per second since its
    /// first byte was awaited (default 64 KiB/s; 0: never longer). Beyond: 408, connection
    /// closed.
    pub min_rate: u64,
    /// Bytes of request bodies held in memory at once by the whole process (default 64 MiB,
    /// at least `max_body`). A body that does not fit: 503 with `Retry-After`.
    pub max_buffered: usize,
}

/// Client connections of the MCP listener (the admin listener has fixed, smaller caps).
#[derive(Debug, Clone, PartialEq)]
pub struct ConnectionLimits {
    /// From accept (TLS handshake included) to the first complete request head; on HTTP/1.1
    /// also from the end of a response to the next complete head (default 10s).
    pub header_read_timeout: Duration,
    /// A connection with no request in flight is closed after this (default 60s). HTTP/1.1
    /// closes sooner when `header_read_timeout` is shorter (it also bounds the wait for the
    /// next request head).
    pub idle_timeout: Duration,
    /// Connections open at once; `None`: derived at start from `RLIMIT_NOFILE` with a reserve
    /// of descriptors for everything else (`listener::fds`). Beyond: 503 and close.
    pub max_connections: Option<usize>,
    /// Connections open at once from one peer IP (default 512). Beyond: 429 and close.
    pub max_connections_per_client: usize,
    /// HTTP/1.1 request line and headers (431 beyond); HTTP/2 header list size (default 32
    /// KiB, at least 8 KiB: hyper's smallest read buffer).
    pub max_header_bytes: usize,
    /// HTTP/1.1 headers per request (default 100, hyper's own; 431 beyond).
    pub max_headers: usize,
    /// HTTP/2 streams a client may have open on one connection (default 100).
    pub http2_max_concurrent_streams: u32,
    /// HTTP/2 keep-alive PING interval (default 30s); no answer within 20s closes.
    pub http2_keep_alive_interval: Duration,
    /// Once shutdown begins, an HTTP/1.1 connection stays open until it has had no request
    /// in flight for this long (default 5s, at most the 10s drain deadline; 0s: closed as
    /// soon as it is idle), and what comes on it meanwhile is served with `Connection:
    /// close`: a busy client learns from an answer that the connection ends instead of
    /// sending a request into one being closed. HTTP/2 connections get a GOAWAY at once.
    pub drain_grace: Duration,
}

impl Default for BodyLimits {
    fn default() -> BodyLimits {
        BodyLimits {
            read_timeout: Duration::from_secs(10),
            min_rate: 64 << 10,
            max_buffered: 64 << 20,
        }
    }
}

impl Default for ConnectionLimits {
    fn default() -> ConnectionLimits {
        ConnectionLimits {
            header_read_timeout: Duration::from_secs(10),
            idle_timeout: Duration::from_secs(60),
            max_connections: None,
            max_connections_per_client: 512,
            max_header_bytes: 32 << 10,
            max_headers: 100,
            http2_max_concurrent_streams: 100,
            http2_keep_alive_interval: Duration::from_secs(30),
            drain_grace: Duration::from_secs(5),
        }
    }
}

impl Default for Limits {
    /// What an empty `limits:` section means.
    fn default() -> Limits {
        Limits {
            max_body_bytes: DEFAULT_MAX_BODY as usize,
            max_upstream_message_bytes: DEFAULT_MAX_UPSTREAM_MESSAGE as usize,
            bodies: BodyLimits::default(),
            connections: ConnectionLimits::default(),
            max_session_processes: DEFAULT_MAX_SESSION_PROCESSES as usize,
        }
    }
}
