//! The stateless revision (2026-07-28) in the demo server: a request whose `_meta` names that
//! version is served without a handshake, `server/discover` answers in every era, results
//! of such requests carry `resultType` (and caching hints on lists and reads), and a tool
//! call's `Mcp-Param-*` headers must match its arguments (`x-mcp-header`).

use std::collections::HashMap;

use axum::http::HeaderMap;
use bytes::Bytes;
use serde::Deserialize;
use serde_json::value::RawValue;
use serde_json::{Map, Value, json};

use super::wire::{self, Message};
use crate::ParamHeaders;

/// The JSON-RPC error of a request whose headers disagree with its body.
const HEADER_MISMATCH: i32 = -32020;

/// The stateless revision.
pub(crate) const VERSION: &str = "2026-07-28";

/// What a stateless request says about its client in `_meta`.
#[derive(Debug, Default)]
pub(crate) struct Modern {
    /// `io.modelcontextprotocol/clientCapabilities` (an empty object when absent).
    pub(crate) capabilities: Value,
    /// `io.modelcontextprotocol/logLevel`: log messages only when present.
    pub(crate) log_level: Option<String>,
}

#[derive(Deserialize)]
struct Params {
    #[serde(default, rename = "_meta")]
    meta: Option<Map<String, Value>>,
}

impl Modern {
    /// `Some` when the request's `_meta` names the stateless revision.
    pub(crate) fn of(params: Option<&RawValue>) -> Option<Modern> {
        let p = params?;
        if !p.get().contains(VERSION) {
            return None;
        }
        let meta = serde_json::from_str::<Params>(p.get()).ok()?.meta?;
        if meta
            .get("io.modelcontextprotocol/protocolVersion")?
            .as_str()?
            != VERSION
        {
            return None;
        }
        let capabilities = meta
            .get("io.modelcontextprotocol/clientCapabilities")
            .cloned()
            .unwrap_or_else(|| json!({}));
        let log_level = meta
            .get("io.modelcontextprotocol/logLevel")
            .and_then(Value::as_str)
            .map(str::to_owned);
        Some(Modern {
            capabilities,
            log_level,
        })
    }

    /// Whether the client declared capability `name` (`elicitation`, `sampling`, `roots`).
    pub(crate) fn has(&self, name: &str) -> bool {
        self.capabilities.get(name).is_some_and(Value::is_object)
    }
}

/// The tools of a `tools/list` result that mirror arguments into headers, by name. A tool
/// whose annotations break the rules mirrors nothing here (the demo only lists valid ones).
pub(crate) fn mirrored_tools(tools_list: &[u8]) -> HashMap<String, ParamHeaders> {
    #[derive(Deserialize)]
    struct List {
        tools: Vec<Tool>,
    }
    #[derive(Deserialize)]
    #[serde(rename_all = "camelCase")]
    struct Tool {
        name: String,
        #[serde(default)]
        input_schema: Value,
    }
    let Ok(list) = serde_json::from_slice::<List>(tools_list) else {
        return HashMap::new();
    };
    list.tools
        .into_iter()
        .filter_map(|t| {
            let headers = ParamHeaders::from_schema(&t.input_schema).ok()??;
            Some((t.name, headers))
        })
        .collect()
}

/// The `HeaderMismatch` error for a stateless `tools/call` whose `Mcp-Param-*` headers do
/// not match its arguments; `None` when they do (or the message is something else).
pub(crate) fn param_header_mismatch(
    mirrored: &HashMap<String, ParamHeaders>,
    msg: &Message<'_>,
    headers: &HeaderMap,
) -> Option<Bytes> {
    #[derive(Deserialize)]
    struct Call<'a> {
        name: String,
        #[serde(default, borrow)]
        arguments: Option<&'a RawValue>,
    }
    let Message::Request { id, method, params } = msg else {
        return None;
    };
    if method != "tools/call" {
        return None;
    }
    let call: Call<'_> = serde_json::from_str(params.as_ref()?.get()).ok()?;
    let reason = mirrored
        .get(&call.name)?
        .check(headers, call.arguments)
        .err()?;
    Some(wire::error(
        Some(id),
        HEADER_MISMATCH,
        &format!("Header mismatch: {reason}"),
    ))
}

/// `server/discover`: the versions spoken, capabilities, identity and instructions.
pub(crate) fn discover(
    id: &RawValue,
    versions: &[&str],
    capabilities: &[u8],
    name: &str,
    instructions: &str,
) -> Bytes {
    let mut supported = vec![VERSION];
    supported.extend_from_slice(versions);
    let capabilities: Value = serde_json::from_slice(capabilities).unwrap_or_else(|_| json!({}));
    let result = json!({
        "resultType": "complete",
        "supportedVersions": supported,
        "capabilities": capabilities,
        "instructions": instructions,
        "ttlMs": 0,
        "cacheScope": "private",
        "_meta": {"io.modelcontextprotocol/serverInfo":
                  {"name": name, "version": env!("CARGO_PKG_VERSION")}},
    });
    wire::response(id, &serde_json::to_vec(&result).unwrap_or_default())
}

/// A reply in the stateless revision's shape: `resultType` on a result that lacks it, and
/// caching hints on lists and reads. Errors and malformed replies pass unchanged.
pub(crate) fn complete(reply: Bytes, method: &str) -> Bytes {
    let Ok(mut msg) = serde_json::from_slice::<Map<String, Value>>(&reply) else {
        return reply;
    };
    let Some(Value::Object(result)) = msg.get_mut("result") else {
        return reply;
    };
    result
        .entry("resultType")
        .or_insert_with(|| "complete".into());
    let cacheable = matches!(
        method,
        "tools/list" | "prompts/list" | "resources/list" | "resources/templates/list"
    );
    if cacheable || method == "resources/read" {
        let ttl = if cacheable { 60_000 } else { 0 };
        result.entry("ttlMs").or_insert_with(|| ttl.into());
        result
            .entry("cacheScope")
            .or_insert_with(|| if cacheable { "public" } else { "private" }.into());
    }
    serde_json::to_vec(&msg).map_or(reply, Bytes::from)
}

/// A resource-not-found error in this revision's form: `-32602` (not `-32002`) with the URI in
/// `data`. Other replies pass unchanged.
pub(crate) fn not_found(reply: Bytes, params: Option<&RawValue>) -> Bytes {
    let Ok(mut msg) = serde_json::from_slice::<Map<String, Value>>(&reply) else {
        return reply;
    };
    let Some(Value::Object(error)) = msg.get_mut("error") else {
        return reply;
    };
    if error.get("code").and_then(Value::as_i64) != Some(i64::from(wire::RESOURCE_NOT_FOUND)) {
        return reply;
    }
    let uri = params
        .and_then(|p| serde_json::from_str::<Map<String, Value>>(p.get()).ok())
        .and_then(|p| p.get("uri").cloned())
        .unwrap_or(Value::Null);
    error.insert("code".into(), wire::INVALID_PARAMS.into());
    error.insert("data".into(), json!({ "uri": uri }));
    serde_json::to_vec(&msg).map_or(reply, Bytes::from)
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used)]
    use super::*;

    fn raw(s: &str) -> Box<RawValue> {
        RawValue::from_string(s.to_owned()).unwrap()
    }

    #[test]
    fn only_requests_naming_the_version_are_stateless() {
        let p = raw(
            r#"{"_meta":{"io.modelcontextprotocol/protocolVersion":"2026-07-28","io.modelcontextprotocol/clientCapabilities":{"sampling":{}}}}"#,
        );
        let m = Modern::of(Some(&p)).unwrap();
        assert!(m.has("sampling") && !m.has("elicitation"));
        let legacy = raw(r#"{"name":"2026-07-28"}"#);
        assert!(Modern::of(Some(&legacy)).is_none());
        assert!(Modern::of(None).is_none());
    }

    #[test]
    fn fixture_tool_calls_need_matching_param_headers() {
        let mirrored = mirrored_tools(&crate::fixture_tools::list_result(true, false));
        assert_eq!(
            mirrored.keys().collect::<Vec<_>>(),
            ["test_mcp_param_headers"]
        );
        let params = raw(
            r#"{"name":"test_mcp_param_headers","arguments":{"region":"us-west1","priority":3}}"#,
        );
        let id = raw("1");
        let msg = Message::Request {
            id: &id,
            method: "tools/call".into(),
            params: Some(&params),
        };
        let mut headers = HeaderMap::new();
        headers.insert("mcp-param-region", "us-west1".parse().unwrap());
        let missing = param_header_mismatch(&mirrored, &msg, &headers).unwrap();
        let v: Value = serde_json::from_slice(&missing).unwrap();
        assert_eq!(v["error"]["code"], -32020, "{v}");
        assert!(v.to_string().contains("mcp-param-priority"), "{v}");
        headers.insert("mcp-param-priority", "3".parse().unwrap());
        assert!(param_header_mismatch(&mirrored, &msg, &headers).is_none());
        headers.insert("mcp-param-region", "us-east1".parse().unwrap());
        assert!(param_header_mismatch(&mirrored, &msg, &headers).is_some());
    }

    #[test]
    fn results_get_result_type_and_hints() {
        let out = complete(
            Bytes::from_static(br#"{"jsonrpc":"2.0","id":1,"result":{"tools":[]}}"#),
            "tools/list",
        );
        let v: Value = serde_json::from_slice(&out).unwrap();
        assert_eq!(v["result"]["resultType"], "complete");
        assert_eq!(v["result"]["ttlMs"], 60_000);
        let err =
            Bytes::from_static(br#"{"jsonrpc":"2.0","id":1,"error":{"code":1,"message":"x"}}"#);
        assert_eq!(complete(err.clone(), "tools/call"), err);
        let ir = Bytes::from_static(
            br#"{"jsonrpc":"2.0","id":1,"result":{"resultType":"input_required"}}"#,
        );
        let v: Value = serde_json::from_slice(&complete(ir, "tools/call")).unwrap();
        assert_eq!(v["result"]["resultType"], "input_required");
    }
}
