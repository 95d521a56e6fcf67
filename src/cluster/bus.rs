//! The message bus between replicas (Redis pub/sub; sharded pub/sub on a Redis Cluster, see
//! `listen.rs`). Each replica listens on its own channel and on the broadcast channel: a server-initiated message goes to the replica holding the
//! client's GET stream; the client's answer to a server-to-client request goes to the replica
//! named in the request id; a stateless client's retry of a request parked on another replica
//! goes to that replica and what follows comes back; cancellations and session ends are
//! broadcast. With the in-memory store there is one replica and the bus carries nothing.

use std::sync::Arc;
use std::time::Duration;

use rand::TryRng;
use serde::{Deserialize, Serialize};

use super::{Redis, RedisEvents};
use crate::store::{SessionKey, StoreError};

/// How long a GET-stream claim lives unless refreshed (refreshed with every keep-alive).
pub const GET_CLAIM_TTL: Duration = Duration::from_secs(60);

/// One message between replicas. `message` is a complete JSON-RPC message, as text.
#[derive(Debug, Clone, Serialize, Deserialize)]
#[serde(tag = "t", rename_all = "snake_case")]
pub enum BusMessage {
    /// For the client's GET stream (held by the receiving replica).
    Deliver { to: Target, message: String },
    /// The client's answer to a server-to-client request of the receiving replica.
    Answer { to: Target, message: String },
    /// The client's progress on such a request.
    Progress { to: Target, message: String },
    /// The client cancelled a request that may run on any replica.
    Cancel { to: Target, message: String },
    /// The session ended (DELETE) on some replica: drop its live state everywhere.
    Ended { to: Target },
    /// Replica `by` now serves the session's GET stream: the others stop recording into theirs.
    GetMoved { to: Target, by: String },
    /// A stateless client's retry of a request parked on the receiving replica (`handle`),
    /// received by replica `reply_to`: continue it there and send what follows as `Resumed`
    /// under `key`. `id` is the retry's id and `params` its params (raw JSON text); the
    /// retry's state was verified by the sender.
    Resume {
        to: Target,
        handle: String,
        id: String,
        method: String,
        name: Option<String>,
        params: String,
        reply_to: String,
        key: String,
    },
    /// What a resumed request sends its client: an empty `message` first (the request was
    /// found and is going on), then messages; the last has `done` and the HTTP status.
    Resumed {
        to: Target,
        key: String,
        message: String,
        done: bool,
        status: u16,
    },
    /// The client of a resumed request went away: the request is cancelled.
    ResumeClosed { to: Target, key: String },
}

/// The session a bus message concerns.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Target {
    pub tenant: String,
    pub user: String,
    pub session: String,
}

impl From<&SessionKey> for Target {
    fn from(k: &SessionKey) -> Target {
        Target {
            tenant: k.tenant.to_string(),
            user: k.user.to_string(),
            session: k.id.as_str().to_owned(),
        }
    }
}

impl BusMessage {
    pub fn target(&self) -> &Target {
        match self {
            BusMessage::Deliver { to, .. }
            | BusMessage::Answer { to, .. }
            | BusMessage::Progress { to, .. }
            | BusMessage::Cancel { to, .. }
            | BusMessage::Ended { to }
            | BusMessage::GetMoved { to, .. }
            | BusMessage::Resume { to, .. }
            | BusMessage::Resumed { to, .. }
            | BusMessage::ResumeClosed { to, .. } => to,
        }
    }
}

pub struct Bus {
    /// This replica's id: random, short, safe in ids and channel names.
    pub replica: Arc<str>,
    redis: Option<Redis>,
    /// SSE event logs shared with the other replicas.
    pub events: Option<Arc<RedisEvents>>,
    /// The secret the replicas derive their tenants' signing keys from (none: one replica).
    secret: Option<ring::hmac::Key>,
}

impl Bus {
    /// One replica, nothing to share.
    pub fn local() -> Bus {
        Bus {
            replica: replica_id().into(),
            redis: None,
            events: None,
            secret: None,
        }
    }

    /// A replica among others sharing `redis`; event logs live as long as sessions (`ttl`),
    /// and the copy of each keeps its last `mirror_len` events (a local log's window).
    pub fn redis(
        redis: Redis,
        ttl: Duration,
        secret: Vec<u8>,
        mirror_len: usize,
        durability: crate::config::EventDurability,
    ) -> Bus {
        Bus {
            secret: Some(ring::hmac::Key::new(ring::hmac::HMAC_SHA256, &secret)),
            replica: replica_id().into(),
            events: Some(Arc::new(RedisEvents::new(
                redis.clone(),
                ttl,
                mirror_len,
                durability,
            ))),
            redis: Some(redis),
        }
    }

    /// The key a tenant signs its opaque tokens with (list cursors, MRTR states) and derives
    /// stateless session ids from: the same on every replica sharing the store, random on a
    /// lone replica.
    pub fn tenant_key(&self, tenant: &str) -> crate::signing::CursorKey {
        match &self.secret {
            Some(secret) => {
                let derived = ring::hmac::sign(secret, format!("tenant:{tenant}").as_bytes());
                crate::signing::CursorKey::from_secret(derived.as_ref())
            }
            None => crate::signing::CursorKey::random(),
        }
    }

    /// Whether other replicas may hold this replica's sessions' streams.
    pub fn is_clustered(&self) -> bool {
        self.redis.is_some()
    }

    async fn publish(&self, channel: String, message: &BusMessage) -> Result<(), StoreError> {
        let Some(redis) = &self.redis else {
            return Ok(());
        };
        let payload =
            serde_json::to_string(message).map_err(|e| StoreError::Corrupt(e.to_string()))?;
        let mut conn = redis.conn.clone();
        // On a cluster a plain PUBLISH reaches every node; a sharded one only the channel's
        // shard (where its subscribers are).
        let command = if redis.is_cluster() {
            "SPUBLISH"
        } else {
            "PUBLISH"
        };
        redis
            .run("publish", async move {
                redis::cmd(command)
                    .arg(&channel)
                    .arg(payload)
                    .query_async::<i64>(&mut conn)
                    .await
            })
            .await
            .map(|_| ())
    }

    pub async fn send_to(&self, replica: &str, message: &BusMessage) -> Result<(), StoreError> {
        let Some(redis) = &self.redis else {
            return Ok(());
        };
        self.publish(redis.keys.replica_channel(replica), message)
            .await
    }

    pub async fn broadcast(&self, message: &BusMessage) -> Result<(), StoreError> {
        let Some(redis) = &self.redis else {
            return Ok(());
        };
        self.publish(redis.keys.broadcast_channel(), message).await
    }

    /// Records that this replica holds the session's GET stream (also used as the refresh).
    pub async fn claim_get_stream(&self, key: &SessionKey) -> Result<(), StoreError> {
        let Some(redis) = &self.redis else {
            return Ok(());
        };
        let (holder, replica) = (redis.keys.get_holder(key), self.replica.to_string());
        let mut conn = redis.conn.clone();
        redis
            .run("claim_get", async move {
                redis::cmd("SET")
                    .arg(&holder)
                    .arg(replica)
                    .arg("EX")
                    .arg(GET_CLAIM_TTL.as_secs())
                    .query_async::<()>(&mut conn)
                    .await
            })
            .await
    }

    /// Drops the claim if it is still this replica's.
    pub async fn release_get_stream(&self, key: &SessionKey) -> Result<(), StoreError> {
        let Some(redis) = &self.redis else {
            return Ok(());
        };
        let (holder, replica) = (redis.keys.get_holder(key), self.replica.to_string());
        let mut conn = redis.conn.clone();
        redis
            .run("release_get", async move {
                redis::Script::new(
                    "if redis.call('GET', KEYS[1]) == ARGV[1] then return redis.call('DEL', KEYS[1]) end return 0",
                )
                .key(holder)
                .arg(replica)
                .invoke_async::<i64>(&mut conn)
                .await
            })
            .await
            .map(|_| ())
    }

    /// The replica holding the session's GET stream, if any.
    pub async fn get_stream_holder(&self, key: &SessionKey) -> Result<Option<String>, StoreError> {
        let Some(redis) = &self.redis else {
            return Ok(None);
        };
        let holder = redis.keys.get_holder(key);
        let mut conn = redis.conn.clone();
        redis
            .run("get_holder", async move {
                redis::cmd("GET").arg(&holder).query_async(&mut conn).await
            })
            .await
    }

    /// Listens on this replica's channel and the broadcast channel until the task is aborted,
    /// reconnecting with backoff; every message is handed to `handle`.
    pub fn spawn_listener(
        self: &Arc<Self>,
        handle: impl Fn(BusMessage) + Send + Sync + 'static,
    ) -> Option<tokio::task::JoinHandle<()>> {
        let redis = self.redis.clone()?;
        let channels = vec![
            redis.keys.replica_channel(&self.replica),
            redis.keys.broadcast_channel(),
        ];
        Some(tokio::spawn(super::listen::run(redis, channels, handle)))
    }
}

/// 8 random hex digits.
fn replica_id() -> String {
    let mut b = [0u8; 4];
    rand::rngs::SysRng
        .try_fill_bytes(&mut b)
        .expect("the operating system's random source is available");
    b.iter().map(|x| format!("{x:02x}")).collect()
}

/// The replica named in an id the gateway gave out: `sy-<replica>-<n>` or `sy-p<replica>-<n>`
/// (as raw JSON text, quotes included).
pub fn replica_of(raw_id: &str) -> Option<&str> {
    let s = raw_id.strip_prefix("\"sy-")?.strip_suffix('"')?;
    let s = s.strip_prefix('p').unwrap_or(s);
    let (replica, n) = s.split_once('-')?;
    (replica.len() == 8 && n.bytes().all(|b| b.is_ascii_digit())).then_some(replica)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn replica_ids_round_trip_through_gateway_ids() {
        let r = replica_id();
        assert_eq!(r.len(), 8);
        assert_eq!(replica_of(&format!("\"sy-{r}-12\"")), Some(r.as_str()));
        assert_eq!(replica_of(&format!("\"sy-p{r}-3\"")), Some(r.as_str()));
        assert_eq!(replica_of("\"sy-12\""), None);
        assert_eq!(replica_of("17"), None);
        assert_eq!(replica_of("\"client-id\""), None);
    }

    #[test]
    fn messages_serialize_with_a_tag() {
        let m = BusMessage::Ended {
            to: Target {
                tenant: "t".into(),
                user: "u".into(),
                session: "s".into(),
            },
        };
        let text = serde_json::to_string(&m).unwrap_or_default();
        assert_eq!(
            text,
            r#"{"t":"ended","to":{"tenant":"t","user":"u","session":"s"}}"#
        );
    }
}
