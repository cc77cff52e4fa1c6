//! The complete Envoy API as a descriptor pool: Envoy's, xDS's and their
//! imports' (proto/descriptors/envoy.binpb, made by
//! scripts/envoy-descriptors from the pinned `xds-protos` package), with
//! istiod-rs's own schemas (Istio's filter configs) added where Envoy's
//! set does not have them. Patch values are read into, and resources
//! patched as, dynamic messages of this pool, so a field the project's own
//! prost types do not carry survives every patch.

use std::sync::OnceLock;

use prost::Message;
use prost_reflect::{DescriptorPool, DeserializeOptions, DynamicMessage, MessageDescriptor};

/// The serialized Envoy API.
const ENVOY: &[u8] = include_bytes!("../../proto/descriptors/envoy.binpb");

/// The pool (built once, on first use: about a megabyte of descriptors).
pub fn pool() -> &'static DescriptorPool {
    static POOL: OnceLock<DescriptorPool> = OnceLock::new();
    POOL.get_or_init(|| {
        let mut pool = DescriptorPool::decode(ENVOY).expect("the bundled Envoy descriptors decode");
        let ours = prost_types::FileDescriptorSet::decode(istiod_proto::FILE_DESCRIPTOR_SET)
            .expect("istiod-proto's descriptors decode");
        // Ours in dependency order; a file Envoy's set has is Envoy's.
        for file in ours.file {
            if pool.get_file_by_name(file.name()).is_none() {
                // A file of ours that clashes with Envoy's names is left
                // out: Envoy's schema wins.
                let _ = pool.add_file_descriptor_proto(file);
            }
        }
        pool
    })
}

/// The message type `name` (`envoy.config.cluster.v3.Cluster`).
pub fn message(name: &str) -> Option<MessageDescriptor> {
    pool().get_message_by_name(name)
}

/// A message of type `desc` from the JSON `value` (istiod's
/// `StructToMessage`, not strict: unknown fields are dropped, an `Any`
/// whose `@type` is not in the schema is an error).
pub fn from_json(desc: MessageDescriptor, value: &serde_json::Value) -> Result<DynamicMessage, String> {
    let options = DeserializeOptions::new().deny_unknown_fields(false);
    let mut value = value.clone();
    go_durations(&desc, &mut value);
    DynamicMessage::deserialize_with_options(desc, value, &options).map_err(|e| e.to_string())
}

/// istiod reads patch values with Go's legacy JSON reader, whose durations
/// are Go's (`100ms`, `1m30s`, `2h`): each such string in a Duration field
/// of `value` (a message of type `desc`, Anys followed by their `@type`)
/// becomes protobuf's seconds form.
fn go_durations(desc: &MessageDescriptor, value: &mut serde_json::Value) {
    use prost_reflect::Kind;
    let serde_json::Value::Object(map) = value else { return };
    if desc.full_name() == "google.protobuf.Any" {
        let inner = map.get("@type").and_then(|t| t.as_str()).and_then(|t| t.rsplit('/').next()).and_then(message);
        if let Some(inner) = inner {
            go_durations(&inner, value);
        }
        return;
    }
    for (key, v) in map.iter_mut() {
        let Some(field) = desc.get_field_by_name(key).or_else(|| desc.get_field_by_json_name(key)) else { continue };
        let Kind::Message(m) = field.kind() else { continue };
        let fix = |v: &mut serde_json::Value| {
            if m.full_name() == "google.protobuf.Duration" {
                if let Some(seconds) = v.as_str().and_then(go_duration) {
                    *v = serde_json::Value::String(seconds);
                }
            } else {
                go_durations(&m, v);
            }
        };
        match v {
            serde_json::Value::Array(items) if field.is_list() => items.iter_mut().for_each(fix),
            serde_json::Value::Object(entries) if field.is_map() => {
                let value_kind = m.map_entry_value_field().kind();
                if let Kind::Message(vm) = value_kind {
                    for e in entries.values_mut() {
                        if vm.full_name() == "google.protobuf.Duration" {
                            if let Some(seconds) = e.as_str().and_then(go_duration) {
                                *e = serde_json::Value::String(seconds);
                            }
                        } else {
                            go_durations(&vm, e);
                        }
                    }
                }
            }
            _ => fix(v),
        }
    }
}

/// Go's `time.ParseDuration` form (`1h2m3.5s`, `100ms`, `-1.5us`) as
/// protobuf's (`3723.500s`); `None` when it is protobuf's already or not
/// a duration (left for the reader to refuse).
fn go_duration(s: &str) -> Option<String> {
    let (neg, mut rest) = match s.strip_prefix('-') {
        Some(r) => (true, r),
        None => (false, s.strip_prefix('+').unwrap_or(s)),
    };
    // Already protobuf's: digits, an optional fraction, `s`.
    let plain = |x: &str| {
        x.strip_suffix('s').is_some_and(|n| !n.is_empty() && n.chars().all(|c| c.is_ascii_digit() || c == '.'))
    };
    if plain(rest) || rest.is_empty() {
        return None;
    }
    let mut nanos: f64 = 0.0;
    while !rest.is_empty() {
        let end = rest.find(|c: char| !(c.is_ascii_digit() || c == '.')).unwrap_or(rest.len());
        let number: f64 = rest[..end].parse().ok()?;
        rest = &rest[end..];
        let unit_end = rest.find(|c: char| c.is_ascii_digit() || c == '.').unwrap_or(rest.len());
        let scale = match &rest[..unit_end] {
            "ns" => 1.0,
            "us" | "µs" | "μs" => 1e3,
            "ms" => 1e6,
            "s" => 1e9,
            "m" => 60e9,
            "h" => 3600e9,
            _ => return None,
        };
        rest = &rest[unit_end..];
        nanos += number * scale;
    }
    let total = nanos.round() as i128;
    let (secs, frac) = (total / 1_000_000_000, total % 1_000_000_000);
    let sign = if neg { "-" } else { "" };
    Some(if frac == 0 { format!("{sign}{secs}s") } else { format!("{sign}{secs}.{frac:09}s") })
}

/// `bytes` as a message of type `desc`.
pub fn decode(desc: MessageDescriptor, bytes: &[u8]) -> Result<DynamicMessage, String> {
    DynamicMessage::decode(desc, bytes).map_err(|e| e.to_string())
}

#[cfg(test)]
mod tests {
    use serde_json::json;

    /// istiod's legacy JSON reader takes Go durations in patch values.
    #[test]
    fn go_durations_read_as_istiod_reads_them() {
        assert_eq!(super::go_duration("100ms").as_deref(), Some("0.100000000s"));
        assert_eq!(super::go_duration("1m30s").as_deref(), Some("90s"));
        assert_eq!(super::go_duration("2h").as_deref(), Some("7200s"));
        assert_eq!(super::go_duration("1.5s"), None, "protobuf's form already");
        assert_eq!(super::go_duration("soon"), None);
        let desc = super::message("envoy.config.cluster.v3.Cluster").unwrap();
        let c = super::from_json(desc, &json!({"connect_timeout": "250ms",
            "typed_extension_protocol_options": {"envoy.extensions.upstreams.http.v3.HttpProtocolOptions": {
                "@type": "type.googleapis.com/envoy.extensions.upstreams.http.v3.HttpProtocolOptions",
                "common_http_protocol_options": {"idle_timeout": "5m"}, "explicit_http_config": {"http2_protocol_options": {}}}}}))
        .unwrap();
        let got = serde_json::to_value(&c).unwrap();
        assert_eq!(got["connectTimeout"], "0.250s");
        let options = &got["typedExtensionProtocolOptions"]["envoy.extensions.upstreams.http.v3.HttpProtocolOptions"];
        assert_eq!(options["commonHttpProtocolOptions"]["idleTimeout"], "300s", "{got}");
    }
}
