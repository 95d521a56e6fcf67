//! The OAuth 2.1 resource server against a real authorization server (npm `oidc-provider`
//! with resource indicators, on 127.0.0.1): accepted and refused tokens with their status and
//! `WWW-Authenticate`, RFC 9728 metadata, key rotation, sessions bound to users, per-tool
//! authorization, and the gateway's own credentials upstream (never the client's token).

use std::time::Duration;

use serde_json::{Value, json};

use crate::support::client::{ACCEPT_BOTH, RawClient, Reply};
use crate::support::config::{config, demo_stdio, http, tenant, upstream};
use crate::support::gateway::TestGateway;
use crate::support::oidc::{OidcProvider, corrupt_signature, decode_unverified, forge_alg_none};
use crate::support::peers::{HttpPeer, free_port};
use crate::support::{TempDir, read_trace};
use switchyard::config::{
    AuthConfig, ClientCredentials, JwtAlgorithm, PrefixMode, Secret, TenantConfig, ToolPolicy,
    UpstreamTransport,
};

const ALL_ALGS: [JwtAlgorithm; 9] = [
    JwtAlgorithm::RS256,
    JwtAlgorithm::RS384,
    JwtAlgorithm::RS512,
    JwtAlgorithm::PS256,
    JwtAlgorithm::PS384,
    JwtAlgorithm::PS512,
    JwtAlgorithm::ES256,
    JwtAlgorithm::ES384,
    JwtAlgorithm::EdDSA,
];

fn auth(issuer: &str) -> AuthConfig {
    AuthConfig {
        issuer: issuer.into(),
        jwks_url: None,
        audiences: vec![],
        algorithms: ALL_ALGS.to_vec(),
        clock_skew: Duration::ZERO,
        required_scopes: vec!["mcp".into()],
        scopes_supported: vec!["mcp".into(), "files:write".into(), "admin".into()],
        token_type: switchyard::config::TokenType::Any,
    }
}

fn protected(name: &str, issuer: &str) -> TenantConfig {
    let mut t = tenant(
        name,
        vec![upstream("demo", UpstreamTransport::Stdio(demo_stdio(None)))],
    );
    t.prefix.mode = PrefixMode::Always;
    t.auth = Some(auth(issuer));
    t.tool_policies = vec![
        ToolPolicy {
            upstream: "demo".into(),
            tools: vec!["sleep".into()],
            scopes: vec!["files:write".into()],
            claims: Default::default(),
        },
        ToolPolicy {
            upstream: "demo".into(),
            tools: vec!["pid".into(), "crash".into()],
            scopes: vec![],
            claims: [("groups".to_string(), "admins".to_string())].into(),
        },
    ];
    t
}

fn client(gw: &TestGateway, tenant: &str, token: &str) -> RawClient {
    let mut c = RawClient::new(gw.url(tenant));
    c.bearer = Some(token.to_owned());
    c
}

fn tools(r: &Reply) -> Vec<String> {
    r.last()["result"]["tools"]
        .as_array()
        .map(|a| {
            a.iter()
                .filter_map(|t| t["name"].as_str().map(str::to_owned))
                .collect()
        })
        .unwrap_or_else(|| panic!("no tools: {r:?}"))
}

fn challenge(r: &Reply) -> &str {
    r.header("www-authenticate")
        .unwrap_or_else(|| panic!("no WWW-Authenticate: {r:?}"))
}

/// POST an initialize with exactly these extra headers.
async fn initialize_with(url: &str, extra: &[(&str, &str)]) -> Reply {
    let body = json!({"jsonrpc": "2.0", "id": 1, "method": "initialize", "params": {
        "protocolVersion": "2025-11-25", "capabilities": {}, "clientInfo": {"name": "t", "version": "0"}}});
    let mut headers = vec![
        ("content-type", "application/json"),
        ("accept", ACCEPT_BOTH),
    ];
    headers.extend_from_slice(extra);
    crate::support::rawhttp::exchange(url, "POST", &headers, body.to_string().as_bytes()).await
}

#[tokio::test]
async fn tokens_are_validated_with_the_right_status_and_challenge() {
    let idp = OidcProvider::start(free_port(), "key-1").await;
    let mut short = protected("short", &idp.issuer);
    short.path = "/t/short/mcp".into();
    let gw = TestGateway::start(config(vec![
        protected("acme", &idp.issuer),
        protected("other", &idp.issuer),
        short,
    ]))
    .await;
    let url = gw.url("acme");
    let metadata = format!(
        "http://{}/.well-known/oauth-protected-resource/t/acme/mcp",
        gw.addr
    );

    // RFC 9728 metadata names the resource and its authorization server.
    let meta: Value = reqwest::get(&metadata)
        .await
        .expect("metadata")
        .json_value()
        .await;
    assert_eq!(meta["resource"], url);
    assert_eq!(meta["authorization_servers"], json!([idp.issuer]));
    assert_eq!(
        meta["scopes_supported"],
        json!(["mcp", "files:write", "admin"])
    );
    assert_eq!(meta["bearer_methods_supported"], json!(["header"]));

    // A token for this tenant passes.
    let good = idp.token(&url, "mcp").await;
    let mut c = client(&gw, "acme", &good);
    c.initialize().await;
    assert_eq!(
        tools(&c.request("tools/list", json!({})).await)[0],
        "demo__echo"
    );

    // No token: 401 pointing at the metadata, naming the required scope.
    let r = initialize_with(&url, &[]).await;
    assert_eq!(r.status, 401, "{r:?}");
    assert_eq!(
        challenge(&r),
        format!("Bearer resource_metadata=\"{metadata}\", scope=\"mcp\"")
    );
    assert_eq!(r.last()["id"], Value::Null);

    // Refused tokens: 401 invalid_token with a reason.
    let other_tenant = idp.token(&gw.url("other"), "mcp").await;
    let (_, payload) = decode_unverified(&good);
    let cases = [
        (
            "another tenant's audience",
            other_tenant,
            "the token is for another audience",
        ),
        (
            "a bad signature",
            corrupt_signature(&good),
            "the token's signature is invalid",
        ),
        (
            "alg none",
            forge_alg_none(&payload),
            "the token is not a signed JWT",
        ),
        (
            "garbage",
            "not.a.jwt".to_owned(),
            "the token is not a signed JWT",
        ),
    ];
    for (what, token, reason) in cases {
        let r = initialize_with(&url, &[("authorization", &format!("Bearer {token}"))]).await;
        assert_eq!(r.status, 401, "{what}: {r:?}");
        let ch = challenge(&r);
        assert!(ch.contains("error=\"invalid_token\""), "{what}: {ch}");
        assert!(
            ch.contains(&format!("error_description=\"{reason}\"")),
            "{what}: {ch}"
        );
        assert!(
            ch.contains(&format!("resource_metadata=\"{metadata}\"")),
            "{what}: {ch}"
        );
    }

    // A valid token without the required scope: 403 insufficient_scope.
    let r = initialize_with(
        &url,
        &[(
            "authorization",
            &format!("Bearer {}", idp.token(&url, "files:write").await),
        )],
    )
    .await;
    assert_eq!(r.status, 403, "{r:?}");
    assert!(challenge(&r).starts_with("Bearer error=\"insufficient_scope\", scope=\"mcp\""));

    // Tokens in the query string are refused outright.
    let r = initialize_with(&format!("{url}?access_token={good}"), &[]).await;
    assert_eq!(r.status, 400, "{r:?}");
    assert!(challenge(&r).contains("error=\"invalid_request\""));

    // An expired token (the provider issues 2s tokens for /short/ resources; skew is 0).
    let short_url = gw.url("short");
    let expiring = idp.token(&short_url, "mcp").await;
    let r = initialize_with(
        &short_url,
        &[("authorization", &format!("Bearer {expiring}"))],
    )
    .await;
    assert_eq!(r.status, 200, "valid before it expires: {r:?}");
    tokio::time::sleep(Duration::from_millis(3100)).await;
    let r = initialize_with(
        &short_url,
        &[("authorization", &format!("Bearer {expiring}"))],
    )
    .await;
    assert_eq!(r.status, 401);
    assert!(challenge(&r).contains("error_description=\"the token has expired\""));

    // Every request is checked, not just initialize: a session does not stand in for a token.
    let mut no_token = RawClient::new(gw.url("acme"));
    no_token.session = c.session.clone();
    let r = no_token.request("tools/list", json!({})).await;
    assert_eq!(r.status, 401);

    gw.stop().await;
    idp.stop().await;
}

#[tokio::test]
async fn key_rotation_at_the_provider_is_picked_up() {
    let port = free_port();
    let idp = OidcProvider::start(port, "key-A").await;
    let gw = TestGateway::start(config(vec![protected("acme", &idp.issuer)])).await;
    let url = gw.url("acme");
    let first = idp.token(&url, "mcp").await;
    let r = initialize_with(&url, &[("authorization", &format!("Bearer {first}"))]).await;
    assert_eq!(r.status, 200);

    // Same issuer, new signing key.
    idp.stop().await;
    let idp = OidcProvider::start(port, "key-B").await;
    let rotated = idp.token(&url, "mcp").await;
    assert_eq!(decode_unverified(&rotated).0["kid"], "key-B");
    // The unknown kid makes the gateway refetch the keys (at most once per few seconds).
    let mut status = 0;
    for _ in 0..40 {
        let r = initialize_with(&url, &[("authorization", &format!("Bearer {rotated}"))]).await;
        status = r.status;
        if status == 200 {
            break;
        }
        tokio::time::sleep(Duration::from_millis(250)).await;
    }
    assert_eq!(status, 200, "the rotated key was picked up within 10s");
    gw.stop().await;
    idp.stop().await;
}

#[tokio::test]
async fn sessions_belong_to_their_user() {
    let idp = OidcProvider::start(free_port(), "k").await;
    let gw = TestGateway::start(config(vec![protected("acme", &idp.issuer)])).await;
    let url = gw.url("acme");
    let alice = idp.token(&url, "mcp").await;
    let mallory = idp.token_for_other_client(&url, "mcp").await;
    let mut a = client(&gw, "acme", &alice);
    a.initialize().await;
    let r = a.request("ping", json!({})).await;
    assert_eq!(r.status, 200);
    // Mallory presents Alice's session id with her own valid token: unknown session.
    let mut m = client(&gw, "acme", &mallory);
    m.session = a.session.clone();
    let r = m.request("ping", json!({})).await;
    assert_eq!(r.status, 404, "{r:?}");
    assert_eq!(r.last()["error"]["message"], "Session not found");
    let r = m.delete().await;
    assert_eq!(r.status, 404);
    // Alice's session is untouched.
    assert_eq!(a.request("ping", json!({})).await.status, 200);
    gw.stop().await;
    idp.stop().await;
}

#[tokio::test]
async fn tools_are_filtered_and_refused_by_policy() {
    let idp = OidcProvider::start(free_port(), "k").await;
    let gw = TestGateway::start(config(vec![protected("acme", &idp.issuer)])).await;
    let url = gw.url("acme");

    let mut reader = client(&gw, "acme", &idp.token(&url, "mcp").await);
    reader.initialize().await;
    let listed = tools(&reader.request("tools/list", json!({})).await);
    assert_eq!(listed, ["demo__echo", "demo__add", "demo__stderr"]);
    // Missing scope: 403 with a step-up challenge naming it.
    let r = reader.call_tool("demo__sleep", json!({"ms": 1})).await;
    assert_eq!(r.status, 403, "{r:?}");
    assert!(
        challenge(&r).starts_with("Bearer error=\"insufficient_scope\", scope=\"files:write\"")
    );
    // Missing claim: as if the tool did not exist.
    let r = reader.call_tool("demo__pid", json!({})).await;
    assert_eq!(r.status, 200);
    assert_eq!(r.last()["error"]["code"], -32602);

    let mut writer = client(&gw, "acme", &idp.token(&url, "mcp files:write").await);
    writer.initialize().await;
    let listed = tools(&writer.request("tools/list", json!({})).await);
    assert!(
        listed.contains(&"demo__sleep".to_string()) && !listed.contains(&"demo__pid".to_string())
    );
    let r = writer.call_tool("demo__sleep", json!({"ms": 1})).await;
    assert_eq!(r.last()["result"]["content"][0]["text"], "slept 1ms");

    // The provider gives tokens with the admin scope the claim groups=admins.
    let mut admin = client(&gw, "acme", &idp.token(&url, "mcp admin").await);
    admin.initialize().await;
    let listed = tools(&admin.request("tools/list", json!({})).await);
    assert!(listed.contains(&"demo__pid".to_string()), "{listed:?}");
    let r = admin.call_tool("demo__pid", json!({})).await;
    assert!(r.last()["result"].is_object());
    gw.stop().await;
    idp.stop().await;
}

/// The upstream sees the gateway's own credentials (a static API key and a client-credentials
/// token minted for the upstream), never the client's token.
#[tokio::test]
async fn upstreams_get_the_gateway_credentials_never_the_clients() {
    let idp = OidcProvider::start(free_port(), "k").await;
    let dir = TempDir::new("creds");
    let trace = dir.path("trace.jsonl");
    let trace_arg = trace.display().to_string();
    let peer = HttpPeer::demo(free_port(), &["--trace", &trace_arg]).await;
    let mut up = upstream("remote", http(&peer.url()));
    if let UpstreamTransport::Http(h) = &mut up.transport {
        h.headers = vec![("X-Api-Key".into(), Secret::new("gateway-key-123"))];
        h.oauth2 = Some(ClientCredentials {
            token_url: idp.token_endpoint(),
            client_id: crate::support::oidc::CLIENT_ID.into(),
            client_secret: Secret::new(crate::support::oidc::CLIENT_SECRET),
            scopes: vec!["files:read".into()],
            // The provider issues 2s tokens for /short/ resources: renewal is observable.
            resource: Some(format!("{}/short/", peer.url())),
        });
    }
    let mut t = tenant("acme", vec![up]);
    t.auth = Some(auth(&idp.issuer));
    let gw = TestGateway::start(config(vec![t])).await;
    let url = gw.url("acme");
    let client_token = idp.token(&url, "mcp").await;
    let mut c = client(&gw, "acme", &client_token);
    c.initialize().await;
    let r = c.call_tool("echo", json!({"message": "hi"})).await;
    assert_eq!(
        r.last()["result"]["content"][0]["text"],
        "hi",
        "{:?}",
        r.last()
    );
    tokio::time::sleep(Duration::from_millis(2500)).await;
    let r = c.call_tool("echo", json!({"message": "later"})).await;
    assert_eq!(
        r.last()["result"]["content"][0]["text"],
        "later",
        "{:?}",
        r.last()
    );

    let seen: Vec<Value> = read_trace(&trace)
        .into_iter()
        .filter_map(|m| m.get("http_headers").cloned())
        .collect();
    assert!(
        seen.len() >= 4,
        "initialize, initialized, two calls: {seen:?}"
    );
    let mut tokens = Vec::new();
    for headers in &seen {
        let text = headers.to_string();
        assert!(
            !text.contains(&client_token),
            "the client's token reached the upstream"
        );
        assert_eq!(headers["x-api-key"], "gateway-key-123");
        let auth = headers["authorization"]
            .as_str()
            .expect("the gateway's own token");
        let (_, claims) = decode_unverified(auth.trim_start_matches("Bearer "));
        assert_eq!(
            claims["aud"],
            format!("{}/short/", peer.url()),
            "minted for the upstream"
        );
        assert_eq!(claims["scope"], "files:read");
        tokens.push(auth.to_owned());
    }
    // Cached while fresh (the first three requests share it), renewed before it expires.
    assert_eq!(tokens[0], tokens[1]);
    assert_eq!(tokens[1], tokens[2]);
    assert_ne!(
        tokens[2],
        tokens[tokens.len() - 1],
        "renewed after its 2s lifetime"
    );
    gw.stop().await;
    peer.kill().await;
    idp.stop().await;
}

/// `Value` from a reqwest response (reqwest's json feature is off).
trait JsonValue {
    async fn json_value(self) -> Value;
}

impl JsonValue for reqwest::Response {
    async fn json_value(self) -> Value {
        let bytes = self.bytes().await.expect("body");
        serde_json::from_slice(&bytes).expect("JSON body")
    }
}

/// Tokens and secrets never reach the logs, even at debug level and on failures: the gateway
/// runs as a process, is exercised with good and bad tokens, and its whole log is searched.
#[tokio::test]
async fn no_token_or_secret_reaches_the_logs() {
    use std::process::Stdio;
    use tokio::io::AsyncReadExt;

    let idp = OidcProvider::start(free_port(), "k").await;
    let peer = HttpPeer::demo(free_port(), &[]).await;
    let dir = TempDir::new("logs");
    let port = free_port();
    let config_path = dir.path("gw.yaml");
    std::fs::write(
        &config_path,
        format!(
            "listen: 127.0.0.1:{port}\n\
             tenants:\n\
             \x20 - name: acme\n\
             \x20   auth: {{issuer: \"{issuer}\", clock_skew: 0s, required_scopes: [mcp]}}\n\
             \x20   upstreams:\n\
             \x20     - name: remote\n\
             \x20       http:\n\
             \x20         url: {upstream}\n\
             \x20         headers: {{X-Api-Key: \"${{API_KEY}}\"}}\n\
             \x20         oauth2: {{token_url: \"{token_url}\", client_id: switchyard-test, client_secret: \"${{CLIENT_SECRET}}\"}}\n",
            issuer = idp.issuer,
            upstream = peer.url(),
            token_url = idp.token_endpoint(),
        ),
    )
    .expect("config");
    let mut gateway = tokio::process::Command::new(crate::support::config::gateway_exe())
        .arg("run")
        .arg("--config")
        .arg(&config_path)
        .env("RUST_LOG", "debug")
        .env("API_KEY", "super-secret-api-key-7f3a")
        .env("CLIENT_SECRET", crate::support::oidc::CLIENT_SECRET)
        .stdout(Stdio::null())
        .stderr(Stdio::piped())
        .kill_on_drop(true)
        .spawn()
        .expect("gateway starts");
    let up = crate::support::eventually(Duration::from_secs(20), || {
        std::net::TcpStream::connect(("127.0.0.1", port)).is_ok()
    })
    .await;
    assert!(up);
    let url = format!("http://127.0.0.1:{port}/t/acme/mcp");
    let token = idp.token(&url, "mcp").await;
    let mut c = RawClient::new(&url);
    c.bearer = Some(token.clone());
    c.initialize().await;
    let r = c.call_tool("echo", json!({"message": "x"})).await;
    assert!(r.last()["result"].is_object(), "{:?}", r.last());
    for bad in [
        corrupt_signature(&token),
        idp.token(&format!("http://127.0.0.1:{port}/elsewhere"), "mcp")
            .await,
    ] {
        let r = initialize_with(&url, &[("authorization", &format!("Bearer {bad}"))]).await;
        assert_eq!(r.status, 401);
    }
    let r = initialize_with(&format!("{url}?access_token={token}"), &[]).await;
    assert_eq!(r.status, 400);

    let pid = nix::unistd::Pid::from_raw(i32::try_from(gateway.id().expect("pid")).expect("pid"));
    nix::sys::signal::kill(pid, nix::sys::signal::Signal::SIGTERM).expect("SIGTERM");
    let _ = tokio::time::timeout(Duration::from_secs(20), gateway.wait()).await;
    let mut logs = String::new();
    if let Some(mut err) = gateway.stderr.take() {
        let _ = err.read_to_string(&mut logs).await;
    }
    assert!(
        logs.contains("session created"),
        "debug logs were captured:\n{logs}"
    );
    for secret in [
        "super-secret-api-key-7f3a",
        crate::support::oidc::CLIENT_SECRET,
        &token,
        "eyJ",
    ] {
        let line = logs.lines().find(|l| l.contains(secret));
        assert!(line.is_none(), "a secret appears in the logs: {line:?}");
    }
    peer.kill().await;
    idp.stop().await;
}
