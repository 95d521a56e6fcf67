//! The four paginated list methods and what distinguishes them.

/// `tools/list`, `prompts/list`, `resources/list`, `resources/templates/list`.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum ListKind {
    Tools,
    Prompts,
    Resources,
    ResourceTemplates,
}

impl ListKind {
    pub const ALL: [ListKind; 4] = [
        ListKind::Tools,
        ListKind::Prompts,
        ListKind::Resources,
        ListKind::ResourceTemplates,
    ];

    pub fn method(self) -> &'static str {
        match self {
            ListKind::Tools => "tools/list",
            ListKind::Prompts => "prompts/list",
            ListKind::Resources => "resources/list",
            ListKind::ResourceTemplates => "resources/templates/list",
        }
    }

    /// The result member holding the items.
    pub fn key(self) -> &'static str {
        match self {
            ListKind::Tools => "tools",
            ListKind::Prompts => "prompts",
            ListKind::Resources => "resources",
            ListKind::ResourceTemplates => "resourceTemplates",
        }
    }

    /// The server capability that says the upstream has such items.
    pub fn capability(self) -> &'static str {
        match self {
            ListKind::Tools => "tools",
            ListKind::Prompts => "prompts",
            ListKind::Resources | ListKind::ResourceTemplates => "resources",
        }
    }

    /// The identifying member of an item.
    pub fn id_field(self) -> &'static str {
        match self {
            ListKind::Tools | ListKind::Prompts => "name",
            ListKind::Resources => "uri",
            ListKind::ResourceTemplates => "uriTemplate",
        }
    }

    /// Whether items are identified by URI (namespaced `<upstream>+<uri>`) rather than name.
    pub fn is_uri(self) -> bool {
        matches!(self, ListKind::Resources | ListKind::ResourceTemplates)
    }

    /// The list a `notifications/<x>/list_changed` method invalidates.
    pub fn from_list_changed(method: &str) -> &'static [ListKind] {
        match method {
            "notifications/tools/list_changed" => &[ListKind::Tools],
            "notifications/prompts/list_changed" => &[ListKind::Prompts],
            "notifications/resources/list_changed" => {
                &[ListKind::Resources, ListKind::ResourceTemplates]
            }
            _ => &[],
        }
    }

    /// Index for per-kind arrays.
    pub fn index(self) -> usize {
        self as usize
    }
}
