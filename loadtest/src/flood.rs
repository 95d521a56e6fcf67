//! `sy-load notification-flood`: one session calls the demo server's `flood` tool (N notifications,
//! progress and log messages alternating, as fast as the gateway takes them) and reads the
//! response stream like a client that falls behind: it stops after the first event for a
//! while, then reads at a bounded rate — on the same connection, or, with `--resume`, on a
//! new one with `Last-Event-ID`. The gateway's resident memory is sampled all along. Reports
//! what the client received (notifications, whether the response came, how the stream
//! ended), the gateway's peak memory growth and its CPU time.

use std::sync::Arc;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::time::{Duration, Instant};

use serde_json::{Value, json};

use crate::{open_session, rss_bytes};

pub struct Plan {
    pub url: String,
    /// Notifications the tool sends.
    pub count: u64,
    /// How long the client reads nothing after the first event.
    pub pause: Duration,
    /// Bytes per second the client reads at after the pause (0: as fast as it can).
    pub read_rate: u64,
    /// Read on through a new connection (`Last-Event-ID`) instead of the first one.
    pub resume: bool,
    /// The gateway's process id (memory and CPU time).
    pub pid: Option<u32>,
    /// The gateway's Prometheus endpoint: the notifications it dropped, by reason.
    pub metrics: Option<String>,
    pub timeout: Duration,
}

/// What the client saw.
#[derive(Default)]
struct Seen {
    progress: u64,
    messages: u64,
    last_progress: Option<u64>,
    response: Option<Value>,
    last_id: Option<String>,
    bytes: u64,
}

pub async fn run(plan: Plan) -> Result<Value, String> {
    let http = reqwest::Client::builder()
        .timeout(plan.timeout)
        .build()
        .map_err(|e| e.to_string())?;
    let session = open_session(&http, &plan.url).await?;
    let rss_before = plan.pid.map(rss_bytes).transpose()?;
    let cpu_before = plan.pid.and_then(cpu_ticks);
    let (peak, stop) = (
        Arc::new(AtomicU64::new(0)),
        Arc::new(AtomicBool::new(false)),
    );
    let sampler = plan.pid.map(|pid| {
        let (peak, stop) = (peak.clone(), stop.clone());
        tokio::spawn(async move {
            while !stop.load(Ordering::Acquire) {
                if let Ok(rss) = rss_bytes(pid) {
                    peak.fetch_max(rss, Ordering::AcqRel);
                }
                tokio::time::sleep(Duration::from_millis(20)).await;
            }
        })
    });

    let started = Instant::now();
    let body = json!({"jsonrpc": "2.0", "id": 7, "method": "tools/call", "params": {
        "name": "flood", "arguments": {"count": plan.count, "kind": "both"},
        "_meta": {"progressToken": "flood"}}});
    let resp = http
        .post(&plan.url)
        .header("content-type", "application/json")
        .header("accept", "application/json, text/event-stream")
        .header("mcp-session-id", &session)
        .header("mcp-protocol-version", "2025-11-25")
        .body(body.to_string())
        .send()
        .await
        .map_err(|e| format!("tools/call: {e}"))?;
    let mut seen = Seen::default();
    let mut reader = Reader::new(resp);
    let mut end = reader.read(&mut seen, 0, true).await;
    tokio::time::sleep(plan.pause).await;
    if plan.resume && seen.response.is_none() {
        drop(reader);
        let last = seen.last_id.clone().ok_or("no event id to resume from")?;
        let resp = http
            .get(&plan.url)
            .header("accept", "text/event-stream")
            .header("mcp-session-id", &session)
            .header("mcp-protocol-version", "2025-11-25")
            .header("last-event-id", last)
            .send()
            .await
            .map_err(|e| format!("resume: {e}"))?;
        if !resp.status().is_success() {
            end = format!("resume refused: HTTP {}", resp.status());
            reader = Reader::closed();
        } else {
            reader = Reader::new(resp);
            end = String::new();
        }
    }
    if seen.response.is_none() && end.is_empty() {
        end = reader.read(&mut seen, plan.read_rate, false).await;
    }
    let seconds = started.elapsed().as_secs_f64();
    // The gateway finishes recording in the background; give its memory a moment to show.
    tokio::time::sleep(Duration::from_millis(200)).await;
    stop.store(true, Ordering::Release);
    if let Some(s) = sampler {
        let _ = s.await;
    }

    let mut report = json!({
        "scenario": match (plan.resume, plan.pause.is_zero() && plan.read_rate == 0) {
            (true, _) => "flood, client leaves and resumes",
            (false, true) => "flood, client reads as fast as it can",
            (false, false) => "flood, slow reader",
        },
        "notifications_sent": plan.count,
        "pause_seconds": plan.pause.as_secs_f64(),
        "read_bytes_per_second": plan.read_rate,
        "received_progress": seen.progress,
        "received_messages": seen.messages,
        "last_progress": seen.last_progress,
        "received_bytes": seen.bytes,
        "response": seen.response.is_some(),
        "stream_end": if seen.response.is_some() { "response".to_owned() } else { end },
        "seconds": seconds,
    });
    if let (Some(pid), Some(before)) = (plan.pid, rss_before) {
        let peak = peak.load(Ordering::Acquire).max(before);
        report["gateway_rss_before_bytes"] = json!(before);
        report["gateway_rss_peak_bytes"] = json!(peak);
        report["gateway_rss_peak_growth_bytes"] = json!(peak - before);
        report["gateway_rss_after_bytes"] = json!(rss_bytes(pid)?);
    }
    if let (Some(pid), Some(before)) = (plan.pid, cpu_before) {
        let after = cpu_ticks(pid).unwrap_or(before);
        report["gateway_cpu_seconds"] = json!((after - before) as f64 / 100.0);
    }
    if let Some(url) = &plan.metrics {
        report["gateway_dropped"] = dropped(&http, url).await?;
    }
    Ok(report)
}

/// `switchyard_notifications_dropped_total` by reason, from the gateway's metrics.
async fn dropped(http: &reqwest::Client, url: &str) -> Result<Value, String> {
    let text = http
        .get(url)
        .send()
        .await
        .map_err(|e| format!("metrics: {e}"))?
        .text()
        .await
        .map_err(|e| format!("metrics: {e}"))?;
    let mut out = serde_json::Map::new();
    for line in text.lines() {
        let Some(rest) = line.strip_prefix("switchyard_notifications_dropped_total{reason=\"")
        else {
            continue;
        };
        if let Some((reason, value)) = rest.split_once("\"} ") {
            out.insert(
                reason.to_owned(),
                json!(value.trim().parse::<f64>().unwrap_or(0.0)),
            );
        }
    }
    Ok(Value::Object(out))
}

/// The response stream being read, with what is left of an event between chunks.
struct Reader {
    resp: Option<reqwest::Response>,
    buf: String,
}

impl Reader {
    fn new(resp: reqwest::Response) -> Reader {
        Reader {
            resp: Some(resp),
            buf: String::new(),
        }
    }

    fn closed() -> Reader {
        Reader {
            resp: None,
            buf: String::new(),
        }
    }

    /// Reads until the response (or, with `first_only`, the first event), at `rate` bytes per
    /// second (0: unbounded). Returns why it stopped early ("" when it did not).
    async fn read(&mut self, seen: &mut Seen, rate: u64, first_only: bool) -> String {
        let Some(resp) = self.resp.as_mut() else {
            return "no stream".into();
        };
        let started = Instant::now();
        let mut read = 0u64;
        while seen.response.is_none() {
            let chunk = match resp.chunk().await {
                Ok(Some(c)) => c,
                Ok(None) => return "closed before the response".into(),
                Err(e) => return format!("cut: {e}"),
            };
            read += chunk.len() as u64;
            seen.bytes += chunk.len() as u64;
            self.buf.push_str(&String::from_utf8_lossy(&chunk));
            let events = take_events(&mut self.buf, seen);
            if first_only && events > 0 {
                return String::new();
            }
            if rate > 0 {
                let due = Duration::from_secs_f64(read as f64 / rate as f64);
                if let Some(wait) = due.checked_sub(started.elapsed()) {
                    tokio::time::sleep(wait).await;
                }
            }
        }
        String::new()
    }
}

/// Takes the complete events off `buf` into `seen`; returns how many.
fn take_events(buf: &mut String, seen: &mut Seen) -> usize {
    let mut n = 0;
    while let Some(end) = buf.find("\n\n") {
        let block: String = buf.drain(..end + 2).collect();
        n += 1;
        let mut data = String::new();
        for line in block.lines() {
            if let Some(id) = line.strip_prefix("id: ") {
                seen.last_id = Some(id.to_owned());
            } else if let Some(d) = line.strip_prefix("data: ") {
                data.push_str(d);
            }
        }
        let Ok(m) = serde_json::from_str::<Value>(&data) else {
            continue;
        };
        match m["method"].as_str() {
            Some("notifications/progress") => {
                seen.progress += 1;
                seen.last_progress = m["params"]["progress"].as_u64();
            }
            Some("notifications/message") => seen.messages += 1,
            _ if m["id"] == 7 => seen.response = Some(m),
            _ => {}
        }
    }
    n
}

/// utime + stime of a process, in clock ticks (USER_HZ, 100 on Linux).
fn cpu_ticks(pid: u32) -> Option<u64> {
    let stat = std::fs::read_to_string(format!("/proc/{pid}/stat")).ok()?;
    let rest = &stat[stat.rfind(')')? + 2..];
    let f: Vec<&str> = rest.split_whitespace().collect();
    Some(f.get(11)?.parse::<u64>().ok()? + f.get(12)?.parse::<u64>().ok()?)
}
