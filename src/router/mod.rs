//! Method dispatch for one client message: answer it (initialize, ping, aggregated lists),
//! route it to the upstream that owns the name or URI it targets, or relay it (notifications,
//! the client's answers to server-to-client requests).

mod catalog;
mod initialize;
mod names;

use std::sync::Arc;

use bytes::Bytes;
use serde_json::value::RawValue;

pub use initialize::initialize;

use crate::error::GatewayError;
use crate::jsonrpc::{self, Notification, RawObject, Request, Response};
use crate::protocol::Method;
use crate::session::LiveSession;
use crate::tenant::Tenant;
use crate::upstream::{Connection, ForwardStream, Upstream};
use catalog::ListKind;

/// How a request is answered.
pub enum Reply {
    /// A complete response, answered by the gateway.
    Json(Bytes),
    /// A forwarded request: events until the response.
    Stream(ForwardStream),
}

/// Handles a request on an established session.
pub async fn handle_request(
    tenant: &Arc<Tenant>,
    session: &Arc<LiveSession>,
    req: &Request<'_>,
) -> Result<Reply, GatewayError> {
    let method = Method::from_name(&req.method);
    if !session.is_initialized() && method != Method::Ping {
        return Err(GatewayError::NotInitialized);
    }
    match method {
        Method::Initialize => Err(GatewayError::AlreadyInitialized),
        Method::Ping => Ok(Reply::Json(jsonrpc::result_response(req.id, b"{}"))),
        Method::ToolsList => list(tenant, session, req, ListKind::Tools).await,
        Method::PromptsList => list(tenant, session, req, ListKind::Prompts).await,
        Method::ResourcesList => list(tenant, session, req, ListKind::Resources).await,
        Method::ResourcesTemplatesList => {
            list(tenant, session, req, ListKind::ResourceTemplates).await
        }
        Method::ToolsCall => route_by_name(tenant, session, req, "tool").await,
        Method::PromptsGet => route_by_name(tenant, session, req, "prompt").await,
        Method::ResourcesRead | Method::ResourcesSubscribe | Method::ResourcesUnsubscribe => {
            route_by_uri(tenant, session, req).await
        }
        Method::CompletionComplete => route_completion(tenant, session, req).await,
        Method::LoggingSetLevel => set_level_everywhere(tenant, session, req).await,
        Method::ServerDiscover => Err(GatewayError::MethodNotFound(
            "server/discover is not available in a session negotiated with initialize".into(),
        )),
        _ if tenant.is_transparent() => {
            let upstream = &tenant.upstreams[0];
            forward(session, upstream, &req.method, req.params, req.id).await
        }
        _ => Err(GatewayError::MethodNotFound(req.method.to_string())),
    }
}

/// Handles a notification from the client.
pub async fn handle_notification(
    tenant: &Arc<Tenant>,
    session: &Arc<LiveSession>,
    n: &Notification<'_>,
) {
    match Method::from_name(&n.method) {
        Method::NotificationsInitialized => session.mark_initialized(),
        Method::NotificationsCancelled => {
            let Some(params) = n.params.and_then(|p| RawObject::parse(p).ok()) else {
                return;
            };
            let Some(request_id) = params.get("requestId") else {
                return;
            };
            let reason = params.get_str("reason");
            if let Some((conn, upstream_id)) = session.inflight(request_id.get()) {
                conn.cancel(
                    upstream_id,
                    reason.as_deref().unwrap_or("cancelled by the client"),
                );
                session.end_inflight(request_id);
            }
        }
        Method::NotificationsRootsListChanged => {
            for upstream in tenant.upstreams.iter() {
                if let Some(conn) = session.link(upstream.info.index) {
                    relay_notification(conn, &n.method, n.params);
                }
            }
        }
        _ if tenant.is_transparent() => {
            if let Some(conn) = session.link(0) {
                relay_notification(conn, &n.method, n.params);
            }
        }
        _ => {
            tracing::debug!(method = %n.method, "client notification not relayed (no single owner)");
        }
    }
}

fn relay_notification(conn: Arc<Connection>, method: &str, params: Option<&RawValue>) {
    let bytes = jsonrpc::notification(method, params);
    tokio::spawn(async move {
        if let Err(e) = conn.send_message(bytes).await {
            tracing::debug!(upstream = %conn.upstream_name(), error = %e, "notification not relayed");
        }
    });
}

/// Routes the client's answer to a server-to-client request back to the upstream that asked.
pub async fn handle_response(session: &Arc<LiveSession>, resp: &Response<'_>) {
    let Some(route) = session.take_server_request(resp.id.get()) else {
        tracing::debug!(
            id = resp.id.get(),
            "client answered a request the gateway no longer tracks"
        );
        return;
    };
    let Some(conn) = route.connection.upgrade() else {
        return;
    };
    conn.respond(&route.upstream_id, resp.outcome).await;
}

/// The session's connection to `upstream`, opening it on first use.
pub async fn ensure_link(
    session: &Arc<LiveSession>,
    upstream: &Arc<Upstream>,
) -> Result<Arc<Connection>, GatewayError> {
    let index = upstream.info.index;
    if let Some(conn) = session.link(index) {
        return Ok(conn);
    }
    let lock = session.connect_lock(index).ok_or(GatewayError::Internal)?;
    let _guard = lock.lock().await;
    if let Some(conn) = session.link(index) {
        return Ok(conn);
    }
    let (conn, owned) = upstream.connect(session).await?;
    if session.has_get_stream() {
        conn.listen();
    }
    session.set_link(index, conn.clone(), owned);
    Ok(conn)
}

/// Forwards a request to `upstream` as is (params possibly edited by the caller).
async fn forward(
    session: &Arc<LiveSession>,
    upstream: &Arc<Upstream>,
    method: &str,
    params: Option<&RawValue>,
    client_id: &RawValue,
) -> Result<Reply, GatewayError> {
    let conn = ensure_link(session, upstream).await?;
    conn.ready(upstream.info.request_timeout).await?;
    let (upstream_id, rx) = conn
        .forward(method, params, client_id, Arc::downgrade(session))
        .await?;
    session.begin_inflight(client_id, conn.clone(), upstream_id);
    Ok(Reply::Stream(ForwardStream::new(
        rx,
        conn,
        upstream_id,
        client_id.to_owned(),
        Arc::downgrade(session),
    )))
}

async fn list(
    tenant: &Arc<Tenant>,
    session: &Arc<LiveSession>,
    req: &Request<'_>,
    kind: ListKind,
) -> Result<Reply, GatewayError> {
    if tenant.is_transparent() {
        return forward(
            session,
            &tenant.upstreams[0],
            &req.method,
            req.params,
            req.id,
        )
        .await;
    }
    let result = catalog::aggregate(tenant, session, kind).await?;
    Ok(Reply::Json(jsonrpc::result_response(req.id, &result)))
}

fn params_object<'a>(req: &'a Request<'_>) -> Result<RawObject<'a>, GatewayError> {
    let params = req
        .params
        .ok_or_else(|| GatewayError::InvalidParams(format!("{} needs params", req.method)))?;
    RawObject::parse(params)
        .map_err(|_| GatewayError::InvalidParams("params must be an object".into()))
}

/// `tools/call` and `prompts/get`: the `name` selects the upstream; the prefix is stripped.
async fn route_by_name(
    tenant: &Arc<Tenant>,
    session: &Arc<LiveSession>,
    req: &Request<'_>,
    what: &str,
) -> Result<Reply, GatewayError> {
    if tenant.is_transparent() {
        return forward(
            session,
            &tenant.upstreams[0],
            &req.method,
            req.params,
            req.id,
        )
        .await;
    }
    let mut params = params_object(req)?;
    let name = params
        .get_str("name")
        .ok_or_else(|| {
            GatewayError::InvalidParams(format!("`name` (the {what} name) is required"))
        })?
        .into_owned();
    let (upstream, own) = tenant
        .split_name(&name)
        .ok_or_else(|| names::unknown_name(tenant, what, &name))?;
    let upstream = upstream.clone();
    params.set("name", jsonrpc::raw_string(own));
    let params = params.to_raw();
    forward(session, &upstream, &req.method, Some(&params), req.id).await
}

/// `resources/read|subscribe|unsubscribe`: the namespaced `uri` selects the upstream.
async fn route_by_uri(
    tenant: &Arc<Tenant>,
    session: &Arc<LiveSession>,
    req: &Request<'_>,
) -> Result<Reply, GatewayError> {
    if tenant.is_transparent() {
        return forward(
            session,
            &tenant.upstreams[0],
            &req.method,
            req.params,
            req.id,
        )
        .await;
    }
    let mut params = params_object(req)?;
    let uri = params
        .get_str("uri")
        .ok_or_else(|| GatewayError::InvalidParams("`uri` is required".into()))?
        .into_owned();
    let (upstream, own) =
        names::split_uri(tenant, &uri).ok_or_else(|| names::unknown_uri(tenant, &uri))?;
    let upstream = upstream.clone();
    params.set("uri", jsonrpc::raw_string(own));
    let params = params.to_raw();
    forward(session, &upstream, &req.method, Some(&params), req.id).await
}

/// `completion/complete`: routed by its `ref` (a prompt name or a resource URI).
async fn route_completion(
    tenant: &Arc<Tenant>,
    session: &Arc<LiveSession>,
    req: &Request<'_>,
) -> Result<Reply, GatewayError> {
    if tenant.is_transparent() {
        return forward(
            session,
            &tenant.upstreams[0],
            &req.method,
            req.params,
            req.id,
        )
        .await;
    }
    let mut params = params_object(req)?;
    let mut reference = params
        .get("ref")
        .and_then(|r| RawObject::parse(r).ok())
        .ok_or_else(|| GatewayError::InvalidParams("`ref` must be an object".into()))?;
    let kind = reference.get_str("type").map(|t| t.into_owned());
    let (upstream, field, own) = match kind.as_deref() {
        Some("ref/prompt") => {
            let name = reference
                .get_str("name")
                .ok_or_else(|| GatewayError::InvalidParams("`ref.name` is required".into()))?
                .into_owned();
            let (u, own) = tenant
                .split_name(&name)
                .ok_or_else(|| names::unknown_name(tenant, "prompt", &name))?;
            (u.clone(), "name", own.to_owned())
        }
        Some("ref/resource") => {
            let uri = reference
                .get_str("uri")
                .ok_or_else(|| GatewayError::InvalidParams("`ref.uri` is required".into()))?
                .into_owned();
            let (u, own) =
                names::split_uri(tenant, &uri).ok_or_else(|| names::unknown_uri(tenant, &uri))?;
            (u.clone(), "uri", own.to_owned())
        }
        _ => {
            return Err(GatewayError::InvalidParams(
                "`ref.type` must be \"ref/prompt\" or \"ref/resource\"".into(),
            ));
        }
    };
    reference.set(field, jsonrpc::raw_string(&own));
    let reference = reference.to_raw();
    params.set("ref", reference);
    let params = params.to_raw();
    forward(session, &upstream, &req.method, Some(&params), req.id).await
}

/// `logging/setLevel` goes to every upstream that offers logging; the gateway answers.
async fn set_level_everywhere(
    tenant: &Arc<Tenant>,
    session: &Arc<LiveSession>,
    req: &Request<'_>,
) -> Result<Reply, GatewayError> {
    if tenant.is_transparent() {
        return forward(
            session,
            &tenant.upstreams[0],
            &req.method,
            req.params,
            req.id,
        )
        .await;
    }
    let calls = tenant.upstreams.iter().map(|u| async move {
        let conn = ensure_link(session, u).await?;
        let offers = conn
            .server()
            .is_some_and(|s| s.capabilities.get("logging").is_some());
        if offers {
            conn.call(&req.method, req.params, u.info.request_timeout)
                .await?;
        }
        Ok::<(), GatewayError>(())
    });
    for (u, r) in tenant
        .upstreams
        .iter()
        .zip(futures_util::future::join_all(calls).await)
    {
        if let Err(e) = r {
            tracing::warn!(upstream = %u.name(), error = %e, "logging/setLevel not applied");
        }
    }
    Ok(Reply::Json(jsonrpc::result_response(req.id, b"{}")))
}
