//! Networks in the model (istiod's `pilot/pkg/model/network.go` and the
//! kube controller's `network.go`): each endpoint's network, and the
//! east-west gateways that reach each network from the others.
//!
//! Gateways come from the mesh networks' `address` entries and from this
//! cluster's Services: one labelled `topology.istio.io/network` (its mTLS
//! port from `networking.istio.io/gatewayPort`, else 15443; 15008 for
//! HBONE; it must expose one of them), or one a network registering this
//! cluster names as `registryServiceName`; at each of the Service's
//! external addresses (load balancer ingress, `externalIPs`). Hostname
//! addresses are not resolved (istiod's `RESOLVE_HOSTNAME_GATEWAYS` is off
//! by default) and are left out.

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
pub fn gateways(objs: &Objects, mesh: &crate::meshconfig::MeshSettings, domain: &str) -> NetworkGateways {
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
    // `registryServiceName` gateways of the networks registering this cluster.
    let mut by_registry: BTreeMap<&str, Vec<(&str, u16)>> = BTreeMap::new();
    for (name, n) in &nets.mesh.networks {
        if n.endpoints.iter().any(|e| e.from_registry.as_deref() == Some(nets.cluster_id.as_str())) {
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
                    cluster: nets.cluster_id.clone(),
                    addr: addr.to_owned(),
                    port: *port,
                    hbone_port: *hbone_port,
                });
            }
        }
    }
    NetworkGateways::new(out, services)
}

/// Whether a change of this Service may change the gateways: it is
/// labelled with a network, or a mesh network names it.
pub fn may_be_gateway(
    svc: &istiod_config::objects::Service,
    mesh: &crate::meshconfig::MeshSettings,
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
/// `Network(ip, labels)`), `namespaces` giving the system namespace's label.
pub(crate) fn place(
    mut s: Service,
    mesh: &crate::meshconfig::MeshSettings,
    namespaces: &BTreeMap<String, BTreeMap<String, String>>,
) -> Service {
    let nets = &mesh.networks;
    let system = namespaces.get(&nets.system_namespace).and_then(|l| l.get(NETWORK_LABEL)).map_or("", |s| s.as_str());
    for e in s.endpoints.iter_mut().filter(|e| e.network.is_empty()) {
        e.network = nets.of_endpoint(&e.address, &e.labels, system).to_owned();
    }
    s
}
