//! Finding an issuer's signing keys: OpenID Connect discovery (with the `openidconnect`
//! crate), falling back to RFC 8414 authorization-server metadata.

use std::time::Duration;

use openidconnect::IssuerUrl;
use openidconnect::core::CoreProviderMetadata;
use serde::Deserialize;

/// Bound on each discovery request.
const TIMEOUT: Duration = Duration::from_secs(10);

#[derive(Debug, thiserror::Error)]
#[error("{0}")]
struct FetchError(String);

/// The `jwks_uri` of `issuer`.
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

/// `/.well-known/openid-configuration`, validated by the `openidconnect` crate (issuer must
/// match exactly).
async fn oidc(http: &reqwest::Client, issuer: &str) -> Result<String, String> {
    let issuer_url = IssuerUrl::new(issuer.to_owned()).map_err(|e| e.to_string())?;
    let client = {
        let http = http.clone();
        move |req: openidconnect::HttpRequest| {
            let http = http.clone();
            async move {
                let (parts, body) = req.into_parts();
                let resp = http
                    .request(parts.method, parts.uri.to_string())
                    .headers(parts.headers)
                    .body(body)
                    .timeout(TIMEOUT)
                    .send()
                    .await
                    .map_err(|e| FetchError(e.to_string()))?;
                let status = resp.status();
                let headers = resp.headers().clone();
                let body = resp.bytes().await.map_err(|e| FetchError(e.to_string()))?;
                let mut out = openidconnect::HttpResponse::new(body.to_vec());
                *out.status_mut() = status;
                *out.headers_mut() = headers;
                Ok::<_, FetchError>(out)
            }
        }
    };
    let metadata = CoreProviderMetadata::discover_async(issuer_url, &client)
        .await
        .map_err(|e| e.to_string())?;
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
    let resp = http
        .get(&url)
        .timeout(TIMEOUT)
        .send()
        .await
        .map_err(|e| e.to_string())?;
    if !resp.status().is_success() {
        return Err(format!("HTTP {}", resp.status().as_u16()));
    }
    let meta: AuthorizationServerMetadata = read_json(resp).await?;
    if meta.issuer != issuer {
        return Err(format!("metadata names issuer {:?}", meta.issuer));
    }
    meta.jwks_uri
        .ok_or_else(|| "the metadata has no jwks_uri".into())
}

/// A response body as JSON (reqwest's `json` feature is not enabled).
pub(super) async fn read_json<T: for<'de> Deserialize<'de>>(
    resp: reqwest::Response,
) -> Result<T, String> {
    let body = resp.bytes().await.map_err(|e| e.to_string())?;
    serde_json::from_slice(&body).map_err(|e| format!("invalid JSON: {e}"))
}
