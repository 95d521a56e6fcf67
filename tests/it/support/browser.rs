//! A real browser for tests: Debian's Chromium, headless, loading a page that the test serves
//! from 127.0.0.1 origins of its own, whose script is a file of tests/peers bundled for the
//! browser with the pinned esbuild (the official TS SDK inside). The page reports by POSTing
//! JSON to `/report` on its own origin; the test reads the reports here. Nothing leaves
//! 127.0.0.1: every server is on it, and Chromium runs with its background services off and
//! every other host name unresolvable.

use std::net::SocketAddr;
use std::path::{Path, PathBuf};
use std::process::Stdio;
use std::time::Duration;

use axum::Router;
use axum::http::header;
use axum::routing::{get, post};
use nix::sys::signal::{Signal, killpg};
use nix::unistd::Pid;
use serde_json::Value;
use tokio::process::{Child, Command};
use tokio::sync::mpsc;

use super::TempDir;
use super::peers::{peers_dir, repo};

/// The page: one `<pre>` the script writes its report into.
const PAGE: &str = "<!doctype html><html><head><meta charset=\"utf-8\"><title>switchyard \
                    browser client</title></head><body><pre id=\"out\">running</pre>\
                    <script type=\"module\" src=\"/client.js\"></script></body></html>";

/// Debian's Chromium; fails the test with the install command when it is missing.
pub fn chromium() -> PathBuf {
    let found = std::env::var_os("PATH")
        .into_iter()
        .flat_map(|paths| std::env::split_paths(&paths).collect::<Vec<_>>())
        .map(|dir| dir.join("chromium"))
        .find(|p| p.is_file());
    found.unwrap_or_else(|| {
        panic!(
            "chromium is not installed: the browser test needs Debian's chromium package. \
             Install the test dependencies: bash scripts/install-test-deps.sh \
             (or apt-get install -y chromium)"
        )
    })
}

/// Bundles `tests/peers/<entry>` and the packages it imports (resolved in the installed
/// peers) into one ES module for the browser, in `dir`.
pub fn bundle(entry: &str, dir: &TempDir) -> PathBuf {
    let node_modules = peers_dir().join("js/node_modules");
    let esbuild = node_modules.join("@esbuild/linux-x64/bin/esbuild");
    assert!(
        esbuild.is_file(),
        "esbuild missing at {}: run bash scripts/install-test-deps.sh",
        esbuild.display()
    );
    let out = dir.path("client.js");
    let output = std::process::Command::new(&esbuild)
        .arg(repo().join("tests/peers").join(entry))
        .args([
            "--bundle",
            "--platform=browser",
            "--format=esm",
            "--log-level=warning",
        ])
        .arg(format!("--outfile={}", out.display()))
        // The entry lives in tests/peers; its imports resolve in the installed peers.
        .env("NODE_PATH", &node_modules)
        .stdin(Stdio::null())
        .output()
        .expect("esbuild runs");
    assert!(
        output.status.success(),
        "esbuild failed to bundle {entry}: {}",
        String::from_utf8_lossy(&output.stderr)
    );
    out
}

/// The page and its script, served on several 127.0.0.1 ports (one origin each); the
/// reports the pages POST.
pub struct PageServer {
    /// `http://127.0.0.1:<port>`, one per listener.
    pub origins: Vec<String>,
    reports: mpsc::Receiver<Value>,
    /// Reports read but not yet asked for.
    seen: Vec<Value>,
    tasks: Vec<tokio::task::JoinHandle<()>>,
}

impl PageServer {
    /// Serves `script` (a bundle) as `/client.js` on `origins` fresh listeners.
    pub async fn start(script: &Path, origins: usize) -> PageServer {
        let script = std::fs::read(script).expect("the bundle");
        let (tx, reports) = mpsc::channel(16);
        let app = Router::new()
            .route(
                "/",
                get(|| async { ([(header::CONTENT_TYPE, "text/html; charset=utf-8")], PAGE) }),
            )
            .route(
                "/client.js",
                get(move || {
                    let script = script.clone();
                    async move { ([(header::CONTENT_TYPE, "text/javascript")], script) }
                }),
            )
            .route(
                "/report",
                post(move |body: String| {
                    let tx = tx.clone();
                    async move {
                        let report = serde_json::from_str(&body)
                            .unwrap_or_else(|_| Value::String(body.clone()));
                        let _ = tx.send(report).await;
                        "ok"
                    }
                }),
            );
        let mut server = PageServer {
            origins: vec![],
            reports,
            seen: vec![],
            tasks: vec![],
        };
        for _ in 0..origins {
            let listener = tokio::net::TcpListener::bind("127.0.0.1:0")
                .await
                .expect("bind 127.0.0.1");
            let addr: SocketAddr = listener.local_addr().expect("local addr");
            server.origins.push(format!("http://{addr}"));
            let app = app.clone();
            server.tasks.push(tokio::spawn(async move {
                let _ = axum::serve(listener, app).await;
            }));
        }
        server
    }

    /// The next report from the page at `origin`, waiting at most `within` (failing the
    /// test with the browser's console after that).
    pub async fn report(&mut self, origin: &str, within: Duration, browser: &Browser) -> Value {
        let from = |r: &Value| r["origin"] == origin;
        if let Some(i) = self.seen.iter().position(from) {
            return self.seen.remove(i);
        }
        let deadline = tokio::time::Instant::now() + within;
        loop {
            match tokio::time::timeout_at(deadline, self.reports.recv()).await {
                Ok(Some(r)) if from(&r) => return r,
                Ok(Some(r)) => self.seen.push(r),
                Ok(None) | Err(_) => panic!(
                    "no report from the page at {origin} within {within:?}; Chromium's \
                     console:\n{}",
                    browser.console()
                ),
            }
        }
    }
}

impl Drop for PageServer {
    fn drop(&mut self) {
        for task in &self.tasks {
            task.abort();
        }
    }
}

/// Chromium's flags for a quiet headless run that reaches 127.0.0.1 only.
const FLAGS: &[&str] = &[
    "--headless",
    "--no-sandbox",
    "--disable-gpu",
    "--disable-dev-shm-usage",
    "--no-first-run",
    "--no-default-browser-check",
    "--disable-background-networking",
    "--disable-component-update",
    "--disable-default-apps",
    "--disable-extensions",
    "--disable-sync",
    "--disable-breakpad",
    "--disable-domain-reliability",
    "--disable-client-side-phishing-detection",
    "--no-pings",
    "--no-proxy-server",
    "--host-resolver-rules=MAP * ~NOTFOUND, EXCLUDE 127.0.0.1",
    "--mute-audio",
    "--password-store=basic",
];

/// The document of `url` as Chromium has it once the page loaded (`--dump-dom`: the parsed
/// and serialized DOM, after any script ran), from a fresh headless Chromium.
pub async fn dump_dom(url: &str) -> String {
    let profile = TempDir::new("chromium-dom");
    let run = Command::new(chromium())
        .args(FLAGS)
        .arg(format!(
            "--user-data-dir={}",
            profile.path("profile").display()
        ))
        .arg("--dump-dom")
        .arg(url)
        .stdin(Stdio::null())
        .stderr(Stdio::null())
        .process_group(0)
        .kill_on_drop(true)
        .output();
    let out = tokio::time::timeout(Duration::from_secs(60), run)
        .await
        .expect("chromium --dump-dom within 60 s")
        .expect("chromium runs");
    assert!(
        out.status.success(),
        "chromium --dump-dom {url}: {:?}",
        out.status
    );
    String::from_utf8_lossy(&out.stdout).into_owned()
}

/// A headless Chromium showing one page, with a profile of its own; its process group is
/// killed on drop.
pub struct Browser {
    child: Child,
    profile: TempDir,
    /// The DevTools HTTP port, when opened with one ([`Browser::open_with_devtools`]).
    devtools: Option<u16>,
}

impl Browser {
    /// Opens `url` in a new headless Chromium (no sandbox: the test container has no user
    /// namespaces), its log (console messages included) kept in its profile directory.
    pub fn open(url: &str) -> Browser {
        Browser::launch(url, None)
    }

    /// As [`Browser::open`], with the DevTools HTTP endpoint on 127.0.0.1:`port`, so the test
    /// can read what the open page shows now ([`Browser::page_title`]).
    pub fn open_with_devtools(url: &str, port: u16) -> Browser {
        Browser::launch(url, Some(port))
    }

    fn launch(url: &str, devtools: Option<u16>) -> Browser {
        let profile = TempDir::new("chromium");
        let log = std::fs::File::create(profile.path("chromium.log")).expect("chromium log");
        let mut command = Command::new(chromium());
        command
            .args(FLAGS)
            .args(["--enable-logging=stderr", "--v=0"])
            .arg(format!(
                "--user-data-dir={}",
                profile.path("profile").display()
            ));
        if let Some(port) = devtools {
            command.arg(format!("--remote-debugging-port={port}"));
        }
        let child = command
            .arg(url)
            .stdin(Stdio::null())
            .stdout(Stdio::null())
            .stderr(Stdio::from(log))
            // Its own process group, so that closing it ends its renderers and helpers too.
            .process_group(0)
            .kill_on_drop(true)
            .spawn()
            .expect("chromium starts");
        Browser {
            child,
            profile,
            devtools,
        }
    }

    /// The title of the open page whose URL starts with `url_prefix`, as the browser shows it
    /// now (from the DevTools target list); `None` while there is none (or no DevTools).
    pub async fn page_title(&self, url_prefix: &str) -> Option<String> {
        let port = self.devtools?;
        switchyard::app::install_crypto_provider();
        let text = reqwest::get(format!("http://127.0.0.1:{port}/json/list"))
            .await
            .ok()?
            .text()
            .await
            .ok()?;
        let list: Value = serde_json::from_str(&text).ok()?;
        list.as_array()?
            .iter()
            .find(|t| {
                t["type"] == "page" && t["url"].as_str().is_some_and(|u| u.starts_with(url_prefix))
            })
            .and_then(|t| t["title"].as_str().map(str::to_owned))
    }

    /// The page's console so far (its messages, and the browser's about it: a request CORS
    /// refused, say), from Chromium's log.
    pub fn console(&self) -> String {
        let log = std::fs::read_to_string(self.profile.path("chromium.log")).unwrap_or_default();
        let lines: Vec<&str> = log.lines().filter(|l| l.contains(":CONSOLE")).collect();
        lines.join("\n")
    }

    /// Kills the browser (its process group) and waits for it.
    pub async fn close(mut self) {
        self.kill_group();
        let _ = tokio::time::timeout(Duration::from_secs(10), self.child.wait()).await;
    }

    fn kill_group(&self) {
        if let Some(pid) = self.child.id().and_then(|id| i32::try_from(id).ok()) {
            let _ = killpg(Pid::from_raw(pid), Signal::SIGKILL);
        }
    }
}

impl Drop for Browser {
    fn drop(&mut self) {
        self.kill_group();
    }
}
