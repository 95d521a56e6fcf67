//! The demo's static prompts and resources: list results and `prompts/get` / `resources/read`.

use std::borrow::Cow;
use std::collections::HashMap;

use serde::Deserialize;
use serde_json::value::RawValue;

use super::wire::{self, INVALID_PARAMS, RESOURCE_NOT_FOUND};

pub(crate) const PROMPTS_LIST: &[u8] = br#"{"prompts":[{"name":"greeting","title":"Greeting","description":"Greets someone by name.","arguments":[{"name":"name","description":"Who to greet.","required":true}]}]}"#;

pub(crate) const RESOURCES_LIST: &[u8] = br#"{"resources":[{"uri":"demo://readme","name":"readme","title":"Demo README","description":"What the demo upstream offers.","mimeType":"text/plain"}]}"#;

pub(crate) const TEMPLATES_LIST: &[u8] = br#"{"resourceTemplates":[]}"#;

pub(crate) const README_URI: &str = "demo://readme";

pub(crate) const README_TEXT: &str = "Switchyard demo upstream\n\
\n\
A small MCP server shipped with Switchyard (switchyard-demo-server), used by the README demo and by tests.\n\
Tools: echo {message}, add {a, b}, sleep {ms, steps?} (progress + cancellation).\n\
Prompt: greeting {name}. Resource: demo://readme (this text).\n";

#[derive(Deserialize)]
struct GetPromptParams<'a> {
    #[serde(borrow)]
    name: Cow<'a, str>,
    #[serde(default, borrow)]
    arguments: Option<HashMap<Cow<'a, str>, Cow<'a, str>>>,
}

#[derive(Deserialize)]
struct ReadResourceParams<'a> {
    #[serde(borrow)]
    uri: Cow<'a, str>,
}

/// Answers `prompts/get`.
pub(crate) fn get_prompt(id: &RawValue, params: &RawValue) -> bytes::Bytes {
    let p: GetPromptParams<'_> = match serde_json::from_str(params.get()) {
        Ok(p) => p,
        Err(e) => return invalid_params(id, "prompts/get", &e),
    };
    if p.name != "greeting" {
        let msg = format!("Unknown prompt: {}", p.name);
        return wire::error(Some(id), INVALID_PARAMS, &msg);
    }
    let Some(name) = p.arguments.as_ref().and_then(|a| a.get("name")) else {
        let msg = "Missing required argument `name` for prompt greeting";
        return wire::error(Some(id), INVALID_PARAMS, msg);
    };
    let text = format!("Hello, {name}!");
    wire::response_with(id, text.len() + 96, |buf| {
        buf.extend_from_slice(
            br#"{"description":"Greets someone by name.","messages":[{"role":"user","content":{"type":"text","text":"#,
        );
        wire::push_str(buf, &text);
        buf.extend_from_slice(b"}}]}");
    })
}

/// Answers `resources/read`.
pub(crate) fn read_resource(id: &RawValue, params: &RawValue) -> bytes::Bytes {
    let p: ReadResourceParams<'_> = match serde_json::from_str(params.get()) {
        Ok(p) => p,
        Err(e) => return invalid_params(id, "resources/read", &e),
    };
    if p.uri != README_URI {
        let msg = format!("Resource not found: {}", p.uri);
        return wire::error(Some(id), RESOURCE_NOT_FOUND, &msg);
    }
    wire::response_with(id, README_TEXT.len() + 80, |buf| {
        buf.extend_from_slice(
            br#"{"contents":[{"uri":"demo://readme","mimeType":"text/plain","text":"#,
        );
        wire::push_str(buf, README_TEXT);
        buf.extend_from_slice(b"}]}");
    })
}

pub(crate) fn invalid_params(id: &RawValue, method: &str, e: &serde_json::Error) -> bytes::Bytes {
    let msg = format!("Invalid params for {method}: {}", wire::serde_message(e));
    wire::error(Some(id), INVALID_PARAMS, &msg)
}
