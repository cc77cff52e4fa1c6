//! Kubernetes' strategic merge patch, for a Pod, on JSON values: what
//! istiod's injector does to lay each rendered template over the pod
//! (`applyOverlayYAML`, which calls apimachinery's
//! `strategicpatch.StrategicMergePatch` with the Pod's struct tags).
//!
//! - maps merge key by key; a `null` deletes the key (and is dropped where
//!   there was nothing to delete); `$patch: replace` / `delete` in a map;
//! - lists the Pod's types mark `patchStrategy:"merge"` merge by their
//!   merge key (containers by `name`, ports by `containerPort`, volume
//!   mounts by `mountPath`, ...): matched items merge in place, new ones are
//!   added; the result lists the patch's items in patch order with the
//!   items only the original had interleaved as apimachinery's
//!   `mergeSortedSlice` does (so injected containers come first and the
//!   user's follow); `{$patch: delete, name: x}` removes an item,
//!   `{$patch: replace}` replaces the list;
//! - every other list is atomic: the patch's replaces the original's.
//!
//! What the typed round trip after each step would drop is dropped as it
//! is copied in: `null`s in new content, and new empty lists.

use serde_json::{Map, Value};

/// How a list at some path merges.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum ListKind {
    /// Items are maps merged by this key.
    Keyed(&'static str),
    /// Items are scalars, merged as a set.
    Primitive,
}

/// The Pod's merge lists (and a Service's and a ServiceAccount's), by the path of object keys leading to them
/// (array positions are not part of the path).
fn list_kind(path: &[&str]) -> Option<ListKind> {
    use ListKind::*;
    let container_field = |rest: &[&str]| -> Option<ListKind> {
        match rest {
            ["env"] => Some(Keyed("name")),
            ["ports"] => Some(Keyed("containerPort")),
            ["volumeMounts"] => Some(Keyed("mountPath")),
            ["volumeDevices"] => Some(Keyed("devicePath")),
            _ => None,
        }
    };
    // A Pod, or a pod template inside a workload (spec.template).
    let path = match path {
        ["spec", "template", rest @ ..] => rest,
        p => p,
    };
    match path {
        ["metadata", "finalizers"] => Some(Primitive),
        ["metadata", "ownerReferences"] => Some(Keyed("uid")),
        ["spec", "containers" | "initContainers" | "ephemeralContainers"] => Some(Keyed("name")),
        ["spec", "containers" | "initContainers" | "ephemeralContainers", rest @ ..] => container_field(rest),
        ["spec", "volumes" | "imagePullSecrets" | "resourceClaims" | "schedulingGates"] => Some(Keyed("name")),
        ["spec", "hostAliases"] => Some(Keyed("ip")),
        // A Service's ports and a ServiceAccount's secrets (the gateway
        // deployment controller's overlays; a Pod has neither path).
        ["spec", "ports"] => Some(Keyed("port")),
        ["secrets" | "imagePullSecrets"] => Some(Keyed("name")),
        _ => None,
    }
}

/// Lays `patch` over `target` (a Pod, as JSON).
pub fn merge_pod(target: &mut Value, patch: &Value) {
    let mut path = Vec::new();
    merge_value(target, patch, &mut path);
}

fn merge_value<'a>(target: &mut Value, patch: &'a Value, path: &mut Vec<&'a str>) {
    match (target, patch) {
        (Value::Object(t), Value::Object(p)) => merge_map(t, p, path),
        (t, p) => *t = clean(p),
    }
}

fn merge_map<'a>(target: &mut Map<String, Value>, patch: &'a Map<String, Value>, path: &mut Vec<&'a str>) {
    match patch.get("$patch").and_then(Value::as_str) {
        Some("replace") => {
            *target =
                patch.iter().filter(|(k, _)| k.as_str() != "$patch").map(|(k, v)| (k.clone(), clean(v))).collect();
            return;
        }
        Some("delete") => {
            target.clear();
            return;
        }
        _ => {}
    }
    for (key, pv) in patch {
        if key.starts_with('$') {
            continue;
        }
        if pv.is_null() {
            target.remove(key);
            continue;
        }
        path.push(key);
        match target.get_mut(key) {
            // An empty list is what the Pod's `omitempty` fields drop.
            None if pv.as_array().is_some_and(Vec::is_empty) => {}
            None => {
                target.insert(key.clone(), clean(pv));
            }
            Some(tv) => match (tv, pv, list_kind(path)) {
                (Value::Array(t), Value::Array(p), Some(kind)) => merge_list(t, p, kind, path),
                (tv, pv, _) => merge_value(tv, pv, path),
            },
        }
        path.pop();
    }
}

/// A copy of patch content without `null`s and directives.
fn clean(v: &Value) -> Value {
    match v {
        Value::Object(m) => {
            m.iter().filter(|(k, v)| !v.is_null() && !k.starts_with('$')).map(|(k, v)| (k.clone(), clean(v))).collect()
        }
        Value::Array(a) => Value::Array(a.iter().filter(|v| !is_directive(v)).map(clean).collect()),
        v => v.clone(),
    }
}

fn is_directive(v: &Value) -> bool {
    v.get("$patch").is_some()
}

fn key_of(item: &Value, kind: ListKind) -> Option<&Value> {
    match kind {
        ListKind::Keyed(k) => item.get(k),
        ListKind::Primitive => Some(item),
    }
}

/// An item with its place in the patch and in the original.
type Placed = (Option<usize>, Option<usize>, Value);

fn merge_list<'a>(target: &mut Vec<Value>, patch: &'a [Value], kind: ListKind, path: &mut Vec<&'a str>) {
    if patch.iter().any(|p| p.get("$patch").and_then(Value::as_str) == Some("replace")) {
        *target = patch.iter().filter(|v| !is_directive(v)).map(clean).collect();
        return;
    }
    // An empty patch list leaves the original alone (apimachinery's
    // mergeSlice returns the original for it).
    if patch.is_empty() {
        return;
    }
    // Items are found by key through maps built once: a pod's lists can
    // be long, and a linear search per item made this quadratic.
    let key_str = |v: &Value| key_of(v, kind).map(Value::to_string);
    let server_index: std::collections::HashMap<String, usize> = {
        let mut m = std::collections::HashMap::new();
        for (i, s) in target.iter().enumerate() {
            if let Some(k) = key_str(s) {
                m.entry(k).or_insert(i);
            }
        }
        m
    };
    let mut merged = std::mem::take(target);
    let mut merged_index: std::collections::HashMap<String, usize> = server_index.clone();
    let mut patch_index: std::collections::HashMap<String, usize> = std::collections::HashMap::new();
    for p in patch {
        let Some(key) = key_str(p) else {
            // An item without its merge key cannot be placed: apimachinery
            // refuses the patch; keep the original item list as it is.
            continue;
        };
        if p.get("$patch").and_then(Value::as_str) == Some("delete") {
            merged.retain(|t| key_str(t).as_ref() != Some(&key));
            merged_index = merged.iter().enumerate().filter_map(|(i, t)| Some((key_str(t)?, i))).rev().collect();
            continue;
        }
        let n = patch_index.len();
        patch_index.entry(key.clone()).or_insert(n);
        match merged_index.get(&key) {
            Some(&i) if kind != ListKind::Primitive => merge_value(&mut merged[i], p, path),
            Some(_) => {}
            None => {
                merged_index.insert(key, merged.len());
                merged.push(clean(p));
            }
        }
    }
    // apimachinery's normalizeElementOrder + mergeSortedSlice.
    let (mut left, mut right): (Vec<Placed>, Vec<Placed>) = merged
        .into_iter()
        .map(|m| {
            let k = key_str(&m);
            let pi = k.as_ref().and_then(|k| patch_index.get(k).copied());
            let si = k.as_ref().and_then(|k| server_index.get(k).copied());
            (pi, si, m)
        })
        .partition(|(pi, _, _)| pi.is_some());
    left.sort_by_key(|(pi, _, _)| *pi);
    right.sort_by_key(|(_, si, _)| *si);
    let (mut li, mut ri) = (left.into_iter().peekable(), right.into_iter().peekable());
    loop {
        let take_right = match (li.peek(), ri.peek()) {
            (None, None) => break,
            (None, Some(_)) => true,
            (Some(_), None) => false,
            (Some((_, a, _)), Some((_, b, _))) => match (a, b) {
                (Some(a), Some(b)) => b < a,
                _ => false,
            },
        };
        let next = if take_right { ri.next() } else { li.next() };
        target.extend(next.map(|(_, _, v)| v));
    }
}

#[cfg(test)]
mod tests {
    use serde_json::json;

    use super::*;

    fn merged(orig: Value, patch: Value) -> Value {
        let mut t = orig;
        merge_pod(&mut t, &patch);
        t
    }

    #[test]
    fn containers_merge_by_name_with_new_ones_first() {
        let pod = json!({"spec": {"containers": [{"name": "app", "image": "a"}]}});
        let patch = json!({"spec": {"containers": [
            {"name": "istio-proxy", "image": "p", "env": [{"name": "A", "value": "1"}]},
        ]}});
        let out = merged(pod, patch);
        assert_eq!(
            out["spec"]["containers"],
            json!([
                {"name": "istio-proxy", "image": "p", "env": [{"name": "A", "value": "1"}]},
                {"name": "app", "image": "a"},
            ])
        );
    }

    #[test]
    fn matched_items_merge_in_place_and_keep_the_servers_relative_order() {
        // a and c exist; the patch touches c and adds n: c's place relative
        // to a is the server's (a first), n comes where the patch put it.
        let pod = json!({"spec": {"volumes": [{"name": "a"}, {"name": "b"}, {"name": "c", "emptyDir": {}}]}});
        let patch = json!({"spec": {"volumes": [{"name": "n"}, {"name": "c", "emptyDir": null, "secret": {"x": 1}}]}});
        let out = merged(pod, patch);
        let names: Vec<_> = out["spec"]["volumes"].as_array().unwrap().iter().map(|v| v["name"].clone()).collect();
        assert_eq!(names, [json!("n"), json!("a"), json!("b"), json!("c")]);
        assert_eq!(out["spec"]["volumes"][3], json!({"name": "c", "secret": {"x": 1}}));
    }

    #[test]
    fn nested_lists_merge_by_their_keys_and_atomic_lists_are_replaced() {
        let pod = json!({"spec": {"containers": [{"name": "p", "args": ["a"], "env": [{"name": "X", "value": "0"}],
            "ports": [{"containerPort": 80}], "volumeMounts": [{"mountPath": "/a", "name": "a"}]}]}});
        let patch = json!({"spec": {"containers": [{"name": "p", "args": ["b"], "env": [{"name": "X", "value": "1"},
            {"name": "Y", "value": "2"}], "ports": [{"containerPort": 90}],
            "volumeMounts": [{"mountPath": "/a", "readOnly": true}]}]}});
        let c = &merged(pod, patch)["spec"]["containers"][0];
        assert_eq!(c["args"], json!(["b"]));
        assert_eq!(c["env"], json!([{"name": "X", "value": "1"}, {"name": "Y", "value": "2"}]));
        assert_eq!(c["ports"], json!([{"containerPort": 90}, {"containerPort": 80}]));
        assert_eq!(c["volumeMounts"], json!([{"mountPath": "/a", "name": "a", "readOnly": true}]));
    }

    #[test]
    fn directives_and_nulls() {
        // TestStrategicMerge in istio's inject_test.go: $patch: replace on labels.
        let pod = json!({"metadata": {"labels": {"a": "1", "b": "2"}}, "spec": {"containers": [{"name": "x"}, {"name": "y"}]}});
        let patch = json!({"metadata": {"labels": {"$patch": "replace", "c": "3"}, "annotations": null},
            "spec": {"containers": [{"$patch": "delete", "name": "x"}], "initContainers": []}});
        let out = merged(pod, patch);
        assert_eq!(out, json!({"metadata": {"labels": {"c": "3"}}, "spec": {"containers": [{"name": "y"}]}}));
        let out = merged(
            json!({"spec": {"containers": [{"name": "x"}]}}),
            json!({"spec": {"containers": [{"$patch": "replace"}, {"name": "z", "image": null}]}}),
        );
        assert_eq!(out, json!({"spec": {"containers": [{"name": "z"}]}}));
    }
}
