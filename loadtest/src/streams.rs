//! The `streams` scenario: N sessions, each with its GET SSE stream open at once, held for a
//! while. Reports the gateway's resident memory per open stream (session included) and any
//! stream that failed to open or ended early.

use std::sync::Arc;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::time::{Duration, Instant};

use futures_util::StreamExt;
use serde_json::{Value, json};

pub struct Plan {
    pub url: String,
    pub count: usize,
    pub concurrency: usize,
    pub hold: Duration,
    pub pid: Option<u32>,
}

pub async fn run(plan: Plan) -> Result<Value, String> {
    let http = reqwest::Client::builder()
        .connect_timeout(Duration::from_secs(10))
        .pool_max_idle_per_host(plan.concurrency)
        .build()
        .map_err(|e| e.to_string())?;
    // Warm-up: a few sessions and streams, closed again, before the baseline.
    for _ in 0..plan.concurrency.min(plan.count) {
        let sid = crate::open_session(&http, &plan.url).await?;
        drop(open_stream(&http, &plan.url, &sid).await?);
    }
    tokio::time::sleep(Duration::from_millis(500)).await;
    let rss_before = plan.pid.map(crate::rss_bytes).transpose()?;

    let ended = Arc::new(AtomicUsize::new(0));
    let started = Instant::now();
    let opened: Vec<Result<tokio::task::JoinHandle<()>, String>> =
        futures_util::stream::iter(0..plan.count)
            .map(|_| {
                let (http, url, ended) = (http.clone(), plan.url.clone(), ended.clone());
                async move {
                    let sid = crate::open_session(&http, &url).await?;
                    let resp = open_stream(&http, &url, &sid).await?;
                    // Reads the stream (keep-alives) until it ends; an end is counted.
                    Ok(tokio::spawn(async move {
                        let mut resp = resp;
                        while let Ok(Some(_)) = resp.chunk().await {}
                        ended.fetch_add(1, Ordering::Relaxed);
                    }))
                }
            })
            .buffer_unordered(plan.concurrency)
            .collect()
            .await;
    let open_seconds = started.elapsed().as_secs_f64();
    let mut readers = Vec::new();
    let mut failed = 0usize;
    let mut first_error = None;
    for r in opened {
        match r {
            Ok(h) => readers.push(h),
            Err(e) => {
                failed += 1;
                first_error.get_or_insert(e);
            }
        }
    }
    tokio::time::sleep(plan.hold).await;
    let rss_after = plan.pid.map(crate::rss_bytes).transpose()?;
    let ended_early = ended.load(Ordering::Relaxed);
    for h in readers {
        h.abort();
    }
    let mut report = json!({
        "scenario": "open GET streams",
        "streams": plan.count,
        "opened": plan.count - failed,
        "failed_to_open": failed,
        "first_error": first_error,
        "ended_during_hold": ended_early,
        "hold_seconds": plan.hold.as_secs_f64(),
        "seconds_to_open": open_seconds,
    });
    if let (Some(before), Some(after)) = (rss_before, rss_after) {
        report["gateway_rss_before_bytes"] = json!(before);
        report["gateway_rss_after_bytes"] = json!(after);
        report["gateway_bytes_per_stream"] =
            json!(after.saturating_sub(before) as f64 / plan.count as f64);
    }
    Ok(report)
}

async fn open_stream(
    http: &reqwest::Client,
    url: &str,
    sid: &str,
) -> Result<reqwest::Response, String> {
    let resp = http
        .get(url)
        .header("accept", "text/event-stream")
        .header("mcp-session-id", sid)
        .header("mcp-protocol-version", "2025-11-25")
        .send()
        .await
        .map_err(|e| format!("GET stream: {e}"))?;
    if resp.status().as_u16() != 200 {
        return Err(format!("GET stream: HTTP {}", resp.status()));
    }
    Ok(resp)
}
