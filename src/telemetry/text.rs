//! The text log format's hot parts, written without `core::fmt` where the value allows: the
//! line around an event's fields (`Line`, made up in a buffer and written at once), the
//! fields of spans and events (`Fields`) and the timestamp (`Clock`). Every request records
//! several span fields and a tool call writes an audit line, so these run per call; the
//! output is exactly `tracing_subscriber`'s default text format (without colours), which
//! handles every case not taken here (errors, raw identifiers, strings that need escaping),
//! but for one thing: a line break inside a line is written `\n` or `\r` (`one_line`).

use std::cell::Cell;
use std::fmt;

use tracing::field::{Field, Visit};
use tracing::{Event, Level, Subscriber};
use tracing_subscriber::field::{RecordFields, VisitOutput};
use tracing_subscriber::fmt::format::{DefaultVisitor, Format, Full, Writer};
use tracing_subscriber::fmt::time::FormatTime;
use tracing_subscriber::fmt::{FmtContext, FormatEvent, FormatFields, FormattedFields};
use tracing_subscriber::registry::LookupSpan;

use super::log_context;

/// The default format's line: `<time> <level> <span>{<fields>}:<span>…: <target>: <fields>`,
/// written piece by piece (the default writes each piece through `core::fmt`).
#[derive(Debug, Clone, Copy)]
pub struct Line {
    /// Whether lines start with the time (tests leave it out to compare lines).
    time: bool,
}

impl Line {
    pub fn new() -> Line {
        Line { time: true }
    }
}

impl<S, N> FormatEvent<S, N> for Line
where
    S: Subscriber + for<'a> LookupSpan<'a>,
    N: for<'a> FormatFields<'a> + 'static,
{
    /// The line is made up in a buffer of the thread's and written at once: each write to the
    /// subscriber's writer is a dynamic call, and a line is ~30 pieces. The event's fields
    /// are written as [`Fields`] writes them (the fields this format is used with).
    fn format_event(
        &self,
        ctx: &FmtContext<'_, S, N>,
        mut w: Writer<'_>,
        event: &Event<'_>,
    ) -> fmt::Result {
        if w.has_ansi_escapes() || !w.sanitizes_ansi_escapes() {
            // Colours, or messages left unescaped (neither in this build): the default format.
            let full: Format<Full, Clock> = Format::default().with_timer(Clock);
            return if self.time {
                full.format_event(ctx, w, event)
            } else {
                full.without_time().format_event(ctx, w, event)
            };
        }
        let mut line = LINE.take();
        line.clear();
        let written = self
            .make_up(ctx, event, &mut line)
            .and_then(|()| w.write_str(&line));
        // Kept for the next line unless a long one (a logged upstream body) grew it.
        if line.capacity() <= 4096 {
            LINE.set(line);
        }
        written
    }
}

impl Line {
    fn make_up<S, N>(
        &self,
        ctx: &FmtContext<'_, S, N>,
        event: &Event<'_>,
        line: &mut String,
    ) -> fmt::Result
    where
        S: Subscriber + for<'a> LookupSpan<'a>,
        N: for<'a> FormatFields<'a> + 'static,
    {
        if self.time {
            Clock.put(line);
            line.push(' ');
        }
        let meta = event.metadata();
        line.push_str(level_text(meta.level()));
        line.push(' ');
        let mut seen = false;
        if let Some(scope) = ctx.event_scope() {
            for span in scope.from_root() {
                line.push_str(span.metadata().name());
                seen = true;
                let ext = span.extensions();
                if let Some(fields) = ext.get::<FormattedFields<N>>()
                    && !fields.is_empty()
                {
                    line.push('{');
                    line.push_str(fields);
                    line.push('}');
                }
                line.push(':');
            }
        }
        // A request's own context is the innermost "span" (it is made inside any span a
        // layer of the router opens).
        log_context::with_current(|c| match c {
            Some(c) => {
                seen = true;
                c.write_text(line)
            }
            None => Ok(()),
        })?;
        if seen {
            line.push(' ');
        }
        line.push_str(meta.target());
        line.push_str(": ");
        // Messages escaped: a line is only made up for a writer that escapes them.
        let mut visitor = Visitor::new(&mut *line, true);
        event.record(&mut visitor);
        visitor.result?;
        one_line(line);
        line.push('\n');
        Ok(())
    }
}

/// Writes the line breaks inside a line as `\n` and `\r`: a value that holds one (a tool
/// name a client chose, an upstream's error body, an error's text) must not start a line of
/// its own, which a log reader would take for an event the gateway wrote (a forged audit
/// line). The default format writes them as they are; this is the one way lines differ from
/// it. Most lines have none: one `memchr` pass over the line.
fn one_line(line: &mut String) {
    let Some(first) = memchr::memchr2(b'\n', b'\r', line.as_bytes()) else {
        return;
    };
    let mut out = String::with_capacity(line.len() + 16);
    out.push_str(&line[..first]);
    for ch in line[first..].chars() {
        match ch {
            '\n' => out.push_str("\\n"),
            '\r' => out.push_str("\\r"),
            c => out.push(c),
        }
    }
    *line = out;
}

thread_local! {
    /// The line being made up.
    static LINE: Cell<String> = const { Cell::new(String::new()) };
}

/// A level as the default format writes it, padded to five characters.
fn level_text(level: &Level) -> &'static str {
    match *level {
        Level::TRACE => "TRACE",
        Level::DEBUG => "DEBUG",
        Level::INFO => " INFO",
        Level::WARN => " WARN",
        Level::ERROR => "ERROR",
    }
}

/// Formats fields as `name=value` separated by spaces, like the default text format.
#[derive(Debug, Default, Clone, Copy)]
pub struct Fields;

impl<'writer> FormatFields<'writer> for Fields {
    fn format_fields<R: RecordFields>(&self, writer: Writer<'writer>, fields: R) -> fmt::Result {
        let sanitize = writer.sanitizes_ansi_escapes();
        let mut visitor = Visitor::new(writer, sanitize);
        fields.record(&mut visitor);
        visitor.result
    }
}

/// Where fields are written: the subscriber's writer (a dynamic call per piece) or a line
/// being made up (pushed in place).
trait Out {
    fn put(&mut self, s: &str) -> fmt::Result;
    /// The same place as a writer, for the default visitor and `core::fmt` (messages escaped
    /// when the subscriber's writer escapes them; a line is only made up when it does).
    fn writer(&mut self) -> Writer<'_>;

    /// An event's message, with terminal controls escaped when `sanitize` (as the default
    /// format writes it).
    fn message(&mut self, value: &dyn fmt::Debug, sanitize: bool) -> fmt::Result {
        match sanitize {
            true => fmt::Write::write_fmt(
                &mut Sanitized(&mut self.writer()),
                format_args!("{value:?}"),
            ),
            false => write!(self.writer(), "{value:?}"),
        }
    }
}

impl Out for Writer<'_> {
    fn put(&mut self, s: &str) -> fmt::Result {
        self.write_str(s)
    }

    fn writer(&mut self) -> Writer<'_> {
        self.by_ref()
    }
}

impl Out for &mut String {
    #[inline]
    fn put(&mut self, s: &str) -> fmt::Result {
        self.push_str(s);
        Ok(())
    }

    fn writer(&mut self) -> Writer<'_> {
        Writer::new(&mut **self)
    }

    /// Written into the line as it is, then escaped in place only when it holds a byte that
    /// could need it: a message is nearly always a constant without one, which this writes
    /// without going through [`Sanitized`] character by character.
    fn message(&mut self, value: &dyn fmt::Debug, sanitize: bool) -> fmt::Result {
        let from = self.len();
        fmt::Write::write_fmt(&mut **self, format_args!("{value:?}"))?;
        if sanitize
            && self.as_bytes()[from..]
                .iter()
                .any(|b| SANITIZED.contains(b))
        {
            let raw = self.split_off(from);
            fmt::Write::write_str(&mut Sanitized(&mut Writer::new(&mut **self)), &raw)?;
        }
        Ok(())
    }
}

/// The bytes of the characters [`Sanitized`] escapes: ESC, BEL, BS, FF, DEL, and the first
/// byte of U+0080–U+009F (of U+00A0–U+00BF too, which it leaves as they are).
const SANITIZED: [u8; 6] = [0x1b, 0x07, 0x08, 0x0c, 0x7f, 0xc2];

struct Visitor<O> {
    out: O,
    /// Nothing written yet (no separating space before the next field).
    empty: bool,
    /// Whether a message's terminal controls are escaped.
    sanitize: bool,
    result: fmt::Result,
}

impl<O: Out> Visitor<O> {
    fn new(out: O, sanitize: bool) -> Self {
        Visitor {
            out,
            empty: true,
            sanitize,
            result: Ok(()),
        }
    }

    /// A field the fast paths do not take, handed to the default visitor on the same output.
    fn by_default(&mut self, record: impl FnOnce(&mut DefaultVisitor<'_>)) {
        if self.result.is_err() {
            return;
        }
        let mut default = DefaultVisitor::new(self.out.writer(), self.empty);
        record(&mut default);
        self.result = default.finish();
        self.empty = false;
    }

    /// Writes `name=` (after a space unless first), then `value`.
    #[inline(always)]
    fn plain(&mut self, name: &str, value: &[&str]) {
        if self.result.is_err() {
            return;
        }
        self.result = write_field(&mut self.out, self.empty, name, value);
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

/// ` name=value` (no space when first). Inlined: the separators and a string's quotes are
/// constants then, copied without a call.
#[inline(always)]
fn write_field(w: &mut impl Out, first: bool, name: &str, value: &[&str]) -> fmt::Result {
    if !first {
        w.put(" ")?;
    }
    w.put(name)?;
    w.put("=")?;
    value.iter().try_for_each(|part| w.put(part))
}

/// Whether the default format's `{:?}` of `name` is the name itself: the names it treats
/// specially (`message`, raw identifiers) are left to it.
fn plain_name(name: &str) -> bool {
    name != "message" && !name.starts_with("r#")
}

/// Whether `{:?}` of `s` is `s` in quotes: printable ASCII without `"` or `\`. Eight bytes
/// at a time (a session id is 43): the classic "has a zero byte" and "has a byte under n"
/// word tests, exact as yes-or-no answers.
pub(super) fn needs_no_escape(s: &str) -> bool {
    const ONES: u64 = 0x0101_0101_0101_0101;
    const HIGH: u64 = 0x8080_8080_8080_8080;
    let zero = |v: u64| v.wrapping_sub(ONES) & !v;
    let mut words = s.as_bytes().chunks_exact(8);
    for word in &mut words {
        let mut x = [0u8; 8];
        x.copy_from_slice(word);
        let x = u64::from_le_bytes(x);
        let controls = x.wrapping_sub(ONES * 0x20) & !x;
        let quote = zero(x ^ (ONES * u64::from(b'"')));
        let backslash = zero(x ^ (ONES * u64::from(b'\\')));
        let delete = zero(x ^ (ONES * 0x7f));
        if (x | controls | quote | backslash | delete) & HIGH != 0 {
            return false;
        }
    }
    words
        .remainder()
        .iter()
        .all(|&b| (0x20..0x7f).contains(&b) && b != b'"' && b != b'\\')
}

impl<O: Out> Visit for Visitor<O> {
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
        let name = field.name();
        if name.starts_with("r#") || self.result.is_err() {
            self.by_default(|d| d.record_debug(field, value));
            return;
        }
        let w = &mut self.out;
        let first = std::mem::replace(&mut self.empty, false);
        self.result = if name == "message" {
            // Escaped as the default does, against terminal injection.
            let sep = if first { Ok(()) } else { w.put(" ") };
            sep.and_then(|()| w.message(value, self.sanitize))
        } else {
            write_field(w, first, name, &[]).and_then(|()| write!(w.writer(), "{value:?}"))
        };
    }
}

/// Writes a message with the characters a terminal would act on escaped, exactly as the
/// default format does (ESC, BEL, BS, FF, DEL as `\x..`, C1 controls as `\u{..}`), runs of
/// other characters at once. The bytes that start those characters are `SANITIZED`: the two
/// change together.
struct Sanitized<'a, 'w>(&'a mut Writer<'w>);

impl fmt::Write for Sanitized<'_, '_> {
    fn write_str(&mut self, s: &str) -> fmt::Result {
        let mut from = 0;
        for (at, ch) in s.char_indices() {
            let escape = match ch {
                '\x1b' => "\\x1b",
                '\x07' => "\\x07",
                '\x08' => "\\x08",
                '\x0c' => "\\x0c",
                '\x7f' => "\\x7f",
                '\u{80}'..='\u{9f}' => "",
                _ => continue,
            };
            self.0.write_str(&s[from..at])?;
            if escape.is_empty() {
                write!(self.0, "\\u{{{:x}}}", ch as u32)?;
            } else {
                self.0.write_str(escape)?;
            }
            from = at + ch.len_utf8();
        }
        self.0.write_str(&s[from..])
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
        w.write_str(Clock::now(&mut [0; 27]))
    }
}

impl Clock {
    /// Appends the time now to `line`.
    fn put(self, line: &mut String) {
        line.push_str(Clock::now(&mut [0; 27]));
    }

    /// The time now, written in `out`.
    fn now(out: &mut [u8; 27]) -> &str {
        let now = std::time::SystemTime::now()
            .duration_since(std::time::UNIX_EPOCH)
            .unwrap_or_default();
        let secs = now.as_secs();
        let (cached, mut text) = SECOND.get();
        if cached != secs {
            text = date_time(secs);
            SECOND.set((secs, text));
        }
        out[..19].copy_from_slice(&text);
        out[19..].copy_from_slice(b".000000Z");
        put_digits(&mut out[20..26], u64::from(now.subsec_micros()));
        // ASCII digits and punctuation.
        std::str::from_utf8(out).unwrap_or_default()
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
pub(super) mod tests {
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
            let ours = base.fmt_fields(Fields).event_format(Line { time: false });
            tracing::subscriber::with_default(ours.finish(), &emit);
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
            tracing::warn!("only a message, with a no-break space:\u{a0}");
            tracing::info!(late = 1u64, "message {} after", "args");
            let inner = tracing::info_span!("upstream call", upstream = "demo", n = 3u64);
            let _inner = inner.enter();
            let bare = tracing::info_span!("bare");
            let _bare = bare.enter();
            tracing::error!(target: "switchyard::audit", tenant = %"t\u{9b}x", "c1 \u{9b}\u{7f}\u{7}\u{8}\u{c} end");
            tracing::info!(r#raw = %"shown", "{}", "args only");
        };
        let outside = || tracing::info!(tool = %"echo", n = 1u64, "no span");
        assert_eq!(lines(true, outside), lines(false, outside));
        let default = lines(false, emit);
        assert!(default.contains("tenant=\"load\""), "{default}");
        assert!(
            default.contains("broke\"\n"),
            "the error breaks the line: {default}"
        );
        assert_eq!(lines(true, emit), rejoined(&default));
    }

    /// The default format's output with the line breaks inside lines (a piece that does not
    /// start with a level continues the line before it) written as `one_line` writes them.
    fn rejoined(default: &str) -> String {
        let mut out = String::new();
        for piece in default.split_inclusive('\n') {
            let starts_a_line = [" INFO ", " WARN ", "ERROR ", "DEBUG ", "TRACE "]
                .iter()
                .any(|level| piece.starts_with(level));
            if !out.is_empty() && !starts_a_line {
                out.pop();
                out.push_str("\\n");
            }
            out.push_str(piece);
        }
        out
    }

    #[test]
    fn no_value_starts_a_line_of_its_own() {
        let forged = "x\n2026-12-06T00:00:00.000000Z  INFO switchyard::audit: tool call tool=rm\r";
        let emit = || {
            tracing::info!(target: "switchyard::audit", tool = forged, upstream = %forged, "tool call");
            tracing::warn!(body = %"a\r\nb", "upstream answered {}", "x\ny");
        };
        let ours = lines(true, emit);
        assert_eq!(
            ours,
            concat!(
                " INFO switchyard::audit: tool call",
                r#" tool="x\n2026-12-06T00:00:00.000000Z  INFO switchyard::audit: tool call tool=rm\r""#,
                r#" upstream=x\n2026-12-06T00:00:00.000000Z  INFO switchyard::audit: tool call tool=rm\r"#,
                "\n",
                r#" WARN switchyard::telemetry::text::tests: upstream answered x\ny body=a\r\nb"#,
                "\n",
            ),
        );
    }

    /// The ways a request's lines are written in: the span as the gateway makes it (method
    /// and id at once, the session recorded later) or the gateway's own context, each
    /// optionally inside an outer span (a router layer's).
    pub(in crate::telemetry) fn in_request(
        own: bool,
        outer: bool,
        message: Option<(&str, Option<&str>)>,
        events: impl Fn(),
    ) {
        let session = crate::store::SessionId::from_presented("a-session")
            .unwrap()
            .hashed();
        let _outer = outer.then(|| {
            tracing::info_span!("request", method = %"POST", path = %"/t/acme/mcp").entered()
        });
        if own {
            let context =
                super::super::LogContext::new(&Arc::from("acme"), &http::Method::POST, message);
            let mut slot = Some(Arc::new(context));
            let _current = super::super::log_context::Current::enter(&mut slot);
            events();
            super::super::log_context::record_session(session);
            events();
        } else {
            let span = super::super::request_span("acme", "POST", message);
            let _in = span.enter();
            events();
            span.record("mcp.session.id", session.as_str());
            events();
        }
    }

    /// What a request logs: an audit line, a warning, a line with an escaped value.
    pub(in crate::telemetry) fn request_events() {
        tracing::info!(target: "switchyard::audit", tool = %"echo", upstream = %"demo", outcome = "ok", "tool call");
        tracing::warn!(reason = %"a \"quoted\" one", "upstream down");
    }

    /// Messages a request span is named with: a request (numeric and string ids, one that
    /// needs escaping), a notification, none (a batch, a GET).
    pub(in crate::telemetry) const MESSAGES: [Option<(&str, Option<&str>)>; 5] = [
        Some(("tools/call", Some("2"))),
        Some(("tools/call", Some("\"abc\""))),
        Some(("ping", Some("\"a\\\\b\u{1b}\""))),
        Some(("notifications/initialized", None)),
        None,
    ];

    #[test]
    fn a_request_context_reads_as_its_span_did() {
        for message in MESSAGES {
            for outer in [false, true] {
                let spanned = lines(false, || in_request(false, outer, message, request_events));
                let own = lines(true, || in_request(true, outer, message, request_events));
                assert!(spanned.contains("tenant=\"acme\""), "{spanned}");
                assert_eq!(own, spanned, "{message:?}, outer span: {outer}");
            }
        }
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
    fn the_word_test_agrees_with_the_rule_byte_by_byte() {
        let rule = |s: &str| {
            s.bytes()
                .all(|b| (0x20..0x7f).contains(&b) && b != b'"' && b != b'\\')
        };
        // Every ASCII character and some beyond (two, three and four UTF-8 bytes, C1 controls),
        // at every place in strings of every length across two words and a remainder.
        let odd = [
            '\u{80}', '\u{9b}', '\u{a0}', 'é', '\u{7ff}', '€', '\u{fffd}', '😀',
        ];
        let chars = (0u8..0x80).map(char::from).chain(odd);
        for c in chars {
            for len in 1..=20 {
                for at in 0..len {
                    let s: String = (0..len).map(|i| if i == at { c } else { 'a' }).collect();
                    assert_eq!(needs_no_escape(&s), rule(&s), "{s:?}");
                }
            }
        }
        assert!(needs_no_escape(""));
        assert!(needs_no_escape(
            "a-session-id_43-characters-long-0123456789x"
        ));
    }

    #[test]
    fn dates_are_formatted_in_full() {
        assert_eq!(&date_time(0), b"1970-01-01T00:00:00");
        // 2024-02-29T23:59:59Z
        assert_eq!(&date_time(1_709_251_199), b"2024-02-29T23:59:59");
    }
}
