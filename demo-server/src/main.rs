//! Command line of `switchyard-demo-server`: the demo MCP server (an upstream for the README
//! demo, the tests, the conformance runs and the load tests) over stdio or Streamable HTTP.

use std::path::PathBuf;
use std::process::ExitCode;

use clap::{Parser, ValueEnum};
use switchyard::app::shutdown_signal;
use switchyard::telemetry;
use switchyard_demo_server::{DemoOptions, serve_http, serve_stdio};
use tokio::net::TcpListener;

/// The allocator of the gateway too: the load tests measure the gateway against this server.
#[global_allocator]
static GLOBAL: mimalloc::MiMalloc = mimalloc::MiMalloc;

/// Run the demo MCP server (an upstream for demos and tests).
#[derive(Parser)]
#[command(name = "switchyard-demo-server", version)]
struct Cli {
    /// Log format on stderr.
    #[arg(long, value_enum, default_value_t = LogFormat::Text)]
    log_format: LogFormat,
    /// Speak newline-delimited JSON-RPC on stdin/stdout.
    #[arg(long, conflicts_with = "http")]
    stdio: bool,
    /// Serve Streamable HTTP at /mcp on this address (e.g. 127.0.0.1:3901; port 0 picks a
    /// free one). The endpoint's URL is printed on stdout once it listens.
    #[arg(long)]
    http: Option<String>,
    /// serverInfo.name
    #[arg(long, default_value = "switchyard-demo")]
    name: String,
    /// Also expose the test-only tools (crash, stderr, pid).
    #[arg(long)]
    test_tools: bool,
    /// Also expose tools that misbehave on purpose (flood, ask), for tests.
    #[arg(long)]
    hostile_tools: bool,
    /// Test only: ignore SIGTERM and stdin EOF (only SIGKILL stops it).
    #[arg(long, requires = "stdio")]
    stubborn: bool,
    /// Serve the conformance-suite fixture catalog instead of the demo one.
    #[arg(long)]
    conformance: bool,
    /// Also speak 2026-07-28 (stateless: server/discover, no handshake needed).
    #[arg(long)]
    stateless: bool,
    /// Offer the 2025-11-25 tasks utility (`sleep` runs as a task when asked).
    #[arg(long)]
    tasks: bool,
    /// Append every received message to this file (one JSON per line).
    #[arg(long)]
    trace: Option<PathBuf>,
    /// Also list this many generated tools (`bulk-0001`, …, answering like echo).
    #[arg(long, default_value_t = 0)]
    extra_tools: usize,
}

#[derive(Clone, Copy, ValueEnum)]
enum LogFormat {
    Text,
    Json,
}

fn main() -> ExitCode {
    let cli = Cli::parse();
    telemetry::init_logs(match cli.log_format {
        LogFormat::Text => telemetry::LogFormat::Text,
        LogFormat::Json => telemetry::LogFormat::Json,
    });
    let runtime = match tokio::runtime::Builder::new_multi_thread()
        .enable_all()
        .build()
    {
        Ok(rt) => rt,
        Err(e) => {
            tracing::error!(error = %e, "cannot start the async runtime");
            return ExitCode::FAILURE;
        }
    };
    let opts = DemoOptions {
        name: cli.name,
        test_tools: cli.test_tools,
        hostile_tools: cli.hostile_tools,
        stubborn: cli.stubborn,
        conformance: cli.conformance,
        trace_file: cli.trace,
        extra_tools: cli.extra_tools,
        stateless: cli.stateless,
        tasks: cli.tasks,
    };
    let result = match (cli.stdio, cli.http) {
        (true, _) => runtime.block_on(serve_stdio(opts)),
        (false, Some(addr)) => runtime.block_on(http(&addr, opts)),
        (false, None) => {
            tracing::error!("choose --stdio or --http ADDR");
            return ExitCode::from(2);
        }
    };
    match result {
        Ok(()) => ExitCode::SUCCESS,
        Err(e) => {
            tracing::error!(error = %e, "demo server failed");
            ExitCode::FAILURE
        }
    }
}

/// Binds `addr`, prints the endpoint's URL (what `switchyard demo` reads to learn the port
/// when it asks for port 0), and serves until SIGINT or SIGTERM.
async fn http(addr: &str, opts: DemoOptions) -> std::io::Result<()> {
    let listener = TcpListener::bind(addr).await?;
    let url = format!("http://{}/mcp", listener.local_addr()?);
    print_line(&url)?;
    tracing::info!(url = %url, "demo server ready");
    serve_http(listener, opts, shutdown_signal()).await
}

/// One line on stdout, flushed at once (stdout is a pipe when a parent reads it).
fn print_line(text: &str) -> std::io::Result<()> {
    use std::io::Write as _;
    let mut out = std::io::stdout().lock();
    writeln!(out, "{text}")?;
    out.flush()
}
