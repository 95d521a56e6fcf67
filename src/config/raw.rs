//! Raw serde types mirroring the YAML schema: unknown fields rejected, every value wrapped in
//! `Sp` (location + lenient), durations and sizes parsed; no semantic checks (see `validate`).

use std::fmt;
use std::time::Duration;

use schemars::JsonSchema;
use serde::Deserialize;
use serde::de::{self, Deserializer, MapAccess, Visitor};

use super::raw_security::{RawAuth, RawOAuth2, RawTls, RawToolPolicy};
use super::raw_tenant_limits::RawTenantLimits;
use super::spanned::Sp;
use super::units::{DURATION_NEEDS_UNIT, parse_duration, parse_size};

/// A field: absent (`None`), or present with its location (value `None` if invalid).
pub type Field<T> = Option<Sp<T>>;

#[derive(Deserialize, JsonSchema)]
#[schemars(rename = "Config")]
#[serde(deny_unknown_fields)]
pub struct RawConfig {
    pub listen: Field<String>,
    pub admin_listen: Field<String>,
    /// Bearer token the admin listener's status page and its JSON require
    /// (`/admin/status`, `/admin/api/status`): at least 16 visible ASCII characters, best
    /// given as `${VAR}`. Metrics and probes stay open.
    pub admin_token: Field<String>,
    pub tls: Field<RawTls>,
    pub limits: Field<RawLimits>,
    pub sessions: Field<RawSessions>,
    pub telemetry: Field<RawTelemetry>,
    pub trusted_proxies: Field<Vec<Sp<String>>>,
    /// How client connections are served: `per-core` (default; one single-threaded runtime
    /// per core, each connection on one) or `shared` (one multi-threaded runtime).
    pub connection_workers: Field<RawConnectionWorkers>,
    pub tenants: Field<Vec<Sp<RawTenant>>>,
}

#[derive(Deserialize, JsonSchema, Clone, Copy)]
#[schemars(rename = "ConnectionWorkers")]
#[serde(rename_all = "kebab-case")]
pub enum RawConnectionWorkers {
    PerCore,
    Shared,
}

#[derive(Deserialize, JsonSchema)]
#[schemars(rename = "Telemetry")]
#[serde(deny_unknown_fields)]
pub struct RawTelemetry {
    pub otlp_endpoint: Field<String>,
    pub service_name: Field<String>,
    pub sample_ratio: Field<f64>,
}

#[derive(Deserialize, JsonSchema)]
#[schemars(rename = "Limits")]
#[serde(deny_unknown_fields)]
pub struct RawLimits {
    pub max_body: Field<Size>,
    pub max_upstream_message: Field<Size>,
    pub body_read_timeout: Field<Dur>,
    /// Bytes per second.
    pub min_body_rate: Field<Size>,
    pub max_buffered_bodies: Field<Size>,
    pub header_read_timeout: Field<Dur>,
    pub idle_timeout: Field<Dur>,
    pub max_connections: Field<u64>,
    pub max_connections_per_client: Field<u64>,
    pub max_header_bytes: Field<Size>,
    pub max_headers: Field<u64>,
    pub http2_max_concurrent_streams: Field<u64>,
    pub http2_keep_alive_interval: Field<Dur>,
    pub drain_grace: Field<Dur>,
    pub max_session_processes: Field<u64>,
}

#[derive(Deserialize, JsonSchema)]
#[schemars(rename = "Sessions")]
#[serde(deny_unknown_fields)]
pub struct RawSessions {
    pub ttl: Field<Dur>,
    pub store: Field<RawStore>,
    pub max_server_requests: Field<u64>,
    pub server_request_timeout: Field<Dur>,
    pub max_get_streams: Field<u64>,
}

/// `store: memory`, or the single-key mapping `store: {redis: {url: ...}}`.
#[derive(Deserialize, JsonSchema)]
#[serde(rename_all = "lowercase")]
#[allow(clippy::large_enum_variant)] // parsed once per config load
pub enum RawStore {
    Memory,
    Redis(RawRedis),
}

#[derive(Deserialize, JsonSchema)]
#[schemars(rename = "Redis")]
#[serde(deny_unknown_fields)]
pub struct RawRedis {
    /// One fixed primary: `redis://[user:password@]host:port[/db]` (`rediss://` for TLS).
    /// Exclusive with `cluster` and `sentinel`.
    pub url: Field<String>,
    /// Seed nodes of a Redis Cluster (instead of `url`).
    pub cluster: Field<Vec<Sp<String>>>,
    /// The primary found and followed through Redis Sentinel (instead of `url`).
    pub sentinel: Field<RawSentinel>,
    pub prefix: Field<String>,
    pub timeout: Field<Dur>,
    pub events: Field<RawEventDurability>,
}

/// Whether an SSE event reaches Redis before the client (`durable`, the default: a client
/// resumes on any replica after every event it got) or after it (`fast`).
#[derive(Deserialize, JsonSchema, Clone, Copy)]
#[schemars(rename = "EventDurability")]
#[serde(rename_all = "lowercase")]
pub enum RawEventDurability {
    Durable,
    Fast,
}

#[derive(Deserialize, JsonSchema)]
#[schemars(rename = "Sentinel")]
#[serde(deny_unknown_fields)]
pub struct RawSentinel {
    /// The name the sentinels monitor the primary under (`sentinel monitor <master> ...`).
    pub master: Field<String>,
    /// The sentinels: `redis://[user:password@]host:port` (`rediss://` for TLS), port required.
    pub nodes: Field<Vec<Sp<String>>>,
    /// The data nodes' ACL user; needs `password`.
    pub username: Field<String>,
    /// The data nodes' password (best given as `${VAR}`).
    pub password: Field<String>,
    /// TLS to the data nodes (default false).
    pub tls: Field<bool>,
    /// The database number on the data nodes (default 0).
    pub db: Field<u64>,
}

#[derive(Deserialize, JsonSchema)]
#[schemars(rename = "Tenant")]
#[serde(deny_unknown_fields)]
pub struct RawTenant {
    pub name: Field<String>,
    pub path: Field<String>,
    pub server: Field<RawServer>,
    pub prefix: Field<RawPrefix>,
    pub failure_policy: Field<RawFailurePolicy>,
    pub resource: Field<String>,
    pub allowed_hosts: Field<Vec<Sp<String>>>,
    pub allowed_origins: Field<Vec<Sp<String>>>,
    pub auth: Field<RawAuth>,
    pub tool_policies: Field<Vec<Sp<RawToolPolicy>>>,
    pub limits: Field<RawTenantLimits>,
    pub upstreams: Field<Vec<Sp<RawUpstream>>>,
}

#[derive(Deserialize, JsonSchema, Clone, Copy)]
#[schemars(rename = "FailurePolicy")]
#[serde(rename_all = "lowercase")]
pub enum RawFailurePolicy {
    Open,
    Closed,
}

#[derive(Deserialize, JsonSchema)]
#[schemars(rename = "Server")]
#[serde(deny_unknown_fields)]
pub struct RawServer {
    pub name: Field<String>,
    pub version: Field<String>,
    pub title: Field<String>,
    pub instructions: Field<String>,
}

#[derive(Deserialize, JsonSchema)]
#[schemars(rename = "Prefix")]
#[serde(deny_unknown_fields)]
pub struct RawPrefix {
    pub mode: Field<RawPrefixMode>,
    pub separator: Field<String>,
}

#[derive(Deserialize, JsonSchema, Clone, Copy)]
#[schemars(rename = "PrefixMode")]
#[serde(rename_all = "lowercase")]
pub enum RawPrefixMode {
    Always,
    Never,
    Conditional,
}

#[derive(Deserialize, JsonSchema)]
#[schemars(rename = "Upstream")]
#[serde(deny_unknown_fields)]
pub struct RawUpstream {
    pub name: Field<String>,
    pub stdio: Field<RawStdio>,
    pub http: Field<RawHttp>,
    /// The 2024-11-05 HTTP+SSE transport: the same settings as `http`, `url` naming the
    /// server's SSE endpoint.
    pub sse: Field<RawHttp>,
    pub timeout: Field<Dur>,
    pub max_timeout: Field<Dur>,
    pub init_timeout: Field<Dur>,
    pub era: Field<RawEra>,
}

#[derive(Deserialize, JsonSchema, Clone, Copy)]
#[schemars(rename = "Era")]
#[serde(rename_all = "kebab-case")]
pub enum RawEra {
    Auto,
    Legacy,
    Modern,
}

#[derive(Deserialize, JsonSchema)]
#[schemars(rename = "Stdio")]
#[serde(deny_unknown_fields)]
pub struct RawStdio {
    pub command: Field<String>,
    pub args: Field<Vec<Sp<String>>>,
    pub env: Field<Pairs>,
    pub inherit_env: Field<Vec<Sp<String>>>,
    pub cwd: Field<String>,
    pub sharing: Field<RawSharing>,
    pub pool_size: Field<u64>,
    pub restart: Field<RawRestart>,
}

#[derive(Deserialize, JsonSchema, Clone, Copy)]
#[schemars(rename = "Sharing")]
#[serde(rename_all = "kebab-case")]
pub enum RawSharing {
    Shared,
    PerSession,
}

#[derive(Deserialize, JsonSchema)]
#[schemars(rename = "Restart")]
#[serde(deny_unknown_fields)]
pub struct RawRestart {
    pub initial_backoff: Field<Dur>,
    pub max_backoff: Field<Dur>,
}

#[derive(Deserialize, JsonSchema)]
#[schemars(rename = "Http")]
#[serde(deny_unknown_fields)]
pub struct RawHttp {
    pub url: Field<String>,
    pub headers: Field<Pairs>,
    pub header_files: Field<Pairs>,
    pub oauth2: Field<RawOAuth2>,
}

/// A string-to-string mapping in document order, keys and values located.
pub struct Pairs(pub Vec<(Sp<String>, Sp<String>)>);

impl<'de> Deserialize<'de> for Pairs {
    fn deserialize<D: Deserializer<'de>>(deserializer: D) -> Result<Self, D::Error> {
        struct PairsVisitor;
        impl<'de> Visitor<'de> for PairsVisitor {
            type Value = Pairs;
            fn expecting(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
                f.write_str("a mapping of names to strings")
            }
            fn visit_map<A: MapAccess<'de>>(self, mut map: A) -> Result<Pairs, A::Error> {
                let mut pairs = Vec::with_capacity(map.size_hint().unwrap_or(0));
                while let Some(pair) = map.next_entry()? {
                    pairs.push(pair);
                }
                Ok(Pairs(pairs))
            }
        }
        deserializer.deserialize_map(PairsVisitor)
    }
}

/// A duration written with a unit (`30s`); a bare number is rejected.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Dur(pub Duration);

impl<'de> Deserialize<'de> for Dur {
    fn deserialize<D: Deserializer<'de>>(deserializer: D) -> Result<Self, D::Error> {
        struct DurVisitor;
        impl Visitor<'_> for DurVisitor {
            type Value = Dur;
            fn expecting(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
                f.write_str("a duration like 30s")
            }
            fn visit_u64<E: de::Error>(self, _: u64) -> Result<Dur, E> {
                Err(E::custom(DURATION_NEEDS_UNIT))
            }
            fn visit_i64<E: de::Error>(self, _: i64) -> Result<Dur, E> {
                Err(E::custom(DURATION_NEEDS_UNIT))
            }
            fn visit_f64<E: de::Error>(self, _: f64) -> Result<Dur, E> {
                Err(E::custom(DURATION_NEEDS_UNIT))
            }
            fn visit_str<E: de::Error>(self, text: &str) -> Result<Dur, E> {
                parse_duration(text).map(Dur).map_err(E::custom)
            }
        }
        deserializer.deserialize_any(DurVisitor)
    }
}

/// A byte count: an integer, or a string with a unit (`4MiB`).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Size(pub u64);

impl<'de> Deserialize<'de> for Size {
    fn deserialize<D: Deserializer<'de>>(deserializer: D) -> Result<Self, D::Error> {
        struct SizeVisitor;
        impl Visitor<'_> for SizeVisitor {
            type Value = Size;
            fn expecting(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
                f.write_str("a size like 4MiB or a number of bytes")
            }
            fn visit_u64<E: de::Error>(self, bytes: u64) -> Result<Size, E> {
                Ok(Size(bytes))
            }
            fn visit_i64<E: de::Error>(self, bytes: i64) -> Result<Size, E> {
                u64::try_from(bytes)
                    .map(Size)
                    .map_err(|_| E::custom("size must not be negative"))
            }
            fn visit_f64<E: de::Error>(self, _: f64) -> Result<Size, E> {
                Err(E::custom(
                    "size must be a whole number of bytes or use a unit, e.g. 1536KiB",
                ))
            }
            fn visit_str<E: de::Error>(self, text: &str) -> Result<Size, E> {
                parse_size(text).map(Size).map_err(E::custom)
            }
        }
        deserializer.deserialize_any(SizeVisitor)
    }
}
