//! Calendar arithmetic on the Unix clock (proleptic Gregorian, UTC), without a date crate:
//! days to civil dates and back, and the timestamps the gateway writes.

/// (year, month 1-12, day 1-31) of a day counted from 1970-01-01, on or after it.
pub fn civil_from_days(days: u64) -> (u32, u32, u32) {
    // Howard Hinnant's algorithm, for days on or after the epoch.
    let z = days + 719_468;
    let era = z / 146_097;
    let doe = z - era * 146_097;
    let yoe = (doe - doe / 1460 + doe / 36_524 - doe / 146_096) / 365;
    let doy = doe - (365 * yoe + yoe / 4 - yoe / 100);
    let mp = (5 * doy + 2) / 153;
    let day = doy - (153 * mp + 2) / 5 + 1;
    let month = if mp < 10 { mp + 3 } else { mp - 9 };
    let year = yoe + era * 400 + u64::from(month <= 2);
    (year as u32, month as u32, day as u32)
}

/// Days from 1970-01-01 to the first of `month` of `year` (1970 or later).
pub fn days_from_civil(year: u32, month: u32) -> u64 {
    let y = u64::from(year) - u64::from(month <= 2);
    let era = y / 400;
    let yoe = y - era * 400;
    let m = u64::from(month);
    let doy = (153 * (if m > 2 { m - 3 } else { m + 9 }) + 2) / 5;
    let doe = yoe * 365 + yoe / 4 - yoe / 100 + doy;
    era * 146_097 + doe - 719_468
}

/// A UTC date and time of day.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Utc {
    pub year: u32,
    pub month: u32,
    pub day: u32,
    pub hour: u64,
    pub minute: u64,
    pub second: u64,
    pub milli: u64,
}

/// The date and time of day of `ms` milliseconds since the epoch.
pub fn utc(ms: u64) -> Utc {
    let secs = ms / 1000;
    let rest = secs % 86_400;
    let (year, month, day) = civil_from_days(secs / 86_400);
    Utc {
        year,
        month,
        day,
        hour: rest / 3600,
        minute: rest / 60 % 60,
        second: rest % 60,
        milli: ms % 1000,
    }
}

/// `2026-11-24T20:31:05.123Z`: RFC 3339 / ISO 8601 in UTC, milliseconds.
pub fn iso8601(ms: u64) -> String {
    let t = utc(ms);
    format!(
        "{:04}-{:02}-{:02}T{:02}:{:02}:{:02}.{:03}Z",
        t.year, t.month, t.day, t.hour, t.minute, t.second, t.milli
    )
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn dates_round_trip_and_format() {
        assert_eq!(civil_from_days(0), (1970, 1, 1));
        // 2024-02-29 is day 19,782; 2000-03-01 is day 11,017.
        assert_eq!(civil_from_days(19_782), (2024, 2, 29));
        assert_eq!(civil_from_days(11_017), (2000, 3, 1));
        for (year, month) in [(1970, 1), (2000, 2), (2024, 3), (2026, 12), (2100, 2)] {
            assert_eq!(
                civil_from_days(days_from_civil(year, month)),
                (year, month, 1)
            );
        }
        assert_eq!(iso8601(0), "1970-01-01T00:00:00.000Z");
        assert_eq!(iso8601(1_795_552_265_123), "2026-11-24T20:31:05.123Z");
    }
}
