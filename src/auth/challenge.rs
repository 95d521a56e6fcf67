//! What a resource server tells clients about itself: its canonical resource URI, the RFC 9728
//! protected-resource metadata, and the `WWW-Authenticate` challenges (RFC 6750) that point
//! clients to it.

use crate::config::AuthConfig;

/// The well-known path prefix of RFC 9728 metadata.
pub const METADATA_PREFIX: &str = "/.well-known/oauth-protected-resource";

/// An endpoint's canonical resource URI and the location of its metadata.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ResourceIdentity {
    uri: String,
    metadata_url: String,
}

impl ResourceIdentity {
    /// From a canonical URI like `https://host:8443/t/acme/mcp`: the metadata lives at
    /// `https://host:8443/.well-known/oauth-protected-resource/t/acme/mcp` (RFC 9728 §3.1).
    pub fn new(uri: String) -> ResourceIdentity {
        let metadata_url = match uri.split_once("://") {
            Some((scheme, rest)) => {
                let (authority, path) = match rest.find('/') {
                    Some(i) => (&rest[..i], &rest[i..]),
                    None => (rest, ""),
                };
                format!("{scheme}://{authority}{METADATA_PREFIX}{path}")
            }
            None => format!("{METADATA_PREFIX}{uri}"),
        };
        ResourceIdentity { uri, metadata_url }
    }

    /// Derived from how the request reached us (used when no `resource` is configured; the
    /// Host header has been validated before this).
    pub fn from_request(tls: bool, host: &str, path: &str) -> ResourceIdentity {
        let scheme = if tls { "https" } else { "http" };
        ResourceIdentity::new(format!("{scheme}://{host}{path}"))
    }

    pub fn uri(&self) -> &str {
        &self.uri
    }

    pub fn metadata_url(&self) -> &str {
        &self.metadata_url
    }

    /// `Bearer resource_metadata="…"[, scope="…"][, error="invalid_token", error_description="…"]`.
    pub fn challenge(&self, scopes: &[String], invalid_token: Option<&str>) -> String {
        let mut v = format!("Bearer resource_metadata=\"{}\"", quote(&self.metadata_url));
        if !scopes.is_empty() {
            v.push_str(&format!(", scope=\"{}\"", quote(&scopes.join(" "))));
        }
        if let Some(why) = invalid_token {
            v.push_str(&format!(
                ", error=\"invalid_token\", error_description=\"{}\"",
                quote(why)
            ));
        }
        v
    }

    /// The 403 challenge naming the scopes needed (step-up authorization).
    pub fn challenge_scope(&self, scopes: &[String]) -> String {
        format!(
            "Bearer error=\"insufficient_scope\", scope=\"{}\", resource_metadata=\"{}\", error_description=\"additional scopes are required\"",
            quote(&scopes.join(" ")),
            quote(&self.metadata_url)
        )
    }

    /// The 400 challenge for a malformed request (e.g. a token in the query string).
    pub fn challenge_invalid_request(&self, why: &str) -> String {
        format!(
            "Bearer error=\"invalid_request\", error_description=\"{}\", resource_metadata=\"{}\"",
            quote(why),
            quote(&self.metadata_url)
        )
    }
}

/// RFC 9728 protected-resource metadata for an endpoint.
pub fn metadata_document(resource: &ResourceIdentity, auth: &AuthConfig, name: &str) -> Vec<u8> {
    let scopes = if auth.scopes_supported.is_empty() {
        &auth.required_scopes
    } else {
        &auth.scopes_supported
    };
    let doc = serde_json::json!({
        "resource": resource.uri(),
        "authorization_servers": [auth.issuer],
        "scopes_supported": scopes,
        "bearer_methods_supported": ["header"],
        "resource_name": name,
    });
    serde_json::to_vec(&doc).expect("plain JSON serializes")
}

/// Escapes a value for an RFC 7230 quoted-string.
fn quote(s: &str) -> String {
    s.chars()
        .filter(|c| !c.is_control())
        .flat_map(|c| match c {
            '"' | '\\' => vec!['\\', c],
            c => vec![c],
        })
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn metadata_url_inserts_the_well_known_path_after_the_authority() {
        let r = ResourceIdentity::new("https://mcp.example:8443/t/acme/mcp".into());
        assert_eq!(
            r.metadata_url(),
            "https://mcp.example:8443/.well-known/oauth-protected-resource/t/acme/mcp"
        );
        let r = ResourceIdentity::from_request(false, "127.0.0.1:9", "/mcp");
        assert_eq!(r.uri(), "http://127.0.0.1:9/mcp");
        assert_eq!(
            r.metadata_url(),
            "http://127.0.0.1:9/.well-known/oauth-protected-resource/mcp"
        );
    }

    #[test]
    fn challenges() {
        let r = ResourceIdentity::new("https://h/t/a/mcp".into());
        assert_eq!(
            r.challenge(&["mcp".into(), "x:y".into()], None),
            "Bearer resource_metadata=\"https://h/.well-known/oauth-protected-resource/t/a/mcp\", scope=\"mcp x:y\""
        );
        assert_eq!(
            r.challenge(&[], Some("the token has expired")),
            "Bearer resource_metadata=\"https://h/.well-known/oauth-protected-resource/t/a/mcp\", error=\"invalid_token\", error_description=\"the token has expired\""
        );
        assert!(
            r.challenge_scope(&["files:write".into()])
                .starts_with("Bearer error=\"insufficient_scope\", scope=\"files:write\"")
        );
        assert_eq!(quote("a\"b\\c\n"), "a\\\"b\\\\c");
    }
}
