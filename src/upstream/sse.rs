//! Incremental Server-Sent Events parser for upstream streams (WHATWG event-stream rules:
//! `data`, `id`, `event`, `retry` fields, comments, CR/LF/CRLF line ends), with a size bound.

use std::borrow::Cow;

use bytes::{Buf, Bytes, BytesMut};

/// One dispatched event.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct SseEvent {
    /// The `data` lines joined with `\n`.
    pub data: Bytes,
    /// The `event` field, when given.
    pub event: Option<Cow<'static, str>>,
    /// The `id` field of this event, when given.
    pub id: Option<String>,
    /// A `retry` field (milliseconds), when given.
    pub retry: Option<u64>,
}

#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("SSE event larger than {limit} bytes")]
pub struct EventTooLarge {
    pub limit: usize,
}

/// Feed chunks with [`SseParser::push`], then drain events with [`SseParser::next_event`].
#[derive(Debug)]
pub struct SseParser {
    buf: BytesMut,
    data: BytesMut,
    has_data: bool,
    event: Option<Cow<'static, str>>,
    id: Option<String>,
    retry: Option<u64>,
    limit: usize,
    /// Skip a `\n` that follows a `\r` split across chunks.
    skip_lf: bool,
}

impl SseParser {
    pub fn new(limit: usize) -> Self {
        SseParser {
            buf: BytesMut::new(),
            data: BytesMut::new(),
            has_data: false,
            event: None,
            id: None,
            retry: None,
            limit,
            skip_lf: false,
        }
    }

    pub fn push(&mut self, chunk: &[u8]) {
        self.buf.extend_from_slice(chunk);
    }

    /// The next complete event, `Ok(None)` when more input is needed.
    pub fn next_event(&mut self) -> Result<Option<SseEvent>, EventTooLarge> {
        loop {
            if self.skip_lf {
                if self.buf.is_empty() {
                    self.release();
                    return Ok(None);
                }
                if self.buf[0] == b'\n' {
                    self.buf.advance(1);
                }
                self.skip_lf = false;
            }
            let Some(end) = memchr::memchr2(b'\n', b'\r', &self.buf) else {
                if self.buf.len() + self.data.len() > self.limit {
                    return Err(EventTooLarge { limit: self.limit });
                }
                self.release();
                return Ok(None);
            };
            let terminator = self.buf[end];
            if end == 0 {
                self.buf.advance(1);
                self.skip_lf = terminator == b'\r';
                if let Some(ev) = self.dispatch() {
                    return Ok(Some(ev));
                }
                continue;
            }
            // The line is read where it is (its data copied out), then stepped over: nothing
            // is split off the buffer, which would make it shared.
            let buf = std::mem::take(&mut self.buf);
            let read = self.field(&buf[..end]);
            self.buf = buf;
            read?;
            self.buf.advance(end + 1);
            self.skip_lf = terminator == b'\r';
        }
    }

    /// Lets go of the buffers that hold nothing, before the stream waits for more: an idle
    /// stream keeps no memory (a stream stays open for a session's life). An empty buffer may
    /// still share the allocation of what was split off it (an event's data, a line) with
    /// no capacity left of its own, and would keep that allocation alive: it is replaced
    /// whenever it is empty, not only when it has capacity.
    fn release(&mut self) {
        if self.buf.is_empty() {
            self.buf = BytesMut::new();
        }
        if self.data.is_empty() {
            self.data = BytesMut::new();
        }
    }

    fn field(&mut self, line: &[u8]) -> Result<(), EventTooLarge> {
        if line[0] == b':' {
            return Ok(()); // comment / keep-alive
        }
        let (name, mut value) = match line.iter().position(|&b| b == b':') {
            Some(i) => (&line[..i], &line[i + 1..]),
            None => (line, &[][..]),
        };
        if value.first() == Some(&b' ') {
            value = &value[1..];
        }
        match name {
            b"data" => {
                if self.has_data {
                    self.data.extend_from_slice(b"\n");
                }
                self.data.extend_from_slice(value);
                self.has_data = true;
                if self.data.len() > self.limit {
                    return Err(EventTooLarge { limit: self.limit });
                }
            }
            // The usual type is not copied.
            b"event" if value == b"message" => self.event = Some(Cow::Borrowed("message")),
            b"event" => self.event = Some(Cow::Owned(String::from_utf8_lossy(value).into_owned())),
            // An id containing NUL is ignored (WHATWG rule).
            b"id" if !value.contains(&0) => {
                self.id = Some(String::from_utf8_lossy(value).into_owned());
            }
            b"retry" => {
                if let Some(ms) = std::str::from_utf8(value).ok().and_then(|s| s.parse().ok()) {
                    self.retry = Some(ms);
                }
            }
            _ => {}
        }
        Ok(())
    }

    fn dispatch(&mut self) -> Option<SseEvent> {
        let id = self.id.take();
        let retry = self.retry.take();
        let event = self.event.take();
        if !self.has_data && id.is_none() && retry.is_none() {
            return None;
        }
        self.has_data = false;
        Some(SseEvent {
            data: self.data.split().freeze(),
            event,
            id,
            retry,
        })
    }
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used)]
    use super::*;

    fn all(p: &mut SseParser) -> Vec<SseEvent> {
        let mut out = vec![];
        while let Some(e) = p.next_event().unwrap() {
            out.push(e);
        }
        out
    }

    #[test]
    fn parses_events_split_across_chunks() {
        let mut p = SseParser::new(1024);
        p.push(b"id: 1\nevent: message\nda");
        assert!(all(&mut p).is_empty());
        p.push(b"ta: {\"a\":1}\n\n: keepalive\n\ndata: x\ndata: y\r");
        let evs = all(&mut p);
        assert_eq!(evs.len(), 1);
        assert_eq!(evs[0].data, Bytes::from_static(b"{\"a\":1}"));
        assert_eq!(evs[0].id.as_deref(), Some("1"));
        assert_eq!(evs[0].event.as_deref(), Some("message"));
        p.push(b"\n\r\n");
        let evs = all(&mut p);
        assert_eq!(evs[0].data, Bytes::from_static(b"x\ny"));
        assert_eq!(evs[0].id, None);
    }

    #[test]
    fn a_drained_parser_shares_no_allocation_with_the_events_it_gave() {
        let mut p = SseParser::new(1024);
        // The data fills its buffer exactly: nothing of it is left to the parser but a
        // reference, which would keep the event's allocation alive for the stream's life.
        p.push(b"event: message\ndata: {\"id\":1}\n\n");
        let mut evs = all(&mut p);
        let ev = evs.pop().unwrap();
        assert_eq!(ev.data, Bytes::from_static(b"{\"id\":1}"));
        assert!(ev.data.is_unique(), "the parser let go of the event's data");
    }

    #[test]
    fn a_drained_parser_holds_no_buffer_and_a_partial_event_survives() {
        let mut p = SseParser::new(1024);
        p.push(b"data: one\n\ndata: tw");
        assert_eq!(all(&mut p)[0].data, Bytes::from_static(b"one"));
        assert!(p.buf.capacity() > 0, "the partial line is kept");
        p.push(b"o\n\n");
        assert_eq!(all(&mut p)[0].data, Bytes::from_static(b"two"));
        assert_eq!((p.buf.capacity(), p.data.capacity()), (0, 0));
        // A `\r` at a chunk's end, its `\n` in the next chunk.
        p.push(b"data: three\r\n\r");
        assert_eq!(all(&mut p)[0].data, Bytes::from_static(b"three"));
        assert_eq!(p.buf.capacity(), 0);
        p.push(b"\ndata: four\n\n");
        let evs = all(&mut p);
        assert_eq!(evs.len(), 1);
        assert_eq!(evs[0].data, Bytes::from_static(b"four"));
    }

    #[test]
    fn priming_event_with_only_id_and_retry_is_dispatched_with_empty_data() {
        let mut p = SseParser::new(1024);
        p.push(b"id: abc\nretry: 500\ndata:\n\n");
        let evs = all(&mut p);
        assert_eq!(evs.len(), 1);
        assert!(evs[0].data.is_empty());
        assert_eq!(evs[0].retry, Some(500));
    }

    #[test]
    fn oversized_events_are_errors() {
        let mut p = SseParser::new(8);
        p.push(b"data: 0123456789\n\n");
        assert_eq!(p.next_event(), Err(EventTooLarge { limit: 8 }));
        let mut p = SseParser::new(8);
        p.push(b"data: 0123456789");
        assert_eq!(p.next_event(), Err(EventTooLarge { limit: 8 }));
    }
}
