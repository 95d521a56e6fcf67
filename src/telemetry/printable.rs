//! What a client chose, as it may go into a log line: a tool's name with control characters
//! replaced, so it cannot forge lines, and cut short, so it cannot flood the log; a message's
//! method and id cut short (the formatters escape them).

use std::borrow::Cow;

/// The longest name a log line repeats from a client.
pub const MAX_LOGGED_NAME: usize = 128;

/// `name` with control characters replaced by U+FFFD and cut at [`MAX_LOGGED_NAME`]
/// characters ([`cut`]); borrowed when it needs neither (the common case).
pub fn printable(name: &str) -> Cow<'_, str> {
    // Printable ASCII within the bound: the common case, told by the bytes alone.
    if name.len() <= MAX_LOGGED_NAME && name.bytes().all(|b| (0x20..0x7f).contains(&b)) {
        return Cow::Borrowed(name);
    }
    let kept = cut(name);
    if kept.len() == name.len() && !kept.chars().any(char::is_control) {
        return Cow::Borrowed(name);
    }
    Cow::Owned(
        kept.chars()
            .map(|c| if c.is_control() { '\u{fffd}' } else { c })
            .collect(),
    )
}

/// `value` cut at [`MAX_LOGGED_NAME`] characters (on a character boundary), else itself.
pub fn cut(value: &str) -> &str {
    // No more characters than bytes.
    if value.len() <= MAX_LOGGED_NAME {
        return value;
    }
    match value.char_indices().nth(MAX_LOGGED_NAME) {
        Some((end, _)) => &value[..end],
        None => value,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn names_from_clients_cannot_forge_lines_or_flood_the_log() {
        assert!(matches!(printable("echo"), Cow::Borrowed("echo")));
        assert_eq!(printable("del\u{7f} c1\u{85}"), "del\u{fffd} c1\u{fffd}");
        assert!(matches!(printable("café"), Cow::Borrowed("café")));
        assert_eq!(printable("a\nb\rc"), "a\u{fffd}b\u{fffd}c");
        let long = "x".repeat(10_000);
        assert_eq!(printable(&long).chars().count(), MAX_LOGGED_NAME);
        let exactly = "é".repeat(MAX_LOGGED_NAME);
        assert!(matches!(printable(&exactly), Cow::Borrowed(_)));
    }

    #[test]
    fn values_are_cut_on_a_character_boundary() {
        assert_eq!(cut("tools/call"), "tools/call");
        let exactly = "é".repeat(MAX_LOGGED_NAME);
        assert_eq!(cut(&exactly), exactly);
        let longer = format!("{exactly}é\n");
        assert_eq!(cut(&longer), exactly);
        let ascii = "x".repeat(MAX_LOGGED_NAME);
        assert_eq!(cut(&format!("{ascii}y")), ascii);
        assert_eq!(cut(&ascii), ascii);
    }
}
