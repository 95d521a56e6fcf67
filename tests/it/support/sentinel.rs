//! A real Redis Sentinel deployment of the test's own, in a temp dir on free 127.0.0.1 ports:
//! one primary, two replicas (`--replicaof`) and three sentinels (`redis-server <conf>
//! --sentinel`, quorum 2, `down-after-milliseconds` 1000, `failover-timeout` 3000), so a
//! killed primary is replaced within a few seconds. Every wait is bounded; every process is
//! killed on drop.

use std::process::Stdio;
use std::time::{Duration, Instant};

use tokio::process::{Child, Command};

use super::TempDir;
use super::peers::free_port;
use super::redis::{redis_server, server_command, wait_until_up};

/// The name the sentinels monitor the primary under.
pub const MASTER: &str = "sy-main";

pub struct SentinelSetup {
    dir: TempDir,
    /// The data nodes: index 0 starts as the primary, the others as its replicas.
    pub data: Vec<Node>,
    pub sentinels: Vec<Node>,
}

pub struct Node {
    pub port: u16,
    child: Option<Child>,
}

impl SentinelSetup {
    /// Starts the five processes and waits (bounded) until every sentinel knows both replicas
    /// and both other sentinels, so a failover can start as soon as the primary is down.
    pub async fn start() -> SentinelSetup {
        let dir = TempDir::new("sentinel");
        let primary = free_port();
        let mut data = vec![start_data(&dir, primary, None).await];
        for _ in 0..2 {
            data.push(start_data(&dir, free_port(), Some(primary)).await);
        }
        for node in &data[1..] {
            let port = node.port;
            let synced = wait_for(Duration::from_secs(20), || async move {
                let info = query::<String>(port, redis::cmd("INFO").arg("replication")).await;
                info.is_some_and(|i| i.contains("master_link_status:up"))
            })
            .await;
            assert!(synced, "replica 127.0.0.1:{port} did not sync within 20s");
        }
        let mut sentinels = Vec::new();
        for i in 0..3 {
            let port = free_port();
            let conf = dir.path(&format!("sentinel-{i}.conf"));
            std::fs::write(
                &conf,
                format!(
                    "port {port}\nbind 127.0.0.1\ndir {dir}\n\
                     sentinel monitor {MASTER} 127.0.0.1 {primary} 2\n\
                     sentinel down-after-milliseconds {MASTER} 1000\n\
                     sentinel failover-timeout {MASTER} 3000\n\
                     sentinel parallel-syncs {MASTER} 2\n",
                    dir = dir.0.display()
                ),
            )
            .expect("sentinel config");
            let child = Command::new(redis_server())
                .arg(&conf)
                .arg("--sentinel")
                .stdin(Stdio::null())
                .stdout(Stdio::null())
                .stderr(Stdio::null())
                .kill_on_drop(true)
                .spawn()
                .expect("redis-server --sentinel starts");
            sentinels.push(Node {
                port,
                child: Some(child),
            });
        }
        for s in &sentinels {
            let port = s.port;
            let ready = wait_for(Duration::from_secs(30), || async move {
                let master =
                    query::<Vec<String>>(port, redis::cmd("SENTINEL").arg("master").arg(MASTER))
                        .await;
                let field = |name: &str| {
                    master.as_ref().and_then(|m| {
                        m.iter()
                            .position(|f| f == name)
                            .and_then(|i| m.get(i + 1))
                            .cloned()
                    })
                };
                field("num-slaves").as_deref() == Some("2")
                    && field("num-other-sentinels").as_deref() == Some("2")
            })
            .await;
            assert!(
                ready,
                "sentinel 127.0.0.1:{port} did not see 2 replicas and 2 other sentinels within 30s"
            );
        }
        SentinelSetup {
            dir,
            data,
            sentinels,
        }
    }

    /// `redis://127.0.0.1:<port>` of every sentinel, as a YAML flow list.
    pub fn nodes_yaml(&self) -> String {
        let urls: Vec<String> = self
            .sentinels
            .iter()
            .map(|s| format!("\"redis://127.0.0.1:{}\"", s.port))
            .collect();
        format!("[{}]", urls.join(", "))
    }

    /// The primary's port as the first sentinel that answers names it.
    pub async fn primary_port(&self) -> Option<u16> {
        for s in &self.sentinels {
            let named = query::<Option<(String, u16)>>(
                s.port,
                redis::cmd("SENTINEL")
                    .arg("get-master-addr-by-name")
                    .arg(MASTER),
            )
            .await;
            if let Some(Some((_, port))) = named {
                return Some(port);
            }
        }
        None
    }

    /// SIGKILLs the data node on `port`, as a crash would.
    pub async fn kill_data(&mut self, port: u16) {
        let node = self
            .data
            .iter_mut()
            .find(|n| n.port == port)
            .expect("a data node of this setup");
        super::kill_hard(&mut node.child).await;
    }

    /// Waits (bounded by `limit`) until every live sentinel names a primary other than
    /// `old`, and that node answers `ROLE` as master; returns its port.
    pub async fn await_new_primary(&self, old: u16, limit: Duration) -> Option<u16> {
        let started = Instant::now();
        while started.elapsed() < limit {
            if let Some(port) = self.primary_port().await
                && port != old
            {
                let role = query::<Vec<redis::Value>>(port, &mut redis::cmd("ROLE")).await;
                let is_master = role
                    .and_then(|r| r.into_iter().next())
                    .and_then(|v| redis::from_redis_value::<String>(v).ok())
                    .is_some_and(|r| r == "master");
                if is_master {
                    return Some(port);
                }
            }
            tokio::time::sleep(Duration::from_millis(100)).await;
        }
        None
    }

    /// The directory of the setup's files.
    pub fn dir(&self) -> &TempDir {
        &self.dir
    }
}

async fn start_data(dir: &TempDir, port: u16, replica_of: Option<u16>) -> Node {
    let data_dir = dir.path(&format!("data-{port}"));
    std::fs::create_dir_all(&data_dir).expect("data dir");
    let mut command = server_command(port, &data_dir);
    command.args(["--appendonly", "no"]);
    if let Some(primary) = replica_of {
        command
            .arg("--replicaof")
            .arg("127.0.0.1")
            .arg(primary.to_string());
    }
    let child = command.spawn().expect("redis-server starts");
    wait_until_up(port).await;
    Node {
        port,
        child: Some(child),
    }
}

/// One command to the node on `port` (connect and answer within 2 s each); `None` on any
/// failure.
pub async fn query<T: redis::FromRedisValue>(port: u16, cmd: &mut redis::Cmd) -> Option<T> {
    let config = redis::AsyncConnectionConfig::new()
        .set_connection_timeout(Some(Duration::from_secs(2)))
        .set_response_timeout(Some(Duration::from_secs(2)));
    let client = redis::Client::open(format!("redis://127.0.0.1:{port}")).ok()?;
    tokio::time::timeout(Duration::from_secs(5), async {
        let mut conn = client
            .get_multiplexed_async_connection_with_config(&config)
            .await
            .ok()?;
        cmd.query_async::<T>(&mut conn).await.ok()
    })
    .await
    .ok()
    .flatten()
}

/// Polls `check` every 100 ms until it is true or `limit` passes.
async fn wait_for<F, Fut>(limit: Duration, check: F) -> bool
where
    F: Fn() -> Fut,
    Fut: std::future::Future<Output = bool>,
{
    let started = Instant::now();
    while started.elapsed() < limit {
        if check().await {
            return true;
        }
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    false
}

impl Drop for SentinelSetup {
    fn drop(&mut self) {
        for node in self.data.iter_mut().chain(self.sentinels.iter_mut()) {
            if let Some(c) = node.child.as_mut() {
                let _ = c.start_kill();
            }
        }
    }
}
