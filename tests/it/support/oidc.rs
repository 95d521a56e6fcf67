//! A real OAuth 2.1 / OpenID Connect authorization server for the auth tests: npm
//! `oidc-provider` run by `tests/peers/oidc_provider.mjs` on 127.0.0.1, issuing audience-bound
//! JWT access tokens (client_credentials + RFC 8707 resource indicators). Plus helpers to look
//! inside tokens and to forge bad ones. See tests/peers/README.md ("OIDC provider").

use std::process::Stdio;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use base64::Engine;
use base64::engine::general_purpose::URL_SAFE_NO_PAD;
use serde_json::{Value, json};
use tokio::io::{AsyncBufReadExt, AsyncReadExt, BufReader};
use tokio::process::{Child, Command};

use super::peers::{node, peers_dir, repo};

/// The confidential client registered in the provider (client_credentials only). The secret is
/// accepted both as HTTP Basic credentials and as form fields (client_secret_post).
pub const CLIENT_ID: &str = "switchyard-test";
pub const CLIENT_SECRET: &str = "switchyard-test-secret";
/// Every scope the provider grants for any resource; requested scopes outside this set are
/// silently dropped from the token.
pub const SCOPES: &str = "mcp files:read files:write admin";

const READY_LIMIT: Duration = Duration::from_secs(20);
const HTTP_LIMIT: Duration = Duration::from_secs(10);

/// A running `oidc_provider.mjs` (killed on drop).
pub struct OidcProvider {
    /// `http://127.0.0.1:<port>` (no trailing slash), exactly the `iss` of its tokens.
    pub issuer: String,
    pub port: u16,
    child: Child,
    stderr: Arc<Mutex<String>>,
    http: reqwest::Client,
}

impl OidcProvider {
    /// Starts the provider on 127.0.0.1:`port` with a fresh RS256 signing key whose `kid` is
    /// `key_id`.
    pub async fn start(port: u16, key_id: &str) -> OidcProvider {
        Self::start_with_alg(port, key_id, "RS256").await
    }

    /// Like [`OidcProvider::start`] with the signing algorithm `alg` (`RS256` or `ES256`).
    pub async fn start_with_alg(port: u16, key_id: &str, alg: &str) -> OidcProvider {
        switchyard::app::install_crypto_provider();
        let peers = peers_dir();
        let pkg = peers.join("js/node_modules/oidc-provider/package.json");
        assert!(
            pkg.exists(),
            "test peer missing: {}\nInstall the pinned test peers first: bash scripts/install-test-deps.sh \
             (or run the whole suite with bash scripts/test.sh)",
            pkg.display()
        );
        let mut cmd = Command::new(node());
        cmd.arg(repo().join("tests/peers/oidc_provider.mjs"))
            .args([
                "--port",
                &port.to_string(),
                "--key-id",
                key_id,
                "--alg",
                alg,
            ])
            .env("SWITCHYARD_PEERS", &peers)
            .stdin(Stdio::null())
            .stdout(Stdio::piped())
            .stderr(Stdio::piped())
            .kill_on_drop(true);
        let mut child = cmd.spawn().expect("oidc_provider.mjs starts");

        // Collect stderr for the whole life of the process (for panics; also keeps the pipe
        // from filling up).
        let stderr = Arc::new(Mutex::new(String::new()));
        if let Some(mut err) = child.stderr.take() {
            let sink = stderr.clone();
            tokio::spawn(async move {
                let mut buf = [0u8; 4096];
                while let Ok(n) = err.read(&mut buf).await {
                    if n == 0 {
                        break;
                    }
                    if let Ok(mut s) = sink.lock() {
                        s.push_str(&String::from_utf8_lossy(&buf[..n]));
                    }
                }
            });
        }

        let stdout = child.stdout.take().expect("piped stdout");
        let mut lines = BufReader::new(stdout).lines();
        let first = tokio::time::timeout(READY_LIMIT, lines.next_line()).await;
        let issuer = match first {
            Ok(Ok(Some(line))) if line.starts_with("READY ") => line["READY ".len()..].to_string(),
            other => {
                let _ = child.kill().await;
                let _ = child.wait().await;
                // Let the stderr reader catch up with the dead process.
                tokio::time::sleep(Duration::from_millis(100)).await;
                let err = stderr.lock().map(|s| s.clone()).unwrap_or_default();
                let what = match other {
                    Err(_) => format!("no READY line within {}s", READY_LIMIT.as_secs()),
                    Ok(Ok(Some(line))) => format!("unexpected first stdout line {line:?}"),
                    Ok(Ok(None)) => "exited before READY".to_string(),
                    Ok(Err(e)) => format!("reading its stdout failed: {e}"),
                };
                panic!(
                    "oidc_provider.mjs on 127.0.0.1:{port} failed to start: {what}\nstderr:\n{err}"
                );
            }
        };
        assert_eq!(
            issuer,
            format!("http://127.0.0.1:{port}"),
            "provider issuer"
        );
        // Drain (nothing more is expected) so a stray write cannot block or hit EPIPE.
        tokio::spawn(async move { while let Ok(Some(_)) = lines.next_line().await {} });

        let http = reqwest::Client::builder()
            .timeout(HTTP_LIMIT)
            .no_proxy()
            .build()
            .expect("reqwest client");
        OidcProvider {
            issuer,
            port,
            child,
            stderr,
            http,
        }
    }

    pub fn token_endpoint(&self) -> String {
        format!("{}/token", self.issuer)
    }

    pub fn jwks_uri(&self) -> String {
        format!("{}/jwks", self.issuer)
    }

    pub fn discovery_url(&self) -> String {
        format!("{}/.well-known/openid-configuration", self.issuer)
    }

    /// What the provider has written to stderr so far.
    pub fn stderr(&self) -> String {
        self.stderr.lock().map(|s| s.clone()).unwrap_or_default()
    }

    pub fn pid(&self) -> Option<u32> {
        self.child.id()
    }

    /// A client_credentials access token (a JWT) for `resource` with `scope` (space-separated;
    /// may be empty for no scope). Panics with the response body when the provider refuses.
    pub async fn token(&self, resource: &str, scope: &str) -> String {
        let (status, body) = self.token_response(resource, scope).await;
        match body.get("access_token").and_then(Value::as_str) {
            Some(token) if status == 200 => token.to_string(),
            _ => panic!(
                "token request for resource {resource:?} scope {scope:?} failed: HTTP {status} {body}\nprovider stderr:\n{}",
                self.stderr()
            ),
        }
    }

    /// A token issued to the second registered client (`switchyard-other`): same issuer, another
    /// subject, i.e. another user.
    pub async fn token_for_other_client(&self, resource: &str, scope: &str) -> String {
        let form = [
            ("grant_type", "client_credentials"),
            ("resource", resource),
            ("scope", scope),
        ];
        let (status, body) = self
            .token_request(&form, Some(("switchyard-other", "switchyard-other-secret")))
            .await;
        match body.get("access_token").and_then(Value::as_str) {
            Some(token) if status == 200 => token.to_string(),
            _ => panic!("token request for the other client failed: HTTP {status} {body}"),
        }
    }

    /// The raw token endpoint answer (status, JSON body) for a client_credentials request with
    /// `resource` (omitted when empty) and `scope` (omitted when empty), authenticating with
    /// HTTP Basic. For negative cases, e.g. `invalid_target`.
    pub async fn token_response(&self, resource: &str, scope: &str) -> (u16, Value) {
        let mut form = vec![("grant_type", "client_credentials")];
        if !resource.is_empty() {
            form.push(("resource", resource));
        }
        if !scope.is_empty() {
            form.push(("scope", scope));
        }
        self.token_request(&form, Some((CLIENT_ID, CLIENT_SECRET)))
            .await
    }

    /// POSTs `form` (url-encoded) to the token endpoint, with HTTP Basic credentials when
    /// `basic` is set; returns (status, JSON body).
    pub async fn token_request(
        &self,
        form: &[(&str, &str)],
        basic: Option<(&str, &str)>,
    ) -> (u16, Value) {
        let mut req = self
            .http
            .post(self.token_endpoint())
            .header("content-type", "application/x-www-form-urlencoded")
            .body(form_urlencode(form));
        if let Some((id, secret)) = basic {
            req = req.basic_auth(form_component(id), Some(form_component(secret)));
        }
        let resp = req.send().await.unwrap_or_else(|e| {
            panic!(
                "token request to {} failed: {e}\nprovider stderr:\n{}",
                self.token_endpoint(),
                self.stderr()
            )
        });
        let status = resp.status().as_u16();
        let text = resp.text().await.expect("token response body");
        let body = serde_json::from_str(&text).unwrap_or_else(|e| {
            panic!("token endpoint answered HTTP {status} non-JSON ({e}): {text}")
        });
        (status, body)
    }

    /// GET a JSON document from the provider (e.g. [`Self::jwks_uri`]).
    pub async fn get_json(&self, url: &str) -> Value {
        let resp = self
            .http
            .get(url)
            .send()
            .await
            .unwrap_or_else(|e| panic!("GET {url} failed: {e}"));
        let status = resp.status();
        let text = resp.text().await.expect("response body");
        assert!(status.is_success(), "GET {url}: HTTP {status}: {text}");
        serde_json::from_str(&text).unwrap_or_else(|e| panic!("GET {url}: not JSON ({e}): {text}"))
    }

    /// The published JWKS (`{"keys": [...]}`, public keys only).
    pub async fn jwks(&self) -> Value {
        self.get_json(&self.jwks_uri()).await
    }

    /// Kills the process and waits for it.
    pub async fn stop(mut self) {
        let _ = self.child.kill().await;
        let _ = tokio::time::timeout(Duration::from_secs(10), self.child.wait()).await;
    }
}

/// `application/x-www-form-urlencoded` encoding of one component.
fn form_component(s: &str) -> String {
    let mut out = String::with_capacity(s.len());
    for b in s.bytes() {
        match b {
            b'A'..=b'Z' | b'a'..=b'z' | b'0'..=b'9' | b'-' | b'.' | b'_' | b'*' => {
                out.push(b as char)
            }
            b' ' => out.push('+'),
            _ => out.push_str(&format!("%{b:02X}")),
        }
    }
    out
}

fn form_urlencode(pairs: &[(&str, &str)]) -> String {
    pairs
        .iter()
        .map(|(k, v)| format!("{}={}", form_component(k), form_component(v)))
        .collect::<Vec<_>>()
        .join("&")
}

fn b64_json(part: &str, what: &str, jwt: &str) -> Value {
    let bytes = URL_SAFE_NO_PAD
        .decode(part)
        .unwrap_or_else(|e| panic!("JWT {what} is not base64url ({e}): {jwt}"));
    serde_json::from_slice(&bytes).unwrap_or_else(|e| panic!("JWT {what} is not JSON ({e}): {jwt}"))
}

fn parts(jwt: &str) -> [&str; 3] {
    let p: Vec<&str> = jwt.split('.').collect();
    assert_eq!(
        p.len(),
        3,
        "not a compact JWS (3 dot-separated parts): {jwt}"
    );
    [p[0], p[1], p[2]]
}

/// Decode (without verifying) a JWT's header and payload, for assertions.
pub fn decode_unverified(jwt: &str) -> (Value, Value) {
    let [h, p, _] = parts(jwt);
    (b64_json(h, "header", jwt), b64_json(p, "payload", jwt))
}

fn encode_json(v: &Value) -> String {
    URL_SAFE_NO_PAD.encode(serde_json::to_vec(v).expect("JSON serializes"))
}

/// An unsigned token: header `{"alg":"none","typ":"JWT"}`, `payload`, empty signature.
pub fn forge_alg_none(payload: &Value) -> String {
    format!(
        "{}.{}.",
        encode_json(&json!({"alg": "none", "typ": "JWT"})),
        encode_json(payload)
    )
}

/// `jwt` with the same header and payload but a signature that no longer verifies (one bit
/// of the decoded signature flipped, re-encoded canonically).
pub fn corrupt_signature(jwt: &str) -> String {
    let [h, p, s] = parts(jwt);
    let mut sig = URL_SAFE_NO_PAD
        .decode(s)
        .unwrap_or_else(|e| panic!("JWT signature is not base64url ({e}): {jwt}"));
    assert!(!sig.is_empty(), "JWT has no signature to corrupt: {jwt}");
    sig[0] ^= 0x01;
    format!("{h}.{p}.{}", URL_SAFE_NO_PAD.encode(sig))
}

/// A token signed like `jwt` claims but with `payload` swapped in (signature now invalid) —
/// e.g. to test that a tampered `aud` or `exp` is rejected.
pub fn with_payload(jwt: &str, payload: &Value) -> String {
    let [h, _, s] = parts(jwt);
    format!("{h}.{}.{s}", encode_json(payload))
}
