//! TLS termination with rustls: loading a PEM certificate chain and private key, and the
//! server config (ALPN `h2`, `http/1.1`) whose certificate comes from the reloadable resolver.

use std::path::Path;
use std::sync::Arc;

use rustls::crypto::CryptoProvider;
use rustls::server::ServerConfig;
use rustls::sign::CertifiedKey;
use rustls_pki_types::pem::{self, PemObject};
use rustls_pki_types::{CertificateDer, PrivateKeyDer};
use tokio::task::JoinHandle;
use tokio_rustls::TlsAcceptor;

use super::reload::{self, CertResolver, Files};
use crate::config::TlsConfig;
use crate::crypto::provider;

/// A certificate/key pair that cannot be used; the message names the file and the reason.
#[derive(Debug, thiserror::Error)]
#[error("{0}")]
pub struct CertError(pub String);

/// Loads and validates a PEM certificate chain (leaf first) and the PEM private key
/// (PKCS#8, PKCS#1 or SEC1) that belongs to the leaf.
pub fn load_certified_key(
    cert: &Path,
    key: &Path,
    provider: &CryptoProvider,
) -> Result<CertifiedKey, CertError> {
    let cert_pem = read(cert, "certificate")?;
    let chain = CertificateDer::pem_slice_iter(&cert_pem)
        .collect::<Result<Vec<_>, _>>()
        .map_err(|e| pem_error(cert, "certificate", e))?;
    if chain.is_empty() {
        return Err(CertError(format!(
            "TLS certificate file {}: no certificate found (expected PEM \"CERTIFICATE\" blocks, leaf first)",
            cert.display()
        )));
    }
    let key_pem = read(key, "key")?;
    let key_der = PrivateKeyDer::from_pem_slice(&key_pem).map_err(|e| match e {
        pem::Error::NoItemsFound => CertError(format!(
            "TLS key file {}: no private key found (expected a PEM \"PRIVATE KEY\" (PKCS#8), \"RSA PRIVATE KEY\" (PKCS#1) or \"EC PRIVATE KEY\" (SEC1) block)",
            key.display()
        )),
        e => pem_error(key, "key", e),
    })?;
    let signing_key = provider
        .key_provider
        .load_private_key(key_der)
        .map_err(|e| {
            CertError(format!(
                "TLS key file {}: unusable private key: {e}",
                key.display()
            ))
        })?;
    let certified = CertifiedKey::new(chain, signing_key);
    match certified.keys_match() {
        Ok(()) | Err(rustls::Error::InconsistentKeys(rustls::InconsistentKeys::Unknown)) => {
            Ok(certified)
        }
        Err(rustls::Error::InconsistentKeys(rustls::InconsistentKeys::KeyMismatch)) => {
            Err(CertError(format!(
                "TLS key file {}: the private key does not match the certificate in {}",
                key.display(),
                cert.display()
            )))
        }
        Err(e) => Err(CertError(format!(
            "TLS certificate file {}: invalid certificate: {e}",
            cert.display()
        ))),
    }
}

fn read(path: &Path, what: &str) -> Result<Vec<u8>, CertError> {
    std::fs::read(path).map_err(|e| {
        CertError(format!(
            "cannot read TLS {what} file {}: {e}",
            path.display()
        ))
    })
}

fn pem_error(path: &Path, what: &str, e: pem::Error) -> CertError {
    CertError(format!(
        "TLS {what} file {}: invalid PEM: {e}",
        path.display()
    ))
}

/// A short SHA-256 fingerprint of the leaf certificate, for logs.
pub fn fingerprint(key: &CertifiedKey) -> String {
    let Some(leaf) = key.cert.first() else {
        return String::new();
    };
    let digest = ring::digest::digest(&ring::digest::SHA256, leaf.as_ref());
    digest.as_ref()[..8]
        .iter()
        .map(|b| format!("{b:02x}"))
        .collect()
}

/// The rustls server config: TLS 1.2 and 1.3, no client certificates, ALPN `h2` then
/// `http/1.1`, the certificate from `resolver`.
pub fn server_config(
    provider: Arc<CryptoProvider>,
    resolver: Arc<CertResolver>,
) -> Result<ServerConfig, CertError> {
    let mut config = ServerConfig::builder_with_provider(provider)
        .with_safe_default_protocol_versions()
        .map_err(|e| CertError(format!("TLS setup: {e}")))?
        .with_no_client_auth()
        .with_cert_resolver(resolver);
    config.alpn_protocols = vec![b"h2".to_vec(), b"http/1.1".to_vec()];
    Ok(config)
}

/// TLS for the listener: the acceptor, and the task reloading the certificate files (stopped
/// when this is dropped).
pub struct ServerTls {
    acceptor: TlsAcceptor,
    resolver: Arc<CertResolver>,
    watcher: JoinHandle<()>,
}

impl ServerTls {
    /// Loads the certificate and key (an error names the file and the reason) and starts
    /// watching them. Must run inside the tokio runtime.
    pub fn start(config: &TlsConfig) -> Result<ServerTls, CertError> {
        let provider = provider();
        let files = Files::new(&config.cert, &config.key);
        // Stamped before loading: a change during the load is seen by the first poll.
        let stamps = files.stamps();
        let initial = load_certified_key(&config.cert, &config.key, &provider)?;
        tracing::info!(
            cert = %config.cert.display(),
            fingerprint = %fingerprint(&initial),
            reload_interval_s = config.reload_interval.as_secs_f64(),
            "TLS enabled"
        );
        let resolver = Arc::new(CertResolver::new(Arc::new(initial)));
        let server = server_config(provider.clone(), resolver.clone())?;
        let watcher = tokio::spawn(reload::watch(
            files,
            stamps,
            config.reload_interval,
            resolver.clone(),
            provider,
        ));
        Ok(ServerTls {
            acceptor: TlsAcceptor::from(Arc::new(server)),
            resolver,
            watcher,
        })
    }

    pub fn acceptor(&self) -> TlsAcceptor {
        self.acceptor.clone()
    }

    /// The resolver handing out the current certificate.
    pub fn resolver(&self) -> &Arc<CertResolver> {
        &self.resolver
    }
}

impl Drop for ServerTls {
    fn drop(&mut self) {
        self.watcher.abort();
    }
}
