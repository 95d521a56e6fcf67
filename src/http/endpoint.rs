//! The MCP endpoint of a tenant (Streamable HTTP): POST carries client messages, GET opens the
//! server-to-client stream, DELETE ends a session. Each handler reads top to bottom in the
//! order the transport's rules apply.

use std::convert::Infallible;
use std::sync::Arc;
use std::time::Duration;

use axum::body::Body;
use axum::http::request::Parts;
use axum::http::{HeaderValue, Method, Response, StatusCode, header};
use bytes::Bytes;
use futures_util::stream;
use tokio::sync::watch;

use super::{guard, headers, sse};
use crate::auth::Principal;
use crate::error::GatewayError;
use crate::gateway::Gateway;
use crate::jsonrpc::{self, Message, ParseError};
use crate::protocol::header as mcp;
use crate::router::{self, Reply};
use crate::session::LiveSession;
use crate::tenant::Tenant;
use crate::upstream::{ForwardStream, StreamItem};

/// How often an idle GET stream gets a keep-alive comment.
const KEEP_ALIVE_EVERY: Duration = Duration::from_secs(15);

/// Entry point for a request whose path is a tenant's endpoint, from an admitted caller.
pub async fn handle(
    gateway: Arc<Gateway>,
    tenant: Arc<Tenant>,
    principal: Principal,
    parts: Parts,
    body: Body,
) -> Response<Body> {
    let result = match parts.method {
        Method::POST => post(&gateway, &tenant, &principal, &parts, body).await,
        Method::GET => get(&gateway, &tenant, &principal, &parts).await,
        Method::DELETE => delete(&gateway, &tenant, &principal, &parts).await,
        _ => Err(GatewayError::MethodNotAllowed),
    };
    result.unwrap_or_else(|e| e.into_response(None))
}

async fn post(
    gateway: &Gateway,
    tenant: &Arc<Tenant>,
    principal: &Principal,
    parts: &Parts,
    body: Body,
) -> Result<Response<Body>, GatewayError> {
    headers::check_content_type(&parts.headers)?;
    headers::check_post_accept(&parts.headers)?;
    let limit = gateway.limits.max_body_bytes;
    let bytes = axum::body::to_bytes(body, limit)
        .await
        .map_err(|_| GatewayError::BodyTooLarge { limit })?;
    let message = jsonrpc::parse(&bytes).map_err(parse_error)?;
    let user = &*principal.user;

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
        return Ok(match router::initialize(gateway, tenant, user, req).await {
            Ok((session, body)) => {
                let mut resp = json(body);
                if let Ok(v) = HeaderValue::from_str(session.key.id.as_str()) {
                    resp.headers_mut().insert(mcp::SESSION_ID, v);
                }
                resp
            }
            Err(e) => e.into_response(Some(req.id)),
        });
    }

    let request_id = match &message {
        Message::Request(r) => Some(r.id),
        _ => None,
    };
    if let Err(e) = headers::protocol_version(&parts.headers) {
        return Ok(e.into_response(request_id));
    }
    let session = session_of(gateway, tenant, parts, user).await?;
    let response = match message {
        Message::Request(req) => {
            match router::handle_request(tenant, &session, principal, &req).await {
                Ok(Reply::Json(body)) => json(body),
                Ok(Reply::Stream(stream)) => respond_stream(stream, req.id).await,
                Err(GatewayError::ToolNeedsScopes { missing }) => {
                    // Step-up authorization: the client may obtain a token with these scopes.
                    let host = guard::request_host(parts)
                        .unwrap_or_default()
                        .to_ascii_lowercase();
                    let resource = guard::resource_identity(tenant, parts, &host);
                    GatewayError::InsufficientScope {
                        www_authenticate: resource.challenge_scope(&missing),
                        missing,
                    }
                    .into_response(Some(req.id))
                }
                Err(e) => e.into_response(Some(req.id)),
            }
        }
        Message::Notification(n) => {
            router::handle_notification(tenant, &session, &n, &bytes).await;
            accepted()
        }
        Message::Response(r) => {
            router::handle_response(&session, &r, &bytes).await;
            accepted()
        }
    };
    // Another replica may serve the next request: what changed must be in the store.
    gateway.persist(&session).await;
    Ok(response)
}

fn parse_error(e: ParseError) -> GatewayError {
    match e {
        ParseError::NotJson(detail) => GatewayError::Parse(detail),
        ParseError::Batch => GatewayError::BatchNotSupported,
        ParseError::InvalidRequest { reason, .. } => GatewayError::InvalidRequest(reason.into()),
    }
}

/// The session named by `Mcp-Session-Id`: 400 without the header, 404 when unknown.
async fn session_of(
    gateway: &Gateway,
    tenant: &Tenant,
    parts: &Parts,
    user: &str,
) -> Result<Arc<LiveSession>, GatewayError> {
    let id = headers::session_id(&parts.headers)?.ok_or(GatewayError::SessionRequired)?;
    gateway.find_session(tenant, user, id).await
}

/// Answers a forwarded request: as JSON when the response comes first, else as an SSE stream
/// that carries everything related to the request and ends with its response.
async fn respond_stream(
    mut stream: ForwardStream,
    id: &serde_json::value::RawValue,
) -> Response<Body> {
    match stream.next().await {
        Some(StreamItem::Final(body)) => json(body),
        Some(StreamItem::Cancelled) | None => GatewayError::Cancelled.into_response(Some(id)),
        Some(StreamItem::Message(first)) => {
            let events =
                stream::unfold((Some(first), Some(stream)), |(first, stream)| async move {
                    if let Some(first) = first {
                        return Some((Ok::<_, Infallible>(sse::event(&first)), (None, stream)));
                    }
                    let mut stream = stream?;
                    match stream.next().await? {
                        StreamItem::Message(b) => Some((Ok(sse::event(&b)), (None, Some(stream)))),
                        StreamItem::Final(b) => Some((Ok(sse::event(&b)), (None, None))),
                        StreamItem::Cancelled => None,
                    }
                });
            sse::response(Body::from_stream(events))
        }
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
    let rx = session.open_get_stream();
    // Messages produced on other replicas are sent to the replica that holds the stream.
    if let Err(e) = gateway.bus.claim_get_stream(&session.key).await {
        tracing::warn!(error = %e, "GET stream not announced to the other replicas");
    }
    // The client now listens for unsolicited messages: so do the session's upstreams.
    for upstream in tenant.upstreams.iter() {
        if let Some(conn) = session.link(upstream.info.index) {
            conn.listen();
        }
    }
    let claim = GetClaim {
        bus: gateway.bus.clone(),
        session: session.clone(),
    };
    Ok(sse::response(Body::from_stream(get_events(
        rx,
        gateway.shutdown_signal(),
        claim,
    ))))
}

/// This replica's claim on a session's GET stream: refreshed with the keep-alives, released
/// when the stream ends (if still this replica's).
struct GetClaim {
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

/// The GET stream: messages as they come, keep-alives when idle, ends at shutdown or when a
/// newer GET stream replaces it.
fn get_events(
    rx: tokio::sync::mpsc::UnboundedReceiver<Bytes>,
    shutdown: watch::Receiver<bool>,
    claim: GetClaim,
) -> impl futures_util::Stream<Item = Result<Bytes, Infallible>> {
    stream::unfold(
        (rx, shutdown, claim),
        |(mut rx, mut shutdown, claim)| async move {
            if *shutdown.borrow() {
                return None;
            }
            tokio::select! {
                msg = rx.recv() => msg.map(|m| (Ok(sse::event(&m)), (rx, shutdown, claim))),
                _ = tokio::time::sleep(KEEP_ALIVE_EVERY) => {
                    claim.refresh();
                    Some((Ok(Bytes::from_static(sse::KEEP_ALIVE)), (rx, shutdown, claim)))
                }
                _ = shutdown.changed() => None,
            }
        },
    )
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

fn json(body: Bytes) -> Response<Body> {
    let mut resp = Response::new(Body::from(body));
    resp.headers_mut().insert(
        header::CONTENT_TYPE,
        HeaderValue::from_static("application/json"),
    );
    resp
}

fn accepted() -> Response<Body> {
    let mut resp = Response::new(Body::empty());
    *resp.status_mut() = StatusCode::ACCEPTED;
    resp
}
