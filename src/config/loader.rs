//! The loading pipeline behind `parse`: YAML → node tree → raw types → validated `Config`, with
//! the problems of every stage merged and sorted by position.

use std::net::SocketAddr;

use serde::Deserialize;

use super::Config;
use super::de::{Ctx, NodeDe};
use super::error::{ConfigError, ConfigErrors};
use super::raw::RawConfig;
use super::spanned::Sp;
use super::validate::{self, Checker};
use super::yaml;

pub(super) fn parse(
    text: &str,
    source_name: &str,
    env: &dyn Fn(&str) -> Option<String>,
    listen: Option<SocketAddr>,
) -> Result<Config, ConfigErrors> {
    let document = yaml::parse(text);
    let mut errors: Vec<ConfigError> = document
        .issues
        .into_iter()
        .map(|issue| {
            error_at(
                source_name,
                issue.mark.line,
                issue.mark.col,
                issue.path,
                issue.message,
            )
        })
        .collect();
    let Some(root) = document.root else {
        if errors.is_empty() {
            errors.push(error_at(
                source_name,
                1,
                1,
                String::new(),
                "the config is empty: expected a mapping with at least `tenants`".to_owned(),
            ));
        }
        return Err(ConfigErrors::sorted(errors));
    };
    let ctx = Ctx::new(source_name, env);
    // `Sp` records problems instead of failing; an `Err` here would still be in the sink.
    let raw = Sp::<RawConfig>::deserialize(NodeDe::new(&ctx, &root)).ok();
    let mut checker = Checker::new(source_name);
    let config = raw.and_then(|raw| validate::validate(&raw, &mut checker, listen));
    errors.extend(ctx.into_errors());
    errors.extend(checker.errors);
    match config {
        Some(mut config) if errors.is_empty() => {
            config.warnings = ConfigErrors::sorted(checker.warnings).errors;
            Ok(config)
        }
        _ => {
            if errors.is_empty() {
                errors.push(error_at(
                    source_name,
                    0,
                    0,
                    String::new(),
                    "the config is invalid (no details were recorded; this is a bug)".to_owned(),
                ));
            }
            Err(ConfigErrors::sorted(errors))
        }
    }
}

fn error_at(file: &str, line: usize, col: usize, path: String, message: String) -> ConfigError {
    ConfigError {
        file: file.to_owned(),
        line,
        col,
        path,
        message,
    }
}
