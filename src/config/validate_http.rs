//! Raw → validated HTTP upstream (`http:` and `sse:` alike): URL, static `headers`,
//! `header_files` (values read from files at run time) and `oauth2` client credentials, with
//! the conflicts between them.

use std::path::PathBuf;

use super::raw::{Field, Pairs, RawHttp};
use super::raw_security::RawOAuth2;
use super::rules;
use super::spanned::Sp;
use super::validate::{Checker, Seen};
use super::validate_security::{readable_file, scopes, url_field};
use super::{ClientCredentials, HttpConfig, Secret};

pub(super) fn http(checker: &mut Checker<'_>, sp: &Sp<RawHttp>) -> Option<HttpConfig> {
    let raw = sp.get()?;
    let url = match &raw.url {
        None => {
            checker.missing(&sp.loc, "url");
            None
        }
        Some(url_sp) => url_sp.get().and_then(|url| match rules::upstream_url(url) {
            Ok(()) => Some(url.clone()),
            Err(rule) => {
                checker.error(&url_sp.loc, rule);
                None
            }
        }),
    };
    // Lower-case header name → where `headers` defines it.
    let mut static_names = Seen::new();
    let headers = headers(checker, &raw.headers, &mut static_names);
    let header_files = header_files(checker, &raw.header_files, &static_names);
    let oauth2 = match &raw.oauth2 {
        None => Some(None),
        Some(oauth2_sp) => {
            authorization_conflicts(checker, raw, oauth2_sp.loc.mark.line);
            oauth2(checker, oauth2_sp).map(Some)
        }
    };
    Some(HttpConfig {
        url: url?,
        headers: headers?,
        header_files: header_files?,
        oauth2: oauth2?,
    })
}

/// A valid, not yet seen header name (case-insensitive); remembered in `seen`.
fn header_name(checker: &mut Checker<'_>, key: &Sp<String>, seen: &mut Seen) -> Option<String> {
    let name = key.get()?;
    if let Err(rule) = rules::header_name(name) {
        checker.error(&key.loc, rule);
        return None;
    }
    let lower = name.to_ascii_lowercase();
    if let Some(first) = seen.get(&lower) {
        checker.error(
            &key.loc,
            format!("duplicate header {name:?} (first defined at {first}; header names are case-insensitive)"),
        );
        return None;
    }
    seen.insert(lower, format!("line {}", key.loc.mark.line));
    Some(name.clone())
}

fn headers(
    checker: &mut Checker<'_>,
    field: &Field<Pairs>,
    seen: &mut Seen,
) -> Option<Vec<(String, Secret)>> {
    let Some(pairs) = field else {
        return Some(Vec::new());
    };
    let mut headers = Vec::new();
    let mut ok = true;
    for (key, value) in &pairs.get()?.0 {
        let name = header_name(checker, key, seen);
        let secret = value.get().and_then(|v| match rules::header_value(v) {
            Ok(()) => Some(Secret::new(v.clone())),
            Err(rule) => {
                checker.error(&value.loc, rule);
                None
            }
        });
        match (name, secret) {
            (Some(name), Some(secret)) => headers.push((name, secret)),
            _ => ok = false,
        }
    }
    ok.then_some(headers)
}

/// `header_files`: header name → file; names follow the `headers` rules and may not also be in
/// `headers`; every file must exist now.
fn header_files(
    checker: &mut Checker<'_>,
    field: &Field<Pairs>,
    static_names: &Seen,
) -> Option<Vec<(String, PathBuf)>> {
    let Some(pairs) = field else {
        return Some(Vec::new());
    };
    let mut seen = Seen::new();
    let mut files = Vec::new();
    let mut ok = true;
    for (key, value) in &pairs.get()?.0 {
        let name = header_name(checker, key, &mut seen).filter(|name| {
            let Some(first) = static_names.get(&name.to_ascii_lowercase()) else {
                return true;
            };
            checker.error(
                &key.loc,
                format!("header {name:?} is set both in `headers` ({first}) and in `header_files`: keep one"),
            );
            false
        });
        let path = readable_file(checker, value, "header file");
        match (name, path) {
            (Some(name), Some(path)) => files.push((name, path)),
            _ => ok = false,
        }
    }
    ok.then_some(files)
}

/// With `oauth2` the gateway sets `Authorization` itself: report every configured one.
fn authorization_conflicts(checker: &mut Checker<'_>, raw: &RawHttp, oauth2_line: usize) {
    let keys = [&raw.headers, &raw.header_files]
        .into_iter()
        .flatten()
        .filter_map(|pairs| pairs.get())
        .flat_map(|pairs| pairs.0.iter().map(|(key, _)| key));
    for key in keys {
        if let Some(name) = key.get()
            && name.eq_ignore_ascii_case("authorization")
        {
            checker.error(
                &key.loc,
                format!("header {name:?} cannot be combined with `oauth2` (line {oauth2_line}): the gateway sets Authorization from the token it obtains"),
            );
        }
    }
}

fn oauth2(checker: &mut Checker<'_>, sp: &Sp<RawOAuth2>) -> Option<ClientCredentials> {
    let raw = sp.get()?;
    let token_url = match &raw.token_url {
        None => {
            checker.missing(&sp.loc, "token_url");
            None
        }
        Some(url) => url_field(checker, url, "token URL", "https://idp.example.com/token")
            .map(|(url, _)| url.to_owned()),
    };
    let mut required = |field: &Field<String>, name: &str| match field {
        None => {
            checker.missing(&sp.loc, name);
            None
        }
        Some(value) => value.get().and_then(|text| {
            if text.trim().is_empty() {
                checker.error(&value.loc, format!("`{name}` must not be empty"));
                return None;
            }
            Some(text.clone())
        }),
    };
    let client_id = required(&raw.client_id, "client_id");
    let client_secret = required(&raw.client_secret, "client_secret").map(Secret::new);
    let scopes = scopes(checker, &raw.scopes);
    let resource = match &raw.resource {
        None => Some(None),
        Some(url) => url_field(checker, url, "resource", "https://mcp.example.com/mcp")
            .map(|(url, _)| Some(url.to_owned())),
    };
    Some(ClientCredentials {
        token_url: token_url?,
        client_id: client_id?,
        client_secret: client_secret?,
        scopes: scopes?,
        resource: resource?,
    })
}
