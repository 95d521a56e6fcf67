//! Hostile clients sending request bodies, over real sockets on 127.0.0.1: a body that
//! stalls is cut off with 408 and its connection closed; bodies beyond the process-wide
//! budget get 503 + `Retry-After` before they are read; and many clients each sending most
//! of a large body slowly leave a gateway process's memory bounded (measured from
//! `/proc/<pid>/status`).

use std::net::SocketAddr;
use std::time::{Duration, Instant};

use serde_json::json;
use switchyard::config::UpstreamTransport;
use tokio::io::AsyncWriteExt;
use tokio::net::TcpStream;

use crate::support::config::{config, demo_server_exe, demo_stdio, tenant, upstream};
use crate::support::gateway::TestGateway;
use crate::support::process::GatewayProcess;
use crate::support::wire::{Response, closed_after, read_response, rss_kib, status};
use crate::support::{TempDir, eventually};

/// A POST head announcing `length` bytes of JSON to tenant `a`.
fn post_head(length: usize) -> String {
    post_head_of(length, "application/json")
}

/// A POST head announcing `length` bytes of `content_type` to tenant `a`.
fn post_head_of(length: usize, content_type: &str) -> String {
    format!(
        "POST /t/a/mcp HTTP/1.1\r\nHost: 127.0.0.1\r\nContent-Type: {content_type}\r\nAccept: application/json, text/event-stream\r\nContent-Length: {length}\r\n\r\n"
    )
}

async fn start_in_process(max_body: usize, budget: usize, read_timeout: Duration) -> TestGateway {
    let mut cfg = config(vec![tenant(
        "a",
        vec![upstream("demo", UpstreamTransport::Stdio(demo_stdio(None)))],
    )]);
    cfg.limits.max_body_bytes = max_body;
    cfg.limits.bodies.max_buffered = budget;
    cfg.limits.bodies.read_timeout = read_timeout;
    cfg.limits.bodies.min_rate = 0;
    TestGateway::start(cfg).await
}

#[tokio::test]
async fn a_stalled_body_gets_408_and_its_connection_is_closed() {
    let timeout = Duration::from_millis(800);
    let gw = start_in_process(64 * 1024, 1 << 20, timeout).await;
    let mut tcp = TcpStream::connect(gw.addr).await.expect("connect");
    tcp.write_all(post_head(1000).as_bytes())
        .await
        .expect("head");
    tcp.write_all(b"{\"jsonrpc\":").await.expect("some body");
    let started = Instant::now();
    let resp = read_response(&mut tcp, Duration::from_secs(5))
        .await
        .expect("an answer");
    let took = started.elapsed();
    assert_eq!(resp.status, 408, "{resp:?}");
    assert_eq!(resp.header("connection"), Some("close"), "{resp:?}");
    assert!(
        took >= timeout - Duration::from_millis(100) && took <= timeout + Duration::from_secs(2),
        "{took:?}"
    );
    let closed = closed_after(&mut tcp, Instant::now(), Duration::from_secs(2)).await;
    assert!(closed.is_some(), "the connection stays open after the 408");
    // Nothing of the budget is held any more.
    assert_eq!(gw.gateway.bodies.buffered(), 0);
}

#[tokio::test]
async fn bodies_beyond_the_budget_get_503_before_they_are_read_and_the_budget_comes_back() {
    // Room for one 40 KiB body at a time.
    let gw = start_in_process(48 * 1024, 64 * 1024, Duration::from_millis(1500)).await;
    let mut holder = TcpStream::connect(gw.addr).await.expect("connect");
    holder
        .write_all(post_head(40 * 1024).as_bytes())
        .await
        .expect("head");
    assert!(
        eventually(Duration::from_secs(5), || gw.gateway.bodies.buffered()
            == 40 * 1024)
        .await,
        "the announced length is reserved before any byte"
    );

    let mut refused = TcpStream::connect(gw.addr).await.expect("connect");
    refused
        .write_all(post_head(40 * 1024).as_bytes())
        .await
        .expect("head");
    let resp = read_response(&mut refused, Duration::from_secs(5))
        .await
        .expect("an answer without sending the body");
    assert_eq!(resp.status, 503, "{resp:?}");
    assert_eq!(resp.header("retry-after"), Some("1"), "{resp:?}");
    let error: serde_json::Value = serde_json::from_slice(&resp.body).expect("JSON-RPC error");
    assert_eq!(error["error"]["code"], -32000, "{error}");

    // The holder times out; its share comes back and a body of that size is read again.
    let held = read_response(&mut holder, Duration::from_secs(5))
        .await
        .expect("the holder's answer");
    assert_eq!(held.status, 408);
    assert_eq!(gw.gateway.bodies.buffered(), 0);
    let body = json!({"jsonrpc": "2.0", "id": 1, "method": "ping", "pad": "x".repeat(40 * 1000)})
        .to_string();
    let mut again = TcpStream::connect(gw.addr).await.expect("connect");
    again
        .write_all(format!("{}{body}", post_head(body.len())).as_bytes())
        .await
        .expect("request");
    let resp = read_response(&mut again, Duration::from_secs(5))
        .await
        .expect("an answer");
    // Read whole and handled: without a session the gateway says so (not 503, not 408).
    assert_eq!(resp.status, 400, "{resp:?}");
}

#[tokio::test]
async fn a_body_over_the_limit_gets_its_413_while_the_client_is_still_sending_it() {
    let gw = start_in_process(64 * 1024, 1 << 20, Duration::from_secs(5)).await;
    // The gateway answers on the announced length, before any byte of the body: the client
    // only learns of it once it has sent its body, as most clients do.
    let mut tcp = TcpStream::connect(gw.addr).await.expect("connect");
    tcp.write_all(post_head(1_000_000).as_bytes())
        .await
        .expect("head");
    tokio::time::sleep(Duration::from_millis(300)).await;
    let chunk = vec![b' '; 50_000];
    for i in 0..20 {
        // Before the lingering close, the gateway had closed the socket by now: the kernel
        // reset the connection and these writes failed, the 413 unread.
        tcp.write_all(&chunk)
            .await
            .unwrap_or_else(|e| panic!("writing chunk {i} of the body: {e}"));
        tokio::time::sleep(Duration::from_millis(10)).await;
    }
    let resp = read_response(&mut tcp, Duration::from_secs(5))
        .await
        .expect("the 413");
    assert_eq!(resp.status, 413, "{resp:?}");
    assert_eq!(resp.header("connection"), Some("close"), "{resp:?}");
    assert!(
        closed_after(&mut tcp, Instant::now(), Duration::from_secs(2))
            .await
            .is_some(),
        "the connection stays open after the 413"
    );

    // A client that sends on and never closes is cut off once the linger time is over.
    let mut tcp = TcpStream::connect(gw.addr).await.expect("connect");
    tcp.write_all(post_head(1_000_000).as_bytes())
        .await
        .expect("head");
    let started = Instant::now();
    let resp = read_response(&mut tcp, Duration::from_secs(5))
        .await
        .expect("the 413");
    assert_eq!(resp.status, 413, "{resp:?}");
    let cut = loop {
        if tcp.write_all(&chunk[..1000]).await.is_err() {
            break started.elapsed();
        }
        assert!(started.elapsed() < Duration::from_secs(10), "never cut off");
        tokio::time::sleep(Duration::from_millis(20)).await;
    };
    // The linger time is 2 s.
    assert!(cut >= Duration::from_millis(1500), "cut off after {cut:?}");
    assert_eq!(gw.gateway.bodies.buffered(), 0);
}

/// Answers given before the body is read (here a 415 for the wrong `Content-Type`) do not say
/// `Connection: close`: a short body that has already arrived is read past and the connection
/// serves the next request; one still on its way ends the connection after the answer, by
/// lingering, so a client sending the rest reads the 415 instead of a reset.
#[tokio::test]
async fn an_early_refusal_keeps_the_connection_when_the_body_is_in_and_closes_it_cleanly_otherwise()
{
    let gw = start_in_process(64 * 1024, 1 << 20, Duration::from_secs(5)).await;
    let healthz = "GET /healthz HTTP/1.1\r\nHost: 127.0.0.1\r\n\r\n";

    let (mut tcp, resp) = refused_as_plain_text(gw.addr, 20, 20).await;
    assert_eq!(resp.header("connection"), None, "{resp:?}");
    tcp.write_all(healthz.as_bytes())
        .await
        .expect("second request");
    let next = read_response(&mut tcp, Duration::from_secs(5))
        .await
        .expect("the same connection answers the next request");
    assert_eq!(next.status, 200, "{next:?}");

    // 60,000 bytes announced (under the 64 KiB limit), 1,000 sent before the answer, the
    // rest after it.
    let (mut tcp, _) = refused_as_plain_text(gw.addr, 60_000, 1_000).await;
    for i in 0..59 {
        tcp.write_all(&[b'x'; 1_000])
            .await
            .unwrap_or_else(|e| panic!("writing piece {i} of the body: {e}"));
    }
    assert!(
        closed_after(&mut tcp, Instant::now(), Duration::from_secs(3))
            .await
            .is_some(),
        "the connection stays open after a refusal that left the body unread"
    );
    assert_eq!(gw.gateway.bodies.buffered(), 0);
}

/// Announces `length` bytes of plain text, sends `sent` of them and reads the 415; the
/// connection and the answer.
async fn refused_as_plain_text(
    addr: SocketAddr,
    length: usize,
    sent: usize,
) -> (TcpStream, Response) {
    let mut tcp = TcpStream::connect(addr).await.expect("connect");
    let request = format!("{}{}", post_head_of(length, "text/plain"), "x".repeat(sent));
    tcp.write_all(request.as_bytes()).await.expect("request");
    let resp = read_response(&mut tcp, Duration::from_secs(5))
        .await
        .expect("the 415");
    assert_eq!(resp.status, 415, "{resp:?}");
    (tcp, resp)
}

/// What one slow client saw.
#[derive(Debug, PartialEq, Eq, Hash, Clone, Copy)]
enum Outcome {
    /// Refused before sending its body (503 with `Retry-After: 1`).
    Refused,
    /// Cut off after sending most of its body (408).
    TimedOut,
    /// Answered otherwise: a failure of the test.
    Other(u16),
    /// The connection ended without an answer.
    Closed,
}

/// Announces `length` bytes, waits a moment for an early refusal, then sends `sent` bytes
/// and stops; returns what the gateway answered.
async fn slow_client(addr: SocketAddr, length: usize, sent: usize) -> Outcome {
    let Ok(mut tcp) = TcpStream::connect(addr).await else {
        return Outcome::Closed;
    };
    if tcp.write_all(post_head(length).as_bytes()).await.is_err() {
        return Outcome::Closed;
    }
    let classify = |r: Option<Response>| match r {
        Some(r) if r.status == 503 && r.header("retry-after") == Some("1") => Outcome::Refused,
        Some(r) if r.status == 408 => Outcome::TimedOut,
        Some(r) => Outcome::Other(r.status),
        None => Outcome::Closed,
    };
    if let Some(early) = read_response(&mut tcp, Duration::from_secs(1)).await {
        return classify(Some(early));
    }
    let chunk = vec![b' '; 64 * 1024];
    let mut left = sent;
    while left > 0 {
        let n = left.min(chunk.len());
        if tcp.write_all(&chunk[..n]).await.is_err() {
            break;
        }
        left -= n;
    }
    classify(read_response(&mut tcp, Duration::from_secs(15)).await)
}

#[tokio::test]
async fn many_slow_large_bodies_are_refused_or_cut_off_and_memory_stays_bounded() {
    const CLIENTS: usize = 120;
    const LENGTH: usize = 1_000_000;
    const SENT: usize = 900_000;
    let dir = TempDir::new("slow-bodies");
    let admin_port = crate::support::peers::free_port();
    let yaml = format!(
        "admin_listen: 127.0.0.1:{admin_port}\nlimits: {{max_body: 1MiB, max_buffered_bodies: 8MiB, body_read_timeout: 3s, min_body_rate: 0}}\ntenants:\n  - name: a\n    upstreams:\n      - name: demo\n        stdio: {{command: {exe:?}, args: [--stdio]}}\n",
        exe = demo_server_exe().display().to_string(),
    );
    let gw = GatewayProcess::start(&yaml, &dir, "slow-bodies").await;
    let addr: SocketAddr = ([127, 0, 0, 1], gw.port).into();
    let admin: SocketAddr = ([127, 0, 0, 1], admin_port).into();
    // Warm up (one session: the upstream connected, buffers allocated) before the baseline.
    let mut client = crate::support::client::RawClient::new(gw.url("a"));
    client.initialize().await;
    let pid = gw.pid();
    let baseline = rss_kib(pid);

    let peak = std::sync::Arc::new(std::sync::atomic::AtomicU64::new(baseline));
    let sampler = {
        let peak = peak.clone();
        tokio::spawn(async move {
            loop {
                peak.fetch_max(rss_kib(pid), std::sync::atomic::Ordering::Relaxed);
                tokio::time::sleep(Duration::from_millis(50)).await;
            }
        })
    };
    let started = Instant::now();
    let attack = futures_util::future::join_all(
        (0..CLIENTS).map(|_| tokio::spawn(slow_client(addr, LENGTH, SENT))),
    );
    // Health and other clients while the attack runs.
    tokio::time::sleep(Duration::from_millis(1500)).await;
    assert_eq!(status(admin, "/healthz").await, Some(200));
    assert_eq!(client.request("tools/list", json!({})).await.status, 200);
    let outcomes: Vec<Outcome> = attack
        .await
        .into_iter()
        .map(|r| r.expect("client task"))
        .collect();
    let took = started.elapsed();
    sampler.abort();
    let peak = peak.load(std::sync::atomic::Ordering::Relaxed);
    let count = |o: Outcome| outcomes.iter().filter(|x| **x == o).count();
    let (refused, timed_out, closed) = (
        count(Outcome::Refused),
        count(Outcome::TimedOut),
        count(Outcome::Closed),
    );
    crate::support::wire::record(&format!(
        "{CLIENTS} clients x {SENT} of {LENGTH} bytes: {refused} refused (503), {timed_out} cut off (408), {closed} closed, in {took:?}; gateway RSS {baseline} KiB -> peak {peak} KiB (+{} KiB)",
        peak - baseline
    ));
    assert!(
        outcomes.iter().all(|o| !matches!(o, Outcome::Other(_))),
        "{outcomes:?}"
    );
    // 8 MiB of budget holds 8 announced bodies of 1,000,000 bytes at a time.
    assert!(timed_out <= 8 * 2, "{timed_out} bodies read at once");
    assert!(refused >= CLIENTS - 16 - closed, "{outcomes:?}");
    assert!(closed <= CLIENTS / 10, "{closed} closed without an answer");
    // Without the budget: 120 x 900 KB = 103 MiB buffered. With it: the 8 MiB budget plus
    // connection buffers.
    assert!(
        peak - baseline < 32 * 1024,
        "gateway RSS grew {} KiB",
        peak - baseline
    );
    assert_eq!(client.request("tools/list", json!({})).await.status, 200);
    gw.stop().await;
}
