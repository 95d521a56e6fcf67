//! Format rules for the security settings (Host values, origins, absolute http(s) URLs, OAuth
//! scope tokens, tool-name patterns): pure checks that say what is wrong without echoing values.

use std::net::{Ipv4Addr, Ipv6Addr};

use axum::http::Uri;

/// What a URL's path and query may hold besides ASCII letters and digits (RFC 3986).
const URL_PUNCTUATION: &str = "-._~!$&'()*+,;=:@%/?";

/// The parts of a valid absolute http(s) URL that callers check further.
#[derive(Debug, PartialEq, Eq)]
pub struct WebUrl<'a> {
    /// Everything between the authority and `?` (may be empty).
    pub path: &'a str,
    /// What follows `?`, if there is a `?`.
    pub query: Option<&'a str>,
}

/// An absolute `http`/`https` URL with a valid host, no user info and no fragment. `example`
/// is shown when the text is not a URL at all.
pub fn web_url<'a>(url: &'a str, example: &str) -> Result<WebUrl<'a>, String> {
    if url.is_empty() {
        return Err(format!("must not be empty: expected a URL like {example}"));
    }
    if url.chars().any(|c| c.is_whitespace() || c.is_control()) {
        return Err("a URL must not contain whitespace or control characters".to_owned());
    }
    let Some((scheme, rest)) = url.split_once("://") else {
        return Err(format!(
            "not an absolute URL: expected http:// or https:// and a host, e.g. {example}"
        ));
    };
    if !scheme.eq_ignore_ascii_case("http") && !scheme.eq_ignore_ascii_case("https") {
        return Err("the URL scheme must be http or https".to_owned());
    }
    if rest.contains('#') {
        return Err("the URL must not have a fragment ('#...')".to_owned());
    }
    let end = rest.find(['/', '?']).unwrap_or(rest.len());
    let (authority, after) = rest.split_at(end);
    if authority.contains('@') {
        return Err("the URL must not contain a user name or password ('...@')".to_owned());
    }
    if authority.is_empty() {
        return Err(format!("the URL needs a host, e.g. {example}"));
    }
    let (host, _port) = split_host_port(authority)?;
    check_host(host)?;
    if !after
        .chars()
        .all(|c| c.is_ascii_alphanumeric() || URL_PUNCTUATION.contains(c))
    {
        return Err(format!(
            "the path and query of a URL may only contain ASCII letters, digits and {URL_PUNCTUATION} (percent-encode anything else)"
        ));
    }
    let bad_escape = after.match_indices('%').any(|(at, _)| {
        let hex = after.get(at + 1..at + 3).unwrap_or_default();
        hex.len() != 2 || !hex.chars().all(|c| c.is_ascii_hexdigit())
    });
    if bad_escape {
        return Err("'%' in a URL must start an escape like %20".to_owned());
    }
    url.parse::<Uri>()
        .map_err(|e| format!("not a valid URL ({e})"))?;
    Ok(match after.split_once('?') {
        Some((path, query)) => WebUrl {
            path,
            query: Some(query),
        },
        None => WebUrl {
            path: after,
            query: None,
        },
    })
}

/// An `allowed_hosts` entry: `host` or `host:port`. Returns it in lower case.
pub fn allowed_host(text: &str) -> Result<String, String> {
    if text == "*" {
        return Err("`*` is not a host: list the Host values clients use (leave `allowed_hosts` out to accept any host on a non-loopback listener)".to_owned());
    }
    if text.contains("://") {
        return Err(
            "write the host without a scheme: `host` or `host:port`, e.g. mcp.example.com:8443"
                .to_owned(),
        );
    }
    if text.contains(['/', '?', '#', '@']) {
        return Err("write only a host and an optional port: `host` or `host:port`".to_owned());
    }
    let (host, _port) = split_host_port(text)?;
    check_host(host)?;
    Ok(text.to_ascii_lowercase())
}

/// An `allowed_origins` entry: `scheme://host[:port]` with scheme http or https, and at most a
/// trailing `/`. Returns it as browsers send it: lower case, no trailing `/`, no default port.
pub fn origin(text: &str) -> Result<String, String> {
    if text == "*" {
        return Err("`*` is not accepted: origins must be listed one by one, e.g. https://app.example.com (a wildcard would let any web page call this endpoint)".to_owned());
    }
    if text.chars().any(|c| c.is_whitespace() || c.is_control()) {
        return Err("an origin must not contain whitespace or control characters".to_owned());
    }
    let Some((scheme, rest)) = text.split_once("://") else {
        return Err("expected scheme://host[:port], e.g. https://app.example.com".to_owned());
    };
    let scheme = scheme.to_ascii_lowercase();
    if scheme != "http" && scheme != "https" {
        return Err("the scheme of an origin must be http or https".to_owned());
    }
    let end = rest.find(['/', '?', '#']).unwrap_or(rest.len());
    let (authority, after) = rest.split_at(end);
    match after {
        "" | "/" => {}
        _ if after.starts_with('/') && !after[1..].starts_with(['?', '#']) => {
            return Err("an origin has no path: write only scheme://host[:port]".to_owned());
        }
        _ => {
            return Err(
                "an origin has no query or fragment: write only scheme://host[:port]".to_owned(),
            );
        }
    }
    if authority.contains('@') {
        return Err(
            "an origin has no user name or password: write only scheme://host[:port]".to_owned(),
        );
    }
    if authority.is_empty() {
        return Err("the origin needs a host, e.g. https://app.example.com".to_owned());
    }
    let (host, port) = split_host_port(authority)?;
    check_host(host)?;
    let default_port = if scheme == "https" { 443 } else { 80 };
    let host = host.to_ascii_lowercase();
    Ok(match port {
        Some(port) if port != default_port => format!("{scheme}://{host}:{port}"),
        _ => format!("{scheme}://{host}"),
    })
}

/// Splits `host[:port]`; IPv6 literals are bracketed. The port must be 1 to 65535.
fn split_host_port(text: &str) -> Result<(&str, Option<u16>), String> {
    let (host, port) = if text.starts_with('[') {
        let Some(close) = text.find(']') else {
            return Err("an IPv6 address needs a closing ']', e.g. [::1]:8080".to_owned());
        };
        let (host, after) = text.split_at(close + 1);
        match after {
            "" => (host, None),
            _ => match after.strip_prefix(':') {
                Some(port) => (host, Some(port)),
                None => {
                    return Err("only `:port` may follow an IPv6 address in brackets".to_owned());
                }
            },
        }
    } else if text.matches(':').count() > 1 {
        return Err("IPv6 addresses must be written in brackets, e.g. [::1]:8080".to_owned());
    } else {
        match text.split_once(':') {
            Some((host, port)) => (host, Some(port)),
            None => (text, None),
        }
    };
    let port = match port {
        None => None,
        Some(digits) => {
            let valid = !digits.is_empty() && digits.chars().all(|c| c.is_ascii_digit());
            match digits.parse::<u16>() {
                Ok(port) if valid && port > 0 => Some(port),
                _ => return Err("the port must be a number from 1 to 65535".to_owned()),
            }
        }
    };
    Ok((host, port))
}

/// A DNS name, an IPv4 address or a bracketed IPv6 address.
fn check_host(host: &str) -> Result<(), String> {
    if host.is_empty() {
        return Err("the host is empty".to_owned());
    }
    if let Some(inner) = host.strip_prefix('[') {
        return match inner.strip_suffix(']').map(str::parse::<Ipv6Addr>) {
            Some(Ok(_)) => Ok(()),
            _ => Err("not a valid IPv6 address in brackets".to_owned()),
        };
    }
    if host.contains('*') {
        return Err("wildcards are not supported: list each host".to_owned());
    }
    if host.len() > 253 {
        return Err("a host name is at most 253 characters".to_owned());
    }
    let labels: Vec<&str> = host.split('.').collect();
    for label in &labels {
        if label.is_empty() {
            return Err(
                "a host name must not have an empty label (a leading, trailing or doubled '.')"
                    .to_owned(),
            );
        }
        if label.len() > 63 {
            return Err("each label of a host name is at most 63 characters".to_owned());
        }
        if !label
            .chars()
            .all(|c| c.is_ascii_alphanumeric() || c == '-' || c == '_')
        {
            return Err("a host is a DNS name (letters, digits, '-' and '.'), an IPv4 address or an IPv6 address in brackets".to_owned());
        }
        if label.starts_with('-') || label.ends_with('-') {
            return Err("the labels of a host name must not start or end with '-'".to_owned());
        }
    }
    let numeric = labels
        .last()
        .is_some_and(|l| l.chars().all(|c| c.is_ascii_digit()));
    if numeric && host.parse::<Ipv4Addr>().is_err() {
        return Err("not a valid IPv4 address".to_owned());
    }
    Ok(())
}

/// An OAuth scope token (RFC 6749 §3.3): printable ASCII except space, `"` and `\`.
pub fn scope_token(scope: &str) -> Result<(), String> {
    if scope.is_empty() {
        return Err("a scope must not be empty".to_owned());
    }
    if scope.contains(' ') {
        return Err("a scope cannot contain spaces: list each scope as its own item, e.g. [mcp, files:write]".to_owned());
    }
    let valid = |c: char| matches!(c, '\x21' | '\x23'..='\x5B' | '\x5D'..='\x7E');
    if scope.chars().all(valid) {
        Ok(())
    } else {
        Err("a scope is printable ASCII without spaces, '\"' or '\\' (RFC 6749 §3.3)".to_owned())
    }
}

/// A tool-name pattern: tool-name characters (`A-Za-z0-9_.-`) and `*` wildcards.
pub fn tool_pattern(pattern: &str) -> Result<(), String> {
    let valid = |c: char| c.is_ascii_alphanumeric() || matches!(c, '_' | '.' | '-' | '*');
    if !pattern.is_empty() && pattern.chars().all(valid) {
        Ok(())
    } else {
        Err("tool patterns are the upstream's own tool names (A-Z, a-z, 0-9, '_', '.', '-') with '*' matching any run of characters".to_owned())
    }
}

/// A policy's `upstream`: an upstream name, or a pattern over them with `*`.
pub fn upstream_pattern(pattern: &str) -> Result<(), String> {
    let valid = |c: char| c.is_ascii_alphanumeric() || matches!(c, '-' | '*');
    if !pattern.is_empty() && pattern.chars().all(valid) {
        Ok(())
    } else {
        Err("`upstream` is an upstream name (A-Z, a-z, 0-9, '-') or a pattern with '*' matching any run of characters".to_owned())
    }
}

/// `*` matches any run of characters (including none); everything else matches itself.
pub fn glob(pattern: &str, text: &str) -> bool {
    let mut parts = pattern.split('*');
    let first = parts.next().unwrap_or("");
    let Some(mut rest) = text.strip_prefix(first) else {
        return false;
    };
    let parts: Vec<&str> = parts.collect();
    let Some((last, middle)) = parts.split_last() else {
        return rest.is_empty();
    };
    for part in middle {
        match rest.find(part) {
            Some(i) => rest = &rest[i + part.len()..],
            None => return false,
        }
    }
    rest.len() >= last.len() && rest.ends_with(last)
}

#[cfg(test)]
#[allow(clippy::unwrap_used)]
mod tests {
    use super::*;

    #[test]
    fn globs() {
        assert!(glob("files__*", "files__read"));
        assert!(glob("*", "anything"));
        assert!(glob("a*b*c", "a-x-b-y-c"));
        assert!(glob("exact", "exact"));
        assert!(!glob("exact", "exact2"));
        assert!(!glob("files__*", "files_read"));
        assert!(glob("*__write", "files__write"));
        assert!(!glob("*__write", "files__write2"));
        assert!(!glob("a*bc", "abc_"));
        assert!(glob("a*a", "aa"));
        assert!(!glob("a*a", "a"));
    }

    #[test]
    fn web_urls() {
        fn ok(u: &str) -> WebUrl<'_> {
            web_url(u, "https://x/").unwrap()
        }
        assert_eq!(
            ok("https://idp.example/realms/acme"),
            WebUrl {
                path: "/realms/acme",
                query: None
            }
        );
        assert_eq!(
            ok("HTTP://127.0.0.1:8080?x=1"),
            WebUrl {
                path: "",
                query: Some("x=1")
            }
        );
        assert_eq!(ok("https://[::1]:9/").path, "/");
        assert_eq!(ok("http://my_service:80/mcp").path, "/mcp");
        let err = |u: &str| web_url(u, "https://x/").unwrap_err();
        assert!(err("idp.example/realms").starts_with("not an absolute URL"));
        assert!(err("").starts_with("must not be empty"));
        assert!(err("ftp://h/").contains("http or https"));
        assert!(err("https://h/#x").contains("fragment"));
        assert!(err("https://u:p@h/").contains("user name or password"));
        assert!(err("https:///x").contains("needs a host"));
        assert!(err("https://h:0/").contains("1 to 65535"));
        assert!(err("https://h:/").contains("1 to 65535"));
        assert!(err("https://::1/").contains("brackets"));
        assert!(err("https://a..b/").contains("empty label"));
        assert!(err("https://h/a b").contains("whitespace"));
        for bad in [
            "https://h/a\"b",
            "https://h/<x>",
            "https://h/a\\b",
            "https://h/é",
        ] {
            assert!(err(bad).contains("percent-encode"), "{bad}");
        }
        assert!(err("https://h/%zz").contains("escape"));
        assert!(err("https://h/%2").contains("escape"));
        assert_eq!(ok("https://h/a%20b?x=%2F").path, "/a%20b");
    }

    #[test]
    fn allowed_hosts() {
        assert_eq!(allowed_host("MCP.Example.com").unwrap(), "mcp.example.com");
        assert_eq!(allowed_host("127.0.0.1:8080").unwrap(), "127.0.0.1:8080");
        assert_eq!(allowed_host("[::1]:65535").unwrap(), "[::1]:65535");
        assert_eq!(allowed_host("[FE80::1]").unwrap(), "[fe80::1]");
        assert_eq!(allowed_host("localhost").unwrap(), "localhost");
        let err = |h: &str| allowed_host(h).unwrap_err();
        assert!(err("*").starts_with("`*` is not a host"));
        assert!(err("h:65536").contains("1 to 65535"));
        assert!(err("h:-1").contains("1 to 65535"));
        assert!(err("h:+80").contains("1 to 65535"));
        assert!(err("https://h").contains("without a scheme"));
        assert!(err("h/x").contains("only a host"));
        assert!(err("::1").contains("brackets"));
        assert!(err("[::1").contains("closing"));
        assert!(err("[::1]x").contains("only `:port`"));
        assert!(err("[zz]").contains("IPv6"));
        assert!(err("999.1.1.1").contains("IPv4"));
        assert!(err("*.example.com").contains("wildcards"));
        assert!(err("-a.example").contains("'-'"));
        assert!(err("a b").contains("DNS name"));
        assert!(err("").contains("empty"));
        assert!(err(&"a".repeat(64)).contains("63"));
    }

    #[test]
    fn origins() {
        let ok = |o: &str| origin(o).unwrap();
        assert_eq!(ok("https://App.Example.com/"), "https://app.example.com");
        assert_eq!(ok("http://localhost:3000"), "http://localhost:3000");
        assert_eq!(ok("HTTPS://a.example:443"), "https://a.example");
        assert_eq!(ok("http://a.example:80/"), "http://a.example");
        assert_eq!(ok("http://a.example:443"), "http://a.example:443");
        assert_eq!(ok("http://[::1]:8080"), "http://[::1]:8080");
        let err = |o: &str| origin(o).unwrap_err();
        assert!(err("*").contains("listed one by one"));
        assert!(err("https://a.example/app").contains("no path"));
        assert!(err("https://a.example/?x").contains("no query"));
        assert!(err("https://a.example?x").contains("no query"));
        assert!(err("https://a.example#x").contains("fragment"));
        assert!(err("app.example.com").contains("scheme://host"));
        assert!(err("null").contains("scheme://host"));
        assert!(err("ftp://a.example").contains("http or https"));
        assert!(err("https://u@a.example").contains("user name"));
        assert!(err("https://").contains("needs a host"));
        assert!(err("https://*.example.com").contains("wildcards"));
        assert!(err("https://a.example:0").contains("1 to 65535"));
    }

    #[test]
    fn scopes_and_patterns() {
        for ok in ["mcp", "files:write", "a!#[]^~", "https://x/y"] {
            assert!(scope_token(ok).is_ok(), "{ok}");
        }
        assert!(scope_token("").unwrap_err().contains("empty"));
        assert!(scope_token("a b").unwrap_err().contains("spaces"));
        for bad in ["a\"b", "a\\b", "é", "a\tb"] {
            assert!(scope_token(bad).unwrap_err().contains("RFC 6749"), "{bad}");
        }
        for ok in ["files__write*", "*", "a.b-c_d", "*x*"] {
            assert!(tool_pattern(ok).is_ok(), "{ok}");
        }
        for bad in ["", "a b", "a/b", "a?"] {
            assert!(tool_pattern(bad).is_err(), "{bad}");
        }
    }
}
