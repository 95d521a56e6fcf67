//! The routing config's JSON Schema (`switchyard schema`, published as
//! config/switchyard.schema.json) checked by a real validator (Python `jsonschema`, Draft
//! 2020-12): the shipped configs validate, and the schema agrees with `switchyard check` on a set
//! of valid and invalid configs.

use std::path::Path;
use std::process::Command;

use serde_json::{Map, Value};
use yaml_rust2::{Yaml, YamlLoader};

use crate::support::TempDir;
use crate::support::config::gateway_exe;
use crate::support::peers::{python, repo};

/// A YAML document as JSON (what an editor's schema check sees).
fn yaml_to_json(text: &str) -> Value {
    fn convert(y: &Yaml) -> Value {
        match y {
            Yaml::Real(r) => r.parse::<f64>().map_or(Value::Null, Value::from),
            Yaml::Integer(i) => Value::from(*i),
            Yaml::String(s) => Value::from(s.clone()),
            Yaml::Boolean(b) => Value::from(*b),
            Yaml::Array(a) => Value::Array(a.iter().map(convert).collect()),
            Yaml::Hash(h) => Value::Object(
                h.iter()
                    .map(|(k, v)| {
                        let key = match k {
                            Yaml::String(s) => s.clone(),
                            other => format!("{other:?}"),
                        };
                        (key, convert(v))
                    })
                    .collect::<Map<_, _>>(),
            ),
            _ => Value::Null,
        }
    }
    let docs = YamlLoader::load_from_str(text).expect("yaml");
    docs.first().map_or(Value::Null, convert)
}

/// The schema's verdict on each document: `None` when valid, else the validator's first error.
fn schema_verdicts(schema: &Path, docs: &[Value], dir: &TempDir) -> Vec<Option<String>> {
    let input = dir.path("docs.json");
    std::fs::write(&input, Value::Array(docs.to_vec()).to_string()).expect("docs");
    let script = r#"
import json, sys
from jsonschema import Draft202012Validator
schema = json.load(open(sys.argv[1]))
Draft202012Validator.check_schema(schema)
v = Draft202012Validator(schema)
out = []
for doc in json.load(open(sys.argv[2])):
    errors = sorted(v.iter_errors(doc), key=lambda e: list(e.path))
    out.append(None if not errors else errors[0].message)
print(json.dumps(out))
"#;
    let out = Command::new(python())
        .args(["-c", script])
        .arg(schema)
        .arg(&input)
        .output()
        .expect("python runs");
    assert!(
        out.status.success(),
        "validator failed: {}",
        String::from_utf8_lossy(&out.stderr)
    );
    serde_json::from_slice(&out.stdout).expect("verdicts")
}

fn check_passes(path: &Path) -> (bool, String) {
    let out = Command::new(gateway_exe())
        .args(["check", "--config"])
        .arg(path)
        .output()
        .expect("check runs");
    (
        out.status.success(),
        format!(
            "{}{}",
            String::from_utf8_lossy(&out.stdout),
            String::from_utf8_lossy(&out.stderr)
        ),
    )
}

#[test]
fn the_published_schema_is_what_the_binary_prints() {
    let out = Command::new(gateway_exe())
        .arg("schema")
        .output()
        .expect("schema runs");
    assert!(out.status.success());
    let published = std::fs::read(repo().join("config/switchyard.schema.json")).expect("schema");
    assert_eq!(
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&published),
        "regenerate with `switchyard schema > config/switchyard.schema.json`"
    );
}

#[test]
fn shipped_configs_validate_and_name_the_schema() {
    let dir = TempDir::new("schema-shipped");
    let schema = repo().join("config/switchyard.schema.json");
    let mut docs = Vec::new();
    for name in ["demo.yaml", "example.yaml", "image.yaml"] {
        let text = std::fs::read_to_string(repo().join("config").join(name)).expect("config");
        assert!(
            text.starts_with("# yaml-language-server: $schema=switchyard.schema.json\n"),
            "{name} names the schema for editors"
        );
        docs.push(yaml_to_json(&text));
    }
    let verdicts = schema_verdicts(&schema, &docs, &dir);
    assert_eq!(verdicts, vec![None, None, None], "{verdicts:?}");
}

#[test]
fn the_schema_and_check_agree() {
    let dir = TempDir::new("schema-agree");
    let schema = repo().join("config/switchyard.schema.json");
    let base = "tenants:\n  - name: acme\n    upstreams:\n      - name: files\n        stdio: {command: echo}\n";
    let cases: Vec<(&str, String, bool)> = vec![
        ("minimal", base.to_owned(), true),
        (
            "everything common",
            format!(
                "listen: 127.0.0.1:8080\nlimits: {{max_body: 4MiB, body_read_timeout: 30s, max_connections: 100}}\n\
                 sessions: {{ttl: 1h30m, store: memory}}\n{base}        timeout: 500ms\n        era: legacy\n"
            ),
            true,
        ),
        (
            "redis store",
            format!(
                "sessions:\n  store: {{redis: {{url: \"redis://127.0.0.1:6379\", timeout: 2s}}}}\n{base}"
            ),
            true,
        ),
        (
            "redis sentinel store",
            format!(
                "sessions:\n  store: {{redis: {{sentinel: {{master: mymaster, nodes: [\"redis://10.0.0.1:26379\"], password: pw, tls: true, db: 2}}, timeout: 2s}}}}\n{base}"
            ),
            true,
        ),
        (
            "redis store with fast events",
            format!(
                "sessions:\n  store: {{redis: {{url: \"redis://127.0.0.1:6379\", events: fast}}}}\n{base}"
            ),
            true,
        ),
        (
            "typo'd sentinel key",
            format!(
                "sessions:\n  store: {{redis: {{sentinel: {{master: mymaster, node: [\"redis://10.0.0.1:26379\"]}}}}}}\n{base}"
            ),
            false,
        ),
        (
            "unknown event durability",
            format!(
                "sessions:\n  store: {{redis: {{url: \"redis://127.0.0.1:6379\", events: sync}}}}\n{base}"
            ),
            false,
        ),
        (
            "typo'd top-level key",
            format!("lisen: 127.0.0.1:8080\n{base}"),
            false,
        ),
        (
            "typo'd upstream key",
            format!("{base}        timout: 5s\n"),
            false,
        ),
        (
            "unknown enum value",
            format!("{base}        era: ancient\n"),
            false,
        ),
        (
            "duration without unit",
            format!("{base}        timeout: 30\n"),
            false,
        ),
        (
            "duration with a bad unit",
            format!("{base}        timeout: 30 seconds\n"),
            false,
        ),
        (
            "size with a bad unit",
            format!("limits: {{max_body: 4 parsecs}}\n{base}"),
            false,
        ),
        (
            "list where a mapping belongs",
            format!("limits: [1]\n{base}"),
            false,
        ),
        (
            "sharing value",
            base.replace("{command: echo}", "{command: echo, sharing: per-tenant}"),
            false,
        ),
    ];
    let docs: Vec<Value> = cases.iter().map(|(_, y, _)| yaml_to_json(y)).collect();
    let verdicts = schema_verdicts(&schema, &docs, &dir);
    for ((label, yaml, valid), verdict) in cases.iter().zip(verdicts) {
        let path = dir.path("case.yaml");
        std::fs::write(&path, yaml).expect("case");
        let (checked, output) = check_passes(&path);
        assert_eq!(
            verdict.is_none(),
            *valid,
            "schema on {label}: {verdict:?}\n{yaml}"
        );
        assert_eq!(checked, *valid, "check on {label}: {output}\n{yaml}");
    }
}
