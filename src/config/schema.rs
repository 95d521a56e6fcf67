//! The JSON Schema of the routing config, generated from the raw types the loader reads
//! (`raw*.rs`: their fields, enums and doc comments), so editors can complete and check keys
//! of the YAML. Structure and types only: the semantic checks (`validate`) stay with `check`.

use std::borrow::Cow;

use schemars::{JsonSchema, Schema, SchemaGenerator, generate::SchemaSettings, json_schema};

use super::raw::{Dur, Pairs, RawConfig, Size};
use super::spanned::Sp;

/// Where the published copy lives, relative to the repository root.
pub const PUBLISHED: &str = "config/switchyard.schema.json";

/// The schema of a routing config file, as JSON (pretty-printed, with a trailing newline).
pub fn config_schema() -> String {
    let generator = SchemaSettings::draft2020_12().into_generator();
    let mut schema =
        serde_json::to_value(generator.into_root_schema_for::<RawConfig>()).unwrap_or_default();
    // An absent key is the default; `key: null` is not (the loader refuses it).
    strip_null(&mut schema);
    if let serde_json::Value::Object(root) = &mut schema {
        root.insert("title".into(), "Switchyard routing config".into());
        root.insert(
            "description".into(),
            "The YAML file `switchyard run --config` serves and `switchyard check` validates. \
             This schema checks structure and types; `switchyard check` also checks meaning \
             (names, URLs, ranges, references) and reports file:line:col."
                .into(),
        );
    }
    let mut text = serde_json::to_string_pretty(&schema).unwrap_or_default();
    text.push('\n');
    text
}

/// Removes the `null` that optional fields get (`type: [T, "null"]`, `anyOf: [.., null]`).
fn strip_null(value: &mut serde_json::Value) {
    use serde_json::Value;
    match value {
        Value::Object(map) => {
            if let Some(Value::Array(types)) = map.get_mut("type") {
                types.retain(|t| t != "null");
                if let [only] = types.as_slice() {
                    let only = only.clone();
                    map.insert("type".into(), only);
                }
            }
            for key in ["anyOf", "oneOf"] {
                if let Some(Value::Array(options)) = map.get_mut(key) {
                    options.retain(|o| o.get("type").is_none_or(|t| t != "null"));
                    if let [only] = options.as_slice() {
                        let only = only.clone();
                        map.remove(key);
                        if let Value::Object(inner) = only {
                            map.extend(inner);
                        }
                    }
                }
            }
            map.values_mut().for_each(strip_null);
        }
        Value::Array(items) => items.iter_mut().for_each(strip_null),
        _ => {}
    }
}

/// A located value has the schema of the value itself.
impl<T: JsonSchema> JsonSchema for Sp<T> {
    fn inline_schema() -> bool {
        true
    }

    fn schema_name() -> Cow<'static, str> {
        T::schema_name()
    }

    fn json_schema(generator: &mut SchemaGenerator) -> Schema {
        generator.subschema_for::<T>()
    }
}

impl JsonSchema for Pairs {
    fn inline_schema() -> bool {
        true
    }

    fn schema_name() -> Cow<'static, str> {
        "Pairs".into()
    }

    fn json_schema(_: &mut SchemaGenerator) -> Schema {
        json_schema!({
            "type": "object",
            "additionalProperties": {"type": "string"}
        })
    }
}

impl JsonSchema for Dur {
    fn inline_schema() -> bool {
        true
    }

    fn schema_name() -> Cow<'static, str> {
        "Duration".into()
    }

    fn json_schema(_: &mut SchemaGenerator) -> Schema {
        json_schema!({
            "type": "string",
            "description": "A duration: whole numbers with units h, m, s, ms, larger first (500ms, 30s, 1m30s).",
            "pattern": "^([0-9]+h)?([0-9]+m)?([0-9]+s)?([0-9]+ms)?$",
            "minLength": 2
        })
    }
}

impl JsonSchema for Size {
    fn inline_schema() -> bool {
        true
    }

    fn schema_name() -> Cow<'static, str> {
        "Size".into()
    }

    fn json_schema(_: &mut SchemaGenerator) -> Schema {
        json_schema!({
            "description": "A byte count: a number of bytes, or a whole number with a unit (B, kB, KB, MB, GB, KiB, MiB, GiB), e.g. 4MiB.",
            "anyOf": [
                {"type": "integer", "minimum": 0},
                {"type": "string", "pattern": "^[0-9]+ *(B|kB|KB|MB|GB|KiB|MiB|GiB)?$"}
            ]
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_published_schema_is_the_generated_one() {
        let published = std::fs::read_to_string(
            std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join(PUBLISHED),
        )
        .unwrap_or_default();
        assert!(
            published == config_schema(),
            "{PUBLISHED} is stale: regenerate it with `switchyard schema > {PUBLISHED}`"
        );
    }

    #[test]
    fn unknown_keys_are_refused_and_enums_listed() {
        let schema: serde_json::Value = serde_json::from_str(&config_schema()).unwrap_or_default();
        assert_eq!(schema["additionalProperties"], false, "{schema}");
        let text = schema.to_string();
        for word in ["per-session", "\"legacy\"", "tenants", "max_in_flight"] {
            assert!(text.contains(word), "{word} in {text}");
        }
    }
}
