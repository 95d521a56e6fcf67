//! End-to-end tests of `parse`: defaults, substitution, aliases, and the full error report.

#![allow(clippy::unwrap_used)]

use std::time::Duration;

use super::*;

fn env(name: &str) -> Option<String> {
    match name {
        "API_TOKEN" => Some("tok-SECRET-123".into()),
        "HOST" => Some("api.example.com".into()),
        _ => None,
    }
}

fn ok(text: &str) -> Config {
    match parse(text, "test.yaml", &env) {
        Ok(config) => config,
        Err(errors) => panic!("unexpected errors:\n{errors}"),
    }
}

fn errors(text: &str) -> Vec<String> {
    match parse(text, "test.yaml", &env) {
        Ok(_) => panic!("expected errors"),
        Err(errors) => errors.errors.iter().map(ToString::to_string).collect(),
    }
}

const GOLDEN: &str = r#"listen: 127.0.0.1:9000
tenants:
  - name: acme
    upstreams:
      - name: files
        stdio:
          comand: npx
          command: npx
      - name: web
        http:
          url: https://web.example.com/mcp
        timeout: 30
      - name: search
        http:
          url: ftp://search.example.com/mcp
          headers:
            Authorization: "Bearer ${SEARCH_TOKEN}"
  - name: beta
    path: /t/acme/mcp
    upstreams:
      - name: both
        stdio:
          command: ./server
        http:
          url: https://beta.example.com/mcp
        name: again
"#;

#[test]
fn golden_every_error_at_once() {
    assert_eq!(
        errors(GOLDEN),
        vec![
            "test.yaml:7:11: tenants[0].upstreams[0].stdio: unknown field `comand`, did you mean `command`? expected one of: command, args, env, inherit_env, cwd, sharing, pool_size, restart",
            "test.yaml:12:18: tenants[0].upstreams[1].timeout: duration needs a unit, e.g. 30s",
            "test.yaml:15:16: tenants[0].upstreams[2].http.url: the URL scheme must be http or https, not \"ftp\"",
            "test.yaml:17:28: tenants[0].upstreams[2].http.headers.Authorization: environment variable SEARCH_TOKEN is not set (use ${SEARCH_TOKEN:-default} for a default)",
            "test.yaml:19:11: tenants[1].path: duplicate tenant path \"/t/acme/mcp\" (first defined at line 3, as the default path of tenant \"acme\")",
            "test.yaml:21:9: tenants[1].upstreams[0]: set exactly one of `stdio`, `http` or `sse`, not `stdio` and `http`",
            "test.yaml:26:9: tenants[1].upstreams[0]: duplicate key `name` (first defined at line 21)",
        ]
    );
}

const MINIMAL: &str = "tenants:\n  - name: acme\n    upstreams:\n      - name: files\n        stdio: {command: npx}\n";

#[test]
fn minimal_config_is_fully_defaulted() {
    let config = ok(MINIMAL);
    assert_eq!(config.source, None);
    assert_eq!(config.listen, "127.0.0.1:8080".parse().unwrap());
    assert_eq!(config.limits.max_body_bytes, 4 << 20);
    assert_eq!(config.limits.max_upstream_message_bytes, 16 << 20);
    assert_eq!(config.sessions.ttl, Duration::from_secs(30 * 60));
    assert!(matches!(config.sessions.store, StoreConfig::Memory));
    let [tenant] = config.tenants.as_slice() else {
        panic!("one tenant")
    };
    assert_eq!(tenant.name, "acme");
    assert_eq!(tenant.path, "/t/acme/mcp");
    assert_eq!(tenant.server.name, "switchyard");
    assert_eq!(tenant.server.version, env!("CARGO_PKG_VERSION"));
    assert_eq!(tenant.server.title, None);
    assert_eq!(tenant.server.instructions, None);
    assert_eq!(tenant.prefix.mode, PrefixMode::Conditional);
    assert_eq!(tenant.prefix.separator, "__");
    assert_eq!(tenant.failure_policy, FailurePolicy::Open);
    let [upstream] = tenant.upstreams.as_slice() else {
        panic!("one upstream")
    };
    assert_eq!(upstream.name, "files");
    assert_eq!(upstream.request_timeout, Duration::from_secs(60));
    assert_eq!(upstream.max_request_timeout, Duration::from_secs(600));
    assert_eq!(upstream.init_timeout, Duration::from_secs(30));
    assert_eq!(upstream.era, UpstreamEra::Auto);
    let UpstreamTransport::Stdio(stdio) = &upstream.transport else {
        panic!("stdio")
    };
    assert_eq!(stdio.command, "npx");
    assert!(stdio.args.is_empty() && stdio.env.is_empty() && stdio.inherit_env.is_empty());
    assert_eq!(stdio.cwd, None);
    assert_eq!(stdio.sharing, StdioSharing::Shared);
    assert_eq!(stdio.restart.initial_backoff, Duration::from_millis(100));
    assert_eq!(stdio.restart.max_backoff, Duration::from_secs(30));
}

#[test]
fn empty_sections_mean_defaults() {
    let config = ok(&format!("limits:\nsessions: ~\n{MINIMAL}"));
    assert_eq!(config.limits.max_body_bytes, 4 << 20);
    assert_eq!(config.sessions.ttl, Duration::from_secs(1800));
}

#[test]
fn every_field_is_read() {
    let config = ok(r#"
listen: "[::1]:9090"
limits: {max_body: 512KiB, max_upstream_message: 1000kB}
sessions: {ttl: 1h30m, store: memory}
tenants:
  - name: acme
    path: /mcp/acme
    server: {name: Acme, version: "2.0", title: Acme tools, instructions: "Use the tools."}
    prefix: {mode: always, separator: "."}
    failure_policy: closed
    upstreams:
      - name: files
        stdio:
          command: npx
          args: [-y, "@mcp/files", "8080"]
          env: {B_KEY: two, A_KEY: one}
          inherit_env: [RUST_LOG, _X1]
          cwd: .
          sharing: per-session
          restart: {initial_backoff: 250ms, max_backoff: 1m}
        timeout: 5s
        max_timeout: 1m
        init_timeout: 10s
        era: legacy
      - name: remote
        http:
          url: https://example.com/mcp?x=1
          headers: {X-Zed: z, Authorization: a}
"#);
    assert_eq!(config.listen, "[::1]:9090".parse().unwrap());
    assert_eq!(config.limits.max_body_bytes, 512 * 1024);
    assert_eq!(config.limits.max_upstream_message_bytes, 1_000_000);
    assert_eq!(config.sessions.ttl, Duration::from_secs(5400));
    let tenant = &config.tenants[0];
    assert_eq!(tenant.path, "/mcp/acme");
    assert_eq!(tenant.server.name, "Acme");
    assert_eq!(tenant.server.version, "2.0");
    assert_eq!(tenant.server.title.as_deref(), Some("Acme tools"));
    assert_eq!(
        tenant.server.instructions.as_deref(),
        Some("Use the tools.")
    );
    assert_eq!(tenant.prefix.mode, PrefixMode::Always);
    assert_eq!(tenant.prefix.separator, ".");
    assert_eq!(tenant.failure_policy, FailurePolicy::Closed);
    let files = &tenant.upstreams[0];
    assert_eq!(files.request_timeout, Duration::from_secs(5));
    assert_eq!(files.max_request_timeout, Duration::from_secs(60));
    assert_eq!(files.init_timeout, Duration::from_secs(10));
    assert_eq!(files.era, UpstreamEra::Legacy);
    assert_eq!(tenant.upstreams[1].era, UpstreamEra::Auto);
    let UpstreamTransport::Stdio(stdio) = &files.transport else {
        panic!("stdio")
    };
    assert_eq!(stdio.args, ["-y", "@mcp/files", "8080"]);
    let env: Vec<(&str, &str)> = stdio
        .env
        .iter()
        .map(|(k, v)| (k.as_str(), v.expose()))
        .collect();
    assert_eq!(env, [("A_KEY", "one"), ("B_KEY", "two")]);
    assert_eq!(stdio.inherit_env, ["RUST_LOG", "_X1"]);
    assert_eq!(stdio.cwd.as_deref(), Some(std::path::Path::new(".")));
    assert_eq!(stdio.sharing, StdioSharing::PerSession);
    assert_eq!(stdio.restart.initial_backoff, Duration::from_millis(250));
    assert_eq!(stdio.restart.max_backoff, Duration::from_secs(60));
    let UpstreamTransport::Http(http) = &tenant.upstreams[1].transport else {
        panic!("http")
    };
    assert_eq!(http.url, "https://example.com/mcp?x=1");
    let headers: Vec<(&str, &str)> = http
        .headers
        .iter()
        .map(|(k, v)| (k.as_str(), v.expose()))
        .collect();
    assert_eq!(
        headers,
        [("X-Zed", "z"), ("Authorization", "a")],
        "YAML order is kept"
    );
}

#[test]
fn env_substitution_with_defaults_and_dollars() {
    let config = ok(r#"
tenants:
  - name: acme
    server: {name: "${SERVER_NAME:-Acme}", title: "costs $$5"}
    upstreams:
      - name: remote
        http:
          url: https://${HOST}/mcp
          headers: {Authorization: "Bearer ${API_TOKEN}", X-Lit: "$${HOST}"}
"#);
    let tenant = &config.tenants[0];
    assert_eq!(tenant.server.name, "Acme");
    assert_eq!(tenant.server.title.as_deref(), Some("costs $5"));
    let UpstreamTransport::Http(http) = &tenant.upstreams[0].transport else {
        panic!("http")
    };
    assert_eq!(http.url, "https://api.example.com/mcp");
    assert_eq!(http.headers[0].1.expose(), "Bearer tok-SECRET-123");
    assert_eq!(http.headers[1].1.expose(), "${HOST}");
}

#[test]
fn keys_are_not_substituted() {
    let found = errors("${HOST}: 1\n");
    assert_eq!(
        found[0],
        "test.yaml:1:1: unknown field `${HOST}`, expected one of: listen, admin_listen, admin_token, tls, limits, sessions, telemetry, trusted_proxies, connection_workers, tenants"
    );
}

#[test]
fn aliases_share_blocks() {
    let config = ok(r#"
tenants:
  - name: acme
    upstreams:
      - name: one
        stdio: &common
          command: npx
          args: [-y, server]
          env: {TOKEN: "${API_TOKEN}"}
      - name: two
        stdio: *common
"#);
    let stdio = |i: usize| match &config.tenants[0].upstreams[i].transport {
        UpstreamTransport::Stdio(stdio) => stdio.clone(),
        UpstreamTransport::Http(_) | UpstreamTransport::Sse(_) => panic!("stdio"),
    };
    assert_eq!(stdio(1).command, "npx");
    assert_eq!(stdio(1).args, ["-y", "server"]);
    assert_eq!(stdio(1).env["TOKEN"].expose(), "tok-SECRET-123");
}

#[test]
fn errors_inside_an_alias_point_at_the_alias() {
    let found = errors(
        "tenants:\n  - name: acme\n    upstreams:\n      - {name: one, stdio: &s {command: x, bogus: 1}}\n      - {name: two, stdio: *s}\n",
    );
    // Unknown keys inside the copy are reported where they are written, once per use.
    assert_eq!(found.len(), 2, "{found:#?}");
    assert!(
        found.iter().all(|e| e.starts_with("test.yaml:4:")),
        "{found:#?}"
    );
    assert!(
        found[1].contains("tenants[0].upstreams[1].stdio: unknown field `bogus`"),
        "{found:#?}"
    );
}

fn with_upstream(upstream: &str) -> String {
    format!("tenants:\n  - name: acme\n    upstreams:\n      - {upstream}\n")
}

fn with_limits(limits: &str) -> String {
    format!("limits: {limits}\n{MINIMAL}")
}

#[test]
fn sizes_and_durations() {
    let config = ok(&with_limits("{max_body: 1024, max_upstream_message: 1GiB}"));
    assert_eq!(config.limits.max_body_bytes, 1024);
    assert_eq!(config.limits.max_upstream_message_bytes, 1 << 30);
    let config = ok(&with_limits(
        "{max_body: \"2048\", max_upstream_message: 1MB}",
    ));
    assert_eq!(config.limits.max_body_bytes, 2048);
    assert_eq!(config.limits.max_upstream_message_bytes, 1_000_000);
    assert_eq!(
        errors(&with_limits("{max_body: 1000, max_upstream_message: 4mb}")),
        vec![
            "test.yaml:1:20: limits.max_body: `max_body` must be at least 1KiB, got 1000 bytes",
            "test.yaml:1:48: limits.max_upstream_message: invalid size \"4mb\": expected a whole number of bytes, optionally with a unit (B, kB, MB, GB, KiB, MiB, GiB), e.g. 4MiB",
        ]
    );
    assert_eq!(
        errors(&with_limits("{max_body: -5, max_upstream_message: 1.5}")),
        vec![
            "test.yaml:1:20: limits.max_body: size must not be negative",
            "test.yaml:1:46: limits.max_upstream_message: size must be a whole number of bytes or use a unit, e.g. 1536KiB",
        ]
    );
    let config = ok(&format!("sessions: {{ttl: 1m30s}}\n{MINIMAL}"));
    assert_eq!(config.sessions.ttl, Duration::from_secs(90));
    assert_eq!(
        errors(&format!("sessions: {{ttl: 500ms}}\n{MINIMAL}")),
        vec!["test.yaml:1:17: sessions.ttl: `ttl` must be at least 1s, got 500ms"]
    );
    assert_eq!(
        errors(&format!(
            "sessions: {{ttl: \"90\", store: redis}}\n{MINIMAL}"
        )),
        vec![
            "test.yaml:1:17: sessions.ttl: duration needs a unit, e.g. 30s",
            "test.yaml:1:30: sessions.store: `redis` needs settings: write it as `redis: {...}`",
        ]
    );
    assert_eq!(
        errors(&with_upstream(
            "{name: a, stdio: {command: x}, timeout: 0s, max_timeout: 1x, init_timeout: {a: 1}}"
        )),
        vec![
            "test.yaml:4:49: tenants[0].upstreams[0].timeout: `timeout` must be greater than 0",
            "test.yaml:4:66: tenants[0].upstreams[0].max_timeout: invalid duration \"1x\": expected whole numbers with units (ms, s, m, h), e.g. 500ms, 30s, 1m30s",
            "test.yaml:4:84: tenants[0].upstreams[0].init_timeout: expected a duration like 30s, found a mapping",
        ]
    );
}

#[test]
fn duration_ordering() {
    assert_eq!(
        errors(&with_upstream(
            "{name: a, stdio: {command: x}, timeout: 20m}"
        )),
        vec![
            "test.yaml:4:49: tenants[0].upstreams[0].timeout: `timeout` (20m) exceeds the default `max_timeout` (10m); set `max_timeout` too"
        ]
    );
    assert_eq!(
        errors(&with_upstream(
            "{name: a, stdio: {command: x}, timeout: 2m, max_timeout: 1m}"
        )),
        vec![
            "test.yaml:4:66: tenants[0].upstreams[0].max_timeout: `max_timeout` (1m) must be at least `timeout` (2m)"
        ]
    );
    assert_eq!(
        errors(&with_upstream(
            "{name: a, stdio: {command: x, restart: {initial_backoff: 1m}}}"
        )),
        vec![
            "test.yaml:4:66: tenants[0].upstreams[0].stdio.restart.initial_backoff: `initial_backoff` (1m) exceeds the default `max_backoff` (30s); set `max_backoff` too"
        ]
    );
}

#[test]
fn splittability_rule() {
    let text = "tenants:\n  - name: acme\n    prefix: {separator: \"-\"}\n    upstreams:\n      - {name: my-files, stdio: {command: x}}\n      - {name: files, stdio: {command: x}}\n";
    assert_eq!(
        errors(text),
        vec![
            "test.yaml:5:16: tenants[0].upstreams[0].name: upstream name \"my-files\" cannot be used with separator \"-\": in a prefixed name like \"my-files-tool\" the first \"-\" starts inside the upstream name, so it could not be split back into upstream and tool; rename the upstream or change prefix.separator (separator set at line 3)"
        ]
    );
}

#[test]
fn upstream_names_must_be_scheme_safe_and_unique_ignoring_case() {
    let text = "tenants:\n  - name: acme\n    upstreams:\n      - {name: a_b, stdio: {command: x}}\n      - {name: 9lives, stdio: {command: x}}\n      - {name: Files, stdio: {command: x}}\n      - {name: files, stdio: {command: x}}\n";
    let found = errors(text);
    assert_eq!(found.len(), 3, "{found:#?}");
    assert!(
        found[0].contains("invalid upstream name \"a_b\""),
        "{found:#?}"
    );
    assert!(
        found[1].contains("invalid upstream name \"9lives\""),
        "{found:#?}"
    );
    assert!(found[2].contains("duplicate upstream name"), "{found:#?}");
}

#[test]
fn reserved_and_malformed_paths() {
    let tenant = |path: &str| {
        format!(
            "tenants:\n  - name: acme\n    path: \"{path}\"\n    upstreams: [{{name: a, stdio: {{command: x}}}}]\n"
        )
    };
    assert_eq!(
        errors(&tenant("/metrics/acme")),
        vec![
            "test.yaml:3:11: tenants[0].path: invalid tenant path \"/metrics/acme\": is reserved: paths starting with /metrics belong to the gateway itself"
        ]
    );
    for reserved in ["/healthz", "/readyz", "/.well-known/mcp", "/.well-known"] {
        assert!(
            errors(&tenant(reserved))[0].contains("is reserved"),
            "{reserved}"
        );
    }
    assert!(errors(&tenant("/"))[0].contains("must not be \"/\""));
    assert!(errors(&tenant("/a/../b"))[0].contains("'..' segments"));
    assert!(errors(&tenant("mcp"))[0].contains("must start with '/'"));
    assert!(ok(&tenant("/t/acme/metrics")).tenants[0].path == "/t/acme/metrics");
}

#[test]
fn redis_store_and_stdio_pools() {
    let config = ok(&format!(
        "sessions: {{store: {{redis: {{url: \"redis://:pw@127.0.0.1:6390/2\", prefix: gw1, timeout: 750ms}}}}}}\n{MINIMAL}"
    ));
    let StoreConfig::Redis(r) = &config.sessions.store else {
        panic!("expected the Redis store");
    };
    let RedisTarget::Single(url) = &r.target else {
        panic!("expected one primary");
    };
    assert_eq!(url.expose(), "redis://:pw@127.0.0.1:6390/2");
    assert_eq!(r.prefix, "gw1");
    assert_eq!(r.timeout, Duration::from_millis(750));
    // The password never shows in debug output.
    assert!(!format!("{r:?}").contains("pw@"), "{r:?}");

    let config = ok(&format!(
        "sessions: {{store: {{redis: {{url: \"rediss://cache.internal:6380\"}}}}}}\n{MINIMAL}"
    ));
    let StoreConfig::Redis(r) = &config.sessions.store else {
        panic!("expected the Redis store");
    };
    assert_eq!(
        (r.prefix.as_str(), r.timeout, r.events),
        ("sy", Duration::from_secs(2), EventDurability::Durable)
    );
    let config = ok(&format!(
        "sessions: {{store: {{redis: {{url: \"redis://127.0.0.1:6390\", events: fast}}}}}}\n{MINIMAL}"
    ));
    let StoreConfig::Redis(r) = &config.sessions.store else {
        panic!("expected the Redis store");
    };
    assert_eq!(r.events, EventDurability::Fast);
    assert_eq!(
        errors(&format!(
            "sessions: {{store: {{redis: {{url: \"redis://127.0.0.1:6390\", events: sync}}}}}}\n{MINIMAL}"
        )),
        vec![
            "test.yaml:1:67: sessions.store.redis.events: unknown value `sync`, expected one of: durable, fast"
        ]
    );

    let config = ok(&with_upstream(
        "{name: a, stdio: {command: x, sharing: shared, pool_size: 4}}",
    ));
    let UpstreamTransport::Stdio(s) = &config.tenants[0].upstreams[0].transport else {
        panic!("stdio expected");
    };
    assert_eq!(s.pool_size, 4);
    assert_eq!(
        errors(&with_upstream(
            "{name: a, stdio: {command: x, sharing: per-session, pool_size: 2}}"
        )),
        vec![
            "test.yaml:4:72: tenants[0].upstreams[0].stdio.pool_size: `pool_size` applies to `sharing: shared` only (per-session upstreams have one process per session)"
        ]
    );
    assert_eq!(
        errors(&with_upstream(
            "{name: a, stdio: {command: x, pool_size: 0}}"
        )),
        vec![
            "test.yaml:4:50: tenants[0].upstreams[0].stdio.pool_size: `pool_size` must be from 1 to 64, got 0"
        ]
    );
}

#[test]
fn redis_cluster_seeds_are_checked_without_showing_passwords() {
    let store = |redis: &str| format!("sessions: {{store: {{redis: {redis}}}}}\n{MINIMAL}");
    let config = ok(&store(
        "{cluster: [\"redis://:pw@10.0.0.1:7000\", \"rediss://:pw@10.0.0.2:7000/0\"], prefix: c1}",
    ));
    let StoreConfig::Redis(r) = &config.sessions.store else {
        panic!("expected the Redis store");
    };
    let RedisTarget::Cluster(seeds) = &r.target else {
        panic!("expected a cluster");
    };
    let seeds: Vec<&str> = seeds.iter().map(|s| s.expose()).collect();
    assert_eq!(
        seeds,
        ["redis://:pw@10.0.0.1:7000", "rediss://:pw@10.0.0.2:7000/0"]
    );
    assert_eq!(r.prefix, "c1");
    assert!(!format!("{r:?}").contains("pw@"), "{r:?}");

    assert_eq!(
        errors(&store("{url: \"redis://h:1\", cluster: [\"redis://h:2\"]}")),
        vec![
            "test.yaml:1:57: sessions.store.redis.cluster: `url`, `cluster` and `sentinel` exclude each other: give `url` for one Redis primary, `cluster` for the seed nodes of a Redis Cluster, or `sentinel` for the sentinels that find the primary"
        ]
    );
    assert_eq!(
        errors(&store("{prefix: x}")),
        vec![
            "test.yaml:1:19: sessions.store: missing required field `url` (one Redis primary), `cluster` (Redis Cluster seed nodes) or `sentinel` (the primary Redis Sentinel names)"
        ]
    );
    assert_eq!(
        errors(&store("{cluster: []}")),
        vec!["test.yaml:1:37: sessions.store.redis.cluster: `cluster` needs at least one seed URL"]
    );
    let bad = errors(&store(
        "{cluster: [\"redis://:secret@h:1\", \"http://:secret@h:2\", \"redis://:secret@h:3/2\"]}",
    ));
    assert_eq!(
        bad,
        vec![
            "test.yaml:1:61: sessions.store.redis.cluster[1]: the Redis URL must look like redis://[user:password@]host:port[/db] (rediss:// for TLS)",
            "test.yaml:1:83: sessions.store.redis.cluster[2]: a Redis Cluster has database 0 only: drop the /<db> from the seed URL",
        ]
    );
    assert!(!bad.concat().contains("secret"));
}

#[test]
fn redis_sentinel_store() {
    let config = ok(&format!(
        "sessions:\n  store:\n    redis:\n      sentinel:\n        master: main-db\n        nodes: [\"redis://:spw@10.0.0.1:26379\", \"rediss://s2.internal:26380\"]\n        username: app\n        password: dpw\n        tls: true\n        db: 3\n      timeout: 750ms\n{MINIMAL}"
    ));
    let StoreConfig::Redis(r) = &config.sessions.store else {
        panic!("expected the Redis store");
    };
    let RedisTarget::Sentinel(s) = &r.target else {
        panic!("expected Sentinel");
    };
    assert_eq!(s.master, "main-db");
    let nodes: Vec<&str> = s.nodes.iter().map(Secret::expose).collect();
    assert_eq!(
        nodes,
        ["redis://:spw@10.0.0.1:26379", "rediss://s2.internal:26380"]
    );
    assert_eq!(s.username.as_deref(), Some("app"));
    assert_eq!(s.password.as_ref().map(Secret::expose), Some("dpw"));
    assert_eq!(
        (s.tls, s.db, r.timeout),
        (true, 3, Duration::from_millis(750))
    );
    // Neither password shows in debug output.
    let debug = format!("{r:?}");
    assert!(!debug.contains("spw") && !debug.contains("dpw"), "{debug}");

    // Defaults: no login, no TLS, database 0.
    let config = ok(&format!(
        "sessions: {{store: {{redis: {{sentinel: {{master: m, nodes: [\"redis://127.0.0.1:26379\"]}}}}}}}}\n{MINIMAL}"
    ));
    let StoreConfig::Redis(r) = &config.sessions.store else {
        panic!("expected the Redis store");
    };
    let RedisTarget::Sentinel(s) = &r.target else {
        panic!("expected Sentinel");
    };
    assert_eq!(
        (&s.username, &s.password, s.tls, s.db),
        (&None, &None, false, 0)
    );
}

#[test]
fn redis_sentinel_mistakes_are_reported_without_secrets() {
    let store = |redis: &str| format!("sessions: {{store: {{redis: {redis}}}}}\n{MINIMAL}");
    assert_eq!(
        errors(&store(
            "{url: \"redis://:pw@h:6379\", sentinel: {master: m, nodes: [\"redis://h:26379\"]}}"
        )),
        vec![
            "test.yaml:1:65: sessions.store.redis.sentinel: `url`, `cluster` and `sentinel` exclude each other: give `url` for one Redis primary, `cluster` for the seed nodes of a Redis Cluster, or `sentinel` for the sentinels that find the primary"
        ]
    );
    assert_eq!(
        errors(&store("{prefix: p}")),
        vec![
            "test.yaml:1:19: sessions.store: missing required field `url` (one Redis primary), `cluster` (Redis Cluster seed nodes) or `sentinel` (the primary Redis Sentinel names)"
        ]
    );
    assert_eq!(
        errors(&store("{sentinel: {nodes: []}}")),
        vec![
            "test.yaml:1:38: sessions.store.redis.sentinel: missing required field `master`",
            "test.yaml:1:46: sessions.store.redis.sentinel.nodes: `nodes` must list 1 to 16 sentinels, got 0",
        ]
    );
    let found = errors(&store(
        "{sentinel: {master: \"my master\", nodes: [\"redis://:hunter2@h:26379\", \"redis://:hunter2@h:26379/\", \"redis://:hunter2@g\", \"redis://:hunter2@g:26379/1\", \"http://:hunter2@g:1\"], username: u, db: 70000}}",
    ));
    assert_eq!(
        found,
        vec![
            "test.yaml:1:47: sessions.store.redis.sentinel.master: invalid Sentinel master name \"my master\": 1 to 128 visible ASCII characters, no spaces",
            "test.yaml:1:96: sessions.store.redis.sentinel.nodes[1]: duplicate sentinel `redis://h:26379` (first defined at line 1)",
            "test.yaml:1:125: sessions.store.redis.sentinel.nodes[2]: a sentinel's URL must look like redis://[user:password@]host:port (rediss:// for TLS): the port is missing (sentinels usually listen on 26379)",
            "test.yaml:1:147: sessions.store.redis.sentinel.nodes[3]: a sentinel's URL names no database (the data nodes' database is `db`)",
            "test.yaml:1:177: sessions.store.redis.sentinel.nodes[4]: a sentinel's URL must look like redis://[user:password@]host:port (rediss:// for TLS)",
            "test.yaml:1:211: sessions.store.redis.sentinel.username: `username` needs `password` (the data nodes' ACL user logs in with both)",
            "test.yaml:1:218: sessions.store.redis.sentinel.db: `db` must be from 0 to 65535, got 70000",
        ]
    );
    assert!(found.iter().all(|e| !e.contains("hunter2")), "{found:?}");
}

#[test]
fn the_admin_token_is_checked_and_never_shown() {
    let config = ok(&format!(
        "admin_listen: 127.0.0.1:9090\nadmin_token: s3cret-token-0123456789\n{MINIMAL}"
    ));
    let token = config.admin_token.clone().unwrap();
    assert!(token.matches(b"s3cret-token-0123456789"));
    assert!(!token.matches(b"s3cret-token-012345678"));
    assert!(!token.matches(b""));
    assert!(!format!("{config:?}").contains("s3cret"), "Debug hides it");
    assert_eq!(
        errors(&format!(
            "admin_listen: 127.0.0.1:9090\nadmin_token: short-secret\n{MINIMAL}"
        )),
        vec!["test.yaml:2:14: admin_token: `admin_token` must be at least 16 characters long"]
    );
    assert_eq!(
        errors(&format!(
            "admin_listen: 127.0.0.1:9090\nadmin_token: \"with a space 0123456\"\n{MINIMAL}"
        )),
        vec![
            "test.yaml:2:14: admin_token: `admin_token` must consist of visible ASCII characters (no spaces)"
        ]
    );
    assert_eq!(
        errors(&format!("admin_token: s3cret-token-0123456789\n{MINIMAL}")),
        vec![
            "test.yaml:1:14: admin_token: `admin_token` protects the admin listener's status page: set `admin_listen` too"
        ]
    );
}

#[test]
fn admin_listener_is_optional_and_checked() {
    assert_eq!(ok(MINIMAL).admin_listen, None);
    let config = ok(&format!("admin_listen: \"0.0.0.0:9090\"\n{MINIMAL}"));
    assert_eq!(config.admin_listen, Some("0.0.0.0:9090".parse().unwrap()));
    assert_eq!(
        errors(&format!("admin_listen: localhost\n{MINIMAL}")),
        vec![
            "test.yaml:1:15: admin_listen: invalid listen address \"localhost\": expected IP:port, e.g. 127.0.0.1:8080 or [::]:8080"
        ]
    );
}
