//! `ForwardStream`: the events of one forwarded request, with the request's idle timeout
//! (restarted by progress) and hard deadline. On timeout the upstream gets
//! `notifications/cancelled`. Dropping the stream early (the client went away) is not a
//! cancellation for the session-based revisions (the request is drained in the background
//! until it finishes or times out, for a client that resumes); for the stateless revision it
//! is (`cancel_on_drop`).

use std::sync::{Arc, Weak};
use std::time::Duration;

use bytes::Bytes;
use tokio::time::Instant;

use super::{ClientSession, Connection, StreamEvent};
use crate::error::GatewayError;
use crate::events::MessageKind;
use crate::jsonrpc::{Outcome, RawObject, SharedId};

/// What the client gets next for a forwarded request.
#[derive(Debug)]
pub enum StreamItem {
    /// A notification or request to pass on before the response, and which it is (what a
    /// stream log may do with it when its client falls behind).
    Message(Bytes, MessageKind),
    /// The response (or an error response) in the client's terms: the last item.
    Final(Bytes),
    /// The client cancelled the request: nothing more will come.
    Cancelled,
}

pub struct ForwardStream {
    inner: Option<Inner>,
}

/// An edit of the final response: the new bytes, or `None` to leave it as it is.
pub type FinalEdit = Box<dyn FnOnce(&[u8]) -> Option<Bytes> + Send + Sync>;
/// An edit of a message sent before the response (a notification or a request to the client).
pub type MessageEdit = Box<dyn Fn(&[u8]) -> Option<Bytes> + Send + Sync>;

/// What a request holds while it runs and how its answer is edited: behind one thin pointer
/// (`Inner::_held`), as only some requests have either.
#[derive(Default)]
struct Riders {
    /// A gated upstream's slot (`ForwardStream::holding`).
    held: Option<Box<dyn Send + Sync>>,
    /// Rewrites the final response on its way to the client (`ForwardStream::on_final`).
    on_final: Option<FinalEdit>,
    /// Rewrites each message before the response (`ForwardStream::on_message`).
    on_message: Option<MessageEdit>,
}

struct Inner {
    rx: super::sink::EventSource,
    conn: Arc<Connection>,
    upstream_id: u64,
    client_id: SharedId,
    idle: Duration,
    idle_deadline: Instant,
    hard_deadline: Instant,
    max: Duration,
    session: Weak<dyn ClientSession>,
    started: Instant,
    /// How the request ended, for the metrics (`ok`, `failed`, `timeout`, `cancelled`).
    outcome: &'static str,
    /// The tool of a `tools/call` (its upstream's own name): an audit event at the end.
    audit_tool: Option<Box<str>>,
    /// What the upstream's answer said (its verdict comes with it; logged for audited calls).
    answer: Answer,
    /// The upstream call's span (disabled when traces are off), closed at the end.
    span: tracing::Span,
    /// Whether dropping the stream before its end cancels the upstream request.
    cancel_on_drop: bool,
    /// What the request holds while it runs (a gated upstream's slot, `limits.concurrency`):
    /// given back when the request ends, however it ends (dropped with the rest); and the
    /// edit of its answer (a task id made public). A thin pointer keeps every
    /// `ForwardStream` (and `router::Reply`) small, and only some requests have either.
    _held: Option<Box<Riders>>,
}

impl ForwardStream {
    pub(crate) fn new(
        rx: super::sink::EventSource,
        conn: Arc<Connection>,
        upstream_id: u64,
        client_id: SharedId,
        session: Weak<dyn ClientSession>,
        span: tracing::Span,
    ) -> ForwardStream {
        let now = Instant::now();
        let idle = conn.info.request_timeout;
        let max = conn.info.max_request_timeout;
        ForwardStream {
            inner: Some(Inner {
                rx,
                conn,
                upstream_id,
                client_id,
                idle,
                idle_deadline: now + idle,
                hard_deadline: now + max,
                max,
                session,
                started: now,
                outcome: "cancelled",
                audit_tool: None,
                answer: Answer::Unread,
                span,
                cancel_on_drop: false,
                _held: None,
            }),
        }
    }

    /// Logs an audit event for this tool call when it ends.
    pub fn audited(mut self, tool: String) -> ForwardStream {
        if let Some(inner) = self.inner.as_mut() {
            inner.audit_tool = Some(tool.into());
        }
        self
    }

    /// Holds `held` (a gated upstream's slot, `limits.concurrency`) until the request ends.
    pub fn holding(mut self, held: Option<impl Send + Sync + 'static>) -> ForwardStream {
        // Nothing to hold (an upstream without a gate): no riders made for it.
        if let (Some(inner), Some(h)) = (self.inner.as_mut(), held) {
            inner._held.get_or_insert_with(Box::default).held = Some(Box::new(h));
        }
        self
    }

    /// Makes dropping the stream before its end cancel the upstream request: a stateless
    /// (2026-07-28) client's closed response stream is its cancellation.
    pub fn cancel_on_drop(mut self) -> ForwardStream {
        if let Some(inner) = self.inner.as_mut() {
            inner.cancel_on_drop = true;
        }
        self
    }

    /// Passes the final response through `edit` (the router's: task ids of the upstream made
    /// the client's) before it is returned.
    pub fn on_final(mut self, edit: FinalEdit) -> ForwardStream {
        if let Some(inner) = self.inner.as_mut() {
            inner._held.get_or_insert_with(Box::default).on_final = Some(edit);
        }
        self
    }

    /// Marks the request as waiting for its client's answers (parked) or not.
    pub fn set_waiting(&self, waiting: bool) {
        if let Some(inner) = self.inner.as_ref() {
            inner.conn.set_waiting(inner.upstream_id, waiting);
        }
    }

    /// Passes every message before the response through `edit` (the router's: task ids of
    /// the upstream made the client's).
    pub fn on_message(mut self, edit: MessageEdit) -> ForwardStream {
        if let Some(inner) = self.inner.as_mut() {
            inner._held.get_or_insert_with(Box::default).on_message = Some(edit);
        }
        self
    }

    /// The next item; `None` once the final item has been returned.
    pub async fn next(&mut self) -> Option<StreamItem> {
        let inner = self.inner.as_mut()?;
        let mut item = inner.next().await;
        if let StreamItem::Message(m, kind) = &item
            && let Some(edit) = inner._held.as_ref().and_then(|r| r.on_message.as_ref())
            && let Some(edited) = edit(m)
        {
            item = StreamItem::Message(edited, *kind);
        }
        if !matches!(item, StreamItem::Message(..))
            && let Some(mut inner) = self.inner.take()
        {
            let edit = inner._held.as_mut().and_then(|r| r.on_final.take());
            if let (StreamItem::Final(body), Some(edit)) = (&item, edit)
                && let Some(edited) = edit(body)
            {
                item = StreamItem::Final(edited);
            }
            inner.finish();
        }
        Some(item)
    }
}

impl Inner {
    async fn next(&mut self) -> StreamItem {
        let hard = self.idle_deadline >= self.hard_deadline;
        let deadline = self.idle_deadline.min(self.hard_deadline);
        // What is queued is taken first, without arming a timer for each event (a flood goes
        // through here); the deadline is checked on the clock, so a flood cannot outrun it.
        let event = if Instant::now() >= deadline {
            None
        } else {
            tokio::select! {
                biased;
                ev = self.rx.recv() => Some(ev),
                _ = tokio::time::sleep_until(deadline) => None,
            }
        };
        match event {
            Some(Some(StreamEvent::Progress(b))) => {
                self.idle_deadline = Instant::now() + self.idle;
                StreamItem::Message(b, MessageKind::Progress)
            }
            Some(Some(StreamEvent::Message(b))) => {
                StreamItem::Message(b, MessageKind::Notification)
            }
            Some(Some(StreamEvent::Request(b))) => StreamItem::Message(b, MessageKind::Request),
            Some(Some(StreamEvent::Response(b, verdict))) => {
                self.outcome = "ok";
                self.answer = Answer::Answered(verdict);
                StreamItem::Final(b)
            }
            Some(Some(StreamEvent::Failed(e))) => {
                self.outcome = "failed";
                StreamItem::Final(e.to_jsonrpc(self.client_id.to_raw().as_deref()))
            }
            Some(None) => StreamItem::Cancelled,
            None => {
                let after = if hard { self.max } else { self.idle };
                self.conn
                    .cancel(self.upstream_id, "the gateway's request timeout elapsed");
                tracing::warn!(upstream = %self.conn.upstream_name(), timeout_ms = after.as_millis() as u64, "upstream request timed out; cancellation sent");
                self.outcome = "timeout";
                let err = GatewayError::UpstreamTimeout {
                    upstream: self.conn.upstream_name().to_owned(),
                    after,
                };
                StreamItem::Final(err.to_jsonrpc(self.client_id.to_raw().as_deref()))
            }
        }
    }

    fn finish(self) {
        self.conn.set_waiting(self.upstream_id, false);
        let info = &self.conn.info;
        if self.outcome != "ok" {
            crate::telemetry::record_error(&self.span, self.outcome);
        }
        let took = self.started.elapsed();
        info.series
            .observe(&info.tenant, &info.name, took, self.outcome);
        let session = self.session.upgrade();
        if let Some(tool) = &self.audit_tool {
            let user = session.as_deref().map(|s| s.user());
            tracing::info!(
                target: "switchyard::audit",
                tenant = &*info.tenant,
                user = user.unwrap_or("-"),
                tool = &*crate::telemetry::printable(tool),
                upstream = &*info.name,
                outcome = self.answer.outcome().unwrap_or(self.outcome),
                duration_ms = took.as_millis() as u64,
                "tool call"
            );
        }
        if let Some(session) = session {
            session.end_inflight(self.client_id.get());
        }
    }
}

/// What a tool call's response said, for its audit event. One byte: it sits in every
/// forwarded request's state.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Answer {
    /// No response read (not answered).
    Unread,
    Answered(Verdict),
}

impl Answer {
    fn outcome(self) -> Option<&'static str> {
        match self {
            Answer::Unread => None,
            Answer::Answered(Verdict::Ok) => Some("ok"),
            Answer::Answered(Verdict::ToolError) => Some("tool_error"),
            Answer::Answered(Verdict::Error) => Some("error"),
        }
    }
}

/// What a response says, read where it is parsed (`Connection::on_message`) and carried with
/// it, so the audit needs no second parse.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Verdict {
    Ok,
    /// A result with `isError: true` (a tool's own failure).
    ToolError,
    /// A JSON-RPC error.
    Error,
}

impl Verdict {
    /// The verdict on a response's outcome. Only a tool call's result is looked into
    /// (`isError` is a tool result's field; other results, a resource's contents say, are not
    /// scanned for it), and only when its text may hold `isError` at all.
    pub fn of(outcome: &Outcome<'_>, tool_call: bool) -> Verdict {
        match outcome {
            Outcome::Error(_) => Verdict::Error,
            Outcome::Result(result)
                if tool_call && crate::jsonrpc::may_hold(result.get(), "isError") =>
            {
                let failed = RawObject::parse(result)
                    .ok()
                    .and_then(|o| o.get("isError").map(|v| v.get() == "true"))
                    .unwrap_or(false);
                if failed {
                    Verdict::ToolError
                } else {
                    Verdict::Ok
                }
            }
            Outcome::Result(_) => Verdict::Ok,
        }
    }
}

impl Drop for ForwardStream {
    fn drop(&mut self) {
        let Some(mut inner) = self.inner.take() else {
            return;
        };
        if inner.cancel_on_drop {
            if tokio::runtime::Handle::try_current().is_ok() {
                inner
                    .conn
                    .cancel(inner.upstream_id, "the client closed the response stream");
            }
            inner.finish();
            return;
        }
        // The client stopped listening; the request still runs to its end (or its timeout).
        if let Ok(handle) = tokio::runtime::Handle::try_current() {
            handle.spawn(async move {
                loop {
                    if !matches!(inner.next().await, StreamItem::Message(..)) {
                        break;
                    }
                }
                inner.finish();
            });
        }
    }
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used)]
    use super::*;
    use serde_json::value::RawValue;

    fn raw(text: &str) -> Box<RawValue> {
        RawValue::from_string(text.to_owned()).unwrap()
    }

    #[test]
    fn only_a_tool_calls_result_is_looked_into_for_is_error() {
        let failed = raw(r#"{"content":[],"isError":true}"#);
        let escaped = raw(r#"{"content":[],"\u0069sError":true}"#);
        let fine = raw(r#"{"content":[{"type":"text","text":"isError"}],"isError":false}"#);
        let error = raw(r#"{"code":-32602,"message":"isError"}"#);
        assert_eq!(
            Verdict::of(&Outcome::Result(&failed), true),
            Verdict::ToolError
        );
        assert_eq!(
            Verdict::of(&Outcome::Result(&escaped), true),
            Verdict::ToolError
        );
        assert_eq!(Verdict::of(&Outcome::Result(&fine), true), Verdict::Ok);
        // Another method's result is not a tool's: never scanned, always `Ok`.
        assert_eq!(Verdict::of(&Outcome::Result(&failed), false), Verdict::Ok);
        assert_eq!(Verdict::of(&Outcome::Error(&error), true), Verdict::Error);
        assert_eq!(Verdict::of(&Outcome::Error(&error), false), Verdict::Error);
    }
}
