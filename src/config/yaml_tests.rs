//! Tests for the YAML → node tree stage.

#![allow(clippy::unwrap_used)]

use super::*;

/// Compact rendering: scalars as text (quoted ones in quotes), lists `[..]`, maps `{k: v}`.
fn render(node: &Node) -> String {
    match &node.kind {
        NodeKind::Scalar { value, plain: true } => value.clone(),
        NodeKind::Scalar {
            value,
            plain: false,
        } => format!("{value:?}"),
        NodeKind::Seq(items) => format!(
            "[{}]",
            items.iter().map(render).collect::<Vec<_>>().join(", ")
        ),
        NodeKind::Map(entries) => format!(
            "{{{}}}",
            entries
                .iter()
                .map(|(k, v)| format!("{}: {}", render(k), render(v)))
                .collect::<Vec<_>>()
                .join(", ")
        ),
    }
}

fn issues(text: &str) -> Vec<String> {
    parse(text)
        .issues
        .iter()
        .map(|i| format!("{}:{}: {}: {}", i.mark.line, i.mark.col, i.path, i.message))
        .collect()
}

fn root(text: &str) -> Node {
    let doc = parse(text);
    assert!(doc.issues.is_empty(), "{:?}", issues(text));
    doc.root.unwrap()
}

#[test]
fn marks_are_one_based_and_block_maps_start_at_their_first_key() {
    let node = root("a: 1\nb:\n  - name: x\n    c: 'q'\n");
    assert_eq!(node.mark, Mark { line: 1, col: 1 });
    let NodeKind::Map(entries) = &node.kind else {
        panic!("map")
    };
    assert_eq!(entries[0].1.mark, Mark { line: 1, col: 4 });
    let NodeKind::Seq(items) = &entries[1].1.kind else {
        panic!("seq")
    };
    assert_eq!(entries[1].1.mark, Mark { line: 3, col: 3 });
    assert_eq!(items[0].mark, Mark { line: 3, col: 5 });
    assert_eq!(render(&node), "{a: 1, b: [{name: x, c: \"q\"}]}");
}

#[test]
fn flow_collections_start_at_their_bracket() {
    let node = root("x: {a: [1, 2]}\n");
    let NodeKind::Map(entries) = &node.kind else {
        panic!("map")
    };
    assert_eq!(entries[0].1.mark, Mark { line: 1, col: 4 });
}

#[test]
fn quoted_block_and_str_tagged_scalars_are_not_plain() {
    let node = root("a: \"1\"\nb: |\n  text\nc: !!str 5\nd: 5\n");
    assert_eq!(render(&node), "{a: \"1\", b: \"text\\n\", c: \"5\", d: 5}");
}

#[test]
fn aliases_expand_to_copies() {
    let node = root("base: &b {command: npx, args: [x]}\nother: *b\n");
    assert_eq!(
        render(&node),
        "{base: {command: npx, args: [x]}, other: {command: npx, args: [x]}}"
    );
    let NodeKind::Map(entries) = &node.kind else {
        panic!("map")
    };
    // The copy points at the alias.
    assert_eq!(entries[1].1.mark, Mark { line: 2, col: 8 });
}

#[test]
fn duplicate_keys_are_reported_and_the_first_kept() {
    let text = "a: 1\nt:\n  - x: 1\n    x: 2\na: 3\n";
    assert_eq!(
        issues(text),
        vec![
            "4:5: t[0]: duplicate key `x` (first defined at line 3)",
            "5:1: : duplicate key `a` (first defined at line 1)",
        ]
    );
    assert_eq!(render(&parse(text).root.unwrap()), "{a: 1, t: [{x: 1}]}");
}

#[test]
fn syntax_errors_have_positions() {
    assert_eq!(
        issues("a: 1\n b: 2\n"),
        vec!["2:3: : invalid YAML: mapping values are not allowed in this context"]
    );
    assert_eq!(
        issues("a: [1, 2\n"),
        vec!["2:1: : invalid YAML: while parsing a flow sequence, expected ',' or ']'"]
    );
    assert_eq!(
        issues("a: *nope\n"),
        vec!["1:4: : invalid YAML: while parsing node, found unknown anchor"]
    );
}

#[test]
fn multiple_documents_are_rejected() {
    assert_eq!(
        issues("a: 1\n---\nb: 2\n"),
        vec!["2:1: : a second YAML document starts here; the config must be a single document"]
    );
}

#[test]
fn empty_input_has_no_root() {
    for text in ["", "# only a comment\n", "\n\n"] {
        let doc = parse(text);
        assert!(doc.root.is_none() && doc.issues.is_empty(), "{text:?}");
    }
}

#[test]
fn recursive_alias_is_an_error() {
    assert_eq!(
        issues("a: &x [*x]\n"),
        vec!["1:8: : alias refers to an anchor that encloses it (recursive alias)"]
    );
}

#[test]
fn deep_nesting_is_bounded() {
    let deep = format!("{}{}", "[".repeat(100), "]".repeat(100));
    assert_eq!(
        issues(&deep),
        vec!["1:65: : nesting too deep: more than 64 levels"]
    );
    // The scanner has its own, higher, limit for flow collections.
    let deeper = format!("{}{}", "[".repeat(10_000), "]".repeat(10_000));
    assert!(issues(&deeper)[0].contains("recursion limit exceeded"));
    let block: String = (0..200).map(|i| format!("{}k:\n", " ".repeat(i))).collect();
    assert!(issues(&block)[0].contains("nesting too deep"));
    // An alias may not smuggle depth past the limit either.
    let mut text = format!("a: &a {}{}\n", "[".repeat(40), "]".repeat(40));
    text.push_str(&format!("b: {}*a{}\n", "[".repeat(40), "]".repeat(40)));
    assert!(issues(&text)[0].contains("nesting too deep once this alias is expanded"));
}

#[test]
fn alias_bombs_are_stopped() {
    let mut text = String::from("a0: &a0 [x, x, x, x, x, x, x, x, x, x]\n");
    for i in 1..10 {
        let refs = vec![format!("*a{}", i - 1); 10].join(", ");
        text.push_str(&format!("a{i}: &a{i} [{refs}]\n"));
    }
    let start = std::time::Instant::now();
    let found = issues(&text);
    assert_eq!(found.len(), 1, "{found:?}");
    assert!(found[0].contains("document too large"), "{found:?}");
    assert!(start.elapsed() < std::time::Duration::from_secs(5));
}

#[test]
fn paths_quote_odd_keys() {
    assert_eq!(child_path("", "a"), "a");
    assert_eq!(child_path("a", "b_c-d"), "a.b_c-d");
    assert_eq!(child_path("a", "x.y"), "a[\"x.y\"]");
    assert_eq!(index_path("a", 3), "a[3]");
}
