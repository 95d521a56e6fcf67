//! MCP protocol revisions and version negotiation.

use std::fmt;

/// Every published revision, oldest first. A closed set: adding one is a code change.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub enum ProtocolVersion {
    /// HTTP+SSE transport era.
    V2024_11_05,
    /// Streamable HTTP introduced; batching allowed.
    V2025_03_26,
    /// `MCP-Protocol-Version` header; batching removed.
    V2025_06_18,
    /// SSE polling, resumption via GET.
    V2025_11_25,
    /// Stateless era (`server/discover`, no sessions).
    V2026_07_28,
}

impl ProtocolVersion {
    pub const ALL: [ProtocolVersion; 5] = [
        ProtocolVersion::V2024_11_05,
        ProtocolVersion::V2025_03_26,
        ProtocolVersion::V2025_06_18,
        ProtocolVersion::V2025_11_25,
        ProtocolVersion::V2026_07_28,
    ];

    /// The newest revision the gateway negotiates through `initialize`.
    pub const LATEST_HANDSHAKE: ProtocolVersion = ProtocolVersion::V2025_11_25;

    /// The version a client is assumed to speak when it sends no `MCP-Protocol-Version`
    /// header and nothing else tells (transport spec, "Protocol Version Header").
    pub const ASSUMED_WITHOUT_HEADER: ProtocolVersion = ProtocolVersion::V2025_03_26;

    pub fn parse(s: &str) -> Option<ProtocolVersion> {
        Some(match s {
            "2024-11-05" => ProtocolVersion::V2024_11_05,
            "2025-03-26" => ProtocolVersion::V2025_03_26,
            "2025-06-18" => ProtocolVersion::V2025_06_18,
            "2025-11-25" => ProtocolVersion::V2025_11_25,
            "2026-07-28" => ProtocolVersion::V2026_07_28,
            _ => return None,
        })
    }

    pub fn as_str(self) -> &'static str {
        match self {
            ProtocolVersion::V2024_11_05 => "2024-11-05",
            ProtocolVersion::V2025_03_26 => "2025-03-26",
            ProtocolVersion::V2025_06_18 => "2025-06-18",
            ProtocolVersion::V2025_11_25 => "2025-11-25",
            ProtocolVersion::V2026_07_28 => "2026-07-28",
        }
    }

    /// Whether the gateway serves this revision on its Streamable HTTP endpoint: all of them
    /// (2024-11-05 once a client negotiated it there, 2026-07-28 statelessly).
    pub fn served_on_streamable_http(self) -> bool {
        true
    }

    /// The stateless revisions: per-request `_meta`, no sessions.
    pub fn is_stateless(self) -> bool {
        self >= ProtocolVersion::V2026_07_28
    }

    /// Revisions that begin with an `initialize` handshake.
    pub fn is_handshake_era(self) -> bool {
        self <= ProtocolVersion::V2025_11_25
    }

    /// What to answer to an `initialize` asking for `requested`: the same version when served,
    /// otherwise the newest one the gateway negotiates.
    pub fn negotiate(requested: &str) -> ProtocolVersion {
        match ProtocolVersion::parse(requested) {
            Some(v) if v.is_handshake_era() => v,
            _ => ProtocolVersion::LATEST_HANDSHAKE,
        }
    }

    /// The versions served on the Streamable HTTP endpoint, newest first (for error data).
    pub fn served_list() -> Vec<&'static str> {
        ProtocolVersion::ALL
            .iter()
            .rev()
            .filter(|v| v.served_on_streamable_http())
            .map(|v| v.as_str())
            .collect()
    }
}

impl fmt::Display for ProtocolVersion {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.as_str())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn parse_round_trips_every_revision() {
        for v in ProtocolVersion::ALL {
            assert_eq!(ProtocolVersion::parse(v.as_str()), Some(v));
        }
        assert_eq!(ProtocolVersion::parse("2025-13-01"), None);
    }

    #[test]
    fn negotiation_echoes_served_versions_and_falls_back_to_latest() {
        assert_eq!(
            ProtocolVersion::negotiate("2025-06-18"),
            ProtocolVersion::V2025_06_18
        );
        assert_eq!(
            ProtocolVersion::negotiate("2024-11-05"),
            ProtocolVersion::V2024_11_05
        );
        assert_eq!(
            ProtocolVersion::negotiate("2026-07-28"),
            ProtocolVersion::V2025_11_25
        );
        assert_eq!(
            ProtocolVersion::negotiate("1.0"),
            ProtocolVersion::V2025_11_25
        );
    }

    #[test]
    fn served_list_is_newest_first() {
        assert_eq!(
            ProtocolVersion::served_list(),
            vec![
                "2026-07-28",
                "2025-11-25",
                "2025-06-18",
                "2025-03-26",
                "2024-11-05"
            ]
        );
    }
}
