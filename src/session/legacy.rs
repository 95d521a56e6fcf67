//! `LegacyStreams`: the 2024-11-05 (HTTP+SSE) streams a tenant's clients hold open on this
//! replica, by session id. A stream exists before its session (the `endpoint` event names the
//! id that `initialize` then creates), and a session may be live on another replica than its
//! stream: messages for it are delivered here by id and user.

use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};

use dashmap::DashMap;

use super::SessionId;
use crate::events::StreamLog;

#[derive(Default)]
pub struct LegacyStreams {
    streams: DashMap<SessionId, Stream>,
}

struct Stream {
    /// Only this user's messages go to the stream (an id alone finds nothing).
    user: Arc<str>,
    log: Arc<StreamLog>,
    /// An `initialize` is running or done on this replica: a second one is refused.
    initializing: AtomicBool,
}

impl LegacyStreams {
    /// Records a new stream for session `id` of `user`.
    pub fn open(&self, id: &SessionId, user: &Arc<str>, log: Arc<StreamLog>) {
        self.streams.insert(
            id.clone(),
            Stream {
                user: user.clone(),
                log,
                initializing: AtomicBool::new(false),
            },
        );
    }

    /// The stream of session `id`, if `user` holds it here.
    pub fn get(&self, id: &SessionId, user: &str) -> Option<Arc<StreamLog>> {
        let s = self.streams.get(id)?;
        (*s.user == *user).then(|| s.log.clone())
    }

    /// Marks the stream's session as being initialized; `false` if it already is.
    pub fn begin_initialize(&self, id: &SessionId, user: &str) -> bool {
        self.streams
            .get(id)
            .is_some_and(|s| *s.user == *user && !s.initializing.swap(true, Ordering::AcqRel))
    }

    /// Whether an `initialize` of the stream's session is running or done on this replica.
    pub fn is_initializing(&self, id: &SessionId) -> bool {
        self.streams
            .get(id)
            .is_some_and(|s| s.initializing.load(Ordering::Acquire))
    }

    /// An `initialize` failed: the client may try again.
    pub fn initialize_failed(&self, id: &SessionId) {
        if let Some(s) = self.streams.get(id) {
            s.initializing.store(false, Ordering::Release);
        }
    }

    /// Records `message` on the stream of session `id` of `user`; `false` when there is none.
    pub fn deliver(&self, id: &SessionId, user: &str, message: &[u8]) -> bool {
        self.get(id, user)
            .is_some_and(|log| log.append(message, false))
    }

    /// Ends the stream of session `id` of `user` (the session ended); the client sees it close.
    pub fn finish(&self, id: &SessionId, user: &str) {
        if let Some(log) = self.get(id, user) {
            log.finish();
        }
    }

    /// Forgets the stream (its client is gone).
    pub fn remove(&self, id: &SessionId) {
        self.streams.remove(id);
    }

    /// Ends every stream (the tenant is shutting down).
    pub fn finish_all(&self) {
        for s in self.streams.iter() {
            s.log.finish();
        }
    }

    pub fn len(&self) -> usize {
        self.streams.len()
    }

    pub fn is_empty(&self) -> bool {
        self.streams.is_empty()
    }
}
