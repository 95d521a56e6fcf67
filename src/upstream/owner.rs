//! Who receives what an upstream sends outside of any request: the client session a
//! connection serves, or every session of a tenant (a shared connection). Both are the session
//! layer's, above: the connection reaches them through the traits below, which `LiveSession`
//! and `SessionDirectory` implement.

use std::sync::{Arc, Weak};

use bytes::Bytes;
use serde_json::value::RawValue;

use super::Connection;
use super::handshake::InitParams;
use super::server_requests::{ProgressMapping, ServerRequestRoute};
use crate::error::ServerRequestRefusal;
use crate::jsonrpc::OwnedId;
use crate::protocol::{ProtocolVersion, modern};
use crate::store::UpstreamSessionRecord;

/// Who receives what an upstream sends outside of any request.
pub enum Owner {
    /// A connection dedicated to one client session.
    Session(Weak<dyn ClientSession>),
    /// A connection shared by every session of a tenant; unsolicited messages that concern
    /// everyone (list changes) are broadcast, others are logged.
    Shared(Weak<dyn Broadcast>),
}

/// What a connection needs of the client session it serves (or that a forwarded request came
/// from): the client's identity for the upstream, where unsolicited messages go, and the
/// session's table of the upstream's requests waiting for the client's answer.
pub trait ClientSession: Send + Sync {
    /// Which process of a shared pool the session is pinned to: the same on every replica.
    fn pin(&self) -> usize;
    /// The user (the audit event of a tool call).
    fn user(&self) -> &str;
    /// The revision negotiated with the client.
    fn protocol_version(&self) -> ProtocolVersion;
    /// What a connection dedicated to the session sends in `initialize`: the client's own.
    fn init_params(&self) -> InitParams;
    /// The client's capabilities and info, raw, for stateless upstreams' `_meta`.
    fn client_meta(&self) -> &modern::ClientMeta;
    /// The client's `logging/setLevel`, for upstreams that take it per request (and to set
    /// again on a new upstream session).
    fn log_level(&self) -> Option<Arc<str>>;
    /// The upstream's own URIs the client subscribed to at `upstream`, to subscribe to again
    /// on a new upstream session.
    fn subscriptions(&self, upstream: &str) -> Vec<String>;
    /// The upstream session another replica opened for `upstream`, to continue.
    fn take_resumable(&self, upstream: &str) -> Option<UpstreamSessionRecord>;
    /// The durable record changed (a new upstream session): it must be written back.
    fn mark_dirty(&self);
    /// An unsolicited notification for the client's GET stream; false if none takes it.
    fn deliver_unsolicited(&self, bytes: Bytes) -> bool;
    /// The id the client knows `upstream`'s task `own` by (tasks), once the router named
    /// this session's tasks; `None` before.
    fn public_task_id(&self, upstream: &str, own: &str) -> Option<String> {
        let _ = (upstream, own);
        None
    }
    /// A request to the client on its GET stream; `undeliverable` runs if no replica turns out
    /// to hold one (false: known at once).
    fn deliver_or(&self, bytes: Bytes, undeliverable: Box<dyn FnOnce() + Send>) -> bool;
    /// The forwarded request `client_id` (raw JSON) is over.
    fn end_inflight(&self, client_id: &str);
    /// Whether the client declared what an upstream request `method` with `params` needs.
    fn accepts_server_request(
        &self,
        method: &str,
        params: Option<&RawValue>,
    ) -> Result<(), ServerRequestRefusal>;
    /// The params of an upstream request with its `progressToken` swapped for the gateway's,
    /// and the mapping back; `None` when it has none.
    fn rewrite_server_progress(
        &self,
        params: &RawValue,
    ) -> Option<(Box<RawValue>, ProgressMapping)>;
    /// Records an upstream request waiting for the client; the id the client will see.
    fn register_server_request(
        &self,
        route: ServerRequestRoute,
    ) -> Result<OwnedId, ServerRequestRefusal>;
    /// The route of the client's answer to `client_id` (raw JSON), removed.
    fn take_server_request(&self, client_id: &str) -> Option<ServerRequestRoute>;
    /// Removes the request of `conn` the upstream itself cancelled; the client-facing id.
    fn take_server_request_by_upstream(
        &self,
        conn: &Arc<Connection>,
        upstream_id: &str,
    ) -> Option<OwnedId>;
}

/// Every session of a tenant on this replica: where a shared connection's list changes go.
pub trait Broadcast: Send + Sync {
    /// Sends a message to every session's GET stream.
    fn broadcast(&self, bytes: &Bytes);
}
