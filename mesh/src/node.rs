//! The proxy behind a stream: its node id (`sidecar~10.0.0.5~pod.ns~ns.svc.cluster.local`)
//! and metadata, parsed by istiod's rules (`model.ParseServiceNodeWithMetadata`
//! in pilot/pkg/model/context.go), and the class that the serving cores'
//! cache keys on. The xDS engine sees only the [`Classified`] result.

use std::sync::Arc;

use istiod_proto::envoy::config::core::v3::Node;
use istiod_proto::prost_types::value::Kind as ValueKind;
use istiod_xds_api::node::{Classified, Peer};

/// istiod's node types (`model.NodeType`).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum NodeType {
    /// An Envoy sidecar.
    Sidecar,
    /// A gateway (istiod calls it `router`).
    Router,
    /// A ztunnel.
    Ztunnel,
    /// A waypoint proxy.
    Waypoint,
}

/// What istiod-rs reads of a proxy's first request: its id, type, the
/// fields the debug endpoints show, and its class.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Proxy {
    /// The node id as sent.
    pub id: Arc<str>,
    /// istiod's `Proxy.ID`: the id's third field, `pod.namespace`.
    pub name: Arc<str>,
    /// Node type (first field of the id).
    pub node_type: NodeType,
    /// `CLUSTER_ID` metadata.
    pub cluster_id: Arc<str>,
    /// `ISTIO_VERSION` metadata.
    pub istio_version: Arc<str>,
    /// The proxy's class (interned by the core).
    pub class: ProxyClass,
}

/// What a proxy's generated configuration depends on besides the
/// snapshot: proxies of the same class share cached bytes, so every input
/// a generator reads for a proxy must be in the class.
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
pub struct ProxyClass {
    /// Node type.
    pub node_type: NodeType,
    /// Namespace.
    pub namespace: Arc<str>,
    /// Generator (`GENERATOR` metadata; empty for Envoy).
    pub generator: Arc<str>,
    /// Workload labels (`LABELS` metadata, sorted): they select the
    /// proxy's services and policies.
    pub labels: Vec<(Arc<str>, Arc<str>)>,
    /// The node's locality as `region/zone/subzone` (empty when unknown):
    /// locality load balancing orders endpoints by it.
    pub locality: Arc<str>,
    /// Whether the stream's caller was authenticated and its namespace
    /// checked (istiod's `VerifiedIdentity`): gateway credentials (SDS)
    /// are served only then.
    pub verified: bool,
    /// The `SERVICE_ACCOUNT` the node names (checked against the caller's
    /// identity when `verified`): a Gateway API gateway's credentials go to
    /// its service account only. Resources other than credentials do not
    /// read it.
    pub service_account: Arc<str>,
    /// The workload's addresses (`INSTANCE_IPS`, else the node id's): a
    /// service whose endpoints name one without selecting it by label (a
    /// ServiceEntry's inline endpoint, a Service without selector) is the
    /// workload's too, as istiod finds a proxy's services by its IP.
    /// Reduced away wherever no such service claims them.
    pub ips: Vec<Arc<str>>,
    /// `MESH_ID` metadata and...
    pub mesh_id: Arc<str>,
    /// ...`CLUSTER_ID`: tracing tags them on the inbound side.
    pub cluster_id: Arc<str>,
    /// `ISTIO_VERSION`: EnvoyFilter patches may match it (`proxyVersion`).
    /// Reduced away unless one does.
    pub version: Arc<str>,
    /// The node's string metadata, sorted:
    /// EnvoyFilter patches may match it (`proxy.metadata`). Reduced to the
    /// keys some patch matches.
    pub metadata: Vec<(Arc<str>, Arc<str>)>,
}

/// Why a node was rejected (the stream ends with INVALID_ARGUMENT).
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum NodeError {
    /// The first request carried no node.
    #[error("missing node information")]
    Missing,
    /// The id does not have istiod's four `~`-separated parts.
    #[error("malformed node id {0:?}: want type~ip~pod.namespace~domain")]
    BadId(String),
    /// Unknown node type.
    #[error("invalid node type {0:?} in node id")]
    BadType(String),
}

pub fn meta_str(node: &Node, key: &str) -> Option<String> {
    let v = node.metadata.as_ref()?.fields.get(key)?;
    match v.kind.as_ref()? {
        ValueKind::StringValue(s) => Some(s.clone()),
        ValueKind::NumberValue(n) => Some(n.to_string()),
        ValueKind::BoolValue(b) => Some(b.to_string()),
        _ => None,
    }
}

/// `PILOT_ENABLE_AMBIENT`: whether ztunnels are served (istiod's
/// `features.EnableAmbient`, read once at start; see [`set_ambient`]).
static AMBIENT: std::sync::atomic::AtomicBool = std::sync::atomic::AtomicBool::new(false);

/// Turns serving ztunnels on or off (the wiring does, from
/// `PILOT_ENABLE_AMBIENT`); off, a ztunnel's stream is refused as istiod
/// refuses it.
pub fn set_ambient(enabled: bool) {
    AMBIENT.store(enabled, std::sync::atomic::Ordering::Relaxed);
}

/// Whether ambient is on ([`set_ambient`]).
pub fn ambient() -> bool {
    AMBIENT.load(std::sync::atomic::Ordering::Relaxed)
}

impl Proxy {
    /// Parses a node as istiod does (`model.ParseServiceNodeWithMetadata`).
    pub fn from_node(node: Option<&Node>) -> Result<Proxy, NodeError> {
        let node = node.filter(|n| !n.id.is_empty()).ok_or(NodeError::Missing)?;
        let parts: Vec<&str> = node.id.split('~').collect();
        if parts.len() != 4 {
            return Err(NodeError::BadId(node.id.clone()));
        }
        let node_type = match parts[0] {
            "sidecar" => NodeType::Sidecar,
            "router" => NodeType::Router,
            "ztunnel" => NodeType::Ztunnel,
            "waypoint" => NodeType::Waypoint,
            other => return Err(NodeError::BadType(other.to_owned())),
        };
        // `pod.namespace` (third field) names the namespace when the
        // metadata does not.
        let namespace = meta_str(node, "NAMESPACE")
            .filter(|s| !s.is_empty())
            .or_else(|| parts[2].split_once('.').map(|(_, ns)| ns.to_owned()))
            .unwrap_or_default();
        let mut labels: Vec<(Arc<str>, Arc<str>)> = node
            .metadata
            .as_ref()
            .and_then(|m| m.fields.get("LABELS"))
            .and_then(|v| match v.kind.as_ref() {
                Some(ValueKind::StructValue(s)) => Some(
                    s.fields
                        .iter()
                        .filter_map(|(k, v)| match v.kind.as_ref() {
                            Some(ValueKind::StringValue(s)) => Some((Arc::from(k.as_str()), Arc::from(s.as_str()))),
                            _ => None,
                        })
                        .collect(),
                ),
                _ => None,
            })
            .unwrap_or_default();
        labels.sort();
        let s = |k: &str| Arc::<str>::from(meta_str(node, k).unwrap_or_default());
        Ok(Proxy {
            id: node.id.as_str().into(),
            name: parts[2].into(),
            node_type,
            class: ProxyClass {
                node_type,
                namespace: namespace.into(),
                generator: s("GENERATOR"),
                labels,
                locality: match &node.locality {
                    Some(l) if !(l.region.is_empty() && l.zone.is_empty() && l.sub_zone.is_empty()) => {
                        format!("{}/{}/{}", l.region, l.zone, l.sub_zone).into()
                    }
                    _ => "".into(),
                },
                verified: false,
                service_account: s("SERVICE_ACCOUNT"),
                ips: {
                    let listed = meta_str(node, "INSTANCE_IPS").unwrap_or_default();
                    let mut ips: Vec<Arc<str>> =
                        listed.split(',').map(str::trim).filter(|s| !s.is_empty()).map(Arc::from).collect();
                    if ips.is_empty() && !parts[1].is_empty() {
                        ips.push(Arc::from(parts[1]));
                    }
                    ips
                },
                mesh_id: s("MESH_ID"),
                cluster_id: s("CLUSTER_ID"),
                version: s("ISTIO_VERSION"),
                metadata: string_metadata(node),
            },
            cluster_id: s("CLUSTER_ID"),
            istio_version: s("ISTIO_VERSION"),
        })
    }
}

/// The node's string-valued metadata, sorted.
fn string_metadata(node: &Node) -> Vec<(Arc<str>, Arc<str>)> {
    let mut out: Vec<(Arc<str>, Arc<str>)> = node
        .metadata
        .iter()
        .flat_map(|m| &m.fields)
        .filter_map(|(k, v)| match &v.kind {
            Some(ValueKind::StringValue(s)) => Some((Arc::from(k.as_str()), Arc::from(s.as_str()))),
            _ => None,
        })
        .collect();
    // A VM's agent probing its workload (`PROXY_CONFIG.readinessProbe`):
    // its auto-registered WorkloadEntry is health-checked.
    let probe = node.metadata.as_ref().and_then(|m| m.fields.get("PROXY_CONFIG")).is_some_and(|v| match &v.kind {
        Some(ValueKind::StructValue(pc)) => {
            pc.fields.get("readinessProbe").is_some_and(|p| !matches!(p.kind, None | Some(ValueKind::NullValue(_))))
        }
        _ => false,
    });
    if probe {
        out.push((Arc::from(READINESS_PROBE), Arc::from("true")));
    }
    out.sort();
    out
}

/// The metadata key a node's `PROXY_CONFIG.readinessProbe` sets (to
/// `true`): not of the node's string metadata, istiod-rs's own.
pub const READINESS_PROBE: &str = "PROXY_CONFIG.readinessProbe";

impl NodeType {
    /// istiod's name for the type (the node id's first field).
    pub fn as_str(self) -> &'static str {
        match self {
            NodeType::Sidecar => "sidecar",
            NodeType::Router => "router",
            NodeType::Ztunnel => "ztunnel",
            NodeType::Waypoint => "waypoint",
        }
    }
}

impl ProxyClass {
    /// The class as JSON (`/debug/adsz`'s `istiodRs.class`), read back by
    /// [`ProxyClass::from_detail`] for the per-proxy debug views.
    pub fn detail(&self) -> serde_json::Value {
        let labels: serde_json::Map<String, serde_json::Value> =
            self.labels.iter().map(|(k, v)| (k.to_string(), serde_json::Value::from(&**v))).collect();
        serde_json::json!({
            "nodeType": self.node_type.as_str(),
            "namespace": &*self.namespace,
            "generator": &*self.generator,
            "labels": labels,
            "locality": &*self.locality,
            "verified": self.verified,
            "serviceAccount": &*self.service_account,
            "ips": self.ips.iter().map(|s| &**s).collect::<Vec<_>>(),
            "meshId": &*self.mesh_id,
            "clusterId": &*self.cluster_id,
            "version": &*self.version,
            "metadata": self.metadata.iter().map(|(k, v)| (k.to_string(), serde_json::Value::from(&**v))).collect::<serde_json::Map<_, _>>(),
        })
    }

    /// The class [`ProxyClass::detail`] wrote.
    pub fn from_detail(v: &serde_json::Value) -> Option<ProxyClass> {
        let s = |k: &str| -> Arc<str> { v[k].as_str().unwrap_or("").into() };
        let node_type = match v["nodeType"].as_str()? {
            "sidecar" => NodeType::Sidecar,
            "router" => NodeType::Router,
            "ztunnel" => NodeType::Ztunnel,
            "waypoint" => NodeType::Waypoint,
            _ => return None,
        };
        let mut labels: Vec<(Arc<str>, Arc<str>)> = v["labels"]
            .as_object()?
            .iter()
            .map(|(k, v)| (Arc::from(k.as_str()), Arc::from(v.as_str().unwrap_or(""))))
            .collect();
        labels.sort();
        Some(ProxyClass {
            node_type,
            namespace: s("namespace"),
            generator: s("generator"),
            labels,
            locality: s("locality"),
            verified: v["verified"].as_bool().unwrap_or(false),
            service_account: s("serviceAccount"),
            ips: v["ips"]
                .as_array()
                .map(|a| a.iter().filter_map(|x| x.as_str()).map(Arc::from).collect())
                .unwrap_or_default(),
            mesh_id: s("meshId"),
            cluster_id: s("clusterId"),
            version: s("version"),
            metadata: {
                let mut m: Vec<(Arc<str>, Arc<str>)> = v["metadata"]
                    .as_object()
                    .into_iter()
                    .flatten()
                    .map(|(k, v)| (Arc::from(k.as_str()), Arc::from(v.as_str().unwrap_or(""))))
                    .collect();
                m.sort();
                m
            },
        })
    }
}

impl Proxy {
    /// The engine's view: the id, the fields the debug endpoints show, and
    /// the class. (A long id quoted in the error is cut by the gRPC status
    /// layer, like every status message.)
    pub fn classify(node: Option<&Node>, verified: bool) -> Result<Classified<ProxyClass>, String> {
        let mut p = Proxy::from_node(node).map_err(|e| e.to_string())?;
        if p.node_type == NodeType::Ztunnel && !AMBIENT.load(std::sync::atomic::Ordering::Relaxed) {
            return Err("ztunnel requires PILOT_ENABLE_AMBIENT=true".into());
        }
        p.class.verified = verified;
        Ok(Classified {
            peer: Peer {
                id: p.id.clone(),
                name: p.name.clone(),
                info: vec![
                    ("proxy_type", p.node_type.as_str().into()),
                    ("namespace", p.class.namespace.clone()),
                    ("istio_version", p.istio_version.clone()),
                    ("cluster_id", p.cluster_id.clone()),
                ],
            },
            class: p.class,
        })
    }
}

#[cfg(test)]
mod tests {
    use std::collections::BTreeMap;

    use istiod_proto::prost_types::{Struct, Value};

    use super::*;

    fn node(id: &str, meta: &[(&str, &str)]) -> Node {
        let mut fields: BTreeMap<String, Value> = meta
            .iter()
            .map(|(k, v)| (k.to_string(), Value { kind: Some(ValueKind::StringValue(v.to_string())) }))
            .collect();
        fields.insert(
            "LABELS".into(),
            Value {
                kind: Some(ValueKind::StructValue(Struct {
                    fields: BTreeMap::from([
                        ("version".into(), Value { kind: Some(ValueKind::StringValue("v1".into())) }),
                        ("app".into(), Value { kind: Some(ValueKind::StringValue("reviews".into())) }),
                    ]),
                })),
            },
        );
        Node { id: id.into(), metadata: Some(Struct { fields }), ..Default::default() }
    }

    #[test]
    fn sidecar_node() {
        let n = node(
            "sidecar~10.244.1.12~reviews-v1-abc.bookinfo~bookinfo.svc.cluster.local",
            &[("CLUSTER_ID", "Kubernetes"), ("ISTIO_VERSION", "1.28.0"), ("INTERCEPTION_MODE", "REDIRECT")],
        );
        let p = Proxy::from_node(Some(&n)).unwrap();
        assert_eq!(p.node_type, NodeType::Sidecar);
        assert_eq!(&*p.class.namespace, "bookinfo", "from the workload name when NAMESPACE is absent");
        assert_eq!(&*p.cluster_id, "Kubernetes");
        assert_eq!(&*p.istio_version, "1.28.0");
        assert_eq!(p.class.labels[0], ("app".into(), "reviews".into()), "sorted");
        assert_eq!(&*p.class.locality, "", "no locality sent");
        let mut n = n;
        n.locality = Some(istiod_proto::envoy::config::core::v3::Locality {
            region: "us-east1".into(),
            zone: "us-east1-b".into(),
            sub_zone: String::new(),
        });
        let p = Proxy::from_node(Some(&n)).unwrap();
        assert_eq!(&*p.class.locality, "us-east1/us-east1-b/", "the class carries the locality");
    }

    #[test]
    fn metadata_namespace_and_grpc_generator() {
        let n = node("sidecar~10.0.0.1~echo.x~x.svc.cluster.local", &[("NAMESPACE", "echo-ns"), ("GENERATOR", "grpc")]);
        let p = Proxy::from_node(Some(&n)).unwrap();
        assert_eq!(&*p.class.namespace, "echo-ns");
        assert_eq!(&*p.class.generator, "grpc");
    }

    #[test]
    fn istiod_rejections() {
        assert_eq!(Proxy::from_node(None), Err(NodeError::Missing));
        assert_eq!(Proxy::from_node(Some(&Node::default())), Err(NodeError::Missing));
        assert!(matches!(Proxy::from_node(Some(&node("sidecar~1.2.3.4", &[]))), Err(NodeError::BadId(_))));
        assert!(matches!(Proxy::from_node(Some(&node("proxy~1~a.b~c", &[]))), Err(NodeError::BadType(_))));
    }
}
