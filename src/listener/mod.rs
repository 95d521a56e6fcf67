//! The accept loop: plain HTTP or TLS (`tls.rs`, certificates reloaded by `reload.rs`) in
//! front of the axum router, HTTP/1.1 and HTTP/2 per connection, graceful shutdown.
//!
//! Every request carries a [`ConnInfo`] extension (and axum's `ConnectInfo<SocketAddr>`), so
//! handlers know whether it came over TLS and from where.

pub mod reload;
pub mod tls;

#[cfg(test)]
mod serve_tests;
#[cfg(test)]
mod tests;

use std::future::Future;
use std::io;
use std::net::SocketAddr;
use std::sync::Arc;
use std::time::Duration;

use axum::Router;
use axum::body::Body;
use axum::extract::ConnectInfo;
use axum::http::Request;
use hyper::body::Incoming;
use hyper_util::rt::{TokioExecutor, TokioIo};
use hyper_util::server::conn::auto::Builder;
use hyper_util::server::graceful::{GracefulShutdown, Watcher};
use tokio::io::{AsyncRead, AsyncWrite};
use tokio::net::{TcpListener, TcpStream};
use tokio::sync::watch;
use tokio::task::JoinSet;
use tokio_rustls::TlsAcceptor;

pub use tls::{CertError, ServerTls};

/// How long a client may take to complete the TLS handshake after connecting.
pub const HANDSHAKE_TIMEOUT: Duration = Duration::from_secs(10);

/// The connection a request arrived on; an extension of every request.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct ConnInfo {
    /// The connection is TLS (the listener terminates it).
    pub tls: bool,
    /// The peer's address.
    pub remote: SocketAddr,
}

/// The HTTP builders per negotiated protocol (ALPN), shared by every connection.
struct Builders {
    /// No ALPN (plain TCP, or a TLS client that offered none): detected from the preface.
    auto: Builder<TokioExecutor>,
    http1: Builder<TokioExecutor>,
    http2: Builder<TokioExecutor>,
}

impl Builders {
    fn new() -> Builders {
        let auto = Builder::new(TokioExecutor::new());
        Builders {
            http1: auto.clone().http1_only(),
            http2: auto.clone().http2_only(),
            auto,
        }
    }

    fn for_alpn(&self, alpn: Option<&[u8]>) -> &Builder<TokioExecutor> {
        match alpn {
            Some(b"h2") => &self.http2,
            Some(b"http/1.1") => &self.http1,
            _ => &self.auto,
        }
    }
}

/// Accepts connections on `listener` and serves `router` on each (over TLS when `tls` is set)
/// until `shutdown` resolves; then stops accepting, asks open connections to finish (HTTP/1.1:
/// after the request in progress; HTTP/2: GOAWAY) and returns once they all have. Dropping the
/// returned future closes every remaining connection.
///
/// Accept errors, handshake failures and connection errors never end the loop.
pub async fn serve(
    listener: TcpListener,
    router: Router,
    tls: Option<TlsAcceptor>,
    shutdown: impl Future<Output = ()>,
) -> io::Result<()> {
    let builders = Arc::new(Builders::new());
    let graceful = GracefulShutdown::new();
    // Dropped when shutdown begins: connections still in the TLS handshake give up.
    let (stop_tx, stop_rx) = watch::channel(());
    // Owns every connection task: dropping it (drain deadline) aborts them.
    let mut connections = JoinSet::new();
    let mut shutdown = std::pin::pin!(shutdown);
    loop {
        tokio::select! {
            accepted = listener.accept() => match accepted {
                Ok((tcp, remote)) => {
                    if let Err(e) = tcp.set_nodelay(true) {
                        tracing::debug!(%remote, error = %e, "cannot set TCP_NODELAY");
                    }
                    let conn = Connection {
                        router: router.clone(),
                        builders: builders.clone(),
                        watcher: graceful.watcher(),
                        stop: stop_rx.clone(),
                        remote,
                    };
                    connections.spawn(conn.run(tcp, tls.clone()));
                }
                Err(e) => accept_error(e).await,
            },
            Some(done) = connections.join_next(), if !connections.is_empty() => {
                if let Err(e) = done {
                    tracing::error!(error = %e, "connection task failed");
                }
            }
            () = &mut shutdown => break,
        }
    }
    drop(listener);
    drop(stop_tx);
    tracing::debug!(
        open = connections.len(),
        "listener closed; draining connections"
    );
    graceful.shutdown().await;
    while connections.join_next().await.is_some() {}
    Ok(())
}

/// As hyper 0.14 and axum do: connection-level errors are the peer's business; anything else
/// (e.g. out of file descriptors) is logged and the loop pauses a second.
async fn accept_error(e: io::Error) {
    if matches!(
        e.kind(),
        io::ErrorKind::ConnectionRefused
            | io::ErrorKind::ConnectionAborted
            | io::ErrorKind::ConnectionReset
    ) {
        tracing::debug!(error = %e, "accept failed");
        return;
    }
    tracing::error!(error = %e, "accept failed; pausing 1s");
    tokio::time::sleep(Duration::from_secs(1)).await;
}

/// One accepted connection, before its protocol is known.
struct Connection {
    router: Router,
    builders: Arc<Builders>,
    watcher: Watcher,
    stop: watch::Receiver<()>,
    remote: SocketAddr,
}

impl Connection {
    async fn run(self, tcp: TcpStream, tls: Option<TlsAcceptor>) {
        let remote = self.remote;
        let Some(acceptor) = tls else {
            self.serve(tcp, None, false).await;
            return;
        };
        let mut stop = self.stop.clone();
        let handshake = tokio::time::timeout(HANDSHAKE_TIMEOUT, acceptor.accept(tcp));
        let stream = tokio::select! {
            r = handshake => match r {
                Ok(Ok(stream)) => stream,
                Ok(Err(e)) => {
                    tracing::debug!(%remote, error = %e, "TLS handshake failed");
                    return;
                }
                Err(_) => {
                    tracing::debug!(%remote, timeout_s = HANDSHAKE_TIMEOUT.as_secs(), "TLS handshake timed out");
                    return;
                }
            },
            // Only ever Err: the sender is dropped when shutdown begins.
            _ = stop.changed() => return,
        };
        let alpn = stream.get_ref().1.alpn_protocol().map(<[u8]>::to_vec);
        self.serve(stream, alpn.as_deref(), true).await;
    }

    async fn serve<I>(self, io: I, alpn: Option<&[u8]>, tls: bool)
    where
        I: AsyncRead + AsyncWrite + Unpin + Send + 'static,
    {
        let info = ConnInfo {
            tls,
            remote: self.remote,
        };
        let router = self.router;
        let service = hyper::service::service_fn(move |mut req: Request<Incoming>| {
            req.extensions_mut().insert(info);
            req.extensions_mut().insert(ConnectInfo(info.remote));
            // Router is always ready (its `poll_ready` returns Ready): call it directly.
            tower_service::Service::call(&mut router.clone(), req.map(Body::new))
        });
        let builder = self.builders.for_alpn(alpn);
        let conn = builder.serve_connection_with_upgrades(TokioIo::new(io), service);
        if let Err(e) = self.watcher.watch(conn).await {
            tracing::debug!(remote = %info.remote, tls, error = %e, "connection ended with an error");
        }
    }
}
