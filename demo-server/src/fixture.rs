//! The conformance fixture's catalog: the prompts, resources, resource template and completions
//! the official MCP conformance suite's server scenarios ask for, and the requests serving them
//! (`prompts/get`, `resources/read`, `resources/subscribe`/`unsubscribe`, `completion/complete`).

use std::borrow::Cow;
use std::collections::HashMap;

use bytes::Bytes;
use serde::Deserialize;
use serde_json::value::RawValue;
use serde_json::{Value, json};

use super::catalog::invalid_params;
use super::peer::Peer;
use super::wire::{self, INVALID_PARAMS, RESOURCE_NOT_FOUND};

/// A 1x1 PNG (one red pixel), base64.
pub(crate) const PNG_BASE64: &str =
    "iVBORw0KGgoAAAANSUhEUgAAAAEAAAABCAIAAACQd1PeAAAADElEQVR42mP4z8AAAAMBAQD3A0FDAAAAAElFTkSuQmCC";
/// A WAV of 8 silent 8-bit mono samples at 8 kHz, base64.
pub(crate) const WAV_BASE64: &str =
    "UklGRiwAAABXQVZFZm10IBAAAAABAAEAQB8AAEAfAAABAAgAZGF0YQgAAACAgICAgICAgA==";

pub(crate) const CAPABILITIES: &[u8] = br#"{"tools":{"listChanged":false},"prompts":{"listChanged":false},"resources":{"subscribe":true,"listChanged":false},"logging":{},"completions":{}}"#;
pub(crate) const INSTRUCTIONS: &str = "Switchyard conformance fixture: the tools, prompts and \
    resources the MCP conformance suite's server scenarios call.";

const STATIC_TEXT: &str = "This is the content of the static text resource.";
const WATCHED_TEXT: &str = "This is the content of the watched resource.";
const TEMPLATE_PREFIX: &str = "test://template/";
const TEMPLATE_SUFFIX: &str = "/data";
const TEMPLATE: &str = "test://template/{id}/data";

/// Candidate values offered by `completion/complete` (filtered by the typed prefix).
const WORDS: [&str; 5] = ["hello", "help", "test", "testing", "world"];
const RESOURCE_URIS: [&str; 4] = [
    "test://static-text",
    "test://static-binary",
    "test://watched-resource",
    "test://example-resource",
];
const TEMPLATE_IDS: [&str; 4] = ["1", "2", "42", "123"];

pub(crate) fn prompts_list(stateless: bool) -> Vec<u8> {
    let arg = |name: &str, description: &str| json!({"name": name, "description": description, "required": true});
    let mut prompts = json!({"prompts": [
        {"name": "test_simple_prompt", "description": "A simple prompt without arguments."},
        {"name": "test_prompt_with_arguments",
         "description": "A prompt that substitutes two arguments.",
         "arguments": [arg("arg1", "First test argument"), arg("arg2", "Second test argument")]},
        {"name": "test_prompt_with_embedded_resource",
         "description": "A prompt that embeds a resource.",
         "arguments": [arg("resourceUri", "URI of the resource to embed")]},
        {"name": "test_prompt_with_image", "description": "A prompt that includes an image."}
    ]});
    if stateless && let Some(list) = prompts["prompts"].as_array_mut() {
        list.push(super::fixture_mrtr::prompt());
    }
    encode(&prompts)
}

pub(crate) fn resources_list() -> Vec<u8> {
    encode(&json!({"resources": [
        {"uri": "test://static-text", "name": "static-text", "title": "Static text",
         "description": "A static text resource.", "mimeType": "text/plain"},
        {"uri": "test://static-binary", "name": "static-binary", "title": "Static binary",
         "description": "A static binary resource (a 1x1 PNG).", "mimeType": "image/png"},
        {"uri": "test://watched-resource", "name": "watched-resource", "title": "Watched",
         "description": "A resource clients may subscribe to.", "mimeType": "text/plain"}
    ]}))
}

pub(crate) fn templates_list() -> Vec<u8> {
    encode(&json!({"resourceTemplates": [
        {"uriTemplate": TEMPLATE, "name": "template-data", "title": "Template data",
         "description": "JSON data for the given id.", "mimeType": "application/json"}
    ]}))
}

pub(crate) fn encode(v: &Value) -> Vec<u8> {
    serde_json::to_vec(v).expect("a serde_json::Value always serializes")
}

/// Answers the requests only the fixture serves; `None` for every other method.
pub(crate) fn request(
    peer: &Peer,
    id: &RawValue,
    method: &str,
    params: Option<&RawValue>,
) -> Option<Bytes> {
    let handler: fn(&Peer, &RawValue, &RawValue) -> Bytes = match method {
        "prompts/get" => |_, id, p| get_prompt(id, p),
        "resources/read" => |_, id, p| read_resource(id, p),
        "resources/subscribe" => subscribe,
        "resources/unsubscribe" => unsubscribe,
        "completion/complete" => |_, id, p| complete(id, p),
        _ => return None,
    };
    Some(match params {
        Some(p) => handler(peer, id, p),
        None => {
            let msg = format!("Invalid params for {method}: params object is required");
            wire::error(Some(id), INVALID_PARAMS, &msg)
        }
    })
}

#[derive(Deserialize)]
struct GetPromptParams<'a> {
    #[serde(borrow)]
    name: Cow<'a, str>,
    #[serde(default)]
    arguments: Option<HashMap<String, String>>,
}

fn get_prompt(id: &RawValue, params: &RawValue) -> Bytes {
    let p: GetPromptParams<'_> = match serde_json::from_str(params.get()) {
        Ok(p) => p,
        Err(e) => return invalid_params(id, "prompts/get", &e),
    };
    let args = p.arguments.unwrap_or_default();
    let arg = |name: &str| {
        args.get(name).map(String::as_str).ok_or_else(|| {
            let msg = format!("Missing required argument `{name}` for prompt {}", p.name);
            wire::error(Some(id), INVALID_PARAMS, &msg)
        })
    };
    let text = |t: &str| json!({"role": "user", "content": {"type": "text", "text": t}});
    let result = match &*p.name {
        "test_simple_prompt" => json!({
            "description": "A simple prompt without arguments.",
            "messages": [text("This is a simple prompt for testing.")]
        }),
        "test_prompt_with_arguments" => {
            let (a1, a2) = match (arg("arg1"), arg("arg2")) {
                (Ok(a1), Ok(a2)) => (a1, a2),
                (Err(e), _) | (_, Err(e)) => return e,
            };
            json!({
                "description": "A prompt that substitutes two arguments.",
                "messages": [text(&format!("Prompt with arguments: arg1='{a1}', arg2='{a2}'"))]
            })
        }
        "test_prompt_with_embedded_resource" => {
            let uri = match arg("resourceUri") {
                Ok(u) => u,
                Err(e) => return e,
            };
            json!({
                "description": "A prompt that embeds a resource.",
                "messages": [
                    {"role": "user", "content": {"type": "resource", "resource": {
                        "uri": uri, "mimeType": "text/plain",
                        "text": "Embedded resource content for testing."}}},
                    text("Please process the embedded resource above.")
                ]
            })
        }
        "test_prompt_with_image" => json!({
            "description": "A prompt that includes an image.",
            "messages": [
                {"role": "user", "content": {"type": "image", "data": PNG_BASE64,
                                             "mimeType": "image/png"}},
                text("Please analyze the image above.")
            ]
        }),
        other => {
            let msg = format!("Unknown prompt: {other}");
            return wire::error(Some(id), INVALID_PARAMS, &msg);
        }
    };
    wire::response(id, &encode(&result))
}

#[derive(Deserialize)]
struct UriParams<'a> {
    #[serde(borrow)]
    uri: Cow<'a, str>,
}

/// The `{id}` of a URI matching the resource template.
fn template_id(uri: &str) -> Option<&str> {
    let id = uri
        .strip_prefix(TEMPLATE_PREFIX)?
        .strip_suffix(TEMPLATE_SUFFIX)?;
    (!id.is_empty() && !id.contains('/')).then_some(id)
}

/// The `contents` entry of a readable resource.
fn contents(uri: &str) -> Option<Value> {
    Some(match uri {
        "test://static-text" => json!({"uri": uri, "mimeType": "text/plain", "text": STATIC_TEXT}),
        "test://static-binary" => json!({"uri": uri, "mimeType": "image/png", "blob": PNG_BASE64}),
        "test://watched-resource" => {
            json!({"uri": uri, "mimeType": "text/plain", "text": WATCHED_TEXT})
        }
        _ => {
            let id = template_id(uri)?;
            let data =
                json!({"id": id, "templateTest": true, "data": format!("Data for ID: {id}")});
            json!({"uri": uri, "mimeType": "application/json", "text": data.to_string()})
        }
    })
}

fn uri_of<'a>(id: &RawValue, method: &str, params: &'a RawValue) -> Result<UriParams<'a>, Bytes> {
    serde_json::from_str(params.get()).map_err(|e| invalid_params(id, method, &e))
}

fn not_found(id: &RawValue, uri: &str) -> Bytes {
    wire::error(
        Some(id),
        RESOURCE_NOT_FOUND,
        &format!("Resource not found: {uri}"),
    )
}

fn read_resource(id: &RawValue, params: &RawValue) -> Bytes {
    let p = match uri_of(id, "resources/read", params) {
        Ok(p) => p,
        Err(e) => return e,
    };
    match contents(&p.uri) {
        Some(c) => wire::response(id, &encode(&json!({"contents": [c]}))),
        None => not_found(id, &p.uri),
    }
}

fn subscribe(peer: &Peer, id: &RawValue, params: &RawValue) -> Bytes {
    let p = match uri_of(id, "resources/subscribe", params) {
        Ok(p) => p,
        Err(e) => return e,
    };
    if contents(&p.uri).is_none() {
        return not_found(id, &p.uri);
    }
    peer.subscribe(&p.uri);
    wire::response(id, b"{}")
}

fn unsubscribe(peer: &Peer, id: &RawValue, params: &RawValue) -> Bytes {
    match uri_of(id, "resources/unsubscribe", params) {
        Ok(p) => {
            peer.unsubscribe(&p.uri);
            wire::response(id, b"{}")
        }
        Err(e) => e,
    }
}

#[derive(Deserialize)]
struct CompleteParams<'a> {
    #[serde(rename = "ref", borrow)]
    reference: Reference<'a>,
    #[serde(borrow)]
    argument: Argument<'a>,
}

#[derive(Deserialize)]
#[serde(tag = "type")]
enum Reference<'a> {
    #[serde(rename = "ref/prompt")]
    Prompt {
        #[serde(borrow)]
        name: Cow<'a, str>,
    },
    #[serde(rename = "ref/resource")]
    Resource {
        #[serde(borrow)]
        uri: Cow<'a, str>,
    },
}

#[derive(Deserialize)]
struct Argument<'a> {
    #[serde(borrow)]
    name: Cow<'a, str>,
    #[serde(borrow)]
    value: Cow<'a, str>,
}

fn complete(id: &RawValue, params: &RawValue) -> Bytes {
    let p: CompleteParams<'_> = match serde_json::from_str(params.get()) {
        Ok(p) => p,
        Err(e) => return invalid_params(id, "completion/complete", &e),
    };
    let candidates: &[&str] = match (&p.reference, &*p.argument.name) {
        (Reference::Prompt { name }, arg) => match (&**name, arg) {
            ("test_prompt_with_arguments", "arg1" | "arg2") => &WORDS,
            ("test_prompt_with_embedded_resource", "resourceUri") => &RESOURCE_URIS,
            ("test_prompt_with_arguments" | "test_prompt_with_embedded_resource", _)
            | ("test_simple_prompt" | "test_prompt_with_image", _) => &[],
            (other, _) => {
                let msg = format!("Unknown prompt: {other}");
                return wire::error(Some(id), INVALID_PARAMS, &msg);
            }
        },
        (Reference::Resource { uri }, arg) if uri == TEMPLATE => match arg {
            "id" => &TEMPLATE_IDS,
            _ => &[],
        },
        (Reference::Resource { uri }, _) => {
            let msg = format!("Unknown resource template: {uri}");
            return wire::error(Some(id), INVALID_PARAMS, &msg);
        }
    };
    let values: Vec<&str> = candidates
        .iter()
        .copied()
        .filter(|c| c.starts_with(&*p.argument.value))
        .collect();
    let result = json!({"completion": {"values": values, "total": values.len(), "hasMore": false}});
    wire::response(id, &encode(&result))
}
