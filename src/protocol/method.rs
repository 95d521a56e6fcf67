//! The closed set of MCP methods the gateway treats specially; everything else is `Other`.

/// A client-to-server request or notification method.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Method<'a> {
    Initialize,
    Ping,
    ServerDiscover,
    ToolsList,
    ToolsCall,
    PromptsList,
    PromptsGet,
    ResourcesList,
    ResourcesTemplatesList,
    ResourcesRead,
    /// SEP-2093: a resource's metadata without its contents.
    ResourcesMetadata,
    ResourcesSubscribe,
    ResourcesUnsubscribe,
    CompletionComplete,
    LoggingSetLevel,
    NotificationsInitialized,
    NotificationsCancelled,
    NotificationsProgress,
    NotificationsRootsListChanged,
    /// Any other method (extensions, tasks, future methods).
    Other(&'a str),
}

impl<'a> Method<'a> {
    /// A bounded label for metrics: the method's name if it is one of the known set, else
    /// `other` (a client cannot grow a label set by inventing methods).
    pub fn label(name: &str) -> &'static str {
        const KNOWN: [&str; 19] = [
            "initialize",
            "ping",
            "server/discover",
            "tools/list",
            "tools/call",
            "prompts/list",
            "prompts/get",
            "resources/list",
            "resources/templates/list",
            "resources/read",
            "resources/metadata",
            "resources/subscribe",
            "resources/unsubscribe",
            "completion/complete",
            "logging/setLevel",
            "notifications/initialized",
            "notifications/cancelled",
            "notifications/progress",
            "notifications/roots/list_changed",
        ];
        KNOWN
            .iter()
            .find(|k| **k == name)
            .copied()
            .unwrap_or("other")
    }

    pub fn from_name(name: &'a str) -> Method<'a> {
        match name {
            "initialize" => Method::Initialize,
            "ping" => Method::Ping,
            "server/discover" => Method::ServerDiscover,
            "tools/list" => Method::ToolsList,
            "tools/call" => Method::ToolsCall,
            "prompts/list" => Method::PromptsList,
            "prompts/get" => Method::PromptsGet,
            "resources/list" => Method::ResourcesList,
            "resources/templates/list" => Method::ResourcesTemplatesList,
            "resources/read" => Method::ResourcesRead,
            "resources/metadata" => Method::ResourcesMetadata,
            "resources/subscribe" => Method::ResourcesSubscribe,
            "resources/unsubscribe" => Method::ResourcesUnsubscribe,
            "completion/complete" => Method::CompletionComplete,
            "logging/setLevel" => Method::LoggingSetLevel,
            "notifications/initialized" => Method::NotificationsInitialized,
            "notifications/cancelled" => Method::NotificationsCancelled,
            "notifications/progress" => Method::NotificationsProgress,
            "notifications/roots/list_changed" => Method::NotificationsRootsListChanged,
            other => Method::Other(other),
        }
    }
}
