//! Everything an upstream sends, routed: responses by id to their pending entry (re-emitted
//! with the client's id, resource URIs namespaced), progress by token (the client's token
//! restored), notifications and requests to the client onto the related request's stream or
//! the owning session's GET stream (list changes to every session of a shared connection,
//! resource updates to those that subscribed), the upstream's cancellations of its own
//! requests, and server-to-client requests (refused at once when the client cannot take
//! them). A batch is split into its members.

use std::sync::Arc;

use bytes::Bytes;
use serde_json::value::RawValue;

use super::connection::{Connection, InternalReply};
use super::link::Link;
use super::owner::{ClientSession, Owner};
use super::pending::{Pending, our_id};
use super::server_requests::{ServerRequestRoute, refused};
use super::{StreamEvent, Verdict};
use crate::error::{GatewayError, ServerRequestRefusal};
use crate::jsonrpc::{self, Message, Notification, Outcome, RawObject, Request};
use crate::protocol::rewrite;
use crate::protocol::{ListKind, logging};

impl Connection {
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
                    Some(Pending::Forward(slot))
                        if slot.retry.is_some()
                            && let Outcome::Result(result) = r.outcome
                            && super::retry::is_input_required(result) =>
                    {
                        super::retry::spawn(self.clone(), id, slot, result.to_owned());
                    }
                    Some(Pending::Forward(slot)) => {
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
                        let verdict = Verdict::of(&outcome, slot.tool_call);
                        let out = jsonrpc::response_with_id(slot.client_id.get(), outcome);
                        let _ = slot
                            .sink
                            .send(StreamEvent::Response(Bytes::from(out), verdict));
                    }
                    Some(Pending::Internal(tx)) => {
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
        if !matches!(self.link, Link::Stdio(_) | Link::Sse(_)) {
            return related;
        }
        self.only_call_in_flight(related)
    }

    /// `related`, or else the one forwarded request in flight (none when there are several).
    fn only_call_in_flight(&self, related: Option<u64>) -> Option<u64> {
        if related.is_some() {
            return related;
        }
        let mut found = None;
        for id in self
            .pending
            .keys_where(|p| matches!(p, Pending::Forward(_)))
        {
            if !self.waiting.contains_key(&id) {
                if found.is_some() {
                    return None;
                }
                found = Some(id);
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
        if n.method == "notifications/message" && !self.level_wanted(n, related) {
            return;
        }
        if self.send_to_request(related, StreamEvent::Message(bytes.clone())) {
            return;
        }
        match self.owner_session() {
            Some(s) => {
                // A task's status, or a message about a task: named as the client knows it.
                let renamed = crate::protocol::tasks::rename_message_task_id(bytes, |own| {
                    s.public_task_id(&self.info.name, own)
                        .unwrap_or_else(|| own.to_owned())
                });
                s.deliver_unsolicited(renamed.map_or_else(|| bytes.clone(), Bytes::from));
            }
            None if self.is_shared() => {
                tracing::debug!(upstream = %self.info.name, method = %n.method, "unsolicited notification on a shared connection not relayed (no single owner)");
            }
            None => {}
        }
    }

    /// Whether the session a log message goes to wants it: at or above the level it set with
    /// `logging/setLevel` (the gateway answers that method for every upstream, so one that
    /// does not filter — or offers no `logging` — is filtered here).
    fn level_wanted(&self, n: &Notification<'_>, related: Option<u64>) -> bool {
        let Some(level) = self.session_for(related).and_then(|s| s.log_level()) else {
            return true;
        };
        if logging::wanted(n.params, &level) {
            return true;
        }
        tracing::trace!(upstream = %self.info.name, "log message below the client's level dropped");
        false
    }

    fn broadcast_or_deliver(&self, bytes: Bytes) {
        match &self.owner {
            Owner::Session(_) => {
                if let Some(s) = self.owner_session() {
                    s.deliver_unsolicited(bytes);
                }
            }
            Owner::Shared(all) => {
                if let Some(all) = all.upgrade() {
                    all.broadcast(&bytes);
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
            Owner::Session(_) => {
                if let Some(s) = self.owner_session() {
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
        self.pending.with(&id, |pending| {
            let Pending::Forward(slot) = pending else {
                return;
            };
            let Some(token) = &slot.client_token else {
                return;
            };
            obj.set("progressToken", token.clone());
            let out = jsonrpc::notification_with("notifications/progress", &obj);
            let _ = slot.sink.send(StreamEvent::Progress(Bytes::from(out)));
        });
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
        let out = jsonrpc::notification_with("notifications/cancelled", &obj);
        session.deliver_unsolicited(Bytes::from(out));
    }

    /// The session a message belongs to: the related request's session, else the owner.
    fn session_for(&self, related: Option<u64>) -> Option<Arc<dyn ClientSession>> {
        if let Some(id) = related
            && let Some(Some(session)) = self.pending.with(&id, |pending| match pending {
                Pending::Forward(slot) => Some(slot.session.upgrade()),
                Pending::Internal(_) => None,
            })
        {
            return session;
        }
        self.owner_session()
    }

    /// A request from the upstream to the client (sampling, elicitation, roots, ping): one the
    /// client did not declare the capability for is refused at once, never forwarded; else it
    /// gets a client-facing id (refused when the session has its limit waiting already; it
    /// expires unanswered), is delivered on the related response stream or the session's GET
    /// stream, and the client's answer is routed back by the session (`ClientSession`).
    fn on_server_request(self: &Arc<Self>, r: &Request<'_>, related: Option<u64>) {
        // Over HTTP too: a request the upstream sends on its GET stream while one call is in
        // flight (e.g. `roots/list` from inside a tool) is that call's, and goes where the
        // call's answer goes — the only way to reach a client without a GET stream (every
        // 2026-07-28 client, which gets it as an `input_required` result).
        let related = self.only_call_in_flight(related);
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
        if self.send_to_request(related, StreamEvent::Request(out.clone())) {
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
