//! What a gateway-run task is durably (the tasks extension, for upstreams without it): its
//! status, times, ttl, and once it ends its result or error (raw JSON, as the upstream sent
//! it), or the questions it waits on. Kept under a `SessionKey` (tenant, user, task id) in
//! the session store's backend, so any replica reads it and no one else's key finds it.

use serde::{Deserialize, Serialize};

/// A task's status (SEP-2663).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum TaskStatus {
    Working,
    InputRequired,
    Completed,
    Failed,
    Cancelled,
}

impl TaskStatus {
    pub fn as_str(self) -> &'static str {
        match self {
            TaskStatus::Working => "working",
            TaskStatus::InputRequired => "input_required",
            TaskStatus::Completed => "completed",
            TaskStatus::Failed => "failed",
            TaskStatus::Cancelled => "cancelled",
        }
    }

    pub fn is_terminal(self) -> bool {
        matches!(
            self,
            TaskStatus::Completed | TaskStatus::Failed | TaskStatus::Cancelled
        )
    }
}

#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct TaskRecord {
    pub status: TaskStatus,
    /// Milliseconds since the epoch.
    pub created_ms: u64,
    pub updated_ms: u64,
    /// How long the task stays readable after it was created.
    pub ttl_ms: u64,
    /// The tool result (`completed`) or JSON-RPC error (`failed`), raw JSON.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub outcome: Option<String>,
    /// The questions waited on (`input_required`): an `inputRequests` map, raw JSON.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub input_requests: Option<String>,
    /// The replica running it (where its upstream request is).
    pub replica: String,
}
