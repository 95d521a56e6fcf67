//! HTTP/1.1 on one upstream connection (RFC 9112), driven by whoever sends the request: the
//! request head written with the body in one write, the response head parsed from the
//! connection's buffer, and the body read through its framing (`Content-Length`, chunked, or
//! to the end of the connection). Nothing runs between requests — an idle connection is
//! only checked for the server having closed it when it is taken again — so a request costs
//! no task, channel or wake-up of its own.
//!
//! Bounded against a hostile upstream: the response head (size and header count), chunk-size
//! lines, trailers and the number of interim (1xx) responses; anything malformed is an error
//! and the connection is not reused.

use std::io;
use std::pin::Pin;
use std::task::{Context, Poll, Waker};

use bytes::{Buf, Bytes, BytesMut};
use http::{Method, StatusCode, Uri};
use tokio::io::{AsyncRead, AsyncReadExt, AsyncWrite, AsyncWriteExt, ReadBuf};
use tokio::net::TcpStream;

use super::head_fields::HeaderFields;
use super::header_lines::HeaderLines;

/// The largest response head read (status line and headers).
const MAX_HEAD: usize = 64 * 1024;
/// The most header fields in a response head.
const MAX_HEADERS: usize = 128;
/// The largest chunk-size line (size and extensions).
const MAX_CHUNK_LINE: usize = 4 * 1024;
/// The largest trailer section.
const MAX_TRAILERS: usize = 8 * 1024;
/// Interim (1xx) responses skipped before the final one.
const MAX_INTERIM: usize = 8;
/// Bodies up to this size go out in the same write as the head (copied); larger ones after it.
const INLINE_BODY: usize = 16 * 1024;
/// What a read asks the buffer to have room for.
const READ_CHUNK: usize = 8 * 1024;
/// A request buffer up to this size is kept for the connection's next request (one
/// allocation fewer per request on a pooled connection; a pool keeps at most
/// `http_client::MAX_IDLE` idle connections, so at most that many such buffers).
const KEPT_WRITE: usize = 8 * 1024;
/// The end of a body, when wholly buffered and at most this long, is copied out of the read
/// buffer rather than split off it (see `take_some`).
const COPIED_BODY: usize = 16 * 1024;

/// A byte stream an upstream connection runs on (TCP, or TLS over it).
pub trait Stream: AsyncRead + AsyncWrite + Send + Unpin {
    /// Ready once a read may not wait (bytes, the end, or an error), without reading: a
    /// connection waiting for its answer — an idle SSE stream above all — then holds no read
    /// buffer. Pending only when a read would surely wait.
    fn poll_read_ready(&self, cx: &mut Context<'_>) -> Poll<io::Result<()>>;
}

impl Stream for TcpStream {
    fn poll_read_ready(&self, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        TcpStream::poll_read_ready(self, cx)
    }
}

impl Stream for tokio_rustls::client::TlsStream<TcpStream> {
    fn poll_read_ready(&self, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        let (tcp, tls) = self.get_ref();
        if tls.wants_read() {
            // No decrypted bytes held: only new bytes on the socket can be read.
            tcp.poll_read_ready(cx)
        } else {
            Poll::Ready(Ok(()))
        }
    }
}

/// Why an exchange failed. The text names no URL and no credentials.
#[derive(Debug, thiserror::Error)]
pub enum H1Error {
    #[error("{0}")]
    Io(#[from] io::Error),
    #[error("the connection closed before the response")]
    ClosedBeforeResponse,
    #[error("the connection closed in the middle of the body")]
    ClosedInBody,
    #[error("malformed response: {0}")]
    Malformed(&'static str),
}

/// One connection and what has been read from it but not consumed.
pub struct Conn {
    io: Box<dyn Stream>,
    buf: BytesMut,
    /// The last request's buffer, kept for the next one when it is at most `KEPT_WRITE`
    /// (and given up, as the read buffer is, while a body keeps the connection waiting).
    out: Vec<u8>,
    /// The connection worker whose I/O driver the socket is registered with (`workers::home`
    /// where it was opened; 0: the main runtime).
    home: usize,
}

/// A response's status and headers, and how its body is framed.
pub struct Head {
    pub status: StatusCode,
    pub headers: HeaderFields,
    pub body: BodyState,
    /// The connection may carry another request once the body is read.
    pub reusable: bool,
}

/// Where the reading of a body stands.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum BodyState {
    /// This many bytes are left (`Content-Length`).
    Length(u64),
    /// Chunked: the next thing is a chunk-size line.
    ChunkSize,
    /// Chunked: this many bytes of the current chunk are left.
    ChunkData(u64),
    /// Chunked: the CRLF after a chunk's data.
    ChunkEnd,
    /// Chunked: after the last chunk, the trailer section (bytes read of it so far).
    Trailers(usize),
    /// Until the server closes the connection.
    UntilClose,
    /// Read to its end.
    Done,
}

impl BodyState {
    /// The body's length, when the head declared it.
    pub fn declared_length(self) -> Option<u64> {
        match self {
            BodyState::Length(n) => Some(n),
            BodyState::Done => Some(0),
            _ => None,
        }
    }
}

impl Conn {
    /// A connection on `io`, opened (and registered) on the calling thread's runtime.
    pub fn new(io: Box<dyn Stream>) -> Conn {
        Conn {
            io,
            buf: BytesMut::new(),
            out: Vec::new(),
            home: crate::workers::home(),
        }
    }

    /// The connection worker the socket is registered with (see `workers::home`).
    pub fn home(&self) -> usize {
        self.home
    }

    /// Whether an idle connection can no longer carry a request: the server closed it, sent
    /// something unasked, or it failed. Checked without waiting.
    pub fn is_stale(&mut self) -> bool {
        if !self.buf.is_empty() {
            return true;
        }
        let mut byte = [0u8; 1];
        let mut probe = ReadBuf::new(&mut byte);
        let mut cx = Context::from_waker(Waker::noop());
        // Ready: the end of the stream, an unasked byte, or an error.
        Pin::new(&mut self.io)
            .poll_read(&mut cx, &mut probe)
            .is_ready()
    }

    /// Writes a request: `fixed` (the origin's own lines, `Host` first) and `lines` as given,
    /// `Content-Length` added unless the body is empty on a method that has none.
    pub async fn send(
        &mut self,
        method: &Method,
        target: &Uri,
        fixed: &[u8],
        lines: &HeaderLines,
        body: &[u8],
    ) -> io::Result<()> {
        let fields = lines.as_bytes();
        let mut head = std::mem::take(&mut self.out);
        head.clear();
        head.reserve(64 + fixed.len() + fields.len() + body.len().min(INLINE_BODY));
        head.extend_from_slice(method.as_str().as_bytes());
        head.push(b' ');
        match target.path_and_query() {
            // Origin form.
            Some(pq) if target.scheme().is_none() => head.extend_from_slice(pq.as_str().as_bytes()),
            // Absolute form (through a proxy).
            _ => head.extend_from_slice(target.to_string().as_bytes()),
        }
        head.extend_from_slice(b" HTTP/1.1\r\n");
        head.extend_from_slice(fixed);
        head.extend_from_slice(fields);
        let bodiless = matches!(*method, Method::GET | Method::HEAD | Method::DELETE);
        if !(bodiless && body.is_empty()) {
            head.extend_from_slice(b"content-length: ");
            head.extend_from_slice(itoa::Buffer::new().format(body.len()).as_bytes());
            head.extend_from_slice(b"\r\n");
        }
        head.extend_from_slice(b"\r\n");
        if body.len() <= INLINE_BODY {
            head.extend_from_slice(body);
            self.io.write_all(&head).await?;
        } else {
            self.io.write_all(&head).await?;
            self.io.write_all(body).await?;
        }
        if head.capacity() <= KEPT_WRITE {
            self.out = head;
        }
        self.io.flush().await
    }

    /// Reads the final response's head (interim 1xx responses are skipped). `method` is the
    /// request's (a `HEAD` answer has no body).
    pub async fn read_head(&mut self, method: &Method) -> Result<Head, H1Error> {
        for _ in 0..=MAX_INTERIM {
            // Bytes already looked at for the head's end: a head that comes a byte at a time
            // is scanned once, and parsed only once its blank line may be there.
            let mut scanned = 0;
            let (status, headers, version, used) = loop {
                if ends_head(&self.buf, scanned)
                    && let Some(parsed) = parse_head(&self.buf)?
                {
                    break parsed;
                }
                scanned = self.buf.len();
                if self.buf.len() >= MAX_HEAD {
                    return Err(H1Error::Malformed("response head too large"));
                }
                if self.read_more().await? == 0 {
                    return Err(H1Error::ClosedBeforeResponse);
                }
            };
            self.buf.advance(used);
            if status.is_informational() {
                if status == StatusCode::SWITCHING_PROTOCOLS {
                    return Err(H1Error::Malformed("unrequested protocol switch"));
                }
                continue;
            }
            return framing(method, status, headers, version);
        }
        Err(H1Error::Malformed("too many interim responses"))
    }

    /// The next piece of the body; `None` at its end.
    pub async fn next_chunk(&mut self, state: &mut BodyState) -> Result<Option<Bytes>, H1Error> {
        loop {
            match *state {
                BodyState::Done => return Ok(None),
                BodyState::Length(0) => {
                    *state = BodyState::Done;
                    return Ok(None);
                }
                BodyState::Length(left) => {
                    let take = self.take_some(left).await?;
                    *state = BodyState::Length(left - take.len() as u64);
                    return Ok(Some(take));
                }
                BodyState::UntilClose => {
                    if self.buf.is_empty() && self.fill().await? == 0 {
                        *state = BodyState::Done;
                        return Ok(None);
                    }
                    return Ok(Some(self.buf.split().freeze()));
                }
                BodyState::ChunkSize => match self.line(MAX_CHUNK_LINE)? {
                    Some(line) => {
                        let size = chunk_size(&line)?;
                        *state = if size == 0 {
                            BodyState::Trailers(0)
                        } else {
                            BodyState::ChunkData(size)
                        };
                    }
                    None => self.fill_or(H1Error::ClosedInBody).await?,
                },
                BodyState::ChunkData(left) => {
                    let take = self.take_some(left).await?;
                    let left = left - take.len() as u64;
                    *state = if left == 0 {
                        BodyState::ChunkEnd
                    } else {
                        BodyState::ChunkData(left)
                    };
                    return Ok(Some(take));
                }
                BodyState::ChunkEnd => match self.line(2)? {
                    Some(line) if line.is_empty() => *state = BodyState::ChunkSize,
                    Some(_) => return Err(H1Error::Malformed("chunk data longer than its size")),
                    None => self.fill_or(H1Error::ClosedInBody).await?,
                },
                BodyState::Trailers(read) => {
                    match self.line(MAX_TRAILERS.saturating_sub(read).max(2))? {
                        Some(line) if line.is_empty() => *state = BodyState::Done,
                        Some(line) => {
                            let read = read + line.len() + 2;
                            if read > MAX_TRAILERS {
                                return Err(H1Error::Malformed("trailers too large"));
                            }
                            *state = BodyState::Trailers(read);
                        }
                        None => self.fill_or(H1Error::ClosedInBody).await?,
                    }
                }
            }
        }
    }

    /// Whether anything beyond the response was read (the connection is then not reused).
    pub fn has_leftover(&self) -> bool {
        !self.buf.is_empty()
    }

    /// Reads more into the buffer; 0 at the end of the stream. For a response head, which
    /// is on its way: the buffer is kept while it is awaited.
    async fn read_more(&mut self) -> io::Result<usize> {
        self.buf.reserve(READ_CHUNK);
        self.io.read_buf(&mut self.buf).await
    }

    /// [`Self::read_more`] for a body, which may keep the connection waiting as long as the
    /// server likes (an event stream open for a session's life): room is made once bytes are
    /// there, so a connection waiting with nothing unread holds no buffer (8 KiB each).
    async fn fill(&mut self) -> io::Result<usize> {
        if self.buf.is_empty() {
            let (io, buf, out) = (&mut self.io, &mut self.buf, &mut self.out);
            std::future::poll_fn(move |cx| match io.poll_read_ready(cx) {
                Poll::Pending => {
                    // Also without capacity of its own: an empty buffer may still share the
                    // allocation of what was split off it. Nor the request buffer kept for
                    // the next request: a stream may keep the connection for a session's life.
                    *buf = BytesMut::new();
                    *out = Vec::new();
                    Poll::Pending
                }
                ready => ready,
            })
            .await?;
        }
        self.read_more().await
    }

    async fn fill_or(&mut self, closed: H1Error) -> Result<(), H1Error> {
        match self.fill().await? {
            0 => Err(closed),
            _ => Ok(()),
        }
    }

    /// Up to `left` bytes of a body whose end is announced: what is buffered, or what the
    /// next read brings; the connection closing first is an error.
    async fn take_some(&mut self, left: u64) -> Result<Bytes, H1Error> {
        if self.buf.is_empty() {
            self.fill_or(H1Error::ClosedInBody).await?;
        }
        let n = usize::try_from(left)
            .unwrap_or(usize::MAX)
            .min(self.buf.len());
        if u64::try_from(n).is_ok_and(|n| n == left) && n <= COPIED_BODY {
            // The rest of the body is here (the usual answer: a whole JSON body in one read):
            // copied out at its exact length, so the read buffer stays the connection's own
            // and the next answer is read into it. Split off, the buffer would become shared
            // (an allocation for the count), and the next read would need a new one while
            // this piece lives on in the answer.
            let body = Bytes::copy_from_slice(&self.buf[..n]);
            self.buf.advance(n);
            return Ok(body);
        }
        Ok(self.buf.split_to(n).freeze())
    }

    /// The next line (without its CRLF or LF) if a whole one is buffered; an error when more
    /// than `max` bytes come without one.
    fn line(&mut self, max: usize) -> Result<Option<BytesMut>, H1Error> {
        match self.buf.iter().position(|&b| b == b'\n') {
            Some(end) => {
                let mut line = self.buf.split_to(end + 1);
                line.truncate(end);
                if line.last() == Some(&b'\r') {
                    line.truncate(end - 1);
                }
                Ok(Some(line))
            }
            None if self.buf.len() > max => Err(H1Error::Malformed("line too long")),
            None => Ok(None),
        }
    }
}

/// Whether `buf`, looked at from `from` on (its first bytes were looked at before), holds
/// the blank line that ends a head (`CRLF CRLF`, or bare `LF LF`).
fn ends_head(buf: &[u8], from: usize) -> bool {
    let tail = &buf[from.saturating_sub(3).min(buf.len())..];
    // Each line feed, found with memchr, and what follows it: a byte-by-byte window over the
    // head (and the body read with it) cost ~500 instructions per response.
    memchr::memchr_iter(b'\n', tail).any(|i| match tail.get(i + 1) {
        Some(b'\n') => true,
        Some(b'\r') => tail.get(i + 2) == Some(&b'\n'),
        _ => false,
    })
}

/// A complete head at the start of `buf`: status, headers, minor version, bytes used.
fn parse_head(buf: &[u8]) -> Result<Option<(StatusCode, HeaderFields, u8, usize)>, H1Error> {
    if buf.is_empty() {
        return Ok(None);
    }
    let mut fields = [httparse::EMPTY_HEADER; MAX_HEADERS];
    let mut response = httparse::Response::new(&mut fields);
    let used = match response.parse(buf) {
        Ok(httparse::Status::Complete(n)) => n,
        Ok(httparse::Status::Partial) => return Ok(None),
        Err(httparse::Error::TooManyHeaders) => {
            return Err(H1Error::Malformed("too many header fields"));
        }
        Err(_) => return Err(H1Error::Malformed("invalid response head")),
    };
    let status = response
        .code
        .and_then(|c| StatusCode::from_u16(c).ok())
        .ok_or(H1Error::Malformed("invalid status"))?;
    // Names and values were validated by httparse (tokens; no control characters but HTAB).
    let head = buf.get(..used).unwrap_or_default();
    let headers = HeaderFields::from_parsed(head, response.headers)
        .ok_or(H1Error::Malformed("invalid response head"))?;
    Ok(Some((status, headers, response.version.unwrap_or(1), used)))
}

/// How the body of a final response is framed (RFC 9112 §6.3), and whether the connection
/// can be reused after it.
fn framing(
    method: &Method,
    status: StatusCode,
    headers: HeaderFields,
    version: u8,
) -> Result<Head, H1Error> {
    let mut reusable = version == 1 && !has_token(&headers, "connection", "close");
    let body = if *method == Method::HEAD
        || status == StatusCode::NO_CONTENT
        || status == StatusCode::NOT_MODIFIED
    {
        BodyState::Done
    } else if headers.contains("transfer-encoding") {
        // A length next to a transfer coding is a smuggling attempt or a mistake: the
        // coding wins, and the connection is not trusted again.
        if headers.contains("content-length") {
            reusable = false;
        }
        if last_coding_is_chunked(&headers) {
            BodyState::ChunkSize
        } else {
            reusable = false;
            BodyState::UntilClose
        }
    } else if headers.contains("content-length") {
        BodyState::Length(content_length(&headers)?)
    } else {
        reusable = false;
        BodyState::UntilClose
    };
    Ok(Head {
        status,
        headers,
        body,
        reusable,
    })
}

/// The one length every `Content-Length` field states (`1, 1` included); an error otherwise.
fn content_length(headers: &HeaderFields) -> Result<u64, H1Error> {
    let mut found = None;
    for value in headers.get_all("content-length") {
        for part in value.split(|&b| b == b',') {
            let digits = part.trim_ascii();
            if digits.is_empty() || !digits.iter().all(u8::is_ascii_digit) {
                return Err(H1Error::Malformed("invalid Content-Length"));
            }
            let n = std::str::from_utf8(digits)
                .ok()
                .and_then(|d| d.parse::<u64>().ok())
                .ok_or(H1Error::Malformed("invalid Content-Length"))?;
            if found.is_some_and(|f| f != n) {
                return Err(H1Error::Malformed("conflicting Content-Length"));
            }
            found = Some(n);
        }
    }
    found.ok_or(H1Error::Malformed("invalid Content-Length"))
}

fn last_coding_is_chunked(headers: &HeaderFields) -> bool {
    headers
        .get_all("transfer-encoding")
        .next_back()
        .and_then(|v| v.rsplit(|&b| b == b',').next())
        .is_some_and(|c| c.trim_ascii().eq_ignore_ascii_case(b"chunked"))
}

fn has_token(headers: &HeaderFields, name: &str, token: &str) -> bool {
    headers.get_all(name).any(|v| {
        v.split(|&b| b == b',')
            .any(|t| t.trim_ascii().eq_ignore_ascii_case(token.as_bytes()))
    })
}

/// The size on a chunk-size line (hex, extensions after `;` ignored).
fn chunk_size(line: &[u8]) -> Result<u64, H1Error> {
    let digits = line
        .split(|&b| b == b';')
        .next()
        .unwrap_or_default()
        .trim_ascii();
    if digits.is_empty() || digits.len() > 16 {
        return Err(H1Error::Malformed("invalid chunk size"));
    }
    let mut size = 0u64;
    for &d in digits {
        // `to_digit` takes ASCII digits and letters only.
        let v = char::from(d)
            .to_digit(16)
            .ok_or(H1Error::Malformed("invalid chunk size"))?;
        size = (size << 4) | u64::from(v);
    }
    Ok(size)
}

#[cfg(test)]
#[path = "h1_tests.rs"]
mod tests;
