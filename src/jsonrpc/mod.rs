//! JSON-RPC 2.0 envelopes: borrowed parsing that keeps `params`, `result` and `error` as raw
//! JSON, and writers that re-emit a message with only the gateway-owned fields changed.
//! Pure: no IO, no async.

mod encode;
mod object;
mod parse;
mod scan;
pub mod strict;

pub use encode::{
    error_body, error_response, notification, notification_with, numbered_request, request,
    response_with_id, result_prefix, result_response,
};
pub use object::RawObject;
pub use parse::{
    Message, Notification, Outcome, ParseError, Request, Response, is_batch, parse, split_batch,
};

use serde_json::value::RawValue;

/// Standard and MCP error codes the gateway emits.
pub mod code {
    pub const PARSE_ERROR: i64 = -32700;
    pub const INVALID_REQUEST: i64 = -32600;
    pub const METHOD_NOT_FOUND: i64 = -32601;
    pub const INVALID_PARAMS: i64 = -32602;
    pub const INTERNAL_ERROR: i64 = -32603;
    /// The upstream connection closed (process exited, stream broke) before answering.
    pub const CONNECTION_CLOSED: i64 = -32000;
    /// No response within the upstream's timeout (the TS/Python SDK convention), also used in
    /// 404 bodies as "Session not found" by the SDKs; the two never share a context.
    pub const REQUEST_TIMEOUT: i64 = -32001;
    pub const SESSION_NOT_FOUND: i64 = -32001;
    /// The upstream could not be reached or initialized.
    pub const UPSTREAM_UNAVAILABLE: i64 = -32010;
    /// The request was cancelled by the client before a response was produced.
    pub const REQUEST_CANCELLED: i64 = -32800;
    /// 2026-07-28 `UnsupportedProtocolVersionError`.
    pub const UNSUPPORTED_PROTOCOL_VERSION: i64 = -32022;
    /// The HTTP headers do not match the body (2026-07-28, `HeaderMismatch`).
    pub const HEADER_MISMATCH: i64 = -32020;
    /// A capability the client did not declare is needed (2026-07-28).
    pub const MISSING_CLIENT_CAPABILITY: i64 = -32021;
    /// A tenant limit refused the request (a rate, a quota, a cap); `data` names the limit and
    /// carries `retryAfterSeconds`. In the implementation-defined server range, as other MCP
    /// gateways use it for rate limits.
    pub const LIMIT_REACHED: i64 = -32029;
}

/// An owned request id as it appeared on the wire (`17` or `"abc"`), kept verbatim so it can be
/// echoed back byte for byte.
pub type OwnedId = Box<RawValue>;

/// A client request's id (its raw JSON text, verbatim) shared by the places that keep it while
/// the request runs (where its answer goes, its stream, the session's requests in flight):
/// copied out of the request once, not once for each.
#[derive(Clone, PartialEq, Eq, Hash)]
pub struct SharedId(std::sync::Arc<str>);

impl SharedId {
    pub fn new(id: &RawValue) -> SharedId {
        SharedId(id.get().into())
    }

    /// The raw JSON text.
    pub fn get(&self) -> &str {
        &self.0
    }

    /// As a JSON value again (for an error response: the rare path makes the copy).
    pub fn to_raw(&self) -> Option<OwnedId> {
        RawValue::from_string(self.0.to_string()).ok()
    }
}

impl std::borrow::Borrow<str> for SharedId {
    fn borrow(&self) -> &str {
        &self.0
    }
}

impl std::fmt::Debug for SharedId {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(&self.0)
    }
}

/// Whether `raw` is a valid MCP request id: a JSON string or an integer (no fraction, no exponent).
pub fn is_valid_id(raw: &RawValue) -> bool {
    let s = raw.get().as_bytes();
    match s.first() {
        Some(b'"') => true,
        Some(b'-' | b'0'..=b'9') => s.iter().all(|b| matches!(b, b'-' | b'0'..=b'9')),
        _ => false,
    }
}

/// Whether JSON `text` may hold `needle` (a member name or a string, as written in the text): it
/// appears verbatim, or the text has a `\u` escape, which can spell any name or string. The cheap
/// test before a parse; never a false negative, so an escaped name cannot slip past it.
pub fn may_hold(text: &str, needle: &str) -> bool {
    text.contains(needle) || text.contains("\\u")
}

/// Owned copy of a raw JSON value.
pub fn to_owned_raw(raw: &RawValue) -> Box<RawValue> {
    raw.to_owned()
}

/// Raw JSON for an unsigned integer id: one allocation of the digits' exact length (serde's
/// writer would start a 128-byte buffer and then shrink it).
pub fn raw_u64(n: u64) -> Box<RawValue> {
    RawValue::from_string(itoa::Buffer::new().format(n).to_owned())
        .expect("an integer's digits are JSON")
}

/// Raw JSON for a parsed value.
pub fn raw_json(v: &serde_json::Value) -> Box<RawValue> {
    serde_json::value::to_raw_value(v).expect("a JSON value serializes")
}

/// Raw JSON for a string (quoted and escaped).
pub fn raw_string(s: &str) -> Box<RawValue> {
    serde_json::value::to_raw_value(s).expect("strings always serialize")
}

#[cfg(test)]
mod property_tests;
#[cfg(test)]
mod tests;
