//! `sy-load`: drives a running Switchyard gateway over real HTTP and reports what it measured as
//! one JSON object on stdout.
//!
//! `sy-load sessions --url U --count N [--warmup W] [--pid P] [--redis R --prefix X]` opens W
//! sessions first (default: as many as the concurrency), then N more (initialize +
//! notifications/initialized), leaves them idle, and reports what the N added: the gateway's
//! resident memory per session (from /proc/P/status), that of its child processes apart
//! (proportional set size: per-session upstream processes are their own cost), and, with
//! `--redis`, the Redis memory and keys per session (INFO memory, key count under the prefix).
//! Opened after W, the N show what one more session costs: a replica's first sessions also
//! pay for what is set up once (allocator pages of each size, tables, code paged in).
//!
//! `sy-load calls --url U --sessions N --seconds S [--rate R] [--tool T --arguments JSON]
//! [--progress] [--bearer-file F]` runs N sessions calling a tool (see `calls.rs`) and reports
//! throughput, latency percentiles and errors. The same command measures an upstream directly
//! and the gateway in front of it (with `--bearer-file`, a tenant that checks access tokens).
//!
//! `sy-load streams --url U --count N [--pid P] [--hold S]` opens N sessions with their GET
//! SSE streams at once, holds them, and reports memory per stream and streams lost.
//!
//! `sy-load slowloris|slow-bodies|connection-flood --addr A ...` run the connection-level attacks of
//! `attack.rs` (README, Limits) and report what the gateway did.
//! `sy-load notification-flood --url U --count N [--pause S] [--read-rate B] [--resume] [--pid P]` has the
//! demo server flood one call with N notifications while the client falls behind (see
//! `flood.rs`), and reports what the client received and the gateway's memory and CPU.

mod attack;
mod calls;
mod flood;
mod streams;

use std::sync::Arc;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::time::{Duration, Instant};

use clap::{Parser, Subcommand};
use futures_util::StreamExt;
use serde_json::{Value, json};

#[derive(Parser)]
#[command(name = "sy-load", about = "Load and measurements for Switchyard")]
struct Cli {
    #[command(subcommand)]
    command: Command,
}

#[derive(Subcommand)]
enum Command {
    /// N sessions with their GET SSE streams open at once: memory per stream, streams lost.
    Streams {
        #[arg(long)]
        url: String,
        #[arg(long, default_value_t = 2_000)]
        count: usize,
        #[arg(long, default_value_t = 32)]
        concurrency: usize,
        /// Seconds to hold every stream open before measuring.
        #[arg(long, default_value_t = 20.0)]
        hold: f64,
        /// The gateway's process id (for its resident memory).
        #[arg(long)]
        pid: Option<u32>,
    },
    /// N sessions calling a tool: throughput, latency percentiles, errors.
    Calls {
        /// An MCP endpoint: a tenant of the gateway, or an upstream itself.
        #[arg(long)]
        url: String,
        #[arg(long, default_value_t = 16)]
        sessions: usize,
        /// Measured seconds (after the warm-up).
        #[arg(long, default_value_t = 10.0)]
        seconds: f64,
        #[arg(long, default_value_t = 2.0)]
        warmup: f64,
        /// Total calls per second over all sessions; 0: as fast as answers come.
        #[arg(long, default_value_t = 0.0)]
        rate: f64,
        #[arg(long, default_value = "echo")]
        tool: String,
        #[arg(long, default_value = r#"{"message":"hello"}"#)]
        arguments: String,
        /// Send a progress token (the demo's `sleep` then answers over SSE with progress).
        #[arg(long)]
        progress: bool,
        /// List every tool (all pages) instead of calling one.
        #[arg(long)]
        list: bool,
        /// Send the calls N at a time as one JSON-RPC batch (sessions on 2025-03-26); the
        /// latency is then a whole batch's.
        #[arg(long, default_value_t = 1)]
        batch: usize,
        /// NAME=PID: report this process's CPU time per call over the measured window
        /// (repeatable), e.g. gateway=1234.
        #[arg(long = "cpu")]
        cpu: Vec<String>,
        /// A file holding an access token: every request carries it as
        /// `Authorization: Bearer` (a tenant with `auth`).
        #[arg(long)]
        bearer_file: Option<std::path::PathBuf>,
        /// Give every session a client (and so a connection) of its own, as separate hosts
        /// have, instead of one pool of connections all sessions' calls take turns on.
        #[arg(long)]
        connection_per_session: bool,
    },
    /// N connections that never finish a request head: when the gateway closes them.
    Slowloris {
        /// The gateway's MCP listener, e.g. 127.0.0.1:8080.
        #[arg(long)]
        addr: std::net::SocketAddr,
        #[arg(long, default_value_t = 1_000)]
        count: usize,
        /// Seconds to wait for the gateway to close them.
        #[arg(long, default_value_t = 30.0)]
        hold: f64,
        /// URLs probed (GET, status) while the connections are held.
        #[arg(long = "probe")]
        probes: Vec<String>,
    },
    /// N clients sending most of a large body, then stalling: answers, gateway memory.
    SlowBodies {
        #[arg(long)]
        addr: std::net::SocketAddr,
        #[arg(long, default_value = "/t/demo/mcp")]
        path: String,
        #[arg(long, default_value_t = 300)]
        count: usize,
        /// Announced Content-Length.
        #[arg(long, default_value_t = 1_000_000)]
        length: usize,
        /// Bytes actually sent before stalling.
        #[arg(long, default_value_t = 900_000)]
        sent: usize,
        /// Seconds to wait for an answer after the body stalls.
        #[arg(long, default_value_t = 30.0)]
        hold: f64,
        /// The gateway's process id (for its resident memory).
        #[arg(long)]
        pid: Option<u32>,
    },
    /// N idle connections opened as fast as possible: refusals, probes, recovery.
    ConnectionFlood {
        #[arg(long)]
        addr: std::net::SocketAddr,
        #[arg(long, default_value_t = 20_000)]
        count: usize,
        /// Seconds the connections are held after they were all opened.
        #[arg(long, default_value_t = 5.0)]
        hold: f64,
        #[arg(long = "probe")]
        probes: Vec<String>,
        /// The gateway's admin `/metrics` URL: its connection metrics during the flood.
        #[arg(long)]
        metrics: Option<String>,
        /// The gateway's process id (for its resident memory).
        #[arg(long)]
        pid: Option<u32>,
    },
    /// One call flooded with N notifications, read by a client that falls behind.
    NotificationFlood {
        /// A tenant endpoint in front of `switchyard-demo-server --hostile-tools`.
        #[arg(long)]
        url: String,
        #[arg(long, default_value_t = 100_000)]
        count: u64,
        /// Seconds the client reads nothing after the first event.
        #[arg(long, default_value_t = 5.0)]
        pause: f64,
        /// Bytes per second the client reads at after the pause (0: as fast as it can).
        #[arg(long, default_value_t = 1_000_000)]
        read_rate: u64,
        /// After the pause, read on through a new connection with Last-Event-ID.
        #[arg(long)]
        resume: bool,
        /// The gateway's process id (for its resident memory and CPU time).
        #[arg(long)]
        pid: Option<u32>,
        /// The gateway's Prometheus endpoint (for the notifications it dropped).
        #[arg(long)]
        metrics: Option<String>,
        /// Give up after this many seconds.
        #[arg(long, default_value_t = 300.0)]
        timeout: f64,
    },
    /// Open N idle sessions and measure memory per session.
    Sessions {
        /// The tenant endpoint, e.g. http://127.0.0.1:8080/t/demo/mcp
        #[arg(long)]
        url: String,
        #[arg(long, default_value_t = 10_000)]
        count: usize,
        /// Sessions opened before the baseline (default: the concurrency).
        #[arg(long)]
        warmup: Option<usize>,
        /// Concurrent clients while opening sessions.
        #[arg(long, default_value_t = 32)]
        concurrency: usize,
        /// The gateway's process id (for its resident memory).
        #[arg(long)]
        pid: Option<u32>,
        /// The gateway's Redis (redis://127.0.0.1:P), to measure what sessions cost there.
        #[arg(long)]
        redis: Option<String>,
        /// The gateway's key prefix in that Redis.
        #[arg(long, default_value = "sy")]
        prefix: String,
    },
}

#[tokio::main]
async fn main() -> std::process::ExitCode {
    let _ = rustls::crypto::ring::default_provider().install_default();
    let cli = Cli::parse();
    let result = match cli.command {
        Command::Streams {
            url,
            count,
            concurrency,
            hold,
            pid,
        } => {
            streams::run(streams::Plan {
                url,
                count,
                concurrency: concurrency.max(1),
                hold: Duration::from_secs_f64(hold.max(0.0)),
                pid,
            })
            .await
        }
        Command::Calls {
            url,
            sessions,
            seconds,
            warmup,
            rate,
            tool,
            arguments,
            progress,
            list,
            batch,
            cpu,
            bearer_file,
            connection_per_session,
        } => match (
            serde_json::from_str(&arguments),
            parse_pids(&cpu),
            read_bearer(bearer_file.as_deref()),
        ) {
            (Err(e), _, _) => Err(format!("--arguments is not JSON: {e}")),
            (_, Err(e), _) | (_, _, Err(e)) => Err(e),
            (Ok(arguments), Ok(cpu_pids), Ok(bearer)) => {
                calls::run(calls::Plan {
                    url,
                    sessions: sessions.max(1),
                    duration: Duration::from_secs_f64(seconds.max(0.1)),
                    warmup: Duration::from_secs_f64(warmup.max(0.0)),
                    rate: rate.max(0.0),
                    tool,
                    arguments,
                    progress,
                    list,
                    batch: batch.max(1),
                    cpu_pids,
                    bearer,
                    connection_per_session,
                })
                .await
            }
        },
        Command::Sessions {
            url,
            count,
            warmup,
            concurrency,
            pid,
            redis,
            prefix,
        } => {
            let opening = Opening {
                count,
                warmup: warmup.unwrap_or(concurrency),
                concurrency: concurrency.max(1),
            };
            sessions(&url, opening, pid, redis.as_deref(), &prefix).await
        }
        Command::Slowloris {
            addr,
            count,
            hold,
            probes,
        } => attack::slowloris(addr, count, secs(hold), &probes).await,
        Command::SlowBodies {
            addr,
            path,
            count,
            length,
            sent,
            hold,
            pid,
        } => attack::slow_bodies(addr, &path, count, length, sent, secs(hold), pid).await,
        Command::ConnectionFlood {
            addr,
            count,
            hold,
            probes,
            metrics,
            pid,
        } => attack::flood(addr, count, secs(hold), &probes, metrics.as_deref(), pid).await,
        Command::NotificationFlood {
            url,
            count,
            pause,
            read_rate,
            resume,
            pid,
            metrics,
            timeout,
        } => {
            flood::run(flood::Plan {
                url,
                count,
                pause: Duration::from_secs_f64(pause.max(0.0)),
                read_rate,
                resume,
                pid,
                metrics,
                timeout: Duration::from_secs_f64(timeout.max(1.0)),
            })
            .await
        }
    };
    match result {
        Ok(report) => {
            println!("{report}");
            std::process::ExitCode::SUCCESS
        }
        Err(e) => {
            eprintln!("sy-load: {e}");
            std::process::ExitCode::FAILURE
        }
    }
}

fn secs(s: f64) -> Duration {
    Duration::from_secs_f64(s.max(0.0))
}

/// `NAME=PID` pairs.
fn parse_pids(specs: &[String]) -> Result<Vec<(String, u32)>, String> {
    specs
        .iter()
        .map(|s| {
            let (name, pid) = s
                .split_once('=')
                .ok_or(format!("--cpu {s}: expected NAME=PID"))?;
            let pid = pid
                .parse()
                .map_err(|_| format!("--cpu {s}: not a process id"))?;
            Ok((name.to_owned(), pid))
        })
        .collect()
}

/// Resident set size of a process, in bytes.
fn rss_bytes(pid: u32) -> Result<u64, String> {
    let status = std::fs::read_to_string(format!("/proc/{pid}/status"))
        .map_err(|e| format!("cannot read /proc/{pid}/status: {e}"))?;
    let line = status
        .lines()
        .find(|l| l.starts_with("VmRSS:"))
        .ok_or("no VmRSS line")?;
    let kb: u64 = line
        .split_whitespace()
        .nth(1)
        .and_then(|v| v.parse().ok())
        .ok_or("unreadable VmRSS")?;
    Ok(kb * 1024)
}

/// The proportional set size (shared pages split among their users) of `pid`'s child
/// processes, summed, and how many there are. A child that exits while being read is skipped.
fn children_pss_bytes(pid: u32) -> (u64, usize) {
    let mut children = Vec::new();
    if let Ok(tasks) = std::fs::read_dir(format!("/proc/{pid}/task")) {
        for task in tasks.flatten() {
            if let Ok(list) = std::fs::read_to_string(task.path().join("children")) {
                children.extend(
                    list.split_whitespace()
                        .filter_map(|c| c.parse::<u32>().ok()),
                );
            }
        }
    }
    let pss = children
        .iter()
        .filter_map(|c| std::fs::read_to_string(format!("/proc/{c}/smaps_rollup")).ok())
        .filter_map(|rollup| {
            let line = rollup.lines().find(|l| l.starts_with("Pss:"))?;
            line.split_whitespace().nth(1)?.parse::<u64>().ok()
        })
        .sum::<u64>();
    (pss * 1024, children.len())
}

struct RedisProbe {
    conn: redis::aio::MultiplexedConnection,
    pattern: String,
}

impl RedisProbe {
    async fn connect(url: &str, prefix: &str) -> Result<RedisProbe, String> {
        let client = redis::Client::open(url).map_err(|e| format!("redis URL: {e}"))?;
        let conn = client
            .get_multiplexed_async_connection()
            .await
            .map_err(|e| format!("redis: {e}"))?;
        Ok(RedisProbe {
            conn,
            pattern: format!("{prefix}:*"),
        })
    }

    /// `used_memory` from INFO memory.
    async fn used_memory(&mut self) -> Result<u64, String> {
        let info: String = redis::cmd("INFO")
            .arg("memory")
            .query_async(&mut self.conn)
            .await
            .map_err(|e| format!("INFO: {e}"))?;
        info.lines()
            .find_map(|l| l.strip_prefix("used_memory:"))
            .and_then(|v| v.trim().parse().ok())
            .ok_or_else(|| "no used_memory in INFO".to_owned())
    }

    /// Keys under the prefix, and the sum of their MEMORY USAGE (bytes Redis attributes to
    /// each key, value and overhead included).
    async fn keys(&mut self) -> Result<(u64, u64), String> {
        let mut cursor: u64 = 0;
        let (mut n, mut bytes) = (0u64, 0u64);
        loop {
            let (next, batch): (u64, Vec<String>) = redis::cmd("SCAN")
                .arg(cursor)
                .arg("MATCH")
                .arg(&self.pattern)
                .arg("COUNT")
                .arg(1000)
                .query_async(&mut self.conn)
                .await
                .map_err(|e| format!("SCAN: {e}"))?;
            for key in batch {
                let usage: Option<u64> = redis::cmd("MEMORY")
                    .arg("USAGE")
                    .arg(&key)
                    .arg("SAMPLES")
                    .arg(0)
                    .query_async(&mut self.conn)
                    .await
                    .map_err(|e| format!("MEMORY USAGE: {e}"))?;
                n += 1;
                bytes += usage.unwrap_or(0);
            }
            if next == 0 {
                return Ok((n, bytes));
            }
            cursor = next;
        }
    }
}

/// The token of `--bearer-file` (surrounding blanks trimmed), if one was named.
fn read_bearer(path: Option<&std::path::Path>) -> Result<Option<String>, String> {
    let Some(path) = path else { return Ok(None) };
    let text = std::fs::read_to_string(path)
        .map_err(|e| format!("--bearer-file {}: {e}", path.display()))?;
    match text.trim() {
        "" => Err(format!("--bearer-file {}: empty", path.display())),
        token => Ok(Some(token.to_owned())),
    }
}

async fn open_session(http: &reqwest::Client, url: &str) -> Result<String, String> {
    open_session_on(http, url, "2025-11-25").await
}

/// A session of protocol version `version` (2025-03-26 for JSON-RPC batches).
async fn open_session_on(
    http: &reqwest::Client,
    url: &str,
    version: &str,
) -> Result<String, String> {
    let init = json!({"jsonrpc": "2.0", "id": 1, "method": "initialize", "params": {
        "protocolVersion": version,
        "capabilities": {"sampling": {}, "roots": {"listChanged": true}},
        "clientInfo": {"name": "sy-load", "version": env!("CARGO_PKG_VERSION")}}});
    let resp = http
        .post(url)
        .header("content-type", "application/json")
        .header("accept", "application/json, text/event-stream")
        .body(init.to_string())
        .send()
        .await
        .map_err(|e| format!("initialize: {e}"))?;
    if !resp.status().is_success() {
        return Err(format!("initialize: HTTP {}", resp.status()));
    }
    let id = resp
        .headers()
        .get("mcp-session-id")
        .and_then(|v| v.to_str().ok())
        .ok_or("initialize: no Mcp-Session-Id")?
        .to_owned();
    let _ = resp.bytes().await;
    let resp = http
        .post(url)
        .header("content-type", "application/json")
        .header("accept", "application/json, text/event-stream")
        .header("mcp-session-id", &id)
        .header("mcp-protocol-version", version)
        .body(r#"{"jsonrpc":"2.0","method":"notifications/initialized"}"#)
        .send()
        .await
        .map_err(|e| format!("initialized: {e}"))?;
    if resp.status().as_u16() != 202 {
        return Err(format!("initialized: HTTP {}", resp.status()));
    }
    Ok(id)
}

/// How many sessions `sy-load sessions` opens, and how.
struct Opening {
    /// Measured: opened after the warm-up.
    count: usize,
    /// Opened before the baseline.
    warmup: usize,
    concurrency: usize,
}

/// Opens `n` sessions, `concurrency` at a time; an error names how many failed and the first.
async fn open_sessions(
    http: &reqwest::Client,
    url: &str,
    n: usize,
    concurrency: usize,
) -> Result<(), String> {
    let failures = Arc::new(AtomicUsize::new(0));
    let first_error = Arc::new(std::sync::Mutex::new(None::<String>));
    futures_util::stream::iter(0..n)
        .for_each_concurrent(concurrency, |_| {
            let (failures, first_error) = (failures.clone(), first_error.clone());
            async move {
                if let Err(e) = open_session(http, url).await {
                    failures.fetch_add(1, Ordering::Relaxed);
                    if let Ok(mut f) = first_error.lock() {
                        f.get_or_insert(e);
                    }
                }
            }
        })
        .await;
    match failures.load(Ordering::Relaxed) {
        0 => Ok(()),
        failed => {
            let e = first_error.lock().ok().and_then(|f| f.clone());
            Err(format!("{failed} of {n} sessions failed; first: {e:?}"))
        }
    }
}

async fn sessions(
    url: &str,
    opening: Opening,
    pid: Option<u32>,
    redis: Option<&str>,
    prefix: &str,
) -> Result<Value, String> {
    let Opening {
        count,
        warmup,
        concurrency,
    } = opening;
    let http = reqwest::Client::builder()
        .timeout(Duration::from_secs(30))
        .pool_max_idle_per_host(concurrency)
        .build()
        .map_err(|e| e.to_string())?;
    // Warm up (connections, allocator pages, lazily built state) before the baseline.
    open_sessions(&http, url, warmup, concurrency)
        .await
        .map_err(|e| format!("warm-up: {e}"))?;
    tokio::time::sleep(Duration::from_millis(500)).await;
    let rss_before = pid.map(rss_bytes).transpose()?;
    let children_before = pid.map(children_pss_bytes);
    let mut probe = match redis {
        Some(r) => Some(RedisProbe::connect(r, prefix).await?),
        None => None,
    };
    let redis_before = match probe.as_mut() {
        Some(p) => Some((p.used_memory().await?, p.keys().await?)),
        None => None,
    };

    let started = Instant::now();
    open_sessions(&http, url, count, concurrency).await?;
    let elapsed = started.elapsed();
    tokio::time::sleep(Duration::from_millis(500)).await;

    let mut report = json!({
        "scenario": "idle sessions",
        "sessions": count,
        "opened_before": warmup,
        "concurrency": concurrency,
        "seconds": elapsed.as_secs_f64(),
        "sessions_per_second": count as f64 / elapsed.as_secs_f64(),
    });
    if let (Some(pid), Some(before)) = (pid, rss_before) {
        let after = rss_bytes(pid)?;
        report["gateway_rss_before_bytes"] = json!(before);
        report["gateway_rss_after_bytes"] = json!(after);
        report["gateway_bytes_per_session"] =
            json!(after.saturating_sub(before) as f64 / count as f64);
    }
    if let (Some(pid), Some((before, n_before))) = (pid, children_before) {
        let (after, n_after) = children_pss_bytes(pid);
        report["child_processes_added"] = json!(n_after.saturating_sub(n_before));
        report["child_pss_bytes_per_session"] =
            json!(after.saturating_sub(before) as f64 / count as f64);
    }
    if let (Some(p), Some((mem_before, (keys_before, usage_before)))) =
        (probe.as_mut(), redis_before)
    {
        let mem_after = p.used_memory().await?;
        let (keys_after, usage_after) = p.keys().await?;
        report["redis_used_memory_per_session_bytes"] =
            json!(mem_after.saturating_sub(mem_before) as f64 / count as f64);
        report["redis_keys_per_session"] =
            json!(keys_after.saturating_sub(keys_before) as f64 / count as f64);
        report["redis_key_bytes_per_session"] =
            json!(usage_after.saturating_sub(usage_before) as f64 / count as f64);
    }
    Ok(report)
}
