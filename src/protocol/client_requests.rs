//! What a request from a server to the client (sampling, elicitation, roots) needs the client
//! to have declared at `initialize`: the capability, and for some requests a mode or feature
//! within it (2025-11-25: elicitation's `form`/`url` modes, sampling's `tools`). `ping` and
//! methods the gateway does not know need nothing.

use std::borrow::Cow;

use serde::Deserialize;
use serde_json::Value;
use serde_json::value::RawValue;

/// What a request needs that the client did not declare.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Missing {
    /// The whole capability (`sampling`, `elicitation`, `roots`): the client cannot serve the
    /// method at all (the spec's answer: -32601).
    Capability(&'static str),
    /// A mode or feature of a declared capability (`elicitation.url`, `sampling.tools`): the
    /// request is invalid for this client (-32602, as the elicitation spec says for modes).
    Feature(&'static str),
}

/// The members of a request's params that decide what it needs.
#[derive(Deserialize, Default)]
struct Params<'a> {
    #[serde(default, borrow)]
    mode: Option<Cow<'a, str>>,
    #[serde(default, borrow)]
    tools: Option<&'a RawValue>,
}

/// Checks request `method` with `params` against the client's declared `capabilities`.
pub fn check(capabilities: &Value, method: &str, params: Option<&RawValue>) -> Result<(), Missing> {
    let declared = |name: &str| capabilities.get(name).filter(|c| !c.is_null());
    let params = || {
        params
            .and_then(|p| serde_json::from_str::<Params<'_>>(p.get()).ok())
            .unwrap_or_default()
    };
    match method {
        "sampling/createMessage" => {
            let sampling = declared("sampling").ok_or(Missing::Capability("sampling"))?;
            let with_tools = params().tools.is_some_and(|t| t.get() != "null");
            if with_tools && sampling.get("tools").is_none_or(Value::is_null) {
                return Err(Missing::Feature("sampling.tools"));
            }
            Ok(())
        }
        "elicitation/create" => {
            let elicitation = declared("elicitation").ok_or(Missing::Capability("elicitation"))?;
            let has = |mode: &str| elicitation.get(mode).is_some_and(|m| !m.is_null());
            // `elicitation: {}` (no mode listed) means form mode only.
            let form = has("form") || !has("url");
            match params().mode.as_deref() {
                None | Some("form") if !form => Err(Missing::Feature("elicitation.form")),
                Some("url") if !has("url") => Err(Missing::Feature("elicitation.url")),
                _ => Ok(()),
            }
        }
        "roots/list" => declared("roots")
            .map(|_| ())
            .ok_or(Missing::Capability("roots")),
        _ => Ok(()),
    }
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used)]
    use super::*;
    use serde_json::json;

    fn raw(v: Value) -> Box<RawValue> {
        RawValue::from_string(v.to_string()).unwrap()
    }

    #[test]
    fn each_method_needs_its_capability_and_ping_needs_none() {
        let none = json!({});
        for (method, cap) in [
            ("sampling/createMessage", "sampling"),
            ("elicitation/create", "elicitation"),
            ("roots/list", "roots"),
        ] {
            assert_eq!(check(&none, method, None), Err(Missing::Capability(cap)));
            assert_eq!(
                check(&json!({ cap: null }), method, None),
                Err(Missing::Capability(cap))
            );
            assert_eq!(check(&json!({ cap: {} }), method, None), Ok(()), "{method}");
        }
        assert_eq!(check(&none, "ping", None), Ok(()));
        assert_eq!(
            check(&none, "tasks/get", None),
            Ok(()),
            "unknown: the client's call"
        );
    }

    #[test]
    fn elicitation_modes_follow_the_declared_ones() {
        let url = raw(json!({"mode": "url", "url": "https://x.example", "message": "m"}));
        let form = raw(json!({"mode": "form", "message": "m", "requestedSchema": {}}));
        let unnamed = raw(json!({"message": "m", "requestedSchema": {}}));
        let empty = json!({"elicitation": {}});
        assert_eq!(check(&empty, "elicitation/create", Some(&form)), Ok(()));
        assert_eq!(check(&empty, "elicitation/create", Some(&unnamed)), Ok(()));
        assert_eq!(
            check(&empty, "elicitation/create", Some(&url)),
            Err(Missing::Feature("elicitation.url"))
        );
        let url_only = json!({"elicitation": {"url": {}}});
        assert_eq!(check(&url_only, "elicitation/create", Some(&url)), Ok(()));
        assert_eq!(
            check(&url_only, "elicitation/create", Some(&unnamed)),
            Err(Missing::Feature("elicitation.form"))
        );
        let both = json!({"elicitation": {"form": {}, "url": {}}});
        assert_eq!(check(&both, "elicitation/create", Some(&url)), Ok(()));
        assert_eq!(check(&both, "elicitation/create", Some(&form)), Ok(()));
    }

    #[test]
    fn sampling_with_tools_needs_sampling_tools() {
        let tools = raw(json!({"messages": [], "maxTokens": 5, "tools": [{"name": "t"}]}));
        let plain = raw(json!({"messages": [], "maxTokens": 5}));
        let sampling = json!({"sampling": {}});
        assert_eq!(
            check(&sampling, "sampling/createMessage", Some(&plain)),
            Ok(())
        );
        assert_eq!(
            check(&sampling, "sampling/createMessage", Some(&tools)),
            Err(Missing::Feature("sampling.tools"))
        );
        let with_tools = json!({"sampling": {"tools": {}}});
        assert_eq!(
            check(&with_tools, "sampling/createMessage", Some(&tools)),
            Ok(())
        );
    }
}
