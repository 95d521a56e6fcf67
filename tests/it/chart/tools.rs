//! The external tools of the packaging tests — helm, kubernetes-validate, hadolint (all in
//! `$SWITCHYARD_PEERS/k8s-venv`) and promtool (`$SWITCHYARD_PEERS/prometheus`) — located and
//! run. A missing tool fails the test with the command that installs it; nothing is skipped.

use std::path::{Path, PathBuf};
use std::process::{Command, Output};

use crate::support::TempDir;
use crate::support::peers::repo;

/// The newest Kubernetes whose schemas the pinned kubernetes-validate (1.37.0, see
/// tests/peers/requirements-k8s.txt) bundles; the oldest validated is the chart's kubeVersion.
pub const NEWEST_KUBERNETES: &str = "1.37.0";

/// Kinds kubernetes-validate has no schema for (Prometheus operator CRDs). Their shape is
/// checked by the tests themselves instead.
pub const CRD_KINDS: &[&str] = &["ServiceMonitor", "PrometheusRule"];

/// `$SWITCHYARD_PEERS`, else `<repo>/target/peers` (like support::peers, but without requiring
/// the MCP peers, which these tests do not use).
fn peers() -> PathBuf {
    std::env::var_os("SWITCHYARD_PEERS")
        .map(PathBuf::from)
        .unwrap_or_else(|| repo().join("target/peers"))
}

fn require(relative: &str) -> PathBuf {
    let path = peers().join(relative);
    assert!(
        path.is_file(),
        "packaging test tool missing: {}\nInstall the pinned test tools first: bash scripts/install-test-deps.sh \
         (or run the whole suite with bash scripts/test.sh)",
        path.display()
    );
    path
}

pub fn helm_exe() -> PathBuf {
    require("k8s-venv/bin/helm")
}

pub fn kubernetes_validate_exe() -> PathBuf {
    require("k8s-venv/bin/kubernetes-validate")
}

pub fn hadolint_exe() -> PathBuf {
    require("k8s-venv/bin/hadolint")
}

pub fn promtool_exe() -> PathBuf {
    require("prometheus/usr/bin/promtool")
}

/// A finished command: status, stdout and stderr as text.
pub struct Ran {
    pub ok: bool,
    pub stdout: String,
    pub stderr: String,
    pub shown: String,
}

impl Ran {
    fn from(shown: String, out: Output) -> Ran {
        Ran {
            ok: out.status.success(),
            stdout: String::from_utf8_lossy(&out.stdout).into_owned(),
            stderr: String::from_utf8_lossy(&out.stderr).into_owned(),
            shown: format!("{shown} ({})", out.status),
        }
    }

    /// Panics with the command's output unless it succeeded.
    pub fn expect_ok(self) -> Ran {
        assert!(
            self.ok,
            "{} failed\nstdout:\n{}\nstderr:\n{}",
            self.shown, self.stdout, self.stderr
        );
        self
    }

    /// Panics unless the command failed, returning its stderr and stdout together.
    pub fn expect_failure(self) -> String {
        assert!(
            !self.ok,
            "{} succeeded but should have failed\nstdout:\n{}",
            self.shown, self.stdout
        );
        format!("{}{}", self.stderr, self.stdout)
    }
}

pub fn run(mut cmd: Command) -> Ran {
    let shown = format!("{cmd:?}");
    let out = cmd
        .output()
        .unwrap_or_else(|e| panic!("{shown} could not be started: {e}"));
    Ran::from(shown, out)
}

/// helm with its cache, config and data homes in a private temp dir, so nothing is written
/// to $HOME and no user repositories or plugins are seen.
pub struct Helm {
    home: TempDir,
}

impl Helm {
    pub fn new() -> Helm {
        Helm {
            home: TempDir::new("helm-home"),
        }
    }

    pub fn command(&self, args: &[&str]) -> Command {
        let mut cmd = Command::new(helm_exe());
        cmd.args(args)
            .current_dir(repo())
            .env("HELM_CACHE_HOME", self.home.path("cache"))
            .env("HELM_CONFIG_HOME", self.home.path("config"))
            .env("HELM_DATA_HOME", self.home.path("data"))
            // Never talk to a cluster, whatever the environment says.
            .env("KUBECONFIG", self.home.path("no-kubeconfig"));
        cmd
    }

    /// `helm lint --strict` of the chart with a values file (and extra `--set`s).
    pub fn lint(&self, values: &Path, set: &[&str]) -> Ran {
        let values = values.display().to_string();
        let mut args = vec!["lint", "--strict", "helm/switchyard", "-f", &values];
        for s in set {
            args.extend(["--set", s]);
        }
        run(self.command(&args))
    }

    /// `helm template switchyard helm/switchyard` with a values file (and extra `--set`s).
    pub fn template(&self, values: &Path, set: &[&str]) -> Ran {
        let values = values.display().to_string();
        let mut args = vec!["template", "switchyard", "helm/switchyard", "-f", &values];
        for s in set {
            args.extend(["--set", s]);
        }
        run(self.command(&args))
    }
}

/// `kubernetes-validate --strict` (unknown fields are errors) of a multi-document file against
/// each Kubernetes version; `kinds` are the kinds of its objects, to check every object was
/// validated except the CRD kinds it has no schema for.
pub fn kubernetes_validate(file: &Path, kinds: &[String], versions: &[&str]) {
    let mut cmd = Command::new(kubernetes_validate_exe());
    cmd.arg("--strict");
    for v in versions {
        cmd.args(["-k", v]);
    }
    cmd.arg(file);
    let ran = run(cmd).expect_ok();
    let lines: Vec<&str> = ran.stdout.lines().collect();
    let errors: Vec<&&str> = lines.iter().filter(|l| !l.starts_with("INFO ")).collect();
    for line in &errors {
        let about_crd = line.starts_with("WARN ")
            && CRD_KINDS
                .iter()
                .any(|k| line.contains(&format!("Couldn't find schema for kind {k} ")));
        assert!(
            about_crd,
            "kubernetes-validate on {}: unexpected line (only Prometheus operator CRDs may lack a schema):\n{line}\n\nfull output:\n{}",
            file.display(),
            ran.stdout
        );
    }
    let schema_kinds = kinds
        .iter()
        .filter(|k| !CRD_KINDS.contains(&k.as_str()))
        .count();
    let passed = lines
        .iter()
        .filter(|l| l.contains(" passed for resource "))
        .count();
    assert_eq!(
        passed,
        schema_kinds * versions.len(),
        "kubernetes-validate on {} did not pass every object ({schema_kinds} with a schema) against every version {versions:?}:\n{}",
        file.display(),
        ran.stdout
    );
}
