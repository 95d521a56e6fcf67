//! The rules a tool definition must meet to be offered to clients: the tool-name rules here,
//! the `x-mcp-header` constraints in `param_headers.rs`. A tool that breaks them is left out
//! (with a warning by the caller).

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

#[cfg(test)]
mod tests {
    use super::*;

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
}
