//! The HTTP/1.1 client of one HTTP upstream: keep-alive connections to its single origin
//! (plain TCP, or TLS with rustls, the platform's trust store and ALPN `http/1.1`), reused
//! from a small pool, with the request target and `Host` prepared once. Through an HTTP proxy
//! when the environment names one for the origin (`HTTPS_PROXY`/`HTTP_PROXY`/`ALL_PROXY`, minus
//! `NO_PROXY`): a `CONNECT` tunnel for https, absolute-form requests for http.
//!
//! A request costs a pool checkout (one short per-upstream lock) and the exchange itself, done
//! by the caller's task on the connection (`h1.rs`): no task, channel or wake-up per request;
//! nothing is parsed or formatted per request that was known at start.

use std::net::IpAddr;
use std::sync::{Arc, Mutex, OnceLock};
use std::time::{Duration, Instant};

use base64::Engine;
use base64::engine::general_purpose::STANDARD;
use bytes::Bytes;
use http::header::{HOST, HeaderValue, PROXY_AUTHORIZATION};
use http::{Method, StatusCode, Uri};
use rustls::pki_types::ServerName;
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::TcpStream;

use super::h1::{BodyState, Conn};
use super::head_fields::HeaderFields;
use super::header_lines::HeaderLines;

/// Idle connections kept per upstream; more are closed when their response is read.
const MAX_IDLE: usize = 128;
/// An idle connection older than this is closed instead of reused (servers drop them first).
const IDLE_FOR: Duration = Duration::from_secs(60);
/// Bound on a proxy's answer to `CONNECT`.
const MAX_CONNECT_RESPONSE: usize = 8 * 1024;

/// Why a request got no (complete) answer. The text is safe to show: no URL, no credentials.
#[derive(Debug, thiserror::Error)]
pub enum ClientError {
    #[error("connection failed: {0}")]
    Connect(String),
    #[error("timed out connecting")]
    ConnectTimeout,
    #[error("the request could not be sent: {0}")]
    Send(String),
    #[error("the response body broke off: {0}")]
    Body(String),
}

/// Where requests go: the origin, or the proxy in front of it.
struct Route {
    /// The address to connect to (the origin's, or the proxy's).
    host: String,
    port: u16,
    /// `CONNECT` through a proxy first (https through a proxy).
    tunnel: Option<Tunnel>,
}

struct Tunnel {
    /// `host:port` of the origin.
    authority: String,
    authorization: Option<HeaderValue>,
}

/// The HTTP client of one upstream origin. Cheap to share (`Arc`); every connection of every
/// session to this upstream goes through one.
pub struct OriginClient {
    route: Route,
    /// Origin-form (`/mcp?x`) or, through a proxy for http, absolute-form.
    target: Uri,
    /// `http://<authority>` when requests go to a proxy in absolute-form (http through a
    /// proxy): the prefix of every other target on this origin.
    absolute_prefix: Option<String>,
    /// The lines every request on this origin starts with, written once: `Host`, and
    /// `Proxy-Authorization` for http through a proxy with credentials.
    fixed: Box<[u8]>,
    tls: Option<(tokio_rustls::TlsConnector, ServerName<'static>)>,
    connect_timeout: Duration,
    idle: Mutex<Vec<Idle>>,
}

struct Idle {
    conn: Conn,
    since: Instant,
}

impl OriginClient {
    /// A client for the origin of `url` (http or https), with the platform's trust store for
    /// TLS and the proxy the environment names for it, if any.
    pub fn new(url: &url::Url, connect_timeout: Duration) -> Result<OriginClient, String> {
        let tls = match url.scheme() {
            "https" => Some(platform_tls()?),
            _ => None,
        };
        let env = |name: &str| std::env::var(name).ok().filter(|v| !v.is_empty());
        let proxy = proxy_for(url, &env)?;
        OriginClient::build(url, connect_timeout, tls, proxy)
    }

    /// A client with the given TLS configuration and proxy (`None`: direct).
    pub fn build(
        url: &url::Url,
        connect_timeout: Duration,
        tls: Option<Arc<rustls::ClientConfig>>,
        proxy: Option<ProxyConfig>,
    ) -> Result<OriginClient, String> {
        let https = match url.scheme() {
            "https" => true,
            "http" => false,
            other => return Err(format!("unsupported URL scheme {other:?}")),
        };
        let host = url.host().ok_or("the URL names no host")?;
        let port = url.port_or_known_default().ok_or("the URL names no port")?;
        let connect_host = match &host {
            url::Host::Domain(d) => (*d).to_owned(),
            url::Host::Ipv4(a) => a.to_string(),
            url::Host::Ipv6(a) => a.to_string(),
        };
        // `Host`: as in the URL (brackets around IPv6), the port only when not the default.
        let authority = match url.port() {
            Some(p) => format!("{host}:{p}"),
            None => host.to_string(),
        };
        let host_header = HeaderValue::from_str(&authority)
            .map_err(|_| "the URL's host is not a valid header")?;
        let path = match url.query() {
            Some(q) => format!("{}?{q}", url.path()),
            None => url.path().to_owned(),
        };
        let tls = match (https, tls) {
            (false, _) => None,
            (true, None) => return Err("https needs a TLS configuration".into()),
            (true, Some(config)) => {
                let name = match &host {
                    url::Host::Domain(d) => ServerName::try_from((*d).to_owned())
                        .map_err(|_| format!("{d:?} is not a valid TLS server name"))?,
                    url::Host::Ipv4(a) => ServerName::IpAddress(IpAddr::V4(*a).into()),
                    url::Host::Ipv6(a) => ServerName::IpAddress(IpAddr::V6(*a).into()),
                };
                Some((tokio_rustls::TlsConnector::from(config), name))
            }
        };
        let absolute_prefix = (proxy.is_some() && !https).then(|| format!("http://{authority}"));
        let (route, target, proxy_authorization) = match proxy {
            None => (
                Route {
                    host: connect_host,
                    port,
                    tunnel: None,
                },
                path,
                None,
            ),
            Some(p) if https => (
                Route {
                    host: p.host,
                    port: p.port,
                    tunnel: Some(Tunnel {
                        authority: format!("{}:{port}", bracketed(&connect_host)),
                        authorization: p.authorization,
                    }),
                },
                path,
                None,
            ),
            Some(p) => (
                Route {
                    host: p.host,
                    port: p.port,
                    tunnel: None,
                },
                format!("http://{authority}{path}"),
                p.authorization,
            ),
        };
        let target = Uri::try_from(target).map_err(|e| format!("request target: {e}"))?;
        let mut fixed = HeaderLines::with_capacity(64);
        fixed.add(&HOST, &host_header);
        if let Some(v) = &proxy_authorization {
            fixed.add(&PROXY_AUTHORIZATION, v);
        }
        Ok(OriginClient {
            route,
            target,
            absolute_prefix,
            fixed: fixed.as_bytes().into(),
            tls,
            connect_timeout,
            idle: Mutex::new(Vec::new()),
        })
    }

    /// Sends one request to the upstream's URL. A request a pooled connection could not take
    /// (it was closed meanwhile, and nothing was written) goes out on another one.
    pub async fn send(
        self: &Arc<Self>,
        method: Method,
        headers: HeaderLines,
        body: &[u8],
    ) -> Result<Response, ClientError> {
        self.send_to(&self.target, method, headers, body).await
    }

    /// The request target of another URL on this origin (the caller checked the origin): the
    /// same form as the upstream's own URL.
    pub fn target_for(&self, url: &url::Url) -> Result<Uri, String> {
        let path = match url.query() {
            Some(q) => format!("{}?{q}", url.path()),
            None => url.path().to_owned(),
        };
        let target = match &self.absolute_prefix {
            Some(prefix) => format!("{prefix}{path}"),
            None => path,
        };
        Uri::try_from(target).map_err(|e| format!("request target: {e}"))
    }

    /// Sends one request to `target` (the upstream's URL, or one from [`Self::target_for`]),
    /// with this origin's `Host` (and proxy credentials) before `headers`.
    pub async fn send_to(
        self: &Arc<Self>,
        target: &Uri,
        method: Method,
        headers: HeaderLines,
        body: &[u8],
    ) -> Result<Response, ClientError> {
        loop {
            let (mut conn, reused) = match self.checkout() {
                Some(c) => (c, true),
                // Boxed: connecting (TCP, proxy, TLS) is a large state that the usual
                // request, on a pooled connection, never needs.
                None => (Box::pin(self.connect()).await?, false),
            };
            if let Err(e) = conn
                .send(&method, target, &self.fixed, &headers, body)
                .await
            {
                // A pooled connection the server closed as the request went out: the request
                // did not get through, so it goes out on another one.
                if reused {
                    continue;
                }
                return Err(ClientError::Send(e.to_string()));
            }
            let head = conn
                .read_head(&method)
                .await
                .map_err(|e| ClientError::Send(e.to_string()))?;
            let mut response = Response {
                status: head.status,
                headers: head.headers,
                declared: head.body.declared_length(),
                state: head.body,
                reusable: head.reusable,
                conn: Some(conn),
                client: self.clone(),
            };
            if response.declared == Some(0) {
                // No body to read: the connection is free now (a `202` to a notification).
                response.release();
            }
            return Ok(response);
        }
    }

    /// An idle connection, if one is fit for reuse; stale and closed ones are dropped. The
    /// last one given back that the calling thread's worker opened, when there is one: its
    /// socket's readiness then reaches the task on the thread that runs it, not by way of
    /// another worker's I/O driver (`workers`); with no workers every connection is home.
    fn checkout(&self) -> Option<Conn> {
        let mut idle = self.idle.lock().ok()?;
        let home = crate::workers::home();
        while !idle.is_empty() {
            let at = idle
                .iter()
                .rposition(|i| i.conn.home() == home)
                .unwrap_or(idle.len() - 1);
            let mut i = idle.remove(at);
            if i.since.elapsed() < IDLE_FOR && !i.conn.is_stale() {
                return Some(i.conn);
            }
        }
        None
    }

    fn give_back(&self, conn: Conn) {
        if let Ok(mut idle) = self.idle.lock()
            && idle.len() < MAX_IDLE
        {
            idle.push(Idle {
                conn,
                since: Instant::now(),
            });
        }
    }

    async fn connect(&self) -> Result<Conn, ClientError> {
        match tokio::time::timeout(self.connect_timeout, self.open()).await {
            Ok(r) => r,
            Err(_) => Err(ClientError::ConnectTimeout),
        }
    }

    async fn open(&self) -> Result<Conn, ClientError> {
        let connect_error = |e: std::io::Error| ClientError::Connect(e.to_string());
        let mut tcp = TcpStream::connect((self.route.host.as_str(), self.route.port))
            .await
            .map_err(connect_error)?;
        tcp.set_nodelay(true).map_err(connect_error)?;
        if let Some(t) = &self.route.tunnel {
            tunnel(&mut tcp, t).await?;
        }
        match &self.tls {
            None => Ok(Conn::new(Box::new(tcp))),
            Some((connector, name)) => {
                let stream = connector
                    .connect(name.clone(), tcp)
                    .await
                    .map_err(|e| ClientError::Connect(format!("TLS: {e}")))?;
                Ok(Conn::new(Box::new(stream)))
            }
        }
    }
}

/// Asks the proxy on `tcp` for a tunnel to the origin; `Ok` once it answered 2xx.
async fn tunnel(tcp: &mut TcpStream, t: &Tunnel) -> Result<(), ClientError> {
    let mut head = format!("CONNECT {0} HTTP/1.1\r\nHost: {0}\r\n", t.authority).into_bytes();
    if let Some(v) = &t.authorization {
        head.extend_from_slice(b"Proxy-Authorization: ");
        head.extend_from_slice(v.as_bytes());
        head.extend_from_slice(b"\r\n");
    }
    head.extend_from_slice(b"\r\n");
    let proxy_error = |e: std::io::Error| ClientError::Connect(format!("proxy: {e}"));
    tcp.write_all(&head).await.map_err(proxy_error)?;
    // Read the proxy's answer byte by byte up to its blank line: nothing after it may be
    // consumed (the TLS handshake follows).
    let mut answer = Vec::with_capacity(256);
    let mut byte = [0u8; 1];
    while !answer.ends_with(b"\r\n\r\n") {
        if answer.len() >= MAX_CONNECT_RESPONSE {
            return Err(ClientError::Connect(
                "proxy: oversized CONNECT answer".into(),
            ));
        }
        if tcp.read(&mut byte).await.map_err(proxy_error)? == 0 {
            return Err(ClientError::Connect(
                "proxy: closed the connection during CONNECT".into(),
            ));
        }
        answer.push(byte[0]);
    }
    let status = answer
        .split(|b| *b == b' ')
        .nth(1)
        .and_then(|s| std::str::from_utf8(s).ok())
        .and_then(|s| s.parse::<u16>().ok())
        .and_then(|s| StatusCode::from_u16(s).ok());
    match status {
        Some(s) if s.is_success() => Ok(()),
        Some(s) => Err(ClientError::Connect(format!(
            "proxy refused the tunnel (HTTP {})",
            s.as_u16()
        ))),
        None => Err(ClientError::Connect(
            "proxy: malformed CONNECT answer".into(),
        )),
    }
}

/// An upstream's answer: status and headers at once, the body read with [`Response::chunk`].
/// The connection goes back to the pool when the body has been read to its end; dropped
/// before that, it is closed.
pub struct Response {
    status: StatusCode,
    headers: HeaderFields,
    declared: Option<u64>,
    state: BodyState,
    reusable: bool,
    /// The connection, while the body is being read.
    conn: Option<Conn>,
    client: Arc<OriginClient>,
}

impl Response {
    pub fn status(&self) -> StatusCode {
        self.status
    }

    pub fn headers(&self) -> &HeaderFields {
        &self.headers
    }

    /// Frees the headers once read (a long-lived stream need not hold them).
    pub fn forget_headers(&mut self) {
        self.headers = HeaderFields::default();
    }

    /// The body's length, when the upstream declared it.
    pub fn content_length(&self) -> Option<u64> {
        self.declared
    }

    /// Reads the rest of the body, discarding it, so the connection goes back to the pool
    /// (a broken body just ends it).
    pub async fn drain(&mut self) {
        while let Ok(Some(_)) = self.chunk().await {}
    }

    /// The next piece of the body; `None` at its end (the connection is then reusable).
    pub async fn chunk(&mut self) -> Result<Option<Bytes>, ClientError> {
        let Some(conn) = self.conn.as_mut() else {
            return Ok(None);
        };
        loop {
            match conn.next_chunk(&mut self.state).await {
                Ok(Some(data)) if data.is_empty() => {}
                Ok(Some(data)) => return Ok(Some(data)),
                Ok(None) => {
                    self.release();
                    return Ok(None);
                }
                Err(e) => {
                    self.conn = None;
                    return Err(ClientError::Body(e.to_string()));
                }
            }
        }
    }

    /// The body is read: the connection goes back to the pool if it can carry another request.
    fn release(&mut self) {
        if let Some(conn) = self.conn.take()
            && self.reusable
            && !conn.has_leftover()
        {
            self.client.give_back(conn);
        }
    }
}

/// The process's TLS client configuration for upstreams: the platform's trust store (on
/// Linux the system's CA bundle, `SSL_CERT_FILE`/`SSL_CERT_DIR` honoured), built once.
fn platform_tls() -> Result<Arc<rustls::ClientConfig>, String> {
    static CONFIG: OnceLock<Result<Arc<rustls::ClientConfig>, String>> = OnceLock::new();
    CONFIG
        .get_or_init(|| {
            use rustls_platform_verifier::ConfigVerifierExt;
            crate::crypto::install_crypto_provider();
            let mut config = rustls::ClientConfig::with_platform_verifier()
                .map_err(|e| format!("TLS trust store: {e}"))?;
            config.alpn_protocols = vec![b"http/1.1".to_vec()];
            Ok(Arc::new(config))
        })
        .clone()
}

/// An HTTP proxy in front of an origin.
#[derive(Debug, Clone, PartialEq)]
pub struct ProxyConfig {
    pub host: String,
    pub port: u16,
    /// `Basic` credentials from the proxy URL's user info.
    pub authorization: Option<HeaderValue>,
}

/// The proxy the environment names for `url` (`HTTPS_PROXY` for https, `HTTP_PROXY` for http,
/// else `ALL_PROXY`; lower-case names too), unless `NO_PROXY` exempts its host. Only `http://`
/// proxies are supported; any other is an error, not a silent direct connection.
pub fn proxy_for(
    url: &url::Url,
    env: &dyn Fn(&str) -> Option<String>,
) -> Result<Option<ProxyConfig>, String> {
    let first = |names: [&'static str; 2]| names.into_iter().find_map(|n| env(n).map(|v| (n, v)));
    let named = match url.scheme() {
        "https" => first(["HTTPS_PROXY", "https_proxy"]),
        _ => first(["HTTP_PROXY", "http_proxy"]),
    }
    .or_else(|| first(["ALL_PROXY", "all_proxy"]));
    let Some((var, value)) = named else {
        return Ok(None);
    };
    let host = url.host_str().unwrap_or_default();
    if let Some(no_proxy) = env("NO_PROXY").or_else(|| env("no_proxy"))
        && exempt(&no_proxy, host)
    {
        return Ok(None);
    }
    let with_scheme = if value.contains("://") {
        value
    } else {
        format!("http://{value}")
    };
    let proxy = url::Url::parse(&with_scheme).map_err(|e| format!("{var}: {e}"))?;
    if proxy.scheme() != "http" {
        return Err(format!(
            "{var} names a {}:// proxy; upstream connections support http:// proxies only",
            proxy.scheme()
        ));
    }
    let proxy_host = match proxy.host() {
        Some(url::Host::Domain(d)) => d.to_owned(),
        Some(url::Host::Ipv4(a)) => a.to_string(),
        Some(url::Host::Ipv6(a)) => a.to_string(),
        None => return Err(format!("{var} names no host")),
    };
    let authorization = if proxy.username().is_empty() {
        None
    } else {
        let user = percent_decode(proxy.username());
        let pass = percent_decode(proxy.password().unwrap_or_default());
        let mut v = HeaderValue::from_str(&format!(
            "Basic {}",
            STANDARD.encode(format!("{user}:{pass}"))
        ))
        .map_err(|_| format!("{var}: invalid credentials"))?;
        v.set_sensitive(true);
        Some(v)
    };
    Ok(Some(ProxyConfig {
        host: proxy_host,
        port: proxy.port_or_known_default().unwrap_or(80),
        authorization,
    }))
}

/// Whether `NO_PROXY` (comma-separated: `*`, domains matching themselves and their
/// subdomains, IP addresses, CIDR blocks) exempts `host`.
fn exempt(no_proxy: &str, host: &str) -> bool {
    let host = host.trim_start_matches('[').trim_end_matches(']');
    let ip: Option<IpAddr> = host.parse().ok();
    no_proxy
        .split(',')
        .map(str::trim)
        .filter(|e| !e.is_empty())
        .any(|entry| {
            if entry == "*" {
                return true;
            }
            if let Some(ip) = ip {
                return match entry.split_once('/') {
                    Some((net, bits)) => in_block(ip, net, bits),
                    None => entry
                        .trim_start_matches('[')
                        .trim_end_matches(']')
                        .parse::<IpAddr>()
                        .is_ok_and(|e| e == ip),
                };
            }
            let domain = entry.trim_start_matches('.');
            host.eq_ignore_ascii_case(domain)
                || (host.len() > domain.len()
                    && host.as_bytes()[host.len() - domain.len() - 1] == b'.'
                    && host[host.len() - domain.len()..].eq_ignore_ascii_case(domain))
        })
}

/// Whether `ip` lies in the block `net/bits`.
fn in_block(ip: IpAddr, net: &str, bits: &str) -> bool {
    let (Ok(net), Ok(bits)) = (net.parse::<IpAddr>(), bits.parse::<u32>()) else {
        return false;
    };
    match (ip, net) {
        (IpAddr::V4(a), IpAddr::V4(n)) if bits <= 32 => {
            let mask = u32::MAX.checked_shl(32 - bits).unwrap_or(0);
            u32::from(a) & mask == u32::from(n) & mask
        }
        (IpAddr::V6(a), IpAddr::V6(n)) if bits <= 128 => {
            let mask = u128::MAX.checked_shl(128 - bits).unwrap_or(0);
            u128::from(a) & mask == u128::from(n) & mask
        }
        _ => false,
    }
}

fn bracketed(host: &str) -> String {
    if host.contains(':') {
        format!("[{host}]")
    } else {
        host.to_owned()
    }
}

/// `%XX` sequences of a URL's user info, decoded.
fn percent_decode(s: &str) -> String {
    let bytes = s.as_bytes();
    let mut out = Vec::with_capacity(bytes.len());
    let mut i = 0;
    while i < bytes.len() {
        if bytes[i] == b'%'
            && i + 2 < bytes.len()
            && let Some(b) = std::str::from_utf8(&bytes[i + 1..i + 3])
                .ok()
                .and_then(|h| u8::from_str_radix(h, 16).ok())
        {
            out.push(b);
            i += 3;
        } else {
            out.push(bytes[i]);
            i += 1;
        }
    }
    String::from_utf8_lossy(&out).into_owned()
}

#[cfg(test)]
#[path = "http_client_tests.rs"]
mod tests;
