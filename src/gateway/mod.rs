//! `Gateway`: the running state shared by every request — tenants, the session store, the bus
//! to the other replicas — and the session lifecycle: create, find (also sessions another
//! replica created), persist, expire, delete. A config reload swaps the tenant table whole
//! (`apply`); requests read it without locks.

mod apply;
mod bus;
pub mod handshake;
mod open;
pub mod parked;
pub mod status;

pub use apply::ReloadReport;
pub use bus::RequestRelay;

use std::collections::HashMap;
use std::sync::{Arc, Mutex, Weak};
use std::time::Duration;

use arc_swap::ArcSwap;
use tokio::sync::watch;

use crate::cluster::{Bus, BusMessage};
use crate::config::{Config, Limits};
use crate::error::GatewayError;
use crate::session::{
    LiveSession, SessionBackend, SessionId, SessionKey, SessionStore, StoreError,
};
use crate::tenant::Tenant;
use crate::upstream::Ending;

pub struct Gateway {
    /// The gateway itself, for tasks that must not keep it alive (handshake deadlines).
    me: Weak<Gateway>,
    /// The tenants being served, swapped whole by a config reload.
    tenants: ArcSwap<TenantTable>,
    /// The config last applied (what a reload is compared with); also serializes reloads.
    applied: tokio::sync::Mutex<Config>,
    pub store: SessionBackend,
    pub bus: Arc<Bus>,
    pub session_ttl: Duration,
    /// What one session may hold (server-to-client requests, GET connections).
    pub session_bounds: crate::config::SessionBounds,
    pub limits: Limits,
    /// Reads every client request body under `limits` and the process-wide body budget.
    pub bodies: crate::listener::body::BodyReader,
    /// Tenant limits' state (buckets, session counters, upstream gates).
    pub limiter: crate::limits::Limiter,
    /// Proxies trusted to name the client (`Forwarded`, `X-Forwarded-For`), for the client
    /// address that per-user limits of tenants without `auth` count.
    pub trusted_proxies: Vec<crate::config::Cidr>,
    /// The runtimes client connections are served on (`connection_workers: per-core`; read
    /// at start, not reloaded); `None`: the process's runtime.
    pub workers: Option<crate::workers::Workers>,
    /// Whether the listener is bound to a loopback address (stricter Host/Origin defaults).
    loopback: bool,
    shutdown: watch::Sender<bool>,
    bus_listener: Mutex<Option<tokio::task::JoinHandle<()>>>,
    /// Forwarded requests whose events are still being recorded (drained at shutdown).
    pumps: Arc<Pumps>,
    /// Requests of stateless clients waiting for their retry with the input they need.
    pub interactions: parked::Interactions,
    /// The router's and the HTTP layer's part of the bus (`bus.rs`).
    relay: Box<dyn RequestRelay>,
    /// How the config file's last load or reload went (`status.rs`).
    config_status: status::ConfigRecord,
    /// The bearer token the admin status page requires (fixed at start, like the listener).
    pub admin_token: Option<crate::config::AdminToken>,
}

/// The tenants of one config, by endpoint path and by name (keys from the config: hashed with
/// foldhash, not SipHash, as a lookup per request needs no defence against chosen keys).
#[derive(Default)]
pub struct TenantTable {
    by_path: HashMap<String, Arc<Tenant>, foldhash::fast::RandomState>,
    by_name: HashMap<String, Arc<Tenant>, foldhash::fast::RandomState>,
}

impl TenantTable {
    fn new(tenants: Vec<Arc<Tenant>>) -> TenantTable {
        TenantTable {
            by_path: tenants
                .iter()
                .map(|t| (t.config.path.clone(), t.clone()))
                .collect(),
            by_name: tenants
                .into_iter()
                .map(|t| (t.name.to_string(), t))
                .collect(),
        }
    }

    pub fn iter(&self) -> impl Iterator<Item = &Arc<Tenant>> {
        self.by_name.values()
    }

    pub fn by_name(&self, name: &str) -> Option<&Arc<Tenant>> {
        self.by_name.get(name)
    }
}

/// The count of request pumps running, and a wake-up when it reaches zero.
#[derive(Default)]
pub struct Pumps {
    running: std::sync::atomic::AtomicUsize,
    idle: tokio::sync::Notify,
}

impl Gateway {
    /// Builds every tenant (starting shared upstream processes) and starts listening on the bus.
    pub fn start(
        config: &Config,
        store: SessionBackend,
        bus: Bus,
        relay: Box<dyn RequestRelay>,
    ) -> Result<Arc<Gateway>, String> {
        let bus = Arc::new(bus);
        let workers = match config.connection_workers {
            crate::config::ConnectionWorkers::PerCore => Some(
                crate::workers::Workers::per_core()
                    .map_err(|e| format!("cannot start the connection workers: {e}"))?,
            ),
            crate::config::ConnectionWorkers::Shared => None,
        };
        let tenants = {
            // Shared stdio processes are spread over the workers.
            let _spreading = workers.as_ref().map(crate::workers::Workers::spreading);
            config
                .tenants
                .iter()
                .map(|t| Tenant::start(t, &config.limits, bus.tenant_key(&t.name)))
                .collect::<Result<Vec<_>, String>>()?
        };
        let limiter = crate::limits::Limiter::new(&store, config.limits.max_session_processes);
        let gateway = Arc::new_cyclic(|me| Gateway {
            me: me.clone(),
            tenants: ArcSwap::from_pointee(TenantTable::new(tenants)),
            applied: tokio::sync::Mutex::new(config.clone()),
            store,
            bus: bus.clone(),
            session_ttl: config.sessions.ttl,
            session_bounds: config.sessions.bounds,
            limits: config.limits.clone(),
            bodies: crate::listener::body::BodyReader::new(&config.limits),
            trusted_proxies: config.trusted_proxies.clone(),
            workers,
            limiter,
            loopback: config.listen.ip().to_canonical().is_loopback(),
            shutdown: watch::channel(false).0,
            bus_listener: Mutex::new(None),
            pumps: Arc::default(),
            interactions: Default::default(),
            relay,
            config_status: status::ConfigRecord::loaded(
                config.source.as_ref().map(|p| p.display().to_string()),
            ),
            admin_token: config.admin_token.clone(),
        });
        let weak: Weak<Gateway> = Arc::downgrade(&gateway);
        let listener = bus.spawn_listener(move |msg| {
            if let Some(g) = weak.upgrade() {
                g.on_bus(msg);
            }
        });
        if let Ok(mut l) = gateway.bus_listener.lock() {
            *l = listener;
        }
        Ok(gateway)
    }

    /// The gateway, for a task that must not keep it alive.
    pub fn weak(&self) -> Weak<Gateway> {
        self.me.clone()
    }

    pub fn tenant_by_path(&self, path: &str) -> Option<Arc<Tenant>> {
        self.tenants.load().by_path.get(path).cloned()
    }

    pub fn listens_on_loopback(&self) -> bool {
        self.loopback
    }

    /// The tenant whose endpoint path is `path` minus the RFC 9728 well-known prefix.
    pub fn tenant_by_metadata_path(&self, path: &str) -> Option<Arc<Tenant>> {
        let rest = path.strip_prefix(crate::auth::METADATA_PREFIX)?;
        self.tenant_by_path(rest)
    }

    /// The tenants being served now (a snapshot: a reload does not change it).
    pub fn tenants(&self) -> Arc<TenantTable> {
        self.tenants.load_full()
    }

    /// Resolves a presented session id for `user` on `tenant`: live on this replica, or
    /// created elsewhere and loaded from the store. Unknown, expired, deleted, or belonging to
    /// someone else all look the same: `SessionNotFound` (the last is logged as a security
    /// event).
    pub async fn find_session(
        &self,
        tenant: &Tenant,
        user: &str,
        presented: &str,
    ) -> Result<Arc<LiveSession>, GatewayError> {
        // Looked up by the presented text: the id itself is made only on the rare branches.
        if !SessionId::presentable(presented) {
            return Err(GatewayError::SessionNotFound);
        }
        let local = tenant.directory.get(presented).filter(|s| !s.is_closed());
        let session = match local {
            Some(s) if &*s.key.user == user => {
                self.refresh_lifecycle(&s).await;
                s
            }
            // The rare branches are boxed: their store round trips are large states that
            // would otherwise size (and be copied with) every request's future.
            Some(s) => {
                Box::pin(self.report_foreign_id(tenant, &s.key.id)).await;
                return Err(GatewayError::SessionNotFound);
            }
            None => {
                let id =
                    SessionId::from_presented(presented).ok_or(GatewayError::SessionNotFound)?;
                Box::pin(self.resume(tenant, user, id)).await?
            }
        };
        // The stored TTL slides too, but one store write per tenth of the TTL is enough.
        if session.touch(self.session_ttl / 10) {
            Box::pin(self.slide_stored(tenant, &session)).await?;
        }
        Ok(session)
    }

    /// Slides the stored record's TTL (see `touch_stored`); a session ended elsewhere (or
    /// expired) is gone here too.
    async fn slide_stored(
        &self,
        tenant: &Tenant,
        session: &Arc<LiveSession>,
    ) -> Result<(), GatewayError> {
        match self.touch_stored(session).await {
            Ok(true) => {}
            Ok(false) => {
                self.limiter.sessions.release(session).await;
                self.drop_local(tenant, &session.key, Ending::End).await;
                return Err(GatewayError::SessionNotFound);
            }
            Err(e) => tracing::warn!(error = %e, "could not refresh a session's time-to-live"),
        }
        Ok(())
    }

    /// Restarts the stored record's time-to-live and, with it, the session's entries in the
    /// live-session counts (together: one round trip each, concurrently).
    async fn touch_stored(&self, session: &LiveSession) -> Result<bool, StoreError> {
        let (touched, ()) = futures_util::future::join(
            self.store.touch(&session.key, self.session_ttl),
            self.limiter.sessions.refresh(session, self.session_ttl),
        )
        .await;
        touched
    }

    /// With a shared store, `notifications/initialized` may have reached another replica: a
    /// session that is not initialized here checks the record (once per request, only until
    /// it is initialized).
    async fn refresh_lifecycle(&self, session: &LiveSession) {
        if session.is_initialized() || matches!(self.store, SessionBackend::Memory(_)) {
            return;
        }
        // Boxed: a store round trip, for the few requests before the session is initialized.
        match Box::pin(self.store.load(&session.key, self.session_ttl)).await {
            Ok(Some(record)) if record.initialized => session.adopt_initialized(),
            Ok(_) => {}
            Err(e) => tracing::warn!(error = %e, "could not re-read a session's lifecycle state"),
        }
    }

    /// A session not live on this replica: from the store, if it exists for this user.
    async fn resume(
        &self,
        tenant: &Tenant,
        user: &str,
        id: SessionId,
    ) -> Result<Arc<LiveSession>, GatewayError> {
        let key = SessionKey {
            tenant: tenant.name.clone(),
            user: user.into(),
            id,
        };
        let record = self
            .store
            .load(&key, self.session_ttl)
            .await
            .map_err(store_unavailable)?;
        let Some(record) = record else {
            self.report_foreign_id(tenant, &key.id).await;
            return Err(GatewayError::SessionNotFound);
        };
        let session = LiveSession::from_record(key, record, self.bus.clone())
            .with_bounds(self.session_bounds)
            .with_process_source(self.limiter.sessions.process_source(&tenant.for_limits()));
        let session = Arc::new(session);
        tracing::info!(tenant = %tenant.name, session = ?session.key.id, replica = %self.bus.replica, "session continued on this replica");
        // Two requests racing here keep one live state.
        Ok(tenant.directory.insert_or_get(session))
    }

    /// Logs, as a security event, a session id that exists but belongs to another user or
    /// tenant. The caller answers exactly as for an unknown id.
    async fn report_foreign_id(&self, tenant: &Tenant, id: &SessionId) {
        if let Ok(Some((owner_tenant, _))) = self.store.owner_of(id).await {
            tracing::warn!(
                target: "switchyard::security",
                tenant = %tenant.name,
                owner_tenant = %owner_tenant,
                session = ?id,
                "session id presented by a user or tenant it does not belong to; answered 404"
            );
        }
    }

    /// Writes the session's record back if it changed (initialized, a new upstream session).
    pub async fn persist(&self, session: &LiveSession) {
        if !session.take_dirty() {
            return;
        }
        if let Err(e) = self
            .store
            .update(&session.key, &session.record(), self.session_ttl)
            .await
        {
            session.mark_dirty();
            tracing::warn!(error = %e, "could not write a session record back; will retry");
        }
    }

    /// Ends a session everywhere: live state here and on other replicas, upstream
    /// connections, the stored record.
    pub async fn end_session(
        &self,
        tenant: &Tenant,
        key: &SessionKey,
    ) -> Result<bool, GatewayError> {
        let stored = self.store.delete(key).await.map_err(store_unavailable)?;
        // Counted out wherever it ends (the budget is the live state's, here or loaded from
        // the record by `find_session`).
        if let Some(s) = tenant.directory.get(&key.id) {
            self.limiter.sessions.release(&s).await;
        }
        let live = self.drop_local(tenant, key, Ending::End).await;
        if let Err(e) = self
            .bus
            .broadcast(&BusMessage::Ended { to: key.into() })
            .await
        {
            tracing::warn!(error = %e, "other replicas not told of a session's end (their state expires)");
        }
        Ok(live || stored)
    }

    /// Closes the live state of a session on this replica only (and its 2024-11-05 stream, if
    /// held here).
    async fn drop_local(&self, tenant: &Tenant, key: &SessionKey, ending: Ending) -> bool {
        match Self::take_local(tenant, key) {
            Some(s) => {
                s.close_as(ending).await;
                true
            }
            None => false,
        }
    }

    /// Takes a session's live state out of this replica's directory (and finishes its
    /// 2024-11-05 stream, if held here), so the next request here no longer finds it; the
    /// caller closes what it returns.
    fn take_local(tenant: &Tenant, key: &SessionKey) -> Option<Arc<LiveSession>> {
        tenant.directory.legacy_streams.finish(&key.id, &key.user);
        tenant.directory.remove(&key.id)
    }

    /// Ends sessions idle for longer than the TTL (no request, no open stream), and keeps the
    /// stored records of sessions with an open stream alive. Returns how many ended.
    pub async fn expire_idle(&self) -> usize {
        let mut ended = 0;
        for tenant in self.tenants().iter() {
            for s in tenant.directory.all() {
                if s.is_attached() {
                    // Listening is activity: the record must not expire under an open stream.
                    if s.store_touch_due(self.session_ttl / 10)
                        && let Err(e) = self.touch_stored(&s).await
                    {
                        tracing::warn!(error = %e, "could not refresh a listening session's time-to-live");
                    }
                    continue;
                }
                if s.idle_since().elapsed() >= self.session_ttl {
                    tracing::info!(tenant = %tenant.name, session = ?s.key.id, "session expired");
                    // The record expires by its own TTL; with a shared store another replica
                    // may still serve the session, so its upstream sessions stay, and its
                    // count lapses with the record.
                    if matches!(self.store, SessionBackend::Memory(_)) {
                        self.limiter.sessions.release(&s).await;
                    }
                    self.drop_local(tenant, &s.key, self.store_ending()).await;
                    ended += 1;
                }
            }
        }
        if let SessionBackend::Memory(m) = &self.store {
            m.purge_expired();
        }
        ended
    }

    /// Sets the gauges that are read off current state at scrape time.
    pub fn refresh_gauges(&self) {
        let m = crate::metrics::get();
        for t in self.tenants().iter() {
            m.sessions
                .with_label_values(&[&*t.name])
                .set(i64::try_from(t.directory.len()).unwrap_or(i64::MAX));
            self.limiter.sessions.process_usage(&t.name);
            t.gates.usage(&t.name);
        }
    }

    /// Whether the gateway can serve new sessions (the store answers).
    pub async fn ready(&self) -> Result<(), StoreError> {
        self.store.ping().await
    }

    /// Readiness in full: the store, and the standing upstream processes judged by each
    /// tenant's failure policy (`closed`: every shared process must be up; `open`: reported
    /// only). Per-session and HTTP upstreams connect on demand and are not probed.
    pub async fn readiness(&self) -> Readiness {
        let store = self.store.ping().await.err().map(|e| e.to_string());
        let mut down = Vec::new();
        let mut ready = store.is_none();
        for t in self.tenants().iter() {
            for u in t.upstreams.iter() {
                let up = u.pool().iter().filter(|c| c.is_ready()).count();
                if up < u.pool().len() {
                    let closed = t.config.failure_policy == crate::config::FailurePolicy::Closed;
                    ready &= !closed;
                    down.push(format!(
                        "{}/{}: {up} of {} processes up{}",
                        t.name,
                        u.name(),
                        u.pool().len(),
                        if closed {
                            " (failure policy closed)"
                        } else {
                            ""
                        }
                    ));
                }
            }
        }
        Readiness { ready, store, down }
    }

    /// Counts a forwarded request whose events are being recorded until its response.
    pub fn pump_started(&self) -> PumpGuard {
        self.pumps
            .running
            .fetch_add(1, std::sync::atomic::Ordering::AcqRel);
        PumpGuard(self.pumps.clone())
    }

    /// Waits until every forwarded request has its response recorded (and, clustered, written
    /// to Redis), or `until`. `false` if time ran out.
    pub async fn drain_requests(&self, until: tokio::time::Instant) -> bool {
        let wait = async {
            loop {
                let idle = self.pumps.idle.notified();
                tokio::pin!(idle);
                idle.as_mut().enable();
                if self
                    .pumps
                    .running
                    .load(std::sync::atomic::Ordering::Acquire)
                    == 0
                {
                    return;
                }
                idle.await;
            }
        };
        let drained = tokio::time::timeout_at(until, wait).await.is_ok();
        let flushed = match &self.bus.events {
            Some(events) => {
                let left = until.saturating_duration_since(tokio::time::Instant::now());
                events.flush(left.max(Duration::from_secs(1))).await
            }
            None => true,
        };
        drained && flushed
    }

    /// A receiver that flips to `true` when the gateway shuts down (long streams end on it).
    pub fn shutdown_signal(&self) -> watch::Receiver<bool> {
        self.shutdown.subscribe()
    }

    /// Tells long-lived streams to end (the first step of shutdown).
    pub fn begin_shutdown(&self) {
        self.shutdown.send_replace(true);
    }

    /// Ends every stream and session and stops every upstream process.
    pub async fn shutdown(&self) {
        self.shutdown.send_replace(true);
        if let Some(task) = self.bus_listener.lock().ok().and_then(|mut l| l.take()) {
            task.abort();
        }
        let ending = self.store_ending();
        let tenants = self.tenants();
        futures_util::future::join_all(tenants.iter().map(|t| t.shutdown(ending))).await;
    }

    /// How live state ends when only this replica lets go: with a shared store the session
    /// lives on elsewhere, with the in-memory one it is over.
    fn store_ending(&self) -> Ending {
        match self.store {
            SessionBackend::Memory(_) => Ending::End,
            SessionBackend::Redis(_) => Ending::Release,
        }
    }
}

/// What `/readyz` reports.
#[derive(Debug)]
pub struct Readiness {
    pub ready: bool,
    /// Why the session store is unavailable, if it is.
    pub store: Option<String>,
    /// Upstreams with processes down: `tenant/upstream: n of m processes up`.
    pub down: Vec<String>,
}

/// Held by a request's event pump; the gateway's drain waits for all of them.
pub struct PumpGuard(Arc<Pumps>);

impl Drop for PumpGuard {
    fn drop(&mut self) {
        if self
            .0
            .running
            .fetch_sub(1, std::sync::atomic::Ordering::AcqRel)
            == 1
        {
            self.0.idle.notify_waiters();
        }
    }
}

fn store_unavailable(e: StoreError) -> GatewayError {
    tracing::error!(error = %e, "session store unavailable");
    GatewayError::StoreUnavailable
}
