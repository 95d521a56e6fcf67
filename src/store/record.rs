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
    /// The level the client set with `logging/setLevel`, sent in `_meta` to upstreams that
    /// speak 2026-07-28 (which have no such method).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub log_level: Option<String>,
    /// Whose per-user limits the session counts against, when not its user (the client's
    /// address on tenants without `auth`): any replica can take it out of the count.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub budget: Option<String>,
    /// How the client reaches the session (absent in records of Streamable HTTP sessions).
    #[serde(default, skip_serializing_if = "ClientTransport::is_streamable_http")]
    pub transport: ClientTransport,
}

/// The transport a client session was opened on; its id is valid on that transport only.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "kebab-case")]
pub enum ClientTransport {
    /// Streamable HTTP: `Mcp-Session-Id` on the tenant endpoint.
    #[default]
    StreamableHttp,
    /// HTTP with SSE (2024-11-05): `sessionId` on the message endpoint, the session's stream
    /// open on one replica; closing the stream ends the session.
    LegacySse,
}

impl ClientTransport {
    pub fn is_streamable_http(&self) -> bool {
        *self == ClientTransport::StreamableHttp
    }
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
