//! Where the gateway's log lines go: stderr, in batches. Each line is appended to a shared
//! batch (one short lock, no system call) and a flusher thread writes the batch out 50 ms
//! after its first line (at once when it grows large), so a gateway makes at most about 20
//! writes and wake-ups a second however busy it is, instead of one per line. A batch that grows past its bound makes the logging thread wait
//! for the flusher: lines are delayed under pressure, never dropped. [`flush`] writes what is
//! pending (at exit). A terminal gets every line at once instead.

use std::io::Write;
use std::sync::{Arc, Condvar, Mutex, OnceLock};
use std::time::Duration;

use tracing_subscriber::fmt::MakeWriter;

/// How long the flusher lets lines gather after the first one of a batch. At 5 ms a gateway
/// at 500 calls/s woke the flusher (a futex wake, a sleep, a write) every other call.
const GATHER: Duration = Duration::from_millis(50);
/// A batch this large is written without waiting for the gather time to pass.
const EARLY: usize = 256 * 1024;
/// A batch this large makes loggers wait until it has been written.
const BOUND: usize = 8 * 1024 * 1024;

pub(super) struct Shared {
    batch: Mutex<Vec<u8>>,
    /// Signalled when a batch gets its first line (or grows large): the flusher wakes.
    filled: Condvar,
    /// Signalled when a batch has been taken: waiting loggers go on.
    drained: Condvar,
}

static SHARED: OnceLock<Arc<Shared>> = OnceLock::new();

/// The writer for the log layer: batched unless stderr is a terminal.
#[derive(Clone)]
pub(super) enum LogWriter {
    Direct,
    Batched(Arc<Shared>),
}

impl LogWriter {
    /// Batched stderr for a long-running process (the flusher thread starts on first use).
    pub(super) fn stderr() -> LogWriter {
        if std::io::IsTerminal::is_terminal(&std::io::stderr()) {
            return LogWriter::Direct;
        }
        match shared() {
            Some(s) => LogWriter::Batched(s),
            None => LogWriter::Direct,
        }
    }
}

fn shared() -> Option<Arc<Shared>> {
    if let Some(s) = SHARED.get() {
        return Some(s.clone());
    }
    let s = Arc::new(Shared {
        batch: Mutex::new(Vec::with_capacity(64 * 1024)),
        filled: Condvar::new(),
        drained: Condvar::new(),
    });
    let flusher = s.clone();
    std::thread::Builder::new()
        .name("log-flusher".into())
        .spawn(move || run_flusher(&flusher))
        .ok()?;
    Some(SHARED.get_or_init(|| s).clone())
}

fn run_flusher(shared: &Shared) {
    let mut spare = Vec::with_capacity(64 * 1024);
    loop {
        {
            let Ok(mut batch) = shared.batch.lock() else {
                return;
            };
            while batch.is_empty() {
                batch = match shared.filled.wait(batch) {
                    Ok(b) => b,
                    Err(_) => return,
                };
            }
            if batch.len() < EARLY {
                // Let the lines of the next 50 ms join this write.
                drop(batch);
                std::thread::sleep(GATHER);
                let Ok(b) = shared.batch.lock() else {
                    return;
                };
                batch = b;
            }
            std::mem::swap(&mut *batch, &mut spare);
            shared.drained.notify_all();
        }
        write_out(&mut spare);
    }
}

fn write_out(lines: &mut Vec<u8>) {
    let mut err = std::io::stderr().lock();
    // Nowhere to report a failed log write; the lines are gone either way.
    let _ = err.write_all(lines);
    let _ = err.flush();
    lines.clear();
    if lines.capacity() > EARLY * 4 {
        lines.shrink_to(64 * 1024);
    }
}

/// Writes every pending line now (before the process exits).
pub fn flush() {
    let Some(shared) = SHARED.get() else {
        return;
    };
    let mut pending = match shared.batch.lock() {
        Ok(mut b) => std::mem::take(&mut *b),
        Err(_) => return,
    };
    shared.drained.notify_all();
    write_out(&mut pending);
}

impl Write for LogWriter {
    fn write(&mut self, buf: &[u8]) -> std::io::Result<usize> {
        match self {
            LogWriter::Direct => std::io::stderr().write(buf),
            LogWriter::Batched(shared) => {
                let Ok(mut batch) = shared.batch.lock() else {
                    return std::io::stderr().write(buf);
                };
                while batch.len() >= BOUND {
                    shared.filled.notify_one();
                    batch = match shared.drained.wait(batch) {
                        Ok(b) => b,
                        Err(_) => return std::io::stderr().write(buf),
                    };
                }
                let first = batch.is_empty();
                batch.extend_from_slice(buf);
                let early = batch.len() >= EARLY;
                drop(batch);
                if first || early {
                    shared.filled.notify_one();
                }
                Ok(buf.len())
            }
        }
    }

    fn flush(&mut self) -> std::io::Result<()> {
        match self {
            LogWriter::Direct => std::io::stderr().flush(),
            // The flusher writes within 50 ms; `flush()` above forces it.
            LogWriter::Batched(_) => Ok(()),
        }
    }
}

impl<'a> MakeWriter<'a> for LogWriter {
    type Writer = LogWriter;

    fn make_writer(&'a self) -> Self::Writer {
        self.clone()
    }
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used)]
    use super::*;

    #[test]
    fn lines_reach_the_batch_whole_and_in_order_and_flush_empties_it() {
        let shared = Arc::new(Shared {
            batch: Mutex::new(Vec::new()),
            filled: Condvar::new(),
            drained: Condvar::new(),
        });
        let mut w = LogWriter::Batched(shared.clone());
        let threads: Vec<_> = (0..4)
            .map(|t| {
                let mut w = w.clone();
                std::thread::spawn(move || {
                    for i in 0..100 {
                        w.write_all(format!("t{t} line {i}\n").as_bytes()).unwrap();
                    }
                })
            })
            .collect();
        for t in threads {
            t.join().unwrap();
        }
        w.write_all(b"last\n").unwrap();
        let text = String::from_utf8(shared.batch.lock().unwrap().clone()).unwrap();
        let lines: Vec<&str> = text.lines().collect();
        assert_eq!(lines.len(), 401);
        for t in 0..4 {
            let mine: Vec<&str> = lines
                .iter()
                .copied()
                .filter(|l| l.starts_with(&format!("t{t} ")))
                .collect();
            let want: Vec<String> = (0..100).map(|i| format!("t{t} line {i}")).collect();
            assert_eq!(mine, want, "thread {t}'s lines whole and in order");
        }
        assert_eq!(lines[400], "last");
    }

    #[test]
    fn a_full_batch_makes_the_logger_wait_for_the_flusher() {
        let shared = Arc::new(Shared {
            batch: Mutex::new(vec![b'x'; BOUND]),
            filled: Condvar::new(),
            drained: Condvar::new(),
        });
        let mut w = LogWriter::Batched(shared.clone());
        let writer = std::thread::spawn(move || w.write_all(b"after\n").unwrap());
        std::thread::sleep(Duration::from_millis(50));
        assert!(
            !writer.is_finished(),
            "the logger waits while the batch is full"
        );
        // What the flusher does: take the batch, wake the waiting loggers.
        let taken = std::mem::take(&mut *shared.batch.lock().unwrap());
        shared.drained.notify_all();
        writer.join().unwrap();
        assert_eq!(taken.len(), BOUND);
        assert_eq!(&*shared.batch.lock().unwrap(), b"after\n");
    }
}
