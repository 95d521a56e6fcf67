//! JSON-RPC 2.0 framing for the demo server: classifying one incoming message and encoding the
//! compact, single-line responses and notifications it sends back.

use std::borrow::Cow;

use bytes::Bytes;
use serde::{Deserialize, Deserializer};
use serde_json::value::RawValue;

pub(crate) const PARSE_ERROR: i32 = -32700;
pub(crate) const INVALID_REQUEST: i32 = -32600;
pub(crate) const METHOD_NOT_FOUND: i32 = -32601;
pub(crate) const INVALID_PARAMS: i32 = -32602;
pub(crate) const RESOURCE_NOT_FOUND: i32 = -32002;

/// One incoming message, borrowing from the received bytes.
#[derive(Debug)]
pub(crate) enum Message<'a> {
    /// Has an id and a method; must be answered (unless cancelled).
    Request {
        id: &'a RawValue,
        method: Cow<'a, str>,
        params: Option<&'a RawValue>,
    },
    /// Has a method and no id; never answered.
    Notification {
        method: Cow<'a, str>,
        params: Option<&'a RawValue>,
    },
    /// A response to a server-to-client request (only the conformance fixture sends those);
    /// exactly one of `result` and `error` is set.
    Response {
        id: &'a RawValue,
        result: Option<&'a RawValue>,
        error: Option<&'a RawValue>,
    },
}

impl Message<'_> {
    pub(crate) fn is_request(&self) -> bool {
        matches!(self, Message::Request { .. })
    }
}

/// The raw shape of a message: every member optional so that structural problems can be told
/// apart from JSON syntax errors and reported precisely.
#[derive(Deserialize)]
struct Envelope<'a> {
    #[serde(borrow, default)]
    jsonrpc: Option<Cow<'a, str>>,
    #[serde(borrow, default, deserialize_with = "raw_keep_null")]
    id: Option<&'a RawValue>,
    #[serde(borrow, default)]
    method: Option<Cow<'a, str>>,
    #[serde(borrow, default)]
    params: Option<&'a RawValue>,
    #[serde(borrow, default, deserialize_with = "raw_keep_null")]
    result: Option<&'a RawValue>,
    #[serde(borrow, default)]
    error: Option<&'a RawValue>,
}

/// Present-but-null stays `Some("null")` so that `"id": null` is not mistaken for a notification.
fn raw_keep_null<'de, D: Deserializer<'de>>(d: D) -> Result<Option<&'de RawValue>, D::Error> {
    <&'de RawValue>::deserialize(d).map(Some)
}

/// Classifies one message. `Err` carries the error response to send back (id null unless the
/// id could be read).
pub(crate) fn parse(bytes: &[u8]) -> Result<Message<'_>, Bytes> {
    let env: Envelope<'_> = match serde_json::from_slice(bytes) {
        Ok(env) => env,
        Err(e) if e.is_data() => {
            let msg = if bytes.trim_ascii_start().starts_with(b"[") {
                "Invalid Request: JSON-RPC batches are not supported".to_owned()
            } else {
                format!("Invalid Request: {}", serde_message(&e))
            };
            return Err(error(None, INVALID_REQUEST, &msg));
        }
        Err(e) => {
            let msg = format!("Parse error: {}", serde_message(&e));
            return Err(error(None, PARSE_ERROR, &msg));
        }
    };
    let id = match env.id {
        Some(id) if !is_valid_id(id) => {
            let msg = "Invalid Request: id must be a string or an integer";
            return Err(error(None, INVALID_REQUEST, msg));
        }
        id => id,
    };
    if env.jsonrpc.as_deref() != Some("2.0") {
        return Err(error(
            id,
            INVALID_REQUEST,
            "Invalid Request: jsonrpc must be \"2.0\"",
        ));
    }
    match (id, env.method) {
        (Some(id), Some(method)) => Ok(Message::Request {
            id,
            method,
            params: env.params,
        }),
        (None, Some(method)) => Ok(Message::Notification {
            method,
            params: env.params,
        }),
        (Some(id), None) if env.result.is_some() != env.error.is_some() => Ok(Message::Response {
            id,
            result: env.result,
            error: env.error,
        }),
        (id, None) => Err(error(
            id,
            INVALID_REQUEST,
            "Invalid Request: missing method",
        )),
    }
}

/// MCP request ids are strings or integers (never null, never fractional).
pub(crate) fn is_valid_id(id: &RawValue) -> bool {
    let s = id.get().as_bytes();
    match s.first() {
        Some(b'"') => true,
        Some(b'-') => s.len() > 1 && s[1..].iter().all(u8::is_ascii_digit),
        Some(_) => s.iter().all(u8::is_ascii_digit),
        None => false,
    }
}

/// A serde_json error without its " at line L column C" suffix (messages are single-line, so
/// the column alone is what matters and the text reads better without it).
pub(crate) fn serde_message(e: &serde_json::Error) -> String {
    let full = e.to_string();
    match full.rfind(" at line ") {
        Some(at) => full[..at].to_owned(),
        None => full,
    }
}

const RESULT_PREFIX: &[u8] = b"{\"jsonrpc\":\"2.0\",\"id\":";

/// `{"jsonrpc":"2.0","id":<id>,"result":<written by f>}`.
pub(crate) fn response_with(
    id: &RawValue,
    size_hint: usize,
    f: impl FnOnce(&mut Vec<u8>),
) -> Bytes {
    let mut buf = Vec::with_capacity(RESULT_PREFIX.len() + id.get().len() + 12 + size_hint);
    buf.extend_from_slice(RESULT_PREFIX);
    buf.extend_from_slice(id.get().as_bytes());
    buf.extend_from_slice(b",\"result\":");
    f(&mut buf);
    buf.push(b'}');
    Bytes::from(buf)
}

/// A response whose result is already-encoded JSON.
pub(crate) fn response(id: &RawValue, result: &[u8]) -> Bytes {
    response_with(id, result.len(), |buf| buf.extend_from_slice(result))
}

/// An error response; `id` None encodes as `null`.
pub(crate) fn error(id: Option<&RawValue>, code: i32, message: &str) -> Bytes {
    let id = id.map_or("null", RawValue::get);
    let mut buf = Vec::with_capacity(RESULT_PREFIX.len() + id.len() + 40 + message.len());
    buf.extend_from_slice(RESULT_PREFIX);
    buf.extend_from_slice(id.as_bytes());
    buf.extend_from_slice(b",\"error\":{\"code\":");
    buf.extend_from_slice(code.to_string().as_bytes());
    buf.extend_from_slice(b",\"message\":");
    push_str(&mut buf, message);
    buf.extend_from_slice(b"}}");
    Bytes::from(buf)
}

/// A tool result with one text content block.
pub(crate) fn tool_text(id: &RawValue, text: &str, is_error: bool) -> Bytes {
    response_with(id, text.len() + 48, |buf| {
        buf.extend_from_slice(b"{\"content\":[{\"type\":\"text\",\"text\":");
        push_str(buf, text);
        buf.extend_from_slice(b"}]");
        if is_error {
            buf.extend_from_slice(b",\"isError\":true");
        }
        buf.push(b'}');
    })
}

/// A tool result whose `content` array is already-encoded JSON.
pub(crate) fn tool_content(id: &RawValue, content: &[u8], is_error: bool) -> Bytes {
    response_with(id, content.len() + 32, |buf| {
        buf.extend_from_slice(b"{\"content\":");
        buf.extend_from_slice(content);
        if is_error {
            buf.extend_from_slice(b",\"isError\":true");
        }
        buf.push(b'}');
    })
}

/// A request from the server to the client, with a string id and already-encoded params.
pub(crate) fn request(id: &str, method: &str, params: &[u8]) -> Bytes {
    let mut buf = Vec::with_capacity(48 + id.len() + method.len() + params.len());
    buf.extend_from_slice(b"{\"jsonrpc\":\"2.0\",\"id\":");
    push_str(&mut buf, id);
    buf.extend_from_slice(b",\"method\":");
    push_str(&mut buf, method);
    buf.extend_from_slice(b",\"params\":");
    buf.extend_from_slice(params);
    buf.push(b'}');
    Bytes::from(buf)
}

/// A notification with already-encoded params.
pub(crate) fn notification(method: &str, params: &[u8]) -> Bytes {
    let mut buf = Vec::with_capacity(40 + method.len() + params.len());
    buf.extend_from_slice(b"{\"jsonrpc\":\"2.0\",\"method\":");
    push_str(&mut buf, method);
    buf.extend_from_slice(b",\"params\":");
    buf.extend_from_slice(params);
    buf.push(b'}');
    Bytes::from(buf)
}

/// `notifications/progress` for `token` (raw JSON, string or integer).
pub(crate) fn progress(token: &RawValue, progress: u64, total: u64) -> Bytes {
    let text = format!(
        "{{\"jsonrpc\":\"2.0\",\"method\":\"notifications/progress\",\"params\":\
         {{\"progressToken\":{},\"progress\":{progress},\"total\":{total}}}}}",
        token.get()
    );
    Bytes::from(text)
}

/// Appends `s` as a JSON string literal.
pub(crate) fn push_str(buf: &mut Vec<u8>, s: &str) {
    const HEX: &[u8; 16] = b"0123456789abcdef";
    buf.reserve(s.len() + 2);
    buf.push(b'"');
    let bytes = s.as_bytes();
    let mut start = 0;
    for (i, &b) in bytes.iter().enumerate() {
        let escape: &[u8] = match b {
            b'"' => b"\\\"",
            b'\\' => b"\\\\",
            b'\n' => b"\\n",
            b'\r' => b"\\r",
            b'\t' => b"\\t",
            0x00..=0x1f => b"",
            _ => continue,
        };
        buf.extend_from_slice(&bytes[start..i]);
        if escape.is_empty() {
            buf.extend_from_slice(b"\\u00");
            buf.push(HEX[usize::from(b >> 4)]);
            buf.push(HEX[usize::from(b & 0xf)]);
        } else {
            buf.extend_from_slice(escape);
        }
        start = i + 1;
    }
    buf.extend_from_slice(&bytes[start..]);
    buf.push(b'"');
}
