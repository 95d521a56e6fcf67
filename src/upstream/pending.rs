//! The requests of a connection awaiting an answer, and the ids that relate them: every
//! request on the link gets an upstream id of the gateway's (an integer per connection), the
//! table maps it to where the answer goes (a client's request stream, or the gateway's own
//! oneshot), a retried request's first id to its current one, and a parked request is marked
//! waiting. Cancellation and failure take entries out.

use std::sync::Arc;
use std::sync::Weak;
use std::sync::atomic::Ordering;
use std::time::Duration;

use serde_json::value::RawValue;
use tokio::sync::oneshot;
use tracing::Instrument;

use super::StreamEvent;
use super::connection::{Connection, InternalReply};
use super::link::Link;
use super::meta::rewrite_meta;
use super::owner::ClientSession;
use crate::error::GatewayError;
use crate::jsonrpc::{self, SharedId};
use crate::protocol::param_headers::ParamHeaders;
use crate::protocol::rewrite::ResultShape;
use crate::telemetry::{self, Propagation};

/// A request awaiting its answer.
pub(super) enum Pending {
    /// A client request forwarded as is; its events go to the client's response stream.
    Forward(ForwardSlot),
    /// The gateway's own request (initialize, list fan-out).
    Internal(oneshot::Sender<Result<InternalReply, GatewayError>>),
}

/// Where the answer of a forwarded client request goes, and what it is restored with.
pub(super) struct ForwardSlot {
    pub(super) sink: super::sink::EventSink,
    pub(super) client_id: SharedId,
    /// The client's own `progressToken`, restored on progress notifications.
    pub(super) client_token: Option<Box<RawValue>>,
    pub(super) session: Weak<dyn ClientSession>,
    /// Where resource URIs sit in the result, when they must be namespaced.
    pub(super) shape: Option<ResultShape>,
    /// The request as the client sent it, kept when the gateway must retry it itself.
    pub(super) retry: Option<super::retry::Original>,
    /// The called tool's mirrored arguments (`x-mcp-header`), for the `Mcp-Param-*` headers
    /// of every attempt on a stateless HTTP link.
    mirror: Option<Arc<ParamHeaders>>,
    /// A `tools/call`: its result is looked into for `isError` (see `Verdict::of`).
    pub(super) tool_call: bool,
}

impl Connection {
    fn allocate_id(&self) -> u64 {
        self.next_id.fetch_add(1, Ordering::Relaxed)
    }

    /// Forwards a client request. Returns the upstream id, the stream of events for it and the
    /// call's span (to be held until the answer). The client's `progressToken` is replaced by
    /// the upstream id so progress can be routed; the call's trace context goes in `_meta`.
    /// `mirror` is the called tool's `x-mcp-header` arguments (see [`Connection::mirrors_params`]).
    pub(crate) async fn forward(
        self: &Arc<Self>,
        method: &str,
        params: Option<&RawValue>,
        client_id: SharedId,
        session: Weak<dyn ClientSession>,
        shape: Option<ResultShape>,
        mirror: Option<Arc<ParamHeaders>>,
    ) -> Result<(u64, super::sink::EventSource, tracing::Span), GatewayError> {
        let span = telemetry::upstream_span(&self.info.tenant, &self.info.name, method);
        let trace = telemetry::outgoing(&span);
        let (tx, rx) = super::sink::channel();
        // A session-based client in front of a stateless upstream: the gateway answers the
        // upstream's `input_required` results itself (`retry.rs`), so it keeps the request.
        let live = session.upgrade();
        let retry = live
            .as_ref()
            .filter(|s| self.is_stateless() && !s.protocol_version().is_stateless())
            .map(|_| super::retry::Original {
                method: method.into(),
                params: params.map(ToOwned::to_owned),
                rounds: 0,
                first: None,
            });
        let slot = ForwardSlot {
            sink: tx,
            client_id,
            client_token: None,
            session,
            shape: shape.filter(|_| self.info.uri_prefix.is_some()),
            retry,
            mirror,
            tool_call: method == "tools/call",
        };
        let id = self
            .send_forward(slot, method, params, live.as_deref(), trace)
            .await
            .inspect_err(|_| telemetry::record_error(&span, "failed"))?;
        Ok((id, rx, span))
    }

    /// Sends a forwarded request under a new upstream id (the first attempt, or a retry of
    /// the stateless revision) and records where its answer goes.
    ///
    /// (An `async move` block rather than an `async fn`: the arguments are kept once, not
    /// also as the locals an `async fn` moves them into; this future is in every request's.)
    #[allow(clippy::manual_async_fn)] // an `async fn` keeps its arguments twice
    pub(super) fn send_forward(
        self: &Arc<Self>,
        mut slot: ForwardSlot,
        method: &str,
        params: Option<&RawValue>,
        session: Option<&dyn ClientSession>,
        trace: Option<Propagation>,
    ) -> impl Future<Output = Result<u64, GatewayError>> {
        async move {
            let id = self.allocate_id();
            let stateless = self.stateless_meta(session);
            let (replaced, client_token) =
                rewrite_meta(params, id, trace.as_ref(), stateless.as_ref())?;
            let params = replaced.as_deref().or(params);
            if slot.client_token.is_none() {
                slot.client_token = client_token;
            }
            let mcp = self.mcp_headers(method, params, slot.mirror.as_deref());
            self.pending.insert(id, Pending::Forward(slot));
            let bytes = jsonrpc::numbered_request(id, method, params);
            if let Err(e) = self.send_request(id, bytes, trace, mcp).await {
                self.pending.remove(&id);
                return Err(e);
            }
            Ok(id)
        }
    }

    /// A request of the gateway's own, answered through a oneshot; cancelled upstream on timeout.
    pub async fn call(
        self: &Arc<Self>,
        method: &str,
        params: Option<&RawValue>,
        timeout: Duration,
    ) -> Result<InternalReply, GatewayError> {
        self.ready(timeout).await?;
        let started = std::time::Instant::now();
        let span = telemetry::upstream_span(&self.info.tenant, &self.info.name, method);
        let trace = telemetry::outgoing(&span);
        let stateless = self.stateless_meta(None);
        let replaced = if trace.is_some() || stateless.is_some() {
            rewrite_meta(params, 0, trace.as_ref(), stateless.as_ref())?.0
        } else {
            None
        };
        let params = replaced.as_deref().or(params);
        let reply = self
            .call_inner(method, params, timeout, trace)
            .instrument(span.clone())
            .await;
        let outcome = match &reply {
            Ok(_) => "ok",
            Err(GatewayError::UpstreamTimeout { .. }) => "timeout",
            Err(_) => "failed",
        };
        if outcome != "ok" {
            telemetry::record_error(&span, outcome);
        }
        self.info.series.observe(
            &self.info.tenant,
            &self.info.name,
            started.elapsed(),
            outcome,
        );
        reply
    }

    /// Sends a request of the gateway's own whose answer may never come (a subscription): the
    /// receiver gets it, and nothing holds the connection while it waits.
    pub(super) async fn open_internal(
        self: &Arc<Self>,
        method: &str,
        params: Option<&RawValue>,
    ) -> Result<(u64, oneshot::Receiver<Result<InternalReply, GatewayError>>), GatewayError> {
        self.ready(self.info.init_timeout).await?;
        let stateless = self.stateless_meta(None);
        let replaced = rewrite_meta(params, 0, None, stateless.as_ref())?.0;
        let params = replaced.as_deref().or(params);
        self.send_internal(method, params, None).await
    }

    /// Sends a request of the gateway's own; its answer comes to the receiver.
    async fn send_internal(
        self: &Arc<Self>,
        method: &str,
        params: Option<&RawValue>,
        trace: Option<Propagation>,
    ) -> Result<(u64, oneshot::Receiver<Result<InternalReply, GatewayError>>), GatewayError> {
        let id = self.allocate_id();
        let (tx, rx) = oneshot::channel();
        self.pending.insert(id, Pending::Internal(tx));
        let mcp = self.mcp_headers(method, params, None);
        let bytes = jsonrpc::numbered_request(id, method, params);
        if let Err(e) = self.send_request(id, bytes, trace, mcp).await {
            self.pending.remove(&id);
            return Err(e);
        }
        Ok((id, rx))
    }

    /// Like [`Connection::call`] but without waiting for readiness: the handshake itself.
    pub(crate) async fn call_during_handshake(
        self: &Arc<Self>,
        method: &str,
        params: &RawValue,
        timeout: Duration,
    ) -> Result<InternalReply, GatewayError> {
        self.call_inner(method, Some(params), timeout, None).await
    }

    async fn call_inner(
        self: &Arc<Self>,
        method: &str,
        params: Option<&RawValue>,
        timeout: Duration,
        trace: Option<Propagation>,
    ) -> Result<InternalReply, GatewayError> {
        let (id, rx) = self.send_internal(method, params, trace).await?;
        match tokio::time::timeout(timeout, rx).await {
            Ok(Ok(reply)) => reply,
            Ok(Err(_)) => Err(GatewayError::UpstreamClosed {
                upstream: self.info.name.to_string(),
                reason: "the connection was closed".into(),
            }),
            Err(_) => {
                self.cancel(id, "timed out");
                Err(GatewayError::UpstreamTimeout {
                    upstream: self.info.name.to_string(),
                    after: timeout,
                })
            }
        }
    }

    /// Marks forwarded request `id` as waiting (or no longer) for its client's answers.
    pub fn set_waiting(&self, id: u64, waiting: bool) {
        if waiting {
            self.waiting.insert(id, ());
        } else {
            self.waiting.remove(&id);
        }
    }

    /// Records that the request first sent as `first` goes on as `current`.
    pub(super) fn alias(&self, first: u64, current: u64) {
        self.aliases.insert(first, current);
    }

    /// Stops waiting for `id` and tells the upstream with `notifications/cancelled`.
    pub fn cancel(self: &Arc<Self>, id: u64, reason: &str) {
        let id = self.aliases.remove(&id).unwrap_or(id);
        self.waiting.remove(&id);
        if self.pending.remove(&id).is_none() {
            return;
        }
        if let Link::Http(l) = &self.link
            && self.is_stateless()
        {
            // 2026-07-28 over HTTP: closing the request's response stream is the cancellation.
            l.abort(id);
            return;
        }
        let params = serde_json::json!({ "requestId": id, "reason": reason }).to_string();
        let conn = self.clone();
        tokio::spawn(async move {
            let raw = RawValue::from_string(params).ok();
            if let Err(e) = conn.notify("notifications/cancelled", raw.as_deref()).await {
                tracing::debug!(upstream = %conn.info.name, error = %e, "cancellation not delivered");
            }
        });
    }

    /// Fails one pending request (its link broke).
    pub(crate) fn fail(&self, id: u64, err: GatewayError) {
        if let Some(pending) = self.pending.remove(&id) {
            deliver_failure(pending, err);
        }
    }

    /// Fails every pending request: the process exited or the connection was closed.
    pub(crate) fn fail_all(&self, err: &GatewayError) {
        let ids = self.pending.keys_where(|_| true);
        for id in ids {
            self.fail(id, err.clone());
        }
    }

    pub(crate) fn is_pending(&self, id: u64) -> bool {
        self.pending.contains_key(&id)
    }

    /// Sends `event` on the stream of forwarded request `related`, if it is one and its stream
    /// still takes events.
    pub(super) fn send_to_request(&self, related: Option<u64>, event: StreamEvent) -> bool {
        let Some(id) = related else {
            return false;
        };
        self.pending
            .with(&id, |pending| match pending {
                Pending::Forward(slot) => slot.sink.send(event).is_ok(),
                Pending::Internal(_) => false,
            })
            .unwrap_or(false)
    }
}

fn deliver_failure(pending: Pending, err: GatewayError) {
    match pending {
        Pending::Forward(slot) => {
            let _ = slot.sink.send(StreamEvent::Failed(err));
        }
        Pending::Internal(tx) => {
            let _ = tx.send(Err(err));
        }
    }
}

/// Parses an id the gateway issued on an upstream link (a plain non-negative integer).
pub(super) fn our_id(raw: &RawValue) -> Option<u64> {
    raw.get().parse().ok()
}
