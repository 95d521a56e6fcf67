//! In-flight deferred requests: the id keys `notifications/cancelled` is matched by, and the
//! cancellable runner (the demo's `sleep`, the fixture's streaming tools) that forgets itself
//! when dropped.

use std::sync::Arc;
use std::time::Duration;

use bytes::Bytes;
use serde_json::value::RawValue;
use tokio::sync::{mpsc, oneshot};
use tokio::time::Instant;

use serde_json::Value;

use super::fixture_tools::FixtureJob;
use super::peer::{AskError, Peer};
use super::server::Session;
use super::tools::FloodKind;
use super::wire;

/// A request id normalised for matching `notifications/cancelled` (string ids compare by value).
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
pub(crate) enum IdKey {
    Str(Box<str>),
    Num(Box<str>),
}

pub(crate) fn id_key(raw: &RawValue) -> Option<IdKey> {
    let s = raw.get();
    if s.starts_with('"') {
        serde_json::from_str::<String>(s)
            .ok()
            .map(|v| IdKey::Str(v.into()))
    } else if wire::is_valid_id(raw) {
        Some(IdKey::Num(s.into()))
    } else {
        None
    }
}

pub(crate) struct InFlight {
    pub(crate) generation: u64,
    pub(crate) cancel: oneshot::Sender<()>,
}

/// What a deferred request does.
#[derive(Debug)]
pub(crate) enum Job {
    /// The demo's `sleep`: wait `ms` in total, sending `steps` progress notifications.
    Sleep { ms: u64, steps: u64 },
    /// The test tool `flood`: `count` notifications as fast as they are taken.
    Flood { count: u64, kind: FloodKind },
    /// The test tool `ask`: `count` requests `method` to the client at once.
    Ask {
        method: &'static str,
        /// Raw JSON.
        params: String,
        count: u64,
    },
    /// A conformance-fixture tool that streams or talks back to the client.
    Fixture(FixtureJob),
}

/// A request in flight (`sleep`, or a fixture tool). Dropping it (e.g. aborting its task)
/// forgets it.
#[derive(Debug)]
pub(crate) struct Deferred {
    session: Arc<Session>,
    key: IdKey,
    generation: u64,
    cancel: oneshot::Receiver<()>,
    id: Box<RawValue>,
    progress_token: Option<Box<RawValue>>,
    job: Job,
}

impl Deferred {
    /// Registers a cancellable request; `Err` is the error response to send instead.
    pub(crate) fn start(
        session: &Arc<Session>,
        id: &RawValue,
        progress_token: Option<&RawValue>,
        job: Job,
    ) -> Result<Deferred, Bytes> {
        let bad = |msg| wire::error(Some(id), wire::INVALID_REQUEST, msg);
        let key = id_key(id).ok_or_else(|| bad("Invalid Request: bad id"))?;
        let (generation, cancel) = session
            .register(key.clone())
            .ok_or_else(|| bad("Invalid Request: a request with this id is already in flight"))?;
        Ok(Deferred {
            session: Arc::clone(session),
            key,
            generation,
            cancel,
            id: id.to_owned(),
            progress_token: progress_token.map(RawValue::to_owned),
            job,
        })
    }

    /// Whether running this may send messages (progress or log notifications, requests to the
    /// client) before the response; then [`Self::run`] needs an output channel.
    pub(crate) fn streams(&self) -> bool {
        match &self.job {
            Job::Sleep { .. } => self.progress_token.is_some(),
            Job::Flood { kind, .. } => {
                *kind != FloodKind::Progress || self.progress_token.is_some()
            }
            Job::Ask { .. } => true,
            Job::Fixture(job) => job.streams(self.progress_token.is_some()),
        }
    }

    /// Does the work, sending notifications and requests to `out` (required when
    /// [`Self::streams`]); returns the response, or `None` if the request was cancelled (then
    /// nothing must be sent for it).
    pub(crate) async fn run(mut self, out: Option<&mpsc::Sender<Bytes>>) -> Option<Bytes> {
        let token = self.progress_token.as_deref();
        let (job, id, peer) = (&self.job, &*self.id, &self.session.peer);
        let work = async {
            match job {
                Job::Sleep { ms, steps } => {
                    sleep(*ms, *steps, token, out).await;
                    wire::tool_text(id, &format!("slept {ms}ms"), false)
                }
                Job::Flood { count, kind } => {
                    flood(*count, *kind, token, out).await;
                    wire::tool_text(id, &format!("flooded {count}"), false)
                }
                Job::Ask {
                    method,
                    params,
                    count,
                } => {
                    let summary = ask(peer, out, method, params, *count).await;
                    wire::tool_text(id, &summary, false)
                }
                Job::Fixture(job) => job.run(peer, id, token, out).await,
            }
        };
        tokio::select! {
            biased;
            _ = &mut self.cancel => None,
            reply = work => Some(reply),
        }
    }
}

/// Waits `ms`, spreading `steps` progress notifications over the wait when there is a token
/// and somewhere to send them.
async fn sleep(ms: u64, steps: u64, token: Option<&RawValue>, out: Option<&mpsc::Sender<Bytes>>) {
    match (token, out) {
        (Some(token), Some(out)) if steps > 0 => {
            let start = Instant::now();
            let total_us = u128::from(ms) * 1000;
            for i in 1..=steps {
                let at_us = total_us * u128::from(i) / u128::from(steps);
                let at = Duration::from_micros(u64::try_from(at_us).unwrap_or(u64::MAX));
                tokio::time::sleep_until(start + at).await;
                // A gone receiver only means nobody listens; keep the timing honest.
                let _ = out.send(wire::progress(token, i, steps)).await;
            }
        }
        _ => tokio::time::sleep(Duration::from_millis(ms)).await,
    }
}

/// Sends `count` notifications of `kind` as fast as `out` takes them (progress only with a
/// token).
async fn flood(
    count: u64,
    kind: FloodKind,
    token: Option<&RawValue>,
    out: Option<&mpsc::Sender<Bytes>>,
) {
    let Some(out) = out else { return };
    for i in 1..=count {
        let progress = match kind {
            FloodKind::Progress => true,
            FloodKind::Message => false,
            FloodKind::Both => i % 2 == 1,
        };
        let message = match (progress, token) {
            (true, Some(token)) => wire::progress(token, i, count),
            (true, None) => continue,
            (false, _) => {
                let params = format!("{{\"level\":\"info\",\"logger\":\"flood\",\"data\":{i}}}");
                wire::notification("notifications/message", params.as_bytes())
            }
        };
        if out.send(message).await.is_err() {
            return;
        }
    }
}

/// Sends the client `count` requests `method` at once and sums up what came back, as JSON:
/// `results`, `errors` (the error objects), `timeouts`, `undeliverable`.
async fn ask(
    peer: &Peer,
    out: Option<&mpsc::Sender<Bytes>>,
    method: &'static str,
    params: &str,
    count: u64,
) -> String {
    let asks = (0..count).map(|_| peer.ask_raw(out, method, params.as_bytes()));
    let (mut results, mut errors, mut timeouts, mut undeliverable) = (vec![], vec![], 0, 0);
    let parse = |raw: &RawValue| serde_json::from_str(raw.get()).unwrap_or(Value::Null);
    for outcome in futures_util::future::join_all(asks).await {
        match outcome {
            Ok(Ok(result)) => results.push(parse(&result)),
            Ok(Err(error)) => errors.push(parse(&error)),
            Err(AskError::Timeout { .. }) => timeouts += 1,
            Err(_) => undeliverable += 1,
        }
    }
    serde_json::json!({
        "results": results,
        "errors": errors,
        "timeouts": timeouts,
        "undeliverable": undeliverable,
    })
    .to_string()
}

impl Drop for Deferred {
    fn drop(&mut self) {
        self.session.forget(&self.key, self.generation);
    }
}
