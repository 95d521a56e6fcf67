//! Raw → validated upstreams of one tenant: names (unique, splittable), exactly one transport
//! (`stdio`, `http` or `sse`), stdio command/env/cwd/restart, timeouts (HTTP settings:
//! `validate_http`).

use std::collections::BTreeMap;
use std::path::PathBuf;
use std::time::Duration;

use super::raw::{Field, Pairs, RawEra, RawRestart, RawSharing, RawStdio, RawUpstream};
use super::rules;
use super::spanned::{Loc, Sp};
use super::subst::is_var_name;
use super::validate::{Checker, Seen, shown, unique};
use super::validate_http::http;
use super::{
    RestartPolicy, Secret, StdioConfig, StdioSharing, UpstreamConfig, UpstreamEra,
    UpstreamTransport,
};

const DEFAULT_TIMEOUT: Duration = Duration::from_secs(60);
const DEFAULT_MAX_TIMEOUT: Duration = Duration::from_secs(10 * 60);
const DEFAULT_INIT_TIMEOUT: Duration = Duration::from_secs(30);
const DEFAULT_INITIAL_BACKOFF: Duration = Duration::from_millis(100);
const DEFAULT_MAX_BACKOFF: Duration = Duration::from_secs(30);
/// Durations have millisecond resolution: "greater than 0" is "at least 1ms".
const POSITIVE: Duration = Duration::from_millis(1);

/// `separator`: the tenant's valid separator, and where it was written (`None` if defaulted);
/// `None` when the separator itself is invalid (splittability is then not checked).
pub(super) fn upstreams(
    checker: &mut Checker<'_>,
    field: &Field<Vec<Sp<RawUpstream>>>,
    tenant: &Loc,
    separator: Option<(&str, Option<&Loc>)>,
) -> Option<Vec<UpstreamConfig>> {
    let Some(list) = field else {
        checker.error(
            tenant,
            "missing required field `upstreams`: at least one upstream is required",
        );
        return None;
    };
    let items = list.get()?;
    if items.is_empty() {
        checker.error(&list.loc, "at least one upstream is required");
        return None;
    }
    let mut names = Seen::new();
    let upstreams: Vec<Option<UpstreamConfig>> = items
        .iter()
        .map(|item| upstream(checker, item, &mut names, separator))
        .collect();
    upstreams.into_iter().collect()
}

fn upstream(
    checker: &mut Checker<'_>,
    item: &Sp<RawUpstream>,
    names: &mut Seen,
    separator: Option<(&str, Option<&Loc>)>,
) -> Option<UpstreamConfig> {
    let raw = item.get()?;
    let name = match &raw.name {
        None => {
            checker.missing(&item.loc, "name");
            None
        }
        Some(sp) => sp
            .get()
            .and_then(|name| upstream_name(checker, sp, name, names, separator)),
    };
    let transport = transport(checker, raw, &item.loc);
    let timeout = checker.duration(&raw.timeout, DEFAULT_TIMEOUT, POSITIVE, "timeout");
    let max_timeout = checker.duration(
        &raw.max_timeout,
        DEFAULT_MAX_TIMEOUT,
        POSITIVE,
        "max_timeout",
    );
    let init_timeout = checker.duration(
        &raw.init_timeout,
        DEFAULT_INIT_TIMEOUT,
        POSITIVE,
        "init_timeout",
    );
    checker.ordered(
        (&raw.timeout, timeout, "timeout"),
        (&raw.max_timeout, max_timeout, "max_timeout"),
    );
    let era = match &raw.era {
        None => Some(UpstreamEra::Auto),
        Some(sp) => sp.get().map(|era| match era {
            RawEra::Auto => UpstreamEra::Auto,
            RawEra::Legacy => UpstreamEra::Legacy,
            RawEra::Modern => UpstreamEra::Modern,
        }),
    };
    Some(UpstreamConfig {
        name: name?,
        transport: transport?,
        request_timeout: timeout?,
        max_request_timeout: max_timeout.filter(|max| Some(*max) >= timeout)?,
        init_timeout: init_timeout?,
        era: era?,
    })
}

/// Exactly one of `stdio`, `http` and `sse`; every one given is checked.
fn transport(checker: &mut Checker<'_>, raw: &RawUpstream, loc: &Loc) -> Option<UpstreamTransport> {
    let given: Vec<&str> = [
        ("stdio", raw.stdio.is_some()),
        ("http", raw.http.is_some()),
        ("sse", raw.sse.is_some()),
    ]
    .into_iter()
    .filter_map(|(name, set)| set.then_some(name))
    .collect();
    let stdio = raw.stdio.as_ref().map(|sp| stdio(checker, sp));
    let streamable = raw.http.as_ref().map(|sp| http(checker, sp));
    let sse = raw.sse.as_ref().map(|sp| http(checker, sp));
    match given.len() {
        0 => {
            checker.error(
                loc,
                "missing transport: set one of `stdio` (a local command), `http` (a Streamable HTTP URL) or `sse` (the SSE URL of an HTTP+SSE server, protocol 2024-11-05)",
            );
            None
        }
        1 => match (stdio, streamable, sse) {
            (Some(s), _, _) => s.map(UpstreamTransport::Stdio),
            (_, Some(h), _) => h.map(UpstreamTransport::Http),
            (_, _, Some(h)) => h.map(UpstreamTransport::Sse),
            _ => None,
        },
        _ => {
            checker.error(
                loc,
                format!(
                    "set exactly one of `stdio`, `http` or `sse`, not {}",
                    given
                        .iter()
                        .map(|g| format!("`{g}`"))
                        .collect::<Vec<_>>()
                        .join(" and ")
                ),
            );
            None
        }
    }
}

fn upstream_name(
    checker: &mut Checker<'_>,
    sp: &Sp<String>,
    name: &str,
    names: &mut Seen,
    separator: Option<(&str, Option<&Loc>)>,
) -> Option<String> {
    if let Err(rule) = rules::upstream_name(name) {
        checker.error(
            &sp.loc,
            format!("invalid upstream name {}: {rule}", shown(sp)),
        );
        return None;
    }
    // Case-insensitive: resource URI schemes (`<upstream>+<scheme>`) are.
    unique(
        checker,
        names,
        (&name.to_ascii_lowercase(), &shown(sp)),
        &sp.loc,
        "upstream name",
        None,
    );
    if let Some((separator, separator_loc)) = separator
        && let Err(mut rule) = rules::splittable(name, separator)
    {
        if sp.loc.from_env {
            rule = format!(
                "upstream name (value from the environment) cannot be used with separator {separator:?}: the separator starts inside the name, so prefixed names could not be split back into upstream and tool"
            );
        }
        let origin = match separator_loc {
            Some(loc) => format!(" (separator set at line {})", loc.mark.line),
            None => " (the default separator)".to_owned(),
        };
        checker.error(&sp.loc, format!("{rule}{origin}"));
        return None;
    }
    Some(name.to_owned())
}

fn no_nul(checker: &mut Checker<'_>, sp: &Sp<String>, what: &str) -> Option<String> {
    let value = sp.get()?;
    if value.contains('\0') {
        checker.error(&sp.loc, format!("{what} must not contain a NUL character"));
        return None;
    }
    Some(value.clone())
}

fn stdio(checker: &mut Checker<'_>, sp: &Sp<RawStdio>) -> Option<StdioConfig> {
    let raw = sp.get()?;
    let command = match &raw.command {
        None => {
            checker.missing(&sp.loc, "command");
            None
        }
        Some(command) => no_nul(checker, command, "`command`").filter(|c| {
            let empty = c.trim().is_empty();
            if empty {
                checker.error(&command.loc, "`command` must not be empty");
            }
            !empty
        }),
    };
    let args = strings(checker, &raw.args, |checker, arg| {
        no_nul(checker, arg, "an argument")
    });
    let env = child_env(checker, &raw.env);
    let inherit_env = strings(checker, &raw.inherit_env, |checker, name| {
        let value = name.get()?;
        if is_var_name(value) {
            return Some(value.clone());
        }
        checker.error(
            &name.loc,
            format!(
                "invalid environment variable name {}: use letters, digits and '_', not starting with a digit",
                shown(name)
            ),
        );
        None
    });
    let cwd = match &raw.cwd {
        None => Some(None),
        Some(cwd) => {
            no_nul(checker, cwd, "`cwd`").and_then(|dir| working_dir(checker, cwd, dir).map(Some))
        }
    };
    let sharing = match &raw.sharing {
        None => Some(StdioSharing::Shared),
        Some(sp) => sp.get().map(|sharing| match sharing {
            RawSharing::Shared => StdioSharing::Shared,
            RawSharing::PerSession => StdioSharing::PerSession,
        }),
    };
    let pool_size = match (&raw.pool_size, sharing) {
        (None, _) => Some(1),
        (Some(sp), Some(StdioSharing::PerSession)) => {
            checker.error(&sp.loc, "`pool_size` applies to `sharing: shared` only (per-session upstreams have one process per session)");
            None
        }
        (Some(sp), _) => sp.get().and_then(|n| match usize::try_from(*n) {
            Ok(n @ 1..=64) => Some(n),
            _ => {
                checker.error(
                    &sp.loc,
                    format!("`pool_size` must be from 1 to 64, got {n}"),
                );
                None
            }
        }),
    };
    let restart = restart(checker, &raw.restart);
    Some(StdioConfig {
        command: command?,
        args: args?,
        env: env?,
        inherit_env: inherit_env?,
        cwd: cwd?,
        sharing: sharing?,
        pool_size: pool_size?,
        restart: restart?,
    })
}

/// Checks every item of a string list (default empty); `None` if the list or any item is bad.
fn strings(
    checker: &mut Checker<'_>,
    field: &Field<Vec<Sp<String>>>,
    mut check: impl FnMut(&mut Checker<'_>, &Sp<String>) -> Option<String>,
) -> Option<Vec<String>> {
    let Some(list) = field else {
        return Some(Vec::new());
    };
    let checked: Vec<Option<String>> = list
        .get()?
        .iter()
        .map(|item| check(checker, item))
        .collect();
    checked.into_iter().collect()
}

fn child_env(checker: &mut Checker<'_>, field: &Field<Pairs>) -> Option<BTreeMap<String, Secret>> {
    let Some(pairs) = field else {
        return Some(BTreeMap::new());
    };
    let mut env = BTreeMap::new();
    let mut ok = true;
    for (key, value) in &pairs.get()?.0 {
        let name = key
            .get()
            .and_then(|name| match rules::child_env_name(name) {
                Ok(()) => Some(name.clone()),
                Err(rule) => {
                    checker.error(&key.loc, rule);
                    None
                }
            });
        let secret = value.get().and_then(|v| {
            if v.contains('\0') {
                checker.error(
                    &value.loc,
                    "the value must not contain a NUL character (value not shown)",
                );
                return None;
            }
            Some(Secret::new(v.clone()))
        });
        match (name, secret) {
            (Some(name), Some(secret)) => {
                env.insert(name, secret);
            }
            _ => ok = false,
        }
    }
    ok.then_some(env)
}

fn working_dir(checker: &mut Checker<'_>, sp: &Sp<String>, dir: String) -> Option<PathBuf> {
    let problem = match std::fs::metadata(&dir) {
        _ if dir.is_empty() => "must not be empty".to_owned(),
        Ok(meta) if meta.is_dir() => return Some(PathBuf::from(dir)),
        Ok(_) => "is not a directory".to_owned(),
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => {
            "does not exist (relative paths are resolved from the gateway's working directory)"
                .to_owned()
        }
        Err(e) => format!("cannot be accessed: {e}"),
    };
    checker.error(
        &sp.loc,
        format!("working directory {} {problem}", shown(sp)),
    );
    None
}

fn restart(checker: &mut Checker<'_>, field: &Field<RawRestart>) -> Option<RestartPolicy> {
    let (absent_initial, absent_max) = (None, None);
    let (initial_field, max_field) = match field {
        None => (&absent_initial, &absent_max),
        Some(sp) => {
            let raw = sp.get()?;
            (&raw.initial_backoff, &raw.max_backoff)
        }
    };
    let initial = checker.duration(
        initial_field,
        DEFAULT_INITIAL_BACKOFF,
        POSITIVE,
        "initial_backoff",
    );
    let max = checker.duration(max_field, DEFAULT_MAX_BACKOFF, POSITIVE, "max_backoff");
    checker.ordered(
        (initial_field, initial, "initial_backoff"),
        (max_field, max, "max_backoff"),
    );
    let (initial, max) = (initial?, max?);
    (initial <= max).then_some(RestartPolicy {
        initial_backoff: initial,
        max_backoff: max,
    })
}
