//! Istio's configuration kinds (`networking.istio.io`, `security.istio.io`)
//! as typed specs, read from the same YAML (or JSON) documents as the
//! Kubernetes objects, and checked with istiod's validation rules.
//!
//! [`parse`] takes one document: it picks the kind from `apiVersion` and
//! `kind`, reads `metadata` and `spec` (a field the kind does not have is an
//! error, not silently dropped), then runs [`validate::validate`]. Every
//! problem comes back as a [`field::FieldError`] naming the offending
//! field, `spec.http[0].route[1].weight` style: `.name` for a field, `[i]`
//! for a list item, `[key]` for a map entry.
//!
//! Durations stay strings (`"10s"`), as written; the validation checks
//! their syntax (Go's `time.ParseDuration`, which istiod uses) and istiod's
//! limits (at least `1ms`, millisecond precision) where istiod has them.

use std::collections::BTreeMap;

use serde::Deserialize;

use crate::meta::Meta;

mod de;
pub mod ext;
pub mod field;
pub mod networking;
pub mod re2;
pub mod security;
pub mod validate;

#[cfg(test)]
mod tests;

use field::{FieldError, FieldErrors};

/// The Istio kinds this crate reads.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub enum IstioKind {
    /// `networking.istio.io` VirtualService.
    VirtualService,
    /// `networking.istio.io` DestinationRule.
    DestinationRule,
    /// `networking.istio.io` Gateway.
    Gateway,
    /// `networking.istio.io` ServiceEntry.
    ServiceEntry,
    /// `networking.istio.io` WorkloadEntry.
    WorkloadEntry,
    /// `networking.istio.io` Sidecar.
    Sidecar,
    /// `security.istio.io` PeerAuthentication.
    PeerAuthentication,
    /// `security.istio.io` AuthorizationPolicy.
    AuthorizationPolicy,
    /// `security.istio.io` RequestAuthentication.
    RequestAuthentication,
    /// `networking.istio.io` EnvoyFilter (kept as written, applied per proxy).
    EnvoyFilter,
    /// `networking.istio.io` WorkloadGroup (kept as written).
    WorkloadGroup,
    /// `networking.istio.io` ProxyConfig (kept as written).
    ProxyConfig,
    /// `telemetry.istio.io` Telemetry (kept as written).
    Telemetry,
    /// `extensions.istio.io` WasmPlugin (translated to a TrafficExtension).
    WasmPlugin,
    /// `extensions.istio.io` TrafficExtension.
    TrafficExtension,
}

impl IstioKind {
    /// Every kind, networking first.
    pub const ALL: [IstioKind; 15] = [
        IstioKind::VirtualService,
        IstioKind::DestinationRule,
        IstioKind::Gateway,
        IstioKind::ServiceEntry,
        IstioKind::WorkloadEntry,
        IstioKind::Sidecar,
        IstioKind::PeerAuthentication,
        IstioKind::AuthorizationPolicy,
        IstioKind::RequestAuthentication,
        IstioKind::EnvoyFilter,
        IstioKind::WorkloadGroup,
        IstioKind::ProxyConfig,
        IstioKind::Telemetry,
        IstioKind::WasmPlugin,
        IstioKind::TrafficExtension,
    ];

    /// The kind of a document, from its `apiVersion` and `kind`. Every
    /// served version of a kind has the same schema, so they are read
    /// alike (`networking.istio.io/{v1,v1beta1,v1alpha3}` for most of that
    /// group, `security.istio.io/{v1,v1beta1}`, ...); anything else
    /// (another group, version or kind) is `None`.
    pub fn from_api(api_version: &str, kind: &str) -> Option<IstioKind> {
        let (group, version) = api_version.split_once('/')?;
        let k = IstioKind::ALL.into_iter().find(|k| k.group() == group && k.name() == kind)?;
        k.versions().contains(&version).then_some(k)
    }

    /// The versions the API server serves (the CRDs of Istio's chart).
    pub fn versions(self) -> &'static [&'static str] {
        match self {
            IstioKind::EnvoyFilter => &["v1alpha3"],
            IstioKind::ProxyConfig => &["v1beta1"],
            IstioKind::Telemetry => &["v1", "v1alpha1"],
            IstioKind::WasmPlugin | IstioKind::TrafficExtension => &["v1alpha1"],
            IstioKind::PeerAuthentication | IstioKind::AuthorizationPolicy | IstioKind::RequestAuthentication => {
                &["v1", "v1beta1"]
            }
            _ => &["v1", "v1beta1", "v1alpha3"],
        }
    }

    /// The kinds whose specs are kept as written (`ext`).
    pub fn ext(self) -> Option<ext::ExtKind> {
        Some(match self {
            IstioKind::EnvoyFilter => ext::ExtKind::EnvoyFilter,
            IstioKind::WorkloadGroup => ext::ExtKind::WorkloadGroup,
            IstioKind::ProxyConfig => ext::ExtKind::ProxyConfig,
            IstioKind::Telemetry => ext::ExtKind::Telemetry,
            IstioKind::WasmPlugin => ext::ExtKind::WasmPlugin,
            IstioKind::TrafficExtension => ext::ExtKind::TrafficExtension,
            _ => return None,
        })
    }

    /// The `kind` string.
    pub fn name(self) -> &'static str {
        match self {
            IstioKind::VirtualService => "VirtualService",
            IstioKind::DestinationRule => "DestinationRule",
            IstioKind::Gateway => "Gateway",
            IstioKind::ServiceEntry => "ServiceEntry",
            IstioKind::WorkloadEntry => "WorkloadEntry",
            IstioKind::Sidecar => "Sidecar",
            IstioKind::PeerAuthentication => "PeerAuthentication",
            IstioKind::AuthorizationPolicy => "AuthorizationPolicy",
            IstioKind::RequestAuthentication => "RequestAuthentication",
            IstioKind::EnvoyFilter => "EnvoyFilter",
            IstioKind::WorkloadGroup => "WorkloadGroup",
            IstioKind::ProxyConfig => "ProxyConfig",
            IstioKind::Telemetry => "Telemetry",
            IstioKind::WasmPlugin => "WasmPlugin",
            IstioKind::TrafficExtension => "TrafficExtension",
        }
    }

    /// The API group.
    pub fn group(self) -> &'static str {
        match self {
            IstioKind::PeerAuthentication | IstioKind::AuthorizationPolicy | IstioKind::RequestAuthentication => {
                "security.istio.io"
            }
            IstioKind::Telemetry => "telemetry.istio.io",
            IstioKind::WasmPlugin | IstioKind::TrafficExtension => "extensions.istio.io",
            _ => "networking.istio.io",
        }
    }
}

/// The spec of an Istio object, one variant per kind.
#[derive(Debug, Clone, PartialEq)]
#[allow(clippy::large_enum_variant, reason = "built once per document, never moved around in bulk")]
pub enum IstioSpec {
    /// VirtualService.
    VirtualService(networking::VirtualService),
    /// DestinationRule.
    DestinationRule(networking::DestinationRule),
    /// Gateway.
    Gateway(networking::Gateway),
    /// ServiceEntry.
    ServiceEntry(networking::ServiceEntry),
    /// WorkloadEntry.
    WorkloadEntry(networking::WorkloadEntry),
    /// Sidecar.
    Sidecar(networking::Sidecar),
    /// PeerAuthentication.
    PeerAuthentication(security::PeerAuthentication),
    /// AuthorizationPolicy.
    AuthorizationPolicy(security::AuthorizationPolicy),
    /// RequestAuthentication.
    RequestAuthentication(security::RequestAuthentication),
    /// A kind whose spec is kept as written (`ext`), read where it is
    /// applied.
    Ext(IstioKind, ext::ExtSpec),
}

impl IstioSpec {
    /// The kind of this spec.
    pub fn kind(&self) -> IstioKind {
        match self {
            IstioSpec::VirtualService(_) => IstioKind::VirtualService,
            IstioSpec::DestinationRule(_) => IstioKind::DestinationRule,
            IstioSpec::Gateway(_) => IstioKind::Gateway,
            IstioSpec::ServiceEntry(_) => IstioKind::ServiceEntry,
            IstioSpec::WorkloadEntry(_) => IstioKind::WorkloadEntry,
            IstioSpec::Sidecar(_) => IstioKind::Sidecar,
            IstioSpec::PeerAuthentication(_) => IstioKind::PeerAuthentication,
            IstioSpec::AuthorizationPolicy(_) => IstioKind::AuthorizationPolicy,
            IstioSpec::RequestAuthentication(_) => IstioKind::RequestAuthentication,
            IstioSpec::Ext(k, _) => *k,
        }
    }
}

/// A parsed and validated Istio object.
#[derive(Debug, Clone, PartialEq)]
pub struct IstioObject {
    /// Metadata.
    pub meta: Meta,
    /// Spec.
    pub spec: IstioSpec,
    /// As written.
    pub raw: crate::meta::Raw,
}

impl IstioObject {
    /// The kind.
    pub fn kind(&self) -> IstioKind {
        self.spec.kind()
    }
}

/// `istio.type.v1beta1.WorkloadSelector`: the workloads (by pod labels) a
/// DestinationRule or a security policy applies to. (The networking
/// ServiceEntry and Sidecar use [`networking::WorkloadSelector`], whose
/// field is `labels`.)
#[derive(Debug, Clone, Default, PartialEq, Eq, Deserialize)]
#[serde(default, deny_unknown_fields, rename_all = "camelCase")]
pub struct WorkloadSelector {
    /// Labels a workload must carry (all of them).
    pub match_labels: BTreeMap<String, String>,
}

/// `istio.type.v1beta1.PolicyTargetReference`: a policy attached to a
/// Service, ServiceEntry, Gateway or GatewayClass instead of a selector.
#[derive(Debug, Clone, Default, PartialEq, Eq, Deserialize)]
#[serde(default, deny_unknown_fields, rename_all = "camelCase")]
pub struct PolicyTargetReference {
    /// API group (empty for core).
    pub group: String,
    /// Kind.
    pub kind: String,
    /// Name.
    pub name: String,
    /// Namespace (must be empty: no cross-namespace references).
    pub namespace: String,
}

/// Reads one document (already parsed from YAML or JSON) as an Istio
/// object and validates it. Fails with every problem found, each at its
/// field; a document whose `apiVersion`/`kind` is not an Istio kind this
/// crate reads fails at `kind` (callers can check
/// [`IstioKind::from_api`] first to skip those quietly).
pub fn parse(value: &serde_yaml_ng::Value) -> Result<IstioObject, FieldErrors> {
    let o = read(value)?;
    let errors = validate::validate(&o.meta, &o.spec);
    if !errors.is_empty() {
        return Err(FieldErrors(errors));
    }
    Ok(o)
}

/// Reads one document as an Istio object, typed but not validated (what
/// istiod itself generates need not pass its webhook).
pub fn read(value: &serde_yaml_ng::Value) -> Result<IstioObject, FieldErrors> {
    let text = |field: &str| value.get(field).and_then(serde_yaml_ng::Value::as_str).unwrap_or_default();
    let (api_version, kind_name) = (text("apiVersion"), text("kind"));
    let Some(kind) = IstioKind::from_api(api_version, kind_name) else {
        let message = format!("{kind_name:?} of {api_version:?} is not an Istio kind read here");
        return Err(FieldErrors(vec![FieldError::new("kind", message)]));
    };
    let present = |field: &str| value.get(field).filter(|v| !v.is_null());
    let meta: Meta = de::read_or_default(present("metadata"), "metadata").map_err(one)?;
    let spec = present("spec");
    let spec = match kind {
        IstioKind::VirtualService => IstioSpec::VirtualService(de::read_or_default(spec, "spec").map_err(one)?),
        IstioKind::DestinationRule => IstioSpec::DestinationRule(de::read_or_default(spec, "spec").map_err(one)?),
        IstioKind::Gateway => IstioSpec::Gateway(de::read_or_default(spec, "spec").map_err(one)?),
        IstioKind::ServiceEntry => {
            let mut se: networking::ServiceEntry = de::read_or_default(spec, "spec").map_err(one)?;
            se.allocated = allocated_addresses(value);
            IstioSpec::ServiceEntry(se)
        }
        IstioKind::WorkloadEntry => {
            let mut we: networking::WorkloadEntry = de::read_or_default(spec, "spec").map_err(one)?;
            we.health_checked =
                meta.annotations.get(networking::HEALTH_CHECKS_ENABLED).is_some_and(|v| networking::parse_bool_true(v));
            we.healthy = healthy_condition(value);
            IstioSpec::WorkloadEntry(we)
        }
        IstioKind::Sidecar => IstioSpec::Sidecar(de::read_or_default(spec, "spec").map_err(one)?),
        IstioKind::PeerAuthentication => IstioSpec::PeerAuthentication(de::read_or_default(spec, "spec").map_err(one)?),
        IstioKind::AuthorizationPolicy => {
            IstioSpec::AuthorizationPolicy(de::read_or_default(spec, "spec").map_err(one)?)
        }
        IstioKind::RequestAuthentication => {
            IstioSpec::RequestAuthentication(de::read_or_default(spec, "spec").map_err(one)?)
        }
        k => IstioSpec::Ext(k, de::read_or_default(spec, "spec").map_err(one)?),
    };
    let raw = serde_json::to_value(value).map(|v| crate::meta::Raw::of(&v)).unwrap_or_default();
    Ok(IstioObject { meta, spec, raw })
}

/// A ServiceEntry's `status.addresses` (`{host, value}`), as istiod's
/// `ipallocate` controller writes them.
fn allocated_addresses(value: &serde_yaml_ng::Value) -> Vec<(String, String)> {
    let Some(list) = value.get("status").and_then(|s| s.get("addresses")).and_then(|a| a.as_sequence()) else {
        return Vec::new();
    };
    let text = |v: &serde_yaml_ng::Value, k: &str| v.get(k).and_then(serde_yaml_ng::Value::as_str).map(str::to_owned);
    list.iter().filter_map(|a| Some((text(a, "host")?, text(a, "value")?))).collect()
}

/// The `Healthy` condition of an object's `status.conditions` (`True` or
/// `False`; any other value is not healthy).
fn healthy_condition(value: &serde_yaml_ng::Value) -> Option<bool> {
    let conditions = value.get("status")?.get("conditions")?.as_sequence()?;
    let c = conditions.iter().find(|c| c.get("type").and_then(serde_yaml_ng::Value::as_str) == Some("Healthy"))?;
    Some(c.get("status").and_then(serde_yaml_ng::Value::as_str) == Some("True"))
}

/// istiod's warnings for a valid object (returned by the validation
/// webhook as AdmissionReview warnings): only the kinds of [`ext`] have
/// any.
pub fn warnings(o: &IstioObject) -> Vec<String> {
    match &o.spec {
        IstioSpec::Ext(k, spec) => k.ext().map(|e| ext::check(e, &spec.0).1).unwrap_or_default(),
        _ => Vec::new(),
    }
}

fn one(error: FieldError) -> FieldErrors {
    FieldErrors(vec![error])
}
