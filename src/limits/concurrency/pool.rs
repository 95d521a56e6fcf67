//! Leases this replica holds at one gated upstream beyond the calls it has in flight (Redis
//! store), so an upstream that this replica calls often costs a round trip per many calls
//! instead of one per call. When a call takes a lease from Redis anyway, `take.lua` may grant
//! some more; a later call takes one of those here, and a call that ends puts its lease back
//! here instead of giving it back to Redis. How many are asked follows demand: none for an
//! upstream called now and then, then twice as many each time Redis is asked again within
//! `SWEEP`, up to `MAX_AHEAD`; half otherwise.
//!
//! What keeps the cap exact: a pooled lease is a lease (the sum over all replicas never
//! exceeds the cap), and Redis grants extra ones only out of plenty — at most 1/16 of the
//! slots still free (`SHARE` in `take.lua`) — so near a full cap every call takes and gives
//! back its own lease as without a pool. Leases the pool did not need for a whole `SWEEP` go
//! back to Redis (the keeper's sweep), so other replicas wait at most about two sweeps for
//! slots this one does not use.

use std::sync::Mutex;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::Duration;

use tokio::time::Instant;

/// How often the keeper gives back leases the pool did not need.
pub const SWEEP: Duration = Duration::from_millis(100);
/// The most extra leases one take asks for.
const MAX_AHEAD: u32 = 64;

/// One gated upstream's idle leases on this replica.
#[derive(Default)]
pub struct Pool {
    inner: Mutex<Inner>,
    /// Calls that end put their lease back here (the last take was granted extra leases).
    keeping: AtomicBool,
}

#[derive(Default)]
struct Inner {
    /// Lease numbers held and not in use.
    idle: Vec<u64>,
    /// The fewest idle since the last sweep: that many were not needed.
    low: usize,
    /// Extra leases the next take from Redis asks for.
    ahead: u32,
    /// When Redis was last asked.
    last_take: Option<Instant>,
}

impl Pool {
    /// An idle lease, if the pool holds one.
    pub fn pop(&self) -> Option<u64> {
        let mut inner = self.inner.lock().ok()?;
        let id = inner.idle.pop()?;
        inner.low = inner.low.min(inner.idle.len());
        Some(id)
    }

    /// The extra leases to ask for with a take from Redis at `now`.
    pub fn ask(&self, now: Instant) -> u32 {
        let Ok(mut inner) = self.inner.lock() else {
            return 0;
        };
        let recent = inner
            .last_take
            .is_some_and(|at| now.saturating_duration_since(at) < SWEEP);
        inner.ahead = if recent {
            (inner.ahead * 2).clamp(1, MAX_AHEAD)
        } else {
            inner.ahead / 2
        };
        inner.last_take = Some(now);
        inner.ahead
    }

    /// Keeps the extra leases a take was granted (numbered `first..first + n`), and whether
    /// calls that end keep theirs.
    pub fn granted(&self, first: u64, n: u64) {
        self.keeping.store(n > 0, Ordering::Relaxed);
        if n == 0 {
            return;
        }
        if let Ok(mut inner) = self.inner.lock() {
            inner.idle.extend(first..first + n);
        }
    }

    /// Takes back the lease of a call that ended, if the pool keeps leases now.
    pub fn put_back(&self, id: u64) -> bool {
        if !self.keeping.load(Ordering::Relaxed) {
            return false;
        }
        match self.inner.lock() {
            Ok(mut inner) => {
                inner.idle.push(id);
                true
            }
            Err(_) => false,
        }
    }

    /// The keeper's sweep: the idle leases not needed since the last sweep, to give back.
    pub fn surplus(&self) -> Vec<u64> {
        let Ok(mut inner) = self.inner.lock() else {
            return Vec::new();
        };
        let n = inner.low.min(inner.idle.len());
        let at = inner.idle.len() - n;
        let gone = inner.idle.split_off(at);
        inner.low = inner.idle.len();
        gone
    }
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used)]
    use super::*;

    #[test]
    fn asks_grow_while_takes_follow_each_other_and_shrink_when_they_do_not() {
        let pool = Pool::default();
        let start = Instant::now();
        assert_eq!(pool.ask(start), 0, "a first take asks for nothing extra");
        assert_eq!(pool.ask(start + Duration::from_millis(1)), 1);
        assert_eq!(pool.ask(start + Duration::from_millis(2)), 2);
        let mut t = start + Duration::from_millis(2);
        for _ in 0..10 {
            t += Duration::from_millis(1);
            pool.ask(t);
        }
        assert_eq!(pool.ask(t + Duration::from_millis(1)), MAX_AHEAD);
        assert_eq!(pool.ask(t + Duration::from_secs(1)), MAX_AHEAD / 2);
    }

    #[test]
    fn ended_calls_keep_their_lease_only_while_extra_ones_are_granted() {
        let pool = Pool::default();
        pool.granted(10, 0);
        assert!(!pool.put_back(1), "no extra granted: given back to Redis");
        pool.granted(10, 3);
        assert!(pool.put_back(1));
        let mut taken: Vec<u64> = std::iter::from_fn(|| pool.pop()).collect();
        taken.sort_unstable();
        assert_eq!(taken, [1, 10, 11, 12]);
    }

    #[test]
    fn a_sweep_gives_back_what_was_not_needed_since_the_last_one() {
        let pool = Pool::default();
        pool.granted(1, 8);
        // First sweep after the grant: the pool's low mark starts at 0, nothing goes.
        assert!(pool.surplus().is_empty());
        // Down to 5 idle at the lowest, back to 8: 5 were not needed.
        let used: Vec<u64> = (0..3).map(|_| pool.pop().unwrap()).collect();
        for id in used {
            assert!(pool.put_back(id));
        }
        assert_eq!(pool.surplus().len(), 5);
        // Nothing taken since: the 3 left go at the next sweep.
        assert_eq!(pool.surplus().len(), 3);
        assert!(pool.pop().is_none());
    }
}
