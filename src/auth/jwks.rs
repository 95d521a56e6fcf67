//! The issuer's signing keys, cached so that trouble at the identity provider never queues
//! requests nor turns into a wrong answer.
//!
//! - A token whose key is cached is checked against the cache, lock-free, whatever else is
//!   going on. Keys past their lifetime (the key set's `Cache-Control: max-age`, at most
//!   `MAX_AGE`) are still used while a refresh runs in the background (stale-while-revalidate).
//! - A key id that is not cached waits for a refresh. Refreshes are single-flight: one runs at a
//!   time, in a task of its own (a waiter that goes away cancels nothing), and every waiter gets
//!   its outcome. A refresh (discovery and key set together) is bounded by `REFRESH_TIMEOUT`,
//!   each document by `discovery::MAX_DOCUMENT`.
//! - A refresh starts at most once per `MIN_REFRESH`, counted from the end of the last attempt,
//!   so forged key ids cannot make the gateway hammer the issuer. Within that window the last
//!   outcome stands: after a load an unknown key is unknown (401); after a failure the keys
//!   cannot be had (503), never "unknown key", which would make clients drop a good token.
//!
//! Symmetric keys in a JWKS are ignored.

use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex, MutexGuard, PoisonError};
use std::time::{Duration, Instant};

use arc_swap::ArcSwap;
use axum::http::{HeaderMap, header};
use jsonwebtoken::jwk::{AlgorithmParameters, JwkSet, PublicKeyUse};
use jsonwebtoken::{Algorithm, AlgorithmFamily, DecodingKey};
use tokio::sync::watch;

use super::discovery;
use crate::error::GatewayError;

/// Minimum time from the end of one refresh attempt to the start of the next.
const MIN_REFRESH: Duration = Duration::from_secs(5);
/// Longest a key set counts as fresh (a shorter `max-age` from the provider wins).
const MAX_AGE: Duration = Duration::from_secs(3600);
/// Bound on one refresh: discovery (when needed) and the key set.
const REFRESH_TIMEOUT: Duration = Duration::from_secs(10);

struct Key {
    kid: Option<String>,
    family: AlgorithmFamily,
    /// The JWK's own `alg`, when it names one.
    alg: Option<Algorithm>,
    key: DecodingKey,
}

/// One loaded key set. Replaced as a whole, never changed.
pub struct KeySet {
    keys: Vec<Key>,
    /// Until when the set is fresh; `None` for the empty set before the first load.
    fresh_until: Option<Instant>,
    /// A number no other set of this process has (0: the empty set before the first load).
    generation: u64,
}

/// The last `KeySet::generation` handed out.
static GENERATIONS: AtomicU64 = AtomicU64::new(0);

impl KeySet {
    /// Tells this set from every other one loaded, before or after it.
    pub fn generation(&self) -> u64 {
        self.generation
    }

    /// The keys that may have signed a token with this `kid` and `alg`.
    pub fn matching<'s>(
        &'s self,
        kid: Option<&'s str>,
        alg: Algorithm,
    ) -> impl Iterator<Item = &'s DecodingKey> + 's {
        self.keys
            .iter()
            .filter(move |k| k.family == alg.family() && k.alg.is_none_or(|a| a == alg))
            .filter(move |k| kid.is_none() || k.kid.as_deref() == kid)
            .map(|k| &k.key)
    }

    fn stale(&self, now: Instant) -> bool {
        self.fresh_until.is_none_or(|until| now >= until)
    }
}

/// How a refresh attempt ended.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Outcome {
    Loaded,
    Failed,
}

#[derive(Default)]
struct RefreshState {
    /// The refresh under way: its outcome is sent once, to every waiter.
    running: Option<watch::Receiver<Option<Outcome>>>,
    /// When the last attempt ended, and how.
    last: Option<(Instant, Outcome)>,
    /// Found by discovery (when no `jwks_url` is configured); forgotten when it fails.
    discovered_url: Option<String>,
}

impl RefreshState {
    fn may_start(&self, now: Instant) -> bool {
        self.running.is_none()
            && self
                .last
                .is_none_or(|(ended, _)| now.saturating_duration_since(ended) >= MIN_REFRESH)
    }
}

/// The cached signing keys of one issuer.
pub struct JwksCache {
    inner: Arc<Inner>,
}

struct Inner {
    issuer: String,
    configured_url: Option<String>,
    http: reqwest::Client,
    /// The last key set loaded (empty before the first load); read without a lock.
    keys: ArcSwap<KeySet>,
    /// Held for a few instructions at a time, never across an await.
    refresh: Mutex<RefreshState>,
}

impl JwksCache {
    pub fn new(issuer: String, jwks_url: Option<String>, http: reqwest::Client) -> JwksCache {
        JwksCache {
            inner: Arc::new(Inner {
                issuer,
                configured_url: jwks_url,
                http,
                keys: ArcSwap::from_pointee(KeySet {
                    keys: Vec::new(),
                    fresh_until: None,
                    generation: 0,
                }),
                refresh: Mutex::new(RefreshState::default()),
            }),
        }
    }

    /// The generation of the key set in use (0 before the first load), starting a refresh in
    /// the background when it is stale, as [`JwksCache::keys_for`] does: a token remembered
    /// as checked against this set (`verified`) is taken while it is current.
    pub fn current(&self) -> u64 {
        let set = self.inner.keys.load();
        self.inner.revalidate_if_stale(&set);
        set.generation
    }

    /// The key set to check a token with this `kid` and `alg` against: the cached one when it
    /// has a matching key, else the one a refresh produced (which may still have none: the key
    /// is unknown). Fails only when the keys could not be loaded.
    pub async fn keys_for(
        &self,
        kid: Option<&str>,
        alg: Algorithm,
    ) -> Result<Arc<KeySet>, GatewayError> {
        let set = self.inner.keys.load_full();
        if set.matching(kid, alg).next().is_some() {
            self.inner.revalidate_if_stale(&set);
            return Ok(set);
        }
        match self.inner.refreshed().await {
            Outcome::Loaded => Ok(self.inner.keys.load_full()),
            Outcome::Failed => Err(GatewayError::AuthUnavailable),
        }
    }
}

impl Inner {
    fn state(&self) -> MutexGuard<'_, RefreshState> {
        // Nothing panics while the lock is held; if something did, the state is still whole.
        self.refresh.lock().unwrap_or_else(PoisonError::into_inner)
    }

    /// Starts a background refresh when the loaded `set` is stale; it stays in use meanwhile
    /// (stale-while-revalidate). A set never loaded is left alone: its users wait for a load.
    fn revalidate_if_stale(self: &Arc<Self>, set: &KeySet) {
        if set.fresh_until.is_some() && set.stale(Instant::now()) {
            self.revalidate();
        }
    }

    /// Starts a background refresh of a stale set unless one runs or the rate limit says no.
    /// Never waits: when the state is busy, whoever holds it is dealing with it.
    fn revalidate(self: &Arc<Self>) {
        let Ok(mut state) = self.refresh.try_lock() else {
            return;
        };
        if state.may_start(Instant::now()) {
            self.start(&mut state);
        }
    }

    /// The outcome of the refresh under way, or of one started now, or, within `MIN_REFRESH`
    /// of the last attempt, of that attempt.
    async fn refreshed(self: &Arc<Self>) -> Outcome {
        let mut running = {
            let mut state = self.state();
            if let Some(running) = &state.running {
                running.clone()
            } else if let Some((_, outcome)) = state.last
                && !state.may_start(Instant::now())
            {
                return outcome;
            } else {
                self.start(&mut state)
            }
        };
        // The refresh task is bounded; this bound only guards against it vanishing.
        let outcome = tokio::time::timeout(
            REFRESH_TIMEOUT + Duration::from_secs(1),
            running.wait_for(Option::is_some),
        )
        .await;
        match outcome {
            Ok(Ok(outcome)) => outcome.unwrap_or(Outcome::Failed),
            _ => Outcome::Failed,
        }
    }

    /// Starts a refresh task; `state` must show none running.
    fn start(self: &Arc<Self>, state: &mut RefreshState) -> watch::Receiver<Option<Outcome>> {
        let (done, running) = watch::channel(None);
        state.running = Some(running.clone());
        let discovered = state.discovered_url.clone();
        let inner = self.clone();
        tokio::spawn(async move {
            let outcome = inner.attempt(discovered).await;
            {
                let mut state = inner.state();
                state.running = None;
                state.last = Some((Instant::now(), outcome));
            }
            let _ = done.send(Some(outcome));
        });
        running
    }

    async fn attempt(&self, discovered: Option<String>) -> Outcome {
        let loaded = tokio::time::timeout(REFRESH_TIMEOUT, self.load(discovered))
            .await
            .unwrap_or_else(|_| Err(format!("no answer within {}s", REFRESH_TIMEOUT.as_secs())));
        match loaded {
            Ok(keys) => {
                tracing::info!(issuer = %self.issuer, keys, "signing keys loaded");
                Outcome::Loaded
            }
            Err(e) => {
                self.state().discovered_url = None;
                if self.keys.load().keys.is_empty() {
                    tracing::error!(issuer = %self.issuer, error = %e, "no signing keys available");
                } else {
                    tracing::warn!(issuer = %self.issuer, error = %e, "signing keys not refreshed; the cached ones stay in use for known key ids");
                }
                Outcome::Failed
            }
        }
    }

    /// Fetches the key set (finding it first if need be) and installs it; the number of
    /// usable keys.
    async fn load(&self, discovered: Option<String>) -> Result<usize, String> {
        let url = match (&self.configured_url, discovered) {
            (Some(url), _) => url.clone(),
            (None, Some(url)) => url,
            (None, None) => {
                let url = discovery::jwks_uri(&self.http, &self.issuer).await?;
                self.state().discovered_url = Some(url.clone());
                url
            }
        };
        let (headers, body) = discovery::get(&self.http, &url)
            .await
            .map_err(|e| format!("fetching {url}: {e}"))?;
        let set: JwkSet = serde_json::from_slice(&body)
            .map_err(|e| format!("fetching {url}: invalid JSON: {e}"))?;
        let keys = parse_keys(&set);
        let count = keys.len();
        let lifetime = max_age(&headers).map_or(MAX_AGE, |age| age.min(MAX_AGE));
        self.keys.store(Arc::new(KeySet {
            keys,
            fresh_until: Some(Instant::now() + lifetime),
            generation: GENERATIONS.fetch_add(1, Ordering::Relaxed) + 1,
        }));
        Ok(count)
    }
}

/// How long the provider says its answer may be cached: `max-age`, or zero for `no-cache` /
/// `no-store`; `None` when it does not say.
fn max_age(headers: &HeaderMap) -> Option<Duration> {
    let directives = headers
        .get_all(header::CACHE_CONTROL)
        .iter()
        .filter_map(|v| v.to_str().ok())
        .flat_map(|v| v.split(','))
        .map(str::trim);
    let mut age = None;
    for directive in directives {
        let (name, value) = directive.split_once('=').unwrap_or((directive, ""));
        if name.eq_ignore_ascii_case("no-cache") || name.eq_ignore_ascii_case("no-store") {
            return Some(Duration::ZERO);
        }
        if name.eq_ignore_ascii_case("max-age") {
            age = value
                .trim_matches('"')
                .parse()
                .ok()
                .map(Duration::from_secs);
        }
    }
    age
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
                    key,
                }),
                Err(e) => {
                    tracing::warn!(kid = ?jwk.common.key_id, error = %e, "skipping an unusable key");
                    None
                }
            }
        })
        .collect()
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used)]
    use super::*;

    fn headers(values: &[&'static str]) -> HeaderMap {
        let mut h = HeaderMap::new();
        for v in values {
            h.append(header::CACHE_CONTROL, header::HeaderValue::from_static(v));
        }
        h
    }

    #[test]
    fn cache_lifetime_from_cache_control() {
        assert_eq!(max_age(&HeaderMap::new()), None);
        assert_eq!(
            max_age(&headers(&["public, max-age=120"])),
            Some(Duration::from_secs(120))
        );
        assert_eq!(
            max_age(&headers(&["Max-Age=\"7\""])),
            Some(Duration::from_secs(7))
        );
        assert_eq!(
            max_age(&headers(&["max-age=60", "no-cache"])),
            Some(Duration::ZERO)
        );
        assert_eq!(max_age(&headers(&["no-store"])), Some(Duration::ZERO));
        assert_eq!(max_age(&headers(&["max-age=soon"])), None);
    }

    #[test]
    fn the_rate_limit_counts_from_the_end_of_the_last_attempt() {
        let now = Instant::now();
        let mut state = RefreshState::default();
        assert!(state.may_start(now));
        state.last = Some((now, Outcome::Failed));
        assert!(!state.may_start(now + MIN_REFRESH - Duration::from_millis(1)));
        assert!(state.may_start(now + MIN_REFRESH));
        state.running = Some(watch::channel(None).1);
        assert!(!state.may_start(now + MIN_REFRESH * 10));
    }
}
