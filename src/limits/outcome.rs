//! What every limit does alike when it refuses or cannot count: a refusal is counted in
//! `switchyard_limit_refusals_total{tenant,limit}` (`counted`), and a count kept in Redis that
//! fails while Redis cannot be reached is decided by the tenant's `on_store_error`, with a
//! warning at most every `WARNING_EVERY` seconds per kind of limit (`StoreErrors`).

use std::fmt;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::{SystemTime, UNIX_EPOCH};

use crate::config::StoreErrorPolicy;
use crate::error::{GatewayError, LimitRefusal};
use crate::limits::TenantView;
use crate::session::StoreError;

/// How often, at most, one kind of limit logs that Redis cannot be reached.
pub const WARNING_EVERY: u64 = 10;

/// A refusal of `tenant`'s, counted and handed on.
pub fn counted(tenant: &str, refusal: LimitRefusal) -> LimitRefusal {
    crate::metrics::get()
        .limit_refusals
        .with_label_values(&[tenant, refusal.limit.as_str()])
        .inc();
    refusal
}

/// The Redis failures of one kind of limit (rates, session counts, upstream gates).
#[derive(Default)]
pub struct StoreErrors {
    /// Unix seconds of the last warning.
    last_warning: AtomicU64,
}

impl StoreErrors {
    /// A check that Redis could not answer: `Ok` to let it through (`on_store_error: open`),
    /// or `503` counted as `limit="store_error"` (`closed`). `what` says what could not be
    /// counted and `passed` what `open` does ("requests are let through unchecked"); the
    /// failure itself is counted in `switchyard_redis_errors_total` by `Redis::run`.
    pub fn decide(
        &self,
        tenant: &TenantView<'_>,
        error: &StoreError,
        what: fmt::Arguments<'_>,
        passed: &str,
    ) -> Result<(), GatewayError> {
        let policy = tenant.config.limits.on_store_error;
        if self.warning_due(unix_now()) {
            let outcome = match policy {
                StoreErrorPolicy::Open => format!("{passed} (on_store_error: open)"),
                StoreErrorPolicy::Closed => "refused with 503 (on_store_error: closed)".into(),
            };
            tracing::warn!(tenant = %tenant.name, error = %error, "{what}: Redis is unavailable; {outcome} (this warning repeats at most every {WARNING_EVERY} s)");
        }
        match policy {
            StoreErrorPolicy::Open => Ok(()),
            StoreErrorPolicy::Closed => {
                crate::metrics::get()
                    .limit_refusals
                    .with_label_values(&[tenant.name, "store_error"])
                    .inc();
                Err(GatewayError::StoreUnavailable)
            }
        }
    }

    /// A failure nobody is refused for (a count not refreshed or released): logged under the
    /// same bound.
    pub fn note(&self, tenant: &str, error: &StoreError, what: fmt::Arguments<'_>) {
        if self.warning_due(unix_now()) {
            tracing::warn!(tenant = %tenant, error = %error, "{what}: Redis is unavailable (this warning repeats at most every {WARNING_EVERY} s)");
        }
    }

    /// Whether a warning may be logged at `now` (Unix seconds); if so, it is recorded.
    fn warning_due(&self, now: u64) -> bool {
        let last = self.last_warning.load(Ordering::Relaxed);
        now >= last + WARNING_EVERY
            && self
                .last_warning
                .compare_exchange(last, now, Ordering::Relaxed, Ordering::Relaxed)
                .is_ok()
    }
}

fn unix_now() -> u64 {
    SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .map_or(0, |d| d.as_secs())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn redis_failures_are_logged_at_most_once_per_ten_seconds() {
        let errors = StoreErrors::default();
        assert!(errors.warning_due(1_000));
        assert!(!errors.warning_due(1_000));
        assert!(!errors.warning_due(1_009));
        assert!(errors.warning_due(1_010));
        assert!(!errors.warning_due(1_011));
    }
}
