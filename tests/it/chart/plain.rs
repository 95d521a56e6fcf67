//! deploy/kubernetes: the plain manifests `kubectl apply -k` installs are exactly the chart's
//! default render (less Helm's bookkeeping), and pass the same checks as every render.

use std::collections::{BTreeMap, BTreeSet};

use serde_json::Value;

use super::read;
use super::render::{chart_file, check_routing_config, gateway_invariants, validate_objects};
use super::tools::Helm;
use super::yaml::{self, array_at};
use crate::support::TempDir;
use crate::support::peers::repo;

/// The objects of deploy/kubernetes as `kubectl apply -k` reads them, and their text.
fn plain_manifests() -> (String, Vec<Value>) {
    let kustomization = yaml::document(
        &read("deploy/kubernetes/kustomization.yaml"),
        "kustomization",
    );
    let listed: BTreeSet<String> = array_at(&kustomization, "/resources")
        .iter()
        .filter_map(|r| r.as_str().map(str::to_owned))
        .collect();
    let present: BTreeSet<String> = std::fs::read_dir(repo().join("deploy/kubernetes"))
        .expect("deploy/kubernetes")
        .map(|e| e.expect("entry").file_name().to_string_lossy().into_owned())
        .filter(|n| n.ends_with(".yaml") && n != "kustomization.yaml")
        .collect();
    assert_eq!(
        listed, present,
        "kustomization.yaml lists exactly the manifests"
    );
    let text: String = listed
        .iter()
        .map(|f| format!("---\n{}\n", read(&format!("deploy/kubernetes/{f}"))))
        .collect();
    let docs = yaml::documents(&text, "deploy/kubernetes");
    (text, docs)
}

/// An object without what only Helm adds (its bookkeeping labels and the release namespace),
/// with the routing config parsed so that comments and key order do not count.
fn without_helm_bookkeeping(mut doc: Value) -> Value {
    for labels in ["/metadata/labels", "/spec/template/metadata/labels"] {
        if let Some(map) = doc.pointer_mut(labels).and_then(Value::as_object_mut) {
            map.remove("helm.sh/chart");
            map.remove("app.kubernetes.io/managed-by");
        }
    }
    if let Some(meta) = doc["metadata"].as_object_mut() {
        meta.remove("namespace");
    }
    if let Some(text) = doc.pointer("/data/gateway.yaml").and_then(Value::as_str) {
        doc["data"]["gateway.yaml"] = yaml::document(text, "gateway.yaml");
    }
    doc
}

fn by_kind_and_name(docs: Vec<Value>) -> BTreeMap<(String, String), Value> {
    docs.into_iter()
        .map(|d| {
            let key = (yaml::kind(&d).to_owned(), yaml::name(&d).to_owned());
            (key, without_helm_bookkeeping(d))
        })
        .collect()
}

#[test]
fn plain_manifests_are_the_chart_defaults_and_pass_validation_and_switchyard_check() {
    let (helm, dir) = (Helm::new(), TempDir::new("chart-plain"));
    let (text, plain) = plain_manifests();
    for doc in &plain {
        assert!(
            doc["metadata"].get("namespace").is_none(),
            "namespace-agnostic: {}",
            yaml::name(doc)
        );
    }
    validate_objects(&dir, "plain.yaml", &text, &plain);
    gateway_invariants(&plain);
    let checked = check_routing_config(&plain, &dir, &[]).expect_ok().stdout;
    assert!(
        checked.contains("ok (1 tenant(s), 1 upstream(s)"),
        "{checked}"
    );

    let rendered = helm
        .template(&chart_file("ci/default-values.yaml"), &[])
        .expect_ok()
        .stdout;
    let chart = by_kind_and_name(yaml::documents(&rendered, "chart defaults"));
    let plain = by_kind_and_name(plain);
    assert_eq!(
        chart.keys().collect::<Vec<_>>(),
        plain.keys().collect::<Vec<_>>(),
        "the same objects"
    );
    for (key, object) in &chart {
        assert_eq!(
            &plain[key], object,
            "deploy/kubernetes {key:?} differs from the chart's default render"
        );
    }
}
