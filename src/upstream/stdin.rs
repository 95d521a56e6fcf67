//! A stdio child's input: written by the tasks that send the messages, with a bounded queue
//! and a flushing task only while the pipe is full.
//!
//! The pipe is registered with the runtime's I/O driver only while that task waits for it
//! to drain: the writes themselves are non-blocking and need no registration, and one held
//! for the child's whole life cost ~0.27 KB per process (with a process per session, per
//! session).
//!
//! The common case (a message that fits in the pipe's free space) is one non-blocking write
//! in the sender's own task: no channel, no writer task to wake and no buffer held between
//! messages. One task writes at a time, outside the queue's lock: a sender that finds another
//! writing queues its message and returns, and the writing task writes what was queued
//! meanwhile too (a few messages, then a spawned task takes over), so senders on other
//! threads never wait for a system call. When the child reads slower than it is written to,
//! the rest of a message and the messages after it wait in order in the queue, which one
//! spawned task drains as the pipe becomes writable; senders wait once `limit` messages are
//! queued, each at most its `wait` (then the message is refused, not queued). A message is never written in part (a sender cancelled mid-way still has its whole
//! line written or queued), so the newline framing holds whatever the senders do.

use std::collections::VecDeque;
use std::fs::File;
use std::io::{ErrorKind, Write};
use std::sync::{Arc, Mutex, MutexGuard};

use bytes::{Buf, Bytes};
use tokio::net::unix::pipe;
use tokio::sync::Notify;

/// Messages a sender writes for others after its own before a spawned task takes over: its
/// own caller should not wait long for a crowd.
const INLINE_WRITES: usize = 8;

/// Why a message could not be written.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(super) enum StdinError {
    /// The child closed its input (or the pipe failed): nothing more can be written.
    Closed,
    /// `limit` messages stayed unread for the sender's whole wait: the child is not reading.
    Full,
}

pub(super) struct Stdin {
    /// The pipe's writing end, non-blocking.
    pipe: File,
    queue: Mutex<Queue>,
    /// Woken when a full queue shrank (or the pipe broke): senders waiting for room.
    room: Notify,
    limit: usize,
}

#[derive(Default)]
struct Queue {
    /// Messages (the first one possibly in part) waiting for the pipe, in order.
    waiting: VecDeque<Bytes>,
    /// A task (a sender or the flushing task) is writing; others queue behind it.
    writing: bool,
    broken: bool,
}

/// What [`Stdin::admit`] did with a message.
enum Admitted {
    /// Written, queued, or refused for good.
    Done(Result<(), StdinError>),
    /// The queue is full: the message, handed back to wait for room.
    Full(Vec<u8>),
}

/// How far one message got.
enum Wrote {
    All,
    /// The pipe is full: the rest waits.
    Part(Bytes),
    Broken,
}

impl Stdin {
    /// Takes the pipe out of the I/O driver (it stays non-blocking).
    pub(super) fn new(pipe: pipe::Sender, limit: usize) -> std::io::Result<Arc<Stdin>> {
        Ok(Arc::new(Stdin {
            pipe: File::from(pipe.into_nonblocking_fd()?),
            queue: Mutex::new(Queue::default()),
            room: Notify::new(),
            limit: limit.max(1),
        }))
    }

    /// Writes one message (already framed), or queues it behind the one being written.
    /// Waits only while `limit` messages are queued, and at most `wait`. (The queue may also
    /// hold the rest of a message the full pipe cut: one more, already accepted.) The wait
    /// for room is boxed: it is rare, and its timer would otherwise size every request's
    /// future (this one is part of each forwarded request's).
    pub(super) async fn write(
        self: &Arc<Self>,
        message: Vec<u8>,
        wait: std::time::Duration,
    ) -> Result<(), StdinError> {
        match self.admit(message) {
            Admitted::Done(result) => result,
            Admitted::Full(message) => Box::pin(self.write_when_room(message, wait)).await,
        }
    }

    /// Queues `message` behind the one being written, or writes it (and what others queue
    /// meanwhile) when no other task is writing; hands it back while the queue is full.
    fn admit(self: &Arc<Self>, message: Vec<u8>) -> Admitted {
        {
            let mut queue = self.lock();
            if queue.broken {
                return Admitted::Done(Err(StdinError::Closed));
            }
            if queue.waiting.len() >= self.limit {
                return Admitted::Full(message);
            }
            if queue.writing {
                queue.waiting.push_back(Bytes::from(message));
                return Admitted::Done(Ok(()));
            }
            queue.writing = true;
        }
        Admitted::Done(self.write_as_writer(Bytes::from(message)))
    }

    /// Waits (at most `wait`) for room in a full queue, then admits `message`.
    async fn write_when_room(
        self: &Arc<Self>,
        mut message: Vec<u8>,
        wait: std::time::Duration,
    ) -> Result<(), StdinError> {
        let deadline = tokio::time::Instant::now() + wait;
        loop {
            let room = self.room.notified();
            tokio::pin!(room);
            room.as_mut().enable();
            // Looked at again once registered: a drain between the two looks wakes it.
            message = match self.admit(message) {
                Admitted::Done(result) => return result,
                Admitted::Full(message) => message,
            };
            if tokio::time::timeout_at(deadline, room).await.is_err() {
                return Err(StdinError::Full);
            }
        }
    }

    /// The task that writes: its own message, then (a few of) those queued meanwhile.
    fn write_as_writer(self: &Arc<Self>, mut message: Bytes) -> Result<(), StdinError> {
        for written in 0..=INLINE_WRITES {
            match self.write_one(message, |b| (&self.pipe).write(b)) {
                Wrote::All => {}
                Wrote::Part(rest) => {
                    self.hand_over(Some(rest));
                    return Ok(());
                }
                Wrote::Broken => {
                    self.break_off();
                    // Once its own message went out, the others' fail with the process.
                    return if written == 0 {
                        Err(StdinError::Closed)
                    } else {
                        Ok(())
                    };
                }
            }
            if written == INLINE_WRITES {
                break;
            }
            match self.next_queued() {
                Some(next) => message = next,
                None => return Ok(()),
            }
        }
        // Looked at and ended under one lock: a message queued in between is never stranded.
        {
            let mut queue = self.lock();
            if queue.waiting.is_empty() {
                queue.writing = false;
                queue.waiting = VecDeque::new();
                return Ok(());
            }
        }
        self.hand_over(None);
        Ok(())
    }

    /// Writes what the pipe takes now with `write`, outside the queue's lock (only the
    /// writing task calls it).
    fn write_one(
        &self,
        mut message: Bytes,
        write: impl Fn(&[u8]) -> std::io::Result<usize>,
    ) -> Wrote {
        while !message.is_empty() {
            match write(&message) {
                Ok(n) => message.advance(n),
                Err(e) if e.kind() == ErrorKind::WouldBlock => return Wrote::Part(message),
                Err(e) if e.kind() == ErrorKind::Interrupted => {}
                Err(_) => return Wrote::Broken,
            }
        }
        Wrote::All
    }

    /// The next queued message for the writing task, or `None` (and the writing ends) when
    /// there is none.
    fn next_queued(&self) -> Option<Bytes> {
        let mut queue = self.lock();
        let was_full = queue.waiting.len() >= self.limit;
        let next = queue.waiting.pop_front();
        if next.is_none() {
            queue.writing = false;
            // Drained: the queue's room is freed until the pipe fills again.
            queue.waiting = VecDeque::new();
        }
        drop(queue);
        if was_full {
            self.room.notify_waiters();
        }
        next
    }

    /// The spawned task takes over the writing: `rest` (a message cut by a full pipe) first.
    fn hand_over(self: &Arc<Self>, rest: Option<Bytes>) {
        if let Some(rest) = rest {
            self.lock().waiting.push_front(rest);
        }
        tokio::spawn(flush(self.clone()));
    }

    fn break_off(&self) {
        let mut queue = self.lock();
        queue.broken = true;
        queue.writing = false;
        queue.waiting = VecDeque::new();
        drop(queue);
        self.room.notify_waiters();
    }

    fn lock(&self) -> MutexGuard<'_, Queue> {
        // Nothing panics while holding it; a poisoned lock still holds a consistent queue.
        self.queue.lock().unwrap_or_else(|e| e.into_inner())
    }

    /// Messages waiting for the pipe (for tests).
    #[cfg(test)]
    fn queued(&self) -> usize {
        self.lock().waiting.len()
    }
}

/// Writes the queue out as the pipe becomes writable; ends once it is empty or the pipe broke.
/// The pipe is registered with the I/O driver for as long as this runs.
async fn flush(stdin: Arc<Stdin>) {
    // A second descriptor of the pipe, registered (and written through: a write that finds
    // the pipe full clears its readiness) until this ends.
    let Ok(pipe) = stdin.pipe.try_clone().and_then(pipe::Sender::from_file) else {
        stdin.break_off();
        return;
    };
    loop {
        if pipe.writable().await.is_err() {
            stdin.break_off();
            return;
        }
        while let Some(next) = stdin.next_queued() {
            match stdin.write_one(next, |b| pipe.try_write(b)) {
                Wrote::All => {}
                Wrote::Part(rest) => {
                    stdin.lock().waiting.push_front(rest);
                    break;
                }
                Wrote::Broken => {
                    stdin.break_off();
                    return;
                }
            }
        }
        if !stdin.lock().writing {
            return;
        }
    }
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used)]
    use std::time::Duration;

    use tokio::io::AsyncReadExt;

    use super::*;

    /// Messages larger than the pipe holds, from concurrent senders, with the reader slower
    /// than the writers: every message arrives whole and each sender's in its order; the
    /// queue bound makes senders wait instead of growing.
    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
    async fn messages_arrive_whole_and_in_order_through_a_full_pipe() {
        let (tx, mut rx) = pipe::pipe().unwrap();
        let stdin = Stdin::new(tx, 4).unwrap();
        let line = |sender: usize, i: usize| {
            let mut m = format!("{sender}:{i}:").into_bytes();
            m.resize(m.len() + 20_000 + i * 7, b'x');
            m.push(b'\n');
            m
        };
        let mut senders = vec![];
        for sender in 0..3 {
            let stdin = stdin.clone();
            senders.push(tokio::spawn(async move {
                let mut most = 0;
                for i in 0..40 {
                    stdin
                        .write(line(sender, i), Duration::from_secs(30))
                        .await
                        .unwrap();
                    let queued = stdin.queued();
                    // Four whole messages, and the rest of one cut by the full pipe.
                    assert!(queued <= 4 + 1, "the queue exceeded its bound");
                    most = most.max(queued);
                }
                most
            }));
        }
        let reader = tokio::spawn(async move {
            let mut all = vec![];
            let mut buf = vec![0; 4096];
            while all.iter().filter(|b| **b == b'\n').count() < 120 {
                let n = rx.read(&mut buf).await.unwrap();
                assert!(n > 0, "the pipe closed early");
                all.extend_from_slice(&buf[..n]);
                tokio::time::sleep(Duration::from_micros(200)).await;
            }
            all
        });
        let mut most = 0;
        for s in senders {
            most = most.max(s.await.unwrap());
        }
        assert!(
            most > 0,
            "the pipe never filled: the queue was not exercised"
        );
        let all = tokio::time::timeout(Duration::from_secs(20), reader)
            .await
            .unwrap()
            .unwrap();
        let mut next = [0usize; 3];
        for l in all.split(|b| *b == b'\n').filter(|l| !l.is_empty()) {
            let text = std::str::from_utf8(l).unwrap();
            let mut parts = text.splitn(3, ':');
            let sender: usize = parts.next().unwrap().parse().unwrap();
            let i: usize = parts.next().unwrap().parse().unwrap();
            assert_eq!(i, next[sender], "sender {sender}'s messages out of order");
            assert_eq!(
                l.len() + 1,
                line(sender, i).len(),
                "message {sender}:{i} cut"
            );
            next[sender] += 1;
        }
        assert_eq!(next, [40, 40, 40]);
        assert_eq!(stdin.queued(), 0);
    }

    /// Many small messages from senders on two threads at once, read as fast as they come:
    /// senders that find another writing queue behind it, and whoever writes takes their
    /// messages along; every message arrives once, whole, each sender's in order, and none is
    /// left in the queue.
    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
    async fn concurrent_senders_never_lose_or_interleave_messages() {
        let (tx, mut rx) = pipe::pipe().unwrap();
        let stdin = Stdin::new(tx, 1024).unwrap();
        const SENDERS: usize = 8;
        const EACH: usize = 2000;
        let reader = tokio::spawn(async move {
            let mut all = vec![];
            let mut buf = vec![0; 64 * 1024];
            while all.iter().filter(|b| **b == b'\n').count() < SENDERS * EACH {
                let n = rx.read(&mut buf).await.unwrap();
                assert!(n > 0, "the pipe closed early");
                all.extend_from_slice(&buf[..n]);
            }
            all
        });
        let mut senders = vec![];
        for sender in 0..SENDERS {
            let stdin = stdin.clone();
            senders.push(tokio::spawn(async move {
                for i in 0..EACH {
                    let line = format!(
                        "{{\"s\":{sender},\"i\":{i},\"pad\":\"{}\"}}\n",
                        "p".repeat(i % 97)
                    );
                    stdin
                        .write(line.into_bytes(), Duration::from_secs(30))
                        .await
                        .unwrap();
                    if i % 64 == 0 {
                        tokio::task::yield_now().await;
                    }
                }
            }));
        }
        for s in senders {
            s.await.unwrap();
        }
        let all = tokio::time::timeout(Duration::from_secs(20), reader)
            .await
            .expect("every message reached the reader (none stranded in the queue)")
            .unwrap();
        let mut next = [0usize; SENDERS];
        for l in all.split(|b| *b == b'\n').filter(|l| !l.is_empty()) {
            let v: serde_json::Value = serde_json::from_slice(l).expect("a whole message");
            let (sender, i) = (
                v["s"].as_u64().unwrap() as usize,
                v["i"].as_u64().unwrap() as usize,
            );
            assert_eq!(i, next[sender], "sender {sender}'s messages out of order");
            assert_eq!(v["pad"].as_str().unwrap().len(), i % 97);
            next[sender] += 1;
        }
        assert_eq!(next, [EACH; SENDERS]);
        assert_eq!(stdin.queued(), 0);
        assert!(!stdin.lock().writing, "the writing ended");
    }

    /// A child that never reads: once `limit` messages wait, a sender waits at most its
    /// `wait` and is refused (its message not queued); the queue stays at its bound.
    #[tokio::test(start_paused = true)]
    async fn a_child_that_never_reads_refuses_senders_after_their_wait() {
        let (tx, _rx) = pipe::pipe().unwrap();
        let stdin = Stdin::new(tx, 3).unwrap();
        let wait = Duration::from_secs(5);
        // Fill the pipe, then the queue: the flushing task gets its turns in between, so
        // messages stay queued only once the pipe holds no more.
        let mut sent = 0;
        loop {
            for _ in 0..10 {
                tokio::task::yield_now().await;
            }
            if stdin.queued() >= 3 {
                break;
            }
            stdin.write(vec![b'x'; 16 * 1024], wait).await.unwrap();
            sent += 1;
            assert!(sent < 100, "the pipe never filled");
        }
        let started = tokio::time::Instant::now();
        let refused = stdin.write(b"{}\n".to_vec(), wait).await;
        assert_eq!(refused, Err(StdinError::Full));
        assert_eq!(
            started.elapsed(),
            wait,
            "refused after its wait, not before"
        );
        assert_eq!(stdin.queued(), 3, "the refused message was not queued");
    }

    /// A reader that is gone: the sender gets an error (at once or once the queue's writes
    /// fail), never a hang.
    #[tokio::test]
    async fn a_closed_reader_fails_senders() {
        let (tx, rx) = pipe::pipe().unwrap();
        let stdin = Stdin::new(tx, 2).unwrap();
        drop(rx);
        let mut failed = false;
        for _ in 0..10 {
            let r = tokio::time::timeout(
                Duration::from_secs(5),
                stdin.write(vec![b'x'; 100_000], Duration::from_secs(5)),
            )
            .await
            .expect("a write to a closed pipe hung");
            if r == Err(StdinError::Closed) {
                failed = true;
                break;
            }
        }
        assert!(failed, "writes to a pipe without reader kept succeeding");
    }
}
