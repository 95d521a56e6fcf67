//! The `SessionStore` contract: records found by tenant, user and id together
//! (`SessionKey`), with a sliding time-to-live, and the errors a store reports.

use std::fmt;
use std::future::Future;
use std::sync::Arc;
use std::time::Duration;

use super::{SessionId, SessionRecord};

/// Every stored session is found by tenant, user and id together: an id alone finds nothing,
/// so a session id presented by another user or to another tenant is simply unknown.
#[derive(Clone, PartialEq, Eq, Hash)]
pub struct SessionKey {
    pub tenant: Arc<str>,
    /// The authenticated user (issuer + subject); `anonymous` on tenants without auth.
    pub user: Arc<str>,
    pub id: SessionId,
}

impl fmt::Debug for SessionKey {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{}:{}:{:?}", self.tenant, self.user, self.id)
    }
}

#[derive(Debug, Clone, thiserror::Error)]
pub enum StoreError {
    #[error("session store unavailable: {0}")]
    Unavailable(String),
    #[error("session record is corrupt: {0}")]
    Corrupt(String),
    /// `create` found a record under the id already (two creations raced, or ids collided).
    #[error("a session with this id already exists")]
    Exists,
}

/// Durable session records with a sliding time-to-live.
pub trait SessionStore: Send + Sync {
    /// Stores a new record; `Exists` when one is stored under the id (nothing is replaced).
    fn create(
        &self,
        key: &SessionKey,
        record: &SessionRecord,
        ttl: Duration,
    ) -> impl Future<Output = Result<(), StoreError>> + Send;

    /// The record, with its time-to-live restarted; `None` when unknown, expired or deleted.
    fn load(
        &self,
        key: &SessionKey,
        ttl: Duration,
    ) -> impl Future<Output = Result<Option<SessionRecord>, StoreError>> + Send;

    /// Replaces an existing record; `false` (and nothing stored) when it no longer exists.
    fn update(
        &self,
        key: &SessionKey,
        record: &SessionRecord,
        ttl: Duration,
    ) -> impl Future<Output = Result<bool, StoreError>> + Send;

    /// Restarts the time-to-live; `false` when the record no longer exists.
    fn touch(
        &self,
        key: &SessionKey,
        ttl: Duration,
    ) -> impl Future<Output = Result<bool, StoreError>> + Send;

    /// Removes the record; `false` when it did not exist.
    fn delete(&self, key: &SessionKey) -> impl Future<Output = Result<bool, StoreError>> + Send;

    /// The tenant and user a session id belongs to. Never used to find a session: only to
    /// report, as a security event, an id presented by someone else.
    fn owner_of(
        &self,
        id: &SessionId,
    ) -> impl Future<Output = Result<Option<(String, String)>, StoreError>> + Send;

    /// Whether the store answers (readiness).
    fn ping(&self) -> impl Future<Output = Result<(), StoreError>> + Send;
}
