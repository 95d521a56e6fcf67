//! Resource requests that depend on what the owning upstream offers: `resources/metadata`
//! (SEP-2093), answered from the gateway's catalog for upstreams that do not implement it, and
//! subscriptions, never forwarded to an upstream that did not advertise them, recorded in the
//! session once accepted, and followed again on a connection a continued session shares.

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
                req.id.get(),
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

/// Records in the session, once the upstream's answer is a result, the subscription (`on`) or
/// unsubscription of the upstream's own `uri`: the session record keeps it, and a new
/// upstream session gets it again (`upstream::restore`, `rejoin`).
pub(super) fn recorded(
    reply: Reply,
    session: &Arc<LiveSession>,
    upstream: &Upstream,
    uri: &str,
    on: bool,
) -> Reply {
    let (session, upstream, uri) = (
        Arc::downgrade(session),
        upstream.name().to_owned(),
        uri.to_owned(),
    );
    let record = move |body: &[u8]| {
        let accepted = matches!(
            jsonrpc::parse(body),
            Ok(jsonrpc::Message::Response(jsonrpc::Response {
                outcome: Outcome::Result(_),
                ..
            }))
        );
        if accepted && let Some(s) = session.upgrade() {
            s.set_subscribed(&upstream, &uri, on);
        }
    };
    match reply {
        Reply::Json(body) => {
            record(&body);
            Reply::Json(body)
        }
        Reply::Stream(stream) => Reply::Stream(stream.on_final(Box::new(move |body| {
            record(body);
            None
        }))),
    }
}

/// A session continued on this replica follows again the resources it subscribed to at
/// `upstream`, when its connection there is one it does not own: a shared process (the
/// upstream is subscribed if no session of this replica was) or a stateless upstream's
/// subscription. A dedicated connection replays them itself on its new upstream session.
pub(super) async fn rejoin(
    session: &Arc<LiveSession>,
    upstream: &Upstream,
    conn: &Arc<Connection>,
) {
    if !conn.is_shared() && !conn.is_stateless() {
        return;
    }
    for uri in session.subscriptions(upstream.name()) {
        if conn.is_stateless() {
            conn.follow_resource(&uri, session, true);
            continue;
        }
        if !conn.add_subscriber(&uri, session) {
            continue;
        }
        let Ok(params) = RawValue::from_string(serde_json::json!({ "uri": uri }).to_string())
        else {
            continue;
        };
        match conn
            .call(
                "resources/subscribe",
                Some(&params),
                upstream.info.request_timeout,
            )
            .await
        {
            Ok(InternalReply::Result(_)) => {}
            Ok(InternalReply::Error(e)) => {
                tracing::warn!(upstream = %upstream.name(), error = e.get(), "a continued session's subscription was refused")
            }
            Err(e) => {
                tracing::warn!(upstream = %upstream.name(), error = %e, "a continued session's subscription was not made")
            }
        }
    }
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
