//! `RawObject`: a JSON object whose member values stay raw, for editing one or two members
//! (an id, a name, a progress token) while every other byte passes through untouched.

use std::borrow::Cow;
use std::fmt;

use serde::de::{Deserialize, Deserializer, MapAccess, Visitor};
use serde_json::value::RawValue;

use super::encode::{Text, push_str_json};

/// Members in their original order; values borrowed from the input until replaced.
#[derive(Debug, Clone, Default)]
pub struct RawObject<'a> {
    members: Vec<(Cow<'a, str>, Cow<'a, RawValue>)>,
}

impl<'a> RawObject<'a> {
    /// Parses `raw`, which must be a JSON object.
    pub fn parse(raw: &'a RawValue) -> Result<RawObject<'a>, serde_json::Error> {
        // Names without escapes are split off in one pass; anything else is serde's to read.
        let mut members = Vec::with_capacity(4);
        let split = super::scan::object_members(raw.get(), |name, value| {
            members.push((Cow::Borrowed(name), Cow::Borrowed(value)));
        });
        match split {
            Some(()) => Ok(RawObject { members }),
            None => serde_json::from_str(raw.get()),
        }
    }

    /// The member `key` of the JSON object `raw` when it is a string, decoded, read without
    /// building the object (nothing is allocated when the names and the string are plain);
    /// `None` when it is absent, not a string, or `raw` is not an object.
    pub fn str_member(raw: &'a RawValue, key: &str) -> Option<Cow<'a, str>> {
        let mut found = None;
        let plain = super::scan::object_members(raw.get(), |name, value| {
            if found.is_none() && name == key {
                found = Some(value);
            }
        });
        match plain {
            Some(()) => {
                let text = found?.get();
                match super::scan::plain_str(text) {
                    Some(inner) => Some(Cow::Borrowed(inner)),
                    None => serde_json::from_str::<Cow<'a, str>>(text).ok(),
                }
            }
            // An escaped name: the whole object, read by serde.
            None => Some(Cow::Owned(
                RawObject::parse(raw).ok()?.get_str(key)?.into_owned(),
            )),
        }
    }

    pub fn get(&self, key: &str) -> Option<&RawValue> {
        self.members
            .iter()
            .find(|(k, _)| k == key)
            .map(|(_, v)| v.as_ref())
    }

    /// A member that is a JSON string, decoded.
    pub fn get_str(&self, key: &str) -> Option<Cow<'_, str>> {
        let raw = self.get(key)?;
        if let Some(text) = super::scan::plain_str(raw.get()) {
            return Some(Cow::Borrowed(text));
        }
        serde_json::from_str::<Cow<'_, str>>(raw.get()).ok()
    }

    /// Replaces the member `key` (keeping its position) or appends it.
    pub fn set(&mut self, key: &'a str, value: Box<RawValue>) {
        match self.members.iter_mut().find(|(k, _)| k == key) {
            Some((_, v)) => *v = Cow::Owned(value),
            None => self.members.push((Cow::Borrowed(key), Cow::Owned(value))),
        }
    }

    /// Like [`RawObject::set`] for a value that outlives the object (not copied).
    pub fn set_ref(&mut self, key: &'a str, value: &'a RawValue) {
        match self.members.iter_mut().find(|(k, _)| k == key) {
            Some((_, v)) => *v = Cow::Borrowed(value),
            None => self
                .members
                .push((Cow::Borrowed(key), Cow::Borrowed(value))),
        }
    }

    /// Like [`RawObject::set`] for a key that is not `'a` (computed at run time).
    pub fn set_owned(&mut self, key: String, value: Box<RawValue>) {
        match self.members.iter_mut().find(|(k, _)| *k == key) {
            Some((_, v)) => *v = Cow::Owned(value),
            None => self.members.push((Cow::Owned(key), Cow::Owned(value))),
        }
    }

    /// Removes and returns the member `key`.
    pub fn remove(&mut self, key: &str) -> Option<Cow<'a, RawValue>> {
        let pos = self.members.iter().position(|(k, _)| k == key)?;
        Some(self.members.remove(pos).1)
    }

    pub fn is_empty(&self) -> bool {
        self.members.is_empty()
    }

    /// Serializes back to JSON; untouched members are copied byte for byte.
    pub fn to_vec(&self) -> Vec<u8> {
        self.to_text().into_bytes()
    }

    /// The object as raw JSON, made up once and not read again (its members are raw values
    /// already, its names written as JSON strings).
    pub fn to_raw(&self) -> Box<RawValue> {
        super::scan::owned_raw(self.to_text())
    }

    /// The length of the object's JSON text when no name needs an escape (a capacity).
    pub fn text_len(&self) -> usize {
        self.members
            .iter()
            .map(|(k, v)| k.len() + v.get().len() + 4)
            .sum::<usize>()
            + 2
    }

    /// Appends the object's JSON text to `buf` (a message being written around it).
    pub fn write_into(&self, buf: &mut Vec<u8>) {
        self.write(buf);
    }

    /// The object's JSON text.
    fn to_text(&self) -> String {
        let mut text = String::with_capacity(self.text_len());
        self.write(&mut text);
        text
    }

    /// `{`, each `"name":value`, `}`, no blanks added.
    fn write(&self, out: &mut impl Text) {
        out.put("{");
        for (i, (k, v)) in self.members.iter().enumerate() {
            if i > 0 {
                out.put(",");
            }
            push_str_json(out, k);
            out.put(":");
            out.put(v.get());
        }
        out.put("}");
    }
}

impl<'de: 'a, 'a> Deserialize<'de> for RawObject<'a> {
    fn deserialize<D: Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        struct V<'a>(std::marker::PhantomData<&'a ()>);
        impl<'de: 'a, 'a> Visitor<'de> for V<'a> {
            type Value = RawObject<'a>;
            fn expecting(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
                f.write_str("a JSON object")
            }
            fn visit_map<M: MapAccess<'de>>(self, mut map: M) -> Result<Self::Value, M::Error> {
                let mut members = Vec::with_capacity(map.size_hint().unwrap_or(4));
                while let Some(key) = map.next_key::<Cow<'de, str>>()? {
                    let value: &'de RawValue = map.next_value()?;
                    members.push((key, Cow::Borrowed(value)));
                }
                Ok(RawObject { members })
            }
        }
        d.deserialize_map(V(std::marker::PhantomData))
    }
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used)]
    use super::*;

    #[test]
    fn edits_one_member_and_keeps_the_rest_verbatim() {
        let raw = RawValue::from_string(
            r#"{"name":"a__echo", "arguments": {"x":  1.0}, "_meta":{"k":"v"}}"#.into(),
        )
        .unwrap();
        let mut obj = RawObject::parse(&raw).unwrap();
        assert_eq!(obj.get_str("name").as_deref(), Some("a__echo"));
        obj.set("name", crate::jsonrpc::raw_string("echo"));
        assert_eq!(
            String::from_utf8(obj.to_vec()).unwrap(),
            r#"{"name":"echo","arguments":{"x":  1.0},"_meta":{"k":"v"}}"#
        );
        obj.remove("_meta");
        obj.set("z", crate::jsonrpc::raw_u64(3));
        assert_eq!(
            obj.to_raw().get(),
            r#"{"name":"echo","arguments":{"x":  1.0},"z":3}"#
        );
    }

    #[test]
    fn a_string_member_read_alone_is_what_the_whole_object_says() {
        let cases = [
            r#"{"name":"echo","arguments":{"name":"inner"}}"#,
            r#"{"arguments":{"name":"inner"}, "name" : "a\"b\u00e9"}"#,
            r#"{"na\u006de":"escaped name","x":1}"#,
            r#"{"a\"b":1,"name":"after an escaped name"}"#,
            r#"{"name":7}"#,
            r#"{"name":null}"#,
            r#"{"other":"x"}"#,
            r#"{}"#,
            r#"["name","echo"]"#,
            r#""name""#,
        ];
        for text in cases {
            let raw = RawValue::from_string(text.into()).unwrap();
            let whole = RawObject::parse(&raw)
                .ok()
                .and_then(|o| o.get_str("name").map(Cow::into_owned));
            let alone = RawObject::str_member(&raw, "name").map(Cow::into_owned);
            assert_eq!(alone, whole, "{text}");
        }
        let raw = RawValue::from_string(r#"{"name":"plain"}"#.into()).unwrap();
        assert!(matches!(
            RawObject::str_member(&raw, "name"),
            Some(Cow::Borrowed("plain"))
        ));
    }

    #[test]
    fn escaped_keys_round_trip() {
        let raw = RawValue::from_string(r#"{"a\"b":1}"#.into()).unwrap();
        let obj = RawObject::parse(&raw).unwrap();
        assert_eq!(obj.get("a\"b").unwrap().get(), "1");
        assert_eq!(obj.to_raw().get(), r#"{"a\"b":1}"#);
    }

    #[test]
    fn names_are_escaped_only_where_json_needs_it() {
        let names = [
            "plain",
            "é ünï",
            "a\"b",
            "back\\slash",
            "tab\there",
            "\u{1f}",
            "del\u{7f}",
        ];
        let mut obj = RawObject::default();
        for name in names {
            obj.set_owned(name.to_owned(), crate::jsonrpc::raw_u64(1));
        }
        let raw = obj.to_raw();
        assert!(
            raw.get()
                .starts_with(r#"{"plain":1,"é ünï":1,"a\"b":1,"back\\slash":1,"tab\t"#),
            "{}",
            raw.get()
        );
        // Written into a message, the same text.
        for method in ["notifications/progress", "odd \"method\""] {
            assert_eq!(
                crate::jsonrpc::notification_with(method, &obj),
                crate::jsonrpc::notification(method, Some(&raw))
            );
        }
        // Read back, every name is itself again.
        let back = RawObject::parse(&raw).unwrap();
        for name in names {
            assert_eq!(back.get(name).map(RawValue::get), Some("1"), "{name:?}");
        }
    }

    #[test]
    fn non_objects_are_errors() {
        let raw = RawValue::from_string("[1]".into()).unwrap();
        assert!(RawObject::parse(&raw).is_err());
    }
}
