//! What this replica does with a message from another (`cluster::Bus`): deliveries to a GET
//! stream held here, a GET stream moved elsewhere, a session ended elsewhere, the events of a
//! retry another replica continues. Messages about requests rather than sessions — the
//! client's answers, progress and cancellations for requests running here, a retry of a
//! request parked here — are the layers above's: they reach them through `RequestRelay`,
//! which `app::build` gives the gateway (`http::Relay`).

use std::sync::Arc;

use bytes::Bytes;

use super::{Gateway, parked};
use crate::cluster::BusMessage;
use crate::session::{LiveSession, SessionId};
use crate::tenant::Tenant;
use crate::upstream::Ending;

/// The layers above the gateway, for the bus messages about requests.
pub trait RequestRelay: Send + Sync {
    /// The client's answer, progress or cancellation (`message`, JSON-RPC text) for a request
    /// of `session` running on this replica.
    fn client_message(&self, tenant: Arc<Tenant>, session: Arc<LiveSession>, message: String);
    /// A stateless client's retry, received by another replica, of a request parked here
    /// (`BusMessage::Resume`): continued here, what follows sent back over the bus.
    fn continue_retry(&self, gateway: Arc<Gateway>, tenant: Arc<Tenant>, resume: BusMessage);
}

impl Gateway {
    /// A message from another replica about a session live here.
    pub(super) fn on_bus(self: &Arc<Self>, msg: BusMessage) {
        let Some(tenant) = self.tenants.load().by_name(&msg.target().tenant).cloned() else {
            return;
        };
        // Retries continued across replicas: keyed by the retry, not by a live session.
        let msg = match msg {
            resume @ BusMessage::Resume { .. } => {
                self.relay.continue_retry(self.clone(), tenant, resume);
                return;
            }
            BusMessage::Resumed {
                key,
                message,
                done,
                status,
                ..
            } => {
                let event = parked::Resumed {
                    message: Bytes::from(message),
                    done,
                    status,
                };
                self.interactions.on_resumed(&key, event);
                return;
            }
            BusMessage::ResumeClosed { key, .. } => {
                self.interactions.stop_continuing(&key);
                return;
            }
            other => other,
        };
        let to = msg.target();
        let Some(id) = SessionId::from_presented(&to.session) else {
            return;
        };
        let Some(session) = tenant
            .directory
            .get(&id)
            .filter(|s| *s.key.user == *to.user)
        else {
            // A 2024-11-05 stream held here for a session live elsewhere (or not yet created).
            let streams = &tenant.directory.legacy_streams;
            match &msg {
                BusMessage::Deliver { message, .. } => {
                    streams.deliver(&id, &to.user, message.as_bytes());
                }
                BusMessage::Ended { .. } => streams.finish(&id, &to.user),
                _ => {}
            }
            return;
        };
        match msg {
            BusMessage::Deliver { message, to } => {
                let message = Bytes::from(message);
                if !session.deliver_local(message.clone())
                    && !tenant
                        .directory
                        .legacy_streams
                        .deliver(&id, &to.user, &message)
                {
                    tracing::debug!(
                        "a message for a GET stream this replica no longer holds was dropped"
                    );
                }
            }
            BusMessage::Answer { message, .. }
            | BusMessage::Progress { message, .. }
            | BusMessage::Cancel { message, .. } => {
                self.relay.client_message(tenant, session, message);
            }
            BusMessage::GetMoved { by, .. } => {
                if by != *self.bus.replica {
                    session.release_get_stream();
                }
            }
            BusMessage::Ended { .. } => {
                // Out of the directory before the next bus message is read (a request here is
                // answered 404 from now on); its upstream links close in a task of their own.
                if let Some(s) = Gateway::take_local(&tenant, &session.key) {
                    tokio::spawn(async move { s.close_as(Ending::End).await });
                }
            }
            BusMessage::Resume { .. }
            | BusMessage::Resumed { .. }
            | BusMessage::ResumeClosed { .. } => {}
        }
    }
}
