//! Aggregated lists: one page of `tools/list`, `prompts/list`, `resources/list` or
//! `resources/templates/list` across every upstream of a tenant, from the upstreams' cached
//! pages, in upstream order, with public names and a composite cursor that keeps every
//! upstream's own cursor. Also the name/URI → upstream lookups that `never` prefix mode needs.

use std::collections::{HashMap, HashSet};
use std::sync::Arc;

use serde::Deserialize;
use serde_json::Value;
use serde_json::value::RawValue;

use super::ensure_link;
use crate::auth::Principal;
use crate::config::FailurePolicy;
use crate::error::GatewayError;
use crate::jsonrpc::{self, RawObject};
use crate::policy::Decision;
use crate::protocol::param_headers::ParamHeaders;
use crate::protocol::{ListKind, tools};
use crate::session::LiveSession;
use crate::tenant::Tenant;
use crate::upstream::{InternalReply, Page, PageKey, Upstream, error_message};

/// Upper bound on pages walked from one upstream to find who owns a name.
const MAX_LOOKUP_PAGES: usize = 100;

/// The JSON-RPC response (`id` the request's) carrying one page of an aggregated list.
/// `cursor` is the client's cursor. The page is written once, into a buffer sized for it.
pub async fn list_page(
    tenant: &Arc<Tenant>,
    session: &Arc<LiveSession>,
    principal: &Principal,
    kind: ListKind,
    cursor: Option<&str>,
    id: &RawValue,
) -> Result<Vec<u8>, GatewayError> {
    let policed = kind == ListKind::Tools && !tenant.policies.is_empty();
    if policed && cursor.is_none() {
        audit_policies(tenant, session);
    }
    // Which upstreams to ask, and from where.
    let positions: Vec<(&Arc<Upstream>, Option<String>)> = match cursor {
        None => tenant.upstreams.iter().map(|u| (u, None)).collect(),
        Some(c) => tenant
            .cursor_key
            .decode(kind, c)?
            .into_iter()
            .filter_map(|(name, pos)| {
                let u = tenant.upstreams.iter().find(|u| u.name() == name)?;
                Some((u, Some(pos)))
            })
            .collect(),
    };
    let fetches = positions
        .iter()
        .map(|(u, pos)| page(session, u, kind, pos.as_deref()));
    let pages = futures_util::future::join_all(fetches).await;

    let items: usize = pages
        .iter()
        .flatten()
        .flat_map(|p| p.items.iter().map(|i| i.get().len() + 1))
        .sum();
    let mut out = Vec::with_capacity(items + id.get().len() + 256);
    jsonrpc::result_prefix(&mut out, id);
    out.extend_from_slice(b"{\"");
    out.extend_from_slice(kind.key().as_bytes());
    out.extend_from_slice(b"\":[");
    let mut first = true;
    let mut next_positions = Vec::new();
    let mut seen: HashSet<&str> = HashSet::new();
    let mut collisions: Vec<Value> = Vec::new();
    for ((upstream, _), result) in positions.iter().zip(&pages) {
        let page = match result {
            Ok(p) => p,
            Err(e) => match tenant.config.failure_policy {
                FailurePolicy::Open => {
                    tracing::warn!(tenant = %tenant.name, upstream = %upstream.name(), error = %e, "left out of {} (failure_policy: open)", kind.method());
                    continue;
                }
                FailurePolicy::Closed => return Err(e.clone()),
            },
        };
        for (item, id) in page.items.iter().zip(&page.ids) {
            // Tools the caller may not use are not listed.
            if policed && tenant.policies.decide(upstream.name(), id, principal) != Decision::Allow
            {
                continue;
            }
            // Without prefixes two upstreams can offer the same name: the first one keeps it.
            if !tenant.prefixed && tenant.upstreams.len() > 1 && !seen.insert(id) {
                tracing::warn!(tenant = %tenant.name, upstream = %upstream.name(), name = %id, "{} name collision: already offered by an earlier upstream", kind.key());
                collisions.push(serde_json::json!({"name": &**id, "upstream": upstream.name()}));
                continue;
            }
            if !first {
                out.push(b',');
            }
            first = false;
            out.extend_from_slice(item.get().as_bytes());
        }
        if let Some(next) = &page.next {
            next_positions.push((upstream.name().to_owned(), next.to_string()));
        }
    }
    out.push(b']');
    if let Some(next) = tenant.cursor_key.encode(kind, next_positions) {
        out.extend_from_slice(b",\"nextCursor\":");
        serde_json::to_writer(&mut out, &next).map_err(|_| GatewayError::Internal)?;
    }
    if !collisions.is_empty() {
        // Reported, not hidden: the shadowed entries and who shadowed them.
        let meta = serde_json::json!({"io.switchyard/collisions": collisions});
        out.extend_from_slice(b",\"_meta\":");
        serde_json::to_writer(&mut out, &meta).map_err(|_| GatewayError::Internal)?;
    }
    out.extend_from_slice(b"}}");
    Ok(out)
}

/// Checks the tool policies against the complete tool list of each upstream they name, once per
/// list version, in the background: a pattern that matches no tool is reported (a policy that
/// protects nothing is a configuration error the config file alone cannot reveal).
fn audit_policies(tenant: &Arc<Tenant>, session: &Arc<LiveSession>) {
    for upstream in tenant.upstreams.iter() {
        if !tenant.policies.names_upstream(upstream.name()) {
            continue;
        }
        let generation = upstream.info.catalog.generation(ListKind::Tools);
        if !tenant.claim_policy_audit(upstream.info.id, generation) {
            continue;
        }
        let (tenant, session, upstream) = (tenant.clone(), session.clone(), upstream.clone());
        tokio::spawn(async move {
            match all_ids(&session, &upstream, ListKind::Tools).await {
                Ok(pages) => {
                    let tools: Vec<&str> = pages
                        .iter()
                        .flat_map(|p| p.ids.iter().map(|id| &**id))
                        .collect();
                    tenant
                        .policies
                        .report_unmatched(&tenant.name, upstream.name(), &tools);
                }
                Err(e) => {
                    tenant.release_policy_audit(upstream.info.id);
                    tracing::debug!(upstream = %upstream.name(), error = %e, "tool policies not checked: the tool list could not be read");
                }
            }
        });
    }
}

/// One page of one upstream's list: from the catalog cache, else fetched through the session's
/// connection and cached.
async fn page(
    session: &Arc<LiveSession>,
    upstream: &Arc<Upstream>,
    kind: ListKind,
    cursor: Option<&str>,
) -> Result<Arc<Page>, GatewayError> {
    let catalog = &upstream.info.catalog;
    let key = PageKey {
        kind,
        fingerprint: if upstream.is_shared() {
            0
        } else {
            session.capabilities_fingerprint
        },
        cursor: cursor.map(Into::into),
    };
    if let Some(page) = catalog.get(&key) {
        return Ok(page);
    }
    let generation = catalog.generation(kind);
    let page = Arc::new(fetch(session, upstream, kind, cursor).await?);
    catalog.insert(key, page.clone(), generation);
    Ok(page)
}

#[derive(Deserialize)]
#[serde(rename_all = "camelCase")]
struct ListResult<'a> {
    #[serde(borrow, default)]
    next_cursor: Option<&'a RawValue>,
}

async fn fetch(
    session: &Arc<LiveSession>,
    upstream: &Arc<Upstream>,
    kind: ListKind,
    cursor: Option<&str>,
) -> Result<Page, GatewayError> {
    let conn = ensure_link(session, upstream).await?;
    let offers = conn
        .server()
        .is_some_and(|s| s.capabilities.get(kind.capability()).is_some());
    if !offers {
        return Ok(Page::default());
    }
    let params = cursor.map(|c| {
        let mut obj = RawObject::default();
        obj.set("cursor", jsonrpc::raw_string(c));
        obj.to_raw()
    });
    let reply = conn
        .call(
            kind.method(),
            params.as_deref(),
            upstream.info.request_timeout,
        )
        .await?;
    let result = match reply {
        InternalReply::Result(r) => r,
        InternalReply::Error(e) => {
            return Err(GatewayError::UpstreamUnavailable {
                upstream: upstream.name().to_owned(),
                reason: format!("{} failed: {}", kind.method(), error_message(&e)),
            });
        }
    };
    let invalid = |what: &str| GatewayError::UpstreamProtocol {
        upstream: upstream.name().to_owned(),
        reason: format!("invalid {} result: {what}", kind.method()),
    };
    let obj = RawObject::parse(&result).map_err(|_| invalid("not an object"))?;
    let list = obj.get(kind.key()).ok_or_else(|| invalid("missing list"))?;
    let raw_items: Vec<&RawValue> =
        serde_json::from_str(list.get()).map_err(|_| invalid("the list is not an array"))?;
    let next: ListResult<'_> =
        serde_json::from_str(result.get()).map_err(|_| invalid("bad nextCursor"))?;
    let next = match next.next_cursor {
        None => None,
        Some(c) if c.get() == "null" => None,
        Some(c) => Some(
            serde_json::from_str::<String>(c.get())
                .map_err(|_| invalid("nextCursor is not a string"))?
                .into_boxed_str(),
        ),
    };
    let mut page = Page {
        items: Vec::with_capacity(raw_items.len()),
        ids: Vec::with_capacity(raw_items.len()),
        next,
        param_headers: HashMap::new(),
    };
    for item in raw_items {
        match public_item(upstream, kind, item) {
            Ok(PublicItem { item, id, headers }) => {
                if let Some(h) = headers {
                    page.param_headers.insert(id.clone(), Arc::new(h));
                }
                page.items.push(item);
                page.ids.push(id);
            }
            Err(reason) => {
                tracing::warn!(upstream = %upstream.name(), reason = %reason, "left out of {}", kind.method());
            }
        }
    }
    Ok(page)
}

/// A list item in public form.
struct PublicItem {
    item: Box<RawValue>,
    /// The upstream's own identifier.
    id: Box<str>,
    /// A tool's mirrored arguments (`x-mcp-header`).
    headers: Option<ParamHeaders>,
}

/// Validates an item and turns it into its public form. Only the identifier is edited (and
/// only when it gets a prefix): what a tool's schema says passes untouched.
fn public_item(upstream: &Upstream, kind: ListKind, item: &RawValue) -> Result<PublicItem, String> {
    let mut obj = RawObject::parse(item).map_err(|_| "not a JSON object".to_owned())?;
    let id = obj
        .get_str(kind.id_field())
        .ok_or_else(|| format!("missing `{}`", kind.id_field()))?
        .into_owned();
    let mut headers = None;
    if kind == ListKind::Tools {
        let public = upstream.public_name(&id);
        tools::check_name(&public).map_err(|e| format!("tool {public:?}: {e}"))?;
        // Clients of the gateway speak Streamable HTTP, whose rules exclude a tool with an
        // invalid annotation, whatever transport the upstream is on.
        if let Some(schema) = obj.get("inputSchema") {
            headers = ParamHeaders::from_raw_schema(schema)
                .map_err(|e| format!("tool {public:?}: {e}"))?;
        }
    }
    let public = match kind {
        ListKind::Tools | ListKind::Prompts => upstream.public_name(&id),
        ListKind::Resources | ListKind::ResourceTemplates => upstream.public_uri(&id),
    };
    let item = if public == id {
        item.to_owned()
    } else {
        obj.set(kind.id_field(), jsonrpc::raw_string(&public));
        obj.to_raw()
    };
    Ok(PublicItem {
        item,
        id: id.into_boxed_str(),
        headers,
    })
}

/// The mirrored arguments of tool `name` (the upstream's own name) of `upstream`, from its
/// cached pages (fetched when the cache has none). `None` when the tool mirrors nothing or
/// is not listed.
pub async fn param_headers(
    session: &Arc<LiveSession>,
    upstream: &Arc<Upstream>,
    name: &str,
) -> Option<Arc<ParamHeaders>> {
    let pages = match all_ids(session, upstream, ListKind::Tools).await {
        Ok(pages) => pages,
        Err(e) => {
            tracing::debug!(upstream = %upstream.name(), error = %e, "tools not listed: no Mcp-Param headers known");
            return None;
        }
    };
    pages
        .iter()
        .find_map(|p| p.param_headers.get(name).cloned())
}

/// The `execution.taskSupport` of tool `name` (the upstream's own name) of `upstream`, from
/// its cached pages; `None` when the tool says nothing or is not listed.
pub async fn task_support(
    session: &Arc<LiveSession>,
    upstream: &Arc<Upstream>,
    name: &str,
) -> Option<String> {
    let pages = all_ids(session, upstream, ListKind::Tools).await.ok()?;
    pages.iter().find_map(|p| {
        let i = p.ids.iter().position(|id| &**id == name)?;
        let item = p.items.get(i)?;
        // Most tools say nothing: their definition is not parsed.
        if !crate::jsonrpc::may_hold(item.get(), "taskSupport") {
            return None;
        }
        let tool: serde_json::Value = serde_json::from_str(item.get()).ok()?;
        Some(
            tool.get("execution")?
                .get("taskSupport")?
                .as_str()?
                .to_owned(),
        )
    })
}

/// Every identifier `upstream` offers in list `kind` (walking its cached pages).
async fn all_ids(
    session: &Arc<LiveSession>,
    upstream: &Arc<Upstream>,
    kind: ListKind,
) -> Result<Vec<Arc<Page>>, GatewayError> {
    let mut pages = Vec::new();
    let mut cursor: Option<Box<str>> = None;
    for _ in 0..MAX_LOOKUP_PAGES {
        let p = page(session, upstream, kind, cursor.as_deref()).await?;
        cursor = p.next.clone();
        pages.push(p);
        if cursor.is_none() {
            return Ok(pages);
        }
    }
    tracing::warn!(upstream = %upstream.name(), pages = MAX_LOOKUP_PAGES, "stopped looking through {} after the page limit", kind.method());
    Ok(pages)
}

/// The `Resource` `upstream` lists under its own URI `uri`, in public form (as
/// `resources/list` shows it), from its cached pages; `None` when it lists no such resource.
pub async fn listed_resource(
    session: &Arc<LiveSession>,
    upstream: &Arc<Upstream>,
    uri: &str,
) -> Result<Option<Box<RawValue>>, GatewayError> {
    let pages = all_ids(session, upstream, ListKind::Resources).await?;
    Ok(pages.iter().find_map(|p| {
        let at = p.ids.iter().position(|id| &**id == uri)?;
        p.items.get(at).cloned()
    }))
}

/// The upstream owning `name` (a tool or prompt) when names carry no prefix: the first
/// upstream, in order, that lists it.
pub async fn owner_by_name<'t>(
    tenant: &'t Tenant,
    session: &Arc<LiveSession>,
    kind: ListKind,
    name: &str,
) -> Option<&'t Arc<Upstream>> {
    for upstream in tenant.upstreams.iter() {
        let Ok(pages) = all_ids(session, upstream, kind).await else {
            continue;
        };
        if pages.iter().any(|p| p.ids.iter().any(|id| &**id == name)) {
            return Some(upstream);
        }
    }
    None
}

/// The upstream owning a resource URI when URIs carry no prefix: the first that lists it, else
/// the first with a template whose fixed beginning matches.
pub async fn owner_by_uri<'t>(
    tenant: &'t Tenant,
    session: &Arc<LiveSession>,
    uri: &str,
) -> Option<&'t Arc<Upstream>> {
    if let Some(u) = owner_by_name(tenant, session, ListKind::Resources, uri).await {
        return Some(u);
    }
    for upstream in tenant.upstreams.iter() {
        let Ok(pages) = all_ids(session, upstream, ListKind::ResourceTemplates).await else {
            continue;
        };
        let matches = pages.iter().flat_map(|p| p.ids.iter()).any(|template| {
            let fixed = template.split('{').next().unwrap_or_default();
            !fixed.is_empty() && uri.starts_with(fixed)
        });
        if matches {
            return Some(upstream);
        }
    }
    None
}
