//! The handshake deadline (`handshake_timeout`): a session that has not sent
//! `notifications/initialized` within it is closed everywhere — live state, child processes,
//! record, count. The same watch closes a 2024-11-05 stream that never sent `initialize`
//! (within the deadline, or the session idle time if shorter). With a shared store the
//! notification may have reached another replica: the stored record decides.

use std::sync::{Arc, Weak};
use std::time::Duration;

use crate::gateway::Gateway;
use crate::session::{SessionKey, SessionStore};
use crate::tenant::Tenant;

/// Closes the session `key` (or its 2024-11-05 stream) after `deadline` unless it is
/// initialized by then. One timer task per session being opened; nothing after the deadline.
pub fn watch(gateway: &Gateway, tenant: &Arc<Tenant>, key: &SessionKey, deadline: Duration) {
    let (gateway, tenant, key) = (gateway.weak(), tenant.clone(), key.clone());
    tokio::spawn(close_unless_initialized(gateway, tenant, key, deadline));
}

async fn close_unless_initialized(
    gateway: Weak<Gateway>,
    tenant: Arc<Tenant>,
    key: SessionKey,
    deadline: Duration,
) {
    tokio::time::sleep(deadline).await;
    let Some(gateway) = gateway.upgrade() else {
        return;
    };
    let streams = &tenant.directory.legacy_streams;
    let live = tenant.directory.get(&key.id).filter(|s| !s.is_closed());
    match &live {
        Some(s) if s.is_initialized() => return,
        Some(_) => {}
        None => {
            // No session here: a 2024-11-05 stream still waiting for its `initialize` (its
            // session's own watch takes over once `initialize` is being answered), or a
            // session already ended.
            if streams.get(&key.id, &key.user).is_none() || streams.is_initializing(&key.id) {
                return;
            }
        }
    }
    // The stored record says whether another replica saw `notifications/initialized`.
    match gateway.store.load(&key, gateway.session_ttl).await {
        Ok(Some(record)) if record.initialized => {
            if let Some(s) = live {
                s.adopt_initialized();
            }
            return;
        }
        Ok(_) => {}
        Err(e) => {
            tracing::warn!(tenant = %tenant.name, session = ?key.id, error = %e, "handshake deadline not enforced: the session store is unavailable (the session is kept)");
            return;
        }
    }
    match live {
        Some(_) => {
            tracing::info!(tenant = %tenant.name, session = ?key.id, deadline_ms = deadline.as_millis() as u64, "session closed: no notifications/initialized within the handshake deadline");
            if let Err(e) = gateway.end_session(&tenant, &key).await {
                tracing::warn!(error = %e, session = ?key.id, "a session past its handshake deadline was not ended (its record expires)");
            }
        }
        None => {
            tracing::info!(tenant = %tenant.name, session = ?key.id, "2024-11-05 SSE stream closed: no initialize within the handshake deadline");
            streams.finish(&key.id, &key.user);
        }
    }
}
