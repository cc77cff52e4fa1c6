//! The Telemetry resources and extension providers as the model answers
//! for them: which Telemetries apply to a proxy (istiod's
//! `applicableTelemetries`), and the mesh service an extension provider
//! names (istiod's `LookupCluster`). Metrics, access logs and tracing are
//! translated from these answers (`translate/telemetry.rs`,
//! `translate/tracing.rs`).

use std::collections::BTreeMap;
use std::sync::Arc;

use istiod_config::istio::{IstioObject, IstioSpec};
use serde_json::Value;

use super::Model;

/// A Telemetry's `selector.matchLabels` (`None`: namespace-wide, as an
/// empty selector is in istiod).
fn selector(spec: &Value) -> Option<BTreeMap<String, String>> {
    let labels = spec.pointer("/selector/matchLabels")?.as_object()?;
    let labels: BTreeMap<String, String> =
        labels.iter().filter_map(|(k, v)| Some((k.clone(), v.as_str()?.to_owned()))).collect();
    (!labels.is_empty()).then_some(labels)
}

/// Whether a Telemetry is attached to resources (`targetRef(s)`).
pub fn has_target_refs(spec: &Value) -> bool {
    spec.get("targetRef").is_some_and(|v| !v.is_null())
        || spec.get("targetRefs").and_then(Value::as_array).is_some_and(|a| !a.is_empty())
}

/// The spec of a Telemetry object (`None` for any other kind).
pub fn spec(o: &IstioObject) -> Option<&Value> {
    match &o.spec {
        IstioSpec::Ext(istiod_config::istio::IstioKind::Telemetry, s) => Some(&s.0),
        _ => None,
    }
}

/// A Telemetry's targets as istiod's `GetTargetRefs` reads them:
/// `targetRefs`, else the one `targetRef`.
fn target_refs(spec: &Value) -> Vec<istiod_envoyfilter::spec::TargetRef> {
    let read = |v: &Value| serde_json::from_value::<istiod_envoyfilter::spec::TargetRef>(v.clone()).ok();
    match spec.get("targetRefs").and_then(Value::as_array).filter(|a| !a.is_empty()) {
        Some(refs) => refs.iter().filter_map(read).collect(),
        None => spec.get("targetRef").filter(|v| !v.is_null()).and_then(read).into_iter().collect(),
    }
}

/// istiod's `applicableTelemetries` for a sidecar or gateway in
/// `namespace` with `labels` (`None`: the namespace-wide ones only): the
/// root namespace's namespace-wide Telemetry (the oldest), then the proxy
/// namespace's, then every one of that namespace with a selector or
/// targets that attaches to the workload (`ShouldAttachPolicy`: a Gateway
/// API gateway's deployment takes those naming its Gateway, and selectors
/// under `ENABLE_SELECTOR_BASED_K8S_GATEWAY_POLICY`; any other workload
/// selectors only), oldest first.
pub fn applicable<'a>(model: &'a Model, namespace: &'a str, labels: Option<&[(Arc<str>, Arc<str>)]>) -> Vec<&'a Value> {
    let root = model.mesh.root_namespace.as_str();
    let of_ns = |ns: &'a str| model.telemetries.iter().filter(move |o| o.meta.ns() == ns).filter_map(spec);
    let wide = |ns: &'a str| of_ns(ns).find(|s| selector(s).is_none() && !has_target_refs(s));
    let mut out: Vec<&Value> = Vec::new();
    if namespace != root {
        out.extend(wide(root));
    }
    out.extend(wide(namespace));
    if let Some(labels) = labels {
        let label = |k: &str| labels.iter().find(|(l, _)| &**l == k).map(|(_, v)| &**v);
        let gateway_selectors = model.mesh.features.selector_k8s_gateway_policy;
        out.extend(of_ns(namespace).filter(|s| selector(s).is_some() || has_target_refs(s)).filter(|s| {
            let sel = selector(s);
            istiod_envoyfilter::filters::should_attach(
                namespace,
                sel.as_ref(),
                &target_refs(s),
                namespace,
                label,
                gateway_selectors,
            )
        }));
    }
    out
}

/// An extension provider's service (a tracer's or access log's
/// collector) as istiod's `LookupCluster` finds it:
/// `namespace/host`, or a host in one namespace only; its hostname and the
/// outbound cluster of `port`.
/// A failure counts in `provider_lookup_cluster_failures{type=kind}`.
pub fn lookup_cluster(model: &Model, kind: &str, service: &str, port: u64) -> Option<(String, String)> {
    resolve_cluster(model, service, port)
        .map_err(|e| {
            crate::counters::provider_lookup_failure(kind);
            tracing::warn!(target: "model", service, "provider: {e}")
        })
        .ok()
}

/// [`lookup_cluster`], with istiod's error when the service is not found.
pub fn resolve_cluster(model: &Model, service: &str, port: u64) -> Result<(String, String), String> {
    if service.is_empty() {
        return Err("service must not be empty".into());
    }
    let found = match service.split_once('/') {
        Some((ns, host)) => model.services.get(host).filter(|s| s.namespace == ns),
        None => model.services.get(service),
    };
    let Some(svc) = found else {
        return Err(format!("could not find service {service} in Istio service registry"));
    };
    Ok((svc.hostname.to_string(), format!("outbound|{port}||{}", svc.hostname)))
}
