//! `StreamLog`: the recorded events of one SSE stream, each framed once with its id, bounded
//! twice: the window kept for replay (count and bytes), and the unread backlog. When nobody
//! has read most of the window yet (a slow client, or one that left and may resume), the
//! log stops taking notifications — other notifications are dropped (counted), progress is
//! held back as the latest per request — while responses and requests to the client are always
//! recorded. The held progress is recorded once the backlog shrinks, or just before the next
//! essential event, so the client always sees the last progress and the response in order.
//!
//! A durable mirror (Redis, `events: durable`) holds readers back: they are given only events
//! its writer has seen stored, so a client never holds an event Redis lacks. The events
//! waiting for Redis count as unread, so the backlog bound also bounds what waits for it.

use std::collections::VecDeque;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{Mutex, OnceLock};
use std::time::Duration;

use bytes::{BufMut, Bytes, BytesMut};
use tokio::sync::Notify;

use super::{EventId, StreamId};
use crate::cluster::{MirrorQueue, Mirrored, Written};

/// Bounds of one stream's log.
#[derive(Debug, Clone, Copy)]
pub struct LogLimits {
    /// Events kept for replay; older ones are dropped (a reader that far behind skips them).
    /// Fifteen sixteenths of it is the most unread notifications the log takes (`backlog`).
    pub max_events: usize,
    /// Bytes of framed events kept for replay; bounds the unread backlog likewise.
    pub max_bytes: usize,
}

impl LogLimits {
    /// The unread backlog (events, bytes) beyond which notifications are held back: the
    /// window less a sixteenth, which stays room for what is always recorded (responses,
    /// requests, the held progress), so a notification never pushes one of them out unread.
    fn backlog(&self) -> (usize, usize) {
        let events = self.max_events - (self.max_events / 16).max(1);
        let bytes = self.max_bytes - (self.max_bytes / 16).max(1);
        (events.max(1), bytes.max(1))
    }
}

impl Default for LogLimits {
    fn default() -> Self {
        LogLimits {
            max_events: 10_000,
            max_bytes: 4 * 1024 * 1024,
        }
    }
}

/// What a message to record is: it decides what a log under a flood may do with it.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum MessageKind {
    /// A request to the client (it waits for an answer): always recorded.
    Request,
    /// A progress notification: beyond the backlog bound, only the latest per request.
    Progress,
    /// Any other notification: beyond the backlog bound, dropped (counted).
    Notification,
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
    /// The newest event handed to a reader: the events after it are the unread backlog.
    read_up_to: u64,
    /// Bytes of the unread events still in `events`.
    unread_bytes: usize,
    /// Progress held back while the backlog is over its bound: the latest per request (the
    /// key), recorded when the backlog shrinks or before the next essential event.
    held: Vec<(u32, Bytes)>,
    /// Notifications dropped or coalesced on this stream; the first is logged.
    dropped: u64,
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
    /// Events were appended to the output and the reader's position advanced (past events
    /// the window no longer holds, if it had fallen that far behind).
    Some,
    /// Nothing new yet.
    Nothing,
    /// Nothing new and nothing will come.
    Done,
    /// Events follow the position but are not yet in Redis (a durable mirror): they are
    /// handed out once its writer has stored them.
    Unwritten,
    /// Events follow the position that the durable mirror can no longer store in order:
    /// they are never handed out.
    Unwritable,
}

/// What became of a notification offered to a log (for the metrics, outside the lock).
enum Taken {
    Recorded,
    /// Held back as its request's latest progress (nothing lost yet).
    Held,
    /// Replaced an older held progress, which is gone.
    Coalesced,
    Dropped,
    /// The stream had ended.
    Ended,
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
                read_up_to: 0,
                unread_bytes: 0,
                held: Vec::new(),
                dropped: 0,
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

    /// Records `message` (one JSON-RPC message that must reach the client: a response, or a
    /// request to it) as the next event and wakes the readers. `last` marks the final event
    /// of the stream. Returns `false` if the stream had already ended (nothing recorded).
    pub fn append(&self, message: &[u8], last: bool) -> bool {
        let Ok(mut s) = self.state.lock() else {
            return false;
        };
        if s.done {
            return false;
        }
        // Progress held back came first: it goes before, so the client's last progress is
        // never lost and never follows the response.
        self.flush_held(&mut s);
        self.push(&mut s, message, last, false);
        drop(s);
        self.notify.notify_waiters();
        true
    }

    /// Records a message of `kind` sent for the stream's request number `request` (0 unless
    /// several requests share the stream, as in a batch). Beyond the backlog bound,
    /// notifications are dropped and progress held back (see the module docs). Returns
    /// `false` if the stream had already ended.
    pub fn record(&self, message: &Bytes, kind: MessageKind, request: u32) -> bool {
        if kind == MessageKind::Request {
            return self.append(message, false);
        }
        let Ok(mut s) = self.state.lock() else {
            return false;
        };
        let taken = if s.done {
            Taken::Ended
        } else if !self.over_backlog(&s) {
            self.flush_held(&mut s);
            self.push(&mut s, message, false, true);
            Taken::Recorded
        } else if kind == MessageKind::Progress {
            match s.held.iter_mut().find(|(k, _)| *k == request) {
                Some(slot) => {
                    slot.1 = message.clone();
                    s.dropped += 1;
                    Taken::Coalesced
                }
                None => {
                    s.held.push((request, message.clone()));
                    Taken::Held
                }
            }
        } else {
            s.dropped += 1;
            Taken::Dropped
        };
        let first_drop = s.dropped == 1 && matches!(taken, Taken::Coalesced | Taken::Dropped);
        drop(s);
        let reason = match taken {
            Taken::Recorded => {
                self.notify.notify_waiters();
                return true;
            }
            Taken::Ended => return false,
            Taken::Held => return true,
            Taken::Coalesced => "progress_coalesced",
            Taken::Dropped => "stream_backlog",
        };
        crate::metrics::get().dropped_notification(reason);
        if first_drop {
            tracing::warn!(stream = %self.id, kind = self.kind.label(), "a client fell behind a flood of notifications: until it catches up, this stream drops notifications and keeps only the latest progress (responses and requests are always kept)");
        }
        true
    }

    /// Records a priming event (an id and empty data, with a reconnection delay) so a client
    /// can resume even before the first message. Returns its sequence number.
    pub fn prime(&self, retry: Duration) -> Option<u64> {
        let mut s = self.state.lock().ok()?;
        let seq = s.next_seq;
        let framed = frame(&EventId::new(self.id.clone(), seq), b"", Some(retry));
        self.push_framed(&mut s, framed, false, true);
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
            s.held.clear();
            // An end marker for readers on other replicas.
            let seq = s.next_seq;
            s.next_seq += 1;
            self.mirror(seq, &Bytes::new(), true, false);
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

    /// Notifications this stream dropped or coalesced so far.
    pub fn dropped(&self) -> u64 {
        self.state.lock().map_or(0, |s| s.dropped)
    }

    /// Appends the events after `*after` to `out` and advances `*after`. A position the
    /// window no longer holds continues with the oldest event kept. With a durable mirror,
    /// only events already in Redis are appended.
    pub fn read_after(&self, after: &mut u64, out: &mut Vec<Bytes>) -> Read {
        let Ok(mut s) = self.state.lock() else {
            return Read::Done;
        };
        // Read under the lock after the state: an event recorded since is beyond it anyway.
        let written = match self.mirror.get().and_then(MirrorQueue::written) {
            None => u64::MAX,
            Some(Written::UpTo(seq)) => seq,
            Some(Written::Broken) if *after < Self::last_seq(&s) => return Read::Unwritable,
            Some(Written::Broken) => 0,
        };
        let had = out.len();
        Self::take_from(&mut s, after, out, written);
        let mut flushed = false;
        if !s.held.is_empty() && !self.over_backlog(&s) {
            // The client caught up: the progress held back for it goes out now.
            self.flush_held(&mut s);
            flushed = true;
            if out.len() == had {
                Self::take_from(&mut s, after, out, written);
            }
        }
        let read = if out.len() > had {
            Read::Some
        } else if *after >= Self::last_seq(&s) {
            if s.done { Read::Done } else { Read::Nothing }
        } else {
            Read::Unwritten
        };
        drop(s);
        if flushed {
            self.notify.notify_waiters();
        }
        read
    }

    /// Readers connected right now (a client listening on this stream).
    pub fn readers(&self) -> usize {
        self.readers.load(Ordering::Acquire)
    }

    pub(super) fn reader_joined(&self) {
        self.readers.fetch_add(1, Ordering::AcqRel);
    }

    pub(super) fn reader_left(&self) {
        self.readers.fetch_sub(1, Ordering::AcqRel);
    }

    /// Resolves when an event is recorded or the stream ends (enable it before reading, so
    /// nothing recorded in between is missed).
    pub(super) fn changed(&self) -> tokio::sync::futures::Notified<'_> {
        self.notify.notified()
    }

    /// Resolves when the durable mirror has written more (enable it before reading); `None`
    /// without one (readers never wait for Redis).
    pub(super) fn written_changed(&self) -> Option<tokio::sync::futures::Notified<'_>> {
        self.mirror.get()?.written_changed()
    }

    /// How long a reader waits for events not yet in Redis (durable mirror) before it gives
    /// its client a `retry` hint instead.
    pub(super) fn patience(&self) -> Option<Duration> {
        self.mirror.get().map(MirrorQueue::patience)
    }

    // ---- Under the lock

    /// The sequence number of the newest event in the window (0 before the first).
    fn last_seq(s: &State) -> u64 {
        s.first_seq + s.events.len() as u64 - 1
    }

    /// Moves the events after `*after`, up to `up_to`, into `out`, marking them read.
    fn take_from(s: &mut State, after: &mut u64, out: &mut Vec<Bytes>, up_to: u64) {
        let want = (*after + 1).max(s.first_seq);
        let end = Self::last_seq(s).min(up_to);
        if want > end {
            return;
        }
        let skip = usize::try_from(want - s.first_seq).unwrap_or(usize::MAX);
        let take = usize::try_from(end - want + 1).unwrap_or(usize::MAX);
        out.extend(s.events.iter().skip(skip).take(take).cloned());
        *after = end;
        Self::mark_read(s, end);
    }

    /// Everything up to `seq` was handed to a reader: it leaves the unread backlog.
    fn mark_read(s: &mut State, seq: u64) {
        let from = (s.read_up_to + 1).max(s.first_seq);
        if seq < from {
            return;
        }
        let start = usize::try_from(from - s.first_seq).unwrap_or(usize::MAX);
        let end = usize::try_from(seq + 1 - s.first_seq).unwrap_or(usize::MAX);
        let read: usize = s
            .events
            .range(start..end.min(s.events.len()))
            .map(Bytes::len)
            .sum();
        s.unread_bytes = s.unread_bytes.saturating_sub(read);
        s.read_up_to = seq;
    }

    /// Whether the unread backlog is over its bound (see [`LogLimits::backlog`]).
    fn over_backlog(&self, s: &State) -> bool {
        let unread = s.next_seq - (s.read_up_to + 1).max(s.first_seq);
        let (events, bytes) = self.limits.backlog();
        unread >= events as u64 || s.unread_bytes >= bytes
    }

    fn flush_held(&self, s: &mut State) {
        for (_, message) in std::mem::take(&mut s.held) {
            self.push(s, &message, false, true);
        }
    }

    /// Frames and records one message. `droppable` (a notification) may be left out of the
    /// Redis copy when that falls behind.
    fn push(&self, s: &mut State, message: &[u8], last: bool, droppable: bool) {
        let framed = match self.framing {
            Framing::Resumable => frame(&EventId::new(self.id.clone(), s.next_seq), message, None),
            Framing::LegacyMessage => frame_message(message),
        };
        self.push_framed(s, framed, last, droppable);
    }

    fn push_framed(&self, s: &mut State, framed: Bytes, last: bool, droppable: bool) {
        let seq = s.next_seq;
        s.next_seq += 1;
        s.bytes += framed.len();
        s.unread_bytes += framed.len();
        // Under the lock: the mirror sees events in sequence order.
        self.mirror(seq, &framed, last, droppable);
        s.events.push_back(framed);
        s.done = last;
        // The window: the oldest events go (the newest, possibly the final one, stays).
        while s.events.len() > self.limits.max_events
            || (s.bytes > self.limits.max_bytes && s.events.len() > 1)
        {
            if let Some(old) = s.events.pop_front() {
                s.bytes -= old.len();
                if s.first_seq > s.read_up_to {
                    s.unread_bytes = s.unread_bytes.saturating_sub(old.len());
                }
                s.first_seq += 1;
            }
        }
    }

    fn mirror(&self, seq: u64, framed: &Bytes, last: bool, droppable: bool) {
        if let Some(m) = self.mirror.get() {
            let event = Mirrored {
                seq,
                framed: framed.clone(),
                last,
            };
            m.send(event, droppable);
        }
    }
}

/// Frames one event: `id`, optional `retry`, one `data` line (raw newlines in JSON are
/// insignificant whitespace, so they become spaces).
fn frame(id: &EventId, message: &[u8], retry: Option<Duration>) -> Bytes {
    // The id's sequence number takes at most 20 digits.
    let mut buf = BytesMut::with_capacity(message.len() + id.stream.as_str().len() + 68);
    buf.put_slice(b"id: ");
    id.put(&mut buf);
    buf.put_u8(b'\n');
    if let Some(r) = retry {
        buf.put_slice(b"retry: ");
        buf.put_slice(itoa::Buffer::new().format(r.as_millis()).as_bytes());
        buf.put_u8(b'\n');
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
    let data = &mut buf[start..];
    let mut at = 0;
    while let Some(i) = memchr::memchr2(b'\n', b'\r', &data[at..]) {
        data[at + i] = b' ';
        at += i + 1;
    }
    buf.put_slice(b"\n\n");
}

#[cfg(test)]
#[path = "log_tests.rs"]
mod tests;
