//! Tests of the stdio transport over in-memory pipes: concurrency, over-long lines, EOF.
#![allow(clippy::unwrap_used)]

use std::time::{Duration, Instant};

use serde_json::Value;
use tokio::io::{AsyncBufReadExt as _, AsyncWriteExt as _, BufReader};
use tokio::time::timeout;

use super::DemoOptions;
use super::server::Server;
use super::tests::{LIMIT, error_of, sleep_msg};

#[tokio::test]
async fn stdio_serves_concurrently_and_stops_at_eof() {
    let server = Server::new(&DemoOptions::default()).unwrap();
    let (mut client_w, server_r) = tokio::io::duplex(64 * 1024);
    let (server_w, client_r) = tokio::io::duplex(64 * 1024);
    let serving = tokio::spawn(super::stdio::serve(
        server,
        BufReader::new(server_r),
        server_w,
    ));
    let mut lines = BufReader::new(client_r).lines();
    let started = Instant::now();
    let input = format!(
        "{}\n{}\n\n{}\n{}\n",
        sleep_msg("1", 300, 0, None),
        sleep_msg("2", 300, 0, None),
        r#"{"jsonrpc":"2.0","method":"notifications/initialized"}"#,
        r#"{"jsonrpc":"2.0","id":3,"method":"ping"}"#
    );
    client_w.write_all(input.as_bytes()).await.unwrap();
    let first: Value = serde_json::from_str(
        &timeout(LIMIT, lines.next_line())
            .await
            .unwrap()
            .unwrap()
            .unwrap(),
    )
    .unwrap();
    assert_eq!(first["id"], 3, "ping is not blocked by the sleeps");
    let mut ids = Vec::new();
    for _ in 0..2 {
        let v: Value = serde_json::from_str(
            &timeout(LIMIT, lines.next_line())
                .await
                .unwrap()
                .unwrap()
                .unwrap(),
        )
        .unwrap();
        ids.push(v["id"].as_i64().unwrap());
    }
    ids.sort_unstable();
    assert_eq!(ids, [1, 2]);
    assert!(
        started.elapsed() < Duration::from_millis(550),
        "{:?}",
        started.elapsed()
    );

    // An over-long line is a parse error, and the stream goes on.
    let long = vec![b'x'; super::stdio::MAX_LINE + 1];
    let writer = tokio::spawn(async move {
        client_w.write_all(&long).await.unwrap();
        client_w
            .write_all(b"\n{\"jsonrpc\":\"2.0\",\"id\":4,\"method\":\"ping\"}\n")
            .await
            .unwrap();
        client_w
            .write_all(sleep_msg("5", 60_000, 0, None).as_bytes())
            .await
            .unwrap();
        client_w.write_all(b"\n").await.unwrap();
        client_w
    });
    let err: Value = serde_json::from_str(
        &timeout(LIMIT, lines.next_line())
            .await
            .unwrap()
            .unwrap()
            .unwrap(),
    )
    .unwrap();
    assert_eq!((err["id"].clone(), error_of(&err).0), (Value::Null, -32700));
    let ping: Value = serde_json::from_str(
        &timeout(LIMIT, lines.next_line())
            .await
            .unwrap()
            .unwrap()
            .unwrap(),
    )
    .unwrap();
    assert_eq!(ping["id"], 4);

    // EOF with a sleep in flight: serve returns promptly and the sleep gets no answer.
    drop(timeout(LIMIT, writer).await.unwrap().unwrap());
    timeout(LIMIT, serving).await.unwrap().unwrap().unwrap();
    assert!(
        timeout(LIMIT, lines.next_line())
            .await
            .unwrap()
            .unwrap()
            .is_none()
    );
}
