//! deploy/prometheus and deploy/grafana: the alert rules pass promtool's check and their unit
//! tests (every alert proven to fire), the chart ships the same rules, and the dashboard and
//! the alerts only name metrics and labels the gateway exports.

use std::collections::BTreeSet;
use std::process::Command;

use serde_json::{Value, json};

use super::promql;
use super::read;
use super::tools::{promtool_exe, run};
use super::yaml::{self, array_at};
use crate::support::TempDir;
use crate::support::peers::repo;

const RULES: &str = "deploy/prometheus/switchyard-alerts.yaml";
const RULE_TESTS: &str = "deploy/prometheus/switchyard-alerts.test.yaml";

fn rule_exprs() -> Vec<String> {
    let rules = yaml::document(&read(RULES), "alerts");
    array_at(&rules, "/groups")
        .iter()
        .flat_map(|g| array_at(g, "/rules"))
        .filter_map(|r| r["expr"].as_str().map(str::to_owned))
        .collect()
}

/// `promtool check rules` on a file, asserting it found `count` rules.
fn promtool_check_rules(dir: &std::path::Path, file: &str, count: usize) {
    let mut check = Command::new(promtool_exe());
    check.args(["check", "rules", file]).current_dir(dir);
    let checked = run(check).expect_ok();
    assert!(
        checked
            .stdout
            .contains(&format!("SUCCESS: {count} rules found")),
        "{}",
        checked.stdout
    );
}

#[test]
fn alert_rules_pass_promtool_check_and_unit_tests() {
    let dir = repo().join("deploy/prometheus");
    let rules = yaml::document(&read(RULES), "alerts");
    let alerts: BTreeSet<&str> = array_at(&rules, "/groups")
        .iter()
        .flat_map(|g| array_at(g, "/rules"))
        .filter_map(|r| r["alert"].as_str())
        .collect();
    assert!(
        alerts.contains("SwitchyardConfigReloadRejected"),
        "{alerts:?}"
    );
    promtool_check_rules(&dir, "switchyard-alerts.yaml", alerts.len());

    let mut test = Command::new(promtool_exe());
    test.args(["test", "rules", "switchyard-alerts.test.yaml"])
        .current_dir(&dir);
    let tested = run(test).expect_ok();
    assert!(tested.stdout.contains("SUCCESS"), "{}", tested.stdout);

    // The unit tests prove every alert fires, not only that the rules stay quiet.
    let tests = yaml::document(&read(RULE_TESTS), "alert tests");
    let firing: BTreeSet<&str> = array_at(&tests, "/tests")
        .iter()
        .flat_map(|t| array_at(t, "/alert_rule_test"))
        .filter(|a| !array_at(a, "/exp_alerts").is_empty())
        .filter_map(|a| a["alertname"].as_str())
        .collect();
    assert_eq!(firing, alerts, "alerts without a unit test that fires them");

    // The chart's PrometheusRule reads a copy (a chart cannot read outside its directory).
    assert_eq!(
        read("helm/switchyard/files/switchyard-alerts.yaml"),
        read(RULES),
        "helm/switchyard/files/switchyard-alerts.yaml must be a copy of {RULES}"
    );
}

/// Every PromQL expression of the dashboard's panels (rows included).
fn dashboard_expressions(dashboard: &Value) -> Vec<String> {
    fn walk(panels: &[Value], out: &mut Vec<String>) {
        for panel in panels {
            for target in array_at(panel, "/targets") {
                if let Some(expr) = target["expr"].as_str() {
                    out.push(expr.to_owned());
                }
            }
            walk(array_at(panel, "/panels"), out);
        }
    }
    let mut exprs = Vec::new();
    walk(array_at(dashboard, "/panels"), &mut exprs);
    exprs
}

/// A histogram's series names to their family name.
fn family(name: &str) -> String {
    ["_bucket", "_sum", "_count"]
        .iter()
        .find_map(|s| name.strip_suffix(s))
        .unwrap_or(name)
        .to_owned()
}

#[test]
fn dashboard_and_alerts_use_only_metrics_and_labels_the_gateway_exports() {
    let exported = promql::exported();
    // What the registry exposed is every family src/metrics.rs declares, so a family left
    // out of promql::exported() cannot hide a problem.
    let exposed: BTreeSet<String> = exported.keys().map(|n| family(n)).collect();
    assert_eq!(
        exposed,
        promql::declared_in_source(),
        "families exposed vs names in src/metrics.rs: give a new labelled family a series in promql::exported()"
    );
    assert_eq!(
        exported["switchyard_config_reloads_total"],
        BTreeSet::from(["outcome".to_owned()])
    );

    let dashboard: Value = serde_json::from_str(&read("deploy/grafana/switchyard-dashboard.json"))
        .expect("the dashboard is JSON");
    let exprs = dashboard_expressions(&dashboard);
    let tests = yaml::document(&read(RULE_TESTS), "alert tests");
    let test_series: Vec<String> = array_at(&tests, "/tests")
        .iter()
        .flat_map(|t| array_at(t, "/input_series"))
        .filter_map(|s| s["series"].as_str().map(str::to_owned))
        .collect();

    let mut problems = Vec::new();
    for (source, exprs) in [
        ("dashboard", &exprs),
        ("alert rule", &rule_exprs()),
        ("alert test series", &test_series),
    ] {
        for expr in exprs {
            for problem in promql::problems(expr, &exported) {
                problems.push(format!("{source} `{expr}`: {problem}"));
            }
        }
    }
    // Names anywhere else in the dashboard (variable queries, descriptions) are real too.
    for name in promql::metric_names(&dashboard.to_string()) {
        if !exposed.contains(&family(&name)) {
            problems.push(format!("dashboard names unknown metric {name}"));
        }
    }
    assert!(problems.is_empty(), "{}", problems.join("\n"));

    // The dashboard shows every metric family.
    let shown: BTreeSet<String> = exprs
        .iter()
        .flat_map(|e| promql::metric_names(e))
        .map(|n| family(&n))
        .collect();
    let missing: Vec<&String> = exposed.difference(&shown).collect();
    assert!(
        missing.is_empty(),
        "metric families without a dashboard panel: {missing:?}"
    );

    // Prometheus itself parses every dashboard query (as recording rules, with Grafana's
    // variables replaced by what they expand to).
    let rules: Vec<Value> = exprs
        .iter()
        .enumerate()
        .map(|(i, expr)| {
            let expr = expr
                .replace("$__rate_interval", "5m")
                .replace("$tenant", ".*");
            json!({"record": format!("dashboard:query_{i}"), "expr": expr})
        })
        .collect();
    let dir = TempDir::new("chart-dashboard");
    let groups = json!({"groups": [{"name": "dashboard", "rules": rules}]});
    std::fs::write(dir.path("dashboard-rules.yaml"), groups.to_string()).expect("write rules");
    promtool_check_rules(&dir.0, "dashboard-rules.yaml", rules.len());
}
