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
    DynamicMessage::deserialize_with_options(desc, value.clone(), &options).map_err(|e| e.to_string())
}

/// `bytes` as a message of type `desc`.
pub fn decode(desc: MessageDescriptor, bytes: &[u8]) -> Result<DynamicMessage, String> {
    DynamicMessage::decode(desc, bytes).map_err(|e| e.to_string())
}
