//! Client sessions: secure ids, the record kept in a `SessionStore` (keyed by tenant, user and
//! id), and the per-replica live state (`LiveSession`) that holds connections and streams.

mod id;
mod legacy;
mod live;
pub mod memory;
mod record;
mod server_requests;
mod store;

pub use id::{HashedId, SessionId};
pub use legacy::LegacyStreams;
pub use live::{GetSlot, LiveSession, ServerRequestRoute};
pub use record::{ClientTransport, SessionRecord, UpstreamSessionRecord};
pub use store::{SessionBackend, SessionKey, SessionStore, StoreError};
