//! A tenant's signing key (`CursorKey`, HMAC-SHA256): the opaque tokens it seals cannot be
//! forged or edited — composite list cursors (every upstream's own cursor in one token; a
//! tampered one is `-32602`), MRTR `requestState`s — and the values it derives (stateless
//! session ids) are the same on every replica that shares the key (`cluster::Bus::tenant_key`).

use base64::Engine;
use base64::engine::general_purpose::URL_SAFE_NO_PAD;
use ring::hmac;
use serde::{Deserialize, Serialize};

use crate::error::GatewayError;
use crate::protocol::ListKind;

/// Signs and checks cursors. One per tenant; random unless configured.
pub struct CursorKey(hmac::Key);

#[derive(Serialize, Deserialize)]
struct Payload {
    /// The list method the cursor belongs to.
    k: String,
    /// `(upstream name, that upstream's next cursor)` for every upstream with more pages.
    u: Vec<(String, String)>,
}

impl CursorKey {
    pub fn random() -> CursorKey {
        let rng = ring::rand::SystemRandom::new();
        let key = hmac::Key::generate(hmac::HMAC_SHA256, &rng)
            .expect("the operating system's random source is available");
        CursorKey(key)
    }

    pub fn from_secret(secret: &[u8]) -> CursorKey {
        CursorKey(hmac::Key::new(hmac::HMAC_SHA256, secret))
    }

    /// The cursor for the upstreams that still have pages; `None` when none has.
    pub fn encode(&self, kind: ListKind, positions: Vec<(String, String)>) -> Option<String> {
        if positions.is_empty() {
            return None;
        }
        let payload = serde_json::to_vec(&Payload {
            k: kind.method().to_owned(),
            u: positions,
        })
        .expect("plain strings serialize");
        Some(self.seal(&payload))
    }

    /// `payload` and its tag as one URL-safe token (`payload.tag`, Base64): readable by the
    /// client, not forgeable. Other opaque tokens of the tenant (MRTR `requestState`) use it.
    pub fn seal(&self, payload: &[u8]) -> String {
        let tag = hmac::sign(&self.0, payload);
        let mut out = URL_SAFE_NO_PAD.encode(payload);
        out.push('.');
        out.push_str(&URL_SAFE_NO_PAD.encode(tag.as_ref()));
        out
    }

    /// The payload of a token `seal` made with this key; `None` if it was altered.
    pub fn open(&self, token: &str) -> Option<Vec<u8>> {
        let (payload, tag) = token.split_once('.')?;
        let payload = URL_SAFE_NO_PAD.decode(payload).ok()?;
        let tag = URL_SAFE_NO_PAD.decode(tag).ok()?;
        hmac::verify(&self.0, &payload, &tag).ok()?;
        Some(payload)
    }

    /// A value derived from `parts` under this key (hex, 32 characters): the same on every
    /// replica that shares the key, unguessable without it.
    pub fn derive(&self, parts: &[&[u8]]) -> String {
        let mut ctx = hmac::Context::with_key(&self.0);
        for p in parts {
            ctx.update(&(p.len() as u64).to_be_bytes());
            ctx.update(p);
        }
        let tag = ctx.sign();
        tag.as_ref()[..16]
            .iter()
            .map(|b| format!("{b:02x}"))
            .collect()
    }

    /// The upstream positions in a cursor this key issued for `kind`.
    pub fn decode(
        &self,
        kind: ListKind,
        cursor: &str,
    ) -> Result<Vec<(String, String)>, GatewayError> {
        let invalid = || {
            GatewayError::InvalidParams(
                "Invalid cursor: use the nextCursor of a previous result of the same list, unmodified".into(),
            )
        };
        let payload = self.open(cursor).ok_or_else(invalid)?;
        let payload: Payload = serde_json::from_slice(&payload).map_err(|_| invalid())?;
        if payload.k != kind.method() {
            return Err(invalid());
        }
        Ok(payload.u)
    }
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used)]
    use super::*;

    #[test]
    fn round_trip_and_tamper_detection() {
        let key = CursorKey::random();
        let pos = vec![
            ("a".to_string(), "c1".to_string()),
            ("b".to_string(), "x\"y".to_string()),
        ];
        let c = key.encode(ListKind::Tools, pos.clone()).unwrap();
        assert_eq!(key.decode(ListKind::Tools, &c).unwrap(), pos);
        assert!(
            key.decode(ListKind::Prompts, &c).is_err(),
            "bound to its list"
        );
        assert!(
            CursorKey::random().decode(ListKind::Tools, &c).is_err(),
            "bound to its key"
        );
        let mut forged = c.clone();
        forged.replace_range(0..1, if c.starts_with('A') { "B" } else { "A" });
        assert!(key.decode(ListKind::Tools, &forged).is_err());
        assert!(key.decode(ListKind::Tools, "garbage").is_err());
        assert!(key.encode(ListKind::Tools, vec![]).is_none());
    }
}
