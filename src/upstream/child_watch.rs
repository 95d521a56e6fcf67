//! The stdio children's quiet ends, their exit and their stderr, watched for all of them by
//! one thread. As tokio registrations (the pidfd `tokio::process` opens to wait for a child,
//! the stderr pipe) they held two cache-padded 256-byte entries per process, with a process
//! per session per session; here the kernel's epoll set keeps the interest and this module
//! one entry of ~0.1 KB per child.
//!
//! A child's exit is seen through its pidfd (Linux 5.3 and later); where none can be opened,
//! its waiter looks again every [`EXIT_POLL`]. Its stderr is logged line by line (bounded,
//! control characters escaped) with the upstream's name and the child's pid, until the pipe
//! ends or the child's [`Process`] is dropped: then what is already in the pipe is read and
//! the pipe is closed (a grandchild holding it open is not read after its parent). A
//! `Process` dropped before its child was reaped kills the child, and the watcher reaps it
//! once it has exited.

use std::collections::HashMap;
use std::fs::File;
use std::io::{ErrorKind, Read};
use std::os::fd::OwnedFd;
use std::process::{Child, ChildStderr, ExitStatus};
use std::sync::{Arc, Mutex, MutexGuard};
use std::task::{Context, Poll, Waker};
use std::time::Duration;

use rustix::event::epoll;

use super::lines::{Line, LineBuf};

/// How often a waiter looks at a child for which no pidfd could be opened.
const EXIT_POLL: Duration = Duration::from_millis(100);
/// Longest stderr line kept in the logs.
const MAX_STDERR_LINE: usize = 8 * 1024;
/// Bytes read from one child's stderr per readiness: the other children are served between.
const READ_PER_TURN: usize = 64 * 1024;
/// A key's low bit: the event is for the child's stderr (else for its pidfd).
const STDERR: u64 = 1;

/// The watcher: an epoll set with every child's pidfd and stderr, and a thread waiting on it.
struct Watcher {
    epoll: OwnedFd,
    children: Mutex<Children>,
}

struct Children {
    by_key: HashMap<u64, Watched>,
    /// The next child's key (even: the low bit tells the descriptor). Never reused, so an
    /// event read before its child was removed finds nothing.
    next: u64,
}

/// One child, as the watcher holds it.
struct Watched {
    /// Its pidfd, until its exit was seen (or its `Process` let go of it).
    pidfd: Option<OwnedFd>,
    /// Its [`Process`] still holds it.
    claimed: bool,
    /// The task waiting for its exit.
    waiter: Option<Waker>,
    /// Given up by its `Process` before it was reaped: reaped once it exits.
    orphan: Option<Box<Child>>,
    stderr: Option<Stderr>,
}

/// A child's stderr, logged line by line.
struct Stderr {
    pipe: File,
    name: Arc<str>,
    pid: u32,
    /// Part of a line read: only while the pipe has given one (a quiet child's entry stays
    /// small).
    partial: Option<Box<LineBuf>>,
}

/// A line of a child's stderr, logged once the watcher's lock is released.
struct Said {
    name: Arc<str>,
    pid: u32,
    line: Line,
}

static WATCHER: Mutex<Option<&'static Watcher>> = Mutex::new(None);

/// The watcher, started at first use (again later if starting it failed).
fn watcher() -> std::io::Result<&'static Watcher> {
    let mut slot = WATCHER.lock().unwrap_or_else(|e| e.into_inner());
    if let Some(w) = *slot {
        return Ok(w);
    }
    let epoll = epoll::create(epoll::CreateFlags::CLOEXEC)?;
    let w: &'static Watcher = Box::leak(Box::new(Watcher {
        epoll,
        children: Mutex::new(Children {
            by_key: HashMap::new(),
            next: 0,
        }),
    }));
    std::thread::Builder::new()
        .name("stdio-watch".into())
        .stack_size(256 * 1024)
        .spawn(move || w.run())?;
    *slot = Some(w);
    Ok(w)
}

impl Watcher {
    fn lock(&self) -> MutexGuard<'_, Children> {
        // Nothing under the lock can leave the map half-changed: a panic elsewhere is no
        // reason to stop watching.
        self.children.lock().unwrap_or_else(|e| e.into_inner())
    }

    fn run(&self) {
        let empty = epoll::Event {
            flags: epoll::EventFlags::empty(),
            data: epoll::EventData::new_u64(0),
        };
        let mut events = [empty; 64];
        let mut scratch = vec![0u8; 16 * 1024];
        let (mut said, mut woken) = (Vec::new(), Vec::new());
        loop {
            let n = match epoll::wait(&self.epoll, &mut events, None) {
                Ok(n) => n,
                Err(rustix::io::Errno::INTR) => continue,
                Err(e) => {
                    tracing::error!(error = %e, "watching the stdio children failed; retrying");
                    std::thread::sleep(Duration::from_secs(1));
                    continue;
                }
            };
            {
                let mut children = self.lock();
                for event in &events[..n] {
                    let data = event.data;
                    self.on_event(
                        &mut children,
                        data.u64(),
                        &mut scratch,
                        &mut said,
                        &mut woken,
                    );
                }
            }
            woken.drain(..).for_each(Waker::wake);
            said.drain(..).for_each(log);
        }
    }

    fn on_event(
        &self,
        children: &mut Children,
        key: u64,
        scratch: &mut [u8],
        said: &mut Vec<Said>,
        woken: &mut Vec<Waker>,
    ) {
        let child_key = key & !STDERR;
        let Some(c) = children.by_key.get_mut(&child_key) else {
            return;
        };
        if key & STDERR != 0 {
            let open = c.stderr.as_mut().is_some_and(|s| s.read(scratch, said));
            if !open && let Some(s) = c.stderr.take() {
                let _ = epoll::delete(&self.epoll, &s.pipe);
            }
        } else {
            if let Some(pidfd) = c.pidfd.take() {
                let _ = epoll::delete(&self.epoll, &pidfd);
            }
            woken.extend(c.waiter.take());
            if let Some(mut orphan) = c.orphan.take() {
                let _ = orphan.try_wait();
            }
        }
        if !c.claimed && c.orphan.is_none() && c.stderr.is_none() {
            children.by_key.remove(&child_key);
        }
    }
}

impl Stderr {
    /// Reads what the pipe holds (at most [`READ_PER_TURN`]), cutting it into lines; false
    /// once the pipe has ended (its last line said).
    fn read(&mut self, scratch: &mut [u8], said: &mut Vec<Said>) -> bool {
        let mut lines = self
            .partial
            .take()
            .unwrap_or_else(|| Box::new(LineBuf::new(MAX_STDERR_LINE)));
        let mut read = 0;
        let open = loop {
            match (&self.pipe).read(scratch) {
                Ok(0) => break false,
                Ok(n) => {
                    lines.extend(&scratch[..n]);
                    while let Some(line) = lines.take_line() {
                        said.push(self.said(line));
                    }
                    read += n;
                    if read >= READ_PER_TURN {
                        break true;
                    }
                }
                Err(e) if e.kind() == ErrorKind::WouldBlock => break true,
                Err(e) if e.kind() == ErrorKind::Interrupted => {}
                Err(_) => break false,
            }
        };
        if !open && let Some(line) = lines.rest() {
            said.push(self.said(line));
        }
        if !lines.is_empty() {
            self.partial = Some(lines);
        }
        open
    }

    /// Reads what the pipe still holds and says the last line, even without its newline:
    /// the pipe is about to close.
    fn read_last(&mut self, scratch: &mut [u8], said: &mut Vec<Said>) {
        if self.read(scratch, said)
            && let Some(line) = self.partial.take().and_then(|mut l| l.rest())
        {
            said.push(self.said(line));
        }
    }

    fn said(&self, line: Line) -> Said {
        Said {
            name: self.name.clone(),
            pid: self.pid,
            line,
        }
    }
}

fn log(said: Said) {
    let (Line::Complete(line) | Line::TooLong(line)) = said.line;
    let text = String::from_utf8_lossy(&line);
    let text = escape_controls(text.trim_end());
    if !text.is_empty() {
        let (name, pid) = (&said.name, said.pid);
        tracing::info!(target: "switchyard::upstream::stderr", upstream = %name, pid, "{text}");
    }
}

/// A started child, its exit and stderr watched. Dropped before the child was reaped, it
/// kills the child (the watcher reaps it).
pub(super) struct Process {
    child: Option<Child>,
    key: u64,
    /// The watcher tells of the exit (a pidfd was opened).
    told: bool,
}

impl Process {
    /// Watches `child`'s exit and its `stderr` (lines logged as `name`'s).
    pub(super) fn watch(
        child: Child,
        stderr: ChildStderr,
        name: Arc<str>,
    ) -> Result<Process, (Child, std::io::Error)> {
        match Self::register(&child, stderr, name) {
            Ok((key, told)) => Ok(Process {
                child: Some(child),
                key,
                told,
            }),
            Err(e) => Err((child, e)),
        }
    }

    fn register(
        child: &Child,
        stderr: ChildStderr,
        name: Arc<str>,
    ) -> std::io::Result<(u64, bool)> {
        let w = watcher()?;
        let pipe = File::from(OwnedFd::from(stderr));
        rustix::io::ioctl_fionbio(&pipe, true)?;
        let pid = child.id();
        // None where the kernel has no pidfds (before 5.3) or they are not allowed: polled.
        let pidfd = i32::try_from(pid)
            .ok()
            .and_then(rustix::process::Pid::from_raw)
            .and_then(|p| {
                rustix::process::pidfd_open(p, rustix::process::PidfdFlags::empty()).ok()
            });
        let mut children = w.lock();
        let key = children.next;
        children.next += 2;
        let readable = epoll::EventFlags::IN;
        epoll::add(
            &w.epoll,
            &pipe,
            epoll::EventData::new_u64(key | STDERR),
            readable,
        )?;
        let told = match &pidfd {
            Some(fd) => match epoll::add(&w.epoll, fd, epoll::EventData::new_u64(key), readable) {
                Ok(()) => true,
                Err(e) => {
                    let _ = epoll::delete(&w.epoll, &pipe);
                    return Err(e.into());
                }
            },
            None => false,
        };
        children.by_key.insert(
            key,
            Watched {
                pidfd,
                claimed: true,
                waiter: None,
                orphan: None,
                stderr: Some(Stderr {
                    pipe,
                    name,
                    pid,
                    partial: None,
                }),
            },
        );
        Ok((key, told))
    }

    pub(super) fn id(&self) -> u32 {
        self.child.as_ref().map_or(0, Child::id)
    }

    /// Waits for the child to exit and reaps it.
    pub(super) async fn wait(&mut self) -> std::io::Result<ExitStatus> {
        // Told once; should the child not be reapable then, it is looked at again by time.
        let mut told = self.told;
        loop {
            if let Some(child) = self.child.as_mut()
                && let Some(status) = child.try_wait()?
            {
                return Ok(status);
            }
            if std::mem::take(&mut told) {
                let key = self.key;
                std::future::poll_fn(|cx| poll_exit(key, cx)).await;
            } else {
                // Boxed: the timer would otherwise size every waiting supervisor's task.
                Box::pin(tokio::time::sleep(EXIT_POLL)).await;
            }
        }
    }

    /// Sends the child SIGKILL.
    pub(super) fn kill(&mut self) -> std::io::Result<()> {
        self.child.as_mut().map_or(Ok(()), Child::kill)
    }
}

/// Ready once the watcher saw the child exit (it then drops the pidfd); else keeps the waker
/// to be woken then. For a child watched through a pidfd only.
fn poll_exit(key: u64, cx: &mut Context<'_>) -> Poll<()> {
    let Ok(w) = watcher() else {
        return Poll::Ready(());
    };
    let mut children = w.lock();
    match children.by_key.get_mut(&key) {
        Some(c) if c.pidfd.is_some() => {
            match &mut c.waiter {
                Some(waker) if waker.will_wake(cx.waker()) => {}
                waiter => *waiter = Some(cx.waker().clone()),
            }
            Poll::Pending
        }
        _ => Poll::Ready(()),
    }
}

impl Drop for Process {
    fn drop(&mut self) {
        let Some(mut child) = self.child.take() else {
            return;
        };
        let running = matches!(child.try_wait(), Ok(None));
        if running {
            let _ = child.kill();
        }
        let Ok(w) = watcher() else { return };
        let mut said = Vec::new();
        {
            let mut children = w.lock();
            let Some(c) = children.by_key.get_mut(&self.key) else {
                return;
            };
            c.claimed = false;
            c.waiter = None;
            if let Some(mut s) = c.stderr.take() {
                // What the child wrote before it ended is still said.
                let mut scratch = [0u8; 4096];
                s.read_last(&mut scratch, &mut said);
                let _ = epoll::delete(&w.epoll, &s.pipe);
            }
            if running && c.pidfd.is_some() {
                c.orphan = Some(Box::new(child));
            } else {
                if let Some(pidfd) = c.pidfd.take() {
                    let _ = epoll::delete(&w.epoll, &pidfd);
                }
                children.by_key.remove(&self.key);
                if running {
                    // No pidfd to be told of its exit: a thread waits for it.
                    let _ = std::thread::Builder::new()
                        .name("stdio-reap".into())
                        .stack_size(64 * 1024)
                        .spawn(move || {
                            let _ = child.wait();
                        });
                }
            }
        }
        said.into_iter().for_each(log);
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
    use std::process::{Command, Stdio};

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

    fn texts(said: &mut Vec<Said>) -> Vec<String> {
        said.drain(..)
            .map(|s| match s.line {
                Line::Complete(l) => format!("ok:{}", String::from_utf8(l).unwrap()),
                Line::TooLong(l) => format!("long:{}", l.len()),
            })
            .collect()
    }

    /// A quiet pipe's entry holds no line buffer; a part of a line is kept until its newline
    /// (bounded), and the last line is said at the end even without one.
    #[test]
    fn stderr_is_cut_into_lines_and_holds_a_buffer_only_for_a_part() {
        use std::io::Write;
        let (reader, mut writer) = std::io::pipe().unwrap();
        let pipe = File::from(OwnedFd::from(reader));
        rustix::io::ioctl_fionbio(&pipe, true).unwrap();
        let mut s = Stderr {
            pipe,
            name: "t".into(),
            pid: 7,
            partial: None,
        };
        let (mut scratch, mut said) = (vec![0u8; 16], Vec::new());
        assert!(s.read(&mut scratch, &mut said));
        assert!(said.is_empty() && s.partial.is_none());
        writer.write_all(b"one\r\ntw").unwrap();
        assert!(s.read(&mut scratch, &mut said));
        assert_eq!(texts(&mut said), ["ok:one"]);
        assert!(s.partial.is_some(), "the part of a line is kept");
        writer.write_all(b"o\n").unwrap();
        assert!(s.read(&mut scratch, &mut said));
        assert_eq!(texts(&mut said), ["ok:two"]);
        assert!(s.partial.is_none(), "nothing held between lines");
        let long = vec![b'x'; MAX_STDERR_LINE + 100];
        writer.write_all(&long).unwrap();
        writer.write_all(b"\nlast").unwrap();
        // One turn reads it all (less than `READ_PER_TURN`); the end is seen at a later one.
        assert!(s.read(&mut scratch, &mut said));
        drop(writer);
        // Another test's child may hold a copy of the write end for a moment (between its
        // fork and its exec): the end is seen once that is gone too.
        let deadline = std::time::Instant::now() + std::time::Duration::from_secs(5);
        while s.read(&mut scratch, &mut said) {
            assert!(
                std::time::Instant::now() < deadline,
                "the end is never seen"
            );
            std::thread::sleep(std::time::Duration::from_millis(1));
        }
        assert_eq!(
            texts(&mut said),
            [format!("long:{MAX_STDERR_LINE}"), "ok:last".to_owned()]
        );
    }

    fn spawn(script: &str) -> Process {
        let mut child = Command::new("sh")
            .args(["-c", script])
            .stdin(Stdio::null())
            .stdout(Stdio::null())
            .stderr(Stdio::piped())
            .spawn()
            .unwrap();
        let stderr = child.stderr.take().unwrap();
        Process::watch(child, stderr, "t".into())
            .map_err(|(_, e)| e)
            .unwrap()
    }

    /// Whether `done` holds within two seconds (looked at every 20 ms).
    async fn eventually(mut done: impl FnMut() -> bool) -> bool {
        for _ in 0..100 {
            if done() {
                return true;
            }
            tokio::time::sleep(Duration::from_millis(20)).await;
        }
        done()
    }

    fn state(pid: u32) -> Option<String> {
        let stat = std::fs::read_to_string(format!("/proc/{pid}/stat")).ok()?;
        Some(stat.rsplit_once(") ")?.1.split(' ').next()?.to_owned())
    }

    /// The exit is told (not polled) and reaped with its status; nothing of the child is
    /// kept once its `Process` is gone.
    #[tokio::test]
    async fn an_exit_is_told_and_reaped() {
        let mut p = spawn("echo last words >&2; exit 3");
        assert!(p.told, "pidfds are available here");
        let status = tokio::time::timeout(Duration::from_secs(5), p.wait())
            .await
            .expect("the exit was told")
            .unwrap();
        assert_eq!(status.code(), Some(3));
        let key = p.key;
        drop(p);
        assert!(!watcher().unwrap().lock().by_key.contains_key(&key));
    }

    /// A `Process` dropped while its child runs kills it, and the watcher reaps it: no
    /// zombie is left, and its entry goes.
    #[tokio::test]
    async fn a_dropped_process_is_killed_and_reaped() {
        let p = spawn("sleep 30");
        let (pid, key) = (p.id(), p.key);
        assert!(
            state(pid).is_some_and(|s| s != "Z"),
            "pid {pid} runs: {:?}",
            state(pid)
        );
        drop(p);
        let gone = eventually(|| {
            state(pid).is_none() && !watcher().unwrap().lock().by_key.contains_key(&key)
        })
        .await;
        assert!(gone, "pid {pid} is {:?}", state(pid));
    }

    /// As where no pidfd can be opened (before Linux 5.3): the exit is found by looking
    /// again every `EXIT_POLL`, and a child dropped while running is killed and reaped by a
    /// thread of its own.
    #[tokio::test]
    async fn without_a_pidfd_the_exit_is_polled_and_a_dropped_child_still_reaped() {
        let forget_pidfd = |p: &mut Process| {
            let w = watcher().unwrap();
            let mut children = w.lock();
            let pidfd = children
                .by_key
                .get_mut(&p.key)
                .unwrap()
                .pidfd
                .take()
                .unwrap();
            epoll::delete(&w.epoll, &pidfd).unwrap();
            p.told = false;
        };
        let mut p = spawn("sleep 0.2; exit 5");
        forget_pidfd(&mut p);
        let status = tokio::time::timeout(Duration::from_secs(5), p.wait())
            .await
            .expect("the exit was found")
            .unwrap();
        assert_eq!(status.code(), Some(5));

        let mut p = spawn("sleep 30");
        forget_pidfd(&mut p);
        let (pid, key) = (p.id(), p.key);
        drop(p);
        assert!(!watcher().unwrap().lock().by_key.contains_key(&key));
        let gone = eventually(|| state(pid).is_none()).await;
        assert!(gone, "pid {pid} is {:?}", state(pid));
    }

    /// Many children at once: each exit wakes its own waiter, and their entries go with them.
    #[tokio::test]
    async fn many_children_are_told_apart() {
        let mut waits = Vec::new();
        let mut keys = Vec::new();
        for i in 0..20 {
            let mut p = spawn(&format!("sleep 0.{:02}; exit {i}", 40 - i));
            keys.push(p.key);
            waits.push(tokio::spawn(
                async move { (i, p.wait().await.unwrap().code()) },
            ));
        }
        for w in waits {
            let (i, code) = tokio::time::timeout(Duration::from_secs(5), w)
                .await
                .unwrap()
                .unwrap();
            assert_eq!(code, Some(i));
        }
        let children = watcher().unwrap().lock();
        let left: Vec<_> = keys
            .iter()
            .filter(|k| children.by_key.contains_key(k))
            .collect();
        assert!(left.is_empty(), "entries left: {left:?}");
    }
}
