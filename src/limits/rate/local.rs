//! The in-process backend (memory store): buckets and quota counters in a sharded map, a lock
//! per shard held for one entry's update, never one for the whole map. A check charges its
//! entries one by one and gives back what it took when a later one refuses, so it is all or
//! nothing without holding two locks at once. Memory stays bounded: an entry that no longer
//! counts anything (a bucket full again, a quota whose period ended) is dropped by the sweep
//! a shard runs when it has doubled since the last one.

use std::cell::RefCell;
use std::collections::HashMap;
use std::sync::Mutex;
use std::time::Duration;

use super::bucket::{self, BucketCheck, Fnv, MICROS, QuotaCheck, Verdict};

/// Shards of the map: enough that two cores (or sixty-four) rarely meet on one lock.
const SHARDS: usize = 64;
/// A shard is not swept below this many entries.
const MIN_SWEEP: usize = 256;

pub struct LocalRates {
    shards: Box<[Mutex<Shard>]>,
}

struct Shard {
    slots: HashMap<Box<str>, Slot>,
    /// Entries at which the next sweep runs.
    sweep_at: usize,
}

/// A bucket (`until` = when it is full again) or a quota counter (`until` = when its period
/// ends, `used` = calls counted): either way nothing is lost by dropping it after `until`.
#[derive(Debug, Clone, Copy)]
struct Slot {
    until: u64,
    used: u64,
}

/// One entry of a check.
#[derive(Clone, Copy)]
enum Item<'c> {
    Bucket(&'c BucketCheck<'c>),
    Quota(&'c QuotaCheck<'c>),
}

thread_local! {
    /// The key being looked up, built in place: a check allocates only for a new entry.
    static KEY: RefCell<String> = RefCell::new(String::with_capacity(128));
}

impl Default for LocalRates {
    fn default() -> LocalRates {
        LocalRates {
            shards: (0..SHARDS)
                .map(|_| {
                    Mutex::new(Shard {
                        slots: HashMap::new(),
                        sweep_at: MIN_SWEEP,
                    })
                })
                .collect(),
        }
    }
}

impl LocalRates {
    /// Charges every bucket and quota of one check at `now` (µs since the epoch), or none.
    pub fn check(
        &self,
        tenant: &str,
        buckets: &[BucketCheck<'_>],
        quotas: &[QuotaCheck<'_>],
        now: u64,
    ) -> Verdict {
        let items = buckets
            .iter()
            .map(Item::Bucket)
            .chain(quotas.iter().map(Item::Quota));
        for (n, item) in items.clone().enumerate() {
            if self.apply(tenant, item, now, Op::Charge) {
                continue;
            }
            // Refused: give back what the earlier entries took, then find out how long the
            // rest would make the client wait, so the answer names the longest wait.
            for earlier in items.clone().take(n) {
                self.apply(tenant, earlier, now, Op::Refund);
            }
            return self.refusal(tenant, buckets, quotas, now);
        }
        Verdict::Allowed
    }

    /// Entries held now (tests).
    #[cfg(test)]
    fn len(&self) -> usize {
        self.shards
            .iter()
            .map(|s| s.lock().map_or(0, |s| s.slots.len()))
            .sum()
    }

    /// What refuses, looked at without charging anything.
    fn refusal(
        &self,
        tenant: &str,
        buckets: &[BucketCheck<'_>],
        quotas: &[QuotaCheck<'_>],
        now: u64,
    ) -> Verdict {
        let mut longest: Option<(usize, Duration)> = None;
        for (i, b) in buckets.iter().enumerate() {
            let full_at = self.peek(tenant, Item::Bucket(b)).map_or(0, |s| s.until);
            if let Err(wait) = bucket::charge(full_at, now, b.charge) {
                let wait = Duration::from_micros(wait);
                if longest.is_none_or(|(_, w)| wait > w) {
                    longest = Some((i, wait));
                }
            }
        }
        let quota = quotas.iter().position(|q| {
            let used = self
                .peek(tenant, Item::Quota(q))
                .filter(|s| s.until > now)
                .map_or(0, |s| s.used);
            used.saturating_add(q.cost) > q.limit
        });
        Verdict::Refused {
            bucket: longest,
            quota,
        }
    }

    fn peek(&self, tenant: &str, item: Item<'_>) -> Option<Slot> {
        KEY.with_borrow_mut(|key| {
            let shard = self.shard(key, tenant, item);
            let shard = shard.lock().unwrap_or_else(|p| p.into_inner());
            shard.slots.get(key.as_str()).copied()
        })
    }

    /// Charges (or gives back) one entry under its shard's lock; `false` when it refuses.
    fn apply(&self, tenant: &str, item: Item<'_>, now: u64, op: Op) -> bool {
        KEY.with_borrow_mut(|key| {
            let shard = self.shard(key, tenant, item);
            let mut shard = shard.lock().unwrap_or_else(|p| p.into_inner());
            let current = shard.slots.get(key.as_str()).copied();
            let next = match (item, op) {
                (Item::Bucket(b), Op::Charge) => {
                    let full_at = current.map_or(0, |s| s.until);
                    match bucket::charge(full_at, now, b.charge) {
                        Ok(until) => Slot { until, used: 0 },
                        Err(_) => return false,
                    }
                }
                (Item::Quota(q), Op::Charge) => {
                    let used = current.filter(|s| s.until > now).map_or(0, |s| s.used);
                    if used.saturating_add(q.cost) > q.limit {
                        return false;
                    }
                    Slot {
                        until: q.window.ends.saturating_mul(MICROS),
                        used: used + q.cost,
                    }
                }
                (_, Op::Refund) => {
                    let Some(mut slot) = current else {
                        return true;
                    };
                    match item {
                        Item::Bucket(b) => slot.until = slot.until.saturating_sub(b.charge.cost),
                        Item::Quota(q) => slot.used = slot.used.saturating_sub(q.cost),
                    }
                    slot
                }
            };
            match shard.slots.get_mut(key.as_str()) {
                Some(slot) => *slot = next,
                None => shard.insert(key.as_str().into(), next, now),
            }
            true
        })
    }

    /// Writes `item`'s key into `key` and returns its shard.
    fn shard(&self, key: &mut String, tenant: &str, item: Item<'_>) -> &Mutex<Shard> {
        key.clear();
        key.push_str(tenant);
        key.push('\0');
        let budget = match item {
            Item::Bucket(b) => {
                b.write_key(key);
                b.budget
            }
            Item::Quota(q) => {
                q.window.write_key(key);
                Some(q.budget)
            }
        };
        if let Some(budget) = budget {
            key.push('\0');
            key.push_str(budget);
        }
        let mut h = Fnv::default();
        h.write(key.as_bytes());
        &self.shards[(h.0 % SHARDS as u64) as usize]
    }
}

#[derive(Clone, Copy)]
enum Op {
    Charge,
    Refund,
}

impl Shard {
    /// Adds an entry, first dropping the ones that count nothing any more when the shard has
    /// doubled since the last sweep (amortized: a sweep per as many inserts as it keeps).
    fn insert(&mut self, key: Box<str>, slot: Slot, now: u64) {
        if self.slots.len() >= self.sweep_at {
            self.slots.retain(|_, s| s.until > now);
            self.sweep_at = (self.slots.len() * 2).max(MIN_SWEEP);
        }
        self.slots.insert(key, slot);
    }
}

#[cfg(test)]
mod tests {
    use super::super::bucket::{Charge, LimitName, Period, Window};
    use super::*;
    use crate::config::Rate;

    const NOW: u64 = 1_795_521_600 * MICROS;

    fn per_minute(count: u32) -> Rate {
        Rate {
            count,
            per: Duration::from_secs(60),
            burst: count,
        }
    }

    fn user_bucket<'a>(budget: &'a str, rate: &Rate, n: u32) -> BucketCheck<'a> {
        BucketCheck {
            limit: LimitName::RequestsPerUser,
            selection: 0,
            budget: Some(budget),
            charge: Charge::new(rate, n),
        }
    }

    fn tenant_bucket(rate: &Rate, n: u32) -> BucketCheck<'static> {
        BucketCheck {
            limit: LimitName::Requests,
            selection: 0,
            budget: None,
            charge: Charge::new(rate, n),
        }
    }

    #[test]
    fn users_have_their_own_buckets_and_tenants_their_own_keys() {
        let rates = LocalRates::default();
        let r = per_minute(3);
        for _ in 0..3 {
            assert_eq!(
                rates.check("t", &[user_bucket("alice", &r, 1)], &[], NOW),
                Verdict::Allowed
            );
        }
        let refused = rates.check("t", &[user_bucket("alice", &r, 1)], &[], NOW);
        assert_eq!(
            refused,
            Verdict::Refused {
                bucket: Some((0, Duration::from_secs(20))),
                quota: None
            }
        );
        assert_eq!(
            rates.check("t", &[user_bucket("bob", &r, 1)], &[], NOW),
            Verdict::Allowed
        );
        assert_eq!(
            rates.check("other", &[user_bucket("alice", &r, 1)], &[], NOW),
            Verdict::Allowed
        );
    }

    #[test]
    fn a_refused_check_takes_nothing_from_the_buckets_that_had_room() {
        let rates = LocalRates::default();
        let user = per_minute(10);
        let tenant = per_minute(2);
        let both = |budget| [user_bucket(budget, &user, 1), tenant_bucket(&tenant, 1)];
        assert_eq!(rates.check("t", &both("a"), &[], NOW), Verdict::Allowed);
        assert_eq!(rates.check("t", &both("a"), &[], NOW), Verdict::Allowed);
        // The tenant's bucket is empty: refused, naming it (index 1), 30 s to wait.
        assert_eq!(
            rates.check("t", &both("a"), &[], NOW),
            Verdict::Refused {
                bucket: Some((1, Duration::from_secs(30))),
                quota: None
            }
        );
        // Alice's own bucket was not charged by the refusals: 8 of her 10 are left.
        let mut passed = 0;
        while rates.check("t", &[user_bucket("a", &user, 1)], &[], NOW) == Verdict::Allowed {
            passed += 1;
            assert!(passed <= 10, "unbounded");
        }
        assert_eq!(passed, 8);
    }

    #[test]
    fn quotas_count_per_user_per_period_and_refuse_beyond() {
        let rates = LocalRates::default();
        let day = Window::at(Period::Day, NOW / MICROS);
        let quota = |budget| QuotaCheck {
            window: day,
            limit: 2,
            budget,
            cost: 1,
        };
        assert_eq!(rates.check("t", &[], &[quota("a")], NOW), Verdict::Allowed);
        assert_eq!(rates.check("t", &[], &[quota("a")], NOW), Verdict::Allowed);
        assert_eq!(
            rates.check("t", &[], &[quota("a")], NOW),
            Verdict::Refused {
                bucket: None,
                quota: Some(0)
            }
        );
        assert_eq!(rates.check("t", &[], &[quota("b")], NOW), Verdict::Allowed);
        // The next day is another window (another key).
        let tomorrow = NOW + 86_400 * MICROS;
        let next = QuotaCheck {
            window: Window::at(Period::Day, tomorrow / MICROS),
            ..quota("a")
        };
        assert_eq!(rates.check("t", &[], &[next], tomorrow), Verdict::Allowed);
    }

    #[test]
    fn entries_that_count_nothing_are_swept_so_memory_stays_bounded() {
        let rates = LocalRates::default();
        let r = per_minute(600); // full again 100 ms after one request
        let mut now = NOW;
        for i in 0..200_000u32 {
            let budget = format!("client-{i}");
            assert_eq!(
                rates.check("t", &[user_bucket(&budget, &r, 1)], &[], now),
                Verdict::Allowed
            );
            now += 1_000; // 1 ms apart: about 100 buckets are not yet full at any time
        }
        // Without the sweep this would be 200,000.
        let held = rates.len();
        assert!(
            held <= SHARDS * MIN_SWEEP * 2,
            "{held} entries held for about 100 live buckets"
        );
    }
}
