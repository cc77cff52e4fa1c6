//! Upstream's ambient index scenarios (istio/istio pilot/pkg/serviceregistry/
//! ambient/ambientindex_test.go), step by step: objects created, changed
//! and deleted one at a time, each change named to the index as a watch
//! event names it, and after each step the address resources it pushed
//! (upstream's `assertEvent`, the Address names its XDS updater saw) and
//! what the index holds. The helpers build objects as upstream's
//! `ambientTestServer` does (`addPods`, `addService`, `addWaypoint`, ...):
//! cluster `cluster0`... as `newAmbientTestServer` is given, namespace
//! `ns1`, domain `company.com`.

use std::collections::BTreeSet;

use istiod_config::manifest::{ObjectRef, parse_file};
use istiod_config::objects::Objects;
use istiod_proto::istio::workload::{Workload, address};
use istiod_proto::prost::Message;

use super::*;

const NS: &str = "ns1";

struct Env {
    objects: Objects,
    index: Index,
    settings: Settings,
}

impl Env {
    /// `newAmbientTestServer(t, cluster, network, "")`.
    fn new(cluster: &str, network: &str) -> Env {
        let settings = Settings {
            cluster_id: cluster.into(),
            network: network.into(),
            domain: "company.com".into(),
            ..Settings::default()
        };
        let mut e = Env { objects: Objects::default(), index: Index::new(), settings };
        e.index.apply(&e.objects, None, &e.settings);
        e.apply(&format!("apiVersion: v1\nkind: Namespace\nmetadata: {{name: {NS}}}\n"));
        e
    }

    /// Creates or replaces the objects of `yaml`; the Address names pushed.
    fn apply(&mut self, yaml: &str) -> BTreeSet<String> {
        let mut refs = Vec::new();
        for obj in parse_file(yaml).docs.into_iter().flat_map(|d| d.unwrap()) {
            let r = ObjectRef::of(&obj);
            self.remove(&r);
            self.objects.push(obj);
            refs.push(r);
        }
        self.changed(&refs)
    }

    /// Deletes one object; the Address names pushed.
    fn delete(&mut self, kind: &str, name: &str) -> BTreeSet<String> {
        let r = ObjectRef { kind: kind.into(), namespace: NS.into(), name: name.into(), service: None };
        self.remove(&r);
        self.changed(&[r])
    }

    /// What a lookup of `key` finds (istiod's ambient `Lookup`): a
    /// workload's uid itself, else what the served snapshot's aliases say
    /// the key stands for (`<network>/<ip>`, a service).
    fn lookup(&self, key: &str) -> Vec<Address> {
        use istiod_xds_api::snapshot::{SimpleModel, SimpleResource};
        let mut model = SimpleModel::default();
        for (kind, name, body) in self.index.all() {
            if let (Kind::Address, Some(body)) = (kind, body) {
                model.resources[Kind::Address as usize].insert(name, SimpleResource { generation: 0, body });
            }
        }
        let table = istiod_mesh::generator::workload_api::aliases(&model);
        let names: Vec<Arc<str>> = match table.stands_for.get(key) {
            Some(names) => names.clone(),
            None => {
                model.resources[Kind::Address as usize].contains_key(key).then(|| Arc::from(key)).into_iter().collect()
            }
        };
        let map = &model.resources[Kind::Address as usize];
        names.iter().map(|n| Address::decode(map[n].body.clone()).unwrap()).collect()
    }

    /// The names (`name` fields) of what a lookup of `key` finds
    /// (`assertAddresses`).
    fn lookup_names(&self, key: &str) -> Vec<String> {
        let mut names: Vec<String> = self
            .lookup(key)
            .into_iter()
            .filter_map(|a| match a.r#type? {
                address::Type::Workload(w) => Some(w.name),
                address::Type::Service(s) => Some(s.name),
            })
            .collect();
        names.sort();
        names.dedup();
        names
    }

    /// The names of every address resource (`assertAddresses(t, "", ...)`).
    fn all_names(&self) -> BTreeSet<String> {
        self.index.all().into_iter().filter(|c| c.0 == Kind::Address).map(|c| c.1.to_string()).collect()
    }

    /// What a lookup by VIP finds (`assertAddresses(t, addrXdsName(vip),
    /// ...)`): the service with that address and the workloads that list
    /// it.
    fn by_vip(&self, vip: &str) -> BTreeSet<String> {
        let bytes = crate::ip_bytes(vip.parse().unwrap());
        let Some((name, _)) =
            self.index.services().find(|(_, i)| i.service.addresses.iter().any(|a| a.address == bytes))
        else {
            return BTreeSet::new();
        };
        let mut out = set(&[name]);
        for (n, a) in self.index.workloads() {
            if let Some(address::Type::Workload(w)) = &a.r#type
                && w.services.contains_key(&**name)
            {
                out.insert(n.to_string());
            }
        }
        out
    }

    fn remove(&mut self, r: &ObjectRef) {
        let is = |m: &istiod_config::meta::Meta| m.name == r.name && m.ns() == r.namespace;
        let o = &mut self.objects;
        match r.kind.as_str() {
            "Pod" => o.pods.retain(|p| !is(&p.metadata)),
            "Service" => o.services.retain(|s| !is(&s.metadata)),
            "Namespace" => o.namespaces.retain(|n| n.metadata.name != r.name),
            "Gateway.gateway.networking.k8s.io" => {
                o.gateway_api.retain(|g| !(matches!(g.spec, GatewayApiSpec::Gateway(_)) && is(&g.meta)))
            }
            kind => o.istio.retain(|x| !(x.kind().name() == kind && is(&x.meta))),
        }
    }

    fn changed(&mut self, refs: &[ObjectRef]) -> BTreeSet<String> {
        let changes = self.index.apply(&self.objects, Some(refs), &self.settings);
        changes.into_iter().filter(|c| c.0 == Kind::Address).map(|c| c.1.to_string()).collect()
    }

    /// `podXdsName`.
    fn pod(&self, name: &str) -> String {
        format!("{}//Pod/{NS}/{name}", self.settings.cluster_id)
    }

    /// `svcXdsName`.
    fn svc(&self, name: &str) -> String {
        format!("{NS}/{name}.{NS}.svc.company.com")
    }

    fn workload(&self, uid: &str) -> Workload {
        self.index
            .workloads()
            .find_map(|(n, a)| match &a.r#type {
                Some(address::Type::Workload(w)) if &**n == uid => Some(w.clone()),
                _ => None,
            })
            .unwrap_or_else(|| panic!("no workload {uid}"))
    }

    /// `addPods(t, ip, name, sa, labels, annotations, markReady, Running)`.
    fn add_pod(&mut self, ip: &str, name: &str, sa: &str, labels: &str, ready: bool) -> BTreeSet<String> {
        self.add_pod_in(ip, name, sa, labels, ready, "Running")
    }

    /// `addPods(t, ip, name, sa, labels, annotations, markReady, phase)`.
    fn add_pod_in(
        &mut self,
        ip: &str,
        name: &str,
        sa: &str,
        labels: &str,
        ready: bool,
        phase: &str,
    ) -> BTreeSet<String> {
        let ready = if ready { "True" } else { "False" };
        let ips = if ip.is_empty() { String::new() } else { format!(", podIP: {ip}, podIPs: [{{ip: {ip}}}]") };
        self.apply(&format!(
            "apiVersion: v1\nkind: Pod\nmetadata: {{name: {name}, namespace: {NS}, labels: {{{labels}}}}}\n\
             spec: {{serviceAccountName: {sa}, nodeName: node1}}\n\
             status: {{phase: {phase}{ips}, conditions: [{{type: Ready, status: '{ready}'}}]}}\n"
        ))
    }

    /// `addService(t, name, labels, annotations, ports, selector, ip)`.
    fn add_service(&mut self, name: &str, selector: &str, ip: &str) -> BTreeSet<String> {
        self.add_service_labelled(name, "", selector, ip)
    }

    /// `addService` with labels (`labelService`).
    fn add_service_labelled(&mut self, name: &str, labels: &str, selector: &str, ip: &str) -> BTreeSet<String> {
        self.apply(&format!(
            "apiVersion: v1\nkind: Service\nmetadata: {{name: {name}, namespace: {NS}, labels: {{{labels}}}}}\n\
             spec: {{clusterIP: {ip}, selector: {{{selector}}}, ports: [{{name: port-80, port: 80}}]}}\n"
        ))
    }

    /// `addWaypoint(t, ip, name, trafficType, ready)`: a Gateway of class
    /// istio-waypoint with its HBONE listener from the same namespace, an
    /// address (the IP, then `<name>.ns1.svc.company.com`) once ready.
    fn add_waypoint(&mut self, ip: &str, name: &str, traffic: &str, ready: bool) -> BTreeSet<String> {
        let traffic = if ["service", "workload", "all", "none"].contains(&traffic) { traffic } else { "service" };
        let status = if ready {
            format!(
                "status: {{addresses: [{{type: IPAddress, value: {ip}}}, {{type: Hostname, value: {name}.{NS}.svc.company.com}}]}}\n"
            )
        } else {
            String::new()
        };
        self.apply(&format!(
            "apiVersion: gateway.networking.k8s.io/v1\nkind: Gateway\n\
             metadata: {{name: {name}, namespace: {NS}, labels: {{istio.io/waypoint-for: {traffic}}}}}\n\
             spec: {{gatewayClassName: istio-waypoint, listeners: [{{name: mesh, port: 15008, protocol: HBONE, allowedRoutes: {{namespaces: {{from: Same}}}}}}]}}\n{status}"
        ))
    }

    /// The hostname of the waypoint workload `pod` uses (`""`: none).
    fn waypoint_of(&self, pod: &str) -> String {
        use istiod_proto::istio::workload::gateway_address::Destination;
        match self.workload(&self.pod(pod)).waypoint.and_then(|g| g.destination) {
            Some(Destination::Hostname(h)) => {
                assert_eq!(h.namespace, NS);
                h.hostname
            }
            Some(Destination::Address(_)) => panic!("an address, not a hostname"),
            None => String::new(),
        }
    }
}

fn set(names: &[&str]) -> BTreeSet<String> {
    names.iter().map(|n| n.to_string()).collect()
}

/// Upstream `TestAmbientIndex_WaypointConfiguredOnlyWhenReady` ("base"): a
/// waypoint without an address is not configured; once it has one, the
/// pod that uses it is pushed.
#[test]
fn upstream_waypoint_configured_only_when_ready() {
    let mut s = Env::new("cluster0", "testnetwork");
    let pod1 = s.pod("pod1");
    let pod2 = s.pod("pod2");
    assert_eq!(
        s.add_pod("127.0.0.1", "pod1", "sa1", "app: a, istio.io/use-waypoint: waypoint-sa1", true),
        set(&[&pod1])
    );
    assert_eq!(
        s.add_pod("127.0.0.2", "pod2", "sa2", "app: b, istio.io/use-waypoint: waypoint-sa2", true),
        set(&[&pod2])
    );
    assert_eq!(s.add_waypoint("10.0.0.1", "waypoint-sa1", "", false), set(&[]));
    assert_eq!(s.add_waypoint("10.0.0.2", "waypoint-sa2", "workload", true), set(&[&pod2]));
    // waypoint-sa1 ready: only now is pod1 pushed.
    assert_eq!(s.add_waypoint("10.0.0.1", "waypoint-sa1", "workload", true), set(&[&pod1]));
}

/// Upstream `TestUpdateWaypointForWorkload` ("base"): the namespace's
/// waypoint, a pod's own overriding it, `none` opting out, and a name that
/// is no waypoint (`~`) using none.
#[test]
fn upstream_update_waypoint_for_workload() {
    let mut s = Env::new("", "");
    let pod1 = s.pod("pod1");
    s.add_waypoint("10.0.0.2", "waypoint-sa1", "workload", true);
    s.add_waypoint("10.0.0.1", "waypoint-ns", "workload", true);
    assert_eq!(s.add_pod("127.0.0.1", "pod1", "sa1", "app: a", true), set(&[&pod1]));
    assert_eq!(s.waypoint_of("pod1"), "");
    let ns =
        |labels: &str| format!("apiVersion: v1\nkind: Namespace\nmetadata: {{name: {NS}, labels: {{{labels}}}}}\n");
    assert_eq!(s.apply(&ns("istio.io/use-waypoint: waypoint-ns")), set(&[&pod1]));
    assert_eq!(s.waypoint_of("pod1"), "waypoint-ns.ns1.svc.company.com");
    let label = |s: &mut Env, l: &str| s.add_pod("127.0.0.1", "pod1", "sa1", &format!("app: a{l}"), true);
    assert_eq!(label(&mut s, ", istio.io/use-waypoint: waypoint-sa1"), set(&[&pod1]));
    assert_eq!(s.waypoint_of("pod1"), "waypoint-sa1.ns1.svc.company.com");
    assert_eq!(label(&mut s, ""), set(&[&pod1]));
    assert_eq!(s.waypoint_of("pod1"), "waypoint-ns.ns1.svc.company.com");
    assert_eq!(s.apply(&ns("")), set(&[&pod1]));
    assert_eq!(s.waypoint_of("pod1"), "");
    assert_eq!(label(&mut s, ", istio.io/use-waypoint: waypoint-sa1"), set(&[&pod1]));
    assert_eq!(s.waypoint_of("pod1"), "waypoint-sa1.ns1.svc.company.com");
    // The namespace's waypoint again: the pod's own stands, no event.
    assert_eq!(s.apply(&ns("istio.io/use-waypoint: waypoint-ns")), set(&[]));
    assert_eq!(s.waypoint_of("pod1"), "waypoint-sa1.ns1.svc.company.com");
    assert_eq!(label(&mut s, ", istio.io/use-waypoint: none"), set(&[&pod1]));
    assert_eq!(s.waypoint_of("pod1"), "");
    assert_eq!(label(&mut s, ", istio.io/use-waypoint: '~'"), set(&[]));
    assert_eq!(s.waypoint_of("pod1"), "");
}

/// Upstream `TestPolicyAfterPod` ("base"): a policy created after the pod
/// it selects pushes that pod, which lists it.
#[test]
fn upstream_policy_after_pod() {
    let mut s = Env::new("cluster0", "testnetwork");
    let pod1 = s.pod("pod1");
    assert_eq!(s.add_service("svc1", "app: a", "10.0.0.1"), set(&[&s.svc("svc1")]));
    assert_eq!(s.add_pod("127.0.0.1", "pod1", "sa1", "app: a", true), set(&[&pod1]));
    // `addPolicy(t, "selector", testNS, {"app": "a"}, AuthorizationPolicy, nil)`
    let policy = format!(
        "apiVersion: security.istio.io/v1\nkind: AuthorizationPolicy\nmetadata: {{name: selector, namespace: {NS}}}\n\
         spec: {{selector: {{matchLabels: {{app: a}}}}}}\n"
    );
    assert_eq!(s.apply(&policy), set(&[&pod1]));
    assert_eq!(s.workload(&pod1).authorization_policies, ["ns1/selector"]);
}

/// Upstream `TestAmbientSystemNamespaceNetworkChange`: the system
/// namespace's network label is every workload's and service's network,
/// as it changes.
#[test]
fn upstream_system_namespace_network_change() {
    let mut s = Env::new("cluster0", "");
    let (pod1, pod2, svc1) = (s.pod("pod1"), s.pod("pod2"), s.svc("svc1"));
    assert_eq!(s.add_pod("127.0.0.1", "pod1", "sa1", "app: a", true), set(&[&pod1]));
    assert_eq!(s.add_pod("127.0.0.2", "pod2", "sa2", "app: a", true), set(&[&pod2]));
    assert_eq!(s.add_service("svc1", "app: a", "10.0.0.1"), set(&[&svc1, &pod1, &pod2]));
    for network in ["nw1", "nw2"] {
        s.apply(&format!(
            "apiVersion: v1\nkind: Namespace\nmetadata: {{name: istio-system, labels: {{topology.istio.io/network: {network}}}}}\n"
        ));
        for p in ["pod1", "pod2"] {
            assert_eq!(s.workload(&s.pod(p)).network, network);
        }
        let svc = s.index.services().find(|(n, _)| &***n == svc1.as_str()).map(|(_, i)| i.service.clone()).unwrap();
        assert!(svc.addresses.iter().all(|a| a.network == network), "{svc:?}");
    }
}

/// Upstream `TestEmptyVIPsExcluded`: a Service whose cluster IP is empty
/// has no address.
#[test]
fn upstream_empty_vips_excluded() {
    let mut s = Env::new("cluster0", "testnetwork");
    s.add_service("svc1", "app: a", "''");
    let svc =
        s.index.services().find(|(n, _)| &***n == s.svc("svc1").as_str()).map(|(_, i)| i.service.clone()).unwrap();
    assert!(svc.addresses.is_empty(), "{svc:?}");
}

/// Upstream `TestAmbientIndex_ServiceSelectsCorrectWorkloads` ("base"): a
/// Service's workloads follow its selector and the pods' labels, each step
/// pushing exactly the workloads whose list of services changed.
#[test]
fn upstream_service_selects_correct_workloads() {
    let mut s = Env::new("cluster0", "testnetwork");
    let [p1, p2, p3, p4] = ["pod1", "pod2", "pod3", "pod4"].map(|p| s.pod(p));
    let svc1 = s.svc("svc1");
    assert_eq!(s.add_pod("127.0.0.1", "pod1", "sa1", "app: a", true), set(&[&p1]));
    assert_eq!(s.add_pod("127.0.0.2", "pod2", "sa1", "app: a, other: label", true), set(&[&p2]));
    assert_eq!(s.add_pod("127.0.0.3", "pod3", "sa1", "app: other", true), set(&[&p3]));
    assert_eq!(s.add_service("svc1", "app: a", "10.0.0.1"), set(&[&p1, &p2, &svc1]));
    assert_eq!(s.all_names(), set(&[&p1, &p2, &p3, &svc1]));
    assert_eq!(s.by_vip("10.0.0.1"), set(&[&p1, &p2, &svc1]));
    assert_eq!(s.add_pod("127.0.0.4", "pod4", "sa1", "app: a", true), set(&[&p4]));
    assert_eq!(s.by_vip("10.0.0.1"), set(&[&p1, &p2, &p4, &svc1]));
    assert_eq!(s.delete("Pod", "pod4"), set(&[&p4]));
    assert_eq!(s.all_names(), set(&[&p1, &p2, &p3, &svc1]));
    assert_eq!(s.by_vip("10.0.0.1"), set(&[&p1, &p2, &svc1]));
    // A narrower selector: pod1 leaves.
    assert_eq!(s.add_service("svc1", "app: a, other: label", "10.0.0.1"), set(&[&p1]));
    assert_eq!(s.by_vip("10.0.0.1"), set(&[&p2, &svc1]));
    assert_eq!(s.add_pod("127.0.0.3", "pod3", "sa1", "app: a, other: label", true), set(&[&p3]));
    assert_eq!(s.by_vip("10.0.0.1"), set(&[&p2, &p3, &svc1]));
    assert_eq!(s.add_pod("127.0.0.3", "pod3", "sa1", "app: a", true), set(&[&p3]));
    assert_eq!(s.by_vip("10.0.0.1"), set(&[&p2, &svc1]));
    // The service goes: it, and the pod that listed it.
    assert_eq!(s.delete("Service", "svc1"), set(&[&p2, &svc1]));
    assert_eq!(s.all_names(), set(&[&p1, &p2, &p3]));
    assert!(s.by_vip("10.0.0.1").is_empty());
}

/// Upstream `TestAmbientIndex_WaypointInboundBinding`: a waypoint whose
/// GatewayClass names an inbound binding gives its instances that
/// application tunnel.
#[test]
fn upstream_waypoint_inbound_binding() {
    use istiod_proto::istio::workload::{ApplicationTunnel, application_tunnel};
    let mut s = Env::new("cluster0", "testnetwork");
    s.apply(
        "apiVersion: gateway.networking.k8s.io/v1\nkind: GatewayClass\n\
         metadata: {name: istio-waypoint, annotations: {ambient.istio.io/waypoint-inbound-binding: PROXY/15088}}\n\
         spec: {controllerName: istio.io/mesh-controller}\n",
    );
    s.add_waypoint("1.2.3.4", "proxy-sandwich", "all", true);
    let instance = s.pod("proxy-sandwich-instance");
    let pushed = s.add_pod(
        "10.0.0.1",
        "proxy-sandwich-instance",
        "",
        "gateway.networking.k8s.io/gateway-name: proxy-sandwich",
        true,
    );
    assert_eq!(pushed, set(&[&instance]));
    assert_eq!(
        s.workload(&instance).application_tunnel,
        Some(ApplicationTunnel { protocol: application_tunnel::Protocol::Proxy as i32, port: 15088 })
    );
}

/// What upstream's `assertEvent` checks (`MatchOrFail`): these names were
/// pushed (others may have been too).
fn pushed(got: &BTreeSet<String>, want: &[&str]) {
    for w in want {
        assert!(got.contains(*w), "{w} not pushed: {got:?}");
    }
}

/// Upstream `TestAmbientIndex_WaypointAddressAddedToWorkloads`: a
/// namespace's waypoint and a pod's own reach the workloads once they have
/// an address; a waypoint's instances and managed Service have none; the
/// waypoint's Service and its instances are found by its VIP; deleting the
/// waypoints takes them away.
#[test]
fn upstream_waypoint_address_added_to_workloads() {
    let mut s = Env::new("cluster0", "testnetwork");
    let p = |s: &Env, n: &str| s.pod(n);
    s.apply(&format!(
        "apiVersion: v1\nkind: Namespace\nmetadata: {{name: {NS}, labels: {{istio.io/use-waypoint: waypoint-ns}}}}\n"
    ));
    pushed(&s.add_pod("127.0.0.1", "pod1", "sa1", "app: a", true), &[&p(&s, "pod1")]);
    pushed(&s.add_pod("127.0.0.2", "pod2", "sa1", "app: a, other: label", true), &[&p(&s, "pod2")]);
    pushed(&s.add_pod("127.0.0.3", "pod3", "sa1", "app: a", true), &[&p(&s, "pod3")]);
    pushed(
        &s.add_pod("127.0.0.4", "pod4", "sa2", "app: b, istio.io/use-waypoint: waypoint-sa2", true),
        &[&p(&s, "pod4")],
    );
    let got = s.add_waypoint("10.0.0.2", "waypoint-ns", "all", true);
    pushed(&got, &[&p(&s, "pod1"), &p(&s, "pod2"), &p(&s, "pod3")]);
    let managed = "gateway.istio.io/managed: istio.io-mesh-controller";
    let instance = |gw: &str| format!("{managed}, gateway.networking.k8s.io/gateway-name: {gw}");
    pushed(
        &s.add_pod("127.0.0.200", "waypoint-ns-pod", "namespace-wide", &instance("waypoint-ns"), true),
        &[&p(&s, "waypoint-ns-pod")],
    );
    let waypoint_service = |s: &mut Env, name: &str, vip: &str| {
        s.apply(&format!(
            "apiVersion: v1\nkind: Service\nmetadata: {{name: {name}, namespace: {NS}, labels: {{{managed}}}}}\n\
             spec: {{clusterIP: {vip}, selector: {{gateway.networking.k8s.io/gateway-name: {name}}}, ports: [{{name: port-80, port: 80}}]}}\n"
        ))
    };
    let got = waypoint_service(&mut s, "waypoint-ns", "10.0.0.2");
    pushed(&got, &[&p(&s, "waypoint-ns-pod"), &s.svc("waypoint-ns")]);
    pushed(&s.add_waypoint("10.0.0.3", "waypoint-sa2", "all", true), &[&p(&s, "pod4")]);
    pushed(
        &s.add_pod("127.0.0.250", "waypoint-sa2-pod", "service-account", &instance("waypoint-sa2"), true),
        &[&p(&s, "waypoint-sa2-pod")],
    );
    let got = waypoint_service(&mut s, "waypoint-sa2", "10.0.0.3");
    pushed(&got, &[&p(&s, "waypoint-sa2-pod"), &s.svc("waypoint-sa2")]);
    let names = ["pod1", "pod2", "pod3", "pod4", "waypoint-ns-pod", "waypoint-sa2-pod"];
    let mut all: BTreeSet<String> = names.iter().map(|n| s.pod(n)).collect();
    all.extend([s.svc("waypoint-ns"), s.svc("waypoint-sa2")]);
    assert_eq!(s.all_names(), all);
    assert_eq!(s.waypoint_of("pod3"), "waypoint-ns.ns1.svc.company.com");
    assert_eq!(s.waypoint_of("pod4"), "waypoint-sa2.ns1.svc.company.com");
    // The waypoint's VIP: its Service and its instance, which has no
    // waypoint; nor has its managed Service.
    assert_eq!(s.by_vip("10.0.0.2"), set(&[&s.svc("waypoint-ns"), &p(&s, "waypoint-ns-pod")]));
    assert_eq!(s.waypoint_of("waypoint-ns-pod"), "");
    let wsvc = s.index.services().find(|(n, _)| &***n == s.svc("waypoint-ns").as_str()).unwrap().1.service.clone();
    assert_eq!(wsvc.waypoint, None);
    pushed(
        &s.add_pod("127.0.0.201", "waypoint2-ns-pod", "namespace-wide", &instance("namespace-wide"), true),
        &[&p(&s, "waypoint2-ns-pod")],
    );
    assert_eq!(s.waypoint_of("pod3"), "waypoint-ns.ns1.svc.company.com");
    let got = s.add_service("svc1", "app: a", "10.0.0.1");
    pushed(&got, &[&p(&s, "pod1"), &p(&s, "pod2"), &p(&s, "pod3"), &s.svc("svc1")]);
    assert_eq!(s.by_vip("10.0.0.1"), set(&[&p(&s, "pod1"), &p(&s, "pod2"), &p(&s, "pod3"), &s.svc("svc1")]));
    pushed(&s.delete("Pod", "waypoint2-ns-pod"), &[&p(&s, "waypoint2-ns-pod")]);
    assert_eq!(s.waypoint_of("pod3"), "waypoint-ns.ns1.svc.company.com");
    pushed(&s.add_pod("127.0.0.201", "waypoint2-sa", "waypoint-sa", managed, true), &[&p(&s, "waypoint2-sa")]);
    assert_eq!(s.waypoint_of("pod3"), "waypoint-ns.ns1.svc.company.com");
    pushed(&s.add_pod("127.0.0.6", "pod6", "sa1", "app: a", true), &[&p(&s, "pod6")]);
    assert_eq!(s.waypoint_of("pod6"), "waypoint-ns.ns1.svc.company.com");
    for pod in ["pod6", "pod3", "pod2"] {
        pushed(&s.delete("Pod", pod), &[&p(&s, pod)]);
    }
    pushed(&s.delete("Gateway.gateway.networking.k8s.io", "waypoint-ns"), &[&p(&s, "pod1")]);
    pushed(&s.delete("Service", "waypoint-ns"), &[&p(&s, "waypoint-ns-pod"), &s.svc("waypoint-ns")]);
    pushed(&s.delete("Gateway.gateway.networking.k8s.io", "waypoint-sa2"), &[&p(&s, "pod4")]);
    pushed(&s.delete("Service", "waypoint-sa2"), &[&p(&s, "waypoint-sa2-pod"), &s.svc("waypoint-sa2")]);
    assert_eq!(s.waypoint_of("pod1"), "");
}

/// Upstream `setupPolicyTest`: pod1, two waypoint pods, the namespace's
/// waypoint and its Service.
fn setup_policy_test(s: &mut Env) {
    let managed =
        "gateway.istio.io/managed: istio.io-mesh-controller, gateway.networking.k8s.io/gateway-name: waypoint-ns";
    let (pod1, wp, wp2) = (s.pod("pod1"), s.pod("waypoint-ns-pod"), s.pod("waypoint2-sa"));
    pushed(&s.add_pod("127.0.0.1", "pod1", "sa1", "app: a", true), &[&pod1]);
    pushed(&s.add_pod("127.0.0.200", "waypoint-ns-pod", "namespace-wide", managed, true), &[&wp]);
    pushed(&s.add_pod("127.0.0.201", "waypoint2-sa", "waypoint-sa", managed, true), &[&wp2]);
    s.add_waypoint("10.0.0.2", "waypoint-ns", "all", true);
    let ns = format!(
        "apiVersion: v1\nkind: Namespace\nmetadata: {{name: {NS}, labels: {{istio.io/use-waypoint: waypoint-ns}}}}\n"
    );
    pushed(&s.apply(&ns), &[&pod1]);
    let svc = format!(
        "apiVersion: v1\nkind: Service\nmetadata: {{name: waypoint-ns, namespace: {NS}, labels: {{gateway.istio.io/managed: istio.io-mesh-controller}}}}\n\
         spec: {{clusterIP: 10.0.0.2, selector: {{gateway.networking.k8s.io/gateway-name: waypoint-ns}}, ports: [{{name: port-80, port: 80}}]}}\n"
    );
    pushed(&s.apply(&svc), &[&wp, &s.svc("waypoint-ns")]);
}

/// Upstream `TestAmbientIndex_PeerAuthenticationNamespacePolicyChange`: a
/// workload PeerAuthentication with a PERMISSIVE port under a STRICT
/// namespace converts to a policy the workload lists; once the namespace
/// is PERMISSIVE, there is nothing to exempt, and it goes.
#[test]
fn upstream_peer_authentication_namespace_policy_change() {
    let mut s = Env::new("cluster0", "testnetwork");
    setup_policy_test(&mut s);
    let converted = format!("{NS}/converted_peer_authentication_selector");
    let pa = |name: &str, spec: &str| {
        format!(
            "apiVersion: security.istio.io/v1\nkind: PeerAuthentication\nmetadata: {{name: {name}, namespace: {NS}}}\nspec: {spec}\n"
        )
    };
    s.apply(&pa("namespace", "{mtls: {mode: STRICT}}"));
    s.apply(&pa("selector", "{selector: {matchLabels: {app: a}}, portLevelMtls: {9090: {mode: PERMISSIVE}}}"));
    let pod1 = s.pod("pod1");
    assert_eq!(s.workload(&pod1).authorization_policies, std::slice::from_ref(&converted));
    assert!(s.index.policies().any(|(n, _)| **n == *converted));
    s.apply(&pa("namespace", "{mtls: {mode: PERMISSIVE}}"));
    assert!(s.workload(&pod1).authorization_policies.is_empty());
    assert!(!s.index.policies().any(|(n, _)| **n == *converted));
}

/// Upstream `TestPodLifecycleWorkloadGates` ("base"): a ready pod is
/// healthy; a pod not ready, or pending with an address, is unhealthy; a
/// pod without an address is no workload.
#[test]
fn upstream_pod_lifecycle_workload_gates() {
    let mut s = Env::new("", "");
    assert_eq!(s.add_pod("127.0.0.1", "pod1", "sa1", "app: a", true), set(&["//Pod/ns1/pod1"]));
    s.add_pod_in("127.0.0.2", "pod2", "sa1", "app: a, other: label", false, "Running");
    s.add_pod_in("127.0.0.3", "pod3", "sa1", "app: other", false, "Pending");
    s.add_pod_in("", "pod4", "sa1", "app: another", false, "Pending");
    use istiod_proto::istio::workload::WorkloadStatus;
    let status = |s: &Env, p: &str| WorkloadStatus::try_from(s.workload(&s.pod(p)).status).unwrap();
    assert_eq!(status(&s, "pod1"), WorkloadStatus::Healthy);
    assert_eq!(status(&s, "pod2"), WorkloadStatus::Unhealthy);
    assert_eq!(status(&s, "pod3"), WorkloadStatus::Unhealthy);
    assert!(!s.all_names().contains(&s.pod("pod4")));
}

/// Upstream `TestAmbientIndex_ServiceOverlap` ("serviceentry overlap" and
/// "wildcard serviceentry overlap"): ServiceEntries of one hostname in two
/// namespaces, then two in one; the oldest of a namespace holds it, one is
/// canonical, and deleting a holder hands the hostname (and its endpoints'
/// workloads) to the next. Upstream's `generateServiceEntry` leaves the
/// resolution NONE with endpoints, which istiod's validation refuses
/// ("no endpoints should be provided for resolution type none"); here it
/// is STATIC, which changes nothing the test asserts. Creation times
/// increase with each object, as the API server stamps them.
#[test]
fn upstream_service_overlap() {
    for host in ["foo.com", "*.foo.com"] {
        let mut s = Env::new("cluster0", "testnetwork");
        let mut created = 0;
        let mut add = |s: &mut Env, i: u32, ns: &str| {
            created += 1;
            s.apply(&format!(
                "apiVersion: networking.istio.io/v1\nkind: ServiceEntry\n\
                 metadata: {{name: se-{i}, namespace: {ns}, creationTimestamp: '2024-01-01T00:00:{created:02}Z'}}\n\
                 spec: {{hosts: ['{host}'], addresses: [10.255.0.{i}], resolution: STATIC, ports: [{{name: http, number: 80, targetPort: 8080}}],\n\
                 endpoints: [{{address: 10.10.0.{i}, ports: {{http: 8081}}}}]}}\n"
            ))
        };
        let ep = |ns: &str, i: u32| format!("cluster0/networking.istio.io/ServiceEntry/{ns}/se-{i}/10.10.0.{i}");
        let svc = |ns: &str| format!("{ns}/{host}");
        let canonical = |s: &Env| -> String {
            let c = s.index.services().find(|(_, i)| i.service.hostname == host && i.service.canonical);
            c.map(|(_, i)| i.object.clone()).unwrap_or_default()
        };
        pushed(&add(&mut s, 11, "original"), &[&svc("original"), &ep("original", 11)]);
        assert!(s.by_vip("10.255.0.11").contains(&svc("original")), "{host}");
        assert_eq!(canonical(&s), "se-11", "{host}");
        pushed(&add(&mut s, 1, NS), &[&svc(NS), &ep(NS, 1)]);
        assert!(s.by_vip("10.255.0.1").contains(&svc(NS)), "{host}");
        // The newer one of ns1: nothing changes.
        assert_eq!(add(&mut s, 2, NS), set(&[]), "{host}");
        assert!(s.by_vip("10.255.0.2").is_empty(), "{host}");
        // The canonical one goes: ns1's becomes canonical.
        let r = ObjectRef {
            kind: "ServiceEntry".into(),
            namespace: "original".into(),
            name: "se-11".into(),
            service: None,
        };
        s.remove(&r);
        pushed(&s.changed(&[r]), &[&svc("original"), &ep("original", 11), &svc(NS)]);
        assert_eq!(canonical(&s), "se-1", "{host}");
        // ns1's holder goes: the newer takes over.
        pushed(&s.delete("ServiceEntry", "se-1"), &[&svc(NS), &ep(NS, 2), &ep(NS, 1)]);
        assert!(s.by_vip("10.255.0.1").is_empty(), "{host}");
        assert!(s.by_vip("10.255.0.2").contains(&svc(NS)), "{host}");
        assert_eq!(canonical(&s), "se-2", "{host}");
    }
}

/// Upstream `TestAmbientIndex_NetworkAndClusterIDs` ("values unset",
/// "values set"): a pod is found by its address on the network given.
#[test]
fn upstream_network_and_cluster_ids() {
    for (cluster, network) in [("", ""), ("cluster0", "testnetwork")] {
        let mut s = Env::new(cluster, network);
        assert_eq!(s.add_pod("127.0.0.1", "pod1", "sa1", "app: a", true), set(&[&s.pod("pod1")]));
        assert_eq!(s.lookup_names(&format!("{network}/127.0.0.1")), ["pod1"], "{cluster:?} {network:?}");
    }
}

/// Upstream `TestAmbientIndex_WorkloadNotFound`: an address no pod has
/// finds nothing.
#[test]
fn upstream_workload_not_found() {
    let mut s = Env::new("cluster0", "testnetwork");
    s.add_pod("127.0.0.1", "pod1", "sa1", "app: a", true);
    assert!(s.lookup_names("testnetwork/10.0.0.1").is_empty());
}

/// Upstream `TestAmbientIndex_LookupWorkloads`: pods found by address and
/// by uid, pod3 as upstream's expected Workload.
#[test]
fn upstream_lookup_workloads() {
    use istiod_proto::istio::workload::{WorkloadStatus, WorkloadType};
    let mut s = Env::new("cluster0", "testnetwork");
    s.add_pod("127.0.0.1", "pod1", "sa1", "app: a", true);
    s.add_pod("127.0.0.2", "pod2", "sa1", "app: a, other: label", true);
    s.add_pod("127.0.0.3", "pod3", "sa1", "app: other", true);
    let names: BTreeSet<String> = ["pod1", "pod2", "pod3"].iter().map(|p| s.pod(p)).collect();
    assert_eq!(s.all_names(), names);
    assert_eq!(s.lookup_names("testnetwork/127.0.0.1"), ["pod1"]);
    assert_eq!(s.lookup_names("testnetwork/127.0.0.2"), ["pod2"]);
    let want = Workload {
        name: "pod3".into(),
        namespace: NS.into(),
        addresses: vec![vec![127, 0, 0, 3]],
        network: "testnetwork".into(),
        service_account: "sa1".into(),
        uid: s.pod("pod3"),
        node: "node1".into(),
        canonical_name: "other".into(),
        canonical_revision: "latest".into(),
        workload_type: WorkloadType::Pod as i32,
        workload_name: "pod3".into(),
        cluster_id: "cluster0".into(),
        status: WorkloadStatus::Healthy as i32,
        ..Workload::default()
    };
    for key in [s.pod("pod3"), "testnetwork/127.0.0.3".to_owned()] {
        let found = s.lookup(&key);
        assert_eq!(found.len(), 1, "{key}");
        assert_eq!(found[0].r#type, Some(address::Type::Workload(want.clone())), "{key}");
    }
}

/// Upstream `TestAmbientIndex_WaypointForWorkloadTraffic`: a waypoint
/// for `service`, `all`, `workload` or `none` traffic, used by a pod's
/// label (a workload's waypoint) and then a Service's (a service's): each
/// pushes only what the waypoint takes.
#[test]
fn upstream_waypoint_for_workload_traffic() {
    for (traffic, pod_pushed, svc_pushed) in
        [("service", false, true), ("all", true, true), ("workload", true, false), ("none", false, false)]
    {
        let mut s = Env::new("cluster0", "testnetwork");
        let (pod1, svc1) = (s.pod("pod1"), s.svc("svc1"));
        s.add_waypoint("10.0.0.10", "test-wp", traffic, true);
        assert_eq!(s.add_pod("127.0.0.1", "pod1", "sa1", "app: a", true), set(&[&pod1]), "{traffic}");
        assert_eq!(s.add_service("svc1", "app: a", "10.0.0.1"), set(&[&svc1, &pod1]), "{traffic}");
        let got = s.add_pod("127.0.0.1", "pod1", "sa1", "app: a, istio.io/use-waypoint: test-wp", true);
        assert_eq!(got, if pod_pushed { set(&[&pod1]) } else { set(&[]) }, "{traffic}: the pod");
        let got = s.add_service_labelled("svc1", "istio.io/use-waypoint: test-wp", "app: a", "10.0.0.1");
        assert_eq!(got, if svc_pushed { set(&[&svc1]) } else { set(&[]) }, "{traffic}: the service");
        pushed(&s.delete("Service", "svc1"), &[&pod1, &svc1]);
        pushed(&s.delete("Pod", "pod1"), &[&pod1]);
    }
}

/// Upstream `TestAmbientIndex_ServiceAttachedWaypoints` ("base"): a
/// Service labelled to use a waypoint (given the helper's "default"
/// traffic type, which it reads as `service`) is pushed alone, and looked
/// up by its VIP carries the waypoint's hostname.
#[test]
fn upstream_service_attached_waypoints() {
    use istiod_proto::istio::workload::gateway_address::Destination;
    let mut s = Env::new("cluster0", "testnetwork");
    let (pod1, svc1) = (s.pod("pod1"), s.svc("svc1"));
    s.add_waypoint("10.0.0.10", "test-wp", "default", true);
    assert_eq!(s.add_pod("127.0.0.1", "pod1", "sa1", "app: a", true), set(&[&pod1]));
    assert_eq!(s.add_service("svc1", "app: a", "10.0.0.1"), set(&[&pod1, &svc1]));
    let got = s.add_service_labelled("svc1", "istio.io/use-waypoint: test-wp", "app: a", "10.0.0.1");
    assert_eq!(got, set(&[&svc1]));
    let found = s.lookup("testnetwork/10.0.0.1");
    let Some(address::Type::Service(svc)) = &found[0].r#type else { panic!("the service first: {found:?}") };
    match svc.waypoint.as_ref().and_then(|w| w.destination.as_ref()) {
        Some(Destination::Hostname(h)) => assert_eq!(h.hostname, "test-wp.ns1.svc.company.com"),
        other => panic!("a hostname: {other:?}"),
    }
}
