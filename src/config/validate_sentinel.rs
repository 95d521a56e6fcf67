//! `sessions.store.redis.sentinel`: the master name, the sentinels' URLs and the data nodes'
//! login. URLs and passwords may hold secrets: messages show a sentinel as `host:port` only.

use std::collections::HashMap;

use super::raw::RawSentinel;
use super::spanned::{Loc, Sp};
use super::subst::HIDDEN_VALUE;
use super::validate::{Checker, shown, unique};
use super::validate_limits::count;
use super::{Secret, SentinelConfig};

/// Most sentinels a deployment lists (a quorum needs 3 or 5; more is a typo).
const MAX_NODES: usize = 16;
const MAX_MASTER_NAME: usize = 128;
const MAX_DB: u64 = 65_535;

pub(super) fn sentinel(checker: &mut Checker<'_>, sp: &Sp<RawSentinel>) -> Option<SentinelConfig> {
    let raw = sp.get()?;
    let master = match &raw.master {
        None => {
            checker.missing(&sp.loc, "master");
            None
        }
        Some(name) => name.get().and_then(|value| {
            let ok = !value.is_empty()
                && value.len() <= MAX_MASTER_NAME
                && value.bytes().all(|b| b.is_ascii_graphic());
            if !ok {
                checker.error(
                    &name.loc,
                    format!(
                        "invalid Sentinel master name {}: 1 to {MAX_MASTER_NAME} visible ASCII characters, no spaces",
                        shown(name)
                    ),
                );
            }
            ok.then(|| value.clone())
        }),
    };
    let nodes = nodes(checker, &sp.loc, &raw.nodes);
    let password = match &raw.password {
        None => Some(None),
        Some(p) => p.get().and_then(|value| {
            if value.is_empty() {
                checker.error(
                    &p.loc,
                    "`password` must not be empty (leave it out for none)",
                );
                return None;
            }
            Some(Some(Secret::new(value.clone())))
        }),
    };
    let username = match &raw.username {
        None => Some(None),
        Some(u) => u.get().and_then(|value| {
            if value.is_empty() || !value.bytes().all(|b| b.is_ascii_graphic()) {
                checker.error(
                    &u.loc,
                    format!(
                        "invalid `username` {}: visible ASCII characters, no spaces",
                        shown(u)
                    ),
                );
                return None;
            }
            if raw.password.is_none() {
                checker.error(
                    &u.loc,
                    "`username` needs `password` (the data nodes' ACL user logs in with both)",
                );
                return None;
            }
            Some(Some(value.clone()))
        }),
    };
    let tls = match &raw.tls {
        None => Some(false),
        Some(t) => t.get().copied(),
    };
    let db = count(checker, &raw.db, (0, 0, MAX_DB), "db").and_then(|n| u32::try_from(n).ok());
    Some(SentinelConfig {
        master: master?,
        nodes: nodes?,
        username: username?,
        password: password?,
        tls: tls?,
        db: db?,
    })
}

/// `nodes`: 1 to [`MAX_NODES`] distinct `redis://` or `rediss://` URLs with a host and a port.
fn nodes(
    checker: &mut Checker<'_>,
    parent: &Loc,
    field: &Option<Sp<Vec<Sp<String>>>>,
) -> Option<Vec<Secret>> {
    let Some(list) = field else {
        checker.missing(parent, "nodes");
        return None;
    };
    let items = list.get()?;
    if items.is_empty() || items.len() > MAX_NODES {
        checker.error(
            &list.loc,
            format!(
                "`nodes` must list 1 to {MAX_NODES} sentinels, got {}",
                items.len()
            ),
        );
        return None;
    }
    let mut seen = HashMap::new();
    let mut out = Vec::with_capacity(items.len());
    let mut all_ok = true;
    for item in items {
        let Some(text) = item.get() else {
            all_ok = false;
            continue;
        };
        match node_address(text) {
            Ok(address) => {
                let shown = if item.loc.from_env {
                    HIDDEN_VALUE.to_owned()
                } else {
                    format!("`{address}`")
                };
                if unique(
                    checker,
                    &mut seen,
                    (&address, &shown),
                    &item.loc,
                    "sentinel",
                    None,
                ) {
                    out.push(Secret::new(text.clone()));
                } else {
                    all_ok = false;
                }
            }
            Err(message) => {
                checker.error(&item.loc, message);
                all_ok = false;
            }
        }
    }
    all_ok.then_some(out)
}

/// A sentinel's `host:port` (what messages may show), or why its URL is refused. The message
/// never repeats the URL: it may hold a password.
fn node_address(text: &str) -> Result<String, String> {
    const SHAPE: &str =
        "a sentinel's URL must look like redis://[user:password@]host:port (rediss:// for TLS)";
    let url = url::Url::parse(text).map_err(|_| SHAPE.to_owned())?;
    if !matches!(url.scheme(), "redis" | "rediss") {
        return Err(SHAPE.to_owned());
    }
    let host = match url.host_str() {
        Some(h) if !h.is_empty() => h,
        _ => return Err(format!("{SHAPE}: the host is missing")),
    };
    let Some(port) = url.port() else {
        return Err(format!(
            "{SHAPE}: the port is missing (sentinels usually listen on 26379)"
        ));
    };
    if !matches!(url.path(), "" | "/") {
        return Err(
            "a sentinel's URL names no database (the data nodes' database is `db`)".to_owned(),
        );
    }
    if url.query().is_some() || url.fragment().is_some() {
        return Err(format!("{SHAPE}: no query or fragment"));
    }
    Ok(format!("{}://{host}:{port}", url.scheme()))
}

#[cfg(test)]
mod tests {
    use super::node_address;

    #[test]
    fn sentinel_addresses_never_show_the_password() {
        assert_eq!(
            node_address("redis://:hunter2@10.0.0.1:26379"),
            Ok("redis://10.0.0.1:26379".to_owned())
        );
        assert_eq!(
            node_address("rediss://u:p@sentinel-0.internal:26380/"),
            Ok("rediss://sentinel-0.internal:26380".to_owned())
        );
        for bad in [
            "http://h:26379",
            "redis://:hunter2@h",
            "redis://:hunter2@h:26379/2",
            "redis://:hunter2@h:26379?x=1",
            "redis://:hunter2@:26379",
            "h:26379",
        ] {
            let message = node_address(bad).expect_err(bad);
            assert!(!message.contains("hunter2"), "{bad}: {message}");
        }
    }
}
