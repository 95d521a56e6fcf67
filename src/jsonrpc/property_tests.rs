//! Property tests of the reader and rewriter (fixed seeds, many generated messages): what the
//! gateway checks is what any parser of the forwarded bytes sees, whether it keeps the first or
//! the last of two members with the same name.

#![allow(clippy::unwrap_used)]

use std::collections::HashSet;
use std::fmt;

use rand::rngs::StdRng;
use rand::{RngExt, SeedableRng};
use serde::de::{Deserialize, Deserializer, MapAccess, SeqAccess, Visitor};
use serde_json::{Map, Value};

use super::{Message, RawObject, parse, raw_string, raw_u64, strict};

/// Member names drawn often enough that objects repeat them, including the ones the gateway
/// reads and rewrites.
const NAMES: [&str; 9] = [
    "name",
    "uri",
    "ref",
    "_meta",
    "progressToken",
    "cursor",
    "a",
    "b\"",
    "é",
];

/// A member name as JSON text, sometimes with one character spelled as a `\u` escape.
fn name_text(rng: &mut StdRng, name: &str) -> String {
    let quoted = serde_json::to_string(name).unwrap();
    if !rng.random_bool(0.3) {
        return quoted;
    }
    let chars: Vec<char> = name.chars().collect();
    let at = rng.random_range(0..chars.len());
    let mut out = String::from("\"");
    for (i, c) in chars.iter().enumerate() {
        if i == at {
            out.push_str(&format!("\\u{:04x}", *c as u32));
        } else {
            let one = serde_json::to_string(&c.to_string()).unwrap();
            out.push_str(&one[1..one.len() - 1]);
        }
    }
    out.push('"');
    out
}

fn value_text(rng: &mut StdRng, depth: u32) -> String {
    let kind = if depth >= 4 {
        rng.random_range(2..6)
    } else {
        rng.random_range(0..6)
    };
    match kind {
        0 => {
            let members: Vec<String> = (0..rng.random_range(0..5))
                .map(|_| {
                    let name = NAMES[rng.random_range(0..NAMES.len())];
                    format!("{}:{}", name_text(rng, name), value_text(rng, depth + 1))
                })
                .collect();
            format!("{{{}}}", members.join(","))
        }
        1 => {
            let items: Vec<String> = (0..rng.random_range(0..4))
                .map(|_| value_text(rng, depth + 1))
                .collect();
            format!("[{}]", items.join(" , "))
        }
        2 => serde_json::to_string(&format!("s{}\"\\\n}}{{", rng.random_range(0..100))).unwrap(),
        3 => rng.random_range(-1000i64..1000).to_string(),
        4 => ["true", "false", "null"][rng.random_range(0..3)].to_owned(),
        _ => format!("{}.5e{}", rng.random_range(0..100), rng.random_range(-3..3)),
    }
}

/// A JSON value read the way `JSON.parse` and Python's `json` read it: the last member wins.
fn last_wins(text: &str) -> Value {
    serde_json::from_str(text).unwrap()
}

/// A JSON value read keeping the first of two members with the same name.
struct FirstWins(Value);

impl<'de> Deserialize<'de> for FirstWins {
    fn deserialize<D: Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        struct V;
        impl<'de> Visitor<'de> for V {
            type Value = FirstWins;
            fn expecting(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
                f.write_str("JSON")
            }
            fn visit_map<M: MapAccess<'de>>(self, mut m: M) -> Result<FirstWins, M::Error> {
                let mut out = Map::new();
                while let Some(k) = m.next_key::<String>()? {
                    let FirstWins(v) = m.next_value()?;
                    out.entry(k).or_insert(v);
                }
                Ok(FirstWins(Value::Object(out)))
            }
            fn visit_seq<S: SeqAccess<'de>>(self, mut s: S) -> Result<FirstWins, S::Error> {
                let mut out = Vec::new();
                while let Some(FirstWins(v)) = s.next_element()? {
                    out.push(v);
                }
                Ok(FirstWins(Value::Array(out)))
            }
            fn visit_str<E>(self, v: &str) -> Result<FirstWins, E> {
                Ok(FirstWins(Value::String(v.to_owned())))
            }
            fn visit_i64<E>(self, v: i64) -> Result<FirstWins, E> {
                Ok(FirstWins(v.into()))
            }
            fn visit_u64<E>(self, v: u64) -> Result<FirstWins, E> {
                Ok(FirstWins(v.into()))
            }
            fn visit_f64<E>(self, v: f64) -> Result<FirstWins, E> {
                Ok(FirstWins(v.into()))
            }
            fn visit_bool<E>(self, v: bool) -> Result<FirstWins, E> {
                Ok(FirstWins(v.into()))
            }
            fn visit_unit<E>(self) -> Result<FirstWins, E> {
                Ok(FirstWins(Value::Null))
            }
        }
        d.deserialize_any(V)
    }
}

fn first_wins(text: &str) -> Value {
    serde_json::from_str::<FirstWins>(text).unwrap().0
}

/// An independent reference: whether any object of `value` (parsed by serde, names decoded)
/// repeats a name.
fn has_duplicate(text: &str) -> bool {
    struct Dup(bool);
    impl<'de> Deserialize<'de> for Dup {
        fn deserialize<D: Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
            struct V;
            impl<'de> Visitor<'de> for V {
                type Value = Dup;
                fn expecting(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
                    f.write_str("JSON")
                }
                fn visit_map<M: MapAccess<'de>>(self, mut m: M) -> Result<Dup, M::Error> {
                    let (mut seen, mut dup) = (HashSet::new(), false);
                    while let Some(k) = m.next_key::<String>()? {
                        dup |= !seen.insert(k);
                        dup |= m.next_value::<Dup>()?.0;
                    }
                    Ok(Dup(dup))
                }
                fn visit_seq<S: SeqAccess<'de>>(self, mut s: S) -> Result<Dup, S::Error> {
                    let mut dup = false;
                    while let Some(Dup(d)) = s.next_element()? {
                        dup |= d;
                    }
                    Ok(Dup(dup))
                }
                fn visit_str<E>(self, _: &str) -> Result<Dup, E> {
                    Ok(Dup(false))
                }
                fn visit_i64<E>(self, _: i64) -> Result<Dup, E> {
                    Ok(Dup(false))
                }
                fn visit_u64<E>(self, _: u64) -> Result<Dup, E> {
                    Ok(Dup(false))
                }
                fn visit_f64<E>(self, _: f64) -> Result<Dup, E> {
                    Ok(Dup(false))
                }
                fn visit_bool<E>(self, _: bool) -> Result<Dup, E> {
                    Ok(Dup(false))
                }
                fn visit_unit<E>(self) -> Result<Dup, E> {
                    Ok(Dup(false))
                }
            }
            d.deserialize_any(V)
        }
    }
    serde_json::from_str::<Dup>(text).unwrap().0
}

#[test]
fn the_scanner_finds_exactly_the_duplicates_and_accepted_text_reads_the_same_everywhere() {
    let mut rng = StdRng::seed_from_u64(0x5eed_0001);
    let (mut refused, mut accepted, mut plain) = (0, 0, 0);
    for _ in 0..20_000 {
        let text = value_text(&mut rng, 0);
        let duplicate = has_duplicate(&text);
        assert_eq!(strict::check(text.as_bytes()).is_err(), duplicate, "{text}");
        // The allocation-free pass vouches only for what the full scan accepts.
        if strict::plain(text.as_bytes()) {
            plain += 1;
            assert_eq!(strict::full(text.as_bytes()), Ok(()), "{text}");
        }
        assert_eq!(strict::full(text.as_bytes()).is_err(), duplicate, "{text}");
        if duplicate {
            refused += 1;
        } else {
            accepted += 1;
            assert_eq!(first_wins(&text), last_wins(&text), "{text}");
        }
    }
    // The generator exercises both sides.
    assert!(
        refused > 1_000 && accepted > 1_000 && plain > 1_000,
        "{refused} / {accepted} / {plain}"
    );
}

/// A `tools/call` (sometimes with a duplicate or escaped member) around generated params.
fn request_text(rng: &mut StdRng) -> String {
    let mut members = vec![format!(
        "{}:\"t{}\"",
        name_text(rng, "name"),
        rng.random_range(0..3)
    )];
    if rng.random_bool(0.3) {
        members.push(format!("{}:\"t9\"", name_text(rng, "name")));
    }
    let mut meta = vec![format!(
        "{}:{}",
        name_text(rng, "progressToken"),
        rng.random_range(0..50)
    )];
    if rng.random_bool(0.3) {
        meta.push(format!("{}:7", name_text(rng, "progressToken")));
    }
    members.push(format!("\"_meta\":{{{}}}", meta.join(",")));
    members.push(format!("\"arguments\":{}", value_text(rng, 2)));
    let n = members.len();
    for i in 0..n {
        members.swap(i, rng.random_range(0..n));
    }
    format!(
        r#"{{"jsonrpc":"2.0","id":{},"method":"tools/call","params":{{{}}}}}"#,
        rng.random_range(0..1000),
        members.join(",")
    )
}

#[test]
fn what_the_gateway_reads_and_rewrites_is_what_last_and_first_wins_parsers_see() {
    let mut rng = StdRng::seed_from_u64(0x5eed_0002);
    let mut forwarded = 0;
    for _ in 0..10_000 {
        let text = request_text(&mut rng);
        let Ok(Message::Request(req)) = parse(text.as_bytes()) else {
            assert!(has_duplicate(&text), "refused without a duplicate: {text}");
            continue;
        };
        let params = req.params.unwrap();
        let (last, first) = (last_wins(params.get()), first_wins(params.get()));
        assert_eq!(last, first, "{text}");

        // What the gateway reads (routing, policy) is what both parsers read.
        let mut obj = RawObject::parse(params).unwrap();
        let name = obj.get_str("name").unwrap().into_owned();
        assert_eq!(last["name"], Value::String(name), "{text}");
        let meta_raw = obj.get("_meta").unwrap().to_owned();
        let mut meta = RawObject::parse(&meta_raw).unwrap();
        assert_eq!(
            last["_meta"]["progressToken"].to_string(),
            meta.get("progressToken").unwrap().get(),
            "{text}"
        );

        // What the gateway writes (its own name and token) is what both parsers read in the
        // forwarded bytes, and every other member is untouched.
        obj.set("name", raw_string("own-name"));
        meta.set("progressToken", raw_u64(4242));
        obj.set("_meta", meta.to_raw());
        let out = obj.to_raw();
        let (out_last, out_first) = (last_wins(out.get()), first_wins(out.get()));
        assert_eq!(out_last, out_first, "{}", out.get());
        assert!(strict::check(out.get().as_bytes()).is_ok(), "{}", out.get());
        assert_eq!(out_last["name"], "own-name");
        assert_eq!(out_last["_meta"]["progressToken"], 4242);
        let mut expected = last.clone();
        expected["name"] = "own-name".into();
        expected["_meta"]["progressToken"] = 4242.into();
        assert_eq!(out_last, expected, "{text} -> {}", out.get());
        forwarded += 1;
    }
    assert!(forwarded > 1_000, "{forwarded}");
}

/// Edits `text` at random the way a broken or hostile sender might: a byte dropped, a
/// structural or escape character put in, one replaced (always at character boundaries, so the
/// text stays UTF-8 as the reader receives it).
fn mutate(rng: &mut StdRng, text: &str) -> String {
    const PIECES: [&str; 27] = [
        "{", "}", "[", "]", ",", ":", "\"", "\\", " ", "\t", "\u{c}", "\u{1}", "0", "01", "-", ".",
        "e", "+", "t", "null", "\\u", "\\ud800", "\\udc00", "\\u00", "\\n", "é", "\"id\":",
    ];
    let mut out = text.to_owned();
    for _ in 0..rng.random_range(1..3) {
        let bounds: Vec<usize> = (0..=out.len())
            .filter(|&i| out.is_char_boundary(i))
            .collect();
        let at = bounds[rng.random_range(0..bounds.len())];
        let piece = PIECES[rng.random_range(0..PIECES.len())];
        match rng.random_range(0..3) {
            0 if at < out.len() => {
                out.remove(at);
            }
            1 if at < out.len() => {
                out.remove(at);
                out.insert_str(at, piece);
            }
            _ => out.insert_str(at, piece),
        }
    }
    out
}

/// A message of every envelope shape around generated members.
fn message_text(rng: &mut StdRng) -> String {
    match rng.random_range(0..4) {
        0 => request_text(rng),
        1 => format!(
            r#"{{"jsonrpc":"2.0","id":{},"result":{}}}"#,
            rng.random_range(0..100),
            value_text(rng, 1)
        ),
        2 => format!(
            r#"{{"method":"notifications/progress","jsonrpc":"2.0","params":{}}}"#,
            value_text(rng, 1)
        ),
        _ => format!(
            r#"{{ "id" : "x{}" , "error" : {{"code":-1,"message":"m","data":{}}}, "jsonrpc" : "2.0" }}"#,
            rng.random_range(0..100),
            value_text(rng, 1)
        ),
    }
}

#[test]
fn the_one_pass_reader_takes_only_what_the_full_reader_takes_and_reads_it_the_same() {
    let mut rng = StdRng::seed_from_u64(0x5eed_0003);
    let (mut fast, mut declined, mut eligible) = (0, 0, 0);
    for round in 0..30_000 {
        let clean = message_text(&mut rng);
        let text = if round % 2 == 0 {
            mutate(&mut rng, &clean)
        } else {
            clean
        };
        let full = super::parse::read_object(text.as_bytes(), Some(&text));
        // Plain text the full reader takes (no escape anywhere, unique names) must not be
        // declined: the one-pass reader is the path ordinary messages take.
        let plain = !text.contains('\\') && !has_duplicate_or_unreadable(&text) && full.is_ok();
        match super::scan::envelope(&text) {
            Some(env) => {
                fast += 1;
                let read = super::parse::envelope_message(env);
                assert_eq!(format!("{read:?}"), format!("{full:?}"), "{text}");
                assert!(strict::check(text.as_bytes()).is_ok(), "{text}");
            }
            None => {
                declined += 1;
                assert!(!plain, "declined: {text}");
            }
        }
        if plain {
            eligible += 1;
        }
    }
    assert!(
        fast > 10_000 && declined > 5_000 && eligible > 5_000,
        "{fast} / {declined} / {eligible}"
    );
}

/// Whether `text` is not JSON, or has an object with two members of one name.
fn has_duplicate_or_unreadable(text: &str) -> bool {
    serde_json::from_str::<Value>(text).is_err() || has_duplicate(text)
}

#[test]
fn objects_are_split_as_serde_splits_them() {
    let mut rng = StdRng::seed_from_u64(0x5eed_0004);
    let mut split = 0;
    for _ in 0..20_000 {
        let text = format!(" {} ", value_text(&mut rng, 0));
        let Ok(raw) = serde_json::from_str::<&serde_json::value::RawValue>(&text) else {
            continue;
        };
        let by_serde = serde_json::from_str::<RawObject>(raw.get());
        let mut members = Vec::new();
        let one_pass = super::scan::object_members(raw.get(), |k, v| members.push((k, v)));
        if one_pass.is_some() {
            split += 1;
            let ours = RawObject::parse(raw).unwrap();
            assert_eq!(
                format!("{ours:?}"),
                format!("{:?}", by_serde.unwrap()),
                "{text}"
            );
            assert_eq!(ours.to_vec(), RawObject::parse(raw).unwrap().to_vec());
            assert_eq!(members.len(), members_as_written(raw.get()), "{text}");
        } else {
            // Declined only for what serde must unescape, or what is not an object.
            assert!(by_serde.is_err() || raw.get().contains('\\'), "{text}");
        }
    }
    assert!(split > 1_000, "{split}");
}

/// How many members the object `text` has as written (duplicates counted).
fn members_as_written(text: &str) -> usize {
    struct Count(usize);
    impl<'de> Deserialize<'de> for Count {
        fn deserialize<D: Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
            struct V;
            impl<'de> Visitor<'de> for V {
                type Value = Count;
                fn expecting(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
                    f.write_str("an object")
                }
                fn visit_map<M: MapAccess<'de>>(self, mut m: M) -> Result<Count, M::Error> {
                    let mut n = 0;
                    while m
                        .next_entry::<serde::de::IgnoredAny, serde::de::IgnoredAny>()?
                        .is_some()
                    {
                        n += 1;
                    }
                    Ok(Count(n))
                }
            }
            d.deserialize_map(V)
        }
    }
    serde_json::from_str::<Count>(text).unwrap().0
}
