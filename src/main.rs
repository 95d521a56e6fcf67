//! Command line: `run` the gateway, `check` a config, `migrate` the Redis keyspace, `probe` a
//! health endpoint, run the `demo`, or run the bundled `demo-server` upstream. Parses
//! arguments, sets up logs and traces, and hands built values to the library.

use std::path::{Path, PathBuf};
use std::process::ExitCode;

use clap::{Parser, Subcommand, ValueEnum};
use switchyard::config::{self, Config};
use switchyard::demo::{self, DemoOptions};
use switchyard::reload::{self, ConfigSource};
use switchyard::telemetry;
use tokio::net::TcpListener;

/// mimalloc: per-thread free lists instead of glibc's arenas. Measured with
/// `loadtest/compare.sh` (README, Performance): malloc and free were the largest user-space
/// cost of a forwarded call.
#[global_allocator]
static GLOBAL: mimalloc::MiMalloc = mimalloc::MiMalloc;

#[derive(Parser)]
#[command(name = "switchyard", version, about = "Multi-tenant MCP gateway")]
struct Cli {
    /// Log format on stderr.
    #[arg(long, global = true, value_enum, default_value_t = LogFormat::Text)]
    log_format: LogFormat,
    #[command(subcommand)]
    command: Command,
}

#[derive(Clone, Copy, ValueEnum)]
enum LogFormat {
    Text,
    Json,
}

#[derive(Subcommand)]
enum Command {
    /// Serve the tenants of a routing config.
    Run {
        #[arg(long, short)]
        config: PathBuf,
        /// Overrides `listen` from the config.
        #[arg(long)]
        listen: Option<String>,
        /// How often (seconds) the config file is checked for changes, which are validated and
        /// applied without a restart; 0 turns polling off (SIGHUP still reloads).
        #[arg(long, default_value_t = 5.0)]
        reload_poll: f64,
    },
    /// Validate a routing config and exit (status 1 with every error listed).
    Check {
        #[arg(long, short)]
        config: PathBuf,
    },
    /// Bring the Redis keyspace of a config's session store to this build's layout
    /// (idempotent; records each applied version). Nothing to do for the in-memory store.
    Migrate {
        #[arg(long, short)]
        config: PathBuf,
    },
    /// Probe a health endpoint (container health checks): exit 0 on a 2xx answer within 3s.
    Probe {
        #[arg(long, default_value = "http://127.0.0.1:8080/healthz")]
        url: String,
    },
    /// Run the demo: the bundled demo upstream over HTTP, and the gateway on config/demo.yaml
    /// (which also runs the demo upstream as a stdio child).
    Demo {
        #[arg(long, default_value = "config/demo.yaml")]
        config: PathBuf,
        #[arg(long)]
        listen: Option<String>,
        /// As for `run`.
        #[arg(long, default_value_t = 5.0)]
        reload_poll: f64,
    },
    /// Run the bundled demo MCP server (an upstream for demos and tests).
    DemoServer {
        /// Speak newline-delimited JSON-RPC on stdin/stdout.
        #[arg(long, conflicts_with = "http")]
        stdio: bool,
        /// Serve Streamable HTTP at /mcp on this address (e.g. 127.0.0.1:3901).
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
        /// Append every received message to this file (one JSON per line).
        #[arg(long)]
        trace: Option<PathBuf>,
        /// Also list this many generated tools (`bulk-0001`, …, answering like echo).
        #[arg(long, default_value_t = 0)]
        extra_tools: usize,
    },
}

fn main() -> ExitCode {
    let cli = Cli::parse();
    let format = match cli.log_format {
        LogFormat::Text => telemetry::LogFormat::Text,
        LogFormat::Json => telemetry::LogFormat::Json,
    };
    match cli.command {
        Command::Run {
            config,
            listen,
            reload_poll,
        } => gateway_main(
            format,
            ConfigSource::file(&config),
            listen,
            reload_poll,
            None,
        ),
        Command::Demo {
            config,
            listen,
            reload_poll,
        } => demo_main(format, &config, listen, reload_poll),
        other => {
            telemetry::init_logs(format);
            let Some(runtime) = runtime() else {
                return ExitCode::FAILURE;
            };
            runtime.block_on(tool(other))
        }
    }
}

fn runtime() -> Option<tokio::runtime::Runtime> {
    match tokio::runtime::Builder::new_multi_thread()
        .enable_all()
        .build()
    {
        Ok(rt) => Some(rt),
        Err(e) => {
            tracing::error!(error = %e, "cannot start the async runtime");
            None
        }
    }
}

/// The commands that serve no tenants.
async fn tool(command: Command) -> ExitCode {
    match command {
        Command::Check { config } => check(&config),
        Command::Migrate { config } => migrate(&config).await,
        Command::Probe { url } => probe(&url).await,
        Command::DemoServer {
            stdio,
            http,
            name,
            test_tools,
            hostile_tools,
            stubborn,
            conformance,
            stateless,
            trace,
            extra_tools,
        } => {
            let opts = DemoOptions {
                name,
                test_tools,
                hostile_tools,
                stubborn,
                conformance,
                trace_file: trace,
                extra_tools,
                stateless,
            };
            demo_server(stdio, http, opts).await
        }
        Command::Run { .. } | Command::Demo { .. } => ExitCode::FAILURE,
    }
}

fn load(path: &Path) -> Option<Config> {
    match config::load(path) {
        Ok(c) => Some(c),
        Err(errors) => {
            eprint_lines(&errors.to_string());
            None
        }
    }
}

#[allow(clippy::print_stderr)]
fn eprint_lines(text: &str) {
    eprintln!("{text}");
}

#[allow(clippy::print_stdout)]
fn check(path: &Path) -> ExitCode {
    let Some(config) = load(path) else {
        return ExitCode::FAILURE;
    };
    let upstreams: usize = config.tenants.iter().map(|t| t.upstreams.len()).sum();
    let max_connections = config.limits.connections.max_connections;
    if let Some(warning) = switchyard::listener::fds::check(max_connections, &config.tenants) {
        eprint_lines(&format!("{}: warning: {warning}", path.display()));
    }
    for warning in &config.warnings {
        eprint_lines(&format!("warning: {warning}"));
    }
    let warnings = match config.warnings.len() {
        0 => String::new(),
        n => format!(", {n} warning(s)"),
    };
    println!(
        "{}: ok ({} tenant(s), {} upstream(s){warnings})",
        path.display(),
        config.tenants.len(),
        upstreams,
    );
    ExitCode::SUCCESS
}

#[allow(clippy::print_stdout)]
async fn migrate(path: &Path) -> ExitCode {
    let Some(config) = load(path) else {
        return ExitCode::FAILURE;
    };
    match switchyard::cluster::migrate(&config).await {
        Ok(report) => {
            println!("{report}");
            ExitCode::SUCCESS
        }
        Err(e) => {
            tracing::error!(error = %e, "migration failed");
            ExitCode::FAILURE
        }
    }
}

async fn probe(url: &str) -> ExitCode {
    switchyard::app::install_crypto_provider();
    let client = match reqwest::Client::builder()
        .timeout(std::time::Duration::from_secs(3))
        .build()
    {
        Ok(c) => c,
        Err(e) => {
            tracing::error!(error = %e, "cannot build an HTTP client");
            return ExitCode::FAILURE;
        }
    };
    match client.get(url).send().await {
        Ok(r) if r.status().is_success() => ExitCode::SUCCESS,
        Ok(r) => {
            tracing::error!(status = r.status().as_u16(), "probe failed");
            ExitCode::FAILURE
        }
        Err(e) => {
            tracing::error!(error = %e, "probe failed");
            ExitCode::FAILURE
        }
    }
}

/// Loads the config from `source` (with `--listen` applied), sets up logs and traces as it
/// says, and serves it, reloading it when the file changes. With `demo`, the bundled demo
/// upstream is served over HTTP next to the gateway.
fn gateway_main(
    format: telemetry::LogFormat,
    mut source: ConfigSource,
    listen: Option<String>,
    reload_poll: f64,
    demo: Option<std::net::TcpListener>,
) -> ExitCode {
    if let Some(addr) = listen {
        match addr.parse() {
            Ok(a) => source.override_listen(a),
            Err(e) => {
                eprint_lines(&format!("invalid --listen address {addr}: {e}"));
                return ExitCode::FAILURE;
            }
        }
    }
    let poll = if reload_poll == 0.0 {
        None
    } else if reload_poll.is_finite() && reload_poll > 0.0 {
        Some(std::time::Duration::from_secs_f64(reload_poll))
    } else {
        eprint_lines("--reload-poll must be a number of seconds >= 0");
        return ExitCode::FAILURE;
    };
    let (config, digest) = match source.load() {
        Ok(loaded) => loaded,
        Err(errors) => {
            eprint_lines(&errors.to_string());
            return ExitCode::FAILURE;
        }
    };
    let telemetry = telemetry::init(format, &config.telemetry);
    config::log_warnings(&config);
    let code = match runtime() {
        Some(rt) => rt.block_on(async move {
            let demo = match demo.map(serve_demo_upstream).transpose() {
                Ok(d) => d,
                Err(e) => {
                    tracing::error!(error = %e, "cannot serve the demo upstream");
                    return ExitCode::FAILURE;
                }
            };
            let code = serve(config, digest, source, poll).await;
            if let Some((stop, task)) = demo {
                let _ = stop.send(());
                let _ = task.await;
            }
            code
        }),
        None => ExitCode::FAILURE,
    };
    telemetry.shutdown();
    code
}

async fn serve(
    config: Config,
    digest: reload::Digest,
    source: ConfigSource,
    poll: Option<std::time::Duration>,
) -> ExitCode {
    let gateway = match switchyard::app::build(&config).await {
        Ok(g) => g,
        Err(e) => {
            tracing::error!(error = %e, "cannot start the gateway");
            return ExitCode::FAILURE;
        }
    };
    tokio::spawn(reload::watch(gateway.clone(), source, digest, poll));
    if let Some(addr) = config.admin_listen {
        match TcpListener::bind(addr).await {
            Ok(l) => {
                tokio::spawn(switchyard::app::serve_admin(l, gateway.clone()));
            }
            Err(e) => {
                tracing::error!(listen = %addr, error = %e, "cannot bind the admin listener");
                gateway.shutdown().await;
                return ExitCode::FAILURE;
            }
        }
    }
    let listener = match TcpListener::bind(config.listen).await {
        Ok(l) => l,
        Err(e) => {
            tracing::error!(listen = %config.listen, error = %e, "cannot bind the listener");
            gateway.shutdown().await;
            return ExitCode::FAILURE;
        }
    };
    match switchyard::app::serve(listener, gateway, config.tls.clone(), shutdown_signal()).await {
        Ok(()) => ExitCode::SUCCESS,
        Err(e) => {
            tracing::error!(error = %e, "server error");
            ExitCode::FAILURE
        }
    }
}

/// Resolves on SIGINT or SIGTERM.
async fn shutdown_signal() {
    use tokio::signal::unix::{SignalKind, signal};
    let mut term = match signal(SignalKind::terminate()) {
        Ok(s) => s,
        Err(e) => {
            tracing::error!(error = %e, "cannot listen for SIGTERM");
            let _ = tokio::signal::ctrl_c().await;
            return;
        }
    };
    tokio::select! {
        _ = term.recv() => tracing::info!("SIGTERM received"),
        _ = tokio::signal::ctrl_c() => tracing::info!("SIGINT received"),
    }
}

/// The demo: the demo upstream over HTTP in this process, then the gateway on the demo config.
/// The config names the upstream's URL and this executable through `${DEMO_HTTP_URL}` and
/// `${SWITCHYARD_EXE}`, set here.
fn demo_main(
    format: telemetry::LogFormat,
    path: &Path,
    listen: Option<String>,
    reload_poll: f64,
) -> ExitCode {
    let upstream = match std::net::TcpListener::bind("127.0.0.1:0")
        .and_then(|l| l.set_nonblocking(true).map(|()| l))
    {
        Ok(l) => l,
        Err(e) => {
            eprint_lines(&format!("cannot bind the demo upstream: {e}"));
            return ExitCode::FAILURE;
        }
    };
    let (upstream_addr, exe) = match (upstream.local_addr(), std::env::current_exe()) {
        (Ok(a), Ok(exe)) => (a, exe),
        (Err(e), _) | (_, Err(e)) => {
            eprint_lines(&format!("cannot prepare the demo: {e}"));
            return ExitCode::FAILURE;
        }
    };
    // The two values reach the loader through its variable lookup (no process-wide set_var).
    let demo_url = format!("http://{upstream_addr}/mcp");
    let exe_text = exe.display().to_string();
    let source = ConfigSource::with_lookup(
        path,
        std::sync::Arc::new(move |name: &str| match name {
            "DEMO_HTTP_URL" => Some(demo_url.clone()),
            "SWITCHYARD_EXE" => Some(exe_text.clone()),
            other => std::env::var(other).ok(),
        }),
    );
    gateway_main(format, source, listen, reload_poll, Some(upstream))
}

/// Serves the demo upstream on `listener` until the returned sender fires.
fn serve_demo_upstream(
    listener: std::net::TcpListener,
) -> std::io::Result<(
    tokio::sync::oneshot::Sender<()>,
    tokio::task::JoinHandle<std::io::Result<()>>,
)> {
    let listener = TcpListener::from_std(listener)?;
    let url = format!("http://{}/mcp", listener.local_addr()?);
    let opts = DemoOptions {
        name: "switchyard-demo-http".into(),
        ..DemoOptions::default()
    };
    let (stop_tx, stop_rx) = tokio::sync::oneshot::channel::<()>();
    let task = tokio::spawn(demo::serve_http(listener, opts, async move {
        let _ = stop_rx.await;
    }));
    tracing::info!(url = %url, "demo upstream (HTTP) ready");
    Ok((stop_tx, task))
}

async fn demo_server(stdio: bool, http: Option<String>, opts: DemoOptions) -> ExitCode {
    let result = match (stdio, http) {
        (true, _) => demo::serve_stdio(opts).await,
        (false, Some(addr)) => match TcpListener::bind(&addr).await {
            Ok(listener) => {
                if let Ok(a) = listener.local_addr() {
                    tracing::info!(url = %format!("http://{a}/mcp"), "demo server ready");
                }
                demo::serve_http(listener, opts, shutdown_signal()).await
            }
            Err(e) => Err(e),
        },
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
