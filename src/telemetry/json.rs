//! The JSON log line: `tracing_subscriber`'s JSON format (flattened event fields, the current
//! span, no span list), with a request's own log context (`log_context`) written as the
//! current span it stands for.

use std::cell::Cell;
use std::fmt;

use tracing::{Event, Subscriber};
use tracing_subscriber::fmt::format::{Format, Json, Writer};
use tracing_subscriber::fmt::time::FormatTime;
use tracing_subscriber::fmt::{FmtContext, FormatEvent, FormatFields};
use tracing_subscriber::registry::LookupSpan;

use super::log_context;
use super::text::Clock;

/// The JSON line: the default format's, or, inside a request's own context, the default's
/// without a span and the context as `"span"` (the last member the default writes, with the
/// options used here).
pub struct JsonLine<T = Clock> {
    with_span: Format<Json, T>,
    without_span: Format<Json, T>,
}

impl JsonLine {
    pub fn new() -> JsonLine {
        JsonLine::from(Format::default().json().with_timer(Clock))
    }
}

impl<T: Clone> JsonLine<T> {
    /// Lines of `format` with its event's fields flattened and no span list.
    fn from(format: Format<Json, T>) -> JsonLine<T> {
        let format = format.flatten_event(true).with_span_list(false);
        JsonLine {
            with_span: format.clone().with_current_span(true),
            without_span: format.with_current_span(false),
        }
    }
}

thread_local! {
    /// A line being written without its span, reused.
    static LINE: Cell<String> = const { Cell::new(String::new()) };
}

impl<S, N, T> FormatEvent<S, N> for JsonLine<T>
where
    S: Subscriber + for<'a> LookupSpan<'a>,
    N: for<'a> FormatFields<'a> + 'static,
    T: FormatTime,
{
    fn format_event(
        &self,
        ctx: &FmtContext<'_, S, N>,
        mut w: Writer<'_>,
        event: &Event<'_>,
    ) -> fmt::Result {
        log_context::with_current(|current| {
            let Some(current) = current else {
                return self.with_span.format_event(ctx, w, event);
            };
            let mut line = LINE.take();
            line.clear();
            let written = self
                .without_span
                .format_event(ctx, Writer::new(&mut line), event);
            // `{…}\n`: the context goes in as the object's last member.
            let result = match (written, line.strip_suffix("}\n")) {
                (Ok(()), Some(open)) => {
                    let sep = if open.ends_with('{') { "" } else { "," };
                    w.write_str(open)
                        .and_then(|()| w.write_str(sep))
                        .and_then(|()| current.write_json(&mut w))
                        .and_then(|()| w.write_str("}\n"))
                }
                (Ok(()), None) => w.write_str(&line),
                (Err(e), _) => Err(e),
            };
            if line.capacity() <= 4096 {
                LINE.set(line);
            }
            result
        })
    }
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used)]
    use std::sync::{Arc, Mutex};

    use tracing_subscriber::fmt::MakeWriter;
    use tracing_subscriber::fmt::format::JsonFields;

    use super::*;
    use crate::telemetry::text::tests::{MESSAGES, in_request, request_events};

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

    /// The JSON lines `emit` logs: with this module's line, or as the gateway wrote them
    /// before it (the default JSON format with the current span and no span list).
    fn lines(ours: bool, emit: impl Fn()) -> String {
        let capture = Capture::default();
        let base = tracing_subscriber::fmt().with_writer(capture.clone());
        if ours {
            let line = JsonLine::from(Format::default().json().without_time());
            let ours = base.fmt_fields(JsonFields::new()).event_format(line);
            tracing::subscriber::with_default(ours.finish(), &emit);
        } else {
            let default = base
                .json()
                .without_time()
                .flatten_event(true)
                .with_current_span(true)
                .with_span_list(false);
            tracing::subscriber::with_default(default.finish(), &emit);
        }
        String::from_utf8(capture.0.lock().unwrap().clone()).unwrap()
    }

    #[test]
    fn a_request_context_reads_as_its_span_did() {
        for message in MESSAGES {
            for outer in [false, true] {
                let spanned = lines(false, || in_request(false, outer, message, request_events));
                let own = lines(true, || in_request(true, outer, message, request_events));
                assert!(spanned.contains("\"tenant\":\"acme\""), "{spanned}");
                assert_eq!(own, spanned, "{message:?}, outer span: {outer}");
            }
        }
    }

    #[test]
    fn lines_outside_a_request_are_the_default_ones() {
        let emit = || {
            tracing::info!(n = 1u64, "no span");
            let span = tracing::info_span!("upstream call", upstream = "demo");
            let _in = span.enter();
            tracing::warn!("in a span of its own");
        };
        assert_eq!(lines(true, emit), lines(false, emit));
    }
}
