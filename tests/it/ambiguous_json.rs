//! Parser differentials: messages with duplicate member names, from clients and from upstreams,
//! against upstreams that keep the last member (Python's `json`, Node's `JSON.parse`) while the
//! gateway reads the first. Each test shows what such an upstream would have executed; the
//! gateway refuses the message instead. And tool policies that hold when names change.

use std::time::{Duration, Instant};

use serde_json::{Value, json};

use crate::support::client::{RawClient, Reply, tool_names};
use crate::support::config::{config, tenant, upstream};
use crate::support::gateway::TestGateway;
use crate::support::oidc::OidcProvider;
use crate::support::peers::{everything_stdio, free_port, python, repo};
use switchyard::config::{
    AuthConfig, JwtAlgorithm, PrefixMode, TenantConfig, ToolPolicy, UpstreamConfig,
    UpstreamTransport,
};

/// tests/peers/lastwins_server.py: a stdio upstream that parses with Python's `json`.
fn lastwins(name: &str, args: &[&str]) -> UpstreamConfig {
    crate::support::peers::python_peer(name, "lastwins_server.py", args)
}

async fn session(gw: &TestGateway, tenant: &str) -> RawClient {
    let mut c = RawClient::new(gw.url(tenant));
    c.initialize().await;
    c
}

/// Asserts the reply is the refusal of an ambiguous message naming `path`, with the request's id.
fn assert_refused(r: &Reply, path: &str, id: Value) {
    assert_eq!(r.status, 400, "{r:?}");
    assert_eq!(r.error_code(), Some(-32600), "{r:?}");
    let message = r.last()["error"]["message"].as_str().unwrap_or_default();
    assert!(
        message.contains(&format!("duplicate member name `{path}`")),
        "{message}"
    );
    assert_eq!(r.last()["id"], id, "{r:?}");
}

fn texts(r: &Reply) -> String {
    crate::support::client::text(r.last())
}

#[tokio::test]
async fn duplicate_names_uris_refs_and_cursors_are_refused() {
    let gw = TestGateway::start(config(vec![tenant(
        "lw",
        vec![lastwins("a", &[]), lastwins("b", &[])],
    )]))
    .await;
    let c = session(&gw, "lw").await;

    // Unambiguous messages work, and show what the upstream reads.
    let r = c.call_tool("a__echo", json!({})).await;
    assert_eq!(texts(&r), "called echo", "{r:?}");

    // `name`: checked and routed by the first, executed by the last.
    let r = c.post_text(r#"{"jsonrpc":"2.0","id":11,"method":"tools/call","params":{"name":"a__echo","name":"whoami","arguments":{}}}"#).await;
    assert_refused(&r, "params.name", json!(11));

    // `uri`: routed by the first (and namespaced), read by the last.
    let r = c.post_text(r#"{"jsonrpc":"2.0","id":12,"method":"resources/read","params":{"uri":"a+lw://public","uri":"lw://secret"}}"#).await;
    assert_refused(&r, "params.uri", json!(12));

    // `ref`: both the member inside it and the member itself.
    let r = c.post_text(r#"{"jsonrpc":"2.0","id":"13","method":"completion/complete","params":{"ref":{"type":"ref/prompt","name":"a__p","name":"secret"},"argument":{"name":"x","value":""}}}"#).await;
    assert_refused(&r, "params.ref.name", json!("13"));
    let r = c.post_text(r#"{"jsonrpc":"2.0","id":14,"method":"completion/complete","params":{"ref":{"type":"ref/prompt","name":"a__p"},"argument":{"name":"x","value":""},"ref":{"type":"ref/prompt","name":"secret"}}}"#).await;
    assert_refused(&r, "params.ref", json!(14));

    // `cursor`.
    let r = c.post_text(r#"{"jsonrpc":"2.0","id":15,"method":"tools/list","params":{"cursor":"x","cursor":"y"}}"#).await;
    assert_refused(&r, "params.cursor", json!(15));

    // A name spelled with an escape is the same name.
    let r = c.post_text(r#"{"jsonrpc":"2.0","id":16,"method":"tools/call","params":{"name":"a__echo","na\u006de":"whoami"}}"#).await;
    assert_refused(&r, r#"params["na\u006de"]"#, json!(16));

    // The envelope: two ids.
    let r = c
        .post_text(r#"{"jsonrpc":"2.0","id":17,"method":"ping","id":18}"#)
        .await;
    assert_eq!(r.status, 400, "{r:?}");
    assert_eq!(r.error_code(), Some(-32600), "{r:?}");

    // The session is unharmed.
    let r = c.call_tool("b__echo", json!({})).await;
    assert_eq!(texts(&r), "called echo", "{r:?}");
    gw.stop().await;
}

#[tokio::test]
async fn a_duplicate_progress_token_cannot_reach_another_sessions_request() {
    // One shared process: both sessions' requests are on the same connection, where the
    // gateway's progress tokens are its request ids.
    let gw = TestGateway::start(config(vec![tenant("lw", vec![lastwins("a", &[])])])).await;
    let victim = session(&gw, "lw").await;
    let attacker = session(&gw, "lw").await;

    // The id the victim's next call will get on the upstream link.
    let r = victim.call_tool("whoami", json!({})).await;
    let seen: u64 = texts(&r)
        .strip_prefix("id ")
        .and_then(|n| n.parse().ok())
        .unwrap_or_else(|| panic!("{r:?}"));
    let next = seen + 1;

    let slow = tokio::spawn(async move {
        let r = victim
            .request(
                "tools/call",
                json!({"name": "slow", "arguments": {"note": "victim", "ms": 1500},
                       "_meta": {"progressToken": "mine"}}),
            )
            .await;
        (victim, r)
    });
    tokio::time::sleep(Duration::from_millis(400)).await;
    let attack = format!(
        r#"{{"jsonrpc":"2.0","id":5,"method":"tools/call","params":{{"name":"echo","arguments":{{"note":"injected"}},"_meta":{{"progressToken":"t2","progressToken":{next}}}}}}}"#
    );
    let r = attacker.post_text(&attack).await;
    assert_refused(&r, "params._meta.progressToken", json!(5));

    let (_victim, r) = slow.await.expect("victim's call");
    assert_eq!(texts(&r), "slow victim", "{r:?}");
    let progress: Vec<&Value> = r
        .messages
        .iter()
        .filter(|m| m["method"] == "notifications/progress")
        .collect();
    assert!(
        progress
            .iter()
            .all(|p| p["params"]["message"] == "victim" && p["params"]["progressToken"] == "mine"),
        "another session's progress reached this request: {progress:?}"
    );
    gw.stop().await;
}

#[tokio::test]
async fn ambiguous_upstream_messages_are_refused_without_waiting() {
    let mut slow_a = lastwins("a", &[]);
    slow_a.request_timeout = Duration::from_secs(20);
    let gw = TestGateway::start(config(vec![tenant(
        "lw",
        vec![slow_a, lastwins("b", &["--dup-list"])],
    )]))
    .await;
    let c = session(&gw, "lw").await;

    // A response with a duplicate member: the request fails now, not at its 20 s timeout.
    let started = Instant::now();
    let r = c.call_tool("a__dup-result", json!({})).await;
    assert!(
        started.elapsed() < Duration::from_secs(5),
        "{:?}",
        started.elapsed()
    );
    assert_eq!(r.error_code(), Some(-32603), "{r:?}");
    let message = r.last()["error"]["message"].as_str().unwrap_or_default();
    assert!(
        message.contains("upstream \"a\" sent an invalid response")
            && message.contains("`result.content[0].text`"),
        "{message}"
    );

    // A notification with a duplicate member is dropped; the response still comes.
    let r = c
        .request(
            "tools/call",
            json!({"name": "a__dup-progress", "arguments": {}, "_meta": {"progressToken": "p"}}),
        )
        .await;
    assert_eq!(texts(&r), "done", "{r:?}");
    assert!(
        r.messages
            .iter()
            .all(|m| m["method"] != "notifications/progress"),
        "{r:?}"
    );

    // A list page with an ambiguous entry is refused whole: that upstream is left out of the
    // list (failure_policy: open), the other one is listed.
    let names = tool_names(c.request("tools/list", json!({})).await.last());
    assert!(names.contains("a__echo"), "{names:?}");
    assert!(
        !names.iter().any(|n| n.starts_with("b__")),
        "an ambiguous page was listed: {names:?}"
    );
    gw.stop().await;
}

fn protected(
    issuer: &str,
    upstreams: Vec<UpstreamConfig>,
    policies: Vec<ToolPolicy>,
) -> TenantConfig {
    let mut t = tenant("sec", upstreams);
    t.auth = Some(AuthConfig {
        issuer: issuer.into(),
        jwks_url: None,
        audiences: vec![],
        algorithms: vec![JwtAlgorithm::RS256],
        clock_skew: Duration::ZERO,
        required_scopes: vec!["mcp".into()],
        scopes_supported: vec!["mcp".into()],
        token_type: switchyard::config::TokenType::Any,
    });
    t.tool_policies = policies;
    t
}

/// A session at `url` with a token of `idp` carrying scope `mcp`.
async fn signed_in(idp: &OidcProvider, url: &str) -> RawClient {
    let mut c = RawClient::new(url);
    c.bearer = Some(idp.token(url, "mcp").await);
    c.initialize().await;
    c
}

fn admins_only(upstream: &str, tools: &[&str]) -> ToolPolicy {
    ToolPolicy {
        upstream: upstream.into(),
        tools: tools.iter().map(|t| t.to_string()).collect(),
        scopes: vec![],
        claims: [("groups".to_string(), "admins".to_string())].into(),
    }
}

#[tokio::test]
async fn a_hidden_tool_stays_hidden_against_duplicates_renames_and_reloads() {
    let idp = OidcProvider::start(free_port(), "key-1").await;
    let everything = || upstream("everything", UpstreamTransport::Stdio(everything_stdio()));
    let policies = vec![admins_only("everything", &["get-env"])];
    let first = protected(&idp.issuer, vec![everything()], policies.clone());
    let gw = TestGateway::start(config(vec![first])).await;
    let url = gw.url("sec");
    let c = signed_in(&idp, &url).await;

    // One upstream, no prefixes: get-env is hidden and unknown; echo works.
    let names = tool_names(c.request("tools/list", json!({})).await.last());
    assert!(
        names.contains("echo") && !names.contains("get-env"),
        "{names:?}"
    );
    let r = c.call_tool("get-env", json!({})).await;
    assert!(r.error_code().is_some(), "a hidden tool was called: {r:?}");

    // The decoy: checked as echo, executed by Node's JSON.parse as get-env.
    let r = c.post_text(r#"{"jsonrpc":"2.0","id":21,"method":"tools/call","params":{"name":"echo","name":"get-env","arguments":{"message":"hi"}}}"#).await;
    assert_refused(&r, "params.name", json!(21));
    assert!(
        !String::from_utf8_lossy(&r.body).contains("PATH"),
        "the environment leaked: {r:?}"
    );

    // A second upstream turns prefixes on: the policy names the tool itself, so it still holds.
    let mut second = protected(
        &idp.issuer,
        vec![everything(), lastwins("more", &[])],
        policies.clone(),
    );
    second.prefix.mode = PrefixMode::Conditional;
    gw.gateway
        .apply(&config(vec![second]))
        .await
        .expect("reload applies");
    let c = signed_in(&idp, &url).await;
    let names = tool_names(c.request("tools/list", json!({})).await.last());
    assert!(
        names.contains("everything__echo") && !names.contains("everything__get-env"),
        "{names:?}"
    );
    let r = c.call_tool("everything__get-env", json!({})).await;
    assert!(
        r.error_code().is_some(),
        "a hidden tool was called after a reload: {r:?}"
    );
    // Another upstream's tool of the same name is not the protected tool.
    let r = c.call_tool("more__get-env", json!({})).await;
    assert_eq!(texts(&r), "called get-env", "{r:?}");
    gw.stop().await;
    idp.stop().await;
}

#[tokio::test]
async fn policy_patterns_that_match_no_tool_are_reported_by_check_and_run() {
    let idp = OidcProvider::start(free_port(), "key-1").await;
    let dir = crate::support::TempDir::new("policy-audit");
    let script = repo().join("tests/peers/lastwins_server.py");
    let yaml = format!(
        r#"tenants:
  - name: sec
    auth: {{issuer: "{issuer}", required_scopes: [mcp]}}
    tool_policies:
      - upstream: lw
        tools: [get-env, "renamed-*", "lw__echo"]
        claims: {{groups: admins}}
    upstreams:
      - name: lw
        stdio: {{command: "{python}", args: ["{script}"]}}
"#,
        issuer = idp.issuer,
        python = python().display(),
        script = script.display(),
    );
    // `check`: the pattern written as a public name is a warning, the config is valid.
    let path = dir.path("check.yaml");
    std::fs::write(&path, &yaml).expect("config");
    let out = std::process::Command::new(crate::support::config::gateway_exe())
        .args(["check", "--config"])
        .arg(&path)
        .output()
        .expect("check runs");
    let (stdout, stderr) = (
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr),
    );
    assert!(out.status.success(), "{stdout}{stderr}");
    assert!(
        stdout.contains("ok (1 tenant(s), 1 upstream(s), 1 warning(s))"),
        "{stdout}"
    );
    assert!(
        stderr.contains("warning: ")
            && stderr.contains("tool pattern \"lw__echo\" looks like a public name"),
        "{stderr}"
    );

    // `run`: once the tool list is known, every pattern that matches no tool is reported.
    let gw = crate::support::process::GatewayProcess::start(&yaml, &dir, "audit").await;
    let warned = crate::support::eventually(Duration::from_secs(5), || {
        gw.logs().contains("looks like a public name")
    })
    .await;
    assert!(warned, "{}", gw.logs());
    let url = gw.url("sec");
    let c = signed_in(&idp, &url).await;
    let names = tool_names(c.request("tools/list", json!({})).await.last());
    assert!(
        names.contains("echo") && !names.contains("get-env"),
        "{names:?}"
    );
    let reported = |pattern: &str| {
        gw.logs().lines().any(|l| {
            l.contains("tool policy pattern matches no tool")
                && l.contains(&format!("\"pattern\":\"{pattern}\""))
        })
    };
    let found = crate::support::eventually(Duration::from_secs(10), || {
        reported("renamed-*") && reported("lw__echo")
    })
    .await;
    assert!(found, "{}", gw.logs());
    assert!(
        !reported("get-env"),
        "get-env matches a tool: {}",
        gw.logs()
    );

    // A reload with another pattern: checked again at the next listing.
    let path = dir.path("audit.yaml");
    let text = std::fs::read_to_string(&path).expect("config");
    std::fs::write(&path, text.replace("\"renamed-*\"", "\"gone-tool\"")).expect("config");
    gw.signal(nix::sys::signal::Signal::SIGHUP);
    let reloaded = crate::support::eventually(Duration::from_secs(10), || {
        gw.logs().contains("config reloaded")
    })
    .await;
    assert!(reloaded, "{}", gw.logs());
    let c = signed_in(&idp, &url).await;
    c.request("tools/list", json!({})).await;
    let found = crate::support::eventually(Duration::from_secs(10), || reported("gone-tool")).await;
    assert!(found, "{}", gw.logs());
    gw.stop().await;
    idp.stop().await;
}
