//! Wiring: builds the `Gateway` from a validated `Config` and serves it on a listener until a
//! shutdown future resolves (the binaries' is `shutdown_signal`), then drains (bounded) and
//! stops every upstream.

use std::future::Future;
use std::io;
use std::sync::Arc;
use std::time::Duration;

use tokio::net::TcpListener;

use crate::config::{Config, TlsConfig};
use crate::gateway::Gateway;
use crate::http;
use crate::listener::{ListenerLimits, ServerTls, fds};

/// How long open connections may take to finish after shutdown begins.
pub use crate::config::DRAIN_DEADLINE;

/// For the binary and the tests, which install it before building anything TLS.
pub use crate::crypto::install_crypto_provider;

/// Resolves on SIGINT or SIGTERM: the shutdown future of the gateway and demo server binaries.
pub async fn shutdown_signal() {
    use tokio::signal::unix::{SignalKind, signal};
    let mut term = match signal(SignalKind::terminate()) {
        Ok(s) => s,
        Err(e) => {
            tracing::error!(error = %e, "cannot listen for SIGTERM");
            let _ = tokio::signal::ctrl_c().await;
            return;
        }
    };
    tokio::select! {
        _ = term.recv() => tracing::info!("SIGTERM received"),
        _ = tokio::signal::ctrl_c() => tracing::info!("SIGINT received"),
    }
}

/// Builds the gateway: connects the session store (checking the Redis keyspace layout),
/// starts shared upstream processes and the bus to other replicas.
pub async fn build(config: &Config) -> Result<Arc<Gateway>, String> {
    install_crypto_provider();
    Gateway::open(config, Box::new(http::Relay)).await
}

/// Serves `gateway` on `listener` (HTTPS when `tls` is set, with the certificate files
/// reloaded when they change) until `shutdown` resolves; then stops accepting, gives open
/// requests [`DRAIN_DEADLINE`] to finish, and shuts every upstream down. A certificate or key
/// that cannot be loaded at startup is an error (naming the file) and nothing is served.
pub async fn serve(
    listener: TcpListener,
    gateway: Arc<Gateway>,
    tls: Option<TlsConfig>,
    shutdown: impl Future<Output = ()> + Send + 'static,
) -> io::Result<()> {
    let limits = match connection_limits(&gateway) {
        Ok(l) => l,
        Err(e) => {
            gateway.shutdown().await;
            return Err(io::Error::new(io::ErrorKind::InvalidInput, e));
        }
    };
    let tls = match tls.as_ref().map(ServerTls::start).transpose() {
        Ok(t) => t,
        Err(e) => {
            gateway.shutdown().await;
            return Err(io::Error::new(io::ErrorKind::InvalidInput, e));
        }
    };
    if let Ok(addr) = listener.local_addr() {
        let scheme = if tls.is_some() { "https" } else { "http" };
        for tenant in gateway.tenants().iter() {
            tracing::info!(tenant = %tenant.name, url = %format!("{scheme}://{addr}{}", tenant.config.path), "MCP endpoint ready");
        }
    }
    if let Some(workers) = &gateway.workers {
        tracing::info!(workers = workers.len(), "connection workers started");
    }
    // Should this future be dropped before its end (an embedder's runtime going away), the
    // workers stop with it, and so do the tasks requests left on them.
    let _halt = HaltWorkers(gateway.clone());
    let reaper = AbortOnDrop(tokio::spawn(reap_idle_sessions(gateway.clone())));
    let mut stopping = gateway.shutdown_signal();
    let signal_gateway = gateway.clone();
    let server = crate::listener::serve(
        listener,
        http::front(gateway.clone()),
        tls.as_ref().map(ServerTls::acceptor),
        limits,
        gateway.workers.as_ref(),
        async move {
            shutdown.await;
            tracing::info!("shutting down: no new connections");
            signal_gateway.begin_shutdown();
        },
    );
    let drain_until = Arc::new(std::sync::Mutex::new(None::<tokio::time::Instant>));
    let deadline = {
        let drain_until = drain_until.clone();
        async move {
            let _ = stopping.wait_for(|s| *s).await;
            let until = tokio::time::Instant::now() + DRAIN_DEADLINE;
            if let Ok(mut d) = drain_until.lock() {
                *d = Some(until);
            }
            tokio::time::sleep_until(until).await;
        }
    };
    let result = tokio::select! {
        r = server => r,
        _ = deadline => {
            tracing::warn!(deadline_s = DRAIN_DEADLINE.as_secs(), "drain deadline passed; closing remaining connections");
            Ok(())
        }
    };
    drop(tls);
    drop(reaper);
    // Streams were closed with a retry hint; requests still running upstream finish (within
    // the deadline) and their responses are recorded, so clients resume them elsewhere.
    let until = drain_until
        .lock()
        .ok()
        .and_then(|d| *d)
        .unwrap_or_else(|| tokio::time::Instant::now() + DRAIN_DEADLINE);
    if !gateway.drain_requests(until).await {
        tracing::warn!("drain deadline passed with upstream requests still running");
    }
    gateway.shutdown().await;
    if let Some(workers) = &gateway.workers {
        workers.stop().await;
    }
    tracing::info!("stopped");
    result
}

/// A task aborted when this is dropped: the session reaper ends with the serving future,
/// however that ends (it holds the gateway, which holds the connection workers).
struct AbortOnDrop(tokio::task::JoinHandle<()>);

impl Drop for AbortOnDrop {
    fn drop(&mut self) {
        self.0.abort();
    }
}

/// Halts the gateway's connection workers when dropped.
struct HaltWorkers(Arc<Gateway>);

impl Drop for HaltWorkers {
    fn drop(&mut self) {
        if let Some(workers) = &self.0.workers {
            workers.halt();
        }
    }
}

/// Serves the admin routes (`/metrics`, `/healthz`, `/readyz`) on `listener`, plain HTTP, until
/// the gateway shuts down.
pub async fn serve_admin(listener: TcpListener, gateway: Arc<Gateway>) -> io::Result<()> {
    if let Ok(addr) = listener.local_addr() {
        tracing::info!(url = %format!("http://{addr}/metrics"), "admin listener ready");
    }
    let mut stopping = gateway.shutdown_signal();
    let limits = ListenerLimits::admin(&gateway.limits.connections);
    crate::listener::serve(
        listener,
        http::admin_router(gateway),
        None,
        limits,
        None,
        async move {
            let _ = stopping.wait_for(|s| *s).await;
        },
    )
    .await
}

/// The MCP listener's limits: the descriptor limit raised, the connection cap configured (if
/// the limit allows it, else an error naming the figures) or derived from it (`fds`).
fn connection_limits(gateway: &Gateway) -> Result<ListenerLimits, String> {
    let configured = &gateway.limits.connections;
    let fd_limit = fds::raise();
    let tenants = gateway.tenants();
    let reserve = fds::reserve(tenants.iter().map(|t| &t.config));
    let max_connections = fds::connection_cap(configured.max_connections, fd_limit.soft, reserve)?;
    tracing::info!(
        max_connections,
        derived = configured.max_connections.is_none(),
        per_client = configured.max_connections_per_client,
        fd_limit = fd_limit.soft,
        fd_reserve = reserve,
        "connection limits"
    );
    Ok(ListenerLimits::mcp(configured, max_connections))
}

async fn reap_idle_sessions(gateway: Arc<Gateway>) {
    let period =
        (gateway.session_ttl / 4).clamp(Duration::from_millis(50), Duration::from_secs(30));
    let mut tick = tokio::time::interval(period);
    loop {
        tick.tick().await;
        gateway.expire_idle().await;
    }
}

#[cfg(test)]
#[path = "app_tests.rs"]
mod tests;
