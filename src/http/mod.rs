//! The HTTP front: the axum router with health endpoints and the tenant MCP endpoints, and
//! `serve` with graceful shutdown.

pub mod endpoint;
pub mod headers;
pub mod sse;

use std::sync::Arc;

use axum::Router;
use axum::body::Body;
use axum::extract::{Request, State};
use axum::http::{Response, StatusCode};
use axum::routing::get;
use tower_http::trace::{DefaultMakeSpan, DefaultOnResponse, TraceLayer};
use tracing::Level;

use crate::gateway::Gateway;

/// All routes of the MCP listener, with a debug-level span per HTTP request.
pub fn router(gateway: Arc<Gateway>) -> Router {
    let trace = TraceLayer::new_for_http()
        .make_span_with(DefaultMakeSpan::new().level(Level::DEBUG))
        .on_response(DefaultOnResponse::new().level(Level::DEBUG));
    Router::new()
        .route("/healthz", get(|| async { "ok\n" }))
        .fallback(dispatch)
        .with_state(gateway)
        .layer(trace)
}

/// Finds the tenant whose endpoint path matches, else 404.
async fn dispatch(State(gateway): State<Arc<Gateway>>, req: Request) -> Response<Body> {
    let Some(tenant) = gateway.tenant_by_path(req.uri().path()).cloned() else {
        let mut resp = Response::new(Body::from("no MCP endpoint at this path\n"));
        *resp.status_mut() = StatusCode::NOT_FOUND;
        return resp;
    };
    let (parts, body) = req.into_parts();
    endpoint::handle(gateway, tenant, parts, body).await
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used)]
    use super::*;
    use tower::ServiceExt;

    fn gateway() -> Arc<Gateway> {
        let config = crate::config::parse(
            "tenants:\n  - name: a\n    upstreams:\n      - {name: u, http: {url: \"http://127.0.0.1:9/mcp\"}}\n",
            "test.yaml",
            &|_| None,
        )
        .unwrap();
        crate::app::build(&config).unwrap()
    }

    async fn call(method: &str, path: &str) -> (StatusCode, String) {
        let req = Request::builder()
            .method(method)
            .uri(path)
            .body(Body::empty())
            .unwrap();
        let resp = router(gateway()).oneshot(req).await.unwrap();
        let status = resp.status();
        let body = axum::body::to_bytes(resp.into_body(), 1 << 16)
            .await
            .unwrap();
        (status, String::from_utf8_lossy(&body).into_owned())
    }

    #[tokio::test]
    async fn health_unknown_paths_and_methods_without_a_socket() {
        assert_eq!(
            call("GET", "/healthz").await,
            (StatusCode::OK, "ok\n".into())
        );
        assert_eq!(call("GET", "/nowhere").await.0, StatusCode::NOT_FOUND);
        let (status, body) = call("PATCH", "/t/a/mcp").await;
        assert_eq!(status, StatusCode::METHOD_NOT_ALLOWED);
        assert!(body.contains("\"code\":-32600"), "{body}");
    }
}
