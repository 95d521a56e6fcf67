//! `Connection`: one MCP client session between the gateway and an upstream — what it is
//! (its upstream, its owner, what the upstream said in `initialize`, its revision). What it
//! does is split by concern: `pending.rs` (the ids used on the link and the table of requests
//! awaiting an answer), `meta.rs` (`_meta` on the way up), `inbound.rs` (the routing of
//! everything the upstream sends back), `link.rs` (the transports), `subscribe.rs` (resource
//! subscriptions).

use std::sync::atomic::{AtomicBool, AtomicU8, AtomicU32, AtomicU64, Ordering};
use std::sync::{Arc, RwLock, Weak};

use serde_json::value::RawValue;

use super::UpstreamInfo;
use super::handshake::{InitParams, UpstreamServer};
use super::link::Link;
use super::owner::{ClientSession, Owner};
use super::pending::Pending;
use super::table::Table;
use crate::jsonrpc::Outcome;
use crate::protocol::{ProtocolVersion, modern};

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

/// One MCP client session with an upstream (its concerns are split by file, see above).
pub struct Connection {
    pub(crate) info: Arc<UpstreamInfo>,
    pub(super) next_id: AtomicU64,
    pub(super) pending: Table<u64, Pending>,
    /// First attempt → current attempt of requests the gateway retried (`retry.rs`), so a
    /// cancellation naming the first reaches the one in flight.
    pub(super) aliases: Table<u64, u64>,
    /// Forwarded requests waiting for their client's answers (parked for a stateless
    /// client's retry): on stdio, a message without relation is not theirs.
    pub(super) waiting: Table<u64, ()>,
    /// On a shared connection: which sessions subscribed to which upstream resource URI (a
    /// `BTreeMap`: nothing allocated and no hasher kept while empty, as on most connections).
    pub(super) subscriptions:
        std::sync::Mutex<std::collections::BTreeMap<String, Vec<Weak<dyn ClientSession>>>>,
    server: RwLock<Option<Arc<UpstreamServer>>>,
    /// What `server`'s capabilities offer of tasks ([`TASK_EXTENSION`], [`TOOL_TASKS`]): asked
    /// on every `tools/call`, read without the lock and the walk through the capabilities.
    tasks: AtomicU8,
    /// The upstream speaks the stateless revision (or is being probed for it): requests carry
    /// the revision's `_meta` and headers, and `input_required` results are handled.
    stateless: AtomicBool,
    /// `init_params`' client, raw, for the `_meta` of the gateway's own requests (boxed: only
    /// stateless upstreams need it).
    pub(super) client_meta: std::sync::OnceLock<Box<modern::ClientMeta>>,
    /// The gateway's own `subscriptions/listen` is kept open on this (stateless) connection.
    pub(super) subscribed: AtomicBool,
    /// Woken when the resources followed change: the subscription is opened again with them.
    pub(super) resubscribe: Arc<tokio::sync::Notify>,
    pub(crate) init_params: InitParams,
    pub(crate) link: Link,
    pub(super) owner: Owner,
    /// Client notifications being relayed to the upstream now (at most [`MAX_RELAYS`]).
    relays: AtomicU32,
}

/// Client notifications one upstream connection relays at once. Each waits for the upstream
/// to take it (a stdio process's input, an HTTP POST) at most the request timeout; beyond this
/// many, further ones are dropped and counted, so a client sending notifications faster than
/// the upstream takes them holds neither tasks nor memory without bound.
pub const MAX_RELAYS: u32 = 64;

/// `Connection::tasks` bits: the upstream offers the tasks extension; its tool calls may
/// answer with tasks (the extension, or the 2025-11-25 `tasks.requests.tools.call`).
const TASK_EXTENSION: u8 = 1;
const TOOL_TASKS: u8 = 2;

/// A relay's place among [`MAX_RELAYS`], given back when dropped.
pub struct RelaySlot(Arc<Connection>);

impl RelaySlot {
    pub fn connection(&self) -> &Arc<Connection> {
        &self.0
    }
}

impl Drop for RelaySlot {
    fn drop(&mut self) {
        self.0.relays.fetch_sub(1, Ordering::AcqRel);
    }
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
            pending: Table::default(),
            waiting: Table::default(),
            aliases: Table::default(),
            subscriptions: Default::default(),
            server: RwLock::new(None),
            tasks: AtomicU8::new(0),
            stateless: AtomicBool::new(false),
            subscribed: AtomicBool::new(false),
            resubscribe: Arc::default(),
            client_meta: std::sync::OnceLock::new(),
            init_params,
            link,
            owner,
            relays: AtomicU32::new(0),
        }
    }

    /// A place to relay one client notification, if fewer than [`MAX_RELAYS`] are under way.
    pub fn relay_slot(self: &Arc<Self>) -> Option<RelaySlot> {
        self.relays
            .fetch_update(Ordering::AcqRel, Ordering::Acquire, |n| {
                (n < MAX_RELAYS).then_some(n + 1)
            })
            .ok()
            .map(|_| RelaySlot(self.clone()))
    }

    pub fn upstream_name(&self) -> &str {
        &self.info.name
    }

    /// Whether every session of the tenant shares this connection.
    pub fn is_shared(&self) -> bool {
        matches!(self.owner, Owner::Shared(_))
    }

    /// Tells the owning session its durable record changed (a new upstream session).
    pub(crate) fn owner_changed(&self) {
        if let Some(s) = self.owner_session() {
            s.mark_dirty();
        }
    }

    /// The session a dedicated connection serves (none on a shared one, or once it is gone).
    pub(super) fn owner_session(&self) -> Option<Arc<dyn ClientSession>> {
        match &self.owner {
            Owner::Session(s) => s.upgrade(),
            Owner::Shared(_) => None,
        }
    }

    /// What the upstream said in its last successful `initialize`.
    pub fn server(&self) -> Option<Arc<UpstreamServer>> {
        self.server.read().map(|s| s.clone()).unwrap_or(None)
    }

    pub(crate) fn set_server(&self, server: UpstreamServer) {
        self.stateless
            .store(server.protocol_version.is_stateless(), Ordering::Release);
        let caps = &server.capabilities;
        let mut tasks = 0;
        if crate::protocol::tasks::offers_extension(caps) {
            tasks |= TASK_EXTENSION;
        }
        if crate::protocol::tasks::offers_tool_tasks(caps) {
            tasks |= TOOL_TASKS;
        }
        self.tasks.store(tasks, Ordering::Release);
        let server = self.info.shared_server(server);
        if let Ok(mut s) = self.server.write() {
            *s = Some(server);
        }
    }

    /// Whether the upstream's capabilities offer the tasks extension (2026-07-28).
    pub fn offers_task_extension(&self) -> bool {
        self.tasks.load(Ordering::Acquire) & TASK_EXTENSION != 0
    }

    /// Whether the upstream's `tools/call` results may be tasks (either revision).
    pub fn offers_tool_tasks(&self) -> bool {
        self.tasks.load(Ordering::Acquire) & TOOL_TASKS != 0
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
}
