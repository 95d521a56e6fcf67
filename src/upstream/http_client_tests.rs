//! `OriginClient` against real sockets: an HTTP/1.1 server that counts its connections, a
//! TLS server with a test CA, and a small proxy (CONNECT and absolute-form).

#![allow(clippy::unwrap_used)]

use std::convert::Infallible;
use std::sync::Arc;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::time::Duration;

use bytes::Bytes;
use http::Method;
use http_body_util::{BodyExt, Full};
use hyper::body::Incoming;
use hyper::service::service_fn;
use hyper_util::rt::TokioIo;
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::{TcpListener, TcpStream};

use super::*;

/// What the test server saw of one request.
#[derive(Debug, Clone)]
struct Seen {
    target: String,
    host: String,
    proxy_authorization: Option<String>,
    body: Bytes,
}

struct Server {
    port: u16,
    connections: Arc<AtomicUsize>,
    seen: Arc<Mutex<Vec<Seen>>>,
}

/// An HTTP/1.1 server on 127.0.0.1 answering every request with its body echoed; with `tls`,
/// behind TLS with that certificate. `close_after`: the server closes each connection after
/// this many requests.
async fn serve(tls: Option<tokio_rustls::TlsAcceptor>, close_after: Option<usize>) -> Server {
    let listener = TcpListener::bind("127.0.0.1:0").await.unwrap();
    let port = listener.local_addr().unwrap().port();
    let connections = Arc::new(AtomicUsize::new(0));
    let seen = Arc::new(Mutex::new(Vec::new()));
    let (c, s) = (connections.clone(), seen.clone());
    tokio::spawn(async move {
        while let Ok((tcp, _)) = listener.accept().await {
            c.fetch_add(1, Ordering::SeqCst);
            let (seen, tls) = (s.clone(), tls.clone());
            tokio::spawn(async move {
                let served = Arc::new(AtomicUsize::new(0));
                let svc = service_fn(move |req: http::Request<Incoming>| {
                    let (seen, served) = (seen.clone(), served.clone());
                    async move {
                        let n = served.fetch_add(1, Ordering::SeqCst) + 1;
                        let header = |name: &str| {
                            req.headers()
                                .get(name)
                                .map(|v| v.to_str().unwrap().to_owned())
                        };
                        let target = req.uri().to_string();
                        let host = header("host").unwrap_or_default();
                        let proxy_authorization = header("proxy-authorization");
                        let body = req.into_body().collect().await.unwrap().to_bytes();
                        seen.lock().unwrap().push(Seen {
                            target,
                            host,
                            proxy_authorization,
                            body: body.clone(),
                        });
                        let mut resp = http::Response::new(Full::new(body));
                        if close_after.is_some_and(|max| n >= max) {
                            resp.headers_mut()
                                .insert("connection", HeaderValue::from_static("close"));
                        }
                        Ok::<_, Infallible>(resp)
                    }
                });
                let builder = hyper::server::conn::http1::Builder::new();
                match tls {
                    Some(acceptor) => {
                        let Ok(stream) = acceptor.accept(tcp).await else {
                            return;
                        };
                        let _ = builder.serve_connection(TokioIo::new(stream), svc).await;
                    }
                    None => {
                        let _ = builder.serve_connection(TokioIo::new(tcp), svc).await;
                    }
                }
            });
        }
    });
    Server {
        port,
        connections,
        seen,
    }
}

fn client(url: &str) -> Arc<OriginClient> {
    let url = url::Url::parse(url).unwrap();
    Arc::new(OriginClient::build(&url, Duration::from_secs(5), None, None).unwrap())
}

async fn read_all(mut resp: Response) -> Bytes {
    let mut out = Vec::new();
    while let Some(c) = resp.chunk().await.unwrap() {
        out.extend_from_slice(&c);
    }
    Bytes::from(out)
}

/// POSTs `body` to the echoing test server and checks it comes back whole.
async fn assert_echoed(c: &Arc<OriginClient>, body: impl Into<Bytes>) {
    let body = body.into();
    let resp = c
        .send(Method::POST, HeaderLines::default(), &body)
        .await
        .unwrap();
    assert_eq!(read_all(resp).await, body);
}

#[tokio::test]
async fn sequential_requests_share_one_connection_with_host_and_target_as_in_the_url() {
    let server = serve(None, None).await;
    let c = client(&format!("http://127.0.0.1:{}/mcp?tenant=a", server.port));
    for i in 0..20 {
        let body = Bytes::from(format!("request {i}"));
        let resp = c
            .send(Method::POST, HeaderLines::default(), &body)
            .await
            .unwrap();
        assert_eq!(resp.status(), StatusCode::OK);
        assert_eq!(resp.content_length(), Some(body.len() as u64));
        assert_eq!(read_all(resp).await, body);
    }
    assert_eq!(server.connections.load(Ordering::SeqCst), 1);
    let seen = server.seen.lock().unwrap().clone();
    assert_eq!(seen.len(), 20);
    assert_eq!(seen[0].target, "/mcp?tenant=a");
    assert_eq!(seen[0].host, format!("127.0.0.1:{}", server.port));
    assert_eq!(seen[0].proxy_authorization, None);
    assert_eq!(seen[7].body, Bytes::from_static(b"request 7"));
}

#[tokio::test]
async fn concurrent_requests_open_connections_then_reuse_them() {
    let server = serve(None, None).await;
    let c = client(&format!("http://127.0.0.1:{}/mcp", server.port));
    for _round in 0..5 {
        let all = (0..8).map(|i| {
            let c = c.clone();
            async move { assert_echoed(&c, format!("{i}")).await }
        });
        futures_util::future::join_all(all).await;
    }
    let opened = server.connections.load(Ordering::SeqCst);
    assert!(
        (1..=8).contains(&opened),
        "40 requests, 8 at a time, opened {opened} connections"
    );
}

#[tokio::test]
async fn a_connection_the_server_closed_is_not_reused() {
    let server = serve(None, Some(1)).await;
    let c = client(&format!("http://127.0.0.1:{}/mcp", server.port));
    for i in 0..5 {
        assert_echoed(&c, format!("{i}")).await;
    }
    assert_eq!(server.connections.load(Ordering::SeqCst), 5);
}

#[tokio::test]
async fn a_body_left_unread_does_not_return_its_connection() {
    let server = serve(None, None).await;
    let c = client(&format!("http://127.0.0.1:{}/mcp", server.port));
    let resp = c
        .send(Method::POST, HeaderLines::default(), &vec![b'x'; 1 << 20])
        .await
        .unwrap();
    drop(resp);
    assert_echoed(&c, &b"second"[..]).await;
    assert_eq!(server.connections.load(Ordering::SeqCst), 2);
}

#[tokio::test]
async fn nothing_listening_is_a_connect_error() {
    let port = TcpListener::bind("127.0.0.1:0")
        .await
        .unwrap()
        .local_addr()
        .unwrap()
        .port();
    let c = client(&format!("http://127.0.0.1:{port}/mcp"));
    let err = c
        .send(Method::POST, HeaderLines::default(), b"")
        .await
        .err()
        .unwrap();
    assert!(matches!(err, ClientError::Connect(_)), "{err}");
    assert!(err.to_string().starts_with("connection failed"), "{err}");
}

/// A CA-signed certificate for `localhost` and 127.0.0.1, the acceptor serving it, and a
/// client configuration trusting only that CA.
fn tls_pair() -> (tokio_rustls::TlsAcceptor, Arc<rustls::ClientConfig>) {
    crate::crypto::install_crypto_provider();
    let ca_key = rcgen::KeyPair::generate().unwrap();
    let mut ca_params = rcgen::CertificateParams::new(Vec::<String>::new()).unwrap();
    ca_params.is_ca = rcgen::IsCa::Ca(rcgen::BasicConstraints::Unconstrained);
    let ca = ca_params.self_signed(&ca_key).unwrap();
    let issuer = rcgen::Issuer::new(ca_params, ca_key);
    let key = rcgen::KeyPair::generate().unwrap();
    let params =
        rcgen::CertificateParams::new(vec!["localhost".to_owned(), "127.0.0.1".to_owned()])
            .unwrap();
    let cert = params.signed_by(&key, &issuer).unwrap();
    let server = rustls::ServerConfig::builder()
        .with_no_client_auth()
        .with_single_cert(
            vec![cert.der().clone()],
            rustls::pki_types::PrivateKeyDer::try_from(key.serialize_der()).unwrap(),
        )
        .unwrap();
    let mut roots = rustls::RootCertStore::empty();
    roots.add(ca.der().clone()).unwrap();
    let mut client = rustls::ClientConfig::builder()
        .with_root_certificates(roots)
        .with_no_client_auth();
    client.alpn_protocols = vec![b"http/1.1".to_vec()];
    (
        tokio_rustls::TlsAcceptor::from(Arc::new(server)),
        Arc::new(client),
    )
}

#[tokio::test]
async fn https_upstreams_are_verified_against_the_trust_store() {
    let (acceptor, trusting) = tls_pair();
    let server = serve(Some(acceptor), None).await;
    for host in ["localhost", "127.0.0.1"] {
        let url = url::Url::parse(&format!("https://{host}:{}/mcp", server.port)).unwrap();
        let c = Arc::new(
            OriginClient::build(&url, Duration::from_secs(5), Some(trusting.clone()), None)
                .unwrap(),
        );
        for _ in 0..3 {
            assert_echoed(&c, &b"over tls"[..]).await;
        }
    }
    assert_eq!(server.connections.load(Ordering::SeqCst), 2, "one per host");

    // A client that does not trust the test CA refuses the server.
    let (_, other) = tls_pair();
    let url = url::Url::parse(&format!("https://localhost:{}/mcp", server.port)).unwrap();
    let c = Arc::new(OriginClient::build(&url, Duration::from_secs(5), Some(other), None).unwrap());
    let err = c
        .send(Method::POST, HeaderLines::default(), b"")
        .await
        .err()
        .unwrap();
    assert!(err.to_string().contains("TLS"), "{err}");
}

/// A forward proxy on 127.0.0.1: `CONNECT` opens a tunnel, any other request (absolute-form)
/// is passed to its origin on a fresh connection. Records the request lines it got.
async fn proxy() -> (u16, Arc<Mutex<Vec<String>>>) {
    let listener = TcpListener::bind("127.0.0.1:0").await.unwrap();
    let port = listener.local_addr().unwrap().port();
    let lines = Arc::new(Mutex::new(Vec::new()));
    let l = lines.clone();
    tokio::spawn(async move {
        while let Ok((mut client, _)) = listener.accept().await {
            let lines = l.clone();
            tokio::spawn(async move {
                let mut head = Vec::new();
                let mut byte = [0u8; 1];
                while !head.ends_with(b"\r\n\r\n") {
                    if client.read(&mut byte).await.unwrap_or(0) == 0 {
                        return;
                    }
                    head.push(byte[0]);
                }
                let text = String::from_utf8(head.clone()).unwrap();
                let line = text.lines().next().unwrap().to_owned();
                lines.lock().unwrap().push(text.clone());
                let mut parts = line.split(' ');
                let (method, target) = (parts.next().unwrap(), parts.next().unwrap());
                let authority = if method == "CONNECT" {
                    target.to_owned()
                } else {
                    url::Url::parse(target).unwrap().authority().to_owned()
                };
                let mut origin = TcpStream::connect(authority).await.unwrap();
                if method == "CONNECT" {
                    client
                        .write_all(b"HTTP/1.1 200 Connection established\r\n\r\n")
                        .await
                        .unwrap();
                } else {
                    origin.write_all(&head).await.unwrap();
                }
                let _ = tokio::io::copy_bidirectional(&mut client, &mut origin).await;
            });
        }
    });
    (port, lines)
}

#[tokio::test]
async fn http_through_a_proxy_sends_absolute_form_with_the_proxy_credentials() {
    let server = serve(None, None).await;
    let (proxy_port, lines) = proxy().await;
    let url = url::Url::parse(&format!("http://127.0.0.1:{}/mcp", server.port)).unwrap();
    let env = |name: &str| {
        (name == "HTTP_PROXY").then(|| format!("http://user:p%40ss@127.0.0.1:{proxy_port}"))
    };
    let proxy = proxy_for(&url, &env).unwrap().unwrap();
    let c = Arc::new(OriginClient::build(&url, Duration::from_secs(5), None, Some(proxy)).unwrap());
    assert_echoed(&c, &b"via proxy"[..]).await;
    let head = lines.lock().unwrap()[0].clone();
    assert!(
        head.starts_with(&format!(
            "POST http://127.0.0.1:{}/mcp HTTP/1.1",
            server.port
        )),
        "{head}"
    );
    // user:p@ss
    assert!(
        head.contains("proxy-authorization: Basic dXNlcjpwQHNz"),
        "{head}"
    );
    assert_eq!(
        server.seen.lock().unwrap()[0].target,
        format!("http://127.0.0.1:{}/mcp", server.port)
    );
}

#[tokio::test]
async fn other_urls_on_the_origin_get_the_same_target_form() {
    let server = serve(None, None).await;
    let url = url::Url::parse(&format!("http://127.0.0.1:{}/sse", server.port)).unwrap();
    let endpoint = url.join("/message?sessionId=s1").unwrap();
    let direct = client(url.as_str());
    let target = direct.target_for(&endpoint).unwrap();
    assert_eq!(target, "/message?sessionId=s1");
    let resp = direct
        .send_to(&target, Method::POST, HeaderLines::default(), b"x")
        .await
        .unwrap();
    assert_eq!(read_all(resp).await, &b"x"[..]);
    assert_eq!(
        server.seen.lock().unwrap()[0].target,
        "/message?sessionId=s1"
    );

    let proxy = ProxyConfig {
        host: "127.0.0.1".into(),
        port: 9,
        authorization: None,
    };
    let proxied = OriginClient::build(&url, Duration::from_secs(5), None, Some(proxy)).unwrap();
    assert_eq!(
        proxied.target_for(&endpoint).unwrap(),
        format!("http://127.0.0.1:{}/message?sessionId=s1", server.port).as_str()
    );
}

#[tokio::test]
async fn https_through_a_proxy_tunnels_with_connect() {
    let (acceptor, trusting) = tls_pair();
    let server = serve(Some(acceptor), None).await;
    let (proxy_port, lines) = proxy().await;
    let url = url::Url::parse(&format!("https://localhost:{}/mcp", server.port)).unwrap();
    let env = |name: &str| (name == "https_proxy").then(|| format!("127.0.0.1:{proxy_port}"));
    let proxy = proxy_for(&url, &env).unwrap().unwrap();
    let c = Arc::new(
        OriginClient::build(&url, Duration::from_secs(5), Some(trusting), Some(proxy)).unwrap(),
    );
    for _ in 0..3 {
        assert_echoed(&c, &b"tunnelled"[..]).await;
    }
    let lines = lines.lock().unwrap().clone();
    assert_eq!(lines.len(), 1, "one tunnel, reused");
    assert!(
        lines[0].starts_with(&format!("CONNECT localhost:{} HTTP/1.1\r\n", server.port)),
        "{}",
        lines[0]
    );
    let seen = server.seen.lock().unwrap().clone();
    assert_eq!(seen[0].target, "/mcp", "origin-form inside the tunnel");
    assert_eq!(seen[0].host, format!("localhost:{}", server.port));
}

#[test]
fn the_environment_chooses_the_proxy_and_no_proxy_exempts_hosts() {
    let vars = |pairs: &'static [(&'static str, &'static str)]| {
        move |name: &str| {
            pairs
                .iter()
                .find(|(k, _)| *k == name)
                .map(|(_, v)| (*v).to_owned())
        }
    };
    let https = url::Url::parse("https://mcp.example.com/mcp").unwrap();
    let http = url::Url::parse("http://10.1.2.3:8080/mcp").unwrap();

    let env = vars(&[
        ("HTTPS_PROXY", "http://proxy:3128"),
        ("HTTP_PROXY", "other:80"),
    ]);
    let p = proxy_for(&https, &env).unwrap().unwrap();
    assert_eq!(
        (p.host.as_str(), p.port, p.authorization),
        ("proxy", 3128, None)
    );
    let p = proxy_for(&http, &env).unwrap().unwrap();
    assert_eq!((p.host.as_str(), p.port), ("other", 80));

    let env = vars(&[("ALL_PROXY", "http://all:8888")]);
    assert_eq!(proxy_for(&https, &env).unwrap().unwrap().host, "all");
    assert_eq!(proxy_for(&http, &vars(&[])).unwrap(), None);

    for no_proxy in [
        "*",
        "example.com",
        ".example.com",
        "other.org, mcp.example.com",
    ] {
        let env = move |name: &str| match name {
            "HTTPS_PROXY" => Some("http://proxy:3128".to_owned()),
            "NO_PROXY" => Some(no_proxy.to_owned()),
            _ => None,
        };
        assert_eq!(
            proxy_for(&https, &env).unwrap(),
            None,
            "NO_PROXY={no_proxy}"
        );
    }
    for no_proxy in ["ample.com", "example.org", "10.0.0.0/8"] {
        let env = move |name: &str| match name {
            "HTTPS_PROXY" => Some("http://proxy:3128".to_owned()),
            "no_proxy" => Some(no_proxy.to_owned()),
            _ => None,
        };
        assert!(
            proxy_for(&https, &env).unwrap().is_some(),
            "NO_PROXY={no_proxy}"
        );
    }
    for (no_proxy, exempted) in [
        ("10.0.0.0/8", true),
        ("10.1.2.3", true),
        ("10.1.2.0/24", true),
        ("10.1.3.0/24", false),
        ("192.168.0.0/16", false),
    ] {
        let env = move |name: &str| match name {
            "HTTP_PROXY" => Some("http://proxy:3128".to_owned()),
            "NO_PROXY" => Some(no_proxy.to_owned()),
            _ => None,
        };
        assert_eq!(
            proxy_for(&http, &env).unwrap().is_none(),
            exempted,
            "NO_PROXY={no_proxy}"
        );
    }

    let err = proxy_for(&https, &vars(&[("HTTPS_PROXY", "socks5://proxy:1080")])).unwrap_err();
    assert!(err.contains("HTTPS_PROXY names a socks5:// proxy"), "{err}");
    let p = proxy_for(&https, &vars(&[("HTTPS_PROXY", "http://a%20b:c@proxy")]))
        .unwrap()
        .unwrap();
    let auth = p.authorization.unwrap();
    assert!(auth.is_sensitive());
    assert_eq!(auth, format!("Basic {}", STANDARD.encode("a b:c")).as_str());
}

#[tokio::test]
async fn a_body_is_read_whole_in_one_piece_or_many_and_within_its_bound() {
    use super::super::http::read_body;
    let server = serve(None, None).await;
    let c = client(&format!("http://127.0.0.1:{}/mcp", server.port));
    // One read's worth, and many reads' (the pieces are put together).
    for len in [2, 300, 100_000] {
        let sent: Vec<u8> = (0..len).map(|i| b'a' + (i % 26) as u8).collect();
        let mut resp = c
            .send(Method::POST, HeaderLines::default(), &sent)
            .await
            .unwrap();
        let got = read_body(&mut resp, 1 << 20, "up").await.unwrap();
        assert!(got == sent, "a {len}-byte body comes back whole");
    }
    // Past the bound: refused.
    let mut resp = c
        .send(Method::POST, HeaderLines::default(), &vec![b'x'; 100_000])
        .await
        .unwrap();
    let err = read_body(&mut resp, 50_000, "up").await.unwrap_err();
    assert!(err.to_string().contains("exceeds 50000 bytes"), "{err}");
}
