//! W3C trace context in and out. In: a client's `params._meta.traceparent`/`tracestate` (the
//! MCP convention), else its `traceparent`/`tracestate` HTTP headers, become the parent of the
//! request span. Out: an upstream-call span's context, as the values an upstream request
//! carries in `_meta` and (to HTTP upstreams) in headers.

use axum::http::HeaderMap;
use opentelemetry::propagation::{Extractor, TextMapPropagator};
use opentelemetry::trace::TraceContextExt;
use opentelemetry_sdk::propagation::TraceContextPropagator;
use serde_json::value::RawValue;
use tracing_opentelemetry::OpenTelemetrySpanExt;

use crate::jsonrpc::RawObject;

const TRACEPARENT: &str = "traceparent";
const TRACESTATE: &str = "tracestate";

/// The trace context an upstream request carries.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Propagation {
    pub traceparent: String,
    /// Empty tracestates are not sent.
    pub tracestate: Option<String>,
}

/// Makes the client's trace context (from `_meta`, else from the headers) the parent of
/// `span`, which must not have been entered yet. Returns whether a valid context was found.
/// Malformed values are ignored (the request starts a new trace), as W3C Trace Context asks.
pub fn adopt_parent(span: &tracing::Span, params: Option<&RawValue>, headers: &HeaderMap) -> bool {
    let propagator = TraceContextPropagator::new();
    let from_meta = params
        .and_then(MetaCarrier::of)
        .map(|carrier| propagator.extract(&carrier))
        .filter(|cx| cx.span().span_context().is_valid());
    let cx = from_meta.or_else(|| {
        Some(propagator.extract(&HeaderCarrier(headers)))
            .filter(|cx| cx.span().span_context().is_valid())
    });
    match cx {
        Some(cx) => span.set_parent(cx).is_ok(),
        None => false,
    }
}

/// The context to send upstream for a call made under `span`; `None` when `span` is not
/// exported (tracing off, or the span disabled).
pub fn outgoing(span: &tracing::Span) -> Option<Propagation> {
    let cx = span.context();
    let sc = cx.span().span_context().clone();
    if !sc.is_valid() {
        return None;
    }
    let traceparent = format!(
        "00-{}-{}-{:02x}",
        sc.trace_id(),
        sc.span_id(),
        sc.trace_flags().to_u8()
    );
    let tracestate = Some(sc.trace_state().header()).filter(|s| !s.is_empty());
    Some(Propagation {
        traceparent,
        tracestate,
    })
}

/// The id of the trace `span` belongs to (32 hex digits), for log lines; `None` when not
/// exported.
pub fn trace_id(span: &tracing::Span) -> Option<String> {
    let cx = span.context();
    let sc = cx.span().span_context().clone();
    sc.is_valid().then(|| sc.trace_id().to_string())
}

/// `traceparent`/`tracestate` read from a request's `_meta`.
struct MetaCarrier {
    traceparent: String,
    tracestate: Option<String>,
}

impl MetaCarrier {
    fn of(params: &RawValue) -> Option<MetaCarrier> {
        // Most requests carry no trace context: skip the parse.
        if !crate::jsonrpc::may_hold(params.get(), TRACEPARENT) {
            return None;
        }
        let obj = RawObject::parse(params).ok()?;
        let meta = RawObject::parse(obj.get("_meta")?).ok()?;
        Some(MetaCarrier {
            traceparent: meta.get_str(TRACEPARENT)?.into_owned(),
            tracestate: meta.get_str(TRACESTATE).map(|s| s.into_owned()),
        })
    }
}

impl Extractor for MetaCarrier {
    fn get(&self, key: &str) -> Option<&str> {
        match key {
            TRACEPARENT => Some(&self.traceparent),
            TRACESTATE => self.tracestate.as_deref(),
            _ => None,
        }
    }

    fn keys(&self) -> Vec<&str> {
        vec![TRACEPARENT, TRACESTATE]
    }
}

struct HeaderCarrier<'a>(&'a HeaderMap);

impl Extractor for HeaderCarrier<'_> {
    fn get(&self, key: &str) -> Option<&str> {
        self.0.get(key).and_then(|v| v.to_str().ok())
    }

    fn keys(&self) -> Vec<&str> {
        self.0.keys().map(|k| k.as_str()).collect()
    }
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used)]
    use axum::http::HeaderValue;

    use super::*;

    const PARENT: &str = "00-0af7651916cd43dd8448eb211c80319c-00f067aa0ba902b7-01";

    #[test]
    fn meta_carrier_reads_traceparent_and_tracestate() {
        let p = RawValue::from_string(format!(
            r#"{{"name":"t","_meta":{{"traceparent":"{PARENT}","tracestate":"k=v"}}}}"#
        ))
        .unwrap();
        let c = MetaCarrier::of(&p).unwrap();
        assert_eq!(c.get(TRACEPARENT), Some(PARENT));
        assert_eq!(c.get(TRACESTATE), Some("k=v"));
        let cx = TraceContextPropagator::new().extract(&c);
        let sc = cx.span().span_context().clone();
        assert!(sc.is_valid() && sc.is_remote() && sc.is_sampled());
        assert_eq!(
            sc.trace_id().to_string(),
            "0af7651916cd43dd8448eb211c80319c"
        );
        assert_eq!(sc.trace_state().header(), "k=v");
    }

    #[test]
    fn meta_without_context_or_not_an_object_gives_nothing() {
        for p in [
            r#"{"name":"traceparent"}"#,
            r#"{"_meta":"traceparent"}"#,
            r#"{"_meta":{"traceparent":7}}"#,
        ] {
            let p = RawValue::from_string(p.into()).unwrap();
            assert!(MetaCarrier::of(&p).is_none(), "{p}");
        }
    }

    #[test]
    fn header_carrier_reads_headers() {
        let mut h = HeaderMap::new();
        h.insert(TRACEPARENT, HeaderValue::from_static(PARENT));
        let cx = TraceContextPropagator::new().extract(&HeaderCarrier(&h));
        assert!(cx.span().span_context().is_valid());
        h.insert(TRACEPARENT, HeaderValue::from_static("00-zz-yy-01"));
        let cx = TraceContextPropagator::new().extract(&HeaderCarrier(&h));
        assert!(!cx.span().span_context().is_valid());
    }

    #[test]
    fn spans_without_an_exporter_have_nothing_to_send() {
        let span = tracing::Span::none();
        assert_eq!(outgoing(&span), None);
        assert_eq!(trace_id(&span), None);
    }
}
