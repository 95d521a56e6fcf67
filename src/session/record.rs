//! The durable part of a session: what any replica needs to serve it.

use std::collections::BTreeMap;

use serde::{Deserialize, Serialize};
use serde_json::Value;

/// Stored under `<tenant>:<user>:<session>`. Everything here is negotiated once at `initialize`
/// and changes rarely, so the hot path reads it from the live session, not from the store.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct SessionRecord {
    /// The revision negotiated with the client (`2025-06-18`, ...).
    pub protocol_version: String,
    /// The client's `capabilities` from `initialize`, forwarded to upstreams.
    pub client_capabilities: Value,
    /// The client's `clientInfo` from `initialize`.
    pub client_info: Value,
    /// Set by `notifications/initialized`; requests other than ping wait for it.
    pub initialized: bool,
    /// Upstream sessions of HTTP upstreams, by upstream name, so another replica can reuse them.
    #[serde(default)]
    pub upstream_sessions: BTreeMap<String, UpstreamSessionRecord>,
    /// Milliseconds since the Unix epoch.
    pub created_at_ms: u64,
}

/// An upstream's Streamable HTTP session, as another replica needs it to continue it without a
/// new handshake: its id and what the upstream said in `initialize`.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct UpstreamSessionRecord {
    pub id: String,
    pub protocol_version: String,
    #[serde(default)]
    pub capabilities: Value,
    #[serde(default)]
    pub server_info: Value,
    #[serde(default)]
    pub instructions: Option<String>,
}
