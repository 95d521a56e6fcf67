//! The connection to Redis — one fixed primary, a Redis Cluster, or the primary Redis Sentinel
//! names (`sentinel.rs`, followed through failovers): `Conn` sends a command or a pipeline
//! any way (the cluster connection routes each by its keys' slot and follows MOVED/ASK and
//! failovers), reaches every primary of a cluster for what is per node (`SCAN`, `PING`), and
//! `Subscriber` says how the bus opens its subscriber connection.

use redis::aio::{ConnectionLike, ConnectionManager, ConnectionManagerConfig};
use redis::cluster::ClusterClientBuilder;
use redis::cluster_async::ClusterConnection;
use redis::cluster_routing::{RoutingInfo, SingleNodeRoutingInfo};
use redis::{Cmd, ConnectionInfo, IntoConnectionInfo, Pipeline, RedisFuture, Value};

use super::describe;
use super::sentinel::Primary;
use crate::config::{RedisConfig, RedisTarget};

/// A cheap-to-clone handle on the shared connection: every clone multiplexes onto it.
#[derive(Clone)]
pub(crate) enum Conn {
    Single(ConnectionManager),
    Cluster(ClusterConnection),
    /// The primary the sentinels name, switched when they name another.
    Sentinel(Primary),
}

/// What the bus needs to open its own subscriber connection.
#[derive(Clone)]
pub(crate) enum Subscriber {
    Single(Box<redis::Client>),
    /// The seed nodes (the bus builds a RESP3 cluster client with a push channel from them).
    Cluster(Vec<ConnectionInfo>),
    /// The current primary, which the subscriber follows.
    Sentinel(Primary),
}

/// A Redis Cluster node, as `CLUSTER NODES` names it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct Node {
    pub host: String,
    pub port: u16,
}

impl Conn {
    /// Connects to the configured target (bounded by three timeouts). No URL in errors.
    pub(crate) async fn open(config: &RedisConfig) -> Result<(Conn, Subscriber), String> {
        let timeout = config.timeout;
        match &config.target {
            RedisTarget::Single(url) => {
                let client = redis::Client::open(url.expose())
                    .map_err(|e| format!("invalid Redis URL: {}", e.category()))?;
                let conn = tokio::time::timeout(
                    timeout * 3,
                    ConnectionManager::new_with_config(client.clone(), manager_config(timeout)),
                )
                .await
                .map_err(|_| "cannot reach Redis: timed out".to_owned())?
                .map_err(|e| format!("cannot reach Redis: {}", describe(&e)))?;
                Ok((Conn::Single(conn), Subscriber::Single(Box::new(client))))
            }
            RedisTarget::Cluster(seeds) => {
                let seeds = seeds
                    .iter()
                    .map(|s| s.expose().into_connection_info())
                    .collect::<Result<Vec<_>, _>>()
                    .map_err(|e| format!("invalid Redis Cluster seed URL: {}", e.category()))?;
                let client = cluster_builder(seeds.clone(), timeout)
                    .build()
                    .map_err(|e| format!("invalid Redis Cluster seeds: {}", describe(&e)))?;
                let conn = tokio::time::timeout(timeout * 3, client.get_async_connection())
                    .await
                    .map_err(|_| "cannot reach the Redis Cluster: timed out".to_owned())?
                    .map_err(|e| format!("cannot reach the Redis Cluster: {}", describe(&e)))?;
                Ok((Conn::Cluster(conn), Subscriber::Cluster(seeds)))
            }
            RedisTarget::Sentinel(sentinel) => {
                let primary = Primary::connect(sentinel, timeout).await?;
                Ok((
                    Conn::Sentinel(primary.clone()),
                    Subscriber::Sentinel(primary),
                ))
            }
        }
    }

    /// Whether this is a Redis Cluster.
    pub(crate) fn is_cluster(&self) -> bool {
        matches!(self, Conn::Cluster(_))
    }

    /// Whether Redis answers: on a cluster, every primary serving slots, each asked directly
    /// (a cluster connection would answer a `PING` from whichever node it still reaches), so
    /// a lost primary shows until its replica is promoted.
    pub(crate) async fn ping(&mut self) -> redis::RedisResult<()> {
        let Some(primaries) = self.primaries().await? else {
            return redis::cmd("PING").query_async(self).await;
        };
        if primaries.is_empty() {
            return Err((
                redis::ErrorKind::ClusterConnectionNotFound,
                "no primary serves slots",
            )
                .into());
        }
        let pings = primaries.iter().map(|node| {
            let mut conn = self.clone();
            async move { conn.query_node::<()>(Some(node), redis::cmd("PING")).await }
        });
        futures_util::future::try_join_all(pings).await.map(|_| ())
    }

    /// The primaries serving slots of a cluster (`CLUSTER NODES`; one flagged failed is kept
    /// as long as it holds slots: its slots are unserved until a replica takes them); `None`
    /// on one primary.
    pub(crate) async fn primaries(&mut self) -> redis::RedisResult<Option<Vec<Node>>> {
        let Conn::Cluster(conn) = self else {
            return Ok(None);
        };
        let text: String = redis::cmd("CLUSTER").arg("NODES").query_async(conn).await?;
        Ok(Some(parse_primaries(&text)))
    }

    /// Sends `cmd` to one node of a cluster (to the primary on one primary).
    pub(crate) async fn query_node<T: redis::FromRedisValue>(
        &mut self,
        node: Option<&Node>,
        cmd: Cmd,
    ) -> redis::RedisResult<T> {
        match (self, node) {
            (Conn::Cluster(conn), Some(node)) => {
                let routing = RoutingInfo::SingleNode(SingleNodeRoutingInfo::ByAddress {
                    host: node.host.clone(),
                    port: node.port,
                });
                let value = conn.route_command(cmd, routing).await?;
                redis::FromRedisValue::from_redis_value(value).map_err(Into::into)
            }
            (conn, _) => cmd.query_async(conn).await,
        }
    }
}

impl ConnectionLike for Conn {
    fn req_packed_command<'a>(&'a mut self, cmd: &'a Cmd) -> RedisFuture<'a, Value> {
        match self {
            Conn::Single(c) => c.req_packed_command(cmd),
            Conn::Cluster(c) => c.req_packed_command(cmd),
            Conn::Sentinel(c) => c.req_packed_command(cmd),
        }
    }

    fn req_packed_commands<'a>(
        &'a mut self,
        pipeline: &'a Pipeline,
        offset: usize,
        count: usize,
    ) -> RedisFuture<'a, Vec<Value>> {
        match self {
            Conn::Single(c) => c.req_packed_commands(pipeline, offset, count),
            Conn::Cluster(c) => c.req_packed_commands(pipeline, offset, count),
            Conn::Sentinel(c) => c.req_packed_commands(pipeline, offset, count),
        }
    }

    fn get_db(&self) -> i64 {
        match self {
            Conn::Single(c) => c.get_db(),
            Conn::Cluster(c) => c.get_db(),
            Conn::Sentinel(c) => c.get_db(),
        }
    }
}

/// How every connection manager to a primary connects, answers and retries.
pub(crate) fn manager_config(timeout: std::time::Duration) -> ConnectionManagerConfig {
    ConnectionManagerConfig::new()
        .set_connection_timeout(Some(timeout))
        .set_response_timeout(Some(timeout))
        .set_number_of_retries(2)
}

/// A cluster client over `seeds` with the operation bound as connection and response timeout.
/// The credentials and TLS of the first seed apply to every node.
pub(crate) fn cluster_builder(
    seeds: Vec<ConnectionInfo>,
    timeout: std::time::Duration,
) -> ClusterClientBuilder {
    ClusterClientBuilder::new(seeds)
        .connection_timeout(timeout)
        .response_timeout(timeout)
        // A command that meets a failover is retried (MOVED, a refused connection) while the
        // slot map is refreshed; `Redis::run` bounds the whole.
        .retries(4)
        .min_retry_wait(50)
        .max_retry_wait(500)
}

/// `host:port` of every primary serving slots in a `CLUSTER NODES` reply.
fn parse_primaries(text: &str) -> Vec<Node> {
    text.lines()
        .filter_map(|line| {
            let mut fields = line.split(' ');
            let (_id, address, flags) = (fields.next()?, fields.next()?, fields.next()?);
            if !flags.split(',').any(|f| f == "master") {
                return None;
            }
            // `host:port@cport[,hostname]`
            let address = address.split(['@', ',']).next()?;
            let (host, port) = address.rsplit_once(':')?;
            let port = port.parse().ok().filter(|p| *p != 0)?;
            // A primary without slots serves nothing.
            fields.nth(5)?;
            Some(Node {
                host: host.to_owned(),
                port,
            })
        })
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn primaries_are_read_from_cluster_nodes() {
        let text = "\
07c3 127.0.0.1:30004@40004 slave e7d1 0 1426238317239 4 connected
67ed 127.0.0.1:30002@40002 master - 0 1426238316232 2 connected 5461-10922
292f 127.0.0.1:30003@40003,cache-3 master - 0 1426238318243 3 connected 10923-16383
6ec2 127.0.0.1:30005@40005 master,fail - 1426238316232 1426238316232 5 disconnected 16000
6ec3 127.0.0.1:30007@40007 master,fail - 1426238316232 1426238316232 5 disconnected
824f 127.0.0.1:30006@40006 master - 0 1426238317741 6 connected
e7d1 127.0.0.1:30001@40001 myself,master - 0 0 1 connected 0-5460
";
        let ports: Vec<u16> = parse_primaries(text).iter().map(|n| n.port).collect();
        // 30005 failed but still holds slots: they are unserved, so it counts.
        assert_eq!(ports, vec![30002, 30003, 30005, 30001]);
        assert_eq!(parse_primaries(text)[0].host, "127.0.0.1");
        assert!(parse_primaries("garbage\n\n").is_empty());
    }
}
