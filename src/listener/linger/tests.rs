//! The lingering close on real sockets: the FIN goes out at once, what the client still
//! sends is read and discarded until it closes, a client that never closes is cut off at
//! `LINGER_TIME`, and one that closed first costs no wait.

#![allow(clippy::unwrap_used)]

use std::time::{Duration, Instant};

use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::{TcpListener, TcpStream};

use super::{LINGER_TIME, Lingering};

/// A connected pair: the client's socket and the server's, wrapped.
async fn pair() -> (TcpStream, Lingering) {
    let listener = TcpListener::bind("127.0.0.1:0").await.unwrap();
    let client = TcpStream::connect(listener.local_addr().unwrap())
        .await
        .unwrap();
    let (server, _) = listener.accept().await.unwrap();
    (client, Lingering::new(server))
}

#[tokio::test]
async fn the_client_keeps_writing_until_it_has_read_the_end_then_both_close() {
    let (mut client, mut server) = pair().await;
    server.write_all(b"the answer").await.unwrap();
    // The client is still sending (a body the server never reads) when the server closes.
    client.write_all(&[b'x'; 100_000]).await.unwrap();
    let started = Instant::now();
    let closing = tokio::spawn(async move { server.shutdown().await });
    // Everything the client writes after the server's close is taken, not reset.
    for _ in 0..20 {
        client.write_all(&[b'y'; 50_000]).await.unwrap();
        tokio::time::sleep(Duration::from_millis(5)).await;
    }
    let mut seen = Vec::new();
    client.read_to_end(&mut seen).await.unwrap();
    assert_eq!(seen, b"the answer");
    assert!(!closing.is_finished(), "the server waits for the client");
    drop(client);
    closing.await.unwrap().unwrap();
    assert!(started.elapsed() < LINGER_TIME, "{:?}", started.elapsed());
}

#[tokio::test]
async fn a_client_that_never_closes_is_cut_off_after_the_linger_time() {
    let (mut client, mut server) = pair().await;
    let started = Instant::now();
    let closing = tokio::spawn(async move {
        server.shutdown().await.unwrap();
        started.elapsed()
    });
    // Trickles on and never closes: its writes fail once the server has closed.
    let failed = loop {
        if client.write_all(&[b'z'; 1000]).await.is_err() {
            break started.elapsed();
        }
        assert!(started.elapsed() < Duration::from_secs(10), "never cut off");
        tokio::time::sleep(Duration::from_millis(20)).await;
    };
    let closed = closing.await.unwrap();
    assert!(
        closed >= LINGER_TIME && closed < LINGER_TIME + Duration::from_secs(1),
        "{closed:?}"
    );
    assert!(failed >= closed, "{failed:?} before {closed:?}");
}

#[tokio::test]
async fn a_client_that_closed_first_costs_no_wait() {
    let (client, mut server) = pair().await;
    drop(client);
    let mut rest = Vec::new();
    server.read_to_end(&mut rest).await.unwrap();
    let started = Instant::now();
    // Shut down twice (hyper may): neither waits.
    let _ = server.shutdown().await;
    let _ = server.shutdown().await;
    assert!(
        started.elapsed() < Duration::from_millis(100),
        "{:?}",
        started.elapsed()
    );
    assert!(server.deadline.is_none(), "no timer was set");
}
