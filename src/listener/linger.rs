//! The lingering close: when the gateway ends a connection whose client may still be sending
//! (an answer given before the request body was read — 413 on an announced length, 401, 404
//! — or `Connection: close` while draining), closing the socket at once would make the
//! kernel answer the client's next bytes with a reset, and a client still writing would see
//! `EPIPE`/`ECONNRESET` instead of reading the answer that is already on its way.
//!
//! [`Lingering`] wraps the client's TCP socket, under TLS when there is TLS. When hyper shuts
//! the connection down it sends the FIN (after TLS's `close_notify`), then reads and discards
//! what the client still sends until the client closes its side, at most [`LINGER_TIME`]
//! and [`LINGER_BYTES`]; then the socket is closed. A client that closed first (end of
//! stream already read) costs nothing more. The connection keeps its place in the
//! listener's counts while it lingers. Refused connections (`refuse.rs`) close the same way,
//! with their own smaller bounds.

use std::future::Future as _;
use std::io;
use std::pin::Pin;
use std::task::{Context, Poll, ready};
use std::time::Duration;

use tokio::io::{AsyncRead, AsyncWrite, ReadBuf};
use tokio::net::TcpStream;
use tokio::time::Sleep;

/// The longest a closed connection waits for its client to close its side.
pub const LINGER_TIME: Duration = Duration::from_secs(2);
/// The most a closed connection reads (and discards) while it waits.
pub const LINGER_BYTES: usize = 8 << 20;
/// Bytes discarded per read while lingering.
const DISCARD_CHUNK: usize = 16 * 1024;

/// A client's TCP socket that closes by lingering (module note).
#[derive(Debug)]
pub struct Lingering {
    tcp: TcpStream,
    /// The client's end of stream has been read: nothing to wait for.
    read_closed: bool,
    /// Our side's FIN is sent.
    write_closed: bool,
    /// Set on the first wait while lingering.
    deadline: Option<Pin<Box<Sleep>>>,
    discarded: usize,
    time: Duration,
    max_bytes: usize,
}

impl Lingering {
    /// A served connection's socket: [`LINGER_TIME`], [`LINGER_BYTES`].
    pub fn new(tcp: TcpStream) -> Lingering {
        Lingering::with_bounds(tcp, LINGER_TIME, LINGER_BYTES)
    }

    /// Lingers at most `time`, reading at most `max_bytes`.
    pub fn with_bounds(tcp: TcpStream, time: Duration, max_bytes: usize) -> Lingering {
        Lingering {
            tcp,
            read_closed: false,
            write_closed: false,
            deadline: None,
            discarded: 0,
            time,
            max_bytes,
        }
    }

    /// Reads and discards until the client closes, an error, or a bound: Ready then.
    fn poll_discard(&mut self, cx: &mut Context<'_>) -> Poll<()> {
        let mut chunk = [std::mem::MaybeUninit::<u8>::uninit(); DISCARD_CHUNK];
        while !self.read_closed && self.discarded < self.max_bytes {
            let mut buf = ReadBuf::uninit(&mut chunk);
            match Pin::new(&mut self.tcp).poll_read(cx, &mut buf) {
                Poll::Ready(Ok(())) if buf.filled().is_empty() => self.read_closed = true,
                Poll::Ready(Ok(())) => self.discarded += buf.filled().len(),
                Poll::Ready(Err(_)) => return Poll::Ready(()),
                Poll::Pending => {
                    let deadline = self
                        .deadline
                        .get_or_insert_with(|| Box::pin(tokio::time::sleep(self.time)));
                    return deadline.as_mut().poll(cx);
                }
            }
        }
        Poll::Ready(())
    }
}

impl AsyncRead for Lingering {
    fn poll_read(
        self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        buf: &mut ReadBuf<'_>,
    ) -> Poll<io::Result<()>> {
        let this = self.get_mut();
        let before = buf.filled().len();
        let read = ready!(Pin::new(&mut this.tcp).poll_read(cx, buf));
        if read.is_ok() && buf.filled().len() == before && buf.remaining() > 0 {
            this.read_closed = true;
        }
        Poll::Ready(read)
    }
}

impl AsyncWrite for Lingering {
    fn poll_write(
        self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        buf: &[u8],
    ) -> Poll<io::Result<usize>> {
        Pin::new(&mut self.get_mut().tcp).poll_write(cx, buf)
    }

    fn poll_write_vectored(
        self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        bufs: &[io::IoSlice<'_>],
    ) -> Poll<io::Result<usize>> {
        Pin::new(&mut self.get_mut().tcp).poll_write_vectored(cx, bufs)
    }

    fn is_write_vectored(&self) -> bool {
        self.tcp.is_write_vectored()
    }

    fn poll_flush(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        Pin::new(&mut self.get_mut().tcp).poll_flush(cx)
    }

    /// Sends the FIN, then lingers (module note). Only the FIN's failure is an error: what
    /// happens while lingering is the client's business.
    fn poll_shutdown(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        let this = self.get_mut();
        if !this.write_closed {
            ready!(Pin::new(&mut this.tcp).poll_shutdown(cx))?;
            this.write_closed = true;
        }
        this.poll_discard(cx).map(Ok)
    }
}

#[cfg(test)]
mod tests;
