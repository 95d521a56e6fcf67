//! What every rendering of the chart (and the plain manifests) must pass: helm lint,
//! kubernetes-validate, the gateway Deployment's invariants (security, probes, resources,
//! shutdown, arguments the gateway's CLI accepts, a config directory mount the hot reload can
//! see) and `switchyard check` of the routing config with the files and variables the pod has.

use std::collections::BTreeSet;
use std::path::{Path, PathBuf};
use std::process::Command;

use serde_json::Value;

use super::tools::{self, Helm, NEWEST_KUBERNETES};
use super::yaml::{self, all_of, array_at, one_of, selects, str_at};
use crate::support::TempDir;
use crate::support::config::gateway_exe;
use crate::support::peers::repo;

/// Where the chart mounts the ConfigMap (as a directory) and the file `--config` names.
pub const CONFIG_DIR: &str = "/etc/switchyard/config";
pub const CONFIG_FILE: &str = "/etc/switchyard/config/gateway.yaml";
/// The image's user (Dockerfile `USER 10001:10001`).
pub const IMAGE_UID: i64 = 10001;

pub fn chart_file(relative: &str) -> PathBuf {
    repo().join("helm/switchyard").join(relative)
}

fn chart_metadata() -> Value {
    let chart = std::fs::read_to_string(chart_file("Chart.yaml")).expect("Chart.yaml");
    yaml::document(&chart, "Chart.yaml")
}

/// The gateway version the chart deploys by default: `appVersion` in Chart.yaml, the image
/// tag (`<appVersion>` or `<appVersion>-runtimes`) when `image.tag` is empty.
pub fn app_version() -> String {
    str_at(&chart_metadata(), "/appVersion").to_owned()
}

/// The oldest Kubernetes the chart supports: `kubeVersion: ">=X.Y.Z-0"` in Chart.yaml.
pub fn oldest_kubernetes() -> String {
    let chart = chart_metadata();
    let constraint = str_at(&chart, "/kubeVersion");
    constraint
        .strip_prefix(">=")
        .and_then(|v| v.strip_suffix("-0"))
        .unwrap_or_else(|| panic!("kubeVersion {constraint:?} is not of the form >=X.Y.Z-0"))
        .to_owned()
}

/// Writes `text` into `dir` and runs kubernetes-validate (strict) on it for the oldest and the
/// newest supported Kubernetes.
pub fn validate_objects(dir: &TempDir, file_name: &str, text: &str, docs: &[Value]) {
    let file = dir.path(file_name);
    std::fs::write(&file, text).expect("write manifests");
    let oldest = oldest_kubernetes();
    tools::kubernetes_validate(
        &file,
        &yaml::kinds(docs),
        &[oldest.as_str(), NEWEST_KUBERNETES],
    );
}

/// `helm lint --strict`, `helm template`, kubernetes-validate, the Deployment's invariants and
/// `switchyard check` of the ConfigMap, for one values file. Returns the rendered objects and
/// what the gateway's check printed.
pub fn verified_render(
    helm: &Helm,
    dir: &TempDir,
    values: &Path,
    set: &[&str],
) -> (Vec<Value>, String) {
    let lint = helm.lint(values, set).expect_ok();
    assert!(
        lint.stdout.contains("1 chart(s) linted, 0 chart(s) failed"),
        "{}",
        lint.stdout
    );
    let rendered = helm.template(values, set).expect_ok().stdout;
    let what = format!("helm template with {}", values.display());
    let docs = yaml::documents(&rendered, &what);
    validate_objects(dir, "rendered.yaml", &rendered, &docs);
    gateway_invariants(&docs);
    let checked = check_routing_config(&docs, dir, &[]).expect_ok().stdout;
    (docs, checked)
}

/// The gateway container of the Deployment.
pub fn gateway_container(docs: &[Value]) -> &Value {
    let deployment = one_of(docs, "Deployment");
    array_at(deployment, "/spec/template/spec/containers")
        .iter()
        .find(|c| c["name"] == "switchyard")
        .unwrap_or_else(|| panic!("no container named switchyard in {deployment:#}"))
}

/// What the Deployment must get right whatever the values.
pub fn gateway_invariants(docs: &[Value]) {
    let deployment = one_of(docs, "Deployment");
    let pod = &deployment["spec"]["template"]["spec"];
    let pod_labels = &deployment["spec"]["template"]["metadata"]["labels"];
    let container = gateway_container(docs);

    // Non-root as the image's user, no privileges, read-only root, default seccomp.
    let pod_security = &pod["securityContext"];
    assert_eq!(pod_security["runAsNonRoot"], true, "{pod_security}");
    assert_eq!(pod_security["runAsUser"], IMAGE_UID, "{pod_security}");
    assert_eq!(pod_security["seccompProfile"]["type"], "RuntimeDefault");
    let security = &container["securityContext"];
    assert_eq!(security["runAsNonRoot"], true, "{security}");
    assert_eq!(security["allowPrivilegeEscalation"], false, "{security}");
    assert_eq!(security["readOnlyRootFilesystem"], true, "{security}");
    assert_eq!(security["capabilities"]["drop"], serde_json::json!(["ALL"]));
    assert_eq!(pod["automountServiceAccountToken"], false);

    // SIGKILL only after preStop and the gateway's whole drain deadline.
    let pre_stop = array_at(container, "/lifecycle/preStop/exec/command");
    let sleep_seconds: u64 = match pre_stop {
        [sleep, seconds] if sleep == "/bin/sleep" => seconds
            .as_str()
            .and_then(|s| s.parse().ok())
            .unwrap_or_else(|| panic!("preStop sleep {seconds} is not a number of seconds")),
        other => panic!("preStop is not [/bin/sleep, N]: {other:?}"),
    };
    let grace = pod["terminationGracePeriodSeconds"]
        .as_u64()
        .expect("terminationGracePeriodSeconds is set");
    let drain = switchyard::app::DRAIN_DEADLINE.as_secs();
    assert!(
        grace > drain + sleep_seconds,
        "terminationGracePeriodSeconds {grace} must exceed preStop {sleep_seconds}s + DRAIN_DEADLINE {drain}s"
    );

    // `run` on the mounted file; the ConfigMap mounted as a directory (a subPath mount is
    // never updated, which would silently defeat the hot reload).
    let args: Vec<&str> = array_at(container, "/args")
        .iter()
        .filter_map(Value::as_str)
        .collect();
    assert!(
        matches!(args.as_slice(), ["--log-format", "json" | "text", "run", "--config", file, "--reload-poll", poll] if *file == CONFIG_FILE && poll.parse::<f64>().is_ok_and(|p| p >= 0.0)),
        "gateway args: {args:?}"
    );
    accepted_by_the_gateway_cli(container);
    let resources = &container["resources"];
    for field in ["/requests/cpu", "/requests/memory", "/limits/memory"] {
        assert!(
            resources.pointer(field).is_some(),
            "resources{field} is set: {resources}"
        );
    }
    let mounts = array_at(container, "/volumeMounts");
    assert!(
        mounts.iter().all(|m| m.get("subPath").is_none()),
        "no subPath mounts (they never update): {mounts:?}"
    );
    let config_mount = mounts
        .iter()
        .find(|m| m["mountPath"] == CONFIG_DIR)
        .unwrap_or_else(|| panic!("nothing mounted at {CONFIG_DIR}: {mounts:?}"));
    let config_volume = array_at(pod, "/volumes")
        .iter()
        .find(|v| v["name"] == config_mount["name"])
        .expect("the config mount's volume");
    let config_map_name = str_at(config_volume, "/configMap/name");
    let config_map = all_of(docs, "ConfigMap")
        .into_iter()
        .find(|c| yaml::name(c) == config_map_name)
        .unwrap_or_else(|| panic!("ConfigMap {config_map_name} is mounted but not rendered"));
    let routing = yaml::document(
        str_at(config_map, "/data/gateway.yaml"),
        "the ConfigMap's gateway.yaml",
    );

    // Probes on the admin listener; its port and the MCP port are the config's listeners.
    for (probe, path) in [
        ("startupProbe", "/healthz"),
        ("livenessProbe", "/healthz"),
        ("readinessProbe", "/readyz"),
    ] {
        assert_eq!(container[probe]["httpGet"]["path"], path, "{probe}");
        assert_eq!(container[probe]["httpGet"]["port"], "admin", "{probe}");
    }
    let port = |name: &str| {
        array_at(container, "/ports")
            .iter()
            .find(|p| p["name"] == name)
            .and_then(|p| p["containerPort"].as_i64())
            .unwrap_or_else(|| panic!("no container port {name}"))
    };
    assert_eq!(routing["listen"], format!("0.0.0.0:{}", port("mcp")));
    assert_eq!(
        routing["admin_listen"],
        format!("0.0.0.0:{}", port("admin"))
    );

    // Everything that selects the pods selects them, by ports that exist.
    let port_names: BTreeSet<&str> = array_at(container, "/ports")
        .iter()
        .filter_map(|p| p["name"].as_str())
        .collect();
    for service in all_of(docs, "Service") {
        assert!(
            selects(&service["spec"]["selector"], pod_labels),
            "{service:#}"
        );
        for p in array_at(service, "/spec/ports") {
            let target = p["targetPort"].as_str().unwrap_or_default();
            assert!(
                port_names.contains(target),
                "Service port {p} targets no container port"
            );
        }
    }
    for pdb in all_of(docs, "PodDisruptionBudget") {
        assert!(
            selects(&pdb["spec"]["selector"]["matchLabels"], pod_labels),
            "{pdb:#}"
        );
    }
    for policy in all_of(docs, "NetworkPolicy") {
        assert!(selects(
            &policy["spec"]["podSelector"]["matchLabels"],
            pod_labels
        ));
        for rule in array_at(policy, "/spec/ingress") {
            for p in array_at(rule, "/ports") {
                let name = p["port"].as_str().unwrap_or_default();
                assert!(
                    port_names.contains(name),
                    "NetworkPolicy port {p} is no container port"
                );
            }
        }
    }
    for hpa in all_of(docs, "HorizontalPodAutoscaler") {
        assert_eq!(
            hpa["spec"]["scaleTargetRef"]["name"],
            deployment["metadata"]["name"]
        );
        assert!(
            deployment["spec"].get("replicas").is_none(),
            "with an HPA the Deployment must not set replicas (every apply would reset them)"
        );
    }

    // The migrate initContainer loads the same config: same env, files and restrictions.
    for init in array_at(pod, "/initContainers") {
        let init_args: Vec<&str> = array_at(init, "/args")
            .iter()
            .filter_map(Value::as_str)
            .collect();
        assert!(
            init_args.ends_with(&["migrate", "--config", CONFIG_FILE]),
            "initContainer args: {init_args:?}"
        );
        accepted_by_the_gateway_cli(init);
        for field in ["env", "envFrom", "volumeMounts", "securityContext", "image"] {
            assert_eq!(
                init.get(field),
                container.get(field),
                "initContainer {field}"
            );
        }
    }
}

/// The container's args (the image's ENTRYPOINT is the gateway) parse with the gateway's own
/// CLI: `--help` appended, so flag names and values are checked but nothing runs.
fn accepted_by_the_gateway_cli(container: &Value) {
    let mut cmd = Command::new(gateway_exe());
    for arg in array_at(container, "/args") {
        cmd.arg(arg.as_str().expect("string args"));
    }
    cmd.arg("--help");
    let ran = tools::run(cmd);
    assert!(
        ran.ok,
        "the gateway refuses the container args: {}\n{}",
        ran.shown, ran.stderr
    );
}

/// Runs the gateway's `switchyard check` on the ConfigMap's gateway.yaml as the pod would
/// load it: every `${VAR}` without a default must come from the container's env (or envFrom),
/// and gets a dummy value here (minus `unset`, to test that the check depends on them); files
/// the config names under the pod's volume mounts (TLS pair, header files) are created in a
/// temp dir and the paths pointed there.
pub fn check_routing_config(docs: &[Value], dir: &TempDir, unset: &[&str]) -> tools::Ran {
    let container = gateway_container(docs);
    let config_map = one_of(docs, "ConfigMap");
    let text = str_at(config_map, "/data/gateway.yaml");
    let routing = yaml::document(text, "the ConfigMap's gateway.yaml");

    // Variables: from the container's env by name, or possibly from an envFrom source.
    let env_names: BTreeSet<&str> = array_at(container, "/env")
        .iter()
        .filter_map(|e| e["name"].as_str())
        .collect();
    let has_env_from = !array_at(container, "/envFrom").is_empty();
    let mut values = Vec::new();
    collect_strings(&routing, &mut values);
    let required: BTreeSet<String> = values.iter().flat_map(|v| required_variables(v)).collect();
    for var in &required {
        assert!(
            env_names.contains(var.as_str()) || has_env_from,
            "the routing config needs ${{{var}}} but the container's env does not set it: {env_names:?}"
        );
    }

    // Files: under a mount other than the config dir and /tmp (Secrets, extra volumes).
    let mounts: Vec<String> = array_at(container, "/volumeMounts")
        .iter()
        .filter_map(|m| m["mountPath"].as_str())
        .filter(|p| *p != CONFIG_DIR && *p != "/tmp")
        .map(|p| format!("{}/", p.trim_end_matches('/')))
        .collect();
    let mut named_files = Vec::new();
    collect_strings(&routing, &mut named_files);
    named_files.retain(|s| mounts.iter().any(|m| s.starts_with(m.as_str())));
    named_files.sort();
    named_files.dedup();
    for file in file_fields(&routing) {
        assert!(
            named_files.contains(&file),
            "the routing config names {file}, which no volume of the pod provides (mounts: {mounts:?})"
        );
    }
    let root = dir.path("pod-files");
    let mut pod_text = text.to_owned();
    let (cert, key) = test_certificate();
    // Longest first, so no path is rewritten inside a longer one.
    named_files.sort_by_key(|f| std::cmp::Reverse(f.len()));
    for file in &named_files {
        let local = root.join(file.trim_start_matches('/'));
        std::fs::create_dir_all(local.parent().expect("a parent")).expect("mkdir");
        let content = if Some(file.as_str()) == routing["tls"]["cert"].as_str() {
            cert.clone()
        } else if Some(file.as_str()) == routing["tls"]["key"].as_str() {
            key.clone()
        } else {
            "chart-test-secret\n".to_owned()
        };
        std::fs::write(&local, content).expect("write a pod file");
        pod_text = pod_text.replace(file.as_str(), &local.display().to_string());
    }
    let config = dir.path("gateway.yaml");
    std::fs::write(&config, pod_text).expect("write gateway.yaml");

    let mut cmd = Command::new(gateway_exe());
    cmd.arg("check").arg("--config").arg(&config).env_clear();
    for var in required.iter().filter(|v| !unset.contains(&v.as_str())) {
        cmd.env(var, format!("chart-test-{}", var.to_lowercase()));
    }
    tools::run(cmd)
}

/// Names of `${VAR}` references without a default (`${VAR:-x}` has one; `$${` is a literal).
pub fn required_variables(text: &str) -> BTreeSet<String> {
    let mut vars = BTreeSet::new();
    let mut rest = text;
    while let Some(at) = rest.find("${") {
        let escaped = rest[..at].ends_with('$');
        let tail = &rest[at + 2..];
        let end = tail.find('}').unwrap_or(tail.len());
        let inner = &tail[..end];
        if !escaped && !inner.contains(":-") {
            vars.insert(inner.to_owned());
        }
        rest = &tail[end..];
    }
    vars
}

fn collect_strings(value: &Value, out: &mut Vec<String>) {
    match value {
        Value::String(s) => out.push(s.clone()),
        Value::Array(items) => items.iter().for_each(|i| collect_strings(i, out)),
        Value::Object(map) => map.values().for_each(|v| collect_strings(v, out)),
        _ => {}
    }
}

/// The fields of a routing config that name files the gateway opens: the TLS pair and HTTP
/// upstreams' header files.
fn file_fields(routing: &Value) -> Vec<String> {
    let mut files = Vec::new();
    for key in ["cert", "key"] {
        if let Some(path) = routing["tls"][key].as_str() {
            files.push(path.to_owned());
        }
    }
    for tenant in array_at(routing, "/tenants") {
        for upstream in array_at(tenant, "/upstreams") {
            if let Some(headers) = upstream["http"]["header_files"].as_object() {
                files.extend(
                    headers
                        .values()
                        .filter_map(|v| v.as_str().map(str::to_owned)),
                );
            }
        }
    }
    files
}

/// A self-signed certificate and key (PEM), standing in for the kubernetes.io/tls Secret.
fn test_certificate() -> (String, String) {
    let key = rcgen::KeyPair::generate().expect("key");
    let params = rcgen::CertificateParams::new(vec!["switchyard.test".to_owned()]).expect("params");
    let cert = params.self_signed(&key).expect("certificate");
    (cert.pem(), key.serialize_pem())
}

/// The routing config inside the rendered ConfigMap.
pub fn routing_config(docs: &[Value]) -> Value {
    let config_map = one_of(docs, "ConfigMap");
    yaml::document(
        str_at(config_map, "/data/gateway.yaml"),
        "the ConfigMap's gateway.yaml",
    )
}
