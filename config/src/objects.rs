//! The Kubernetes objects the mesh model reads, with the fields it reads
//! (serde ignores the rest).

use std::collections::BTreeMap;

use serde::Deserialize;

use crate::meta::Meta;

/// The kinds watched, in the order of the watcher's stores (`kube_source.rs`): (group, version, kind,
/// plural). The first six are Kubernetes' own; the rest are Istio CRDs,
/// which may not be installed.
pub const KINDS: [(&str, &str, &str, &str); 33] = [
    ("", "v1", "Service", "services"),
    ("discovery.k8s.io", "v1", "EndpointSlice", "endpointslices"),
    ("", "v1", "Pod", "pods"),
    ("", "v1", "Node", "nodes"),
    ("", "v1", "Namespace", "namespaces"),
    ("", "v1", "Secret", "secrets"),
    ("networking.istio.io", "v1", "VirtualService", "virtualservices"),
    ("networking.istio.io", "v1", "DestinationRule", "destinationrules"),
    ("networking.istio.io", "v1", "Gateway", "gateways"),
    ("networking.istio.io", "v1", "ServiceEntry", "serviceentries"),
    ("networking.istio.io", "v1", "WorkloadEntry", "workloadentries"),
    ("networking.istio.io", "v1", "Sidecar", "sidecars"),
    ("security.istio.io", "v1", "PeerAuthentication", "peerauthentications"),
    ("security.istio.io", "v1", "AuthorizationPolicy", "authorizationpolicies"),
    ("security.istio.io", "v1", "RequestAuthentication", "requestauthentications"),
    ("networking.istio.io", "v1alpha3", "EnvoyFilter", "envoyfilters"),
    ("networking.istio.io", "v1", "WorkloadGroup", "workloadgroups"),
    ("networking.istio.io", "v1beta1", "ProxyConfig", "proxyconfigs"),
    ("telemetry.istio.io", "v1", "Telemetry", "telemetries"),
    ("extensions.istio.io", "v1alpha1", "WasmPlugin", "wasmplugins"),
    ("extensions.istio.io", "v1alpha1", "TrafficExtension", "trafficextensions"),
    ("gateway.networking.k8s.io", "v1", "GatewayClass", "gatewayclasses"),
    ("gateway.networking.k8s.io", "v1", "Gateway", "gateways"),
    ("gateway.networking.k8s.io", "v1", "HTTPRoute", "httproutes"),
    ("gateway.networking.k8s.io", "v1", "GRPCRoute", "grpcroutes"),
    ("gateway.networking.k8s.io", "v1beta1", "ReferenceGrant", "referencegrants"),
    ("gateway.networking.k8s.io", "v1", "TCPRoute", "tcproutes"),
    ("gateway.networking.k8s.io", "v1", "TLSRoute", "tlsroutes"),
    ("gateway.networking.k8s.io", "v1", "BackendTLSPolicy", "backendtlspolicies"),
    ("gateway.networking.k8s.io", "v1", "ListenerSet", "listenersets"),
    ("networking.k8s.io", "v1", "Ingress", "ingresses"),
    ("networking.k8s.io", "v1", "IngressClass", "ingressclasses"),
    ("", "v1", "ConfigMap", "configmaps"),
];

/// Which kinds are read, process-wide as istiod's features are:
/// `PILOT_ENABLE_GATEWAY_API=false` drops the Gateway API's kinds, and
/// `PILOT_IGNORE_RESOURCES` / `PILOT_INCLUDE_RESOURCES` drop (or keep) CRD
/// kinds by `<plural>.<group>`, exactly or by a `*.<suffix>` (istiod's CRD
/// watcher filter, `pkg/kube/kclient/crdwatcher.go`).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ReadFilter {
    /// `PILOT_ENABLE_GATEWAY_API`.
    pub gateway_api: bool,
    /// `PILOT_IGNORE_RESOURCES`, parsed.
    pub ignore: Vec<(bool, String)>,
    /// `PILOT_INCLUDE_RESOURCES`, parsed.
    pub include: Vec<(bool, String)>,
}

impl Default for ReadFilter {
    fn default() -> Self {
        Self { gateway_api: true, ignore: Vec::new(), include: Vec::new() }
    }
}

impl ReadFilter {
    /// istiod's `fetchResourceFilter`: comma-separated, trimmed, `*.`
    /// marking a suffix.
    pub fn parse_list(s: &str) -> Vec<(bool, String)> {
        s.split(',')
            .map(str::trim)
            .filter(|v| !v.is_empty())
            .map(|v| match v.strip_prefix("*.") {
                Some(suffix) => (true, suffix.to_owned()),
                None => (false, v.to_owned()),
            })
            .collect()
    }

    fn matches(list: &[(bool, String)], name: &str) -> bool {
        list.iter().any(|(suffix, v)| if *suffix { name.ends_with(v.as_str()) } else { name == v })
    }

    /// Whether `kind` of `group` is read.
    pub fn reads(&self, group: &str, kind: &str) -> bool {
        if group == crate::gateway_api::GROUP && !self.gateway_api {
            return false;
        }
        let crd = group.ends_with("istio.io") || group == crate::gateway_api::GROUP;
        let Some((_, _, _, plural)) = KINDS.iter().find(|k| k.0 == group && k.2 == kind) else { return true };
        if !crd || self.ignore.is_empty() {
            return true;
        }
        let name = format!("{plural}.{group}");
        !Self::matches(&self.ignore, &name) || Self::matches(&self.include, &name)
    }
}

static READ_FILTER: std::sync::OnceLock<ReadFilter> = std::sync::OnceLock::new();

/// Sets the kinds read (the first call wins).
pub fn set_read_filter(f: ReadFilter) {
    let _ = READ_FILTER.set(f);
}

/// Whether `kind` of `group` is read by this process.
pub fn reads(group: &str, kind: &str) -> bool {
    READ_FILTER.get().is_none_or(|f| f.reads(group, kind))
}

/// The older version of a kind in [`KINDS`] to watch where a cluster's
/// CRD does not serve the current one: TCPRoute and TLSRoute are `v1` in
/// Gateway API 1.5 (what istiod watches) and `v1alpha2` before.
pub fn older_version(group: &str, kind: &str) -> Option<&'static str> {
    (group == crate::gateway_api::GROUP && matches!(kind, "TCPRoute" | "TLSRoute")).then_some("v1alpha2")
}

/// A Service (core/v1).
#[derive(Debug, Clone, Default, PartialEq, Eq, Deserialize)]
#[serde(default, rename_all = "camelCase")]
pub struct Service {
    /// Metadata.
    pub metadata: Meta,
    /// Spec.
    pub spec: ServiceSpec,
    /// Status: a load balancer's addresses (what an Ingress's status says).
    pub status: ServiceStatus,
}

/// `Service.status`, the part read here.
#[derive(Debug, Clone, Default, PartialEq, Eq, Deserialize)]
#[serde(default, rename_all = "camelCase")]
pub struct ServiceStatus {
    /// `loadBalancer`.
    pub load_balancer: LoadBalancerStatus,
}

/// `LoadBalancerStatus`.
#[derive(Debug, Clone, Default, PartialEq, Eq, Deserialize)]
#[serde(default, rename_all = "camelCase")]
pub struct LoadBalancerStatus {
    /// The load balancer's addresses.
    pub ingress: Vec<LoadBalancerIngress>,
}

/// `LoadBalancerIngress`: an IP or a hostname.
#[derive(Debug, Clone, Default, PartialEq, Eq, Deserialize)]
#[serde(default, rename_all = "camelCase")]
pub struct LoadBalancerIngress {
    /// IP.
    pub ip: Option<String>,
    /// Hostname.
    pub hostname: Option<String>,
}

/// `Service.spec`.
#[derive(Debug, Clone, Default, PartialEq, Eq, Deserialize)]
#[serde(default, rename_all = "camelCase")]
pub struct ServiceSpec {
    /// `clusterIP` (`None` for headless).
    #[serde(rename = "clusterIP")]
    pub cluster_ip: Option<String>,
    /// `clusterIPs` (dual stack).
    #[serde(rename = "clusterIPs")]
    pub cluster_ips: Vec<String>,
    /// `type` (ClusterIP, NodePort, LoadBalancer, ExternalName).
    #[serde(rename = "type")]
    pub kind: Option<String>,
    /// `externalName` for ExternalName services.
    pub external_name: Option<String>,
    /// Ports.
    pub ports: Vec<ServicePort>,
    /// Selector.
    pub selector: BTreeMap<String, String>,
    /// `externalIPs`.
    #[serde(rename = "externalIPs")]
    pub external_ips: Vec<String>,
    /// `internalTrafficPolicy` (`Cluster` or `Local`).
    pub internal_traffic_policy: Option<String>,
    /// `trafficDistribution` (`PreferClose`, `PreferSameZone`, `PreferSameNode`).
    pub traffic_distribution: Option<String>,
    /// `publishNotReadyAddresses`.
    pub publish_not_ready_addresses: bool,
    /// `ipFamilies` (`IPv4`, `IPv6`).
    pub ip_families: Vec<String>,
}

/// `Service.spec.ports[]`.
#[derive(Debug, Clone, Default, PartialEq, Eq, Deserialize)]
#[serde(default, rename_all = "camelCase")]
pub struct ServicePort {
    /// Port name.
    pub name: Option<String>,
    /// Port.
    pub port: u16,
    /// TCP, UDP or SCTP.
    pub protocol: Option<String>,
    /// `appProtocol`.
    pub app_protocol: Option<String>,
    /// `targetPort`: a number or a container port name.
    pub target_port: Option<IntOrString>,
}

/// Kubernetes' `IntOrString`.
#[derive(Debug, Clone, PartialEq, Eq, Deserialize)]
#[serde(untagged)]
pub enum IntOrString {
    /// A number.
    Int(i64),
    /// A name.
    String(String),
}

/// An EndpointSlice (discovery.k8s.io/v1).
#[derive(Debug, Clone, Default, PartialEq, Eq, Deserialize)]
#[serde(default, rename_all = "camelCase")]
pub struct EndpointSlice {
    /// Metadata (`kubernetes.io/service-name` names the Service).
    pub metadata: Meta,
    /// IPv4, IPv6 or FQDN.
    pub address_type: String,
    /// Ports.
    pub ports: Vec<EndpointPort>,
    /// Endpoints.
    pub endpoints: Vec<Endpoint>,
}

impl EndpointSlice {
    /// The Service this slice belongs to.
    pub fn service_name(&self) -> Option<&str> {
        self.metadata.labels.get("kubernetes.io/service-name").map(String::as_str)
    }
}

/// `EndpointSlice.ports[]`.
#[derive(Debug, Clone, Default, PartialEq, Eq, Deserialize)]
#[serde(default, rename_all = "camelCase")]
pub struct EndpointPort {
    /// Matches the Service port name.
    pub name: Option<String>,
    /// Port on the endpoints.
    pub port: Option<u16>,
    /// `TCP`, `UDP` or `SCTP` (the API server writes `TCP` where it was
    /// left out).
    pub protocol: Option<String>,
    /// `appProtocol`.
    pub app_protocol: Option<String>,
}

/// `EndpointSlice.endpoints[]`.
#[derive(Debug, Clone, Default, PartialEq, Eq, Deserialize)]
#[serde(default, rename_all = "camelCase")]
pub struct Endpoint {
    /// Addresses.
    pub addresses: Vec<String>,
    /// Conditions.
    pub conditions: Conditions,
    /// Zone.
    pub zone: Option<String>,
    /// Node.
    pub node_name: Option<String>,
    /// The Pod behind the endpoint.
    pub target_ref: Option<ObjectRef>,
}

/// A reference to another object (`targetRef`).
#[derive(Debug, Clone, Default, PartialEq, Eq, Deserialize)]
#[serde(default, rename_all = "camelCase")]
pub struct ObjectRef {
    /// Kind (`Pod`).
    pub kind: String,
    /// Name.
    pub name: String,
    /// Namespace.
    pub namespace: Option<String>,
    /// The object's uid.
    pub uid: Option<String>,
}

/// A Pod (core/v1): what the model reads of a workload.
#[derive(Debug, Clone, Default, PartialEq, Eq, Deserialize)]
#[serde(default, rename_all = "camelCase")]
pub struct Pod {
    /// Metadata (labels select policies; `security.istio.io/tlsMode`,
    /// `istio-locality`).
    pub metadata: Meta,
    /// Spec.
    pub spec: PodSpec,
    /// Status.
    pub status: PodStatus,
}

/// `Pod.spec`.
#[derive(Debug, Clone, Default, PartialEq, Eq, Deserialize)]
#[serde(default, rename_all = "camelCase")]
pub struct PodSpec {
    /// Service account.
    pub service_account_name: Option<String>,
    /// Node.
    pub node_name: Option<String>,
    /// `hostNetwork`: the pod shares its node's addresses.
    pub host_network: bool,
    /// Containers: their named ports resolve a Service's named `targetPort`.
    pub containers: Vec<Container>,
    /// Init containers: a native sidecar's (`restartPolicy: Always`) named
    /// ports resolve one too.
    pub init_containers: Vec<Container>,
    /// `hostname` (the pod's name when unset): with `subdomain`, its DNS
    /// name under a headless Service.
    pub hostname: Option<String>,
    /// `subdomain`.
    pub subdomain: Option<String>,
}

/// `Pod.spec.containers[]`: what is read of a container.
#[derive(Debug, Clone, Default, PartialEq, Eq, Deserialize)]
#[serde(default, rename_all = "camelCase")]
pub struct Container {
    /// Name.
    pub name: String,
    /// Ports.
    pub ports: Vec<ContainerPort>,
    /// `restartPolicy` (init containers: `Always` makes a native sidecar).
    pub restart_policy: Option<String>,
}

/// `Pod.spec.containers[].ports[]`.
#[derive(Debug, Clone, Default, PartialEq, Eq, Deserialize)]
#[serde(default, rename_all = "camelCase")]
pub struct ContainerPort {
    /// Name (a Service's `targetPort` may name it).
    pub name: Option<String>,
    /// Port number.
    pub container_port: u16,
    /// `TCP` (absent), `UDP` or `SCTP`.
    pub protocol: Option<String>,
}

/// `Pod.status.podIPs[]`.
#[derive(Debug, Clone, Default, PartialEq, Eq, Deserialize)]
#[serde(default, rename_all = "camelCase")]
pub struct PodIp {
    /// The address.
    pub ip: String,
}

/// `Pod.status.conditions[]`.
#[derive(Debug, Clone, Default, PartialEq, Eq, Deserialize)]
#[serde(default, rename_all = "camelCase")]
pub struct PodCondition {
    /// `Ready`, `ContainersReady`, ...
    #[serde(rename = "type")]
    pub type_: String,
    /// `True`, `False` or `Unknown`.
    pub status: String,
}

/// `Pod.status`.
#[derive(Debug, Clone, Default, PartialEq, Eq, Deserialize)]
#[serde(default, rename_all = "camelCase")]
pub struct PodStatus {
    /// Phase.
    pub phase: Option<String>,
    /// Primary IP.
    #[serde(rename = "podIP")]
    pub pod_ip: Option<String>,
    /// Every IP (the primary first; dual-stack pods have two).
    #[serde(rename = "podIPs")]
    pub pod_ips: Vec<PodIp>,
    /// Conditions (`Ready`).
    pub conditions: Vec<PodCondition>,
}

/// A Node (core/v1): its labels carry the locality.
#[derive(Debug, Clone, Default, PartialEq, Eq, Deserialize)]
#[serde(default, rename_all = "camelCase")]
pub struct Node {
    /// Metadata.
    pub metadata: Meta,
    /// Spec: its taints (istio-cni's readiness taint).
    pub spec: NodeSpec,
    /// Status (the kubelet's version, for native sidecars).
    pub status: NodeStatus,
}

/// `Node.spec`, the part read here.
#[derive(Debug, Clone, Default, PartialEq, Eq, Deserialize)]
#[serde(default, rename_all = "camelCase")]
pub struct NodeSpec {
    /// Taints.
    pub taints: Vec<Taint>,
}

/// A node taint.
#[derive(Debug, Clone, Default, PartialEq, Eq, Deserialize)]
#[serde(default, rename_all = "camelCase")]
pub struct Taint {
    /// Key.
    pub key: String,
    /// Effect (`NoSchedule`, ...).
    pub effect: String,
}

/// `Node.status`, the part read here.
#[derive(Debug, Clone, Default, PartialEq, Eq, Deserialize)]
#[serde(default, rename_all = "camelCase")]
pub struct NodeStatus {
    /// `nodeInfo`.
    pub node_info: NodeInfo,
    /// Addresses (`ExternalIP`, `InternalIP`, ...).
    pub addresses: Vec<NodeAddress>,
}

/// `NodeAddress`.
#[derive(Debug, Clone, Default, PartialEq, Eq, Deserialize)]
#[serde(default, rename_all = "camelCase")]
pub struct NodeAddress {
    /// `ExternalIP`, `InternalIP`, `Hostname`, ...
    #[serde(rename = "type")]
    pub type_: String,
    /// The address.
    pub address: String,
}

/// `Node.status.nodeInfo`, the part read here.
#[derive(Debug, Clone, Default, PartialEq, Eq, Deserialize)]
#[serde(default, rename_all = "camelCase")]
pub struct NodeInfo {
    /// `kubeletVersion` (`v1.33.0`).
    pub kubelet_version: String,
}

/// A Namespace (core/v1).
#[derive(Debug, Clone, Default, PartialEq, Eq, Deserialize)]
#[serde(default, rename_all = "camelCase")]
pub struct Namespace {
    /// Metadata.
    pub metadata: Meta,
}

/// `EndpointSlice.endpoints[].conditions`; absent means unknown, which
/// Kubernetes says to treat as ready.
#[derive(Debug, Clone, Default, PartialEq, Eq, Deserialize)]
#[serde(default, rename_all = "camelCase")]
pub struct Conditions {
    /// Ready.
    pub ready: Option<bool>,
    /// Serving.
    pub serving: Option<bool>,
    /// Terminating.
    pub terminating: Option<bool>,
}

/// A Secret (core/v1): gateway credentials (`tls.crt`/`tls.key`/`ca.crt`,
/// generic `cert`/`key`/`cacert`). `data` arrives base64 (decoded here);
/// `stringData`, which the API server folds into `data`, is read as well
/// so a manifest in `--configDir` may use either.
#[derive(Clone, Default, PartialEq, Eq, Deserialize)]
#[serde(default, rename_all = "camelCase")]
pub struct Secret {
    /// Metadata.
    pub metadata: Meta,
    /// `type` (`kubernetes.io/tls`, `Opaque`, ...).
    #[serde(rename = "type")]
    pub type_: String,
    /// `data`, decoded.
    pub data: BTreeMap<String, k8s_openapi::ByteString>,
    /// `stringData`.
    pub string_data: BTreeMap<String, String>,
}

impl std::fmt::Debug for Secret {
    // Never print key material.
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        let keys: Vec<&String> = self.data.keys().chain(self.string_data.keys()).collect();
        f.debug_struct("Secret")
            .field("metadata", &self.metadata)
            .field("type", &self.type_)
            .field("keys", &keys)
            .finish()
    }
}

impl Secret {
    /// Types istiod's Secret informer leaves out (Helm releases and
    /// service account tokens): never credentials, often large.
    pub const IGNORED_TYPES: [&'static str; 2] = ["helm.sh/release.v1", "kubernetes.io/service-account-token"];

    /// Whether istiod reads Secrets of this one's type.
    pub fn is_read(&self) -> bool {
        !Self::IGNORED_TYPES.contains(&self.type_.as_str())
    }

    /// `data` and `stringData` merged (`stringData` wins, as the API
    /// server merges them).
    pub fn decoded(&self) -> BTreeMap<String, Vec<u8>> {
        let mut out: BTreeMap<String, Vec<u8>> = self.data.iter().map(|(k, v)| (k.clone(), v.0.clone())).collect();
        out.extend(self.string_data.iter().map(|(k, v)| (k.clone(), v.as_bytes().to_vec())));
        out
    }
}

/// istiod's `truncatedKeysMessage`: the keys, sorted, the first three and
/// how many more.
pub fn found_keys<V>(d: &BTreeMap<String, V>) -> String {
    let keys: Vec<&str> = d.keys().map(String::as_str).collect();
    // Three keys read "a, b, c, and 0 more...", as istiod's do.
    if keys.len() < 3 { keys.join(", ") } else { format!("{}, and {} more...", keys[..3].join(", "), keys.len() - 3) }
}

/// istiod's `ExtractRoot` over a Secret's or a ConfigMap's data: the CA
/// and its revocation list, generic `cacert` (and `crl`) first, else
/// `ca.crt` (and `ca.crl`); the error in istiod's words.
pub fn extract_root<V: AsRef<[u8]>>(d: &BTreeMap<String, V>) -> Result<(Vec<u8>, Option<Vec<u8>>), String> {
    let get = |k: &str| d.get(k).map(AsRef::as_ref).filter(|v| !v.is_empty()).map(<[u8]>::to_vec);
    if let Some(ca) = get("cacert") {
        return Ok((ca, get("crl")));
    }
    if let Some(ca) = get("ca.crt") {
        return Ok((ca, get("ca.crl")));
    }
    for k in ["cacert", "ca.crt"] {
        if d.contains_key(k) {
            return Err(format!("found key {k:?}, but it was empty"));
        }
    }
    Err(format!("found secret, but didn't have expected keys cacert or ca.crt; found: {}", found_keys(d)))
}

/// A ConfigMap (core/v1), as far as a CA in it goes (a BackendTLSPolicy's
/// `caCertificateRefs`, served as `configmap://<ns>/<name>`): the keys
/// istiod's `ExtractRoot` reads keep their values, every other key only
/// its name (for istiod's "found: ..." message), so that the mesh's
/// ConfigMaps cost little to hold.
#[derive(Debug, Clone, Default, PartialEq, Eq, Deserialize)]
#[serde(default, rename_all = "camelCase")]
pub struct ConfigMap {
    /// Metadata.
    pub metadata: Meta,
    /// `data`.
    pub data: BTreeMap<String, String>,
}

impl ConfigMap {
    /// The keys whose values are read: a CA and its revocation list.
    pub const READ_KEYS: [&'static str; 4] = ["cacert", "crl", "ca.crt", "ca.crl"];

    /// `self` without what is never read: other keys' values, labels,
    /// annotations.
    pub fn slim(mut self) -> ConfigMap {
        for (k, v) in self.data.iter_mut() {
            if !Self::READ_KEYS.contains(&k.as_str()) {
                v.clear();
            }
        }
        self.metadata.labels.clear();
        self.metadata.annotations.clear();
        self
    }
}

/// Objects read from a source.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct Objects {
    /// Services.
    pub services: Vec<Service>,
    /// EndpointSlices.
    pub endpoint_slices: Vec<EndpointSlice>,
    /// Pods.
    pub pods: Vec<Pod>,
    /// Nodes.
    pub nodes: Vec<Node>,
    /// Namespaces.
    pub namespaces: Vec<Namespace>,
    /// Istio configuration (networking.istio.io, security.istio.io), validated.
    pub istio: Vec<crate::istio::IstioObject>,
    /// Secrets of the types istiod reads (gateway credentials).
    pub secrets: Vec<Secret>,
    /// Kubernetes Gateway API objects.
    pub gateway_api: Vec<crate::gateway_api::GatewayApiObject>,
    /// Ingresses (networking.k8s.io/v1).
    pub ingresses: Vec<Ingress>,
    /// IngressClasses (networking.k8s.io/v1).
    pub ingress_classes: Vec<IngressClass>,
    /// ConfigMaps, slimmed ([`ConfigMap::slim`]).
    pub config_maps: Vec<ConfigMap>,
    /// The registries of remote clusters (multicluster), by cluster ID in
    /// order: each cluster's Services, EndpointSlices, Pods, Nodes and
    /// Namespaces, as its API server has them.
    pub remotes: Vec<(String, std::sync::Arc<Objects>)>,
}

/// An Ingress (networking.k8s.io/v1), the fields istiod's ingress
/// controller reads.
#[derive(Debug, Clone, Default, PartialEq, Eq, Deserialize)]
#[serde(default, rename_all = "camelCase")]
pub struct Ingress {
    /// Metadata.
    pub metadata: Meta,
    /// Spec.
    pub spec: IngressSpec,
}

/// `Ingress.spec`.
#[derive(Debug, Clone, Default, PartialEq, Eq, Deserialize)]
#[serde(default, rename_all = "camelCase")]
pub struct IngressSpec {
    /// `ingressClassName`.
    pub ingress_class_name: Option<String>,
    /// `defaultBackend` (istiod ignores it).
    pub default_backend: Option<IngressBackend>,
    /// `tls`.
    pub tls: Vec<IngressTls>,
    /// `rules`.
    pub rules: Vec<IngressRule>,
}

/// `Ingress.spec.tls[]`.
#[derive(Debug, Clone, Default, PartialEq, Eq, Deserialize)]
#[serde(default, rename_all = "camelCase")]
pub struct IngressTls {
    /// `hosts`.
    pub hosts: Vec<String>,
    /// `secretName`.
    pub secret_name: String,
}

/// `Ingress.spec.rules[]`.
#[derive(Debug, Clone, Default, PartialEq, Eq, Deserialize)]
#[serde(default, rename_all = "camelCase")]
pub struct IngressRule {
    /// `host` (empty: any).
    pub host: String,
    /// `http`.
    pub http: Option<HttpIngressRule>,
}

/// `Ingress.spec.rules[].http`.
#[derive(Debug, Clone, Default, PartialEq, Eq, Deserialize)]
#[serde(default, rename_all = "camelCase")]
pub struct HttpIngressRule {
    /// `paths`.
    pub paths: Vec<HttpIngressPath>,
}

/// `Ingress.spec.rules[].http.paths[]`.
#[derive(Debug, Clone, Default, PartialEq, Eq, Deserialize)]
#[serde(default, rename_all = "camelCase")]
pub struct HttpIngressPath {
    /// `path`.
    pub path: String,
    /// `pathType`: `Exact`, `Prefix` or `ImplementationSpecific`.
    pub path_type: Option<String>,
    /// `backend`.
    pub backend: IngressBackend,
}

/// `IngressBackend`.
#[derive(Debug, Clone, Default, PartialEq, Eq, Deserialize)]
#[serde(default, rename_all = "camelCase")]
pub struct IngressBackend {
    /// `service`.
    pub service: Option<IngressServiceBackend>,
}

/// `IngressServiceBackend`.
#[derive(Debug, Clone, Default, PartialEq, Eq, Deserialize)]
#[serde(default, rename_all = "camelCase")]
pub struct IngressServiceBackend {
    /// `name`.
    pub name: String,
    /// `port`.
    pub port: ServiceBackendPort,
}

/// `ServiceBackendPort`: a number or a name.
#[derive(Debug, Clone, Default, PartialEq, Eq, Deserialize)]
#[serde(default, rename_all = "camelCase")]
pub struct ServiceBackendPort {
    /// `name`.
    pub name: String,
    /// `number`.
    pub number: i32,
}

/// An IngressClass (networking.k8s.io/v1).
#[derive(Debug, Clone, Default, PartialEq, Eq, Deserialize)]
#[serde(default, rename_all = "camelCase")]
pub struct IngressClass {
    /// Metadata.
    pub metadata: Meta,
    /// Spec.
    pub spec: IngressClassSpec,
}

/// `IngressClass.spec`.
#[derive(Debug, Clone, Default, PartialEq, Eq, Deserialize)]
#[serde(default, rename_all = "camelCase")]
pub struct IngressClassSpec {
    /// `controller` (`istio.io/ingress-controller` for istiod).
    pub controller: String,
}

#[cfg(test)]
mod read_filter_tests {
    use super::ReadFilter;

    /// Upstream `TestCRDWatcherWithUnionFilter` (pkg/kube/kclient/
    /// crdwatcher_test.go): ignore `*.istio.io` and Ingress, include
    /// `*.telemetry.istio.io` and WasmPlugins. (Ingress is no CRD in a
    /// cluster, and is read here as istiod's ingress controller reads it.)
    #[test]
    fn upstream_crd_watcher_union_filter() {
        let f = ReadFilter {
            gateway_api: true,
            ignore: ReadFilter::parse_list("*.istio.io, ingresses.networking.k8s.io"),
            include: ReadFilter::parse_list("*.telemetry.istio.io, wasmplugins.extensions.istio.io"),
        };
        assert!(!f.reads("networking.istio.io", "VirtualService"));
        assert!(f.reads("extensions.istio.io", "WasmPlugin"));
        assert!(f.reads("telemetry.istio.io", "Telemetry"));
        assert!(f.reads("gateway.networking.k8s.io", "GatewayClass"));
        assert!(f.reads("", "Service"), "core kinds are not CRDs");
        let off = ReadFilter { gateway_api: false, ..ReadFilter::default() };
        assert!(!off.reads("gateway.networking.k8s.io", "HTTPRoute"));
        assert!(off.reads("networking.istio.io", "Gateway"));
    }
}
