//! An OTLP/HTTP trace receiver for tests: `POST /v1/traces` with an `ExportTraceServiceRequest`
//! in protobuf, decoded with the official OpenTelemetry protocol definitions, spans kept for
//! the test to inspect.

use std::sync::{Arc, Mutex};
use std::time::Duration;

use axum::body::Bytes;
use axum::extract::State;
use axum::http::{HeaderMap, StatusCode};
use opentelemetry_proto::tonic::collector::trace::v1::{
    ExportTraceServiceRequest, ExportTraceServiceResponse,
};
use opentelemetry_proto::tonic::common::v1::any_value;
use opentelemetry_proto::tonic::trace::v1::span::SpanKind;
use prost::Message;

/// One received span, flattened.
#[derive(Debug, Clone)]
pub struct ReceivedSpan {
    pub service: String,
    pub name: String,
    pub kind: SpanKind,
    pub trace_id: String,
    pub span_id: String,
    pub parent_span_id: String,
    /// Attributes rendered as strings (ints and bools in their JSON form).
    pub attributes: Vec<(String, String)>,
    /// OTLP status code: 0 unset, 1 ok, 2 error.
    pub status: i32,
}

impl ReceivedSpan {
    pub fn attr(&self, key: &str) -> Option<&str> {
        self.attributes
            .iter()
            .find(|(k, _)| k == key)
            .map(|(_, v)| v.as_str())
    }
}

#[derive(Default)]
struct Received {
    spans: Vec<ReceivedSpan>,
    /// Content types of the export requests (the exporter must send protobuf).
    content_types: Vec<String>,
}

pub struct OtlpReceiver {
    pub port: u16,
    received: Arc<Mutex<Received>>,
    task: tokio::task::JoinHandle<()>,
}

impl OtlpReceiver {
    pub async fn start() -> OtlpReceiver {
        let listener = tokio::net::TcpListener::bind("127.0.0.1:0")
            .await
            .expect("bind the OTLP receiver");
        let port = listener.local_addr().expect("addr").port();
        let received = Arc::new(Mutex::new(Received::default()));
        let app = axum::Router::new()
            .route("/v1/traces", axum::routing::post(export))
            .with_state(received.clone());
        let task = tokio::spawn(async move {
            let _ = axum::serve(listener, app).await;
        });
        OtlpReceiver {
            port,
            received,
            task,
        }
    }

    /// The base URL the gateway is given (`/v1/traces` is appended by the exporter).
    pub fn base_url(&self) -> String {
        format!("http://127.0.0.1:{}", self.port)
    }

    pub fn spans(&self) -> Vec<ReceivedSpan> {
        self.received.lock().expect("lock").spans.clone()
    }

    pub fn content_types(&self) -> Vec<String> {
        self.received.lock().expect("lock").content_types.clone()
    }

    /// Waits (bounded) until a span satisfies `pred`.
    pub async fn wait_for(&self, what: &str, pred: impl Fn(&ReceivedSpan) -> bool) -> ReceivedSpan {
        let deadline = tokio::time::Instant::now() + Duration::from_secs(20);
        loop {
            if let Some(s) = self.spans().into_iter().find(|s| pred(s)) {
                return s;
            }
            assert!(
                tokio::time::Instant::now() < deadline,
                "no span {what} within 20s; received: {:#?}",
                self.spans()
            );
            tokio::time::sleep(Duration::from_millis(50)).await;
        }
    }
}

impl Drop for OtlpReceiver {
    fn drop(&mut self) {
        self.task.abort();
    }
}

async fn export(
    State(received): State<Arc<Mutex<Received>>>,
    headers: HeaderMap,
    body: Bytes,
) -> (StatusCode, Vec<u8>) {
    let request = match ExportTraceServiceRequest::decode(body) {
        Ok(r) => r,
        Err(_) => return (StatusCode::BAD_REQUEST, Vec::new()),
    };
    let mut got = received.lock().expect("lock");
    got.content_types.push(
        headers
            .get("content-type")
            .and_then(|v| v.to_str().ok())
            .unwrap_or_default()
            .to_owned(),
    );
    for rs in request.resource_spans {
        let service = rs
            .resource
            .iter()
            .flat_map(|r| r.attributes.iter())
            .find(|kv| kv.key == "service.name")
            .map(|kv| render(kv.value.as_ref()))
            .unwrap_or_default();
        for span in rs.scope_spans.into_iter().flat_map(|ss| ss.spans) {
            got.spans.push(ReceivedSpan {
                service: service.clone(),
                kind: SpanKind::try_from(span.kind).unwrap_or(SpanKind::Unspecified),
                name: span.name,
                trace_id: hex(&span.trace_id),
                span_id: hex(&span.span_id),
                parent_span_id: hex(&span.parent_span_id),
                attributes: span
                    .attributes
                    .iter()
                    .map(|kv| (kv.key.clone(), render(kv.value.as_ref())))
                    .collect(),
                status: span.status.map_or(0, |s| s.code),
            });
        }
    }
    (
        StatusCode::OK,
        ExportTraceServiceResponse::default().encode_to_vec(),
    )
}

fn render(v: Option<&opentelemetry_proto::tonic::common::v1::AnyValue>) -> String {
    match v.and_then(|v| v.value.as_ref()) {
        Some(any_value::Value::StringValue(s)) => s.clone(),
        Some(any_value::Value::IntValue(i)) => i.to_string(),
        Some(any_value::Value::BoolValue(b)) => b.to_string(),
        Some(any_value::Value::DoubleValue(d)) => d.to_string(),
        Some(other) => format!("{other:?}"),
        None => String::new(),
    }
}

fn hex(bytes: &[u8]) -> String {
    bytes.iter().map(|b| format!("{b:02x}")).collect()
}
