//! Resource subscriptions on a connection: on a shared one, which sessions follow which
//! upstream URI (the upstream is subscribed by the first, unsubscribed after the last); and
//! the gateway's own `subscriptions/listen` on upstreams of the stateless revision
//! (2026-07-28), which have no GET stream and no `resources/subscribe`, and send changes only
//! to a client that listens: one long-lived request per connection asking for every list
//! change and for the resources its sessions subscribed to, whose notifications are routed
//! like any unsolicited message (cached lists invalidated, sessions told). Opened again when
//! the subscribed resources change (the old one cancelled) or when it ends (an upstream
//! restart, the HTTP exchange bound), for as long as the connection lives; given up when the
//! upstream refuses it.

use std::sync::atomic::Ordering;
use std::sync::{Arc, Weak};
use std::time::{Duration, Instant};

use serde_json::json;
use serde_json::value::RawValue;

use super::{ClientSession, Connection, InternalReply};

/// The pause before re-opening a subscription that ended, doubling up to the longest while
/// subscriptions end soon after opening.
const FIRST_PAUSE: Duration = Duration::from_millis(500);
const LONGEST_PAUSE: Duration = Duration::from_secs(30);
/// A subscription that lasted this long ended normally: the pause starts over.
const LASTED: Duration = Duration::from_secs(60);

impl Connection {
    /// Records `session` as a subscriber of `uri`; true when it is the first, i.e. the
    /// subscription must be made upstream.
    pub fn add_subscriber(&self, uri: &str, session: &Arc<impl ClientSession + 'static>) -> bool {
        let Ok(mut subs) = self.subscriptions.lock() else {
            return true;
        };
        let list = subs.entry(uri.to_owned()).or_default();
        list.retain(|w| w.strong_count() > 0);
        let first = list.is_empty();
        if !list
            .iter()
            .any(|w| std::ptr::addr_eq(w.as_ptr(), Arc::as_ptr(session)))
        {
            list.push(Arc::downgrade(session) as Weak<dyn ClientSession>);
        }
        first
    }

    /// Removes `session` from the subscribers of `uri`; true when none is left, i.e. the
    /// subscription must be ended upstream.
    pub fn remove_subscriber(&self, uri: &str, session: &dyn ClientSession) -> bool {
        let Ok(mut subs) = self.subscriptions.lock() else {
            return true;
        };
        let Some(list) = subs.get_mut(uri) else {
            return true;
        };
        list.retain(|w| w.strong_count() > 0 && !std::ptr::addr_eq(w.as_ptr(), session));
        let last = list.is_empty();
        if last {
            subs.remove(uri);
        }
        last
    }

    /// Drops a closing session from every subscription; returns the URIs nobody follows now.
    pub fn forget_subscriber(&self, session: &dyn ClientSession) -> Vec<String> {
        let Ok(mut subs) = self.subscriptions.lock() else {
            return Vec::new();
        };
        let mut orphaned = Vec::new();
        subs.retain(|uri, list| {
            list.retain(|w| w.strong_count() > 0 && !std::ptr::addr_eq(w.as_ptr(), session));
            if list.is_empty() {
                orphaned.push(uri.clone());
                false
            } else {
                true
            }
        });
        orphaned
    }

    /// The upstream URIs some session subscribed to.
    pub(super) fn subscribed_uris(&self) -> Vec<String> {
        self.subscriptions
            .lock()
            .map(|s| s.keys().cloned().collect())
            .unwrap_or_default()
    }

    pub(super) fn subscribers(&self, uri: &str) -> Vec<Arc<dyn ClientSession>> {
        self.subscriptions
            .lock()
            .ok()
            .and_then(|subs| {
                subs.get(uri)
                    .map(|l| l.iter().filter_map(Weak::upgrade).collect())
            })
            .unwrap_or_default()
    }

    /// Keeps (once) the gateway's subscription open on this stateless connection.
    pub fn subscribe(self: &Arc<Self>) {
        if !self.is_stateless() || self.subscribed.swap(true, Ordering::AcqRel) {
            return;
        }
        tokio::spawn(keep_listening(Arc::downgrade(self)));
    }

    /// A session's `resources/subscribe` (or unsubscribe) of `uri` on a stateless upstream:
    /// followed through the gateway's subscription, opened again with the new set when the
    /// set changes.
    pub fn follow_resource(
        self: &Arc<Self>,
        uri: &str,
        session: &Arc<impl ClientSession + 'static>,
        on: bool,
    ) {
        let changed = if on {
            self.add_subscriber(uri, session)
        } else {
            self.remove_subscriber(uri, &**session)
        };
        if self.subscribed.load(Ordering::Acquire) {
            if changed {
                self.resubscribe.notify_one();
            }
        } else {
            self.subscribe();
        }
    }

    /// The resources followed changed (a session left): the subscription is renewed.
    pub fn resources_changed(&self) {
        if self.subscribed.load(Ordering::Acquire) {
            self.resubscribe.notify_one();
        }
    }

    /// What the gateway listens for: every list change, and the resources followed.
    fn listen_filter(&self) -> Option<Box<RawValue>> {
        let mut uris = self.subscribed_uris();
        uris.sort();
        let mut notifications = json!({
            "toolsListChanged": true,
            "promptsListChanged": true,
            "resourcesListChanged": true,
        });
        if !uris.is_empty() {
            notifications["resourceSubscriptions"] = json!(uris);
        }
        serde_json::value::to_raw_value(&json!({ "notifications": notifications })).ok()
    }
}

async fn keep_listening(conn: Weak<Connection>) {
    let mut pause = FIRST_PAUSE;
    loop {
        let Some(c) = conn.upgrade() else { return };
        let Some(filter) = c.listen_filter() else {
            return;
        };
        let name = c.info.name.clone();
        let opened = Instant::now();
        let (id, rx) = match c.open_internal("subscriptions/listen", Some(&filter)).await {
            Ok(sent) => sent,
            Err(e) => {
                drop(c);
                tracing::debug!(upstream = %name, error = %e, "subscriptions/listen not sent");
                pause = (pause * 2).min(LONGEST_PAUSE);
                tokio::time::sleep(pause).await;
                continue;
            }
        };
        // Hold no strong reference while listening: the connection may go away (its pending
        // requests fail then, which ends the wait). A change while the request was being sent
        // left a permit: it is seen at once.
        let resubscribe = c.resubscribe.clone();
        drop(c);
        let answer = tokio::select! {
            answer = rx => answer.ok(),
            () = resubscribe.notified() => {
                // The resources followed changed: this subscription ends, a new one opens.
                if let Some(c) = conn.upgrade() {
                    c.cancel(id, "the subscription changed");
                }
                pause = FIRST_PAUSE;
                continue;
            }
        };
        match answer {
            Some(Ok(InternalReply::Error(e))) => {
                tracing::info!(upstream = %name, error = e.get(), "the upstream refuses subscriptions/listen: its changes are not followed");
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
