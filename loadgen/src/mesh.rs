//! `loadgen mesh`: writes a scenario's mesh as a `--configDir` directory:
//! Namespaces, Nodes with zone labels, and per namespace its Services (one
//! HTTP port), Pods (`app`, `version` v1/v2, `security.istio.io/tlsMode`),
//! EndpointSlices, a DestinationRule with subsets v1 and v2 and a
//! VirtualService splitting 90/10 per service, and a Sidecar where the
//! namespace is isolated. Deterministic: the same scenario writes the same
//! bytes.

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
        for i in (n..s.services).step_by(s.namespaces as usize) {
            service_docs(s, i, &ns, &mut out);
        }
        std::fs::write(dir.join(format!("{ns}.yaml")), out)?;
        files += 1;
    }
    Ok(files)
}

fn service_docs(s: &Scenario, i: u32, ns: &str, out: &mut String) {
    let (_, name) = service(s, i);
    let vip = vip(i);
    let _ = write!(
        out,
        "---\napiVersion: v1\nkind: Service\nmetadata: {{name: {name}, namespace: {ns}}}\n\
         spec: {{clusterIP: {vip}, selector: {{app: {name}}}, ports: [{{name: http-web, port: {PORT}, targetPort: {TARGET_PORT}}}]}}\n"
    );
    let mut endpoints = String::new();
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
        let _ = write!(
            endpoints,
            "- addresses: [{ip}]\n  conditions: {{ready: true}}\n  targetRef: {{kind: Pod, name: {pod}, namespace: {ns}}}\n"
        );
    }
    if !endpoints.is_empty() {
        let _ = write!(
            out,
            "---\napiVersion: discovery.k8s.io/v1\nkind: EndpointSlice\nmetadata:\n  name: {name}-1\n  namespace: {ns}\n  \
             labels: {{kubernetes.io/service-name: {name}}}\naddressType: IPv4\n\
             ports: [{{name: http-web, port: {TARGET_PORT}}}]\nendpoints:\n{endpoints}"
        );
    }
    let _ = write!(
        out,
        "---\napiVersion: networking.istio.io/v1\nkind: DestinationRule\nmetadata: {{name: {name}, namespace: {ns}}}\n\
         spec: {{host: {name}, subsets: [{{name: v1, labels: {{version: v1}}}}, {{name: v2, labels: {{version: v2}}}}]}}\n\
         ---\napiVersion: networking.istio.io/v1\nkind: VirtualService\nmetadata: {{name: {name}, namespace: {ns}}}\n\
         spec:\n  hosts: [{name}]\n  http:\n  - route:\n    - {{destination: {{host: {name}, subset: v1}}, weight: 90}}\n    \
         - {{destination: {{host: {name}, subset: v2}}, weight: 10}}\n"
    );
}
