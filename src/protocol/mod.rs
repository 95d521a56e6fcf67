//! MCP protocol knowledge that does no IO: revisions, method names, header names (and the
//! rule that a header may appear once), and the merging of upstream capabilities into the one
//! server the gateway presents.

pub mod capabilities;
pub mod client_requests;
pub mod lists;
pub mod logging;
pub mod method;
pub mod modern;
pub mod param_headers;
pub mod rewrite;
pub mod tasks;
pub mod tools;
pub mod version;

pub use lists::ListKind;
pub use method::Method;
pub use version::ProtocolVersion;

/// HTTP header names of the Streamable HTTP transport (lower case, as `http` wants them).
pub mod header {
    pub const SESSION_ID: &str = "mcp-session-id";
    pub const PROTOCOL_VERSION: &str = "mcp-protocol-version";
    pub const LAST_EVENT_ID: &str = "last-event-id";
    pub const METHOD: &str = "mcp-method";
    pub const NAME: &str = "mcp-name";
    /// Prefix of the headers that mirror tool arguments marked with `x-mcp-header`.
    pub const PARAM_PREFIX: &str = "mcp-param-";

    /// The names above as `HeaderName`s, for the lookups and inserts of every request: a
    /// `&str` name is parsed and checked again at each use.
    pub mod name {
        use http::HeaderName;

        pub static SESSION_ID: HeaderName = HeaderName::from_static(super::SESSION_ID);
        pub static PROTOCOL_VERSION: HeaderName = HeaderName::from_static(super::PROTOCOL_VERSION);
        pub static METHOD: HeaderName = HeaderName::from_static(super::METHOD);
        pub static NAME: HeaderName = HeaderName::from_static(super::NAME);
    }

    /// A header sent more than once where one value is allowed.
    #[derive(Debug)]
    pub struct Repeated;

    /// The value of header `name`, if sent, when it is sent once.
    pub fn once<K: http::header::AsHeaderName>(
        headers: &http::HeaderMap,
        name: K,
    ) -> Result<Option<&http::HeaderValue>, Repeated> {
        let mut values = headers.get_all(name).iter();
        let first = values.next();
        match values.next() {
            Some(_) => Err(Repeated),
            None => Ok(first),
        }
    }
}
