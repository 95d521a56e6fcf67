//! Raw serde types of a tenant's `limits:` (same conventions as `raw`: unknown fields rejected,
//! values located, no semantic checks; see `validate_tenant_limits`).

use schemars::JsonSchema;
use serde::Deserialize;

use super::raw::{Dur, Field};
use super::spanned::Sp;

#[derive(Deserialize, JsonSchema)]
#[schemars(rename = "TenantLimits")]
#[serde(deny_unknown_fields)]
pub struct RawTenantLimits {
    pub sessions_per_user: Field<u64>,
    pub sessions: Field<u64>,
    pub handshake_timeout: Field<Dur>,
    pub session_processes: Field<u64>,
    pub in_flight_per_session: Field<u64>,
    pub max_batch: Field<u64>,
    pub requests_per_user: Field<RawRate>,
    pub requests: Field<RawRate>,
    pub calls: Field<Vec<Sp<RawCallLimit>>>,
    pub concurrency: Field<Vec<Sp<RawConcurrency>>>,
    pub quotas: Field<RawQuotas>,
    pub on_store_error: Field<RawStoreErrorPolicy>,
}

/// `{rate: 20/s, burst: 40}`.
#[derive(Deserialize, JsonSchema)]
#[schemars(rename = "Rate")]
#[serde(deny_unknown_fields)]
pub struct RawRate {
    pub rate: Field<String>,
    pub burst: Field<u64>,
}

#[derive(Deserialize, JsonSchema)]
#[schemars(rename = "CallLimit")]
#[serde(deny_unknown_fields)]
pub struct RawCallLimit {
    pub upstream: Field<String>,
    pub tools: Field<Vec<Sp<String>>>,
    pub rate: Field<String>,
    pub burst: Field<u64>,
    pub per: Field<RawScope>,
}

#[derive(Deserialize, JsonSchema, Clone, Copy)]
#[schemars(rename = "Scope")]
#[serde(rename_all = "lowercase")]
pub enum RawScope {
    User,
    Tenant,
}

#[derive(Deserialize, JsonSchema)]
#[schemars(rename = "Concurrency")]
#[serde(deny_unknown_fields)]
pub struct RawConcurrency {
    pub upstream: Field<String>,
    pub max_in_flight: Field<u64>,
    pub queue: Field<u64>,
    pub queue_timeout: Field<Dur>,
}

#[derive(Deserialize, JsonSchema)]
#[schemars(rename = "Quotas")]
#[serde(deny_unknown_fields)]
pub struct RawQuotas {
    pub calls_per_user_per_day: Field<u64>,
    pub calls_per_user_per_month: Field<u64>,
}

#[derive(Deserialize, JsonSchema, Clone, Copy)]
#[schemars(rename = "StoreErrorPolicy")]
#[serde(rename_all = "lowercase")]
pub enum RawStoreErrorPolicy {
    Open,
    Closed,
}
