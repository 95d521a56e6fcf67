//! Tests of the conformance fixture's core: catalog, tools, capability gating, and the logging
//! and progress streams.
#![allow(clippy::unwrap_used)]

use std::sync::Arc;

use serde_json::{Value, json};
use tokio::sync::mpsc;
use tokio::time::timeout;

use super::DemoOptions;
use super::inflight::Deferred;
use super::server::{Outcome, Server, Session};
use super::tests::{LIMIT, error_of};
use super::tools::Transport;

pub(super) fn fixture_opts() -> DemoOptions {
    DemoOptions {
        conformance: true,
        ..DemoOptions::default()
    }
}

/// A fixture session initialized with `capabilities`.
pub(super) fn fixture(capabilities: &Value) -> Arc<Session> {
    let s = Server::new(&fixture_opts())
        .unwrap()
        .session(Transport::Stdio);
    reply(&s, &init_msg(capabilities));
    s
}

pub(super) fn init_msg(capabilities: &Value) -> String {
    json!({"jsonrpc":"2.0","id":0,"method":"initialize","params":{
        "protocolVersion":"2025-11-25","capabilities":capabilities,
        "clientInfo":{"name":"t","version":"1"}}})
    .to_string()
}

fn reply(s: &Arc<Session>, msg: &str) -> Value {
    match s.handle_bytes(msg.as_bytes()) {
        Outcome::Reply(b) => serde_json::from_slice(&b).unwrap(),
        other => panic!("expected a reply to {msg}, got {other:?}"),
    }
}

fn request(s: &Arc<Session>, method: &str, params: &Value) -> Value {
    reply(
        s,
        &json!({"jsonrpc":"2.0","id":1,"method":method,"params":params}).to_string(),
    )
}

pub(super) fn call_msg(id: &Value, tool: &str, args: &Value) -> String {
    json!({"jsonrpc":"2.0","id":id,"method":"tools/call","params":{"name":tool,"arguments":args}})
        .to_string()
}

fn call(s: &Arc<Session>, tool: &str, args: &Value) -> Value {
    reply(s, &call_msg(&json!(7), tool, args))["result"].clone()
}

pub(super) fn deferred(s: &Arc<Session>, msg: &str) -> Deferred {
    match s.handle_bytes(msg.as_bytes()) {
        Outcome::Deferred(d) => d,
        other => panic!("expected deferred work for {msg}, got {other:?}"),
    }
}

pub(super) fn json_of(bytes: &[u8]) -> Value {
    serde_json::from_slice(bytes).unwrap()
}

#[test]
fn fixture_catalog_and_capabilities() {
    let s = Server::new(&fixture_opts())
        .unwrap()
        .session(Transport::Http);
    let init = reply(&s, &init_msg(&json!({})));
    assert_eq!(
        init["result"]["capabilities"],
        json!({"tools":{"listChanged":false},"prompts":{"listChanged":false},
               "resources":{"subscribe":true,"listChanged":false},"logging":{},"completions":{}})
    );
    let names = |v: &Value, key: &str, field: &str| -> Vec<String> {
        v["result"][key]
            .as_array()
            .unwrap()
            .iter()
            .map(|t| t[field].as_str().unwrap().to_owned())
            .collect()
    };
    let tools = request(&s, "tools/list", &json!({}));
    assert_eq!(
        names(&tools, "tools", "name"),
        [
            "test_simple_text",
            "test_image_content",
            "test_audio_content",
            "test_embedded_resource",
            "test_multiple_content_types",
            "test_tool_with_logging",
            "test_error_handling",
            "test_tool_with_progress",
            "test_sampling",
            "test_elicitation",
            "test_elicitation_sep1034_defaults",
            "test_elicitation_sep1330_enums",
            "json_schema_2020_12_tool",
            "test_reconnection",
            "test_missing_capability",
            "test_streaming_elicitation",
            "test_logging_tool",
            "test_mcp_param_headers",
            "greet",
            "slow_compute",
            "failing_job",
            "protocol_error_job",
            "confirm_delete",
            "multi_input",
        ]
    );
    for t in tools["result"]["tools"].as_array().unwrap() {
        assert_eq!(t["inputSchema"]["type"], "object", "{t}");
        assert!(t["description"].is_string(), "{t}");
    }
    let schema = &tools["result"]["tools"][12]["inputSchema"];
    assert_eq!(
        schema["$schema"],
        "https://json-schema.org/draft/2020-12/schema"
    );
    assert_eq!(schema["$defs"]["address"]["$anchor"], "addressDef");
    assert_eq!(schema["additionalProperties"], false);
    assert!(schema["allOf"][0]["anyOf"].is_array() && schema["else"].is_object());

    let prompts = request(&s, "prompts/list", &json!({}));
    assert_eq!(
        names(&prompts, "prompts", "name"),
        [
            "test_simple_prompt",
            "test_prompt_with_arguments",
            "test_prompt_with_embedded_resource",
            "test_prompt_with_image"
        ]
    );
    let resources = request(&s, "resources/list", &json!({}));
    assert_eq!(
        names(&resources, "resources", "uri"),
        [
            "test://static-text",
            "test://static-binary",
            "test://watched-resource"
        ]
    );
    let templates = request(&s, "resources/templates/list", &json!({}));
    assert_eq!(
        names(&templates, "resourceTemplates", "uriTemplate"),
        ["test://template/{id}/data"]
    );

    // The demo catalog has none of this.
    let demo = Server::new(&DemoOptions::default())
        .unwrap()
        .session(Transport::Stdio);
    let r = request(&demo, "completion/complete", &json!({}));
    assert_eq!(error_of(&r).0, -32601);
    let r = request(
        &demo,
        "resources/subscribe",
        &json!({"uri":"demo://readme"}),
    );
    assert_eq!(error_of(&r).0, -32601);
}

#[test]
fn fixture_prompts_resources_and_completion() {
    let s = fixture(&json!({}));
    let get = |name: &str, args: Value| {
        request(&s, "prompts/get", &json!({"name": name, "arguments": args}))
    };
    let r = get("test_simple_prompt", json!({}));
    assert_eq!(
        r["result"]["messages"][0]["content"]["text"],
        "This is a simple prompt for testing."
    );
    let r = get(
        "test_prompt_with_arguments",
        json!({"arg1":"hello","arg2":"world"}),
    );
    assert_eq!(
        r["result"]["messages"][0]["content"]["text"],
        "Prompt with arguments: arg1='hello', arg2='world'"
    );
    let (code, msg) = error_of(&get("test_prompt_with_arguments", json!({"arg1":"x"})));
    assert!(code == -32602 && msg.contains("arg2"), "{msg}");
    let r = get(
        "test_prompt_with_embedded_resource",
        json!({"resourceUri":"test://example-resource"}),
    );
    let m = &r["result"]["messages"];
    assert_eq!(m[0]["content"]["type"], "resource");
    assert_eq!(
        m[0]["content"]["resource"]["uri"],
        "test://example-resource"
    );
    assert_eq!(m[1]["content"]["type"], "text");
    let r = get("test_prompt_with_image", json!({}));
    assert_eq!(
        r["result"]["messages"][0]["content"]["mimeType"],
        "image/png"
    );
    assert_eq!(error_of(&get("nope", json!({}))).0, -32602);

    let read = |uri: &str| request(&s, "resources/read", &json!({"uri": uri}));
    let c = &read("test://static-text")["result"]["contents"][0];
    assert_eq!(
        (c["mimeType"].as_str(), c["text"].as_str()),
        (
            Some("text/plain"),
            Some("This is the content of the static text resource.")
        )
    );
    let c = &read("test://static-binary")["result"]["contents"][0];
    assert!(c["blob"].as_str().unwrap().starts_with("iVBORw0KGgo"));
    let c = &read("test://template/123/data")["result"]["contents"][0];
    assert_eq!(c["uri"], "test://template/123/data");
    let data: Value = serde_json::from_str(c["text"].as_str().unwrap()).unwrap();
    assert_eq!(
        data,
        json!({"id":"123","templateTest":true,"data":"Data for ID: 123"})
    );
    for bad in [
        "test://template//data",
        "test://template/1/2/data",
        "test://x",
    ] {
        assert_eq!(error_of(&read(bad)).0, -32002, "{bad}");
    }

    let uri = json!({"uri":"test://watched-resource"});
    assert_eq!(
        request(&s, "resources/subscribe", &uri)["result"],
        json!({})
    );
    assert!(s.peer.is_subscribed("test://watched-resource"));
    assert_eq!(
        request(&s, "resources/unsubscribe", &uri)["result"],
        json!({})
    );
    assert!(!s.peer.is_subscribed("test://watched-resource"));
    let r = request(&s, "resources/subscribe", &json!({"uri":"test://none"}));
    assert_eq!(error_of(&r).0, -32002);

    let complete = |reference: Value, name: &str, value: &str| {
        let p = json!({"ref": reference, "argument": {"name": name, "value": value}});
        request(&s, "completion/complete", &p)
    };
    let prompt = json!({"type":"ref/prompt","name":"test_prompt_with_arguments"});
    let r = complete(prompt.clone(), "arg1", "te");
    assert_eq!(
        r["result"]["completion"],
        json!({"values":["test","testing"],"total":2,"hasMore":false})
    );
    let r = complete(prompt, "arg2", "zzz");
    assert_eq!(r["result"]["completion"]["values"], json!([]));
    let template = json!({"type":"ref/resource","uri":"test://template/{id}/data"});
    let r = complete(template, "id", "1");
    assert_eq!(r["result"]["completion"]["values"], json!(["1", "123"]));
    let r = complete(json!({"type":"ref/prompt","name":"nope"}), "a", "");
    assert_eq!(error_of(&r).0, -32602);
    let r = request(&s, "completion/complete", &json!({"ref":{}}));
    assert_eq!(error_of(&r).0, -32602);
}

#[test]
fn fixture_content_tools() {
    let s = fixture(&json!({}));
    let r = call(&s, "test_simple_text", &json!({}));
    assert_eq!(
        r["content"],
        json!([{"type":"text","text":"This is a simple text response for testing."}])
    );
    let r = call(&s, "test_image_content", &json!({}));
    assert_eq!(
        (&r["content"][0]["type"], &r["content"][0]["mimeType"]),
        (&json!("image"), &json!("image/png"))
    );
    let r = call(&s, "test_audio_content", &json!({}));
    assert_eq!(r["content"][0]["mimeType"], "audio/wav");
    assert!(
        r["content"][0]["data"]
            .as_str()
            .unwrap()
            .starts_with("UklGR")
    );
    let r = call(&s, "test_embedded_resource", &json!({}));
    assert_eq!(
        r["content"][0]["resource"]["uri"],
        "test://embedded-resource"
    );
    let r = call(&s, "test_multiple_content_types", &json!({}));
    let types: Vec<_> = r["content"]
        .as_array()
        .unwrap()
        .iter()
        .map(|c| c["type"].as_str().unwrap())
        .collect();
    assert_eq!(types, ["text", "image", "resource"]);
    let r = call(&s, "test_error_handling", &json!({}));
    assert_eq!(r["isError"], true);
    assert!(r["content"][0]["text"].as_str().unwrap().contains("error"));
    let r = call(&s, "json_schema_2020_12_tool", &json!({"name":"n"}));
    assert!(r.get("isError").is_none());
    let r = call(&s, "test_sampling", &json!({"prompt": 5}));
    assert_eq!(r["isError"], true);
    let r = reply(&s, &call_msg(&json!(1), "echo", &json!({})));
    assert_eq!(error_of(&r), (-32602, "Unknown tool: echo".to_owned()));
}

#[test]
fn requests_to_the_client_need_its_capabilities() {
    let tools = [
        ("test_sampling", json!({"prompt":"p"}), "sampling"),
        ("test_elicitation", json!({"message":"m"}), "elicitation"),
        (
            "test_elicitation_sep1034_defaults",
            json!({}),
            "elicitation",
        ),
        ("test_elicitation_sep1330_enums", json!({}), "elicitation"),
    ];
    // Nothing declared, or elicitation only in URL mode: tool errors, no request sent.
    for caps in [json!({}), json!({"elicitation":{"url":{}},"roots":{}})] {
        let s = fixture(&caps);
        for (tool, args, cap) in &tools {
            let r = call(&s, tool, args);
            let text = r["content"][0]["text"].as_str().unwrap();
            assert_eq!(r["isError"], true, "{tool}");
            assert!(text.contains(&format!("`{cap}` capability")), "{text}");
        }
        assert_eq!(s.peer.pending(), 0);
    }
    for caps in [
        json!({"sampling":{},"elicitation":{}}),
        json!({"sampling":{"tools":{}},"elicitation":{"form":{},"url":{}}}),
    ] {
        let s = fixture(&caps);
        for (tool, args, _) in &tools {
            let d = deferred(&s, &call_msg(&json!(tool), tool, args));
            assert!(d.streams(), "{tool}");
        }
    }
}

#[tokio::test]
async fn logging_and_progress_tools_stream() {
    let s = fixture(&json!({}));
    let run = |d: Deferred| async move {
        let (tx, mut rx) = mpsc::channel(16);
        let out = timeout(LIMIT, d.run(Some(&tx))).await.unwrap().unwrap();
        drop(tx);
        let mut sent = Vec::new();
        while let Some(m) = rx.recv().await {
            sent.push(json_of(&m));
        }
        (json_of(&out), sent)
    };
    let (out, logs) = run(deferred(
        &s,
        &call_msg(&json!(1), "test_tool_with_logging", &json!({})),
    ))
    .await;
    assert_eq!(out["result"]["content"][0]["type"], "text");
    let texts: Vec<_> = logs
        .iter()
        .map(|l| {
            assert_eq!(l["method"], "notifications/message");
            assert_eq!(l["params"]["level"], "info");
            l["params"]["data"].as_str().unwrap()
        })
        .collect();
    assert_eq!(
        texts,
        [
            "Tool execution started",
            "Tool processing data",
            "Tool execution completed"
        ]
    );
    request(&s, "logging/setLevel", &json!({"level":"warning"}));
    let (_, logs) = run(deferred(
        &s,
        &call_msg(&json!(2), "test_tool_with_logging", &json!({})),
    ))
    .await;
    assert!(logs.is_empty(), "{logs:?}");

    let with_token = json!({"jsonrpc":"2.0","id":3,"method":"tools/call","params":{
        "name":"test_tool_with_progress","arguments":{},"_meta":{"progressToken":"p-1"}}});
    let d = deferred(&s, &with_token.to_string());
    assert!(d.streams());
    let (out, progress) = run(d).await;
    assert_eq!(out["id"], 3);
    let values: Vec<_> = progress
        .iter()
        .map(|p| {
            assert_eq!(p["params"]["progressToken"], "p-1");
            assert_eq!(p["params"]["total"], 100);
            p["params"]["progress"].as_u64().unwrap()
        })
        .collect();
    assert_eq!(values, [0, 50, 100]);
    let plain = deferred(
        &s,
        &call_msg(&json!(4), "test_tool_with_progress", &json!({})),
    );
    assert!(!plain.streams());
    assert!(timeout(LIMIT, plain.run(None)).await.unwrap().is_some());
}

/// With `--test-tools`, the fixture reports the session state it holds and changes what was
/// subscribed to (a gateway's hand-over is checked with them); without, they do not exist.
#[tokio::test]
async fn test_tools_report_the_session_state_and_touch_subscriptions() {
    let plain = fixture(&json!({}));
    let r = reply(
        &plain,
        &call_msg(&json!(1), "test_session_state", &json!({})),
    );
    assert_eq!(error_of(&r).0, -32602, "{r}");

    let opts = DemoOptions {
        test_tools: true,
        ..fixture_opts()
    };
    let s = Server::new(&opts).unwrap().session(Transport::Stdio);
    reply(&s, &init_msg(&json!({})));
    let names = request(&s, "tools/list", &json!({}))["result"]["tools"].to_string();
    assert!(
        names.contains("test_session_state") && names.contains("test_touch_subscribed"),
        "{names}"
    );
    let state =
        |s: &Arc<Session>| call(s, "test_session_state", &json!({}))["content"][0]["text"].clone();
    assert_eq!(state(&s), "level=debug subscriptions=");
    request(&s, "logging/setLevel", &json!({"level": "error"}));
    request(
        &s,
        "resources/subscribe",
        &json!({"uri": "test://watched-resource"}),
    );
    assert_eq!(
        state(&s),
        "level=error subscriptions=test://watched-resource"
    );

    let d = deferred(
        &s,
        &call_msg(&json!(2), "test_touch_subscribed", &json!({})),
    );
    let (tx, mut rx) = mpsc::channel(8);
    let out = timeout(LIMIT, d.run(Some(&tx))).await.unwrap().unwrap();
    let updated = json_of(&rx.try_recv().unwrap());
    assert_eq!(
        (&updated["method"], &updated["params"]["uri"]),
        (
            &json!("notifications/resources/updated"),
            &json!("test://watched-resource")
        )
    );
    assert!(rx.try_recv().is_err(), "one notification per subscription");
    assert_eq!(
        json_of(&out)["result"]["content"][0]["text"],
        "updated: test://watched-resource"
    );
}
