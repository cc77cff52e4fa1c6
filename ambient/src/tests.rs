//! The index's incremental behaviour: what a change rebuilds and pushes.

use istiod_config::manifest::{ObjectRef, parse_file};
use istiod_config::objects::Objects;
use istiod_proto::istio::workload::{TunnelProtocol, Workload, WorkloadStatus, address};
use istiod_proto::prost::Message;

use super::*;

fn objects(yaml: &str) -> Objects {
    let mut o = Objects::default();
    for obj in parse_file(yaml).docs.into_iter().filter_map(Result::unwrap) {
        o.push(obj);
    }
    o
}

fn pod(name: &str, ip: &str, node: &str, app: &str) -> String {
    format!(
        "apiVersion: v1\nkind: Pod\nmetadata: {{name: {name}, namespace: default, labels: {{app: {app}}}, annotations: {{ambient.istio.io/redirection: enabled}}}}\nspec: {{serviceAccountName: {app}, nodeName: {node}, containers: [{{name: c, ports: [{{name: http, containerPort: 8080}}]}}]}}\nstatus: {{phase: Running, podIP: {ip}, conditions: [{{type: Ready, status: 'True'}}]}}\n---\n"
    )
}

const SERVICE: &str = "apiVersion: v1\nkind: Service\nmetadata: {name: web, namespace: default}\nspec: {clusterIP: 10.96.0.10, selector: {app: web}, ports: [{name: http, port: 80, targetPort: http}]}\n---\n";

fn mesh(n: usize) -> String {
    let mut y = String::from(SERVICE);
    for i in 0..n {
        y += &pod(
            &format!("web-{i}"),
            &format!("10.0.0.{}", i + 1),
            if i % 2 == 0 { "node-a" } else { "node-b" },
            "web",
        );
    }
    y
}

fn workload(changes: &[Change], uid: &str) -> Option<Workload> {
    let (_, _, bytes) = changes.iter().find(|(k, n, _)| *k == Kind::Address && &**n == uid)?;
    match Address::decode(bytes.clone()?).ok()?.r#type? {
        address::Type::Workload(w) => Some(w),
        _ => None,
    }
}

fn pod_ref(name: &str) -> ObjectRef {
    ObjectRef { kind: "Pod".into(), namespace: "default".into(), name: name.into(), service: None }
}

#[test]
fn a_pod_is_a_workload_with_its_service_ports_resolved() {
    let mut index = Index::new();
    let changes = index.apply(&objects(&mesh(2)), None, &Settings::default());
    let w = workload(&changes, "Kubernetes//Pod/default/web-0").expect("workload web-0");
    assert_eq!(w.addresses, vec![vec![10, 0, 0, 1]]);
    assert_eq!(w.tunnel_protocol, TunnelProtocol::Hbone as i32);
    assert_eq!((w.node.as_str(), w.service_account.as_str()), ("node-a", "web"));
    assert_eq!(w.status, WorkloadStatus::Healthy as i32);
    let ports = &w.services["default/web.default.svc.cluster.local"].ports;
    assert_eq!((ports[0].service_port, ports[0].target_port), (80, 8080), "named targetPort resolved");
    assert!(changes.iter().any(|(k, n, _)| *k == Kind::Address && &**n == "default/web.default.svc.cluster.local"));
    assert_eq!(changes.len(), 3, "two workloads and a service: {changes:?}");
}

#[test]
fn a_pod_change_rebuilds_that_workload_only() {
    let mut index = Index::new();
    let before = objects(&mesh(50));
    index.apply(&before, None, &Settings::default());
    // web-7 loses readiness.
    let mut after = before.clone();
    let p = after.pods.iter_mut().find(|p| p.metadata.name == "web-7").unwrap();
    p.status.conditions[0].status = "False".into();
    let (changes, rebuilt) = index.apply_counted(&after, Some(&[pod_ref("web-7")]), &Settings::default());
    assert_eq!(rebuilt, Rebuilt { workloads: 1, services: 0, policies: false });
    assert_eq!(changes.len(), 1);
    assert_eq!(workload(&changes, "Kubernetes//Pod/default/web-7").unwrap().status, WorkloadStatus::Unhealthy as i32);
    // The same objects again change nothing.
    let (changes, _) = index.apply_counted(&after, Some(&[pod_ref("web-7")]), &Settings::default());
    assert!(changes.is_empty(), "{changes:?}");
    // Deleted: removed.
    after.pods.retain(|p| p.metadata.name != "web-7");
    let changes = index.apply(&after, Some(&[pod_ref("web-7")]), &Settings::default());
    assert_eq!(changes, vec![(Kind::Address, Arc::from("Kubernetes//Pod/default/web-7"), None)]);
}

#[test]
fn a_service_change_rebuilds_the_pods_it_selects() {
    let mut index = Index::new();
    let mut o = objects(&(mesh(4) + &pod("other", "10.0.1.1", "node-a", "other")));
    index.apply(&o, None, &Settings::default());
    o.services[0].spec.ports[0].port = 81;
    let svc = ObjectRef { kind: "Service".into(), namespace: "default".into(), name: "web".into(), service: None };
    let (changes, rebuilt) = index.apply_counted(&o, Some(&[svc]), &Settings::default());
    assert_eq!(rebuilt.workloads, 4, "the four pods web selects, not `other`");
    assert_eq!(changes.len(), 5, "the service and its four workloads: {changes:?}");
}

#[test]
fn workloads_and_policies_follow_authorization_policies() {
    let y = mesh(1)
        + "apiVersion: security.istio.io/v1\nkind: AuthorizationPolicy\nmetadata: {name: allow-web, namespace: default}\nspec: {selector: {matchLabels: {app: web}}, action: ALLOW, rules: [{from: [{source: {principals: ['cluster.local/ns/default/sa/*']}}], to: [{operation: {ports: ['8080']}}]}]}\n---\n"
        + "apiVersion: security.istio.io/v1\nkind: AuthorizationPolicy\nmetadata: {name: ns-deny, namespace: default}\nspec: {action: DENY, rules: [{from: [{source: {notNamespaces: [default]}}]}]}\n---\n"
        + "apiVersion: security.istio.io/v1\nkind: AuthorizationPolicy\nmetadata: {name: http-only, namespace: default}\nspec: {action: ALLOW, rules: [{to: [{operation: {methods: [GET]}}]}]}\n---\n"
        + "apiVersion: security.istio.io/v1\nkind: PeerAuthentication\nmetadata: {name: default, namespace: istio-system}\nspec: {mtls: {mode: STRICT}}\n";
    let mut index = Index::new();
    let changes = index.apply(&objects(&y), None, &Settings::default());
    let w = workload(&changes, "Kubernetes//Pod/default/web-0").unwrap();
    assert_eq!(w.authorization_policies, vec!["default/allow-web", "istio-system/istio_converted_static_strict"]);
    let policies: BTreeMap<&str, Authorization> = changes
        .iter()
        .filter(|(k, _, _)| *k == Kind::Authorization)
        .map(|(_, n, b)| (&**n, Authorization::decode(b.clone().unwrap()).unwrap()))
        .collect();
    assert_eq!(
        policies.keys().copied().collect::<Vec<_>>(),
        ["default/allow-web", "default/http-only", "default/ns-deny", "istio-system/istio_converted_static_strict"]
    );
    let allow = &policies["default/allow-web"];
    assert_eq!(allow.scope, istiod_proto::istio::security::Scope::WorkloadSelector as i32);
    assert_eq!(allow.groups[0].rules[0].matches[0].destination_ports, vec![8080]);
    let p = &allow.groups[0].rules[1].matches[0].principals[0];
    assert_eq!(
        p.match_type,
        Some(istiod_proto::istio::security::string_match::MatchType::Prefix("cluster.local/ns/default/sa/".into()))
    );
    assert_eq!(policies["default/ns-deny"].scope, istiod_proto::istio::security::Scope::Namespace as i32);
    assert!(policies["default/http-only"].groups.is_empty(), "an ALLOW rule on HTTP attributes never matches");
}

/// Upstream `TestRBACConvert` (pilot/pkg/serviceregistry/ambient/
/// ambientindex_test.go) over its testdata, copied as it is into
/// `testdata/rbac`: each `*-in.yaml` policy converted as istiod converts it,
/// compared with the golden next to it (an empty golden: no policy), in
/// protojson as `/debug/ambientz` writes it (the goldens' form). For
/// PeerAuthentications, the root, namespace and workload policies are
/// picked from the file as the upstream test picks them. An input without
/// a namespace is `""` upstream and `default` here: its golden has no
/// namespace, so ours is left out where the input named none.
#[test]
fn upstream_rbac_convert() {
    let dir = std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("testdata/rbac");
    let mut names: Vec<_> =
        std::fs::read_dir(&dir).unwrap().map(|e| e.unwrap().file_name().into_string().unwrap()).collect();
    names.sort();
    let mut checked = 0;
    for name in names.iter().filter(|n| n.ends_with("-in.yaml")) {
        let input = std::fs::read_to_string(dir.join(name)).unwrap();
        let golden = std::fs::read_to_string(dir.join(name.replace("-in", ""))).unwrap();
        let o = objects(&input);
        let pols: Vec<&IstioObject> = o.istio.iter().collect();
        assert!(!pols.is_empty(), "{name}: no policy read");
        let root = "istio-system";
        let got = match &pols[0].spec {
            IstioSpec::AuthorizationPolicy(p) => authz::convert_policy(root, pols[0], p).ok().flatten(),
            IstioSpec::PeerAuthentication(_) => {
                let (mut root_cfg, mut ns_cfg, mut workload_cfg) = (None, None, None);
                let older = |a: &IstioObject, b: Option<&IstioObject>| {
                    b.is_none_or(|b| a.meta.creation_timestamp < b.meta.creation_timestamp)
                };
                if pols.len() > 1 {
                    for p in &pols {
                        let IstioSpec::PeerAuthentication(pa) = &p.spec else { continue };
                        if p.meta.namespace.as_deref() == Some(root) {
                            if older(p, root_cfg) {
                                root_cfg = Some(*p);
                            }
                        } else if pa.selector.is_some() {
                            workload_cfg = Some(*p);
                        } else if older(p, ns_cfg) {
                            ns_cfg = Some(*p);
                        }
                    }
                } else {
                    workload_cfg = Some(pols[0]);
                }
                if workload_cfg.is_none() {
                    (workload_cfg, ns_cfg) = (ns_cfg, None);
                }
                let w = workload_cfg.unwrap();
                let IstioSpec::PeerAuthentication(pa) = &w.spec else { unreachable!() };
                // convertPeerAuthentication's own guard (the collection's).
                if w.meta.ns() == root
                    || pa.selector.is_none()
                    || pa.port_level_mtls.as_ref().is_none_or(|m| m.is_empty())
                {
                    None
                } else {
                    authz::convert_peer_authn(w, pa, ns_cfg, root_cfg)
                }
            }
            other => panic!("{name}: unexpected kind {:?}", other.kind()),
        };
        let mut got = got.and_then(|a| prune(authz::describe(&a))).unwrap_or(serde_json::Value::Null);
        if pols[0].meta.namespace.is_none()
            && let Some(m) = got.as_object_mut()
        {
            m.remove("namespace");
        }
        let want: serde_json::Value = match golden.trim() {
            "" => serde_json::Value::Null,
            text => serde_yaml_ng::from_str(text).unwrap(),
        };
        assert_eq!(got, want, "{name}");
        checked += 1;
    }
    assert_eq!(checked, 22, "every upstream case");
}

/// The fuzz target's property on the tests' own meshes: incremental
/// equals whole.
#[test]
fn incremental_applies_equal_a_full_build() {
    fuzz_one(&mesh(12));
    fuzz_one(
        &(mesh(3)
            + "apiVersion: security.istio.io/v1\nkind: PeerAuthentication\nmetadata: {name: p, namespace: default}\nspec: {selector: {matchLabels: {app: web}}, mtls: {mode: STRICT}, portLevelMtls: {8080: {mode: PERMISSIVE}}}\n"),
    );
    fuzz_one(
        &(mesh(2)
            + "apiVersion: networking.istio.io/v1\nkind: WorkloadEntry\nmetadata: {name: vm, namespace: default, labels: {app: web}}\nspec: {address: vm.example.com, ports: {http: 9080}}\n"),
    );
    fuzz_one(&(mesh(4) + SERVICE_ENTRIES));
    fuzz_one(&(String::from(SERVICE_ENTRIES) + &mesh(4)));
    fuzz_one("not: [yaml");
}

/// ServiceEntries that select the mesh's pods, list endpoints, share a
/// hostname with a Kubernetes Service and with each other.
const SERVICE_ENTRIES: &str = "\
apiVersion: networking.istio.io/v1\nkind: ServiceEntry\nmetadata: {name: web-se, namespace: default, creationTimestamp: '2024-01-01T00:00:00Z'}\nspec: {hosts: [web.example.com], addresses: [240.0.0.1], ports: [{number: 80, name: http}], workloadSelector: {labels: {app: web}}, resolution: STATIC}\n---\n\
apiVersion: networking.istio.io/v1\nkind: ServiceEntry\nmetadata: {name: ext, namespace: default, creationTimestamp: '2024-01-02T00:00:00Z'}\nspec: {hosts: [ext.example.com, web.example.com], ports: [{number: 443, name: tls, protocol: TLS}], endpoints: [{address: 1.1.1.1}, {address: 2.2.2.2, ports: {tls: 8443}}], resolution: STATIC}\n---\n\
apiVersion: networking.istio.io/v1\nkind: ServiceEntry\nmetadata: {name: camp, namespace: other, creationTimestamp: '2020-01-01T00:00:00Z'}\nspec: {hosts: [web.default.svc.cluster.local], ports: [{number: 80, name: http}], resolution: DNS}\n---\n";

fn service_entry_ref(ns: &str, name: &str) -> ObjectRef {
    ObjectRef { kind: "ServiceEntry".into(), namespace: ns.into(), name: name.into(), service: None }
}

fn service(changes: &[Change], name: &str) -> Option<istiod_proto::istio::workload::Service> {
    let (_, _, bytes) = changes.iter().find(|(k, n, _)| *k == Kind::Address && &**n == name)?;
    match Address::decode(bytes.clone()?).ok()?.r#type? {
        address::Type::Service(s) => Some(s),
        _ => None,
    }
}

/// Upstream `TestSelectWorkloadServices`, "kube Service is canonical over
/// an older camping PUBLIC ServiceEntry": each namespace keeps its own
/// service of the hostname, and the Kubernetes Service is the canonical
/// one, in either order of reading.
#[test]
fn a_kubernetes_service_is_canonical_over_an_older_service_entry() {
    for y in [mesh(1) + SERVICE_ENTRIES, String::from(SERVICE_ENTRIES) + &mesh(1)] {
        let changes = Index::new().apply(&objects(&y), None, &Settings::default());
        let kube = service(&changes, "default/web.default.svc.cluster.local").unwrap();
        let camp = service(&changes, "other/web.default.svc.cluster.local").unwrap();
        assert_eq!((kube.name.as_str(), kube.canonical), ("web", true));
        assert_eq!((camp.name.as_str(), camp.canonical), ("camp", false));
        // Two ServiceEntries of one namespace share web.example.com: the
        // older (web-se) has it, and is canonical.
        let shared = service(&changes, "default/web.example.com").unwrap();
        assert_eq!((shared.name.as_str(), shared.canonical), ("web-se", true));
        // The pod lists its Service and the ServiceEntry that selects it,
        // whose port name maps to the pod's port.
        let w = workload(&changes, "Kubernetes//Pod/default/web-0").unwrap();
        assert_eq!(
            w.services.keys().map(String::as_str).collect::<Vec<_>>(),
            ["default/web.default.svc.cluster.local", "default/web.example.com"]
        );
        assert_eq!(w.services["default/web.example.com"].ports[0].target_port, 8080);
        // ext's endpoints list the hostname it won only.
        let ep = workload(&changes, "Kubernetes/networking.istio.io/ServiceEntry/default/ext/2.2.2.2").unwrap();
        assert_eq!(ep.services.keys().map(String::as_str).collect::<Vec<_>>(), ["default/ext.example.com"]);
        assert_eq!(ep.services["default/ext.example.com"].ports[0].target_port, 8443);
        // camp (DNS, no endpoints) has one workload per host it won.
        assert!(
            workload(&changes, "Kubernetes/networking.istio.io/ServiceEntry/other/camp/web.default.svc.cluster.local")
                .is_some()
        );
    }
}

/// A ServiceEntry change rebuilds its hostnames, its endpoints and the
/// workloads its services select; losing a hostname takes the service
/// away from the loser's endpoints, and deleting the winner gives it back.
#[test]
fn service_entry_changes_are_incremental() {
    let settings = Settings::default();
    let mut o = objects(&(mesh(4) + SERVICE_ENTRIES));
    let mut index = Index::new();
    index.apply(&o, None, &settings);
    // An endpoint of ext moves: its two workloads, nothing else.
    let ext = o.istio.iter_mut().find(|x| x.meta.name == "ext").unwrap();
    let IstioSpec::ServiceEntry(se) = &mut ext.spec else { unreachable!() };
    se.endpoints[0].address = "1.1.1.2".into();
    let (changes, rebuilt) = index.apply_counted(&o, Some(&[service_entry_ref("default", "ext")]), &settings);
    let names: BTreeSet<&str> = changes.iter().map(|c| &*c.1).collect();
    assert_eq!(
        names,
        BTreeSet::from([
            "Kubernetes/networking.istio.io/ServiceEntry/default/ext/1.1.1.1",
            "Kubernetes/networking.istio.io/ServiceEntry/default/ext/1.1.1.2",
        ]),
        "{changes:?}"
    );
    assert_eq!(rebuilt.workloads, 1, "ext's endpoints only");
    // web-se's port changes: its service and the four pods it selects.
    let web_se = o.istio.iter_mut().find(|x| x.meta.name == "web-se").unwrap();
    let IstioSpec::ServiceEntry(se) = &mut web_se.spec else { unreachable!() };
    se.ports[0].number = 81;
    let (changes, rebuilt) = index.apply_counted(&o, Some(&[service_entry_ref("default", "web-se")]), &settings);
    assert_eq!(rebuilt.workloads, 4 + 1, "the selected pods, and web-se's own (no) endpoints");
    assert_eq!(changes.len(), 5, "the service and four workloads: {changes:?}");
    // web-se goes: ext wins web.example.com, and its endpoints list it.
    o.istio.retain(|x| x.meta.name != "web-se");
    let changes = index.apply(&o, Some(&[service_entry_ref("default", "web-se")]), &settings);
    assert_eq!(service(&changes, "default/web.example.com").unwrap().name, "ext");
    let ep = workload(&changes, "Kubernetes/networking.istio.io/ServiceEntry/default/ext/2.2.2.2").unwrap();
    assert_eq!(ep.services.len(), 2, "ext.example.com and web.example.com");
    assert!(workload(&changes, "Kubernetes//Pod/default/web-0").unwrap().services.len() == 1);
    // And all of it as a full build has it.
    let mut full = Index::new();
    full.apply(&o, None, &settings);
    let (mut a, mut b) = (full.all(), index.all());
    a.sort();
    b.sort();
    assert!(a == b, "incremental equals whole");
}

/// The inputs the `ambient_index` fuzz target keeps (seeds and fixed
/// crashes, fuzz/regressions/ambient_index/), replayed on every test run.
#[test]
fn fuzz_regressions_replay() {
    let dir = concat!(env!("CARGO_MANIFEST_DIR"), "/../fuzz/regressions/ambient_index");
    let mut n = 0;
    for e in std::fs::read_dir(dir).unwrap() {
        let bytes = std::fs::read(e.unwrap().path()).unwrap();
        if let Ok(text) = std::str::from_utf8(&bytes) {
            fuzz_one(text);
        }
        n += 1;
    }
    assert!(n > 0, "the seed at least");
}

/// Under `discoverySelectors` a namespace that leaves the selection takes
/// its objects with it and only the Namespace is named: they go; the
/// system namespace's network label is every workload's network.
#[test]
fn a_namespace_change_reads_its_objects_again() {
    let ns = |labels: &str| {
        format!("apiVersion: v1\nkind: Namespace\nmetadata: {{name: default, labels: {{{labels}}}}}\n---\n")
    };
    let sys = "apiVersion: v1\nkind: Namespace\nmetadata: {name: istio-system, labels: {topology.istio.io/network: net-1}}\n---\n";
    let mut index = Index::new();
    let all = objects(&(ns("in: 'yes'") + sys + &mesh(2)));
    let changes = index.apply(&all, None, &Settings::default());
    assert_eq!(workload(&changes, "Kubernetes//Pod/default/web-0").unwrap().network, "net-1");
    let default_ref =
        [ObjectRef { kind: "Namespace".into(), namespace: String::new(), name: "default".into(), service: None }];
    let gone = objects(&(ns("in: 'no'") + sys));
    let changes = index.apply(&gone, Some(&default_ref), &Settings::default());
    let removed: Vec<&str> = changes.iter().filter(|c| c.2.is_none()).map(|c| &*c.1).collect();
    assert_eq!(removed.len(), 3, "two workloads and the service: {changes:?}");
    let back = index.apply(&all, Some(&default_ref), &Settings::default());
    assert_eq!(back.iter().filter(|c| c.2.is_some()).count(), 3, "{back:?}");
}

/// `selector: {}` scopes a policy to WORKLOAD_SELECTOR yet attaches it to
/// no workload, as istiod does.
#[test]
fn an_empty_selector_attaches_to_nothing() {
    let y = mesh(1)
        + "apiVersion: security.istio.io/v1\nkind: AuthorizationPolicy\nmetadata: {name: empty, namespace: default}\nspec: {selector: {}, action: DENY, rules: [{}]}\n";
    let changes = Index::new().apply(&objects(&y), None, &Settings::default());
    assert!(workload(&changes, "Kubernetes//Pod/default/web-0").unwrap().authorization_policies.is_empty());
}

/// Upstream `TestPodWorkloads` (pilot/pkg/serviceregistry/ambient/
/// workloads_test.go), the cases `testdata/pod_workloads.yaml` can express
/// (the file names the others): the pod's Workload, as istiod builds it.
#[test]
fn upstream_pod_workloads() {
    let n = workload_cases("pod_workloads.yaml", |o| {
        let pod = o.pods.last()?;
        Some(format!("cluster0//Pod/{}/{}", pod.metadata.ns(), pod.metadata.name))
    });
    assert_eq!(n, 14, "every case the file has");
}

/// Upstream `TestWorkloadEntryWorkloads` (same file), the cases
/// `testdata/workload_entry_workloads.yaml` can express.
#[test]
fn upstream_workload_entry_workloads() {
    let n = workload_cases("workload_entry_workloads.yaml", |o| {
        let we = o.istio.iter().rev().find(|x| matches!(x.spec, IstioSpec::WorkloadEntry(_)))?;
        Some(workload::workload_entry_uid("cluster0", we.meta.ns(), &we.meta.name))
    });
    assert_eq!(n, 8, "every case the file has");
}

/// Runs the cases of `file` (testdata): each case's objects into an index,
/// the subject's Workload (`uid_of`) against the case's `want`. Returns
/// how many ran.
fn workload_cases(file: &str, uid_of: impl Fn(&Objects) -> Option<String>) -> usize {
    use serde_json::Value;
    let cases = cases(file);
    let settings = upstream_settings();
    for case in &cases {
        let name = case["name"].as_str().unwrap();
        let o = objects(case["objects"].as_str().unwrap());
        let uid = uid_of(&o).unwrap_or_else(|| panic!("{name}: no subject"));
        let changes = Index::new().apply(&o, None, &settings);
        let got = workload(&changes, &uid).map_or(Value::Null, |w| render(&w));
        assert_eq!(got, case["want"], "{name}");
    }
    cases.len()
}

/// The settings upstream's ambient tests build with.
fn upstream_settings() -> Settings {
    Settings {
        cluster_id: "cluster0".into(),
        domain: "domain.suffix".into(),
        network: "testnetwork".into(),
        ..Settings::default()
    }
}

/// The cases of testdata file `file`.
fn cases(file: &str) -> Vec<serde_json::Value> {
    let text = std::fs::read_to_string(format!("{}/testdata/{file}", env!("CARGO_MANIFEST_DIR"))).unwrap();
    serde_yaml_ng::from_str(&text).unwrap()
}

/// A workload in the form the testdata writes: fields as the proto names
/// them, addresses as text, empty fields left out.
fn render(w: &Workload) -> serde_json::Value {
    use serde_json::{Map, Value, json};
    let mut m = Map::new();
    let mut put = |k: &str, v: Value| {
        let empty = v.is_null() || v == json!("") || v == json!([]) || v == json!({});
        if !empty {
            m.insert(k.into(), v);
        }
    };
    put("uid", w.uid.clone().into());
    put("name", w.name.clone().into());
    put("namespace", w.namespace.clone().into());
    put("node", w.node.clone().into());
    put("addresses", w.addresses.iter().map(|a| Value::from(ip_text(a))).collect());
    put("network", w.network.clone().into());
    put("canonicalName", w.canonical_name.clone().into());
    put("canonicalRevision", w.canonical_revision.clone().into());
    if w.workload_type != 0 {
        put(
            "workloadType",
            istiod_proto::istio::workload::WorkloadType::try_from(w.workload_type).unwrap().as_str_name().into(),
        );
    }
    put("workloadName", w.workload_name.clone().into());
    put("status", WorkloadStatus::try_from(w.status).unwrap().as_str_name().into());
    if w.network_mode != 0 {
        put("networkMode", "HOST_NETWORK".into());
    }
    if w.tunnel_protocol != 0 {
        put("tunnelProtocol", TunnelProtocol::try_from(w.tunnel_protocol).unwrap().as_str_name().into());
    }
    if w.native_tunnel {
        put("nativeTunnel", true.into());
    }
    put("hostname", w.hostname.clone().into());
    if let Some(c) = w.capacity {
        put("capacity", c.into());
    }
    put("clusterId", w.cluster_id.clone().into());
    put("trustDomain", w.trust_domain.clone().into());
    put("serviceAccount", w.service_account.clone().into());
    if let Some(l) = &w.locality {
        let mut lm = Map::new();
        for (k, v) in [("region", &l.region), ("zone", &l.zone), ("subzone", &l.subzone)] {
            if !v.is_empty() {
                lm.insert(k.into(), v.clone().into());
            }
        }
        put("locality", Value::Object(lm));
    }
    let services: Map<String, Value> = w
        .services
        .iter()
        .map(|(k, v)| {
            let ports: Vec<Value> =
                v.ports.iter().map(|p| json!({"servicePort": p.service_port, "targetPort": p.target_port})).collect();
            (k.clone(), ports.into())
        })
        .collect();
    put("services", Value::Object(services));
    put("authorizationPolicies", w.authorization_policies.iter().map(|p| Value::from(p.clone())).collect());
    if let Some(g) = &w.waypoint {
        put("waypoint", waypoint::describe(g));
    }
    if let Some(t) = &w.application_tunnel {
        let protocol = istiod_proto::istio::workload::application_tunnel::Protocol::try_from(t.protocol).unwrap();
        put("applicationTunnel", json!({"protocol": protocol.as_str_name(), "port": t.port}));
    }
    Value::Object(m)
}

/// Upstream `TestServiceEntryWorkloads` (workloads_test.go), the cases
/// `testdata/service_entry_workloads.yaml` can express: the workloads of
/// the file's ServiceEntries, by uid.
#[test]
fn upstream_service_entry_workloads() {
    assert_eq!(workload_lists("service_entry_workloads.yaml", "/networking.istio.io/ServiceEntry/"), 2);
}

/// Upstream `TestEndpointSliceWorkloads` (workloads_test.go), as
/// `testdata/endpoint_slice_workloads.yaml`: the workloads of the file's
/// EndpointSlice, by uid.
#[test]
fn upstream_endpoint_slice_workloads() {
    assert_eq!(workload_lists("endpoint_slice_workloads.yaml", "/discovery.k8s.io/EndpointSlice/"), 2);
}

/// Runs the cases of `file`: each case's objects into an index, its
/// workloads whose uid has `part`, by uid, against the case's `want`.
/// Returns how many ran.
fn workload_lists(file: &str, part: &str) -> usize {
    let mut n = 0;
    for case in cases(file) {
        let name = case["name"].as_str().unwrap();
        let o = objects(case["objects"].as_str().unwrap());
        let mut index = Index::new();
        index.apply(&o, None, &upstream_settings());
        let mut got: Vec<(String, serde_json::Value)> = index
            .workloads()
            .filter_map(|(_, a)| match &a.r#type {
                Some(address::Type::Workload(w)) if w.uid.contains(part) => Some((w.uid.clone(), render(w))),
                _ => None,
            })
            .collect();
        got.sort_by(|a, b| a.0.cmp(&b.0));
        let got: Vec<serde_json::Value> = got.into_iter().map(|(_, v)| v).collect();
        assert_eq!(serde_json::Value::from(got), case["want"], "{name}");
        n += 1;
    }
    n
}

/// Upstream `TestServiceServices` and `TestServiceEntryServices`
/// (services_test.go), the cases `testdata/services.yaml` can express: the
/// services of the file's last Service or ServiceEntry, as istiod's builders
/// make them.
#[test]
fn upstream_services() {
    use serde_json::{Value, json};
    let settings = upstream_settings();
    let addresses = |s: &istiod_proto::istio::workload::Service| -> Vec<Value> {
        s.addresses
            .iter()
            .map(|a| json!({"network": a.network, "address": ip_text(&a.address), "length": a.length}))
            .collect()
    };
    let render = |s: &istiod_proto::istio::workload::Service| {
        let mut v = service::describe(s);
        v["addresses"] = addresses(s).into();
        // Ports as protojson writes them, but with a target port of 0
        // kept, as the data writes it where upstream names it.
        let ports: Vec<Value> = s
            .ports
            .iter()
            .map(|p| {
                let mut m = json!({"servicePort": p.service_port, "targetPort": p.target_port});
                if p.app_protocol != 0 {
                    m["appProtocol"] = istiod_proto::istio::workload::AppProtocol::try_from(p.app_protocol)
                        .unwrap()
                        .as_str_name()
                        .into();
                }
                m
            })
            .collect();
        v["ports"] = ports.into();
        prune(v).unwrap()
    };
    let mut n = 0;
    for case in cases("services.yaml") {
        let name = case["name"].as_str().unwrap();
        let o = objects(case["objects"].as_str().unwrap());
        let mut index = Index::new();
        // The inputs (Namespaces) read as the index reads them.
        index.apply(&o, None, &settings);
        let inputs = index.inputs();
        let se = o.istio.iter().rev().find(|x| matches!(x.spec, IstioSpec::ServiceEntry(_)));
        let got: Vec<Value> = match (se, o.services.last()) {
            (Some(x), _) => {
                let IstioSpec::ServiceEntry(spec) = &x.spec else { unreachable!() };
                service_entry::infos(x, spec, inputs, &settings).iter().map(|i| render(&i.service)).collect()
            }
            (None, Some(s)) => service::info(s, inputs, &settings).iter().map(|i| render(&i.service)).collect(),
            (None, None) => panic!("{name}: no subject"),
        };
        assert_eq!(Value::from(got), case["want"], "{name}");
        n += 1;
    }
    assert_eq!(n, 26, "every case the file has");
}

/// A selectorless Service and its hand-written EndpointSlice: one
/// endpoint names a pod, one is an address of its own.
fn selectorless(pod_ready: bool, name_pod: bool) -> String {
    let target = if name_pod { ", targetRef: {kind: Pod, name: web-0, namespace: default}" } else { "" };
    format!(
        "apiVersion: v1\nkind: Service\nmetadata: {{name: ext, namespace: default}}\nspec: {{clusterIP: 10.96.0.20, ports: [{{name: http, port: 80, targetPort: 8080}}]}}\n---\n\
         apiVersion: discovery.k8s.io/v1\nkind: EndpointSlice\nmetadata: {{name: ext-1, namespace: default, labels: {{kubernetes.io/service-name: ext}}}}\naddressType: IPv4\n\
         endpoints: [{{addresses: [10.0.0.1], conditions: {{ready: {pod_ready}}}{target}}}, {{addresses: [192.168.1.1]}}]\nports: [{{name: http, port: 9090}}]\n---\n"
    )
}

/// An EndpointSlice change rebuilds the pods it starts or stops naming
/// (not those it names still) and its own workloads; the Service's change
/// rebuilds both.
#[test]
fn endpoint_slices_are_incremental() {
    let settings = Settings::default();
    let slice_ref =
        [ObjectRef { kind: "EndpointSlice".into(), namespace: "default".into(), name: "ext-1".into(), service: None }];
    let mut index = Index::new();
    let changes = index.apply(&objects(&(mesh(2) + &selectorless(true, false))), None, &settings);
    assert_eq!(workload(&changes, "Kubernetes//Pod/default/web-0").unwrap().services.len(), 1);
    let own = workload(&changes, "Kubernetes/discovery.k8s.io/EndpointSlice/default/ext-1/192.168.1.1").unwrap();
    assert_eq!(own.services["default/ext.default.svc.cluster.local"].ports[0].target_port, 9090);
    // The slice now names web-0: web-0 lists ext, with ext's own target port.
    let (changes, rebuilt) =
        index.apply_counted(&objects(&(mesh(2) + &selectorless(true, true))), Some(&slice_ref), &settings);
    let w = workload(&changes, "Kubernetes//Pod/default/web-0").unwrap();
    assert_eq!(w.services["default/ext.default.svc.cluster.local"].ports[0].target_port, 8080);
    assert!(workload(&changes, "Kubernetes/discovery.k8s.io/EndpointSlice/default/ext-1/10.0.0.1").is_none());
    assert_eq!(changes.len(), 2, "web-0 and the endpoint that is web-0 now: {changes:?}");
    assert_eq!(rebuilt.workloads, 2, "web-0 and the slice");
    // Readiness alone: the slice's workloads, not the pod it still names.
    let (changes, rebuilt) =
        index.apply_counted(&objects(&(mesh(2) + &selectorless(false, true))), Some(&slice_ref), &settings);
    assert_eq!(rebuilt.workloads, 1, "{changes:?}");
    assert!(changes.is_empty(), "the unready endpoint is the pod's, which is a workload already: {changes:?}");
    fuzz_one(&(mesh(3) + &selectorless(true, true)));
    fuzz_one(&(selectorless(false, true) + &mesh(3)));
}

/// A waypoint Gateway in `default`, for services, with an address once
/// `address` is given.
fn waypoint_gateway(address: Option<&str>, class_for: Option<&str>) -> String {
    let status =
        address.map(|a| format!("status: {{addresses: [{{type: Hostname, value: {a}}}]}}\n")).unwrap_or_default();
    let class = class_for
        .map(|t| format!("apiVersion: gateway.networking.k8s.io/v1\nkind: GatewayClass\nmetadata: {{name: istio-waypoint, labels: {{istio.io/waypoint-for: {t}}}}}\nspec: {{controllerName: istio.io/mesh-controller}}\n---\n"))
        .unwrap_or_default();
    format!(
        "{class}apiVersion: gateway.networking.k8s.io/v1\nkind: Gateway\nmetadata: {{name: waypoint, namespace: default}}\n\
         spec: {{gatewayClassName: istio-waypoint, listeners: [{{name: mesh, port: 15008, protocol: HBONE}}]}}\n{status}---\n"
    )
}

/// A namespace that uses a waypoint: its Service carries the waypoint's
/// address once the Gateway has one; the Gateway's class can make it a
/// waypoint for workloads too; `none` on the Service opts out; removing
/// the namespace label takes it away. Each step pushes what it changed.
#[test]
fn waypoints_attach_and_move_with_their_inputs() {
    let settings = Settings::default();
    let ns = |label: &str| {
        format!("apiVersion: v1\nkind: Namespace\nmetadata: {{name: default, labels: {{{label}}}}}\n---\n")
    };
    let svc = "default/web.default.svc.cluster.local";
    let gw_ref = [ObjectRef {
        kind: "Gateway.gateway.networking.k8s.io".into(),
        namespace: "default".into(),
        name: "waypoint".into(),
        service: None,
    }];
    let ns_ref =
        [ObjectRef { kind: "Namespace".into(), namespace: String::new(), name: "default".into(), service: None }];
    let uses = ns("istio.io/use-waypoint: waypoint");
    let mut index = Index::new();
    // No address yet: no waypoint.
    let changes = index.apply(&objects(&(uses.clone() + &waypoint_gateway(None, None) + &mesh(2))), None, &settings);
    assert_eq!(service(&changes, svc).unwrap().waypoint, None);
    // The address appears: the Service has it; the pods do not (a
    // waypoint for services).
    let y = uses.clone() + &waypoint_gateway(Some("waypoint.default.svc.cluster.local"), None) + &mesh(2);
    let changes = index.apply(&objects(&y), Some(&gw_ref), &settings);
    let w = service(&changes, svc).unwrap().waypoint.expect("the waypoint");
    assert_eq!(w.hbone_mtls_port, 15008);
    assert!(changes.iter().all(|c| &*c.1 == svc), "only the Service changed: {changes:?}");
    // The class makes it a waypoint for all traffic: the pods have it too.
    let y = uses.clone() + &waypoint_gateway(Some("waypoint.default.svc.cluster.local"), Some("all")) + &mesh(2);
    let class_ref = [ObjectRef {
        kind: "GatewayClass.gateway.networking.k8s.io".into(),
        namespace: String::new(),
        name: "istio-waypoint".into(),
        service: None,
    }];
    let changes = index.apply(&objects(&y), Some(&class_ref), &settings);
    assert!(workload(&changes, "Kubernetes//Pod/default/web-0").unwrap().waypoint.is_some());
    // The namespace stops using it: everything loses it.
    let y2 = ns("other: x") + &waypoint_gateway(Some("waypoint.default.svc.cluster.local"), Some("all")) + &mesh(2);
    let changes = index.apply(&objects(&y2), Some(&ns_ref), &settings);
    assert_eq!(service(&changes, svc).unwrap().waypoint, None);
    assert_eq!(workload(&changes, "Kubernetes//Pod/default/web-1").unwrap().waypoint, None);
    // As a full build has it, both ways.
    for y in [y, y2] {
        fuzz_one(&y);
    }
}

/// A named target port found on a native sidecar (an init container with
/// `restartPolicy: Always`), as istiod's `FindPortName` looks; a plain
/// init container's ports do not count.
#[test]
fn named_ports_of_native_sidecars_resolve() {
    let y = "apiVersion: v1\nkind: Service\nmetadata: {name: web, namespace: default}\nspec: {clusterIP: 10.96.0.10, selector: {app: web}, ports: [{port: 80, targetPort: side}, {port: 81, targetPort: init}]}\n---\n\
             apiVersion: v1\nkind: Pod\nmetadata: {name: web-0, namespace: default, labels: {app: web}}\n\
             spec: {initContainers: [{name: s, restartPolicy: Always, ports: [{name: side, containerPort: 7070}]}, {name: i, ports: [{name: init, containerPort: 6060}]}]}\n\
             status: {phase: Running, podIP: 10.0.0.1}\n";
    let changes = Index::new().apply(&objects(y), None, &Settings::default());
    let w = workload(&changes, "Kubernetes//Pod/default/web-0").unwrap();
    let ports: Vec<(u32, u32)> = w.services["default/web.default.svc.cluster.local"]
        .ports
        .iter()
        .map(|p| (p.service_port, p.target_port))
        .collect();
    assert_eq!(ports, vec![(80, 7070)], "the plain init container's port is not one");
}

/// A Service whose VIP does not parse has no ambient Service, and no
/// workload lists it (istiod's builder makes none).
#[test]
fn a_service_with_a_bad_vip_is_in_no_workload() {
    let y = SERVICE.replace("10.96.0.10", "not-an-ip") + &pod("web-0", "10.0.0.1", "node-a", "web");
    let changes = Index::new().apply(&objects(&y), None, &Settings::default());
    assert!(workload(&changes, "Kubernetes//Pod/default/web-0").unwrap().services.is_empty());
    assert_eq!(changes.len(), 1, "the workload alone: {changes:?}");
}

/// Review finds: a slice that moves to another Service with the same pods
/// re-marks them; a pod recreated under its name (a new uid) is listed
/// again once its slice names the new uid; two ServiceEntry endpoints
/// with one address push what a full build holds.
#[test]
fn slices_that_move_and_pods_recreated_and_shared_endpoint_addresses() {
    let settings = Settings::default();
    let svc = |name: &str| {
        format!(
            "apiVersion: v1\nkind: Service\nmetadata: {{name: {name}, namespace: default}}\nspec: {{clusterIP: 10.96.1.{}, ports: [{{name: http, port: 80}}]}}\n---\n",
            name.len()
        )
    };
    let slice = |service: &str, uid: &str| {
        format!(
            "apiVersion: discovery.k8s.io/v1\nkind: EndpointSlice\nmetadata: {{name: s1, namespace: default, labels: {{kubernetes.io/service-name: {service}}}}}\n\
             addressType: IPv4\nendpoints: [{{addresses: [10.0.0.1], targetRef: {{kind: Pod, name: web-0, namespace: default, uid: {uid}}}}}]\n---\n"
        )
    };
    let pod = |uid: &str| {
        format!(
            "apiVersion: v1\nkind: Pod\nmetadata: {{name: web-0, namespace: default, uid: {uid}}}\nstatus: {{phase: Running, podIP: 10.0.0.1}}\n---\n"
        )
    };
    let slice_ref =
        [ObjectRef { kind: "EndpointSlice".into(), namespace: "default".into(), name: "s1".into(), service: None }];
    let base = svc("a") + &svc("bb");
    let mut index = Index::new();
    index.apply(&objects(&(base.clone() + &slice("a", "u1") + &pod("u1"))), None, &settings);
    let services = |index: &Index| {
        let w = index.workloads().find(|(n, _)| &***n == "Kubernetes//Pod/default/web-0").map(|(_, a)| a.clone());
        match w.and_then(|a| a.r#type) {
            Some(address::Type::Workload(w)) => w.services.into_keys().collect::<Vec<_>>(),
            _ => panic!("web-0"),
        }
    };
    assert_eq!(services(&index), ["default/a.default.svc.cluster.local"]);
    // The slice moves to Service bb, naming the same pod.
    index.apply(&objects(&(base.clone() + &slice("bb", "u1") + &pod("u1"))), Some(&slice_ref), &settings);
    assert_eq!(services(&index), ["default/bb.default.svc.cluster.local"]);
    // The pod is recreated (uid u2): until the slice names u2, no service.
    index.apply(&objects(&(base.clone() + &slice("bb", "u1") + &pod("u2"))), Some(&[pod_ref("web-0")]), &settings);
    assert!(services(&index).is_empty());
    index.apply(&objects(&(base.clone() + &slice("bb", "u2") + &pod("u2"))), Some(&slice_ref), &settings);
    assert_eq!(services(&index), ["default/bb.default.svc.cluster.local"]);
    // Two endpoints at one address, then a policy change in the namespace
    // rebuilds them: what is pushed is what a full build holds.
    let se = "apiVersion: networking.istio.io/v1\nkind: ServiceEntry\nmetadata: {name: dup, namespace: default}\n\
              spec: {hosts: [dup.example.com], ports: [{number: 80, name: http}], resolution: STATIC, endpoints: [{address: 1.1.1.1, weight: 1}, {address: 1.1.1.1, weight: 2}]}\n---\n";
    let policy = "apiVersion: security.istio.io/v1\nkind: AuthorizationPolicy\nmetadata: {name: p, namespace: default}\nspec: {action: DENY, rules: [{}]}\n";
    fuzz_one(&(String::from(se) + policy));
}

/// A waypoint whose status holds no usable address is a waypoint still
/// (istiod makes one whenever the status has an address): its instances
/// get its binding; what uses it is sent no address.
#[test]
fn a_waypoint_without_a_usable_address_still_binds_its_instances() {
    let y = "apiVersion: gateway.networking.k8s.io/v1\nkind: Gateway\n\
             metadata: {name: wp, namespace: default, annotations: {ambient.istio.io/waypoint-inbound-binding: PROXY/15088}}\n\
             spec: {gatewayClassName: istio-waypoint, listeners: [{name: mesh, port: 15008, protocol: HBONE}]}\n\
             status: {addresses: [{type: NamedAddress, value: somewhere}]}\n---\n\
             apiVersion: v1\nkind: Pod\nmetadata: {name: wp-0, namespace: default, labels: {gateway.networking.k8s.io/gateway-name: wp}}\n\
             status: {phase: Running, podIP: 10.0.0.9}\n";
    let changes = Index::new().apply(&objects(y), None, &Settings::default());
    let w = workload(&changes, "Kubernetes//Pod/default/wp-0").unwrap();
    assert_eq!(w.application_tunnel.map(|t| t.port), Some(15088));
}

/// The `istio.io/WaypointBound` condition istiod writes on a service:
/// bound, with its waypoint; refused, with the reason in istiod's words;
/// removed where the service uses none.
#[test]
fn services_say_whether_their_waypoint_bound() {
    let y = |svc_label: &str| {
        format!(
            "apiVersion: v1\nkind: Namespace\nmetadata: {{name: default, labels: {{istio.io/use-waypoint: waypoint}}}}\n---\n{}\
             apiVersion: v1\nkind: Service\nmetadata: {{name: other, namespace: default, labels: {{{svc_label}}}}}\nspec: {{clusterIP: 10.96.0.11, ports: [{{port: 80}}]}}\n---\n{}",
            waypoint_gateway(Some("waypoint.default.svc.cluster.local"), None),
            mesh(1)
        )
    };
    let mut index = Index::new();
    index.apply(&objects(&y("istio.io/use-waypoint: missing")), None, &Settings::default());
    let statuses = index.statuses();
    let condition = |path: &str| {
        statuses.iter().find(|s| s.path == path).map(|s| s.status["conditions"][0].clone()).unwrap_or_default()
    };
    let web = condition("/api/v1/namespaces/default/services/web");
    assert_eq!((&web["status"], &web["reason"]), (&serde_json::json!("True"), &serde_json::json!("WaypointAccepted")));
    assert_eq!(web["message"], "Successfully attached to waypoint default/waypoint");
    let other = condition("/api/v1/namespaces/default/services/other");
    assert_eq!(
        (&other["status"], &other["reason"]),
        (&serde_json::json!("False"), &serde_json::json!("WaypointIsNotReady"))
    );
    assert_eq!(other["message"], "waypoint \"default/missing\" is not ready");
    // Opted out: ours is removed.
    let svc_ref =
        [ObjectRef { kind: "Service".into(), namespace: "default".into(), name: "other".into(), service: None }];
    index.apply(&objects(&y("istio.io/use-waypoint: none")), Some(&svc_ref), &Settings::default());
    let statuses = index.statuses();
    let other = statuses.iter().find(|s| s.path == "/api/v1/namespaces/default/services/other").unwrap();
    assert_eq!(other.status["conditions"][0]["remove"], true);
}

/// Upstream `TestWorkloadEntryConditions` (workloads_test.go), its six
/// cases: a WorkloadEntry's `istio.io/WaypointBound` condition (`None`:
/// none to write, ours removed). Waypoints are written as Gateways (see
/// testdata/pod_workloads.yaml).
#[test]
fn upstream_workload_entry_conditions() {
    let gw = |name: &str, ns: &str, traffic: &str, allowed: &str| {
        format!(
            "apiVersion: gateway.networking.k8s.io/v1\nkind: Gateway\nmetadata: {{name: {name}, namespace: {ns}, labels: {{istio.io/waypoint-for: {traffic}}}}}\n\
             spec: {{gatewayClassName: istio-waypoint, listeners: [{{name: mesh, port: 15008, protocol: HBONE, allowedRoutes: {{namespaces: {allowed}}}}}]}}\n\
             status: {{addresses: [{{type: Hostname, value: hostname.example}}]}}\n---\n"
        )
    };
    let ns = |labels: &str| {
        format!(
            "apiVersion: v1\nkind: Namespace\nmetadata: {{name: ns, labels: {{kubernetes.io/metadata.name: ns{labels}}}}}\n---\n"
        )
    };
    let we = |labels: &str| {
        format!(
            "apiVersion: networking.istio.io/v1\nkind: WorkloadEntry\nmetadata: {{name: name, namespace: ns, labels: {{{labels}}}}}\nspec: {{address: 1.2.3.4}}\n"
        )
    };
    let selector_ns = "{from: Selector, selector: {matchLabels: {kubernetes.io/metadata.name: ns}}}";
    let same = "{from: Same}";
    // (case, objects, the condition's status, reason and message)
    type Want<'a> = Option<(&'a str, &'a str, &'a str)>;
    let cases: [(&str, String, Want<'_>); 6] = [
        (
            "workload entry bound to waypoint",
            gw("waypoint", "waypoint-ns", "all", selector_ns)
                + &ns("")
                + &we("istio.io/use-waypoint: waypoint, istio.io/use-waypoint-namespace: waypoint-ns"),
            Some(("True", "WaypointAccepted", "Successfully attached to waypoint waypoint-ns/waypoint")),
        ),
        (
            "workload entry with waypoint not ready",
            ns("") + &we("istio.io/use-waypoint: missing-waypoint"),
            Some(("False", "WaypointIsNotReady", "waypoint \"ns/missing-waypoint\" is not ready")),
        ),
        ("workload entry without waypoint", we(""), None),
        (
            "workload entry with namespace-inherited service-only waypoint produces no condition",
            gw("service-waypoint", "ns", "service", same) + &ns(", istio.io/use-waypoint: service-waypoint") + &we(""),
            None,
        ),
        (
            "workload entry with direct service-only waypoint label produces error",
            gw("service-waypoint", "ns", "service", same) + &ns("") + &we("istio.io/use-waypoint: service-waypoint"),
            Some((
                "False",
                "UnsupportedTrafficType",
                "attempting to bind to traffic type \"workload\" which the waypoint \"ns/service-waypoint\" does not support",
            )),
        ),
        (
            "workload entry with namespace-inherited all-traffic waypoint binds successfully",
            gw("all-waypoint", "ns", "all", same) + &ns(", istio.io/use-waypoint: all-waypoint") + &we(""),
            Some(("True", "WaypointAccepted", "Successfully attached to waypoint ns/all-waypoint")),
        ),
    ];
    for (name, y, want) in cases {
        let mut index = Index::new();
        index.apply(&objects(&y), None, &Settings::default());
        let statuses = index.statuses();
        let st = statuses
            .iter()
            .find(|s| s.path == "/apis/networking.istio.io/v1/namespaces/ns/workloadentries/name")
            .unwrap_or_else(|| panic!("{name}: no status"));
        let c = &st.status["conditions"][0];
        assert_eq!(c["type"], "istio.io/WaypointBound", "{name}");
        match want {
            Some((status, reason, message)) => {
                assert_eq!(
                    (c["status"].as_str(), c["reason"].as_str(), c["message"].as_str()),
                    (Some(status), Some(reason), Some(message)),
                    "{name}"
                );
            }
            None => assert_eq!(c["remove"], true, "{name}: {c}"),
        }
    }
}

/// istiod's `istio.io/WaypointMissing` on a ServiceEntry that needs a
/// waypoint and has none (`ServiceInfo.GetConditions`): a wildcard host,
/// a racing connect strategy; removed once bound.
#[test]
fn a_service_entry_that_needs_a_waypoint_says_so() {
    let se = |extra_meta: &str| {
        format!(
            "apiVersion: networking.istio.io/v1\nkind: ServiceEntry\nmetadata: {{name: wild, namespace: default{extra_meta}}}\n\
             spec: {{hosts: ['*.wild.example.com'], ports: [{{number: 443, name: tls, protocol: TLS}}], resolution: NONE}}\n---\n"
        )
    };
    let missing = |y: &str| {
        let mut index = Index::new();
        index.apply(&objects(y), None, &Settings::default());
        let statuses = index.statuses();
        let st =
            statuses.iter().find(|s| s.path == "/apis/networking.istio.io/v1/namespaces/default/serviceentries/wild");
        let conds = st.expect("a status").status["conditions"].as_array().unwrap().clone();
        conds.into_iter().find(|c| c["type"] == "istio.io/WaypointMissing").unwrap()
    };
    let c = missing(&se(""));
    assert_eq!((c["status"].as_str(), c["reason"].as_str()), (Some("True"), Some("NoWaypointForWildcardService")));
    assert_eq!(c["message"], "ServiceEntry will not apply until it is bound to a valid waypoint.");
    let c = missing(&se(", annotations: {istio.io/connect-strategy: race_first_tcp_connect}"));
    assert_eq!(c["reason"], "NoWaypointForRacingConnectStrategy");
    let bound = se(", labels: {istio.io/use-waypoint: waypoint}")
        + &waypoint_gateway(Some("waypoint.default.svc.cluster.local"), None);
    assert_eq!(missing(&bound)["remove"], true);
}

/// TestWaypointPolicyStatusCollection (serviceregistry/ambient/
/// authorization_test.go), its cases as data: the `WaypointAccepted`
/// condition of AuthorizationPolicies attached by `targetRef(s)` in a
/// namespace that uses the waypoint, flattened as istiod's
/// `flattenConditions` (one target: its own; several: Accepted,
/// PartiallyInvalid or Invalid, the unbound ones listed).
#[test]
fn upstream_waypoint_policy_status_collection() {
    let ns = "testns";
    let mut y = format!(
        "apiVersion: v1\nkind: Namespace\nmetadata: {{name: {ns}, labels: {{istio.io/use-waypoint: waypoint}}}}\n---\n\
         apiVersion: gateway.networking.k8s.io/v1\nkind: Gateway\nmetadata: {{name: waypoint, namespace: {ns}}}\n\
         spec: {{gatewayClassName: istio-waypoint, listeners: [{{name: mesh, port: 15008, protocol: HBONE}}]}}\n\
         status: {{addresses: [{{type: Hostname, value: waypoint.{ns}.svc.cluster.local}}]}}\n---\n\
         apiVersion: gateway.networking.k8s.io/v1\nkind: GatewayClass\nmetadata: {{name: istio-waypoint}}\nspec: {{controllerName: istio.io/mesh-controller}}\n---\n\
         apiVersion: gateway.networking.k8s.io/v1\nkind: GatewayClass\nmetadata: {{name: not-waypoint}}\nspec: {{controllerName: example.com/other}}\n---\n"
    );
    let se = |name: &str, none: bool| {
        let labels = if none { "labels: {istio.io/use-waypoint: none}, " } else { "" };
        format!(
            "apiVersion: networking.istio.io/v1\nkind: ServiceEntry\nmetadata: {{name: {name}, namespace: {ns}, {labels}}}\n\
             spec: {{hosts: [{name}.example.com], ports: [{{number: 80, name: http, protocol: HTTP}}], resolution: DNS}}\n---\n"
        )
    };
    let svc = |name: &str, none: bool| {
        let labels = if none { "labels: {istio.io/use-waypoint: none}, " } else { "" };
        format!(
            "apiVersion: v1\nkind: Service\nmetadata: {{name: {name}, namespace: {ns}, {labels}}}\n\
             spec: {{clusterIP: 10.96.1.{}, ports: [{{port: 80}}]}}\n---\n",
            name.len()
        )
    };
    let policy = |name: &str, policy_ns: &str, refs: &[(&str, &str, &str)]| {
        let refs: Vec<String> =
            refs.iter().map(|(g, k, n)| format!("{{group: \"{g}\", kind: {k}, name: {n}}}")).collect();
        format!(
            "apiVersion: security.istio.io/v1\nkind: AuthorizationPolicy\nmetadata: {{name: {name}, namespace: {policy_ns}}}\n\
             spec: {{targetRefs: [{}], rules: [{{}}]}}\n---\n",
            refs.join(", ")
        )
    };
    let se_ref = |n| ("networking.istio.io", "ServiceEntry", n);
    let svc_ref = |n| ("", "Service", n);
    y += &se("working-se", false);
    y += &policy("working-se-pol", ns, &[se_ref("working-se")]);
    y += &se("no-waypoint-se", true);
    y += &policy("no-waypoint-se-pol", ns, &[se_ref("no-waypoint-se")]);
    y += &policy("missing-se-pol", ns, &[se_ref("missing-se")]);
    y += &se("multi-working-se-1", false);
    y += &se("multi-working-se-2", false);
    y += &policy("multi-working-se-pol", ns, &[se_ref("multi-working-se-1"), se_ref("multi-working-se-2")]);
    y += &se("multi-partial-no-waypoint-se-1", true);
    y += &se("multi-partial-bound-se-1", false);
    y += &policy(
        "multi-partial-se-pol",
        ns,
        &[
            se_ref("multi-partial-no-waypoint-se-1"),
            se_ref("multi-partial-bound-se-1"),
            se_ref("multi-partial-missing-se-1"),
        ],
    );
    y += &svc("working-service", false);
    y += &policy("working-service-pol", ns, &[svc_ref("working-service")]);
    y += &svc("no-waypoint-service", true);
    y += &policy("no-waypoint-service-pol", ns, &[svc_ref("no-waypoint-service")]);
    y += &policy("missing-service-pol", ns, &[svc_ref("missing-service")]);
    let gw_ref = |n| ("gateway.networking.k8s.io", "Gateway", n);
    y += &policy(
        "multi-partial-all-pol",
        ns,
        &[
            se_ref("working-se"),
            se_ref("no-waypoint-se"),
            se_ref("missing-se"),
            svc_ref("working-service"),
            svc_ref("no-waypoint-service"),
            svc_ref("no-service"),
            gw_ref("waypoint"),
            gw_ref("not-a-waypoint"),
        ],
    );
    y += &policy("gateway-pol", ns, &[("gateway.networking.k8s.io", "Gateway", "waypoint")]);
    y += &policy("missing-gateway-pol", ns, &[("gateway.networking.k8s.io", "Gateway", "missing")]);
    y += &policy("class-pol", "istio-system", &[("gateway.networking.k8s.io", "GatewayClass", "istio-waypoint")]);
    y += &policy("class-not-root-pol", ns, &[("gateway.networking.k8s.io", "GatewayClass", "istio-waypoint")]);
    y += &policy(
        "class-not-waypoint-pol",
        "istio-system",
        &[("gateway.networking.k8s.io", "GatewayClass", "not-waypoint")],
    );
    let mut index = Index::new();
    index.apply(&objects(&y), None, &Settings::default());
    let statuses = index.statuses();
    let condition = |policy_ns: &str, name: &str| {
        let path = format!("/apis/security.istio.io/v1/namespaces/{policy_ns}/authorizationpolicies/{name}");
        let c = statuses
            .iter()
            .filter(|s| s.path == path)
            .flat_map(|s| s.status["conditions"].as_array().cloned().unwrap_or_default())
            .find(|c| c["type"] == "WaypointAccepted")
            .unwrap_or_else(|| panic!("{path}: {statuses:#?}"));
        (c["status"] == "True", c["reason"].as_str().unwrap().to_owned(), c["message"].as_str().unwrap().to_owned())
    };
    let bound = format!("bound to {ns}/waypoint");
    let t = |b: bool, r: &str, m: &str| (b, r.to_owned(), m.to_owned());
    let cases = [
        ("single-bind-success-serviceentry", ns, "working-se-pol", t(true, "Accepted", &bound)),
        (
            "single-bind-no-waypoint-serviceentry",
            ns,
            "no-waypoint-se-pol",
            t(false, "AncestorNotBound", &format!("ServiceEntry {ns}/no-waypoint-se is not bound to a waypoint")),
        ),
        (
            "single-bind-missing-ref-serviceentry",
            ns,
            "missing-se-pol",
            t(false, "TargetNotFound", &format!("ServiceEntry {ns}/missing-se was not found")),
        ),
        ("multi-bind-success-serviceentry", ns, "multi-working-se-pol", t(true, "Accepted", "")),
        (
            "multi-partial-bind-serviceentry",
            ns,
            "multi-partial-se-pol",
            t(
                true,
                "PartiallyInvalid",
                &format!(
                    "Invalid targetRefs: ServiceEntry.networking.istio.io:{ns}/multi-partial-no-waypoint-se-1, ServiceEntry.networking.istio.io:{ns}/multi-partial-missing-se-1"
                ),
            ),
        ),
        ("single-bind-success-service", ns, "working-service-pol", t(true, "Accepted", &bound)),
        (
            "single-bind-no-waypoint-service",
            ns,
            "no-waypoint-service-pol",
            t(false, "AncestorNotBound", &format!("Service {ns}/no-waypoint-service is not bound to a waypoint")),
        ),
        (
            "single-bind-missing-ref-service",
            ns,
            "missing-service-pol",
            t(false, "TargetNotFound", &format!("Service {ns}/missing-service was not found")),
        ),
        (
            "multi-bind-partial-all-resources",
            ns,
            "multi-partial-all-pol",
            t(
                true,
                "PartiallyInvalid",
                &format!(
                    "Invalid targetRefs: ServiceEntry.networking.istio.io:{ns}/no-waypoint-se, ServiceEntry.networking.istio.io:{ns}/missing-se, \
                     Service.core:{ns}/no-waypoint-service, Service.core:{ns}/no-service, Gateway.gateway.networking.k8s.io:{ns}/not-a-waypoint"
                ),
            ),
        ),
        // The Gateway and GatewayClass targets, as the collection's code
        // decides them.
        ("bind-gateway", ns, "gateway-pol", t(true, "Accepted", &bound)),
        ("bind-missing-gateway", ns, "missing-gateway-pol", t(false, "TargetNotFound", "not bound")),
        ("bind-gatewayclass", "istio-system", "class-pol", t(true, "Accepted", "bound to istio-waypoint")),
        (
            "bind-gatewayclass-not-root",
            ns,
            "class-not-root-pol",
            t(
                false,
                "Invalid",
                "AuthorizationPolicy must be in the root namespace `istio-system` when referencing a GatewayClass",
            ),
        ),
        (
            "bind-gatewayclass-not-waypoint",
            "istio-system",
            "class-not-waypoint-pol",
            t(false, "Invalid", "GatewayClass must use controller name `istio.io/mesh-controller` for waypoints"),
        ),
    ];
    for (case, policy_ns, name, want) in cases {
        assert_eq!(condition(policy_ns, name), want, "{case}");
    }
}
