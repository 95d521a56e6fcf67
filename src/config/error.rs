//! Configuration errors: one located problem (`ConfigError`) and the full list reported at once
//! (`ConfigErrors`), both rendered as `file:line:col: path: message`.

use std::fmt;

/// One problem in a configuration file, with where it is.
///
/// `line` and `col` are 1-based; `0` means "no position" (e.g. the file could not be read), and
/// the position is then left out of the rendering. `path` is the location in the document, like
/// `tenants[0].upstreams[1].http.url`; empty for document-level problems.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ConfigError {
    pub file: String,
    pub line: usize,
    pub col: usize,
    pub path: String,
    pub message: String,
}

impl fmt::Display for ConfigError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&self.file)?;
        if self.line > 0 {
            write!(f, ":{}:{}", self.line, self.col)?;
        }
        f.write_str(": ")?;
        if !self.path.is_empty() {
            write!(f, "{}: ", self.path)?;
        }
        f.write_str(&self.message)
    }
}

impl std::error::Error for ConfigError {}

/// Every problem found in a configuration, sorted by position. Never empty when returned as an
/// error by [`super::load`] / [`super::parse`].
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ConfigErrors {
    pub errors: Vec<ConfigError>,
}

impl ConfigErrors {
    /// Sorts by position (stable, so problems at one spot keep the order they were found in).
    pub(crate) fn sorted(mut errors: Vec<ConfigError>) -> Self {
        errors.sort_by_key(|e| (e.line, e.col));
        ConfigErrors { errors }
    }
}

impl fmt::Display for ConfigErrors {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        for (i, error) in self.errors.iter().enumerate() {
            if i > 0 {
                f.write_str("\n")?;
            }
            write!(f, "{error}")?;
        }
        Ok(())
    }
}

impl std::error::Error for ConfigErrors {}

#[cfg(test)]
#[allow(clippy::unwrap_used)]
mod tests {
    use super::*;

    fn error(line: usize, path: &str) -> ConfigError {
        ConfigError {
            file: "c.yaml".into(),
            line,
            col: 3,
            path: path.into(),
            message: "bad".into(),
        }
    }

    #[test]
    fn display_with_and_without_path_and_position() {
        assert_eq!(error(2, "a.b").to_string(), "c.yaml:2:3: a.b: bad");
        assert_eq!(error(2, "").to_string(), "c.yaml:2:3: bad");
        assert_eq!(error(0, "").to_string(), "c.yaml: bad");
    }

    #[test]
    fn list_is_sorted_one_per_line() {
        let all = ConfigErrors::sorted(vec![error(5, "x"), error(1, "y")]);
        assert_eq!(all.to_string(), "c.yaml:1:3: y: bad\nc.yaml:5:3: x: bad");
    }
}
