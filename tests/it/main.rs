//! The integration test binary: every test talks to a gateway over real sockets, with real
//! child processes and real external MCP peers.

mod support;

mod aggregation;
mod ambiguous_json;
mod audit;
mod auth;
mod auth_keys;
mod auth_tokens;
mod batch;
mod catalog;
mod chart;
mod cluster;
mod conformance;
mod cors;
mod event_mirror;
mod floods;
mod fuzz;
mod hostile_bodies;
mod hostile_connections;
mod legacy_sse;
mod limits_concurrency;
mod limits_rates;
mod limits_sessions;
mod logging;
mod metrics;
mod oidc_harness;
mod origin_host;
mod param_headers;
mod process;
mod reload;
mod resources;
mod resume;
mod rolling;
mod schema;
mod sdk_clients;
mod session_store;
mod stateless;
mod stateless_upstream;
mod telemetry;
mod three_upstreams;
mod tls;
mod transport_rules;
mod upstream_http;
mod upstream_sse;
mod upstream_stdio;
