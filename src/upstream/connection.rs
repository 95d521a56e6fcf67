//! `Connection`: one MCP client session between the gateway and an upstream. It owns the
//! request ids used on that link, the table of requests awaiting an answer, and the routing of
//! everything the upstream sends back (responses, progress, notifications, server requests).

use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::{Arc, RwLock, Weak};
use std::time::Duration;

use bytes::Bytes;
use dashmap::DashMap;
use serde_json::value::RawValue;
use tokio::sync::oneshot;
use tracing::Instrument;

use super::handshake::{InitParams, UpstreamServer};
use super::http::{HttpLink, McpHeaders};
use super::legacy_sse::SseLink;
use super::owner::{ClientSession, Owner};
use super::server_requests::{ServerRequestRoute, refused};
use super::stdio::StdioLink;
use super::{StreamEvent, UpstreamInfo};
use crate::error::{GatewayError, ServerRequestRefusal};
use crate::jsonrpc::{self, Message, Notification, Outcome, OwnedId, RawObject, Request};
use crate::protocol::param_headers::ParamHeaders;
use crate::protocol::rewrite::{self, ResultShape};
use crate::protocol::{ListKind, ProtocolVersion, modern};
use crate::telemetry::{self, Propagation};

/// Why a session's live state on this replica goes away.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Ending {
    /// The client session is over (DELETE, expiry with nobody else to serve it): upstream
    /// sessions end too.
    End,
    /// Only this replica lets go (idle here, shutting down) while the stored session lives on:
    /// upstream HTTP sessions stay open for whichever replica serves the next request.
    Release,
}

/// The transport under a connection. A closed set.
pub enum Link {
    Stdio(StdioLink),
    Http(HttpLink),
    /// HTTP with SSE (2024-11-05).
    Sse(SseLink),
}

/// The reply to a request the gateway made for itself.
#[derive(Debug)]
pub enum InternalReply {
    Result(Box<RawValue>),
    Error(Box<RawValue>),
}

impl From<Outcome<'_>> for InternalReply {
    fn from(outcome: Outcome<'_>) -> InternalReply {
        match outcome {
            Outcome::Result(r) => InternalReply::Result(r.to_owned()),
            Outcome::Error(e) => InternalReply::Error(e.to_owned()),
        }
    }
}

/// A request awaiting its answer.
enum Pending {
    /// A client request forwarded as is; its events go to the client's response stream.
    Forward(ForwardSlot),
    /// The gateway's own request (initialize, list fan-out).
    Internal(oneshot::Sender<Result<InternalReply, GatewayError>>),
}

pub(super) struct ForwardSlot {
    pub(super) sink: super::sink::EventSink,
    pub(super) client_id: OwnedId,
    /// The client's own `progressToken`, restored on progress notifications.
    client_token: Option<Box<RawValue>>,
    pub(super) session: Weak<dyn ClientSession>,
    /// Where resource URIs sit in the result, when they must be namespaced.
    shape: Option<ResultShape>,
    /// The request as the client sent it, kept when the gateway must retry it itself.
    pub(super) retry: Option<super::retry::Original>,
    /// The called tool's mirrored arguments (`x-mcp-header`), for the `Mcp-Param-*` headers
    /// of every attempt on a stateless HTTP link.
    mirror: Option<Arc<ParamHeaders>>,
}

pub struct Connection {
    pub(crate) info: Arc<UpstreamInfo>,
    next_id: AtomicU64,
    pending: DashMap<u64, Pending>,
    /// First attempt → current attempt of requests the gateway retried (`retry.rs`), so a
    /// cancellation naming the first reaches the one in flight.
    aliases: DashMap<u64, u64>,
    /// Forwarded requests waiting for their client's answers (parked for a stateless
    /// client's retry): on stdio, a message without relation is not theirs.
    waiting: DashMap<u64, ()>,
    /// On a shared connection: which sessions subscribed to which upstream resource URI.
    subscriptions:
        std::sync::Mutex<std::collections::HashMap<String, Vec<Weak<dyn ClientSession>>>>,
    server: RwLock<Option<Arc<UpstreamServer>>>,
    /// The upstream speaks the stateless revision (or is being probed for it): requests carry
    /// the revision's `_meta` and headers, and `input_required` results are handled.
    stateless: AtomicBool,
    /// `init_params`' client, raw, for the `_meta` of the gateway's own requests.
    client_meta: std::sync::OnceLock<modern::ClientMeta>,
    /// The gateway's own `subscriptions/listen` is kept open on this (stateless) connection.
    pub(super) subscribed: AtomicBool,
    /// Woken when the resources followed change: the subscription is opened again with them.
    pub(super) resubscribe: Arc<tokio::sync::Notify>,
    pub(crate) init_params: InitParams,
    pub(crate) link: Link,
    owner: Owner,
}

impl Connection {
    pub(crate) fn new(
        info: Arc<UpstreamInfo>,
        init_params: InitParams,
        owner: Owner,
        link: Link,
    ) -> Connection {
        Connection {
            info,
            next_id: AtomicU64::new(1),
            pending: DashMap::with_shard_amount(4),
            waiting: DashMap::with_shard_amount(2),
            aliases: DashMap::with_shard_amount(2),
            subscriptions: Default::default(),
            server: RwLock::new(None),
            stateless: AtomicBool::new(false),
            subscribed: AtomicBool::new(false),
            resubscribe: Arc::default(),
            client_meta: std::sync::OnceLock::new(),
            init_params,
            link,
            owner,
        }
    }

    pub fn upstream_name(&self) -> &str {
        &self.info.name
    }

    /// Whether every session of the tenant shares this connection.
    pub fn is_shared(&self) -> bool {
        matches!(self.owner, Owner::Shared(_))
    }

    /// Records `session` as a subscriber of `uri`; true when it is the first, i.e. the
    /// subscription must be made upstream.
    pub fn add_subscriber(&self, uri: &str, session: &Arc<impl ClientSession + 'static>) -> bool {
        let Ok(mut subs) = self.subscriptions.lock() else {
            return true;
        };
        let list = subs.entry(uri.to_owned()).or_default();
        list.retain(|w| w.strong_count() > 0);
        let first = list.is_empty();
        if !list
            .iter()
            .any(|w| std::ptr::addr_eq(w.as_ptr(), Arc::as_ptr(session)))
        {
            list.push(Arc::downgrade(session) as Weak<dyn ClientSession>);
        }
        first
    }

    /// Removes `session` from the subscribers of `uri`; true when none is left, i.e. the
    /// subscription must be ended upstream.
    pub fn remove_subscriber(&self, uri: &str, session: &dyn ClientSession) -> bool {
        let Ok(mut subs) = self.subscriptions.lock() else {
            return true;
        };
        let Some(list) = subs.get_mut(uri) else {
            return true;
        };
        list.retain(|w| w.strong_count() > 0 && !std::ptr::addr_eq(w.as_ptr(), session));
        let last = list.is_empty();
        if last {
            subs.remove(uri);
        }
        last
    }

    /// Drops a closing session from every subscription; returns the URIs nobody follows now.
    pub fn forget_subscriber(&self, session: &dyn ClientSession) -> Vec<String> {
        let Ok(mut subs) = self.subscriptions.lock() else {
            return Vec::new();
        };
        let mut orphaned = Vec::new();
        subs.retain(|uri, list| {
            list.retain(|w| w.strong_count() > 0 && !std::ptr::addr_eq(w.as_ptr(), session));
            if list.is_empty() {
                orphaned.push(uri.clone());
                false
            } else {
                true
            }
        });
        orphaned
    }

    /// The upstream URIs some session subscribed to.
    pub(super) fn subscribed_uris(&self) -> Vec<String> {
        self.subscriptions
            .lock()
            .map(|s| s.keys().cloned().collect())
            .unwrap_or_default()
    }

    fn subscribers(&self, uri: &str) -> Vec<Arc<dyn ClientSession>> {
        self.subscriptions
            .lock()
            .ok()
            .and_then(|subs| {
                subs.get(uri)
                    .map(|l| l.iter().filter_map(Weak::upgrade).collect())
            })
            .unwrap_or_default()
    }

    /// Tells the owning session its durable record changed (a new upstream session).
    pub(crate) fn owner_changed(&self) {
        if let Owner::Session(w) = &self.owner
            && let Some(s) = w.upgrade()
        {
            s.mark_dirty();
        }
    }

    /// What the upstream said in its last successful `initialize`.
    pub fn server(&self) -> Option<Arc<UpstreamServer>> {
        self.server.read().map(|s| s.clone()).unwrap_or(None)
    }

    pub(crate) fn set_server(&self, server: UpstreamServer) {
        self.stateless
            .store(server.protocol_version.is_stateless(), Ordering::Release);
        if let Ok(mut s) = self.server.write() {
            *s = Some(Arc::new(server));
        }
    }

    /// Whether the upstream speaks the stateless revision.
    pub fn is_stateless(&self) -> bool {
        self.stateless.load(Ordering::Acquire)
    }

    /// The revision the link's requests announce before (or without) a handshake: the
    /// stateless one while probing, none after a session-based answer.
    pub(crate) fn set_link_version(&self, version: Option<ProtocolVersion>) {
        self.stateless
            .store(version.is_some_and(|v| v.is_stateless()), Ordering::Release);
        if let Link::Http(l) = &self.link {
            l.set_protocol_version(version);
        }
    }

    /// What a request of the stateless revision says about its client in `_meta`: the
    /// session's client when it has one, else what the connection was opened with.
    fn stateless_meta<'s>(
        &'s self,
        session: Option<&'s dyn ClientSession>,
    ) -> Option<StatelessMeta<'s>> {
        if !self.is_stateless() {
            return None;
        }
        let client = match session {
            Some(s) => s.client_meta(),
            None => self.client_meta.get_or_init(|| {
                modern::ClientMeta::new(
                    &self.init_params.capabilities,
                    &self.init_params.client_info,
                )
            }),
        };
        Some(StatelessMeta {
            client,
            log_level: session
                .and_then(|s| s.log_level())
                .map(|l| jsonrpc::raw_string(&l)),
        })
    }

    fn mcp_headers(
        &self,
        method: &str,
        params: Option<&RawValue>,
        mirror: Option<&ParamHeaders>,
    ) -> Option<McpHeaders> {
        match &self.link {
            Link::Http(_) if self.is_stateless() => McpHeaders::of(method, params, mirror),
            _ => None,
        }
    }

    /// Whether requests on this link mirror tool arguments into `Mcp-Param-*` headers: an
    /// HTTP upstream of the stateless revision.
    pub fn mirrors_params(&self) -> bool {
        matches!(self.link, Link::Http(_)) && self.is_stateless()
    }

    /// Waits until the link can carry requests (bounded), or fails with a clear reason. An
    /// SSE link whose stream ended opens a new upstream session here.
    pub async fn ready(self: &Arc<Self>, timeout: Duration) -> Result<(), GatewayError> {
        match &self.link {
            Link::Stdio(l) => l.ready(&self.info.name, timeout).await,
            Link::Http(_) => Ok(()),
            Link::Sse(l) => l.ready(self, timeout).await,
        }
    }

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
        client_id: &RawValue,
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
            client_id: client_id.to_owned(),
            client_token: None,
            session,
            shape: shape.filter(|_| self.info.uri_prefix.is_some()),
            retry,
            mirror,
        };
        let id = self
            .send_forward(slot, method, params, live.as_deref(), trace)
            .await
            .inspect_err(|_| telemetry::record_error(&span, "failed"))?;
        Ok((id, rx, span))
    }

    /// Sends a forwarded request under a new upstream id (the first attempt, or a retry of
    /// the stateless revision) and records where its answer goes.
    pub(super) async fn send_forward(
        self: &Arc<Self>,
        mut slot: ForwardSlot,
        method: &str,
        params: Option<&RawValue>,
        session: Option<&dyn ClientSession>,
        trace: Option<Propagation>,
    ) -> Result<u64, GatewayError> {
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
        let bytes = jsonrpc::request(&jsonrpc::raw_u64(id), method, params);
        if let Err(e) = self.send_request(id, bytes, trace, mcp).await {
            self.pending.remove(&id);
            return Err(e);
        }
        Ok(id)
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
        crate::metrics::get().observe_upstream(
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
        let bytes = jsonrpc::request(&jsonrpc::raw_u64(id), method, params);
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

    /// Sends a request; an HTTP upstream also gets the trace context in headers.
    async fn send_request(
        self: &Arc<Self>,
        id: u64,
        bytes: Vec<u8>,
        trace: Option<Propagation>,
        mcp: Option<McpHeaders>,
    ) -> Result<(), GatewayError> {
        match &self.link {
            Link::Stdio(l) => l.send(&self.info.name, bytes).await,
            Link::Http(l) => {
                l.spawn_request(self.clone(), id, Bytes::from(bytes), trace, mcp);
                Ok(())
            }
            Link::Sse(l) => l.post(self, Bytes::from(bytes), trace.as_ref()).await,
        }
    }

    /// Sends a notification (or a response) to the upstream.
    pub async fn send_message(self: &Arc<Self>, bytes: Vec<u8>) -> Result<(), GatewayError> {
        match &self.link {
            Link::Stdio(l) => l.send(&self.info.name, bytes).await,
            Link::Http(l) => l.post_message(self, Bytes::from(bytes)).await,
            Link::Sse(l) => l.post(self, Bytes::from(bytes), None).await,
        }
    }

    pub async fn notify(
        self: &Arc<Self>,
        method: &str,
        params: Option<&RawValue>,
    ) -> Result<(), GatewayError> {
        self.send_message(jsonrpc::notification(method, params))
            .await
    }

    pub(crate) async fn notify_during_handshake(
        self: &Arc<Self>,
        method: &str,
        params: Option<&RawValue>,
    ) -> Result<(), GatewayError> {
        self.notify(method, params).await
    }

    /// Answers a server-to-client request of the upstream (the client's reply, or an error).
    pub async fn respond(self: &Arc<Self>, upstream_id: &RawValue, outcome: Outcome<'_>) {
        let bytes = jsonrpc::response_with_id(upstream_id, outcome);
        if let Err(e) = self.send_message(bytes).await {
            tracing::warn!(upstream = %self.info.name, error = %e, "could not deliver a reply to the upstream");
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
        let id = self.aliases.remove(&id).map_or(id, |(_, current)| current);
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
        if let Some((_, pending)) = self.pending.remove(&id) {
            deliver_failure(pending, err);
        }
    }

    /// Fails every pending request: the process exited or the connection was closed.
    pub(crate) fn fail_all(&self, err: &GatewayError) {
        let ids: Vec<u64> = self.pending.iter().map(|e| *e.key()).collect();
        for id in ids {
            self.fail(id, err.clone());
        }
    }

    pub(crate) fn is_pending(&self, id: u64) -> bool {
        self.pending.contains_key(&id)
    }

    /// Closes the link (process shutdown or upstream session DELETE) and fails what is pending.
    pub async fn close(&self) {
        self.close_as(Ending::End).await;
    }

    /// Closes the connection; on `Ending::Release` an upstream HTTP session is left open for
    /// another replica that continues the client session.
    pub async fn close_as(&self, ending: Ending) {
        match &self.link {
            Link::Stdio(l) => l.close().await,
            Link::Http(l) => l.close(ending == Ending::End).await,
            Link::Sse(l) => l.close(),
        }
        self.fail_all(&GatewayError::UpstreamClosed {
            upstream: self.info.name.to_string(),
            reason: "the connection was closed".into(),
        });
    }

    // ---- Inbound: everything the upstream sends.

    /// Routes one message from the upstream. `related` is the upstream id of the request whose
    /// response stream carried it (HTTP), if any.
    pub(crate) fn on_message(self: &Arc<Self>, bytes: Bytes, related: Option<u64>) {
        if jsonrpc::is_batch(&bytes) {
            // An upstream on 2025-03-26 may batch what it sends: each member stands alone
            // (a slice of the same buffer, not a copy).
            match jsonrpc::split_batch(&bytes) {
                Ok(members) => {
                    for m in members {
                        self.on_single(bytes.slice_ref(m.get().as_bytes()), related);
                    }
                }
                Err(e) => {
                    tracing::warn!(upstream = %self.info.name, error = ?e, "dropping an invalid batch from the upstream");
                }
            }
            return;
        }
        self.on_single(bytes, related);
    }

    fn on_single(self: &Arc<Self>, bytes: Bytes, related: Option<u64>) {
        let msg = match jsonrpc::parse(&bytes) {
            Ok(m) => m,
            Err(e) => {
                tracing::warn!(upstream = %self.info.name, error = ?e, "dropping an invalid message from the upstream");
                // An answer whose id could be read (one with duplicate member names) ends its
                // request with an error now rather than at its timeout.
                if let jsonrpc::ParseError::Ambiguous {
                    ambiguity,
                    id: Some(id),
                    response: true,
                } = e
                    && let Ok(id) = id.parse::<u64>()
                {
                    self.fail(
                        id,
                        GatewayError::UpstreamProtocol {
                            upstream: self.info.name.to_string(),
                            reason: ambiguity.to_string(),
                        },
                    );
                }
                return;
            }
        };
        match msg {
            Message::Response(r) => {
                let Some(id) = our_id(r.id) else {
                    tracing::warn!(upstream = %self.info.name, id = r.id.get(), "response with an id the gateway never issued");
                    return;
                };
                match self.pending.remove(&id) {
                    Some((_, Pending::Forward(slot)))
                        if slot.retry.is_some()
                            && let Outcome::Result(result) = r.outcome
                            && super::retry::is_input_required(result) =>
                    {
                        super::retry::spawn(self.clone(), id, slot, result.to_owned());
                    }
                    Some((_, Pending::Forward(slot))) => {
                        if let Some(first) = slot.retry.as_ref().and_then(|r| r.first) {
                            self.aliases.remove(&first);
                        }
                        let rewritten = match (slot.shape, r.outcome, &self.info.uri_prefix) {
                            (Some(shape), Outcome::Result(result), Some(prefix)) => {
                                rewrite::prefix_result_uris(result, shape, prefix)
                            }
                            _ => None,
                        };
                        let outcome = rewritten.as_deref().map_or(r.outcome, Outcome::Result);
                        if let Outcome::Error(e) = outcome
                            && self.is_stateless()
                            && is_header_mismatch(e)
                        {
                            // The upstream's tool schemas (`x-mcp-header`) may have changed: the
                            // next list, or the client's retry, fetches them again.
                            self.info.catalog.invalidate(ListKind::Tools);
                        }
                        let out = jsonrpc::response_with_id(&slot.client_id, outcome);
                        let _ = slot.sink.send(StreamEvent::Response(Bytes::from(out)));
                    }
                    Some((_, Pending::Internal(tx))) => {
                        let _ = tx.send(Ok(InternalReply::from(r.outcome)));
                    }
                    None => {
                        tracing::debug!(upstream = %self.info.name, id, "late response dropped (request already finished)");
                    }
                }
            }
            Message::Notification(n) => self.on_notification(&n, &bytes, related),
            Message::Request(r) => self.on_server_request(&r, related),
        }
    }

    /// The request a message without explicit relation belongs to: on stdio (and an SSE
    /// stream), when exactly one forwarded request is in flight, that one (neither has another
    /// way to relate messages).
    fn infer_related(&self, related: Option<u64>) -> Option<u64> {
        if related.is_some() || !matches!(self.link, Link::Stdio(_) | Link::Sse(_)) {
            return related;
        }
        let mut found = None;
        for e in self.pending.iter() {
            if matches!(e.value(), Pending::Forward(_)) && !self.waiting.contains_key(e.key()) {
                if found.is_some() {
                    return None;
                }
                found = Some(*e.key());
            }
        }
        found
    }

    fn on_notification(
        self: &Arc<Self>,
        n: &Notification<'_>,
        bytes: &Bytes,
        related: Option<u64>,
    ) {
        if n.method == "notifications/progress" {
            self.on_progress(n);
            return;
        }
        if n.method.ends_with("/list_changed") {
            for kind in ListKind::from_list_changed(&n.method) {
                self.info.catalog.invalidate(*kind);
            }
            self.broadcast_or_deliver(bytes.clone());
            return;
        }
        if n.method == "notifications/resources/updated" {
            self.on_resource_updated(n, bytes);
            return;
        }
        if n.method == "notifications/cancelled" {
            self.on_upstream_cancelled(n, related);
            return;
        }
        if n.method == "notifications/subscriptions/acknowledged" {
            // The gateway's own subscription (`subscribe.rs`): nothing for a client.
            return;
        }
        let related = self.infer_related(related);
        if let Some(id) = related
            && let Some(entry) = self.pending.get(&id)
            && let Pending::Forward(slot) = entry.value()
            && slot.sink.send(StreamEvent::Message(bytes.clone())).is_ok()
        {
            return;
        }
        match &self.owner {
            Owner::Session(s) => {
                if let Some(s) = s.upgrade() {
                    s.deliver_unsolicited(bytes.clone());
                }
            }
            Owner::Shared(_) => {
                tracing::debug!(upstream = %self.info.name, method = %n.method, "unsolicited notification on a shared connection not relayed (no single owner)");
            }
        }
    }

    fn broadcast_or_deliver(&self, bytes: Bytes) {
        match &self.owner {
            Owner::Session(s) => {
                if let Some(s) = s.upgrade() {
                    s.deliver_unsolicited(bytes);
                }
            }
            Owner::Shared(dir) => {
                if let Some(dir) = dir.upgrade() {
                    dir.broadcast(&bytes);
                }
            }
        }
    }

    /// A subscribed resource changed: the URI gets the upstream's namespace, and the
    /// notification goes to the sessions that subscribed (on a shared connection) or the owner.
    fn on_resource_updated(&self, n: &Notification<'_>, bytes: &Bytes) {
        let rewritten = match (&self.info.uri_prefix, n.params) {
            (Some(prefix), Some(params)) => rewrite::prefix_field(params, "uri", prefix)
                .map(|p| Bytes::from(jsonrpc::notification(&n.method, Some(&p)))),
            _ => None,
        };
        let out = rewritten.unwrap_or_else(|| bytes.clone());
        match &self.owner {
            Owner::Session(s) => {
                if let Some(s) = s.upgrade() {
                    s.deliver_unsolicited(out);
                }
            }
            Owner::Shared(_) => {
                let uri = n
                    .params
                    .and_then(|p| RawObject::parse(p).ok())
                    .and_then(|p| p.get_str("uri").map(|u| u.into_owned()));
                if let Some(uri) = uri {
                    for session in self.subscribers(&uri) {
                        session.deliver_unsolicited(out.clone());
                    }
                }
            }
        }
    }

    fn on_progress(&self, n: &Notification<'_>) {
        let Some(params) = n.params else { return };
        let Ok(mut obj) = RawObject::parse(params) else {
            return;
        };
        let Some(id) = obj.get("progressToken").and_then(our_id) else {
            tracing::debug!(upstream = %self.info.name, "progress for a token the gateway never issued");
            return;
        };
        let Some(entry) = self.pending.get(&id) else {
            return;
        };
        let Pending::Forward(slot) = entry.value() else {
            return;
        };
        let Some(token) = &slot.client_token else {
            return;
        };
        obj.set("progressToken", token.clone());
        let out = jsonrpc::notification("notifications/progress", Some(&obj.to_raw()));
        let _ = slot.sink.send(StreamEvent::Progress(Bytes::from(out)));
    }

    fn on_upstream_cancelled(self: &Arc<Self>, n: &Notification<'_>, related: Option<u64>) {
        let Some(params) = n.params else { return };
        let Ok(mut obj) = RawObject::parse(params) else {
            return;
        };
        let Some(upstream_req) = obj.get("requestId").map(|r| r.get().to_owned()) else {
            return;
        };
        let session = self.session_for(self.infer_related(related));
        let Some(session) = session else { return };
        let Some(client_id) = session.take_server_request_by_upstream(self, &upstream_req) else {
            return;
        };
        obj.set("requestId", client_id);
        let out = jsonrpc::notification("notifications/cancelled", Some(&obj.to_raw()));
        session.deliver_unsolicited(Bytes::from(out));
    }

    /// The session a message belongs to: the related request's session, else the owner.
    fn session_for(&self, related: Option<u64>) -> Option<Arc<dyn ClientSession>> {
        if let Some(id) = related
            && let Some(entry) = self.pending.get(&id)
            && let Pending::Forward(slot) = entry.value()
        {
            return slot.session.upgrade();
        }
        match &self.owner {
            Owner::Session(s) => s.upgrade(),
            Owner::Shared(_) => None,
        }
    }

    /// A request from the upstream to the client (sampling, elicitation, roots, ping): one the
    /// client did not declare the capability for is refused at once, never forwarded; else it
    /// gets a client-facing id (refused when the session has its limit waiting already; it
    /// expires unanswered), is delivered on the related response stream or the session's GET
    /// stream, and the client's answer is routed back by the session (`ClientSession`).
    fn on_server_request(self: &Arc<Self>, r: &Request<'_>, related: Option<u64>) {
        let related = self.infer_related(related);
        let Some(session) = self.session_for(related) else {
            self.refuse_server_request(
                r.id,
                &r.method,
                &ServerRequestRefusal::Undeliverable(
                    "no client session can receive this request (shared connection)",
                ),
            );
            return;
        };
        if let Err(refusal) = session.accepts_server_request(&r.method, r.params) {
            self.refuse_server_request(r.id, &r.method, &refusal);
            return;
        }
        let (params, progress) = match r.params.map(|p| session.rewrite_server_progress(p)) {
            Some(Some((params, progress))) => (Some(params), Some(progress)),
            _ => (None, None),
        };
        let registered = session.register_server_request(ServerRequestRoute {
            connection: Arc::downgrade(self),
            upstream_id: r.id.to_owned(),
            progress,
            answer_to: None,
        });
        let client_id = match registered {
            Ok(id) => id,
            Err(refusal) => {
                self.refuse_server_request(r.id, &r.method, &refusal);
                return;
            }
        };
        let params = params.as_deref().or(r.params);
        let out = Bytes::from(jsonrpc::request(&client_id, &r.method, params));
        if let Some(id) = related
            && let Some(entry) = self.pending.get(&id)
            && let Pending::Forward(slot) = entry.value()
            && slot.sink.send(StreamEvent::Request(out.clone())).is_ok()
        {
            return;
        }
        const NO_STREAM: ServerRequestRefusal = ServerRequestRefusal::Undeliverable(
            "the client has no open stream to receive requests",
        );
        let (conn, weak, upstream_id, cid, method) = (
            self.clone(),
            Arc::downgrade(&session),
            r.id.to_owned(),
            client_id.get().to_owned(),
            r.method.to_string(),
        );
        // Delivery may go to another replica's GET stream; if it turns out nobody holds one,
        // the upstream gets a refusal instead of waiting forever.
        let delivered = session.deliver_or(
            out,
            Box::new(move || {
                if let Some(s) = weak.upgrade() {
                    s.take_server_request(&cid);
                }
                conn.refuse_server_request(&upstream_id, &method, &NO_STREAM);
            }),
        );
        if !delivered {
            session.take_server_request(client_id.get());
            self.refuse_server_request(r.id, &r.method, &NO_STREAM);
        }
    }

    /// Answers upstream request `id` (of `method`) with `refusal`'s error, at once.
    fn refuse_server_request(
        self: &Arc<Self>,
        id: &RawValue,
        method: &str,
        refusal: &ServerRequestRefusal,
    ) {
        tracing::warn!(upstream = %self.info.name, method, reason = %refusal, "a request to the client was refused by the gateway");
        let err = refused(refusal);
        let conn = self.clone();
        let id = id.to_owned();
        tokio::spawn(async move { conn.respond(&id, Outcome::Error(&err)).await });
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

/// The client's identity a request of the stateless revision carries in `_meta`.
struct StatelessMeta<'s> {
    client: &'s modern::ClientMeta,
    /// The session client's `logging/setLevel`, as `logLevel`.
    log_level: Option<Box<RawValue>>,
}

/// Whether an `error` object is a 2026-07-28 `HeaderMismatch` (-32020).
fn is_header_mismatch(error: &RawValue) -> bool {
    #[derive(serde::Deserialize)]
    struct Code {
        code: i64,
    }
    error.get().contains("-32020")
        && serde_json::from_str::<Code>(error.get())
            .is_ok_and(|c| c.code == jsonrpc::code::HEADER_MISMATCH)
}

/// Parses an id the gateway issued on an upstream link (a plain non-negative integer).
fn our_id(raw: &RawValue) -> Option<u64> {
    raw.get().parse().ok()
}

/// Edits `params._meta` on the way upstream: the client's `progressToken` becomes `id` (the
/// original is returned, to be restored on progress), and the gateway's trace context
/// (`traceparent`, `tracestate`) is set. Returns the new params only when something changed;
/// params that are not an object are left alone.
#[allow(clippy::type_complexity)]
fn rewrite_meta<'a>(
    params: Option<&'a RawValue>,
    id: u64,
    trace: Option<&Propagation>,
    stateless: Option<&'a StatelessMeta<'a>>,
) -> Result<(Option<Box<RawValue>>, Option<Box<RawValue>>), GatewayError> {
    let may_have_token = params.is_some_and(|p| jsonrpc::may_hold(p.get(), "progressToken"));
    if !may_have_token && trace.is_none() && stateless.is_none() {
        return Ok((None, None));
    }
    let parsed = match params.map(RawObject::parse) {
        Some(Ok(obj)) => Some(obj),
        Some(Err(_)) => return Ok((None, None)),
        None => None,
    };
    let mut meta = match parsed.as_ref().and_then(|o| o.get("_meta")) {
        Some(m) => match RawObject::parse(m) {
            Ok(meta) => meta,
            Err(_) if may_have_token => {
                return Err(GatewayError::InvalidParams(
                    "`_meta` must be an object".into(),
                ));
            }
            Err(_) => return Ok((None, None)),
        },
        None => RawObject::default(),
    };
    let token = meta.get("progressToken").map(|t| t.to_owned());
    if let Some(t) = &token {
        if !jsonrpc::is_valid_id(t) {
            return Err(GatewayError::InvalidParams(
                "`_meta.progressToken` must be a string or an integer".into(),
            ));
        }
        meta.set("progressToken", jsonrpc::raw_u64(id));
    }
    if let Some(tc) = trace {
        meta.set("traceparent", jsonrpc::raw_string(&tc.traceparent));
        match &tc.tracestate {
            Some(state) => meta.set("tracestate", jsonrpc::raw_string(state)),
            None => drop(meta.remove("tracestate")),
        }
    } else if token.is_none() && stateless.is_none() {
        return Ok((None, None));
    }
    if let Some(st) = stateless {
        // A stateless client's own `_meta` is kept; a session-based client's is supplied.
        if meta.get(modern::meta::PROTOCOL_VERSION).is_none() {
            let version = jsonrpc::raw_string(ProtocolVersion::V2026_07_28.as_str());
            meta.set(modern::meta::PROTOCOL_VERSION, version);
            meta.set_ref(modern::meta::CLIENT_CAPABILITIES, &st.client.capabilities);
            meta.set_ref(modern::meta::CLIENT_INFO, &st.client.client_info);
            if let Some(level) = &st.log_level {
                meta.set_ref(modern::meta::LOG_LEVEL, level);
            }
        }
    }
    let meta = meta.to_raw();
    let mut obj = match params {
        Some(p) => RawObject::parse(p).map_err(|_| GatewayError::Internal)?,
        None => RawObject::default(),
    };
    obj.set("_meta", meta);
    Ok((Some(obj.to_raw()), token))
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used)]
    use super::*;

    #[test]
    fn progress_token_is_replaced_and_returned() {
        let p = RawValue::from_string(
            r#"{"name":"x","_meta":{"progressToken":"tok-1","other":true},"arguments":{}}"#.into(),
        )
        .unwrap();
        let (new, token) = rewrite_meta(Some(&p), 42, None, None).unwrap();
        assert_eq!(token.unwrap().get(), r#""tok-1""#);
        assert_eq!(
            new.unwrap().get(),
            r#"{"name":"x","_meta":{"progressToken":42,"other":true},"arguments":{}}"#
        );
    }

    #[test]
    fn params_without_token_pass_unchanged() {
        let p = RawValue::from_string(r#"{"name":"progressToken"}"#.into()).unwrap();
        let (new, token) = rewrite_meta(Some(&p), 1, None, None).unwrap();
        assert!(token.is_none());
        assert!(new.is_none(), "nothing to rewrite, nothing copied");
    }

    #[test]
    fn invalid_tokens_are_rejected() {
        let p = RawValue::from_string(r#"{"_meta":{"progressToken":1.5}}"#.into()).unwrap();
        assert!(rewrite_meta(Some(&p), 1, None, None).is_err());
    }

    fn trace() -> Propagation {
        Propagation {
            traceparent: "00-0af7651916cd43dd8448eb211c80319c-00f067aa0ba902b7-01".into(),
            tracestate: Some("k=v".into()),
        }
    }

    #[test]
    fn trace_context_is_set_next_to_the_token() {
        let p = RawValue::from_string(
            r#"{"name":"x","_meta":{"progressToken":7,"traceparent":"old","baggage":"b=1"}}"#
                .into(),
        )
        .unwrap();
        let (new, token) = rewrite_meta(Some(&p), 3, Some(&trace()), None).unwrap();
        assert_eq!(token.unwrap().get(), "7");
        assert_eq!(
            new.unwrap().get(),
            r#"{"name":"x","_meta":{"progressToken":3,"traceparent":"00-0af7651916cd43dd8448eb211c80319c-00f067aa0ba902b7-01","baggage":"b=1","tracestate":"k=v"}}"#
        );
    }

    #[test]
    fn trace_context_creates_meta_and_params_when_absent() {
        let (new, token) = rewrite_meta(None, 1, Some(&trace()), None).unwrap();
        assert!(token.is_none());
        let new = new.unwrap();
        let v: serde_json::Value = serde_json::from_str(new.get()).unwrap();
        assert_eq!(v["_meta"]["tracestate"], "k=v");
        let p = RawValue::from_string(r#"{"cursor":"c","_meta":{"tracestate":"stale"}}"#.into())
            .unwrap();
        let only_parent = Propagation {
            tracestate: None,
            ..trace()
        };
        let new = rewrite_meta(Some(&p), 1, Some(&only_parent), None)
            .unwrap()
            .0
            .unwrap();
        let v: serde_json::Value = serde_json::from_str(new.get()).unwrap();
        assert_eq!(v["cursor"], "c");
        assert!(v["_meta"].get("tracestate").is_none(), "{v}");
        assert!(v["_meta"]["traceparent"].is_string());
    }

    #[test]
    fn malformed_meta_is_left_alone_when_only_tracing() {
        let p = RawValue::from_string(r#"{"_meta":5}"#.into()).unwrap();
        let (new, _) = rewrite_meta(Some(&p), 1, Some(&trace()), None).unwrap();
        assert!(new.is_none());
    }
}
