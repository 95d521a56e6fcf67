//! Shared test support: building configs, running a gateway on 127.0.0.1:0, raw MCP clients
//! over real HTTP (Streamable HTTP and 2024-11-05 HTTP+SSE), a headless browser, and locating the external peers installed by scripts/install-test-deps.sh.

#![allow(dead_code)]

pub mod browser;
pub mod client;
pub mod config;
pub mod gateway;
pub mod h2raw;
pub mod jws;
pub mod key_server;
pub mod legacy;
pub mod limits;
pub mod oidc;
pub mod otlp;
pub mod peers;
pub mod process;
pub mod rawhttp;
pub mod redis;
pub mod redis_cluster;
pub mod sentinel;
pub mod wire;

use std::time::Duration;

/// Polls `check` every 20ms until it returns true or `limit` passes.
pub async fn eventually(limit: Duration, mut check: impl FnMut() -> bool) -> bool {
    let start = std::time::Instant::now();
    while start.elapsed() < limit {
        if check() {
            return true;
        }
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    check()
}

/// SIGKILLs the process in `child`, as a crash would, and reaps it (nothing when already gone).
pub async fn kill_hard(child: &mut Option<tokio::process::Child>) {
    if let Some(mut c) = child.take() {
        let _ = c.kill().await;
        let _ = c.wait().await;
    }
}

/// Whether a process is gone entirely: exited and reaped (a zombie still has a /proc entry).
pub fn process_gone(pid: u32) -> bool {
    !std::path::Path::new(&format!("/proc/{pid}")).exists()
}

/// Whether a process with this pid exists (and is not a zombie).
pub fn process_alive(pid: u32) -> bool {
    match std::fs::read_to_string(format!("/proc/{pid}/stat")) {
        Ok(stat) => {
            // Field 3 is the state; Z = zombie, X = dead.
            let state = stat
                .rsplit(')')
                .next()
                .and_then(|r| r.split_whitespace().next());
            !matches!(state, Some("Z") | Some("X"))
        }
        Err(_) => false,
    }
}

/// A directory under the system temp dir, removed on drop.
pub struct TempDir(pub std::path::PathBuf);

impl TempDir {
    pub fn new(label: &str) -> TempDir {
        static N: std::sync::atomic::AtomicU32 = std::sync::atomic::AtomicU32::new(0);
        let n = N.fetch_add(1, std::sync::atomic::Ordering::Relaxed);
        let dir =
            std::env::temp_dir().join(format!("switchyard-{label}-{}-{n}", std::process::id()));
        let _ = std::fs::remove_dir_all(&dir);
        std::fs::create_dir_all(&dir).expect("create temp dir");
        TempDir(dir)
    }

    pub fn path(&self, name: &str) -> std::path::PathBuf {
        self.0.join(name)
    }
}

impl Drop for TempDir {
    fn drop(&mut self) {
        let _ = std::fs::remove_dir_all(&self.0);
    }
}

/// The JSON messages recorded in a demo server trace file so far.
pub fn read_trace(path: &std::path::Path) -> Vec<serde_json::Value> {
    json_lines(&std::fs::read_to_string(path).unwrap_or_default()).collect()
}

/// The lines of a gateway's JSON log that parse as JSON (the others — a panic's text, a
/// child's stderr passed through — left out), for tests that look for events in it.
pub fn json_lines(logs: &str) -> impl Iterator<Item = serde_json::Value> + '_ {
    logs.lines()
        .filter_map(|l| serde_json::from_str::<serde_json::Value>(l).ok())
}
