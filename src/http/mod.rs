//! The HTTP front: the MCP listener's requests ([`Front`]: the health probes, the RFC 9728
//! metadata of each protected tenant, and the tenant MCP endpoints behind the security front
//! (`guard`, and `cors` for browsers): the Streamable HTTP endpoint and, below it, the
//! 2024-11-05 HTTP+SSE paths (`legacy_sse`)). The admin listener's axum routes too: metrics,
//! probes, the status page.

mod authority;
mod batch;
pub mod client_addr;
mod cors;
pub mod endpoint;
pub mod guard;
pub mod head;
pub mod headers;
pub mod legacy_sse;
mod retry_relay;
pub mod sse;
pub mod stateless;
mod status;

use std::sync::Arc;

use axum::Router;
use axum::body::Body;
use axum::extract::{Request, State};
use axum::http::{HeaderValue, Method, Response, StatusCode, header};
use axum::routing::get;
use futures_util::future::Either;
use tower_http::trace::{DefaultOnResponse, TraceLayer};
use tracing::Level;

use crate::cluster::BusMessage;
use crate::gateway::{Gateway, RequestRelay};
use crate::listener::ConnInfo;
use crate::session::LiveSession;
use crate::tenant::Tenant;
use head::Head;

/// The router's and this layer's part of the gateway's bus (`gateway::RequestRelay`), given
/// to the gateway by `app::build`.
pub struct Relay;

impl RequestRelay for Relay {
    fn client_message(&self, tenant: Arc<Tenant>, session: Arc<LiveSession>, message: String) {
        tokio::spawn(async move {
            crate::router::handle_forwarded(&tenant, &session, message.as_bytes()).await;
        });
    }

    fn continue_retry(&self, gateway: Arc<Gateway>, tenant: Arc<Tenant>, resume: BusMessage) {
        tokio::spawn(retry_relay::continue_here(gateway, tenant, resume));
    }
}

/// The MCP listener's requests: the probes, then each tenant's paths ([`dispatch`]).
#[derive(Clone)]
pub enum Front {
    /// Matched by hand: axum's router (its path router, method router, extractors, boxed
    /// future and response fix-ups) cost a forwarded call ~3,500 instructions for two fixed
    /// paths and a fallback.
    Direct(Arc<Gateway>),
    /// The same behind tower-http's trace layer (a debug-level span and response line per
    /// HTTP request), in an axum router: only when debug logs are on.
    Traced(Router),
}

/// The MCP listener's front; with debug logs on for this module or `tower_http`, a
/// debug-level span and response line per HTTP request.
pub fn front(gateway: Arc<Gateway>) -> Front {
    // Only when its lines can be seen (the filter is fixed at start): otherwise the layer cost
    // ~1,000 instructions per request for nothing but an `ERROR response failed` line per 5xx,
    // with no context, doubling the gateway's own line with the request's context (a Redis
    // outage under load: one each per refused request).
    if !tracing::enabled!(Level::DEBUG) && !tracing::enabled!(target: "tower_http", Level::DEBUG) {
        return Front::Direct(gateway);
    }
    // The span names method and path only: a query string may carry a (refused) token.
    let trace = TraceLayer::new_for_http()
        .make_span_with(|req: &Request| {
            tracing::debug_span!("request", method = %req.method(), path = %req.uri().path())
        })
        .on_response(DefaultOnResponse::new().level(Level::DEBUG));
    let router = Router::new()
        .fallback(move |req: Request| {
            let conn = req.extensions().get::<ConnInfo>().copied();
            dispatch(gateway.clone(), req, conn)
        })
        .layer(trace);
    Front::Traced(router)
}

impl crate::listener::Service for Front {
    fn call(
        &self,
        req: Request,
        conn: ConnInfo,
    ) -> impl Future<Output = Response<Body>> + Send + use<> {
        match self {
            Front::Direct(gateway) => Either::Left(dispatch(gateway.clone(), req, Some(conn))),
            Front::Traced(router) => {
                Either::Right(crate::listener::Service::call(router, req, conn))
            }
        }
    }
}

/// The admin listener's routes: Prometheus metrics, the probes, and the status page and its
/// JSON (`status`, behind `admin_token` when set); never MCP traffic.
pub fn admin_router(gateway: Arc<Gateway>) -> Router {
    Router::new()
        .route("/admin/status", get(status::page))
        .route("/admin/api/status", get(status::api))
        .route("/metrics", get(metrics))
        .route("/healthz", get(|| async { "ok\n" }))
        .route("/readyz", get(readiness))
        .with_state(gateway)
}

async fn metrics(State(gateway): State<Arc<Gateway>>) -> Response<Body> {
    gateway.refresh_gauges();
    crate::metrics::get()
        .body_bytes_buffered
        .set(i64::try_from(gateway.bodies.buffered()).unwrap_or(i64::MAX));
    let mut resp = Response::new(Body::from(crate::metrics::get().render()));
    resp.headers_mut().insert(
        axum::http::header::CONTENT_TYPE,
        axum::http::HeaderValue::from_static("text/plain; version=0.0.4; charset=utf-8"),
    );
    resp
}

/// Readiness: 200 while the session store answers, else 503 (load balancers route around the
/// replica until the store is back; liveness stays `/healthz`).
async fn readiness(State(gateway): State<Arc<Gateway>>) -> Response<Body> {
    let r = gateway.readiness().await;
    let mut text = String::from(if r.ready { "ready\n" } else { "not ready\n" });
    if let Some(e) = &r.store {
        tracing::warn!(error = %e, "not ready: session store unavailable");
        text.push_str("session store unavailable\n");
    }
    for d in &r.down {
        text.push_str(d);
        text.push('\n');
    }
    let mut resp = Response::new(Body::from(text));
    if !r.ready {
        *resp.status_mut() = StatusCode::SERVICE_UNAVAILABLE;
    }
    resp
}

/// The two probes the MCP listener answers beside the tenants (the admin listener too), GET
/// or HEAD.
#[derive(Clone, Copy)]
enum Probe {
    Live,
    Ready,
}

impl Probe {
    fn at(path: &str) -> Option<Probe> {
        match path {
            "/healthz" => Some(Probe::Live),
            "/readyz" => Some(Probe::Ready),
            _ => None,
        }
    }

    async fn answer(self, gateway: Arc<Gateway>, method: &Method) -> Response<Body> {
        if !matches!(*method, Method::GET | Method::HEAD) {
            let mut resp = plain(StatusCode::METHOD_NOT_ALLOWED, "");
            resp.headers_mut()
                .insert(header::ALLOW, HeaderValue::from_static("GET,HEAD"));
            return resp;
        }
        match self {
            // The answer the admin listener's route gives (axum's for a `&str`).
            Probe::Live => axum::response::IntoResponse::into_response("ok\n"),
            Probe::Ready => readiness(State(gateway)).await,
        }
    }
}

/// One request to the MCP listener: `/healthz` and `/readyz`, else the tenant whose endpoint
/// (or protected-resource metadata, or 2024-11-05 stream or message) path matches, else 404.
/// Every endpoint request passes the security front first. `conn` is the connection the
/// request came on (`None`: built in-process).
fn dispatch(
    gateway: Arc<Gateway>,
    req: Request,
    conn: Option<ConnInfo>,
) -> impl Future<Output = Response<Body>> {
    // Taken apart here, and the handlers below borrow the parts: an `async fn`'s arguments
    // stay in its state beside whatever they are moved into, and each copy would size (and
    // be copied with) every request's future.
    let (parts, body) = req.into_parts();
    let parts = Head::new(parts, conn);
    async move {
        let path = parts.uri.path();
        if let Some(probe) = Probe::at(path) {
            // Boxed: the readiness check's state would size every request's future.
            return Box::pin(probe.answer(gateway, &parts.method)).await;
        }
        if let Some(tenant) = gateway.tenant_by_metadata_path(path) {
            return protected_resource_metadata(&gateway, &tenant, &parts);
        }
        let (tenant, legacy) = match gateway.tenant_by_path(path) {
            Some(tenant) => (tenant, None),
            None => match legacy_sse::split(path)
                .and_then(|(base, route)| Some((gateway.tenant_by_path(base)?, Some(route))))
            {
                Some(found) => found,
                None => return not_found("no MCP endpoint at this path\n"),
            },
        };
        let host = match guard::check_front(&gateway, &tenant, &parts) {
            Ok(host) => host,
            Err(e) => return refused(&tenant, e),
        };
        // A browser origin admitted by the front: a preflight is answered on that alone (no
        // token, no session, no rate), every other answer carries the grant.
        let grant = cors::Grant::admitted(&parts.headers);
        let methods = match legacy {
            None => cors::ENDPOINT_METHODS,
            Some(legacy_sse::Route::Stream) => cors::GET_METHODS,
            Some(legacy_sse::Route::Messages) => cors::POST_METHODS,
        };
        if let Some(preflight) = grant.preflight(&parts, methods) {
            return preflight;
        }
        let principal = match guard::admit(&gateway, &tenant, &parts, &host).await {
            Ok(p) => p,
            Err(e) => return grant.apply(refused(&tenant, e)),
        };
        let resp = match legacy {
            // Boxed: its state (~2.5 KB) would size the request's future, which hyper moves
            // by value several times per request (a `memcpy` each, ~300 instructions).
            None => {
                Box::pin(endpoint::handle(
                    &gateway, &tenant, &principal, &parts, body,
                ))
                .await
            }
            // Boxed: the 2024-11-05 transport's large state would size every request's future.
            Some(route) => {
                Box::pin(legacy_sse::handle(
                    gateway, tenant, principal, parts, body, route,
                ))
                .await
            }
        };
        grant.apply(resp)
    }
}

/// The answer to a request the security front refused, counted by reason.
fn refused(tenant: &Tenant, e: crate::error::GatewayError) -> Response<Body> {
    crate::metrics::get()
        .auth_failures
        .with_label_values(&[&tenant.name, e.label()])
        .inc();
    e.into_response(None)
}

/// RFC 9728 metadata of a tenant with `auth` (404 for tenants without), under the endpoint's
/// Host rules: a Host the endpoint would refuse cannot have a resource named after it. The
/// document is public, so any browser origin may read it (and preflight it).
fn protected_resource_metadata(gateway: &Gateway, tenant: &Tenant, parts: &Head) -> Response<Body> {
    let grant = cors::Grant::public(&parts.headers);
    let Some(auth) = &tenant.authenticator else {
        return grant.apply(not_found("this endpoint is not a protected resource\n"));
    };
    let host = match guard::check_host(gateway, tenant, parts) {
        Ok(host) => host,
        Err(e) => return grant.apply(e.into_response(None)),
    };
    if let Some(preflight) = grant.preflight(parts, cors::GET_METHODS) {
        return preflight;
    }
    let resource = guard::resource_identity(tenant, parts, &host);
    let body = crate::auth::metadata_document(&resource, auth.config(), &tenant.config.server.name);
    let mut resp = Response::new(Body::from(body));
    resp.headers_mut().insert(
        axum::http::header::CONTENT_TYPE,
        axum::http::HeaderValue::from_static("application/json"),
    );
    grant.apply(resp)
}

fn not_found(text: &'static str) -> Response<Body> {
    plain(StatusCode::NOT_FOUND, text)
}

fn plain(status: StatusCode, text: &'static str) -> Response<Body> {
    let mut resp = Response::new(Body::from(text));
    *resp.status_mut() = status;
    resp
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used)]
    use super::*;
    use tower::ServiceExt;

    /// A plain connection from a loopback client.
    const LOOPBACK: ConnInfo = ConnInfo {
        tls: false,
        remote: std::net::SocketAddr::V4(std::net::SocketAddrV4::new(
            std::net::Ipv4Addr::LOCALHOST,
            40000,
        )),
    };

    async fn gateway() -> Arc<Gateway> {
        let config = crate::config::parse(
            "tenants:\n  - name: a\n    upstreams:\n      - {name: u, http: {url: \"http://127.0.0.1:9/mcp\"}}\n",
            "test.yaml",
            &|_| None,
        )
        .unwrap();
        crate::crypto::install_crypto_provider();
        Gateway::open(&config, Box::new(Relay)).await.unwrap()
    }

    async fn call(method: &str, path: &str) -> (StatusCode, String) {
        let req = Request::builder()
            .method(method)
            .uri(path)
            .header("host", "127.0.0.1:8080")
            .body(Body::empty())
            .unwrap();
        let resp = crate::listener::Service::call(&front(gateway().await), req, LOOPBACK).await;
        let status = resp.status();
        let body = axum::body::to_bytes(resp.into_body(), 1 << 16)
            .await
            .unwrap();
        (status, String::from_utf8_lossy(&body).into_owned())
    }

    #[tokio::test]
    async fn the_status_page_needs_the_admin_token_when_one_is_set() {
        let config = crate::config::parse(
            "admin_listen: 127.0.0.1:9090\nadmin_token: admin-token-0123456789\ntenants:\n  - name: a\n    upstreams:\n      - {name: u, http: {url: \"http://127.0.0.1:9/mcp\"}}\n",
            "test.yaml",
            &|_| None,
        )
        .unwrap();
        crate::crypto::install_crypto_provider();
        let gateway = Gateway::open(&config, Box::new(Relay)).await.unwrap();
        let call = |path: &'static str, auth: &'static [&'static str]| {
            let mut req = Request::builder().uri(path);
            for a in auth {
                req = req.header("authorization", *a);
            }
            admin_router(gateway.clone()).oneshot(req.body(Body::empty()).unwrap())
        };
        for path in ["/admin/status", "/admin/api/status"] {
            let resp = call(path, &[]).await.unwrap();
            assert_eq!(resp.status(), StatusCode::UNAUTHORIZED, "{path}");
            assert_eq!(
                resp.headers()["www-authenticate"],
                "Bearer realm=\"switchyard-admin\""
            );
            let resp = call(path, &["Bearer admin-token-012345678"]).await.unwrap();
            assert_eq!(resp.status(), StatusCode::UNAUTHORIZED, "{path}");
            let resp = call(path, &["Basic admin-token-0123456789"]).await.unwrap();
            assert_eq!(resp.status(), StatusCode::UNAUTHORIZED, "{path}");
            let two = &[
                "Bearer admin-token-0123456789",
                "Bearer admin-token-0123456789",
            ];
            let resp = call(path, two).await.unwrap();
            assert_eq!(resp.status(), StatusCode::BAD_REQUEST, "{path}");
            let resp = call(path, &["bearer admin-token-0123456789"])
                .await
                .unwrap();
            assert_eq!(resp.status(), StatusCode::OK, "{path}");
            assert_eq!(resp.headers()["cache-control"], "no-store");
        }
        let resp = call("/admin/status", &["Bearer admin-token-0123456789"])
            .await
            .unwrap();
        assert_eq!(resp.headers()["content-type"], "text/html; charset=utf-8");
        assert!(
            resp.headers()["content-security-policy"]
                .to_str()
                .unwrap()
                .starts_with("default-src 'none'")
        );
        let body = axum::body::to_bytes(resp.into_body(), 1 << 20)
            .await
            .unwrap();
        let html = String::from_utf8_lossy(&body);
        assert!(
            html.contains("<tr id=\"upstream-a-u\">")
                && html.contains("<span class=\"state idle\">idle</span>"),
            "an HTTP upstream nobody used yet is idle: {html}"
        );
        // The metrics and probes stay open.
        assert_eq!(call("/readyz", &[]).await.unwrap().status(), StatusCode::OK);
    }

    #[tokio::test]
    async fn health_unknown_paths_and_methods_without_a_socket() {
        assert_eq!(
            call("GET", "/healthz").await,
            (StatusCode::OK, "ok\n".into())
        );
        assert_eq!(
            call("GET", "/readyz").await,
            (StatusCode::OK, "ready\n".into())
        );
        let req = Request::builder()
            .uri("/healthz")
            .body(Body::empty())
            .unwrap();
        let resp = crate::listener::Service::call(&front(gateway().await), req, LOOPBACK).await;
        assert_eq!(resp.headers()["content-type"], "text/plain; charset=utf-8");
        // HEAD is answered like GET (the listener leaves the body out); other methods not.
        assert_eq!(call("HEAD", "/healthz").await.0, StatusCode::OK);
        assert_eq!(call("HEAD", "/readyz").await.0, StatusCode::OK);
        for path in ["/healthz", "/readyz"] {
            let req = Request::builder()
                .method("POST")
                .uri(path)
                .body(Body::empty())
                .unwrap();
            let resp = crate::listener::Service::call(&front(gateway().await), req, LOOPBACK).await;
            assert_eq!(resp.status(), StatusCode::METHOD_NOT_ALLOWED, "{path}");
            assert_eq!(resp.headers()["allow"], "GET,HEAD", "{path}");
        }
        assert_eq!(call("GET", "/nowhere").await.0, StatusCode::NOT_FOUND);
        let (status, body) = call("PATCH", "/t/a/mcp").await;
        assert_eq!(status, StatusCode::METHOD_NOT_ALLOWED);
        assert!(body.contains("\"code\":-32600"), "{body}");
    }
}
