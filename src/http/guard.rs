//! The security front of a tenant endpoint, applied to every request before anything else:
//! Host validation (DNS-rebinding protection), Origin validation (also the one rule of which
//! browser origins `cors` grants), and bearer-token authentication. A Host or Origin that is
//! missing (Host), repeated or malformed is a 400 (RFC 9112 §3.2: the request is broken, there
//! is nothing to match); a well-formed one that is not allowed is a 403; token failures are
//! 401/403/400, keys out of reach 503.

use axum::http::{HeaderMap, header};

use super::authority::{Authority, Malformed, Origin};
use super::head::Head;
use crate::auth::{Principal, ResourceIdentity};
use crate::error::GatewayError;
use crate::gateway::Gateway;
use crate::protocol::header::once;
use crate::tenant::Tenant;

/// Longest host or origin echoed in a 403 and its log line.
const SHOWN: usize = 100;

/// Host, then Origin: what every request of an endpoint passes first, a CORS preflight
/// included (which goes no further, see `cors`). Returns the checked host.
pub fn check_front<'p>(
    gateway: &Gateway,
    tenant: &Tenant,
    parts: &'p Head,
) -> Result<Authority<'p>, GatewayError> {
    let host = check_host(gateway, tenant, parts)?;
    check_origin(gateway, tenant, &parts.headers, &host, parts.tls())?;
    Ok(host)
}

/// Authenticates a request whose `host` `check_front` returned. Returns who is calling.
pub async fn admit(
    gateway: &Gateway,
    tenant: &Tenant,
    parts: &Head,
    host: &Authority<'_>,
) -> Result<Principal, GatewayError> {
    match &tenant.authenticator {
        None => Ok(match parts.conn() {
            Some(conn) => {
                let client = super::client_addr::client_address(
                    conn.remote.ip(),
                    &parts.headers,
                    &gateway.trusted_proxies,
                );
                Principal::anonymous().charged_to(super::client_addr::budget_key(client))
            }
            // A request built in-process (tests driving the router directly) has no peer.
            None => Principal::anonymous(),
        }),
        Some(auth) => {
            let resource = resource_identity(tenant, parts, host);
            auth.authenticate(&parts.headers, &parts.uri, &resource)
                .await
        }
    }
}

/// The request's host, if the tenant accepts it: 400 when it is missing, repeated, malformed
/// or contradicted by the request target, 403 when it is not allowed. With no `allowed_hosts`,
/// a loopback listener accepts only loopback hosts (`localhost`, 127.0.0.0/8, `[::1]`,
/// `[::ffff:127.0.0.1]`), any other listener any host.
pub fn check_host<'p>(
    gateway: &Gateway,
    tenant: &Tenant,
    parts: &'p Head,
) -> Result<Authority<'p>, GatewayError> {
    let host = request_authority(parts).inspect_err(|e| {
        tracing::warn!(tenant = %tenant.name, error = %e, "request refused: malformed Host");
    })?;
    let allowed = &tenant.config.allowed_hosts;
    let ok = match allowed.is_empty() {
        true => !gateway.listens_on_loopback() || host.is_loopback(),
        false => allowed.iter().any(|entry| host.allowed_by(entry)),
    };
    if ok {
        return Ok(host);
    }
    let shown: String = host.to_url_authority().chars().take(SHOWN).collect();
    tracing::warn!(tenant = %tenant.name, host = %shown, "request refused: Host not allowed");
    Err(GatewayError::HostNotAllowed { host: shown })
}

/// The canonical resource of the endpoint: configured, or derived from the checked host.
pub fn resource_identity(tenant: &Tenant, parts: &Head, host: &Authority<'_>) -> ResourceIdentity {
    match &tenant.config.resource {
        Some(uri) => ResourceIdentity::new(uri.clone()),
        None => ResourceIdentity::from_request(
            parts.tls(),
            &host.to_url_authority(),
            &tenant.config.path,
        ),
    }
}

/// The resource of a request `admit` let through (for challenges raised later).
pub fn admitted_resource(tenant: &Tenant, parts: &Head) -> ResourceIdentity {
    match request_authority(parts) {
        Ok(host) => resource_identity(tenant, parts, &host),
        // Not reached after `admit`; a path-only identity rather than a made-up host.
        Err(_) => ResourceIdentity::new(tenant.config.path.clone()),
    }
}

/// The one authority the request names: its Host header (sent once), else the target's
/// authority (HTTP/2 `:authority`, or an absolute-form target). When both are present they
/// must agree (RFC 9113 §8.3.1; RFC 9112 §3.2.2 would have the target win, so a Host that
/// disagrees is refused rather than either one trusted).
fn request_authority(parts: &Head) -> Result<Authority<'_>, GatewayError> {
    let sent = once(&parts.headers, &header::HOST)
        .map_err(|_| GatewayError::BadHost("the Host header must appear once"))?;
    let target = parts.uri.authority().map(|a| a.as_str());
    let text = match (sent, target) {
        (Some(value), _) => value
            .to_str()
            .map_err(|_| GatewayError::BadHost("the Host header must be visible ASCII"))?,
        (None, Some(target)) => target,
        (None, None) => return Err(GatewayError::BadHost("the request names no host")),
    };
    let host =
        Authority::parse_request(text).map_err(|Malformed(why)| GatewayError::BadHost(why))?;
    if sent.is_some()
        && let Some(target) = target
    {
        let named = Authority::parse_request(target)
            .map_err(|Malformed(why)| GatewayError::BadHost(why))?;
        if !named.same_as(&host, parts.tls()) {
            return Err(GatewayError::BadHost(
                "the Host header and the request target name different hosts",
            ));
        }
    }
    Ok(host)
}

/// A request without `Origin` passes (not a browser, or same-origin GET). One with it must be
/// the endpoint's own origin, or listed, or (nothing listed, loopback listener) a loopback one.
fn check_origin(
    gateway: &Gateway,
    tenant: &Tenant,
    headers: &HeaderMap,
    host: &Authority<'_>,
    tls: bool,
) -> Result<(), GatewayError> {
    let value = once(headers, &header::ORIGIN)
        .map_err(|_| GatewayError::BadHeader("the Origin header must appear once".into()))?;
    let Some(value) = value else {
        return Ok(());
    };
    let text = value.to_str().unwrap_or_default();
    let origin = Origin::parse(text)
        .map_err(|Malformed(why)| GatewayError::BadHeader(format!("invalid Origin: {why}")))?;
    let allowed = &tenant.config.allowed_origins;
    let ok = origin.is(tls, host)
        || allowed.iter().any(|entry| origin.allowed_by(entry))
        || (allowed.is_empty() && gateway.listens_on_loopback() && origin.is_loopback());
    if ok {
        return Ok(());
    }
    let shown: String = text
        .chars()
        .take(SHOWN)
        .collect::<String>()
        .to_ascii_lowercase();
    tracing::warn!(tenant = %tenant.name, origin = %shown, "request refused: Origin not allowed");
    Err(GatewayError::OriginNotAllowed { origin: shown })
}
