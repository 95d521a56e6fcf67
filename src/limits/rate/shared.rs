//! The Redis backend (Redis store): every bucket and quota counter of one check is charged by
//! one Lua script (`check.lua`) in one round trip, atomically, on Redis's clock, so any
//! number of replicas enforce one limit — at most one round trip per check, and far fewer
//! for what this replica charges often, which the script grants it credit for (`allotted`).
//! Keys are in `cluster::Keys` (`<prefix>:v1:lim:{<tenant>}:...`): one hash tag per tenant,
//! so the script's keys share a Cluster slot.

use std::sync::LazyLock;
use std::time::Duration;

use super::allotted::{Allotments, Claim, MAX_ITEMS};
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
    /// Credit granted to this replica: spent here without a round trip.
    allotted: Allotments,
}

impl SharedRates {
    pub fn new(redis: Redis) -> SharedRates {
        SharedRates {
            redis,
            refusals: Refusals::default(),
            allotted: Allotments::default(),
        }
    }

    /// Charges every bucket and quota of one check, or none: from this replica's credit when
    /// it covers every one, else one script, one round trip, bounded by the store's timeout;
    /// none while a bucket is known to refuse (`now`: the local clock, microseconds).
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
        // Who each bucket is, and what credit to ask for. A check with a quota, or with more
        // buckets than `MAX_ITEMS`, always goes to Redis: quota credit not spent would be lost
        // for the rest of the period.
        let mut claims = [Claim::default(); MAX_ITEMS];
        let mut asks = [0u64; MAX_ITEMS];
        let claims = if quotas.is_empty() && buckets.len() <= MAX_ITEMS {
            for (slot, b) in claims.iter_mut().zip(buckets) {
                *slot = Claim::bucket(tenant, b);
            }
            &claims[..buckets.len()]
        } else {
            &claims[..0]
        };
        if self.allotted.spend(claims, now) {
            return Ok(Verdict::Allowed);
        }
        for (ask, claim) in asks.iter_mut().zip(claims) {
            *ask = self.allotted.ask(claim, now);
        }
        let ask = |i: usize| asks.get(i).copied().unwrap_or(0);
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
        for (i, b) in buckets.iter().enumerate() {
            invocation
                .arg(b.charge.cost)
                .arg(b.charge.tolerance)
                .arg(ask(i));
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
        let answer: Vec<u64> = self
            .redis
            .run("limit_rates", invocation.invoke_async(&mut conn))
            .await?;
        let &[bucket, wait, quota, ..] = answer.as_slice() else {
            return Err(StoreError::Unavailable(
                "the rate script answered fewer than three numbers".into(),
            ));
        };
        let (bucket, quota) = (bucket as usize, quota as usize);
        if bucket == 0 && quota == 0 {
            for (i, claim) in claims.iter().enumerate() {
                let granted = answer.get(3 + i).copied().unwrap_or(0);
                self.allotted.grant(claim, ask(i), granted, now);
            }
        }
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
