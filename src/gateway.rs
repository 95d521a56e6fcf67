//! `Gateway`: the running state shared by every request — tenants by endpoint path, the
//! session store, and the session lifecycle (create, find, expire, delete).

use std::collections::HashMap;
use std::sync::Arc;
use std::time::Duration;

use tokio::sync::watch;

use crate::config::{Config, Limits, StoreConfig};
use crate::error::GatewayError;
use crate::session::memory::MemorySessionStore;
use crate::session::{LiveSession, SessionBackend, SessionId, SessionKey, SessionStore};
use crate::tenant::Tenant;

/// The user of requests on tenants without authentication.
pub const ANONYMOUS: &str = "anonymous";

pub struct Gateway {
    tenants: HashMap<String, Arc<Tenant>>,
    pub store: SessionBackend,
    pub session_ttl: Duration,
    pub limits: Limits,
    /// Whether the listener is bound to a loopback address (stricter Host/Origin defaults).
    loopback: bool,
    shutdown: watch::Sender<bool>,
}

impl Gateway {
    /// Builds every tenant (starting shared upstream processes) from a validated config.
    pub fn start(config: &Config) -> Result<Arc<Gateway>, String> {
        let tenants = config
            .tenants
            .iter()
            .map(|t| Ok((t.path.clone(), Tenant::start(t, &config.limits)?)))
            .collect::<Result<HashMap<_, _>, String>>()?;
        let store = match config.sessions.store {
            StoreConfig::Memory => SessionBackend::Memory(MemorySessionStore::new()),
        };
        Ok(Arc::new(Gateway {
            tenants,
            store,
            session_ttl: config.sessions.ttl,
            limits: config.limits.clone(),
            loopback: config.listen.ip().is_loopback(),
            shutdown: watch::channel(false).0,
        }))
    }

    pub fn tenant_by_path(&self, path: &str) -> Option<&Arc<Tenant>> {
        self.tenants.get(path)
    }

    pub fn listens_on_loopback(&self) -> bool {
        self.loopback
    }

    /// The tenant whose endpoint path is `path` minus the RFC 9728 well-known prefix.
    pub fn tenant_by_metadata_path(&self, path: &str) -> Option<&Arc<Tenant>> {
        let rest = path.strip_prefix(crate::auth::METADATA_PREFIX)?;
        self.tenants.get(rest)
    }

    pub fn tenants(&self) -> impl Iterator<Item = &Arc<Tenant>> {
        self.tenants.values()
    }

    /// Resolves a presented session id for `user` on `tenant`. Unknown, expired, deleted, or
    /// belonging to someone else all look the same: `SessionNotFound`.
    pub async fn find_session(
        &self,
        tenant: &Tenant,
        user: &str,
        presented: &str,
    ) -> Result<Arc<LiveSession>, GatewayError> {
        let id = SessionId::from_presented(presented).ok_or(GatewayError::SessionNotFound)?;
        let session = tenant
            .directory
            .get(&id)
            .filter(|s| &*s.key.user == user && !s.is_closed())
            .ok_or(GatewayError::SessionNotFound)?;
        session.touch();
        // The stored TTL slides too, but one store write per tenth of the TTL is enough.
        if session.store_touch_due(self.session_ttl / 10)
            && let Err(e) = self.store.touch(&session.key, self.session_ttl).await
        {
            tracing::warn!(error = %e, "could not refresh a session's time-to-live");
        }
        Ok(session)
    }

    /// Ends a session everywhere: live state, upstream connections, stored record.
    pub async fn end_session(&self, tenant: &Tenant, key: &SessionKey) -> bool {
        let live = tenant.directory.remove(&key.id);
        if let Some(s) = &live {
            s.close().await;
        }
        let stored = self.store.delete(key).await.unwrap_or_else(|e| {
            tracing::warn!(error = %e, "could not delete a session record");
            false
        });
        live.is_some() || stored
    }

    /// Ends sessions idle for longer than the TTL (no request, no open stream). Returns how
    /// many ended.
    pub async fn expire_idle(&self) -> usize {
        let mut ended = 0;
        for tenant in self.tenants.values() {
            for s in tenant.directory.all() {
                if s.idle_since().elapsed() >= self.session_ttl && !s.is_attached() {
                    tracing::info!(tenant = %tenant.name, session = ?s.key.id, "session expired");
                    self.end_session(tenant, &s.key).await;
                    ended += 1;
                }
            }
        }
        match &self.store {
            SessionBackend::Memory(m) => {
                m.purge_expired();
            }
        }
        ended
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
        futures_util::future::join_all(self.tenants.values().map(|t| t.shutdown())).await;
    }
}
