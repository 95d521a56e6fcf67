//! Stdio upstreams: the child process lifecycle. Spawn with a clean environment in its own
//! process group, handshake, relay newline-delimited JSON, log stderr, restart with backoff
//! after a crash, and shut down by closing stdin, then SIGTERM, then SIGKILL (always reaped).

use std::process::{ExitStatus, Stdio};
use std::sync::atomic::{AtomicBool, AtomicU32, AtomicU64, Ordering};
use std::sync::{Arc, Mutex, Weak};
use std::time::{Duration, Instant};

use bytes::{Buf, Bytes, BytesMut};
use nix::sys::signal::{Signal, killpg};
use nix::unistd::Pid;
use tokio::net::unix::pipe;
use tokio::process::{Child, Command};
use tokio::sync::Notify;

use super::connection::Connection;
use super::handshake;
use super::stdin::{Stdin, StdinError};
use crate::config::StdioConfig;
use crate::error::GatewayError;
use crate::woken::Woken;

/// Variables a child inherits from the gateway by default; everything else must be listed in
/// `inherit_env` or set in `env`, so the gateway's own secrets never leak into upstreams.
const SAFE_ENV: &[&str] = &[
    "PATH", "HOME", "USER", "LOGNAME", "SHELL", "TERM", "LANG", "LC_ALL", "TZ", "TMPDIR",
];
/// How long a child may take to exit after its stdin closes, and then after SIGTERM.
const EXIT_GRACE: Duration = Duration::from_secs(2);
/// Messages queued for a child's stdin before senders wait (each at most the upstream's
/// `request_timeout`, then refused with a clear error).
const WRITE_QUEUE: usize = 1024;
/// Longest stderr line kept in the logs.
const MAX_STDERR_LINE: usize = 8 * 1024;

/// Where the child process stands.
#[derive(Debug, Clone)]
pub enum LinkState {
    /// Spawning and handshaking; requests wait.
    Starting,
    /// Handshake done; requests flow.
    Ready,
    /// Exited or failed to start; a restart is scheduled. Requests fail fast with the reason.
    Down { reason: Arc<str> },
    /// Shut down for good.
    Closed,
}

pub struct StdioLink {
    writer: Mutex<Option<Arc<Stdin>>>,
    state: StateCell,
    closing: Arc<Closing>,
    supervisor: Mutex<Option<tokio::task::JoinHandle<()>>>,
    /// Current child pid (0 when none): for diagnostics and tests.
    pid: AtomicU32,
    /// Number of restarts after unexpected exits.
    restarts: AtomicU64,
    config: Arc<StdioConfig>,
}

impl StdioLink {
    pub fn new(config: Arc<StdioConfig>) -> StdioLink {
        StdioLink {
            writer: Mutex::new(None),
            state: StateCell::default(),
            closing: Arc::default(),
            supervisor: Mutex::new(None),
            pid: AtomicU32::new(0),
            restarts: AtomicU64::new(0),
            config,
        }
    }

    /// Starts the supervisor task that owns the child process.
    pub fn start(&self, conn: Weak<Connection>, init_timeout: Duration, max_line: usize) {
        let task = tokio::spawn(supervise(conn, init_timeout, max_line));
        if let Ok(mut s) = self.supervisor.lock() {
            *s = Some(task);
        }
    }

    pub fn pid(&self) -> Option<u32> {
        Some(self.pid.load(Ordering::Relaxed)).filter(|p| *p != 0)
    }

    pub fn restarts(&self) -> u64 {
        self.restarts.load(Ordering::Relaxed)
    }

    pub fn state(&self) -> LinkState {
        self.state.get()
    }

    /// Whether requests flow now.
    pub fn is_ready(&self) -> bool {
        self.state.ready.load(Ordering::Acquire)
    }

    /// Waits (bounded) while the child is starting; fails fast while it is down.
    pub async fn ready(&self, upstream: &str, timeout: Duration) -> Result<(), GatewayError> {
        let wait = async {
            loop {
                // Asked for before the state is read: a change after the read wakes it.
                let changed = self.state.changed.notified();
                tokio::pin!(changed);
                changed.as_mut().enable();
                match self.state.get() {
                    LinkState::Ready => return Ok(()),
                    LinkState::Down { reason } => {
                        return Err(GatewayError::UpstreamUnavailable {
                            upstream: upstream.to_owned(),
                            reason: format!("{reason}; a restart is scheduled"),
                        });
                    }
                    LinkState::Closed => return Err(closed(upstream)),
                    LinkState::Starting => {}
                }
                changed.await;
            }
        };
        tokio::time::timeout(timeout, wait)
            .await
            .unwrap_or_else(|_| {
                Err(GatewayError::UpstreamUnavailable {
                    upstream: upstream.to_owned(),
                    reason: format!("still starting after {}ms", timeout.as_millis()),
                })
            })
    }

    /// Writes (or queues) one message for the child's stdin (a newline is appended here);
    /// waits at most `wait` for room while the queue is full.
    ///
    /// (Framed before the `async move` block, which keeps only what the write needs.)
    pub fn send(
        &self,
        upstream: &str,
        mut bytes: Vec<u8>,
        wait: Duration,
    ) -> impl Future<Output = Result<(), GatewayError>> {
        // Raw newlines can only be insignificant whitespace in valid JSON (inside strings they
        // must be escaped), so replacing them keeps the message intact and the framing sound.
        for b in bytes.iter_mut() {
            if *b == b'\n' || *b == b'\r' {
                *b = b' ';
            }
        }
        bytes.push(b'\n');
        let writer = self.writer.lock().ok().and_then(|w| w.clone());
        async move {
            let Some(writer) = writer else {
                return Err(GatewayError::UpstreamUnavailable {
                    upstream: upstream.to_owned(),
                    reason: "the process is not running".into(),
                });
            };
            writer.write(bytes, wait).await.map_err(|e| match e {
                StdinError::Closed => GatewayError::UpstreamClosed {
                    upstream: upstream.to_owned(),
                    reason: "the process stopped reading its input".into(),
                },
                StdinError::Full => GatewayError::UpstreamUnavailable {
                    upstream: upstream.to_owned(),
                    reason: format!(
                        "the process has not read its input for {}ms ({WRITE_QUEUE} messages waiting)",
                        wait.as_millis()
                    ),
                },
            })
        }
    }

    /// Shuts the child down (stdin close → SIGTERM → SIGKILL) and waits for the supervisor.
    pub async fn close(&self) {
        self.closing.close();
        let task = self.supervisor.lock().ok().and_then(|mut s| s.take());
        if let Some(task) = task {
            let _ = task.await;
        }
        self.state.set(LinkState::Closed);
    }
}

impl Drop for StdioLink {
    /// A link dropped without `close` still stops its child (the supervisor sees it closing).
    fn drop(&mut self) {
        self.closing.close();
    }
}

/// Where the child stands, and a wake-up for whoever waits for it to change: a `watch`
/// channel held ~0.36 KB per process (its eight `Notify`s), this ~0.1 KB. Whether requests
/// flow is also kept as a flag, read by every request without the lock.
struct StateCell {
    ready: AtomicBool,
    state: Mutex<LinkState>,
    changed: Notify,
}

impl Default for StateCell {
    fn default() -> Self {
        StateCell {
            ready: AtomicBool::new(false),
            state: Mutex::new(LinkState::Starting),
            changed: Notify::new(),
        }
    }
}

impl StateCell {
    fn get(&self) -> LinkState {
        self.state.lock().map_or(LinkState::Closed, |s| s.clone())
    }

    /// Sets the state and wakes every waiter.
    fn set(&self, state: LinkState) {
        let ready = matches!(state, LinkState::Ready);
        if let Ok(mut s) = self.state.lock() {
            *s = state;
            self.ready.store(ready, Ordering::Release);
        }
        self.changed.notify_waiters();
    }
}

/// Set once the link closes; what the supervisor waits on beside the child (a flag and a
/// `Notify`: a `watch` channel held ~0.4 KB more per process).
#[derive(Default)]
struct Closing {
    closed: AtomicBool,
    notify: Notify,
}

impl Closing {
    fn close(&self) {
        self.closed.store(true, Ordering::Release);
        self.notify.notify_waiters();
    }

    fn is_closed(&self) -> bool {
        self.closed.load(Ordering::Acquire)
    }

    /// Resolves once the link is closed (at once if it already is).
    async fn closed(&self) {
        loop {
            let notified = self.notify.notified();
            tokio::pin!(notified);
            notified.as_mut().enable();
            if self.is_closed() {
                return;
            }
            notified.await;
        }
    }
}

fn closed(upstream: &str) -> GatewayError {
    GatewayError::UpstreamClosed {
        upstream: upstream.to_owned(),
        reason: "the upstream was shut down".into(),
    }
}

fn link(conn: &Connection) -> &StdioLink {
    match &conn.link {
        super::link::Link::Stdio(l) => l,
        super::link::Link::Http(_) | super::link::Link::Sse(_) => {
            unreachable!("stdio supervisor on an HTTP link")
        }
    }
}

/// The supervisor: one child at a time, restarted with exponential backoff until closed.
/// Not an `async fn` (it would keep its arguments twice), and the backoff's bounds are read
/// from the link when a child ended, not kept: this task lives as long as the link.
#[allow(clippy::manual_async_fn)]
fn supervise(
    conn: Weak<Connection>,
    init_timeout: Duration,
    max_line: usize,
) -> impl Future<Output = ()> {
    async move {
        let (closing, name) = {
            let Some(c) = conn.upgrade() else { return };
            (link(&c).closing.clone(), c.info.name.clone())
        };
        // Zero until the first restart, which starts from the configured initial backoff.
        let mut backoff = Duration::ZERO;
        loop {
            if closing.is_closed() {
                break;
            }
            if let Some(c) = conn.upgrade() {
                link(&c).state.set(LinkState::Starting);
            }
            let started = Instant::now();
            let reason = match run_once(&conn, &name, init_timeout, max_line, &closing).await {
                RunEnd::Closed => break,
                RunEnd::Exited(reason) => reason,
            };
            let Some(c) = conn.upgrade() else { break };
            let l = link(&c);
            c.info.health.failed(&reason);
            c.fail_all(&GatewayError::UpstreamClosed {
                upstream: name.to_string(),
                reason: reason.clone(),
            });
            if closing.is_closed() {
                break;
            }
            let (initial, max_backoff) = (
                l.config.restart.initial_backoff,
                l.config.restart.max_backoff,
            );
            if backoff.is_zero() || started.elapsed() >= max_backoff {
                backoff = initial;
            }
            l.restarts.fetch_add(1, Ordering::Relaxed);
            crate::metrics::get()
                .stdio_restarts
                .with_label_values(&[&*name])
                .inc();
            tracing::warn!(upstream = %name, reason = %reason, backoff_ms = backoff.as_millis() as u64, "stdio upstream down; restarting");
            l.state.set(LinkState::Down {
                reason: reason.into(),
            });
            drop(c);
            tokio::select! {
                _ = tokio::time::sleep(backoff) => {}
                () = closing.closed() => break,
            }
            backoff = (backoff * 2).min(max_backoff);
        }
        if let Some(c) = conn.upgrade() {
            link(&c).state.set(LinkState::Closed);
        }
    }
}

/// Counts a running child in `switchyard_stdio_processes` for as long as it lives.
struct RunningProcess;

impl RunningProcess {
    fn counted() -> RunningProcess {
        crate::metrics::get().stdio_processes.inc();
        RunningProcess
    }
}

impl Drop for RunningProcess {
    fn drop(&mut self) {
        crate::metrics::get().stdio_processes.dec();
    }
}

enum RunEnd {
    /// The link was closed on purpose; the child has been stopped.
    Closed,
    /// The child exited, or could not start or handshake.
    Exited(String),
}

/// A started child, as `run_once` holds it while waiting for its exit.
struct Running {
    child: Child,
    _counted: RunningProcess,
}

/// How long the child's output is still read after it exited (or was stopped): what it wrote
/// before exiting is delivered, and grandchildren that keep its pipes open are not read after.
const OUTPUT_AFTER_EXIT: Duration = Duration::from_secs(1);

/// Spawns one child, handshakes, and waits until it exits or the link closes. The child's
/// output is read in this same task, beside each step ([`Reader::beside`]): one task per
/// child, which with a process per session is one per session (a reading task of its own
/// cost its task and a channel to say its stdout had ended; README, Performance).
/// Starting and handshaking are boxed: what they need is freed once done, and the task holds
/// for the child's whole life only the wait and the reader. Not an `async fn`, which keeps its
/// arguments twice (as arguments and as locals); nor is the handshake's outcome held across
/// the awaits after it: either made the task a size class larger (README, Performance).
#[allow(clippy::manual_async_fn)]
fn run_once<'a>(
    conn: &'a Weak<Connection>,
    name: &'a Arc<str>,
    init_timeout: Duration,
    max_line: usize,
    closing: &'a Closing,
) -> impl Future<Output = RunEnd> + 'a {
    async move {
        let (mut running, output) = match Box::pin(start(conn, max_line)).await {
            Ok(started) => started,
            Err(end) => return end,
        };
        let reading = std::pin::pin!(read_output(output, conn.clone(), name.clone()));
        let mut reader = Reader {
            reading,
            done: false,
        };
        let pid = running.child.id().unwrap_or(0);
        let handshake = Box::pin(handshake(
            conn,
            name,
            init_timeout,
            (&mut running.child, pid),
            closing,
        ));
        // What the handshake ended in, read out of it in this statement (its error is said
        // here, not kept in the task while the child is stopped).
        let ended = match reader.beside(handshake).await {
            Handshake::Done => None,
            Handshake::Failed(e) => Some(Err(RunEnd::Exited(format!("handshake failed: {e}")))),
            Handshake::Exited(status) => Some(Ok(status)),
            Handshake::Closing => Some(Err(RunEnd::Closed)),
        };
        match ended {
            None => {}
            Some(Ok(status)) => return Box::pin(reader.exited(conn, status)).await,
            Some(Err(end)) => {
                Box::pin(reader.stop_child(conn, &mut running.child)).await;
                return end;
            }
        }
        let status = {
            let wait = std::pin::pin!(async {
                tokio::select! {
                    status = running.child.wait() => Some(status),
                    () = closing.closed() => None,
                }
            });
            reader.beside(wait).await
        };
        // The ends are boxed: their timers would otherwise size the task for the child's life.
        match status {
            Some(status) => Box::pin(reader.exited(conn, status)).await,
            None => {
                Box::pin(reader.stop_child(conn, &mut running.child)).await;
                RunEnd::Closed
            }
        }
    }
}

/// Spawns the child and wires its pipes: stdin to the link's writer, stdout and stderr
/// returned for the reader.
async fn start(conn: &Weak<Connection>, max_line: usize) -> Result<(Running, Output), RunEnd> {
    let spawned = match conn.upgrade() {
        Some(c) => {
            let config = &link(&c).config;
            spawn(config).map_err(|e| format!("failed to start {:?}: {e}", config.command))
        }
        None => return Err(RunEnd::Closed),
    };
    let mut child = spawned.map_err(RunEnd::Exited)?;
    let counted = RunningProcess::counted();
    let pid = child.id().unwrap_or(0);
    let (stdin, stdout, stderr) = (child.stdin.take(), child.stdout.take(), child.stderr.take());
    let (Some(stdin), Some(stdout), Some(stderr)) = (stdin, stdout, stderr) else {
        stop(&mut child).await;
        return Err(RunEnd::Exited(
            "the child's pipes were not available".into(),
        ));
    };
    // As pipes: waiting for readiness needs no read buffer (see `BoundedLines`), and stdin
    // is written by the senders themselves (see `Stdin`).
    let pipes = (|| {
        let stdin = Stdin::new(
            pipe::Sender::from_owned_fd(stdin.into_owned_fd()?)?,
            WRITE_QUEUE,
        )?;
        let stdout = pipe::Receiver::from_owned_fd(stdout.into_owned_fd()?)?;
        let stderr = pipe::Receiver::from_owned_fd(stderr.into_owned_fd()?)?;
        Ok::<_, std::io::Error>((stdin, stdout, stderr))
    })();
    let (stdin, stdout, stderr) = match pipes {
        Ok(pipes) => pipes,
        Err(e) => {
            stop(&mut child).await;
            return Err(RunEnd::Exited(format!(
                "the child's pipes could not be used: {e}"
            )));
        }
    };
    let mut running = Running {
        child,
        _counted: counted,
    };
    let Some(c) = conn.upgrade() else {
        stop(&mut running.child).await;
        return Err(RunEnd::Closed);
    };
    let l = link(&c);
    l.pid.store(pid, Ordering::Relaxed);
    if let Ok(mut w) = l.writer.lock() {
        *w = Some(stdin);
    }
    let output = Output {
        stdout: BoundedLines::new(stdout, max_line),
        stderr: BoundedLines::new(stderr, MAX_STDERR_LINE),
    };
    Ok((running, output))
}

/// How a child's handshake ended.
enum Handshake {
    Done,
    Failed(GatewayError),
    Exited(std::io::Result<ExitStatus>),
    /// The link closed meanwhile.
    Closing,
}

/// Handshakes with a started child (its output read beside), unless it dies or the link
/// closes first.
async fn handshake(
    conn: &Weak<Connection>,
    name: &Arc<str>,
    init_timeout: Duration,
    (child, pid): (&mut Child, u32),
    closing: &Closing,
) -> Handshake {
    let handshake = async {
        let c = conn.upgrade().ok_or_else(|| closed(name))?;
        let params = c.init_params.clone();
        let server = handshake::connect(&c, &params, init_timeout).await?;
        // A new process: what the client set up on the last one is set up again first.
        c.restore(&server, init_timeout).await;
        Ok::<_, GatewayError>(server)
    };
    tokio::select! {
        r = handshake => match r {
            Ok(server) => {
                if let Some(c) = conn.upgrade() {
                    tracing::info!(upstream = %name, pid, protocol = %server.protocol_version, "stdio upstream ready");
                    if link(&c).restarts.load(Ordering::Relaxed) > 0 {
                        // A restarted process may offer different lists.
                        c.info.catalog.invalidate_all();
                    }
                    c.set_server(server);
                    link(&c).state.set(LinkState::Ready);
                }
                Handshake::Done
            }
            Err(e) => Handshake::Failed(e),
        },
        status = child.wait() => Handshake::Exited(status),
        () = closing.closed() => Handshake::Closing,
    }
}

/// The child's output being read ([`read_output`]), polled by the task that runs the child.
struct Reader<'a, R> {
    reading: std::pin::Pin<&'a mut R>,
    /// Both pipes ended.
    done: bool,
}

impl<R: Future<Output = ()>> Reader<'_, R> {
    /// Runs `step` while reading the output (the lines a handshake waits for, or a stopping
    /// child's last words: a child blocked on a full pipe would never exit). `step` is pinned
    /// by the caller (an `async fn` would keep it twice: as its argument and pinned), and
    /// polled only when woken for itself ([`Woken`]): the task's turns for the output, one
    /// per message from the child, polling the wait for its exit and the link's close cost
    /// ~0.7 % more instructions per forwarded call.
    fn beside<F: Future + Unpin>(&mut self, step: F) -> impl Future<Output = F::Output> {
        let mut step = Woken::new(step);
        std::future::poll_fn(move |cx| {
            // The output first: a handshake's answer is then seen in the same turn.
            self.poll_read(cx);
            std::pin::Pin::new(&mut step).poll(cx)
        })
    }

    fn poll_read(&mut self, cx: &mut std::task::Context<'_>) {
        if !self.done && self.reading.as_mut().poll(cx).is_ready() {
            self.done = true;
        }
    }

    /// After the child exited: delivers what it wrote before exiting and says how it ended.
    async fn exited(
        &mut self,
        conn: &Weak<Connection>,
        status: std::io::Result<ExitStatus>,
    ) -> RunEnd {
        clear_writer(conn);
        self.finish().await;
        RunEnd::Exited(describe_exit(status))
    }

    /// Stops the child (still reading its output), then reads what is left.
    async fn stop_child(&mut self, conn: &Weak<Connection>, child: &mut Child) {
        clear_writer(conn);
        self.beside(std::pin::pin!(stop(child))).await;
        self.finish().await;
    }

    /// Reads until both pipes end, at most `OUTPUT_AFTER_EXIT` (grandchildren may hold them
    /// open).
    async fn finish(&mut self) {
        let mut deadline = std::pin::pin!(tokio::time::sleep(OUTPUT_AFTER_EXIT));
        std::future::poll_fn(|cx| {
            self.poll_read(cx);
            if self.done || deadline.as_mut().poll(cx).is_ready() {
                return std::task::Poll::Ready(());
            }
            std::task::Poll::Pending
        })
        .await
    }
}

fn clear_writer(conn: &Weak<Connection>) {
    if let Some(c) = conn.upgrade() {
        let l = link(&c);
        if let Ok(mut w) = l.writer.lock() {
            *w = None;
        }
        l.pid.store(0, Ordering::Relaxed);
    }
}

fn describe_exit(status: std::io::Result<ExitStatus>) -> String {
    use std::os::unix::process::ExitStatusExt;
    match status {
        Ok(s) => match (s.code(), s.signal()) {
            (Some(code), _) => format!("the process exited with status {code}"),
            (None, Some(sig)) => format!("the process was killed by signal {sig}"),
            _ => "the process exited".into(),
        },
        Err(e) => format!("waiting for the process failed: {e}"),
    }
}

fn spawn(config: &StdioConfig) -> std::io::Result<Child> {
    let mut cmd = Command::new(&config.command);
    cmd.args(&config.args)
        .env_clear()
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .kill_on_drop(true)
        // Own process group, so shutdown signals reach grandchildren (npx → node, sh → ...).
        .process_group(0);
    for var in SAFE_ENV
        .iter()
        .copied()
        .chain(config.inherit_env.iter().map(String::as_str))
    {
        if let Some(v) = std::env::var_os(var) {
            cmd.env(var, v);
        }
    }
    for (k, v) in &config.env {
        cmd.env(k, v.expose());
    }
    if let Some(cwd) = &config.cwd {
        cmd.current_dir(cwd);
    }
    cmd.spawn()
}

/// Closes stdin (already done by dropping the writer), then SIGTERM, then SIGKILL to the
/// process group; always reaps the child. Boxed: its timers would otherwise size the
/// supervisor's task for the child's whole life (with a process per session, per session).
async fn stop(child: &mut Child) {
    Box::pin(stop_now(child)).await
}

async fn stop_now(child: &mut Child) {
    if tokio::time::timeout(EXIT_GRACE, child.wait()).await.is_ok() {
        return;
    }
    let Some(pid) = child.id().and_then(|p| i32::try_from(p).ok()) else {
        let _ = child.wait().await;
        return;
    };
    let _ = killpg(Pid::from_raw(pid), Signal::SIGTERM);
    if tokio::time::timeout(EXIT_GRACE, child.wait()).await.is_ok() {
        return;
    }
    let _ = killpg(Pid::from_raw(pid), Signal::SIGKILL);
    let _ = child.kill().await;
    let _ = child.wait().await;
}

/// One line read by [`BoundedLines`].
enum Line {
    Complete(Vec<u8>),
    /// Longer than the bound: only the first `max` bytes are kept.
    TooLong(Vec<u8>),
}

/// Newline-delimited reading from a pipe that never buffers more than `max` bytes of one
/// line, and holds no buffer while it waits for the child to write: an idle child costs no
/// read buffer. (A `BufReader` per pipe kept a zeroed 64 KiB buffer for stdout and 8 KiB for
/// stderr, ~72 KB of resident memory per process; with a process per session, per session.)
struct BoundedLines {
    pipe: pipe::Receiver,
    buf: BytesMut,
    /// Bytes at the start of `buf` already searched for a newline.
    scanned: usize,
    /// The line being read is longer than `max`: `buf` keeps its first `max` bytes and the
    /// rest is dropped up to its newline.
    overflow: bool,
    eof: bool,
    max: usize,
    /// Room made for each read: at most 64 KiB (fewer reads for the upstream's messages),
    /// never more than a line may be.
    chunk: usize,
}

impl BoundedLines {
    fn new(pipe: pipe::Receiver, max: usize) -> Self {
        BoundedLines {
            pipe,
            buf: BytesMut::new(),
            scanned: 0,
            overflow: false,
            eof: false,
            max,
            chunk: max.clamp(1, 64 * 1024),
        }
    }

    /// The next line without its terminator (`\n` or `\r\n`); `None` at end of input.
    async fn next(&mut self) -> Option<Line> {
        loop {
            if let Some(line) = self.take_line() {
                return Some(line);
            }
            if self.eof {
                let overflow = std::mem::take(&mut self.overflow);
                let rest = std::mem::take(&mut self.buf);
                self.scanned = 0;
                return (!rest.is_empty()).then(|| finish(rest.to_vec(), overflow));
            }
            // Readiness first: a reader polled while the child has written nothing (stderr's,
            // beside stdout's) costs no system call and no buffer.
            let (pipe, buf) = (&self.pipe, &mut self.buf);
            let ready = std::future::poll_fn(|cx| {
                let ready = pipe.poll_read_ready(cx);
                if ready.is_pending() && buf.is_empty() {
                    // Nothing of a line is held: wait without a buffer.
                    *buf = BytesMut::new();
                }
                ready
            })
            .await;
            if ready.is_err() {
                self.eof = true;
                continue;
            }
            self.buf.reserve(self.chunk);
            match self.pipe.try_read_buf(&mut self.buf) {
                Ok(0) => self.eof = true,
                Ok(_) => {}
                Err(e) if e.kind() == std::io::ErrorKind::WouldBlock => {}
                Err(_) => self.eof = true,
            }
        }
    }

    /// A whole line from what was read, if there is one; bounds the line being read.
    fn take_line(&mut self) -> Option<Line> {
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

/// A child's output pipes, read in the task that runs the child.
struct Output {
    stdout: BoundedLines,
    stderr: BoundedLines,
}

/// Reads the child's output until both pipes end: each stdout line is routed to the
/// connection (over-long ones dropped with an error log), each stderr line logged (truncated
/// to a bound, control characters escaped).
#[allow(clippy::manual_async_fn)] // an `async fn` keeps its arguments twice
fn read_output(
    mut out: Output,
    conn: Weak<Connection>,
    name: Arc<str>,
) -> impl Future<Output = ()> {
    // The arguments kept once in the task (as an `async fn`: 0.2 KB more per process).
    async move {
        let (mut stdout_open, mut stderr_open) = (true, true);
        loop {
            let (from_stdout, line) = tokio::select! {
                line = out.stdout.next(), if stdout_open => (true, line),
                line = out.stderr.next(), if stderr_open => (false, line),
                else => break,
            };
            match (from_stdout, line) {
                (true, None) => stdout_open = false,
                (false, None) => stderr_open = false,
                (false, Some(Line::Complete(line) | Line::TooLong(line))) => {
                    let text = String::from_utf8_lossy(&line);
                    let text = escape_controls(text.trim_end());
                    if !text.is_empty() {
                        tracing::info!(target: "switchyard::upstream::stderr", upstream = %name, "{text}");
                    }
                }
                (true, Some(Line::TooLong(_))) => {
                    let limit = out.stdout.max;
                    tracing::error!(upstream = %name, limit, "dropped a message larger than the limit from the upstream");
                }
                (true, Some(Line::Complete(line))) => {
                    if !line.iter().all(u8::is_ascii_whitespace) {
                        let Some(c) = conn.upgrade() else { break };
                        c.on_message(Bytes::from(line), None);
                    }
                }
            }
            if from_stdout {
                // Lines already buffered are read without waiting: under a flood this task would
                // keep its worker to itself, and the streams it feeds fall behind and drop.
                tokio::task::coop::consume_budget().await;
            }
        }
    }
}

/// `text` with control characters (tab excepted) and the Unicode line and paragraph
/// separators written as escapes (`\r`, `\0`, `\u{1b}`): the text log format writes a
/// message as it is, so an upstream's stderr could otherwise return the carriage, truncate a
/// line for C tools (NUL) or start what looks like a line of the gateway's own.
fn escape_controls(text: &str) -> std::borrow::Cow<'_, str> {
    let forges = |c: char| (c.is_control() && c != '\t') || matches!(c, '\u{2028}' | '\u{2029}');
    if !text.chars().any(forges) {
        return std::borrow::Cow::Borrowed(text);
    }
    let mut out = String::with_capacity(text.len() + 16);
    for c in text.chars() {
        match c {
            '\r' => out.push_str("\\r"),
            '\n' => out.push_str("\\n"),
            '\0' => out.push_str("\\0"),
            c if forges(c) => {
                use std::fmt::Write as _;
                let _ = write!(out, "\\u{{{:x}}}", u32::from(c));
            }
            c => out.push(c),
        }
    }
    std::borrow::Cow::Owned(out)
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used)]
    use tokio::io::AsyncWriteExt;

    use super::*;

    #[test]
    fn control_characters_are_escaped_and_plain_text_is_not_copied() {
        assert!(matches!(
            escape_controls("plain text\twith a tab"),
            std::borrow::Cow::Borrowed(_)
        ));
        assert_eq!(
            escape_controls("a\rb\0c\u{1b}[2Jd\u{85}e\u{2028}f"),
            "a\\rb\\0c\\u{1b}[2Jd\\u{85}e\\u{2028}f"
        );
    }

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
        assert_eq!(lines.buf.capacity(), 0);
        tx.write_all(b"tw").await.unwrap();
        let waiting = tokio::time::timeout(Duration::from_millis(50), lines.next()).await;
        assert!(waiting.is_err(), "the line is not complete");
        assert!(lines.buf.capacity() > 0);
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
