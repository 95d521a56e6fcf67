//! The body reader with in-process bodies on a paused clock: budget accounting, the deadline
//! and its extension by the minimum rate, sizes.

#![allow(clippy::unwrap_used)]

use std::time::Duration;

use axum::body::Body;
use bytes::Bytes;
use http_body_util::StreamBody;
use hyper::body::Frame;
use tokio::sync::mpsc;

use super::*;

fn reader(max_body: usize, read_timeout_ms: u64, min_rate: u64, budget: usize) -> BodyReader {
    BodyReader::new(&Limits {
        max_body_bytes: max_body,
        bodies: BodyLimits {
            read_timeout: Duration::from_millis(read_timeout_ms),
            min_rate,
            max_buffered: budget,
        },
        ..Limits::default()
    })
}

/// A body fed by the test, frame by frame; `announced` plays `Content-Length`.
fn fed(announced: Option<u64>) -> (mpsc::Sender<Bytes>, Body) {
    let (tx, rx) = mpsc::channel::<Bytes>(16);
    let stream = futures_util::stream::unfold(rx, |mut rx| async move {
        let data = rx.recv().await?;
        Some((Ok::<_, std::io::Error>(Frame::data(data)), rx))
    });
    let body = Body::new(Announced {
        inner: StreamBody::new(Box::pin(stream)),
        length: announced,
    });
    (tx, body)
}

/// Polls `future` once: whether it is still waiting.
fn pending<F: std::future::Future>(future: std::pin::Pin<&mut F>) -> bool {
    let mut cx = std::task::Context::from_waker(std::task::Waker::noop());
    future.poll(&mut cx).is_pending()
}

/// Gives a body an exact size hint, as hyper does for a request with `Content-Length`.
struct Announced<B> {
    inner: B,
    length: Option<u64>,
}

impl<B: hyper::body::Body + Unpin> hyper::body::Body for Announced<B> {
    type Data = B::Data;
    type Error = B::Error;
    fn poll_frame(
        mut self: std::pin::Pin<&mut Self>,
        cx: &mut std::task::Context<'_>,
    ) -> std::task::Poll<Option<Result<Frame<B::Data>, B::Error>>> {
        std::pin::Pin::new(&mut self.inner).poll_frame(cx)
    }
    fn size_hint(&self) -> hyper::body::SizeHint {
        self.length.map_or_else(
            hyper::body::SizeHint::default,
            hyper::body::SizeHint::with_exact,
        )
    }
}

#[tokio::test]
async fn a_whole_body_is_read_and_its_share_given_back_when_dropped() {
    let reader = reader(1024, 1000, 0, 4096);
    let (tx, body) = fed(None);
    tx.send(Bytes::from_static(b"{\"a\":")).await.unwrap();
    tx.send(Bytes::from_static(b"1}")).await.unwrap();
    drop(tx);
    let got = reader.read(body).await.unwrap();
    assert_eq!(&got[..], b"{\"a\":1}");
    assert_eq!(reader.buffered(), 7);
    drop(got);
    assert_eq!(reader.buffered(), 0);
}

#[tokio::test]
async fn an_announced_length_is_reserved_before_any_byte_and_refused_when_it_does_not_fit() {
    let reader = reader(4096, 1000, 0, 4096);
    let (_first_tx, first) = fed(Some(3000));
    let mut first_read = std::pin::pin!(reader.read(first));
    assert!(pending(first_read.as_mut()));
    assert_eq!(reader.buffered(), 3000, "reserved while no byte has come");
    let (_second_tx, second) = fed(Some(3000));
    assert!(matches!(
        reader.read(second).await,
        Err(GatewayError::BodyBudgetExhausted)
    ));
    assert_eq!(reader.buffered(), 3000, "the refused body holds nothing");
}

#[tokio::test]
async fn a_chunked_body_reserves_as_it_grows_and_is_refused_when_the_budget_is_full() {
    let reader = reader(8192, 1000, 0, 3000);
    let (_held_tx, held) = fed(Some(2000));
    let mut holding = std::pin::pin!(reader.read(held));
    assert!(pending(holding.as_mut()));
    let (tx, chunked) = fed(None);
    tx.send(Bytes::from(vec![b'x'; 600])).await.unwrap();
    tx.send(Bytes::from(vec![b'x'; 600])).await.unwrap();
    drop(tx);
    assert!(matches!(
        reader.read(chunked).await,
        Err(GatewayError::BodyBudgetExhausted)
    ));
    assert_eq!(
        reader.buffered(),
        2000,
        "the refused body's 600 bytes given back"
    );
}

#[tokio::test]
async fn too_large_is_413_whether_announced_or_found_while_reading() {
    let reader = reader(1024, 1000, 0, 1 << 20);
    let (_tx, announced) = fed(Some(1025));
    assert!(matches!(
        reader.read(announced).await,
        Err(GatewayError::BodyTooLarge { limit: 1024 })
    ));
    let (tx, chunked) = fed(None);
    tx.send(Bytes::from(vec![b'x'; 1000])).await.unwrap();
    tx.send(Bytes::from(vec![b'x'; 100])).await.unwrap();
    assert!(matches!(
        reader.read(chunked).await,
        Err(GatewayError::BodyTooLarge { limit: 1024 })
    ));
    assert_eq!(reader.buffered(), 0);
}

#[tokio::test(start_paused = true)]
async fn a_body_that_stops_is_cut_off_at_the_read_timeout() {
    let reader = reader(1 << 20, 2000, 0, 1 << 20);
    let (tx, body) = fed(Some(1000));
    tx.send(Bytes::from(vec![b'x'; 900])).await.unwrap();
    let started = Instant::now();
    let result = reader.read(body).await;
    assert!(
        matches!(result, Err(GatewayError::BodyTimeout)),
        "{result:?}"
    );
    assert_eq!(started.elapsed(), Duration::from_millis(2000));
    assert_eq!(reader.buffered(), 0);
    drop(tx);
}

#[tokio::test(start_paused = true)]
async fn a_body_arriving_at_the_minimum_rate_may_take_longer_than_the_read_timeout() {
    // 1 s, then 1000 B/s: 300 B every 250 ms (1200 B/s) keeps up; at 4000 B it is done.
    let reader = reader(1 << 20, 1000, 1000, 1 << 20);
    let (tx, body) = fed(None);
    let feeder = tokio::spawn(async move {
        for _ in 0..13 {
            tx.send(Bytes::from(vec![b'x'; 300])).await.unwrap();
            tokio::time::sleep(Duration::from_millis(250)).await;
        }
    });
    let got = reader.read(body).await.unwrap();
    assert_eq!(got.len(), 3900);
    feeder.await.unwrap();

    // 100 B every 250 ms (400 B/s) falls behind: cut off once the average is below the rate,
    // i.e. at the read timeout (only 400 B by then, worth 0.4 s).
    let (tx, body) = fed(None);
    let feeder = tokio::spawn(async move {
        for _ in 0..40 {
            if tx.send(Bytes::from(vec![b'x'; 100])).await.is_err() {
                return;
            }
            tokio::time::sleep(Duration::from_millis(250)).await;
        }
    });
    let started = Instant::now();
    let result = reader.read(body).await;
    assert!(
        matches!(result, Err(GatewayError::BodyTimeout)),
        "{result:?}"
    );
    assert_eq!(started.elapsed(), Duration::from_millis(1000));
    feeder.abort();
}

#[test]
fn the_allowance_is_the_timeout_or_the_time_the_bytes_are_worth_at_the_rate() {
    let r = reader(1 << 20, 10_000, 64 * 1024, 1 << 30);
    assert_eq!(r.allowance(0), Duration::from_secs(10));
    assert_eq!(r.allowance(640 * 1024), Duration::from_secs(10));
    assert_eq!(r.allowance(1280 * 1024), Duration::from_secs(20));
    let no_rate = reader(1 << 20, 10_000, 0, 1 << 30);
    assert_eq!(no_rate.allowance(usize::MAX), Duration::from_secs(10));
    let tiny = reader(1 << 20, 10_000, 1, 1 << 30);
    assert!(tiny.allowance(usize::MAX) > Duration::from_secs(10));
}

#[test]
fn a_body_already_there_is_read_without_a_timer() {
    // A runtime without timers: arming one would panic, so this read arms none.
    let runtime = tokio::runtime::Builder::new_current_thread()
        .build()
        .unwrap();
    let reader = reader(1 << 20, 2000, 0, 1 << 20);
    let got = runtime
        .block_on(reader.read(Body::from("{\"jsonrpc\":\"2.0\"}")))
        .unwrap();
    assert_eq!(&got[..], b"{\"jsonrpc\":\"2.0\"}");
    drop(got);
    assert_eq!(reader.buffered(), 0);
}
