//! Parsing one JSON-RPC message into a borrowed envelope without touching its payload.

use std::borrow::Cow;

use serde::Deserialize;
use serde_json::value::RawValue;

use super::is_valid_id;
use super::scan;
use super::strict::{self, Ambiguity};

/// One parsed JSON-RPC message borrowing from the input buffer.
#[derive(Debug)]
pub enum Message<'a> {
    Request(Request<'a>),
    Notification(Notification<'a>),
    Response(Response<'a>),
}

#[derive(Debug)]
pub struct Request<'a> {
    pub id: &'a RawValue,
    pub method: Cow<'a, str>,
    pub params: Option<&'a RawValue>,
}

#[derive(Debug)]
pub struct Notification<'a> {
    pub method: Cow<'a, str>,
    pub params: Option<&'a RawValue>,
}

#[derive(Debug)]
pub struct Response<'a> {
    pub id: &'a RawValue,
    pub outcome: Outcome<'a>,
}

/// The `result` or `error` member of a response, raw.
#[derive(Debug, Clone, Copy)]
pub enum Outcome<'a> {
    Result(&'a RawValue),
    Error(&'a RawValue),
}

/// Why a message could not be parsed. `InvalidRequest` keeps the id when one was readable so
/// the error response can carry it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum ParseError {
    /// Not JSON at all (JSON-RPC -32700).
    NotJson(String),
    /// A JSON array: a batch.
    Batch,
    /// JSON, but not a valid JSON-RPC 2.0 message (-32600).
    InvalidRequest {
        reason: Cow<'static, str>,
        id: Option<String>,
    },
    /// A JSON-RPC message that parsers would read differently (duplicate member names), refused
    /// whole (-32600). `id` when the envelope was readable; `response` when it was an answer.
    Ambiguous {
        ambiguity: Ambiguity,
        id: Option<String>,
        response: bool,
    },
}

impl ParseError {
    /// The id of the message, when it could be read.
    pub fn id(&self) -> Option<&str> {
        match self {
            ParseError::InvalidRequest { id, .. } | ParseError::Ambiguous { id, .. } => {
                id.as_deref()
            }
            ParseError::NotJson(_) | ParseError::Batch => None,
        }
    }
}

/// A message's envelope members, as serde's reader or [`scan`] found them.
#[derive(Deserialize)]
pub(super) struct Envelope<'a> {
    #[serde(borrow, default)]
    pub(super) jsonrpc: Option<Cow<'a, str>>,
    #[serde(borrow, default, deserialize_with = "present")]
    pub(super) id: Option<&'a RawValue>,
    #[serde(borrow, default)]
    pub(super) method: Option<Cow<'a, str>>,
    #[serde(borrow, default, deserialize_with = "present")]
    pub(super) params: Option<&'a RawValue>,
    #[serde(borrow, default, deserialize_with = "present")]
    pub(super) result: Option<&'a RawValue>,
    #[serde(borrow, default, deserialize_with = "present")]
    pub(super) error: Option<&'a RawValue>,
}

/// Keeps a member that is present, even when it is `null` (plain `Option` would erase it).
fn present<'de, D>(d: D) -> Result<Option<&'de RawValue>, D::Error>
where
    D: serde::Deserializer<'de>,
{
    <&RawValue>::deserialize(d).map(Some)
}

/// Parses one JSON-RPC 2.0 message. Leading/trailing whitespace is allowed.
pub fn parse(input: &[u8]) -> Result<Message<'_>, ParseError> {
    let first = input.iter().find(|b| !b.is_ascii_whitespace());
    match first {
        Some(b'[') => return Err(ParseError::Batch),
        Some(b'{') => {}
        Some(_) | None => {
            // Let serde produce the precise message for non-objects and garbage.
            return match serde_json::from_slice::<&RawValue>(input) {
                Err(e) => Err(ParseError::NotJson(e.to_string())),
                Ok(_) => Err(ParseError::InvalidRequest {
                    reason: "a JSON-RPC message must be a JSON object".into(),
                    id: None,
                }),
            };
        }
    }
    let text = std::str::from_utf8(input).ok();
    // An ordinary message is read, checked and split in one pass.
    if let Some(env) = text.and_then(scan::envelope) {
        return envelope_message(env);
    }
    read_object(input, text)
}

/// The full reader of a message that starts with `{`: serde's reader of the envelope, then
/// [`strict::check`] of the whole text; precise about whatever is wrong. `text` is `input` when
/// it is UTF-8.
pub(super) fn read_object<'a>(
    input: &'a [u8],
    text: Option<&'a str>,
) -> Result<Message<'a>, ParseError> {
    // Text known to be UTF-8 is read without checking each string and raw member again.
    let read = match text {
        Some(text) => serde_json::from_str(text),
        None => serde_json::from_slice(input),
    };
    let env: Envelope<'_> = match read {
        Ok(env) => env,
        Err(e) if e.is_syntax() || e.is_eof() => return Err(ParseError::NotJson(e.to_string())),
        Err(_) => {
            // serde reports a duplicated envelope member as a type error: name it.
            return Err(match strict::check(input) {
                Err(ambiguity) => ParseError::Ambiguous {
                    ambiguity,
                    id: None,
                    response: false,
                },
                Ok(()) => ParseError::InvalidRequest {
                    reason: "members have the wrong JSON types".into(),
                    id: None,
                },
            });
        }
    };
    // The id's text, for errors only: a valid message allocates nothing for it.
    let id_text = || env.id.map(|id| id.get().to_owned());
    if let Err(ambiguity) = strict::check(input) {
        return Err(ParseError::Ambiguous {
            ambiguity,
            id: id_text(),
            response: env.method.is_none(),
        });
    }
    envelope_message(env)
}

/// The message an envelope with unique member names holds, or why it is not a valid one.
pub(super) fn envelope_message(env: Envelope<'_>) -> Result<Message<'_>, ParseError> {
    // The id's text, for errors only: a valid message allocates nothing for it.
    let id_text = || env.id.map(|id| id.get().to_owned());
    let invalid = |reason: &'static str| ParseError::InvalidRequest {
        reason: reason.into(),
        id: id_text(),
    };
    if env.jsonrpc.as_deref() != Some("2.0") {
        return Err(invalid("`jsonrpc` must be \"2.0\""));
    }
    if let Some(params) = env.params {
        let b = params.get().as_bytes().first();
        if !matches!(b, Some(b'{' | b'[')) {
            return Err(invalid("`params` must be an object or an array"));
        }
    }
    match (env.method, env.id, env.result, env.error) {
        (Some(method), Some(id), None, None) => {
            if !is_valid_id(id) {
                return Err(invalid("`id` must be a string or an integer"));
            }
            Ok(Message::Request(Request {
                id,
                method,
                params: env.params,
            }))
        }
        (Some(method), None, None, None) => Ok(Message::Notification(Notification {
            method,
            params: env.params,
        })),
        (None, Some(id), Some(result), None) => Ok(Message::Response(Response {
            id,
            outcome: Outcome::Result(result),
        })),
        (None, Some(id), None, Some(error)) => {
            if !error.get().starts_with('{') {
                return Err(invalid("`error` must be an object"));
            }
            Ok(Message::Response(Response {
                id,
                outcome: Outcome::Error(error),
            }))
        }
        (Some(_), _, _, _) => Err(invalid("a request must not carry `result` or `error`")),
        (None, _, Some(_), Some(_)) => {
            Err(invalid("a response carries `result` or `error`, not both"))
        }
        (None, None, _, _) => Err(invalid("a message needs `method` or `id`")),
        (None, Some(_), None, None) => Err(invalid("a response needs `result` or `error`")),
    }
}

/// Whether `input` is a JSON-RPC batch (a JSON array), judged by its first non-blank byte.
pub fn is_batch(input: &[u8]) -> bool {
    input.iter().find(|b| !b.is_ascii_whitespace()) == Some(&b'[')
}

/// The members of a batch, raw and borrowed from `input`, each to be parsed with [`parse`].
/// An empty array is not a valid batch (JSON-RPC 2.0).
pub fn split_batch(input: &[u8]) -> Result<Vec<&RawValue>, ParseError> {
    let members: Vec<&RawValue> = match serde_json::from_slice(input) {
        Ok(m) => m,
        Err(e) if e.is_syntax() || e.is_eof() => return Err(ParseError::NotJson(e.to_string())),
        Err(_) => {
            return Err(ParseError::InvalidRequest {
                reason: "a batch must be a JSON array".into(),
                id: None,
            });
        }
    };
    if members.is_empty() {
        return Err(ParseError::InvalidRequest {
            reason: "a batch must hold at least one message".into(),
            id: None,
        });
    }
    Ok(members)
}

impl Message<'_> {
    /// The method name of a request or notification.
    pub fn method(&self) -> Option<&str> {
        match self {
            Message::Request(r) => Some(&r.method),
            Message::Notification(n) => Some(&n.method),
            Message::Response(_) => None,
        }
    }
}
