//! Connection workers: one single-threaded tokio runtime per core, each serving the client
//! connections the accept loop hands it (round robin) and every task those connections spawn.
//!
//! A multi-threaded runtime shares its tasks between workers: a task woken on one core may run
//! on the other, and an idle worker is woken to look for work whenever tasks are queued, which
//! at every load but saturation means futex wakes and cache lines crossing cores for each
//! call. Here a connection, its requests and their upstream exchanges stay on one thread, as
//! an nginx worker's do; the cores share the load by connections. The price: one busy
//! connection (an HTTP/2 client with many streams) has one core, not all of them.
//!
//! What is not a client connection's — the accept loop, the admin listener, reloads, the
//! session reaper, the Redis bus — runs on the process's main runtime, as before; shared stdio
//! processes, which serve every connection, are started on the workers in turn
//! ([`Spreading`]). Tokio's channels, locks and I/O work across runtimes, so a task on a worker
//! can wait on anything the main runtime drives.

use std::cell::{Cell, RefCell};
use std::future::Future;
use std::io;
use std::marker::PhantomData;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};
use std::thread::JoinHandle;

use tokio::runtime::Handle;
use tokio::sync::oneshot;

thread_local! {
    /// The worker this thread is (its index + 1); 0 on other threads.
    static HOME: Cell<usize> = const { Cell::new(0) };
    /// The workers long-lived tasks are spread over while a [`Spreading`] guard is held.
    static SPREAD: RefCell<Option<Arc<Pool>>> = const { RefCell::new(None) };
}

/// The worker the calling thread is (1-based), or 0 on a thread that is not a worker (the
/// main runtime's, a blocking pool's, a test's): what upstream connection pools key their idle
/// connections by, so a connection is taken again on the worker whose I/O driver it is
/// registered with.
pub fn home() -> usize {
    HOME.with(Cell::get)
}

/// Spawns `task` on the next worker while a [`Spreading`] guard is held on this thread, on the
/// current runtime otherwise: for tasks that serve every connection (a shared stdio process's
/// supervisor), started where no connection is. Returns the task and the worker it runs on
/// (as [`home`] numbers them: 0 when not on a worker).
pub fn spawn_spread<F>(task: F) -> (tokio::task::JoinHandle<F::Output>, usize)
where
    F: Future + Send + 'static,
    F::Output: Send + 'static,
{
    let worker = SPREAD.with(|s| {
        s.borrow().as_ref().map(|pool| {
            let (handle, home) = pool.pick_numbered();
            (handle.clone(), home)
        })
    });
    match worker {
        Some((handle, home)) => (handle.spawn(task), home),
        None => (tokio::spawn(task), home()),
    }
}

/// The runtimes' handles and the round robin over them.
struct Pool {
    handles: Vec<Handle>,
    next: AtomicUsize,
}

impl Pool {
    fn pick(&self) -> &Handle {
        self.pick_numbered().0
    }

    /// The next worker and its number (1-based, as [`home`] says on its thread).
    fn pick_numbered(&self) -> (&Handle, usize) {
        let n = self.next.fetch_add(1, Ordering::Relaxed) % self.handles.len();
        (&self.handles[n], n + 1)
    }
}

/// The workers: a runtime each, running until [`Workers::stop`] or until dropped.
pub struct Workers {
    pool: Arc<Pool>,
    stops: Mutex<Vec<oneshot::Sender<()>>>,
    threads: Mutex<Vec<JoinHandle<()>>>,
}

/// While held, [`spawn_spread`] on this thread spreads tasks over the workers. Not `Send`: it
/// cannot be held across an `.await`, where the task may move to another thread.
pub struct Spreading {
    _not_send: PhantomData<*const ()>,
}

impl Drop for Spreading {
    fn drop(&mut self) {
        SPREAD.with(|s| s.borrow_mut().take());
    }
}

impl Workers {
    /// Starts `count` workers (at least one), each a thread named `sy-worker-<n>` (15 bytes at most: Linux cuts thread names there).
    pub fn start(count: usize) -> io::Result<Workers> {
        let count = count.max(1);
        let mut handles = Vec::with_capacity(count);
        let mut stops = Vec::with_capacity(count);
        let mut threads = Vec::with_capacity(count);
        for index in 0..count {
            let runtime = tokio::runtime::Builder::new_current_thread()
                .enable_all()
                .build()?;
            let (stop, stopped) = oneshot::channel::<()>();
            handles.push(runtime.handle().clone());
            stops.push(stop);
            let thread = std::thread::Builder::new()
                .name(format!("sy-worker-{}", index + 1))
                .spawn(move || {
                    HOME.with(|h| h.set(index + 1));
                    // Runs the tasks spawned onto it until told to stop (or its `Workers`
                    // is dropped); dropping the runtime then cancels what is left.
                    let _ = runtime.block_on(stopped);
                })?;
            threads.push(thread);
        }
        Ok(Workers {
            pool: Arc::new(Pool {
                handles,
                next: AtomicUsize::new(0),
            }),
            stops: Mutex::new(stops),
            threads: Mutex::new(threads),
        })
    }

    /// As many workers as the process may use cores (`available_parallelism`: cgroup quotas
    /// and affinity counted), or `TOKIO_WORKER_THREADS` when set, as for the shared runtime.
    pub fn per_core() -> io::Result<Workers> {
        let from_env = std::env::var("TOKIO_WORKER_THREADS")
            .ok()
            .and_then(|v| v.trim().parse::<usize>().ok())
            .filter(|n| *n > 0);
        let count = from_env.unwrap_or_else(|| {
            std::thread::available_parallelism().map_or(1, std::num::NonZeroUsize::get)
        });
        Workers::start(count)
    }

    /// How many workers there are.
    pub fn len(&self) -> usize {
        self.pool.handles.len()
    }

    /// Never: there is at least one worker.
    pub fn is_empty(&self) -> bool {
        self.pool.handles.is_empty()
    }

    /// The worker the next connection goes to (round robin).
    pub fn pick(&self) -> &Handle {
        self.pool.pick()
    }

    /// Spreads the tasks [`spawn_spread`] starts on this thread over the workers until the
    /// guard is dropped.
    pub fn spreading(&self) -> Spreading {
        SPREAD.with(|s| *s.borrow_mut() = Some(self.pool.clone()));
        Spreading {
            _not_send: PhantomData,
        }
    }

    /// Tells every worker to stop, without waiting: each drops the tasks still on it.
    pub fn halt(&self) {
        if let Ok(mut stops) = self.stops.lock() {
            stops.clear();
        }
    }

    /// Stops every worker ([`halt`](Self::halt)) and waits for their threads, off the async
    /// runtime (joining blocks).
    pub async fn stop(&self) {
        self.halt();
        let threads = self
            .threads
            .lock()
            .map(|mut t| std::mem::take(&mut *t))
            .unwrap_or_default();
        let _ = tokio::task::spawn_blocking(move || {
            for t in threads {
                let _ = t.join();
            }
        })
        .await;
    }
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used)]
    use super::*;

    #[tokio::test]
    async fn connections_are_spread_round_robin_and_each_worker_knows_itself() {
        let workers = Workers::start(3).unwrap();
        assert_eq!(workers.len(), 3);
        assert_eq!(home(), 0, "a test's thread is no worker");
        let mut homes = Vec::new();
        for _ in 0..6 {
            homes.push(workers.pick().spawn(async { home() }).await.unwrap());
        }
        assert_eq!(homes, [1, 2, 3, 1, 2, 3]);
        workers.stop().await;
    }

    #[tokio::test]
    async fn tasks_are_spread_only_while_the_guard_is_held() {
        let workers = Workers::start(2).unwrap();
        let spread = {
            let _spreading = workers.spreading();
            [
                spawn_spread(async { home() }),
                spawn_spread(async { home() }),
            ]
        };
        let mut homes = Vec::new();
        for (task, told) in spread {
            let ran_on = task.await.unwrap();
            assert_eq!(ran_on, told, "the worker it was said to run on");
            homes.push(ran_on);
        }
        homes.sort_unstable();
        assert_eq!(homes, [1, 2]);
        // The guard is gone: the current runtime's.
        let (task, told) = spawn_spread(async { home() });
        assert_eq!((task.await.unwrap(), told), (0, 0));
        workers.stop().await;
    }

    #[tokio::test]
    async fn halting_drops_what_is_still_running_without_waiting() {
        let workers = Workers::start(2).unwrap();
        let (tx, rx) = oneshot::channel::<()>();
        workers.pick().spawn(async move {
            let _tx = tx;
            std::future::pending::<()>().await;
        });
        workers.halt();
        assert!(rx.await.is_err(), "the task was dropped with its worker");
        workers.stop().await;
    }

    #[tokio::test]
    async fn stopping_drops_what_is_still_running() {
        let workers = Workers::start(1).unwrap();
        let (tx, rx) = oneshot::channel::<()>();
        let task = workers.pick().spawn(async move {
            let _tx = tx;
            std::future::pending::<()>().await;
        });
        workers.stop().await;
        // The task was dropped with its runtime: its sender is gone.
        assert!(rx.await.is_err());
        assert!(task.await.unwrap_err().is_cancelled());
    }
}
