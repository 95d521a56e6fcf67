//! Equal JSON values shared by the sessions that present them: a client's `capabilities` and
//! `clientInfo` are the same for every session a client program opens, and each copy as a
//! `serde_json::Value` costs a map node (~640 B) per object in it, so live sessions hold one
//! shared copy instead of one each.

use std::collections::HashMap;
use std::hash::{Hash, Hasher};
use std::sync::{Arc, LazyLock, Mutex, Weak};

use serde_json::Value;

/// Distinct values remembered at most; beyond, values no session holds any more are
/// forgotten, and a value that still finds no room is simply not shared.
const MAX_VALUES: usize = 4096;

static VALUES: LazyLock<Mutex<HashMap<u64, Weak<Value>>>> = LazyLock::new(Mutex::default);

/// The hash of a value's text (serde_json maps are ordered, so equal values hash equally).
pub fn fingerprint(value: &Value) -> u64 {
    let mut h = std::hash::DefaultHasher::new();
    value.to_string().hash(&mut h);
    h.finish()
}

/// `value`, or an equal one a live session already holds (`fingerprint` is `value`'s).
pub fn shared(value: Value, fingerprint: u64) -> Arc<Value> {
    // An empty object or null owns no heap memory: nothing to share.
    if value.as_object().is_some_and(|o| o.is_empty()) || value.is_null() {
        return Arc::new(value);
    }
    let Ok(mut values) = VALUES.lock() else {
        return Arc::new(value);
    };
    if let Some(known) = values.get(&fingerprint).and_then(Weak::upgrade)
        && *known == value
    {
        return known;
    }
    let value = Arc::new(value);
    if values.len() >= MAX_VALUES && !values.contains_key(&fingerprint) {
        values.retain(|_, v| v.strong_count() > 0);
    }
    if values.len() < MAX_VALUES || values.contains_key(&fingerprint) {
        values.insert(fingerprint, Arc::downgrade(&value));
    }
    value
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    fn share(v: Value) -> Arc<Value> {
        let fp = fingerprint(&v);
        shared(v, fp)
    }

    #[test]
    fn equal_values_are_one_allocation_while_held() {
        let a = share(json!({"roots": {"listChanged": true}, "interned-test": 1}));
        let b = share(json!({"roots": {"listChanged": true}, "interned-test": 1}));
        assert!(Arc::ptr_eq(&a, &b));
        let c = share(json!({"roots": {"listChanged": false}, "interned-test": 1}));
        assert!(!Arc::ptr_eq(&a, &c));
        assert_eq!(
            *c,
            json!({"roots": {"listChanged": false}, "interned-test": 1})
        );
    }

    #[test]
    fn a_value_nobody_holds_is_made_anew() {
        let a = share(json!({"interned-test": 2}));
        let weak = Arc::downgrade(&a);
        drop(a);
        assert!(weak.upgrade().is_none());
        let b = share(json!({"interned-test": 2}));
        assert_eq!(*b, json!({"interned-test": 2}));
    }

    #[test]
    fn a_colliding_fingerprint_never_hands_out_another_value() {
        let a = shared(json!({"interned-test": 3}), 42);
        let b = shared(json!({"interned-test": 4}), 42);
        assert_eq!(*a, json!({"interned-test": 3}));
        assert_eq!(*b, json!({"interned-test": 4}));
    }
}
