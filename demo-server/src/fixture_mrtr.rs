//! The conformance fixture's multi round-trip tools and prompt (2026-07-28): instead of asking
//! the client in the middle of a request, they answer `input_required` with `inputRequests`
//! and a signed `requestState`, and complete when the client retries with `inputResponses`.
//! Only the keys they need are read; extra keys are ignored, missing ones asked again, and a
//! state that fails verification is an error.

use std::time::{SystemTime, UNIX_EPOCH};

use bytes::Bytes;
use serde::{Deserialize, Serialize};
use serde_json::value::RawValue;
use serde_json::{Map, Value, json};

use super::modern::Modern;
use super::wire::{self, INVALID_PARAMS};
use crate::CursorKey;

/// The error of a request that needs a capability the client did not declare.
const MISSING_CAPABILITY: i32 = -32021;
/// How long a `requestState` stays valid.
const STATE_TTL_SECS: u64 = 600;

pub(crate) const PROMPT: &str = "test_input_required_result_prompt";

/// The tool definitions (appended to the fixture's list).
pub(crate) fn tools() -> Vec<Value> {
    let no_args = json!({"type": "object", "properties": {}});
    [
        (
            "elicitation",
            "Asks for the user's name (input request `user_name`).",
        ),
        (
            "sampling",
            "Asks the client's LLM a question (input request `capital_question`).",
        ),
        (
            "list_roots",
            "Asks for the client's roots (input request `client_roots`).",
        ),
        (
            "request_state",
            "Asks for a confirmation and checks its signed requestState.",
        ),
        (
            "multiple_inputs",
            "Asks for a name, a sampled greeting and the roots at once.",
        ),
        (
            "multi_round",
            "Asks twice, one question per round, carrying state between rounds.",
        ),
        (
            "tampered_state",
            "Asks for a confirmation; a tampered requestState is an error.",
        ),
        (
            "capabilities",
            "Asks only for what the client declared it can answer.",
        ),
    ]
    .iter()
    .map(|(name, description)| {
        json!({"name": format!("test_input_required_result_{name}"),
               "description": description, "inputSchema": no_args})
    })
    .collect()
}

/// The prompt definition (appended to the fixture's prompt list).
pub(crate) fn prompt() -> Value {
    json!({"name": PROMPT, "description": "Asks for context (input request `user_context`) before rendering."})
}

/// One request for the client.
struct Ask {
    key: &'static str,
    capability: &'static str,
    request: Value,
}

fn elicit(key: &'static str, message: &str, field: &str, kind: &str) -> Ask {
    Ask {
        key,
        capability: "elicitation",
        request: json!({"method": "elicitation/create", "params": {
            "mode": "form", "message": message,
            "requestedSchema": {"type": "object", "properties": {field: {"type": kind}},
                                "required": [field]}}}),
    }
}

fn sample(key: &'static str, text: &str) -> Ask {
    Ask {
        key,
        capability: "sampling",
        request: json!({"method": "sampling/createMessage", "params": {
            "messages": [{"role": "user", "content": {"type": "text", "text": text}}],
            "maxTokens": 50}}),
    }
}

fn roots(key: &'static str) -> Ask {
    Ask {
        key,
        capability: "roots",
        request: json!({"method": "roots/list", "params": {}}),
    }
}

/// What the signed `requestState` carries.
#[derive(Serialize, Deserialize)]
struct State {
    /// The tool (or prompt) it belongs to.
    t: String,
    /// The round it continues.
    r: u8,
    /// Expiry, seconds since the epoch.
    x: u64,
    /// An answer carried from an earlier round.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    a: Option<String>,
}

fn now() -> u64 {
    SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .unwrap_or_default()
        .as_secs()
}

/// Why a request ends in an error.
struct Failure {
    code: i32,
    message: String,
    data: Option<Value>,
}

fn invalid(message: impl Into<String>) -> Failure {
    Failure {
        code: INVALID_PARAMS,
        message: message.into(),
        data: None,
    }
}

/// One request of a multi round-trip tool or prompt, as the client sent it.
struct Round<'a> {
    key: &'a CursorKey,
    target: &'a str,
    modern: &'a Modern,
    responses: Map<String, Value>,
    state: Option<State>,
}

impl<'a> Round<'a> {
    fn read(
        key: &'a CursorKey,
        target: &'a str,
        modern: &'a Modern,
        params: &Map<String, Value>,
    ) -> Result<Round<'a>, Failure> {
        let responses = match params.get("inputResponses") {
            None => Map::new(),
            Some(Value::Object(m)) => m.clone(),
            Some(_) => return Err(invalid("Invalid params: inputResponses must be an object")),
        };
        let state = match params.get("requestState") {
            None => None,
            Some(Value::String(token)) => {
                let state = key
                    .open(token)
                    .and_then(|p| serde_json::from_slice::<State>(&p).ok())
                    .filter(|s| s.t == target && s.x >= now())
                    .ok_or_else(|| {
                        invalid("Invalid requestState: it failed verification (altered, expired or for another request)")
                    })?;
                Some(state)
            }
            Some(_) => return Err(invalid("Invalid params: requestState must be a string")),
        };
        Ok(Round {
            key,
            target,
            modern,
            responses,
            state,
        })
    }

    /// The client's answer to `key`, if it gave a valid one; a malformed answer is an error.
    fn answer(&self, key: &str, capability: &str) -> Result<Option<&Value>, Failure> {
        let Some(v) = self.responses.get(key) else {
            return Ok(None);
        };
        let valid = match capability {
            "elicitation" => v.get("action").is_some_and(Value::is_string),
            "sampling" => v.get("content").is_some(),
            _ => v.get("roots").is_some_and(Value::is_array),
        };
        if valid {
            Ok(Some(v))
        } else {
            Err(invalid(format!(
                "Invalid params: inputResponses.{key} is not a valid {capability} result"
            )))
        }
    }

    /// The round the signed state continues (0 without state).
    fn round(&self) -> u8 {
        self.state.as_ref().map_or(0, |s| s.r)
    }

    /// `input_required` asking `asks`, with a state for round `round` when `round > 0`.
    fn ask(&self, asks: &[Ask], round: u8, carry: Option<String>) -> Result<Value, Failure> {
        let missing: Vec<&str> = asks
            .iter()
            .filter(|a| !self.modern.has(a.capability))
            .map(|a| a.capability)
            .collect();
        if !missing.is_empty() {
            return Err(Failure {
                code: MISSING_CAPABILITY,
                message: format!("Missing required client capability: {}", missing.join(", ")),
                data: Some(json!({"requiredCapabilities": missing
                    .iter()
                    .map(|c| ((*c).to_owned(), json!({})))
                    .collect::<Map<String, Value>>()})),
            });
        }
        let mut requests = Map::new();
        for a in asks {
            requests.insert(a.key.into(), a.request.clone());
        }
        let mut result = json!({"resultType": "input_required", "inputRequests": requests});
        if round > 0 {
            let state = State {
                t: self.target.to_owned(),
                r: round,
                x: now() + STATE_TTL_SECS,
                a: carry,
            };
            let token = self
                .key
                .seal(&serde_json::to_vec(&state).unwrap_or_default());
            result["requestState"] = token.into();
        }
        Ok(result)
    }
}

fn text(t: impl Into<String>) -> Value {
    json!({"content": [{"type": "text", "text": t.into()}]})
}

fn elicited<'v>(answer: &'v Value, field: &str) -> &'v str {
    answer
        .get("content")
        .and_then(|c| c.get(field))
        .and_then(Value::as_str)
        .unwrap_or("(declined)")
}

fn sampled(answer: &Value) -> &str {
    answer
        .get("content")
        .and_then(|c| c.get("text"))
        .and_then(Value::as_str)
        .unwrap_or("")
}

/// Serves `tools/call` or `prompts/get` when it targets a multi round-trip fixture entry.
pub(crate) fn request(
    key: &CursorKey,
    modern: &Modern,
    id: &RawValue,
    method: &str,
    params: Option<&RawValue>,
) -> Option<Bytes> {
    let params: Map<String, Value> = serde_json::from_str(params?.get()).ok()?;
    let name = params.get("name")?.as_str()?;
    let known = match method {
        "tools/call" => name
            .strip_prefix("test_input_required_result_")
            .is_some_and(|t| tools().iter().any(|d| d["name"] == name) && !t.is_empty()),
        "prompts/get" => name == PROMPT,
        _ => false,
    };
    if !known {
        return None;
    }
    let outcome = Round::read(key, name, modern, &params).and_then(|r| run(&r, name));
    Some(match outcome {
        Ok(result) => wire::response(id, &serde_json::to_vec(&result).unwrap_or_default()),
        Err(f) => {
            let mut error = json!({"code": f.code, "message": f.message});
            if let Some(d) = f.data {
                error["data"] = d;
            }
            let msg = json!({"jsonrpc": "2.0", "id": serde_json::from_str::<Value>(id.get()).unwrap_or(Value::Null), "error": error});
            Bytes::from(serde_json::to_vec(&msg).unwrap_or_default())
        }
    })
}

fn run(r: &Round<'_>, name: &str) -> Result<Value, Failure> {
    let tool = name
        .strip_prefix("test_input_required_result_")
        .unwrap_or(name);
    match tool {
        "elicitation" => {
            let ask = elicit("user_name", "What is your name?", "name", "string");
            match r.answer(ask.key, ask.capability)? {
                Some(a) => Ok(text(format!("Hello, {}!", elicited(a, "name")))),
                None => r.ask(&[ask], 0, None),
            }
        }
        "sampling" => {
            let ask = sample("capital_question", "What is the capital of France?");
            match r.answer(ask.key, ask.capability)? {
                Some(a) => Ok(text(format!("The model said: {}", sampled(a)))),
                None => r.ask(&[ask], 0, None),
            }
        }
        "list_roots" => {
            let ask = roots("client_roots");
            match r.answer(ask.key, ask.capability)? {
                Some(a) => {
                    let uris: Vec<&str> = a["roots"]
                        .as_array()
                        .into_iter()
                        .flatten()
                        .filter_map(|root| root.get("uri").and_then(Value::as_str))
                        .collect();
                    Ok(text(format!("Roots: {}", uris.join(", "))))
                }
                None => r.ask(&[ask], 0, None),
            }
        }
        "request_state" | "tampered_state" => {
            let ask = elicit("confirm", "Please confirm", "ok", "boolean");
            match (r.round(), r.answer(ask.key, ask.capability)?) {
                (1, Some(_)) => Ok(text("state-ok: the requestState was verified")),
                _ => r.ask(&[ask], 1, None),
            }
        }
        "multiple_inputs" => {
            let asks = [
                elicit("user_name", "What is your name?", "name", "string"),
                sample("greeting", "Generate a greeting"),
                roots("client_roots"),
            ];
            let mut answered = 0;
            for a in &asks {
                answered += usize::from(r.answer(a.key, a.capability)?.is_some());
            }
            if r.round() == 1 && answered == asks.len() {
                let name = elicited(&r.responses["user_name"], "name");
                let greeting = sampled(&r.responses["greeting"]);
                Ok(text(format!(
                    "{greeting} {name}: all three inputs received"
                )))
            } else {
                r.ask(&asks, 1, None)
            }
        }
        "multi_round" => {
            let step1 = elicit("step1", "Step 1: What is your name?", "name", "string");
            let step2 = elicit(
                "step2",
                "Step 2: What is your favorite color?",
                "color",
                "string",
            );
            match r.round() {
                1 => match r.answer(step1.key, step1.capability)? {
                    Some(a) => r.ask(&[step2], 2, Some(elicited(a, "name").to_owned())),
                    None => r.ask(&[step1], 1, None),
                },
                2 => {
                    let name = r.state.as_ref().and_then(|s| s.a.clone());
                    match r.answer(step2.key, step2.capability)? {
                        Some(a) => Ok(text(format!(
                            "{} likes {}",
                            name.as_deref().unwrap_or("(unknown)"),
                            elicited(a, "color")
                        ))),
                        None => r.ask(&[step2], 2, name),
                    }
                }
                _ => r.ask(&[step1], 1, None),
            }
        }
        "capabilities" => {
            let wanted = [
                elicit("user_name", "What is your name?", "name", "string"),
                sample("greeting", "Generate a greeting"),
                roots("client_roots"),
            ];
            let asks: Vec<Ask> = wanted
                .into_iter()
                .filter(|a| r.modern.has(a.capability))
                .collect();
            if asks.is_empty() {
                return Ok(text("The client declared no capability to ask with"));
            }
            let mut answered = 0;
            for a in &asks {
                answered += usize::from(r.answer(a.key, a.capability)?.is_some());
            }
            if answered == asks.len() {
                Ok(text(format!("{answered} input(s) received")))
            } else {
                r.ask(&asks, 0, None)
            }
        }
        _ => {
            // The prompt.
            let ask = elicit(
                "user_context",
                "What context should the prompt use?",
                "context",
                "string",
            );
            match r.answer(ask.key, ask.capability)? {
                Some(a) => Ok(json!({
                    "description": "A prompt rendered with the context the user gave.",
                    "messages": [{"role": "user", "content": {"type": "text",
                        "text": format!("Context: {}", elicited(a, "context"))}}]})),
                None => r.ask(&[ask], 0, None),
            }
        }
    }
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used)]
    use super::*;

    fn call(key: &CursorKey, caps: Value, params: Value) -> Value {
        let modern = Modern {
            capabilities: caps,
            log_level: None,
        };
        let id = RawValue::from_string("7".into()).unwrap();
        let p = RawValue::from_string(params.to_string()).unwrap();
        let out = request(key, &modern, &id, "tools/call", Some(&p)).unwrap();
        serde_json::from_slice(&out).unwrap()
    }

    #[test]
    fn multi_round_carries_signed_state_and_refuses_tampering() {
        let key = CursorKey::random();
        let caps = json!({"elicitation": {}});
        let tool = "test_input_required_result_multi_round";
        let r1 = call(&key, caps.clone(), json!({"name": tool}));
        assert_eq!(r1["result"]["resultType"], "input_required");
        assert!(r1["result"]["inputRequests"]["step1"].is_object(), "{r1}");
        let s1 = r1["result"]["requestState"].as_str().unwrap().to_owned();
        let answer = |field: &str, v: &str| json!({"action": "accept", "content": {field: v}});
        let r2 = call(
            &key,
            caps.clone(),
            json!({"name": tool, "requestState": s1, "inputResponses": {"step1": answer("name", "Ada")}}),
        );
        let s2 = r2["result"]["requestState"].as_str().unwrap().to_owned();
        assert_ne!(s1, s2);
        assert!(r2["result"]["inputRequests"]["step2"].is_object(), "{r2}");
        let tampered = call(
            &key,
            caps.clone(),
            json!({"name": tool, "requestState": format!("{s2}x"), "inputResponses": {}}),
        );
        assert_eq!(tampered["error"]["code"], INVALID_PARAMS, "{tampered}");
        let other_tool = call(
            &key,
            caps.clone(),
            json!({"name": "test_input_required_result_request_state", "requestState": s2}),
        );
        assert_eq!(other_tool["error"]["code"], INVALID_PARAMS, "{other_tool}");
        let done = call(
            &key,
            caps,
            json!({"name": tool, "requestState": s2, "inputResponses": {"step2": answer("color", "blue")}}),
        );
        assert_eq!(
            done["result"]["content"][0]["text"], "Ada likes blue",
            "{done}"
        );
    }

    #[test]
    fn questions_follow_the_declared_capabilities() {
        let key = CursorKey::random();
        let none = call(
            &key,
            json!({}),
            json!({"name": "test_input_required_result_sampling"}),
        );
        assert_eq!(none["error"]["code"], MISSING_CAPABILITY, "{none}");
        assert!(none["error"]["data"]["requiredCapabilities"]["sampling"].is_object());
        let some = call(
            &key,
            json!({"sampling": {}}),
            json!({"name": "test_input_required_result_capabilities"}),
        );
        let asked: Vec<&String> = some["result"]["inputRequests"]
            .as_object()
            .unwrap()
            .keys()
            .collect();
        assert_eq!(asked, ["greeting"], "{some}");
        let bad = call(
            &key,
            json!({"elicitation": {}}),
            json!({"name": "test_input_required_result_elicitation", "inputResponses": {"user_name": 5}}),
        );
        assert_eq!(bad["error"]["code"], INVALID_PARAMS, "{bad}");
    }
}
