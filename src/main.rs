//! Command line: `run` the gateway, `check` a config, `migrate` the Redis keyspace, `probe` a
//! health endpoint, run the `demo`, or run the bundled `demo-server` upstream. Parses
//! arguments, sets up logging, and hands built values to the library.

use std::path::{Path, PathBuf};
use std::process::ExitCode;

use clap::{Parser, Subcommand, ValueEnum};
use switchyard::config::{self, Config};
use switchyard::demo::{self, DemoOptions};
use tokio::net::TcpListener;

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
        /// Test only: ignore SIGTERM and stdin EOF (only SIGKILL stops it).
        #[arg(long, requires = "stdio")]
        stubborn: bool,
        /// Serve the conformance-suite fixture catalog instead of the demo one.
        #[arg(long)]
        conformance: bool,
        /// Append every received message to this file (one JSON per line).
        #[arg(long)]
        trace: Option<PathBuf>,
    },
}

fn main() -> ExitCode {
    let cli = Cli::parse();
    init_logging(cli.log_format);
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
    runtime.block_on(async move {
        match cli.command {
            Command::Run { config, listen } => run(&config, listen).await,
            Command::Check { config } => check(&config),
            Command::Migrate { config } => migrate(&config).await,
            Command::Probe { url } => probe(&url).await,
            Command::Demo { config, listen } => run_demo(&config, listen).await,
            Command::DemoServer {
                stdio,
                http,
                name,
                test_tools,
                stubborn,
                conformance,
                trace,
            } => {
                let opts = DemoOptions {
                    name,
                    test_tools,
                    stubborn,
                    conformance,
                    trace_file: trace,
                };
                demo_server(stdio, http, opts).await
            }
        }
    })
}

fn init_logging(format: LogFormat) {
    use tracing_subscriber::EnvFilter;
    let filter = EnvFilter::try_from_default_env().unwrap_or_else(|_| EnvFilter::new("info"));
    let builder = tracing_subscriber::fmt()
        .with_env_filter(filter)
        .with_writer(std::io::stderr);
    match format {
        LogFormat::Text => builder.init(),
        LogFormat::Json => builder.json().flatten_event(true).init(),
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
    println!(
        "{}: ok ({} tenant(s), {} upstream(s))",
        path.display(),
        config.tenants.len(),
        upstreams
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

async fn run(path: &Path, listen: Option<String>) -> ExitCode {
    let Some(mut config) = load(path) else {
        return ExitCode::FAILURE;
    };
    if let Some(addr) = listen {
        match addr.parse() {
            Ok(a) => config.listen = a,
            Err(e) => {
                tracing::error!(listen = %addr, error = %e, "invalid --listen address");
                return ExitCode::FAILURE;
            }
        }
    }
    serve(config).await
}

async fn serve(config: Config) -> ExitCode {
    let gateway = match switchyard::app::build(&config).await {
        Ok(g) => g,
        Err(e) => {
            tracing::error!(error = %e, "cannot start the gateway");
            return ExitCode::FAILURE;
        }
    };
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
async fn run_demo(path: &Path, listen: Option<String>) -> ExitCode {
    let upstream = match TcpListener::bind("127.0.0.1:0").await {
        Ok(l) => l,
        Err(e) => {
            tracing::error!(error = %e, "cannot bind the demo upstream");
            return ExitCode::FAILURE;
        }
    };
    let Ok(upstream_addr) = upstream.local_addr() else {
        return ExitCode::FAILURE;
    };
    let exe = match std::env::current_exe() {
        Ok(p) => p,
        Err(e) => {
            tracing::error!(error = %e, "cannot locate this executable");
            return ExitCode::FAILURE;
        }
    };
    // The two values reach the loader through its variable lookup (no process-wide set_var).
    let url = format!("http://{upstream_addr}/mcp");
    let exe_text = exe.display().to_string();
    let text = match std::fs::read_to_string(path) {
        Ok(t) => t,
        Err(e) => {
            tracing::error!(config = %path.display(), error = %e, "cannot read the demo config");
            return ExitCode::FAILURE;
        }
    };
    let lookup = |name: &str| match name {
        "DEMO_HTTP_URL" => Some(url.clone()),
        "SWITCHYARD_EXE" => Some(exe_text.clone()),
        other => std::env::var(other).ok(),
    };
    let mut config = match config::parse(&text, &path.display().to_string(), &lookup) {
        Ok(c) => c,
        Err(errors) => {
            eprint_lines(&errors.to_string());
            return ExitCode::FAILURE;
        }
    };
    if let Some(addr) = listen {
        match addr.parse() {
            Ok(a) => config.listen = a,
            Err(e) => {
                tracing::error!(listen = %addr, error = %e, "invalid --listen address");
                return ExitCode::FAILURE;
            }
        }
    }
    let opts = DemoOptions {
        name: "switchyard-demo-http".into(),
        ..DemoOptions::default()
    };
    let (stop_tx, stop_rx) = tokio::sync::oneshot::channel::<()>();
    let demo = tokio::spawn(demo::serve_http(upstream, opts, async move {
        let _ = stop_rx.await;
    }));
    tracing::info!(url = %url, "demo upstream (HTTP) ready");
    let code = serve(config).await;
    let _ = stop_tx.send(());
    let _ = demo.await;
    code
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
