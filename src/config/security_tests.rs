//! Tests of the security settings through `parse`: TLS, resource, Host/Origin lists, `auth`,
//! tool policies, header files and OAuth client credentials; defaults, the full error report,
//! and secrets never shown.

#![allow(clippy::unwrap_used)]

use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicUsize, Ordering};
use std::time::Duration;

use super::*;

fn env(name: &str) -> Option<String> {
    match name {
        "KEY" => Some("key-SECRET-1".into()),
        "SEARCH_SECRET" => Some("oauth-SECRET-2".into()),
        "BAD_SECRET" => Some("bad SECRET\n/3".into()),
        _ => None,
    }
}

fn ok(text: &str) -> Config {
    match parse(text, "sec.yaml", &env) {
        Ok(config) => config,
        Err(errors) => panic!("unexpected errors:\n{errors}"),
    }
}

fn errors(text: &str) -> Vec<String> {
    match parse(text, "sec.yaml", &env) {
        Ok(_) => panic!("expected errors for:\n{text}"),
        Err(errors) => errors.errors.iter().map(ToString::to_string).collect(),
    }
}

/// A fresh directory under the system temp dir, removed (with its files) when dropped.
struct TempDir(PathBuf);

impl TempDir {
    fn new(test: &str) -> TempDir {
        static NEXT: AtomicUsize = AtomicUsize::new(0);
        let dir = std::env::temp_dir().join(format!(
            "switchyard-config-{test}-{}-{}",
            std::process::id(),
            NEXT.fetch_add(1, Ordering::Relaxed)
        ));
        std::fs::create_dir_all(&dir).unwrap();
        TempDir(dir)
    }

    /// Creates `name` with some content; returns its path as YAML-safe text.
    fn file(&self, name: &str) -> String {
        let path = self.0.join(name);
        std::fs::write(&path, "content\n").unwrap();
        path.display().to_string()
    }
}

impl Drop for TempDir {
    fn drop(&mut self) {
        let _ = std::fs::remove_dir_all(&self.0);
    }
}

const UPSTREAM: &str = "    upstreams: [{name: a, stdio: {command: x}}]\n";

/// One tenant `acme` with extra tenant-level YAML lines (indented by 4) and a stdio upstream.
fn tenant(lines: &str) -> String {
    format!("tenants:\n  - name: acme\n{lines}{UPSTREAM}")
}

/// One tenant `acme` with one HTTP upstream whose `http` mapping holds `http` (flow style).
fn http_upstream(http: &str) -> String {
    format!("tenants:\n  - name: acme\n    upstreams:\n      - name: web\n        http: {http}\n")
}

fn http_config(config: &Config) -> &HttpConfig {
    match &config.tenants[0].upstreams[0].transport {
        UpstreamTransport::Http(http) => http,
        UpstreamTransport::Stdio(_) | UpstreamTransport::Sse(_) => panic!("http"),
    }
}

#[test]
fn every_security_field_is_read() {
    let dir = TempDir::new("every-field");
    let (cert, key, token) = (dir.file("tls.crt"), dir.file("tls.key"), dir.file("token"));
    let config = ok(&format!(
        r#"
tls:
  cert: {cert}
  key: {key}
  reload_interval: 1m
tenants:
  - name: acme
    resource: https://mcp.acme.example/t/acme/mcp
    allowed_hosts: [MCP.acme.example, "127.0.0.1:8080", "[::1]:9000"]
    allowed_origins: ["https://App.acme.example/", "http://localhost:3000", "https://b.example:443"]
    auth:
      issuer: https://idp.example/realms/Acme
      jwks_url: https://idp.example/jwks
      audiences: [https://mcp.acme.example/t/acme/mcp, api]
      algorithms: [ES256, RS256, EdDSA]
      clock_skew: 5m
      required_scopes: [mcp]
      scopes_supported: [mcp, "files:write"]
    tool_policies:
      - upstream: search
        tools: ["write*", "admin_*"]
        scopes: ["files:write"]
      - upstream: "*"
        tools: [admin_reset]
        claims: {{groups: admins, level: 3}}
    upstreams:
      - name: search
        http:
          url: https://search.internal/mcp
          headers: {{X-Api-Key: "${{KEY}}"}}
          header_files: {{X-Token: {token}}}
          oauth2:
            token_url: https://idp.example/token
            client_id: switchyard
            client_secret: ${{SEARCH_SECRET}}
            scopes: ["search:read", search]
            resource: https://search.internal/mcp
"#
    ));
    let tls = config.tls.as_ref().unwrap();
    assert_eq!(tls.cert, Path::new(&cert));
    assert_eq!(tls.key, Path::new(&key));
    assert_eq!(tls.reload_interval, Duration::from_secs(60));
    let tenant = &config.tenants[0];
    assert_eq!(
        tenant.resource.as_deref(),
        Some("https://mcp.acme.example/t/acme/mcp")
    );
    assert_eq!(
        tenant.allowed_hosts,
        ["mcp.acme.example", "127.0.0.1:8080", "[::1]:9000"]
    );
    assert_eq!(
        tenant.allowed_origins,
        [
            "https://app.acme.example",
            "http://localhost:3000",
            "https://b.example"
        ]
    );
    let auth = tenant.auth.as_ref().unwrap();
    assert_eq!(auth.issuer, "https://idp.example/realms/Acme", "as written");
    assert_eq!(auth.jwks_url.as_deref(), Some("https://idp.example/jwks"));
    assert_eq!(
        auth.audiences,
        ["https://mcp.acme.example/t/acme/mcp", "api"]
    );
    assert_eq!(
        auth.algorithms,
        [
            JwtAlgorithm::ES256,
            JwtAlgorithm::RS256,
            JwtAlgorithm::EdDSA
        ]
    );
    assert_eq!(auth.clock_skew, Duration::from_secs(300));
    assert_eq!(auth.required_scopes, ["mcp"]);
    assert_eq!(auth.scopes_supported, ["mcp", "files:write"]);
    let [write, reset] = tenant.tool_policies.as_slice() else {
        panic!("two policies")
    };
    assert_eq!(write.upstream, "search");
    assert_eq!(write.tools, ["write*", "admin_*"]);
    assert_eq!(write.scopes, ["files:write"]);
    assert!(write.claims.is_empty());
    assert_eq!(reset.upstream, "*");
    assert_eq!(reset.tools, ["admin_reset"]);
    assert!(reset.scopes.is_empty());
    let claims: Vec<(&str, &str)> = reset
        .claims
        .iter()
        .map(|(k, v)| (k.as_str(), v.as_str()))
        .collect();
    assert_eq!(claims, [("groups", "admins"), ("level", "3")]);
    let http = http_config(&config);
    assert_eq!(http.headers[0].1.expose(), "key-SECRET-1");
    assert_eq!(
        http.header_files,
        [("X-Token".to_owned(), PathBuf::from(&token))]
    );
    let oauth2 = http.oauth2.as_ref().unwrap();
    assert_eq!(oauth2.token_url, "https://idp.example/token");
    assert_eq!(oauth2.client_id, "switchyard");
    assert_eq!(oauth2.client_secret.expose(), "oauth-SECRET-2");
    assert_eq!(oauth2.scopes, ["search:read", "search"]);
    assert_eq!(
        oauth2.resource.as_deref(),
        Some("https://search.internal/mcp")
    );
    let debug = format!("{config:?}");
    assert!(!debug.contains("SECRET"), "{debug}");
}

#[test]
fn security_defaults() {
    let config = ok(&tenant(""));
    assert!(config.tls.is_none());
    let tenant_config = &config.tenants[0];
    assert_eq!(tenant_config.resource, None);
    assert!(tenant_config.allowed_hosts.is_empty() && tenant_config.allowed_origins.is_empty());
    assert!(tenant_config.auth.is_none() && tenant_config.tool_policies.is_empty());

    let dir = TempDir::new("defaults");
    let (cert, key) = (dir.file("c.pem"), dir.file("k.pem"));
    let config = ok(&format!(
        "tls: {{cert: {cert}, key: {key}}}\n{}",
        tenant(
            "    auth: {issuer: \"http://127.0.0.1:8081\", required_scopes: [mcp, x]}\n    tool_policies: []\n"
        )
    ));
    assert_eq!(
        config.tls.as_ref().unwrap().reload_interval,
        Duration::from_secs(10)
    );
    let auth = config.tenants[0].auth.as_ref().unwrap();
    assert_eq!(auth.issuer, "http://127.0.0.1:8081");
    assert_eq!(auth.jwks_url, None);
    assert!(auth.audiences.is_empty());
    assert_eq!(
        auth.algorithms,
        [
            JwtAlgorithm::RS256,
            JwtAlgorithm::RS384,
            JwtAlgorithm::RS512,
            JwtAlgorithm::PS256,
            JwtAlgorithm::PS384,
            JwtAlgorithm::PS512,
            JwtAlgorithm::ES256,
            JwtAlgorithm::ES384,
            JwtAlgorithm::EdDSA
        ]
    );
    assert_eq!(auth.clock_skew, Duration::from_secs(60));
    assert_eq!(auth.required_scopes, ["mcp", "x"]);
    assert_eq!(auth.scopes_supported, ["mcp", "x"], "defaults to required");
    let config = ok(&tenant(
        "    auth: {issuer: \"https://i\", clock_skew: 0s}\n",
    ));
    let auth = config.tenants[0].auth.as_ref().unwrap();
    assert!(auth.required_scopes.is_empty() && auth.scopes_supported.is_empty());
    assert_eq!(auth.clock_skew, Duration::ZERO);

    let config = ok(&http_upstream(
        "{url: \"https://h/mcp\", oauth2: {token_url: \"https://i/token\", client_id: c, client_secret: s}}",
    ));
    let http = http_config(&config);
    assert!(http.headers.is_empty() && http.header_files.is_empty());
    let oauth2 = http.oauth2.as_ref().unwrap();
    assert!(oauth2.scopes.is_empty());
    assert_eq!(oauth2.resource, None);
}

#[test]
fn golden_security_errors_all_at_once() {
    let dir = TempDir::new("golden");
    let (cert, key_file) = (dir.file("tls.crt"), dir.file("api-key"));
    let text = format!(
        r#"tls:
  cert: {cert}
  key: switchyard-no-such-dir/tls.key
tenants:
  - name: acme
    resource: https://mcp.acme.example/mcp
    allowed_hosts: [mcp.acme.example, "mcp.acme.example:99999"]
    allowed_origins:
      - https://app.acme.example/app
      - "*"
    auth:
      issuer: idp.example/realms/acme
      algorithms: [RS256, HS256, none, RS265]
    tool_policies:
      - {{upstream: search, tools: ["write*"]}}
    upstreams:
      - name: search
        http:
          url: https://search.internal/mcp
          headers: {{X-Api-Key: "${{KEY}}", Authorization: "Bearer x"}}
          header_files: {{x-api-key: {key_file}}}
          oauth2: {{token_url: "https://idp.example/token", client_id: sy, client_secret: "${{SEARCH_SECRET}}"}}
  - name: beta
    tool_policies:
      - {{upstream: a, tools: [x], scopes: [s]}}
    upstreams: [{{name: a, stdio: {{command: x}}}}]
"#
    );
    assert_eq!(
        errors(&text),
        vec![
            "sec.yaml:3:8: tls.key: TLS key file \"switchyard-no-such-dir/tls.key\" does not exist (relative paths are resolved from the gateway's working directory)",
            "sec.yaml:6:15: tenants[0].resource: the path of resource \"https://mcp.acme.example/mcp\" is \"/mcp\", not the tenant's path \"/t/acme/mcp\" (the default path of tenant \"acme\"): the resource must be this endpoint's own URL, e.g. \"https://mcp.acme.example/t/acme/mcp\"",
            "sec.yaml:7:39: tenants[0].allowed_hosts[1]: invalid allowed host \"mcp.acme.example:99999\": the port must be a number from 1 to 65535",
            "sec.yaml:9:9: tenants[0].allowed_origins[0]: invalid allowed origin \"https://app.acme.example/app\": an origin has no path: write only scheme://host[:port]",
            "sec.yaml:10:9: tenants[0].allowed_origins[1]: invalid allowed origin \"*\": `*` is not accepted: origins must be listed one by one, e.g. https://app.example.com (a wildcard would let any web page call this endpoint)",
            "sec.yaml:12:15: tenants[0].auth.issuer: invalid issuer \"idp.example/realms/acme\": not an absolute URL: expected http:// or https:// and a host, e.g. https://idp.example.com/realms/acme",
            "sec.yaml:13:27: tenants[0].auth.algorithms[1]: invalid algorithm \"HS256\": symmetric algorithms cannot be verified with the issuer's public keys",
            "sec.yaml:13:34: tenants[0].auth.algorithms[2]: invalid algorithm \"none\": unsigned tokens are never accepted",
            "sec.yaml:13:40: tenants[0].auth.algorithms[3]: invalid algorithm \"RS265\": did you mean `RS256`? expected one of: RS256, RS384, RS512, PS256, PS384, PS512, ES256, ES384, EdDSA",
            "sec.yaml:15:9: tenants[0].tool_policies[0]: a policy must require scopes or claims: set `scopes`, `claims` or both (a policy requiring nothing restricts nothing)",
            "sec.yaml:20:42: tenants[0].upstreams[0].http.headers.Authorization: header \"Authorization\" cannot be combined with `oauth2` (line 22): the gateway sets Authorization from the token it obtains",
            "sec.yaml:21:26: tenants[0].upstreams[0].http.header_files.x-api-key: header \"x-api-key\" is set both in `headers` (line 20) and in `header_files`: keep one",
            "sec.yaml:25:7: tenants[1].tool_policies: `tool_policies` need `auth` on the tenant: without token validation there are no scopes or claims to check them against",
        ]
    );
}

#[test]
fn secrets_and_env_values_are_never_shown() {
    let dir = TempDir::new("secrets");
    let token = dir.file("token");
    let config = ok(&http_upstream(&format!(
        "{{url: \"https://h/\", header_files: {{X-T: {token}}}, oauth2: {{token_url: \"https://i/t\", client_id: c, client_secret: literal-client-SECRET}}}}"
    )));
    let debug = format!("{config:?}");
    assert!(!debug.contains("SECRET"), "{debug}");
    assert!(debug.contains("Secret(***)"), "{debug}");

    let text = r#"
tls: {cert: "${BAD_SECRET}", key: "/x/${KEY}", reload_interval: "${KEY}"}
tenants:
  - name: acme
    resource: "https://${KEY}/"
    allowed_hosts: ["${BAD_SECRET}", "${KEY}", "${KEY}"]
    allowed_origins: ["${BAD_SECRET}"]
    auth:
      issuer: "${BAD_SECRET}"
      jwks_url: "${KEY}"
      audiences: ["${KEY}", "${KEY}"]
      algorithms: ["${KEY}"]
      clock_skew: "${KEY}"
      required_scopes: ["${BAD_SECRET}"]
    tool_policies:
      - {upstream: web, tools: ["${KEY}"], claims: {g: "${KEY}"}}
    upstreams:
      - name: web
        http:
          url: https://h/
          headers: {Authorization: "${KEY}"}
          header_files: {X-A: "${BAD_SECRET}", Authorization: "${KEY}"}
          oauth2: {token_url: "${SEARCH_SECRET}", client_id: "${SEARCH_SECRET}", client_secret: "${SEARCH_SECRET}", scopes: ["${BAD_SECRET}"], resource: "${KEY}"}
"#;
    let found = errors(text);
    assert!(found.len() >= 17, "{found:#?}");
    for line in &found {
        assert!(!line.contains("SECRET"), "{line}");
    }
    assert!(
        found.contains(&"sec.yaml:5:15: tenants[0].resource: the path of resource (value from the environment) does not match the tenant's path \"/t/acme/mcp\" (the default path of tenant \"acme\"): the resource must be this endpoint's own URL".to_owned()),
        "{found:#?}"
    );
    assert!(
        found.contains(&"sec.yaml:2:13: tls.cert: TLS certificate file (value from the environment) does not exist (relative paths are resolved from the gateway's working directory)".to_owned()),
        "{found:#?}"
    );
}

#[path = "security_rules_tests.rs"]
mod rules;

#[path = "tenant_limits_tests.rs"]
mod tenant_limits;
