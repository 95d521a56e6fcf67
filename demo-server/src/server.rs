//! The transport-independent protocol core: shared per-server state (cached result bytes, trace
//! file, demo catalog or conformance fixture) and the per-session state machine turning one
//! incoming message into its outputs.

use std::borrow::Cow;
use std::collections::HashMap;
use std::fs::File;
use std::io::{self, Write as _};
use std::sync::{Arc, Mutex, MutexGuard, PoisonError};
use std::time::Duration;

use bytes::Bytes;
use serde::Deserialize;
use serde::de::IgnoredAny;
use serde_json::value::RawValue;
use tokio::sync::oneshot;

use super::DemoOptions;
use super::inflight::{Deferred, IdKey, InFlight, Job, id_key};
use super::modern::{self, Modern};
use super::peer::{LOG_LEVELS, PEER_TIMEOUT, Peer};
use super::tasks::{self, Served, Tasks};
use super::tools::{self, ToolRun, ToolSet, Transport};
use super::wire::{self, INVALID_PARAMS, METHOD_NOT_FOUND, Message};
use super::{catalog, fixture, fixture_mrtr, fixture_tools};
use crate::{CursorKey, ParamHeaders};

/// Protocol revisions the demo speaks, newest first.
pub(crate) const SUPPORTED_VERSIONS: [&str; 4] =
    ["2025-11-25", "2025-06-18", "2025-03-26", "2024-11-05"];

const DEFAULT_NAME: &str = "switchyard-demo";
const INSTRUCTIONS: &str = "Demo upstream shipped with Switchyard: echo, add, sleep.";
const CAPABILITIES: &[u8] =
    br#"{"tools":{"listChanged":false},"prompts":{},"resources":{},"logging":{}}"#;

/// State shared by every session of one server.
pub(crate) struct Server {
    tools: ToolSet,
    /// Serving the conformance fixture instead of the demo catalog.
    fixture: bool,
    /// The fixture's test-only tools are listed and served (`--conformance --test-tools`).
    fixture_test_tools: bool,
    /// How long a server-to-client request waits for the client's answer.
    peer_timeout: Duration,
    /// Everything of the initialize result after the protocol version string.
    init_tail: Vec<u8>,
    tools_list: Vec<u8>,
    prompts_list: Cow<'static, [u8]>,
    resources_list: Cow<'static, [u8]>,
    templates_list: Cow<'static, [u8]>,
    trace: Option<Mutex<File>>,
    /// For `server/discover`: the server's name, capabilities and instructions.
    name: String,
    capabilities: Cow<'static, [u8]>,
    instructions: &'static str,
    /// The fixture's tasks (the tasks extension, stateless requests), and with `--tasks` the
    /// session-based ones (2025-11-25).
    tasks: Arc<Tasks>,
    session_tasks: bool,
    /// Signs the `requestState` of the fixture's multi round-trip tools.
    state_key: CursorKey,
    /// Speaking the stateless revision too.
    pub(crate) stateless: bool,
    /// The tools that mirror arguments into `Mcp-Param-*` headers (checked on stateless HTTP
    /// calls), read once from the tool list.
    pub(crate) mirrored: HashMap<String, ParamHeaders>,
}

impl Server {
    pub(crate) fn new(opts: &DemoOptions) -> io::Result<Arc<Server>> {
        Self::with_peer_timeout(opts, PEER_TIMEOUT)
    }

    /// [`Server::new`] with another timeout for server-to-client requests.
    pub(crate) fn with_peer_timeout(
        opts: &DemoOptions,
        peer_timeout: Duration,
    ) -> io::Result<Arc<Server>> {
        let name = if opts.name.is_empty() {
            DEFAULT_NAME
        } else {
            &opts.name
        };
        let (capabilities, instructions) = if opts.conformance {
            (fixture::CAPABILITIES, fixture::INSTRUCTIONS)
        } else {
            (CAPABILITIES, INSTRUCTIONS)
        };
        let capabilities: Cow<'static, [u8]> = if opts.tasks {
            tasks::with_session_tasks(capabilities).into()
        } else {
            capabilities.into()
        };
        let mut init_tail = Vec::with_capacity(320);
        init_tail.extend_from_slice(b"\",\"capabilities\":");
        init_tail.extend_from_slice(&capabilities);
        init_tail.extend_from_slice(b",\"serverInfo\":{\"name\":");
        wire::push_str(&mut init_tail, name);
        init_tail.extend_from_slice(b",\"version\":");
        wire::push_str(&mut init_tail, env!("CARGO_PKG_VERSION"));
        init_tail.extend_from_slice(b"},\"instructions\":");
        wire::push_str(&mut init_tail, instructions);
        init_tail.push(b'}');
        let trace = match &opts.trace_file {
            Some(path) => Some(Mutex::new(
                File::options().create(true).append(true).open(path)?,
            )),
            None => None,
        };
        let (mut tools_list, prompts_list, resources_list, templates_list) = if opts.conformance {
            (
                fixture_tools::list_result(opts.stateless, opts.test_tools),
                fixture::prompts_list(opts.stateless).into(),
                fixture::resources_list().into(),
                fixture::templates_list().into(),
            )
        } else {
            (
                tools::list_result(ToolSet {
                    test: opts.test_tools,
                    hostile: opts.hostile_tools,
                    extra: opts.extra_tools,
                }),
                catalog::PROMPTS_LIST.into(),
                catalog::RESOURCES_LIST.into(),
                catalog::TEMPLATES_LIST.into(),
            )
        };
        if opts.tasks {
            tools_list = tasks::task_supporting(&tools_list, "sleep");
        }
        let server = Server {
            tools: ToolSet {
                test: opts.test_tools && !opts.conformance,
                hostile: opts.hostile_tools && !opts.conformance,
                extra: opts.extra_tools,
            },
            fixture: opts.conformance,
            fixture_test_tools: opts.conformance && opts.test_tools,
            peer_timeout,
            init_tail,
            mirrored: modern::mirrored_tools(&tools_list),
            tools_list,
            prompts_list,
            resources_list,
            templates_list,
            trace,
            name: name.to_owned(),
            // The fixture offers the tasks extension to stateless requests (`server/discover`).
            capabilities: if opts.conformance && opts.stateless {
                tasks::with_extension(&capabilities).into()
            } else {
                capabilities
            },
            session_tasks: opts.tasks,
            instructions,
            tasks: Arc::default(),
            state_key: CursorKey::random(),
            stateless: opts.stateless,
        };
        Ok(Arc::new(server))
    }

    pub(crate) fn session(self: &Arc<Self>, transport: Transport) -> Arc<Session> {
        Arc::new(Session {
            server: Arc::clone(self),
            transport,
            state: Mutex::new(State::default()),
            peer: Peer::new(self.peer_timeout),
        })
    }

    /// Classifies one received message, appending it to the trace file first if it is JSON.
    pub(crate) fn parse<'a>(&self, bytes: &'a [u8]) -> Result<Message<'a>, Bytes> {
        let parsed = wire::parse(bytes);
        if let Some(trace) = &self.trace
            && (parsed.is_ok() || serde_json::from_slice::<IgnoredAny>(bytes).is_ok())
        {
            write_trace(trace, bytes);
        }
        parsed
    }
}

impl Server {
    /// With a trace file, records the headers of an HTTP request as `{"http_headers": {...}}`
    /// (tests check what reaches an upstream, e.g. that no client credential does).
    pub(crate) fn trace_headers(&self, headers: &axum::http::HeaderMap) {
        let Some(trace) = &self.trace else { return };
        let map: serde_json::Map<String, serde_json::Value> = headers
            .iter()
            .map(|(k, v)| {
                (
                    k.as_str().to_owned(),
                    String::from_utf8_lossy(v.as_bytes()).into_owned().into(),
                )
            })
            .collect();
        let line = serde_json::json!({ "http_headers": map }).to_string();
        write_trace(trace, line.as_bytes());
    }
}

impl Server {
    /// With a trace file, records an event that is not a message (e.g. a request cancelled
    /// by its client closing the stream).
    pub(crate) fn trace_note(&self, note: serde_json::Value) {
        if let Some(trace) = &self.trace {
            write_trace(trace, note.to_string().as_bytes());
        }
    }
}

/// One JSON document per line; documents spanning lines are re-encoded compactly.
fn write_trace(trace: &Mutex<File>, bytes: &[u8]) {
    let bytes = bytes.trim_ascii();
    let mut line = if bytes.contains(&b'\n') || bytes.contains(&b'\r') {
        match serde_json::from_slice::<serde_json::Value>(bytes)
            .and_then(|v| serde_json::to_vec(&v))
        {
            Ok(compact) => compact,
            Err(_) => return,
        }
    } else {
        bytes.to_vec()
    };
    line.push(b'\n');
    let mut file = trace.lock().unwrap_or_else(PoisonError::into_inner);
    if let Err(e) = file.write_all(&line).and_then(|()| file.flush()) {
        tracing::warn!(error = %e, "demo server: cannot append to the trace file");
    }
}

/// What one incoming message produced.
#[derive(Debug)]
pub(crate) enum Outcome {
    /// Nothing to send (notification, response, or nothing to say).
    Nothing,
    /// One message to send now.
    Reply(Bytes),
    /// Work that finishes later; run it concurrently with further messages.
    Deferred(Deferred),
    /// Exit the process with this code without answering (the `crash` test tool, stdio only).
    Exit(i32),
}

#[derive(Default)]
struct State {
    protocol_version: Option<&'static str>,
    initialized: bool,
    next_generation: u64,
    in_flight: HashMap<IdKey, InFlight>,
}

/// One MCP session: the stdio process, or one `Mcp-Session-Id` over HTTP.
pub(crate) struct Session {
    server: Arc<Server>,
    transport: Transport,
    state: Mutex<State>,
    /// The client's capabilities, log threshold, subscriptions, and requests sent to it.
    pub(crate) peer: Peer,
}

#[derive(Deserialize)]
struct InitializeParams<'a> {
    #[serde(rename = "protocolVersion", borrow)]
    protocol_version: Cow<'a, str>,
    #[serde(default, borrow)]
    capabilities: Option<&'a RawValue>,
}

#[derive(Deserialize)]
struct CallParams<'a> {
    #[serde(borrow)]
    name: Cow<'a, str>,
    #[serde(default, borrow)]
    arguments: Option<&'a RawValue>,
    #[serde(default, rename = "_meta", borrow)]
    meta: Option<RequestMeta<'a>>,
}

#[derive(Deserialize)]
struct RequestMeta<'a> {
    #[serde(default, rename = "progressToken", borrow)]
    progress_token: Option<&'a RawValue>,
}

#[derive(Deserialize)]
struct CancelParams<'a> {
    #[serde(rename = "requestId", borrow)]
    request_id: &'a RawValue,
}

#[derive(Deserialize)]
struct SetLevelParams<'a> {
    #[serde(borrow)]
    level: Cow<'a, str>,
}

impl Session {
    fn lock(&self) -> MutexGuard<'_, State> {
        self.state.lock().unwrap_or_else(PoisonError::into_inner)
    }

    /// The negotiated protocol version once `initialize` succeeded.
    pub(crate) fn protocol_version(&self) -> Option<&'static str> {
        self.lock().protocol_version
    }

    /// Whether `notifications/initialized` has arrived.
    #[cfg(test)]
    pub(crate) fn is_initialized(&self) -> bool {
        self.lock().initialized
    }

    /// Cancels every in-flight deferred request (session end, server shutdown).
    pub(crate) fn cancel_all(&self) {
        for (_, f) in self.lock().in_flight.drain() {
            let _ = f.cancel.send(());
        }
    }

    /// Parses (and traces) one raw message, then handles it.
    pub(crate) fn handle_bytes(self: &Arc<Self>, bytes: &[u8]) -> Outcome {
        match self.server.parse(bytes) {
            Ok(msg) => self.handle(msg),
            Err(reply) => Outcome::Reply(reply),
        }
    }

    /// Handles one parsed message.
    pub(crate) fn handle(self: &Arc<Self>, msg: Message<'_>) -> Outcome {
        match msg {
            Message::Request { id, method, params } => {
                tracing::debug!(method = &*method, id = id.get(), "demo server: request");
                self.request(id, &method, params)
            }
            Message::Notification { method, params } => {
                tracing::debug!(method = &*method, "demo server: notification");
                self.notification(&method, params);
                Outcome::Nothing
            }
            Message::Response { id, result, error } => {
                if !self.peer.resolve(id, result, error) {
                    tracing::debug!(id = id.get(), "demo server: response to no pending request");
                }
                Outcome::Nothing
            }
        }
    }

    fn notification(&self, method: &str, params: Option<&RawValue>) {
        match method {
            "notifications/initialized" => self.lock().initialized = true,
            "notifications/cancelled" => {
                let Some(p) =
                    params.and_then(|p| serde_json::from_str::<CancelParams<'_>>(p.get()).ok())
                else {
                    return;
                };
                let Some(key) = id_key(p.request_id) else {
                    return;
                };
                let entry = self.lock().in_flight.remove(&key);
                if let Some(f) = entry {
                    let _ = f.cancel.send(());
                }
            }
            _ => {}
        }
    }

    fn request(
        self: &Arc<Self>,
        id: &RawValue,
        method: &str,
        params: Option<&RawValue>,
    ) -> Outcome {
        if !self.server.stateless {
            return self.request_in_session(id, method, params);
        }
        if method == "server/discover" {
            let s = &self.server;
            let reply = modern::discover(
                id,
                &SUPPORTED_VERSIONS,
                &s.capabilities,
                &s.name,
                s.instructions,
            );
            return Outcome::Reply(reply);
        }
        let Some(stateless) = Modern::of(params) else {
            return self.request_in_session(id, method, params);
        };
        // Each stateless request says what its client can do; server-to-client requests of
        // the session-based tools follow what it says.
        self.peer.declare(
            RawValue::from_string(stateless.capabilities.to_string())
                .ok()
                .as_deref(),
        );
        // No log messages for a request that did not ask for them (`_meta` logLevel).
        let threshold = stateless
            .log_level
            .as_deref()
            .and_then(|l| LOG_LEVELS.iter().position(|x| *x == l))
            .map_or(LOG_LEVELS.len() as u8, |i| i as u8);
        self.peer.set_log_threshold(threshold);
        if self.server.fixture
            && let Some(reply) =
                fixture_mrtr::request(&self.server.state_key, &stateless, id, method, params)
        {
            return Outcome::Reply(modern::complete(reply, method));
        }
        if self.server.fixture
            && let Some(served) = self.server.tasks.request(&stateless, id, method, params)
        {
            return match served {
                Served::Reply(reply) => Outcome::Reply(modern::complete(reply, method)),
                Served::Sleep(ms) => self.defer(id, None, Job::Sleep { ms, steps: 0 }),
            };
        }
        match self.request_in_session(id, method, params) {
            Outcome::Reply(reply) if matches!(method, "resources/read" | "resources/metadata") => {
                Outcome::Reply(modern::complete(modern::not_found(reply, params), method))
            }
            Outcome::Reply(reply) => Outcome::Reply(modern::complete(reply, method)),
            other => other,
        }
    }

    /// A request of the session-based revisions (or one whose answer is the same in all).
    fn request_in_session(
        self: &Arc<Self>,
        id: &RawValue,
        method: &str,
        params: Option<&RawValue>,
    ) -> Outcome {
        if self.server.fixture
            && let Some(reply) = fixture::request(&self.peer, id, method, params)
        {
            return Outcome::Reply(reply);
        }
        if self.server.session_tasks
            && let Some(outcome) =
                tasks::session_request(self, &self.server.tasks, id, method, params)
        {
            return outcome;
        }
        let reply = match method {
            "tools/call" => return self.call_tool(id, params),
            "initialize" => self.initialize(id, params),
            "ping" => wire::response(id, b"{}"),
            "tools/list" => wire::response(id, &self.server.tools_list),
            "prompts/list" => wire::response(id, &self.server.prompts_list),
            "prompts/get" => match params {
                Some(p) => catalog::get_prompt(id, p),
                None => missing_params(id, method),
            },
            "resources/list" => wire::response(id, &self.server.resources_list),
            "resources/read" => match params {
                Some(p) => catalog::read_resource(id, p),
                None => missing_params(id, method),
            },
            "resources/metadata" if !self.server.fixture => match params {
                Some(p) => catalog::resource_metadata(id, p),
                None => missing_params(id, method),
            },
            "resources/templates/list" => wire::response(id, &self.server.templates_list),
            "logging/setLevel" => {
                match params.map(|p| serde_json::from_str::<SetLevelParams<'_>>(p.get())) {
                    None => missing_params(id, method),
                    Some(Err(e)) => catalog::invalid_params(id, method, &e),
                    Some(Ok(p)) => match LOG_LEVELS.iter().position(|l| *l == p.level) {
                        Some(level) => {
                            self.peer.set_log_threshold(level as u8);
                            wire::response(id, b"{}")
                        }
                        None => {
                            let msg = format!(
                                "Invalid params for logging/setLevel: unknown level `{}`",
                                p.level
                            );
                            wire::error(Some(id), INVALID_PARAMS, &msg)
                        }
                    },
                }
            }
            _ => {
                let msg = format!("Method not found: {method}");
                wire::error(Some(id), METHOD_NOT_FOUND, &msg)
            }
        };
        Outcome::Reply(reply)
    }

    fn initialize(&self, id: &RawValue, params: Option<&RawValue>) -> Bytes {
        let Some(params) = params else {
            return missing_params(id, "initialize");
        };
        let p: InitializeParams<'_> = match serde_json::from_str(params.get()) {
            Ok(p) => p,
            Err(e) => return catalog::invalid_params(id, "initialize", &e),
        };
        let version = SUPPORTED_VERSIONS
            .iter()
            .copied()
            .find(|v| *v == p.protocol_version)
            .unwrap_or(SUPPORTED_VERSIONS[0]);
        self.lock().protocol_version = Some(version);
        self.peer.declare(p.capabilities);
        let tail = &self.server.init_tail;
        wire::response_with(id, tail.len() + 40, |buf| {
            buf.extend_from_slice(b"{\"protocolVersion\":\"");
            buf.extend_from_slice(version.as_bytes());
            buf.extend_from_slice(tail);
        })
    }

    fn call_tool(self: &Arc<Self>, id: &RawValue, params: Option<&RawValue>) -> Outcome {
        let Some(params) = params else {
            return Outcome::Reply(missing_params(id, "tools/call"));
        };
        let p: CallParams<'_> = match serde_json::from_str(params.get()) {
            Ok(p) => p,
            Err(e) => return Outcome::Reply(catalog::invalid_params(id, "tools/call", &e)),
        };
        if let Some(args) = p.arguments
            && !args.get().starts_with('{')
        {
            let msg = "Invalid params for tools/call: `arguments` must be an object";
            return Outcome::Reply(wire::error(Some(id), INVALID_PARAMS, msg));
        }
        let token = p.meta.and_then(|m| m.progress_token);
        if let Some(t) = token
            && (t.get() == "null" || !wire::is_valid_id(t))
        {
            let msg = "Invalid params for tools/call: `_meta.progressToken` must be a string or an integer";
            return Outcome::Reply(wire::error(Some(id), INVALID_PARAMS, msg));
        }
        if self.server.fixture {
            let stateless = self.server.stateless && Modern::of(Some(params)).is_some();
            return fixture_tools::call(self, id, &p.name, p.arguments, token, stateless);
        }
        let run = tools::call(&p.name, p.arguments, self.transport, self.server.tools);
        match run {
            Err(()) => {
                let msg = format!("Unknown tool: {}", p.name);
                Outcome::Reply(wire::error(Some(id), INVALID_PARAMS, &msg))
            }
            Ok(ToolRun::Text(text)) => Outcome::Reply(wire::tool_text(id, &text, false)),
            Ok(ToolRun::Failed(text)) => Outcome::Reply(wire::tool_text(id, &text, true)),
            Ok(ToolRun::Exit(code)) => Outcome::Exit(code),
            Ok(ToolRun::Sleep { ms, steps }) => {
                let token = token.filter(|_| steps > 0);
                self.defer(id, token, Job::Sleep { ms, steps })
            }
            Ok(ToolRun::Flood { count, kind }) => self.defer(id, token, Job::Flood { count, kind }),
            Ok(ToolRun::Ask {
                method,
                params,
                count,
            }) => self.defer(
                id,
                None,
                Job::Ask {
                    method,
                    params,
                    count,
                },
            ),
        }
    }

    /// Runs `job` for request `id` as a deferred, cancellable request.
    fn defer(self: &Arc<Self>, id: &RawValue, token: Option<&RawValue>, job: Job) -> Outcome {
        match Deferred::start(self, id, token, job) {
            Ok(work) => Outcome::Deferred(work),
            Err(reply) => Outcome::Reply(reply),
        }
    }

    /// Records an in-flight request under `key`; `None` if one with that id is still running.
    pub(crate) fn register(&self, key: IdKey) -> Option<(u64, oneshot::Receiver<()>)> {
        let mut st = self.lock();
        if st.in_flight.contains_key(&key) {
            return None;
        }
        st.next_generation += 1;
        let generation = st.next_generation;
        let (cancel, cancelled) = oneshot::channel();
        st.in_flight.insert(key, InFlight { generation, cancel });
        Some((generation, cancelled))
    }

    /// Forgets the in-flight request registered as (`key`, `generation`), if still there.
    pub(crate) fn forget(&self, key: &IdKey, generation: u64) {
        let mut st = self.lock();
        if st
            .in_flight
            .get(key)
            .is_some_and(|f| f.generation == generation)
        {
            st.in_flight.remove(key);
        }
    }
}

fn missing_params(id: &RawValue, method: &str) -> Bytes {
    let msg = format!("Invalid params for {method}: params object is required");
    wire::error(Some(id), INVALID_PARAMS, &msg)
}

impl Session {
    /// Whether the fixture's test-only tools are served.
    pub(crate) fn fixture_test_tools(&self) -> bool {
        self.server.fixture_test_tools
    }
}

impl std::fmt::Debug for Session {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Session")
            .field("transport", &self.transport)
            .finish_non_exhaustive()
    }
}
