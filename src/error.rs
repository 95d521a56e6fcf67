//! `GatewayError`: every failure a client can see, and the single mapping from it to an HTTP
//! status and a JSON-RPC error. Messages are safe to show (no secrets, no internals); details
//! that only operators need go to the logs where the error is raised.

use std::time::Duration;

use axum::body::Body;
use axum::http::{HeaderValue, Response, StatusCode, header};
use bytes::Bytes;
use serde_json::Value;
use serde_json::value::RawValue;

use crate::jsonrpc::{self, code};
use crate::protocol::ProtocolVersion;

#[derive(Debug, Clone, thiserror::Error)]
pub enum GatewayError {
    // ---- Transport level: an HTTP error status with a JSON-RPC error body.
    #[error("Not Acceptable: the Accept header must list {expected}")]
    NotAcceptable { expected: &'static str },
    #[error("Unsupported Media Type: Content-Type must be application/json")]
    UnsupportedMediaType,
    #[error("Payload Too Large: the request body exceeds {limit} bytes")]
    BodyTooLarge { limit: usize },
    /// The body did not arrive within `limits.body_read_timeout` (or, after it, at
    /// `limits.min_body_rate`); the connection is closed.
    #[error("Request Timeout: the request body did not arrive in time")]
    BodyTimeout,
    /// Request bodies being held by the process already fill `limits.max_buffered_bodies`.
    #[error("Service Unavailable: too many request bodies are being received; retry shortly")]
    BodyBudgetExhausted,
    /// The client's connection failed or the body was malformed before it was complete.
    #[error("Bad Request: the request body could not be read")]
    BodyUnreadable,
    #[error("Parse error: {0}")]
    Parse(String),
    #[error("Invalid Request: {0}")]
    InvalidRequest(String),
    #[error(
        "Invalid Request: JSON-RPC batches are accepted only on sessions of protocol version 2025-03-26 (later versions removed them); send each message in its own POST"
    )]
    BatchNotSupported,
    /// A batch with more members than the tenant's `limits.max_batch`: 400, nothing in it run.
    #[error(
        "Invalid Request: a JSON-RPC batch may have at most {max} members (this one has {got}); send it in smaller batches"
    )]
    BatchTooLong { max: u32, got: usize },
    #[error("Bad Request: unsupported MCP-Protocol-Version {requested:?}")]
    UnsupportedProtocolVersion { requested: String },
    #[error("Bad Request: {0}")]
    BadHeader(String),
    /// A mirrored request header (`MCP-Protocol-Version`, `Mcp-Method`, `Mcp-Name`,
    /// `Mcp-Param-*`) is missing, malformed, or differs from the body (2026-07-28).
    #[error("Header mismatch: {0}")]
    HeaderMismatch(String),
    /// A stateless request without the `_meta` field named (2026-07-28).
    #[error("Invalid params: {0} is required in params._meta")]
    MissingMeta(&'static str),
    /// Serving the request needs client capabilities it did not declare (2026-07-28).
    #[error("Missing required client capability: {}", required.join(", "))]
    MissingClientCapability { required: Vec<String> },
    /// Serving the request needs a client extension it did not declare (the tasks extension).
    #[error("Missing required client capability: the {0} extension")]
    MissingClientExtension(&'static str),
    /// A task id that names no task of the caller's (SEP-2663: unknown is Invalid params).
    #[error("Invalid params: task not found: {0}")]
    TaskNotFound(String),
    /// A method the stateless revision does not serve here (HTTP 404, 2026-07-28).
    #[error("Method not found: {0}")]
    MethodNotServed(String),
    #[error("Bad Request: Mcp-Session-Id header is required")]
    SessionRequired,
    #[error("Bad Request: the sessionId query parameter is required")]
    SessionParamRequired,
    #[error("Session not found")]
    SessionNotFound,
    /// A message for a 2024-11-05 session whose `initialize` has not created it yet.
    #[error("Bad Request: {0}")]
    SessionNotOpened(&'static str),
    /// The method is not served at this path; `allow` lists the ones that are.
    #[error("Method Not Allowed")]
    MethodNotAllowed { allow: &'static str },
    /// A GET stream asked for before the client sent `notifications/initialized`.
    #[error(
        "Bad Request: the session's handshake is not finished: send notifications/initialized before opening a GET stream"
    )]
    StreamBeforeInitialized,
    /// The session has as many GET (SSE) connections open on this replica as it may.
    #[error(
        "Too Many Requests: this session already has {limit} GET streams open; close one (or let it end) and retry"
    )]
    TooManyStreams { limit: usize },
    /// A tenant limit refused what arrives before a session serves it (a new session, or any
    /// request under the tenant's or user's request rate): 429 with `Retry-After`.
    #[error("Too Many Requests: {0}")]
    TooManyRequests(LimitRefusal),
    #[error("Service Unavailable: the gateway is shutting down")]
    ShuttingDown,
    #[error("Service Unavailable: the session store cannot be reached; retry shortly")]
    StoreUnavailable,
    #[error("Forbidden: Origin {origin:?} is not allowed for this endpoint")]
    OriginNotAllowed { origin: String },
    #[error("Forbidden: Host {host:?} is not allowed for this endpoint")]
    HostNotAllowed { host: String },
    /// A Host (or HTTP/2 `:authority`) that is missing, repeated, malformed, or contradicted by
    /// the request target: 400 (RFC 9112 §3.2). The reason names the rule, never the value.
    #[error("Bad Request: invalid Host: {0}")]
    BadHost(&'static str),
    #[error("Unauthorized: {reason}")]
    Unauthorized {
        /// The `WWW-Authenticate` challenge.
        www_authenticate: String,
        reason: String,
    },
    #[error("Forbidden: insufficient scope (missing: {})", missing.join(" "))]
    InsufficientScope {
        www_authenticate: String,
        missing: Vec<String>,
    },
    /// A tool policy requires scopes the caller's token lacks; the HTTP layer turns this into
    /// `InsufficientScope` with the endpoint's challenge.
    #[error("Forbidden: this tool requires the scopes: {}", missing.join(" "))]
    ToolNeedsScopes { missing: Vec<String> },
    #[error("Bad Request: access tokens are not accepted in the URI query")]
    TokenInQuery { www_authenticate: String },
    /// Credentials sent in a malformed way (e.g. two `Authorization` headers): 400 with an
    /// RFC 6750 `invalid_request` challenge.
    #[error("Bad Request: {reason}")]
    MalformedCredentials {
        www_authenticate: String,
        reason: &'static str,
    },
    #[error(
        "Service Unavailable: tokens cannot be validated right now (the issuer's keys are unreachable)"
    )]
    AuthUnavailable,

    // ---- Request level: HTTP 200 with a JSON-RPC error response carrying the request id.
    #[error("Method not found: {0}")]
    MethodNotFound(String),
    #[error("{0}")]
    InvalidParams(String),
    /// A resource URI nothing serves (SEP-2164's -32602 with `data.uri`, the public URI);
    /// `hint` (empty, or starting with a space) says how URIs are formed on the endpoint.
    #[error("Resource not found: {uri:?}{hint}")]
    ResourceNotFound { uri: String, hint: String },
    /// `resources/subscribe|unsubscribe` for a resource whose upstream did not advertise
    /// `resources.subscribe`: answered here, never forwarded.
    #[error(
        "Resource {uri:?} cannot be subscribed to: its server ({upstream:?}) does not offer resource subscriptions"
    )]
    SubscriptionsNotOffered { uri: String, upstream: String },
    #[error("Session not initialized: send notifications/initialized before other requests")]
    NotInitialized,
    #[error("Session already initialized: start a new session to initialize again")]
    AlreadyInitialized,
    #[error("upstream {upstream:?} is unavailable: {reason}")]
    UpstreamUnavailable { upstream: String, reason: String },
    #[error("upstream {upstream:?} did not answer within {}", humanize(*after))]
    UpstreamTimeout { upstream: String, after: Duration },
    #[error("upstream {upstream:?} closed the connection before answering: {reason}")]
    UpstreamClosed { upstream: String, reason: String },
    #[error("upstream {upstream:?} sent an invalid response: {reason}")]
    UpstreamProtocol { upstream: String, reason: String },
    /// A tenant limit refused a request inside a session (a tool's or upstream's rate, a quota,
    /// calls in flight): HTTP 200 with a JSON-RPC error naming the limit and when to retry.
    #[error("Limit reached: {0}")]
    LimitReached(LimitRefusal),
    #[error("Request cancelled")]
    Cancelled,
    #[error("Internal error")]
    Internal,
}

/// Which tenant limit refused, and when a retry may pass (`limits/`).
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("{what}; retry after {}s", retry_after_secs(*retry_after))]
pub struct LimitRefusal {
    /// The limit's name as in the config, e.g. `sessions_per_user`, `requests`, `calls[0]`,
    /// `concurrency[1]`, `quotas.calls_per_user_per_day` (a bounded set per tenant: the
    /// metrics label).
    pub limit: String,
    /// What was refused, for people: "100 live sessions per user".
    pub what: String,
    /// When the refused thing may succeed (at least 1 s is advertised).
    pub retry_after: Duration,
}

/// Whole seconds to wait, rounded up, at least 1 (what `Retry-After` and
/// `data.retryAfterSeconds` carry).
pub fn retry_after_secs(d: Duration) -> u64 {
    d.as_secs() + u64::from(d.subsec_nanos() > 0).max(u64::from(d.is_zero()))
}

/// Why the gateway answered an upstream's request to the client (sampling, elicitation,
/// roots, ping) itself, with an error, instead of passing it on or waiting longer. Upstreams
/// see these, clients never do; mapped to the JSON-RPC error here.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum ServerRequestRefusal {
    /// The client did not declare the capability the method needs.
    #[error(
        "Method not found: the client did not declare the `{capability}` capability {method} needs"
    )]
    NotDeclared {
        method: String,
        capability: &'static str,
    },
    /// The client declared the capability, but not the mode or feature this request uses
    /// (elicitation's `form`/`url` modes, sampling's `tools`).
    #[error(
        "Invalid params: the client did not declare `{feature}`, which this {method} request needs"
    )]
    FeatureNotDeclared {
        method: String,
        feature: &'static str,
    },
    /// The session already has `limit` requests to its client waiting.
    #[error("the client already has {limit} requests waiting for its answers; try again later")]
    TooMany { limit: usize },
    /// The client did not answer within `after`.
    #[error("Request timed out: the client did not answer within {}", humanize(*after))]
    Expired { after: Duration },
    /// Nothing can carry it to a client.
    #[error("{0}")]
    Undeliverable(&'static str),
    /// The client session ended before answering.
    #[error("the client session ended before answering")]
    SessionEnded,
}

impl ServerRequestRefusal {
    /// The JSON-RPC error code the upstream gets.
    pub fn code(&self) -> i64 {
        match self {
            ServerRequestRefusal::NotDeclared { .. } => code::METHOD_NOT_FOUND,
            ServerRequestRefusal::FeatureNotDeclared { .. } => code::INVALID_PARAMS,
            ServerRequestRefusal::Expired { .. } => code::REQUEST_TIMEOUT,
            ServerRequestRefusal::TooMany { .. }
            | ServerRequestRefusal::Undeliverable(_)
            | ServerRequestRefusal::SessionEnded => code::INTERNAL_ERROR,
        }
    }

    /// A short, fixed name for metrics and logs.
    pub fn label(&self) -> &'static str {
        match self {
            ServerRequestRefusal::NotDeclared { .. } => "capability_not_declared",
            ServerRequestRefusal::FeatureNotDeclared { .. } => "feature_not_declared",
            ServerRequestRefusal::TooMany { .. } => "too_many_pending",
            ServerRequestRefusal::Expired { .. } => "expired",
            ServerRequestRefusal::Undeliverable(_) => "undeliverable",
            ServerRequestRefusal::SessionEnded => "session_ended",
        }
    }

    /// The JSON-RPC `error` object for the upstream.
    pub fn error_object(&self) -> Box<RawValue> {
        let body = jsonrpc::error_body(self.code(), &self.to_string(), None);
        RawValue::from_string(String::from_utf8_lossy(&body).into_owned())
            .expect("error_body writes one JSON object")
    }
}

fn humanize(d: Duration) -> String {
    if d.as_millis().is_multiple_of(1000) {
        format!("{}s", d.as_secs())
    } else {
        format!("{}ms", d.as_millis())
    }
}

/// Marks a response the gateway answered with an error (read by the request metrics).
#[derive(Debug, Clone, Copy)]
pub struct ErrorLabel(pub &'static str);

impl GatewayError {
    /// A short, fixed name of the error's kind: a bounded label for metrics and logs.
    pub fn label(&self) -> &'static str {
        use GatewayError::*;
        match self {
            NotAcceptable { .. } => "not_acceptable",
            UnsupportedMediaType => "unsupported_media_type",
            BodyTooLarge { .. } => "body_too_large",
            BodyTimeout => "body_timeout",
            BodyBudgetExhausted => "body_budget",
            BodyUnreadable => "body_unreadable",
            TooManyRequests(_) | LimitReached(_) => "limit_reached",
            Parse(_) => "parse_error",
            InvalidRequest(_) => "invalid_request",
            BatchNotSupported => "batch_not_supported",
            BatchTooLong { .. } => "batch_too_long",
            UnsupportedProtocolVersion { .. } => "unsupported_protocol_version",
            BadHeader(_) => "bad_header",
            HeaderMismatch(_) => "header_mismatch",
            MissingMeta(_) => "missing_meta",
            MissingClientCapability { .. } | MissingClientExtension(_) => {
                "missing_client_capability"
            }
            TaskNotFound(_) => "invalid_params",
            MethodNotServed(_) => "method_not_found",
            SessionRequired => "session_required",
            SessionParamRequired => "session_required",
            SessionNotFound => "session_not_found",
            SessionNotOpened(_) => "not_initialized",
            MethodNotAllowed { .. } => "method_not_allowed",
            StreamBeforeInitialized => "not_initialized",
            TooManyStreams { .. } => "too_many_streams",
            ShuttingDown => "shutting_down",
            StoreUnavailable => "store_unavailable",
            OriginNotAllowed { .. } => "origin_not_allowed",
            HostNotAllowed { .. } => "host_not_allowed",
            BadHost(_) => "bad_host",
            Unauthorized { .. } => "invalid_token",
            InsufficientScope { .. } | ToolNeedsScopes { .. } => "insufficient_scope",
            TokenInQuery { .. } => "token_in_query",
            MalformedCredentials { .. } => "invalid_request",
            AuthUnavailable => "auth_unavailable",
            MethodNotFound(_) => "method_not_found",
            InvalidParams(_) => "invalid_params",
            ResourceNotFound { .. } => "resource_not_found",
            SubscriptionsNotOffered { .. } => "subscriptions_not_offered",
            NotInitialized => "not_initialized",
            AlreadyInitialized => "already_initialized",
            UpstreamUnavailable { .. } => "upstream_unavailable",
            UpstreamTimeout { .. } => "upstream_timeout",
            UpstreamClosed { .. } => "upstream_closed",
            UpstreamProtocol { .. } => "upstream_protocol",
            Cancelled => "cancelled",
            Internal => "internal",
        }
    }

    /// The HTTP status this error is answered with.
    pub fn status(&self) -> StatusCode {
        use GatewayError::*;
        match self {
            NotAcceptable { .. } => StatusCode::NOT_ACCEPTABLE,
            UnsupportedMediaType => StatusCode::UNSUPPORTED_MEDIA_TYPE,
            BodyTooLarge { .. } => StatusCode::PAYLOAD_TOO_LARGE,
            BodyTimeout => StatusCode::REQUEST_TIMEOUT,
            BodyBudgetExhausted => StatusCode::SERVICE_UNAVAILABLE,
            Parse(_)
            | BodyUnreadable
            | InvalidRequest(_)
            | BatchNotSupported
            | BatchTooLong { .. }
            | UnsupportedProtocolVersion { .. }
            | BadHeader(_)
            | HeaderMismatch(_)
            | MissingMeta(_)
            | MissingClientCapability { .. }
            | MissingClientExtension(_)
            | SessionRequired
            | SessionParamRequired
            | SessionNotOpened(_)
            | StreamBeforeInitialized => StatusCode::BAD_REQUEST,
            TooManyStreams { .. } | TooManyRequests(_) => StatusCode::TOO_MANY_REQUESTS,
            MethodNotServed(_) => StatusCode::NOT_FOUND,
            SessionNotFound => StatusCode::NOT_FOUND,
            MethodNotAllowed { .. } => StatusCode::METHOD_NOT_ALLOWED,
            ShuttingDown | AuthUnavailable | StoreUnavailable => StatusCode::SERVICE_UNAVAILABLE,
            OriginNotAllowed { .. }
            | HostNotAllowed { .. }
            | InsufficientScope { .. }
            | ToolNeedsScopes { .. } => StatusCode::FORBIDDEN,
            Unauthorized { .. } => StatusCode::UNAUTHORIZED,
            TokenInQuery { .. } | MalformedCredentials { .. } | BadHost(_) => {
                StatusCode::BAD_REQUEST
            }
            MethodNotFound(_)
            | InvalidParams(_)
            | ResourceNotFound { .. }
            | SubscriptionsNotOffered { .. }
            | TaskNotFound(_)
            | NotInitialized
            | AlreadyInitialized
            | UpstreamUnavailable { .. }
            | UpstreamTimeout { .. }
            | UpstreamClosed { .. }
            | UpstreamProtocol { .. }
            | LimitReached(_)
            | Cancelled
            | Internal => StatusCode::OK,
        }
    }

    /// The JSON-RPC error code.
    pub fn code(&self) -> i64 {
        use GatewayError::*;
        match self {
            Parse(_) => code::PARSE_ERROR,
            UnsupportedProtocolVersion { .. } => code::UNSUPPORTED_PROTOCOL_VERSION,
            SessionNotFound => code::SESSION_NOT_FOUND,
            HeaderMismatch(_) => code::HEADER_MISMATCH,
            MissingMeta(_) => code::INVALID_PARAMS,
            MissingClientCapability { .. } | MissingClientExtension(_) => {
                code::MISSING_CLIENT_CAPABILITY
            }
            TaskNotFound(_) => code::INVALID_PARAMS,
            MethodNotServed(_) => code::METHOD_NOT_FOUND,
            TooManyRequests(_) | LimitReached(_) => code::LIMIT_REACHED,
            NotAcceptable { .. }
            | UnsupportedMediaType
            | BodyTooLarge { .. }
            | BodyTimeout
            | BodyUnreadable
            | InvalidRequest(_)
            | BatchNotSupported
            | BatchTooLong { .. }
            | BadHeader(_)
            | SessionRequired
            | SessionParamRequired
            | SessionNotOpened(_)
            | MethodNotAllowed { .. }
            | StreamBeforeInitialized
            | TooManyStreams { .. }
            | NotInitialized
            | AlreadyInitialized => code::INVALID_REQUEST,
            ShuttingDown | StoreUnavailable | BodyBudgetExhausted => code::CONNECTION_CLOSED,
            OriginNotAllowed { .. }
            | HostNotAllowed { .. }
            | Unauthorized { .. }
            | InsufficientScope { .. }
            | ToolNeedsScopes { .. }
            | TokenInQuery { .. }
            | MalformedCredentials { .. }
            | BadHost(_)
            | AuthUnavailable => code::INVALID_REQUEST,
            MethodNotFound(_) => code::METHOD_NOT_FOUND,
            InvalidParams(_) | ResourceNotFound { .. } | SubscriptionsNotOffered { .. } => {
                code::INVALID_PARAMS
            }
            UpstreamUnavailable { .. } => code::UPSTREAM_UNAVAILABLE,
            UpstreamTimeout { .. } => code::REQUEST_TIMEOUT,
            UpstreamClosed { .. } => code::CONNECTION_CLOSED,
            UpstreamProtocol { .. } | Internal => code::INTERNAL_ERROR,
            Cancelled => code::REQUEST_CANCELLED,
        }
    }

    /// Structured `data` for errors where a client can act on it.
    pub fn data(&self) -> Option<Value> {
        match self {
            GatewayError::UnsupportedProtocolVersion { requested } => Some(serde_json::json!({
                "supported": ProtocolVersion::served_list(),
                "requested": requested,
            })),
            GatewayError::MissingClientCapability { required } => {
                let caps: serde_json::Map<String, Value> = required
                    .iter()
                    .map(|c| (c.clone(), Value::Object(Default::default())))
                    .collect();
                Some(serde_json::json!({ "requiredCapabilities": caps }))
            }
            GatewayError::MissingClientExtension(name) => Some(serde_json::json!({
                "requiredCapabilities": { "extensions": { *name: {} } }
            })),
            GatewayError::TooManyRequests(r) | GatewayError::LimitReached(r) => {
                Some(serde_json::json!({
                    "limit": r.limit,
                    "retryAfterSeconds": retry_after_secs(r.retry_after),
                }))
            }
            GatewayError::BatchTooLong { max, .. } => Some(serde_json::json!({
                "limit": "max_batch",
                "maxBatch": max,
            })),
            GatewayError::ResourceNotFound { uri, .. } => Some(serde_json::json!({ "uri": uri })),
            GatewayError::SubscriptionsNotOffered { uri, upstream } => {
                Some(serde_json::json!({ "uri": uri, "upstream": upstream }))
            }
            GatewayError::UpstreamUnavailable { upstream, .. }
            | GatewayError::UpstreamTimeout { upstream, .. }
            | GatewayError::UpstreamClosed { upstream, .. }
            | GatewayError::UpstreamProtocol { upstream, .. } => {
                Some(serde_json::json!({ "upstream": upstream }))
            }
            _ => None,
        }
    }

    /// The JSON-RPC error response body for this error.
    pub fn to_jsonrpc(&self, id: Option<&RawValue>) -> Bytes {
        jsonrpc::error_response(id, self.code(), &self.to_string(), self.data().as_ref())
    }

    /// The full HTTP response: status, `application/json` JSON-RPC error body, and `Allow` for 405.
    pub fn into_response(self, id: Option<&RawValue>) -> Response<Body> {
        let body = self.to_jsonrpc(id);
        let mut resp = Response::new(Body::from(body));
        *resp.status_mut() = self.status();
        resp.extensions_mut().insert(ErrorLabel(self.label()));
        let headers = resp.headers_mut();
        headers.insert(
            header::CONTENT_TYPE,
            HeaderValue::from_static("application/json"),
        );
        match &self {
            GatewayError::MethodNotAllowed { allow } => {
                headers.insert(header::ALLOW, HeaderValue::from_static(allow));
            }
            GatewayError::Unauthorized {
                www_authenticate, ..
            }
            | GatewayError::InsufficientScope {
                www_authenticate, ..
            }
            | GatewayError::TokenInQuery { www_authenticate }
            | GatewayError::MalformedCredentials {
                www_authenticate, ..
            } => {
                if let Ok(v) = HeaderValue::from_str(www_authenticate) {
                    headers.insert(header::WWW_AUTHENTICATE, v);
                }
            }
            GatewayError::AuthUnavailable
            | GatewayError::StoreUnavailable
            | GatewayError::TooManyStreams { .. } => {
                headers.insert(header::RETRY_AFTER, HeaderValue::from_static("5"));
            }
            GatewayError::TooManyRequests(r) => {
                headers.insert(
                    header::RETRY_AFTER,
                    HeaderValue::from(retry_after_secs(r.retry_after)),
                );
            }
            // Bodies in the budget finish or time out within seconds. Refused before it was
            // read: the connection ends, as below.
            GatewayError::BodyBudgetExhausted => {
                headers.insert(header::RETRY_AFTER, HeaderValue::from_static("1"));
                headers.insert(header::CONNECTION, HeaderValue::from_static("close"));
            }
            // The rest of the body is still on its way: the connection cannot carry another
            // request, and says so (HTTP/2 drops the header; the stream is reset instead).
            // The listener's lingering close lets the client finish sending and read this.
            GatewayError::BodyTimeout | GatewayError::BodyTooLarge { .. } => {
                headers.insert(header::CONNECTION, HeaderValue::from_static("close"));
            }
            _ => {}
        }
        resp
    }
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used)]
    use super::*;

    #[test]
    fn transport_errors_map_to_http_statuses_with_null_id_bodies() {
        let cases = [
            (GatewayError::NotAcceptable { expected: "x" }, 406),
            (GatewayError::UnsupportedMediaType, 415),
            (GatewayError::BodyTooLarge { limit: 10 }, 413),
            (GatewayError::SessionRequired, 400),
            (GatewayError::SessionNotFound, 404),
            (GatewayError::MethodNotAllowed { allow: "GET" }, 405),
            (GatewayError::SessionParamRequired, 400),
            (GatewayError::SessionNotOpened("x"), 400),
            (GatewayError::BadHost("x"), 400),
            (GatewayError::BodyTimeout, 408),
            (GatewayError::BodyBudgetExhausted, 503),
            (GatewayError::BodyUnreadable, 400),
            (GatewayError::StreamBeforeInitialized, 400),
            (GatewayError::TooManyStreams { limit: 2 }, 429),
        ];
        for (err, status) in cases {
            assert_eq!(err.status().as_u16(), status, "{err}");
            let v: Value = serde_json::from_slice(&err.to_jsonrpc(None)).unwrap();
            assert_eq!(v["id"], Value::Null);
            assert_eq!(v["error"]["code"], err.code());
        }
    }

    #[test]
    fn body_refusals_tell_the_client_when_to_retry_or_that_the_connection_ends() {
        let busy = GatewayError::BodyBudgetExhausted.into_response(None);
        assert_eq!(busy.headers()[header::RETRY_AFTER], "1");
        assert_eq!(busy.headers()[header::CONNECTION], "close");
        let slow = GatewayError::BodyTimeout.into_response(None);
        assert_eq!(slow.headers()[header::CONNECTION], "close");
        let large = GatewayError::BodyTooLarge { limit: 10 }.into_response(None);
        assert_eq!(large.headers()[header::CONNECTION], "close");
    }

    #[test]
    fn unsupported_version_lists_served_versions() {
        let err = GatewayError::UnsupportedProtocolVersion {
            requested: "1900-01-01".into(),
        };
        let id = jsonrpc::raw_u64(1);
        let v: Value = serde_json::from_slice(&err.to_jsonrpc(Some(&id))).unwrap();
        assert_eq!(v["id"], 1);
        assert_eq!(v["error"]["code"], -32022);
        assert_eq!(v["error"]["data"]["requested"], "1900-01-01");
        assert_eq!(v["error"]["data"]["supported"][0], "2026-07-28");
    }

    #[test]
    fn too_many_streams_says_when_to_come_back() {
        let resp = GatewayError::TooManyStreams { limit: 4 }.into_response(None);
        assert_eq!(resp.status(), 429);
        assert_eq!(resp.headers()[header::RETRY_AFTER], "5");
    }

    #[test]
    fn server_request_refusals_are_json_rpc_errors_with_the_spec_codes() {
        let cases = [
            (
                ServerRequestRefusal::NotDeclared {
                    method: "roots/list".into(),
                    capability: "roots",
                },
                -32601,
            ),
            (
                ServerRequestRefusal::FeatureNotDeclared {
                    method: "elicitation/create".into(),
                    feature: "elicitation.url",
                },
                -32602,
            ),
            (
                ServerRequestRefusal::Expired {
                    after: Duration::from_secs(2),
                },
                -32001,
            ),
            (ServerRequestRefusal::TooMany { limit: 64 }, -32603),
        ];
        for (refusal, code) in cases {
            let v: Value = serde_json::from_str(refusal.error_object().get()).unwrap();
            assert_eq!(v["code"], code, "{refusal}");
            assert_eq!(v["message"], refusal.to_string());
        }
    }

    #[test]
    fn timeout_message_names_upstream_and_duration() {
        let err = GatewayError::UpstreamTimeout {
            upstream: "slow".into(),
            after: Duration::from_millis(1500),
        };
        assert_eq!(
            err.to_string(),
            "upstream \"slow\" did not answer within 1500ms"
        );
        assert_eq!(err.code(), -32001);
    }
}
