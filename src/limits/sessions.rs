//! Session-level caps: live sessions per user and per tenant, the handshake deadline,
//! per-session processes, requests in flight per session, batch length.

use crate::cluster::Redis;

/// The session counters: in Redis when the store is, else in the process.
pub struct SessionCaps {
    #[allow(dead_code)] // filled in by the session caps
    redis: Option<Redis>,
}

impl SessionCaps {
    pub fn new(redis: Option<Redis>) -> SessionCaps {
        SessionCaps { redis }
    }
}
