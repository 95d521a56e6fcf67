//! Calls in flight at an upstream: a cap with a bounded queue and a wait limit, to protect
//! backends.

use crate::cluster::Redis;

/// The upstreams' gates: slots leased in Redis when the store is, else in the process.
pub struct Gates {
    #[allow(dead_code)] // filled in by the concurrency caps
    redis: Option<Redis>,
}

impl Gates {
    pub fn new(redis: Option<Redis>) -> Gates {
        Gates { redis }
    }
}
