//! Command line: `run` the gateway, `check` a config, `migrate` the Redis keyspace, `probe` a
//! health endpoint, or run the `demo` (with the `switchyard-demo-server` binary beside this
//! one). Parses arguments, sets up logs and traces, and hands built values to the library.

use std::path::{Path, PathBuf};
use std::process::ExitCode;

use clap::{Parser, Subcommand, ValueEnum};
use switchyard::config::{self, Config};
use switchyard::reload::{self, ConfigSource};
use switchyard::telemetry;
use tokio::net::TcpListener;

/// mimalloc: per-thread free lists instead of glibc's arenas. Measured with
/// `loadtest/compare.sh` (README, Performance): malloc and free were the largest user-space
/// cost of a forwarded call. Called by alignment (`switchyard-alloc` says why).
#[global_allocator]
static GLOBAL: switchyard_alloc::MiMalloc = switchyard_alloc::MiMalloc;

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
    /// Print the JSON Schema of the routing config (for editors: `# yaml-language-server:
    /// $schema=...`); the repository publishes it as config/switchyard.schema.json.
    Schema,
    /// Probe a health endpoint (container health checks): exit 0 on a 2xx answer within 3s.
    Probe {
        #[arg(long, default_value = "http://127.0.0.1:8080/healthz")]
        url: String,
    },
    /// Run the demo: the demo upstream (`switchyard-demo-server`, next to this executable)
    /// over HTTP, and the gateway on config/demo.yaml (which also runs it as a stdio child).
    Demo {
        #[arg(long, default_value = "config/demo.yaml")]
        config: PathBuf,
        #[arg(long)]
        listen: Option<String>,
        /// As for `run`.
        #[arg(long, default_value_t = 5.0)]
        reload_poll: f64,
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
        } => gateway_main(format, ConfigSource::file(&config), listen, reload_poll),
        Command::Demo {
            config,
            listen,
            reload_poll,
        } => demo_main(format, &config, listen, reload_poll),
        Command::Schema => print_schema(),
        other => {
            telemetry::init_logs(format);
            let Some(runtime) = runtime() else {
                return ExitCode::FAILURE;
            };
            runtime.block_on(tool(other))
        }
    }
}

#[allow(clippy::print_stdout)]
fn print_schema() -> ExitCode {
    print!("{}", config::schema::config_schema());
    ExitCode::SUCCESS
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
        Command::Run { .. } | Command::Demo { .. } | Command::Schema => ExitCode::FAILURE,
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
/// says, and serves it, reloading it when the file changes.
fn gateway_main(
    format: telemetry::LogFormat,
    mut source: ConfigSource,
    listen: Option<String>,
    reload_poll: f64,
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
        Some(rt) => rt.block_on(serve(config, digest, source, poll)),
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
    let shutdown = switchyard::app::shutdown_signal();
    match switchyard::app::serve(listener, gateway, config.tls.clone(), shutdown).await {
        Ok(()) => ExitCode::SUCCESS,
        Err(e) => {
            tracing::error!(error = %e, "server error");
            ExitCode::FAILURE
        }
    }
}

/// The demo: the demo upstream over HTTP as a child process, then the gateway on the demo
/// config. The config names the upstream's URL and the demo server's executable through
/// `${DEMO_HTTP_URL}` and `${SWITCHYARD_DEMO_SERVER}`, set here.
fn demo_main(
    format: telemetry::LogFormat,
    path: &Path,
    listen: Option<String>,
    reload_poll: f64,
) -> ExitCode {
    let exe = match demo_server_exe() {
        Ok(exe) => exe,
        Err(e) => {
            eprint_lines(&e);
            return ExitCode::FAILURE;
        }
    };
    let upstream = match DemoUpstream::start(&exe, format) {
        Ok(u) => u,
        Err(e) => {
            eprint_lines(&format!(
                "cannot start the demo upstream {}: {e}",
                exe.display()
            ));
            return ExitCode::FAILURE;
        }
    };
    // The two values reach the loader through its variable lookup (no process-wide set_var).
    let demo_url = upstream.url.clone();
    let exe_text = exe.display().to_string();
    let source = ConfigSource::with_lookup(
        path,
        std::sync::Arc::new(move |name: &str| match name {
            "DEMO_HTTP_URL" => Some(demo_url.clone()),
            "SWITCHYARD_DEMO_SERVER" => Some(exe_text.clone()),
            other => std::env::var(other).ok(),
        }),
    );
    let code = gateway_main(format, source, listen, reload_poll);
    drop(upstream);
    code
}

/// The demo server's binary: `switchyard-demo-server` in this executable's directory (where
/// cargo puts both), or a one-line error saying how to build it.
fn demo_server_exe() -> Result<PathBuf, String> {
    let exe = std::env::current_exe()
        .map_err(|e| format!("cannot locate this executable: {e}"))?
        .with_file_name("switchyard-demo-server");
    if exe.is_file() {
        Ok(exe)
    } else {
        Err(format!(
            "the demo runs {}, which is not built: run `cargo build --release` at the repository \
             root (`cargo build` for a debug gateway)",
            exe.display()
        ))
    }
}

/// The demo upstream over HTTP: a `switchyard-demo-server` child on a free loopback port,
/// killed when this is dropped.
struct DemoUpstream {
    child: std::process::Child,
    /// Its endpoint, as it printed it once listening.
    url: String,
}

impl DemoUpstream {
    fn start(exe: &Path, format: telemetry::LogFormat) -> std::io::Result<DemoUpstream> {
        use std::io::BufRead as _;
        let format = match format {
            telemetry::LogFormat::Text => "text",
            telemetry::LogFormat::Json => "json",
        };
        let mut child = std::process::Command::new(exe)
            .args(["--log-format", format, "--http", "127.0.0.1:0"])
            .args(["--name", "switchyard-demo-http"])
            .stdin(std::process::Stdio::null())
            .stdout(std::process::Stdio::piped())
            .spawn()?;
        // It prints its URL once listening, or exits (its log on our stderr says why).
        let mut url = String::new();
        if let Some(stdout) = child.stdout.take() {
            std::io::BufReader::new(stdout).read_line(&mut url)?;
        }
        let url = url.trim().to_owned();
        let upstream = DemoUpstream { child, url };
        if upstream.url.starts_with("http://") {
            Ok(upstream)
        } else {
            Err(std::io::Error::other("it exited without serving"))
        }
    }
}

impl Drop for DemoUpstream {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}
