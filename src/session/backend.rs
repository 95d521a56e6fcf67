//! The closed set of backends behind the `SessionStore` contract: memory or Redis.

use std::time::Duration;

use super::memory::MemorySessionStore;
use crate::cluster::RedisSessionStore;
use crate::store::{SessionId, SessionKey, SessionRecord, SessionStore, StoreError};

/// The configured backend. An enum rather than a trait object: a closed set, no boxing on the
/// request path.
#[allow(clippy::large_enum_variant)] // one per gateway process
pub enum SessionBackend {
    Memory(MemorySessionStore),
    Redis(RedisSessionStore),
}

impl SessionBackend {
    /// The Redis connection, when sessions are kept there (limits keep their counters there
    /// too, so that every replica enforces one limit).
    pub fn redis(&self) -> Option<&crate::cluster::Redis> {
        match self {
            SessionBackend::Memory(_) => None,
            SessionBackend::Redis(r) => Some(r.redis()),
        }
    }
}

impl SessionStore for SessionBackend {
    async fn create(
        &self,
        key: &SessionKey,
        record: &SessionRecord,
        ttl: Duration,
    ) -> Result<(), StoreError> {
        match self {
            SessionBackend::Memory(s) => s.create(key, record, ttl).await,
            SessionBackend::Redis(s) => s.create(key, record, ttl).await,
        }
    }

    async fn load(
        &self,
        key: &SessionKey,
        ttl: Duration,
    ) -> Result<Option<SessionRecord>, StoreError> {
        match self {
            SessionBackend::Memory(s) => s.load(key, ttl).await,
            SessionBackend::Redis(s) => s.load(key, ttl).await,
        }
    }

    async fn update(
        &self,
        key: &SessionKey,
        record: &SessionRecord,
        ttl: Duration,
    ) -> Result<bool, StoreError> {
        match self {
            SessionBackend::Memory(s) => s.update(key, record, ttl).await,
            SessionBackend::Redis(s) => s.update(key, record, ttl).await,
        }
    }

    async fn touch(&self, key: &SessionKey, ttl: Duration) -> Result<bool, StoreError> {
        match self {
            SessionBackend::Memory(s) => s.touch(key, ttl).await,
            SessionBackend::Redis(s) => s.touch(key, ttl).await,
        }
    }

    async fn delete(&self, key: &SessionKey) -> Result<bool, StoreError> {
        match self {
            SessionBackend::Memory(s) => s.delete(key).await,
            SessionBackend::Redis(s) => s.delete(key).await,
        }
    }

    async fn owner_of(&self, id: &SessionId) -> Result<Option<(String, String)>, StoreError> {
        match self {
            SessionBackend::Memory(s) => s.owner_of(id).await,
            SessionBackend::Redis(s) => s.owner_of(id).await,
        }
    }

    async fn ping(&self) -> Result<(), StoreError> {
        match self {
            SessionBackend::Memory(s) => s.ping().await,
            SessionBackend::Redis(s) => s.ping().await,
        }
    }
}
