//! What a client built up on an upstream session, set up again on a new one. A dedicated
//! connection's upstream session is replaced whenever this replica starts a per-session
//! process (the session came from another replica, or the process crashed), opens a new SSE
//! stream, or initializes a new HTTP upstream session; before any request of the client is
//! sent on it, the new session gets the client's `logging/setLevel` and its
//! `resources/subscribe`s again (what the session record keeps). A restarted process of a
//! shared pool gets the subscriptions its sessions made. A replay the upstream refuses is
//! logged and the connection serves on: the client sees what a fresh upstream would do.

use std::sync::Arc;
use std::time::Duration;

use serde_json::json;
use serde_json::value::RawValue;

use super::connection::{Connection, InternalReply};
use super::handshake::{UpstreamServer, error_message};
use super::owner::Owner;

impl Connection {
    /// Replays the client's level and subscriptions on the upstream session `server` just
    /// initialized (called by the transports between the handshake and the first request;
    /// each replayed request is bounded by `timeout`).
    pub(super) async fn restore(self: &Arc<Self>, server: &UpstreamServer, timeout: Duration) {
        // The stateless revision has neither method: the level goes in each request's
        // `_meta`, subscriptions through the gateway's own `subscriptions/listen`.
        if server.protocol_version.is_stateless() {
            return;
        }
        let (level, uris) = match &self.owner {
            Owner::Session(_) => match self.owner_session() {
                Some(s) => (s.log_level(), s.subscriptions(&self.info.name)),
                None => return,
            },
            Owner::Shared(_) => (None, self.subscribed_uris()),
        };
        if let Some(level) = level
            && offers(server, "logging", None)
        {
            self.replay("logging/setLevel", json!({ "level": &*level }), timeout)
                .await;
        }
        if uris.is_empty() || !offers(server, "resources", Some("subscribe")) {
            return;
        }
        let subscribe = uris
            .iter()
            .map(|uri| self.replay("resources/subscribe", json!({ "uri": uri }), timeout));
        futures_util::future::join_all(subscribe).await;
        tracing::info!(upstream = %self.info.name, subscriptions = uris.len(), "resource subscriptions made again on a new upstream session");
    }

    /// Sends one request of the client's again; a refusal or failure is logged, not fatal.
    async fn replay(self: &Arc<Self>, method: &str, params: serde_json::Value, timeout: Duration) {
        let Ok(raw) = RawValue::from_string(params.to_string()) else {
            return;
        };
        match self.call_during_handshake(method, &raw, timeout).await {
            Ok(InternalReply::Result(_)) => {}
            Ok(InternalReply::Error(e)) => {
                tracing::warn!(upstream = %self.info.name, method, error = %error_message(&e), "the new upstream session refused what the client had set up on the old one");
            }
            Err(e) => {
                tracing::warn!(upstream = %self.info.name, method, error = %e, "could not set up again on the new upstream session what the client had set up");
            }
        }
    }
}

/// Whether the upstream advertised capability `key` (and its boolean `flag`, if given).
fn offers(server: &UpstreamServer, key: &str, flag: Option<&str>) -> bool {
    let Some(cap) = server.capabilities.get(key).filter(|c| c.is_object()) else {
        return false;
    };
    flag.is_none_or(|f| cap.get(f) == Some(&serde_json::Value::Bool(true)))
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::protocol::ProtocolVersion;

    fn server(capabilities: serde_json::Value) -> UpstreamServer {
        UpstreamServer {
            protocol_version: ProtocolVersion::LATEST_HANDSHAKE,
            capabilities,
            server_info: json!({}),
            instructions: None,
        }
    }

    #[test]
    fn only_what_the_upstream_offers_is_replayed() {
        let full = server(json!({"logging": {}, "resources": {"subscribe": true}}));
        assert!(offers(&full, "logging", None));
        assert!(offers(&full, "resources", Some("subscribe")));
        let plain = server(json!({"resources": {}, "logging": true}));
        assert!(
            !offers(&plain, "logging", None),
            "a capability is an object"
        );
        assert!(!offers(&plain, "resources", Some("subscribe")));
        assert!(offers(&plain, "resources", None));
    }
}
