//! The tasks extension (SEP-2663, `io.modelcontextprotocol/tasks`) in the conformance fixture,
//! for stateless (2026-07-28) requests: the task-supporting tools the suite's `tasks-*`
//! scenarios call, `CreateTaskResult` (flat, `resultType:"task"`), `tasks/get` (the
//! `DetailedTask`, result, error or pending `inputRequests` inlined), `tasks/update`
//! (`inputResponses`, partial answers kept), `tasks/cancel` (an empty ack), and the
//! `-32021` gate for clients that did not declare the extension in `_meta`. With `--tasks`,
//! the 2025-11-25 `tasks` utility for session-based clients too (`sleep` with `task`,
//! `tasks/get|result|cancel|list`). Tasks live in the server (every session and request sees
//! them) until their ttl passes.

use std::collections::HashMap;
use std::sync::{Arc, Mutex, MutexGuard, PoisonError};
use std::time::{Duration, Instant, SystemTime, UNIX_EPOCH};

use bytes::Bytes;
use serde_json::value::RawValue;
use serde_json::{Map, Value, json};

use tokio::sync::mpsc;

use super::fixture_tools::FixtureJob;
use super::inflight::{Deferred, Job};
use super::modern::Modern;
use super::peer::{Capability, Peer};
use super::server::{Outcome, Session};
use super::wire::{self, INVALID_PARAMS};

/// The extension's identifier (`capabilities.extensions`, `_meta` client capabilities).
pub(crate) const EXTENSION: &str = "io.modelcontextprotocol/tasks";
/// The error of a request that needs a capability the client did not declare.
const MISSING_CAPABILITY: i32 = -32021;
const INTERNAL_ERROR: i32 = -32603;
/// How long a task stays readable after it was created.
const TTL_MS: u64 = 300_000;
/// How often clients are asked to poll.
const POLL_INTERVAL_MS: u64 = 200;
/// The longest `slow_compute` sleeps.
const MAX_SECONDS: u64 = 600;
/// How long the jobs that fail take (`failing_job`, `protocol_error_job`).
const FAIL_AFTER: Duration = Duration::from_millis(300);

/// The tools the extension's scenarios call, with their `execution.taskSupport`; the
/// session-based fixture (not `stateless`) lists those it can run as ordinary calls.
pub(crate) fn tools(stateless: bool) -> Vec<Value> {
    let no_args = json!({"type": "object", "properties": {}});
    let tool = |name: &str, description: &str, support: &str, schema: Value| {
        let mut t = json!({"name": name, "description": description, "inputSchema": schema});
        if !support.is_empty() {
            t["execution"] = json!({ "taskSupport": support });
        }
        t
    };
    vec![
        tool(
            "greet",
            "Greets by name, synchronously (no task).",
            "",
            json!({"type": "object", "properties": {"name": {"type": "string"}}, "required": ["name"]}),
        ),
        tool(
            "slow_compute",
            "Sleeps `seconds` seconds, then answers; a task when the client supports tasks.",
            "optional",
            json!({"type": "object", "properties": {
                "seconds": {"type": "number"}, "label": {"type": "string"}}}),
        ),
        tool(
            "failing_job",
            "A task whose tool reports an error (isError) after a moment.",
            "required",
            no_args.clone(),
        ),
        tool(
            "protocol_error_job",
            "A task that fails with a protocol error after a moment.",
            "required",
            no_args.clone(),
        ),
        tool(
            "confirm_delete",
            "A task that asks for a confirmation (elicitation) before it completes.",
            "required",
            json!({"type": "object", "properties": {"filename": {"type": "string"}}}),
        ),
        tool(
            "multi_input",
            "A task that asks two questions at once.",
            "required",
            no_args.clone(),
        ),
        tool(
            "test_tool_with_task",
            "Asks for the user's name (input_required), then runs as a task.",
            "required",
            no_args,
        ),
    ]
    .into_iter()
    // A multi round-trip tool: stateless only.
    .filter(|t| stateless || t["name"] != "test_tool_with_task")
    .collect()
}

/// A task tool run the session-based way, as an ordinary call: it sleeps, fails, or asks the
/// client (elicitation) before it answers.
#[derive(Debug)]
pub(crate) enum SessionJob {
    /// `tasks/result` (2025-11-25): waits for the task to end, then answers its result.
    AwaitResult {
        tasks: Arc<Tasks>,
        task_id: String,
    },
    Compute {
        ms: u64,
        label: String,
    },
    ToolError,
    ProtocolError,
    Confirm {
        file: String,
    },
    TwoQuestions,
}

impl SessionJob {
    /// The job of task tool `name` (`Err`: the immediate answer; `None`: not a task tool).
    #[allow(clippy::type_complexity)]
    pub(crate) fn of(
        name: &str,
        args: &str,
    ) -> Option<Result<SessionJob, Box<dyn FnOnce(&RawValue) -> Bytes>>> {
        let args: Value = serde_json::from_str(args).unwrap_or_else(|_| json!({}));
        let arg = |k: &str| args.get(k).and_then(Value::as_str).unwrap_or("").to_owned();
        Some(Ok(match name {
            "greet" => {
                let text = format!("Hello, {}!", arg("name"));
                return Some(Err(Box::new(move |id| wire::tool_text(id, &text, false))));
            }
            "slow_compute" => {
                let seconds = args
                    .get("seconds")
                    .and_then(Value::as_f64)
                    .unwrap_or(0.0)
                    .clamp(0.0, MAX_SECONDS as f64);
                SessionJob::Compute {
                    ms: (seconds * 1000.0) as u64,
                    label: arg("label"),
                }
            }
            "failing_job" => SessionJob::ToolError,
            "protocol_error_job" => SessionJob::ProtocolError,
            "confirm_delete" => SessionJob::Confirm {
                file: arg("filename"),
            },
            "multi_input" => SessionJob::TwoQuestions,
            _ => return None,
        }))
    }

    pub(crate) fn needs(&self) -> Option<Capability> {
        match self {
            SessionJob::Confirm { .. } | SessionJob::TwoQuestions => Some(Capability::Elicitation),
            _ => None,
        }
    }

    pub(crate) async fn run(
        &self,
        peer: &Peer,
        id: &RawValue,
        out: Option<&mpsc::Sender<Bytes>>,
    ) -> Bytes {
        let ask = |message: &str, properties: Value| {
            let params = json!({"mode": "form", "message": message,
                "requestedSchema": {"type": "object", "properties": properties}});
            serde_json::to_vec(&params).unwrap_or_default()
        };
        match self {
            SessionJob::AwaitResult { tasks, task_id } => loop {
                if let Some(t) = tasks.lock().get(task_id)
                    && t.status.is_terminal()
                {
                    let mut r = match (&t.result, &t.error) {
                        (Some(r), _) => r.clone(),
                        (None, Some(e)) => {
                            return error(
                                id,
                                e["code"].as_i64().unwrap_or(-32603) as i32,
                                e["message"].as_str().unwrap_or("failed"),
                                None,
                            );
                        }
                        (None, None) => text("the task was cancelled", true),
                    };
                    r["_meta"] =
                        json!({"io.modelcontextprotocol/related-task": {"taskId": task_id}});
                    return result(id, &r);
                }
                tokio::time::sleep(Duration::from_millis(50)).await;
            },
            SessionJob::Compute { ms, label } => {
                tokio::time::sleep(Duration::from_millis(*ms)).await;
                wire::tool_text(id, &format!("computed {label} in {ms}ms"), false)
            }
            SessionJob::ToolError => {
                tokio::time::sleep(FAIL_AFTER).await;
                wire::tool_text(id, "failing_job: the job failed", true)
            }
            SessionJob::ProtocolError => {
                tokio::time::sleep(FAIL_AFTER).await;
                error(
                    id,
                    INTERNAL_ERROR,
                    "protocol_error_job: internal error",
                    None,
                )
            }
            SessionJob::Confirm { file } => {
                let q = ask(
                    &format!("Delete {file}?"),
                    json!({"confirm": {"type": "boolean"}}),
                );
                match peer.ask(out, "elicitation/create", &q).await {
                    Ok(a) if a.get().contains("\"accept\"") => {
                        wire::tool_text(id, &format!("deleted {file}"), false)
                    }
                    Ok(_) => wire::tool_text(id, &format!("kept {file}"), false),
                    Err(e) => wire::tool_text(id, &e.to_string(), true),
                }
            }
            SessionJob::TwoQuestions => {
                let (q1, q2) = (
                    ask("What is your name?", json!({"name": {"type": "string"}})),
                    ask("Go ahead?", json!({"confirm": {"type": "boolean"}})),
                );
                let (a, b) = futures_util::future::join(
                    peer.ask(out, "elicitation/create", &q1),
                    peer.ask(out, "elicitation/create", &q2),
                )
                .await;
                match (a, b) {
                    (Ok(_), Ok(_)) => wire::tool_text(id, "received 2 answers", false),
                    (Err(e), _) | (_, Err(e)) => wire::tool_text(id, &e.to_string(), true),
                }
            }
        }
    }
}

/// `capabilities` with the 2025-11-25 `tasks` capability (list, cancel, task-augmented calls).
pub(crate) fn with_session_tasks(capabilities: &[u8]) -> Vec<u8> {
    let mut caps: Value = serde_json::from_slice(capabilities).unwrap_or_else(|_| json!({}));
    caps["tasks"] = json!({"list": {}, "cancel": {}, "requests": {"tools": {"call": {}}}});
    serde_json::to_vec(&caps).unwrap_or_else(|_| capabilities.to_vec())
}

/// A `tools/list` result with tool `name` marked `execution.taskSupport: "optional"`.
pub(crate) fn task_supporting(tools_list: &[u8], name: &str) -> Vec<u8> {
    let Ok(mut list) = serde_json::from_slice::<Value>(tools_list) else {
        return tools_list.to_vec();
    };
    for t in list["tools"].as_array_mut().into_iter().flatten() {
        if t["name"] == name {
            t["execution"] = json!({"taskSupport": "optional"});
        }
    }
    serde_json::to_vec(&list).unwrap_or_else(|_| tools_list.to_vec())
}

/// How many tasks one `tasks/list` page holds (small, so pagination shows).
const LIST_PAGE: usize = 2;

/// The 2025-11-25 utility for session-based requests: `tools/call` of `sleep` with `task`,
/// and the task methods; `None` for anything else.
pub(crate) fn session_request(
    session: &Arc<Session>,
    tasks: &Arc<Tasks>,
    id: &RawValue,
    method: &str,
    params: Option<&RawValue>,
) -> Option<Outcome> {
    let params: Map<String, Value> = params
        .and_then(|p| serde_json::from_str(p.get()).ok())
        .unwrap_or_default();
    let task_id = params.get("taskId").and_then(Value::as_str).unwrap_or("");
    let reply = match method {
        "tools/call" => {
            let task = params.get("task")?;
            if params.get("name")?.as_str()? != "sleep" {
                return None;
            }
            let ms = params
                .get("arguments")
                .and_then(|a| a.get("ms"))
                .and_then(Value::as_u64)
                .unwrap_or(0)
                .min(MAX_SECONDS * 1000);
            let ttl = task.get("ttl").and_then(Value::as_u64).unwrap_or(TTL_MS);
            tasks.start_v1(id, ms, ttl)
        }
        "tasks/get" | "tasks/cancel" => {
            let mut map = tasks.lock();
            let Some(t) = map.get_mut(task_id) else {
                return Some(Outcome::Reply(not_found(id, task_id)));
            };
            if method == "tasks/cancel" && !t.status.is_terminal() {
                t.status = Status::Cancelled;
                t.updated_ms = now_ms();
                if let Some(job) = t.job.take() {
                    job.abort();
                }
            }
            result(id, &v1_task(task_id, t))
        }
        "tasks/list" => {
            let map = tasks.lock();
            let mut ids: Vec<&String> = map.keys().collect();
            ids.sort_by_key(|k| (map[*k].created_ms, (*k).clone()));
            let from: usize = params
                .get("cursor")
                .and_then(Value::as_str)
                .and_then(|c| c.parse().ok())
                .unwrap_or(0);
            let page: Vec<Value> = ids
                .iter()
                .skip(from)
                .take(LIST_PAGE)
                .map(|k| v1_task(k, &map[*k]))
                .collect();
            let mut out = json!({ "tasks": page });
            if from + LIST_PAGE < ids.len() {
                out["nextCursor"] = (from + LIST_PAGE).to_string().into();
            }
            result(id, &out)
        }
        "tasks/result" => {
            if !tasks.lock().contains_key(task_id) {
                return Some(Outcome::Reply(not_found(id, task_id)));
            }
            let job = SessionJob::AwaitResult {
                tasks: Arc::clone(tasks),
                task_id: task_id.to_owned(),
            };
            return Some(
                match Deferred::start(session, id, None, Job::Fixture(FixtureJob::Task(job))) {
                    Ok(work) => Outcome::Deferred(work),
                    Err(reply) => Outcome::Reply(reply),
                },
            );
        }
        _ => return None,
    };
    Some(Outcome::Reply(reply))
}

/// A task in the 2025-11-25 shape (`ttl`, `pollInterval`).
fn v1_task(task_id: &str, t: &Task) -> Value {
    json!({
        "taskId": task_id,
        "status": t.status.as_str(),
        "createdAt": iso(t.created_ms),
        "lastUpdatedAt": iso(t.updated_ms),
        "ttl": TTL_MS,
        "pollInterval": POLL_INTERVAL_MS,
    })
}

/// `capabilities` (a JSON object) with the extension added under `extensions`.
pub(crate) fn with_extension(capabilities: &[u8]) -> Vec<u8> {
    let mut caps: Value = serde_json::from_slice(capabilities).unwrap_or_else(|_| json!({}));
    caps["extensions"][EXTENSION] = json!({});
    serde_json::to_vec(&caps).unwrap_or_else(|_| capabilities.to_vec())
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Status {
    Working,
    InputRequired,
    Completed,
    Failed,
    Cancelled,
}

impl Status {
    fn as_str(self) -> &'static str {
        match self {
            Status::Working => "working",
            Status::InputRequired => "input_required",
            Status::Completed => "completed",
            Status::Failed => "failed",
            Status::Cancelled => "cancelled",
        }
    }

    fn is_terminal(self) -> bool {
        matches!(self, Status::Completed | Status::Failed | Status::Cancelled)
    }
}

/// What a task waiting for input does with the answers.
#[derive(Debug, Clone, Copy)]
enum Waits {
    /// `confirm_delete`: one confirmation.
    Confirm,
    /// `multi_input`: two answers.
    Both,
}

struct Task {
    status: Status,
    created_ms: u64,
    updated_ms: u64,
    expires: Instant,
    result: Option<Value>,
    error: Option<Value>,
    /// The questions not answered yet, by their opaque key.
    pending: Map<String, Value>,
    /// The answers received so far.
    answers: Map<String, Value>,
    waits: Option<Waits>,
    subject: String,
    /// The running job (aborted on cancel).
    job: Option<tokio::task::JoinHandle<()>>,
}

/// The server's tasks, by id.
#[derive(Default)]
pub(crate) struct Tasks {
    map: Mutex<HashMap<String, Task>>,
}

impl std::fmt::Debug for Tasks {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("Tasks")
    }
}

fn now_ms() -> u64 {
    SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .unwrap_or_default()
        .as_millis() as u64
}

/// Milliseconds since the epoch as an ISO-8601 UTC timestamp.
fn iso(ms: u64) -> String {
    let secs = ms / 1000;
    let days = (secs / 86_400) as i64;
    let rem = secs % 86_400;
    // Civil date from days since 1970-01-01 (Howard Hinnant's algorithm).
    let z = days + 719_468;
    let era = z.div_euclid(146_097);
    let doe = z - era * 146_097;
    let yoe = (doe - doe / 1460 + doe / 36_524 - doe / 146_096) / 365;
    let doy = doe - (365 * yoe + yoe / 4 - yoe / 100);
    let mp = (5 * doy + 2) / 153;
    let day = doy - (153 * mp + 2) / 5 + 1;
    let month = if mp < 10 { mp + 3 } else { mp - 9 };
    let year = yoe + era * 400 + i64::from(month <= 2);
    format!(
        "{year:04}-{month:02}-{day:02}T{:02}:{:02}:{:02}.{:03}Z",
        rem / 3600,
        rem / 60 % 60,
        rem % 60,
        ms % 1000
    )
}

fn declared(modern: &Modern) -> bool {
    modern
        .capabilities
        .get("extensions")
        .and_then(|e| e.get(EXTENSION))
        .is_some_and(Value::is_object)
}

fn missing_extension(id: &RawValue) -> Bytes {
    error(
        id,
        MISSING_CAPABILITY,
        &format!("Missing required client capability: the {EXTENSION} extension"),
        Some(json!({"requiredCapabilities": {"extensions": {EXTENSION: {}}}})),
    )
}

fn error(id: &RawValue, code: i32, message: &str, data: Option<Value>) -> Bytes {
    let mut e = json!({"code": code, "message": message});
    if let Some(d) = data {
        e["data"] = d;
    }
    let id: Value = serde_json::from_str(id.get()).unwrap_or(Value::Null);
    let msg = json!({"jsonrpc": "2.0", "id": id, "error": e});
    Bytes::from(serde_json::to_vec(&msg).unwrap_or_default())
}

fn result(id: &RawValue, v: &Value) -> Bytes {
    wire::response(id, &serde_json::to_vec(v).unwrap_or_default())
}

fn text(t: impl Into<String>, is_error: bool) -> Value {
    let mut r = json!({"content": [{"type": "text", "text": t.into()}]});
    if is_error {
        r["isError"] = true.into();
    }
    r
}

fn elicit(message: &str, properties: Value) -> Value {
    json!({"method": "elicitation/create", "params": {
        "mode": "form", "message": message,
        "requestedSchema": {"type": "object", "properties": properties}}})
}

/// What a tool call or task method comes to.
pub(crate) enum Served {
    /// The answer, now.
    Reply(Bytes),
    /// A synchronous `slow_compute` that sleeps: the caller defers it.
    Sleep(u64),
}

impl Tasks {
    fn lock(&self) -> MutexGuard<'_, HashMap<String, Task>> {
        let mut map = self.map.lock().unwrap_or_else(PoisonError::into_inner);
        let now = Instant::now();
        map.retain(|_, t| t.expires > now);
        map
    }

    /// Serves `tools/call` of a task tool and the `tasks/*` methods; `None` for anything else.
    pub(crate) fn request(
        self: &Arc<Self>,
        modern: &Modern,
        id: &RawValue,
        method: &str,
        params: Option<&RawValue>,
    ) -> Option<Served> {
        let params: Map<String, Value> = params
            .and_then(|p| serde_json::from_str(p.get()).ok())
            .unwrap_or_default();
        let reply = match method {
            "tools/call" => return self.call(modern, id, &params),
            "tasks/get" | "tasks/update" | "tasks/cancel" if !declared(modern) => {
                missing_extension(id)
            }
            "tasks/get" | "tasks/update" | "tasks/cancel" => {
                let Some(task_id) = params.get("taskId").and_then(Value::as_str) else {
                    return Some(Served::Reply(error(
                        id,
                        INVALID_PARAMS,
                        "Invalid params: taskId (a string) is required",
                        None,
                    )));
                };
                match method {
                    "tasks/get" => self.get(id, task_id),
                    "tasks/update" => self.update(id, task_id, params.get("inputResponses")),
                    _ => self.cancel(id, task_id),
                }
            }
            _ => return None,
        };
        Some(Served::Reply(reply))
    }

    fn call(
        self: &Arc<Self>,
        modern: &Modern,
        id: &RawValue,
        params: &Map<String, Value>,
    ) -> Option<Served> {
        let name = params.get("name")?.as_str()?;
        let args = params
            .get("arguments")
            .cloned()
            .unwrap_or_else(|| json!({}));
        let arg = |k: &str| args.get(k).and_then(Value::as_str).unwrap_or("").to_owned();
        let tasks = declared(modern);
        let reply = match name {
            "greet" => result(id, &text(format!("Hello, {}!", arg("name")), false)),
            "slow_compute" => {
                let seconds = args
                    .get("seconds")
                    .and_then(Value::as_f64)
                    .unwrap_or(0.0)
                    .clamp(0.0, MAX_SECONDS as f64);
                let ms = (seconds * 1000.0) as u64;
                let label = arg("label");
                if !tasks {
                    if ms > 0 {
                        return Some(Served::Sleep(ms));
                    }
                    result(id, &text(format!("computed {label} at once"), false))
                } else {
                    let done = text(format!("computed {label} in {seconds}s"), false);
                    self.start(id, name, Duration::from_millis(ms), Ok(done))
                }
            }
            "failing_job"
            | "protocol_error_job"
            | "confirm_delete"
            | "multi_input"
            | "test_tool_with_task"
                if !tasks =>
            {
                missing_extension(id)
            }
            "failing_job" => {
                let failed = text("failing_job: the job failed", true);
                self.start(id, name, FAIL_AFTER, Ok(failed))
            }
            "protocol_error_job" => {
                let e = json!({"code": INTERNAL_ERROR, "message": "protocol_error_job: internal error"});
                self.start(id, name, FAIL_AFTER, Err(e))
            }
            "confirm_delete" => {
                let file = arg("filename");
                let ask = elicit(
                    &format!("Delete {file}?"),
                    json!({"confirm": {"type": "boolean"}}),
                );
                self.wait(id, Waits::Confirm, file, vec![("confirm", ask)])
            }
            "multi_input" => {
                let name_q = elicit("What is your name?", json!({"name": {"type": "string"}}));
                let confirm_q = elicit("Go ahead?", json!({"confirm": {"type": "boolean"}}));
                self.wait(
                    id,
                    Waits::Both,
                    String::new(),
                    vec![("name", name_q), ("confirm", confirm_q)],
                )
            }
            "test_tool_with_task" => {
                let user = params
                    .get("inputResponses")
                    .and_then(|r| r.get("user_name"))
                    .and_then(|a| a.get("content"))
                    .and_then(|c| c.get("name"))
                    .and_then(Value::as_str);
                match user {
                    Some(user) => {
                        let done = text(format!("Hello, {user}! (from a task)"), false);
                        self.start(id, name, FAIL_AFTER, Ok(done))
                    }
                    None => result(
                        id,
                        &json!({"resultType": "input_required", "inputRequests": {
                            "user_name": elicit("What is your name?",
                                                json!({"name": {"type": "string"}}))}}),
                    ),
                }
            }
            _ => return None,
        };
        Some(Served::Reply(reply))
    }

    /// Creates a task in `status` and answers with its `CreateTaskResult`.
    fn create(&self, id: &RawValue, task: Task) -> (String, Bytes) {
        let task_id = format!("task-{:032x}", rand::random::<u128>());
        let mut created = envelope(&task_id, &task);
        created["resultType"] = "task".into();
        self.lock().insert(task_id.clone(), task);
        (task_id, result(id, &created))
    }

    fn new_task(status: Status, subject: String) -> Task {
        let now = now_ms();
        Task {
            status,
            created_ms: now,
            updated_ms: now,
            expires: Instant::now() + Duration::from_millis(TTL_MS),
            result: None,
            error: None,
            pending: Map::new(),
            answers: Map::new(),
            waits: None,
            subject,
            job: None,
        }
    }

    /// A 2025-11-25 task sleeping `ms`: its `CreateTaskResult` (`{"task": ...}`).
    fn start_v1(self: &Arc<Self>, id: &RawValue, ms: u64, ttl: u64) -> Bytes {
        let task_id = format!("task-{:032x}", rand::random::<u128>());
        let mut task = Self::new_task(Status::Working, "sleep".into());
        task.expires = Instant::now() + Duration::from_millis(ttl.max(1000));
        let created = json!({ "task": v1_task(&task_id, &task) });
        self.lock().insert(task_id.clone(), task);
        let tasks = Arc::clone(self);
        let key = task_id.clone();
        let job = tokio::spawn(async move {
            tokio::time::sleep(Duration::from_millis(ms)).await;
            tasks.settle(&key, Ok(text(format!("slept {ms}ms"), false)));
        });
        if let Some(t) = self.lock().get_mut(&task_id) {
            t.job = Some(job);
        }
        result(id, &created)
    }

    /// A task that ends after `after` with `outcome` (a result, or a protocol error).
    fn start(
        self: &Arc<Self>,
        id: &RawValue,
        name: &str,
        after: Duration,
        outcome: Result<Value, Value>,
    ) -> Bytes {
        let (task_id, reply) = self.create(id, Self::new_task(Status::Working, name.into()));
        let tasks = Arc::clone(self);
        let key = task_id.clone();
        let job = tokio::spawn(async move {
            tokio::time::sleep(after).await;
            tasks.settle(&key, outcome);
        });
        if let Some(t) = self.lock().get_mut(&task_id) {
            t.job = Some(job);
        }
        reply
    }

    /// A task waiting for the answers to `questions` (keys made opaque and unique).
    fn wait(
        &self,
        id: &RawValue,
        waits: Waits,
        subject: String,
        questions: Vec<(&str, Value)>,
    ) -> Bytes {
        let mut task = Self::new_task(Status::InputRequired, subject);
        task.waits = Some(waits);
        let nonce = format!("{:08x}", rand::random::<u32>());
        for (key, q) in questions {
            task.pending.insert(format!("{key}-{nonce}"), q);
        }
        self.create(id, task).1
    }

    /// Ends a working task with `outcome`, unless it ended already (cancelled).
    fn settle(&self, task_id: &str, outcome: Result<Value, Value>) {
        let mut map = self.lock();
        let Some(t) = map.get_mut(task_id) else {
            return;
        };
        if t.status.is_terminal() {
            return;
        }
        match outcome {
            Ok(r) => {
                t.status = Status::Completed;
                t.result = Some(r);
            }
            Err(e) => {
                t.status = Status::Failed;
                t.error = Some(e);
            }
        }
        t.updated_ms = now_ms();
        t.job = None;
    }

    fn get(&self, id: &RawValue, task_id: &str) -> Bytes {
        let map = self.lock();
        let Some(t) = map.get(task_id) else {
            return not_found(id, task_id);
        };
        let mut detailed = envelope(task_id, t);
        detailed["resultType"] = "complete".into();
        match t.status {
            Status::Completed => detailed["result"] = t.result.clone().unwrap_or(Value::Null),
            Status::Failed => detailed["error"] = t.error.clone().unwrap_or(Value::Null),
            Status::InputRequired => {
                detailed["inputRequests"] = Value::Object(t.pending.clone());
            }
            Status::Working | Status::Cancelled => {}
        }
        result(id, &detailed)
    }

    fn update(&self, id: &RawValue, task_id: &str, responses: Option<&Value>) -> Bytes {
        let mut map = self.lock();
        let Some(t) = map.get_mut(task_id) else {
            return not_found(id, task_id);
        };
        let responses = match responses {
            Some(Value::Object(r)) => r.clone(),
            _ => {
                return error(
                    id,
                    INVALID_PARAMS,
                    "Invalid params: inputResponses must be an object",
                    None,
                );
            }
        };
        if t.status == Status::InputRequired {
            // Answers to questions not asked (or asked before) are ignored.
            for (key, answer) in responses {
                if t.pending.remove(&key).is_some() {
                    t.answers.insert(key, answer);
                }
            }
            if t.pending.is_empty() {
                let accepted = |prefix: &str| {
                    t.answers.iter().any(|(k, a)| {
                        k.starts_with(prefix)
                            && a.get("action").and_then(Value::as_str) == Some("accept")
                    })
                };
                let summary = match t.waits {
                    Some(Waits::Confirm) if accepted("confirm") => {
                        format!("deleted {}", t.subject)
                    }
                    Some(Waits::Confirm) => format!("kept {}", t.subject),
                    _ => format!("received {} answers", t.answers.len()),
                };
                t.status = Status::Completed;
                t.result = Some(text(summary, false));
            }
            t.updated_ms = now_ms();
        }
        result(id, &json!({"resultType": "complete"}))
    }

    fn cancel(&self, id: &RawValue, task_id: &str) -> Bytes {
        let mut map = self.lock();
        let Some(t) = map.get_mut(task_id) else {
            return not_found(id, task_id);
        };
        if !t.status.is_terminal() {
            t.status = Status::Cancelled;
            t.pending.clear();
            t.updated_ms = now_ms();
            if let Some(job) = t.job.take() {
                job.abort();
            }
        }
        result(id, &json!({"resultType": "complete"}))
    }
}

/// The fields every task carries (`Task`).
fn envelope(task_id: &str, t: &Task) -> Value {
    json!({
        "taskId": task_id,
        "status": t.status.as_str(),
        "createdAt": iso(t.created_ms),
        "lastUpdatedAt": iso(t.updated_ms),
        "ttlMs": TTL_MS,
        "pollIntervalMs": POLL_INTERVAL_MS,
    })
}

fn not_found(id: &RawValue, task_id: &str) -> Bytes {
    error(
        id,
        INVALID_PARAMS,
        &format!("Task not found: {task_id}"),
        None,
    )
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used)]
    use super::*;

    fn modern(with: bool) -> Modern {
        let capabilities = if with {
            json!({"extensions": {EXTENSION: {}}})
        } else {
            json!({})
        };
        Modern {
            capabilities,
            log_level: None,
        }
    }

    fn ask(tasks: &Arc<Tasks>, with: bool, method: &str, params: Value) -> Value {
        let id = RawValue::from_string("1".into()).unwrap();
        let p = RawValue::from_string(params.to_string()).unwrap();
        match tasks.request(&modern(with), &id, method, Some(&p)).unwrap() {
            Served::Reply(b) => serde_json::from_slice(&b).unwrap(),
            Served::Sleep(ms) => json!({ "sleep": ms }),
        }
    }

    #[test]
    fn timestamps_are_iso_8601() {
        assert_eq!(iso(0), "1970-01-01T00:00:00.000Z");
        assert_eq!(iso(1_709_251_199_123), "2024-02-29T23:59:59.123Z");
    }

    #[tokio::test]
    async fn a_task_is_created_answered_in_parts_and_gated() {
        let tasks = Arc::new(Tasks::default());
        let created = ask(
            &tasks,
            true,
            "tools/call",
            json!({"name": "multi_input", "arguments": {}}),
        );
        let r = &created["result"];
        assert_eq!(r["resultType"], "task", "{created}");
        let task_id = r["taskId"].as_str().unwrap();
        let get = ask(&tasks, true, "tasks/get", json!({ "taskId": task_id }));
        let keys: Vec<String> = get["result"]["inputRequests"]
            .as_object()
            .unwrap()
            .keys()
            .cloned()
            .collect();
        assert_eq!(keys.len(), 2, "{get}");
        let answer = json!({"action": "accept", "content": {"name": "x"}});
        ask(
            &tasks,
            true,
            "tasks/update",
            json!({"taskId": task_id, "inputResponses": {keys[0].clone(): answer.clone()}}),
        );
        let get = ask(&tasks, true, "tasks/get", json!({ "taskId": task_id }));
        assert_eq!(get["result"]["status"], "input_required");
        assert!(get["result"]["inputRequests"].get(&keys[0]).is_none());
        ask(
            &tasks,
            true,
            "tasks/update",
            json!({"taskId": task_id, "inputResponses": {keys[1].clone(): answer}}),
        );
        let get = ask(&tasks, true, "tasks/get", json!({ "taskId": task_id }));
        assert_eq!(get["result"]["status"], "completed", "{get}");
        let gated = ask(&tasks, false, "tasks/get", json!({ "taskId": task_id }));
        assert_eq!(gated["error"]["code"], MISSING_CAPABILITY);
        let unknown = ask(&tasks, true, "tasks/get", json!({"taskId": "nope"}));
        assert_eq!(unknown["error"]["code"], INVALID_PARAMS);
        let sync = ask(
            &tasks,
            false,
            "tools/call",
            json!({"name": "slow_compute", "arguments": {"seconds": 0}}),
        );
        assert!(sync["result"]["content"].is_array(), "{sync}");
    }
}
