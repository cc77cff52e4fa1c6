//! What was read and is not applied: objects and fields istiod would act on
//! that this server accepts, validates and then leaves out of what proxies
//! receive. Each is one line in `/debug/config_report` (`notApplied`), and
//! logged once when it appears; none is fatal. The compatibility page says
//! the same per feature.

use istiod_config::istio::{IstioKind, IstioSpec};
use istiod_config::objects::Objects;
use serde::Serialize;

/// One object (or field of one) read and not applied.
#[derive(Debug, Clone, PartialEq, Eq, PartialOrd, Ord, Serialize)]
pub struct NotApplied {
    /// The object's kind.
    pub kind: String,
    /// `namespace/name`.
    pub name: String,
    /// What of it is not applied, and why.
    pub what: String,
}

impl std::fmt::Display for NotApplied {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "{} {}: {}", self.kind, self.name, self.what)
    }
}

/// Every object or field of `objs` that is read and not applied by
/// `model` (built from them), sorted.
pub fn not_applied(objs: &Objects, model: &crate::Model) -> Vec<NotApplied> {
    let mesh = &model.mesh;
    let mut out = Vec::new();
    let mut add = |kind: &str, ns: &str, name: &str, what: &str| {
        out.push(NotApplied { kind: kind.into(), name: format!("{ns}/{name}"), what: what.into() });
    };
    for o in &objs.istio {
        let (ns, name) = (o.meta.ns(), o.meta.name.as_str());
        match &o.spec {
            IstioSpec::Ext(IstioKind::EnvoyFilter, spec) => {
                // Applied; what of it cannot be is said.
                let read = istiod_envoyfilter::filters::Filter::read(ns, name, "", &spec.0);
                for what in read.not_applied() {
                    add("EnvoyFilter", ns, name, &what);
                }
            }
            IstioSpec::Ext(kind @ (IstioKind::WasmPlugin | IstioKind::TrafficExtension), _) => {
                // Applied; those istiod discards are said, with why.
                let dropped =
                    model.extensions.dropped.iter().find(|(k, n, m, _)| *k == kind.name() && n == ns && m == name);
                if let Some((_, _, _, why)) = dropped {
                    add(kind.name(), ns, name, &format!("discarded as istiod discards it: {why}"));
                }
            }
            IstioSpec::VirtualService(vs) => {
                // Sidecars' outbound listeners are shared: tcp/tls routes
                // apply there unless they depend on the proxy.
                let mesh_bound = crate::for_mesh(vs, ns);
                let l4 = !vs.tcp.is_empty() || !vs.tls.is_empty();
                let exported = vs.export_to.is_empty() || vs.export_to.iter().any(|e| e == "*");
                let by_source = vs
                    .tcp
                    .iter()
                    .flat_map(|r| &r.matches)
                    .any(|m| !m.source_labels.is_empty() || !m.source_namespace.is_empty())
                    || vs
                        .tls
                        .iter()
                        .flat_map(|r| &r.matches)
                        .any(|m| !m.source_labels.is_empty() || !m.source_namespace.is_empty());
                if mesh_bound && l4 && !exported {
                    add(
                        "VirtualService",
                        ns,
                        name,
                        "tcp/tls routes of a VirtualService not exported to every namespace are not applied on sidecars",
                    );
                } else if mesh_bound && by_source {
                    add(
                        "VirtualService",
                        ns,
                        name,
                        "tcp/tls matches on sourceLabels or sourceNamespace are not applied on sidecars",
                    );
                }
            }
            IstioSpec::Sidecar(sc) => {
                use istiod_config::istio::networking::CaptureMode;
                if sc.ingress.iter().any(|i| i.capture_mode == CaptureMode::None) {
                    add("Sidecar", ns, name, "ingress captureMode NONE: no listener is bound to the port");
                }
                if !mesh.tls_on_sidecar_ingress && sc.ingress.iter().any(|i| i.tls.is_some()) {
                    add(
                        "Sidecar",
                        ns,
                        name,
                        "ingress tls: not terminated unless ENABLE_TLS_ON_SIDECAR_INGRESS is set (as istiod)",
                    );
                }
                if sc.egress.iter().any(|e| !e.bind.is_empty() || e.capture_mode != CaptureMode::Default) {
                    add("Sidecar", ns, name, "egress bind/captureMode: listeners are not bound as asked");
                }
                if sc.outbound_traffic_policy.as_ref().is_some_and(|p| p.egress_proxy.is_some()) {
                    add("Sidecar", ns, name, "outboundTrafficPolicy.egressProxy: unknown traffic is not sent to it");
                }
            }
            _ => {}
        }
    }
    // BackendTLSPolicies: what their conversion left out.
    for p in model.backend_tls_problems.iter() {
        out.push(NotApplied { kind: "BackendTLSPolicy".into(), name: p.policy.clone(), what: p.what.clone() });
    }
    out.sort();
    out.dedup();
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn what_is_read_and_not_applied_is_listed() {
        let objs = istiod_config::objects::Objects {
            istio: crate::testing::istio_objects(
                "apiVersion: security.istio.io/v1\nkind: AuthorizationPolicy\nmetadata: {name: ext, namespace: a}\n\
             spec: {action: CUSTOM, provider: {name: opa}, rules: [{}]}\n---\n\
             apiVersion: security.istio.io/v1\nkind: AuthorizationPolicy\nmetadata: {name: allow, namespace: a}\n\
             spec: {rules: [{}]}\n---\n\
             apiVersion: networking.istio.io/v1alpha3\nkind: EnvoyFilter\nmetadata: {name: ef, namespace: a}\n\
             spec: {configPatches: [{applyTo: CLUSTER, patch: {operation: MERGE, value: {lb_policy: RING_HASH}}}, \
             {applyTo: EXTENSION_CONFIG, patch: {operation: MERGE, value: {name: x}}}]}\n---\n\
             apiVersion: networking.istio.io/v1alpha3\nkind: EnvoyFilter\nmetadata: {name: fine, namespace: a}\n\
             spec: {configPatches: [{applyTo: CLUSTER, patch: {operation: MERGE, value: {lb_policy: RING_HASH}}}]}\n---\n\
             apiVersion: networking.istio.io/v1\nkind: VirtualService\nmetadata: {name: db, namespace: a}\n\
             spec: {hosts: [db], tcp: [{match: [{sourceLabels: {app: x}}], route: [{destination: {host: db}}]}]}\n---\n\
             apiVersion: networking.istio.io/v1\nkind: VirtualService\nmetadata: {name: plain, namespace: a}\n\
             spec: {hosts: [db2], tcp: [{route: [{destination: {host: db2}}]}]}\n",
            ),
            ..Default::default()
        };
        let got: Vec<String> = not_applied(&objs, &Default::default()).iter().map(|n| n.to_string()).collect();
        // CUSTOM is built (ext_authz), and so are tcp routes on sidecars,
        // except a match that depends on the proxy.
        assert_eq!(got.len(), 2, "{got:?}");
        assert_eq!(got[0], "EnvoyFilter a/ef: applyTo EXTENSION_CONFIG: only ADD applies, as in istiod (not MERGE)");
        assert!(got[1].starts_with("VirtualService a/db: tcp/tls matches on sourceLabels"), "{got:?}");
    }

    /// A Sidecar ingress listener's `tls` is applied only with
    /// ENABLE_TLS_ON_SIDECAR_INGRESS, and reported otherwise.
    #[test]
    fn sidecar_ingress_tls_is_reported_unless_enabled() {
        let objs = istiod_config::objects::Objects {
            istio: crate::testing::istio_objects(
                "apiVersion: networking.istio.io/v1\nkind: Sidecar\nmetadata: {name: s, namespace: a}\n\
             spec: {ingress: [{port: {number: 9080, protocol: HTTPS, name: tls}, defaultEndpoint: '127.0.0.1:9080',\
             tls: {mode: SIMPLE, serverCertificate: c.pem, privateKey: k.pem}}]}\n",
            ),
            ..Default::default()
        };
        let off: Vec<String> = not_applied(&objs, &Default::default()).iter().map(|n| n.to_string()).collect();
        assert_eq!(off.len(), 1, "{off:?}");
        assert!(off[0].contains("ENABLE_TLS_ON_SIDECAR_INGRESS"), "{off:?}");
        let mesh = istiod_config::meshconfig::MeshSettings { tls_on_sidecar_ingress: true, ..Default::default() };
        let on = crate::Model { mesh: std::sync::Arc::new(mesh), ..Default::default() };
        assert!(not_applied(&objs, &on).is_empty());
    }
}
