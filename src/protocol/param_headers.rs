//! `x-mcp-header` (2026-07-28, SEP-2243): which arguments of a tool are mirrored into
//! `Mcp-Param-{Name}` headers. A tool's annotations are checked and turned into a
//! [`ParamHeaders`] once, when its definition is read; a call then only walks its arguments
//! along the precomputed paths, to write the headers (client side) or to check the headers a
//! client sent against the body (server side). Pure: no IO.

use std::borrow::Cow;
use std::collections::HashMap;

use http::{HeaderMap, HeaderName, HeaderValue};
use serde_json::Value;
use serde_json::value::RawValue;

use super::header::PARAM_PREFIX;
use super::modern::{decode_header_value, encode_header_value};

/// The schema keyword naming the header a property is mirrored into.
pub const ANNOTATION: &str = "x-mcp-header";

/// The mirrored arguments of one tool, in the order its schema lists them.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ParamHeaders {
    params: Box<[Param]>,
}

/// One annotated property.
#[derive(Debug, Clone, PartialEq, Eq)]
struct Param {
    /// The header's name, `mcp-param-<annotation>` in lower case.
    header: HeaderName,
    /// The chain of `properties` keys from the schema root to the property: where its value
    /// sits in `arguments`.
    path: Box<[Box<str>]>,
}

impl ParamHeaders {
    /// Reads the `x-mcp-header` annotations of a tool's `inputSchema`. `Ok(None)` when it has
    /// none; `Err` with the reason when one breaks the rules (the tool must then be left out).
    pub fn from_raw_schema(schema: &RawValue) -> Result<Option<ParamHeaders>, String> {
        // Most tools have no annotation: their schema is not parsed.
        let text = schema.get();
        if !crate::jsonrpc::may_hold(text, ANNOTATION) {
            return Ok(None);
        }
        let schema: Value = serde_json::from_str(text).map_err(|_| "inputSchema is not JSON")?;
        ParamHeaders::from_schema(&schema)
    }

    /// [`ParamHeaders::from_raw_schema`] on a parsed schema.
    pub fn from_schema(schema: &Value) -> Result<Option<ParamHeaders>, String> {
        let mut params = Vec::new();
        let mut seen: HashMap<String, String> = HashMap::new();
        for (path, node) in schema_positions(schema) {
            let Some(annotation) = node.get(ANNOTATION) else {
                continue;
            };
            let Some(path) = path.filter(|p| !p.is_empty()) else {
                return Err(format!(
                    "{ANNOTATION} is on a schema that is not reached from the root through \
                     `properties` alone (e.g. under items, oneOf or $defs)"
                ));
            };
            let at = path.join(".");
            let Some(name) = annotation.as_str() else {
                return Err(format!("{ANNOTATION} of property {at:?} is not a string"));
            };
            if name.is_empty() {
                return Err(format!("{ANNOTATION} of property {at:?} is empty"));
            }
            if !name.bytes().all(is_tchar) {
                return Err(format!(
                    "{ANNOTATION} {name:?} of property {at:?} is not an HTTP token (RFC 9110)"
                ));
            }
            match node.get("type").and_then(Value::as_str) {
                Some("string" | "integer" | "boolean") => {}
                Some(other) => {
                    return Err(format!(
                        "{ANNOTATION} {name:?} is on property {at:?} of type {other:?}: only \
                         string, integer and boolean properties may be mirrored"
                    ));
                }
                None => {
                    return Err(format!(
                        "{ANNOTATION} {name:?} is on property {at:?}, which names no single \
                         type: only string, integer and boolean properties may be mirrored"
                    ));
                }
            }
            let lower = name.to_ascii_lowercase();
            if let Some(first) = seen.insert(lower.clone(), at.clone()) {
                return Err(format!(
                    "{ANNOTATION} {name:?} of property {at:?} repeats the one of property \
                     {first:?} (names are compared ignoring case)"
                ));
            }
            let header = HeaderName::from_bytes(format!("{PARAM_PREFIX}{lower}").as_bytes())
                .map_err(|_| format!("{ANNOTATION} {name:?} makes no valid header name"))?;
            params.push(Param {
                header,
                path: path.into_iter().map(String::into_boxed_str).collect(),
            });
        }
        Ok((!params.is_empty()).then(|| ParamHeaders {
            params: params.into(),
        }))
    }

    /// The headers a client sends with a call whose arguments are `arguments`: one per
    /// annotated argument that is present, not null and a string, number or boolean, its value
    /// in the Base64 sentinel encoding when it is not plain visible ASCII.
    pub fn values(&self, arguments: Option<&RawValue>) -> Vec<(HeaderName, HeaderValue)> {
        let Some(arguments) = arguments else {
            return Vec::new();
        };
        self.params
            .iter()
            .filter_map(|p| {
                let value = render(value_at(arguments, &p.path)?)?;
                let value = HeaderValue::from_str(&encode_header_value(&value.text())).ok()?;
                Some((p.header.clone(), value))
            })
            .collect()
    }

    /// Checks the `Mcp-Param-*` headers of a call against its arguments: an annotated argument
    /// that is present (not null) must have its header, once, with a valid value (after
    /// optional whitespace is trimmed and the Base64 sentinel decoded) equal to it — strings
    /// exactly, numbers numerically, booleans as `true`/`false`; a header for an argument
    /// that is absent is refused too. Other `Mcp-Param-*` headers are not looked at.
    pub fn check(&self, headers: &HeaderMap, arguments: Option<&RawValue>) -> Result<(), String> {
        for p in &self.params {
            let header = super::header::once(headers, &p.header)
                .map_err(|_| format!("the {} header must appear once", p.header))?;
            let body = arguments
                .and_then(|a| value_at(a, &p.path))
                .and_then(render);
            let at = p.path.join(".");
            let (header, body) = match (header, body) {
                (None, None) => continue,
                (Some(_), None) => {
                    return Err(format!(
                        "the {} header is sent but argument {at:?} has no value it can mirror",
                        p.header
                    ));
                }
                (None, Some(_)) => {
                    return Err(format!(
                        "the {} header is missing but argument {at:?} is in the body",
                        p.header
                    ));
                }
                (Some(h), Some(b)) => (h, b),
            };
            let decoded = decode_header_value(header.as_bytes()).ok_or_else(|| {
                format!(
                    "the {} header value has invalid characters or invalid Base64",
                    p.header
                )
            })?;
            if !matches(&decoded, &body) {
                return Err(format!(
                    "{} header value '{decoded}' does not match body value '{}' of argument {at:?}",
                    p.header,
                    body.text()
                ));
            }
        }
        Ok(())
    }
}

/// An argument's value as a header can carry it.
#[derive(Debug, PartialEq)]
enum Scalar {
    Text(String),
    /// A JSON number, as written in the body.
    Number(String),
    Bool(bool),
}

impl Scalar {
    fn text(&self) -> Cow<'_, str> {
        match self {
            Scalar::Text(s) | Scalar::Number(s) => Cow::Borrowed(s),
            Scalar::Bool(b) => Cow::Borrowed(if *b { "true" } else { "false" }),
        }
    }
}

/// The value at `path` inside `arguments`; `None` when a step is missing or not an object.
fn value_at<'a>(arguments: &'a RawValue, path: &[Box<str>]) -> Option<&'a RawValue> {
    let mut at = arguments;
    for key in path {
        if !at.get().starts_with('{') {
            return None;
        }
        let members: HashMap<Cow<'a, str>, &'a RawValue> = serde_json::from_str(at.get()).ok()?;
        at = members.get(&**key)?;
    }
    Some(at)
}

/// A present, non-null string, number or boolean; `None` for anything a header cannot carry.
fn render(raw: &RawValue) -> Option<Scalar> {
    let text = raw.get();
    match text.as_bytes().first()? {
        b'"' => serde_json::from_str::<String>(text).ok().map(Scalar::Text),
        b't' | b'f' => serde_json::from_str::<bool>(text).ok().map(Scalar::Bool),
        b'-' | b'0'..=b'9' => Some(Scalar::Number(integer_text(text))),
        _ => None,
    }
}

/// A JSON number in the decimal form a header carries: integral values without fraction or
/// exponent (`42.0` → `42`), others as written.
fn integer_text(number: &str) -> String {
    if number.bytes().all(|b| b == b'-' || b.is_ascii_digit()) {
        return number.to_owned();
    }
    match number.parse::<f64>() {
        // Within ±2^53 an integral f64 is exact.
        Ok(f) if f.fract() == 0.0 && f.abs() <= 9_007_199_254_740_991.0 => {
            format!("{}", f as i64)
        }
        _ => number.to_owned(),
    }
}

/// Whether a decoded header value stands for the body's value.
fn matches(header: &str, body: &Scalar) -> bool {
    match body {
        Scalar::Text(s) => header == s,
        Scalar::Bool(b) => header == if *b { "true" } else { "false" },
        Scalar::Number(n) => {
            if let (Ok(h), Ok(b)) = (header.parse::<i64>(), n.parse::<i64>()) {
                return h == b;
            }
            match (header.parse::<f64>(), n.parse::<f64>()) {
                (Ok(h), Ok(b)) => h.is_finite() && h == b,
                _ => false,
            }
        }
    }
}

/// `tchar` of RFC 9110 section 5.6.2.
fn is_tchar(b: u8) -> bool {
    b.is_ascii_alphanumeric() || b"!#$%&'*+-.^_`|~".contains(&b)
}

/// Keywords of JSON Schema 2020-12 (and draft 7) whose value is one subschema.
const SUBSCHEMA: &[&str] = &[
    "additionalProperties",
    "unevaluatedProperties",
    "items",
    "additionalItems",
    "unevaluatedItems",
    "contains",
    "propertyNames",
    "not",
    "if",
    "then",
    "else",
    "contentSchema",
];
/// Keywords whose value is an array of subschemas (draft 7's `items` may be one too).
const SUBSCHEMA_LIST: &[&str] = &["allOf", "anyOf", "oneOf", "prefixItems", "items"];
/// Keywords whose value maps names to subschemas (other than `properties`).
const SUBSCHEMA_MAP: &[&str] = &[
    "patternProperties",
    "dependentSchemas",
    "$defs",
    "definitions",
    "dependencies",
];

/// The `properties` keys leading to a schema position; `None` off that chain.
type PropertyPath = Option<Vec<String>>;

/// Every schema position under `root` with the chain of `properties` keys leading to it, or
/// `None` once another keyword was crossed. Data keywords (`const`, `enum`, `default`,
/// `examples`) are not entered and `$ref` is not followed. An explicit stack bounds the walk.
fn schema_positions(root: &Value) -> Vec<(PropertyPath, &serde_json::Map<String, Value>)> {
    let mut out = Vec::new();
    let mut stack: Vec<(PropertyPath, &Value)> = vec![(Some(Vec::new()), root)];
    while let Some((path, node)) = stack.pop() {
        let Some(schema) = node.as_object() else {
            continue;
        };
        let mut children: Vec<(PropertyPath, &Value)> = Vec::new();
        for (keyword, value) in schema {
            let keyword = keyword.as_str();
            if keyword == "properties"
                && let Some(props) = value.as_object()
            {
                for (name, sub) in props {
                    let path = path.as_ref().map(|p| {
                        let mut p = p.clone();
                        p.push(name.clone());
                        p
                    });
                    children.push((path, sub));
                }
                continue;
            }
            if SUBSCHEMA.contains(&keyword) && value.is_object() {
                children.push((None, value));
            }
            if SUBSCHEMA_LIST.contains(&keyword)
                && let Some(list) = value.as_array()
            {
                children.extend(list.iter().map(|s| (None, s)));
            }
            if SUBSCHEMA_MAP.contains(&keyword)
                && let Some(map) = value.as_object()
            {
                children.extend(map.values().map(|s| (None, s)));
            }
        }
        // Reversed onto the stack: positions come out in the schema's order.
        stack.extend(children.into_iter().rev());
        out.push((path, schema));
    }
    out
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used)]
    use super::*;
    use serde_json::json;

    fn spec(schema: Value) -> ParamHeaders {
        ParamHeaders::from_schema(&schema).unwrap().unwrap()
    }

    fn raw(v: Value) -> Box<RawValue> {
        RawValue::from_string(v.to_string()).unwrap()
    }

    fn headers(pairs: &[(&str, &str)]) -> HeaderMap {
        let mut h = HeaderMap::new();
        for (k, v) in pairs {
            h.append(
                HeaderName::from_bytes(k.as_bytes()).unwrap(),
                HeaderValue::from_str(v).unwrap(),
            );
        }
        h
    }

    fn region() -> ParamHeaders {
        spec(json!({"type": "object", "properties": {
            "region": {"type": "string", "x-mcp-header": "Region"},
            "n": {"type": "integer", "x-mcp-header": "N"},
            "on": {"type": "boolean", "x-mcp-header": "On"},
            "q": {"type": "string"}}}))
    }

    #[test]
    fn valid_annotations_give_headers_and_paths() {
        let s = spec(json!({"type": "object", "properties": {
            "region": {"type": "string", "x-mcp-header": "Region"},
            "opts": {"type": "object", "properties": {
                "tenant": {"type": "string", "x-mcp-header": "Tenant-Id"}}}}}));
        let mut got: Vec<_> = s
            .params
            .iter()
            .map(|p| (p.header.as_str().to_owned(), p.path.join(".")))
            .collect();
        got.sort();
        assert_eq!(
            got,
            [
                ("mcp-param-region".to_owned(), "region".to_owned()),
                ("mcp-param-tenant-id".to_owned(), "opts.tenant".to_owned())
            ]
        );
        // No annotation: nothing to mirror, and the schema text is not even parsed.
        let plain = raw(json!({"type": "object", "properties": {"q": {"type": "string"}}}));
        assert_eq!(ParamHeaders::from_raw_schema(&plain), Ok(None));
        // The keyword inside data (a default, an enum) is not an annotation.
        let data = json!({"type": "object", "properties": {
            "q": {"type": "object", "default": {"x-mcp-header": "X"}}}});
        assert_eq!(ParamHeaders::from_schema(&data), Ok(None));
        // A property literally named like the keyword is a property.
        let named = json!({"properties": {"x-mcp-header": {"type": "string"}}});
        assert_eq!(ParamHeaders::from_schema(&named), Ok(None));
    }

    #[test]
    fn invalid_annotations_are_refused_with_a_reason() {
        let prop = |p: Value| json!({"type": "object", "properties": {"a": p}});
        let cases = [
            (prop(json!({"type": "string", "x-mcp-header": ""})), "empty"),
            (
                prop(json!({"type": "string", "x-mcp-header": "My Region"})),
                "token",
            ),
            (
                prop(json!({"type": "string", "x-mcp-header": "Region:1"})),
                "token",
            ),
            (
                prop(json!({"type": "string", "x-mcp-header": "Région"})),
                "token",
            ),
            (
                prop(json!({"type": "string", "x-mcp-header": "Region\t1"})),
                "token",
            ),
            (
                prop(json!({"type": "string", "x-mcp-header": 5})),
                "not a string",
            ),
            (prop(json!({"type": "object", "x-mcp-header": "A"})), "type"),
            (prop(json!({"type": "array", "x-mcp-header": "A"})), "type"),
            (prop(json!({"type": "null", "x-mcp-header": "A"})), "type"),
            (prop(json!({"type": "number", "x-mcp-header": "A"})), "type"),
            (prop(json!({"x-mcp-header": "A"})), "no single type"),
            (
                prop(json!({"type": ["string", "null"], "x-mcp-header": "A"})),
                "no single type",
            ),
            (
                json!({"properties": {"a": {"type": "string", "x-mcp-header": "X"},
                                      "b": {"type": "string", "x-mcp-header": "x"}}}),
                "repeats",
            ),
            (
                json!({"properties": {"a": {"type": "array",
                    "items": {"type": "string", "x-mcp-header": "I"}}}}),
                "not reached",
            ),
            (
                json!({"properties": {"a": {"oneOf": [{"type": "string", "x-mcp-header": "O"}]}}}),
                "not reached",
            ),
            (
                json!({"$defs": {"r": {"type": "string", "x-mcp-header": "R"}},
                       "properties": {"a": {"$ref": "#/$defs/r"}}}),
                "not reached",
            ),
            (
                json!({"if": {"properties": {"a": {"type": "string", "x-mcp-header": "A"}}}}),
                "not reached",
            ),
            (
                json!({"type": "string", "x-mcp-header": "Root"}),
                "not reached",
            ),
        ];
        for (schema, why) in cases {
            let err = ParamHeaders::from_schema(&schema).unwrap_err();
            assert!(err.contains(why), "{schema}: {err}");
        }
        // Escaped keys spell the keyword too.
        let escaped = RawValue::from_string(
            r#"{"properties":{"a":{"type":"object","x-mcp-\u0068eader":"A"}}}"#.to_owned(),
        )
        .unwrap();
        assert!(ParamHeaders::from_raw_schema(&escaped).is_err());
    }

    #[test]
    fn values_are_extracted_and_encoded() {
        let s = region();
        let args = raw(json!({"region": "us-west1", "n": 42, "on": false, "q": "x"}));
        let mut got: Vec<_> = s
            .values(Some(&args))
            .into_iter()
            .map(|(k, v)| format!("{k}: {}", v.to_str().unwrap()))
            .collect();
        got.sort();
        assert_eq!(
            got,
            [
                "mcp-param-n: 42",
                "mcp-param-on: false",
                "mcp-param-region: us-west1"
            ]
        );
        // Null, absent and unrenderable values get no header; unsafe text is Base64.
        let args = raw(json!({"region": " padded ", "n": null, "on": {"a": 1}}));
        let got = s.values(Some(&args));
        assert_eq!(got.len(), 1);
        assert_eq!(got[0].1, "=?base64?IHBhZGRlZCA=?=");
        assert_eq!(integer_text("42.0"), "42");
        assert_eq!(integer_text("-7"), "-7");
        assert_eq!(integer_text("4.2e1"), "42");
        assert_eq!(integer_text("3.5"), "3.5");
        // Nested paths are followed.
        let nested = spec(
            json!({"properties": {"o": {"type": "object", "properties": {
            "t": {"type": "string", "x-mcp-header": "T"}}}}}),
        );
        let got = nested.values(Some(&raw(json!({"o": {"t": "Hello, 世界"}}))));
        assert_eq!(got[0].1, "=?base64?SGVsbG8sIOS4lueVjA==?=");
        assert!(nested.values(Some(&raw(json!({"o": "flat"})))).is_empty());
    }

    #[test]
    fn headers_are_checked_against_the_body() {
        let s = region();
        let args = raw(json!({"region": "us-west1", "n": 42, "on": true}));
        let ok = [
            ("mcp-param-region", "us-west1"),
            ("Mcp-Param-N", "42.0"),
            ("mcp-param-on", "true"),
        ];
        assert_eq!(s.check(&headers(&ok), Some(&args)), Ok(()));
        // Optional whitespace around the value, the sentinel, unknown headers: accepted.
        let fine = [
            ("mcp-param-region", "=?base64?dXMtd2VzdDE=?="),
            ("mcp-param-n", " 42 "),
            ("mcp-param-on", "true"),
            ("mcp-param-other", "whatever"),
        ];
        assert_eq!(s.check(&headers(&fine), Some(&args)), Ok(()));
        let refused: [&[(&str, &str)]; 7] = [
            // Missing.
            &[("mcp-param-n", "42"), ("mcp-param-on", "true")],
            // Different.
            &[
                ("mcp-param-region", "us-east1"),
                ("mcp-param-n", "42"),
                ("mcp-param-on", "true"),
            ],
            &[
                ("mcp-param-region", "us-west1"),
                ("mcp-param-n", "43"),
                ("mcp-param-on", "true"),
            ],
            &[
                ("mcp-param-region", "us-west1"),
                ("mcp-param-n", "42"),
                ("mcp-param-on", "True"),
            ],
            // Bad Base64 (padding, alphabet).
            &[
                ("mcp-param-region", "=?base64?dXMtd2VzdDE?="),
                ("mcp-param-n", "42"),
                ("mcp-param-on", "true"),
            ],
            &[
                ("mcp-param-region", "=?base64?dXMt!!!d2VzdDE=?="),
                ("mcp-param-n", "42"),
                ("mcp-param-on", "true"),
            ],
            // Twice.
            &[
                ("mcp-param-region", "us-west1"),
                ("mcp-param-region", "us-west1"),
                ("mcp-param-n", "42"),
                ("mcp-param-on", "true"),
            ],
        ];
        for h in refused {
            assert!(s.check(&headers(h), Some(&args)).is_err(), "{h:?}");
        }
        // A header for an absent argument is refused; none for an absent or null one is fine.
        let some = raw(json!({"n": null}));
        assert_eq!(s.check(&headers(&[]), Some(&some)), Ok(()));
        assert_eq!(s.check(&headers(&[]), None), Ok(()));
        assert!(
            s.check(&headers(&[("mcp-param-region", "x")]), Some(&some))
                .is_err()
        );
        // A value without the whole sentinel is literal.
        let literal = raw(json!({"region": "=?base64?SGVsbG8="}));
        let h = headers(&[("mcp-param-region", "=?base64?SGVsbG8=")]);
        assert_eq!(s.check(&h, Some(&literal)), Ok(()));
        // Invalid characters.
        let mut bad = HeaderMap::new();
        bad.insert(
            HeaderName::from_static("mcp-param-region"),
            HeaderValue::from_bytes("us-wést".as_bytes()).unwrap(),
        );
        assert!(
            s.check(&bad, Some(&raw(json!({"region": "us-wést"}))))
                .is_err()
        );
    }

    #[test]
    fn written_headers_pass_the_check() {
        let s = region();
        for args in [
            json!({"region": "Hello, 世界", "n": -7, "on": false}),
            json!({"region": "=?base64?literal?=", "n": 9007199254740991_i64}),
            json!({"region": "line1\nline2"}),
            json!({}),
        ] {
            let args = raw(args);
            let mut h = HeaderMap::new();
            for (k, v) in s.values(Some(&args)) {
                h.append(k, v);
            }
            assert_eq!(s.check(&h, Some(&args)), Ok(()), "{args}");
        }
    }
}
