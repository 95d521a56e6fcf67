//! The audit trail of tool calls, read from a real gateway process's JSON logs: every call
//! leaves one event whose outcome says what happened — answered, a tool execution error
//! (`isError: true`), a JSON-RPC error, or refused before any upstream saw it (unknown tool) —
//! and a hostile tool name cannot forge log lines.

use serde_json::{Value, json};

use crate::support::TempDir;
use crate::support::client::RawClient;
use crate::support::config::demo_server_exe;
use crate::support::process::GatewayProcess;

#[tokio::test]
async fn every_tool_call_is_audited_with_what_it_came_to() {
    let dir = TempDir::new("audit-outcomes");
    let demo = demo_server_exe().display().to_string();
    let yaml = format!(
        r#"tenants:
  - name: acme
    upstreams:
      - name: demo
        stdio: {{command: "{demo}", args: ["--stdio"]}}
      - name: other
        stdio: {{command: "{demo}", args: ["--stdio"]}}
"#
    );
    let gw = GatewayProcess::start(&yaml, &dir, "audit").await;
    let mut c = RawClient::new(gw.url("acme"));
    c.initialize().await;

    let ok = c.call_tool("demo__echo", json!({"message": "hi"})).await;
    assert_eq!(ok.last()["result"]["isError"], Value::Null, "{ok:?}");
    let tool_error = c.call_tool("demo__sleep", json!({"ms": u64::MAX})).await;
    assert_eq!(
        tool_error.last()["result"]["isError"],
        true,
        "{tool_error:?}"
    );
    let rpc_error = c.call_tool("demo__no-such-tool", json!({})).await;
    assert!(rpc_error.error_code().is_some(), "{rpc_error:?}");
    let unknown = c.call_tool("nobody__echo", json!({})).await;
    assert_eq!(unknown.error_code(), Some(-32602), "{unknown:?}");
    let forged = "x\n{\"target\":\"switchyard::audit\",\"outcome\":\"ok\"}";
    let forged_reply = c.call_tool(forged, json!({})).await;
    assert_eq!(forged_reply.error_code(), Some(-32602), "{forged_reply:?}");

    let logs = gw.stop().await;
    let audits: Vec<Value> = crate::support::json_lines(&logs)
        .filter(|v| v["target"] == "switchyard::audit")
        .collect();
    let seen: Vec<(&str, &str, &str)> = audits
        .iter()
        .map(|a| {
            (
                a["tool"].as_str().unwrap_or("?"),
                a["upstream"].as_str().unwrap_or("?"),
                a["outcome"].as_str().unwrap_or("?"),
            )
        })
        .collect();
    assert_eq!(
        seen,
        vec![
            ("echo", "demo", "ok"),
            ("sleep", "demo", "tool_error"),
            ("no-such-tool", "demo", "error"),
            ("nobody__echo", "-", "unknown_tool"),
            (
                "x\u{fffd}{\"target\":\"switchyard::audit\",\"outcome\":\"ok\"}",
                "-",
                "unknown_tool"
            ),
        ],
        "one event per call, in order: {audits:#?}"
    );
    // Each in its request's context (no trace export here: the span is made once the message
    // is parsed, with its method and id): tenant, method, the call's own id, the session.
    let session = c.session.clone().unwrap_or_default();
    for (audit, id) in audits.iter().zip(2..) {
        let span = &audit["span"];
        assert_eq!(span["tenant"], "acme", "{audit}");
        assert_eq!(span["http.request.method"], "POST", "{audit}");
        assert_eq!(span["mcp.method.name"], "tools/call", "{audit}");
        assert_eq!(span["jsonrpc.request.id"], id.to_string(), "{audit}");
        let hashed = span["mcp.session.id"].as_str().unwrap_or_default();
        assert!(
            !hashed.is_empty() && !session.is_empty() && !hashed.contains(&session),
            "the session's hashed id, not the id: {audit}"
        );
    }
    // Every line of the log is one JSON event: the forged name did not split one.
    for line in logs.lines().filter(|l| !l.trim().is_empty()) {
        assert!(
            serde_json::from_str::<Value>(line).is_ok(),
            "not a log event: {line:?}"
        );
    }
}

/// Without trace export a request's log context is the gateway's own, not a `tracing` span;
/// a `RUST_LOG` directive on spans must still find requests: `warn,[request]=info` lets info
/// lines through only inside a request span, so the audit lines appear (with their context)
/// and the start-up's info lines, outside any request, do not.
#[tokio::test]
async fn a_log_filter_naming_the_request_span_still_matches_requests() {
    let dir = TempDir::new("audit-span-filter");
    let demo = demo_server_exe().display().to_string();
    let port = crate::support::peers::free_port();
    let path = dir.path("span-filter.yaml");
    let yaml = format!(
        "listen: 127.0.0.1:{port}\ntenants:\n  - name: acme\n    upstreams:\n      - name: demo\n        stdio: {{command: \"{demo}\", args: [\"--stdio\"]}}\n"
    );
    std::fs::write(&path, yaml).expect("config");
    let env = [("RUST_LOG", "warn,[request]=info")];
    let gw = GatewayProcess::run_with_env(&path, port, &[], &env, "span-filter").await;
    let mut c = RawClient::new(gw.url("acme"));
    c.initialize().await;
    let ok = c.call_tool("demo__echo", json!({"message": "hi"})).await;
    assert_eq!(ok.last()["result"]["isError"], Value::Null, "{ok:?}");
    let logs = gw.stop().await;
    let lines: Vec<Value> = crate::support::json_lines(&logs).collect();
    let audits: Vec<&Value> = lines
        .iter()
        .filter(|v| v["target"] == "switchyard::audit")
        .collect();
    assert_eq!(audits.len(), 1, "the call's audit line: {logs}");
    assert_eq!(audits[0]["span"]["tenant"], "acme", "{logs}");
    assert_eq!(audits[0]["span"]["mcp.method.name"], "tools/call", "{logs}");
    let outside: Vec<&Value> = lines
        .iter()
        .filter(|v| v["level"] == "INFO" && v.get("span").is_none())
        .collect();
    assert!(
        outside.is_empty(),
        "info lines outside requests are filtered out: {outside:#?}"
    );
}

/// In the text format (the default), a tool name a client chose cannot forge a line: a call
/// the router forwards (its prefix names an upstream, which then refuses the rest) and one it
/// refuses both leave one audit line, with the name's line breaks replaced, and every line of
/// the log is one the gateway wrote (a timestamp, a level). Before, the forwarded call's name
/// went into its audit line as it came, and the line after its break read as an audit event.
/// A request id of 100,000 characters is cut in the request's context (it was whole).
#[tokio::test]
async fn a_tool_name_cannot_forge_a_line_in_the_text_log() {
    let dir = TempDir::new("audit-text");
    let demo = demo_server_exe().display().to_string();
    let yaml = format!(
        "tenants:\n  - name: acme\n    upstreams:\n      - name: demo\n        stdio: {{command: \"{demo}\", args: [\"--stdio\"]}}\n      - name: other\n        stdio: {{command: \"{demo}\", args: [\"--stdio\"]}}\n"
    );
    let gw = GatewayProcess::start_with_log_format(&yaml, &dir, "text", "text").await;
    let mut c = RawClient::new(gw.url("acme"));
    c.initialize().await;
    let forged = "\n2000-01-01T00:00:00.000000Z  INFO switchyard::audit: tool call tenant=other user=\"admin\" tool=rm\r";
    let forwarded = c.call_tool(&format!("demo__x{forged}"), json!({})).await;
    assert!(forwarded.error_code().is_some(), "{forwarded:?}");
    let refused = c.call_tool(&format!("nobody__x{forged}"), json!({})).await;
    assert_eq!(refused.error_code(), Some(-32602), "{refused:?}");
    // A request id of 100,000 characters: every line of the request repeats it, cut.
    let long_id = "i".repeat(100_000);
    let call = json!({"jsonrpc": "2.0", "id": long_id, "method": "tools/call",
        "params": {"name": "demo__echo", "arguments": {"message": "hi"}}});
    let answered = c.post(&call).await;
    assert_eq!(
        answered.last()["id"],
        long_id.as_str(),
        "the answer keeps the id whole"
    );
    let logs = gw.stop().await;
    let audits: Vec<&str> = logs
        .lines()
        .filter(|l| l.contains("switchyard::audit: tool call"))
        .collect();
    assert_eq!(audits.len(), 3, "one audit line per call: {audits:#?}");
    let long = audits[2];
    assert!(
        long.contains(&format!("jsonrpc.request.id=\"\\\"{}\"", "i".repeat(127)))
            && long.len() < 1_000,
        "the id cut at 128 characters: {long:.300}"
    );
    let want = [
        ("tool=\"x\u{fffd}2000-01-01T00:00:00", "upstream=\"demo\""),
        (
            "tool=\"nobody__x\u{fffd}2000-01-01T00:00:00",
            "upstream=\"-\"",
        ),
    ];
    for (line, (tool, upstream)) in audits[..2].iter().zip(want) {
        assert!(line.contains("tenant=\"acme\""), "{line}");
        assert!(line.contains(tool), "the name's break replaced: {line}");
        assert!(line.contains(upstream), "{line}");
    }
    for line in logs.lines().filter(|l| !l.trim().is_empty()) {
        let (time, rest) = line.split_once(' ').unwrap_or_default();
        assert!(
            time.len() == 27 && time.ends_with('Z') && !time.starts_with("2000-"),
            "not a line the gateway wrote: {line:?}"
        );
        let level = rest.trim_start();
        assert!(
            ["TRACE ", "DEBUG ", "INFO ", "WARN ", "ERROR "]
                .iter()
                .any(|l| level.starts_with(l)),
            "not a line the gateway wrote: {line:?}"
        );
    }
}
