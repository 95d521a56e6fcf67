//! Server-Sent Events framing for responses to clients: one JSON-RPC message per event,
//! keep-alive comments, and the headers that keep proxies from buffering.

use axum::body::Body;
use axum::http::{HeaderValue, Response, StatusCode, header};
use bytes::{BufMut, Bytes, BytesMut};

/// Comment line sent on idle streams so intermediaries keep them open.
pub const KEEP_ALIVE: &[u8] = b": keep-alive\n\n";

/// Frames one message as an SSE event. Raw newlines in the JSON can only be insignificant
/// whitespace, so they become spaces: the event is always a single `data:` line.
pub fn event(message: &[u8]) -> Bytes {
    let mut buf = BytesMut::with_capacity(message.len() + 8);
    buf.put_slice(b"data: ");
    let start = buf.len();
    buf.put_slice(message);
    for b in &mut buf[start..] {
        if *b == b'\n' || *b == b'\r' {
            *b = b' ';
        }
    }
    buf.put_slice(b"\n\n");
    buf.freeze()
}

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

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn events_are_single_data_lines() {
        assert_eq!(&event(b"{\"a\":1}")[..], b"data: {\"a\":1}\n\n");
        assert_eq!(&event(b"{\n \"a\":1\r\n}")[..], b"data: {  \"a\":1  }\n\n");
    }
}
