//! Bare-socket helpers for the hostile-client tests: a response read off a keep-alive HTTP/1.1
//! connection, how long until the server closes a connection, a quick status probe, and a
//! process's resident memory.

use std::net::SocketAddr;
use std::time::{Duration, Instant};

use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::TcpStream;

/// One HTTP/1.1 response: status, head (lower-cased) and the body read per Content-Length.
#[derive(Debug)]
pub struct Response {
    pub status: u16,
    pub head: String,
    pub body: Vec<u8>,
}

impl Response {
    pub fn header(&self, name: &str) -> Option<&str> {
        self.head.lines().find_map(|l| {
            let (k, v) = l.split_once(':')?;
            (k.trim() == name).then(|| v.trim())
        })
    }
}

/// Reads one response (head, then `content-length` bytes) within `limit`; `None` when the
/// connection ends or the time runs out first.
pub async fn read_response(tcp: &mut TcpStream, limit: Duration) -> Option<Response> {
    tokio::time::timeout(limit, async {
        let mut buf = Vec::new();
        let mut chunk = [0u8; 4096];
        loop {
            if let Some(split) = buf.windows(4).position(|w| w == b"\r\n\r\n") {
                let head = String::from_utf8_lossy(&buf[..split]).to_ascii_lowercase();
                let length: usize = head
                    .lines()
                    .find_map(|l| l.strip_prefix("content-length:"))
                    .and_then(|v| v.trim().parse().ok())
                    .unwrap_or(0);
                if buf.len() >= split + 4 + length {
                    let status = head.split_whitespace().nth(1)?.parse().ok()?;
                    let body = buf[split + 4..split + 4 + length].to_vec();
                    return Some(Response { status, head, body });
                }
            }
            match tcp.read(&mut chunk).await {
                Ok(0) | Err(_) => return None,
                Ok(n) => buf.extend_from_slice(&chunk[..n]),
            }
        }
    })
    .await
    .ok()
    .flatten()
}

/// Waits (at most `limit`) for the server to close `tcp`, discarding what it sends; returns
/// when that happened, measured from `since`.
pub async fn closed_after(
    tcp: &mut TcpStream,
    since: Instant,
    limit: Duration,
) -> Option<Duration> {
    let mut chunk = [0u8; 4096];
    tokio::time::timeout(limit, async {
        loop {
            match tcp.read(&mut chunk).await {
                Ok(0) | Err(_) => return since.elapsed(),
                Ok(_) => {}
            }
        }
    })
    .await
    .ok()
}

/// `GET path` on a fresh connection (`Connection: close`); the response within 3 s.
pub async fn get(addr: SocketAddr, path: &str) -> Option<Response> {
    let mut tcp = tokio::time::timeout(Duration::from_secs(3), TcpStream::connect(addr))
        .await
        .ok()?
        .ok()?;
    let request = format!("GET {path} HTTP/1.1\r\nHost: 127.0.0.1\r\nConnection: close\r\n\r\n");
    tcp.write_all(request.as_bytes()).await.ok()?;
    read_response(&mut tcp, Duration::from_secs(3)).await
}

/// The status of `GET path`, `None` when no answer came within 3 s.
pub async fn status(addr: SocketAddr, path: &str) -> Option<u16> {
    get(addr, path).await.map(|r| r.status)
}

/// A process's resident set size in KiB (`VmRSS` of `/proc/<pid>/status`).
pub fn rss_kib(pid: u32) -> u64 {
    std::fs::read_to_string(format!("/proc/{pid}/status"))
        .expect("the process's status")
        .lines()
        .find_map(|l| l.strip_prefix("VmRSS:"))
        .and_then(|v| v.trim().trim_end_matches("kB").trim().parse().ok())
        .expect("VmRSS")
}

/// Prints the figures of a run, for the record (shown with `--nocapture`).
#[allow(clippy::print_stderr)]
pub fn record(line: &str) {
    eprintln!("{line}");
}
