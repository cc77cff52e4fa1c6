//! Which endpoints a cluster takes and its panic threshold, ported from
//! istiod's tests (named in each case): `TestSupportsUnhealthyEndpoints`
//! (pilot/pkg/xds/endpoints/endpoint_builder_test.go),
//! `TestEDSUnhealthyEndpoints` (pilot/pkg/xds/eds_test.go),
//! `TestApplyLoadBalancer` (pilot/pkg/networking/core/cluster_test.go), at
//! istio/istio 86c9f01; cases of ours say so.

use istiod_proto::envoy::config::core::v3::HealthStatus;
use istiod_proto::envoy::config::endpoint::v3::lb_endpoint;

use crate::meshconfig::{MeshSettings, UnhealthyEndpoints};
use crate::model::Model;

/// `example.ns` on port 80 with a ready, a not-ready, a terminating and
/// a still-serving terminating endpoint; `meta` in the Service's metadata
/// and `spec` in its spec; `extra` objects added.
fn model_of(extra: &str, meta: &str, spec: &str, mesh: MeshSettings) -> Model {
    let yaml = format!(
        r#"
apiVersion: v1
kind: Service
metadata: {{name: example, namespace: ns, {meta}}}
spec:
  {spec}
  clusterIP: 10.96.0.9
  ports: [{{name: http, port: 80, targetPort: 8080}}]
---
apiVersion: discovery.k8s.io/v1
kind: EndpointSlice
metadata: {{name: example-1, namespace: ns, labels: {{kubernetes.io/service-name: example}}}}
addressType: IPv4
ports: [{{name: http, port: 8080}}]
endpoints:
- addresses: ["10.0.0.1"]
  conditions: {{ready: true, serving: true, terminating: false}}
- addresses: ["10.0.0.2"]
  conditions: {{ready: false, serving: false, terminating: false}}
- addresses: ["10.0.0.3"]
  conditions: {{ready: false, serving: false, terminating: true}}
- addresses: ["10.0.0.4"]
  conditions: {{ready: false, serving: true, terminating: true}}
{extra}
"#
    );
    let dir = tempfile::tempdir().unwrap();
    std::fs::write(dir.path().join("m.yaml"), yaml).unwrap();
    let loaded = istiod_kubewatch::config_dir::load(dir.path()).unwrap();
    assert!(loaded.errors.is_empty(), "{:?}", loaded.errors);
    let mut m = Model::build(&loaded.objects, "cluster.local");
    m.mesh = std::sync::Arc::new(mesh);
    m
}

fn model(extra: &str, service_labels: &str, mesh: MeshSettings) -> Model {
    model_of(extra, &format!("labels: {{{service_labels}}}"), "", mesh)
}

fn dr(min_health_percent: i32) -> String {
    format!(
        r#"---
apiVersion: networking.istio.io/v1
kind: DestinationRule
metadata: {{name: dr, namespace: ns}}
spec:
  host: example.ns.svc.cluster.local
  trafficPolicy:
    outlierDetection: {{minHealthPercent: {min_health_percent}, consecutive5xxErrors: 3}}
"#
    )
}

fn mesh(always: bool, by_default: bool) -> MeshSettings {
    MeshSettings { unhealthy: UnhealthyEndpoints { always, by_default }, ..MeshSettings::default() }
}

/// The cluster `outbound|80||example…` where the rule applies (or none
/// is): its endpoints as (address, health), and its panic threshold.
fn served(m: &Model) -> (Vec<(String, HealthStatus)>, Option<f64>) {
    let svc = &m.services["example.ns.svc.cluster.local"];
    let forms = crate::translate::cluster::outbound_of(m, svc);
    let (_, forms) = forms.iter().find(|(n, _)| &**n == "outbound|80||example.ns.svc.cluster.local").unwrap();
    let form = forms.forms.last().unwrap();
    let cla: istiod_proto::envoy::config::endpoint::v3::ClusterLoadAssignment =
        prost::Message::decode(form.endpoints.clone().unwrap()).unwrap();
    let eps = cla
        .endpoints
        .iter()
        .flat_map(|l| &l.lb_endpoints)
        .map(|e| {
            let Some(lb_endpoint::HostIdentifier::Endpoint(ep)) = &e.host_identifier else { panic!("{e:?}") };
            let Some(istiod_proto::envoy::config::core::v3::address::Address::SocketAddress(a)) =
                &ep.address.as_ref().unwrap().address
            else {
                panic!()
            };
            (a.address.clone(), HealthStatus::try_from(e.health_status).unwrap())
        })
        .collect();
    let panic =
        form.cluster.common_lb_config.as_ref().and_then(|c| c.healthy_panic_threshold.as_ref()).map(|p| p.value);
    (eps, panic)
}

fn addresses(eps: &[(String, HealthStatus)]) -> Vec<&str> {
    eps.iter().map(|(a, _)| a.as_str()).collect()
}

/// Upstream `TestSupportsUnhealthyEndpoints`: every case, read as whether
/// the not-ready endpoint is sent.
#[test]
fn upstream_supports_unhealthy_endpoints() {
    // (case, PILOT_SEND_UNHEALTHY_ENDPOINTS, PILOT_AUTO_SEND_UNHEALTHY_ENDPOINTS, DR minHealthPercent, want)
    type Case = (&'static str, bool, bool, Option<i32>, bool);
    let cases: [Case; 6] = [
        ("both flags off", false, false, None, false),
        ("GlobalSendUnhealthyEndpoints=true", true, false, None, true),
        ("DefaultSendUnhealthyEndpoints=true, no DR", false, true, None, true),
        ("DefaultSendUnhealthyEndpoints=true, DR minHealthPercent=0", false, true, Some(0), true),
        ("DefaultSendUnhealthyEndpoints=true, DR minHealthPercent=50", false, true, Some(50), false),
        ("GlobalSendUnhealthyEndpoints overrides DR minHealthPercent", true, false, Some(50), true),
    ];
    for (name, always, by_default, min, want) in cases {
        let m = model(&min.map(dr).unwrap_or_default(), "", mesh(always, by_default));
        let (eps, _) = served(&m);
        assert_eq!(addresses(&eps).contains(&"10.0.0.2"), want, "{name}: {eps:?}");
        if want {
            assert!(eps.contains(&("10.0.0.2".into(), HealthStatus::Unhealthy)), "{name}: sent as unhealthy");
        }
    }
}

/// Upstream `TestEDSUnhealthyEndpoints`' terminating step ("Mark an
/// endpoint as terminating, it should be removed"), and the draining rule
/// of `filterIstioEndpoint` (only a persistent-session service keeps
/// them).
#[test]
fn terminating_endpoints_are_never_sent_and_draining_only_for_persistent_sessions() {
    for (always, by_default) in [(false, false), (true, false), (false, true)] {
        let (eps, _) = served(&model("", "", mesh(always, by_default)));
        assert!(!addresses(&eps).contains(&"10.0.0.3"), "{eps:?}");
        assert!(!addresses(&eps).contains(&"10.0.0.4"), "not a persistent-session service: {eps:?}");
    }
    let (eps, _) = served(&model("", "istio.io/persistent-session: sticky", MeshSettings::default()));
    assert!(eps.contains(&("10.0.0.4".into(), HealthStatus::Draining)), "{eps:?}");
    assert!(!addresses(&eps).contains(&"10.0.0.3"), "{eps:?}");
    // The header label does not keep them (istiod's filterIstioEndpoint).
    let (eps, _) = served(&model("", "istio.io/persistent-session-header: x-session", MeshSettings::default()));
    assert!(!addresses(&eps).contains(&"10.0.0.4"), "{eps:?}");
    // The label's name is PILOT_PERSISTENT_SESSION_LABEL's; empty turns it off.
    let off = MeshSettings { persistent_session_labels: [String::new(), String::new()], ..MeshSettings::default() };
    let (eps, _) = served(&model("", "istio.io/persistent-session: sticky", off));
    assert!(!addresses(&eps).contains(&"10.0.0.4"), "{eps:?}");
}

/// Upstream `TestApplyLoadBalancer`'s panic threshold cases: "Send
/// Unhealthy Endpoints enabled" (0), "DefaultSendUnhealthyEndpoints
/// disables panic threshold when no outlier detection" (0), "...does not
/// override panic threshold set by outlier detection" (the rule's 70), and
/// with neither flag and no outlier detection Envoy's own (unset);
/// `applyOutlierDetection`: `minHealthPercent` as the threshold, 0 where
/// unhealthy endpoints are forced.
#[test]
fn upstream_apply_load_balancer_panic_threshold() {
    // (case, always, by default, minHealthPercent, threshold)
    type Case = (&'static str, bool, bool, Option<i32>, Option<f64>);
    let cases: [Case; 6] = [
        ("Send Unhealthy Endpoints enabled", true, false, None, Some(0.0)),
        (
            "DefaultSendUnhealthyEndpoints disables panic threshold when no outlier detection",
            false,
            true,
            None,
            Some(0.0),
        ),
        (
            "DefaultSendUnhealthyEndpoints does not override panic threshold set by outlier detection",
            false,
            true,
            Some(70),
            Some(70.0),
        ),
        ("ours, from applyLoadBalancer: neither flag, no outlier detection: Envoy's default", false, false, None, None),
        (
            "ours, from applyOutlierDetection: outlier detection without minHealthPercent",
            false,
            false,
            Some(0),
            Some(0.0),
        ),
        ("ours, from applyOutlierDetection: forced, the threshold disabled", true, true, Some(70), Some(0.0)),
    ];
    for (name, always, by_default, min, want) in cases {
        let (_, panic) = served(&model(&min.map(dr).unwrap_or_default(), "", mesh(always, by_default)));
        assert_eq!(panic, want, "{name}");
    }
}

/// Ours, from istiod's `ForcesSupportUnhealthyEndpoints`
/// (pilot/pkg/model/service.go): a Service that prefers near endpoints takes unhealthy ones whatever its outlier detection says.
#[test]
fn traffic_distribution_forces_unhealthy_endpoints() {
    let served_as = |meta: &str, spec: &str| served(&model_of(&dr(50), meta, spec, MeshSettings::default()));
    for (meta, spec) in [
        ("", "trafficDistribution: PreferClose"),
        ("", "trafficDistribution: PreferSameNode"),
        ("annotations: {networking.istio.io/traffic-distribution: preferclose}", ""),
    ] {
        let (eps, panic) = served_as(meta, spec);
        assert!(addresses(&eps).contains(&"10.0.0.2") && panic == Some(0.0), "{meta} {spec}: {eps:?} {panic:?}");
    }
    for (meta, spec) in [("", ""), ("annotations: {networking.istio.io/traffic-distribution: Any}", "")] {
        let (eps, panic) = served_as(meta, spec);
        assert!(!addresses(&eps).contains(&"10.0.0.2") && panic == Some(50.0), "{meta} {spec}: {eps:?} {panic:?}");
    }
}

/// Ours, from istiod's `buildOutboundClusters` (cluster.go) and
/// `grpcgen/cds.go`: the default cluster of a service with either
/// persistent-session label keeps DRAINING endpoints for a cookie or header
/// to pick (`overrideHostStatus` HEALTHY, DRAINING, UNKNOWN, DEGRADED);
/// without one Envoy's default set is left alone.
#[test]
fn persistent_session_clusters_override_host_status() {
    let statuses = |labels: &str| {
        let m = model("", labels, MeshSettings::default());
        let svc = &m.services["example.ns.svc.cluster.local"];
        let forms = crate::translate::cluster::outbound_of(&m, svc);
        let (_, forms) = forms.iter().find(|(n, _)| &**n == "outbound|80||example.ns.svc.cluster.local").unwrap();
        let lb = forms.forms.last().unwrap().cluster.common_lb_config.clone().unwrap_or_default();
        lb.override_host_status.map(|s| s.statuses)
    };
    let kept = [HealthStatus::Healthy, HealthStatus::Draining, HealthStatus::Unknown, HealthStatus::Degraded];
    let kept = Some(kept.map(|s| s as i32).to_vec());
    assert_eq!(statuses("istio.io/persistent-session: sticky"), kept);
    assert_eq!(statuses("istio.io/persistent-session-header: x-session"), kept);
    assert_eq!(statuses(""), None);
}

/// istiod's `PILOT_DRAINING_LABEL` (`buildEnvoyLbEndpoint`,
/// `filterIstioEndpoint`): a ready endpoint whose pod carries
/// `istio.io/draining` is draining: left out unless the service keeps
/// draining endpoints for persistent sessions, then sent as DRAINING; an
/// empty label name turns it off. (Ours: upstream tests this through
/// `TestEndpointsByNetworkFilter`'s fixtures, not as a unit.)
#[test]
fn the_draining_label_makes_an_endpoint_draining() {
    let pod = r#"---
apiVersion: v1
kind: Pod
metadata: {name: leaving, namespace: ns, labels: {istio.io/draining: "true"}}
spec: {nodeName: n1}
status: {podIP: 10.0.0.1}
"#;
    let (eps, _) = served(&model(pod, "", MeshSettings::default()));
    assert!(!addresses(&eps).contains(&"10.0.0.1"), "not a persistent-session service: {eps:?}");
    let (eps, _) = served(&model(pod, "istio.io/persistent-session: sticky", MeshSettings::default()));
    assert!(eps.contains(&("10.0.0.1".into(), HealthStatus::Draining)), "{eps:?}");
    let off = MeshSettings { draining_label: String::new(), ..MeshSettings::default() };
    let (eps, _) = served(&model(pod, "", off));
    assert!(eps.contains(&("10.0.0.1".into(), HealthStatus::Healthy)), "{eps:?}");
}

/// Ours: a load assignment assembled from its endpoints' bytes
/// (`encoded_load_assignment`, one encoding per endpoint shared by a
/// service's clusters) is, byte for byte, prost's encoding of the typed
/// one, for bookinfo's services (endpoints in several localities, subsets
/// by version, dual-stack and not) and the unhealthy, terminating and
/// draining endpoints of `example`, with and without the telemetry label,
/// and with one memo shared across every cluster of a service.
#[test]
fn load_assignments_assembled_from_encoded_endpoints_are_prosts_bytes() {
    use prost::Message;
    let dir = std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("../examples/bookinfo");
    let objects = istiod_kubewatch::config_dir::load(&dir).unwrap().objects;
    let telemetry = MeshSettings { telemetry_labels: (true, true), draining_label: "drain".into(), ..mesh(true, true) };
    let without = MeshSettings { telemetry_labels: (false, true), ..mesh(false, false) };
    let mut compared = 0;
    for settings in [MeshSettings::default(), telemetry, without] {
        let settings = std::sync::Arc::new(settings);
        let bookinfo = Model::build_in(&objects, "cluster.local", settings.clone());
        let example = model(&dr(0), "", (*settings).clone());
        for m in [&bookinfo, &example] {
            for svc in m.services.values() {
                let mut memo = super::Encoded::default();
                let v1 = std::collections::BTreeMap::from([("version".to_owned(), "v1".to_owned())]);
                let none = std::collections::BTreeMap::from([("version".to_owned(), "none".to_owned())]);
                for port in &svc.ports {
                    for subset in [None, Some(&v1), Some(&none)] {
                        let (takes, _) = super::Takes::of(&m.mesh, svc, None);
                        let name = format!("outbound|{}||{}", port.port, svc.hostname);
                        let typed = super::load_assignment(&name, svc, port.port, subset, takes).encode_to_vec();
                        let assembled = super::encoded_load_assignment(&name, svc, port.port, subset, takes, &mut memo);
                        assert_eq!(&assembled[..], &typed[..], "{name} {subset:?}");
                        compared += 1;
                    }
                }
            }
        }
    }
    assert!(compared > 30, "{compared}");
}
