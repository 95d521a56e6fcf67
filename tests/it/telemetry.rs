//! OpenTelemetry traces of a real gateway process, exported over OTLP/HTTP to an in-test
//! receiver: a server span per client request parented to the client's W3C trace context (from
//! `_meta`, else from headers), a client span per upstream call under it, and that call's
//! context reaching the HTTP upstream in headers and both upstreams (HTTP and stdio) in
//! `_meta`. Logs carry the same request context (tenant, hashed session, trace id); neither
//! logs nor spans carry the session id or the upstream's credential. The standard `OTEL_*`
//! variables turn tracing on (and off), and spans still buffered at SIGTERM are flushed.

use std::path::Path;

use opentelemetry_proto::tonic::trace::v1::span::SpanKind;
use serde_json::{Value, json};

use crate::support::client::{RawClient, Reply};
use crate::support::config::demo_server_exe;
use crate::support::otlp::{OtlpReceiver, ReceivedSpan};
use crate::support::peers::{HttpPeer, free_port};
use crate::support::process::GatewayProcess;
use crate::support::{TempDir, read_trace};

const SECRET: &str = "upstream-secret-7f3a9c";

/// A tenant `acme` with a stdio upstream `alpha` and an HTTP upstream `web`, both the demo
/// server recording what it receives; `telemetry` is the config's section (may be empty).
fn write_config(dir: &TempDir, port: u16, web: &HttpPeer, telemetry: &str) -> std::path::PathBuf {
    let exe = demo_server_exe().display().to_string();
    let stdio_trace = dir.path("alpha.jsonl").display().to_string();
    let text = format!(
        "listen: 127.0.0.1:{port}\n\
         {telemetry}\
         tenants:\n\
         \x20 - name: acme\n\
         \x20   prefix: {{mode: always}}\n\
         \x20   upstreams:\n\
         \x20     - {{name: alpha, stdio: {{command: \"{exe}\", args: [--stdio, --trace, \"{stdio_trace}\"]}}}}\n\
         \x20     - {{name: web, http: {{url: \"{url}\", headers: {{X-Api-Key: \"{SECRET}\"}}}}}}\n",
        url = web.url(),
    );
    let path = dir.path("gateway.yaml");
    std::fs::write(&path, text).expect("config");
    path
}

/// POSTs a JSON-RPC request on `client`'s session with extra headers.
async fn post_with(client: &RawClient, body: &Value, extra: &[(&str, &str)]) -> Reply {
    let standard = client.standard_headers();
    let mut headers: Vec<(&str, &str)> = standard.iter().map(|(k, v)| (*k, v.as_str())).collect();
    headers.extend_from_slice(extra);
    client.post_raw(body.to_string(), &headers).await
}

fn echo(client: &RawClient, tool: &str, meta: Option<Value>) -> Value {
    let mut params = json!({"name": tool, "arguments": {"message": "traced"}});
    if let Some(meta) = meta {
        params["_meta"] = meta;
    }
    json!({"jsonrpc": "2.0", "id": client.next_id(), "method": "tools/call", "params": params})
}

/// The session id as the gateway shows it: the first 8 bytes of its SHA-256, in hex.
fn hashed(session: &str) -> String {
    ring::digest::digest(&ring::digest::SHA256, session.as_bytes()).as_ref()[..8]
        .iter()
        .map(|b| format!("{b:02x}"))
        .collect()
}

/// The `tools/call` messages an upstream received, in order.
fn received_calls(trace: &Path) -> Vec<Value> {
    read_trace(trace)
        .into_iter()
        .filter(|m| m["method"] == "tools/call")
        .collect()
}

/// The HTTP headers of the upstream request that carried a `traceparent` of `trace_id`.
fn headers_with_trace(trace: &Path, trace_id: &str) -> Value {
    read_trace(trace)
        .into_iter()
        .filter_map(|m| m.get("http_headers").cloned())
        .find(|h| {
            h["traceparent"]
                .as_str()
                .is_some_and(|t| t.contains(trace_id))
        })
        .unwrap_or_else(|| panic!("no upstream HTTP request carried trace {trace_id}"))
}

fn assert_no_secrets(spans: &[ReceivedSpan], logs: &str, session: &str) {
    for s in spans {
        for (k, v) in &s.attributes {
            assert!(
                !v.contains(session) && !v.contains(SECRET),
                "span {} attribute {k} leaks a secret: {v}",
                s.name
            );
        }
    }
    assert!(!logs.contains(session), "the logs show a session id");
    assert!(
        !logs.contains(SECRET),
        "the logs show the upstream credential"
    );
}

#[tokio::test]
async fn spans_and_trace_context_follow_a_request_through_both_upstreams() {
    let receiver = OtlpReceiver::start().await;
    let dir = TempDir::new("otel");
    let web_trace = dir.path("web.jsonl");
    let web = HttpPeer::demo(free_port(), &["--trace", &web_trace.display().to_string()]).await;
    let port = free_port();
    let telemetry = format!(
        "telemetry:\n  otlp_endpoint: \"{}\"\n  service_name: switchyard-it\n  sample_ratio: 1.0\n",
        receiver.base_url()
    );
    let path = write_config(&dir, port, &web, &telemetry);
    let gw = GatewayProcess::run_with_env(
        &path,
        port,
        &[],
        &[("OTEL_BSP_SCHEDULE_DELAY", "100")],
        "otel",
    )
    .await;
    let mut client = RawClient::new(gw.url("acme"));
    client.initialize().await;
    let session = client.session.clone().expect("session id");

    // 1. Trace context in the HTTP headers, a call to the HTTP upstream.
    let (trace_a, parent_a) = ("4bf92f3577b34da6a3ce929d0e0e4736", "00f067aa0ba902b7");
    let call_a = echo(&client, "web__echo", None);
    let reply = post_with(
        &client,
        &call_a,
        &[
            ("traceparent", &format!("00-{trace_a}-{parent_a}-01")),
            ("tracestate", "vendor=abc"),
        ],
    )
    .await;
    assert_eq!(
        reply.last()["result"]["content"][0]["text"],
        "traced",
        "{reply:?}"
    );

    let server_a = receiver
        .wait_for("server span of trace A", |s| {
            s.trace_id == trace_a && s.kind == SpanKind::Server
        })
        .await;
    assert_eq!(server_a.parent_span_id, parent_a, "{server_a:#?}");
    assert_eq!(server_a.name, "tools/call");
    assert_eq!(server_a.service, "switchyard-it");
    assert_eq!(server_a.attr("tenant"), Some("acme"));
    assert_eq!(server_a.attr("mcp.method.name"), Some("tools/call"));
    assert_eq!(
        server_a.attr("jsonrpc.request.id"),
        Some(call_a["id"].to_string().as_str())
    );
    assert_eq!(
        server_a.attr("mcp.session.id"),
        Some(hashed(&session).as_str())
    );
    assert_eq!(server_a.attr("http.response.status_code"), Some("200"));
    assert_ne!(server_a.status, 2, "{server_a:#?}");
    let client_a = receiver
        .wait_for("client span of trace A", |s| {
            s.trace_id == trace_a && s.kind == SpanKind::Client
        })
        .await;
    assert_eq!(client_a.parent_span_id, server_a.span_id, "{client_a:#?}");
    assert_eq!(client_a.attr("upstream"), Some("web"));
    assert_eq!(client_a.attr("mcp.method.name"), Some("tools/call"));

    // The HTTP upstream got the upstream call's context in headers and in `_meta`, with the
    // client's tracestate.
    let expected_a = format!("00-{trace_a}-{}-01", client_a.span_id);
    let headers = headers_with_trace(&web_trace, trace_a);
    assert_eq!(headers["traceparent"], expected_a.as_str(), "{headers}");
    assert_eq!(headers["tracestate"], "vendor=abc", "{headers}");
    let call = received_calls(&web_trace).pop().expect("web got the call");
    assert_eq!(
        call["params"]["_meta"]["traceparent"],
        expected_a.as_str(),
        "{call}"
    );
    assert_eq!(
        call["params"]["_meta"]["tracestate"], "vendor=abc",
        "{call}"
    );
    assert_eq!(call["params"]["name"], "echo");

    // 2. Trace context in `_meta` (which wins over a header), a call to the stdio upstream.
    let (trace_b, parent_b) = ("0af7651916cd43dd8448eb211c80319c", "b7ad6b7169203331");
    let other_trace = "11111111111111111111111111111111";
    let reply = post_with(
        &client,
        &echo(
            &client,
            "alpha__echo",
            Some(json!({"traceparent": format!("00-{trace_b}-{parent_b}-01"), "baggage": "k=v"})),
        ),
        &[("traceparent", &format!("00-{other_trace}-{parent_a}-01"))],
    )
    .await;
    assert_eq!(
        reply.last()["result"]["content"][0]["text"],
        "traced",
        "{reply:?}"
    );
    let server_b = receiver
        .wait_for("server span of trace B", |s| {
            s.trace_id == trace_b && s.kind == SpanKind::Server
        })
        .await;
    assert_eq!(server_b.parent_span_id, parent_b);
    let client_b = receiver
        .wait_for("client span of trace B", |s| {
            s.trace_id == trace_b && s.kind == SpanKind::Client
        })
        .await;
    assert_eq!(client_b.parent_span_id, server_b.span_id);
    assert_eq!(client_b.attr("upstream"), Some("alpha"));
    let call = received_calls(&dir.path("alpha.jsonl"))
        .pop()
        .expect("alpha got the call");
    assert_eq!(
        call["params"]["_meta"]["traceparent"],
        format!("00-{trace_b}-{}-01", client_b.span_id).as_str(),
        "{call}"
    );
    assert_eq!(
        call["params"]["_meta"]["baggage"], "k=v",
        "baggage passes as is"
    );
    assert!(
        !receiver.spans().iter().any(|s| s.trace_id == other_trace),
        "the header's context was used although `_meta` had one"
    );

    // 3. No context from the client: a new trace, still propagated upstream.
    let reply = client
        .request(
            "tools/call",
            json!({"name": "web__echo", "arguments": {"message": "traced"}}),
        )
        .await;
    assert_eq!(reply.status, 200);
    let known = [trace_a, trace_b];
    let server_c = receiver
        .wait_for("a root server span for tools/call", |s| {
            s.kind == SpanKind::Server
                && s.name == "tools/call"
                && !known.contains(&s.trace_id.as_str())
        })
        .await;
    assert!(
        server_c.parent_span_id.is_empty(),
        "a request without context starts a trace: {server_c:#?}"
    );
    headers_with_trace(&web_trace, &server_c.trace_id);

    // 4. A failed request: an error span with its status code.
    let mut stranger = RawClient::new(gw.url("acme"));
    stranger.session = Some("no-such-session".into());
    let reply = stranger.request("tools/list", json!({})).await;
    assert_eq!(reply.status, 404);
    let failed = receiver
        .wait_for("the 404's server span", |s| {
            s.attr("http.response.status_code") == Some("404")
        })
        .await;
    assert_eq!(failed.status, 2, "error status: {failed:#?}");
    assert!(failed.attr("error.type").is_some(), "{failed:#?}");

    assert!(
        receiver
            .content_types()
            .iter()
            .all(|c| c == "application/x-protobuf"),
        "{:?}",
        receiver.content_types()
    );
    let logs = gw.stop().await;
    assert_no_secrets(&receiver.spans(), &logs, &session);

    // The audit event of the first call, logged in its request's context.
    let audit: Value = crate::support::json_lines(&logs)
        .find(|l| l["target"] == "switchyard::audit" && l["span"]["trace_id"] == trace_a)
        .unwrap_or_else(|| panic!("no audit line in trace A:\n{logs}"));
    assert_eq!(audit["upstream"], "web", "{audit}");
    assert_eq!(audit["span"]["tenant"], "acme", "{audit}");
    assert_eq!(
        audit["span"]["mcp.session.id"],
        hashed(&session).as_str(),
        "{audit}"
    );
    assert_eq!(audit["span"]["mcp.method.name"], "tools/call", "{audit}");
    assert_eq!(
        audit["span"]["jsonrpc.request.id"],
        call_a["id"].to_string().as_str(),
        "{audit}"
    );
}

#[tokio::test]
async fn standard_otel_variables_turn_tracing_on_and_spans_are_flushed_at_exit() {
    let receiver = OtlpReceiver::start().await;
    let dir = TempDir::new("otel-env");
    let web = HttpPeer::demo(free_port(), &[]).await;
    let port = free_port();
    let path = write_config(&dir, port, &web, "");
    // A schedule delay far beyond the test: spans only arrive through the shutdown flush.
    let gw = GatewayProcess::run_with_env(
        &path,
        port,
        &[],
        &[
            ("OTEL_EXPORTER_OTLP_ENDPOINT", &receiver.base_url()),
            ("OTEL_SERVICE_NAME", "from-env"),
            ("OTEL_BSP_SCHEDULE_DELAY", "600000"),
        ],
        "otel-env",
    )
    .await;
    let mut client = RawClient::new(gw.url("acme"));
    client.initialize().await;
    assert_eq!(client.request("tools/list", json!({})).await.status, 200);
    gw.stop().await;
    let initialize = receiver
        .wait_for("the initialize span", |s| s.name == "initialize")
        .await;
    assert_eq!(initialize.service, "from-env");
    assert_eq!(initialize.kind, SpanKind::Server);
    let list = receiver
        .wait_for("the tools/list server span", |s| {
            s.name == "tools/list" && s.kind == SpanKind::Server
        })
        .await;
    assert!(list.parent_span_id.is_empty(), "{list:#?}");
    // The gateway's own upstream call (the catalog fetch) is a child of the request's span.
    let fetch = receiver
        .wait_for("the catalog fetch's client span", |s| {
            s.name == "tools/list" && s.kind == SpanKind::Client
        })
        .await;
    assert_eq!(fetch.trace_id, list.trace_id);
    assert_eq!(fetch.parent_span_id, list.span_id);
}

#[tokio::test]
async fn with_tracing_off_the_clients_context_passes_through_untouched() {
    let receiver = OtlpReceiver::start().await;
    let dir = TempDir::new("otel-off");
    let web_trace = dir.path("web.jsonl");
    let web = HttpPeer::demo(free_port(), &["--trace", &web_trace.display().to_string()]).await;
    let port = free_port();
    let telemetry = format!("telemetry:\n  otlp_endpoint: \"{}\"\n", receiver.base_url());
    let path = write_config(&dir, port, &web, &telemetry);
    let gw = GatewayProcess::run_with_env(
        &path,
        port,
        &[],
        &[
            ("OTEL_SDK_DISABLED", "true"),
            ("OTEL_BSP_SCHEDULE_DELAY", "100"),
        ],
        "otel-off",
    )
    .await;
    let mut client = RawClient::new(gw.url("acme"));
    client.initialize().await;
    let parent = "00-0af7651916cd43dd8448eb211c80319c-b7ad6b7169203331-01";
    let reply = post_with(
        &client,
        &echo(&client, "web__echo", Some(json!({"traceparent": parent}))),
        &[("traceparent", parent)],
    )
    .await;
    assert_eq!(reply.status, 200);
    let call = received_calls(&web_trace).pop().expect("web got the call");
    assert_eq!(call["params"]["_meta"]["traceparent"], parent, "{call}");
    let leaked_header = read_trace(&web_trace)
        .into_iter()
        .filter_map(|m| m.get("http_headers").cloned())
        .any(|h| h.get("traceparent").is_some());
    assert!(!leaked_header, "client headers are not forwarded upstream");
    // Stopping flushes whatever an exporter would have buffered: nothing must have come.
    gw.stop().await;
    assert!(receiver.spans().is_empty(), "{:#?}", receiver.spans());
}
