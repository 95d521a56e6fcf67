//! The requests upstreams sent a session's client (sampling, elicitation, roots, ping) that
//! wait for its answer, by the id the client sees (the table a `LiveSession` holds).
//! Bounded (`max_server_requests`): beyond it a new one is refused at once. Each expires
//! (`server_request_timeout`): the upstream then gets an error, and an answer the client
//! sends later finds nothing and is dropped. The client's answer, or the gateway's refusal,
//! goes back to whoever asked (`answer`, `refuse`): the upstream, or the retry dance.

use std::collections::HashMap;
use std::sync::{Arc, Mutex, Weak};
use std::time::Duration;

use serde_json::value::RawValue;

use super::{Connection, InternalReply};
use crate::error::ServerRequestRefusal;
use crate::jsonrpc::Outcome;

/// `(token the client sees, the upstream's own progressToken)`.
pub type ProgressMapping = (Box<str>, Box<RawValue>);

/// Where the client's answer to a server-to-client request goes.
pub struct ServerRequestRoute {
    pub connection: Weak<Connection>,
    /// The id the upstream used, echoed back verbatim.
    pub upstream_id: crate::jsonrpc::OwnedId,
    /// `(token the client sees, the upstream's own progressToken)` when the request asked for
    /// progress: the client's progress notifications are routed back with the original token.
    pub progress: Option<ProgressMapping>,
    /// Set when the gateway itself asked (the retry dance in front of a stateless upstream):
    /// the client's answer goes here, by `upstream_id`'s text, instead of to the upstream.
    pub answer_to: Option<tokio::sync::mpsc::UnboundedSender<super::Answer>>,
}

struct Waiting {
    route: ServerRequestRoute,
    /// The timer that refuses the request when it expires; stopped when it is answered.
    expiry: Option<tokio::task::AbortHandle>,
}

type Table = Mutex<HashMap<Box<str>, Waiting>>;

/// A session's server-to-client requests waiting for the client.
pub struct ServerRequests {
    /// Shared with the expiry timers (weakly: a timer never keeps a session's state alive).
    table: Arc<Table>,
    limit: usize,
    timeout: Duration,
}

impl ServerRequests {
    pub fn new(limit: usize, timeout: Duration) -> ServerRequests {
        ServerRequests {
            table: Arc::default(),
            limit,
            timeout,
        }
    }

    /// Records `route` under the client-facing `id` and starts its expiry; refused when the
    /// session has `limit` waiting already.
    pub fn insert(&self, id: &str, route: ServerRequestRoute) -> Result<(), ServerRequestRefusal> {
        let Ok(mut table) = self.table.lock() else {
            return Err(ServerRequestRefusal::SessionEnded);
        };
        if table.len() >= self.limit {
            return Err(ServerRequestRefusal::TooMany { limit: self.limit });
        }
        table.insert(
            id.into(),
            Waiting {
                route,
                expiry: None,
            },
        );
        drop(table);
        // Started after the entry exists, so a timer that fires at once finds it.
        let Ok(runtime) = tokio::runtime::Handle::try_current() else {
            return Ok(());
        };
        let (table, key, after) = (
            Arc::downgrade(&self.table),
            Box::<str>::from(id),
            self.timeout,
        );
        let timer = runtime.spawn(async move {
            tokio::time::sleep(after).await;
            expire(&table, &key, after).await;
        });
        let Ok(mut table) = self.table.lock() else {
            timer.abort();
            return Ok(());
        };
        match table.get_mut(id) {
            Some(waiting) => waiting.expiry = Some(timer.abort_handle()),
            // Answered (or expired) already.
            None => timer.abort(),
        }
        Ok(())
    }

    /// The route for the client's answer to `id` (raw JSON text), removed: the request no
    /// longer expires.
    pub fn take(&self, id: &str) -> Option<ServerRequestRoute> {
        let waiting = self.table.lock().ok()?.remove(id)?;
        Some(waiting.stop())
    }

    /// Removes the first request `matches` and returns its client-facing id and route.
    pub fn take_where(
        &self,
        matches: impl Fn(&ServerRequestRoute) -> bool,
    ) -> Option<(Box<str>, ServerRequestRoute)> {
        let mut table = self.table.lock().ok()?;
        let key = table
            .iter()
            .find(|(_, w)| matches(&w.route))
            .map(|(k, _)| k.clone())?;
        let waiting = table.remove(&key)?;
        Some((key, waiting.stop()))
    }

    /// The first `f` returns something for, among the waiting routes.
    pub fn find_map<T>(&self, f: impl Fn(&ServerRequestRoute) -> Option<T>) -> Option<T> {
        self.table.lock().ok()?.values().find_map(|w| f(&w.route))
    }

    /// Every waiting request, removed (the session ends).
    pub fn drain(&self) -> Vec<ServerRequestRoute> {
        self.table
            .lock()
            .map(|mut t| t.drain().map(|(_, w)| w.stop()).collect())
            .unwrap_or_default()
    }

    /// How many wait now.
    pub fn len(&self) -> usize {
        self.table.lock().map_or(0, |t| t.len())
    }

    /// Whether none waits.
    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }
}

impl Waiting {
    fn stop(self) -> ServerRequestRoute {
        if let Some(timer) = self.expiry {
            timer.abort();
        }
        self.route
    }
}

/// The timer of request `key` fired: if nobody answered, the upstream is told it expired.
async fn expire(table: &Weak<Table>, key: &str, after: Duration) {
    let Some(table) = table.upgrade() else { return };
    let waiting = table.lock().ok().and_then(|mut t| t.remove(key));
    drop(table);
    let Some(waiting) = waiting else { return };
    let route = waiting.route;
    tracing::warn!(
        upstream = route
            .connection
            .upgrade()
            .as_ref()
            .map_or("-", |c| c.upstream_name()),
        after_ms = after.as_millis() as u64,
        "a request to the client expired unanswered; the upstream got an error (a late answer will be dropped)"
    );
    refuse(route, &ServerRequestRefusal::Expired { after }).await;
}

/// Delivers the client's answer to a server-to-client request to whoever asked: the
/// upstream, or the gateway's own retry dance (`retry.rs`).
pub async fn answer(route: ServerRequestRoute, outcome: Outcome<'_>) {
    if let Some(tx) = &route.answer_to {
        let key = serde_json::from_str::<String>(route.upstream_id.get()).unwrap_or_default();
        let _ = tx.send((key.into(), InternalReply::from(outcome)));
        return;
    }
    if let Some(conn) = route.connection.upgrade() {
        conn.respond(&route.upstream_id, outcome).await;
    }
}

/// Answers a server-to-client request the client will not answer (it expired, or the session
/// ended) with `refusal`'s error, to whoever asked.
pub async fn refuse(route: ServerRequestRoute, refusal: &ServerRequestRefusal) {
    let error = refused(refusal);
    answer(route, Outcome::Error(&error)).await;
}

/// The error object an upstream gets for a request the gateway answered itself, counted.
pub(super) fn refused(refusal: &ServerRequestRefusal) -> Box<RawValue> {
    crate::metrics::get()
        .server_requests_refused
        .with_label_values(&[refusal.label()])
        .inc();
    refusal.error_object()
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used)]
    use super::*;

    fn route(
        answer_to: tokio::sync::mpsc::UnboundedSender<crate::upstream::Answer>,
    ) -> ServerRequestRoute {
        ServerRequestRoute {
            connection: Weak::new(),
            upstream_id: crate::jsonrpc::raw_string("q"),
            progress: None,
            answer_to: Some(answer_to),
        }
    }

    #[tokio::test]
    async fn requests_are_bounded_and_an_answered_one_makes_room() {
        let (tx, _rx) = tokio::sync::mpsc::unbounded_channel();
        let waiting = ServerRequests::new(2, Duration::from_secs(60));
        waiting.insert("\"a\"", route(tx.clone())).unwrap();
        waiting.insert("\"b\"", route(tx.clone())).unwrap();
        assert_eq!(
            waiting.insert("\"c\"", route(tx.clone())).err(),
            Some(ServerRequestRefusal::TooMany { limit: 2 })
        );
        assert!(waiting.take("\"a\"").is_some());
        assert!(waiting.take("\"a\"").is_none(), "taken once");
        waiting.insert("\"c\"", route(tx)).unwrap();
        assert_eq!(waiting.len(), 2);
    }

    #[tokio::test]
    async fn an_unanswered_request_expires_with_an_error_and_is_forgotten() {
        let (tx, mut rx) = tokio::sync::mpsc::unbounded_channel();
        let waiting = ServerRequests::new(4, Duration::from_millis(50));
        waiting.insert("\"a\"", route(tx.clone())).unwrap();
        waiting.insert("\"b\"", route(tx)).unwrap();
        assert!(waiting.take("\"b\"").is_some(), "answered in time");
        let (key, reply) = tokio::time::timeout(Duration::from_secs(10), rx.recv())
            .await
            .expect("expired within 10s")
            .unwrap();
        assert_eq!(&*key, "q");
        let crate::upstream::InternalReply::Error(e) = reply else {
            panic!("an error, not a result")
        };
        assert!(e.get().contains("-32001"), "{}", e.get());
        assert_eq!(waiting.len(), 0);
        assert!(
            waiting.take("\"a\"").is_none(),
            "a late answer finds nothing"
        );
        tokio::time::sleep(Duration::from_millis(100)).await;
        assert!(rx.try_recv().is_err(), "the answered one did not expire");
    }
}
