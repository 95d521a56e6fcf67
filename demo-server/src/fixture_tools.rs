//! The conformance fixture's tools: their `tools/list` definitions, the immediate content
//! results, and the deferred ones that log, report progress, or ask the client for sampling or
//! elicitation before answering (each such request needs the matching client capability).

use std::sync::Arc;
use std::time::Duration;

use bytes::Bytes;
use serde::Deserialize;
use serde_json::value::RawValue;
use serde_json::{Value, json};
use tokio::sync::mpsc;

use super::fixture::{PNG_BASE64, WAV_BASE64, encode};
use super::inflight::{Deferred, Job};
use super::peer::{Capability, LOG_INFO, Peer};
use super::server::{Outcome, Session};
use super::wire::{self, INVALID_PARAMS, serde_message};

/// Pause between the logging and progress tools' steps.
const STEP: Duration = Duration::from_millis(50);
/// How long `test_reconnection` works before answering (a window for stream handling).
const RECONNECTION_DELAY: Duration = Duration::from_millis(200);
const LOGGER: &str = "conformance-fixture";

const JSON_SCHEMA_2020_12_TOOL: &str = "json_schema_2020_12_tool";
/// A tool whose arguments are mirrored into `Mcp-Param-*` headers (SEP-2243).
const PARAM_HEADERS_TOOL: &str = "test_mcp_param_headers";

/// A deferred fixture tool.
#[derive(Debug)]
pub(crate) enum FixtureJob {
    Logging,
    /// Test only: a `notifications/resources/updated` for each resource the client
    /// subscribed to, then the list of them.
    TouchSubscribed,
    Progress,
    Reconnection,
    Sampling {
        prompt: String,
    },
    Elicit {
        form: Form,
        message: String,
    },
    /// A task-supporting tool run the session-based way (`tasks::SessionJob`).
    Task(super::tasks::SessionJob),
}

/// Which elicitation form a tool asks for.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Form {
    Basic,
    Defaults,
    Enums,
}

/// The fixture's tools; with `test_tools` also those that show a gateway's hand-over of the
/// session state this process holds (`test_session_state`, `test_touch_subscribed`).
pub(crate) fn list_result(stateless: bool, test_tools: bool) -> Vec<u8> {
    let no_args = json!({"type": "object", "properties": {}});
    let tool = |name: &str, description: &str| json!({"name": name, "description": description, "inputSchema": no_args});
    let one_string = |arg: &str, description: &str| {
        json!({"type": "object", "properties": {arg: {"type": "string", "description": description}},
               "required": [arg]})
    };
    let mut tools = json!([
        tool("test_simple_text", "Returns a simple text response."),
        tool("test_image_content", "Returns an image (a 1x1 PNG)."),
        tool("test_audio_content", "Returns audio (a tiny WAV)."),
        tool("test_embedded_resource", "Returns an embedded text resource."),
        tool("test_multiple_content_types", "Returns text, an image and an embedded resource."),
        tool("test_tool_with_logging", "Sends three info log messages while it runs."),
        tool("test_error_handling", "Always fails with a tool error (isError)."),
        tool("test_tool_with_progress", "Reports progress 0, 50 and 100 of 100 while it runs."),
        {"name": "test_sampling",
         "description": "Asks the client to sample an LLM (sampling/createMessage) and returns the answer.",
         "inputSchema": one_string("prompt", "The prompt to send to the LLM")},
        {"name": "test_elicitation",
         "description": "Asks the user for a username and email (elicitation/create) and returns the answer.",
         "inputSchema": one_string("message", "The message to show the user")},
        tool("test_elicitation_sep1034_defaults",
             "Elicits a form whose fields carry default values (SEP-1034)."),
        tool("test_elicitation_sep1330_enums",
             "Elicits a form with every enum schema variant (SEP-1330)."),
        {"name": JSON_SCHEMA_2020_12_TOOL,
         "description": "Tool with JSON Schema 2020-12 features",
         "inputSchema": json_schema_2020_12()},
        tool("test_reconnection", "Answers after a short delay (SSE polling scenarios)."),
        // Diagnostics of the 2026-07-28 suite, served the session-based way (a server-to-client
        // request, log messages): a gateway in front bridges them to the stateless revision.
        tool("test_missing_capability",
             "Asks the client to sample an LLM: needs the client's sampling capability."),
        tool("test_streaming_elicitation",
             "Asks the user for a username and email (elicitation/create) while it runs."),
        tool("test_logging_tool", "Sends three info log messages while it runs."),
        {"name": PARAM_HEADERS_TOOL,
         "description": "Echoes its arguments; over HTTP in 2026-07-28, region, priority and \
                         verbose travel in Mcp-Param-* headers too (x-mcp-header).",
         "inputSchema": param_headers_schema()},
    ]);
    if let Some(list) = tools.as_array_mut() {
        if stateless {
            list.extend(super::fixture_mrtr::tools());
        }
        // Session-based, the task tools run as ordinary calls (a gateway runs them as tasks).
        list.extend(super::tasks::tools(stateless));
        if test_tools {
            list.push(tool(
                "test_session_state",
                "Reports the client's log level and resource subscriptions as this server \
                 process knows them (test only).",
            ));
            list.push(tool(
                "test_touch_subscribed",
                "Changes every resource the client subscribed to: one \
                 notifications/resources/updated each (test only).",
            ));
        }
    }
    encode(&json!({ "tools": tools }))
}

/// One mirrored argument of each primitive type, and one that is not mirrored.
fn param_headers_schema() -> Value {
    json!({
        "type": "object",
        "properties": {
            "region": {"type": "string", "description": "Where to run", "x-mcp-header": "Region"},
            "priority": {"type": "integer", "x-mcp-header": "Priority"},
            "verbose": {"type": "boolean", "x-mcp-header": "Verbose"},
            "query": {"type": "string", "description": "Not mirrored"}
        },
        "required": ["region"]
    })
}

fn json_schema_2020_12() -> Value {
    json!({
        "$schema": "https://json-schema.org/draft/2020-12/schema",
        "type": "object",
        "$defs": {"address": {"$anchor": "addressDef", "type": "object",
                              "properties": {"street": {"type": "string"},
                                             "city": {"type": "string"}}}},
        "properties": {
            "name": {"type": "string"},
            "address": {"$ref": "#/$defs/address"},
            "contactMethod": {"type": "string", "enum": ["phone", "email"]},
            "phone": {"type": "string"},
            "email": {"type": "string"}
        },
        "allOf": [{"anyOf": [{"required": ["phone"]}, {"required": ["email"]}]}],
        "if": {"properties": {"contactMethod": {"const": "phone"}}, "required": ["contactMethod"]},
        "then": {"required": ["phone"]},
        "else": {"required": ["email"]},
        "additionalProperties": false
    })
}

#[derive(Deserialize)]
struct PromptArgs {
    prompt: String,
}

#[derive(Deserialize)]
struct MessageArgs {
    message: String,
}

/// Runs fixture tool `name` (arguments already checked to be an object or absent).
pub(crate) fn call(
    session: &Arc<Session>,
    id: &RawValue,
    name: &str,
    args: Option<&RawValue>,
    token: Option<&RawValue>,
    stateless: bool,
) -> Outcome {
    let args = args.map_or("{}", RawValue::get);
    let content = |c: Value| Outcome::Reply(wire::tool_content(id, &encode(&c), false));
    let job = match name {
        "test_simple_text" => {
            return content(
                json!([{"type": "text", "text": "This is a simple text response for testing."}]),
            );
        }
        "test_image_content" => {
            return content(
                json!([{"type": "image", "data": PNG_BASE64, "mimeType": "image/png"}]),
            );
        }
        "test_audio_content" => {
            return content(
                json!([{"type": "audio", "data": WAV_BASE64, "mimeType": "audio/wav"}]),
            );
        }
        "test_embedded_resource" => {
            return content(json!([{"type": "resource", "resource": {
                "uri": "test://embedded-resource", "mimeType": "text/plain",
                "text": "This is an embedded resource content."}}]));
        }
        "test_multiple_content_types" => {
            return content(json!([
                {"type": "text", "text": "Multiple content types test:"},
                {"type": "image", "data": PNG_BASE64, "mimeType": "image/png"},
                {"type": "resource", "resource": {"uri": "test://mixed-content-resource",
                    "mimeType": "application/json", "text": "{\"test\":\"data\",\"value\":123}"}}
            ]));
        }
        "test_error_handling" => {
            let text = "This tool intentionally returns an error for testing";
            return Outcome::Reply(wire::tool_text(id, text, true));
        }
        JSON_SCHEMA_2020_12_TOOL | PARAM_HEADERS_TOOL => {
            let text = format!("{name} received arguments: {args}");
            return Outcome::Reply(wire::tool_text(id, &text, false));
        }
        "test_session_state" if session.fixture_test_tools() => {
            let peer = &session.peer;
            let text = format!(
                "level={} subscriptions={}",
                peer.log_level(),
                peer.subscribed().join(",")
            );
            return Outcome::Reply(wire::tool_text(id, &text, false));
        }
        "test_touch_subscribed" if session.fixture_test_tools() => FixtureJob::TouchSubscribed,
        "test_tool_with_logging" | "test_logging_tool" => FixtureJob::Logging,
        "test_missing_capability" => FixtureJob::Sampling {
            prompt: "What is the capital of France?".to_owned(),
        },
        "test_streaming_elicitation" => FixtureJob::Elicit {
            form: Form::Basic,
            message: "Please provide your username and email".to_owned(),
        },
        "test_tool_with_progress" => FixtureJob::Progress,
        "test_reconnection" => FixtureJob::Reconnection,
        "test_sampling" => match serde_json::from_str::<PromptArgs>(args) {
            Ok(a) => FixtureJob::Sampling { prompt: a.prompt },
            Err(e) => return bad_args(id, name, &e),
        },
        "test_elicitation" => match serde_json::from_str::<MessageArgs>(args) {
            Ok(a) => FixtureJob::Elicit {
                form: Form::Basic,
                message: a.message,
            },
            Err(e) => return bad_args(id, name, &e),
        },
        "test_elicitation_sep1034_defaults" => FixtureJob::Elicit {
            form: Form::Defaults,
            message: "Please review and update the form fields with defaults".to_owned(),
        },
        "test_elicitation_sep1330_enums" => FixtureJob::Elicit {
            form: Form::Enums,
            message: "Please select options from the enum fields".to_owned(),
        },
        _ => match super::tasks::SessionJob::of(name, args) {
            Some(Ok(job)) => FixtureJob::Task(job),
            Some(Err(reply)) => return Outcome::Reply(reply(id)),
            None => {
                let msg = format!("Unknown tool: {name}");
                return Outcome::Reply(wire::error(Some(id), INVALID_PARAMS, &msg));
            }
        },
    };
    if let Some(cap) = job.needs()
        && !session.peer.supports(cap)
    {
        if stateless {
            // The stateless revision's error for a request needing an undeclared capability.
            let error = json!({"code": -32021,
                "message": format!("Missing required client capability: {}", cap.name()),
                "data": {"requiredCapabilities": {cap.name(): {}}}});
            let id: Value = serde_json::from_str(id.get()).unwrap_or(Value::Null);
            let msg = json!({"jsonrpc": "2.0", "id": id, "error": error});
            return Outcome::Reply(Bytes::from(serde_json::to_vec(&msg).unwrap_or_default()));
        }
        let text = format!(
            "Tool {name} needs the client's `{}` capability, which the client did not declare \
             at initialize",
            cap.name()
        );
        return Outcome::Reply(wire::tool_text(id, &text, true));
    }
    match Deferred::start(session, id, token, Job::Fixture(job)) {
        Ok(work) => Outcome::Deferred(work),
        Err(reply) => Outcome::Reply(reply),
    }
}

fn bad_args(id: &RawValue, tool: &str, e: &serde_json::Error) -> Outcome {
    let text = format!("Invalid arguments for tool {tool}: {}", serde_message(e));
    Outcome::Reply(wire::tool_text(id, &text, true))
}

impl FixtureJob {
    /// The client capability the job's server-to-client request needs.
    fn needs(&self) -> Option<Capability> {
        match self {
            FixtureJob::Sampling { .. } => Some(Capability::Sampling),
            FixtureJob::Elicit { .. } => Some(Capability::Elicitation),
            FixtureJob::Task(t) => t.needs(),
            FixtureJob::Logging
            | FixtureJob::TouchSubscribed
            | FixtureJob::Progress
            | FixtureJob::Reconnection => None,
        }
    }

    /// Whether the job may send messages (notifications, requests) before its response.
    pub(crate) fn streams(&self, has_token: bool) -> bool {
        match self {
            FixtureJob::Progress => has_token,
            FixtureJob::Reconnection => false,
            FixtureJob::Task(t) => t.needs().is_some(),
            FixtureJob::Logging
            | FixtureJob::TouchSubscribed
            | FixtureJob::Sampling { .. }
            | FixtureJob::Elicit { .. } => true,
        }
    }

    /// Does the work and returns the response to request `id`.
    pub(crate) async fn run(
        &self,
        peer: &Peer,
        id: &RawValue,
        token: Option<&RawValue>,
        out: Option<&mpsc::Sender<Bytes>>,
    ) -> Bytes {
        match self {
            FixtureJob::Logging => {
                let steps = [
                    "Tool execution started",
                    "Tool processing data",
                    "Tool execution completed",
                ];
                for (i, text) in steps.into_iter().enumerate() {
                    if i > 0 {
                        tokio::time::sleep(STEP).await;
                    }
                    if let Some(out) = out
                        && peer.logs(LOG_INFO)
                    {
                        let _ = out.send(log_message("info", text)).await;
                    }
                }
                wire::tool_text(id, "Tool with logging completed", false)
            }
            FixtureJob::TouchSubscribed => {
                let uris = peer.subscribed();
                if let Some(out) = out {
                    for uri in &uris {
                        let params = encode(&json!({ "uri": uri }));
                        let updated =
                            wire::notification("notifications/resources/updated", &params);
                        let _ = out.send(updated).await;
                    }
                }
                wire::tool_text(id, &format!("updated: {}", uris.join(",")), false)
            }
            FixtureJob::Progress => {
                for (i, progress) in [0, 50, 100].into_iter().enumerate() {
                    if i > 0 {
                        tokio::time::sleep(STEP).await;
                    }
                    if let (Some(token), Some(out)) = (token, out) {
                        let _ = out.send(wire::progress(token, progress, 100)).await;
                    }
                }
                wire::tool_text(id, "Tool with progress completed", false)
            }
            FixtureJob::Reconnection => {
                tokio::time::sleep(RECONNECTION_DELAY).await;
                wire::tool_text(id, "Reconnection test completed", false)
            }
            FixtureJob::Sampling { prompt } => {
                let params = json!({
                    "messages": [{"role": "user", "content": {"type": "text", "text": prompt}}],
                    "maxTokens": 100
                });
                match peer
                    .ask(out, "sampling/createMessage", &encode(&params))
                    .await
                {
                    Ok(result) => {
                        let text = format!("LLM response: {}", sampled_text(&result));
                        wire::tool_text(id, &text, false)
                    }
                    Err(e) => wire::tool_text(id, &e.to_string(), true),
                }
            }
            FixtureJob::Task(t) => t.run(peer, id, out).await,
            FixtureJob::Elicit { form, message } => {
                let params =
                    json!({"message": message, "requestedSchema": requested_schema(*form)});
                match peer.ask(out, "elicitation/create", &encode(&params)).await {
                    Ok(result) => {
                        let prefix = match form {
                            Form::Basic => "User response",
                            Form::Defaults | Form::Enums => "Elicitation completed",
                        };
                        wire::tool_text(id, &format!("{prefix}: {}", elicited(&result)), false)
                    }
                    Err(e) => wire::tool_text(id, &e.to_string(), true),
                }
            }
        }
    }
}

/// A `notifications/message` log entry from the fixture's logger.
fn log_message(level: &str, text: &str) -> Bytes {
    let params = json!({"level": level, "logger": LOGGER, "data": text});
    wire::notification("notifications/message", &encode(&params))
}

/// The text of a `sampling/createMessage` result (single content block or an array of them);
/// the raw result if it has no text.
fn sampled_text(result: &RawValue) -> String {
    #[derive(Deserialize)]
    struct Sampled {
        content: Value,
    }
    let text_of = |c: &Value| c.get("text").and_then(Value::as_str).map(str::to_owned);
    let text = match serde_json::from_str::<Sampled>(result.get()) {
        Ok(Sampled {
            content: Value::Array(blocks),
        }) => {
            let texts: Vec<String> = blocks.iter().filter_map(text_of).collect();
            (!texts.is_empty()).then(|| texts.join("\n"))
        }
        Ok(Sampled { content }) => text_of(&content),
        Err(_) => None,
    };
    text.unwrap_or_else(|| result.get().to_owned())
}

/// `action=<action>, content=<content JSON>` of an `elicitation/create` result.
fn elicited(result: &RawValue) -> String {
    #[derive(Deserialize)]
    struct Elicited<'a> {
        action: String,
        #[serde(default, borrow)]
        content: Option<&'a RawValue>,
    }
    match serde_json::from_str::<Elicited<'_>>(result.get()) {
        Ok(e) => format!(
            "action={}, content={}",
            e.action,
            e.content.map_or("{}", RawValue::get)
        ),
        Err(_) => format!("unexpected result {}", result.get()),
    }
}

fn requested_schema(form: Form) -> Value {
    match form {
        Form::Basic => json!({
            "type": "object",
            "properties": {
                "username": {"type": "string", "description": "User's response"},
                "email": {"type": "string", "description": "User's email address"}
            },
            "required": ["username", "email"]
        }),
        Form::Defaults => json!({
            "type": "object",
            "properties": {
                "name": {"type": "string", "description": "User name", "default": "John Doe"},
                "age": {"type": "integer", "description": "User age", "default": 30},
                "score": {"type": "number", "description": "User score", "default": 95.5},
                "status": {"type": "string", "description": "User status",
                           "enum": ["active", "inactive", "pending"], "default": "active"},
                "verified": {"type": "boolean", "description": "Verification status",
                             "default": true}
            }
        }),
        Form::Enums => {
            let titled = |titles: [&str; 3]| -> Vec<Value> {
                titles
                    .iter()
                    .enumerate()
                    .map(|(i, t)| json!({"const": format!("value{}", i + 1), "title": t}))
                    .collect()
            };
            json!({
                "type": "object",
                "properties": {
                    "untitledSingle": {"type": "string", "description": "Untitled single-select",
                                       "enum": ["option1", "option2", "option3"]},
                    "titledSingle": {"type": "string", "description": "Titled single-select",
                                     "oneOf": titled(["First Option", "Second Option",
                                                      "Third Option"])},
                    "legacyEnum": {"type": "string", "description": "Legacy titled enum",
                                   "enum": ["opt1", "opt2", "opt3"],
                                   "enumNames": ["Option One", "Option Two", "Option Three"]},
                    "untitledMulti": {"type": "array", "description": "Untitled multi-select",
                                      "items": {"type": "string",
                                                "enum": ["option1", "option2", "option3"]}},
                    "titledMulti": {"type": "array", "description": "Titled multi-select",
                                    "items": {"anyOf": titled(["First Choice", "Second Choice",
                                                               "Third Choice"])}}
                }
            })
        }
    }
}
