//! Signing keys and tokens made by the test itself (ES256 with ring), for the cases a real
//! authorization server will not produce: chosen key ids, `crit` and `typ` headers. The JWS is
//! assembled by hand so every header byte is what the test says.

use std::time::{SystemTime, UNIX_EPOCH};

use base64::Engine;
use base64::engine::general_purpose::URL_SAFE_NO_PAD;
use ring::rand::SystemRandom;
use ring::signature::{ECDSA_P256_SHA256_FIXED_SIGNING, EcdsaKeyPair, KeyPair};
use serde_json::{Value, json};

/// A P-256 signing key with a key id.
pub struct TestKey {
    pub kid: String,
    pair: EcdsaKeyPair,
    rng: SystemRandom,
}

impl TestKey {
    /// A fresh key named `kid`.
    pub fn generate(kid: &str) -> TestKey {
        let rng = SystemRandom::new();
        let pkcs8 = EcdsaKeyPair::generate_pkcs8(&ECDSA_P256_SHA256_FIXED_SIGNING, &rng)
            .expect("a P-256 key");
        let pair = EcdsaKeyPair::from_pkcs8(&ECDSA_P256_SHA256_FIXED_SIGNING, pkcs8.as_ref(), &rng)
            .expect("the key just made");
        TestKey {
            kid: kid.to_owned(),
            pair,
            rng,
        }
    }

    /// The public key as a JWK (RFC 7518 §6.2).
    pub fn jwk(&self) -> Value {
        // Uncompressed point: 0x04 || X (32 bytes) || Y (32 bytes).
        let point = self.pair.public_key().as_ref();
        assert_eq!(point.len(), 65, "uncompressed P-256 point");
        json!({
            "kty": "EC",
            "crv": "P-256",
            "x": URL_SAFE_NO_PAD.encode(&point[1..33]),
            "y": URL_SAFE_NO_PAD.encode(&point[33..]),
            "kid": self.kid,
            "alg": "ES256",
            "use": "sig",
        })
    }

    /// A compact JWS of `claims` under exactly `header` (which should say `"alg": "ES256"`).
    pub fn sign(&self, header: &Value, claims: &Value) -> String {
        let encode = |v: &Value| URL_SAFE_NO_PAD.encode(serde_json::to_vec(v).expect("JSON"));
        let input = format!("{}.{}", encode(header), encode(claims));
        let signature = self
            .pair
            .sign(&self.rng, input.as_bytes())
            .expect("ECDSA signs");
        format!("{input}.{}", URL_SAFE_NO_PAD.encode(signature.as_ref()))
    }

    /// An access token from `issuer` for `audience` with scope `mcp`, valid for 5 minutes,
    /// under the header `{"alg":"ES256","typ":"at+jwt","kid":<kid>}` plus `extra_header`.
    pub fn token(&self, issuer: &str, audience: &str, extra_header: Value) -> String {
        let mut header = json!({"alg": "ES256", "typ": "at+jwt", "kid": self.kid});
        if let (Some(h), Value::Object(extra)) = (header.as_object_mut(), extra_header) {
            h.extend(extra);
        }
        self.sign(&header, &claims(issuer, audience))
    }
}

/// Standard claims of a valid access token.
pub fn claims(issuer: &str, audience: &str) -> Value {
    let now = SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .map(|d| d.as_secs())
        .unwrap_or_default();
    json!({
        "iss": issuer,
        "sub": "test-user",
        "aud": audience,
        "iat": now,
        "exp": now + 300,
        "scope": "mcp",
        "client_id": "test-client",
        "jti": format!("jti-{now}"),
    })
}

/// A JWKS document holding `keys`.
pub fn jwks(keys: &[&TestKey]) -> Value {
    json!({"keys": keys.iter().map(|k| k.jwk()).collect::<Vec<_>>()})
}
