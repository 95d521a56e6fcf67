//! Session-level caps: live sessions per user and per tenant (`admit` at `initialize`, before
//! any upstream is reached; `refresh` with the record's time-to-live; `release` when the
//! session ends), per-session processes (`reserve_processes`, counted by
//! `session::Processes`), requests in flight per session (`enter_request`, counted by
//! `session::InFlight`), batch length (`check_batch`). The handshake deadline is the
//! gateway's (`gateway::handshake`).
//! Session counts live in Redis with the Redis store (`shared`: one script, one round trip)
//! and in the process with the memory store (`local`); processes and requests in flight are
//! counted per replica.

mod local;
mod shared;

use std::sync::Arc;
use std::time::{Duration, Instant};

use local::LocalSessions;
use shared::{Op, SharedSessions};

use super::outcome::{StoreErrors, counted as counted_refusal};
use crate::cluster::Redis;
use crate::error::{GatewayError, LimitRefusal};
use crate::limits::TenantView;
use crate::session::{
    InFlightGuard, LiveSession, ProcessCap, ProcessPermit, ProcessSource, Processes, StoreError,
};

/// What a client refused a new session is told to wait: sessions end at any moment (a
/// DELETE, a handshake deadline), so a few seconds.
pub const SESSION_RETRY_AFTER: Duration = Duration::from_secs(5);
/// What a request beyond `in_flight_per_session` is told to wait.
const IN_FLIGHT_RETRY_AFTER: Duration = Duration::from_secs(1);

/// The session counters: in Redis when the store is, else in the process; the per-session
/// process counters of this replica.
pub struct SessionCaps {
    backend: Backend,
    pub processes: Arc<Processes>,
    store_errors: StoreErrors,
}

enum Backend {
    Local(LocalSessions),
    // Boxed: a Redis handle is large, and there is one per process.
    Shared(Box<SharedSessions>),
}

/// A session as the counts know it.
pub struct Counted<'a> {
    pub tenant: &'a Arc<str>,
    pub budget: &'a Arc<str>,
    pub id: &'a str,
}

/// What a count said.
#[derive(Debug, Clone, Copy)]
pub enum Outcome {
    /// Done; the tenant has `sessions` live sessions now.
    Counted { sessions: u64 },
    /// The user has `sessions_per_user` live sessions.
    UserFull,
    /// The tenant has `sessions` live sessions.
    TenantFull,
}

impl SessionCaps {
    pub fn new(redis: Option<Redis>, max_session_processes: usize) -> SessionCaps {
        SessionCaps {
            backend: match redis {
                Some(r) => Backend::Shared(Box::new(SharedSessions::new(r))),
                None => Backend::Local(LocalSessions::default()),
            },
            processes: Arc::new(Processes::new(max_session_processes)),
            store_errors: StoreErrors::default(),
        }
    }

    /// Counts a new session against `sessions_per_user` (of its budget) and `sessions`, or
    /// refuses it with 429 (nothing counted). Its entries lapse `ttl` after the last refresh.
    /// A Redis failure is decided by the tenant's `on_store_error`.
    pub async fn admit(
        &self,
        tenant: &TenantView<'_>,
        session: &LiveSession,
        ttl: Duration,
    ) -> Result<(), GatewayError> {
        let limits = &tenant.config.limits;
        let counted = counted(session);
        let outcome = match &self.backend {
            Backend::Local(local) => local.admit(
                &counted,
                limits.sessions_per_user,
                limits.sessions,
                ttl,
                Instant::now(),
            ),
            Backend::Shared(shared) => {
                let op = Op::Admit {
                    per_user: limits.sessions_per_user,
                    tenant: limits.sessions,
                };
                match shared.run(&counted, op, ttl).await {
                    Ok(outcome) => outcome,
                    Err(e) => {
                        return self.store_errors.decide(
                            tenant,
                            &e,
                            format_args!("live sessions cannot be counted"),
                            "new sessions are opened uncounted",
                        );
                    }
                }
            }
        };
        let refusal = match outcome {
            Outcome::Counted { sessions } => {
                usage(tenant.name, sessions);
                return Ok(());
            }
            Outcome::UserFull => LimitRefusal {
                limit: "sessions_per_user".into(),
                what: format!("{} live sessions per user", limits.sessions_per_user),
                retry_after: SESSION_RETRY_AFTER,
            },
            Outcome::TenantFull => LimitRefusal {
                limit: "sessions".into(),
                what: format!(
                    "{} live sessions of the tenant",
                    limits.sessions.unwrap_or_default()
                ),
                retry_after: SESSION_RETRY_AFTER,
            },
        };
        Err(GatewayError::TooManyRequests(counted_refusal(
            tenant.name,
            refusal,
        )))
    }

    /// Restarts the session's entries' time (with its record's time-to-live).
    pub async fn refresh(&self, session: &LiveSession, ttl: Duration) {
        let counted = counted(session);
        let outcome = match &self.backend {
            Backend::Local(local) => Ok(local.refresh(&counted, ttl, Instant::now())),
            Backend::Shared(shared) => shared.run(&counted, Op::Refresh, ttl).await,
        };
        self.settle(session, outcome, "refreshed");
    }

    /// Takes an ended session out of the counts (idempotent).
    pub async fn release(&self, session: &LiveSession) {
        let counted = counted(session);
        let outcome = match &self.backend {
            Backend::Local(local) => Ok(local.release(&counted)),
            Backend::Shared(shared) => shared.run(&counted, Op::Release, Duration::ZERO).await,
        };
        self.settle(session, outcome, "released");
    }

    /// `n` per-session processes for a new session of `tenant`, or 429 (nothing taken).
    pub fn reserve_processes(
        &self,
        tenant: &TenantView<'_>,
        n: u32,
    ) -> Result<Vec<ProcessPermit>, GatewayError> {
        let cap = tenant.config.limits.session_processes;
        let permits = self
            .processes
            .reserve(tenant.name, cap, n)
            .map_err(|c| GatewayError::TooManyRequests(process_refusal(tenant.name, c)))?;
        Ok(permits)
    }

    /// Where a session live on this replica takes a process it had none reserved for (one
    /// continued from another replica).
    pub fn process_source(&self, tenant: &TenantView<'_>) -> ProcessSource {
        ProcessSource::new(
            self.processes.clone(),
            tenant.config.limits.session_processes,
            process_refusal,
        )
    }

    /// Sets `switchyard_limit_usage{tenant, limit="session_processes"}` (at scrape time).
    pub fn process_usage(&self, tenant: &str) {
        crate::metrics::get()
            .limit_usage
            .with_label_values(&[tenant, "session_processes"])
            .set(i64::from(self.processes.of_tenant(tenant)));
    }

    /// A count that did not refuse: its usage noted, its failure logged.
    fn settle(&self, session: &LiveSession, outcome: Result<Outcome, StoreError>, what: &str) {
        match outcome {
            Ok(Outcome::Counted { sessions }) => usage(&session.key.tenant, sessions),
            Ok(_) => {}
            Err(e) => self.store_errors.note(
                &session.key.tenant,
                &e,
                format_args!("a session's count was not {what} (its entry lapses with the session's time-to-live)"),
            ),
        }
    }
}

/// A place for one more request of `session`, or `-32029` when `in_flight_per_session` are
/// being answered on this replica already.
pub fn enter_request(
    tenant: &TenantView<'_>,
    session: &LiveSession,
) -> Result<InFlightGuard, GatewayError> {
    let max = tenant.config.limits.in_flight_per_session;
    session.in_flight.enter(max).ok_or_else(|| {
        GatewayError::LimitReached(counted_refusal(
            tenant.name,
            LimitRefusal {
                limit: "in_flight_per_session".into(),
                what: format!("{max} requests of one session in flight"),
                retry_after: IN_FLIGHT_RETRY_AFTER,
            },
        ))
    })
}

/// A batch of `members` messages within the tenant's `max_batch`, or 400 before any runs.
pub fn check_batch(tenant: &TenantView<'_>, members: usize) -> Result<(), GatewayError> {
    let max = tenant.config.limits.max_batch;
    if members <= max as usize {
        return Ok(());
    }
    crate::metrics::get()
        .limit_refusals
        .with_label_values(&[tenant.name, "max_batch"])
        .inc();
    Err(GatewayError::BatchTooLong { max, got: members })
}

/// The refusal of a process cap, counted.
pub fn process_refusal(tenant: &str, cap: ProcessCap) -> LimitRefusal {
    let what = match cap {
        ProcessCap::Total(n) => format!("{n} per-session processes on this gateway"),
        ProcessCap::Tenant(n) => format!("{n} per-session processes of the tenant"),
    };
    counted_refusal(
        tenant,
        LimitRefusal {
            limit: "session_processes".into(),
            what,
            retry_after: SESSION_RETRY_AFTER,
        },
    )
}

fn counted(session: &LiveSession) -> Counted<'_> {
    Counted {
        tenant: &session.key.tenant,
        budget: &session.budget,
        id: session.key.id.as_str(),
    }
}

/// Sets `switchyard_limit_usage{tenant, limit="sessions"}`.
fn usage(tenant: &str, sessions: u64) {
    crate::metrics::get()
        .limit_usage
        .with_label_values(&[tenant, "sessions"])
        .set(i64::try_from(sessions).unwrap_or(i64::MAX));
}
