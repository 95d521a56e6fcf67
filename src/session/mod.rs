//! Client sessions on this replica: the per-replica live state (`LiveSession`) that holds
//! upstream connections and streams, and the store backends (`SessionBackend`: memory or
//! Redis) that keep the durable record. What a session is durably (id, key, record, the
//! store contract) is `store`, below; it is re-exported here for the layers above.

mod backend;
mod directory;
mod in_flight;
mod interned;
mod legacy;
mod live;
pub mod memory;
mod moment;
mod processes;
mod tasks;

pub use crate::store::{
    ClientTransport, HashedId, SessionId, SessionKey, SessionRecord, SessionStore, StoreError,
    TaskRecord, TaskStatus, UpstreamSessionRecord,
};
pub use backend::SessionBackend;
pub use directory::{DirectoryUsage, SessionDirectory};
pub use in_flight::{InFlight, InFlightGuard};
pub use legacy::LegacyStreams;
pub use live::{GetSlot, LiveSession, TaskNamer};
pub use processes::{ProcessCap, ProcessPermit, ProcessSource, Processes, Refusal};
pub use tasks::MemoryTasks;
