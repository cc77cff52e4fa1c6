//! Helpers the unit tests of several modules (and crates) share.

use std::sync::Arc;

use crate::node::{NodeType, ProxyClass};
use bytes::Bytes;
use istiod_xds_api::snapshot::{Generator, Kind, SimpleModel, Snapshot};

use crate::generator::{MeshGenerator, MeshInput};
use crate::model::Model;

/// A sidecar's class: namespace and labels, no locality.
pub fn class(ns: &str, labels: &[(&str, &str)]) -> ProxyClass {
    ProxyClass {
        node_type: NodeType::Sidecar,
        namespace: ns.into(),
        generator: "".into(),
        labels: labels.iter().map(|(k, v)| (Arc::from(*k), Arc::from(*v))).collect(),
        locality: "".into(),
        verified: false,
        service_account: "".into(),
        ips: Vec::new(),
        mesh_id: "".into(),
        cluster_id: "".into(),
        version: "".into(),
        metadata: Vec::new(),
    }
}

/// The model of manifests `yaml` under mesh config `mesh`.
pub fn model_in(mesh: &str, yaml: &str) -> Model {
    let dir = tempfile::tempdir().unwrap();
    std::fs::write(dir.path().join("t.yaml"), yaml).unwrap();
    let loaded = istiod_kubewatch::config_dir::load(dir.path()).unwrap();
    assert!(loaded.errors.is_empty(), "{:?}", loaded.errors);
    let settings = crate::meshconfig::MeshSettings::parse(mesh).unwrap();
    Model::build_in(&loaded.objects, "cluster.local", Arc::new(settings))
}

/// The Istio objects of a YAML text.
pub fn istio_objects(yaml: &str) -> Vec<istiod_config::istio::IstioObject> {
    istiod_config::manifest::parse_file(yaml)
        .docs
        .into_iter()
        .map(|doc| match doc {
            Ok(Some(istiod_config::manifest::Object::Istio(o))) => o,
            other => panic!("{other:?}"),
        })
        .collect()
}

/// The objects of a YAML stream (every document must read).
pub fn objects(yaml: &str) -> istiod_config::objects::Objects {
    let mut o = istiod_config::objects::Objects::default();
    for obj in istiod_config::manifest::parse_file(yaml).docs.into_iter().filter_map(Result::unwrap) {
        o.push(obj);
    }
    o
}

/// Adds the objects of manifests `yaml` to `o` (every document must read
/// as a kind the objects keep); returns their references, as a source
/// names a change.
pub fn add(o: &mut istiod_config::objects::Objects, yaml: &str) -> Vec<istiod_config::manifest::ObjectRef> {
    let mut refs = Vec::new();
    for doc in istiod_config::manifest::parse_file(yaml).docs {
        let obj = doc.unwrap_or_else(|e| panic!("{e:?}")).expect("an object");
        refs.push(istiod_config::manifest::ObjectRef::of(&obj));
        assert!(o.push(obj), "a kind the objects do not keep: {refs:?}");
    }
    refs
}

/// A snapshot serving `model`, as the control thread publishes it: the
/// translation's resources in the engine's model, and the mesh input.
pub fn snapshot(model: &Arc<Model>) -> Snapshot<MeshInput> {
    let mesh = MeshInput::new(model.clone());
    let changes = crate::translate::diff(&SimpleModel::default(), &mesh.translation.resources);
    let mut snap = Snapshot::new(1, std::time::Instant::now(), Arc::new(SimpleModel::default().apply(1, changes).0));
    snap.mesh = Some(Arc::new(mesh));
    snap
}

/// What a proxy of `class` is served for `(kind, name)` from `model`.
pub fn served(model: &Arc<Model>, class: &ProxyClass, kind: Kind, name: &str) -> Option<Bytes> {
    MeshGenerator.generate(&snapshot(model), class, kind, name)
}
