//! Connection workers (`connection_workers`), over real sockets and processes: with
//! `per-core` (the default) the gateway runs one worker thread per core it is given
//! (`TOKIO_WORKER_THREADS`), client connections are dealt to them in turn, and a session opened
//! on one connection is served on every other — calls to an HTTP upstream and to a shared stdio
//! upstream's processes (started on the workers) included, streamed calls too; `shared` runs
//! none. A process gateway: the thread names are read from `/proc`.

use serde_json::{Value, json};

use crate::support::TempDir;
use crate::support::client::RawClient;
use crate::support::config::demo_server_exe;
use crate::support::peers::{HttpPeer, free_port};
use crate::support::process::GatewayProcess;

/// The process's connection worker threads: name and how often each has gone to sleep
/// waiting for work (voluntary context switches), sorted by name.
fn workers_of(pid: u32) -> Vec<(String, u64)> {
    let mut found: Vec<(String, u64)> = std::fs::read_dir(format!("/proc/{pid}/task"))
        .expect("the gateway's threads")
        .filter_map(|t| {
            let dir = t.ok()?.path();
            let name = std::fs::read_to_string(dir.join("comm"))
                .ok()?
                .trim()
                .to_owned();
            let status = std::fs::read_to_string(dir.join("status")).ok()?;
            let waits = status
                .lines()
                .find_map(|l| l.strip_prefix("voluntary_ctxt_switches:"))?
                .trim()
                .parse()
                .ok()?;
            name.starts_with("sy-worker-").then_some((name, waits))
        })
        .collect();
    found.sort();
    found
}

fn worker_threads(pid: u32) -> Vec<String> {
    workers_of(pid).into_iter().map(|(name, _)| name).collect()
}

async fn start(dir: &TempDir, mode: Option<&str>, threads: &str, up: &HttpPeer) -> GatewayProcess {
    let port = free_port();
    let path = dir.path("gw.yaml");
    let demo = demo_server_exe().display().to_string();
    let mode = mode.map_or(String::new(), |m| format!("connection_workers: {m}\n"));
    std::fs::write(
        &path,
        format!(
            "listen: 127.0.0.1:{port}\n{mode}tenants:\n  - name: acme\n    upstreams:\n      \
             - {{name: web, http: {{url: \"{}\"}}}}\n      \
             - {{name: local, stdio: {{command: \"{demo}\", args: [--stdio, --test-tools], sharing: shared, pool_size: 2}}}}\n",
            up.url()
        ),
    )
    .expect("config");
    let env = [("TOKIO_WORKER_THREADS", threads)];
    GatewayProcess::run_with_env(&path, port, &[], &env, "workers").await
}

/// A client of `session` on a connection of its own (a new HTTP client each time).
fn on_new_connection(url: &str, session: &str) -> RawClient {
    let mut c = RawClient::new(url.to_owned());
    c.session = Some(session.to_owned());
    c
}

#[tokio::test]
async fn per_core_workers_serve_one_session_from_every_connection() {
    let dir = TempDir::new("workers");
    let up = HttpPeer::demo(free_port(), &[]).await;
    let gw = start(&dir, None, "3", &up).await;
    assert_eq!(
        worker_threads(gw.pid()),
        ["sy-worker-1", "sy-worker-2", "sy-worker-3"],
        "three workers, as TOKIO_WORKER_THREADS says"
    );
    let url = gw.url("acme");
    let mut first = RawClient::new(url.clone());
    first.initialize().await;
    let session = first.session.clone().expect("a session");
    // Six connections: each worker gets two, and each serves the session opened on the first.
    let clients: Vec<RawClient> = (0..6).map(|_| on_new_connection(&url, &session)).collect();
    for (n, c) in clients.iter().enumerate() {
        let message = format!("via connection {n}");
        for tool in ["web__echo", "local__echo"] {
            let reply = c.call_tool(tool, json!({"message": message})).await;
            assert_eq!(reply.status, 200, "{tool} on connection {n}: {reply:?}");
            let text = reply.last()["result"]["content"][0]["text"]
                .as_str()
                .unwrap_or("");
            assert!(
                text.contains(&message),
                "{tool} on connection {n}: {reply:?}"
            );
        }
        // A streamed call: progress notifications, then the answer, on an SSE response.
        let streamed = c
            .request(
                "tools/call",
                json!({"name": "web__sleep", "arguments": {"ms": 10, "steps": 2},
                       "_meta": {"progressToken": n}}),
            )
            .await;
        assert_eq!(streamed.status, 200, "{streamed:?}");
        let progress = streamed
            .messages
            .iter()
            .filter(|m| m["method"] == "notifications/progress")
            .count();
        assert_eq!(progress, 2, "connection {n}: {streamed:?}");
        assert!(streamed.last()["result"].is_object(), "{streamed:?}");
    }
    // Calls at once from every connection (both workers busy at the same time).
    let calls = clients.iter().enumerate().map(|(n, c)| async move {
        c.call_tool("local__echo", json!({"message": format!("at once {n}")}))
            .await
    });
    for reply in futures_util::future::join_all(calls).await {
        assert!(reply.last()["result"].is_object(), "{reply:?}");
    }
    // Every worker served connections: each woke for work many times (an idle one waits once).
    for (name, waits) in workers_of(gw.pid()) {
        assert!(
            waits >= 5,
            "{name} woke {waits} times: it served no connection"
        );
    }
    // Ended on one connection, the session is gone on every other.
    let ended = clients[3].delete().await;
    assert!(matches!(ended.status, 200 | 204), "{ended:?}");
    let after = clients[4]
        .call_tool("web__echo", json!({"message": "late"}))
        .await;
    assert_eq!(after.status, 404, "{after:?}");
    let logs = gw.stop().await;
    let started: Vec<Value> = crate::support::json_lines(&logs)
        .filter(|v| v["message"] == "connection workers started")
        .collect();
    assert_eq!(started.len(), 1, "{logs}");
    assert_eq!(started[0]["workers"], 3, "{logs}");
}

/// The pid of the shared stdio process serving `client`'s session (the demo's `pid` tool).
async fn process_of(client: &RawClient) -> String {
    let reply = client.call_tool("local__pid", json!({})).await;
    assert_eq!(reply.status, 200, "{reply:?}");
    reply.last()["result"]["content"][0]["text"]
        .as_str()
        .unwrap_or_else(|| panic!("a pid: {reply:?}"))
        .to_owned()
}

/// A session opened on a connection is pinned to the shared stdio process whose answers are
/// read on that connection's worker, so its answers wake no other thread: every session opened
/// on one connection lands on one process (by chance, six would all agree one time in 32),
/// and those of a connection on the other worker on the other process. Every session's id is
/// still one of the gateway's (48 random hex digits, perhaps one or two more), and any
/// connection serves it.
#[tokio::test]
async fn sessions_are_pinned_to_the_stdio_process_read_on_their_connections_worker() {
    let dir = TempDir::new("workers-pinned");
    let up = HttpPeer::demo(free_port(), &[]).await;
    let gw = start(&dir, None, "2", &up).await;
    let url = gw.url("acme");
    let mut pids = Vec::new();
    // Two connections, dealt to the two workers in turn; six sessions opened on each.
    for connection in 0..2 {
        let mut c = RawClient::new(url.clone());
        let mut seen = Vec::new();
        for _ in 0..6 {
            c.session = None;
            c.initialize().await;
            let id = c.session.clone().expect("a session");
            assert!(
                (48..=50).contains(&id.len()) && id.bytes().all(|b| b.is_ascii_hexdigit()),
                "{id}"
            );
            seen.push(process_of(&c).await);
            // Served from another connection (another worker) as well.
            let other = on_new_connection(&url, &id);
            assert_eq!(process_of(&other).await, seen[seen.len() - 1], "{id}");
        }
        assert!(
            seen.iter().all(|p| *p == seen[0]),
            "connection {connection}: sessions on several processes: {seen:?}"
        );
        pids.push(seen[0].clone());
    }
    assert_ne!(
        pids[0], pids[1],
        "both connections' sessions on one process"
    );
    gw.stop().await;
}

#[tokio::test]
async fn shared_runs_no_workers_and_serves_the_same() {
    let dir = TempDir::new("workers-shared");
    let up = HttpPeer::demo(free_port(), &[]).await;
    let gw = start(&dir, Some("shared"), "2", &up).await;
    let url = gw.url("acme");
    let mut c = RawClient::new(url.clone());
    c.initialize().await;
    let other = on_new_connection(&url, c.session.as_deref().expect("a session"));
    for client in [&c, &other] {
        let reply = client
            .call_tool("local__echo", json!({"message": "hi"}))
            .await;
        assert!(reply.last()["result"].is_object(), "{reply:?}");
    }
    assert!(worker_threads(gw.pid()).is_empty());
    let logs = gw.stop().await;
    assert!(!logs.contains("connection workers started"), "{logs}");
}

/// A gateway embedded in a runtime that goes away without stopping it: dropping the serving
/// future lets go of the gateway — the connection tasks on the workers and the session reaper
/// end with it — so the gateway, and the worker threads it owns, are freed. (The reaper used
/// to outlive it, holding the gateway and so the workers.)
#[tokio::test]
async fn dropping_the_serving_future_halts_the_workers() {
    use crate::support::config::{config, demo_stdio, tenant, upstream};
    let cfg = config(vec![tenant(
        "acme",
        vec![upstream(
            "local",
            switchyard::config::UpstreamTransport::Stdio(demo_stdio(None)),
        )],
    )]);
    let gateway = switchyard::app::build(&cfg).await.expect("gateway builds");
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0")
        .await
        .expect("bind 127.0.0.1");
    let addr = listener.local_addr().expect("local addr");
    let serving = tokio::spawn(switchyard::app::serve(
        listener,
        gateway.clone(),
        None,
        std::future::pending(),
    ));
    // A keep-alive connection: its task, on a worker, holds the gateway while it is open.
    let mut c = RawClient::new(format!("http://{addr}/t/acme/mcp"));
    c.initialize().await;
    let reply = c.call_tool("echo", json!({"message": "hi"})).await;
    assert!(reply.last()["result"].is_object(), "{reply:?}");
    assert!(
        std::sync::Arc::strong_count(&gateway) > 2,
        "tasks hold the gateway"
    );
    serving.abort();
    let _ = serving.await;
    let freed = crate::support::eventually(std::time::Duration::from_secs(5), || {
        std::sync::Arc::strong_count(&gateway) == 1
    })
    .await;
    assert!(
        freed,
        "the workers' tasks still hold the gateway: {} references",
        std::sync::Arc::strong_count(&gateway)
    );
    gateway.shutdown().await;
}
