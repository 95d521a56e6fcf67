//! The transports under a connection (`Link`: stdio, Streamable HTTP, HTTP+SSE; a closed
//! set) and what a connection does through them: send a request or a message, wait until the
//! link carries requests, relay the upstream's own stream, close (ending or leaving the
//! upstream session, `Ending`).

use std::sync::Arc;
use std::time::Duration;

use bytes::Bytes;
use serde_json::value::RawValue;

use super::connection::Connection;
use super::http::{HttpLink, McpHeaders};
use super::legacy_sse::SseLink;
use super::stdio::{LinkState, StdioLink};
use crate::error::GatewayError;
use crate::jsonrpc::{self, Outcome};
use crate::protocol::param_headers::ParamHeaders;
use crate::telemetry::Propagation;

/// The transport under a connection. A closed set.
///
/// Every link is boxed: a connection is allocated per session for HTTP upstreams and for a
/// stdio process per session, and an inline link would size every one by the largest (the
/// Streamable HTTP link, 304 bytes; stdio's 136, the SSE link's 120), 16 bytes now.
pub enum Link {
    Stdio(Box<StdioLink>),
    Http(Box<HttpLink>),
    /// HTTP with SSE (2024-11-05).
    Sse(Box<SseLink>),
}

/// Why a session's live state on this replica goes away.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Ending {
    /// The client session is over (DELETE, expiry with nobody else to serve it): upstream
    /// sessions end too.
    End,
    /// Only this replica lets go (idle here, shutting down) while the stored session lives on:
    /// upstream HTTP sessions stay open for whichever replica serves the next request.
    Release,
}

impl Connection {
    /// The `Mcp-Method`/`Mcp-Name`/`Mcp-Param-*` headers of a request on an HTTP link of the
    /// stateless revision (none on other links).
    pub(super) fn mcp_headers(
        &self,
        method: &str,
        params: Option<&RawValue>,
        mirror: Option<&ParamHeaders>,
    ) -> Option<McpHeaders> {
        match &self.link {
            Link::Http(_) if self.is_stateless() => McpHeaders::of(method, params, mirror),
            _ => None,
        }
    }

    /// Whether requests on this link mirror tool arguments into `Mcp-Param-*` headers: an
    /// HTTP upstream of the stateless revision.
    pub fn mirrors_params(&self) -> bool {
        matches!(self.link, Link::Http(_)) && self.is_stateless()
    }

    /// Waits until the link can carry requests (bounded), or fails with a clear reason. An
    /// SSE link whose stream ended opens a new upstream session here. A ready link answers at
    /// once; the waits are boxed, large states that would otherwise size (and be copied
    /// with) every forwarded request's future.
    pub async fn ready(self: &Arc<Self>, timeout: Duration) -> Result<(), GatewayError> {
        match &self.link {
            Link::Stdio(l) if l.is_ready() => Ok(()),
            Link::Stdio(l) => Box::pin(l.ready(&self.info.name, timeout)).await,
            Link::Http(_) => Ok(()),
            Link::Sse(l) if l.is_ready() => Ok(()),
            Link::Sse(l) => Box::pin(l.ready(self, timeout)).await,
        }
    }

    /// Sends a request; an HTTP upstream also gets the trace context in headers.
    #[allow(clippy::manual_async_fn)] // an `async fn` keeps its arguments twice
    pub(super) fn send_request(
        self: &Arc<Self>,
        id: u64,
        bytes: Vec<u8>,
        trace: Option<Propagation>,
        mcp: Option<McpHeaders>,
    ) -> impl Future<Output = Result<(), GatewayError>> {
        async move {
            match &self.link {
                Link::Stdio(l) => {
                    l.send(&self.info.name, bytes, self.info.request_timeout)
                        .await
                }
                Link::Http(l) => {
                    l.spawn_request(self.clone(), id, Bytes::from(bytes), trace, mcp);
                    Ok(())
                }
                // Boxed: an HTTP exchange, a large state for every request's future.
                Link::Sse(l) => Box::pin(l.post(self, Bytes::from(bytes), trace.as_ref())).await,
            }
        }
    }

    /// Sends a notification (or a response) to the upstream.
    pub async fn send_message(self: &Arc<Self>, bytes: Vec<u8>) -> Result<(), GatewayError> {
        match &self.link {
            Link::Stdio(l) => {
                l.send(&self.info.name, bytes, self.info.request_timeout)
                    .await
            }
            Link::Http(l) => Box::pin(l.post_message(self, Bytes::from(bytes))).await,
            Link::Sse(l) => Box::pin(l.post(self, Bytes::from(bytes), None)).await,
        }
    }

    pub async fn notify(
        self: &Arc<Self>,
        method: &str,
        params: Option<&RawValue>,
    ) -> Result<(), GatewayError> {
        self.send_message(jsonrpc::notification(method, params))
            .await
    }

    pub(crate) async fn notify_during_handshake(
        self: &Arc<Self>,
        method: &str,
        params: Option<&RawValue>,
    ) -> Result<(), GatewayError> {
        self.notify(method, params).await
    }

    /// Answers a server-to-client request of the upstream (the client's reply, or an error).
    pub async fn respond(self: &Arc<Self>, upstream_id: &RawValue, outcome: Outcome<'_>) {
        let bytes = jsonrpc::response_with_id(upstream_id.get(), outcome);
        if let Err(e) = self.send_message(bytes).await {
            tracing::warn!(upstream = %self.info.name, error = %e, "could not deliver a reply to the upstream");
        }
    }

    /// Closes the link (process shutdown or upstream session DELETE) and fails what is pending.
    pub async fn close(&self) {
        self.close_as(Ending::End).await;
    }

    /// Closes the connection; on `Ending::Release` an upstream HTTP session is left open for
    /// another replica that continues the client session.
    pub async fn close_as(&self, ending: Ending) {
        match &self.link {
            Link::Stdio(l) => l.close().await,
            Link::Http(l) => l.close(ending == Ending::End).await,
            Link::Sse(l) => l.close(),
        }
        self.fail_all(&GatewayError::UpstreamClosed {
            upstream: self.info.name.to_string(),
            reason: "the connection was closed".into(),
        });
    }

    /// Starts relaying the upstream's own stream of unsolicited messages (HTTP GET stream,
    /// or the gateway's `subscriptions/listen` on a stateless upstream). Stdio upstreams
    /// always relay; this is a no-op for them.
    pub fn listen(self: &Arc<Self>) {
        if self.is_stateless() {
            self.subscribe();
            return;
        }
        if let Link::Http(l) = &self.link {
            l.listen(self);
        }
    }

    /// Opens a session-based HTTP upstream's GET stream for stateless (2026-07-28) clients,
    /// which have none of their own (one per tenant and user, not per client session): an
    /// upstream may send its requests there (`roots/list` from inside a tool), which then reach
    /// the client on the stream of the call they belong to, or are refused at once — never
    /// left for the upstream to time out. Other links need nothing.
    pub fn listen_for_requests(self: &Arc<Self>) {
        if let Link::Http(l) = &self.link
            && !self.is_stateless()
        {
            l.listen(self);
        }
    }

    /// Waits (bounded) until an HTTP upstream has answered the GET stream `listen` opened, so
    /// the link's first request cannot overtake it (`HttpLink::stream_answered`); at once for
    /// other links.
    pub async fn stream_answered(&self) {
        if let Link::Http(l) = &self.link {
            l.stream_answered().await;
        }
    }

    /// Whether the link carries requests now (stdio: handshake done; HTTP: always, as its
    /// sessions open on demand; SSE: a stream is open and initialized).
    pub fn is_ready(&self) -> bool {
        match &self.link {
            Link::Stdio(l) => matches!(l.state(), LinkState::Ready),
            Link::Http(_) => true,
            Link::Sse(l) => l.is_ready(),
        }
    }

    /// Where a stdio connection's child stands (`None` for HTTP links).
    pub fn link_state(&self) -> Option<LinkState> {
        match &self.link {
            Link::Stdio(l) => Some(l.state()),
            Link::Http(_) | Link::Sse(_) => None,
        }
    }

    /// The child process id of a stdio connection (diagnostics and tests).
    pub fn pid(&self) -> Option<u32> {
        match &self.link {
            Link::Stdio(l) => l.pid(),
            Link::Http(_) | Link::Sse(_) => None,
        }
    }

    /// The connection worker a stdio connection's answers are read on (`workers::home`'s
    /// numbering; 0 when not on a worker, and for HTTP links, whose answers are read by the
    /// caller's own task).
    pub fn home(&self) -> usize {
        match &self.link {
            Link::Stdio(l) => l.home(),
            Link::Http(_) | Link::Sse(_) => 0,
        }
    }

    /// Restarts of a stdio connection after unexpected exits.
    pub fn restarts(&self) -> u64 {
        match &self.link {
            Link::Stdio(l) => l.restarts(),
            Link::Http(_) | Link::Sse(_) => 0,
        }
    }

    /// The upstream's own session id (Streamable HTTP; an SSE session cannot be continued
    /// from another replica, so it has none to record).
    pub fn upstream_session_id(&self) -> Option<String> {
        match &self.link {
            Link::Http(l) => l.session_id(),
            Link::Stdio(_) | Link::Sse(_) => None,
        }
    }
}

/// Starts a stdio connection's process (and its supervision).
pub(super) fn start_stdio(conn: &Arc<Connection>) {
    if let Link::Stdio(l) = &conn.link {
        l.start(
            Arc::downgrade(conn),
            conn.info.init_timeout,
            conn.info.max_message,
        );
    }
}
