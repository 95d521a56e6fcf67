//! `Table`: a small map behind a mutex for a connection's own state (requests awaiting an
//! answer, retried requests' aliases, requests waiting for their client, a stateless link's
//! exchanges). Nothing is allocated while it is empty and its memory goes back when it
//! empties again, so an idle connection holds none: a `DashMap` allocates its cache-padded
//! shards up front (~0.5 KB per map, four maps per connection, one connection per session
//! and HTTP upstream). The lock is held only inside these methods, never across an await.
//!
//! Keys are ids the gateway itself hands out, never a peer's choice, so the map hashes with
//! foldhash (a per-process random seed) rather than SipHash, which resists chosen keys and
//! cost ~140 instructions per lookup on a forwarded call's path. The seed is the process's,
//! not each map's: a map then holds no hasher state (8 bytes in each of a connection's three
//! tables).

use std::collections::HashMap;
use std::hash::{BuildHasher, Hash};
use std::sync::{LazyLock, Mutex, MutexGuard};

use foldhash::fast::{FoldHasher, RandomState};

type Map<K, V> = HashMap<K, V, ProcessSeeded>;

/// foldhash with the seed the process drew once.
#[derive(Clone, Copy, Default)]
struct ProcessSeeded;

impl BuildHasher for ProcessSeeded {
    type Hasher = FoldHasher<'static>;

    fn build_hasher(&self) -> FoldHasher<'static> {
        static SEED: LazyLock<RandomState> = LazyLock::new(RandomState::default);
        SEED.build_hasher()
    }
}

pub struct Table<K, V>(Mutex<Map<K, V>>);

impl<K: Eq + Hash + Copy, V> Default for Table<K, V> {
    fn default() -> Self {
        Table(Mutex::new(Map::default()))
    }
}

impl<K: Eq + Hash + Copy, V> Table<K, V> {
    fn lock(&self) -> MutexGuard<'_, Map<K, V>> {
        // A panic while holding the lock leaves a map that is still consistent.
        self.0
            .lock()
            .unwrap_or_else(|poisoned| poisoned.into_inner())
    }

    pub fn insert(&self, key: K, value: V) -> Option<V> {
        self.lock().insert(key, value)
    }

    /// Removes `key`; the map's memory is given back when it is left empty.
    pub fn remove(&self, key: &K) -> Option<V> {
        let mut map = self.lock();
        let removed = map.remove(key);
        if removed.is_some() && map.is_empty() {
            map.shrink_to_fit();
        }
        removed
    }

    pub fn contains_key(&self, key: &K) -> bool {
        self.lock().contains_key(key)
    }

    /// Runs `f` on the value under `key` (the lock held meanwhile: `f` must not use the table).
    pub fn with<R>(&self, key: &K, f: impl FnOnce(&V) -> R) -> Option<R> {
        self.lock().get(key).map(f)
    }

    /// The keys whose values match `pick`.
    pub fn keys_where(&self, pick: impl Fn(&V) -> bool) -> Vec<K> {
        self.lock()
            .iter()
            .filter(|(_, v)| pick(v))
            .map(|(k, _)| *k)
            .collect()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn an_emptied_table_holds_no_memory() {
        let t: Table<u64, u64> = Table::default();
        assert_eq!(t.lock().capacity(), 0);
        t.insert(1, 10);
        t.insert(2, 20);
        assert_eq!(t.with(&1, |v| *v), Some(10));
        assert_eq!(t.remove(&1), Some(10));
        assert!(t.lock().capacity() > 0, "still holds 2");
        assert_eq!(t.keys_where(|v| *v == 20), vec![2]);
        assert_eq!(t.remove(&2), Some(20));
        assert_eq!(t.lock().capacity(), 0);
        assert!(!t.contains_key(&2));
        assert_eq!(t.remove(&2), None);
    }
}
