//! Per-tool authorization: which callers may see and call which tools, by scope and claim.
//! A tool matching several policies must satisfy all of them; a tool matching none is open.
//! Policies match the tool itself — its upstream and the upstream's own name for it — never
//! the public name, which changes when prefixing turns on or the separator changes.

use crate::auth::Principal;
use crate::config::{ToolPolicy, glob};

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

    /// The decision for `tool` (the upstream's own name for it) of `upstream`, for `principal`.
    pub fn decide(&self, upstream: &str, tool: &str, principal: &Principal) -> Decision {
        let mut missing: Vec<String> = Vec::new();
        for rule in self.rules.iter().filter(|r| matches(r, upstream, tool)) {
            if rule
                .claims
                .iter()
                .any(|(name, value)| !principal.has_claim(name, value))
            {
                return Decision::Hidden;
            }
            for scope in &rule.scopes {
                if !principal.scopes().contains(scope) && !missing.contains(scope) {
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

    /// The policies (indexes in `tool_policies`) that match `tool` of `upstream`: every one
    /// the caller must satisfy to see it.
    pub fn matching(&self, upstream: &str, tool: &str) -> Vec<usize> {
        self.rules
            .iter()
            .enumerate()
            .filter(|(_, r)| matches(r, upstream, tool))
            .map(|(i, _)| i)
            .collect()
    }

    /// The policies, in config order.
    pub fn rules(&self) -> &[ToolPolicy] {
        &self.rules
    }

    /// Whether any policy concerns tools of `upstream`.
    pub fn names_upstream(&self, upstream: &str) -> bool {
        self.rules.iter().any(|r| glob(&r.upstream, upstream))
    }

    /// The policies' tool patterns for `upstream` that match none of `tools` (its own names):
    /// `(policy index, pattern)`.
    pub fn unmatched<'p>(&'p self, upstream: &str, tools: &[&str]) -> Vec<(usize, &'p str)> {
        self.rules
            .iter()
            .enumerate()
            .filter(|(_, r)| glob(&r.upstream, upstream))
            .flat_map(|(i, r)| r.tools.iter().map(move |p| (i, p.as_str())))
            .filter(|(_, p)| !tools.iter().any(|t| glob(p, t)))
            .collect()
    }
}

impl ToolPolicies {
    /// Warns about every tool pattern for `upstream` that matches none of its `tools` (its
    /// complete list): such a policy protects nothing, most likely because the upstream
    /// renamed or removed the tool. Returns how many patterns were reported.
    pub fn report_unmatched(&self, tenant: &str, upstream: &str, tools: &[&str]) -> usize {
        let unmatched = self.unmatched(upstream, tools);
        for (index, pattern) in &unmatched {
            tracing::warn!(
                target: "switchyard::config",
                tenant,
                upstream,
                policy = index,
                pattern,
                tools = tools.len(),
                "tool policy pattern matches no tool of the upstream: it protects nothing (renamed or removed tool, or a public name with a prefix?)"
            );
        }
        unmatched.len()
    }
}

fn matches(rule: &ToolPolicy, upstream: &str, tool: &str) -> bool {
    glob(&rule.upstream, upstream) && rule.tools.iter().any(|p| glob(p, tool))
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::collections::BTreeMap;

    fn principal(scopes: &[&str], claims: serde_json::Value) -> Principal {
        Principal::granted(
            "u-test".into(),
            std::sync::Arc::new(crate::auth::Grants {
                scopes: scopes.iter().map(|s| s.to_string()).collect(),
                claims: claims.as_object().cloned().unwrap_or_default(),
            }),
        )
    }

    #[test]
    fn decisions() {
        let policies = ToolPolicies::new(&[
            ToolPolicy {
                upstream: "files".into(),
                tools: vec!["write*".into()],
                scopes: vec!["files:write".into()],
                claims: BTreeMap::new(),
            },
            ToolPolicy {
                upstream: "admin".into(),
                tools: vec!["*".into()],
                scopes: vec!["admin".into()],
                claims: BTreeMap::from([("groups".into(), "admins".into())]),
            },
            ToolPolicy {
                upstream: "files".into(),
                tools: vec!["write_all".into()],
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
        assert_eq!(policies.decide("files", "read", &reader), Decision::Allow);
        assert_eq!(
            policies.decide("files", "write", &reader),
            Decision::MissingScopes(vec!["files:write".into()])
        );
        assert_eq!(policies.decide("files", "write", &writer), Decision::Allow);
        assert_eq!(policies.decide("admin", "reset", &writer), Decision::Hidden);
        assert_eq!(
            policies.decide("files", "write_all", &writer),
            Decision::Hidden
        );
        assert_eq!(
            policies.decide("files", "write_all", &admin),
            Decision::Allow
        );
        assert_eq!(policies.decide("admin", "reset", &admin), Decision::Allow);
        // Another upstream's tool of the same name is not concerned.
        assert_eq!(policies.decide("other", "write", &reader), Decision::Allow);
        assert_eq!(policies.matching("files", "write_all"), vec![0, 2]);
        assert_eq!(policies.matching("files", "read"), Vec::<usize>::new());
    }

    #[test]
    fn unmatched_patterns() {
        let policies = ToolPolicies::new(&[ToolPolicy {
            upstream: "f*".into(),
            tools: vec!["write*".into(), "delete".into()],
            scopes: vec!["s".into()],
            claims: BTreeMap::new(),
        }]);
        assert!(policies.names_upstream("files"));
        assert!(!policies.names_upstream("git"));
        assert_eq!(
            policies.unmatched("files", &["read", "write_file"]),
            vec![(0, "delete")]
        );
        assert!(policies.unmatched("git", &[]).is_empty());
    }
}
