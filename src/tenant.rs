//! `Tenant`: one endpoint's runtime — its upstreams, its live sessions on this replica, and
//! the naming rules that join upstream names to tool names.

use std::sync::Arc;

use bytes::Bytes;
use dashmap::DashMap;

use crate::auth::Authenticator;
use crate::config::{Limits, PrefixMode, TenantConfig};
use crate::policy::ToolPolicies;
use crate::router::CursorKey;
use crate::session::{LiveSession, SessionId};
use crate::upstream::{Ending, Naming, Upstream};

/// The live sessions of a tenant on this replica.
#[derive(Default)]
pub struct SessionDirectory {
    sessions: DashMap<SessionId, Arc<LiveSession>>,
}

impl SessionDirectory {
    pub fn get(&self, id: &SessionId) -> Option<Arc<LiveSession>> {
        self.sessions.get(id).map(|s| s.clone())
    }

    pub fn insert(&self, session: Arc<LiveSession>) {
        self.sessions.insert(session.key.id.clone(), session);
    }

    /// Inserts `session` unless one with its id is there already; returns the one kept.
    pub fn insert_or_get(&self, session: Arc<LiveSession>) -> Arc<LiveSession> {
        self.sessions
            .entry(session.key.id.clone())
            .or_insert(session)
            .clone()
    }

    pub fn remove(&self, id: &SessionId) -> Option<Arc<LiveSession>> {
        self.sessions.remove(id).map(|(_, s)| s)
    }

    pub fn len(&self) -> usize {
        self.sessions.len()
    }

    pub fn is_empty(&self) -> bool {
        self.sessions.is_empty()
    }

    /// All sessions (a snapshot).
    pub fn all(&self) -> Vec<Arc<LiveSession>> {
        self.sessions.iter().map(|e| e.value().clone()).collect()
    }

    /// Sends a message to every session's GET stream (list changes of shared upstreams).
    pub fn broadcast(&self, bytes: &Bytes) {
        for s in self.sessions.iter() {
            s.deliver_unsolicited(bytes.clone());
        }
    }
}

pub struct Tenant {
    pub name: Arc<str>,
    pub config: TenantConfig,
    pub upstreams: Box<[Arc<Upstream>]>,
    pub directory: Arc<SessionDirectory>,
    /// Whether names are prefixed with `<upstream><separator>` (from the prefix mode).
    pub prefixed: bool,
    /// Signs the composite cursors of aggregated lists.
    pub cursor_key: CursorKey,
    /// Validates bearer tokens; `None` when the tenant has no `auth`.
    pub authenticator: Option<Authenticator>,
    /// Who may use which tools.
    pub policies: ToolPolicies,
}

impl Tenant {
    /// Builds the tenant and starts its shared upstream processes.
    pub fn start(config: &TenantConfig, limits: &Limits) -> Result<Arc<Tenant>, String> {
        let directory = Arc::new(SessionDirectory::default());
        let prefixed = match config.prefix.mode {
            PrefixMode::Always => true,
            PrefixMode::Never => false,
            PrefixMode::Conditional => config.upstreams.len() > 1,
        };
        let naming = Naming {
            prefixed,
            separator: &config.prefix.separator,
        };
        let upstreams = config
            .upstreams
            .iter()
            .enumerate()
            .map(|(i, u)| {
                Upstream::start(
                    &config.name,
                    u,
                    i,
                    limits,
                    naming,
                    Arc::downgrade(&directory),
                )
                .map_err(|e| format!("tenant {:?}, upstream {:?}: {e}", config.name, u.name))
            })
            .collect::<Result<Vec<_>, _>>()?;
        Ok(Arc::new(Tenant {
            name: config.name.as_str().into(),
            config: config.clone(),
            upstreams: upstreams.into(),
            directory,
            prefixed,
            cursor_key: CursorKey::random(),
            authenticator: config
                .auth
                .as_ref()
                .map(|a| Authenticator::new(a, auth_http_client())),
            policies: ToolPolicies::new(&config.tool_policies),
        }))
    }

    /// Whether the tenant is a transparent proxy for a single upstream: no names to rewrite,
    /// so lists, capabilities and unknown methods pass through untouched.
    pub fn is_transparent(&self) -> bool {
        self.upstreams.len() == 1 && !self.prefixed
    }

    pub fn separator(&self) -> &str {
        &self.config.prefix.separator
    }

    /// Splits a public name into its upstream and the upstream's own name.
    pub fn split_name<'n>(&self, public: &'n str) -> Option<(&Arc<Upstream>, &'n str)> {
        if !self.prefixed {
            return match &*self.upstreams {
                [only] => Some((only, public)),
                _ => None,
            };
        }
        let (prefix, rest) = public.split_once(self.separator())?;
        let upstream = self.upstreams.iter().find(|u| u.name() == prefix)?;
        Some((upstream, rest))
    }

    /// Closes every live session (`ending` says whether they end or live on in the shared
    /// store) and stops shared processes.
    pub async fn shutdown(&self, ending: Ending) {
        let sessions = self.directory.all();
        futures_util::future::join_all(sessions.iter().map(|s| s.close_as(ending))).await;
        futures_util::future::join_all(self.upstreams.iter().map(|u| u.shutdown())).await;
    }
}

/// The HTTP client for the issuer's discovery and key-set requests.
fn auth_http_client() -> reqwest::Client {
    reqwest::Client::builder()
        .connect_timeout(std::time::Duration::from_secs(5))
        .build()
        .unwrap_or_else(|_| reqwest::Client::new())
}
