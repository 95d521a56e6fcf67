//! `initialize`: the gateway answers it itself. It opens the session's upstream connections
//! (forwarding the client's capabilities), merges what they offer, and stores the session.

use std::sync::Arc;

use bytes::Bytes;
use serde::Deserialize;
use serde_json::{Map, Value};

use super::ensure_link;
use crate::auth::Principal;
use crate::config::FailurePolicy;
use crate::error::GatewayError;
use crate::events::StreamLog;
use crate::gateway::Gateway;
use crate::jsonrpc::{self, Request};
use crate::protocol::{ProtocolVersion, capabilities};
use crate::session::{
    ClientTransport, LiveSession, SessionId, SessionKey, SessionStore, StoreError,
};
use crate::tenant::Tenant;
use crate::upstream::UpstreamServer;

#[derive(Deserialize)]
#[serde(rename_all = "camelCase")]
struct InitializeParams {
    protocol_version: String,
    #[serde(default)]
    capabilities: Value,
    #[serde(default)]
    client_info: Value,
}

/// How the client reaches the session an `initialize` opens.
pub enum Opening {
    /// Streamable HTTP: a fresh id, returned in `Mcp-Session-Id`.
    StreamableHttp,
    /// HTTP with SSE (2024-11-05): the id the client's stream announced, and that stream
    /// when this replica holds it (it becomes the session's GET stream before the upstreams
    /// are connected, so they relay unsolicited messages from the start).
    LegacySse {
        id: SessionId,
        stream: Option<Arc<StreamLog>>,
    },
}

/// A new session's id, made (when the tenant has shared stdio processes and this runs on a
/// connection worker) to pin the session to the processes whose answers are read on this
/// worker: a host keeps its session on its connection, so the answers then wake no other
/// thread. Only the id's spread is steered, not its random part (`SessionId::generate_spread`).
fn fresh_id(tenant: &Tenant) -> SessionId {
    let here = crate::workers::home();
    if here == 0 || tenant.upstreams.iter().all(|u| !u.is_shared()) {
        return SessionId::generate();
    }
    SessionId::generate_spread(|spread| {
        tenant
            .upstreams
            .iter()
            .filter(|u| u.answers_elsewhere(spread, here))
            .count()
    })
}

/// Creates a session for `principal` and returns it with the `initialize` response. The
/// session is counted against the tenant's session limits before any upstream is reached
/// (refused: 429, nothing left behind), and closed unless the client finishes the handshake
/// within `handshake_timeout`.
pub async fn initialize(
    gateway: &Gateway,
    tenant: &Arc<Tenant>,
    principal: &Principal,
    req: &Request<'_>,
    opening: Opening,
) -> Result<(Arc<LiveSession>, Bytes), GatewayError> {
    let params = req
        .params
        .ok_or_else(|| GatewayError::InvalidParams("initialize needs params".into()))?;
    let params: InitializeParams = serde_json::from_str(params.get())
        .map_err(|e| GatewayError::InvalidParams(format!("invalid initialize params: {e}")))?;
    let client_caps = match params.capabilities {
        Value::Null => Value::Object(Map::new()),
        v @ Value::Object(_) => v,
        _ => {
            return Err(GatewayError::InvalidParams(
                "`capabilities` must be an object".into(),
            ));
        }
    };
    let version = ProtocolVersion::negotiate(&params.protocol_version);
    let (id, transport, stream) = match opening {
        Opening::StreamableHttp => (fresh_id(tenant), ClientTransport::StreamableHttp, None),
        Opening::LegacySse { id, stream } => (id, ClientTransport::LegacySse, stream),
    };
    let key = SessionKey {
        tenant: tenant.name.clone(),
        user: principal.user.clone(),
        id,
    };
    let session = LiveSession::new(
        key,
        version,
        client_caps,
        params.client_info,
        gateway.bus.clone(),
    )
    .on_transport(transport)
    .with_bounds(gateway.session_bounds)
    .charged_to(principal.budget.clone())
    .with_process_source(
        gateway
            .limiter
            .sessions
            .process_source(&tenant.for_limits()),
    );
    let counts = &gateway.limiter.sessions;
    counts
        .admit(&tenant.for_limits(), &session, gateway.session_ttl)
        .await?;
    if let Some(log) = stream {
        session.use_get_stream(log);
    }
    let session = Arc::new(session);
    let (session, caps, instructions) = match open_session(gateway, tenant, session.clone()).await {
        Ok(opened) => opened,
        Err(e) => {
            // Refused or failed: it leaves nothing behind, its count included.
            counts.release(&session).await;
            return Err(e);
        }
    };
    let deadline = tenant.config.limits.handshake_timeout;
    crate::gateway::handshake::watch_session(gateway, tenant, &session, deadline);
    let mut result = Map::new();
    result.insert("protocolVersion".into(), version.as_str().into());
    result.insert("capabilities".into(), caps);
    result.insert("serverInfo".into(), server_info(tenant));
    if let Some(text) = instructions {
        result.insert("instructions".into(), text.into());
    }
    let body = serde_json::to_vec(&Value::Object(result)).map_err(|_| GatewayError::Internal)?;
    Ok((session, jsonrpc::result_response(req.id, &body)))
}

/// The gateway's own identity (`serverInfo`) as the tenant configures it.
pub fn server_info(tenant: &Tenant) -> Value {
    let identity = &tenant.config.server;
    let mut server_info = Map::new();
    server_info.insert("name".into(), identity.name.clone().into());
    server_info.insert("version".into(), identity.version.clone().into());
    if let Some(title) = &identity.title {
        server_info.insert("title".into(), title.clone().into());
    }
    Value::Object(server_info)
}

/// Opens a session: connects its upstreams (forwarding the client's capabilities), stores it,
/// and returns it with the merged capabilities and instructions of what it reaches.
pub async fn open_session(
    gateway: &Gateway,
    tenant: &Arc<Tenant>,
    session: Arc<LiveSession>,
) -> Result<(Arc<LiveSession>, Value, Option<String>), GatewayError> {
    let (key, version) = (session.key.clone(), session.protocol_version);
    // Per-session processes take their places first, all or none: refused, nothing spawns.
    let processes = tenant
        .upstreams
        .iter()
        .filter(|u| u.spawns_per_session())
        .count();
    if processes > 0 {
        let n = u32::try_from(processes).unwrap_or(u32::MAX);
        let permits = gateway
            .limiter
            .sessions
            .reserve_processes(&tenant.for_limits(), n)?;
        session.reserve_processes(permits);
    }
    let connects = tenant.upstreams.iter().map(|u| ensure_link(&session, u));
    let mut servers = Vec::with_capacity(tenant.upstreams.len());
    for (upstream, result) in tenant
        .upstreams
        .iter()
        .zip(futures_util::future::join_all(connects).await)
    {
        match result.map(|c| c.server()) {
            Ok(Some(server)) => servers.push((upstream.name(), server)),
            Ok(None) => {}
            Err(e) => match tenant.config.failure_policy {
                FailurePolicy::Open => {
                    tracing::warn!(tenant = %tenant.name, upstream = %upstream.name(), error = %e, "upstream unavailable at initialize; left out (failure_policy: open)");
                }
                FailurePolicy::Closed => {
                    tracing::warn!(tenant = %tenant.name, upstream = %upstream.name(), error = %e, "upstream unavailable at initialize (failure_policy: closed)");
                    session.close().await;
                    return Err(e);
                }
            },
        }
    }

    let (caps, instructions) = offered(tenant, &servers);
    let record = session.record();
    session.take_dirty();
    if let Err(e) = gateway
        .store
        .create(&key, &record, gateway.session_ttl)
        .await
    {
        tracing::error!(error = %e, "could not store a new session");
        session.close().await;
        return Err(match e {
            StoreError::Unavailable(_) => GatewayError::StoreUnavailable,
            // Only a 2024-11-05 session's id is chosen before `initialize`: another replica
            // answered its `initialize` first.
            StoreError::Exists if session.transport == ClientTransport::LegacySse => {
                GatewayError::SessionNotOpened(
                    "this session's `initialize` is already being answered",
                )
            }
            StoreError::Exists | StoreError::Corrupt(_) => GatewayError::Internal,
        });
    }
    tenant.directory.insert(session.clone());
    tracing::info!(tenant = %tenant.name, session = ?key.id, protocol = %version, "session created");
    Ok((session, caps, instructions))
}

/// What the upstreams in `servers` offer together, as the gateway presents it: capabilities
/// (merged, or the one upstream's in transparent mode) and instructions.
pub fn offered(
    tenant: &Tenant,
    servers: &[(&str, Arc<UpstreamServer>)],
) -> (Value, Option<String>) {
    let caps = if tenant.is_transparent() {
        servers
            .first()
            .map(|(_, s)| s.capabilities.clone())
            .unwrap_or_else(|| Value::Object(Map::new()))
    } else {
        let mut caps = capabilities::merge(servers.iter().map(|(_, s)| &s.capabilities));
        // The gateway answers `logging/setLevel` itself (and filters what upstreams send by
        // the level), whatever its upstreams offer.
        if let Value::Object(m) = &mut caps {
            m.entry("logging")
                .or_insert_with(|| Value::Object(Map::new()));
        }
        caps
    };
    let instructions = capabilities::merge_instructions(
        tenant.config.server.instructions.as_deref(),
        servers
            .iter()
            .map(|(name, s)| (*name, s.instructions.as_deref())),
    );
    (caps, instructions)
}

/// What the upstreams a live session reaches offer (see `offered`).
pub fn offered_to(tenant: &Tenant, session: &LiveSession) -> (Value, Option<String>) {
    let servers: Vec<_> = tenant
        .upstreams
        .iter()
        .filter_map(|u| Some((u.name(), session.link(u.info.id)?.server()?)))
        .collect();
    offered(tenant, &servers)
}
