//! What replicas share through Redis: the connection, the keyspace and its migrations, the
//! session records (`RedisSessionStore`), and the message bus that carries server-initiated
//! messages, client answers and cancellations to the replica that can act on them. Nothing
//! else in the gateway talks to Redis.

mod bus;
mod conn;
mod events;
mod keys;
mod listen;
mod migrate;
mod mirror;
mod sentinel;
mod sessions;
mod tasks;

use std::future::Future;
use std::time::Duration;

use conn::{Conn, Subscriber};

pub use bus::{Bus, BusMessage, Target, replica_of};
pub use events::{MirrorQueue, RedisEvents, Replayed, Written};
pub use keys::{Keys, LAYOUT_VERSION};
pub use migrate::{Layout, MIGRATIONS};
pub use mirror::Mirrored;
pub use sessions::RedisSessionStore;

use crate::config::RedisConfig;
use crate::store::StoreError;

/// A connection to the shared Redis (one primary, a cluster, or the primary Sentinel names),
/// with the keyspace and the operation bound.
#[derive(Clone)]
pub struct Redis {
    pub(crate) conn: Conn,
    /// How the bus opens its subscriber connection.
    pub(crate) subscriber: Subscriber,
    pub keys: Keys,
    pub timeout: Duration,
}

impl Redis {
    /// Connects to the configured primary, cluster, or the primary the sentinels name (bounded
    /// by a few timeouts). No URL or password appears in errors.
    pub async fn connect(config: &RedisConfig) -> Result<Redis, String> {
        let (conn, subscriber) = Conn::open(config).await?;
        let keys = if conn.is_cluster() {
            Keys::for_cluster(&config.prefix)
        } else {
            Keys::new(&config.prefix)
        };
        Ok(Redis {
            conn,
            subscriber,
            keys,
            timeout: config.timeout,
        })
    }

    /// Whether Redis is a cluster (keys of different hash tags live on different nodes).
    pub fn is_cluster(&self) -> bool {
        self.conn.is_cluster()
    }

    /// Runs one Redis operation under the timeout; failures become `StoreError::Unavailable`.
    /// `name` labels the operation in the metrics.
    pub(crate) async fn run<T>(
        &self,
        name: &'static str,
        op: impl Future<Output = redis::RedisResult<T>>,
    ) -> Result<T, StoreError> {
        let started = std::time::Instant::now();
        let result = match tokio::time::timeout(self.timeout, op).await {
            Ok(Ok(v)) => Ok(v),
            Ok(Err(e)) => Err(StoreError::Unavailable(describe(&e))),
            Err(_) => Err(StoreError::Unavailable(format!(
                "no answer within {}ms",
                self.timeout.as_millis()
            ))),
        };
        crate::metrics::get().observe_redis(name, started.elapsed(), result.is_ok());
        result
    }

    /// The replicas' shared signing secret: this replica's fresh random one if none is
    /// stored yet (`SET NX`), else the stored one. It never expires.
    pub async fn signing_secret(&self) -> Result<Vec<u8>, StoreError> {
        let mut fresh = [0u8; 32];
        ring::rand::SecureRandom::fill(&ring::rand::SystemRandom::new(), &mut fresh)
            .map_err(|_| StoreError::Unavailable("no random source".into()))?;
        let fresh: String = fresh.iter().map(|b| format!("{b:02x}")).collect();
        let key = self.keys.signing_secret();
        let mut conn = self.conn.clone();
        let stored = self
            .run("signing_secret", async move {
                let _: Option<String> = redis::cmd("SET")
                    .arg(&key)
                    .arg(&fresh)
                    .arg("NX")
                    .query_async(&mut conn)
                    .await?;
                redis::cmd("GET")
                    .arg(&key)
                    .query_async::<Option<String>>(&mut conn)
                    .await
            })
            .await?;
        stored
            .filter(|s| s.len() >= 32)
            .map(String::into_bytes)
            .ok_or_else(|| StoreError::Corrupt("the stored signing secret is missing".into()))
    }

    /// Whether Redis answers (readiness): on a cluster, every primary serving slots.
    pub async fn ping(&self) -> Result<(), StoreError> {
        let mut conn = self.conn.clone();
        self.run("ping", async move { conn.ping().await }).await
    }
}

/// `switchyard migrate`: brings the configured Redis keyspace to this build's layout and says
/// what it did.
pub async fn migrate(config: &crate::config::Config) -> Result<String, String> {
    let crate::config::StoreConfig::Redis(r) = &config.sessions.store else {
        return Ok("the session store is in memory: nothing to migrate".into());
    };
    let redis = Redis::connect(r).await?;
    let applied = redis.migrate().await?;
    Ok(if applied.is_empty() {
        format!("keyspace `{}` already at layout {LAYOUT_VERSION}", r.prefix)
    } else {
        let list: Vec<String> = applied.iter().map(u32::to_string).collect();
        format!(
            "keyspace `{}` migrated to layout {LAYOUT_VERSION} (applied: {})",
            r.prefix,
            list.join(", ")
        )
    })
}

/// A Redis error without anything from the URL or the payload.
pub(crate) fn describe(e: &redis::RedisError) -> String {
    if e.is_timeout() {
        "timed out".into()
    } else if e.is_connection_refusal() {
        "connection refused".into()
    } else if e.is_io_error() || e.is_connection_dropped() {
        "connection lost".into()
    } else {
        format!("Redis error ({})", e.category())
    }
}
