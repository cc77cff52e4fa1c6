//! Tracing on the HTTP connection managers, as istiod configures it
//! (pilot/pkg/networking/core/tracing.go `configureTracingFromTelemetry`,
//! pilot/pkg/model/telemetry.go `Tracing`).
//!
//! - No Telemetry tracing and no `defaultProviders.tracing`: with
//!   `enableTracing` (istiod's default) the manager samples
//!   (`PILOT_TRACE_SAMPLING`, or `defaultConfig.tracing.sampling`) and tags
//!   spans, and the tracer is the bootstrap's (istio-agent renders it from
//!   `defaultConfig.tracing`); without it, no tracing.
//! - Otherwise the client side (outbound, gateways) and the server side
//!   (inbound) each take the provider the Telemetry objects and the default
//!   name, and the manager gets that tracer (Zipkin, OpenTelemetry,
//!   Datadog, SkyWalking) with the collector's cluster, or nothing when the
//!   provider is missing or its service is not in the registry.
//!
//! Every manager also gets istiod's request id extension.
//!
//! One difference: outbound listeners are shared by every sidecar of the
//! mesh, so they follow the mesh-wide (root namespace) Telemetry, and they
//! carry istiod's dry-run policy tags but not the per-proxy `istio.*` tags
//! (canonical service and revision, namespace, mesh and cluster ids).
//! virtualInbound and gateway listeners are built per proxy class and carry
//! them all.

use std::sync::Arc;

use istiod_proto::envoy::config::core::v3 as core;
use istiod_proto::envoy::config::trace::v3 as trace;
use istiod_proto::envoy::extensions::filters::network::http_connection_manager::v3 as hcm;
use istiod_proto::envoy::extensions::request_id::uuid::v3::UuidRequestIdConfig;
use istiod_proto::envoy::r#type::metadata::v3 as metadata;
use istiod_proto::envoy::r#type::tracing::v3::{CustomTag, custom_tag};
use istiod_proto::envoy::r#type::v3::Percent;
use istiod_proto::prost_types::{Any, Duration};
use serde_json::Value;

use crate::model::Model;
use crate::node::{NodeType, ProxyClass};

/// Which side of a proxy a manager serves: the client spec applies to
/// outbound and gateway listeners, the server spec to inbound ones.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Side {
    /// Outbound, or a gateway.
    Client,
    /// Inbound.
    Server,
}

/// One side's merged Telemetry tracing (`model.TracingSpec`).
#[derive(Debug, Clone, PartialEq)]
struct Spec {
    /// The provider's name (the first named), if any.
    provider: Option<String>,
    disabled: bool,
    random_sampling: Option<f64>,
    custom_tags: Option<Value>,
    use_request_id: bool,
    enable_istio_tags: bool,
}

impl Default for Spec {
    fn default() -> Self {
        Spec {
            provider: None,
            disabled: false,
            random_sampling: None,
            custom_tags: None,
            use_request_id: true,
            enable_istio_tags: true,
        }
    }
}

/// `Telemetries.Tracing`: `None` when no Telemetry configures tracing and
/// no default provider is named; else the client and server specs.
fn specs(model: &Model, namespace: &str, labels: Option<&[(Arc<str>, Arc<str>)]>) -> Option<(Spec, Spec)> {
    let telemetries = crate::model::telemetry::applicable(model, namespace, labels);
    let entries: Vec<&Value> = telemetries.iter().flat_map(|s| s["tracing"].as_array().into_iter().flatten()).collect();
    let default = model.mesh.default_tracing_providers.first();
    if entries.is_empty() && default.is_none() {
        return None;
    }
    let mut client = Spec { provider: default.cloned(), ..Spec::default() };
    let mut server = client.clone();
    for t in entries {
        let mut sides: Vec<&mut Spec> = match t.pointer("/match/mode").and_then(Value::as_str) {
            Some("CLIENT") => vec![&mut client],
            Some("SERVER") => vec![&mut server],
            _ => vec![&mut client, &mut server],
        };
        let first_provider = t["providers"].as_array().and_then(|p| p.first()).and_then(|p| p["name"].as_str());
        for s in sides.iter_mut() {
            if let Some(p) = first_provider {
                s.provider = Some(p.to_owned());
            }
            if let Some(b) = t["disableSpanReporting"].as_bool() {
                s.disabled = b;
            }
            if t["customTags"].is_object() {
                s.custom_tags = Some(t["customTags"].clone());
            }
            if let Some(p) = t["randomSamplingPercentage"].as_f64() {
                s.random_sampling = Some(p);
            }
            if let Some(b) = t["useRequestIdForTraceSampling"].as_bool() {
                s.use_request_id = b;
            }
            if let Some(b) = t["enableIstioTags"].as_bool() {
                s.enable_istio_tags = b;
            }
        }
    }
    // A side without a provider is disabled.
    for s in [&mut client, &mut server] {
        if s.provider.is_none() {
            s.disabled = true;
        }
    }
    Some((client, server))
}

/// The tracing and request id extension of a manager on `side`, for the
/// proxy `who` (`None`: outbound, shared by every sidecar).
pub fn manager(
    model: &Model,
    side: Side,
    who: Option<&ProxyClass>,
) -> (Option<hcm::http_connection_manager::Tracing>, Option<hcm::RequestIdExtension>) {
    let (namespace, labels) = match who {
        Some(c) => (&*c.namespace, Some(&c.labels[..])),
        None => (model.mesh.root_namespace.as_str(), None),
    };
    let Some((client, server)) = specs(model, namespace, labels) else {
        if !model.mesh.enable_tracing {
            return (None, Some(request_id(true)));
        }
        let mut t = hcm::http_connection_manager::Tracing::default();
        sampling(&mut t, proxy_sampling(model));
        t.custom_tags = tags(model, None, who);
        t.max_path_tag_length = max_path_tag_length(model);
        return (Some(t), Some(request_id(true)));
    };
    let spec = if side == Side::Client { client } else { server };
    if spec.disabled {
        return (None, Some(request_id(true)));
    }
    let provider = spec.provider.as_deref().unwrap_or_default();
    let Some((mut t, custom_sampler)) = provider_config(model, provider, who) else {
        return (None, Some(request_id(true)));
    };
    let percent = if custom_sampler { 100.0 } else { spec.random_sampling.unwrap_or_else(|| proxy_sampling(model)) };
    sampling(&mut t, percent);
    t.custom_tags = tags(model, Some((spec.custom_tags.as_ref(), spec.enable_istio_tags)), who);
    if t.max_path_tag_length.is_none() {
        t.max_path_tag_length = max_path_tag_length(model);
    }
    (Some(t), Some(request_id(spec.use_request_id)))
}

/// `BuildUUIDRequestIDExtension`.
fn request_id(use_for_sampling: bool) -> hcm::RequestIdExtension {
    let config =
        UuidRequestIdConfig { use_request_id_for_trace_sampling: Some(use_for_sampling), ..Default::default() };
    hcm::RequestIdExtension { typed_config: Any::from_msg(&config).ok() }
}

/// `configureSampling`.
fn sampling(t: &mut hcm::http_connection_manager::Tracing, random: f64) {
    t.client_sampling = Some(Percent { value: 100.0 });
    t.overall_sampling = Some(Percent { value: 100.0 });
    t.random_sampling = Some(Percent { value: random });
}

/// `proxyConfigSamplingValue`: `defaultConfig.tracing.sampling` when set
/// (above 100 means 1), else `PILOT_TRACE_SAMPLING`.
fn proxy_sampling(model: &Model) -> f64 {
    match model.mesh.proxy_tracing["sampling"].as_f64() {
        Some(s) if s != 0.0 => {
            if s > 100.0 {
                1.0
            } else {
                s
            }
        }
        _ => model.mesh.trace_sampling.0,
    }
}

/// `defaultConfig.tracing.max_path_tag_length` (either spelling), unless 0.
fn max_path_tag_length(model: &Model) -> Option<u32> {
    let v = &model.mesh.proxy_tracing;
    v["max_path_tag_length"].as_u64().or_else(|| v["maxPathTagLength"].as_u64()).filter(|n| *n != 0).map(|n| n as u32)
}

/// `configureFromProviderConfig`: the tracer of provider `name`, and
/// whether it samples itself (an OpenTelemetry sampler).
fn provider_config(
    model: &Model,
    name: &str,
    who: Option<&ProxyClass>,
) -> Option<(hcm::http_connection_manager::Tracing, bool)> {
    let Some((kind, p)) = model.mesh.extension_providers.get(name) else {
        tracing::warn!(target: "model", provider = name, "tracing provider not found in the mesh config");
        return None;
    };
    let router = who.is_some_and(|c| c.node_type == NodeType::Router);
    let port = p["port"].as_u64().unwrap_or(0);
    let service = p["service"].as_str().unwrap_or("");
    // The proxy's service cluster (`proxy.XdsNode.Cluster`): istio-agent's
    // `<canonical name, or app label>.<namespace>`.
    // Outbound listeners are shared: their tracer names the service
    // `istio-proxy` (Datadog requires a name).
    let service_cluster = who.map_or_else(
        || "istio-proxy".to_owned(),
        |c| {
            let name = label(c, CANONICAL_NAME).or_else(|| label(c, "app")).unwrap_or("istio-proxy");
            format!("{name}.{}", c.namespace)
        },
    );
    let (tracer, config, custom_sampler, spawn) = match kind.as_str() {
        "zipkin" => {
            let (host, cluster) = crate::model::telemetry::lookup_cluster(model, "zipkin", service, port)?;
            let path = p["path"].as_str().filter(|s| !s.is_empty()).unwrap_or("/api/v2/spans");
            let config = trace::ZipkinConfig {
                collector_cluster: cluster,
                collector_endpoint: path.to_owned(),
                collector_hostname: host,
                trace_id_128bit: !p["enable64bitTraceId"].as_bool().unwrap_or(false),
                shared_span_context: Some(false),
                collector_endpoint_version: trace::zipkin_config::CollectorEndpointVersion::HttpJson as i32,
                trace_context_option: match p["traceContextOption"].as_str() {
                    Some("USE_B3_WITH_W3C_PROPAGATION") => {
                        trace::zipkin_config::TraceContextOption::UseB3WithW3cPropagation as i32
                    }
                    _ => 0,
                },
                ..Default::default()
            };
            ("envoy.tracers.zipkin", Any::from_msg(&config).ok()?, false, false)
        }
        "datadog" => {
            let (host, cluster) = crate::model::telemetry::lookup_cluster(model, "datadog", service, port)?;
            let config = trace::DatadogConfig {
                collector_cluster: cluster,
                service_name: service_cluster,
                collector_hostname: host,
            };
            ("envoy.tracers.datadog", Any::from_msg(&config).ok()?, false, false)
        }
        "skywalking" => {
            let (host, cluster) = crate::model::telemetry::lookup_cluster(model, "skywalking", service, port)?;
            let config = trace::SkyWalkingConfig { grpc_service: Some(super::envoy::envoy_grpc(cluster, host, None)) };
            ("envoy.tracers.skywalking", Any::from_msg(&config).ok()?, false, true)
        }
        "opentelemetry" => {
            let (host, cluster) = crate::model::telemetry::lookup_cluster(model, "opentelemetry", service, port)?;
            let mut config = trace::OpenTelemetryConfig { service_name: service_cluster, ..Default::default() };
            if p["http"].is_object() {
                let path = p["http"]["path"].as_str().unwrap_or("");
                let uri = if path.is_empty() {
                    host.clone()
                } else {
                    format!("{}/{}", host.trim_end_matches('/'), path.trim_start_matches('/'))
                };
                config.http_service = Some(core::HttpService {
                    http_uri: Some(core::HttpUri {
                        uri,
                        http_upstream_type: Some(core::http_uri::HttpUpstreamType::Cluster(cluster)),
                        timeout: duration(&p["http"]["timeout"]),
                    }),
                    request_headers_to_add: Vec::new(),
                });
            } else {
                config.grpc_service = Some(super::envoy::envoy_grpc(cluster, host, duration(&p["grpc"]["timeout"])));
            }
            if p["dynatraceSampler"].is_object() {
                tracing::warn!(target: "model", provider = name, "the Dynatrace sampler is not supported; sampling as configured");
            }
            ("envoy.tracers.opentelemetry", Any::from_msg(&config).ok()?, false, false)
        }
        other => {
            tracing::warn!(target: "model", provider = name, kind = other, "provider does not support tracing");
            return None;
        }
    };
    let t = hcm::http_connection_manager::Tracing {
        provider: Some(trace::tracing::Http {
            name: tracer.into(),
            config_type: Some(trace::tracing::http::ConfigType::TypedConfig(config)),
        }),
        spawn_upstream_span: (router || spawn).then_some(true),
        max_path_tag_length: p["maxTagLength"].as_u64().filter(|n| *n != 0).map(|n| n as u32),
        ..Default::default()
    };
    Some((t, custom_sampler))
}

/// A protobuf JSON duration (`"5s"`, `"0.5s"`).
fn duration(v: &Value) -> Option<Duration> {
    let s = v.as_str()?.strip_suffix('s')?;
    let secs: f64 = s.parse().ok()?;
    Some(Duration { seconds: secs.trunc() as i64, nanos: (secs.fract() * 1e9).round() as i32 })
}

const CANONICAL_NAME: &str = "service.istio.io/canonical-name";
const CANONICAL_REVISION: &str = "service.istio.io/canonical-revision";

fn label<'a>(c: &'a ProxyClass, key: &str) -> Option<&'a str> {
    c.labels.iter().find(|(k, _)| &**k == key).map(|(_, v)| &**v).filter(|v| !v.is_empty())
}

fn literal(tag: &str, value: &str) -> CustomTag {
    CustomTag { tag: tag.into(), r#type: Some(custom_tag::Type::Literal(custom_tag::Literal { value: value.into() })) }
}

/// `dryRunPolicyTraceTag`: the RBAC filter's shadow result, from the
/// request's dynamic metadata.
fn dry_run(tag: &str, key: &str) -> CustomTag {
    CustomTag {
        tag: tag.into(),
        r#type: Some(custom_tag::Type::Metadata(custom_tag::Metadata {
            kind: Some(metadata::MetadataKind {
                kind: Some(metadata::metadata_kind::Kind::Request(metadata::metadata_kind::Request {})),
            }),
            metadata_key: Some(metadata::MetadataKey {
                key: "envoy.filters.http.rbac".into(),
                path: vec![metadata::metadata_key::PathSegment {
                    segment: Some(metadata::metadata_key::path_segment::Segment::Key(key.into())),
                }],
            }),
            default_value: String::new(),
        })),
    }
}

/// `configureCustomTags`: istiod's tags (`buildServiceTags` for a known
/// proxy, and `optionalPolicyTags`) when enabled (by the Telemetry spec,
/// else `defaultConfig.tracing.enableIstioTags`), then the spec's custom
/// tags, or where it names none `defaultConfig.tracing.custom_tags`,
/// sorted by tag. `spec`: the spec's custom tags and `enableIstioTags`.
fn tags(model: &Model, spec: Option<(Option<&Value>, bool)>, who: Option<&ProxyClass>) -> Vec<CustomTag> {
    let mut out = Vec::new();
    let (telemetry_tags, enabled) = match spec {
        Some((tags, enabled)) => (tags.filter(|t| t.as_object().is_some_and(|o| !o.is_empty())), enabled),
        None => (None, model.mesh.proxy_tracing["enableIstioTags"].as_bool().unwrap_or(true)),
    };
    if enabled {
        if let Some(c) = who {
            let or = |v: &str, d: &'static str| if v.is_empty() { d.to_owned() } else { v.to_owned() };
            out.push(literal("istio.canonical_revision", label(c, CANONICAL_REVISION).unwrap_or("latest")));
            out.push(literal("istio.canonical_service", label(c, CANONICAL_NAME).unwrap_or("unknown")));
            out.push(literal("istio.mesh_id", &or(&c.mesh_id, "unknown")));
            out.push(literal("istio.namespace", &or(&c.namespace, "default")));
            out.push(literal("istio.cluster_id", &or(&c.cluster_id, "unknown")));
        }
        for (kind, prefix) in [("allow", "istio_dry_run_allow_"), ("deny", "istio_dry_run_deny_")] {
            out.push(dry_run(
                &format!("istio.authorization.dry_run.{kind}_policy.name"),
                &format!("{prefix}shadow_effective_policy_id"),
            ));
            out.push(dry_run(
                &format!("istio.authorization.dry_run.{kind}_policy.result"),
                &format!("{prefix}shadow_engine_result"),
            ));
        }
    }
    let custom = telemetry_tags.or_else(|| {
        let v = &model.mesh.proxy_tracing;
        [&v["custom_tags"], &v["customTags"]].into_iter().find(|t| t.is_object())
    });
    for (name, t) in custom.and_then(Value::as_object).into_iter().flatten() {
        let pair = |o: &Value| {
            (o["name"].as_str().unwrap_or("").to_owned(), o["defaultValue"].as_str().unwrap_or("").to_owned())
        };
        let ty = if t["literal"].is_object() {
            custom_tag::Type::Literal(custom_tag::Literal {
                value: t["literal"]["value"].as_str().unwrap_or("").into(),
            })
        } else if t["environment"].is_object() {
            let (name, default_value) = pair(&t["environment"]);
            custom_tag::Type::Environment(custom_tag::Environment { name, default_value })
        } else if t["header"].is_object() {
            let (name, default_value) = pair(&t["header"]);
            custom_tag::Type::RequestHeader(custom_tag::Header { name, default_value })
        } else if t["formatter"].is_object() {
            custom_tag::Type::Value(t["formatter"]["value"].as_str().unwrap_or("").into())
        } else {
            continue;
        };
        out.push(CustomTag { tag: name.clone(), r#type: Some(ty) });
    }
    out.sort_by(|a, b| a.tag.cmp(&b.tag));
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    use crate::testing::model_in as model;

    const ZIPKIN_SVC: &str = "apiVersion: v1\nkind: Service\nmetadata:\n  name: zipkin\n  namespace: istio-system\n\
        spec:\n  clusterIP: 10.96.0.9\n  ports:\n  - name: http-query\n    port: 9411\n";

    fn names(t: &hcm::http_connection_manager::Tracing) -> Vec<&str> {
        t.custom_tags.iter().map(|t| t.tag.as_str()).collect()
    }

    #[test]
    fn by_default_managers_sample_and_tag_as_istiod() {
        let m = model("", "");
        let who = crate::testing::class("shop", &[(CANONICAL_NAME, "cart"), (CANONICAL_REVISION, "v2")]);
        let (t, rid) = manager(&m, Side::Server, Some(&who));
        let t = t.unwrap();
        assert_eq!(t.random_sampling, Some(Percent { value: 1.0 }), "PILOT_TRACE_SAMPLING's default");
        assert_eq!(t.client_sampling, Some(Percent { value: 100.0 }));
        assert!(t.provider.is_none(), "the bootstrap's tracer");
        assert_eq!(
            names(&t),
            [
                "istio.authorization.dry_run.allow_policy.name",
                "istio.authorization.dry_run.allow_policy.result",
                "istio.authorization.dry_run.deny_policy.name",
                "istio.authorization.dry_run.deny_policy.result",
                "istio.canonical_revision",
                "istio.canonical_service",
                "istio.cluster_id",
                "istio.mesh_id",
                "istio.namespace",
            ]
        );
        let lit = |i: usize| match &t.custom_tags[i].r#type {
            Some(custom_tag::Type::Literal(l)) => l.value.clone(),
            other => panic!("{other:?}"),
        };
        assert_eq!(
            (lit(4), lit(5), lit(6), lit(7), lit(8)),
            ("v2".into(), "cart".into(), "unknown".into(), "unknown".into(), "shop".into())
        );
        let cfg = UuidRequestIdConfig::decode(&rid.unwrap().typed_config.unwrap().value[..]).unwrap();
        assert_eq!(cfg.use_request_id_for_trace_sampling, Some(true));
        // Outbound (shared): no per-proxy tags.
        let (out, _) = manager(&m, Side::Client, None);
        assert_eq!(names(&out.unwrap()).len(), 4);
        // enableTracing: false and defaultConfig.tracing.sampling.
        assert!(manager(&model("enableTracing: false\n", ""), Side::Client, None).0.is_none());
        let sampled = model("defaultConfig:\n  tracing:\n    sampling: 25\n    max_path_tag_length: 99\n", "");
        let t = manager(&sampled, Side::Client, None).0.unwrap();
        assert_eq!((t.random_sampling, t.max_path_tag_length), (Some(Percent { value: 25.0 }), Some(99)));
    }

    #[test]
    fn telemetry_providers_configure_the_tracer() {
        let mesh = "extensionProviders:\n- name: zipkin\n  zipkin:\n    service: zipkin.istio-system.svc.cluster.local\n    port: 9411\n\
                    - name: otel\n  opentelemetry:\n    service: istio-system/zipkin.istio-system.svc.cluster.local\n    port: 4317\n\
                    defaultProviders:\n  tracing: [zipkin]\n";
        let telemetry = "---\napiVersion: telemetry.istio.io/v1\nkind: Telemetry\nmetadata:\n  name: t\n  namespace: shop\n\
            spec:\n  tracing:\n  - providers: [{name: otel}]\n    randomSamplingPercentage: 50\n    match: {mode: SERVER}\n    \
            customTags:\n      team: {literal: {value: payments}}\n";
        let m = model(mesh, &format!("{ZIPKIN_SVC}{telemetry}"));
        // The default provider, mesh-wide (outbound).
        let (t, _) = manager(&m, Side::Client, None);
        let t = t.unwrap();
        let http = t.provider.unwrap();
        assert_eq!(http.name, "envoy.tracers.zipkin");
        let Some(trace::tracing::http::ConfigType::TypedConfig(any)) = http.config_type else { panic!() };
        let z = trace::ZipkinConfig::decode(&any.value[..]).unwrap();
        assert_eq!(z.collector_cluster, "outbound|9411||zipkin.istio-system.svc.cluster.local");
        assert_eq!((z.collector_endpoint.as_str(), z.trace_id_128bit), ("/api/v2/spans", true));
        assert_eq!(t.random_sampling, Some(Percent { value: 1.0 }));
        // shop's server side: OpenTelemetry at 50%, its custom tag.
        let who = crate::testing::class("shop", &[]);
        let t = manager(&m, Side::Server, Some(&who)).0.unwrap();
        assert_eq!(t.provider.as_ref().unwrap().name, "envoy.tracers.opentelemetry");
        assert_eq!(t.random_sampling, Some(Percent { value: 50.0 }));
        assert!(names(&t).contains(&"team"));
        // A provider whose service is missing: no tracing, as istiod.
        let gone = model(mesh, telemetry);
        assert!(manager(&gone, Side::Client, None).0.is_none());
    }

    /// Datadog requires a service name; the shared outbound side has no
    /// proxy to name it after.
    #[test]
    fn datadog_always_names_the_service() {
        let mesh = "extensionProviders:\n- name: dd\n  datadog:\n    service: zipkin.istio-system.svc.cluster.local\n    port: 8126\n\
                    defaultProviders:\n  tracing: [dd]\n";
        let m = model(mesh, ZIPKIN_SVC);
        let who = crate::testing::class("shop", &[("app", "cart")]);
        for (who, want) in [(None, "istio-proxy"), (Some(&who), "cart.shop")] {
            let t = manager(&m, Side::Client, who).0.unwrap();
            let http = t.provider.unwrap();
            assert_eq!(http.name, "envoy.tracers.datadog");
            let Some(trace::tracing::http::ConfigType::TypedConfig(any)) = http.config_type else { panic!() };
            assert_eq!(trace::DatadogConfig::decode(&any.value[..]).unwrap().service_name, want);
        }
    }

    use istiod_proto::prost::Message;
}
