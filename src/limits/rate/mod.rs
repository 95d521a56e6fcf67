//! Token buckets and quotas: requests per user and per tenant (`check_request`, before a
//! session is looked up or created), `tools/call` rates selected by the tool itself and calls
//! per user per UTC day and month (`check_call`, after routing and policy). Each check charges
//! every bucket and counter it involves at once, or none (a batch takes a token per request,
//! all together); the buckets and counters live in Redis with the Redis store (`shared`: one
//! script, one round trip) and in the process with the memory store (`local`). A tenant that
//! configures none of these limits costs nothing here: no lookup, no Redis call.

mod allotted;
mod bucket;
mod local;
mod refused;
mod shared;

use std::time::{Duration, SystemTime, UNIX_EPOCH};

use bucket::{BucketCheck, Charge, LimitName, MICROS, Period, QuotaCheck, Verdict, Window};
use local::LocalRates;
use shared::SharedRates;

use super::outcome::{StoreErrors, counted};
use crate::auth::Principal;
use crate::cluster::Redis;
use crate::config::{Rate, Scope, TenantLimits, glob};
use crate::error::{GatewayError, LimitRefusal};
use crate::limits::TenantView;

/// The buckets and quota counters: in Redis when the store is, else in the process.
pub struct Rates {
    backend: Backend,
    store_errors: StoreErrors,
}

enum Backend {
    Local(LocalRates),
    // Boxed: a Redis handle is large, and there is one `Rates` per process.
    Shared(Box<SharedRates>),
}

impl Rates {
    pub fn new(redis: Option<Redis>) -> Rates {
        Rates {
            backend: match redis {
                Some(r) => Backend::Shared(Box::new(SharedRates::new(r))),
                None => Backend::Local(LocalRates::default()),
            },
            store_errors: StoreErrors::default(),
        }
    }

    /// Whether `limits` count `tools/call` (then the router resolves the tool even where it
    /// could forward the call untouched).
    pub fn limits_calls(limits: &TenantLimits) -> bool {
        !limits.calls.is_empty()
            || limits.quotas.calls_per_user_per_day.is_some()
            || limits.quotas.calls_per_user_per_month.is_some()
    }

    /// Charges `requests` JSON-RPC requests (a batch's at once; notifications and responses
    /// are not counted) to the tenant's `requests_per_user` bucket of the caller's budget and
    /// its `requests` bucket. Refused: 429 with `Retry-After` when a token is back.
    pub async fn check_request(
        &self,
        tenant: &TenantView<'_>,
        principal: &Principal,
        requests: u32,
    ) -> Result<(), GatewayError> {
        let limits = &tenant.config.limits;
        if requests == 0 || (limits.requests_per_user.is_none() && limits.requests.is_none()) {
            return Ok(());
        }
        const NONE: BucketCheck<'static> = BucketCheck {
            limit: LimitName::Requests,
            selection: 0,
            budget: None,
            charge: Charge {
                cost: 0,
                tolerance: 0,
            },
        };
        let mut list = [NONE; 2];
        let mut n = 0;
        let configured = [
            (
                LimitName::RequestsPerUser,
                limits.requests_per_user,
                Some(&*principal.budget),
            ),
            (LimitName::Requests, limits.requests, None),
        ];
        for (limit, rate, budget) in configured {
            let Some(rate) = rate else { continue };
            if requests > rate.burst {
                let refusal = oversized(limits, limit, &rate, requests);
                return Err(GatewayError::TooManyRequests(counted(tenant.name, refusal)));
            }
            list[n] = BucketCheck {
                limit,
                selection: 0,
                budget,
                charge: Charge::new(&rate, requests),
            };
            n += 1;
        }
        let now = now_micros();
        // Boxed: the buckets' check (a store round trip with Redis) is a large state; the
        // callers' futures, which skip it when nothing is limited, need not hold it.
        match Box::pin(self.verdict(tenant, &list[..n], &[], now)).await? {
            Verdict::Allowed => Ok(()),
            Verdict::Refused { bucket, quota } => {
                let refusal = describe(limits, &list[..n], &[], bucket, quota, now);
                Err(GatewayError::TooManyRequests(counted(tenant.name, refusal)))
            }
        }
    }

    /// Charges one call of `tool` (the upstream's own name) at `upstream` to every `calls[i]`
    /// that selects it and to the caller's quotas. Refused: `-32029` inside the session, and
    /// an audit event like every tool call's, with outcome `limited`.
    pub async fn check_call(
        &self,
        tenant: &TenantView<'_>,
        principal: &Principal,
        upstream: &str,
        tool: &str,
    ) -> Result<(), GatewayError> {
        let limits = &tenant.config.limits;
        if !Rates::limits_calls(limits) {
            return Ok(());
        }
        let budget = &*principal.budget;
        let buckets: Vec<BucketCheck<'_>> = limits
            .calls
            .iter()
            .enumerate()
            .filter(|(_, c)| glob(&c.upstream, upstream) && c.tools.iter().any(|p| glob(p, tool)))
            .map(|(i, c)| BucketCheck {
                limit: LimitName::Call(i),
                selection: bucket::selection(&c.upstream, &c.tools, c.per == Scope::Tenant),
                budget: (c.per == Scope::User).then_some(budget),
                charge: Charge::new(&c.rate, 1),
            })
            .collect();
        let now = now_micros();
        let mut quotas = [None, None];
        let configured = [
            (Period::Day, limits.quotas.calls_per_user_per_day),
            (Period::Month, limits.quotas.calls_per_user_per_month),
        ];
        for (slot, (period, limit)) in quotas.iter_mut().zip(configured) {
            *slot = limit.map(|limit| QuotaCheck {
                window: Window::at(period, now / MICROS),
                limit,
                budget,
                cost: 1,
            });
        }
        let quotas: Vec<QuotaCheck<'_>> = quotas.into_iter().flatten().collect();
        if buckets.is_empty() && quotas.is_empty() {
            return Ok(());
        }
        // Boxed, as in `check_request`.
        let verdict = Box::pin(self.verdict(tenant, &buckets, &quotas, now)).await;
        let refusal = match verdict {
            Ok(Verdict::Allowed) => return Ok(()),
            Ok(Verdict::Refused { bucket, quota }) => {
                let refusal = describe(limits, &buckets, &quotas, bucket, quota, now);
                audit(tenant, principal, upstream, tool, &refusal.limit);
                return Err(GatewayError::LimitReached(counted(tenant.name, refusal)));
            }
            Err(e) => e,
        };
        audit(tenant, principal, upstream, tool, "store_error");
        Err(refusal)
    }

    /// Charges one check; a Redis failure is decided by the tenant's `on_store_error`.
    async fn verdict(
        &self,
        tenant: &TenantView<'_>,
        buckets: &[BucketCheck<'_>],
        quotas: &[QuotaCheck<'_>],
        now: u64,
    ) -> Result<Verdict, GatewayError> {
        let error = match &self.backend {
            Backend::Local(local) => return Ok(local.check(tenant.name, buckets, quotas, now)),
            Backend::Shared(shared) => {
                match shared.check(tenant.name, buckets, quotas, now).await {
                    Ok(verdict) => return Ok(verdict),
                    Err(e) => e,
                }
            }
        };
        self.store_errors.decide(
            tenant,
            &error,
            format_args!("rate limits cannot be checked"),
            "requests are let through unchecked",
        )?;
        Ok(Verdict::Allowed)
    }
}

/// A refused `tools/call`, logged like every tool call (`switchyard::audit`).
fn audit(tenant: &TenantView<'_>, principal: &Principal, upstream: &str, tool: &str, limit: &str) {
    tracing::info!(
        target: "switchyard::audit",
        tenant = &**tenant.name,
        user = &*principal.user,
        tool = &*crate::telemetry::printable(tool),
        upstream,
        outcome = "limited",
        limit,
        duration_ms = 0u64,
        "tool call"
    );
}

/// The refusal of a check: the limit that makes the client wait longest, and that wait.
fn describe(
    limits: &TenantLimits,
    buckets: &[BucketCheck<'_>],
    quotas: &[QuotaCheck<'_>],
    bucket: Option<(usize, Duration)>,
    quota: Option<usize>,
    now: u64,
) -> LimitRefusal {
    let quota = quota.and_then(|i| quotas.get(i)).map(|q| {
        let wait = Duration::from_secs(q.window.ends.saturating_sub(now / MICROS).max(1));
        (q, wait)
    });
    let bucket = bucket.and_then(|(i, wait)| Some((buckets.get(i)?, wait)));
    match (bucket, quota) {
        (Some((b, wait)), q) if q.is_none_or(|(_, qw)| wait > qw) => LimitRefusal {
            limit: limit_name(b.limit),
            what: bucket_what(limits, b.limit),
            retry_after: wait,
        },
        (_, Some((q, wait))) => {
            let (name, per) = match q.window.period {
                Period::Day => ("quotas.calls_per_user_per_day", "day"),
                Period::Month => ("quotas.calls_per_user_per_month", "month"),
            };
            LimitRefusal {
                limit: name.into(),
                what: format!("{} tool calls per user per {per} (UTC)", q.limit),
                retry_after: wait,
            }
        }
        // A backend that refuses names what refused; should none, the request rate is blamed.
        _ => LimitRefusal {
            limit: "requests".into(),
            what: "a rate limit".into(),
            retry_after: Duration::from_secs(1),
        },
    }
}

/// A batch larger than a bucket's burst can never pass at once: refused, asking the client to
/// wait for a full bucket (and to send fewer requests at a time).
fn oversized(limits: &TenantLimits, limit: LimitName, rate: &Rate, requests: u32) -> LimitRefusal {
    LimitRefusal {
        limit: limit_name(limit),
        what: format!(
            "{}: a batch of {requests} requests is more than its burst of {}; send fewer at a time",
            bucket_what(limits, limit),
            rate.burst
        ),
        retry_after: rate.per,
    }
}

fn limit_name(limit: LimitName) -> String {
    match limit {
        LimitName::RequestsPerUser => "requests_per_user".into(),
        LimitName::Requests => "requests".into(),
        LimitName::Call(i) => format!("calls[{i}]"),
    }
}

/// The limit in words: "the request rate per user (600/min, burst 600)".
fn bucket_what(limits: &TenantLimits, limit: LimitName) -> String {
    let shown = |r: &Rate| format!("{r}, burst {}", r.burst);
    match limit {
        LimitName::RequestsPerUser => match &limits.requests_per_user {
            Some(r) => format!("the request rate per user ({})", shown(r)),
            None => "the request rate per user".into(),
        },
        LimitName::Requests => match &limits.requests {
            Some(r) => format!("the tenant's request rate ({})", shown(r)),
            None => "the tenant's request rate".into(),
        },
        LimitName::Call(i) => match limits.calls.get(i) {
            Some(c) => format!(
                "the call rate of {} tools {} ({} {})",
                c.upstream,
                c.tools.join(", "),
                shown(&c.rate),
                match c.per {
                    Scope::User => "per user",
                    Scope::Tenant => "for the whole tenant",
                }
            ),
            None => "a call rate".into(),
        },
    }
}

/// Microseconds since the Unix epoch (the memory backend's clock; Redis uses its own).
fn now_micros() -> u64 {
    SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .map_or(0, |d| u64::try_from(d.as_micros()).unwrap_or(u64::MAX))
}

#[cfg(test)]
mod tests;
