//! Stdio upstreams: the child process lifecycle. Spawn with a clean environment in its own
//! process group, handshake, relay newline-delimited JSON, restart with backoff after a
//! crash, and shut down by closing stdin, then SIGTERM, then SIGKILL (always reaped). The
//! child's exit and stderr are watched by [`child_watch`](super::child_watch).

use std::os::fd::OwnedFd;
use std::os::unix::process::CommandExt;
use std::process::{Command, ExitStatus, Stdio};
use std::sync::atomic::{AtomicBool, AtomicU32, AtomicU64, AtomicUsize, Ordering};
use std::sync::{Arc, Mutex, Weak};
use std::time::{Duration, Instant};

use bytes::Bytes;
use nix::sys::signal::{Signal, killpg};
use nix::unistd::Pid;
use tokio::net::unix::pipe;
use tokio::sync::Notify;

use super::child_watch::Process;
use super::connection::Connection;
use super::handshake;
use super::lines::{BoundedLines, Line};
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
    /// The connection worker the supervisor (and so the reading of the child's answers) runs
    /// on, as `workers::home` numbers them (0: not a worker).
    home: AtomicUsize,
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
            home: AtomicUsize::new(0),
            config,
        }
    }

    /// Starts the supervisor task that owns the child process.
    pub fn start(&self, conn: Weak<Connection>, init_timeout: Duration, max_line: usize) {
        // On the next connection worker while shared processes are being started
        // (`workers::Spreading`): the child's pipes are then read on a thread that serves
        // client connections — for those on the same worker, its answers wake no other
        // thread — instead of on the main runtime, which would put a hand-off between every
        // answer and its caller.
        let (task, home) = crate::workers::spawn_spread(supervise(conn, init_timeout, max_line));
        self.home.store(home, Ordering::Relaxed);
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

    /// The connection worker the child's answers are read on (0: not a worker).
    pub fn home(&self) -> usize {
        self.home.load(Ordering::Relaxed)
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
        // Found with memchr (most messages hold none): a byte-by-byte loop cost ~4
        // instructions per byte of every message.
        let mut from = 0;
        while let Some(i) = memchr::memchr2(b'\n', b'\r', &bytes[from..]) {
            bytes[from + i] = b' ';
            from += i + 1;
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
    child: Process,
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
        let (mut running, output) = match Box::pin(start(conn, name, max_line)).await {
            Ok(started) => started,
            Err(end) => return end,
        };
        let reading = std::pin::pin!(read_output(output, conn.clone(), name.clone()));
        let mut reader = Reader {
            reading,
            done: false,
        };
        let pid = running.child.id();
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

/// Spawns the child and wires its pipes: stdin to the link's writer, stdout returned for the
/// reader, stderr to the watcher (with the child's exit).
async fn start(
    conn: &Weak<Connection>,
    name: &Arc<str>,
    max_line: usize,
) -> Result<(Running, BoundedLines), RunEnd> {
    let spawned = match conn.upgrade() {
        Some(c) => {
            let config = &link(&c).config;
            spawn(config).map_err(|e| format!("failed to start {:?}: {e}", config.command))
        }
        None => return Err(RunEnd::Closed),
    };
    let mut child = spawned.map_err(RunEnd::Exited)?;
    let (stdin, stdout, stderr) = (child.stdin.take(), child.stdout.take(), child.stderr.take());
    let (Some(stdin), Some(stdout), Some(stderr)) = (stdin, stdout, stderr) else {
        abandon(child);
        return Err(RunEnd::Exited(
            "the child's pipes were not available".into(),
        ));
    };
    let mut child = match Process::watch(child, stderr, name.clone()) {
        Ok(process) => process,
        Err((child, e)) => {
            abandon(child);
            return Err(RunEnd::Exited(format!(
                "the child could not be watched: {e}"
            )));
        }
    };
    let counted = RunningProcess::counted();
    let pid = child.id();
    // As pipes: waiting for readiness needs no read buffer (see `BoundedLines`), and stdin
    // is written by the senders themselves (see `Stdin`).
    let pipes = (|| {
        let stdin = Stdin::new(
            pipe::Sender::from_owned_fd(OwnedFd::from(stdin))?,
            WRITE_QUEUE,
        )?;
        let stdout = pipe::Receiver::from_owned_fd(OwnedFd::from(stdout))?;
        Ok::<_, std::io::Error>((stdin, stdout))
    })();
    let (stdin, stdout) = match pipes {
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
    Ok((running, BoundedLines::new(stdout, max_line)))
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
    (child, pid): (&mut Process, u32),
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
    /// The child's stdout ended.
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
    async fn stop_child(&mut self, conn: &Weak<Connection>, child: &mut Process) {
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

fn spawn(config: &StdioConfig) -> std::io::Result<std::process::Child> {
    let mut cmd = Command::new(&config.command);
    cmd.args(&config.args)
        .env_clear()
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
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
async fn stop(child: &mut Process) {
    Box::pin(stop_now(child)).await
}

async fn stop_now(child: &mut Process) {
    if tokio::time::timeout(EXIT_GRACE, child.wait()).await.is_ok() {
        return;
    }
    let Some(pid) = i32::try_from(child.id()).ok().filter(|p| *p > 0) else {
        let _ = child.wait().await;
        return;
    };
    let _ = killpg(Pid::from_raw(pid), Signal::SIGTERM);
    if tokio::time::timeout(EXIT_GRACE, child.wait()).await.is_ok() {
        return;
    }
    let _ = killpg(Pid::from_raw(pid), Signal::SIGKILL);
    let _ = child.kill();
    let _ = child.wait().await;
}

/// A child that could not be watched: killed and reaped here (it has not run long, and
/// SIGKILL is not refused).
fn abandon(mut child: std::process::Child) {
    let _ = child.kill();
    let _ = child.wait();
}

/// Reads the child's stdout until it ends: each line is routed to the connection (over-long
/// ones dropped with an error log).
#[allow(clippy::manual_async_fn)] // an `async fn` keeps its arguments twice
fn read_output(
    mut stdout: BoundedLines,
    conn: Weak<Connection>,
    name: Arc<str>,
) -> impl Future<Output = ()> {
    // The arguments kept once in the task (as an `async fn`: 0.2 KB more per process).
    async move {
        while let Some(line) = stdout.next().await {
            match line {
                Line::TooLong(_) => {
                    let limit = stdout.max();
                    tracing::error!(upstream = %name, limit, "dropped a message larger than the limit from the upstream");
                }
                Line::Complete(line) => {
                    if !line.iter().all(u8::is_ascii_whitespace) {
                        let Some(c) = conn.upgrade() else { break };
                        c.on_message(Bytes::from(line), None);
                    }
                }
            }
            // Lines already buffered are read without waiting: under a flood this task would
            // keep its worker to itself, and the streams it feeds fall behind and drop.
            tokio::task::coop::consume_budget().await;
        }
    }
}
