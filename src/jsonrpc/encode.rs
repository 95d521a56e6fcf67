//! Writing JSON-RPC messages from raw parts: the payload bytes are copied, never re-serialized.

use bytes::Bytes;
use serde_json::value::RawValue;

use super::{Outcome, RawObject};

/// Appends `s` as a JSON string: as it is, in quotes, when nothing in it needs an escape (a
/// method or member name nearly always), else as serde_json escapes it.
pub(super) fn push_str_json(out: &mut impl Text, s: &str) {
    if s.bytes().all(|b| b >= 0x20 && b != b'"' && b != b'\\') {
        out.put("\"");
        out.put(s);
        out.put("\"");
    } else {
        out.put(&serde_json::to_string(s).expect("strings always serialize"));
    }
}

/// Where JSON text is written: a `String` (kept UTF-8 without a check) or bytes.
pub(super) trait Text {
    fn put(&mut self, s: &str);
}

impl Text for String {
    #[inline]
    fn put(&mut self, s: &str) {
        self.push_str(s);
    }
}

impl Text for Vec<u8> {
    #[inline]
    fn put(&mut self, s: &str) {
        self.extend_from_slice(s.as_bytes());
    }
}

/// The start of every message with an id, up to the id; what follows the id of a request,
/// of a result and of an error.
const WITH_ID: &[u8] = b"{\"jsonrpc\":\"2.0\",\"id\":";
const METHOD: &[u8] = b",\"method\":";
const PARAMS: &[u8] = b",\"params\":";
const RESULT: &[u8] = b",\"result\":";
const ERROR: &[u8] = b",\"error\":";
/// The start of a notification, up to its method.
const NOTIFICATION: &[u8] = b"{\"jsonrpc\":\"2.0\",\"method\":";

/// `{"jsonrpc":"2.0","id":<id>,"method":<method>,"params":<params>}`
pub fn request(id: &RawValue, method: &str, params: Option<&RawValue>) -> Vec<u8> {
    request_with_id(id.get().as_bytes(), method, params)
}

/// [`request`] with a number for its id (the gateway's own upstream ids), written straight
/// into the message: no JSON value is made for it.
pub fn numbered_request(id: u64, method: &str, params: Option<&RawValue>) -> Vec<u8> {
    request_with_id(itoa::Buffer::new().format(id).as_bytes(), method, params)
}

/// [`request`] from the id's JSON text. The buffer is the message's exact length when the
/// method needs no escape (nearly always), so `Bytes::from` takes it as it is, with no second
/// allocation for a shared count.
fn request_with_id(id: &[u8], method: &str, params: Option<&RawValue>) -> Vec<u8> {
    let mut buf = Vec::with_capacity(
        WITH_ID.len()
            + id.len()
            + METHOD.len()
            + method.len()
            + 2
            + params.map_or(0, |p| PARAMS.len() + p.get().len())
            + 1,
    );
    buf.extend_from_slice(WITH_ID);
    buf.extend_from_slice(id);
    buf.extend_from_slice(METHOD);
    push_str_json(&mut buf, method);
    if let Some(p) = params {
        buf.extend_from_slice(PARAMS);
        buf.extend_from_slice(p.get().as_bytes());
    }
    buf.push(b'}');
    buf
}

/// `{"jsonrpc":"2.0","method":<method>,"params":<params>}`
pub fn notification(method: &str, params: Option<&RawValue>) -> Vec<u8> {
    let mut buf = Vec::with_capacity(48 + method.len() + params.map_or(0, |p| p.get().len()));
    buf.extend_from_slice(NOTIFICATION);
    push_str_json(&mut buf, method);
    if let Some(p) = params {
        buf.extend_from_slice(PARAMS);
        buf.extend_from_slice(p.get().as_bytes());
    }
    buf.push(b'}');
    buf
}

/// Like [`notification`], with params an object being edited, written straight into the
/// message (not made up apart first).
pub fn notification_with(method: &str, params: &RawObject<'_>) -> Vec<u8> {
    let mut buf = Vec::with_capacity(48 + method.len() + params.text_len());
    buf.extend_from_slice(NOTIFICATION);
    push_str_json(&mut buf, method);
    buf.extend_from_slice(PARAMS);
    params.write_into(&mut buf);
    buf.push(b'}');
    buf
}

/// A response carrying `outcome` under a (new) id (its raw JSON text), in a buffer of its exact
/// length (see [`request_with_id`]).
pub fn response_with_id(id: &str, outcome: Outcome<'_>) -> Vec<u8> {
    let (key, raw): (&[u8], &RawValue) = match outcome {
        Outcome::Result(r) => (RESULT, r),
        Outcome::Error(e) => (ERROR, e),
    };
    let mut buf = Vec::with_capacity(WITH_ID.len() + id.len() + key.len() + raw.get().len() + 1);
    buf.extend_from_slice(WITH_ID);
    buf.extend_from_slice(id.as_bytes());
    buf.extend_from_slice(key);
    buf.extend_from_slice(raw.get().as_bytes());
    buf.push(b'}');
    buf
}

/// `{"jsonrpc":"2.0","id":<id>,"result":<result bytes>}` where `result` is already JSON.
pub fn result_response(id: &RawValue, result_json: &[u8]) -> Bytes {
    let mut buf = Vec::with_capacity(40 + id.get().len() + result_json.len());
    result_prefix(&mut buf, id);
    buf.extend_from_slice(result_json);
    buf.push(b'}');
    Bytes::from(buf)
}

/// The start of a result response, up to where the result goes; the writer of the result
/// closes the envelope with one more `}` (for results built in place, never copied).
pub fn result_prefix(buf: &mut Vec<u8>, id: &RawValue) {
    buf.extend_from_slice(WITH_ID);
    buf.extend_from_slice(id.get().as_bytes());
    buf.extend_from_slice(RESULT);
}

/// The `error` object: `{"code":..,"message":..,"data":..}`.
pub fn error_body(code: i64, message: &str, data: Option<&serde_json::Value>) -> Vec<u8> {
    let mut buf = Vec::with_capacity(48 + message.len());
    buf.extend_from_slice(b"{\"code\":");
    buf.extend_from_slice(code.to_string().as_bytes());
    buf.extend_from_slice(b",\"message\":");
    push_str_json(&mut buf, message);
    if let Some(d) = data {
        buf.extend_from_slice(b",\"data\":");
        serde_json::to_writer(&mut buf, d).expect("writing to a Vec cannot fail");
    }
    buf.push(b'}');
    buf
}

/// An error response; `id` is `null` when the request's id is unknown.
pub fn error_response(
    id: Option<&RawValue>,
    code: i64,
    message: &str,
    data: Option<&serde_json::Value>,
) -> Bytes {
    let mut buf = Vec::with_capacity(80 + message.len());
    buf.extend_from_slice(WITH_ID);
    buf.extend_from_slice(id.map_or("null", |i| i.get()).as_bytes());
    buf.extend_from_slice(ERROR);
    buf.extend_from_slice(&error_body(code, message, data));
    buf.push(b'}');
    Bytes::from(buf)
}
