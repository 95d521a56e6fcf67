//! Method dispatch for one client message: answer it (initialize, ping, aggregated lists),
//! route it to the upstream that owns the name or URI it targets, or relay it (notifications,
//! the client's answers to server-to-client requests).

mod audit;
mod catalog;
mod initialize;
pub mod mrtr;
mod names;
mod resources;
pub mod stateless;
mod task_run;
pub mod tasks;

use std::sync::Arc;

use bytes::Bytes;
use serde_json::value::RawValue;

pub use initialize::{Opening, initialize};

use crate::auth::Principal;
use crate::cluster::{BusMessage, replica_of};
use crate::error::GatewayError;
use crate::gateway::Gateway;
use crate::jsonrpc::{self, Notification, RawObject, Request, Response, SharedId};
use crate::limits::concurrency::{Call, Permit};
use crate::limits::rate::Rates;
use crate::policy::Decision;
use crate::protocol::param_headers::ParamHeaders;
use crate::protocol::rewrite::ResultShape;
use crate::protocol::{ListKind, Method, logging};
use crate::session::LiveSession;
use crate::tenant::Tenant;
use crate::upstream::{Connection, ForwardStream, Upstream};

/// How a request is answered.
pub enum Reply {
    /// A complete response, answered by the gateway.
    Json(Bytes),
    /// A forwarded request: events until the response.
    Stream(ForwardStream),
}

/// Handles a request on an established session.
pub async fn handle_request(
    gateway: &Gateway,
    tenant: &Arc<Tenant>,
    session: &Arc<LiveSession>,
    principal: &Principal,
    req: &Request<'_>,
) -> Result<Reply, GatewayError> {
    let method = Method::from_name(&req.method);
    if !session.is_initialized() && method != Method::Ping {
        return Err(GatewayError::NotInitialized);
    }
    match method {
        Method::Initialize => Err(GatewayError::AlreadyInitialized),
        Method::Ping => Ok(Reply::Json(jsonrpc::result_response(req.id, b"{}"))),
        Method::ToolsList => list(tenant, session, principal, req, ListKind::Tools).await,
        Method::PromptsList => list(tenant, session, principal, req, ListKind::Prompts).await,
        Method::ResourcesList => list(tenant, session, principal, req, ListKind::Resources).await,
        Method::ResourcesTemplatesList => {
            list(tenant, session, principal, req, ListKind::ResourceTemplates).await
        }
        Method::ToolsCall => {
            route_by_name(gateway, tenant, session, principal, req, ListKind::Tools).await
        }
        Method::PromptsGet => {
            route_by_name(gateway, tenant, session, principal, req, ListKind::Prompts).await
        }
        Method::ResourcesRead | Method::ResourcesSubscribe | Method::ResourcesUnsubscribe => {
            route_by_uri(gateway, tenant, session, principal, req).await
        }
        Method::ResourcesMetadata => {
            resources::metadata(gateway, tenant, session, principal, req).await
        }
        Method::CompletionComplete => route_completion(tenant, session, req).await,
        Method::LoggingSetLevel => set_level_everywhere(tenant, session, req).await,
        Method::ServerDiscover => Err(GatewayError::MethodNotFound(
            "server/discover is not available in a session negotiated with initialize".into(),
        )),
        _ if crate::protocol::tasks::is_task_method(&req.method)
            || (crate::protocol::tasks::is_session_task_method(&req.method)
                && !session.protocol_version.is_stateless()) =>
        {
            tasks::route(gateway, tenant, session, req).await
        }
        _ if tenant.is_transparent() => {
            let upstream = &tenant.upstreams[0];
            pass_through(session, upstream, req).await
        }
        _ => Err(GatewayError::MethodNotFound(req.method.to_string())),
    }
}

/// Handles a notification from the client.
pub async fn handle_notification(
    tenant: &Arc<Tenant>,
    session: &Arc<LiveSession>,
    n: &Notification<'_>,
    raw: &[u8],
) {
    if !act_on_notification(tenant, session, n) {
        forward_to_replica(session, n, raw).await;
    }
}

/// Acts on a client notification with what this replica holds; `false` when what it concerns
/// (a request in flight, a server-to-client request) may be on another replica.
fn act_on_notification(
    tenant: &Arc<Tenant>,
    session: &Arc<LiveSession>,
    n: &Notification<'_>,
) -> bool {
    match Method::from_name(&n.method) {
        Method::NotificationsInitialized => session.mark_initialized(),
        Method::NotificationsCancelled => {
            let Some(params) = n.params.and_then(|p| RawObject::parse(p).ok()) else {
                return true;
            };
            let Some(request_id) = params.get("requestId") else {
                return true;
            };
            let reason = params.get_str("reason");
            let Some((conn, upstream_id)) = session.inflight(request_id.get()) else {
                return false;
            };
            conn.cancel(
                upstream_id,
                reason.as_deref().unwrap_or("cancelled by the client"),
            );
            session.end_inflight(request_id.get());
        }
        Method::NotificationsProgress => {
            // Progress the client reports on a request an upstream sent it.
            let Some(mut params) = n.params.and_then(|p| RawObject::parse(p).ok()) else {
                return true;
            };
            let Some(token) = params.get("progressToken").map(|t| t.get().to_owned()) else {
                return true;
            };
            let Some((conn, original)) = session.server_progress_route(&token) else {
                return false;
            };
            params.set("progressToken", original);
            let params = params.to_raw();
            relay_notification(conn, &n.method, Some(&params));
        }
        Method::NotificationsRootsListChanged => {
            for upstream in tenant.upstreams.iter() {
                if let Some(conn) = session.link(upstream.info.id) {
                    relay_notification(conn, &n.method, n.params);
                }
            }
        }
        _ if tenant.is_transparent() => {
            if let Some(conn) = session.link(tenant.upstreams[0].info.id) {
                relay_notification(conn, &n.method, n.params);
            }
        }
        _ => {
            tracing::debug!(method = %n.method, "client notification not relayed (no single owner)");
        }
    }
    true
}

/// A cancellation or progress whose request is not on this replica: cancellations go to every
/// replica (where a request runs is not recorded), progress to the replica named in its token.
async fn forward_to_replica(session: &Arc<LiveSession>, n: &Notification<'_>, raw: &[u8]) {
    if !session.bus.is_clustered() {
        tracing::debug!(method = %n.method, "client notification for nothing in flight");
        return;
    }
    let message = String::from_utf8_lossy(raw).into_owned();
    let to = (&session.key).into();
    let sent = match Method::from_name(&n.method) {
        Method::NotificationsCancelled => {
            session
                .bus
                .broadcast(&BusMessage::Cancel { to, message })
                .await
        }
        Method::NotificationsProgress => {
            let token = n
                .params
                .and_then(|p| RawObject::parse(p).ok())
                .and_then(|p| p.get("progressToken").map(|t| t.get().to_owned()));
            match token.as_deref().and_then(replica_of) {
                Some(replica) if replica != &*session.bus.replica => {
                    session
                        .bus
                        .send_to(replica, &BusMessage::Progress { to, message })
                        .await
                }
                _ => Ok(()),
            }
        }
        _ => Ok(()),
    };
    if let Err(e) = sent {
        tracing::warn!(error = %e, "client notification not passed to the other replicas");
    }
}

/// A client message another replica received for a session live here: acted on locally,
/// never forwarded again.
pub async fn handle_forwarded(tenant: &Arc<Tenant>, session: &Arc<LiveSession>, raw: &[u8]) {
    match jsonrpc::parse(raw) {
        Ok(jsonrpc::Message::Notification(n)) => {
            act_on_notification(tenant, session, &n);
        }
        Ok(jsonrpc::Message::Response(r)) => {
            answer_locally(session, &r).await;
        }
        _ => tracing::debug!("ignoring an unexpected message from another replica"),
    }
}

/// Relays a client notification in the background, unless the upstream has not taken the
/// last [`MAX_RELAYS`](crate::upstream::MAX_RELAYS) yet: then it is dropped and counted.
fn relay_notification(conn: Arc<Connection>, method: &str, params: Option<&RawValue>) {
    let Some(slot) = conn.relay_slot() else {
        crate::metrics::get().dropped_notification("upstream_backlog");
        tracing::debug!(upstream = %conn.upstream_name(), method, "client notification dropped: the upstream has not taken the ones before it");
        return;
    };
    let bytes = jsonrpc::notification(method, params);
    tokio::spawn(async move {
        let conn = slot.connection();
        if let Err(e) = conn.send_message(bytes).await {
            tracing::debug!(upstream = %conn.upstream_name(), error = %e, "notification not relayed");
        }
    });
}

/// Routes the client's answer to a server-to-client request back to the upstream that asked.
pub async fn handle_response(session: &Arc<LiveSession>, resp: &Response<'_>, raw: &[u8]) {
    if answer_locally(session, resp).await {
        return;
    }
    // The request came from an upstream connection of another replica (named in its id).
    match replica_of(resp.id.get()) {
        Some(replica) if session.bus.is_clustered() && replica != &*session.bus.replica => {
            let message = BusMessage::Answer {
                to: (&session.key).into(),
                message: String::from_utf8_lossy(raw).into_owned(),
            };
            if let Err(e) = session.bus.send_to(replica, &message).await {
                tracing::warn!(error = %e, "client answer not passed to the replica that asked");
            }
        }
        _ => tracing::debug!(
            id = resp.id.get(),
            "client answered a request the gateway no longer tracks"
        ),
    }
}

/// Routes the client's answer to the upstream that asked, if it asked through this replica.
async fn answer_locally(session: &Arc<LiveSession>, resp: &Response<'_>) -> bool {
    let Some(route) = session.take_server_request(resp.id.get()) else {
        return false;
    };
    crate::upstream::answer(route, resp.outcome).await;
    true
}

/// The session's connection to `upstream`, opening it on first use.
pub async fn ensure_link(
    session: &Arc<LiveSession>,
    upstream: &Arc<Upstream>,
) -> Result<Arc<Connection>, GatewayError> {
    let id = upstream.info.id;
    if let Some(conn) = session.link(id) {
        return Ok(conn);
    }
    let lock = session.connect_lock(id).ok_or(GatewayError::Internal)?;
    let _guard = lock.lock().await;
    if let Some(conn) = session.link(id) {
        return Ok(conn);
    }
    // A per-session process takes a place first (reserved at `initialize`); a failed start
    // gives it back.
    let permit = match upstream.spawns_per_session() {
        true => session.process_permit()?,
        false => None,
    };
    // Boxed: the handshake's state is large and needed once per session and upstream, not
    // in every request's future.
    let (conn, owned) = Box::pin(upstream.connect(session)).await?;
    if session.has_get_stream() {
        conn.listen();
    } else if session.protocol_version.is_stateless() {
        // Stateless clients have no GET stream; their session (one per tenant and user) hears
        // what upstreams ask on theirs.
        conn.listen_for_requests();
    }
    // The request that opened the link goes out once the upstream has its GET stream: else
    // a question asked there at once (from inside the tool called) finds none open.
    conn.stream_answered().await;
    session.set_link(id, conn.clone(), owned, permit);
    // Boxed: rare (a session continued from another replica), and a round trip per resource.
    Box::pin(resources::rejoin(session, upstream, &conn)).await;
    Ok(conn)
}

/// Transparent mode's untouched request: to the one upstream, nothing renamed, no URIs to
/// namespace, no slot to take.
async fn pass_through(
    session: &Arc<LiveSession>,
    upstream: &Arc<Upstream>,
    req: &Request<'_>,
) -> Result<Reply, GatewayError> {
    forward(
        session,
        upstream,
        &req.method,
        req.params,
        req.id,
        None,
        None,
    )
    .await
}

/// Forwards a request to `upstream` as is (params possibly edited by the caller). `shape` says
/// where resource URIs sit in the result, to namespace them on the way back; `slot` (a gated
/// upstream's, taken by the caller) is held until the request ends.
async fn forward(
    session: &Arc<LiveSession>,
    upstream: &Arc<Upstream>,
    method: &str,
    params: Option<&RawValue>,
    client_id: &RawValue,
    shape: Option<ResultShape>,
    slot: Option<Permit>,
) -> Result<Reply, GatewayError> {
    let conn = ensure_link(session, upstream).await?;
    conn.ready(upstream.info.request_timeout).await?;
    // URIs of an upstream without resources cannot be read back: left as they are (asked only
    // where they would be namespaced).
    let shape = match shape {
        Some(ResultShape::ToolCall | ResultShape::PromptGet)
            if upstream.info.uri_prefix.is_some()
                && !resources::offers(&conn, "resources", None) =>
        {
            None
        }
        other => other,
    };
    let mirror = match method {
        // Boxed: a walk over the upstream's tool pages, kept out of other requests' futures.
        "tools/call" if conn.mirrors_params() => {
            Box::pin(mirrored_params(session, upstream, params)).await
        }
        _ => None,
    };
    let owner = Arc::downgrade(session);
    let client_id = SharedId::new(client_id);
    let (upstream_id, rx, span) = conn
        .forward(
            method,
            params,
            client_id.clone(),
            owner.clone(),
            shape,
            mirror,
        )
        .await?;
    session.begin_inflight(&client_id, conn.clone(), upstream_id);
    let stream = ForwardStream::new(rx, conn, upstream_id, client_id, owner, span).holding(slot);
    // Every tool call leaves an audit event when it ends.
    let tool = (method == "tools/call")
        .then(|| params.and_then(|p| RawObject::str_member(p, "name").map(|n| n.into_owned())))
        .flatten();
    Ok(Reply::Stream(match tool {
        Some(t) => stream.audited(t),
        None => stream,
    }))
}

/// The `x-mcp-header` arguments of the tool a `tools/call` (upstream-facing `params`) names.
async fn mirrored_params(
    session: &Arc<LiveSession>,
    upstream: &Arc<Upstream>,
    params: Option<&RawValue>,
) -> Option<Arc<ParamHeaders>> {
    let name = RawObject::parse(params?)
        .ok()?
        .get_str("name")?
        .into_owned();
    catalog::param_headers(session, upstream, &name).await
}

/// The `x-mcp-header` arguments of public tool `name` as the gateway lists it, for checking a
/// stateless client's `Mcp-Param-*` headers. `None` when the tool mirrors nothing, is not
/// listed, or is not the caller's to call (the call itself then fails as it would).
pub async fn tool_param_headers(
    tenant: &Arc<Tenant>,
    session: &Arc<LiveSession>,
    principal: &Principal,
    name: &str,
) -> Option<Arc<ParamHeaders>> {
    let (upstream, own) = resolve_name(tenant, session, ListKind::Tools, name)
        .await
        .ok()?;
    if !tenant.policies.is_empty()
        && tenant.policies.decide(upstream.name(), &own, principal) != Decision::Allow
    {
        return None;
    }
    Box::pin(catalog::param_headers(session, upstream, &own)).await
}

async fn list(
    tenant: &Arc<Tenant>,
    session: &Arc<LiveSession>,
    principal: &Principal,
    req: &Request<'_>,
    kind: ListKind,
) -> Result<Reply, GatewayError> {
    let cursor = match req.params {
        Some(p) => RawObject::parse(p)
            .map_err(|_| GatewayError::InvalidParams("params must be an object".into()))?
            .get_str("cursor")
            .map(|c| c.into_owned()),
        None => None,
    };
    // Boxed: a fan-out over every upstream is a large state, kept out of other requests'.
    let response = Box::pin(catalog::list_page(
        tenant,
        session,
        principal,
        kind,
        cursor.as_deref(),
        req.id,
    ))
    .await?;
    Ok(Reply::Json(Bytes::from(response)))
}

fn params_object<'a>(req: &'a Request<'_>) -> Result<RawObject<'a>, GatewayError> {
    let params = req
        .params
        .ok_or_else(|| GatewayError::InvalidParams(format!("{} needs params", req.method)))?;
    RawObject::parse(params)
        .map_err(|_| GatewayError::InvalidParams("params must be an object".into()))
}

/// The `uri` of a resource request's params (-32602 without one).
fn required_uri(params: &RawObject<'_>) -> Result<String, GatewayError> {
    params
        .get_str("uri")
        .map(|u| u.into_owned())
        .ok_or_else(|| GatewayError::InvalidParams("`uri` is required".into()))
}

/// The upstream owning a public tool or prompt name, and that upstream's own name for it.
async fn resolve_name<'t>(
    tenant: &'t Tenant,
    session: &Arc<LiveSession>,
    kind: ListKind,
    name: &str,
) -> Result<(&'t Arc<Upstream>, String), GatewayError> {
    let what = if kind == ListKind::Tools {
        "tool"
    } else {
        "prompt"
    };
    if tenant.prefixed || tenant.upstreams.len() == 1 {
        return tenant
            .split_name(name)
            .map(|(u, own)| (u, own.to_owned()))
            .ok_or_else(|| names::unknown_name(tenant, what, name));
    }
    // Boxed (like every rarely taken walk over upstream pages): its state stays out of the
    // future of every forwarded request.
    Box::pin(catalog::owner_by_name(tenant, session, kind, name))
        .await
        .map(|u| (u, name.to_owned()))
        .ok_or_else(|| names::unknown_name(tenant, what, name))
}

/// The upstream owning a public resource URI, and that upstream's own URI.
async fn resolve_uri<'t>(
    tenant: &'t Tenant,
    session: &Arc<LiveSession>,
    uri: &str,
) -> Result<(&'t Arc<Upstream>, String), GatewayError> {
    if tenant.prefixed || tenant.upstreams.len() == 1 {
        return names::split_uri(tenant, uri)
            .map(|(u, own)| (u, own.to_owned()))
            .ok_or_else(|| names::unknown_uri(tenant, uri));
    }
    Box::pin(catalog::owner_by_uri(tenant, session, uri))
        .await
        .map(|u| (u, uri.to_owned()))
        .ok_or_else(|| names::unknown_uri(tenant, uri))
}

/// `tools/call` and `prompts/get`: the `name` selects the upstream; the prefix is stripped.
async fn route_by_name(
    gateway: &Gateway,
    tenant: &Arc<Tenant>,
    session: &Arc<LiveSession>,
    principal: &Principal,
    req: &Request<'_>,
    kind: ListKind,
) -> Result<Reply, GatewayError> {
    let shape = match kind {
        ListKind::Tools => ResultShape::ToolCall,
        _ => ResultShape::PromptGet,
    };
    let policed = kind == ListKind::Tools && !tenant.policies.is_empty();
    let limited = kind == ListKind::Tools && Rates::limits_calls(&tenant.config.limits);
    let gates = &gateway.limiter.concurrency;
    if tenant.is_transparent() && !policed && !limited {
        let upstream = &tenant.upstreams[0];
        // Gated without reading the name (read only to audit a refused tool call).
        let call = match kind {
            ListKind::Tools => Call::ToolIn(req.params),
            _ => Call::Other,
        };
        let as_task = match kind {
            ListKind::Tools => tasks::gateway_runs(session, upstream, None, req.params).await?,
            _ => None,
        };
        let slot = gates
            .admit(&tenant.for_limits(), principal, upstream, call)
            .await?;
        let reply = forward(
            session,
            upstream,
            &req.method,
            req.params,
            req.id,
            Some(shape),
            slot,
        )
        .await?;
        return tool_answer(
            gateway, tenant, session, upstream, req.params, req.id, kind, as_task, reply,
        )
        .await;
    }
    let mut params = params_object(req)?;
    let what = if kind == ListKind::Tools {
        "tool"
    } else {
        "prompt"
    };
    let name = params
        .get_str("name")
        .ok_or_else(|| {
            GatewayError::InvalidParams(format!("`name` (the {what} name) is required"))
        })?
        .into_owned();
    let (upstream, own) = match resolve_name(tenant, session, kind, &name).await {
        Ok(found) => found,
        Err(e) => {
            if kind == ListKind::Tools {
                audit::refused(tenant, principal, "-", &name, "unknown_tool");
            }
            return Err(e);
        }
    };
    // Decided on the tool itself (its upstream and own name), after routing: what is checked
    // is what is called. A hidden tool is as unknown as a tool that does not exist.
    if policed {
        match tenant.policies.decide(upstream.name(), &own, principal) {
            Decision::Allow => {}
            Decision::MissingScopes(missing) => {
                audit::refused(tenant, principal, upstream.name(), &own, "forbidden");
                return Err(GatewayError::ToolNeedsScopes { missing });
            }
            Decision::Hidden => {
                audit::refused(tenant, principal, upstream.name(), &own, "hidden");
                return Err(names::unknown_name(tenant, "tool", &name));
            }
        }
    }
    // Rates and quotas count the tool itself too, and only calls the caller may make.
    if limited {
        gateway
            .limiter
            .rates
            .check_call(&tenant.for_limits(), principal, upstream.name(), &own)
            .await?;
    }
    let as_task = match kind {
        ListKind::Tools => tasks::gateway_runs(session, upstream, Some(&own), req.params).await?,
        _ => None,
    };
    // Last: a slot is held only by a call that is sent.
    let call = match kind {
        ListKind::Tools => Call::Tool(&own),
        _ => Call::Other,
    };
    let slot = gates
        .admit(&tenant.for_limits(), principal, upstream, call)
        .await?;
    params.set("name", jsonrpc::raw_string(&own));
    let params = params.to_raw();
    let reply = forward(
        session,
        upstream,
        &req.method,
        Some(&params),
        req.id,
        Some(shape),
        slot,
    )
    .await?;
    tool_answer(
        gateway, tenant, session, upstream, req.params, req.id, kind, as_task, reply,
    )
    .await
}

/// A tool call's answer: run as a task by the gateway (`task_run`, with the place `as_task`
/// took), or with the id of a task the upstream created made public (`tasks`).
#[allow(clippy::too_many_arguments)]
async fn tool_answer(
    gateway: &Gateway,
    tenant: &Arc<Tenant>,
    session: &Arc<LiveSession>,
    upstream: &Upstream,
    params: Option<&RawValue>,
    client_id: &RawValue,
    kind: ListKind,
    as_task: Option<task_run::TaskSlot>,
    reply: Reply,
) -> Result<Reply, GatewayError> {
    match (kind, reply, as_task) {
        // Boxed: a gateway-run task's start is a large state every call's future would hold.
        (ListKind::Tools, Reply::Stream(s), Some(slot)) => {
            Box::pin(task_run::start(
                gateway, tenant, session, s, slot, params, client_id,
            ))
            .await
        }
        (ListKind::Tools, reply, _) => Ok(tasks::publish(reply, tenant, session, upstream)),
        (_, reply, _) => Ok(reply),
    }
}

/// `resources/read|subscribe|unsubscribe`: the namespaced `uri` selects the upstream. A read
/// at a gated upstream takes a slot; a subscription to an upstream that offers none is
/// refused here.
async fn route_by_uri(
    gateway: &Gateway,
    tenant: &Arc<Tenant>,
    session: &Arc<LiveSession>,
    principal: &Principal,
    req: &Request<'_>,
) -> Result<Reply, GatewayError> {
    let shape = (req.method == "resources/read").then_some(ResultShape::ReadResource);
    let follow = match Method::from_name(&req.method) {
        Method::ResourcesSubscribe => Some(true),
        Method::ResourcesUnsubscribe => Some(false),
        _ => None,
    };
    if tenant.is_transparent() {
        let upstream = &tenant.upstreams[0];
        if follow.is_some() {
            let uri = params_object(req)?.get_str("uri").map(|u| u.into_owned());
            resources::check_subscribable(session, upstream, uri.as_deref().unwrap_or("")).await?;
        }
        if let Some(on) = follow
            && let Some(reply) = stateless_subscription(session, upstream, req, None, on).await?
        {
            return Ok(reply);
        }
        let slot = read_slot(gateway, tenant, principal, upstream, follow).await?;
        let reply = forward(
            session,
            upstream,
            &req.method,
            req.params,
            req.id,
            shape,
            slot,
        )
        .await?;
        return Ok(match follow {
            Some(on) => {
                let uri = required_uri(&params_object(req)?)?;
                resources::recorded(reply, session, upstream, &uri, on)
            }
            None => reply,
        });
    }
    let mut params = params_object(req)?;
    let uri = required_uri(&params)?;
    let (upstream, own) = resolve_uri(tenant, session, &uri).await?;
    if follow.is_some() {
        resources::check_subscribable(session, upstream, &uri).await?;
    }
    if let Some(on) = follow
        && let Some(reply) = stateless_subscription(session, upstream, req, Some(&own), on).await?
    {
        return Ok(reply);
    }
    if let Some(reply) = shared_subscription(session, upstream, req, &own).await? {
        return Ok(reply);
    }
    let slot = read_slot(gateway, tenant, principal, upstream, follow).await?;
    params.set("uri", jsonrpc::raw_string(&own));
    let params = params.to_raw();
    let reply = forward(
        session,
        upstream,
        &req.method,
        Some(&params),
        req.id,
        shape,
        slot,
    )
    .await?;
    Ok(match follow {
        Some(on) => resources::recorded(reply, session, upstream, &own, on),
        None => reply,
    })
}

/// A slot for a `resources/read` (`follow` is `None`) at a gated upstream; subscriptions
/// are not calls and take none.
async fn read_slot(
    gateway: &Gateway,
    tenant: &Tenant,
    principal: &Principal,
    upstream: &Upstream,
    follow: Option<bool>,
) -> Result<Option<Permit>, GatewayError> {
    if follow.is_some() {
        return Ok(None);
    }
    gateway
        .limiter
        .concurrency
        .admit(&tenant.for_limits(), principal, upstream, Call::Other)
        .await
}

/// An upstream of the stateless revision has no `resources/subscribe`: the resource is
/// followed through the gateway's own `subscriptions/listen` on the connection, and the
/// client is answered here. `None` means "not such an upstream".
async fn stateless_subscription(
    session: &Arc<LiveSession>,
    upstream: &Arc<Upstream>,
    req: &Request<'_>,
    uri: Option<&str>,
    on: bool,
) -> Result<Option<Reply>, GatewayError> {
    let conn = ensure_link(session, upstream).await?;
    if !conn.is_stateless() {
        return Ok(None);
    }
    let uri = match uri {
        Some(u) => u.to_owned(),
        None => required_uri(&params_object(req)?)?,
    };
    conn.follow_resource(&uri, session, on);
    session.set_subscribed(upstream.name(), &uri, on);
    Ok(Some(Reply::Json(jsonrpc::result_response(req.id, b"{}"))))
}

/// On a connection shared by many sessions, one upstream subscription serves every session
/// that subscribed: only the first subscribe and the last unsubscribe go upstream; the others
/// are answered here. `None` means "forward it".
async fn shared_subscription(
    session: &Arc<LiveSession>,
    upstream: &Arc<Upstream>,
    req: &Request<'_>,
    uri: &str,
) -> Result<Option<Reply>, GatewayError> {
    let subscribe = match Method::from_name(&req.method) {
        Method::ResourcesSubscribe => true,
        Method::ResourcesUnsubscribe => false,
        _ => return Ok(None),
    };
    let conn = ensure_link(session, upstream).await?;
    if !conn.is_shared() {
        return Ok(None);
    }
    let must_forward = if subscribe {
        conn.add_subscriber(uri, session)
    } else {
        conn.remove_subscriber(uri, &**session)
    };
    if must_forward {
        return Ok(None);
    }
    session.set_subscribed(upstream.name(), uri, subscribe);
    Ok(Some(Reply::Json(jsonrpc::result_response(req.id, b"{}"))))
}

/// `completion/complete`: routed by its `ref` (a prompt name or a resource URI).
async fn route_completion(
    tenant: &Arc<Tenant>,
    session: &Arc<LiveSession>,
    req: &Request<'_>,
) -> Result<Reply, GatewayError> {
    if tenant.is_transparent() {
        let upstream = &tenant.upstreams[0];
        return pass_through(session, upstream, req).await;
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
            let (u, own) = resolve_name(tenant, session, ListKind::Prompts, &name).await?;
            (u, "name", own)
        }
        Some("ref/resource") => {
            let uri = reference
                .get_str("uri")
                .ok_or_else(|| GatewayError::InvalidParams("`ref.uri` is required".into()))?
                .into_owned();
            let (u, own) = resolve_uri(tenant, session, &uri).await?;
            (u, "uri", own)
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
    forward(
        session,
        upstream,
        &req.method,
        Some(&params),
        req.id,
        None,
        None,
    )
    .await
}

/// `logging/setLevel` goes to every upstream that offers logging; the gateway answers.
async fn set_level_everywhere(
    tenant: &Arc<Tenant>,
    session: &Arc<LiveSession>,
    req: &Request<'_>,
) -> Result<Reply, GatewayError> {
    // Upstreams on 2026-07-28 have no such method: they get the level in each request's
    // `_meta`, from the session.
    let level = params_object(req)?
        .get_str("level")
        .map(|l| l.into_owned())
        .filter(|l| logging::severity(l).is_some())
        .ok_or_else(|| {
            GatewayError::InvalidParams(format!(
                "`level` must be one of: {}",
                logging::LEVELS.join(", ")
            ))
        })?;
    session.set_log_level(&level);
    if tenant.is_transparent() {
        let upstream = &tenant.upstreams[0];
        if !ensure_link(session, upstream).await?.is_stateless() {
            return pass_through(session, upstream, req).await;
        }
    }
    let calls = tenant.upstreams.iter().map(|u| async move {
        let conn = ensure_link(session, u).await?;
        let offers = !conn.is_stateless()
            && conn
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
