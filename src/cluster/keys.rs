//! The Redis keyspace, layout version 1 (see `migrations/`). Every per-session key carries the
//! hash tag `{<tenant>:<user>:<session>}`: a session id alone names nothing, and on a Redis
//! Cluster all keys of a session live on one shard.

use crate::store::{SessionId, SessionKey};

/// The keyspace layout this build reads and writes.
pub const LAYOUT_VERSION: u32 = 1;

#[derive(Debug, Clone)]
pub struct Keys {
    prefix: String,
    /// On a Redis Cluster the layout records share the hash tag `{<prefix>}`, so the
    /// migration scripts, which touch both, run on one slot.
    cluster: bool,
}

impl Keys {
    /// A `SCAN MATCH` pattern for every key of this gateway (glob characters of the prefix
    /// escaped).
    pub fn all_pattern(&self) -> String {
        let mut p = String::with_capacity(self.prefix.len() + 3);
        for c in self.prefix.chars() {
            if matches!(c, '*' | '?' | '[' | ']' | '\\') {
                p.push('\\');
            }
            p.push(c);
        }
        p.push_str(":*");
        p
    }

    /// Whether `key` belongs to this build's layout (`<prefix>:v<LAYOUT_VERSION>:`) or to the
    /// layout records (`<prefix>:meta:`).
    pub fn is_current_layout(&self, key: &str) -> bool {
        key.strip_prefix(self.prefix.as_str())
            .and_then(|rest| rest.strip_prefix(':'))
            .is_some_and(|rest| {
                rest.starts_with("meta:")
                    || rest
                        .strip_prefix('v')
                        .and_then(|r| r.split_once(':'))
                        .is_some_and(|(v, _)| v == LAYOUT_VERSION.to_string())
            })
    }

    /// The keyspace on one Redis primary.
    pub fn new(prefix: &str) -> Keys {
        Keys {
            prefix: prefix.to_owned(),
            cluster: false,
        }
    }

    /// The keyspace on a Redis Cluster: the same keys, but for the layout records' hash tag.
    pub fn for_cluster(prefix: &str) -> Keys {
        Keys {
            prefix: prefix.to_owned(),
            cluster: true,
        }
    }

    /// `{<tenant>:<user>:<session>}` with `%`, `:`, `{` and `}` escaped in each part, so no
    /// two (tenant, user, id) triples share a key (a user `a:b` with id `c` is not user `a`
    /// with id `b:c`) and the hash tag always spans the whole triple.
    fn tag(key: &SessionKey) -> String {
        let mut t = String::with_capacity(Self::tag_len(key));
        Self::tag_into(&mut t, key);
        t
    }

    /// The length of `tag(key)` when nothing needs an escape (a capacity).
    fn tag_len(key: &SessionKey) -> usize {
        key.tenant.len() + key.user.len() + key.id.as_str().len() + 4
    }

    /// Appends `tag(key)` to `out`.
    fn tag_into(out: &mut String, key: &SessionKey) {
        out.push('{');
        escape_into(out, &key.tenant);
        out.push(':');
        escape_into(out, &key.user);
        out.push(':');
        escape_into(out, key.id.as_str());
        out.push('}');
    }

    /// The session record (JSON), with the session's sliding TTL.
    pub fn session(&self, key: &SessionKey) -> String {
        format!("{}:v1:sess:{}", self.prefix, Self::tag(key))
    }

    /// A gateway-run task's record (JSON), expiring with the task's ttl.
    pub fn task(&self, key: &SessionKey) -> String {
        format!("{}:v1:task:{}", self.prefix, Self::tag(key))
    }

    /// Answers for a gateway-run task's questions taken by another replica than the one
    /// running it (a list of `inputResponses` objects), until that one takes them.
    pub fn task_input(&self, key: &SessionKey) -> String {
        format!("{}:v1:task-in:{}", self.prefix, Self::tag(key))
    }

    /// `<tenant>\n<user>` owning a session id: only consulted to log a presented id that
    /// belongs to someone else (never to find a session).
    pub fn owner(&self, id: &SessionId) -> String {
        let mut k = format!("{}:v1:sid:", self.prefix);
        escape_into(&mut k, id.as_str());
        k
    }

    /// One SSE stream's recorded events (a Redis Stream, entry ids `0-<seq>`).
    pub fn events(&self, key: &SessionKey, stream: &str) -> String {
        // Made per stream opened (each streamed call's): written in place, not formatted.
        const KIND: &str = ":v1:ev:";
        let len = self.prefix.len() + KIND.len() + Self::tag_len(key) + 1 + stream.len();
        let mut k = String::with_capacity(len);
        k.push_str(&self.prefix);
        k.push_str(KIND);
        Self::tag_into(&mut k, key);
        k.push(':');
        escape_into(&mut k, stream);
        k
    }

    /// The replica holding the session's GET stream.
    pub fn get_holder(&self, key: &SessionKey) -> String {
        format!("{}:v1:get:{}", self.prefix, Self::tag(key))
    }

    /// A replica's own pub/sub channel.
    pub fn replica_channel(&self, replica: &str) -> String {
        format!("{}:v1:replica:{replica}", self.prefix)
    }

    /// The channel every replica listens to.
    pub fn broadcast_channel(&self) -> String {
        format!("{}:v1:broadcast", self.prefix)
    }

    /// The secret every replica derives its tenants' signing keys from (cursors, MRTR states,
    /// stateless session ids): created by the first replica, read by the others.
    pub fn signing_secret(&self) -> String {
        format!("{}:v1:signing-secret", self.prefix)
    }

    /// `<prefix>:v1:lim:{<tenant>}:` (tenant escaped like session tags): every limit key of a
    /// tenant carries the tenant's hash tag, so a script over several of them stays on one
    /// Redis Cluster slot.
    fn limits_of(&self, tenant: &str) -> String {
        let mut k = String::with_capacity(self.prefix.len() + tenant.len() + 64);
        k.push_str(&self.prefix);
        k.push_str(":v1:lim:{");
        escape_into(&mut k, tenant);
        k.push_str("}:");
        k
    }

    /// A token bucket of a tenant's rate limits (the time it is full again, µs; expires
    /// then): `bucket` names the limit (`rpu`, `rt`, `c<selection>`), `budget` the user whose
    /// bucket it is (`None`: the tenant's).
    pub fn rate_bucket(&self, tenant: &str, bucket: &str, budget: Option<&str>) -> String {
        let mut k = self.limits_of(tenant);
        k.push_str("rate:");
        k.push_str(bucket);
        if let Some(budget) = budget {
            k.push(':');
            escape_into(&mut k, budget);
        }
        k
    }

    /// A user's tool calls in one quota period (`d<days since the epoch>` or `m<yyyymm>`,
    /// UTC); expires after the period.
    pub fn quota(&self, tenant: &str, period: &str, budget: &str) -> String {
        let mut k = self.limits_of(tenant);
        k.push_str("quota:");
        k.push_str(period);
        k.push(':');
        escape_into(&mut k, budget);
        k
    }

    /// A tenant's live sessions (a sorted set: member = session id, score = when the entry
    /// expires, ms on Redis's clock): `budget` names the user whose sessions these are
    /// (`None`: every session of the tenant).
    pub fn session_count(&self, tenant: &str, budget: Option<&str>) -> String {
        let mut k = self.limits_of(tenant);
        match budget {
            Some(budget) => {
                k.push_str("sess:u:");
                escape_into(&mut k, budget);
            }
            None => k.push_str("sess:t"),
        }
        k
    }

    /// The slots leased at one gated upstream of a tenant (`limits.concurrency`): a sorted
    /// set of lease ids scored by their expiry (ms, Redis's clock); expires with its last lease.
    pub fn gate(&self, tenant: &str, upstream: &str) -> String {
        let mut k = self.limits_of(tenant);
        k.push_str("gate:");
        escape_into(&mut k, upstream);
        k
    }

    /// The applied layout version.
    pub fn layout(&self) -> String {
        self.meta("layout")
    }

    /// Applied migrations: version → time applied.
    pub fn migrations(&self) -> String {
        self.meta("migrations")
    }

    /// `<prefix>:meta:<name>`, on a cluster `<prefix>:meta:{<prefix>}:<name>` (the prefix has
    /// no braces: see the config's rules).
    fn meta(&self, name: &str) -> String {
        if self.cluster {
            format!("{}:meta:{{{}}}:{name}", self.prefix, self.prefix)
        } else {
            format!("{}:meta:{name}", self.prefix)
        }
    }
}

fn escape_into(out: &mut String, part: &str) {
    // Most parts (ids, tenants, users) hold none of the four: copied whole.
    if !part.bytes().any(|b| matches!(b, b'%' | b':' | b'{' | b'}')) {
        out.push_str(part);
        return;
    }
    for c in part.chars() {
        match c {
            '%' => out.push_str("%25"),
            ':' => out.push_str("%3A"),
            '{' => out.push_str("%7B"),
            '}' => out.push_str("%7D"),
            c => out.push(c),
        }
    }
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used)]
    use super::*;

    #[test]
    fn keys_of_the_current_layout_are_told_apart() {
        let keys = Keys::new("sy");
        assert_eq!(keys.all_pattern(), "sy:*");
        assert_eq!(Keys::new("a*b?").all_pattern(), "a\\*b\\?:*");
        for current in [
            "sy:v1:sess:{a:b:c}",
            "sy:meta:layout",
            "sy:v1:signing-secret",
        ] {
            assert!(keys.is_current_layout(current), "{current}");
        }
        for other in [
            "sy:v0:x",
            "sy:v12:x",
            "sy:legacy",
            "sy:v1",
            "sya:v1:x",
            "other:v1:x",
        ] {
            assert!(!keys.is_current_layout(other), "{other}");
        }
    }

    #[test]
    fn session_keys_carry_tenant_user_and_id_in_one_hash_tag() {
        let k = SessionKey {
            tenant: "acme".into(),
            user: "u-1".into(),
            id: SessionId::from_presented("abc").unwrap(),
        };
        let keys = Keys::new("sy");
        assert_eq!(keys.session(&k), "sy:v1:sess:{acme:u-1:abc}");
        assert_eq!(keys.get_holder(&k), "sy:v1:get:{acme:u-1:abc}");
        assert_eq!(keys.owner(&k.id), "sy:v1:sid:abc");
        assert_eq!(keys.layout(), "sy:meta:layout");
    }

    #[test]
    fn on_a_cluster_the_layout_records_share_one_slot_and_the_rest_is_unchanged() {
        let keys = Keys::for_cluster("sy");
        assert_eq!(keys.layout(), "sy:meta:{sy}:layout");
        assert_eq!(keys.migrations(), "sy:meta:{sy}:migrations");
        assert!(keys.is_current_layout(&keys.layout()));
        assert_eq!(keys.signing_secret(), Keys::new("sy").signing_secret());
        assert_eq!(keys.gate("a", "b"), Keys::new("sy").gate("a", "b"));
    }

    #[test]
    fn limit_keys_carry_the_tenant_alone_in_their_hash_tag() {
        let keys = Keys::new("sy");
        assert_eq!(
            keys.rate_bucket("acme", "rpu", Some("u:1")),
            "sy:v1:lim:{acme}:rate:rpu:u%3A1"
        );
        assert_eq!(
            keys.rate_bucket("acme", "rt", None),
            "sy:v1:lim:{acme}:rate:rt"
        );
        assert_eq!(
            keys.quota("we}ird", "d20781", "u"),
            "sy:v1:lim:{we%7Dird}:quota:d20781:u"
        );
        assert!(keys.is_current_layout(&keys.quota("a", "m202611", "u")));
        assert_eq!(
            keys.session_count("acme", Some("ip:1")),
            "sy:v1:lim:{acme}:sess:u:ip%3A1"
        );
        assert_eq!(keys.session_count("acme", None), "sy:v1:lim:{acme}:sess:t");
        assert_eq!(keys.gate("acme", "a:b"), "sy:v1:lim:{acme}:gate:a%3Ab");
    }

    #[test]
    fn separators_inside_users_and_ids_cannot_make_two_sessions_share_a_key() {
        let key = |user: &str, id: &str| SessionKey {
            tenant: "acme".into(),
            user: user.into(),
            id: SessionId::from_presented(id).unwrap(),
        };
        let keys = Keys::new("sy");
        let a = keys.session(&key("https://idp|alice:x", "y"));
        let b = keys.session(&key("https://idp|alice", "x:y"));
        assert_ne!(a, b);
        assert_eq!(a, "sy:v1:sess:{acme:https%3A//idp|alice%3Ax:y}");
        // A `}` in a user cannot end the hash tag early.
        let c = keys.session(&key("we}ird{", "z"));
        assert_eq!(c, "sy:v1:sess:{acme:we%7Dird%7B:z}");
    }

    #[test]
    fn event_stream_keys_escape_every_part_and_fit_their_capacity() {
        let key = |tenant: &str, user: &str| SessionKey {
            tenant: tenant.into(),
            user: user.into(),
            id: SessionId::from_presented("abc").unwrap(),
        };
        let keys = Keys::new("sy");
        let plain = keys.events(&key("acme", "u-1"), "s1");
        assert_eq!(plain, "sy:v1:ev:{acme:u-1:abc}:s1");
        assert_eq!(
            plain.capacity(),
            plain.len(),
            "sized once when nothing is escaped"
        );
        assert_eq!(
            keys.events(&key("a:b", "%u{}"), "s:2"),
            "sy:v1:ev:{a%3Ab:%25u%7B%7D:abc}:s%3A2"
        );
    }
}
