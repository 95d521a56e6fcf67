//! The serde access types `NodeDe` hands to visitors: list items, mapping entries, enum
//! variants, and the location fields of `Sp`.

use serde::de::{
    self, DeserializeSeed, Deserializer, EnumAccess, IntoDeserializer, MapAccess, SeqAccess,
    VariantAccess, Visitor,
};

use super::super::spanned;
use super::super::yaml::{Node, child_path, index_path};
use super::{DeError, NodeDe};

/// List items, each with its index in the path.
pub(super) struct SeqAcc<'a> {
    pub(super) de: NodeDe<'a>,
    pub(super) items: &'a [Node],
    pub(super) index: usize,
}

impl<'de> SeqAccess<'de> for SeqAcc<'_> {
    type Error = DeError;

    fn next_element_seed<T: DeserializeSeed<'de>>(
        &mut self,
        seed: T,
    ) -> Result<Option<T::Value>, DeError> {
        let Some(item) = self.items.get(self.index) else {
            return Ok(None);
        };
        let path = index_path(&self.de.path, self.index);
        self.index += 1;
        seed.deserialize(self.de.child(item, path)).map(Some)
    }

    fn size_hint(&self) -> Option<usize> {
        Some(self.items.len().saturating_sub(self.index))
    }
}

/// Mapping entries; keys are deserialized as names, values with their key in the path.
pub(super) struct MapAcc<'a> {
    pub(super) de: NodeDe<'a>,
    pub(super) entries: std::vec::IntoIter<&'a (Node, Node)>,
    pub(super) value: Option<NodeDe<'a>>,
}

impl<'de> MapAccess<'de> for MapAcc<'_> {
    type Error = DeError;

    fn next_key_seed<K: DeserializeSeed<'de>>(
        &mut self,
        seed: K,
    ) -> Result<Option<K::Value>, DeError> {
        let Some((key, value)) = self.entries.next() else {
            return Ok(None);
        };
        let path = match key.scalar() {
            Some(name) => child_path(&self.de.path, name),
            None => self.de.path.clone(),
        };
        self.value = Some(self.de.child(value, path.clone()));
        let mut key_de = self.de.child(key, path);
        key_de.key = true;
        seed.deserialize(key_de).map(Some)
    }

    fn next_value_seed<V: DeserializeSeed<'de>>(&mut self, seed: V) -> Result<V::Value, DeError> {
        match self.value.take() {
            Some(value) => seed.deserialize(value),
            None => Err(de::Error::custom(
                "a mapping value was requested before its key",
            )),
        }
    }

    fn size_hint(&self) -> Option<usize> {
        Some(self.entries.len())
    }
}

/// A unit variant (`memory`) or a single-key mapping (`redis: {url: ...}`).
pub(super) struct EnumAcc<'a> {
    pub(super) variant: String,
    pub(super) value: Option<NodeDe<'a>>,
    pub(super) de: NodeDe<'a>,
}

impl<'de, 'a> EnumAccess<'de> for EnumAcc<'a> {
    type Error = DeError;
    type Variant = VariantAcc<'a>;

    fn variant_seed<V: DeserializeSeed<'de>>(
        self,
        seed: V,
    ) -> Result<(V::Value, VariantAcc<'a>), DeError> {
        let name: de::value::StrDeserializer<'_, DeError> =
            self.variant.as_str().into_deserializer();
        let tag = seed.deserialize(name)?;
        Ok((
            tag,
            VariantAcc {
                variant: self.variant,
                value: self.value,
                de: self.de,
            },
        ))
    }
}

pub(super) struct VariantAcc<'a> {
    variant: String,
    value: Option<NodeDe<'a>>,
    de: NodeDe<'a>,
}

impl VariantAcc<'_> {
    fn needs_settings(&self) -> DeError {
        let variant = &self.variant;
        self.de.fail_with(format!(
            "`{variant}` needs settings: write it as `{variant}: {{...}}`"
        ))
    }
}

impl<'de> VariantAccess<'de> for VariantAcc<'_> {
    type Error = DeError;

    fn unit_variant(self) -> Result<(), DeError> {
        match self.value {
            Some(value) if !value.is_null() => {
                let variant = &self.variant;
                Err(value.fail_with(format!(
                    "`{variant}` takes no settings: write just `{variant}`"
                )))
            }
            _ => Ok(()),
        }
    }

    fn newtype_variant_seed<T: DeserializeSeed<'de>>(self, seed: T) -> Result<T::Value, DeError> {
        match self.value {
            Some(value) => seed.deserialize(value),
            None => Err(self.needs_settings()),
        }
    }

    fn tuple_variant<V: Visitor<'de>>(self, _len: usize, visitor: V) -> Result<V::Value, DeError> {
        match self.value {
            Some(value) => value.deserialize_seq(visitor),
            None => Err(self.needs_settings()),
        }
    }

    fn struct_variant<V: Visitor<'de>>(
        self,
        fields: &'static [&'static str],
        visitor: V,
    ) -> Result<V::Value, DeError> {
        match self.value {
            Some(value) => value.deserialize_struct("", fields, visitor),
            None => Err(self.needs_settings()),
        }
    }
}

/// Hands `Sp`'s visitor the value, then the location fields.
pub(super) struct SpAcc<'a> {
    pub(super) de: NodeDe<'a>,
    pub(super) next: usize,
}

impl<'de> MapAccess<'de> for SpAcc<'_> {
    type Error = DeError;

    fn next_key_seed<K: DeserializeSeed<'de>>(
        &mut self,
        seed: K,
    ) -> Result<Option<K::Value>, DeError> {
        let Some(field) = spanned::FIELDS.get(self.next) else {
            return Ok(None);
        };
        self.next += 1;
        let field: de::value::StrDeserializer<'_, DeError> = field.into_deserializer();
        seed.deserialize(field).map(Some)
    }

    fn next_value_seed<V: DeserializeSeed<'de>>(&mut self, seed: V) -> Result<V::Value, DeError> {
        let de = &self.de;
        match spanned::FIELDS.get(self.next.wrapping_sub(1)).copied() {
            Some(spanned::FIELD_VALUE) => seed.deserialize(de.clone()),
            Some(spanned::FIELD_LINE) => seed.deserialize(de.node.mark.line.into_deserializer()),
            Some(spanned::FIELD_COL) => seed.deserialize(de.node.mark.col.into_deserializer()),
            Some(spanned::FIELD_PATH) => seed.deserialize(de.path.clone().into_deserializer()),
            Some(spanned::FIELD_ENV) => seed.deserialize(de.uses_env().into_deserializer()),
            _ => Err(de::Error::custom(
                "a location field was requested before its key",
            )),
        }
    }
}
