//! `Tenant`: one endpoint's runtime — its upstreams, its live sessions on this replica, and
//! the naming rules that join upstream names to tool names — and its rebuild when a config
//! reload changes it.

use std::sync::Arc;

use crate::auth::Authenticator;
use crate::config::{Limits, PrefixMode, TenantConfig, UpstreamConfig};
use crate::limits::TenantView;
use crate::limits::concurrency::TenantGates;
use crate::policy::ToolPolicies;
use crate::session::SessionDirectory;
use crate::signing::CursorKey;
use crate::upstream::{Ending, Naming, Upstream, UpstreamId};

pub struct Tenant {
    pub name: Arc<str>,
    pub config: TenantConfig,
    pub upstreams: Box<[Arc<Upstream>]>,
    pub directory: Arc<SessionDirectory>,
    /// Whether names are prefixed with `<upstream><separator>` (from the prefix mode).
    pub prefixed: bool,
    /// Signs the composite cursors of aggregated lists (kept across reloads: cursors already
    /// given out stay valid).
    pub cursor_key: Arc<CursorKey>,
    /// Validates bearer tokens; `None` when the tenant has no `auth`.
    pub authenticator: Option<Arc<Authenticator>>,
    /// Who may use which tools.
    pub policies: ToolPolicies,
    /// The tool list version (catalog generation) each upstream named by a policy was last
    /// checked at, so a pattern matching no tool is reported once per start, reload or change.
    pub policy_audits: std::sync::Mutex<std::collections::HashMap<UpstreamId, u64>>,
    /// The upstreams a `limits.concurrency` entry caps, resolved at load (kept across reloads
    /// by upstream name, so calls in flight keep their slots).
    pub gates: TenantGates,
    /// Its request metrics, looked up once per method.
    pub requests: crate::metrics::RequestSeries,
}

impl Tenant {
    /// Builds the tenant and starts its shared upstream processes.
    /// `key` signs its opaque tokens (shared by the replicas).
    pub fn start(
        config: &TenantConfig,
        limits: &Limits,
        key: CursorKey,
    ) -> Result<Arc<Tenant>, String> {
        Ok(Tenant::build(config, limits, Err(key))?.0)
    }

    /// The tenant as `config` now describes it, continuing `self`: the same live sessions,
    /// cursor key and (unless `auth` changed) token validator; every upstream whose config
    /// and naming are unchanged is kept as it is (its processes, upstream sessions and cached
    /// lists), the others are built anew. Returns the new tenant and the upstreams it no
    /// longer has (still running: the caller retires them).
    pub fn rebuild(
        &self,
        config: &TenantConfig,
        limits: &Limits,
    ) -> Result<(Arc<Tenant>, Vec<Arc<Upstream>>), String> {
        Tenant::build(config, limits, Ok(self))
    }

    /// A tenant continuing `previous`, or a new one signing with the key given instead.
    fn build(
        config: &TenantConfig,
        limits: &Limits,
        previous_or_key: Result<&Tenant, CursorKey>,
    ) -> Result<(Arc<Tenant>, Vec<Arc<Upstream>>), String> {
        let (previous, key) = match previous_or_key {
            Ok(p) => (Some(p), None),
            Err(k) => (None, Some(k)),
        };
        let directory = previous.map_or_else(Arc::default, |p| p.directory.clone());
        let prefixed = match config.prefix.mode {
            PrefixMode::Always => true,
            PrefixMode::Never => false,
            PrefixMode::Conditional => config.upstreams.len() > 1,
        };
        let naming = Naming {
            prefixed,
            separator: &config.prefix.separator,
        };
        // An upstream is kept when nothing that shapes it changed: its own config and how the
        // tenant names its items.
        let keep = |u: &UpstreamConfig| {
            let p = previous?;
            if p.prefixed != prefixed || p.config.prefix.separator != config.prefix.separator {
                return None;
            }
            p.upstreams.iter().find(|old| old.config == *u).cloned()
        };
        let mut started: Vec<Arc<Upstream>> = Vec::new();
        let mut upstreams = Vec::with_capacity(config.upstreams.len());
        for u in &config.upstreams {
            if let Some(kept) = keep(u) {
                upstreams.push(kept);
                continue;
            }
            let sessions = Arc::downgrade(&directory);
            match Upstream::start(&config.name, u, limits, naming, sessions) {
                Ok(new) => {
                    started.push(new.clone());
                    upstreams.push(new);
                }
                Err(e) => {
                    // Nothing of a failed build may keep running.
                    if let Ok(rt) = tokio::runtime::Handle::try_current() {
                        rt.spawn(async move {
                            for s in started {
                                s.retire().await;
                            }
                        });
                    }
                    return Err(format!(
                        "tenant {:?}, upstream {:?}: {e}",
                        config.name, u.name
                    ));
                }
            }
        }
        let retired = previous
            .map(|p| {
                p.upstreams
                    .iter()
                    .filter(|old| !upstreams.iter().any(|u| Arc::ptr_eq(u, old)))
                    .cloned()
                    .collect()
            })
            .unwrap_or_default();
        let authenticator = match previous {
            Some(p) if p.config.auth == config.auth => p.authenticator.clone(),
            _ => config
                .auth
                .as_ref()
                .map(|a| Arc::new(Authenticator::new(a, auth_http_client()))),
        };
        let name: Arc<str> = config.name.as_str().into();
        let gates = TenantGates::resolve(
            &name,
            &config.limits.concurrency,
            &upstreams,
            previous.map(|p| &p.gates),
        );
        let tenant = Arc::new(Tenant {
            name,
            config: config.clone(),
            upstreams: upstreams.into(),
            directory,
            prefixed,
            cursor_key: match previous {
                Some(p) => p.cursor_key.clone(),
                None => Arc::new(key.unwrap_or_else(CursorKey::random)),
            },
            authenticator,
            policies: ToolPolicies::new(&config.tool_policies),
            policy_audits: Default::default(),
            gates,
            requests: Default::default(),
        });
        Ok((tenant, retired))
    }

    /// The tenant as the limits read it: name, config and gates.
    pub fn for_limits(&self) -> TenantView<'_> {
        TenantView {
            name: &self.name,
            config: &self.config,
            gates: &self.gates,
        }
    }

    /// Whether the tool list of `upstream` at `generation` still has to be checked against the
    /// policies (and records that it is being checked).
    pub fn claim_policy_audit(&self, upstream: UpstreamId, generation: u64) -> bool {
        let Ok(mut audits) = self.policy_audits.lock() else {
            return false;
        };
        audits.insert(upstream, generation) != Some(generation)
    }

    /// Forgets a claimed check that could not be made, so the next listing tries again.
    pub fn release_policy_audit(&self, upstream: UpstreamId) {
        if let Ok(mut audits) = self.policy_audits.lock() {
            audits.remove(&upstream);
        }
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
        self.directory.legacy_streams.finish_all();
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
