//! Networks in the model (istiod's `pilot/pkg/model/network.go` and the
//! kube controller's `network.go`): each endpoint's network, and the
//! east-west gateways that reach each network from the others.
//!
//! Gateways come from the mesh networks' `address` entries and from this
//! cluster's Services: one labelled `topology.istio.io/network` (its mTLS
//! port from `networking.istio.io/gatewayPort`, else 15443; 15008 for
//! HBONE; it must expose one of them), or one a network registering this
//! cluster names as `registryServiceName`; at each of the Service's
//! external addresses (load balancer ingress, `externalIPs`). And from
//! Gateway API Gateways labelled with a network (istiod's
//! `handleGatewayResource`, under `PILOT_MULTI_NETWORK_DISCOVER_GATEWAY_API`):
//! each address times each auto-passthrough listener (mTLS) and each HBONE
//! listener; `istio-remote` ones are read from the config cluster only
//! (remote registries watch Gateways under the same switch). Hostname
//! addresses are not resolved yet (istiod resolves them under
//! `RESOLVE_HOSTNAME_GATEWAYS`, on by default): they are left out, and a
//! meshNetworks one is reported when the networks are read.

use std::collections::BTreeMap;

use istiod_config::networks::{DEFAULT_GATEWAY_HBONE_PORT, DEFAULT_GATEWAY_PORT, GATEWAY_PORT_LABEL, NETWORK_LABEL};
use istiod_config::objects::Objects;
use serde::Serialize;

use super::Service;

/// An east-west gateway (istiod's `NetworkGateway`).
#[derive(Debug, Clone, PartialEq, Eq, PartialOrd, Ord, Hash, Serialize)]
pub struct NetworkGateway {
    /// The network it leads into.
    pub network: String,
    /// The cluster it sits in (empty for a mesh networks `address`).
    pub cluster: String,
    /// Its IP address.
    pub addr: String,
    /// Its mTLS (AUTO_PASSTHROUGH) port; 0 when it has none.
    pub port: u16,
    /// Its HBONE port; 0 when it has none.
    pub hbone_port: u16,
}

/// Every gateway, and istiod's weight scale.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize)]
pub struct NetworkGateways {
    /// Sorted by address, then port (istiod's `SortGateways`), no duplicates.
    pub all: Vec<NetworkGateway>,
    /// The least common multiple of the gateway counts per network and per
    /// (network, cluster): every endpoint weight is multiplied by it, so a
    /// weight splits evenly among a network's gateways.
    pub scale: u32,
    /// The Services read as gateways (namespace, name): a change to one
    /// rebuilds (`update.rs`).
    pub services: std::collections::BTreeSet<(String, String)>,
}

impl NetworkGateways {
    /// The gateways `all`, read from `services`.
    pub fn new(mut all: Vec<NetworkGateway>, services: std::collections::BTreeSet<(String, String)>) -> Self {
        all.sort_by(|a, b| (&a.addr, a.port, a).cmp(&(&b.addr, b.port, b)));
        all.dedup();
        let mut per: BTreeMap<(&str, Option<&str>), u32> = BTreeMap::new();
        for g in &all {
            *per.entry((&g.network, None)).or_default() += 1;
            *per.entry((&g.network, Some(&g.cluster))).or_default() += 1;
        }
        let scale = per.values().fold(1u32, |l, &n| l / gcd(l, n) * n);
        NetworkGateways { all, scale, services }
    }

    /// Whether endpoints are filtered by network (istiod's
    /// `IsMultiNetworkEnabled`: some gateway is known).
    pub fn enabled(&self) -> bool {
        !self.all.is_empty()
    }

    /// istiod's `selectNetworkGateways` for a sidecar or router: the
    /// gateways of `network` in `cluster`, else of `network` anywhere;
    /// only those with an mTLS port.
    pub fn select(&self, network: &str, cluster: &str) -> Vec<&NetworkGateway> {
        let of = |c: Option<&str>| {
            self.all
                .iter()
                .filter(|g| g.network == network && c.is_none_or(|c| g.cluster == c) && g.port != 0)
                .collect::<Vec<_>>()
        };
        let here = of(Some(cluster));
        if here.is_empty() { of(None) } else { here }
    }
}

fn gcd(a: u32, b: u32) -> u32 {
    if b == 0 { a } else { gcd(b, a % b) }
}

/// The gateways `objs` and the mesh networks give (see the module).
pub fn gateways(objs: &Objects, mesh: &istiod_config::meshconfig::MeshSettings, domain: &str) -> NetworkGateways {
    let nets = &mesh.networks;
    let mut out = Vec::new();
    let mut services = std::collections::BTreeSet::new();
    for (name, n) in &nets.mesh.networks {
        for g in &n.gateways {
            if let (Some(addr), Ok(port)) = (&g.address, u16::try_from(g.port))
                && addr.parse::<std::net::IpAddr>().is_ok()
            {
                out.push(NetworkGateway {
                    network: name.clone(),
                    cluster: String::new(),
                    addr: addr.clone(),
                    port,
                    hbone_port: 0,
                });
            }
        }
    }
    let local = std::iter::once((nets.cluster_id.as_str(), objs));
    for (i, (cluster, objs)) in local.chain(objs.remotes.iter().map(|(c, o)| (c.as_str(), &**o))).enumerate() {
        of_services(objs, mesh, domain, cluster, &mut out, &mut services);
        if !nets.no_gateway_api_gateways {
            of_gateway_api(objs, cluster, i == 0, &mut out);
        }
    }
    NetworkGateways::new(out, services)
}

/// The gateways the Services of `cluster` (`objs`) stand for.
fn of_services(
    objs: &Objects,
    mesh: &istiod_config::meshconfig::MeshSettings,
    domain: &str,
    cluster: &str,
    out: &mut Vec<NetworkGateway>,
    services: &mut std::collections::BTreeSet<(String, String)>,
) {
    let nets = &mesh.networks;
    // `registryServiceName` gateways of the networks registering the cluster.
    let mut by_registry: BTreeMap<&str, Vec<(&str, u16)>> = BTreeMap::new();
    for (name, n) in &nets.mesh.networks {
        if n.endpoints.iter().any(|e| e.from_registry.as_deref() == Some(cluster)) {
            for g in &n.gateways {
                if let (Some(svc), Ok(port)) = (&g.registry_service_name, u16::try_from(g.port)) {
                    by_registry.entry(svc.as_str()).or_default().push((name.as_str(), port));
                }
            }
        }
    }
    for svc in &objs.services {
        let labelled = svc.metadata.labels.get(NETWORK_LABEL).filter(|n| !n.is_empty());
        let host = format!("{}.{}.svc.{domain}", svc.metadata.name, svc.metadata.ns());
        let named = by_registry.get(host.as_str());
        if labelled.is_none() && named.is_none() {
            continue;
        }
        services.insert((svc.metadata.ns().to_owned(), svc.metadata.name.clone()));
        let mut addrs: Vec<&str> = Vec::new();
        if svc.spec.kind.as_deref() == Some("LoadBalancer") {
            addrs.extend(
                svc.status.load_balancer.ingress.iter().filter_map(|i| i.ip.as_deref().or(i.hostname.as_deref())),
            );
        }
        addrs.extend(svc.spec.external_ips.iter().map(String::as_str));
        let addrs = addrs.into_iter().filter(|a| a.parse::<std::net::IpAddr>().is_ok());
        let exposes = |p: u16| svc.spec.ports.iter().any(|sp| sp.port == p);
        let found: Vec<(String, u16, u16)> = match (labelled, named) {
            (Some(nw), _) => {
                let port = svc.metadata.labels.get(GATEWAY_PORT_LABEL).and_then(|p| p.parse().ok());
                let port = port.unwrap_or(DEFAULT_GATEWAY_PORT);
                let (mtls, hbone) = (exposes(port), exposes(DEFAULT_GATEWAY_HBONE_PORT));
                match mtls || hbone {
                    true => vec![(
                        nw.clone(),
                        if mtls { port } else { 0 },
                        if hbone { DEFAULT_GATEWAY_HBONE_PORT } else { 0 },
                    )],
                    false => Vec::new(),
                }
            }
            (None, Some(named)) => named.iter().map(|(n, p)| ((*n).to_owned(), *p, 0)).collect(),
            (None, None) => Vec::new(),
        };
        for addr in addrs {
            for (network, port, hbone_port) in &found {
                out.push(NetworkGateway {
                    network: network.clone(),
                    cluster: cluster.to_owned(),
                    addr: addr.to_owned(),
                    port: *port,
                    hbone_port: *hbone_port,
                });
            }
        }
    }
}

/// The gateways the Gateway API Gateways of `cluster` stand for (istiod's
/// `handleGatewayResource`); `config_cluster`: `istio-remote` ones too.
fn of_gateway_api(objs: &Objects, cluster: &str, config_cluster: bool, out: &mut Vec<NetworkGateway>) {
    use istiod_config::gateway_api::GatewayApiSpec;
    for o in &objs.gateway_api {
        let GatewayApiSpec::Gateway(gw) = &o.spec else { continue };
        let Some(network) = o.meta.labels.get(NETWORK_LABEL).filter(|n| !n.is_empty()) else { continue };
        if !config_cluster && gw.gateway_class_name == "istio-remote" {
            continue;
        }
        // kube.IsAutoPassthrough: the listener mode option, else TLS on
        // the gateway port label's port (15443).
        let port_label = o.meta.labels.get(GATEWAY_PORT_LABEL).map_or("15443", String::as_str);
        let passthrough = |l: &&istiod_config::gateway_api::Listener| {
            l.tls.as_ref().is_some_and(|t| {
                t.options.get("gateway.istio.io/listener-protocol").map(String::as_str) == Some("auto-passthrough")
                    || l.port.to_string() == port_label
            })
        };
        // The API server defaults an address's type to IPAddress; a
        // hostname is not resolved (see the module).
        let addrs = gw
            .addresses
            .iter()
            .filter(|a| matches!(a.type_.as_deref(), None | Some("IPAddress" | "Hostname")))
            .filter(|a| a.value.parse::<std::net::IpAddr>().is_ok());
        for a in addrs {
            let gateway = |port: u32, hbone_port: u32| NetworkGateway {
                network: network.clone(),
                cluster: cluster.to_owned(),
                addr: a.value.clone(),
                port: u16::try_from(port).unwrap_or_default(),
                hbone_port: u16::try_from(hbone_port).unwrap_or_default(),
            };
            out.extend(gw.listeners.iter().filter(passthrough).map(|l| gateway(l.port, 0)));
            out.extend(gw.listeners.iter().filter(|l| l.protocol == "HBONE").map(|l| gateway(l.port, l.port)));
        }
    }
}

/// Whether a change of this Service may change the gateways: it is
/// labelled with a network, or a mesh network names it.
pub fn may_be_gateway(
    svc: &istiod_config::objects::Service,
    mesh: &istiod_config::meshconfig::MeshSettings,
    domain: &str,
) -> bool {
    svc.metadata.labels.contains_key(NETWORK_LABEL) || {
        let host = format!("{}.{}.svc.{domain}", svc.metadata.name, svc.metadata.ns());
        mesh.networks
            .mesh
            .networks
            .values()
            .flat_map(|n| &n.gateways)
            .any(|g| g.registry_service_name.as_deref() == Some(&host))
    }
}

/// `s` with each endpoint's network where it names none (istiod's
/// `Network(ip, labels)`), `namespaces` giving the system namespace's label,
/// and its labels augmented as istiod's.
pub fn place(
    mut s: Service,
    mesh: &istiod_config::meshconfig::MeshSettings,
    namespaces: &BTreeMap<String, BTreeMap<String, String>>,
    cluster: &str,
) -> Service {
    let nets = &mesh.networks;
    let system = namespaces.get(&nets.system_namespace).and_then(|l| l.get(NETWORK_LABEL)).map_or("", |s| s.as_str());
    for e in s.endpoints.iter_mut() {
        if e.network.is_empty() {
            e.network = nets.of_endpoint(&e.address, &e.labels, system, cluster).to_owned();
        }
        augment(e, cluster);
    }
    s
}

/// The label naming an endpoint's cluster (set on every endpoint).
pub const CLUSTER_LABEL: &str = "topology.istio.io/cluster";

/// istiod's `AugmentLabels`: an endpoint's labels gain its locality
/// (`topology.kubernetes.io/region`, `.../zone`, `topology.istio.io/subzone`),
/// its cluster (`topology.istio.io/cluster`) and, where it names none, its
/// network, so that subsets may select by them. (istiod also adds the
/// node's `kubernetes.io/hostname`; the model does not keep the node.)
fn augment(e: &mut super::Endpoint, cluster: &str) {
    let l = &e.locality;
    for (k, v) in [
        ("topology.kubernetes.io/region", &l.region),
        ("topology.kubernetes.io/zone", &l.zone),
        ("topology.istio.io/subzone", &l.subzone),
    ] {
        if !v.is_empty() {
            e.labels.insert(k.to_owned(), v.clone());
        }
    }
    if !cluster.is_empty() {
        e.labels.insert(CLUSTER_LABEL.to_owned(), cluster.to_owned());
    }
    if !e.network.is_empty() && e.labels.get(NETWORK_LABEL).is_none_or(|n| n.is_empty()) {
        e.labels.insert(NETWORK_LABEL.to_owned(), e.network.clone());
    }
}

#[cfg(test)]
mod tests {
    use std::sync::Arc;

    use istiod_config::networks::MeshNetworks;

    use crate::Model;

    fn build(yaml: &str, networks: &str) -> Model {
        let dir = tempfile::tempdir().unwrap();
        std::fs::write(dir.path().join("m.yaml"), yaml).unwrap();
        let loaded = istiod_kubewatch::config_dir::load(dir.path()).unwrap();
        assert!(loaded.errors.is_empty(), "{:?}", loaded.errors);
        let mut mesh = istiod_config::meshconfig::MeshSettings::default();
        mesh.networks.mesh = MeshNetworks::parse(networks).unwrap();
        mesh.networks.cluster_id = "east".into();
        Model::build_in(&loaded.objects, "cluster.local", Arc::new(mesh))
    }

    const GATEWAYS: &str = "\
apiVersion: v1
kind: Service
metadata: {name: ew, namespace: istio-system, labels: {topology.istio.io/network: net2, networking.istio.io/gatewayPort: '16443'}}
spec: {type: LoadBalancer, ports: [{port: 16443}, {port: 15008}]}
status: {loadBalancer: {ingress: [{ip: 203.0.113.9}, {hostname: lb.example.com}]}}
---
apiVersion: v1
kind: Service
metadata: {name: hbone-only, namespace: istio-system, labels: {topology.istio.io/network: net3}}
spec: {externalIPs: [198.51.100.7], ports: [{port: 15008}]}
---
apiVersion: v1
kind: Service
metadata: {name: no-port, namespace: istio-system, labels: {topology.istio.io/network: net4}}
spec: {externalIPs: [198.51.100.8], ports: [{port: 80}]}
---
apiVersion: v1
kind: Service
metadata: {name: named, namespace: istio-system}
spec: {type: LoadBalancer, ports: [{port: 15443}]}
status: {loadBalancer: {ingress: [{ip: 203.0.113.10}]}}
";

    /// Upstream `TestNetworkUpdateTriggers`' "add kubernetes gateway"
    /// step (kube/controller/network_test.go): a Gateway labelled `nw2`
    /// with an IP and a hostname address, and two auto-passthrough
    /// listeners (one by the listener-protocol option on 35443, one by
    /// the 15443 port number) makes 4 gateways there; the two on the
    /// hostname are left out here (hostnames are not resolved, see the
    /// module), so 2. Ours: an HBONE listener is a gateway on its port for
    /// both, a plain listener none, and `PILOT_MULTI_NETWORK_DISCOVER_GATEWAY_API=false`
    /// reads none.
    #[test]
    fn gateway_api_gateways_labelled_with_a_network_are_gateways() {
        let yaml = "\
apiVersion: gateway.networking.k8s.io/v1
kind: Gateway
metadata: {name: eastwest-gwapi, namespace: istio-system, labels: {topology.istio.io/network: nw2}}
spec:
  gatewayClassName: istio
  addresses: [{type: IPAddress, value: 1.2.3.4}, {type: Hostname, value: some hostname}]
  listeners:
  - {name: detected-by-options, port: 35443, protocol: TLS, tls: {mode: Passthrough, options: {gateway.istio.io/listener-protocol: auto-passthrough}}}
  - {name: detected-by-number, port: 15443, protocol: TLS, tls: {mode: Passthrough}}
---
apiVersion: gateway.networking.k8s.io/v1
kind: Gateway
metadata: {name: ambient-ew, namespace: istio-system, labels: {topology.istio.io/network: nw3}}
spec:
  gatewayClassName: istio-remote
  addresses: [{value: 5.6.7.8}]
  listeners:
  - {name: mesh, port: 15008, protocol: HBONE}
  - {name: http, port: 80, protocol: HTTP}
---
apiVersion: gateway.networking.k8s.io/v1
kind: Gateway
metadata: {name: unlabelled, namespace: istio-system}
spec:
  gatewayClassName: istio
  addresses: [{value: 9.9.9.9}]
  listeners: [{name: p, port: 15443, protocol: TLS, tls: {mode: Passthrough}}]
";
        let m = build(yaml, "");
        let got: Vec<(&str, &str, &str, u16, u16)> =
            m.network_gateways.all.iter().map(|g| (&*g.network, &*g.cluster, &*g.addr, g.port, g.hbone_port)).collect();
        assert_eq!(
            got,
            [
                ("nw2", "east", "1.2.3.4", 15443, 0),
                ("nw2", "east", "1.2.3.4", 35443, 0),
                ("nw3", "east", "5.6.7.8", 15008, 15008)
            ]
        );
        let dir = tempfile::tempdir().unwrap();
        std::fs::write(dir.path().join("m.yaml"), yaml).unwrap();
        let loaded = istiod_kubewatch::config_dir::load(dir.path()).unwrap();
        let mut mesh = istiod_config::meshconfig::MeshSettings::default();
        mesh.networks.no_gateway_api_gateways = true;
        let m = Model::build_in(&loaded.objects, "cluster.local", Arc::new(mesh));
        assert!(m.network_gateways.all.is_empty(), "{:?}", m.network_gateways.all);
    }

    /// istiod's gateway discovery (`extractGatewaysInner`,
    /// `getGatewayDetails`, `reloadMeshNetworks`): a labelled Service's
    /// external IPs on its `gatewayPort` and HBONE port where it exposes
    /// them (a hostname address is not resolved; a Service exposing
    /// neither is no gateway); a `registryServiceName` of a network
    /// registering this cluster; a meshNetworks `address`.
    #[test]
    fn gateways_are_found_as_istiod_finds_them() {
        let networks = "networks:\n  net1:\n    endpoints: [{fromRegistry: east}]\n    gateways: [{registryServiceName: named.istio-system.svc.cluster.local, port: 15443}]\n\
                        \x20 net9:\n    gateways: [{address: 192.0.2.1, port: 443}]\n";
        let m = build(GATEWAYS, networks);
        let got: Vec<(&str, &str, &str, u16, u16)> =
            m.network_gateways.all.iter().map(|g| (&*g.network, &*g.cluster, &*g.addr, g.port, g.hbone_port)).collect();
        assert_eq!(
            got,
            [
                ("net9", "", "192.0.2.1", 443, 0),
                ("net3", "east", "198.51.100.7", 0, 15008),
                // (Addresses compare as strings, as istiod's SortGateways.)
                ("net1", "east", "203.0.113.10", 15443, 0),
                ("net2", "east", "203.0.113.9", 16443, 15008),
            ]
        );
        // per network 1,1,1,1 and per (network, cluster) the same: 1.
        assert_eq!(m.network_gateways.scale, 1);
        // An HBONE-only gateway carries no sidecar traffic.
        assert!(m.network_gateways.select("net3", "east").is_empty());
        assert_eq!(m.network_gateways.select("net2", "west").len(), 1, "another cluster's: any of the network");
        let from: Vec<&str> = m.network_gateways.services.iter().map(|(_, n)| n.as_str()).collect();
        assert_eq!(from, ["ew", "hbone-only", "named", "no-port"]);
        // Without a network registering this cluster, `named` is nothing.
        let m = build(
            GATEWAYS,
            "networks:\n  net1:\n    gateways: [{registryServiceName: named.istio-system.svc.cluster.local, port: 15443}]\n",
        );
        assert!(m.network_gateways.all.iter().all(|g| g.network != "net1"));
    }

    /// Endpoint networks (label, system namespace, registry) and istiod's
    /// `AugmentLabels`: locality, cluster and network labels a subset may
    /// select by.
    #[test]
    fn endpoints_get_their_network_and_topology_labels() {
        let yaml = "\
apiVersion: v1
kind: Node
metadata: {name: n1, labels: {topology.kubernetes.io/region: r1, topology.kubernetes.io/zone: z1}}
---
apiVersion: v1
kind: Service
metadata: {name: a, namespace: ns}
spec: {clusterIP: 10.96.0.1, selector: {app: a}, ports: [{name: http, port: 80}]}
---
apiVersion: v1
kind: Pod
metadata: {name: a-1, namespace: ns, labels: {app: a}}
spec: {nodeName: n1}
status: {podIP: 10.0.0.1}
---
apiVersion: v1
kind: Pod
metadata: {name: a-2, namespace: ns, labels: {app: a, topology.istio.io/network: own}}
status: {podIP: 10.0.0.2}
---
apiVersion: discovery.k8s.io/v1
kind: EndpointSlice
metadata: {name: a-1, namespace: ns, labels: {kubernetes.io/service-name: a}}
addressType: IPv4
ports: [{name: http, port: 80}]
endpoints:
- {addresses: [10.0.0.1], targetRef: {kind: Pod, name: a-1, namespace: ns}}
- {addresses: [10.0.0.2], targetRef: {kind: Pod, name: a-2, namespace: ns}}
";
        let m = build(yaml, "networks:\n  reg:\n    endpoints: [{fromRegistry: east}]\n");
        let svc = &m.services["a.ns.svc.cluster.local"];
        let nets: Vec<&str> = svc.endpoints.iter().map(|e| e.network.as_str()).collect();
        assert_eq!(nets, ["reg", "own"]);
        let l = &svc.endpoints[0].labels;
        assert_eq!(l["topology.kubernetes.io/region"], "r1");
        assert_eq!(l["topology.kubernetes.io/zone"], "z1");
        assert_eq!(l["topology.istio.io/cluster"], "east");
        assert_eq!(l["topology.istio.io/network"], "reg");
        assert_eq!(svc.endpoints[1].labels["topology.istio.io/network"], "own");
        assert!(!svc.endpoints[1].labels.contains_key("topology.kubernetes.io/region"));
        // The system namespace's label comes before the registry.
        let sys = format!(
            "apiVersion: v1\nkind: Namespace\nmetadata: {{name: istio-system, labels: {{topology.istio.io/network: sysnet}}}}\n---\n{yaml}"
        );
        let m = build(&sys, "networks:\n  reg:\n    endpoints: [{fromRegistry: east}]\n");
        assert_eq!(m.services["a.ns.svc.cluster.local"].endpoints[0].network, "sysnet");
    }
}

#[cfg(test)]
mod remote_tests {
    use std::sync::Arc;

    use crate::Model;

    fn objects(yaml: &str) -> istiod_config::objects::Objects {
        let dir = tempfile::tempdir().unwrap();
        std::fs::write(dir.path().join("m.yaml"), yaml).unwrap();
        let loaded = istiod_kubewatch::config_dir::load(dir.path()).unwrap();
        assert!(loaded.errors.is_empty(), "{:?}", loaded.errors);
        loaded.objects
    }

    fn reviews(ip: &str, vip: &str) -> String {
        format!(
            "apiVersion: v1\nkind: Service\nmetadata: {{name: reviews, namespace: shop}}\n\
             spec: {{clusterIP: {vip}, ports: [{{name: http, port: 9080}}]}}\n---\n\
             apiVersion: discovery.k8s.io/v1\nkind: EndpointSlice\n\
             metadata: {{name: reviews-x, namespace: shop, labels: {{kubernetes.io/service-name: reviews}}}}\n\
             addressType: IPv4\nports: [{{name: http, port: 9080}}]\nendpoints: [{{addresses: [{ip}]}}]\n"
        )
    }

    /// istiod's aggregate registry: a host several clusters have is one
    /// service (the config cluster's ports and address) with every
    /// cluster's endpoints, each labelled with its cluster and placed in
    /// its network (a remote's system namespace label is its own); a host
    /// only a remote has is served; a remote's east-west gateway is that
    /// cluster's.
    #[test]
    fn remote_registries_merge_by_hostname() {
        let mut objs = objects(&reviews("10.1.0.1", "10.96.0.1"));
        let west = format!(
            "{}---\napiVersion: v1\nkind: Namespace\nmetadata: {{name: istio-system, labels: {{topology.istio.io/network: net-west}}}}\n---\n\
             apiVersion: v1\nkind: Service\nmetadata: {{name: only-west, namespace: shop}}\nspec: {{clusterIP: 10.97.0.2, ports: [{{port: 80}}]}}\n---\n\
             apiVersion: v1\nkind: Service\nmetadata: {{name: ew, namespace: istio-system, labels: {{topology.istio.io/network: net-west}}}}\n\
             spec: {{type: LoadBalancer, ports: [{{port: 15443}}]}}\nstatus: {{loadBalancer: {{ingress: [{{ip: 203.0.113.7}}]}}}}\n",
            reviews("10.2.0.1", "10.97.0.1")
        );
        objs.remotes = vec![("west".into(), Arc::new(objects(&west)))];
        let mut mesh = istiod_config::meshconfig::MeshSettings::default();
        mesh.networks.cluster_id = "east".into();
        let m = Model::build_in(&objs, "cluster.local", Arc::new(mesh));
        let svc = &m.services["reviews.shop.svc.cluster.local"];
        assert_eq!(svc.vips, ["10.96.0.1"], "the config cluster's address");
        let eps: Vec<(&str, &str, &str)> = svc
            .endpoints
            .iter()
            .map(|e| (e.address.as_str(), e.labels[super::CLUSTER_LABEL].as_str(), e.network.as_str()))
            .collect();
        assert_eq!(eps, [("10.1.0.1", "east", ""), ("10.2.0.1", "west", "net-west")]);
        assert!(m.services.contains_key("only-west.shop.svc.cluster.local"));
        let gws: Vec<(&str, &str)> = m.network_gateways.all.iter().map(|g| (&*g.cluster, &*g.addr)).collect();
        assert_eq!(gws, [("west", "203.0.113.7")]);
        let tracked: Vec<&str> = m.network_gateways.services.iter().map(|(_, n)| n.as_str()).collect();
        assert_eq!(tracked, ["ew"], "a remote's gateway Service is tracked too (refs name no cluster)");
    }
}
