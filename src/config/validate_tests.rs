//! Tests of semantic checks through `parse`: transports, names, uniqueness, secrets never shown,
//! document shapes, and robustness against malformed input.

#![allow(clippy::unwrap_used)]

use super::super::{Config, UpstreamTransport, load, parse};

fn env(name: &str) -> Option<String> {
    match name {
        "API_TOKEN" => Some("tok-SECRET-123".into()),
        "NL_TOKEN" => Some("tok-SECRET-123\nX-Injected: 1".into()),
        _ => None,
    }
}

fn ok(text: &str) -> Config {
    match parse(text, "t.yaml", &env) {
        Ok(config) => config,
        Err(errors) => panic!("unexpected errors:\n{errors}"),
    }
}

fn errors(text: &str) -> Vec<String> {
    match parse(text, "t.yaml", &env) {
        Ok(_) => panic!("expected errors for:\n{text}"),
        Err(errors) => errors.errors.iter().map(ToString::to_string).collect(),
    }
}

/// One tenant `acme` with the given upstream list items (one per line, flow style).
fn upstreams(items: &[&str]) -> String {
    let mut text = String::from("tenants:\n  - name: acme\n    upstreams:\n");
    for item in items {
        text.push_str(&format!("      - {item}\n"));
    }
    text
}

#[test]
fn transports() {
    assert_eq!(
        errors(&upstreams(&[
            "{name: a}",
            "{name: b, stdio: {args: [x]}}",
            "{name: c, http: {}}"
        ])),
        vec![
            "t.yaml:4:9: tenants[0].upstreams[0]: missing transport: set one of `stdio` (a local command), `http` (a Streamable HTTP URL) or `sse` (the SSE URL of an HTTP+SSE server, protocol 2024-11-05)",
            "t.yaml:5:26: tenants[0].upstreams[1].stdio: missing required field `command`",
            "t.yaml:6:25: tenants[0].upstreams[2].http: missing required field `url`",
        ]
    );
    assert_eq!(
        errors(&upstreams(&["{name: a, stdio: {command: \" \"}}"])),
        vec!["t.yaml:4:36: tenants[0].upstreams[0].stdio.command: `command` must not be empty"]
    );
}

#[test]
fn http_urls_and_headers() {
    let found = errors(&upstreams(&[
        "{name: a, http: {url: \"https://user:pw@host/mcp\"}}",
        "{name: b, http: {url: \"https://host/mcp#frag\"}}",
        "{name: c, http: {url: /mcp}}",
        "{name: d, http: {url: \"https://h/\", headers: {Content-Type: x, x-key: 1, X-KEY: 2, \"bad name\": 3}}}",
    ]));
    assert_eq!(
        found,
        vec![
            "t.yaml:4:31: tenants[0].upstreams[0].http.url: the URL must not contain credentials (user:password@); send them with `headers` instead",
            "t.yaml:5:31: tenants[0].upstreams[1].http.url: the URL must not have a fragment ('#...'): it is never sent to the server",
            "t.yaml:6:31: tenants[0].upstreams[2].http.url: the URL needs a scheme: expected e.g. https://host/mcp",
            "t.yaml:7:55: tenants[0].upstreams[3].http.headers.Content-Type: header \"Content-Type\" is set by the gateway itself and cannot be configured",
            "t.yaml:7:82: tenants[0].upstreams[3].http.headers.X-KEY: duplicate header \"X-KEY\" (first defined at line 7; header names are case-insensitive)",
            "t.yaml:7:92: tenants[0].upstreams[3].http.headers[\"bad name\"]: invalid header name \"bad name\": use letters, digits and !#$%&'*+-.^_`|~ only",
        ]
    );
}

#[test]
fn sse_upstreams() {
    let config = ok(&upstreams(&[
        "{name: legacy, sse: {url: \"http://127.0.0.1:3001/sse\", headers: {X-Key: \"${API_TOKEN}\"}}}",
    ]));
    let UpstreamTransport::Sse(sse) = &config.tenants[0].upstreams[0].transport else {
        panic!("sse")
    };
    assert_eq!(sse.url, "http://127.0.0.1:3001/sse");
    assert_eq!(sse.headers[0].0, "X-Key");
    assert_eq!(sse.headers[0].1.expose(), "tok-SECRET-123");

    assert_eq!(
        errors(&upstreams(&[
            "{name: a, sse: {}}",
            "{name: b, sse: {url: \"ftp://host/sse\"}}",
            "{name: c, sse: {url: \"https://u:p@host/sse\"}}",
            "{name: d, sse: {url: /sse}}",
            "{name: e, stdio: {command: x}, sse: {url: \"http://h/sse\"}}",
            "{name: f, http: {url: \"http://h/mcp\"}, sse: {url: \"http://h/sse\"}}",
            "{name: g, sse: {uri: \"http://h/sse\"}}",
            "{name: h, sse: {url: \"http://h/sse\", headers: {Mcp-Session-Id: x}}}",
        ])),
        vec![
            "t.yaml:4:24: tenants[0].upstreams[0].sse: missing required field `url`",
            "t.yaml:5:30: tenants[0].upstreams[1].sse.url: the URL scheme must be http or https, not \"ftp\"",
            "t.yaml:6:30: tenants[0].upstreams[2].sse.url: the URL must not contain credentials (user:password@); send them with `headers` instead",
            "t.yaml:7:30: tenants[0].upstreams[3].sse.url: the URL needs a scheme: expected e.g. https://host/mcp",
            "t.yaml:8:9: tenants[0].upstreams[4]: set exactly one of `stdio`, `http` or `sse`, not `stdio` and `sse`",
            "t.yaml:9:9: tenants[0].upstreams[5]: set exactly one of `stdio`, `http` or `sse`, not `http` and `sse`",
            "t.yaml:10:24: tenants[0].upstreams[6].sse: missing required field `url`",
            "t.yaml:10:25: tenants[0].upstreams[6].sse: unknown field `uri`, did you mean `url`? expected one of: url, headers, header_files, oauth2",
            "t.yaml:11:56: tenants[0].upstreams[7].sse.headers.Mcp-Session-Id: header \"Mcp-Session-Id\" is set by the gateway itself and cannot be configured",
        ]
    );
}

#[test]
fn stdio_env_names_and_cwd() {
    let file = std::env::current_exe().unwrap();
    let found = errors(&upstreams(&[
        "{name: a, stdio: {command: x, env: {\"A=B\": 1, \"\": 2}, inherit_env: [OK_1, 1BAD, \"a-b\"]}}",
        "{name: b, stdio: {command: x, cwd: /definitely/not/here}}",
        &format!(
            "{{name: c, stdio: {{command: x, cwd: {:?}}}}}",
            file.display().to_string()
        ),
        "{name: d, stdio: {command: x, sharing: per_session}}",
    ]));
    assert_eq!(found.len(), 7, "{found:#?}");
    assert_eq!(
        found[0],
        "t.yaml:4:45: tenants[0].upstreams[0].stdio.env[\"A=B\"]: environment variable names must be non-empty and contain no '=' or NUL"
    );
    assert_eq!(
        found[1],
        "t.yaml:4:55: tenants[0].upstreams[0].stdio.env[\"\"]: environment variable names must be non-empty and contain no '=' or NUL"
    );
    assert_eq!(
        found[2],
        "t.yaml:4:83: tenants[0].upstreams[0].stdio.inherit_env[1]: invalid environment variable name \"1BAD\": use letters, digits and '_', not starting with a digit"
    );
    assert!(found[3].starts_with("t.yaml:4:89: tenants[0].upstreams[0].stdio.inherit_env[2]: invalid environment variable name \"a-b\""));
    assert_eq!(
        found[4],
        "t.yaml:5:44: tenants[0].upstreams[1].stdio.cwd: working directory \"/definitely/not/here\" does not exist (relative paths are resolved from the gateway's working directory)"
    );
    assert!(found[5].ends_with("is not a directory"), "{}", found[5]);
    assert_eq!(
        found[6],
        "t.yaml:7:48: tenants[0].upstreams[3].stdio.sharing: unknown value `per_session`, did you mean `per-session`? expected one of: shared, per-session"
    );
}

#[test]
fn names_must_be_valid_and_unique() {
    let text = r#"
tenants:
  - name: acme
    prefix: {mode: condtional, separator: "::"}
    upstreams:
      - {name: files, stdio: {command: x}}
      - {name: "bad name", stdio: {command: x}}
      - {name: files, stdio: {command: y}}
  - name: acme
    upstreams: []
  - name: Beta
    upstreams: [{stdio: {command: x}}]
  - upstreams: [{name: x, stdio: {command: x}}]
"#;
    assert_eq!(
        errors(text),
        vec![
            "t.yaml:4:20: tenants[0].prefix.mode: unknown value `condtional`, did you mean `conditional`? expected one of: always, never, conditional",
            "t.yaml:4:43: tenants[0].prefix.separator: invalid separator \"::\": the separator must be 1 to 8 characters of A-Z, a-z, 0-9, '_', '.' and '-' (characters allowed in tool names)",
            "t.yaml:7:16: tenants[0].upstreams[1].name: invalid upstream name \"bad name\": upstream names are 1 to 64 characters of A-Z, a-z, 0-9 and '-', starting with a letter (they prefix tool names and resource URI schemes)",
            "t.yaml:8:16: tenants[0].upstreams[2].name: duplicate upstream name \"files\" (first defined at line 6)",
            "t.yaml:9:11: tenants[1].name: duplicate tenant name \"acme\" (first defined at line 3)",
            "t.yaml:10:16: tenants[1].upstreams: at least one upstream is required",
            "t.yaml:11:11: tenants[2].name: invalid tenant name \"Beta\": tenant names are 1 to 63 lowercase letters, digits and '-', starting with a letter or digit",
            "t.yaml:12:17: tenants[2].upstreams[0]: missing required field `name`",
            "t.yaml:13:5: tenants[3]: missing required field `name`",
        ]
    );
}

#[test]
fn a_bad_list_item_does_not_hide_the_next_ones() {
    assert_eq!(
        errors(&upstreams(&[
            "5",
            "{name: ok, stdio: {command: x}}",
            "[x]",
            "{name: \"no!\", stdio: {command: x}}"
        ])),
        vec![
            "t.yaml:4:9: tenants[0].upstreams[0]: expected a mapping with fields name, stdio, http, sse, timeout, max_timeout, init_timeout, era; found a number",
            "t.yaml:6:9: tenants[0].upstreams[2]: expected a mapping with fields name, stdio, http, sse, timeout, max_timeout, init_timeout, era; found a list",
            "t.yaml:7:16: tenants[0].upstreams[3].name: invalid upstream name \"no!\": upstream names are 1 to 64 characters of A-Z, a-z, 0-9 and '-', starting with a letter (they prefix tool names and resource URI schemes)",
        ]
    );
}

#[test]
fn telemetry_section() {
    let base = upstreams(&["{name: u, http: {url: \"http://127.0.0.1:9/mcp\"}}"]);
    let c = ok(&base);
    assert_eq!(c.telemetry, Default::default(), "off unless configured");
    let c = ok(&format!(
        "telemetry:\n  otlp_endpoint: http://127.0.0.1:4318\n  service_name: edge\n  sample_ratio: 0.25\n{base}"
    ));
    assert_eq!(
        c.telemetry.otlp_endpoint.as_deref(),
        Some("http://127.0.0.1:4318")
    );
    assert_eq!(c.telemetry.service_name.as_deref(), Some("edge"));
    assert_eq!(c.telemetry.sample_ratio, Some(0.25));
    assert_eq!(
        errors(&format!(
            "telemetry:\n  otlp_endpoint: grpc://collector:4317\n  sample_ratio: 2\n  service_name: \" \"\n{base}"
        )),
        vec![
            "t.yaml:2:18: telemetry.otlp_endpoint: invalid collector URL \"grpc://collector:4317\": the URL scheme must be http or https, not \"grpc\"",
            "t.yaml:3:17: telemetry.sample_ratio: must be between 0 and 1 (the share of traces recorded), not 2",
            "t.yaml:4:17: telemetry.service_name: must not be empty",
        ]
    );
    assert_eq!(
        errors(&format!(
            "telemetry:\n  otlp_endpiont: http://c:4318\n{base}"
        )),
        vec![
            "t.yaml:2:3: telemetry: unknown field `otlp_endpiont`, did you mean `otlp_endpoint`? expected one of: otlp_endpoint, service_name, sample_ratio"
        ]
    );
}

#[test]
fn connection_workers() {
    let base = upstreams(&["{name: u, http: {url: \"http://127.0.0.1:9/mcp\"}}"]);
    assert_eq!(
        ok(&base).connection_workers,
        super::super::ConnectionWorkers::PerCore,
        "per core unless configured"
    );
    for (written, meant) in [
        ("shared", super::super::ConnectionWorkers::Shared),
        ("per-core", super::super::ConnectionWorkers::PerCore),
    ] {
        let c = ok(&format!("connection_workers: {written}\n{base}"));
        assert_eq!(c.connection_workers, meant, "{written}");
    }
    assert_eq!(
        errors(&format!("connection_workers: per_core\n{base}")),
        vec![
            "t.yaml:1:21: connection_workers: unknown value `per_core`, did you mean `per-core`? expected one of: per-core, shared"
        ]
    );
}

#[test]
fn session_bounds() {
    let base = upstreams(&["{name: u, http: {url: \"http://127.0.0.1:9/mcp\"}}"]);
    let c = ok(&base);
    assert_eq!(c.sessions.bounds, super::super::SessionBounds::default());
    assert_eq!(c.sessions.bounds.max_server_requests, 64);
    assert_eq!(c.sessions.bounds.max_get_streams, 16);
    let c = ok(&format!(
        "sessions:\n  max_server_requests: 8\n  server_request_timeout: 90s\n  max_get_streams: 2\n{base}"
    ));
    assert_eq!(c.sessions.bounds.max_server_requests, 8);
    assert_eq!(
        c.sessions.bounds.server_request_timeout,
        std::time::Duration::from_secs(90)
    );
    assert_eq!(c.sessions.bounds.max_get_streams, 2);
    assert_eq!(
        errors(&format!(
            "sessions:\n  max_server_requests: 0\n  server_request_timeout: 0s\n  max_get_streams: 5000\n{base}"
        )),
        vec![
            "t.yaml:2:24: sessions.max_server_requests: `max_server_requests` must be from 1 to 4096, got 0",
            "t.yaml:3:27: sessions.server_request_timeout: `server_request_timeout` must be greater than 0",
            "t.yaml:4:20: sessions.max_get_streams: `max_get_streams` must be from 1 to 1024, got 5000",
        ]
    );
}

#[test]
fn document_shapes() {
    assert_eq!(
        errors(""),
        vec!["t.yaml:1:1: the config is empty: expected a mapping with at least `tenants`"]
    );
    assert_eq!(
        errors("# nothing\n"),
        vec!["t.yaml:1:1: the config is empty: expected a mapping with at least `tenants`"]
    );
    assert_eq!(
        errors("- a\n"),
        vec![
            "t.yaml:1:1: expected a mapping with fields listen, admin_listen, admin_token, tls, limits, sessions, telemetry, trusted_proxies, connection_workers, tenants; found a list"
        ]
    );
    assert_eq!(
        errors("listen: 1.2.3.4:5\n"),
        vec!["t.yaml:1:1: missing required field `tenants`: at least one tenant is required"]
    );
    assert_eq!(
        errors("tenants: []\n"),
        vec!["t.yaml:1:10: tenants: at least one tenant is required"]
    );
    assert_eq!(
        errors("tenants: acme\n"),
        vec!["t.yaml:1:10: tenants: expected a list, found a string"]
    );
    assert_eq!(
        errors(
            "listen: localhost:80\ntenants: [{name: a, upstreams: [{name: a, stdio: {command: x}}]}]\n"
        ),
        vec![
            "t.yaml:1:9: listen: invalid listen address \"localhost:80\": expected IP:port, e.g. 127.0.0.1:8080 or [::]:8080"
        ]
    );
    assert_eq!(
        errors("tenants: [}\n"),
        vec!["t.yaml:1:11: invalid YAML: while parsing a node, did not find expected node content"]
    );
}

#[test]
fn secrets_never_appear_in_debug_or_errors() {
    let config = ok(&upstreams(&[
        "{name: a, stdio: {command: x, env: {TOKEN: \"${API_TOKEN}\", LITERAL: literal-secret-value}}}",
        "{name: b, http: {url: \"https://h/\", headers: {Authorization: \"Bearer ${API_TOKEN}\", X-Lit: literal-secret-value}}}",
    ]));
    let debug = format!("{config:?}");
    assert!(
        !debug.contains("SECRET") && !debug.contains("literal-secret"),
        "{debug}"
    );
    let UpstreamTransport::Http(http) = &config.tenants[0].upstreams[1].transport else {
        panic!("http")
    };
    assert_eq!(http.headers[0].1.expose(), "Bearer tok-SECRET-123");

    let text = r#"
listen: "${API_TOKEN}"
limits: {max_body: "${API_TOKEN}"}
tenants:
  - name: "${API_TOKEN}"
    path: "/${API_TOKEN}"
    prefix: {mode: "${API_TOKEN}", separator: "${API_TOKEN}"}
    upstreams:
      - name: "${API_TOKEN}"
        timeout: "x${API_TOKEN}"
        stdio:
          command: "${API_TOKEN}"
          inherit_env: ["${API_TOKEN}"]
          cwd: "/${API_TOKEN}"
          sharing: "${API_TOKEN}"
          env: {A: "${NL_TOKEN}", B: [literal-secret-value]}
      - name: b
        http:
          url: "https://${API_TOKEN}@h/"
          headers: {X-A: "${NL_TOKEN}", X-B: "literal-secret-value\u0001"}
"#;
    let found = errors(text);
    assert!(found.len() >= 12, "{found:#?}");
    for line in &found {
        assert!(
            !line.contains("SECRET") && !line.contains("literal-secret"),
            "{line}"
        );
    }
    assert!(
        found
            .iter()
            .any(|l| l.contains("invalid duration (value from the environment)")),
        "{found:#?}"
    );
    assert!(
        found
            .iter()
            .any(|l| l.contains("invalid listen address (value from the environment)")),
        "{found:#?}"
    );
}

#[test]
fn malformed_input_never_panics() {
    let samples = [
        "{",
        "}",
        "[",
        "]",
        ":",
        "- -",
        "? a\n: b",
        "&a",
        "*a",
        "!tag x",
        "%YAML 1.2\n---\na: 1",
        "a: 'unterminated",
        "a: \"\\x\"",
        "\t",
        "a:\n\t- b",
        "---\n...\n---",
        "a: |\n  x\n b: 1",
        "tenants: {a: 1}",
        "tenants: [[[[]]]]",
        "tenants: [{upstreams: {}}]",
        "tenants: *x",
        "? [a, b]\n: c",
        "tenants:\n  - ? [x]\n    : y",
        "listen: [1]\ntenants: [~, null, '', 0, .inf]",
        "\u{feff}tenants: []",
        "tenants: [{name: a, upstreams: [{name: a, stdio: {command: x, env: {[k]: v}}}]}]",
        "tenants: [{name: a, upstreams: [{name: a, stdio: {command: x, sharing: {per-session: 1}}}]}]",
        "sessions: {store: {memory: {x: 1}}}\ntenants: []",
        "sessions: {store: {memory: ~}}\ntenants: []",
        "a: ${",
        "a: ${}",
        "a: ${A:-",
        "tenants: [{name: \"${\"}]",
    ];
    for sample in samples {
        assert!(parse(sample, "f", &env).is_err(), "{sample:?}");
    }
    // Random mutations of a valid config and random YAML-ish noise: errors or configs, no panics.
    let valid = include_str!("validate_tests_sample.yaml");
    assert!(parse(valid, "f", &env).is_ok());
    let alphabet: Vec<char> = "-:{}[],&*!|>'\"#%@`?~ \n\tab01$.".chars().collect();
    let mut seed: u64 = 0x9e37_79b9_7f4a_7c15;
    let mut next = move |bound: usize| {
        seed ^= seed << 13;
        seed ^= seed >> 7;
        seed ^= seed << 17;
        usize::try_from(seed % bound as u64).unwrap()
    };
    for _ in 0..1500 {
        let mut chars: Vec<char> = valid.chars().collect();
        for _ in 0..1 + next(4) {
            let at = next(chars.len());
            match next(3) {
                0 => {
                    chars.remove(at);
                }
                1 => chars.insert(at, alphabet[next(alphabet.len())]),
                _ => chars[at] = alphabet[next(alphabet.len())],
            }
        }
        let text: String = chars.into_iter().collect();
        let _ = parse(&text, "f", &env);
        let noise: String = (0..next(80))
            .map(|_| alphabet[next(alphabet.len())])
            .collect();
        let _ = parse(&noise, "f", &env);
    }
}

#[test]
fn huge_inputs_are_bounded() {
    let deep = format!("tenants: {}{}", "[".repeat(5000), "]".repeat(5000));
    assert!(parse(&deep, "f", &env).is_err());
    let mut bomb = String::from("a0: &a0 [x, x, x, x, x, x, x, x, x, x]\n");
    for i in 1..12 {
        let refs = vec![format!("*a{}", i - 1); 10].join(", ");
        bomb.push_str(&format!("a{i}: &a{i} [{refs}]\n"));
    }
    let found = match parse(&bomb, "f", &env) {
        Err(errors) => errors.to_string(),
        Ok(_) => panic!("bomb accepted"),
    };
    assert!(found.contains("document too large"), "{found}");
}

#[test]
fn load_reads_files_and_sets_source() {
    let dir = std::env::temp_dir().join(format!("switchyard-config-test-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    let path = dir.join("ok.yaml");
    std::fs::write(&path, upstreams(&["{name: a, stdio: {command: x}}"])).unwrap();
    let config = load(&path).unwrap();
    assert_eq!(config.source.as_deref(), Some(path.as_path()));

    let bad = dir.join("bad.yaml");
    std::fs::write(&bad, "tenants: []\n").unwrap();
    let message = load(&bad).unwrap_err().to_string();
    assert_eq!(
        message,
        format!(
            "{}:1:10: tenants: at least one tenant is required",
            bad.display()
        )
    );

    let missing = dir.join("missing.yaml");
    let message = load(&missing).unwrap_err().to_string();
    assert!(
        message.starts_with(&format!(
            "{}: cannot read the config file: ",
            missing.display()
        )),
        "{message}"
    );
    std::fs::remove_dir_all(&dir).unwrap();
}

#[test]
fn a_tenant_path_may_not_shadow_another_tenants_2024_11_05_paths() {
    let text = r#"tenants:
  - name: a
    path: /x/mcp
    upstreams: [{name: u, stdio: {command: x}}]
  - name: b
    path: /x/mcp/sse
    upstreams: [{name: u, stdio: {command: x}}]
  - name: c
    path: /y/mcp/messages
    upstreams: [{name: u, stdio: {command: x}}]
  - name: d
    path: /y/mcp
    upstreams: [{name: u, stdio: {command: x}}]
"#;
    assert_eq!(
        errors(text),
        vec![
            "t.yaml:6:11: tenants[1].path: tenant path \"/x/mcp/sse\" is the 2024-11-05 `/sse` path of the tenant at line 3",
            "t.yaml:12:11: tenants[3].path: tenant path \"/y/mcp\" serves the 2024-11-05 transport at `<path>/messages`, which is the path of the tenant at line 9",
        ]
    );
}
