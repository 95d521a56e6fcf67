//! The connection-level attacks of the hostile-client work (README, Limits), on bare sockets
//! to 127.0.0.1, each reporting what the gateway did and whether it kept serving:
//!
//! - `slowloris`: N connections that never finish a request head (a third send half a head,
//!   a third nothing, a third half of the HTTP/2 preface); how many the gateway closed and
//!   when, with `/healthz` probed while they are held.
//! - `slow-bodies`: N clients announcing a large body, sending most of it, then stalling;
//!   their answers and the gateway's resident memory (peak over the run).
//! - `connection-flood`: N connections opened as fast as possible and held idle; how many were refused
//!   (and how), whether the probes answer during the flood, and how long after it the
//!   listener serves again.

use std::net::SocketAddr;
use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::{Duration, Instant};

use serde_json::{Value, json};
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::TcpStream;

/// How one attacking connection ended.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Seen {
    /// An HTTP status, then (or without) the close.
    Status(u16),
    /// Closed by the gateway without an answer.
    Closed,
    /// Still open when the attack stopped looking.
    Open,
    /// The connection could not be made (e.g. the listener's backlog is full).
    ConnectFailed,
}

pub async fn slowloris(
    addr: SocketAddr,
    count: usize,
    hold: Duration,
    probes: &[String],
) -> Result<Value, String> {
    let openings: [&[u8]; 3] = [
        b"POST /t/demo/mcp HTTP/1.1\r\nHost: 127.0.0.1\r\nContent-Type: application/json\r\n",
        b"",
        b"PRI * HTTP/2.0\r\n",
    ];
    let started = Instant::now();
    let mut tasks = Vec::with_capacity(count);
    for i in 0..count {
        let opening = openings[i % 3];
        let tcp = TcpStream::connect(addr).await;
        tasks.push(tokio::spawn(async move {
            let Ok(mut tcp) = tcp else {
                return (Seen::ConnectFailed, None);
            };
            let _ = tcp.write_all(opening).await;
            watch(&mut tcp, started, hold).await
        }));
    }
    let opened_s = started.elapsed().as_secs_f64();
    tokio::time::sleep(Duration::from_secs(2)).await;
    let during = probe_all(probes).await;
    let seen = join(tasks).await;
    let mut report = summary(&seen, count);
    report["scenario"] = json!("slowloris");
    report["opened_in_s"] = json!(opened_s);
    report["held_for_s"] = json!(hold.as_secs_f64());
    report["probes_2s_in"] = during;
    Ok(report)
}

pub async fn slow_bodies(
    addr: SocketAddr,
    path: &str,
    count: usize,
    length: usize,
    sent: usize,
    hold: Duration,
    pid: Option<u32>,
) -> Result<Value, String> {
    let before = pid.map(super::rss_bytes).transpose()?;
    let peak = Arc::new(AtomicU64::new(before.unwrap_or(0)));
    let sampler = pid.map(|pid| {
        let peak = peak.clone();
        tokio::spawn(async move {
            while let Ok(rss) = super::rss_bytes(pid) {
                peak.fetch_max(rss, Ordering::Relaxed);
                tokio::time::sleep(Duration::from_millis(50)).await;
            }
        })
    });
    let head = format!(
        "POST {path} HTTP/1.1\r\nHost: 127.0.0.1\r\nContent-Type: application/json\r\nAccept: application/json, text/event-stream\r\nContent-Length: {length}\r\n\r\n"
    );
    let started = Instant::now();
    let mut tasks = Vec::with_capacity(count);
    for _ in 0..count {
        let head = head.clone();
        tasks.push(tokio::spawn(async move {
            let Ok(mut tcp) = TcpStream::connect(addr).await else {
                return (Seen::ConnectFailed, None);
            };
            if tcp.write_all(head.as_bytes()).await.is_err() {
                return (Seen::Closed, Some(started.elapsed()));
            }
            // An early refusal comes before the body is sent.
            let early = watch(&mut tcp, started, Duration::from_secs(1)).await;
            if early.0 != Seen::Open {
                return early;
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
            watch(&mut tcp, started, hold).await
        }));
    }
    let seen = join(tasks).await;
    if let Some(s) = sampler {
        s.abort();
    }
    let mut report = summary(&seen, count);
    report["scenario"] = json!("slow bodies");
    report["announced_bytes"] = json!(length);
    report["sent_bytes"] = json!(sent);
    if let (Some(pid), Some(before)) = (pid, before) {
        let peak = peak.load(Ordering::Relaxed);
        report["gateway_rss_before_mib"] = json!(mib(before));
        report["gateway_rss_peak_mib"] = json!(mib(peak));
        report["gateway_rss_after_mib"] = json!(mib(super::rss_bytes(pid)?));
    }
    Ok(report)
}

pub async fn flood(
    addr: SocketAddr,
    count: usize,
    hold: Duration,
    probes: &[String],
    metrics: Option<&str>,
    pid: Option<u32>,
) -> Result<Value, String> {
    let rss_before = pid.map(super::rss_bytes).transpose()?;
    let started = Instant::now();
    let mut held = Vec::with_capacity(count);
    let mut connect_failed = 0usize;
    // In waves, so that a listener that stopped accepting (its backlog full) costs a
    // connect timeout per wave, not per connection.
    for wave in (0..count).collect::<Vec<_>>().chunks(500) {
        let connects = wave
            .iter()
            .map(|_| tokio::time::timeout(Duration::from_secs(2), TcpStream::connect(addr)));
        for result in futures_util::future::join_all(connects).await {
            match result {
                Ok(Ok(tcp)) => held.push(tcp),
                _ => connect_failed += 1,
            }
        }
    }
    let opened_s = started.elapsed().as_secs_f64();
    // What each connection got within a second: a refusal, or nothing (held by the gateway).
    let answers = futures_util::future::join_all(
        held.iter_mut()
            .map(|tcp| async move { watch(tcp, Instant::now(), Duration::from_secs(1)).await.0 }),
    )
    .await;
    let during = probe_all(probes).await;
    let gateway_said = match metrics {
        Some(url) => connection_metrics(url).await,
        None => Value::Null,
    };
    tokio::time::sleep(hold).await;
    let during_late = probe_all(probes).await;
    let rss_held = pid.map(super::rss_bytes).transpose()?;
    drop(held);
    let released = Instant::now();
    let mut recovered_s = None;
    while released.elapsed() < Duration::from_secs(30) {
        if probe(&format!("http://{addr}/healthz")).await == Some(200) {
            recovered_s = Some(released.elapsed().as_secs_f64());
            break;
        }
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    let count_of = |s: Seen| answers.iter().filter(|a| **a == s).count();
    let rss = |b: Option<u64>| b.map(mib);
    Ok(json!({
        "gateway_rss_before_mib": rss(rss_before),
        "gateway_rss_while_held_mib": rss(rss_held),
        "scenario": "connection flood",
        "connections": count,
        "opened_in_s": opened_s,
        "connect_failed": connect_failed,
        "refused_503": count_of(Seen::Status(503)),
        "refused_429": count_of(Seen::Status(429)),
        "closed_without_answer": count_of(Seen::Closed),
        "held_open": count_of(Seen::Open),
        "probes_during": during,
        "gateway_metrics_during": gateway_said,
        "probes_after_hold": during_late,
        "listener_serves_again_after_s": recovered_s,
    }))
}

/// Reads from `tcp` for `limit`: the status of an answer, a close, or still open.
async fn watch(tcp: &mut TcpStream, since: Instant, limit: Duration) -> (Seen, Option<Duration>) {
    let mut buf = Vec::new();
    let mut chunk = [0u8; 4096];
    let read = tokio::time::timeout(limit, async {
        loop {
            match tcp.read(&mut chunk).await {
                Ok(0) | Err(_) => return Seen::Closed,
                Ok(n) => buf.extend_from_slice(&chunk[..n]),
            }
            if buf.windows(4).any(|w| w == b"\r\n\r\n") {
                let status = String::from_utf8_lossy(&buf)
                    .split_whitespace()
                    .nth(1)
                    .and_then(|s| s.parse().ok());
                return status.map_or(Seen::Closed, Seen::Status);
            }
        }
    })
    .await;
    match read {
        Ok(seen) => (seen, Some(since.elapsed())),
        Err(_) => (Seen::Open, None),
    }
}

async fn join(
    tasks: Vec<tokio::task::JoinHandle<(Seen, Option<Duration>)>>,
) -> Vec<(Seen, Option<Duration>)> {
    futures_util::future::join_all(tasks)
        .await
        .into_iter()
        .map(|r| r.unwrap_or((Seen::ConnectFailed, None)))
        .collect()
}

/// Counts by outcome, and when the gateway's answers or closes came (seconds after start).
fn summary(seen: &[(Seen, Option<Duration>)], count: usize) -> Value {
    let mut by_status = serde_json::Map::new();
    for (s, _) in seen {
        if let Seen::Status(code) = s {
            let n = by_status.entry(code.to_string()).or_insert(json!(0));
            *n = json!(n.as_u64().unwrap_or(0) + 1);
        }
    }
    let times: Vec<f64> = seen
        .iter()
        .filter_map(|(_, t)| t.map(|t| t.as_secs_f64()))
        .collect();
    let (first, last) = times
        .iter()
        .fold((f64::MAX, 0f64), |(lo, hi), t| (lo.min(*t), hi.max(*t)));
    json!({
        "connections": count,
        "answered_by_status": by_status,
        "closed_without_answer": seen.iter().filter(|(s, _)| *s == Seen::Closed).count(),
        "still_open_at_end": seen.iter().filter(|(s, _)| *s == Seen::Open).count(),
        "connect_failed": seen.iter().filter(|(s, _)| *s == Seen::ConnectFailed).count(),
        "first_answer_or_close_s": (!times.is_empty()).then_some(first),
        "last_answer_or_close_s": (!times.is_empty()).then_some(last),
    })
}

async fn probe_all(urls: &[String]) -> Value {
    let mut out = serde_json::Map::new();
    for url in urls {
        out.insert(url.clone(), json!(probe(url).await));
    }
    Value::Object(out)
}

/// The gateway's connection metrics (`switchyard_connections_*` series) from its admin
/// listener's `/metrics`.
async fn connection_metrics(url: &str) -> Value {
    let Ok(resp) = reqwest::get(url).await else {
        return Value::Null;
    };
    let text = resp.text().await.unwrap_or_default();
    let lines: Vec<&str> = text
        .lines()
        .filter(|l| l.starts_with("switchyard_connections_") && !l.ends_with(" 0"))
        .collect();
    json!(lines)
}

/// The status of `GET url` (plain `http://host:port/path`) within 3 s.
async fn probe(url: &str) -> Option<u16> {
    let rest = url.strip_prefix("http://")?;
    let (authority, path) = rest.split_once('/').unwrap_or((rest, ""));
    let attempt = async {
        let mut tcp = TcpStream::connect(authority).await.ok()?;
        let req = format!("GET /{path} HTTP/1.1\r\nHost: {authority}\r\nConnection: close\r\n\r\n");
        tcp.write_all(req.as_bytes()).await.ok()?;
        match watch(&mut tcp, Instant::now(), Duration::from_secs(3))
            .await
            .0
        {
            Seen::Status(s) => Some(s),
            _ => None,
        }
    };
    tokio::time::timeout(Duration::from_secs(3), attempt)
        .await
        .ok()
        .flatten()
}

fn mib(bytes: u64) -> f64 {
    (bytes as f64 / (1 << 20) as f64 * 10.0).round() / 10.0
}
