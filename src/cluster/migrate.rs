//! Keyspace migrations: the scripts in `migrations/`, applied in order by `switchyard migrate`
//! (idempotent, each recorded), and the startup check of the recorded layout.

use std::time::{SystemTime, UNIX_EPOCH};

use super::conn::Node;
use super::{LAYOUT_VERSION, Redis};
use crate::store::StoreError;

/// Every migration: (layout version it produces, script).
pub const MIGRATIONS: &[(u32, &str)] =
    &[(1, include_str!("../../migrations/0001_initial_layout.lua"))];

/// What the keyspace says about its layout.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Layout {
    /// The layout this build uses.
    Current,
    /// Older (or empty): `switchyard migrate` must run first.
    Behind { found: u32 },
    /// Written by a newer gateway: this build must not touch it.
    Ahead { found: u32 },
}

/// What a keyspace without a layout record holds.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Unrecorded {
    /// No key of this gateway at all: a new Redis, or a failover to a node without data.
    Empty,
    /// Only keys of this build's layout: the record alone was lost.
    CurrentOnly,
    /// Keys of another layout (or too many keys to tell): `switchyard migrate` must decide.
    Other,
}

/// Bound on the `SCAN` steps spent looking at a keyspace without a layout record.
const MAX_SCAN_STEPS: usize = 10_000;

impl Redis {
    /// What the keyspace holds under this gateway's prefix, looked at when it has no layout
    /// record (bounded: a keyspace too large to look through counts as `Other`). On a cluster
    /// every primary is scanned (`SCAN` sees one node's keys).
    pub async fn unrecorded(&self) -> Result<Unrecorded, StoreError> {
        let pattern = self.keys.all_pattern();
        let mut conn = self.conn.clone();
        let nodes: Vec<Option<Node>> = match self
            .run("cluster_nodes", async move { conn.primaries().await })
            .await?
        {
            Some(primaries) => primaries.into_iter().map(Some).collect(),
            None => vec![None],
        };
        let mut found = false;
        let mut steps = 0;
        for node in &nodes {
            let mut cursor: u64 = 0;
            loop {
                steps += 1;
                if steps > MAX_SCAN_STEPS {
                    return Ok(Unrecorded::Other);
                }
                let mut conn = self.conn.clone();
                let mut scan = redis::cmd("SCAN");
                scan.arg(cursor)
                    .arg("MATCH")
                    .arg(&pattern)
                    .arg("COUNT")
                    .arg(1000);
                let (next, keys): (u64, Vec<String>) = self
                    .run(
                        "scan",
                        async move { conn.query_node(node.as_ref(), scan).await },
                    )
                    .await?;
                if keys.iter().any(|k| !self.keys.is_current_layout(k)) {
                    return Ok(Unrecorded::Other);
                }
                found |= !keys.is_empty();
                if next == 0 {
                    break;
                }
                cursor = next;
            }
        }
        Ok(if found {
            Unrecorded::CurrentOnly
        } else {
            Unrecorded::Empty
        })
    }

    /// Brings a keyspace without a layout record to this build's layout when that is safe (it
    /// is empty, or holds only keys of this layout): a replica starting on a fresh Redis, or
    /// after a failover to a node that lost everything, needs no manual step. Returns whether
    /// it did.
    pub async fn initialize_if_unrecorded(&self) -> Result<bool, String> {
        let state = self.unrecorded().await.map_err(|e| e.to_string())?;
        match state {
            Unrecorded::Other => Ok(false),
            Unrecorded::Empty | Unrecorded::CurrentOnly => {
                let applied = self.migrate().await?;
                tracing::warn!(
                    layout = LAYOUT_VERSION,
                    keyspace = ?state,
                    applied = ?applied,
                    "the Redis keyspace had no layout record; initialized it"
                );
                Ok(true)
            }
        }
    }

    /// The recorded layout relative to this build.
    pub async fn layout(&self) -> Result<Layout, StoreError> {
        let mut conn = self.conn.clone();
        let key = self.keys.layout();
        let found: Option<u32> = self
            .run("layout", async move {
                redis::cmd("GET").arg(&key).query_async(&mut conn).await
            })
            .await?;
        let found = found.unwrap_or(0);
        Ok(match found.cmp(&LAYOUT_VERSION) {
            std::cmp::Ordering::Equal => Layout::Current,
            std::cmp::Ordering::Less => Layout::Behind { found },
            std::cmp::Ordering::Greater => Layout::Ahead { found },
        })
    }

    /// Applies the missing migrations in order; returns the versions applied now (empty when
    /// the keyspace was already current). Refuses a layout newer than this build.
    pub async fn migrate(&self) -> Result<Vec<u32>, String> {
        if let Layout::Ahead { found } = self.layout().await.map_err(|e| e.to_string())? {
            return Err(format!(
                "the keyspace has layout {found}, newer than this build's {LAYOUT_VERSION}; use a newer switchyard"
            ));
        }
        let mut applied = Vec::new();
        for (version, script) in MIGRATIONS {
            let now = SystemTime::now()
                .duration_since(UNIX_EPOCH)
                .map_or(0, |d| d.as_millis() as u64);
            let mut conn = self.conn.clone();
            let (layout, migrations) = (self.keys.layout(), self.keys.migrations());
            let changed: i64 = self
                .run("migrate", async move {
                    redis::Script::new(script)
                        .key(layout)
                        .key(migrations)
                        .arg(now)
                        .arg(*version)
                        .invoke_async(&mut conn)
                        .await
                })
                .await
                .map_err(|e| format!("migration {version} failed: {e}"))?;
            if changed == 1 {
                applied.push(*version);
            }
        }
        Ok(applied)
    }
}
