//! YAML (helm's output, manifests, rule files) as `serde_json::Value`s, parsed with the
//! crate's own YAML library, and small accessors for Kubernetes objects.

use serde_json::{Map, Number, Value};
use yaml_rust2::{Yaml, YamlLoader};

/// Every non-empty document of a YAML stream (helm separates objects with `---` and may emit
/// empty documents for templates that render nothing).
pub fn documents(text: &str, what: &str) -> Vec<Value> {
    let docs = YamlLoader::load_from_str(text)
        .unwrap_or_else(|e| panic!("{what} is not valid YAML: {e}\n{text}"));
    docs.iter()
        .map(|d| to_json(d, what))
        .filter(|v| !v.is_null())
        .collect()
}

/// The single document of a YAML text.
pub fn document(text: &str, what: &str) -> Value {
    let mut docs = documents(text, what);
    assert_eq!(docs.len(), 1, "{what}: expected one YAML document");
    docs.remove(0)
}

fn to_json(yaml: &Yaml, what: &str) -> Value {
    match yaml {
        Yaml::Null => Value::Null,
        Yaml::Boolean(b) => Value::Bool(*b),
        Yaml::Integer(i) => Value::from(*i),
        Yaml::Real(r) => r
            .parse::<f64>()
            .ok()
            .and_then(Number::from_f64)
            .map_or_else(|| Value::String(r.clone()), Value::Number),
        Yaml::String(s) => Value::String(s.clone()),
        Yaml::Array(items) => Value::Array(items.iter().map(|i| to_json(i, what)).collect()),
        Yaml::Hash(hash) => {
            let mut map = Map::new();
            for (k, v) in hash {
                let key = match k {
                    Yaml::String(s) => s.clone(),
                    Yaml::Integer(i) => i.to_string(),
                    Yaml::Boolean(b) => b.to_string(),
                    other => panic!("{what}: unsupported YAML key {other:?}"),
                };
                map.insert(key, to_json(v, what));
            }
            Value::Object(map)
        }
        Yaml::Alias(_) | Yaml::BadValue => panic!("{what}: unsupported YAML node {yaml:?}"),
    }
}

/// `kind` of an object.
pub fn kind(doc: &Value) -> &str {
    doc["kind"].as_str().unwrap_or_default()
}

/// `metadata.name` of an object.
pub fn name(doc: &Value) -> &str {
    doc["metadata"]["name"].as_str().unwrap_or_default()
}

/// The kinds of a list of objects, in order.
pub fn kinds(docs: &[Value]) -> Vec<String> {
    docs.iter().map(|d| kind(d).to_owned()).collect()
}

/// The objects of one kind.
pub fn all_of<'a>(docs: &'a [Value], wanted: &str) -> Vec<&'a Value> {
    docs.iter().filter(|d| kind(d) == wanted).collect()
}

/// The one object of a kind; panics if there is none or several.
pub fn one_of<'a>(docs: &'a [Value], wanted: &str) -> &'a Value {
    let found = all_of(docs, wanted);
    assert_eq!(
        found.len(),
        1,
        "expected exactly one {wanted}, found {} among {:?}",
        found.len(),
        kinds(docs)
    );
    found[0]
}

/// A string field, panicking with its path when it is not one.
pub fn str_at<'a>(value: &'a Value, pointer: &str) -> &'a str {
    value
        .pointer(pointer)
        .and_then(Value::as_str)
        .unwrap_or_else(|| panic!("no string at {pointer} in {value:#}"))
}

/// An array field (empty when absent).
pub fn array_at<'a>(value: &'a Value, pointer: &str) -> &'a [Value] {
    value
        .pointer(pointer)
        .and_then(Value::as_array)
        .map_or(&[], Vec::as_slice)
}

/// Whether every `key: value` of `selector` is among `labels`.
pub fn selects(selector: &Value, labels: &Value) -> bool {
    let Some(selector) = selector.as_object() else {
        return false;
    };
    !selector.is_empty() && selector.iter().all(|(k, v)| labels.get(k) == Some(v))
}
