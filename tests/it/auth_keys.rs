//! The issuer's keys when the identity provider is slow, hanging, down or hostile, against a
//! key server the test controls on 127.0.0.1 (`support::key_server`) and tokens it signs
//! (`support::jws`): one fetch serves every waiter, cached keys never wait, stale keys are
//! served while they are refreshed, and a key set that cannot be loaded is a 503 with
//! `Retry-After` every time, never a 401 that would make clients throw a good token away.

use std::time::{Duration, Instant};

use serde_json::json;

use crate::support::config::{config, demo_stdio, tenant, upstream};
use crate::support::gateway::TestGateway;
use crate::support::jws::{TestKey, jwks};
use crate::support::key_server::{KeyServer, Mode};
use switchyard::config::{AuthConfig, JwtAlgorithm, TenantConfig, UpstreamTransport};

/// The gateway's bound on one refresh of the keys (discovery and key set together).
const FETCH_TIMEOUT: Duration = Duration::from_secs(10);
/// A little more than the gateway's minimum time between two refreshes.
const PAST_RATE_LIMIT: Duration = Duration::from_millis(5500);

fn protected(issuer: &str, jwks_url: Option<String>) -> TenantConfig {
    let mut t = tenant(
        "acme",
        vec![upstream("demo", UpstreamTransport::Stdio(demo_stdio(None)))],
    );
    t.auth = Some(AuthConfig {
        issuer: issuer.into(),
        jwks_url,
        audiences: vec![],
        algorithms: vec![JwtAlgorithm::ES256],
        clock_skew: Duration::ZERO,
        required_scopes: vec!["mcp".into()],
        scopes_supported: vec![],
        token_type: switchyard::config::TokenType::Any,
    });
    t
}

/// What an `initialize` with a bearer token got, and how long it took.
#[derive(Debug)]
struct Answer {
    status: u16,
    www_authenticate: Option<String>,
    retry_after: Option<String>,
    took: Duration,
}

/// A gateway whose tenant `acme` takes its keys from `server`'s JWKS URL, and its endpoint.
async fn gateway(server: &KeyServer) -> (TestGateway, String) {
    let gw = TestGateway::start(config(vec![protected(
        server.issuer(),
        Some(server.jwks_url()),
    )]))
    .await;
    let url = gw.url("acme");
    (gw, url)
}

async fn initialize(url: &str, token: &str) -> Answer {
    let body = json!({"jsonrpc": "2.0", "id": 1, "method": "initialize", "params": {
        "protocolVersion": "2025-11-25", "capabilities": {}, "clientInfo": {"name": "t", "version": "0"}}});
    let http = reqwest::Client::builder()
        .timeout(Duration::from_secs(60))
        .no_proxy()
        .build()
        .expect("client");
    let start = Instant::now();
    let resp = http
        .post(url)
        .header("content-type", "application/json")
        .header("accept", "application/json, text/event-stream")
        .header("authorization", format!("Bearer {token}"))
        .body(body.to_string())
        .send()
        .await
        .expect("the gateway answers");
    let header = |name: &str| {
        resp.headers()
            .get(name)
            .and_then(|v| v.to_str().ok())
            .map(str::to_owned)
    };
    Answer {
        status: resp.status().as_u16(),
        www_authenticate: header("www-authenticate"),
        retry_after: header("retry-after"),
        took: start.elapsed(),
    }
}

fn assert_unavailable(a: &Answer, what: &str) {
    assert_eq!(a.status, 503, "{what}: {a:?}");
    assert!(a.retry_after.is_some(), "{what}: 503 without Retry-After");
}

/// A 401 whose `WWW-Authenticate` names `reason`.
fn assert_refused_for(a: &Answer, reason: &str, what: &str) {
    assert_eq!(a.status, 401, "{what}: {a:?}");
    let challenge = a.www_authenticate.as_deref().unwrap_or_default();
    assert!(
        challenge.contains(&format!("error_description=\"{reason}\"")),
        "{what}: {challenge}"
    );
}

fn assert_unknown_key(a: &Answer, what: &str) {
    assert_refused_for(a, "the token was signed with an unknown key", what);
}

/// Sends `times` `initialize`s with `token`, one after another, and checks each answer.
async fn each_answer(url: &str, token: &str, times: usize, check: impl Fn(&Answer, &str)) {
    for n in 0..times {
        check(&initialize(url, token).await, &format!("request {n}"));
    }
}

fn assert_accepted(a: &Answer, what: &str) {
    assert_eq!(a.status, 200, "{what}: {a:?}");
}

/// Four tokens whose keys are not cached yet, all sent while the key set is being fetched.
async fn four_at_once(url: &str, tokens: &[String]) -> Vec<Answer> {
    let requests = tokens.iter().map(|t| initialize(url, t));
    futures_util::future::join_all(requests).await
}

#[tokio::test]
async fn unknown_keys_during_a_slow_key_set_share_one_fetch() {
    let (k1, k2) = (TestKey::generate("k1"), TestKey::generate("k2"));
    let server = KeyServer::start(jwks(&[&k1, &k2])).await;
    // Slower than the minimum time between refreshes: a waiter that fetched again on its own
    // would make this observable as more fetches and a later answer.
    server.keys_mode(Mode::Delay(Duration::from_secs(6)), None);
    let (gw, url) = gateway(&server).await;
    let tokens: Vec<String> = [&k1, &k2, &k1, &k2]
        .iter()
        .map(|k| k.token(server.issuer(), &url, json!({})))
        .collect();
    let answers = four_at_once(&url, &tokens).await;
    let took: Vec<u128> = answers.iter().map(|a| a.took.as_millis()).collect();
    for a in &answers {
        assert_eq!(a.status, 200, "{a:?} (all took {took:?} ms)");
        assert!(a.took < FETCH_TIMEOUT, "all took {took:?} ms");
    }
    assert_eq!(server.keys().requests(), 1, "one fetch for every waiter");
    gw.stop().await;
}

#[tokio::test]
async fn a_hanging_key_set_answers_every_waiter_with_503_within_one_timeout() {
    let k1 = TestKey::generate("k1");
    let server = KeyServer::start(jwks(&[&k1])).await;
    server.keys_mode(Mode::Hang, None);
    let (gw, url) = gateway(&server).await;
    let tokens: Vec<String> = (0..4)
        .map(|i| TestKey::generate(&format!("x{i}")).token(server.issuer(), &url, json!({})))
        .collect();
    let answers = four_at_once(&url, &tokens).await;
    let took: Vec<u128> = answers.iter().map(|a| a.took.as_millis()).collect();
    for a in &answers {
        assert_unavailable(a, &format!("all took {took:?} ms"));
        assert!(
            a.took < FETCH_TIMEOUT + Duration::from_secs(3),
            "all took {took:?} ms"
        );
    }
    assert_eq!(server.keys().requests(), 1, "one fetch for every waiter");
    gw.stop().await;
}

#[tokio::test]
async fn cached_keys_do_not_wait_for_a_hanging_refresh() {
    let (k1, k2) = (TestKey::generate("k1"), TestKey::generate("k2"));
    let server = KeyServer::start(jwks(&[&k1])).await;
    let (gw, url) = gateway(&server).await;
    let (good, unknown) = (
        k1.token(server.issuer(), &url, json!({})),
        k2.token(server.issuer(), &url, json!({})),
    );
    assert_eq!(initialize(&url, &good).await.status, 200);
    // Just loaded: a key that is not in the set is unknown, without asking again.
    assert_unknown_key(&initialize(&url, &unknown).await, "right after a load");
    assert_eq!(server.keys().requests(), 1);

    server.keys_mode(Mode::Hang, None);
    tokio::time::sleep(PAST_RATE_LIMIT).await;
    let waiting = tokio::spawn({
        let (url, unknown) = (url.clone(), unknown.clone());
        async move { initialize(&url, &unknown).await }
    });
    let refreshing =
        crate::support::eventually(Duration::from_secs(5), || server.keys().requests() == 2).await;
    assert!(refreshing, "the unknown key started a refresh");
    let cached = initialize(&url, &good).await;
    assert_eq!(cached.status, 200, "{cached:?}");
    assert!(
        !waiting.is_finished(),
        "the cached key was answered while the refresh still hangs"
    );
    let waited = waiting.await.expect("request task");
    assert_unavailable(&waited, "the refresh timed out");
    assert!(
        waited.took < FETCH_TIMEOUT + Duration::from_secs(3),
        "{waited:?}"
    );
    gw.stop().await;
}

#[tokio::test]
async fn while_the_key_set_is_down_unknown_keys_get_503_every_time_then_recover() {
    let (k1, k2) = (TestKey::generate("k1"), TestKey::generate("k2"));
    let server = KeyServer::start(jwks(&[&k1])).await;
    let (gw, url) = gateway(&server).await;
    let (good, rotated) = (
        k1.token(server.issuer(), &url, json!({})),
        k2.token(server.issuer(), &url, json!({})),
    );
    assert_eq!(initialize(&url, &good).await.status, 200);

    server.keys_mode(Mode::Fail(500), None);
    tokio::time::sleep(PAST_RATE_LIMIT).await;
    assert_unavailable(&initialize(&url, &rotated).await, "the refresh failed");
    assert_eq!(server.keys().requests(), 2);
    // Within the rate limit the failure is remembered: 503 again, without another fetch.
    for i in 0..3 {
        assert_unavailable(&initialize(&url, &rotated).await, &format!("again {i}"));
    }
    assert_eq!(
        server.keys().requests(),
        2,
        "no fetch within the rate limit"
    );
    // The keys already loaded keep working.
    assert_eq!(initialize(&url, &good).await.status, 200);
    tokio::time::sleep(PAST_RATE_LIMIT).await;
    assert_unavailable(&initialize(&url, &rotated).await, "still down");
    assert_eq!(server.keys().requests(), 3);

    // The provider is back with the new key.
    server.publish(jwks(&[&k1, &k2]));
    server.keys_mode(Mode::Serve, None);
    tokio::time::sleep(PAST_RATE_LIMIT).await;
    assert_eq!(initialize(&url, &rotated).await.status, 200, "recovered");
    assert_eq!(server.keys().requests(), 4);
    gw.stop().await;
}

/// Keys `k1` (published) and `k2` (not yet), a key server whose provider says its keys may be
/// cached for one second, and a gateway taking its keys from it, with its endpoint.
async fn keys_cached_for_a_second() -> (TestKey, TestKey, KeyServer, TestGateway, String) {
    let (k1, k2) = (TestKey::generate("k1"), TestKey::generate("k2"));
    let server = KeyServer::start(jwks(&[&k1])).await;
    server.keys_mode(Mode::Serve, Some("public, max-age=1"));
    let (gw, url) = gateway(&server).await;
    (k1, k2, server, gw, url)
}

#[tokio::test]
async fn stale_keys_are_served_while_they_are_refreshed() {
    let (k1, k2, server, gw, url) = keys_cached_for_a_second().await;
    let good = k1.token(server.issuer(), &url, json!({}));
    assert_eq!(initialize(&url, &good).await.status, 200);
    assert_eq!(server.keys().requests(), 1);

    tokio::time::sleep(PAST_RATE_LIMIT).await;
    server.publish(jwks(&[&k1, &k2]));
    server.keys_mode(Mode::Delay(Duration::from_secs(3)), Some("max-age=600"));
    let stale = initialize(&url, &good).await;
    assert_eq!(stale.status, 200, "{stale:?}");
    assert_eq!(
        server.keys().answered(),
        1,
        "the stale key was served without waiting for the refresh"
    );
    let refreshed =
        crate::support::eventually(Duration::from_secs(8), || server.keys().answered() == 2).await;
    assert!(
        refreshed,
        "stale keys start a refresh in the background ({} fetches)",
        server.keys().requests()
    );
    // The refreshed set is in use: the new key is known without another fetch.
    let rotated = k2.token(server.issuer(), &url, json!({}));
    let mut status = 0;
    for _ in 0..20 {
        status = initialize(&url, &rotated).await.status;
        if status == 200 {
            break;
        }
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    assert_eq!(status, 200);
    assert_eq!(server.keys().requests(), 2);
    gw.stop().await;
}

#[tokio::test]
async fn discovery_is_shared_by_waiters_too() {
    let k1 = TestKey::generate("k1");
    let server = KeyServer::start(jwks(&[&k1])).await;
    server.metadata_mode(Mode::Delay(Duration::from_secs(6)));
    let gw = TestGateway::start(config(vec![protected(server.issuer(), None)])).await;
    let url = gw.url("acme");
    let tokens: Vec<String> = (0..4)
        .map(|_| k1.token(server.issuer(), &url, json!({})))
        .collect();
    let answers = four_at_once(&url, &tokens).await;
    let took: Vec<u128> = answers.iter().map(|a| a.took.as_millis()).collect();
    for a in &answers {
        assert_eq!(a.status, 200, "{a:?} (all took {took:?} ms)");
    }
    assert_eq!(server.metadata().requests(), 1, "one discovery");
    assert_eq!(server.keys().requests(), 1, "one key-set fetch");
    gw.stop().await;
}

#[tokio::test]
async fn oversized_key_sets_and_metadata_are_refused() {
    let k1 = TestKey::generate("k1");
    let server = KeyServer::start(jwks(&[&k1])).await;
    server.keys_mode(Mode::Oversized(2 << 20), None);
    let (gw, url) = gateway(&server).await;
    let token = k1.token(server.issuer(), &url, json!({}));
    assert_unavailable(&initialize(&url, &token).await, "a 2 MiB key set");

    let discovered = KeyServer::start(jwks(&[&k1])).await;
    discovered.metadata_mode(Mode::Oversized(2 << 20));
    let gw2 = TestGateway::start(config(vec![protected(discovered.issuer(), None)])).await;
    let url2 = gw2.url("acme");
    let token = k1.token(discovered.issuer(), &url2, json!({}));
    assert_unavailable(&initialize(&url2, &token).await, "2 MiB of metadata");
    assert_eq!(discovered.keys().requests(), 0);
    gw.stop().await;
    gw2.stop().await;
}

/// Sends an `initialize` with `token` every 50 ms until one is not answered 200 (that answer),
/// at most 100 times.
async fn first_refusal(url: &str, token: &str) -> Option<Answer> {
    for _ in 0..100 {
        let a = initialize(url, token).await;
        if a.status != 200 {
            return Some(a);
        }
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    None
}

/// Validated tokens are remembered (`auth::verified`), and only as long as the check would pass:
/// a remembered token is refused from the second its `exp` passes, and a token with the same
/// header and claims but a signature that is not the key's is refused while its twin passes.
#[tokio::test]
async fn a_remembered_token_is_refused_once_it_expires_and_its_forged_twin_never_passes() {
    let k1 = TestKey::generate("k1");
    let server = KeyServer::start(jwks(&[&k1])).await;
    let (gw, url) = gateway(&server).await;
    let mut claims = crate::support::jws::claims(server.issuer(), &url);
    let exp = claims["iat"].as_u64().expect("iat") + 6;
    claims["exp"] = json!(exp);
    let token = k1.sign(
        &json!({"alg": "ES256", "typ": "at+jwt", "kid": "k1"}),
        &claims,
    );
    // More requests than the gateway has worker threads: each thread checks it once, then
    // recalls it.
    each_answer(&url, &token, 8, assert_accepted).await;
    let forged = crate::support::oidc::corrupt_signature(&token);
    each_answer(&url, &forged, 4, |a, what| {
        assert_refused_for(
            a,
            "the token's signature is invalid",
            &format!("forged, {what}"),
        );
    })
    .await;
    // Clock skew 0: from `exp` + 1 s on, every request is refused.
    let past = std::time::UNIX_EPOCH + Duration::from_secs(exp + 1);
    if let Ok(wait) = past.duration_since(std::time::SystemTime::now()) {
        tokio::time::sleep(wait).await;
    }
    each_answer(&url, &token, 8, |a, what| {
        assert_refused_for(a, "the token has expired", &format!("after exp, {what}"));
    })
    .await;
    gw.stop().await;
}

/// A key the issuer withdraws stops the tokens it signed once the gateway has loaded the new
/// key set, remembered or not: a remembered token counts only against the set that checked it.
#[tokio::test]
async fn a_withdrawn_key_stops_its_remembered_tokens_with_the_next_key_set() {
    let (k1, k2, server, gw, url) = keys_cached_for_a_second().await;
    let old = k1.token(server.issuer(), &url, json!({}));
    each_answer(&url, &old, 8, assert_accepted).await;
    assert_eq!(server.keys().requests(), 1);

    // k1 withdrawn: the stale set is refreshed in the background and k1's token is refused
    // as soon as the new set is in use.
    server.publish(jwks(&[&k2]));
    tokio::time::sleep(PAST_RATE_LIMIT).await;
    let refused = first_refusal(&url, &old)
        .await
        .expect("the withdrawn key's token is refused after the refresh");
    assert_unknown_key(&refused, "the withdrawn key's token");
    assert_eq!(server.keys().requests(), 2, "one refresh");
    each_answer(&url, &old, 8, assert_unknown_key).await;
    let new = k2.token(server.issuer(), &url, json!({}));
    assert_eq!(initialize(&url, &new).await.status, 200);
    gw.stop().await;
}

/// A reload that tightens a tenant's `auth` is not bypassed by tokens the previous
/// authenticator remembered: a gateway process, its tenant reloaded (SIGHUP) to require a
/// scope the token lacks, answers the same token 403 `insufficient_scope` from then on.
#[tokio::test]
async fn a_reload_that_tightens_auth_is_not_bypassed_by_remembered_tokens() {
    // No in-process gateway here to install it for the test's HTTP clients.
    switchyard::app::install_crypto_provider();
    let k1 = TestKey::generate("k1");
    let server = KeyServer::start(jwks(&[&k1])).await;
    let dir = crate::support::TempDir::new("auth-reload");
    let port = crate::support::peers::free_port();
    let exe = crate::support::config::demo_server_exe()
        .display()
        .to_string();
    let config = |scopes: &str| {
        format!(
            "listen: 127.0.0.1:{port}\ntenants:\n  - name: acme\n    auth: {{issuer: \"{}\", jwks_url: \"{}\", algorithms: [ES256], clock_skew: 0s, required_scopes: [{scopes}]}}\n    upstreams:\n      - {{name: demo, stdio: {{command: \"{exe}\", args: [--stdio]}}}}\n",
            server.issuer(),
            server.jwks_url()
        )
    };
    let path = dir.path("gateway.yaml");
    std::fs::write(&path, config("mcp")).expect("config");
    let gw =
        crate::support::process::GatewayProcess::run(&path, port, &["--reload-poll", "0"], "acme")
            .await;
    let url = gw.url("acme");
    // Scope `mcp` only.
    let token = k1.token(server.issuer(), &url, json!({}));
    each_answer(&url, &token, 8, assert_accepted).await;

    std::fs::write(&path, config("mcp, admin")).expect("config");
    gw.signal(nix::sys::signal::Signal::SIGHUP);
    let refused = first_refusal(&url, &token)
        .await
        .expect("the reloaded tenant refuses the token");
    for (n, a) in std::iter::once(refused)
        .chain(futures_util::future::join_all((0..8).map(|_| initialize(&url, &token))).await)
        .enumerate()
    {
        assert_eq!(a.status, 403, "after the reload, request {n}: {a:?}");
        let challenge = a.www_authenticate.as_deref().unwrap_or_default();
        assert!(
            challenge.contains("insufficient_scope") && challenge.contains("admin"),
            "after the reload, request {n}: {challenge}"
        );
    }
    let log = gw.stop().await;
    assert!(log.contains("SIGHUP: reloading the config"), "{log}");
}
