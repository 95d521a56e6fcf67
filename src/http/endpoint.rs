//! The MCP endpoint of a tenant (Streamable HTTP): POST carries client messages, GET opens the
//! server-to-client stream, DELETE ends a session. Each handler reads top to bottom in the
//! order the transport's rules apply.

use std::sync::Arc;
use std::time::Duration;

use axum::body::Body;
use axum::http::request::Parts;
use axum::http::{HeaderValue, Method, Response, StatusCode, header};
use bytes::Bytes;
use serde_json::value::RawValue;

use super::head::Head;
use super::{batch, guard, headers, sse, stateless};
use crate::auth::Principal;
use crate::error::{ErrorLabel, GatewayError};
use crate::events::{self, EventId, StreamKind, StreamLog, TailEnd};
use crate::gateway::Gateway;
use crate::jsonrpc::{self, Message, ParseError};
use crate::protocol::ProtocolVersion;
use crate::protocol::header as mcp;
use crate::router::{self, Reply};
use crate::session::{ClientTransport, GetSlot, LiveSession};
use crate::telemetry;
use crate::tenant::Tenant;
use crate::upstream::{ForwardStream, StreamItem};

/// How often an idle SSE stream gets a keep-alive comment.
pub(super) const KEEP_ALIVE_EVERY: Duration = Duration::from_secs(15);
/// The reconnection delay suggested to clients in priming events.
const RECONNECT_AFTER: Duration = Duration::from_millis(1000);
/// How long a GET that arrives before `notifications/initialized` waits for it.
const HANDSHAKE_GRACE: Duration = Duration::from_secs(2);

/// Entry point for a request whose path is a tenant's endpoint, from an admitted caller. Each
/// exchange runs in a request span (logs' context, and the server span of a trace).
pub async fn handle(
    gateway: &Gateway,
    tenant: &Arc<Tenant>,
    principal: &Principal,
    parts: &Head,
    body: Body,
) -> Response<Body> {
    let mut ex = Recorded::start(tenant, &parts.method, "unparsed");
    let (span, label) = (&mut ex.span, &mut ex.label);
    let result = match parts.method {
        Method::POST => post(gateway, tenant, principal, parts, body, label, span).await,
        Method::GET | Method::DELETE if stateless_headers(parts) => {
            // The stateless revision has no GET stream and no session to end.
            *label = "http/other";
            Err(GatewayError::MethodNotAllowed {
                allow: "GET, POST, DELETE",
            })
        }
        Method::GET => {
            *label = "http/get";
            let span = span.open(&tenant.name, &parts.method);
            traced(span, None, parts);
            // Boxed, as DELETE: once per session each, they need not size every POST's future.
            telemetry::in_span(span, Box::pin(get(gateway, tenant, principal, parts))).await
        }
        Method::DELETE => {
            *label = "http/delete";
            let span = span.open(&tenant.name, &parts.method);
            traced(span, None, parts);
            telemetry::in_span(span, Box::pin(delete(gateway, tenant, principal, parts))).await
        }
        _ => {
            *label = "http/other";
            Err(GatewayError::MethodNotAllowed {
                allow: "GET, POST, DELETE",
            })
        }
    };
    ex.finish(tenant, result)
}

/// One HTTP exchange of a tenant's endpoints: its request span (logs' context, and the
/// server span of a trace) and metrics label (set by the handler as soon as it knows what the
/// request is), and the time it started; `finish` records the outcome.
pub(super) struct Recorded {
    pub(super) span: telemetry::RequestSpan,
    pub(super) label: &'static str,
    started: std::time::Instant,
}

impl Recorded {
    pub(super) fn start(tenant: &Tenant, method: &Method, label: &'static str) -> Recorded {
        Recorded {
            span: telemetry::RequestSpan::start(&tenant.name, method),
            label,
            started: std::time::Instant::now(),
        }
    }

    /// The response for `result` (an error's own), recorded in the span and the metrics.
    pub(super) fn finish(
        self,
        tenant: &Tenant,
        result: Result<Response<Body>, GatewayError>,
    ) -> Response<Body> {
        let resp = result.unwrap_or_else(|e| e.into_response(None));
        record_exchange(tenant, self.label, self.started, &self.span.span, &resp);
        resp
    }
}

/// Records an exchange's outcome: in its span (status, error) and in the request metrics.
fn record_exchange(
    tenant: &Tenant,
    label: &'static str,
    started: std::time::Instant,
    span: &tracing::Span,
    resp: &Response<Body>,
) {
    let outcome = resp.extensions().get::<ErrorLabel>().map_or("ok", |e| e.0);
    if telemetry::enabled() {
        // Only for the exported span: the exchange's log lines are written before the status
        // is known (but for a stream's pump, whose status is 200).
        span.record("http.response.status_code", resp.status().as_u16());
    }
    if outcome != "ok" {
        telemetry::record_error(span, outcome);
    }
    tenant
        .requests
        .observe(&tenant.name, label, started.elapsed(), outcome);
}

/// Gives the request span the client's trace context (`_meta` of `params`, else headers) and,
/// when traces are exported, its trace id for the logs.
fn traced(span: &telemetry::RequestSpan, params: Option<&RawValue>, parts: &Parts) {
    if telemetry::enabled() {
        let span = &span.span;
        telemetry::adopt_parent(span, params, &parts.headers);
        if let Some(id) = telemetry::trace_id(span) {
            span.record("trace_id", id);
        }
    }
}

/// Whether a request's `MCP-Protocol-Version` names the stateless revision.
pub(super) fn stateless_headers(parts: &Parts) -> bool {
    matches!(headers::protocol_version(&parts.headers), Ok(Some(v)) if v.is_stateless())
}

/// Records the (hashed) session id in the current request span.
pub(super) fn note_session(session: &LiveSession) {
    telemetry::record_session(session.log_id);
}

async fn post(
    gateway: &Gateway,
    tenant: &Arc<Tenant>,
    principal: &Principal,
    parts: &Head,
    body: Body,
    label: &mut &'static str,
    span: &mut telemetry::RequestSpan,
) -> Result<Response<Body>, GatewayError> {
    headers::check_content_type(&parts.headers)?;
    headers::check_post_accept(&parts.headers)?;
    let bytes = gateway.bodies.read(body).await?;
    if jsonrpc::is_batch(&bytes) {
        *label = "batch";
        let span = span.open(&tenant.name, &parts.method);
        traced(span, None, parts);
        // Boxed: a batch's state would size every single request's future.
        let batch = Box::pin(batch::serve(gateway, tenant, principal, parts, &bytes));
        return telemetry::in_span(span, batch).await;
    }
    let message = match jsonrpc::parse(&bytes) {
        Ok(m) => m,
        Err(e) => return Ok(refuse_unparsed(e)),
    };
    *label = describe(span, tenant, parts, &message);
    let handled = dispatch(gateway, tenant, principal, parts, &bytes, message);
    telemetry::in_span(span, handled).await
}

/// Names a client message in its request span (method, id, the client's trace context),
/// opening the span if it is not yet; returns the metrics label of its method.
pub(super) fn describe(
    span: &mut telemetry::RequestSpan,
    tenant: &Tenant,
    parts: &Parts,
    message: &Message<'_>,
) -> &'static str {
    let (method, params, id) = match message {
        Message::Request(r) => (Some(&*r.method), r.params, Some(r.id.get())),
        Message::Notification(n) => (Some(&*n.method), n.params, None),
        Message::Response(_) => (None, None, None),
    };
    let (tenant, http_method) = (&tenant.name, &parts.method);
    let span = match method {
        Some(m) => span.name_message(tenant, http_method, m, id),
        None => span.open(tenant, http_method),
    };
    traced(span, params, parts);
    method.map_or("response", crate::protocol::Method::label)
}

/// Request rates (`Rates::check_request`), charged after authentication and before a session
/// is looked up or created, on every transport: the refusal to send (429 with the request's
/// id), or `None` to go on. Notifications and responses are not charged.
pub(super) async fn refused_by_rates(
    gateway: &Gateway,
    tenant: &Tenant,
    principal: &Principal,
    message: &Message<'_>,
) -> Option<Response<Body>> {
    let Message::Request(req) = message else {
        return None;
    };
    let refusal = gateway
        .limiter
        .rates
        .check_request(&tenant.for_limits(), principal, 1)
        .await
        .err()?;
    Some(refusal.into_response(Some(req.id)))
}

/// Handles one parsed client message (inside its request span).
async fn dispatch(
    gateway: &Gateway,
    tenant: &Arc<Tenant>,
    principal: &Principal,
    parts: &Head,
    bytes: &Bytes,
    message: Message<'_>,
) -> Result<Response<Body>, GatewayError> {
    let user = &*principal.user;

    // Request rates: after authentication, before a session is looked up or created.
    if let Some(refused) = refused_by_rates(gateway, tenant, principal, &message).await {
        return Ok(refused);
    }

    // Read once: it selects the revision here and is checked again below.
    let version = headers::protocol_version(&parts.headers);
    // The stateless revision: no session, every request stands alone. Boxed, as is
    // `initialize` below: each is a large state that would otherwise size (and be copied
    // with) every request's future, the session-based calls' too.
    if stateless::selected(&version, &parts.headers, message_params(&message)) {
        return Ok(Box::pin(stateless::serve(gateway, tenant, principal, parts, message)).await);
    }

    // initialize opens a session: the version comes from its params, not from a header.
    if let Message::Request(req) = &message
        && req.method == "initialize"
    {
        if headers::session_id(&parts.headers)?.is_some() {
            return Ok(GatewayError::InvalidRequest(
                "initialize starts a new session and must not carry Mcp-Session-Id".into(),
            )
            .into_response(Some(req.id)));
        }
        let opening = router::Opening::StreamableHttp;
        return Ok(
            match Box::pin(router::initialize(gateway, tenant, principal, req, opening)).await {
                Ok((session, body)) => {
                    note_session(&session);
                    let mut resp = json(body);
                    if let Ok(v) = HeaderValue::from_str(session.key.id.as_str()) {
                        resp.headers_mut().insert(mcp::SESSION_ID, v);
                    }
                    resp
                }
                Err(e) => e.into_response(Some(req.id)),
            },
        );
    }

    let request_id = match &message {
        Message::Request(r) => Some(r.id),
        _ => None,
    };
    if let Err(e) = version {
        return Ok(e.into_response(request_id));
    }
    let session = session_of(gateway, tenant, parts, user).await?;
    let response = match message {
        Message::Request(req) => {
            // In flight until answered (a streamed answer: until its stream ends).
            let in_flight =
                match crate::limits::sessions::enter_request(&tenant.for_limits(), &session) {
                    Ok(guard) => guard,
                    Err(e) => return Ok(e.into_response(Some(req.id))),
                };
            match router::handle_request(gateway, tenant, &session, principal, &req).await {
                Ok(Reply::Json(body)) => json(body),
                Ok(Reply::Stream(stream)) => {
                    respond_stream(gateway, &session, stream, in_flight).await
                }
                Err(e) => step_up(tenant, parts, e).into_response(Some(req.id)),
            }
        }
        Message::Notification(n) => {
            router::handle_notification(tenant, &session, &n, bytes).await;
            accepted()
        }
        Message::Response(r) => {
            // Boxed: relaying an answer upstream may open a connection; a rare, large state.
            Box::pin(router::handle_response(&session, &r, bytes)).await;
            accepted()
        }
    };
    // Another replica may serve the next request: what changed must be in the store.
    gateway.persist(&session).await;
    Ok(response)
}

/// A tool that needs scopes the token lacks is answered with the endpoint's step-up challenge
/// (the client may obtain a token with these scopes); other errors stay as they are.
pub(super) fn step_up(tenant: &Tenant, parts: &Head, e: GatewayError) -> GatewayError {
    let GatewayError::ToolNeedsScopes { missing } = e else {
        return e;
    };
    let resource = guard::admitted_resource(tenant, parts);
    GatewayError::InsufficientScope {
        www_authenticate: resource.challenge_scope(&missing),
        missing,
    }
}

fn message_params<'m>(message: &'m Message<'_>) -> Option<&'m RawValue> {
    match message {
        Message::Request(r) => r.params,
        Message::Notification(n) => n.params,
        Message::Response(_) => None,
    }
}

/// The answer to a message that could not be taken: its id when one was readable.
pub(super) fn refuse_unparsed(e: ParseError) -> Response<Body> {
    let id = e
        .id()
        .and_then(|id| RawValue::from_string(id.to_owned()).ok());
    parse_error(e).into_response(id.as_deref())
}

pub(super) fn parse_error(e: ParseError) -> GatewayError {
    match e {
        ParseError::NotJson(detail) => GatewayError::Parse(detail),
        ParseError::Batch => GatewayError::BatchNotSupported,
        ParseError::InvalidRequest { reason, .. } => {
            GatewayError::InvalidRequest(reason.into_owned())
        }
        ParseError::Ambiguous { ambiguity, .. } => {
            GatewayError::InvalidRequest(ambiguity.to_string())
        }
    }
}

/// The session named by `Mcp-Session-Id`: 400 without the header, 404 when unknown (or
/// opened on the 2024-11-05 transport, whose ids are valid on its message endpoint only).
pub(super) async fn session_of(
    gateway: &Gateway,
    tenant: &Tenant,
    parts: &Parts,
    user: &str,
) -> Result<Arc<LiveSession>, GatewayError> {
    let id = headers::session_id(&parts.headers)?.ok_or(GatewayError::SessionRequired)?;
    let session = gateway.find_session(tenant, user, id).await?;
    if session.transport != ClientTransport::StreamableHttp {
        return Err(GatewayError::SessionNotFound);
    }
    note_session(&session);
    Ok(session)
}

/// Answers a forwarded request: as JSON when the response comes first, else as an SSE stream
/// that carries everything related to the request and ends with its response. Every event is
/// recorded in the session's stream log before it is sent, by a task that outlives the
/// connection: a client that loses the stream resumes it with `Last-Event-ID` and misses
/// nothing, the response included.
async fn respond_stream(
    gateway: &Gateway,
    session: &Arc<LiveSession>,
    mut stream: ForwardStream,
    in_flight: crate::session::InFlightGuard,
) -> Response<Body> {
    match stream.next().await {
        Some(StreamItem::Final(body)) => json(body),
        // Cancelled by the client before anything came: no response is sent for a cancelled
        // request (the spec's guidance), so the answer is an event stream that ends at once.
        Some(StreamItem::Cancelled) | None => cancelled(),
        Some(StreamItem::Message(first, kind)) => {
            let log = session.open_stream(StreamKind::Post);
            prime(session, &log);
            log.record(&first, kind, 0);
            let pump_log = log.clone();
            let guard = gateway.pump_started();
            // The pump carries the request span: it ends with the stream, not the headers.
            let pump = async move {
                let _guard = guard;
                let _in_flight = in_flight;
                loop {
                    match stream.next().await {
                        Some(StreamItem::Message(b, kind)) => {
                            pump_log.record(&b, kind, 0);
                        }
                        Some(StreamItem::Final(b)) => {
                            pump_log.append(&b, true);
                            break;
                        }
                        Some(StreamItem::Cancelled) | None => {
                            pump_log.finish();
                            break;
                        }
                    }
                }
                let dropped = pump_log.dropped();
                if dropped > 0 {
                    tracing::info!(stream = %pump_log.id, dropped, "a stream's client fell behind: notifications were dropped or coalesced (the response was kept)");
                }
            };
            tokio::spawn(telemetry::carry(pump));
            sse::response(Body::from_stream(events::tail(
                log,
                0,
                tail_end(gateway, None),
            )))
        }
    }
}

/// The answer to a POST whose request the client cancelled before anything came: an event
/// stream without events (a request's POST must be answered with JSON or a stream; a
/// cancelled request gets no response).
pub(super) fn cancelled() -> Response<Body> {
    sse::response(Body::empty())
}

/// How often an SSE stream that carries nothing gets a keep-alive comment, and the retry
/// delay suggested to clients that must reconnect.
pub(super) fn tail_end(gateway: &Gateway, claim: Option<GetClaim>) -> TailEnd {
    TailEnd {
        keep_alive: Bytes::from_static(sse::KEEP_ALIVE),
        keep_alive_every: KEEP_ALIVE_EVERY,
        shutdown: gateway.shutdown_signal(),
        on_keep_alive: claim.map(|c| Box::new(move || c.refresh()) as Box<dyn Fn() + Send + Sync>),
    }
}

/// A priming event (an id, empty data and a retry delay) opens the streams of clients on
/// 2025-11-25 or later, so they can resume even before the first message; older clients
/// would take the empty data for a malformed message.
pub(super) fn prime(session: &LiveSession, log: &StreamLog) {
    if session.protocol_version >= ProtocolVersion::V2025_11_25 {
        log.prime(RECONNECT_AFTER);
    }
}

async fn get(
    gateway: &Gateway,
    tenant: &Arc<Tenant>,
    principal: &Principal,
    parts: &Parts,
) -> Result<Response<Body>, GatewayError> {
    headers::check_get_accept(&parts.headers)?;
    headers::protocol_version(&parts.headers)?;
    let session = session_of(gateway, tenant, parts, &principal.user).await?;
    // Held by the response body: the connection counts until the client or the stream ends it
    // (and while it waits for the handshake below, so waiting GETs are bounded too).
    let slot = session.get_slot().ok_or(GatewayError::TooManyStreams {
        limit: session.max_get_streams(),
    })?;
    // Before `notifications/initialized` the client has not said it is ready for the
    // server's messages, and it has no stream to resume: 400 (not 405, which would tell it
    // this endpoint never offers a GET stream). Clients that send both at once (the Python
    // SDK opens its GET as it posts the notification) get a moment's grace.
    if !session.initialized_within(HANDSHAKE_GRACE).await
        && !session_of(gateway, tenant, parts, &principal.user)
            .await?
            .is_initialized()
    {
        return Err(GatewayError::StreamBeforeInitialized);
    }
    // Resumption: the events after `Last-Event-ID` on the stream it names (those its bounds
    // still hold, if the client fell far behind), then live.
    if let Some(last) = headers::last_event_id(&parts.headers)? {
        let id = EventId::parse(last);
        match id
            .as_ref()
            .and_then(|id| Some((session.events.find(id)?, id.seq)))
        {
            Some((log, after)) if log.kind == StreamKind::Post => {
                let events = events::tail(log, after, tail_end(gateway, None));
                return Ok(sse::response(held(events, slot)));
            }
            Some((log, after)) if !log.is_done() => {
                session.use_get_stream(log.clone());
                return open_get(gateway, tenant, &session, log, after, None, slot).await;
            }
            _ => {}
        }
        // Recorded by another replica (or before this one restarted): from Redis.
        if let (Some(id), Some(redis)) = (id, gateway.bus.events.clone()) {
            let stream = id.stream.as_str().to_owned();
            match redis.read_after(&session.key, &stream, id.seq).await {
                Ok(Some(first)) if id.stream.kind() == Some(StreamKind::Post) => {
                    let events = events::remote_tail(
                        redis,
                        session.key.clone(),
                        stream,
                        first,
                        tail_end(gateway, None),
                    );
                    return Ok(sse::response(held(events, slot)));
                }
                Ok(Some(first)) => {
                    return take_over_get(gateway, tenant, &session, &redis, &stream, first, slot)
                        .await;
                }
                Ok(None) => {}
                Err(e) => {
                    tracing::error!(error = %e, "event log unavailable");
                    return Err(GatewayError::StoreUnavailable);
                }
            }
        }
        tracing::debug!(session = ?session.key.id, "Last-Event-ID names no stream this session can resume; opening a new GET stream");
    }
    let log = session.open_get_stream();
    prime(&session, &log);
    open_get(gateway, tenant, &session, log, 0, None, slot).await
}

/// A GET connection's body: `events`, with the connection's slot among its session's held
/// until the body is dropped.
fn held<S>(events: S, slot: GetSlot) -> Body
where
    S: futures_util::Stream<Item = Result<Bytes, std::convert::Infallible>> + Send + 'static,
{
    Body::from_stream(futures_util::StreamExt::map(events, move |chunk| {
        let _slot = &slot;
        chunk
    }))
}

/// Resumes, on this replica, a GET stream another replica served: this replica becomes the
/// holder (the old one stops recording), the rest of the old stream is replayed from Redis,
/// and a new GET stream of this replica follows.
async fn take_over_get(
    gateway: &Gateway,
    tenant: &Arc<Tenant>,
    session: &Arc<LiveSession>,
    redis: &crate::cluster::RedisEvents,
    stream: &str,
    mut replayed: crate::cluster::Replayed,
    slot: GetSlot,
) -> Result<Response<Body>, GatewayError> {
    let log = session.open_get_stream();
    if let Err(e) = gateway.bus.claim_get_stream(&session.key).await {
        tracing::warn!(error = %e, "GET stream not announced to the other replicas");
    }
    let moved = crate::cluster::BusMessage::GetMoved {
        to: (&session.key).into(),
        by: gateway.bus.replica.to_string(),
    };
    if let Err(e) = gateway.bus.broadcast(&moved).await {
        tracing::warn!(error = %e, "the previous GET stream holder was not told");
    }
    // What the old holder recorded until it stopped (its writes to Redis lag a little).
    let mut quiet = 0;
    for _ in 0..20 {
        if replayed.done || quiet >= 3 {
            break;
        }
        tokio::time::sleep(Duration::from_millis(50)).await;
        match redis
            .read_after(&session.key, stream, replayed.last_seq)
            .await
        {
            Ok(Some(more)) if !more.events.is_empty() || more.done => {
                replayed.last_seq = more.last_seq;
                replayed.done = more.done;
                replayed.events.extend(more.events);
                quiet = 0;
            }
            _ => quiet += 1,
        }
    }
    prime(session, &log);
    open_get(
        gateway,
        tenant,
        session,
        log,
        0,
        events::join(&replayed.events),
        slot,
    )
    .await
}

/// Serves the session's GET stream from `log` after event `after`.
async fn open_get(
    gateway: &Gateway,
    tenant: &Arc<Tenant>,
    session: &Arc<LiveSession>,
    log: Arc<StreamLog>,
    after: u64,
    replayed: Option<Bytes>,
    slot: GetSlot,
) -> Result<Response<Body>, GatewayError> {
    // Messages produced on other replicas are sent to the replica that holds the stream.
    if let Err(e) = gateway.bus.claim_get_stream(&session.key).await {
        tracing::warn!(error = %e, "GET stream not announced to the other replicas");
    }
    // The client now listens for unsolicited messages: so do the session's upstreams.
    for upstream in tenant.upstreams.iter() {
        if let Some(conn) = session.link(upstream.info.id) {
            conn.listen();
        }
    }
    let claim = GetClaim {
        bus: gateway.bus.clone(),
        session: session.clone(),
    };
    let live = events::tail(log, after, tail_end(gateway, Some(claim)));
    let first = futures_util::stream::iter(replayed.map(Ok::<_, std::convert::Infallible>));
    Ok(sse::response(held(
        futures_util::StreamExt::chain(first, live),
        slot,
    )))
}

/// This replica's claim on a session's GET stream: refreshed with the keep-alives, released
/// when the stream ends (if still this replica's).
pub(super) struct GetClaim {
    bus: Arc<crate::cluster::Bus>,
    session: Arc<LiveSession>,
}

impl GetClaim {
    fn refresh(&self) {
        if !self.bus.is_clustered() {
            return;
        }
        let (bus, key) = (self.bus.clone(), self.session.key.clone());
        tokio::spawn(async move {
            if let Err(e) = bus.claim_get_stream(&key).await {
                tracing::debug!(error = %e, "GET stream claim not refreshed");
            }
        });
    }
}

impl Drop for GetClaim {
    fn drop(&mut self) {
        if !self.bus.is_clustered() || self.session.has_get_stream() {
            return;
        }
        let (bus, key) = (self.bus.clone(), self.session.key.clone());
        if let Ok(handle) = tokio::runtime::Handle::try_current() {
            handle.spawn(async move {
                let _ = bus.release_get_stream(&key).await;
            });
        }
    }
}

async fn delete(
    gateway: &Gateway,
    tenant: &Arc<Tenant>,
    principal: &Principal,
    parts: &Parts,
) -> Result<Response<Body>, GatewayError> {
    let session = session_of(gateway, tenant, parts, &principal.user).await?;
    gateway.end_session(tenant, &session.key).await?;
    tracing::info!(tenant = %tenant.name, session = ?session.key.id, "session deleted by the client");
    let mut resp = Response::new(Body::empty());
    *resp.status_mut() = StatusCode::OK;
    Ok(resp)
}

pub(super) fn json(body: Bytes) -> Response<Body> {
    let mut resp = Response::new(Body::from(body));
    resp.headers_mut().insert(
        header::CONTENT_TYPE,
        HeaderValue::from_static("application/json"),
    );
    resp
}

pub(super) fn accepted() -> Response<Body> {
    let mut resp = Response::new(Body::empty());
    *resp.status_mut() = StatusCode::ACCEPTED;
    resp
}
