//! Golden files: everything generated for the bundled mesh, decoded with
//! the upstream `xds-protos` types and compared as canonical JSON with
//! `tests/golden/bookinfo/*.json`. After a deliberate change, regenerate
//! with `UPDATE_GOLDEN=1 scripts/test -E 'test(golden)'` and review the diff.

#[path = "../proto/tests/support/python.rs"]
mod python;

use std::path::Path;

use istiod::model::Model;
use istiod::simple;
use istiod_xds::ads::Kind;

#[test]
fn bundled_mesh_matches_the_golden_files() {
    check("examples/bookinfo", "tests/golden/bookinfo");
}

/// One of each translation feature: redirect, direct response, regex and
/// query matches, rewrite, header operations, mirror, CORS, retries and
/// timeouts, consistent hash, port-level and subset policies, SIMPLE TLS,
/// headless and DNS services, TCP listeners.
#[test]
fn each_feature_matches_the_golden_files() {
    check("tests/golden/features/input", "tests/golden/features");
}

fn check(input: &str, golden: &str) {
    let root = Path::new(env!("CARGO_MANIFEST_DIR"));
    let loaded = istiod_kubewatch::config_dir::load(&root.join(input)).unwrap();
    assert!(loaded.errors.is_empty(), "{:?}", loaded.errors);
    let objs = loaded.objects;
    let resources = simple::translate(&Model::build(&objs, "cluster.local"));
    let dir = tempfile::tempdir().unwrap();
    let mut manifest = Vec::new();
    for (i, ((kind, name), bytes)) in resources.iter().enumerate() {
        let file = format!("{i}.bin");
        std::fs::write(dir.path().join(&file), bytes).unwrap();
        manifest.push(serde_json::json!({"kind": kind.short().to_lowercase(), "name": &**name, "type": kind.type_url(), "file": file}));
    }
    assert!(resources.keys().any(|(k, _)| *k == Kind::Listener), "listeners are generated");
    std::fs::write(dir.path().join("manifest.json"), serde_json::to_vec(&manifest).unwrap()).unwrap();
    let golden = root.join(golden);
    let mut cmd = std::process::Command::new(python::python());
    cmd.arg(root.join("tests/py/golden.py")).arg(dir.path()).arg(&golden);
    if std::env::var_os("UPDATE_GOLDEN").is_some() {
        cmd.arg("--update");
    }
    let out = cmd.output().unwrap();
    let text = python::text(&out);
    assert!(out.status.success(), "{text}");
    assert!(text.contains("5 passed, 0 failed"), "{text}");
}
