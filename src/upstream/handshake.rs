//! The `initialize` handshake the gateway performs, as a client, with each upstream.

use std::sync::Arc;
use std::time::Duration;

use serde::Deserialize;
use serde_json::Value;
use serde_json::value::RawValue;

use super::connection::{Connection, InternalReply};
use crate::error::GatewayError;
use crate::protocol::ProtocolVersion;

/// What the gateway sends in `initialize`. For per-session connections these are the client's
/// own values, so the upstream offers what the real client can handle.
#[derive(Debug, Clone)]
pub struct InitParams {
    pub protocol_version: ProtocolVersion,
    pub capabilities: Value,
    pub client_info: Value,
}

impl InitParams {
    /// The gateway's own identity, for connections shared by many client sessions.
    pub fn gateway_default() -> InitParams {
        InitParams {
            protocol_version: ProtocolVersion::LATEST_HANDSHAKE,
            capabilities: serde_json::json!({}),
            client_info: serde_json::json!({
                "name": "switchyard",
                "version": env!("CARGO_PKG_VERSION"),
            }),
        }
    }
}

/// What an upstream told the gateway about itself.
#[derive(Debug, Clone)]
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

/// Runs `initialize` + `notifications/initialized` on a link that is up but not yet ready.
pub async fn initialize(
    conn: &Arc<Connection>,
    params: &InitParams,
    timeout: Duration,
) -> Result<UpstreamServer, GatewayError> {
    let upstream = conn.upstream_name();
    let body = serde_json::json!({
        "protocolVersion": params.protocol_version.as_str(),
        "capabilities": params.capabilities,
        "clientInfo": params.client_info,
    });
    let raw = RawValue::from_string(body.to_string()).map_err(|_| GatewayError::Internal)?;
    let reply = conn
        .call_during_handshake("initialize", &raw, timeout)
        .await?;
    let result = match reply {
        InternalReply::Result(r) => r,
        InternalReply::Error(e) => {
            return Err(GatewayError::UpstreamUnavailable {
                upstream: upstream.to_owned(),
                reason: format!("initialize was refused: {}", error_message(&e)),
            });
        }
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
    Ok(UpstreamServer {
        protocol_version: version,
        capabilities: init.capabilities,
        server_info: init.server_info,
        instructions: init.instructions,
    })
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
