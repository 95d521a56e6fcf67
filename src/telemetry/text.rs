//! The text log format's hot parts, written without `core::fmt` where the value allows: the
//! fields of spans and events (`Fields`) and the timestamp (`Clock`). Every request records
//! several span fields and a tool call writes an audit line, so these run per call; the output
//! is exactly `tracing_subscriber`'s default text format, which handles every case not taken
//! here (messages, `%`/`?` values, errors, strings that need escaping).

use std::cell::Cell;
use std::fmt;

use tracing::field::{Field, Visit};
use tracing_subscriber::field::{RecordFields, VisitOutput};
use tracing_subscriber::fmt::FormatFields;
use tracing_subscriber::fmt::format::{DefaultVisitor, Writer};
use tracing_subscriber::fmt::time::FormatTime;

/// Formats fields as `name=value` separated by spaces, like the default text format.
#[derive(Debug, Default, Clone, Copy)]
pub struct Fields;

impl<'writer> FormatFields<'writer> for Fields {
    fn format_fields<R: RecordFields>(&self, writer: Writer<'writer>, fields: R) -> fmt::Result {
        let mut visitor = Visitor {
            writer,
            empty: true,
            result: Ok(()),
        };
        fields.record(&mut visitor);
        visitor.result
    }
}

struct Visitor<'w> {
    writer: Writer<'w>,
    /// Nothing written yet (no separating space before the next field).
    empty: bool,
    result: fmt::Result,
}

impl Visitor<'_> {
    /// A field the fast paths do not take, handed to the default visitor on the same writer.
    fn by_default(&mut self, record: impl FnOnce(&mut DefaultVisitor<'_>)) {
        if self.result.is_err() {
            return;
        }
        let mut default = DefaultVisitor::new(self.writer.by_ref(), self.empty);
        record(&mut default);
        self.result = default.finish();
        self.empty = false;
    }

    /// Writes `name=` (after a space unless first), then `value`.
    fn plain(&mut self, name: &str, value: &[&str]) {
        if self.result.is_err() {
            return;
        }
        self.result = write_field(&mut self.writer, self.empty, name, value);
        self.empty = false;
    }

    /// A value written as it is (a number, a boolean), or by the default visitor when the
    /// name is one it treats specially.
    fn bare(&mut self, field: &Field, text: &str, otherwise: impl FnOnce(&mut DefaultVisitor<'_>)) {
        if plain_name(field.name()) {
            self.plain(field.name(), &[text]);
        } else {
            self.by_default(otherwise);
        }
    }
}

/// ` name=value` (no space when first).
fn write_field(w: &mut Writer<'_>, first: bool, name: &str, value: &[&str]) -> fmt::Result {
    if !first {
        w.write_char(' ')?;
    }
    w.write_str(name)?;
    w.write_char('=')?;
    value.iter().try_for_each(|part| w.write_str(part))
}

/// Whether the default format's `{:?}` of `name` is the name itself: the names it treats
/// specially (`message`, raw identifiers) are left to it.
fn plain_name(name: &str) -> bool {
    name != "message" && !name.starts_with("r#")
}

/// Whether `{:?}` of `s` is `s` in quotes: printable ASCII without `"` or `\`.
fn needs_no_escape(s: &str) -> bool {
    s.bytes()
        .all(|b| (0x20..0x7f).contains(&b) && b != b'"' && b != b'\\')
}

impl Visit for Visitor<'_> {
    fn record_str(&mut self, field: &Field, value: &str) {
        let name = field.name();
        if plain_name(name) && needs_no_escape(value) {
            self.plain(name, &["\"", value, "\""]);
        } else {
            self.by_default(|d| d.record_str(field, value));
        }
    }

    fn record_u64(&mut self, field: &Field, value: u64) {
        let mut digits = itoa::Buffer::new();
        self.bare(field, digits.format(value), |d| d.record_u64(field, value));
    }

    fn record_i64(&mut self, field: &Field, value: i64) {
        let mut digits = itoa::Buffer::new();
        self.bare(field, digits.format(value), |d| d.record_i64(field, value));
    }

    fn record_bool(&mut self, field: &Field, value: bool) {
        let text = if value { "true" } else { "false" };
        self.bare(field, text, |d| d.record_bool(field, value));
    }

    fn record_error(&mut self, field: &Field, value: &(dyn std::error::Error + 'static)) {
        self.by_default(|d| d.record_error(field, value));
    }

    fn record_debug(&mut self, field: &Field, value: &dyn fmt::Debug) {
        self.by_default(|d| d.record_debug(field, value));
    }
}

/// The default format's timestamp, `2026-11-25T01:42:18.929019Z` (UTC, microseconds); the
/// date and time of day are formatted once a second per thread.
#[derive(Debug, Default, Clone, Copy)]
pub struct Clock;

thread_local! {
    /// The second last formatted on this thread and its text up to the seconds.
    static SECOND: Cell<(u64, [u8; 19])> = const { Cell::new((u64::MAX, [0; 19])) };
}

impl FormatTime for Clock {
    fn format_time(&self, w: &mut Writer<'_>) -> fmt::Result {
        let now = std::time::SystemTime::now()
            .duration_since(std::time::UNIX_EPOCH)
            .unwrap_or_default();
        let secs = now.as_secs();
        let (cached, mut text) = SECOND.get();
        if cached != secs {
            text = date_time(secs);
            SECOND.set((secs, text));
        }
        let mut micros = [b'.', b'0', b'0', b'0', b'0', b'0', b'0', b'Z'];
        put_digits(&mut micros[1..7], u64::from(now.subsec_micros()));
        // Both are ASCII digits and punctuation.
        w.write_str(std::str::from_utf8(&text).unwrap_or_default())?;
        w.write_str(std::str::from_utf8(&micros).unwrap_or_default())
    }
}

/// `YYYY-MM-DDTHH:MM:SS` of `secs` since the epoch (years up to 9999).
fn date_time(secs: u64) -> [u8; 19] {
    let t = crate::clock::utc(secs.saturating_mul(1000));
    let mut out = *b"0000-00-00T00:00:00";
    put_digits(&mut out[0..4], u64::from(t.year));
    put_digits(&mut out[5..7], u64::from(t.month));
    put_digits(&mut out[8..10], u64::from(t.day));
    put_digits(&mut out[11..13], t.hour);
    put_digits(&mut out[14..16], t.minute);
    put_digits(&mut out[17..19], t.second);
    out
}

/// Writes `n`'s last `out.len()` decimal digits into `out`, zero-padded.
fn put_digits(out: &mut [u8], mut n: u64) {
    for d in out.iter_mut().rev() {
        *d = b'0' + (n % 10) as u8;
        n /= 10;
    }
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used)]
    use std::sync::{Arc, Mutex};

    use tracing_subscriber::fmt::MakeWriter;
    use tracing_subscriber::fmt::time::SystemTime;

    use super::*;

    #[derive(Clone, Default)]
    struct Capture(Arc<Mutex<Vec<u8>>>);

    impl std::io::Write for Capture {
        fn write(&mut self, buf: &[u8]) -> std::io::Result<usize> {
            self.0.lock().unwrap().extend_from_slice(buf);
            Ok(buf.len())
        }
        fn flush(&mut self) -> std::io::Result<()> {
            Ok(())
        }
    }

    impl<'a> MakeWriter<'a> for Capture {
        type Writer = Capture;
        fn make_writer(&'a self) -> Capture {
            self.clone()
        }
    }

    /// The lines `emit` logs through a text subscriber with these fields, or the default ones.
    fn lines(ours: bool, emit: impl Fn()) -> String {
        let capture = Capture::default();
        let base = tracing_subscriber::fmt()
            .with_ansi(false)
            .without_time()
            .with_writer(capture.clone());
        if ours {
            tracing::subscriber::with_default(base.fmt_fields(Fields).finish(), &emit);
        } else {
            tracing::subscriber::with_default(base.finish(), &emit);
        }
        String::from_utf8(capture.0.lock().unwrap().clone()).unwrap()
    }

    #[derive(Debug)]
    struct Failure;
    impl fmt::Display for Failure {
        fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
            f.write_str("it \"broke\"\n")
        }
    }
    impl std::error::Error for Failure {}

    #[test]
    fn fields_read_as_the_default_format_writes_them() {
        let emit = || {
            let span = tracing::info_span!(
                "request",
                tenant = "load",
                id = tracing::field::Empty,
                odd = tracing::field::Empty,
            );
            span.record("id", "7");
            span.record("odd", "quote \" back\\slash \u{1b}[31m tab\t é");
            let _in = span.enter();
            let e = Failure;
            tracing::info!(
                user = "anonymous",
                tool = %"echo tool",
                dbg = ?("x", 1),
                n = 42u64,
                neg = -3i64,
                yes = true,
                r#type = "raw",
                empty = "",
                error = &e as &(dyn std::error::Error + 'static),
                "tool call \u{1b}[2J"
            );
            tracing::warn!("only a message");
            tracing::info!(late = 1u64, "message {} after", "args");
        };
        let default = lines(false, emit);
        assert!(default.contains("tenant=\"load\""), "{default}");
        assert_eq!(lines(true, emit), default);
    }

    #[test]
    fn the_clock_writes_what_the_default_timer_writes() {
        let render = |timer: &dyn FormatTime| {
            let mut s = String::new();
            timer.format_time(&mut Writer::new(&mut s)).unwrap();
            s
        };
        // Same shape and, to the second, the same time (retried across a second boundary).
        for _ in 0..3 {
            let (theirs, ours) = (render(&SystemTime), render(&Clock));
            assert_eq!(ours.len(), 27, "{ours}");
            assert!(ours.ends_with('Z') && ours.as_bytes()[19] == b'.', "{ours}");
            if theirs[..19] == ours[..19] {
                return;
            }
        }
        panic!("the clock disagrees with the default timer");
    }

    #[test]
    fn dates_are_formatted_in_full() {
        assert_eq!(&date_time(0), b"1970-01-01T00:00:00");
        // 2024-02-29T23:59:59Z
        assert_eq!(&date_time(1_709_251_199), b"2024-02-29T23:59:59");
    }
}
