//! What the limits read of the tenant a request loaded: its name, its config (`limits`,
//! `on_store_error`) and its gates. `tenant::Tenant`, above (it holds the gates), lends this
//! view (`Tenant::for_limits`), so the limits never name it.

use std::sync::Arc;

use super::concurrency::TenantGates;
use crate::config::TenantConfig;

/// A tenant as the limits see it.
#[derive(Clone, Copy)]
pub struct TenantView<'a> {
    pub name: &'a Arc<str>,
    pub config: &'a TenantConfig,
    /// The upstreams a `limits.concurrency` entry caps, resolved when the tenant was loaded.
    pub gates: &'a TenantGates,
}
