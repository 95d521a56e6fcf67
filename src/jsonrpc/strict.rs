//! Refusing JSON that two conforming parsers read differently: an object holding two members of
//! the same name, or a member name that is not Unicode (a lone surrogate escape).
//!
//! RFC 8259 §4 leaves duplicate names to the parser: the gateway's readers see the first member,
//! the official SDKs (`JSON.parse`, Python's `json`, pydantic) keep the last. A message the
//! gateway checked by one member and forwarded with another would let a client call a tool its
//! policy hides, or steer a progress token into another session's request. So every message,
//! from a client or an upstream, is checked here once, whole, before any of it is read: with
//! unique names, every parser of the forwarded bytes sees what the gateway saw (RFC 7493, I-JSON).

use std::borrow::Cow;
use std::collections::HashSet;
use std::fmt;

/// Why a message is ambiguous; `Display` names the member, e.g. `params._meta.progressToken`.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Ambiguity {
    /// Two members of one object have this name.
    DuplicateName { path: String },
    /// A member name holds an escape that is not Unicode (an unpaired surrogate).
    InvalidName { path: String },
}

impl fmt::Display for Ambiguity {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Ambiguity::DuplicateName { path } => write!(
                f,
                "duplicate member name `{path}`: every member name of a JSON object must be unique"
            ),
            Ambiguity::InvalidName { path } => {
                write!(f, "member name `{path}` is not valid Unicode")
            }
        }
    }
}

/// Objects with more members than this are checked with a hash set instead of a scan.
const LINEAR_SCAN_MAX: usize = 16;
/// The longest path shown in an error (member names are the sender's, of any length).
const MAX_PATH: usize = 200;

/// Checks that no object in `input` (a JSON text, already validated by `serde_json`) has two
/// members of the same name, comparing names after unescaping as every parser does.
///
/// Iterative (no recursion, whatever the nesting), one pass; a message of ordinary shape whose
/// names have no escapes is told apart without allocating ([`plain`]), anything else (and every
/// ambiguity, for its path) by the full scan.
pub fn check(input: &[u8]) -> Result<(), Ambiguity> {
    if plain(input) {
        return Ok(());
    }
    full(input)
}

/// Nesting the allocation-free pass follows; deeper messages take the full scan.
const PLAIN_DEPTH: usize = 32;
/// Member names the allocation-free pass holds at once (of all open objects).
const PLAIN_NAMES: usize = 32;

/// Whether `input` (valid JSON) certainly has unique member names in every object: no name
/// with an escape, no two siblings with the same bytes, nesting and open names within the
/// fixed bounds above. `false` means only "ask the full scan".
pub(super) fn plain(input: &[u8]) -> bool {
    // Per open container: where its names start in `names`, and whether it is an object.
    let mut starts = [0u8; PLAIN_DEPTH];
    let mut objects = [false; PLAIN_DEPTH];
    let mut depth = 0;
    // Where each name starts and ends (a message past 4 GiB takes the full scan).
    if u32::try_from(input.len()).is_err() {
        return false;
    }
    let mut names = [(0u32, 0u32); PLAIN_NAMES];
    let mut count = 0;
    // The next string is a member name (valid JSON: only after `{` or an object's `,`).
    let mut expect_name = false;
    let mut i = 0;
    while i < input.len() {
        let b = input[i];
        if !STRUCTURAL[b as usize] {
            i += 1;
            continue;
        }
        match b {
            b'"' => {
                let (end, escaped) = string_end(input, i + 1);
                if expect_name {
                    let Some(name) = input.get(i + 1..end) else {
                        return false;
                    };
                    if escaped || count == PLAIN_NAMES || depth == 0 {
                        return false;
                    }
                    let siblings = &names[usize::from(starts[depth - 1])..count];
                    if siblings
                        .iter()
                        .any(|&(s, e)| &input[s as usize..e as usize] == name)
                    {
                        return false;
                    }
                    // Both within the input, whose length fits a u32 (checked above).
                    names[count] = (i as u32 + 1, end as u32);
                    count += 1;
                    expect_name = false;
                }
                i = end + 1;
                continue;
            }
            b'{' | b'[' => {
                if depth == PLAIN_DEPTH {
                    return false;
                }
                // `count` <= PLAIN_NAMES (32) fits a byte.
                starts[depth] = count as u8;
                objects[depth] = b == b'{';
                depth += 1;
                expect_name = b == b'{';
            }
            b'}' | b']' => {
                if depth > 0 {
                    depth -= 1;
                    count = usize::from(starts[depth]);
                }
                expect_name = false;
            }
            _ => {
                // b',': an object's next member starts with its name.
                expect_name = depth > 0 && objects[depth - 1];
            }
        }
        i += 1;
    }
    true
}

/// The full scan: any nesting, any number of names, escaped names unescaped, and the path of
/// the first ambiguity.
pub(super) fn full(input: &[u8]) -> Result<(), Ambiguity> {
    let mut scan = Scan {
        input,
        frames: Vec::with_capacity(8),
        names: Vec::with_capacity(16),
    };
    scan.run()
}

/// One open object or array.
struct Frame {
    /// Where this object's names start in `Scan::names`.
    names_start: usize,
    /// For objects: the current member's name as written (for error paths).
    key: (usize, usize),
    /// For arrays: the current element's index (for error paths).
    index: usize,
    object: bool,
    /// The next string is a member name.
    expect_name: bool,
    /// Names of a large object, for constant-time lookups.
    set: Option<HashSet<Vec<u8>>>,
}

/// The scanner's state. Names are compared as UTF-8 bytes (equal strings, equal bytes),
/// unescaped when needed.
struct Scan<'a> {
    input: &'a [u8],
    frames: Vec<Frame>,
    names: Vec<Cow<'a, [u8]>>,
}

/// Bytes the scanner acts on outside strings; everything else (numbers, literals, blanks,
/// colons) is skipped.
const STRUCTURAL: [bool; 256] = {
    let mut table = [false; 256];
    let mut i = 0;
    let bytes = *b"\"{}[],";
    while i < bytes.len() {
        table[bytes[i] as usize] = true;
        i += 1;
    }
    table
};

impl<'a> Scan<'a> {
    fn run(&mut self) -> Result<(), Ambiguity> {
        let input = self.input;
        let mut i = 0;
        while i < input.len() {
            let b = input[i];
            if !STRUCTURAL[b as usize] {
                i += 1;
                continue;
            }
            match b {
                b'"' => {
                    let (end, escaped) = string_end(input, i + 1);
                    let is_name = self
                        .frames
                        .last()
                        .is_some_and(|f| f.object && f.expect_name);
                    if is_name {
                        self.name(i + 1, end, escaped)?;
                    }
                    i = end + 1;
                    continue;
                }
                b'{' | b'[' => self.frames.push(Frame {
                    names_start: self.names.len(),
                    key: (0, 0),
                    index: 0,
                    object: b == b'{',
                    expect_name: b == b'{',
                    set: None,
                }),
                b'}' | b']' => {
                    if let Some(frame) = self.frames.pop() {
                        self.names.truncate(frame.names_start);
                    }
                }
                _ => {
                    // b',': the next member (objects) or element (arrays).
                    if let Some(frame) = self.frames.last_mut() {
                        if frame.object {
                            frame.expect_name = true;
                        } else {
                            frame.index += 1;
                        }
                    }
                }
            }
            i += 1;
        }
        Ok(())
    }

    /// A member name at `input[start..end]` (without quotes) of the innermost object.
    fn name(&mut self, start: usize, end: usize, escaped: bool) -> Result<(), Ambiguity> {
        let input = self.input;
        self.set_key(start, end);
        let name: Cow<'a, [u8]> = if escaped {
            // Unescaped exactly as serde_json (and every conforming parser) does; a quoted
            // slice of valid JSON is a valid JSON string unless an escape is not Unicode.
            let quoted = &input[start - 1..(end + 1).min(input.len())];
            match serde_json::from_slice::<String>(quoted) {
                Ok(s) => Cow::Owned(s.into_bytes()),
                Err(_) => return Err(Ambiguity::InvalidName { path: self.path() }),
            }
        } else {
            Cow::Borrowed(&input[start..end.min(input.len())])
        };
        let names = &mut self.names;
        let Some(frame) = self.frames.last_mut() else {
            return Ok(());
        };
        frame.expect_name = false;
        let siblings = &names[frame.names_start..];
        let duplicate = match &mut frame.set {
            Some(set) => !set.insert(name.into_owned()),
            None if siblings.len() < LINEAR_SCAN_MAX => {
                let found = siblings.contains(&name);
                names.push(name);
                found
            }
            None => {
                let mut set: HashSet<Vec<u8>> = siblings.iter().map(|n| n.to_vec()).collect();
                let fresh = set.insert(name.into_owned());
                frame.set = Some(set);
                !fresh
            }
        };
        if duplicate {
            return Err(Ambiguity::DuplicateName { path: self.path() });
        }
        Ok(())
    }

    fn set_key(&mut self, start: usize, end: usize) {
        if let Some(frame) = self.frames.last_mut() {
            frame.key = (start, end);
        }
    }

    /// The path of the innermost member, e.g. `params.arguments["a b"][2].x`, bounded.
    fn path(&self) -> String {
        let mut out = String::new();
        for frame in &self.frames {
            if frame.object {
                let raw = &self.input[frame.key.0..frame.key.1.min(self.input.len())];
                let name = String::from_utf8_lossy(raw);
                let plain = !name.is_empty()
                    && name
                        .bytes()
                        .all(|b| b.is_ascii_alphanumeric() || b == b'_' || b == b'$');
                if plain {
                    if !out.is_empty() {
                        out.push('.');
                    }
                    out.push_str(&name);
                } else {
                    out.push_str("[\"");
                    out.push_str(&name);
                    out.push_str("\"]");
                }
            } else {
                out.push('[');
                out.push_str(&frame.index.to_string());
                out.push(']');
            }
            if out.len() > MAX_PATH {
                break;
            }
        }
        if out.len() > MAX_PATH {
            let mut cut = MAX_PATH;
            while !out.is_char_boundary(cut) {
                cut -= 1;
            }
            out.truncate(cut);
            out.push('…');
        }
        out
    }
}

/// The index of the quote closing the string whose contents start at `from`, and whether the
/// string holds an escape. Never reads past the end (an unterminated string ends there).
fn string_end(input: &[u8], from: usize) -> (usize, bool) {
    let mut i = from;
    let mut escaped = false;
    while i < input.len() {
        // Eight bytes at a time near the start (names and short values end within a few
        // words), then a vector search, whose setup costs more than it saves on short strings.
        let at = if i + 8 <= input.len() && i < from + 64 {
            let word = u64::from_le_bytes(input[i..i + 8].try_into().unwrap_or([0; 8]));
            let mask = byte_mask(word, b'"') | byte_mask(word, b'\\');
            if mask == 0 {
                i += 8;
                continue;
            }
            // The lowest flag is exact (a borrow only ever spoils higher bytes).
            i + (mask.trailing_zeros() / 8) as usize
        } else {
            match memchr::memchr2(b'"', b'\\', &input[i..]) {
                None => return (input.len(), escaped),
                Some(at) => i + at,
            }
        };
        if input[at] == b'"' {
            return (at, escaped);
        }
        escaped = true;
        // Skip the backslash and the character it escapes (`\"`, `\\`, `\u`...).
        i = at + 2;
    }
    (input.len(), escaped)
}

/// The bytes of `word` equal to `byte`, flagged in their high bit (the classic zero-byte test
/// on `word ^ byte * 0x01..`); flags above the lowest one may be spurious.
fn byte_mask(word: u64, byte: u8) -> u64 {
    const ONES: u64 = 0x0101_0101_0101_0101;
    const HIGHS: u64 = 0x8080_8080_8080_8080;
    let x = word ^ (ONES * u64::from(byte));
    x.wrapping_sub(ONES) & !x & HIGHS
}

#[cfg(test)]
mod tests {
    use super::*;

    fn dup(input: &str) -> String {
        match check(input.as_bytes()) {
            Err(Ambiguity::DuplicateName { path }) => path,
            other => panic!("expected a duplicate in {input}, got {other:?}"),
        }
    }

    #[test]
    fn unique_names_pass() {
        for ok in [
            r#"{"jsonrpc":"2.0","id":1,"method":"tools/call","params":{"name":"a","arguments":{"name":"b"}}}"#,
            r#"{"a":{"a":{"a":1}},"b":[{"a":1},{"a":2}]}"#,
            r#"{"k":"a\"b","\"k":1}"#,
            r#"["x",{"x":1,"y":"}{,"}]"#,
            r#"{}"#,
            r#"{"a":[],"b":{}}"#,
        ] {
            assert_eq!(check(ok.as_bytes()), Ok(()), "{ok}");
        }
    }

    #[test]
    fn duplicates_are_found_at_any_depth_with_their_path() {
        assert_eq!(dup(r#"{"name":"echo","name":"get-env"}"#), "name");
        assert_eq!(
            dup(r#"{"params":{"_meta":{"progressToken":1,"progressToken":5}}}"#),
            "params._meta.progressToken"
        );
        assert_eq!(
            dup(r#"{"params":{"arguments":{"xs":[1,{"a b":1,"a b":2}]}}}"#),
            r#"params.arguments.xs[1]["a b"]"#
        );
        // The envelope itself.
        assert_eq!(dup(r#"{"id":1,"method":"m","id":2}"#), "id");
    }

    #[test]
    fn names_are_compared_unescaped() {
        assert_eq!(dup(r#"{"name":"a","na\u006de":"b"}"#), r#"["na\u006de"]"#);
        assert_eq!(dup(r#"{"\u00e9":1,"é":2}"#), "[\"é\"]");
        // Surrogate pairs decode to one character.
        assert_eq!(dup(r#"{"😀":1,"\ud83d\ude00":2}"#), r#"["\ud83d\ude00"]"#);
        // A closing quote inside an escaped name does not end it.
        assert_eq!(check(br#"{"a\"":1,"a":2}"#), Ok(()));
    }

    #[test]
    fn lone_surrogates_in_names_are_refused() {
        assert!(matches!(
            check(br#"{"\ud800":1}"#),
            Err(Ambiguity::InvalidName { .. })
        ));
    }

    #[test]
    fn siblings_only_not_cousins() {
        // The same name in different objects is fine; names do not leak out of a closed object.
        assert_eq!(check(br#"{"a":{"x":1},"b":{"x":2},"x":3}"#), Ok(()));
        assert_eq!(check(br#"[{"x":1},{"x":2}]"#), Ok(()));
    }

    #[test]
    fn large_objects_switch_to_a_set() {
        let members: Vec<String> = (0..100).map(|i| format!("\"k{i}\":{i}")).collect();
        let ok = format!("{{{}}}", members.join(","));
        assert_eq!(check(ok.as_bytes()), Ok(()));
        let bad = format!("{{{},\"k7\":0}}", members.join(","));
        assert_eq!(dup(&bad), "k7");
        // A duplicate found before the switch, and names escaped after it.
        let bad = format!("{{{},\"k\\u0039\":0}}", members.join(","));
        assert_eq!(dup(&bad), "[\"k\\u0039\"]");
    }

    #[test]
    fn the_plain_pass_defers_what_it_cannot_tell() {
        // Plain and unique: told without the full scan.
        assert!(plain(
            br#"{"jsonrpc":"2.0","id":1,"params":{"a":[{"a":1},{"a":2}],"b":{}}}"#
        ));
        // Duplicates, escaped names, deep nesting and many names go to the full scan.
        assert!(!plain(br#"{"a":1,"b":{"c":1,"c":2}}"#));
        assert!(!plain(br#"{"a\u0062":1}"#));
        let deep = format!(
            "{}{}",
            "[".repeat(PLAIN_DEPTH + 1),
            "]".repeat(PLAIN_DEPTH + 1)
        );
        assert!(!plain(deep.as_bytes()));
        assert_eq!(check(deep.as_bytes()), Ok(()));
        let members: Vec<String> = (0..PLAIN_NAMES + 1)
            .map(|i| format!("\"k{i}\":{i}"))
            .collect();
        let wide = format!("{{{}}}", members.join(","));
        assert!(!plain(wide.as_bytes()));
        assert_eq!(check(wide.as_bytes()), Ok(()));
        // Names of closed objects are forgotten: siblings only.
        let many: Vec<String> = (0..40).map(|i| format!("{{\"k{i}\":1,\"x\":2}}")).collect();
        let long = format!("[{}]", many.join(","));
        assert!(plain(long.as_bytes()));
    }

    #[test]
    fn deep_nesting_does_not_recurse() {
        let depth = 100_000;
        let text = format!("{}{}", "[".repeat(depth), "]".repeat(depth));
        assert_eq!(check(text.as_bytes()), Ok(()));
        let text = format!(
            "{}{{\"a\":1,\"a\":2}}{}",
            "{\"x\":".repeat(depth),
            "}".repeat(depth)
        );
        let path = dup(&text);
        assert!(path.len() <= MAX_PATH + '…'.len_utf8(), "{}", path.len());
    }

    #[test]
    fn garbage_never_panics() {
        for junk in [
            &b"\""[..],
            b"{\"a",
            b"{\"a\\",
            b"}}]]",
            b"{\"a\":1,\"a\\",
            b"{\"\xff\":1}",
        ] {
            let _ = check(junk);
        }
    }
}
