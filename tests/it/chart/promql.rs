//! Metric and label names: the series the gateway's registry really exposes, and the
//! `switchyard_*` names and label names that PromQL expressions (dashboard, alert rules) use.

use std::collections::{BTreeMap, BTreeSet};

use prometheus::core::{Collector, MetricVec, MetricVecBuilder};

use crate::support::peers::repo;

/// Labels Prometheus attaches to every scraped series (target labels: `job`, `instance`, and
/// what service discovery adds), which expressions may use beside the metric's own.
pub const TARGET_LABELS: &[&str] = &[
    "job",
    "instance",
    "namespace",
    "pod",
    "service",
    "container",
    "endpoint",
];

/// Series name (histograms as `_bucket`, `_sum`, `_count`) → its label names, as rendered by
/// the gateway's own registry (`switchyard::metrics`, served at /metrics).
pub type Exported = BTreeMap<String, BTreeSet<String>>;

/// The exposition of the process's registry, after giving every labelled family one series: a
/// family without series is not exposed at all. Label values are placeholders; nothing is
/// incremented or observed.
pub fn exported() -> Exported {
    let m = switchyard::metrics::get();
    touch(&m.requests);
    touch(&m.request_seconds);
    touch(&m.upstream_calls);
    touch(&m.upstream_seconds);
    touch(&m.sessions);
    touch(&m.sse_streams);
    touch(&m.stdio_restarts);
    touch(&m.auth_failures);
    touch(&m.redis_seconds);
    touch(&m.redis_errors);
    touch(&m.config_reloads);
    touch(&m.connections_open);
    touch(&m.connections_refused);
    touch(&m.connections_timed_out);
    touch(&m.notifications_dropped);
    touch(&m.server_requests_refused);
    touch(&m.limit_refusals);
    touch(&m.limit_usage);
    let text = String::from_utf8(m.render()).expect("the exposition is UTF-8");
    let mut series: Exported = BTreeMap::new();
    for line in text
        .lines()
        .filter(|l| !l.starts_with('#') && !l.is_empty())
    {
        let (name, labels) = match line.split_once('{') {
            Some((name, rest)) => (name, rest.split_once('}').map_or("", |(l, _)| l)),
            None => (line.split_whitespace().next().unwrap_or_default(), ""),
        };
        let entry = series.entry(name.to_owned()).or_default();
        // `a="x",b="y"`: values never contain `="` here (placeholders and config names).
        for pair in labels.split("\",").filter(|p| !p.is_empty()) {
            if let Some((label, _)) = pair.split_once('=') {
                entry.insert(label.to_owned());
            }
        }
    }
    series.retain(|name, _| name.starts_with("switchyard_"));
    series
}

/// The metric names src/metrics.rs registers: its string literals that are exactly a
/// `switchyard_*` name (`"switchyard_x"`, not `"switchyard_x{...} 1"` in its unit test).
pub fn declared_in_source() -> BTreeSet<String> {
    let path = repo().join("src/metrics.rs");
    let source =
        std::fs::read_to_string(&path).unwrap_or_else(|e| panic!("{}: {e}", path.display()));
    let names: BTreeSet<String> = occurrences(&source)
        .into_iter()
        .filter(|(end, name)| {
            let start = end - name.len();
            source[..start].ends_with('"') && source[*end..].starts_with('"')
        })
        .map(|(_, name)| name)
        .collect();
    assert!(
        names.len() >= 10,
        "metric names in {}: {names:?}",
        path.display()
    );
    names
}

/// Creates the series with placeholder label values (as many as the family declares).
fn touch<T: MetricVecBuilder>(vec: &MetricVec<T>) {
    let arity = vec.desc().first().map_or(0, |d| d.variable_labels.len());
    let values = vec!["chart-test"; arity];
    let _ = vec.with_label_values(&values);
}

/// Every `switchyard_*` name in a text, in order of appearance.
pub fn metric_names(text: &str) -> Vec<String> {
    occurrences(text)
        .into_iter()
        .map(|(_, name)| name)
        .collect()
}

/// `(byte offset just after the name, name)` of every `switchyard_*` identifier.
fn occurrences(text: &str) -> Vec<(usize, String)> {
    let is_ident = |c: char| c.is_ascii_alphanumeric() || c == '_';
    let mut found = Vec::new();
    let mut from = 0;
    while let Some(at) = text[from..].find("switchyard_").map(|i| from + i) {
        let len = text[at..]
            .find(|c: char| !is_ident(c))
            .unwrap_or(text.len() - at);
        // A longer identifier merely containing the prefix (e.g. `my_switchyard_x`) is not one.
        if !text[..at].chars().next_back().is_some_and(is_ident) {
            found.push((at + len, text[at..at + len].to_owned()));
        }
        from = at + len;
    }
    found
}

/// What an expression refers to: `(metric, label names in its matchers)` for each
/// `switchyard_*` selector, and the label names of `by`, `without`, `on` and `ignoring`.
#[derive(Debug, Default)]
pub struct Uses {
    pub selectors: Vec<(String, Vec<String>)>,
    pub grouping: Vec<String>,
}

pub fn uses(expr: &str) -> Uses {
    let mut uses = Uses::default();
    for (end, name) in occurrences(expr) {
        let labels = match expr[end..].strip_prefix('{') {
            Some(body) => matcher_labels(body),
            None => Vec::new(),
        };
        uses.selectors.push((name, labels));
    }
    for keyword in ["by", "without", "on", "ignoring"] {
        for (i, _) in expr.match_indices(keyword) {
            let before_ok = expr[..i]
                .chars()
                .next_back()
                .is_none_or(|c| !(c.is_ascii_alphanumeric() || c == '_'));
            let after = expr[i + keyword.len()..].trim_start();
            if before_ok && let Some(list) = after.strip_prefix('(') {
                let list = list.split(')').next().unwrap_or_default();
                uses.grouping.extend(
                    list.split(',')
                        .map(str::trim)
                        .filter(|l| !l.is_empty())
                        .map(str::to_owned),
                );
            }
        }
    }
    uses
}

/// Label names of `a="x", b=~"y|z", c!="w"` up to the closing brace (quoted values skipped).
fn matcher_labels(body: &str) -> Vec<String> {
    let mut labels = Vec::new();
    let mut chars = body.char_indices().peekable();
    let mut start = 0;
    while let Some((i, c)) = chars.next() {
        match c {
            '}' => break,
            '=' | '!' => {
                let label = body[start..i].trim().trim_start_matches(',').trim();
                if !label.is_empty() {
                    labels.push(label.to_owned());
                }
                // Skip the operator's rest and the quoted value (with escapes).
                for (_, c) in chars.by_ref() {
                    if c == '"' {
                        break;
                    }
                }
                let mut escaped = false;
                for (j, c) in chars.by_ref() {
                    if c == '"' && !escaped {
                        start = j + 1;
                        break;
                    }
                    escaped = c == '\\' && !escaped;
                }
            }
            _ => {}
        }
    }
    labels
}

/// Problems with the names an expression uses: unknown metrics, matcher labels the metric
/// does not have, grouping labels that none of its metrics has.
pub fn problems(expr: &str, exported: &Exported) -> Vec<String> {
    let uses = uses(expr);
    let mut problems = Vec::new();
    let mut available: BTreeSet<&str> = TARGET_LABELS.iter().copied().collect();
    for (metric, labels) in &uses.selectors {
        let Some(own) = exported.get(metric) else {
            problems.push(format!("unknown metric {metric}"));
            continue;
        };
        available.extend(own.iter().map(String::as_str));
        for label in labels {
            if !own.contains(label) && !TARGET_LABELS.contains(&label.as_str()) {
                problems.push(format!("{metric} has no label {label} (it has {own:?})"));
            }
        }
    }
    for label in &uses.grouping {
        if !available.contains(label.as_str()) {
            problems.push(format!(
                "grouping by {label}, which none of its metrics has"
            ));
        }
    }
    problems
}

#[test]
fn the_expression_reader_sees_names_matchers_and_grouping() {
    let expr = r#"sum by (tenant, le) (rate(switchyard_x_bucket{a="1", b=~"x|y\"}", c!="z"}[5m])) / ignoring(outcome) group_left sum(switchyard_y)"#;
    let uses = uses(expr);
    assert_eq!(
        uses.selectors,
        vec![
            (
                "switchyard_x_bucket".to_owned(),
                vec!["a".into(), "b".into(), "c".into()]
            ),
            ("switchyard_y".to_owned(), vec![]),
        ]
    );
    assert_eq!(uses.grouping, vec!["tenant", "le", "outcome"]);
    assert_eq!(
        metric_names("up and my_switchyard_a or switchyard_b"),
        vec!["switchyard_b"]
    );
}
