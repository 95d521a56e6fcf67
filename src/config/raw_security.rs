//! Raw serde types of the security settings: `tls`, a tenant's `auth` and `tool_policies`, and
//! an HTTP upstream's `oauth2`. Same conventions as `raw`: unknown fields rejected, values
//! located, no semantic checks.

use schemars::JsonSchema;
use serde::Deserialize;

use super::raw::{Dur, Field, Pairs};
use super::spanned::Sp;

#[derive(Deserialize, JsonSchema)]
#[schemars(rename = "Tls")]
#[serde(deny_unknown_fields)]
pub struct RawTls {
    pub cert: Field<String>,
    pub key: Field<String>,
    pub reload_interval: Field<Dur>,
}

#[derive(Deserialize, JsonSchema)]
#[schemars(rename = "Auth")]
#[serde(deny_unknown_fields)]
pub struct RawAuth {
    pub issuer: Field<String>,
    pub jwks_url: Field<String>,
    pub audiences: Field<Vec<Sp<String>>>,
    /// Accepted signature algorithms (asymmetric only: RS*, PS*, ES*, EdDSA).
    pub algorithms: Field<Vec<Sp<String>>>,
    pub clock_skew: Field<Dur>,
    pub required_scopes: Field<Vec<Sp<String>>>,
    pub scopes_supported: Field<Vec<Sp<String>>>,
    /// Required `typ` of access tokens (e.g. `at+jwt`, RFC 9068); default: any.
    pub token_type: Field<String>,
}

#[derive(Deserialize, JsonSchema)]
#[schemars(rename = "ToolPolicy")]
#[serde(deny_unknown_fields)]
pub struct RawToolPolicy {
    pub upstream: Field<String>,
    pub tools: Field<Vec<Sp<String>>>,
    pub scopes: Field<Vec<Sp<String>>>,
    pub claims: Field<Pairs>,
}

#[derive(Deserialize, JsonSchema)]
#[schemars(rename = "OAuth2")]
#[serde(deny_unknown_fields)]
pub struct RawOAuth2 {
    pub token_url: Field<String>,
    pub client_id: Field<String>,
    pub client_secret: Field<String>,
    pub scopes: Field<Vec<Sp<String>>>,
    pub resource: Field<String>,
}
