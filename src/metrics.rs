//! Prometheus metrics of the process, served by the admin listener at `/metrics`. Label sets
//! are bounded by construction: tenants and upstreams come from the config, methods from the
//! fixed MCP method set (anything else is `other`), outcomes and reasons from fixed lists.
//! No user ids, session ids, tool names or arguments are ever labels.

use std::sync::{LazyLock, OnceLock};
use std::time::Duration;

use prometheus::{
    Encoder, Histogram, HistogramOpts, HistogramVec, IntCounter, IntCounterVec, IntGauge,
    IntGaugeVec, Opts, Registry, TextEncoder,
};

/// Latency buckets (seconds) for client requests and upstream calls: 1 ms to 5 min.
const LATENCY: &[f64] = &[
    0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5, 5.0, 10.0, 30.0, 60.0, 300.0,
];
/// Redis operations: 0.1 ms to 2.5 s.
const REDIS_LATENCY: &[f64] = &[
    0.0001, 0.00025, 0.0005, 0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 1.0, 2.5,
];

pub struct Metrics {
    registry: Registry,
    /// `switchyard_requests_total{tenant, method, outcome}`.
    pub requests: IntCounterVec,
    /// `switchyard_request_duration_seconds{tenant, method}` (to the response head).
    pub request_seconds: HistogramVec,
    /// `switchyard_upstream_calls_total{tenant, upstream, outcome}`.
    pub upstream_calls: IntCounterVec,
    /// `switchyard_upstream_call_duration_seconds{tenant, upstream}`.
    pub upstream_seconds: HistogramVec,
    /// `switchyard_sessions_active{tenant}` (live on this replica).
    pub sessions: IntGaugeVec,
    /// `switchyard_sse_streams_open{kind}` (clients listening now).
    pub sse_streams: IntGaugeVec,
    /// `switchyard_stdio_processes` (running children).
    pub stdio_processes: IntGauge,
    /// `switchyard_stdio_restarts_total{upstream}`.
    pub stdio_restarts: IntCounterVec,
    /// `switchyard_auth_failures_total{tenant, reason}`.
    pub auth_failures: IntCounterVec,
    /// `switchyard_redis_operation_duration_seconds{op}`.
    pub redis_seconds: HistogramVec,
    /// `switchyard_limit_refusals_total{tenant, limit}`: what a tenant limit refused; `limit`
    /// is the limit's name in the config (`sessions_per_user`, `calls[0]`, ...).
    pub limit_refusals: IntCounterVec,
    /// `switchyard_limit_usage{tenant, limit}`: what a limit counts now on this replica
    /// (sessions, processes, calls in flight), next to its bound.
    pub limit_usage: IntGaugeVec,
    /// `switchyard_redis_errors_total{op}`.
    pub redis_errors: IntCounterVec,
    /// `switchyard_config_reloads_total{outcome}`: `applied`, `unchanged` or `rejected`.
    pub config_reloads: IntCounterVec,
    /// `switchyard_notifications_dropped_total{reason}`: notifications for a client that
    /// fell behind a flood, dropped or coalesced (see `dropped_notification`).
    pub notifications_dropped: IntCounterVec,
    /// `switchyard_server_requests_refused_total{reason}`: upstream requests to a client the
    /// gateway answered itself with an error (see `ServerRequestRefusal::label`).
    pub server_requests_refused: IntCounterVec,
    /// `switchyard_config_last_reload_successful`: 0 while the newest routing file was
    /// rejected (the replica runs an older one), else 1.
    pub config_last_reload_successful: IntGauge,
    /// `switchyard_connections_open{listener}`: `mcp` or `admin`.
    pub connections_open: IntGaugeVec,
    /// `switchyard_connections_refused_total{listener, reason}`: `max_connections` (503) or
    /// `max_connections_per_client` (429).
    pub connections_refused: IntCounterVec,
    /// `switchyard_connections_timed_out_total{listener, reason}`: `header_timeout` or
    /// `idle_timeout`.
    pub connections_timed_out: IntCounterVec,
    /// `switchyard_request_body_bytes_buffered`: the body budget in use.
    pub body_bytes_buffered: IntGauge,
}

static METRICS: LazyLock<Metrics> = LazyLock::new(Metrics::new);

/// The process's metrics.
pub fn get() -> &'static Metrics {
    &METRICS
}

fn counter(r: &Registry, name: &str, help: &str, labels: &[&str]) -> IntCounterVec {
    let c = IntCounterVec::new(Opts::new(name, help), labels).expect("valid metric");
    r.register(Box::new(c.clone())).expect("unique metric");
    c
}

fn histogram(r: &Registry, name: &str, help: &str, labels: &[&str], b: &[f64]) -> HistogramVec {
    let h = HistogramVec::new(HistogramOpts::new(name, help).buckets(b.to_vec()), labels)
        .expect("valid metric");
    r.register(Box::new(h.clone())).expect("unique metric");
    h
}

fn gauge(r: &Registry, name: &str, help: &str, labels: &[&str]) -> IntGaugeVec {
    let g = IntGaugeVec::new(Opts::new(name, help), labels).expect("valid metric");
    r.register(Box::new(g.clone())).expect("unique metric");
    g
}

impl Metrics {
    fn new() -> Metrics {
        let r = Registry::new();
        let stdio_processes = IntGauge::new(
            "switchyard_stdio_processes",
            "Stdio upstream child processes running.",
        )
        .expect("valid metric");
        r.register(Box::new(stdio_processes.clone()))
            .expect("unique metric");
        let config_last_reload_successful = IntGauge::new(
            "switchyard_config_last_reload_successful",
            "0 while the newest routing config file was rejected and an older one runs, else 1.",
        )
        .expect("valid metric");
        config_last_reload_successful.set(1);
        r.register(Box::new(config_last_reload_successful.clone()))
            .expect("unique metric");
        let body_bytes_buffered = IntGauge::new(
            "switchyard_request_body_bytes_buffered",
            "Bytes of client request bodies held in memory now (limits.max_buffered_bodies).",
        )
        .expect("valid metric");
        r.register(Box::new(body_bytes_buffered.clone()))
            .expect("unique metric");
        Metrics {
            limit_refusals: counter(
                &r,
                "switchyard_limit_refusals_total",
                "Requests, sessions and calls a tenant limit refused, by the limit's config name.",
                &["tenant", "limit"],
            ),
            limit_usage: gauge(
                &r,
                "switchyard_limit_usage",
                "What a tenant limit counts now on this replica (sessions, processes, calls in flight).",
                &["tenant", "limit"],
            ),
            config_last_reload_successful,
            body_bytes_buffered,
            connections_open: gauge(
                &r,
                "switchyard_connections_open",
                "Client connections open, by listener (mcp, admin).",
                &["listener"],
            ),
            connections_refused: counter(
                &r,
                "switchyard_connections_refused_total",
                "Connections turned away at accept, by listener and the cap that refused them.",
                &["listener", "reason"],
            ),
            connections_timed_out: counter(
                &r,
                "switchyard_connections_timed_out_total",
                "Connections closed by the header or idle timeout, by listener.",
                &["listener", "reason"],
            ),
            requests: counter(
                &r,
                "switchyard_requests_total",
                "Client messages handled, by tenant, MCP method and outcome.",
                &["tenant", "method", "outcome"],
            ),
            request_seconds: histogram(
                &r,
                "switchyard_request_duration_seconds",
                "Time from a client request to its response head (JSON body or SSE start).",
                &["tenant", "method"],
                LATENCY,
            ),
            upstream_calls: counter(
                &r,
                "switchyard_upstream_calls_total",
                "Requests forwarded to upstreams, by outcome (ok, error, timeout, failed).",
                &["tenant", "upstream", "outcome"],
            ),
            upstream_seconds: histogram(
                &r,
                "switchyard_upstream_call_duration_seconds",
                "Time from forwarding a request to the upstream's response.",
                &["tenant", "upstream"],
                LATENCY,
            ),
            sessions: gauge(
                &r,
                "switchyard_sessions_active",
                "Sessions live on this replica.",
                &["tenant"],
            ),
            sse_streams: gauge(
                &r,
                "switchyard_sse_streams_open",
                "SSE streams with a client listening, by kind (post, get, resumed).",
                &["kind"],
            ),
            stdio_processes,
            stdio_restarts: counter(
                &r,
                "switchyard_stdio_restarts_total",
                "Restarts of stdio upstream processes after unexpected exits.",
                &["upstream"],
            ),
            auth_failures: counter(
                &r,
                "switchyard_auth_failures_total",
                "Requests refused by the security front, by reason.",
                &["tenant", "reason"],
            ),
            redis_seconds: histogram(
                &r,
                "switchyard_redis_operation_duration_seconds",
                "Redis operations, by operation.",
                &["op"],
                REDIS_LATENCY,
            ),
            redis_errors: counter(
                &r,
                "switchyard_redis_errors_total",
                "Redis operations that failed or timed out, by operation.",
                &["op"],
            ),
            config_reloads: counter(
                &r,
                "switchyard_config_reloads_total",
                "Routing config reloads, by outcome (applied, unchanged, rejected).",
                &["outcome"],
            ),
            notifications_dropped: counter(
                &r,
                "switchyard_notifications_dropped_total",
                "Notifications for a client that fell behind, dropped or coalesced, by where.",
                &["reason"],
            ),
            server_requests_refused: counter(
                &r,
                "switchyard_server_requests_refused_total",
                "Upstream requests to a client answered by the gateway with an error, by reason.",
                &["reason"],
            ),
            registry: r,
        }
    }

    /// One notification for a client was dropped. `reason`, a fixed label: `stream_backlog`
    /// (its stream's unread backlog is over the bound), `progress_coalesced` (a newer progress
    /// of the same request replaced it), `request_queue` (the request's queue from the
    /// upstream is full), `listener_queue` (a `subscriptions/listen` stream's queue is full),
    /// `bus_backlog` (too many deliveries to another replica in flight), `mirror_backlog` (the
    /// stream's copy in Redis is behind; the local log still has it), `relay_backlog` (a retry
    /// continued by another replica sends faster than its client reads), `upstream_backlog` (a
    /// client's notification for an upstream that has not taken the last 64 yet).
    pub fn dropped_notification(&self, reason: &'static str) {
        self.notifications_dropped
            .with_label_values(&[reason])
            .inc();
    }

    /// Drops the per-tenant gauge of a tenant a config reload removed.
    pub fn forget_tenant(&self, tenant: &str) {
        let _ = self.sessions.remove_label_values(&[tenant]);
    }

    /// The text exposition of every metric.
    pub fn render(&self) -> Vec<u8> {
        let mut out = Vec::with_capacity(16 * 1024);
        if let Err(e) = TextEncoder::new().encode(&self.registry.gather(), &mut out) {
            tracing::warn!(error = %e, "metrics could not be encoded");
        }
        out
    }

    pub fn observe_redis(&self, op: &str, took: Duration, ok: bool) {
        self.redis_seconds
            .with_label_values(&[op])
            .observe(took.as_secs_f64());
        if !ok {
            self.redis_errors.with_label_values(&[op]).inc();
        }
    }
}

/// A latency series and the `ok` series of its count, looked up once and kept by what they
/// describe (a tenant's method, an upstream): `with_label_values` hashes the labels and takes
/// the family's read lock — one lock word shared by every core — at each lookup, and a
/// forwarded call made four. The `ok` series is made on the first success, so a series
/// appears in `/metrics` only once it counted something, as before.
struct Series {
    seconds: Histogram,
    ok: OnceLock<IntCounter>,
}

impl Series {
    fn new(seconds: &HistogramVec, labels: [&str; 2]) -> Series {
        Series {
            seconds: seconds.with_label_values(&labels),
            ok: OnceLock::new(),
        }
    }

    fn observe(&self, counts: &IntCounterVec, labels: [&str; 2], took: Duration, outcome: &str) {
        self.seconds.observe(took.as_secs_f64());
        let [first, second] = labels;
        if outcome == "ok" {
            self.ok
                .get_or_init(|| counts.with_label_values(&[first, second, "ok"]))
                .inc();
        } else {
            counts.with_label_values(&[first, second, outcome]).inc();
        }
    }
}

/// An upstream's call series (`switchyard_upstream_call_duration_seconds`, and
/// `switchyard_upstream_calls_total` with `outcome="ok"`), kept by the upstream.
#[derive(Default)]
pub struct UpstreamSeries(OnceLock<Series>);

impl std::fmt::Debug for UpstreamSeries {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("UpstreamSeries")
    }
}

impl UpstreamSeries {
    /// One request to the upstream ended: `outcome` is `ok` (an answer, whatever it says),
    /// `failed`, `timeout` or `cancelled`.
    pub fn observe(&self, tenant: &str, upstream: &str, took: Duration, outcome: &str) {
        let m = get();
        let labels = [tenant, upstream];
        self.0
            .get_or_init(|| Series::new(&m.upstream_seconds, labels))
            .observe(&m.upstream_calls, labels, took, outcome);
    }
}

/// A tenant's request series (`switchyard_request_duration_seconds`, and
/// `switchyard_requests_total` with `outcome="ok"`) for the first methods it sees, kept by the
/// tenant; a method past them is looked up each time (the label set has ~25 members, a
/// tenant's traffic a handful).
#[derive(Default)]
pub struct RequestSeries([OnceLock<(&'static str, Series)>; 8]);

impl RequestSeries {
    /// One exchange of the tenant's endpoint ended, with `label` (the method's label).
    pub fn observe(&self, tenant: &str, label: &'static str, took: Duration, outcome: &str) {
        let m = get();
        let labels = [tenant, label];
        for slot in &self.0 {
            let (taken, series) =
                slot.get_or_init(|| (label, Series::new(&m.request_seconds, labels)));
            if *taken == label {
                series.observe(&m.requests, labels, took, outcome);
                return;
            }
        }
        // Past the kept methods: the same series, looked up for this exchange alone.
        Series::new(&m.request_seconds, labels).observe(&m.requests, labels, took, outcome);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn renders_the_series_it_was_given() {
        let m = get();
        m.requests
            .with_label_values(&["unit-tenant", "tools/call", "ok"])
            .inc();
        m.observe_redis("unit-op", Duration::from_millis(2), false);
        let text = String::from_utf8(m.render()).unwrap_or_default();
        assert!(text.contains(
            "switchyard_requests_total{method=\"tools/call\",outcome=\"ok\",tenant=\"unit-tenant\"} 1"
        ));
        assert!(text.contains("switchyard_redis_errors_total{op=\"unit-op\"} 1"));
        assert!(text.contains(
            "switchyard_redis_operation_duration_seconds_bucket{op=\"unit-op\",le=\"0.0025\"} 1"
        ));
    }

    /// The kept series count what lookups would: each outcome under its own labels, the
    /// `ok` series only once something succeeded, methods past the kept ones too.
    #[test]
    fn kept_series_count_as_lookups_would() {
        let m = get();
        let (tenant, upstream) = ("unit-kept", "unit-upstream");
        let calls = UpstreamSeries::default();
        calls.observe(tenant, upstream, Duration::from_millis(3), "timeout");
        let ok = || {
            m.upstream_calls
                .with_label_values(&[tenant, upstream, "ok"])
        };
        let text = String::from_utf8(m.render()).unwrap_or_default();
        let series = |outcome| {
            format!(
                "switchyard_upstream_calls_total{{outcome=\"{outcome}\",tenant=\"{tenant}\",upstream=\"{upstream}\"}}"
            )
        };
        assert!(text.contains(&series("timeout")), "{text}");
        assert!(!text.contains(&series("ok")), "{text}");
        calls.observe(tenant, upstream, Duration::from_millis(3), "ok");
        calls.observe(tenant, upstream, Duration::from_millis(3), "ok");
        assert_eq!(ok().get(), 2);
        let timeouts = m
            .upstream_calls
            .with_label_values(&[tenant, upstream, "timeout"]);
        assert_eq!(timeouts.get(), 1);
        let seconds = m.upstream_seconds.with_label_values(&[tenant, upstream]);
        assert_eq!(seconds.get_sample_count(), 3);

        let requests = RequestSeries::default();
        const LABELS: [&str; 10] = ["a", "b", "c", "d", "e", "f", "g", "h", "i", "j"];
        for (i, label) in LABELS.iter().enumerate() {
            for _ in 0..=i {
                requests.observe(tenant, label, Duration::from_millis(1), "ok");
            }
            requests.observe(tenant, label, Duration::from_millis(1), "unauthorized");
        }
        for (i, label) in LABELS.iter().enumerate() {
            let count = |outcome| {
                m.requests
                    .with_label_values(&[tenant, label, outcome])
                    .get()
            };
            assert_eq!(count("ok"), i as u64 + 1, "{label}");
            assert_eq!(count("unauthorized"), 1, "{label}");
            let seconds = m.request_seconds.with_label_values(&[tenant, label]);
            assert_eq!(seconds.get_sample_count(), i as u64 + 2, "{label}");
        }
    }
}
