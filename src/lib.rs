//! Switchyard: a multi-tenant MCP gateway. One Streamable HTTP endpoint per tenant in front of
//! many upstream MCP servers (stdio child processes and remote Streamable HTTP servers).
//! See ARCHITECTURE.md for the request path and the code map.

pub mod app;
pub mod auth;
pub mod clock;
pub mod cluster;
pub mod config;
pub mod crypto;
pub mod error;
pub mod events;
pub mod gateway;
pub mod http;
pub mod jsonrpc;
pub mod limits;
pub mod listener;
pub mod metrics;
pub mod policy;
pub mod protocol;
pub mod reload;
pub mod router;
pub mod session;
pub mod signing;
pub mod store;
pub mod telemetry;
pub mod tenant;
pub mod upstream;
pub mod woken;
pub mod workers;

#[cfg(test)]
mod tidy;
