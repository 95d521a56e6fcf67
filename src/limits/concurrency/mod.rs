//! Calls in flight at an upstream (`tenants[].limits.concurrency`): a cap with a bounded queue
//! and a wait limit, to protect backends. A call the router forwards to a gated upstream
//! (`tools/call`, `prompts/get`, `resources/read`) takes a slot first (`Gates::admit`) and
//! holds it in a `Permit` that the request's `ForwardStream` owns: dropped when the answer,
//! a failure, a timeout or a cancellation ends the request, or when it is drained after the
//! client left — it cannot leak. Slots are counted in the process with the memory store
//! (`gate`: a semaphore per tenant and upstream) and leased in Redis with the Redis store
//! (`leases`), so the cap holds across replicas. Which upstreams are gated is resolved when
//! a tenant is (re)loaded (`TenantGates`), so an upstream without a cap costs one look at an
//! empty list per call.

mod gate;
mod leases;
mod pool;

use std::sync::Arc;
use std::time::Duration;

use serde_json::value::RawValue;
use tokio::sync::OwnedSemaphorePermit;

pub use gate::Gate;
use gate::Refused;
use leases::{Lease, Leases};

use super::outcome::{StoreErrors, counted};
use crate::auth::Principal;
use crate::cluster::Redis;
use crate::config::{ConcurrencyLimit, glob};
use crate::error::{GatewayError, LimitRefusal};
use crate::jsonrpc::RawObject;
use crate::limits::TenantView;
use crate::upstream::{Upstream, UpstreamId};

/// What a refused call is told to wait before trying again.
const RETRY_AFTER: Duration = Duration::from_secs(1);

/// The upstreams' gates: slots leased in Redis when the store is, else in the process.
pub struct Gates {
    // Boxed: a Redis handle is large, and there is one `Gates` per process.
    leases: Option<Box<Leases>>,
    store_errors: StoreErrors,
}

/// The gated upstreams of one loaded tenant, each with its gate (kept across reloads by
/// upstream name, so calls in flight keep counting). Empty when the tenant caps nothing.
#[derive(Default)]
pub struct TenantGates(Box<[(UpstreamId, Arc<Gate>)]>);

/// A slot at a gated upstream, given back when dropped. Boxed: every `ForwardStream` has
/// room for one, and only gated calls fill it.
pub struct Permit(#[allow(dead_code)] Box<Held>); // held for its `Drop`

#[allow(dead_code)] // held for their `Drop`
enum Held {
    Local(OwnedSemaphorePermit),
    Leased(Lease),
}

/// The call being gated, named in the audit event of a refused `tools/call`.
#[derive(Clone, Copy)]
pub enum Call<'a> {
    /// A `tools/call` of this tool (the upstream's own name).
    Tool(&'a str),
    /// A `tools/call` forwarded untouched: the name is read from its params if refused.
    ToolIn(Option<&'a RawValue>),
    /// Not a tool call (`prompts/get`, `resources/read`): not audited.
    Other,
}

impl TenantGates {
    /// Resolves which of `upstreams` a `concurrency` entry selects (the first that does),
    /// continuing `previous`'s gates for upstreams of the same name.
    pub fn resolve(
        tenant: &Arc<str>,
        limits: &[ConcurrencyLimit],
        upstreams: &[Arc<Upstream>],
        previous: Option<&TenantGates>,
    ) -> TenantGates {
        if limits.is_empty() {
            return TenantGates::default();
        }
        let mut gates = Vec::new();
        for upstream in upstreams {
            let name = upstream.name();
            let Some((index, limit)) = limits
                .iter()
                .enumerate()
                .find(|(_, l)| glob(&l.upstream, name))
            else {
                continue;
            };
            let kept = previous
                .and_then(|p| p.0.iter().find(|(_, g)| &*g.upstream == name))
                .map(|(_, g)| g.clone());
            let gate = match kept {
                Some(gate) => {
                    gate.update(index, limit);
                    gate
                }
                None => Arc::new(Gate::new(
                    tenant.clone(),
                    upstream.info.name.clone(),
                    index,
                    limit,
                )),
            };
            gates.push((upstream.info.id, gate));
        }
        TenantGates(gates.into())
    }

    /// Sets `switchyard_limit_usage{tenant, limit="concurrency[<i>]"}`: this replica's calls
    /// in flight at the upstreams the entry caps (at scrape time).
    pub fn usage(&self, tenant: &str) {
        let gauge = &crate::metrics::get().limit_usage;
        let mut sums: Vec<(u32, i64)> = Vec::new();
        for (_, gate) in self.0.iter() {
            let n = i64::from(gate.in_flight());
            match sums.iter_mut().find(|(i, _)| *i == gate.index()) {
                Some((_, sum)) => *sum += n,
                None => sums.push((gate.index(), n)),
            }
        }
        for (index, n) in sums {
            gauge
                .with_label_values(&[tenant, &format!("concurrency[{index}]")])
                .set(n);
        }
    }

    /// The gate of `upstream`, if a limit selects it.
    pub fn of(&self, upstream: &Upstream) -> Option<&Arc<Gate>> {
        self.0
            .iter()
            .find(|(id, _)| *id == upstream.info.id)
            .map(|(_, g)| g)
    }
}

impl Gates {
    pub fn new(redis: Option<Redis>) -> Gates {
        Gates {
            leases: redis.map(|r| Box::new(Leases::new(r))),
            store_errors: StoreErrors::default(),
        }
    }

    /// A slot for one call to `upstream`; `None` when no limit selects it (or Redis is down
    /// and the tenant chose `on_store_error: open`). Refused: `-32029` naming
    /// `concurrency[<i>]`, counted, and audited for a `tools/call`; Redis down under
    /// `closed`: `StoreUnavailable`.
    pub async fn admit(
        &self,
        tenant: &TenantView<'_>,
        principal: &Principal,
        upstream: &Upstream,
        call: Call<'_>,
    ) -> Result<Option<Permit>, GatewayError> {
        let Some(gate) = tenant.gates.of(upstream) else {
            return Ok(None);
        };
        // Boxed: waiting (and Redis) is a large state, kept out of the future of every
        // request that has no gate to pass.
        Box::pin(self.take(tenant, principal, gate, call)).await
    }

    async fn take(
        &self,
        tenant: &TenantView<'_>,
        principal: &Principal,
        gate: &Arc<Gate>,
        call: Call<'_>,
    ) -> Result<Option<Permit>, GatewayError> {
        let taken = match &self.leases {
            None => gate.take_local().await.map(Held::Local),
            Some(leases) => match leases.take(gate).await {
                Ok(taken) => taken.map(Held::Leased),
                Err(e) => return self.store_error(tenant, principal, gate, call, &e),
            },
        };
        match taken {
            Ok(held) => Ok(Some(Permit(Box::new(held)))),
            Err(why) => {
                let refusal = counted(tenant.name, refusal(gate, why));
                audit(principal, gate, call, &refusal.limit);
                Err(GatewayError::LimitReached(refusal))
            }
        }
    }

    /// Redis cannot be reached: the tenant's `on_store_error` decides.
    fn store_error(
        &self,
        tenant: &TenantView<'_>,
        principal: &Principal,
        gate: &Gate,
        call: Call<'_>,
        error: &crate::session::StoreError,
    ) -> Result<Option<Permit>, GatewayError> {
        let what = format_args!(
            "calls in flight at upstream {} cannot be counted",
            gate.upstream
        );
        match self
            .store_errors
            .decide(tenant, error, what, "calls are let through uncounted")
        {
            Ok(()) => Ok(None),
            Err(e) => {
                audit(principal, gate, call, "store_error");
                Err(e)
            }
        }
    }
}

fn refusal(gate: &Gate, why: Refused) -> LimitRefusal {
    let s = gate.settings();
    let what = match why {
        Refused::QueueFull => format!(
            "{} calls in flight at upstream {} and {} waiting (concurrency[{}]: max_in_flight {}, queue {})",
            s.max_in_flight, gate.upstream, s.queue, s.index, s.max_in_flight, s.queue
        ),
        Refused::TimedOut => format!(
            "no free slot at upstream {} within {} ms (concurrency[{}]: max_in_flight {})",
            gate.upstream,
            s.queue_timeout.as_millis(),
            s.index,
            s.max_in_flight
        ),
    };
    LimitRefusal {
        limit: format!("concurrency[{}]", s.index),
        what,
        retry_after: RETRY_AFTER,
    }
}

/// A refused `tools/call`, logged like every tool call (`switchyard::audit`).
fn audit(principal: &Principal, gate: &Gate, call: Call<'_>, limit: &str) {
    let tool = match call {
        Call::Tool(t) => std::borrow::Cow::Borrowed(t),
        Call::ToolIn(params) => params
            .and_then(|p| {
                RawObject::parse(p)
                    .ok()?
                    .get_str("name")
                    .map(|n| n.into_owned().into())
            })
            .unwrap_or(std::borrow::Cow::Borrowed("-")),
        Call::Other => return,
    };
    tracing::info!(
        target: "switchyard::audit",
        tenant = &*gate.tenant,
        user = &*principal.user,
        tool = &*crate::telemetry::printable(&tool),
        upstream = &*gate.upstream,
        outcome = "limited",
        limit,
        duration_ms = 0u64,
        "tool call"
    );
}
