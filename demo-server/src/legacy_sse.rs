//! The 2024-11-05 HTTP+SSE transport at `/sse` and `/messages`: a GET of `/sse` opens a
//! session whose event stream first names its message endpoint (`endpoint` event,
//! `/messages?sessionId=<id>`); every POST there is answered 202, and everything the server
//! sends — answers, progress, requests to the client — goes on that stream as `message`
//! events. The session ends with its stream.

use std::convert::Infallible;
use std::sync::Arc;

use axum::Router;
use axum::body::Body;
use axum::extract::{Request, State};
use axum::http::header::{CACHE_CONTROL, CONTENT_LENGTH, CONTENT_TYPE};
use axum::http::{HeaderValue, StatusCode};
use axum::response::Response;
use axum::routing::{get, post};
use bytes::{Bytes, BytesMut};
use dashmap::DashMap;
use tokio::sync::mpsc;

use super::server::{Outcome, Server, Session};
use super::tools::Transport;
use super::wire::{self, INVALID_REQUEST};

/// Largest accepted POST body.
const MAX_BODY: usize = 16 * 1024 * 1024;
/// Messages queued for a stream the client reads slowly; the POSTs wait beyond.
const STREAM_QUEUE: usize = 64;

/// The open streams: each session with the sender of its event stream.
pub(crate) struct LegacySessions {
    server: Arc<Server>,
    sessions: DashMap<Box<str>, (Arc<Session>, mpsc::Sender<Bytes>)>,
}

impl LegacySessions {
    /// Ends every stream (shutdown): their sessions' work is cancelled.
    pub(crate) fn close_all(&self) {
        for entry in self.sessions.iter() {
            entry.value().0.cancel_all();
        }
        self.sessions.clear();
    }
}

/// The two routes, and the sessions they serve (for shutdown).
pub(crate) fn router(server: Arc<Server>) -> (Router, Arc<LegacySessions>) {
    let state = Arc::new(LegacySessions {
        server,
        sessions: DashMap::new(),
    });
    let router = Router::new()
        .route("/sse", get(open))
        .route("/messages", post(message))
        .with_state(Arc::clone(&state));
    (router, state)
}

/// Removes its session when the stream's body is dropped (the client went away).
struct Forget {
    state: Arc<LegacySessions>,
    id: Box<str>,
}

impl Drop for Forget {
    fn drop(&mut self) {
        if let Some((_, (session, _))) = self.state.sessions.remove(&self.id) {
            session.cancel_all();
        }
    }
}

async fn open(State(st): State<Arc<LegacySessions>>, req: Request) -> Response {
    if !super::http::origin_allowed(req.headers()) {
        return error(StatusCode::FORBIDDEN, "Forbidden: Origin not allowed");
    }
    let id: Box<str> = format!("{:032x}", rand::random::<u128>()).into();
    let (tx, rx) = mpsc::channel::<Bytes>(STREAM_QUEUE);
    let session = st.server.session(Transport::Http);
    st.sessions.insert(id.clone(), (session, tx));
    let endpoint = Bytes::from(format!(
        "event: endpoint\ndata: /messages?sessionId={id}\n\n"
    ));
    let forget = Forget {
        state: Arc::clone(&st),
        id,
    };
    let events = futures_util::stream::unfold((rx, forget), |(mut rx, forget)| async move {
        let msg = rx.recv().await?;
        Some((Ok::<Bytes, Infallible>(message_event(&msg)), (rx, forget)))
    });
    let first = futures_util::stream::once(async move { Ok::<Bytes, Infallible>(endpoint) });
    let mut resp = Response::new(Body::from_stream(futures_util::StreamExt::chain(
        first, events,
    )));
    resp.headers_mut()
        .insert(CONTENT_TYPE, HeaderValue::from_static("text/event-stream"));
    resp.headers_mut()
        .insert(CACHE_CONTROL, HeaderValue::from_static("no-cache"));
    resp
}

/// The `sessionId` of the message endpoint's query.
fn session_id(req: &Request) -> Option<&str> {
    req.uri()
        .query()?
        .split('&')
        .find_map(|pair| pair.strip_prefix("sessionId="))
}

async fn message(State(st): State<Arc<LegacySessions>>, req: Request) -> Response {
    if !super::http::origin_allowed(req.headers()) {
        return error(StatusCode::FORBIDDEN, "Forbidden: Origin not allowed");
    }
    let Some((session, tx)) = session_id(&req)
        .and_then(|id| st.sessions.get(id))
        .map(|s| s.value().clone())
    else {
        return error(StatusCode::NOT_FOUND, "Session not found");
    };
    let declared = req
        .headers()
        .get(CONTENT_LENGTH)
        .and_then(|v| v.to_str().ok()?.parse::<u64>().ok());
    if declared.is_some_and(|n| n > MAX_BODY as u64) {
        return error(StatusCode::PAYLOAD_TOO_LARGE, "Payload Too Large");
    }
    let Ok(body) = axum::body::to_bytes(req.into_body(), MAX_BODY).await else {
        return error(
            StatusCode::BAD_REQUEST,
            "Bad Request: unreadable or oversized body",
        );
    };
    let (is_request, outcome) = match st.server.parse(&body) {
        Ok(msg) => (msg.is_request(), session.handle(msg)),
        Err(reply) => (true, Outcome::Reply(reply)),
    };
    match outcome {
        Outcome::Reply(reply) if is_request => {
            if tx.send(reply).await.is_err() {
                return error(StatusCode::NOT_FOUND, "Session not found");
            }
        }
        Outcome::Reply(_) | Outcome::Nothing => {}
        Outcome::Deferred(work) => {
            tokio::spawn(async move {
                if let Some(reply) = work.run(Some(&tx)).await {
                    let _ = tx.send(reply).await;
                }
            });
        }
        Outcome::Exit(_) => {
            return error(StatusCode::INTERNAL_SERVER_ERROR, "exit is stdio-only");
        }
    }
    let mut resp = Response::new(Body::from("Accepted"));
    *resp.status_mut() = StatusCode::ACCEPTED;
    resp
}

fn message_event(msg: &[u8]) -> Bytes {
    let mut ev = BytesMut::with_capacity(msg.len() + 24);
    ev.extend_from_slice(b"event: message\ndata: ");
    ev.extend_from_slice(msg);
    ev.extend_from_slice(b"\n\n");
    ev.freeze()
}

/// An HTTP-level rejection with a JSON-RPC error body (id null).
fn error(status: StatusCode, message: &str) -> Response {
    let mut resp = Response::new(Body::from(wire::error(None, INVALID_REQUEST, message)));
    *resp.status_mut() = status;
    resp.headers_mut()
        .insert(CONTENT_TYPE, HeaderValue::from_static("application/json"));
    resp
}
