//! A request's head as the MCP listener's front reads it: hyper's `Parts` and the connection
//! the request came on, carried side by side. (As a request extension, the connection cost
//! every request an extension map: three allocations and their frees, ~650 instructions of a
//! forwarded call.)

use std::ops::Deref;

use axum::http::request::Parts;

use crate::listener::ConnInfo;

/// The head of a request: its `Parts` (what it derefs to) and its connection.
#[derive(Debug)]
pub struct Head {
    parts: Parts,
    conn: Option<ConnInfo>,
}

impl Head {
    /// The head of a request with `parts` that came on `conn` (`None`: built in-process).
    pub fn new(parts: Parts, conn: Option<ConnInfo>) -> Head {
        Head { parts, conn }
    }

    /// The connection the request came on; `None` for a request built in-process (tests
    /// driving the front directly).
    pub fn conn(&self) -> Option<&ConnInfo> {
        self.conn.as_ref()
    }

    /// Whether the request came over TLS (a request built in-process did not).
    pub fn tls(&self) -> bool {
        self.conn.is_some_and(|c| c.tls)
    }
}

impl Deref for Head {
    type Target = Parts;

    fn deref(&self) -> &Parts {
        &self.parts
    }
}
