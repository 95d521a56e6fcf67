//! Header rules of the Streamable HTTP transport: `Accept`, `Content-Type`,
//! `MCP-Protocol-Version` and `Mcp-Session-Id`, each checked to the letter.

use axum::http::{HeaderMap, HeaderValue, header};

use crate::error::GatewayError;
use crate::protocol::ProtocolVersion;
use crate::protocol::header::{self as mcp, Repeated, once};

/// Whether the `Accept` header admits `mime` (`type/subtype`), honouring wildcards and `q=0`.
pub fn accepts(headers: &HeaderMap, mime: &str) -> bool {
    admitted(headers, [mime])[0]
}

/// Which of `mimes` (`type/subtype` each) the `Accept` header admits: one pass over it, each
/// media range's parameters read once (a POST asks for two types on every request).
fn admitted<const N: usize>(headers: &HeaderMap, mimes: [&str; N]) -> [bool; N] {
    let mut found = [false; N];
    let ranges = headers
        .get_all(header::ACCEPT)
        .iter()
        .filter_map(|v| v.to_str().ok())
        .flat_map(|v| v.split(','));
    for range in ranges {
        let (media, params) = range.split_once(';').unwrap_or((range, ""));
        if refuses(params) {
            continue;
        }
        let media = media.trim();
        for (mime, found) in mimes.iter().zip(found.iter_mut()) {
            *found = *found || admits(media, mime);
        }
        if found.iter().all(|f| *f) {
            break;
        }
    }
    found
}

/// Whether a media range's parameters carry `q=0` (refused).
fn refuses(params: &str) -> bool {
    params.split(';').any(|p| {
        let p = p.trim();
        p.strip_prefix("q=")
            .or_else(|| p.strip_prefix("Q="))
            .and_then(|q| q.trim().parse::<f32>().ok())
            .is_some_and(|q| q <= 0.0)
    })
}

/// Whether the media range `media` (parameters removed) covers `mime`.
fn admits(media: &str, mime: &str) -> bool {
    let ty = mime.split_once('/').map_or(mime, |(ty, _)| ty);
    media.eq_ignore_ascii_case(mime)
        || media == "*/*"
        || media
            .strip_suffix("/*")
            .is_some_and(|t| t.eq_ignore_ascii_case(ty))
}

/// What hosts send on every POST (the official SDKs' value, in either order): admitted by
/// comparing bytes, without reading the media ranges.
const USUAL_POST_ACCEPT: [&[u8]; 2] = [
    b"application/json, text/event-stream",
    b"text/event-stream, application/json",
];

/// POST must accept both JSON and SSE answers.
pub fn check_post_accept(headers: &HeaderMap) -> Result<(), GatewayError> {
    let mut values = headers.get_all(header::ACCEPT).iter();
    if let (Some(only), None) = (values.next(), values.next())
        && USUAL_POST_ACCEPT.contains(&only.as_bytes())
    {
        return Ok(());
    }
    if admitted(headers, ["application/json", "text/event-stream"]) == [true, true] {
        Ok(())
    } else {
        Err(GatewayError::NotAcceptable {
            expected: "both application/json and text/event-stream",
        })
    }
}

/// GET opens an event stream, so it must accept one.
pub fn check_get_accept(headers: &HeaderMap) -> Result<(), GatewayError> {
    if accepts(headers, "text/event-stream") {
        Ok(())
    } else {
        Err(GatewayError::NotAcceptable {
            expected: "text/event-stream",
        })
    }
}

/// POST bodies are JSON (`application/json`, parameters such as charset allowed).
pub fn check_content_type(headers: &HeaderMap) -> Result<(), GatewayError> {
    let ok = headers
        .get(header::CONTENT_TYPE)
        .and_then(|v| v.to_str().ok())
        .and_then(|v| v.split(';').next())
        .is_some_and(|m| m.trim().eq_ignore_ascii_case("application/json"));
    if ok {
        Ok(())
    } else {
        Err(GatewayError::UnsupportedMediaType)
    }
}

/// `once`, with a 400 naming the header when it is repeated.
fn once_or_400<'h>(
    headers: &'h HeaderMap,
    name: impl header::AsHeaderName,
    shown: &str,
) -> Result<Option<&'h HeaderValue>, GatewayError> {
    once(headers, name)
        .map_err(|Repeated| GatewayError::BadHeader(format!("{shown} must appear once")))
}

/// The `MCP-Protocol-Version` header: absent → `None`; present → a version served here, else
/// 400 (with the supported versions in the error data).
pub fn protocol_version(headers: &HeaderMap) -> Result<Option<ProtocolVersion>, GatewayError> {
    let Some(value) = once_or_400(
        headers,
        &mcp::name::PROTOCOL_VERSION,
        "MCP-Protocol-Version",
    )?
    else {
        return Ok(None);
    };
    let text = value.to_str().unwrap_or("").trim();
    match ProtocolVersion::parse(text) {
        Some(v) if v.served_on_streamable_http() => Ok(Some(v)),
        _ => Err(GatewayError::UnsupportedProtocolVersion {
            requested: String::from_utf8_lossy(value.as_bytes())
                .chars()
                .take(64)
                .collect(),
        }),
    }
}

/// The `Mcp-Session-Id` header, when present.
pub fn session_id(headers: &HeaderMap) -> Result<Option<&str>, GatewayError> {
    let Some(value) = once_or_400(headers, &mcp::name::SESSION_ID, "Mcp-Session-Id")? else {
        return Ok(None);
    };
    value
        .to_str()
        .map(Some)
        .map_err(|_| GatewayError::BadHeader("Mcp-Session-Id must be visible ASCII".into()))
}

/// The `Last-Event-ID` header of a GET that resumes a stream, when present.
pub fn last_event_id(headers: &HeaderMap) -> Result<Option<&str>, GatewayError> {
    let Some(value) = once_or_400(headers, "last-event-id", "Last-Event-ID")? else {
        return Ok(None);
    };
    value
        .to_str()
        .map(Some)
        .map_err(|_| GatewayError::BadHeader("Last-Event-ID must be visible ASCII".into()))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn with(name: &'static str, value: &'static str) -> HeaderMap {
        let mut h = HeaderMap::new();
        h.insert(name, HeaderValue::from_static(value));
        h
    }

    #[test]
    fn accept_rules() {
        let both = with("accept", "application/json, text/event-stream");
        assert!(check_post_accept(&both).is_ok());
        assert!(check_post_accept(&with("accept", "text/event-stream, application/json")).is_ok());
        // The usual value beside another field: read as one list, as ever.
        let mut more = both.clone();
        more.append("accept", HeaderValue::from_static("text/html"));
        assert!(check_post_accept(&more).is_ok());
        assert!(check_post_accept(&with("accept", "application/json")).is_err());
        assert!(check_post_accept(&with("accept", "*/*")).is_ok());
        assert!(check_post_accept(&with("accept", "application/*, text/*")).is_ok());
        assert!(check_post_accept(&HeaderMap::new()).is_err());
        assert!(
            check_post_accept(&with("accept", "application/json, text/event-stream;q=0")).is_err()
        );
        assert!(check_get_accept(&with("accept", "text/event-stream")).is_ok());
        assert!(check_get_accept(&with("accept", "application/json")).is_err());
        // A type refused by one range is still admitted by another; parameters other than
        // `q` do not refuse; several `Accept` fields count as one list.
        let accept = |v| with("accept", v);
        assert!(check_post_accept(&accept("application/json;q=0, */*")).is_ok());
        assert!(check_post_accept(&accept("*/*;Q=0.0, text/event-stream")).is_err());
        assert!(
            check_post_accept(&accept("Application/JSON;charset=utf-8;q=0.5, TEXT/*;q=1")).is_ok()
        );
        let mut two = accept("text/event-stream");
        two.append("accept", HeaderValue::from_static("application/json"));
        assert!(check_post_accept(&two).is_ok());
        assert!(accepts(&two, "application/json") && !accepts(&two, "text/html"));
    }

    #[test]
    fn content_type_rules() {
        assert!(check_content_type(&with("content-type", "application/json")).is_ok());
        assert!(
            check_content_type(&with("content-type", "Application/JSON; charset=utf-8")).is_ok()
        );
        assert!(check_content_type(&with("content-type", "text/plain")).is_err());
        assert!(check_content_type(&HeaderMap::new()).is_err());
    }

    #[test]
    fn protocol_version_rules() {
        assert_eq!(protocol_version(&HeaderMap::new()).ok(), Some(None));
        assert_eq!(
            protocol_version(&with("mcp-protocol-version", "2025-06-18")).ok(),
            Some(Some(ProtocolVersion::V2025_06_18))
        );
        assert_eq!(
            protocol_version(&with("mcp-protocol-version", "2026-07-28")).ok(),
            Some(Some(ProtocolVersion::V2026_07_28))
        );
        assert!(matches!(
            protocol_version(&with("mcp-protocol-version", "banana")),
            Err(GatewayError::UnsupportedProtocolVersion { .. })
        ));
    }
}
