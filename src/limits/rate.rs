//! Token buckets and quotas: requests per user and per tenant, `tools/call` rates selected by
//! the tool itself, calls per user per day and month.

use crate::cluster::Redis;

/// The buckets and quota counters: in Redis when the store is, else in the process.
pub struct Rates {
    #[allow(dead_code)] // filled in by the rate limits
    redis: Option<Redis>,
}

impl Rates {
    pub fn new(redis: Option<Redis>) -> Rates {
        Rates { redis }
    }
}
