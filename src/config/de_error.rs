//! Where deserialization problems go: the shared sink (`Ctx`, which also carries the
//! environment), the `DeError` type that marks an error as recorded, and "did you mean" hints.

use std::cell::RefCell;
use std::fmt;

use serde::de::{self, Expected, Unexpected};

use super::super::error::ConfigError;
use super::super::suggest::did_you_mean;
use super::super::yaml::Mark;

/// Shared state of one deserialization: the file name for errors, the environment for
/// substitution and the error sink.
pub struct Ctx<'a> {
    file: &'a str,
    pub(super) env: &'a dyn Fn(&str) -> Option<String>,
    errors: RefCell<Vec<ConfigError>>,
}

impl<'a> Ctx<'a> {
    pub fn new(file: &'a str, env: &'a dyn Fn(&str) -> Option<String>) -> Self {
        Ctx {
            file,
            env,
            errors: RefCell::new(Vec::new()),
        }
    }

    pub fn push(&self, mark: Mark, path: &str, message: String) {
        self.errors.borrow_mut().push(ConfigError {
            file: self.file.to_owned(),
            line: mark.line,
            col: mark.col,
            path: path.to_owned(),
            message,
        });
    }

    pub fn into_errors(self) -> Vec<ConfigError> {
        self.errors.into_inner()
    }
}

/// Error type of [`NodeDe`]. Once attached to a node it is `recorded` and only signals failure.
#[derive(Debug)]
pub struct DeError {
    pub(super) message: String,
    pub(super) recorded: bool,
}

impl DeError {
    pub(super) fn recorded() -> Self {
        DeError {
            message: "invalid value (reported)".to_owned(),
            recorded: true,
        }
    }
}

impl fmt::Display for DeError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&self.message)
    }
}

impl std::error::Error for DeError {}

impl de::Error for DeError {
    fn custom<T: fmt::Display>(message: T) -> Self {
        DeError {
            message: message.to_string(),
            recorded: false,
        }
    }

    fn invalid_type(unexpected: Unexpected<'_>, expected: &dyn Expected) -> Self {
        let found = match unexpected {
            Unexpected::Unit | Unexpected::Option => "nothing (null)".to_owned(),
            Unexpected::Seq => "a list".to_owned(),
            Unexpected::Map => "a mapping".to_owned(),
            Unexpected::Str(s) => format!("the string {s:?}"),
            Unexpected::Unsigned(n) => format!("the number {n}"),
            Unexpected::Signed(n) => format!("the number {n}"),
            Unexpected::Float(n) => format!("the number {n}"),
            Unexpected::Bool(b) => format!("`{b}`"),
            other => other.to_string(),
        };
        de::Error::custom(format_args!("expected {expected}, found {found}"))
    }

    fn unknown_variant(variant: &str, expected: &'static [&'static str]) -> Self {
        de::Error::custom(format_args!(
            "unknown value `{variant}`{}",
            hint(variant, expected)
        ))
    }
}

/// `, did you mean `x`? expected one of: x, y` (or without the guess when none is close).
pub(super) fn hint(input: &str, expected: &[&str]) -> String {
    let guess = did_you_mean(input, expected)
        .map(|s| format!(", did you mean `{s}`?"))
        .unwrap_or_else(|| ",".to_owned());
    format!("{guess} expected one of: {}", expected.join(", "))
}
