//! A JSONPatch (RFC 6902) from one document to another, the structural
//! diff istiod's injector sends (`gomodules.xyz/jsonpatch/v2` v2.5's
//! `CreatePatch`): objects give `add` for new keys, `remove` for gone ones
//! and recurse into common ones; arrays remove their surplus from the end,
//! add their new tail, then recurse position by position; anything else
//! that differs is a `replace`. Keys go in sorted order, so the same change
//! gives the same bytes (Go's came out in map order).

use serde_json::{Value, json};

/// The operations that turn `from` into `to`.
pub fn diff(from: &Value, to: &Value) -> Vec<Value> {
    let mut ops = Vec::new();
    let mut path = String::new();
    walk(from, to, &mut path, &mut ops);
    ops
}

fn push_segment(path: &mut String, seg: &str) {
    path.push('/');
    for c in seg.chars() {
        match c {
            '~' => path.push_str("~0"),
            '/' => path.push_str("~1"),
            c => path.push(c),
        }
    }
}

fn walk(a: &Value, b: &Value, path: &mut String, ops: &mut Vec<Value>) {
    if a == b {
        return;
    }
    match (a, b) {
        (Value::Object(x), Value::Object(y)) => {
            for (k, bv) in y {
                let len = path.len();
                push_segment(path, k);
                match x.get(k) {
                    None => ops.push(json!({"op": "add", "path": path.as_str(), "value": bv})),
                    Some(av) => walk(av, bv, path, ops),
                }
                path.truncate(len);
            }
            for k in x.keys().filter(|k| !y.contains_key(*k)) {
                let len = path.len();
                push_segment(path, k);
                ops.push(json!({"op": "remove", "path": path.as_str()}));
                path.truncate(len);
            }
        }
        (Value::Array(x), Value::Array(y)) => {
            let n = x.len().min(y.len());
            for i in (n..x.len()).rev() {
                ops.push(json!({"op": "remove", "path": format!("{path}/{i}")}));
            }
            for (i, v) in y.iter().enumerate().skip(n) {
                ops.push(json!({"op": "add", "path": format!("{path}/{i}"), "value": v}));
            }
            for i in 0..n {
                let len = path.len();
                path.push_str(&format!("/{i}"));
                walk(&x[i], &y[i], path, ops);
                path.truncate(len);
            }
        }
        _ => ops.push(json!({"op": "replace", "path": path.as_str(), "value": b})),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Applies `ops` with the `json-patch` crate (kube's, an independent
    /// RFC 6902 implementation).
    fn apply(doc: &Value, ops: &[Value]) -> Value {
        let patch: json_patch::Patch = serde_json::from_value(Value::Array(ops.to_vec())).unwrap();
        let mut d = doc.clone();
        json_patch::patch(&mut d, &patch).unwrap();
        d
    }

    #[test]
    fn the_patch_turns_one_document_into_the_other() {
        let cases = [
            (json!({"a": 1}), json!({"a": 1})),
            (json!({"a": 1, "b": {"c": [1, 2, 3]}}), json!({"b": {"c": [1, 5]}, "d/e~f": null})),
            (json!({"l": [{"n": "x"}]}), json!({"l": [{"n": "y"}, {"n": "x"}, {"n": "z"}]})),
            (json!({"x": "s"}), json!({"x": {"y": true}})),
            (json!([1, {"a": 2}]), json!({"top": "changed"})),
        ];
        for (a, b) in cases {
            let ops = diff(&a, &b);
            assert_eq!(apply(&a, &ops), b, "{ops:?}");
        }
        assert!(diff(&json!({"a": [1]}), &json!({"a": [1]})).is_empty());
        assert_eq!(diff(&json!({}), &json!({"a/b": 1})), vec![json!({"op": "add", "path": "/a~1b", "value": 1})]);
    }
}
