//! Tests of a tenant's `limits:`, `limits.max_session_processes` and `trusted_proxies` through
//! `parse`, with their exact messages.

#![allow(clippy::unwrap_used)]

use std::time::Duration;

use super::{UPSTREAM, errors, ok};
use crate::config::{Rate, Scope, StoreErrorPolicy, TenantLimits};

fn with_limits(lines: &str) -> String {
    format!("tenants:\n  - name: acme\n    limits:\n{lines}{UPSTREAM}")
}

#[test]
fn defaults_hold_without_a_limits_section() {
    let config = ok(&format!("tenants:\n  - name: acme\n{UPSTREAM}"));
    let limits = &config.tenants[0].limits;
    assert_eq!(*limits, TenantLimits::default());
    assert_eq!(limits.sessions_per_user, 100);
    assert_eq!(limits.handshake_timeout, Duration::from_secs(30));
    assert_eq!(limits.in_flight_per_session, 64);
    assert_eq!(limits.max_batch, 50);
    assert_eq!(limits.on_store_error, StoreErrorPolicy::Open);
    assert_eq!(config.limits.max_session_processes, 256);
    assert!(config.trusted_proxies.is_empty());
}

#[test]
fn every_limit_is_read() {
    let config = ok(&with_limits(
        "      sessions_per_user: 5\n      sessions: 1000\n      handshake_timeout: 5s\n      session_processes: 20\n      in_flight_per_session: 8\n      max_batch: 10\n      requests_per_user: {rate: 20/s, burst: 40}\n      requests: {rate: 600/min}\n      calls:\n        - {upstream: a, tools: [\"write*\"], rate: 10/min, per: tenant}\n        - {upstream: \"*\", rate: 5/h}\n      concurrency:\n        - {upstream: a, max_in_flight: 4, queue: 2, queue_timeout: 250ms}\n      quotas: {calls_per_user_per_day: 1000, calls_per_user_per_month: 20000}\n      on_store_error: closed\n",
    ));
    let l = &config.tenants[0].limits;
    assert_eq!((l.sessions_per_user, l.sessions), (5, Some(1000)));
    assert_eq!(l.handshake_timeout, Duration::from_secs(5));
    assert_eq!(l.session_processes, Some(20));
    assert_eq!((l.in_flight_per_session, l.max_batch), (8, 10));
    assert_eq!(
        l.requests_per_user,
        Some(Rate {
            count: 20,
            per: Duration::from_secs(1),
            burst: 40
        })
    );
    let requests = l.requests.unwrap();
    assert_eq!((requests.burst, requests.per_second()), (600, 10.0));
    assert_eq!(requests.to_string(), "600/min");
    assert_eq!(l.calls[0].tools, ["write*"]);
    assert_eq!(l.calls[0].per, Scope::Tenant);
    assert_eq!(
        (l.calls[1].upstream.as_str(), l.calls[1].per),
        ("*", Scope::User)
    );
    assert_eq!(l.calls[1].tools, ["*"]);
    assert_eq!(l.calls[1].rate.to_string(), "5/h");
    let c = &l.concurrency[0];
    assert_eq!((c.max_in_flight, c.queue), (4, 2));
    assert_eq!(c.queue_timeout, Duration::from_millis(250));
    assert_eq!(l.quotas.calls_per_user_per_day, Some(1000));
    assert_eq!(l.quotas.calls_per_user_per_month, Some(20000));
    assert_eq!(l.on_store_error, StoreErrorPolicy::Closed);
}

#[test]
fn limit_mistakes_are_reported_at_once() {
    assert_eq!(
        errors(&with_limits(
            "      sessions_per_user: 0\n      handshake_timeout: 0s\n      requests_per_user: {rate: 20}\n      requests: {burst: 5}\n      calls:\n        - {upstream: b, rate: 0/s}\n        - {upstream: a, tools: [], rate: 3/week}\n      concurrency:\n        - {upstream: a}\n      on_store_error: maybe\n"
        )),
        vec![
            "sec.yaml:4:26: tenants[0].limits.sessions_per_user: `sessions_per_user` must be from 1 to 10000000, got 0",
            "sec.yaml:5:26: tenants[0].limits.handshake_timeout: `handshake_timeout` must be greater than 0",
            "sec.yaml:6:33: tenants[0].limits.requests_per_user.rate: invalid rate \"20\": expected <count>/<unit> with unit s, min, h or day, e.g. 20/s or 600/min",
            "sec.yaml:7:17: tenants[0].limits.requests: missing required field `rate`",
            "sec.yaml:9:22: tenants[0].limits.calls[0].upstream: \"b\" names no upstream of this tenant (its upstreams: a): the limit would hold nothing",
            "sec.yaml:9:31: tenants[0].limits.calls[0].rate: invalid rate \"0/s\": the count must be at least 1 (to refuse everything, use a policy)",
            "sec.yaml:10:32: tenants[0].limits.calls[1].tools: at least one tool name or pattern is required (leave `tools` out to mean every tool of the upstream)",
            "sec.yaml:10:42: tenants[0].limits.calls[1].rate: invalid rate \"3/week\": unknown unit \"week\"; expected <count>/<unit> with unit s, min, h or day, e.g. 20/s or 600/min",
            "sec.yaml:12:11: tenants[0].limits.concurrency[0]: missing required field `max_in_flight`",
            "sec.yaml:13:23: tenants[0].limits.on_store_error: unknown value `maybe`, expected one of: open, closed",
        ]
    );
}

#[test]
fn trusted_proxies_and_the_anonymous_tenant_warning() {
    let config = ok(&format!(
        "listen: 0.0.0.0:8080\ntrusted_proxies: [10.0.0.0/8, \"fd00::/8\", 192.0.2.7]\ntenants:\n  - name: acme\n{UPSTREAM}"
    ));
    assert_eq!(config.trusted_proxies.len(), 3);
    assert!(config.warnings.is_empty(), "{:?}", config.warnings);
    assert!(config.trusted_proxies[0].contains("10.1.2.3".parse().unwrap()));
    // No trusted proxies, no auth, other hosts can reach the listener: one warning.
    let config = ok(&format!(
        "listen: 0.0.0.0:8080\ntenants:\n  - name: acme\n{UPSTREAM}"
    ));
    let warnings: Vec<String> = config.warnings.iter().map(ToString::to_string).collect();
    assert_eq!(warnings.len(), 1, "{warnings:?}");
    assert!(
        warnings[0].starts_with("sec.yaml:3:5: tenants[0]: tenant \"acme\" has no `auth`")
            && warnings[0].contains("trusted_proxies"),
        "{warnings:?}"
    );
    // On loopback nothing is said.
    assert!(
        ok(&format!("tenants:\n  - name: acme\n{UPSTREAM}"))
            .warnings
            .is_empty()
    );
    assert_eq!(
        errors(&format!(
            "trusted_proxies: [10.1.2.3/8, nope]\nlimits: {{max_session_processes: -1}}\ntenants:\n  - name: acme\n{UPSTREAM}"
        )),
        vec![
            "sec.yaml:1:19: trusted_proxies[0]: invalid trusted proxy \"10.1.2.3/8\": 10.1.2.3 is not the first address of a /8 network (did you mean 10.0.0.0/8?)",
            "sec.yaml:1:31: trusted_proxies[1]: invalid trusted proxy \"nope\": \"nope\" is not an IP address",
            "sec.yaml:2:33: limits.max_session_processes: invalid value: integer `-1`, expected u64",
        ]
    );
}
