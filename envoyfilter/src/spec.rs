//! The EnvoyFilter API (`networking.istio.io/v1alpha3`), as its spec is
//! written: what the config crate keeps (validated JSON) read into types.
//! Enum values are kept as strings: a value from a newer Istio is carried,
//! not refused, and matches nothing.

use std::collections::BTreeMap;

use serde::Deserialize;
use serde_json::Value;

/// `EnvoyFilter.spec`.
#[derive(Debug, Clone, Default, PartialEq, Deserialize)]
#[serde(default, rename_all = "camelCase")]
pub struct EnvoyFilterSpec {
    /// The workloads (by label) it applies to; none: every workload of its
    /// namespace (all of the mesh from the root namespace).
    pub workload_selector: Option<WorkloadSelector>,
    /// The gateways (or waypoints) it applies to, instead of a selector.
    pub target_refs: Vec<TargetRef>,
    /// The patches, in order.
    pub config_patches: Vec<ConfigPatch>,
    /// Order among filters of one namespace: lower first.
    pub priority: i32,
}

/// `WorkloadSelector`.
#[derive(Debug, Clone, Default, PartialEq, Deserialize)]
#[serde(default, rename_all = "camelCase")]
pub struct WorkloadSelector {
    /// Labels the workload must carry.
    pub labels: BTreeMap<String, String>,
}

/// `PolicyTargetReference`.
#[derive(Debug, Clone, Default, PartialEq, Eq, Hash, Deserialize)]
#[serde(default, rename_all = "camelCase")]
pub struct TargetRef {
    /// Group.
    pub group: String,
    /// Kind (`Gateway`, `Service`, ...).
    pub kind: String,
    /// Name.
    pub name: String,
    /// Namespace (the filter's when empty).
    pub namespace: String,
}

/// `EnvoyConfigObjectPatch`.
#[derive(Debug, Clone, Default, PartialEq, Deserialize)]
#[serde(default, rename_all = "camelCase")]
pub struct ConfigPatch {
    /// What is patched: `LISTENER`, `FILTER_CHAIN`, `NETWORK_FILTER`,
    /// `HTTP_FILTER`, `ROUTE_CONFIGURATION`, `VIRTUAL_HOST`, `HTTP_ROUTE`,
    /// `CLUSTER`, `EXTENSION_CONFIG`, `BOOTSTRAP`, `LISTENER_FILTER`.
    pub apply_to: String,
    /// Where.
    #[serde(rename = "match")]
    pub match_: Option<Match>,
    /// How.
    pub patch: Option<Patch>,
}

/// `EnvoyConfigObjectMatch`.
#[derive(Debug, Clone, Default, PartialEq, Deserialize)]
#[serde(default, rename_all = "camelCase")]
pub struct Match {
    /// `ANY` (default), `SIDECAR_INBOUND`, `SIDECAR_OUTBOUND`, `GATEWAY`,
    /// `WAYPOINT`.
    pub context: String,
    /// The proxy's version and metadata.
    pub proxy: Option<ProxyMatch>,
    /// A listener (and within it).
    pub listener: Option<ListenerMatch>,
    /// A route configuration (and within it).
    pub route_configuration: Option<RouteConfigurationMatch>,
    /// A cluster.
    pub cluster: Option<ClusterMatch>,
}

/// `ProxyMatch`.
#[derive(Debug, Clone, Default, PartialEq, Deserialize)]
#[serde(default, rename_all = "camelCase")]
pub struct ProxyMatch {
    /// A regular expression (RE2) the proxy's `ISTIO_VERSION` must match.
    pub proxy_version: String,
    /// Node metadata the proxy must carry.
    pub metadata: BTreeMap<String, String>,
}

/// `ListenerMatch`.
#[derive(Debug, Clone, Default, PartialEq, Deserialize)]
#[serde(default, rename_all = "camelCase")]
pub struct ListenerMatch {
    /// The listener's port (its address's).
    pub port_number: u32,
    /// Deprecated, not read by istiod.
    pub port_name: String,
    /// A filter chain of it.
    pub filter_chain: Option<FilterChainMatch>,
    /// A listener filter's name.
    pub listener_filter: String,
    /// The listener's name.
    pub name: String,
}

/// `ListenerMatch.FilterChainMatch`.
#[derive(Debug, Clone, Default, PartialEq, Deserialize)]
#[serde(default, rename_all = "camelCase")]
pub struct FilterChainMatch {
    /// The chain's name.
    pub name: String,
    /// A server name of its match.
    pub sni: String,
    /// Its match's transport protocol (`raw_buffer`, `tls`).
    pub transport_protocol: String,
    /// Application protocols, comma separated.
    pub application_protocols: String,
    /// A network filter of it.
    pub filter: Option<FilterMatch>,
    /// Its match's destination port.
    pub destination_port: u32,
}

/// `ListenerMatch.FilterMatch`.
#[derive(Debug, Clone, Default, PartialEq, Deserialize)]
#[serde(default, rename_all = "camelCase")]
pub struct FilterMatch {
    /// The network filter's name.
    pub name: String,
    /// An HTTP filter of an HTTP connection manager.
    pub sub_filter: Option<SubFilterMatch>,
}

/// `ListenerMatch.SubFilterMatch`.
#[derive(Debug, Clone, Default, PartialEq, Deserialize)]
#[serde(default, rename_all = "camelCase")]
pub struct SubFilterMatch {
    /// The HTTP filter's name.
    pub name: String,
}

/// `RouteConfigurationMatch`.
#[derive(Debug, Clone, Default, PartialEq, Deserialize)]
#[serde(default, rename_all = "camelCase")]
pub struct RouteConfigurationMatch {
    /// The port of the listener (or server) it serves.
    pub port_number: u32,
    /// A gateway server's port name.
    pub port_name: String,
    /// The gateway (`namespace/name`) of a gateway's route configuration.
    pub gateway: String,
    /// A virtual host of it.
    pub vhost: Option<VirtualHostMatch>,
    /// Its name.
    pub name: String,
}

/// `RouteConfigurationMatch.VirtualHostMatch`.
#[derive(Debug, Clone, Default, PartialEq, Deserialize)]
#[serde(default, rename_all = "camelCase")]
pub struct VirtualHostMatch {
    /// Its name.
    pub name: String,
    /// A domain of it.
    pub domain_name: String,
    /// A route of it.
    pub route: Option<RouteMatch>,
}

/// `RouteConfigurationMatch.RouteMatch`.
#[derive(Debug, Clone, Default, PartialEq, Deserialize)]
#[serde(default, rename_all = "camelCase")]
pub struct RouteMatch {
    /// Its name.
    pub name: String,
    /// `ANY` (default), `ROUTE`, `REDIRECT`, `DIRECT_RESPONSE`.
    pub action: String,
}

/// `ClusterMatch`.
#[derive(Debug, Clone, Default, PartialEq, Deserialize)]
#[serde(default, rename_all = "camelCase")]
pub struct ClusterMatch {
    /// The service port.
    pub port_number: u32,
    /// The service's host name.
    pub service: String,
    /// The subset.
    pub subset: String,
    /// The cluster's name.
    pub name: String,
}

/// `Patch`.
#[derive(Debug, Clone, Default, PartialEq, Deserialize)]
#[serde(default, rename_all = "camelCase")]
pub struct Patch {
    /// `MERGE`, `ADD`, `REMOVE`, `INSERT_BEFORE`, `INSERT_AFTER`,
    /// `INSERT_FIRST`, `REPLACE`.
    pub operation: String,
    /// The value (JSON of the patched type; `@type` for `Any`s).
    pub value: Option<Value>,
    /// `filterClass` (`AUTHN`, `AUTHZ`, `STATS`): istiod reads none.
    pub filter_class: String,
}

impl EnvoyFilterSpec {
    /// The spec of a kept (validated) JSON value; a part that does not
    /// read is left at its default.
    pub fn read(v: &Value) -> EnvoyFilterSpec {
        serde_json::from_value(v.clone()).unwrap_or_default()
    }
}
