//! Tenant isolation: what one tenant, one user or one runaway agent may take, enforced where
//! a request's life reaches it (see ARCHITECTURE.md, "Limits in a request's life"). Each limit
//! is configured per tenant (`config::TenantLimits`, `tenants[].limits`) and refused with a
//! `LimitRefusal`: `GatewayError::TooManyRequests` (429 + `Retry-After`) before a session
//! serves the request, `GatewayError::LimitReached` (JSON-RPC `-32029`) inside one. With the
//! Redis store the counters live in Redis (one round trip per checked request at most), so N
//! replicas enforce one limit; with the memory store they live in the process.
//!
//! - `rate`: token buckets (requests per user and per tenant, tool calls) and quotas;
//! - `sessions`: live sessions per user and per tenant, the handshake deadline, per-session
//!   processes, requests in flight per session, batch length;
//! - `concurrency`: calls in flight at an upstream, with a bounded queue.

pub mod concurrency;
mod outcome;
pub mod rate;
pub mod sessions;
mod view;

pub use view::TenantView;

use crate::session::SessionBackend;

/// Every limit's state, one per process (the `Gateway`'s); tenants' limits are read from the
/// tenant a request loaded, so a reload changes them without dropping anything.
pub struct Limiter {
    pub rates: rate::Rates,
    pub sessions: sessions::SessionCaps,
    pub concurrency: concurrency::Gates,
}

impl Limiter {
    /// `max_session_processes`: per-session processes of every tenant on this replica.
    pub fn new(store: &SessionBackend, max_session_processes: usize) -> Limiter {
        let redis = store.redis().cloned();
        Limiter {
            rates: rate::Rates::new(redis.clone()),
            sessions: sessions::SessionCaps::new(redis.clone(), max_session_processes),
            concurrency: concurrency::Gates::new(redis),
        }
    }
}
