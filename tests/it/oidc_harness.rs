//! The OIDC test harness itself (tests/peers/oidc_provider.mjs + support::oidc): real
//! `oidc-provider` tokens carry what the gateway's auth tests rely on.

use std::time::{Duration, SystemTime, UNIX_EPOCH};

use serde_json::{Value, json};

use crate::support::oidc::{
    CLIENT_ID, OidcProvider, corrupt_signature, decode_unverified, forge_alg_none,
};
use crate::support::peers::free_port;

const RESOURCE: &str = "http://127.0.0.1:1234/t/acme/mcp";

fn now() -> i64 {
    SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .map(|d| d.as_secs() as i64)
        .unwrap_or_default()
}

fn int(v: &Value, key: &str) -> i64 {
    v[key]
        .as_i64()
        .unwrap_or_else(|| panic!("no integer {key} in {v}"))
}

#[tokio::test]
async fn oidc_tokens_are_audience_bound_jwts() {
    let op = OidcProvider::start(free_port(), "key-1").await;

    let token = op.token(RESOURCE, "mcp files:read").await;
    let (header, payload) = decode_unverified(&token);
    assert_eq!(
        header,
        json!({"alg": "RS256", "typ": "at+jwt", "kid": "key-1"})
    );
    assert_eq!(payload["iss"], json!(op.issuer));
    assert_eq!(
        payload["aud"],
        json!(RESOURCE),
        "aud is the resource, as a string"
    );
    assert_eq!(payload["scope"], json!("mcp files:read"));
    assert_eq!(payload["client_id"], json!(CLIENT_ID));
    assert_eq!(
        payload["sub"],
        json!(CLIENT_ID),
        "client_credentials: sub = client_id"
    );
    assert_eq!(payload["groups"], json!("users"));
    assert!(payload["jti"].is_string(), "{payload}");
    let (iat, exp) = (int(&payload, "iat"), int(&payload, "exp"));
    assert_eq!(exp - iat, 3600);
    assert!((iat - now()).abs() <= 5, "iat {iat} vs now {}", now());

    // "admin" yields groups=admins; scopes the resource server does not know are dropped.
    let admin = op.token(RESOURCE, "mcp admin bogus openid").await;
    let (_, payload) = decode_unverified(&admin);
    assert_eq!(payload["scope"], json!("mcp admin"));
    assert_eq!(payload["groups"], json!("admins"));

    // No scope requested: no scope claim at all.
    let (status, body) = op.token_response(RESOURCE, "").await;
    assert_eq!(status, 200, "{body}");
    let (_, payload) = decode_unverified(body["access_token"].as_str().unwrap_or_default());
    assert!(payload.get("scope").is_none(), "{payload}");

    // The JWKS publishes exactly the public signing key.
    let jwks = op.jwks().await;
    let keys = jwks["keys"].as_array().expect("keys array");
    assert_eq!(keys.len(), 1, "{jwks}");
    assert_eq!(keys[0]["kid"], json!("key-1"));
    assert_eq!(keys[0]["kty"], json!("RSA"));
    assert!(keys[0].get("d").is_none(), "private key published: {jwks}");
    let discovery = op.get_json(&op.discovery_url()).await;
    assert_eq!(discovery["issuer"], json!(op.issuer));
    assert_eq!(discovery["jwks_uri"], json!(op.jwks_uri()));
    assert_eq!(discovery["token_endpoint"], json!(op.token_endpoint()));

    op.stop().await;
}

#[tokio::test]
async fn oidc_rejects_bad_resources_and_clients() {
    let op = OidcProvider::start(free_port(), "key-1").await;
    for bad in [
        "not a url",
        "urn:example:thing",
        "http://127.0.0.1:1234/t/acme/mcp#frag",
    ] {
        let (status, body) = op.token_response(bad, "mcp").await;
        assert_eq!(status, 400, "{bad}: {body}");
        assert_eq!(body["error"], json!("invalid_target"), "{bad}: {body}");
    }
    // Two resources in one client_credentials request.
    let (status, body) = op
        .token_request(
            &[
                ("grant_type", "client_credentials"),
                ("resource", "http://a.test/one"),
                ("resource", "http://a.test/two"),
            ],
            Some((CLIENT_ID, "switchyard-test-secret")),
        )
        .await;
    assert_eq!(
        (status, &body["error"]),
        (400, &json!("invalid_target")),
        "{body}"
    );
    // Wrong secret.
    let (status, body) = op
        .token_request(
            &[("grant_type", "client_credentials"), ("resource", RESOURCE)],
            Some((CLIENT_ID, "wrong")),
        )
        .await;
    assert_eq!(
        (status, &body["error"]),
        (401, &json!("invalid_client")),
        "{body}"
    );
    // client_secret_post works too.
    let (status, body) = op
        .token_request(
            &[
                ("grant_type", "client_credentials"),
                ("resource", RESOURCE),
                ("client_id", CLIENT_ID),
                ("client_secret", "switchyard-test-secret"),
            ],
            None,
        )
        .await;
    assert_eq!(status, 200, "{body}");
    op.stop().await;
}

#[tokio::test]
async fn oidc_short_resource_tokens_live_two_seconds() {
    let op = OidcProvider::start(free_port(), "key-1").await;
    let resource = "http://127.0.0.1:1234/short/t/acme/mcp";
    let (status, body) = op.token_response(resource, "mcp").await;
    assert_eq!(status, 200, "{body}");
    assert_eq!(body["expires_in"], json!(2), "{body}");
    let (_, payload) = decode_unverified(body["access_token"].as_str().unwrap_or_default());
    assert_eq!(payload["aud"], json!(resource));
    let exp = int(&payload, "exp");
    assert_eq!(exp - int(&payload, "iat"), 2);
    tokio::time::sleep(Duration::from_millis(3100)).await;
    assert!(now() > exp, "token should be expired by now");
    op.stop().await;
}

#[tokio::test]
async fn oidc_restart_with_new_key_id_rotates_the_jwks() {
    let port = free_port();
    let op = OidcProvider::start(port, "old-key").await;
    let issuer = op.issuer.clone();
    let old_jwks = op.jwks().await;
    assert_eq!(old_jwks["keys"][0]["kid"], json!("old-key"));
    op.stop().await;

    let op = OidcProvider::start(port, "new-key").await;
    assert_eq!(op.issuer, issuer, "same issuer URL after the restart");
    let jwks = op.jwks().await;
    let kids: Vec<&Value> = jwks["keys"]
        .as_array()
        .expect("keys")
        .iter()
        .map(|k| &k["kid"])
        .collect();
    assert_eq!(kids, vec![&json!("new-key")], "{jwks}");
    assert_ne!(
        jwks["keys"][0]["n"], old_jwks["keys"][0]["n"],
        "a fresh key"
    );
    let (header, _) = decode_unverified(&op.token(RESOURCE, "mcp").await);
    assert_eq!(header["kid"], json!("new-key"));
    op.stop().await;
}

#[tokio::test]
async fn oidc_es256_and_forged_tokens() {
    let op = OidcProvider::start_with_alg(free_port(), "ec-1", "ES256").await;
    let token = op.token(RESOURCE, "mcp").await;
    let (header, payload) = decode_unverified(&token);
    assert_eq!(
        header,
        json!({"alg": "ES256", "typ": "at+jwt", "kid": "ec-1"})
    );
    let jwks = op.jwks().await;
    assert_eq!(jwks["keys"][0]["kty"], json!("EC"));
    assert_eq!(jwks["keys"][0]["crv"], json!("P-256"));

    let none = forge_alg_none(&payload);
    assert!(none.ends_with('.'), "{none}");
    let (h, p) = decode_unverified(&none);
    assert_eq!(h, json!({"alg": "none", "typ": "JWT"}));
    assert_eq!(p, payload);

    let bad = corrupt_signature(&token);
    assert_ne!(bad, token);
    assert_eq!(decode_unverified(&bad), (header, payload));
    assert_eq!(
        bad.rsplit('.').next().map(str::len),
        token.rsplit('.').next().map(str::len)
    );
    op.stop().await;
}
