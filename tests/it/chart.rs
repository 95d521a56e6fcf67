//! Kubernetes packaging checked with the real tools (helm, kubernetes-validate, promtool from
//! scripts/install-test-deps.sh). This file: every ci/ values file of the Helm chart
//! (helm/switchyard) lints, renders and passes the checks of `render`, with what each one is
//! for; bad values are refused by the schema, and what the schema cannot express by the
//! templates. The plain manifests, the alerts and the dashboard, and the container images the
//! chart deploys have their own modules.

mod build_context;
mod dockerfile;
mod image;
mod monitoring;
mod plain;
mod promql;
mod render;
mod tools;
mod yaml;

use std::collections::BTreeSet;

use serde_json::{Value, json};

use self::render::{
    app_version, chart_file, check_routing_config, gateway_container, routing_config,
    verified_render,
};
use self::tools::Helm;
use self::yaml::{all_of, array_at, one_of, selects, str_at};
use crate::support::TempDir;
use crate::support::peers::repo;

/// The values files under helm/switchyard/ci/, each with a test below.
const CI_VALUES: &[&str] = &[
    "default-values.yaml",
    "ingress-otel-values.yaml",
    "runtimes-npx-uvx-values.yaml",
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
    // The gateway polls the mounted file every configReloadPollSeconds (5 by default).
    let poll = |docs: &[Value]| {
        let args = array_at(gateway_container(docs), "/args");
        let at = args
            .iter()
            .position(|a| a == "--reload-poll")
            .expect("--reload-poll");
        args[at + 1].clone()
    };
    assert_eq!(poll(&docs), "5");
    let off = helm
        .template(
            &chart_file("ci/default-values.yaml"),
            &["configReloadPollSeconds=0"],
        )
        .expect_ok()
        .stdout;
    assert_eq!(poll(&yaml::documents(&off, "polling off")), "0");
    let routing = routing_config(&docs);
    assert!(routing.get("tls").is_none());
    assert_eq!(routing["tenants"][0]["name"], "demo");
    assert!(
        checked.contains("ok (1 tenant(s), 1 upstream(s)"),
        "{checked}"
    );
}

#[test]
fn tls_redis_two_tenants_values_render_a_scaled_https_gateway() {
    let (helm, dir) = (Helm::new(), TempDir::new("chart-tls-redis"));
    let values = chart_file("ci/tls-redis-two-tenants-values.yaml");
    let (docs, checked) = verified_render(&helm, &dir, &values, &[]);
    assert!(
        checked.contains("ok (2 tenant(s), 2 upstream(s)"),
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
        checked.contains("ok (1 tenant(s), 2 upstream(s)"),
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
    // Traces: OTLP/HTTP (the only protocol the gateway exports) to the collector's 4318.
    assert_eq!(
        env_value(container, "OTEL_EXPORTER_OTLP_ENDPOINT")["value"],
        "http://otel-collector.observability.svc:4318"
    );
    assert_eq!(
        env_value(container, "OTEL_SERVICE_NAME")["value"],
        "switchyard-tools"
    );
    assert!(
        array_at(container, "/env")
            .iter()
            .all(|e| e["name"] != "OTEL_EXPORTER_OTLP_PROTOCOL"),
        "no protocol variable: OTLP/HTTP protobuf is the exporter's default and only choice"
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
fn runtimes_values_render_the_runtimes_image_with_npx_and_uvx_upstreams() {
    let (helm, dir) = (Helm::new(), TempDir::new("chart-runtimes"));
    let values = chart_file("ci/runtimes-npx-uvx-values.yaml");
    let (docs, checked) = verified_render(&helm, &dir, &values, &[]);
    assert!(
        checked.contains("ok (1 tenant(s), 2 upstream(s)"),
        "{checked}"
    );
    let version = app_version();
    let image = |docs: &[Value]| str_at(gateway_container(docs), "/image").to_owned();
    assert_eq!(image(&docs), format!("switchyard:{version}-runtimes"));

    // npx and uvx are spawned by name (found on the image's PATH), with HOME on the writable
    // /tmp, where their caches go; the filesystem server serves a volume of the pod.
    let upstreams = array_at(&routing_config(&docs), "/tenants/0/upstreams").to_vec();
    let commands: Vec<&Value> = upstreams.iter().map(|u| &u["stdio"]["command"]).collect();
    assert_eq!(commands, [&json!("npx"), &json!("uvx")]);
    let container = gateway_container(&docs);
    assert_eq!(env_value(container, "HOME")["value"], "/tmp");
    let served = upstreams[0]["stdio"]["args"]
        .as_array()
        .and_then(|a| a.last())
        .expect("the served directory");
    assert!(
        array_at(container, "/volumeMounts")
            .iter()
            .any(|m| &m["mountPath"] == served),
        "{served} is not a mount"
    );
    let tmp = array_at(
        &one_of(&docs, "Deployment")["spec"]["template"]["spec"],
        "/volumes",
    )
    .iter()
    .find(|v| v["name"] == "tmp")
    .expect("the /tmp volume")
    .clone();
    assert_eq!(tmp["emptyDir"]["sizeLimit"], "1Gi");

    // An explicit tag gets the suffix too; a digest names one image and wins.
    let tagged = helm
        .template(&values, &["image.tag=1.2.3"])
        .expect_ok()
        .stdout;
    assert_eq!(
        image(&yaml::documents(&tagged, "runtimes, tag 1.2.3")),
        "switchyard:1.2.3-runtimes"
    );
    let digest = format!("sha256:{}", "ab".repeat(32));
    let pinned = helm
        .template(&values, &[&format!("image.digest={digest}")])
        .expect_ok()
        .stdout;
    assert_eq!(
        image(&yaml::documents(&pinned, "runtimes, digest")),
        format!("switchyard@{digest}")
    );

    // The default variant is the slim image under the plain tag; others are refused.
    let defaults = chart_file("ci/default-values.yaml");
    let slim = helm.template(&defaults, &[]).expect_ok().stdout;
    assert_eq!(
        image(&yaml::documents(&slim, "defaults")),
        format!("switchyard:{version}")
    );
    let refused = helm
        .template(&defaults, &["image.variant=alpine"])
        .expect_failure();
    assert!(
        refused.contains(
            "image.variant: image.variant must be one of the following: \"slim\", \"runtimes\""
        ),
        "{refused}"
    );
}

/// Redis Sentinel: the store block under `config` (master, sentinels, the data nodes' password
/// from the existing Secret) passes the schema and `switchyard check`, scales, and migrates
/// first; `url` and `sentinel` together are refused by the schema.
#[test]
fn a_sentinel_store_renders_a_scaled_gateway_that_passes_check() {
    let (helm, dir) = (Helm::new(), TempDir::new("chart-sentinel"));
    let values = dir.path("sentinel-values.yaml");
    std::fs::write(
        &values,
        "replicaCount: 3\n\
         redis:\n  existingSecret: switchyard-redis\n\
         config:\n  sessions:\n    store:\n      redis:\n        sentinel:\n\
         \x20         master: mymaster\n\
         \x20         nodes: [\"redis://redis-sentinel-0.redis-sentinel:26379\", \"redis://redis-sentinel-1.redis-sentinel:26379\"]\n\
         \x20         password: \"${REDIS_PASSWORD}\"\n\
         \x20       prefix: sy\n",
    )
    .expect("values file");
    let (docs, checked) = verified_render(&helm, &dir, &values, &[]);
    assert!(checked.contains("ok (1 tenant(s)"), "{checked}");
    let routing = routing_config(&docs);
    assert_eq!(
        str_at(&routing, "/sessions/store/redis/sentinel/master"),
        "mymaster"
    );
    let deployment = one_of(&docs, "Deployment");
    assert_eq!(deployment["spec"]["replicas"], 3);
    let init = array_at(&deployment["spec"]["template"]["spec"], "/initContainers");
    assert_eq!(init[0]["name"], "migrate");
    let password = env_value(gateway_container(&docs), "REDIS_PASSWORD");
    assert_eq!(
        password["valueFrom"]["secretKeyRef"]["name"],
        "switchyard-redis"
    );

    let refused = helm
        .template(&values, &["config.sessions.store.redis.url=redis://r:6379"])
        .expect_failure();
    assert!(
        refused.contains("values don't meet the specifications of the schema(s)"),
        "{refused}"
    );
}

#[test]
fn a_redis_cluster_store_renders_its_seeds_and_url_with_cluster_is_refused() {
    let (helm, dir) = (Helm::new(), TempDir::new("chart-redis-cluster"));
    // The production-shaped values with the seeds of a cluster instead of the URL.
    let production = read("helm/switchyard/ci/tls-redis-two-tenants-values.yaml");
    let url_line =
        "        url: \"redis://:${REDIS_PASSWORD}@redis-master.data.svc.cluster.local:6379/0\"\n";
    assert!(production.contains(url_line));
    let seeds = "        cluster:\n          - \"redis://:${REDIS_PASSWORD}@rc-0.rc:6379\"\n          - \"redis://:${REDIS_PASSWORD}@rc-1.rc:6379\"\n";
    let values = dir.path("cluster-values.yaml");
    std::fs::write(&values, production.replace(url_line, seeds)).expect("values");
    let (docs, checked) = verified_render(&helm, &dir, &values, &[]);
    assert!(checked.contains("ok (2 tenant(s)"), "{checked}");
    let routing = routing_config(&docs);
    assert_eq!(
        routing["sessions"]["store"]["redis"]["cluster"],
        json!([
            "redis://:${REDIS_PASSWORD}@rc-0.rc:6379",
            "redis://:${REDIS_PASSWORD}@rc-1.rc:6379"
        ])
    );
    assert!(routing["sessions"]["store"]["redis"].get("url").is_none());
    // Pods still migrate first, and the password still comes from the Secret.
    let container = gateway_container(&docs);
    assert_eq!(
        env_value(container, "REDIS_PASSWORD")["valueFrom"]["secretKeyRef"]["name"],
        "switchyard-redis"
    );

    let both = dir.path("both-values.yaml");
    std::fs::write(
        &both,
        production.replace(url_line, &format!("{url_line}{seeds}")),
    )
    .expect("values");
    let refused = helm.template(&both, &[]).expect_failure();
    assert!(
        refused.contains("values don't meet the specifications of the schema(s)"),
        "{refused}"
    );
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
        "opentelemetry: Additional property protocol is not allowed",
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
            "config.listen=0.0.0.0:1",
            "config.listen is set by the chart",
        ),
    ] {
        let refused = helm.template(&defaults, &[set]).expect_failure();
        assert!(refused.contains(message), "--set {set}: {refused}");
    }
    // The grace period must exceed preStop + the gateway's drain deadline: the boundary, from
    // the gateway's own constant and the default preStop of 5 s.
    let drain = switchyard::app::DRAIN_DEADLINE.as_secs();
    let at_boundary = format!("terminationGracePeriodSeconds={}", 5 + drain);
    let refused = helm.template(&defaults, &[&at_boundary]).expect_failure();
    let message = format!(
        "terminationGracePeriodSeconds ({}) must exceed preStopSleepSeconds (5) + the gateway's {drain} s drain deadline",
        5 + drain
    );
    assert!(refused.contains(&message), "--set {at_boundary}: {refused}");
    let above = format!("terminationGracePeriodSeconds={}", 6 + drain);
    helm.template(&defaults, &[&above]).expect_ok();

    // The control: with Redis, several replicas are fine (HPA off, so replicas is rendered).
    let redis = chart_file("ci/tls-redis-two-tenants-values.yaml");
    let rendered = helm
        .template(&redis, &["autoscaling.enabled=false"])
        .expect_ok()
        .stdout;
    let docs = yaml::documents(&rendered, "Redis without HPA");
    assert_eq!(one_of(&docs, "Deployment")["spec"]["replicas"], 3);
}
