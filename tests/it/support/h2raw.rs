//! HTTP/2 frames over a bare TCP socket (cleartext, prior knowledge), for tests that must see
//! what a server's SETTINGS say and how it answers a peer that ignores them — HTTP/2 client
//! libraries obey the limits, so they cannot show the server enforcing them. Header blocks
//! are written as HPACK literals without indexing or Huffman coding (always valid).

use std::time::Duration;

use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::TcpStream;

const PREFACE: &[u8] = b"PRI * HTTP/2.0\r\n\r\nSM\r\n\r\n";
pub const DATA: u8 = 0x0;
pub const HEADERS: u8 = 0x1;
pub const RST_STREAM: u8 = 0x3;
pub const SETTINGS: u8 = 0x4;
pub const GOAWAY: u8 = 0x7;
const CONTINUATION: u8 = 0x9;
const END_STREAM: u8 = 0x1;
const END_HEADERS: u8 = 0x4;
const ACK: u8 = 0x1;
pub const SETTINGS_MAX_CONCURRENT_STREAMS: u16 = 0x3;
pub const SETTINGS_MAX_HEADER_LIST_SIZE: u16 = 0x6;
pub const REFUSED_STREAM: u32 = 0x7;
/// The smallest frame size every peer accepts.
const MAX_FRAME: usize = 16_384;

#[derive(Debug)]
pub struct Frame {
    pub kind: u8,
    pub flags: u8,
    pub stream: u32,
    pub payload: Vec<u8>,
}

impl Frame {
    /// The error code of a RST_STREAM or GOAWAY.
    pub fn error_code(&self) -> Option<u32> {
        let at = match self.kind {
            RST_STREAM => 0,
            GOAWAY => 4,
            _ => return None,
        };
        let bytes = self.payload.get(at..at + 4)?;
        Some(u32::from_be_bytes(bytes.try_into().ok()?))
    }

    pub fn ends_stream(&self) -> bool {
        self.flags & END_STREAM != 0
    }

    /// The `:status` of a response HEADERS frame, when it is the block's first field (as
    /// servers write it): indexed from the static table, or a literal with the static name.
    pub fn status(&self) -> Option<u16> {
        if self.kind != HEADERS {
            return None;
        }
        let (&first, rest) = self.payload.split_first()?;
        let literal_name_index = match first {
            0x88..=0x8e => {
                return [200, 204, 206, 304, 400, 404, 500]
                    .get(usize::from(first - 0x88))
                    .copied();
            }
            0x40..=0x7f => first & 0x3f,
            0x00..=0x1f => first & 0x0f,
            _ => return None,
        };
        if literal_name_index != 8 {
            return None;
        }
        let (&length, value) = rest.split_first()?;
        let value = value.get(..usize::from(length & 0x7f))?;
        let text = if length & 0x80 != 0 {
            huffman_digits(value)?
        } else {
            String::from_utf8(value.to_vec()).ok()?
        };
        text.parse().ok()
    }
}

/// Decodes a Huffman-coded string of decimal digits (RFC 7541 Appendix B: '0'-'2' are the
/// 5-bit codes 0-2, '3'-'9' the 6-bit codes 0x19-0x1f); `None` for anything else.
fn huffman_digits(bytes: &[u8]) -> Option<String> {
    let bits: Vec<u8> = bytes
        .iter()
        .flat_map(|b| (0..8).rev().map(move |i| (b >> i) & 1))
        .collect();
    let mut out = String::new();
    let mut at = 0;
    while at < bits.len() {
        let code = |n: usize| -> Option<u8> {
            bits.get(at..at + n)
                .map(|b| b.iter().fold(0u8, |acc, bit| acc << 1 | bit))
        };
        // Padding: the rest is all ones (shorter than a byte).
        if bits[at..].iter().all(|b| *b == 1) && bits.len() - at < 8 {
            break;
        }
        match code(5)? {
            c @ 0..=2 => {
                out.push(char::from(b'0' + c));
                at += 5;
            }
            _ => match code(6)? {
                c @ 0x19..=0x1f => {
                    out.push(char::from(b'3' + (c - 0x19)));
                    at += 6;
                }
                _ => return None,
            },
        }
    }
    Some(out)
}

pub struct H2Conn {
    pub tcp: TcpStream,
    /// The server's first SETTINGS, by identifier.
    pub settings: Vec<(u16, u32)>,
}

impl H2Conn {
    /// Connects, sends the preface and empty SETTINGS, reads the server's SETTINGS and
    /// acknowledges them.
    pub async fn connect(addr: std::net::SocketAddr) -> H2Conn {
        let mut tcp = TcpStream::connect(addr).await.expect("connect");
        tcp.write_all(PREFACE).await.expect("preface");
        write_frame(&mut tcp, SETTINGS, 0, 0, &[]).await;
        let mut conn = H2Conn {
            tcp,
            settings: Vec::new(),
        };
        loop {
            let frame = conn.next_frame().await.expect("the server's SETTINGS");
            if frame.kind == SETTINGS && frame.flags & ACK == 0 {
                conn.settings = frame
                    .payload
                    .chunks_exact(6)
                    .map(|c| {
                        (
                            u16::from_be_bytes([c[0], c[1]]),
                            u32::from_be_bytes([c[2], c[3], c[4], c[5]]),
                        )
                    })
                    .collect();
                break;
            }
        }
        write_frame(&mut conn.tcp, SETTINGS, ACK, 0, &[]).await;
        conn
    }

    pub fn setting(&self, id: u16) -> Option<u32> {
        self.settings
            .iter()
            .find(|(k, _)| *k == id)
            .map(|(_, v)| *v)
    }

    /// Sends a request head on `stream` (odd, increasing); `end_stream` when it has no body.
    /// Blocks larger than a frame go out as HEADERS + CONTINUATION.
    pub async fn request(&mut self, stream: u32, headers: &[(&str, &str)], end_stream: bool) {
        let block = literal_block(headers);
        let mut chunks = block.chunks(MAX_FRAME).peekable();
        let mut kind = HEADERS;
        let mut first = true;
        while let Some(chunk) = chunks.next() {
            let mut flags = 0;
            if first && end_stream {
                flags |= END_STREAM;
            }
            if chunks.peek().is_none() {
                flags |= END_HEADERS;
            }
            write_frame(&mut self.tcp, kind, flags, stream, chunk).await;
            kind = CONTINUATION;
            first = false;
        }
    }

    /// The next frame, or `None` when the connection ends or nothing comes within 10 s.
    pub async fn next_frame(&mut self) -> Option<Frame> {
        tokio::time::timeout(Duration::from_secs(10), read_frame(&mut self.tcp))
            .await
            .ok()
            .flatten()
    }
}

/// The request pseudo-headers and `headers` for a request to `path` on `authority`.
pub fn request_headers<'a>(
    method: &'a str,
    authority: &'a str,
    path: &'a str,
    extra: &[(&'a str, &'a str)],
) -> Vec<(&'a str, &'a str)> {
    let mut all = vec![
        (":method", method),
        (":scheme", "http"),
        (":authority", authority),
        (":path", path),
    ];
    all.extend_from_slice(extra);
    all
}

fn literal_block(headers: &[(&str, &str)]) -> Vec<u8> {
    let mut block = Vec::new();
    for (name, value) in headers {
        // Literal header field without indexing, new name (RFC 7541 §6.2.2).
        block.push(0x00);
        integer(&mut block, name.len(), 7, 0x00);
        block.extend_from_slice(name.as_bytes());
        integer(&mut block, value.len(), 7, 0x00);
        block.extend_from_slice(value.as_bytes());
    }
    block
}

/// An HPACK integer with an `prefix`-bit prefix (RFC 7541 §5.1).
fn integer(out: &mut Vec<u8>, mut value: usize, prefix: u32, high_bits: u8) {
    let max = (1usize << prefix) - 1;
    if value < max {
        out.push(high_bits | value as u8);
        return;
    }
    out.push(high_bits | max as u8);
    value -= max;
    while value >= 128 {
        out.push((value % 128) as u8 | 0x80);
        value /= 128;
    }
    out.push(value as u8);
}

async fn write_frame(tcp: &mut TcpStream, kind: u8, flags: u8, stream: u32, payload: &[u8]) {
    let len = payload.len() as u32;
    let mut head = [0u8; 9];
    head[..3].copy_from_slice(&len.to_be_bytes()[1..]);
    head[3] = kind;
    head[4] = flags;
    head[5..].copy_from_slice(&stream.to_be_bytes());
    tcp.write_all(&head).await.expect("frame head");
    tcp.write_all(payload).await.expect("frame payload");
}

async fn read_frame(tcp: &mut TcpStream) -> Option<Frame> {
    let mut head = [0u8; 9];
    tcp.read_exact(&mut head).await.ok()?;
    let len = u32::from_be_bytes([0, head[0], head[1], head[2]]) as usize;
    let mut payload = vec![0u8; len];
    tcp.read_exact(&mut payload).await.ok()?;
    Some(Frame {
        kind: head[3],
        flags: head[4],
        stream: u32::from_be_bytes([head[5], head[6], head[7], head[8]]) & 0x7fff_ffff,
        payload,
    })
}
