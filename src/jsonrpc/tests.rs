#![allow(clippy::unwrap_used)]

use super::*;

fn req(input: &str) -> (String, String, Option<String>) {
    match parse(input.as_bytes()).unwrap() {
        Message::Request(r) => (
            r.id.get().to_owned(),
            r.method.into_owned(),
            r.params.map(|p| p.get().to_owned()),
        ),
        other => panic!("expected request, got {other:?}"),
    }
}

#[test]
fn request_keeps_params_bytes_verbatim() {
    let (id, method, params) = req(
        r#"{"jsonrpc":"2.0","id":"a-1","method":"tools/call","params":{"name":"x", "arguments":{"b":  1.50}}}"#,
    );
    assert_eq!(id, r#""a-1""#);
    assert_eq!(method, "tools/call");
    assert_eq!(params.unwrap(), r#"{"name":"x", "arguments":{"b":  1.50}}"#);
}

#[test]
fn classifies_notifications_and_responses() {
    assert!(matches!(
        parse(br#"{"jsonrpc":"2.0","method":"notifications/initialized"}"#).unwrap(),
        Message::Notification(_)
    ));
    match parse(br#"{"jsonrpc":"2.0","id":7,"result":{}}"#).unwrap() {
        Message::Response(r) => {
            assert_eq!(r.id.get(), "7");
            assert!(matches!(r.outcome, Outcome::Result(x) if x.get() == "{}"));
        }
        other => panic!("{other:?}"),
    }
    match parse(br#"{"jsonrpc":"2.0","id":7,"error":{"code":-1,"message":"m"}}"#).unwrap() {
        Message::Response(r) => assert!(matches!(r.outcome, Outcome::Error(_))),
        other => panic!("{other:?}"),
    }
}

#[test]
fn rejects_invalid_messages_with_reasons() {
    assert!(matches!(parse(b"{nope"), Err(ParseError::NotJson(_))));
    assert!(matches!(parse(b""), Err(ParseError::NotJson(_))));
    assert_eq!(parse(b"[{}]").unwrap_err(), ParseError::Batch);
    assert!(matches!(
        parse(b"42"),
        Err(ParseError::InvalidRequest { id: None, .. })
    ));
    let e = parse(br#"{"jsonrpc":"1.0","id":3,"method":"ping"}"#).unwrap_err();
    assert_eq!(
        e,
        ParseError::InvalidRequest {
            reason: "`jsonrpc` must be \"2.0\"".into(),
            id: Some("3".into())
        }
    );
    for bad_id in ["null", "1.5", "true", "{}", "1e3"] {
        let input = format!(r#"{{"jsonrpc":"2.0","id":{bad_id},"method":"ping"}}"#);
        assert!(
            matches!(
                parse(input.as_bytes()),
                Err(ParseError::InvalidRequest { .. })
            ),
            "{bad_id}"
        );
    }
    assert!(matches!(
        parse(br#"{"jsonrpc":"2.0","id":1,"method":"x","params":3}"#),
        Err(ParseError::InvalidRequest { .. })
    ));
    assert!(matches!(
        parse(br#"{"jsonrpc":"2.0","id":1,"result":{},"error":{}}"#),
        Err(ParseError::InvalidRequest { .. })
    ));
    assert!(matches!(
        parse(br#"{"jsonrpc":"2.0","method":5}"#),
        Err(ParseError::InvalidRequest { .. })
    ));
}

#[test]
fn a_numbered_request_is_the_request_with_that_numbers_id() {
    let params = RawValue::from_string(r#"{"a": [1, 2]}"#.into()).unwrap();
    for n in [0, 7, 10, 4_294_967_296, u64::MAX] {
        assert_eq!(raw_u64(n).get(), n.to_string());
        for p in [None, Some(params.as_ref())] {
            let numbered = numbered_request(n, "tools/call", p);
            assert_eq!(numbered, request(&raw_u64(n), "tools/call", p));
            // Exactly as long as it needs to be (what lets `Bytes::from` take it as it is).
            assert_eq!(numbered.capacity(), numbered.len());
            let Message::Request(back) = parse(&numbered).unwrap() else {
                panic!("not a request: {}", String::from_utf8_lossy(&numbered));
            };
            assert_eq!(back.id.get(), n.to_string());
        }
    }
}

#[test]
fn writers_copy_raw_parts() {
    let params = RawValue::from_string(r#"{"a": [1, 2]}"#.into()).unwrap();
    let out = request(&raw_u64(9), "tools/call", Some(&params));
    assert_eq!(
        std::str::from_utf8(&out).unwrap(),
        r#"{"jsonrpc":"2.0","id":9,"method":"tools/call","params":{"a": [1, 2]}}"#
    );
    let result = RawValue::from_string(r#"{"x" : 1}"#.into()).unwrap();
    let out = response_with_id(raw_string("c\"1").get(), Outcome::Result(&result));
    assert_eq!(out.capacity(), out.len());
    assert_eq!(
        std::str::from_utf8(&out).unwrap(),
        r#"{"jsonrpc":"2.0","id":"c\"1","result":{"x" : 1}}"#
    );
    let e = error_response(None, code::PARSE_ERROR, "bad \"json\"", None);
    let v: serde_json::Value = serde_json::from_slice(&e).unwrap();
    assert_eq!(v["id"], serde_json::Value::Null);
    assert_eq!(v["error"]["message"], "bad \"json\"");
}

#[test]
fn batches_split_into_borrowed_members() {
    let input =
        br#" [ {"jsonrpc":"2.0","id":1,"method":"ping"}, {"jsonrpc":"2.0","method":"n"}, 7 ]"#;
    assert!(super::is_batch(input));
    assert!(!super::is_batch(br#" {"jsonrpc":"2.0"}"#));
    let members = super::split_batch(input).unwrap();
    assert_eq!(members.len(), 3);
    assert_eq!(
        members[0].get(),
        r#"{"jsonrpc":"2.0","id":1,"method":"ping"}"#
    );
    assert!(matches!(
        parse(members[1].get().as_bytes()),
        Ok(Message::Notification(_))
    ));
    assert!(matches!(
        parse(members[2].get().as_bytes()),
        Err(ParseError::InvalidRequest { .. })
    ));
    // Members borrow from the input: no copy of their payload.
    let start = members[0].get().as_ptr() as usize;
    assert!(start > input.as_ptr() as usize && start < input.as_ptr() as usize + input.len());
    assert!(matches!(
        super::split_batch(b"[]"),
        Err(ParseError::InvalidRequest { .. })
    ));
    assert!(matches!(
        super::split_batch(b"[{"),
        Err(ParseError::NotJson(_))
    ));
}

#[test]
fn a_shared_id_is_the_ids_text_found_by_it_and_a_value_again() {
    let mut map = std::collections::HashMap::new();
    for text in ["7", "\"a\\\"b\"", "-12"] {
        let raw = RawValue::from_string(text.to_owned()).expect("valid JSON");
        let id = SharedId::new(&raw);
        assert_eq!(id.get(), text);
        assert_eq!(id.to_raw().expect("valid").get(), text);
        map.insert(id.clone(), text.len());
        assert_eq!(map.get(text), Some(&text.len()), "looked up by the text");
    }
}
