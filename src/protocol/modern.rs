//! The stateless revision (2026-07-28) without IO: the per-request `_meta` a client sends, the
//! values of mirrored request headers (`Mcp-Name`, `Mcp-Param-*`, with the Base64 sentinel),
//! and the fields every result carries (`resultType`, caching hints).

use base64::Engine;
use bytes::Bytes;
use serde_json::Value;
use serde_json::value::RawValue;

use crate::jsonrpc::{self, Message, Outcome, RawObject};

/// `_meta` keys of the stateless revision.
pub mod meta {
    pub const PROTOCOL_VERSION: &str = "io.modelcontextprotocol/protocolVersion";
    pub const CLIENT_CAPABILITIES: &str = "io.modelcontextprotocol/clientCapabilities";
    pub const CLIENT_INFO: &str = "io.modelcontextprotocol/clientInfo";
    pub const LOG_LEVEL: &str = "io.modelcontextprotocol/logLevel";
    pub const SERVER_INFO: &str = "io.modelcontextprotocol/serverInfo";
    pub const SUBSCRIPTION_ID: &str = "io.modelcontextprotocol/subscriptionId";
}

/// What a stateless request says about its client in `params._meta`.
#[derive(Debug, Clone)]
pub struct RequestMeta {
    pub protocol_version: String,
    pub capabilities: Value,
    pub client_info: Value,
    pub log_level: Option<String>,
}

/// What a request of the stateless revision says about its client in `_meta`, serialized
/// once per session (or connection) instead of per request.
#[derive(Debug)]
pub struct ClientMeta {
    pub capabilities: Box<RawValue>,
    pub client_info: Box<RawValue>,
}

impl ClientMeta {
    pub fn new(capabilities: &Value, client_info: &Value) -> ClientMeta {
        ClientMeta {
            capabilities: crate::jsonrpc::raw_json(capabilities),
            client_info: crate::jsonrpc::raw_json(client_info),
        }
    }
}

/// Why a request's `_meta` is not usable.
#[derive(Debug, PartialEq, Eq)]
pub enum MetaError {
    /// A required field is missing or has the wrong type (Invalid params).
    Missing(&'static str),
}

impl RequestMeta {
    /// Reads `params._meta`; `None` when the request carries no protocol version there (it is
    /// then not a stateless request).
    pub fn peek_version(params: Option<&RawValue>) -> Option<String> {
        let params = RawObject::parse(params?).ok()?;
        let meta = params.get("_meta")?;
        RawObject::parse(meta)
            .ok()?
            .get_str(meta::PROTOCOL_VERSION)
            .map(|v| v.into_owned())
    }

    pub fn read(params: Option<&RawValue>) -> Result<RequestMeta, MetaError> {
        let params = params.and_then(|p| RawObject::parse(p).ok());
        let meta = params
            .as_ref()
            .and_then(|p| p.get("_meta"))
            .and_then(|m| serde_json::from_str::<serde_json::Map<String, Value>>(m.get()).ok())
            .ok_or(MetaError::Missing("params._meta"))?;
        let protocol_version = meta
            .get(meta::PROTOCOL_VERSION)
            .and_then(Value::as_str)
            .ok_or(MetaError::Missing(meta::PROTOCOL_VERSION))?
            .to_owned();
        let capabilities = meta
            .get(meta::CLIENT_CAPABILITIES)
            .filter(|c| c.is_object())
            .cloned()
            .ok_or(MetaError::Missing(meta::CLIENT_CAPABILITIES))?;
        let client_info = meta.get(meta::CLIENT_INFO).cloned().unwrap_or(Value::Null);
        let log_level = meta
            .get(meta::LOG_LEVEL)
            .and_then(Value::as_str)
            .map(str::to_owned);
        Ok(RequestMeta {
            protocol_version,
            capabilities,
            client_info,
            log_level,
        })
    }

    /// Whether the client declared capability `name` (e.g. `elicitation`).
    pub fn has_capability(&self, name: &str) -> bool {
        self.capabilities.get(name).is_some_and(|c| !c.is_null())
    }
}

/// The body field a request's `Mcp-Name` header mirrors, for the methods that have one: the
/// name or URI it targets (SEP-2243), or the task it addresses (SEP-2663).
pub fn name_field(method: &str) -> Option<&'static str> {
    match method {
        "tools/call" | "prompts/get" => Some("name"),
        "resources/read" => Some("uri"),
        "tasks/get" | "tasks/update" | "tasks/cancel" => Some("taskId"),
        _ => None,
    }
}

/// The sentinel wrapping a Base64-encoded header value.
const SENTINEL_OPEN: &str = "=?base64?";
const SENTINEL_CLOSE: &str = "?=";

/// A mirrored header's value as the body would have it: optional whitespace around it
/// trimmed (RFC 9110 section 5.5), Base64 sentinel values decoded (canonical Base64 with
/// padding only), plain values as they are. `None` for a value that is neither visible ASCII
/// nor a valid sentinel encoding.
pub fn decode_header_value(raw: &[u8]) -> Option<String> {
    let text = std::str::from_utf8(raw).ok()?;
    if !text
        .bytes()
        .all(|b| (0x20..0x7f).contains(&b) || b == b'\t')
    {
        return None;
    }
    let text = text.trim_matches([' ', '\t']);
    if let Some(inner) = text
        .strip_prefix(SENTINEL_OPEN)
        .and_then(|t| t.strip_suffix(SENTINEL_CLOSE))
    {
        let bytes = base64::engine::general_purpose::STANDARD
            .decode(inner)
            .ok()?;
        return String::from_utf8(bytes).ok();
    }
    Some(text.to_owned())
}

/// A value for a mirrored header (`Mcp-Name`, `Mcp-Param-*`): as it is when it is visible
/// ASCII without surrounding spaces, else in the Base64 sentinel encoding.
pub fn encode_header_value(value: &str) -> String {
    let plain = value.bytes().all(|b| (0x20..0x7f).contains(&b))
        && !value.starts_with(' ')
        && !value.ends_with(' ')
        && !value.starts_with(SENTINEL_OPEN);
    if plain {
        return value.to_owned();
    }
    let inner = base64::engine::general_purpose::STANDARD.encode(value.as_bytes());
    format!("{SENTINEL_OPEN}{inner}{SENTINEL_CLOSE}")
}

/// Caching hints of a cacheable result: freshness and who may share it.
#[derive(Debug, Clone, Copy)]
pub struct CacheHints {
    pub ttl_ms: u64,
    pub public: bool,
}

/// The "resource not found" code of 2025-11-25 and earlier (2026-07-28 uses -32602).
pub const LEGACY_RESOURCE_NOT_FOUND: i64 = -32002;

/// SEP-2164 at the era bridge: a session-based upstream answers a resource it does not have
/// with -32002; a client of this revision gets -32602 with the URI it asked for (`uri`, the
/// public one) in `data.uri`. The upstream's message and other `data` members are kept.
/// `None` when `response` is not such an error (it then passes unchanged).
pub fn resource_not_found(response: &[u8], uri: &str) -> Option<Bytes> {
    if !response.windows(6).any(|w| w == b"-32002") {
        return None;
    }
    let Message::Response(r) = jsonrpc::parse(response).ok()? else {
        return None;
    };
    let Outcome::Error(error) = r.outcome else {
        return None;
    };
    let error: serde_json::Map<String, Value> = serde_json::from_str(error.get()).ok()?;
    if error.get("code").and_then(Value::as_i64) != Some(LEGACY_RESOURCE_NOT_FOUND) {
        return None;
    }
    let message = error
        .get("message")
        .and_then(Value::as_str)
        .unwrap_or("Resource not found");
    let mut data = match error.get("data") {
        Some(Value::Object(d)) => d.clone(),
        _ => serde_json::Map::new(),
    };
    data.entry("uri").or_insert_with(|| uri.into());
    Some(jsonrpc::error_response(
        Some(r.id),
        jsonrpc::code::INVALID_PARAMS,
        message,
        Some(&Value::Object(data)),
    ))
}

/// Methods whose complete results carry caching hints.
pub fn is_cacheable(method: &str) -> bool {
    matches!(
        method,
        "server/discover"
            | "tools/list"
            | "prompts/list"
            | "resources/list"
            | "resources/templates/list"
            | "resources/read"
    )
}

/// A JSON-RPC response made to the stateless revision's shape: a result object gets
/// `"resultType":"complete"` unless it names its type already, and the caching hints when
/// given and absent. Errors and results that are not objects pass unchanged.
pub fn complete(response: &[u8], hints: Option<CacheHints>) -> Bytes {
    let Some((at, fields)) = missing_fields(response, hints) else {
        return Bytes::copy_from_slice(response);
    };
    let rest = &response[at + 1..];
    let empty = rest
        .iter()
        .find(|b| !b.is_ascii_whitespace())
        .is_some_and(|b| *b == b'}');
    let fields = if empty {
        &fields[..fields.len() - 1]
    } else {
        &fields[..]
    };
    let mut out = Vec::with_capacity(response.len() + fields.len());
    out.extend_from_slice(&response[..=at]);
    out.extend_from_slice(fields.as_bytes());
    out.extend_from_slice(rest);
    Bytes::from(out)
}

/// Where the `result` object of `response` opens, and the members it lacks (each followed by
/// a comma); `None` when there is nothing to add.
fn missing_fields(response: &[u8], hints: Option<CacheHints>) -> Option<(usize, String)> {
    let text = std::str::from_utf8(response).ok()?;
    let raw: &RawValue = serde_json::from_str(text).ok()?;
    let response = RawObject::parse(raw).ok()?;
    let result = response.get("result")?;
    if !result.get().starts_with('{') {
        return None;
    }
    // `result` borrows from `text`: its address gives its offset.
    let at = result.get().as_ptr() as usize - text.as_ptr() as usize;
    let members = RawObject::parse(result).ok()?;
    let mut fields = String::new();
    if members.get("resultType").is_none() {
        fields.push_str("\"resultType\":\"complete\",");
    }
    if let Some(h) = hints {
        if members.get("ttlMs").is_none() {
            fields.push_str(&format!("\"ttlMs\":{},", h.ttl_ms));
        }
        if members.get("cacheScope").is_none() {
            fields.push_str(if h.public {
                "\"cacheScope\":\"public\","
            } else {
                "\"cacheScope\":\"private\","
            });
        }
    }
    (!fields.is_empty()).then_some((at, fields))
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used)]
    use super::*;
    use serde_json::json;

    fn parsed(b: &[u8]) -> Value {
        serde_json::from_slice(b).unwrap()
    }

    #[test]
    fn complete_adds_result_type_and_hints_once() {
        let r = complete(br#"{"jsonrpc":"2.0","id":1,"result":{"tools":[]}}"#, None);
        assert_eq!(
            parsed(&r),
            json!({"jsonrpc":"2.0","id":1,"result":{"resultType":"complete","tools":[]}})
        );
        let r = complete(
            br#"{"jsonrpc":"2.0","id":1,"result":{}}"#,
            Some(CacheHints {
                ttl_ms: 5,
                public: false,
            }),
        );
        assert_eq!(
            parsed(&r)["result"],
            json!({"resultType":"complete","ttlMs":5,"cacheScope":"private"})
        );
        // What the result says itself is kept.
        let given =
            br#"{"jsonrpc":"2.0","id":"a","result":{"resultType":"input_required","ttlMs":9}}"#;
        let r = complete(
            given,
            Some(CacheHints {
                ttl_ms: 5,
                public: true,
            }),
        );
        assert_eq!(
            parsed(&r)["result"],
            json!({"resultType":"input_required","ttlMs":9,"cacheScope":"public"})
        );
        // Errors pass unchanged.
        let e = br#"{"jsonrpc":"2.0","id":1,"error":{"code":-1,"message":"x"}}"#;
        assert_eq!(&complete(e, None)[..], &e[..]);
        // A nested "resultType" inside a value is not the result's own.
        let nested = br#"{"jsonrpc":"2.0","id":1,"result":{"content":[{"resultType":"x"}]}}"#;
        assert_eq!(
            parsed(&complete(nested, None))["result"]["resultType"],
            "complete"
        );
    }

    #[test]
    fn legacy_resource_not_found_becomes_invalid_params_with_the_uri() {
        let legacy = br#"{"jsonrpc":"2.0","id":7,"error":{"code":-32002,"message":"Resource not found: x"}}"#;
        let out = resource_not_found(legacy, "up+test://x").unwrap();
        assert_eq!(
            parsed(&out),
            json!({"jsonrpc":"2.0","id":7,"error":{"code":-32602,"message":"Resource not found: x",
                   "data":{"uri":"up+test://x"}}})
        );
        // The upstream's own data is kept, its uri too.
        let with_data = br#"{"jsonrpc":"2.0","id":"a","error":{"code":-32002,"message":"m","data":{"uri":"u","why":1}}}"#;
        assert_eq!(
            parsed(&resource_not_found(with_data, "other").unwrap())["error"]["data"],
            json!({"uri":"u","why":1})
        );
        // Anything else is left alone: other codes, results mentioning the number.
        let other = br#"{"jsonrpc":"2.0","id":1,"error":{"code":-32602,"message":"-32002"}}"#;
        assert!(resource_not_found(other, "u").is_none());
        let result = br#"{"jsonrpc":"2.0","id":1,"result":{"code":-32002}}"#;
        assert!(resource_not_found(result, "u").is_none());
    }

    #[test]
    fn header_values_decode_the_base64_sentinel() {
        assert_eq!(
            decode_header_value(b"us-west1").as_deref(),
            Some("us-west1")
        );
        assert_eq!(
            decode_header_value(b"=?base64?SGVsbG8sIOS4lueVjA==?=").as_deref(),
            Some("Hello, 世界")
        );
        assert_eq!(
            decode_header_value(b"=?base64?PT9iYXNlNjQ/bGl0ZXJhbD89?=").as_deref(),
            Some("=?base64?literal?=")
        );
        assert_eq!(decode_header_value(b"=?base64?***?="), None);
        assert_eq!(decode_header_value("é".as_bytes()), None);
        assert_eq!(
            decode_header_value(b" \tus-west1 ").as_deref(),
            Some("us-west1")
        );
        assert_eq!(decode_header_value(b"=?base64?SGVsbG8?="), None, "padding");
    }

    #[test]
    fn meta_requires_version_and_capabilities() {
        let p = RawValue::from_string(
            json!({"_meta":{
                "io.modelcontextprotocol/protocolVersion":"2026-07-28",
                "io.modelcontextprotocol/clientCapabilities":{"elicitation":{}},
                "io.modelcontextprotocol/logLevel":"info"}})
            .to_string(),
        )
        .unwrap();
        let m = RequestMeta::read(Some(&p)).unwrap();
        assert_eq!(m.protocol_version, "2026-07-28");
        assert!(m.has_capability("elicitation"));
        assert!(!m.has_capability("sampling"));
        assert_eq!(m.log_level.as_deref(), Some("info"));
        assert_eq!(
            RequestMeta::peek_version(Some(&p)).as_deref(),
            Some("2026-07-28")
        );
        let p = RawValue::from_string(
            json!({"_meta":{"io.modelcontextprotocol/protocolVersion":"2026-07-28"}}).to_string(),
        )
        .unwrap();
        assert_eq!(
            RequestMeta::read(Some(&p)).unwrap_err(),
            MetaError::Missing(meta::CLIENT_CAPABILITIES)
        );
        assert!(RequestMeta::read(None).is_err());
    }

    #[test]
    fn header_values_are_encoded_when_not_plain() {
        assert_eq!(encode_header_value("get_weather"), "get_weather");
        for v in ["héllo", " padded", "=?base64?x?="] {
            let enc = encode_header_value(v);
            assert!(enc.starts_with("=?base64?"), "{enc}");
            assert_eq!(decode_header_value(enc.as_bytes()).as_deref(), Some(v));
        }
    }
}
