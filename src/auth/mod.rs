//! The OAuth 2.1 resource server of a tenant: every request's bearer token is validated (a
//! JWT signed by the issuer's keys, for this tenant's audience, unexpired, with the required
//! scopes) and turned into a `Principal` whose user key binds sessions and store records.

mod challenge;
mod discovery;
mod jose;
mod jwks;
mod verified;

use std::collections::HashSet;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, LazyLock};

use axum::http::{HeaderMap, Uri, header};
use jsonwebtoken::{Algorithm, Validation};
use serde::Deserialize;
use serde_json::{Map, Value};

pub use challenge::{METADATA_PREFIX, ResourceIdentity, metadata_document};
pub use jwks::JwksCache;

use crate::config::{AuthConfig, JwtAlgorithm};
use crate::error::GatewayError;
use jose::ProtectedHeader;

/// The user of requests on tenants without authentication.
pub const ANONYMOUS: &str = "anonymous";

/// Who is calling, as established by a validated token.
#[derive(Debug, Clone)]
pub struct Principal {
    /// A stable, opaque key for the user: a hash of issuer and subject. Sessions and store
    /// keys carry it; it reveals nothing about the user.
    pub user: Arc<str>,
    /// What the token grants; `None`: nothing (anonymous). Shared, not copied, by every
    /// request that presents the same remembered token (`verified`).
    grants: Option<Arc<Grants>>,
    /// Whose budget the tenant's per-user limits charge: the user key when a token names the
    /// user, else a key of the client's address (`http::client_addr`), so anonymous clients do
    /// not share one budget (their sessions are still bound to `user`).
    pub budget: Arc<str>,
}

/// The scopes and claims of a validated token.
#[derive(Debug, Default)]
pub struct Grants {
    /// Granted scopes (`scope` claim, space separated, or `scp` array).
    pub scopes: HashSet<String>,
    /// Every claim of the token, for claim-based tool policies.
    pub claims: Map<String, Value>,
}

static NO_GRANTS: LazyLock<Grants> = LazyLock::new(Grants::default);

impl Principal {
    /// The principal of tenants without authentication (one budget for all: see
    /// [`Principal::charged_to`]).
    pub fn anonymous() -> Principal {
        thread_local! {
            // One per thread, so a request takes a reference instead of an allocation, and
            // threads do not share (and bounce) one count.
            static USER: Arc<str> = ANONYMOUS.into();
        }
        let user = USER
            .try_with(Arc::clone)
            .unwrap_or_else(|_| ANONYMOUS.into());
        Principal {
            budget: user.clone(),
            user,
            grants: None,
        }
    }

    /// The principal of a token's user, with what the token grants.
    pub fn granted(user: Arc<str>, grants: Arc<Grants>) -> Principal {
        Principal {
            budget: user.clone(),
            user,
            grants: Some(grants),
        }
    }

    fn grants(&self) -> &Grants {
        self.grants.as_deref().unwrap_or(&NO_GRANTS)
    }

    /// Granted scopes.
    pub fn scopes(&self) -> &HashSet<String> {
        &self.grants().scopes
    }

    /// Every claim of the token.
    pub fn claims(&self) -> &Map<String, Value> {
        &self.grants().claims
    }

    /// This principal, with its per-user limits charged to `budget`.
    pub fn charged_to(mut self, budget: Arc<str>) -> Principal {
        self.budget = budget;
        self
    }

    /// Whether claim `name` equals `value` (or is an array containing it).
    pub fn has_claim(&self, name: &str, value: &str) -> bool {
        match self.claims().get(name) {
            Some(Value::String(s)) => s == value,
            Some(Value::Array(items)) => items.iter().any(|i| i.as_str() == Some(value)),
            Some(Value::Bool(b)) => value == if *b { "true" } else { "false" },
            Some(Value::Number(n)) => n.to_string() == value,
            _ => false,
        }
    }
}

/// Validates tokens for one tenant.
pub struct Authenticator {
    config: AuthConfig,
    keys: JwksCache,
    algorithms: Vec<Algorithm>,
    /// Tells this authenticator's remembered tokens (`verified`) from another's, a reloaded
    /// tenant's included.
    id: u64,
}

/// The last `Authenticator::id` handed out.
static AUTHENTICATORS: AtomicU64 = AtomicU64::new(0);

#[derive(Deserialize)]
struct StandardClaims {
    #[serde(default)]
    sub: Option<String>,
    #[serde(default)]
    iss: Option<String>,
    #[serde(default)]
    scope: Option<String>,
    #[serde(default)]
    scp: Option<Value>,
}

impl Authenticator {
    pub fn new(config: &AuthConfig, http: reqwest::Client) -> Authenticator {
        Authenticator {
            keys: JwksCache::new(config.issuer.clone(), config.jwks_url.clone(), http),
            algorithms: config.algorithms.iter().map(|a| algorithm(*a)).collect(),
            config: config.clone(),
            id: AUTHENTICATORS.fetch_add(1, Ordering::Relaxed) + 1,
        }
    }

    pub fn config(&self) -> &AuthConfig {
        &self.config
    }

    /// Validates the request's credentials. `resource` is the canonical URI of the endpoint
    /// (the default audience and the challenge's metadata location).
    pub async fn authenticate(
        &self,
        headers: &HeaderMap,
        uri: &Uri,
        resource: &ResourceIdentity,
    ) -> Result<Principal, GatewayError> {
        if uri.query().is_some_and(|q| {
            q.split('&')
                .any(|kv| kv.split('=').next() == Some("access_token"))
        }) {
            return Err(GatewayError::TokenInQuery {
                www_authenticate: resource.challenge_invalid_request(
                    "access tokens are not accepted in the URI query; send them in the Authorization header",
                ),
            });
        }
        let token = bearer(headers, resource)?.ok_or_else(|| GatewayError::Unauthorized {
            www_authenticate: resource.challenge(&self.config.required_scopes, None),
            reason: "a bearer token is required".into(),
        })?;
        // Without configured audiences, a token is for the request's resource URI.
        let audience = self.config.audiences.is_empty().then(|| resource.uri());
        let now = jsonwebtoken::get_current_timestamp();
        let probe = verified::Probe {
            authenticator: self.id,
            keys: self.keys.current(),
            audience,
            token,
        };
        if let Some((user, grants)) = verified::recall(&probe, now) {
            return Ok(Principal::granted(user, grants));
        }
        let invalid = |why: &str| GatewayError::Unauthorized {
            www_authenticate: resource.challenge(&self.config.required_scopes, Some(why)),
            reason: why.to_owned(),
        };
        let header = ProtectedHeader::read(token, self.config.token_type)
            .map_err(|refused| invalid(refused.description()))?;
        if !self.algorithms.contains(&header.alg) {
            return Err(invalid("the token's signature algorithm is not accepted"));
        }
        let key_set = self
            .keys
            .keys_for(header.kid.as_deref(), header.alg)
            .await?;
        let mut keys = key_set
            .matching(header.kid.as_deref(), header.alg)
            .peekable();
        if keys.peek().is_none() {
            return Err(invalid("the token was signed with an unknown key"));
        }
        let mut validation = Validation::new(header.alg);
        validation.algorithms = vec![header.alg];
        validation.leeway = self.config.clock_skew.as_secs();
        validation.validate_nbf = true;
        validation.set_issuer(&[&self.config.issuer]);
        if self.config.audiences.is_empty() {
            validation.set_audience(&[resource.uri()]);
        } else {
            validation.set_audience(&self.config.audiences);
        }
        validation.set_required_spec_claims(&["exp", "iss", "aud", "sub"]);
        let mut last = None;
        let mut data = None;
        for key in keys {
            match jsonwebtoken::decode::<Map<String, Value>>(token, key, &validation) {
                Ok(d) => {
                    data = Some(d);
                    break;
                }
                Err(e) => last = Some(e),
            }
        }
        let claims = match data {
            Some(d) => d.claims,
            None => return Err(invalid(describe(last.as_ref()))),
        };
        let standard: StandardClaims = serde_json::from_value(Value::Object(claims.clone()))
            .map_err(|_| invalid("the token's claims are malformed"))?;
        let (Some(iss), Some(sub)) = (standard.iss, standard.sub) else {
            return Err(invalid("the token has no subject"));
        };
        let scopes: HashSet<String> = match (standard.scope, standard.scp) {
            (Some(s), _) => s.split_whitespace().map(str::to_owned).collect(),
            (None, Some(Value::Array(a))) => a
                .iter()
                .filter_map(|s| s.as_str().map(str::to_owned))
                .collect(),
            (None, Some(Value::String(s))) => s.split_whitespace().map(str::to_owned).collect(),
            _ => HashSet::new(),
        };
        let missing: Vec<String> = self
            .config
            .required_scopes
            .iter()
            .filter(|s| !scopes.contains(*s))
            .cloned()
            .collect();
        if !missing.is_empty() {
            return Err(GatewayError::InsufficientScope {
                www_authenticate: resource.challenge_scope(&self.config.required_scopes),
                missing,
            });
        }
        let window = validity(&claims, self.config.clock_skew.as_secs());
        let user: Arc<str> = user_key(&iss, &sub).into();
        let grants = Arc::new(Grants { scopes, claims });
        if let Some(window) = window {
            let checked = verified::Probe {
                keys: key_set.generation(),
                ..probe
            };
            verified::remember(&checked, window, &user, &grants);
        }
        Ok(Principal::granted(user, grants))
    }
}

/// The unix seconds a validated token's claims make it valid for, both ends inclusive, with
/// the check's leeway (`exp` is required, `nbf` optional); `None` when either is not a whole
/// number of seconds the check could have read otherwise (such a token is not remembered).
fn validity(claims: &Map<String, Value>, leeway: u64) -> Option<verified::Window> {
    let until = claims.get("exp")?.as_u64()?.saturating_add(leeway);
    let from = match claims.get("nbf") {
        None => 0,
        Some(nbf) => nbf.as_u64()?.saturating_sub(leeway),
    };
    Some(verified::Window { from, until })
}

/// The token of `Authorization: Bearer <token>` (scheme case-insensitive), if any. The header
/// sent twice is a malformed request (RFC 6750 §3.1 `invalid_request`): which copy counts
/// would be a guess.
fn bearer<'h>(
    headers: &'h HeaderMap,
    resource: &ResourceIdentity,
) -> Result<Option<&'h str>, GatewayError> {
    let value = crate::protocol::header::once(headers, header::AUTHORIZATION).map_err(|_| {
        let reason = "the Authorization header must appear once";
        GatewayError::MalformedCredentials {
            www_authenticate: resource.challenge_invalid_request(reason),
            reason,
        }
    })?;
    Ok(value.and_then(|v| v.to_str().ok()).and_then(|value| {
        let (scheme, token) = value.split_once(' ')?;
        let token = token.trim();
        (scheme.eq_ignore_ascii_case("bearer") && !token.is_empty()).then_some(token)
    }))
}

/// A stable, opaque user key: the first 128 bits of SHA-256(issuer NUL subject), hex.
pub fn user_key(issuer: &str, subject: &str) -> String {
    let mut ctx = ring::digest::Context::new(&ring::digest::SHA256);
    ctx.update(issuer.as_bytes());
    ctx.update(&[0]);
    ctx.update(subject.as_bytes());
    let digest = ctx.finish();
    let mut out = String::with_capacity(34);
    out.push_str("u-");
    for b in &digest.as_ref()[..16] {
        out.push_str(&format!("{b:02x}"));
    }
    out
}

fn algorithm(a: JwtAlgorithm) -> Algorithm {
    match a {
        JwtAlgorithm::RS256 => Algorithm::RS256,
        JwtAlgorithm::RS384 => Algorithm::RS384,
        JwtAlgorithm::RS512 => Algorithm::RS512,
        JwtAlgorithm::PS256 => Algorithm::PS256,
        JwtAlgorithm::PS384 => Algorithm::PS384,
        JwtAlgorithm::PS512 => Algorithm::PS512,
        JwtAlgorithm::ES256 => Algorithm::ES256,
        JwtAlgorithm::ES384 => Algorithm::ES384,
        JwtAlgorithm::EdDSA => Algorithm::EdDSA,
    }
}

/// A client-safe description of why validation failed.
fn describe(e: Option<&jsonwebtoken::errors::Error>) -> &'static str {
    use jsonwebtoken::errors::ErrorKind;
    match e.map(|e| e.kind()) {
        Some(ErrorKind::ExpiredSignature) => "the token has expired",
        Some(ErrorKind::ImmatureSignature) => "the token is not valid yet",
        Some(ErrorKind::InvalidAudience) => "the token is for another audience",
        Some(ErrorKind::InvalidIssuer) => "the token is from another issuer",
        Some(ErrorKind::InvalidSignature) => "the token's signature is invalid",
        Some(ErrorKind::MissingRequiredClaim(_)) => "the token lacks a required claim",
        Some(ErrorKind::InvalidAlgorithm) => "the token's signature algorithm is not accepted",
        _ => "the token is invalid",
    }
}

#[cfg(test)]
mod tests;
