//! `RedisSessionStore`: session records shared by every replica, with the same semantics as the
//! in-memory store (sliding TTL, tenant + user in every key, owner index for security logs).

use std::time::Duration;

use super::Redis;
use crate::store::{SessionId, SessionKey, SessionRecord, SessionStore, StoreError};

pub struct RedisSessionStore {
    redis: Redis,
}

impl RedisSessionStore {
    pub fn new(redis: Redis) -> RedisSessionStore {
        RedisSessionStore { redis }
    }

    /// The connection it uses (shared with the limits kept in Redis).
    pub fn redis(&self) -> &Redis {
        &self.redis
    }
}

fn ttl_secs(ttl: Duration) -> u64 {
    ttl.as_secs().max(1)
}

fn encode(record: &SessionRecord) -> Result<String, StoreError> {
    serde_json::to_string(record).map_err(|e| StoreError::Corrupt(e.to_string()))
}

impl SessionStore for RedisSessionStore {
    async fn create(
        &self,
        key: &SessionKey,
        record: &SessionRecord,
        ttl: Duration,
    ) -> Result<(), StoreError> {
        let json = encode(record)?;
        let owner = format!("{}\n{}", key.tenant, key.user);
        let (session_key, owner_key) =
            (self.redis.keys.session(key), self.redis.keys.owner(&key.id));
        let mut conn = self.redis.conn.clone();
        let secs = ttl_secs(ttl);
        let set = |key: &str, value: String, only_new: bool| {
            let mut cmd = redis::cmd("SET");
            cmd.arg(key).arg(value).arg("EX").arg(secs);
            if only_new {
                cmd.arg("NX");
            }
            cmd
        };
        let (session_set, owner_set) =
            (set(&session_key, json, true), set(&owner_key, owner, false));
        let created: (Option<String>, String) = if self.redis.is_cluster() {
            // The owner index is keyed by the id alone, so on a cluster it lives on another
            // slot than the record: written after it, not atomically with it (it only serves
            // security logs).
            self.redis
                .run("session_create", async move {
                    let created: Option<String> = session_set.query_async(&mut conn).await?;
                    if created.is_none() {
                        return Ok((None, String::new()));
                    }
                    let owner: String = owner_set.query_async(&mut conn).await?;
                    Ok((created, owner))
                })
                .await?
        } else {
            self.redis
                .run("session_create", async move {
                    redis::pipe()
                        .atomic()
                        .add_command(session_set)
                        .add_command(owner_set)
                        .query_async(&mut conn)
                        .await
                })
                .await?
        };
        match created.0 {
            Some(_) => Ok(()),
            // Two creations of one id raced (a 2024-11-05 `initialize` on two replicas), or a
            // 192-bit id collided: refuse rather than overwrite.
            None => Err(StoreError::Exists),
        }
    }

    async fn load(
        &self,
        key: &SessionKey,
        ttl: Duration,
    ) -> Result<Option<SessionRecord>, StoreError> {
        let session_key = self.redis.keys.session(key);
        let mut conn = self.redis.conn.clone();
        let secs = ttl_secs(ttl);
        let json: Option<String> = self
            .redis
            .run("session_load", async move {
                redis::cmd("GETEX")
                    .arg(&session_key)
                    .arg("EX")
                    .arg(secs)
                    .query_async(&mut conn)
                    .await
            })
            .await?;
        json.map(|j| serde_json::from_str(&j).map_err(|e| StoreError::Corrupt(e.to_string())))
            .transpose()
    }

    async fn update(
        &self,
        key: &SessionKey,
        record: &SessionRecord,
        ttl: Duration,
    ) -> Result<bool, StoreError> {
        let json = encode(record)?;
        let session_key = self.redis.keys.session(key);
        let mut conn = self.redis.conn.clone();
        let secs = ttl_secs(ttl);
        let updated: Option<String> = self
            .redis
            .run("session_update", async move {
                redis::cmd("SET")
                    .arg(&session_key)
                    .arg(json)
                    .arg("EX")
                    .arg(secs)
                    .arg("XX")
                    .query_async(&mut conn)
                    .await
            })
            .await?;
        Ok(updated.is_some())
    }

    async fn touch(&self, key: &SessionKey, ttl: Duration) -> Result<bool, StoreError> {
        let (session_key, owner_key) =
            (self.redis.keys.session(key), self.redis.keys.owner(&key.id));
        let mut conn = self.redis.conn.clone();
        let secs = ttl_secs(ttl);
        let expire = |key: &str| redis::cmd("EXPIRE").arg(key).arg(secs).clone();
        let (session_expire, owner_expire) = (expire(&session_key), expire(&owner_key));
        let cluster = self.redis.is_cluster();
        let (touched, _): (i64, i64) = self
            .redis
            .run("session_touch", async move {
                if cluster {
                    // Two slots: two commands, sent together.
                    let mut other = conn.clone();
                    let (a, b) = futures_util::future::join(
                        session_expire.query_async::<i64>(&mut conn),
                        owner_expire.query_async::<i64>(&mut other),
                    )
                    .await;
                    Ok((a?, b?))
                } else {
                    redis::pipe()
                        .add_command(session_expire)
                        .add_command(owner_expire)
                        .query_async(&mut conn)
                        .await
                }
            })
            .await?;
        Ok(touched == 1)
    }

    async fn delete(&self, key: &SessionKey) -> Result<bool, StoreError> {
        let (session_key, owner_key) =
            (self.redis.keys.session(key), self.redis.keys.owner(&key.id));
        let mut conn = self.redis.conn.clone();
        let deleted: i64 = self
            .redis
            .run("session_delete", async move {
                redis::cmd("DEL")
                    .arg(&session_key)
                    .query_async(&mut conn)
                    .await
            })
            .await?;
        if deleted == 1 {
            // Only the owner's own delete clears the owner index: a DELETE with a stolen id
            // must not erase the trace of whose id it was.
            let mut conn = self.redis.conn.clone();
            let _: i64 = self
                .redis
                .run("session_delete_owner", async move {
                    redis::cmd("DEL")
                        .arg(&owner_key)
                        .query_async(&mut conn)
                        .await
                })
                .await?;
        }
        Ok(deleted == 1)
    }

    async fn owner_of(&self, id: &SessionId) -> Result<Option<(String, String)>, StoreError> {
        let owner_key = self.redis.keys.owner(id);
        let mut conn = self.redis.conn.clone();
        let owner: Option<String> = self
            .redis
            .run("owner_of", async move {
                redis::cmd("GET")
                    .arg(&owner_key)
                    .query_async(&mut conn)
                    .await
            })
            .await?;
        Ok(owner.and_then(|o| {
            let (tenant, user) = o.split_once('\n')?;
            Some((tenant.to_owned(), user.to_owned()))
        }))
    }

    async fn ping(&self) -> Result<(), StoreError> {
        self.redis.ping().await
    }
}
