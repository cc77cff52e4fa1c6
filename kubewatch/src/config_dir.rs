//! `--configDir`: every `*.yaml`, `*.yml` and `*.json` below a directory,
//! multi-document, read into typed objects. A document that does not parse
//! is reported with its file, document index and the parser's location,
//! and skipped; the rest of the directory still loads.

use std::path::{Path, PathBuf};

use serde::Deserialize;

use crate::objects::{EndpointSlice, Namespace, Node, Objects, Pod, Service};

/// A document that could not be used.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("{}: document {index}: {message}", file.display())]
pub struct DocError {
    /// The file.
    pub file: PathBuf,
    /// 0-based document index in the file.
    pub index: usize,
    /// What was wrong, with the parser's line and column.
    pub message: String,
}

/// Why the directory could not be read at all.
#[derive(Debug, thiserror::Error)]
pub enum LoadError {
    /// Not a readable directory.
    #[error("cannot read --configDir {}: {source}", dir.display())]
    Dir {
        /// The directory.
        dir: PathBuf,
        /// The OS error.
        source: std::io::Error,
    },
}

/// The result of reading a directory.
#[derive(Debug, Default)]
pub struct Loaded {
    /// Objects of the kinds read.
    pub objects: Objects,
    /// Documents rejected (the others still count).
    pub errors: Vec<DocError>,
    /// Documents of kinds not read yet (counted, not errors).
    pub skipped: usize,
}

#[derive(Deserialize)]
struct Head {
    kind: Option<String>,
}

fn files(dir: &Path, out: &mut Vec<PathBuf>) -> std::io::Result<()> {
    for entry in std::fs::read_dir(dir)? {
        let path = entry?.path();
        if path.is_dir() {
            files(&path, out)?;
        } else if path.extension().is_some_and(|e| e == "yaml" || e == "yml" || e == "json") {
            out.push(path);
        }
    }
    Ok(())
}

/// Reads every manifest below `dir`.
pub fn load(dir: &Path) -> Result<Loaded, LoadError> {
    let mut paths = Vec::new();
    files(dir, &mut paths).map_err(|source| LoadError::Dir { dir: dir.to_owned(), source })?;
    paths.sort();
    let mut loaded = Loaded::default();
    for file in paths {
        let text = match std::fs::read_to_string(&file) {
            Ok(t) => t,
            Err(e) => {
                loaded.errors.push(DocError { file, index: 0, message: e.to_string() });
                continue;
            }
        };
        for (index, doc) in serde_yaml_ng::Deserializer::from_str(&text).enumerate() {
            let value = match serde_yaml_ng::Value::deserialize(doc) {
                Ok(v) => v,
                Err(e) => {
                    // A syntax error ends the stream of documents of this file.
                    loaded.errors.push(DocError { file: file.clone(), index, message: e.to_string() });
                    break;
                }
            };
            if value.is_null() {
                continue; // empty document
            }
            let err = |e: serde_yaml_ng::Error| DocError { file: file.clone(), index, message: e.to_string() };
            let kind = match Head::deserialize(&value) {
                Ok(h) => h.kind,
                Err(e) => {
                    loaded.errors.push(err(e));
                    continue;
                }
            };
            match kind.as_deref() {
                Some("Service") => match Service::deserialize(value) {
                    Ok(s) => loaded.objects.services.push(s),
                    Err(e) => loaded.errors.push(err(e)),
                },
                Some("EndpointSlice") => match EndpointSlice::deserialize(value) {
                    Ok(s) => loaded.objects.endpoint_slices.push(s),
                    Err(e) => loaded.errors.push(err(e)),
                },
                Some("Pod") => match Pod::deserialize(value) {
                    Ok(p) => loaded.objects.pods.push(p),
                    Err(e) => loaded.errors.push(err(e)),
                },
                Some("Node") => match Node::deserialize(value) {
                    Ok(n) => loaded.objects.nodes.push(n),
                    Err(e) => loaded.errors.push(err(e)),
                },
                Some("Namespace") => match Namespace::deserialize(value) {
                    Ok(n) => loaded.objects.namespaces.push(n),
                    Err(e) => loaded.errors.push(err(e)),
                },
                Some(_) => loaded.skipped += 1,
                None => loaded.errors.push(DocError { file: file.clone(), index, message: "no kind".into() }),
            }
        }
    }
    Ok(loaded)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn bundled_example_loads() {
        let dir = Path::new(env!("CARGO_MANIFEST_DIR")).join("../examples/bookinfo");
        let l = load(&dir).unwrap();
        assert!(l.errors.is_empty(), "{:?}", l.errors);
        assert!(l.objects.services.len() >= 5);
        assert_eq!(l.objects.services.len(), l.objects.endpoint_slices.len());
        let reviews = l.objects.endpoint_slices.iter().find(|s| s.service_name() == Some("reviews")).unwrap();
        assert!(reviews.endpoints.iter().any(|e| e.conditions.terminating == Some(true)));
    }

    #[test]
    fn bad_documents_are_located_and_skipped() {
        let dir = tempfile::tempdir().unwrap();
        std::fs::write(
            dir.path().join("a.yaml"),
            "kind: Service\nmetadata: {name: ok}\n---\nkind: Service\nspec: {ports: [{port: notanumber}]}\n---\n# empty\n",
        )
        .unwrap();
        std::fs::write(dir.path().join("b.yml"), "kind: [unclosed\n").unwrap();
        std::fs::write(dir.path().join("ignored.txt"), "kind: Service").unwrap();
        let l = load(dir.path()).unwrap();
        assert_eq!(l.objects.services.len(), 1);
        assert_eq!(l.errors.len(), 2, "{:?}", l.errors);
        let e = l.errors[0].to_string();
        assert!(e.contains("a.yaml: document 1:") && e.contains("expected u16"), "{e}");
        assert!(l.errors[1].to_string().contains("b.yml: document 0:"));
        assert!(load(&dir.path().join("missing")).is_err());
    }
}
