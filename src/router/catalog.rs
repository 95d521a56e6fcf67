//! Aggregated lists: `tools/list`, `prompts/list`, `resources/list` and
//! `resources/templates/list` across every upstream of a tenant, with public names.

use std::sync::Arc;

use serde::Deserialize;
use serde_json::value::RawValue;

use super::{ensure_link, names};
use crate::error::GatewayError;
use crate::jsonrpc::{self, RawObject};
use crate::session::LiveSession;
use crate::tenant::Tenant;
use crate::upstream::{InternalReply, Upstream, error_message};

/// Upper bound on pages fetched from one upstream for one list.
const MAX_PAGES: usize = 100;

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum ListKind {
    Tools,
    Prompts,
    Resources,
    ResourceTemplates,
}

impl ListKind {
    fn method(self) -> &'static str {
        match self {
            ListKind::Tools => "tools/list",
            ListKind::Prompts => "prompts/list",
            ListKind::Resources => "resources/list",
            ListKind::ResourceTemplates => "resources/templates/list",
        }
    }

    /// The result member holding the items.
    fn key(self) -> &'static str {
        match self {
            ListKind::Tools => "tools",
            ListKind::Prompts => "prompts",
            ListKind::Resources => "resources",
            ListKind::ResourceTemplates => "resourceTemplates",
        }
    }

    /// The server capability that says the upstream has such items.
    fn capability(self) -> &'static str {
        match self {
            ListKind::Tools => "tools",
            ListKind::Prompts => "prompts",
            ListKind::Resources | ListKind::ResourceTemplates => "resources",
        }
    }

    /// The identifying member of an item, rewritten to its public form.
    fn id_field(self) -> &'static str {
        match self {
            ListKind::Tools | ListKind::Prompts => "name",
            ListKind::Resources => "uri",
            ListKind::ResourceTemplates => "uriTemplate",
        }
    }
}

#[derive(Deserialize)]
#[serde(rename_all = "camelCase")]
struct Page<'a> {
    #[serde(borrow, default)]
    next_cursor: Option<&'a RawValue>,
}

/// The whole list across upstreams, in upstream order then each upstream's order. An upstream
/// that fails is left out with a warning (fail-open).
pub async fn aggregate(
    tenant: &Arc<Tenant>,
    session: &Arc<LiveSession>,
    kind: ListKind,
) -> Result<Vec<u8>, GatewayError> {
    let fetches = tenant.upstreams.iter().map(|u| fetch_all(session, u, kind));
    let results = futures_util::future::join_all(fetches).await;
    let mut out = Vec::with_capacity(1024);
    out.extend_from_slice(b"{\"");
    out.extend_from_slice(kind.key().as_bytes());
    out.extend_from_slice(b"\":[");
    let mut first = true;
    for (upstream, result) in tenant.upstreams.iter().zip(results) {
        let items = match result {
            Ok(items) => items,
            Err(e) => {
                tracing::warn!(tenant = %tenant.name, upstream = %upstream.name(), error = %e, "left out of {}", kind.method());
                continue;
            }
        };
        for item in items {
            let Some(public) = public_item(tenant, upstream, kind, &item) else {
                tracing::warn!(upstream = %upstream.name(), "skipping a malformed {} item", kind.key());
                continue;
            };
            if !first {
                out.push(b',');
            }
            first = false;
            out.extend_from_slice(&public);
        }
    }
    out.extend_from_slice(b"]}");
    Ok(out)
}

/// Every page of one upstream's list.
async fn fetch_all(
    session: &Arc<LiveSession>,
    upstream: &Arc<Upstream>,
    kind: ListKind,
) -> Result<Vec<Box<RawValue>>, GatewayError> {
    let conn = ensure_link(session, upstream).await?;
    let offers = conn
        .server()
        .is_some_and(|s| s.capabilities.get(kind.capability()).is_some());
    if !offers {
        return Ok(Vec::new());
    }
    let mut items = Vec::new();
    let mut cursor: Option<Box<RawValue>> = None;
    for _ in 0..MAX_PAGES {
        let params = cursor.as_ref().map(|c| {
            let mut obj = RawObject::default();
            obj.set("cursor", c.clone());
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
        let page: Vec<&RawValue> =
            serde_json::from_str(list.get()).map_err(|_| invalid("list is not an array"))?;
        items.extend(page.into_iter().map(RawValue::to_owned));
        let next: Page<'_> =
            serde_json::from_str(result.get()).map_err(|_| invalid("bad nextCursor"))?;
        match next.next_cursor {
            Some(c) if c.get() != "null" => cursor = Some(c.to_owned()),
            _ => return Ok(items),
        }
    }
    tracing::warn!(upstream = %upstream.name(), pages = MAX_PAGES, "{} stopped after the page limit", kind.method());
    Ok(items)
}

/// The item with its identifying member in public form.
fn public_item(
    tenant: &Tenant,
    upstream: &Upstream,
    kind: ListKind,
    item: &RawValue,
) -> Option<Vec<u8>> {
    if !tenant.prefixed {
        return Some(item.get().as_bytes().to_vec());
    }
    let mut obj = RawObject::parse(item).ok()?;
    let own = obj.get_str(kind.id_field())?.into_owned();
    let public = match kind {
        ListKind::Tools | ListKind::Prompts => tenant.public_name(upstream, &own),
        ListKind::Resources | ListKind::ResourceTemplates => {
            names::public_uri(tenant, upstream, &own)
        }
    };
    obj.set(kind.id_field(), jsonrpc::raw_string(&public));
    Some(obj.to_vec())
}
