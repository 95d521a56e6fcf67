//! The retry dance for session-based clients in front of stateless (2026-07-28) upstreams:
//! an upstream's `input_required` result becomes server-to-client requests on the client's
//! response stream (elicitation, sampling, roots, as the earlier revisions send them), and the
//! client's answers go back to the upstream in a retry of the original request, with the
//! upstream's `requestState`, until it completes.

use std::collections::HashMap;
use std::sync::Arc;

use bytes::Bytes;
use serde::Deserialize;
use serde_json::value::RawValue;
use tokio::sync::mpsc;

use super::connection::{Connection, InternalReply};
use super::pending::ForwardSlot;
use super::{ClientSession, ServerRequestRoute, StreamEvent};
use crate::error::GatewayError;
use crate::jsonrpc::{self, RawObject};

/// Rounds the gateway goes through for one request before it gives up on the upstream.
const MAX_ROUNDS: u8 = 16;

/// The request as the client sent it, kept for the retries.
pub struct Original {
    pub method: Box<str>,
    pub params: Option<Box<RawValue>>,
    pub rounds: u8,
    /// The upstream id of the first attempt (what the client's cancellation names).
    pub first: Option<u64>,
}

/// An answer of the client to one of the questions, by the question's key.
pub type Answer = (Box<str>, InternalReply);

#[derive(Deserialize)]
struct InputRequired<'a> {
    #[serde(rename = "resultType", borrow)]
    result_type: Option<std::borrow::Cow<'a, str>>,
    #[serde(default, rename = "inputRequests", borrow)]
    input_requests: Option<HashMap<String, &'a RawValue>>,
    #[serde(default, rename = "requestState")]
    request_state: Option<String>,
}

#[derive(Deserialize)]
struct InputRequest<'a> {
    #[serde(borrow)]
    method: std::borrow::Cow<'a, str>,
    #[serde(default, borrow)]
    params: Option<&'a RawValue>,
}

/// Whether a result is an `input_required` one (checked cheaply before parsing).
pub fn is_input_required(result: &RawValue) -> bool {
    crate::jsonrpc::may_hold(result.get(), "input_required")
        && serde_json::from_str::<InputRequired<'_>>(result.get())
            .is_ok_and(|r| r.result_type.as_deref() == Some("input_required"))
}

/// Runs the dance for `slot`, whose attempt `id` came back with `result`.
pub(super) fn spawn(conn: Arc<Connection>, id: u64, slot: ForwardSlot, result: Box<RawValue>) {
    tokio::spawn(async move {
        let sink = slot.sink.clone();
        if let Err(e) = round(&conn, id, slot, &result).await {
            let _ = sink.send(StreamEvent::Failed(e));
        }
    });
}

async fn round(
    conn: &Arc<Connection>,
    id: u64,
    mut slot: ForwardSlot,
    result: &RawValue,
) -> Result<(), GatewayError> {
    let upstream = conn.upstream_name().to_owned();
    let protocol = |reason: String| GatewayError::UpstreamProtocol {
        upstream: upstream.clone(),
        reason,
    };
    let session = slot.session.upgrade().ok_or(GatewayError::Cancelled)?;
    let mut original = slot.retry.take().ok_or(GatewayError::Internal)?;
    let first = *original.first.get_or_insert(id);
    original.rounds += 1;
    if original.rounds > MAX_ROUNDS {
        return Err(protocol(format!(
            "it asked for input {MAX_ROUNDS} times in a row without completing"
        )));
    }
    let ir: InputRequired<'_> = serde_json::from_str(result.get())
        .map_err(|e| protocol(format!("invalid input_required result: {e}")))?;
    let requests = ir.input_requests.unwrap_or_default();
    if requests.is_empty() && ir.request_state.is_none() {
        return Err(protocol(
            "an input_required result with neither inputRequests nor requestState".into(),
        ));
    }

    // Ask the client, on the request's own stream.
    let (tx, mut rx) = mpsc::unbounded_channel::<Answer>();
    let mut asked = Vec::with_capacity(requests.len());
    for (key, raw) in &requests {
        let req: InputRequest<'_> = serde_json::from_str(raw.get())
            .map_err(|e| protocol(format!("invalid input request {key:?}: {e}")))?;
        let registered = session.register_server_request(ServerRequestRoute {
            connection: Arc::downgrade(conn),
            upstream_id: jsonrpc::raw_string(key),
            progress: None,
            answer_to: Some(tx.clone()),
        });
        let client_id = match registered {
            Ok(id) => id,
            Err(refusal) => {
                forget(&*session, &asked);
                return Err(protocol(format!(
                    "its input requests could not be asked: {refusal}"
                )));
            }
        };
        let out = jsonrpc::request(&client_id, &req.method, req.params);
        asked.push(client_id.get().to_owned());
        if slot
            .sink
            .send(StreamEvent::Request(Bytes::from(out)))
            .is_err()
        {
            forget(&*session, &asked);
            return Err(GatewayError::Cancelled);
        }
    }
    drop(tx);
    let mut responses = RawObject::default();
    let deadline = tokio::time::Instant::now() + conn.info.max_request_timeout;
    let mut left = requests.len();
    while left > 0 {
        match tokio::time::timeout_at(deadline, rx.recv()).await {
            Ok(Some((key, reply))) => {
                left -= 1;
                // A refusal leaves the question unanswered: the upstream may ask again.
                if let InternalReply::Result(r) = reply {
                    responses.set_owned(key.into(), r);
                }
            }
            Ok(None) => break,
            Err(_) => {
                forget(&*session, &asked);
                return Err(GatewayError::UpstreamTimeout {
                    upstream,
                    after: conn.info.max_request_timeout,
                });
            }
        }
    }

    // Retry with the answers and the upstream's state.
    let mut params = match &original.params {
        Some(p) => RawObject::parse(p).map_err(|_| GatewayError::Internal)?,
        None => RawObject::default(),
    };
    params.set("inputResponses", responses.to_raw());
    match &ir.request_state {
        Some(state) => params.set("requestState", jsonrpc::raw_string(state)),
        None => drop(params.remove("requestState")),
    }
    let params = params.to_raw();
    let method = original.method.clone();
    slot.retry = Some(original);
    let next = conn
        .send_forward(slot, &method, Some(&params), Some(&*session), None)
        .await?;
    conn.alias(first, next);
    Ok(())
}

/// Drops the routes of questions that will not be answered any more.
fn forget(session: &dyn ClientSession, asked: &[String]) {
    for id in asked {
        session.take_server_request(id);
    }
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used)]
    use super::*;

    #[test]
    fn input_required_results_are_recognized() {
        let yes = RawValue::from_string(
            r#"{"resultType":"input_required","inputRequests":{"a":{"method":"roots/list"}}}"#
                .into(),
        )
        .unwrap();
        assert!(is_input_required(&yes));
        let text = RawValue::from_string(
            r#"{"content":[{"type":"text","text":"input_required"}],"resultType":"complete"}"#
                .into(),
        )
        .unwrap();
        assert!(!is_input_required(&text));
    }
}
