//! A raw client of the 2024-11-05 HTTP+SSE transport: opens `<endpoint>/sse`, reads the
//! `endpoint` event, POSTs messages to the URL it names and reads the answers off the stream,
//! with every status and event checked by the tests (the SDK clients hide them).

use std::time::Duration;

use futures_util::StreamExt;
use futures_util::stream::BoxStream;
use serde_json::{Value, json};
use switchyard::upstream::sse::{SseEvent, SseParser};

/// How long a test waits for one event.
const EVENT_WAIT: Duration = Duration::from_secs(30);

pub struct LegacyClient {
    pub http: reqwest::Client,
    /// `http://<gateway>` (the message endpoint is an absolute path on it).
    origin: String,
    /// The `data` of the `endpoint` event, as sent.
    pub endpoint: String,
    /// Sent as `Authorization: Bearer <token>` when set.
    pub bearer: Option<String>,
    body: BoxStream<'static, reqwest::Result<bytes::Bytes>>,
    parser: SseParser,
    next_id: u64,
}

/// An HTTP answer to a POSTed message.
#[derive(Debug)]
pub struct Posted {
    pub status: u16,
    pub allow: Option<String>,
    pub body: Value,
}

impl LegacyClient {
    /// Opens the stream at `<endpoint_url>/sse` and reads its first event, which must be
    /// `endpoint`.
    pub async fn connect(endpoint_url: &str, bearer: Option<&str>) -> LegacyClient {
        let http = reqwest::Client::builder()
            .timeout(Duration::from_secs(120))
            .build()
            .expect("client");
        let mut req = http
            .get(format!("{endpoint_url}/sse"))
            .header("accept", "text/event-stream");
        if let Some(t) = bearer {
            req = req.header("authorization", format!("Bearer {t}"));
        }
        let resp = req.send().await.expect("GET /sse reaches the gateway");
        assert_eq!(resp.status(), 200, "GET /sse: {resp:?}");
        let ct = resp
            .headers()
            .get("content-type")
            .and_then(|v| v.to_str().ok())
            .unwrap_or_default()
            .to_owned();
        assert!(ct.starts_with("text/event-stream"), "content-type {ct}");
        let origin = endpoint_url
            .split_once("://")
            .map(|(scheme, rest)| format!("{scheme}://{}", rest.split('/').next().unwrap_or("")))
            .expect("an absolute endpoint URL");
        let mut client = LegacyClient {
            http,
            origin,
            endpoint: String::new(),
            bearer: bearer.map(str::to_owned),
            body: resp.bytes_stream().boxed(),
            parser: SseParser::new(1 << 24),
            next_id: 1,
        };
        let first = client.next_event().await.expect("a first event");
        assert_eq!(first.event.as_deref(), Some("endpoint"), "{first:?}");
        client.endpoint = String::from_utf8(first.data.to_vec()).expect("UTF-8 endpoint");
        client
    }

    /// The message endpoint's full URL.
    pub fn message_url(&self) -> String {
        format!("{}{}", self.origin, self.endpoint)
    }

    /// The session id the `endpoint` event announced.
    pub fn session_id(&self) -> String {
        self.endpoint
            .split_once("sessionId=")
            .map(|(_, id)| id.to_owned())
            .expect("a sessionId in the endpoint")
    }

    /// The next event (keep-alive comments skipped), or `None` when the stream ended or
    /// nothing came within the wait.
    pub async fn next_event(&mut self) -> Option<SseEvent> {
        let deadline = tokio::time::Instant::now() + EVENT_WAIT;
        loop {
            if let Some(ev) = self.parser.next_event().expect("event within bounds") {
                return Some(ev);
            }
            match tokio::time::timeout_at(deadline, self.body.next()).await {
                Ok(Some(Ok(chunk))) => self.parser.push(&chunk),
                Ok(_) | Err(_) => return None,
            }
        }
    }

    /// The next `message` event, parsed.
    pub async fn next_message(&mut self) -> Value {
        let ev = self.next_event().await.expect("a message event within 30s");
        assert_eq!(ev.event.as_deref(), Some("message"), "{ev:?}");
        assert_eq!(ev.id, None, "2024-11-05 events carry no id: {ev:?}");
        serde_json::from_slice(&ev.data).expect("JSON message")
    }

    /// Waits for the stream to end (`true`) within the wait.
    pub async fn ended(&mut self) -> bool {
        let deadline = tokio::time::Instant::now() + EVENT_WAIT;
        loop {
            match tokio::time::timeout_at(deadline, self.body.next()).await {
                Ok(None) | Ok(Some(Err(_))) => return true,
                Ok(Some(Ok(_))) => {}
                Err(_) => return false,
            }
        }
    }

    /// POSTs `body` to `url` with these headers (plus the bearer token, if any).
    pub async fn post_to(&self, url: &str, body: &str, headers: &[(&str, &str)]) -> Posted {
        let mut req = self.http.post(url).body(body.to_owned());
        for (k, v) in headers {
            req = req.header(*k, *v);
        }
        if let Some(t) = &self.bearer {
            req = req.header("authorization", format!("Bearer {t}"));
        }
        let resp = req.send().await.expect("POST reaches the gateway");
        let status = resp.status().as_u16();
        let allow = resp
            .headers()
            .get("allow")
            .and_then(|v| v.to_str().ok())
            .map(str::to_owned);
        let bytes = resp.bytes().await.unwrap_or_default();
        let body = serde_json::from_slice(&bytes).unwrap_or(Value::Null);
        Posted {
            status,
            allow,
            body,
        }
    }

    /// POSTs a message to the message endpoint as `application/json`.
    pub async fn post(&self, message: &Value) -> Posted {
        self.post_to(
            &self.message_url(),
            &message.to_string(),
            &[("content-type", "application/json")],
        )
        .await
    }

    /// A request: POSTed (202 expected), then its response read off the stream; messages
    /// that come before it are returned too (notifications, server requests).
    pub async fn request(&mut self, method: &str, params: Value) -> (Value, Vec<Value>) {
        let id = self.next_id;
        self.next_id += 1;
        let posted = self
            .post(&json!({"jsonrpc": "2.0", "id": id, "method": method, "params": params}))
            .await;
        assert_eq!(posted.status, 202, "{method}: {posted:?}");
        let mut before = Vec::new();
        loop {
            let msg = self.next_message().await;
            if msg["id"] == id && msg.get("method").is_none() {
                return (msg, before);
            }
            before.push(msg);
        }
    }

    /// `initialize` (answered on the stream) and `notifications/initialized`; returns the
    /// initialize result.
    pub async fn initialize(&mut self, version: &str) -> Value {
        let (reply, _) = self
            .request(
                "initialize",
                json!({"protocolVersion": version, "capabilities": {},
                       "clientInfo": {"name": "switchyard-tests", "version": "0"}}),
            )
            .await;
        let posted = self
            .post(&json!({"jsonrpc": "2.0", "method": "notifications/initialized"}))
            .await;
        assert_eq!(posted.status, 202, "{posted:?}");
        reply["result"].clone()
    }
}
