//! Validation of a tenant's `limits:` (defaults and meanings in `tenant_limits.rs`).

use std::time::Duration;

use super::raw::Field;
use super::raw_tenant_limits::{
    RawCallLimit, RawConcurrency, RawRate, RawScope, RawStoreErrorPolicy, RawTenantLimits,
};
use super::rules_security::{self, glob};
use super::spanned::Sp;
use super::tenant_limits::{
    CallLimit, ConcurrencyLimit, DEFAULT_QUEUE, DEFAULT_QUEUE_TIMEOUT, Quotas, Rate, Scope,
    StoreErrorPolicy, TenantLimits,
};
use super::validate::{Checker, shown};
use super::validate_limits::count;
use super::validate_security::checked_list;

/// Upper bounds that catch typos (an extra digit) rather than encode policy.
const MAX_SESSIONS: u64 = 10_000_000;
const MAX_IN_FLIGHT: u64 = 100_000;
const MAX_BATCH: u64 = 10_000;
const MAX_BURST: u64 = 100_000_000;

/// `tenants[].limits`; `upstreams` are the tenant's upstream names (`None` when they were
/// invalid: the patterns are then not checked against them).
pub(super) fn tenant_limits(
    checker: &mut Checker<'_>,
    field: &Field<RawTenantLimits>,
    upstreams: Option<&[&str]>,
) -> Option<TenantLimits> {
    let d = TenantLimits::default();
    let Some(sp) = field else {
        return Some(d);
    };
    let raw = sp.get()?;
    let sessions_per_user = count(
        checker,
        &raw.sessions_per_user,
        (u64::from(d.sessions_per_user), 1, MAX_SESSIONS),
        "sessions_per_user",
    );
    let optional = |checker: &mut Checker<'_>, field: &Field<u64>, max: u64, name: &str| match field
    {
        None => Some(None),
        Some(_) => count(checker, field, (0, 1, max), name).map(|n| u32::try_from(n).ok()),
    };
    let sessions = optional(checker, &raw.sessions, MAX_SESSIONS, "sessions");
    let session_processes = optional(
        checker,
        &raw.session_processes,
        MAX_SESSIONS,
        "session_processes",
    );
    let handshake_timeout = checker.duration(
        &raw.handshake_timeout,
        d.handshake_timeout,
        Duration::from_millis(1),
        "handshake_timeout",
    );
    let in_flight = count(
        checker,
        &raw.in_flight_per_session,
        (u64::from(d.in_flight_per_session), 1, MAX_IN_FLIGHT),
        "in_flight_per_session",
    );
    let max_batch = count(
        checker,
        &raw.max_batch,
        (u64::from(d.max_batch), 1, MAX_BATCH),
        "max_batch",
    );
    let requests_per_user = bucket(checker, &raw.requests_per_user);
    let requests = bucket(checker, &raw.requests);
    let calls = list(checker, &raw.calls, |checker, item| {
        call_limit(checker, item, upstreams)
    });
    let concurrency = list(checker, &raw.concurrency, |checker, item| {
        concurrency_limit(checker, item, upstreams)
    });
    let quotas = raw.quotas.as_ref().map_or(Some(Quotas::default()), |sp| {
        let q = sp.get()?;
        let per_day = optional_u64(checker, &q.calls_per_user_per_day, "calls_per_user_per_day");
        let per_month = optional_u64(
            checker,
            &q.calls_per_user_per_month,
            "calls_per_user_per_month",
        );
        Some(Quotas {
            calls_per_user_per_day: per_day?,
            calls_per_user_per_month: per_month?,
        })
    });
    let on_store_error = match &raw.on_store_error {
        None => Some(d.on_store_error),
        Some(sp) => sp.get().map(|p| match p {
            RawStoreErrorPolicy::Open => StoreErrorPolicy::Open,
            RawStoreErrorPolicy::Closed => StoreErrorPolicy::Closed,
        }),
    };
    Some(TenantLimits {
        sessions_per_user: u32::try_from(sessions_per_user?).ok()?,
        sessions: sessions?,
        handshake_timeout: handshake_timeout?,
        session_processes: session_processes?,
        in_flight_per_session: u32::try_from(in_flight?).ok()?,
        max_batch: u32::try_from(max_batch?).ok()?,
        requests_per_user: requests_per_user?,
        requests: requests?,
        calls: calls?,
        concurrency: concurrency?,
        quotas: quotas?,
        on_store_error: on_store_error?,
    })
}

fn optional_u64(checker: &mut Checker<'_>, field: &Field<u64>, name: &str) -> Option<Option<u64>> {
    match field {
        None => Some(None),
        Some(_) => count(checker, field, (0, 1, u64::MAX >> 1), name).map(|n| Some(n as u64)),
    }
}

/// Every item of a list, each checked (all reported), or `None` if any was invalid.
fn list<R, T>(
    checker: &mut Checker<'_>,
    field: &Field<Vec<Sp<R>>>,
    mut item: impl FnMut(&mut Checker<'_>, &Sp<R>) -> Option<T>,
) -> Option<Vec<T>> {
    let Some(sp) = field else {
        return Some(Vec::new());
    };
    let items: Vec<Option<T>> = sp.get()?.iter().map(|i| item(checker, i)).collect();
    items.into_iter().collect()
}

/// `{rate: N/unit, burst: B}` (burst defaults to N).
fn bucket(checker: &mut Checker<'_>, field: &Field<RawRate>) -> Option<Option<Rate>> {
    let Some(sp) = field else {
        return Some(None);
    };
    let raw = sp.get()?;
    rate(checker, &sp.loc, &raw.rate, &raw.burst).map(Some)
}

/// A rate and its optional burst; `rate` is required.
fn rate(
    checker: &mut Checker<'_>,
    parent: &super::spanned::Loc,
    field: &Field<String>,
    burst: &Field<u64>,
) -> Option<Rate> {
    let Some(sp) = field else {
        checker.missing(parent, "rate");
        return None;
    };
    let text = sp.get()?;
    let (count, per) = match parse_rate(text) {
        Ok(r) => r,
        Err(problem) => {
            checker.error(&sp.loc, format!("invalid rate {}: {problem}", shown(sp)));
            return None;
        }
    };
    let burst = match burst {
        None => count,
        Some(_) => u32::try_from(super::validate_limits::count(
            checker,
            burst,
            (0, 1, MAX_BURST),
            "burst",
        )?)
        .ok()?,
    };
    Some(Rate { count, per, burst })
}

/// `N/s`, `N/min`, `N/h`, `N/day` (also `second`, `minute`, `hour`, `d`).
pub fn parse_rate(text: &str) -> Result<(u32, Duration), String> {
    const EXPECTED: &str =
        "expected <count>/<unit> with unit s, min, h or day, e.g. 20/s or 600/min";
    let (count, unit) = text.trim().split_once('/').ok_or(EXPECTED)?;
    let count: u32 = count
        .trim()
        .parse()
        .map_err(|_| format!("{count:?} is not a whole number; {EXPECTED}"))?;
    if count == 0 {
        return Err("the count must be at least 1 (to refuse everything, use a policy)".into());
    }
    let per = match unit.trim() {
        "s" | "sec" | "second" => 1,
        "m" | "min" | "minute" => 60,
        "h" | "hour" => 3600,
        "d" | "day" => 86_400,
        other => return Err(format!("unknown unit {other:?}; {EXPECTED}")),
    };
    Ok((count, Duration::from_secs(per)))
}

/// `upstream:`, required, and it must name at least one upstream of the tenant.
fn upstream_field(
    checker: &mut Checker<'_>,
    parent: &super::spanned::Loc,
    field: &Field<String>,
    upstreams: Option<&[&str]>,
) -> Option<String> {
    let Some(sp) = field else {
        checker.missing(parent, "upstream");
        return None;
    };
    let pattern = sp.get()?;
    if let Err(problem) = rules_security::upstream_pattern(pattern) {
        checker.error(
            &sp.loc,
            format!("invalid upstream {}: {problem}", shown(sp)),
        );
        return None;
    }
    if let Some(names) = upstreams
        && !names.iter().any(|u| glob(pattern, u))
    {
        checker.error(
            &sp.loc,
            format!(
                "{} names no upstream of this tenant (its upstreams: {}): the limit would hold nothing",
                shown(sp),
                names.join(", ")
            ),
        );
        return None;
    }
    Some(pattern.clone())
}

fn call_limit(
    checker: &mut Checker<'_>,
    item: &Sp<RawCallLimit>,
    upstreams: Option<&[&str]>,
) -> Option<CallLimit> {
    let raw = item.get()?;
    let upstream = upstream_field(checker, &item.loc, &raw.upstream, upstreams);
    let tools = match &raw.tools {
        None => Some(vec!["*".to_owned()]),
        Some(list) if list.get().is_some_and(Vec::is_empty) => {
            checker.error(
                &list.loc,
                "at least one tool name or pattern is required (leave `tools` out to mean every tool of the upstream)",
            );
            None
        }
        Some(_) => checked_list(checker, &raw.tools, "tool pattern", |pattern| {
            rules_security::tool_pattern(pattern).map(|()| pattern.to_owned())
        }),
    };
    let rate = rate(checker, &item.loc, &raw.rate, &raw.burst);
    let per = match &raw.per {
        None => Some(Scope::User),
        Some(sp) => sp.get().map(|s| match s {
            RawScope::User => Scope::User,
            RawScope::Tenant => Scope::Tenant,
        }),
    };
    Some(CallLimit {
        upstream: upstream?,
        tools: tools?,
        rate: rate?,
        per: per?,
    })
}

fn concurrency_limit(
    checker: &mut Checker<'_>,
    item: &Sp<RawConcurrency>,
    upstreams: Option<&[&str]>,
) -> Option<ConcurrencyLimit> {
    let raw = item.get()?;
    let upstream = upstream_field(checker, &item.loc, &raw.upstream, upstreams);
    let max_in_flight = match &raw.max_in_flight {
        None => {
            checker.missing(&item.loc, "max_in_flight");
            None
        }
        Some(_) => count(
            checker,
            &raw.max_in_flight,
            (0, 1, MAX_IN_FLIGHT),
            "max_in_flight",
        ),
    };
    let queue = count(
        checker,
        &raw.queue,
        (u64::from(DEFAULT_QUEUE), 0, MAX_IN_FLIGHT),
        "queue",
    );
    let queue_timeout = checker.duration(
        &raw.queue_timeout,
        DEFAULT_QUEUE_TIMEOUT,
        Duration::from_millis(1),
        "queue_timeout",
    );
    Some(ConcurrencyLimit {
        upstream: upstream?,
        max_in_flight: u32::try_from(max_in_flight?).ok()?,
        queue: u32::try_from(queue?).ok()?,
        queue_timeout: queue_timeout?,
    })
}
