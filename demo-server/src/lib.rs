//! The demo upstream: a small, fast MCP server shipped next to the gateway as its own binary,
//! `switchyard-demo-server` (README demo and test/load-test upstream), served over stdio or
//! Streamable HTTP (with the 2024-11-05 HTTP+SSE transport beside it: `/sse`, `/messages`).
//!
//! Tools: `echo`, `add`, `sleep` (progress + cancellation); with `test_tools` also `crash`,
//! `stderr` and `pid`; with `hostile_tools` also `flood` and `ask`. One prompt (`greeting`), one resource (`demo://readme`). Both transports share the
//! per-session core in `server`.
//!
//! With `conformance`, the server is instead the conformance fixture (`fixture`,
//! `fixture_tools`): the catalog the official MCP conformance suite's server scenarios call,
//! including tools that send `sampling/createMessage` and `elicitation/create` to the client
//! (`peer`) and wait for its answer.

mod catalog;
mod fixture;
mod fixture_mrtr;
mod fixture_tools;
mod http;
mod inflight;
mod legacy_sse;
mod modern;
mod peer;
mod server;
mod stdio;
mod tasks;
mod tools;
mod wire;

// The two things taken from the gateway, so the fixture and the gateway agree on them: the
// HMAC sealing of opaque tokens (MRTR `requestState`) and the `Mcp-Param-*` header rules.
use switchyard::protocol::param_headers::ParamHeaders;
use switchyard::signing::CursorKey;

#[cfg(test)]
mod conformance_http_tests;
#[cfg(test)]
mod conformance_stdio_tests;
#[cfg(test)]
mod conformance_tests;
#[cfg(test)]
mod http_tests;
#[cfg(test)]
mod legacy_sse_tests;
#[cfg(test)]
mod stdio_tests;
#[cfg(test)]
mod tests;

use std::future::Future;
use std::os::fd::{BorrowedFd, OwnedFd};
use std::os::unix::fs::FileTypeExt as _;
use std::path::PathBuf;

/// How the demo server presents itself.
#[derive(Debug, Clone, Default)]
pub struct DemoOptions {
    /// `serverInfo.name`; "switchyard-demo" when empty.
    pub name: String,
    /// Also expose the test-only tools `crash`, `stderr` and `pid`.
    pub test_tools: bool,
    /// Also expose `flood` (notifications as fast as they are taken) and `ask` (requests to
    /// the client whatever it declared): an upstream that misbehaves, for tests.
    pub hostile_tools: bool,
    /// Stdio only, for shutdown tests: ignore SIGTERM and keep running after stdin closes, so
    /// only SIGKILL stops the process.
    pub stubborn: bool,
    /// If set, every received JSON-RPC message is appended to this file, one JSON per line.
    pub trace_file: Option<PathBuf>,
    /// Serve the conformance fixture (the tools, prompts and resources the official MCP
    /// conformance suite's server scenarios call) instead of the demo catalog.
    pub conformance: bool,
    /// This many more tools (`bulk-0001`, …), each answering like `echo`: a big catalog for
    /// list measurements.
    pub extra_tools: usize,
    /// Also speak the stateless revision (2026-07-28): answer `server/discover` and serve
    /// requests whose `_meta` names that revision (with `conformance`, the multi round-trip
    /// tools too). Without it the server is session-based only.
    pub stateless: bool,
    /// Offer the 2025-11-25 `tasks` utility (session-based): `sleep` becomes task-supporting,
    /// a `tools/call` with `task` creates a task, `tasks/get|result|cancel|list` serve them.
    pub tasks: bool,
}

/// Serves one session as newline-delimited JSON on stdin/stdout until stdin reaches EOF.
/// Requests still in flight at EOF are dropped unanswered. Logs go to stderr only (via tracing).
pub async fn serve_stdio(opts: DemoOptions) -> std::io::Result<()> {
    use std::os::fd::AsFd as _;
    use tokio::net::unix::pipe;
    let server = server::Server::new(&opts)?;
    // Registering a handler replaces SIGTERM's default action: the signal is ignored.
    let _ignored_term = if opts.stubborn {
        Some(tokio::signal::unix::signal(
            tokio::signal::unix::SignalKind::terminate(),
        )?)
    } else {
        None
    };
    // Pipes (what a parent such as the gateway gives) are read and written through the
    // runtime's I/O driver; anything else (a terminal, a file) through tokio's stdin and
    // stdout, which hand every read and write to a thread of the blocking pool.
    let input: Box<dyn tokio::io::AsyncRead + Unpin + Send> =
        match fifo(std::io::stdin().as_fd()).map(pipe::Receiver::from_owned_fd) {
            Some(Ok(pipe)) => Box::new(pipe),
            _ => Box::new(tokio::io::stdin()),
        };
    let output: Box<dyn tokio::io::AsyncWrite + Unpin + Send> =
        match fifo(std::io::stdout().as_fd()).map(pipe::Sender::from_owned_fd) {
            Some(Ok(pipe)) => Box::new(pipe),
            _ => Box::new(tokio::io::stdout()),
        };
    let input = tokio::io::BufReader::with_capacity(64 * 1024, input);
    stdio::serve(server, input, output).await?;
    if opts.stubborn {
        std::future::pending::<()>().await;
    }
    Ok(())
}

/// A handle of its own to `fd` if it is a pipe (the runtime may then make it non-blocking:
/// nothing else reads or writes it as a blocking file).
fn fifo(fd: BorrowedFd<'_>) -> Option<OwnedFd> {
    let file = std::fs::File::from(fd.try_clone_to_owned().ok()?);
    let is_fifo = file.metadata().ok()?.file_type().is_fifo();
    is_fifo.then(|| OwnedFd::from(file))
}

/// Serves Streamable HTTP at path `/mcp` (and HTTP+SSE at `/sse`) on `listener` until
/// `shutdown` resolves; in-flight requests are then cancelled and connections drained.
pub async fn serve_http(
    listener: tokio::net::TcpListener,
    opts: DemoOptions,
    shutdown: impl Future<Output = ()> + Send + 'static,
) -> std::io::Result<()> {
    let server = server::Server::new(&opts)?;
    http::serve(listener, server, shutdown).await
}
