//! Our `.proto` schemas against upstream's descriptors (`xds-protos` for
//! Envoy and google.rpc, transcribed facts for Istio): every message, field,
//! enum value, service method and type URL must agree.

#[path = "support/python.rs"]
mod python;

use std::ffi::OsStr;
use std::path::Path;

use istiod_proto::prost::Message;
use istiod_proto::prost_types::field_descriptor_proto::{Label, Type};
use istiod_proto::prost_types::{DescriptorProto, FileDescriptorSet};
use istiod_proto::{FILE_DESCRIPTOR_SET, type_url};

fn check(fds: &[u8], urls: &[&str]) -> std::process::Output {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("fds.bin");
    std::fs::write(&path, fds).unwrap();
    let mut args: Vec<&OsStr> = vec![path.as_os_str()];
    for u in urls {
        args.push(OsStr::new("--type-url"));
        args.push(OsStr::new(u));
    }
    python::run("conformance.py", &args)
}

#[test]
fn every_schema_matches_upstream() {
    let out = check(FILE_DESCRIPTOR_SET, type_url::ALL);
    let text = python::text(&out);
    assert!(out.status.success(), "schemas differ from upstream:\n{text}");
    // The checker must have seen the whole tree, not an empty set.
    let fds = FileDescriptorSet::decode(FILE_DESCRIPTOR_SET).unwrap();
    let ours = fds.file.iter().filter(|f| !f.name().starts_with("google/protobuf/")).count();
    assert!(ours >= 60, "only {ours} schema files compiled");
    assert!(text.contains(&format!("checked {ours} files")), "{text}");
    assert!(text.contains(": 0 mismatches"), "{text}");
}

fn message<'a>(fds: &'a mut FileDescriptorSet, file: &str, name: &str) -> &'a mut DescriptorProto {
    let f = fds.file.iter_mut().find(|f| f.name() == file).unwrap_or_else(|| panic!("{file}"));
    f.message_type.iter_mut().find(|m| m.name() == name).unwrap_or_else(|| panic!("{name}"))
}

/// Break our schema in each way the checker guards against, at once, and
/// require one reported mismatch per break.
#[test]
fn checker_reports_each_kind_of_mismatch() {
    let mut fds = FileDescriptorSet::decode(FILE_DESCRIPTOR_SET).unwrap();
    let cluster = message(&mut fds, "envoy/config/cluster/v3/cluster.proto", "Cluster");
    let f = cluster.field.iter_mut().find(|f| f.name() == "connect_timeout").unwrap();
    f.number = Some(f.number() + 100);
    let locality = message(&mut fds, "envoy/config/core/v3/base.proto", "Locality");
    let f = locality.field.iter_mut().find(|f| f.name() == "zone").unwrap();
    f.set_type(Type::Bytes);
    let node = message(&mut fds, "envoy/config/core/v3/base.proto", "Node");
    let f = node.field.iter_mut().find(|f| f.name() == "client_features").unwrap();
    f.set_label(Label::Optional);
    let req = message(&mut fds, "istio/security/v1alpha1/ca.proto", "IstioCertificateRequest");
    let f = req.field.iter_mut().find(|f| f.name() == "validity_duration").unwrap();
    f.number = Some(2);

    let bad_url = "type.googleapis.com/envoy.config.cluster.v3.Clusters";
    let out = check(&fds.encode_to_vec(), &[type_url::CLUSTER, bad_url]);
    let text = python::text(&out);
    assert!(!out.status.success(), "checker accepted broken schemas:\n{text}");
    for needle in [
        "envoy.config.cluster.v3.Cluster.connect_timeout: number 104, upstream 4",
        "envoy.config.core.v3.Locality.zone: type TYPE_BYTES, upstream TYPE_STRING",
        "envoy.config.core.v3.Node.client_features: label LABEL_OPTIONAL",
        "istio.v1.auth.IstioCertificateRequest.validity_duration",
        bad_url,
    ] {
        assert!(text.contains(needle), "expected a mismatch on {needle:?}:\n{text}");
    }
    // The bad URL is reported twice: absent from our schema and from upstream.
    assert!(text.contains(": 6 mismatches"), "{text}");
}

/// The generated method paths are what the server will route on.
#[test]
fn grpc_method_paths() {
    use istiod_proto::envoy::service::discovery::v3::aggregated_discovery_service as ads;
    use istiod_proto::istio::v1::auth::istio_certificate_service as ca;
    assert_eq!(
        ads::STREAM_AGGREGATED_RESOURCES,
        "/envoy.service.discovery.v3.AggregatedDiscoveryService/StreamAggregatedResources"
    );
    assert_eq!(
        ads::DELTA_AGGREGATED_RESOURCES,
        "/envoy.service.discovery.v3.AggregatedDiscoveryService/DeltaAggregatedResources"
    );
    assert_eq!(ca::CREATE_CERTIFICATE, "/istio.v1.auth.IstioCertificateService/CreateCertificate");
    assert!(Path::new(env!("CARGO_MANIFEST_DIR")).join("protos").is_dir());
}
