//! Refusals remembered on this replica (Redis store). When Redis refuses a bucket it says how
//! long the charge would wait; tokens only come back with time and other replicas can only
//! take them, so until then the bucket refuses every replica's charge. The replica keeps the
//! time the bucket is full again (as Redis would compute it, on the local clock taken when the
//! check was sent, so it never refuses longer than Redis would) and refuses a client past its
//! budget without a round trip until its tokens are back: a flood from a spent budget costs
//! Redis nothing. A miss (nothing remembered, or the wait is over) asks Redis as before.
//! Bounded: at most `CAPACITY` buckets; past it, entries whose wait is over are dropped, and
//! if none is, nothing new is remembered (Redis keeps deciding).

use std::sync::Mutex;
use std::sync::atomic::{AtomicUsize, Ordering};

use std::collections::HashMap;

use super::bucket::{self, BucketCheck, Fnv, LimitName};

/// Buckets remembered at most.
const CAPACITY: usize = 65_536;
/// Shards of the map (a lock per shard, held for one lookup).
const SHARDS: usize = 16;

/// The time each remembered bucket is full again, by its identity (two independent hashes of
/// tenant, bucket and budget: 128 bits, so a collision is not a concern).
pub struct Refusals {
    shards: Box<[Mutex<HashMap<u64, Entry>>]>,
    len: AtomicUsize,
}

#[derive(Clone, Copy)]
struct Entry {
    check: u64,
    full_at: u64,
}

impl Default for Refusals {
    fn default() -> Refusals {
        Refusals {
            shards: (0..SHARDS).map(|_| Mutex::new(HashMap::new())).collect(),
            len: AtomicUsize::new(0),
        }
    }
}

impl Refusals {
    /// The first of `buckets` that is known to refuse at `now` (microseconds, local clock),
    /// and how long it would wait. Costs one atomic load while nothing is remembered.
    pub fn refusing(
        &self,
        tenant: &str,
        buckets: &[BucketCheck<'_>],
        now: u64,
    ) -> Option<(usize, u64)> {
        if self.len.load(Ordering::Relaxed) == 0 {
            return None;
        }
        buckets.iter().enumerate().find_map(|(i, b)| {
            let (key, check) = identity(tenant, b);
            let entry = *self.shard(key).lock().ok()?.get(&key)?;
            if entry.check != check {
                return None;
            }
            bucket::charge(entry.full_at, now, b.charge)
                .err()
                .map(|wait| (i, wait))
        })
    }

    /// Remembers that Redis refused `b` by `wait` microseconds for a check sent at `sent`.
    pub fn remember(&self, tenant: &str, b: &BucketCheck<'_>, sent: u64, wait: u64) {
        // What Redis computed: the charge would end `wait` past the tolerance, so the bucket is
        // full again at `sent + wait + tolerance - cost`.
        let full_at = (sent + wait + b.charge.tolerance).saturating_sub(b.charge.cost);
        let (key, check) = identity(tenant, b);
        let Ok(mut shard) = self.shard(key).lock() else {
            return;
        };
        if let Some(entry) = shard.get_mut(&key) {
            if entry.check == check {
                entry.full_at = entry.full_at.max(full_at);
            }
            return;
        }
        if self.len.load(Ordering::Relaxed) >= CAPACITY {
            // Drop this shard's entries whose bucket is full again; the others go when their
            // own shard is full.
            let before = shard.len();
            shard.retain(|_, e| e.full_at > sent);
            self.len.fetch_sub(before - shard.len(), Ordering::Relaxed);
            if self.len.load(Ordering::Relaxed) >= CAPACITY {
                return;
            }
        }
        shard.insert(key, Entry { check, full_at });
        self.len.fetch_add(1, Ordering::Relaxed);
    }

    fn shard(&self, key: u64) -> &Mutex<HashMap<u64, Entry>> {
        &self.shards[(key % SHARDS as u64) as usize]
    }

    #[cfg(test)]
    pub fn len(&self) -> usize {
        self.len.load(Ordering::Relaxed)
    }
}

/// Two independent hashes of what names a bucket: its tenant, its limit and selection, its
/// budget.
pub(super) fn identity(tenant: &str, b: &BucketCheck<'_>) -> (u64, u64) {
    let mut one = Fnv::default();
    let mut two = Fnv(0x6c62_272e_07bb_0142);
    let limit: [u8; 9] = match b.limit {
        LimitName::RequestsPerUser => [1, 0, 0, 0, 0, 0, 0, 0, 0],
        LimitName::Requests => [2, 0, 0, 0, 0, 0, 0, 0, 0],
        LimitName::Call(_) => {
            let mut l = [3; 9];
            l[1..].copy_from_slice(&b.selection.to_le_bytes());
            l
        }
    };
    for h in [&mut one, &mut two] {
        h.write(tenant.as_bytes());
        h.write(&[0xff]);
        h.write(&limit);
        match b.budget {
            Some(budget) => {
                h.write(&[1]);
                h.write(budget.as_bytes());
            }
            None => h.write(&[0]),
        }
    }
    (one.0, two.0.rotate_left(17) ^ 0x9e37_79b9_7f4a_7c15)
}

#[cfg(test)]
mod tests {
    use std::time::Duration;

    use super::*;
    use crate::config::Rate;
    use bucket::MICROS;

    fn per_user(budget: &str, count: u32, burst: u32) -> BucketCheck<'_> {
        let rate = Rate {
            count,
            per: Duration::from_secs(60),
            burst,
        };
        bucket::per_user(budget, rate)
    }

    #[test]
    fn a_remembered_refusal_lasts_exactly_until_a_token_is_back() {
        let r = Refusals::default();
        let now = 1_700_000_000 * MICROS;
        let b = per_user("alice", 10, 10); // a token every 6 s
        assert_eq!(r.refusing("acme", &[b], now), None);
        // Redis: the next token is 4 s away.
        r.remember("acme", &b, now, 4 * MICROS);
        assert_eq!(r.refusing("acme", &[b], now), Some((0, 4 * MICROS)));
        assert_eq!(
            r.refusing("acme", &[b], now + 3 * MICROS),
            Some((0, MICROS))
        );
        assert_eq!(r.refusing("acme", &[b], now + 4 * MICROS), None);
        // Another user, another tenant, another limit: not refused.
        assert_eq!(r.refusing("acme", &[per_user("bob", 10, 10)], now), None);
        assert_eq!(r.refusing("other", &[b], now), None);
        let tenant_wide = BucketCheck {
            limit: LimitName::Requests,
            budget: None,
            ..b
        };
        assert_eq!(r.refusing("acme", &[tenant_wide], now), None);
        // A larger burst after a reload lets the client through at once, as Redis would.
        assert_eq!(r.refusing("acme", &[per_user("alice", 10, 20)], now), None);
    }

    #[test]
    fn memory_is_bounded_and_full_buckets_make_room() {
        let r = Refusals::default();
        let now = 1_700_000_000 * MICROS;
        let names: Vec<String> = (0..CAPACITY + 10).map(|i| format!("u{i}")).collect();
        for name in &names {
            r.remember("acme", &per_user(name, 10, 10), now, MICROS);
        }
        assert_eq!(r.len(), CAPACITY);
        // Later, the waits are over: new refusals replace them.
        let later = now + 60 * MICROS;
        r.remember("acme", &per_user("late", 10, 10), later, MICROS);
        assert!(r.len() < CAPACITY);
        assert!(
            r.refusing("acme", &[per_user("late", 10, 10)], later)
                .is_some()
        );
    }
}
