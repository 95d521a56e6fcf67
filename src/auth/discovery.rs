//! Finding an issuer's signing keys: OpenID Connect discovery (the document read as the
//! `openidconnect` crate's provider metadata, issuer compared exactly), falling back to RFC 8414
//! authorization-server metadata; and `get`, the bounded reader of the identity provider's
//! documents that the key-set fetch uses too.

use axum::http::HeaderMap;
use openidconnect::core::CoreProviderMetadata;
use serde::Deserialize;

/// Largest discovery or key-set document accepted. Real ones are a few KiB; a provider (or
/// something posing as one) sending more is refused rather than buffered.
pub const MAX_DOCUMENT: usize = 256 << 10;

/// The `jwks_uri` of `issuer`. Every request is bounded by the caller's deadline.
pub async fn jwks_uri(http: &reqwest::Client, issuer: &str) -> Result<String, String> {
    let oidc_error = match oidc(http, issuer).await {
        Ok(uri) => return Ok(uri),
        Err(e) => e,
    };
    match rfc8414(http, issuer).await {
        Ok(uri) => Ok(uri),
        Err(e) => Err(format!(
            "discovery failed for issuer {issuer}: OpenID Connect: {oidc_error}; RFC 8414: {e}"
        )),
    }
}

/// `<issuer>/.well-known/openid-configuration`. Read here rather than with the crate's
/// `discover_async`, which would also fetch the key set (a second fetch per refresh).
async fn oidc(http: &reqwest::Client, issuer: &str) -> Result<String, String> {
    let url = format!(
        "{}/.well-known/openid-configuration",
        issuer.trim_end_matches('/')
    );
    let (_, body) = get(http, &url).await?;
    let metadata: CoreProviderMetadata =
        serde_json::from_slice(&body).map_err(|e| format!("invalid metadata: {e}"))?;
    if metadata.issuer().as_str() != issuer {
        return Err(format!(
            "metadata names issuer {:?}",
            metadata.issuer().as_str()
        ));
    }
    Ok(metadata.jwks_uri().url().to_string())
}

#[derive(Deserialize)]
struct AuthorizationServerMetadata {
    issuer: String,
    jwks_uri: Option<String>,
}

/// RFC 8414: `https://host/.well-known/oauth-authorization-server[/issuer-path]`.
async fn rfc8414(http: &reqwest::Client, issuer: &str) -> Result<String, String> {
    let (scheme, rest) = issuer.split_once("://").ok_or("the issuer is not a URL")?;
    let (authority, path) = match rest.find('/') {
        Some(i) => (&rest[..i], rest[i..].trim_end_matches('/')),
        None => (rest, ""),
    };
    let url = format!("{scheme}://{authority}/.well-known/oauth-authorization-server{path}");
    let (_, body) = get(http, &url).await?;
    let meta: AuthorizationServerMetadata =
        serde_json::from_slice(&body).map_err(|e| format!("invalid JSON: {e}"))?;
    if meta.issuer != issuer {
        return Err(format!("metadata names issuer {:?}", meta.issuer));
    }
    meta.jwks_uri
        .ok_or_else(|| "the metadata has no jwks_uri".into())
}

/// GETs a JSON document: its headers and at most `MAX_DOCUMENT` bytes of body (a success
/// status is required). The body is read chunk by chunk so a larger one is never buffered.
pub async fn get(http: &reqwest::Client, url: &str) -> Result<(HeaderMap, Vec<u8>), String> {
    let mut resp = http
        .get(url)
        .header(reqwest::header::ACCEPT, "application/json")
        .send()
        .await
        .map_err(|e| e.to_string())?;
    if !resp.status().is_success() {
        return Err(format!("HTTP {}", resp.status().as_u16()));
    }
    let too_large = || format!("the document is larger than {} KiB", MAX_DOCUMENT >> 10);
    let declared = resp.content_length().unwrap_or(0);
    if declared > MAX_DOCUMENT as u64 {
        return Err(too_large());
    }
    let headers = std::mem::take(resp.headers_mut());
    let mut body = Vec::with_capacity(usize::try_from(declared).unwrap_or(0));
    while let Some(chunk) = resp.chunk().await.map_err(|e| e.to_string())? {
        if body.len() + chunk.len() > MAX_DOCUMENT {
            return Err(too_large());
        }
        body.extend_from_slice(&chunk);
    }
    Ok((headers, body))
}
