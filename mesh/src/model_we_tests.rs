//! Upstream Istio `pilot/pkg/serviceregistry/serviceregistry_test.go`,
//! `TestWorkloadInstances`: the subtests where a Kubernetes Service (or a
//! ServiceEntry) selects WorkloadEntries, ported as manifests. Expected
//! values are upstream's (`expectServiceEndpoints` / `expectEndpoints`:
//! endpoint address and endpoint port per service port), compared sorted as
//! upstream sorts them.
//!
//! Fixtures (top of `TestWorkloadInstances`): namespace `namespace`, labels
//! `app: foo`; Service `service` (clusterIP 9.9.9.9, port `http` 80,
//! selector `app: foo`); Pod `pod` (1.2.3.4, made Running and Ready by
//! `makePod`) with an EndpointSlice `service` (port `http` 80, address
//! 1.2.3.4; upstream's `createEndpoints` leaves out `conditions` and
//! `targetRef`, here they are written as the EndpointSlice controller
//! would); WorkloadEntry `workload` (2.3.4.5, labels `app: foo`).
//! Upstream's `makeService` defaults an unset `targetPort` to `port`, as the
//! API server does; cases that leave it unset are checked both ways.
//!
//! The "wle occur earlier" variants differ from their base subtests only in
//! the order of events; a build from all objects at once covers both.
//!
//! Not ported (listed for completeness; not asked for or not expressible):
//! - "All directions", "All directions with deletion": a Service and a
//!   ServiceEntry with the same hostname, whose endpoints upstream merges
//!   in one index entry; the model keys services by hostname, one each.
//! - The `fx.WaitOrFail` / `fx.AssertEmpty` event assertions of every
//!   subtest (which pushes happen, in which order): a full build has no
//!   events.

use std::sync::Arc;

use crate::model::*;

use crate::model_tests::build;

/// (address, service_port, port) of each endpoint of `host`, sorted.
fn eps(m: &Model, host: &str) -> Vec<(String, u16, u16)> {
    let s = m
        .services
        .get(host)
        .unwrap_or_else(|| panic!("no service {host}; have {:?}", m.services.keys().collect::<Vec<_>>()));
    let mut v: Vec<_> = s.endpoints.iter().map(|e| (e.address.clone(), e.service_port, e.port)).collect();
    v.sort_by(|a, b| (a.1, &a.0, a.2).cmp(&(b.1, &b.0, b.2)));
    v
}

type Want = &'static [(&'static str, u16, u16)];

fn check(m: &Model, host: &str, want: Want, what: &str) {
    let mut want: Vec<(String, u16, u16)> = want.iter().map(|&(a, sp, p)| (a.to_owned(), sp, p)).collect();
    want.sort_by(|a, b| (a.1, &a.0, a.2).cmp(&(b.1, &b.0, b.2)));
    assert_eq!(eps(m, host), want, "{what}");
}

const HOST: &str = "service.namespace.svc.cluster.local";

/// Upstream's `service` with these `spec.ports` (a YAML flow list).
fn service(ports: &str) -> String {
    r#"
---
apiVersion: v1
kind: Service
metadata: {name: service, namespace: namespace}
spec:
  clusterIP: 9.9.9.9
  selector: {app: foo}
  ports: PORTS
"#
    .replace("PORTS", ports)
}

/// Upstream's `pod` as `makePod` leaves it, and `createEndpoints(service,
/// [{http 80}], [1.2.3.4])`.
const POD_AND_SLICE: &str = r#"
---
apiVersion: v1
kind: Pod
metadata: {name: pod, namespace: namespace, labels: {app: foo}}
status:
  podIP: 1.2.3.4
  podIPs: [{ip: 1.2.3.4}]
  phase: Running
  conditions: [{type: Ready, status: "True"}]
---
apiVersion: discovery.k8s.io/v1
kind: EndpointSlice
metadata:
  name: service
  namespace: namespace
  labels: {kubernetes.io/service-name: service}
addressType: IPv4
ports: [{name: http, port: 80, protocol: TCP}]
endpoints:
- addresses: [1.2.3.4]
  conditions: {ready: true}
  targetRef: {kind: Pod, name: pod, namespace: namespace}
"#;

/// Upstream's `workloadEntry` (`workload`, labels `app: foo`) at `address`
/// with these extra spec fields (e.g. `ports: {my-port: 8080}`); `health`
/// is upstream's `setHealth`: the health-check annotation and a `Healthy`
/// condition.
fn workload_entry(address: &str, extra: &str, health: Option<bool>) -> String {
    let (annotations, status) = match health {
        None => (String::new(), String::new()),
        Some(h) => (
            r#"  annotations: {proxy.istio.io/health-checks-enabled: "true"}"#.to_owned(),
            format!("status:\n  conditions: [{{type: Healthy, status: \"{}\"}}]\n", if h { "True" } else { "False" }),
        ),
    };
    format!(
        r#"
---
apiVersion: networking.istio.io/v1
kind: WorkloadEntry
metadata:
  name: workload
  namespace: namespace
{annotations}
spec:
  address: {address}
  labels: {{app: foo}}
  {extra}
{status}"#
    )
}

/// `TestWorkloadInstances` subtests "Service selects WorkloadEntry",
/// "Service selects WorkloadEntry: wle occur earlier", "Service selects
/// both pods and WorkloadEntry", "Service selects both pods and
/// WorkloadEntry: wle occur earlier", "Service selects WorkloadEntry with
/// port name", "Service selects WorkloadEntry with targetPort name",
/// "Service selects WorkloadEntry with targetPort number".
#[test]
fn service_selects_workload_entries() {
    let we = workload_entry("2.3.4.5", "", None);
    let we_my_port = workload_entry("2.3.4.5", "ports: {my-port: 8080}", None);
    let cases: [(&str, String, Want); 8] = [
        (
            "Service selects WorkloadEntry (+ wle occur earlier)",
            service("[{name: http, port: 80}]") + &we,
            &[("2.3.4.5", 80, 80)],
        ),
        (
            "Service selects WorkloadEntry (+ wle occur earlier), targetPort as makeService defaults it",
            service("[{name: http, port: 80, targetPort: 80}]") + &we,
            &[("2.3.4.5", 80, 80)],
        ),
        (
            "Service selects both pods and WorkloadEntry (+ wle occur earlier)",
            service("[{name: http, port: 80}]") + &we + POD_AND_SLICE,
            &[("1.2.3.4", 80, 80), ("2.3.4.5", 80, 80)],
        ),
        (
            "Service selects both pods and WorkloadEntry (+ wle occur earlier), targetPort as makeService defaults it",
            service("[{name: http, port: 80, targetPort: 80}]") + &we + POD_AND_SLICE,
            &[("1.2.3.4", 80, 80), ("2.3.4.5", 80, 80)],
        ),
        (
            "Service selects WorkloadEntry with port name",
            service("[{name: my-port, port: 80}]") + &we_my_port,
            &[("2.3.4.5", 80, 8080)],
        ),
        (
            "Service selects WorkloadEntry with port name, targetPort as makeService defaults it",
            service("[{name: my-port, port: 80, targetPort: 80}]") + &we_my_port,
            &[("2.3.4.5", 80, 8080)],
        ),
        (
            "Service selects WorkloadEntry with targetPort name",
            service("[{name: http, port: 80, targetPort: my-port}]") + &we_my_port,
            &[("2.3.4.5", 80, 8080)],
        ),
        (
            "Service selects WorkloadEntry with targetPort number",
            service("[{name: http, port: 80, targetPort: 8080}, {name: http2, port: 90, targetPort: 9090}]") + &we,
            &[("2.3.4.5", 80, 8080), ("2.3.4.5", 90, 9090)],
        ),
    ];
    for (name, yaml, want) in cases {
        check(&build(&yaml), HOST, want, name);
    }
}

/// `TestWorkloadInstances` subtest "Service selects WorkloadEntry: update
/// service": the port changed to 8080 (targetPort defaulted to it by
/// `makeService`), then targetPort 9090, then the Service deleted.
#[test]
fn service_selects_workload_entry_update_service() {
    let we = workload_entry("2.3.4.5", "", None);
    let steps: [(&str, String, Want); 4] = [
        ("initial", service("[{name: http, port: 80}]") + &we, &[("2.3.4.5", 80, 80)]),
        ("port 8080", service("[{name: http, port: 8080}]") + &we, &[("2.3.4.5", 8080, 8080)]),
        (
            "port 8080, targetPort as makeService defaults it",
            service("[{name: http, port: 8080, targetPort: 8080}]") + &we,
            &[("2.3.4.5", 8080, 8080)],
        ),
        ("targetPort 9090", service("[{name: http, port: 8080, targetPort: 9090}]") + &we, &[("2.3.4.5", 8080, 9090)]),
    ];
    for (name, yaml, want) in steps {
        check(&build(&yaml), HOST, want, name);
    }
    // Service deleted: no cluster, no endpoints.
    let m = build(&we);
    assert!(!m.services.contains_key(HOST), "service deleted");
}

/// `TestWorkloadInstances` subtest "Service selects WorkloadEntry: update
/// workloadEntry": the address changed to 3.4.5.6, then the entry deleted.
#[test]
fn service_selects_workload_entry_update_workload_entry() {
    let svc = service("[{name: http, port: 80}]");
    check(&build(&(svc.clone() + &workload_entry("2.3.4.5", "", None))), HOST, &[("2.3.4.5", 80, 80)], "initial");
    check(&build(&(svc.clone() + &workload_entry("3.4.5.6", "", None))), HOST, &[("3.4.5.6", 80, 80)], "new address");
    check(&build(&svc), HOST, &[], "entry deleted");
}

/// `TestWorkloadInstances` subtest "Service selects WorkloadEntry: health
/// status" (`features.WorkloadEntryHealthChecks` on): unhealthy, healthy,
/// unhealthy again, then the health-check annotation and status removed.
#[test]
fn service_selects_workload_entry_health_status() {
    let svc = service("[{name: http, port: 80}]");
    let steps: [(&str, Option<bool>, Want); 4] = [
        ("unhealthy", Some(false), &[]),
        ("healthy", Some(true), &[("2.3.4.5", 80, 80)]),
        ("unhealthy again", Some(false), &[]),
        ("health status removed", None, &[("2.3.4.5", 80, 80)]),
    ];
    for (name, health, want) in steps {
        check(&build(&(svc.clone() + &workload_entry("2.3.4.5", "", health))), HOST, want, name);
    }
}

/// A STATIC ServiceEntry `name` for `host` with these ports, selecting
/// these labels.
fn service_entry(name: &str, host: &str, ports: &str, selector: &str) -> String {
    format!(
        r#"
---
apiVersion: networking.istio.io/v1
kind: ServiceEntry
metadata: {{name: {name}, namespace: namespace}}
spec:
  hosts: [{host}]
  ports: {ports}
  workloadSelector: {{labels: {selector}}}
  resolution: STATIC
"#
    )
}

/// A WorkloadEntry `workloadentry` at 2.3.4.5 with these labels and extra
/// spec fields.
fn workloadentry(labels: &str, extra: &str) -> String {
    format!(
        r#"
---
apiVersion: networking.istio.io/v1
kind: WorkloadEntry
metadata: {{name: workloadentry, namespace: namespace}}
spec:
  address: 2.3.4.5
  labels: {labels}
  {extra}
"#
    )
}

/// `TestWorkloadInstances` subtest "ServiceEntry selects WorkloadEntry":
/// two ServiceEntries share an entry; dropping its `app.foo` label
/// unselects it from the first.
#[test]
fn service_entry_selects_workload_entry() {
    let http = "[{name: http, number: 80, protocol: HTTP}]";
    let ses = service_entry("service-entry-1", "service-1.namespace.svc.cluster.local", http, r#"{app.foo: "true"}"#)
        + &service_entry("service-entry-2", "service-2.namespace.svc.cluster.local", http, r#"{app.bar: "true"}"#);
    let (h1, h2) = ("service-1.namespace.svc.cluster.local", "service-2.namespace.svc.cluster.local");
    let m = build(&(ses.clone() + &workloadentry(r#"{app.foo: "true", app.bar: "true"}"#, "")));
    check(&m, h1, &[("2.3.4.5", 80, 80)], "both labels: service-1");
    check(&m, h2, &[("2.3.4.5", 80, 80)], "both labels: service-2");
    let m = build(&(ses + &workloadentry(r#"{app.bar: "true"}"#, "")));
    check(&m, h1, &[], "app.foo dropped: service-1");
    check(&m, h2, &[("2.3.4.5", 80, 80)], "app.foo dropped: service-2");
}

/// `TestWorkloadInstances` subtest "Multiport ServiceEntry selects
/// WorkloadEntry": the entry maps both port names; then its `tcp` port
/// changes to 4000.
#[test]
fn multiport_service_entry_selects_workload_entry() {
    let se = service_entry(
        "service-entry",
        HOST,
        "[{name: http, number: 80, protocol: HTTP}, {name: tcp, number: 3000, protocol: TCP}]",
        r#"{app.foo: "true"}"#,
    );
    let m = build(&(se.clone() + &workloadentry(r#"{app.foo: "true"}"#, "ports: {http: 8080, tcp: 3000}")));
    check(&m, HOST, &[("2.3.4.5", 80, 8080), ("2.3.4.5", 3000, 3000)], "initial");
    let m = build(&(se + &workloadentry(r#"{app.foo: "true"}"#, "ports: {http: 8080, tcp: 4000}")));
    check(&m, HOST, &[("2.3.4.5", 80, 8080), ("2.3.4.5", 3000, 4000)], "tcp port 4000");
}

/// `PILOT_ENABLE_K8S_SELECT_WORKLOAD_ENTRIES=false`: the Service keeps its
/// Pods' endpoints only; `PILOT_ENABLE_SERVICEENTRY_SELECT_PODS=false`: a
/// ServiceEntry's selector picks WorkloadEntries only.
#[test]
fn cross_selection_can_be_turned_off() {
    let se = r#"
---
apiVersion: networking.istio.io/v1
kind: ServiceEntry
metadata: {name: se, namespace: namespace}
spec:
  hosts: [se.example.com]
  ports: [{number: 80, name: http, protocol: HTTP}]
  resolution: STATIC
  workloadSelector: {labels: {app: foo}}
"#;
    let yaml =
        format!("{}{POD_AND_SLICE}{}{se}", service("[{name: http, port: 80}]"), workload_entry("2.3.4.5", "", None));
    let dir = tempfile::tempdir().unwrap();
    std::fs::write(dir.path().join("m.yaml"), yaml).unwrap();
    let loaded = istiod_kubewatch::config_dir::load(dir.path()).unwrap();
    let with = |k8s: bool, pods: bool| {
        let mesh = crate::meshconfig::MeshSettings {
            k8s_select_workload_entries: k8s,
            service_entry_select_pods: pods,
            ..Default::default()
        };
        Model::build_in(&loaded.objects, "cluster.local", Arc::new(mesh))
    };
    let addrs = |m: &Model, host: &str| {
        let mut a: Vec<String> = m.services[host].endpoints.iter().map(|e| e.address.clone()).collect();
        a.sort();
        a
    };
    let svc = "service.namespace.svc.cluster.local";
    assert_eq!(addrs(&with(true, true), svc), ["1.2.3.4", "2.3.4.5"]);
    assert_eq!(addrs(&with(true, true), "se.example.com"), ["1.2.3.4", "2.3.4.5"]);
    assert_eq!(addrs(&with(false, true), svc), ["1.2.3.4"]);
    assert_eq!(addrs(&with(true, false), "se.example.com"), ["2.3.4.5"]);
}

/// A ServiceEntry's allocated addresses (`status.addresses`) count only
/// with `PILOT_ENABLE_IP_AUTOALLOCATE`, only where they parse, an IPv4 and
/// an IPv6 one per host.
#[test]
fn allocated_addresses_are_read_as_istiod_reads_them() {
    let yaml = r#"
apiVersion: networking.istio.io/v1
kind: ServiceEntry
metadata: {name: se, namespace: namespace}
spec:
  hosts: [a.example.com]
  ports: [{number: 5432, name: tcp, protocol: TCP}]
  resolution: DNS
status:
  addresses:
  - {host: a.example.com, value: "not-an-ip"}
  - {host: a.example.com, value: 240.240.0.9}
  - {host: a.example.com, value: 240.240.0.10}
  - {host: a.example.com, value: "2001:2:0::9"}
  - {host: b.example.com, value: 240.240.0.11}
"#;
    let dir = tempfile::tempdir().unwrap();
    std::fs::write(dir.path().join("m.yaml"), yaml).unwrap();
    let loaded = istiod_kubewatch::config_dir::load(dir.path()).unwrap();
    let with = |on: bool| {
        let mut mesh = crate::meshconfig::MeshSettings::default();
        mesh.dns.ip_autoallocate = on;
        Model::build_in(&loaded.objects, "cluster.local", Arc::new(mesh)).services["a.example.com"]
            .auto_addresses
            .clone()
    };
    assert_eq!(with(true), ["240.240.0.9", "2001:2::9"]);
    assert!(with(false).is_empty());
}
