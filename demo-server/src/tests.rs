//! Unit tests of the demo's protocol core (`server`, `tools`, `catalog`, `inflight`).
#![allow(clippy::unwrap_used)]

use std::sync::Arc;
use std::time::{Duration, Instant};

use bytes::Bytes;
use serde_json::{Value, json};
use tokio::sync::mpsc;
use tokio::time::timeout;

use super::DemoOptions;
use super::inflight::Deferred;
use super::server::{Outcome, Server, Session};
use super::tools::Transport;

pub(super) const LIMIT: Duration = Duration::from_secs(10);

fn session_with(opts: &DemoOptions, transport: Transport) -> Arc<Session> {
    Server::new(opts).unwrap().session(transport)
}

fn session() -> Arc<Session> {
    let opts = DemoOptions {
        test_tools: true,
        ..DemoOptions::default()
    };
    session_with(&opts, Transport::Stdio)
}

fn reply_bytes(s: &Arc<Session>, msg: &str) -> Bytes {
    match s.handle_bytes(msg.as_bytes()) {
        Outcome::Reply(b) => b,
        other => panic!("expected a reply to {msg}, got {other:?}"),
    }
}

fn reply(s: &Arc<Session>, msg: &str) -> Value {
    let bytes = reply_bytes(s, msg);
    assert!(!bytes.contains(&b'\n'), "replies are single-line");
    serde_json::from_slice(&bytes).unwrap()
}

fn deferred(s: &Arc<Session>, msg: &str) -> Deferred {
    match s.handle_bytes(msg.as_bytes()) {
        Outcome::Deferred(d) => d,
        other => panic!("expected deferred work for {msg}, got {other:?}"),
    }
}

fn call(s: &Arc<Session>, tool: &str, args: Value) -> Value {
    let msg = json!({"jsonrpc":"2.0","id":7,"method":"tools/call","params":{"name":tool,"arguments":args}});
    reply(s, &msg.to_string())
}

pub(super) fn error_of(v: &Value) -> (i64, String) {
    let e = &v["error"];
    (
        e["code"].as_i64().unwrap(),
        e["message"].as_str().unwrap().to_owned(),
    )
}

fn text_of(v: &Value) -> (String, bool) {
    let r = &v["result"];
    assert_eq!(r["content"].as_array().unwrap().len(), 1);
    assert_eq!(r["content"][0]["type"], "text");
    let text = r["content"][0]["text"].as_str().unwrap().to_owned();
    (text, r["isError"].as_bool().unwrap_or(false))
}

#[test]
fn initialize_negotiates_version_and_describes_server() {
    let s = session();
    for v in ["2024-11-05", "2025-03-26", "2025-06-18", "2025-11-25"] {
        let r = reply(
            &s,
            &format!(
                r#"{{"jsonrpc":"2.0","id":1,"method":"initialize","params":{{"protocolVersion":"{v}","capabilities":{{}},"clientInfo":{{"name":"t","version":"1"}}}}}}"#
            ),
        );
        assert_eq!(r["result"]["protocolVersion"], v);
    }
    let r = reply(
        &s,
        r#"{"jsonrpc":"2.0","id":1,"method":"initialize","params":{"protocolVersion":"1999-01-01"}}"#,
    );
    let res = &r["result"];
    assert_eq!(res["protocolVersion"], "2025-11-25");
    assert_eq!(
        res["capabilities"],
        json!({"tools":{"listChanged":false},"prompts":{},"resources":{},"logging":{}})
    );
    assert_eq!(
        res["serverInfo"],
        json!({"name":"switchyard-demo","version":env!("CARGO_PKG_VERSION")})
    );
    assert_eq!(
        res["instructions"],
        "Demo upstream shipped with Switchyard: echo, add, sleep."
    );
    assert_eq!(s.protocol_version(), Some("2025-11-25"));

    let named = session_with(
        &DemoOptions {
            name: "up-\"1\"".into(),
            ..DemoOptions::default()
        },
        Transport::Http,
    );
    let r = reply(
        &named,
        r#"{"jsonrpc":"2.0","id":1,"method":"initialize","params":{"protocolVersion":"2025-06-18"}}"#,
    );
    assert_eq!(r["result"]["serverInfo"]["name"], "up-\"1\"");

    let fresh = session();
    let (code, msg) = error_of(&reply(
        &fresh,
        r#"{"jsonrpc":"2.0","id":1,"method":"initialize","params":{}}"#,
    ));
    assert_eq!(code, -32602);
    assert!(msg.contains("protocolVersion"), "{msg}");
    assert_eq!(fresh.protocol_version(), None);
}

#[test]
fn ping_echoes_raw_ids() {
    let s = session();
    assert_eq!(
        &reply_bytes(&s, r#"{"jsonrpc":"2.0","id":"a\u0062","method":"ping"}"#)[..],
        br#"{"jsonrpc":"2.0","id":"a\u0062","result":{}}"#
    );
    assert_eq!(
        &reply_bytes(
            &s,
            r#"{"id": -12 ,"method":"ping","jsonrpc":"2.0","params":{}}"#
        )[..],
        br#"{"jsonrpc":"2.0","id":-12,"result":{}}"#
    );
}

#[test]
fn notifications_and_responses_produce_nothing() {
    let s = session();
    for msg in [
        r#"{"jsonrpc":"2.0","method":"notifications/initialized"}"#,
        r#"{"jsonrpc":"2.0","method":"notifications/whatever","params":{"x":1}}"#,
        r#"{"jsonrpc":"2.0","method":"notifications/cancelled","params":{"requestId":99}}"#,
        r#"{"jsonrpc":"2.0","method":"notifications/cancelled","params":"junk"}"#,
        r#"{"jsonrpc":"2.0","method":"tools/call"}"#,
        r#"{"jsonrpc":"2.0","id":5,"result":{}}"#,
        r#"{"jsonrpc":"2.0","id":6,"error":{"code":1,"message":"m"}}"#,
    ] {
        assert!(
            matches!(s.handle_bytes(msg.as_bytes()), Outcome::Nothing),
            "{msg}"
        );
    }
    assert!(s.is_initialized());
}

#[test]
fn framing_errors() {
    let s = session();
    let r = reply(&s, r#"{"jsonrpc":"2.0","id":1,"method""#);
    assert_eq!(r["id"], Value::Null);
    assert_eq!(error_of(&r).0, -32700);
    let r = reply(&s, r#"{"id":1,"method":"ping"}"#);
    assert_eq!((r["id"].clone(), error_of(&r).0), (json!(1), -32600));
    assert_eq!(
        error_of(&reply(&s, r#"[{"jsonrpc":"2.0","id":1,"method":"ping"}]"#)).0,
        -32600
    );
    assert_eq!(
        error_of(&reply(&s, r#"{"jsonrpc":"2.0","id":null,"method":"ping"}"#)).0,
        -32600
    );
    assert_eq!(
        error_of(&reply(&s, r#"{"jsonrpc":"2.0","id":1.5,"method":"ping"}"#)).0,
        -32600
    );
    assert_eq!(
        error_of(&reply(&s, r#"{"jsonrpc":"2.0","id":1}"#)).0,
        -32600
    );
    let (code, msg) = error_of(&reply(&s, r#"{"jsonrpc":"2.0","id":1,"method":"no/such"}"#));
    assert_eq!(code, -32601);
    assert!(msg.contains("no/such"), "{msg}");
}

#[test]
fn tools_list_is_deterministic() {
    let s = session_with(&DemoOptions::default(), Transport::Stdio);
    let msg = r#"{"jsonrpc":"2.0","id":1,"method":"tools/list"}"#;
    let r = reply(&s, msg);
    let names: Vec<_> = r["result"]["tools"]
        .as_array()
        .unwrap()
        .iter()
        .map(|t| t["name"].as_str().unwrap())
        .collect();
    assert_eq!(names, ["echo", "add", "sleep"]);
    for t in r["result"]["tools"].as_array().unwrap() {
        assert_eq!(t["inputSchema"]["type"], "object");
        assert!(t["description"].is_string());
    }
    assert_eq!(reply_bytes(&s, msg), reply_bytes(&s, msg));
    let r = reply(&session(), msg);
    assert_eq!(r["result"]["tools"].as_array().unwrap().len(), 6);
}

#[test]
fn extra_tools_are_listed_and_answer_like_echo() {
    let s = session_with(
        &DemoOptions {
            extra_tools: 100,
            ..DemoOptions::default()
        },
        Transport::Http,
    );
    let r = reply(&s, r#"{"jsonrpc":"2.0","id":1,"method":"tools/list"}"#);
    let tools = r["result"]["tools"].as_array().unwrap();
    assert_eq!(tools.len(), 103);
    assert_eq!(tools[3]["name"], "bulk-0001");
    assert_eq!(tools[102]["name"], "bulk-0100");
    let r = call(&s, "bulk-0042", json!({"message": "many"}));
    assert_eq!(text_of(&r), ("many".to_owned(), false));
    for unknown in ["bulk-0000", "bulk-0101", "bulk-42", "bulk-+042"] {
        let r = call(&s, unknown, json!({"message": "x"}));
        assert!(r.get("error").is_some(), "{unknown}: {r}");
    }
}

#[test]
fn echo_and_add() {
    let s = session();
    let r = call(&s, "echo", json!({"message": "hi \"there\"\n"}));
    assert_eq!(text_of(&r), ("hi \"there\"\n".to_owned(), false));
    assert!(r["result"].get("structuredContent").is_none());
    assert!(r["result"].get("isError").is_none());
    for (a, b, sum) in [
        (json!(1), json!(2), "3"),
        (json!(1.5), json!(2.25), "3.75"),
        (json!(1.5), json!(1.5), "3"),
        (json!(-4), json!(0.5), "-3.5"),
        (json!(9007199254740993_i64), json!(1), "9007199254740994"),
    ] {
        assert_eq!(text_of(&call(&s, "add", json!({"a": a, "b": b}))).0, sum);
    }
}

#[test]
fn bad_arguments_are_tool_errors() {
    let s = session();
    let (text, is_error) = text_of(&call(&s, "echo", json!({"message": 5})));
    assert!(
        is_error && text.contains("echo") && text.contains("string"),
        "{text}"
    );
    let (text, is_error) = text_of(&call(&s, "add", json!({"a": 1})));
    assert!(is_error && text.contains("`b`"), "{text}");
    let r = reply(
        &s,
        r#"{"jsonrpc":"2.0","id":3,"method":"tools/call","params":{"name":"echo"}}"#,
    );
    assert!(text_of(&r).1);
    assert!(text_of(&call(&s, "sleep", json!({"ms": -1}))).1);
    assert!(text_of(&call(&s, "sleep", json!({"ms": 1, "steps": "x"}))).1);
}

#[test]
fn protocol_errors_for_tools_call() {
    let s = session();
    let (code, msg) = error_of(&call(&s, "nope", json!({})));
    assert_eq!((code, msg.as_str()), (-32602, "Unknown tool: nope"));
    let plain = session_with(&DemoOptions::default(), Transport::Stdio);
    assert_eq!(
        error_of(&call(&plain, "crash", json!({}))).1,
        "Unknown tool: crash"
    );
    let (code, msg) = error_of(&reply(
        &s,
        r#"{"jsonrpc":"2.0","id":1,"method":"tools/call"}"#,
    ));
    assert_eq!(code, -32602);
    assert!(msg.contains("params"), "{msg}");
    let (code, msg) = error_of(&reply(
        &s,
        r#"{"jsonrpc":"2.0","id":1,"method":"tools/call","params":{"arguments":{}}}"#,
    ));
    assert_eq!(code, -32602);
    assert!(msg.contains("`name`"), "{msg}");
    let (code, msg) = error_of(&call(&s, "echo", json!([1])));
    assert_eq!(code, -32602);
    assert!(msg.contains("arguments"), "{msg}");
    let bad_token = r#"{"jsonrpc":"2.0","id":1,"method":"tools/call","params":{"name":"sleep","arguments":{"ms":1},"_meta":{"progressToken":{}}}}"#;
    assert_eq!(error_of(&reply(&s, bad_token)).0, -32602);
}

#[test]
fn prompts_resources_and_logging() {
    let s = session();
    let r = reply(&s, r#"{"jsonrpc":"2.0","id":1,"method":"prompts/list"}"#);
    assert_eq!(r["result"]["prompts"][0]["name"], "greeting");
    assert_eq!(r["result"]["prompts"][0]["arguments"][0]["required"], true);
    let r = reply(
        &s,
        r#"{"jsonrpc":"2.0","id":1,"method":"prompts/get","params":{"name":"greeting","arguments":{"name":"Ada"}}}"#,
    );
    assert_eq!(
        r["result"]["messages"],
        json!([{"role":"user","content":{"type":"text","text":"Hello, Ada!"}}])
    );
    let r = reply(
        &s,
        r#"{"jsonrpc":"2.0","id":1,"method":"prompts/get","params":{"name":"greeting"}}"#,
    );
    assert_eq!(error_of(&r).0, -32602);
    let r = reply(
        &s,
        r#"{"jsonrpc":"2.0","id":1,"method":"prompts/get","params":{"name":"other"}}"#,
    );
    assert_eq!(error_of(&r), (-32602, "Unknown prompt: other".to_owned()));

    let r = reply(&s, r#"{"jsonrpc":"2.0","id":1,"method":"resources/list"}"#);
    assert_eq!(r["result"]["resources"][0]["uri"], "demo://readme");
    assert_eq!(r["result"]["resources"][0]["mimeType"], "text/plain");
    let r = reply(
        &s,
        r#"{"jsonrpc":"2.0","id":1,"method":"resources/read","params":{"uri":"demo://readme"}}"#,
    );
    assert!(
        r["result"]["contents"][0]["text"]
            .as_str()
            .unwrap()
            .contains("demo upstream")
    );
    let r = reply(
        &s,
        r#"{"jsonrpc":"2.0","id":1,"method":"resources/read","params":{"uri":"demo://x"}}"#,
    );
    assert_eq!(error_of(&r).0, -32002);
    // SEP-2093: resource types, a collection read as its documents, metadata without contents.
    let r = reply(&s, r#"{"jsonrpc":"2.0","id":1,"method":"resources/list"}"#);
    assert_eq!(r["result"]["resources"][1]["resourceType"], "collection");
    let r = reply(
        &s,
        r#"{"jsonrpc":"2.0","id":1,"method":"resources/read","params":{"uri":"demo://docs/"}}"#,
    );
    let uris: Vec<&str> = r["result"]["contents"]
        .as_array()
        .unwrap()
        .iter()
        .map(|c| c["uri"].as_str().unwrap())
        .collect();
    assert_eq!(uris, ["demo://docs/echo", "demo://docs/add"]);
    assert_eq!(r["result"]["contents"][0]["resourceType"], "document");
    let r = reply(
        &s,
        r#"{"jsonrpc":"2.0","id":1,"method":"resources/metadata","params":{"uri":"demo://docs/"}}"#,
    );
    assert_eq!(r["result"]["resource"]["resourceType"], "collection");
    assert!(r["result"]["resource"].get("text").is_none());
    let r = reply(
        &s,
        r#"{"jsonrpc":"2.0","id":1,"method":"resources/metadata","params":{"uri":"demo://readme"}}"#,
    );
    assert_eq!(r["result"]["resource"]["name"], "readme");
    assert!(r["result"]["resource"]["size"].as_u64().unwrap() > 0);
    let r = reply(
        &s,
        r#"{"jsonrpc":"2.0","id":1,"method":"resources/metadata","params":{"uri":"demo://x"}}"#,
    );
    assert_eq!(error_of(&r).0, -32002);
    let r = reply(
        &s,
        r#"{"jsonrpc":"2.0","id":1,"method":"resources/templates/list"}"#,
    );
    assert_eq!(r["result"], json!({"resourceTemplates": []}));

    let r = reply(
        &s,
        r#"{"jsonrpc":"2.0","id":1,"method":"logging/setLevel","params":{"level":"info"}}"#,
    );
    assert_eq!(r["result"], json!({}));
    let r = reply(
        &s,
        r#"{"jsonrpc":"2.0","id":1,"method":"logging/setLevel","params":{"level":"loud"}}"#,
    );
    assert_eq!(error_of(&r).0, -32602);
}

#[test]
fn test_tools() {
    let s = session();
    let crash = r#"{"jsonrpc":"2.0","id":1,"method":"tools/call","params":{"name":"crash"}}"#;
    assert!(matches!(s.handle_bytes(crash.as_bytes()), Outcome::Exit(3)));
    let crash7 = r#"{"jsonrpc":"2.0","id":1,"method":"tools/call","params":{"name":"crash","arguments":{"exit_code":7}}}"#;
    assert!(matches!(
        s.handle_bytes(crash7.as_bytes()),
        Outcome::Exit(7)
    ));
    let http = session_with(
        &DemoOptions {
            test_tools: true,
            ..DemoOptions::default()
        },
        Transport::Http,
    );
    let (text, is_error) = text_of(&reply(&http, crash));
    assert!(is_error && text.contains("stdio"), "{text}");
    assert_eq!(
        text_of(&call(&s, "stderr", json!({"text": "demo stderr line"}))),
        ("ok".to_owned(), false)
    );
}

pub(super) fn sleep_msg(id: &str, ms: u64, steps: u64, token: Option<&str>) -> String {
    let meta = token.map_or(String::new(), |t| {
        format!(r#","_meta":{{"progressToken":{t}}}"#)
    });
    format!(
        r#"{{"jsonrpc":"2.0","id":{id},"method":"tools/call","params":{{"name":"sleep","arguments":{{"ms":{ms},"steps":{steps}}}{meta}}}}}"#
    )
}

#[tokio::test]
async fn sleep_with_progress() {
    let s = session();
    let plain = deferred(&s, &sleep_msg("1", 5, 3, None));
    assert!(!plain.streams());
    let out = timeout(LIMIT, plain.run(None)).await.unwrap().unwrap();
    let r: Value = serde_json::from_slice(&out).unwrap();
    assert_eq!(text_of(&r), ("slept 5ms".to_owned(), false));

    let d = deferred(&s, &sleep_msg("\"s1\"", 60, 3, Some("\"tok\"")));
    assert!(d.streams());
    let (tx, mut rx) = mpsc::channel(8);
    let started = Instant::now();
    let out = timeout(LIMIT, d.run(Some(&tx))).await.unwrap().unwrap();
    assert!(started.elapsed() >= Duration::from_millis(60));
    drop(tx);
    for i in 1..=3 {
        let p: Value = serde_json::from_slice(&rx.recv().await.unwrap()).unwrap();
        assert_eq!(
            p,
            json!({"jsonrpc":"2.0","method":"notifications/progress","params":{"progressToken":"tok","progress":i,"total":3}})
        );
    }
    assert!(rx.recv().await.is_none());
    let r: Value = serde_json::from_slice(&out).unwrap();
    assert_eq!(
        (r["id"].clone(), text_of(&r).0),
        (json!("s1"), "slept 60ms".to_owned())
    );
}

#[tokio::test]
async fn cancellation_suppresses_the_response() {
    let s = session();
    let d = deferred(&s, &sleep_msg("\"x\"", 60_000, 0, None));
    let dup = reply(&s, &sleep_msg("\"x\"", 1, 0, None));
    assert_eq!(error_of(&dup).0, -32600);
    let task = tokio::spawn(d.run(None));
    let cancel = r#"{"jsonrpc":"2.0","method":"notifications/cancelled","params":{"requestId":"x","reason":"test"}}"#;
    assert!(matches!(
        s.handle_bytes(cancel.as_bytes()),
        Outcome::Nothing
    ));
    assert_eq!(timeout(LIMIT, task).await.unwrap().unwrap(), None);
    // The id is free again once the cancelled call is gone.
    let again = deferred(&s, &sleep_msg("\"x\"", 1, 0, None));
    assert!(timeout(LIMIT, again.run(None)).await.unwrap().is_some());
}

#[tokio::test]
async fn concurrent_sleeps_overlap() {
    let s = session();
    let started = Instant::now();
    let tasks: Vec<_> = (0..5)
        .map(|i| tokio::spawn(deferred(&s, &sleep_msg(&i.to_string(), 200, 0, None)).run(None)))
        .collect();
    for t in tasks {
        assert!(timeout(LIMIT, t).await.unwrap().unwrap().is_some());
    }
    assert!(
        started.elapsed() < Duration::from_millis(800),
        "{:?}",
        started.elapsed()
    );
}

#[test]
fn trace_file_gets_every_message() {
    let path = std::env::temp_dir().join(format!(
        "switchyard-demo-trace-{}-{:x}.jsonl",
        std::process::id(),
        rand::random::<u64>()
    ));
    let opts = DemoOptions {
        trace_file: Some(path.clone()),
        ..DemoOptions::default()
    };
    let s = session_with(&opts, Transport::Http);
    reply(&s, r#"{"jsonrpc":"2.0","id":1,"method":"ping"}"#);
    s.handle_bytes(b"{\n \"jsonrpc\": \"2.0\",\n \"method\": \"notifications/initialized\"\n}\n");
    reply(&s, "not json");
    let text = std::fs::read_to_string(&path).unwrap();
    std::fs::remove_file(&path).unwrap();
    let lines: Vec<Value> = text
        .lines()
        .map(|l| serde_json::from_str(l).unwrap())
        .collect();
    assert_eq!(lines.len(), 2, "{text}");
    assert_eq!(lines[0]["method"], "ping");
    assert_eq!(lines[1]["method"], "notifications/initialized");
}
