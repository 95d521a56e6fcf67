//! A real `redis-server` of the test's own on a free 127.0.0.1 port, with an append-only file
//! fsynced on every write in a private directory, so a test can kill it (SIGKILL) and start it
//! again on the same port without losing what was acknowledged. Killed on drop.

use std::path::{Path, PathBuf};
use std::process::Stdio;
use std::time::Duration;

use tokio::process::{Child, Command};

use super::TempDir;
use super::peers::free_port;

pub struct RedisServer {
    pub port: u16,
    dir: TempDir,
    child: Option<Child>,
}

/// A Redis binary (`redis-server`, `redis-cli`) on PATH, else in `/usr/bin` or
/// `/usr/local/bin`; a clear panic naming the install script when there is none.
pub(crate) fn binary(name: &str) -> PathBuf {
    let path = std::env::var("PATH").unwrap_or_default();
    let dirs = path.split(':').chain(["/usr/bin", "/usr/local/bin"]);
    for dir in dirs {
        let p = PathBuf::from(dir).join(name);
        if p.is_file() {
            return p;
        }
    }
    panic!(
        "{name} not found on PATH: run `bash scripts/install-test-deps.sh` (installs redis-server and redis-tools from Debian's packages) or install Redis >= 7"
    );
}

pub(crate) fn redis_server() -> PathBuf {
    binary("redis-server")
}

/// `redis-server` as every test starts it: on 127.0.0.1:`port`, in the foreground, protected
/// mode on, no RDB snapshots, data in `dir`, no output, killed when dropped. Callers add what
/// their kind of node needs (persistence, replication, cluster mode) before spawning it.
pub(crate) fn server_command(port: u16, dir: &Path) -> Command {
    let mut command = Command::new(redis_server());
    command
        .args(["--bind", "127.0.0.1", "--port"])
        .arg(port.to_string())
        .args(["--save", "", "--protected-mode", "yes", "--daemonize", "no"])
        .arg("--dir")
        .arg(dir)
        .stdin(Stdio::null())
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .kill_on_drop(true);
    command
}

impl RedisServer {
    pub async fn start() -> RedisServer {
        let mut server = RedisServer {
            port: free_port(),
            dir: TempDir::new("redis"),
            child: None,
        };
        server.spawn().await;
        server
    }

    /// `redis://127.0.0.1:<port>`.
    pub fn url(&self) -> String {
        format!("redis://127.0.0.1:{}", self.port)
    }

    async fn spawn(&mut self) {
        let child = server_command(self.port, &self.dir.0)
            .args(["--appendonly", "yes", "--appendfsync", "always"])
            .spawn()
            .expect("redis-server starts");
        self.child = Some(child);
        wait_until_up(self.port).await;
    }

    /// SIGKILL, as a crash would; waits until the port refuses connections.
    pub async fn kill(&mut self) {
        super::kill_hard(&mut self.child).await;
    }

    /// Starts it again on the same port and data directory.
    pub async fn restart(&mut self) {
        self.kill().await;
        self.spawn().await;
    }

    /// A direct connection, for tests that inspect or seed the keyspace. Its commands may
    /// wait 10 s for an answer (the client's default of 500 ms fails on a loaded machine).
    pub async fn conn(&self) -> redis::aio::MultiplexedConnection {
        let config =
            redis::AsyncConnectionConfig::new().set_response_timeout(Some(Duration::from_secs(10)));
        redis::Client::open(self.url())
            .expect("redis URL")
            .get_multiplexed_async_connection_with_config(&config)
            .await
            .expect("connect to the test redis")
    }
}

/// Waits (20 s at most) until the server on `port` answers PING; panics saying so otherwise.
pub(crate) async fn wait_until_up(port: u16) {
    let up = super::eventually(Duration::from_secs(20), || ping(port)).await;
    assert!(
        up,
        "redis-server did not answer PING on 127.0.0.1:{port} within 20s"
    );
}

/// Whether the server on `port` answers PING within half a second.
pub(crate) fn ping(port: u16) -> bool {
    use std::io::{Read, Write};
    let Ok(mut s) = std::net::TcpStream::connect(("127.0.0.1", port)) else {
        return false;
    };
    let _ = s.set_read_timeout(Some(Duration::from_millis(500)));
    if s.write_all(b"PING\r\n").is_err() {
        return false;
    }
    let mut buf = [0u8; 16];
    matches!(s.read(&mut buf), Ok(n) if buf[..n].starts_with(b"+PONG"))
}

impl Drop for RedisServer {
    fn drop(&mut self) {
        if let Some(c) = self.child.as_mut() {
            let _ = c.start_kill();
        }
    }
}
