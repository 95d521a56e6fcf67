//! Resource requests that depend on what the owning upstream offers: `resources/metadata`
//! (SEP-2093), answered from the gateway's catalog for upstreams that do not implement it, and
//! subscriptions, never forwarded to an upstream that did not advertise them.

use std::sync::Arc;

use bytes::Bytes;
use serde_json::value::RawValue;

use super::{Reply, catalog, ensure_link, params_object, read_slot, required_uri, resolve_uri};
use crate::auth::Principal;
use crate::error::GatewayError;
use crate::gateway::Gateway;
use crate::jsonrpc::{self, Outcome, Request};
use crate::protocol::rewrite::{self, ResultShape};
use crate::session::LiveSession;
use crate::tenant::Tenant;
use crate::upstream::{Connection, InternalReply, Upstream};

/// `resources/metadata`: routed by URI like a read. The owner's own answer when it implements
/// the method (its `resource.uri` namespaced); when it answers "method not found" (servers of
/// the revisions before SEP-2093), the `Resource` its list gives (as `resources/list` shows
/// it); else -32602 "resource not found" with the URI in `data.uri`.
pub(super) async fn metadata(
    gateway: &Gateway,
    tenant: &Arc<Tenant>,
    session: &Arc<LiveSession>,
    principal: &Principal,
    req: &Request<'_>,
) -> Result<Reply, GatewayError> {
    let mut params = params_object(req)?;
    let uri = required_uri(&params)?;
    let (upstream, own) = resolve_uri(tenant, session, &uri).await?;
    let not_found = || GatewayError::ResourceNotFound {
        uri: uri.clone(),
        hint: String::new(),
    };
    let conn = ensure_link(session, upstream).await?;
    if !offers(&conn, "resources", None) {
        return Err(not_found());
    }
    // Taken like a read's (the same work at the upstream), held until the answer.
    let slot = read_slot(gateway, tenant, principal, upstream, None).await?;
    params.set("uri", jsonrpc::raw_string(&own));
    let params = params.to_raw();
    let reply = conn
        .call(
            req.method.as_ref(),
            Some(&params),
            upstream.info.request_timeout,
        )
        .await?;
    drop(slot);
    let result = match reply {
        InternalReply::Result(result) => result,
        InternalReply::Error(e) if error_code(&e) == Some(jsonrpc::code::METHOD_NOT_FOUND) => {
            // Boxed: a walk over the upstream's resource pages.
            return match Box::pin(catalog::listed_resource(session, upstream, &own)).await? {
                Some(resource) => Ok(json(req.id, &resource_result(&resource))),
                None => Err(not_found()),
            };
        }
        InternalReply::Error(e) => {
            return Ok(Reply::Json(Bytes::from(jsonrpc::response_with_id(
                req.id,
                Outcome::Error(&e),
            ))));
        }
    };
    let rewritten = upstream.info.uri_prefix.as_deref().and_then(|prefix| {
        rewrite::prefix_result_uris(&result, ResultShape::ResourceMetadata, prefix)
    });
    let result = rewritten.as_deref().unwrap_or(&*result);
    Ok(json(req.id, result.get().as_bytes()))
}

/// Refuses `resources/subscribe|unsubscribe` for a resource of an upstream that did not
/// advertise `resources.subscribe` (the gateway's merged capability says only that some
/// upstream offers them). Stateless upstreams are followed through the gateway's own
/// `subscriptions/listen`, and are not refused here.
pub(super) async fn check_subscribable(
    session: &Arc<LiveSession>,
    upstream: &Arc<Upstream>,
    uri: &str,
) -> Result<(), GatewayError> {
    let conn = ensure_link(session, upstream).await?;
    if conn.is_stateless() || offers(&conn, "resources", Some("subscribe")) {
        return Ok(());
    }
    Err(GatewayError::SubscriptionsNotOffered {
        uri: uri.to_owned(),
        upstream: upstream.name().to_owned(),
    })
}

/// Whether the upstream advertised capability `key` (and its boolean `flag`, if given).
pub(super) fn offers(conn: &Connection, key: &str, flag: Option<&str>) -> bool {
    conn.server().is_some_and(|s| {
        let Some(cap) = s.capabilities.get(key).filter(|c| c.is_object()) else {
            return false;
        };
        flag.is_none_or(|f| cap.get(f) == Some(&serde_json::Value::Bool(true)))
    })
}

fn error_code(error: &RawValue) -> Option<i64> {
    jsonrpc::RawObject::parse(error)
        .ok()?
        .get("code")
        .and_then(|c| c.get().parse().ok())
}

/// `{"resource": <the listed Resource>}`.
fn resource_result(resource: &RawValue) -> Vec<u8> {
    let mut out = Vec::with_capacity(resource.get().len() + 16);
    out.extend_from_slice(b"{\"resource\":");
    out.extend_from_slice(resource.get().as_bytes());
    out.push(b'}');
    out
}

fn json(id: &RawValue, result: &[u8]) -> Reply {
    Reply::Json(jsonrpc::result_response(id, result))
}
