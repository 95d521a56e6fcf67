//! `Health`: what the gateway last learned of an upstream by connecting to it — the last
//! successful handshake (revision, server name and version) and the last failure (its text) —
//! shared by every connection to the upstream, for the admin status page. Written when a
//! handshake ends and when a stdio child exits, never on a request's path.

use std::sync::Mutex;
use std::time::SystemTime;

use super::handshake::UpstreamServer;
use super::stdio::LinkState;
use crate::protocol::ProtocolVersion;

/// The last handshake and the last failure of one upstream's connections.
#[derive(Debug, Default)]
pub struct Health(Mutex<HealthReport>);

/// A copy of what [`Health`] holds.
#[derive(Debug, Clone, Default)]
pub struct HealthReport {
    /// The last successful handshake, with any connection to the upstream.
    pub connected: Option<Handshake>,
    /// The last time a connection could not be made or was lost, and why.
    pub failed: Option<Failure>,
}

#[derive(Debug, Clone)]
pub struct Handshake {
    pub at: SystemTime,
    pub protocol_version: ProtocolVersion,
    /// `serverInfo.name` and `.version`, as the upstream gave them.
    pub server_name: Option<String>,
    pub server_version: Option<String>,
}

#[derive(Debug, Clone)]
pub struct Failure {
    pub at: SystemTime,
    pub reason: String,
}

/// Where an upstream stands, as the status page shows it.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum State {
    /// Its processes have finished their handshake, or its last connection attempt did.
    Up,
    /// A process exited (a restart is scheduled), or the last connection attempt failed.
    Down,
    /// A process is starting again after it exited.
    Restarting,
    /// Its processes are starting for the first time.
    Starting,
    /// Nothing connected yet: it connects when a session needs it.
    Idle,
    /// Shut down, or removed by a reload.
    Stopped,
}

impl State {
    pub fn as_str(self) -> &'static str {
        match self {
            State::Up => "up",
            State::Down => "down",
            State::Restarting => "restarting",
            State::Starting => "starting",
            State::Idle => "idle",
            State::Stopped => "stopped",
        }
    }

    /// The state of a pool of stdio processes (each one's state and restarts): the worst of
    /// them.
    pub(super) fn of_pool(processes: impl Iterator<Item = (Option<LinkState>, u64)>) -> State {
        let rank = |s: State| match s {
            State::Up => 0,
            State::Stopped => 1,
            State::Idle => 2,
            State::Starting => 3,
            State::Restarting => 4,
            State::Down => 5,
        };
        processes
            .map(|(state, restarts)| match state {
                Some(LinkState::Ready) => State::Up,
                Some(LinkState::Down { .. }) => State::Down,
                Some(LinkState::Starting) if restarts > 0 => State::Restarting,
                Some(LinkState::Starting) => State::Starting,
                Some(LinkState::Closed) | None => State::Stopped,
            })
            .max_by_key(|s| rank(*s))
            .unwrap_or(State::Idle)
    }
}

impl HealthReport {
    /// Whether the last thing learned was a failure.
    pub fn failing(&self) -> bool {
        match (&self.connected, &self.failed) {
            (_, None) => false,
            (None, Some(_)) => true,
            (Some(ok), Some(failed)) => failed.at >= ok.at,
        }
    }
}

impl Health {
    /// A handshake succeeded.
    pub fn connected(&self, server: &UpstreamServer) {
        let text = |key: &str| {
            server.server_info[key]
                .as_str()
                .map(|s| s.chars().take(200).collect::<String>())
        };
        let handshake = Handshake {
            at: SystemTime::now(),
            protocol_version: server.protocol_version,
            server_name: text("name"),
            server_version: text("version"),
        };
        if let Ok(mut h) = self.0.lock() {
            h.connected = Some(handshake);
        }
    }

    /// A connection could not be made (or a child process exited): `reason` says why.
    pub fn failed(&self, reason: &str) {
        let failure = Failure {
            at: SystemTime::now(),
            reason: reason.chars().take(2000).collect(),
        };
        if let Ok(mut h) = self.0.lock() {
            h.failed = Some(failure);
        }
    }

    pub fn report(&self) -> HealthReport {
        self.0.lock().map(|h| h.clone()).unwrap_or_default()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_latest_event_decides() {
        let h = Health::default();
        assert!(!h.report().failing(), "nothing known is not failing");
        h.failed("refused");
        assert!(h.report().failing());
        h.connected(&UpstreamServer {
            protocol_version: ProtocolVersion::LATEST_HANDSHAKE,
            capabilities: serde_json::json!({}),
            server_info: serde_json::json!({"name": "demo", "version": "1.0"}),
            instructions: None,
        });
        let report = h.report();
        assert!(!report.failing());
        assert_eq!(report.failed.map(|f| f.reason).as_deref(), Some("refused"));
        assert_eq!(
            report.connected.and_then(|c| c.server_name).as_deref(),
            Some("demo")
        );
        h.failed("exited");
        assert!(h.report().failing());
    }

    #[test]
    fn a_pool_is_as_bad_as_its_worst_process() {
        let down = || LinkState::Down {
            reason: "exited".into(),
        };
        let pool =
            |p: Vec<(LinkState, u64)>| State::of_pool(p.into_iter().map(|(s, r)| (Some(s), r)));
        assert_eq!(
            pool(vec![(LinkState::Ready, 0), (LinkState::Ready, 3)]),
            State::Up
        );
        assert_eq!(pool(vec![(LinkState::Ready, 0), (down(), 1)]), State::Down);
        assert_eq!(
            pool(vec![(LinkState::Starting, 2), (LinkState::Ready, 0)]),
            State::Restarting
        );
        assert_eq!(pool(vec![(LinkState::Starting, 0)]), State::Starting);
        assert_eq!(pool(vec![(LinkState::Closed, 0)]), State::Stopped);
    }
}
