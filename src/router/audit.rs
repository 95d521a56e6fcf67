//! Audit events of the tool calls the router refuses before any upstream sees them (an unknown
//! tool, a policy's refusal), in the shape of every tool call's event (`switchyard::audit`).

use std::borrow::Cow;

use crate::auth::Principal;
use crate::tenant::Tenant;

/// Logs a refused `tools/call`: `upstream` is `-` when no upstream owns `tool` (then the
/// public name), otherwise the owner and its own name; `outcome` says why.
pub(super) fn refused(
    tenant: &Tenant,
    principal: &Principal,
    upstream: &str,
    tool: &str,
    outcome: &'static str,
) {
    tracing::info!(
        target: "switchyard::audit",
        tenant = %tenant.name,
        user = %principal.user,
        tool = %printable(tool),
        upstream = %upstream,
        outcome = outcome,
        duration_ms = 0u64,
        "tool call"
    );
}

/// The longest tool name an audit event repeats from a client.
const MAX_LOGGED_NAME: usize = 128;

/// A client's name as it may go into a log line: control characters replaced (no forged
/// lines in text logs) and cut at `MAX_LOGGED_NAME` characters.
fn printable(name: &str) -> Cow<'_, str> {
    let clean = name.chars().count() <= MAX_LOGGED_NAME && !name.chars().any(char::is_control);
    if clean {
        return Cow::Borrowed(name);
    }
    Cow::Owned(
        name.chars()
            .take(MAX_LOGGED_NAME)
            .map(|c| if c.is_control() { '\u{fffd}' } else { c })
            .collect(),
    )
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn names_from_clients_cannot_forge_lines_or_flood_the_log() {
        assert_eq!(printable("echo"), "echo");
        assert_eq!(printable("a\nb\rc"), "a\u{fffd}b\u{fffd}c");
        let long = "x".repeat(10_000);
        assert_eq!(printable(&long).chars().count(), MAX_LOGGED_NAME);
    }
}
