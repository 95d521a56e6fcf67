//! Multi round-trip requests (2026-07-28) in front of upstreams that ask their client in the
//! middle of a request (elicitation, sampling, roots): the gateway answers the stateless
//! client with an `input_required` result, keeps the upstream request open ("parked"), and
//! resumes it when the client retries with `inputResponses` and the `requestState` the
//! gateway signed. The state names the parked request, the user, the request it belongs to
//! and an expiry, under the tenant's key: a tampered, foreign or stale state is refused. A
//! retry that reaches another replica is continued by the replica holding the request, over
//! the bus (`Resume` there, `Resumed` events back). Parked requests wait in the gateway's
//! registry (`gateway::parked`).

use std::sync::Arc;
use std::time::{SystemTime, UNIX_EPOCH};

use serde::{Deserialize, Serialize};
use serde_json::value::RawValue;
use serde_json::{Map, Value};

use crate::error::GatewayError;
use crate::gateway::parked::{Interactions, PARK_FOR, Parked, Question};
use crate::jsonrpc::{Outcome, RawObject};
use crate::session::LiveSession;
use crate::tenant::Tenant;

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

/// The request a state is bound to: method and the name or URI it targets.
pub struct Target<'a> {
    pub method: &'a str,
    pub name: Option<&'a str>,
}

/// Parks `parked` and returns the `input_required` result (the `result` member) for it.
pub fn park(
    interactions: &Interactions,
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
    interactions.park(handle, parked);
    let mut result = Map::new();
    result.insert("resultType".into(), "input_required".into());
    result.insert("inputRequests".into(), Value::Object(requests));
    result.insert("requestState".into(), token.into());
    Value::Object(result)
}

/// What a retry's `requestState` continues: a request parked here (taken out of the
/// parking), or a stateless upstream's own state.
pub fn claim(
    interactions: &Interactions,
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
    let parked = interactions
        .take(&state.h)
        .ok_or_else(|| refused("the request it continues has ended"))?;
    Ok(Claim::Parked(Box::new(parked)))
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
