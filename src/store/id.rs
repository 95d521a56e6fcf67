//! Session ids: 192 bits from the operating system's CSPRNG, hex encoded (visible ASCII only),
//! sometimes with one or two more hex digits that steer the id's spread over a process pool.

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
        SessionId(random_hex().into())
    }

    /// A fresh id whose [`spread`](Self::spread) suits the caller: `misses` counts what is
    /// wrong with a spread (0: nothing). When the random id's spread misses, one or two hex
    /// digits are appended: the first of the 272 suffixes that misses least. The 192 random
    /// bits are never drawn again or chosen, so the id keeps all of its entropy; the suffix only
    /// moves the spread (FNV-1a's last steps), which every replica computes the same way.
    pub fn generate_spread(misses: impl Fn(usize) -> usize) -> SessionId {
        let mut s = random_hex();
        let base = fnv_1a(FNV_OFFSET, s.as_bytes());
        let mut least = (misses(base as usize), 0, [0u8; 2]);
        let singles = HEX.iter().map(|&d| (1, [d, 0]));
        let pairs = HEX
            .iter()
            .flat_map(|&a| HEX.iter().map(move |&b| (2, [a, b])));
        for (len, suffix) in singles.chain(pairs) {
            if least.0 == 0 {
                break;
            }
            let m = misses(fnv_1a(base, &suffix[..len]) as usize);
            if m < least.0 {
                least = (m, len, suffix);
            }
        }
        let (_, len, suffix) = least;
        s.extend(suffix[..len].iter().map(|&d| char::from(d)));
        SessionId(s.into())
    }

    /// Accepts a client-presented id if it could have been issued by a gateway: visible ASCII
    /// (0x21..=0x7E), non-empty, bounded length. Anything else is treated as unknown.
    pub fn from_presented(s: &str) -> Option<SessionId> {
        Self::presentable(s).then(|| SessionId(s.into()))
    }

    /// Whether [`SessionId::from_presented`] accepts `s` (checked without making the id: a
    /// request finds its live session by the presented text, see [`std::borrow::Borrow`]).
    pub fn presentable(s: &str) -> bool {
        !s.is_empty()
            && s.len() <= MAX_PRESENTED_LEN
            && s.bytes().all(|b| (0x21..=0x7e).contains(&b))
    }

    pub fn as_str(&self) -> &str {
        &self.0
    }

    /// A number derived from the id that is the same on every replica and build (FNV-1a), to
    /// spread sessions over a pool evenly and consistently.
    pub fn spread(&self) -> usize {
        fnv_1a(FNV_OFFSET, self.0.as_bytes()) as usize
    }
}

/// FNV-1a's starting value.
const FNV_OFFSET: u64 = 0xcbf2_9ce4_8422_2325;

/// FNV-1a (64-bit) of `bytes`, continued from `h`.
fn fnv_1a(mut h: u64, bytes: &[u8]) -> u64 {
    for &b in bytes {
        h = (h ^ u64::from(b)).wrapping_mul(0x0100_0000_01b3);
    }
    h
}

/// `ID_BYTES` from the OS CSPRNG, hex encoded.
fn random_hex() -> String {
    let mut bytes = [0u8; ID_BYTES];
    rand::rngs::SysRng
        .try_fill_bytes(&mut bytes)
        .expect("the operating system's random source is available");
    let mut s = String::with_capacity(ID_BYTES * 2 + 2);
    for b in bytes {
        s.push(char::from(HEX[usize::from(b >> 4)]));
        s.push(char::from(HEX[usize::from(b & 0xf)]));
    }
    s
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

/// An id hashes and compares as its text (the derived `Hash` and `Eq` are `str`'s, through
/// the `Arc`), so a map keyed by ids is searched by a presented `&str` as it is.
impl std::borrow::Borrow<str> for SessionId {
    fn borrow(&self) -> &str {
        &self.0
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
    fn a_map_of_ids_is_searched_by_the_presented_text() {
        let ids: Vec<SessionId> = (0..64).map(|_| SessionId::generate()).collect();
        let map: std::collections::HashMap<SessionId, usize, foldhash::fast::RandomState> =
            ids.iter().cloned().zip(0..).collect();
        for (n, id) in ids.iter().enumerate() {
            let presented = String::from(id.as_str());
            assert!(SessionId::presentable(&presented));
            assert_eq!(map.get(presented.as_str()), Some(&n));
        }
        assert_eq!(map.get("not-an-id"), None);
        for bad in ["", "a b", "\u{7f}", "é"] {
            assert!(!SessionId::presentable(bad), "{bad:?}");
            assert_eq!(SessionId::from_presented(bad), None);
        }
        assert!(!SessionId::presentable(&"a".repeat(MAX_PRESENTED_LEN + 1)));
    }

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
    fn an_id_can_be_made_to_spread_where_asked_without_losing_its_random_part() {
        // Nothing to ask: the plain random id.
        let plain = SessionId::generate_spread(|_| 0);
        assert_eq!(plain.as_str().len(), 48);
        for slots in [2usize, 3, 4] {
            for want in 0..slots {
                let mut appended = 0;
                for _ in 0..50 {
                    let id = SessionId::generate_spread(|s| usize::from(s % slots != want));
                    assert_eq!(id.spread() % slots, want, "{slots} slots, {want}: {id:?}");
                    let text = id.as_str();
                    assert!((48..=50).contains(&text.len()), "{text}");
                    assert!(text.bytes().all(|c| c.is_ascii_hexdigit()), "{text}");
                    assert_eq!(SessionId::from_presented(text).as_ref(), Some(&id));
                    appended += usize::from(text.len() > 48);
                }
                // A random id lands where asked one time in `slots`; the rest took a suffix.
                assert!(appended > 0 && appended < 50, "{slots}/{want}: {appended}");
            }
        }
        // Two wishes at once (one spread in six meets both; some of 273 does).
        let id = SessionId::generate_spread(|s| usize::from(s % 2 != 0) + usize::from(s % 3 != 1));
        assert_eq!((id.spread() % 2, id.spread() % 3), (0, 1), "{id:?}");
        // Sixteen slots (a 16-core machine's workers): still met.
        for want in 0..16 {
            let id = SessionId::generate_spread(|s| usize::from(s % 16 != want));
            assert_eq!(id.spread() % 16, want, "{id:?}");
        }
        // Impossible wishes still give a valid id.
        let id = SessionId::generate_spread(|_| 1);
        assert_eq!(id.as_str().len(), 48);
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
