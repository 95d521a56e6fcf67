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
use crate::jsonrpc::{Outcome, OwnedId, RawObject};

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

struct Inner {
    rx: super::sink::EventSource,
    conn: Arc<Connection>,
    upstream_id: u64,
    client_id: OwnedId,
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
    /// What the upstream's answer to an audited call said (read only for audited calls).
    answer: Answer,
    /// The upstream call's span (disabled when traces are off), closed at the end.
    span: tracing::Span,
    /// Whether dropping the stream before its end cancels the upstream request.
    cancel_on_drop: bool,
    /// What the request holds while it runs (a gated upstream's slot, `limits.concurrency`):
    /// given back when the request ends, however it ends (dropped with the rest).
    /// Boxed twice: a thin pointer keeps every `ForwardStream` (and `router::Reply`) small,
    /// and only gated calls hold something.
    _held: Option<Box<Box<dyn Send + Sync>>>,
}

impl ForwardStream {
    pub(crate) fn new(
        rx: super::sink::EventSource,
        conn: Arc<Connection>,
        upstream_id: u64,
        client_id: OwnedId,
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
        if let Some(inner) = self.inner.as_mut() {
            inner._held = held.map(|h| Box::new(Box::new(h) as Box<dyn Send + Sync>));
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

    /// Marks the request as waiting for its client's answers (parked) or not.
    pub fn set_waiting(&self, waiting: bool) {
        if let Some(inner) = self.inner.as_ref() {
            inner.conn.set_waiting(inner.upstream_id, waiting);
        }
    }

    /// The next item; `None` once the final item has been returned.
    pub async fn next(&mut self) -> Option<StreamItem> {
        let inner = self.inner.as_mut()?;
        let item = inner.next().await;
        if !matches!(item, StreamItem::Message(..))
            && let Some(inner) = self.inner.take()
        {
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
            Some(Some(StreamEvent::Response(b))) => {
                self.outcome = "ok";
                if self.audit_tool.is_some() {
                    self.answer = answer_of(&b);
                }
                StreamItem::Final(b)
            }
            Some(Some(StreamEvent::Failed(e))) => {
                self.outcome = "failed";
                StreamItem::Final(e.to_jsonrpc(Some(&self.client_id)))
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
                StreamItem::Final(err.to_jsonrpc(Some(&self.client_id)))
            }
        }
    }

    fn finish(self) {
        self.conn.set_waiting(self.upstream_id, false);
        let info = &self.conn.info;
        if self.outcome != "ok" {
            crate::telemetry::record_error(&self.span, self.outcome);
        }
        crate::metrics::get().observe_upstream(
            &info.tenant,
            &info.name,
            self.started.elapsed(),
            self.outcome,
        );
        let session = self.session.upgrade();
        if let Some(tool) = &self.audit_tool {
            let user = session.as_deref().map(|s| s.user());
            tracing::info!(
                target: "switchyard::audit",
                tenant = %info.tenant,
                user = user.unwrap_or("-"),
                tool = %tool,
                upstream = %info.name,
                outcome = self.answer.outcome().unwrap_or(self.outcome),
                duration_ms = self.started.elapsed().as_millis() as u64,
                "tool call"
            );
        }
        if let Some(session) = session {
            session.end_inflight(&self.client_id);
        }
    }
}

/// What a tool call's response said, for its audit event. One byte: it sits in every
/// forwarded request's state.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Answer {
    /// No response read (not audited, or not answered).
    Unread,
    Ok,
    /// A result with `isError: true`.
    ToolError,
    /// A JSON-RPC error.
    Error,
}

impl Answer {
    fn outcome(self) -> Option<&'static str> {
        match self {
            Answer::Unread => None,
            Answer::Ok => Some("ok"),
            Answer::ToolError => Some("tool_error"),
            Answer::Error => Some("error"),
        }
    }
}

/// What a tool call's response says.
fn answer_of(response: &[u8]) -> Answer {
    match crate::jsonrpc::parse(response) {
        Ok(crate::jsonrpc::Message::Response(r)) => match r.outcome {
            Outcome::Error(_) => Answer::Error,
            Outcome::Result(result) => {
                let failed = RawObject::parse(result)
                    .ok()
                    .and_then(|o| o.get("isError").map(|v| v.get() == "true"))
                    .unwrap_or(false);
                if failed {
                    Answer::ToolError
                } else {
                    Answer::Ok
                }
            }
        },
        _ => Answer::Ok,
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
