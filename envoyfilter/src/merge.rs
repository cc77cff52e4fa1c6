//! istiod's proto merge (`pkg/proto/merge`, Go's `proto.Merge` with one
//! exception) over dynamic messages: each field `src` populates is merged
//! into `dst`: a message recursively (a `Duration` replaced whole), a list
//! appended to (or, for MERGE_AND_REPLACE_LIST, replaced), a map's entries
//! replaced by key, anything else (scalars, bytes, enums, and so an
//! `Any`'s type and bytes) set. Setting a member of a oneof clears the
//! others. And `merge_any`, istiod's `MergeAnyWithAny`, merges two `Any`s
//! of one type as their messages.

use prost_reflect::{DynamicMessage, ReflectMessage, Value};

/// How lists merge.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Lists {
    /// Appended (MERGE).
    Append,
    /// Replaced where `src` sets them, at any depth
    /// (MERGE_AND_REPLACE_LIST).
    Replace,
}

/// Merges `src` into `dst` (both of one type).
pub fn merge(dst: &mut DynamicMessage, src: &DynamicMessage, lists: Lists) {
    for (field, value) in src.fields() {
        match value {
            Value::List(items) => {
                let target = dst.get_field_mut(&field);
                if let Value::List(existing) = target {
                    if lists == Lists::Replace {
                        existing.clear();
                    }
                    existing.extend(items.iter().cloned());
                }
            }
            Value::Map(entries) => {
                let target = dst.get_field_mut(&field);
                if let Value::Map(existing) = target {
                    for (k, v) in entries {
                        existing.insert(k.clone(), v.clone());
                    }
                }
            }
            Value::Message(m) if m.descriptor().full_name() != "google.protobuf.Duration" => {
                let target = dst.get_field_mut(&field);
                match target {
                    Value::Message(existing) => merge(existing, m, lists),
                    other => *other = value.clone(),
                }
            }
            _ => dst.set_field(&field, value.clone()),
        }
    }
}

/// The `Any` holding `dst`'s message merged with `src`'s: `None` when
/// they are not of one type in the schema (istiod's `MergeAnyWithAny`
/// fails, and the patch is an error).
pub fn merge_any(dst: &DynamicMessage, src: &DynamicMessage) -> Option<DynamicMessage> {
    let unpack = |any: &DynamicMessage| -> Option<DynamicMessage> {
        let url = any.get_field_by_name("type_url")?.as_str()?.to_owned();
        let bytes = any.get_field_by_name("value")?.as_bytes()?.clone();
        let desc = crate::schema::message(url.rsplit('/').next()?)?;
        DynamicMessage::decode(desc, bytes).ok()
    };
    let (mut d, s) = (unpack(dst)?, unpack(src)?);
    if d.descriptor() != s.descriptor() {
        return None;
    }
    merge(&mut d, &s, Lists::Append);
    Some(to_any(&d))
}

/// `m` packed in an `Any` (`type.googleapis.com/<full name>`).
pub fn to_any(m: &DynamicMessage) -> DynamicMessage {
    let desc = crate::schema::message("google.protobuf.Any").expect("Any is in the schema");
    let mut any = DynamicMessage::new(desc);
    any.set_field_by_name("type_url", Value::String(format!("type.googleapis.com/{}", m.descriptor().full_name())));
    any.set_field_by_name("value", Value::Bytes(crate::canonical::encode(m).into()));
    any
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::schema;
    use serde_json::json;

    fn cluster(v: serde_json::Value) -> DynamicMessage {
        schema::from_json(schema::message("envoy.config.cluster.v3.Cluster").unwrap(), &v).unwrap()
    }

    /// pkg/proto/merge/merge_test.go (`TestMerge`): durations replaced,
    /// lists appended (or replaced), maps by key, scalars set, oneofs
    /// switched.
    #[test]
    fn merges_as_istiod_merges() {
        let mut dst = cluster(json!({
            "name": "c", "connect_timeout": "10s", "type": "EDS",
            "circuit_breakers": {"thresholds": [{"max_connections": 1}]},
            "metadata": {"filter_metadata": {"a": {"x": 1}, "b": {"y": 2}}},
        }));
        let src = cluster(json!({
            "connect_timeout": "0.5s", "cluster_type": {"name": "envoy.clusters.aggregate"},
            "circuit_breakers": {"thresholds": [{"max_retries": 3}]},
            "metadata": {"filter_metadata": {"a": {"z": 3}}},
            "per_connection_buffer_limit_bytes": 1024,
        }));
        merge(&mut dst, &src, Lists::Append);
        let got = serde_json::to_value(&dst).unwrap();
        assert_eq!(got["connectTimeout"], "0.500s");
        assert!(got.get("type").is_none(), "the oneof's other member is cleared: {got}");
        assert_eq!(got["clusterType"]["name"], "envoy.clusters.aggregate");
        assert_eq!(got["circuitBreakers"]["thresholds"].as_array().unwrap().len(), 2, "{got}");
        assert_eq!(got["metadata"]["filterMetadata"]["a"], json!({"z": 3.0}), "a map entry is replaced");
        assert_eq!(got["metadata"]["filterMetadata"]["b"], json!({"y": 2.0}));
        assert_eq!(got["perConnectionBufferLimitBytes"], 1024);
        assert_eq!(got["name"], "c");
        let mut again = cluster(json!({"circuit_breakers": {"thresholds": [{"max_connections": 1}]}}));
        merge(&mut again, &src, Lists::Replace);
        let got = serde_json::to_value(&again).unwrap();
        assert_eq!(got["circuitBreakers"]["thresholds"], json!([{"maxRetries": 3}]));
    }

    #[test]
    fn anys_of_one_type_merge_as_their_messages() {
        let any =
            |v: serde_json::Value| schema::from_json(schema::message("google.protobuf.Any").unwrap(), &v).unwrap();
        let t = "type.googleapis.com/envoy.extensions.filters.http.lua.v3.Lua";
        let dst = any(json!({"@type": t, "default_source_code": {"inline_string": "a"}, "stat_prefix": "x"}));
        let src = any(json!({"@type": t, "stat_prefix": "y"}));
        let merged = merge_any(&dst, &src).unwrap();
        let got = serde_json::to_value(&merged).unwrap();
        assert_eq!(got["statPrefix"], "y");
        assert_eq!(got["defaultSourceCode"]["inlineString"], "a");
        let other = any(json!({"@type": "type.googleapis.com/envoy.extensions.filters.http.router.v3.Router"}));
        assert!(merge_any(&dst, &other).is_none());
    }
}
