//! The gateway's own `subscriptions/listen` on upstreams of the stateless revision
//! (2026-07-28), which have no GET stream and send list changes only to a client that
//! listens: one long-lived request per connection asking for every list change, whose
//! notifications are routed like any unsolicited message (cached lists invalidated, sessions
//! told). Re-opened when it ends (an upstream restart, the HTTP exchange bound) for as long as
//! the connection lives; given up when the upstream refuses it.

use std::sync::atomic::Ordering;
use std::sync::{Arc, Weak};
use std::time::{Duration, Instant};

use serde_json::value::RawValue;

use super::{Connection, InternalReply};

/// What the gateway listens for: every list change (resource updates are not bridged yet).
const FILTER: &str = r#"{"notifications":{"toolsListChanged":true,"promptsListChanged":true,"resourcesListChanged":true}}"#;

/// The pause before re-opening a subscription that ended, doubling up to the longest while
/// subscriptions end soon after opening.
const FIRST_PAUSE: Duration = Duration::from_millis(500);
const LONGEST_PAUSE: Duration = Duration::from_secs(30);
/// A subscription that lasted this long ended normally: the pause starts over.
const LASTED: Duration = Duration::from_secs(60);

impl Connection {
    /// Keeps (once) the gateway's subscription open on this stateless connection.
    pub fn subscribe(self: &Arc<Self>) {
        if !self.is_stateless() || self.subscribed.swap(true, Ordering::AcqRel) {
            return;
        }
        tokio::spawn(keep_listening(Arc::downgrade(self)));
    }
}

async fn keep_listening(conn: Weak<Connection>) {
    let Ok(filter) = RawValue::from_string(FILTER.to_owned()) else {
        return;
    };
    let mut pause = FIRST_PAUSE;
    loop {
        let Some(c) = conn.upgrade() else { return };
        let name = c.info.name.clone();
        let opened = Instant::now();
        let answer = match c.open_internal("subscriptions/listen", Some(&filter)).await {
            Ok(rx) => {
                // Hold no strong reference while listening: the connection may go away.
                drop(c);
                rx.await.ok()
            }
            Err(e) => {
                drop(c);
                tracing::debug!(upstream = %name, error = %e, "subscriptions/listen not sent");
                None
            }
        };
        match answer {
            Some(Ok(InternalReply::Error(e))) => {
                tracing::info!(upstream = %name, error = e.get(), "the upstream refuses subscriptions/listen: its list changes are not followed");
                return;
            }
            Some(Ok(InternalReply::Result(_))) => {
                tracing::debug!(upstream = %name, "the upstream ended its subscription");
            }
            Some(Err(e)) => tracing::debug!(upstream = %name, error = %e, "subscription ended"),
            None => {}
        }
        pause = if opened.elapsed() >= LASTED {
            FIRST_PAUSE
        } else {
            (pause * 2).min(LONGEST_PAUSE)
        };
        tokio::time::sleep(pause).await;
    }
}
