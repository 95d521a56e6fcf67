//! The protected header of a JWS access token, read once before any key is looked up, with the
//! header rules the signature library does not apply: a `crit` parameter names extensions the
//! recipient must understand or refuse the token (RFC 7515 §4.1.11), and a tenant may require
//! the JWT access-token type `at+jwt` (RFC 9068 §2.1, §4).

use base64::Engine;
use base64::engine::general_purpose::URL_SAFE_NO_PAD;
use jsonwebtoken::Algorithm;
use serde::de::IgnoredAny;
use serde::{Deserialize, Deserializer};

use crate::config::TokenType;

/// Longest encoded header read; real ones are under 200 bytes.
const MAX_ENCODED_HEADER: usize = 4096;

/// What the gateway reads from a token's header.
#[derive(Debug, Deserialize)]
pub struct ProtectedHeader {
    pub alg: Algorithm,
    #[serde(default)]
    pub kid: Option<String>,
    #[serde(default)]
    typ: Option<String>,
    /// Whether `crit` is present at all, whatever its value (`null` and `[]` included: neither
    /// is a valid `crit`, and both ask for special handling).
    #[serde(default, deserialize_with = "present")]
    crit: bool,
}

/// Why a token's header is refused; each is a 401 `invalid_token` with this description.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Refused {
    NotAJws,
    Critical,
    NotAnAccessToken,
}

impl Refused {
    pub fn description(self) -> &'static str {
        match self {
            Refused::NotAJws => "the token is not a signed JWT",
            Refused::Critical => {
                "the token has critical header parameters (crit), which are not supported"
            }
            Refused::NotAnAccessToken => {
                "the token is not a JWT access token (its typ must be at+jwt)"
            }
        }
    }
}

impl ProtectedHeader {
    /// Reads the header of a compact JWS (`header.payload.signature`) and applies the rules.
    /// The gateway implements no JWS extension, so any `crit` is refused.
    pub fn read(token: &str, token_type: TokenType) -> Result<ProtectedHeader, Refused> {
        let mut parts = token.split('.');
        let (Some(encoded), Some(_), Some(_), None) =
            (parts.next(), parts.next(), parts.next(), parts.next())
        else {
            return Err(Refused::NotAJws);
        };
        if encoded.len() > MAX_ENCODED_HEADER {
            return Err(Refused::NotAJws);
        }
        let json = URL_SAFE_NO_PAD
            .decode(encoded)
            .map_err(|_| Refused::NotAJws)?;
        let header: ProtectedHeader =
            serde_json::from_slice(&json).map_err(|_| Refused::NotAJws)?;
        if header.crit {
            return Err(Refused::Critical);
        }
        if token_type == TokenType::AccessToken && !header.is_access_token() {
            return Err(Refused::NotAnAccessToken);
        }
        Ok(header)
    }

    /// RFC 9068 §4: `typ` is `at+jwt` or `application/at+jwt`; media types compare without
    /// regard to case (RFC 7515 §4.1.9).
    fn is_access_token(&self) -> bool {
        self.typ.as_deref().is_some_and(|typ| {
            let typ = match typ.get(..12) {
                Some(prefix) if prefix.eq_ignore_ascii_case("application/") => &typ[12..],
                _ => typ,
            };
            typ.eq_ignore_ascii_case("at+jwt")
        })
    }
}

/// `true` for any value, so `#[serde(default)]` leaves `false` only when the member is absent.
fn present<'de, D: Deserializer<'de>>(deserializer: D) -> Result<bool, D::Error> {
    IgnoredAny::deserialize(deserializer).map(|_| true)
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used)]
    use super::*;

    fn token(header: &str) -> String {
        format!("{}.e30.c2ln", URL_SAFE_NO_PAD.encode(header))
    }

    fn read(header: &str, token_type: TokenType) -> Result<ProtectedHeader, Refused> {
        ProtectedHeader::read(&token(header), token_type)
    }

    #[test]
    fn alg_and_kid_are_read() {
        let h = read(r#"{"alg":"ES256","kid":"k1","typ":"JWT"}"#, TokenType::Any).unwrap();
        assert_eq!((h.alg, h.kid.as_deref()), (Algorithm::ES256, Some("k1")));
        let h = read(r#"{"alg":"RS256"}"#, TokenType::Any).unwrap();
        assert_eq!((h.alg, h.kid), (Algorithm::RS256, None));
    }

    #[test]
    fn malformed_tokens_and_headers_are_not_a_jws() {
        for bad in [
            "a.b",
            "a.b.c.d",
            "!!.e30.c2ln",
            &token(r#"{"alg":"none"}"#),
            &token(r#"{"kid":"k"}"#),
            &token(r#"{"alg":"ES256","kid":7}"#),
            &token(r#"{"alg":"ES256","alg":"ES256"}"#),
            &token("not json"),
            &format!("{}.e30.c2ln", "A".repeat(MAX_ENCODED_HEADER + 4)),
        ] {
            assert_eq!(
                ProtectedHeader::read(bad, TokenType::Any).unwrap_err(),
                Refused::NotAJws,
                "{bad}"
            );
        }
    }

    #[test]
    fn any_crit_is_refused() {
        for header in [
            r#"{"alg":"ES256","crit":["exp"],"exp":1}"#,
            r#"{"alg":"ES256","crit":["urn:x"],"urn:x":true}"#,
            r#"{"alg":"ES256","crit":[]}"#,
            r#"{"alg":"ES256","crit":null}"#,
            r#"{"crit":"b64","alg":"ES256"}"#,
        ] {
            assert_eq!(
                read(header, TokenType::Any).unwrap_err(),
                Refused::Critical,
                "{header}"
            );
        }
    }

    #[test]
    fn typ_at_jwt_when_required() {
        for typ in [
            "at+jwt",
            "AT+JWT",
            "application/at+jwt",
            "Application/At+Jwt",
        ] {
            let header = format!(r#"{{"alg":"ES256","typ":"{typ}"}}"#);
            assert!(read(&header, TokenType::AccessToken).is_ok(), "{typ}");
        }
        for header in [
            r#"{"alg":"ES256","typ":"JWT"}"#,
            r#"{"alg":"ES256","typ":"application/jwt"}"#,
            r#"{"alg":"ES256","typ":"application/"}"#,
            r#"{"alg":"ES256","typ":"at+jwt "}"#,
            r#"{"alg":"ES256","typ":null}"#,
            r#"{"alg":"ES256"}"#,
        ] {
            assert_eq!(
                read(header, TokenType::AccessToken).unwrap_err(),
                Refused::NotAnAccessToken,
                "{header}"
            );
            assert!(read(header, TokenType::Any).is_ok(), "{header}");
        }
    }
}
