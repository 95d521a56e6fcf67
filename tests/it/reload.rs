//! Config hot reload of a real gateway process while sessions are open: the routing file is
//! replaced the way the kubelet updates a mounted ConfigMap (an atomic swap of the `..data`
//! symlink) to add an upstream, remove another, add a tenant and remove one; sessions — raw
//! HTTP ones and an official Python SDK client — carry on, a call in flight on a kept upstream
//! finishes, kept upstream processes are not restarted, listeners hear `list_changed`. An
//! invalid file is rejected with its errors logged and the running config kept. With polling
//! off, SIGHUP reloads.

use std::collections::BTreeSet;
use std::path::Path;
use std::time::Duration;

use futures_util::StreamExt;
use serde_json::{Value, json};
use switchyard::upstream::sse::SseParser;

use crate::support::client::{RawClient, text, tool_names};
use crate::support::config::demo_server_exe;
use crate::support::peers::{HttpPeer, Sdk, free_port, run_client};
use crate::support::process::GatewayProcess;
use crate::support::{TempDir, eventually};

/// Writes `text` as the kubelet updates a ConfigMap volume: into a fresh directory, then an
/// atomic rename of the `..data` symlink; `gateway.yaml` is a symlink through `..data`.
fn configmap_write(dir: &Path, text: &str, version: u32) {
    let fresh = format!("..v{version}");
    std::fs::create_dir(dir.join(&fresh)).expect("version dir");
    std::fs::write(dir.join(&fresh).join("gateway.yaml"), text).expect("config text");
    let tmp = dir.join("..data_tmp");
    let _ = std::fs::remove_file(&tmp);
    std::os::unix::fs::symlink(&fresh, &tmp).expect("symlink");
    std::fs::rename(&tmp, dir.join("..data")).expect("atomic swap");
    let link = dir.join("gateway.yaml");
    if std::fs::symlink_metadata(&link).is_err() {
        std::os::unix::fs::symlink("..data/gateway.yaml", &link).expect("file symlink");
    }
    if version > 1 {
        let _ = std::fs::remove_dir_all(dir.join(format!("..v{}", version - 1)));
    }
}

/// A client continuing `from`'s session (a second connection, as a host's parallel request).
fn same_session(from: &RawClient) -> RawClient {
    let mut c = RawClient::new(from.url.clone());
    c.session = from.session.clone();
    c.protocol_version = from.protocol_version.clone();
    c
}

/// Reads a GET stream until `method` arrives (true) or 15 s pass (false).
async fn hears(stream: reqwest::Response, method: &str) -> bool {
    let mut body = stream.bytes_stream();
    let mut parser = SseParser::new(1 << 20);
    tokio::time::timeout(Duration::from_secs(15), async move {
        while let Some(Ok(chunk)) = body.next().await {
            parser.push(&chunk);
            while let Ok(Some(ev)) = parser.next_event() {
                if serde_json::from_slice::<Value>(&ev.data).is_ok_and(|m| m["method"] == method) {
                    return true;
                }
            }
        }
        false
    })
    .await
    .unwrap_or(false)
}

async fn metric(admin: u16, series: &str) -> f64 {
    let text = reqwest::get(format!("http://127.0.0.1:{admin}/metrics"))
        .await
        .expect("scrape")
        .text()
        .await
        .expect("metrics text");
    text.lines()
        .find_map(|l| l.strip_prefix(series)?.trim().parse().ok())
        .unwrap_or_else(|| panic!("no series {series} in:\n{text}"))
}

#[tokio::test]
async fn configmap_update_adds_and_removes_upstreams_and_tenants_under_open_sessions() {
    let beta = HttpPeer::demo(free_port(), &[]).await;
    let gamma = HttpPeer::demo(free_port(), &[]).await;
    let dir = TempDir::new("reload");
    let (port, admin) = (free_port(), free_port());
    let exe = demo_server_exe().display().to_string();
    let alpha = format!(
        "{{name: alpha, stdio: {{command: \"{exe}\", args: [--stdio, --test-tools], sharing: shared}}}}"
    );
    let head = format!("listen: 127.0.0.1:{port}\nadmin_listen: 127.0.0.1:{admin}\ntenants:\n");
    let v1 = format!(
        "{head}\
         \x20 - name: hr\n\
         \x20   prefix: {{mode: always}}\n\
         \x20   upstreams:\n\
         \x20     - {alpha}\n\
         \x20     - {{name: beta, http: {{url: \"{beta}\"}}}}\n\
         \x20 - name: gone\n\
         \x20   upstreams:\n\
         \x20     - {{name: beta, http: {{url: \"{beta}\"}}}}\n",
        beta = beta.url(),
    );
    let v2 = format!(
        "{head}\
         \x20 - name: hr\n\
         \x20   prefix: {{mode: always}}\n\
         \x20   upstreams:\n\
         \x20     - {alpha}\n\
         \x20     - {{name: gamma, http: {{url: \"{gamma}\"}}}}\n\
         \x20 - name: fresh\n\
         \x20   upstreams:\n\
         \x20     - {{name: gamma, http: {{url: \"{gamma}\"}}}}\n",
        gamma = gamma.url(),
    );
    configmap_write(&dir.0, &v1, 1);
    let gw = GatewayProcess::run(
        &dir.path("gateway.yaml"),
        port,
        &["--reload-poll", "0.2"],
        "reload",
    )
    .await;

    // Sessions open before the change: a raw client listening on its GET stream, one on the
    // tenant about to be removed, and an official SDK client.
    let mut a = RawClient::new(gw.url("hr"));
    a.initialize().await;
    let before = tool_names(a.request("tools/list", json!({})).await.last());
    assert!(
        before.contains("alpha__echo") && before.contains("beta__echo"),
        "{before:?}"
    );
    assert_eq!(
        text(
            a.call_tool("beta__echo", json!({"message": "b"}))
                .await
                .last()
        ),
        "b"
    );
    let pid = text(a.call_tool("alpha__pid", json!({})).await.last());
    let session_id = a.session.clone().expect("session id");
    let listening = a
        .get_stream(&[
            ("accept", "text/event-stream"),
            ("mcp-session-id", &session_id),
        ])
        .await;
    assert_eq!(listening.status(), 200);
    let mut g = RawClient::new(gw.url("gone"));
    g.initialize().await;
    assert_eq!(g.request("ping", json!({})).await.status, 200);

    let (ready, go) = (dir.path("sdk-ready"), dir.path("sdk-go"));
    let sdk = {
        let url = gw.url("hr");
        let (ready, go) = (ready.display().to_string(), go.display().to_string());
        tokio::spawn(async move {
            run_client(
                Sdk::Python,
                &url,
                "reload",
                &[
                    "--mode",
                    "legacy",
                    "--ready-file",
                    &ready,
                    "--go-file",
                    &go,
                    "--call-tool",
                    "gamma__echo",
                ],
            )
            .await
        })
    };
    assert!(
        eventually(Duration::from_secs(60), || ready.exists()).await,
        "the SDK client connected and listed its tools"
    );
    // A call in flight on an upstream the reload keeps.
    let slow = {
        let c = same_session(&a);
        tokio::spawn(async move { c.call_tool("alpha__sleep", json!({"ms": 1500})).await })
    };
    tokio::time::sleep(Duration::from_millis(100)).await;

    configmap_write(&dir.0, &v2, 2);
    let mut after = BTreeSet::new();
    for _ in 0..100 {
        after = tool_names(a.request("tools/list", json!({})).await.last());
        if after.contains("gamma__echo") {
            break;
        }
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    std::fs::write(&go, "go").expect("go file");

    // The same session, the new routing.
    assert!(
        after.contains("alpha__echo") && after.contains("gamma__echo"),
        "{after:?}"
    );
    assert!(!after.iter().any(|t| t.starts_with("beta__")), "{after:?}");
    assert_eq!(
        text(
            a.call_tool("gamma__echo", json!({"message": "g"}))
                .await
                .last()
        ),
        "g"
    );
    let gone_tool = a.call_tool("beta__echo", json!({"message": "b"})).await;
    assert_eq!(
        gone_tool.error_code(),
        Some(-32602),
        "{:?}",
        gone_tool.last()
    );
    assert!(
        gone_tool.last()["error"]["message"]
            .as_str()
            .is_some_and(|m| m.contains("beta__echo") && m.contains("alpha, gamma")),
        "{:?}",
        gone_tool.last()
    );
    assert_eq!(
        text(a.call_tool("alpha__pid", json!({})).await.last()),
        pid,
        "the kept upstream's process was not restarted"
    );
    let slow = slow.await.expect("slow call task");
    assert_eq!(
        text(slow.last()),
        "slept 1500ms",
        "the call in flight finished"
    );
    assert!(
        hears(listening, "notifications/tools/list_changed").await,
        "the listening session was told its tool list changed"
    );
    // The removed tenant's endpoint and sessions are gone; the added one serves.
    assert_eq!(g.request("ping", json!({})).await.status, 404);
    let mut f = RawClient::new(gw.url("fresh"));
    f.initialize().await;
    assert_eq!(
        text(f.call_tool("echo", json!({"message": "f"})).await.last()),
        "f"
    );

    let report = sdk.await.expect("SDK task");
    let names = |k: &str| -> Vec<String> {
        report[k]
            .as_array()
            .map(|a| {
                a.iter()
                    .filter_map(|v| v.as_str().map(str::to_owned))
                    .collect()
            })
            .unwrap_or_default()
    };
    assert!(
        names("before").contains(&"beta__echo".to_owned())
            && !names("before").contains(&"gamma__echo".to_owned()),
        "{report}"
    );
    assert!(
        names("after").contains(&"gamma__echo".to_owned())
            && !names("after").iter().any(|t| t.starts_with("beta__")),
        "the SDK's cached list was refreshed on list_changed: {report}"
    );
    assert_eq!(report["call"], "after reload", "{report}");
    assert!(
        names("notifications").contains(&"notifications/tools/list_changed".to_owned()),
        "{report}"
    );
    assert!(
        metric(
            admin,
            "switchyard_config_reloads_total{outcome=\"applied\"}"
        )
        .await
            >= 1.0
    );
    assert_eq!(
        metric(admin, "switchyard_config_last_reload_successful").await,
        1.0
    );

    // An invalid file: rejected with every error named, the running config kept.
    let v3 = v2.replace("prefix: {mode: always}", "prefix: {mode: allways}")
        + "    upstream_timeout: 5s\n";
    configmap_write(&dir.0, &v3, 3);
    let rejected = eventually(Duration::from_secs(10), || {
        gw.logs().contains("config reload rejected")
    })
    .await;
    assert!(rejected, "the invalid config was rejected: {}", gw.logs());
    assert_eq!(
        metric(
            admin,
            "switchyard_config_reloads_total{outcome=\"rejected\"}"
        )
        .await,
        1.0
    );
    assert_eq!(
        metric(admin, "switchyard_config_last_reload_successful").await,
        0.0,
        "an older config runs"
    );
    assert_eq!(
        text(
            a.call_tool("gamma__echo", json!({"message": "still"}))
                .await
                .last()
        ),
        "still"
    );
    assert!(tool_names(a.request("tools/list", json!({})).await.last()).contains("gamma__echo"));

    let log = gw.stop().await;
    let errors: Vec<Value> = crate::support::json_lines(&log)
        .filter(|e| e["level"] == "ERROR" && e["target"] == "switchyard::config")
        .collect();
    let messages: Vec<&str> = errors
        .iter()
        .filter_map(|e| e["message"].as_str())
        .collect();
    assert!(
        messages
            .iter()
            .any(|m| m.contains("gateway.yaml:5:") && m.contains("allways")),
        "the bad value is reported with its position: {messages:#?}"
    );
    assert!(
        messages
            .iter()
            .any(|m| m.contains("gateway.yaml:") && m.contains("upstream_timeout")),
        "the unknown field is reported too: {messages:#?}"
    );
    let applied = crate::support::json_lines(&log)
        .find(|e| e["message"] == "config reloaded")
        .unwrap_or_else(|| panic!("no `config reloaded` event in:\n{log}"));
    assert_eq!(applied["upstreams_started"], "[\"hr/gamma\"]", "{applied}");
    assert_eq!(applied["upstreams_retired"], "[\"hr/beta\"]", "{applied}");
    assert_eq!(applied["tenants_added"], "[\"fresh\"]", "{applied}");
    assert_eq!(applied["tenants_removed"], "[\"gone\"]", "{applied}");
}

#[tokio::test]
async fn sighup_reloads_when_polling_is_off() {
    let dir = TempDir::new("reload-hup");
    let port = free_port();
    let exe = demo_server_exe().display().to_string();
    let demo = |name: &str| {
        format!("      - {{name: {name}, stdio: {{command: \"{exe}\", args: [--stdio]}}}}\n")
    };
    let head = format!(
        "listen: 127.0.0.1:{port}\ntenants:\n  - name: hup\n    prefix: {{mode: always}}\n    upstreams:\n"
    );
    let path = dir.path("gateway.yaml");
    std::fs::write(&path, format!("{head}{}", demo("one"))).expect("config");
    let gw = GatewayProcess::run(&path, port, &["--reload-poll", "0"], "hup").await;
    let mut c = RawClient::new(gw.url("hup"));
    c.initialize().await;
    let listed = |c: &RawClient| {
        let c = same_session(c);
        async move { tool_names(c.request("tools/list", json!({})).await.last()) }
    };
    assert!(listed(&c).await.contains("one__echo"));

    std::fs::write(&path, format!("{head}{}{}", demo("one"), demo("two"))).expect("config");
    // Polling is off: nothing changes until the signal.
    tokio::time::sleep(Duration::from_millis(700)).await;
    assert!(!listed(&c).await.contains("two__echo"));

    gw.signal(nix::sys::signal::Signal::SIGHUP);
    let mut seen = BTreeSet::new();
    for _ in 0..100 {
        seen = listed(&c).await;
        if seen.contains("two__echo") {
            break;
        }
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    assert!(
        seen.contains("one__echo") && seen.contains("two__echo"),
        "{seen:?}"
    );
    assert_eq!(
        text(
            c.call_tool("two__echo", json!({"message": "2"}))
                .await
                .last()
        ),
        "2"
    );
    let log = gw.stop().await;
    assert!(log.contains("SIGHUP: reloading the config"), "{log}");
}
