//! Per-tool authorization: which callers may see and call which tools, by scope and claim.
//! A tool matching several policies must satisfy all of them; a tool matching none is open.

use crate::auth::Principal;
use crate::config::ToolPolicy;

/// What a caller may do with a tool.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Decision {
    Allow,
    /// The caller lacks these scopes: the tool is hidden from lists, and a call is answered
    /// with 403 `insufficient_scope` naming them (so the client can step up).
    MissingScopes(Vec<String>),
    /// The caller lacks a required claim: the tool is hidden and a call is an unknown tool.
    Hidden,
}

/// The compiled policies of a tenant.
#[derive(Debug, Clone, Default)]
pub struct ToolPolicies {
    rules: Vec<ToolPolicy>,
}

impl ToolPolicies {
    pub fn new(rules: &[ToolPolicy]) -> ToolPolicies {
        ToolPolicies {
            rules: rules.to_vec(),
        }
    }

    pub fn is_empty(&self) -> bool {
        self.rules.is_empty()
    }

    /// The decision for `tool` (its public name) and `principal`.
    pub fn decide(&self, tool: &str, principal: &Principal) -> Decision {
        let mut missing: Vec<String> = Vec::new();
        for rule in self
            .rules
            .iter()
            .filter(|r| r.tools.iter().any(|p| glob(p, tool)))
        {
            if rule
                .claims
                .iter()
                .any(|(name, value)| !principal.has_claim(name, value))
            {
                return Decision::Hidden;
            }
            for scope in &rule.scopes {
                if !principal.scopes.contains(scope) && !missing.contains(scope) {
                    missing.push(scope.clone());
                }
            }
        }
        if missing.is_empty() {
            Decision::Allow
        } else {
            Decision::MissingScopes(missing)
        }
    }
}

/// `*` matches any run of characters (including none); everything else matches itself.
pub fn glob(pattern: &str, text: &str) -> bool {
    let mut parts = pattern.split('*');
    let first = parts.next().unwrap_or("");
    let Some(mut rest) = text.strip_prefix(first) else {
        return false;
    };
    let parts: Vec<&str> = parts.collect();
    let Some((last, middle)) = parts.split_last() else {
        return rest.is_empty();
    };
    for part in middle {
        match rest.find(part) {
            Some(i) => rest = &rest[i + part.len()..],
            None => return false,
        }
    }
    rest.len() >= last.len() && rest.ends_with(last)
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::collections::BTreeMap;

    #[test]
    fn globs() {
        assert!(glob("files__*", "files__read"));
        assert!(glob("*", "anything"));
        assert!(glob("a*b*c", "a-x-b-y-c"));
        assert!(glob("exact", "exact"));
        assert!(!glob("exact", "exact2"));
        assert!(!glob("files__*", "files_read"));
        assert!(glob("*__write", "files__write"));
        assert!(!glob("*__write", "files__write2"));
        assert!(!glob("a*bc", "abc_"));
        assert!(glob("a*a", "aa"));
        assert!(!glob("a*a", "a"));
    }

    fn principal(scopes: &[&str], claims: serde_json::Value) -> Principal {
        let mut p = Principal::anonymous();
        p.scopes = scopes.iter().map(|s| s.to_string()).collect();
        p.claims = claims.as_object().cloned().unwrap_or_default();
        p
    }

    #[test]
    fn decisions() {
        let policies = ToolPolicies::new(&[
            ToolPolicy {
                tools: vec!["files__write*".into()],
                scopes: vec!["files:write".into()],
                claims: BTreeMap::new(),
            },
            ToolPolicy {
                tools: vec!["admin__*".into(), "files__write_all".into()],
                scopes: vec!["admin".into()],
                claims: BTreeMap::from([("groups".into(), "admins".into())]),
            },
        ]);
        let reader = principal(&["mcp"], serde_json::json!({"groups": "users"}));
        let writer = principal(
            &["mcp", "files:write"],
            serde_json::json!({"groups": ["users"]}),
        );
        let admin = principal(
            &["files:write", "admin"],
            serde_json::json!({"groups": ["admins"]}),
        );
        assert_eq!(policies.decide("files__read", &reader), Decision::Allow);
        assert_eq!(
            policies.decide("files__write", &reader),
            Decision::MissingScopes(vec!["files:write".into()])
        );
        assert_eq!(policies.decide("files__write", &writer), Decision::Allow);
        assert_eq!(policies.decide("admin__reset", &writer), Decision::Hidden);
        assert_eq!(
            policies.decide("files__write_all", &writer),
            Decision::Hidden
        );
        assert_eq!(policies.decide("files__write_all", &admin), Decision::Allow);
        assert_eq!(policies.decide("admin__reset", &admin), Decision::Allow);
    }
}
