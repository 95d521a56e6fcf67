//! HTTP/1.1 over a bare TCP socket, for requests whose headers must be exactly what the test
//! says (HTTP client libraries add `Accept` and friends on their own).

use std::time::Duration;

use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::TcpStream;

use super::client::{Reply, into_reply_parts};

/// Sends one request with exactly `headers` (plus Host unless given, Content-Length,
/// Connection: close) and
/// reads the whole response, or for a GET answered with an event stream, only its beginning.
pub async fn exchange(url: &str, method: &str, headers: &[(&str, &str)], body: &[u8]) -> Reply {
    let rest = url.strip_prefix("http://").expect("http URL");
    let (authority, path) = rest
        .split_once('/')
        .map_or((rest, "/".to_string()), |(a, p)| (a, format!("/{p}")));
    exchange_target(authority, &path, method, headers, body).await
}

/// Like [`exchange`], to the server at `authority` with exactly this request target (e.g. an
/// absolute-form `http://host/path`).
pub async fn exchange_target(
    authority: &str,
    target: &str,
    method: &str,
    headers: &[(&str, &str)],
    body: &[u8],
) -> Reply {
    let mut stream = TcpStream::connect(authority)
        .await
        .expect("connect to the gateway");
    let mut req = format!("{method} {target} HTTP/1.1\r\nConnection: close\r\n");
    if !headers.iter().any(|(k, _)| k.eq_ignore_ascii_case("host")) {
        req.push_str(&format!("Host: {authority}\r\n"));
    }
    for (k, v) in headers {
        req.push_str(&format!("{k}: {v}\r\n"));
    }
    if !body.is_empty() || method == "POST" {
        req.push_str(&format!("Content-Length: {}\r\n", body.len()));
    }
    req.push_str("\r\n");
    stream
        .write_all(req.as_bytes())
        .await
        .expect("write request");
    stream.write_all(body).await.expect("write body");
    let mut buf = Vec::new();
    let mut chunk = [0u8; 8192];
    loop {
        let read = tokio::time::timeout(Duration::from_secs(10), stream.read(&mut chunk)).await;
        match read {
            Ok(Ok(0)) | Ok(Err(_)) => break,
            Ok(Ok(n)) => buf.extend_from_slice(&chunk[..n]),
            // An open event stream: what we have is enough.
            Err(_) => break,
        }
        if method == "GET" && is_event_stream_head(&buf) {
            break;
        }
    }
    parse_response(&buf)
}

fn is_event_stream_head(buf: &[u8]) -> bool {
    let text = String::from_utf8_lossy(buf).to_ascii_lowercase();
    text.contains("\r\n\r\n") && text.contains("content-type: text/event-stream")
}

fn parse_response(buf: &[u8]) -> Reply {
    let split = buf
        .windows(4)
        .position(|w| w == b"\r\n\r\n")
        .expect("a complete response head");
    let head = String::from_utf8_lossy(&buf[..split]).to_string();
    let mut lines = head.split("\r\n");
    let status: u16 = lines
        .next()
        .and_then(|l| l.split_whitespace().nth(1))
        .and_then(|s| s.parse().ok())
        .expect("status line");
    let mut headers = reqwest::header::HeaderMap::new();
    for line in lines {
        if let Some((k, v)) = line.split_once(':')
            && let (Ok(k), Ok(v)) = (
                reqwest::header::HeaderName::from_bytes(k.trim().as_bytes()),
                reqwest::header::HeaderValue::from_str(v.trim()),
            )
        {
            headers.append(k, v);
        }
    }
    let mut body = buf[split + 4..].to_vec();
    if headers
        .get("transfer-encoding")
        .is_some_and(|v| v.as_bytes().eq_ignore_ascii_case(b"chunked"))
    {
        body = dechunk(&body);
    }
    into_reply_parts(status, headers, body)
}

fn dechunk(mut input: &[u8]) -> Vec<u8> {
    let mut out = Vec::new();
    while let Some(pos) = input.windows(2).position(|w| w == b"\r\n") {
        let size =
            usize::from_str_radix(String::from_utf8_lossy(&input[..pos]).trim(), 16).unwrap_or(0);
        input = &input[pos + 2..];
        if size == 0 || input.len() < size {
            out.extend_from_slice(&input[..size.min(input.len())]);
            break;
        }
        out.extend_from_slice(&input[..size]);
        input = input.get(size + 2..).unwrap_or_default();
    }
    out
}
