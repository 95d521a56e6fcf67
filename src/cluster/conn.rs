//! The connection every Redis operation goes through (`Redis.conn`): to one fixed primary, or
//! to the primary Redis Sentinel names, followed through failovers (`sentinel.rs`). Either
//! way callers clone it and `query_async(&mut conn)`; the bus's subscriber asks it for a
//! pub/sub connection and for the news of a switch.

use std::time::Duration;

use redis::aio::{ConnectionLike, ConnectionManager, ConnectionManagerConfig, PubSub};
use redis::{Cmd, Pipeline, RedisFuture, RedisResult, Value};
use tokio::sync::watch;

use super::sentinel::Primary;
use crate::config::Secret;

// Every operation clones it: boxing the fixed primary's client would allocate per clone.
#[allow(clippy::large_enum_variant)]
#[derive(Clone)]
pub(crate) enum Conn {
    /// One fixed primary (`url`): the manager reconnects to the same address.
    Single {
        client: redis::Client,
        manager: ConnectionManager,
    },
    /// The primary the sentinels name, switched when they name another.
    Sentinel(Primary),
}

impl Conn {
    /// Connects to the one primary at `url` (bounded by three `timeout`s). The URL never
    /// appears in errors.
    pub(crate) async fn single(url: &Secret, timeout: Duration) -> Result<Conn, String> {
        let client = redis::Client::open(url.expose())
            .map_err(|e| format!("invalid Redis URL: {}", e.category()))?;
        let manager = tokio::time::timeout(
            timeout * 3,
            ConnectionManager::new_with_config(client.clone(), manager_config(timeout)),
        )
        .await
        .map_err(|_| "cannot reach Redis: timed out".to_owned())?
        .map_err(|e| format!("cannot reach Redis: {}", super::describe(&e)))?;
        Ok(Conn::Single { client, manager })
    }

    /// A fresh pub/sub connection to the current primary.
    pub(crate) async fn pubsub(&self) -> RedisResult<PubSub> {
        match self {
            Conn::Single { client, .. } => client.get_async_pubsub().await,
            Conn::Sentinel(primary) => primary.pubsub().await,
        }
    }

    /// Changes whenever the primary is another one (never for a fixed primary).
    pub(crate) fn switches(&self) -> Option<watch::Receiver<u64>> {
        match self {
            Conn::Single { .. } => None,
            Conn::Sentinel(primary) => Some(primary.switches()),
        }
    }
}

/// Resolves when `switches` reports a new primary; never when there is nothing to follow.
pub(crate) async fn switched(switches: &mut Option<watch::Receiver<u64>>) {
    let changed = match switches {
        Some(rx) => rx.changed().await.is_ok(),
        None => false,
    };
    if !changed {
        std::future::pending::<()>().await;
    }
}

/// How every connection manager to a primary connects, answers and retries.
pub(crate) fn manager_config(timeout: Duration) -> ConnectionManagerConfig {
    ConnectionManagerConfig::new()
        .set_connection_timeout(Some(timeout))
        .set_response_timeout(Some(timeout))
        .set_number_of_retries(2)
}

impl ConnectionLike for Conn {
    fn req_packed_command<'a>(&'a mut self, cmd: &'a Cmd) -> RedisFuture<'a, Value> {
        match self {
            Conn::Single { manager, .. } => manager.req_packed_command(cmd),
            Conn::Sentinel(primary) => primary.req_packed_command(cmd),
        }
    }

    fn req_packed_commands<'a>(
        &'a mut self,
        pipeline: &'a Pipeline,
        offset: usize,
        count: usize,
    ) -> RedisFuture<'a, Vec<Value>> {
        match self {
            Conn::Single { manager, .. } => manager.req_packed_commands(pipeline, offset, count),
            Conn::Sentinel(primary) => primary.req_packed_commands(pipeline, offset, count),
        }
    }

    fn get_db(&self) -> i64 {
        match self {
            Conn::Single { manager, .. } => manager.get_db(),
            Conn::Sentinel(primary) => primary.get_db(),
        }
    }
}
