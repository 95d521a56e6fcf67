//! The official MCP conformance suite (server scenarios) against the gateway fronting the
//! project's fixture upstream with prefix mode `never`, as a per-session stdio child and as a
//! Streamable HTTP upstream, session-based and (for the 2026-07-28 runs) stateless. Known failures are listed, with their owner, in
//! `tests/conformance/baseline-*.yaml`; the suite also fails on stale entries.

use std::process::Stdio;
use std::time::Duration;

use tokio::process::Command;

use crate::support::TempDir;
use crate::support::config::{config, demo_server_exe, http, stdio, tenant, upstream};
use crate::support::gateway::TestGateway;
use crate::support::peers::{HttpPeer, free_port, node, peers_dir, repo};
use switchyard::config::{PrefixMode, StdioSharing, UpstreamConfig, UpstreamTransport};

/// The fixture as a per-session stdio upstream (so each session's capabilities reach it);
/// `extra` adds `--stateless` for a fixture that speaks 2026-07-28 too.
fn fixture_stdio(extra: &[&str]) -> UpstreamConfig {
    let mut args = vec!["--stdio", "--conformance"];
    args.extend_from_slice(extra);
    let mut s = stdio(demo_server_exe().display().to_string(), &args);
    s.sharing = StdioSharing::PerSession;
    fixture(UpstreamTransport::Stdio(s))
}

fn fixture(transport: UpstreamTransport) -> UpstreamConfig {
    let mut u = upstream("fixture", transport);
    // The fixture waits up to 60s for a client's answer to sampling/elicitation.
    u.request_timeout = Duration::from_secs(90);
    u
}

async fn gateway_for(up: UpstreamConfig) -> TestGateway {
    let mut t = tenant("conformance", vec![up]);
    t.prefix.mode = PrefixMode::Never;
    TestGateway::start(config(vec![t])).await
}

/// Runs one suite version; panics with its whole output when it does not pass.
async fn run_suite(package: &str, url: &str, extra: &[&str], baseline: &str) {
    let out_dir = TempDir::new("conformance");
    let cli = peers_dir().join(format!("js/node_modules/{package}/dist/index.js"));
    let baseline = repo().join("tests/conformance").join(baseline);
    let mut cmd = Command::new(node());
    cmd.arg(&cli)
        .args(["server", "--url", url])
        .args(extra)
        .arg("--expected-failures")
        .arg(&baseline)
        .arg("-o")
        .arg(&out_dir.0)
        .current_dir(&out_dir.0)
        .stdin(Stdio::null())
        .kill_on_drop(true);
    let out = tokio::time::timeout(Duration::from_secs(600), cmd.output())
        .await
        .expect("the conformance suite finishes within 10 minutes")
        .expect("the conformance suite runs");
    let stdout = String::from_utf8_lossy(&out.stdout);
    let stderr = String::from_utf8_lossy(&out.stderr);
    let summary = stdout.split("=== SUMMARY ===").nth(1).unwrap_or(&stdout);
    assert!(
        out.status.success(),
        "{package} failed against the gateway ({}):\n{summary}\n--- stderr ---\n{stderr}",
        out.status
    );
    assert!(summary.contains("passed"), "no summary printed:\n{stdout}");
    // The totals, for the log (`cargo test conformance -- --nocapture`).
    let totals: Vec<&str> = summary
        .lines()
        .filter(|l| l.contains("passed") || l.contains("failed") || l.contains("Total"))
        .collect();
    log_totals(&format!("{package} {extra:?}: {}", totals.join(" | ")));
}

#[allow(clippy::print_stderr)]
fn log_totals(line: &str) {
    eprintln!("conformance {line}");
}

#[tokio::test]
async fn conformance_suites_through_the_gateway_to_a_stdio_fixture() {
    let gw = gateway_for(fixture_stdio(&[])).await;
    let url = gw.url("conformance");
    run_suite("conformance-stable", &url, &[], "baseline-0.1.16.yaml").await;
    run_suite(
        "conformance-next",
        &url,
        &["--requirements", "2025-11-25"],
        "baseline-0.2.0.yaml",
    )
    .await;
    // The stateless revision in front of a session-based upstream: every request stands
    // alone, the gateway bridges the fixture's answers (questions become input_required
    // results).
    run_suite(
        "conformance-next",
        &url,
        &["--requirements", "2026-07-28"],
        "baseline-0.2.0-2026-bridged.yaml",
    )
    .await;
    gw.stop().await;
}

#[tokio::test]
async fn conformance_2026_through_the_gateway_to_a_stateless_stdio_fixture() {
    // The fixture speaks 2026-07-28 too: the gateway finds it with server/discover and passes
    // its input_required results through (their requestState wrapped, bound to the user).
    let gw = gateway_for(fixture_stdio(&["--stateless"])).await;
    run_suite(
        "conformance-next",
        &gw.url("conformance"),
        &["--requirements", "2026-07-28"],
        "baseline-0.2.0-2026.yaml",
    )
    .await;
    gw.stop().await;
}

#[tokio::test]
async fn conformance_2026_through_the_gateway_to_a_stateless_http_fixture() {
    let peer = HttpPeer::demo(free_port(), &["--conformance", "--stateless"]).await;
    let gw = gateway_for(fixture(http(&peer.url()))).await;
    run_suite(
        "conformance-next",
        &gw.url("conformance"),
        &["--requirements", "2026-07-28"],
        "baseline-0.2.0-2026.yaml",
    )
    .await;
    gw.stop().await;
    peer.kill().await;
}

#[tokio::test]
async fn conformance_suite_through_the_gateway_to_an_http_fixture() {
    let peer = HttpPeer::demo(free_port(), &["--conformance"]).await;
    let gw = gateway_for(fixture(http(&peer.url()))).await;
    run_suite(
        "conformance-stable",
        &gw.url("conformance"),
        &[],
        "baseline-0.1.16.yaml",
    )
    .await;
    gw.stop().await;
    peer.kill().await;
}
