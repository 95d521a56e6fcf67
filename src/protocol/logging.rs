//! Log levels of MCP's logging utility (RFC 5424 severities): which `notifications/message`
//! a client that set a level still wants.

use serde_json::value::RawValue;

use crate::jsonrpc::RawObject;

/// The levels a client may set, least severe first.
pub const LEVELS: [&str; 8] = [
    "debug",
    "info",
    "notice",
    "warning",
    "error",
    "critical",
    "alert",
    "emergency",
];

/// How severe `level` is (its place in `LEVELS`); `None` for a name that is not a level.
pub fn severity(level: &str) -> Option<usize> {
    LEVELS.iter().position(|l| *l == level)
}

/// Whether a `notifications/message` with `params` is at or above level `wanted`. A message
/// without a readable level, or a `wanted` that is not a level, passes (nothing is dropped on
/// a guess).
pub fn wanted(params: Option<&RawValue>, wanted: &str) -> bool {
    let Some(floor) = severity(wanted) else {
        return true;
    };
    let level = params
        .and_then(|p| RawObject::parse(p).ok())
        .and_then(|p| p.get_str("level").and_then(|l| severity(&l)));
    level.is_none_or(|l| l >= floor)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn params(s: &str) -> Box<RawValue> {
        RawValue::from_string(s.to_owned()).expect("json")
    }

    #[test]
    fn messages_below_the_level_are_not_wanted() {
        let debug = params(r#"{"level":"debug","data":"x"}"#);
        let error = params(r#"{"level":"error","data":"x"}"#);
        assert!(!wanted(Some(&debug), "info"));
        assert!(wanted(Some(&error), "info"));
        assert!(wanted(Some(&error), "error"));
        assert!(!wanted(Some(&error), "critical"));
        assert!(wanted(Some(&debug), "debug"));
    }

    #[test]
    fn unreadable_levels_pass() {
        let odd = params(r#"{"level":"loud","data":"x"}"#);
        assert!(wanted(Some(&odd), "warning"));
        assert!(wanted(None, "warning"));
        let debug = params(r#"{"level":"debug"}"#);
        assert!(wanted(Some(&debug), "verbose"));
    }
}
