#![allow(clippy::unwrap_used)]

use super::*;

#[test]
fn user_keys_are_stable_opaque_and_distinct() {
    let a = user_key("https://idp", "alice");
    assert_eq!(a, user_key("https://idp", "alice"));
    assert_eq!(a.len(), 34);
    assert!(!a.contains("alice"));
    assert_ne!(a, user_key("https://idp", "bob"));
    assert_ne!(a, user_key("https://other", "alice"));
    // The separator keeps ("ab", "c") and ("a", "bc") apart.
    assert_ne!(user_key("ab", "c"), user_key("a", "bc"));
}

#[test]
fn bearer_parsing() {
    let resource = ResourceIdentity::new("https://h/mcp".into());
    let token = |h: &HeaderMap| bearer(h, &resource).unwrap().map(str::to_owned);
    let mut h = HeaderMap::new();
    assert!(token(&h).is_none());
    h.insert(header::AUTHORIZATION, "Bearer abc.def".parse().unwrap());
    assert_eq!(token(&h).as_deref(), Some("abc.def"));
    h.insert(header::AUTHORIZATION, "bearer   xyz ".parse().unwrap());
    assert_eq!(token(&h).as_deref(), Some("xyz"));
    h.insert(header::AUTHORIZATION, "Basic dXNlcjpwYXNz".parse().unwrap());
    assert!(token(&h).is_none());
    h.insert(header::AUTHORIZATION, "Bearer ".parse().unwrap());
    assert!(token(&h).is_none());
    h.append(header::AUTHORIZATION, "Bearer abc".parse().unwrap());
    let Err(GatewayError::MalformedCredentials {
        www_authenticate, ..
    }) = bearer(&h, &resource)
    else {
        panic!("a repeated Authorization header is malformed");
    };
    assert!(www_authenticate.starts_with("Bearer error=\"invalid_request\""));
}

#[test]
fn claims_match_strings_arrays_and_scalars() {
    let claims =
        serde_json::from_str(r#"{"groups":["eng","ops"],"dept":"eng","admin":true,"level":3}"#)
            .unwrap();
    let p = Principal::granted(
        "u-test".into(),
        Arc::new(Grants {
            scopes: Default::default(),
            claims,
        }),
    );
    assert!(p.has_claim("groups", "ops"));
    assert!(!p.has_claim("groups", "sales"));
    assert!(p.has_claim("dept", "eng"));
    assert!(p.has_claim("admin", "true"));
    assert!(p.has_claim("level", "3"));
    assert!(!p.has_claim("missing", "x"));
}
