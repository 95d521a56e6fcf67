//! One gated upstream of one tenant (`Gate`): its settings (changed in place by a reload, so
//! calls in flight keep counting), the calls waiting for a slot on this replica (the bounded
//! queue), and the slots themselves when they are counted in the process (memory store): a
//! semaphore, FIFO, whose waiters give up at `queue_timeout`.

use std::sync::atomic::{AtomicU32, AtomicU64, Ordering};
use std::sync::{Arc, OnceLock};
use std::time::Duration;

use tokio::sync::{Notify, OwnedSemaphorePermit, Semaphore};

use super::pool::Pool;
use crate::cluster::Keys;
use crate::config::ConcurrencyLimit;

/// The slots of one upstream of one tenant, and who waits for them on this replica.
pub struct Gate {
    pub(super) tenant: Arc<str>,
    pub(super) upstream: Arc<str>,
    /// Which `concurrency[i]` entry selects the upstream (the refusal's and metric's name).
    index: AtomicU32,
    max_in_flight: AtomicU32,
    queue: AtomicU32,
    queue_timeout_ms: AtomicU64,
    /// Calls of this replica waiting for a slot now (at most `queue`).
    waiting: AtomicU32,
    /// Process-local slots (memory store); `capacity` is what it holds in all, taken or not.
    slots: Arc<Semaphore>,
    capacity: AtomicU32,
    /// Redis store: the key of the upstream's leases (made once), and a wake-up for this
    /// replica's waiters when one of its leases is given back.
    key: OnceLock<String>,
    pub(super) released: Notify,
    /// Redis store: leases this replica holds here beyond its calls in flight.
    pub(super) pool: Pool,
    /// Redis store: this replica's calls in flight here (leases in use).
    pub(super) leased: AtomicU32,
}

/// The settings a call is gated by, read once per call.
#[derive(Debug, Clone, Copy)]
pub(super) struct Settings {
    pub index: u32,
    pub max_in_flight: u32,
    pub queue: u32,
    pub queue_timeout: Duration,
}

/// Why a call got no slot.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(super) enum Refused {
    /// Every slot taken and `queue` calls already waiting on this replica.
    QueueFull,
    /// Waited `queue_timeout` without a slot coming free.
    TimedOut,
}

/// A place in the queue, given up on drop (a slot came, the wait timed out, the client left).
pub(super) struct Waiting<'a>(&'a AtomicU32);

impl Drop for Waiting<'_> {
    fn drop(&mut self) {
        self.0.fetch_sub(1, Ordering::Relaxed);
    }
}

impl Gate {
    pub(super) fn new(
        tenant: Arc<str>,
        upstream: Arc<str>,
        index: usize,
        limit: &ConcurrencyLimit,
    ) -> Gate {
        Gate {
            tenant,
            upstream,
            index: AtomicU32::new(u32::try_from(index).unwrap_or(u32::MAX)),
            max_in_flight: AtomicU32::new(limit.max_in_flight),
            queue: AtomicU32::new(limit.queue),
            queue_timeout_ms: AtomicU64::new(millis(limit.queue_timeout)),
            waiting: AtomicU32::new(0),
            slots: Arc::new(Semaphore::new(limit.max_in_flight as usize)),
            capacity: AtomicU32::new(limit.max_in_flight),
            key: OnceLock::new(),
            released: Notify::new(),
            pool: Pool::default(),
            leased: AtomicU32::new(0),
        }
    }

    /// A reload's settings for the same upstream: the next call is gated by them; calls in
    /// flight keep their slots (a smaller cap is reached as they end).
    pub(super) fn update(&self, index: usize, limit: &ConcurrencyLimit) {
        self.index
            .store(u32::try_from(index).unwrap_or(u32::MAX), Ordering::Relaxed);
        self.max_in_flight
            .store(limit.max_in_flight, Ordering::Relaxed);
        self.queue.store(limit.queue, Ordering::Relaxed);
        self.queue_timeout_ms
            .store(millis(limit.queue_timeout), Ordering::Relaxed);
        self.resize(limit.max_in_flight);
    }

    pub(super) fn settings(&self) -> Settings {
        Settings {
            index: self.index.load(Ordering::Relaxed),
            max_in_flight: self.max_in_flight.load(Ordering::Relaxed),
            queue: self.queue.load(Ordering::Relaxed),
            queue_timeout: Duration::from_millis(self.queue_timeout_ms.load(Ordering::Relaxed)),
        }
    }

    /// A place among this replica's waiters, if fewer than `queue` wait.
    pub(super) fn enqueue(&self, queue: u32) -> Option<Waiting<'_>> {
        self.waiting
            .fetch_update(Ordering::Relaxed, Ordering::Relaxed, |n| {
                (n < queue).then_some(n + 1)
            })
            .ok()
            .map(|_| Waiting(&self.waiting))
    }

    /// This replica's calls in flight at the upstream now (either store).
    pub fn in_flight(&self) -> u32 {
        let local = self
            .capacity
            .load(Ordering::Relaxed)
            .saturating_sub(u32::try_from(self.slots.available_permits()).unwrap_or(u32::MAX));
        local + self.leased.load(Ordering::Relaxed)
    }

    /// Which `concurrency[i]` entry selects the upstream.
    pub fn index(&self) -> u32 {
        self.index.load(Ordering::Relaxed)
    }

    /// Whether calls of this replica wait for a slot now.
    pub(super) fn has_waiters(&self) -> bool {
        self.waiting.load(Ordering::Relaxed) > 0
    }

    /// The key of this upstream's leases in Redis.
    pub(super) fn key(&self, keys: &Keys) -> &str {
        self.key
            .get_or_init(|| keys.gate(&self.tenant, &self.upstream))
    }

    /// A process-local slot (memory store): at once if one is free, else after waiting in
    /// the queue (FIFO), at most `queue_timeout`.
    pub(super) async fn take_local(&self) -> Result<OwnedSemaphorePermit, Refused> {
        if let Ok(slot) = self.slots.clone().try_acquire_owned() {
            return Ok(slot);
        }
        let settings = self.settings();
        let _waiting = self.enqueue(settings.queue).ok_or(Refused::QueueFull)?;
        match tokio::time::timeout(settings.queue_timeout, self.slots.clone().acquire_owned()).await
        {
            Ok(Ok(slot)) => Ok(slot),
            // The semaphore is never closed; a timeout is the only other way out.
            Ok(Err(_)) | Err(_) => Err(Refused::TimedOut),
        }
    }

    /// Makes the local semaphore hold `max` slots in all: more at once; fewer as calls end
    /// (the surplus is taken when it comes free, and forgotten).
    fn resize(&self, max: u32) {
        let old = self.capacity.swap(max, Ordering::Relaxed);
        if max > old {
            self.slots.add_permits((max - old) as usize);
        } else if max < old {
            let surplus = old - max;
            let slots = self.slots.clone();
            if let Ok(rt) = tokio::runtime::Handle::try_current() {
                rt.spawn(async move {
                    if let Ok(taken) = slots.acquire_many_owned(surplus).await {
                        taken.forget();
                    }
                });
            }
        }
    }
}

fn millis(d: Duration) -> u64 {
    u64::try_from(d.as_millis()).unwrap_or(u64::MAX)
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used)]
    use super::*;

    fn limit(max_in_flight: u32, queue: u32) -> ConcurrencyLimit {
        ConcurrencyLimit {
            upstream: "u".into(),
            max_in_flight,
            queue,
            queue_timeout: Duration::from_secs(5),
        }
    }

    #[tokio::test]
    async fn beyond_the_slots_and_the_queue_a_call_is_refused_at_once() {
        let gate = Gate::new("t".into(), "u".into(), 0, &limit(2, 1));
        let a = gate.take_local().await.unwrap();
        let _b = gate.take_local().await.unwrap();
        let _waiting = gate.enqueue(1).unwrap();
        assert!(gate.enqueue(1).is_none(), "the queue holds one");
        assert_eq!(gate.take_local().await.err(), Some(Refused::QueueFull));
        drop(_waiting);
        drop(a);
        assert!(
            gate.take_local().await.is_ok(),
            "a slot given back is taken"
        );
    }

    #[tokio::test]
    async fn a_reload_resizes_the_slots_without_cutting_calls_short() {
        let gate = Gate::new("t".into(), "u".into(), 0, &limit(1, 0));
        let held = gate.take_local().await.unwrap();
        gate.update(2, &limit(3, 0));
        assert_eq!(gate.settings().index, 2);
        let _more = [
            gate.take_local().await.unwrap(),
            gate.take_local().await.unwrap(),
        ];
        assert_eq!(gate.take_local().await.err(), Some(Refused::QueueFull));
        // Down to 1: the three held stay held; once they end, one slot is left.
        gate.update(0, &limit(1, 0));
        tokio::task::yield_now().await; // the surplus is waited for
        drop(held);
        drop(_more);
        assert_eq!(gate.slots.available_permits(), 1);
    }
}
