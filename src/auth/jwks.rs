//! The issuer's signing keys, cached. An unknown key id triggers a refresh, at most once per
//! `MIN_REFRESH` (so forged key ids cannot make the gateway hammer the issuer); keys are also
//! refreshed after `MAX_AGE`. Symmetric keys in a JWKS are ignored.

use std::sync::{Arc, RwLock};
use std::time::{Duration, Instant};

use jsonwebtoken::jwk::{AlgorithmParameters, JwkSet, PublicKeyUse};
use jsonwebtoken::{Algorithm, AlgorithmFamily, DecodingKey};

use super::discovery;
use crate::error::GatewayError;

/// Minimum time between two fetches of the key set.
const MIN_REFRESH: Duration = Duration::from_secs(5);
/// Keys older than this are refreshed on the next request that needs them.
const MAX_AGE: Duration = Duration::from_secs(3600);
/// Bound on each key-set request.
const TIMEOUT: Duration = Duration::from_secs(10);

struct Key {
    kid: Option<String>,
    family: AlgorithmFamily,
    /// The JWK's own `alg`, when it names one.
    alg: Option<Algorithm>,
    key: Arc<DecodingKey>,
}

#[derive(Default)]
struct KeySet {
    keys: Vec<Key>,
    fetched: Option<Instant>,
}

impl KeySet {
    fn select(&self, kid: Option<&str>, alg: Algorithm) -> Vec<Arc<DecodingKey>> {
        self.keys
            .iter()
            .filter(|k| k.family == alg.family() && k.alg.is_none_or(|a| a == alg))
            .filter(|k| kid.is_none() || k.kid.as_deref() == kid)
            .map(|k| k.key.clone())
            .collect()
    }
}

struct Refresh {
    last_attempt: Option<Instant>,
    /// Found by discovery (when no `jwks_url` is configured).
    discovered_url: Option<String>,
}

pub struct JwksCache {
    issuer: String,
    configured_url: Option<String>,
    http: reqwest::Client,
    current: RwLock<Arc<KeySet>>,
    refresh: tokio::sync::Mutex<Refresh>,
}

impl JwksCache {
    pub fn new(issuer: String, jwks_url: Option<String>, http: reqwest::Client) -> JwksCache {
        JwksCache {
            issuer,
            configured_url: jwks_url,
            http,
            current: RwLock::new(Arc::new(KeySet::default())),
            refresh: tokio::sync::Mutex::new(Refresh {
                last_attempt: None,
                discovered_url: None,
            }),
        }
    }

    fn current(&self) -> Arc<KeySet> {
        self.current
            .read()
            .map(|c| c.clone())
            .unwrap_or_else(|_| Arc::new(KeySet::default()))
    }

    /// The keys that may have signed a token with this `kid` and `alg`. Empty means "no such
    /// key" (after a refresh, if one was allowed). Fails only when no keys could ever be had.
    pub async fn keys_for(
        &self,
        kid: Option<&str>,
        alg: Algorithm,
    ) -> Result<Vec<Arc<DecodingKey>>, GatewayError> {
        let set = self.current();
        let found = set.select(kid, alg);
        let fresh = set.fetched.is_some_and(|t| t.elapsed() < MAX_AGE);
        if !found.is_empty() && fresh {
            return Ok(found);
        }
        match self.refresh().await {
            Ok(()) => Ok(self.current().select(kid, alg)),
            Err(e) if set.keys.is_empty() => {
                tracing::error!(issuer = %self.issuer, error = %e, "no signing keys available");
                Err(GatewayError::AuthUnavailable)
            }
            Err(e) => {
                tracing::warn!(issuer = %self.issuer, error = %e, "signing keys not refreshed; using the cached ones");
                Ok(found)
            }
        }
    }

    /// Fetches the key set unless that happened less than `MIN_REFRESH` ago.
    async fn refresh(&self) -> Result<(), String> {
        let mut r = self.refresh.lock().await;
        if r.last_attempt.is_some_and(|t| t.elapsed() < MIN_REFRESH) {
            return Ok(());
        }
        r.last_attempt = Some(Instant::now());
        let url = match (&self.configured_url, &r.discovered_url) {
            (Some(u), _) | (None, Some(u)) => u.clone(),
            (None, None) => {
                let u = discovery::jwks_uri(&self.http, &self.issuer).await?;
                r.discovered_url = Some(u.clone());
                u
            }
        };
        let resp = self
            .http
            .get(&url)
            .timeout(TIMEOUT)
            .send()
            .await
            .map_err(|e| format!("fetching {url}: {e}"))?;
        if !resp.status().is_success() {
            return Err(format!("fetching {url}: HTTP {}", resp.status().as_u16()));
        }
        let set: JwkSet = discovery::read_json(resp).await?;
        let keys = parse_keys(&set);
        tracing::info!(issuer = %self.issuer, keys = keys.len(), "signing keys loaded");
        if let Ok(mut c) = self.current.write() {
            *c = Arc::new(KeySet {
                keys,
                fetched: Some(Instant::now()),
            });
        }
        Ok(())
    }
}

/// The usable asymmetric signature keys of a JWKS.
fn parse_keys(set: &JwkSet) -> Vec<Key> {
    set.keys
        .iter()
        .filter(|jwk| !matches!(jwk.common.public_key_use, Some(PublicKeyUse::Encryption)))
        .filter_map(|jwk| {
            let family = match &jwk.algorithm {
                AlgorithmParameters::RSA(_) => AlgorithmFamily::Rsa,
                AlgorithmParameters::EllipticCurve(_) => AlgorithmFamily::Ec,
                AlgorithmParameters::OctetKeyPair(_) => AlgorithmFamily::Ed,
                // Symmetric or unknown key types are never accepted.
                _ => return None,
            };
            let alg = jwk
                .common
                .key_algorithm
                .and_then(|a| a.to_string().parse::<Algorithm>().ok());
            match DecodingKey::from_jwk(jwk) {
                Ok(key) => Some(Key {
                    kid: jwk.common.key_id.clone(),
                    family,
                    alg,
                    key: Arc::new(key),
                }),
                Err(e) => {
                    tracing::warn!(kid = ?jwk.common.key_id, error = %e, "skipping an unusable key");
                    None
                }
            }
        })
        .collect()
}
