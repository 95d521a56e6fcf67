//! What a refusal says: the limit that makes the client wait longest, its config name, when
//! to retry, and the limit in words.

use super::*;
use crate::config::{CallLimit, Quotas};

fn limits() -> TenantLimits {
    TenantLimits {
        requests_per_user: Some(Rate {
            count: 10,
            per: Duration::from_secs(60),
            burst: 5,
        }),
        calls: vec![CallLimit {
            upstream: "demo".into(),
            tools: vec!["echo".into(), "add*".into()],
            rate: Rate {
                count: 2,
                per: Duration::from_secs(1),
                burst: 2,
            },
            per: Scope::Tenant,
        }],
        quotas: Quotas {
            calls_per_user_per_day: Some(1000),
            calls_per_user_per_month: None,
        },
        ..TenantLimits::default()
    }
}

fn call_bucket() -> BucketCheck<'static> {
    let l = limits();
    BucketCheck {
        limit: LimitName::Call(0),
        selection: 1,
        budget: None,
        charge: Charge::new(&l.calls[0].rate, 1),
    }
}

/// 2026-11-24T23:59:00Z: a minute before the day's quota period ends.
const NOW: u64 = (1_795_564_800 - 60) * MICROS;

fn day_quota() -> QuotaCheck<'static> {
    QuotaCheck {
        window: Window::at(Period::Day, NOW / MICROS),
        limit: 1000,
        budget: "u",
        cost: 1,
    }
}

#[test]
fn a_bucket_refusal_names_the_limit_as_configured_and_when_a_token_is_back() {
    let r = describe(
        &limits(),
        &[call_bucket()],
        &[],
        Some((0, Duration::from_millis(400))),
        None,
        NOW,
    );
    assert_eq!(r.limit, "calls[0]");
    assert_eq!(r.retry_after, Duration::from_millis(400));
    assert_eq!(
        r.what,
        "the call rate of demo tools echo, add* (2/s, burst 2 for the whole tenant)"
    );
    assert_eq!(crate::error::retry_after_secs(r.retry_after), 1);
}

#[test]
fn when_a_quota_and_a_bucket_both_refuse_the_longer_wait_is_given() {
    // The day ends in 60 s: longer than the bucket's 400 ms.
    let r = describe(
        &limits(),
        &[call_bucket()],
        &[day_quota()],
        Some((0, Duration::from_millis(400))),
        Some(0),
        NOW,
    );
    assert_eq!(r.limit, "quotas.calls_per_user_per_day");
    assert_eq!(r.retry_after, Duration::from_secs(60));
    assert_eq!(r.what, "1000 tool calls per user per day (UTC)");
    // A bucket that waits longer than the rest of the day wins.
    let r = describe(
        &limits(),
        &[call_bucket()],
        &[day_quota()],
        Some((0, Duration::from_secs(90))),
        Some(0),
        NOW,
    );
    assert_eq!(r.limit, "calls[0]");
}

#[test]
fn a_batch_beyond_the_burst_is_refused_with_the_reason() {
    let l = limits();
    let rate = l.requests_per_user.expect("configured");
    let r = oversized(&l, LimitName::RequestsPerUser, &rate, 6);
    assert_eq!(r.limit, "requests_per_user");
    assert_eq!(r.retry_after, Duration::from_secs(60));
    assert!(
        r.what
            .contains("a batch of 6 requests is more than its burst of 5"),
        "{}",
        r.what
    );
}

#[test]
fn only_tenants_with_call_limits_or_quotas_have_their_calls_counted() {
    assert!(!Rates::limits_calls(&TenantLimits::default()));
    assert!(Rates::limits_calls(&limits()));
    let quota_only = TenantLimits {
        quotas: Quotas {
            calls_per_user_per_day: None,
            calls_per_user_per_month: Some(5),
        },
        ..TenantLimits::default()
    };
    assert!(Rates::limits_calls(&quota_only));
}
