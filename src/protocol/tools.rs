//! The rules a tool definition must meet to be offered to clients: the tool-name rules and the
//! `x-mcp-header` constraints. A tool that breaks them is left out (with a warning by the caller).

use serde_json::Value;

/// Longest tool name the spec allows.
pub const MAX_TOOL_NAME: usize = 128;

/// `Ok` when `name` is 1..=128 characters of `A-Za-z0-9_.-`.
pub fn check_name(name: &str) -> Result<(), String> {
    if name.is_empty() || name.len() > MAX_TOOL_NAME {
        return Err(format!(
            "tool names are 1 to {MAX_TOOL_NAME} characters (this one has {})",
            name.len()
        ));
    }
    if let Some(bad) = name
        .chars()
        .find(|c| !(c.is_ascii_alphanumeric() || matches!(c, '_' | '.' | '-')))
    {
        return Err(format!(
            "tool names use only A-Z, a-z, 0-9, '_', '.' and '-' (found {bad:?})"
        ));
    }
    Ok(())
}

/// Checks every `x-mcp-header` in the tool's input schema: non-empty, visible ASCII without
/// `:`, unique ignoring case, only on parameters of primitive type.
pub fn check_headers(input_schema: Option<&Value>) -> Result<(), String> {
    let Some(props) = input_schema
        .and_then(|s| s.get("properties"))
        .and_then(Value::as_object)
    else {
        return Ok(());
    };
    let mut seen: Vec<String> = Vec::new();
    for (param, schema) in props {
        let Some(header) = schema.get("x-mcp-header") else {
            continue;
        };
        let Some(header) = header.as_str() else {
            return Err(format!("x-mcp-header of {param:?} must be a string"));
        };
        if header.is_empty() {
            return Err(format!("x-mcp-header of {param:?} is empty"));
        }
        if !header
            .bytes()
            .all(|b| (0x21..=0x7e).contains(&b) && b != b':')
        {
            return Err(format!(
                "x-mcp-header {header:?} of {param:?} must be ASCII without spaces or ':'"
            ));
        }
        let lower = header.to_ascii_lowercase();
        if seen.contains(&lower) {
            return Err(format!(
                "x-mcp-header {header:?} appears more than once (case-insensitively)"
            ));
        }
        seen.push(lower);
        let primitive = matches!(
            schema.get("type").and_then(Value::as_str),
            Some("string" | "number" | "integer" | "boolean")
        );
        if !primitive {
            return Err(format!(
                "x-mcp-header {header:?} is on {param:?}, which is not a string, number or boolean"
            ));
        }
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    #[test]
    fn names() {
        assert!(check_name("getUser").is_ok());
        assert!(check_name("admin.tools.list").is_ok());
        assert!(check_name("DATA_EXPORT_v2").is_ok());
        assert!(check_name("").is_err());
        assert!(check_name("has space").is_err());
        assert!(check_name("a,b").is_err());
        assert!(check_name(&"x".repeat(129)).is_err());
        assert!(check_name(&"x".repeat(128)).is_ok());
    }

    #[test]
    fn headers() {
        let ok = json!({"type": "object", "properties": {
            "region": {"type": "string", "x-mcp-header": "Region"},
            "n": {"type": "integer", "x-mcp-header": "N"},
            "q": {"type": "string"}}});
        assert!(check_headers(Some(&ok)).is_ok());
        for bad in [
            json!({"properties": {"a": {"type": "string", "x-mcp-header": ""}}}),
            json!({"properties": {"a": {"type": "string", "x-mcp-header": "Has Space"}}}),
            json!({"properties": {"a": {"type": "string", "x-mcp-header": "a:b"}}}),
            json!({"properties": {"a": {"type": "object", "x-mcp-header": "A"}}}),
            json!({"properties": {"a": {"type": "string", "x-mcp-header": "X"},
                                  "b": {"type": "string", "x-mcp-header": "x"}}}),
            json!({"properties": {"a": {"type": "string", "x-mcp-header": 5}}}),
        ] {
            assert!(check_headers(Some(&bad)).is_err(), "{bad}");
        }
        assert!(check_headers(None).is_ok());
    }
}
