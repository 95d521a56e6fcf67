//! `_meta` on the way upstream: the client's `progressToken` swapped for the request's
//! upstream id (the original kept to restore on progress), the gateway's trace context, and,
//! for an upstream of the stateless revision, the client's identity (its session's, else the
//! connection's own).

use serde_json::value::RawValue;

use super::connection::Connection;
use super::owner::ClientSession;
use crate::error::GatewayError;
use crate::jsonrpc::{self, RawObject};
use crate::protocol::{ProtocolVersion, modern};
use crate::telemetry::Propagation;

/// The client's identity a request of the stateless revision carries in `_meta`.
pub(super) struct StatelessMeta<'s> {
    client: &'s modern::ClientMeta,
    /// The session client's `logging/setLevel`, as `logLevel`.
    log_level: Option<Box<RawValue>>,
}

impl Connection {
    /// What a request of the stateless revision says about its client in `_meta`: the
    /// session's client when it has one, else what the connection was opened with.
    pub(super) fn stateless_meta<'s>(
        &'s self,
        session: Option<&'s dyn ClientSession>,
    ) -> Option<StatelessMeta<'s>> {
        if !self.is_stateless() {
            return None;
        }
        let client = match session {
            Some(s) => s.client_meta(),
            None => self.client_meta.get_or_init(|| {
                Box::new(modern::ClientMeta::new(
                    &self.init_params.capabilities,
                    &self.init_params.client_info,
                ))
            }),
        };
        Some(StatelessMeta {
            client,
            log_level: session
                .and_then(|s| s.log_level())
                .map(|l| jsonrpc::raw_string(&l)),
        })
    }
}

/// Edits `params._meta` on the way upstream: the client's `progressToken` becomes `id` (the
/// original is returned, to be restored on progress), and the gateway's trace context
/// (`traceparent`, `tracestate`) is set. Returns the new params only when something changed;
/// params that are not an object are left alone.
#[allow(clippy::type_complexity)]
pub(super) fn rewrite_meta<'a>(
    params: Option<&'a RawValue>,
    id: u64,
    trace: Option<&Propagation>,
    stateless: Option<&'a StatelessMeta<'a>>,
) -> Result<(Option<Box<RawValue>>, Option<Box<RawValue>>), GatewayError> {
    let may_have_token = params.is_some_and(|p| jsonrpc::may_hold(p.get(), "progressToken"));
    if !may_have_token && trace.is_none() && stateless.is_none() {
        return Ok((None, None));
    }
    let parsed = match params.map(RawObject::parse) {
        Some(Ok(obj)) => Some(obj),
        Some(Err(_)) => return Ok((None, None)),
        None => None,
    };
    let mut meta = match parsed.as_ref().and_then(|o| o.get("_meta")) {
        Some(m) => match RawObject::parse(m) {
            Ok(meta) => meta,
            Err(_) if may_have_token => {
                return Err(GatewayError::InvalidParams(
                    "`_meta` must be an object".into(),
                ));
            }
            Err(_) => return Ok((None, None)),
        },
        None => RawObject::default(),
    };
    let token = meta.get("progressToken").map(|t| t.to_owned());
    if let Some(t) = &token {
        if !jsonrpc::is_valid_id(t) {
            return Err(GatewayError::InvalidParams(
                "`_meta.progressToken` must be a string or an integer".into(),
            ));
        }
        meta.set("progressToken", jsonrpc::raw_u64(id));
    }
    if let Some(tc) = trace {
        meta.set("traceparent", jsonrpc::raw_string(&tc.traceparent));
        match &tc.tracestate {
            Some(state) => meta.set("tracestate", jsonrpc::raw_string(state)),
            None => drop(meta.remove("tracestate")),
        }
    } else if token.is_none() && stateless.is_none() {
        return Ok((None, None));
    }
    if let Some(st) = stateless {
        // A stateless client's own `_meta` is kept; a session-based client's is supplied.
        if meta.get(modern::meta::PROTOCOL_VERSION).is_none() {
            let version = jsonrpc::raw_string(ProtocolVersion::V2026_07_28.as_str());
            meta.set(modern::meta::PROTOCOL_VERSION, version);
            meta.set_ref(modern::meta::CLIENT_CAPABILITIES, &st.client.capabilities);
            meta.set_ref(modern::meta::CLIENT_INFO, &st.client.client_info);
            if let Some(level) = &st.log_level {
                meta.set_ref(modern::meta::LOG_LEVEL, level);
            }
        }
    }
    let meta_raw = meta.to_raw();
    drop(meta);
    // The params as read above (not read again), with the new `_meta`.
    let mut obj = parsed.unwrap_or_default();
    obj.set("_meta", meta_raw);
    Ok((Some(obj.to_raw()), token))
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used)]
    use super::*;

    #[test]
    fn progress_token_is_replaced_and_returned() {
        let p = RawValue::from_string(
            r#"{"name":"x","_meta":{"progressToken":"tok-1","other":true},"arguments":{}}"#.into(),
        )
        .unwrap();
        let (new, token) = rewrite_meta(Some(&p), 42, None, None).unwrap();
        assert_eq!(token.unwrap().get(), r#""tok-1""#);
        assert_eq!(
            new.unwrap().get(),
            r#"{"name":"x","_meta":{"progressToken":42,"other":true},"arguments":{}}"#
        );
    }

    #[test]
    fn params_without_token_pass_unchanged() {
        let p = RawValue::from_string(r#"{"name":"progressToken"}"#.into()).unwrap();
        let (new, token) = rewrite_meta(Some(&p), 1, None, None).unwrap();
        assert!(token.is_none());
        assert!(new.is_none(), "nothing to rewrite, nothing copied");
    }

    #[test]
    fn invalid_tokens_are_rejected() {
        let p = RawValue::from_string(r#"{"_meta":{"progressToken":1.5}}"#.into()).unwrap();
        assert!(rewrite_meta(Some(&p), 1, None, None).is_err());
    }

    fn trace() -> Propagation {
        Propagation {
            traceparent: "00-0af7651916cd43dd8448eb211c80319c-00f067aa0ba902b7-01".into(),
            tracestate: Some("k=v".into()),
        }
    }

    #[test]
    fn trace_context_is_set_next_to_the_token() {
        let p = RawValue::from_string(
            r#"{"name":"x","_meta":{"progressToken":7,"traceparent":"old","baggage":"b=1"}}"#
                .into(),
        )
        .unwrap();
        let (new, token) = rewrite_meta(Some(&p), 3, Some(&trace()), None).unwrap();
        assert_eq!(token.unwrap().get(), "7");
        assert_eq!(
            new.unwrap().get(),
            r#"{"name":"x","_meta":{"progressToken":3,"traceparent":"00-0af7651916cd43dd8448eb211c80319c-00f067aa0ba902b7-01","baggage":"b=1","tracestate":"k=v"}}"#
        );
    }

    #[test]
    fn trace_context_creates_meta_and_params_when_absent() {
        let (new, token) = rewrite_meta(None, 1, Some(&trace()), None).unwrap();
        assert!(token.is_none());
        let new = new.unwrap();
        let v: serde_json::Value = serde_json::from_str(new.get()).unwrap();
        assert_eq!(v["_meta"]["tracestate"], "k=v");
        let p = RawValue::from_string(r#"{"cursor":"c","_meta":{"tracestate":"stale"}}"#.into())
            .unwrap();
        let only_parent = Propagation {
            tracestate: None,
            ..trace()
        };
        let new = rewrite_meta(Some(&p), 1, Some(&only_parent), None)
            .unwrap()
            .0
            .unwrap();
        let v: serde_json::Value = serde_json::from_str(new.get()).unwrap();
        assert_eq!(v["cursor"], "c");
        assert!(v["_meta"].get("tracestate").is_none(), "{v}");
        assert!(v["_meta"]["traceparent"].is_string());
    }

    #[test]
    fn malformed_meta_is_left_alone_when_only_tracing() {
        let p = RawValue::from_string(r#"{"_meta":5}"#.into()).unwrap();
        let (new, _) = rewrite_meta(Some(&p), 1, Some(&trace()), None).unwrap();
        assert!(new.is_none());
    }
}
