//! In-process `SessionStore`: a sharded map with lazy expiry plus a periodic sweep. Records
//! are kept as their JSON text, as in Redis: a few hundred bytes, where the parsed record's
//! JSON maps (the client's capabilities and info, each upstream session's capabilities and
//! server info) cost ~640 B per object — 3 to 5 KB for every idle session. The live session
//! on this replica holds the parsed values; the text is read back only when it has none.

use std::time::{Duration, Instant};

use dashmap::DashMap;

use crate::store::{SessionId, SessionKey, SessionRecord, SessionStore, StoreError};

struct Entry {
    /// The record's JSON text.
    record: Box<[u8]>,
    expires_at: Instant,
}

fn encode(record: &SessionRecord) -> Result<Box<[u8]>, StoreError> {
    serde_json::to_vec(record)
        .map(Vec::into_boxed_slice)
        .map_err(|e| StoreError::Corrupt(e.to_string()))
}

fn decode(text: &[u8]) -> Result<SessionRecord, StoreError> {
    serde_json::from_slice(text).map_err(|e| StoreError::Corrupt(e.to_string()))
}

/// The zero-setup default store. Sharded (no global lock); expired entries disappear on the
/// next access and in [`MemorySessionStore::purge_expired`].
#[derive(Default)]
pub struct MemorySessionStore {
    entries: DashMap<SessionKey, Entry>,
    /// Session id → its key, to report ids presented by someone else.
    owners: DashMap<SessionId, SessionKey>,
    /// Gateway-run tasks' records (`session::tasks`).
    pub(super) tasks: super::MemoryTasks,
}

impl MemorySessionStore {
    pub fn new() -> Self {
        Self::default()
    }

    /// Drops every expired record; returns how many were dropped.
    pub fn purge_expired(&self) -> usize {
        let now = Instant::now();
        let before = self.entries.len();
        self.entries.retain(|_, e| e.expires_at > now);
        self.owners.retain(|_, k| self.entries.contains_key(k));
        before.saturating_sub(self.entries.len())
    }

    pub fn len(&self) -> usize {
        self.entries.len()
    }

    pub fn is_empty(&self) -> bool {
        self.entries.is_empty()
    }
}

impl SessionStore for MemorySessionStore {
    async fn create(
        &self,
        key: &SessionKey,
        record: &SessionRecord,
        ttl: Duration,
    ) -> Result<(), StoreError> {
        let text = encode(record)?;
        match self.entries.entry(key.clone()) {
            dashmap::Entry::Occupied(e) if e.get().expires_at > Instant::now() => {
                return Err(StoreError::Exists);
            }
            e => {
                e.insert(Entry {
                    record: text,
                    expires_at: Instant::now() + ttl,
                });
            }
        }
        self.owners.insert(key.id.clone(), key.clone());
        Ok(())
    }

    async fn load(
        &self,
        key: &SessionKey,
        ttl: Duration,
    ) -> Result<Option<SessionRecord>, StoreError> {
        let now = Instant::now();
        if let Some(mut e) = self.entries.get_mut(key) {
            if e.expires_at > now {
                e.expires_at = now + ttl;
                return decode(&e.record).map(Some);
            }
        } else {
            return Ok(None);
        }
        self.entries.remove_if(key, |_, e| e.expires_at <= now);
        Ok(None)
    }

    async fn update(
        &self,
        key: &SessionKey,
        record: &SessionRecord,
        ttl: Duration,
    ) -> Result<bool, StoreError> {
        let text = encode(record)?;
        let now = Instant::now();
        match self.entries.get_mut(key) {
            Some(mut e) if e.expires_at > now => {
                e.record = text;
                e.expires_at = now + ttl;
                Ok(true)
            }
            _ => Ok(false),
        }
    }

    async fn touch(&self, key: &SessionKey, ttl: Duration) -> Result<bool, StoreError> {
        let now = Instant::now();
        match self.entries.get_mut(key) {
            Some(mut e) if e.expires_at > now => {
                e.expires_at = now + ttl;
                Ok(true)
            }
            _ => Ok(false),
        }
    }

    async fn delete(&self, key: &SessionKey) -> Result<bool, StoreError> {
        self.owners.remove_if(&key.id, |_, k| k == key);
        Ok(self.entries.remove(key).is_some())
    }

    async fn owner_of(&self, id: &SessionId) -> Result<Option<(String, String)>, StoreError> {
        let Some(key) = self.owners.get(id).map(|k| k.clone()) else {
            return Ok(None);
        };
        let live = self
            .entries
            .get(&key)
            .is_some_and(|e| e.expires_at > Instant::now());
        Ok(live.then(|| (key.tenant.to_string(), key.user.to_string())))
    }

    async fn ping(&self) -> Result<(), StoreError> {
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used)]
    use super::*;
    use serde_json::json;

    fn key(user: &str) -> SessionKey {
        SessionKey {
            tenant: "t".into(),
            user: user.into(),
            id: SessionId::from_presented("abc").unwrap(),
        }
    }

    fn record() -> SessionRecord {
        SessionRecord {
            budget: None,
            log_level: None,
            protocol_version: "2025-11-25".into(),
            client_capabilities: json!({}),
            client_info: json!({"name": "c"}),
            initialized: false,
            upstream_sessions: Default::default(),
            subscriptions: Default::default(),
            created_at_ms: 1,
            transport: Default::default(),
        }
    }

    #[tokio::test]
    async fn same_id_under_another_user_is_unknown() {
        let s = MemorySessionStore::new();
        let ttl = Duration::from_secs(60);
        s.create(&key("alice"), &record(), ttl).await.unwrap();
        assert!(s.load(&key("alice"), ttl).await.unwrap().is_some());
        assert!(s.load(&key("mallory"), ttl).await.unwrap().is_none());
        assert!(!s.delete(&key("mallory")).await.unwrap());
        assert!(s.delete(&key("alice")).await.unwrap());
        assert!(s.load(&key("alice"), ttl).await.unwrap().is_none());
    }

    #[tokio::test]
    async fn expiry_is_sliding_and_purged() {
        let s = MemorySessionStore::new();
        let short = Duration::from_millis(30);
        s.create(&key("a"), &record(), short).await.unwrap();
        tokio::time::sleep(Duration::from_millis(20)).await;
        assert!(s.touch(&key("a"), short).await.unwrap());
        tokio::time::sleep(Duration::from_millis(20)).await;
        assert!(
            s.load(&key("a"), short).await.unwrap().is_some(),
            "touch extended it"
        );
        tokio::time::sleep(Duration::from_millis(40)).await;
        assert!(!s.update(&key("a"), &record(), short).await.unwrap());
        assert_eq!(s.purge_expired(), 1);
        assert!(s.is_empty());
    }
}
