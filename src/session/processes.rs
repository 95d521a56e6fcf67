//! Per-session stdio processes on this replica: counted while a session holds them, against
//! the process-wide `limits.max_session_processes` and the tenant's `session_processes`.
//! Lock-free counters; a permit gives its place back when dropped (the link closed, the
//! session ended, or the spawn failed). The caps and their refusals are `limits::sessions`'.

use std::sync::Arc;
use std::sync::atomic::{AtomicU32, Ordering};

use dashmap::DashMap;

/// The counters of one replica.
pub struct Processes {
    total: Arc<AtomicU32>,
    max_total: u32,
    per_tenant: DashMap<Arc<str>, Arc<AtomicU32>>,
}

/// One per-session process's place, given back on drop.
#[derive(Debug)]
pub struct ProcessPermit {
    total: Arc<AtomicU32>,
    tenant: Arc<AtomicU32>,
}

/// Where a live session takes a process it had none reserved for: the replica's counters and
/// its tenant's cap as it was when the session became live here (the tenant's name is the
/// session's, given at `take`: every live session keeps one of these).
#[derive(Clone)]
pub struct ProcessSource {
    processes: Arc<Processes>,
    cap: Option<u32>,
    /// The refusal of a cap, counted (`limits::sessions::process_refusal`).
    refusal: Refusal,
}

/// How a cap that refuses a place is told to the client: `(tenant, cap)` → the refusal.
pub type Refusal = fn(&str, ProcessCap) -> crate::error::LimitRefusal;

impl ProcessSource {
    pub fn new(processes: Arc<Processes>, cap: Option<u32>, refusal: Refusal) -> ProcessSource {
        ProcessSource {
            processes,
            cap,
            refusal,
        }
    }

    /// One place for a session of `tenant`, or the cap that refuses it (counted as a
    /// refusal).
    pub fn take(&self, tenant: &Arc<str>) -> Result<ProcessPermit, crate::error::LimitRefusal> {
        self.processes
            .reserve(tenant, self.cap, 1)
            .map_err(|c| (self.refusal)(tenant, c))?
            .pop()
            .ok_or_else(|| (self.refusal)(tenant, ProcessCap::Total(0)))
    }
}

/// Which cap refused.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum ProcessCap {
    /// `limits.max_session_processes`.
    Total(u32),
    /// The tenant's `session_processes`.
    Tenant(u32),
}

impl Processes {
    pub fn new(max_total: usize) -> Processes {
        Processes {
            total: Arc::default(),
            max_total: u32::try_from(max_total).unwrap_or(u32::MAX),
            per_tenant: DashMap::new(),
        }
    }

    /// `n` places for `tenant`'s processes, all or none.
    pub fn reserve(
        &self,
        tenant: &Arc<str>,
        tenant_cap: Option<u32>,
        n: u32,
    ) -> Result<Vec<ProcessPermit>, ProcessCap> {
        let counter = match self.per_tenant.get(tenant) {
            Some(c) => c.clone(),
            None => self.per_tenant.entry(tenant.clone()).or_default().clone(),
        };
        take(&self.total, n, self.max_total).map_err(|()| ProcessCap::Total(self.max_total))?;
        let cap = tenant_cap.unwrap_or(u32::MAX);
        if take(&counter, n, cap).is_err() {
            self.total.fetch_sub(n, Ordering::AcqRel);
            return Err(ProcessCap::Tenant(cap));
        }
        Ok((0..n)
            .map(|_| ProcessPermit {
                total: self.total.clone(),
                tenant: counter.clone(),
            })
            .collect())
    }

    /// Processes the tenant's sessions hold now on this replica.
    pub fn of_tenant(&self, tenant: &str) -> u32 {
        self.per_tenant
            .get(tenant)
            .map_or(0, |c| c.load(Ordering::Acquire))
    }

    /// Per-session processes of every tenant on this replica.
    pub fn total(&self) -> u32 {
        self.total.load(Ordering::Acquire)
    }
}

/// Adds `n` to `counter` unless that passes `cap`.
fn take(counter: &AtomicU32, n: u32, cap: u32) -> Result<(), ()> {
    counter
        .fetch_update(Ordering::AcqRel, Ordering::Acquire, |held| {
            held.checked_add(n).filter(|next| *next <= cap)
        })
        .map(|_| ())
        .map_err(|_| ())
}

impl Drop for ProcessPermit {
    fn drop(&mut self) {
        self.total.fetch_sub(1, Ordering::AcqRel);
        self.tenant.fetch_sub(1, Ordering::AcqRel);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn caps_hold_all_or_nothing_and_dropped_permits_give_places_back() {
        let p = Processes::new(3);
        let a: Arc<str> = "a".into();
        let b: Arc<str> = "b".into();
        let two = p.reserve(&a, None, 2).expect("two of three");
        assert_eq!(
            p.reserve(&b, None, 2).expect_err("over the total"),
            ProcessCap::Total(3)
        );
        assert_eq!(p.total(), 2, "a refused reservation takes nothing");
        assert_eq!(
            p.reserve(&a, Some(2), 1).expect_err("over the tenant cap"),
            ProcessCap::Tenant(2)
        );
        assert_eq!(p.total(), 2);
        let one = p.reserve(&b, Some(1), 1).expect("b's first");
        assert_eq!(p.of_tenant("b"), 1);
        drop(two);
        assert_eq!((p.total(), p.of_tenant("a")), (1, 0));
        drop(one);
        assert_eq!(p.total(), 0);
    }
}
