//! The connection and request-body keys of `limits:`: defaults, values, and every error.

#![allow(clippy::unwrap_used)]

use std::time::Duration;

use super::*;

const MINIMAL: &str = "tenants:\n  - name: acme\n    upstreams:\n      - name: files\n        stdio: {command: npx}\n";

fn parsed(limits: &str) -> Result<Limits, Vec<String>> {
    parse(
        &format!("limits: {limits}\n{MINIMAL}"),
        "test.yaml",
        &|_| None,
    )
    .map(|c| c.limits)
    .map_err(|e| e.errors.iter().map(ToString::to_string).collect())
}

#[test]
fn an_absent_section_means_the_documented_defaults() {
    let config = parse(MINIMAL, "test.yaml", &|_| None).unwrap();
    assert_eq!(config.limits, Limits::default());
    let b = &config.limits.bodies;
    assert_eq!(b.read_timeout, Duration::from_secs(10));
    assert_eq!(b.min_rate, 64 * 1024);
    assert_eq!(b.max_buffered, 64 << 20);
    let c = &config.limits.connections;
    assert_eq!(c.header_read_timeout, Duration::from_secs(10));
    assert_eq!(c.idle_timeout, Duration::from_secs(60));
    assert_eq!(
        c.max_connections, None,
        "derived from RLIMIT_NOFILE at start"
    );
    assert_eq!(c.max_connections_per_client, 512);
    assert_eq!(c.max_header_bytes, 32 * 1024);
    assert_eq!(c.max_headers, 100);
    assert_eq!(c.http2_max_concurrent_streams, 100);
    assert_eq!(c.http2_keep_alive_interval, Duration::from_secs(30));
    assert_eq!(c.drain_grace, Duration::from_secs(5));
}

#[test]
fn every_key_is_read() {
    let limits = parsed(
        "{body_read_timeout: 2s, min_body_rate: 0, max_buffered_bodies: 8MiB, \
         header_read_timeout: 500ms, idle_timeout: 5m, max_connections: 200, \
         max_connections_per_client: 7, max_header_bytes: 16KiB, max_headers: 40, \
         http2_max_concurrent_streams: 4, http2_keep_alive_interval: 1m, drain_grace: 0s}",
    )
    .unwrap();
    assert_eq!(
        limits.bodies,
        BodyLimits {
            read_timeout: Duration::from_secs(2),
            min_rate: 0,
            max_buffered: 8 << 20,
        }
    );
    assert_eq!(
        limits.connections,
        ConnectionLimits {
            header_read_timeout: Duration::from_millis(500),
            idle_timeout: Duration::from_secs(300),
            max_connections: Some(200),
            max_connections_per_client: 7,
            max_header_bytes: 16 << 10,
            max_headers: 40,
            http2_max_concurrent_streams: 4,
            http2_keep_alive_interval: Duration::from_secs(60),
            drain_grace: Duration::ZERO,
        }
    );
}

#[test]
fn out_of_range_values_are_reported_where_they_are_written() {
    assert_eq!(
        parsed(
            "{header_read_timeout: 0s, idle_timeout: 10, max_connections: 0, \
             max_connections_per_client: -1, max_header_bytes: 4KiB, max_headers: 0, \
             http2_max_concurrent_streams: 100000, body_read_timeout: 0ms}"
        )
        .unwrap_err(),
        vec![
            "test.yaml:1:31: limits.header_read_timeout: `header_read_timeout` must be greater than 0",
            "test.yaml:1:49: limits.idle_timeout: duration needs a unit, e.g. 30s",
            "test.yaml:1:70: limits.max_connections: `max_connections` must be from 1 to 16777216, got 0",
            "test.yaml:1:101: limits.max_connections_per_client: invalid value: integer `-1`, expected u64",
            "test.yaml:1:123: limits.max_header_bytes: `max_header_bytes` must be at least 8KiB, got 4KiB",
            "test.yaml:1:142: limits.max_headers: `max_headers` must be from 1 to 10000, got 0",
            "test.yaml:1:175: limits.http2_max_concurrent_streams: `http2_max_concurrent_streams` must be from 1 to 10000, got 100000",
            "test.yaml:1:202: limits.body_read_timeout: `body_read_timeout` must be greater than 0",
        ]
    );
}

#[test]
fn the_drain_grace_lies_within_the_drain_deadline() {
    assert_eq!(
        parsed("{drain_grace: 10s}")
            .unwrap()
            .connections
            .drain_grace,
        Duration::from_secs(10)
    );
    assert_eq!(
        parsed("{drain_grace: 11s}").unwrap_err(),
        vec![
            "test.yaml:1:23: limits.drain_grace: `drain_grace` must be at most 10s (the drain deadline), got 11s"
        ]
    );
}

#[test]
fn the_body_budget_must_hold_the_largest_body() {
    assert_eq!(
        parsed("{max_body: 8MiB, max_buffered_bodies: 4MiB}").unwrap_err(),
        vec![
            "test.yaml:1:47: limits.max_buffered_bodies: `max_buffered_bodies` (4MiB) must be at least `max_body` (8MiB): a body of the largest allowed size could never be read"
        ]
    );
    // Only `max_body` written: the message says which key to add.
    assert_eq!(
        parsed("{max_body: 128MiB}").unwrap_err(),
        vec![
            "test.yaml:1:20: limits.max_body: `max_buffered_bodies` (64MiB) must be at least `max_body` (128MiB): a body of the largest allowed size could never be read; set `max_buffered_bodies` too"
        ]
    );
    assert_eq!(
        parsed("{max_body: 128MiB, max_buffered_bodies: 1GiB}")
            .unwrap()
            .bodies
            .max_buffered,
        1 << 30
    );
}
