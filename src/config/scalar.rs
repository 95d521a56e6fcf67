//! Plain-scalar resolution by the YAML 1.2 core schema (null, bool, int, float, else string).
//! Quoted and block scalars never go through here: they are always strings.

/// What a plain scalar means.
#[derive(Debug, Clone, Copy, PartialEq)]
pub enum Resolved<'s> {
    Null,
    Bool(bool),
    Int(i64),
    UInt(u64),
    Float(f64),
    Str(&'s str),
}

impl Resolved<'_> {
    /// For messages; never includes the value itself.
    pub fn describe(&self) -> &'static str {
        match self {
            Resolved::Null => "nothing (null)",
            Resolved::Bool(_) => "a boolean",
            Resolved::Int(_) | Resolved::UInt(_) | Resolved::Float(_) => "a number",
            Resolved::Str(_) => "a string",
        }
    }
}

/// Whether a plain scalar is a null (`null`, `Null`, `NULL`, `~` or empty).
pub fn is_null(text: &str) -> bool {
    matches!(text, "" | "~" | "null" | "Null" | "NULL")
}

pub fn resolve(text: &str) -> Resolved<'_> {
    if is_null(text) {
        return Resolved::Null;
    }
    match text {
        "true" | "True" | "TRUE" => return Resolved::Bool(true),
        "false" | "False" | "FALSE" => return Resolved::Bool(false),
        _ => {}
    }
    if let Some(int) = resolve_int(text) {
        // Integers too large for 64 bits stay strings (and fail where a number is needed).
        return int.unwrap_or(Resolved::Str(text));
    }
    if let Some(float) = resolve_float(text) {
        return Resolved::Float(float);
    }
    Resolved::Str(text)
}

/// `[-+]?[0-9]+`, `0o[0-7]+`, `0x[0-9a-fA-F]+`: `None` if not an integer, `Some(None)` if one
/// that fits no 64-bit type.
fn resolve_int(text: &str) -> Option<Option<Resolved<'_>>> {
    let from_unsigned = |value: u64| Resolved::UInt(value);
    if let Some(octal) = text.strip_prefix("0o") {
        return all_digits(octal, 8).then(|| u64::from_str_radix(octal, 8).ok().map(from_unsigned));
    }
    if let Some(hex) = text.strip_prefix("0x") {
        return all_digits(hex, 16).then(|| u64::from_str_radix(hex, 16).ok().map(from_unsigned));
    }
    let digits = text.strip_prefix(['-', '+']).unwrap_or(text);
    if !all_digits(digits, 10) {
        return None;
    }
    Some(if text.starts_with('-') {
        text.parse::<i64>().ok().map(Resolved::Int)
    } else {
        digits.parse::<u64>().ok().map(from_unsigned)
    })
}

fn all_digits(text: &str, radix: u32) -> bool {
    !text.is_empty() && text.chars().all(|c| c.is_digit(radix))
}

/// `[-+]?(\.[0-9]+|[0-9]+(\.[0-9]*)?)([eE][-+]?[0-9]+)?`, `[-+]?.inf`, `.nan` (and case variants).
fn resolve_float(text: &str) -> Option<f64> {
    let unsigned = text.strip_prefix(['-', '+']).unwrap_or(text);
    let negative = text.starts_with('-');
    if matches!(unsigned, ".inf" | ".Inf" | ".INF") {
        return Some(if negative {
            f64::NEG_INFINITY
        } else {
            f64::INFINITY
        });
    }
    if matches!(text, ".nan" | ".NaN" | ".NAN") {
        return Some(f64::NAN);
    }
    let (mantissa, exponent) = match unsigned.split_once(['e', 'E']) {
        Some((m, e)) => (m, Some(e)),
        None => (unsigned, None),
    };
    let mantissa_ok = match mantissa.split_once('.') {
        Some((int, frac)) => {
            (int.is_empty() && all_digits(frac, 10))
                || (all_digits(int, 10) && (frac.is_empty() || all_digits(frac, 10)))
        }
        None => all_digits(mantissa, 10),
    };
    let exponent_ok =
        exponent.is_none_or(|e| all_digits(e.strip_prefix(['-', '+']).unwrap_or(e), 10));
    if mantissa_ok && exponent_ok {
        text.parse::<f64>().ok()
    } else {
        None
    }
}

#[cfg(test)]
#[allow(clippy::unwrap_used)]
mod tests {
    use super::*;

    #[test]
    fn core_schema() {
        for null in ["", "~", "null", "Null", "NULL"] {
            assert_eq!(resolve(null), Resolved::Null, "{null}");
        }
        assert_eq!(resolve("true"), Resolved::Bool(true));
        assert_eq!(resolve("FALSE"), Resolved::Bool(false));
        assert_eq!(resolve("yes"), Resolved::Str("yes"));
        assert_eq!(resolve("42"), Resolved::UInt(42));
        assert_eq!(resolve("+42"), Resolved::UInt(42));
        assert_eq!(resolve("-42"), Resolved::Int(-42));
        assert_eq!(resolve("0x1F"), Resolved::UInt(31));
        assert_eq!(resolve("0o17"), Resolved::UInt(15));
        assert_eq!(resolve("0x"), Resolved::Str("0x"));
        assert_eq!(resolve("1.5"), Resolved::Float(1.5));
        assert_eq!(resolve("-.5e2"), Resolved::Float(-50.0));
        assert_eq!(resolve("1."), Resolved::Float(1.0));
        assert_eq!(resolve(".inf"), Resolved::Float(f64::INFINITY));
        assert!(matches!(resolve(".nan"), Resolved::Float(f) if f.is_nan()));
        assert_eq!(resolve("1.0.0"), Resolved::Str("1.0.0"));
        assert_eq!(resolve("30s"), Resolved::Str("30s"));
        assert_eq!(resolve("1e"), Resolved::Str("1e"));
        assert_eq!(resolve("."), Resolved::Str("."));
        assert_eq!(
            resolve("99999999999999999999999"),
            Resolved::Str("99999999999999999999999")
        );
        assert_eq!(resolve("nan"), Resolved::Str("nan"));
        assert_eq!(resolve("infinity"), Resolved::Str("infinity"));
    }
}
