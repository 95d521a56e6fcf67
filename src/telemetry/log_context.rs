//! A request's log context kept by the gateway itself (`LogContext`), in place of a `tracing`
//! span when no span needs to exist: no trace is exported and the log filter names no span.
//! The log line writes it exactly as it would have written the request span's fields
//! (`request{tenant=… http.request.method=… mcp.method.name=… jsonrpc.request.id=…
//! mcp.session.id=…}:` in text, `"span":{…,"name":"request"}` in JSON); the span cost a
//! forwarded call ~7,000 instructions (made with its fields formatted, recorded into, entered,
//! left and closed through the span registry and each layer), the context a few hundred.
//!
//! The context is current on a thread while a request's future is polled there
//! ([`Current`], held by `in_span`'s future) and is read by the log line's formatter
//! ([`with_current`]); tasks a request spawns carry it (`telemetry::carry`).

use std::cell::Cell;
use std::fmt;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, OnceLock};

use crate::store::HashedId;

/// Whether requests log with a [`LogContext`] instead of a span. Set once at start.
static IN_USE: AtomicBool = AtomicBool::new(false);

/// Whether requests log with a [`LogContext`] instead of a span (no trace exported, no span
/// in the log filter).
pub fn in_use() -> bool {
    IN_USE.load(Ordering::Relaxed)
}

/// Makes requests log with a [`LogContext`] from now on (at start, before any request).
pub(super) fn use_it() {
    IN_USE.store(true, Ordering::Relaxed);
}

/// What a request's log lines say about it: the fields of its request span.
#[derive(Debug)]
pub struct LogContext {
    tenant: Arc<str>,
    http_method: http::Method,
    /// The client message's method, when known, and a request's id (its raw JSON text).
    method: Option<Text>,
    id: Option<Text>,
    /// Set once the request's session is found.
    session: OnceLock<HashedId>,
}

impl LogContext {
    /// The context of an exchange with `tenant` by `http_method`, and the client message it
    /// carries when known (its method, and a request's id).
    pub fn new(
        tenant: &Arc<str>,
        http_method: &http::Method,
        message: Option<(&str, Option<&str>)>,
    ) -> LogContext {
        let (method, id) = match message {
            None => (None, None),
            Some((method, id)) => (Some(Text::new(method)), id.map(Text::new)),
        };
        LogContext {
            tenant: Arc::clone(tenant),
            http_method: http_method.clone(),
            method,
            id,
            session: OnceLock::new(),
        }
    }

    /// The same context naming the client message (for a context made before it was known).
    pub fn naming(&self, method: &str, id: Option<&str>) -> LogContext {
        let named = LogContext::new(&self.tenant, &self.http_method, Some((method, id)));
        if let Some(s) = self.session.get() {
            let _ = named.session.set(*s);
        }
        named
    }

    fn method(&self) -> Option<&str> {
        self.method.as_ref().map(Text::as_str)
    }

    fn id(&self) -> Option<&str> {
        self.id.as_ref().map(Text::as_str)
    }

    /// Records the request's session (the first one named).
    pub fn set_session(&self, id: HashedId) {
        let _ = self.session.set(id);
    }

    /// Writes the context as the text format writes a span named `request` with these fields:
    /// `request{tenant="t" http.request.method="POST" …}:`.
    pub(super) fn write_text(&self, w: &mut impl fmt::Write) -> fmt::Result {
        text_field(w, "request{tenant=\"", &self.tenant)?;
        text_field(w, " http.request.method=\"", self.http_method.as_str())?;
        if let Some(method) = self.method() {
            text_field(w, " mcp.method.name=\"", method)?;
        }
        if let Some(id) = self.id() {
            text_field(w, " jsonrpc.request.id=\"", id)?;
        }
        if let Some(session) = self.session.get() {
            text_field(w, " mcp.session.id=\"", session.as_str())?;
        }
        w.write_str("}:")
    }

    /// Writes the context as the JSON format writes the current span: `"span":{…}` with the
    /// fields in name order, then the span's name.
    pub(super) fn write_json(&self, w: &mut impl fmt::Write) -> fmt::Result {
        w.write_str("\"span\":{")?;
        json_field(w, "http.request.method", self.http_method.as_str())?;
        if let Some(id) = self.id() {
            json_field(w, "jsonrpc.request.id", id)?;
        }
        if let Some(method) = self.method() {
            json_field(w, "mcp.method.name", method)?;
        }
        if let Some(session) = self.session.get() {
            json_field(w, "mcp.session.id", session.as_str())?;
        }
        json_field(w, "tenant", &self.tenant)?;
        w.write_str("\"name\":\"request\"}")
    }
}

/// Text a context keeps without an allocation of its own where it can: a short method name
/// (`tools/call`) or id (a number, a short string) is held in place. Every request makes a
/// context; its names were a buffer of their own.
#[derive(Debug)]
enum Text {
    Inline(u8, [u8; INLINE]),
    Heap(Box<str>),
}

/// The longest text held in place (any `u64` id, quoted, fits; so do most MCP methods).
const INLINE: usize = 22;

impl Text {
    fn new(text: &str) -> Text {
        let mut bytes = [0u8; INLINE];
        match (bytes.get_mut(..text.len()), u8::try_from(text.len())) {
            (Some(place), Ok(len)) => {
                place.copy_from_slice(text.as_bytes());
                Text::Inline(len, bytes)
            }
            _ => Text::Heap(text.into()),
        }
    }

    fn as_str(&self) -> &str {
        match self {
            // Whole `str`s were copied in: always valid.
            Text::Inline(len, bytes) => bytes
                .get(..usize::from(*len))
                .and_then(|b| std::str::from_utf8(b).ok())
                .unwrap_or_default(),
            Text::Heap(s) => s,
        }
    }
}

/// `lead` — what goes before the value, up to its opening quote, e.g. ` tenant="` — and the
/// value, quoted as it is or escaped as `{:?}` escapes it. Inlined: each `lead` is a constant
/// then, copied without a call (an audit line writes five of these).
#[inline(always)]
fn text_field(w: &mut impl fmt::Write, lead: &'static str, value: &str) -> fmt::Result {
    if super::text::needs_no_escape(value) {
        w.write_str(lead)?;
        w.write_str(value)?;
        w.write_char('"')
    } else {
        w.write_str(lead.strip_suffix('"').unwrap_or(lead))?;
        write!(w, "{value:?}")
    }
}

/// `"name":"value",` with the value escaped as `serde_json` escapes it.
fn json_field(w: &mut impl fmt::Write, name: &str, value: &str) -> fmt::Result {
    w.write_char('"')?;
    w.write_str(name)?;
    w.write_str("\":")?;
    if value.bytes().all(|b| b >= 0x20 && b != b'"' && b != b'\\') {
        w.write_char('"')?;
        w.write_str(value)?;
        w.write_char('"')?;
    } else {
        let quoted = serde_json::to_string(value).map_err(|_| fmt::Error)?;
        w.write_str(&quoted)?;
    }
    w.write_char(',')
}

thread_local! {
    /// The context of the request whose future this thread is polling, if any.
    static CURRENT: Cell<Option<Arc<LogContext>>> = const { Cell::new(None) };
}

/// Calls `f` with the context current on this thread.
pub(super) fn with_current<R>(f: impl FnOnce(Option<&LogContext>) -> R) -> R {
    CURRENT.with(|c| {
        let current = c.take();
        let out = f(current.as_deref());
        c.set(current);
        out
    })
}

/// Records `id` as the session of the context current on this thread, if any.
pub(super) fn record_session(id: HashedId) {
    with_current(|c| {
        if let Some(c) = c {
            c.set_session(id);
        }
    });
}

/// A handle to the context current on this thread (for a task that carries it).
pub(super) fn current() -> Option<Arc<LogContext>> {
    CURRENT.with(|c| {
        let current = c.take();
        let handle = current.clone();
        c.set(current);
        handle
    })
}

/// Makes a context current on this thread while it lives, and the one before it current
/// again when dropped (also when a poll panics). Nothing changes for `None`.
pub(super) struct Current<'a> {
    slot: &'a mut Option<Arc<LogContext>>,
    entered: bool,
}

impl<'a> Current<'a> {
    /// Takes the context out of `slot` and makes it current; `slot` keeps the one before it
    /// until this is dropped.
    pub(super) fn enter(slot: &'a mut Option<Arc<LogContext>>) -> Current<'a> {
        let entered = slot.is_some();
        if entered {
            swap(slot);
        }
        Current { slot, entered }
    }
}

impl Drop for Current<'_> {
    fn drop(&mut self) {
        if self.entered {
            swap(self.slot);
        }
    }
}

/// Exchanges `slot` with the current context.
fn swap(slot: &mut Option<Arc<LogContext>>) {
    *slot = CURRENT.replace(slot.take());
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used)]

    use super::*;
    use crate::store::SessionId;

    fn context(message: Option<(&str, Option<&str>)>) -> Arc<LogContext> {
        Arc::new(LogContext::new(
            &Arc::from("acme"),
            &http::Method::POST,
            message,
        ))
    }

    #[test]
    fn current_while_entered_and_the_one_before_again_after() {
        let outer = context(Some(("tools/call", Some("1"))));
        let inner = context(Some(("ping", Some("2"))));
        let method = || with_current(|c| c.and_then(LogContext::method).map(str::to_owned));
        assert_eq!(method(), None);
        let mut outer_slot = Some(Arc::clone(&outer));
        {
            let _outer = Current::enter(&mut outer_slot);
            assert_eq!(method().as_deref(), Some("tools/call"));
            let mut inner_slot = Some(Arc::clone(&inner));
            {
                let _inner = Current::enter(&mut inner_slot);
                assert_eq!(method().as_deref(), Some("ping"));
                let mut none = None;
                let _none = Current::enter(&mut none);
                assert_eq!(method().as_deref(), Some("ping"), "None changes nothing");
            }
            assert!(inner_slot.is_some_and(|c| Arc::ptr_eq(&c, &inner)));
            assert_eq!(method().as_deref(), Some("tools/call"));
            assert!(current().is_some_and(|c| Arc::ptr_eq(&c, &outer)));
        }
        assert!(outer_slot.is_some_and(|c| Arc::ptr_eq(&c, &outer)));
        assert_eq!(method(), None);
        assert!(current().is_none());
    }

    #[test]
    fn a_panicking_poll_leaves_the_context_it_entered() {
        let ctx = context(None);
        let caught = std::panic::catch_unwind(|| {
            let mut slot = Some(Arc::clone(&ctx));
            let _in = Current::enter(&mut slot);
            panic!("a request's future panicked");
        });
        assert!(caught.is_err());
        assert!(current().is_none(), "nothing stays current on the thread");
    }

    #[test]
    fn fields_are_written_in_the_order_and_escaping_of_a_span() {
        let ctx = context(Some(("tools/call", Some("\"a\\b\""))));
        ctx.set_session(SessionId::generate().hashed());
        let session = ctx.session.get().unwrap().as_str().to_owned();
        let mut text = String::new();
        ctx.write_text(&mut text).unwrap();
        assert_eq!(
            text,
            format!(
                r#"request{{tenant="acme" http.request.method="POST" mcp.method.name="tools/call" jsonrpc.request.id="\"a\\b\"" mcp.session.id="{session}"}}:"#
            )
        );
        let mut json = String::new();
        ctx.write_json(&mut json).unwrap();
        assert_eq!(
            json,
            format!(
                r#""span":{{"http.request.method":"POST","jsonrpc.request.id":"\"a\\b\"","mcp.method.name":"tools/call","mcp.session.id":"{session}","tenant":"acme","name":"request"}}"#
            )
        );
        let bare = context(None);
        let mut text = String::new();
        bare.write_text(&mut text).unwrap();
        assert_eq!(
            text,
            r#"request{tenant="acme" http.request.method="POST"}:"#
        );
        let named = bare.naming("notifications/initialized", None);
        let mut text = String::new();
        named.write_text(&mut text).unwrap();
        assert_eq!(
            text,
            r#"request{tenant="acme" http.request.method="POST" mcp.method.name="notifications/initialized"}:"#
        );
    }

    #[test]
    fn names_are_kept_whole_however_long_or_unknown() {
        let long_id = format!("\"{}\"", "x".repeat(40));
        for (method, id) in [
            ("tools/call", Some("18446744073709551615")),
            ("tools/call", Some("\"0123456789abcdefghij\"")),
            ("tools/call", Some(long_id.as_str())),
            ("vendor/éxtension", Some("1")),
            ("a/method/the/gateway/does/not/know/of/at/all", None),
            ("other", Some("-7")),
            ("", Some("1")),
        ] {
            let ctx = context(Some((method, id)));
            assert_eq!(ctx.method(), Some(method));
            assert_eq!(ctx.id(), id);
        }
        assert!(matches!(Text::new("tools/call"), Text::Inline(..)));
        assert!(matches!(
            Text::new("18446744073709551615"),
            Text::Inline(..)
        ));
        assert!(matches!(Text::new(&long_id), Text::Heap(_)));
    }
}
