//! The admin status page and its JSON on a real gateway process: what they show (tenants,
//! endpoints, upstream states with their errors, listed tools with the policies hiding them,
//! sessions), the admin token, nothing secret on them (header, environment and query values,
//! the token, session ids, who the user is), and the page in a real headless Chromium showing
//! a failing upstream as down and following config reloads — a rejected file with its
//! `file:line:col` errors, then a fixed one.

use std::time::Duration;

use serde_json::{Value, json};

use crate::support::TempDir;
use crate::support::browser::{Browser, dump_dom};
use crate::support::client::{RawClient, tool_names};
use crate::support::config::demo_server_exe;
use crate::support::oidc::{OidcProvider, decode_unverified};
use crate::support::peers::free_port;
use crate::support::process::GatewayProcess;

const ADMIN_TOKEN: &str = "status-admin-token-7f3a9c1e";
const ENV_SECRET: &str = "env-secret-5d1c0b";
const HEADER_SECRET: &str = "header-secret-9e2f44";
const QUERY_SECRET: &str = "query-secret-a81b3d";

async fn get(url: &str, bearer: Option<&str>) -> (u16, Option<String>, String) {
    let mut req = reqwest::Client::new().get(url);
    if let Some(token) = bearer {
        req = req.bearer_auth(token);
    }
    let resp = req.send().await.expect("admin listener answers");
    let challenge = resp
        .headers()
        .get("www-authenticate")
        .map(|v| v.to_str().unwrap_or_default().to_owned());
    (
        resp.status().as_u16(),
        challenge,
        resp.text().await.unwrap_or_default(),
    )
}

fn upstream<'a>(status: &'a Value, tenant: &str, name: &str) -> &'a Value {
    status["tenants"]
        .as_array()
        .and_then(|ts| ts.iter().find(|t| t["name"] == tenant))
        .and_then(|t| t["upstreams"].as_array())
        .and_then(|us| us.iter().find(|u| u["name"] == name))
        .unwrap_or_else(|| panic!("no upstream {tenant}/{name} in {status:#}"))
}

#[tokio::test]
async fn the_status_api_shows_state_and_policies_behind_the_token_and_nothing_secret() {
    let idp = OidcProvider::start(free_port(), "key-1").await;
    let dir = TempDir::new("status-api");
    let (admin, closed) = (free_port(), free_port());
    let yaml = format!(
        r#"admin_listen: 127.0.0.1:{admin}
admin_token: {ADMIN_TOKEN}
tenants:
  - name: sec
    auth: {{issuer: "{issuer}", required_scopes: [mcp]}}
    tool_policies:
      - {{upstream: demo, tools: [echo], scopes: [files:write], claims: {{groups: admins}}}}
    upstreams:
      - name: demo
        stdio: {{command: "{demo}", args: [--stdio], env: {{DEMO_TOKEN: {ENV_SECRET}}}}}
      - name: remote
        http:
          url: "http://127.0.0.1:{closed}/mcp?api_key={QUERY_SECRET}"
          headers: {{Authorization: "Bearer {HEADER_SECRET}"}}
"#,
        issuer = idp.issuer,
        demo = demo_server_exe().display(),
    );
    let gw = GatewayProcess::start(&yaml, &dir, "status").await;
    let url = gw.url("sec");
    let mut client = RawClient::new(&url);
    let user_token = idp.token(&url, "mcp").await;
    let subject = decode_unverified(&user_token).1["sub"]
        .as_str()
        .unwrap_or_default()
        .to_owned();
    client.bearer = Some(user_token.clone());
    client.initialize().await;
    let names = tool_names(client.request("tools/list", json!({})).await.last());
    // The policy hides `echo` from this caller; the status page lists it, with the policy.
    assert!(
        names.contains("demo__add") && !names.contains("demo__echo"),
        "{names:?}"
    );
    let session = client.session.clone().expect("a session id");

    let api = format!("http://127.0.0.1:{admin}/admin/api/status");
    let page = format!("http://127.0.0.1:{admin}/admin/status");
    for target in [&api, &page] {
        let (status, challenge, _) = get(target, None).await;
        assert_eq!(status, 401, "{target} without the token");
        assert_eq!(
            challenge.as_deref(),
            Some("Bearer realm=\"switchyard-admin\"")
        );
        let (status, challenge, _) = get(target, Some("not-the-admin-token-000")).await;
        assert_eq!(status, 401, "{target} with a wrong token");
        assert!(
            challenge.is_some_and(|c| c.starts_with("Bearer ") && c.contains("invalid_token")),
            "{target}"
        );
    }
    // Probes and metrics stay open.
    assert_eq!(
        get(&format!("http://127.0.0.1:{admin}/healthz"), None)
            .await
            .0,
        200
    );

    let (code, _, body) = get(&api, Some(ADMIN_TOKEN)).await;
    assert_eq!(code, 200, "{body}");
    let status: Value = serde_json::from_str(&body).expect("JSON");
    let tenant = &status["tenants"][0];
    assert_eq!(tenant["name"], "sec");
    assert_eq!(tenant["endpoint"], "/t/sec/mcp");
    assert_eq!(tenant["auth"], true);
    assert_eq!(tenant["sessions"]["sessions"], 1, "{tenant:#}");
    assert_eq!(tenant["sessions"]["initialized"], 1, "{tenant:#}");
    assert_eq!(status["config"]["outcome"], "loaded");
    assert_eq!(status["config"]["errors"], json!([]));
    let demo = upstream(&status, "sec", "demo");
    assert_eq!(demo["state"], "up", "{demo:#}");
    assert_eq!(demo["transport"], "stdio");
    assert_eq!(demo["sharing"], "shared");
    assert_eq!(demo["processes"], json!({"ready": 1, "configured": 1}));
    assert!(
        demo["connected"]["protocol_version"]
            .as_str()
            .is_some_and(|v| v.starts_with("20")),
        "{demo:#}"
    );
    assert_eq!(demo["tools"], 3, "{demo:#}");
    assert_eq!(
        demo["tool_names"],
        json!([
            {"name": "demo__add", "policies": []},
            {"name": "demo__echo", "policies": [0]},
            {"name": "demo__sleep", "policies": []},
        ])
    );
    assert_eq!(
        tenant["tool_policies"][0],
        json!({"index": 0, "upstream": "demo", "tools": ["echo"], "scopes": ["files:write"], "claims": ["groups"]})
    );
    let remote = upstream(&status, "sec", "remote");
    assert_eq!(remote["state"], "down", "{remote:#}");
    assert_eq!(remote["target"], format!("http://127.0.0.1:{closed}"));
    assert!(
        remote["last_error"]["message"]
            .as_str()
            .is_some_and(|m| !m.is_empty()),
        "{remote:#}"
    );

    let (code, _, html) = get(&page, Some(ADMIN_TOKEN)).await;
    assert_eq!(code, 200);
    assert!(
        html.contains("<code>demo__echo</code>")
            && html.contains("tool_policies[0]: scopes files:write; claims groups"),
        "{html}"
    );
    for (what, text) in [("JSON", &body), ("page", &html)] {
        for secret in [
            ENV_SECRET,
            HEADER_SECRET,
            QUERY_SECRET,
            ADMIN_TOKEN,
            session.as_str(),
            user_token.as_str(),
            subject.as_str(),
            "admins",
        ] {
            assert!(!secret.is_empty());
            assert!(
                !text.contains(secret),
                "the {what} shows {secret:?}:\n{text}"
            );
        }
    }
    gw.stop().await;
    idp.stop().await;
}

/// The config with a healthy and (optionally) a failing upstream.
fn browser_config(admin: u16, broken: bool) -> String {
    let mut yaml = format!(
        "admin_listen: 127.0.0.1:{admin}\ntenants:\n  - name: shop\n    upstreams:\n      - name: demo\n        stdio: {{command: \"{}\", args: [--stdio]}}\n",
        demo_server_exe().display()
    );
    if broken {
        // A command that cannot start (its name shows on the page, escaped).
        yaml.push_str(
            "      - name: crashy\n        stdio: {command: \"/nonexistent/<b>&crash\", restart: {initial_backoff: 5s, max_backoff: 20s}}\n",
        );
    }
    yaml
}

#[tokio::test]
async fn the_status_page_in_chromium_shows_a_failing_upstream_and_follows_reloads() {
    let dir = TempDir::new("status-page");
    let admin = free_port();
    let gw = GatewayProcess::start(&browser_config(admin, true), &dir, "gateway").await;
    let path = dir.path("gateway.yaml");
    let page = format!("http://127.0.0.1:{admin}/admin/status");
    let row = "id=\"upstream-shop-crashy\"";

    // A fresh load: the crashing upstream is down, with why and how often it restarted.
    let mut dom = String::new();
    let shown_down = async {
        for _ in 0..20 {
            dom = dump_dom(&page).await;
            if dom.contains("<span class=\"state down\">down</span>")
                && dom.contains("failed to start \"/nonexistent/&lt;b&gt;&amp;crash\"")
            {
                return true;
            }
            tokio::time::sleep(Duration::from_millis(500)).await;
        }
        false
    };
    assert!(shown_down.await, "{dom}");
    assert!(dom.contains(row), "{dom}");
    assert!(
        dom.contains("<code>/nonexistent/&lt;b&gt;&amp;crash</code>") && !dom.contains("<b>"),
        "the command is escaped: {dom}"
    );
    assert!(
        dom.contains("<title>switchyard status: 1/2 upstreams up, 1 down, config loaded</title>"),
        "{dom}"
    );

    // The page left open follows a reload that fails, then one that works.
    let devtools = free_port();
    let browser = Browser::open_with_devtools(&format!("{page}?refresh=1"), devtools);
    let title_has = |text: &'static str| {
        let browser = &browser;
        let page = &page;
        async move {
            for _ in 0..100 {
                if let Some(title) = browser.page_title(page).await
                    && title.contains(text)
                {
                    return title;
                }
                tokio::time::sleep(Duration::from_millis(200)).await;
            }
            panic!(
                "the open page's title never showed {text:?}: {:?}\n{}",
                browser.page_title(page).await,
                browser.console()
            )
        }
    };
    title_has("config loaded").await;

    let listen = format!("listen: 127.0.0.1:{}\n", gw.port);
    // Line 4, column 5: a typo'd key (and so no `name`); line 7, column 39: an unknown
    // sharing mode.
    let broken = format!(
        "{listen}admin_listen: 127.0.0.1:{admin}\ntenants:\n  - nmae: shop\n    upstreams:\n      - name: demo\n        stdio: {{command: sh, sharing: sometimes}}\n"
    );
    std::fs::write(&path, &broken).expect("config");
    gw.signal(nix::sys::signal::Signal::SIGHUP);
    title_has("config rejected").await;
    let dom = dump_dom(&page).await;
    let file = path.display().to_string();
    let errors = dom
        .split("<ol id=\"config-errors\">")
        .nth(1)
        .and_then(|rest| rest.split("</ol>").next())
        .unwrap_or_else(|| panic!("no error list: {dom}"));
    assert_eq!(errors.matches("<li>").count(), 3, "{errors}");
    for problem in [
        "4:5: tenants[0]: unknown field `nmae`, did you mean `name`?",
        "4:5: tenants[0]: missing required field `name`",
        "7:39: tenants[0].upstreams[0].stdio.sharing: unknown value `sometimes`",
    ] {
        assert!(
            errors.contains(&format!("<code>{file}:{problem}")),
            "{problem}: {errors}"
        );
    }
    assert!(
        dom.contains("1/2 upstreams up"),
        "the running config stays: {dom}"
    );

    // Fixed: the failing upstream removed, no errors, everything up.
    std::fs::write(&path, format!("{listen}{}", browser_config(admin, false))).expect("config");
    gw.signal(nix::sys::signal::Signal::SIGHUP);
    let title = title_has("config applied").await;
    assert!(title.contains("1/1 upstreams up, 0 down"), "{title}");
    let dom = dump_dom(&page).await;
    assert!(
        !dom.contains("config-errors") && !dom.contains("crashy"),
        "{dom}"
    );
    browser.close().await;
    gw.stop().await;
}
