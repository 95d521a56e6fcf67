//! `.dockerignore` as Docker (and buildah) read it: a path is left out of the build context
//! when the last pattern matching it or one of its parent directories is not a `!` exception.
//! Patterns: `*` and `?` within one path segment, `**` across any number of them.

use std::path::Path;

/// The patterns of a `.dockerignore`, in order.
#[derive(Debug)]
pub struct DockerIgnore {
    patterns: Vec<Pattern>,
}

#[derive(Debug)]
struct Pattern {
    /// `!pattern`: lets back in what an earlier pattern left out.
    exception: bool,
    segments: Vec<String>,
}

impl DockerIgnore {
    pub fn parse(text: &str) -> DockerIgnore {
        let patterns = text
            .lines()
            .map(str::trim)
            .filter(|l| !l.is_empty() && !l.starts_with('#'))
            .map(|line| {
                let (exception, pattern) = match line.strip_prefix('!') {
                    Some(rest) => (true, rest.trim()),
                    None => (false, line),
                };
                assert!(
                    !pattern.contains(['[', '\\']),
                    "character classes and escapes are not supported here: {line}"
                );
                let segments = pattern
                    .trim_start_matches('/')
                    .split('/')
                    .filter(|s| !s.is_empty() && *s != ".")
                    .map(str::to_owned)
                    .collect();
                Pattern {
                    exception,
                    segments,
                }
            })
            .collect();
        DockerIgnore { patterns }
    }

    /// Whether `path` (relative to the context, `/`-separated) is left out of the context.
    pub fn excludes(&self, path: &str) -> bool {
        let segments: Vec<&str> = path.split('/').filter(|s| !s.is_empty()).collect();
        let mut excluded = false;
        for pattern in &self.patterns {
            let hit = (1..=segments.len()).any(|n| matches(&pattern.segments, &segments[..n]));
            if hit {
                excluded = !pattern.exception;
            }
        }
        excluded
    }

    /// Whether every file under `path` (a file, or a directory walked recursively) of the
    /// repository at `root` is in the context; returns the first one left out.
    pub fn first_excluded_under(&self, root: &Path, path: &str) -> Option<String> {
        if self.excludes(path) {
            return Some(path.to_owned());
        }
        let full = root.join(path);
        if !full.is_dir() {
            return None;
        }
        let mut entries: Vec<_> = std::fs::read_dir(&full)
            .unwrap_or_else(|e| panic!("{}: {e}", full.display()))
            .map(|e| e.expect("a directory entry").file_name())
            .collect();
        entries.sort();
        entries.into_iter().find_map(|name| {
            let child = format!("{path}/{}", name.to_string_lossy());
            self.first_excluded_under(root, &child)
        })
    }
}

/// Pattern segments against path segments: `**` matches any number of segments.
fn matches(pattern: &[String], path: &[&str]) -> bool {
    match pattern.split_first() {
        None => path.is_empty(),
        Some((first, rest)) if first == "**" => {
            (0..=path.len()).any(|skip| matches(rest, &path[skip..]))
        }
        Some((first, rest)) => match path.split_first() {
            Some((segment, path_rest)) => {
                segment_matches(first.as_bytes(), segment.as_bytes()) && matches(rest, path_rest)
            }
            None => false,
        },
    }
}

/// One segment: `*` matches any run of characters, `?` any one.
fn segment_matches(pattern: &[u8], text: &[u8]) -> bool {
    match pattern.split_first() {
        None => text.is_empty(),
        Some((b'*', rest)) => (0..=text.len()).any(|skip| segment_matches(rest, &text[skip..])),
        Some((b'?', rest)) => !text.is_empty() && segment_matches(rest, &text[1..]),
        Some((c, rest)) => text.first() == Some(c) && segment_matches(rest, &text[1..]),
    }
}

#[test]
fn patterns_follow_dockers_rules() {
    let ignore =
        DockerIgnore::parse("# allowlist\n*\n!src\n!demo-server/src\n**/*.swp\n!keep/*.swp\n");
    for (path, excluded) in [
        ("target", true),
        ("target/debug/switchyard", true),
        (".git/HEAD", true),
        ("src", false),
        ("src/http/mod.rs", false),
        ("src/http/.mod.rs.swp", true),
        ("demo-server", true),
        ("demo-server/Cargo.toml", true),
        ("demo-server/src/main.rs", false),
        ("keep/a.swp", false),
    ] {
        assert_eq!(ignore.excludes(path), excluded, "{path}");
    }
}
