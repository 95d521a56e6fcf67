//! Opening the gateway: the configured session store (the Redis keyspace layout checked, a
//! new Redis set up) and the bus to the other replicas, then every tenant.

use std::sync::Arc;

use super::{Gateway, RequestRelay};
use crate::cluster::{Bus, LAYOUT_VERSION, Layout, Redis, RedisSessionStore};
use crate::config::{Config, StoreConfig};
use crate::session::SessionBackend;
use crate::session::memory::MemorySessionStore;

/// Connects the configured store (checking the Redis keyspace layout) and the bus.
async fn open_store(config: &Config) -> Result<(SessionBackend, Bus), String> {
    match &config.sessions.store {
        StoreConfig::Memory => Ok((
            SessionBackend::Memory(MemorySessionStore::new()),
            Bus::local(),
        )),
        StoreConfig::Redis(r) => {
            let redis = Redis::connect(r).await?;
            match redis.layout().await.map_err(|e| e.to_string())? {
                Layout::Current => {}
                // No record: a new (or emptied) Redis is set up here; a keyspace with keys of
                // another layout is left to `switchyard migrate`.
                Layout::Behind { found: 0 } if redis.initialize_if_unrecorded().await? => {}
                Layout::Behind { found } => {
                    return Err(format!(
                        "the Redis keyspace has layout {found} but this gateway needs {LAYOUT_VERSION}: run `switchyard migrate --config <file>` first"
                    ));
                }
                Layout::Ahead { found } => {
                    return Err(format!(
                        "the Redis keyspace has layout {found}, newer than this gateway's {LAYOUT_VERSION}: a newer switchyard wrote it; refusing to start"
                    ));
                }
            }
            let secret = redis
                .signing_secret()
                .await
                .map_err(|e| format!("cannot read the replicas' signing secret: {e}"))?;
            let mirror_len = crate::events::LogLimits::default().max_events;
            let bus = Bus::redis(
                redis.clone(),
                config.sessions.ttl,
                secret,
                mirror_len,
                r.events,
            );
            Ok((SessionBackend::Redis(RedisSessionStore::new(redis)), bus))
        }
    }
}

impl Gateway {
    /// Connects the store and the bus, builds every tenant (starting shared upstream
    /// processes) and starts listening on the bus; `relay` is the layers above's part of it.
    pub async fn open(
        config: &Config,
        relay: Box<dyn RequestRelay>,
    ) -> Result<Arc<Gateway>, String> {
        let (store, bus) = open_store(config).await?;
        Gateway::start(config, store, bus, relay)
    }
}
