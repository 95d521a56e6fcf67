//! `LiveSession`'s side towards the client's streams: the GET stream (opened, replaced, taken
//! over), delivery of unsolicited messages to it — on this replica or over the bus to the one
//! holding it, bounded for notifications — the `subscriptions/listen` listeners (bounded
//! queues), and the count of GET connections a session may have open.

use std::sync::Arc;
use std::sync::atomic::{AtomicUsize, Ordering};

use bytes::Bytes;

use super::LiveSession;
use crate::cluster::BusMessage;
use crate::events::{MessageKind, StreamKind, StreamLog};

/// Deliveries of notifications to another replica's GET stream in flight per session beyond
/// which more are dropped.
const MAX_REMOTE_DELIVERIES: usize = 256;
/// Messages queued for one `subscriptions/listen` stream.
const LISTENER_QUEUE: usize = 256;

/// A GET connection's place among its session's (see [`LiveSession::get_slot`]); freed when
/// dropped with the connection's body.
pub struct GetSlot(Arc<AtomicUsize>);

impl Drop for GetSlot {
    fn drop(&mut self) {
        self.0.fetch_sub(1, Ordering::AcqRel);
    }
}

impl LiveSession {
    /// Opens a new GET stream, replacing (and so ending) an older one.
    pub fn open_get_stream(&self) -> Arc<StreamLog> {
        let log = self.open_stream(StreamKind::Get);
        self.use_get_stream(log.clone());
        log
    }

    /// Makes `log` (a resumed GET stream) the current one, ending any other.
    pub fn use_get_stream(&self, log: Arc<StreamLog>) {
        if let Ok(mut g) = self.get_stream.lock()
            && let Some(old) = g.replace(log.clone())
            && !Arc::ptr_eq(&old, &log)
        {
            old.finish();
        }
    }

    /// Another replica took the GET stream over: end ours, so messages produced here go to the
    /// holder from now on.
    pub fn release_get_stream(&self) {
        if let Some(old) = self.get_stream.lock().ok().and_then(|mut g| g.take()) {
            old.finish();
        }
    }

    /// Whether `log` is the session's GET stream now.
    pub fn streams_to(&self, log: &Arc<StreamLog>) -> bool {
        self.get_stream
            .lock()
            .ok()
            .is_some_and(|g| g.as_ref().is_some_and(|l| Arc::ptr_eq(l, log)))
    }

    /// Whether a client is listening on the GET stream right now.
    pub fn has_get_stream(&self) -> bool {
        self.get_stream
            .lock()
            .ok()
            .is_some_and(|g| g.as_ref().is_some_and(|l| !l.is_done() && l.readers() > 0))
    }

    /// A GET (SSE) connection of this session may open: the slot it holds while open.
    /// `None` when the session has `max_get_streams` open on this replica already.
    pub fn get_slot(&self) -> Option<GetSlot> {
        let open = &self.get_connections;
        open.fetch_update(Ordering::AcqRel, Ordering::Acquire, |n| {
            (n < self.max_get_streams).then_some(n + 1)
        })
        .ok()?;
        Some(GetSlot(open.clone()))
    }

    /// How many GET connections the session has open now on this replica.
    pub fn get_connections(&self) -> usize {
        self.get_connections.load(Ordering::Acquire)
    }

    /// How many GET connections the session may have open at once on this replica.
    pub fn max_get_streams(&self) -> usize {
        self.max_get_streams
    }

    /// Sends an unsolicited notification on the GET stream: this replica's, else (clustered)
    /// the one of the replica holding it. `false` when there is surely none. When the client
    /// falls behind a flood, notifications are the first to go (see `events::StreamLog`).
    pub fn deliver_unsolicited(&self, bytes: Bytes) -> bool {
        self.deliver(bytes, MessageKind::Notification, || {})
    }

    /// Sends a message that must reach the client (a request to it, or a 2024-11-05 session's
    /// response) on the GET stream, as [`LiveSession::deliver_unsolicited`]; `undeliverable`
    /// runs if no replica turns out to hold a GET stream (after the lookup, for remote
    /// delivery).
    pub fn deliver_or(&self, bytes: Bytes, undeliverable: impl FnOnce() + Send + 'static) -> bool {
        self.deliver(bytes, MessageKind::Request, undeliverable)
    }

    fn deliver(
        &self,
        bytes: Bytes,
        kind: MessageKind,
        undeliverable: impl FnOnce() + Send + 'static,
    ) -> bool {
        if self.deliver_here(&bytes, kind) {
            return true;
        }
        if !self.bus.is_clustered() {
            return false;
        }
        // One task per delivery, each a Redis lookup and a publish: bounded, so a flood of
        // notifications for a stream held elsewhere cannot pile up tasks.
        let in_flight = self.remote_deliveries.clone();
        if kind == MessageKind::Notification
            && in_flight.load(Ordering::Acquire) >= MAX_REMOTE_DELIVERIES
        {
            crate::metrics::get().dropped_notification("bus_backlog");
            return true;
        }
        in_flight.fetch_add(1, Ordering::AcqRel);
        let (bus, key) = (self.bus.clone(), self.key.clone());
        tokio::spawn(async move {
            let holder = bus.get_stream_holder(&key).await.ok().flatten();
            match holder {
                Some(replica) if replica != *bus.replica => {
                    let message = BusMessage::Deliver {
                        to: (&key).into(),
                        message: String::from_utf8_lossy(&bytes).into_owned(),
                    };
                    if let Err(e) = bus.send_to(&replica, &message).await {
                        tracing::warn!(error = %e, "message for another replica's stream not sent");
                        undeliverable();
                    }
                }
                _ => undeliverable(),
            }
            in_flight.fetch_sub(1, Ordering::AcqRel);
        });
        true
    }

    /// Records a message on this replica's GET stream (sent now to a listening client, or on
    /// resumption); `false` when the session has no open GET stream here. For messages from
    /// another replica, whose kind is not known here: recorded as ones that must arrive.
    pub fn deliver_local(&self, bytes: Bytes) -> bool {
        self.deliver_here(&bytes, MessageKind::Request)
    }

    fn deliver_here(&self, bytes: &Bytes, kind: MessageKind) -> bool {
        let mut heard = false;
        if let Ok(mut listeners) = self.listeners.lock()
            && !listeners.is_empty()
        {
            listeners.retain(|l| match l.try_send(bytes.clone()) {
                Ok(()) => true,
                Err(tokio::sync::mpsc::error::TrySendError::Full(_)) => {
                    crate::metrics::get().dropped_notification("listener_queue");
                    true
                }
                Err(tokio::sync::mpsc::error::TrySendError::Closed(_)) => false,
            });
            heard = !listeners.is_empty();
        }
        let log = self.get_stream.lock().ok().and_then(|g| g.clone());
        log.is_some_and(|l| l.record(bytes, kind, 0)) || heard
    }

    /// A new `subscriptions/listen` stream: it receives every unsolicited message from now
    /// until it is dropped (those that find its queue full are dropped for it).
    pub fn add_listener(&self) -> tokio::sync::mpsc::Receiver<Bytes> {
        let (tx, rx) = tokio::sync::mpsc::channel(LISTENER_QUEUE);
        if let Ok(mut listeners) = self.listeners.lock() {
            listeners.push(tx);
        }
        rx
    }
}
