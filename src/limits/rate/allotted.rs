//! Credit this replica holds ahead (Redis store), so a bucket that it charges often costs a
//! round trip per many checks instead of one per check. When a check goes to Redis, the
//! script may grant, besides the charge itself, some credit for later charges of the same
//! bucket (microseconds of refill); later checks on this replica spend it without a round
//! trip for at most `HOLD`. How much is asked follows demand: nothing for a
//! bucket charged once, then twice what was asked last each time the credit ran out while it
//! was fresh, up to `MAX_AHEAD` charges; half when it went stale unspent.
//!
//! What keeps the limit exact: credit is taken from the shared count (N replicas never let
//! through more than the limit), and Redis grants it only out of plenty — at most 1/16 of
//! what the bucket has left after the charge (`SHARE` in `check.lua`), in whole charges — so
//! a limit near its end (a small burst, a spent budget) is decided by Redis check by check,
//! as without credit. Credit not spent within `HOLD` is forfeited: the bucket then holds
//! fewer tokens until it refills, by at most what was granted. Quotas get no credit: what
//! was not spent would be lost for the rest of their period. Bounded: at most
//! `CAPACITY` entries; past it, stale ones are dropped, and if none is, nothing new is
//! remembered (checks keep going to Redis).

use std::collections::HashMap;
use std::sync::Mutex;
use std::sync::atomic::{AtomicUsize, Ordering};

use super::bucket::{BucketCheck, MICROS};
use super::refused;

/// How long granted credit may be spent (microseconds).
pub const HOLD: u64 = 2 * MICROS;
/// The most charges one grant covers.
pub const MAX_AHEAD: u64 = 64;
/// Entries remembered at most.
const CAPACITY: usize = 65_536;
/// Shards of the map (a lock per shard, held for one entry).
const SHARDS: usize = 16;
/// The most items one check may have and still be served from credit.
pub const MAX_ITEMS: usize = 8;

/// This replica's credit, by bucket identity (the same 128 bits as `Refusals`).
pub struct Allotments {
    shards: Box<[Mutex<HashMap<u64, Entry>>]>,
    len: AtomicUsize,
}

#[derive(Clone, Copy)]
struct Entry {
    check: u64,
    /// Left to spend: microseconds of the bucket's refill.
    credit: u64,
    /// Local time (microseconds) after which the credit is forfeited.
    until: u64,
    /// Charges the last ask covered (0: none asked).
    ahead: u64,
}

/// One bucket of a check: who it is and what this check costs of it.
#[derive(Clone, Copy, Default)]
pub struct Claim {
    key: u64,
    check: u64,
    pub cost: u64,
}

impl Claim {
    pub fn bucket(tenant: &str, b: &BucketCheck<'_>) -> Claim {
        let (key, check) = refused::identity(tenant, b);
        Claim {
            key,
            check,
            cost: b.charge.cost,
        }
    }
}

impl Default for Allotments {
    fn default() -> Allotments {
        Allotments {
            shards: (0..SHARDS).map(|_| Mutex::new(HashMap::new())).collect(),
            len: AtomicUsize::new(0),
        }
    }
}

impl Allotments {
    /// Spends every claim's cost from fresh credit, or nothing: true when the check is
    /// allowed without Redis. Costs one atomic load while nothing is held.
    pub fn spend(&self, claims: &[Claim], now: u64) -> bool {
        if claims.is_empty() || self.len.load(Ordering::Relaxed) == 0 {
            return false;
        }
        for (i, c) in claims.iter().enumerate() {
            let spent = self
                .lock(c.key)
                .is_some_and(|mut shard| match shard.get_mut(&c.key) {
                    Some(e) if e.check == c.check && e.until > now && e.credit >= c.cost => {
                        e.credit -= c.cost;
                        true
                    }
                    _ => false,
                });
            if !spent {
                self.refund(&claims[..i]);
                return false;
            }
        }
        true
    }

    /// Gives back what `spend` took before a later claim had too little.
    fn refund(&self, claims: &[Claim]) {
        for c in claims {
            if let Some(mut shard) = self.lock(c.key)
                && let Some(e) = shard.get_mut(&c.key)
                && e.check == c.check
            {
                e.credit += c.cost;
            }
        }
    }

    /// How much credit to ask Redis for with this check (microseconds).
    pub fn ask(&self, c: &Claim, now: u64) -> u64 {
        let Some(shard) = self.lock(c.key) else {
            return 0;
        };
        let ahead = match shard.get(&c.key) {
            Some(e) if e.check == c.check && e.until > now => (e.ahead * 2).clamp(1, MAX_AHEAD),
            Some(e) if e.check == c.check => e.ahead / 2,
            _ => 0,
        };
        ahead.saturating_mul(c.cost)
    }

    /// Records what Redis granted for `c` (asked `asked`) with a check sent at `now`; fresh
    /// credit left from before is kept.
    pub fn grant(&self, c: &Claim, asked: u64, granted: u64, now: u64) {
        let Some(mut shard) = self.lock(c.key) else {
            return;
        };
        let ahead = asked / c.cost.max(1);
        let until = now + HOLD;
        if let Some(e) = shard.get_mut(&c.key) {
            let kept = if e.check == c.check && e.until > now {
                e.credit
            } else {
                0
            };
            *e = Entry {
                check: c.check,
                credit: kept + granted,
                until,
                ahead,
            };
            return;
        }
        if self.len.load(Ordering::Relaxed) >= CAPACITY {
            let before = shard.len();
            shard.retain(|_, e| e.until > now);
            self.len.fetch_sub(before - shard.len(), Ordering::Relaxed);
            if self.len.load(Ordering::Relaxed) >= CAPACITY {
                return;
            }
        }
        shard.insert(
            c.key,
            Entry {
                check: c.check,
                credit: granted,
                until,
                ahead,
            },
        );
        self.len.fetch_add(1, Ordering::Relaxed);
    }

    fn lock(&self, key: u64) -> Option<std::sync::MutexGuard<'_, HashMap<u64, Entry>>> {
        self.shards[(key % SHARDS as u64) as usize].lock().ok()
    }

    #[cfg(test)]
    pub fn len(&self) -> usize {
        self.len.load(Ordering::Relaxed)
    }
}

#[cfg(test)]
mod tests {
    use std::time::Duration;

    use super::*;
    use crate::config::Rate;
    use crate::limits::rate::bucket::{self, LimitName};

    fn per_user(budget: &str) -> BucketCheck<'_> {
        let rate = Rate {
            count: 1000,
            per: Duration::from_secs(1),
            burst: 1000,
        };
        bucket::per_user(budget, rate)
    }

    #[test]
    fn asks_grow_while_credit_runs_out_and_shrink_when_it_goes_stale() {
        let a = Allotments::default();
        let now = 1_700_000_000 * MICROS;
        let c = Claim::bucket("acme", &per_user("alice"));
        assert_eq!(c.cost, 1000);
        // Never charged: nothing asked, nothing held.
        assert_eq!(a.ask(&c, now), 0);
        assert!(!a.spend(&[c], now));
        a.grant(&c, 0, 0, now);
        // Charged again while the (empty) entry is fresh: ask for one more charge, then two...
        assert_eq!(a.ask(&c, now + 1), c.cost);
        a.grant(&c, c.cost, c.cost, now + 1);
        assert!(a.spend(&[c], now + 2));
        assert!(!a.spend(&[c], now + 3), "the credit is spent");
        assert_eq!(a.ask(&c, now + 3), 2 * c.cost);
        a.grant(&c, 2 * c.cost, 2 * c.cost, now + 3);
        // Spent each time before the next check: up to MAX_AHEAD charges.
        let mut asked = 2;
        for _ in 0..10 {
            asked = (asked * 2).min(MAX_AHEAD);
            assert_eq!(a.ask(&c, now + 4), asked * c.cost);
            a.grant(&c, asked * c.cost, 0, now + 3);
        }
        assert_eq!(asked, MAX_AHEAD);
        // Stale: forfeited, and half is asked next time.
        let later = now + 3 + HOLD;
        assert!(!a.spend(&[c], later), "stale credit is not spent");
        assert_eq!(a.ask(&c, later), MAX_AHEAD / 2 * c.cost);
    }

    #[test]
    fn a_check_spends_all_of_its_claims_or_none() {
        let a = Allotments::default();
        let now = 1_700_000_000 * MICROS;
        let user = Claim::bucket("acme", &per_user("alice"));
        let tenant_wide = BucketCheck {
            limit: LimitName::Requests,
            budget: None,
            ..per_user("alice")
        };
        let tenant_wide = Claim::bucket("acme", &tenant_wide);
        a.grant(&user, 0, 3 * user.cost, now);
        a.grant(&tenant_wide, 0, tenant_wide.cost, now);
        assert!(a.spend(&[user, tenant_wide], now));
        // The tenant's bucket has no credit left: the user's keeps its two charges.
        assert!(!a.spend(&[user, tenant_wide], now));
        assert!(a.spend(&[user], now));
        assert!(a.spend(&[user], now));
        assert!(!a.spend(&[user], now));
        // Another user's, another tenant's bucket: nothing held.
        assert!(!a.spend(&[Claim::bucket("acme", &per_user("bob"))], now));
        a.grant(&user, 0, user.cost, now);
        assert!(!a.spend(&[Claim::bucket("other", &per_user("alice"))], now));
    }

    #[test]
    fn memory_is_bounded_and_stale_entries_make_room() {
        let a = Allotments::default();
        let now = 1_700_000_000 * MICROS;
        let names: Vec<String> = (0..CAPACITY + 10).map(|i| format!("u{i}")).collect();
        for name in &names {
            a.grant(&Claim::bucket("acme", &per_user(name)), 0, 1000, now);
        }
        assert_eq!(a.len(), CAPACITY);
        let later = now + HOLD + 1;
        let late = Claim::bucket("acme", &per_user("late"));
        a.grant(&late, 0, 1000, later);
        assert!(a.len() < CAPACITY);
        assert!(a.spend(&[late], later));
    }
}
