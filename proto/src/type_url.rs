//! Type URLs of the resources and typed configs istiod-rs puts on the wire.
//!
//! xDS names resource types by URL (`DiscoveryRequest.type_url`) and every
//! `Any` carries one. These constants are what the serving code compares and
//! writes; a test checks each equals the URL prost derives from the message
//! it names, and the conformance test checks each names an upstream message.

/// Prefix of every type URL (protobuf's `Any` convention).
pub const PREFIX: &str = "type.googleapis.com/";

/// CDS resource.
pub const CLUSTER: &str = "type.googleapis.com/envoy.config.cluster.v3.Cluster";
/// EDS resource.
pub const CLUSTER_LOAD_ASSIGNMENT: &str = "type.googleapis.com/envoy.config.endpoint.v3.ClusterLoadAssignment";
/// LDS resource.
pub const LISTENER: &str = "type.googleapis.com/envoy.config.listener.v3.Listener";
/// RDS resource.
pub const ROUTE_CONFIGURATION: &str = "type.googleapis.com/envoy.config.route.v3.RouteConfiguration";
/// SDS resource.
pub const SECRET: &str = "type.googleapis.com/envoy.extensions.transport_sockets.tls.v3.Secret";
/// ECDS resource: an extension's config (a Wasm filter).
pub const TYPED_EXTENSION_CONFIG: &str = "type.googleapis.com/envoy.config.core.v3.TypedExtensionConfig";
/// istio-agent's DNS name table (NDS).
pub const NAME_TABLE: &str = "type.googleapis.com/istio.networking.nds.v1.NameTable";
/// istio-agent's proxy configuration (PCDS): the workload trust bundle.
pub const PROXY_CONFIG: &str = "type.googleapis.com/istio.mesh.v1alpha1.ProxyConfig";
/// Workload API (ztunnel) resource: an address.
pub const ADDRESS: &str = "type.googleapis.com/istio.workload.Address";
/// Workload API (ztunnel) resource: an L4 authorization policy.
pub const AUTHORIZATION: &str = "type.googleapis.com/istio.security.Authorization";

/// HTTP connection manager network filter config.
pub const HTTP_CONNECTION_MANAGER: &str =
    "type.googleapis.com/envoy.extensions.filters.network.http_connection_manager.v3.HttpConnectionManager";
/// Router HTTP filter config.
pub const ROUTER: &str = "type.googleapis.com/envoy.extensions.filters.http.router.v3.Router";
/// TCP proxy network filter config.
pub const TCP_PROXY: &str = "type.googleapis.com/envoy.extensions.filters.network.tcp_proxy.v3.TcpProxy";
/// Upstream TLS transport socket config.
pub const UPSTREAM_TLS_CONTEXT: &str =
    "type.googleapis.com/envoy.extensions.transport_sockets.tls.v3.UpstreamTlsContext";
/// Downstream TLS transport socket config.
pub const DOWNSTREAM_TLS_CONTEXT: &str =
    "type.googleapis.com/envoy.extensions.transport_sockets.tls.v3.DownstreamTlsContext";
/// Upstream HTTP protocol options (cluster `typed_extension_protocol_options`).
pub const HTTP_PROTOCOL_OPTIONS: &str = "type.googleapis.com/envoy.extensions.upstreams.http.v3.HttpProtocolOptions";
/// HTTP RBAC filter config.
pub const HTTP_RBAC: &str = "type.googleapis.com/envoy.extensions.filters.http.rbac.v3.RBAC";
/// Network RBAC filter config.
pub const NETWORK_RBAC: &str = "type.googleapis.com/envoy.extensions.filters.network.rbac.v3.RBAC";
/// `original_dst` listener filter config.
pub const ORIGINAL_DST: &str = "type.googleapis.com/envoy.extensions.filters.listener.original_dst.v3.OriginalDst";
/// `tls_inspector` listener filter config.
pub const TLS_INSPECTOR: &str = "type.googleapis.com/envoy.extensions.filters.listener.tls_inspector.v3.TlsInspector";
/// `http_inspector` listener filter config.
pub const HTTP_INSPECTOR: &str =
    "type.googleapis.com/envoy.extensions.filters.listener.http_inspector.v3.HttpInspector";
/// Fault injection HTTP filter config.
pub const HTTP_FAULT: &str = "type.googleapis.com/envoy.extensions.filters.http.fault.v3.HTTPFault";
/// CORS HTTP filter config.
pub const CORS: &str = "type.googleapis.com/envoy.extensions.filters.http.cors.v3.Cors";

/// Every constant above, for tests and for checks of incoming type URLs.
pub const ALL: &[&str] = &[
    CLUSTER,
    CLUSTER_LOAD_ASSIGNMENT,
    LISTENER,
    ROUTE_CONFIGURATION,
    SECRET,
    NAME_TABLE,
    PROXY_CONFIG,
    ADDRESS,
    AUTHORIZATION,
    HTTP_CONNECTION_MANAGER,
    ROUTER,
    TCP_PROXY,
    UPSTREAM_TLS_CONTEXT,
    DOWNSTREAM_TLS_CONTEXT,
    HTTP_PROTOCOL_OPTIONS,
    HTTP_RBAC,
    NETWORK_RBAC,
    ORIGINAL_DST,
    TLS_INSPECTOR,
    HTTP_INSPECTOR,
    HTTP_FAULT,
    CORS,
];

#[cfg(test)]
mod tests {
    use prost::Name;

    use super::*;
    use crate::envoy::config;
    use crate::envoy::extensions::{filters, transport_sockets, upstreams};

    /// Each constant is what prost derives from the message it names, so a
    /// constant cannot drift from the schema.
    #[test]
    fn constants_match_generated_names() {
        let derived = [
            config::cluster::v3::Cluster::type_url(),
            config::endpoint::v3::ClusterLoadAssignment::type_url(),
            config::listener::v3::Listener::type_url(),
            config::route::v3::RouteConfiguration::type_url(),
            transport_sockets::tls::v3::Secret::type_url(),
            crate::istio::networking::nds::v1::NameTable::type_url(),
            crate::istio::mesh::v1alpha1::ProxyConfig::type_url(),
            crate::istio::workload::Address::type_url(),
            crate::istio::security::Authorization::type_url(),
            filters::network::http_connection_manager::v3::HttpConnectionManager::type_url(),
            filters::http::router::v3::Router::type_url(),
            filters::network::tcp_proxy::v3::TcpProxy::type_url(),
            transport_sockets::tls::v3::UpstreamTlsContext::type_url(),
            transport_sockets::tls::v3::DownstreamTlsContext::type_url(),
            upstreams::http::v3::HttpProtocolOptions::type_url(),
            filters::http::rbac::v3::Rbac::type_url(),
            filters::network::rbac::v3::Rbac::type_url(),
            filters::listener::original_dst::v3::OriginalDst::type_url(),
            filters::listener::tls_inspector::v3::TlsInspector::type_url(),
            filters::listener::http_inspector::v3::HttpInspector::type_url(),
            filters::http::fault::v3::HttpFault::type_url(),
            filters::http::cors::v3::Cors::type_url(),
        ];
        assert_eq!(derived.len(), ALL.len());
        for (want, got) in ALL.iter().zip(derived) {
            assert_eq!(*want, got);
            assert!(want.starts_with(PREFIX));
        }
    }
}
