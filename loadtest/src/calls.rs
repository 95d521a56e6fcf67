//! The `calls` scenario: N concurrent MCP sessions, each `initialize` → `notifications/initialized`
//! → `tools/list` → `tools/call` in a loop (plain JSON answers, or SSE-streamed ones with
//! progress), closed-loop as fast as answers come or paced to a total rate. Latency is
//! measured from sending to the last byte of the answer (checking the answer is the client's
//! work and not counted); paced calls that could only be sent more
//! than one interval late (the client fell behind a slow server) are counted as late starts.
//! Reported as percentiles with throughput and errors.

use std::time::{Duration, Instant};

use serde_json::value::RawValue;
use serde_json::{Value, json};

/// What to run.
#[derive(Clone)]
pub struct Plan {
    pub url: String,
    pub sessions: usize,
    pub duration: Duration,
    pub warmup: Duration,
    /// Total calls per second over all sessions; 0: each session calls as fast as it can.
    pub rate: f64,
    pub tool: String,
    pub arguments: Value,
    /// Ask for progress (`_meta.progressToken`): a tool that reports it answers over SSE.
    pub progress: bool,
    /// Instead of calling the tool, list every tool (`tools/list`, following `nextCursor`).
    pub list: bool,
    /// Calls per POST: above 1, one JSON-RPC batch (the session is on 2025-03-26).
    pub batch: usize,
    /// Processes whose CPU time during the measured window is reported per call (the
    /// gateway, the upstream): a figure a busy shared machine does not blur.
    pub cpu_pids: Vec<(String, u32)>,
    /// An access token every request carries (`Authorization: Bearer`).
    pub bearer: Option<String>,
    /// Each session on a client (a connection) of its own, rather than all sessions on one
    /// shared pool of connections.
    pub connection_per_session: bool,
}

/// What one session measured after the warm-up.
#[derive(Default)]
struct Tally {
    latencies_us: Vec<u32>,
    errors: u64,
    first_error: Option<String>,
    /// Paced calls sent more than one interval after they were due (the client fell behind).
    late: u64,
    list_us: Option<u32>,
}

pub async fn run(plan: Plan) -> Result<Value, String> {
    let mut headers = reqwest::header::HeaderMap::new();
    if let Some(token) = &plan.bearer {
        let value = format!("Bearer {token}")
            .parse::<reqwest::header::HeaderValue>()
            .map_err(|_| "the bearer token is not a header value".to_owned())?;
        headers.insert(reqwest::header::AUTHORIZATION, value);
    }
    let client = || {
        reqwest::Client::builder()
            .default_headers(headers.clone())
            .timeout(Duration::from_secs(30))
            .pool_max_idle_per_host(plan.sessions)
            .tcp_nodelay(true)
            .build()
            .map_err(|e| e.to_string())
    };
    let shared = (!plan.connection_per_session).then(client).transpose()?;
    let clients = (0..plan.sessions)
        .map(|_| shared.clone().map_or_else(client, Ok))
        .collect::<Result<Vec<_>, _>>()?;
    let plan = std::sync::Arc::new(plan);
    let start = Instant::now() + Duration::from_millis(200);
    let measure_from = start + plan.warmup;
    let end = measure_from + plan.duration;
    let mut tasks = Vec::with_capacity(plan.sessions);
    for (n, http) in clients.into_iter().enumerate() {
        let plan = plan.clone();
        tasks.push(tokio::spawn(async move {
            session(&http, &plan, n, start, measure_from, end).await
        }));
    }
    // CPU time of the watched processes over the measured window only.
    let cpu_plan = plan.clone();
    let cpu = tokio::spawn(async move {
        tokio::time::sleep_until(measure_from.into()).await;
        let before = cpu_times(&cpu_plan.cpu_pids);
        tokio::time::sleep_until(end.into()).await;
        let after = cpu_times(&cpu_plan.cpu_pids);
        (before, after)
    });
    let mut all = Tally::default();
    let mut lists = Vec::new();
    for t in tasks {
        let tally = t.await.map_err(|e| e.to_string())??;
        all.latencies_us.extend(tally.latencies_us);
        all.errors += tally.errors;
        all.late += tally.late;
        if all.first_error.is_none() {
            all.first_error = tally.first_error;
        }
        lists.extend(tally.list_us);
    }
    all.latencies_us.sort_unstable();
    lists.sort_unstable();
    let secs = plan.duration.as_secs_f64();
    let ok = all.latencies_us.len() as f64;
    let (before, after) = cpu.await.map_err(|e| e.to_string())?;
    let mut cpu_per_call = serde_json::Map::new();
    for ((name, _), (b, a)) in plan.cpu_pids.iter().zip(before.iter().zip(after.iter())) {
        if let (Some(b), Some(a)) = (b, a) {
            let us = (a - b) as f64 * 1e6 / clock_ticks() as f64;
            cpu_per_call.insert(name.clone(), json!(us / ok.max(1.0)));
        }
    }
    Ok(json!({
        "cpu_us_per_call": cpu_per_call,
        "scenario": match (plan.list, plan.progress, plan.batch > 1) {
            (true, _, _) => "tools/list (every page)".to_owned(),
            (false, true, _) => "tools/call (SSE, progress)".to_owned(),
            (false, false, true) => format!("tools/call in JSON-RPC batches of {}", plan.batch),
            (false, false, false) => "tools/call".to_owned(),
        },
        "url": plan.url,
        "sessions": plan.sessions,
        "rate_target": plan.rate,
        "seconds": secs,
        "calls": all.latencies_us.len(),
        "errors": all.errors,
        "first_error": all.first_error,
        "late_starts": all.late,
        "throughput_per_s": ok / secs,
        "latency_ms": percentiles(&all.latencies_us),
        "tools_list_ms": percentiles(&lists),
    }))
}

/// utime + stime (clock ticks) of each process, from /proc/<pid>/stat.
fn cpu_times(pids: &[(String, u32)]) -> Vec<Option<u64>> {
    pids.iter()
        .map(|(_, pid)| {
            let stat = std::fs::read_to_string(format!("/proc/{pid}/stat")).ok()?;
            // Fields after the command name (which may contain spaces) start after ") ".
            let rest = &stat[stat.rfind(')')? + 2..];
            let f: Vec<&str> = rest.split_whitespace().collect();
            // utime and stime are fields 14 and 15 of the whole line: 12 and 13 here.
            Some(f.get(11)?.parse::<u64>().ok()? + f.get(12)?.parse::<u64>().ok()?)
        })
        .collect()
}

/// Clock ticks per second of /proc times (USER_HZ; 100 on Linux).
fn clock_ticks() -> u64 {
    100
}

fn percentiles(sorted_us: &[u32]) -> Value {
    if sorted_us.is_empty() {
        return Value::Null;
    }
    let at = |q: f64| {
        let i = ((sorted_us.len() as f64 * q).ceil() as usize).clamp(1, sorted_us.len()) - 1;
        f64::from(sorted_us[i]) / 1000.0
    };
    json!({"p50": at(0.50), "p90": at(0.90), "p99": at(0.99), "max": at(1.0)})
}

async fn session(
    http: &reqwest::Client,
    plan: &Plan,
    n: usize,
    start: Instant,
    measure_from: Instant,
    end: Instant,
) -> Result<Tally, String> {
    let version = if plan.batch > 1 {
        "2025-03-26"
    } else {
        "2025-11-25"
    };
    let sid = crate::open_session_on(http, &plan.url, version).await?;
    let mut tally = Tally::default();
    let post = |body: String| {
        http.post(&plan.url)
            .header("content-type", "application/json")
            .header("accept", "application/json, text/event-stream")
            .header("mcp-session-id", &sid)
            .header("mcp-protocol-version", version)
            .body(body)
            .send()
    };
    let t = Instant::now();
    let list = exchange(post(
        r#"{"jsonrpc":"2.0","id":"list","method":"tools/list"}"#.to_owned(),
    ))
    .await;
    match list {
        Ok((_, done)) => tally.list_us = Some(micros(done.duration_since(t))),
        Err(e) => return Err(format!("tools/list: {e}")),
    }
    // Paced sessions start spread over one interval, so the total rate is even.
    let interval =
        (plan.rate > 0.0).then(|| Duration::from_secs_f64(plan.sessions as f64 / plan.rate));
    let mut due = match interval {
        Some(i) => start + i.mul_f64(n as f64 / plan.sessions as f64),
        None => start,
    };
    tokio::time::sleep_until(start.into()).await;
    let mut id: u64 = 0;
    while due < end {
        if interval.is_some() {
            tokio::time::sleep_until(due.into()).await;
        } else {
            due = Instant::now();
        }
        id += 1;
        let sent = Instant::now();
        let result = if plan.list {
            list_all(&post, &mut id).await
        } else if plan.batch > 1 {
            let calls: Vec<Value> = (0..plan.batch)
                .map(|k| {
                    json!({"jsonrpc": "2.0", "id": format!("{id}.{k}"), "method": "tools/call",
                           "params": {"name": plan.tool, "arguments": plan.arguments}})
                })
                .collect();
            let sent = Instant::now();
            batch_exchange(post(Value::Array(calls).to_string()), plan.batch)
                .await
                .map(|done| done.duration_since(sent))
        } else {
            let mut params = json!({"name": plan.tool, "arguments": plan.arguments});
            if plan.progress {
                params["_meta"] = json!({"progressToken": id});
            }
            let body =
                json!({"jsonrpc": "2.0", "id": id, "method": "tools/call", "params": params});
            let sent = Instant::now();
            exchange(post(body.to_string()))
                .await
                .map(|(_, done)| done.duration_since(sent))
        };
        if let Some(i) = interval
            && due >= measure_from
            && sent.duration_since(due) > i
        {
            tally.late += 1;
        }
        if due >= measure_from {
            match result {
                Ok(took) => {
                    // A batch's calls all took the batch's time.
                    for _ in 0..plan.batch.max(1) {
                        tally.latencies_us.push(micros(took));
                    }
                }
                Err(e) => {
                    tally.errors += 1;
                    tally.first_error.get_or_insert(e);
                }
            }
        }
        if let Some(i) = interval {
            due += i;
        }
    }
    Ok(tally)
}

/// Lists every tool, page by page; the time is the sum of the pages' times (each from its
/// request to the last byte of its answer).
async fn list_all<F, Fut>(post: &F, id: &mut u64) -> Result<Duration, String>
where
    F: Fn(String) -> Fut,
    Fut: std::future::Future<Output = reqwest::Result<reqwest::Response>>,
{
    let mut cursor: Option<String> = None;
    let mut took = Duration::ZERO;
    for _ in 0..10_000 {
        *id += 1;
        let params = match &cursor {
            Some(c) => json!({"cursor": c}),
            None => json!({}),
        };
        let body = json!({"jsonrpc": "2.0", "id": *id, "method": "tools/list", "params": params});
        let sent = Instant::now();
        let (next, done) = exchange(post(body.to_string())).await?;
        took += done.duration_since(sent);
        match next {
            Some(next) => cursor = Some(next),
            None => return Ok(took),
        }
    }
    Err("tools/list never ended (10,000 pages)".to_owned())
}

fn micros(d: Duration) -> u32 {
    u32::try_from(d.as_micros()).unwrap_or(u32::MAX)
}

/// Sends a request and reads its whole answer body; returns it with when its last byte came.
/// An HTTP error status is an error.
async fn answer_of(
    send: impl std::future::Future<Output = reqwest::Result<reqwest::Response>>,
) -> Result<(bytes::Bytes, Instant), String> {
    let resp = send.await.map_err(|e| e.to_string())?;
    let status = resp.status();
    let body = resp.bytes().await.map_err(|e| e.to_string())?;
    let done = Instant::now();
    if !status.is_success() {
        return Err(format!("HTTP {status}: {}", String::from_utf8_lossy(&body)));
    }
    Ok((body, done))
}

/// Sends a batch of `n` calls and reads the JSON array of their responses; every one must be
/// a result that is not a tool error.
async fn batch_exchange(
    send: impl std::future::Future<Output = reqwest::Result<reqwest::Response>>,
    n: usize,
) -> Result<Instant, String> {
    let (body, done) = answer_of(send).await?;
    let answers: Vec<Answer<'_>> = serde_json::from_slice(&body).map_err(|e| {
        format!(
            "unreadable batch answer ({e}): {}",
            String::from_utf8_lossy(&body)
        )
    })?;
    if answers.len() != n {
        return Err(format!("{} answers to a batch of {n}", answers.len()));
    }
    for a in answers {
        let Some(result) = a.result else {
            return Err(String::from_utf8_lossy(&body).into_owned());
        };
        let head: ResultHead<'_> = serde_json::from_str(result.get()).map_err(|e| e.to_string())?;
        if head.is_error {
            return Err(String::from_utf8_lossy(&body).into_owned());
        }
    }
    Ok(done)
}

/// A JSON-RPC answer, read without building it (a list of 1,000 tools is large).
#[derive(serde::Deserialize)]
struct Answer<'a> {
    #[serde(borrow)]
    result: Option<&'a RawValue>,
}

#[derive(serde::Deserialize)]
struct ResultHead<'a> {
    #[serde(rename = "nextCursor", borrow)]
    next_cursor: Option<std::borrow::Cow<'a, str>>,
    #[serde(rename = "isError", default)]
    is_error: bool,
}

/// Sends a request and reads its whole answer (JSON, or an SSE stream ending with the
/// response); returns the result's `nextCursor` and when the answer's last byte arrived (the
/// end of its latency: checking the answer is the client's time, not the server's). An HTTP
/// error, a JSON-RPC error or a tool error (`isError`) is an error.
async fn exchange(
    send: impl std::future::Future<Output = reqwest::Result<reqwest::Response>>,
) -> Result<(Option<String>, Instant), String> {
    let (body, done) = answer_of(send).await?;
    // The last JSON-RPC message of the answer (the only one for JSON, the response for SSE).
    let last = body
        .split(|b| *b == b'\n')
        .filter_map(|line| line.strip_prefix(b"data:"))
        .map(<[u8]>::trim_ascii)
        .rfind(|d| !d.is_empty())
        .unwrap_or(&body);
    let unreadable = |e: serde_json::Error| {
        format!("unreadable answer ({e}): {}", String::from_utf8_lossy(last))
    };
    let answer: Answer<'_> = serde_json::from_slice(last).map_err(unreadable)?;
    let Some(result) = answer.result else {
        return Err(String::from_utf8_lossy(last).into_owned());
    };
    let head: ResultHead<'_> = serde_json::from_str(result.get()).map_err(unreadable)?;
    if head.is_error {
        return Err(String::from_utf8_lossy(last).into_owned());
    }
    Ok((head.next_cursor.map(|c| c.into_owned()), done))
}
