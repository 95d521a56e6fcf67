//! Hostile clients at the connection level, over real sockets on 127.0.0.1: never-finished
//! request heads (slowloris), silent and idle connections, a flood beyond the connection cap
//! (a gateway process with a small descriptor limit), one client over its own cap, HTTP/2
//! peers ignoring the server's SETTINGS, oversized HTTP/1.1 heads. Each is closed or refused
//! within its limit while other clients and the health probes are served. Timeouts are
//! configured short so the file runs in seconds.

use std::net::SocketAddr;
use std::time::{Duration, Instant};

use serde_json::json;
use switchyard::config::{Config, ConnectionLimits, UpstreamTransport};
use tokio::io::AsyncWriteExt;
use tokio::net::TcpStream;

use crate::support::client::RawClient;
use crate::support::config::{config, demo_server_exe, demo_stdio, tenant, upstream};
use crate::support::gateway::TestGateway;
use crate::support::h2raw::{self, H2Conn};
use crate::support::process::GatewayProcess;
use crate::support::wire::{closed_after, read_response, status};
use crate::support::{TempDir, eventually};

fn limited(edit: impl FnOnce(&mut ConnectionLimits)) -> Config {
    let mut cfg = config(vec![tenant(
        "a",
        vec![upstream("demo", UpstreamTransport::Stdio(demo_stdio(None)))],
    )]);
    edit(&mut cfg.limits.connections);
    cfg
}

/// The gateway, and its admin listener's address.
async fn start(edit: impl FnOnce(&mut ConnectionLimits)) -> (TestGateway, SocketAddr) {
    let gw = TestGateway::start(limited(edit)).await;
    let admin = tokio::net::TcpListener::bind("127.0.0.1:0")
        .await
        .expect("bind");
    let admin_addr = admin.local_addr().expect("addr");
    tokio::spawn(switchyard::app::serve_admin(admin, gw.gateway.clone()));
    (gw, admin_addr)
}

async fn connect(addr: SocketAddr) -> TcpStream {
    TcpStream::connect(addr).await.expect("connect")
}

/// An HTTP/2 connection that has had one exchange (`GET /healthz` on stream 1, read to its end).
async fn h2_healthz(addr: SocketAddr) -> H2Conn {
    let mut h2 = H2Conn::connect(addr).await;
    let authority = addr.to_string();
    h2.request(
        1,
        &h2raw::request_headers("GET", &authority, "/healthz", &[]),
        true,
    )
    .await;
    loop {
        let frame = h2.next_frame().await.expect("the response");
        if frame.stream == 1 && frame.ends_stream() {
            return h2;
        }
    }
}

fn counter(listener: &str, family: &str, reason: &str) -> u64 {
    let m = switchyard::metrics::get();
    let vec = match family {
        "refused" => &m.connections_refused,
        _ => &m.connections_timed_out,
    };
    vec.with_label_values(&[listener, reason]).get()
}

#[tokio::test]
async fn slowloris_header_blocks_are_closed_within_the_header_timeout_while_others_are_served() {
    const N: usize = 1_000;
    let header_timeout = Duration::from_secs(1);
    let (gw, admin) = start(|c| {
        c.header_read_timeout = header_timeout;
        c.max_connections = Some(4 * N);
        c.max_connections_per_client = 4 * N;
    })
    .await;
    let timed_out_before = counter("mcp", "timed_out", "header_timeout");
    // Three kinds of never-finished starts: half a request head, nothing at all, and half
    // of the HTTP/2 preface (the last two never reach hyper's own header timer).
    let openings: [&[u8]; 3] = [
        b"POST /t/a/mcp HTTP/1.1\r\nHost: 127.0.0.1\r\nContent-Type: application/json\r\n",
        b"",
        b"PRI * HTTP/2.0\r\n",
    ];
    let opened = Instant::now();
    let mut attackers = Vec::with_capacity(N);
    for i in 0..N {
        let mut tcp = connect(gw.addr).await;
        tcp.write_all(openings[i % 3]).await.expect("write");
        attackers.push(tcp);
    }
    let all_open = opened.elapsed();

    // Meanwhile other clients are served, and the probes answer.
    let mut client = RawClient::new(gw.url("a"));
    client.initialize().await;
    assert_eq!(client.request("tools/list", json!({})).await.status, 200);
    assert_eq!(status(admin, "/healthz").await, Some(200));
    assert_eq!(status(gw.addr, "/healthz").await, Some(200));

    let waits = attackers.into_iter().map(|mut tcp| async move {
        closed_after(&mut tcp, opened, Duration::from_secs(10)).await
    });
    let closed = futures_util::future::join_all(waits).await;
    let still_open = closed.iter().filter(|c| c.is_none()).count();
    assert_eq!(
        still_open, 0,
        "{still_open} of {N} attackers still connected after 10s"
    );
    let last = closed.iter().flatten().max().copied().unwrap_or_default();
    let first = closed.iter().flatten().min().copied().unwrap_or_default();
    crate::support::wire::record(&format!(
        "{N} slowloris connections opened in {all_open:?}, closed between {first:?} and {last:?}"
    ));
    assert!(
        first >= header_timeout - Duration::from_millis(100),
        "closed early: {first:?}"
    );
    assert!(
        last <= all_open + header_timeout + Duration::from_secs(2),
        "closed late: {last:?}"
    );
    assert!(counter("mcp", "timed_out", "header_timeout") >= timed_out_before + N as u64);
    // And the service is still there.
    assert_eq!(client.request("tools/list", json!({})).await.status, 200);
}

/// What the header timeout covers: silence from accept, a head never finished, and on a
/// keep-alive HTTP/1.1 connection the wait for each next head from the end of the last
/// answer. Idle is long here, so only the header timeout can close.
#[tokio::test]
async fn the_header_timeout_covers_silence_slow_heads_and_the_keep_alive_wait() {
    let timeout = Duration::from_millis(600);
    let (gw, _admin) = start(|c| {
        c.header_read_timeout = timeout;
        c.idle_timeout = Duration::from_secs(30);
    })
    .await;
    let limit = Duration::from_secs(5);
    let (early, late) = (
        timeout - Duration::from_millis(100),
        timeout + Duration::from_secs(2),
    );
    let timed_out_before = counter("mcp", "timed_out", "header_timeout");

    // Nothing sent.
    let started = Instant::now();
    let mut silent = connect(gw.addr).await;
    let took = closed_after(&mut silent, started, limit)
        .await
        .expect("closed");
    assert!(took >= early && took <= late, "silent: {took:?}");

    // A head trickling in a byte every 100 ms, never complete in time.
    let started = Instant::now();
    let mut slow = connect(gw.addr).await;
    let trickle = async {
        for byte in b"GET /healthz HTTP/1.1\r\nHost: 127.0.0.1\r\nX-Slow: aaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaa" {
            if slow.write_all(&[*byte]).await.is_err() {
                return;
            }
            tokio::time::sleep(Duration::from_millis(100)).await;
        }
    };
    tokio::time::timeout(limit, trickle).await.ok();
    let took = closed_after(&mut slow, started, limit)
        .await
        .expect("closed");
    assert!(took >= early && took <= late, "trickle: {took:?}");

    // A complete exchange, then silence: hyper's timer runs while waiting for the next head.
    let mut kept = connect(gw.addr).await;
    kept.write_all(b"GET /healthz HTTP/1.1\r\nHost: 127.0.0.1\r\n\r\n")
        .await
        .expect("write");
    let resp = read_response(&mut kept, limit).await.expect("answer");
    assert_eq!(resp.status, 200);
    let answered = Instant::now();
    let took = closed_after(&mut kept, answered, limit)
        .await
        .expect("closed");
    assert!(took >= early && took <= late, "keep-alive wait: {took:?}");
    assert!(counter("mcp", "timed_out", "header_timeout") >= timed_out_before + 3);
}

#[tokio::test]
async fn idle_connections_are_closed_after_the_idle_timeout_on_http1_and_http2() {
    let idle = Duration::from_millis(600);
    let (gw, _admin) = start(|c| {
        c.header_read_timeout = Duration::from_secs(10);
        c.idle_timeout = idle;
    })
    .await;
    let limit = Duration::from_secs(5);
    let (early, late) = (
        idle - Duration::from_millis(100),
        idle + Duration::from_secs(2),
    );
    let idle_before = counter("mcp", "timed_out", "idle_timeout");

    let mut h1 = connect(gw.addr).await;
    h1.write_all(b"GET /healthz HTTP/1.1\r\nHost: 127.0.0.1\r\n\r\n")
        .await
        .expect("write");
    assert_eq!(
        read_response(&mut h1, limit).await.expect("answer").status,
        200
    );
    let answered = Instant::now();
    let took = closed_after(&mut h1, answered, limit)
        .await
        .expect("HTTP/1.1 closed");
    assert!(took >= early && took <= late, "HTTP/1.1 idle: {took:?}");

    let mut h2 = h2_healthz(gw.addr).await;
    let answered = Instant::now();
    let took = closed_after(&mut h2.tcp, answered, limit)
        .await
        .expect("HTTP/2 closed");
    assert!(took >= early && took <= late, "HTTP/2 idle: {took:?}");
    assert!(counter("mcp", "timed_out", "idle_timeout") >= idle_before + 2);
}

#[tokio::test]
async fn a_request_in_flight_outlives_the_idle_timeout() {
    let idle = Duration::from_millis(300);
    let (gw, _admin) = start(|c| c.idle_timeout = idle).await;
    let mut client = RawClient::new(gw.url("a"));
    client.initialize().await;
    let session = client.session.clone().expect("session");
    let headers = [
        ("accept", "text/event-stream"),
        ("mcp-session-id", session.as_str()),
        ("mcp-protocol-version", client.protocol_version.as_str()),
    ];
    let mut stream = client.get_stream(&headers).await;
    assert_eq!(stream.status(), 200);
    let held = Instant::now();
    while held.elapsed() < 5 * idle {
        match tokio::time::timeout(Duration::from_millis(100), stream.chunk()).await {
            Err(_) | Ok(Ok(Some(_))) => {}
            Ok(end) => panic!("the GET stream ended after {:?}: {end:?}", held.elapsed()),
        }
    }
}

#[tokio::test]
async fn a_connection_flood_beyond_the_cap_is_refused_with_503_and_never_reaches_emfile() {
    const NOFILE: u64 = 600;
    const FLOOD: usize = 800;
    let dir = TempDir::new("flood");
    let admin_port = crate::support::peers::free_port();
    let yaml = format!(
        "admin_listen: 127.0.0.1:{admin_port}\nlimits: {{header_read_timeout: 20s}}\ntenants:\n  - name: a\n    upstreams:\n      - name: demo\n        stdio: {{command: {exe:?}, args: [--stdio]}}\n",
        exe = demo_server_exe().display().to_string(),
    );
    let gw = GatewayProcess::start_with_fd_limit(&yaml, &dir, "flood", NOFILE).await;
    let addr: SocketAddr = ([127, 0, 0, 1], gw.port).into();
    let admin: SocketAddr = ([127, 0, 0, 1], admin_port).into();
    assert!(
        eventually(Duration::from_secs(10), || gw
            .logs()
            .contains("connection limits"))
        .await,
        "{}",
        gw.logs()
    );
    // Derived from the descriptor limit: (600 - 256 - 8 for the stdio child) / 2.
    let cap = 168;
    assert!(
        gw.logs().contains(&format!("\"max_connections\":{cap}")),
        "{}",
        gw.logs()
    );

    let started = Instant::now();
    let mut flood = Vec::with_capacity(FLOOD);
    for _ in 0..FLOOD {
        flood.push(connect(addr).await);
    }
    let answers = futures_util::future::join_all(
        flood
            .iter_mut()
            .map(|tcp| async move { read_response(tcp, Duration::from_secs(2)).await }),
    )
    .await;
    let refused: Vec<_> = answers.iter().flatten().collect();
    let held = answers.iter().filter(|a| a.is_none()).count();
    crate::support::wire::record(&format!(
        "{FLOOD} connections at RLIMIT_NOFILE {NOFILE}: {held} held, {} refused, in {:?}",
        refused.len(),
        started.elapsed()
    ));
    assert!(held <= cap, "{held} connections held with a cap of {cap}");
    assert!(refused.len() >= FLOOD - cap, "{} refused", refused.len());
    for r in &refused {
        assert_eq!(r.status, 503, "{r:?}");
        assert_eq!(r.header("retry-after"), Some("1"), "{r:?}");
        assert_eq!(r.header("connection"), Some("close"), "{r:?}");
    }
    // The admin listener has its own budget: the probes answer during the flood.
    assert_eq!(status(admin, "/healthz").await, Some(200));
    assert_eq!(status(admin, "/readyz").await, Some(200));
    let metrics = crate::support::wire::get(admin, "/metrics")
        .await
        .expect("metrics");
    let text = String::from_utf8_lossy(&metrics.body).to_string();
    assert!(
        text.contains(&format!(
            "switchyard_connections_open{{listener=\"mcp\"}} {cap}"
        )),
        "{text}"
    );
    assert!(
        text.contains(
            "switchyard_connections_refused_total{listener=\"mcp\",reason=\"max_connections\"}"
        ),
        "{text}"
    );

    // The flood ends: the service comes back.
    drop(flood);
    let mut back = false;
    for _ in 0..50 {
        if status(addr, "/healthz").await == Some(200) {
            back = true;
            break;
        }
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    assert!(back, "the listener did not recover");
    let mut client = RawClient::new(gw.url("a"));
    client.initialize().await;
    let logs = gw.stop().await;
    assert!(!logs.contains("accept failed"), "accept failed:\n{logs}");
}

#[tokio::test]
async fn one_client_over_its_own_cap_gets_429_and_its_slot_back_when_a_connection_closes() {
    let (gw, _admin) = start(|c| c.max_connections_per_client = 5).await;
    let refused_before = counter("mcp", "refused", "max_connections_per_client");
    let mut open = Vec::new();
    for _ in 0..5 {
        let mut tcp = connect(gw.addr).await;
        tcp.write_all(b"GET /healthz HTTP/1.1\r\nHost: 127.0.0.1\r\n\r\n")
            .await
            .expect("write");
        assert_eq!(
            read_response(&mut tcp, Duration::from_secs(5))
                .await
                .expect("answer")
                .status,
            200
        );
        open.push(tcp);
    }
    let mut sixth = connect(gw.addr).await;
    let refused = read_response(&mut sixth, Duration::from_secs(5))
        .await
        .expect("a refusal");
    assert_eq!(refused.status, 429, "{refused:?}");
    assert_eq!(refused.header("retry-after"), Some("1"));
    assert_eq!(refused.header("connection"), Some("close"));
    assert!(counter("mcp", "refused", "max_connections_per_client") > refused_before);

    // One closes: a new connection from the same address is served again.
    drop(open.pop());
    let mut served = false;
    for _ in 0..50 {
        if status(gw.addr, "/healthz").await == Some(200) {
            served = true;
            break;
        }
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    assert!(served, "the slot was not given back");
}

#[tokio::test]
async fn the_admin_listener_has_its_own_small_cap() {
    let (gw, admin) = start(|_| {}).await;
    let cap = switchyard::listener::ADMIN_MAX_CONNECTIONS;
    let mut held = Vec::new();
    for _ in 0..cap {
        held.push(connect(admin).await);
    }
    let mut over = connect(admin).await;
    let refused = read_response(&mut over, Duration::from_secs(5))
        .await
        .expect("a refusal");
    assert_eq!(refused.status, 503, "{refused:?}");
    assert_eq!(refused.header("retry-after"), Some("1"));
    // The MCP listener is not affected, and the admin one serves again once one leaves.
    assert_eq!(status(gw.addr, "/healthz").await, Some(200));
    drop(held.pop());
    let back = {
        let mut back = false;
        for _ in 0..50 {
            if status(admin, "/healthz").await == Some(200) {
                back = true;
                break;
            }
            tokio::time::sleep(Duration::from_millis(50)).await;
        }
        back
    };
    assert!(back, "the admin listener did not serve again");
}

#[tokio::test]
async fn http2_streams_beyond_the_limit_and_oversized_header_lists_are_refused() {
    let (gw, _admin) = start(|c| {
        c.http2_max_concurrent_streams = 4;
        c.max_header_bytes = 8 * 1024;
    })
    .await;
    let authority = gw.addr.to_string();
    let post = h2raw::request_headers(
        "POST",
        &authority,
        "/t/a/mcp",
        &[
            ("content-type", "application/json"),
            ("accept", "application/json, text/event-stream"),
            ("content-length", "100"),
        ],
    );

    let mut conn = H2Conn::connect(gw.addr).await;
    assert_eq!(
        conn.setting(h2raw::SETTINGS_MAX_CONCURRENT_STREAMS),
        Some(4)
    );
    assert_eq!(
        conn.setting(h2raw::SETTINGS_MAX_HEADER_LIST_SIZE),
        Some(8192)
    );
    // Four requests whose bodies never come stay open; the fifth is over the limit.
    for stream in [1, 3, 5, 7, 9] {
        conn.request(stream, &post, false).await;
    }
    let refused = loop {
        let frame = conn.next_frame().await.expect("an answer to stream 9");
        assert!(
            !(matches!(frame.stream, 1 | 3 | 5 | 7) && frame.kind == h2raw::RST_STREAM),
            "an open stream was reset: {frame:?}"
        );
        if frame.stream == 9 {
            break frame;
        }
    };
    assert_eq!(refused.kind, h2raw::RST_STREAM, "{refused:?}");
    assert_eq!(refused.error_code(), Some(h2raw::REFUSED_STREAM));

    // A header list over the advertised size never reaches the application: 431.
    let mut conn = H2Conn::connect(gw.addr).await;
    let big = "x".repeat(12 * 1024);
    let mut headers = h2raw::request_headers("GET", &authority, "/healthz", &[]);
    headers.push(("x-big", big.as_str()));
    conn.request(1, &headers, true).await;
    let answer = loop {
        let frame = conn.next_frame().await.expect("an answer to stream 1");
        if frame.stream == 1 {
            break frame;
        }
    };
    assert_eq!(answer.status(), Some(431), "{answer:?}");
    // The same request within the size is served on the same connection.
    conn.request(
        3,
        &h2raw::request_headers("GET", &authority, "/healthz", &[]),
        true,
    )
    .await;
    let answer = loop {
        let frame = conn.next_frame().await.expect("an answer to stream 3");
        if frame.stream == 3 {
            break frame;
        }
    };
    assert_eq!(answer.status(), Some(200), "{answer:?}");
}

#[tokio::test]
async fn http1_heads_over_the_size_or_header_count_get_431() {
    let (gw, _admin) = start(|c| {
        c.max_header_bytes = 8 * 1024;
        c.max_headers = 20;
    })
    .await;
    let exchange = |extra: String| async move {
        let mut tcp = connect(gw.addr).await;
        let head = format!("GET /healthz HTTP/1.1\r\nHost: 127.0.0.1\r\n{extra}\r\n");
        tcp.write_all(head.as_bytes()).await.expect("write");
        read_response(&mut tcp, Duration::from_secs(5))
            .await
            .map(|r| r.status)
    };
    assert_eq!(exchange(String::new()).await, Some(200));
    assert_eq!(
        exchange(format!("X-Big: {}\r\n", "x".repeat(10 * 1024))).await,
        Some(431)
    );
    let many: String = (0..30).map(|i| format!("X-H{i}: v\r\n")).collect();
    assert_eq!(exchange(many).await, Some(431));
    let few: String = (0..10).map(|i| format!("X-H{i}: v\r\n")).collect();
    assert_eq!(exchange(few).await, Some(200));
}

/// A stopping gateway (SIGTERM's path: `app::serve`'s shutdown) and its open connections:
/// HTTP/2 gets a GOAWAY at once; an HTTP/1.1 connection stays open, and what comes on it is
/// answered with `Connection: close` and the connection then closed; one left idle is closed
/// once idle for `drain_grace`, not at once (closing it at once races the client's next
/// request: the request would be lost unanswered); new connections are refused.
#[tokio::test]
async fn a_stopping_gateway_answers_open_connections_with_close_and_closes_them_once_idle() {
    let grace = Duration::from_millis(1500);
    let (gw, _admin) = start(|c| c.drain_grace = grace).await;
    let addr = gw.addr;
    let limit = Duration::from_secs(5);
    let mut h1 = Vec::new();
    for _ in 0..2 {
        let mut tcp = connect(addr).await;
        tcp.write_all(b"GET /healthz HTTP/1.1\r\nHost: 127.0.0.1\r\n\r\n")
            .await
            .expect("write");
        let resp = read_response(&mut tcp, limit).await.expect("answer");
        assert_eq!(resp.status, 200);
        assert_eq!(
            resp.header("connection"),
            None,
            "kept alive before the stop"
        );
        h1.push((tcp, Instant::now()));
    }
    let mut h2 = h2_healthz(addr).await;

    let stopping = Instant::now();
    let stopped = tokio::spawn(gw.stop());
    loop {
        let frame = h2.next_frame().await.expect("a GOAWAY before the end");
        if frame.kind == h2raw::GOAWAY {
            assert_eq!(frame.error_code(), Some(0), "NO_ERROR");
            break;
        }
    }
    assert!(
        stopping.elapsed() < Duration::from_secs(1),
        "GOAWAY at once"
    );
    // The listener was closed before the connections were told.
    assert!(
        TcpStream::connect(addr).await.is_err(),
        "new connections refused"
    );

    // A request on an open connection, 0.3 s into the drain: answered, then the end.
    tokio::time::sleep(Duration::from_millis(300)).await;
    let (mut used, _) = h1.remove(0);
    let body = br#"{"jsonrpc":"2.0","id":1,"method":"initialize","params":{"protocolVersion":"2025-06-18","capabilities":{},"clientInfo":{"name":"drain","version":"1"}}}"#;
    let head = format!(
        "POST /t/a/mcp HTTP/1.1\r\nHost: 127.0.0.1\r\nContent-Type: application/json\r\nAccept: application/json, text/event-stream\r\nContent-Length: {}\r\n\r\n",
        body.len()
    );
    used.write_all(head.as_bytes()).await.expect("write head");
    used.write_all(body).await.expect("write body");
    let resp = read_response(&mut used, limit)
        .await
        .expect("a request sent during the drain is answered");
    assert_eq!(resp.status, 200, "{}", String::from_utf8_lossy(&resp.body));
    assert_eq!(resp.header("connection"), Some("close"));
    let answered = Instant::now();
    let took = closed_after(&mut used, answered, limit)
        .await
        .expect("closed after the answer");
    assert!(took < Duration::from_millis(500), "closed after {took:?}");

    // The connection left idle: closed once idle for the grace.
    let (mut idle, idle_since) = h1.remove(0);
    let took = closed_after(&mut idle, idle_since, limit)
        .await
        .expect("the idle connection closed");
    assert!(
        took >= grace - Duration::from_millis(100) && took <= grace + Duration::from_secs(2),
        "idle connection closed after {took:?}"
    );
    tokio::time::timeout(limit, stopped)
        .await
        .expect("stopped once every connection closed")
        .expect("stop task");
}
