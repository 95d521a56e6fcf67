//! What upstream connections may ask of a live session (`upstream::ClientSession`): the
//! client's identity for the upstream, deliveries to its GET stream, and the table of the
//! upstreams' requests waiting for the client's answer (bounded, each expiring; ids carry the
//! replica, so the answer may reach any replica).

use std::sync::Arc;
use std::sync::atomic::Ordering;

use bytes::Bytes;
use serde_json::value::RawValue;

use super::LiveSession;
use crate::error::ServerRequestRefusal;
use crate::jsonrpc::{self, OwnedId, RawObject};
use crate::protocol::{ProtocolVersion, modern};
use crate::store::UpstreamSessionRecord;
use crate::upstream::{ClientSession, Connection, InitParams, ProgressMapping, ServerRequestRoute};

impl ClientSession for LiveSession {
    fn pin(&self) -> usize {
        self.key.id.spread()
    }

    fn user(&self) -> &str {
        &self.key.user
    }

    fn protocol_version(&self) -> ProtocolVersion {
        self.protocol_version
    }

    fn init_params(&self) -> InitParams {
        InitParams {
            protocol_version: self.protocol_version,
            capabilities: self.client_capabilities.clone(),
            client_info: self.client_info.clone(),
        }
    }

    /// The client's capabilities and info, raw (serialized on first use).
    fn client_meta(&self) -> &modern::ClientMeta {
        self.client_meta.get_or_init(|| {
            Box::new(modern::ClientMeta::new(
                &self.client_capabilities,
                &self.client_info,
            ))
        })
    }

    fn log_level(&self) -> Option<Arc<str>> {
        LiveSession::log_level(self)
    }

    fn subscriptions(&self, upstream: &str) -> Vec<String> {
        LiveSession::subscriptions(self, upstream)
    }

    /// The upstream session to continue for `upstream`, if another replica opened one.
    fn take_resumable(&self, upstream: &str) -> Option<UpstreamSessionRecord> {
        self.resumable.lock().ok()?.remove(upstream)
    }

    fn mark_dirty(&self) {
        LiveSession::mark_dirty(self);
    }

    fn deliver_unsolicited(&self, bytes: Bytes) -> bool {
        LiveSession::deliver_unsolicited(self, bytes)
    }

    fn public_task_id(&self, upstream: &str, own: &str) -> Option<String> {
        self.task_namer.get().map(|name| name(upstream, own))
    }

    fn deliver_or(&self, bytes: Bytes, undeliverable: Box<dyn FnOnce() + Send>) -> bool {
        LiveSession::deliver_or(self, bytes, undeliverable)
    }

    fn end_inflight(&self, client_id: &str) {
        LiveSession::end_inflight(self, client_id);
    }

    /// Whether the client declared what upstream request `method` with `params` needs. A
    /// stateless (2026-07-28) session's requests say what their client can do one by one:
    /// the multi round-trip bridge checks those (`router::mrtr`).
    fn accepts_server_request(
        &self,
        method: &str,
        params: Option<&RawValue>,
    ) -> Result<(), ServerRequestRefusal> {
        use crate::protocol::client_requests::{Missing, check};
        if self.protocol_version.is_stateless() {
            return Ok(());
        }
        check(&self.client_capabilities, method, params).map_err(|missing| match missing {
            Missing::Capability(capability) => ServerRequestRefusal::NotDeclared {
                method: method.to_owned(),
                capability,
            },
            Missing::Feature(feature) => ServerRequestRefusal::FeatureNotDeclared {
                method: method.to_owned(),
                feature,
            },
        })
    }

    /// Records a request from an upstream and returns the id the client will see; refused
    /// when the session has its limit of requests waiting for the client already. Unanswered,
    /// it expires (the upstream gets an error).
    fn register_server_request(
        &self,
        route: ServerRequestRoute,
    ) -> Result<OwnedId, ServerRequestRefusal> {
        let n = self.next_server_request.fetch_add(1, Ordering::Relaxed);
        // The replica is in the id: the client's answer may reach any replica.
        let id = jsonrpc::raw_string(&format!("sy-{}-{n}", self.bus.replica));
        self.server_requests.insert(id.get(), route)?;
        Ok(id)
    }

    /// Replaces `_meta.progressToken` of a server-to-client request's params with a token of
    /// the gateway's; returns the new params and `(new token, original token)`.
    fn rewrite_server_progress(
        &self,
        params: &RawValue,
    ) -> Option<(Box<RawValue>, ProgressMapping)> {
        if !jsonrpc::may_hold(params.get(), "progressToken") {
            return None;
        }
        let mut obj = RawObject::parse(params).ok()?;
        let mut meta = RawObject::parse(obj.get("_meta")?).ok()?;
        let original = meta.get("progressToken")?.to_owned();
        let n = self.next_server_request.fetch_add(1, Ordering::Relaxed);
        let token = jsonrpc::raw_string(&format!("sy-p{}-{n}", self.bus.replica));
        meta.set("progressToken", token.clone());
        let meta = meta.to_raw();
        obj.set("_meta", meta);
        Some((obj.to_raw(), (token.get().into(), original)))
    }

    fn take_server_request(&self, client_id: &str) -> Option<ServerRequestRoute> {
        LiveSession::take_server_request(self, client_id)
    }

    /// Removes the request the upstream itself cancelled; returns the client-facing id.
    fn take_server_request_by_upstream(
        &self,
        conn: &Arc<Connection>,
        upstream_id: &str,
    ) -> Option<OwnedId> {
        let (key, _) = self.server_requests.take_where(|r| {
            r.upstream_id.get() == upstream_id
                && r.connection
                    .upgrade()
                    .is_some_and(|c| Arc::ptr_eq(&c, conn))
        })?;
        RawValue::from_string(key.into_string()).ok()
    }
}
