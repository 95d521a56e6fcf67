//! The gateway's own credentials for an HTTP upstream — never the client's: static headers
//! from config, headers read from files (mounted secrets, re-read when they change), and an
//! OAuth 2.0 client-credentials token (cached, refreshed before expiry and after a 401).

use std::path::PathBuf;
use std::sync::Mutex;
use std::time::{Duration, Instant, SystemTime};

use base64::Engine;
use base64::engine::general_purpose::STANDARD;
use reqwest::header::{AUTHORIZATION, HeaderName, HeaderValue};
use serde::Deserialize;

use super::header_lines::HeaderLines;
use crate::config::{ClientCredentials, HttpConfig};
use crate::error::GatewayError;

/// How often header files are checked for changes.
const FILE_CHECK_EVERY: Duration = Duration::from_secs(10);
/// A token is renewed this long before it expires (or at half its lifetime, if shorter).
const RENEW_BEFORE: Duration = Duration::from_secs(30);
/// Lifetime assumed when the token response names none.
const DEFAULT_TOKEN_LIFETIME: Duration = Duration::from_secs(300);
/// Bound on a token request.
const TOKEN_TIMEOUT: Duration = Duration::from_secs(10);

pub struct Credentials {
    /// The `headers` of the config, written out once as lines.
    static_headers: Box<[u8]>,
    files: Vec<(HeaderName, PathBuf)>,
    file_state: Mutex<FileState>,
    oauth: Option<TokenSource>,
}

#[derive(Default)]
struct FileState {
    checked: Option<Instant>,
    /// Per file: (modified, length) when read, and the header value.
    values: Vec<Option<((SystemTime, u64), HeaderValue)>>,
}

impl Credentials {
    pub fn new(
        config: &HttpConfig,
        connect_timeout: Duration,
        upstream: &str,
    ) -> Result<Credentials, String> {
        let mut static_headers = HeaderLines::default();
        for (name, value) in &config.headers {
            let name = HeaderName::from_bytes(name.as_bytes())
                .map_err(|_| format!("invalid header name {name:?}"))?;
            let value = HeaderValue::from_str(value.expose())
                .map_err(|_| format!("invalid value for header {name}"))?;
            static_headers.add(&name, &value);
        }
        let files = config
            .header_files
            .iter()
            .map(|(name, path)| {
                HeaderName::from_bytes(name.as_bytes())
                    .map(|n| (n, path.clone()))
                    .map_err(|_| format!("invalid header name {name:?}"))
            })
            .collect::<Result<Vec<_>, _>>()?;
        let credentials = Credentials {
            static_headers: static_headers.as_bytes().into(),
            file_state: Mutex::new(FileState {
                checked: None,
                values: vec![None; files.len()],
            }),
            files,
            oauth: match &config.oauth2 {
                // The token endpoint's client; the upstream's own traffic has its own.
                Some(c) => Some(TokenSource {
                    config: c.clone(),
                    resource: c.resource.clone().unwrap_or_else(|| config.url.clone()),
                    http: reqwest::Client::builder()
                        .connect_timeout(connect_timeout)
                        .build()
                        .map_err(|e| format!("token endpoint HTTP client: {e}"))?,
                    upstream: upstream.to_owned(),
                    cached: tokio::sync::Mutex::new(None),
                }),
                None => None,
            },
        };
        credentials.refresh_files(true);
        Ok(credentials)
    }

    /// The header lines to send on the next upstream request: the gateway's credentials, in
    /// room for what the caller adds (`Accept`, the session's and the request's MCP headers,
    /// `Content-Type`, trace context). Their names are never the gateway's own (the config
    /// reserves those), so nothing the caller adds repeats one.
    pub async fn headers(&self) -> Result<HeaderLines, GatewayError> {
        let mut h = HeaderLines::with_capacity(self.static_headers.len() + 384);
        h.add_lines(&self.static_headers);
        if !self.files.is_empty() {
            self.refresh_files(false);
            if let Ok(state) = self.file_state.lock() {
                for ((name, _), value) in self.files.iter().zip(&state.values) {
                    if let Some((_, v)) = value {
                        h.add(name, v);
                    }
                }
            }
        }
        if let Some(oauth) = &self.oauth {
            h.add(&AUTHORIZATION, &oauth.bearer().await?);
        }
        Ok(h)
    }

    /// Whether a 401 from the upstream may be cured by a new token.
    pub fn has_token(&self) -> bool {
        self.oauth.is_some()
    }

    /// The upstream refused our token: fetch a new one next time.
    pub async fn token_rejected(&self) {
        if let Some(oauth) = &self.oauth {
            *oauth.cached.lock().await = None;
        }
    }

    /// Re-reads header files whose modification time or size changed (at most every
    /// `FILE_CHECK_EVERY` unless `force`). A file that cannot be read keeps its last value.
    fn refresh_files(&self, force: bool) {
        if self.files.is_empty() {
            return;
        }
        let Ok(mut state) = self.file_state.lock() else {
            return;
        };
        if !force
            && state
                .checked
                .is_some_and(|t| t.elapsed() < FILE_CHECK_EVERY)
        {
            return;
        }
        state.checked = Some(Instant::now());
        for (i, (name, path)) in self.files.iter().enumerate() {
            let stamp = std::fs::metadata(path)
                .ok()
                .map(|m| (m.modified().unwrap_or(SystemTime::UNIX_EPOCH), m.len()));
            if stamp.is_some() && state.values[i].as_ref().map(|(s, _)| *s) == stamp {
                continue;
            }
            match std::fs::read_to_string(path) {
                Ok(text) => match HeaderValue::from_str(text.trim()) {
                    Ok(mut v) => {
                        v.set_sensitive(true);
                        if state.values[i].is_some() {
                            tracing::info!(header = %name, file = %path.display(), "upstream credential reloaded");
                        }
                        state.values[i] = stamp.map(|s| (s, v));
                    }
                    Err(_) => {
                        tracing::error!(header = %name, file = %path.display(), "header file holds an invalid header value; keeping the previous one");
                    }
                },
                Err(e) => {
                    tracing::error!(header = %name, file = %path.display(), error = %e, "cannot read a header file; keeping the previous value");
                }
            }
        }
    }
}

struct TokenSource {
    config: ClientCredentials,
    /// RFC 8707 resource the token is requested for.
    resource: String,
    http: reqwest::Client,
    upstream: String,
    /// The token and when to renew it.
    cached: tokio::sync::Mutex<Option<(HeaderValue, Instant)>>,
}

#[derive(Deserialize)]
struct TokenResponse {
    access_token: String,
    #[serde(default)]
    token_type: Option<String>,
    #[serde(default)]
    expires_in: Option<u64>,
}

impl TokenSource {
    /// `Bearer <token>`, from the cache or a new token request.
    async fn bearer(&self) -> Result<HeaderValue, GatewayError> {
        let mut cached = self.cached.lock().await;
        if let Some((value, renew_at)) = cached.as_ref()
            && Instant::now() < *renew_at
        {
            return Ok(value.clone());
        }
        // Boxed: the token request's state is large and needed once per token lifetime.
        let (value, lifetime) = Box::pin(self.fetch()).await?;
        let renew_at = Instant::now() + lifetime - RENEW_BEFORE.min(lifetime / 2);
        *cached = Some((value.clone(), renew_at));
        Ok(value)
    }

    async fn fetch(&self) -> Result<(HeaderValue, Duration), GatewayError> {
        let unavailable = |reason: String| GatewayError::UpstreamUnavailable {
            upstream: self.upstream.clone(),
            reason,
        };
        let mut form = vec![
            ("grant_type", "client_credentials".to_owned()),
            ("resource", self.resource.clone()),
        ];
        if !self.config.scopes.is_empty() {
            form.push(("scope", self.config.scopes.join(" ")));
        }
        // client_secret_basic (RFC 6749 §2.3.1: both parts form-encoded first).
        let basic = STANDARD.encode(format!(
            "{}:{}",
            form_encode(&self.config.client_id),
            form_encode(self.config.client_secret.expose())
        ));
        let mut auth = HeaderValue::from_str(&format!("Basic {basic}"))
            .map_err(|_| unavailable("the client credentials cannot form a header".into()))?;
        auth.set_sensitive(true);
        let body = form
            .iter()
            .map(|(k, v)| format!("{k}={}", form_encode(v)))
            .collect::<Vec<_>>()
            .join("&");
        let resp = self
            .http
            .post(&self.config.token_url)
            .header(AUTHORIZATION, auth)
            .header("content-type", "application/x-www-form-urlencoded")
            .header("accept", "application/json")
            .body(body)
            .timeout(TOKEN_TIMEOUT)
            .send()
            .await
            .map_err(|e| unavailable(format!("the token request failed: {}", describe(&e))))?;
        let status = resp.status();
        let bytes = resp.bytes().await.unwrap_or_default();
        if !status.is_success() {
            // The error body of a token endpoint (RFC 6749 §5.2) holds no secrets.
            let detail = serde_json::from_slice::<serde_json::Value>(&bytes)
                .ok()
                .and_then(|v| v.get("error").and_then(|e| e.as_str()).map(str::to_owned))
                .unwrap_or_default();
            return Err(unavailable(format!(
                "the token endpoint answered HTTP {} {detail}",
                status.as_u16()
            )));
        }
        let token: TokenResponse = serde_json::from_slice(&bytes).map_err(|_| {
            unavailable("the token endpoint's answer is not a token response".into())
        })?;
        if token
            .token_type
            .as_deref()
            .is_some_and(|t| !t.eq_ignore_ascii_case("bearer"))
        {
            return Err(unavailable(
                "the token endpoint issued a non-bearer token".into(),
            ));
        }
        let mut value = HeaderValue::from_str(&format!("Bearer {}", token.access_token))
            .map_err(|_| unavailable("the issued token cannot form a header".into()))?;
        value.set_sensitive(true);
        let lifetime = token
            .expires_in
            .map_or(DEFAULT_TOKEN_LIFETIME, Duration::from_secs);
        tracing::info!(upstream = %self.upstream, lifetime_s = lifetime.as_secs(), "upstream token obtained");
        Ok((value, lifetime))
    }
}

fn describe(e: &reqwest::Error) -> String {
    match std::error::Error::source(e) {
        Some(s) => s.to_string(),
        None => if e.is_timeout() {
            "timed out"
        } else {
            "HTTP error"
        }
        .to_owned(),
    }
}

/// `application/x-www-form-urlencoded` encoding of one value.
fn form_encode(s: &str) -> String {
    let mut out = String::with_capacity(s.len());
    for b in s.bytes() {
        match b {
            b'A'..=b'Z' | b'a'..=b'z' | b'0'..=b'9' | b'-' | b'.' | b'_' | b'~' => {
                out.push(char::from(b))
            }
            b' ' => out.push('+'),
            _ => out.push_str(&format!("%{b:02X}")),
        }
    }
    out
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used)]
    use super::*;
    use crate::config::Secret;

    #[test]
    fn form_encoding() {
        assert_eq!(form_encode("a b&c=d/é"), "a+b%26c%3Dd%2F%C3%A9");
        assert_eq!(form_encode("Az09-._~"), "Az09-._~");
    }

    #[tokio::test]
    async fn file_headers_are_read_and_reloaded_when_they_change() {
        let path = std::env::temp_dir().join(format!("sy-cred-{}", std::process::id()));
        std::fs::write(&path, "Bearer first\n").unwrap();
        let config = HttpConfig {
            url: "http://127.0.0.1:9/mcp".into(),
            headers: vec![("X-Static".into(), Secret::new("s"))],
            header_files: vec![("Authorization".into(), path.clone())],
            oauth2: None,
        };
        let c = Credentials::new(&config, Duration::from_secs(5), "u").unwrap();
        let h = c.headers().await.unwrap();
        assert_eq!(h.get("authorization"), Some(&b"Bearer first"[..]));
        assert_eq!(h.get("x-static"), Some(&b"s"[..]));
        std::fs::write(&path, "Bearer second, longer").unwrap();
        c.refresh_files(true);
        let h = c.headers().await.unwrap();
        assert_eq!(h.get("authorization"), Some(&b"Bearer second, longer"[..]));
        std::fs::remove_file(&path).unwrap();
        c.refresh_files(true);
        let h = c.headers().await.unwrap();
        assert_eq!(
            h.get("authorization"),
            Some(&b"Bearer second, longer"[..]),
            "a vanished file keeps the last value"
        );
    }
}
