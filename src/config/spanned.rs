//! `Sp<T>`: a deserialized value with its source location, deserialized leniently: when the
//! value is invalid its error is already recorded and `value` is `None`, so siblings and later
//! list items are still checked. Only works with this module's `NodeDe` deserializer.

use std::fmt;
use std::marker::PhantomData;

use serde::de::{self, Deserialize, Deserializer, MapAccess, Visitor};

use super::yaml::Mark;

/// Struct name that makes `NodeDe::deserialize_struct` hand out location fields.
pub(super) const MAGIC: &str = "$__switchyard_config_Sp";
pub(super) const FIELD_VALUE: &str = "value";
pub(super) const FIELD_LINE: &str = "line";
pub(super) const FIELD_COL: &str = "col";
pub(super) const FIELD_PATH: &str = "path";
pub(super) const FIELD_ENV: &str = "env";
pub(super) const FIELDS: &[&str] = &[FIELD_VALUE, FIELD_LINE, FIELD_COL, FIELD_PATH, FIELD_ENV];

/// Where a value is in the source.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Loc {
    pub mark: Mark,
    /// Document path, like `tenants[0].upstreams[1].http.url`.
    pub path: String,
    /// The value came (partly) from `${VAR}` substitution: never echo it in messages.
    pub from_env: bool,
}

/// A value and where it was written. `value` is `None` when it was invalid (already reported).
pub struct Sp<T> {
    pub loc: Loc,
    pub value: Option<T>,
}

impl<T> Sp<T> {
    pub fn get(&self) -> Option<&T> {
        self.value.as_ref()
    }
}

impl<'de, T: Deserialize<'de>> Deserialize<'de> for Sp<T> {
    fn deserialize<D: Deserializer<'de>>(deserializer: D) -> Result<Self, D::Error> {
        deserializer.deserialize_struct(MAGIC, FIELDS, SpVisitor(PhantomData))
    }
}

struct SpVisitor<T>(PhantomData<T>);

impl<'de, T: Deserialize<'de>> Visitor<'de> for SpVisitor<T> {
    type Value = Sp<T>;

    fn expecting(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str("a located value")
    }

    fn visit_map<A: MapAccess<'de>>(self, mut map: A) -> Result<Sp<T>, A::Error> {
        let mut value = None;
        let mut loc = Loc {
            mark: Mark { line: 0, col: 0 },
            path: String::new(),
            from_env: false,
        };
        while let Some(key) = map.next_key::<String>()? {
            match key.as_str() {
                // The deserializer has recorded any error already: keep going without the value.
                FIELD_VALUE => value = map.next_value::<T>().ok(),
                FIELD_LINE => loc.mark.line = map.next_value()?,
                FIELD_COL => loc.mark.col = map.next_value()?,
                FIELD_PATH => loc.path = map.next_value()?,
                FIELD_ENV => loc.from_env = map.next_value()?,
                other => return Err(de::Error::unknown_field(other, FIELDS)),
            }
        }
        Ok(Sp { loc, value })
    }
}
