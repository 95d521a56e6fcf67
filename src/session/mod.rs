//! Client sessions: secure ids, the record kept in a `SessionStore` (keyed by tenant, user and
//! id), and the per-replica live state (`LiveSession`) that holds connections and streams.

mod id;
mod live;
pub mod memory;
mod record;
mod store;

pub use id::{HashedId, SessionId};
pub use live::{LiveSession, ServerRequestRoute};
pub use record::{SessionRecord, UpstreamSessionRecord};
pub use store::{SessionBackend, SessionKey, SessionStore, StoreError};
