//! One parser for the authorities a request names — its `Host` header, an HTTP/2 `:authority`
//! or absolute request target, and the host of its `Origin` — so that the security front
//! compares hosts, never text that merely starts like one. Only `host[:port]` is accepted: a DNS
//! name, a dotted-quad IPv4 address or a bracketed IPv6 address, then at most `:` and a port
//! of 1 to 65535; no user info, path, whitespace or anything else (RFC 9110 §7.2, RFC 3986
//! §3.2). Names compare without case and without their trailing dot (`localhost.` is
//! `localhost`), addresses by value (`[::ffff:7f00:1]` is `[::ffff:127.0.0.1]`).

use std::borrow::Cow;
use std::cell::RefCell;
use std::net::{IpAddr, Ipv4Addr, Ipv6Addr};

/// Why a value is not an authority: a fixed phrase, safe to show (it never echoes the value).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Malformed(pub &'static str);

/// A parsed `host[:port]`.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Authority<'a> {
    /// Lower case, without a trailing dot; an IPv6 address in brackets, in its canonical text.
    host: Cow<'a, str>,
    /// Set when the host is an IP address.
    ip: Option<IpAddr>,
    port: Option<u16>,
}

/// The longest `host[:port]`: a 253-character name, its trailing dot, `:65535`.
const MAX_LEN: usize = 253 + 1 + 6;

/// The last request authority this thread parsed whose host is a prefix of its text, kept
/// as the text and what was read from it: the requests to one endpoint name the same `Host`.
struct Last {
    text: String,
    host_len: usize,
    ip: Option<IpAddr>,
    port: Option<u16>,
}

thread_local! {
    static LAST: RefCell<Option<Last>> = const { RefCell::new(None) };
}

impl<'a> Authority<'a> {
    /// [`Authority::parse`] for the authority a request names (its `Host`, `:authority` or
    /// absolute target): the same result, the last one of this thread's remembered. A value
    /// other than the last is parsed in full (and remembered instead).
    pub fn parse_request(text: &'a str) -> Result<Authority<'a>, Malformed> {
        let hit = LAST.with(|last| {
            let last = last.try_borrow().ok()?;
            let last = last.as_ref().filter(|l| l.text == text)?;
            Some((last.host_len, last.ip, last.port))
        });
        if let Some((host_len, ip, port)) = hit
            && let Some(host) = text.get(..host_len)
        {
            return Ok(Authority {
                host: Cow::Borrowed(host),
                ip,
                port,
            });
        }
        let parsed = Authority::parse(text)?;
        if let Cow::Borrowed(host) = &parsed.host
            && text.starts_with(*host)
        {
            LAST.with(|last| {
                let Ok(mut last) = last.try_borrow_mut() else {
                    return;
                };
                let slot = last.get_or_insert_with(|| Last {
                    text: String::with_capacity(MAX_LEN),
                    host_len: 0,
                    ip: None,
                    port: None,
                });
                slot.text.clear();
                slot.text.push_str(text);
                slot.host_len = host.len();
                slot.ip = parsed.ip;
                slot.port = parsed.port;
            });
        }
        Ok(parsed)
    }

    pub fn parse(text: &'a str) -> Result<Authority<'a>, Malformed> {
        if text.is_empty() {
            return Err(Malformed("the value is empty"));
        }
        if text.len() > MAX_LEN {
            return Err(Malformed("the value is too long for a host and port"));
        }
        if text.contains('@') {
            return Err(Malformed("user information ('...@') is not allowed"));
        }
        let allowed = |b: u8| b.is_ascii_alphanumeric() || b"-._:[]".contains(&b);
        if !text.bytes().all(allowed) {
            return Err(Malformed(
                "only a host name or address and an optional :port are allowed",
            ));
        }
        match text.strip_prefix('[') {
            Some(rest) => Self::bracketed(text, rest),
            None => Self::name_or_ipv4(text),
        }
    }

    /// `[v6]` or `[v6]:port`.
    fn bracketed(text: &'a str, rest: &'a str) -> Result<Authority<'a>, Malformed> {
        let (inner, after) = rest
            .split_once(']')
            .ok_or(Malformed("an IPv6 address needs its closing ']'"))?;
        let port = match after {
            "" => None,
            _ => Some(port(after.strip_prefix(':').ok_or(Malformed(
                "only :port may follow an IPv6 address in brackets",
            ))?)?),
        };
        let addr: Ipv6Addr = inner
            .parse()
            .map_err(|_| Malformed("not a valid IPv6 address in brackets"))?;
        let canonical = format!("[{addr}]");
        let host = match text.get(..canonical.len()) {
            Some(written) if written == canonical => Cow::Borrowed(written),
            _ => Cow::Owned(canonical),
        };
        Ok(Authority {
            host,
            ip: Some(IpAddr::V6(addr)),
            port,
        })
    }

    /// `name[:port]` or `ipv4[:port]`.
    fn name_or_ipv4(text: &'a str) -> Result<Authority<'a>, Malformed> {
        if text.contains(['[', ']']) {
            return Err(Malformed("brackets may only enclose an IPv6 address"));
        }
        let (written, port) = match text.split_once(':') {
            None => (text, None),
            Some((_, after)) if after.contains(':') => {
                return Err(Malformed(
                    "more than one ':' (an IPv6 address must be in brackets)",
                ));
            }
            Some((host, after)) => (host, Some(port(after)?)),
        };
        let name = written.strip_suffix('.').unwrap_or(written);
        check_name(name)?;
        let numeric = name
            .rsplit('.')
            .next()
            .is_some_and(|last| last.bytes().all(|b| b.is_ascii_digit()));
        let ip = match numeric {
            false => None,
            true => Some(IpAddr::V4(name.parse::<Ipv4Addr>().map_err(|_| {
                Malformed("not a valid IPv4 address (four decimal numbers)")
            })?)),
        };
        let host = match name.bytes().any(|b| b.is_ascii_uppercase()) {
            true => Cow::Owned(name.to_ascii_lowercase()),
            false => Cow::Borrowed(name),
        };
        Ok(Authority { host, ip, port })
    }

    /// The host, canonical (see the type).
    pub fn host(&self) -> &str {
        &self.host
    }

    /// Whether the host is this machine: `localhost`, 127.0.0.0/8, `::1`, or an IPv4 loopback
    /// address mapped into IPv6 (`::ffff:127.0.0.1`).
    pub fn is_loopback(&self) -> bool {
        match self.ip {
            Some(IpAddr::V4(v4)) => v4.is_loopback(),
            Some(IpAddr::V6(v6)) => {
                v6.is_loopback() || v6.to_ipv4_mapped().is_some_and(|v4| v4.is_loopback())
            }
            None => self.host == "localhost",
        }
    }

    /// Whether both name the same host (addresses by value, names by canonical text).
    pub fn same_host(&self, other: &Authority<'_>) -> bool {
        match (self.ip, other.ip) {
            (Some(a), Some(b)) => a == b,
            (None, None) => self.host == other.host,
            _ => false,
        }
    }

    /// Whether both name the same host and port, a missing port being the default of the
    /// scheme (`https` with `tls`, else `http`).
    pub fn same_as(&self, other: &Authority<'_>, tls: bool) -> bool {
        self.same_host(other) && effective_port(self, tls) == effective_port(other, tls)
    }

    /// Whether this (a request's authority) is allowed by an `allowed_hosts` entry: the same
    /// host and, when the entry names a port, the same port. Entries were validated as
    /// `host[:port]` by the config; one that does not parse allows nothing.
    pub fn allowed_by(&self, entry: &str) -> bool {
        Authority::parse(entry).is_ok_and(|allowed| {
            self.same_host(&allowed) && allowed.port.is_none_or(|p| self.port == Some(p))
        })
    }

    /// `host[:port]`, as it goes into a URL.
    pub fn to_url_authority(&self) -> String {
        match self.port {
            Some(port) => format!("{}:{port}", self.host),
            None => self.host.to_string(),
        }
    }
}

/// The value of an `Origin` header (RFC 6454 §7).
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Origin<'a> {
    /// `null`, or a scheme other than http(s) (a browser extension, say): an origin that is
    /// never this endpoint's and that no `allowed_origins` entry can name.
    Foreign,
    /// `http://` or `https://` and an authority.
    Web { tls: bool, authority: Authority<'a> },
}

impl<'a> Origin<'a> {
    pub fn parse(text: &'a str) -> Result<Origin<'a>, Malformed> {
        if text == "null" {
            return Ok(Origin::Foreign);
        }
        let (scheme, rest) = text
            .split_once("://")
            .ok_or(Malformed("expected scheme://host[:port] or null"))?;
        let tls = if scheme.eq_ignore_ascii_case("https") {
            true
        } else if scheme.eq_ignore_ascii_case("http") {
            false
        } else if is_scheme(scheme) {
            return Ok(Origin::Foreign);
        } else {
            return Err(Malformed("expected scheme://host[:port] or null"));
        };
        let authority = Authority::parse(rest)?;
        Ok(Origin::Web { tls, authority })
    }

    /// Whether this is the origin of `(tls, authority)`: same scheme, host and effective port.
    pub fn is(&self, tls: bool, authority: &Authority<'_>) -> bool {
        match self {
            Origin::Foreign => false,
            Origin::Web {
                tls: origin_tls,
                authority: origin,
            } => *origin_tls == tls && origin.same_as(authority, tls),
        }
    }

    /// Whether an `allowed_origins` entry (validated by the config as `scheme://host[:port]`)
    /// names this origin.
    pub fn allowed_by(&self, entry: &str) -> bool {
        match Origin::parse(entry) {
            Ok(Origin::Web { tls, authority }) => self.is(tls, &authority),
            _ => false,
        }
    }

    /// Whether this is an http(s) origin on this machine.
    pub fn is_loopback(&self) -> bool {
        matches!(self, Origin::Web { authority, .. } if authority.is_loopback())
    }
}

fn effective_port(authority: &Authority<'_>, tls: bool) -> u16 {
    authority.port.unwrap_or(if tls { 443 } else { 80 })
}

/// RFC 3986 §3.1: `ALPHA *( ALPHA / DIGIT / "+" / "-" / "." )`.
fn is_scheme(text: &str) -> bool {
    let mut bytes = text.bytes();
    bytes.next().is_some_and(|b| b.is_ascii_alphabetic())
        && bytes.all(|b| b.is_ascii_alphanumeric() || b"+-.".contains(&b))
}

/// 1 to 65535 in at most five digits (leading zeros allowed, as RFC 3986 and the config do).
fn port(digits: &str) -> Result<u16, Malformed> {
    let valid =
        !digits.is_empty() && digits.len() <= 5 && digits.bytes().all(|b| b.is_ascii_digit());
    match digits.parse::<u16>() {
        Ok(port) if valid && port > 0 => Ok(port),
        _ => Err(Malformed("the port must be a number from 1 to 65535")),
    }
}

/// Dot-separated labels of letters, digits, `-` and `_`, none empty or longer than 63, none
/// starting or ending with `-`; 253 characters at most.
fn check_name(name: &str) -> Result<(), Malformed> {
    if name.is_empty() {
        return Err(Malformed("the host is empty"));
    }
    if name.len() > 253 {
        return Err(Malformed("a host name is at most 253 characters"));
    }
    for label in name.split('.') {
        if label.is_empty() {
            return Err(Malformed(
                "a host name has an empty label ('..' or a leading '.')",
            ));
        }
        if label.len() > 63 {
            return Err(Malformed("a label of a host name is at most 63 characters"));
        }
        if label.starts_with('-') || label.ends_with('-') {
            return Err(Malformed(
                "a label of a host name cannot start or end with '-'",
            ));
        }
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used)]
    use super::*;

    fn ok(text: &str) -> Authority<'_> {
        Authority::parse(text).unwrap_or_else(|e| panic!("{text:?}: {e:?}"))
    }

    #[test]
    fn a_request_authority_remembered_reads_as_parsed() {
        let cases = [
            "127.0.0.1:8080",
            "localhost",
            "Example.COM:443",
            "[::1]:9",
            "[0:0:0:0:0:0:0:1]",
            "host.example.",
            "a@b",
            "",
            "127.0.0.1:0",
        ];
        // Each value in turn, each twice (a hit the second time) and after another one.
        for _ in 0..2 {
            for text in cases {
                for _ in 0..2 {
                    assert_eq!(
                        Authority::parse_request(text),
                        Authority::parse(text),
                        "{text:?}"
                    );
                }
            }
        }
    }

    #[test]
    fn canonical_hosts_and_ports() {
        let a = ok("LocalHost.:8080");
        assert_eq!((a.host(), a.port), ("localhost", Some(8080)));
        assert!(matches!(ok("mcp.example.com").host, Cow::Borrowed(_)));
        assert_eq!(ok("[::FFFF:7f00:1]:9").host(), "[::ffff:127.0.0.1]");
        assert_eq!(ok("[0:0:0:0:0:0:0:1]").host(), "[::1]");
        assert!(matches!(ok("[::1]:9").host, Cow::Borrowed("[::1]")));
        assert_eq!(ok("127.0.0.1:65535").port, Some(65535));
        assert_eq!(ok("localhost:080").to_url_authority(), "localhost:80");
        assert_eq!(ok("my_service").host(), "my_service");
        assert_eq!(ok("[::1]:8").to_url_authority(), "[::1]:8");
        assert_eq!(ok("a.example").to_url_authority(), "a.example");
    }

    #[test]
    fn malformed_values_are_refused() {
        for bad in [
            "",
            "localhost:evil.example",
            "127.0.0.1:evil",
            "[::1]evil.example",
            "[::1]:evil",
            "[::1]:",
            "user@localhost",
            "localhost:80@evil.example",
            "localhost:",
            "localhost:0",
            "localhost:000080",
            "localhost:65536",
            "localhost:+80",
            "localhost:80:80",
            "localhost/path",
            "localhost?x",
            "local host",
            "localhost\t",
            "::1",
            "[::1",
            "[localhost]",
            "[::1%25eth0]",
            "a[b]",
            ".localhost",
            "localhost..",
            ".",
            "a..b",
            "-a.example",
            "127.1",
            "0x7f.0.0.1",
            "2130706433",
            "256.0.0.1",
            "bücher.example",
        ] {
            assert!(Authority::parse(bad).is_err(), "{bad:?} was accepted");
        }
        assert!(Authority::parse(&"a".repeat(64)).is_err());
        assert!(Authority::parse(&format!("{}.example", "a.".repeat(130))).is_err());
    }

    #[test]
    fn loopback_forms() {
        for host in [
            "localhost",
            "localhost.",
            "LOCALHOST:1",
            "127.0.0.1",
            "127.0.0.2:80",
            "[::1]",
            "[::ffff:127.0.0.1]:8080",
            "[::ffff:7f00:1]",
        ] {
            assert!(ok(host).is_loopback(), "{host}");
        }
        for host in [
            "localhost.evil",
            "evil.localhost",
            "10.0.0.1",
            "[::ffff:10.0.0.1]",
            "[::2]",
            "[::127.0.0.1]",
        ] {
            assert!(!ok(host).is_loopback(), "{host}");
        }
    }

    #[test]
    fn allowed_host_entries() {
        assert!(ok("MCP.example.com.:443").allowed_by("mcp.example.com"));
        assert!(ok("mcp.example.com:8443").allowed_by("mcp.example.com:8443"));
        assert!(!ok("mcp.example.com:443").allowed_by("mcp.example.com:8443"));
        assert!(!ok("mcp.example.com").allowed_by("mcp.example.com:8443"));
        assert!(ok("[::ffff:7f00:1]:9").allowed_by("[::ffff:127.0.0.1]"));
        assert!(!ok("127.0.0.1").allowed_by("[::ffff:127.0.0.1]"));
        assert!(!ok("evil.example").allowed_by("not a host"));
    }

    #[test]
    fn origins() {
        let web = |text: &'static str| Origin::parse(text).unwrap();
        assert_eq!(web("null"), Origin::Foreign);
        assert_eq!(web("chrome-extension://abcdef"), Origin::Foreign);
        let host = ok("127.0.0.1:8080");
        assert!(web("http://127.0.0.1:8080").is(false, &host));
        assert!(!web("https://127.0.0.1:8080").is(false, &host));
        assert!(!web("HTTP://[::ffff:127.0.0.1]:8080").is(false, &host));
        assert!(web("https://mcp.example").is(true, &ok("mcp.example:443")));
        assert!(web("http://mcp.example:80").is(false, &ok("MCP.example")));
        assert!(web("http://[::ffff:127.0.0.1]:3000").is_loopback());
        assert!(!web("null").is_loopback());
        assert!(web("https://app.example").allowed_by("https://app.example"));
        assert!(web("https://app.example:443").allowed_by("https://app.example"));
        assert!(!web("http://app.example").allowed_by("https://app.example"));
        for bad in [
            "http://localhost:evil.example",
            "http://[::1]evil.example",
            "http://user@localhost",
            "http://localhost:3000/",
            "http://localhost:3000/path",
            "http://localhost:0",
            "http://",
            "localhost:3000",
            "1http://x",
            "",
        ] {
            assert!(Origin::parse(bad).is_err(), "{bad:?} was accepted");
        }
    }
}
