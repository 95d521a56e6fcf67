//! Server-Sent Events responses to clients: the keep-alive comment and the headers that keep
//! proxies from buffering (events are framed, with their ids, by `events::StreamLog`).

use axum::body::Body;
use axum::http::{HeaderValue, Response, StatusCode, header};

/// Comment line sent on idle streams so intermediaries keep them open.
pub const KEEP_ALIVE: &[u8] = b": keep-alive\n\n";

/// A `200 text/event-stream` response around `body`.
pub fn response(body: Body) -> Response<Body> {
    let mut resp = Response::new(body);
    *resp.status_mut() = StatusCode::OK;
    let h = resp.headers_mut();
    h.insert(
        header::CONTENT_TYPE,
        HeaderValue::from_static("text/event-stream"),
    );
    h.insert(header::CACHE_CONTROL, HeaderValue::from_static("no-cache"));
    h.insert("x-accel-buffering", HeaderValue::from_static("no"));
    resp
}
