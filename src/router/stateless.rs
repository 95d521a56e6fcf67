//! What the gateway keeps for stateless (2026-07-28) clients: their requests carry no
//! session, but the upstreams behind them may be session-based, so the gateway holds one
//! upstream-facing session per tenant and user. Its id is derived from the user under the
//! tenant's key, so every replica that shares the key finds the same session in the store
//! and continues the same upstream sessions. It also answers `server/discover`.

use std::sync::Arc;

use bytes::Bytes;
use serde_json::value::RawValue;
use serde_json::{Map, Value, json};

use super::initialize::{offered_to, open_session, server_info};
use crate::error::GatewayError;
use crate::gateway::Gateway;
use crate::jsonrpc;
use crate::protocol::ProtocolVersion;
use crate::protocol::modern::{self, CacheHints};
use crate::session::{LiveSession, SessionId, SessionKey};
use crate::tenant::Tenant;

/// What the gateway tells upstreams its stateless clients can do: what it bridges into
/// `input_required` results asked during a request. A request whose client lacks the
/// capability gets -32021. Not roots: upstreams ask for them outside of requests too
/// (after the handshake), where no stateless client could answer.
fn bridged_capabilities() -> Value {
    json!({
        "elicitation": { "form": {}, "url": {} },
        "sampling": {},
    })
}

/// Serializes the first request of a user (one upstream session per user, not one per race).
static OPENING: tokio::sync::Mutex<()> = tokio::sync::Mutex::const_new(());

/// The session standing for `user`'s stateless requests, opened on first use.
pub async fn session_for(
    gateway: &Gateway,
    tenant: &Arc<Tenant>,
    user: &str,
) -> Result<Arc<LiveSession>, GatewayError> {
    let id = format!(
        "stateless-{}",
        tenant
            .cursor_key
            .derive(&[b"stateless-session", user.as_bytes()])
    );
    match gateway.find_session(tenant, user, &id).await {
        Err(GatewayError::SessionNotFound) => {}
        found => return found,
    }
    let _one = OPENING.lock().await;
    match gateway.find_session(tenant, user, &id).await {
        Err(GatewayError::SessionNotFound) => {}
        found => return found,
    }
    let key = SessionKey {
        tenant: tenant.name.clone(),
        user: user.into(),
        id: SessionId::from_presented(&id).ok_or(GatewayError::Internal)?,
    };
    let client_info = json!({ "name": "switchyard", "version": env!("CARGO_PKG_VERSION") });
    let session = LiveSession::new(
        key,
        ProtocolVersion::V2026_07_28,
        bridged_capabilities(),
        client_info,
        gateway.bus.clone(),
    )
    .with_bounds(gateway.session_bounds)
    .with_process_source(
        gateway
            .limiter
            .sessions
            .process_source(&tenant.for_limits()),
    );
    let session = match open_session(gateway, tenant, Arc::new(session)).await {
        Ok((session, _, _)) => session,
        // Another replica opened it at the same time (the id is the same on every replica).
        Err(e) => return gateway.find_session(tenant, user, &id).await.map_err(|_| e),
    };
    session.mark_initialized();
    gateway.persist(&session).await;
    Ok(session)
}

/// The gateway's caching hints for a cacheable result: lists are kept fresh by the upstreams'
/// change notifications, so they may be reused for a minute; a read is the upstream's to
/// say (immediately stale unless it says otherwise). Shared caches may keep a list only when
/// it cannot differ per caller (no authentication and no tool policies).
pub fn cache_hints(tenant: &Tenant, method: &str) -> Option<CacheHints> {
    if !modern::is_cacheable(method) {
        return None;
    }
    let public = tenant.authenticator.is_none() && tenant.policies.is_empty();
    Some(match method {
        "resources/read" => CacheHints {
            ttl_ms: 0,
            public: false,
        },
        _ => CacheHints {
            ttl_ms: 60_000,
            public,
        },
    })
}

/// `server/discover`: the versions served, the merged capabilities of the upstreams the
/// user's session reaches, the gateway's identity and instructions.
pub fn discover(tenant: &Tenant, session: &LiveSession, id: &RawValue) -> Bytes {
    let mut result = Map::new();
    result.insert("resultType".into(), "complete".into());
    result.insert(
        "supportedVersions".into(),
        json!(ProtocolVersion::served_list()),
    );
    let (mut caps, instructions) = offered_to(tenant, session);
    // The gateway runs tasks for upstreams without them (`task_run`): it offers the extension.
    // The 2025-11-25 `tasks` capability is not this revision's (the extension replaced it).
    if let Some(c) = caps.as_object_mut() {
        crate::protocol::tasks::offer_extension(c);
        c.remove("tasks");
    }
    result.insert("capabilities".into(), caps);
    let mut meta = Map::new();
    meta.insert(modern::meta::SERVER_INFO.into(), server_info(tenant));
    result.insert("_meta".into(), Value::Object(meta));
    if let Some(text) = instructions {
        result.insert("instructions".into(), text.into());
    }
    let hints = cache_hints(tenant, "server/discover");
    if let Some(h) = hints {
        result.insert("ttlMs".into(), h.ttl_ms.into());
        result.insert(
            "cacheScope".into(),
            if h.public { "public" } else { "private" }.into(),
        );
    }
    let body = serde_json::to_vec(&Value::Object(result)).unwrap_or_default();
    jsonrpc::result_response(id, &body)
}
