//! Rewriting resource URIs inside MCP results and notifications (prepending a namespace), with
//! every other byte of the message kept as it was.

use serde_json::value::RawValue;

use crate::jsonrpc::{self, RawObject};

/// Where resource URIs sit in a result.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum ResultShape {
    /// `resources/read`: `contents[].uri`, every entry (a collection's children too).
    ReadResource,
    /// `resources/metadata` (SEP-2093): `resource.uri`.
    ResourceMetadata,
    /// `tools/call`: `content[]` blocks of type `resource_link` (`uri`) and `resource`
    /// (`resource.uri`).
    ToolCall,
    /// `prompts/get`: `messages[].content`, a single block as in `ToolCall`.
    PromptGet,
}

/// `result` with every resource URI prefixed by `prefix`; `None` when nothing was rewritten.
pub fn prefix_result_uris(
    result: &RawValue,
    shape: ResultShape,
    prefix: &str,
) -> Option<Box<RawValue>> {
    let text = result.get();
    if !jsonrpc::may_hold(text, "\"uri\"") {
        return None;
    }
    let mut obj = RawObject::parse(result).ok()?;
    let changed = match shape {
        ResultShape::ReadResource => edit_array(&mut obj, "contents", |item| {
            prefix_field(item, "uri", prefix)
        }),
        ResultShape::ResourceMetadata => match prefix_field(obj.get("resource")?, "uri", prefix) {
            Some(resource) => {
                obj.set("resource", resource);
                true
            }
            None => false,
        },
        ResultShape::ToolCall => {
            edit_array(&mut obj, "content", |block| prefix_block(block, prefix))
        }
        ResultShape::PromptGet => edit_array(&mut obj, "messages", |message| {
            let mut m = RawObject::parse(message).ok()?;
            let content = prefix_block(m.get("content")?, prefix)?;
            m.set("content", content);
            Some(m.to_raw())
        }),
    };
    changed.then(|| obj.to_raw())
}

/// `params` with its `field` (a URI string) prefixed; `None` when absent or not a string.
pub fn prefix_field(params: &RawValue, field: &str, prefix: &str) -> Option<Box<RawValue>> {
    let mut obj = RawObject::parse(params).ok()?;
    let uri = obj.get_str(field)?.into_owned();
    obj.set_owned(
        field.to_owned(),
        jsonrpc::raw_string(&format!("{prefix}{uri}")),
    );
    Some(obj.to_raw())
}

/// A content block: `resource_link` has `uri`, `resource` has `resource.uri`.
fn prefix_block(block: &RawValue, prefix: &str) -> Option<Box<RawValue>> {
    let mut b = RawObject::parse(block).ok()?;
    match b.get_str("type").as_deref() {
        Some("resource_link") => prefix_field(block, "uri", prefix),
        Some("resource") => {
            let inner = prefix_field(b.get("resource")?, "uri", prefix)?;
            b.set("resource", inner);
            Some(b.to_raw())
        }
        _ => None,
    }
}

/// Applies `f` to each element of the array `key`; true when any element changed.
fn edit_array(
    obj: &mut RawObject<'_>,
    key: &'static str,
    f: impl Fn(&RawValue) -> Option<Box<RawValue>>,
) -> bool {
    let Some(array) = obj.get(key) else {
        return false;
    };
    let Ok(items) = serde_json::from_str::<Vec<&RawValue>>(array.get()) else {
        return false;
    };
    let mut changed = false;
    let mut out = Vec::with_capacity(array.get().len() + 16 * items.len());
    out.push(b'[');
    for (i, item) in items.iter().enumerate() {
        if i > 0 {
            out.push(b',');
        }
        match f(item) {
            Some(new) => {
                changed = true;
                out.extend_from_slice(new.get().as_bytes());
            }
            None => out.extend_from_slice(item.get().as_bytes()),
        }
    }
    out.push(b']');
    if !changed {
        return false;
    }
    let Ok(text) = String::from_utf8(out) else {
        return false;
    };
    let Ok(raw) = RawValue::from_string(text) else {
        return false;
    };
    obj.set(key, raw);
    true
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used)]
    use super::*;

    fn raw(s: &str) -> Box<RawValue> {
        RawValue::from_string(s.to_owned()).unwrap()
    }

    #[test]
    fn read_results_get_prefixed_uris() {
        let r = raw(
            r#"{"contents":[{"uri":"file:///a","text":"x"},{"uri":"file:///b","blob":"AA=="}]}"#,
        );
        let out = prefix_result_uris(&r, ResultShape::ReadResource, "files+").unwrap();
        assert_eq!(
            out.get(),
            r#"{"contents":[{"uri":"files+file:///a","text":"x"},{"uri":"files+file:///b","blob":"AA=="}]}"#
        );
    }

    #[test]
    fn collection_children_and_metadata_results_get_prefixed_uris() {
        let r = raw(
            r#"{"contents":[{"uri":"demo://docs/a","name":"a","resourceType":"document","text":"x"},{"uri":"demo://docs/b","name":"b","resourceType":"document","text":"y"}]}"#,
        );
        let out = prefix_result_uris(&r, ResultShape::ReadResource, "d+").unwrap();
        assert_eq!(
            out.get(),
            r#"{"contents":[{"uri":"d+demo://docs/a","name":"a","resourceType":"document","text":"x"},{"uri":"d+demo://docs/b","name":"b","resourceType":"document","text":"y"}]}"#
        );
        let m = raw(
            r#"{"resource":{"uri":"demo://docs/","name":"docs","resourceType":"collection"},"_meta":{"uri":"kept"}}"#,
        );
        let out = prefix_result_uris(&m, ResultShape::ResourceMetadata, "d+").unwrap();
        assert_eq!(
            out.get(),
            r#"{"resource":{"uri":"d+demo://docs/","name":"docs","resourceType":"collection"},"_meta":{"uri":"kept"}}"#
        );
        assert!(
            prefix_result_uris(&raw(r#"{"uri":"x"}"#), ResultShape::ResourceMetadata, "d+")
                .is_none()
        );
    }

    #[test]
    fn tool_results_rewrite_links_and_embedded_resources_only() {
        let r = raw(
            r#"{"content":[{"type":"text","text":"uri"},{"type":"resource_link","uri":"demo://x","name":"x"},{"type":"resource","resource":{"uri":"demo://y","text":"t"}}],"isError":false}"#,
        );
        let out = prefix_result_uris(&r, ResultShape::ToolCall, "u+").unwrap();
        assert_eq!(
            out.get(),
            r#"{"content":[{"type":"text","text":"uri"},{"type":"resource_link","uri":"u+demo://x","name":"x"},{"type":"resource","resource":{"uri":"u+demo://y","text":"t"}}],"isError":false}"#
        );
        let plain = raw(r#"{"content":[{"type":"text","text":"hello"}]}"#);
        assert!(prefix_result_uris(&plain, ResultShape::ToolCall, "u+").is_none());
    }

    #[test]
    fn prompt_messages_rewrite_embedded_resources() {
        let r = raw(
            r#"{"messages":[{"role":"user","content":{"type":"resource","resource":{"uri":"test://r","text":"t"}}},{"role":"user","content":{"type":"text","text":"hi"}}]}"#,
        );
        let out = prefix_result_uris(&r, ResultShape::PromptGet, "fx+").unwrap();
        assert!(
            out.get().contains(r#""uri":"fx+test://r""#),
            "{}",
            out.get()
        );
        assert!(
            out.get()
                .contains(r#"{"role":"user","content":{"type":"text","text":"hi"}}"#)
        );
    }

    #[test]
    fn notification_params() {
        let p = raw(r#"{"uri":"test://a","extra":1}"#);
        assert_eq!(
            prefix_field(&p, "uri", "x+").unwrap().get(),
            r#"{"uri":"x+test://a","extra":1}"#
        );
    }
}
