//! `Catalog`: the pages of an upstream's lists (tools, prompts, resources, templates) cached in
//! the public form clients see, keyed by the client capabilities they were fetched with and the
//! upstream cursor. Dropped on `list_changed`, on upstream re-initialization, and after a TTL.

use std::collections::HashMap;
use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::{Duration, Instant};

use dashmap::DashMap;
use serde_json::value::RawValue;

use crate::protocol::ListKind;
use crate::protocol::param_headers::ParamHeaders;

/// How long a page is trusted without a `list_changed` (for upstreams that never send one).
pub const PAGE_TTL: Duration = Duration::from_secs(300);

/// One page of one upstream's list.
#[derive(Debug, Default)]
pub struct Page {
    /// Items in public form (names/URIs namespaced), invalid ones already left out.
    pub items: Vec<Box<RawValue>>,
    /// The upstream's own identifier of each item (name, URI or URI template), same order.
    pub ids: Vec<Box<str>>,
    /// The upstream's cursor for the next page.
    pub next: Option<Box<str>>,
    /// The tools of the page that mirror arguments into `Mcp-Param-*` headers, by the
    /// upstream's own name: read from their `inputSchema` once, when the page is fetched.
    pub param_headers: HashMap<Box<str>, Arc<ParamHeaders>>,
}

#[derive(Debug, Clone, PartialEq, Eq, Hash)]
pub struct PageKey {
    pub kind: ListKind,
    /// Hash of the client capabilities the list was fetched with (0 for shared connections).
    pub fingerprint: u64,
    /// The upstream cursor of the page (`None` for the first).
    pub cursor: Option<Box<str>>,
}

struct Cached {
    page: Arc<Page>,
    fetched: Instant,
}

#[derive(Default)]
pub struct Catalog {
    pages: DashMap<PageKey, Cached>,
    generations: [AtomicU64; 4],
}

impl std::fmt::Debug for Catalog {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "Catalog({} pages)", self.pages.len())
    }
}

impl Catalog {
    /// A cached page that is still fresh.
    pub fn get(&self, key: &PageKey) -> Option<Arc<Page>> {
        let entry = self.pages.get(key)?;
        (entry.fetched.elapsed() < PAGE_TTL).then(|| entry.page.clone())
    }

    /// The generation of a kind: read it before fetching, pass it to [`Catalog::insert`].
    pub fn generation(&self, kind: ListKind) -> u64 {
        self.generations[kind.index()].load(Ordering::Acquire)
    }

    /// Caches a page fetched at `generation`; a page fetched before an invalidation is dropped.
    pub fn insert(&self, key: PageKey, page: Arc<Page>, generation: u64) {
        if self.generation(key.kind) == generation {
            self.pages.insert(
                key,
                Cached {
                    page,
                    fetched: Instant::now(),
                },
            );
        }
    }

    /// Forgets every page of `kind`.
    pub fn invalidate(&self, kind: ListKind) {
        self.generations[kind.index()].fetch_add(1, Ordering::AcqRel);
        self.pages.retain(|k, _| k.kind != kind);
    }

    /// The upstream's own identifiers of every `kind` item in the cached pages, sorted and
    /// without repeats (pages fetched for different client capabilities overlap); `None`
    /// while no page of `kind` is cached. For the status page: what was last listed, however
    /// old.
    pub fn listed(&self, kind: ListKind) -> Option<Vec<Box<str>>> {
        let mut ids: Vec<Box<str>> = Vec::new();
        let mut any = false;
        for entry in self.pages.iter().filter(|e| e.key().kind == kind) {
            any = true;
            ids.extend(entry.value().page.ids.iter().cloned());
        }
        ids.sort_unstable();
        ids.dedup();
        any.then_some(ids)
    }

    pub fn invalidate_all(&self) {
        for kind in ListKind::ALL {
            self.invalidate(kind);
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn key(kind: ListKind) -> PageKey {
        PageKey {
            kind,
            fingerprint: 0,
            cursor: None,
        }
    }

    #[test]
    fn invalidation_drops_pages_and_stale_inserts() {
        let c = Catalog::default();
        let g = c.generation(ListKind::Tools);
        c.insert(key(ListKind::Tools), Arc::new(Page::default()), g);
        c.insert(key(ListKind::Prompts), Arc::new(Page::default()), 0);
        assert!(c.get(&key(ListKind::Tools)).is_some());
        c.invalidate(ListKind::Tools);
        assert!(c.get(&key(ListKind::Tools)).is_none());
        assert!(c.get(&key(ListKind::Prompts)).is_some(), "other kinds stay");
        // A fetch that started before the invalidation must not repopulate the cache.
        c.insert(key(ListKind::Tools), Arc::new(Page::default()), g);
        assert!(c.get(&key(ListKind::Tools)).is_none());
    }

    #[test]
    fn listed_ids_are_the_union_of_the_pages() {
        let c = Catalog::default();
        assert_eq!(c.listed(ListKind::Tools), None, "nothing listed yet");
        let page = |ids: &[&str]| {
            Arc::new(Page {
                ids: ids.iter().map(|i| (*i).into()).collect(),
                ..Page::default()
            })
        };
        c.insert(key(ListKind::Tools), page(&["b", "a"]), 0);
        let other = PageKey {
            fingerprint: 7,
            ..key(ListKind::Tools)
        };
        c.insert(other, page(&["a", "c"]), 0);
        c.insert(key(ListKind::Prompts), page(&[]), 0);
        let ids = c.listed(ListKind::Tools).unwrap_or_default();
        assert_eq!(ids, ["a".into(), "b".into(), "c".into()] as [Box<str>; 3]);
        assert_eq!(
            c.listed(ListKind::Prompts),
            Some(vec![]),
            "listed, and empty"
        );
    }
}
