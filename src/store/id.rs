//! Session ids: 192 bits from the operating system's CSPRNG, hex encoded (visible ASCII only).

use std::fmt;
use std::sync::Arc;

use rand::TryRng;

/// A session id as issued by the gateway or presented by a client.
#[derive(Clone, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct SessionId(Arc<str>);

/// Bytes of entropy in a fresh id.
const ID_BYTES: usize = 24;
/// Longest id a client may present; longer ones cannot be ours.
const MAX_PRESENTED_LEN: usize = 128;

impl SessionId {
    /// A fresh id from the OS CSPRNG.
    pub fn generate() -> SessionId {
        let mut bytes = [0u8; ID_BYTES];
        rand::rngs::SysRng
            .try_fill_bytes(&mut bytes)
            .expect("the operating system's random source is available");
        let mut s = String::with_capacity(ID_BYTES * 2);
        for b in bytes {
            s.push(char::from(HEX[usize::from(b >> 4)]));
            s.push(char::from(HEX[usize::from(b & 0xf)]));
        }
        SessionId(s.into())
    }

    /// Accepts a client-presented id if it could have been issued by a gateway: visible ASCII
    /// (0x21..=0x7E), non-empty, bounded length. Anything else is treated as unknown.
    pub fn from_presented(s: &str) -> Option<SessionId> {
        let ok = !s.is_empty()
            && s.len() <= MAX_PRESENTED_LEN
            && s.bytes().all(|b| (0x21..=0x7e).contains(&b));
        ok.then(|| SessionId(s.into()))
    }

    pub fn as_str(&self) -> &str {
        &self.0
    }

    /// A number derived from the id that is the same on every replica and build (FNV-1a), to
    /// spread sessions over a pool evenly and consistently.
    pub fn spread(&self) -> usize {
        let mut h: u64 = 0xcbf2_9ce4_8422_2325;
        for b in self.0.bytes() {
            h = (h ^ u64::from(b)).wrapping_mul(0x0100_0000_01b3);
        }
        h as usize
    }
}

const HEX: &[u8; 16] = b"0123456789abcdef";

impl SessionId {
    /// The id as logs and traces show it: the first 8 bytes of its SHA-256, in hex. The same
    /// on every replica, so one session's lines can be followed, while the id itself, a
    /// bearer secret for the session, never appears.
    pub fn hashed(&self) -> HashedId {
        let digest = ring::digest::digest(&ring::digest::SHA256, self.0.as_bytes());
        let mut out = [0u8; 16];
        for (i, b) in digest.as_ref()[..8].iter().enumerate() {
            out[2 * i] = HEX[usize::from(b >> 4)];
            out[2 * i + 1] = HEX[usize::from(b & 0xf)];
        }
        HashedId(out)
    }
}

/// A session id's hash for logs and traces ([`SessionId::hashed`]), kept as its hex text.
#[derive(Clone, Copy, PartialEq, Eq)]
pub struct HashedId([u8; 16]);

impl HashedId {
    pub fn as_str(&self) -> &str {
        // Hex digits only: always valid UTF-8.
        std::str::from_utf8(&self.0).unwrap_or_default()
    }
}

impl fmt::Display for HashedId {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.as_str())
    }
}

impl fmt::Debug for HashedId {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        fmt::Display::fmt(self, f)
    }
}

impl fmt::Debug for SessionId {
    /// The hash only: a full id is a bearer secret for the session.
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        fmt::Display::fmt(&self.hashed(), f)
    }
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used)]
    use super::*;

    #[test]
    fn generated_ids_are_long_visible_ascii_and_distinct() {
        let a = SessionId::generate();
        let b = SessionId::generate();
        assert_ne!(a, b);
        assert_eq!(a.as_str().len(), 48);
        assert!(a.as_str().bytes().all(|c| c.is_ascii_hexdigit()));
        assert_eq!(SessionId::from_presented(a.as_str()), Some(a));
    }

    #[test]
    fn presented_ids_must_be_visible_ascii_and_bounded() {
        assert!(SessionId::from_presented("").is_none());
        assert!(SessionId::from_presented("has space").is_none());
        assert!(SessionId::from_presented("tab\t").is_none());
        assert!(SessionId::from_presented(&"x".repeat(129)).is_none());
        assert!(SessionId::from_presented("ok-1.2_3~").is_some());
    }

    #[test]
    fn spread_is_stable_and_uses_every_slot() {
        let id = SessionId::from_presented("abc").unwrap();
        // FNV-1a of "abc": fixed, so every replica pins a session to the same pool slot.
        assert_eq!(id.spread() as u64, 0xe71f_a219_0541_574b);
        let mut seen = [0usize; 4];
        for _ in 0..400 {
            seen[SessionId::generate().spread() % 4] += 1;
        }
        assert!(seen.iter().all(|&n| n > 50), "uneven spread: {seen:?}");
    }

    #[test]
    fn logs_show_a_stable_hash_not_the_id() {
        let id = SessionId::generate();
        let shown = format!("{id:?}");
        assert_eq!(shown.len(), 16);
        assert!(!id.as_str().starts_with(&shown[..8]), "the old prefix form");
        assert_eq!(shown, id.hashed().to_string());
        // SHA-256("abc") starts with ba7816bf8f01cfea.
        let abc = SessionId::from_presented("abc").unwrap();
        assert_eq!(abc.hashed().to_string(), "ba7816bf8f01cfea");
        assert_eq!(format!("{abc:?}"), "ba7816bf8f01cfea");
    }
}
