//! Format rules for single values (names, paths, URLs, headers, separators): pure checks that
//! return what is wrong and how to fix it, without echoing the value.

use axum::http::{HeaderName, HeaderValue, Uri};

/// Paths the gateway serves itself; tenant paths must not start with them.
pub const RESERVED_PATHS: [&str; 4] = ["/healthz", "/readyz", "/metrics", "/.well-known/"];

/// Headers the gateway sets on upstream requests itself (lowercase): credentials may not name
/// them, so a request never carries one twice (`upstream/header_lines.rs`).
pub const GATEWAY_HEADERS: [&str; 14] = [
    "host",
    "content-length",
    "content-type",
    "accept",
    "mcp-session-id",
    "mcp-protocol-version",
    "mcp-method",
    "mcp-name",
    "last-event-id",
    "connection",
    "transfer-encoding",
    "traceparent",
    "tracestate",
    "proxy-authorization",
];
/// A 2026-07-28 tool call's argument headers (`Mcp-Param-<name>`), also the gateway's own.
pub const GATEWAY_HEADER_PREFIX: &str = "mcp-param-";

const PATH_PUNCTUATION: &str = "-._~!$&'()*+,;=:@%/";

/// `^[a-z0-9][a-z0-9-]{0,62}$`
pub fn tenant_name(name: &str) -> Result<(), String> {
    let valid = (1..=63).contains(&name.len())
        && name.starts_with(|c: char| c.is_ascii_lowercase() || c.is_ascii_digit())
        && name
            .chars()
            .all(|c| c.is_ascii_lowercase() || c.is_ascii_digit() || c == '-');
    if valid {
        Ok(())
    } else {
        Err("tenant names are 1 to 63 lowercase letters, digits and '-', starting with a letter or digit".to_owned())
    }
}

/// A tenant endpoint path.
pub fn tenant_path(path: &str) -> Result<(), String> {
    if !path.starts_with('/') {
        return Err("must start with '/'".to_owned());
    }
    if path == "/" {
        return Err(
            "must not be \"/\": it would capture every request; use e.g. /t/<name>/mcp".to_owned(),
        );
    }
    if path.contains('?') {
        return Err("must not contain '?': a path cannot carry a query string".to_owned());
    }
    if path.contains('#') {
        return Err("must not contain '#': a path cannot carry a fragment".to_owned());
    }
    if path.chars().any(|c| c.is_whitespace() || c.is_control()) {
        return Err("must not contain whitespace or control characters".to_owned());
    }
    if path.contains("//") {
        return Err("must not contain an empty segment (\"//\")".to_owned());
    }
    if path
        .split('/')
        .any(|segment| segment == ".." || segment == ".")
    {
        return Err("must not contain '.' or '..' segments".to_owned());
    }
    if !path
        .chars()
        .all(|c| c.is_ascii_alphanumeric() || PATH_PUNCTUATION.contains(c))
    {
        return Err(format!(
            "may only contain ASCII letters, digits and {PATH_PUNCTUATION} (percent-encode anything else)"
        ));
    }
    for reserved in RESERVED_PATHS {
        if path.starts_with(reserved) || reserved.strip_suffix('/') == Some(path) {
            return Err(format!(
                "is reserved: paths starting with {reserved} belong to the gateway itself"
            ));
        }
    }
    Ok(())
}

/// 1 to 8 characters of `[A-Za-z0-9_.-]`.
pub fn separator(separator: &str) -> Result<(), String> {
    if (1..=8).contains(&separator.chars().count()) && separator.chars().all(is_tool_name_char) {
        Ok(())
    } else {
        Err("the separator must be 1 to 8 characters of A-Z, a-z, 0-9, '_', '.' and '-' (characters allowed in tool names)".to_owned())
    }
}

/// `^[A-Za-z][A-Za-z0-9-]{0,63}$`: an upstream name prefixes tool and prompt names
/// (`<upstream><sep><name>`, so only tool-name characters) and resource URIs
/// (`<upstream>+<uri>`, so only characters that keep `<upstream>+<scheme>` a valid URI scheme).
pub fn upstream_name(name: &str) -> Result<(), String> {
    let mut chars = name.chars();
    let first_ok = chars.next().is_some_and(|c| c.is_ascii_alphabetic());
    if first_ok && name.len() <= 64 && chars.all(|c| c.is_ascii_alphanumeric() || c == '-') {
        Ok(())
    } else {
        Err("upstream names are 1 to 64 characters of A-Z, a-z, 0-9 and '-', starting with a letter (they prefix tool names and resource URI schemes)".to_owned())
    }
}

fn is_tool_name_char(c: char) -> bool {
    c.is_ascii_alphanumeric() || matches!(c, '_' | '.' | '-')
}

/// Whether `<name><sep><tool>` splits back at the first separator into `name` and `tool`.
pub fn splittable(name: &str, separator: &str) -> Result<(), String> {
    let joined = format!("{name}{separator}tool");
    if joined.find(separator) == Some(name.len()) {
        return Ok(());
    }
    Err(format!(
        "upstream name {name:?} cannot be used with separator {separator:?}: in a prefixed name like {joined:?} the first {separator:?} starts inside the upstream name, so it could not be split back into upstream and tool; rename the upstream or change prefix.separator"
    ))
}

/// An upstream MCP endpoint: `http`/`https`, with a host, no fragment, no credentials.
pub fn upstream_url(url: &str) -> Result<(), String> {
    if url.chars().any(|c| c.is_whitespace() || c.is_control()) {
        return Err("the URL must not contain whitespace or control characters".to_owned());
    }
    if let Some((_, after_scheme)) = url.split_once("://") {
        let authority = after_scheme
            .split(['/', '?', '#'])
            .next()
            .unwrap_or_default();
        if authority.contains('@') {
            return Err("the URL must not contain credentials (user:password@); send them with `headers` instead".to_owned());
        }
    }
    if url.contains('#') {
        return Err(
            "the URL must not have a fragment ('#...'): it is never sent to the server".to_owned(),
        );
    }
    let uri: Uri = url
        .parse()
        .map_err(|e| format!("not a valid URL ({e}); expected e.g. https://host/mcp"))?;
    let Some(scheme) = uri.scheme_str() else {
        return Err("the URL needs a scheme: expected e.g. https://host/mcp".to_owned());
    };
    if !scheme.eq_ignore_ascii_case("http") && !scheme.eq_ignore_ascii_case("https") {
        return Err(format!(
            "the URL scheme must be http or https, not {scheme:?}"
        ));
    }
    if uri.host().is_none_or(str::is_empty) {
        return Err("the URL needs a host: expected e.g. https://host/mcp".to_owned());
    }
    Ok(())
}

/// A header name the operator may set on upstream requests.
pub fn header_name(name: &str) -> Result<(), String> {
    HeaderName::from_bytes(name.as_bytes()).map_err(|_| {
        format!("invalid header name {name:?}: use letters, digits and !#$%&'*+-.^_`|~ only")
    })?;
    let prefixed = name
        .get(..GATEWAY_HEADER_PREFIX.len())
        .is_some_and(|p| p.eq_ignore_ascii_case(GATEWAY_HEADER_PREFIX));
    if prefixed || GATEWAY_HEADERS.iter().any(|h| h.eq_ignore_ascii_case(name)) {
        return Err(format!(
            "header {name:?} is set by the gateway itself and cannot be configured"
        ));
    }
    Ok(())
}

/// A header value; the message never includes the value (it is usually a credential).
pub fn header_value(value: &str) -> Result<(), String> {
    HeaderValue::from_str(value)
        .map(drop)
        .map_err(|_| "invalid header value: it must not contain control characters such as newlines (value not shown)".to_owned())
}

/// Name of an extra environment variable for a stdio child.
pub fn child_env_name(name: &str) -> Result<(), String> {
    if name.is_empty() || name.contains(['=', '\0']) {
        Err("environment variable names must be non-empty and contain no '=' or NUL".to_owned())
    } else {
        Ok(())
    }
}

#[cfg(test)]
#[allow(clippy::unwrap_used)]
mod tests {
    use super::*;

    #[test]
    fn tenant_names() {
        for ok in ["acme", "a", "0", "acme-2", &"a".repeat(63)] {
            assert!(tenant_name(ok).is_ok(), "{ok}");
        }
        for bad in ["", "Acme", "-acme", "a_b", "a.b", "é", &"a".repeat(64)] {
            assert!(tenant_name(bad).is_err(), "{bad}");
        }
    }

    #[test]
    fn tenant_paths_and_reserved_prefixes() {
        for ok in [
            "/t/acme/mcp",
            "/mcp",
            "/a/b-c_d.e~f",
            "/x/",
            "/healthcheck",
            "/%20",
        ] {
            assert!(tenant_path(ok).is_ok(), "{ok}");
        }
        let err = |p: &str| tenant_path(p).unwrap_err();
        assert_eq!(err("t/acme"), "must start with '/'");
        assert!(err("/").starts_with("must not be \"/\""));
        assert!(err("/a?b").contains("'?'"));
        assert!(err("/a#b").contains("'#'"));
        assert!(err("/a//b").contains("\"//\""));
        assert!(err("/a b").contains("whitespace"));
        assert!(err("/a/../b").contains("'..'"));
        assert!(err("/a/./b").contains("'.'"));
        assert!(err("/a/é").contains("ASCII"));
        for reserved in [
            "/healthz",
            "/healthz/x",
            "/readyz",
            "/metrics",
            "/metricsx",
            "/.well-known",
            "/.well-known/oauth",
        ] {
            assert!(err(reserved).starts_with("is reserved"), "{reserved}");
        }
    }

    #[test]
    fn splittability() {
        assert!(splittable("files", "__").is_ok());
        assert!(splittable("a-b", "__").is_ok());
        assert!(splittable("a.b", "_").is_ok());
        assert_eq!(
            splittable("a_", "__").unwrap_err(),
            "upstream name \"a_\" cannot be used with separator \"__\": in a prefixed name like \"a___tool\" the first \"__\" starts inside the upstream name, so it could not be split back into upstream and tool; rename the upstream or change prefix.separator"
        );
        assert!(splittable("my__files", "__").is_err());
        assert!(splittable("a-b", "-").is_err());
        assert!(splittable("x.", ".x").is_ok());
        assert!(splittable("a.", ".").is_err());
    }

    #[test]
    fn urls() {
        for ok in [
            "https://host/mcp",
            "http://127.0.0.1:3000/mcp",
            "HTTPS://h",
            "https://h/mcp?x=1",
            "http://[::1]:80/",
        ] {
            assert!(upstream_url(ok).is_ok(), "{ok}");
        }
        let err = |u: &str| upstream_url(u).unwrap_err();
        assert!(err("ftp://host/x").contains("http or https"));
        assert!(err("https://u:p@host/mcp").contains("credentials"));
        assert!(err("https://host/mcp#x").contains("fragment"));
        assert!(err("/mcp").contains("scheme"));
        assert!(err("https:///mcp").contains("URL"));
        assert!(err("https://ho st/").contains("whitespace"));
        assert!(err("not a url").contains("whitespace"));
        assert!(upstream_url("localhost:8080").is_err());
    }

    #[test]
    fn headers() {
        assert!(header_name("X-Api-Key").is_ok());
        assert!(header_name("Authorization").is_ok());
        assert!(header_name("bad name").is_err());
        assert!(header_name("").is_err());
        for owned in [
            "Host",
            "content-type",
            "MCP-Session-Id",
            "Accept",
            "Transfer-Encoding",
            "Mcp-Method",
            "mcp-name",
            "Mcp-Param-Region",
            "MCP-PARAM-x",
            "traceparent",
            "TraceState",
            "Proxy-Authorization",
        ] {
            assert!(
                header_name(owned)
                    .unwrap_err()
                    .contains("set by the gateway"),
                "{owned}"
            );
        }
        // Only the prefix is the gateway's: a name that merely starts alike is the admin's.
        assert!(header_name("Mcp-Params").is_ok());
        assert!(header_name("X-Mcp-Param-A").is_ok());
        assert!(header_value("Bearer abc").is_ok());
        let err = header_value("hunter2\nx").unwrap_err();
        assert!(!err.contains("hunter2"), "{err}");
    }
}
