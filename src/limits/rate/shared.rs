//! The Redis backend (Redis store): every bucket and quota counter of one check is charged by
//! one Lua script (`check.lua`) in one round trip, atomically, on Redis's clock, so any
//! number of replicas enforce one limit. Keys are in `cluster::Keys` (`<prefix>:v1:lim:
//! {<tenant>}:...`): one hash tag per tenant, so the script's keys share a Cluster slot.

use std::sync::LazyLock;
use std::time::Duration;

use super::bucket::{BucketCheck, QuotaCheck, Verdict};
use super::refused::Refusals;
use crate::cluster::Redis;
use crate::session::StoreError;

/// Loaded once per Redis (`EVALSHA`, with `EVAL` when Redis does not know it yet).
static SCRIPT: LazyLock<::redis::Script> =
    LazyLock::new(|| ::redis::Script::new(include_str!("check.lua")));

pub struct SharedRates {
    redis: Redis,
    /// Buckets Redis refused, until their tokens are back: refused here without a round trip.
    refusals: Refusals,
}

impl SharedRates {
    pub fn new(redis: Redis) -> SharedRates {
        SharedRates {
            redis,
            refusals: Refusals::default(),
        }
    }

    /// Charges every bucket and quota of one check, or none: one script, one round trip,
    /// bounded by the store's timeout; none while a bucket is known to refuse (`now`: the
    /// local clock, microseconds).
    pub async fn check(
        &self,
        tenant: &str,
        buckets: &[BucketCheck<'_>],
        quotas: &[QuotaCheck<'_>],
        now: u64,
    ) -> Result<Verdict, StoreError> {
        if let Some((i, wait)) = self.refusals.refusing(tenant, buckets, now) {
            return Ok(Verdict::Refused {
                bucket: Some((i, Duration::from_micros(wait))),
                quota: None,
            });
        }
        let keys = &self.redis.keys;
        let mut invocation = SCRIPT.prepare_invoke();
        let mut part = String::with_capacity(24);
        for b in buckets {
            part.clear();
            b.write_key(&mut part);
            invocation.key(keys.rate_bucket(tenant, &part, b.budget));
        }
        for q in quotas {
            part.clear();
            q.window.write_key(&mut part);
            invocation.key(keys.quota(tenant, &part, q.budget));
        }
        invocation.arg(buckets.len());
        for b in buckets {
            invocation.arg(b.charge.cost).arg(b.charge.tolerance);
        }
        for q in quotas {
            // Kept an hour past the period: a replica whose clock is a little behind still
            // finds the count it adds to.
            invocation
                .arg(q.limit)
                .arg(q.cost)
                .arg(q.window.ends + 3600);
        }
        let mut conn = self.redis.conn.clone();
        let (bucket, wait, quota): (usize, u64, usize) = self
            .redis
            .run("limit_rates", invocation.invoke_async(&mut conn))
            .await?;
        if let Some(b) = bucket.checked_sub(1).and_then(|i| buckets.get(i)) {
            self.refusals.remember(tenant, b, now, wait);
        }
        Ok(if bucket == 0 && quota == 0 {
            Verdict::Allowed
        } else {
            Verdict::Refused {
                bucket: (bucket > 0).then(|| (bucket - 1, Duration::from_micros(wait))),
                quota: quota.checked_sub(1),
            }
        })
    }
}
