//! Public names and URIs: how an upstream's tool, prompt and resource identifiers are
//! namespaced on a tenant endpoint, and turned back.
//!
//! Names are `<upstream><separator><name>`. Resource URIs become `<upstream>+<uri>`: upstream
//! names are valid URI scheme characters, so the result is still a URI (scheme
//! `<upstream>+<scheme>`), and the first `+` splits it back.

use std::sync::Arc;

use crate::error::GatewayError;
use crate::tenant::Tenant;
use crate::upstream::Upstream;

/// The upstream owning a public URI, and the upstream's own URI. Scheme matching is
/// case-insensitive, as URI schemes are.
pub fn split_uri<'t, 'u>(
    tenant: &'t Tenant,
    public: &'u str,
) -> Option<(&'t Arc<Upstream>, &'u str)> {
    if !tenant.prefixed {
        return match &*tenant.upstreams {
            [only] => Some((only, public)),
            _ => None,
        };
    }
    let (prefix, rest) = public.split_once('+')?;
    let upstream = tenant
        .upstreams
        .iter()
        .find(|u| u.name().eq_ignore_ascii_case(prefix))?;
    Some((upstream, rest))
}

fn upstream_list(tenant: &Tenant) -> String {
    tenant
        .upstreams
        .iter()
        .map(|u| u.name())
        .collect::<Vec<_>>()
        .join(", ")
}

/// -32602 for a tool or prompt name no upstream owns, saying how names are formed here.
pub fn unknown_name(tenant: &Tenant, what: &str, name: &str) -> GatewayError {
    let hint = if tenant.prefixed {
        format!(
            "names on this endpoint are <upstream>{}<name> with upstream one of: {}; list them with {}s/list",
            tenant.separator(),
            upstream_list(tenant),
            what
        )
    } else {
        format!("list the available ones with {what}s/list")
    };
    GatewayError::InvalidParams(format!("Unknown {what}: {name:?} ({hint})"))
}

/// -32602 for a resource URI no upstream owns (with the URI in `data.uri`, SEP-2164), saying
/// how URIs are formed here.
pub fn unknown_uri(tenant: &Tenant, uri: &str) -> GatewayError {
    let hint = if tenant.prefixed {
        format!(
            " (resource URIs on this endpoint are <upstream>+<uri> with upstream one of: {}; list them with resources/list)",
            upstream_list(tenant)
        )
    } else {
        " (list the available ones with resources/list)".to_owned()
    };
    GatewayError::ResourceNotFound {
        uri: uri.to_owned(),
        hint,
    }
}
