//! The 2024-11-05 HTTP+SSE transport of a tenant endpoint, for clients older than Streamable
//! HTTP: `GET <endpoint>/sse` opens a stream whose first event (`endpoint`) names the message
//! endpoint `<endpoint>/messages?sessionId=<id>`; every POST there is answered 202 (or an
//! HTTP error when the message cannot be taken), and everything the server says travels on
//! the stream as `message` events. The stream is the session's GET stream, so routing,
//! server-to-client requests and replicas work as for Streamable HTTP; closing it ends the
//! session.

use std::sync::Arc;

use axum::body::Body;
use axum::http::request::Parts;
use axum::http::{Method, Response};
use bytes::Bytes;
use futures_util::StreamExt;

use super::endpoint::{self, Recorded, accepted, describe, note_session, refuse_unparsed};
use super::head::Head;
use super::{headers, sse};
use crate::auth::Principal;
use crate::cluster::BusMessage;
use crate::error::GatewayError;
use crate::events::{self, StreamId, StreamLog, TailEnd};
use crate::gateway::Gateway;
use crate::jsonrpc::{self, Message};
use crate::router::{self, Opening, Reply};
use crate::session::{ClientTransport, LiveSession, SessionId, SessionKey, SessionStore};
use crate::telemetry;
use crate::tenant::Tenant;
use crate::upstream::StreamItem;

/// Which of the two legacy paths below a tenant endpoint a request names.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Route {
    /// `<endpoint>/sse`: GET opens the session's stream.
    Stream,
    /// `<endpoint>/messages?sessionId=<id>`: POST carries one client message.
    Messages,
}

/// The tenant endpoint path and legacy route a request path names, if it names one.
pub fn split(path: &str) -> Option<(&str, Route)> {
    if let Some(base) = path.strip_suffix("/sse") {
        return Some((base, Route::Stream));
    }
    path.strip_suffix("/messages")
        .map(|base| (base, Route::Messages))
}

/// Entry point for an admitted request on a legacy path, in its own request span.
pub async fn handle(
    gateway: Arc<Gateway>,
    tenant: Arc<Tenant>,
    principal: Principal,
    parts: Head,
    body: Body,
    route: Route,
) -> Response<Body> {
    let mut ex = Recorded::start(&tenant, &parts.method, "http/other");
    let (span, label) = (&mut ex.span, &mut ex.label);
    let result = match (route, &parts.method) {
        (Route::Stream, &Method::GET) => {
            *label = "http/get";
            let span = span.open(&tenant.name, &parts.method);
            telemetry::in_span(span, open_stream(&gateway, &tenant, &principal, &parts)).await
        }
        (Route::Messages, &Method::POST) => {
            post(&gateway, &tenant, &principal, &parts, body, label, span).await
        }
        (Route::Stream, _) => Err(GatewayError::MethodNotAllowed { allow: "GET" }),
        (Route::Messages, _) => Err(GatewayError::MethodNotAllowed { allow: "POST" }),
    };
    ex.finish(&tenant, result)
}

/// `GET <endpoint>/sse`: a new session id, announced in the `endpoint` event; the stream is
/// held here (and claimed on the bus, so messages produced on other replicas reach it) until
/// the client goes, which ends the session.
async fn open_stream(
    gateway: &Arc<Gateway>,
    tenant: &Arc<Tenant>,
    principal: &Principal,
    parts: &Parts,
) -> Result<Response<Body>, GatewayError> {
    headers::check_get_accept(&parts.headers)?;
    headers::protocol_version(&parts.headers)?;
    let key = SessionKey {
        tenant: tenant.name.clone(),
        user: principal.user.clone(),
        id: SessionId::generate(),
    };
    let log = Arc::new(StreamLog::legacy(StreamId::from(
        format!("{}-legacy", gateway.bus.replica).as_str(),
    )));
    tenant
        .directory
        .legacy_streams
        .open(&key.id, &key.user, log.clone());
    if let Err(e) = gateway.bus.claim_get_stream(&key).await {
        tracing::warn!(error = %e, "2024-11-05 stream not announced to the other replicas");
    }
    tracing::info!(tenant = %tenant.name, session = ?key.id, "2024-11-05 SSE stream opened");
    // A stream that never sends `initialize` holds a connection for nothing.
    let deadline = gateway
        .session_ttl
        .min(tenant.config.limits.handshake_timeout);
    crate::gateway::handshake::watch_stream(gateway, tenant, &key, deadline);
    let endpoint = Bytes::from(format!(
        "event: endpoint\ndata: {}/messages?sessionId={}\n\n",
        tenant.config.path,
        key.id.as_str()
    ));
    let end = TailEnd {
        keep_alive: Bytes::from_static(sse::KEEP_ALIVE),
        keep_alive_every: endpoint::KEEP_ALIVE_EVERY,
        shutdown: gateway.shutdown_signal(),
        on_keep_alive: keep_alive_hook(gateway, &key),
    };
    let held = HeldStream {
        gateway: gateway.clone(),
        tenant: tenant.clone(),
        key,
    };
    let body = futures_util::stream::iter([Ok::<_, std::convert::Infallible>(endpoint)])
        .chain(events::tail(log, 0, end))
        .map(move |chunk| {
            // The stream owns `held`: dropping the body (the client went) ends the session.
            let _ = &held;
            chunk
        });
    Ok(sse::response(Body::from_stream(body)))
}

/// With replicas, every keep-alive refreshes the stream's claim and the session record's
/// time-to-live (the session may be live on another replica only, where nothing shows that
/// its client still listens).
fn keep_alive_hook(
    gateway: &Arc<Gateway>,
    key: &SessionKey,
) -> Option<Box<dyn Fn() + Send + Sync>> {
    if !gateway.bus.is_clustered() {
        return None;
    }
    let (gateway, key) = (Arc::downgrade(gateway), key.clone());
    Some(Box::new(move || {
        let (gateway, key) = (gateway.clone(), key.clone());
        tokio::spawn(async move {
            let Some(gateway) = gateway.upgrade() else {
                return;
            };
            if let Err(e) = gateway.bus.claim_get_stream(&key).await {
                tracing::debug!(error = %e, "2024-11-05 stream claim not refreshed");
            }
            if let Err(e) = gateway.store.touch(&key, gateway.session_ttl).await {
                tracing::debug!(error = %e, "2024-11-05 session record not refreshed");
            }
            // And its place in the live-session counts (when it is live here).
            let tenants = gateway.tenants();
            let live = tenants
                .by_name(&key.tenant)
                .and_then(|t| t.directory.get(&key.id));
            if let Some(session) = live {
                gateway
                    .limiter
                    .sessions
                    .refresh(&session, gateway.session_ttl)
                    .await;
            }
        });
    }))
}

/// A client's open 2024-11-05 stream; when it is dropped the client is gone, and with it the
/// session: its live state everywhere, its upstream sessions and processes, its record.
struct HeldStream {
    gateway: Arc<Gateway>,
    tenant: Arc<Tenant>,
    key: SessionKey,
}

impl Drop for HeldStream {
    fn drop(&mut self) {
        self.tenant.directory.legacy_streams.remove(&self.key.id);
        let (gateway, tenant, key) = (self.gateway.clone(), self.tenant.clone(), self.key.clone());
        let Ok(runtime) = tokio::runtime::Handle::try_current() else {
            return;
        };
        runtime.spawn(async move {
            if let Err(e) = gateway.bus.release_get_stream(&key).await {
                tracing::debug!(error = %e, "2024-11-05 stream claim not released");
            }
            match gateway.end_session(&tenant, &key).await {
                Ok(_) => {
                    tracing::info!(tenant = %tenant.name, session = ?key.id, "2024-11-05 SSE stream closed; session ended");
                }
                Err(e) => {
                    tracing::warn!(error = %e, session = ?key.id, "2024-11-05 session not ended after its stream closed (its record expires)");
                }
            }
        });
    }
}

/// `POST <endpoint>/messages?sessionId=<id>`: the transport's rules (Content-Type, session,
/// body size, JSON-RPC, protocol version header) answered with HTTP errors; then 202, the
/// message's answers going to the stream.
async fn post(
    gateway: &Arc<Gateway>,
    tenant: &Arc<Tenant>,
    principal: &Principal,
    parts: &Parts,
    body: Body,
    label: &mut &'static str,
    span: &mut telemetry::RequestSpan,
) -> Result<Response<Body>, GatewayError> {
    headers::check_content_type(&parts.headers)?;
    let presented = session_param(parts)?;
    let bytes = gateway.bodies.read(body).await?;
    let message = match jsonrpc::parse(&bytes) {
        Ok(m) => m,
        Err(e) => return Ok(refuse_unparsed(e)),
    };
    *label = describe(span, tenant, parts, &message);
    headers::protocol_version(&parts.headers)?;
    let handled = dispatch(gateway, tenant, principal, &presented, &bytes, message);
    telemetry::in_span(span, handled).await
}

/// The `sessionId` query parameter (400 without it).
fn session_param(parts: &Parts) -> Result<String, GatewayError> {
    let query = parts.uri.query().unwrap_or_default();
    url::form_urlencoded::parse(query.as_bytes())
        .find(|(name, _)| name == "sessionId")
        .map(|(_, value)| value.into_owned())
        .ok_or(GatewayError::SessionParamRequired)
}

/// Handles one client message for session `presented` (inside its request span).
async fn dispatch(
    gateway: &Arc<Gateway>,
    tenant: &Arc<Tenant>,
    principal: &Principal,
    presented: &str,
    bytes: &Bytes,
    message: Message<'_>,
) -> Result<Response<Body>, GatewayError> {
    // Request rates: after authentication, before the session is looked up or created.
    if let Some(refused) = endpoint::refused_by_rates(gateway, tenant, principal, &message).await {
        return Ok(refused);
    }
    let session = match gateway
        .find_session(tenant, &principal.user, presented)
        .await
    {
        Ok(s) if s.transport == ClientTransport::LegacySse => s,
        // A Streamable HTTP session's id names nothing here.
        Ok(_) => return Err(GatewayError::SessionNotFound),
        Err(GatewayError::SessionNotFound) => {
            return initialize_session(gateway, tenant, principal, presented, message).await;
        }
        Err(e) => return Err(e),
    };
    attach_stream(tenant, &session);
    match message {
        Message::Request(req) => {
            let in_flight =
                match crate::limits::sessions::enter_request(&tenant.for_limits(), &session) {
                    Ok(guard) => guard,
                    Err(e) => {
                        send(&session, e.to_jsonrpc(Some(req.id)));
                        return Ok(accepted());
                    }
                };
            // Answered on the stream by a task of its own: the client may have to POST its
            // answers to the upstream's questions before this request's response comes.
            answer(
                gateway,
                tenant,
                &session,
                principal,
                bytes.clone(),
                in_flight,
            );
            return Ok(accepted());
        }
        // Acted on before the 202, so a request POSTed after it sees its effect.
        Message::Notification(n) => {
            router::handle_notification(tenant, &session, &n, bytes).await;
        }
        Message::Response(r) => {
            // Boxed: relaying an answer upstream may open a connection; a rare, large state.
            Box::pin(router::handle_response(&session, &r, bytes)).await;
        }
    }
    gateway.persist(&session).await;
    Ok(accepted())
}

/// A message for a stream whose session does not exist yet: `initialize` creates it (under
/// the id the stream announced), anything else is refused. Without a stream it is unknown.
async fn initialize_session(
    gateway: &Gateway,
    tenant: &Arc<Tenant>,
    principal: &Principal,
    presented: &str,
    message: Message<'_>,
) -> Result<Response<Body>, GatewayError> {
    let id = SessionId::from_presented(presented).ok_or(GatewayError::SessionNotFound)?;
    let streams = &tenant.directory.legacy_streams;
    let local = streams.get(&id, &principal.user);
    if local.is_none() && !held_elsewhere(gateway, tenant, &principal.user, &id).await? {
        return Err(GatewayError::SessionNotFound);
    }
    let Message::Request(req) = message else {
        return Err(GatewayError::SessionNotOpened(
            "the session is not initialized: send `initialize` first",
        ));
    };
    if req.method != "initialize" {
        return Err(GatewayError::SessionNotOpened(
            "the session is not initialized: send `initialize` first",
        ));
    }
    if local.is_some() && !streams.begin_initialize(&id, &principal.user) {
        return Err(GatewayError::SessionNotOpened(
            "this session's `initialize` is already being answered",
        ));
    }
    let key = SessionKey {
        tenant: tenant.name.clone(),
        user: principal.user.clone(),
        id: id.clone(),
    };
    let here = local.is_some();
    let opening = Opening::LegacySse {
        id: id.clone(),
        stream: local,
    };
    match router::initialize(gateway, tenant, principal, &req, opening).await {
        Ok((session, body)) => {
            note_session(&session);
            send(&session, body);
            // The client may have gone while the upstreams were being connected.
            if here && streams.get(&id, &principal.user).is_none() {
                let _ = gateway.end_session(tenant, &key).await;
            }
        }
        // A session limit refused it: 429 + `Retry-After` on the POST itself, as for
        // Streamable HTTP (the stream stays open until the handshake deadline; a retry may
        // succeed on it).
        Err(e @ GatewayError::TooManyRequests(_)) => {
            streams.initialize_failed(&id);
            return Ok(e.into_response(Some(req.id)));
        }
        Err(e) => {
            streams.initialize_failed(&id);
            send_before_session(gateway, tenant, &key, e.to_jsonrpc(Some(req.id))).await;
        }
    }
    Ok(accepted())
}

/// Whether another replica holds the stream of session `id` of `user` (clustered only).
async fn held_elsewhere(
    gateway: &Gateway,
    tenant: &Tenant,
    user: &Arc<str>,
    id: &SessionId,
) -> Result<bool, GatewayError> {
    if !gateway.bus.is_clustered() {
        return Ok(false);
    }
    let key = SessionKey {
        tenant: tenant.name.clone(),
        user: user.clone(),
        id: id.clone(),
    };
    match gateway.bus.get_stream_holder(&key).await {
        Ok(holder) => Ok(holder.is_some_and(|r| r != *gateway.bus.replica)),
        Err(e) => {
            tracing::error!(error = %e, "session store unavailable");
            Err(GatewayError::StoreUnavailable)
        }
    }
}

/// Makes the client's stream, when held here, the session's GET stream (the session may
/// have been created, or continued, by another replica); the session's upstreams then relay
/// their unsolicited messages.
fn attach_stream(tenant: &Tenant, session: &Arc<LiveSession>) {
    let Some(log) = tenant
        .directory
        .legacy_streams
        .get(&session.key.id, &session.key.user)
    else {
        return;
    };
    if session.streams_to(&log) {
        return;
    }
    session.use_get_stream(log);
    for upstream in tenant.upstreams.iter() {
        if let Some(conn) = session.link(upstream.info.id) {
            conn.listen();
        }
    }
}

/// Runs a request and sends everything it produces to the session's stream, the response
/// last (an error response when it fails), in a task that outlives the POST.
fn answer(
    gateway: &Arc<Gateway>,
    tenant: &Arc<Tenant>,
    session: &Arc<LiveSession>,
    principal: &Principal,
    bytes: Bytes,
    in_flight: crate::session::InFlightGuard,
) {
    let pump = gateway.pump_started();
    let (gateway, tenant, session, principal) = (
        gateway.clone(),
        tenant.clone(),
        session.clone(),
        principal.clone(),
    );
    let task = async move {
        let _pump = pump;
        let _in_flight = in_flight;
        // Parsed again (borrowed, nothing copied): the POST's parse does not outlive it.
        let Ok(Message::Request(req)) = jsonrpc::parse(&bytes) else {
            return;
        };
        match router::handle_request(&gateway, &tenant, &session, &principal, &req).await {
            Ok(Reply::Json(body)) => send(&session, body),
            Ok(Reply::Stream(mut stream)) => {
                while let Some(item) = stream.next().await {
                    match item {
                        StreamItem::Message(b, _) => send(&session, b),
                        StreamItem::Final(b) => {
                            send(&session, b);
                            break;
                        }
                        // Cancelled by the client: no response is expected.
                        StreamItem::Cancelled => break,
                    }
                }
            }
            Err(e) => send(&session, e.to_jsonrpc(Some(req.id))),
        }
        // Another replica may serve the next request: what changed must be in the store.
        gateway.persist(&session).await;
    };
    tokio::spawn(crate::telemetry::carry(task));
}

/// Sends a message to the session's stream: here, or on the replica holding it.
fn send(session: &LiveSession, message: Bytes) {
    let delivered = session.deliver_or(message, || {
        tracing::debug!("a message for a 2024-11-05 stream no replica holds was dropped");
    });
    if !delivered {
        tracing::debug!("a message for a closed 2024-11-05 stream was dropped");
    }
}

/// Sends a message to the stream of a session that does not exist (its `initialize` failed).
async fn send_before_session(gateway: &Gateway, tenant: &Tenant, key: &SessionKey, message: Bytes) {
    if tenant
        .directory
        .legacy_streams
        .deliver(&key.id, &key.user, &message)
        || !gateway.bus.is_clustered()
    {
        return;
    }
    let holder = gateway.bus.get_stream_holder(key).await.ok().flatten();
    let Some(replica) = holder.filter(|r| *r != *gateway.bus.replica) else {
        return;
    };
    let deliver = BusMessage::Deliver {
        to: key.into(),
        message: String::from_utf8_lossy(&message).into_owned(),
    };
    if let Err(e) = gateway.bus.send_to(&replica, &deliver).await {
        tracing::warn!(error = %e, "a message for another replica's 2024-11-05 stream was not sent");
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn legacy_paths_name_their_endpoint() {
        assert_eq!(split("/t/a/mcp/sse"), Some(("/t/a/mcp", Route::Stream)));
        assert_eq!(
            split("/t/a/mcp/messages"),
            Some(("/t/a/mcp", Route::Messages))
        );
        assert_eq!(split("/t/a/mcp"), None);
        assert_eq!(split("/t/a/mcp/message"), None);
    }
}
