//! Requests of one session in flight on this replica: a counter the session owns and a guard
//! each request holds until its answer is done (or its stream ends, or it is cancelled).

use std::sync::Arc;
use std::sync::atomic::{AtomicU32, Ordering};

/// A session's requests being answered now on this replica.
#[derive(Debug, Default)]
pub struct InFlight(Arc<AtomicU32>);

/// A request's place; given back on drop.
#[derive(Debug)]
pub struct InFlightGuard(Arc<AtomicU32>);

impl InFlight {
    /// A place for one more request, unless `max` are in flight already.
    pub fn enter(&self, max: u32) -> Option<InFlightGuard> {
        self.0
            .fetch_update(Ordering::AcqRel, Ordering::Acquire, |n| {
                (n < max).then_some(n + 1)
            })
            .ok()
            .map(|_| InFlightGuard(self.0.clone()))
    }

    pub fn count(&self) -> u32 {
        self.0.load(Ordering::Acquire)
    }
}

impl Drop for InFlightGuard {
    fn drop(&mut self) {
        self.0.fetch_sub(1, Ordering::AcqRel);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn bounded_and_given_back() {
        let f = InFlight::default();
        let a = f.enter(2).expect("first");
        let _b = f.enter(2).expect("second");
        assert!(f.enter(2).is_none());
        drop(a);
        assert!(f.enter(2).is_some());
        assert_eq!(f.count(), 1, "the temporary guard was dropped");
    }
}
