//! A stdio child's input: written by the task that sends each message, with a bounded queue
//! and a flushing task only while the pipe is full.
//!
//! The common case (a message that fits in the pipe's free space) is one non-blocking write
//! in the sender's own task: no channel, no writer task to wake and no buffer held between
//! messages. When the child reads slower than it is written to, the rest of a message and the
//! messages after it wait in order in a queue that one spawned task drains as the pipe becomes
//! writable; senders wait once `limit` messages are queued. A message is never written in
//! part (a sender cancelled mid-way still has its whole line written or queued), so the
//! newline framing holds whatever the senders do.

use std::collections::VecDeque;
use std::io::ErrorKind;
use std::sync::{Arc, Mutex, MutexGuard};

use bytes::{Buf, Bytes};
use tokio::net::unix::pipe;
use tokio::sync::Notify;

/// Why a message could not be written.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(super) enum StdinError {
    /// The child closed its input (or the pipe failed): nothing more can be written.
    Closed,
}

pub(super) struct Stdin {
    pipe: pipe::Sender,
    queue: Mutex<Queue>,
    /// Woken when queued messages were written (or the pipe broke): senders waiting for room.
    room: Notify,
    limit: usize,
}

#[derive(Default)]
struct Queue {
    /// Messages (the first one possibly in part) waiting for the pipe, in order.
    waiting: VecDeque<Bytes>,
    /// A task is draining `waiting`.
    flushing: bool,
    broken: bool,
}

impl Stdin {
    pub(super) fn new(pipe: pipe::Sender, limit: usize) -> Arc<Stdin> {
        Arc::new(Stdin {
            pipe,
            queue: Mutex::new(Queue::default()),
            room: Notify::new(),
            limit: limit.max(1),
        })
    }

    /// Writes one message (already framed), or queues it behind those waiting for the pipe.
    /// Waits only while `limit` messages are queued.
    pub(super) async fn write(self: &Arc<Self>, message: Vec<u8>) -> Result<(), StdinError> {
        loop {
            {
                let mut queue = self.lock();
                if queue.broken {
                    return Err(StdinError::Closed);
                }
                if queue.waiting.len() < self.limit {
                    return self.write_or_queue(&mut queue, message);
                }
            }
            let room = self.room.notified();
            tokio::pin!(room);
            room.as_mut().enable();
            // Looked at again once registered: a drain between the two looks wakes it.
            let full = {
                let queue = self.lock();
                !queue.broken && queue.waiting.len() >= self.limit
            };
            if full {
                room.await;
            }
        }
    }

    fn write_or_queue(
        self: &Arc<Self>,
        queue: &mut Queue,
        message: Vec<u8>,
    ) -> Result<(), StdinError> {
        if queue.flushing {
            queue.waiting.push_back(Bytes::from(message));
            return Ok(());
        }
        let mut written = 0;
        while written < message.len() {
            match self.pipe.try_write(&message[written..]) {
                Ok(n) => written += n,
                Err(e) if e.kind() == ErrorKind::WouldBlock => break,
                Err(e) if e.kind() == ErrorKind::Interrupted => {}
                Err(_) => {
                    queue.broken = true;
                    return Err(StdinError::Closed);
                }
            }
        }
        if written < message.len() {
            let mut rest = Bytes::from(message);
            rest.advance(written);
            queue.waiting.push_back(rest);
            queue.flushing = true;
            tokio::spawn(flush(self.clone()));
        }
        Ok(())
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

/// Drains the queue as the pipe becomes writable; ends once it is empty or the pipe broke.
async fn flush(stdin: Arc<Stdin>) {
    loop {
        let ready = stdin.pipe.writable().await;
        let mut queue = stdin.lock();
        if ready.is_err() {
            queue.broken = true;
        }
        while !queue.broken {
            let Some(front) = queue.waiting.front_mut() else {
                break;
            };
            match stdin.pipe.try_write(front) {
                Ok(n) if n == front.len() => {
                    queue.waiting.pop_front();
                }
                Ok(n) => front.advance(n),
                Err(e) if e.kind() == ErrorKind::WouldBlock => break,
                Err(e) if e.kind() == ErrorKind::Interrupted => {}
                Err(_) => queue.broken = true,
            }
        }
        let done = queue.broken || queue.waiting.is_empty();
        if done {
            // Drained (or never to be): the queue's room is freed until the pipe fills again.
            // A new pipe fills once at least: its first write finds no readiness reported yet.
            queue.waiting = VecDeque::new();
            queue.flushing = false;
        }
        drop(queue);
        stdin.room.notify_waiters();
        if done {
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
    #[tokio::test]
    async fn messages_arrive_whole_and_in_order_through_a_full_pipe() {
        let (tx, mut rx) = pipe::pipe().unwrap();
        let stdin = Stdin::new(tx, 4);
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
                    stdin.write(line(sender, i)).await.unwrap();
                    let queued = stdin.queued();
                    assert!(queued <= 4, "the queue exceeded its bound");
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

    /// A reader that is gone: the sender gets an error (at once or once the queue's writes
    /// fail), never a hang.
    #[tokio::test]
    async fn a_closed_reader_fails_senders() {
        let (tx, rx) = pipe::pipe().unwrap();
        let stdin = Stdin::new(tx, 2);
        drop(rx);
        let mut failed = false;
        for _ in 0..10 {
            let r = tokio::time::timeout(Duration::from_secs(5), stdin.write(vec![b'x'; 100_000]))
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
