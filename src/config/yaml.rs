//! YAML text → marked node tree (`Node`): one document, aliases expanded (bounded), duplicate
//! keys reported, positions 1-based. Built iteratively over `yaml-rust2` parser events.

use std::collections::HashMap;

use yaml_rust2::parser::{Event, Parser, Tag};
use yaml_rust2::scanner::{Marker, TScalarStyle};

/// Deepest nesting accepted (the schema needs about 8 levels); bounds every recursion over nodes.
pub const MAX_DEPTH: usize = 64;
/// Most nodes a document may have once aliases are expanded (stops "billion laughs" inputs).
pub const MAX_NODES: usize = 100_000;

/// A 1-based position in the source text.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord)]
pub struct Mark {
    pub line: usize,
    pub col: usize,
}

impl Mark {
    /// `yaml-rust2` markers have 1-based lines and 0-based columns.
    fn from_marker(marker: &Marker) -> Mark {
        Mark {
            line: marker.line(),
            col: marker.col() + 1,
        }
    }
}

/// A YAML node with where it starts. No `Debug`: scalars may hold secrets.
#[derive(Clone)]
pub struct Node {
    pub kind: NodeKind,
    pub mark: Mark,
}

#[derive(Clone)]
pub enum NodeKind {
    /// `plain` is false for quoted, block (`|`, `>`) and `!!str`-tagged scalars: those are
    /// always strings, while plain ones are resolved by the YAML 1.2 core schema.
    Scalar {
        value: String,
        plain: bool,
    },
    Seq(Vec<Node>),
    /// Entries in document order; keys are unique (duplicates were reported and dropped).
    Map(Vec<(Node, Node)>),
}

impl Node {
    /// The text of a scalar node.
    pub fn scalar(&self) -> Option<&str> {
        match &self.kind {
            NodeKind::Scalar { value, .. } => Some(value),
            _ => None,
        }
    }

    /// What kind of node this is, for messages ("a mapping", "a list", "a string").
    pub fn describe(&self) -> &'static str {
        match &self.kind {
            NodeKind::Scalar { .. } => "a scalar",
            NodeKind::Seq(_) => "a list",
            NodeKind::Map(_) => "a mapping",
        }
    }
}

/// A problem found while reading the YAML itself.
pub struct YamlIssue {
    pub mark: Mark,
    pub path: String,
    pub message: String,
}

/// The result of reading a file: the root node unless a fatal problem stopped reading (`None`
/// with an empty `issues` means the file holds no document at all).
pub struct Document {
    pub root: Option<Node>,
    pub issues: Vec<YamlIssue>,
}

/// Path of a mapping entry: `parent.key`, or `parent["odd key"]` for keys that would be ambiguous.
pub fn child_path(parent: &str, key: &str) -> String {
    let simple = !key.is_empty()
        && key
            .chars()
            .all(|c| c.is_ascii_alphanumeric() || c == '_' || c == '-');
    match (simple, parent.is_empty()) {
        (true, true) => key.to_owned(),
        (true, false) => format!("{parent}.{key}"),
        (false, _) => format!("{parent}[{key:?}]"),
    }
}

/// Path of a list item: `parent[index]`.
pub fn index_path(parent: &str, index: usize) -> String {
    format!("{parent}[{index}]")
}

/// Reads exactly one YAML document.
pub fn parse(text: &str) -> Document {
    let mut builder = Builder::default();
    let fatal = builder.run(text).err();
    let mut issues = builder.issues;
    match fatal {
        Some(issue) => {
            issues.push(issue);
            Document { root: None, issues }
        }
        None => Document {
            root: builder.root,
            issues,
        },
    }
}

/// A node being built, with the bookkeeping needed for anchors and limits.
struct Built {
    node: Node,
    /// Nodes in this subtree.
    size: usize,
    /// Levels in this subtree (a scalar is 1).
    height: usize,
}

enum FrameKind {
    Seq(Vec<Node>),
    Map {
        entries: Vec<(Node, Node)>,
        key: Option<Node>,
        /// Scalar keys seen so far → line of their first definition.
        seen: HashMap<String, usize>,
    },
}

struct Frame {
    kind: FrameKind,
    mark: Mark,
    /// Byte index of the start event, to pick the earlier of it and the first key's position.
    index: usize,
    anchor: usize,
    size: usize,
    height: usize,
}

#[derive(Default)]
struct Builder {
    stack: Vec<Frame>,
    anchors: HashMap<usize, Built>,
    root: Option<Node>,
    issues: Vec<YamlIssue>,
    total_nodes: usize,
}

fn fatal(marker: &Marker, message: impl Into<String>) -> YamlIssue {
    YamlIssue {
        mark: Mark::from_marker(marker),
        path: String::new(),
        message: message.into(),
    }
}

/// `!!str` and the non-specific `!` tag force a scalar to be a string.
fn forces_string(tag: Option<&Tag>) -> bool {
    tag.is_some_and(|t| t.suffix == "str" || (t.handle == "!" && t.suffix.is_empty()))
}

impl Builder {
    fn run(&mut self, text: &str) -> Result<(), YamlIssue> {
        let mut parser = Parser::new_from_str(text);
        let mut documents = 0;
        loop {
            let (event, marker) = parser
                .next_token()
                .map_err(|e| fatal(e.marker(), format!("invalid YAML: {}", e.info())))?;
            match event {
                Event::StreamEnd => return Ok(()),
                Event::DocumentStart => {
                    documents += 1;
                    if documents > 1 {
                        return Err(fatal(
                            &marker,
                            "a second YAML document starts here; the config must be a single document",
                        ));
                    }
                }
                Event::Scalar(value, style, anchor, tag) => {
                    let plain = style == TScalarStyle::Plain && !forces_string(tag.as_ref());
                    let node = Node {
                        kind: NodeKind::Scalar { value, plain },
                        mark: Mark::from_marker(&marker),
                    };
                    self.count(&marker, 1)?;
                    self.finish(
                        anchor,
                        Built {
                            node,
                            size: 1,
                            height: 1,
                        },
                        marker.index(),
                    );
                }
                Event::SequenceStart(anchor, _) => {
                    self.open(FrameKind::Seq(Vec::new()), &marker, anchor)?
                }
                Event::MappingStart(anchor, _) => self.open(
                    FrameKind::Map {
                        entries: Vec::new(),
                        key: None,
                        seen: HashMap::new(),
                    },
                    &marker,
                    anchor,
                )?,
                Event::SequenceEnd | Event::MappingEnd => self.close(),
                Event::Alias(id) => self.alias(id, &marker)?,
                Event::StreamStart | Event::DocumentEnd | Event::Nothing => {}
            }
        }
    }

    fn count(&mut self, marker: &Marker, nodes: usize) -> Result<(), YamlIssue> {
        self.total_nodes = self.total_nodes.saturating_add(nodes);
        if self.total_nodes > MAX_NODES {
            return Err(fatal(
                marker,
                format!(
                    "document too large: more than {MAX_NODES} nodes once aliases are expanded"
                ),
            ));
        }
        Ok(())
    }

    fn open(&mut self, kind: FrameKind, marker: &Marker, anchor: usize) -> Result<(), YamlIssue> {
        if self.stack.len() >= MAX_DEPTH {
            return Err(fatal(
                marker,
                format!("nesting too deep: more than {MAX_DEPTH} levels"),
            ));
        }
        self.count(marker, 1)?;
        self.stack.push(Frame {
            kind,
            mark: Mark::from_marker(marker),
            index: marker.index(),
            anchor,
            size: 1,
            height: 1,
        });
        Ok(())
    }

    fn close(&mut self) {
        let Some(frame) = self.stack.pop() else {
            return;
        };
        let kind = match frame.kind {
            FrameKind::Seq(items) => NodeKind::Seq(items),
            FrameKind::Map { entries, .. } => NodeKind::Map(entries),
        };
        let built = Built {
            node: Node {
                kind,
                mark: frame.mark,
            },
            size: frame.size,
            height: frame.height,
        };
        self.finish(frame.anchor, built, frame.index);
    }

    fn alias(&mut self, id: usize, marker: &Marker) -> Result<(), YamlIssue> {
        let Some(target) = self.anchors.get(&id) else {
            return Err(fatal(
                marker,
                "alias refers to an anchor that encloses it (recursive alias)",
            ));
        };
        if self.stack.len() + target.height > MAX_DEPTH {
            return Err(fatal(
                marker,
                format!(
                    "nesting too deep once this alias is expanded: more than {MAX_DEPTH} levels"
                ),
            ));
        }
        let (size, height) = (target.size, target.height);
        // Check the budget before copying, so a huge expansion is never materialized.
        self.count(marker, size)?;
        let Some(target) = self.anchors.get(&id) else {
            return Ok(());
        };
        let mut node = target.node.clone();
        // Errors about the expanded copy point at the alias.
        node.mark = Mark::from_marker(marker);
        self.finish(0, Built { node, size, height }, marker.index());
        Ok(())
    }

    /// Records an anchor and hands a completed node to its parent (or makes it the root).
    fn finish(&mut self, anchor: usize, built: Built, index: usize) {
        if anchor != 0 {
            let copy = Built {
                node: built.node.clone(),
                size: built.size,
                height: built.height,
            };
            self.anchors.insert(anchor, copy);
        }
        if let Some(issue) = self.duplicate_key() {
            self.issues.push(issue);
            if let Some(Frame {
                kind: FrameKind::Map { key, .. },
                ..
            }) = self.stack.last_mut()
            {
                *key = None;
            }
            return;
        }
        let Some(frame) = self.stack.last_mut() else {
            self.root = Some(built.node);
            return;
        };
        frame.size = frame.size.saturating_add(built.size);
        frame.height = frame.height.max(built.height + 1);
        match &mut frame.kind {
            FrameKind::Seq(items) => items.push(built.node),
            FrameKind::Map { entries, key, seen } => match key.take() {
                None => {
                    if entries.is_empty() && index < frame.index {
                        // Block mappings start at their first key, not where the parser says.
                        frame.mark = built.node.mark;
                    }
                    *key = Some(built.node);
                }
                Some(k) => {
                    if let Some(text) = k.scalar() {
                        seen.insert(text.to_owned(), k.mark.line);
                    }
                    entries.push((k, built.node));
                }
            },
        }
    }

    /// When the node being finished is the value of an already-defined key: the issue to report.
    fn duplicate_key(&self) -> Option<YamlIssue> {
        let Frame {
            kind:
                FrameKind::Map {
                    key: Some(key),
                    seen,
                    ..
                },
            ..
        } = self.stack.last()?
        else {
            return None;
        };
        let text = key.scalar()?;
        let first = seen.get(text)?;
        Some(YamlIssue {
            mark: key.mark,
            path: self.path_of_top(),
            message: format!("duplicate key `{text}` (first defined at line {first})"),
        })
    }

    /// Document path of the innermost open container.
    fn path_of_top(&self) -> String {
        let mut path = String::new();
        for frame in self.stack.iter().take(self.stack.len().saturating_sub(1)) {
            path = match &frame.kind {
                FrameKind::Seq(items) => index_path(&path, items.len()),
                FrameKind::Map { key, .. } => {
                    let key = key.as_ref().and_then(Node::scalar).unwrap_or("?");
                    child_path(&path, key)
                }
            };
        }
        path
    }
}

#[cfg(test)]
#[path = "yaml_tests.rs"]
mod tests;
