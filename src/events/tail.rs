//! `StreamLog`: the recorded events of one SSE stream, bounded, each framed once with its id;
//! and `tail`, the SSE body that replays a log after an event and then follows it live.

use std::collections::VecDeque;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{Arc, Mutex, OnceLock};
use std::time::Duration;

use bytes::{BufMut, Bytes, BytesMut};
use futures_util::Stream;
use tokio::sync::{Notify, watch};

use super::{EventId, StreamId};
use crate::cluster::{MirrorQueue, Mirrored};

/// Bounds of one stream's log.
#[derive(Debug, Clone, Copy)]
pub struct LogLimits {
    /// Events kept for replay; older ones are dropped (a reader that far behind is cut off).
    pub max_events: usize,
    /// Bytes of framed events kept for replay.
    pub max_bytes: usize,
}

impl Default for LogLimits {
    fn default() -> Self {
        LogLimits {
            max_events: 10_000,
            max_bytes: 4 * 1024 * 1024,
        }
    }
}

struct State {
    /// Sequence number of `events[0]`.
    first_seq: u64,
    /// Sequence number the next event gets.
    next_seq: u64,
    events: VecDeque<Bytes>,
    bytes: usize,
    /// No event will follow (the response was recorded, or the stream was replaced).
    done: bool,
}

/// One SSE stream's events, shared by the producer (which records before anything is sent)
/// and any number of readers (the live connection, a resumed one).
pub struct StreamLog {
    pub id: StreamId,
    pub kind: StreamKind,
    framing: Framing,
    limits: LogLimits,
    state: Mutex<State>,
    notify: Notify,
    readers: AtomicUsize,
    /// The ordered queue to this stream's copy in Redis (clustered gateways).
    mirror: OnceLock<MirrorQueue>,
}

/// Which kind of SSE stream a log records.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum StreamKind {
    /// The response stream of one POST: ends with the response.
    Post,
    /// The session's GET stream: unsolicited messages, open-ended.
    Get,
}

impl StreamKind {
    /// The metrics label.
    pub fn label(self) -> &'static str {
        match self {
            StreamKind::Post => "post",
            StreamKind::Get => "get",
        }
    }
}

/// How a log frames its events.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Framing {
    /// `id:` (for `Last-Event-ID`) and `data:`.
    Resumable,
    /// `event: message` and `data:`, no id: the 2024-11-05 transport, which cannot resume.
    LegacyMessage,
}

/// What a reader found after its position.
#[derive(Debug, PartialEq, Eq)]
pub enum Read {
    /// Events were appended to the output (the reader's position advanced).
    Some,
    /// Nothing new yet.
    Nothing,
    /// Nothing new and nothing will come.
    Done,
    /// Events after the position were already dropped: the reader fell too far behind.
    Gap,
}

impl StreamLog {
    pub fn new(id: StreamId, kind: StreamKind, limits: LogLimits) -> StreamLog {
        StreamLog {
            id,
            kind,
            framing: Framing::Resumable,
            limits,
            state: Mutex::new(State {
                first_seq: 1,
                next_seq: 1,
                events: VecDeque::new(),
                bytes: 0,
                done: false,
            }),
            notify: Notify::new(),
            readers: AtomicUsize::new(0),
            mirror: OnceLock::new(),
        }
    }

    /// The stream of a 2024-11-05 (HTTP+SSE) session: the session's GET stream, its events
    /// named `message` and without ids (that transport has no resumption; never mirrored).
    pub fn legacy(id: StreamId) -> StreamLog {
        StreamLog {
            framing: Framing::LegacyMessage,
            ..StreamLog::new(id, StreamKind::Get, LogLimits::default())
        }
    }

    /// Copies every event from now on to Redis, in order.
    pub fn set_mirror(&self, queue: MirrorQueue) {
        let _ = self.mirror.set(queue);
    }

    fn mirror(&self, seq: u64, framed: &Bytes, last: bool) {
        if let Some(m) = self.mirror.get() {
            m.send(Mirrored {
                seq,
                framed: framed.clone(),
                last,
            });
        }
    }

    /// Records `message` (one JSON-RPC message) as the next event and wakes the readers.
    /// `last` marks the final event of the stream. Returns `false` if the stream had already
    /// ended (nothing recorded).
    pub fn append(&self, message: &[u8], last: bool) -> bool {
        let Ok(mut s) = self.state.lock() else {
            return false;
        };
        if s.done {
            return false;
        }
        let seq = s.next_seq;
        let framed = match self.framing {
            Framing::Resumable => frame(&EventId::new(self.id.clone(), seq), message, None),
            Framing::LegacyMessage => frame_message(message),
        };
        s.next_seq += 1;
        s.bytes += framed.len();
        // Under the lock: the mirror sees events in sequence order.
        self.mirror(seq, &framed, last);
        s.events.push_back(framed);
        s.done = last;
        while s.events.len() > self.limits.max_events
            || (s.bytes > self.limits.max_bytes && s.events.len() > 1)
        {
            if let Some(old) = s.events.pop_front() {
                s.bytes -= old.len();
                s.first_seq += 1;
            }
        }
        drop(s);
        self.notify.notify_waiters();
        true
    }

    /// Records a priming event (an id and empty data, with a reconnection delay) so a client
    /// can resume even before the first message. Returns its sequence number.
    pub fn prime(&self, retry: Duration) -> Option<u64> {
        let mut s = self.state.lock().ok()?;
        let seq = s.next_seq;
        let framed = frame(&EventId::new(self.id.clone(), seq), b"", Some(retry));
        s.next_seq += 1;
        s.bytes += framed.len();
        self.mirror(seq, &framed, false);
        s.events.push_back(framed);
        drop(s);
        self.notify.notify_waiters();
        Some(seq)
    }

    /// Ends the stream without a final event (replaced, or the session ended).
    pub fn finish(&self) {
        if let Ok(mut s) = self.state.lock()
            && !s.done
        {
            s.done = true;
            // An end marker for readers on other replicas.
            let seq = s.next_seq;
            s.next_seq += 1;
            self.mirror(seq, &Bytes::new(), true);
        }
        self.notify.notify_waiters();
    }

    pub fn is_done(&self) -> bool {
        self.state.lock().map_or(true, |s| s.done)
    }

    /// Whether `seq` names an event this stream has recorded (now or before it was dropped).
    pub fn has_issued(&self, seq: u64) -> bool {
        self.state.lock().is_ok_and(|s| seq < s.next_seq)
    }

    /// Appends the events after `*after` to `out` and advances `*after`.
    pub fn read_after(&self, after: &mut u64, out: &mut Vec<Bytes>) -> Read {
        let Ok(s) = self.state.lock() else {
            return Read::Done;
        };
        let want = *after + 1;
        if want < s.first_seq {
            return Read::Gap;
        }
        let skip = usize::try_from(want - s.first_seq).unwrap_or(usize::MAX);
        if skip >= s.events.len() {
            return if s.done { Read::Done } else { Read::Nothing };
        }
        out.extend(s.events.iter().skip(skip).cloned());
        *after = s.next_seq - 1;
        Read::Some
    }

    /// Whether the events after `after` were already dropped (the reader fell too far behind).
    pub fn dropped_after(&self, after: u64) -> bool {
        self.state.lock().is_ok_and(|s| after + 1 < s.first_seq)
    }

    /// Readers connected right now (a client listening on this stream).
    pub fn readers(&self) -> usize {
        self.readers.load(Ordering::Acquire)
    }
}

/// Frames one event: `id`, optional `retry`, one `data` line (raw newlines in JSON are
/// insignificant whitespace, so they become spaces).
fn frame(id: &EventId, message: &[u8], retry: Option<Duration>) -> Bytes {
    let id = id.to_string();
    let mut buf = BytesMut::with_capacity(message.len() + id.len() + 32);
    buf.put_slice(b"id: ");
    buf.put_slice(id.as_bytes());
    buf.put_u8(b'\n');
    if let Some(r) = retry {
        buf.put_slice(format!("retry: {}\n", r.as_millis()).as_bytes());
    }
    buf.put_slice(b"data: ");
    push_data(&mut buf, message);
    buf.freeze()
}

/// Frames one `message` event without an id (the 2024-11-05 transport).
fn frame_message(message: &[u8]) -> Bytes {
    let mut buf = BytesMut::with_capacity(message.len() + 24);
    buf.put_slice(b"event: message\ndata: ");
    push_data(&mut buf, message);
    buf.freeze()
}

/// Appends `message` as one `data:` line (line breaks inside it, only possible between JSON
/// tokens, become spaces) and ends the event.
fn push_data(buf: &mut BytesMut, message: &[u8]) {
    let start = buf.len();
    buf.put_slice(message);
    for b in &mut buf[start..] {
        if *b == b'\n' || *b == b'\r' {
            *b = b' ';
        }
    }
    buf.put_slice(b"\n\n");
}

/// Why a tailing body ends early.
pub struct TailEnd {
    /// Comment sent on idle streams.
    pub keep_alive: Bytes,
    pub keep_alive_every: Duration,
    /// Flips to true when the replica shuts down: the body ends with a `retry` hint so the
    /// client reconnects (to another replica) and resumes.
    pub shutdown: watch::Receiver<bool>,
    /// Called on every keep-alive (e.g. to refresh a claim on the stream).
    pub on_keep_alive: Option<Box<dyn Fn() + Send + Sync>>,
}

/// The SSE body of a stream: every event after `after`, then new ones as they are recorded,
/// until the stream is done, the reader falls behind the log, or the replica shuts down.
pub fn tail(
    log: Arc<StreamLog>,
    after: u64,
    end: TailEnd,
) -> impl Stream<Item = Result<Bytes, std::convert::Infallible>> + Send {
    log.readers.fetch_add(1, Ordering::AcqRel);
    crate::metrics::get()
        .sse_streams
        .with_label_values(&[log.kind.label()])
        .inc();
    let guard = ReaderGuard(log.clone());
    let state = (guard, after, end, Vec::<Bytes>::new(), false);
    futures_util::stream::unfold(
        state,
        |(guard, mut after, mut end, mut buf, finished)| async move {
            if finished {
                return None;
            }
            let log = guard.0.clone();
            loop {
                if let Some(b) = buf.pop() {
                    return Some((Ok(b), (guard, after, end, buf, false)));
                }
                let notified = log.notify.notified();
                tokio::pin!(notified);
                notified.as_mut().enable();
                let mut fresh = Vec::new();
                match log.read_after(&mut after, &mut fresh) {
                    Read::Some => {
                        // Coalesce what is ready into one chunk: fewer writes, same bytes.
                        let mut chunk = BytesMut::with_capacity(fresh.iter().map(Bytes::len).sum());
                        for e in &fresh {
                            chunk.put_slice(e);
                        }
                        buf.push(chunk.freeze());
                        continue;
                    }
                    Read::Done => return None,
                    Read::Gap => {
                        tracing::warn!(stream = %log.id, "a client fell behind the stream's event log; stream closed (events were dropped)");
                        return None;
                    }
                    Read::Nothing => {}
                }
                if *end.shutdown.borrow() {
                    // Polling hand-off: tell the client when to come back, then close.
                    return Some((
                        Ok(Bytes::from_static(b"retry: 500\n\n")),
                        (guard, after, end, buf, true),
                    ));
                }
                tokio::select! {
                    _ = &mut notified => {}
                    _ = tokio::time::sleep(end.keep_alive_every) => {
                        if let Some(f) = &end.on_keep_alive {
                            f();
                        }
                        let ka = end.keep_alive.clone();
                        return Some((Ok(ka), (guard, after, end, buf, false)));
                    }
                    _ = end.shutdown.changed() => {}
                }
            }
        },
    )
}

struct ReaderGuard(Arc<StreamLog>);

impl Drop for ReaderGuard {
    fn drop(&mut self) {
        self.0.readers.fetch_sub(1, Ordering::AcqRel);
        crate::metrics::get()
            .sse_streams
            .with_label_values(&[self.0.kind.label()])
            .dec();
    }
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used)]
    use super::*;

    fn log(max_events: usize) -> StreamLog {
        StreamLog::new(
            StreamId::from("abcd1234-1"),
            StreamKind::Post,
            LogLimits {
                max_events,
                max_bytes: 1 << 20,
            },
        )
    }

    #[test]
    fn events_are_framed_with_their_id_and_read_after_a_position() {
        let l = log(10);
        assert!(l.append(b"{\"a\":1}", false));
        assert!(l.append(b"{\n\"b\":2}", true));
        assert!(!l.append(b"{}", false), "nothing after the last event");
        let mut out = Vec::new();
        let mut at = 0;
        assert_eq!(l.read_after(&mut at, &mut out), Read::Some);
        assert_eq!(at, 2);
        assert_eq!(&out[0][..], b"id: abcd1234-1.1\ndata: {\"a\":1}\n\n");
        assert_eq!(&out[1][..], b"id: abcd1234-1.2\ndata: { \"b\":2}\n\n");
        let mut out = Vec::new();
        let mut at = 1;
        assert_eq!(l.read_after(&mut at, &mut out), Read::Some);
        assert_eq!(out.len(), 1);
        assert_eq!(l.read_after(&mut at, &mut out), Read::Done);
    }

    #[test]
    fn a_reader_behind_the_window_gets_a_gap() {
        let l = log(3);
        for i in 0..5 {
            l.append(format!("{{\"n\":{i}}}").as_bytes(), false);
        }
        let mut out = Vec::new();
        assert_eq!(l.read_after(&mut 0, &mut out), Read::Gap);
        assert_eq!(l.read_after(&mut 1, &mut out), Read::Gap);
        let mut at = 2;
        assert_eq!(l.read_after(&mut at, &mut out), Read::Some);
        assert_eq!(out.len(), 3);
        assert_eq!(l.read_after(&mut at, &mut out), Read::Nothing);
        assert!(l.has_issued(5) && !l.has_issued(6));
    }

    #[test]
    fn legacy_events_are_named_message_without_ids() {
        let l = StreamLog::legacy(StreamId::from("abcd1234-l"));
        assert!(l.append(b"{\"a\":\n1}", false));
        let mut out = Vec::new();
        assert_eq!(l.read_after(&mut 0, &mut out), Read::Some);
        assert_eq!(&out[0][..], b"event: message\ndata: {\"a\": 1}\n\n");
    }

    #[test]
    fn priming_event_has_empty_data_and_retry() {
        let l = log(3);
        assert_eq!(l.prime(Duration::from_millis(1500)), Some(1));
        let mut out = Vec::new();
        l.read_after(&mut 0, &mut out);
        assert_eq!(&out[0][..], b"id: abcd1234-1.1\nretry: 1500\ndata: \n\n");
    }
}
