//! Gateway-run tasks: the tasks extension in front of an upstream that does not implement it.
//! A `tools/call` from a client that declared the extension, for a tool the upstream lists
//! with `execution.taskSupport` `optional` or `required`, is sent as the ordinary call; the
//! client gets a `CreateTaskResult` at once, and a background task on this replica reads the
//! call to its end and keeps the task's record (`store::TaskRecord`) in the session store's
//! backend — status, the questions the upstream asks meanwhile (`input_required`), the final
//! result or error — until the ttl passes. `tasks/get` reads the record on any replica;
//! `tasks/update` answers the questions and `tasks/cancel` drops the call (cancelling it
//! upstream) through the replica running it — taken elsewhere, a cancel is written to the
//! record and answers are queued in Redis, and the runner looks for both every second.

use std::sync::{Arc, LazyLock, Weak};
use std::time::{Duration, SystemTime, UNIX_EPOCH};

use dashmap::DashMap;
use serde_json::value::RawValue;
use serde_json::{Map, Value};
use tokio::sync::{mpsc, oneshot};

use super::{Reply, mrtr};
use crate::error::GatewayError;
use crate::gateway::Gateway;
use crate::gateway::parked::Question;
use crate::jsonrpc::{self, Message, Outcome};
use crate::session::{LiveSession, SessionId, SessionKey, TaskRecord, TaskStatus};
use crate::tenant::Tenant;
use crate::upstream::{ForwardStream, StreamItem};

/// How long a gateway-run task stays readable after it was created, unless its client asked
/// for another ttl (`task.ttl` in the call's params) within [`MIN_TTL`, `MAX_TTL`].
pub const TASK_TTL: Duration = Duration::from_secs(600);
const MIN_TTL: Duration = Duration::from_secs(10);
const MAX_TTL: Duration = Duration::from_secs(3600);

/// The ttl the call asks for (`params.task.ttl`, milliseconds), bounded; else [`TASK_TTL`].
fn requested_ttl(params: Option<&RawValue>) -> Duration {
    params
        .and_then(|p| jsonrpc::RawObject::parse(p).ok())
        .and_then(|p| p.get("task").map(|t| t.get().to_owned()))
        .and_then(|t| serde_json::from_str::<Value>(&t).ok())
        .and_then(|t| t.get("ttl").and_then(Value::as_u64))
        .map_or(TASK_TTL, |ms| {
            Duration::from_millis(ms).clamp(MIN_TTL, MAX_TTL)
        })
}
/// How often clients are asked to poll.
const POLL_INTERVAL_MS: u64 = 500;
/// How often a runner looks for a cancel written by another replica.
const WATCH_EVERY: Duration = Duration::from_secs(1);
/// How long a task method waits for the runner to act on it.
const COMMAND_WAIT: Duration = Duration::from_secs(5);

/// How many tasks the gateway runs at once for one user on one replica: each holds a call
/// upstream after its client's request ended, outside the session's requests in flight.
pub const MAX_RUNNING_PER_USER: usize = 64;

/// Running tasks per replica, tenant and user (entries go when they reach zero).
static PER_USER: LazyLock<DashMap<String, usize>> = LazyLock::new(DashMap::new);

/// A place among the user's running tasks, taken before the call is sent, given back when the
/// task's call ends (or is never made).
pub(super) struct TaskSlot {
    key: String,
}

impl TaskSlot {
    pub(super) fn take(session: &LiveSession) -> Result<TaskSlot, GatewayError> {
        let key = format!(
            "{}/{}/{}",
            session.bus.replica, session.key.tenant, session.key.user
        );
        let mut count = PER_USER.entry(key.clone()).or_insert(0);
        if *count >= MAX_RUNNING_PER_USER {
            return Err(GatewayError::LimitReached(crate::error::LimitRefusal {
                limit: "gateway_tasks_per_user".into(),
                what: format!("{MAX_RUNNING_PER_USER} running tasks per user"),
                retry_after: Duration::from_secs(1),
            }));
        }
        *count += 1;
        Ok(TaskSlot { key })
    }
}

impl Drop for TaskSlot {
    fn drop(&mut self) {
        if let dashmap::Entry::Occupied(mut e) = PER_USER.entry(self.key.clone()) {
            *e.get_mut() -= 1;
            if *e.get() == 0 {
                e.remove();
            }
        }
    }
}

/// What a task method asks of the runner.
enum Command {
    /// `tasks/update`'s `inputResponses` (raw JSON).
    Update(String, oneshot::Sender<()>),
    Cancel(oneshot::Sender<()>),
}

/// The tasks running in this process, by replica and task id (a `SessionId`: random, 192
/// bits): a replica acts on its own runners only, as if each were a process of its own.
static RUNNING: LazyLock<DashMap<String, mpsc::Sender<Command>>> = LazyLock::new(DashMap::new);

fn running_key(replica: &str, id: &str) -> String {
    format!("{replica}/{id}")
}

fn now_ms() -> u64 {
    SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .unwrap_or_default()
        .as_millis() as u64
}

/// The store key of task `id` of the session's user.
fn key_of(session: &LiveSession, id: &str) -> Option<SessionKey> {
    Some(SessionKey {
        tenant: session.key.tenant.clone(),
        user: session.key.user.clone(),
        id: SessionId::from_presented(id)?,
    })
}

/// The fields every task carries, under its public id.
fn envelope(public: &str, r: &TaskRecord) -> Map<String, Value> {
    let mut m = Map::new();
    m.insert("taskId".into(), public.into());
    m.insert("status".into(), r.status.as_str().into());
    m.insert(
        "createdAt".into(),
        crate::clock::iso8601(r.created_ms).into(),
    );
    m.insert(
        "lastUpdatedAt".into(),
        crate::clock::iso8601(r.updated_ms).into(),
    );
    m.insert("ttlMs".into(), r.ttl_ms.into());
    m.insert("pollIntervalMs".into(), POLL_INTERVAL_MS.into());
    m
}

fn respond(client_id: &RawValue, body: Map<String, Value>) -> Reply {
    let body = serde_json::to_vec(&Value::Object(body)).unwrap_or_default();
    Reply::Json(jsonrpc::result_response(client_id, &body))
}

fn ack(client_id: &RawValue) -> Reply {
    Reply::Json(jsonrpc::result_response(
        client_id,
        br#"{"resultType":"complete"}"#,
    ))
}

/// Runs the forwarded call `stream` as a task of the session's user: its record stored
/// first (a `tasks/get` right after the answer finds it), then the `CreateTaskResult`.
pub(super) async fn start(
    gateway: &Gateway,
    tenant: &Arc<Tenant>,
    session: &Arc<LiveSession>,
    stream: ForwardStream,
    slot: TaskSlot,
    params: Option<&RawValue>,
    client_id: &RawValue,
) -> Result<Reply, GatewayError> {
    // Dropping the call (cancel, or no record could be stored) cancels it upstream.
    let stream = stream.cancel_on_drop();
    let id = SessionId::generate();
    let key = key_of(session, id.as_str()).ok_or(GatewayError::Internal)?;
    let now = now_ms();
    let ttl = requested_ttl(params);
    let record = TaskRecord {
        status: TaskStatus::Working,
        created_ms: now,
        updated_ms: now,
        ttl_ms: ttl.as_millis() as u64,
        outcome: None,
        input_requests: None,
        replica: gateway.bus.replica.to_string(),
    };
    gateway
        .store
        .put_task(&key, &record, ttl)
        .await
        .map_err(|_| GatewayError::StoreUnavailable)?;
    let public = super::tasks::public_id(tenant, &session.key.user, "", id.as_str());
    let (tx, rx) = mpsc::channel(8);
    let running = running_key(&gateway.bus.replica, id.as_str());
    RUNNING.insert(running.clone(), tx);
    let mut body = envelope(&public, &record);
    body.insert("resultType".into(), "task".into());
    let runner = Runner {
        gateway: gateway.weak(),
        _pump: gateway.pump_started(),
        _slot: slot,
        running,
        key,
        record,
        session: session.clone(),
        questions: Vec::new(),
    };
    tokio::spawn(runner.run(stream, rx));
    Ok(respond(client_id, body))
}

/// Reads one gateway-run task's call to its end.
struct Runner {
    gateway: Weak<Gateway>,
    /// Counted like a request's event pump: a stopping replica's drain waits (within its
    /// deadline) for the task's call to end and its record to be written.
    _pump: crate::gateway::PumpGuard,
    /// The user's place among running tasks, given back when the runner ends.
    _slot: TaskSlot,
    /// Its entry in `RUNNING`.
    running: String,
    key: SessionKey,
    record: TaskRecord,
    session: Arc<LiveSession>,
    /// The upstream's questions not answered yet.
    questions: Vec<Question>,
}

impl Runner {
    async fn run(mut self, mut stream: ForwardStream, mut rx: mpsc::Receiver<Command>) {
        let mut watch = tokio::time::interval(WATCH_EVERY);
        watch.tick().await;
        // A cancel is acknowledged once the call is dropped and the user's place given back.
        let mut cancelled: Option<oneshot::Sender<()>> = None;
        loop {
            tokio::select! {
                item = stream.next() => match item {
                    Some(StreamItem::Message(m, _)) => {
                        // Notifications have no one to go to; questions wait for tasks/update.
                        if let Some(q) = mrtr::question(&m) {
                            self.questions.push(q);
                            self.save_questions().await;
                        }
                    }
                    Some(StreamItem::Final(body)) => {
                        self.settle(&body).await;
                        break;
                    }
                    Some(StreamItem::Cancelled) | None => {
                        self.record.status = TaskStatus::Cancelled;
                        self.save().await;
                        break;
                    }
                },
                command = rx.recv() => match command {
                    Some(Command::Update(responses, done)) => {
                        let responses = RawValue::from_string(responses).ok();
                        let questions = std::mem::take(&mut self.questions);
                        self.questions =
                            mrtr::answer(&self.session, questions, responses.as_deref()).await;
                        self.save_questions().await;
                        let _ = done.send(());
                    }
                    Some(Command::Cancel(done)) => {
                        self.record.status = TaskStatus::Cancelled;
                        self.save().await;
                        cancelled = Some(done);
                        break;
                    }
                    None => break,
                },
                _ = watch.tick() => {
                    if self.stored_status().await == Some(TaskStatus::Cancelled) {
                        break;
                    }
                    self.answers_from_elsewhere().await;
                }
            }
        }
        RUNNING.remove(&self.running);
        drop(stream);
        drop(self);
        if let Some(done) = cancelled {
            let _ = done.send(());
        }
    }

    /// The call's answer: a result completes the task (a tool error too: `isError` is in
    /// it), a JSON-RPC error fails it. A cancel written meanwhile by another replica stands.
    async fn settle(&mut self, body: &[u8]) {
        if self.stored_status().await == Some(TaskStatus::Cancelled) {
            return;
        }
        let (status, outcome) = match jsonrpc::parse(body) {
            Ok(Message::Response(r)) => match r.outcome {
                Outcome::Result(res) => (TaskStatus::Completed, res.get().to_owned()),
                Outcome::Error(e) => (TaskStatus::Failed, e.get().to_owned()),
            },
            _ => (
                TaskStatus::Failed,
                r#"{"code":-32603,"message":"the upstream's answer was unreadable"}"#.into(),
            ),
        };
        self.record.status = status;
        self.record.outcome = Some(outcome);
        self.record.input_requests = None;
        self.save().await;
    }

    /// Answers other replicas took for this task (`tasks/update` there).
    async fn answers_from_elsewhere(&mut self) {
        if self.questions.is_empty() {
            return;
        }
        let Some(gateway) = self.gateway.upgrade() else {
            return;
        };
        let queued = match gateway.store.take_task_input(&self.key).await {
            Ok(q) if !q.is_empty() => q,
            _ => return,
        };
        for responses in queued {
            let responses = RawValue::from_string(responses).ok();
            let questions = std::mem::take(&mut self.questions);
            self.questions = mrtr::answer(&self.session, questions, responses.as_deref()).await;
        }
        self.save_questions().await;
    }

    async fn save_questions(&mut self) {
        if self.questions.is_empty() {
            self.record.status = TaskStatus::Working;
            self.record.input_requests = None;
        } else {
            let map: Map<String, Value> = self
                .questions
                .iter()
                .map(|q| (q.key.clone(), q.request.clone()))
                .collect();
            self.record.status = TaskStatus::InputRequired;
            self.record.input_requests = Some(Value::Object(map).to_string());
        }
        self.save().await;
    }

    async fn stored_status(&self) -> Option<TaskStatus> {
        let gateway = self.gateway.upgrade()?;
        let stored = gateway.store.get_task(&self.key).await.ok()??;
        Some(stored.status)
    }

    async fn save(&mut self) {
        let Some(gateway) = self.gateway.upgrade() else {
            return;
        };
        self.record.updated_ms = now_ms();
        let left = remaining(&self.record);
        if let Err(e) = gateway.store.put_task(&self.key, &self.record, left).await {
            tracing::warn!(error = %e, "a gateway-run task's record was not stored");
        }
    }
}

/// How long a record has left to live (its ttl runs from its creation).
fn remaining(record: &TaskRecord) -> Duration {
    let until = record.created_ms + record.ttl_ms;
    Duration::from_millis(until.saturating_sub(now_ms()).max(1))
}

/// The record of the user's task `id`, or "not found".
async fn load(
    gateway: &Gateway,
    session: &LiveSession,
    id: &str,
    public: &str,
) -> Result<(SessionKey, TaskRecord), GatewayError> {
    let not_found = || GatewayError::TaskNotFound(public.chars().take(200).collect());
    let key = key_of(session, id).ok_or_else(not_found)?;
    let record = gateway
        .store
        .get_task(&key)
        .await
        .map_err(|_| GatewayError::StoreUnavailable)?
        .ok_or_else(not_found)?;
    Ok((key, record))
}

/// Sends `command` to the runner of task `id`, if it runs here; waits for it to act.
async fn tell(
    gateway: &Gateway,
    id: &str,
    command: impl FnOnce(oneshot::Sender<()>) -> Command,
) -> bool {
    let running = running_key(&gateway.bus.replica, id);
    let Some(tx) = RUNNING.get(&running).map(|t| t.clone()) else {
        return false;
    };
    let (done, acted) = oneshot::channel();
    if tx.send(command(done)).await.is_err() {
        return false;
    }
    tokio::time::timeout(COMMAND_WAIT, acted).await.is_ok()
}

/// `tasks/get|update|cancel` of a gateway-run task `id`, named `public` by the client.
pub(super) async fn serve(
    gateway: &Gateway,
    session: &LiveSession,
    method: &str,
    params: Option<&RawValue>,
    client_id: &RawValue,
    id: &str,
    public: &str,
) -> Result<Reply, GatewayError> {
    let (key, record) = load(gateway, session, id, public).await?;
    match method {
        "tasks/get" => {
            let mut body = envelope(public, &record);
            body.insert("resultType".into(), "complete".into());
            let raw = |s: &Option<String>| {
                s.as_deref()
                    .and_then(|s| serde_json::from_str::<Value>(s).ok())
            };
            match record.status {
                TaskStatus::Completed => {
                    if let Some(r) = raw(&record.outcome) {
                        body.insert("result".into(), r);
                    }
                }
                TaskStatus::Failed => {
                    if let Some(e) = raw(&record.outcome) {
                        body.insert("error".into(), e);
                    }
                }
                TaskStatus::InputRequired => {
                    if let Some(q) = raw(&record.input_requests) {
                        body.insert("inputRequests".into(), q);
                    }
                }
                TaskStatus::Working | TaskStatus::Cancelled => {}
            }
            Ok(respond(client_id, body))
        }
        "tasks/update" => {
            let responses =
                jsonrpc::RawObject::parse(params.ok_or_else(|| {
                    GatewayError::InvalidParams("tasks/update needs params".into())
                })?)
                .ok()
                .and_then(|p| p.get("inputResponses").map(|r| r.get().to_owned()))
                .filter(|r| r.starts_with('{'))
                .ok_or_else(|| {
                    GatewayError::InvalidParams("`inputResponses` must be an object".into())
                })?;
            if record.status != TaskStatus::InputRequired
                || tell(gateway, id, |done| Command::Update(responses.clone(), done)).await
            {
                return Ok(ack(client_id));
            }
            // Running on another replica: queued for it (it takes them within a second).
            let left = remaining(&record);
            let queued = gateway
                .store
                .push_task_input(&key, &responses, left)
                .await
                .map_err(|_| GatewayError::StoreUnavailable)?;
            if !queued {
                return Err(GatewayError::InvalidParams(
                    "this task's call is no longer running: its questions cannot be answered"
                        .into(),
                ));
            }
            Ok(ack(client_id))
        }
        "tasks/cancel" => {
            if !record.status.is_terminal() && !tell(gateway, id, Command::Cancel).await {
                // Running elsewhere (or its runner is gone): the record says so, and the
                // replica running it drops the call within a second.
                let mut cancelled = record.clone();
                cancelled.status = TaskStatus::Cancelled;
                cancelled.updated_ms = now_ms();
                let left = remaining(&cancelled);
                gateway
                    .store
                    .put_task(&key, &cancelled, left)
                    .await
                    .map_err(|_| GatewayError::StoreUnavailable)?;
            }
            Ok(ack(client_id))
        }
        other => Err(GatewayError::MethodNotFound(format!(
            "{other} is not served for tasks the gateway runs (use tasks/get)"
        ))),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_requested_ttl_is_honoured_within_bounds() {
        let p = |v: &str| RawValue::from_string(v.to_owned()).ok();
        assert_eq!(requested_ttl(None), TASK_TTL);
        let asked = p(r#"{"name":"x","task":{"ttl":60000}}"#);
        assert_eq!(requested_ttl(asked.as_deref()), Duration::from_secs(60));
        let tiny = p(r#"{"task":{"ttl":1}}"#);
        assert_eq!(requested_ttl(tiny.as_deref()), MIN_TTL);
        let huge = p(r#"{"task":{"ttl":99999999999}}"#);
        assert_eq!(requested_ttl(huge.as_deref()), MAX_TTL);
    }

    #[test]
    fn timestamps_are_iso_8601() {
        assert_eq!(crate::clock::iso8601(0), "1970-01-01T00:00:00.000Z");
        assert_eq!(
            crate::clock::iso8601(1_709_251_199_123),
            "2024-02-29T23:59:59.123Z"
        );
    }
}
