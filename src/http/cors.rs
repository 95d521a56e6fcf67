//! CORS for browser clients (Fetch standard, "CORS protocol"): which origins may read the
//! gateway's answers is exactly what `guard` admits — a tenant's `allowed_origins`, its own
//! origin, and loopback origins on a loopback listener with nothing listed — and this module
//! only writes that grant into headers. A preflight (`OPTIONS` with `Origin` and
//! `Access-Control-Request-Method`) from an admitted origin is answered here, after the Host
//! and Origin checks and before anything else: no token, no session, no rate charged. Every
//! later answer to an admitted origin carries the grant, whatever its status, so a page can read
//! a 401's challenge or a JSON-RPC error.
//!
//! Credentials in the CORS sense (cookies, HTTP authentication, TLS client certificates) are
//! not supported: the gateway's credential is a bearer token the page sets in `Authorization`,
//! which CORS treats as an ordinary header. So `Access-Control-Allow-Credentials` is never
//! sent, a page fetching with `credentials: "include"` is refused by its browser, and no
//! ambient authority of the browser ever reaches the gateway. The origin is echoed all the
//! same (never `*`) so that only admitted origins read the answers. The RFC 9728 metadata is
//! public: any origin may read it (`*`).

use axum::body::Body;
use axum::http::request::Parts;
use axum::http::{HeaderMap, HeaderValue, Method, Response, StatusCode, header};

use crate::protocol::header as mcp;

/// Methods a preflight may be granted, per kind of path (`OPTIONS` itself included).
pub const ENDPOINT_METHODS: &str = "GET, POST, DELETE, OPTIONS";
/// `<endpoint>/sse` of the 2024-11-05 transport, and the RFC 9728 metadata.
pub const GET_METHODS: &str = "GET, OPTIONS";
/// `<endpoint>/messages` of the 2024-11-05 transport.
pub const POST_METHODS: &str = "POST, OPTIONS";

/// The response headers a client must read: the session id, the negotiated revision, the
/// challenge of a 401/403, and when to retry a 429/503.
const EXPOSED: &str = "Mcp-Session-Id, MCP-Protocol-Version, WWW-Authenticate, Retry-After";

/// How long a browser may reuse a preflight's answer (Chromium caps it at 2 h). A grant
/// withdrawn by a reload meanwhile still refuses the request itself: every request is checked.
const MAX_AGE: &str = "7200";

/// Request headers a page may send beyond the CORS-safelisted ones: those of the Streamable
/// HTTP transport and the 2026-07-28 revision, the bearer token, and W3C trace context (the
/// gateway adopts a client's trace). `Mcp-Param-*` goes by prefix (`PARAM_PREFIX`).
const ALLOWED_REQUEST_HEADERS: &[&str] = &[
    "accept",
    "authorization",
    "content-type",
    mcp::SESSION_ID,
    mcp::PROTOCOL_VERSION,
    mcp::LAST_EVENT_ID,
    mcp::METHOD,
    mcp::NAME,
    "traceparent",
    "tracestate",
];

/// Most names read from `Access-Control-Request-Headers`; further ones are not granted.
const MAX_REQUESTED_NAMES: usize = 64;

/// What the answers to one request may tell its browser.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Grant {
    /// Not a cross-origin browser request (no `Origin`): nothing to add.
    None,
    /// An origin the guard admitted: echoed, with `Vary: Origin`.
    Origin(HeaderValue),
    /// A public document: any origin, `*`.
    Any,
}

impl Grant {
    /// The grant of a request that passed `guard::check_front`: its `Origin`, if it sent one,
    /// was admitted there (a value sent twice was refused).
    pub fn admitted(headers: &HeaderMap) -> Grant {
        match headers.get(header::ORIGIN) {
            Some(origin) => Grant::Origin(origin.clone()),
            None => Grant::None,
        }
    }

    /// The grant of a public document: any origin.
    pub fn public(headers: &HeaderMap) -> Grant {
        match headers.contains_key(header::ORIGIN) {
            true => Grant::Any,
            false => Grant::None,
        }
    }

    /// The answer to a preflight (`OPTIONS` from a granted origin with
    /// `Access-Control-Request-Method`), or `None` when the request is not one: 204 with the
    /// grant, `methods`, the requested headers that are allowed, and `Access-Control-Max-Age`.
    /// A requested method or header outside the grant is simply not listed: the browser then
    /// refuses the request itself.
    pub fn preflight(&self, parts: &Parts, methods: &'static str) -> Option<Response<Body>> {
        let is_preflight = parts.method == Method::OPTIONS
            && parts
                .headers
                .contains_key(header::ACCESS_CONTROL_REQUEST_METHOD);
        if !is_preflight || matches!(self, Grant::None) {
            return None;
        }
        let mut resp = Response::new(Body::empty());
        *resp.status_mut() = StatusCode::NO_CONTENT;
        let headers = resp.headers_mut();
        self.write_origin(headers);
        headers.insert(
            header::ACCESS_CONTROL_ALLOW_METHODS,
            HeaderValue::from_static(methods),
        );
        if let Some(allowed) = allowed_request_headers(&parts.headers) {
            headers.insert(header::ACCESS_CONTROL_ALLOW_HEADERS, allowed);
        }
        headers.insert(
            header::ACCESS_CONTROL_MAX_AGE,
            HeaderValue::from_static(MAX_AGE),
        );
        Some(resp)
    }

    /// `resp` (any status, a stream too: only its head changes) with the grant and, for an
    /// admitted origin, the headers its page may read.
    pub fn apply(&self, mut resp: Response<Body>) -> Response<Body> {
        let headers = resp.headers_mut();
        self.write_origin(headers);
        if let Grant::Origin(_) = self {
            headers.insert(
                header::ACCESS_CONTROL_EXPOSE_HEADERS,
                HeaderValue::from_static(EXPOSED),
            );
        }
        resp
    }

    fn write_origin(&self, headers: &mut HeaderMap) {
        match self {
            Grant::None => {}
            Grant::Origin(origin) => {
                headers.insert(header::ACCESS_CONTROL_ALLOW_ORIGIN, origin.clone());
                headers.append(header::VARY, HeaderValue::from_static("Origin"));
            }
            Grant::Any => {
                headers.insert(
                    header::ACCESS_CONTROL_ALLOW_ORIGIN,
                    HeaderValue::from_static("*"),
                );
            }
        }
    }
}

/// The `Access-Control-Allow-Headers` of a preflight: the names of
/// `Access-Control-Request-Headers` that are allowed — the request's own value when all are
/// (the common case, nothing allocated), else a list of the allowed ones; `None` when none
/// was asked for or none is allowed.
fn allowed_request_headers(headers: &HeaderMap) -> Option<HeaderValue> {
    let mut values = headers
        .get_all(header::ACCESS_CONTROL_REQUEST_HEADERS)
        .iter();
    let first = values.next()?;
    let repeated = values.next().is_some();
    let all_allowed = !repeated
        && first.to_str().is_ok_and(|text| {
            let mut count = 0;
            requested_names(text).all(|name| {
                count += 1;
                count <= MAX_REQUESTED_NAMES && is_allowed(name)
            })
        });
    if all_allowed && !first.is_empty() {
        return Some(first.clone());
    }
    let mut granted = String::new();
    let names = headers
        .get_all(header::ACCESS_CONTROL_REQUEST_HEADERS)
        .iter()
        .filter_map(|value| value.to_str().ok())
        .flat_map(requested_names);
    for name in names.take(MAX_REQUESTED_NAMES).filter(|n| is_allowed(n)) {
        if !granted.is_empty() {
            granted.push_str(", ");
        }
        granted.push_str(name);
    }
    HeaderValue::from_str(&granted)
        .ok()
        .filter(|v| !v.is_empty())
}

/// The names of one `Access-Control-Request-Headers` value (a comma-separated list).
fn requested_names(value: &str) -> impl Iterator<Item = &str> {
    value
        .split(',')
        .map(str::trim)
        .filter(|name| !name.is_empty())
}

/// Whether a page may send the request header `name` (any case).
fn is_allowed(name: &str) -> bool {
    if ALLOWED_REQUEST_HEADERS
        .iter()
        .any(|allowed| name.eq_ignore_ascii_case(allowed))
    {
        return true;
    }
    let prefix = mcp::PARAM_PREFIX.len();
    name.len() > prefix
        && name
            .get(..prefix)
            .is_some_and(|start| start.eq_ignore_ascii_case(mcp::PARAM_PREFIX))
        && name.bytes().skip(prefix).all(is_token_byte)
}

/// RFC 9110 §5.6.2 `tchar`: what a header name is made of.
fn is_token_byte(b: u8) -> bool {
    b.is_ascii_alphanumeric() || b"!#$%&'*+-.^_`|~".contains(&b)
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used)]
    use super::*;

    fn parts(method: &str, headers: &[(&str, &str)]) -> Parts {
        let mut req = axum::http::Request::builder()
            .method(method)
            .uri("/t/a/mcp");
        for (name, value) in headers {
            req = req.header(*name, *value);
        }
        req.body(()).unwrap().into_parts().0
    }

    fn header<'r>(resp: &'r Response<Body>, name: &str) -> Option<&'r str> {
        resp.headers().get(name).map(|v| v.to_str().unwrap())
    }

    const ORIGIN: &str = "http://127.0.0.1:3000";

    #[test]
    fn a_preflight_is_granted_methods_the_allowed_headers_and_a_max_age() {
        let p = parts(
            "OPTIONS",
            &[
                ("origin", ORIGIN),
                ("access-control-request-method", "POST"),
                (
                    "access-control-request-headers",
                    "authorization,content-type,mcp-param-region,mcp-protocol-version",
                ),
            ],
        );
        let resp = Grant::admitted(&p.headers)
            .preflight(&p, ENDPOINT_METHODS)
            .unwrap();
        assert_eq!(resp.status(), StatusCode::NO_CONTENT);
        assert_eq!(header(&resp, "access-control-allow-origin"), Some(ORIGIN));
        assert_eq!(header(&resp, "vary"), Some("Origin"));
        assert_eq!(
            header(&resp, "access-control-allow-methods"),
            Some("GET, POST, DELETE, OPTIONS")
        );
        assert_eq!(
            header(&resp, "access-control-allow-headers"),
            Some("authorization,content-type,mcp-param-region,mcp-protocol-version")
        );
        assert_eq!(header(&resp, "access-control-max-age"), Some("7200"));
        assert_eq!(header(&resp, "access-control-allow-credentials"), None);
    }

    #[test]
    fn only_allowed_request_headers_are_granted() {
        let allowed = |values: &[&str]| {
            let mut headers = HeaderMap::new();
            for v in values {
                headers.append(
                    header::ACCESS_CONTROL_REQUEST_HEADERS,
                    HeaderValue::from_str(v).unwrap(),
                );
            }
            allowed_request_headers(&headers).map(|v| v.to_str().unwrap().to_owned())
        };
        assert_eq!(allowed(&[]), None);
        assert_eq!(allowed(&[""]), None);
        assert_eq!(allowed(&["x-evil"]), None);
        assert_eq!(allowed(&["mcp-param-"]), None);
        assert_eq!(
            allowed(&["Mcp-Session-Id, X-Evil ,last-event-id,mcp-param-a b"]).as_deref(),
            Some("Mcp-Session-Id, last-event-id")
        );
        assert_eq!(
            allowed(&["mcp-method", "mcp-name"]).as_deref(),
            Some("mcp-method, mcp-name")
        );
        assert_eq!(
            allowed(&["MCP-PARAM-Tenant_Id, traceparent"]).as_deref(),
            Some("MCP-PARAM-Tenant_Id, traceparent")
        );
        let many = vec!["mcp-name"; 3 * MAX_REQUESTED_NAMES].join(",");
        let granted = vec!["mcp-name"; MAX_REQUESTED_NAMES].join(", ");
        assert_eq!(allowed(&[&many]), Some(granted));
    }

    #[test]
    fn what_is_not_a_preflight_is_left_to_the_endpoint() {
        let no_method = parts("OPTIONS", &[("origin", ORIGIN)]);
        assert!(
            Grant::admitted(&no_method.headers)
                .preflight(&no_method, ENDPOINT_METHODS)
                .is_none()
        );
        let no_origin = parts("OPTIONS", &[("access-control-request-method", "POST")]);
        assert!(
            Grant::admitted(&no_origin.headers)
                .preflight(&no_origin, ENDPOINT_METHODS)
                .is_none()
        );
        let post = parts(
            "POST",
            &[
                ("origin", ORIGIN),
                ("access-control-request-method", "POST"),
            ],
        );
        assert!(
            Grant::admitted(&post.headers)
                .preflight(&post, ENDPOINT_METHODS)
                .is_none()
        );
    }

    #[test]
    fn answers_to_an_admitted_origin_carry_the_grant_and_the_exposed_headers() {
        let p = parts("POST", &[("origin", ORIGIN)]);
        let mut answer = Response::new(Body::empty());
        *answer.status_mut() = StatusCode::UNAUTHORIZED;
        answer
            .headers_mut()
            .insert(header::VARY, HeaderValue::from_static("accept-encoding"));
        let resp = Grant::admitted(&p.headers).apply(answer);
        assert_eq!(resp.status(), StatusCode::UNAUTHORIZED);
        assert_eq!(header(&resp, "access-control-allow-origin"), Some(ORIGIN));
        let vary: Vec<_> = resp.headers().get_all("vary").iter().collect();
        assert_eq!(vary, ["accept-encoding", "Origin"]);
        assert_eq!(
            header(&resp, "access-control-expose-headers"),
            Some("Mcp-Session-Id, MCP-Protocol-Version, WWW-Authenticate, Retry-After")
        );
        assert_eq!(header(&resp, "access-control-allow-credentials"), None);

        let plain = parts("POST", &[]);
        let resp = Grant::admitted(&plain.headers).apply(Response::new(Body::empty()));
        assert!(resp.headers().is_empty());
    }

    #[test]
    fn public_documents_are_granted_to_any_origin() {
        let p = parts(
            "OPTIONS",
            &[
                ("origin", "https://anywhere.example"),
                ("access-control-request-method", "GET"),
                ("access-control-request-headers", "mcp-protocol-version"),
            ],
        );
        let grant = Grant::public(&p.headers);
        let resp = grant.preflight(&p, GET_METHODS).unwrap();
        assert_eq!(header(&resp, "access-control-allow-origin"), Some("*"));
        assert_eq!(
            header(&resp, "access-control-allow-methods"),
            Some("GET, OPTIONS")
        );
        assert_eq!(header(&resp, "vary"), None);
        let resp = grant.apply(Response::new(Body::empty()));
        assert_eq!(header(&resp, "access-control-allow-origin"), Some("*"));
        assert_eq!(header(&resp, "access-control-expose-headers"), None);
        assert_eq!(Grant::public(&HeaderMap::new()), Grant::None);
    }
}
