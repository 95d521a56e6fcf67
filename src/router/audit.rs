//! Audit events of the tool calls the router refuses before any upstream sees them (an unknown
//! tool, a policy's refusal), in the shape of every tool call's event (`switchyard::audit`).

use crate::auth::Principal;
use crate::telemetry::printable;
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
        tenant = &*tenant.name,
        user = &*principal.user,
        tool = &*printable(tool),
        upstream,
        outcome = outcome,
        duration_ms = 0u64,
        "tool call"
    );
}
