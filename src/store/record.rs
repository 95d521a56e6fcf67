//! The durable part of a session: what any replica needs to serve it.

use std::collections::{BTreeMap, BTreeSet};

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
    /// The resources the client subscribed to (`resources/subscribe` accepted by the upstream,
    /// not unsubscribed since): upstream name → the upstream's own URIs. A replica that opens
    /// a new upstream session for the client (a per-session process, an SSE stream) subscribes
    /// to them again before it forwards the client's request. Absent when empty.
    #[serde(default, skip_serializing_if = "BTreeMap::is_empty")]
    pub subscriptions: BTreeMap<String, BTreeSet<String>>,
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

#[cfg(test)]
mod tests {
    use super::*;

    /// A record written before a field existed still loads; empty optional fields are left
    /// out, so most records stay as small as they were.
    #[test]
    fn old_records_load_and_empty_fields_are_left_out() {
        let old = r#"{"protocol_version":"2025-06-18","client_capabilities":{},
            "client_info":{"name":"c"},"initialized":true,"created_at_ms":1}"#;
        let record: SessionRecord = serde_json::from_str(old).expect("an old record loads");
        assert!(record.subscriptions.is_empty() && record.log_level.is_none());
        let written = serde_json::to_string(&record).expect("serializes");
        assert!(!written.contains("subscriptions"), "{written}");
        assert!(!written.contains("log_level"), "{written}");

        let mut subscribed = record;
        subscribed.log_level = Some("error".into());
        subscribed
            .subscriptions
            .entry("files".into())
            .or_default()
            .insert("file:///a".into());
        let written = serde_json::to_string(&subscribed).expect("serializes");
        assert!(
            written.contains(r#""subscriptions":{"files":["file:///a"]}"#),
            "{written}"
        );
        let back: SessionRecord = serde_json::from_str(&written).expect("loads");
        assert_eq!(back, subscribed);
    }
}
