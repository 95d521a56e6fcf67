//! The integration test binary: every test talks to a gateway over real sockets, with real
//! child processes and real external MCP peers.

mod support;

mod aggregation;
mod catalog;
mod conformance;
mod process;
mod sdk_clients;
mod three_upstreams;
mod transport_rules;
mod upstream_http;
mod upstream_stdio;
