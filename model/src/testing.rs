//! Helpers of the model's unit tests (the mesh crate's `testing` has more).

use std::sync::Arc;

use crate::Model;

/// The model of manifests `yaml` under mesh config `mesh`.
pub(crate) fn model_in(mesh: &str, yaml: &str) -> Model {
    let dir = tempfile::tempdir().unwrap();
    std::fs::write(dir.path().join("t.yaml"), yaml).unwrap();
    let loaded = istiod_kubewatch::config_dir::load(dir.path()).unwrap();
    assert!(loaded.errors.is_empty(), "{:?}", loaded.errors);
    let settings = istiod_config::meshconfig::MeshSettings::parse(mesh).unwrap();
    Model::build_in(&loaded.objects, "cluster.local", Arc::new(settings))
}

/// The Istio objects of a YAML text.
pub(crate) fn istio_objects(yaml: &str) -> Vec<istiod_config::istio::IstioObject> {
    istiod_config::manifest::parse_file(yaml)
        .docs
        .into_iter()
        .map(|doc| match doc {
            Ok(Some(istiod_config::manifest::Object::Istio(o))) => o,
            other => panic!("{other:?}"),
        })
        .collect()
}
