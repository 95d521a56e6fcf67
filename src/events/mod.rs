//! Resumable SSE: event ids that name their stream, the bounded per-session record of every
//! stream's events (`SessionEvents` of `StreamLog`s), and the SSE body that replays and then
//! follows a stream (`tail`). Every message the gateway sends on an SSE stream is recorded
//! here first, so a client that reconnects with `Last-Event-ID` gets what it missed: all of
//! it, unless a flood of notifications outran it (then the responses, the requests, the
//! latest progress and what the bounds keep).

mod log;
mod remote;
mod tail;

use std::fmt;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex};

use crate::cluster::RedisEvents;
use crate::store::SessionKey;

pub use log::{LogLimits, MessageKind, Read, StreamKind, StreamLog};
pub use remote::{join, remote_tail};
pub use tail::{TailEnd, tail};

/// A stream's id: `<replica>-<n>`, unique within the session across replicas and restarts
/// (replica ids are random per process).
#[derive(Clone, PartialEq, Eq, Hash)]
pub struct StreamId(Arc<str>);

impl StreamId {
    pub fn as_str(&self) -> &str {
        &self.0
    }

    /// The kind of stream, from the letter after the replica (`<replica>-p<n>` / `-g<n>`).
    pub fn kind(&self) -> Option<StreamKind> {
        match self.0.rsplit_once('-')?.1.as_bytes().first()? {
            b'p' => Some(StreamKind::Post),
            b'g' => Some(StreamKind::Get),
            _ => None,
        }
    }
}

impl From<&str> for StreamId {
    fn from(s: &str) -> Self {
        StreamId(s.into())
    }
}

impl fmt::Display for StreamId {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&self.0)
    }
}

impl fmt::Debug for StreamId {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "StreamId({})", self.0)
    }
}

/// An SSE event id: `<stream>.<seq>`. Opaque to clients; meaningful only within the session it
/// was issued in (logs are per session, so another user's id names nothing).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct EventId {
    pub stream: StreamId,
    pub seq: u64,
}

impl EventId {
    pub fn new(stream: StreamId, seq: u64) -> EventId {
        EventId { stream, seq }
    }

    /// Parses a `Last-Event-ID` value; `None` if it cannot be one of ours.
    pub fn parse(s: &str) -> Option<EventId> {
        let (stream, seq) = s.rsplit_once('.')?;
        let ok = !stream.is_empty()
            && stream.len() <= 64
            && stream
                .bytes()
                .all(|b| b.is_ascii_alphanumeric() || b == b'-');
        if !ok {
            return None;
        }
        Some(EventId {
            stream: StreamId::from(stream),
            seq: seq.parse().ok()?,
        })
    }
}

impl EventId {
    /// Appends the id's text (as [`fmt::Display`] writes it) to `buf`, without `core::fmt`:
    /// every event framed carries one.
    pub fn put(&self, buf: &mut bytes::BytesMut) {
        use bytes::BufMut;
        buf.put_slice(self.stream.as_str().as_bytes());
        buf.put_u8(b'.');
        buf.put_slice(itoa::Buffer::new().format(self.seq).as_bytes());
    }
}

impl fmt::Display for EventId {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{}.{}", self.stream, self.seq)
    }
}

/// Bounds of one session's event record.
#[derive(Debug, Clone, Copy)]
pub struct EventLimits {
    pub per_stream: LogLimits,
    /// Streams kept for resumption; beyond it the oldest finished ones (then the oldest) go.
    pub max_streams: usize,
}

impl Default for EventLimits {
    fn default() -> Self {
        EventLimits {
            per_stream: LogLimits::default(),
            max_streams: 16,
        }
    }
}

/// The recorded streams of one session on this replica.
pub struct SessionEvents {
    next: AtomicU64,
    limits: EventLimits,
    /// Oldest first; at most `limits.max_streams`, so found by a look at each.
    streams: Mutex<Vec<Arc<StreamLog>>>,
}

/// Whose new stream `SessionEvents::open` makes: the replica its id names and, on clustered
/// gateways, where it is mirrored (the Redis events under the session's key). The live
/// session has both, so the record of its streams does not keep copies.
pub struct StreamOwner<'a> {
    pub replica: &'a str,
    pub mirror: Option<(&'a RedisEvents, &'a SessionKey)>,
}

impl SessionEvents {
    pub fn new(limits: EventLimits) -> SessionEvents {
        SessionEvents {
            next: AtomicU64::new(1),
            limits,
            streams: Mutex::default(),
        }
    }

    /// A new, empty stream log.
    pub fn open(&self, kind: StreamKind, owner: StreamOwner<'_>) -> Arc<StreamLog> {
        let n = self.next.fetch_add(1, Ordering::Relaxed);
        let letter = match kind {
            StreamKind::Post => 'p',
            StreamKind::Get => 'g',
        };
        let mut digits = itoa::Buffer::new();
        let digits = digits.format(n);
        let mut text = String::with_capacity(owner.replica.len() + 2 + digits.len());
        text.push_str(owner.replica);
        text.push('-');
        text.push(letter);
        text.push_str(digits);
        let id = StreamId(text.into());
        let log = Arc::new(StreamLog::new(id.clone(), kind, self.limits.per_stream));
        if let Some((redis, session)) = owner.mirror {
            log.set_mirror(redis.mirror(session, id.as_str()));
        }
        if let Ok(mut streams) = self.streams.lock() {
            streams.push(log.clone());
            while streams.len() > self.limits.max_streams {
                // Prefer dropping a finished stream; else the oldest one.
                let victim = streams.iter().position(|l| l.is_done()).unwrap_or(0);
                streams.remove(victim).finish();
            }
        }
        log
    }

    /// The stream an event id names, if this session still has it.
    pub fn find(&self, id: &EventId) -> Option<Arc<StreamLog>> {
        let log = self
            .streams
            .lock()
            .ok()?
            .iter()
            .find(|l| l.id == id.stream)
            .cloned()?;
        log.has_issued(id.seq).then_some(log)
    }

    /// Ends every stream (the session is over).
    pub fn finish_all(&self) {
        if let Ok(streams) = self.streams.lock() {
            for l in streams.iter() {
                l.finish();
            }
        }
    }
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used)]
    use super::*;

    #[test]
    fn event_ids_round_trip_and_reject_foreign_shapes() {
        let id = EventId::new(StreamId::from("a1b2c3d4-7"), 42);
        assert_eq!(id.to_string(), "a1b2c3d4-7.42");
        assert_eq!(EventId::parse("a1b2c3d4-7.42"), Some(id));
        for bad in ["", "42", "a.b", ".3", "x y.1", "a1b2c3d4-7.-1", "a:b.1"] {
            assert_eq!(EventId::parse(bad), None, "{bad}");
        }
    }

    #[test]
    fn streams_are_unique_bounded_and_found_only_by_issued_ids() {
        let ev = SessionEvents::new(EventLimits {
            per_stream: LogLimits::default(),
            max_streams: 2,
        });
        let owner = || StreamOwner {
            replica: "r1",
            mirror: None,
        };
        let a = ev.open(StreamKind::Post, owner());
        let b = ev.open(StreamKind::Post, owner());
        assert_ne!(a.id, b.id);
        assert_eq!(a.id.as_str(), "r1-p1");
        assert_eq!(a.id.kind(), Some(StreamKind::Post));
        a.append(b"{}", true);
        assert!(ev.find(&EventId::new(a.id.clone(), 1)).is_some());
        assert!(
            ev.find(&EventId::new(a.id.clone(), 2)).is_none(),
            "not issued"
        );
        let c = ev.open(StreamKind::Get, owner());
        assert_eq!(c.id.kind(), Some(StreamKind::Get));
        assert_eq!(c.id.as_str(), "r1-g3");
        // The finished stream made room; the live one stays.
        assert!(ev.find(&EventId::new(a.id.clone(), 1)).is_none());
        b.append(b"{}", false);
        assert!(ev.find(&EventId::new(b.id.clone(), 1)).is_some());
        assert!(!c.is_done());
    }
}
