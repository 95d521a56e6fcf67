//! The demo's tools: their `tools/list` definitions and argument checking / execution of the
//! synchronous ones (the `sleep` timing itself lives in the session core).

use std::borrow::Cow;
use std::io::Write as _;

use serde::Deserialize;
use serde_json::value::RawValue;
use serde_json::{Value, json};

use super::wire::serde_message;

/// Longest `sleep` accepted (one day), so deadlines never overflow.
pub(crate) const MAX_SLEEP_MS: u64 = 86_400_000;
/// Most progress notifications one `sleep` may ask for.
pub(crate) const MAX_SLEEP_STEPS: u64 = 10_000;
/// Most notifications one `flood` may send.
pub(crate) const MAX_FLOOD: u64 = 10_000_000;
/// Most requests one `ask` may send the client at once.
pub(crate) const MAX_ASK: u64 = 1_000;
/// The requests `ask` may send the client.
const ASKABLE: [&str; 4] = [
    "sampling/createMessage",
    "elicitation/create",
    "roots/list",
    "ping",
];

/// Which transport a session runs over; some test tools only make sense over stdio.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Transport {
    Stdio,
    Http,
}

/// What a `tools/call` turned into.
#[derive(Debug, PartialEq)]
pub(crate) enum ToolRun {
    /// A successful result with one text block.
    Text(String),
    /// A tool execution error (`isError: true`) with one text block.
    Failed(String),
    /// Wait `ms` in total, reporting `steps` progress notifications if the caller asked.
    Sleep { ms: u64, steps: u64 },
    /// Send `count` notifications as fast as the transport takes them, then answer.
    Flood { count: u64, kind: FloodKind },
    /// Send the client `count` requests `method` with `params` at once (whatever it declared)
    /// and answer with what came back.
    Ask {
        method: &'static str,
        /// Raw JSON.
        params: String,
        count: u64,
    },
    /// Terminate the process with this exit code, without answering.
    Exit(i32),
}

/// What a `flood` sends.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Deserialize)]
#[serde(rename_all = "lowercase")]
pub(crate) enum FloodKind {
    /// `notifications/progress` (needs the call's progressToken).
    Progress,
    /// `notifications/message` (logging).
    Message,
    /// Both, alternating.
    Both,
}

/// Which tools a demo server offers beyond `echo`, `add` and `sleep`.
#[derive(Debug, Clone, Copy, Default)]
pub(crate) struct ToolSet {
    /// `crash`, `stderr`, `pid`.
    pub(crate) test: bool,
    /// `flood` and `ask`: an upstream that misbehaves on purpose.
    pub(crate) hostile: bool,
    /// This many generated tools answering like `echo`.
    pub(crate) extra: usize,
}

/// The `tools/list` result, encoded once per server.
pub(crate) fn list_result(set: ToolSet) -> Vec<u8> {
    let mut tools = vec![
        json!({
            "name": "echo",
            "title": "Echo",
            "description": "Returns the given message unchanged.",
            "inputSchema": {
                "type": "object",
                "properties": {"message": {"type": "string", "description": "Text to return."}},
                "required": ["message"],
                "additionalProperties": false
            }
        }),
        json!({
            "name": "add",
            "title": "Add",
            "description": "Adds two numbers and returns the sum as text.",
            "inputSchema": {
                "type": "object",
                "properties": {
                    "a": {"type": "number", "description": "First addend."},
                    "b": {"type": "number", "description": "Second addend."}
                },
                "required": ["a", "b"],
                "additionalProperties": false
            }
        }),
        json!({
            "name": "sleep",
            "title": "Sleep",
            "description": "Waits `ms` milliseconds, then answers \"slept <ms>ms\". With a \
                progressToken and `steps` > 0, sends `steps` evenly spaced progress \
                notifications. Honors cancellation.",
            "inputSchema": {
                "type": "object",
                "properties": {
                    "ms": {"type": "integer", "minimum": 0, "maximum": MAX_SLEEP_MS,
                           "description": "Total time to wait, in milliseconds."},
                    "steps": {"type": "integer", "minimum": 0, "maximum": MAX_SLEEP_STEPS,
                              "default": 0, "description": "Number of progress notifications."}
                },
                "required": ["ms"],
                "additionalProperties": false
            }
        }),
    ];
    if set.test {
        tools.push(json!({
            "name": "crash",
            "title": "Crash (test only)",
            "description": "Exits the server process immediately with `exit_code`, without \
                answering. Only works over stdio.",
            "inputSchema": {
                "type": "object",
                "properties": {
                    "exit_code": {"type": "integer", "minimum": 0, "maximum": 255, "default": 3,
                                  "description": "Process exit code."}
                },
                "additionalProperties": false
            }
        }));
        tools.push(json!({
            "name": "stderr",
            "title": "Write to stderr (test only)",
            "description": "Writes `text` as one line to the server's stderr and answers \"ok\".",
            "inputSchema": {
                "type": "object",
                "properties": {"text": {"type": "string", "description": "Line to write."}},
                "required": ["text"],
                "additionalProperties": false
            }
        }));
        tools.push(json!({
            "name": "pid",
            "title": "Process id (test only)",
            "description": "Answers the server's operating-system process id.",
            "inputSchema": {"type": "object", "additionalProperties": false}
        }));
    }
    if set.hostile {
        tools.push(json!({
            "name": "flood",
            "title": "Notification flood (test only)",
            "description": "Sends `count` notifications (progress, needing a progressToken; log \
                messages; or both) as fast as they are taken, then answers \"flooded <count>\".",
            "inputSchema": {
                "type": "object",
                "properties": {
                    "count": {"type": "integer", "minimum": 0, "maximum": MAX_FLOOD},
                    "kind": {"type": "string", "enum": ["progress", "message", "both"],
                             "default": "progress"}
                },
                "required": ["count"],
                "additionalProperties": false
            }
        }));
        tools.push(json!({
            "name": "ask",
            "title": "Ask the client (test only)",
            "description": "Sends the client `count` requests `method` at once, whatever \
                capabilities it declared, and answers with a JSON summary: the results, the \
                error objects, and how many timed out or could not be sent.",
            "inputSchema": {
                "type": "object",
                "properties": {
                    "method": {"type": "string", "enum": ASKABLE},
                    "params": {"type": "object"},
                    "count": {"type": "integer", "minimum": 1, "maximum": MAX_ASK, "default": 1}
                },
                "required": ["method"],
                "additionalProperties": false
            }
        }));
    }
    for n in 1..=set.extra {
        tools.push(json!({
            "name": bulk_name(n),
            "title": format!("Bulk tool {n}"),
            "description": "One of many generated tools (for list measurements); answers like echo.",
            "inputSchema": {
                "type": "object",
                "properties": {"message": {"type": "string", "description": "Text to return."}},
                "required": ["message"],
                "additionalProperties": false
            }
        }));
    }
    serde_json::to_vec(&json!({ "tools": Value::Array(tools) }))
        .expect("a serde_json::Value always serializes")
}

fn bulk_name(n: usize) -> String {
    format!("bulk-{n:04}")
}

/// Whether `name` is one of the first `extra_tools` generated tools.
fn is_bulk(name: &str, extra_tools: usize) -> bool {
    name.strip_prefix("bulk-")
        .and_then(|n| n.parse::<usize>().ok())
        .is_some_and(|n| (1..=extra_tools).contains(&n) && bulk_name(n) == name)
}

#[derive(Deserialize)]
struct EchoArgs<'a> {
    #[serde(borrow)]
    message: Cow<'a, str>,
}

#[derive(Deserialize)]
struct AddArgs {
    a: serde_json::Number,
    b: serde_json::Number,
}

#[derive(Deserialize)]
struct SleepArgs {
    ms: u64,
    #[serde(default)]
    steps: u64,
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct FloodArgs {
    count: u64,
    #[serde(default = "default_flood_kind")]
    kind: FloodKind,
}

fn default_flood_kind() -> FloodKind {
    FloodKind::Progress
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct AskArgs<'a> {
    #[serde(borrow)]
    method: Cow<'a, str>,
    #[serde(default, borrow)]
    params: Option<&'a RawValue>,
    #[serde(default = "default_ask_count")]
    count: u64,
}

fn default_ask_count() -> u64 {
    1
}

#[derive(Deserialize)]
struct CrashArgs {
    #[serde(default = "default_exit_code")]
    exit_code: i64,
}

fn default_exit_code() -> i64 {
    3
}

#[derive(Deserialize)]
struct StderrArgs<'a> {
    #[serde(borrow)]
    text: Cow<'a, str>,
}

/// Runs tool `name`. `args` is the raw `arguments` object (already checked to be an object, or
/// absent). `Err` means the tool does not exist (a protocol error, not a tool error).
pub(crate) fn call(
    name: &str,
    args: Option<&RawValue>,
    transport: Transport,
    set: ToolSet,
) -> Result<ToolRun, ()> {
    let (test_tools, hostile) = (set.test, set.hostile);
    let args = args.map_or("{}", RawValue::get);
    let run = match name {
        n if n == "echo" || is_bulk(n, set.extra) => {
            match serde_json::from_str::<EchoArgs<'_>>(args) {
                Ok(a) => ToolRun::Text(a.message.into_owned()),
                Err(e) => bad_args(name, &e),
            }
        }
        "add" => match serde_json::from_str::<AddArgs>(args) {
            Ok(a) => add(&a.a, &a.b),
            Err(e) => bad_args(name, &e),
        },
        "sleep" => match serde_json::from_str::<SleepArgs>(args) {
            Ok(a) if a.ms > MAX_SLEEP_MS => ToolRun::Failed(format!(
                "Invalid arguments for tool sleep: ms must be at most {MAX_SLEEP_MS}"
            )),
            Ok(a) if a.steps > MAX_SLEEP_STEPS => ToolRun::Failed(format!(
                "Invalid arguments for tool sleep: steps must be at most {MAX_SLEEP_STEPS}"
            )),
            Ok(a) => ToolRun::Sleep {
                ms: a.ms,
                steps: a.steps,
            },
            Err(e) => bad_args(name, &e),
        },
        "crash" if test_tools => match serde_json::from_str::<CrashArgs>(args) {
            Ok(_) if transport != Transport::Stdio => ToolRun::Failed(
                "The crash tool only works when the demo server runs over stdio".to_owned(),
            ),
            Ok(a) => match i32::try_from(a.exit_code) {
                Ok(code @ 0..=255) => ToolRun::Exit(code),
                _ => ToolRun::Failed(
                    "Invalid arguments for tool crash: exit_code must be between 0 and 255"
                        .to_owned(),
                ),
            },
            Err(e) => bad_args(name, &e),
        },
        "stderr" if test_tools => match serde_json::from_str::<StderrArgs<'_>>(args) {
            Ok(a) => {
                let mut line = Vec::with_capacity(a.text.len() + 1);
                line.extend_from_slice(a.text.as_bytes());
                line.push(b'\n');
                // One write call so concurrent lines do not interleave; a closed stderr is not
                // the caller's problem.
                let _ = std::io::stderr().lock().write_all(&line);
                ToolRun::Text("ok".to_owned())
            }
            Err(e) => bad_args(name, &e),
        },
        "pid" if test_tools => ToolRun::Text(std::process::id().to_string()),
        "flood" if hostile => match serde_json::from_str::<FloodArgs>(args) {
            Ok(a) if a.count > MAX_FLOOD => ToolRun::Failed(format!(
                "Invalid arguments for tool flood: count must be at most {MAX_FLOOD}"
            )),
            Ok(a) => ToolRun::Flood {
                count: a.count,
                kind: a.kind,
            },
            Err(e) => bad_args(name, &e),
        },
        "ask" if hostile => match serde_json::from_str::<AskArgs<'_>>(args) {
            Ok(a) if !(1..=MAX_ASK).contains(&a.count) => ToolRun::Failed(format!(
                "Invalid arguments for tool ask: count must be from 1 to {MAX_ASK}"
            )),
            Ok(a) => match ASKABLE.iter().find(|m| **m == a.method) {
                Some(method) => ToolRun::Ask {
                    method,
                    params: a.params.map_or("{}", RawValue::get).to_owned(),
                    count: a.count,
                },
                None => ToolRun::Failed(format!(
                    "Invalid arguments for tool ask: method must be one of {}",
                    ASKABLE.join(", ")
                )),
            },
            Err(e) => bad_args(name, &e),
        },
        _ => return Err(()),
    };
    Ok(run)
}

fn bad_args(tool: &str, e: &serde_json::Error) -> ToolRun {
    ToolRun::Failed(format!(
        "Invalid arguments for tool {tool}: {}",
        serde_message(e)
    ))
}

/// Integer sums stay exact (no ".0"); anything else is added as f64, whose `Display` also
/// prints whole numbers without a fraction.
fn add(a: &serde_json::Number, b: &serde_json::Number) -> ToolRun {
    if let (Some(x), Some(y)) = (a.as_i64(), b.as_i64())
        && let Some(sum) = x.checked_add(y)
    {
        return ToolRun::Text(sum.to_string());
    }
    let sum = a.as_f64().unwrap_or(f64::NAN) + b.as_f64().unwrap_or(f64::NAN);
    if sum.is_finite() {
        ToolRun::Text(sum.to_string())
    } else {
        ToolRun::Failed("The sum is not a finite number".to_owned())
    }
}
