//! File descriptors and the connection cap: at start the soft `RLIMIT_NOFILE` is raised to
//! the hard limit, and the default `limits.max_connections` is derived from it, keeping a
//! reserve for everything else the process opens, so that a connection flood is refused by
//! the cap before `accept` can fail with `EMFILE` (which would also fail health probes,
//! upstream restarts and config reloads).
//!
//! The reserve: [`BASE_RESERVE`] (standard streams, listeners, the runtime's epoll and event
//! descriptors, Redis and bus connections, the trace exporter, config and certificate reads,
//! the admin listener's connections, refused connections being closed) + [`PER_STDIO_PROCESS`]
//! per configured stdio process + [`PER_HTTP_UPSTREAM`] per HTTP or SSE upstream. The
//! default cap is half of what the limit leaves above the reserve (the other half for what
//! grows with sessions rather than with the config: per-session stdio children, SSE upstream
//! streams, upstream connections under load), at most [`DEFAULT_CAP_CEILING`].

use std::sync::OnceLock;

use nix::sys::resource::{RLIM_INFINITY, Resource, getrlimit, setrlimit};

use crate::config::{StdioSharing, TenantConfig, UpstreamTransport};

/// Descriptors kept whatever the config says (see the module docs).
pub const BASE_RESERVE: u64 = 256;
/// A stdio child holds 4 descriptors in the gateway (stdin, stdout, stderr pipes and a
/// pidfd); doubled because a config reload starts the new process before the old one stops.
pub const PER_STDIO_PROCESS: u64 = 8;
/// A typical keep-alive pool towards one HTTP upstream.
pub const PER_HTTP_UPSTREAM: u64 = 32;
/// The derived default never exceeds this: beyond it memory, not descriptors, is what runs
/// out first (set `max_connections` explicitly on a host sized for more).
pub const DEFAULT_CAP_CEILING: usize = 16_384;
/// The derived default never goes below this, even when the limit barely covers the
/// reserve (a warning says so).
const DEFAULT_CAP_FLOOR: usize = 16;
/// Where a hard limit of "unlimited" is taken to be (Linux's default `fs.nr_open`).
const UNLIMITED_TARGET: u64 = 1 << 20;

/// The process's `RLIMIT_NOFILE`.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct FdLimit {
    /// The limit in effect (what `accept` runs into).
    pub soft: u64,
    pub hard: u64,
}

/// Raises the soft limit to the hard limit (once per process; later calls return the first
/// result) and logs both figures. On failure the limit in effect is kept, with a warning.
pub fn raise() -> FdLimit {
    static RAISED: OnceLock<FdLimit> = OnceLock::new();
    *RAISED.get_or_init(|| {
        let Ok((before, hard)) = getrlimit(Resource::RLIMIT_NOFILE) else {
            tracing::warn!("cannot read RLIMIT_NOFILE; assuming 1024 file descriptors");
            return FdLimit {
                soft: 1024,
                hard: 1024,
            };
        };
        let target = target(hard);
        let soft = if target > before {
            match setrlimit(Resource::RLIMIT_NOFILE, target, hard) {
                Ok(()) => target,
                Err(e) => {
                    tracing::warn!(soft = before, hard, error = %e, "cannot raise the file descriptor limit");
                    before
                }
            }
        } else {
            before
        };
        tracing::info!(before, soft, hard, "file descriptor limit (RLIMIT_NOFILE)");
        FdLimit { soft, hard }
    })
}

/// What [`raise`] would reach on this host, changing nothing (for `switchyard check`).
pub fn attainable() -> Option<FdLimit> {
    let (soft, hard) = getrlimit(Resource::RLIMIT_NOFILE).ok()?;
    Some(FdLimit {
        soft: soft.max(target(hard)),
        hard,
    })
}

fn target(hard: u64) -> u64 {
    if hard == RLIM_INFINITY {
        UNLIMITED_TARGET
    } else {
        hard
    }
}

/// Descriptors kept out of the connection cap for `tenants` (see the module docs).
pub fn reserve<'a>(tenants: impl IntoIterator<Item = &'a TenantConfig>) -> u64 {
    let mut reserve = BASE_RESERVE;
    for upstream in tenants.into_iter().flat_map(|t| &t.upstreams) {
        reserve += match &upstream.transport {
            UpstreamTransport::Stdio(s) => match s.sharing {
                StdioSharing::Shared => PER_STDIO_PROCESS * s.pool_size as u64,
                // One per session: counted once here, the rest is in the other half.
                StdioSharing::PerSession => PER_STDIO_PROCESS,
            },
            UpstreamTransport::Http(_) | UpstreamTransport::Sse(_) => PER_HTTP_UPSTREAM,
        };
    }
    reserve
}

/// The connection cap for a process limited to `limit` descriptors with `reserve` kept: the
/// configured one if it fits (an error naming the figures if not), else the derived default.
pub fn connection_cap(
    configured: Option<usize>,
    limit: u64,
    reserve: u64,
) -> Result<usize, String> {
    if let Some(cap) = configured {
        let needed = cap as u64 + reserve;
        if needed > limit {
            return Err(format!(
                "limits.max_connections is {cap}: with {reserve} file descriptors kept for upstreams, Redis, reloads and the admin listener it needs {needed}, above this process's limit of {limit} (RLIMIT_NOFILE); raise the limit (ulimit -n, systemd LimitNOFILE, the container runtime's nofile) or lower max_connections"
            ));
        }
        return Ok(cap);
    }
    let half = usize::try_from(limit.saturating_sub(reserve) / 2).unwrap_or(usize::MAX);
    if half < DEFAULT_CAP_FLOOR {
        tracing::warn!(
            limit,
            reserve,
            max_connections = DEFAULT_CAP_FLOOR,
            "the file descriptor limit barely covers the reserve; raise RLIMIT_NOFILE"
        );
    }
    Ok(half.clamp(DEFAULT_CAP_FLOOR, DEFAULT_CAP_CEILING))
}

/// For `switchyard check`: a warning when this host's descriptor limit could not serve the
/// configured `max_connections` (`run` would refuse to start). Only a warning, because a
/// config is often checked on another machine (CI) than the one that runs it.
pub fn check(configured: Option<usize>, tenants: &[TenantConfig]) -> Option<String> {
    let cap = configured?;
    let limit = attainable()?;
    connection_cap(Some(cap), limit.soft, reserve(tenants))
        .err()
        .map(|e| format!("on this host, `run` would refuse to start: {e}"))
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used)]
    use super::*;

    #[test]
    fn the_default_cap_is_half_of_what_the_reserve_leaves_within_bounds() {
        assert_eq!(connection_cap(None, 20_000, 256), Ok(9_872));
        assert_eq!(connection_cap(None, 1 << 20, 256), Ok(DEFAULT_CAP_CEILING));
        assert_eq!(connection_cap(None, 280, 256), Ok(DEFAULT_CAP_FLOOR));
        assert_eq!(connection_cap(None, 0, 256), Ok(DEFAULT_CAP_FLOOR));
    }

    #[test]
    fn an_explicit_cap_must_fit_with_the_reserve() {
        assert_eq!(connection_cap(Some(744), 1000, 256), Ok(744));
        let e = connection_cap(Some(745), 1000, 256).unwrap_err();
        assert!(
            e.starts_with("limits.max_connections is 745: with 256 file descriptors kept"),
            "{e}"
        );
        assert!(
            e.contains("it needs 1001, above this process's limit of 1000"),
            "{e}"
        );
    }

    #[test]
    fn the_reserve_counts_stdio_processes_and_http_upstreams() {
        let config = crate::config::parse(
            "tenants:\n  - name: a\n    upstreams:\n      - {name: s, stdio: {command: x, pool_size: 3}}\n      - {name: p, stdio: {command: x, sharing: per-session}}\n      - {name: h, http: {url: \"http://127.0.0.1:9/mcp\"}}\n      - {name: e, sse: {url: \"http://127.0.0.1:9/sse\"}}\n",
            "t.yaml",
            &|_| None,
        )
        .unwrap();
        assert_eq!(
            reserve(&config.tenants),
            BASE_RESERVE + 3 * PER_STDIO_PROCESS + PER_STDIO_PROCESS + 2 * PER_HTTP_UPSTREAM
        );
    }

    #[test]
    fn check_warns_about_a_cap_this_host_cannot_serve_and_only_then() {
        let limit = attainable().unwrap().soft;
        let too_many = usize::try_from(limit).unwrap();
        let warning = check(Some(too_many), &[]).unwrap();
        assert!(
            warning.starts_with(
                "on this host, `run` would refuse to start: limits.max_connections is"
            ),
            "{warning}"
        );
        assert_eq!(check(Some(16), &[]), None);
        assert_eq!(check(None, &[]), None, "a derived cap always fits");
    }

    #[test]
    fn raising_reaches_the_hard_limit_and_is_what_check_expects() {
        let raised = raise();
        assert_eq!(raised.soft, target(raised.hard).max(raised.soft));
        let (soft, _) = getrlimit(Resource::RLIMIT_NOFILE).unwrap();
        assert_eq!(soft, raised.soft);
        assert_eq!(attainable().unwrap().soft, raised.soft);
    }
}
