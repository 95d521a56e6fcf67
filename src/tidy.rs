//! Tidy test: the layers drawn in ARCHITECTURE.md ("Layers") hold in the code. Every
//! `src/**/*.rs` is scanned as text, not parsed as Rust: comments, strings and character
//! literals are blanked out first, then every path into another top-level module is found —
//! `crate::x`, `crate::{x, y::{..}}` (nested, over many lines), and `super::` chains that
//! climb out of their top-level module, resolved against the file's module path (`#[path]`
//! and inline `mod x { .. }` blocks included). A module may import only modules of the layers
//! below its own; the test fails naming every `file:line` that imports one of its own layer
//! or above. The table is [`LAYERS`]; ARCHITECTURE.md's must say the same.

#![allow(clippy::unwrap_used)]

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};

/// The layers, top first. A module may import the modules of the layers below its own only.
const LAYERS: &[&[&str]] = &[
    &["app"],
    &["http", "reload"],
    &["router"],
    &["gateway"],
    &["tenant"],
    &["limits", "policy"],
    &["session"],
    &["upstream"],
    &["events"],
    &["cluster", "listener", "auth", "telemetry"],
    &["signing", "store"],
    &["error"],
    &["protocol"],
    &[
        "jsonrpc", "config", "metrics", "crypto", "clock", "woken", "workers",
    ],
];

/// Crate-root files that are no layer's: the crate roots and this test.
const OUTSIDE: &[&str] = &["lib.rs", "main.rs", "tidy.rs"];

#[test]
fn every_module_imports_only_the_layers_below_its_own() {
    let root = Path::new(env!("CARGO_MANIFEST_DIR")).join("src");
    let files = read_sources(&root);
    let declared = top_level_modules(&std::fs::read_to_string(root.join("lib.rs")).unwrap());
    let listed: Vec<&str> = LAYERS.iter().flat_map(|l| l.iter().copied()).collect();
    for m in &declared {
        assert!(
            listed.contains(&m.as_str()),
            "module `{m}` (src/lib.rs) is in no layer: add it to LAYERS in src/tidy.rs and to \
             the table in ARCHITECTURE.md"
        );
    }
    for m in &listed {
        assert!(
            declared.iter().any(|d| d == m),
            "LAYERS names `{m}`, which src/lib.rs does not declare"
        );
    }
    let problems = violations(&scan(&files));
    assert!(
        problems.is_empty(),
        "imports against the layering (ARCHITECTURE.md, \"Layers\"):\n{}",
        problems.join("\n")
    );
}

#[test]
fn architecture_md_draws_the_same_layers() {
    let doc =
        std::fs::read_to_string(Path::new(env!("CARGO_MANIFEST_DIR")).join("ARCHITECTURE.md"))
            .unwrap();
    let drawn = documented_layers(&doc);
    let expected: Vec<Vec<String>> = LAYERS
        .iter()
        .map(|l| l.iter().map(|m| m.to_string()).collect())
        .collect();
    assert_eq!(
        drawn, expected,
        "ARCHITECTURE.md's layer table (between <!-- layers --> and <!-- /layers -->) differs \
         from LAYERS in src/tidy.rs"
    );
}

/// One path into another top-level module.
#[derive(Debug, PartialEq)]
struct Import {
    /// Relative to the crate root, e.g. `src/session/live.rs`.
    file: String,
    line: usize,
    from: String,
    to: String,
}

/// `file:line imports <to> which is above <from>` for every import not into a lower layer.
fn violations(imports: &[Import]) -> Vec<String> {
    let layer = |m: &str| LAYERS.iter().position(|l| l.contains(&m));
    let mut out = Vec::new();
    for i in imports {
        let (Some(from), Some(to)) = (layer(&i.from), layer(&i.to)) else {
            continue;
        };
        let relation = match to.cmp(&from) {
            std::cmp::Ordering::Greater => continue,
            std::cmp::Ordering::Equal => "in the same layer as",
            std::cmp::Ordering::Less => "above",
        };
        out.push(format!(
            "{}:{} imports {} which is {relation} {}",
            i.file, i.line, i.to, i.from
        ));
    }
    out
}

/// Every `.rs` file under `root`, as (path relative to `root`, text).
fn read_sources(root: &Path) -> Vec<(PathBuf, String)> {
    let mut out = Vec::new();
    let mut dirs = vec![root.to_path_buf()];
    while let Some(dir) = dirs.pop() {
        for entry in std::fs::read_dir(&dir).unwrap() {
            let path = entry.unwrap().path();
            if path.is_dir() {
                dirs.push(path);
            } else if path.extension().is_some_and(|e| e == "rs") {
                let text = std::fs::read_to_string(&path).unwrap();
                out.push((path.strip_prefix(root).unwrap().to_path_buf(), text));
            }
        }
    }
    out.sort();
    out
}

/// The modules `lib.rs` declares (`mod x;`, `pub mod x;`), but not one under `#[cfg(test)]`.
fn top_level_modules(lib: &str) -> Vec<String> {
    let code = blank(lib);
    let mut out = Vec::new();
    let mut test_only = false;
    for line in code.lines().map(str::trim) {
        if line.starts_with("#[cfg(test)]") {
            test_only = true;
            continue;
        }
        let decl = line.strip_prefix("pub ").unwrap_or(line);
        if let Some(name) = decl.strip_prefix("mod ").and_then(|r| r.strip_suffix(';'))
            && !test_only
        {
            out.push(name.trim().to_owned());
        }
        if !line.is_empty() {
            test_only = false;
        }
    }
    out
}

/// The paths into other top-level modules in `files` (relative to `src/`).
fn scan(files: &[(PathBuf, String)]) -> Vec<Import> {
    let paths = module_paths(files);
    let mut out = Vec::new();
    for (file, text) in files {
        let Some(path) = paths.get(file) else {
            continue;
        };
        let Some(from) = path.first() else {
            continue;
        };
        let shown = Path::new("src").join(file).display().to_string();
        for (line, to) in references(&blank(text), path) {
            if to != *from {
                out.push(Import {
                    file: shown.clone(),
                    line,
                    from: from.clone(),
                    to,
                });
            }
        }
    }
    out
}

/// Each file's module path (`["session", "live", "streams"]`): from where it lies, unless a
/// `#[path = ".."] mod name;` declares it elsewhere. The crate roots and this test get none.
fn module_paths(files: &[(PathBuf, String)]) -> BTreeMap<PathBuf, Vec<String>> {
    let mut paths: BTreeMap<PathBuf, Vec<String>> = BTreeMap::new();
    for (file, _) in files {
        let name = file.to_string_lossy();
        if OUTSIDE.contains(&name.as_ref()) {
            continue;
        }
        let mut path: Vec<String> = file
            .components()
            .map(|c| c.as_os_str().to_string_lossy().into_owned())
            .collect();
        let last = path.pop().unwrap_or_default();
        if last != "mod.rs" {
            path.push(last.trim_end_matches(".rs").to_owned());
        }
        paths.insert(file.clone(), path);
    }
    // A `#[path]` declaration may name a file that itself declares one: settle them in turn.
    for _ in 0..files.len() {
        let mut changed = false;
        for (file, text) in files {
            let Some(declaring) = paths.get(file).cloned() else {
                continue;
            };
            for (target, name) in path_attributes(text) {
                let target = file.parent().unwrap_or(Path::new("")).join(target);
                let mut path = declaring.clone();
                path.push(name);
                if paths.get(&target) != Some(&path) {
                    paths.insert(target, path);
                    changed = true;
                }
            }
        }
        if !changed {
            break;
        }
    }
    paths
}

/// `(file, module name)` of every `#[path = "file"] mod name;` (attributes are read from the
/// raw text: the blanked one has lost the string).
fn path_attributes(text: &str) -> Vec<(String, String)> {
    let mut out = Vec::new();
    let mut pending: Option<String> = None;
    for line in text.lines().map(str::trim) {
        if let Some(rest) = line.strip_prefix("#[path = \"") {
            pending = rest.split('"').next().map(str::to_owned);
            continue;
        }
        if line.starts_with("#[") || line.starts_with("///") {
            continue;
        }
        if let Some(file) = pending.take() {
            let decl = line
                .trim_start_matches("pub(crate) ")
                .trim_start_matches("pub(super) ")
                .trim_start_matches("pub ");
            if let Some(name) = decl.strip_prefix("mod ").and_then(|r| r.strip_suffix(';')) {
                out.push((file, name.trim().to_owned()));
            }
        }
    }
    out
}

/// `(line, top-level module)` of every path in `code` (blanked) that leaves the file's
/// top-level module, the file being module `path`.
fn references(code: &str, path: &[String]) -> Vec<(usize, String)> {
    let bytes = code.as_bytes();
    let mut out = Vec::new();
    // Inline modules open here: the brace depth each was opened at, innermost last.
    let mut inline: Vec<(usize, String)> = Vec::new();
    let mut depth = 0usize;
    let mut i = 0;
    while i < bytes.len() {
        match bytes[i] {
            b'{' => {
                depth += 1;
                i += 1;
                continue;
            }
            b'}' => {
                depth = depth.saturating_sub(1);
                if inline.last().is_some_and(|(d, _)| *d == depth) {
                    inline.pop();
                }
                i += 1;
                continue;
            }
            _ => {}
        }
        if !starts_word(bytes, i) {
            i += 1;
            continue;
        }
        let word = ident_at(code, i);
        if word.is_empty() {
            i += 1;
            continue;
        }
        let after = i + word.len();
        match word {
            "mod" => {
                let (name, next) = next_ident(code, after);
                let brace = skip_space(bytes, next);
                if !name.is_empty() && bytes.get(brace) == Some(&b'{') {
                    inline.push((depth, name.to_owned()));
                }
            }
            "crate" => {
                if let Some(rest) = path_sep(bytes, after) {
                    for (at, name) in targets(code, rest) {
                        out.push((line_of(code, at), name));
                    }
                }
            }
            "super" => {
                // The chain `super::super::..`, then what it names.
                let mut climbs = 1;
                let mut rest = path_sep(bytes, after);
                while let Some(r) = rest {
                    if ident_at(code, r) == "super" {
                        climbs += 1;
                        rest = path_sep(bytes, r + "super".len());
                    } else {
                        break;
                    }
                }
                let mut here: Vec<&str> = path.iter().map(String::as_str).collect();
                here.extend(inline.iter().map(|(_, n)| n.as_str()));
                if let Some(rest) = rest
                    && climbs == here.len()
                {
                    // Out of the top-level module: at the crate root.
                    for (at, name) in targets(code, rest) {
                        out.push((line_of(code, at), name));
                    }
                }
                i = rest.unwrap_or(after);
                continue;
            }
            _ => {}
        }
        i = after;
    }
    out
}

/// What a path continues with at `at`: one name, or each first name of a `{..}` group.
fn targets(code: &str, at: usize) -> Vec<(usize, String)> {
    let bytes = code.as_bytes();
    let at = skip_space(bytes, at);
    if bytes.get(at) != Some(&b'{') {
        let name = ident_at(code, at);
        return match name {
            "" | "self" | "super" | "crate" => Vec::new(),
            _ => vec![(at, name.to_owned())],
        };
    }
    let mut out = Vec::new();
    let mut depth = 0;
    let mut item_start = true;
    let mut i = at;
    while i < bytes.len() {
        match bytes[i] {
            b'{' => {
                depth += 1;
                if depth == 1 {
                    item_start = true;
                }
            }
            b'}' => {
                depth -= 1;
                if depth == 0 {
                    break;
                }
            }
            b',' if depth == 1 => item_start = true,
            b if depth == 1 && item_start && !b.is_ascii_whitespace() => {
                item_start = false;
                let name = ident_at(code, i);
                if !matches!(name, "" | "self") {
                    out.push((i, name.to_owned()));
                }
            }
            _ => {}
        }
        i += 1;
    }
    out
}

/// The position after `::` (spaces allowed around it) if `at` starts one.
fn path_sep(bytes: &[u8], at: usize) -> Option<usize> {
    let at = skip_space(bytes, at);
    (bytes.get(at..at + 2) == Some(b"::")).then(|| skip_space(bytes, at + 2))
}

fn skip_space(bytes: &[u8], mut at: usize) -> usize {
    while bytes.get(at).is_some_and(u8::is_ascii_whitespace) {
        at += 1;
    }
    at
}

fn next_ident(code: &str, at: usize) -> (&str, usize) {
    let at = skip_space(code.as_bytes(), at);
    let name = ident_at(code, at);
    (name, at + name.len())
}

fn is_ident(b: u8) -> bool {
    b.is_ascii_alphanumeric() || b == b'_'
}

/// Whether a word starts at `at` (not in the middle of an identifier).
fn starts_word(bytes: &[u8], at: usize) -> bool {
    is_ident(bytes[at]) && (at == 0 || !is_ident(bytes[at - 1]))
}

fn ident_at(code: &str, at: usize) -> &str {
    let bytes = code.as_bytes();
    let mut end = at;
    while end < bytes.len() && is_ident(bytes[end]) {
        end += 1;
    }
    &code[at..end]
}

fn line_of(code: &str, at: usize) -> usize {
    code[..at].bytes().filter(|b| *b == b'\n').count() + 1
}

/// `text` with comments, string and character literals replaced by spaces (line breaks and
/// byte offsets kept), so nothing in them reads as a path.
fn blank(text: &str) -> String {
    let bytes = text.as_bytes();
    let mut out = bytes.to_vec();
    let wipe = |out: &mut Vec<u8>, from: usize, to: usize| {
        for b in &mut out[from..to.min(bytes.len())] {
            if *b != b'\n' {
                *b = b' ';
            }
        }
    };
    let mut i = 0;
    while i < bytes.len() {
        let rest = &bytes[i..];
        if rest.starts_with(b"//") {
            let end = rest
                .iter()
                .position(|b| *b == b'\n')
                .map_or(bytes.len(), |p| i + p);
            wipe(&mut out, i, end);
            i = end;
        } else if rest.starts_with(b"/*") {
            // Block comments nest.
            let (mut depth, mut j) = (0, i);
            while j < bytes.len() {
                if bytes[j..].starts_with(b"/*") {
                    depth += 1;
                    j += 2;
                } else if bytes[j..].starts_with(b"*/") {
                    depth -= 1;
                    j += 2;
                    if depth == 0 {
                        break;
                    }
                } else {
                    j += 1;
                }
            }
            wipe(&mut out, i, j);
            i = j;
        } else if let Some((open, hashes)) = raw_string_start(bytes, i) {
            let close: Vec<u8> = std::iter::once(b'"')
                .chain(std::iter::repeat_n(b'#', hashes))
                .collect();
            let body = i + open;
            let end = bytes[body..]
                .windows(close.len())
                .position(|w| w == close.as_slice())
                .map_or(bytes.len(), |p| body + p + close.len());
            wipe(&mut out, i, end);
            i = end;
        } else if bytes[i] == b'"' {
            let mut j = i + 1;
            while j < bytes.len() && bytes[j] != b'"' {
                j += if bytes[j] == b'\\' { 2 } else { 1 };
            }
            wipe(&mut out, i, j + 1);
            i = j + 1;
        } else if bytes[i] == b'\'' {
            // A character literal ('x', '\n', '\u{..}'), not a lifetime or a label.
            let end = if bytes.get(i + 1) == Some(&b'\\') {
                bytes[i + 2..]
                    .iter()
                    .position(|b| *b == b'\'')
                    .map(|p| i + 2 + p + 1)
            } else {
                let ch = text[i + 1..].chars().next().map_or(1, char::len_utf8);
                (bytes.get(i + 1 + ch) == Some(&b'\'')).then_some(i + 2 + ch)
            };
            match end {
                Some(end) => {
                    wipe(&mut out, i, end);
                    i = end;
                }
                None => i += 1,
            }
        } else {
            i += 1;
        }
    }
    String::from_utf8(out).unwrap_or_default()
}

/// `(length of the opening, number of #)` if a raw string (`r"`, `r#"`, `br#"`..) starts at `i`.
fn raw_string_start(bytes: &[u8], i: usize) -> Option<(usize, usize)> {
    if i > 0 && is_ident(bytes[i - 1]) {
        return None;
    }
    let mut j = i;
    if bytes.get(j) == Some(&b'b') {
        j += 1;
    }
    if bytes.get(j) != Some(&b'r') {
        return None;
    }
    j += 1;
    let hashes = bytes[j..].iter().take_while(|b| **b == b'#').count();
    j += hashes;
    (bytes.get(j) == Some(&b'"')).then_some((j + 1 - i, hashes))
}

/// The layers of ARCHITECTURE.md's table: the backticked names of each row's second cell,
/// between `<!-- layers -->` and `<!-- /layers -->`.
fn documented_layers(doc: &str) -> Vec<Vec<String>> {
    let Some(start) = doc.find("<!-- layers -->") else {
        return Vec::new();
    };
    let end = doc[start..]
        .find("<!-- /layers -->")
        .map_or(doc.len(), |e| start + e);
    doc[start..end]
        .lines()
        .filter(|l| l.trim_start().starts_with('|'))
        .filter_map(|row| {
            let cells: Vec<&str> = row.split('|').collect();
            let layer = cells.get(1)?.trim();
            layer.parse::<u32>().ok()?;
            let names = cells.get(2)?;
            Some(
                names
                    .split('`')
                    .skip(1)
                    .step_by(2)
                    .map(str::to_owned)
                    .collect(),
            )
        })
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    fn files(list: &[(&str, &str)]) -> Vec<(PathBuf, String)> {
        list.iter()
            .map(|(p, t)| (PathBuf::from(p), t.to_string()))
            .collect()
    }

    fn found(list: &[(&str, &str)]) -> Vec<String> {
        scan(&files(list))
            .into_iter()
            .map(|i| format!("{}:{} {}->{}", i.file, i.line, i.from, i.to))
            .collect()
    }

    #[test]
    fn paths_in_code_are_found_in_every_form() {
        let text = "use crate::jsonrpc::Message;\n\
                    use crate::{\n    config::{Limits, Secret},\n    metrics,\n    self,\n};\n\
                    fn f() { crate::error::GatewayError::Internal; }\n";
        assert_eq!(
            found(&[("upstream/mod.rs", text)]),
            [
                "src/upstream/mod.rs:1 upstream->jsonrpc",
                "src/upstream/mod.rs:3 upstream->config",
                "src/upstream/mod.rs:4 upstream->metrics",
                "src/upstream/mod.rs:7 upstream->error",
            ]
        );
    }

    #[test]
    fn comments_strings_and_characters_are_not_code() {
        let text = "// use crate::app;\n/* crate::http /* nested */ crate::router */\n\
                    const S: &str = \"crate::gateway\";\nconst R: &str = r#\"crate::\"tenant\"#;\n\
                    const C: char = '\"'; fn f<'a>(x: &'a str) { crate::config::x(); }\n";
        assert_eq!(
            found(&[("events/log.rs", text)]),
            ["src/events/log.rs:5 events->config"]
        );
    }

    #[test]
    fn super_chains_count_only_when_they_leave_the_top_level_module() {
        let mod_rs = "use super::metrics;\n";
        let nested = "use super::Sibling;\nuse super::super::protocol::ListKind;\n\
                      mod tests { use super::*; use super::super::super::jsonrpc; }\n";
        assert_eq!(
            found(&[("session/mod.rs", mod_rs), ("session/live.rs", nested)]),
            [
                "src/session/mod.rs:1 session->metrics",
                "src/session/live.rs:2 session->protocol",
                "src/session/live.rs:3 session->jsonrpc",
            ]
        );
    }

    #[test]
    fn path_attributes_place_a_file_under_its_declaring_module() {
        let parent = "#[path = \"live_streams.rs\"]\nmod streams;\n";
        let child = "use super::super::LiveSession;\nuse super::super::super::events;\n";
        assert_eq!(
            found(&[
                ("session/live.rs", parent),
                ("session/live_streams.rs", child)
            ]),
            ["src/session/live_streams.rs:2 session->events"]
        );
    }

    #[test]
    fn an_import_of_a_layer_above_or_alongside_is_named() {
        let imports = scan(&files(&[
            ("limits/rate/mod.rs", "use crate::tenant::Tenant;\n"),
            ("limits/mod.rs", "\n\nuse crate::policy::ToolPolicies;\n"),
            ("session/live.rs", "use crate::upstream::Connection;\n"),
        ]));
        assert_eq!(
            violations(&imports),
            [
                "src/limits/rate/mod.rs:1 imports tenant which is above limits",
                "src/limits/mod.rs:3 imports policy which is in the same layer as limits",
            ]
        );
    }

    #[test]
    fn lib_rs_declarations_and_the_documented_table_are_read() {
        assert_eq!(
            top_level_modules("pub mod app;\nmod auth;\n#[cfg(test)]\nmod tidy;\npub mod x;\n"),
            ["app", "auth", "x"]
        );
        let doc = "<!-- layers -->\n| Layer | Modules | Owns |\n|---|---|---|\n\
                   | 1 | `app` | wiring |\n| 2 | `http`, `reload` | fronts |\n<!-- /layers -->\n\
                   | 3 | `not` | read |\n";
        assert_eq!(
            documented_layers(doc),
            [
                vec!["app".to_string()],
                vec!["http".into(), "reload".into()]
            ]
        );
    }
}
