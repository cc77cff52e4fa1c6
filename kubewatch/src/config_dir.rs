//! `--configDir`: every `*.yaml`, `*.yml` and `*.json` below a directory,
//! multi-document, read into typed objects and watched for changes.
//!
//! A document that does not parse is reported with its file, document index
//! and the parser's message, and the last good version of that document
//! stays in force; the rest of the directory loads. A YAML syntax error
//! ends the readable part of a file, so every document from there on keeps
//! its last good version: a half-written file never deletes what it held.

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};
use std::sync::mpsc;

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
    /// What was wrong, with the parser's location or the field path.
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
    /// The directory cannot be watched.
    #[error("cannot watch --configDir {}: {message}", dir.display())]
    Watch {
        /// The directory.
        dir: PathBuf,
        /// What the watcher said.
        message: String,
    },
}

/// One object read from a document.
#[derive(Debug, Clone, PartialEq)]
#[allow(clippy::large_enum_variant, reason = "one per document, kept in a map; boxing buys nothing")]
pub enum Object {
    /// A Service.
    Service(Service),
    /// An EndpointSlice.
    EndpointSlice(EndpointSlice),
    /// A Pod.
    Pod(Pod),
    /// A Node.
    Node(Node),
    /// A Namespace.
    Namespace(Namespace),
    /// A Secret.
    Secret(crate::objects::Secret),
    /// A Kubernetes Gateway API object.
    GatewayApi(crate::gateway_api::GatewayApiObject),
    /// An Istio object, validated.
    Istio(crate::istio::IstioObject),
    /// A kind this source does not read yet (counted, not an error).
    Skipped(String),
}

/// The result of reading a directory.
#[derive(Debug, Default)]
pub struct Loaded {
    /// Objects in force (the last good version of each document).
    pub objects: Objects,
    /// The objects that differ from the previous read (added, changed or
    /// removed), found by comparing only the documents of files read anew.
    pub changed: Vec<ObjectRef>,
    /// Documents rejected in this read.
    pub errors: Vec<DocError>,
    /// Documents of kinds not read yet.
    pub skipped: usize,
}

/// Names one object: its kind, namespace and name, and for an
/// EndpointSlice the Service it belongs to.
#[derive(Debug, Clone, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub struct ObjectRef {
    /// `Service`, `EndpointSlice`, `Pod`, `Node`, `Namespace`, or the Istio
    /// kind, or the kind not read for a skipped document.
    pub kind: String,
    /// Namespace (empty for cluster-scoped objects).
    pub namespace: String,
    /// Name.
    pub name: String,
    /// For an EndpointSlice: its `kubernetes.io/service-name` label.
    pub service: Option<String>,
}

impl ObjectRef {
    /// The reference of `obj`.
    pub fn of(obj: &Object) -> ObjectRef {
        let (kind, meta, service) = match obj {
            Object::Service(s) => ("Service".to_owned(), Some(&s.metadata), None),
            Object::EndpointSlice(s) => {
                ("EndpointSlice".to_owned(), Some(&s.metadata), s.service_name().map(str::to_owned))
            }
            Object::Pod(p) => ("Pod".to_owned(), Some(&p.metadata), None),
            Object::Node(n) => ("Node".to_owned(), Some(&n.metadata), None),
            Object::Namespace(n) => ("Namespace".to_owned(), Some(&n.metadata), None),
            Object::Secret(n) => ("Secret".to_owned(), Some(&n.metadata), None),
            Object::GatewayApi(o) => (format!("{}.{}", o.kind(), crate::gateway_api::GROUP), Some(&o.meta), None),
            Object::Istio(o) => (o.kind().name().to_owned(), Some(&o.meta), None),
            Object::Skipped(k) => (k.clone(), None, None),
        };
        ObjectRef {
            kind,
            namespace: meta.map(|m| m.ns().to_owned()).unwrap_or_default(),
            name: meta.map(|m| m.name.clone()).unwrap_or_default(),
            service,
        }
    }
}

#[derive(Deserialize)]
#[serde(rename_all = "camelCase")]
struct Head {
    api_version: Option<String>,
    kind: Option<String>,
}

/// What `--configDir` reads at most, so that a careless or hostile file
/// costs memory in proportion to what it may legitimately hold.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Limits {
    /// Largest file read (`ISTIOD_RS_CONFIG_MAX_FILE_BYTES`, 32 MiB; the
    /// API server's objects are at most 1.5 MiB each).
    pub max_file_bytes: u64,
    /// Most documents read from one file (`ISTIOD_RS_CONFIG_MAX_DOCUMENTS`,
    /// 10,000); the documents after the limit keep their last good
    /// version, as after a syntax error.
    pub max_documents: usize,
}

impl Default for Limits {
    fn default() -> Self {
        Self { max_file_bytes: 32 << 20, max_documents: 10_000 }
    }
}

fn is_manifest(path: &Path) -> bool {
    path.extension().is_some_and(|e| e == "yaml" || e == "yml" || e == "json")
}

/// The manifests below `dir`. Symbolic links are followed (a Kubernetes
/// ConfigMap mount links each key through `..data`), but every directory is
/// read once, by device and inode, so a link loop (`a -> .`) ends the walk
/// instead of multiplying it. Hidden entries are skipped: editors' swap
/// files, and the `..data` / `..<timestamp>` directories of a ConfigMap
/// mount, whose files the top-level links already reach. A manifest name
/// that is not a regular file (a FIFO, a device, a socket) is reported and
/// never opened.
fn files(
    dir: &Path,
    out: &mut Vec<PathBuf>,
    skipped: &mut Vec<DocError>,
    seen: &mut std::collections::HashSet<(u64, u64)>,
) -> std::io::Result<()> {
    use std::os::unix::fs::MetadataExt as _;
    let m = std::fs::metadata(dir)?;
    if !seen.insert((m.dev(), m.ino())) {
        return Ok(());
    }
    for entry in std::fs::read_dir(dir)? {
        let entry = entry?;
        if entry.file_name().as_encoded_bytes().starts_with(b".") {
            continue;
        }
        let path = entry.path();
        // Follows links; a dangling link is skipped like a missing file.
        let Ok(m) = std::fs::metadata(&path) else { continue };
        if m.is_dir() {
            // A subdirectory that vanished or cannot be read is skipped;
            // only the top directory must be readable.
            if let Err(e) = files(&path, out, skipped, seen) {
                skipped.push(DocError { file: path, index: 0, message: format!("cannot read directory: {e}") });
            }
        } else if is_manifest(&path) {
            if m.is_file() {
                out.push(path);
            } else {
                skipped.push(DocError {
                    file: path,
                    index: 0,
                    message: "not a regular file (a FIFO, device or socket): skipped".into(),
                });
            }
        }
    }
    Ok(())
}

/// Reads a manifest: opened without blocking (a FIFO swapped in after the
/// walk does not hang the reader), checked to be a regular file within the
/// size limit, and read no further than the limit.
fn read_manifest(path: &Path, limits: &Limits) -> std::io::Result<String> {
    use std::io::Read as _;
    use std::os::unix::fs::OpenOptionsExt as _;
    let f = std::fs::OpenOptions::new().read(true).custom_flags(libc::O_NONBLOCK).open(path)?;
    let m = f.metadata()?;
    if !m.is_file() {
        return Err(std::io::Error::other("not a regular file (a FIFO, device or socket): skipped"));
    }
    let too_big = |n: u64| {
        std::io::Error::other(format!(
            "file is {n} bytes, over the limit of {} (ISTIOD_RS_CONFIG_MAX_FILE_BYTES): not read",
            limits.max_file_bytes
        ))
    };
    if m.len() > limits.max_file_bytes {
        return Err(too_big(m.len()));
    }
    let mut buf = Vec::with_capacity(m.len() as usize);
    f.take(limits.max_file_bytes + 1).read_to_end(&mut buf)?;
    if buf.len() as u64 > limits.max_file_bytes {
        return Err(too_big(buf.len() as u64));
    }
    String::from_utf8(buf).map_err(|e| std::io::Error::new(std::io::ErrorKind::InvalidData, e))
}

/// Checks names as the API server does (apimachinery's validation): a
/// namespace, a Service's and a Namespace's name are DNS-1123 labels (63
/// characters), other names DNS-1123 subdomains (253). Names become parts
/// of cluster and route names; an unbounded one makes unbounded responses.
fn check_names(obj: &Object) -> Result<(), String> {
    fn label(what: &str, s: &str) -> Result<(), String> {
        let ok = s.len() <= 63
            && s.bytes().all(|b| b.is_ascii_lowercase() || b.is_ascii_digit() || b == b'-')
            && !s.starts_with('-')
            && !s.ends_with('-');
        if ok { Ok(()) } else { Err(invalid(what, s, "a DNS-1123 label (at most 63 of a-z, 0-9 and '-')")) }
    }
    fn subdomain(what: &str, s: &str) -> Result<(), String> {
        if s.len() <= 253 && s.split('.').all(|p| !p.is_empty() && label(what, p).is_ok()) {
            Ok(())
        } else {
            Err(invalid(what, s, "a DNS-1123 subdomain (at most 253 characters)"))
        }
    }
    fn invalid(what: &str, s: &str, want: &str) -> String {
        let shown: String = s.chars().take(64).collect();
        let more = if shown.len() < s.len() { format!("... ({} bytes)", s.len()) } else { String::new() };
        format!("invalid {what} {shown:?}{more}: must be {want}")
    }
    let (meta, name_is_label) = match obj {
        Object::Service(s) => (&s.metadata, true),
        Object::Namespace(n) => (&n.metadata, true),
        Object::EndpointSlice(s) => (&s.metadata, false),
        Object::Pod(p) => (&p.metadata, false),
        Object::Node(n) => (&n.metadata, false),
        Object::Secret(n) => (&n.metadata, false),
        Object::GatewayApi(o) => (&o.meta, false),
        Object::Istio(o) => (&o.meta, false),
        Object::Skipped(_) => return Ok(()),
    };
    if let Some(ns) = &meta.namespace {
        label("metadata.namespace", ns)?;
    }
    if meta.name.is_empty() {
        return Ok(()); // reported by the kinds that need a name
    }
    if name_is_label { label("metadata.name", &meta.name) } else { subdomain("metadata.name", &meta.name) }
}

/// Parses one document's value into an object.
pub fn parse_value(value: serde_yaml_ng::Value) -> Result<Object, String> {
    let obj = parse_kind(value)?;
    check_names(&obj)?;
    Ok(obj)
}

fn parse_kind(value: serde_yaml_ng::Value) -> Result<Object, String> {
    let head = Head::deserialize(&value).map_err(|e| e.to_string())?;
    let kind = head.kind.clone().ok_or("no kind")?;
    if crate::istio::IstioKind::from_api(head.api_version.as_deref().unwrap_or_default(), &kind).is_some() {
        return crate::istio::parse(&value).map(Object::Istio).map_err(|e| e.to_string());
    }
    if crate::gateway_api::is_gateway_api(head.api_version.as_deref().unwrap_or_default()) {
        if !crate::gateway_api::reads(&kind) {
            return Ok(Object::Skipped(kind));
        }
        let json = serde_json::to_value(&value).map_err(|e| e.to_string())?;
        return crate::gateway_api::parse(&kind, json).map(Object::GatewayApi);
    }
    let e = |e: serde_yaml_ng::Error| e.to_string();
    Ok(match kind.as_str() {
        "Service" => Object::Service(Service::deserialize(value).map_err(e)?),
        "EndpointSlice" => Object::EndpointSlice(EndpointSlice::deserialize(value).map_err(e)?),
        "Pod" => Object::Pod(Pod::deserialize(value).map_err(e)?),
        "Node" => Object::Node(Node::deserialize(value).map_err(e)?),
        "Namespace" => Object::Namespace(Namespace::deserialize(value).map_err(e)?),
        "Secret" => match crate::objects::Secret::deserialize(value).map_err(e)? {
            s if s.is_read() => Object::Secret(s),
            _ => Object::Skipped(kind),
        },
        other if KNOWN_UNREAD.contains(&other) => Object::Skipped(other.to_owned()),
        other => {
            let api = head.api_version.unwrap_or_default();
            return Err(format!("unknown kind {other:?} (apiVersion {api:?})"));
        }
    })
}

/// Kinds that belong in a cluster's manifests but that the model does not
/// read (yet): skipped without complaint. Anything else is a typo or a
/// stray file, and is reported.
const KNOWN_UNREAD: [&str; 25] = [
    "ServiceAccount",
    "Deployment",
    "ReplicaSet",
    "StatefulSet",
    "DaemonSet",
    "Job",
    "CronJob",
    "ConfigMap",
    "Endpoints",
    "Ingress",
    "IngressClass",
    "Role",
    "RoleBinding",
    "ClusterRole",
    "ClusterRoleBinding",
    "NetworkPolicy",
    "PersistentVolumeClaim",
    "PersistentVolume",
    "HorizontalPodAutoscaler",
    "PodDisruptionBudget",
    "LimitRange",
    "ResourceQuota",
    "CustomResourceDefinition",
    "MutatingWebhookConfiguration",
    "ValidatingWebhookConfiguration",
];

/// What one file holds: each document's result, and where a syntax error
/// cut the file short.
#[derive(Debug, Clone)]
pub struct FileDocs {
    /// Results in document order (up to a syntax error).
    pub docs: Vec<Result<Option<Object>, String>>,
    /// Index of the document where a YAML syntax error ended the file.
    pub syntax_error: Option<(usize, String)>,
}

/// Parses a file's text (multi-document YAML or JSON). Empty documents are
/// `Ok(None)`.
pub fn parse_file(text: &str) -> FileDocs {
    parse_file_limited(text, Limits::default().max_documents)
}

/// [`parse_file`], reading at most `max_documents` documents (one at a
/// time); the document after the last one read is reported as where the
/// file was cut.
pub fn parse_file_limited(text: &str, max_documents: usize) -> FileDocs {
    // Nesting too deep to scan in linear time: the documents before the
    // one that holds it are read, and it ends the file as a syntax error.
    if let Err(e) = crate::yaml::check_depth(text) {
        let cut = document_start(text, e.line);
        let mut read = parse_file_limited(&text[..cut], max_documents);
        if read.syntax_error.is_none() {
            read.syntax_error = Some((read.docs.len(), e.to_string()));
        }
        return read;
    }
    let mut docs = Vec::new();
    let mut syntax_error = None;
    for (index, doc) in serde_yaml_ng::Deserializer::from_str(text).enumerate() {
        if index >= max_documents {
            syntax_error = Some((
                index,
                format!(
                    "more than {max_documents} documents (ISTIOD_RS_CONFIG_MAX_DOCUMENTS): this one and the rest are not read"
                ),
            ));
            break;
        }
        match serde_yaml_ng::Value::deserialize(doc) {
            Ok(v) if v.is_null() => docs.push(Ok(None)),
            Ok(v) => docs.push(parse_value(v).map(Some)),
            Err(e) => {
                syntax_error = Some((index, e.to_string()));
                break;
            }
        }
    }
    FileDocs { docs, syntax_error }
}

/// The byte offset of the last `---` marker line up to `line` (from 1,
/// that line included: `--- [[[…`): where the document holding it starts,
/// or 0.
fn document_start(text: &str, line: usize) -> usize {
    let mut start = 0;
    let mut offset = 0;
    for (n, l) in text.split_inclusive('\n').enumerate() {
        if n + 1 > line {
            break;
        }
        if (l.starts_with("---") && l[3..].starts_with([' ', '\t', '\r', '\n'])) || l == "---" {
            start = offset;
        }
        offset += l.len();
    }
    start
}

/// What identifies a file's content without reading it: size, change
/// time, modification time and inode (a rename-into-place changes it).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
struct Stamp {
    len: u64,
    mtime: Option<std::time::SystemTime>,
    ctime: (i64, i64),
    ino: u64,
}

fn stamp(path: &Path) -> Option<Stamp> {
    use std::os::unix::fs::MetadataExt as _;
    let m = std::fs::metadata(path).ok()?;
    Some(Stamp { len: m.len(), mtime: m.modified().ok(), ctime: (m.ctime(), m.ctime_nsec()), ino: m.ino() })
}

/// How long before a parse a file must have been last written for its
/// stamp to be trusted: file times are coarse (a kernel tick), so a write
/// within the same tick as an earlier one may leave the stamp unchanged.
const RACY: std::time::Duration = std::time::Duration::from_millis(50);

/// A config directory and the last good version of each of its documents.
#[derive(Debug)]
pub struct ConfigDir {
    dir: PathBuf,
    limits: Limits,
    last_good: BTreeMap<(PathBuf, usize), Object>,
    /// Each file's parse, with its stamp, when the stamp can be trusted
    /// (written well before it was parsed): a reload re-reads only the
    /// files that changed.
    parsed: std::collections::HashMap<PathBuf, (Stamp, FileDocs)>,
}

impl ConfigDir {
    /// A source for `dir` (nothing read yet).
    pub fn new(dir: impl Into<PathBuf>) -> Self {
        Self {
            dir: dir.into(),
            limits: Limits::default(),
            last_good: BTreeMap::new(),
            parsed: std::collections::HashMap::new(),
        }
    }

    /// Reads within `limits` instead of the defaults.
    pub fn with_limits(mut self, limits: Limits) -> Self {
        self.limits = limits;
        self
    }

    /// A file's documents: from the last parse if its stamp is unchanged,
    /// else read and parsed now.
    /// The documents of `file`, and whether they were read anew (not
    /// the cached parse of an unchanged file).
    fn parse(&mut self, file: &Path) -> std::io::Result<(FileDocs, bool)> {
        let before = stamp(file);
        if let (Some(st), Some((cached, docs))) = (before, self.parsed.get(file))
            && st == *cached
        {
            return Ok((docs.clone(), false));
        }
        let started = std::time::SystemTime::now();
        let text = read_manifest(file, &self.limits)?;
        let docs = parse_file_limited(&text, self.limits.max_documents);
        // Trust the stamp only if the file did not change while it was
        // read and was last written well before.
        match (before, stamp(file)) {
            (Some(a), Some(b))
                if a == b && a.mtime.is_some_and(|m| started.duration_since(m).is_ok_and(|d| d > RACY)) =>
            {
                self.parsed.insert(file.to_owned(), (a, docs.clone()));
            }
            _ => {
                self.parsed.remove(file);
            }
        }
        Ok((docs, true))
    }

    /// Reads the directory again and returns what is in force.
    pub fn reload(&mut self) -> Result<Loaded, LoadError> {
        let mut paths = Vec::new();
        let mut errors = Vec::new();
        files(&self.dir, &mut paths, &mut errors, &mut Default::default())
            .map_err(|source| LoadError::Dir { dir: self.dir.clone(), source })?;
        paths.sort();
        let mut next: BTreeMap<(PathBuf, usize), Object> = BTreeMap::new();
        // A manifest that became something else than a regular file keeps
        // what it held.
        for e in &errors {
            self.keep_from(&e.file, 0, &mut next);
        }
        self.parsed.retain(|f, _| paths.binary_search(f).is_ok());
        // Files whose documents may differ from the last read: read anew,
        // or gone.
        let mut dirty: std::collections::BTreeSet<PathBuf> =
            self.last_good.keys().map(|(f, _)| f.clone()).filter(|f| paths.binary_search(f).is_err()).collect();
        for file in paths {
            let parsed = match self.parse(&file) {
                Ok((p, fresh)) => {
                    if fresh {
                        dirty.insert(file.clone());
                    }
                    p
                }
                Err(e) => {
                    // Unreadable now (e.g. replaced mid-read): keep it as it was.
                    errors.push(DocError { file: file.clone(), index: 0, message: e.to_string() });
                    self.keep_from(&file, 0, &mut next);
                    continue;
                }
            };
            for (index, doc) in parsed.docs.into_iter().enumerate() {
                match doc {
                    Ok(Some(obj)) => {
                        next.insert((file.clone(), index), obj);
                    }
                    Ok(None) => {}
                    Err(message) => {
                        errors.push(DocError { file: file.clone(), index, message });
                        if let Some(old) = self.last_good.get(&(file.clone(), index)) {
                            next.insert((file.clone(), index), old.clone());
                        }
                    }
                }
            }
            if let Some((index, message)) = parsed.syntax_error {
                errors.push(DocError { file: file.clone(), index, message });
                self.keep_from(&file, index, &mut next);
            }
        }
        let mut changed = std::collections::BTreeSet::new();
        for file in &dirty {
            // A document whose object differs (or is gone, or new) names
            // that object; kinds not read change nothing served, so a
            // ConfigMap edit does not cost a rebuild.
            for (m, other) in [(&self.last_good, &next), (&next, &self.last_good)] {
                for ((_, i), o) in m.range((file.clone(), 0)..=(file.clone(), usize::MAX)) {
                    if !matches!(o, Object::Skipped(_)) && other.get(&(file.clone(), *i)) != Some(o) {
                        changed.insert(ObjectRef::of(o));
                    }
                }
            }
        }
        self.last_good = next;
        let mut loaded = Loaded { errors, changed: changed.into_iter().collect(), ..Loaded::default() };
        for obj in self.last_good.values() {
            match obj.clone() {
                Object::Service(s) => loaded.objects.services.push(s),
                Object::EndpointSlice(s) => loaded.objects.endpoint_slices.push(s),
                Object::Pod(p) => loaded.objects.pods.push(p),
                Object::Node(n) => loaded.objects.nodes.push(n),
                Object::Namespace(n) => loaded.objects.namespaces.push(n),
                Object::Secret(n) => loaded.objects.secrets.push(n),
                Object::GatewayApi(o) => loaded.objects.gateway_api.push(o),
                Object::Istio(o) => loaded.objects.istio.push(o),
                Object::Skipped(_) => loaded.skipped += 1,
            }
        }
        Ok(loaded)
    }

    /// Keeps the last good documents of `file` from `index` on.
    fn keep_from(&self, file: &Path, index: usize, next: &mut BTreeMap<(PathBuf, usize), Object>) {
        for ((f, i), obj) in self.last_good.range((file.to_owned(), index)..) {
            if f != file {
                break;
            }
            next.insert((f.clone(), *i), obj.clone());
        }
    }

    /// Watches the directory (inotify); every change sends `()` on the
    /// returned channel. Keep the watcher alive as long as events matter.
    pub fn watch(&self) -> Result<(notify::RecommendedWatcher, mpsc::Receiver<()>), LoadError> {
        use notify::Watcher;
        let (tx, rx) = mpsc::channel();
        let err = |e: notify::Error| LoadError::Watch { dir: self.dir.clone(), message: e.to_string() };
        let mut w = notify::recommended_watcher(move |ev: notify::Result<notify::Event>| {
            if ev.is_ok_and(|e| !e.kind.is_access()) {
                let _ = tx.send(());
            }
        })
        .map_err(err)?;
        w.watch(&self.dir, notify::RecursiveMode::Recursive).map_err(err)?;
        Ok((w, rx))
    }
}

/// Reads every manifest below `dir` once.
pub fn load(dir: &Path) -> Result<Loaded, LoadError> {
    ConfigDir::new(dir).reload()
}

#[cfg(test)]
mod tests;
