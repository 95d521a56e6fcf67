//! Gateway-run tasks' records in Redis (`store::TaskRecord` as JSON under
//! `<prefix>:v1:task:{<tenant>:<user>:<task>}`, expiring with the task's ttl), and the answers
//! another replica took for the one running it (a list under `…:task-in:{…}`).

use std::time::Duration;

use super::RedisSessionStore;
use crate::store::{SessionKey, StoreError, TaskRecord};

impl RedisSessionStore {
    pub async fn put_task(
        &self,
        key: &SessionKey,
        record: &TaskRecord,
        ttl: Duration,
    ) -> Result<(), StoreError> {
        let json = serde_json::to_string(record).map_err(|e| StoreError::Corrupt(e.to_string()))?;
        let redis = self.redis();
        let task_key = redis.keys.task(key);
        let mut conn = redis.conn.clone();
        let ms = ttl.as_millis().max(1) as u64;
        redis
            .run("task_put", async move {
                redis::cmd("SET")
                    .arg(&task_key)
                    .arg(json)
                    .arg("PX")
                    .arg(ms)
                    .query_async::<()>(&mut conn)
                    .await
            })
            .await
    }

    pub async fn get_task(&self, key: &SessionKey) -> Result<Option<TaskRecord>, StoreError> {
        let redis = self.redis();
        let task_key = redis.keys.task(key);
        let mut conn = redis.conn.clone();
        let json: Option<String> = redis
            .run("task_get", async move {
                redis::cmd("GET")
                    .arg(&task_key)
                    .query_async(&mut conn)
                    .await
            })
            .await?;
        json.map(|j| serde_json::from_str(&j).map_err(|e| StoreError::Corrupt(e.to_string())))
            .transpose()
    }

    /// Queues `responses` (an `inputResponses` object) for the replica running the task.
    pub async fn push_task_input(
        &self,
        key: &SessionKey,
        responses: &str,
        ttl: Duration,
    ) -> Result<(), StoreError> {
        let redis = self.redis();
        let list = redis.keys.task_input(key);
        let mut conn = redis.conn.clone();
        let ms = ttl.as_millis().max(1) as u64;
        let responses = responses.to_owned();
        redis
            .run("task_input_push", async move {
                redis::pipe()
                    .atomic()
                    .cmd("RPUSH")
                    .arg(&list)
                    .arg(responses)
                    .ignore()
                    .cmd("PEXPIRE")
                    .arg(&list)
                    .arg(ms)
                    .ignore()
                    .query_async::<()>(&mut conn)
                    .await
            })
            .await
    }

    /// Takes every queued answer for the task, oldest first.
    pub async fn take_task_input(&self, key: &SessionKey) -> Result<Vec<String>, StoreError> {
        let redis = self.redis();
        let list = redis.keys.task_input(key);
        let mut conn = redis.conn.clone();
        let (taken,): (Vec<String>,) = redis
            .run("task_input_take", async move {
                redis::pipe()
                    .atomic()
                    .cmd("LRANGE")
                    .arg(&list)
                    .arg(0)
                    .arg(-1)
                    .cmd("DEL")
                    .arg(&list)
                    .ignore()
                    .query_async(&mut conn)
                    .await
            })
            .await?;
        Ok(taken)
    }
}
