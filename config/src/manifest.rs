//! Kubernetes manifests read into typed objects: a YAML or JSON text of one
//! or more documents, each checked as the API server and istiod's webhook
//! would (names, kinds, the Istio specs' validation), with the parser's
//! location in every error. Pure: the sources (`--configDir`, the API
//! server) hand it text.

use serde::Deserialize;

use crate::objects::{EndpointSlice, Namespace, Node, Pod, Service};

/// Most documents read from one file by default
/// (`ISTIOD_RS_CONFIG_MAX_DOCUMENTS`).
pub const DEFAULT_MAX_DOCUMENTS: usize = 10_000;

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
    /// An Ingress.
    Ingress(crate::objects::Ingress),
    /// An IngressClass.
    IngressClass(crate::objects::IngressClass),
    /// A ConfigMap, slimmed.
    ConfigMap(crate::objects::ConfigMap),
    /// An Istio object, validated.
    Istio(crate::istio::IstioObject),
    /// A kind this source does not read yet (counted, not an error).
    Skipped(String),
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
            Object::Ingress(i) => ("Ingress".to_owned(), Some(&i.metadata), None),
            Object::IngressClass(c) => ("IngressClass".to_owned(), Some(&c.metadata), None),
            Object::ConfigMap(c) => ("ConfigMap".to_owned(), Some(&c.metadata), None),
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
        Object::Ingress(i) => (&i.metadata, false),
        Object::IngressClass(c) => (&c.metadata, false),
        Object::ConfigMap(c) => (&c.metadata, false),
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

impl crate::objects::Objects {
    /// Adds `obj` to its kind's list; a skipped kind is not kept (`false`).
    pub fn push(&mut self, obj: Object) -> bool {
        match obj {
            Object::Service(s) => self.services.push(s),
            Object::EndpointSlice(s) => self.endpoint_slices.push(s),
            Object::Pod(p) => self.pods.push(p),
            Object::Node(n) => self.nodes.push(n),
            Object::Namespace(n) => self.namespaces.push(n),
            Object::Secret(n) => self.secrets.push(n),
            Object::GatewayApi(o) => self.gateway_api.push(o),
            Object::Ingress(o) => self.ingresses.push(o),
            Object::IngressClass(o) => self.ingress_classes.push(o),
            Object::ConfigMap(o) => self.config_maps.push(o),
            Object::Istio(o) => self.istio.push(o),
            Object::Skipped(_) => return false,
        }
        true
    }
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
    let group = head.api_version.as_deref().unwrap_or_default().rsplit_once('/').map_or("", |(g, _)| g);
    if !crate::objects::reads(group, &kind) {
        return Ok(Object::Skipped(kind));
    }
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
        // networking.k8s.io/v1 (extensions/v1beta1 and networking.k8s.io/
        // v1beta1 are gone since Kubernetes 1.22, as in istiod).
        "Ingress" if head.api_version.as_deref() == Some("networking.k8s.io/v1") => {
            Object::Ingress(crate::objects::Ingress::deserialize(value).map_err(e)?)
        }
        "IngressClass" if head.api_version.as_deref() == Some("networking.k8s.io/v1") => {
            Object::IngressClass(crate::objects::IngressClass::deserialize(value).map_err(e)?)
        }
        "ConfigMap" if head.api_version.as_deref() == Some("v1") => {
            Object::ConfigMap(crate::objects::ConfigMap::deserialize(value).map_err(e)?.slim())
        }
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
    parse_file_limited(text, DEFAULT_MAX_DOCUMENTS)
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

/// Whether `line` starts with `indicator` standing alone: followed by a
/// blank or nothing (YAML's `---` and `...` at the start of a line).
fn starts_with_indicator(line: &str, indicator: &str) -> bool {
    line.strip_prefix(indicator).is_some_and(|rest| rest.is_empty() || rest.starts_with([' ', '\t', '\r', '\n']))
}

/// Whether `line` is a document start marker (YAML's `c-directives-end`).
fn is_marker(line: &str) -> bool {
    starts_with_indicator(line, "---")
}

/// `text` cut at its marker lines, into texts each meant to read alone as
/// one document: a `---` at the start of a line starts a document wherever
/// it stands (YAML forbids it inside a scalar), and what comes before the
/// first one is left out when it is plain blank lines and comments (ASCII
/// spaces, printable ASCII, `\n`). Each text keeps its marker line.
/// `None` where the cut at `\n` alone could miss what the parser reads:
/// directives (`%`), document end markers (`...`), a byte order mark,
/// line breaks other than `\n` and `\r\n`, nesting too deep for the file
/// ([`crate::yaml::check_depth`] reads the file, not each document).
/// [`parse_split`] then checks that each text does read as one document.
pub fn split_documents(text: &str) -> Option<Vec<&str>> {
    let other_break = |c: char| matches!(c, '\u{85}' | '\u{2028}' | '\u{2029}' | '\u{feff}');
    if text.contains(other_break) || text.split('\r').skip(1).any(|after| !after.starts_with('\n')) {
        return None;
    }
    crate::yaml::check_depth(text).ok()?;
    let mut pieces = Vec::new();
    let (mut start, mut offset) = (0, 0);
    for line in text.split_inclusive('\n') {
        if line.starts_with('%') || starts_with_indicator(line, "...") {
            return None;
        }
        if is_marker(line) && offset > 0 {
            pieces.push(&text[start..offset]);
            start = offset;
        }
        offset += line.len();
    }
    pieces.push(&text[start..]);
    // Blank lines or comments before the first marker: no document (a file
    // of nothing else reads as one empty document). Only plainly so: a tab,
    // a control character or a space of another kind may be an error or a
    // scalar to the parser.
    let blank = |t: &str| {
        t.bytes().all(|b| b == b'\n' || (b' '..=b'~').contains(&b))
            && t.lines().all(|l| matches!(l.trim_start_matches(' ').as_bytes().first(), None | Some(b'#')))
    };
    if pieces.len() > 1 && !is_marker(pieces[0]) && blank(pieces[0]) {
        pieces.remove(0);
    }
    Some(pieces)
}

/// [`parse_file_limited`] of the file whose documents' texts `pieces` are
/// ([`split_documents`]), one document at a time: a document `known` gives
/// (by its index and text) is taken as it is and not parsed. `None` where
/// the file must be read whole to read as it does: a document that does
/// not read alone as exactly one (a syntax error, whose line would be
/// counted from the document, or a marker inside a flow collection), a
/// text before the first marker that reads alone as an empty document (in
/// the file it may be no document, or an error), or more documents than
/// `max_documents`.
pub fn parse_split(
    pieces: &[&str],
    max_documents: usize,
    known: impl FnMut(usize, &str) -> Option<Option<Object>>,
) -> Option<FileDocs> {
    let docs = parse_split_as(pieces, max_documents, known, |o| o)?;
    Some(FileDocs { docs, syntax_error: None })
}

/// [`parse_split`] into the caller's own document type: `known` answers
/// in it (a reference to a document the caller holds, say), and what is
/// parsed is made one with `read`.
pub fn parse_split_as<D>(
    pieces: &[&str],
    max_documents: usize,
    mut known: impl FnMut(usize, &str) -> Option<Option<D>>,
    mut read: impl FnMut(Object) -> D,
) -> Option<Vec<Result<Option<D>, String>>> {
    if pieces.len() > max_documents {
        return None;
    }
    let mut docs = Vec::with_capacity(pieces.len());
    for (index, piece) in pieces.iter().enumerate() {
        let doc = match known(index, piece) {
            Some(doc) => Ok(doc),
            None => {
                let mut parsed = parse_file_limited(piece, 2);
                if parsed.syntax_error.is_some() || parsed.docs.len() != 1 {
                    return None;
                }
                parsed.docs.pop()?.map(|d| d.map(&mut read))
            }
        };
        // (Also for a known answer: whatever `known` says, such a head
        // does not read a document at a time.)
        if index == 0 && !is_marker(piece) && matches!(doc, Ok(None)) {
            return None;
        }
        docs.push(doc);
    }
    Some(docs)
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
        if is_marker(l) {
            start = offset;
        }
        offset += l.len();
    }
    start
}

#[cfg(test)]
mod tests;
