//! The one-pass reader of an ordinary JSON-RPC message: validates the JSON text, refuses
//! duplicate member names and finds the envelope's members, all in a single walk over the bytes.
//!
//! It answers only "this message is plainly valid, and here are its members" or "ask the full
//! reader" (`None`): anything unusual — a syntax error, an escaped member name, a surrogate
//! escape, a duplicate name, nesting or name counts past its fixed bounds, an envelope member of
//! the wrong type — goes to serde's reader and [`super::strict`], which say precisely what is
//! wrong. So what it accepts must be exactly what those accept (the property tests compare the
//! two on generated and mutated text); what it declines costs one wasted partial pass.

use serde::de::value::BorrowedStrDeserializer;
use serde::de::{self, DeserializeSeed, Deserializer, MapAccess, Visitor};
use serde_json::value::RawValue;

use super::parse::Envelope;
use std::borrow::Cow;

/// Nesting the reader follows; deeper messages take the full reader.
const DEPTH: usize = 32;
/// Member names held at once (of all open objects); more take the full reader.
const NAMES: usize = 32;

/// Which envelope member a top-level name is.
#[derive(Clone, Copy)]
enum Slot {
    Jsonrpc,
    Id,
    Method,
    Params,
    Result,
    Error,
    Other,
}

impl Slot {
    fn of(name: &[u8]) -> Slot {
        match name {
            b"jsonrpc" => Slot::Jsonrpc,
            b"id" => Slot::Id,
            b"method" => Slot::Method,
            b"params" => Slot::Params,
            b"result" => Slot::Result,
            b"error" => Slot::Error,
            _ => Slot::Other,
        }
    }
}

/// The envelope's members as written (value text, no surrounding blanks).
#[derive(Default)]
struct Spans<'a> {
    jsonrpc: Option<&'a str>,
    id: Option<&'a str>,
    method: Option<&'a str>,
    params: Option<&'a str>,
    result: Option<&'a str>,
    error: Option<&'a str>,
}

/// Reads `text` (a whole message) when it is a JSON object with unique member names, valid
/// JSON throughout, and `jsonrpc`/`method` (when present) plain strings or `null`, exactly as
/// serde's reader of [`Envelope`] would; `None` otherwise.
pub(super) fn envelope(text: &str) -> Option<Envelope<'_>> {
    let spans = walk(text)?;
    Some(Envelope {
        jsonrpc: plain_string(spans.jsonrpc)?,
        id: raw_member(spans.id)?,
        method: plain_string(spans.method)?,
        params: raw_member(spans.params)?,
        result: raw_member(spans.result)?,
        error: raw_member(spans.error)?,
    })
}

/// An `id`, `params`, `result` or `error` member: absent, or its raw value (`null` included).
fn raw_member(span: Option<&str>) -> Option<Option<&RawValue>> {
    match span {
        Some(text) => borrowed_raw(text).map(Some),
        None => Some(None),
    }
}

/// A `jsonrpc` or `method` member as serde reads it into `Option<Cow<str>>`: absent or `null`
/// is `None`, a string without escapes its text; anything else is the full reader's to judge
/// (outer `None`).
fn plain_string(span: Option<&str>) -> Option<Option<Cow<'_, str>>> {
    let Some(span) = span else {
        return Some(None);
    };
    if span == "null" {
        return Some(None);
    }
    plain_str(span).map(|inner| Some(Cow::Borrowed(inner)))
}

/// A member name seen in an open object: where it starts, its length, and its first eight
/// bytes (zero-padded) as a word, which tells most different names apart without a compare.
#[derive(Clone, Copy, Default)]
struct Name {
    start: u32,
    len: u32,
    head: u64,
}

/// The walk's state: the text, the open containers and the names of the open objects.
struct Walk<'a> {
    b: &'a [u8],
    /// Per open container: where its names start in `names`, whether it is an object.
    starts: [u8; DEPTH],
    objects: [bool; DEPTH],
    depth: usize,
    names: [Name; NAMES],
    count: usize,
    /// The top-level member being read: which one, and where its value starts.
    slot: Slot,
    value_start: usize,
}

/// The JSON text from `{` to its closing `}`, checked whole: `None` unless it is valid JSON,
/// an object, with unique member names none of which is escaped, within the bounds above.
fn walk(text: &str) -> Option<Spans<'_>> {
    let b = text.as_bytes();
    // A message past 4 GiB takes the full reader (name positions are u32).
    u32::try_from(b.len()).ok()?;
    let mut w = Walk {
        b,
        starts: [0; DEPTH],
        objects: [false; DEPTH],
        depth: 0,
        names: [Name::default(); NAMES],
        count: 0,
        slot: Slot::Other,
        value_start: 0,
    };
    let mut spans = Spans::default();

    let mut i = blanks(b, 0);
    if b.get(i) != Some(&b'{') {
        return None;
    }
    'value: loop {
        // Expecting a value at `i` (blanks not yet skipped).
        i = blanks(b, i);
        match *b.get(i)? {
            open @ (b'{' | b'[') => {
                if w.depth == DEPTH {
                    return None;
                }
                // `count` <= NAMES (32) fits a byte.
                w.starts[w.depth] = w.count as u8;
                w.objects[w.depth] = open == b'{';
                w.depth += 1;
                i = blanks(b, i + 1);
                let close = if open == b'{' { b'}' } else { b']' };
                if b.get(i) == Some(&close) {
                    w.depth -= 1;
                    i += 1;
                } else if open == b'{' {
                    i = w.name(i)?;
                    continue 'value;
                } else {
                    continue 'value;
                }
            }
            b'"' => i = string(b, i + 1)?.0,
            b't' => i = literal(b, i, b"true")?,
            b'f' => i = literal(b, i, b"false")?,
            b'n' => i = literal(b, i, b"null")?,
            b'-' | b'0'..=b'9' => i = number(b, i)?,
            _ => return None,
        }
        // A value ended at `i`; close what ends with it, up to the next value.
        loop {
            if w.depth == 1 {
                let span = text.get(w.value_start..i)?;
                match w.slot {
                    Slot::Jsonrpc => spans.jsonrpc = Some(span),
                    Slot::Id => spans.id = Some(span),
                    Slot::Method => spans.method = Some(span),
                    Slot::Params => spans.params = Some(span),
                    Slot::Result => spans.result = Some(span),
                    Slot::Error => spans.error = Some(span),
                    Slot::Other => {}
                }
            }
            if w.depth == 0 {
                // Only blanks may follow the message.
                return (blanks(b, i) == b.len()).then_some(spans);
            }
            i = blanks(b, i);
            let object = w.objects[w.depth - 1];
            match *b.get(i)? {
                b',' if object => {
                    i = w.name(i + 1)?;
                    continue 'value;
                }
                b',' => {
                    i += 1;
                    continue 'value;
                }
                b'}' if object => {}
                b']' if !object => {}
                _ => return None,
            }
            w.depth -= 1;
            w.count = usize::from(w.starts[w.depth]);
            i += 1;
        }
    }
}

impl Walk<'_> {
    /// Reads a member name and its colon from `i` (blanks allowed before each); returns where
    /// its value starts. The name must be unescaped and unique among its siblings; at the top
    /// level it records which envelope member follows and where (`slot`, `value_start`).
    #[inline]
    fn name(&mut self, i: usize) -> Option<usize> {
        let b = self.b;
        let i = blanks(b, i);
        if b.get(i) != Some(&b'"') {
            return None;
        }
        let (after, escaped) = string(b, i + 1)?;
        if escaped || self.count == NAMES {
            return None;
        }
        let start = i + 1;
        let end = after - 1;
        let len = end - start;
        // The bytes from the name on, as a word when eight are there (a name is followed by at
        // least `":0}`, so only names under four bytes near the end miss it).
        let head = match b.get(start..start + 8) {
            Some(word) => {
                let word = u64::from_le_bytes(<[u8; 8]>::try_from(word).ok()?);
                if len >= 8 {
                    word
                } else {
                    word & ((1u64 << (8 * len)) - 1)
                }
            }
            None => {
                let mut word = [0u8; 8];
                word[..len].copy_from_slice(&b[start..end]);
                u64::from_le_bytes(word)
            }
        };
        let name = &b[start..end];
        let siblings = &self.names[usize::from(self.starts[self.depth - 1])..self.count];
        if siblings.iter().any(|n| {
            n.head == head
                && n.len as usize == len
                && (len <= 8 || &b[n.start as usize..n.start as usize + len] == name)
        }) {
            return None;
        }
        // Both within the input, whose length fits a u32 (checked by `walk`).
        self.names[self.count] = Name {
            start: start as u32,
            len: len as u32,
            head,
        };
        self.count += 1;
        let colon = blanks(b, after);
        if b.get(colon) != Some(&b':') {
            return None;
        }
        let value = blanks(b, colon + 1);
        if self.depth == 1 {
            self.slot = Slot::of(name);
            self.value_start = value;
        }
        Some(value)
    }
}

/// JSON's four blanks, skipped from `i`.
#[inline]
fn blanks(b: &[u8], mut i: usize) -> usize {
    while let Some(b' ' | b'\n' | b'\r' | b'\t') = b.get(i) {
        i += 1;
    }
    i
}

/// Bytes inside a string that end the fast skip: the quote, a backslash, control characters.
const STRING_STOP: [bool; 256] = {
    let mut table = [false; 256];
    let mut i = 0;
    while i < 0x20 {
        table[i] = true;
        i += 1;
    }
    table[b'"' as usize] = true;
    table[b'\\' as usize] = true;
    table
};

/// Which of eight bytes (little-endian) is a quote, a backslash or a control character: the
/// classic "has a zero byte" and "has a byte under n" word tests. Bytes above a flagged one may
/// be flagged wrongly (borrows), the lowest flagged byte never is: it is the first to look at.
fn stops(x: u64) -> u64 {
    const ONES: u64 = 0x0101_0101_0101_0101;
    const HIGH: u64 = 0x8080_8080_8080_8080;
    let quote = x ^ (ONES * u64::from(b'"'));
    let backslash = x ^ (ONES * u64::from(b'\\'));
    let zero = |v: u64| v.wrapping_sub(ONES) & !v;
    (zero(quote) | zero(backslash) | (x.wrapping_sub(ONES * 0x20) & !x)) & HIGH
}

/// The rest of a string whose opening quote is just before `i`: the index after its closing
/// quote, and whether it holds an escape. Control characters and malformed escapes are
/// refused; so is any surrogate escape but a well-formed pair (serde's reader accepts more
/// there: the full reader decides). Inlined for the common string without escapes; the rest is
/// [`escaped_string`]'s.
#[inline]
fn string(b: &[u8], i: usize) -> Option<(usize, bool)> {
    let i = next_stop(b, i)?;
    if b[i] == b'"' {
        return Some((i + 1, false));
    }
    escaped_string(b, i)
}

/// The first byte from `i` that needs a look (a quote, a backslash, a control character):
/// eight at a time, then one by one near the end of the text.
#[inline]
fn next_stop(b: &[u8], mut i: usize) -> Option<usize> {
    while let Some(word) = b.get(i..i + 8) {
        let flagged = stops(u64::from_le_bytes(<[u8; 8]>::try_from(word).ok()?));
        if flagged != 0 {
            return Some(i + (flagged.trailing_zeros() / 8) as usize);
        }
        i += 8;
    }
    while !STRING_STOP[usize::from(*b.get(i)?)] {
        i += 1;
    }
    Some(i)
}

/// A string from its first byte that is not plain text (`i`, not a quote) to its end: escapes
/// checked, control characters refused.
#[inline(never)]
fn escaped_string(b: &[u8], mut i: usize) -> Option<(usize, bool)> {
    loop {
        match b[i] {
            b'"' => return Some((i + 1, true)),
            b'\\' => match *b.get(i + 1)? {
                b'"' | b'\\' | b'/' | b'b' | b'f' | b'n' | b'r' | b't' => i += 2,
                b'u' => {
                    let unit = hex4(b, i + 2)?;
                    i += 6;
                    match unit {
                        0xD800..=0xDBFF => {
                            if b.get(i..i + 2) != Some(b"\\u") {
                                return None;
                            }
                            if !(0xDC00..=0xDFFF).contains(&hex4(b, i + 2)?) {
                                return None;
                            }
                            i += 6;
                        }
                        0xDC00..=0xDFFF => return None,
                        _ => {}
                    }
                }
                _ => return None,
            },
            _ => return None,
        }
        i = next_stop(b, i)?;
    }
}

/// Four hex digits at `i`, as a UTF-16 unit.
fn hex4(b: &[u8], i: usize) -> Option<u16> {
    let digits = b.get(i..i + 4)?;
    let mut unit = 0u16;
    for &d in digits {
        // `to_digit` takes ASCII digits and letters only.
        let v = u16::try_from(char::from(d).to_digit(16)?).ok()?;
        unit = unit << 4 | v;
    }
    Some(unit)
}

/// The members of the JSON object `text` (valid JSON, as every raw value is) in their order,
/// each name with its value's raw text, in one pass: `Some` when every name is unescaped (read
/// as written), `None` for the full reader (an escaped name, or `text` not an object). Member
/// names are not checked for duplicates here: messages were checked whole when read.
pub(super) fn object_members<'a>(
    text: &'a str,
    mut each: impl FnMut(&'a str, &'a RawValue),
) -> Option<()> {
    let b = text.as_bytes();
    let mut i = blanks(b, 0);
    if b.get(i) != Some(&b'{') {
        return None;
    }
    i = blanks(b, i + 1);
    if b.get(i) == Some(&b'}') {
        return Some(());
    }
    loop {
        if b.get(i) != Some(&b'"') {
            return None;
        }
        let (after, escaped) = string(b, i + 1)?;
        if escaped {
            return None;
        }
        let name = text.get(i + 1..after - 1)?;
        i = blanks(b, after);
        if b.get(i) != Some(&b':') {
            return None;
        }
        let start = blanks(b, i + 1);
        let end = value_end(b, start)?;
        if end == start {
            return None;
        }
        each(name, borrowed_raw(text.get(start..end)?)?);
        i = blanks(b, end);
        match b.get(i)? {
            b',' => i = blanks(b, i + 1),
            b'}' => return Some(()),
            _ => return None,
        }
    }
}

/// Where the value starting at `i` ends, in text known to be valid JSON: strings and
/// containers are followed to their end, a number or literal runs to the next delimiter.
fn value_end(b: &[u8], mut i: usize) -> Option<usize> {
    match *b.get(i)? {
        b'"' => Some(string(b, i + 1)?.0),
        b'{' | b'[' => {
            let mut depth = 0usize;
            loop {
                match *b.get(i)? {
                    b'"' => {
                        i = string(b, i + 1)?.0;
                        continue;
                    }
                    b'{' | b'[' => depth += 1,
                    b'}' | b']' => {
                        depth -= 1;
                        if depth == 0 {
                            return Some(i + 1);
                        }
                    }
                    _ => {}
                }
                i += 1;
            }
        }
        _ => {
            while !matches!(
                b.get(i),
                None | Some(b',' | b'}' | b']' | b' ' | b'\n' | b'\r' | b'\t')
            ) {
                i += 1;
            }
            Some(i)
        }
    }
}

/// A raw JSON string's text when it has no escape (so it reads as written), else `None`.
pub(super) fn plain_str(raw: &str) -> Option<&str> {
    let inner = raw.strip_prefix('"')?.strip_suffix('"')?;
    (!inner.as_bytes().contains(&b'\\')).then_some(inner)
}

/// `true`, `false` or `null` at `i`.
fn literal(b: &[u8], i: usize, word: &[u8]) -> Option<usize> {
    (b.get(i..i + word.len())? == word).then_some(i + word.len())
}

/// A number at `i` (RFC 8259: `-? (0 | [1-9][0-9]*) (.[0-9]+)? ([eE][+-]?[0-9]+)?`).
fn number(b: &[u8], mut i: usize) -> Option<usize> {
    if b.get(i) == Some(&b'-') {
        i += 1;
    }
    match *b.get(i)? {
        b'0' => i += 1,
        b'1'..=b'9' => i = digits(b, i + 1),
        _ => return None,
    }
    if b.get(i) == Some(&b'.') {
        let end = digits(b, i + 1);
        if end == i + 1 {
            return None;
        }
        i = end;
    }
    if let Some(b'e' | b'E') = b.get(i) {
        i += 1;
        if let Some(b'+' | b'-') = b.get(i) {
            i += 1;
        }
        let end = digits(b, i);
        if end == i {
            return None;
        }
        i = end;
    }
    Some(i)
}

fn digits(b: &[u8], mut i: usize) -> usize {
    while let Some(b'0'..=b'9') = b.get(i) {
        i += 1;
    }
    i
}

/// serde_json's borrowed raw value for `text`, which the walk has checked is one whole JSON
/// value. serde_json makes a `&RawValue` only while it reads; this hands its `Deserialize` the
/// text through the same map-of-one-member form its reader uses, so the text is not read again.
/// Should serde_json ever change that form, its own reader is asked instead (slower, same
/// answer).
fn borrowed_raw(text: &str) -> Option<&RawValue> {
    <&RawValue as de::Deserialize>::deserialize(RawText(text))
        .ok()
        .or_else(|| serde_json::from_str(text).ok())
}

/// serde_json's owned raw value for `text`, which the caller made up as one whole JSON value
/// from raw values and strings it wrote itself, by the same form as [`borrowed_raw`]: the text
/// is copied once and not read again (`RawValue::from_string` reads it all to check it).
/// Should serde_json ever change that form, `from_string` is asked instead.
pub(super) fn owned_raw(text: String) -> Box<RawValue> {
    debug_assert!(
        serde_json::from_str::<&RawValue>(&text).is_ok_and(|v| v.get().len() == text.len()),
        "not one whole JSON value: {text}"
    );
    match <Box<RawValue> as de::Deserialize>::deserialize(RawText(&text)) {
        Ok(raw) => raw,
        Err(_) => RawValue::from_string(text).expect("made up as valid JSON"),
    }
}

/// The name serde_json's raw value travels under between its reader and its `Deserialize`.
const RAW_TOKEN: &str = "$serde_json::private::RawValue";

/// A deserializer presenting `text` as serde_json's reader presents a raw value.
struct RawText<'a>(&'a str);

impl<'de> Deserializer<'de> for RawText<'de> {
    type Error = de::value::Error;

    fn deserialize_any<V: Visitor<'de>>(self, visitor: V) -> Result<V::Value, Self::Error> {
        visitor.visit_map(RawMember(Some(self.0)))
    }

    serde::forward_to_deserialize_any! {
        bool i8 i16 i32 i64 i128 u8 u16 u32 u64 u128 f32 f64 char str string bytes byte_buf
        option unit unit_struct newtype_struct seq tuple tuple_struct map struct enum
        identifier ignored_any
    }
}

/// The one member: the token as its name, the text as its value.
struct RawMember<'a>(Option<&'a str>);

impl<'de> MapAccess<'de> for RawMember<'de> {
    type Error = de::value::Error;

    fn next_key_seed<K: DeserializeSeed<'de>>(
        &mut self,
        seed: K,
    ) -> Result<Option<K::Value>, Self::Error> {
        if self.0.is_none() {
            return Ok(None);
        }
        seed.deserialize(BorrowedStrDeserializer::new(RAW_TOKEN))
            .map(Some)
    }

    fn next_value_seed<V: DeserializeSeed<'de>>(
        &mut self,
        seed: V,
    ) -> Result<V::Value, Self::Error> {
        let text = self
            .0
            .take()
            .ok_or_else(|| de::Error::custom("no raw value left"))?;
        seed.deserialize(BorrowedStrDeserializer::new(text))
    }
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used)]
    use super::*;

    /// Whether serde's reader takes `text` as JSON at all.
    fn serde_reads(text: &str) -> bool {
        serde_json::from_str::<serde::de::IgnoredAny>(text).is_ok()
    }

    #[test]
    fn invalid_json_is_left_to_the_full_reader() {
        let cases = [
            r#"{"a":01}"#,
            r#"{"a":1.}"#,
            r#"{"a":.5}"#,
            r#"{"a":-}"#,
            r#"{"a":-a}"#,
            r#"{"a":1e}"#,
            r#"{"a":1e+}"#,
            r#"{"a":+1}"#,
            r#"{"a":1.5.3}"#,
            r#"{"a":tru}"#,
            r#"{"a":nul}"#,
            r#"{"a":True}"#,
            "{\"a\":\"\u{1}\"}",
            "{\"a\":\"tab\there\"}",
            "{\"a\":\"unit\u{1f}separator\"}",
            r#"{"a":"\q"}"#,
            r#"{"a":"\u12G4"}"#,
            r#"{"a":"\u12"}"#,
            r#"{"a":"open}"#,
            r#"{"a":1,}"#,
            r#"{"a":1 "b":2}"#,
            r#"{"a" 1}"#,
            r#"{"a"}"#,
            r#"{,}"#,
            r#"{"a":[1,]}"#,
            r#"{"a":[1 2]}"#,
            r#"{"a":[,1]}"#,
            r#"{"a":{]}"#,
            r#"{"a":[}"#,
            r#"{"a":1}}"#,
            r#"{"a":1} x"#,
            r#"{"a":1}{}"#,
            "\u{c}{\"a\":1}",
            "{\"a\":1}\u{c}",
            "{\"a\":\u{a0}1}",
            r#"{a:1}"#,
            r#"{'a':1}"#,
            r#"{"a":1"#,
            r#"{"a":"#,
            r#"{"#,
            "",
        ];
        for text in cases {
            assert!(
                !serde_reads(text),
                "serde reads {text:?}: not a case of invalid JSON"
            );
            assert!(walk(text).is_none(), "{text:?}");
        }
    }

    #[test]
    fn valid_but_unusual_text_is_left_to_the_full_reader() {
        let nested = format!("{{\"a\":{}1{}}}", "[".repeat(DEPTH), "]".repeat(DEPTH));
        let many = format!(
            "{{{}}}",
            (0..=NAMES)
                .map(|n| format!("\"m{n}\":{n}"))
                .collect::<Vec<_>>()
                .join(",")
        );
        let cases = [
            // Duplicates, at the top and further in; escaped names, which may spell one.
            r#"{"id":1,"id":2}"#,
            r#"{"p":{"a":1,"b":{},"a":2}}"#,
            r#"{"a":[{"x":1,"x":1}]}"#,
            r#"{"a\u0062":1}"#,
            r#"{"\"":1}"#,
            // Surrogate escapes other than a well-formed pair.
            r#"{"a":"\ud800"}"#,
            r#"{"a":"\udc00"}"#,
            r#"{"a":"\ud800\u0041"}"#,
            r#"{"a":"\ud800x"}"#,
            // Past the fixed bounds.
            nested.as_str(),
            many.as_str(),
            // Not an object.
            "[1]",
            "1",
        ];
        for text in cases {
            assert!(
                serde_reads(text),
                "serde refuses {text:?}: not a case of valid JSON"
            );
            assert!(walk(text).is_none(), "{text:?}");
        }
        // Just within the bounds, the same shapes are read.
        let nested = format!(
            "{{\"a\":{}1{}}}",
            "[".repeat(DEPTH - 1),
            "]".repeat(DEPTH - 1)
        );
        assert!(walk(&nested).is_some());
        let many = format!(
            "{{{}}}",
            (0..NAMES)
                .map(|n| format!("\"m{n}\":{n}"))
                .collect::<Vec<_>>()
                .join(",")
        );
        assert!(walk(&many).is_some());
    }

    #[test]
    fn valid_json_of_every_kind_is_read() {
        let cases = [
            "{}",
            " \t\r\n{ \t\r\n} \t\r\n",
            r#"{"a":-0,"b":0.5e+10,"c":1E-2,"d":-12.25,"e":10}"#,
            r#"{"a":true,"b":false,"c":null,"d":[],"e":{},"f":[[],{}]}"#,
            r#"{"a":"\"\\\/\b\f\n\r\t\u00e9\uD83D\uDE00 é 😀"}"#,
            r#"{ "a" : [ 1 , { "b" : "c" } ] , "d" : "" }"#,
            // Equal names in different objects, and a prefix of a sibling's name.
            r#"{"a":{"a":1},"b":{"a":2},"ab":1,"abcdefghij":1,"abcdefghik":2}"#,
        ];
        for text in cases {
            assert!(serde_reads(text), "{text:?}");
            assert!(walk(text).is_some(), "{text:?}");
        }
    }

    #[test]
    fn envelope_members_are_read_as_serde_reads_them() {
        let text = r#" {"x":[1,{"id":9}], "jsonrpc" : "2.0" ,"id": "a-1","method":"tools/call",
            "params":{"name":"n","id":[1]} ,"result" :null,"error":{"code":1}} "#;
        let env = envelope(text).unwrap();
        assert_eq!(env.jsonrpc.as_deref(), Some("2.0"));
        assert_eq!(env.id.unwrap().get(), r#""a-1""#);
        assert_eq!(env.method.as_deref(), Some("tools/call"));
        assert_eq!(env.params.unwrap().get(), r#"{"name":"n","id":[1]}"#);
        assert_eq!(env.result.unwrap().get(), "null");
        assert_eq!(env.error.unwrap().get(), r#"{"code":1}"#);
        // The raw values are the text itself, not copies.
        assert!(std::ptr::eq(
            env.params.unwrap().get().as_ptr(),
            text[text.find(r#"{"name""#).unwrap()..].as_ptr()
        ));
        // `null` reads as absent for the two string members, as serde's `Option` does.
        let env = envelope(r#"{"jsonrpc":null,"method":null,"id":null}"#).unwrap();
        assert!(env.jsonrpc.is_none() && env.method.is_none());
        assert_eq!(env.id.unwrap().get(), "null");
        // Another type, or an escape, in those two is the full reader's to judge.
        for text in [
            r#"{"jsonrpc":2}"#,
            r#"{"method":["a"]}"#,
            r#"{"method":"a\/b"}"#,
        ] {
            assert!(walk(text).is_some() && envelope(text).is_none(), "{text}");
        }
    }

    #[test]
    fn a_raw_value_is_made_without_reading_the_text_again() {
        // serde_json's own form is taken: not the fallback (which would read it again).
        let text = r#"{"a":[1,2]}"#;
        let raw = <&RawValue as de::Deserialize>::deserialize(RawText(text)).unwrap();
        assert!(std::ptr::eq(raw.get(), text));
    }

    #[test]
    fn an_owned_raw_value_is_made_without_reading_the_text_again() {
        // serde_json's own form is taken for the owned value too (not the fallback).
        let text = r#"{"a":[1,"\u00e9"],"b":{}}"#;
        let raw = <Box<RawValue> as de::Deserialize>::deserialize(RawText(text)).unwrap();
        assert_eq!(raw.get(), text);
        assert_eq!(owned_raw(text.to_owned()).get(), text);
    }

    #[test]
    fn object_members_split_an_object_as_written() {
        let text = r#" { "a" : 1 ,"b":"x,}]","c":{"d":[1,"]"]},"e":-1.5e3, "f":null } "#;
        let mut seen = Vec::new();
        object_members(text, |k, v| seen.push((k, v.get()))).unwrap();
        assert_eq!(
            seen,
            [
                ("a", "1"),
                ("b", r#""x,}]""#),
                ("c", r#"{"d":[1,"]"]}"#),
                ("e", "-1.5e3"),
                ("f", "null")
            ]
        );
        assert!(object_members("{}", |_, _| panic!("no members")).is_some());
        assert!(object_members(r#"{"a\"b":1}"#, |_, _| {}).is_none());
        assert!(object_members("[1]", |_, _| {}).is_none());
        assert_eq!(plain_str(r#""abc""#), Some("abc"));
        assert_eq!(plain_str(r#""a\"c""#), None);
        assert_eq!(plain_str("12"), None);
    }
}
