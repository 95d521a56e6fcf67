//! A name a client chose (a tool's), as it may go into a log line: control characters
//! replaced, so it cannot forge lines, and cut short, so it cannot flood the log.

use std::borrow::Cow;

/// The longest name a log line repeats from a client.
pub const MAX_LOGGED_NAME: usize = 128;

/// `name` with control characters replaced by U+FFFD and cut at [`MAX_LOGGED_NAME`]
/// characters; borrowed when it needs neither (the common case: one pass over it).
pub fn printable(name: &str) -> Cow<'_, str> {
    let mut chars = 0;
    let clean = name.chars().all(|c| {
        chars += 1;
        !c.is_control()
    }) && chars <= MAX_LOGGED_NAME;
    if clean {
        return Cow::Borrowed(name);
    }
    Cow::Owned(
        name.chars()
            .take(MAX_LOGGED_NAME)
            .map(|c| if c.is_control() { '\u{fffd}' } else { c })
            .collect(),
    )
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn names_from_clients_cannot_forge_lines_or_flood_the_log() {
        assert!(matches!(printable("echo"), Cow::Borrowed("echo")));
        assert_eq!(printable("a\nb\rc"), "a\u{fffd}b\u{fffd}c");
        let long = "x".repeat(10_000);
        assert_eq!(printable(&long).chars().count(), MAX_LOGGED_NAME);
        let exactly = "é".repeat(MAX_LOGGED_NAME);
        assert!(matches!(printable(&exactly), Cow::Borrowed(_)));
    }
}
