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

/// One unnamed event carrying `message` (a JSON-RPC message; a line break inside it starts
/// another `data:` line, as the format wants).
pub fn event(message: &[u8]) -> bytes::Bytes {
    let mut out = Vec::with_capacity(message.len() + 8);
    for line in message.split(|b| *b == b'\n') {
        out.extend_from_slice(b"data: ");
        out.extend_from_slice(line.strip_suffix(b"\r").unwrap_or(line));
        out.push(b'\n');
    }
    out.push(b'\n');
    bytes::Bytes::from(out)
}

/// A response body made of what arrives on `rx`, ending when every sender is gone; dropping
/// the body (the client closed the stream) closes the channel, which its writer notices.
pub fn channel_body(rx: tokio::sync::mpsc::Receiver<bytes::Bytes>) -> Body {
    let events = futures_util::stream::unfold(rx, |mut rx| async move {
        rx.recv()
            .await
            .map(|b| (Ok::<bytes::Bytes, std::convert::Infallible>(b), rx))
    });
    Body::from_stream(events)
}
