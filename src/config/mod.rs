//! Routing configuration: the validated `Config` the gateway runs on, and `load` to build it
//! from a YAML file (raw serde types → validated types, every problem reported with file:line:col).

use std::collections::BTreeMap;
use std::fmt;
use std::net::SocketAddr;
use std::path::{Path, PathBuf};
use std::time::Duration;

mod de;
mod error;
mod limits;
mod loader;
mod net;
mod raw;
mod raw_security;
mod raw_tenant_limits;
mod rules;
mod rules_security;
mod scalar;
pub mod schema;
mod spanned;
mod subst;
mod suggest;
mod tenant_limits;
mod units;
mod validate;
mod validate_auth;
mod validate_http;
mod validate_limits;
mod validate_security;
mod validate_sentinel;
mod validate_tenant_limits;
mod validate_upstream;
mod yaml;

#[cfg(test)]
mod limits_tests;
#[cfg(test)]
mod security_tests;
#[cfg(test)]
mod tests;

pub use error::{ConfigError, ConfigErrors};
pub use limits::{BodyLimits, ConnectionLimits, DRAIN_DEADLINE};
pub use net::Cidr;
pub use rules_security::glob;
pub use tenant_limits::{
    CallLimit, ConcurrencyLimit, Quotas, Rate, Scope, StoreErrorPolicy, TenantLimits,
};
pub use validate_tenant_limits::parse_rate;

/// Reads and validates the config file at `path`, substituting `${VAR}` from the process
/// environment. On failure every problem found is returned, each with `file:line:col`.
pub fn load(path: &Path) -> Result<Config, ConfigErrors> {
    let file = path.display().to_string();
    let text = read(path)?;
    let env = |name: &str| std::env::var(name).ok();
    let mut config = parse(&text, &file, &env)?;
    config.source = Some(path.to_path_buf());
    Ok(config)
}

/// Logs what validation accepted with a warning (at start and on every reload).
pub fn log_warnings(config: &Config) {
    for warning in &config.warnings {
        tracing::warn!(target: "switchyard::config", "{warning}");
    }
}

/// The text of the config file at `path`; a file that cannot be read is one config error.
pub fn read(path: &Path) -> Result<String, ConfigErrors> {
    std::fs::read_to_string(path).map_err(|e| ConfigErrors {
        errors: vec![ConfigError {
            file: path.display().to_string(),
            line: 0,
            col: 0,
            path: String::new(),
            message: format!("cannot read the config file: {e}"),
        }],
    })
}

/// Parses and validates config text. `source_name` is used in messages; `env` looks up
/// variables for `${VAR}` substitution (so tests can be hermetic). `source` is left `None`.
pub fn parse(
    text: &str,
    source_name: &str,
    env: &dyn Fn(&str) -> Option<String>,
) -> Result<Config, ConfigErrors> {
    loader::parse(text, source_name, env, None)
}

/// [`parse`] for a gateway that will listen on `listen` whatever the file says (the `--listen`
/// flag): rules that depend on the listener are checked against this address.
pub fn parse_listening_on(
    text: &str,
    source_name: &str,
    env: &dyn Fn(&str) -> Option<String>,
    listen: SocketAddr,
) -> Result<Config, ConfigErrors> {
    loader::parse(text, source_name, env, Some(listen))
}

/// The whole validated configuration. Built only by [`load`] / [`parse`]; every field has already
/// been checked, so the rest of the gateway never re-validates.
#[derive(Debug, Clone, PartialEq)]
pub struct Config {
    /// Where the config came from (for messages); `None` for in-memory sources.
    pub source: Option<PathBuf>,
    /// Address the MCP listener binds (default `127.0.0.1:8080`).
    pub listen: SocketAddr,
    /// Address of the admin listener (`/metrics`, `/healthz`, `/readyz`); none when unset.
    pub admin_listen: Option<SocketAddr>,
    /// The bearer token the admin listener's status page and API require (`/admin/...`);
    /// none: they are open to whoever reaches the admin listener. Metrics and probes stay
    /// open either way.
    pub admin_token: Option<AdminToken>,
    /// HTTPS on the listener when set; plain HTTP otherwise (local dev, behind an ingress).
    pub tls: Option<TlsConfig>,
    pub limits: Limits,
    pub sessions: SessionConfig,
    pub telemetry: TelemetryConfig,
    /// Proxies whose `Forwarded` / `X-Forwarded-For` name the client (default: none, the
    /// headers are ignored): the client address is what per-user limits count on tenants
    /// without `auth`.
    pub trusted_proxies: Vec<Cidr>,
    /// How client connections are served (default `per-core`; `workers`).
    pub connection_workers: ConnectionWorkers,
    /// At least one tenant; names and paths unique.
    pub tenants: Vec<TenantConfig>,
    /// What validation accepted but most likely is not what was meant (`check` prints them,
    /// `run` and reloads log them).
    pub warnings: Vec<ConfigError>,
}

/// How the MCP listener's client connections are served.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum ConnectionWorkers {
    /// One single-threaded runtime per core (`TOKIO_WORKER_THREADS` of them when set), each
    /// connection served on one of them, round robin (`workers::Workers`).
    #[default]
    PerCore,
    /// Every connection on the process's multi-threaded runtime, its tasks moving between
    /// threads as they wake.
    Shared,
}

/// OpenTelemetry traces. The standard `OTEL_*` environment variables apply on top (and can
/// turn tracing on without this section); see `telemetry::Settings`.
#[derive(Debug, Clone, PartialEq, Default)]
pub struct TelemetryConfig {
    /// OTLP/HTTP collector base URL (`/v1/traces` is appended); `None`: no export.
    pub otlp_endpoint: Option<String>,
    /// `service.name` of the exported spans.
    pub service_name: Option<String>,
    /// Share of new traces recorded (parent-based: a client's sampled flag is followed).
    pub sample_ratio: Option<f64>,
}

/// TLS termination with rustls. The files are watched and reloaded when they change.
#[derive(Debug, Clone, PartialEq)]
pub struct TlsConfig {
    /// PEM certificate chain (leaf first).
    pub cert: PathBuf,
    /// PEM private key (PKCS#8, PKCS#1 or SEC1).
    pub key: PathBuf,
    /// How often the files are checked for changes (default 10s).
    pub reload_interval: Duration,
}

/// Bounds on client and upstream input, and on client connections (`limits.rs`).
#[derive(Debug, Clone, PartialEq)]
pub struct Limits {
    /// Largest accepted client POST body (default 4 MiB). Larger → 413.
    pub max_body_bytes: usize,
    /// Largest single message accepted from an upstream (stdio line or SSE event, default 16 MiB).
    pub max_upstream_message_bytes: usize,
    /// Request bodies: read deadline, minimum rate, process-wide budget.
    pub bodies: BodyLimits,
    /// Client connections: timeouts, caps, header and HTTP/2 bounds.
    pub connections: ConnectionLimits,
    /// Per-session stdio processes of the whole process, every tenant together (default
    /// 256). Beyond: `initialize` of a session needing one gets 429.
    pub max_session_processes: usize,
}

/// Client session settings.
#[derive(Debug, Clone, PartialEq)]
pub struct SessionConfig {
    /// Idle time after which a session expires (sliding; default 30 minutes).
    pub ttl: Duration,
    pub store: StoreConfig,
    /// What one session may hold on a replica.
    pub bounds: SessionBounds,
}

/// Per-session bounds on what clients and upstreams can make a session hold (config
/// `sessions.max_server_requests`, `sessions.server_request_timeout`,
/// `sessions.max_get_streams`).
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct SessionBounds {
    /// Upstream requests to the client (sampling, elicitation, roots, ping) waiting for its
    /// answer at once (default 64); beyond it the upstream gets an error at once.
    pub max_server_requests: usize,
    /// How long such a request waits for the client's answer (default 60s); then the upstream
    /// gets an error (`-32001`) and a late answer is dropped.
    pub server_request_timeout: Duration,
    /// GET (SSE) connections open at once per session on a replica (default 16, the streams a
    /// session keeps for resumption); beyond it 429 with `Retry-After`.
    pub max_get_streams: usize,
}

impl Default for SessionBounds {
    fn default() -> Self {
        SessionBounds {
            max_server_requests: 64,
            server_request_timeout: Duration::from_secs(60),
            max_get_streams: 16,
        }
    }
}

/// Where session records live.
#[derive(Debug, Clone, PartialEq)]
pub enum StoreConfig {
    /// In-process store, the zero-setup default (one replica).
    Memory,
    /// Redis, shared by every replica.
    Redis(RedisConfig),
}

/// The shared Redis: where it is (`target`), the keyspace prefix and the operation bound.
#[derive(Debug, Clone, PartialEq)]
pub struct RedisConfig {
    /// Which Redis deployment holds the data.
    pub target: RedisTarget,
    /// First component of every key (default `sy`), so several gateways can share a Redis.
    pub prefix: String,
    /// Bound on every Redis operation (default 2s); beyond it the store counts as unavailable.
    pub timeout: Duration,
    /// Whether an SSE event reaches Redis before the client (`events`, default durable).
    pub events: EventDurability,
}

/// What a client of a replica that dies may miss of a resumable SSE stream (README, "Several
/// replicas"): the order between an event's copy in Redis and its delivery to the client.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum EventDurability {
    /// A client is given only events its replica's writer has seen stored in Redis, so it can
    /// resume on any replica after every event it got (the default). Costs the latency of one
    /// pipelined round trip per batch of events.
    Durable,
    /// Events go to the client at once and to Redis behind it: a replica killed mid-stream
    /// may have sent events Redis never got.
    Fast,
}

/// How the gateway reaches Redis. Every URL is `redis://[user:password@]host:port[/db]`
/// (`rediss://` for TLS) and may hold a password.
#[derive(Debug, Clone, PartialEq)]
pub enum RedisTarget {
    /// `url`: one fixed primary.
    Single(Secret),
    /// `cluster`: seed nodes of a Redis Cluster (database 0); the rest is discovered.
    Cluster(Vec<Secret>),
    /// `sentinel`: the primary a Sentinel deployment names, followed through failovers.
    Sentinel(SentinelConfig),
}

/// `sessions.store.redis.sentinel`: the sentinels to ask, and how to log in to the data nodes
/// (the primary they name), which the sentinels' URLs say nothing about.
#[derive(Debug, Clone, PartialEq)]
pub struct SentinelConfig {
    /// The name the sentinels monitor the primary under (`sentinel monitor <master> ...`).
    pub master: String,
    /// The sentinels, `redis://[user:password@]host:port` (`rediss://` for TLS), asked in
    /// order (the last one that answered first). May hold the sentinels' password.
    pub nodes: Vec<Secret>,
    /// The data nodes' ACL user (`AUTH <username> <password>`); only with `password`.
    pub username: Option<String>,
    /// The data nodes' password (`requirepass` or the ACL user's).
    pub password: Option<Secret>,
    /// TLS to the data nodes (as `rediss://`), verified against the address the sentinels
    /// announce.
    pub tls: bool,
    /// The database number on the data nodes.
    pub db: u32,
}

/// One tenant: one MCP endpoint in front of its upstreams.
#[derive(Debug, Clone, PartialEq)]
pub struct TenantConfig {
    /// `[a-z0-9][a-z0-9-]*`, unique.
    pub name: String,
    /// Endpoint path, starts with `/`, unique across tenants (default `/t/<name>/mcp`).
    pub path: String,
    /// What the gateway says about itself in `initialize`.
    pub server: ServerIdentity,
    pub prefix: PrefixConfig,
    /// What an unreachable upstream does to lists and `initialize`.
    pub failure_policy: FailurePolicy,
    /// The canonical URI of this endpoint (`https://host/t/acme/mcp`): the default token
    /// audience and the `resource` of the protected-resource metadata. `None`: derived per
    /// request from the scheme, the (validated) Host header and `path` — refused by validation
    /// for a tenant with `auth` (and no `audiences`) on a listener that is not loopback.
    pub resource: Option<String>,
    /// Host header values accepted (DNS-rebinding protection), lower case, `host` or
    /// `host:port`. Empty: when the listener is on a loopback address only loopback hosts
    /// (`localhost`, 127.0.0.0/8, `[::1]`, `[::ffff:127.0.0.1]`, any port) are accepted;
    /// otherwise any host — refused by validation for a tenant with `auth` there.
    pub allowed_hosts: Vec<String>,
    /// Origins accepted when a request carries `Origin` (`https://app.example:8443`, lower
    /// case, no path). Empty: only loopback origins when the listener is on loopback. A request
    /// whose Origin is its own Host is always accepted.
    pub allowed_origins: Vec<String>,
    /// OAuth 2.1 resource-server settings; `None`: no authentication (user `anonymous`).
    pub auth: Option<AuthConfig>,
    /// Per-tool authorization; a tool matching several policies must satisfy all of them.
    pub tool_policies: Vec<ToolPolicy>,
    /// What the tenant's users and agents may take (sessions, requests, calls, processes).
    pub limits: TenantLimits,
    /// At least one; names unique within the tenant and splittable with `prefix.separator`.
    pub upstreams: Vec<UpstreamConfig>,
}

/// Validation of audience-bound JWT access tokens.
#[derive(Debug, Clone, PartialEq)]
pub struct AuthConfig {
    /// The authorization server's issuer identifier (`iss` of accepted tokens).
    pub issuer: String,
    /// Where the signing keys are; `None`: found by OIDC discovery from the issuer
    /// (`/.well-known/openid-configuration`, then RFC 8414 metadata).
    pub jwks_url: Option<String>,
    /// Accepted `aud` values; empty: the tenant's canonical resource URI.
    pub audiences: Vec<String>,
    /// Accepted signature algorithms (asymmetric only; default RS256, RS384, RS512, PS256,
    /// PS384, PS512, ES256, ES384, EdDSA).
    pub algorithms: Vec<JwtAlgorithm>,
    /// Leeway for `exp` and `nbf` (default 60s).
    pub clock_skew: Duration,
    /// Scopes every request needs (403 `insufficient_scope` without them).
    pub required_scopes: Vec<String>,
    /// Advertised in the protected-resource metadata (default: `required_scopes`).
    pub scopes_supported: Vec<String>,
    /// The `typ` header tokens must carry (default: any).
    pub token_type: TokenType,
}

/// Which JWTs a tenant takes as access tokens, by their `typ` header.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum TokenType {
    /// Any `typ`, or none.
    #[default]
    Any,
    /// `at+jwt` / `application/at+jwt` only (RFC 9068 §2.1, §4): a JWT of another kind from
    /// the same issuer and for the same audience (an ID token, say) is not an access token.
    AccessToken,
}

/// JWS algorithms a tenant may accept. Symmetric (`HS*`) and `none` are not representable.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum JwtAlgorithm {
    RS256,
    RS384,
    RS512,
    PS256,
    PS384,
    PS512,
    ES256,
    ES384,
    EdDSA,
}

/// Who may use which tools. A policy names tools as their upstream knows them (the upstream's
/// name and its own tool names), never by public name: adding an upstream (which turns prefixes
/// on) or changing the separator cannot make a policy miss the tool it protects.
#[derive(Debug, Clone, PartialEq)]
pub struct ToolPolicy {
    /// The upstream name, or a glob pattern over upstream names (`*` matches any run).
    pub upstream: String,
    /// The upstream's own tool names or glob patterns (`*` matches any run of characters).
    pub tools: Vec<String>,
    /// Scopes the token must carry (a missing scope is a 403 `insufficient_scope` on call).
    pub scopes: Vec<String>,
    /// Claims the token must carry: equal to the value, or an array containing it.
    pub claims: BTreeMap<String, String>,
}

/// How a tenant treats an upstream that cannot be reached or fails.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum FailurePolicy {
    /// Left out of lists and capabilities with a warning; calls to it get a clear error (default).
    Open,
    /// Lists and `initialize` fail with an error naming the upstream.
    Closed,
}

/// `serverInfo` and `instructions` of a tenant endpoint.
#[derive(Debug, Clone, PartialEq)]
pub struct ServerIdentity {
    pub name: String,
    pub version: String,
    pub title: Option<String>,
    pub instructions: Option<String>,
}

/// How upstream names are joined to the names of their tools, prompts and resources.
#[derive(Debug, Clone, PartialEq)]
pub struct PrefixConfig {
    pub mode: PrefixMode,
    /// Default `__`. Only characters allowed in tool names (`A-Za-z0-9_.-`).
    pub separator: String,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum PrefixMode {
    /// Always `<upstream><sep><name>`.
    Always,
    /// Never prefix; collisions are reported.
    Never,
    /// Prefix only when the tenant has more than one upstream (the default).
    Conditional,
}

/// One upstream MCP server of a tenant.
#[derive(Debug, Clone, PartialEq)]
pub struct UpstreamConfig {
    /// Unique within the tenant; `[A-Za-z0-9_.-]+` and not containing the separator.
    pub name: String,
    pub transport: UpstreamTransport,
    /// Time a request may wait for its response; progress notifications restart it (default 60s).
    pub request_timeout: Duration,
    /// Hard cap on a request's total time, whatever progress arrives (default 10 minutes, >= request_timeout).
    pub max_request_timeout: Duration,
    /// Time allowed for spawning/connecting plus the initialize handshake (default 30s).
    pub init_timeout: Duration,
    /// Which protocol era the upstream speaks (default `auto`: probed with `server/discover`).
    pub era: UpstreamEra,
}

/// Which protocol era an upstream speaks: found by the `server/discover` probe the 2026-07-28
/// revision specifies, or pinned by the admin (no probe).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum UpstreamEra {
    /// Probe with `server/discover` once per upstream; fall back to `initialize`.
    #[default]
    Auto,
    /// Session-based (`initialize`; revisions up to 2025-11-25): never probed. For servers
    /// that complain about the probe (the Python SDK 1.x logs dozens of validation errors).
    Legacy,
    /// The stateless revision (2026-07-28): probed, and a session-based answer is an error.
    Modern,
}

/// Closed set of upstream transports.
#[derive(Debug, Clone, PartialEq)]
pub enum UpstreamTransport {
    Stdio(StdioConfig),
    /// Streamable HTTP (2025-03-26 and later): `url` is the server's MCP endpoint.
    Http(HttpConfig),
    /// HTTP with SSE (2024-11-05): `url` is the server's SSE endpoint; the server names the
    /// endpoint messages are POSTed to (same origin) in the stream's first event.
    Sse(HttpConfig),
}

/// A child process speaking newline-delimited JSON-RPC on stdin/stdout.
#[derive(Debug, Clone, PartialEq)]
pub struct StdioConfig {
    pub command: String,
    pub args: Vec<String>,
    /// Extra environment for the child (values may hold secrets: never logged).
    pub env: BTreeMap<String, Secret>,
    /// Variables copied from the gateway's own environment, beyond the safe default set
    /// (PATH, HOME, USER, LOGNAME, SHELL, TERM, LANG, LC_ALL, TZ, TMPDIR).
    pub inherit_env: Vec<String>,
    /// Working directory (default: the gateway's).
    pub cwd: Option<PathBuf>,
    pub sharing: StdioSharing,
    /// Processes of a `shared` upstream (default 1); sessions are spread over them.
    pub pool_size: usize,
    pub restart: RestartPolicy,
}

/// Whether client sessions share one process or each get their own.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum StdioSharing {
    /// One process for all sessions of the tenant; ids remapped by the gateway (the default).
    Shared,
    /// One process per client session, started at initialize and stopped with the session.
    PerSession,
}

/// Restart backoff after a stdio child exits unexpectedly.
#[derive(Debug, Clone, PartialEq)]
pub struct RestartPolicy {
    /// First delay (default 100ms); doubles up to `max_backoff`.
    pub initial_backoff: Duration,
    /// Default 30s.
    pub max_backoff: Duration,
}

/// A remote MCP server over HTTP (Streamable HTTP, or HTTP with SSE).
#[derive(Debug, Clone, PartialEq)]
pub struct HttpConfig {
    /// `http` or `https` URL of the upstream's MCP endpoint (its SSE endpoint for `sse`).
    pub url: String,
    /// Static headers sent on every upstream request (the gateway's own credentials).
    pub headers: Vec<(String, Secret)>,
    /// Headers whose value is the (trimmed) content of a file, re-read when it changes
    /// (mounted Kubernetes secrets).
    pub header_files: Vec<(String, PathBuf)>,
    /// OAuth 2.0 client credentials: the gateway fetches, caches and refreshes its own token.
    pub oauth2: Option<ClientCredentials>,
}

/// The OAuth 2.0 client-credentials grant (RFC 6749 §4.4) for an upstream.
#[derive(Debug, Clone, PartialEq)]
pub struct ClientCredentials {
    pub token_url: String,
    pub client_id: String,
    pub client_secret: Secret,
    pub scopes: Vec<String>,
    /// RFC 8707 `resource` sent with the token request (the upstream's URL when unset).
    pub resource: Option<String>,
}

/// The admin listener's bearer token: at least 16 characters, each a visible ASCII character
/// (a token an `Authorization` header can carry as written). Its `Debug` never shows it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct AdminToken(Secret);

impl AdminToken {
    /// Shortest token accepted: guessing must not be practical.
    pub const MIN_LEN: usize = 16;

    /// The token, or why it cannot be one.
    pub fn new(value: &str) -> Result<AdminToken, &'static str> {
        if value.len() < Self::MIN_LEN {
            return Err("`admin_token` must be at least 16 characters long");
        }
        if !value.bytes().all(|b| b.is_ascii_graphic()) {
            return Err("`admin_token` must consist of visible ASCII characters (no spaces)");
        }
        Ok(AdminToken(Secret::new(value)))
    }

    /// Whether `presented` is the token, in time independent of where they differ (both are
    /// hashed first, so not of their lengths either).
    pub fn matches(&self, presented: &[u8]) -> bool {
        let digest = |b: &[u8]| ring::digest::digest(&ring::digest::SHA256, b);
        let (want, got) = (digest(self.0.expose().as_bytes()), digest(presented));
        let diff = want
            .as_ref()
            .iter()
            .zip(got.as_ref())
            .fold(0u8, |acc, (a, b)| acc | (a ^ b));
        std::hint::black_box(diff) == 0
    }
}

/// A string that may hold a secret: its `Debug` never shows the value.
#[derive(Clone, PartialEq, Eq)]
pub struct Secret(String);

impl Secret {
    pub fn new(value: impl Into<String>) -> Self {
        Secret(value.into())
    }
    /// The value, for the one place that must use it (a header, a child's env).
    pub fn expose(&self) -> &str {
        &self.0
    }
}

impl fmt::Debug for Secret {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str("Secret(***)")
    }
}
