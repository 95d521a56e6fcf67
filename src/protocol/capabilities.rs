//! Merging the `ServerCapabilities` of several upstreams into the one server the gateway
//! presents, and the instructions text that goes with it.

use serde_json::{Map, Value};

/// Capabilities the gateway can honour when several upstreams stand behind one endpoint.
/// Each is present when at least one upstream offers it; boolean sub-capabilities are OR-ed,
/// and the router answers per upstream for the rest (a subscription to a resource whose
/// upstream lacks `resources.subscribe` is refused, never forwarded; `resources/metadata`,
/// which `resources` implies (SEP-2093), is answered from the catalog for upstreams without it).
/// Capabilities the gateway cannot route are left out; `experimental` entries are merged key
/// by key (first upstream wins on a clash); `tasks` and, of `extensions`, the tasks extension
/// are merged by `protocol::tasks` (tasks are routed by their id).
pub fn merge<'a>(upstreams: impl IntoIterator<Item = &'a Value>) -> Value {
    let mut out = Map::new();
    for caps in upstreams {
        let Some(caps) = caps.as_object() else {
            continue;
        };
        for key in ["tools", "prompts", "resources", "logging", "completions"] {
            if let Some(Value::Object(sub)) = caps.get(key) {
                let entry = out.entry(key).or_insert_with(|| Value::Object(Map::new()));
                if let Value::Object(merged) = entry {
                    for flag in ["listChanged", "subscribe"] {
                        if sub.get(flag) == Some(&Value::Bool(true)) {
                            merged.insert(flag.to_owned(), Value::Bool(true));
                        }
                    }
                }
            }
        }
        super::tasks::merge_extension(caps, &mut out);
        super::tasks::merge_session_tasks(caps, &mut out);
        if let Some(Value::Object(exp)) = caps.get("experimental") {
            let entry = out
                .entry("experimental")
                .or_insert_with(|| Value::Object(Map::new()));
            if let Value::Object(merged) = entry {
                for (k, v) in exp {
                    merged.entry(k.clone()).or_insert_with(|| v.clone());
                }
            }
        }
    }
    Value::Object(out)
}

/// The tenant's own instructions followed by each upstream's under a `## <name>` heading.
/// `None` when there is nothing to say.
pub fn merge_instructions<'a>(
    own: Option<&str>,
    upstreams: impl IntoIterator<Item = (&'a str, Option<&'a str>)>,
) -> Option<String> {
    let mut text = own.map(str::trim).unwrap_or_default().to_owned();
    for (name, instr) in upstreams {
        let Some(instr) = instr.map(str::trim).filter(|s| !s.is_empty()) else {
            continue;
        };
        if !text.is_empty() {
            text.push_str("\n\n");
        }
        text.push_str("## ");
        text.push_str(name);
        text.push('\n');
        text.push_str(instr);
    }
    (!text.is_empty()).then_some(text)
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    #[test]
    fn merge_unions_and_ors_flags() {
        let a = json!({"tools": {"listChanged": false}, "logging": {}, "sampling": {}});
        let b = json!({"tools": {"listChanged": true}, "resources": {"subscribe": true},
                       "experimental": {"x": {"a": 1}}});
        let merged = merge([&a, &b]);
        assert_eq!(
            merged,
            json!({"tools": {"listChanged": true}, "logging": {}, "resources": {"subscribe": true},
                   "experimental": {"x": {"a": 1}}})
        );
    }

    #[test]
    fn instructions_get_headings_per_upstream() {
        let text = merge_instructions(
            Some("Acme tools."),
            [
                ("files", Some("Use read.")),
                ("empty", None),
                ("git", Some("  ")),
            ],
        );
        assert_eq!(text.as_deref(), Some("Acme tools.\n\n## files\nUse read."));
        assert_eq!(merge_instructions(None, [("a", None)]), None);
    }
}
