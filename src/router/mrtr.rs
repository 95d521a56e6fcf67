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
    remote: Arc<Mutex<HashMap<String, mpsc::UnboundedSender<Resumed>>>>,
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

/// Ends the wait for a retry's events when dropped.
pub struct RemoteWait {
    remote: Arc<Mutex<HashMap<String, mpsc::UnboundedSender<Resumed>>>>,
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
    pub fn wait_remote(&self) -> (RemoteWait, mpsc::UnboundedReceiver<Resumed>) {
        let key = crate::session::SessionId::generate().as_str().to_owned();
        let (tx, rx) = mpsc::unbounded_channel();
        if let Ok(mut m) = self.remote.lock() {
            m.insert(key.clone(), tx);
        }
        let wait = RemoteWait {
            remote: self.remote.clone(),
            key,
        };
        (wait, rx)
    }

    /// An event of a retry continued by another replica (dropped when nobody waits).
    pub fn on_resumed(&self, key: &str, event: Resumed) {
        let tx = self.remote.lock().ok().and_then(|m| m.get(key).cloned());
        if let Some(tx) = tx {
            let _ = tx.send(event);
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
