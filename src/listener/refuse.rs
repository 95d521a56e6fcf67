//! Turning away a connection the caps refused, quickly and without holding descriptors: on
//! plain HTTP a short fixed response (503 when the listener is full, 429 when the client is
//! at its own cap, both with `Retry-After` and `Connection: close`) written without waiting;
//! on TLS just a close (an answer would need a handshake, the expensive part).
//!
//! Closing a socket whose request has not been read makes the kernel send a reset, which can
//! destroy the response before the client reads it; so the connection is shut for writing
//! and what the client sent is read and dropped for up to [`LINGER`] first (`linger.rs`). At most
//! [`MAX_LINGERING`] refused connections linger at once; beyond that they are closed at once
//! (the descriptor reserve counts them, see `fds.rs`).

use std::sync::Arc;
use std::time::Duration;

use tokio::io::AsyncWriteExt;
use tokio::net::TcpStream;
use tokio::sync::Semaphore;

use super::admission::Refusal;
use super::linger::Lingering;

/// How long a refused connection is read from before it is closed.
pub const LINGER: Duration = Duration::from_secs(1);
/// Refused connections lingering at once.
pub const MAX_LINGERING: usize = 64;
/// What a lingering connection reads at most (a request head and some body).
const LINGER_BYTES: usize = 64 * 1024;

const FULL: &[u8] = b"HTTP/1.1 503 Service Unavailable\r\ncontent-type: text/plain\r\ncontent-length: 40\r\nretry-after: 1\r\nconnection: close\r\n\r\ntoo many connections; retry in a moment\n";
const PER_CLIENT: &[u8] = b"HTTP/1.1 429 Too Many Requests\r\ncontent-type: text/plain\r\ncontent-length: 46\r\nretry-after: 1\r\nconnection: close\r\n\r\ntoo many connections from this client address\n";

/// Refuses connections for one listener.
#[derive(Debug, Clone)]
pub struct Refuser {
    lingering: Arc<Semaphore>,
}

impl Default for Refuser {
    fn default() -> Refuser {
        Refuser {
            lingering: Arc::new(Semaphore::new(MAX_LINGERING)),
        }
    }
}

impl Refuser {
    /// Answers (plain) or closes (TLS) `tcp` for `why`; never waits.
    pub fn refuse(&self, tcp: TcpStream, why: Refusal, tls: bool) {
        if tls {
            return;
        }
        // A fresh socket's send buffer is empty: the whole response fits, or nothing is sent.
        let _ = tcp.try_write(response(why));
        let Ok(permit) = self.lingering.clone().try_acquire_owned() else {
            return;
        };
        tokio::spawn(async move {
            let _permit = permit;
            let mut tcp = Lingering::with_bounds(tcp, LINGER, LINGER_BYTES);
            let _ = tcp.shutdown().await;
        });
    }
}

/// The fixed HTTP/1.1 answer for a refusal.
pub fn response(why: Refusal) -> &'static [u8] {
    match why {
        Refusal::Full => FULL,
        Refusal::PerClient => PER_CLIENT,
    }
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used)]
    use super::*;

    #[test]
    fn the_fixed_answers_are_well_formed() {
        for (why, status) in [(Refusal::Full, "503"), (Refusal::PerClient, "429")] {
            let text = std::str::from_utf8(response(why)).unwrap();
            let (head, body) = text.split_once("\r\n\r\n").unwrap();
            assert!(head.starts_with(&format!("HTTP/1.1 {status} ")), "{head}");
            assert!(head.contains("\r\nretry-after: 1"), "{head}");
            assert!(head.contains("\r\nconnection: close"), "{head}");
            let length = head
                .lines()
                .find_map(|l| l.strip_prefix("content-length: "))
                .unwrap();
            assert_eq!(length.parse::<usize>().unwrap(), body.len(), "{why:?}");
        }
    }
}
