//! The `initialize` handshake the gateway performs, as a client, with each upstream.

use std::sync::Arc;
use std::sync::atomic::{AtomicU8, Ordering};
use std::time::Duration;

use serde::Deserialize;
use serde_json::Value;
use serde_json::value::RawValue;

use super::connection::{Connection, InternalReply};
use crate::config::UpstreamEra;
use crate::error::GatewayError;
use crate::protocol::{ProtocolVersion, modern};

/// What the gateway sends in `initialize`. For per-session connections these are the client's
/// own values, so the upstream offers what the real client can handle: shared with the
/// session (and with sessions presenting equal ones), not copied per connection.
#[derive(Debug, Clone)]
pub struct InitParams {
    pub protocol_version: ProtocolVersion,
    pub capabilities: Arc<Value>,
    pub client_info: Arc<Value>,
}

impl InitParams {
    /// The gateway's own identity, for connections shared by many client sessions.
    pub fn gateway_default() -> InitParams {
        InitParams {
            protocol_version: ProtocolVersion::LATEST_HANDSHAKE,
            capabilities: Arc::new(serde_json::json!({})),
            client_info: Arc::new(serde_json::json!({
                "name": "switchyard",
                "version": env!("CARGO_PKG_VERSION"),
            })),
        }
    }
}

/// What an upstream told the gateway about itself (shared by the connections to one upstream
/// while it says the same: `UpstreamInfo::shared_server`).
#[derive(Debug, Clone, PartialEq)]
pub struct UpstreamServer {
    pub protocol_version: ProtocolVersion,
    pub capabilities: Value,
    pub server_info: Value,
    pub instructions: Option<String>,
}

#[derive(Deserialize)]
#[serde(rename_all = "camelCase")]
struct InitializeResult {
    protocol_version: String,
    #[serde(default)]
    capabilities: Value,
    #[serde(default)]
    server_info: Value,
    #[serde(default)]
    instructions: Option<String>,
}

/// What the gateway learned of an upstream's revision, shared by all its connections: a
/// server that answered the probe in a session-based way is not probed again (0: unknown).
/// The admin may pin it (`era` in the upstream's config).
#[derive(Debug, Default)]
pub struct Era(AtomicU8, UpstreamEra);

const SESSION_BASED: u8 = 1;
const STATELESS: u8 = 2;

impl Era {
    /// What the config says: `legacy` is known to be session-based (never probed).
    pub fn pinned(era: UpstreamEra) -> Era {
        let known = match era {
            UpstreamEra::Legacy => SESSION_BASED,
            UpstreamEra::Auto | UpstreamEra::Modern => 0,
        };
        Era(AtomicU8::new(known), era)
    }

    /// Whether the last probe found the stateless revision.
    pub fn is_stateless(&self) -> bool {
        self.0.load(Ordering::Relaxed) == STATELESS
    }

    fn set(&self, v: u8) {
        self.0.store(v, Ordering::Relaxed);
    }
}

/// Longest wait for the answer to the `server/discover` probe.
const PROBE_TIMEOUT: Duration = Duration::from_secs(5);

/// Opens the MCP conversation on a fresh link: `server/discover` first (a server of the
/// stateless revision needs no handshake), `initialize` when the upstream is session-based.
pub async fn connect(
    conn: &Arc<Connection>,
    params: &InitParams,
    timeout: Duration,
) -> Result<UpstreamServer, GatewayError> {
    let outcome = negotiate(conn, params, timeout).await;
    match &outcome {
        Ok(server) => conn.info.health.connected(server),
        Err(e) => conn.info.health.failed(&e.to_string()),
    }
    outcome
}

/// [`connect`] without recording the outcome in the upstream's `Health`.
async fn negotiate(
    conn: &Arc<Connection>,
    params: &InitParams,
    timeout: Duration,
) -> Result<UpstreamServer, GatewayError> {
    let era = &conn.info.era;
    if era.0.load(Ordering::Relaxed) != SESSION_BASED {
        match discover(conn, params, timeout.min(PROBE_TIMEOUT)).await? {
            Probe::Stateless(server) => return Ok(stateless(conn, server)),
            Probe::Silent if era.1 != UpstreamEra::Modern => {
                // Silence is a session-based server ignoring the method — or one of either era
                // still starting (`uvx` fetching packages). `initialize` decides; refused, the
                // server is asked again, now that it answers.
                return match initialize_or_refusal(conn, params, timeout).await? {
                    Ok(server) => {
                        era.set(SESSION_BASED);
                        Ok(server)
                    }
                    Err(refusal) => match discover(conn, params, timeout).await? {
                        Probe::Stateless(server) => Ok(stateless(conn, server)),
                        Probe::Silent | Probe::SessionBased => Err(refused(conn, &refusal)),
                    },
                };
            }
            Probe::Silent | Probe::SessionBased if era.1 == UpstreamEra::Modern => {
                return Err(GatewayError::UpstreamProtocol {
                    upstream: conn.info.name.to_string(),
                    reason: "it did not answer `server/discover` as a 2026-07-28 server \
                             (its config pins `era: modern`)"
                        .into(),
                });
            }
            Probe::Silent | Probe::SessionBased => era.set(SESSION_BASED),
        }
    }
    initialize(conn, params, timeout).await
}

/// A connection found to serve the stateless revision.
fn stateless(conn: &Arc<Connection>, server: UpstreamServer) -> UpstreamServer {
    conn.info.era.set(STATELESS);
    if matches!(conn.link, super::Link::Stdio(_)) {
        // Stdio relays everything the upstream says: on this revision, list changes come
        // only to a subscriber.
        conn.subscribe();
    }
    server
}

/// What the `server/discover` probe found.
enum Probe {
    /// A server of the stateless revision.
    Stateless(UpstreamServer),
    /// An answer of a session-based server (an error, a result without that revision, an HTTP
    /// client error).
    SessionBased,
    /// No answer within the probe's time.
    Silent,
}

#[derive(Deserialize)]
#[serde(rename_all = "camelCase")]
struct DiscoverResult {
    #[serde(default)]
    supported_versions: Vec<String>,
    #[serde(default)]
    capabilities: Value,
    #[serde(default)]
    server_info: Option<Value>,
    #[serde(default, rename = "_meta")]
    meta: Option<serde_json::Map<String, Value>>,
    #[serde(default)]
    instructions: Option<String>,
}

/// The probe (see `Probe`). A link that is down is an error.
async fn discover(
    conn: &Arc<Connection>,
    params: &InitParams,
    timeout: Duration,
) -> Result<Probe, GatewayError> {
    let stateless = ProtocolVersion::V2026_07_28;
    let body = serde_json::json!({ "_meta": {
        modern::meta::PROTOCOL_VERSION: stateless.as_str(),
        modern::meta::CLIENT_CAPABILITIES: &*params.capabilities,
        modern::meta::CLIENT_INFO: &*params.client_info,
    }});
    let raw = RawValue::from_string(body.to_string()).map_err(|_| GatewayError::Internal)?;
    conn.set_link_version(Some(stateless));
    let reply = conn
        .call_during_handshake("server/discover", &raw, timeout)
        .await;
    let result = match reply {
        Ok(InternalReply::Result(r)) => r,
        Err(GatewayError::UpstreamTimeout { .. }) => {
            conn.set_link_version(None);
            return Ok(Probe::Silent);
        }
        Ok(InternalReply::Error(_)) => {
            conn.set_link_version(None);
            return Ok(Probe::SessionBased);
        }
        Err(GatewayError::UpstreamUnavailable { reason, .. })
            if reason.starts_with(super::http::CLIENT_ERROR_STATUS) =>
        {
            conn.set_link_version(None);
            return Ok(Probe::SessionBased);
        }
        Err(e) => {
            conn.set_link_version(None);
            return Err(e);
        }
    };
    let found: Option<DiscoverResult> = serde_json::from_str(result.get()).ok();
    let Some(found) =
        found.filter(|d| d.supported_versions.iter().any(|v| v == stateless.as_str()))
    else {
        conn.set_link_version(None);
        return Ok(Probe::SessionBased);
    };
    let server_info = found
        .meta
        .as_ref()
        .and_then(|m| m.get(modern::meta::SERVER_INFO).cloned())
        .or(found.server_info)
        .unwrap_or(Value::Null);
    Ok(Probe::Stateless(UpstreamServer {
        protocol_version: stateless,
        capabilities: found.capabilities,
        server_info,
        instructions: found.instructions,
    }))
}

/// Runs `initialize` + `notifications/initialized` on a link that is up but not yet ready.
pub async fn initialize(
    conn: &Arc<Connection>,
    params: &InitParams,
    timeout: Duration,
) -> Result<UpstreamServer, GatewayError> {
    initialize_or_refusal(conn, params, timeout)
        .await?
        .map_err(|refusal| refused(conn, &refusal))
}

/// The error of an upstream that refused `initialize` with JSON-RPC error `refusal`.
fn refused(conn: &Connection, refusal: &RawValue) -> GatewayError {
    GatewayError::UpstreamUnavailable {
        upstream: conn.upstream_name().to_owned(),
        reason: format!("initialize was refused: {}", error_message(refusal)),
    }
}

/// `initialize` (see `initialize`), with the upstream's refusal apart: `Ok(Err(error))`.
async fn initialize_or_refusal(
    conn: &Arc<Connection>,
    params: &InitParams,
    timeout: Duration,
) -> Result<Result<UpstreamServer, Box<RawValue>>, GatewayError> {
    let upstream = conn.upstream_name();
    let body = serde_json::json!({
        "protocolVersion": params.protocol_version.as_str(),
        "capabilities": &*params.capabilities,
        "clientInfo": &*params.client_info,
    });
    let raw = RawValue::from_string(body.to_string()).map_err(|_| GatewayError::Internal)?;
    let reply = conn
        .call_during_handshake("initialize", &raw, timeout)
        .await?;
    let result = match reply {
        InternalReply::Result(r) => r,
        InternalReply::Error(e) => return Ok(Err(e)),
    };
    let init: InitializeResult =
        serde_json::from_str(result.get()).map_err(|e| GatewayError::UpstreamProtocol {
            upstream: upstream.to_owned(),
            reason: format!("invalid initialize result: {e}"),
        })?;
    let version = ProtocolVersion::parse(&init.protocol_version)
        .filter(|v| v.is_handshake_era())
        .ok_or_else(|| GatewayError::UpstreamUnavailable {
            upstream: upstream.to_owned(),
            reason: format!(
                "it answered with protocol version {:?}, which the gateway does not speak",
                init.protocol_version
            ),
        })?;
    conn.notify_during_handshake("notifications/initialized", None)
        .await?;
    Ok(Ok(UpstreamServer {
        protocol_version: version,
        capabilities: init.capabilities,
        server_info: init.server_info,
        instructions: init.instructions,
    }))
}

/// The `message` of a raw JSON-RPC error object, for logs and error texts.
pub fn error_message(error: &RawValue) -> String {
    #[derive(Deserialize)]
    struct E {
        #[serde(default)]
        code: i64,
        #[serde(default)]
        message: String,
    }
    match serde_json::from_str::<E>(error.get()) {
        Ok(e) => format!("{} ({})", e.message, e.code),
        Err(_) => "malformed error".to_owned(),
    }
}
