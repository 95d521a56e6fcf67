//! Tasks through the gateway (the 2026-07-28 tasks extension, SEP-2663, `protocol::tasks`):
//! an upstream's task id reaches the client as a public id — an opaque token naming the
//! upstream and its own task id, authenticated with the tenant's key over the tenant, the
//! user and both — and a task method (`tasks/get|update|cancel`) goes back to the upstream
//! that owns the task by that token alone: no per-task state, so any replica routes it.
//! Another user's (or tenant's) id is as unknown as a made-up one (`-32602`). A client that
//! did not declare the extension (in the request's `_meta`, or its session's capabilities)
//! gets `-32021` for the task methods.

use std::sync::Arc;

use base64::Engine;
use base64::engine::general_purpose::URL_SAFE_NO_PAD;
use bytes::Bytes;

use super::task_run::TaskSlot;
use super::{Reply, forward};
use serde_json::value::RawValue;

use crate::error::GatewayError;
use crate::gateway::Gateway;
use crate::jsonrpc::{self, Request};
use crate::protocol::rewrite::ResultShape;
use crate::protocol::tasks::{self, EXTENSION};
use crate::session::{LiveSession, TaskNamer};
use crate::signing::CursorKey;
use crate::tenant::Tenant;
use crate::upstream::{FinalEdit, ForwardStream, MessageEdit, Upstream};

/// The public id of `upstream`'s task `task`, for `user` of `tenant`.
pub fn public_id(tenant: &Tenant, user: &str, upstream: &str, task: &str) -> String {
    seal(&tenant.cursor_key, &tenant.name, user, upstream, task)
}

/// The upstream and its own task id a public id names, when it was issued to `user` of
/// `tenant` (else `None`: unknown, altered, or someone else's).
pub fn open(tenant: &Tenant, user: &str, public: &str) -> Option<(String, String)> {
    unseal(&tenant.cursor_key, &tenant.name, user, public)
}

fn seal(key: &CursorKey, tenant: &str, user: &str, upstream: &str, task: &str) -> String {
    let payload = serde_json::to_vec(&(upstream, task)).unwrap_or_default();
    let tag = tag(key, tenant, user, &payload);
    let mut out = URL_SAFE_NO_PAD.encode(&payload);
    out.push('.');
    out.push_str(&tag);
    out
}

fn unseal(key: &CursorKey, tenant: &str, user: &str, public: &str) -> Option<(String, String)> {
    let (payload, given) = public.split_once('.')?;
    let payload = URL_SAFE_NO_PAD.decode(payload).ok()?;
    let expected = tag(key, tenant, user, &payload);
    // Compared without an early exit: the time taken says nothing about the tag.
    let same = expected.len() == given.len()
        && expected
            .bytes()
            .zip(given.bytes())
            .fold(0u8, |acc, (a, b)| acc | (a ^ b))
            == 0;
    if !same {
        return None;
    }
    serde_json::from_slice(&payload).ok()
}

/// The tag binding a payload to tenant and user (the key is the tenant's already; the name
/// is in it too, so a key shared by mistake still separates tenants).
fn tag(key: &CursorKey, tenant: &str, user: &str, payload: &[u8]) -> String {
    key.derive(&[b"task", tenant.as_bytes(), user.as_bytes(), payload])
}

/// Whether the session's connection to `upstream` offers the tasks extension (then it runs
/// its tasks itself).
fn offers_tasks(session: &LiveSession, upstream: &Upstream) -> bool {
    session
        .link(upstream.info.id)
        .is_some_and(|c| c.offers_task_extension())
}

/// Whether `upstream`'s tool results may be tasks (either revision).
fn offers_tool_tasks(session: &LiveSession, upstream: &Upstream) -> bool {
    session
        .link(upstream.info.id)
        .is_some_and(|c| c.offers_tool_tasks())
}

/// Whether the gateway runs a `tools/call` of `upstream`'s tool `name` as a task itself: the
/// client declared the extension (in the request's `_meta`, or its session's capabilities),
/// the upstream does not offer it, and the tool lists `execution.taskSupport` `optional` or
/// `required`. A stateless client that did not declare it, calling a `required` tool, gets
/// `-32021`; a session-based one is not asked (its revision has no such rule).
pub(super) async fn gateway_runs(
    session: &Arc<LiveSession>,
    upstream: &Arc<Upstream>,
    name: Option<&str>,
    params: Option<&RawValue>,
) -> Result<Option<TaskSlot>, GatewayError> {
    // A session-based client declared it at `initialize` or not at all: most calls are
    // decided here without reading their params.
    let declared = if session.protocol_version.is_stateless() {
        tasks::request_declares(params).unwrap_or(false)
    } else if session.declares_tasks {
        true
    } else {
        return Ok(None);
    };
    super::ensure_link(session, upstream).await?;
    if offers_tasks(session, upstream) {
        return Ok(None);
    }
    let name = match name {
        Some(n) => n.to_owned(),
        None => match params
            .and_then(|p| jsonrpc::RawObject::parse(p).ok())
            .and_then(|p| p.get_str("name").map(|n| n.into_owned()))
        {
            Some(n) => n,
            None => return Ok(None),
        },
    };
    let support = Box::pin(super::catalog::task_support(session, upstream, &name)).await;
    match (support.as_deref(), declared) {
        (Some("required"), false) => Err(GatewayError::MissingClientExtension(EXTENSION)),
        (Some("optional" | "required"), true) => TaskSlot::take(session).map(Some),
        _ => Ok(None),
    }
}

/// A forwarded `tools/call` whose answer may be a `CreateTaskResult`: the task id it carries
/// is made public on the way back.
pub(super) fn publish(
    reply: Reply,
    tenant: &Arc<Tenant>,
    session: &LiveSession,
    upstream: &Upstream,
) -> Reply {
    let Reply::Stream(stream) = reply else {
        return reply;
    };
    if !offers_tool_tasks(session, upstream) {
        return Reply::Stream(stream);
    }
    name_tasks_of(tenant, session);
    let namer = Arc::new(Namer {
        tenant: tenant.clone(),
        user: session.key.user.clone(),
        upstream: upstream.name().to_owned(),
    });
    Reply::Stream(namer.edits(stream))
}

/// Gives the session the namer of its tasks (what reaches its GET stream outside any
/// request, `notifications/tasks/status`, is named with it in the upstream layer).
pub(super) fn name_tasks_of(tenant: &Arc<Tenant>, session: &LiveSession) {
    if session.task_namer.get().is_some() {
        return;
    }
    let tenant = tenant.clone();
    let user = session.key.user.clone();
    let namer: TaskNamer =
        Arc::new(move |upstream: &str, own: &str| public_id(&tenant, &user, upstream, own));
    let _ = session.task_namer.set(Box::new(namer));
}

/// Names an upstream's tasks for one user of a tenant.
struct Namer {
    tenant: Arc<Tenant>,
    user: Arc<str>,
    upstream: String,
}

impl Namer {
    fn public(&self, own: &str) -> String {
        public_id(&self.tenant, &self.user, &self.upstream, own)
    }

    /// `stream` with the upstream's task ids made public in its messages and its answer.
    fn edits(self: Arc<Self>, stream: ForwardStream) -> ForwardStream {
        let for_messages = self.clone();
        let messages: MessageEdit = Box::new(move |m| {
            tasks::rename_message_task_id(m, |own| for_messages.public(own)).map(Bytes::from)
        });
        let edit: FinalEdit = Box::new(move |body| {
            tasks::rename_result_task_id(body, |own| self.public(own)).map(Bytes::from)
        });
        stream.on_final(edit).on_message(messages)
    }
}

/// `tasks/get`, `tasks/update`, `tasks/cancel` (and for session-based clients `tasks/result`
/// and `tasks/list`): gated on the extension for stateless requests, then routed by the
/// public task id to the upstream that owns the task, with its own id; the answer names the
/// task by the public id again.
pub(super) async fn route(
    gateway: &Gateway,
    tenant: &Arc<Tenant>,
    session: &Arc<LiveSession>,
    req: &Request<'_>,
) -> Result<Reply, GatewayError> {
    // A stateless request must declare the extension; a session-based client's task methods
    // are the 2025-11-25 utility's, which asks nothing of the client.
    if tasks::request_declares(req.params) == Some(false) {
        return Err(GatewayError::MissingClientExtension(EXTENSION));
    }
    name_tasks_of(tenant, session);
    if req.method == "tasks/list" {
        return list(tenant, session, req).await;
    }
    let public = tasks::task_id_of(req.params)
        .ok_or_else(|| GatewayError::InvalidParams("`taskId` (a string) is required".into()))?;
    let not_found = || GatewayError::TaskNotFound(public.chars().take(200).collect());
    let (upstream_name, own) = open(tenant, &session.key.user, &public).ok_or_else(not_found)?;
    if upstream_name.is_empty() {
        // A task the gateway runs (the upstream has no tasks).
        return super::task_run::serve(
            gateway,
            session,
            &req.method,
            req.params,
            req.id,
            &own,
            &public,
        )
        .await;
    }
    let upstream = tenant
        .upstreams
        .iter()
        .find(|u| u.name() == upstream_name)
        .ok_or_else(not_found)?;
    let mut params = super::params_object(req)?;
    params.set("taskId", jsonrpc::raw_string(&own));
    let params = params.to_raw();
    // A task's result is a tool result: its resource URIs are namespaced like a call's.
    let shape = (req.method == "tasks/result").then_some(ResultShape::ToolCall);
    let reply = forward(
        session,
        upstream,
        &req.method,
        Some(&params),
        req.id,
        shape,
        None,
    )
    .await?;
    Ok(match reply {
        Reply::Stream(stream) => {
            // What the upstream says about this task meanwhile (a question during
            // `tasks/result`, a status) names it as the client does.
            // Public ids are deterministic: the owner's id named again is the client's.
            let namer = Arc::new(Namer {
                tenant: tenant.clone(),
                user: session.key.user.clone(),
                upstream: upstream_name,
            });
            Reply::Stream(namer.edits(stream))
        }
        json => json,
    })
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used)]
    use super::*;

    #[test]
    fn a_public_id_opens_only_for_its_user_and_tenant() {
        let key = CursorKey::random();
        let id = seal(&key, "a", "alice", "up", "task-1");
        assert_eq!(
            unseal(&key, "a", "alice", &id),
            Some(("up".to_owned(), "task-1".to_owned()))
        );
        assert_eq!(unseal(&key, "a", "bob", &id), None, "another user");
        assert_eq!(unseal(&key, "b", "alice", &id), None, "another tenant");
        assert_eq!(
            unseal(&CursorKey::random(), "a", "alice", &id),
            None,
            "another key"
        );
        let mut forged = id.clone();
        forged.insert(0, 'x');
        assert_eq!(unseal(&key, "a", "alice", &forged), None);
        assert_eq!(unseal(&key, "a", "alice", "task-1"), None);
    }
}

/// What a `tasks/list` cursor says, sealed with the tenant's key: the user it was given to
/// and every upstream's own cursor.
#[derive(serde::Serialize, serde::Deserialize)]
struct ListCursor {
    u: String,
    p: Vec<(String, String)>,
}

/// `tasks/list` (2025-11-25): one page from every upstream that lists tasks, their ids made
/// public; the next cursor carries every upstream's own next cursor.
async fn list(
    tenant: &Arc<Tenant>,
    session: &Arc<LiveSession>,
    req: &Request<'_>,
) -> Result<Reply, GatewayError> {
    let user = tenant
        .cursor_key
        .derive(&[b"tasks-list", session.key.user.as_bytes()]);
    let cursor = req
        .params
        .and_then(|p| jsonrpc::RawObject::parse(p).ok())
        .and_then(|p| p.get_str("cursor").map(|c| c.into_owned()));
    let positions: Vec<(String, Option<String>)> = match cursor {
        Some(c) => {
            let invalid = || {
                GatewayError::InvalidParams(
                    "Invalid cursor: use the nextCursor of a previous tasks/list, unmodified"
                        .into(),
                )
            };
            let sealed: ListCursor = tenant
                .cursor_key
                .open(&c)
                .and_then(|p| serde_json::from_slice(&p).ok())
                .ok_or_else(invalid)?;
            if sealed.u != user {
                return Err(invalid());
            }
            sealed.p.into_iter().map(|(u, c)| (u, Some(c))).collect()
        }
        None => {
            let mut all = Vec::new();
            for upstream in tenant.upstreams.iter() {
                let Ok(conn) = super::ensure_link(session, upstream).await else {
                    continue;
                };
                let lists = conn.server().is_some_and(|s| {
                    s.capabilities
                        .get("tasks")
                        .and_then(|t| t.get("list"))
                        .is_some()
                });
                if lists {
                    all.push((upstream.name().to_owned(), None));
                }
            }
            all
        }
    };
    let mut listed = Vec::new();
    let mut next = Vec::new();
    for (name, cursor) in positions {
        let Some(upstream) = tenant.upstreams.iter().find(|u| u.name() == name) else {
            continue;
        };
        let conn = super::ensure_link(session, upstream).await?;
        let params = cursor.map(|c| jsonrpc::raw_json(&serde_json::json!({ "cursor": c })));
        let reply = conn
            .call(
                "tasks/list",
                params.as_deref(),
                upstream.info.request_timeout,
            )
            .await;
        let page: serde_json::Value = match reply {
            Ok(crate::upstream::InternalReply::Result(r)) => {
                serde_json::from_str(r.get()).unwrap_or_default()
            }
            Ok(crate::upstream::InternalReply::Error(e)) => {
                tracing::debug!(upstream = %name, error = e.get(), "tasks/list refused upstream");
                continue;
            }
            Err(e) => {
                tracing::debug!(upstream = %name, error = %e, "tasks/list failed upstream");
                continue;
            }
        };
        for mut t in page
            .get("tasks")
            .and_then(serde_json::Value::as_array)
            .cloned()
            .unwrap_or_default()
        {
            if let Some(own) = t.get("taskId").and_then(serde_json::Value::as_str) {
                let public = public_id(tenant, &session.key.user, &name, own);
                t["taskId"] = public.into();
                listed.push(t);
            }
        }
        if let Some(c) = page.get("nextCursor").and_then(serde_json::Value::as_str) {
            next.push((name, c.to_owned()));
        }
    }
    let mut result = serde_json::json!({ "tasks": listed });
    if !next.is_empty() {
        let sealed = serde_json::to_vec(&ListCursor { u: user, p: next }).unwrap_or_default();
        result["nextCursor"] = tenant.cursor_key.seal(&sealed).into();
    }
    let body = serde_json::to_vec(&result).unwrap_or_default();
    Ok(Reply::Json(jsonrpc::result_response(req.id, &body)))
}
