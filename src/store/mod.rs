//! What a client session is durably, below every layer that keeps one: its id (`SessionId`,
//! from the CSPRNG), its key in any store (`SessionKey`: tenant, user and id), its record
//! (`SessionRecord`, with the upstream HTTP sessions it continues), the `SessionStore`
//! contract and `StoreError`; a gateway-run task's record (`TaskRecord`, `task.rs`). The backends are above: `session::memory` and
//! `cluster::RedisSessionStore`, chosen by `session::SessionBackend`.

mod contract;
mod id;
mod record;
mod task;

pub use contract::{SessionKey, SessionStore, StoreError};
pub use id::{HashedId, SessionId};
pub use record::{ClientTransport, SessionRecord, UpstreamSessionRecord};
pub use task::{TaskRecord, TaskStatus};
