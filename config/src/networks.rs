//! Mesh networks (istio's `MeshNetworks`, `--networksConfig` or the
//! `meshNetworks` key of the mesh ConfigMap), validated as istiod's
//! `ValidateMeshNetworks`, and where an endpoint sits in them: istiod's
//! kube controller `Network(ip, labels)` (the workload's
//! `topology.istio.io/network` label, else the system namespace's, else the
//! network whose `fromRegistry` names this cluster, else the first whose
//! `fromCidr` holds the address).

use std::collections::BTreeMap;
use std::net::IpAddr;

use serde::Deserialize;

/// The label naming a workload's (or a namespace's, or an east-west
/// gateway Service's) network.
pub const NETWORK_LABEL: &str = "topology.istio.io/network";
/// The label on an east-west gateway Service naming its mTLS port
/// (istiod's `label.NetworkingGatewayPort`; 15443 without it).
pub const GATEWAY_PORT_LABEL: &str = "networking.istio.io/gatewayPort";
/// istiod's `DefaultNetworkGatewayPort`.
pub const DEFAULT_GATEWAY_PORT: u16 = 15443;
/// istiod's `DefaultNetworkGatewayHBONEPort`.
pub const DEFAULT_GATEWAY_HBONE_PORT: u16 = 15008;

/// `MeshNetworks`.
#[derive(Debug, Clone, Default, PartialEq, Eq, Deserialize)]
#[serde(default)]
pub struct MeshNetworks {
    /// Networks by name.
    pub networks: BTreeMap<String, Network>,
}

/// `Network`.
#[derive(Debug, Clone, Default, PartialEq, Eq, Deserialize)]
#[serde(default)]
pub struct Network {
    /// Which endpoints belong to it.
    pub endpoints: Vec<NetworkEndpoints>,
    /// How other networks reach it.
    pub gateways: Vec<Gateway>,
}

/// `Network.NetworkEndpoints`: one of the two.
#[derive(Debug, Clone, Default, PartialEq, Eq, Deserialize)]
#[serde(default, rename_all = "camelCase")]
pub struct NetworkEndpoints {
    /// Endpoints whose address is in this CIDR.
    pub from_cidr: Option<String>,
    /// Every endpoint of this cluster (registry) ID.
    pub from_registry: Option<String>,
}

/// `Network.IstioNetworkGateway`: an address, or the Service whose
/// external addresses are the gateway's.
#[derive(Debug, Clone, Default, PartialEq, Eq, Deserialize)]
#[serde(default, rename_all = "camelCase")]
pub struct Gateway {
    /// A Service's hostname in the registry the network's `fromRegistry`
    /// names.
    pub registry_service_name: Option<String>,
    /// An IP address.
    pub address: Option<String>,
    /// The gateway's mTLS port.
    pub port: u32,
    /// Its locality (not read: istiod does not either).
    pub locality: Option<String>,
}

impl MeshNetworks {
    /// Parses and validates; empty text means no networks.
    pub fn parse(yaml: &str) -> Result<MeshNetworks, String> {
        if yaml.trim().is_empty() {
            return Ok(MeshNetworks::default());
        }
        let n: MeshNetworks = serde_yaml_ng::from_str(yaml).map_err(|e| e.to_string())?;
        n.validate()?;
        Ok(n)
    }

    /// istiod's `ValidateMeshNetworks`, its messages prefixed by the
    /// network.
    pub fn validate(&self) -> Result<(), String> {
        let mut errs = Vec::new();
        for (name, nw) in &self.networks {
            let mut e = Vec::new();
            for ep in &nw.endpoints {
                if let Some(c) = &ep.from_cidr
                    && parse_cidr(c).is_none()
                {
                    e.push(format!("{c:?} is not a valid CIDR block"));
                }
                if let Some(r) = &ep.from_registry
                    && !dns1123_label(r)
                {
                    e.push(format!("invalid registry name: {r}"));
                }
            }
            for gw in &nw.gateways {
                if let Some(s) = &gw.registry_service_name
                    && !fqdn(s)
                {
                    e.push(format!("{s:?} is not a valid domain name"));
                }
                // A hostname is allowed (istiod's `RESOLVE_HOSTNAME_GATEWAYS`,
                // on by default), if it is a domain name.
                if let Some(a) = &gw.address
                    && a.parse::<IpAddr>().is_err()
                    && !fqdn(a)
                {
                    e.push(format!("{a} is not a valid IP address or DNS name"));
                }
                if gw.port == 0 || gw.port > 65535 {
                    e.push(format!("port number {} must be in the range 1..65535", gw.port));
                }
            }
            errs.extend(e.into_iter().map(|e| format!("invalid network {name}: {e}")));
        }
        match errs.is_empty() {
            true => Ok(()),
            false => Err(errs.join("; ")),
        }
    }

    /// The network whose `fromRegistry` names `cluster` (the first by name,
    /// as istiod warns and keeps the first it meets).
    pub fn of_registry(&self, cluster: &str) -> Option<&str> {
        self.networks
            .iter()
            .find(|(_, n)| n.endpoints.iter().any(|e| e.from_registry.as_deref() == Some(cluster)))
            .map(|(k, _)| k.as_str())
    }

    /// The network whose `fromCidr` holds `ip` (the narrowest, as
    /// istiod's ranger lists the containing networks).
    pub fn of_address(&self, ip: &str) -> Option<&str> {
        let ip: IpAddr = ip.parse().ok()?;
        let mut best: Option<(u8, &str)> = None;
        for (name, n) in &self.networks {
            for c in n.endpoints.iter().filter_map(|e| e.from_cidr.as_deref()) {
                if let Some((net, len)) = parse_cidr(c)
                    && contains(net, len, ip)
                    && best.is_none_or(|(l, _)| len > l)
                {
                    best = Some((len, name));
                }
            }
        }
        best.map(|(_, n)| n)
    }
}

/// Where this cluster's endpoints sit among the networks.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Networks {
    /// The mesh networks.
    pub mesh: MeshNetworks,
    /// This cluster's ID (`CLUSTER_ID`, `Kubernetes` by default).
    pub cluster_id: String,
    /// istiod's namespace: its `topology.istio.io/network` label is the
    /// network of this cluster's workloads that name none.
    pub system_namespace: String,
    /// `--clusterAliases`: a proxy whose `CLUSTER_ID` is an alias is of the
    /// cluster it names.
    pub cluster_aliases: BTreeMap<String, String>,
    /// `PILOT_MULTI_NETWORK_DISCOVER_GATEWAY_API=false`: Gateway API
    /// Gateways are not read as east-west gateways (on by default).
    pub no_gateway_api_gateways: bool,
}

impl Networks {
    /// istiod's `Network(endpointIP, labels)` for an endpoint of `cluster`
    /// (this one's ID or a remote's): its `topology.istio.io/network`
    /// label, else `system_namespace`'s (the label on that cluster's system
    /// namespace), else the network registering the cluster, else the one
    /// whose CIDR holds the address; empty when none says.
    pub fn of_endpoint<'a>(
        &'a self,
        ip: &str,
        labels: &'a BTreeMap<String, String>,
        system_namespace: &'a str,
        cluster: &str,
    ) -> &'a str {
        if let Some(n) = labels.get(NETWORK_LABEL).filter(|n| !n.is_empty()) {
            return n;
        }
        if !system_namespace.is_empty() {
            return system_namespace;
        }
        self.mesh.of_registry(cluster).or_else(|| self.mesh.of_address(ip)).unwrap_or("")
    }
}

/// istiod's `ClusterLocalHosts` (`pilot/pkg/model/cluster_local.go`): the
/// hosts whose endpoints a proxy sees only from its own cluster. By
/// default every host of `kube-system`, `kubernetes.default.svc`, and
/// istiod's own discovery host; `meshConfig.serviceSettings` entries with
/// `clusterLocal` add hosts, and with `clusterLocal: false` take defaults
/// away. The most specific match decides.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct ClusterLocal {
    specific: BTreeMap<String, bool>,
    wildcard: BTreeMap<String, bool>,
}

impl ClusterLocal {
    /// The hosts `mesh` (the mesh configuration as written) makes
    /// cluster-local under `domain`.
    pub fn new(mesh: &serde_json::Value, domain: &str) -> ClusterLocal {
        let discovery = mesh["defaultConfig"]["discoveryAddress"].as_str().unwrap_or("istiod.istio-system.svc:15012");
        let discovery = discovery.rsplit_once(':').map_or(discovery, |(h, _)| h);
        let discovery = match discovery.ends_with(domain) {
            true => discovery.to_owned(),
            false => format!("{discovery}.{domain}"),
        };
        let mut defaults: Vec<Option<String>> = vec![
            Some(format!("*.kube-system.svc.{domain}")),
            Some(format!("kubernetes.default.svc.{domain}")),
            Some(discovery),
        ];
        let mut out = ClusterLocal::default();
        for s in mesh["serviceSettings"].as_array().into_iter().flatten() {
            let local = s["settings"]["clusterLocal"].as_bool().unwrap_or(false);
            let hosts: Vec<&str> = s["hosts"].as_array().into_iter().flatten().filter_map(|h| h.as_str()).collect();
            if !local {
                for d in &mut defaults {
                    let gone = d
                        .as_deref()
                        .is_some_and(|d| hosts.iter().any(|h| *h == d || (d.starts_with('*') && h.ends_with(&d[1..]))));
                    if gone {
                        *d = None;
                    }
                }
            }
            for h in hosts {
                let map = if h.starts_with('*') { &mut out.wildcard } else { &mut out.specific };
                map.insert(h.to_owned(), local);
            }
        }
        for d in defaults.into_iter().flatten() {
            let map = if d.starts_with('*') { &mut out.wildcard } else { &mut out.specific };
            map.insert(d, true);
        }
        out
    }

    /// Whether `host` is cluster-local (istiod's `MostSpecificHostMatch`).
    pub fn is_local(&self, host: &str) -> bool {
        if let Some(v) = self.specific.get(host) {
            return *v;
        }
        self.wildcard
            .iter()
            .filter(|(w, _)| *w == "*" || host.ends_with(&w[1..]))
            .max_by_key(|(w, _)| w.len())
            .is_some_and(|(_, v)| *v)
    }
}

fn parse_cidr(s: &str) -> Option<(IpAddr, u8)> {
    let (a, l) = s.split_once('/')?;
    let ip: IpAddr = a.parse().ok()?;
    let len: u8 = l.parse().ok()?;
    let max = if ip.is_ipv4() { 32 } else { 128 };
    (len <= max).then_some((ip, len))
}

fn contains(net: IpAddr, len: u8, ip: IpAddr) -> bool {
    match (net, ip) {
        (IpAddr::V4(n), IpAddr::V4(i)) => {
            let mask = if len == 0 { 0 } else { u32::MAX << (32 - u32::from(len)) };
            u32::from(n) & mask == u32::from(i) & mask
        }
        (IpAddr::V6(n), IpAddr::V6(i)) => {
            let mask = if len == 0 { 0 } else { u128::MAX << (128 - u32::from(len)) };
            u128::from(n) & mask == u128::from(i) & mask
        }
        _ => false,
    }
}

fn dns1123_label(s: &str) -> bool {
    !s.is_empty()
        && s.len() <= 63
        && s.bytes().all(|b| b.is_ascii_alphanumeric() || b == b'-')
        && !s.starts_with('-')
        && !s.ends_with('-')
}

fn fqdn(s: &str) -> bool {
    let s = s.strip_suffix('.').unwrap_or(s);
    !s.is_empty() && s.len() <= 255 && s.split('.').all(dns1123_label)
}

#[cfg(test)]
mod tests {
    use super::*;

    /// After istiod's `TestValidateMeshNetworks`
    /// (pkg/config/validation/agent/validation_test.go).
    #[test]
    fn networks_are_validated_as_istiod_validates_them() {
        let good = "networks:\n  n1:\n    endpoints: [{fromRegistry: Kubernetes}]\n    gateways: [{address: 1.1.1.1, port: 15443}]\n\
                    \x20 n2:\n    endpoints: [{fromCidr: 192.168.0.0/16}, {fromRegistry: cluster-2}]\n    gateways: [{registryServiceName: istio-ingressgateway.istio-system.svc.cluster.local, port: 15443}]\n";
        // A hostname gateway is accepted, as istiod (RESOLVE_HOSTNAME_GATEWAYS
        // on) accepts it.
        assert!(MeshNetworks::parse("networks: {n: {gateways: [{address: gw.example.com, port: 80}]}}").is_ok());
        let n = MeshNetworks::parse(good).unwrap();
        assert_eq!(n.of_registry("Kubernetes"), Some("n1"));
        let e = MeshNetworks::parse(&good.replace("fromRegistry: Kubernetes", "fromRegistry: my_cluster")).unwrap_err();
        assert_eq!(e, "invalid network n1: invalid registry name: my_cluster");
        assert_eq!(n.of_registry("cluster-2"), Some("n2"));
        assert_eq!(n.of_address("192.168.3.4"), Some("n2"));
        assert_eq!(n.of_address("10.0.0.1"), None);
        for (bad, want) in [
            ("networks: {n: {endpoints: [{fromCidr: 192.168.0.0/33}]}}", "invalid network n: \"192.168.0.0/33\""),
            (
                "networks: {n: {gateways: [{address: 'gw..example.com', port: 80}]}}",
                "is not a valid IP address or DNS name",
            ),
            ("networks: {n: {gateways: [{address: 1.1.1.1, port: 0}]}}", "port number 0"),
            ("networks: {n: {gateways: [{registryServiceName: 'a..b', port: 80}]}}", "not a valid domain"),
            ("networks: [1]", "invalid type"),
        ] {
            let e = MeshNetworks::parse(bad).unwrap_err();
            assert!(e.contains(want), "{bad}: {e}");
        }
    }

    /// After istiod's `TestIsClusterLocal` (pilot/pkg/model/cluster_local_test.go).
    #[test]
    fn cluster_local_hosts_as_istiod_decides_them() {
        let local = |mesh: serde_json::Value, host: &str| ClusterLocal::new(&mesh, "cluster.local").is_local(host);
        let none = serde_json::json!({});
        assert!(local(none.clone(), "kubernetes.default.svc.cluster.local"));
        assert!(local(none.clone(), "svc.kube-system.svc.cluster.local"));
        assert!(local(none.clone(), "istiod.istio-system.svc.cluster.local"), "the discovery host");
        assert!(!local(none.clone(), "svc.ns.svc.cluster.local"));
        let settings = |local: bool, hosts: &[&str]| serde_json::json!({"serviceSettings": [{"settings": {"clusterLocal": local}, "hosts": hosts}]});
        assert!(local(settings(true, &["*.ns.svc.cluster.local"]), "svc.ns.svc.cluster.local"));
        assert!(local(settings(true, &["svc.ns.svc.cluster.local"]), "svc.ns.svc.cluster.local"));
        assert!(!local(settings(true, &["svc.ns.svc.cluster.local"]), "other.ns.svc.cluster.local"));
        assert!(!local(settings(false, &["*.kube-system.svc.cluster.local"]), "svc.kube-system.svc.cluster.local"));
        assert!(!local(
            settings(false, &["kubernetes.default.svc.cluster.local"]),
            "kubernetes.default.svc.cluster.local"
        ));
        let mixed = serde_json::json!({"serviceSettings": [
            {"settings": {"clusterLocal": true}, "hosts": ["*.ns.svc.cluster.local"]},
            {"settings": {"clusterLocal": false}, "hosts": ["global.ns.svc.cluster.local"]},
        ]});
        assert!(local(mixed.clone(), "svc.ns.svc.cluster.local"));
        assert!(!local(mixed, "global.ns.svc.cluster.local"), "the most specific wins");
        assert!(local(
            serde_json::json!({"defaultConfig": {"discoveryAddress": "istiod-rev.istio-system.svc:15012"}}),
            "istiod-rev.istio-system.svc.cluster.local"
        ));
    }

    /// istiod's `Network()` order: label, system namespace, registry, CIDR.
    #[test]
    fn an_endpoints_network_follows_istiods_order() {
        let mesh = MeshNetworks::parse(
            "networks:\n  by-cidr: {endpoints: [{fromCidr: 10.0.0.0/8}, {fromCidr: 10.1.0.0/16}]}\n  narrow: {endpoints: [{fromCidr: 10.1.2.0/24}]}\n",
        )
        .unwrap();
        let n = Networks { mesh: mesh.clone(), cluster_id: "c1".into(), ..Default::default() };
        let none = BTreeMap::new();
        let labelled = BTreeMap::from([(NETWORK_LABEL.to_owned(), "own".to_owned())]);
        assert_eq!(n.of_endpoint("10.1.2.3", &labelled, "sys", "c1"), "own");
        assert_eq!(n.of_endpoint("10.1.2.3", &none, "sys", "c1"), "sys");
        assert_eq!(n.of_endpoint("10.1.2.3", &none, "", "c1"), "narrow", "the narrowest CIDR");
        assert_eq!(n.of_endpoint("10.9.0.1", &none, "", "c1"), "by-cidr");
        assert_eq!(n.of_endpoint("11.0.0.1", &none, "", "c1"), "");
        let mut mesh = mesh;
        mesh.networks.insert(
            "reg".into(),
            Network {
                endpoints: vec![NetworkEndpoints { from_registry: Some("c1".into()), ..Default::default() }],
                ..Default::default()
            },
        );
        let n = Networks { mesh, cluster_id: "c1".into(), ..Default::default() };
        assert_eq!(n.of_endpoint("10.1.2.3", &none, "", "c1"), "reg", "the registry before CIDRs");
    }
}
