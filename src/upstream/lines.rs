//! Newline-delimited lines with a bound on each: a stdio child's stdout (its messages), read
//! in the task that runs the child, and its stderr, read by the children's watcher.

use bytes::{Buf, BytesMut};
use tokio::net::unix::pipe;

/// One line, without its terminator (`\n` or `\r\n`).
pub(super) enum Line {
    Complete(Vec<u8>),
    /// Longer than the bound: only the first `max` bytes are kept.
    TooLong(Vec<u8>),
}

/// What was read and not yet cut into lines: never more than `max` bytes of one line (the
/// rest of a longer one is dropped up to its newline).
pub(super) struct LineBuf {
    buf: BytesMut,
    /// Bytes at the start of `buf` already searched for a newline.
    scanned: usize,
    /// The line being read is longer than `max`: `buf` keeps its first `max` bytes and the
    /// rest is dropped up to its newline.
    overflow: bool,
    max: usize,
}

impl LineBuf {
    pub(super) fn new(max: usize) -> LineBuf {
        LineBuf {
            buf: BytesMut::new(),
            scanned: 0,
            overflow: false,
            max,
        }
    }

    pub(super) fn max(&self) -> usize {
        self.max
    }

    /// Nothing of a line is held.
    pub(super) fn is_empty(&self) -> bool {
        self.buf.is_empty() && !self.overflow
    }

    /// Appends what was read.
    pub(super) fn extend(&mut self, read: &[u8]) {
        self.buf.extend_from_slice(read);
    }

    /// Drops the buffer if it holds nothing of a line: a reader waiting for a quiet child
    /// holds no memory.
    pub(super) fn release_if_empty(&mut self) {
        if self.buf.is_empty() {
            self.buf = BytesMut::new();
        }
    }

    /// A whole line from what was read, if there is one; bounds the line being read.
    pub(super) fn take_line(&mut self) -> Option<Line> {
        let Some(i) = memchr::memchr(b'\n', &self.buf[self.scanned..]).map(|i| i + self.scanned)
        else {
            if self.buf.len() > self.max {
                self.overflow = true;
                self.buf.truncate(self.max);
            }
            self.scanned = self.buf.len();
            return None;
        };
        let overflow = std::mem::take(&mut self.overflow) || i > self.max;
        let line = self.buf[..i.min(self.max)].to_vec();
        self.buf.advance(i + 1);
        self.scanned = 0;
        Some(finish(line, overflow))
    }

    /// At the end of the input: the last line, if it had no newline.
    pub(super) fn rest(&mut self) -> Option<Line> {
        let overflow = std::mem::take(&mut self.overflow);
        let rest = std::mem::take(&mut self.buf);
        self.scanned = 0;
        (!rest.is_empty()).then(|| finish(rest.to_vec(), overflow))
    }
}

fn finish(mut line: Vec<u8>, overflow: bool) -> Line {
    if overflow {
        return Line::TooLong(line);
    }
    if line.last() == Some(&b'\r') {
        line.pop();
    }
    Line::Complete(line)
}

/// Newline-delimited reading from a pipe that never buffers more than `max` bytes of one
/// line, and holds no buffer while it waits for the child to write: an idle child costs no
/// read buffer. (A `BufReader` per pipe kept a zeroed 64 KiB buffer for stdout and 8 KiB for
/// stderr, ~72 KB of resident memory per process; with a process per session, per session.)
pub(super) struct BoundedLines {
    pipe: pipe::Receiver,
    lines: LineBuf,
    eof: bool,
    /// Room made for each read: at most 64 KiB (fewer reads for the upstream's messages),
    /// never more than a line may be.
    chunk: usize,
}

impl BoundedLines {
    pub(super) fn new(pipe: pipe::Receiver, max: usize) -> Self {
        BoundedLines {
            pipe,
            lines: LineBuf::new(max),
            eof: false,
            chunk: max.clamp(1, 64 * 1024),
        }
    }

    pub(super) fn max(&self) -> usize {
        self.lines.max()
    }

    /// The next line; `None` at end of input.
    pub(super) async fn next(&mut self) -> Option<Line> {
        loop {
            if let Some(line) = self.lines.take_line() {
                return Some(line);
            }
            if self.eof {
                return self.lines.rest();
            }
            // Readiness first: a reader polled while the child has written nothing costs no
            // system call and no buffer.
            let (pipe, lines) = (&self.pipe, &mut self.lines);
            let ready = std::future::poll_fn(|cx| {
                let ready = pipe.poll_read_ready(cx);
                if ready.is_pending() {
                    // Nothing of a line is held: wait without a buffer.
                    lines.release_if_empty();
                }
                ready
            })
            .await;
            if ready.is_err() {
                self.eof = true;
                continue;
            }
            self.lines.buf.reserve(self.chunk);
            match self.pipe.try_read_buf(&mut self.lines.buf) {
                Ok(0) => self.eof = true,
                Ok(_) => {}
                Err(e) if e.kind() == std::io::ErrorKind::WouldBlock => {}
                Err(_) => self.eof = true,
            }
        }
    }
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used)]
    use std::time::Duration;

    use tokio::io::AsyncWriteExt;

    use super::*;

    /// Lines cut across reads, an over-long one whose newline comes reads later, and a last
    /// line without a newline: the same lines whatever the reads' boundaries.
    #[tokio::test]
    async fn bounded_lines_join_reads_and_drop_the_rest_of_long_lines() {
        let (mut tx, rx) = pipe::pipe().unwrap();
        let pieces: [&[u8]; 7] = [
            b"ab",
            b"c\r",
            b"\nABCDEFGH",
            b"IJKLMN",
            b"OPQ\nxy",
            b"z\n\n",
            b"end",
        ];
        let writer = tokio::spawn(async move {
            for p in pieces {
                tx.write_all(p).await.unwrap();
                tokio::time::sleep(Duration::from_millis(5)).await;
            }
        });
        let mut lines = BoundedLines::new(rx, 8);
        let out = texts(&mut lines).await;
        writer.await.unwrap();
        assert_eq!(out, ["ok:abc", "long:ABCDEFGH", "ok:xyz", "ok:", "ok:end"]);
    }

    /// Every line of the input, as `ok:<text>` or `long:<kept prefix>`.
    async fn texts(lines: &mut BoundedLines) -> Vec<String> {
        let mut out = vec![];
        while let Some(l) = lines.next().await {
            out.push(match l {
                Line::Complete(v) => format!("ok:{}", String::from_utf8(v).unwrap()),
                Line::TooLong(v) => format!("long:{}", String::from_utf8(v).unwrap()),
            });
        }
        out
    }

    /// A reader waiting for the child with no partial line holds no buffer; with one, it
    /// keeps it and completes the line later.
    #[tokio::test]
    async fn bounded_lines_hold_no_buffer_while_waiting() {
        let (mut tx, rx) = pipe::pipe().unwrap();
        let mut lines = BoundedLines::new(rx, 64 * 1024);
        tx.write_all(b"one\n").await.unwrap();
        assert!(matches!(lines.next().await, Some(Line::Complete(l)) if l == b"one"));
        let waiting = tokio::time::timeout(Duration::from_millis(50), lines.next()).await;
        assert!(waiting.is_err(), "no line was written");
        assert_eq!(lines.lines.buf.capacity(), 0);
        tx.write_all(b"tw").await.unwrap();
        let waiting = tokio::time::timeout(Duration::from_millis(50), lines.next()).await;
        assert!(waiting.is_err(), "the line is not complete");
        assert!(lines.lines.buf.capacity() > 0);
        tx.write_all(b"o\n").await.unwrap();
        assert!(matches!(lines.next().await, Some(Line::Complete(l)) if l == b"two"));
    }

    #[tokio::test]
    async fn bounded_lines_split_strip_cr_and_cap_length() {
        let (mut tx, rx) = pipe::pipe().unwrap();
        tx.write_all(b"{\"a\":1}\r\nshort\n0123456789abc\nlast")
            .await
            .unwrap();
        drop(tx);
        let mut lines = BoundedLines::new(rx, 10);
        let out = texts(&mut lines).await;
        assert_eq!(
            out,
            ["ok:{\"a\":1}", "ok:short", "long:0123456789", "ok:last"]
        );
    }
}
