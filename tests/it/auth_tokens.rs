//! JWS header rules on access tokens: a `crit` parameter (RFC 7515 §4.1.11) is refused, since
//! the gateway implements no JWS extension, and per tenant `auth.token_type: at+jwt` requires
//! the RFC 9068 `typ`. Tokens signed by the test (`support::jws`) with keys served from
//! 127.0.0.1 (`support::key_server`), and the real authorization server for the happy path.

use serde_json::{Value, json};

use crate::support::client::ACCEPT_BOTH;
use crate::support::config::demo_server_exe;
use crate::support::gateway::TestGateway;
use crate::support::jws::{TestKey, claims, jwks};
use crate::support::key_server::KeyServer;
use crate::support::oidc::OidcProvider;
use crate::support::peers::free_port;
use crate::support::rawhttp;

/// Tenant `lax` (any `typ`) and, with `strict`, tenant `strict` (`token_type: at+jwt`),
/// written as a config file would be.
fn gateway_config(
    issuer: &str,
    jwks_url: Option<&str>,
    strict: bool,
) -> switchyard::config::Config {
    let jwks = jwks_url
        .map(|u| format!(", jwks_url: \"{u}\""))
        .unwrap_or_default();
    let upstream = format!(
        "[{{name: demo, stdio: {{command: \"{}\", args: [--stdio]}}}}]",
        demo_server_exe().display()
    );
    let mut yaml = format!(
        "listen: 127.0.0.1:0\n\
         tenants:\n\
         \x20 - name: lax\n\
         \x20   auth: {{issuer: \"{issuer}\"{jwks}, clock_skew: 0s, required_scopes: [mcp]}}\n\
         \x20   upstreams: {upstream}\n"
    );
    if strict {
        yaml.push_str(&format!(
            "\x20 - name: strict\n\
             \x20   auth: {{issuer: \"{issuer}\"{jwks}, clock_skew: 0s, required_scopes: [mcp], token_type: at+jwt}}\n\
             \x20   upstreams: {upstream}\n"
        ));
    }
    switchyard::config::parse(&yaml, "tokens.yaml", &|_| None)
        .unwrap_or_else(|e| panic!("the config is valid:\n{e}"))
}

async fn initialize(url: &str, token: &str) -> crate::support::client::Reply {
    let body = json!({"jsonrpc": "2.0", "id": 1, "method": "initialize", "params": {
        "protocolVersion": "2025-11-25", "capabilities": {}, "clientInfo": {"name": "t", "version": "0"}}});
    let auth = format!("Bearer {token}");
    let headers = [
        ("content-type", "application/json"),
        ("accept", ACCEPT_BOTH),
        ("authorization", auth.as_str()),
    ];
    rawhttp::exchange(url, "POST", &headers, body.to_string().as_bytes()).await
}

fn assert_refused(r: &crate::support::client::Reply, reason: &str, what: &str) {
    assert_eq!(r.status, 401, "{what}: {r:?}");
    let challenge = r.header("www-authenticate").unwrap_or_default();
    assert!(
        challenge.contains("error=\"invalid_token\"")
            && challenge.contains(&format!("error_description=\"{reason}\"")),
        "{what}: {challenge}"
    );
}

#[tokio::test]
async fn critical_header_parameters_are_refused() {
    let key = TestKey::generate("k1");
    let server = KeyServer::start(jwks(&[&key])).await;
    let jwks_url = server.jwks_url();
    let gw = TestGateway::start(gateway_config(server.issuer(), Some(&jwks_url), false)).await;
    let url = gw.url("lax");
    let plain = key.token(server.issuer(), &url, json!({}));
    assert_eq!(initialize(&url, &plain).await.status, 200);
    for (what, extra) in [
        (
            "an extension",
            json!({"crit": ["urn:example:ext"], "urn:example:ext": true}),
        ),
        ("a registered name", json!({"crit": ["exp"], "exp": 1})),
        ("an empty list", json!({"crit": []})),
        ("null", json!({"crit": null})),
        ("not a list", json!({"crit": "b64", "b64": false})),
    ] {
        let token = key.token(server.issuer(), &url, extra);
        assert_refused(
            &initialize(&url, &token).await,
            "the token has critical header parameters (crit), which are not supported",
            what,
        );
    }
    gw.stop().await;
}

#[tokio::test]
async fn typ_at_jwt_is_required_where_configured() {
    let key = TestKey::generate("k1");
    let server = KeyServer::start(jwks(&[&key])).await;
    let jwks_url = server.jwks_url();
    let gw = TestGateway::start(gateway_config(server.issuer(), Some(&jwks_url), true)).await;
    let (lax, strict) = (gw.url("lax"), gw.url("strict"));
    let header = |typ: Option<&str>| {
        let mut h = json!({"alg": "ES256", "kid": "k1"});
        if let Some(t) = typ {
            h["typ"] = Value::String(t.to_owned());
        }
        h
    };
    for typ in ["at+jwt", "application/AT+JWT", "At+Jwt"] {
        for url in [&lax, &strict] {
            let token = key.sign(&header(Some(typ)), &claims(server.issuer(), url));
            let r = initialize(url, &token).await;
            assert_eq!(r.status, 200, "typ {typ} at {url}: {r:?}");
        }
    }
    for typ in [Some("JWT"), Some("application/jwt"), Some("at+jwt2"), None] {
        let token = key.sign(&header(typ), &claims(server.issuer(), &lax));
        assert_eq!(initialize(&lax, &token).await.status, 200, "lax: {typ:?}");
        let token = key.sign(&header(typ), &claims(server.issuer(), &strict));
        assert_refused(
            &initialize(&strict, &token).await,
            "the token is not a JWT access token (its typ must be at+jwt)",
            &format!("strict: {typ:?}"),
        );
    }
    gw.stop().await;
}

/// The real authorization server's access tokens carry `typ: at+jwt` and pass.
#[tokio::test]
async fn provider_access_tokens_pass_the_typ_rule() {
    let idp = OidcProvider::start(free_port(), "key-1").await;
    let gw = TestGateway::start(gateway_config(&idp.issuer, None, true)).await;
    let url = gw.url("strict");
    let token = idp.token(&url, "mcp").await;
    let r = initialize(&url, &token).await;
    assert_eq!(r.status, 200, "{r:?}");
    gw.stop().await;
    idp.stop().await;
}

/// RFC 6750 §3.1: a request that repeats the credentials is malformed (400 `invalid_request`),
/// whichever copy would have been read.
#[tokio::test]
async fn a_repeated_authorization_header_is_400_invalid_request() {
    let key = TestKey::generate("k1");
    let server = KeyServer::start(jwks(&[&key])).await;
    let jwks_url = server.jwks_url();
    let gw = TestGateway::start(gateway_config(server.issuer(), Some(&jwks_url), false)).await;
    let url = gw.url("lax");
    let token = format!("Bearer {}", key.token(server.issuer(), &url, json!({})));
    let body = json!({"jsonrpc": "2.0", "id": 1, "method": "initialize", "params": {
        "protocolVersion": "2025-11-25", "capabilities": {}, "clientInfo": {"name": "t", "version": "0"}}});
    let headers = [
        ("content-type", "application/json"),
        ("accept", ACCEPT_BOTH),
        ("authorization", token.as_str()),
        ("authorization", token.as_str()),
    ];
    let r = rawhttp::exchange(&url, "POST", &headers, body.to_string().as_bytes()).await;
    assert_eq!(r.status, 400, "{r:?}");
    let challenge = r.header("www-authenticate").unwrap_or_default();
    assert!(
        challenge.contains("error=\"invalid_request\""),
        "{challenge}"
    );
    assert_eq!(r.last()["error"]["code"], -32600);
    gw.stop().await;
}
