//! `h1.rs` over real sockets: a listener on 127.0.0.1 answers each request with scripted bytes
//! (in pieces, to cross every read boundary), and what the client reads is checked.
#![allow(clippy::unwrap_used)]

use std::time::Duration;

use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::{TcpListener, TcpStream};

use super::*;

/// A server that reads one request head and answers `pieces` (written apart, with a pause
/// between), then closes when `close` says so (else holds the connection a while). Returns the
/// client's connection and the request head the server read.
async fn exchange_with(
    pieces: Vec<&'static [u8]>,
    close: bool,
) -> (Conn, tokio::task::JoinHandle<String>) {
    let listener = TcpListener::bind("127.0.0.1:0").await.unwrap();
    let addr = listener.local_addr().unwrap();
    let server = tokio::spawn(async move {
        let (mut s, _) = listener.accept().await.unwrap();
        let mut head = Vec::new();
        let mut byte = [0u8; 1];
        while !head.ends_with(b"\r\n\r\n") {
            assert_eq!(s.read(&mut byte).await.unwrap(), 1);
            head.push(byte[0]);
        }
        // The body (`{}`): a close with unread bytes would be a reset, not an end.
        let mut body = [0u8; 2];
        s.read_exact(&mut body).await.unwrap();
        for p in pieces {
            s.write_all(p).await.unwrap();
            s.flush().await.unwrap();
            tokio::time::sleep(Duration::from_millis(5)).await;
        }
        if !close {
            tokio::time::sleep(Duration::from_millis(300)).await;
        }
        String::from_utf8(head).unwrap()
    });
    let tcp = TcpStream::connect(addr).await.unwrap();
    (Conn::new(Box::new(tcp)), server)
}

async fn post(conn: &mut Conn) -> Result<Head, H1Error> {
    let mut lines = HeaderLines::default();
    lines.add_bytes("accept", b"application/json");
    conn.send(
        &Method::POST,
        &Uri::from_static("/mcp?x=1"),
        b"host: up:8080\r\n",
        &lines,
        b"{}",
    )
    .await
    .unwrap();
    conn.read_head(&Method::POST).await
}

async fn body(conn: &mut Conn, state: &mut BodyState) -> Result<Vec<u8>, H1Error> {
    let mut out = Vec::new();
    while let Some(b) = conn.next_chunk(state).await? {
        out.extend_from_slice(&b);
    }
    Ok(out)
}

/// The error a POST answered with `answer` ends in (reading its head, or else its body).
async fn error_of(answer: &'static [u8], close: bool) -> H1Error {
    let (mut conn, _server) = exchange_with(vec![answer], close).await;
    match post(&mut conn).await {
        Err(e) => e,
        Ok(mut head) => body(&mut conn, &mut head.body).await.unwrap_err(),
    }
}

#[tokio::test]
async fn a_request_goes_out_in_origin_form_with_its_length() {
    let (mut conn, server) = exchange_with(
        vec![b"HTTP/1.1 200 OK\r\ncontent-length: 2\r\n\r\nok"],
        false,
    )
    .await;
    let mut head = post(&mut conn).await.unwrap();
    assert_eq!(body(&mut conn, &mut head.body).await.unwrap(), b"ok");
    let sent = server.await.unwrap();
    assert_eq!(
        sent,
        "POST /mcp?x=1 HTTP/1.1\r\nhost: up:8080\r\naccept: application/json\r\ncontent-length: 2\r\n\r\n"
    );
    assert!(head.reusable && !conn.has_leftover());
}

#[tokio::test]
async fn chunked_bodies_with_extensions_and_trailers_across_reads() {
    let (mut conn, _server) = exchange_with(
        vec![
            b"HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\n",
            b"Content-Type: text/event-stream\r\n\r\n5;name=v\r\nhel",
            b"lo\r\n",
            b"1\r\n \r\nA\r\n0123456789\r\n0\r\nx-trailer: 1\r\n",
            b"\r\n",
        ],
        false,
    )
    .await;
    let mut head = post(&mut conn).await.unwrap();
    assert_eq!(head.body, BodyState::ChunkSize);
    assert_eq!(head.body.declared_length(), None);
    assert_eq!(
        head.headers.get("content-type").unwrap(),
        b"text/event-stream"
    );
    assert_eq!(
        body(&mut conn, &mut head.body).await.unwrap(),
        b"hello 0123456789"
    );
    assert_eq!(head.body, BodyState::Done);
    assert!(head.reusable);
}

#[tokio::test]
async fn interim_responses_are_skipped_and_bodiless_statuses_have_no_body() {
    let (mut conn, _server) = exchange_with(
        vec![
            b"HTTP/1.1 100 Continue\r\n\r\nHTTP/1.1 102 Processing\r\n\r\n",
            b"HTTP/1.1 204 No Content\r\n\r\n",
        ],
        false,
    )
    .await;
    let head = post(&mut conn).await.unwrap();
    assert_eq!(head.status, StatusCode::NO_CONTENT);
    assert_eq!(head.body, BodyState::Done);
}

#[tokio::test]
async fn a_body_without_length_runs_to_the_close_and_the_connection_is_spent() {
    let (mut conn, _server) =
        exchange_with(vec![b"HTTP/1.1 200 OK\r\n\r\nsome", b" more"], true).await;
    let mut head = post(&mut conn).await.unwrap();
    assert!(!head.reusable);
    assert_eq!(body(&mut conn, &mut head.body).await.unwrap(), b"some more");
}

#[tokio::test]
async fn connection_close_http_1_0_and_length_beside_chunked_are_not_reused() {
    for answer in [
        &b"HTTP/1.1 200 OK\r\nConnection: keep-alive, close\r\ncontent-length: 0\r\n\r\n"[..],
        b"HTTP/1.0 200 OK\r\ncontent-length: 0\r\n\r\n",
        b"HTTP/1.1 200 OK\r\ncontent-length: 3\r\ntransfer-encoding: chunked\r\n\r\n0\r\n\r\n",
    ] {
        let (mut conn, _server) = exchange_with(vec![answer], false).await;
        let mut head = post(&mut conn).await.unwrap();
        body(&mut conn, &mut head.body).await.unwrap();
        assert!(!head.reusable, "{}", String::from_utf8_lossy(answer));
    }
}

#[tokio::test]
async fn malformed_answers_are_errors() {
    let cases: [(&'static [u8], &str); 6] = [
        (
            b"HTTP/1.1 200 OK\r\ncontent-length: 2\r\ncontent-length: 3\r\n\r\nok",
            "conflicting Content-Length",
        ),
        (
            b"HTTP/1.1 200 OK\r\ncontent-length: -1\r\n\r\n",
            "invalid Content-Length",
        ),
        (
            b"HTTP/1.1 200 OK\r\ntransfer-encoding: chunked\r\n\r\nzz\r\n",
            "invalid chunk size",
        ),
        (
            b"HTTP/1.1 200 OK\r\ntransfer-encoding: chunked\r\n\r\n11111111111111111\r\n",
            "invalid chunk size",
        ),
        (
            b"HTTP/1.1 200 OK\r\ntransfer-encoding: chunked\r\n\r\n2\r\nabc\r\n",
            "chunk data longer than its size",
        ),
        (
            b"HTTP/1.1 101 Switching Protocols\r\n\r\n",
            "unrequested protocol switch",
        ),
    ];
    for (answer, why) in cases {
        let err = error_of(answer, true).await;
        assert!(err.to_string().contains(why), "{err} for {why}");
    }
}

#[tokio::test]
async fn oversized_heads_and_chunk_lines_are_refused_not_buffered() {
    let cases = [
        // A head that never ends: refused once it passes the bound, not read forever.
        (
            format!("HTTP/1.1 200 OK\r\nx: {}", "a".repeat(MAX_HEAD + 10)),
            "too large",
        ),
        (
            format!(
                "HTTP/1.1 200 OK\r\n{}\r\n",
                "x: 1\r\n".repeat(MAX_HEADERS + 1)
            ),
            "too many header fields",
        ),
        // A chunk-size line that never ends.
        (
            format!(
                "HTTP/1.1 200 OK\r\ntransfer-encoding: chunked\r\n\r\n1;{}",
                "e".repeat(MAX_CHUNK_LINE + 10)
            ),
            "line too long",
        ),
    ];
    for (answer, why) in cases {
        let answer: &'static [u8] = Box::leak(answer.into_bytes().into_boxed_slice());
        let err = error_of(answer, false).await;
        assert!(err.to_string().contains(why), "{err} for {why}");
    }
}

#[tokio::test]
async fn a_head_and_body_dribbled_a_byte_at_a_time_are_read_whole() {
    let answer: &'static [u8] = b"HTTP/1.1 100 Continue\r\n\r\nHTTP/1.1 200 OK\r\nx-a: 1\r\n\
        transfer-encoding: chunked\r\n\r\n4\r\nwiki\r\n0\r\nx-t: 2\r\n\r\n";
    let pieces = answer.chunks(1).collect();
    let (mut conn, _server) = exchange_with(pieces, false).await;
    let mut head = post(&mut conn).await.unwrap();
    assert_eq!(head.status, StatusCode::OK);
    assert_eq!(head.headers.get("x-a").unwrap(), b"1");
    assert_eq!(body(&mut conn, &mut head.body).await.unwrap(), b"wiki");
    assert!(head.reusable && !conn.has_leftover());
}

#[tokio::test]
async fn trailers_past_their_bound_are_refused() {
    let answer: &'static [u8] = Box::leak(
        format!(
            "HTTP/1.1 200 OK\r\ntransfer-encoding: chunked\r\n\r\n0\r\n{}\r\n",
            "x-t: 1234567890\r\n".repeat(MAX_TRAILERS / 16 + 1)
        )
        .into_bytes()
        .into_boxed_slice(),
    );
    let err = error_of(answer, false).await;
    assert!(err.to_string().contains("trailers too large"), "{err}");
}

#[tokio::test]
async fn a_connection_closed_early_is_an_error_not_an_end() {
    let (mut conn, _server) = exchange_with(vec![], true).await;
    assert!(matches!(
        post(&mut conn).await,
        Err(H1Error::ClosedBeforeResponse)
    ));
    for cut in [
        &b"HTTP/1.1 200 OK\r\ncontent-length: 10\r\n\r\nabc"[..],
        b"HTTP/1.1 200 OK\r\ntransfer-encoding: chunked\r\n\r\n3\r\nab",
    ] {
        let err = error_of(cut, true).await;
        assert!(matches!(err, H1Error::ClosedInBody), "{err}");
    }
}

#[tokio::test]
async fn an_idle_connection_the_server_closed_is_stale() {
    let (mut conn, server) =
        exchange_with(vec![b"HTTP/1.1 200 OK\r\ncontent-length: 0\r\n\r\n"], true).await;
    let _ = post(&mut conn).await.unwrap();
    assert!(!conn.has_leftover());
    server.await.unwrap();
    // The server's close has arrived once it returned; give the FIN a moment on loopback.
    let mut stale = false;
    for _ in 0..50 {
        if conn.is_stale() {
            stale = true;
            break;
        }
        tokio::time::sleep(Duration::from_millis(10)).await;
    }
    assert!(stale);
    // A connection still open and quiet is not.
    let (mut conn, _server) =
        exchange_with(vec![b"HTTP/1.1 200 OK\r\ncontent-length: 0\r\n\r\n"], false).await;
    let _ = post(&mut conn).await.unwrap();
    assert!(!conn.is_stale());
}

/// A body awaited with nothing unread (an event stream between events) holds no read buffer;
/// its next bytes are read once they come.
#[tokio::test]
async fn a_waiting_body_holds_no_buffer() {
    let listener = TcpListener::bind("127.0.0.1:0").await.unwrap();
    let addr = listener.local_addr().unwrap();
    let (go, wait) = tokio::sync::oneshot::channel::<()>();
    let server = tokio::spawn(async move {
        let (mut s, _) = listener.accept().await.unwrap();
        let mut request = [0u8; 1024];
        let _ = s.read(&mut request).await.unwrap();
        s.write_all(b"HTTP/1.1 200 OK\r\ntransfer-encoding: chunked\r\n\r\n5\r\nfirst\r\n")
            .await
            .unwrap();
        // The next chunk only once the client has been seen waiting.
        wait.await.unwrap();
        s.write_all(b"6\r\nsecond\r\n0\r\n\r\n").await.unwrap();
        s
    });
    let mut conn = Conn::new(Box::new(TcpStream::connect(addr).await.unwrap()));
    let target = Uri::from_static("/sse");
    let fixed = b"host: up:8080\r\n";
    conn.send(&Method::GET, &target, fixed, &HeaderLines::default(), b"")
        .await
        .unwrap();
    assert!(
        conn.out.capacity() > 0,
        "the request's buffer is kept for the next one"
    );
    let mut head = conn.read_head(&Method::GET).await.unwrap();
    let first = conn.next_chunk(&mut head.body).await.unwrap().unwrap();
    assert_eq!(&first[..], b"first");
    let waiting = tokio::time::timeout(Duration::from_millis(50), async {
        // The CRLF after `first` may be read here; the next chunk cannot come yet.
        loop {
            if let Some(b) = conn.next_chunk(&mut head.body).await.unwrap() {
                return b;
            }
        }
    })
    .await;
    assert!(waiting.is_err(), "a chunk the server did not send");
    assert_eq!(conn.buf.capacity(), 0, "a buffer is held while waiting");
    assert_eq!(
        conn.out.capacity(),
        0,
        "a request buffer is held while waiting (an event stream may wait for a session's life)"
    );
    go.send(()).unwrap();
    assert_eq!(body(&mut conn, &mut head.body).await.unwrap(), b"second");
    drop(server.await.unwrap());
}

/// `ends_head` finds a head's blank line (CRLF CRLF or bare LF LF) as soon as the bytes that
/// came hold one, however they came: a byte at a time, or in two pieces cut anywhere.
#[test]
fn the_end_of_a_head_is_found_however_the_bytes_come() {
    let plain =
        |buf: &[u8]| buf.windows(3).any(|w| w == b"\n\r\n") || buf.windows(2).any(|w| w == b"\n\n");
    let texts: [&[u8]; 9] = [
        b"HTTP/1.1 200 OK\r\nContent-Length: 2\r\n\r\n{}",
        b"HTTP/1.1 200 OK\nA: b\n\nbody",
        b"HTTP/1.1 200 OK\r\nA: b\r\n",
        b"HTTP/1.1 200 OK\r\nA: b\r\n\r",
        b"\n\n",
        b"\n\r\n",
        b"\n\r",
        b"\r\n\r\r\n\n\r\r\n",
        b"",
    ];
    for text in texts {
        let shown = String::from_utf8_lossy(text);
        // A byte at a time: found at the first length that holds the blank line.
        let first = (1..=text.len()).find(|&n| plain(&text[..n]));
        let found = (1..=text.len()).find(|&n| ends_head(&text[..n], n - 1));
        assert_eq!(found, first, "{shown:?} a byte at a time");
        // Two pieces.
        for cut in 0..=text.len() {
            let found = ends_head(&text[..cut], 0) || ends_head(text, cut);
            assert_eq!(found, plain(text), "{shown:?} cut at {cut}");
        }
    }
}

/// A hostile upstream's head: a field name that is not a token, a value with a control
/// character or DEL, an obsolete line folding. Each is refused as malformed (httparse checks
/// names and values as the head is read; nothing else does since the fields are kept raw).
#[tokio::test]
async fn heads_with_invalid_field_names_or_values_are_refused() {
    let heads: [&'static [u8]; 5] = [
        b"HTTP/1.1 200 OK\r\nbad name: 1\r\ncontent-length: 0\r\n\r\n",
        b"HTTP/1.1 200 OK\r\nx-a: one\x01two\r\ncontent-length: 0\r\n\r\n",
        b"HTTP/1.1 200 OK\r\nx-a: one\x7ftwo\r\ncontent-length: 0\r\n\r\n",
        b"HTTP/1.1 200 OK\r\nx-a: one\r\n two\r\ncontent-length: 0\r\n\r\n",
        b"HTTP/1.1 200 OK\r\nx-a\x00: 1\r\ncontent-length: 0\r\n\r\n",
    ];
    for answer in heads {
        let (mut conn, _server) = exchange_with(vec![answer], true).await;
        let outcome = post(&mut conn).await;
        assert!(
            matches!(outcome, Err(H1Error::Malformed(_))),
            "{:?}: {:?}",
            String::from_utf8_lossy(answer),
            outcome.map(|h| h.status)
        );
    }
    // Values keep what is not a control character: obs-text bytes and a tab.
    let (mut conn, _server) = exchange_with(
        vec![b"HTTP/1.1 200 OK\r\nx-a: caf\xc3\xa9\tok\r\ncontent-length: 0\r\n\r\n"],
        true,
    )
    .await;
    let head = post(&mut conn).await.unwrap();
    assert_eq!(head.headers.get("x-a").unwrap(), b"caf\xc3\xa9\tok");
}

/// A server that answers each request on one connection with its own body, `rounds` times.
async fn echo_server(
    rounds: usize,
) -> (std::net::SocketAddr, tokio::task::JoinHandle<Vec<String>>) {
    let listener = TcpListener::bind("127.0.0.1:0").await.unwrap();
    let addr = listener.local_addr().unwrap();
    let server = tokio::spawn(async move {
        let (mut s, _) = listener.accept().await.unwrap();
        let mut heads = Vec::new();
        for _ in 0..rounds {
            let mut head = Vec::new();
            let mut byte = [0u8; 1];
            while !head.ends_with(b"\r\n\r\n") {
                assert_eq!(s.read(&mut byte).await.unwrap(), 1);
                head.push(byte[0]);
            }
            let head = String::from_utf8(head).unwrap();
            let length: usize = head
                .lines()
                .find_map(|l| l.strip_prefix("content-length: "))
                .unwrap()
                .parse()
                .unwrap();
            let mut body = vec![0u8; length];
            s.read_exact(&mut body).await.unwrap();
            s.write_all(format!("HTTP/1.1 200 OK\r\ncontent-length: {length}\r\n\r\n").as_bytes())
                .await
                .unwrap();
            s.write_all(&body).await.unwrap();
            heads.push(head);
        }
        heads
    });
    (addr, server)
}

#[tokio::test]
async fn requests_and_answers_of_every_size_follow_each_other_on_one_connection() {
    // Bodies past the inline bound (written apart), past the kept request buffer, small, and
    // answers copied out of the read buffer or split off it (past `COPIED_BODY`).
    let bodies: Vec<Vec<u8>> = [INLINE_BODY + 100, KEPT_WRITE - 50, 3, COPIED_BODY + 1, 40]
        .iter()
        .enumerate()
        .map(|(n, &len)| (0..len).map(|i| b'a' + ((i + n) % 26) as u8).collect())
        .collect();
    let (addr, server) = echo_server(bodies.len()).await;
    let mut conn = Conn::new(Box::new(TcpStream::connect(addr).await.unwrap()));
    for sent in &bodies {
        conn.send(
            &Method::POST,
            &Uri::from_static("/mcp"),
            b"host: up\r\n",
            &HeaderLines::default(),
            sent,
        )
        .await
        .unwrap();
        let mut head = conn.read_head(&Method::POST).await.unwrap();
        let got = body(&mut conn, &mut head.body).await.unwrap();
        assert_eq!(got.len(), sent.len());
        assert!(got == *sent, "the answer is the body sent");
        assert!(head.reusable && !conn.has_leftover());
    }
    let heads = server.await.unwrap();
    for (head, sent) in heads.iter().zip(&bodies) {
        assert_eq!(
            *head,
            format!(
                "POST /mcp HTTP/1.1\r\nhost: up\r\ncontent-length: {}\r\n\r\n",
                sent.len()
            ),
            "each request's head is its own, nothing of the one before"
        );
    }
}
