//! Gateway-run tasks' records in the session store's backend (`store::TaskRecord`): a map
//! with lazy expiry in memory, `SET PX`/`GET` in Redis (`cluster::RedisSessionStore`), so a
//! task's status and result outlive its client's connection and any replica reads them; and
//! in Redis the answers one replica takes for the replica running the task.

use std::time::{Duration, Instant};

use dashmap::DashMap;

use super::SessionBackend;
use crate::store::{SessionKey, StoreError, TaskRecord};

/// Sweep the memory map when it grows past this many records.
const SWEEP_AT: usize = 4096;

/// The memory store's task records.
#[derive(Default)]
pub struct MemoryTasks {
    records: DashMap<SessionKey, (TaskRecord, Instant)>,
}

impl MemoryTasks {
    fn put(&self, key: &SessionKey, record: &TaskRecord, ttl: Duration) {
        if self.records.len() >= SWEEP_AT {
            let now = Instant::now();
            self.records.retain(|_, (_, until)| *until > now);
        }
        self.records
            .insert(key.clone(), (record.clone(), Instant::now() + ttl));
    }

    fn get(&self, key: &SessionKey) -> Option<TaskRecord> {
        let entry = self.records.get(key)?;
        if entry.1 <= Instant::now() {
            drop(entry);
            self.records.remove(key);
            return None;
        }
        Some(entry.0.clone())
    }
}

impl SessionBackend {
    /// Stores a task's record for `ttl` (replacing what was there).
    pub async fn put_task(
        &self,
        key: &SessionKey,
        record: &TaskRecord,
        ttl: Duration,
    ) -> Result<(), StoreError> {
        match self {
            SessionBackend::Memory(s) => {
                s.tasks.put(key, record, ttl);
                Ok(())
            }
            SessionBackend::Redis(s) => s.put_task(key, record, ttl).await,
        }
    }

    /// A task's record, if it exists and has not expired.
    pub async fn get_task(&self, key: &SessionKey) -> Result<Option<TaskRecord>, StoreError> {
        match self {
            SessionBackend::Memory(s) => Ok(s.tasks.get(key)),
            SessionBackend::Redis(s) => s.get_task(key).await,
        }
    }

    /// Queues answers for a task running on another replica (Redis only: with the memory
    /// store every task runs in this process). `false` when there is no one to queue for.
    pub async fn push_task_input(
        &self,
        key: &SessionKey,
        responses: &str,
        ttl: Duration,
    ) -> Result<bool, StoreError> {
        match self {
            SessionBackend::Memory(_) => Ok(false),
            SessionBackend::Redis(s) => s.push_task_input(key, responses, ttl).await.map(|()| true),
        }
    }

    /// Takes the answers other replicas queued for a task running here.
    pub async fn take_task_input(&self, key: &SessionKey) -> Result<Vec<String>, StoreError> {
        match self {
            SessionBackend::Memory(_) => Ok(Vec::new()),
            SessionBackend::Redis(s) => s.take_task_input(key).await,
        }
    }
}
