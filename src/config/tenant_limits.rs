//! The validated per-tenant limits (`tenants[].limits:`) and their defaults: what one user, one
//! tenant or one runaway agent may take — sessions, requests, tool calls, calls in flight at an
//! upstream, processes. Enforced by `limits/`; what each protects is in the README ("Limits
//! and quotas").

use std::fmt;
use std::time::Duration;

/// Default live sessions per user of a tenant.
pub const DEFAULT_SESSIONS_PER_USER: u32 = 100;
/// Default time a new session has to send `notifications/initialized`.
pub const DEFAULT_HANDSHAKE_TIMEOUT: Duration = Duration::from_secs(30);
/// Default requests in flight per session.
pub const DEFAULT_IN_FLIGHT_PER_SESSION: u32 = 64;
/// Default members of one JSON-RPC batch.
pub const DEFAULT_MAX_BATCH: u32 = 50;

/// What a tenant's users and agents may take. Every limit here holds across replicas when the
/// session store is Redis (counters and buckets live there), and per process otherwise.
#[derive(Debug, Clone, PartialEq)]
pub struct TenantLimits {
    /// Live sessions per user: the token's issuer and subject, or the client address on a
    /// tenant without `auth` (default 100). Beyond: `initialize` gets 429.
    pub sessions_per_user: u32,
    /// Live sessions of the whole tenant (default: no bound beyond the per-user one).
    pub sessions: Option<u32>,
    /// A session that has not sent `notifications/initialized` this long after `initialize`
    /// is closed (default 30 s).
    pub handshake_timeout: Duration,
    /// Per-session stdio processes of this tenant on one replica (default: only the
    /// process-wide `limits.max_session_processes`).
    pub session_processes: Option<u32>,
    /// Requests of one session in flight at once (default 64). Beyond: a JSON-RPC error.
    pub in_flight_per_session: u32,
    /// Members of one JSON-RPC batch (default 50). Beyond: 400.
    pub max_batch: u32,
    /// Requests per user (a token bucket), any method (default: none).
    pub requests_per_user: Option<Rate>,
    /// Requests of the whole tenant (a token bucket), any method (default: none).
    pub requests: Option<Rate>,
    /// Rate limits on `tools/call`, selected by the tool itself (upstream + own name).
    pub calls: Vec<CallLimit>,
    /// Calls in flight at an upstream, with a bounded queue.
    pub concurrency: Vec<ConcurrencyLimit>,
    /// Tool calls per user per day / month.
    pub quotas: Quotas,
    /// What a limit kept in Redis does while Redis cannot be reached.
    pub on_store_error: StoreErrorPolicy,
}

impl Default for TenantLimits {
    fn default() -> TenantLimits {
        TenantLimits {
            sessions_per_user: DEFAULT_SESSIONS_PER_USER,
            sessions: None,
            handshake_timeout: DEFAULT_HANDSHAKE_TIMEOUT,
            session_processes: None,
            in_flight_per_session: DEFAULT_IN_FLIGHT_PER_SESSION,
            max_batch: DEFAULT_MAX_BATCH,
            requests_per_user: None,
            requests: None,
            calls: Vec::new(),
            concurrency: Vec::new(),
            quotas: Quotas::default(),
            on_store_error: StoreErrorPolicy::Open,
        }
    }
}

/// A token bucket: `count` tokens every `per`, at most `burst` saved up (a client idle for a
/// while may spend them at once).
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct Rate {
    pub count: u32,
    pub per: Duration,
    /// Default: `count`.
    pub burst: u32,
}

impl Rate {
    /// Tokens added per second.
    pub fn per_second(&self) -> f64 {
        f64::from(self.count) / self.per.as_secs_f64()
    }
}

impl fmt::Display for Rate {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let unit = match self.per.as_secs() {
            1 => "s",
            60 => "min",
            3600 => "h",
            86_400 => "day",
            _ => return write!(f, "{}/{}s", self.count, self.per.as_secs()),
        };
        write!(f, "{}/{unit}", self.count)
    }
}

/// Whose budget a call limit counts against.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Scope {
    /// Each user has their own bucket (default).
    User,
    /// One bucket for the whole tenant.
    Tenant,
}

/// A rate limit on `tools/call` of the tools it selects.
#[derive(Debug, Clone, PartialEq)]
pub struct CallLimit {
    /// An upstream name, or a pattern with `*`.
    pub upstream: String,
    /// The upstream's own tool names or patterns (default: every tool).
    pub tools: Vec<String>,
    pub rate: Rate,
    pub per: Scope,
}

/// Calls in flight at the upstreams it selects, each counted on its own.
#[derive(Debug, Clone, PartialEq)]
pub struct ConcurrencyLimit {
    /// An upstream name, or a pattern with `*`.
    pub upstream: String,
    /// Calls sent and not yet answered, at once (across replicas with the Redis store).
    pub max_in_flight: u32,
    /// Calls waiting for a slot on one replica (default 16); beyond: refused at once.
    pub queue: u32,
    /// How long a call waits for a slot (default 5 s); then refused.
    pub queue_timeout: Duration,
}

/// Default `concurrency[].queue`.
pub const DEFAULT_QUEUE: u32 = 16;
/// Default `concurrency[].queue_timeout`.
pub const DEFAULT_QUEUE_TIMEOUT: Duration = Duration::from_secs(5);

/// Tool calls per user per calendar day / month (UTC); `None`: no quota.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct Quotas {
    pub calls_per_user_per_day: Option<u64>,
    pub calls_per_user_per_month: Option<u64>,
}

/// What limits kept in Redis do while Redis cannot be reached.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum StoreErrorPolicy {
    /// Let the request through (logged and counted): availability first (default).
    Open,
    /// Refuse it with 503 + `Retry-After`: the limits hold, whatever it costs.
    Closed,
}
