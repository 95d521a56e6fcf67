//! Logs and traces: the process's `tracing` subscriber (text or JSON logs on stderr, written in
//! batches by `writer.rs`, filtered by `RUST_LOG`) and, when configured, OpenTelemetry export
//! of the gateway's spans (one per client request, one per upstream call) to an OTLP/HTTP
//! collector.
//!
//! Tracing is on when the config's `telemetry.otlp_endpoint` or one of the standard
//! `OTEL_EXPORTER_OTLP_ENDPOINT` / `OTEL_EXPORTER_OTLP_TRACES_ENDPOINT` variables is set, and
//! neither `OTEL_SDK_DISABLED=true` nor `OTEL_TRACES_EXPORTER=none` says otherwise. The other
//! standard variables (`OTEL_SERVICE_NAME`, `OTEL_RESOURCE_ATTRIBUTES`,
//! `OTEL_TRACES_SAMPLER[_ARG]`, `OTEL_EXPORTER_OTLP_HEADERS`, `OTEL_BSP_*`) apply; the config's
//! values win where both are set. Only the spans of target [`TARGET`] are exported.

mod context;
mod in_span;
mod json;
mod log_context;
mod printable;
mod settings;
mod text;
mod writer;

use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};

use opentelemetry::trace::TracerProvider as _;
use opentelemetry_otlp::WithExportConfig;
use opentelemetry_sdk::Resource;
use opentelemetry_sdk::trace::{Sampler, SdkTracerProvider};
use tracing_subscriber::filter::{EnvFilter, Targets};
use tracing_subscriber::layer::Filter;
use tracing_subscriber::layer::SubscriberExt;
use tracing_subscriber::util::SubscriberInitExt;
use tracing_subscriber::{Layer, Registry};

pub use context::{Propagation, adopt_parent, outgoing, trace_id};
pub use in_span::{carry, in_span};
use log_context::LogContext;
pub use printable::printable;
pub use settings::{Settings, settings};

use crate::config::TelemetryConfig;
use crate::store::HashedId;

/// The target of the spans that are exported: request spans and upstream-call spans.
pub const TARGET: &str = "switchyard::trace";

/// Whether spans are exported. Set once at start; read on the hot path to skip building
/// spans and trace context nobody would see.
static ENABLED: AtomicBool = AtomicBool::new(false);

/// Whether OpenTelemetry export is on in this process.
pub fn enabled() -> bool {
    ENABLED.load(Ordering::Relaxed)
}

/// How log lines are written on stderr.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum LogFormat {
    Text,
    /// One JSON object per line, with the fields of the current request span (tenant,
    /// method, JSON-RPC id, hashed session id, trace id).
    Json,
}

/// The installed trace pipeline; [`Telemetry::shutdown`] flushes what is still buffered.
#[must_use = "call shutdown() before exiting, or buffered spans are lost"]
pub struct Telemetry {
    provider: Option<SdkTracerProvider>,
}

impl Telemetry {
    /// Exports the spans still buffered and stops the exporter (blocking; call it outside the
    /// async runtime), then writes the pending log lines.
    pub fn shutdown(mut self) {
        if let Some(provider) = self.provider.take()
            && let Err(e) = provider.shutdown()
        {
            tracing::warn!(error = %e, "trace exporter did not shut down cleanly");
        }
    }
}

impl Drop for Telemetry {
    /// Log lines are written in batches: whatever way the process ends, the last ones too.
    fn drop(&mut self) {
        writer::flush();
    }
}

/// Installs logging only (commands that serve nothing): lines written at once.
pub fn init_logs(format: LogFormat) {
    let (filter, _) = log_filter(std::env::var("RUST_LOG").ok().as_deref());
    let _ = Registry::default()
        .with(log_layer(format, writer::LogWriter::Direct, filter))
        .try_init();
}

/// Installs logging and, when [`settings`] says so, trace export. A trace exporter that
/// cannot be built is reported and the gateway runs without it.
pub fn init(format: LogFormat, config: &TelemetryConfig) -> Telemetry {
    let env = |name: &str| std::env::var(name).ok();
    let wanted = settings(config, &env);
    let built = wanted.as_ref().map(build_provider);
    let (provider, error) = match built {
        Some(Ok(p)) => (Some(p), None),
        Some(Err(e)) => (None, Some(e)),
        None => (None, None),
    };
    let otel = provider.as_ref().map(|p| {
        tracing_opentelemetry::layer()
            .with_tracer(p.tracer("switchyard"))
            .with_tracked_inactivity(false)
            .with_threads(false)
            .with_location(false)
            .with_context_activation(false)
            .with_filter(Targets::new().with_target(TARGET, tracing::Level::INFO))
    });
    let (filter, spans_named) = log_filter(std::env::var("RUST_LOG").ok().as_deref());
    // A request's log context is the gateway's own unless a span must exist: an exported
    // trace, or a log filter that names spans.
    if otel.is_none() && !spans_named {
        log_context::use_it();
    }
    let _ = Registry::default()
        .with(log_layer(format, writer::LogWriter::stderr(), filter))
        .with(otel)
        .try_init();
    if let Some(p) = std::env::var("OTEL_EXPORTER_OTLP_PROTOCOL")
        .ok()
        .filter(|p| !p.is_empty() && p != "http/protobuf")
        && wanted.is_some()
    {
        tracing::warn!(protocol = %p, "OTEL_EXPORTER_OTLP_PROTOCOL ignored: traces are exported as OTLP/HTTP protobuf");
    }
    if let Some(e) = error {
        tracing::error!(error = %e, "cannot start the OTLP trace exporter; running without traces");
    }
    if let (Some(s), Some(_)) = (&wanted, &provider) {
        ENABLED.store(true, Ordering::Relaxed);
        tracing::info!(
            endpoint = s.endpoint.as_deref().unwrap_or("(from OTEL_EXPORTER_OTLP_*)"),
            sample_ratio = ?s.sample_ratio,
            "exporting traces over OTLP/HTTP"
        );
    }
    Telemetry { provider }
}

/// A log filter, and whether it names spans (so that requests need real spans).
type LogFilter = (Box<dyn Filter<Registry> + Send + Sync>, bool);

fn log_layer(
    format: LogFormat,
    writer: writer::LogWriter,
    filter: Box<dyn Filter<Registry> + Send + Sync>,
) -> Box<dyn Layer<Registry> + Send + Sync> {
    // No colours (the subscriber is built without them): escape codes cost time on every
    // line and get in the way of whoever reads a log file.
    let base = tracing_subscriber::fmt::layer()
        .with_writer(writer)
        .with_timer(text::Clock);
    match format {
        LogFormat::Text => base
            .fmt_fields(text::Fields)
            .event_format(text::Line::new())
            .with_filter(filter)
            .boxed(),
        LogFormat::Json => base
            .fmt_fields(tracing_subscriber::fmt::format::JsonFields::new())
            .event_format(json::JsonLine::new())
            .with_filter(filter)
            .boxed(),
    }
}

/// The log filter `RUST_LOG` asks for (`info` without it, or when it does not parse), and
/// whether it names spans. When every directive names only a target and a level
/// (`info,switchyard=debug`) it is a `Targets`, which matches them as `EnvFilter` does but
/// keeps no account of spans: `EnvFilter` takes a lock and looks the span up at every enter,
/// exit and record (~400 instructions per forwarded call), needed only for directives on
/// spans or fields (`[…]`), which need requests to have real spans.
fn log_filter(spec: Option<&str>) -> LogFilter {
    let Some(spec) = spec else {
        return (
            Box::new(Targets::new().with_default(tracing::Level::INFO)),
            false,
        );
    };
    let env = EnvFilter::try_new(spec);
    // Only plain directives, and no empty one (`Targets` reads `""` as a directive of its
    // own, `EnvFilter` as none).
    let plain = !spec.contains('[') && spec.split(',').all(|d| !d.trim().is_empty());
    if plain
        && env.is_ok()
        && let Ok(targets) = spec.parse::<Targets>()
    {
        return (Box::new(targets), false);
    }
    match env {
        Ok(env) => (Box::new(env), true),
        Err(_) => (Box::new(EnvFilter::new("info")), false),
    }
}

fn build_provider(s: &Settings) -> Result<SdkTracerProvider, String> {
    // The exporter's HTTP client uses rustls (an https collector) and needs the provider.
    crate::crypto::install_crypto_provider();
    let mut exporter = opentelemetry_otlp::SpanExporter::builder()
        .with_http()
        .with_protocol(opentelemetry_otlp::Protocol::HttpBinary);
    if let Some(url) = &s.endpoint {
        exporter = exporter.with_endpoint(url.clone());
    }
    let exporter = exporter.build().map_err(|e| e.to_string())?;
    let mut resource = Resource::builder().with_attribute(opentelemetry::KeyValue::new(
        "service.version",
        env!("CARGO_PKG_VERSION"),
    ));
    if let Some(name) = &s.service_name {
        resource = resource.with_service_name(name.clone());
    }
    let mut provider = SdkTracerProvider::builder()
        .with_batch_exporter(exporter)
        .with_resource(resource.build());
    if let Some(ratio) = s.sample_ratio {
        provider = provider.with_sampler(Sampler::ParentBased(Box::new(
            Sampler::TraceIdRatioBased(ratio),
        )));
    }
    Ok(provider.build())
}

/// The span of one HTTP exchange on a tenant's endpoint (exported as a server span). Created
/// before the client's trace context is known: give it a parent with [`adopt_parent`] before
/// entering it. Its fields are the log context of everything the request does. `named`: the
/// client message's method and id when they are known already (see [`name_request`]).
fn request_span(
    tenant: &str,
    http_method: &str,
    named: Option<(&str, Option<&str>)>,
) -> tracing::Span {
    use tracing::field::Empty;
    let (method, id) = named.map_or((None, None), |(m, id)| (Some(m), id));
    let span = tracing::info_span!(
        target: TARGET,
        "request",
        otel.name = Empty,
        otel.kind = Empty,
        otel.status_code = Empty,
        tenant = tenant,
        http.request.method = http_method,
        mcp.method.name = method,
        jsonrpc.request.id = id,
        mcp.session.id = Empty,
        http.response.status_code = Empty,
        error.type = Empty,
        trace_id = Empty,
    );
    // The exporter's fields stay out of the logs when nothing is exported.
    if enabled() {
        span.record("otel.name", http_method);
        span.record("otel.kind", "server");
    }
    span
}

/// The request span of an exchange, opened when first needed: at once when traces are
/// exported (the server span covers the whole exchange, a refused body too), else when the
/// exchange enters it — a POST once its message is parsed ([`name_message`]), so the span is
/// made with the method and id instead of being made and then recorded into (each a pass
/// through the log layers: ~1,100 instructions per forwarded call). Nothing is logged inside
/// the span before that: the body is read and parsed outside it.
///
/// When no span needs to exist (nothing exported, no span named by the log filter) the
/// exchange has the gateway's own log context instead (`log_context`), which the log lines
/// write as they would the span's fields, for a fraction of the span's cost.
pub struct RequestSpan {
    pub span: tracing::Span,
    context: Option<Arc<LogContext>>,
}

impl RequestSpan {
    pub fn start(tenant: &str, http_method: &http::Method) -> RequestSpan {
        RequestSpan {
            span: if enabled() {
                request_span(tenant, http_method.as_str(), None)
            } else {
                tracing::Span::none()
            },
            context: None,
        }
    }

    fn is_open(&self) -> bool {
        !self.span.is_none() || self.context.is_some()
    }

    /// The span (or context), made now if it was not yet.
    pub fn open(&mut self, tenant: &Arc<str>, http_method: &http::Method) -> &RequestSpan {
        if !self.is_open() {
            if log_context::in_use() {
                self.context = Some(Arc::new(LogContext::new(tenant, http_method, None)));
            } else {
                self.span = request_span(tenant, http_method.as_str(), None);
            }
        }
        self
    }

    /// Names the client message the exchange carries (`id`: a request's), in a span (or
    /// context) made now with it, or recorded in the one opened before. Both are the
    /// client's to choose and every line of the request repeats them: cut at
    /// `printable::MAX_LOGGED_NAME` characters.
    pub fn name_message(
        &mut self,
        tenant: &Arc<str>,
        http_method: &http::Method,
        method: &str,
        id: Option<&str>,
    ) -> &RequestSpan {
        let method = printable::cut(method);
        let id = id.map(printable::cut);
        if let Some(context) = &mut self.context {
            *context = Arc::new(context.naming(method, id));
            return self;
        }
        if self.span.is_none() {
            if log_context::in_use() {
                let named = LogContext::new(tenant, http_method, Some((method, id)));
                self.context = Some(Arc::new(named));
                return self;
            }
            self.span = request_span(tenant, http_method.as_str(), Some((method, id)));
        } else {
            match id {
                Some(id) => name_request(&self.span, method, id),
                None => {
                    self.span.record("mcp.method.name", method);
                }
            }
        }
        if enabled() {
            self.span.record("otel.name", method);
        }
        self
    }
}

/// Records the request's (hashed) session id in the current request span or log context.
pub fn record_session(id: HashedId) {
    if log_context::in_use() {
        log_context::record_session(id);
    } else {
        record_in_current("mcp.session.id", id.as_str());
    }
}

/// Names a client request in its request span: its method and id, recorded together (each
/// record is one pass through the log layers, so one rather than two per request).
fn name_request(span: &tracing::Span, method: &str, id: &str) {
    let Some(meta) = span.metadata() else { return };
    let fields = meta.fields();
    let (Some(m), Some(i)) = (
        fields.field("mcp.method.name"),
        fields.field("jsonrpc.request.id"),
    ) else {
        return;
    };
    span.record_all(&fields.value_set(&[
        (&m, Some(&method as &dyn tracing::Value)),
        (&i, Some(&id as &dyn tracing::Value)),
    ]));
}

/// Records `value` as `field` of the span the current task is in (if it has that field),
/// without taking a handle to the span (`Span::current()` clones and drops one: two trips
/// through the span registry).
fn record_in_current(field: &str, value: &str) {
    tracing::dispatcher::get_default(|d| {
        let current = d.current_span();
        let (Some(id), Some(meta)) = (current.id(), current.metadata()) else {
            return;
        };
        let fields = meta.fields();
        if let Some(f) = fields.field(field) {
            let pairs = [(&f, Some(&value as &dyn tracing::Value))];
            let values = fields.value_set(&pairs);
            d.record(id, &tracing::span::Record::new(&values));
        }
    });
}

/// The span of one request the gateway sends an upstream (exported as a client span), a child
/// of the current request span; a disabled span when traces are off.
pub fn upstream_span(tenant: &str, upstream: &str, method: &str) -> tracing::Span {
    if !enabled() {
        return tracing::Span::none();
    }
    tracing::info_span!(
        target: TARGET,
        "upstream call",
        otel.name = method,
        otel.kind = "client",
        otel.status_code = tracing::field::Empty,
        tenant = tenant,
        upstream = upstream,
        mcp.method.name = method,
        error.type = tracing::field::Empty,
    )
}

/// Marks `span` failed with `error` (a bounded label such as `timeout`).
pub fn record_error(span: &tracing::Span, error: &str) {
    if enabled() {
        span.record("otel.status_code", "ERROR");
    }
    span.record("error.type", error);
}

#[cfg(test)]
#[allow(clippy::unwrap_used)]
mod tests {
    use std::sync::{Arc, Mutex};

    use tracing::Level;
    use tracing_subscriber::layer::{Context, SubscriberExt};

    use super::*;

    /// Records the target and level of every event it is shown.
    #[derive(Clone, Default)]
    struct Seen(Arc<Mutex<Vec<(String, Level)>>>);

    impl<S: tracing::Subscriber> Layer<S> for Seen {
        fn on_event(&self, event: &tracing::Event<'_>, _: Context<'_, S>) {
            let m = event.metadata();
            self.0
                .lock()
                .unwrap()
                .push((m.target().to_owned(), *m.level()));
        }
    }

    /// The events of five levels at four targets that `filter` lets through (inside a span,
    /// as a request's lines are).
    fn passed(filter: Box<dyn Filter<Registry> + Send + Sync>) -> Vec<(String, Level)> {
        let seen = Seen::default();
        let subscriber = Registry::default().with(seen.clone().with_filter(filter));
        tracing::subscriber::with_default(subscriber, || {
            let span = tracing::info_span!(target: "switchyard", "request");
            let _entered = span.enter();
            macro_rules! at {
                ($target:literal) => {
                    tracing::error!(target: $target, "e");
                    tracing::warn!(target: $target, "w");
                    tracing::info!(target: $target, "i");
                    tracing::debug!(target: $target, "d");
                    tracing::trace!(target: $target, "t");
                };
            }
            at!("switchyard");
            at!("switchyard::upstream::h1");
            at!("hyper::proto");
            at!("other");
        });
        seen.0.lock().unwrap().clone()
    }

    #[test]
    fn the_log_filter_lets_through_what_env_filter_does() {
        for spec in [
            None,
            Some("info"),
            Some("warn,switchyard=debug"),
            Some("switchyard::upstream=trace,error"),
            Some("debug,hyper=off"),
            Some("off"),
            Some("TRACE"),
            Some(""),
            Some(" "),
            Some("info,"),
            Some(",debug"),
            Some("not a=directive"),
            Some("info,[request]=trace"),
        ] {
            let reference = match spec {
                Some(s) => EnvFilter::try_new(s).unwrap_or_else(|_| EnvFilter::new("info")),
                None => EnvFilter::new("info"),
            };
            let expected = passed(Box::new(reference));
            assert_eq!(passed(log_filter(spec).0), expected, "RUST_LOG={spec:?}");
        }
    }
}
