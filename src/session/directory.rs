//! The live sessions of a tenant on this replica (by id), and the 2024-11-05 streams held
//! here: what a request, a bus message or a shared upstream connection finds sessions in.

use std::borrow::Borrow;
use std::hash::Hash;
use std::sync::Arc;

use bytes::Bytes;
use dashmap::DashMap;

use super::{LegacyStreams, LiveSession, SessionId};

/// Counts of what a tenant's clients hold on this replica ([`SessionDirectory::usage`]).
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, serde::Serialize)]
pub struct DirectoryUsage {
    /// Live sessions.
    pub sessions: usize,
    /// Of which the client sent `notifications/initialized`.
    pub initialized: usize,
    /// GET (SSE) connections open.
    pub get_streams: usize,
    /// 2024-11-05 SSE streams open.
    pub legacy_streams: usize,
    /// Requests being answered (each a POST response or stream).
    pub requests_in_flight: usize,
}

/// The live sessions of a tenant on this replica, and the 2024-11-05 streams held here.
/// Session ids are the gateway's own (random, or derived with its key): the map hashes them
/// with foldhash rather than SipHash (a lookup per request).
#[derive(Default)]
pub struct SessionDirectory {
    sessions: DashMap<SessionId, Arc<LiveSession>, foldhash::fast::RandomState>,
    pub legacy_streams: LegacyStreams,
}

impl SessionDirectory {
    /// The live session of an id, or of an id's text as a client presented it.
    pub fn get<Q>(&self, id: &Q) -> Option<Arc<LiveSession>>
    where
        SessionId: Borrow<Q>,
        Q: Hash + Eq + ?Sized,
    {
        self.sessions.get(id).map(|s| s.clone())
    }

    pub fn insert(&self, session: Arc<LiveSession>) {
        self.sessions.insert(session.key.id.clone(), session);
    }

    /// Inserts `session` unless one with its id is there already; returns the one kept.
    pub fn insert_or_get(&self, session: Arc<LiveSession>) -> Arc<LiveSession> {
        self.sessions
            .entry(session.key.id.clone())
            .or_insert(session)
            .clone()
    }

    pub fn remove(&self, id: &SessionId) -> Option<Arc<LiveSession>> {
        self.sessions.remove(id).map(|(_, s)| s)
    }

    pub fn len(&self) -> usize {
        self.sessions.len()
    }

    pub fn is_empty(&self) -> bool {
        self.sessions.is_empty()
    }

    /// All sessions (a snapshot).
    pub fn all(&self) -> Vec<Arc<LiveSession>> {
        self.sessions.iter().map(|e| e.value().clone()).collect()
    }

    /// What the sessions hold open now (a walk over them: for the status page, not for
    /// requests).
    pub fn usage(&self) -> DirectoryUsage {
        let mut usage = DirectoryUsage {
            legacy_streams: self.legacy_streams.len(),
            ..DirectoryUsage::default()
        };
        for s in self.sessions.iter() {
            usage.sessions += 1;
            usage.initialized += usize::from(s.is_initialized());
            usage.get_streams += s.get_connections();
            usage.requests_in_flight += s.in_flight.count() as usize;
        }
        usage
    }

    /// Sends a message to every session's GET stream (list changes of shared upstreams).
    pub fn broadcast(&self, bytes: &Bytes) {
        for s in self.sessions.iter() {
            s.deliver_unsolicited(bytes.clone());
        }
    }
}

impl crate::upstream::Broadcast for SessionDirectory {
    fn broadcast(&self, bytes: &Bytes) {
        SessionDirectory::broadcast(self, bytes);
    }
}
