//! The client as seen from one session: the capabilities it declared at `initialize`, its
//! logging threshold, its resource subscriptions, and the server-to-client requests (ids
//! `"fx-<n>"`) waiting for its answers, each bounded by a timeout.

use std::borrow::Cow;
use std::collections::{HashMap, HashSet};
use std::fmt;
use std::sync::atomic::{AtomicBool, AtomicU8, Ordering};
use std::sync::{Mutex, MutexGuard, PoisonError};
use std::time::Duration;

use bytes::Bytes;
use serde::Deserialize;
use serde::de::IgnoredAny;
use serde_json::value::RawValue;
use tokio::sync::{mpsc, oneshot};

use super::wire;

/// MCP log levels, least severe first; thresholds and levels are indexes into this.
pub(crate) const LOG_LEVELS: [&str; 8] = [
    "debug",
    "info",
    "notice",
    "warning",
    "error",
    "critical",
    "alert",
    "emergency",
];
/// Index of `info` in [`LOG_LEVELS`].
pub(crate) const LOG_INFO: u8 = 1;

/// How long a server-to-client request waits for the client's answer.
pub(crate) const PEER_TIMEOUT: Duration = Duration::from_secs(60);

/// A client capability that server-to-client requests depend on.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Capability {
    Sampling,
    /// Form-mode elicitation.
    Elicitation,
}

impl Capability {
    pub(crate) fn name(self) -> &'static str {
        match self {
            Capability::Sampling => "sampling",
            Capability::Elicitation => "elicitation",
        }
    }
}

/// The client's answer to one server-to-client request (raw JSON of `result` or `error`).
#[derive(Debug)]
enum Answer {
    Result(Box<RawValue>),
    Error(Box<RawValue>),
}

/// Why a server-to-client request produced no result.
#[derive(Debug, PartialEq)]
pub(crate) enum AskError {
    /// No answer within the timeout; the client was sent `notifications/cancelled`.
    Timeout {
        method: &'static str,
        after: Duration,
    },
    /// The client answered with a JSON-RPC error.
    Rejected { method: &'static str, error: String },
    /// The request could not be delivered (no stream to send it on, or the session ended).
    Undeliverable { method: &'static str },
}

impl fmt::Display for AskError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            AskError::Timeout { method, after } => write!(
                f,
                "The client did not answer {method} within {} s",
                after.as_secs_f64()
            ),
            AskError::Rejected { method, error } => {
                write!(f, "The client answered {method} with an error: {error}")
            }
            AskError::Undeliverable { method } => {
                write!(f, "Could not deliver {method} to the client")
            }
        }
    }
}

#[derive(Deserialize)]
struct DeclaredCapabilities {
    #[serde(default)]
    sampling: Option<IgnoredAny>,
    #[serde(default)]
    elicitation: Option<ElicitationCapability>,
}

#[derive(Deserialize)]
struct ElicitationCapability {
    #[serde(default)]
    form: Option<IgnoredAny>,
    #[serde(default)]
    url: Option<IgnoredAny>,
}

#[derive(Default)]
struct Inner {
    next_id: u64,
    pending: HashMap<Box<str>, oneshot::Sender<Answer>>,
    subscriptions: HashSet<Box<str>>,
}

/// Per-session client state; cheap to hold for sessions that never use it.
pub(crate) struct Peer {
    timeout: Duration,
    sampling: AtomicBool,
    elicitation: AtomicBool,
    /// Index into the server's log levels; messages below it are not sent.
    log_threshold: AtomicU8,
    inner: Mutex<Inner>,
}

impl Peer {
    pub(crate) fn new(timeout: Duration) -> Peer {
        Peer {
            timeout,
            sampling: AtomicBool::new(false),
            elicitation: AtomicBool::new(false),
            log_threshold: AtomicU8::new(0),
            inner: Mutex::new(Inner::default()),
        }
    }

    fn lock(&self) -> MutexGuard<'_, Inner> {
        self.inner.lock().unwrap_or_else(PoisonError::into_inner)
    }

    /// Records `initialize`'s `capabilities` (absent or malformed means none).
    pub(crate) fn declare(&self, capabilities: Option<&RawValue>) {
        let caps =
            capabilities.and_then(|c| serde_json::from_str::<DeclaredCapabilities>(c.get()).ok());
        let (sampling, elicitation) = caps.map_or((false, false), |c| {
            // `elicitation: {}` means form mode; with sub-objects, form must be listed.
            let form = c
                .elicitation
                .is_some_and(|e| e.form.is_some() || e.url.is_none());
            (c.sampling.is_some(), form)
        });
        self.sampling.store(sampling, Ordering::Relaxed);
        self.elicitation.store(elicitation, Ordering::Relaxed);
    }

    pub(crate) fn supports(&self, cap: Capability) -> bool {
        match cap {
            Capability::Sampling => self.sampling.load(Ordering::Relaxed),
            Capability::Elicitation => self.elicitation.load(Ordering::Relaxed),
        }
    }

    pub(crate) fn set_log_threshold(&self, level: u8) {
        self.log_threshold.store(level, Ordering::Relaxed);
    }

    /// Whether a log message of level index `level` passes the client's threshold.
    pub(crate) fn logs(&self, level: u8) -> bool {
        level >= self.log_threshold.load(Ordering::Relaxed)
    }

    pub(crate) fn subscribe(&self, uri: &str) {
        self.lock().subscriptions.insert(uri.into());
    }

    /// Returns whether `uri` was subscribed.
    pub(crate) fn unsubscribe(&self, uri: &str) -> bool {
        self.lock().subscriptions.remove(uri)
    }

    /// The subscribed URIs, sorted.
    pub(crate) fn subscribed(&self) -> Vec<String> {
        let mut uris: Vec<String> = self
            .lock()
            .subscriptions
            .iter()
            .map(|u| u.to_string())
            .collect();
        uris.sort();
        uris
    }

    /// The name of the level below which log messages are not sent (`debug` until the client
    /// sets one).
    pub(crate) fn log_level(&self) -> &'static str {
        let threshold = usize::from(self.log_threshold.load(Ordering::Relaxed));
        LOG_LEVELS.get(threshold).copied().unwrap_or("none")
    }

    #[cfg(test)]
    pub(crate) fn is_subscribed(&self, uri: &str) -> bool {
        self.lock().subscriptions.contains(uri)
    }

    /// Number of server-to-client requests awaiting an answer.
    #[cfg(test)]
    pub(crate) fn pending(&self) -> usize {
        self.lock().pending.len()
    }

    /// Routes a client's response to the request waiting for it; `false` if none is (unknown
    /// id, already timed out, or cancelled).
    pub(crate) fn resolve(
        &self,
        id: &RawValue,
        result: Option<&RawValue>,
        error: Option<&RawValue>,
    ) -> bool {
        let Ok(id) = serde_json::from_str::<Cow<'_, str>>(id.get()) else {
            // Our ids are strings; a number is not ours.
            return false;
        };
        let Some(waiter) = self.lock().pending.remove(&*id) else {
            return false;
        };
        let answer = match (result, error) {
            (Some(r), _) => Answer::Result(r.to_owned()),
            (None, Some(e)) => Answer::Error(e.to_owned()),
            (None, None) => return false,
        };
        waiter.send(answer).is_ok()
    }

    /// Sends request `method` with `params` on `out` and waits for the client's result. On
    /// timeout the client gets `notifications/cancelled` for it. Dropping the future (the
    /// calling request was cancelled) forgets the request.
    pub(crate) async fn ask(
        &self,
        out: Option<&mpsc::Sender<Bytes>>,
        method: &'static str,
        params: &[u8],
    ) -> Result<Box<RawValue>, AskError> {
        match self.exchange(out, method, params).await? {
            Answer::Result(r) => Ok(r),
            Answer::Error(e) => Err(AskError::Rejected {
                method,
                error: error_message(&e),
            }),
        }
    }

    /// Like [`Peer::ask`], but an error answer comes back whole: `Ok(Err(error object))`.
    pub(crate) async fn ask_raw(
        &self,
        out: Option<&mpsc::Sender<Bytes>>,
        method: &'static str,
        params: &[u8],
    ) -> Result<Result<Box<RawValue>, Box<RawValue>>, AskError> {
        Ok(match self.exchange(out, method, params).await? {
            Answer::Result(r) => Ok(r),
            Answer::Error(e) => Err(e),
        })
    }

    async fn exchange(
        &self,
        out: Option<&mpsc::Sender<Bytes>>,
        method: &'static str,
        params: &[u8],
    ) -> Result<Answer, AskError> {
        let Some(out) = out else {
            return Err(AskError::Undeliverable { method });
        };
        let (tx, rx) = oneshot::channel();
        let id: Box<str> = {
            let mut inner = self.lock();
            inner.next_id += 1;
            let id: Box<str> = format!("fx-{}", inner.next_id).into();
            inner.pending.insert(id.clone(), tx);
            id
        };
        let _forget = Forget {
            peer: self,
            id: &id,
        };
        tracing::debug!(id = &*id, method, "demo server: request to the client");
        if out.send(wire::request(&id, method, params)).await.is_err() {
            return Err(AskError::Undeliverable { method });
        }
        match tokio::time::timeout(self.timeout, rx).await {
            Ok(Ok(answer)) => Ok(answer),
            Ok(Err(_)) => Err(AskError::Undeliverable { method }),
            Err(_) => {
                let mut params = Vec::with_capacity(96);
                params.extend_from_slice(b"{\"requestId\":");
                wire::push_str(&mut params, &id);
                params.extend_from_slice(b",\"reason\":");
                wire::push_str(&mut params, "timed out waiting for the client's answer");
                params.push(b'}');
                let _ = out
                    .send(wire::notification("notifications/cancelled", &params))
                    .await;
                Err(AskError::Timeout {
                    method,
                    after: self.timeout,
                })
            }
        }
    }
}

/// Removes a pending request when its waiter goes away, however that happens.
struct Forget<'a> {
    peer: &'a Peer,
    id: &'a str,
}

impl Drop for Forget<'_> {
    fn drop(&mut self) {
        self.peer.lock().pending.remove(self.id);
    }
}

/// The `message` of a JSON-RPC error object, or its raw JSON if it has none.
fn error_message(raw: &RawValue) -> String {
    #[derive(Deserialize)]
    struct ErrorObject {
        #[serde(default)]
        message: Option<String>,
    }
    match serde_json::from_str::<ErrorObject>(raw.get()) {
        Ok(ErrorObject { message: Some(m) }) => m,
        _ => raw.get().to_owned(),
    }
}
