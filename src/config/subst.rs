//! `${VAR}` substitution in scalar values: `${VAR}` (an error if unset), `${VAR:-default}`
//! (default when unset or empty, as in the shell) and `$$` for a literal `$`. Messages name
//! variables, never values.

/// Stands in, in messages, for values that came from substitution: they are never echoed.
pub const HIDDEN_VALUE: &str = "(value from the environment)";

/// Whether a scalar takes (part of) its value from the environment.
pub fn uses_env(text: &str) -> bool {
    text.contains("${")
}

/// Expands `text`. `Ok(None)` when there is nothing to expand (no `$`). On failure, one message
/// per problem (unset variable, malformed reference).
pub fn expand(
    text: &str,
    env: &dyn Fn(&str) -> Option<String>,
) -> Result<Option<String>, Vec<String>> {
    if !text.contains('$') {
        return Ok(None);
    }
    let mut out = String::with_capacity(text.len());
    let mut problems = Vec::new();
    let mut rest = text;
    while let Some(dollar) = rest.find('$') {
        out.push_str(&rest[..dollar]);
        let after = &rest[dollar + 1..];
        if let Some(tail) = after.strip_prefix('$') {
            out.push('$');
            rest = tail;
        } else if let Some(body) = after.strip_prefix('{') {
            let Some(close) = body.find('}') else {
                problems.push("unterminated `${` (write `$$` for a literal `$`)".to_owned());
                return Err(problems);
            };
            let reference = &body[..close];
            rest = &body[close + 1..];
            let (name, default) = match reference.split_once(":-") {
                Some((name, default)) => (name, Some(default)),
                None => (reference, None),
            };
            if !is_var_name(name) {
                problems.push(format!(
                    "invalid environment variable reference `${{{name}}}`: names are letters, digits and `_`, not starting with a digit (write `$$` for a literal `$`)"
                ));
                continue;
            }
            match (env(name), default) {
                (Some(value), Some(default)) if value.is_empty() => out.push_str(default),
                (Some(value), _) => out.push_str(&value),
                (None, Some(default)) => out.push_str(default),
                (None, None) => problems.push(format!(
                    "environment variable {name} is not set (use ${{{name}:-default}} for a default)"
                )),
            }
        } else {
            out.push('$');
            rest = after;
        }
    }
    out.push_str(rest);
    if problems.is_empty() {
        Ok(Some(out))
    } else {
        Err(problems)
    }
}

/// `[A-Za-z_][A-Za-z0-9_]*`: a portable environment variable name.
pub fn is_var_name(name: &str) -> bool {
    let mut chars = name.chars();
    chars
        .next()
        .is_some_and(|c| c.is_ascii_alphabetic() || c == '_')
        && chars.all(|c| c.is_ascii_alphanumeric() || c == '_')
}

#[cfg(test)]
#[allow(clippy::unwrap_used)]
mod tests {
    use super::*;

    fn env(name: &str) -> Option<String> {
        match name {
            "HOST" => Some("example.com".into()),
            "EMPTY" => Some(String::new()),
            _ => None,
        }
    }

    fn run(text: &str) -> Result<Option<String>, Vec<String>> {
        expand(text, &env)
    }

    #[test]
    fn plain_text_is_untouched() {
        assert_eq!(run("hello"), Ok(None));
    }

    #[test]
    fn variables_defaults_and_dollars() {
        assert_eq!(
            run("https://${HOST}/mcp"),
            Ok(Some("https://example.com/mcp".into()))
        );
        assert_eq!(run("${MISSING:-fallback}"), Ok(Some("fallback".into())));
        assert_eq!(run("${HOST:-fallback}"), Ok(Some("example.com".into())));
        assert_eq!(run("${EMPTY:-fallback}"), Ok(Some("fallback".into())));
        // Set but empty is a value; only `:-` treats it like unset.
        assert_eq!(run("[${EMPTY}]"), Ok(Some("[]".into())));
        assert_eq!(run("${MISSING:-}"), Ok(Some(String::new())));
        assert_eq!(
            run("cost: $$5 and $${HOST}"),
            Ok(Some("cost: $5 and ${HOST}".into()))
        );
        assert_eq!(run("a $ b $"), Ok(Some("a $ b $".into())));
        assert_eq!(run("${MISSING:-a:-b}"), Ok(Some("a:-b".into())));
    }

    #[test]
    fn problems_name_the_variable() {
        assert_eq!(
            run("${A_TOKEN}-${B_TOKEN}"),
            Err(vec![
                "environment variable A_TOKEN is not set (use ${A_TOKEN:-default} for a default)"
                    .into(),
                "environment variable B_TOKEN is not set (use ${B_TOKEN:-default} for a default)"
                    .into(),
            ])
        );
        assert_eq!(
            run("${1BAD}"),
            Err(vec!["invalid environment variable reference `${1BAD}`: names are letters, digits and `_`, not starting with a digit (write `$$` for a literal `$`)".into()])
        );
        assert_eq!(
            run("x${HOST"),
            Err(vec![
                "unterminated `${` (write `$$` for a literal `$`)".into()
            ])
        );
    }
}
