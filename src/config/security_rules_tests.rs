//! Tests of each security rule through `parse`: Host and Origin entries, `resource`, `auth`,
//! tool policies, `tls`, `header_files` and `oauth2`, with their exact messages.

#![allow(clippy::unwrap_used)]

use super::super::TokenType;
use super::{TempDir, UPSTREAM, errors, http_upstream, ok, tenant};

#[test]
fn hosts_and_origins() {
    assert_eq!(
        errors(&tenant(
            "    allowed_hosts: [a.example, A.EXAMPLE, \"::1\", \"https://b.example\"]\n    allowed_origins: [\"https://x.example\", \"HTTPS://X.example:443/\", \"https://y.example?q\", app.example]\n"
        )),
        vec![
            "sec.yaml:3:32: tenants[0].allowed_hosts[1]: duplicate allowed host \"A.EXAMPLE\" (first defined at line 3)",
            "sec.yaml:3:43: tenants[0].allowed_hosts[2]: invalid allowed host \"::1\": IPv6 addresses must be written in brackets, e.g. [::1]:8080",
            "sec.yaml:3:50: tenants[0].allowed_hosts[3]: invalid allowed host \"https://b.example\": write the host without a scheme: `host` or `host:port`, e.g. mcp.example.com:8443",
            "sec.yaml:4:44: tenants[0].allowed_origins[1]: duplicate allowed origin \"HTTPS://X.example:443/\" (first defined at line 4)",
            "sec.yaml:4:70: tenants[0].allowed_origins[2]: invalid allowed origin \"https://y.example?q\": an origin has no query or fragment: write only scheme://host[:port]",
            "sec.yaml:4:93: tenants[0].allowed_origins[3]: invalid allowed origin \"app.example\": expected scheme://host[:port], e.g. https://app.example.com",
        ]
    );
}

#[test]
fn resource_rules() {
    let with_path = |resource: &str| {
        format!(
            "tenants:\n  - name: acme\n    path: /mcp\n    resource: \"{resource}\"\n{UPSTREAM}"
        )
    };
    assert_eq!(
        ok(&with_path("HTTP://Localhost:8080/mcp")).tenants[0]
            .resource
            .as_deref(),
        Some("HTTP://Localhost:8080/mcp")
    );
    let first = |resource: &str| errors(&with_path(resource)).remove(0);
    assert_eq!(
        first("https://h"),
        "sec.yaml:4:15: tenants[0].resource: the path of resource \"https://h\" is empty, not the tenant's path \"/mcp\": the resource must be this endpoint's own URL, e.g. \"https://h/mcp\""
    );
    assert_eq!(
        first("https://h/mcp/"),
        "sec.yaml:4:15: tenants[0].resource: the path of resource \"https://h/mcp/\" is \"/mcp/\", not the tenant's path \"/mcp\": the resource must be this endpoint's own URL, e.g. \"https://h/mcp\""
    );
    assert!(first("https://h/mcp?x=1").ends_with("a resource URI has no query ('?...')"));
    assert!(first("https://h/mcp#top").ends_with("the URL must not have a fragment ('#...')"));
    assert!(first("https://me@h/mcp").contains("user name or password"));
    assert!(first("/mcp").contains("not an absolute URL"));
    // An invalid tenant path is reported once; the resource is not compared with it.
    let found = errors(
        "tenants:\n  - name: acme\n    path: mcp\n    resource: \"https://h/x\"\n    upstreams: [{name: a, stdio: {command: x}}]\n",
    );
    assert_eq!(found.len(), 1, "{found:#?}");
}

#[test]
fn auth_rules() {
    let auth = |lines: &str| errors(&tenant(&format!("    auth:\n{lines}")));
    assert_eq!(
        auth(
            "      jwks_url: \"https://i/#k\"\n      algorithms: []\n      clock_skew: 6m\n      audiences: [\"\", a, a]\n"
        ),
        vec![
            "sec.yaml:4:7: tenants[0].auth: missing required field `issuer`",
            "sec.yaml:4:17: tenants[0].auth.jwks_url: invalid JWKS URL \"https://i/#k\": the URL must not have a fragment ('#...')",
            "sec.yaml:5:19: tenants[0].auth.algorithms: at least one algorithm is required (leave `algorithms` out to accept all of: RS256, RS384, RS512, PS256, PS384, PS512, ES256, ES384, EdDSA)",
            "sec.yaml:6:19: tenants[0].auth.clock_skew: `clock_skew` must be at most 5m, got 6m",
            "sec.yaml:7:19: tenants[0].auth.audiences[0]: invalid audience \"\": an audience must not be empty",
            "sec.yaml:7:26: tenants[0].auth.audiences[2]: duplicate audience \"a\" (first defined at line 7)",
        ]
    );
    assert_eq!(
        auth(
            "      issuer: \"https://i/?tenant=a\"\n      algorithms: [rs256, ES512, hs512, NONE, RS256, RS256, X1]\n      required_scopes: [\"a b\", \"q\\\"\"]\n      scopes_supported: [\"\"]\n      bogus: 1\n"
        ),
        vec![
            "sec.yaml:4:15: tenants[0].auth.issuer: invalid issuer \"https://i/?tenant=a\": an issuer identifier has no query ('?...')",
            "sec.yaml:5:20: tenants[0].auth.algorithms[0]: invalid algorithm \"rs256\": did you mean `RS256`? expected one of: RS256, RS384, RS512, PS256, PS384, PS512, ES256, ES384, EdDSA",
            "sec.yaml:5:27: tenants[0].auth.algorithms[1]: invalid algorithm \"ES512\": not supported; expected one of: RS256, RS384, RS512, PS256, PS384, PS512, ES256, ES384, EdDSA",
            "sec.yaml:5:34: tenants[0].auth.algorithms[2]: invalid algorithm \"hs512\": symmetric algorithms cannot be verified with the issuer's public keys",
            "sec.yaml:5:41: tenants[0].auth.algorithms[3]: invalid algorithm \"NONE\": unsigned tokens are never accepted",
            "sec.yaml:5:54: tenants[0].auth.algorithms[5]: duplicate algorithm \"RS256\" (first defined at line 5)",
            "sec.yaml:5:61: tenants[0].auth.algorithms[6]: invalid algorithm \"X1\": expected one of: RS256, RS384, RS512, PS256, PS384, PS512, ES256, ES384, EdDSA",
            "sec.yaml:6:25: tenants[0].auth.required_scopes[0]: invalid scope \"a b\": a scope cannot contain spaces: list each scope as its own item, e.g. [mcp, files:write]",
            "sec.yaml:6:32: tenants[0].auth.required_scopes[1]: invalid scope \"q\\\"\": a scope is printable ASCII without spaces, '\"' or '\\' (RFC 6749 §3.3)",
            "sec.yaml:7:26: tenants[0].auth.scopes_supported[0]: invalid scope \"\": a scope must not be empty",
            "sec.yaml:8:7: tenants[0].auth: unknown field `bogus`, expected one of: issuer, jwks_url, audiences, algorithms, clock_skew, required_scopes, scopes_supported, token_type",
        ]
    );
}

#[test]
fn tool_policy_rules() {
    assert_eq!(
        errors(&tenant(
            "    auth: {issuer: \"https://i\"}\n    tool_policies:\n      - {upstream: a, scopes: [a]}\n      - {upstream: a, tools: [], claims: {g: a}}\n      - {upstream: a, tools: [\"a b\", \"ok*\"], claims: {\"\": x, g: [a]}, scope: [a]}\n      - {upstream: a, tools: [x], scopes: [], claims: {}}\n"
        )),
        vec![
            "sec.yaml:6:30: tenants[0].tool_policies[1].tools: at least one tool name or pattern is required, e.g. [\"write*\"] (leave `tools` out to mean every tool of the upstream)",
            "sec.yaml:7:31: tenants[0].tool_policies[2].tools[0]: invalid tool pattern \"a b\": tool patterns are the upstream's own tool names (A-Z, a-z, 0-9, '_', '.', '-') with '*' matching any run of characters",
            "sec.yaml:7:55: tenants[0].tool_policies[2].claims[\"\"]: claim names must not be empty",
            "sec.yaml:7:65: tenants[0].tool_policies[2].claims.g: expected a string, found a list",
            "sec.yaml:7:71: tenants[0].tool_policies[2]: unknown field `scope`, did you mean `scopes`? expected one of: upstream, tools, scopes, claims",
            "sec.yaml:8:9: tenants[0].tool_policies[3]: a policy must require scopes or claims: set `scopes`, `claims` or both (a policy requiring nothing restricts nothing)",
        ]
    );
    // Omitted `tools` means every tool of the upstream.
    let config = ok(&tenant(
        "    auth: {issuer: \"https://i\"}\n    tool_policies:\n      - {upstream: a, scopes: [a]}\n",
    ));
    assert_eq!(config.tenants[0].tool_policies[0].tools, ["*"]);
}

#[test]
fn tool_policies_name_the_tool_itself() {
    // A policy without `upstream` (the public-name form of earlier versions) is refused with
    // the way to write it; one naming no upstream of the tenant would protect nothing.
    assert_eq!(
        errors(&tenant(
            "    auth: {issuer: \"https://i\"}\n    tool_policies:\n      - {tools: [\"a__write*\"], scopes: [s]}\n      - {upstream: files, scopes: [s]}\n      - {upstream: \"b*\", scopes: [s]}\n      - {upstream: \"a b\", scopes: [s]}\n"
        )),
        vec![
            "sec.yaml:5:9: tenants[0].tool_policies[0]: missing required field `upstream`: a policy names the upstream and the tools as that upstream names them (e.g. `upstream: files` with `tools: [\"write*\"]`), so prefixing or renaming never changes what it protects",
            "sec.yaml:6:20: tenants[0].tool_policies[1].upstream: \"files\" names no upstream of this tenant (its upstreams: a): the policy would protect nothing",
            "sec.yaml:7:20: tenants[0].tool_policies[2].upstream: \"b*\" names no upstream of this tenant (its upstreams: a): the policy would protect nothing",
            "sec.yaml:8:20: tenants[0].tool_policies[3].upstream: invalid upstream \"a b\": `upstream` is an upstream name (A-Z, a-z, 0-9, '-') or a pattern with '*' matching any run of characters",
        ]
    );
    // A pattern written as a public name is accepted with a warning (an upstream may name its
    // own tools that way), which `check` prints and `run` logs.
    let config = ok(&tenant(
        "    auth: {issuer: \"https://i\"}\n    tool_policies:\n      - {upstream: \"*\", tools: [\"a__write*\", read], scopes: [s]}\n",
    ));
    let warnings: Vec<String> = config.warnings.iter().map(ToString::to_string).collect();
    assert_eq!(
        warnings,
        [
            "sec.yaml:5:33: tenants[0].tool_policies[0].tools[0]: tool pattern \"a__write*\" looks like a public name: policies match the upstream's own tool names, so it matches a tool of \"a\" only if that upstream itself names it so (did you mean \"write*\"?)"
        ]
    );
}

#[test]
fn tls_rules() {
    let dir = TempDir::new("tls");
    let cert = dir.file("c.pem");
    let sub = dir.0.join("sub");
    std::fs::create_dir_all(&sub).unwrap();
    let sub = sub.display().to_string();
    assert_eq!(
        errors(&format!(
            "tls: {{key: {sub}, reload_interval: 500ms}}\n{}",
            tenant("")
        )),
        vec![
            "sec.yaml:1:6: tls: missing required field `cert`".to_owned(),
            format!("sec.yaml:1:12: tls.key: TLS key file {sub:?} is a directory, not a file"),
            format!(
                "sec.yaml:1:{}: tls.reload_interval: `reload_interval` must be at least 1s, got 500ms",
                31 + sub.len()
            ),
        ]
    );
    assert_eq!(
        errors(&format!(
            "tls: {{cert: {cert}, key: \"\", bogus: 1}}\n{}",
            tenant("")
        )),
        vec![
            format!(
                "sec.yaml:1:{}: tls.key: TLS key file must not be empty",
                20 + cert.len()
            ),
            format!(
                "sec.yaml:1:{}: tls: unknown field `bogus`, expected one of: cert, key, reload_interval",
                24 + cert.len()
            ),
        ]
    );
    assert!(ok(&format!("tls:\n{}", tenant(""))).tls.is_none());
}

#[test]
fn header_files_and_oauth2_rules() {
    let dir = TempDir::new("http");
    let token = dir.file("token");
    assert_eq!(
        errors(&http_upstream(&format!(
            "{{url: \"https://h/\", header_files: {{Host: {token}, X-A: {token}, x-a: {token}, X-B: /no/such/token}}}}"
        ))),
        vec![
            "sec.yaml:5:50: tenants[0].upstreams[0].http.header_files.Host: header \"Host\" is set by the gateway itself and cannot be configured".to_owned(),
            format!(
                "sec.yaml:5:{}: tenants[0].upstreams[0].http.header_files.x-a: duplicate header \"x-a\" (first defined at line 5; header names are case-insensitive)",
                65 + 2 * token.len()
            ),
            format!(
                "sec.yaml:5:{}: tenants[0].upstreams[0].http.header_files.X-B: header file \"/no/such/token\" does not exist (relative paths are resolved from the gateway's working directory)",
                77 + 3 * token.len()
            ),
        ]
    );
    assert_eq!(
        errors(&http_upstream(
            "{url: \"https://h/\", oauth2: {client_id: \" \", client_secret: \"\", scopes: [\"a b\"], resource: \"ftp://x\"}}"
        )),
        vec![
            "sec.yaml:5:43: tenants[0].upstreams[0].http.oauth2: missing required field `token_url`",
            "sec.yaml:5:55: tenants[0].upstreams[0].http.oauth2.client_id: `client_id` must not be empty",
            "sec.yaml:5:75: tenants[0].upstreams[0].http.oauth2.client_secret: `client_secret` must not be empty",
            "sec.yaml:5:88: tenants[0].upstreams[0].http.oauth2.scopes[0]: invalid scope \"a b\": a scope cannot contain spaces: list each scope as its own item, e.g. [mcp, files:write]",
            "sec.yaml:5:106: tenants[0].upstreams[0].http.oauth2.resource: invalid resource \"ftp://x\": the URL scheme must be http or https",
        ]
    );
    assert_eq!(
        errors(&http_upstream(
            "{url: \"https://h/\", oauth2: {token_url: \"https://i/t\", client_id: c}, header_files: {authorization: /no/file}}"
        )),
        vec![
            "sec.yaml:5:43: tenants[0].upstreams[0].http.oauth2: missing required field `client_secret`",
            "sec.yaml:5:100: tenants[0].upstreams[0].http.header_files.authorization: header \"authorization\" cannot be combined with `oauth2` (line 5): the gateway sets Authorization from the token it obtains",
            "sec.yaml:5:115: tenants[0].upstreams[0].http.header_files.authorization: header file \"/no/file\" does not exist (relative paths are resolved from the gateway's working directory)",
        ]
    );
}

#[test]
fn token_type_rules() {
    let with = |extra: &str| tenant(&format!("    auth: {{issuer: \"https://i\"{extra}}}\n"));
    let token_type = |extra: &str| {
        ok(&with(extra)).tenants[0]
            .auth
            .as_ref()
            .unwrap()
            .token_type
    };
    assert_eq!(token_type(""), TokenType::Any, "the default");
    assert_eq!(token_type(", token_type: any"), TokenType::Any);
    assert_eq!(token_type(", token_type: at+jwt"), TokenType::AccessToken);
    assert_eq!(
        errors(&with(", token_type: JWT")),
        vec![
            "sec.yaml:3:45: tenants[0].auth.token_type: invalid token type \"JWT\": expected `any` (the default: any `typ` header) or `at+jwt` (RFC 9068 JWT access tokens only)"
        ]
    );
}

/// A tenant with `auth` on a listener other hosts reach must name its audience and hosts, so
/// neither is ever derived from a client's Host header.
#[test]
fn auth_on_an_exposed_listener_names_its_audience_and_hosts() {
    const AUTH: &str = "    auth: {issuer: \"https://i\"}\n";
    const RESOURCE: &str = "    resource: https://mcp.example/t/acme/mcp\n";
    const HOSTS: &str = "    allowed_hosts: [mcp.example]\n";
    const AUDIENCES: &str = "    auth: {issuer: \"https://i\", audiences: [api://mcp]}\n";
    let on =
        |listen: &str, lines: &[&str]| format!("listen: \"{listen}\"\n{}", tenant(&lines.concat()));
    let prefix = "sec.yaml:4:11: tenants[0].auth: a tenant with `auth` on a listener that is not loopback (0.0.0.0:8080) must set";
    let audience =
        "`resource` (this endpoint's public URL, the tokens' audience) or `auth.audiences`";
    let hosts = "`allowed_hosts` (the Host values clients use)";
    assert_eq!(
        errors(&on("0.0.0.0:8080", &[AUTH])),
        vec![format!(
            "{prefix} {audience}, and {hosts}: otherwise the accepted token audience and the protected-resource metadata would follow the Host header a client sends"
        )]
    );
    assert_eq!(
        errors(&on("0.0.0.0:8080", &[HOSTS, AUTH])),
        vec![format!(
            "sec.yaml:5:11: tenants[0].auth: a tenant with `auth` on a listener that is not loopback (0.0.0.0:8080) must set {audience}: otherwise the accepted token audience would follow the Host header a client sends"
        )]
    );
    for lines in [&[RESOURCE, AUTH][..], &[AUDIENCES]] {
        let found = errors(&on("0.0.0.0:8080", lines));
        assert_eq!(found.len(), 1, "{found:#?}");
        assert!(
            found[0].contains(&format!(
                "must set {hosts}: otherwise any Host header would be accepted"
            )),
            "{found:#?}"
        );
    }
    // Named: fine anywhere.
    ok(&on("0.0.0.0:8080", &[RESOURCE, HOSTS, AUTH]));
    ok(&on("[::]:8080", &[HOSTS, AUDIENCES]));
    // Loopback listeners (the v4-mapped form included) may derive them from the checked Host.
    for listen in ["127.0.0.1:8080", "[::1]:8080", "[::ffff:127.0.0.1]:8080"] {
        ok(&on(listen, &[AUTH]));
    }
    // Tenants without `auth` are not concerned.
    ok(&on("0.0.0.0:8080", &[]));
    // `--listen` is what counts, in both directions.
    let listening_on = |text: &str, listen: &str| {
        super::super::parse_listening_on(text, "sec.yaml", &|_| None, listen.parse().unwrap())
    };
    let exposed = listening_on(&on("127.0.0.1:8080", &[AUTH]), "0.0.0.0:9000").unwrap_err();
    assert!(
        exposed.to_string().contains("not loopback (0.0.0.0:9000)"),
        "{exposed}"
    );
    let config = listening_on(&on("0.0.0.0:8080", &[AUTH]), "127.0.0.1:9000").unwrap();
    assert_eq!(config.listen, "127.0.0.1:9000".parse().unwrap());
}
