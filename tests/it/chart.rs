//! Kubernetes packaging checked with the real tools: the Helm chart (helm/switchyard) lints
//! and renders for every ci/ values file, its objects pass kubernetes-validate (strict) and
//! the routing config it renders passes the gateway's own `switchyard check`; bad values are
//! refused; the plain manifests in deploy/kubernetes are the chart's defaults; the alert rules
//! pass promtool's check and unit tests; and the dashboard and the alerts only name metrics
//! (and labels) the gateway exports. Tools come from scripts/install-test-deps.sh.

mod manifests;
mod promql;
mod tools;
mod yaml;

use std::collections::{BTreeMap, BTreeSet};
use std::process::Command;

use serde_json::{Value, json};

use self::manifests::{
    chart_file, check_routing_config, gateway_container, gateway_invariants, routing_config,
    validate_objects, verified_render,
};
use self::tools::{Helm, promtool_exe, run};
use self::yaml::{all_of, array_at, one_of, selects, str_at};
use crate::support::TempDir;
use crate::support::peers::repo;

/// The values files under helm/switchyard/ci/, each with a test below.
const CI_VALUES: &[&str] = &[
    "default-values.yaml",
    "ingress-otel-values.yaml",
    "tls-redis-two-tenants-values.yaml",
];

fn read(relative: &str) -> String {
    let path = repo().join(relative);
    std::fs::read_to_string(&path).unwrap_or_else(|e| panic!("{}: {e}", path.display()))
}

fn env_value<'a>(container: &'a Value, name: &str) -> &'a Value {
    array_at(container, "/env")
        .iter()
        .find(|e| e["name"] == name)
        .unwrap_or_else(|| panic!("no env {name} in {container:#}"))
}

#[test]
fn every_ci_values_file_has_a_test() {
    let mut found: Vec<String> = std::fs::read_dir(chart_file("ci"))
        .expect("helm/switchyard/ci")
        .map(|e| e.expect("entry").file_name().to_string_lossy().into_owned())
        .collect();
    found.sort();
    assert_eq!(found, CI_VALUES, "add a test for each new ci/ values file");
}

#[test]
fn default_values_render_one_memory_replica_with_the_demo_tenant() {
    let (helm, dir) = (Helm::new(), TempDir::new("chart-default"));
    let (docs, checked) = verified_render(&helm, &dir, &chart_file("ci/default-values.yaml"), &[]);

    let kinds: BTreeSet<String> = yaml::kinds(&docs).into_iter().collect();
    let expected: BTreeSet<String> = [
        "ConfigMap",
        "Deployment",
        "NetworkPolicy",
        "PodDisruptionBudget",
        "Service",
        "ServiceAccount",
    ]
    .map(String::from)
    .into();
    assert_eq!(
        kinds, expected,
        "no HPA, ServiceMonitor, PrometheusRule or Ingress by default"
    );
    assert_eq!(
        all_of(&docs, "Service").len(),
        2,
        "the MCP and the admin Service"
    );

    let deployment = one_of(&docs, "Deployment");
    assert_eq!(deployment["spec"]["replicas"], 1);
    let pod = &deployment["spec"]["template"];
    assert!(
        pod["spec"].get("initContainers").is_none(),
        "no migrate without Redis"
    );
    assert!(
        pod["metadata"].get("annotations").is_none(),
        "no checksum/config by default: config changes are hot-reloaded, not rolled"
    );
    let routing = routing_config(&docs);
    assert!(routing.get("tls").is_none());
    assert_eq!(routing["tenants"][0]["name"], "demo");
    assert!(
        checked.contains("ok (1 tenant(s), 1 upstream(s))"),
        "{checked}"
    );
}

#[test]
fn tls_redis_two_tenants_values_render_a_scaled_https_gateway() {
    let (helm, dir) = (Helm::new(), TempDir::new("chart-tls-redis"));
    let values = chart_file("ci/tls-redis-two-tenants-values.yaml");
    let (docs, checked) = verified_render(&helm, &dir, &values, &[]);
    assert!(
        checked.contains("ok (2 tenant(s), 2 upstream(s))"),
        "{checked}"
    );

    // Two tenants: one stdio upstream, one HTTP upstream with a credential from the env.
    let routing = routing_config(&docs);
    let tenants = array_at(&routing, "/tenants");
    let names: Vec<&Value> = tenants.iter().map(|t| &t["name"]).collect();
    assert_eq!(names, [&json!("acme"), &json!("globex")]);
    assert!(tenants[0]["upstreams"][0]["stdio"].is_object());
    assert!(tenants[1]["upstreams"][0]["http"].is_object());

    // HTTPS from the Secret, mounted as a directory the config points into.
    let deployment = one_of(&docs, "Deployment");
    let pod = &deployment["spec"]["template"]["spec"];
    let container = gateway_container(&docs);
    let tls_volume = array_at(pod, "/volumes")
        .iter()
        .find(|v| v["secret"]["secretName"] == "switchyard-tls")
        .expect("a volume from the TLS Secret");
    let tls_mount = array_at(container, "/volumeMounts")
        .iter()
        .find(|m| m["name"] == tls_volume["name"])
        .expect("the TLS volume is mounted");
    let tls_dir = str_at(tls_mount, "/mountPath");
    assert_eq!(routing["tls"]["cert"], format!("{tls_dir}/tls.crt"));
    assert_eq!(routing["tls"]["key"], format!("{tls_dir}/tls.key"));
    let mcp_service = all_of(&docs, "Service")
        .into_iter()
        .find(|s| s["spec"]["ports"][0]["name"] == "mcp")
        .expect("the MCP Service");
    assert_eq!(mcp_service["spec"]["ports"][0]["appProtocol"], "https");

    // Redis: the password from the existing Secret, and migrate before the gateway starts.
    let store_url = str_at(&routing, "/sessions/store/redis/url");
    assert!(store_url.contains("${REDIS_PASSWORD}"), "{store_url}");
    let password = env_value(container, "REDIS_PASSWORD");
    assert_eq!(
        password["valueFrom"]["secretKeyRef"]["name"],
        "switchyard-redis"
    );
    assert_eq!(
        password["valueFrom"]["secretKeyRef"]["key"],
        "redis-password"
    );
    let init = array_at(pod, "/initContainers");
    assert_eq!(init.len(), 1);
    assert_eq!(init[0]["name"], "migrate");
    // The check depends on the pod's variables: without the password it fails, naming it.
    let refused = check_routing_config(
        &docs,
        &TempDir::new("chart-no-password"),
        &["REDIS_PASSWORD"],
    )
    .expect_failure();
    assert!(refused.contains("REDIS_PASSWORD"), "{refused}");

    // Traces through the standard variables.
    assert_eq!(
        env_value(container, "OTEL_EXPORTER_OTLP_ENDPOINT")["value"],
        "http://otel-collector.observability.svc:4318"
    );
    assert_eq!(
        env_value(container, "OTEL_TRACES_SAMPLER_ARG")["value"],
        "0.05"
    );

    // Scaling and disruption.
    assert!(
        deployment["spec"].get("replicas").is_none(),
        "the HPA owns replicas"
    );
    let hpa = one_of(&docs, "HorizontalPodAutoscaler");
    assert_eq!(hpa["apiVersion"], "autoscaling/v2");
    assert_eq!(
        (
            hpa["spec"]["minReplicas"].as_i64(),
            hpa["spec"]["maxReplicas"].as_i64()
        ),
        (Some(3), Some(10))
    );
    let resources: Vec<&Value> = array_at(hpa, "/spec/metrics")
        .iter()
        .map(|m| &m["resource"]["name"])
        .collect();
    assert_eq!(resources, [&json!("cpu"), &json!("memory")]);
    let pdb = one_of(&docs, "PodDisruptionBudget");
    assert_eq!(pdb["spec"]["minAvailable"], 2);
    assert!(pdb["spec"].get("maxUnavailable").is_none());

    // NetworkPolicy: MCP from the ingress controller, admin from monitoring, egress locked
    // down to DNS and the listed destinations.
    let policy = one_of(&docs, "NetworkPolicy");
    assert_eq!(policy["spec"]["policyTypes"], json!(["Ingress", "Egress"]));
    let from_namespace = |rule: &Value| {
        rule["from"][0]["namespaceSelector"]["matchLabels"]["kubernetes.io/metadata.name"].clone()
    };
    let ingress = array_at(policy, "/spec/ingress");
    assert_eq!(ingress[0]["ports"][0]["port"], "mcp");
    assert_eq!(from_namespace(&ingress[0]), "ingress-nginx");
    assert_eq!(ingress[1]["ports"][0]["port"], "admin");
    assert_eq!(from_namespace(&ingress[1]), "monitoring");
    let egress = array_at(policy, "/spec/egress");
    assert_eq!(egress[0]["ports"][0]["port"], 53, "DNS first");
    assert!(
        egress.iter().any(|r| r["ports"][0]["port"] == 6379),
        "Redis"
    );

    // ServiceMonitor: scrapes the admin Service only, as job "switchyard".
    let monitor = one_of(&docs, "ServiceMonitor");
    assert_eq!(monitor["apiVersion"], "monitoring.coreos.com/v1");
    let selector = &monitor["spec"]["selector"]["matchLabels"];
    let selected: Vec<&Value> = all_of(&docs, "Service")
        .into_iter()
        .filter(|s| selects(selector, &s["metadata"]["labels"]))
        .collect();
    assert_eq!(selected.len(), 1, "exactly one Service scraped");
    let admin = selected[0];
    let endpoint = &monitor["spec"]["endpoints"][0];
    assert!(
        array_at(admin, "/spec/ports")
            .iter()
            .any(|p| p["name"] == endpoint["port"])
    );
    assert_eq!(endpoint["path"], "/metrics");
    let job_label = str_at(monitor, "/spec/jobLabel");
    assert_eq!(admin["metadata"]["labels"][job_label], "switchyard");
    assert!(read("deploy/prometheus/switchyard-alerts.yaml").contains("job=\"switchyard\""));

    // PrometheusRule: the same groups as deploy/prometheus (which promtool checks).
    let rule = one_of(&docs, "PrometheusRule");
    let alerts = yaml::document(&read("deploy/prometheus/switchyard-alerts.yaml"), "alerts");
    assert_eq!(rule["spec"]["groups"], alerts["groups"]);
}

#[test]
fn ingress_otel_values_render_an_ingress_and_roll_pods_on_config_changes() {
    let (helm, dir) = (Helm::new(), TempDir::new("chart-ingress"));
    let values = chart_file("ci/ingress-otel-values.yaml");
    let (docs, checked) = verified_render(&helm, &dir, &values, &[]);
    assert!(
        checked.contains("ok (1 tenant(s), 2 upstream(s))"),
        "{checked}"
    );

    let ingress = one_of(&docs, "Ingress");
    let backend = &ingress["spec"]["rules"][0]["http"]["paths"][0]["backend"]["service"];
    let service = all_of(&docs, "Service")
        .into_iter()
        .find(|s| s["metadata"]["name"] == backend["name"])
        .expect("the Ingress backend Service is rendered");
    assert!(
        array_at(service, "/spec/ports")
            .iter()
            .any(|p| p["name"] == backend["port"]["name"])
    );
    assert_eq!(backend["port"]["name"], "mcp", "never the admin port");

    let container = gateway_container(&docs);
    assert_eq!(
        container["envFrom"][0]["secretRef"]["name"],
        "switchyard-tools-env"
    );
    assert_eq!(
        env_value(container, "OTEL_EXPORTER_OTLP_PROTOCOL")["value"],
        "http/protobuf"
    );
    assert_eq!(container["args"][1], "text");

    // rollOnConfigChange: the checksum follows the ConfigMap.
    let checksum = |docs: &[Value]| {
        one_of(docs, "Deployment")["spec"]["template"]["metadata"]["annotations"]["checksum/config"]
            .as_str()
            .map(str::to_owned)
            .expect("a checksum/config annotation")
    };
    let before = checksum(&docs);
    assert_eq!(before.len(), 64, "a sha256: {before}");
    let changed = helm
        .template(&values, &["config.sessions.ttl=2h"])
        .expect_ok()
        .stdout;
    let changed = yaml::documents(&changed, "re-rendered with another ttl");
    assert_ne!(checksum(&changed), before);
}

#[test]
fn invalid_values_are_refused_by_the_schema() {
    let helm = Helm::new();
    let values = repo().join("tests/helm/invalid-values.yaml");
    let refused = helm.template(&values, &[]).expect_failure();
    assert!(
        refused.contains("values don't meet the specifications of the schema(s)"),
        "{refused}"
    );
    for problem in [
        "Additional property replicaCont is not allowed",
        "logging.format: logging.format must be one of the following: \"json\", \"text\"",
        "service.port: Must be less than or equal to 65535",
        "tls.secretName: String length must be greater than or equal to 1",
        "config.tenants: Array must have at least 1 items",
        "configReloadPollSeconds: Must be greater than or equal to 0",
        "opentelemetry.protocol: opentelemetry.protocol must be one of the following: \"\", \"http/protobuf\"",
    ] {
        assert!(
            refused.contains(problem),
            "missing {problem:?} in:\n{refused}"
        );
    }
    let lint = helm.lint(&values, &[]).expect_failure();
    assert!(
        lint.contains("Additional property replicaCont is not allowed"),
        "{lint}"
    );
}

/// `fail` checks the schema cannot express. (helm lint only reports a template `fail` as
/// INFO, so they are tested through helm template.)
#[test]
fn the_chart_refuses_what_the_memory_store_and_the_drain_cannot_support() {
    let helm = Helm::new();
    let defaults = chart_file("ci/default-values.yaml");
    for (set, message) in [
        (
            "replicaCount=2",
            "replicaCount > 1 needs the Redis session store",
        ),
        (
            "autoscaling.enabled=true",
            "autoscaling.enabled needs the Redis session store",
        ),
        (
            "terminationGracePeriodSeconds=15",
            "terminationGracePeriodSeconds (15) must exceed preStopSleepSeconds (5)",
        ),
        (
            "config.listen=0.0.0.0:1",
            "config.listen is set by the chart",
        ),
    ] {
        let refused = helm.template(&defaults, &[set]).expect_failure();
        assert!(refused.contains(message), "--set {set}: {refused}");
    }
    // The control: with Redis, several replicas are fine (HPA off, so replicas is rendered).
    let redis = chart_file("ci/tls-redis-two-tenants-values.yaml");
    let rendered = helm
        .template(&redis, &["autoscaling.enabled=false"])
        .expect_ok()
        .stdout;
    let docs = yaml::documents(&rendered, "Redis without HPA");
    assert_eq!(one_of(&docs, "Deployment")["spec"]["replicas"], 3);
}

/// The objects of deploy/kubernetes as applied by `kubectl apply -k`.
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

/// An object without what only Helm adds: its bookkeeping labels and the release namespace;
/// the routing config parsed, so comments and key order do not count.
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
        let parsed = yaml::document(text, "gateway.yaml");
        doc["data"]["gateway.yaml"] = parsed;
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
        checked.contains("ok (1 tenant(s), 1 upstream(s))"),
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

#[test]
fn alert_rules_pass_promtool_check_and_unit_tests() {
    let dir = repo().join("deploy/prometheus");
    let rules = yaml::document(&read("deploy/prometheus/switchyard-alerts.yaml"), "alerts");
    let count: usize = array_at(&rules, "/groups")
        .iter()
        .map(|g| array_at(g, "/rules").len())
        .sum();
    let mut check = Command::new(promtool_exe());
    check
        .args(["check", "rules", "switchyard-alerts.yaml"])
        .current_dir(&dir);
    let checked = run(check).expect_ok();
    assert!(
        checked
            .stdout
            .contains(&format!("SUCCESS: {count} rules found")),
        "{}",
        checked.stdout
    );

    let mut test = Command::new(promtool_exe());
    test.args(["test", "rules", "switchyard-alerts.test.yaml"])
        .current_dir(&dir);
    let tested = run(test).expect_ok();
    assert!(tested.stdout.contains("SUCCESS"), "{}", tested.stdout);

    // The unit tests prove alerts fire, not only that they stay quiet.
    let tests = yaml::document(
        &read("deploy/prometheus/switchyard-alerts.test.yaml"),
        "alert tests",
    );
    let firing: BTreeSet<&str> = array_at(&tests, "/tests")
        .iter()
        .flat_map(|t| array_at(t, "/alert_rule_test"))
        .filter(|a| !array_at(a, "/exp_alerts").is_empty())
        .filter_map(|a| a["alertname"].as_str())
        .collect();
    assert!(firing.len() >= 2, "alerts proven to fire: {firing:?}");

    // The chart's PrometheusRule reads a copy (a chart cannot read outside its directory).
    assert_eq!(
        read("helm/switchyard/files/switchyard-alerts.yaml"),
        read("deploy/prometheus/switchyard-alerts.yaml"),
        "helm/switchyard/files/switchyard-alerts.yaml must be a copy of deploy/prometheus/switchyard-alerts.yaml"
    );
}

/// Every PromQL expression of the dashboard (targets and template variable queries).
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

#[test]
fn dashboard_and_alerts_use_only_metrics_and_labels_the_gateway_exports() {
    let exported = promql::exported();
    assert!(
        exported.contains_key("switchyard_stdio_processes"),
        "{exported:?}"
    );
    assert!(
        exported.contains_key("switchyard_request_duration_seconds_bucket"),
        "histograms are exposed with their suffixes: {exported:?}"
    );

    let dashboard: Value = serde_json::from_str(&read("deploy/grafana/switchyard-dashboard.json"))
        .expect("the dashboard is JSON");
    let exprs = dashboard_expressions(&dashboard);
    assert!(exprs.len() >= 15, "dashboard queries: {}", exprs.len());
    let rules = yaml::document(&read("deploy/prometheus/switchyard-alerts.yaml"), "alerts");
    let rule_exprs: Vec<String> = array_at(&rules, "/groups")
        .iter()
        .flat_map(|g| array_at(g, "/rules"))
        .filter_map(|r| r["expr"].as_str().map(str::to_owned))
        .collect();
    let tests = yaml::document(
        &read("deploy/prometheus/switchyard-alerts.test.yaml"),
        "alert tests",
    );
    let test_series: Vec<String> = array_at(&tests, "/tests")
        .iter()
        .flat_map(|t| array_at(t, "/input_series"))
        .filter_map(|s| s["series"].as_str().map(str::to_owned))
        .collect();

    let mut problems = Vec::new();
    for (source, exprs) in [
        ("dashboard", &exprs),
        ("alert rule", &rule_exprs),
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
        let histogram = format!("{name}_bucket");
        if !exported.contains_key(&name) && !exported.contains_key(&histogram) {
            problems.push(format!("dashboard names unknown metric {name}"));
        }
    }
    assert!(problems.is_empty(), "{}", problems.join("\n"));

    // The dashboard shows every metric family.
    let used: BTreeSet<String> = exprs.iter().flat_map(|e| promql::metric_names(e)).collect();
    let family = |name: &str| {
        ["_bucket", "_sum", "_count"]
            .iter()
            .find_map(|s| name.strip_suffix(s))
            .unwrap_or(name)
            .to_owned()
    };
    let shown: BTreeSet<String> = used.iter().map(|n| family(n)).collect();
    let all: BTreeSet<String> = exported.keys().map(|n| family(n)).collect();
    let missing: Vec<&String> = all.difference(&shown).collect();
    assert!(
        missing.is_empty(),
        "metric families without a dashboard panel: {missing:?}"
    );

    // And Prometheus itself parses every dashboard query (as recording rules, with Grafana's
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
    let count = rules.len();
    let file = TempDir::new("chart-dashboard");
    let path = file.path("dashboard-rules.yaml");
    let groups = json!({"groups": [{"name": "dashboard", "rules": rules}]});
    std::fs::write(&path, groups.to_string()).expect("write rules");
    let mut check = Command::new(promtool_exe());
    check.args(["check", "rules"]).arg(&path);
    let checked = run(check).expect_ok();
    assert!(
        checked
            .stdout
            .contains(&format!("SUCCESS: {count} rules found")),
        "{}",
        checked.stdout
    );
}
