//! The accept loop on real sockets: `ConnInfo` on every request (plain and TLS, HTTP/1.1 and
//! HTTP/2), bad handshakes not stopping the loop, graceful shutdown letting a request in
//! progress finish, connections stuck in the TLS handshake not holding shutdown up, and an
//! answer given before the request body was read reaching a client still sending it (plain
//! and TLS: the lingering close).

#![allow(clippy::unwrap_used)]

use std::net::SocketAddr;
use std::time::{Duration, Instant};

use axum::Router;
use axum::extract::Extension;
use axum::http::StatusCode;
use axum::http::Version;
use axum::routing::{get, post};
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::{TcpListener, TcpStream};
use tokio::sync::oneshot;
use tokio::task::JoinHandle;

use super::tests::{Dir, leaf_and_ca};
use super::{ConnInfo, ListenerLimits, ServerTls, serve};
use crate::config::{ConnectionLimits, TlsConfig};

fn router() -> Router {
    Router::new()
        .route(
            "/info",
            get(
                |Extension(info): Extension<ConnInfo>, version: Version| async move {
                    format!("{} {} {version:?}", info.tls, info.remote.ip())
                },
            ),
        )
        // Answers without reading the body (as a 413 on an announced length does).
        .route(
            "/refuse",
            post(|| async { (StatusCode::PAYLOAD_TOO_LARGE, "too large") }),
        )
        .route(
            "/slow",
            get(|| async {
                tokio::time::sleep(Duration::from_millis(300)).await;
                "slow done"
            }),
        )
}

/// The default limits with `cap`, and no drain grace: these tests stop with their clients'
/// connections open (the grace is tested with the whole gateway, `tests/it`).
fn limits(cap: usize) -> ListenerLimits {
    ListenerLimits {
        drain_grace: Duration::ZERO,
        ..ListenerLimits::mcp(&ConnectionLimits::default(), cap)
    }
}

struct Server {
    addr: SocketAddr,
    stop: oneshot::Sender<()>,
    task: JoinHandle<std::io::Result<()>>,
    _tls: Option<ServerTls>,
    _dir: Option<Dir>,
    ca: Option<String>,
}

impl Server {
    async fn start(tls: bool) -> Server {
        Server::start_with(tls, limits(1000)).await
    }

    async fn start_with(tls: bool, limits: ListenerLimits) -> Server {
        crate::crypto::install_crypto_provider();
        let (server_tls, dir, ca) = if tls {
            let dir = Dir::new("serve");
            let (cert, key, _, ca) = leaf_and_ca("serve");
            let config = TlsConfig {
                cert: dir.write("cert.pem", cert),
                key: dir.write("key.pem", key),
                reload_interval: Duration::from_secs(1),
            };
            (
                Some(ServerTls::start(&config).unwrap()),
                Some(dir),
                Some(ca),
            )
        } else {
            (None, None, None)
        };
        let listener = TcpListener::bind("127.0.0.1:0").await.unwrap();
        let addr = listener.local_addr().unwrap();
        let (stop, rx) = oneshot::channel::<()>();
        let task = tokio::spawn(serve(
            listener,
            router(),
            server_tls.as_ref().map(ServerTls::acceptor),
            limits,
            None,
            async move {
                let _ = rx.await;
            },
        ));
        Server {
            addr,
            stop,
            task,
            _tls: server_tls,
            _dir: dir,
            ca,
        }
    }

    fn url(&self, path: &str) -> String {
        let scheme = if self.ca.is_some() { "https" } else { "http" };
        format!("{scheme}://{}{path}", self.addr)
    }

    fn client(&self, http1_only: bool, prior_knowledge: bool) -> reqwest::Client {
        let mut builder = reqwest::Client::builder().timeout(Duration::from_secs(10));
        if let Some(ca) = &self.ca {
            builder =
                builder.tls_certs_only([reqwest::Certificate::from_pem(ca.as_bytes()).unwrap()]);
        }
        if http1_only {
            builder = builder.http1_only();
        }
        if prior_knowledge {
            builder = builder.http2_prior_knowledge();
        }
        builder.build().unwrap()
    }

    async fn get(&self, client: &reqwest::Client, path: &str) -> String {
        let resp = client.get(self.url(path)).send().await.unwrap();
        assert_eq!(resp.status(), 200);
        resp.text().await.unwrap()
    }

    /// Triggers shutdown and returns how long `serve` took to return.
    async fn stop(self) -> Duration {
        let start = Instant::now();
        let _ = self.stop.send(());
        tokio::time::timeout(Duration::from_secs(5), self.task)
            .await
            .expect("serve returns after shutdown")
            .unwrap()
            .unwrap();
        start.elapsed()
    }
}

#[tokio::test]
async fn plain_connections_carry_conn_info_over_http1_and_http2() {
    let server = Server::start(false).await;
    let h1 = server.get(&server.client(true, false), "/info").await;
    assert_eq!(h1, "false 127.0.0.1 HTTP/1.1");
    let h2 = server.get(&server.client(false, true), "/info").await;
    assert_eq!(h2, "false 127.0.0.1 HTTP/2.0");
    server.stop().await;
}

#[tokio::test]
async fn tls_connections_carry_conn_info_and_bad_handshakes_are_survived() {
    let server = Server::start(true).await;
    // Garbage and an abandoned handshake first: the loop carries on.
    let mut garbage = TcpStream::connect(server.addr).await.unwrap();
    garbage.write_all(b"GET / HTTP/1.1\r\n\r\n").await.unwrap();
    drop(TcpStream::connect(server.addr).await.unwrap());

    let h1 = server.get(&server.client(true, false), "/info").await;
    assert_eq!(h1, "true 127.0.0.1 HTTP/1.1");
    let h2 = server.get(&server.client(false, false), "/info").await;
    assert_eq!(h2, "true 127.0.0.1 HTTP/2.0");
    server.stop().await;
}

#[tokio::test]
async fn shutdown_lets_requests_in_progress_finish_then_refuses_connections() {
    for tls in [false, true] {
        for http1_only in [true, false] {
            let server = Server::start(tls).await;
            let addr = server.addr;
            let client = server.client(http1_only, !tls && !http1_only);
            let url = server.url("/slow");
            let slow = tokio::spawn(async move {
                let resp = client.get(url).send().await.unwrap();
                resp.text().await.unwrap()
            });
            tokio::time::sleep(Duration::from_millis(100)).await;
            let took = server.stop().await;
            assert_eq!(
                slow.await.unwrap(),
                "slow done",
                "tls={tls} h1={http1_only}"
            );
            assert!(took >= Duration::from_millis(100), "{took:?}");
            assert!(TcpStream::connect(addr).await.is_err());
        }
    }
}

#[tokio::test]
async fn a_connection_stuck_in_the_handshake_does_not_hold_shutdown_up() {
    let server = Server::start(true).await;
    let _idle = TcpStream::connect(server.addr).await.unwrap();
    tokio::time::sleep(Duration::from_millis(50)).await;
    let took = server.stop().await;
    assert!(took < Duration::from_secs(2), "{took:?}");
}

#[tokio::test]
async fn a_tls_connection_over_the_cap_is_closed_without_an_answer() {
    let limits = ListenerLimits {
        max_connections_per_client: 1,
        ..limits(10)
    };
    let server = Server::start_with(true, limits).await;
    let client = server.client(true, false);
    assert_eq!(
        server.get(&client, "/info").await,
        "true 127.0.0.1 HTTP/1.1"
    );
    // The client's pooled connection holds the one slot: another connection is closed before
    // any handshake byte is answered.
    let mut second = TcpStream::connect(server.addr).await.unwrap();
    let _ = second.write_all(b"\x16\x03\x01\x00\x05hello").await;
    let mut buf = [0u8; 64];
    let read = tokio::time::timeout(Duration::from_secs(5), second.read(&mut buf))
        .await
        .expect("closed at once");
    assert!(matches!(read, Ok(0) | Err(_)), "{read:?}");
    // The served client carries on.
    assert_eq!(
        server.get(&client, "/info").await,
        "true 127.0.0.1 HTTP/1.1"
    );
    server.stop().await;
}

/// Answers every request with the same body, HEAD too (as a careless handler would).
#[derive(Clone)]
struct Always;

impl super::Service for Always {
    fn call(
        &self,
        _req: axum::http::Request<axum::body::Body>,
        _conn: ConnInfo,
    ) -> impl Future<Output = axum::http::Response<axum::body::Body>> + Send + use<> {
        std::future::ready(axum::http::Response::new(axum::body::Body::from(
            "ten bytes!",
        )))
    }
}

#[tokio::test]
async fn answers_to_head_requests_have_no_body_over_http1_and_http2() {
    crate::crypto::install_crypto_provider();
    let listener = TcpListener::bind("127.0.0.1:0").await.unwrap();
    let addr = listener.local_addr().unwrap();
    let (stop, rx) = oneshot::channel::<()>();
    let limits = limits(1000);
    let task = tokio::spawn(serve(listener, Always, None, limits, None, async move {
        let _ = rx.await;
    }));
    for (http2, version) in [(false, Version::HTTP_11), (true, Version::HTTP_2)] {
        let builder = reqwest::Client::builder().timeout(Duration::from_secs(10));
        let client = match http2 {
            true => builder.http2_prior_knowledge(),
            false => builder.http1_only(),
        }
        .build()
        .unwrap();
        let url = format!("http://{addr}/anything");
        let head = client.head(&url).send().await.unwrap();
        assert_eq!(head.status(), 200);
        assert_eq!(head.version(), version);
        assert_eq!(head.headers()["content-length"], "10", "{version:?}");
        assert!(head.bytes().await.unwrap().is_empty(), "{version:?}");
        let get = client.get(&url).send().await.unwrap();
        assert_eq!(get.text().await.unwrap(), "ten bytes!");
    }
    let _ = stop.send(());
    task.await.unwrap().unwrap();
}

/// A client connection, over TLS (trusting `ca`) or not.
trait Io: tokio::io::AsyncRead + tokio::io::AsyncWrite + Unpin + Send {}
impl<T: tokio::io::AsyncRead + tokio::io::AsyncWrite + Unpin + Send> Io for T {}

async fn connect(addr: SocketAddr, ca: Option<&str>) -> Box<dyn Io> {
    use rustls_pki_types::pem::PemObject;
    let tcp = TcpStream::connect(addr).await.unwrap();
    let Some(ca) = ca else {
        return Box::new(tcp);
    };
    let mut roots = rustls::RootCertStore::empty();
    for cert in rustls_pki_types::CertificateDer::pem_slice_iter(ca.as_bytes()) {
        roots.add(cert.unwrap()).unwrap();
    }
    let config = rustls::ClientConfig::builder()
        .with_root_certificates(roots)
        .with_no_client_auth();
    let connector = tokio_rustls::TlsConnector::from(std::sync::Arc::new(config));
    let name = rustls_pki_types::ServerName::try_from("localhost").unwrap();
    Box::new(connector.connect(name, tcp).await.unwrap())
}

#[tokio::test]
async fn an_answer_before_the_body_reaches_a_client_still_sending_it() {
    for tls in [false, true] {
        let server = Server::start(tls).await;
        let mut io = connect(server.addr, server.ca.as_deref()).await;
        io.write_all(
            b"POST /refuse HTTP/1.1\r\nhost: localhost\r\ncontent-length: 1000000\r\n\r\n",
        )
        .await
        .unwrap();
        io.flush().await.unwrap();
        // The answer is on its way and the server is done with the connection before the
        // body starts: closing it at once would reset what follows.
        tokio::time::sleep(Duration::from_millis(300)).await;
        let piece = vec![b'x'; 50_000];
        for i in 0..20 {
            io.write_all(&piece)
                .await
                .unwrap_or_else(|e| panic!("tls={tls}: piece {i} of the body: {e}"));
            io.flush().await.unwrap();
        }
        let mut answer = Vec::new();
        let read = tokio::time::timeout(Duration::from_secs(5), io.read_to_end(&mut answer)).await;
        assert!(matches!(read, Ok(Ok(_))), "tls={tls}: {read:?}");
        let answer = String::from_utf8_lossy(&answer);
        assert!(
            answer.starts_with("HTTP/1.1 413 ") && answer.ends_with("too large"),
            "tls={tls}: {answer}"
        );
        server.stop().await;
    }
}
