//! Durations (`500ms`, `30s`, `5m`, `1h`, `1m30s`) and sizes (`4MiB`, `512KiB`, `1000kB`, plain
//! byte counts): parsing from config text and formatting for messages.

use std::time::Duration;

const DURATION_UNITS: [(&str, u64); 4] = [("h", 3_600_000), ("m", 60_000), ("s", 1_000), ("ms", 1)];

const SIZE_UNITS: [(&str, u64); 8] = [
    ("B", 1),
    ("kB", 1_000),
    ("KB", 1_000),
    ("MB", 1_000_000),
    ("GB", 1_000_000_000),
    ("KiB", 1 << 10),
    ("MiB", 1 << 20),
    ("GiB", 1 << 30),
];

/// Message for a duration written as a bare number.
pub const DURATION_NEEDS_UNIT: &str = "duration needs a unit, e.g. 30s";

/// Parses `<number><unit>` parts, largest unit first, each unit at most once (`1h30m`, `1m30s`).
pub fn parse_duration(text: &str) -> Result<Duration, String> {
    if !text.is_empty() && text.chars().all(|c| c.is_ascii_digit() || c == '.') {
        return Err(DURATION_NEEDS_UNIT.to_owned());
    }
    let invalid = || {
        format!(
            "invalid duration {text:?}: expected whole numbers with units (ms, s, m, h), e.g. 500ms, 30s, 1m30s"
        )
    };
    let mut rest = text;
    let mut total: u64 = 0;
    // Index into DURATION_UNITS of the smallest unit used so far: later parts must be smaller.
    let mut last_unit: Option<usize> = None;
    if rest.is_empty() {
        return Err(invalid());
    }
    while !rest.is_empty() {
        let digits = rest
            .find(|c: char| !c.is_ascii_digit())
            .unwrap_or(rest.len());
        let unit_len = rest[digits..]
            .find(|c: char| !c.is_ascii_alphabetic())
            .unwrap_or(rest.len() - digits);
        let (number, unit) = (&rest[..digits], &rest[digits..digits + unit_len]);
        if number.is_empty() {
            return Err(invalid());
        }
        if unit.is_empty() && digits < rest.len() {
            return Err(invalid());
        }
        if unit.is_empty() {
            return Err(format!(
                "invalid duration {text:?}: every number needs a unit (ms, s, m, h)"
            ));
        }
        let Some(index) = DURATION_UNITS.iter().position(|(name, _)| *name == unit) else {
            return Err(invalid());
        };
        if last_unit.is_some_and(|last| index <= last) {
            return Err(format!(
                "invalid duration {text:?}: write larger units first, each once, e.g. 1h30m, 1m30s"
            ));
        }
        last_unit = Some(index);
        let millis = number
            .parse::<u64>()
            .ok()
            .and_then(|n| n.checked_mul(DURATION_UNITS[index].1))
            .and_then(|n| n.checked_add(total));
        total = millis.ok_or_else(|| format!("duration {text:?} is too large"))?;
        rest = &rest[digits + unit_len..];
    }
    Ok(Duration::from_millis(total))
}

/// Parses a byte count with an optional unit (`B`, `kB`/`KB`, `MB`, `GB`, `KiB`, `MiB`, `GiB`).
pub fn parse_size(text: &str) -> Result<u64, String> {
    let digits = text
        .find(|c: char| !c.is_ascii_digit())
        .unwrap_or(text.len());
    let (number, unit) = (&text[..digits], text[digits..].trim_start_matches(' '));
    let multiplier = if unit.is_empty() {
        Some(1)
    } else {
        SIZE_UNITS
            .iter()
            .find(|(name, _)| *name == unit)
            .map(|(_, m)| *m)
    };
    let (false, Some(multiplier)) = (number.is_empty(), multiplier) else {
        return Err(format!(
            "invalid size {text:?}: expected a whole number of bytes, optionally with a unit (B, kB, MB, GB, KiB, MiB, GiB), e.g. 4MiB"
        ));
    };
    number
        .parse::<u64>()
        .ok()
        .and_then(|n| n.checked_mul(multiplier))
        .ok_or_else(|| format!("size {text:?} is too large"))
}

/// `1m30s`, `500ms`, `0s`: the shortest exact rendering in the config's own syntax.
pub fn format_duration(duration: Duration) -> String {
    let mut millis = duration.as_millis();
    if millis == 0 {
        return "0s".to_owned();
    }
    let mut out = String::new();
    for (unit, size) in DURATION_UNITS {
        let size = u128::from(size);
        if millis >= size {
            out.push_str(&format!("{}{unit}", millis / size));
            millis %= size;
        }
    }
    out
}

/// `4MiB`, `1KiB`, or `1500 bytes` when not a whole number of binary units.
pub fn format_size(bytes: u64) -> String {
    for (unit, size) in [("GiB", 1u64 << 30), ("MiB", 1 << 20), ("KiB", 1 << 10)] {
        if bytes >= size && bytes.is_multiple_of(size) {
            return format!("{}{unit}", bytes / size);
        }
    }
    format!("{bytes} bytes")
}

#[cfg(test)]
#[allow(clippy::unwrap_used)]
mod tests {
    use super::*;

    #[test]
    fn durations() {
        let ok = |text: &str, millis: u64| {
            assert_eq!(
                parse_duration(text),
                Ok(Duration::from_millis(millis)),
                "{text}"
            )
        };
        ok("500ms", 500);
        ok("30s", 30_000);
        ok("5m", 300_000);
        ok("1h", 3_600_000);
        ok("1m30s", 90_000);
        ok("1h2m3s4ms", 3_723_004);
        ok("0s", 0);
        assert_eq!(parse_duration("30"), Err(DURATION_NEEDS_UNIT.to_owned()));
        assert_eq!(parse_duration("1.5"), Err(DURATION_NEEDS_UNIT.to_owned()));
        let invalid = "invalid duration \"30x\": expected whole numbers with units (ms, s, m, h), e.g. 500ms, 30s, 1m30s";
        assert_eq!(parse_duration("30x").unwrap_err(), invalid);
        for bad in ["", "s", "1.5s", "-1s", "30 s", "1sec", "1d"] {
            assert!(parse_duration(bad).is_err(), "{bad}");
        }
        assert_eq!(
            parse_duration("30s1m").unwrap_err(),
            "invalid duration \"30s1m\": write larger units first, each once, e.g. 1h30m, 1m30s"
        );
        assert!(parse_duration("1s1s").is_err());
        assert_eq!(
            parse_duration("1m30").unwrap_err(),
            "invalid duration \"1m30\": every number needs a unit (ms, s, m, h)"
        );
        assert_eq!(
            parse_duration("99999999999999999999h").unwrap_err(),
            "duration \"99999999999999999999h\" is too large"
        );
        assert!(parse_duration("18446744073709551615h").is_err());
    }

    #[test]
    fn sizes() {
        let ok = |text: &str, bytes: u64| assert_eq!(parse_size(text), Ok(bytes), "{text}");
        ok("1024", 1024);
        ok("0", 0);
        ok("4MiB", 4 << 20);
        ok("512KiB", 512 << 10);
        ok("1GiB", 1 << 30);
        ok("1000kB", 1_000_000);
        ok("1KB", 1_000);
        ok("1MB", 1_000_000);
        ok("2GB", 2_000_000_000);
        ok("16 MiB", 16 << 20);
        ok("7B", 7);
        for bad in ["", "MiB", "4mib", "4 MiBs", "1.5MiB", "-1", "4TiB", "4Mi"] {
            assert!(parse_size(bad).is_err(), "{bad}");
        }
        assert_eq!(
            parse_size("4mb").unwrap_err(),
            "invalid size \"4mb\": expected a whole number of bytes, optionally with a unit (B, kB, MB, GB, KiB, MiB, GiB), e.g. 4MiB"
        );
        assert_eq!(
            parse_size("99999999999GiB").unwrap_err(),
            "size \"99999999999GiB\" is too large"
        );
    }

    #[test]
    fn formatting() {
        assert_eq!(format_duration(Duration::from_millis(90_500)), "1m30s500ms");
        assert_eq!(format_duration(Duration::from_secs(600)), "10m");
        assert_eq!(format_duration(Duration::ZERO), "0s");
        assert_eq!(format_size(4 << 20), "4MiB");
        assert_eq!(format_size(1500), "1500 bytes");
    }
}
