//! The stdio transport: newline-delimited JSON-RPC on a reader/writer pair, one writer task so
//! output lines never interleave, deferred requests running as concurrent tasks.

use std::io;
use std::sync::Arc;
use std::sync::atomic::{AtomicI32, Ordering};

use bytes::Bytes;
use tokio::io::{AsyncBufRead, AsyncBufReadExt as _, AsyncWrite, AsyncWriteExt as _};
use tokio::sync::mpsc;
use tokio::task::JoinSet;

use super::server::{Outcome, Server};
use super::tools::Transport;
use super::wire::{self, PARSE_ERROR};

/// Longest accepted input line (without the newline).
pub(crate) const MAX_LINE: usize = 16 * 1024 * 1024;

/// Queued output lines before the reader waits for the writer.
const OUT_QUEUE: usize = 1024;

/// Serves one session until `input` reaches EOF. In-flight requests are dropped at EOF (they get
/// no response); everything already answered is flushed before returning.
pub(crate) async fn serve<R, W>(server: Arc<Server>, mut input: R, output: W) -> io::Result<()>
where
    R: AsyncBufRead + Unpin,
    W: AsyncWrite + Unpin + Send + 'static,
{
    let session = server.session(Transport::Stdio);
    let exit_code = Arc::new(AtomicI32::new(0));
    let (out_tx, out_rx) = mpsc::channel::<Bytes>(OUT_QUEUE);
    let writer = tokio::spawn(write_lines(out_rx, output, Arc::clone(&exit_code)));
    let mut tasks = JoinSet::new();
    let mut buf = Vec::new();
    let result = loop {
        while tasks.try_join_next().is_some() {}
        match read_line(&mut input, &mut buf).await {
            Ok(Line::Eof) => break Ok(()),
            Ok(Line::TooLong) => {
                let msg = format!("Parse error: line longer than {MAX_LINE} bytes");
                if out_tx
                    .send(wire::error(None, PARSE_ERROR, &msg))
                    .await
                    .is_err()
                {
                    break Ok(());
                }
            }
            Ok(Line::Complete) => {
                let line = buf.trim_ascii();
                if line.is_empty() {
                    continue;
                }
                let out = match session.handle_bytes(line) {
                    Outcome::Nothing => continue,
                    Outcome::Reply(reply) => reply,
                    Outcome::Exit(code) => {
                        // The empty line is the writer's cue to flush and exit with this code.
                        exit_code.store(code, Ordering::Release);
                        Bytes::new()
                    }
                    Outcome::Deferred(work) => {
                        let out_tx = out_tx.clone();
                        tasks.spawn(async move {
                            if let Some(reply) = work.run(Some(&out_tx)).await {
                                let _ = out_tx.send(reply).await;
                            }
                        });
                        continue;
                    }
                };
                if out_tx.send(out).await.is_err() {
                    // The writer is gone (stdout closed); nothing more can be said.
                    break Ok(());
                }
            }
            Err(e) => break Err(e),
        }
    };
    tasks.abort_all();
    while tasks.join_next().await.is_some() {}
    session.cancel_all();
    drop(out_tx);
    let written = writer.await.unwrap_or(Ok(()));
    result.and(written)
}

/// Writes each message as one line. An empty message means: flush, then exit the process with
/// the code in `exit_code` (the `crash` test tool).
async fn write_lines<W: AsyncWrite + Unpin>(
    mut rx: mpsc::Receiver<Bytes>,
    mut w: W,
    exit_code: Arc<AtomicI32>,
) -> io::Result<()> {
    let mut batch = Vec::with_capacity(8 * 1024);
    while let Some(first) = rx.recv().await {
        let mut next = Some(first);
        // Drain whatever is queued into one buffer, then write and flush once.
        while let Some(line) = next {
            if line.is_empty() {
                w.write_all(&batch).await?;
                w.flush().await?;
                let code = exit_code.load(Ordering::Acquire);
                tracing::debug!(code, "demo server: crash tool called, exiting");
                std::process::exit(code);
            }
            batch.extend_from_slice(&line);
            batch.push(b'\n');
            next = if batch.len() < 64 * 1024 {
                rx.try_recv().ok()
            } else {
                None
            };
        }
        w.write_all(&batch).await?;
        w.flush().await?;
        batch.clear();
    }
    Ok(())
}

enum Line {
    Complete,
    TooLong,
    Eof,
}

/// Reads one line (without its `\n`) into `buf`. A line over [`MAX_LINE`] is skipped up to its
/// newline and reported as `TooLong`. A final line without a newline still counts.
async fn read_line<R: AsyncBufRead + Unpin>(r: &mut R, buf: &mut Vec<u8>) -> io::Result<Line> {
    buf.clear();
    let mut too_long = false;
    loop {
        let chunk = r.fill_buf().await?;
        if chunk.is_empty() {
            return Ok(if too_long {
                Line::TooLong
            } else if buf.is_empty() {
                Line::Eof
            } else {
                Line::Complete
            });
        }
        let (part, found) = match chunk.iter().position(|&b| b == b'\n') {
            Some(i) => (&chunk[..i], Some(i + 1)),
            None => (chunk, None),
        };
        if !too_long {
            if buf.len() + part.len() > MAX_LINE {
                too_long = true;
                buf.clear();
            } else {
                buf.extend_from_slice(part);
            }
        }
        let used = found.unwrap_or(chunk.len());
        r.consume(used);
        if found.is_some() {
            return Ok(if too_long {
                Line::TooLong
            } else {
                Line::Complete
            });
        }
    }
}
