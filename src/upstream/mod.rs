//! Upstream MCP servers: the configured `Upstream`s of a tenant, the `Connection`s the gateway
//! holds to them (stdio child processes, Streamable HTTP sessions and 2024-11-05 HTTP+SSE
//! sessions), and the per-request `ForwardStream` that carries an upstream's answer back with
//! timeouts.

mod catalog;
mod child_watch;
mod connection;
mod credentials;
mod h1;
mod handshake;
mod head_fields;
mod header_lines;
mod health;
mod http;
mod http_client;
mod inbound;
mod legacy_sse;
mod lines;
mod link;
mod meta;
mod owner;
mod pending;
mod restore;
mod retry;
mod server_requests;
mod sink;
pub mod sse;
mod stdin;
mod stdio;
mod stream;
mod subscribe;
mod table;

use std::sync::{Arc, Weak};
use std::time::Duration;

use bytes::Bytes;

pub use catalog::{Catalog, Page, PageKey};
pub use connection::{Connection, InternalReply, MAX_RELAYS, RelaySlot};
pub use handshake::{InitParams, UpstreamServer, error_message};
pub use health::{Failure, Handshake, Health, HealthReport, State};
pub use link::{Ending, Link};
pub use owner::{Broadcast, ClientSession, Owner};
pub use retry::Answer;
pub use server_requests::{ProgressMapping, ServerRequestRoute, ServerRequests, answer, refuse};
pub use stdio::LinkState;
pub use stream::{FinalEdit, ForwardStream, MessageEdit, StreamItem, Verdict};

use crate::config::{Limits, StdioConfig, StdioSharing, UpstreamConfig, UpstreamTransport};
use crate::error::GatewayError;
use credentials::Credentials;
use http::HttpLink;
use http_client::OriginClient;
use legacy_sse::SseLink;
use link::start_stdio;
use stdio::StdioLink;

/// What every connection to one upstream shares: its name and bounds.
#[derive(Debug)]
pub struct UpstreamInfo {
    pub name: Arc<str>,
    /// The tenant it belongs to (metrics labels).
    pub tenant: Arc<str>,
    /// This upstream's identity for the life of the process (the session's link slot): a new
    /// one whenever a config reload builds the upstream anew.
    pub id: UpstreamId,
    pub request_timeout: Duration,
    pub max_request_timeout: Duration,
    pub init_timeout: Duration,
    pub max_message: usize,
    /// `<name><separator>` when the tenant prefixes names.
    pub name_prefix: Option<Box<str>>,
    /// `<name>+` when the tenant namespaces resource URIs.
    pub uri_prefix: Option<Box<str>>,
    /// Cached list pages, shared by every connection to this upstream.
    pub catalog: Catalog,
    /// Whether it answered the `server/discover` probe (`handshake::connect`).
    pub era: handshake::Era,
    /// The last handshake and the last failure of its connections (the status page).
    pub health: Health,
    /// What the upstream last said in `initialize`, shared by every connection it said the
    /// same to (a per-session connection would otherwise hold a copy: ~2 KB each).
    last_server: std::sync::Mutex<Option<Arc<UpstreamServer>>>,
    /// Its call metrics, looked up once.
    pub series: crate::metrics::UpstreamSeries,
}

impl UpstreamInfo {
    /// `server`, or the equal one another connection to this upstream already holds.
    pub(crate) fn shared_server(&self, server: UpstreamServer) -> Arc<UpstreamServer> {
        let Ok(mut last) = self.last_server.lock() else {
            return Arc::new(server);
        };
        match &*last {
            Some(known) if **known == server => known.clone(),
            _ => {
                let server = Arc::new(server);
                *last = Some(server.clone());
                server
            }
        }
    }
}

/// The identity of one built `Upstream`: unique in the process, never reused.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub struct UpstreamId(u64);

impl UpstreamId {
    fn next() -> UpstreamId {
        static NEXT: std::sync::atomic::AtomicU64 = std::sync::atomic::AtomicU64::new(1);
        UpstreamId(NEXT.fetch_add(1, std::sync::atomic::Ordering::Relaxed))
    }

    /// A fresh identity for a test that needs one without building an upstream.
    #[cfg(test)]
    pub(crate) fn fresh() -> UpstreamId {
        UpstreamId::next()
    }
}

/// How a tenant joins upstream names to the identifiers of their items.
#[derive(Debug, Clone, Copy)]
pub struct Naming<'a> {
    pub prefixed: bool,
    pub separator: &'a str,
}

/// One event for a forwarded request, already in the client's terms (ids, tokens).
#[derive(Debug)]
pub enum StreamEvent {
    /// A notification related to the request.
    Message(Bytes),
    /// A request to the client (server-to-client) related to the request.
    Request(Bytes),
    /// A progress notification (restarts the idle timeout).
    Progress(Bytes),
    /// The response, and what it says.
    Response(Bytes, Verdict),
    /// The link failed before the response.
    Failed(GatewayError),
}

/// A configured upstream of a tenant.
pub struct Upstream {
    pub info: Arc<UpstreamInfo>,
    pub config: UpstreamConfig,
    kind: UpstreamKind,
    /// A config reload removed or replaced it: no new connections.
    retired: std::sync::atomic::AtomicBool,
}

enum UpstreamKind {
    Stdio {
        /// The processes of a `shared` upstream (`pool_size` of them; each session is pinned
        /// to one by its id); empty for `per-session`.
        pool: Box<[Arc<Connection>]>,
        /// How to start a process, shared by all of them.
        config: Arc<StdioConfig>,
    },
    Http {
        client: Arc<OriginClient>,
        credentials: Arc<Credentials>,
    },
    /// HTTP with SSE: one upstream session (an open stream) per client session.
    Sse {
        client: Arc<OriginClient>,
        credentials: Arc<Credentials>,
        /// The SSE endpoint (one copy for all of the upstream's sessions).
        url: Arc<url::Url>,
    },
}

impl Upstream {
    /// Builds the upstream; a shared stdio upstream starts its process right away.
    pub fn start(
        tenant: &str,
        config: &UpstreamConfig,
        limits: &Limits,
        naming: Naming<'_>,
        directory: Weak<dyn Broadcast>,
    ) -> Result<Arc<Upstream>, String> {
        let info = Arc::new(UpstreamInfo {
            name: config.name.as_str().into(),
            tenant: tenant.into(),
            id: UpstreamId::next(),
            request_timeout: config.request_timeout,
            max_request_timeout: config.max_request_timeout,
            init_timeout: config.init_timeout,
            max_message: limits.max_upstream_message_bytes,
            name_prefix: naming
                .prefixed
                .then(|| format!("{}{}", config.name, naming.separator).into()),
            uri_prefix: naming.prefixed.then(|| format!("{}+", config.name).into()),
            catalog: Catalog::default(),
            era: handshake::Era::pinned(config.era),
            health: Health::default(),
            last_server: std::sync::Mutex::default(),
            series: Default::default(),
        });
        let kind = match &config.transport {
            UpstreamTransport::Stdio(s) => {
                let config = Arc::new(s.clone());
                let pool = match s.sharing {
                    StdioSharing::Shared => (0..s.pool_size.max(1))
                        .map(|_| {
                            let conn = Arc::new(Connection::new(
                                info.clone(),
                                InitParams::gateway_default(),
                                Owner::Shared(directory.clone()),
                                Link::Stdio(Box::new(StdioLink::new(config.clone()))),
                            ));
                            start_stdio(&conn);
                            conn
                        })
                        .collect(),
                    StdioSharing::PerSession => Box::default(),
                };
                UpstreamKind::Stdio { pool, config }
            }
            UpstreamTransport::Http(h) => {
                let url = url::Url::parse(&h.url).map_err(|e| format!("invalid URL: {e}"))?;
                let client = Arc::new(OriginClient::new(&url, config.init_timeout)?);
                let credentials = Arc::new(Credentials::new(h, config.init_timeout, &config.name)?);
                UpstreamKind::Http {
                    client,
                    credentials,
                }
            }
            UpstreamTransport::Sse(h) => {
                let url = url::Url::parse(&h.url).map_err(|e| format!("invalid URL: {e}"))?;
                let client = Arc::new(OriginClient::new(&url, config.init_timeout)?);
                let credentials = Arc::new(Credentials::new(h, config.init_timeout, &config.name)?);
                UpstreamKind::Sse {
                    client,
                    credentials,
                    url: Arc::new(url),
                }
            }
        };
        Ok(Arc::new(Upstream {
            info,
            config: config.clone(),
            kind,
            retired: std::sync::atomic::AtomicBool::new(false),
        }))
    }

    pub fn name(&self) -> &str {
        &self.info.name
    }

    /// The name clients see for an item named `name` by this upstream.
    pub fn public_name(&self, name: &str) -> String {
        match &self.info.name_prefix {
            Some(p) => format!("{p}{name}"),
            None => name.to_owned(),
        }
    }

    /// The URI clients see for a resource (or template) `uri` of this upstream.
    pub fn public_uri(&self, uri: &str) -> String {
        match &self.info.uri_prefix {
            Some(p) => format!("{p}{uri}"),
            None => uri.to_owned(),
        }
    }

    /// Whether sessions share this upstream's connections (a `shared` stdio pool).
    pub fn is_shared(&self) -> bool {
        !self.pool().is_empty()
    }

    /// Whether each session gets a child process of its own (`sharing: per-session`).
    pub fn spawns_per_session(&self) -> bool {
        matches!(&self.kind, UpstreamKind::Stdio { pool, .. } if pool.is_empty())
    }

    /// The shared processes (empty unless `sharing: shared`).
    pub fn pool(&self) -> &[Arc<Connection>] {
        match &self.kind {
            UpstreamKind::Stdio { pool, .. } => pool,
            UpstreamKind::Http { .. } | UpstreamKind::Sse { .. } => &[],
        }
    }

    /// The pooled connection a session is pinned to: chosen by its id, so every replica
    /// agrees and one session's requests keep one upstream process.
    fn pooled_for(&self, session: &dyn ClientSession) -> Option<&Arc<Connection>> {
        self.pooled_by(session.pin())
    }

    /// The pooled connection of a session whose id spreads to `spread` (`SessionId::spread`).
    fn pooled_by(&self, spread: usize) -> Option<&Arc<Connection>> {
        let pool = self.pool();
        if pool.is_empty() {
            return None;
        }
        Some(&pool[spread % pool.len()])
    }

    /// Whether a session whose id spreads to `spread` would be pinned to a shared process
    /// whose answers are read on another connection worker than `here` (each of its answers
    /// would then wake that other thread). `false` when there is no pool, or either side is
    /// not a worker.
    pub fn answers_elsewhere(&self, spread: usize, here: usize) -> bool {
        self.pooled_by(spread)
            .map(|c| c.home())
            .is_some_and(|home| here != 0 && home != 0 && home != here)
    }

    /// A ready connection for `session`: the shared one, or a new dedicated one (a child
    /// process, an upstream HTTP session, an SSE stream) initialized with the client's
    /// capabilities.
    /// The boolean tells whether the session owns it (and must close it).
    pub async fn connect(
        &self,
        session: &Arc<impl ClientSession + 'static>,
    ) -> Result<(Arc<Connection>, bool), GatewayError> {
        let params = session.init_params();
        if self.retired.load(std::sync::atomic::Ordering::Acquire) {
            return Err(GatewayError::UpstreamUnavailable {
                upstream: self.info.name.to_string(),
                reason: "removed from the routing config".into(),
            });
        }
        let owner = Owner::Session(Arc::downgrade(session) as Weak<dyn ClientSession>);
        match &self.kind {
            UpstreamKind::Stdio { pool, .. } if !pool.is_empty() => {
                let conn = self.pooled_for(&**session).ok_or(GatewayError::Internal)?;
                conn.ready(self.info.init_timeout).await?;
                Ok((conn.clone(), false))
            }
            UpstreamKind::Stdio { config: cfg, .. } => {
                let conn = Arc::new(Connection::new(
                    self.info.clone(),
                    params,
                    owner,
                    Link::Stdio(Box::new(StdioLink::new(cfg.clone()))),
                ));
                start_stdio(&conn);
                if let Err(e) = conn.ready(self.info.init_timeout).await {
                    conn.close().await;
                    return Err(e);
                }
                Ok((conn, true))
            }
            UpstreamKind::Http {
                client,
                credentials,
            } => {
                let conn = Arc::new(Connection::new(
                    self.info.clone(),
                    params,
                    owner,
                    Link::Http(Box::new(HttpLink::new(
                        client.clone(),
                        credentials.clone(),
                        self.info.max_request_timeout,
                        self.info.init_timeout,
                        self.info.max_message,
                    ))),
                ));
                let resumed = session
                    .take_resumable(&self.info.name)
                    .is_some_and(|r| HttpLink::resume(&conn, &r).is_ok());
                if !resumed {
                    if let Err(e) = HttpLink::open(&conn).await {
                        conn.close().await;
                        return Err(e);
                    }
                    session.mark_dirty();
                }
                Ok((conn, true))
            }
            UpstreamKind::Sse {
                client,
                credentials,
                url,
            } => {
                let conn = Arc::new(Connection::new(
                    self.info.clone(),
                    params,
                    owner,
                    Link::Sse(Box::new(SseLink::new(
                        client.clone(),
                        credentials.clone(),
                        url.clone(),
                        self.info.init_timeout,
                        self.info.max_message,
                    ))),
                ));
                if let Err(e) = SseLink::open(&conn).await {
                    conn.close().await;
                    return Err(e);
                }
                Ok((conn, true))
            }
        }
    }

    /// Where the upstream stands as far as this replica knows: a shared pool by its
    /// processes, anything else by the outcome of its last connection attempt.
    pub fn state(&self) -> State {
        if self.retired.load(std::sync::atomic::Ordering::Acquire) {
            return State::Stopped;
        }
        let pool = self.pool();
        if pool.is_empty() {
            let health = self.info.health.report();
            return if health.failing() {
                State::Down
            } else if health.connected.is_some() {
                State::Up
            } else {
                State::Idle
            };
        }
        State::of_pool(pool.iter().map(|c| (c.link_state(), c.restarts())))
    }

    /// The transport, as the config names it: `stdio`, `http` or `sse`.
    pub fn transport(&self) -> &'static str {
        match &self.kind {
            UpstreamKind::Stdio { .. } => "stdio",
            UpstreamKind::Http { .. } => "http",
            UpstreamKind::Sse { .. } => "sse",
        }
    }

    /// Takes the upstream out of service after a config reload dropped it: no new connections,
    /// shared processes stopped (requests still running on them fail).
    pub async fn retire(&self) {
        self.mark_retired();
        self.shutdown().await;
    }

    /// Refuses new connections from now on (the first step of [`Upstream::retire`]).
    pub fn mark_retired(&self) {
        self.retired
            .store(true, std::sync::atomic::Ordering::Release);
    }

    /// Stops the shared processes, if any.
    pub async fn shutdown(&self) {
        futures_util::future::join_all(self.pool().iter().map(|c| c.close())).await;
    }
}
