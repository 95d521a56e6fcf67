//! HTTP+SSE upstreams (protocol 2024-11-05): GET the server's SSE endpoint, wait for its
//! `endpoint` event (a URL on the same origin), POST every message there, and route every
//! `message` event of the stream. The stream is the upstream session: when it ends, requests
//! in flight fail and the next request opens a new one (stream and handshake again).

use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::{Arc, Mutex, Weak};
use std::time::Duration;

use ::http::{Method, StatusCode, Uri};
use bytes::Bytes;

use super::connection::Connection;
use super::credentials::Credentials;
use super::handshake;
use super::http::{
    add_trace_context, closed, is_event_stream, protocol, read_body, status_error, unavailable,
};
use super::http_client::{OriginClient, Response};
use super::link::Link;
use super::sse::SseParser;
use crate::error::GatewayError;
use crate::telemetry::Propagation;

/// Bound on the (ignored) body of the answer to a POSTed message.
const MAX_POST_ANSWER: usize = 64 * 1024;

pub struct SseLink {
    client: Arc<OriginClient>,
    /// The gateway's own credentials for this upstream (never the client's).
    credentials: Arc<Credentials>,
    /// The SSE endpoint; the message endpoint is resolved against it. Shared by the
    /// upstream's sessions (a `Url` is 88 bytes and its text).
    url: Arc<url::Url>,
    /// The open upstream session, if any. Cleared (with every request in flight failed) the
    /// moment its stream ends, so a message is never POSTed to a session known to be gone.
    channel: Mutex<Option<Arc<Channel>>>,
    /// Held while a session is opened: concurrent requests wait for one.
    opening: tokio::sync::Mutex<()>,
    /// Sessions opened so far; also the id of the latest.
    opened: AtomicU64,
    closed: AtomicBool,
    /// Bound on opening a session, and on each POST (answered at once with 202).
    init_timeout: Duration,
    max_message: usize,
}

/// One upstream session: its event stream (read by its own task) and its message endpoint.
struct Channel {
    id: u64,
    /// Request target of the message endpoint the `endpoint` event named.
    endpoint: Uri,
    /// The handshake is done: requests may flow.
    ready: AtomicBool,
    reader: Mutex<Option<tokio::task::JoinHandle<()>>>,
}

impl Channel {
    fn stop(&self) {
        if let Some(task) = self.reader.lock().ok().and_then(|mut r| r.take()) {
            task.abort();
        }
    }
}

impl SseLink {
    pub fn new(
        client: Arc<OriginClient>,
        credentials: Arc<Credentials>,
        url: Arc<url::Url>,
        init_timeout: Duration,
        max_message: usize,
    ) -> SseLink {
        SseLink {
            client,
            credentials,
            url,
            channel: Mutex::new(None),
            opening: tokio::sync::Mutex::new(()),
            opened: AtomicU64::new(0),
            closed: AtomicBool::new(false),
            init_timeout,
            max_message,
        }
    }

    /// Opens the first upstream session: stream, endpoint, handshake.
    pub async fn open(conn: &Arc<Connection>) -> Result<(), GatewayError> {
        let link = sse_link(conn);
        let _opening = link.opening.lock().await;
        link.open_locked(conn).await
    }

    /// Whether a session is open and initialized.
    pub fn is_ready(&self) -> bool {
        self.current()
            .is_some_and(|c| c.ready.load(Ordering::Acquire))
    }

    /// Waits (bounded) until a session carries requests, opening a new one (with a new
    /// handshake) when the last one's stream ended.
    pub async fn ready(
        &self,
        conn: &Arc<Connection>,
        timeout: Duration,
    ) -> Result<(), GatewayError> {
        if self.is_ready() {
            return Ok(());
        }
        let upstream = conn.upstream_name();
        let reopen = async {
            let _opening = self.opening.lock().await;
            if self.is_ready() {
                return Ok(());
            }
            tracing::warn!(upstream, "upstream SSE session gone; opening a new one");
            self.open_locked(conn).await?;
            // A new upstream session (often a restarted server) may offer different lists.
            conn.info.catalog.invalidate_all();
            Ok(())
        };
        tokio::time::timeout(timeout, reopen)
            .await
            .unwrap_or_else(|_| {
                Err(unavailable(
                    upstream,
                    format!("no SSE session within {}ms", timeout.as_millis()),
                ))
            })
    }

    /// POSTs one message to the session's message endpoint; the upstream answers 2xx (202)
    /// and sends any reply on the stream.
    pub async fn post(
        &self,
        conn: &Connection,
        body: Bytes,
        trace: Option<&Propagation>,
    ) -> Result<(), GatewayError> {
        let upstream = conn.upstream_name();
        let Some(channel) = self.current() else {
            return Err(closed(
                upstream,
                "its event stream ended (the upstream session is gone)".into(),
            ));
        };
        let exchange = async {
            let mut token_renewed = false;
            loop {
                let mut headers = self.credentials.headers().await?;
                headers.add_bytes("content-type", b"application/json");
                if let Some(t) = trace {
                    add_trace_context(&mut headers, t);
                }
                let mut resp = self
                    .client
                    .send_to(&channel.endpoint, Method::POST, headers, &body)
                    .await
                    .map_err(|e| unavailable(upstream, e.to_string()))?;
                let status = resp.status();
                if status.is_success() {
                    // Read to the end (bounded) so the connection is reused; the content is
                    // not the reply, which comes on the stream.
                    let _ = read_body(&mut resp, MAX_POST_ANSWER, upstream).await;
                    return Ok(());
                }
                if status == StatusCode::UNAUTHORIZED
                    && self.credentials.has_token()
                    && !token_renewed
                {
                    drop(resp);
                    token_renewed = true;
                    self.credentials.token_rejected().await;
                    continue;
                }
                return Err(status_error(upstream, resp).await);
            }
        };
        tokio::time::timeout(self.init_timeout, exchange)
            .await
            .unwrap_or_else(|_| {
                Err(unavailable(
                    upstream,
                    format!(
                        "its message endpoint did not answer within {}ms",
                        self.init_timeout.as_millis()
                    ),
                ))
            })
    }

    /// Ends the session for good: the stream is dropped (the upstream sees the client go).
    /// An SSE session lives in its stream, so no other replica could continue it.
    pub fn close(&self) {
        self.closed.store(true, Ordering::Release);
        if let Some(channel) = self.channel.lock().ok().and_then(|mut c| c.take()) {
            channel.stop();
        }
    }

    fn current(&self) -> Option<Arc<Channel>> {
        self.channel.lock().ok()?.clone()
    }

    /// Opens a session (the caller holds `opening`), bounded by the init timeout.
    async fn open_locked(&self, conn: &Arc<Connection>) -> Result<(), GatewayError> {
        let upstream = conn.upstream_name();
        // A session left half-open by a cancelled attempt is dropped first.
        if let Some(stale) = self.channel.lock().ok().and_then(|mut c| c.take()) {
            stale.stop();
        }
        let open = async {
            if self.closed.load(Ordering::Acquire) {
                return Err(closed(upstream, "the connection was closed".into()));
            }
            let (resp, parser, endpoint) = self.connect(upstream).await?;
            let id = self.opened.fetch_add(1, Ordering::AcqRel) + 1;
            let channel = Arc::new(Channel {
                id,
                endpoint,
                ready: AtomicBool::new(false),
                reader: Mutex::new(None),
            });
            let task = tokio::spawn(read_stream(Arc::downgrade(conn), id, resp, parser));
            if let Ok(mut r) = channel.reader.lock() {
                *r = Some(task);
            }
            if let Ok(mut c) = self.channel.lock() {
                *c = Some(channel.clone());
            }
            let params = conn.init_params.clone();
            let server = handshake::initialize(conn, &params, self.init_timeout).await?;
            // A new upstream session: the client's level and subscriptions are set up again.
            conn.restore(&server, self.init_timeout).await;
            conn.set_server(server);
            channel.ready.store(true, Ordering::Release);
            Ok(())
        };
        let result = tokio::time::timeout(self.init_timeout, open)
            .await
            .unwrap_or_else(|_| {
                Err(unavailable(
                    upstream,
                    format!("no SSE session within {}ms", self.init_timeout.as_millis()),
                ))
            });
        if result.is_err()
            && let Some(failed) = self.channel.lock().ok().and_then(|mut c| c.take())
        {
            failed.stop();
        }
        result
    }

    /// GETs the SSE endpoint and reads up to its `endpoint` event. Returns the open stream,
    /// the parser (which may hold more events) and the message endpoint's request target.
    async fn connect(&self, upstream: &str) -> Result<(Response, SseParser, Uri), GatewayError> {
        let mut token_renewed = false;
        let mut resp = loop {
            let mut headers = self.credentials.headers().await?;
            headers.add_bytes("accept", b"text/event-stream");
            let mut resp = self
                .client
                .send(Method::GET, headers, b"")
                .await
                .map_err(|e| unavailable(upstream, e.to_string()))?;
            let status = resp.status();
            if status == StatusCode::UNAUTHORIZED && self.credentials.has_token() && !token_renewed
            {
                drop(resp);
                token_renewed = true;
                self.credentials.token_rejected().await;
                continue;
            }
            if !status.is_success() {
                return Err(status_error(upstream, resp).await);
            }
            if !is_event_stream(resp.headers()) {
                return Err(protocol(
                    upstream,
                    "its SSE endpoint did not answer with an event stream (text/event-stream)"
                        .into(),
                ));
            }
            // Its headers are read: the stream, open for the session's life, keeps none.
            resp.forget_headers();
            break resp;
        };
        let mut parser = SseParser::new(self.max_message);
        loop {
            while let Some(event) = parser
                .next_event()
                .map_err(|e| protocol(upstream, e.to_string()))?
            {
                if event.event.as_deref() == Some("endpoint") {
                    let endpoint = self.endpoint_target(upstream, &event.data)?;
                    return Ok((resp, parser, endpoint));
                }
                tracing::debug!(upstream, "upstream SSE event before `endpoint` ignored");
            }
            let chunk = resp
                .chunk()
                .await
                .map_err(|e| closed(upstream, e.to_string()))?
                .ok_or_else(|| {
                    closed(
                        upstream,
                        "its event stream ended before the `endpoint` event".into(),
                    )
                })?;
            parser.push(&chunk);
        }
    }

    /// The `endpoint` event's URL (relative to the SSE endpoint) as a request target; another
    /// origin is refused: the gateway's credentials go only where the config sends them.
    fn endpoint_target(&self, upstream: &str, data: &[u8]) -> Result<Uri, GatewayError> {
        let text = std::str::from_utf8(data)
            .map_err(|_| protocol(upstream, "its `endpoint` event is not UTF-8".into()))?;
        let url = self.url.join(text.trim()).map_err(|e| {
            protocol(
                upstream,
                format!("its `endpoint` event is not a URL reference: {e}"),
            )
        })?;
        if url.origin() != self.url.origin() {
            return Err(protocol(
                upstream,
                format!(
                    "its `endpoint` event names another origin ({}); messages go only to the SSE endpoint's origin",
                    url.origin().ascii_serialization()
                ),
            ));
        }
        self.client
            .target_for(&url)
            .map_err(|e| protocol(upstream, e))
    }

    /// The stream of session `id` ended: unless a newer session replaced it, the link has no
    /// session now, and every request waiting on it fails (under the lock, so nothing of a
    /// new session is caught).
    fn lost(&self, conn: &Connection, id: u64, reason: String) {
        let Ok(mut channel) = self.channel.lock() else {
            return;
        };
        if channel.as_ref().is_none_or(|c| c.id != id) {
            return;
        }
        *channel = None;
        let upstream = conn.upstream_name();
        if !self.closed.load(Ordering::Acquire) {
            tracing::warn!(upstream, reason = %reason, "upstream SSE session lost; the next request opens a new one");
        }
        conn.fail_all(&closed(upstream, reason));
    }
}

fn sse_link(conn: &Connection) -> &SseLink {
    match &conn.link {
        Link::Sse(l) => l,
        Link::Stdio(_) | Link::Http(_) => unreachable!("SSE operation on another link"),
    }
}

/// Reads session `id`'s stream until it ends, routing every `message` event. An `async move`
/// block rather than an `async fn`: a function's parameters would be kept twice in the task
/// for the stream's whole life (as arguments and as the locals they move into, ~0.35 KB per
/// open upstream session).
#[allow(
    clippy::manual_async_fn,
    reason = "an async fn keeps its arguments twice in the task"
)]
fn read_stream(
    conn: Weak<Connection>,
    id: u64,
    mut resp: Response,
    mut parser: SseParser,
) -> impl std::future::Future<Output = ()> + Send {
    async move {
        let reason = 'stream: loop {
            loop {
                match parser.next_event() {
                    Ok(Some(event)) => {
                        if !matches!(event.event.as_deref(), None | Some("message")) {
                            tracing::debug!(event = ?event.event, "upstream SSE event ignored");
                            continue;
                        }
                        if event.data.is_empty() {
                            continue;
                        }
                        let Some(c) = conn.upgrade() else { return };
                        c.on_message(event.data, None);
                    }
                    Ok(None) => break,
                    Err(e) => {
                        break 'stream format!("its event stream sent an oversized event ({e})");
                    }
                }
            }
            match resp.chunk().await {
                Ok(Some(chunk)) => parser.push(&chunk),
                Ok(None) => break "it ended its event stream".to_owned(),
                Err(e) => break format!("its event stream broke off: {e}"),
            }
        };
        if let Some(c) = conn.upgrade() {
            sse_link(&c).lost(&c, id, reason);
        }
    }
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used)]
    use super::*;

    fn link(url: &str) -> SseLink {
        let url = url::Url::parse(url).unwrap();
        let client =
            Arc::new(OriginClient::build(&url, Duration::from_secs(1), None, None).unwrap());
        let config = crate::config::HttpConfig {
            url: url.to_string(),
            headers: vec![],
            header_files: vec![],
            oauth2: None,
        };
        let credentials = Arc::new(Credentials::new(&config, Duration::from_secs(1), "u").unwrap());
        SseLink::new(
            client,
            credentials,
            Arc::new(url),
            Duration::from_secs(1),
            1 << 20,
        )
    }

    #[test]
    fn endpoints_resolve_against_the_sse_url_on_its_origin_only() {
        let l = link("http://127.0.0.1:3001/base/sse");
        let target = |data: &str| l.endpoint_target("u", data.as_bytes());
        assert_eq!(
            target("/message?sessionId=abc").unwrap(),
            "/message?sessionId=abc"
        );
        assert_eq!(target("messages?s=1").unwrap(), "/base/messages?s=1");
        assert_eq!(
            target("http://127.0.0.1:3001/m?x").unwrap(),
            "/m?x",
            "an absolute URL on the same origin"
        );
        for other in [
            "http://127.0.0.1:3002/m",
            "https://127.0.0.1:3001/m",
            "http://evil.example/m",
            "//evil.example/m",
        ] {
            let err = target(other).unwrap_err().to_string();
            assert!(err.contains("names another origin"), "{other}: {err}");
        }
        assert!(target("http://[bad").is_err());
    }
}
