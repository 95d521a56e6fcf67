//! The demo's static prompts and resources: list results and `prompts/get` /
//! `resources/read` / `resources/metadata` (SEP-2093: resources say their `resourceType`; the
//! collection `demo://docs/` reads as its documents).

use std::borrow::Cow;
use std::collections::HashMap;

use serde::Deserialize;
use serde_json::value::RawValue;
use serde_json::{Value, json};

use super::wire::{self, INVALID_PARAMS, RESOURCE_NOT_FOUND};

pub(crate) const PROMPTS_LIST: &[u8] = br#"{"prompts":[{"name":"greeting","title":"Greeting","description":"Greets someone by name.","arguments":[{"name":"name","description":"Who to greet.","required":true}]}]}"#;

pub(crate) const RESOURCES_LIST: &[u8] = br#"{"resources":[{"uri":"demo://readme","name":"readme","title":"Demo README","description":"What the demo upstream offers.","mimeType":"text/plain","resourceType":"document"},{"uri":"demo://docs/","name":"docs","title":"Demo docs","description":"One page per tool; reading the collection returns them all.","resourceType":"collection"}]}"#;

pub(crate) const TEMPLATES_LIST: &[u8] = br#"{"resourceTemplates":[]}"#;

pub(crate) const README_URI: &str = "demo://readme";

pub(crate) const README_TEXT: &str = "Switchyard demo upstream\n\
\n\
A small MCP server shipped with Switchyard (switchyard-demo-server), used by the README demo and by tests.\n\
Tools: echo {message}, add {a, b}, sleep {ms, steps?} (progress + cancellation).\n\
Prompt: greeting {name}. Resources: demo://readme (this text), demo://docs/ (a collection).\n";

/// The collection's URI and its documents (URI, name, text).
pub(crate) const DOCS_URI: &str = "demo://docs/";
const DOCS: [(&str, &str, &str); 2] = [
    (
        "demo://docs/echo",
        "echo",
        "echo {message} answers with the message.",
    ),
    ("demo://docs/add", "add", "add {a, b} answers with the sum."),
];

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
    if p.uri == DOCS_URI {
        let contents: Vec<Value> = DOCS
            .iter()
            .map(|(uri, name, text)| {
                let mut doc = document(uri, name);
                doc["text"] = (*text).into();
                doc
            })
            .collect();
        return wire::response(id, json!({ "contents": contents }).to_string().as_bytes());
    }
    if let Some((uri, name, text)) = DOCS.iter().find(|(uri, ..)| *uri == p.uri) {
        let mut doc = document(uri, name);
        doc["text"] = (*text).into();
        return wire::response(id, json!({ "contents": [doc] }).to_string().as_bytes());
    }
    if p.uri != README_URI {
        let msg = format!("Resource not found: {}", p.uri);
        return wire::error(Some(id), RESOURCE_NOT_FOUND, &msg);
    }
    wire::response_with(id, README_TEXT.len() + 120, |buf| {
        buf.extend_from_slice(
            br#"{"contents":[{"uri":"demo://readme","name":"readme","mimeType":"text/plain","resourceType":"document","text":"#,
        );
        wire::push_str(buf, README_TEXT);
        buf.extend_from_slice(b"}]}");
    })
}

/// Answers `resources/metadata` (SEP-2093): a resource's `Resource` without its contents.
pub(crate) fn resource_metadata(id: &RawValue, params: &RawValue) -> bytes::Bytes {
    let p: ReadResourceParams<'_> = match serde_json::from_str(params.get()) {
        Ok(p) => p,
        Err(e) => return invalid_params(id, "resources/metadata", &e),
    };
    let resource = if p.uri == README_URI {
        let mut r = document(README_URI, "readme");
        r["title"] = "Demo README".into();
        r["size"] = README_TEXT.len().into();
        r
    } else if p.uri == DOCS_URI {
        json!({"uri": DOCS_URI, "name": "docs", "title": "Demo docs", "resourceType": "collection"})
    } else if let Some((uri, name, text)) = DOCS.iter().find(|(uri, ..)| *uri == p.uri) {
        let mut r = document(uri, name);
        r["size"] = text.len().into();
        r
    } else {
        let msg = format!("Resource not found: {}", p.uri);
        return wire::error(Some(id), RESOURCE_NOT_FOUND, &msg);
    };
    wire::response(id, json!({ "resource": resource }).to_string().as_bytes())
}

/// A text document's metadata.
fn document(uri: &str, name: &str) -> Value {
    json!({"uri": uri, "name": name, "mimeType": "text/plain", "resourceType": "document"})
}

pub(crate) fn invalid_params(id: &RawValue, method: &str, e: &serde_json::Error) -> bytes::Bytes {
    let msg = format!("Invalid params for {method}: {}", wire::serde_message(e));
    wire::error(Some(id), INVALID_PARAMS, &msg)
}
