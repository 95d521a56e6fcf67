//! The Streamable HTTP transport at `/mcp`: header checks, session table keyed by
//! `Mcp-Session-Id`, JSON responses, and SSE only for tool calls that stream (progress, log
//! messages, requests to the client, whose answers arrive as separate POSTs). The same
//! listener serves the 2024-11-05 HTTP+SSE transport (`legacy_sse.rs`).

use std::convert::Infallible;
use std::future::Future;
use std::io;
use std::sync::Arc;

use axum::Router;
use axum::body::Body;
use axum::extract::{Request, State};
use axum::http::header::{ACCEPT, ALLOW, CACHE_CONTROL, CONTENT_LENGTH, CONTENT_TYPE, ORIGIN};
use axum::http::{HeaderMap, HeaderName, HeaderValue, Method, StatusCode};
use axum::response::Response;
use axum::routing::any;
use bytes::{Bytes, BytesMut};
use dashmap::DashMap;
use tokio::sync::mpsc;

use super::modern;
use super::server::{Outcome, SUPPORTED_VERSIONS, Server, Session};
use super::tools::Transport;
use super::wire::{self, INVALID_REQUEST, Message};

/// Largest accepted POST body.
const MAX_BODY: usize = 16 * 1024 * 1024;

const SESSION_HEADER: HeaderName = HeaderName::from_static("mcp-session-id");
const VERSION_HEADER: HeaderName = HeaderName::from_static("mcp-protocol-version");
const JSON: HeaderValue = HeaderValue::from_static("application/json");
const EVENT_STREAM: HeaderValue = HeaderValue::from_static("text/event-stream");

struct HttpState {
    server: Arc<Server>,
    sessions: DashMap<Box<str>, Arc<Session>>,
}

pub(crate) async fn serve(
    listener: tokio::net::TcpListener,
    server: Arc<Server>,
    shutdown: impl Future<Output = ()> + Send + 'static,
) -> io::Result<()> {
    let state = Arc::new(HttpState {
        server,
        sessions: DashMap::new(),
    });
    let (legacy, legacy_sessions) = super::legacy_sse::router(Arc::clone(&state.server));
    let app = Router::new()
        .route("/mcp", any(handle))
        .with_state(Arc::clone(&state))
        .merge(legacy);
    let stop = async move {
        shutdown.await;
        legacy_sessions.close_all();
        // Let in-flight sleeps end now instead of holding graceful shutdown open.
        for entry in state.sessions.iter() {
            entry.value().cancel_all();
        }
        state.sessions.clear();
    };
    // Small writes (SSE events) go out at once: without TCP_NODELAY, Nagle's algorithm and the
    // peer's delayed ACK hold a streamed answer back by ~40 ms.
    let listener = axum::serve::ListenerExt::tap_io(listener, |tcp| {
        if let Err(e) = tcp.set_nodelay(true) {
            tracing::debug!(error = %e, "TCP_NODELAY not set");
        }
    });
    axum::serve(listener, app)
        .with_graceful_shutdown(stop)
        .await
}

async fn handle(State(st): State<Arc<HttpState>>, req: Request) -> Response {
    let (parts, body) = req.into_parts();
    if !origin_allowed(&parts.headers) {
        return status_error(StatusCode::FORBIDDEN, "Forbidden: Origin not allowed");
    }
    match parts.method {
        Method::POST => post(&st, &parts.headers, body).await,
        Method::DELETE => delete(&st, &parts.headers),
        _ => {
            let mut resp = empty(StatusCode::METHOD_NOT_ALLOWED);
            resp.headers_mut()
                .insert(ALLOW, HeaderValue::from_static("POST, DELETE"));
            resp
        }
    }
}

async fn post(st: &HttpState, headers: &HeaderMap, body: Body) -> Response {
    st.server.trace_headers(headers);
    if !accepts_json_and_sse(headers) {
        let msg = "Not Acceptable: Accept must list application/json and text/event-stream";
        return status_error(StatusCode::NOT_ACCEPTABLE, msg);
    }
    if !content_type_is_json(headers) {
        let msg = "Unsupported Media Type: Content-Type must be application/json";
        return status_error(StatusCode::UNSUPPORTED_MEDIA_TYPE, msg);
    }
    let declared = headers
        .get(CONTENT_LENGTH)
        .and_then(|v| v.to_str().ok()?.parse::<u64>().ok());
    if declared.is_some_and(|n| n > MAX_BODY as u64) {
        return status_error(StatusCode::PAYLOAD_TOO_LARGE, "Payload Too Large");
    }
    let body = match axum::body::to_bytes(body, MAX_BODY).await {
        Ok(b) => b,
        Err(_) => {
            return status_error(
                StatusCode::BAD_REQUEST,
                "Bad Request: unreadable or oversized body",
            );
        }
    };
    let msg = match st.server.parse(&body) {
        Ok(msg) => msg,
        Err(reply) => return json(StatusCode::BAD_REQUEST, reply),
    };
    if let Message::Request { method, .. } = &msg
        && method == "initialize"
    {
        return initialize(st, msg);
    }
    // The stateless revision: every POST stands alone, served by a session of its own.
    let stateless = st.server.stateless
        && headers
            .get(VERSION_HEADER)
            .is_some_and(|v| v.as_bytes() == modern::VERSION.as_bytes());
    if stateless
        && let Some(reply) = modern::param_header_mismatch(&st.server.mirrored, &msg, headers)
    {
        return json(StatusCode::BAD_REQUEST, reply);
    }
    let session = if stateless {
        st.server.session(Transport::Http)
    } else {
        match session_of(st, headers) {
            Ok(s) => s,
            Err((status, msg)) => return status_error(status, msg),
        }
    };
    if let Some(v) = headers.get(VERSION_HEADER)
        && !stateless
        && !SUPPORTED_VERSIONS
            .iter()
            .any(|s| s.as_bytes() == v.as_bytes())
    {
        return status_error(
            StatusCode::BAD_REQUEST,
            "Bad Request: unsupported MCP-Protocol-Version",
        );
    }
    let is_request = msg.is_request();
    match session.handle(msg) {
        Outcome::Reply(reply) if is_request && stateless => json(modern_status(&reply), reply),
        Outcome::Reply(reply) if is_request => json(StatusCode::OK, reply),
        Outcome::Reply(_) | Outcome::Nothing => empty(StatusCode::ACCEPTED),
        Outcome::Deferred(work) if work.streams() => {
            let (tx, rx) = mpsc::channel::<Bytes>(16);
            let server = st.server.clone();
            tokio::spawn(async move {
                if !stateless {
                    if let Some(reply) = work.run(Some(&tx)).await {
                        let _ = tx.send(reply).await;
                    }
                    return;
                }
                // The stateless revision: the client closing the stream cancels the request.
                tokio::select! {
                    reply = work.run(Some(&tx)) => {
                        if let Some(reply) = reply {
                            let _ = tx.send(reply).await;
                        }
                    }
                    () = tx.closed() => {
                        server.trace_note(serde_json::json!({"cancelled_by_disconnect": true}));
                    }
                }
            });
            sse(Body::from_stream(futures_util::stream::unfold(
                rx,
                |mut rx| async move {
                    let msg = rx.recv().await?;
                    Some((Ok::<Bytes, Infallible>(sse_event(&msg)), rx))
                },
            )))
        }
        Outcome::Deferred(work) => match work.run(None).await {
            Some(reply) => json(StatusCode::OK, reply),
            // Cancelled: the request gets no response, so end an (empty) event stream.
            None => sse(Body::empty()),
        },
        Outcome::Exit(_) => status_error(StatusCode::INTERNAL_SERVER_ERROR, "exit is stdio-only"),
    }
}

/// `initialize` always starts a fresh session; the id is issued only if initialization worked.
fn initialize(st: &HttpState, msg: Message<'_>) -> Response {
    let session = st.server.session(Transport::Http);
    let Outcome::Reply(reply) = session.handle(msg) else {
        return status_error(
            StatusCode::INTERNAL_SERVER_ERROR,
            "initialize produced no reply",
        );
    };
    let mut resp = json(StatusCode::OK, reply);
    if session.protocol_version().is_some() {
        let id = format!("{:032x}", rand::random::<u128>());
        if let Ok(value) = HeaderValue::from_str(&id) {
            resp.headers_mut().insert(SESSION_HEADER, value);
        }
        tracing::debug!(session = &id[..8], "demo server: session started");
        st.sessions.insert(id.into_boxed_str(), session);
    }
    resp
}

fn session_of(
    st: &HttpState,
    headers: &HeaderMap,
) -> Result<Arc<Session>, (StatusCode, &'static str)> {
    let Some(id) = headers.get(SESSION_HEADER).and_then(|v| v.to_str().ok()) else {
        return Err((
            StatusCode::BAD_REQUEST,
            "Bad Request: Mcp-Session-Id header is required",
        ));
    };
    match st.sessions.get(id) {
        Some(s) => Ok(Arc::clone(s.value())),
        None => Err((StatusCode::NOT_FOUND, "Session not found")),
    }
}

fn delete(st: &HttpState, headers: &HeaderMap) -> Response {
    let Some(id) = headers.get(SESSION_HEADER).and_then(|v| v.to_str().ok()) else {
        return status_error(
            StatusCode::BAD_REQUEST,
            "Bad Request: Mcp-Session-Id header is required",
        );
    };
    match st.sessions.remove(id) {
        Some((_, session)) => {
            session.cancel_all();
            tracing::debug!(
                session = id.get(..8).unwrap_or(id),
                "demo server: session ended"
            );
            empty(StatusCode::OK)
        }
        None => status_error(StatusCode::NOT_FOUND, "Session not found"),
    }
}

/// DNS-rebinding guard: a browser Origin, when present, must be a loopback one.
pub(crate) fn origin_allowed(headers: &HeaderMap) -> bool {
    let Some(origin) = headers.get(ORIGIN) else {
        return true;
    };
    let Some(rest) = origin
        .to_str()
        .ok()
        .and_then(|o| o.split_once("://"))
        .map(|(_, r)| r)
    else {
        return false;
    };
    let host = if let Some(v6) = rest.strip_prefix('[') {
        v6.split(']').next().unwrap_or("")
    } else {
        rest.split(':').next().unwrap_or("")
    };
    host.eq_ignore_ascii_case("localhost") || host == "127.0.0.1" || host == "::1"
}

fn media_types(headers: &HeaderMap, name: HeaderName) -> impl Iterator<Item = &str> {
    headers
        .get_all(name)
        .into_iter()
        .filter_map(|v| v.to_str().ok())
        .flat_map(|v| v.split(','))
        .map(|item| item.split(';').next().unwrap_or("").trim())
}

fn accepts_json_and_sse(headers: &HeaderMap) -> bool {
    let (mut json, mut sse) = (false, false);
    for t in media_types(headers, ACCEPT) {
        json |= t.eq_ignore_ascii_case("application/json");
        sse |= t.eq_ignore_ascii_case("text/event-stream");
    }
    json && sse
}

fn content_type_is_json(headers: &HeaderMap) -> bool {
    media_types(headers, CONTENT_TYPE)
        .next()
        .is_some_and(|t| t.eq_ignore_ascii_case("application/json"))
}

fn sse_event(msg: &[u8]) -> Bytes {
    let mut ev = BytesMut::with_capacity(msg.len() + 8);
    ev.extend_from_slice(b"data: ");
    ev.extend_from_slice(msg);
    ev.extend_from_slice(b"\n\n");
    ev.freeze()
}

fn empty(status: StatusCode) -> Response {
    let mut resp = Response::new(Body::empty());
    *resp.status_mut() = status;
    resp
}

/// The HTTP status of a stateless (2026-07-28) answer: method not found is 404, a header
/// mismatch, missing capability or unsupported version 400, anything else 200.
fn modern_status(reply: &[u8]) -> StatusCode {
    #[derive(serde::Deserialize)]
    struct Reply {
        error: Option<Code>,
    }
    #[derive(serde::Deserialize)]
    struct Code {
        code: i64,
    }
    match serde_json::from_slice::<Reply>(reply)
        .ok()
        .and_then(|r| r.error)
    {
        Some(Code { code: -32601 }) => StatusCode::NOT_FOUND,
        Some(Code {
            code: -32022..=-32020,
        }) => StatusCode::BAD_REQUEST,
        _ => StatusCode::OK,
    }
}

fn json(status: StatusCode, body: Bytes) -> Response {
    let mut resp = Response::new(Body::from(body));
    *resp.status_mut() = status;
    resp.headers_mut().insert(CONTENT_TYPE, JSON);
    resp
}

fn sse(body: Body) -> Response {
    let mut resp = Response::new(body);
    resp.headers_mut().insert(CONTENT_TYPE, EVENT_STREAM);
    resp.headers_mut()
        .insert(CACHE_CONTROL, HeaderValue::from_static("no-cache"));
    resp
}

/// An HTTP-level rejection with a JSON-RPC error body (id null).
fn status_error(status: StatusCode, message: &str) -> Response {
    json(status, wire::error(None, INVALID_REQUEST, message))
}
