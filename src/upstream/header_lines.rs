//! `HeaderLines`: the header section of a request to an upstream, written as it goes on the
//! wire (`name: value` CRLF per field) while the request is built. A `HeaderMap` hashed every
//! name into a table only for the table to be walked and written out once (~2,000
//! instructions per forwarded call). Nothing here replaces a field: the names the gateway
//! writes itself are reserved in the config (`config::rules::header_name`), so credentials
//! never repeat them, and each caller writes a name once.

use http::header::{HeaderName, HeaderValue};

/// A request's header fields, in the order added.
#[derive(Default)]
pub struct HeaderLines(Vec<u8>);

impl HeaderLines {
    /// Room for `bytes` of fields before the first reallocation.
    pub fn with_capacity(bytes: usize) -> HeaderLines {
        HeaderLines(Vec::with_capacity(bytes))
    }

    /// Adds a field; `HeaderName` and `HeaderValue` hold no CR or LF, so a line stays a line.
    pub fn add(&mut self, name: &HeaderName, value: &HeaderValue) {
        self.add_bytes(name.as_str(), value.as_bytes());
    }

    /// Adds a field whose name is one of the gateway's own (lowercase, a valid token) and whose
    /// value is known to be valid (a constant, or a `HeaderValue`'s bytes).
    pub fn add_bytes(&mut self, name: &str, value: &[u8]) {
        debug_assert!(HeaderName::from_bytes(name.as_bytes()).is_ok(), "{name}");
        debug_assert!(HeaderValue::from_bytes(value).is_ok(), "{name}");
        self.0.reserve(name.len() + value.len() + 4);
        self.0.extend_from_slice(name.as_bytes());
        self.0.extend_from_slice(b": ");
        self.0.extend_from_slice(value);
        self.0.extend_from_slice(b"\r\n");
    }

    /// Appends fields already written as lines (a block rendered once, e.g. static headers).
    pub fn add_lines(&mut self, lines: &[u8]) {
        self.0.extend_from_slice(lines);
    }

    /// The fields as written: each `name: value` and CRLF.
    pub fn as_bytes(&self) -> &[u8] {
        &self.0
    }

    /// The value of the first field named `name` (ASCII case-insensitive), for tests.
    #[cfg(test)]
    pub fn get(&self, name: &str) -> Option<&[u8]> {
        self.0.split(|&b| b == b'\n').find_map(|line| {
            let line = line.strip_suffix(b"\r")?;
            let colon = line.iter().position(|&b| b == b':')?;
            line[..colon]
                .eq_ignore_ascii_case(name.as_bytes())
                .then(|| line[colon + 1..].trim_ascii_start())
        })
    }
}

/// Names only: values are usually credentials.
impl std::fmt::Debug for HeaderLines {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        let names = self
            .0
            .split(|&b| b == b'\n')
            .filter_map(|line| line.split(|&b| b == b':').next())
            .filter(|name| !name.is_empty())
            .map(String::from_utf8_lossy);
        f.debug_list().entries(names).finish()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn fields_are_written_as_lines_in_order_and_read_back() {
        let mut lines = HeaderLines::with_capacity(8);
        lines.add(
            &HeaderName::from_static("x-api-key"),
            &HeaderValue::from_static("s3cret"),
        );
        lines.add_bytes("accept", b"application/json, text/event-stream");
        lines.add_lines(b"x-static: 1\r\n");
        assert_eq!(
            lines.as_bytes(),
            b"x-api-key: s3cret\r\naccept: application/json, text/event-stream\r\nx-static: 1\r\n"
        );
        assert_eq!(lines.get("X-Api-Key"), Some(&b"s3cret"[..]));
        assert_eq!(lines.get("x-static"), Some(&b"1"[..]));
        assert_eq!(lines.get("host"), None);
        let shown = format!("{lines:?}");
        assert_eq!(shown, r#"["x-api-key", "accept", "x-static"]"#);
        assert!(!shown.contains("s3cret"));
    }
}
