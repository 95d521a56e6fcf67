//! The handshake deadline (`handshake_timeout`): a session that has not sent
//! `notifications/initialized` within it is closed everywhere — live state, child processes,
//! record, count. The same watch closes a 2024-11-05 stream that never sent `initialize`
//! (within the deadline, or the session idle time if shorter). With a shared store the
//! notification may have reached another replica: the stored record decides.

use std::sync::{Arc, Weak};
use std::time::Duration;

use super::Gateway;
use crate::session::{LiveSession, SessionKey, SessionStore};
use crate::tenant::Tenant;

/// Closes `session` after `deadline` unless it is initialized by then. The timer ends as soon
/// as `notifications/initialized` arrives here, so a well-behaved session holds nothing.
pub fn watch_session(
    gateway: &Gateway,
    tenant: &Arc<Tenant>,
    session: &Arc<LiveSession>,
    deadline: Duration,
) {
    let (gateway, tenant, session) = (gateway.weak(), tenant.clone(), session.clone());
    tokio::spawn(async move {
        if session.initialized_within(deadline).await {
            return;
        }
        let key = session.key.clone();
        drop(session);
        close_unless_initialized(gateway, tenant, key, deadline).await;
    });
}

/// Closes the 2024-11-05 stream of `key` after `deadline` unless its session was opened (here
/// or on another replica) and initialized by then.
pub fn watch_stream(gateway: &Gateway, tenant: &Arc<Tenant>, key: &SessionKey, deadline: Duration) {
    let (gateway, tenant, key) = (gateway.weak(), tenant.clone(), key.clone());
    tokio::spawn(async move {
        tokio::time::sleep(deadline).await;
        close_unless_initialized(gateway, tenant, key, deadline).await;
    });
}

/// The deadline has passed: the session (or stream) of `key` is closed unless it is
/// initialized here or, per the stored record, elsewhere.
async fn close_unless_initialized(
    gateway: Weak<Gateway>,
    tenant: Arc<Tenant>,
    key: SessionKey,
    deadline: Duration,
) {
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
