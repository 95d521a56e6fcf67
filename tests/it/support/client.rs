//! A raw MCP client over real HTTP for tests that check status codes, headers and bodies
//! exactly (the SDK clients hide those).

use std::sync::atomic::{AtomicU64, Ordering};

use reqwest::header::HeaderMap;
use serde_json::{Value, json};
use switchyard::upstream::sse::SseParser;

/// One HTTP exchange, with every JSON-RPC message of the body parsed (JSON or SSE).
#[derive(Debug)]
pub struct Reply {
    pub status: u16,
    pub headers: HeaderMap,
    pub body: Vec<u8>,
    pub messages: Vec<Value>,
}

impl Reply {
    pub fn header(&self, name: &str) -> Option<&str> {
        self.headers.get(name).and_then(|v| v.to_str().ok())
    }

    pub fn content_type(&self) -> &str {
        self.header("content-type").unwrap_or("")
    }

    /// The single JSON body or the last SSE message.
    pub fn last(&self) -> &Value {
        self.messages.last().unwrap_or_else(|| {
            panic!(
                "no JSON-RPC message in the reply (status {}, body {:?})",
                self.status,
                String::from_utf8_lossy(&self.body)
            )
        })
    }

    pub fn error_code(&self) -> Option<i64> {
        self.last()["error"]["code"].as_i64()
    }
}

pub struct RawClient {
    pub http: reqwest::Client,
    pub url: String,
    pub session: Option<String>,
    pub protocol_version: String,
    /// Sent as `Authorization: Bearer <token>` when set.
    pub bearer: Option<String>,
    next_id: AtomicU64,
}

pub const ACCEPT_BOTH: &str = "application/json, text/event-stream";

impl RawClient {
    pub fn new(url: impl Into<String>) -> RawClient {
        switchyard::app::install_crypto_provider();
        RawClient {
            http: reqwest::Client::builder()
                .timeout(std::time::Duration::from_secs(60))
                .build()
                .expect("client"),
            url: url.into(),
            session: None,
            protocol_version: "2025-11-25".into(),
            bearer: None,
            next_id: AtomicU64::new(1),
        }
    }

    pub fn next_id(&self) -> u64 {
        self.next_id.fetch_add(1, Ordering::Relaxed)
    }

    /// POST `body` with exactly `headers` (nothing added but Host and Content-Length).
    pub async fn post_raw(&self, body: impl AsRef<[u8]>, headers: &[(&str, &str)]) -> Reply {
        super::rawhttp::exchange(&self.url, "POST", headers, body.as_ref()).await
    }

    /// GET with exactly `headers`; reads the response head (and what is there of an event stream).
    pub async fn get_raw(&self, headers: &[(&str, &str)]) -> Reply {
        super::rawhttp::exchange(&self.url, "GET", headers, b"").await
    }

    /// The headers a well-behaved client sends (plus session and version once known).
    pub fn standard_headers(&self) -> Vec<(&str, String)> {
        let mut h = vec![
            ("content-type", "application/json".to_string()),
            ("accept", ACCEPT_BOTH.to_string()),
        ];
        if let Some(s) = &self.session {
            h.push(("mcp-session-id", s.clone()));
            h.push(("mcp-protocol-version", self.protocol_version.clone()));
        }
        if let Some(t) = &self.bearer {
            h.push(("authorization", format!("Bearer {t}")));
        }
        h
    }

    /// POST a body written by hand (duplicate members, pretty-printed: what `json!` cannot
    /// build) with the standard headers.
    pub async fn post_text(&self, text: &str) -> Reply {
        let headers = self.standard_headers();
        let headers: Vec<(&str, &str)> = headers.iter().map(|(k, v)| (*k, v.as_str())).collect();
        self.post_raw(text, &headers).await
    }

    /// POST a JSON value with the standard headers.
    pub async fn post(&self, body: &Value) -> Reply {
        into_reply(self.post_open(body).await).await
    }

    /// POST a JSON value with the standard headers; the response is left open (an SSE
    /// stream, or JSON) for the caller to read.
    pub async fn post_open(&self, body: &Value) -> reqwest::Response {
        let mut req = self.http.post(&self.url).body(body.to_string());
        for (k, v) in self.standard_headers() {
            req = req.header(k, v);
        }
        req.send().await.expect("POST reaches the gateway")
    }

    pub async fn get_stream(&self, headers: &[(&str, &str)]) -> reqwest::Response {
        let mut req = self.http.get(&self.url);
        for (k, v) in headers {
            req = req.header(*k, *v);
        }
        req.send().await.expect("GET reaches the gateway")
    }

    pub async fn delete(&self) -> Reply {
        let mut req = self.http.delete(&self.url);
        if let Some(s) = &self.session {
            req = req.header("mcp-session-id", s);
        }
        if let Some(t) = &self.bearer {
            req = req.header("authorization", format!("Bearer {t}"));
        }
        into_reply(req.send().await.expect("DELETE reaches the gateway")).await
    }

    /// `initialize` only (no `notifications/initialized`).
    pub async fn initialize_only(&mut self) -> Reply {
        let id = self.next_id();
        let reply = self
            .post(&json!({
                "jsonrpc": "2.0", "id": id, "method": "initialize",
                "params": {
                    "protocolVersion": self.protocol_version,
                    "capabilities": {},
                    "clientInfo": {"name": "switchyard-tests", "version": "0"}
                }
            }))
            .await;
        assert_eq!(reply.status, 200, "initialize failed: {:?}", reply);
        self.session = reply.header("mcp-session-id").map(str::to_owned);
        reply
    }

    /// The full handshake; returns the initialize result.
    pub async fn initialize(&mut self) -> Value {
        let reply = self.initialize_only().await;
        let notified = self
            .post(&json!({"jsonrpc": "2.0", "method": "notifications/initialized"}))
            .await;
        assert_eq!(
            notified.status, 202,
            "initialized notification: {notified:?}"
        );
        reply.last()["result"].clone()
    }

    /// A request on the session; returns the whole reply (JSON or SSE).
    pub async fn request(&self, method: &str, params: Value) -> Reply {
        let id = self.next_id();
        self.post(&json!({"jsonrpc": "2.0", "id": id, "method": method, "params": params}))
            .await
    }

    /// `tools/call` returning the whole reply.
    pub async fn call_tool(&self, name: &str, arguments: Value) -> Reply {
        self.request("tools/call", json!({"name": name, "arguments": arguments}))
            .await
    }

    /// Pings until the session is gone here (404) or a second has passed, and returns the
    /// last reply: a session ended on another replica ends here when the broadcast arrives.
    pub async fn ping_until_ended(&self) -> Reply {
        let mut reply = self.request("ping", json!({})).await;
        for _ in 0..50 {
            if reply.status == 404 {
                break;
            }
            tokio::time::sleep(std::time::Duration::from_millis(20)).await;
            reply = self.request("ping", json!({})).await;
        }
        reply
    }
}

pub async fn into_reply(resp: reqwest::Response) -> Reply {
    let status = resp.status().as_u16();
    let headers = resp.headers().clone();
    let body = resp.bytes().await.map(|b| b.to_vec()).unwrap_or_default();
    into_reply_parts(status, headers, body)
}

pub fn into_reply_parts(status: u16, headers: HeaderMap, body: Vec<u8>) -> Reply {
    let ct = headers
        .get("content-type")
        .and_then(|v| v.to_str().ok())
        .unwrap_or("");
    let messages = if ct.starts_with("text/event-stream") {
        let mut p = SseParser::new(usize::MAX);
        p.push(&body);
        let mut out = vec![];
        while let Ok(Some(ev)) = p.next_event() {
            if !ev.data.is_empty() {
                out.push(serde_json::from_slice(&ev.data).expect("SSE data is JSON"));
            }
        }
        out
    } else if body.is_empty() {
        vec![]
    } else {
        serde_json::from_slice(&body)
            .map(|v| vec![v])
            .unwrap_or_default()
    };
    Reply {
        status,
        headers,
        body,
        messages,
    }
}

/// The tool names of a `tools/list` response.
pub fn tool_names(reply: &Value) -> std::collections::BTreeSet<String> {
    reply["result"]["tools"]
        .as_array()
        .map(|a| {
            a.iter()
                .filter_map(|t| t["name"].as_str().map(str::to_owned))
                .collect()
        })
        .unwrap_or_default()
}

/// The first text block of a `tools/call` response.
pub fn text(reply: &Value) -> String {
    reply["result"]["content"][0]["text"]
        .as_str()
        .unwrap_or_else(|| panic!("no text result in {reply}"))
        .to_owned()
}
