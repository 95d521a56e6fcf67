//! Config hot reload: the routing file is read again when its content changes (polled, which
//! also catches Kubernetes' ConfigMap symlink swaps) or on SIGHUP, validated, and applied to
//! the running gateway (`Gateway::apply`). An invalid file is rejected with every error logged
//! and the running config kept.

use std::net::SocketAddr;
use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::time::Duration;

use crate::config::{self, Config, ConfigErrors};
use crate::gateway::Gateway;
use crate::gateway::status::{ConfigOutcome, ConfigProblem};

/// Looks up `${VAR}` values.
type Lookup = dyn Fn(&str) -> Option<String> + Send + Sync;

/// Where the config comes from, and what the command line overrides in it.
pub struct ConfigSource {
    path: PathBuf,
    lookup: Arc<Lookup>,
    listen: Option<SocketAddr>,
}

/// A digest of the config text a config was built from (change detection).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Digest([u8; 32]);

impl Digest {
    fn of(text: &[u8]) -> Digest {
        let mut out = [0u8; 32];
        out.copy_from_slice(ring::digest::digest(&ring::digest::SHA256, text).as_ref());
        Digest(out)
    }
}

impl ConfigSource {
    /// The file at `path`, with `${VAR}` taken from the process environment.
    pub fn file(path: &Path) -> ConfigSource {
        ConfigSource::with_lookup(path, Arc::new(|name: &str| std::env::var(name).ok()))
    }

    /// The file at `path`, with `${VAR}` taken from `lookup`.
    pub fn with_lookup(path: &Path, lookup: Arc<Lookup>) -> ConfigSource {
        ConfigSource {
            path: path.to_path_buf(),
            lookup,
            listen: None,
        }
    }

    /// Overrides `listen` in every config loaded from here (the `--listen` flag).
    pub fn override_listen(&mut self, addr: SocketAddr) {
        self.listen = Some(addr);
    }

    pub fn path(&self) -> &Path {
        &self.path
    }

    /// Reads and validates the file: the config, and the digest of the text it came from.
    pub fn load(&self) -> Result<(Config, Digest), ConfigErrors> {
        let file = self.path.display().to_string();
        let text = config::read(&self.path)?;
        let lookup = &*self.lookup;
        let mut config = match self.listen {
            Some(addr) => config::parse_listening_on(&text, &file, &|name| lookup(name), addr)?,
            None => config::parse(&text, &file, &|name| lookup(name))?,
        };
        config.source = Some(self.path.clone());
        Ok((config, Digest::of(text.as_bytes())))
    }

    /// The digest of the file as it is now (`None` while it cannot be read, e.g. mid-swap).
    fn current_digest(&self) -> Option<Digest> {
        std::fs::read(&self.path).ok().map(|t| Digest::of(&t))
    }
}

/// What one reload attempt did.
#[derive(Debug, PartialEq, Eq)]
pub enum Outcome {
    Applied,
    Unchanged,
    Rejected,
}

/// Loads the config from `source` and applies it; logs what changed, or every error.
pub async fn reload(gateway: &Gateway, source: &ConfigSource) -> Outcome {
    let file = source.path().display().to_string();
    // Every problem of a rejected file, for the status page.
    let mut problems = Vec::new();
    let outcome = match source.load() {
        Err(errors) => {
            problems = ConfigProblem::all(&errors);
            for e in &errors.errors {
                tracing::error!(target: "switchyard::config", "{e}");
            }
            tracing::error!(
                target: "switchyard::config",
                file = %source.path().display(),
                errors = errors.errors.len(),
                "config reload rejected; the running config stays in effect"
            );
            Outcome::Rejected
        }
        Ok((config, _)) => match gateway.apply(&config).await {
            Err(e) => {
                problems.push(ConfigProblem::whole(&file, &e));
                tracing::error!(target: "switchyard::config", file = %source.path().display(), error = %e, "config reload failed; the running config stays in effect");
                Outcome::Rejected
            }
            Ok(report) => {
                crate::config::log_warnings(&config);
                if !report.needs_restart.is_empty() {
                    tracing::warn!(
                        target: "switchyard::config",
                        settings = ?report.needs_restart,
                        "changed settings take effect only after a restart"
                    );
                }
                if report.is_empty() {
                    tracing::info!(target: "switchyard::config", file = %source.path().display(), "config reloaded: no routing changes");
                    Outcome::Unchanged
                } else {
                    tracing::info!(
                        target: "switchyard::config",
                        file = %source.path().display(),
                        tenants_added = ?report.tenants_added,
                        tenants_removed = ?report.tenants_removed,
                        tenants_changed = ?report.tenants_changed,
                        upstreams_started = ?report.upstreams_started,
                        upstreams_retired = ?report.upstreams_retired,
                        "config reloaded"
                    );
                    Outcome::Applied
                }
            }
        },
    };
    let (label, recorded) = match outcome {
        Outcome::Applied => ("applied", ConfigOutcome::Applied),
        Outcome::Unchanged => ("unchanged", ConfigOutcome::Unchanged),
        Outcome::Rejected => ("rejected", ConfigOutcome::Rejected),
    };
    gateway.record_reload(&file, recorded, problems);
    let metrics = crate::metrics::get();
    metrics.config_reloads.with_label_values(&[label]).inc();
    metrics
        .config_last_reload_successful
        .set(i64::from(outcome != Outcome::Rejected));
    outcome
}

/// Reloads on SIGHUP, and every `poll` when the file's content changed since `loaded` (the
/// text the running config came from), until the gateway shuts down. A rejected file is not
/// tried again until it changes (or SIGHUP).
pub async fn watch(
    gateway: Arc<Gateway>,
    source: ConfigSource,
    loaded: Digest,
    poll: Option<Duration>,
) {
    use tokio::signal::unix::{SignalKind, signal};
    let mut hangup = match signal(SignalKind::hangup()) {
        Ok(s) => Some(s),
        Err(e) => {
            tracing::warn!(error = %e, "cannot listen for SIGHUP; config reload by file change only");
            None
        }
    };
    let mut tick = poll.map(|p| {
        let mut t = tokio::time::interval_at(tokio::time::Instant::now() + p, p);
        t.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
        t
    });
    let mut stopping = gateway.shutdown_signal();
    let mut seen = loaded;
    tracing::info!(
        file = %source.path().display(),
        poll_s = poll.map(|p| p.as_secs_f64()),
        "watching the config for changes (and SIGHUP)"
    );
    loop {
        let forced = tokio::select! {
            _ = stopping.wait_for(|s| *s) => return,
            Some(()) = async { match hangup.as_mut() { Some(h) => h.recv().await, None => std::future::pending().await } } => true,
            _ = async { match tick.as_mut() { Some(t) => { t.tick().await; } None => std::future::pending().await } } => false,
        };
        let Some(now) = source.current_digest() else {
            tracing::warn!(file = %source.path().display(), "config file unreadable; keeping the running config");
            continue;
        };
        if !forced && now == seen {
            continue;
        }
        if forced {
            tracing::info!(target: "switchyard::config", "SIGHUP: reloading the config");
        }
        seen = now;
        reload(&gateway, &source).await;
    }
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used)]
    use super::*;

    /// `--listen` is applied before validation: rules that depend on the listener see the
    /// address served, not the one in the file.
    #[test]
    fn the_listen_override_is_validated() {
        let dir = std::env::temp_dir().join(format!("switchyard-reload-{}", std::process::id()));
        std::fs::create_dir_all(&dir).unwrap();
        let path = dir.join("gw.yaml");
        std::fs::write(
            &path,
            "listen: 127.0.0.1:8080\ntenants:\n  - name: acme\n    auth: {issuer: \"https://i\"}\n    upstreams: [{name: a, stdio: {command: x}}]\n",
        )
        .unwrap();
        let lookup: Arc<Lookup> = Arc::new(|_: &str| None);
        let mut source = ConfigSource::with_lookup(&path, lookup);
        assert!(source.load().is_ok(), "valid on loopback");
        source.override_listen("0.0.0.0:9000".parse().unwrap());
        let errors = source.load().unwrap_err().to_string();
        let _ = std::fs::remove_dir_all(&dir);
        assert!(
            errors.contains(":4:11: tenants[0].auth: a tenant with `auth` on a listener that is not loopback (0.0.0.0:9000)"),
            "{errors}"
        );
    }
}
