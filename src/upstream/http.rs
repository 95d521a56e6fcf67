//! Streamable HTTP upstreams: POST each message, read a JSON or SSE answer, keep the upstream's
//! session id and protocol version header, re-initialize when the upstream forgets the session
//! (404, or 400 as some servers answer), and listen on the GET stream when asked to.

use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::{Arc, Mutex, Weak};
use std::time::Duration;

use ::http::header::{HeaderName, HeaderValue};
use ::http::{Method, StatusCode};
use bytes::{Bytes, BytesMut};

use super::connection::Connection;
use super::credentials::Credentials;
use super::handshake;
use super::head_fields::HeaderFields;
use super::header_lines::HeaderLines;
use super::http_client::{OriginClient, Response};
use super::link::Link;
use super::sse::SseParser;
use crate::error::GatewayError;
use crate::protocol::param_headers::ParamHeaders;
use crate::protocol::{ProtocolVersion, header};
use crate::store::UpstreamSessionRecord;
use crate::telemetry::Propagation;

/// How an HTTP error status is worded; [`CLIENT_ERROR_STATUS`] starts the 4xx ones.
const ANSWERED_HTTP: &str = "it answered HTTP ";
pub(super) const CLIENT_ERROR_STATUS: &str = "it answered HTTP 4";

/// The headers a request of the stateless revision mirrors from its body: `Mcp-Method`,
/// `Mcp-Name` for the methods that target a name, URI or task, and a tool call's `Mcp-Param-*`.
pub struct McpHeaders {
    method: HeaderValue,
    name: Option<HeaderValue>,
    params: Vec<(HeaderName, HeaderValue)>,
}

impl McpHeaders {
    /// `mirror`: the called tool's `x-mcp-header` arguments, for a `tools/call`.
    pub fn of(
        method: &str,
        params: Option<&serde_json::value::RawValue>,
        mirror: Option<&ParamHeaders>,
    ) -> Option<McpHeaders> {
        let field = crate::protocol::modern::name_field(method);
        let name = field
            .and_then(|f| {
                crate::jsonrpc::RawObject::parse(params?)
                    .ok()?
                    .get_str(f)
                    .map(|v| v.into_owned())
            })
            .and_then(|v| {
                HeaderValue::from_str(&crate::protocol::modern::encode_header_value(&v)).ok()
            });
        let arguments = mirror
            .filter(|_| method == "tools/call")
            .and_then(|m| {
                let params = crate::jsonrpc::RawObject::parse(params?).ok()?;
                Some(m.values(params.get("arguments")))
            })
            .unwrap_or_default();
        Some(McpHeaders {
            method: HeaderValue::from_str(method).ok()?,
            name,
            params: arguments,
        })
    }
}

/// The `Accept` header of every POST, as the transport requires.
const ACCEPT_BOTH: &str = "application/json, text/event-stream";
/// Upper bound on waiting for an upstream's answer to a DELETE at shutdown.
const DELETE_TIMEOUT: Duration = Duration::from_secs(2);
/// How long a link's first request waits for the upstream to answer the GET stream opened with
/// it (`HttpLink::stream_answered`); SDK servers answer its head at once.
const GET_STREAM_WAIT: Duration = Duration::from_secs(2);
/// How long an answered request's event stream may take to end before its connection is
/// dropped rather than reused.
const STREAM_END_WAIT: Duration = Duration::from_millis(100);
/// Slack added to a request's hard deadline for the HTTP exchange itself.
const EXCHANGE_SLACK: Duration = Duration::from_secs(10);

pub struct HttpLink {
    client: Arc<OriginClient>,
    /// The gateway's own credentials for this upstream (never the client's).
    credentials: Arc<Credentials>,
    session_id: Mutex<Option<HeaderValue>>,
    protocol_version: Mutex<Option<HeaderValue>>,
    /// Bumped by each successful (re)initialize, so concurrent failures re-initialize once.
    generation: AtomicU64,
    reinit: tokio::sync::Mutex<()>,
    listening: AtomicBool,
    listener: Mutex<Option<tokio::task::JoinHandle<()>>>,
    /// The upstream answered the first GET of the stream `listen` opened (open, refused or
    /// failed), or there is none to wait for: see [`HttpLink::stream_answered`].
    get_answered: AtomicBool,
    get_answer: tokio::sync::Notify,
    closed: AtomicBool,
    exchange_timeout: Duration,
    init_timeout: Duration,
    max_message: usize,
    /// The exchanges of a stateless (2026-07-28) link, by request id: on that revision,
    /// closing a request's response stream is how it is cancelled.
    exchanges: super::table::Table<u64, tokio::sync::oneshot::Sender<()>>,
}

impl HttpLink {
    pub fn new(
        client: Arc<OriginClient>,
        credentials: Arc<Credentials>,
        max_request_timeout: Duration,
        init_timeout: Duration,
        max_message: usize,
    ) -> HttpLink {
        HttpLink {
            client,
            credentials,
            session_id: Mutex::new(None),
            protocol_version: Mutex::new(None),
            generation: AtomicU64::new(0),
            reinit: tokio::sync::Mutex::new(()),
            listening: AtomicBool::new(false),
            listener: Mutex::new(None),
            get_answered: AtomicBool::new(false),
            get_answer: tokio::sync::Notify::new(),
            closed: AtomicBool::new(false),
            exchange_timeout: max_request_timeout + EXCHANGE_SLACK,
            init_timeout,
            max_message,
            exchanges: super::table::Table::default(),
        }
    }

    /// Cancels a request of a stateless link by closing its exchange (its response stream);
    /// `false` when it has none here.
    pub fn abort(&self, id: u64) -> bool {
        // Dropping the sender ends the exchange, and with it the response stream.
        self.exchanges.remove(&id).is_some()
    }

    /// The upstream's session id, if it issued one.
    pub fn session_id(&self) -> Option<String> {
        let id = self.session_id.lock().ok()?.clone()?;
        id.to_str().ok().map(str::to_owned)
    }

    /// Runs the handshake on a fresh link and records what it negotiated.
    pub async fn open(conn: &Arc<Connection>) -> Result<(), GatewayError> {
        let link = http_link(conn);
        let params = conn.init_params.clone();
        let server = handshake::connect(conn, &params, link.init_timeout).await?;
        link.set_protocol_version(Some(server.protocol_version));
        // A new upstream session (one the upstream forgot is replaced here too): the client's
        // level and subscriptions are set up again.
        conn.restore(&server, link.init_timeout).await;
        conn.set_server(server);
        link.generation.fetch_add(1, Ordering::AcqRel);
        Ok(())
    }

    /// Continues an upstream session another replica opened: its id and what the upstream
    /// said in `initialize`, without a new handshake. If the upstream has forgotten it, the
    /// first request re-initializes as for any expired session.
    pub fn resume(conn: &Arc<Connection>, record: &UpstreamSessionRecord) -> Result<(), ()> {
        let link = http_link(conn);
        let version = ProtocolVersion::parse(&record.protocol_version)
            .filter(|v| v.is_handshake_era())
            .ok_or(())?;
        let mut id = HeaderValue::from_str(&record.id).map_err(|_| ())?;
        id.set_sensitive(true);
        if let Ok(mut s) = link.session_id.lock() {
            *s = Some(id);
        }
        link.set_protocol_version(Some(version));
        conn.set_server(handshake::UpstreamServer {
            protocol_version: version,
            capabilities: record.capabilities.clone(),
            server_info: record.server_info.clone(),
            instructions: record.instructions.clone(),
        });
        link.generation.fetch_add(1, Ordering::AcqRel);
        Ok(())
    }

    /// The `MCP-Protocol-Version` header of the next requests (none before a handshake).
    pub(super) fn set_protocol_version(&self, v: Option<ProtocolVersion>) {
        if let Ok(mut p) = self.protocol_version.lock() {
            *p = v.map(|v| HeaderValue::from_static(v.as_str()));
        }
    }

    /// The headers of every upstream request: the gateway's credentials, `Accept`, and the
    /// upstream session id and protocol version once known.
    /// Returns them and whether they carry a session id.
    async fn base_headers(
        &self,
        accept: &'static str,
    ) -> Result<(HeaderLines, bool), GatewayError> {
        let mut h = self.credentials.headers().await?;
        // Constants: `HeaderValue::from_static` checks every byte at run time.
        h.add_bytes("accept", accept.as_bytes());
        let mut had_session = false;
        if let Ok(s) = self.session_id.lock()
            && let Some(v) = s.as_ref()
        {
            h.add(&header::name::SESSION_ID, v);
            had_session = true;
        }
        if let Ok(p) = self.protocol_version.lock()
            && let Some(v) = p.as_ref()
        {
            h.add(&header::name::PROTOCOL_VERSION, v);
        }
        Ok((h, had_session))
    }

    fn remember_session(&self, resp: &Response) {
        if let Some(v) = resp.headers().get(header::name::SESSION_ID.as_str())
            && let Ok(mut s) = self.session_id.lock()
            && s.as_ref().map(HeaderValue::as_bytes) != Some(v)
        {
            // A copy of its own: the response's fields go with it.
            let Ok(mut v) = HeaderValue::from_bytes(v) else {
                return;
            };
            v.set_sensitive(true);
            *s = Some(v);
        }
    }

    async fn post(
        &self,
        body: &[u8],
        upstream: &str,
        trace: Option<&Propagation>,
        mcp: Option<&McpHeaders>,
    ) -> Result<(Response, bool), GatewayError> {
        let (mut headers, had_session) = self.base_headers(ACCEPT_BOTH).await?;
        headers.add_bytes("content-type", b"application/json");
        if let Some(m) = mcp {
            headers.add(&header::name::METHOD, &m.method);
            if let Some(n) = &m.name {
                headers.add(&header::name::NAME, n);
            }
            for (name, value) in &m.params {
                headers.add(name, value);
            }
        }
        if let Some(t) = trace {
            add_trace_context(&mut headers, t);
        }
        // Bounded by the caller: a request's whole exchange, or `post_message`.
        let resp = self
            .client
            .send(Method::POST, headers, body)
            .await
            .map_err(|e| unavailable(upstream, e.to_string()))?;
        self.remember_session(&resp);
        Ok((resp, had_session))
    }

    /// Sends a request in the background; its answer is routed by the connection.
    pub fn spawn_request(
        &self,
        conn: Arc<Connection>,
        id: u64,
        body: Bytes,
        trace: Option<Propagation>,
        mcp: Option<McpHeaders>,
    ) {
        let cancelled = conn.is_stateless().then(|| {
            let (tx, rx) = tokio::sync::oneshot::channel::<()>();
            self.exchanges.insert(id, tx);
            rx
        });
        tokio::spawn(async move {
            let link = http_link(&conn);
            // The whole exchange, the answer's stream included, is bounded. Boxed: it is most
            // of this task's state, which spawning moves several times (1.8 KB unboxed, most
            // of it not yet in use); boxed before the timeout takes it, which then moves a
            // pointer instead of a copy of it.
            let exchange = Box::pin(link.exchange(&conn, id, body, trace.as_ref(), mcp.as_ref()));
            let bounded = tokio::time::timeout(link.exchange_timeout, exchange);
            let outcome = match cancelled {
                Some(rx) => tokio::select! {
                    o = bounded => {
                        link.exchanges.remove(&id);
                        o
                    }
                    // Cancelled (`abort`): the response stream is dropped here.
                    _ = rx => return,
                },
                None => bounded.await,
            };
            let failed = match outcome {
                Ok(r) => r.err(),
                Err(_) => Some(closed(
                    conn.upstream_name(),
                    "the answer took longer than the longest request timeout".into(),
                )),
            };
            if let Some(e) = failed {
                conn.fail(id, e);
            }
        });
    }

    async fn exchange(
        &self,
        conn: &Arc<Connection>,
        id: u64,
        body: Bytes,
        trace: Option<&Propagation>,
        mcp: Option<&McpHeaders>,
    ) -> Result<(), GatewayError> {
        let upstream = conn.upstream_name();
        let mut retried = false;
        let mut token_renewed = false;
        loop {
            let generation = self.generation.load(Ordering::Acquire);
            let (resp, had_session) = self.post(&body, upstream, trace, mcp).await?;
            let status = resp.status();
            if status.is_success() && status != StatusCode::ACCEPTED {
                return self.consume(conn, id, resp).await;
            }
            if status == StatusCode::UNAUTHORIZED && self.credentials.has_token() && !token_renewed
            {
                // Our token may have been revoked or expired early: one retry with a new one.
                drop(resp);
                token_renewed = true;
                self.credentials.token_rejected().await;
                continue;
            }
            if session_lost(status, had_session) && !retried {
                drop(resp);
                retried = true;
                // Boxed: a new handshake is a large state, rarely needed.
                Box::pin(self.reinitialize(conn, generation)).await?;
                continue;
            }
            if status.is_client_error()
                && !matches!(status, StatusCode::UNAUTHORIZED | StatusCode::FORBIDDEN)
                && !is_event_stream(resp.headers())
            {
                // A JSON-RPC error for this request sent with a 4xx status (2026-07-28 answers
                // -32020/-32021/-32022 with 400 and -32601 with 404): the request's answer.
                let probe = mcp.is_some_and(|m| m.method.as_bytes() == b"server/discover");
                return self.error_answer(conn, id, resp, probe).await;
            }
            return Err(status_error(upstream, resp).await);
        }
    }

    /// The body of a 4xx answer: routed as the request's response when it is a JSON-RPC
    /// response with the request's id, else the status error. `probe`: the request was the
    /// `server/discover` probe (`handshake.rs`).
    async fn error_answer(
        &self,
        conn: &Arc<Connection>,
        id: u64,
        mut resp: Response,
        probe: bool,
    ) -> Result<(), GatewayError> {
        let upstream = conn.upstream_name();
        let status = resp.status();
        let body = read_body(&mut resp, self.max_message, upstream).await?;
        let answers = matches!(
            crate::jsonrpc::parse(&body),
            Ok(crate::jsonrpc::Message::Response(r)) if r.id.get() == id.to_string()
        );
        if answers {
            conn.on_message(body, Some(id));
            return Ok(());
        }
        let snippet = String::from_utf8_lossy(&body[..body.len().min(512)]).into_owned();
        if probe {
            // A session-based server refusing the `server/discover` probe is the expected
            // fallback to `initialize`, not a fault. (Told by the request, not by whether the
            // upstream's era is decided: sessions starting at once probe at once, and all but
            // the first answer found it decided and warned.)
            tracing::debug!(upstream, %status, body = %snippet, "upstream refused the version probe: a session-based server");
        } else {
            tracing::warn!(upstream, %status, body = %snippet, "upstream answered with an error status");
        }
        Err(unavailable(
            upstream,
            format!("{ANSWERED_HTTP}{}", status.as_u16()),
        ))
    }

    /// Reads a JSON or SSE answer and routes every message in it.
    async fn consume(
        &self,
        conn: &Arc<Connection>,
        id: u64,
        mut resp: Response,
    ) -> Result<(), GatewayError> {
        let upstream = conn.upstream_name();
        if is_event_stream(resp.headers()) {
            let mut parser = SseParser::new(self.max_message);
            loop {
                let chunk = resp
                    .chunk()
                    .await
                    .map_err(|e| closed(upstream, e.to_string()))?;
                let Some(chunk) = chunk else { break };
                parser.push(&chunk);
                while let Some(ev) = parser
                    .next_event()
                    .map_err(|e| protocol(upstream, e.to_string()))?
                {
                    if !ev.data.is_empty() {
                        conn.on_message(ev.data, Some(id));
                    }
                }
                if !conn.is_pending(id) {
                    // Answered. The upstream ends the stream now: reading to its end (briefly)
                    // lets the connection be reused instead of closed.
                    let _ = tokio::time::timeout(STREAM_END_WAIT, resp.drain()).await;
                    return Ok(());
                }
            }
            if conn.is_pending(id) {
                return Err(closed(
                    upstream,
                    "the upstream ended its event stream before the response".into(),
                ));
            }
            return Ok(());
        }
        let body = read_body(&mut resp, self.max_message, upstream).await?;
        conn.on_message(body, Some(id));
        if conn.is_pending(id) {
            return Err(protocol(
                upstream,
                "the upstream's answer did not contain the response".into(),
            ));
        }
        Ok(())
    }

    /// POSTs a notification or a response; the upstream answers 202.
    pub async fn post_message(
        &self,
        conn: &Arc<Connection>,
        body: Bytes,
    ) -> Result<(), GatewayError> {
        let upstream = conn.upstream_name();
        let (resp, _) = match tokio::time::timeout(
            self.exchange_timeout,
            self.post(&body, upstream, None, None),
        )
        .await
        {
            Ok(r) => r?,
            Err(_) => return Err(unavailable(upstream, "timed out".into())),
        };
        if resp.status().is_success() {
            return Ok(());
        }
        Err(status_error(upstream, resp).await)
    }

    /// Re-runs the handshake once for all requests that saw the session disappear.
    async fn reinitialize(&self, conn: &Arc<Connection>, seen: u64) -> Result<(), GatewayError> {
        let _guard = self.reinit.lock().await;
        if self.generation.load(Ordering::Acquire) != seen {
            return Ok(());
        }
        tracing::warn!(upstream = %conn.upstream_name(), "upstream session expired; initializing a new one");
        if let Ok(mut s) = self.session_id.lock() {
            *s = None;
        }
        if let Ok(mut p) = self.protocol_version.lock() {
            *p = None;
        }
        Self::open(conn).await?;
        conn.owner_changed();
        // A new upstream session (often a restarted server) may offer different lists.
        conn.info.catalog.invalidate_all();
        if self.listening.load(Ordering::Acquire) {
            self.restart_listener(conn);
        }
        Ok(())
    }

    /// Opens (once) the GET stream for messages the upstream sends outside of requests.
    pub fn listen(&self, conn: &Arc<Connection>) {
        if self.listening.swap(true, Ordering::AcqRel) {
            return;
        }
        self.restart_listener(conn);
    }

    /// Waits, at most [`GET_STREAM_WAIT`], until the upstream has answered the GET stream
    /// `listen` opened: a request sent before it could reach an upstream that asks its
    /// questions on that stream (`roots/list` from inside a tool, as the Python SDK 1.x does)
    /// while the stream is not open there yet, and the question would be lost. At once when not
    /// listening or answered already; once per link in practice (its first request).
    pub async fn stream_answered(&self) {
        if !self.listening.load(Ordering::Acquire) {
            return;
        }
        let notified = self.get_answer.notified();
        tokio::pin!(notified);
        notified.as_mut().enable();
        if self.get_answered.load(Ordering::Acquire) {
            return;
        }
        let _ = tokio::time::timeout(GET_STREAM_WAIT, notified).await;
    }

    fn mark_get_answered(&self) {
        if !self.get_answered.swap(true, Ordering::AcqRel) {
            self.get_answer.notify_waiters();
        }
    }

    fn restart_listener(&self, conn: &Arc<Connection>) {
        let task = tokio::spawn(listen_loop(Arc::downgrade(conn)));
        if let Ok(mut l) = self.listener.lock()
            && let Some(old) = l.replace(task)
        {
            old.abort();
        }
    }

    /// Stops listening and, when the client session is over (`end`), ends the upstream
    /// session with DELETE (best effort, bounded). Without `end` the upstream session stays
    /// for another replica to continue.
    pub async fn close(&self, end: bool) {
        if self.closed.swap(true, Ordering::AcqRel) {
            return;
        }
        if let Some(task) = self.listener.lock().ok().and_then(|mut l| l.take()) {
            task.abort();
        }
        if !end || self.session_id().is_none() {
            return;
        }
        let headers = match self.base_headers(ACCEPT_BOTH).await {
            Ok((h, _)) => h,
            Err(e) => {
                tracing::debug!(error = %e, "upstream session DELETE skipped");
                return;
            }
        };
        let req = self.client.send(Method::DELETE, headers, b"");
        match tokio::time::timeout(DELETE_TIMEOUT, req).await {
            Ok(Ok(mut resp)) => resp.drain().await,
            Ok(Err(e)) => tracing::debug!(error = %e, "upstream session DELETE failed"),
            Err(_) => tracing::debug!("upstream session DELETE timed out"),
        }
    }
}

fn http_link(conn: &Connection) -> &HttpLink {
    match &conn.link {
        Link::Http(l) => l,
        Link::Stdio(_) | Link::Sse(_) => unreachable!("Streamable HTTP operation on another link"),
    }
}

/// The GET stream: reconnects with backoff (and `Last-Event-ID`) until the link closes or the
/// upstream says it offers no stream.
async fn listen_loop(conn: Weak<Connection>) {
    let mut backoff = Duration::from_secs(1);
    let mut last_event_id: Option<String> = None;
    loop {
        let Some(c) = conn.upgrade() else { return };
        let (name, max) = (c.info.name.clone(), http_link(&c).max_message);
        let request = {
            let l = http_link(&c);
            if l.closed.load(Ordering::Acquire) {
                return;
            }
            match l.base_headers("text/event-stream").await {
                Ok((mut headers, _)) => {
                    if let Some(id) = last_event_id
                        .as_deref()
                        .and_then(|i| HeaderValue::from_str(i).ok())
                    {
                        headers.add(&HeaderName::from_static(header::LAST_EVENT_ID), &id);
                    }
                    let client = l.client.clone();
                    // Hold no strong reference while waiting: the connection may close.
                    drop(c);
                    client.send(Method::GET, headers, b"").await
                }
                Err(e) => {
                    http_link(&c).mark_get_answered();
                    drop(c);
                    tracing::debug!(upstream = %name, error = %e, "upstream GET stream: no credentials yet");
                    tokio::time::sleep(backoff).await;
                    backoff = (backoff * 2).min(Duration::from_secs(30));
                    continue;
                }
            }
        };
        // Answered (a stream, a refusal or a failure): requests held for it go on.
        if let Some(c) = conn.upgrade() {
            http_link(&c).mark_get_answered();
        }
        match request {
            Ok(resp) if resp.status() == StatusCode::METHOD_NOT_ALLOWED => {
                tracing::debug!(upstream = %name, "upstream offers no GET stream");
                return;
            }
            Ok(resp) if resp.status() == StatusCode::NOT_FOUND => return,
            Ok(mut resp) if resp.status().is_success() && is_event_stream(resp.headers()) => {
                backoff = Duration::from_secs(1);
                resp.forget_headers();
                let mut parser = SseParser::new(max);
                'stream: while let Ok(Some(chunk)) = resp.chunk().await {
                    parser.push(&chunk);
                    loop {
                        match parser.next_event() {
                            Ok(Some(ev)) => {
                                if ev.id.is_some() {
                                    last_event_id = ev.id;
                                }
                                if !ev.data.is_empty() {
                                    let Some(c) = conn.upgrade() else { return };
                                    c.on_message(ev.data, None);
                                }
                            }
                            Ok(None) => break,
                            Err(e) => {
                                tracing::warn!(upstream = %name, error = %e, "upstream GET stream sent an oversized event");
                                break 'stream;
                            }
                        }
                    }
                }
            }
            Ok(resp) => {
                tracing::debug!(upstream = %name, status = %resp.status(), "upstream GET stream refused");
            }
            Err(e) => {
                tracing::debug!(upstream = %name, error = %e, "upstream GET stream failed");
            }
        }
        tokio::time::sleep(backoff).await;
        backoff = (backoff * 2).min(Duration::from_secs(30));
    }
}

/// 404 means the upstream ended the session; some servers answer 400 instead.
fn session_lost(status: StatusCode, had_session: bool) -> bool {
    had_session && (status == StatusCode::NOT_FOUND || status == StatusCode::BAD_REQUEST)
}

/// The error for an upstream's non-success status (its body's start goes to the logs).
pub(super) async fn status_error(upstream: &str, resp: Response) -> GatewayError {
    let status = resp.status();
    let mut resp = resp;
    let snippet = read_body(&mut resp, 512, upstream)
        .await
        .map(|b| String::from_utf8_lossy(&b).into_owned())
        .unwrap_or_default();
    tracing::warn!(upstream, %status, body = %snippet, "upstream answered with an error status");
    match status {
        StatusCode::UNAUTHORIZED | StatusCode::FORBIDDEN => unavailable(
            upstream,
            format!(
                "it rejected the gateway's credentials (HTTP {})",
                status.as_u16()
            ),
        ),
        _ => unavailable(upstream, format!("{ANSWERED_HTTP}{}", status.as_u16())),
    }
}

/// W3C Trace Context headers, for HTTP-level tracing in front of the upstream (a value that is
/// not a valid header is left out).
pub(super) fn add_trace_context(headers: &mut HeaderLines, t: &Propagation) {
    if let Ok(v) = HeaderValue::from_str(&t.traceparent) {
        headers.add_bytes("traceparent", v.as_bytes());
    }
    if let Some(Ok(v)) = t.tracestate.as_deref().map(HeaderValue::from_str) {
        headers.add_bytes("tracestate", v.as_bytes());
    }
}

pub(super) fn is_event_stream(headers: &HeaderFields) -> bool {
    headers
        .get("content-type")
        .is_some_and(|v| v.trim_ascii_start().starts_with(b"text/event-stream"))
}

pub(super) async fn read_body(
    resp: &mut Response,
    limit: usize,
    upstream: &str,
) -> Result<Bytes, GatewayError> {
    if resp.content_length().is_some_and(|n| n > limit as u64) {
        return Err(protocol(
            upstream,
            format!("the answer exceeds {limit} bytes"),
        ));
    }
    // A body that comes in one piece (the usual answer) is that piece, not a copy of it.
    let mut first = None;
    let mut buf = BytesMut::new();
    while let Some(chunk) = resp
        .chunk()
        .await
        .map_err(|e| closed(upstream, e.to_string()))?
    {
        let so_far = first.as_ref().map_or(buf.len(), Bytes::len);
        if so_far + chunk.len() > limit {
            return Err(protocol(
                upstream,
                format!("the answer exceeds {limit} bytes"),
            ));
        }
        if let Some(head) = first.take() {
            buf.reserve(head.len() + chunk.len());
            buf.extend_from_slice(&head);
        }
        if buf.is_empty() {
            first = Some(chunk);
        } else {
            buf.extend_from_slice(&chunk);
        }
    }
    Ok(first.unwrap_or_else(|| buf.freeze()))
}

pub(super) fn unavailable(upstream: &str, reason: String) -> GatewayError {
    GatewayError::UpstreamUnavailable {
        upstream: upstream.to_owned(),
        reason,
    }
}

pub(super) fn closed(upstream: &str, reason: String) -> GatewayError {
    GatewayError::UpstreamClosed {
        upstream: upstream.to_owned(),
        reason,
    }
}

pub(super) fn protocol(upstream: &str, reason: String) -> GatewayError {
    GatewayError::UpstreamProtocol {
        upstream: upstream.to_owned(),
        reason,
    }
}
