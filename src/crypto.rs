//! The process's TLS crypto provider (ring): installed once, before anything builds a rustls
//! configuration — the listener's certificates, the upstream HTTP clients, the OTLP exporter.

use std::sync::Arc;

use rustls::crypto::CryptoProvider;

/// Installs the process-wide TLS crypto provider (ring). Idempotent.
pub fn install_crypto_provider() {
    let _ = rustls::crypto::ring::default_provider().install_default();
}

/// The process-wide crypto provider (installed by [`install_crypto_provider`]), else ring.
pub fn provider() -> Arc<CryptoProvider> {
    CryptoProvider::get_default()
        .cloned()
        .unwrap_or_else(|| Arc::new(rustls::crypto::ring::default_provider()))
}
