//! The in-process backend of the live-session counts (memory store): the same sets as in Redis
//! (per user budget and per tenant, session id → when the entry lapses) in a sharded map, one
//! set's lock held for one change, never two at once and never one for the whole map. Lapsed
//! entries (a session whose end was never seen) are dropped when a set is full, has doubled
//! since it was last swept, or was last swept a second ago or more, so a tenant with many
//! sessions is not walked at every admission.

use std::collections::HashMap;
use std::sync::Arc;
use std::time::{Duration, Instant};

use dashmap::DashMap;

use super::{Counted, Outcome};

/// A set's key: the tenant, and the user budget (`None`: the whole tenant's set).
type SetKey = (Arc<str>, Option<Arc<str>>);

#[derive(Default)]
pub struct LocalSessions {
    sets: DashMap<SetKey, Set>,
}

/// Session id → when its entry lapses.
#[derive(Default)]
struct Set {
    members: HashMap<Box<str>, Instant>,
    /// Size at which the next sweep of lapsed entries runs even if the set is not full.
    sweep_at: usize,
    /// When the next sweep runs anyway (`None`: at the next admission).
    next_sweep: Option<Instant>,
}

/// How often, at most, a set that is neither full nor growing is swept.
const SWEEP_EVERY: Duration = Duration::from_secs(1);

/// A set is not swept below this many entries unless it is full.
const MIN_SWEEP: usize = 1024;

impl Set {
    /// Whether one more entry fits under `max`, after dropping lapsed entries if that could
    /// make room (or the set grew enough to be worth a sweep).
    fn has_room(&mut self, max: Option<u32>, now: Instant) -> bool {
        let full = |s: &Set| max.is_some_and(|m| s.members.len() >= m as usize);
        let due = self.next_sweep.is_none_or(|at| now >= at);
        if due || full(self) || self.members.len() >= self.sweep_at.max(MIN_SWEEP) {
            self.members.retain(|_, until| *until > now);
            self.sweep_at = self.members.len() * 2;
            self.next_sweep = Some(now + SWEEP_EVERY);
        }
        !full(self)
    }
}

impl LocalSessions {
    /// Counts `session` in its user's and its tenant's set unless either is full (entries
    /// past their time dropped first); all or nothing.
    pub fn admit(
        &self,
        session: &Counted<'_>,
        per_user: u32,
        tenant: Option<u32>,
        ttl: Duration,
        now: Instant,
    ) -> Outcome {
        let lapses = now + ttl;
        let user_key = (session.tenant.clone(), Some(session.budget.clone()));
        {
            let mut user = self.sets.entry(user_key.clone()).or_default();
            if !user.has_room(Some(per_user), now) {
                return Outcome::UserFull;
            }
            user.members.insert(session.id.into(), lapses);
        }
        let mut all = self.sets.entry((session.tenant.clone(), None)).or_default();
        if !all.has_room(tenant, now) {
            drop(all);
            // Given back: the user's entry was taken first.
            self.remove(&user_key, session.id);
            return Outcome::TenantFull;
        }
        all.members.insert(session.id.into(), lapses);
        Outcome::Counted {
            sessions: all.members.len() as u64,
        }
    }

    /// Restarts the entries' time (only of entries still there).
    pub fn refresh(&self, session: &Counted<'_>, ttl: Duration, now: Instant) -> Outcome {
        for key in Self::keys(session) {
            if let Some(mut set) = self.sets.get_mut(&key)
                && let Some(until) = set.members.get_mut(session.id)
            {
                *until = now + ttl;
            }
        }
        self.count(session)
    }

    /// Takes the session out of both sets (a set left empty goes too).
    pub fn release(&self, session: &Counted<'_>) -> Outcome {
        for key in Self::keys(session) {
            self.remove(&key, session.id);
        }
        self.count(session)
    }

    fn keys(session: &Counted<'_>) -> [SetKey; 2] {
        [
            (session.tenant.clone(), Some(session.budget.clone())),
            (session.tenant.clone(), None),
        ]
    }

    fn count(&self, session: &Counted<'_>) -> Outcome {
        let sessions = self
            .sets
            .get(&(session.tenant.clone(), None))
            .map_or(0, |s| s.members.len() as u64);
        Outcome::Counted { sessions }
    }

    fn remove(&self, key: &SetKey, id: &str) {
        self.sets.remove_if_mut(key, |_, set| {
            set.members.remove(id);
            set.members.is_empty()
        });
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn counted<'a>(tenant: &'a Arc<str>, budget: &'a Arc<str>, id: &'a str) -> Counted<'a> {
        Counted { tenant, budget, id }
    }

    #[test]
    fn per_user_and_per_tenant_bounds_leave_nothing_behind_when_refused() {
        let sets = LocalSessions::default();
        let (t, a, b): (Arc<str>, Arc<str>, Arc<str>) = ("t".into(), "a".into(), "b".into());
        let ttl = Duration::from_secs(60);
        let now = Instant::now();
        assert!(matches!(
            sets.admit(&counted(&t, &a, "1"), 2, Some(3), ttl, now),
            Outcome::Counted { sessions: 1 }
        ));
        sets.admit(&counted(&t, &a, "2"), 2, Some(3), ttl, now);
        assert!(matches!(
            sets.admit(&counted(&t, &a, "3"), 2, Some(3), ttl, now),
            Outcome::UserFull
        ));
        sets.admit(&counted(&t, &b, "4"), 2, Some(3), ttl, now);
        assert!(matches!(
            sets.admit(&counted(&t, &b, "5"), 2, Some(3), ttl, now),
            Outcome::TenantFull
        ));
        // The refused session of b left no entry in b's set: after a release b has room.
        assert!(matches!(
            sets.release(&counted(&t, &a, "1")),
            Outcome::Counted { sessions: 2 }
        ));
        assert!(matches!(
            sets.admit(&counted(&t, &b, "5"), 2, Some(3), ttl, now),
            Outcome::Counted { sessions: 3 }
        ));
    }

    #[test]
    fn lapsed_entries_free_their_place_and_refresh_keeps_them() {
        let sets = LocalSessions::default();
        let (t, a): (Arc<str>, Arc<str>) = ("t".into(), "a".into());
        let ttl = Duration::from_secs(10);
        let start = Instant::now();
        sets.admit(&counted(&t, &a, "1"), 2, None, ttl, start);
        sets.admit(&counted(&t, &a, "2"), 2, None, ttl, start);
        sets.refresh(&counted(&t, &a, "2"), ttl, start + Duration::from_secs(5));
        let later = start + Duration::from_secs(11);
        // "1" lapsed, "2" was refreshed: one place.
        assert!(matches!(
            sets.admit(&counted(&t, &a, "3"), 2, None, ttl, later),
            Outcome::Counted { sessions: 2 }
        ));
        assert!(matches!(
            sets.admit(&counted(&t, &a, "4"), 2, None, ttl, later),
            Outcome::UserFull
        ));
        sets.release(&counted(&t, &a, "2"));
        sets.release(&counted(&t, &a, "3"));
        assert!(sets.sets.is_empty(), "empty sets are dropped");
    }
}
