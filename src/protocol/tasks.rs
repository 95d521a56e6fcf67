//! Tasks without IO: the 2026-07-28 tasks extension (SEP-2663, `io.modelcontextprotocol/tasks`)
//! and the 2025-11-25 `tasks` utility — their methods, whether a client declared the
//! extension, how upstreams' offers merge — and the one edit the gateway makes to task
//! messages: the task id of a result (`taskId` at its top, in its `task`, or in its
//! `related-task` `_meta`) or in the params of a task method, every other byte copied as it is.

use serde_json::value::RawValue;
use serde_json::{Map, Value};

use crate::jsonrpc::{self, Message, Outcome, RawObject};

/// The extension's identifier, under `capabilities.extensions`.
pub const EXTENSION: &str = "io.modelcontextprotocol/tasks";

/// The `_meta` key relating a message to a task (2025-11-25).
pub const RELATED_TASK: &str = "io.modelcontextprotocol/related-task";

/// The methods addressing one task by its `taskId`, in either revision.
pub fn is_task_method(method: &str) -> bool {
    matches!(method, "tasks/get" | "tasks/update" | "tasks/cancel")
}

/// The 2025-11-25 methods the 2026-07-28 extension removed (session-based clients only).
pub fn is_session_task_method(method: &str) -> bool {
    matches!(method, "tasks/result" | "tasks/list")
}

/// Merges the 2025-11-25 `tasks` capability of upstream capabilities `caps` into `out`: each
/// operation (`list`, `cancel`, `requests.tools.call`) offered when one upstream offers it
/// (the gateway routes each task to its owner; a client's task-augmented call to an upstream
/// without tasks is processed normally there, as the revision says).
pub fn merge_session_tasks(caps: &Map<String, Value>, out: &mut Map<String, Value>) {
    let Some(Value::Object(offer)) = caps.get("tasks") else {
        return;
    };
    let entry = out
        .entry("tasks")
        .or_insert_with(|| Value::Object(Map::new()));
    let Value::Object(merged) = entry else {
        return;
    };
    for op in ["list", "cancel"] {
        if offer.get(op).is_some_and(Value::is_object) {
            merged
                .entry(op)
                .or_insert_with(|| Value::Object(Map::new()));
        }
    }
    if offer
        .get("requests")
        .and_then(|r| r.get("tools"))
        .and_then(|t| t.get("call"))
        .is_some_and(Value::is_object)
    {
        let requests = merged
            .entry("requests")
            .or_insert_with(|| serde_json::json!({}));
        if let Value::Object(r) = requests {
            r.insert("tools".into(), serde_json::json!({ "call": {} }));
        }
    }
}

/// Whether upstream capabilities offer the extension (any value, `null` too).
pub fn offers_extension(caps: &Value) -> bool {
    caps.get("extensions")
        .and_then(|e| e.get(EXTENSION))
        .is_some()
}

/// Whether upstream capabilities offer tasks on `tools/call` (either revision).
pub fn offers_tool_tasks(caps: &Value) -> bool {
    offers_extension(caps)
        || caps
            .get("tasks")
            .and_then(|t| t.get("requests"))
            .and_then(|r| r.get("tools"))
            .and_then(|t| t.get("call"))
            .is_some()
}

/// Whether `capabilities` (a client's) declare the extension.
pub fn declares_extension(capabilities: &Value) -> bool {
    capabilities
        .get("extensions")
        .and_then(|e| e.get(EXTENSION))
        .is_some_and(|v| !v.is_null())
}

/// Whether a request's own `_meta` client capabilities (2026-07-28) declare the extension:
/// `None` when the request carries none (a session's client: its session says).
pub fn request_declares(params: Option<&RawValue>) -> Option<bool> {
    let params = RawObject::parse(params?).ok()?;
    let meta = RawObject::parse(params.get("_meta")?).ok()?;
    let caps = meta.get(super::modern::meta::CLIENT_CAPABILITIES)?;
    let caps: Value = serde_json::from_str(caps.get()).ok()?;
    Some(declares_extension(&caps))
}

/// Adds the extension to merged capabilities `out` when upstream capabilities `caps` offer it.
pub fn merge_extension(caps: &Map<String, Value>, out: &mut Map<String, Value>) {
    let Some(offer) = caps.get("extensions").and_then(|e| e.get(EXTENSION)) else {
        return;
    };
    let entry = out
        .entry("extensions")
        .or_insert_with(|| Value::Object(Map::new()));
    if let Value::Object(extensions) = entry {
        extensions.entry(EXTENSION).or_insert_with(|| offer.clone());
    }
}

/// Adds the extension to capabilities `out` (the gateway offers it itself), unless there.
pub fn offer_extension(out: &mut Map<String, Value>) {
    let entry = out
        .entry("extensions")
        .or_insert_with(|| Value::Object(Map::new()));
    if let Value::Object(extensions) = entry {
        extensions
            .entry(EXTENSION)
            .or_insert_with(|| Value::Object(Map::new()));
    }
}

/// The `taskId` of a task method's params.
pub fn task_id_of(params: Option<&RawValue>) -> Option<String> {
    RawObject::parse(params?)
        .ok()?
        .get_str("taskId")
        .map(|t| t.into_owned())
}

/// A response whose result carries a `taskId` at its top (a task was created, or a task
/// read), with that id replaced by `rename(id)`; `None` when there is none to replace (the
/// response then goes as it is).
pub fn rename_result_task_id(
    response: &[u8],
    rename: impl FnOnce(&str) -> String,
) -> Option<Vec<u8>> {
    if !std::str::from_utf8(response).is_ok_and(|t| jsonrpc::may_hold(t, "taskId")) {
        return None;
    }
    let Ok(Message::Response(r)) = jsonrpc::parse(response) else {
        return None;
    };
    let Outcome::Result(result) = r.outcome else {
        return None;
    };
    let obj = RawObject::parse(result).ok()?;
    let edited = rename_task_id_in(obj, rename)?;
    Some(jsonrpc::response_with_id(
        r.id.get(),
        Outcome::Result(&edited),
    ))
}

/// A notification or request to the client naming a task — `notifications/tasks/status`
/// (`params.taskId`) or any message with `related-task` in its `params._meta` — with that id
/// renamed; `None` when it names none.
pub fn rename_message_task_id(
    message: &[u8],
    rename: impl FnOnce(&str) -> String,
) -> Option<Vec<u8>> {
    let text = std::str::from_utf8(message).ok()?;
    if !jsonrpc::may_hold(text, "taskId") {
        return None;
    }
    let (method, params, id) = match jsonrpc::parse(message).ok()? {
        Message::Notification(n) => (n.method, n.params?, None),
        Message::Request(r) => (r.method, r.params?, Some(r.id)),
        Message::Response(_) => return None,
    };
    let mut obj = RawObject::parse(params).ok()?;
    let edited = if method == "notifications/tasks/status" {
        rename_task_id_in(obj, rename)?
    } else {
        let mut meta = RawObject::parse(obj.get("_meta")?).ok()?;
        let related = RawObject::parse(meta.get(RELATED_TASK)?).ok()?;
        meta.set(RELATED_TASK, rename_task_id_in(related, rename)?);
        obj.set("_meta", meta.to_raw());
        obj.to_raw()
    };
    Some(match id {
        Some(id) => jsonrpc::request(id, &method, Some(&edited)),
        None => jsonrpc::notification(&method, Some(&edited)),
    })
}

/// `obj` (a result, a `Task`, notification params) with its task id renamed: `taskId` at its
/// top, else in its `task` (a 2025-11-25 `CreateTaskResult`), else in its `related-task`
/// `_meta`; `None` when it names no task.
pub fn rename_task_id_in(
    mut obj: RawObject<'_>,
    rename: impl FnOnce(&str) -> String,
) -> Option<Box<RawValue>> {
    if let Some(id) = obj.get_str("taskId") {
        obj.set("taskId", jsonrpc::raw_string(&rename(&id)));
        return Some(obj.to_raw());
    }
    for (outer, inner) in [("task", None), ("_meta", Some(RELATED_TASK))] {
        let Some(mut level) = obj.get(outer).and_then(|v| RawObject::parse(v).ok()) else {
            continue;
        };
        let edited = match inner {
            None => rename_task_id_in(level, rename)?,
            Some(key) => {
                let related = level.get(key).and_then(|v| RawObject::parse(v).ok())?;
                let related = rename_task_id_in(related, rename)?;
                level.set(key, related);
                level.to_raw()
            }
        };
        obj.set(outer, edited);
        return Some(obj.to_raw());
    }
    None
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used)]
    use super::*;
    use serde_json::json;

    #[test]
    fn the_result_task_id_is_renamed_and_nothing_else() {
        let body = br#"{"jsonrpc":"2.0","id":7,"result":{"resultType":"task","taskId":"t1","status":"working","result":{"taskId":"inner"}}}"#;
        let out = rename_result_task_id(body, |id| format!("pub-{id}")).unwrap();
        let v: Value = serde_json::from_slice(&out).unwrap();
        assert_eq!(v["result"]["taskId"], "pub-t1");
        assert_eq!(v["result"]["result"]["taskId"], "inner");
        assert_eq!(v["id"], 7);
        let created =
            br#"{"jsonrpc":"2.0","id":7,"result":{"task":{"taskId":"t2","status":"working"}}}"#;
        let out = rename_result_task_id(created, |id| format!("pub-{id}")).unwrap();
        let v: Value = serde_json::from_slice(&out).unwrap();
        assert_eq!(v["result"]["task"]["taskId"], "pub-t2", "{v}");
        let related = br#"{"jsonrpc":"2.0","id":7,"result":{"content":[],"_meta":{"io.modelcontextprotocol/related-task":{"taskId":"t3"},"x":1}}}"#;
        let out = rename_result_task_id(related, |id| format!("pub-{id}")).unwrap();
        let v: Value = serde_json::from_slice(&out).unwrap();
        assert_eq!(
            v["result"]["_meta"][RELATED_TASK]["taskId"], "pub-t3",
            "{v}"
        );
        assert_eq!(v["result"]["_meta"]["x"], 1, "{v}");
        let plain = br#"{"jsonrpc":"2.0","id":7,"result":{"content":[]}}"#;
        assert!(rename_result_task_id(plain, |_| unreachable!()).is_none());
        let error = br#"{"jsonrpc":"2.0","id":7,"error":{"code":1,"message":"taskId"}}"#;
        assert!(rename_result_task_id(error, |_| unreachable!()).is_none());
    }

    #[test]
    fn task_ids_in_messages_to_the_client_are_renamed() {
        let status = br#"{"jsonrpc":"2.0","method":"notifications/tasks/status","params":{"taskId":"t1","status":"completed"}}"#;
        let out = rename_message_task_id(status, |id| format!("pub-{id}")).unwrap();
        let v: Value = serde_json::from_slice(&out).unwrap();
        assert_eq!(v["params"]["taskId"], "pub-t1", "{v}");
        assert_eq!(v["params"]["status"], "completed", "{v}");
        let ask = br#"{"jsonrpc":"2.0","id":"sy-1","method":"elicitation/create","params":{"message":"m","_meta":{"io.modelcontextprotocol/related-task":{"taskId":"t2"}}}}"#;
        let out = rename_message_task_id(ask, |id| format!("pub-{id}")).unwrap();
        let v: Value = serde_json::from_slice(&out).unwrap();
        assert_eq!(
            v["params"]["_meta"][RELATED_TASK]["taskId"], "pub-t2",
            "{v}"
        );
        assert_eq!(v["id"], "sy-1", "{v}");
        let progress = br#"{"jsonrpc":"2.0","method":"notifications/progress","params":{"progressToken":1,"progress":1}}"#;
        assert!(rename_message_task_id(progress, |_| unreachable!()).is_none());
    }

    #[test]
    fn declarations_are_read_from_capabilities_and_meta() {
        assert!(declares_extension(&json!({"extensions": {EXTENSION: {}}})));
        assert!(!declares_extension(&json!({"extensions": {}})));
        let p = RawValue::from_string(
            json!({"_meta": {"io.modelcontextprotocol/clientCapabilities": {"extensions": {EXTENSION: {}}}}})
                .to_string(),
        )
        .unwrap();
        assert_eq!(request_declares(Some(&p)), Some(true));
        let p = RawValue::from_string(json!({"taskId": "x"}).to_string()).unwrap();
        assert_eq!(request_declares(Some(&p)), None);
        let mut out = Map::new();
        let caps = json!({"extensions": {EXTENSION: {"x": 1}, "other": {}}});
        merge_extension(caps.as_object().unwrap(), &mut out);
        assert_eq!(
            Value::Object(out),
            json!({"extensions": {EXTENSION: {"x": 1}}})
        );
    }
}
