//! The stateless revision (2026-07-28) on a tenant's endpoint: every POST stands alone. The
//! request's `_meta` and mirrored headers are checked, the request is served through the
//! user's upstream-facing session, results get `resultType` and caching hints, an upstream's
//! questions to its client become `input_required` results (resumed on the client's retry),
//! and closing the response stream cancels the request.

use std::sync::Arc;
use std::time::Duration;

use axum::body::Body;
use axum::http::request::Parts;
use axum::http::{HeaderMap, HeaderName, Response, StatusCode};
use bytes::Bytes;
use serde_json::value::RawValue;
use tokio::sync::mpsc;

use super::{endpoint::json, headers, sse};
use crate::auth::Principal;
use crate::error::GatewayError;
use crate::gateway::Gateway;
use crate::gateway::parked::{Interactions, Parked, Question};
use crate::jsonrpc::{self, Message, Outcome, OwnedId, RawObject, Request};
use crate::protocol::header as mcp;
use crate::protocol::modern::{self, CacheHints, MetaError, RequestMeta};
use crate::protocol::{Method, ProtocolVersion, logging};
use crate::router::mrtr::{self, Claim, Target};
use crate::router::{self, Reply, stateless};
use crate::session::LiveSession;
use crate::tenant::Tenant;
use crate::upstream::{ForwardStream, StreamItem};

/// How long the gateway waits for more questions of an upstream once one came (an upstream
/// may ask several at once; they go to the client together).
const GATHER: Duration = Duration::from_millis(20);

/// Whether a POST is in the stateless revision: its `MCP-Protocol-Version` (`version`, as
/// `headers::protocol_version` read it) says so, or it names no version or session in headers
/// but one in `_meta` (then the header check fails it with a clear error).
pub fn selected(
    version: &Result<Option<ProtocolVersion>, GatewayError>,
    headers: &HeaderMap,
    params: Option<&RawValue>,
) -> bool {
    match version {
        Ok(Some(v)) => v.is_stateless(),
        Ok(None) => {
            matches!(headers::session_id(headers), Ok(None))
                && RequestMeta::peek_version(params).is_some()
        }
        Err(_) => false,
    }
}

/// Serves one stateless message.
pub async fn serve(
    gateway: &Gateway,
    tenant: &Arc<Tenant>,
    principal: &Principal,
    parts: &Parts,
    message: Message<'_>,
) -> Response<Body> {
    match message {
        Message::Request(req) => match request(gateway, tenant, principal, parts, &req).await {
            Ok(resp) => resp,
            Err(e) => e.into_response(Some(req.id)),
        },
        // No client notification is defined for this revision on HTTP: accepted, not acted on.
        Message::Notification(_) => super::endpoint::accepted(),
        Message::Response(r) => GatewayError::InvalidRequest(
            "protocol version 2026-07-28 has no client responses: answer input requests by retrying the request with inputResponses".into(),
        )
        .into_response(Some(r.id)),
    }
}

async fn request(
    gateway: &Gateway,
    tenant: &Arc<Tenant>,
    principal: &Principal,
    parts: &Parts,
    req: &Request<'_>,
) -> Result<Response<Body>, GatewayError> {
    let meta = RequestMeta::read(req.params)
        .map_err(|MetaError::Missing(f)| GatewayError::MissingMeta(f))?;
    let params = req.params.and_then(|p| RawObject::parse(p).ok());
    let name = target_name(&req.method, params.as_ref());
    check_headers(&parts.headers, req, &meta, name.as_deref())?;
    if ProtocolVersion::parse(&meta.protocol_version) != Some(ProtocolVersion::V2026_07_28) {
        return Err(GatewayError::UnsupportedProtocolVersion {
            requested: meta.protocol_version.chars().take(64).collect(),
        });
    }
    let user = &principal.user;
    match Method::from_name(&req.method) {
        Method::ServerDiscover => {
            let session = stateless::session_for(gateway, tenant, user).await?;
            return Ok(json(stateless::discover(tenant, &session, req.id)));
        }
        Method::Initialize
        | Method::Ping
        | Method::LoggingSetLevel
        | Method::ResourcesSubscribe
        | Method::ResourcesUnsubscribe => {
            return Err(GatewayError::MethodNotServed(format!(
                "{} is not part of protocol version 2026-07-28",
                req.method
            )));
        }
        _ => {}
    }
    let session = stateless::session_for(gateway, tenant, user).await?;
    if req.method == "tools/call"
        && let Some(tool) = name.as_deref()
        && let Some(mirrored) = router::tool_param_headers(tenant, &session, principal, tool).await
    {
        let arguments = params.as_ref().and_then(|p| p.get("arguments"));
        mirrored
            .check(&parts.headers, arguments)
            .map_err(GatewayError::HeaderMismatch)?;
    }
    if req.method == "subscriptions/listen" {
        return Ok(listen(gateway, tenant, &session, principal, req, params.as_ref()).await);
    }
    let mut exchange = Exchange {
        tenant: tenant.clone(),
        interactions: gateway.interactions.clone(),
        session: session.clone(),
        user: user.clone(),
        id: req.id.to_owned(),
        method: req.method.to_string(),
        name,
        meta,
        resumed: false,
    };

    if let Some(state) = params.as_ref().and_then(|p| p.get_str("requestState")) {
        let target = exchange.target();
        let replica = &gateway.bus.replica;
        let parked = match mrtr::claim(
            &gateway.interactions,
            tenant,
            replica,
            user,
            &target,
            &state,
        )? {
            Claim::Parked(parked) => *parked,
            Claim::Elsewhere { replica, handle } => {
                // Parked on another replica: it continues the request, this one answers.
                return super::retry_relay::relay(gateway, exchange, &replica, handle, req.params)
                    .await;
            }
            Claim::Upstream(inner) => {
                // A stateless upstream's state: the retry goes to it with its own state.
                let mut retry = params.clone().unwrap_or_default();
                retry.set("requestState", jsonrpc::raw_string(&inner));
                let retry_params = retry.to_raw();
                let req = Request {
                    id: req.id,
                    method: req.method.clone(),
                    params: Some(&retry_params),
                };
                return exchange
                    .forward(gateway, tenant, &session, principal, &req)
                    .await;
            }
        };
        let left = mrtr::answer(
            &parked.session,
            parked.questions,
            params.as_ref().and_then(|p| p.get("inputResponses")),
        )
        .await;
        exchange.resumed = true;
        if !left.is_empty() {
            // The client left some questions unanswered: asked again.
            return Ok(json(exchange.ask_again(parked.stream, left)));
        }
        return Ok(exchange.drive(parked.stream).await);
    }

    exchange
        .forward(gateway, tenant, &session, principal, req)
        .await
}

/// The name, URI or task a request targets: what `Mcp-Name` must say for the methods that
/// have one, what a `requestState` is bound to, and the URI of a translated "resource not
/// found" (`resources/metadata` has a URI but no `Mcp-Name`).
fn target_name(method: &str, params: Option<&RawObject<'_>>) -> Option<String> {
    let field = match method {
        "resources/metadata" => "uri",
        other => modern::name_field(other)?,
    };
    params?.get_str(field).map(|s| s.into_owned())
}

/// The value of a header that may appear once.
fn single<'h>(
    headers: &'h HeaderMap,
    name: &'static HeaderName,
) -> Result<Option<&'h [u8]>, GatewayError> {
    let value = mcp::once(headers, name).map_err(|mcp::Repeated| {
        GatewayError::HeaderMismatch(format!("the {name} header must appear once"))
    })?;
    Ok(value.map(|v| v.as_bytes()))
}

/// The standard mirrored headers must be present and say what the body says (a tool call's
/// `Mcp-Param-*` headers are checked once the tool's definition is found).
fn check_headers(
    headers: &HeaderMap,
    req: &Request<'_>,
    meta: &RequestMeta,
    name: Option<&str>,
) -> Result<(), GatewayError> {
    let mismatch = |s: String| GatewayError::HeaderMismatch(s);
    let version = single(headers, &mcp::name::PROTOCOL_VERSION)?
        .ok_or_else(|| mismatch("the MCP-Protocol-Version header is required".into()))?;
    if version != meta.protocol_version.as_bytes() {
        return Err(mismatch(format!(
            "MCP-Protocol-Version header value '{}' does not match _meta value '{}'",
            String::from_utf8_lossy(version),
            meta.protocol_version
        )));
    }
    let method = single(headers, &mcp::name::METHOD)?
        .ok_or_else(|| mismatch("the Mcp-Method header is required".into()))?;
    if method != req.method.as_bytes() {
        return Err(mismatch(format!(
            "Mcp-Method header value '{}' does not match body value '{}'",
            String::from_utf8_lossy(method),
            req.method
        )));
    }
    if modern::name_field(&req.method).is_none() {
        return Ok(());
    }
    let header = single(headers, &mcp::name::NAME)?
        .ok_or_else(|| mismatch("the Mcp-Name header is required".into()))?;
    let decoded = modern::decode_header_value(header)
        .ok_or_else(|| mismatch("the Mcp-Name header value has invalid characters".into()))?;
    if Some(decoded.as_str()) != name {
        return Err(mismatch(format!(
            "Mcp-Name header value '{decoded}' does not match body value '{}'",
            name.unwrap_or("")
        )));
    }
    Ok(())
}

/// One stateless request being answered.
pub(super) struct Exchange {
    pub(super) tenant: Arc<Tenant>,
    pub(super) interactions: Interactions,
    pub(super) session: Arc<LiveSession>,
    pub(super) user: Arc<str>,
    /// The id of the request being answered (a retry's own id, not the first attempt's).
    pub(super) id: OwnedId,
    pub(super) method: String,
    pub(super) name: Option<String>,
    pub(super) meta: RequestMeta,
    /// A retry of a parked request: the final response carries the first attempt's id.
    pub(super) resumed: bool,
}

/// What comes next on a stateless response.
pub(super) enum Step {
    /// A notification for the client; the request goes on.
    Notify(Bytes, Box<ForwardStream>),
    /// The whole response (a result, `input_required`, or an error) and its HTTP status
    /// when it is not streamed.
    Done(Bytes, StatusCode),
}

impl Exchange {
    /// Sends the request on through the user's session.
    async fn forward(
        self,
        gateway: &Gateway,
        tenant: &Arc<Tenant>,
        session: &Arc<LiveSession>,
        principal: &Principal,
        req: &Request<'_>,
    ) -> Result<Response<Body>, GatewayError> {
        let reply = router::handle_request(gateway, tenant, session, principal, req)
            .await
            .map_err(|e| match e {
                GatewayError::MethodNotFound(m) => GatewayError::MethodNotServed(m),
                other => other,
            })?;
        match reply {
            Reply::Json(body) => Ok(json(self.finish(&body))),
            Reply::Stream(stream) => Ok(self.drive(stream.cancel_on_drop()).await),
        }
    }

    fn target(&self) -> Target<'_> {
        Target {
            method: &self.method,
            name: self.name.as_deref(),
        }
    }

    /// A JSON response while only the answer comes; an SSE stream once a notification
    /// must go first.
    async fn drive(self, stream: ForwardStream) -> Response<Body> {
        match self.step(stream).await {
            Step::Done(body, status) => {
                let mut resp = json(body);
                *resp.status_mut() = status;
                resp
            }
            Step::Notify(first, stream) => {
                let (tx, rx) = mpsc::channel::<Bytes>(16);
                tokio::spawn(self.pump(*stream, first, tx));
                sse::response(sse::channel_body(rx))
            }
        }
    }

    /// Writes the events of a streamed response; the client closing the stream drops the
    /// forwarded request, which cancels it upstream.
    async fn pump(self, mut stream: ForwardStream, first: Bytes, tx: mpsc::Sender<Bytes>) {
        if tx.send(sse::event(&first)).await.is_err() {
            return;
        }
        loop {
            let step = tokio::select! {
                _ = tx.closed() => return,
                step = self.step(stream) => step,
            };
            match step {
                Step::Notify(m, s) => {
                    stream = *s;
                    if tx.send(sse::event(&m)).await.is_err() {
                        return;
                    }
                }
                Step::Done(body, _) => {
                    let _ = tx.send(sse::event(&body)).await;
                    return;
                }
            }
        }
    }

    /// Reads the forwarded request until something must reach the client.
    pub(super) async fn step(&self, mut stream: ForwardStream) -> Step {
        loop {
            match stream.next().await {
                Some(StreamItem::Final(body)) => {
                    let status = status_of(&body);
                    return Step::Done(self.finish(&body), status);
                }
                Some(StreamItem::Cancelled) | None => {
                    let e = GatewayError::Cancelled;
                    return Step::Done(e.to_jsonrpc(Some(&self.id)), e.status());
                }
                Some(StreamItem::Message(m, _)) => {
                    if let Some(q) = mrtr::question(&m) {
                        let (body, status) = self.ask(stream, q).await;
                        return Step::Done(body, status);
                    }
                    if self.wants(&m) {
                        return Step::Notify(m, Box::new(stream));
                    }
                }
            }
        }
    }

    /// An upstream asked its client: the questions it asks together go to the client as an
    /// `input_required` result, and the request waits parked for the retry.
    async fn ask(&self, mut stream: ForwardStream, first: Question) -> (Bytes, StatusCode) {
        let mut questions = vec![first];
        loop {
            match tokio::time::timeout(GATHER, stream.next()).await {
                Err(_) => break,
                Ok(Some(StreamItem::Message(m, _))) => {
                    if let Some(q) = mrtr::question(&m) {
                        questions.push(q);
                    }
                }
                Ok(Some(StreamItem::Final(body))) => {
                    self.refuse(questions, "the request ended").await;
                    return (self.finish(&body), StatusCode::OK);
                }
                Ok(_) => {
                    let e = GatewayError::Cancelled;
                    return (e.to_jsonrpc(Some(&self.id)), e.status());
                }
            }
        }
        let mut missing: Vec<String> = questions
            .iter()
            .filter_map(mrtr::needed_capability)
            .filter(|c| !self.meta.has_capability(c))
            .map(str::to_owned)
            .collect();
        if !missing.is_empty() {
            missing.sort();
            missing.dedup();
            self.refuse(questions, "the client did not declare the capability")
                .await;
            drop(stream);
            let e = GatewayError::MissingClientCapability { required: missing };
            return (e.to_jsonrpc(Some(&self.id)), e.status());
        }
        (self.ask_again(stream, questions), StatusCode::OK)
    }

    /// Parks the request and answers with the questions it waits for.
    pub(super) fn ask_again(&self, stream: ForwardStream, questions: Vec<Question>) -> Bytes {
        let result = mrtr::park(
            &self.interactions,
            &self.tenant,
            &self.session.bus.replica,
            &self.user,
            &self.target(),
            Parked {
                session: self.session.clone(),
                stream,
                questions,
            },
        );
        let body = serde_json::to_vec(&result).unwrap_or_default();
        jsonrpc::result_response(&self.id, &body)
    }

    /// Answers questions the client will not see with an error, so the upstream goes on.
    async fn refuse(&self, questions: Vec<Question>, why: &str) {
        let error = serde_json::json!({ "code": jsonrpc::code::INVALID_REQUEST, "message": why })
            .to_string();
        let Ok(error) = RawValue::from_string(error) else {
            return;
        };
        for q in questions {
            mrtr::refuse_or_reply(&self.session, &q.raw_id, Outcome::Error(&error)).await;
        }
    }

    /// Whether a notification of the upstream goes to this client: log messages only when
    /// the request asked for them (`_meta` log level) at their level or above.
    fn wants(&self, message: &[u8]) -> bool {
        let Ok(Message::Notification(n)) = jsonrpc::parse(message) else {
            return false;
        };
        if n.method != "notifications/message" {
            return true;
        }
        let Some(wanted) = self.meta.log_level.as_deref() else {
            return false;
        };
        logging::wanted(n.params, wanted)
    }

    /// The final response in this revision's shape (and with this attempt's id).
    fn finish(&self, body: &[u8]) -> Bytes {
        // A session-based upstream's "resource not found" (-32002) in this revision's words.
        let translated = match (self.method.as_str(), &self.name) {
            ("resources/read" | "resources/metadata", Some(uri)) => {
                modern::resource_not_found(body, uri)
            }
            _ => None,
        };
        let body = translated.as_deref().unwrap_or(body);
        let hints = stateless::cache_hints(&self.tenant, &self.method).map(|h| {
            if self.resumed {
                CacheHints {
                    ttl_ms: 0,
                    public: false,
                }
            } else {
                h
            }
        });
        if self.resumed
            && let Ok(Message::Response(r)) = jsonrpc::parse(body)
        {
            let reid = jsonrpc::response_with_id(self.id.get(), r.outcome);
            return modern::complete(&reid, hints);
        }
        if let Some(wrapped) = self.wrap_upstream_state(body) {
            return modern::complete(&wrapped, hints);
        }
        modern::complete(body, hints)
    }

    /// A stateless upstream's `input_required` result with its own `requestState`: the state
    /// goes to the client wrapped (bound to the user and request, any replica continues it).
    fn wrap_upstream_state(&self, body: &[u8]) -> Option<Vec<u8>> {
        if !contains_bytes(body, b"requestState") {
            return None;
        }
        let Ok(Message::Response(r)) = jsonrpc::parse(body) else {
            return None;
        };
        let Outcome::Result(result) = r.outcome else {
            return None;
        };
        let mut obj = RawObject::parse(result).ok()?;
        if obj.get_str("resultType").as_deref() != Some("input_required") {
            return None;
        }
        let inner = obj.get_str("requestState")?.into_owned();
        let wrapped = mrtr::wrap(&self.tenant, &self.user, &self.target(), inner);
        obj.set("requestState", jsonrpc::raw_string(&wrapped));
        Some(jsonrpc::response_with_id(
            r.id.get(),
            Outcome::Result(&obj.to_raw()),
        ))
    }
}

/// Whether `needle` occurs in `haystack` (a cheap check before parsing).
fn contains_bytes(haystack: &[u8], needle: &[u8]) -> bool {
    haystack.windows(needle.len()).any(|w| w == needle)
}

/// The HTTP status of a forwarded final response: an upstream's "method not found" is 404
/// in this revision, its header mismatch, missing capability and unsupported version errors
/// 400, everything else (results, request-level errors) 200.
fn status_of(body: &[u8]) -> StatusCode {
    // Only a body holding one of the codes can be such an error: results are not parsed a
    // second time.
    const CODES: [(&[u8], StatusCode); 4] = [
        (b"-32601", StatusCode::NOT_FOUND),
        (b"-32020", StatusCode::BAD_REQUEST),
        (b"-32021", StatusCode::BAD_REQUEST),
        (b"-32022", StatusCode::BAD_REQUEST),
    ];
    let Some(&(code, status)) = CODES.iter().find(|(c, _)| contains_bytes(body, c)) else {
        return StatusCode::OK;
    };
    if let Ok(Message::Response(r)) = jsonrpc::parse(body)
        && let Outcome::Error(e) = r.outcome
        && RawObject::parse(e)
            .ok()
            .and_then(|e| e.get("code").map(|c| c.get().as_bytes() == code))
            .unwrap_or(false)
    {
        return status;
    }
    StatusCode::OK
}

/// The notification types a `subscriptions/listen` request opted in to.
struct Filter {
    tools: bool,
    prompts: bool,
    resources: bool,
    uris: Vec<String>,
}

impl Filter {
    fn read(params: Option<&RawObject<'_>>) -> Filter {
        let wanted: serde_json::Value = params
            .and_then(|p| p.get("notifications"))
            .and_then(|n| serde_json::from_str(n.get()).ok())
            .unwrap_or_default();
        let flag = |k: &str| wanted.get(k).and_then(serde_json::Value::as_bool) == Some(true);
        Filter {
            tools: flag("toolsListChanged"),
            prompts: flag("promptsListChanged"),
            resources: flag("resourcesListChanged"),
            uris: wanted
                .get("resourceSubscriptions")
                .and_then(serde_json::Value::as_array)
                .map(|a| {
                    a.iter()
                        .filter_map(|u| u.as_str().map(str::to_owned))
                        .collect()
                })
                .unwrap_or_default(),
        }
    }

    /// What the gateway honors: all of it (it relays every upstream's notifications).
    fn acknowledged(&self) -> serde_json::Value {
        let mut n = serde_json::Map::new();
        if self.tools {
            n.insert("toolsListChanged".into(), true.into());
        }
        if self.prompts {
            n.insert("promptsListChanged".into(), true.into());
        }
        if self.resources {
            n.insert("resourcesListChanged".into(), true.into());
        }
        if !self.uris.is_empty() {
            n.insert("resourceSubscriptions".into(), self.uris.clone().into());
        }
        serde_json::Value::Object(n)
    }

    fn passes(&self, method: &str, params: Option<&serde_json::Value>) -> bool {
        match method {
            "notifications/tools/list_changed" => self.tools,
            "notifications/prompts/list_changed" => self.prompts,
            "notifications/resources/list_changed" => self.resources,
            "notifications/resources/updated" => params
                .and_then(|p| p.get("uri"))
                .and_then(serde_json::Value::as_str)
                .is_some_and(|u| self.uris.iter().any(|w| w == u)),
            _ => false,
        }
    }
}

/// `subscriptions/listen`: a stream that opens with the acknowledgment and then carries the
/// change notifications the client opted in to, each tagged with the subscription's id (the
/// request's id), until the client closes it.
async fn listen(
    gateway: &Gateway,
    tenant: &Arc<Tenant>,
    session: &Arc<LiveSession>,
    principal: &Principal,
    req: &Request<'_>,
    params: Option<&RawObject<'_>>,
) -> Response<Body> {
    let filter = Filter::read(params);
    // Resource updates come only for resources subscribed to upstream.
    for uri in &filter.uris {
        let params = RawValue::from_string(serde_json::json!({ "uri": uri }).to_string());
        let Ok(params) = params else { continue };
        let subscribe = Request {
            id: req.id,
            method: "resources/subscribe".into(),
            params: Some(&params),
        };
        match router::handle_request(gateway, tenant, session, principal, &subscribe).await {
            Ok(Reply::Stream(mut s)) => while let Some(StreamItem::Message(..)) = s.next().await {},
            Ok(Reply::Json(_)) => {}
            Err(e) => {
                tracing::debug!(uri = %uri, error = %e, "resource subscription not made upstream")
            }
        }
    }
    let subscription: serde_json::Value =
        serde_json::from_str(req.id.get()).unwrap_or(serde_json::Value::Null);
    let mut rx = session.add_listener();
    for upstream in tenant.upstreams.iter() {
        if let Some(conn) = session.link(upstream.info.id) {
            conn.listen();
        }
    }
    let tag = move |method: &str, params: serde_json::Value| {
        let mut params = match params {
            serde_json::Value::Object(m) => m,
            _ => serde_json::Map::new(),
        };
        let meta = params
            .entry("_meta")
            .or_insert_with(|| serde_json::json!({}));
        if let Some(meta) = meta.as_object_mut() {
            meta.insert(modern::meta::SUBSCRIPTION_ID.into(), subscription.clone());
        }
        let message = serde_json::json!({"jsonrpc": "2.0", "method": method, "params": params});
        sse::event(message.to_string().as_bytes())
    };
    let ack = tag(
        "notifications/subscriptions/acknowledged",
        serde_json::json!({ "notifications": filter.acknowledged() }),
    );
    let (tx, out) = mpsc::channel::<Bytes>(16);
    tokio::spawn(async move {
        if tx.send(ack).await.is_err() {
            return;
        }
        loop {
            let next = tokio::select! {
                _ = tx.closed() => return,
                _ = tokio::time::sleep(KEEP_ALIVE_EVERY) => Some(Bytes::from_static(sse::KEEP_ALIVE)),
                m = rx.recv() => match m {
                    None => return,
                    Some(m) => {
                        let v: serde_json::Value = serde_json::from_slice(&m).unwrap_or_default();
                        let method = v.get("method").and_then(serde_json::Value::as_str).unwrap_or("");
                        filter
                            .passes(method, v.get("params"))
                            .then(|| tag(method, v.get("params").cloned().unwrap_or_default()))
                    }
                },
            };
            if let Some(event) = next
                && tx.send(event).await.is_err()
            {
                return;
            }
        }
    });
    sse::response(sse::channel_body(out))
}

/// How often an idle listen stream gets a keep-alive comment.
const KEEP_ALIVE_EVERY: Duration = Duration::from_secs(15);
