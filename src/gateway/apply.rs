//! A config reload applied to the running gateway (`Gateway::apply`): tenants added, rebuilt
//! or removed, retired upstreams let go of by live sessions and stopped, clients told their
//! lists changed, and what only a restart applies reported.

use std::sync::Arc;

use bytes::Bytes;

use super::{Gateway, TenantTable};
use crate::config::Config;
use crate::tenant::Tenant;
use crate::upstream::{Ending, UpstreamId};

/// What a config reload changed.
#[derive(Debug, Default)]
pub struct ReloadReport {
    pub tenants_added: Vec<String>,
    pub tenants_removed: Vec<String>,
    /// `tenant/upstream` of every upstream built anew (added, or its config changed).
    pub upstreams_started: Vec<String>,
    /// `tenant/upstream` of every upstream taken out of service (removed, or replaced).
    pub upstreams_retired: Vec<String>,
    /// Tenants whose settings other than upstreams changed (policies, auth, hosts, ...).
    pub tenants_changed: Vec<String>,
    /// Settings that differ from the running ones but take effect only on a restart.
    pub needs_restart: Vec<&'static str>,
}

impl ReloadReport {
    pub fn is_empty(&self) -> bool {
        self.tenants_added.is_empty()
            && self.tenants_removed.is_empty()
            && self.upstreams_started.is_empty()
            && self.upstreams_retired.is_empty()
            && self.tenants_changed.is_empty()
    }
}

impl Gateway {
    /// Applies a new, validated config to the running gateway without dropping sessions:
    /// tenants are added, rebuilt or removed; within a tenant, unchanged upstreams keep running
    /// as they are, new ones start, and removed or changed ones are retired (live sessions let
    /// go of them, and clients are told their lists changed). Settings that need a restart
    /// (listeners, TLS files, limits, the session store) are reported, not applied. On error
    /// nothing changes.
    pub async fn apply(&self, config: &Config) -> Result<ReloadReport, String> {
        let mut applied = self.applied.lock().await;
        let mut report = ReloadReport {
            needs_restart: restart_only_changes(&applied, config),
            ..ReloadReport::default()
        };
        let old = self.tenants.load_full();
        let mut next = Vec::with_capacity(config.tenants.len());
        let mut rebuilt = Vec::new();
        let mut fresh: Vec<Arc<Tenant>> = Vec::new();
        for tc in &config.tenants {
            let built = {
                // New shared stdio processes are spread over the connection workers.
                let _spreading = self
                    .workers
                    .as_ref()
                    .map(crate::workers::Workers::spreading);
                match old.by_name(&tc.name) {
                    Some(t) if t.config == *tc => Ok(t.clone()),
                    Some(t) => t.rebuild(tc, &self.limits).map(|(new, retired)| {
                        rebuilt.push((t.clone(), new.clone(), retired));
                        new
                    }),
                    None => Tenant::start(tc, &self.limits, self.bus.tenant_key(&tc.name))
                        .inspect(|t| fresh.push(t.clone())),
                }
            };
            match built {
                Ok(t) => next.push(t),
                Err(e) => {
                    // Undo: whatever this attempt started stops again.
                    for t in fresh {
                        t.shutdown(Ending::End).await;
                    }
                    for (old_t, new_t, _) in rebuilt {
                        for u in new_t.upstreams.iter() {
                            if !old_t.upstreams.iter().any(|o| Arc::ptr_eq(o, u)) {
                                u.retire().await;
                            }
                        }
                    }
                    return Err(e);
                }
            }
        }
        let removed: Vec<Arc<Tenant>> = old
            .iter()
            .filter(|t| !config.tenants.iter().any(|tc| *tc.name == *t.name))
            .cloned()
            .collect();
        self.tenants.store(Arc::new(TenantTable::new(next)));

        report.tenants_added = fresh.iter().map(|t| t.name.to_string()).collect();
        for (old_t, new_t, retired) in rebuilt {
            let qualified =
                |u: &Arc<crate::upstream::Upstream>| format!("{}/{}", new_t.name, u.name());
            let started: Vec<String> = new_t
                .upstreams
                .iter()
                .filter(|u| !old_t.upstreams.iter().any(|o| Arc::ptr_eq(o, u)))
                .map(qualified)
                .collect();
            let lists_changed = !started.is_empty()
                || !retired.is_empty()
                || old_t.config.tool_policies != new_t.config.tool_policies;
            if started.is_empty() && retired.is_empty() {
                report.tenants_changed.push(new_t.name.to_string());
            }
            report.upstreams_started.extend(started);
            report
                .upstreams_retired
                .extend(retired.iter().map(qualified));
            let keep: Vec<UpstreamId> = new_t.upstreams.iter().map(|u| u.info.id).collect();
            // Sessions let go of retired upstreams first, so none is left on a stopped process.
            for u in &retired {
                u.mark_retired();
            }
            let sessions = new_t.directory.all();
            futures_util::future::join_all(sessions.iter().map(|s| s.drop_links_except(&keep)))
                .await;
            futures_util::future::join_all(retired.iter().map(|u| u.retire())).await;
            if lists_changed {
                for method in LIST_CHANGED {
                    new_t
                        .directory
                        .broadcast(&Bytes::from(crate::jsonrpc::notification(method, None)));
                }
            }
        }
        for t in &removed {
            report.tenants_removed.push(t.name.to_string());
            crate::metrics::get().forget_tenant(&t.name);
            // Its endpoint is gone: its sessions end here (records expire by their TTL).
            t.shutdown(Ending::End).await;
        }
        *applied = config.clone();
        Ok(report)
    }
}

/// The notifications that tell clients to fetch their lists again after a reload.
const LIST_CHANGED: [&str; 3] = [
    "notifications/tools/list_changed",
    "notifications/prompts/list_changed",
    "notifications/resources/list_changed",
];

/// The settings that differ between `running` and `next` but apply only at startup.
fn restart_only_changes(running: &Config, next: &Config) -> Vec<&'static str> {
    [
        ("listen", running.listen != next.listen),
        ("admin_listen", running.admin_listen != next.admin_listen),
        ("admin_token", running.admin_token != next.admin_token),
        ("tls", running.tls != next.tls),
        ("limits", running.limits != next.limits),
        ("sessions", running.sessions != next.sessions),
        ("telemetry", running.telemetry != next.telemetry),
        (
            "trusted_proxies",
            running.trusted_proxies != next.trusted_proxies,
        ),
        (
            "connection_workers",
            running.connection_workers != next.connection_workers,
        ),
    ]
    .into_iter()
    .filter_map(|(name, changed)| changed.then_some(name))
    .collect()
}
