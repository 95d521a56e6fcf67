//! `LiveSession`: what one replica holds for a session while it serves it — upstream
//! connections, requests in flight (for cancellation), server-to-client requests awaiting the
//! client's answer, and the client's GET stream.

use std::collections::HashMap;
use std::sync::atomic::{AtomicBool, AtomicU64, AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Instant;

use super::moment::{Moment, Reading};
use super::{
    ClientTransport, InFlight, ProcessPermit, ProcessSource, SessionKey, SessionRecord,
    UpstreamSessionRecord,
};
use crate::cluster::Bus;
use crate::config::SessionBounds;
use crate::error::ServerRequestRefusal;
use crate::events::{EventLimits, SessionEvents, StreamKind, StreamLog, StreamOwner};
use crate::jsonrpc::SharedId;
use crate::protocol::ProtocolVersion;
use crate::upstream::{Connection, Ending, ServerRequestRoute, ServerRequests, UpstreamId};
use bytes::Bytes;
use serde_json::Value;
use serde_json::value::RawValue;
pub use streams::GetSlot;

/// The client's GET stream: opening, replacing, delivering to it (here or on the replica
/// holding it), `subscriptions/listen` listeners, and the count of GET connections.
#[path = "live_streams.rs"]
mod streams;
/// What upstream connections ask of the session (`upstream::ClientSession`).
#[path = "live_upstreams.rs"]
mod upstreams;

/// Where a forwarded client request went: the connection and the upstream-side id.
pub type InflightRoute = (Arc<Connection>, u64);

/// The process places a session holds before its links take them.
#[derive(Default)]
struct SessionProcesses {
    reserved: Vec<ProcessPermit>,
    source: Option<ProcessSource>,
}

/// A session's link to one upstream (by its `UpstreamId`): the connection, once open, and the
/// lock that makes concurrent requests open only one.
struct LinkSlot {
    upstream: UpstreamId,
    conn: Option<Arc<Connection>>,
    /// Whether the session owns the connection (dedicated) and closes it at the end.
    owned: bool,
    /// The place of a per-session process among the replica's (given back with the link).
    permit: Option<ProcessPermit>,
    connecting: Arc<tokio::sync::Mutex<()>>,
}

pub struct LiveSession {
    pub key: SessionKey,
    /// Whose per-user limits the session counts against (`Principal::budget`: the user, or
    /// the client's address on tenants without `auth`).
    pub budget: Arc<str>,
    /// Requests of the session being answered on this replica (`in_flight_per_session`).
    pub in_flight: InFlight,
    /// Per-session process places reserved at `initialize`, and where to take more.
    processes: Mutex<SessionProcesses>,
    /// The id as logs show it (`SessionId::hashed`), computed once.
    pub log_id: crate::store::HashedId,
    /// Negotiated with the client at `initialize`.
    pub protocol_version: ProtocolVersion,
    /// The transport the session was opened on (its id is valid there only).
    pub transport: ClientTransport,
    /// Shared with the session's connections and with other sessions presenting equal
    /// values (`interned.rs`).
    pub client_capabilities: Arc<Value>,
    pub client_info: Arc<Value>,
    /// Hash of `client_capabilities`: sessions with equal capabilities share cached lists.
    pub capabilities_fingerprint: u64,
    /// Whether `client_capabilities` declare the tasks extension, read once (every tool call
    /// asks).
    pub declares_tasks: bool,
    initialized: AtomicBool,
    /// Woken when the session becomes initialized (a GET stream may be waiting for it).
    handshake: tokio::sync::Notify,
    /// One slot per upstream the session has used. A handful at most, behind the session's own
    /// lock; keyed by upstream identity, so a config reload that adds, removes or reorders
    /// upstreams leaves the others' links alone.
    links: Mutex<Vec<LinkSlot>>,
    /// Client request id (raw JSON text) → where it was forwarded.
    inflight: Mutex<HashMap<SharedId, InflightRoute>>,
    /// Server-to-client requests waiting for the client's answer, by client-facing id (raw
    /// JSON text): bounded, each expiring.
    server_requests: ServerRequests,
    next_server_request: AtomicU64,
    /// GET (SSE) connections open now on this replica, and how many may be.
    get_connections: Arc<AtomicUsize>,
    max_get_streams: usize,
    /// Deliveries to another replica's GET stream in flight (bounded for notifications).
    remote_deliveries: Arc<AtomicUsize>,
    /// The log of the current GET stream: unsolicited messages are recorded there, for the
    /// client listening now or resuming later.
    get_stream: Mutex<Option<Arc<StreamLog>>>,
    /// Open `subscriptions/listen` streams (stateless clients): unsolicited messages go to
    /// each of them as well (a full queue drops notifications for that listener).
    listeners: Mutex<Vec<tokio::sync::mpsc::Sender<Bytes>>>,
    /// Every SSE stream of the session on this replica, recorded for resumption.
    pub events: SessionEvents,
    /// Last client activity, for idle expiry of the live state.
    last_seen: Moment,
    /// Last time the stored record's time-to-live was restarted (store writes are throttled).
    last_store_touch: Moment,
    closed: AtomicBool,
    /// The record changed (initialized, a new upstream session) and must be written back.
    dirty: AtomicBool,
    /// Milliseconds since the Unix epoch, for the record.
    created_at_ms: u64,
    /// Upstream sessions another replica opened, to continue instead of starting new ones.
    resumable: Mutex<std::collections::BTreeMap<String, UpstreamSessionRecord>>,
    /// Reaches the other replicas (their GET streams, their server-to-client requests).
    pub bus: Arc<Bus>,
    /// The client's `logging/setLevel`, for upstreams that take it per request, and to set
    /// again on a new upstream session.
    log_level: Mutex<Option<Arc<str>>>,
    /// The client's resource subscriptions (upstream name → its own URIs), to make again on a
    /// new upstream session (`SessionRecord::subscriptions`).
    subscriptions: Mutex<std::collections::BTreeMap<String, std::collections::BTreeSet<String>>>,
    /// The client's capabilities and info as raw JSON, for stateless upstreams' `_meta`
    /// (boxed: most sessions never need it).
    client_meta: std::sync::OnceLock<Box<crate::protocol::modern::ClientMeta>>,
    /// Names an upstream's task for this client (`upstream`, own id → public id): given by
    /// the router (`router::tasks`, the tenant's key) when the session first meets a task
    /// (boxed, a thin pointer: most sessions never meet one).
    pub task_namer: std::sync::OnceLock<Box<TaskNamer>>,
}

/// The resource subscriptions a session record keeps (all upstreams together), and the
/// longest URI it keeps: what a new upstream session is given again is bounded.
const MAX_RECORDED_SUBSCRIPTIONS: usize = 256;
const MAX_RECORDED_URI: usize = 2048;

/// See `LiveSession::task_namer`.
pub type TaskNamer = Arc<dyn Fn(&str, &str) -> String + Send + Sync>;

impl LiveSession {
    pub fn new(
        key: SessionKey,
        protocol_version: ProtocolVersion,
        client_capabilities: Value,
        client_info: Value,
        bus: Arc<Bus>,
    ) -> LiveSession {
        let capabilities_fingerprint = super::interned::fingerprint(&client_capabilities);
        let client_capabilities =
            super::interned::shared(client_capabilities, capabilities_fingerprint);
        let client_info = {
            let fingerprint = super::interned::fingerprint(&client_info);
            super::interned::shared(client_info, fingerprint)
        };
        LiveSession {
            log_id: key.id.hashed(),
            budget: key.user.clone(),
            in_flight: InFlight::default(),
            processes: Mutex::default(),
            key,
            protocol_version,
            transport: ClientTransport::StreamableHttp,
            capabilities_fingerprint,
            declares_tasks: crate::protocol::tasks::declares_extension(&client_capabilities),
            client_capabilities,
            client_info,
            initialized: AtomicBool::new(false),
            handshake: tokio::sync::Notify::new(),
            links: Mutex::default(),
            inflight: Mutex::default(),
            server_requests: ServerRequests::new(
                SessionBounds::default().max_server_requests,
                SessionBounds::default().server_request_timeout,
            ),
            next_server_request: AtomicU64::new(1),
            get_connections: Arc::default(),
            max_get_streams: SessionBounds::default().max_get_streams,
            remote_deliveries: Arc::default(),
            get_stream: Mutex::new(None),
            listeners: Mutex::default(),
            events: SessionEvents::new(EventLimits::default()),
            last_seen: Moment::now(),
            last_store_touch: Moment::now(),
            closed: AtomicBool::new(false),
            dirty: AtomicBool::new(false),
            created_at_ms: std::time::SystemTime::now()
                .duration_since(std::time::UNIX_EPOCH)
                .map_or(0, |d| d.as_millis() as u64),
            resumable: Mutex::default(),
            bus,
            log_level: Mutex::default(),
            subscriptions: Mutex::default(),
            client_meta: std::sync::OnceLock::new(),
            task_namer: std::sync::OnceLock::new(),
        }
    }

    /// The session as opened on `transport` (Streamable HTTP unless said otherwise).
    pub fn on_transport(mut self, transport: ClientTransport) -> LiveSession {
        self.transport = transport;
        self
    }

    /// The session as counted against `budget`'s per-user limits.
    pub fn charged_to(mut self, budget: Arc<str>) -> LiveSession {
        self.budget = budget;
        self
    }

    /// Where the session takes the places of per-session processes it had none reserved for.
    pub fn with_process_source(self, source: ProcessSource) -> LiveSession {
        if let Ok(mut p) = self.processes.lock() {
            p.source = Some(source);
        }
        self
    }

    /// Places reserved at `initialize` for the session's per-session processes.
    pub fn reserve_processes(&self, permits: Vec<ProcessPermit>) {
        if let Ok(mut p) = self.processes.lock() {
            if p.reserved.is_empty() {
                // Kept as given (sized to the permits), not grown to four places.
                p.reserved = permits;
            } else {
                p.reserved.extend(permits);
            }
        }
    }

    /// A place for one per-session process: a reserved one, else one taken now (`-32029`
    /// when a cap refuses); `None` when the session counts no processes.
    pub fn process_permit(&self) -> Result<Option<ProcessPermit>, crate::error::GatewayError> {
        let mut p = self
            .processes
            .lock()
            .map_err(|_| crate::error::GatewayError::Internal)?;
        if let Some(permit) = p.reserved.pop() {
            if p.reserved.is_empty() {
                // The session may live long after its processes started: no empty allocation.
                p.reserved = Vec::new();
            }
            return Ok(Some(permit));
        }
        match &p.source {
            Some(source) => source
                .take(&self.key.tenant)
                .map(Some)
                .map_err(crate::error::GatewayError::LimitReached),
            None => Ok(None),
        }
    }

    /// The session under `bounds` (the config's; the defaults otherwise).
    pub fn with_bounds(mut self, bounds: SessionBounds) -> LiveSession {
        self.server_requests =
            ServerRequests::new(bounds.max_server_requests, bounds.server_request_timeout);
        self.max_get_streams = bounds.max_get_streams;
        self
    }

    /// The live state of a session created elsewhere (another replica, or before a restart).
    pub fn from_record(key: SessionKey, record: SessionRecord, bus: Arc<Bus>) -> LiveSession {
        let version = ProtocolVersion::parse(&record.protocol_version)
            .unwrap_or(ProtocolVersion::LATEST_HANDSHAKE);
        let mut s = LiveSession::new(
            key,
            version,
            record.client_capabilities,
            record.client_info,
            bus,
        );
        s.created_at_ms = record.created_at_ms;
        if let Some(budget) = record.budget {
            s.budget = budget.into();
        }
        s.transport = record.transport;
        s.initialized = AtomicBool::new(record.initialized);
        s.resumable = Mutex::new(record.upstream_sessions);
        s.log_level = Mutex::new(record.log_level.map(Arc::from));
        s.subscriptions = Mutex::new(record.subscriptions);
        s
    }

    /// The durable record of this session as it stands.
    pub fn record(&self) -> SessionRecord {
        let mut upstream_sessions = self.resumable.lock().map(|r| r.clone()).unwrap_or_default();
        for conn in self.connections() {
            if let (Some(id), Some(server)) = (conn.upstream_session_id(), conn.server()) {
                upstream_sessions.insert(
                    conn.upstream_name().to_owned(),
                    UpstreamSessionRecord {
                        id,
                        protocol_version: server.protocol_version.as_str().to_owned(),
                        capabilities: server.capabilities.clone(),
                        server_info: server.server_info.clone(),
                        instructions: server.instructions.clone(),
                    },
                );
            }
        }
        SessionRecord {
            protocol_version: self.protocol_version.as_str().to_owned(),
            client_capabilities: Value::clone(&self.client_capabilities),
            client_info: Value::clone(&self.client_info),
            initialized: self.is_initialized(),
            upstream_sessions,
            subscriptions: self
                .subscriptions
                .lock()
                .map(|s| s.clone())
                .unwrap_or_default(),
            created_at_ms: self.created_at_ms,
            transport: self.transport,
            log_level: self.log_level().map(|l| l.to_string()),
            budget: (self.budget != self.key.user).then(|| self.budget.to_string()),
        }
    }

    /// The level of `logging/setLevel`, if the client set one.
    pub fn log_level(&self) -> Option<Arc<str>> {
        self.log_level.lock().ok()?.clone()
    }

    /// Records the client's `logging/setLevel` (written back to the store).
    pub fn set_log_level(&self, level: &str) {
        if let Ok(mut l) = self.log_level.lock() {
            *l = Some(level.into());
        }
        self.mark_dirty();
    }

    /// The upstream's own URIs of the resources the client subscribed to there.
    pub fn subscriptions(&self, upstream: &str) -> Vec<String> {
        self.subscriptions
            .lock()
            .ok()
            .and_then(|s| s.get(upstream).map(|uris| uris.iter().cloned().collect()))
            .unwrap_or_default()
    }

    /// Records a subscription the upstream accepted (`on`) or ended (written back to the
    /// store when it changes anything). Bounded, so no client grows the record at will: past
    /// `MAX_RECORDED_SUBSCRIPTIONS`, or for a URI longer than `MAX_RECORDED_URI`, the
    /// subscription holds on the upstream session it was made on only (logged).
    pub fn set_subscribed(&self, upstream: &str, uri: &str, on: bool) {
        let Ok(mut subs) = self.subscriptions.lock() else {
            return;
        };
        let changed = if on {
            let held: usize = subs.values().map(|uris| uris.len()).sum();
            let known = subs.get(upstream).is_some_and(|uris| uris.contains(uri));
            if !known && (held >= MAX_RECORDED_SUBSCRIPTIONS || uri.len() > MAX_RECORDED_URI) {
                tracing::warn!(session = %self.log_id, upstream, held, uri_bytes = uri.len(), "a subscription beyond what a session record keeps: it is not made again on a new upstream session");
                return;
            }
            subs.entry(upstream.to_owned())
                .or_default()
                .insert(uri.to_owned())
        } else {
            let removed = subs.get_mut(upstream).is_some_and(|uris| uris.remove(uri));
            if subs.get(upstream).is_some_and(|uris| uris.is_empty()) {
                subs.remove(upstream);
            }
            removed
        };
        drop(subs);
        if changed {
            self.mark_dirty();
        }
    }

    pub fn mark_dirty(&self) {
        self.dirty.store(true, Ordering::Release);
    }

    /// True once after the record changed: time to write it back.
    pub fn take_dirty(&self) -> bool {
        self.dirty.swap(false, Ordering::AcqRel)
    }

    pub fn is_initialized(&self) -> bool {
        self.initialized.load(Ordering::Acquire)
    }

    pub fn mark_initialized(&self) {
        if !self.initialized.swap(true, Ordering::AcqRel) {
            self.mark_dirty();
            self.handshake.notify_waiters();
        }
    }

    /// Initialized elsewhere (the stored record says so): nothing to write back.
    pub fn adopt_initialized(&self) {
        self.initialized.store(true, Ordering::Release);
        self.handshake.notify_waiters();
    }

    /// Whether the session is initialized, or becomes so on this replica within `limit`.
    pub async fn initialized_within(&self, limit: std::time::Duration) -> bool {
        let woken = self.handshake.notified();
        tokio::pin!(woken);
        woken.as_mut().enable();
        if self.is_initialized() {
            return true;
        }
        let _ = tokio::time::timeout(limit, woken).await;
        self.is_initialized()
    }

    /// Marks the session active now; true at most once per `store_every` (as
    /// [`LiveSession::store_touch_due`]): time to restart the stored record's time-to-live.
    /// One reading of the clock for both.
    pub fn touch(&self, store_every: std::time::Duration) -> bool {
        let now = Reading::take();
        self.last_seen.set(now);
        self.last_store_touch.advance_at(now, store_every)
    }

    pub fn idle_since(&self) -> Instant {
        self.last_seen.get()
    }

    /// Whether the client is still attached: a GET stream open or requests in flight. Such a
    /// session is not idle, however long ago its last POST was.
    pub fn is_attached(&self) -> bool {
        self.has_get_stream() || self.inflight.lock().is_ok_and(|m| !m.is_empty())
    }

    /// True at most once per `every`: time to restart the stored record's time-to-live.
    pub fn store_touch_due(&self, every: std::time::Duration) -> bool {
        self.last_store_touch.advance_after(every)
    }

    /// A new stream of the session, recorded for resumption (and mirrored to Redis on
    /// clustered gateways).
    pub fn open_stream(&self, kind: StreamKind) -> Arc<StreamLog> {
        let owner = StreamOwner {
            replica: &self.bus.replica,
            mirror: self.bus.events.as_deref().map(|redis| (redis, &self.key)),
        };
        self.events.open(kind, owner)
    }

    pub fn is_closed(&self) -> bool {
        self.closed.load(Ordering::Acquire)
    }

    // ---- Upstream links

    /// The session's current connection to `upstream`, if any.
    pub fn link(&self, upstream: UpstreamId) -> Option<Arc<Connection>> {
        let links = self.links.lock().ok()?;
        links.iter().find(|l| l.upstream == upstream)?.conn.clone()
    }

    /// Every open connection of the session.
    fn connections(&self) -> Vec<Arc<Connection>> {
        self.links
            .lock()
            .map(|l| l.iter().filter_map(|s| s.conn.clone()).collect())
            .unwrap_or_default()
    }

    /// Records the session's connection to `upstream`; `permit` is the place of its process
    /// if it is a per-session one (held as long as the link).
    pub fn set_link(
        &self,
        upstream: UpstreamId,
        conn: Arc<Connection>,
        owned: bool,
        permit: Option<ProcessPermit>,
    ) {
        self.with_slot(upstream, |slot| {
            slot.conn = Some(conn);
            slot.owned = owned;
            slot.permit = permit;
        });
    }

    /// The lock held while a connection to `upstream` is being opened.
    pub fn connect_lock(&self, upstream: UpstreamId) -> Option<Arc<tokio::sync::Mutex<()>>> {
        self.with_slot(upstream, |slot| slot.connecting.clone())
    }

    fn with_slot<R>(&self, upstream: UpstreamId, f: impl FnOnce(&mut LinkSlot) -> R) -> Option<R> {
        let mut links = self.links.lock().ok()?;
        let i = match links.iter().position(|l| l.upstream == upstream) {
            Some(i) => i,
            None => {
                // One slot more, not four: most sessions use one upstream or a few, and grow
                // by one only when they first use another (48 bytes a slot).
                links.reserve_exact(1);
                links.push(LinkSlot {
                    upstream,
                    conn: None,
                    owned: false,
                    permit: None,
                    connecting: Arc::default(),
                });
                links.len() - 1
            }
        };
        Some(f(&mut links[i]))
    }

    /// Lets go of the links to upstreams not in `keep` (a config reload removed or replaced
    /// them): connections the session owns are closed (their upstream sessions end), shared
    /// ones only stop carrying this session. What another replica recorded for those
    /// upstreams is forgotten too.
    pub async fn drop_links_except(&self, keep: &[UpstreamId]) {
        let gone: Vec<LinkSlot> = match self.links.lock() {
            Ok(mut links) => {
                let (kept, gone) = std::mem::take(&mut *links)
                    .into_iter()
                    .partition(|l| keep.contains(&l.upstream));
                *links = kept;
                gone
            }
            Err(_) => return,
        };
        let mut owned = Vec::new();
        let mut permits = Vec::new();
        for slot in gone {
            permits.extend(slot.permit);
            if let Some(conn) = slot.conn {
                if let Ok(mut r) = self.resumable.lock() {
                    r.remove(conn.upstream_name());
                }
                self.mark_dirty();
                if slot.owned {
                    owned.push(conn);
                } else {
                    self.leave_shared(&conn);
                }
            }
        }
        futures_util::future::join_all(owned.iter().map(|c| c.close_as(Ending::End))).await;
        // The processes are gone: their places are free.
        drop(permits);
    }

    /// A shared connection outlives the session: end the subscriptions nobody follows now.
    fn leave_shared(&self, conn: &Arc<Connection>) {
        let orphaned = conn.forget_subscriber(self);
        if conn.is_stateless() {
            // No unsubscribe on that revision: the gateway's subscription is renewed without them.
            if !orphaned.is_empty() {
                conn.resources_changed();
            }
            return;
        }
        for uri in orphaned {
            let params = serde_json::json!({ "uri": uri }).to_string();
            let conn = conn.clone();
            tokio::spawn(async move {
                let raw = RawValue::from_string(params).ok();
                let _ = conn
                    .call(
                        "resources/unsubscribe",
                        raw.as_deref(),
                        conn.info.request_timeout,
                    )
                    .await;
            });
        }
    }

    // ---- Requests in flight

    pub fn begin_inflight(&self, client_id: &SharedId, conn: Arc<Connection>, upstream_id: u64) {
        if let Ok(mut m) = self.inflight.lock() {
            m.insert(client_id.clone(), (conn, upstream_id));
        }
    }

    /// `client_id` is the raw JSON text.
    pub fn end_inflight(&self, client_id: &str) {
        if let Ok(mut m) = self.inflight.lock() {
            m.remove(client_id);
        }
    }

    /// Where the client request `client_id` (raw JSON text) went, if it is still running.
    pub fn inflight(&self, client_id: &str) -> Option<InflightRoute> {
        self.inflight.lock().ok()?.get(client_id).cloned()
    }

    // ---- Server-to-client requests

    /// Where a client progress notification for `token` (raw JSON text) goes: the upstream
    /// connection and its original token.
    pub fn server_progress_route(&self, token: &str) -> Option<(Arc<Connection>, Box<RawValue>)> {
        self.server_requests.find_map(|r| {
            let (mine, original) = r.progress.as_ref()?;
            (&**mine == token).then(|| Some((r.connection.upgrade()?, original.clone())))?
        })
    }

    /// The route for the client's answer to `client_id` (raw JSON text), removed.
    pub fn take_server_request(&self, client_id: &str) -> Option<ServerRequestRoute> {
        self.server_requests.take(client_id)
    }

    /// Server-to-client requests waiting for the client's answer now.
    pub fn server_requests_waiting(&self) -> usize {
        self.server_requests.len()
    }

    // ---- End of life

    /// Ends the session here and its upstream sessions everywhere.
    pub async fn close(&self) {
        self.close_as(Ending::End).await;
    }

    /// Closes the connections the session owns and ends its GET stream (upstream sessions end
    /// or stay, see `Ending`). Idempotent.
    pub async fn close_as(&self, ending: Ending) {
        if self.closed.swap(true, Ordering::AcqRel) {
            return;
        }
        // Finished explicitly: a 2024-11-05 session's stream is not one of `events`.
        if let Some(log) = self.get_stream.lock().ok().and_then(|mut g| g.take()) {
            log.finish();
        }
        self.events.finish_all();
        let slots = self
            .links
            .lock()
            .map(|mut l| std::mem::take(&mut *l))
            .unwrap_or_default();
        let mut owned = Vec::new();
        let mut permits = Vec::new();
        if let Ok(mut p) = self.processes.lock() {
            permits.append(&mut p.reserved);
        }
        for slot in slots {
            permits.extend(slot.permit);
            match slot.conn {
                Some(conn) if slot.owned => owned.push(conn),
                Some(conn) => self.leave_shared(&conn),
                None => {}
            }
        }
        let inflight: Vec<InflightRoute> = self
            .inflight
            .lock()
            .map(|mut m| m.drain().map(|(_, v)| v).collect())
            .unwrap_or_default();
        // Upstreams waiting for this client's answers are told now, not at their expiry.
        for route in self.server_requests.drain() {
            tokio::spawn(async move {
                crate::upstream::refuse(route, &ServerRequestRefusal::SessionEnded).await;
            });
        }
        for (conn, id) in inflight {
            // Shared connections outlive the session: stop its requests there explicitly.
            conn.cancel(id, "the client session ended");
        }
        futures_util::future::join_all(owned.iter().map(|c| c.close_as(ending))).await;
        drop(permits);
    }
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used)]
    use super::*;
    use crate::session::SessionId;
    use crate::upstream::ClientSession;

    fn session() -> LiveSession {
        let key = SessionKey {
            tenant: "t".into(),
            user: "u".into(),
            id: SessionId::generate(),
        };
        LiveSession::new(
            key,
            ProtocolVersion::V2025_11_25,
            serde_json::json!({}),
            serde_json::json!({}),
            Arc::new(Bus::local()),
        )
    }

    /// Accepted subscriptions go into the record and out again; the record keeps a bounded
    /// number of bounded URIs, and a change marks it for writing back.
    #[test]
    fn subscriptions_are_recorded_within_bounds() {
        let s = session();
        s.set_subscribed("files", "file:///a", true);
        assert!(s.take_dirty());
        s.set_subscribed("files", "file:///a", true);
        assert!(!s.take_dirty(), "nothing changed");
        assert_eq!(s.subscriptions("files"), ["file:///a"]);
        assert_eq!(s.record().subscriptions["files"].len(), 1);
        s.set_subscribed("files", "file:///a", false);
        assert!(s.take_dirty());
        assert!(
            s.record().subscriptions.is_empty(),
            "no empty upstream entry"
        );

        let long = format!("file:///{}", "x".repeat(MAX_RECORDED_URI));
        s.set_subscribed("files", &long, true);
        assert!(s.subscriptions("files").is_empty() && !s.take_dirty());
        for n in 0..MAX_RECORDED_SUBSCRIPTIONS + 10 {
            s.set_subscribed(&format!("u{}", n % 3), &format!("r://{n}"), true);
        }
        let kept: usize = s.record().subscriptions.values().map(|u| u.len()).sum();
        assert_eq!(kept, MAX_RECORDED_SUBSCRIPTIONS);
        let restored = LiveSession::from_record(s.key.clone(), s.record(), Arc::new(Bus::local()));
        assert_eq!(restored.subscriptions("u0"), s.subscriptions("u0"));
    }

    /// A session keeps one link slot per upstream it used (48 bytes each), not room for four
    /// from the first: most sessions use one upstream or a few, for as long as they live.
    #[test]
    fn link_slots_grow_one_at_a_time() {
        let s = session();
        let (a, b) = (UpstreamId::fresh(), UpstreamId::fresh());
        assert!(s.connect_lock(a).is_some());
        assert_eq!(s.links.lock().unwrap().capacity(), 1);
        let again = s.connect_lock(a).unwrap();
        assert!(
            Arc::ptr_eq(&again, &s.connect_lock(a).unwrap()),
            "one slot per upstream"
        );
        assert_eq!(s.links.lock().unwrap().len(), 1);
        assert!(s.connect_lock(b).is_some());
        let links = s.links.lock().unwrap();
        assert_eq!((links.len(), links.capacity()), (2, 2));
    }

    #[test]
    fn server_request_progress_tokens_are_swapped_and_kept_apart() {
        let s = session();
        let params =
            RawValue::from_string(r#"{"messages":[],"_meta":{"progressToken":7}}"#.to_owned())
                .unwrap();
        let (rewritten, (token, original)) = s.rewrite_server_progress(&params).unwrap();
        assert_eq!(original.get(), "7");
        assert!(
            rewritten
                .get()
                .contains(&format!("\"progressToken\":{token}"))
        );
        assert!(!rewritten.get().contains(":7}"));
        // A second request with the same upstream token gets a different client-facing token.
        let (_, (token2, _)) = s.rewrite_server_progress(&params).unwrap();
        assert_ne!(token, token2);
        // Params without a token are left alone.
        let plain = RawValue::from_string(r#"{"messages":[]}"#.to_owned()).unwrap();
        assert!(s.rewrite_server_progress(&plain).is_none());
    }

    #[tokio::test]
    async fn a_listener_that_does_not_read_holds_a_bounded_queue_and_stays() {
        let s = session();
        let mut rx = s.add_listener();
        for _ in 0..1000 {
            assert!(s.deliver_unsolicited(bytes::Bytes::from_static(b"{}")));
        }
        let mut queued = 0;
        while rx.try_recv().is_ok() {
            queued += 1;
        }
        assert_eq!(queued, 256);
        assert!(s.deliver_unsolicited(bytes::Bytes::from_static(b"{}")));
        assert!(rx.try_recv().is_ok(), "still listening once it read");
    }

    #[test]
    fn get_connections_are_counted_and_bounded() {
        let s = session().with_bounds(SessionBounds {
            max_get_streams: 2,
            ..SessionBounds::default()
        });
        let a = s.get_slot().expect("first");
        let _b = s.get_slot().expect("second");
        assert!(s.get_slot().is_none(), "a third is refused");
        drop(a);
        assert!(s.get_slot().is_some(), "a closed one makes room");
    }

    #[test]
    fn idle_and_attached() {
        let s = session();
        assert!(!s.is_attached());
        let log = s.open_get_stream();
        assert!(!s.is_attached(), "opened but nobody listens yet");
        let (_tx, rx) = tokio::sync::watch::channel(false);
        let _body = crate::events::tail(
            log,
            0,
            crate::events::TailEnd {
                keep_alive: bytes::Bytes::from_static(b": ka\n\n"),
                keep_alive_every: std::time::Duration::from_secs(15),
                shutdown: rx,
                on_keep_alive: None,
            },
        );
        assert!(s.is_attached(), "a listening GET stream keeps it attached");
        assert!(s.deliver_unsolicited(bytes::Bytes::from_static(b"{}")));
    }
}
