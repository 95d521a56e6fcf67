//! Raw → validated `Config`: defaults filled in, values checked against the rules, cross-field
//! and uniqueness checks; every problem collected at the offending value's location.

use std::collections::HashMap;
use std::net::SocketAddr;
use std::time::Duration;

use super::error::ConfigError;
use super::limits::{DEFAULT_MAX_BODY, DEFAULT_MAX_UPSTREAM_MESSAGE};
use super::raw::{
    Dur, Field, RawConfig, RawConnectionWorkers, RawEventDurability, RawFailurePolicy, RawLimits,
    RawPrefixMode, RawRedis, RawSessions, RawStore, RawTelemetry, RawTenant, Size,
};
use super::rules;
use super::spanned::{Loc, Sp};
use super::subst::HIDDEN_VALUE;
use super::units::{format_duration, format_size};
use super::validate_security::TenantPath;
use super::{
    AdminToken, Config, ConnectionWorkers, EventDurability, FailurePolicy, Limits, PrefixConfig,
    PrefixMode, RedisConfig, RedisTarget, Secret, ServerIdentity, SessionBounds, SessionConfig,
    StoreConfig, TelemetryConfig, TenantConfig,
};

pub(super) const DEFAULT_LISTEN: &str = "127.0.0.1:8080";
const MIN_SIZE: u64 = 1 << 10;
const DEFAULT_TTL: Duration = Duration::from_secs(30 * 60);
const DEFAULT_REDIS_PREFIX: &str = "sy";
const DEFAULT_REDIS_TIMEOUT: Duration = Duration::from_secs(2);
const DEFAULT_SEPARATOR: &str = "__";
const DEFAULT_SERVER_NAME: &str = "switchyard";

/// Collects problems for one file.
pub(super) struct Checker<'a> {
    file: &'a str,
    pub(super) errors: Vec<ConfigError>,
    /// What is accepted but most likely not what the author meant.
    pub(super) warnings: Vec<ConfigError>,
}

impl<'a> Checker<'a> {
    pub(super) fn new(file: &'a str) -> Self {
        Checker {
            file,
            errors: Vec::new(),
            warnings: Vec::new(),
        }
    }

    pub(super) fn warn(&mut self, loc: &Loc, message: impl Into<String>) {
        self.warnings.push(ConfigError {
            file: self.file.to_owned(),
            line: loc.mark.line,
            col: loc.mark.col,
            path: loc.path.clone(),
            message: message.into(),
        });
    }

    pub(super) fn error(&mut self, loc: &Loc, message: impl Into<String>) {
        self.errors.push(ConfigError {
            file: self.file.to_owned(),
            line: loc.mark.line,
            col: loc.mark.col,
            path: loc.path.clone(),
            message: message.into(),
        });
    }

    /// Reports a missing required field of the mapping at `parent`.
    pub(super) fn missing(&mut self, parent: &Loc, field: &str) {
        self.error(parent, format!("missing required field `{field}`"));
    }

    /// A duration field: its default when absent; `None` when invalid. `min` is inclusive.
    pub(super) fn duration(
        &mut self,
        field: &Field<Dur>,
        default: Duration,
        min: Duration,
        name: &str,
    ) -> Option<Duration> {
        let Some(sp) = field else {
            return Some(default);
        };
        let Dur(value) = *sp.get()?;
        if value < min {
            let message = if min == Duration::from_millis(1) {
                format!("`{name}` must be greater than 0")
            } else {
                format!(
                    "`{name}` must be at least {}, got {}",
                    format_duration(min),
                    format_duration(value)
                )
            };
            self.error(&sp.loc, message);
            return None;
        }
        Some(value)
    }

    /// Checks `low <= high` for two duration fields (either may be defaulted).
    pub(super) fn ordered(
        &mut self,
        low: (&Field<Dur>, Option<Duration>, &str),
        high: (&Field<Dur>, Option<Duration>, &str),
    ) {
        let ((low_field, Some(low_value), low_name), (high_field, Some(high_value), high_name)) =
            (low, high)
        else {
            return;
        };
        if low_value <= high_value {
            return;
        }
        let (low_text, high_text) = (format_duration(low_value), format_duration(high_value));
        match (high_field, low_field) {
            (Some(high_sp), _) => self.error(
                &high_sp.loc,
                format!("`{high_name}` ({high_text}) must be at least `{low_name}` ({low_text})"),
            ),
            (None, Some(low_sp)) => self.error(
                &low_sp.loc,
                format!("`{low_name}` ({low_text}) exceeds the default `{high_name}` ({high_text}); set `{high_name}` too"),
            ),
            (None, None) => {}
        }
    }
}

/// The value of a field, shown in a message unless it came from the environment.
pub(super) fn shown(sp: &Sp<String>) -> String {
    match sp.get() {
        Some(value) if !sp.loc.from_env => format!("{value:?}"),
        _ => HIDDEN_VALUE.to_owned(),
    }
}

/// Validates everything; `Some` only if no problem was found in the raw config. `served` is
/// the listener address when it overrides the file's `listen`.
pub(super) fn validate(
    raw: &Sp<RawConfig>,
    checker: &mut Checker<'_>,
    served: Option<SocketAddr>,
) -> Option<Config> {
    let root = raw.get()?;
    let admin_listen = match &root.admin_listen {
        None => Some(None),
        Some(_) => listen(checker, &root.admin_listen).map(Some),
    };
    let admin_token = admin_token(checker, &root.admin_token, &root.admin_listen);
    let listen = listen(checker, &root.listen).map(|written| served.unwrap_or(written));
    let limits = limits(checker, &root.limits);
    let sessions = sessions(checker, &root.sessions);
    let tls = super::validate_security::tls(checker, &root.tls);
    let telemetry = telemetry(checker, &root.telemetry);
    let tenants = tenants(checker, &root.tenants, &raw.loc);
    let trusted_proxies = trusted_proxies(checker, &root.trusted_proxies);
    let connection_workers = match &root.connection_workers {
        None => Some(ConnectionWorkers::default()),
        Some(sp) => sp.get().map(|w| match w {
            RawConnectionWorkers::PerCore => ConnectionWorkers::PerCore,
            RawConnectionWorkers::Shared => ConnectionWorkers::Shared,
        }),
    };
    if let (Some(listen), Some(tenants), Some(raw_tenants)) = (
        listen,
        &tenants,
        root.tenants.as_ref().and_then(|t| t.get()),
    ) {
        super::validate_security::exposed_auth(checker, listen, raw_tenants, tenants);
        if trusted_proxies.as_ref().is_some_and(Vec::is_empty) {
            anonymous_behind_a_proxy(checker, listen, raw_tenants, tenants);
        }
    }
    Some(Config {
        source: None,
        listen: listen?,
        admin_listen: admin_listen?,
        admin_token: admin_token?,
        tls: tls?,
        limits: limits?,
        sessions: sessions?,
        telemetry: telemetry?,
        trusted_proxies: trusted_proxies?,
        connection_workers: connection_workers?,
        tenants: tenants?,
        warnings: Vec::new(),
    })
}

/// `trusted_proxies: [CIDR, ...]`: empty when absent.
fn trusted_proxies(
    checker: &mut Checker<'_>,
    field: &Field<Vec<Sp<String>>>,
) -> Option<Vec<super::Cidr>> {
    let Some(list) = field else {
        return Some(Vec::new());
    };
    let mut valid = true;
    let mut out = Vec::new();
    for item in list.get()? {
        let Some(text) = item.get() else {
            valid = false;
            continue;
        };
        match super::Cidr::parse(text.trim()) {
            Ok(cidr) => out.push(cidr),
            Err(problem) => {
                checker.error(
                    &item.loc,
                    format!("invalid trusted proxy {}: {problem}", shown(item)),
                );
                valid = false;
            }
        }
    }
    valid.then_some(out)
}

/// A tenant without `auth` counts its users by client address: on a listener other hosts can
/// reach, behind a proxy every client would have the proxy's address (one budget for all)
/// unless the proxy is trusted to name the client. A warning: clients may connect directly.
fn anonymous_behind_a_proxy(
    checker: &mut Checker<'_>,
    listen: SocketAddr,
    raw: &[Sp<RawTenant>],
    tenants: &[TenantConfig],
) {
    if listen.ip().to_canonical().is_loopback() {
        return;
    }
    for (raw, tenant) in raw.iter().zip(tenants) {
        if tenant.auth.is_none() {
            checker.warn(
                &raw.loc,
                format!(
                    "tenant {:?} has no `auth`, so its per-user limits count clients by address, and `trusted_proxies` is empty: behind a proxy or ingress every client has the proxy's address and shares one budget; list the proxies' addresses in `trusted_proxies` (or ignore this if clients connect directly)",
                    tenant.name
                ),
            );
        }
    }
}

/// `telemetry: {otlp_endpoint, service_name, sample_ratio}`.
fn telemetry(checker: &mut Checker<'_>, field: &Field<RawTelemetry>) -> Option<TelemetryConfig> {
    let Some(raw) = section(field).ok()? else {
        return Some(TelemetryConfig::default());
    };
    let mut ok = true;
    let otlp_endpoint = raw.otlp_endpoint.as_ref().and_then(|sp| {
        let url = sp.get()?;
        if let Err(e) = rules::upstream_url(url) {
            checker.error(&sp.loc, format!("invalid collector URL {}: {e}", shown(sp)));
            ok = false;
        }
        Some(url.clone())
    });
    let service_name = raw.service_name.as_ref().and_then(|sp| {
        let name = sp.get()?;
        if name.trim().is_empty() {
            checker.error(&sp.loc, "must not be empty");
            ok = false;
        }
        Some(name.clone())
    });
    let sample_ratio = raw.sample_ratio.as_ref().and_then(|sp| {
        let ratio = *sp.get()?;
        if !(0.0..=1.0).contains(&ratio) {
            checker.error(
                &sp.loc,
                format!("must be between 0 and 1 (the share of traces recorded), not {ratio}"),
            );
            ok = false;
        }
        Some(ratio)
    });
    let all_parsed = [
        raw.otlp_endpoint.as_ref().map(|s| s.get().is_some()),
        raw.service_name.as_ref().map(|s| s.get().is_some()),
        raw.sample_ratio.as_ref().map(|s| s.get().is_some()),
    ]
    .into_iter()
    .flatten()
    .all(|parsed| parsed);
    (ok && all_parsed).then_some(TelemetryConfig {
        otlp_endpoint,
        service_name,
        sample_ratio,
    })
}

/// An `IP:port` field (the MCP listener's default when absent).
fn listen(checker: &mut Checker<'_>, field: &Field<String>) -> Option<SocketAddr> {
    let text = field
        .as_ref()
        .map_or(Some(DEFAULT_LISTEN), |sp| sp.get().map(String::as_str))?;
    match text.parse() {
        Ok(addr) => Some(addr),
        Err(_) => {
            if let Some(sp) = field {
                checker.error(
                    &sp.loc,
                    format!("invalid listen address {}: expected IP:port, e.g. 127.0.0.1:8080 or [::]:8080", shown(sp)),
                );
            }
            None
        }
    }
}

/// `admin_token`: a bearer token for the admin listener's status page (never shown in a
/// message: it is a secret even when written in the file).
fn admin_token(
    checker: &mut Checker<'_>,
    field: &Field<String>,
    admin_listen: &Field<String>,
) -> Option<Option<AdminToken>> {
    let Some(sp) = field else {
        return Some(None);
    };
    let value = sp.get()?;
    if admin_listen.is_none() {
        checker.error(
            &sp.loc,
            "`admin_token` protects the admin listener's status page: set `admin_listen` too",
        );
        return None;
    }
    match AdminToken::new(value) {
        Ok(token) => Some(Some(token)),
        Err(rule) => {
            checker.error(&sp.loc, rule);
            None
        }
    }
}

/// A section that may be absent (all defaults). `Err` when present but invalid (reported).
fn section<T>(field: &Field<T>) -> Result<Option<&T>, ()> {
    match field {
        None => Ok(None),
        Some(sp) => sp.get().map(Some).ok_or(()),
    }
}

fn limits(checker: &mut Checker<'_>, field: &Field<RawLimits>) -> Option<Limits> {
    let raw = section(field).ok()?;
    let none = None;
    let max_body = size(
        checker,
        raw.map_or(&none, |r| &r.max_body),
        DEFAULT_MAX_BODY,
        "max_body",
    );
    let max_upstream = size(
        checker,
        raw.map_or(&none, |r| &r.max_upstream_message),
        DEFAULT_MAX_UPSTREAM_MESSAGE,
        "max_upstream_message",
    );
    let bodies = super::validate_limits::bodies(checker, raw, max_body);
    let connections = super::validate_limits::connections(checker, raw);
    let no_count: Field<u64> = None;
    let processes = super::validate_limits::count(
        checker,
        raw.map_or(&no_count, |r| &r.max_session_processes),
        (super::limits::DEFAULT_MAX_SESSION_PROCESSES, 0, 1 << 20),
        "max_session_processes",
    );
    Some(Limits {
        max_body_bytes: max_body?,
        max_upstream_message_bytes: max_upstream?,
        bodies: bodies?,
        connections: connections?,
        max_session_processes: processes?,
    })
}

pub(super) fn size(
    checker: &mut Checker<'_>,
    field: &Field<Size>,
    default: u64,
    name: &str,
) -> Option<usize> {
    let Some(sp) = field else {
        return usize::try_from(default).ok();
    };
    let Size(bytes) = *sp.get()?;
    if bytes < MIN_SIZE {
        checker.error(
            &sp.loc,
            format!(
                "`{name}` must be at least {}, got {}",
                format_size(MIN_SIZE),
                format_size(bytes)
            ),
        );
        return None;
    }
    let fits = usize::try_from(bytes).ok();
    if fits.is_none() {
        checker.error(&sp.loc, format!("`{name}` is too large for this platform"));
    }
    fits
}

fn sessions(checker: &mut Checker<'_>, field: &Field<RawSessions>) -> Option<SessionConfig> {
    let raw = section(field).ok()?;
    let none = None;
    let ttl = checker.duration(
        raw.map_or(&none, |r| &r.ttl),
        DEFAULT_TTL,
        Duration::from_secs(1),
        "ttl",
    );
    let store = match raw.and_then(|r| r.store.as_ref()) {
        None => Some(StoreConfig::Memory),
        Some(sp) => match sp.get()? {
            RawStore::Memory => Some(StoreConfig::Memory),
            RawStore::Redis(r) => redis_store(checker, &sp.loc, r).map(StoreConfig::Redis),
        },
    };
    let bounds = session_bounds(checker, raw);
    Some(SessionConfig {
        ttl: ttl?,
        store: store?,
        bounds: bounds?,
    })
}

/// `max_server_requests` (1 to 4096), `server_request_timeout` (> 0), `max_get_streams`
/// (1 to 1024); each defaulted when absent.
fn session_bounds(checker: &mut Checker<'_>, raw: Option<&RawSessions>) -> Option<SessionBounds> {
    let default = SessionBounds::default();
    let none = None;
    let count = |checker: &mut Checker<'_>, field: &Field<u64>, name: &str, max: usize, default| {
        let Some(sp) = field else {
            return Some(default);
        };
        let n = *sp.get()?;
        match usize::try_from(n) {
            Ok(n) if (1..=max).contains(&n) => Some(n),
            _ => {
                checker.error(
                    &sp.loc,
                    format!("`{name}` must be from 1 to {max}, got {n}"),
                );
                None
            }
        }
    };
    let max_server_requests = count(
        checker,
        raw.map_or(&none, |r| &r.max_server_requests),
        "max_server_requests",
        4096,
        default.max_server_requests,
    );
    let server_request_timeout = checker.duration(
        raw.map_or(&None, |r| &r.server_request_timeout),
        default.server_request_timeout,
        Duration::from_millis(1),
        "server_request_timeout",
    );
    let max_get_streams = count(
        checker,
        raw.map_or(&none, |r| &r.max_get_streams),
        "max_get_streams",
        1024,
        default.max_get_streams,
    );
    Some(SessionBounds {
        max_server_requests: max_server_requests?,
        server_request_timeout: server_request_timeout?,
        max_get_streams: max_get_streams?,
    })
}

/// `store: {redis: {url | cluster | sentinel, prefix, timeout, events}}`. URLs may hold a
/// password: never shown.
fn redis_store(checker: &mut Checker<'_>, parent: &Loc, raw: &RawRedis) -> Option<RedisConfig> {
    let second = [
        raw.cluster.as_ref().map(|c| &c.loc),
        raw.sentinel.as_ref().map(|s| &s.loc),
    ];
    let given = usize::from(raw.url.is_some()) + second.iter().flatten().count();
    let target = if given == 0 {
        checker.error(
            parent,
            "missing required field `url` (one Redis primary), `cluster` (Redis Cluster seed nodes) or `sentinel` (the primary Redis Sentinel names)",
        );
        None
    } else if given > 1 {
        // Reported where the second of them starts.
        let loc = second.iter().flatten().last().copied().unwrap_or(parent);
        checker.error(
            loc,
            "`url`, `cluster` and `sentinel` exclude each other: give `url` for one Redis primary, `cluster` for the seed nodes of a Redis Cluster, or `sentinel` for the sentinels that find the primary",
        );
        None
    } else if let Some(sp) = &raw.url {
        redis_url(checker, sp, false).map(RedisTarget::Single)
    } else if let Some(sentinel) = &raw.sentinel {
        super::validate_sentinel::sentinel(checker, sentinel).map(RedisTarget::Sentinel)
    } else {
        raw.cluster.as_ref().and_then(|sp| {
            sp.get().and_then(|seeds| {
                if seeds.is_empty() {
                    checker.error(&sp.loc, "`cluster` needs at least one seed URL");
                    return None;
                }
                let urls: Vec<Option<Secret>> = seeds
                    .iter()
                    .map(|seed| redis_url(checker, seed, true))
                    .collect();
                urls.into_iter()
                    .collect::<Option<Vec<_>>>()
                    .map(RedisTarget::Cluster)
            })
        })
    };
    let prefix = match &raw.prefix {
        None => Some(DEFAULT_REDIS_PREFIX.to_owned()),
        Some(sp) => sp.get().and_then(|p| {
            let ok = !p.is_empty()
                && p.len() <= 32
                && p.chars().all(|c| c.is_ascii_alphanumeric() || matches!(c, '-' | '_' | '.'));
            if ok {
                Some(p.clone())
            } else {
                checker.error(
                    &sp.loc,
                    format!("invalid key prefix {}: 1 to 32 characters of A-Z, a-z, 0-9, '-', '_' and '.'", shown(sp)),
                );
                None
            }
        }),
    };
    let timeout = checker.duration(
        &raw.timeout,
        DEFAULT_REDIS_TIMEOUT,
        Duration::from_millis(1),
        "timeout",
    );
    let events = match raw.events.as_ref() {
        None => Some(EventDurability::Durable),
        Some(sp) => sp.get().map(|e| match e {
            RawEventDurability::Durable => EventDurability::Durable,
            RawEventDurability::Fast => EventDurability::Fast,
        }),
    };
    Some(RedisConfig {
        target: target?,
        prefix: prefix?,
        timeout: timeout?,
        events: events?,
    })
}

/// One Redis URL (never echoed: it may hold a password). A cluster node has database 0 only.
fn redis_url(checker: &mut Checker<'_>, sp: &Sp<String>, cluster: bool) -> Option<Secret> {
    let url = sp.get()?;
    let scheme_ok = url.starts_with("redis://") || url.starts_with("rediss://");
    let parsed = url::Url::parse(url)
        .ok()
        .filter(|u| u.host_str().is_some_and(|h| !h.is_empty()));
    let Some(parsed) = parsed.filter(|_| scheme_ok) else {
        checker.error(
            &sp.loc,
            "the Redis URL must look like redis://[user:password@]host:port[/db] (rediss:// for TLS)",
        );
        return None;
    };
    if cluster && !matches!(parsed.path(), "" | "/" | "/0") {
        checker.error(
            &sp.loc,
            "a Redis Cluster has database 0 only: drop the /<db> from the seed URL",
        );
        return None;
    }
    Some(Secret::new(url.clone()))
}

/// The paths below each tenant endpoint that serve the 2024-11-05 HTTP+SSE transport
/// (`http/legacy_sse.rs`): no other tenant may have them as its endpoint.
const LEGACY_SUFFIXES: [&str; 2] = ["/sse", "/messages"];

/// Reports a tenant path that is another tenant's 2024-11-05 path, or whose 2024-11-05 paths
/// are another tenant's endpoint (either way, one tenant would shadow the other).
fn no_shadowing(checker: &mut Checker<'_>, paths: &Seen, (path, shown): (&str, &str), loc: &Loc) {
    for suffix in LEGACY_SUFFIXES {
        if let Some(first) = paths.get(&format!("{path}{suffix}")) {
            checker.error(
                loc,
                format!(
                    "tenant path {shown} serves the 2024-11-05 transport at `<path>{suffix}`, which is the path of the tenant at {first}"
                ),
            );
        }
        if let Some(first) = path.strip_suffix(suffix).and_then(|base| paths.get(base)) {
            checker.error(
                loc,
                format!(
                    "tenant path {shown} is the 2024-11-05 `{suffix}` path of the tenant at {first}"
                ),
            );
        }
    }
}

/// First definitions of names/paths seen so far: value → where (`line 3`, with a note).
pub(super) type Seen = HashMap<String, String>;

fn tenants(
    checker: &mut Checker<'_>,
    field: &Field<Vec<Sp<RawTenant>>>,
    root: &Loc,
) -> Option<Vec<TenantConfig>> {
    let Some(list) = field else {
        checker.error(
            root,
            "missing required field `tenants`: at least one tenant is required",
        );
        return None;
    };
    let items = list.get()?;
    if items.is_empty() {
        checker.error(&list.loc, "at least one tenant is required");
        return None;
    }
    let (mut names, mut paths) = (Seen::new(), Seen::new());
    let tenants: Vec<Option<TenantConfig>> = items
        .iter()
        .map(|item| tenant(checker, item, &mut names, &mut paths))
        .collect();
    tenants.into_iter().collect()
}

/// Reports `value` if already seen (`false`), else remembers it (`true`). `shown` is how the
/// value may appear in messages; `implicit` explains a defaulted value (e.g. "the default path
/// of tenant \"acme\"").
pub(super) fn unique(
    checker: &mut Checker<'_>,
    seen: &mut Seen,
    (value, shown): (&str, &str),
    loc: &Loc,
    what: &str,
    implicit: Option<String>,
) -> bool {
    match seen.get(value) {
        Some(first) => {
            let note = implicit.map(|n| format!("{n}; ")).unwrap_or_default();
            checker.error(
                loc,
                format!("duplicate {what} {shown} ({note}first defined at {first})"),
            );
            false
        }
        None => {
            let here = match implicit {
                Some(note) => format!("line {}, as {note}", loc.mark.line),
                None => format!("line {}", loc.mark.line),
            };
            seen.insert(value.to_owned(), here);
            true
        }
    }
}

fn tenant(
    checker: &mut Checker<'_>,
    item: &Sp<RawTenant>,
    names: &mut Seen,
    paths: &mut Seen,
) -> Option<TenantConfig> {
    let raw = item.get()?;
    // A duplicate name keeps its value (the config is rejected anyway) but its default path is
    // not checked again: that would report the same clash twice.
    let mut name_is_new = true;
    let name = match &raw.name {
        None => {
            checker.missing(&item.loc, "name");
            None
        }
        Some(sp) => sp.get().and_then(|name| match rules::tenant_name(name) {
            Ok(()) => {
                name_is_new = unique(
                    checker,
                    names,
                    (name, &shown(sp)),
                    &sp.loc,
                    "tenant name",
                    None,
                );
                Some((name.clone(), sp.loc.from_env))
            }
            Err(rule) => {
                checker.error(
                    &sp.loc,
                    format!("invalid tenant name {}: {rule}", shown(sp)),
                );
                None
            }
        }),
    };
    let path = match &raw.path {
        None => name.as_ref().map(|(name, from_env)| {
            let path = format!("/t/{name}/mcp");
            if name_is_new {
                let (shown_name, shown_path) = match from_env {
                    false => (format!("{name:?}"), format!("{path:?}")),
                    true => (HIDDEN_VALUE.to_owned(), HIDDEN_VALUE.to_owned()),
                };
                let note = format!("the default path of tenant {shown_name}");
                no_shadowing(checker, paths, (&path, &shown_path), &item.loc);
                unique(
                    checker,
                    paths,
                    (&path, &shown_path),
                    &item.loc,
                    "tenant path",
                    Some(note),
                );
            }
            path
        }),
        Some(sp) => sp.get().and_then(|path| match rules::tenant_path(path) {
            Ok(()) => {
                no_shadowing(checker, paths, (path, &shown(sp)), &sp.loc);
                unique(
                    checker,
                    paths,
                    (path, &shown(sp)),
                    &sp.loc,
                    "tenant path",
                    None,
                );
                Some(path.clone())
            }
            Err(rule) => {
                checker.error(
                    &sp.loc,
                    format!("invalid tenant path {}: {rule}", shown(sp)),
                );
                None
            }
        }),
    };
    let tenant_path = path
        .as_deref()
        .map(|value| TenantPath::new(value, raw, name.as_ref()));
    let security = super::validate_security::tenant(checker, raw, tenant_path);
    let server = server(checker, raw);
    let prefix = prefix(checker, raw);
    let upstreams = super::validate_upstream::upstreams(
        checker,
        &raw.upstreams,
        &item.loc,
        prefix
            .as_ref()
            .map(|(p, loc)| (p.separator.as_str(), loc.as_ref())),
    );
    if let (Some(upstreams), Some((prefix, _))) = (&upstreams, &prefix) {
        let names: Vec<&str> = upstreams.iter().map(|u| u.name.as_str()).collect();
        super::validate_auth::policy_targets(
            checker,
            &raw.tool_policies,
            &names,
            &prefix.separator,
        );
    }
    let upstream_names: Option<Vec<&str>> = upstreams
        .as_ref()
        .map(|u| u.iter().map(|u| u.name.as_str()).collect());
    let limits = super::validate_tenant_limits::tenant_limits(
        checker,
        &raw.limits,
        upstream_names.as_deref(),
    );
    let failure_policy = match raw.failure_policy.as_ref() {
        None => Some(FailurePolicy::Open),
        Some(sp) => sp.get().map(|p| match p {
            RawFailurePolicy::Open => FailurePolicy::Open,
            RawFailurePolicy::Closed => FailurePolicy::Closed,
        }),
    };
    let security = security?;
    Some(TenantConfig {
        name: name?.0,
        path: path?,
        server: server?,
        prefix: prefix?.0,
        failure_policy: failure_policy?,
        upstreams: upstreams?,
        resource: security.resource,
        allowed_hosts: security.allowed_hosts,
        allowed_origins: security.allowed_origins,
        auth: security.auth,
        tool_policies: security.tool_policies,
        limits: limits?,
    })
}

fn server(checker: &mut Checker<'_>, tenant: &RawTenant) -> Option<ServerIdentity> {
    let raw = section(&tenant.server).ok()?;
    let mut required = |field: Option<&Field<String>>, default: &str, name: &str| match field
        .and_then(Option::as_ref)
    {
        None => Some(default.to_owned()),
        Some(sp) => {
            let value = sp.get()?;
            if value.trim().is_empty() {
                checker.error(&sp.loc, format!("`{name}` must not be empty"));
                return None;
            }
            Some(value.clone())
        }
    };
    let name = required(raw.map(|r| &r.name), DEFAULT_SERVER_NAME, "name");
    let version = required(
        raw.map(|r| &r.version),
        env!("CARGO_PKG_VERSION"),
        "version",
    );
    let optional = |field: Option<&Field<String>>| match field.and_then(Option::as_ref) {
        None => Some(None),
        Some(sp) => sp.get().map(|v| Some(v.clone())),
    };
    let title = optional(raw.map(|r| &r.title));
    let instructions = optional(raw.map(|r| &r.instructions));
    Some(ServerIdentity {
        name: name?,
        version: version?,
        title: title?,
        instructions: instructions?,
    })
}

/// The prefix settings, with the separator's location when it was written explicitly.
fn prefix(checker: &mut Checker<'_>, tenant: &RawTenant) -> Option<(PrefixConfig, Option<Loc>)> {
    let raw = section(&tenant.prefix).ok()?;
    let mode = match raw.and_then(|r| r.mode.as_ref()) {
        None => Some(PrefixMode::Conditional),
        Some(sp) => sp.get().map(|mode| match mode {
            RawPrefixMode::Always => PrefixMode::Always,
            RawPrefixMode::Never => PrefixMode::Never,
            RawPrefixMode::Conditional => PrefixMode::Conditional,
        }),
    };
    let separator = match raw.and_then(|r| r.separator.as_ref()) {
        None => Some((DEFAULT_SEPARATOR.to_owned(), None)),
        Some(sp) => sp.get().and_then(|sep| match rules::separator(sep) {
            Ok(()) => Some((sep.clone(), Some(sp.loc.clone()))),
            Err(rule) => {
                checker.error(&sp.loc, format!("invalid separator {}: {rule}", shown(sp)));
                None
            }
        }),
    };
    let (separator, loc) = separator?;
    Some((
        PrefixConfig {
            mode: mode?,
            separator,
        },
        loc,
    ))
}

#[cfg(test)]
#[path = "validate_tests.rs"]
mod tests;
