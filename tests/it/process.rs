//! The gateway as a process: `switchyard check` output, and SIGTERM shutdown that stops every
//! child (stdin close, SIGTERM, SIGKILL for a stubborn one) with none left behind, plus the
//! children's stderr showing up in the gateway's logs.

use std::process::Stdio;
use std::time::Duration;

use nix::sys::signal::{Signal, kill};
use nix::unistd::Pid;
use serde_json::json;
use tokio::io::AsyncReadExt;
use tokio::process::Command;

use crate::support::client::RawClient;
use crate::support::config::{demo_server_exe, gateway_exe};
use crate::support::peers::free_port;
use crate::support::process::GatewayProcess;
use crate::support::{TempDir, eventually, process_alive};

async fn run_check(path: &std::path::Path, env: &[(&str, &str)]) -> (i32, String, String) {
    let mut cmd = Command::new(gateway_exe());
    cmd.arg("check")
        .arg("--config")
        .arg(path)
        .env_remove("SWITCHYARD_DEMO_SERVER");
    for (k, v) in env {
        cmd.env(k, v);
    }
    let out = tokio::time::timeout(Duration::from_secs(30), cmd.output())
        .await
        .expect("check finishes")
        .expect("check runs");
    (
        out.status.code().unwrap_or(-1),
        String::from_utf8_lossy(&out.stdout).into_owned(),
        String::from_utf8_lossy(&out.stderr).into_owned(),
    )
}

#[tokio::test]
async fn check_validates_and_lists_every_error() {
    let dir = TempDir::new("check");
    let bad = dir.path("bad.yaml");
    std::fs::write(
        &bad,
        "listen: 127.0.0.1:8080\n\
         tenants:\n\
         \x20 - name: acme\n\
         \x20   upstreams:\n\
         \x20     - name: files\n\
         \x20       stdio: {comand: npx}\n\
         \x20     - name: web\n\
         \x20       http: {url: \"ftp://example\"}\n\
         \x20       timeout: 30\n",
    )
    .expect("write config");
    let (code, stdout, stderr) = run_check(&bad, &[]).await;
    assert_eq!(code, 1, "stdout: {stdout} stderr: {stderr}");
    let file = bad.display().to_string();
    for expected in [
        format!(
            "{file}:6:17: tenants[0].upstreams[0].stdio: unknown field `comand`, did you mean `command`?"
        ),
        format!(
            "{file}:8:21: tenants[0].upstreams[1].http.url: the URL scheme must be http or https"
        ),
        format!("{file}:9:18: tenants[0].upstreams[1].timeout: duration needs a unit, e.g. 30s"),
    ] {
        assert!(
            stderr.contains(&expected),
            "missing {expected:?} in:\n{stderr}"
        );
    }

    // The shipped demo config is valid once its two variables are set, and names them if not.
    let demo = crate::support::peers::repo().join("config/demo.yaml");
    let (code, stdout, _) = run_check(
        &demo,
        &[
            ("SWITCHYARD_DEMO_SERVER", "/bin/true"),
            ("DEMO_HTTP_URL", "http://127.0.0.1:1/mcp"),
        ],
    )
    .await;
    assert_eq!(code, 0);
    assert!(
        stdout.contains("ok (1 tenant(s), 2 upstream(s))"),
        "{stdout}"
    );
    let example = crate::support::peers::repo().join("config/example.yaml");
    let (code, stdout, stderr) = run_check(&example, &[]).await;
    assert_eq!(code, 0, "{stderr}");
    assert!(
        stdout.contains("ok (2 tenant(s), 4 upstream(s))"),
        "{stdout}"
    );
    let (code, _, stderr) = run_check(&demo, &[]).await;
    assert_eq!(code, 1);
    assert!(
        stderr.contains("environment variable SWITCHYARD_DEMO_SERVER is not set"),
        "{stderr}"
    );
    assert!(
        stderr.contains("environment variable DEMO_HTTP_URL is not set"),
        "{stderr}"
    );
}

/// A tenant with `auth` on a listener other hosts reach must name its audience and hosts;
/// `check` says so at the `auth` mapping, and accepts the config once both are named.
#[tokio::test]
async fn check_refuses_auth_on_an_exposed_listener_without_resource_and_hosts() {
    let dir = TempDir::new("check-exposed");
    let path = dir.path("exposed.yaml");
    let config = |named: &str| {
        format!(
            "listen: 0.0.0.0:8080\n\
             tenants:\n\
             \x20 - name: acme\n{named}\
             \x20   auth: {{issuer: \"https://idp.example\"}}\n\
             \x20   upstreams: [{{name: web, http: {{url: \"https://search.internal/mcp\"}}}}]\n"
        )
    };
    std::fs::write(&path, config("")).expect("write config");
    let (code, stdout, stderr) = run_check(&path, &[]).await;
    assert_eq!(code, 1, "stdout: {stdout} stderr: {stderr}");
    let expected = format!(
        "{}:4:11: tenants[0].auth: a tenant with `auth` on a listener that is not loopback (0.0.0.0:8080) must set `resource`",
        path.display()
    );
    assert!(
        stderr.contains(&expected),
        "missing {expected:?} in:\n{stderr}"
    );
    assert!(stderr.contains("and `allowed_hosts`"), "{stderr}");

    std::fs::write(
        &path,
        config(
            "\x20   resource: https://mcp.example.com/t/acme/mcp\n\
             \x20   allowed_hosts: [mcp.example.com]\n",
        ),
    )
    .expect("write config");
    let (code, stdout, stderr) = run_check(&path, &[]).await;
    assert_eq!(code, 0, "stdout: {stdout} stderr: {stderr}");
}

#[tokio::test]
async fn sigterm_stops_every_child_and_logs_their_stderr() {
    let dir = TempDir::new("sigterm");
    let port = free_port();
    let exe = demo_server_exe().display().to_string();
    let config = dir.path("gw.yaml");
    std::fs::write(
        &config,
        format!(
            "listen: 127.0.0.1:{port}\n\
             tenants:\n\
             \x20 - name: p\n\
             \x20   upstreams:\n\
             \x20     - name: shared\n\
             \x20       stdio: {{command: {exe}, args: [--stdio, --test-tools]}}\n\
             \x20     - name: mine\n\
             \x20       stdio: {{command: {exe}, args: [--stdio, --test-tools], sharing: per-session}}\n\
             \x20     - name: stubborn\n\
             \x20       stdio: {{command: {exe}, args: [--stdio, --test-tools, --stubborn]}}\n"
        ),
    )
    .expect("write config");
    let mut gateway = Command::new(gateway_exe())
        .args(["run", "--config"])
        .arg(&config)
        .env("RUST_LOG", "info")
        .stdout(Stdio::null())
        .stderr(Stdio::piped())
        .kill_on_drop(true)
        .spawn()
        .expect("gateway starts");
    let up = eventually(Duration::from_secs(20), || {
        std::net::TcpStream::connect(("127.0.0.1", port)).is_ok()
    })
    .await;
    assert!(up, "gateway listening");

    let mut c = RawClient::new(format!("http://127.0.0.1:{port}/t/p/mcp"));
    c.initialize().await;
    let mut pids = vec![];
    for name in ["shared__pid", "mine__pid", "stubborn__pid"] {
        let r = c.call_tool(name, json!({})).await;
        let text = r.last()["result"]["content"][0]["text"]
            .as_str()
            .map(str::to_owned);
        let pid: u32 = text
            .and_then(|t| t.parse().ok())
            .unwrap_or_else(|| panic!("{name}: {:?}", r.last()));
        assert!(process_alive(pid));
        pids.push(pid);
    }
    let r = c
        .call_tool(
            "shared__stderr",
            json!({"text": "marker-from-upstream-stderr"}),
        )
        .await;
    assert!(r.last()["result"].is_object());

    let gateway_pid = Pid::from_raw(i32::try_from(gateway.id().expect("pid")).expect("pid fits"));
    kill(gateway_pid, Signal::SIGTERM).expect("SIGTERM delivered");
    let status = tokio::time::timeout(Duration::from_secs(20), gateway.wait())
        .await
        .expect("gateway exits within 20s of SIGTERM (stubborn child needs SIGKILL after 4s)")
        .expect("wait");
    assert!(status.success(), "clean exit: {status}");
    for pid in &pids {
        assert!(
            !process_alive(*pid),
            "child {pid} still running after shutdown"
        );
    }
    let mut logs = String::new();
    if let Some(mut err) = gateway.stderr.take() {
        let _ = err.read_to_string(&mut logs).await;
    }
    let line = logs
        .lines()
        .find(|l| l.contains("marker-from-upstream-stderr"))
        .unwrap_or_else(|| panic!("stderr of the upstream not in the logs:\n{logs}"));
    assert!(
        line.contains("upstream=shared") || line.contains("upstream\x1b"),
        "{line}"
    );
    assert!(logs.contains("SIGTERM received"), "{logs}");
}

/// A refused request is logged once, in its request's context: with Redis gone each
/// `initialize` is a 503 with `Retry-After` and one error line naming tenant and method, not
/// also a context-free `response failed` line from the HTTP layer (at `info`, as in
/// production: an outage under load would log both per request). With debug logs the HTTP
/// layer's span and response line are there.
#[tokio::test]
async fn a_refused_request_is_logged_once_in_its_context() {
    let mut redis = crate::support::redis::RedisServer::start().await;
    let dir = TempDir::new("refusal-logs");
    let demo = demo_server_exe().display().to_string();
    let yaml = format!(
        "sessions:\n  store: {{redis: {{url: \"{}\", prefix: rl}}}}\ntenants:\n  - name: acme\n    upstreams:\n      - name: demo\n        stdio: {{command: \"{demo}\", args: [\"--stdio\"]}}\n",
        redis.url()
    );
    let initialize = json!({
        "jsonrpc": "2.0", "id": 1, "method": "initialize",
        "params": {"protocolVersion": "2025-11-25", "capabilities": {},
                   "clientInfo": {"name": "refusals", "version": "0"}}
    });
    let lines = |logs: &str| -> Vec<serde_json::Value> {
        logs.lines()
            .filter_map(|l| serde_json::from_str(l).ok())
            .collect()
    };

    // Debug logs: a request gets the HTTP layer's response line too.
    let port = free_port();
    let path = dir.path("debug.yaml");
    std::fs::write(&path, format!("listen: 127.0.0.1:{port}\n{yaml}")).expect("config");
    let gw =
        GatewayProcess::run_with_env(&path, port, &[], &[("RUST_LOG", "debug")], "debug").await;
    let r = RawClient::new(gw.url("acme")).post(&initialize).await;
    assert_eq!(r.status, 200, "{r:?}");
    let logs = gw.stop().await;
    assert!(
        lines(&logs)
            .iter()
            .any(|l| l["target"] == "tower_http::trace::on_response"),
        "no HTTP layer line at debug:\n{logs}"
    );

    // Info logs, Redis gone: 503s, each logged once with its context.
    let gw = GatewayProcess::start(&yaml, &dir, "info").await;
    redis.kill().await;
    let refused = 3;
    for _ in 0..refused {
        let r = RawClient::new(gw.url("acme")).post(&initialize).await;
        assert_eq!(r.status, 503, "{r:?}");
        assert!(r.header("retry-after").is_some(), "{r:?}");
    }
    let logs = gw.stop().await;
    let lines = lines(&logs);
    let http_layer: Vec<_> = lines
        .iter()
        .filter(|l| {
            l["target"]
                .as_str()
                .is_some_and(|t| t.starts_with("tower_http"))
        })
        .collect();
    assert!(http_layer.is_empty(), "{http_layer:#?}");
    let errors: Vec<_> = lines.iter().filter(|l| l["level"] == "ERROR").collect();
    assert_eq!(
        errors.len(),
        refused,
        "one error line per refusal: {errors:#?}"
    );
    for e in errors {
        assert_eq!(e["span"]["tenant"], "acme", "{e}");
        assert_eq!(e["span"]["mcp.method.name"], "initialize", "{e}");
    }
}
