//! The Redis backend of the live-session counts (Redis store): a sorted set per user budget
//! and one per tenant, changed by one script (`count.lua`) in one round trip, atomically, on
//! Redis's clock, so every replica counts the same sessions.

use std::sync::LazyLock;
use std::time::Duration;

use super::{Counted, Outcome};
use crate::cluster::Redis;
use crate::session::StoreError;

/// Loaded once per Redis (`EVALSHA`, with `EVAL` when Redis does not know it yet).
static SCRIPT: LazyLock<::redis::Script> =
    LazyLock::new(|| ::redis::Script::new(include_str!("count.lua")));

pub struct SharedSessions {
    redis: Redis,
}

/// What the script is asked to do.
#[derive(Clone, Copy)]
pub enum Op {
    Admit { per_user: u32, tenant: Option<u32> },
    Refresh,
    Release,
}

impl SharedSessions {
    pub fn new(redis: Redis) -> SharedSessions {
        SharedSessions { redis }
    }

    /// Runs `op` for `session`; entries lapse `ttl` after they were added or refreshed.
    pub async fn run(
        &self,
        session: &Counted<'_>,
        op: Op,
        ttl: Duration,
    ) -> Result<Outcome, StoreError> {
        let keys = &self.redis.keys;
        let (name, per_user, tenant) = match op {
            Op::Admit { per_user, tenant } => ("admit", per_user, tenant.unwrap_or(0)),
            Op::Refresh => ("refresh", 0, 0),
            Op::Release => ("release", 0, 0),
        };
        let mut invocation = SCRIPT.prepare_invoke();
        invocation
            .key(keys.session_count(session.tenant, Some(session.budget)))
            .key(keys.session_count(session.tenant, None))
            .arg(name)
            .arg(session.id)
            .arg(u64::try_from(ttl.as_millis()).unwrap_or(u64::MAX).max(1))
            .arg(per_user)
            .arg(tenant);
        let mut conn = self.redis.conn.clone();
        let (refused, sessions): (u8, u64) = self
            .redis
            .run("limit_sessions", invocation.invoke_async(&mut conn))
            .await?;
        Ok(match refused {
            1 => Outcome::UserFull,
            2 => Outcome::TenantFull,
            _ => Outcome::Counted { sessions },
        })
    }
}
