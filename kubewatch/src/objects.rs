//! The Kubernetes objects the mesh model reads, with the fields it reads
//! (serde ignores the rest).

use std::collections::BTreeMap;

use serde::Deserialize;

/// `metadata`.
#[derive(Debug, Clone, Default, PartialEq, Eq, Deserialize)]
#[serde(default, rename_all = "camelCase")]
pub struct Meta {
    /// Name.
    pub name: String,
    /// Namespace (`default` when absent).
    pub namespace: Option<String>,
    /// Labels.
    pub labels: BTreeMap<String, String>,
}

impl Meta {
    /// The namespace, `default` when absent (kubectl's rule).
    pub fn ns(&self) -> &str {
        self.namespace.as_deref().unwrap_or("default")
    }
}

/// A Service (core/v1).
#[derive(Debug, Clone, Default, PartialEq, Eq, Deserialize)]
#[serde(default, rename_all = "camelCase")]
pub struct Service {
    /// Metadata.
    pub metadata: Meta,
    /// Spec.
    pub spec: ServiceSpec,
}

/// `Service.spec`.
#[derive(Debug, Clone, Default, PartialEq, Eq, Deserialize)]
#[serde(default, rename_all = "camelCase")]
pub struct ServiceSpec {
    /// `clusterIP` (`None` for headless).
    #[serde(rename = "clusterIP")]
    pub cluster_ip: Option<String>,
    /// Ports.
    pub ports: Vec<ServicePort>,
    /// Selector.
    pub selector: BTreeMap<String, String>,
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

/// Objects read from a source.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Objects {
    /// Services.
    pub services: Vec<Service>,
    /// EndpointSlices.
    pub endpoint_slices: Vec<EndpointSlice>,
}
