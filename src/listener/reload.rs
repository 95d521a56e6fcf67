//! Certificate reload without restart: the resolver that hands rustls the current certificate
//! for each new handshake, and the task that polls the PEM files and swaps in a new pair once
//! it loads and validates (an invalid pair is logged and the current one kept).

use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, RwLock};
use std::time::{Duration, SystemTime};

use rustls::crypto::CryptoProvider;
use rustls::server::{ClientHello, ResolvesServerCert};
use rustls::sign::CertifiedKey;

use super::tls::{fingerprint, load_certified_key};

/// The smallest polling period (a zero interval would spin).
const MIN_INTERVAL: Duration = Duration::from_millis(10);

/// Hands every handshake the current certificate; established connections keep theirs.
#[derive(Debug)]
pub struct CertResolver {
    current: RwLock<Arc<CertifiedKey>>,
    reloads: AtomicU64,
    rejected: AtomicU64,
}

impl CertResolver {
    pub fn new(key: Arc<CertifiedKey>) -> CertResolver {
        CertResolver {
            current: RwLock::new(key),
            reloads: AtomicU64::new(0),
            rejected: AtomicU64::new(0),
        }
    }

    /// The certificate new handshakes get.
    pub fn current(&self) -> Arc<CertifiedKey> {
        self.current
            .read()
            .unwrap_or_else(|e| e.into_inner())
            .clone()
    }

    fn replace(&self, key: Arc<CertifiedKey>) {
        *self.current.write().unwrap_or_else(|e| e.into_inner()) = key;
        self.reloads.fetch_add(1, Ordering::Relaxed);
    }

    /// How many new pairs were swapped in.
    pub fn reloads(&self) -> u64 {
        self.reloads.load(Ordering::Relaxed)
    }

    /// How many changed pairs were rejected (invalid, kept the current one).
    pub fn rejected(&self) -> u64 {
        self.rejected.load(Ordering::Relaxed)
    }
}

impl ResolvesServerCert for CertResolver {
    fn resolve(&self, _hello: ClientHello<'_>) -> Option<Arc<CertifiedKey>> {
        Some(self.current())
    }
}

/// The watched certificate and key files.
#[derive(Debug, Clone)]
pub struct Files {
    cert: PathBuf,
    key: PathBuf,
}

/// What a poll compares: per file, modification time, length and inode (a replaced file or
/// a swapped symlink target changes at least one); `None` when the file cannot be examined.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Stamps {
    cert: Option<Stamp>,
    key: Option<Stamp>,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
struct Stamp {
    modified: Option<SystemTime>,
    len: u64,
    inode: u64,
}

impl Files {
    pub fn new(cert: &Path, key: &Path) -> Files {
        Files {
            cert: cert.to_path_buf(),
            key: key.to_path_buf(),
        }
    }

    /// The files' current stamps (follows symlinks).
    pub fn stamps(&self) -> Stamps {
        Stamps {
            cert: stamp(&self.cert),
            key: stamp(&self.key),
        }
    }
}

fn stamp(path: &Path) -> Option<Stamp> {
    use std::os::unix::fs::MetadataExt;
    let meta = std::fs::metadata(path).ok()?;
    Some(Stamp {
        modified: meta.modified().ok(),
        len: meta.len(),
        inode: meta.ino(),
    })
}

/// Every `interval`, re-examines the files; when their stamps changed since the last poll,
/// loads the pair and swaps it into `resolver`, or logs why not and keeps the current one.
/// A pair caught half-written is rejected, and picked up on the poll after the write ends.
pub async fn watch(
    files: Files,
    mut seen: Stamps,
    interval: Duration,
    resolver: Arc<CertResolver>,
    provider: Arc<CryptoProvider>,
) {
    let interval = interval.max(MIN_INTERVAL);
    let mut tick = tokio::time::interval_at(tokio::time::Instant::now() + interval, interval);
    tick.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
    loop {
        tick.tick().await;
        let check_files = files.clone();
        let check_provider = provider.clone();
        let outcome = tokio::task::spawn_blocking(move || {
            let now = check_files.stamps();
            if now == seen {
                return (now, None);
            }
            let loaded = load_certified_key(&check_files.cert, &check_files.key, &check_provider);
            (now, Some(loaded))
        })
        .await;
        let Ok((now, loaded)) = outcome else {
            continue;
        };
        seen = now;
        match loaded {
            None => {}
            Some(Ok(key)) => {
                tracing::info!(
                    cert = %files.cert.display(),
                    fingerprint = %fingerprint(&key),
                    "TLS certificate reloaded"
                );
                resolver.replace(Arc::new(key));
            }
            Some(Err(e)) => {
                resolver.rejected.fetch_add(1, Ordering::Relaxed);
                tracing::error!(
                    error = %e,
                    "TLS certificate files changed but cannot be used; keeping the current certificate"
                );
            }
        }
    }
}
