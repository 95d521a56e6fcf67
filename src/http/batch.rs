//! JSON-RPC batches (an array of messages in one POST), which only protocol revision
//! 2025-03-26 has: every member is handled as if it had been posted alone, the requests
//! concurrently; their responses come back as one JSON array, or as one SSE stream (recorded
//! and resumable like any request's) when any of them sends messages before its response.
//! Later revisions removed batches: their sessions, and requests that open a session, are
//! answered 400 with a JSON-RPC error.

use std::sync::Arc;

use axum::body::Body;
use axum::http::{Response, StatusCode};
use bytes::Bytes;
use futures_util::StreamExt;
use futures_util::stream::FuturesUnordered;
use serde_json::value::RawValue;

use super::head::Head;
use super::{endpoint, headers, sse};
use crate::auth::Principal;
use crate::error::GatewayError;
use crate::events::{self, MessageKind, StreamKind};
use crate::gateway::Gateway;
use crate::jsonrpc::{self, Message, ParseError};
use crate::limits::sessions as session_caps;
use crate::protocol::ProtocolVersion;
use crate::router::{self, Reply};
use crate::session::{InFlightGuard, LiveSession};
use crate::tenant::Tenant;
use crate::upstream::{ForwardStream, StreamItem};

/// What one member of a batch gives back.
enum Answer {
    /// A notification or a response: nothing.
    Nothing,
    /// A request the client cancelled before anything came: no response.
    Cancelled,
    /// A member that is not a valid message: its error response.
    Invalid(Bytes),
    /// A request's complete response.
    Done(Bytes),
    /// A request whose first message came before its response; the rest follows, and the
    /// request stays in flight until it ends.
    Streaming(Bytes, MessageKind, Box<ForwardStream>, InFlightGuard),
}

/// Serves a POST whose body is a batch.
pub(super) async fn serve(
    gateway: &Gateway,
    tenant: &Arc<Tenant>,
    principal: &Principal,
    parts: &Head,
    bytes: &Bytes,
) -> Result<Response<Body>, GatewayError> {
    if endpoint::stateless_headers(parts) {
        return Err(GatewayError::BatchNotSupported);
    }
    let members = jsonrpc::split_batch(bytes).map_err(endpoint::parse_error)?;
    // Too long: refused whole, before anything in it is parsed or run.
    session_caps::check_batch(&tenant.for_limits(), members.len())?;
    let parsed: Vec<_> = members
        .iter()
        .map(|m| jsonrpc::parse(m.get().as_bytes()))
        .collect();
    if parsed
        .iter()
        .any(|m| matches!(m, Ok(Message::Request(r)) if r.method == "initialize"))
    {
        return Err(GatewayError::InvalidRequest(
            "initialize must not be part of a JSON-RPC batch".into(),
        ));
    }
    // Request rates: a token per request member, all at once, before the session is found.
    let requests = parsed
        .iter()
        .filter(|m| matches!(m, Ok(Message::Request(_))))
        .count();
    let requests = u32::try_from(requests).unwrap_or(u32::MAX);
    gateway
        .limiter
        .rates
        .check_request(&tenant.for_limits(), principal, requests)
        .await?;
    headers::protocol_version(&parts.headers)?;
    let session = endpoint::session_of(gateway, tenant, parts, &principal.user).await?;
    if session.protocol_version != ProtocolVersion::V2025_03_26 {
        return Err(GatewayError::BatchNotSupported);
    }
    let answers = futures_util::future::join_all(members.iter().zip(parsed).map(|(raw, m)| {
        let raw = bytes.slice_ref(raw.get().as_bytes());
        member(gateway, tenant, &session, principal, parts, raw, m)
    }))
    .await;
    // Another replica may serve the next request: what changed must be in the store.
    gateway.persist(&session).await;
    Ok(respond(gateway, &session, answers))
}

/// Handles one member as if it had been posted alone.
async fn member(
    gateway: &Gateway,
    tenant: &Arc<Tenant>,
    session: &Arc<LiveSession>,
    principal: &Principal,
    parts: &Head,
    raw: Bytes,
    message: Result<Message<'_>, ParseError>,
) -> Answer {
    match message {
        Err(e) => {
            let id = e
                .id()
                .and_then(|id| RawValue::from_string(id.to_owned()).ok());
            Answer::Invalid(endpoint::parse_error(e).to_jsonrpc(id.as_deref()))
        }
        Ok(Message::Notification(n)) => {
            router::handle_notification(tenant, session, &n, &raw).await;
            Answer::Nothing
        }
        Ok(Message::Response(r)) => {
            Box::pin(router::handle_response(session, &r, &raw)).await;
            Answer::Nothing
        }
        Ok(Message::Request(req)) => {
            let in_flight = match session_caps::enter_request(&tenant.for_limits(), session) {
                Ok(guard) => guard,
                Err(e) => return Answer::Done(e.to_jsonrpc(Some(req.id))),
            };
            match router::handle_request(gateway, tenant, session, principal, &req).await {
                Ok(Reply::Json(body)) => Answer::Done(body),
                Ok(Reply::Stream(mut stream)) => match stream.next().await {
                    Some(StreamItem::Final(body)) => Answer::Done(body),
                    Some(StreamItem::Message(first, kind)) => {
                        Answer::Streaming(first, kind, Box::new(stream), in_flight)
                    }
                    Some(StreamItem::Cancelled) | None => Answer::Cancelled,
                },
                Err(e) => {
                    Answer::Done(endpoint::step_up(tenant, parts, e).to_jsonrpc(Some(req.id)))
                }
            }
        }
    }
}

/// 202 when nothing is answered; one JSON array when every response is there; else an SSE
/// stream with what is there first, then the rest as it comes, closed after the last response.
fn respond(gateway: &Gateway, session: &Arc<LiveSession>, answers: Vec<Answer>) -> Response<Body> {
    let requests = answers
        .iter()
        .filter(|a| {
            matches!(
                a,
                Answer::Done(_) | Answer::Streaming(..) | Answer::Cancelled
            )
        })
        .count();
    let streaming = answers.iter().any(|a| matches!(a, Answer::Streaming(..)));
    if !streaming {
        let bodies: Vec<&Bytes> = answers
            .iter()
            .filter_map(|a| match a {
                Answer::Invalid(b) | Answer::Done(b) => Some(b),
                _ => None,
            })
            .collect();
        if bodies.is_empty() {
            // Requests all cancelled get a stream that ends without responses; notifications
            // and responses alone, 202.
            return match answers.iter().any(|a| matches!(a, Answer::Cancelled)) {
                true => endpoint::cancelled(),
                false => endpoint::accepted(),
            };
        }
        let mut array = Vec::with_capacity(2 + bodies.iter().map(|b| b.len() + 1).sum::<usize>());
        array.push(b'[');
        for (i, b) in bodies.iter().enumerate() {
            if i > 0 {
                array.push(b',');
            }
            array.extend_from_slice(b);
        }
        array.push(b']');
        let mut resp = endpoint::json(Bytes::from(array));
        if requests == 0 {
            // Only invalid members: the input was not accepted.
            *resp.status_mut() = StatusCode::BAD_REQUEST;
        }
        return resp;
    }
    let log = session.open_stream(StreamKind::Post);
    endpoint::prime(session, &log);
    let mut running = FuturesUnordered::new();
    // Each streaming member's progress is kept apart (by its number) when the log coalesces.
    let mut member = 0u32;
    let mut in_flight = Vec::new();
    for answer in answers {
        match answer {
            Answer::Nothing | Answer::Cancelled => {}
            Answer::Invalid(b) | Answer::Done(b) => {
                log.append(&b, false);
            }
            Answer::Streaming(first, kind, stream, guard) => {
                in_flight.push(guard);
                log.record(&first, kind, member);
                running.push(next_of(member, *stream));
                member += 1;
            }
        }
    }
    let pump_log = log.clone();
    let guard = gateway.pump_started();
    // Events are recorded by a task that outlives the connection (resumable); the stream ends
    // with the last request's response.
    let pump = async move {
        let _guard = guard;
        // The streaming members are in flight until the last one ends.
        let _in_flight = in_flight;
        while let Some((item, member, stream)) = running.next().await {
            match item {
                Some(StreamItem::Message(b, kind)) => {
                    pump_log.record(&b, kind, member);
                    running.push(next_of(member, stream));
                }
                Some(StreamItem::Final(b)) => {
                    pump_log.append(&b, running.is_empty());
                }
                Some(StreamItem::Cancelled) | None => {}
            }
        }
        // The last request was cancelled (a final response closes the log already).
        pump_log.finish();
    };
    tokio::spawn(crate::telemetry::carry(pump));
    sse::response(Body::from_stream(events::tail(
        log,
        0,
        endpoint::tail_end(gateway, None),
    )))
}

/// The next item of batch member `member`'s forwarded request, with the stream to read on.
async fn next_of(
    member: u32,
    mut stream: ForwardStream,
) -> (Option<StreamItem>, u32, ForwardStream) {
    let item = stream.next().await;
    (item, member, stream)
}
