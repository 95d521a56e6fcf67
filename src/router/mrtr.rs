//! Multi round-trip requests (2026-07-28) in front of upstreams that ask their client in the
//! middle of a request (elicitation, sampling, roots): the gateway answers the stateless
//! client with an `input_required` result, keeps the upstream request open ("parked"), and
//! resumes it when the client retries with `inputResponses` and the `requestState` the
//! gateway signed. The state names the parked request, the user, the request it belongs to
//! and an expiry, under the tenant's key: a tampered, foreign or stale state is refused. A
//! retry that reaches another replica is continued by the replica holding the request, over
//! the bus (`Resume` there, `Resumed` events back).

use std::collections::HashMap;
use std::sync::{Arc, Mutex};
use std::time::{Duration, SystemTime, UNIX_EPOCH};

use serde::{Deserialize, Serialize};
use serde_json::value::RawValue;
use serde_json::{Map, Value};
use tokio::sync::{mpsc, oneshot};

use crate::error::GatewayError;
use crate::jsonrpc::{Outcome, RawObject};
use crate::session::LiveSession;
use crate::tenant::Tenant;
use crate::upstream::ForwardStream;

/// How long a parked request waits for the client's retry.
pub const PARK_FOR: Duration = Duration::from_secs(600);

/// One question of an upstream to its client, waiting for the client's answer.
pub struct Question {
    /// The key in `inputRequests` (the gateway's id for the upstream's request, as text).
    pub key: String,
    /// The gateway's id of the upstream's request, raw JSON (how the session routes answers).
    pub raw_id: String,
    /// `{"method": .., "params": ..}`.
    pub request: Value,
}

/// A forwarded request waiting for its client's answers.
pub struct Parked {
    pub session: Arc<LiveSession>,
    pub stream: ForwardStream,
    pub questions: Vec<Question>,
}

/// What a `requestState` says, signed.
#[derive(Serialize, Deserialize)]
struct State {
    /// The parked request (empty for an upstream's own state).
    #[serde(default)]
    h: String,
    /// The replica holding it.
    #[serde(default)]
    r: String,
    /// A stateless upstream's own `requestState`, wrapped: any replica continues it.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    p: Option<String>,
    /// The user it belongs to (derived, not the user name).
    u: String,
    /// The method and the name or URI of the request it belongs to.
    m: String,
    n: Option<String>,
    /// Expiry, seconds since the epoch.
    x: u64,
}

/// The requests of this replica parked for their clients' retries, and the retries going on
/// across replicas (a shared handle).
#[derive(Default, Clone)]
pub struct Interactions {
    parked: Arc<Mutex<HashMap<String, Parked>>>,
    /// Retries received here, continued by another replica: their events, by key.
    remote: Arc<Mutex<HashMap<String, RelaySender>>>,
    /// Requests continued here for a retry received by another replica: dropping the sender
    /// stops one (its client went away).
    continuing: Arc<Mutex<HashMap<String, oneshot::Sender<()>>>>,
}

/// One event of a request continued on another replica: an empty message says it goes on.
pub struct Resumed {
    pub message: bytes::Bytes,
    pub done: bool,
    pub status: u16,
}

/// Events relayed from another replica beyond which notifications are dropped (a slow client
/// behind a flood); the final event and the holder's beats always pass.
const RELAY_BACKLOG: usize = 1024;

/// The sending half of a relayed retry's events, with the count of those not read yet.
#[derive(Clone)]
struct RelaySender {
    tx: mpsc::UnboundedSender<Resumed>,
    queued: Arc<std::sync::atomic::AtomicUsize>,
}

/// The events of a retry continued by another replica, in order.
pub struct RelayReceiver {
    rx: mpsc::UnboundedReceiver<Resumed>,
    queued: Arc<std::sync::atomic::AtomicUsize>,
}

impl RelayReceiver {
    pub async fn recv(&mut self) -> Option<Resumed> {
        let event = self.rx.recv().await;
        if event.is_some() {
            self.queued
                .fetch_sub(1, std::sync::atomic::Ordering::Relaxed);
        }
        event
    }
}

/// Ends the wait for a retry's events when dropped.
pub struct RemoteWait {
    remote: Arc<Mutex<HashMap<String, RelaySender>>>,
    pub key: String,
}

impl Drop for RemoteWait {
    fn drop(&mut self) {
        if let Ok(mut m) = self.remote.lock() {
            m.remove(&self.key);
        }
    }
}

/// The request a state is bound to: method and the name or URI it targets.
pub struct Target<'a> {
    pub method: &'a str,
    pub name: Option<&'a str>,
}

impl Interactions {
    /// Parks `parked` and returns the `input_required` result (the `result` member) for it.
    pub fn park(
        &self,
        tenant: &Tenant,
        replica: &str,
        user: &str,
        target: &Target<'_>,
        parked: Parked,
    ) -> Value {
        let handle = crate::session::SessionId::generate().as_str().to_owned();
        let expiry = SystemTime::now()
            .duration_since(UNIX_EPOCH)
            .unwrap_or_default()
            + PARK_FOR;
        let state = State {
            h: handle.clone(),
            r: replica.to_owned(),
            p: None,
            u: tenant.cursor_key.derive(&[b"user", user.as_bytes()]),
            m: target.method.to_owned(),
            n: target.name.map(str::to_owned),
            x: expiry.as_secs(),
        };
        let token = seal(tenant, &state);
        let mut requests = Map::new();
        for q in &parked.questions {
            requests.insert(q.key.clone(), q.request.clone());
        }
        parked.stream.set_waiting(true);
        if let Ok(mut map) = self.parked.lock() {
            map.insert(handle.clone(), parked);
        }
        let map = self.parked.clone();
        tokio::spawn(async move {
            tokio::time::sleep(PARK_FOR).await;
            // Dropping the stream cancels the upstream request nobody came back for.
            let gone = map.lock().ok().and_then(|mut m| m.remove(&handle));
            drop(gone);
        });
        let mut result = Map::new();
        result.insert("resultType".into(), "input_required".into());
        result.insert("inputRequests".into(), Value::Object(requests));
        result.insert("requestState".into(), token.into());
        Value::Object(result)
    }

    /// What a retry's `requestState` continues: a request parked here (taken out of the
    /// parking), or a stateless upstream's own state.
    pub fn claim(
        &self,
        tenant: &Tenant,
        replica: &str,
        user: &str,
        target: &Target<'_>,
        token: &str,
    ) -> Result<Claim, GatewayError> {
        let refused = |why: &str| {
            GatewayError::InvalidParams(format!(
                "Invalid requestState: {why}; send the request again without requestState"
            ))
        };
        let state: State = tenant
            .cursor_key
            .open(token)
            .and_then(|p| serde_json::from_slice(&p).ok())
            .ok_or_else(|| refused("it was not issued by this gateway or was altered"))?;
        if state.u != tenant.cursor_key.derive(&[b"user", user.as_bytes()]) {
            return Err(refused("it belongs to another user"));
        }
        if state.m != target.method || state.n.as_deref() != target.name {
            return Err(refused("it belongs to another request"));
        }
        let now = SystemTime::now()
            .duration_since(UNIX_EPOCH)
            .unwrap_or_default()
            .as_secs();
        if now > state.x {
            return Err(refused("it has expired"));
        }
        if let Some(inner) = state.p {
            return Ok(Claim::Upstream(inner));
        }
        if state.r != replica {
            return Ok(Claim::Elsewhere {
                replica: state.r,
                handle: state.h,
            });
        }
        let parked = self
            .take(&state.h)
            .ok_or_else(|| refused("the request it continues has ended"))?;
        Ok(Claim::Parked(Box::new(parked)))
    }

    /// Takes a request parked here out of the parking (for its retry).
    pub fn take(&self, handle: &str) -> Option<Parked> {
        let parked = self.parked.lock().ok()?.remove(handle)?;
        parked.stream.set_waiting(false);
        Some(parked)
    }

    /// Waits for the events of a retry continued by another replica, under a fresh key.
    pub fn wait_remote(&self) -> (RemoteWait, RelayReceiver) {
        let key = crate::session::SessionId::generate().as_str().to_owned();
        let (tx, rx) = mpsc::unbounded_channel();
        let queued = Arc::new(std::sync::atomic::AtomicUsize::new(0));
        if let Ok(mut m) = self.remote.lock() {
            m.insert(
                key.clone(),
                RelaySender {
                    tx,
                    queued: queued.clone(),
                },
            );
        }
        let rx = RelayReceiver { rx, queued };
        let wait = RemoteWait {
            remote: self.remote.clone(),
            key,
        };
        (wait, rx)
    }

    /// An event of a retry continued by another replica (dropped when nobody waits). Past
    /// `RELAY_BACKLOG` unread events, what is neither the final event nor a beat (the
    /// request's notifications) is dropped and counted: the client still gets the answer.
    pub fn on_resumed(&self, key: &str, event: Resumed) {
        use std::sync::atomic::Ordering;
        let Some(sender) = self.remote.lock().ok().and_then(|m| m.get(key).cloned()) else {
            return;
        };
        let notification = !event.done && !event.message.is_empty();
        if notification && sender.queued.load(Ordering::Relaxed) >= RELAY_BACKLOG {
            crate::metrics::get().dropped_notification("relay_backlog");
            return;
        }
        sender.queued.fetch_add(1, Ordering::Relaxed);
        if sender.tx.send(event).is_err() {
            sender.queued.fetch_sub(1, Ordering::Relaxed);
        }
    }

    /// Registers a request continued here for another replica's client; the receiver
    /// resolves when that client goes away ([`Interactions::stop_continuing`]).
    pub fn continuing(&self, key: &str) -> oneshot::Receiver<()> {
        let (tx, rx) = oneshot::channel();
        if let Ok(mut m) = self.continuing.lock() {
            m.insert(key.to_owned(), tx);
        }
        rx
    }

    /// Ends the registration of a request continued here (finished, or its client left).
    pub fn stop_continuing(&self, key: &str) {
        let gone = self.continuing.lock().ok().and_then(|mut m| m.remove(key));
        drop(gone);
    }
}

/// What a client's `requestState` continues.
pub enum Claim {
    Parked(Box<Parked>),
    /// Parked on another replica, which continues it.
    Elsewhere {
        replica: String,
        handle: String,
    },
    /// The upstream's own state, to send it back with the retry.
    Upstream(String),
}

/// A stateless upstream's `requestState` wrapped for the client: bound to the user, the
/// request and an expiry under the tenant's key, like the gateway's own.
pub fn wrap(tenant: &Tenant, user: &str, target: &Target<'_>, inner: String) -> String {
    let expiry = SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .unwrap_or_default()
        + PARK_FOR;
    let state = State {
        h: String::new(),
        r: String::new(),
        p: Some(inner),
        u: tenant.cursor_key.derive(&[b"user", user.as_bytes()]),
        m: target.method.to_owned(),
        n: target.name.map(str::to_owned),
        x: expiry.as_secs(),
    };
    seal(tenant, &state)
}

fn seal(tenant: &Tenant, state: &State) -> String {
    let payload = serde_json::to_vec(state).unwrap_or_default();
    tenant.cursor_key.seal(&payload)
}

/// A server-to-client request of an upstream as a question for a stateless client, if
/// `message` is one.
pub fn question(message: &[u8]) -> Option<Question> {
    let crate::jsonrpc::Message::Request(req) = crate::jsonrpc::parse(message).ok()? else {
        return None;
    };
    let raw_id = req.id.get().to_owned();
    let key = serde_json::from_str::<String>(&raw_id).unwrap_or_else(|_| raw_id.clone());
    let mut request = Map::new();
    request.insert("method".into(), req.method.as_ref().into());
    if let Some(p) = req.params {
        request.insert(
            "params".into(),
            serde_json::from_str(p.get()).unwrap_or(Value::Null),
        );
    }
    Some(Question {
        key,
        raw_id,
        request: Value::Object(request),
    })
}

/// The client capability a question needs.
pub fn needed_capability(q: &Question) -> Option<&'static str> {
    match q.request.get("method").and_then(Value::as_str)? {
        "elicitation/create" => Some("elicitation"),
        "sampling/createMessage" => Some("sampling"),
        "roots/list" => Some("roots"),
        _ => None,
    }
}

/// Hands the client's answers to the upstreams that asked; returns the questions left
/// unanswered.
pub async fn answer(
    session: &Arc<LiveSession>,
    questions: Vec<Question>,
    responses: Option<&RawValue>,
) -> Vec<Question> {
    let responses = responses.and_then(|r| RawObject::parse(r).ok());
    let mut left = Vec::new();
    for q in questions {
        let Some(answer) = responses.as_ref().and_then(|r| r.get(&q.key)) else {
            left.push(q);
            continue;
        };
        refuse_or_reply(session, &q.raw_id, Outcome::Result(answer)).await;
    }
    left
}

/// Answers an upstream's question with `outcome` (a client answer or an error).
pub async fn refuse_or_reply(session: &Arc<LiveSession>, raw_id: &str, outcome: Outcome<'_>) {
    if let Some(route) = session.take_server_request(raw_id) {
        crate::upstream::answer(route, outcome).await;
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn event(message: &str, done: bool) -> Resumed {
        Resumed {
            message: bytes::Bytes::from(message.to_owned()),
            done,
            status: 200,
        }
    }

    #[tokio::test]
    async fn a_relayed_retry_keeps_its_answer_and_drops_notifications_past_the_backlog() {
        let interactions = Interactions::default();
        let (wait, mut rx) = interactions.wait_remote();
        let flood = RELAY_BACKLOG + 500;
        for _ in 0..flood {
            interactions.on_resumed(&wait.key, event("{\"method\":\"n\"}", false));
        }
        // Beats and the answer pass whatever the backlog.
        interactions.on_resumed(&wait.key, event("", false));
        interactions.on_resumed(&wait.key, event("{\"result\":{}}", true));
        let mut got = Vec::new();
        while let Some(e) = rx.recv().await {
            let done = e.done;
            got.push(e);
            if done {
                break;
            }
        }
        assert_eq!(got.len(), RELAY_BACKLOG + 2);
        assert!(got[RELAY_BACKLOG].message.is_empty());
        assert!(got[RELAY_BACKLOG + 1].done);
        // Read down, the queue takes notifications again.
        interactions.on_resumed(&wait.key, event("{\"method\":\"n\"}", false));
        assert!(rx.recv().await.is_some_and(|e| !e.message.is_empty()));
    }
}
