//! A real Redis Cluster of the test's own: six `redis-server --cluster-enabled yes` processes
//! on free 127.0.0.1 ports (client and cluster-bus port both chosen free) in a private
//! directory, joined by `redis-cli --cluster create --cluster-replicas 1` into three primaries
//! with a replica each, and a short `cluster-node-timeout` so a killed primary's replica takes
//! over within seconds. Every wait is bounded; every node is killed on drop.

use std::process::Stdio;
use std::time::Duration;

use tokio::process::{Child, Command};

use super::TempDir;
use super::peers::free_port;
use super::redis::{binary, ping, server_command};

/// How long a node may be unreachable before the others fail it over (ms).
pub const NODE_TIMEOUT_MS: u64 = 1000;

pub struct RedisCluster {
    pub nodes: Vec<ClusterNode>,
    _dir: TempDir,
}

pub struct ClusterNode {
    pub port: u16,
    child: Option<Child>,
}

/// A node as `CLUSTER NODES` describes it.
#[derive(Debug, Clone)]
pub struct NodeInfo {
    pub id: String,
    pub port: u16,
    pub primary: bool,
    pub failed: bool,
    /// The primary's id, for a replica.
    pub primary_id: Option<String>,
    pub has_slots: bool,
    /// The slot ranges it serves (inclusive).
    pub slots: Vec<(u16, u16)>,
}

impl RedisCluster {
    /// Starts six nodes and makes a cluster of them; returns once every node reports
    /// `cluster_state:ok` and every replica is in sync with its primary.
    pub async fn start() -> RedisCluster {
        let dir = TempDir::new("redis-cluster");
        let mut nodes = Vec::new();
        for i in 0..6 {
            let node_dir = dir.path(&format!("n{i}"));
            std::fs::create_dir_all(&node_dir).expect("node dir");
            nodes.push(start_node(&node_dir).await);
        }
        let cluster = RedisCluster { nodes, _dir: dir };
        let addresses: Vec<String> = cluster
            .nodes
            .iter()
            .map(|n| format!("127.0.0.1:{}", n.port))
            .collect();
        let created = tokio::time::timeout(
            Duration::from_secs(60),
            Command::new(binary("redis-cli"))
                .arg("--cluster")
                .arg("create")
                .args(&addresses)
                .args(["--cluster-replicas", "1", "--cluster-yes"])
                .stdin(Stdio::null())
                .output(),
        )
        .await
        .expect("redis-cli --cluster create finished within 60s")
        .expect("redis-cli runs");
        assert!(
            created.status.success(),
            "redis-cli --cluster create failed: {}",
            String::from_utf8_lossy(&created.stdout)
        );
        cluster.wait_healthy(Duration::from_secs(30)).await;
        cluster
    }

    /// `redis://127.0.0.1:<port>` of every node, the seeds of a gateway's config.
    pub fn seeds(&self) -> Vec<String> {
        self.nodes
            .iter()
            .map(|n| format!("redis://127.0.0.1:{}", n.port))
            .collect()
    }

    fn live_ports(&self) -> Vec<u16> {
        self.nodes
            .iter()
            .filter(|n| n.child.is_some())
            .map(|n| n.port)
            .collect()
    }

    /// The cluster as a live node sees it.
    pub async fn topology(&self) -> Vec<NodeInfo> {
        for port in self.live_ports() {
            if let Ok(text) = command::<String>(port, redis::cmd("CLUSTER").arg("NODES")).await {
                return parse_nodes(&text);
            }
        }
        panic!("no live cluster node answers CLUSTER NODES");
    }

    /// The ports of the primaries serving slots (failed ones left out).
    pub async fn primaries(&self) -> Vec<u16> {
        self.topology()
            .await
            .into_iter()
            .filter(|n| n.primary && n.has_slots && !n.failed)
            .map(|n| n.port)
            .collect()
    }

    /// Waits until every live node says `cluster_state:ok`, sees exactly three primaries with
    /// slots and no failed primary serving slots, and every replica of a live primary is in
    /// sync with it.
    pub async fn wait_healthy(&self, limit: Duration) {
        self.wait(limit, true).await;
    }

    /// Waits until the live nodes agree on three serving primaries again, after a primary was
    /// killed and its replica promoted (which then has no replica of its own).
    pub async fn wait_promoted(&self, limit: Duration) {
        self.wait(limit, false).await;
    }

    async fn wait(&self, limit: Duration, replicated: bool) {
        let deadline = tokio::time::Instant::now() + limit;
        loop {
            let last = match self.healthy(replicated).await {
                Ok(()) => return,
                Err(why) => why,
            };
            assert!(
                tokio::time::Instant::now() < deadline,
                "the Redis Cluster was not healthy within {limit:?}: {last}"
            );
            tokio::time::sleep(Duration::from_millis(100)).await;
        }
    }

    async fn healthy(&self, replicated: bool) -> Result<(), String> {
        for port in self.live_ports() {
            let info: String = command(port, redis::cmd("CLUSTER").arg("INFO"))
                .await
                .map_err(|e| format!("{port}: {e}"))?;
            if !info.contains("cluster_state:ok") {
                return Err(format!("{port}: cluster_state not ok"));
            }
            let nodes: String = command(port, redis::cmd("CLUSTER").arg("NODES"))
                .await
                .map_err(|e| format!("{port}: {e}"))?;
            let nodes = parse_nodes(&nodes);
            let serving = nodes
                .iter()
                .filter(|n| n.primary && n.has_slots && !n.failed)
                .count();
            if serving != 3 || nodes.iter().any(|n| n.primary && n.has_slots && n.failed) {
                return Err(format!("{port} sees {serving} serving primaries"));
            }
        }
        if !replicated {
            return Ok(());
        }
        for port in self.primaries().await {
            let info: String = command(port, redis::cmd("INFO").arg("replication"))
                .await
                .map_err(|e| format!("{port}: {e}"))?;
            if !replicas_in_sync(&info) {
                return Err(format!("{port}: replicas not in sync"));
            }
        }
        Ok(())
    }

    /// The port of the primary serving `key`'s (or a shard channel's) slot.
    pub async fn owner_of(&self, key: &str) -> u16 {
        let port = self.live_ports()[0];
        let slot: u16 = command(port, redis::cmd("CLUSTER").arg("KEYSLOT").arg(key))
            .await
            .expect("CLUSTER KEYSLOT");
        self.topology()
            .await
            .into_iter()
            .find(|n| {
                n.primary && !n.failed && n.slots.iter().any(|(a, b)| (*a..=*b).contains(&slot))
            })
            .map(|n| n.port)
            .expect("a primary serves every slot")
    }

    /// SIGKILL, as a crash would.
    pub async fn kill(&mut self, port: u16) {
        let node = self
            .nodes
            .iter_mut()
            .find(|n| n.port == port)
            .expect("a node of this cluster");
        super::kill_hard(&mut node.child).await;
    }

    /// The keys matching `pattern` on the node at `port` (`SCAN`, bounded).
    pub async fn keys_on(&self, port: u16, pattern: &str) -> Vec<String> {
        let mut out = Vec::new();
        let mut cursor: u64 = 0;
        for _ in 0..10_000 {
            let (next, keys): (u64, Vec<String>) = command(
                port,
                redis::cmd("SCAN")
                    .arg(cursor)
                    .arg("MATCH")
                    .arg(pattern)
                    .arg("COUNT")
                    .arg(1000),
            )
            .await
            .expect("SCAN");
            out.extend(keys);
            if next == 0 {
                return out;
            }
            cursor = next;
        }
        panic!("SCAN on {port} did not finish");
    }

    /// A direct cluster-aware connection, for tests that seed or inspect the keyspace.
    pub async fn conn(&self) -> redis::cluster_async::ClusterConnection {
        redis::cluster::ClusterClientBuilder::new(self.seeds())
            .response_timeout(Duration::from_secs(10))
            .build()
            .expect("cluster client")
            .get_async_connection()
            .await
            .expect("connect to the test cluster")
    }
}

/// One command to one node, over a plain (non-cluster) connection.
pub async fn command<T: redis::FromRedisValue>(
    port: u16,
    cmd: &mut redis::Cmd,
) -> Result<T, String> {
    let config = redis::AsyncConnectionConfig::new()
        .set_connection_timeout(Some(Duration::from_secs(2)))
        .set_response_timeout(Some(Duration::from_secs(5)));
    let mut conn = redis::Client::open(format!("redis://127.0.0.1:{port}"))
        .map_err(|e| e.to_string())?
        .get_multiplexed_async_connection_with_config(&config)
        .await
        .map_err(|e| e.to_string())?;
    cmd.query_async(&mut conn).await.map_err(|e| e.to_string())
}

fn parse_nodes(text: &str) -> Vec<NodeInfo> {
    text.lines()
        .filter_map(|line| {
            let f: Vec<&str> = line.split(' ').collect();
            if f.len() < 8 {
                return None;
            }
            let port = f[1].split('@').next()?.rsplit_once(':')?.1.parse().ok()?;
            let flags: Vec<&str> = f[2].split(',').collect();
            Some(NodeInfo {
                id: f[0].to_owned(),
                port,
                primary: flags.contains(&"master"),
                failed: flags.iter().any(|x| x.starts_with("fail")),
                primary_id: (f[3] != "-").then(|| f[3].to_owned()),
                has_slots: f.len() > 8 && !f[8].is_empty(),
                slots: f
                    .iter()
                    .skip(8)
                    .filter_map(|r| {
                        let (a, b) = r.split_once('-').unwrap_or((r, r));
                        Some((a.parse().ok()?, b.parse().ok()?))
                    })
                    .collect(),
            })
        })
        .collect()
}

/// Whether a primary's `INFO replication` shows at least one replica online at its offset.
fn replicas_in_sync(info: &str) -> bool {
    let offset = info
        .lines()
        .find_map(|l| l.strip_prefix("master_repl_offset:"))
        .and_then(|v| v.trim().parse::<u64>().ok());
    let replicas: Vec<&str> = info
        .lines()
        .filter(|l| l.starts_with("slave") && l.contains("state=online"))
        .collect();
    !replicas.is_empty()
        && replicas.iter().all(|l| {
            l.split(',')
                .find_map(|kv| kv.strip_prefix("offset="))
                .and_then(|v| v.trim().parse::<u64>().ok())
                == offset
        })
}

/// Starts one node in `node_dir` and waits until it answers PING. A free port can be taken
/// by another test between being chosen and being bound (the node then exits at once): the
/// node is started again on new ports, a few times at most.
async fn start_node(node_dir: &std::path::Path) -> ClusterNode {
    for _ in 0..5 {
        let port = free_port();
        let bus_port = free_port();
        let mut child = server_command(port, node_dir)
            .arg("--cluster-port")
            .arg(bus_port.to_string())
            .args(["--cluster-enabled", "yes", "--cluster-config-file"])
            .arg(node_dir.join("nodes.conf"))
            .arg("--cluster-node-timeout")
            .arg(NODE_TIMEOUT_MS.to_string())
            .args(["--appendonly", "no"])
            .spawn()
            .expect("redis-server starts");
        let mut exited = false;
        let up = super::eventually(Duration::from_secs(20), || {
            exited = exited || matches!(child.try_wait(), Ok(Some(_)));
            exited || ping(port)
        })
        .await;
        if up && !exited {
            return ClusterNode {
                port,
                child: Some(child),
            };
        }
        assert!(
            exited,
            "redis-server did not answer PING on 127.0.0.1:{port} within 20s"
        );
    }
    panic!("redis-server exited at start five times (its ports taken each time)");
}

impl Drop for RedisCluster {
    fn drop(&mut self) {
        for n in &mut self.nodes {
            if let Some(c) = n.child.as_mut() {
                let _ = c.start_kill();
            }
        }
    }
}
