//! `loadgen mesh`: writes a scenario's mesh as a `--configDir` directory:
//! `00-cluster.yaml` with the Nodes (zone labels), and a folder per
//! namespace with its Namespace and, where the namespace is isolated, its
//! Sidecar (`00-namespace.yaml`), and one file per service: the Service
//! (one HTTP port), its Pods (`app`, `version` v1/v2,
//! `security.istio.io/tlsMode`), EndpointSlice, a DestinationRule with
//! subsets v1 and v2 and a VirtualService splitting 90/10. One file per
//! service keeps a churn edit to one service's objects, as a Kubernetes
//! event would be. Deterministic: the same scenario writes the same bytes.

use std::fmt::Write as _;
use std::path::Path;

use crate::scenario::Scenario;

/// The port every service listens on.
pub const PORT: u16 = 8080;
/// The port its pods listen on.
pub const TARGET_PORT: u16 = 9080;

/// Namespace `n`'s name.
pub fn namespace(n: u32) -> String {
    format!("ns-{n}")
}

/// Service `i`'s namespace index and name.
pub fn service(s: &Scenario, i: u32) -> (u32, String) {
    (i % s.namespaces, format!("svc-{i}"))
}

/// The address of pod `p` (10.128.0.0/9).
pub fn pod_ip(p: u32) -> String {
    let v = (10u32 << 24) | (128 << 16) | p;
    format!("{}.{}.{}.{}", v >> 24, (v >> 16) & 0xff, (v >> 8) & 0xff, v & 0xff)
}

fn vip(i: u32) -> String {
    format!("10.96.{}.{}", (i >> 8) & 0xff, i & 0xff)
}

/// Whether namespace `n` has an isolating Sidecar.
pub fn isolated(s: &Scenario, n: u32) -> bool {
    f64::from(n) < s.isolated_fraction * f64::from(s.namespaces)
}

/// The pods of service `i`: their global indexes.
pub fn pods_of(s: &Scenario, i: u32) -> impl Iterator<Item = u32> + '_ {
    (0..s.sidecars).skip(i as usize).step_by(s.services as usize)
}

/// How a churn has changed one service from what `write` wrote.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Tweak {
    /// Pods left out of the service's EndpointSlice (scaled down).
    pub dropped_endpoints: u32,
    /// The VirtualService's weight of subset v1 (v2 gets the rest).
    pub v1_weight: u32,
}

impl Default for Tweak {
    fn default() -> Self {
        Tweak { dropped_endpoints: 0, v1_weight: 90 }
    }
}

/// The file of service `i`, relative to the mesh directory.
pub fn service_file(s: &Scenario, i: u32) -> std::path::PathBuf {
    let (n, name) = service(s, i);
    Path::new(&namespace(n)).join(format!("{name}.yaml"))
}

/// The documents of service `i` as `tweak` leaves them.
pub fn service_yaml(s: &Scenario, i: u32, tweak: Tweak) -> String {
    let mut out = String::new();
    service_docs(s, i, &namespace(service(s, i).0), tweak, &mut out);
    out
}

/// Writes the mesh into `dir` (created if needed). Returns the files written.
pub fn write(s: &Scenario, dir: &Path) -> std::io::Result<usize> {
    std::fs::create_dir_all(dir)?;
    let mut common = String::new();
    for z in 0..s.zones {
        let _ = write!(
            common,
            "apiVersion: v1\nkind: Node\nmetadata:\n  name: node-{z}\n  labels:\n    \
             topology.kubernetes.io/region: region-1\n    topology.kubernetes.io/zone: zone-{z}\n---\n"
        );
    }
    common.push_str("apiVersion: v1\nkind: Namespace\nmetadata: {name: istio-system}\n");
    std::fs::write(dir.join("00-cluster.yaml"), common)?;
    let mut files = 1;
    if s.gateways > 0 || s.gateway_routes > 0 {
        std::fs::create_dir_all(dir.join("istio-system"))?;
        std::fs::write(dir.join("01-gateway.yaml"), gateway_yaml())?;
        files += 1;
        for k in 0..s.gateway_routes {
            std::fs::write(dir.join(gateway_route_file(k)), gateway_route_yaml(s, k, Tweak::default().v1_weight))?;
            files += 1;
        }
    }
    for n in 0..s.namespaces {
        let ns = namespace(n);
        let mut out = format!("apiVersion: v1\nkind: Namespace\nmetadata: {{name: {ns}}}\n");
        if isolated(s, n) {
            let _ = write!(
                out,
                "---\napiVersion: networking.istio.io/v1\nkind: Sidecar\nmetadata: {{name: default, namespace: {ns}}}\n\
                 spec: {{egress: [{{hosts: [\"./*\", \"istio-system/*\"]}}]}}\n"
            );
        }
        std::fs::create_dir_all(dir.join(&ns))?;
        std::fs::write(dir.join(&ns).join("00-namespace.yaml"), out)?;
        files += 1;
        for i in (n..s.services).step_by(s.namespaces as usize) {
            std::fs::write(dir.join(service_file(s, i)), service_yaml(s, i, Tweak::default()))?;
            files += 1;
        }
    }
    Ok(files)
}

/// The ingress gateway: its Service (80 → 8080) and a Gateway on port 80
/// for every host; its routes are in [`gateway_route_file`]s.
pub fn gateway_yaml() -> String {
    "apiVersion: v1\nkind: Service\nmetadata: {name: istio-ingressgateway, namespace: istio-system}\n\
     spec: {clusterIP: 10.95.0.1, selector: {istio: ingressgateway}, ports: [{name: http2, port: 80, targetPort: 8080}]}\n\
     ---\napiVersion: networking.istio.io/v1\nkind: Gateway\nmetadata: {name: ingress, namespace: istio-system}\n\
     spec: {selector: {istio: ingressgateway}, servers: [{port: {number: 80, name: http, protocol: HTTP}, hosts: [\"*\"]}]}\n"
        .to_owned()
}

/// The service gateway route `k` sends to.
pub fn gateway_route_service(s: &Scenario, k: u32) -> u32 {
    k % s.services
}

/// The file of gateway route `k`, relative to the mesh directory.
pub fn gateway_route_file(k: u32) -> std::path::PathBuf {
    Path::new("istio-system").join(format!("route-{k}.yaml"))
}

/// Gateway route `k`: a VirtualService bound to the ingress Gateway for
/// host `route-<k>.example.com`, `/api` split between the subsets of its
/// service, `v1_weight` to v1.
pub fn gateway_route_yaml(s: &Scenario, k: u32, v1_weight: u32) -> String {
    let (n, name) = service(s, gateway_route_service(s, k));
    let host = format!("{name}.{}.svc.cluster.local", namespace(n));
    let (w1, w2) = (v1_weight.min(100), 100 - v1_weight.min(100));
    format!(
        "apiVersion: networking.istio.io/v1\nkind: VirtualService\nmetadata: {{name: route-{k}, namespace: istio-system}}\n\
         spec:\n  hosts: [route-{k}.example.com]\n  gateways: [ingress]\n  http:\n  - match: [{{uri: {{prefix: /api}}}}]\n    route:\n    \
         - {{destination: {{host: {host}, subset: v1}}, weight: {w1}}}\n    - {{destination: {{host: {host}, subset: v2}}, weight: {w2}}}\n"
    )
}

fn service_docs(s: &Scenario, i: u32, ns: &str, tweak: Tweak, out: &mut String) {
    let (_, name) = service(s, i);
    let vip = vip(i);
    let _ = write!(
        out,
        "---\napiVersion: v1\nkind: Service\nmetadata: {{name: {name}, namespace: {ns}}}\n\
         spec: {{clusterIP: {vip}, selector: {{app: {name}}}, ports: [{{name: http-web, port: {PORT}, targetPort: {TARGET_PORT}}}]}}\n"
    );
    let mut endpoints = String::new();
    let kept = pods_of(s, i).count().saturating_sub(tweak.dropped_endpoints as usize);
    for (k, p) in pods_of(s, i).enumerate() {
        let version = if k.is_multiple_of(2) { "v1" } else { "v2" };
        let ip = pod_ip(p);
        let pod = format!("{name}-{p}");
        let node = p % s.zones;
        let _ = write!(
            out,
            "---\napiVersion: v1\nkind: Pod\nmetadata:\n  name: {pod}\n  namespace: {ns}\n  labels: \
             {{app: {name}, version: {version}, security.istio.io/tlsMode: istio}}\n\
             spec: {{nodeName: node-{node}, serviceAccountName: {name}}}\nstatus: {{podIP: {ip}}}\n"
        );
        if k >= kept {
            continue;
        }
        let _ = write!(
            endpoints,
            "- addresses: [{ip}]\n  conditions: {{ready: true}}\n  targetRef: {{kind: Pod, name: {pod}, namespace: {ns}}}\n"
        );
    }
    if pods_of(s, i).next().is_some() {
        let _ = write!(
            out,
            "---\napiVersion: discovery.k8s.io/v1\nkind: EndpointSlice\nmetadata:\n  name: {name}-1\n  namespace: {ns}\n  \
             labels: {{kubernetes.io/service-name: {name}}}\naddressType: IPv4\n\
             ports: [{{name: http-web, port: {TARGET_PORT}}}]\nendpoints:{}",
            if endpoints.is_empty() { " []\n".to_owned() } else { format!("\n{endpoints}") }
        );
    }
    let (w1, w2) = (tweak.v1_weight.min(100), 100 - tweak.v1_weight.min(100));
    let _ = write!(
        out,
        "---\napiVersion: networking.istio.io/v1\nkind: DestinationRule\nmetadata: {{name: {name}, namespace: {ns}}}\n\
         spec: {{host: {name}, subsets: [{{name: v1, labels: {{version: v1}}}}, {{name: v2, labels: {{version: v2}}}}]}}\n\
         ---\napiVersion: networking.istio.io/v1\nkind: VirtualService\nmetadata: {{name: {name}, namespace: {ns}}}\n\
         spec:\n  hosts: [{name}]\n  http:\n  - route:\n    - {{destination: {{host: {name}, subset: v1}}, weight: {w1}}}\n    \
         - {{destination: {{host: {name}, subset: v2}}, weight: {w2}}}\n"
    );
}
