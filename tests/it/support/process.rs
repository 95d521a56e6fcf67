//! A gateway as a separate process (`switchyard run`), with its JSON log captured: for tests
//! of what only a whole process does (signals, files it watches, what it logs).

use std::path::Path;
use std::process::Stdio;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use tokio::io::AsyncReadExt;

use super::TempDir;
use super::config::gateway_exe;
use super::peers::free_port;

pub struct GatewayProcess {
    child: tokio::process::Child,
    pub port: u16,
    /// Everything the process wrote to stderr so far (drained continuously, so a chatty
    /// process never blocks on a full pipe).
    log: Arc<Mutex<String>>,
    drain: tokio::task::JoinHandle<()>,
}

impl GatewayProcess {
    /// Writes `config_yaml` (with a free `listen` port prepended) to `<dir>/<name>.yaml` and
    /// runs the gateway on it.
    pub async fn start(config_yaml: &str, dir: &TempDir, name: &str) -> GatewayProcess {
        GatewayProcess::start_with_log_format(config_yaml, dir, name, "json").await
    }

    /// As [`GatewayProcess::start`], logging in `format` (`json` or `text`).
    pub async fn start_with_log_format(
        config_yaml: &str,
        dir: &TempDir,
        name: &str,
        format: &str,
    ) -> GatewayProcess {
        let port = free_port();
        let path = dir.path(&format!("{name}.yaml"));
        std::fs::write(&path, format!("listen: 127.0.0.1:{port}\n{config_yaml}")).expect("config");
        let mut command = tokio::process::Command::new(gateway_exe());
        command
            .args(["--log-format", format, "run", "--config"])
            .arg(&path)
            .env("RUST_LOG", "info");
        GatewayProcess::launch(command, port, name).await
    }

    /// Runs the gateway on the config at `path`, which must listen on `port`; `extra` goes
    /// after `run --config <path>`.
    pub async fn run(path: &Path, port: u16, extra: &[&str], name: &str) -> GatewayProcess {
        GatewayProcess::run_with_env(path, port, extra, &[], name).await
    }

    /// As [`GatewayProcess::run`], with extra environment variables.
    pub async fn run_with_env(
        path: &Path,
        port: u16,
        extra: &[&str],
        env: &[(&str, &str)],
        name: &str,
    ) -> GatewayProcess {
        let mut command = tokio::process::Command::new(gateway_exe());
        command
            .arg("--log-format")
            .arg("json")
            .arg("run")
            .arg("--config")
            .arg(path)
            .args(extra)
            .env("RUST_LOG", "info")
            .envs(env.iter().copied());
        GatewayProcess::launch(command, port, name).await
    }

    /// As [`GatewayProcess::start`], with the gateway's `RLIMIT_NOFILE` (soft and hard) set
    /// to `nofile` by the shell that execs it.
    pub async fn start_with_fd_limit(
        config_yaml: &str,
        dir: &TempDir,
        name: &str,
        nofile: u64,
    ) -> GatewayProcess {
        let port = free_port();
        let path = dir.path(&format!("{name}.yaml"));
        std::fs::write(&path, format!("listen: 127.0.0.1:{port}\n{config_yaml}")).expect("config");
        let mut command = tokio::process::Command::new("sh");
        command
            .arg("-c")
            .arg(format!("ulimit -n {nofile} && exec \"$0\" \"$@\""))
            .arg(gateway_exe())
            .args(["--log-format", "json", "run", "--config"])
            .arg(&path)
            .env("RUST_LOG", "info");
        GatewayProcess::launch(command, port, name).await
    }

    /// The process id.
    pub fn pid(&self) -> u32 {
        self.child.id().expect("the gateway runs")
    }

    async fn launch(mut command: tokio::process::Command, port: u16, name: &str) -> GatewayProcess {
        let mut child = command
            .stdout(Stdio::null())
            .stderr(Stdio::piped())
            .kill_on_drop(true)
            .spawn()
            .expect("gateway starts");
        let up = super::eventually(Duration::from_secs(20), || {
            std::net::TcpStream::connect(("127.0.0.1", port)).is_ok()
        })
        .await;
        assert!(up, "gateway {name} did not listen within 20s");
        let log = Arc::new(Mutex::new(String::new()));
        let mut stderr = child.stderr.take().expect("stderr piped");
        let sink = log.clone();
        let drain = tokio::spawn(async move {
            let mut buf = vec![0u8; 16 * 1024];
            while let Ok(n) = stderr.read(&mut buf).await {
                if n == 0 {
                    break;
                }
                if let Ok(mut l) = sink.lock() {
                    l.push_str(&String::from_utf8_lossy(&buf[..n]));
                }
            }
        });
        GatewayProcess {
            child,
            port,
            log,
            drain,
        }
    }

    /// What the process has logged so far.
    pub fn logs(&self) -> String {
        self.log.lock().map(|l| l.clone()).unwrap_or_default()
    }

    pub fn url(&self, tenant: &str) -> String {
        format!("http://127.0.0.1:{}/t/{tenant}/mcp", self.port)
    }

    /// Sends a signal to the process.
    pub fn signal(&self, signal: nix::sys::signal::Signal) {
        if let Some(pid) = self.child.id() {
            let pid = nix::unistd::Pid::from_raw(i32::try_from(pid).expect("pid"));
            nix::sys::signal::kill(pid, signal).expect("signal delivered");
        }
    }

    /// Stops it (SIGTERM, bounded) and returns its whole log.
    pub async fn stop(mut self) -> String {
        self.signal(nix::sys::signal::Signal::SIGTERM);
        let _ = tokio::time::timeout(Duration::from_secs(20), self.child.wait()).await;
        let _ = tokio::time::timeout(Duration::from_secs(5), &mut self.drain).await;
        self.logs()
    }
}
