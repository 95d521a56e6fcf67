//! `x-mcp-header` (2026-07-28, SEP-2243) on both sides of the gateway, over real sockets: a
//! stateless client's tool call must carry `Mcp-Param-*` headers matching its arguments; the
//! gateway writes them on the calls it forwards to stateless HTTP upstreams (the project's
//! fixture, which refuses a call without them, and a recording upstream written here, which
//! shows exactly what arrived); and a tool whose annotations break the rules is not listed.

use std::sync::{Arc, Mutex};

use axum::body::Bytes;
use axum::extract::State;
use axum::http::{HeaderMap, StatusCode, header};
use axum::response::{IntoResponse, Response};
use serde_json::{Value, json};

use crate::support::client::{ACCEPT_BOTH, RawClient, Reply, text, tool_names};
use crate::support::config::{config, http, tenant, upstream};
use crate::support::gateway::TestGateway;
use crate::support::peers::{HttpPeer, free_port};
use switchyard::config::PrefixMode;

const V: &str = "2026-07-28";
const TOOL: &str = "test_mcp_param_headers";

fn meta() -> Value {
    json!({
        "io.modelcontextprotocol/protocolVersion": V,
        "io.modelcontextprotocol/clientCapabilities": {},
        "io.modelcontextprotocol/clientInfo": {"name": "raw", "version": "1"},
    })
}

/// A stateless `tools/call` with the standard headers and `params` (`Mcp-Param-*` and any
/// other header).
async fn stateless_call(url: &str, name: &str, arguments: Value, params: &[(&str, &str)]) -> Reply {
    let body = json!({"jsonrpc": "2.0", "id": 7, "method": "tools/call",
                      "params": {"name": name, "arguments": arguments, "_meta": meta()}});
    let mut headers = vec![
        ("content-type", "application/json"),
        ("accept", ACCEPT_BOTH),
        ("mcp-protocol-version", V),
        ("mcp-method", "tools/call"),
        ("mcp-name", name),
    ];
    headers.extend_from_slice(params);
    RawClient::new(url)
        .post_raw(body.to_string(), &headers)
        .await
}

fn assert_mismatch(r: &Reply, header: &str) {
    assert_eq!(r.status, 400, "{r:?}");
    assert_eq!(r.error_code(), Some(-32020), "{:?}", r.last());
    let message = r.last()["error"]["message"].as_str().unwrap_or_default();
    assert!(message.contains(header), "{message}");
}

#[tokio::test]
async fn stateless_clients_must_mirror_and_the_gateway_mirrors_to_the_fixture() {
    // The fixture speaks 2026-07-28 over HTTP and checks the Mcp-Param-* headers it gets.
    let peer = HttpPeer::demo(free_port(), &["--conformance", "--stateless"]).await;
    let mut t = tenant("fx", vec![upstream("fx", http(&peer.url()))]);
    t.prefix.mode = PrefixMode::Always;
    let gw = TestGateway::start(config(vec![t])).await;
    let url = gw.url("fx");
    let public = format!("fx__{TOOL}");
    let args = json!({"region": "Hello, 世界", "priority": 7, "verbose": true, "query": "q"});

    // The fixture itself refuses a call that lacks the headers: a call that passes through
    // the gateway without them from the client got them from the gateway.
    let direct = stateless_call(&peer.url(), TOOL, args.clone(), &[]).await;
    assert_mismatch(&direct, "mcp-param-");

    // The gateway's own check, before anything is forwarded.
    let r = stateless_call(&url, &public, args.clone(), &[]).await;
    assert_mismatch(&r, "mcp-param-");
    let region = "=?base64?SGVsbG8sIOS4lueVjA==?=";
    let wrong: [(&[(&str, &str)], &str); 4] = [
        // One missing.
        (
            &[("mcp-param-region", region), ("mcp-param-priority", "7")],
            "mcp-param-verbose",
        ),
        // A different value.
        (
            &[
                ("mcp-param-region", "Hello"),
                ("mcp-param-priority", "7"),
                ("mcp-param-verbose", "true"),
            ],
            "mcp-param-region",
        ),
        // Invalid Base64 (no padding).
        (
            &[
                ("mcp-param-region", "=?base64?SGVsbG8sIOS4lueVjA?="),
                ("mcp-param-priority", "7"),
                ("mcp-param-verbose", "true"),
            ],
            "mcp-param-region",
        ),
        (
            &[
                ("mcp-param-region", region),
                ("mcp-param-priority", "8"),
                ("mcp-param-verbose", "true"),
            ],
            "mcp-param-priority",
        ),
    ];
    for (headers, named) in wrong {
        let r = stateless_call(&url, &public, args.clone(), headers).await;
        assert_mismatch(&r, named);
    }

    // Matching headers (any case, numbers compared numerically, unknown ones ignored): the
    // call reaches the fixture, which accepts the headers the gateway wrote for it.
    let good = [
        ("Mcp-Param-Region", region),
        ("MCP-PARAM-PRIORITY", "7.0"),
        ("mcp-param-verbose", "true"),
        ("mcp-param-unknown", "anything"),
    ];
    let r = stateless_call(&url, &public, args.clone(), &good).await;
    assert_eq!(r.status, 200, "{:?}", r.last());
    let said = text(r.last());
    assert!(said.contains("Hello, 世界"), "{said}");
    // Null and absent arguments need no header.
    let r = stateless_call(&url, &public, json!({"region": null}), &[]).await;
    assert_eq!(r.status, 200, "{:?}", r.last());

    // A session-based client sends no Mcp-Param-* headers: the gateway writes them.
    let mut c = RawClient::new(&url);
    c.initialize().await;
    let r = c.call_tool(&public, args).await;
    assert_eq!(r.status, 200, "{r:?}");
    assert!(r.last()["result"]["isError"] != true, "{:?}", r.last());
    assert!(text(r.last()).contains("Hello, 世界"), "{:?}", r.last());

    gw.stop().await;
    peer.kill().await;
}

/// What the recording upstream saw: the `Mcp-Param-*` headers of each `tools/call`, sorted.
type Calls = Arc<Mutex<Vec<Vec<(String, String)>>>>;

/// A stateless (2026-07-28) HTTP upstream written for this test: one tool with valid
/// annotations, several with invalid ones; it records the headers of every call.
struct RecordingUpstream {
    url: String,
    calls: Calls,
    task: tokio::task::JoinHandle<()>,
}

impl RecordingUpstream {
    async fn start() -> RecordingUpstream {
        let listener = tokio::net::TcpListener::bind("127.0.0.1:0")
            .await
            .expect("bind the recording upstream");
        let port = listener.local_addr().expect("addr").port();
        let calls = Calls::default();
        let app = axum::Router::new()
            .route("/mcp", axum::routing::post(answer))
            .with_state(calls.clone());
        let task = tokio::spawn(async move {
            let _ = axum::serve(listener, app).await;
        });
        RecordingUpstream {
            url: format!("http://127.0.0.1:{port}/mcp"),
            calls,
            task,
        }
    }

    fn calls(&self) -> Vec<Vec<(String, String)>> {
        self.calls.lock().expect("calls").clone()
    }
}

impl Drop for RecordingUpstream {
    fn drop(&mut self) {
        self.task.abort();
    }
}

fn recorded_tools() -> Value {
    let prop = |p: Value| json!({"type": "object", "properties": {"a": p}});
    json!([
        {"name": "mirror", "inputSchema": {"type": "object", "properties": {
            "region": {"type": "string", "x-mcp-header": "Region"},
            "n": {"type": "integer", "x-mcp-header": "N"},
            "flag": {"type": "boolean", "x-mcp-header": "Flag"},
            "opts": {"type": "object", "properties": {
                "tenant": {"type": "string", "x-mcp-header": "Tenant"}}},
            "q": {"type": "string"}}}},
        {"name": "bad_number", "inputSchema": prop(json!({"type": "number", "x-mcp-header": "A"}))},
        {"name": "bad_token", "inputSchema": prop(json!({"type": "string", "x-mcp-header": "My Region"}))},
        {"name": "bad_empty", "inputSchema": prop(json!({"type": "string", "x-mcp-header": ""}))},
        {"name": "bad_items", "inputSchema": prop(json!({"type": "array",
            "items": {"type": "string", "x-mcp-header": "Item"}}))},
        {"name": "bad_duplicate", "inputSchema": {"type": "object", "properties": {
            "a": {"type": "string", "x-mcp-header": "Region"},
            "b": {"type": "string", "x-mcp-header": "REGION"}}}},
    ])
}

async fn answer(State(calls): State<Calls>, headers: HeaderMap, body: Bytes) -> Response {
    let msg: Value = serde_json::from_slice(&body).unwrap_or_default();
    let Some(id) = msg.get("id").cloned() else {
        return StatusCode::ACCEPTED.into_response();
    };
    let result = match msg["method"].as_str().unwrap_or_default() {
        "server/discover" => json!({"resultType": "complete", "supportedVersions": [V],
            "capabilities": {"tools": {}},
            "_meta": {"io.modelcontextprotocol/serverInfo": {"name": "recorder", "version": "1"}}}),
        "tools/list" => json!({"resultType": "complete", "tools": recorded_tools()}),
        "tools/call" => {
            let mut seen: Vec<(String, String)> = headers
                .iter()
                .filter(|(k, _)| k.as_str().starts_with("mcp-param-"))
                .map(|(k, v)| {
                    let v = v.to_str().unwrap_or("<not text>");
                    (k.as_str().to_owned(), v.to_owned())
                })
                .collect();
            seen.sort();
            calls.lock().expect("calls").push(seen);
            json!({"resultType": "complete", "content": [{"type": "text", "text": "recorded"}]})
        }
        _ => {
            let error = json!({"jsonrpc": "2.0", "id": id,
                               "error": {"code": -32601, "message": "Method not found"}});
            return json_response(StatusCode::NOT_FOUND, &error);
        }
    };
    let reply = json!({"jsonrpc": "2.0", "id": id, "result": result});
    json_response(StatusCode::OK, &reply)
}

fn json_response(status: StatusCode, body: &Value) -> Response {
    (
        status,
        [(header::CONTENT_TYPE, "application/json")],
        body.to_string(),
    )
        .into_response()
}

#[tokio::test]
async fn a_stateless_http_upstream_gets_mirrored_headers_and_invalid_tools_are_left_out() {
    let up = RecordingUpstream::start().await;
    let gw = TestGateway::start(config(vec![tenant(
        "rec",
        vec![upstream("rec", http(&up.url))],
    )]))
    .await;
    let url = gw.url("rec");
    let mut c = RawClient::new(&url);
    c.initialize().await;

    // Only the tool whose annotations keep the rules is listed; it is listed as sent.
    let list = c.request("tools/list", json!({})).await;
    assert_eq!(
        tool_names(list.last()).into_iter().collect::<Vec<_>>(),
        ["mirror"],
        "{:?}",
        list.last()
    );
    assert_eq!(list.last()["result"]["tools"][0], recorded_tools()[0]);

    // A session-based client's call: the gateway writes the headers.
    let r = c
        .call_tool(
            "mirror",
            json!({"region": "Hello, 世界", "n": 42, "flag": false,
                   "opts": {"tenant": "t1"}, "q": "not mirrored"}),
        )
        .await;
    assert_eq!(text(r.last()), "recorded", "{r:?}");
    // Null and absent arguments get none.
    let r = c
        .call_tool("mirror", json!({"region": null, "q": "x"}))
        .await;
    assert_eq!(text(r.last()), "recorded", "{r:?}");
    // A stateless client's call: checked, then forwarded with the gateway's own headers.
    let r = stateless_call(
        &url,
        "mirror",
        json!({"region": " padded ", "n": 42.0}),
        &[
            ("mcp-param-region", "=?base64?IHBhZGRlZCA=?="),
            ("mcp-param-n", "42"),
        ],
    )
    .await;
    assert_eq!(r.status, 200, "{:?}", r.last());

    let pairs = |p: &[(&str, &str)]| -> Vec<(String, String)> {
        p.iter()
            .map(|(k, v)| ((*k).to_owned(), (*v).to_owned()))
            .collect()
    };
    assert_eq!(
        up.calls(),
        [
            pairs(&[
                ("mcp-param-flag", "false"),
                ("mcp-param-n", "42"),
                ("mcp-param-region", "=?base64?SGVsbG8sIOS4lueVjA==?="),
                ("mcp-param-tenant", "t1"),
            ]),
            vec![],
            pairs(&[
                ("mcp-param-n", "42"),
                ("mcp-param-region", "=?base64?IHBhZGRlZCA=?="),
            ]),
        ]
    );
    gw.stop().await;
}

/// An upstream whose tool `t` gains an `x-mcp-header` annotation on `zone` when `annotated`
/// is set (without telling anyone), and then refuses calls without the header (400 -32020).
async fn changing_upstream(
    annotated: Arc<std::sync::atomic::AtomicBool>,
) -> (String, tokio::task::JoinHandle<()>) {
    async fn answer(
        State(annotated): State<Arc<std::sync::atomic::AtomicBool>>,
        headers: HeaderMap,
        body: Bytes,
    ) -> Response {
        let msg: Value = serde_json::from_slice(&body).unwrap_or_default();
        let Some(id) = msg.get("id").cloned() else {
            return StatusCode::ACCEPTED.into_response();
        };
        let on = annotated.load(std::sync::atomic::Ordering::SeqCst);
        let result = match msg["method"].as_str().unwrap_or_default() {
            "server/discover" => json!({"resultType": "complete", "supportedVersions": [V],
                "capabilities": {"tools": {}},
                "_meta": {"io.modelcontextprotocol/serverInfo": {"name": "changing", "version": "1"}}}),
            "tools/list" => {
                let mut zone = json!({"type": "string"});
                if on {
                    zone["x-mcp-header"] = json!("Zone");
                }
                json!({"resultType": "complete", "tools": [{"name": "t",
                    "inputSchema": {"type": "object", "properties": {"zone": zone}}}]})
            }
            "tools/call" => {
                let sent = headers.get("mcp-param-zone").and_then(|v| v.to_str().ok());
                if on && sent != msg["params"]["arguments"]["zone"].as_str() {
                    let error = json!({"jsonrpc": "2.0", "id": id, "error": {"code": -32020,
                        "message": "Header mismatch: Mcp-Param-Zone"}});
                    return json_response(StatusCode::BAD_REQUEST, &error);
                }
                json!({"resultType": "complete", "content": [{"type": "text", "text": "zoned"}]})
            }
            _ => {
                let error = json!({"jsonrpc": "2.0", "id": id,
                                   "error": {"code": -32601, "message": "Method not found"}});
                return json_response(StatusCode::NOT_FOUND, &error);
            }
        };
        json_response(
            StatusCode::OK,
            &json!({"jsonrpc": "2.0", "id": id, "result": result}),
        )
    }
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0")
        .await
        .expect("bind the changing upstream");
    let port = listener.local_addr().expect("addr").port();
    let app = axum::Router::new()
        .route("/mcp", axum::routing::post(answer))
        .with_state(annotated);
    let task = tokio::spawn(async move {
        let _ = axum::serve(listener, app).await;
    });
    (format!("http://127.0.0.1:{port}/mcp"), task)
}

/// An upstream's `-32020` reaches the client as such (answered with HTTP 400 upstream) and
/// makes the gateway drop its cached tool list: the client's retry is sent with the headers
/// of the tool's new schema.
#[tokio::test]
async fn an_upstream_header_mismatch_refreshes_the_cached_tool_schemas() {
    let annotated = Arc::new(std::sync::atomic::AtomicBool::new(false));
    let (url, task) = changing_upstream(annotated.clone()).await;
    let gw = TestGateway::start(config(vec![tenant(
        "chg",
        vec![upstream("chg", http(&url))],
    )]))
    .await;
    let mut c = RawClient::new(gw.url("chg"));
    c.initialize().await;
    assert!(tool_names(c.request("tools/list", json!({})).await.last()).contains("t"));
    let r = c.call_tool("t", json!({"zone": "eu"})).await;
    assert_eq!(text(r.last()), "zoned", "{r:?}");

    annotated.store(true, std::sync::atomic::Ordering::SeqCst);
    let r = c.call_tool("t", json!({"zone": "eu"})).await;
    assert_eq!(r.error_code(), Some(-32020), "{:?}", r.last());
    let r = c.call_tool("t", json!({"zone": "eu"})).await;
    assert_eq!(text(r.last()), "zoned", "{r:?}");
    gw.stop().await;
    task.abort();
}
