//! Retries of stateless (2026-07-28) requests that are parked on another replica (bridged
//! upstream questions): the replica that receives the retry sends it over the bus to the
//! replica holding the request, which continues it as if the retry had reached it and sends
//! back, event by event, what the client is to get; the receiving replica answers with that
//! (JSON, or an SSE stream while messages come first). The holder confirms at once and beats
//! while the request runs, so a holder that is gone is noticed in seconds; a client that goes
//! away cancels the request on the holder.

use std::sync::Arc;
use std::time::Duration;

use axum::body::Body;
use axum::http::{Response, StatusCode};
use bytes::Bytes;
use serde_json::value::RawValue;
use tokio::sync::mpsc;

use super::stateless::{Exchange, Step};
use super::{endpoint::json, sse};
use crate::cluster::{BusMessage, Target};
use crate::error::GatewayError;
use crate::gateway::Gateway;
use crate::gateway::parked::{RelayReceiver, Resumed};
use crate::jsonrpc::RawObject;
use crate::protocol::modern::RequestMeta;
use crate::router::mrtr;
use crate::tenant::Tenant;

/// How long the receiving replica waits for the holder to confirm it has the request.
const CONFIRM_WITHIN: Duration = Duration::from_secs(5);
/// How often the holder says the request is still going on.
const BEAT_EVERY: Duration = Duration::from_secs(10);
/// Silence after which the holder is taken for gone.
const SILENT_FOR: Duration = Duration::from_secs(35);

fn lost() -> GatewayError {
    GatewayError::InvalidParams(
        "Invalid requestState: the replica holding the request it continues did not answer; send the request again without requestState".into(),
    )
}

/// On the replica that received the retry: has `replica` continue the request parked there
/// under `handle`, and answers the client with what it sends back.
pub(super) async fn relay(
    gateway: &Gateway,
    exchange: Exchange,
    replica: &str,
    handle: String,
    params: Option<&RawValue>,
) -> Result<Response<Body>, GatewayError> {
    let (wait, mut rx) = exchange.interactions.wait_remote();
    let to = Target::from(&exchange.session.key);
    let resume = BusMessage::Resume {
        to: to.clone(),
        handle,
        id: exchange.id.get().to_owned(),
        method: exchange.method.clone(),
        name: exchange.name.clone(),
        params: params.map_or_else(|| "{}".to_owned(), |p| p.get().to_owned()),
        reply_to: gateway.bus.replica.to_string(),
        key: wait.key.clone(),
    };
    if let Err(e) = gateway.bus.send_to(replica, &resume).await {
        tracing::warn!(error = %e, "a retry could not be sent to the replica holding its request");
        return Err(GatewayError::StoreUnavailable);
    }
    // Until the request is answered, the client leaving (this future or the stream dropped)
    // cancels it on the holder.
    let mut pending = Abandon {
        bus: gateway.bus.clone(),
        holder: replica.to_owned(),
        to,
        key: wait.key.clone(),
        armed: true,
    };
    match tokio::time::timeout(CONFIRM_WITHIN, rx.recv()).await {
        Ok(Some(event)) if event.done => {
            pending.disarm();
            return Ok(reply(event));
        }
        Ok(Some(_)) => {}
        _ => {
            tracing::warn!(
                replica,
                "the replica holding a parked request did not confirm the retry"
            );
            pending.disarm();
            return Err(lost());
        }
    }
    let first = next(&mut rx).await.ok_or_else(lost)?;
    if first.done {
        pending.disarm();
        return Ok(reply(first));
    }
    let (tx, body) = mpsc::channel::<Bytes>(16);
    tokio::spawn(async move {
        let _wait = wait;
        let mut event = Some(first);
        while let Some(e) = event.take() {
            if tx.send(sse::event(&e.message)).await.is_err() {
                break;
            }
            if e.done {
                pending.disarm();
                return;
            }
            event = tokio::select! {
                _ = tx.closed() => None,
                e = next(&mut rx) => e,
            };
        }
        // The client went away (or the holder fell silent): `pending` tells the holder.
        drop(pending);
    });
    Ok(sse::response(sse::channel_body(body)))
}

/// A retry continued on another replica and not answered yet: dropped armed (its client
/// went away), it has the holder cancel the request.
struct Abandon {
    bus: Arc<crate::cluster::Bus>,
    holder: String,
    to: Target,
    key: String,
    armed: bool,
}

impl Abandon {
    /// The request was answered: nothing to cancel.
    fn disarm(&mut self) {
        self.armed = false;
    }
}

impl Drop for Abandon {
    fn drop(&mut self) {
        if !self.armed {
            return;
        }
        let closed = BusMessage::ResumeClosed {
            to: self.to.clone(),
            key: std::mem::take(&mut self.key),
        };
        let (bus, holder) = (self.bus.clone(), std::mem::take(&mut self.holder));
        if let Ok(runtime) = tokio::runtime::Handle::try_current() {
            runtime.spawn(async move {
                let _ = bus.send_to(&holder, &closed).await;
            });
        }
    }
}

/// The next event that carries a message (beats skipped); `None` once the holder is silent.
async fn next(rx: &mut RelayReceiver) -> Option<Resumed> {
    loop {
        match tokio::time::timeout(SILENT_FOR, rx.recv()).await {
            Ok(Some(e)) if e.message.is_empty() && !e.done => {}
            Ok(Some(e)) => return Some(e),
            _ => return None,
        }
    }
}

fn reply(event: Resumed) -> Response<Body> {
    let mut resp = json(event.message);
    *resp.status_mut() = StatusCode::from_u16(event.status).unwrap_or(StatusCode::OK);
    resp
}

/// On the replica holding the request: continues it for a retry another replica received
/// (`BusMessage::Resume`), sending that replica what its client is to get.
pub async fn continue_here(gateway: Arc<Gateway>, tenant: Arc<Tenant>, message: BusMessage) {
    let BusMessage::Resume {
        to,
        handle,
        id,
        method,
        name,
        params,
        reply_to,
        key,
    } = message
    else {
        return;
    };
    let send = |message: Bytes, done: bool, status: StatusCode| {
        let resumed = BusMessage::Resumed {
            to: to.clone(),
            key: key.clone(),
            message: String::from_utf8_lossy(&message).into_owned(),
            done,
            status: status.as_u16(),
        };
        let (bus, reply_to) = (gateway.bus.clone(), reply_to.clone());
        async move {
            if let Err(e) = bus.send_to(&reply_to, &resumed).await {
                tracing::warn!(error = %e, "an event of a continued request did not reach the replica answering it");
            }
        }
    };
    let (Ok(id), Ok(params)) = (RawValue::from_string(id), RawValue::from_string(params)) else {
        return;
    };
    let Ok(meta) = RequestMeta::read(Some(&params)) else {
        // The receiving replica checked it: not expected.
        let e = GatewayError::Internal;
        send(e.to_jsonrpc(Some(&id)), true, e.status()).await;
        return;
    };
    let Some(parked) = gateway.interactions.take(&handle) else {
        let e = GatewayError::InvalidParams(
            "Invalid requestState: the request it continues has ended; send the request again without requestState".into(),
        );
        send(e.to_jsonrpc(Some(&id)), true, e.status()).await;
        return;
    };
    let interactions = gateway.interactions.clone();
    let mut closed = interactions.continuing(&key);
    send(Bytes::new(), false, StatusCode::OK).await;
    let exchange = Exchange {
        tenant,
        interactions: interactions.clone(),
        session: parked.session.clone(),
        user: to.user.as_str().into(),
        id,
        method,
        name,
        meta,
        resumed: true,
    };
    let responses = RawObject::parse(&params)
        .ok()
        .and_then(|p| p.get("inputResponses").map(RawValue::to_owned));
    let left = mrtr::answer(&parked.session, parked.questions, responses.as_deref()).await;
    if !left.is_empty() {
        // Questions left unanswered: asked again (and parked here again).
        send(
            exchange.ask_again(parked.stream, left),
            true,
            StatusCode::OK,
        )
        .await;
        interactions.stop_continuing(&key);
        return;
    }
    let mut stream = parked.stream;
    let mut beat = tokio::time::interval(BEAT_EVERY);
    beat.tick().await;
    loop {
        // One step future per message: a beat must not drop (and so cancel) the request.
        let step = exchange.step(stream);
        tokio::pin!(step);
        let step = loop {
            tokio::select! {
                _ = &mut closed => {
                    tracing::debug!("the client of a continued request went away; cancelling it");
                    return;
                }
                _ = beat.tick() => send(Bytes::new(), false, StatusCode::OK).await,
                step = &mut step => break step,
            }
        };
        match step {
            Step::Notify(message, next) => {
                send(message, false, StatusCode::OK).await;
                stream = *next;
            }
            Step::Done(body, status) => {
                send(body, true, status).await;
                break;
            }
        }
    }
    interactions.stop_continuing(&key);
}
