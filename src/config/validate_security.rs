//! Raw → validated security settings: TLS files, a tenant's canonical `resource`, its Host and
//! Origin allow-lists (then `auth` and `tool_policies`, see `validate_auth`), and the shared
//! helpers for files that must exist, URL fields and checked lists.

use std::net::SocketAddr;
use std::path::PathBuf;
use std::time::Duration;

use super::raw::{Field, RawTenant};
use super::raw_security::RawTls;
use super::rules_security::{self, WebUrl};
use super::spanned::Sp;
use super::subst::HIDDEN_VALUE;
use super::validate::{Checker, Seen, shown, unique};
use super::validate_auth;
use super::{AuthConfig, TenantConfig, TlsConfig, ToolPolicy};

const DEFAULT_RELOAD_INTERVAL: Duration = Duration::from_secs(10);
const MIN_RELOAD_INTERVAL: Duration = Duration::from_secs(1);

/// The tenant's validated endpoint path, for the `resource` check.
pub(super) struct TenantPath<'a> {
    pub value: &'a str,
    /// How the path may appear in messages (quoted, or hidden when from the environment).
    pub shown: String,
    /// `Some("the default path of tenant \"acme\"")` when `path` was not written.
    pub default_note: Option<String>,
}

impl<'a> TenantPath<'a> {
    /// `value` is the tenant's valid path, written in `raw.path` or derived from `name` (with
    /// whether the name came from the environment).
    pub fn new(value: &'a str, raw: &RawTenant, name: Option<&(String, bool)>) -> Self {
        let hidden = match &raw.path {
            Some(sp) => sp.loc.from_env,
            None => name.is_some_and(|(_, from_env)| *from_env),
        };
        TenantPath {
            value,
            shown: match hidden {
                true => HIDDEN_VALUE.to_owned(),
                false => format!("{value:?}"),
            },
            default_note: match (&raw.path, name) {
                (None, Some((name, false))) => Some(format!("the default path of tenant {name:?}")),
                (None, _) => Some("the tenant's default path".to_owned()),
                (Some(_), _) => None,
            },
        }
    }
}

/// The security settings of one tenant.
pub(super) struct TenantSecurity {
    pub resource: Option<String>,
    pub allowed_hosts: Vec<String>,
    pub allowed_origins: Vec<String>,
    pub auth: Option<AuthConfig>,
    pub tool_policies: Vec<ToolPolicy>,
}

/// `tls`: `None` when absent; both files must exist and be readable now.
pub(super) fn tls(checker: &mut Checker<'_>, field: &Field<RawTls>) -> Option<Option<TlsConfig>> {
    let Some(sp) = field else {
        return Some(None);
    };
    let raw = sp.get()?;
    let mut file = |field: &Field<String>, name: &str, what: &str| match field {
        None => {
            checker.missing(&sp.loc, name);
            None
        }
        Some(path) => readable_file(checker, path, what),
    };
    let cert = file(&raw.cert, "cert", "TLS certificate file");
    let key = file(&raw.key, "key", "TLS key file");
    let reload_interval = checker.duration(
        &raw.reload_interval,
        DEFAULT_RELOAD_INTERVAL,
        MIN_RELOAD_INTERVAL,
        "reload_interval",
    );
    Some(Some(TlsConfig {
        cert: cert?,
        key: key?,
        reload_interval: reload_interval?,
    }))
}

/// Everything security-related of a tenant. `path` is `None` when the tenant's path is invalid
/// (the `resource` path is then not compared).
pub(super) fn tenant(
    checker: &mut Checker<'_>,
    raw: &RawTenant,
    path: Option<TenantPath<'_>>,
) -> Option<TenantSecurity> {
    let resource = match &raw.resource {
        None => Some(None),
        Some(sp) => resource(checker, sp, path.as_ref()).map(Some),
    };
    let allowed_hosts = checked_list(checker, &raw.allowed_hosts, "allowed host", |value| {
        rules_security::allowed_host(value)
    });
    let allowed_origins = checked_list(checker, &raw.allowed_origins, "allowed origin", |value| {
        rules_security::origin(value)
    });
    let auth = match &raw.auth {
        None => Some(None),
        Some(sp) => validate_auth::auth(checker, sp).map(Some),
    };
    let tool_policies = validate_auth::tool_policies(checker, &raw.tool_policies, &raw.auth);
    Some(TenantSecurity {
        resource: resource?,
        allowed_hosts: allowed_hosts?,
        allowed_origins: allowed_origins?,
        auth: auth?,
        tool_policies: tool_policies?,
    })
}

/// On a listener other hosts can reach, a tenant with `auth` must not let a client's Host
/// header decide who it is: without `resource` (or `auth.audiences`) the accepted audience,
/// and without `allowed_hosts` the metadata and challenges, would be derived from whatever
/// Host a client sends. Reported at the tenant's `auth`. `raw` and `tenants` are in the same
/// order (the tenants validated without error).
pub(super) fn exposed_auth(
    checker: &mut Checker<'_>,
    listen: SocketAddr,
    raw: &[Sp<RawTenant>],
    tenants: &[TenantConfig],
) {
    if listen.ip().to_canonical().is_loopback() {
        return;
    }
    for (raw, tenant) in raw.iter().zip(tenants) {
        let (Some(auth), Some(at)) = (&tenant.auth, raw.get().and_then(|r| r.auth.as_ref())) else {
            continue;
        };
        let no_audience = tenant.resource.is_none() && auth.audiences.is_empty();
        let no_hosts = tenant.allowed_hosts.is_empty();
        const AUDIENCE: &str =
            "`resource` (this endpoint's public URL, the tokens' audience) or `auth.audiences`";
        const HOSTS: &str = "`allowed_hosts` (the Host values clients use)";
        let (missing, otherwise) = match (no_audience, no_hosts) {
            (false, false) => continue,
            (true, true) => (
                format!("{AUDIENCE}, and {HOSTS}"),
                "the accepted token audience and the protected-resource metadata would follow the Host header a client sends",
            ),
            (true, false) => (
                AUDIENCE.to_owned(),
                "the accepted token audience would follow the Host header a client sends",
            ),
            (false, true) => (
                HOSTS.to_owned(),
                "any Host header would be accepted, and without `resource` the metadata would name the host a client sends",
            ),
        };
        checker.error(
            &at.loc,
            format!(
                "a tenant with `auth` on a listener that is not loopback ({listen}) must set {missing}: otherwise {otherwise}"
            ),
        );
    }
}

/// The canonical resource URI: an absolute http(s) URL without query, fragment or user info,
/// whose path is the tenant's path. Kept as written.
fn resource(
    checker: &mut Checker<'_>,
    sp: &Sp<String>,
    path: Option<&TenantPath<'_>>,
) -> Option<String> {
    let (url, parts) = url_field(
        checker,
        sp,
        "resource",
        "https://mcp.example.com/t/acme/mcp",
    )?;
    if parts.query.is_some() {
        checker.error(
            &sp.loc,
            format!(
                "invalid resource {}: a resource URI has no query ('?...')",
                shown(sp)
            ),
        );
        return None;
    }
    let Some(tenant) = path else {
        return Some(url.to_owned());
    };
    if parts.path == tenant.value {
        return Some(url.to_owned());
    }
    let note = tenant
        .default_note
        .as_ref()
        .map(|note| format!(" ({note})"))
        .unwrap_or_default();
    let hidden = sp.loc.from_env || tenant.shown == HIDDEN_VALUE;
    let message = if hidden {
        format!(
            "the path of resource {} does not match the tenant's path {}{note}: the resource must be this endpoint's own URL",
            shown(sp),
            tenant.shown
        )
    } else {
        let found = match parts.path {
            "" => "empty".to_owned(),
            path => format!("{path:?}"),
        };
        let origin = &url[..url.len() - parts.path.len()];
        format!(
            "the path of resource {} is {found}, not the tenant's path {}{note}: the resource must be this endpoint's own URL, e.g. \"{origin}{}\"",
            shown(sp),
            tenant.shown,
            tenant.value
        )
    };
    checker.error(&sp.loc, message);
    None
}

/// A URL field: an absolute http(s) URL with a host, no user info and no fragment. Problems are
/// reported as `invalid <what> "<value>": <problem>`.
pub(super) fn url_field<'a>(
    checker: &mut Checker<'_>,
    sp: &'a Sp<String>,
    what: &str,
    example: &str,
) -> Option<(&'a str, WebUrl<'a>)> {
    let url = sp.get()?;
    match rules_security::web_url(url, example) {
        Ok(parts) => Some((url, parts)),
        Err(problem) => {
            checker.error(&sp.loc, format!("invalid {what} {}: {problem}", shown(sp)));
            None
        }
    }
}

/// A string list (empty when absent) whose items pass `rule` and are unique once normalized
/// (`rule` returns the normalized value). Problems are reported at the item as
/// `invalid <what> "<value>": <problem>`; `None` if the list or any item is invalid.
pub(super) fn checked_list(
    checker: &mut Checker<'_>,
    field: &Field<Vec<Sp<String>>>,
    what: &str,
    mut rule: impl FnMut(&str) -> Result<String, String>,
) -> Option<Vec<String>> {
    let Some(list) = field else {
        return Some(Vec::new());
    };
    let mut seen = Seen::new();
    let mut values = Vec::new();
    let mut valid = true;
    for item in list.get()? {
        let Some(value) = item.get() else {
            valid = false;
            continue;
        };
        match rule(value) {
            Ok(value) => {
                unique(
                    checker,
                    &mut seen,
                    (&value, &shown(item)),
                    &item.loc,
                    what,
                    None,
                );
                values.push(value);
            }
            Err(problem) => {
                checker.error(
                    &item.loc,
                    format!("invalid {what} {}: {problem}", shown(item)),
                );
                valid = false;
            }
        }
    }
    valid.then_some(values)
}

/// A list of OAuth scope tokens (empty when absent), without duplicates.
pub(super) fn scopes(
    checker: &mut Checker<'_>,
    field: &Field<Vec<Sp<String>>>,
) -> Option<Vec<String>> {
    checked_list(checker, field, "scope", |scope| {
        rules_security::scope_token(scope).map(|()| scope.to_owned())
    })
}

/// A path to a file that must exist and be readable now (it is read again at run time).
pub(super) fn readable_file(
    checker: &mut Checker<'_>,
    sp: &Sp<String>,
    what: &str,
) -> Option<PathBuf> {
    let path = sp.get()?;
    let problem = match std::fs::metadata(path) {
        _ if path.is_empty() => "must not be empty".to_owned(),
        Ok(meta) if meta.is_dir() => "is a directory, not a file".to_owned(),
        Ok(_) => match std::fs::File::open(path) {
            Ok(_) => return Some(PathBuf::from(path)),
            Err(e) => format!("cannot be read: {e}"),
        },
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => {
            "does not exist (relative paths are resolved from the gateway's working directory)"
                .to_owned()
        }
        Err(e) => format!("cannot be accessed: {e}"),
    };
    let shown = match path.is_empty() {
        true => String::new(),
        false => format!(" {}", shown(sp)),
    };
    checker.error(&sp.loc, format!("{what}{shown} {problem}"));
    None
}
