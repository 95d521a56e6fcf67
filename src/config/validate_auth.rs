//! Raw → validated token validation (`auth`: issuer, keys, audiences, algorithms, clock skew,
//! scopes) and per-tool policies of a tenant.

use std::collections::BTreeMap;
use std::time::Duration;

use super::raw::{Field, Pairs};
use super::raw_security::{RawAuth, RawToolPolicy};
use super::rules_security;
use super::spanned::Sp;
use super::suggest::did_you_mean;
use super::units::format_duration;
use super::validate::{Checker, shown};
use super::validate_security::{checked_list, scopes, url_field};
use super::{AuthConfig, JwtAlgorithm, TokenType, ToolPolicy};

const DEFAULT_CLOCK_SKEW: Duration = Duration::from_secs(60);
const MAX_CLOCK_SKEW: Duration = Duration::from_secs(5 * 60);

/// Every accepted algorithm, by its JWS name; also the default list, in this order.
const ALGORITHMS: [(&str, JwtAlgorithm); 9] = [
    ("RS256", JwtAlgorithm::RS256),
    ("RS384", JwtAlgorithm::RS384),
    ("RS512", JwtAlgorithm::RS512),
    ("PS256", JwtAlgorithm::PS256),
    ("PS384", JwtAlgorithm::PS384),
    ("PS512", JwtAlgorithm::PS512),
    ("ES256", JwtAlgorithm::ES256),
    ("ES384", JwtAlgorithm::ES384),
    ("EdDSA", JwtAlgorithm::EdDSA),
];

pub(super) fn auth(checker: &mut Checker<'_>, sp: &Sp<RawAuth>) -> Option<AuthConfig> {
    let raw = sp.get()?;
    let issuer = match &raw.issuer {
        None => {
            checker.missing(&sp.loc, "issuer");
            None
        }
        Some(issuer) => issuer_url(checker, issuer),
    };
    let jwks_url = match &raw.jwks_url {
        None => Some(None),
        Some(url) => url_field(checker, url, "JWKS URL", "https://idp.example.com/jwks")
            .map(|(url, _)| Some(url.to_owned())),
    };
    let audiences = checked_list(
        checker,
        &raw.audiences,
        "audience",
        |audience| match audience.trim().is_empty() {
            true => Err("an audience must not be empty".to_owned()),
            false => Ok(audience.to_owned()),
        },
    );
    let algorithms = algorithms(checker, &raw.algorithms);
    let clock_skew = checker
        .duration(
            &raw.clock_skew,
            DEFAULT_CLOCK_SKEW,
            Duration::ZERO,
            "clock_skew",
        )
        .and_then(|skew| {
            if skew <= MAX_CLOCK_SKEW {
                return Some(skew);
            }
            if let Some(field) = &raw.clock_skew {
                checker.error(
                    &field.loc,
                    format!(
                        "`clock_skew` must be at most {}, got {}",
                        format_duration(MAX_CLOCK_SKEW),
                        format_duration(skew)
                    ),
                );
            }
            None
        });
    let required_scopes = scopes(checker, &raw.required_scopes);
    let scopes_supported = match &raw.scopes_supported {
        None => required_scopes.clone(),
        Some(_) => scopes(checker, &raw.scopes_supported),
    };
    let token_type = token_type(checker, &raw.token_type);
    Some(AuthConfig {
        issuer: issuer?,
        jwks_url: jwks_url?,
        audiences: audiences?,
        algorithms: algorithms?,
        clock_skew: clock_skew?,
        required_scopes: required_scopes?,
        scopes_supported: scopes_supported?,
        token_type: token_type?,
    })
}

/// `token_type`: `any` (the default) or `at+jwt`.
fn token_type(checker: &mut Checker<'_>, field: &Field<String>) -> Option<TokenType> {
    let Some(sp) = field else {
        return Some(TokenType::Any);
    };
    match sp.get()?.as_str() {
        "any" => Some(TokenType::Any),
        "at+jwt" => Some(TokenType::AccessToken),
        _ => {
            checker.error(
                &sp.loc,
                format!(
                    "invalid token type {}: expected `any` (the default: any `typ` header) or `at+jwt` (RFC 9068 JWT access tokens only)",
                    shown(sp)
                ),
            );
            None
        }
    }
}

/// The issuer identifier: an absolute http(s) URL without query or fragment (RFC 8414 §2),
/// kept exactly as written (tokens' `iss` is compared to it byte for byte).
fn issuer_url(checker: &mut Checker<'_>, sp: &Sp<String>) -> Option<String> {
    let (url, parts) = url_field(checker, sp, "issuer", "https://idp.example.com/realms/acme")?;
    if parts.query.is_some() {
        checker.error(
            &sp.loc,
            format!(
                "invalid issuer {}: an issuer identifier has no query ('?...')",
                shown(sp)
            ),
        );
        return None;
    }
    Some(url.to_owned())
}

fn algorithms(
    checker: &mut Checker<'_>,
    field: &Field<Vec<Sp<String>>>,
) -> Option<Vec<JwtAlgorithm>> {
    let names: Vec<&str> = ALGORITHMS.iter().map(|(name, _)| *name).collect();
    let Some(list) = field else {
        return Some(ALGORITHMS.iter().map(|(_, alg)| *alg).collect());
    };
    if list.get().is_some_and(Vec::is_empty) {
        checker.error(
            &list.loc,
            format!(
                "at least one algorithm is required (leave `algorithms` out to accept all of: {})",
                names.join(", ")
            ),
        );
        return None;
    }
    let accepted = checked_list(checker, field, "algorithm", |name| {
        if names.contains(&name) {
            return Ok(name.to_owned());
        }
        Err(match name.to_ascii_uppercase().as_str() {
            "HS256" | "HS384" | "HS512" => {
                "symmetric algorithms cannot be verified with the issuer's public keys".to_owned()
            }
            "NONE" => "unsigned tokens are never accepted".to_owned(),
            "ES512" | "ES256K" => format!("not supported; expected one of: {}", names.join(", ")),
            _ => {
                let guess = did_you_mean(name, &names)
                    .map(|guess| format!("did you mean `{guess}`? "))
                    .unwrap_or_default();
                format!("{guess}expected one of: {}", names.join(", "))
            }
        })
    })?;
    Some(
        accepted
            .iter()
            .filter_map(|name| ALGORITHMS.iter().find(|(n, _)| n == name))
            .map(|(_, alg)| *alg)
            .collect(),
    )
}

/// `tool_policies`: empty when absent. Policies need `auth` on the tenant (reported at the
/// list when `auth` is absent; each policy is still checked).
pub(super) fn tool_policies(
    checker: &mut Checker<'_>,
    field: &Field<Vec<Sp<RawToolPolicy>>>,
    auth: &Field<RawAuth>,
) -> Option<Vec<ToolPolicy>> {
    let Some(list) = field else {
        return Some(Vec::new());
    };
    let items = list.get()?;
    let mut valid = true;
    if auth.is_none() && !items.is_empty() {
        checker.error(
            &list.loc,
            "`tool_policies` need `auth` on the tenant: without token validation there are no scopes or claims to check them against",
        );
        valid = false;
    }
    let policies: Vec<Option<ToolPolicy>> = items
        .iter()
        .map(|item| tool_policy(checker, item))
        .collect();
    let policies: Option<Vec<ToolPolicy>> = policies.into_iter().collect();
    policies.filter(|_| valid)
}

fn tool_policy(checker: &mut Checker<'_>, item: &Sp<RawToolPolicy>) -> Option<ToolPolicy> {
    let raw = item.get()?;
    let upstream = match &raw.upstream {
        None => {
            checker.error(
                &item.loc,
                "missing required field `upstream`: a policy names the upstream and the tools as that upstream names them (e.g. `upstream: files` with `tools: [\"write*\"]`), so prefixing or renaming never changes what it protects",
            );
            None
        }
        Some(sp) => sp
            .get()
            .and_then(|pattern| match rules_security::upstream_pattern(pattern) {
                Ok(()) => Some(pattern.clone()),
                Err(problem) => {
                    checker.error(
                        &sp.loc,
                        format!("invalid upstream {}: {problem}", shown(sp)),
                    );
                    None
                }
            }),
    };
    let tools = match &raw.tools {
        // Every tool of the upstream.
        None => Some(vec!["*".to_owned()]),
        Some(list) if list.get().is_some_and(Vec::is_empty) => {
            checker.error(
                &list.loc,
                "at least one tool name or pattern is required, e.g. [\"write*\"] (leave `tools` out to mean every tool of the upstream)",
            );
            None
        }
        Some(_) => checked_list(checker, &raw.tools, "tool pattern", |pattern| {
            rules_security::tool_pattern(pattern).map(|()| pattern.to_owned())
        }),
    };
    let scopes = scopes(checker, &raw.scopes);
    let claims = claims(checker, &raw.claims);
    if let (Some(scopes), Some(claims)) = (&scopes, &claims)
        && scopes.is_empty()
        && claims.is_empty()
    {
        checker.error(
            &item.loc,
            "a policy must require scopes or claims: set `scopes`, `claims` or both (a policy requiring nothing restricts nothing)",
        );
        return None;
    }
    Some(ToolPolicy {
        upstream: upstream?,
        tools: tools?,
        scopes: scopes?,
        claims: claims?,
    })
}

/// Checks each policy's `upstream` against the tenant's upstreams: a policy that names none
/// protects nothing (a typo, or an upstream renamed), so it is an error, not a silent no-op. A
/// tool pattern spelled as a public name (`<upstream><separator>...`) is most likely left over
/// from names with prefixes: a warning, since an upstream may name its own tools that way.
pub(super) fn policy_targets(
    checker: &mut Checker<'_>,
    field: &Field<Vec<Sp<RawToolPolicy>>>,
    upstreams: &[&str],
    separator: &str,
) {
    let Some(items) = field.as_ref().and_then(|list| list.get()) else {
        return;
    };
    for item in items {
        let Some(raw) = item.get() else { continue };
        let Some(sp) = raw.upstream.as_ref() else {
            continue;
        };
        let Some(pattern) = sp.get() else { continue };
        if rules_security::upstream_pattern(pattern).is_err() {
            continue;
        }
        let matched: Vec<&str> = upstreams
            .iter()
            .copied()
            .filter(|u| rules_security::glob(pattern, u))
            .collect();
        if matched.is_empty() {
            checker.error(
                &sp.loc,
                format!(
                    "{} names no upstream of this tenant (its upstreams: {}): the policy would protect nothing",
                    shown(sp),
                    upstreams.join(", ")
                ),
            );
            continue;
        }
        let Some(tools) = raw.tools.as_ref().and_then(|t| t.get()) else {
            continue;
        };
        for tool in tools {
            let Some(text) = tool.get() else { continue };
            if let Some(u) = matched
                .iter()
                .find(|u| !separator.is_empty() && text.starts_with(&format!("{u}{separator}")))
            {
                checker.warn(
                    &tool.loc,
                    format!(
                        "tool pattern {} looks like a public name: policies match the upstream's own tool names, so it matches a tool of {u:?} only if that upstream itself names it so (did you mean {:?}?)",
                        shown(tool),
                        &text[u.len() + separator.len()..]
                    ),
                );
            }
        }
    }
}

fn claims(checker: &mut Checker<'_>, field: &Field<Pairs>) -> Option<BTreeMap<String, String>> {
    let Some(pairs) = field else {
        return Some(BTreeMap::new());
    };
    let mut claims = BTreeMap::new();
    let mut valid = true;
    for (name, value) in &pairs.get()?.0 {
        let name = name.get().and_then(|text| {
            if text.trim().is_empty() {
                checker.error(&name.loc, "claim names must not be empty");
                return None;
            }
            Some(text.clone())
        });
        match (name, value.get()) {
            (Some(name), Some(value)) => {
                claims.insert(name, value.clone());
            }
            _ => valid = false,
        }
    }
    valid.then_some(claims)
}
