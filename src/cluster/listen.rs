//! The bus's receiving side: one subscriber connection per replica on its channels, opened
//! again (with backoff) whenever it is lost, so the replica keeps listening across Redis
//! restarts and failovers.
//!
//! On one primary: `SUBSCRIBE` on a pub/sub connection; with Sentinel, on the primary the
//! sentinels name, opened again on the new one as soon as they name another. On a Redis Cluster: `SSUBSCRIBE`
//! (sharded pub/sub, Redis 7) on a RESP3 cluster connection whose pushes come on a channel:
//! each channel lives on the shard owning its slot, so a message crosses one shard instead of
//! being broadcast to every node as a plain `PUBLISH` is. When a node's connection drops
//! (`Disconnection`) or a node gives up a channel's slot (`sunsubscribe` from the server, as
//! after a failover or a slot migration), the whole subscriber is opened again from the seeds
//! and subscribes anew, on whichever nodes own the channels then.

use std::time::Duration;

use futures_util::StreamExt;
use redis::{ConnectionInfo, PushKind};

use super::bus::BusMessage;
use super::conn::{Subscriber, cluster_builder};
use super::sentinel::Primary;
use super::{Redis, describe};

/// First pause after a lost or refused subscription; it doubles up to the cap.
const FIRST_BACKOFF: Duration = Duration::from_millis(100);
const MAX_BACKOFF: Duration = Duration::from_secs(5);
/// A cluster's pause cap: a failover is over in seconds and should be followed promptly.
const MAX_CLUSTER_BACKOFF: Duration = Duration::from_secs(1);

/// Listens on `channels` until the task is aborted; every message is handed to `handle`.
pub(super) async fn run(
    redis: Redis,
    channels: Vec<String>,
    handle: impl Fn(BusMessage) + Send + Sync + 'static,
) {
    match &redis.subscriber {
        Subscriber::Single(client) => {
            listen_single(&Source::Fixed(client), redis.timeout, &channels, &handle).await
        }
        Subscriber::Sentinel(primary) => {
            listen_single(
                &Source::Sentinel(primary),
                redis.timeout,
                &channels,
                &handle,
            )
            .await
        }
        Subscriber::Cluster(seeds) => {
            listen_sharded(seeds, redis.timeout, &channels, &handle).await;
        }
    }
}

fn deliver(payload: &str, handle: &impl Fn(BusMessage)) {
    match serde_json::from_str::<BusMessage>(payload) {
        Ok(m) => handle(m),
        Err(e) => tracing::warn!(error = %e, "ignoring a malformed bus message"),
    }
}

/// Where a one-primary subscriber connects.
enum Source<'a> {
    Fixed(&'a redis::Client),
    Sentinel(&'a Primary),
}

impl Source<'_> {
    /// A pub/sub connection to the primary (bounded by `timeout`).
    async fn pubsub(&self, timeout: Duration) -> redis::RedisResult<redis::aio::PubSub> {
        let connect = async {
            match self {
                Source::Fixed(client) => client.get_async_pubsub().await,
                Source::Sentinel(primary) => primary.pubsub().await,
            }
        };
        tokio::time::timeout(timeout, connect)
            .await
            .unwrap_or_else(|_| Err(std::io::Error::from(std::io::ErrorKind::TimedOut).into()))
    }

    /// News of a switch of primary (never for a fixed one).
    fn switches(&self) -> Option<tokio::sync::watch::Receiver<u64>> {
        match self {
            Source::Fixed(_) => None,
            Source::Sentinel(primary) => Some(primary.switches()),
        }
    }
}

/// Resolves when `switches` reports a new primary; never when there is nothing to follow.
async fn switched(switches: &mut Option<tokio::sync::watch::Receiver<u64>>) {
    let changed = match switches {
        Some(rx) => rx.changed().await.is_ok(),
        None => false,
    };
    if !changed {
        std::future::pending::<()>().await;
    }
}

async fn listen_single(
    source: &Source<'_>,
    timeout: Duration,
    channels: &[String],
    handle: &impl Fn(BusMessage),
) {
    let mut backoff = FIRST_BACKOFF;
    let mut switches = source.switches();
    loop {
        // Only a switch after this connection is news to it.
        if let Some(rx) = switches.as_mut() {
            rx.borrow_and_update();
        }
        match source.pubsub(timeout).await {
            Ok(mut pubsub) => {
                let mut subscribed = true;
                for c in channels {
                    if let Err(e) = pubsub.subscribe(c.clone()).await {
                        tracing::warn!(error = %describe(&e), "bus cannot subscribe; retrying");
                        subscribed = false;
                        break;
                    }
                }
                if !subscribed {
                    tokio::time::sleep(backoff).await;
                    backoff = (backoff * 2).min(MAX_BACKOFF);
                    continue;
                }
                let mut first = true;
                let mut stream = pubsub.on_message();
                let mut moved = false;
                loop {
                    let msg = tokio::select! {
                        msg = stream.next() => msg,
                        () = switched(&mut switches) => {
                            moved = true;
                            None
                        }
                    };
                    let Some(msg) = msg else {
                        break;
                    };
                    if first {
                        backoff = FIRST_BACKOFF;
                        first = false;
                    }
                    if let Ok(payload) = msg.get_payload::<String>() {
                        deliver(&payload, handle);
                    }
                }
                if moved {
                    tracing::info!("the Redis primary changed; the bus follows it");
                    backoff = FIRST_BACKOFF;
                    continue;
                }
                tracing::warn!("bus connection lost; reconnecting");
            }
            Err(e) => {
                tracing::warn!(error = %describe(&e), "bus cannot connect; retrying");
            }
        }
        // A new primary ends the pause at once.
        tokio::select! {
            () = tokio::time::sleep(backoff) => {}
            () = switched(&mut switches) => {}
        }
        backoff = (backoff * 2).min(MAX_BACKOFF);
    }
}

async fn listen_sharded(
    seeds: &[ConnectionInfo],
    timeout: Duration,
    channels: &[String],
    handle: &impl Fn(BusMessage),
) {
    let mut backoff = FIRST_BACKOFF;
    loop {
        let (tx, mut pushes) = tokio::sync::mpsc::unbounded_channel();
        match subscribe_sharded(seeds, timeout, channels, tx).await {
            Ok(conn) => {
                backoff = FIRST_BACKOFF;
                while let Some(push) = pushes.recv().await {
                    match push.kind {
                        PushKind::SMessage | PushKind::Message => {
                            let payload = redis::Msg::from_push_info(push)
                                .and_then(|m| m.get_payload::<String>().ok());
                            if let Some(payload) = payload {
                                deliver(&payload, handle);
                            }
                        }
                        PushKind::Disconnection => {
                            tracing::warn!("bus lost a Redis Cluster node; subscribing again");
                            break;
                        }
                        PushKind::SUnsubscribe => {
                            tracing::warn!(
                                "a bus channel moved to another Redis Cluster node; subscribing again"
                            );
                            break;
                        }
                        _ => {}
                    }
                }
                drop(conn);
            }
            Err(e) => {
                tracing::warn!(error = %e, "bus cannot subscribe on the Redis Cluster; retrying")
            }
        }
        tokio::time::sleep(backoff).await;
        backoff = (backoff * 2).min(MAX_CLUSTER_BACKOFF);
    }
}

/// A new cluster connection that pushes on `tx`, subscribed to every channel (one at a time:
/// they hash to different slots). Kept alive by the caller while it listens.
async fn subscribe_sharded(
    seeds: &[ConnectionInfo],
    timeout: Duration,
    channels: &[String],
    tx: tokio::sync::mpsc::UnboundedSender<redis::PushInfo>,
) -> Result<redis::cluster_async::ClusterConnection, String> {
    let client = cluster_builder(seeds.to_vec(), timeout)
        .use_protocol(redis::ProtocolVersion::RESP3)
        .push_sender(tx)
        .build()
        .map_err(|e| describe(&e))?;
    let mut conn = tokio::time::timeout(timeout * 3, client.get_async_connection())
        .await
        .map_err(|_| "timed out".to_owned())?
        .map_err(|e| describe(&e))?;
    for channel in channels {
        tokio::time::timeout(timeout, conn.ssubscribe(channel))
            .await
            .map_err(|_| "timed out".to_owned())?
            .map_err(|e| describe(&e))?;
    }
    Ok(conn)
}
