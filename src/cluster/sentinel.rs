//! Redis Sentinel: the primary the sentinels name (`SENTINEL get-master-addr-by-name`, each
//! sentinel in turn, then `ROLE` on the named node), and [`Primary`], a connection that follows
//! it through failovers. One watcher task per `Primary` re-resolves when a command fails as a
//! lost or demoted primary makes it fail (connection errors, timeouts, `READONLY`) and at once
//! when a sentinel announces `+switch-master`; callers never wait for it (they get their error,
//! hence `StoreError::Unavailable`), and a burst of failures wakes it once: the sentinels see
//! one replica's questions one at a time, at most every [`MIN_RECHECK`].

use std::sync::Arc;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::time::{Duration, Instant};

use arc_swap::ArcSwap;
use futures_util::StreamExt;
use redis::aio::{ConnectionLike, ConnectionManager, PubSub};
use redis::{
    AsyncConnectionConfig, Cmd, ConnectionAddr, ConnectionInfo, IntoConnectionInfo, Pipeline,
    RedisFuture, RedisResult, Value,
};
use tokio::sync::{Notify, watch};

use super::conn::manager_config;
use super::describe;
use crate::config::SentinelConfig;

/// The shortest pause between two checks of the primary (a burst of failed commands asks once).
const MIN_RECHECK: Duration = Duration::from_millis(200);
/// The longest pause between two attempts while no primary can be reached (an announcement
/// ends the pause at once).
const MAX_BACKOFF: Duration = Duration::from_secs(1);
/// The channel on which sentinels announce a new primary.
const SWITCH_CHANNEL: &str = "+switch-master";

/// A connection to the primary the sentinels name; clones share it and its watcher, which
/// stops with the last clone.
#[derive(Clone)]
pub(crate) struct Primary {
    state: Arc<State>,
    _watcher: Arc<AbortOnDrop>,
}

struct State {
    finder: Finder,
    /// The primary commands go to now.
    current: ArcSwap<Current>,
    /// Asks the watcher to check the primary (one stored wake-up however many ask).
    suspect: Notify,
    /// A sentinel announced a new primary: also ends the watcher's backoff.
    announced: Notify,
    /// Counts switches to another primary (the bus's subscriber moves with it).
    switches: watch::Sender<u64>,
}

/// One primary, connected.
struct Current {
    /// `host:port` as the sentinels announce it (no secret: logs may show it).
    address: String,
    client: redis::Client,
    manager: ConnectionManager,
}

/// Asks the sentinels and checks the node they name.
struct Finder {
    master: String,
    sentinels: Vec<Sentinel>,
    /// The sentinel that answered last: asked first next time.
    preferred: AtomicUsize,
    /// The data nodes' login, TLS and database; the address is each primary's.
    data: ConnectionInfo,
    tls: bool,
    timeout: Duration,
}

struct Sentinel {
    /// `host:port`, for logs.
    address: String,
    client: redis::Client,
}

struct AbortOnDrop(tokio::task::JoinHandle<()>);

impl Drop for AbortOnDrop {
    fn drop(&mut self) {
        self.0.abort();
    }
}

impl Primary {
    /// Finds the primary and connects to it; each sentinel is asked within `timeout`, the
    /// primary connected and checked within two more. Errors hold no URL or password.
    pub(crate) async fn connect(
        config: &SentinelConfig,
        timeout: Duration,
    ) -> Result<Primary, String> {
        let finder = Finder::new(config, timeout)?;
        let current = finder.find().await?;
        tracing::info!(master = %finder.master, primary = %current.address, "Redis primary found through Sentinel");
        let state = Arc::new(State {
            finder,
            current: ArcSwap::from_pointee(current),
            suspect: Notify::new(),
            announced: Notify::new(),
            switches: watch::channel(0).0,
        });
        let watcher = tokio::spawn(watch_primary(state.clone()));
        Ok(Primary {
            state,
            _watcher: Arc::new(AbortOnDrop(watcher)),
        })
    }

    /// A pub/sub connection to the current primary (bounded by the timeout).
    pub(crate) async fn pubsub(&self) -> RedisResult<PubSub> {
        let client = self.state.current.load().client.clone();
        match tokio::time::timeout(self.state.finder.timeout, client.get_async_pubsub()).await {
            Ok(result) => result,
            Err(_) => {
                self.state.suspect.notify_one();
                Err(std::io::Error::from(std::io::ErrorKind::TimedOut).into())
            }
        }
    }

    pub(crate) fn switches(&self) -> watch::Receiver<u64> {
        self.state.switches.subscribe()
    }
}

impl ConnectionLike for Primary {
    fn req_packed_command<'a>(&'a mut self, cmd: &'a Cmd) -> RedisFuture<'a, Value> {
        let mut manager = self.state.current.load().manager.clone();
        let mut watch = Watch::new(&self.state);
        Box::pin(async move {
            let result = manager.req_packed_command(cmd).await;
            watch.settle(result.as_ref().err());
            result
        })
    }

    fn req_packed_commands<'a>(
        &'a mut self,
        pipeline: &'a Pipeline,
        offset: usize,
        count: usize,
    ) -> RedisFuture<'a, Vec<Value>> {
        let mut manager = self.state.current.load().manager.clone();
        let mut watch = Watch::new(&self.state);
        Box::pin(async move {
            let result = manager.req_packed_commands(pipeline, offset, count).await;
            watch.settle(result.as_ref().err());
            result
        })
    }

    fn get_db(&self) -> i64 {
        self.state.current.load().manager.get_db()
    }
}

/// Watches one command: a failure that a lost or demoted primary causes, or the caller giving
/// up at the timeout (the future dropped unfinished), wakes the watcher.
struct Watch<'a> {
    state: &'a State,
    started: Instant,
    settled: bool,
}

impl<'a> Watch<'a> {
    fn new(state: &'a State) -> Watch<'a> {
        Watch {
            state,
            started: Instant::now(),
            settled: false,
        }
    }

    fn settle(&mut self, error: Option<&redis::RedisError>) {
        self.settled = true;
        if error.is_some_and(primary_suspect) {
            self.state.suspect.notify_one();
        }
    }
}

impl Drop for Watch<'_> {
    fn drop(&mut self) {
        // Abandoned near the operation bound: the primary may hang (partitioned, stopped).
        if !self.settled && self.started.elapsed() >= self.state.finder.timeout * 9 / 10 {
            self.state.suspect.notify_one();
        }
    }
}

/// Whether an error says the primary may have moved: the connection failed or timed out, or
/// the node is no longer (or not yet) a writable primary.
fn primary_suspect(e: &redis::RedisError) -> bool {
    e.is_io_error()
        || e.is_connection_dropped()
        || e.is_connection_refusal()
        || e.is_timeout()
        || matches!(e.code(), Some("READONLY" | "MASTERDOWN" | "LOADING"))
}

/// The watcher: follows `+switch-master` announcements and re-checks the primary whenever
/// asked, until aborted.
async fn watch_primary(state: Arc<State>) {
    tokio::join!(announcements(&state), follow(&state));
}

/// Each wake-up: ask the sentinels until a primary answers (backoff between attempts, cut
/// short by an announcement), switch to it if it is another one, then rest [`MIN_RECHECK`].
async fn follow(state: &State) {
    loop {
        tokio::select! {
            () = state.suspect.notified() => {}
            () = state.announced.notified() => {}
        }
        let mut backoff = Duration::from_millis(100);
        loop {
            match check(state).await {
                Ok(()) => break,
                Err(e) => {
                    tracing::warn!(master = %state.finder.master, error = %e, retry_ms = backoff.as_millis() as u64, "no Redis primary reachable through Sentinel; asking again");
                    tokio::select! {
                        () = tokio::time::sleep(backoff) => {}
                        () = state.announced.notified() => {}
                    }
                    backoff = (backoff * 2).min(MAX_BACKOFF);
                }
            }
        }
        tokio::time::sleep(MIN_RECHECK).await;
    }
}

/// Asks the sentinels for the primary: the current one if it still answers as primary, else
/// the new one, connected and checked, becomes current.
async fn check(state: &State) -> Result<(), String> {
    let finder = &state.finder;
    let (host, port) = finder.ask().await?;
    let address = format!("{host}:{port}");
    let current = state.current.load_full();
    if current.address == address {
        let mut manager = current.manager.clone();
        return finder.check_role(&mut manager).await;
    }
    let next = finder.connect(&host, port).await?;
    tracing::warn!(master = %finder.master, from = %current.address, to = %next.address, "the Redis primary changed; following it");
    state.current.store(Arc::new(next));
    state.switches.send_modify(|n| *n += 1);
    Ok(())
}

/// Subscribes to `+switch-master` on one sentinel after another; an announcement for our
/// master, and every (re)subscription (one may have been missed), wake the follower.
async fn announcements(state: &State) {
    let finder = &state.finder;
    let mut backoff = Duration::from_millis(100);
    loop {
        for sentinel in finder.in_order() {
            let subscribed = tokio::time::timeout(finder.timeout, async {
                let mut pubsub = sentinel.client.get_async_pubsub().await?;
                pubsub.subscribe(SWITCH_CHANNEL).await?;
                Ok::<_, redis::RedisError>(pubsub)
            })
            .await;
            let mut pubsub = match subscribed {
                Ok(Ok(p)) => p,
                Ok(Err(e)) => {
                    tracing::debug!(sentinel = %sentinel.address, error = %describe(&e), "cannot subscribe to a sentinel's announcements");
                    continue;
                }
                Err(_) => continue,
            };
            backoff = Duration::from_millis(100);
            state.suspect.notify_one();
            let mut messages = pubsub.on_message();
            while let Some(message) = messages.next().await {
                let Ok(text) = message.get_payload::<String>() else {
                    continue;
                };
                // `<master> <old-ip> <old-port> <new-ip> <new-port>`
                if text.split(' ').next() == Some(finder.master.as_str()) {
                    tracing::info!(master = %finder.master, sentinel = %sentinel.address, "a sentinel announced a new Redis primary");
                    state.announced.notify_one();
                }
            }
            tracing::debug!(sentinel = %sentinel.address, "lost a sentinel's announcements; subscribing elsewhere");
        }
        tokio::time::sleep(backoff).await;
        backoff = (backoff * 2).min(MAX_BACKOFF);
    }
}

impl Finder {
    fn new(config: &SentinelConfig, timeout: Duration) -> Result<Finder, String> {
        let mut sentinels = Vec::with_capacity(config.nodes.len());
        for (i, node) in config.nodes.iter().enumerate() {
            let client = redis::Client::open(node.expose())
                .map_err(|e| format!("invalid URL of sentinel #{}: {}", i + 1, e.category()))?;
            let address = match client.get_connection_info().addr() {
                ConnectionAddr::Tcp(host, port) | ConnectionAddr::TcpTls { host, port, .. } => {
                    format!("{host}:{port}")
                }
                _ => format!("sentinel #{}", i + 1),
            };
            sentinels.push(Sentinel { address, client });
        }
        let template = ConnectionAddr::Tcp(String::new(), 0)
            .into_connection_info()
            .map_err(|e| format!("invalid Redis settings: {}", e.category()))?;
        let mut settings = template
            .redis_settings()
            .clone()
            .set_db(i64::from(config.db));
        if let Some(username) = &config.username {
            settings = settings.set_username(username);
        }
        if let Some(password) = &config.password {
            settings = settings.set_password(password.expose());
        }
        Ok(Finder {
            master: config.master.clone(),
            sentinels,
            preferred: AtomicUsize::new(0),
            data: template.set_redis_settings(settings),
            tls: config.tls,
            timeout,
        })
    }

    /// The sentinels, the one that answered last first.
    fn in_order(&self) -> impl Iterator<Item = &Sentinel> {
        let first = self.preferred.load(Ordering::Relaxed) % self.sentinels.len().max(1);
        self.sentinels[first..]
            .iter()
            .chain(self.sentinels[..first].iter())
    }

    /// The primary the sentinels name, connected and checked.
    async fn find(&self) -> Result<Current, String> {
        let (host, port) = self.ask().await?;
        self.connect(&host, port).await
    }

    /// `SENTINEL get-master-addr-by-name` to each sentinel in turn (each within the timeout)
    /// until one names the primary.
    async fn ask(&self) -> Result<(String, u16), String> {
        let config = AsyncConnectionConfig::new()
            .set_connection_timeout(Some(self.timeout))
            .set_response_timeout(Some(self.timeout));
        let mut failures = Vec::new();
        let first = self.preferred.load(Ordering::Relaxed);
        for (offset, sentinel) in self.in_order().enumerate() {
            let asked = tokio::time::timeout(self.timeout, async {
                let mut conn = sentinel
                    .client
                    .get_multiplexed_async_connection_with_config(&config)
                    .await?;
                redis::cmd("SENTINEL")
                    .arg("get-master-addr-by-name")
                    .arg(&self.master)
                    .query_async::<Option<(String, u16)>>(&mut conn)
                    .await
            })
            .await;
            match asked {
                Ok(Ok(Some(address))) => {
                    let index = (first + offset) % self.sentinels.len();
                    self.preferred.store(index, Ordering::Relaxed);
                    return Ok(address);
                }
                Ok(Ok(None)) => failures.push(format!(
                    "{}: does not monitor `{}`",
                    sentinel.address, self.master
                )),
                Ok(Err(e)) => failures.push(format!("{}: {}", sentinel.address, describe(&e))),
                Err(_) => failures.push(format!("{}: timed out", sentinel.address)),
            }
        }
        Err(format!(
            "no sentinel named the primary of `{}` ({})",
            self.master,
            failures.join("; ")
        ))
    }

    /// A connection to the node at `host:port`, checked to be the primary.
    async fn connect(&self, host: &str, port: u16) -> Result<Current, String> {
        let addr = if self.tls {
            ConnectionAddr::TcpTls {
                host: host.to_owned(),
                port,
                insecure: false,
                tls_params: None,
            }
        } else {
            ConnectionAddr::Tcp(host.to_owned(), port)
        };
        let address = format!("{host}:{port}");
        let client = redis::Client::open(self.data.clone().set_addr(addr))
            .map_err(|e| format!("invalid Redis settings: {}", e.category()))?;
        let mut manager = tokio::time::timeout(
            self.timeout,
            ConnectionManager::new_with_config(client.clone(), manager_config(self.timeout)),
        )
        .await
        .map_err(|_| format!("the primary at {address} did not answer in time"))?
        .map_err(|e| format!("cannot reach the primary at {address}: {}", describe(&e)))?;
        self.check_role(&mut manager)
            .await
            .map_err(|e| format!("{address}: {e}"))?;
        Ok(Current {
            address,
            client,
            manager,
        })
    }

    /// `ROLE` answers `master`: the sentinels' answer is not stale.
    async fn check_role(&self, manager: &mut ConnectionManager) -> Result<(), String> {
        let role = tokio::time::timeout(
            self.timeout,
            redis::cmd("ROLE").query_async::<Vec<Value>>(manager),
        )
        .await
        .map_err(|_| "no answer to ROLE in time".to_owned())?
        .map_err(|e| describe(&e))?;
        let first = role
            .into_iter()
            .next()
            .and_then(|v| redis::from_redis_value::<String>(v).ok());
        match first.as_deref() {
            Some("master") => Ok(()),
            Some(other) => Err(format!("the node is a {other}, not the primary (yet)")),
            None => Err("unexpected answer to ROLE".to_owned()),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn config(nodes: &[&str]) -> SentinelConfig {
        SentinelConfig {
            master: "m".into(),
            nodes: nodes
                .iter()
                .map(|n| crate::config::Secret::new(*n))
                .collect(),
            username: Some("app".into()),
            password: Some(crate::config::Secret::new("hunter2")),
            tls: false,
            db: 3,
        }
    }

    #[test]
    fn sentinels_are_asked_from_the_last_that_answered() {
        let finder = Finder::new(
            &config(&["redis://:pw@a:26379", "redis://b:26379", "redis://c:26379"]),
            Duration::from_secs(1),
        )
        .expect("valid URLs");
        let order = |f: &Finder| f.in_order().map(|s| s.address.clone()).collect::<Vec<_>>();
        assert_eq!(order(&finder), ["a:26379", "b:26379", "c:26379"]);
        finder.preferred.store(2, Ordering::Relaxed);
        assert_eq!(order(&finder), ["c:26379", "a:26379", "b:26379"]);
        // The data nodes' login and database come from the config, not the sentinels' URLs.
        let settings = finder.data.redis_settings();
        assert_eq!(
            (settings.username(), settings.password(), settings.db()),
            (Some("app"), Some("hunter2"), 3)
        );
    }

    #[tokio::test]
    async fn no_sentinel_answering_is_an_error_naming_addresses_only() {
        // Ports nothing listens on (bound, then released).
        let ports: Vec<u16> = (0..2)
            .map(|_| {
                std::net::TcpListener::bind("127.0.0.1:0")
                    .and_then(|l| l.local_addr())
                    .map(|a| a.port())
                    .unwrap_or(1)
            })
            .collect();
        let nodes: Vec<String> = ports
            .iter()
            .map(|p| format!("redis://:hunter2@127.0.0.1:{p}"))
            .collect();
        let nodes: Vec<&str> = nodes.iter().map(String::as_str).collect();
        let started = Instant::now();
        let error = Primary::connect(&config(&nodes), Duration::from_millis(500))
            .await
            .err()
            .unwrap_or_default();
        assert!(started.elapsed() < Duration::from_secs(3), "bounded");
        assert!(
            error.starts_with("no sentinel named the primary of `m`"),
            "{error}"
        );
        assert!(
            error.contains(&format!("127.0.0.1:{}", ports[0])),
            "{error}"
        );
        assert!(!error.contains("hunter2"), "{error}");
    }
}
