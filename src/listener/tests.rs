//! Certificate loading (every error names the file and the reason) and the reload watcher
//! (a valid new pair is swapped in, an invalid one is rejected and the current one kept).

#![allow(clippy::unwrap_used)]

use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::time::{Duration, Instant};

use rcgen::{BasicConstraints, CertificateParams, DnType, IsCa, Issuer, KeyPair};
use rustls::sign::CertifiedKey;

use super::reload::{self, CertResolver, Files};
use super::tls::{CertError, load_certified_key};
use crate::crypto::provider;

/// A directory under the system temp dir, removed on drop.
pub(crate) struct Dir(pub(crate) PathBuf);

impl Dir {
    pub(crate) fn new(label: &str) -> Dir {
        static N: std::sync::atomic::AtomicU32 = std::sync::atomic::AtomicU32::new(0);
        let n = N.fetch_add(1, std::sync::atomic::Ordering::Relaxed);
        let dir = std::env::temp_dir().join(format!(
            "switchyard-listener-{label}-{}-{n}",
            std::process::id()
        ));
        let _ = std::fs::remove_dir_all(&dir);
        std::fs::create_dir_all(&dir).unwrap();
        Dir(dir)
    }

    pub(crate) fn write(&self, name: &str, contents: impl AsRef<[u8]>) -> PathBuf {
        let path = self.0.join(name);
        std::fs::write(&path, contents).unwrap();
        path
    }
}

impl Drop for Dir {
    fn drop(&mut self) {
        let _ = std::fs::remove_dir_all(&self.0);
    }
}

/// A leaf certificate for localhost issued by a fresh CA: (cert PEM, key PEM, key PKCS#8 DER).
fn leaf(cn: &str) -> (String, String, Vec<u8>) {
    let (cert, key, der, _) = leaf_and_ca(cn);
    (cert, key, der)
}

/// [`leaf`] and the PEM of its CA.
pub(crate) fn leaf_and_ca(cn: &str) -> (String, String, Vec<u8>, String) {
    let ca_key = KeyPair::generate().unwrap();
    let mut ca = CertificateParams::new(Vec::<String>::new()).unwrap();
    ca.is_ca = IsCa::Ca(BasicConstraints::Unconstrained);
    ca.distinguished_name
        .push(DnType::CommonName, format!("{cn} CA"));
    let ca_pem = ca.self_signed(&ca_key).unwrap().pem();
    let issuer = Issuer::new(ca, ca_key);
    let key = KeyPair::generate().unwrap();
    let mut params =
        CertificateParams::new(vec!["localhost".to_string(), "127.0.0.1".into()]).unwrap();
    params.distinguished_name.push(DnType::CommonName, cn);
    let cert = params.signed_by(&key, &issuer).unwrap();
    (cert.pem(), key.serialize_pem(), key.serialize_der(), ca_pem)
}

fn load(cert: &Path, key: &Path) -> Result<CertifiedKey, CertError> {
    crate::crypto::install_crypto_provider();
    load_certified_key(cert, key, &provider())
}

fn err(cert: &Path, key: &Path) -> String {
    match load(cert, key) {
        Ok(_) => panic!("the pair loaded"),
        Err(e) => e.to_string(),
    }
}

/// The SEC1 `ECPrivateKey` inside a PKCS#8 document (the last OCTET STRING of the sequence).
fn sec1_of(pkcs8: &[u8]) -> Vec<u8> {
    fn header(der: &[u8]) -> (u8, usize, usize) {
        let tag = der[0];
        let first = der[1] as usize;
        if first < 0x80 {
            return (tag, 2, first);
        }
        let n = first & 0x7f;
        let len = der[2..2 + n]
            .iter()
            .fold(0usize, |acc, b| (acc << 8) | *b as usize);
        (tag, 2 + n, len)
    }
    let (_, outer_hdr, _) = header(pkcs8);
    let mut rest = &pkcs8[outer_hdr..];
    loop {
        let (tag, hdr, len) = header(rest);
        if tag == 0x04 {
            return rest[hdr..hdr + len].to_vec();
        }
        rest = &rest[hdr + len..];
    }
}

fn pem(label: &str, der: &[u8]) -> String {
    use base64::Engine;
    let b64 = base64::engine::general_purpose::STANDARD.encode(der);
    let mut out = format!("-----BEGIN {label}-----\n");
    for line in b64.as_bytes().chunks(64) {
        out.push_str(std::str::from_utf8(line).unwrap());
        out.push('\n');
    }
    out.push_str(&format!("-----END {label}-----\n"));
    out
}

#[test]
fn valid_pairs_load_pkcs8_and_sec1_and_combined_files() {
    let dir = Dir::new("valid");
    let (cert, key, der) = leaf("one");
    let cert_path = dir.write("cert.pem", &cert);
    let key_path = dir.write("key.pem", &key);
    let loaded = load(&cert_path, &key_path).unwrap();
    assert_eq!(loaded.cert.len(), 1);

    let sec1 = dir.write("sec1.pem", pem("EC PRIVATE KEY", &sec1_of(&der)));
    load(&cert_path, &sec1).unwrap();

    // One file holding both (cert first, key after) works for both paths.
    let both = dir.write("both.pem", format!("{cert}{key}"));
    load(&both, &both).unwrap();
}

#[test]
fn missing_files_name_the_file() {
    let dir = Dir::new("missing");
    let (cert, key, _) = leaf("one");
    let cert_path = dir.write("cert.pem", &cert);
    let key_path = dir.write("key.pem", &key);
    let nowhere = dir.0.join("nowhere.pem");

    let e = err(&nowhere, &key_path);
    assert!(e.starts_with("cannot read TLS certificate file "), "{e}");
    assert!(e.contains("nowhere.pem"), "{e}");

    let e = err(&cert_path, &nowhere);
    assert!(e.starts_with("cannot read TLS key file "), "{e}");
    assert!(e.contains("nowhere.pem"), "{e}");
}

#[test]
fn files_without_the_expected_blocks_say_so() {
    let dir = Dir::new("empty");
    let (cert, key, _) = leaf("one");
    let cert_path = dir.write("cert.pem", &cert);
    let key_path = dir.write("key.pem", &key);
    let empty = dir.write("empty.pem", "");

    // A key where the certificate should be: no certificate.
    let e = err(&key_path, &key_path);
    assert!(e.contains("key.pem: no certificate found"), "{e}");
    let e = err(&empty, &key_path);
    assert!(e.contains("empty.pem: no certificate found"), "{e}");

    // A certificate where the key should be: no key.
    let e = err(&cert_path, &cert_path);
    assert!(e.starts_with("TLS key file "), "{e}");
    assert!(e.contains("cert.pem: no private key found"), "{e}");

    let garbage = dir.write(
        "garbage.pem",
        "-----BEGIN PRIVATE KEY-----\nnot base64 at all!\n-----END PRIVATE KEY-----\n",
    );
    let e = err(&cert_path, &garbage);
    assert!(e.contains("garbage.pem: invalid PEM"), "{e}");

    let unterminated = dir.write("open.pem", "-----BEGIN CERTIFICATE-----\nMIIB\n");
    let e = err(&unterminated, &key_path);
    assert!(e.contains("open.pem: invalid PEM"), "{e}");

    let bad_key = dir.write("badkey.pem", pem("PRIVATE KEY", b"\x30\x03\x02\x01\x00"));
    let e = err(&cert_path, &bad_key);
    assert!(e.contains("badkey.pem: unusable private key"), "{e}");
}

#[test]
fn a_key_of_another_certificate_is_a_mismatch() {
    let dir = Dir::new("mismatch");
    let (cert, _, _) = leaf("one");
    let (_, other_key, _) = leaf("two");
    let cert_path = dir.write("cert.pem", &cert);
    let key_path = dir.write("key.pem", &other_key);
    let e = err(&cert_path, &key_path);
    assert!(
        e.contains("key.pem: the private key does not match the certificate in"),
        "{e}"
    );
    assert!(e.ends_with("cert.pem"), "{e}");
}

async fn until(limit: Duration, check: impl Fn() -> bool) -> bool {
    let start = Instant::now();
    while start.elapsed() < limit {
        if check() {
            return true;
        }
        tokio::time::sleep(Duration::from_millis(10)).await;
    }
    check()
}

#[tokio::test]
async fn the_watcher_swaps_valid_pairs_and_keeps_the_current_one_otherwise() {
    crate::crypto::install_crypto_provider();
    let dir = Dir::new("watch");
    let (cert1, key1, _) = leaf("one");
    let cert_path = dir.write("cert.pem", &cert1);
    let key_path = dir.write("key.pem", &key1);
    let files = Files::new(&cert_path, &key_path);
    let stamps = files.stamps();
    let first = Arc::new(load(&cert_path, &key_path).unwrap());
    let resolver = Arc::new(CertResolver::new(first.clone()));
    let task = tokio::spawn(reload::watch(
        files,
        stamps,
        Duration::from_millis(20),
        resolver.clone(),
        provider(),
    ));
    let limit = Duration::from_secs(5);

    // Unchanged files: nothing happens.
    tokio::time::sleep(Duration::from_millis(100)).await;
    assert_eq!((resolver.reloads(), resolver.rejected()), (0, 0));
    assert!(Arc::ptr_eq(&resolver.current(), &first));

    // A new valid pair is swapped in.
    let (cert2, key2, _) = leaf("two");
    std::fs::write(&key_path, &key2).unwrap();
    std::fs::write(&cert_path, &cert2).unwrap();
    assert!(until(limit, || resolver.current().cert != first.cert).await);
    let second = resolver.current();
    let expected = load(&cert_path, &key_path).unwrap();
    assert_eq!(second.cert, expected.cert);

    // A broken key: rejected, the second pair stays.
    let rejected = resolver.rejected();
    std::fs::write(
        &key_path,
        "-----BEGIN PRIVATE KEY-----\n!!\n-----END PRIVATE KEY-----\n",
    )
    .unwrap();
    assert!(until(limit, || resolver.rejected() > rejected).await);
    tokio::time::sleep(Duration::from_millis(100)).await;
    assert!(Arc::ptr_eq(&resolver.current(), &second));

    // A key of another certificate: rejected too.
    let rejected = resolver.rejected();
    std::fs::write(&key_path, &key1).unwrap();
    assert!(until(limit, || resolver.rejected() > rejected).await);
    assert!(Arc::ptr_eq(&resolver.current(), &second));

    // A deleted file: rejected; its return with a valid pair is picked up.
    let rejected = resolver.rejected();
    std::fs::remove_file(&key_path).unwrap();
    assert!(until(limit, || resolver.rejected() > rejected).await);
    assert!(Arc::ptr_eq(&resolver.current(), &second));
    let reloads = resolver.reloads();
    std::fs::write(&key_path, &key2).unwrap();
    assert!(until(limit, || resolver.reloads() > reloads).await);
    assert_eq!(resolver.current().cert, second.cert);
    task.abort();
}
