//! The security front of a tenant endpoint, applied to every request before anything else:
//! Host validation (DNS-rebinding protection), Origin validation, and bearer-token
//! authentication. Each failure maps to its status: 403, 403, 401/403/400.

use axum::http::request::Parts;
use axum::http::{HeaderMap, header};

use crate::auth::{Principal, ResourceIdentity};
use crate::error::GatewayError;
use crate::gateway::Gateway;
use crate::tenant::Tenant;

/// Host names a loopback-bound gateway accepts when no `allowed_hosts` are configured.
const LOOPBACK_HOSTS: [&str; 3] = ["localhost", "127.0.0.1", "[::1]"];

/// Checks Host and Origin, then authenticates. Returns who is calling.
pub async fn admit(
    gateway: &Gateway,
    tenant: &Tenant,
    parts: &Parts,
) -> Result<Principal, GatewayError> {
    let host = request_host(parts).unwrap_or_default().to_ascii_lowercase();
    check_host(gateway, tenant, &host)?;
    check_origin(gateway, tenant, &parts.headers, &host, tls(parts))?;
    match &tenant.authenticator {
        None => Ok(Principal::anonymous()),
        Some(auth) => {
            let resource = resource_identity(tenant, parts, &host);
            auth.authenticate(&parts.headers, &parts.uri, &resource)
                .await
        }
    }
}

/// The canonical resource of the endpoint: configured, or derived from the request.
pub fn resource_identity(tenant: &Tenant, parts: &Parts, host: &str) -> ResourceIdentity {
    match &tenant.config.resource {
        Some(uri) => ResourceIdentity::new(uri.clone()),
        None => ResourceIdentity::from_request(tls(parts), host, &tenant.config.path),
    }
}

/// The Host header (HTTP/1.1) or the URI authority (HTTP/2 `:authority`). A request with
/// several Host headers has none (it is refused).
pub fn request_host(parts: &Parts) -> Option<&str> {
    let mut hosts = parts.headers.get_all(header::HOST).iter();
    match (hosts.next(), hosts.next()) {
        (Some(h), None) => h.to_str().ok(),
        (Some(_), Some(_)) => None,
        (None, _) => parts.uri.authority().map(|a| a.as_str()),
    }
}

/// Whether the request came over TLS (hand-built requests without `ConnInfo` did not).
fn tls(parts: &Parts) -> bool {
    parts
        .extensions
        .get::<crate::listener::ConnInfo>()
        .is_some_and(|c| c.tls)
}

/// `host` without its port (IPv6 literals keep their brackets).
fn hostname(host: &str) -> &str {
    if host.starts_with('[') {
        return host
            .split_once(']')
            .map_or(host, |(h, _)| &host[..=h.len()]);
    }
    host.rsplit_once(':').map_or(host, |(h, _)| h)
}

fn host_allowed(gateway: &Gateway, tenant: &Tenant, host: &str) -> bool {
    if host.is_empty() {
        return false;
    }
    let allowed = &tenant.config.allowed_hosts;
    if allowed.is_empty() {
        return !gateway.listens_on_loopback() || LOOPBACK_HOSTS.contains(&hostname(host));
    }
    allowed
        .iter()
        .any(|a| a == host || (!a.contains(':') || a.ends_with(']')) && a == hostname(host))
}

fn check_host(gateway: &Gateway, tenant: &Tenant, host: &str) -> Result<(), GatewayError> {
    if host_allowed(gateway, tenant, host) {
        return Ok(());
    }
    tracing::warn!(tenant = %tenant.name, host = %host.chars().take(100).collect::<String>(), "request refused: Host not allowed");
    Err(GatewayError::HostNotAllowed {
        host: host.chars().take(100).collect(),
    })
}

fn check_origin(
    gateway: &Gateway,
    tenant: &Tenant,
    headers: &HeaderMap,
    host: &str,
    tls: bool,
) -> Result<(), GatewayError> {
    let Some(origin) = headers.get(header::ORIGIN) else {
        return Ok(());
    };
    let origin = origin
        .to_str()
        .unwrap_or("")
        .trim_end_matches('/')
        .to_ascii_lowercase();
    let allowed = &tenant.config.allowed_origins;
    let same_origin = {
        let scheme = if tls { "https://" } else { "http://" };
        origin.strip_prefix(scheme) == Some(host)
    };
    let ok = same_origin
        || allowed.contains(&origin)
        || (allowed.is_empty()
            && gateway.listens_on_loopback()
            && ["http://", "https://"].iter().any(|s| {
                origin
                    .strip_prefix(s)
                    .is_some_and(|rest| LOOPBACK_HOSTS.contains(&hostname(rest)))
            }));
    if ok {
        return Ok(());
    }
    tracing::warn!(tenant = %tenant.name, origin = %origin.chars().take(100).collect::<String>(), "request refused: Origin not allowed");
    Err(GatewayError::OriginNotAllowed {
        origin: origin.chars().take(100).collect(),
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn hostnames() {
        assert_eq!(hostname("localhost:8080"), "localhost");
        assert_eq!(hostname("127.0.0.1"), "127.0.0.1");
        assert_eq!(hostname("[::1]:9"), "[::1]");
        assert_eq!(hostname("[::1]"), "[::1]");
        assert_eq!(hostname("evil.example.com"), "evil.example.com");
    }
}
