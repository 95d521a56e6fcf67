//! The arithmetic both backends share, and what one check asks of them. A token bucket is kept
//! as one number, the time it is full again (the generic cell rate algorithm): a request that
//! costs `n` tokens moves it `n` refill intervals later, and passes if it is then no more than
//! `burst` intervals ahead of now. One number per bucket means one key in Redis, which expires
//! exactly when the bucket is full (a full bucket and a missing one are the same), and a
//! memory entry that can be dropped from that moment. Quotas are counters per UTC day or month.
//! Pure: no clock, no IO (times are passed in).

use std::fmt::Write as _;
use std::time::Duration;

use crate::clock::{civil_from_days, days_from_civil};
use crate::config::Rate;

/// Microseconds in a second: both backends count time in microseconds since the Unix epoch,
/// which stay exact in Lua's doubles (below 2^53 until the year 2255).
pub const MICROS: u64 = 1_000_000;

/// The longest span a bucket may hold (about 142 years): keeps every sum exact in Lua.
const MAX_SPAN: u64 = 1 << 52;

/// What one bucket of a check costs and may hold, in microseconds of refill.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Charge {
    /// `n` tokens: `n` refill intervals.
    pub cost: u64,
    /// `burst` tokens: how far ahead of now the bucket may be pushed.
    pub tolerance: u64,
}

impl Charge {
    /// `n` tokens of `rate`. The refill interval is rounded up to the microsecond (a rate is
    /// never exceeded; above a million per second it is a million per second).
    pub fn new(rate: &Rate, n: u32) -> Charge {
        let per = u64::try_from(rate.per.as_micros()).unwrap_or(MAX_SPAN);
        let interval = per.div_ceil(u64::from(rate.count.max(1))).max(1);
        Charge {
            cost: interval.saturating_mul(u64::from(n)).min(MAX_SPAN),
            tolerance: interval.saturating_mul(u64::from(rate.burst)).min(MAX_SPAN),
        }
    }
}

/// Charges a bucket that is full again at `full_at` (0 or any time up to `now`: full) at
/// `now`: its new `full_at`, or how long until the charge would pass (microseconds).
pub fn charge(full_at: u64, now: u64, c: Charge) -> Result<u64, u64> {
    let next = full_at.max(now).saturating_add(c.cost);
    let ahead = next - now;
    if ahead > c.tolerance {
        Err(ahead - c.tolerance)
    } else {
        Ok(next)
    }
}

/// A quota's calendar period (UTC).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Period {
    Day,
    Month,
}

/// One period of a quota: its number and when it ends.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Window {
    pub period: Period,
    /// Days since the epoch, or `year * 100 + month`.
    pub number: u32,
    /// Unix seconds at which the period ends.
    pub ends: u64,
}

impl Window {
    /// The period holding `now` (Unix seconds).
    pub fn at(period: Period, now: u64) -> Window {
        let day = now / 86_400;
        match period {
            Period::Day => Window {
                period,
                number: u32::try_from(day).unwrap_or(u32::MAX),
                ends: (day + 1) * 86_400,
            },
            Period::Month => {
                let (year, month, _) = civil_from_days(day);
                let (next_year, next_month) = if month == 12 {
                    (year + 1, 1)
                } else {
                    (year, month + 1)
                };
                Window {
                    period,
                    number: year * 100 + month,
                    ends: days_from_civil(next_year, next_month) * 86_400,
                }
            }
        }
    }

    /// `d<days>` or `m<yyyymm>`: the period's part of a quota's key.
    pub fn write_key(&self, out: &mut String) {
        let letter = match self.period {
            Period::Day => 'd',
            Period::Month => 'm',
        };
        let _ = write!(out, "{letter}{}", self.number);
    }
}

/// Which configured limit a bucket is: its name in refusals and metrics.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum LimitName {
    RequestsPerUser,
    Requests,
    /// `calls[i]`.
    Call(usize),
}

/// One bucket a check charges.
#[derive(Debug, Clone, Copy)]
pub struct BucketCheck<'a> {
    pub limit: LimitName,
    /// What a call limit selects (`selection`): its key, so reordering the list or changing
    /// a rate keeps the bucket; 0 for the request rates.
    pub selection: u64,
    /// Whose bucket: a user's budget, or `None` for the whole tenant's.
    pub budget: Option<&'a str>,
    pub charge: Charge,
}

impl BucketCheck<'_> {
    /// The bucket's part of its key: `rpu`, `rt`, or `c<selection>`.
    pub fn write_key(&self, out: &mut String) {
        match self.limit {
            LimitName::RequestsPerUser => out.push_str("rpu"),
            LimitName::Requests => out.push_str("rt"),
            LimitName::Call(_) => {
                let _ = write!(out, "c{:016x}", self.selection);
            }
        }
    }
}

/// One quota counter a check charges (per user).
#[derive(Debug, Clone, Copy)]
pub struct QuotaCheck<'a> {
    pub window: Window,
    pub limit: u64,
    pub budget: &'a str,
    pub cost: u64,
}

/// What a check found.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Verdict {
    /// Everything was charged.
    Allowed,
    /// Nothing was charged: the bucket that would wait longest (index, how long), and the
    /// first quota that is used up (index).
    Refused {
        bucket: Option<(usize, Duration)>,
        quota: Option<usize>,
    },
}

/// A per-user request bucket of `rate`, charged one token (the unit tests' usual check).
#[cfg(test)]
pub fn per_user(budget: &str, rate: Rate) -> BucketCheck<'_> {
    BucketCheck {
        limit: LimitName::RequestsPerUser,
        selection: 0,
        budget: Some(budget),
        charge: Charge::new(&rate, 1),
    }
}

/// A stable 64-bit digest (FNV-1a) of what a call limit selects: the same on every replica
/// and build, unlike `std`'s hasher.
pub fn selection(upstream: &str, tools: &[String], per_tenant: bool) -> u64 {
    let mut h = Fnv::default();
    h.write(upstream.as_bytes());
    for t in tools {
        h.write(&[0]);
        h.write(t.as_bytes());
    }
    h.write(&[1, u8::from(per_tenant)]);
    h.0
}

/// FNV-1a, 64 bits.
pub struct Fnv(pub u64);

impl Default for Fnv {
    fn default() -> Fnv {
        Fnv(0xcbf2_9ce4_8422_2325)
    }
}

impl Fnv {
    pub fn write(&mut self, bytes: &[u8]) {
        for b in bytes {
            self.0 ^= u64::from(*b);
            self.0 = self.0.wrapping_mul(0x0100_0000_01b3);
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn rate(count: u32, per_secs: u64, burst: u32) -> Rate {
        Rate {
            count,
            per: Duration::from_secs(per_secs),
            burst,
        }
    }

    #[test]
    fn a_bucket_lets_its_burst_through_then_one_token_per_interval() {
        // 10/min, burst 10: ten at once, then one every 6 s.
        let one = Charge::new(&rate(10, 60, 10), 1);
        assert_eq!(one.cost, 6 * MICROS);
        let start = 1_700_000_000 * MICROS;
        let mut full_at = 0;
        for _ in 0..10 {
            full_at = charge(full_at, start, one).expect("within the burst");
        }
        assert_eq!(charge(full_at, start, one), Err(6 * MICROS));
        // Half an interval later: still 3 s to wait.
        assert_eq!(charge(full_at, start + 3 * MICROS, one), Err(3 * MICROS));
        // One interval later: one passes, the next does not.
        let later = start + 6 * MICROS;
        let full_at = charge(full_at, later, one).expect("a token came back");
        assert!(charge(full_at, later, one).is_err());
        // Idle long enough, the bucket is full again (no more than the burst is saved).
        let much_later = full_at + 3600 * MICROS;
        let mut f = full_at;
        for _ in 0..10 {
            f = charge(f, much_later, one).expect("full again");
        }
        assert!(charge(f, much_later, one).is_err());
    }

    #[test]
    fn a_batch_takes_its_tokens_at_once_or_not_at_all() {
        let r = rate(5, 1, 5);
        let now = 1_000 * MICROS;
        let full_at = charge(0, now, Charge::new(&r, 4)).expect("4 of 5");
        // 2 more do not fit (1 does): refused as a whole, waiting for the one missing.
        assert_eq!(charge(full_at, now, Charge::new(&r, 2)), Err(MICROS / 5));
        assert!(charge(full_at, now, Charge::new(&r, 1)).is_ok());
        // More than the burst never fits.
        assert!(charge(0, now, Charge::new(&r, 6)).is_err());
    }

    #[test]
    fn intervals_round_up_so_the_rate_is_never_exceeded() {
        let c = Charge::new(&rate(7, 1, 7), 1);
        assert_eq!(c.cost, 142_858);
        assert!(c.cost * 7 >= MICROS);
        // Above a million per second: one microsecond each.
        assert_eq!(Charge::new(&rate(u32::MAX, 1, 1), 1).cost, 1);
    }

    #[test]
    fn quota_windows_are_utc_days_and_months() {
        // 2026-11-24T12:00:00Z
        let now = 1_795_521_600;
        let day = Window::at(Period::Day, now);
        assert_eq!(day.number, 20_781);
        assert_eq!(day.ends, 1_795_564_800); // 2026-11-25T00:00:00Z
        let month = Window::at(Period::Month, now);
        assert_eq!(month.number, 202_611);
        assert_eq!(month.ends, 1_796_083_200); // 2026-12-01T00:00:00Z
        // December rolls over into January.
        let dec = Window::at(Period::Month, 1_798_675_200); // 2026-12-31T00:00:00Z
        assert_eq!(dec.number, 202_612);
        assert_eq!(dec.ends, 1_798_761_600); // 2027-01-01T00:00:00Z
        // Leap February.
        let feb = Window::at(Period::Month, 1_709_164_800); // 2024-02-29T00:00:00Z
        assert_eq!(feb.number, 202_402);
        assert_eq!(feb.ends, 1_709_251_200); // 2024-03-01T00:00:00Z
        let mut key = String::new();
        month.write_key(&mut key);
        day.write_key(&mut key);
        assert_eq!(key, "m202611d20781");
    }

    #[test]
    fn a_call_limit_keeps_its_key_when_its_rate_or_place_changes_but_not_its_selection() {
        let tools = vec!["echo".to_owned()];
        let a = selection("demo", &tools, false);
        assert_eq!(a, selection("demo", &tools, false));
        assert_ne!(a, selection("demo", &tools, true));
        assert_ne!(a, selection("demo", &["ech".into(), "o".into()], false));
        assert_ne!(a, selection("dem", &["oecho".into()], false));
    }
}
