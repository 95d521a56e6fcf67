//! Slots leased in Redis (Redis store), so a cap holds across replicas: one sorted set per
//! gated upstream (`cluster::Keys::gate`), member = lease id (`<replica nonce>:<n>`), score =
//! expiry. A call takes an idle lease of this replica's `Pool` when there is one (no round
//! trip), else one from Redis with one script (`take.lua`: drop expired leases, count, add;
//! it may grant extra leases for the pool). Giving a lease back is off the request's path:
//! it goes back to the pool, or, when the pool keeps none, to this replica's keeper task,
//! which removes what was given back in batches (one `ZREM` per upstream) and wakes this
//! replica's waiters. The keeper also gives back, every `SWEEP`, pooled leases not needed
//! since the last sweep, and every `RENEW_EVERY` renews the leases still held (`renew.lua`),
//! so a long call keeps its slot and a crashed replica's slots come free `LEASE` after its
//! last renewal. A waiting call polls with backoff (or sooner, woken by a local give-back)
//! until `queue_timeout`.

use std::collections::{HashMap, HashSet};
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, LazyLock, OnceLock};
use std::time::Duration;

use tokio::sync::mpsc;
use tokio::time::Instant;

use super::gate::{Gate, Refused};
use super::pool::SWEEP;
use crate::cluster::Redis;
use crate::session::StoreError;

/// How long a lease lives without renewal: what a crashed replica's slot costs.
pub const LEASE: Duration = Duration::from_secs(30);
/// How often held leases are renewed (a third of `LEASE`: two renewals may fail in a row).
const RENEW_EVERY: Duration = Duration::from_secs(10);
/// The first pause of a waiting call between tries, doubled up to `MAX_PAUSE`.
const FIRST_PAUSE: Duration = Duration::from_millis(10);
const MAX_PAUSE: Duration = Duration::from_millis(200);
/// Give-backs handled per batch.
const BATCH: usize = 512;

static TAKE: LazyLock<::redis::Script> =
    LazyLock::new(|| ::redis::Script::new(include_str!("take.lua")));
static RENEW: LazyLock<::redis::Script> =
    LazyLock::new(|| ::redis::Script::new(include_str!("renew.lua")));

/// This replica's leases: how they are taken, and the keeper that renews and gives them back.
pub struct Leases {
    redis: Redis,
    /// Makes lease ids unique across replicas (random per process).
    nonce: Arc<str>,
    next: AtomicU64,
    /// To the keeper task, started with the first lease.
    keeper: OnceLock<mpsc::UnboundedSender<Change>>,
}

/// A slot held in Redis; given back when dropped (the call ended, failed, was cancelled, or
/// the client left).
pub struct Lease {
    gate: Arc<Gate>,
    id: u64,
    keeper: mpsc::UnboundedSender<Change>,
    /// The script said no: there is nothing to give back.
    void: bool,
    /// Known to be held (the script said yes, or it came from the pool): it may go back to
    /// the pool. One whose script never answered goes back to Redis, in case it was taken.
    confirmed: bool,
}

impl Lease {
    fn new(gate: &Arc<Gate>, id: u64, keeper: &mpsc::UnboundedSender<Change>) -> Lease {
        gate.leased.fetch_add(1, Ordering::Relaxed);
        Lease {
            gate: gate.clone(),
            id,
            keeper: keeper.clone(),
            void: false,
            confirmed: false,
        }
    }

    /// The script took nothing: there is nothing to give back.
    fn forgo(&mut self) {
        self.void = true;
        self.gate.leased.fetch_sub(1, Ordering::Relaxed);
    }
}

impl Drop for Lease {
    fn drop(&mut self) {
        if self.void {
            return;
        }
        self.gate.leased.fetch_sub(1, Ordering::Relaxed);
        if self.confirmed && self.gate.pool.put_back(self.id) {
            if self.gate.has_waiters() {
                self.gate.released.notify_waiters();
            }
            return;
        }
        let _ = self
            .keeper
            .send(Change::Released(self.gate.clone(), self.id));
    }
}

/// What the keeper learns of this replica's leases, in order.
enum Change {
    /// Leases `first..first + n` were taken from Redis.
    Taken(Arc<Gate>, u64, u64),
    Released(Arc<Gate>, u64),
}

impl Leases {
    pub fn new(redis: Redis) -> Leases {
        let mut nonce = [0u8; 8];
        let _ = ring::rand::SecureRandom::fill(&ring::rand::SystemRandom::new(), &mut nonce);
        Leases {
            redis,
            nonce: u64::from_be_bytes(nonce).to_string().into(),
            next: AtomicU64::new(1),
            keeper: OnceLock::new(),
        }
    }

    /// A slot at `gate`'s upstream: at once if one is free, else after waiting in this
    /// replica's queue, polling, at most `queue_timeout`. A Redis failure is the caller's to
    /// decide (`on_store_error`).
    pub async fn take(&self, gate: &Arc<Gate>) -> Result<Result<Lease, Refused>, StoreError> {
        let settings = gate.settings();
        if let Some(lease) = self.pooled(gate) {
            return Ok(Ok(lease));
        }
        if let Some(lease) = self.try_take(gate, settings.max_in_flight).await? {
            return Ok(Ok(lease));
        }
        let Some(_waiting) = gate.enqueue(settings.queue) else {
            return Ok(Err(Refused::QueueFull));
        };
        let deadline = Instant::now() + settings.queue_timeout;
        let mut pause = FIRST_PAUSE;
        loop {
            let now = Instant::now();
            if now >= deadline {
                return Ok(Err(Refused::TimedOut));
            }
            tokio::select! {
                _ = gate.released.notified() => {}
                _ = tokio::time::sleep_until((now + pause).min(deadline)) => {}
            }
            pause = (pause * 2).min(MAX_PAUSE);
            if let Some(lease) = self.pooled(gate) {
                return Ok(Ok(lease));
            }
            if let Some(lease) = self.try_take(gate, settings.max_in_flight).await? {
                return Ok(Ok(lease));
            }
        }
    }

    /// An idle lease of this replica's pool: no round trip.
    fn pooled(&self, gate: &Arc<Gate>) -> Option<Lease> {
        let id = gate.pool.pop()?;
        let mut lease = Lease::new(gate, id, self.keeper());
        lease.confirmed = true;
        Some(lease)
    }

    /// One try: `take.lua`, one round trip; extra leases it grants go to the pool.
    async fn try_take(&self, gate: &Arc<Gate>, max: u32) -> Result<Option<Lease>, StoreError> {
        let keeper = self.keeper();
        let extra = gate.pool.ask(Instant::now());
        // Numbers for the lease and every extra one it may bring.
        let id = self.next.fetch_add(1 + u64::from(extra), Ordering::Relaxed);
        // Made before the script runs: should this call be dropped while it runs, the lease
        // it may have taken is given back all the same (extra ones it may have been granted
        // are not renewed, and lapse after `LEASE`).
        let mut lease = Lease::new(gate, id, keeper);
        let mut invocation = TAKE.key(gate.key(&self.redis.keys));
        invocation
            .arg(max)
            .arg(LEASE.as_millis() as u64)
            .arg(&*self.nonce)
            .arg(id)
            .arg(extra);
        let mut conn = self.redis.conn.clone();
        let taken: u64 = self
            .redis
            .run("limit_gates", invocation.invoke_async(&mut conn))
            .await?;
        if taken == 0 {
            lease.forgo();
            return Ok(None);
        }
        let _ = keeper.send(Change::Taken(gate.clone(), id, taken));
        gate.pool.granted(id + 1, taken - 1);
        lease.confirmed = true;
        Ok(Some(lease))
    }

    /// The keeper's inbox; the keeper is started on first use.
    fn keeper(&self) -> &mpsc::UnboundedSender<Change> {
        self.keeper.get_or_init(|| {
            let (tx, rx) = mpsc::unbounded_channel();
            tokio::spawn(keep(self.redis.clone(), self.nonce.clone(), rx));
            tx
        })
    }
}

fn member(nonce: &str, id: u64) -> String {
    format!("{nonce}:{id}")
}

/// The keeper: gives leases back in batches and renews those held, until the `Leases` and
/// every lease are gone.
async fn keep(redis: Redis, nonce: Arc<str>, mut changes: mpsc::UnboundedReceiver<Change>) {
    // Keyed by the gate's address: the gate is kept alive by the entry.
    let mut held: HashMap<usize, (Arc<Gate>, HashSet<u64>)> = HashMap::new();
    let mut renew = tokio::time::interval_at(Instant::now() + RENEW_EVERY, RENEW_EVERY);
    renew.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
    let mut sweep = tokio::time::interval_at(Instant::now() + SWEEP, SWEEP);
    sweep.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
    let mut batch = Vec::with_capacity(BATCH);
    loop {
        tokio::select! {
            n = changes.recv_many(&mut batch, BATCH) => {
                if n == 0 {
                    return;
                }
                give_back(&redis, &nonce, &mut held, batch.drain(..)).await;
            }
            _ = renew.tick() => renew_held(&redis, &nonce, &mut held).await,
            _ = sweep.tick() => {
                // What is in the inbox first: a pooled lease is given back after its take
                // is recorded.
                while let Ok(change) = changes.try_recv() {
                    batch.push(change);
                }
                surplus(&held, &mut batch);
                if !batch.is_empty() {
                    give_back(&redis, &nonce, &mut held, batch.drain(..)).await;
                }
            }
        }
    }
}

/// The pooled leases not needed since the last sweep, as give-backs.
fn surplus(held: &HashMap<usize, (Arc<Gate>, HashSet<u64>)>, out: &mut Vec<Change>) {
    for (gate, _) in held.values() {
        for id in gate.pool.surplus() {
            out.push(Change::Released(gate.clone(), id));
        }
    }
}

/// Records what was taken and removes what was given back: one `ZREM` per upstream, then
/// this replica's waiters there are woken.
async fn give_back(
    redis: &Redis,
    nonce: &str,
    held: &mut HashMap<usize, (Arc<Gate>, HashSet<u64>)>,
    changes: impl Iterator<Item = Change>,
) {
    let mut gone: HashMap<usize, (Arc<Gate>, Vec<String>)> = HashMap::new();
    for change in changes {
        match change {
            Change::Taken(gate, first, n) => {
                let at = Arc::as_ptr(&gate) as usize;
                held.entry(at)
                    .or_insert_with(|| (gate, HashSet::new()))
                    .1
                    .extend(first..first + n);
            }
            Change::Released(gate, id) => {
                let at = Arc::as_ptr(&gate) as usize;
                if let Some((_, ids)) = held.get_mut(&at) {
                    ids.remove(&id);
                    if ids.is_empty() {
                        held.remove(&at);
                    }
                }
                gone.entry(at)
                    .or_insert_with(|| (gate, Vec::new()))
                    .1
                    .push(member(nonce, id));
            }
        }
    }
    for (gate, members) in gone.into_values() {
        let key = gate.key(&redis.keys);
        let mut conn = redis.conn.clone();
        let removed = redis
            .run("limit_gates", async {
                redis::cmd("ZREM")
                    .arg(key)
                    .arg(&members)
                    .query_async::<u64>(&mut conn)
                    .await
            })
            .await;
        if let Err(e) = removed {
            tracing::debug!(tenant = %gate.tenant, upstream = %gate.upstream, error = %e, "slots not given back to Redis: they expire within {} s", LEASE.as_secs());
        }
        gate.released.notify_waiters();
    }
}

/// Renews every lease still held, one script per upstream.
async fn renew_held(
    redis: &Redis,
    nonce: &str,
    held: &mut HashMap<usize, (Arc<Gate>, HashSet<u64>)>,
) {
    for (gate, ids) in held.values() {
        let mut invocation = RENEW.key(gate.key(&redis.keys));
        invocation.arg(LEASE.as_millis() as u64);
        for id in ids {
            invocation.arg(member(nonce, *id));
        }
        let mut conn = redis.conn.clone();
        if let Err(e) = redis
            .run("limit_gates", invocation.invoke_async::<u32>(&mut conn))
            .await
        {
            tracing::warn!(tenant = %gate.tenant, upstream = %gate.upstream, error = %e, "leases of calls in flight not renewed; they expire {} s after their last renewal", LEASE.as_secs());
        }
    }
}
