//! `switchyard-demo-server` as a process: `--stdio` answers on stdout and ends at stdin's EOF
//! (pipes and plain files alike),
//! `--http` prints its endpoint's URL once listening, and no transport is a usage error.

use std::process::Stdio;
use std::time::Duration;

use serde_json::{Value, json};
use tokio::io::{AsyncBufReadExt as _, AsyncWriteExt as _, BufReader};
use tokio::process::{Child, Command};

const LIMIT: Duration = Duration::from_secs(20);

fn demo_server(args: &[&str]) -> Command {
    let mut cmd = Command::new(env!("CARGO_BIN_EXE_switchyard-demo-server"));
    cmd.args(args).kill_on_drop(true);
    cmd
}

fn initialize(id: u32) -> Value {
    json!({"jsonrpc": "2.0", "id": id, "method": "initialize", "params": {
        "protocolVersion": "2025-11-25",
        "capabilities": {},
        "clientInfo": {"name": "cli-test", "version": "1"},
    }})
}

/// The first line the child writes on stdout.
async fn first_line(child: &mut Child) -> String {
    let stdout = child.stdout.take().expect("stdout piped");
    let mut line = String::new();
    tokio::time::timeout(LIMIT, BufReader::new(stdout).read_line(&mut line))
        .await
        .expect("a line within the limit")
        .expect("stdout readable");
    line
}

#[tokio::test]
async fn stdio_answers_on_stdout_and_exits_at_eof() {
    let mut child = demo_server(&["--stdio", "--name", "cli-stdio"])
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .spawn()
        .expect("demo server starts");
    let mut stdin = child.stdin.take().expect("stdin piped");
    let request = format!("{}\n", initialize(1));
    stdin
        .write_all(request.as_bytes())
        .await
        .expect("request written");
    let answer: Value = serde_json::from_str(&first_line(&mut child).await).expect("JSON answer");
    assert_eq!(answer["id"], 1, "{answer}");
    assert_eq!(
        answer["result"]["serverInfo"]["name"], "cli-stdio",
        "{answer}"
    );
    drop(stdin);
    let status = tokio::time::timeout(LIMIT, child.wait())
        .await
        .expect("exits at stdin's EOF")
        .expect("wait");
    assert!(status.success(), "{status}");
}

/// Pipes are read through the runtime's I/O driver, anything else through tokio's blocking
/// stdin and stdout: requests in a regular file, answers into one.
#[tokio::test]
async fn stdio_reads_and_writes_files_that_are_not_pipes() {
    let dir = std::env::temp_dir().join(format!("demo-cli-files-{}", std::process::id()));
    std::fs::create_dir_all(&dir).expect("temp dir");
    let (input, output) = (dir.join("in.jsonl"), dir.join("out.jsonl"));
    let ping = json!({"jsonrpc": "2.0", "id": 2, "method": "ping"});
    std::fs::write(&input, format!("{}\n{ping}\n", initialize(1))).expect("requests written");
    let status = demo_server(&["--stdio"])
        .stdin(std::fs::File::open(&input).expect("input"))
        .stdout(std::fs::File::create(&output).expect("output"))
        .status();
    let status = tokio::time::timeout(LIMIT, status)
        .await
        .expect("exits at the file's end")
        .expect("runs");
    assert!(status.success(), "{status}");
    let answers: Vec<Value> = std::fs::read_to_string(&output)
        .expect("answers")
        .lines()
        .map(|l| serde_json::from_str(l).expect("JSON answer"))
        .collect();
    let _ = std::fs::remove_dir_all(&dir);
    let ids: Vec<&Value> = answers.iter().map(|a| &a["id"]).collect();
    assert_eq!(ids, [1, 2], "{answers:?}");
}

#[tokio::test]
async fn http_on_port_0_prints_the_url_it_serves() {
    let mut child = demo_server(&["--http", "127.0.0.1:0", "--name", "cli-http"])
        .stdin(Stdio::null())
        .stdout(Stdio::piped())
        .spawn()
        .expect("demo server starts");
    let line = first_line(&mut child).await;
    let url = line.trim();
    assert!(
        url.starts_with("http://127.0.0.1:") && url.ends_with("/mcp") && !url.contains(":0/"),
        "{line:?}"
    );
    // reqwest is built without a TLS provider of its own in this workspace (the gateway's).
    switchyard::app::install_crypto_provider();
    let response = reqwest::Client::new()
        .post(url)
        .header("content-type", "application/json")
        .header("accept", "application/json, text/event-stream")
        .body(initialize(1).to_string())
        .send()
        .await
        .expect("the printed URL answers");
    assert_eq!(response.status(), 200);
    let body = response.bytes().await.expect("body");
    let answer: Value = serde_json::from_slice(&body).expect("JSON answer");
    assert_eq!(
        answer["result"]["serverInfo"]["name"], "cli-http",
        "{answer}"
    );
    child.kill().await.expect("killed");
}

#[tokio::test]
async fn without_a_transport_it_exits_with_a_usage_error() {
    let out = tokio::time::timeout(LIMIT, demo_server(&[]).stdin(Stdio::null()).output())
        .await
        .expect("exits")
        .expect("runs");
    assert_eq!(out.status.code(), Some(2), "{out:?}");
    assert!(
        String::from_utf8_lossy(&out.stderr).contains("choose --stdio or --http ADDR"),
        "{out:?}"
    );
}
