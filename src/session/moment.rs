//! A monotonic moment in eight atomic bytes: what a live session keeps of its last activity
//! and its last store touch (a `Mutex<Instant>` took 24 bytes each, per session).

use std::sync::LazyLock;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::{Duration, Instant};

/// The process's first reading; moments are kept as nanoseconds after it.
static BASE: LazyLock<Instant> = LazyLock::new(Instant::now);

fn nanos(at: Instant) -> u64 {
    u64::try_from(at.saturating_duration_since(*BASE).as_nanos()).unwrap_or(u64::MAX)
}

/// One reading of the clock, for moments moved at the same time (a clock read and its
/// conversion cost a request ~80 instructions each).
#[derive(Clone, Copy)]
pub(super) struct Reading(u64);

impl Reading {
    pub(super) fn take() -> Reading {
        Reading(nanos(Instant::now()))
    }
}

/// An `Instant` that can be read and moved forward without a lock.
pub(super) struct Moment(AtomicU64);

impl Moment {
    pub(super) fn now() -> Moment {
        Moment(AtomicU64::new(nanos(Instant::now())))
    }

    pub(super) fn get(&self) -> Instant {
        *BASE + Duration::from_nanos(self.0.load(Ordering::Relaxed))
    }

    /// Moves it to now when at least `every` has passed since it: true for the one caller
    /// that did (of any that raced), false otherwise.
    pub(super) fn advance_after(&self, every: Duration) -> bool {
        self.advance_at(Reading::take(), every)
    }

    /// Sets it to `at`.
    pub(super) fn set(&self, at: Reading) {
        self.0.store(at.0, Ordering::Relaxed);
    }

    /// [`Moment::advance_after`] with the clock already read (`at`).
    pub(super) fn advance_at(&self, at: Reading, every: Duration) -> bool {
        let every = u64::try_from(every.as_nanos()).unwrap_or(u64::MAX);
        self.advance_to(at.0, every)
    }

    fn advance_to(&self, now: u64, every: u64) -> bool {
        let last = self.0.load(Ordering::Relaxed);
        if now.saturating_sub(last) < every {
            return false;
        }
        self.0
            .compare_exchange(last, now, Ordering::Relaxed, Ordering::Relaxed)
            .is_ok()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_moment_reads_back_what_was_set() {
        let before = Instant::now();
        let m = Moment::now();
        let after = Instant::now();
        assert!(
            m.get() >= before.max(*BASE) && m.get() <= after,
            "{:?}",
            m.get()
        );
        std::thread::sleep(Duration::from_millis(5));
        m.set(Reading::take());
        assert!(m.get() > after);
    }

    #[test]
    fn it_advances_once_per_interval_whoever_asks() {
        let m = Moment::now();
        assert!(!m.advance_after(Duration::from_secs(60)));
        assert!(m.advance_after(Duration::ZERO));

        const HOUR: u64 = 3_600_000_000_000;
        let m = Moment(AtomicU64::new(0));
        let advanced = std::thread::scope(|s| {
            let racers: Vec<_> = (0..8)
                .map(|_| s.spawn(|| m.advance_to(HOUR, HOUR)))
                .collect();
            racers
                .into_iter()
                .map(|racer| racer.join().unwrap_or(false))
                .filter(|&did| did)
                .count()
        });
        assert_eq!(advanced, 1);
        assert_eq!(m.0.load(Ordering::Relaxed), HOUR);
        assert!(!m.advance_to(2 * HOUR - 1, HOUR));
        assert!(m.advance_to(2 * HOUR, HOUR));
    }
}
