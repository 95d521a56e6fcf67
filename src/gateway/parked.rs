//! The requests of this replica parked for their stateless clients' retries (multi
//! round-trip requests, `router::mrtr`), and the retries going on across replicas: a
//! registry of the process, held by the `Gateway`. What a retry's `requestState` says and
//! how it is checked is the router's; this is where the parked request waits, and where the
//! events of a retry another replica continues arrive (`on_resumed`, from the bus).

use std::collections::HashMap;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use serde_json::Value;
use tokio::sync::{mpsc, oneshot};

use crate::session::LiveSession;
use crate::upstream::ForwardStream;

/// How long a parked request waits for the client's retry.
pub const PARK_FOR: Duration = Duration::from_secs(600);

/// One question of an upstream to its client, waiting for the client's answer.
pub struct Question {
    /// The key in `inputRequests` (the gateway's id for the upstream's request, as text).
    pub key: String,
    /// The gateway's id of the upstream's request, raw JSON (how the session routes answers).
    pub raw_id: String,
    /// `{"method": .., "params": ..}`.
    pub request: Value,
}

/// A forwarded request waiting for its client's answers.
pub struct Parked {
    pub session: Arc<LiveSession>,
    pub stream: ForwardStream,
    pub questions: Vec<Question>,
}

/// The requests of this replica parked for their clients' retries, and the retries going on
/// across replicas (a shared handle).
#[derive(Default, Clone)]
pub struct Interactions {
    parked: Arc<Mutex<HashMap<String, Parked>>>,
    /// Retries received here, continued by another replica: their events, by key.
    remote: Arc<Mutex<HashMap<String, RelaySender>>>,
    /// Requests continued here for a retry received by another replica: dropping the sender
    /// stops one (its client went away).
    continuing: Arc<Mutex<HashMap<String, oneshot::Sender<()>>>>,
}

/// One event of a request continued on another replica: an empty message says it goes on.
pub struct Resumed {
    pub message: bytes::Bytes,
    pub done: bool,
    pub status: u16,
}

/// Events relayed from another replica beyond which notifications are dropped (a slow client
/// behind a flood); the final event and the holder's beats always pass.
const RELAY_BACKLOG: usize = 1024;

/// The sending half of a relayed retry's events, with the count of those not read yet.
#[derive(Clone)]
struct RelaySender {
    tx: mpsc::UnboundedSender<Resumed>,
    queued: Arc<std::sync::atomic::AtomicUsize>,
}

/// The events of a retry continued by another replica, in order.
pub struct RelayReceiver {
    rx: mpsc::UnboundedReceiver<Resumed>,
    queued: Arc<std::sync::atomic::AtomicUsize>,
}

impl RelayReceiver {
    pub async fn recv(&mut self) -> Option<Resumed> {
        let event = self.rx.recv().await;
        if event.is_some() {
            self.queued
                .fetch_sub(1, std::sync::atomic::Ordering::Relaxed);
        }
        event
    }
}

/// Ends the wait for a retry's events when dropped.
pub struct RemoteWait {
    remote: Arc<Mutex<HashMap<String, RelaySender>>>,
    pub key: String,
}

impl Drop for RemoteWait {
    fn drop(&mut self) {
        if let Ok(mut m) = self.remote.lock() {
            m.remove(&self.key);
        }
    }
}

impl Interactions {
    /// Parks `parked` under `handle` until the client's retry takes it, at most `PARK_FOR`
    /// (dropped then: its stream's drop cancels the upstream request nobody came back for).
    pub fn park(&self, handle: String, parked: Parked) {
        parked.stream.set_waiting(true);
        if let Ok(mut map) = self.parked.lock() {
            map.insert(handle.clone(), parked);
        }
        let map = self.parked.clone();
        tokio::spawn(async move {
            tokio::time::sleep(PARK_FOR).await;
            // Dropping the stream cancels the upstream request nobody came back for.
            let gone = map.lock().ok().and_then(|mut m| m.remove(&handle));
            drop(gone);
        });
    }

    /// Takes a request parked here out of the parking (for its retry).
    pub fn take(&self, handle: &str) -> Option<Parked> {
        let parked = self.parked.lock().ok()?.remove(handle)?;
        parked.stream.set_waiting(false);
        Some(parked)
    }

    /// Waits for the events of a retry continued by another replica, under a fresh key.
    pub fn wait_remote(&self) -> (RemoteWait, RelayReceiver) {
        let key = crate::session::SessionId::generate().as_str().to_owned();
        let (tx, rx) = mpsc::unbounded_channel();
        let queued = Arc::new(std::sync::atomic::AtomicUsize::new(0));
        if let Ok(mut m) = self.remote.lock() {
            m.insert(
                key.clone(),
                RelaySender {
                    tx,
                    queued: queued.clone(),
                },
            );
        }
        let rx = RelayReceiver { rx, queued };
        let wait = RemoteWait {
            remote: self.remote.clone(),
            key,
        };
        (wait, rx)
    }

    /// An event of a retry continued by another replica (dropped when nobody waits). Past
    /// `RELAY_BACKLOG` unread events, what is neither the final event nor a beat (the
    /// request's notifications) is dropped and counted: the client still gets the answer.
    pub fn on_resumed(&self, key: &str, event: Resumed) {
        use std::sync::atomic::Ordering;
        let Some(sender) = self.remote.lock().ok().and_then(|m| m.get(key).cloned()) else {
            return;
        };
        let notification = !event.done && !event.message.is_empty();
        if notification && sender.queued.load(Ordering::Relaxed) >= RELAY_BACKLOG {
            crate::metrics::get().dropped_notification("relay_backlog");
            return;
        }
        sender.queued.fetch_add(1, Ordering::Relaxed);
        if sender.tx.send(event).is_err() {
            sender.queued.fetch_sub(1, Ordering::Relaxed);
        }
    }

    /// Registers a request continued here for another replica's client; the receiver
    /// resolves when that client goes away ([`Interactions::stop_continuing`]).
    pub fn continuing(&self, key: &str) -> oneshot::Receiver<()> {
        let (tx, rx) = oneshot::channel();
        if let Ok(mut m) = self.continuing.lock() {
            m.insert(key.to_owned(), tx);
        }
        rx
    }

    /// Ends the registration of a request continued here (finished, or its client left).
    pub fn stop_continuing(&self, key: &str) {
        let gone = self.continuing.lock().ok().and_then(|mut m| m.remove(key));
        drop(gone);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn event(message: &str, done: bool) -> Resumed {
        Resumed {
            message: bytes::Bytes::from(message.to_owned()),
            done,
            status: 200,
        }
    }

    #[tokio::test]
    async fn a_relayed_retry_keeps_its_answer_and_drops_notifications_past_the_backlog() {
        let interactions = Interactions::default();
        let (wait, mut rx) = interactions.wait_remote();
        let flood = RELAY_BACKLOG + 500;
        for _ in 0..flood {
            interactions.on_resumed(&wait.key, event("{\"method\":\"n\"}", false));
        }
        // Beats and the answer pass whatever the backlog.
        interactions.on_resumed(&wait.key, event("", false));
        interactions.on_resumed(&wait.key, event("{\"result\":{}}", true));
        let mut got = Vec::new();
        while let Some(e) = rx.recv().await {
            let done = e.done;
            got.push(e);
            if done {
                break;
            }
        }
        assert_eq!(got.len(), RELAY_BACKLOG + 2);
        assert!(got[RELAY_BACKLOG].message.is_empty());
        assert!(got[RELAY_BACKLOG + 1].done);
        // Read down, the queue takes notifications again.
        interactions.on_resumed(&wait.key, event("{\"method\":\"n\"}", false));
        assert!(rx.recv().await.is_some_and(|e| !e.message.is_empty()));
    }
}
