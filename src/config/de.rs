//! Serde `Deserializer` over a marked YAML `Node`. Every error is recorded in a shared sink with
//! the node's position and path (an error returned from here is always already recorded);
//! unknown struct fields are all reported, with a hint, and skipped; plain scalars resolve by the
//! YAML 1.2 core schema; scalar values (not keys) get `${VAR}` substitution.
//!
//! Independent list items and fields keep being checked after one fails because the raw types
//! wrap values in [`Sp`](super::spanned::Sp), which swallows the (recorded) error of its value.

#[path = "de_access.rs"]
mod access;
#[path = "de_error.rs"]
mod sink;

use std::borrow::Cow;

use serde::de::{Deserializer, Visitor};

use self::access::{EnumAcc, MapAcc, SeqAcc, SpAcc};
use self::sink::hint;
pub use self::sink::{Ctx, DeError};
use super::scalar::{self, Resolved};
use super::spanned;
use super::subst;
use super::yaml::{Node, NodeKind, child_path};

/// Deserializer for one node.
#[derive(Clone)]
pub struct NodeDe<'a> {
    ctx: &'a Ctx<'a>,
    node: &'a Node,
    path: String,
    /// Mapping keys are names: no substitution, never null.
    key: bool,
}

impl<'a> NodeDe<'a> {
    pub fn new(ctx: &'a Ctx<'a>, node: &'a Node) -> Self {
        NodeDe {
            ctx,
            node,
            path: String::new(),
            key: false,
        }
    }

    fn child(&self, node: &'a Node, path: String) -> Self {
        NodeDe {
            ctx: self.ctx,
            node,
            path,
            key: false,
        }
    }

    fn uses_env(&self) -> bool {
        !self.key && self.node.scalar().is_some_and(subst::uses_env)
    }

    /// Records a message at this node. Values that came from the environment are blanked out.
    fn record(&self, message: String) {
        let message = if self.uses_env() {
            self.redact(message)
        } else {
            message
        };
        self.ctx.push(self.node.mark, &self.path, message);
    }

    fn redact(&self, message: String) -> String {
        let raw = self.node.scalar().unwrap_or_default();
        let Ok(Some(value)) = subst::expand(raw, self.ctx.env) else {
            return message;
        };
        if value.is_empty() {
            return message;
        }
        message
            .replace(&format!("{value:?}"), subst::HIDDEN_VALUE)
            .replace(&format!("`{value}`"), subst::HIDDEN_VALUE)
    }

    /// Attaches an error to this node unless a deeper node already did.
    fn fail(&self, error: DeError) -> DeError {
        if !error.recorded {
            self.record(error.message);
        }
        DeError::recorded()
    }

    fn fail_with(&self, message: String) -> DeError {
        self.record(message);
        DeError::recorded()
    }

    /// The node's kind for messages, without substituting or echoing anything.
    fn describe(&self) -> &'static str {
        match &self.node.kind {
            NodeKind::Scalar { value, plain: true } if !subst::uses_env(value) => {
                scalar::resolve(value).describe()
            }
            NodeKind::Scalar { .. } => "a string",
            NodeKind::Seq(_) => "a list",
            NodeKind::Map(_) => "a mapping",
        }
    }

    /// A scalar's text after substitution, and whether it is plain. `None` for collections.
    fn text(&self) -> Result<Option<(Cow<'a, str>, bool)>, DeError> {
        let NodeKind::Scalar { value, plain } = &self.node.kind else {
            return Ok(None);
        };
        if self.key {
            return Ok(Some((Cow::Borrowed(value.as_str()), *plain)));
        }
        match subst::expand(value, self.ctx.env) {
            Ok(None) => Ok(Some((Cow::Borrowed(value.as_str()), *plain))),
            Ok(Some(expanded)) => Ok(Some((Cow::Owned(expanded), *plain))),
            Err(problems) => {
                for problem in problems {
                    self.record(problem);
                }
                Err(DeError::recorded())
            }
        }
    }

    fn is_null(&self) -> bool {
        matches!(&self.node.kind, NodeKind::Scalar { value, plain: true } if !self.key && scalar::is_null(value))
    }

    fn seq_access(&self, items: &'a [Node]) -> SeqAcc<'a> {
        SeqAcc {
            de: self.clone(),
            items,
            index: 0,
        }
    }

    fn map_access(&self, entries: Vec<&'a (Node, Node)>) -> MapAcc<'a> {
        MapAcc {
            de: self.clone(),
            entries: entries.into_iter(),
            value: None,
        }
    }

    /// Splits a mapping into the entries a struct knows, reporting every other key.
    fn known_fields(&self, entries: &'a [(Node, Node)], fields: &[&str]) -> Vec<&'a (Node, Node)> {
        let mut known = Vec::with_capacity(entries.len());
        for entry in entries {
            let key = &entry.0;
            match key.scalar() {
                Some(name) if fields.contains(&name) => known.push(entry),
                Some(name) => self.ctx.push(
                    key.mark,
                    &self.path,
                    format!("unknown field `{name}`{}", hint(name, fields)),
                ),
                None => self.ctx.push(
                    key.mark,
                    &self.path,
                    format!("keys must be field names, found {}", key.describe()),
                ),
            }
        }
        known
    }
}

macro_rules! forward_to_any {
    ($($method:ident)*) => {$(
        fn $method<V: Visitor<'de>>(self, visitor: V) -> Result<V::Value, DeError> {
            self.deserialize_any(visitor)
        }
    )*};
}

impl<'de> Deserializer<'de> for NodeDe<'_> {
    type Error = DeError;

    fn deserialize_any<V: Visitor<'de>>(self, visitor: V) -> Result<V::Value, DeError> {
        let result = match &self.node.kind {
            NodeKind::Seq(items) => visitor.visit_seq(self.seq_access(items)),
            NodeKind::Map(entries) => visitor.visit_map(self.map_access(entries.iter().collect())),
            NodeKind::Scalar { .. } => {
                let Some((text, plain)) = self.text()? else {
                    return Err(self.fail_with("expected a scalar".to_owned()));
                };
                if !plain {
                    visitor.visit_str(&text)
                } else {
                    match scalar::resolve(&text) {
                        Resolved::Null => visitor.visit_unit(),
                        Resolved::Bool(b) => visitor.visit_bool(b),
                        Resolved::Int(n) => visitor.visit_i64(n),
                        Resolved::UInt(n) => visitor.visit_u64(n),
                        Resolved::Float(n) => visitor.visit_f64(n),
                        Resolved::Str(s) => visitor.visit_str(s),
                    }
                }
            }
        };
        result.map_err(|e| self.fail(e))
    }

    forward_to_any!(
        deserialize_bool deserialize_i8 deserialize_i16 deserialize_i32 deserialize_i64
        deserialize_u8 deserialize_u16 deserialize_u32 deserialize_u64 deserialize_f32
        deserialize_f64 deserialize_bytes deserialize_byte_buf
    );

    fn deserialize_str<V: Visitor<'de>>(self, visitor: V) -> Result<V::Value, DeError> {
        match self.text()? {
            Some((text, _)) => visitor.visit_str(&text).map_err(|e| self.fail(e)),
            None => Err(self.fail_with(format!("expected a string, found {}", self.describe()))),
        }
    }

    fn deserialize_string<V: Visitor<'de>>(self, visitor: V) -> Result<V::Value, DeError> {
        self.deserialize_str(visitor)
    }

    fn deserialize_char<V: Visitor<'de>>(self, visitor: V) -> Result<V::Value, DeError> {
        self.deserialize_str(visitor)
    }

    fn deserialize_identifier<V: Visitor<'de>>(self, visitor: V) -> Result<V::Value, DeError> {
        self.deserialize_str(visitor)
    }

    fn deserialize_option<V: Visitor<'de>>(self, visitor: V) -> Result<V::Value, DeError> {
        // Decided on the written text: `${VAR}` is a value even if it expands to nothing.
        if self.is_null() {
            visitor.visit_none()
        } else {
            visitor.visit_some(self)
        }
    }

    fn deserialize_unit<V: Visitor<'de>>(self, visitor: V) -> Result<V::Value, DeError> {
        if self.is_null() {
            visitor.visit_unit().map_err(|e| self.fail(e))
        } else {
            Err(self.fail_with(format!(
                "expected nothing (null), found {}",
                self.describe()
            )))
        }
    }

    fn deserialize_unit_struct<V: Visitor<'de>>(
        self,
        _name: &'static str,
        visitor: V,
    ) -> Result<V::Value, DeError> {
        self.deserialize_unit(visitor)
    }

    fn deserialize_newtype_struct<V: Visitor<'de>>(
        self,
        _name: &'static str,
        visitor: V,
    ) -> Result<V::Value, DeError> {
        let here = self.clone();
        visitor.visit_newtype_struct(self).map_err(|e| here.fail(e))
    }

    fn deserialize_seq<V: Visitor<'de>>(self, visitor: V) -> Result<V::Value, DeError> {
        match &self.node.kind {
            NodeKind::Seq(items) => visitor
                .visit_seq(self.seq_access(items))
                .map_err(|e| self.fail(e)),
            _ => Err(self.fail_with(format!("expected a list, found {}", self.describe()))),
        }
    }

    fn deserialize_tuple<V: Visitor<'de>>(
        self,
        _len: usize,
        visitor: V,
    ) -> Result<V::Value, DeError> {
        self.deserialize_seq(visitor)
    }

    fn deserialize_tuple_struct<V: Visitor<'de>>(
        self,
        _name: &'static str,
        _len: usize,
        visitor: V,
    ) -> Result<V::Value, DeError> {
        self.deserialize_seq(visitor)
    }

    fn deserialize_map<V: Visitor<'de>>(self, visitor: V) -> Result<V::Value, DeError> {
        match &self.node.kind {
            NodeKind::Map(entries) => visitor
                .visit_map(self.map_access(entries.iter().collect()))
                .map_err(|e| self.fail(e)),
            _ => Err(self.fail_with(format!("expected a mapping, found {}", self.describe()))),
        }
    }

    fn deserialize_struct<V: Visitor<'de>>(
        self,
        name: &'static str,
        fields: &'static [&'static str],
        visitor: V,
    ) -> Result<V::Value, DeError> {
        if name == spanned::MAGIC {
            let here = self.clone();
            return visitor
                .visit_map(SpAcc { de: self, next: 0 })
                .map_err(|e| here.fail(e));
        }
        match &self.node.kind {
            NodeKind::Map(entries) => {
                let known = self.known_fields(entries, fields);
                visitor
                    .visit_map(self.map_access(known))
                    .map_err(|e| self.fail(e))
            }
            _ => Err(self.fail_with(format!(
                "expected a mapping with fields {}; found {}",
                fields.join(", "),
                self.describe()
            ))),
        }
    }

    fn deserialize_enum<V: Visitor<'de>>(
        self,
        _name: &'static str,
        variants: &'static [&'static str],
        visitor: V,
    ) -> Result<V::Value, DeError> {
        let access = match &self.node.kind {
            NodeKind::Scalar { .. } => {
                let Some((text, _)) = self.text()? else {
                    return Err(self.fail_with("expected a scalar".to_owned()));
                };
                EnumAcc {
                    variant: text.into_owned(),
                    value: None,
                    de: self.clone(),
                }
            }
            NodeKind::Map(entries) if entries.len() == 1 => {
                let (key, value) = &entries[0];
                let Some(variant) = key.scalar() else {
                    return Err(self.fail_with(format!(
                        "expected one of: {}; found a mapping with a non-string key",
                        variants.join(", ")
                    )));
                };
                EnumAcc {
                    variant: variant.to_owned(),
                    value: Some(self.child(value, child_path(&self.path, variant))),
                    de: self.clone(),
                }
            }
            _ => {
                return Err(self.fail_with(format!(
                    "expected one of: {}; found {}",
                    variants.join(", "),
                    self.describe()
                )));
            }
        };
        visitor.visit_enum(access).map_err(|e| self.fail(e))
    }

    fn deserialize_ignored_any<V: Visitor<'de>>(self, visitor: V) -> Result<V::Value, DeError> {
        visitor.visit_unit()
    }
}
