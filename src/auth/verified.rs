//! Access tokens already validated, remembered per worker thread until they expire, so a host
//! that sends the same token with every request pays for its signature check once per thread
//! and key set, not per request (an RS256 check is ~230 µs of CPU with the pure-Rust RSA code;
//! a remembered token is a hash, a comparison and a clock reading).
//!
//! Only a token that passed every check is remembered, with the validity window its claims
//! give (`nbf`/`exp` widened by the tenant's clock skew, as the check itself applies them), the
//! authenticator that checked it (a reloaded tenant's is a new one), the audience it was
//! checked for, and the key set it was checked against: a recalled token is refused to the
//! full check once the window has passed or the issuer's key set was loaded again (a key
//! withdrawn by the issuer stops its tokens within the set's refresh), and nothing a request
//! sends can put a token into the memo without its signature. Per thread and direct-mapped by
//! the token's hash (a token whose slot is taken replaces what is there), with no lock.

use std::cell::RefCell;
use std::hash::BuildHasher;
use std::sync::Arc;

use super::Grants;

/// Tokens remembered per worker thread (slots, direct-mapped).
pub const SLOTS: usize = 1024;
/// Longer tokens are checked at every request, never remembered.
pub const MAX_TOKEN: usize = 4096;

/// A validated token and what it established.
struct Entry {
    /// The `Authenticator` that checked it (`Authenticator::id`).
    authenticator: u64,
    /// The key set it was checked against (`KeySet::generation`).
    keys: u64,
    /// The audience it was checked for, when it is the request's resource (no configured
    /// audiences): a request for another resource URI checks again.
    audience: Option<Box<str>>,
    token: Box<str>,
    /// Unix seconds, inclusive: the claims' `nbf` minus the skew, `exp` plus it.
    from: u64,
    until: u64,
    user: Arc<str>,
    grants: Arc<Grants>,
}

/// Where a token is to be found or put: who asks, and for what.
pub(super) struct Probe<'a> {
    pub authenticator: u64,
    pub keys: u64,
    pub audience: Option<&'a str>,
    pub token: &'a str,
}

/// A validated token's window: unix seconds, inclusive.
pub(super) struct Window {
    pub from: u64,
    pub until: u64,
}

struct Memo {
    slots: Vec<Option<Entry>>,
    hasher: foldhash::quality::RandomState,
}

impl Memo {
    fn slot(&self, token: &str) -> usize {
        // `SLOTS` is a power of two.
        (self.hasher.hash_one(token) as usize) & (SLOTS - 1)
    }
}

thread_local! {
    static MEMO: RefCell<Memo> = RefCell::new(Memo {
        slots: Vec::new(),
        hasher: foldhash::quality::RandomState::default(),
    });
}

/// The user and grants of `probe.token` if this thread validated it for the same authenticator,
/// key set and audience, and `now` (unix seconds) is within its window.
pub(super) fn recall(probe: &Probe<'_>, now: u64) -> Option<(Arc<str>, Arc<Grants>)> {
    if probe.token.len() > MAX_TOKEN {
        return None;
    }
    MEMO.with(|memo| {
        let memo = memo.borrow();
        let entry = memo.slots.get(memo.slot(probe.token))?.as_ref()?;
        (entry.authenticator == probe.authenticator
            && entry.keys == probe.keys
            && (entry.from..=entry.until).contains(&now)
            && entry.audience.as_deref() == probe.audience
            && *entry.token == *probe.token)
            .then(|| (entry.user.clone(), entry.grants.clone()))
    })
}

/// Remembers a token that passed every check.
pub(super) fn remember(probe: &Probe<'_>, window: Window, user: &Arc<str>, grants: &Arc<Grants>) {
    if probe.token.len() > MAX_TOKEN || window.from > window.until {
        return;
    }
    MEMO.with(|memo| {
        let mut memo = memo.borrow_mut();
        if memo.slots.is_empty() {
            memo.slots.resize_with(SLOTS, || None);
        }
        let slot = memo.slot(probe.token);
        memo.slots[slot] = Some(Entry {
            authenticator: probe.authenticator,
            keys: probe.keys,
            audience: probe.audience.map(Box::from),
            token: probe.token.into(),
            from: window.from,
            until: window.until,
            user: user.clone(),
            grants: grants.clone(),
        });
    });
}

#[cfg(test)]
mod tests {
    use super::*;

    fn probe<'a>(token: &'a str, audience: Option<&'a str>) -> Probe<'a> {
        Probe {
            authenticator: 7,
            keys: 3,
            audience,
            token,
        }
    }

    fn remembered(token: &str) -> (Arc<str>, Arc<Grants>) {
        let user: Arc<str> = "u-1".into();
        let grants = Arc::new(Grants::default());
        remember(
            &probe(token, Some("https://a/mcp")),
            Window {
                from: 100,
                until: 200,
            },
            &user,
            &grants,
        );
        (user, grants)
    }

    #[test]
    fn a_remembered_token_is_recalled_only_as_it_was_checked() {
        let (user, grants) = remembered("tok-a");
        let (got_user, got_grants) =
            recall(&probe("tok-a", Some("https://a/mcp")), 150).expect("recalled");
        assert!(Arc::ptr_eq(&got_user, &user) && Arc::ptr_eq(&got_grants, &grants));
        // The window's ends are inside it; a second either side is not.
        assert!(recall(&probe("tok-a", Some("https://a/mcp")), 100).is_some());
        assert!(recall(&probe("tok-a", Some("https://a/mcp")), 200).is_some());
        assert!(recall(&probe("tok-a", Some("https://a/mcp")), 99).is_none());
        assert!(recall(&probe("tok-a", Some("https://a/mcp")), 201).is_none());
        // Another audience, key set or authenticator: checked again.
        assert!(recall(&probe("tok-a", Some("https://b/mcp")), 150).is_none());
        assert!(recall(&probe("tok-a", None), 150).is_none());
        let mut other = probe("tok-a", Some("https://a/mcp"));
        other.keys = 4;
        assert!(recall(&other, 150).is_none());
        other.keys = 3;
        other.authenticator = 8;
        assert!(recall(&other, 150).is_none());
        // A token is never found by another one's slot, even a prefix of it.
        assert!(recall(&probe("tok-", Some("https://a/mcp")), 150).is_none());
        assert!(recall(&probe("tok-ab", Some("https://a/mcp")), 150).is_none());
    }

    #[test]
    fn other_threads_and_long_tokens_check_again() {
        remembered("tok-thread");
        let elsewhere = std::thread::spawn(|| {
            recall(&probe("tok-thread", Some("https://a/mcp")), 150).is_some()
        });
        assert!(
            !elsewhere.join().expect("the other thread ends"),
            "each thread remembers its own"
        );
        let long = "x".repeat(MAX_TOKEN + 1);
        remembered(&long);
        assert!(recall(&probe(&long, Some("https://a/mcp")), 150).is_none());
    }

    #[test]
    fn the_memo_holds_at_most_its_slots() {
        for n in 0..3 * SLOTS {
            remembered(&format!("tok-{n}"));
        }
        MEMO.with(|memo| assert_eq!(memo.borrow().slots.len(), SLOTS));
        // The last one is there (it took its slot).
        let last = format!("tok-{}", 3 * SLOTS - 1);
        assert!(recall(&probe(&last, Some("https://a/mcp")), 150).is_some());
    }
}
