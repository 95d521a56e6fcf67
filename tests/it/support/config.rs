//! Building validated `Config`s in code for tests.

use std::collections::BTreeMap;
use std::path::PathBuf;
use std::time::Duration;

use switchyard::config::*;

/// The gateway binary built by cargo for this test run.
pub fn gateway_exe() -> PathBuf {
    PathBuf::from(env!("CARGO_BIN_EXE_switchyard"))
}

/// The demo server's binary (workspace crate `switchyard-demo-server`), which cargo puts next
/// to the gateway's. `cargo test` at the workspace root builds it (so does `cargo test --test
/// it`: the demo crate has an `it` test too); `cargo test -p switchyard` alone does not, and
/// then this panics rather than run a stale or missing binary unnoticed.
pub fn demo_server_exe() -> PathBuf {
    let exe = gateway_exe().with_file_name("switchyard-demo-server");
    assert!(
        exe.is_file(),
        "the demo server is not built at {}: run the tests from the workspace root \
         (`cargo test`), or `cargo build -p switchyard-demo-server` first",
        exe.display()
    );
    exe
}

pub fn stdio(command: impl Into<String>, args: &[&str]) -> StdioConfig {
    StdioConfig {
        command: command.into(),
        args: args.iter().map(|s| s.to_string()).collect(),
        env: BTreeMap::new(),
        inherit_env: vec![],
        cwd: None,
        sharing: StdioSharing::Shared,
        pool_size: 1,
        restart: RestartPolicy {
            initial_backoff: Duration::from_millis(50),
            max_backoff: Duration::from_secs(2),
        },
    }
}

/// The project's demo server over stdio, with the test-only tools and an optional trace file.
pub fn demo_stdio(trace: Option<&std::path::Path>) -> StdioConfig {
    let mut args = vec!["--stdio".to_string(), "--test-tools".into()];
    if let Some(t) = trace {
        args.push("--trace".into());
        args.push(t.display().to_string());
    }
    StdioConfig {
        args,
        ..stdio(demo_server_exe().display().to_string(), &[])
    }
}

pub fn upstream(name: &str, transport: UpstreamTransport) -> UpstreamConfig {
    UpstreamConfig {
        name: name.into(),
        transport,
        request_timeout: Duration::from_secs(30),
        max_request_timeout: Duration::from_secs(120),
        init_timeout: Duration::from_secs(30),
        era: Default::default(),
    }
}

pub fn http(url: &str) -> UpstreamTransport {
    UpstreamTransport::Http(HttpConfig {
        url: url.into(),
        headers: vec![],
        header_files: vec![],
        oauth2: None,
    })
}

/// An upstream speaking the 2024-11-05 HTTP+SSE transport; `url` is its SSE endpoint.
pub fn sse(url: &str) -> UpstreamTransport {
    UpstreamTransport::Sse(HttpConfig {
        url: url.into(),
        headers: vec![],
        header_files: vec![],
        oauth2: None,
    })
}

pub fn tenant(name: &str, upstreams: Vec<UpstreamConfig>) -> TenantConfig {
    TenantConfig {
        name: name.into(),
        path: format!("/t/{name}/mcp"),
        server: ServerIdentity {
            name: format!("switchyard-{name}"),
            version: "0.0.0-test".into(),
            title: None,
            instructions: None,
        },
        prefix: PrefixConfig {
            mode: PrefixMode::Conditional,
            separator: "__".into(),
        },
        failure_policy: FailurePolicy::Open,
        resource: None,
        allowed_hosts: vec![],
        allowed_origins: vec![],
        auth: None,
        tool_policies: vec![],
        limits: TenantLimits::default(),
        upstreams,
    }
}

pub fn config(tenants: Vec<TenantConfig>) -> Config {
    Config {
        source: None,
        listen: "127.0.0.1:0".parse().expect("static address"),
        admin_listen: None,
        admin_token: None,
        tls: None,
        limits: Limits {
            max_body_bytes: 256 * 1024,
            max_upstream_message_bytes: 16 * 1024 * 1024,
            // Stops at once: most tests stop a gateway with their client's connection still
            // open. The drain grace's own tests (and the rolling restart) set it.
            connections: ConnectionLimits {
                drain_grace: Duration::ZERO,
                ..ConnectionLimits::default()
            },
            ..Limits::default()
        },
        sessions: SessionConfig {
            ttl: Duration::from_secs(600),
            store: StoreConfig::Memory,
            bounds: SessionBounds::default(),
        },
        telemetry: Default::default(),
        trusted_proxies: vec![],
        connection_workers: Default::default(),
        tenants,
        warnings: vec![],
    }
}
