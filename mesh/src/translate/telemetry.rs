//! The telemetry istiod configures on sidecars, so that istio-proxy reports
//! `istio_requests_total` and friends with both peers' labels: metadata
//! exchange (`istio.metadata_exchange`, HTTP, network and upstream),
//! `istio.alpn` on outbound HTTP, gRPC stats, and the stats filter
//! (`istio.stats`) where a Prometheus metrics provider applies, as the
//! mesh config's `defaultProviders.metrics` and the Telemetry API
//! (`telemetry.istio.io`) select it.
//!
//! Facts from istio/istio: the filters and their configs are
//! `pilot/pkg/xds/filters/filters.go` (`TCPListenerMx`, `TCPClusterMx`,
//! `SidecarInboundMetadataFilter`, `SidecarOutboundMetadataFilter`, the
//! ALPN overrides, gRPC stats); their order `pilot/pkg/networking/core/
//! listener_builder.go` and `networkfilter.go`; which Telemetry applies and
//! how metric overrides merge `pilot/pkg/model/telemetry.go`
//! (`applicableTelemetries`, `mergeMetrics`, `generateStatsConfig`).

use std::collections::BTreeMap;
use std::sync::Arc;

use istiod_proto::envoy::config::cluster::v3 as cluster;
use istiod_proto::envoy::config::listener::v3::{Filter, filter};
use istiod_proto::envoy::extensions::filters::network::http_connection_manager::v3 as hcm;
use istiod_proto::prost_types::{self, Any, ListValue, Struct, Value as PValue, value::Kind as PKind};
use serde_json::Value;

use super::envoy::{any, http_filter};
use crate::model::Model;
use crate::model::telemetry::{applicable, lookup_cluster, spec};

/// Istio's metadata exchange filters (HTTP, network, upstream).
pub const MX_FILTER: &str = "istio.metadata_exchange";
/// Istio's stats filter (HTTP and network).
pub const STATS_FILTER: &str = "istio.stats";
/// Istio's ALPN override filter (outbound HTTP).
pub const ALPN_FILTER: &str = "istio.alpn";
/// The ALPN protocol metadata exchange runs over.
pub const MX_ALPN: &str = "istio-peer-exchange";

pub use istiod_proto::istio_proxy::{AlpnConfig, AlpnOverride, MetricConfig, PluginConfig, descriptors};

fn pvalue(v: &Value) -> PValue {
    PValue {
        kind: Some(match v {
            Value::Null => PKind::NullValue(0),
            Value::Bool(b) => PKind::BoolValue(*b),
            Value::Number(n) => PKind::NumberValue(n.as_f64().unwrap_or(0.0)),
            Value::String(s) => PKind::StringValue(s.clone()),
            Value::Array(a) => PKind::ListValue(ListValue { values: a.iter().map(pvalue).collect() }),
            Value::Object(o) => {
                PKind::StructValue(Struct { fields: o.iter().map(|(k, v)| (k.clone(), pvalue(v))).collect() })
            }
        }),
    }
}

/// istiod's `protoconv.TypedStructWithFields`: a config it has no Go type
/// for, as a `udpa.type.v1.TypedStruct`.
fn typed_struct(type_url: &str, fields: &Value) -> Any {
    let Some(PKind::StructValue(value)) = pvalue(fields).kind else { unreachable!("an object") };
    any(&istiod_proto::udpa::r#type::v1::TypedStruct { type_url: type_url.into(), value: Some(value) })
}

const PEER_METADATA: &str = "type.googleapis.com/io.istio.http.peer_metadata.Config";
const TCP_MX: &str = "type.googleapis.com/envoy.tcp.metadataexchange.config.MetadataExchange";

/// istiod's `additionalLabels`: `PILOT_MX_ADDITIONAL_LABELS` into a
/// metadata exchange config.
fn with_labels(mut cfg: Value, labels: &[String]) -> Value {
    if !labels.is_empty() {
        cfg["additional_labels"] = serde_json::json!(labels);
    }
    cfg
}

fn tcp_mx_config(labels: &[String]) -> Any {
    typed_struct(TCP_MX, &with_labels(serde_json::json!({"protocol": MX_ALPN, "enable_discovery": true}), labels))
}

/// `TCPListenerMx`: metadata exchange on inbound connections (with
/// `PILOT_MX_ADDITIONAL_LABELS`).
pub fn mx_network(labels: &[String]) -> Filter {
    Filter { name: MX_FILTER.into(), config_type: Some(filter::ConfigType::TypedConfig(tcp_mx_config(labels))) }
}

/// `TCPClusterMx`: metadata exchange on outbound connections.
pub fn mx_cluster(labels: &[String]) -> cluster::Filter {
    cluster::Filter { name: MX_FILTER.into(), typed_config: Some(tcp_mx_config(labels)), ..Default::default() }
}

/// The cluster filters of an outbound cluster: metadata exchange unless
/// `PILOT_ENABLE_METADATA_EXCHANGE` is off.
pub fn cluster_filters(mesh: &crate::meshconfig::MeshSettings) -> Vec<cluster::Filter> {
    // (The same filter for every cluster of a mesh: built once per thread
    // and its labels, not through JSON for each of a full rebuild's
    // clusters, 4% of it.)
    thread_local! {
        static MX: std::cell::RefCell<Option<(Vec<String>, cluster::Filter)>> = const { std::cell::RefCell::new(None) };
    }
    if !mesh.metadata_exchange {
        return Vec::new();
    }
    let labels = &mesh.mx_additional_labels;
    MX.with(|memo| {
        let mut memo = memo.borrow_mut();
        match &*memo {
            Some((l, f)) if l == labels => vec![f.clone()],
            _ => {
                let f = mx_cluster(labels);
                *memo = Some((labels.clone(), f.clone()));
                vec![f]
            }
        }
    })
}

/// `SidecarInboundMetadataFilter` / `SidecarOutboundMetadataFilter`:
/// the peer's metadata from Istio's headers, else from workload
/// discovery; ours sent in headers.
pub fn mx_http(inbound: bool, labels: &[String]) -> hcm::HttpFilter {
    let side = if inbound { "downstream" } else { "upstream" };
    let fields = with_labels(
        serde_json::json!({
            format!("{side}_discovery"): [{"istio_headers": {}}, {"workload_discovery": {}}],
            format!("{side}_propagation"): [{"istio_headers": {}}],
        }),
        labels,
    );
    hcm::HttpFilter {
        name: MX_FILTER.into(),
        config_type: Some(hcm::http_filter::ConfigType::TypedConfig(typed_struct(PEER_METADATA, &fields))),
        ..Default::default()
    }
}

/// gRPC stats with filter state, for the stats filter's gRPC metrics.
pub fn grpc_stats() -> hcm::HttpFilter {
    use istiod_proto::envoy::extensions::filters::http::grpc_stats::v3::{FilterConfig, filter_config};
    http_filter(
        "envoy.filters.http.grpc_stats",
        &FilterConfig {
            emit_filter_state: true,
            per_method_stat_specifier: Some(filter_config::PerMethodStatSpecifier::StatsForAllMethods(false)),
            ..Default::default()
        },
    )
}

/// `istio.alpn`: the ALPN an mTLS upstream connection offers, by the
/// upstream's protocol (`mtlsHTTP10ALPN`, ...).
pub fn alpn() -> hcm::HttpFilter {
    let o = |p: i32, alpn: [&str; 3]| AlpnOverride {
        upstream_protocol: p,
        alpn_override: alpn.iter().map(|s| (*s).to_owned()).collect(),
    };
    http_filter(
        ALPN_FILTER,
        &AlpnConfig {
            alpn_override: vec![
                o(0, ["istio-http/1.0", "istio", "http/1.0"]),
                o(1, ["istio-http/1.1", "istio", "http/1.1"]),
                o(2, ["istio-h2", "istio", "h2"]),
            ],
        },
    )
}

/// The stats filter of one direction.
pub fn stats_http(config: &PluginConfig) -> hcm::HttpFilter {
    http_filter(STATS_FILTER, config)
}

/// The network stats filter of one direction.
pub fn stats_network(config: &PluginConfig) -> Filter {
    Filter { name: STATS_FILTER.into(), config_type: Some(filter::ConfigType::TypedConfig(any(config))) }
}

/// The stats a proxy reports, by direction (`None`: no stats filter).
#[derive(Debug, Clone, Default, PartialEq)]
pub struct Metrics {
    /// Outbound (`CLIENT` mode).
    pub client: Option<PluginConfig>,
    /// Inbound (`SERVER` mode).
    pub server: Option<PluginConfig>,
}

/// istiod's metric names by the Telemetry API's (`metricToPrometheusMetric`),
/// in the order istiod writes overrides (by the API name).
const METRICS: [(&str, &str); 10] = [
    ("GRPC_REQUEST_MESSAGES", "request_messages_total"),
    ("GRPC_RESPONSE_MESSAGES", "response_messages_total"),
    ("REQUEST_COUNT", "requests_total"),
    ("REQUEST_DURATION", "request_duration_milliseconds"),
    ("REQUEST_SIZE", "request_bytes"),
    ("RESPONSE_SIZE", "response_bytes"),
    ("TCP_CLOSED_CONNECTIONS", "tcp_connections_closed_total"),
    ("TCP_OPENED_CONNECTIONS", "tcp_connections_opened_total"),
    ("TCP_RECEIVED_BYTES", "tcp_received_bytes_total"),
    ("TCP_SENT_BYTES", "tcp_sent_bytes_total"),
];

/// What the telemetries say of metrics for one direction (`CLIENT` or
/// `SERVER`), istiod's `mergeMetrics` and `generateStatsConfig`.
fn merge(
    telemetries: &[&Value],
    mesh: &crate::meshconfig::MeshSettings,
    mode: &str,
    inbound: bool,
) -> Option<PluginConfig> {
    let mut providers: Vec<String> = mesh.default_metrics_providers.clone();
    let mut enabled = true;
    // By metric: (drop, dimensions, tags removed).
    type Override = (Option<bool>, BTreeMap<String, String>, Vec<String>);
    let mut per: BTreeMap<String, Override> = BTreeMap::new();
    let mut reporting: Option<prost_types::Duration> = None;
    for t in telemetries {
        for m in t.get("metrics").and_then(Value::as_array).into_iter().flatten() {
            let names: Vec<String> = m
                .get("providers")
                .and_then(Value::as_array)
                .into_iter()
                .flatten()
                .filter_map(|p| p.get("name")?.as_str().map(str::to_owned))
                .collect();
            if !names.is_empty() {
                providers = names;
            }
            if let Some(d) = m.get("reportingInterval").and_then(Value::as_str) {
                reporting = istiod_config::duration::parse(d)
                    .ok()
                    .map(|d| prost_types::Duration { seconds: d.as_secs() as i64, nanos: d.subsec_nanos() as i32 });
            }
            for o in m.get("overrides").and_then(Value::as_array).into_iter().flatten() {
                let m_mode = o.pointer("/match/mode").and_then(Value::as_str).unwrap_or("CLIENT_AND_SERVER");
                if m_mode != "CLIENT_AND_SERVER" && m_mode != mode {
                    continue;
                }
                let custom = o.pointer("/match/customMetric").and_then(Value::as_str);
                let metric = o.pointer("/match/metric").and_then(Value::as_str).unwrap_or("ALL_METRICS");
                let all = custom.is_none() && metric == "ALL_METRICS";
                let disabled = o.get("disabled").and_then(Value::as_bool);
                if all && let Some(d) = disabled {
                    enabled = !d;
                }
                let targets: Vec<String> = match (custom, all) {
                    (Some(c), _) => vec![c.to_owned()],
                    (None, true) => METRICS.iter().map(|(api, _)| (*api).to_owned()).collect(),
                    (None, false) => vec![metric.to_owned()],
                };
                for target in targets {
                    let e = per.entry(target).or_default();
                    if !all && let Some(d) = disabled {
                        e.0 = Some(d);
                    }
                    for (tag, op) in o.get("tagOverrides").and_then(Value::as_object).into_iter().flatten() {
                        match op.get("operation").and_then(Value::as_str).unwrap_or("UPSERT") {
                            "REMOVE" => {
                                e.1.remove(tag);
                                if !e.2.contains(tag) {
                                    e.2.push(tag.clone());
                                }
                            }
                            _ => {
                                e.2.retain(|t| t != tag);
                                let value = op.get("value").and_then(Value::as_str).unwrap_or_default();
                                e.1.insert(tag.clone(), value.to_owned());
                            }
                        }
                    }
                }
            }
        }
    }
    let prometheus = providers.iter().any(|p| mesh.is_prometheus(p));
    if !prometheus || !enabled {
        return None;
    }
    let metrics = per
        .into_iter()
        .filter(|(_, (drop, dims, removed))| drop.is_some() || !dims.is_empty() || !removed.is_empty())
        .map(|(api, (drop, dimensions, tags_to_remove))| MetricConfig {
            name: METRICS.iter().find(|(a, _)| *a == api).map_or(api.clone(), |(_, p)| (*p).to_owned()),
            dimensions,
            tags_to_remove,
            drop: drop == Some(true),
        })
        .collect();
    Some(PluginConfig { disable_host_header_fallback: inbound, tcp_reporting_duration: reporting, metrics })
}

/// The stats of a sidecar in `namespace` with `labels` (`None`: what is the
/// same for every sidecar, the mesh-wide Telemetry and mesh config only).
pub fn metrics(model: &Model, namespace: &str, labels: Option<&[(Arc<str>, Arc<str>)]>) -> Metrics {
    let t = applicable(model, namespace, labels);
    Metrics { client: merge(&t, &model.mesh, "CLIENT", false), server: merge(&t, &model.mesh, "SERVER", true) }
}

/// istiod's `EnvoyTextLogFormat`, the access log's default text format
/// (pilot/pkg/model/telemetry_logging.go).
pub const TEXT_FORMAT: &str = "[%START_TIME%] \"%REQ(:METHOD)% %REQ(X-ENVOY-ORIGINAL-PATH?:PATH)% %PROTOCOL%\" \
     %RESPONSE_CODE% %RESPONSE_FLAGS% %RESPONSE_CODE_DETAILS% %CONNECTION_TERMINATION_DETAILS% \
     \"%UPSTREAM_TRANSPORT_FAILURE_REASON%\" %BYTES_RECEIVED% %BYTES_SENT% %DURATION% \
     %RESP(X-ENVOY-UPSTREAM-SERVICE-TIME)% \"%REQ(X-FORWARDED-FOR)%\" \"%REQ(USER-AGENT)%\" \
     \"%REQ(X-REQUEST-ID)%\" \"%REQ(:AUTHORITY)%\" \"%UPSTREAM_HOST%\" %UPSTREAM_CLUSTER_RAW% \
     %UPSTREAM_LOCAL_ADDRESS% %DOWNSTREAM_LOCAL_ADDRESS% %DOWNSTREAM_REMOTE_ADDRESS% \
     %REQUESTED_SERVER_NAME% %ROUTE_NAME%\n";

/// istiod's `EnvoyJSONLogFormatIstio`: the JSON log's default fields.
const JSON_FORMAT: [(&str, &str); 24] = [
    ("start_time", "%START_TIME%"),
    ("route_name", "%ROUTE_NAME%"),
    ("method", "%REQ(:METHOD)%"),
    ("path", "%REQ(X-ENVOY-ORIGINAL-PATH?:PATH)%"),
    ("protocol", "%PROTOCOL%"),
    ("response_code", "%RESPONSE_CODE%"),
    ("response_flags", "%RESPONSE_FLAGS%"),
    ("response_code_details", "%RESPONSE_CODE_DETAILS%"),
    ("connection_termination_details", "%CONNECTION_TERMINATION_DETAILS%"),
    ("bytes_received", "%BYTES_RECEIVED%"),
    ("bytes_sent", "%BYTES_SENT%"),
    ("duration", "%DURATION%"),
    ("upstream_service_time", "%RESP(X-ENVOY-UPSTREAM-SERVICE-TIME)%"),
    ("x_forwarded_for", "%REQ(X-FORWARDED-FOR)%"),
    ("user_agent", "%REQ(USER-AGENT)%"),
    ("request_id", "%REQ(X-REQUEST-ID)%"),
    ("authority", "%REQ(:AUTHORITY)%"),
    ("upstream_host", "%UPSTREAM_HOST%"),
    ("upstream_cluster", "%UPSTREAM_CLUSTER_RAW%"),
    ("upstream_local_address", "%UPSTREAM_LOCAL_ADDRESS%"),
    ("downstream_local_address", "%DOWNSTREAM_LOCAL_ADDRESS%"),
    ("downstream_remote_address", "%DOWNSTREAM_REMOTE_ADDRESS%"),
    ("requested_server_name", "%REQUESTED_SERVER_NAME%"),
    ("upstream_transport_failure_reason", "%UPSTREAM_TRANSPORT_FAILURE_REASON%"),
];

/// istiod's `FileAccessLogFromMeshConfig`: a file log at `path` in the mesh
/// config's encoding and format (a text format gets its newline; a JSON
/// format that does not parse is replaced by the default, as istiod does).
pub fn file_access_log(
    path: &str,
    mesh: &crate::meshconfig::MeshSettings,
) -> istiod_proto::envoy::config::accesslog::v3::AccessLog {
    use istiod_proto::envoy::config::accesslog::v3::{AccessLog, access_log};
    use istiod_proto::envoy::config::core::v3::{
        DataSource, JsonFormatOptions, SubstitutionFormatString, data_source, substitution_format_string,
    };
    use istiod_proto::envoy::extensions::access_loggers::file::v3::{FileAccessLog, file_access_log};
    let format = if mesh.access_log_json {
        let fields = serde_json::from_str::<serde_json::Map<String, Value>>(&mesh.access_log_format)
            .ok()
            .filter(|_| !mesh.access_log_format.is_empty())
            .unwrap_or_else(|| JSON_FORMAT.iter().map(|(k, v)| ((*k).to_owned(), Value::from(*v))).collect());
        let Some(PKind::StructValue(st)) = pvalue(&Value::Object(fields)).kind else { unreachable!("an object") };
        SubstitutionFormatString {
            format: Some(substitution_format_string::Format::JsonFormat(st)),
            json_format_options: Some(JsonFormatOptions { sort_properties: false }),
            ..Default::default()
        }
    } else {
        let mut text =
            if mesh.access_log_format.is_empty() { TEXT_FORMAT.to_owned() } else { mesh.access_log_format.clone() };
        if !text.ends_with('\n') {
            text.push('\n');
        }
        SubstitutionFormatString {
            format: Some(substitution_format_string::Format::TextFormatSource(DataSource {
                specifier: Some(data_source::Specifier::InlineString(text)),
                ..Default::default()
            })),
            ..Default::default()
        }
    };
    let file = FileAccessLog {
        path: path.to_owned(),
        access_log_format: Some(file_access_log::AccessLogFormat::LogFormat(format)),
    };
    AccessLog {
        name: "envoy.access_loggers.file".into(),
        config_type: Some(access_log::ConfigType::TypedConfig(any(&file))),
        ..Default::default()
    }
}

/// istiod's access logs for a sidecar (`Telemetries.AccessLogging` and
/// `telemetryAccessLog`, pilot/pkg/model/telemetry_logging.go): the
/// providers the applicable Telemetry objects name (the last that names
/// some wins), else `defaultProviders.accessLogging`, else the legacy
/// `accessLogFile`; `disabled: true` turns them off. One log per provider:
/// files (`envoyFileAccessLog`), gRPC access log services
/// (`envoyHttpAls`, `envoyTcpAls`) and OpenTelemetry (`envoyOtelAls`).
pub fn access_log(
    model: &Model,
    namespace: &str,
    labels: Option<&[(Arc<str>, Arc<str>)]>,
) -> Vec<istiod_proto::envoy::config::accesslog::v3::AccessLog> {
    let mesh = &model.mesh;
    let mut providers: Option<Vec<String>> = None;
    let mut disabled = false;
    for t in applicable(model, namespace, labels) {
        for l in t.get("accessLogging").and_then(Value::as_array).into_iter().flatten() {
            let names: Vec<String> = l
                .get("providers")
                .and_then(Value::as_array)
                .into_iter()
                .flatten()
                .filter_map(|p| p.get("name")?.as_str().map(str::to_owned))
                .collect();
            if !names.is_empty() {
                providers = Some(names);
            }
            if let Some(d) = l.get("disabled").and_then(Value::as_bool) {
                disabled = d;
            }
        }
    }
    if disabled {
        return Vec::new();
    }
    let providers = providers
        .or_else(|| (!mesh.default_access_log_providers.is_empty()).then(|| mesh.default_access_log_providers.clone()));
    let Some(providers) = providers else {
        return if mesh.access_log_file.is_empty() {
            Vec::new()
        } else {
            vec![file_access_log(&mesh.access_log_file, mesh)]
        };
    };
    providers.iter().filter_map(|p| provider_access_log(model, p)).collect()
}

/// Whether a proxy's telemetry may read the service registry: a tracer or
/// an access log service (the default providers, or a Telemetry's
/// tracing or access logging) points at a collector's cluster, which
/// comes and goes with its Service.
pub fn reads_services(model: &Model) -> bool {
    let mesh = &model.mesh;
    let collector = |p: &String| mesh.extension_providers.get(p).is_some_and(|(k, _)| k != "envoyFileAccessLog");
    !mesh.default_tracing_providers.is_empty()
        || mesh.default_access_log_providers.iter().any(collector)
        || model.telemetries.iter().filter_map(spec).any(|s| s["tracing"].is_array() || s["accessLogging"].is_array())
}

/// The access log of extension provider `name`, if it logs.
fn provider_access_log(model: &Model, name: &str) -> Option<istiod_proto::envoy::config::accesslog::v3::AccessLog> {
    use istiod_proto::envoy::config::accesslog::v3::{AccessLog, access_log};
    use istiod_proto::envoy::config::core::v3 as core;
    use istiod_proto::envoy::extensions::access_loggers::grpc::v3 as als;
    use istiod_proto::envoy::extensions::access_loggers::open_telemetry::v3::OpenTelemetryAccessLogConfig;
    use istiod_proto::opentelemetry::proto::common::v1 as otlp;
    let mesh = &model.mesh;
    let (kind, p) = mesh.extension_providers.get(name)?;
    let s = |v: &Value, k: &str| v.get(k).and_then(Value::as_str).unwrap_or("").to_owned();
    let strings = |v: &Value| -> Vec<String> {
        v.as_array().into_iter().flatten().filter_map(|s| s.as_str().map(str::to_owned)).collect()
    };
    let common = |default_name: &str, state: &[&str]| -> Option<als::CommonGrpcAccessLogConfig> {
        let label = match kind.as_str() {
            "envoyTcpAls" => "envoyTCPAls",
            "envoyOtelAls" => "envoyOtelAls",
            _ => "envoyHTTPAls",
        };
        let (host, cluster) =
            lookup_cluster(model, label, p["service"].as_str().unwrap_or(""), p["port"].as_u64().unwrap_or(0))?;
        let log_name = Some(s(p, "logName")).filter(|n| !n.is_empty()).unwrap_or_else(|| default_name.to_owned());
        let objects = strings(&p["filterStateObjectsToLog"]);
        Some(als::CommonGrpcAccessLogConfig {
            log_name,
            grpc_service: Some(super::envoy::envoy_grpc(cluster, host, None)),
            filter_state_objects_to_log: if objects.is_empty() {
                state.iter().map(|s| (*s).to_owned()).collect()
            } else {
                objects
            },
            transport_api_version: core::ApiVersion::V3 as i32,
        })
    };
    // istiod's envoyStateToLog and envoyWasmStateToLog.
    const PEERS: &[&str] = &["upstream_peer", "downstream_peer"];
    const WASM_PEERS: &[&str] = &[
        "upstream_peer",
        "downstream_peer",
        "wasm.upstream_peer",
        "wasm.upstream_peer_id",
        "wasm.downstream_peer",
        "wasm.downstream_peer_id",
    ];
    let (logger, config) = match kind.as_str() {
        "envoyFileAccessLog" => {
            let path = p.get("path").and_then(Value::as_str).filter(|p| !p.is_empty()).unwrap_or("/dev/stdout");
            return Some(file_access_log(path, mesh));
        }
        "envoyHttpAls" => {
            let config = als::HttpGrpcAccessLogConfig {
                common_config: Some(common("http_envoy_accesslog", PEERS)?),
                additional_request_headers_to_log: strings(&p["additionalRequestHeadersToLog"]),
                additional_response_headers_to_log: strings(&p["additionalResponseHeadersToLog"]),
                additional_response_trailers_to_log: strings(&p["additionalResponseTrailersToLog"]),
            };
            ("envoy.access_loggers.http_grpc", Any::from_msg(&config).ok()?)
        }
        "envoyTcpAls" => {
            let config = als::TcpGrpcAccessLogConfig { common_config: Some(common("tcp_envoy_accesslog", PEERS)?) };
            ("envoy.tcp_grpc_access_log", Any::from_msg(&config).ok()?)
        }
        "envoyOtelAls" => {
            let format = p.pointer("/logFormat/text").and_then(Value::as_str).filter(|t| !t.is_empty());
            let labels: Vec<otlp::KeyValue> = p
                .pointer("/logFormat/labels")
                .and_then(Value::as_object)
                .into_iter()
                .flatten()
                .map(|(k, v)| otlp::KeyValue {
                    key: k.clone(),
                    value: Some(otlp::AnyValue {
                        value: Some(otlp::any_value::Value::StringValue(v.as_str().unwrap_or("").to_owned())),
                    }),
                })
                .collect();
            let config = OpenTelemetryAccessLogConfig {
                common_config: Some(common("otel_envoy_accesslog", WASM_PEERS)?),
                body: Some(otlp::AnyValue {
                    value: Some(otlp::any_value::Value::StringValue(format.unwrap_or(TEXT_FORMAT).to_owned())),
                }),
                attributes: (!labels.is_empty()).then_some(otlp::KeyValueList { values: labels }),
                disable_builtin_labels: true,
                formatters: Vec::new(),
            };
            ("envoy.access_loggers.open_telemetry", Any::from_msg(&config).ok()?)
        }
        _ => return None,
    };
    Some(AccessLog {
        name: logger.into(),
        config_type: Some(access_log::ConfigType::TypedConfig(config)),
        ..Default::default()
    })
}

/// A listener's own log (`virtualOutbound`, `virtualInbound`): only
/// connections no chain took (response flag `NR`), as istiod sets it.
pub fn listener_access_log(
    log: &istiod_proto::envoy::config::accesslog::v3::AccessLog,
) -> istiod_proto::envoy::config::accesslog::v3::AccessLog {
    use istiod_proto::envoy::config::accesslog::v3::{AccessLogFilter, ResponseFlagFilter, access_log_filter};
    let mut l = log.clone();
    l.filter = Some(AccessLogFilter {
        filter_specifier: Some(access_log_filter::FilterSpecifier::ResponseFlagFilter(ResponseFlagFilter {
            flags: vec!["NR".into()],
        })),
    });
    l
}

/// The telemetry of one side of a sidecar: its stats filter and access log.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct Side {
    /// The stats filter's config, where a Prometheus provider applies.
    pub stats: Option<PluginConfig>,
    /// The access logs, one per provider configured.
    pub log: Vec<istiod_proto::envoy::config::accesslog::v3::AccessLog>,
    /// Its HTTP managers' tracing ([`super::tracing`]), and...
    pub tracing: Option<hcm::http_connection_manager::Tracing>,
    /// ...request id extension.
    pub request_id: Option<hcm::RequestIdExtension>,
}

impl Side {
    /// Sets `manager`'s tracing and request id extension.
    pub fn trace(&self, manager: &mut hcm::HttpConnectionManager) {
        manager.tracing = self.tracing.clone();
        manager.request_id_extension = self.request_id.clone();
    }
}

/// The outbound side every sidecar shares (outbound listeners are built
/// once for all): the mesh-wide Telemetry and mesh config.
pub fn outbound(model: &Model) -> Side {
    let (tracing, request_id) = super::tracing::manager(model, super::tracing::Side::Client, None);
    Side {
        stats: mesh_metrics(model).client,
        log: access_log(model, &model.mesh.root_namespace, None),
        tracing,
        request_id,
    }
}

/// The inbound side of a workload.
pub fn inbound(model: &Model, class: &crate::node::ProxyClass) -> Side {
    let (namespace, labels) = (&*class.namespace, &class.labels[..]);
    let (tracing, request_id) = super::tracing::manager(model, super::tracing::Side::Server, Some(class));
    Side {
        stats: metrics(model, namespace, Some(labels)).server,
        log: access_log(model, namespace, Some(labels)),
        tracing,
        request_id,
    }
}

/// A gateway's side (istiod's `ListenerClassGateway`): the client metrics
/// of the Telemetries that select it, the host header not trusted for
/// them (`disableHostHeaderFallback`), its access logs, client tracing.
pub fn gateway(model: &Model, class: &crate::node::ProxyClass) -> Side {
    let (namespace, labels) = (&*class.namespace, &class.labels[..]);
    let (tracing, request_id) = super::tracing::manager(model, super::tracing::Side::Client, Some(class));
    let t = applicable(model, namespace, Some(labels));
    Side {
        stats: merge(&t, &model.mesh, "CLIENT", true),
        log: access_log(model, namespace, Some(labels)),
        tracing,
        request_id,
    }
}

/// The mesh-wide stats (outbound listeners are shared by every sidecar).
pub fn mesh_metrics(model: &Model) -> Metrics {
    metrics(model, &model.mesh.root_namespace, None)
}

#[cfg(test)]
mod tests {
    use super::*;
    use istiod_proto::prost::Name;

    use crate::testing::model_in as model;

    fn labels(pairs: &[(&str, &str)]) -> Vec<(Arc<str>, Arc<str>)> {
        pairs.iter().map(|(k, v)| (Arc::from(*k), Arc::from(*v))).collect()
    }

    /// The descriptors config_dump renders with describe what the prost
    /// messages encode: a message decoded and encoded again through them
    /// keeps its bytes.
    #[test]
    fn descriptors_describe_the_messages() {
        let mut pool = prost_reflect::DescriptorPool::decode(istiod_proto::FILE_DESCRIPTOR_SET).unwrap();
        for f in descriptors() {
            pool.add_file_descriptor_proto(f).unwrap();
        }
        let stats = PluginConfig {
            disable_host_header_fallback: true,
            tcp_reporting_duration: Some(prost_types::Duration { seconds: 10, nanos: 0 }),
            metrics: vec![MetricConfig {
                dimensions: BTreeMap::from([("a".into(), "b".into())]),
                name: "requests_total".into(),
                tags_to_remove: vec!["c".into()],
                drop: true,
            }],
        };
        let mut alpn = AlpnConfig::default();
        alpn.alpn_override.push(AlpnOverride { upstream_protocol: 2, alpn_override: vec!["h2".into()] });
        use istiod_proto::prost::Message as _;
        for (name, bytes) in
            [(PluginConfig::full_name(), stats.encode_to_vec()), (AlpnConfig::full_name(), alpn.encode_to_vec())]
        {
            let desc = pool.get_message_by_name(&name).unwrap_or_else(|| panic!("{name}"));
            let m = prost_reflect::DynamicMessage::decode(desc, bytes.as_slice()).unwrap();
            assert_eq!(m.encode_to_vec(), bytes, "{name}");
            assert!(!format!("{m:?}").contains("unknown"), "{name}: {m:?}");
        }
    }

    fn log_path_and_format(
        l: &istiod_proto::envoy::config::accesslog::v3::AccessLog,
    ) -> (String, istiod_proto::envoy::config::core::v3::SubstitutionFormatString) {
        use istiod_proto::envoy::config::accesslog::v3::access_log;
        use istiod_proto::envoy::extensions::access_loggers::file::v3::{FileAccessLog, file_access_log};
        use istiod_proto::prost::Message as _;
        assert_eq!(l.name, "envoy.access_loggers.file");
        let Some(access_log::ConfigType::TypedConfig(a)) = &l.config_type else { panic!() };
        let f = FileAccessLog::decode(a.value.as_slice()).unwrap();
        let Some(file_access_log::AccessLogFormat::LogFormat(format)) = f.access_log_format else { panic!() };
        (f.path, format)
    }

    /// pilot/pkg/model/telemetry_logging.go: the legacy accessLogFile, its
    /// encodings and formats; a Telemetry naming the envoy provider; one
    /// turning logging off.
    #[test]
    fn access_logs_follow_the_mesh_config_and_telemetry() {
        use istiod_proto::envoy::config::core::v3::{data_source, substitution_format_string::Format};
        assert!(access_log(&model("", ""), "shop", None).is_empty(), "no accessLogFile: no log");
        let m = model("accessLogFile: /dev/stdout\n", "");
        let (path, format) = log_path_and_format(&access_log(&m, "shop", None)[0]);
        assert_eq!(path, "/dev/stdout");
        let Some(Format::TextFormatSource(src)) = format.format else { panic!() };
        let Some(data_source::Specifier::InlineString(text)) = src.specifier else { panic!() };
        // EnvoyTextLogFormat, verbatim.
        assert_eq!(
            text,
            "[%START_TIME%] \"%REQ(:METHOD)% %REQ(X-ENVOY-ORIGINAL-PATH?:PATH)% %PROTOCOL%\" %RESPONSE_CODE% %RESPONSE_FLAGS% %RESPONSE_CODE_DETAILS% %CONNECTION_TERMINATION_DETAILS% \"%UPSTREAM_TRANSPORT_FAILURE_REASON%\" %BYTES_RECEIVED% %BYTES_SENT% %DURATION% %RESP(X-ENVOY-UPSTREAM-SERVICE-TIME)% \"%REQ(X-FORWARDED-FOR)%\" \"%REQ(USER-AGENT)%\" \"%REQ(X-REQUEST-ID)%\" \"%REQ(:AUTHORITY)%\" \"%UPSTREAM_HOST%\" %UPSTREAM_CLUSTER_RAW% %UPSTREAM_LOCAL_ADDRESS% %DOWNSTREAM_LOCAL_ADDRESS% %DOWNSTREAM_REMOTE_ADDRESS% %REQUESTED_SERVER_NAME% %ROUTE_NAME%\n"
        );
        // A custom text format gets its newline.
        let m = model("accessLogFile: /tmp/a.log\naccessLogFormat: '%START_TIME% %RESPONSE_CODE%'\n", "");
        let (_, format) = log_path_and_format(&access_log(&m, "shop", None)[0]);
        assert!(format!("{format:?}").contains("%START_TIME% %RESPONSE_CODE%\\n"), "{format:?}");
        // JSON: istiod's fields, unsorted; a custom object replaces them.
        let m = model("accessLogFile: /dev/stdout\naccessLogEncoding: JSON\n", "");
        let (_, format) = log_path_and_format(&access_log(&m, "shop", None)[0]);
        let Some(Format::JsonFormat(st)) = &format.format else { panic!() };
        assert_eq!(st.fields.len(), 24);
        assert_eq!(
            format.json_format_options,
            Some(istiod_proto::envoy::config::core::v3::JsonFormatOptions { sort_properties: false })
        );
        let m = model(
            "accessLogFile: /dev/stdout\naccessLogEncoding: JSON\naccessLogFormat: '{\"code\": \"%RESPONSE_CODE%\"}'\n",
            "",
        );
        let (_, format) = log_path_and_format(&access_log(&m, "shop", None)[0]);
        let Some(Format::JsonFormat(st)) = &format.format else { panic!() };
        assert_eq!(st.fields.keys().collect::<Vec<_>>(), ["code"]);
        // The Telemetry API: the envoy provider logs to stdout; a
        // workload's Telemetry turns it off for that workload only.
        let yaml = format!(
            "{T}metadata: {{name: mesh, namespace: istio-system}}\nspec:\n  accessLogging:\n  - providers: [{{name: envoy}}]\n---\n\
             {T}metadata: {{name: quiet, namespace: shop}}\nspec:\n  selector: {{matchLabels: {{app: quiet}}}}\n  accessLogging:\n  - disabled: true\n"
        );
        let m = model("", &yaml);
        let (path, _) = log_path_and_format(&access_log(&m, "shop", Some(&labels(&[("app", "web")])))[0]);
        assert_eq!(path, "/dev/stdout");
        assert!(access_log(&m, "shop", Some(&labels(&[("app", "quiet")]))).is_empty());
        // A listener's own log keeps only connections no chain took.
        let l = listener_access_log(&access_log(&m, "shop", None)[0]);
        assert!(format!("{:?}", l.filter).contains("\"NR\""), "{l:?}");
    }

    const PROMETHEUS: &str = "defaultProviders: {metrics: [prometheus]}\n";

    /// istiod's Go default mesh config names no metrics provider: no stats
    /// filter (pkg/config/mesh/mesh.go); the chart's sets prometheus.
    #[test]
    fn stats_follow_the_default_providers() {
        let m = model("", "");
        assert_eq!(mesh_metrics(&m), Metrics::default());
        let m = model(PROMETHEUS, "");
        let got = mesh_metrics(&m);
        assert_eq!(got.client, Some(PluginConfig::default()), "outbound: {{}} (telemetry_test.go)");
        assert_eq!(
            got.server,
            Some(PluginConfig { disable_host_header_fallback: true, ..Default::default() }),
            "inbound: disable_host_header_fallback"
        );
    }

    const T: &str = "apiVersion: telemetry.istio.io/v1\nkind: Telemetry\n";

    /// pilot/pkg/model/telemetry.go applicableTelemetries and mergeMetrics:
    /// root, namespace, then selector; a later override wins; targetRefs
    /// are not for sidecars; another namespace's selector does not apply.
    #[test]
    fn telemetries_are_selected_and_merged_as_istiod_does() {
        let yaml = format!(
            "{T}metadata: {{name: mesh, namespace: istio-system, creationTimestamp: '2026-01-01T00:00:00Z'}}\n\
             spec:\n  metrics:\n  - providers: [{{name: prometheus}}]\n    overrides:\n    - match: {{metric: REQUEST_COUNT}}\n      tagOverrides: {{request_protocol: {{operation: REMOVE}}}}\n---\n\
             {T}metadata: {{name: shop, namespace: shop, creationTimestamp: '2026-01-02T00:00:00Z'}}\n\
             spec:\n  metrics:\n  - overrides:\n    - match: {{metric: REQUEST_COUNT, mode: SERVER}}\n      tagOverrides: {{team: {{value: \"'shop'\"}}}}\n---\n\
             {T}metadata: {{name: web, namespace: shop, creationTimestamp: '2026-01-03T00:00:00Z'}}\n\
             spec:\n  selector: {{matchLabels: {{app: web}}}}\n  metrics:\n  - overrides:\n    - match: {{mode: CLIENT}}\n      disabled: true\n---\n\
             {T}metadata: {{name: waypoint, namespace: shop, creationTimestamp: '2026-01-04T00:00:00Z'}}\n\
             spec:\n  targetRefs: [{{kind: Gateway, group: gateway.networking.k8s.io, name: waypoint}}]\n  metrics:\n  - overrides:\n    - disabled: true\n---\n\
             {T}metadata: {{name: other, namespace: other, creationTimestamp: '2026-01-05T00:00:00Z'}}\n\
             spec:\n  selector: {{matchLabels: {{app: web}}}}\n  metrics:\n  - overrides:\n    - disabled: true\n"
        );
        let m = model("", &yaml);
        let web = labels(&[("app", "web")]);
        let db = labels(&[("app", "db")]);
        assert_eq!(applicable(&m, "shop", Some(&web)).len(), 3, "root, namespace, selector");
        assert_eq!(applicable(&m, "shop", Some(&db)).len(), 2, "the selector does not match");
        assert_eq!(applicable(&m, "other", Some(&db)).len(), 1, "only the root's");
        // A Gateway API gateway's deployment (ShouldAttachPolicy): the
        // Telemetry attached to its Gateway by targetRefs, with the root's
        // and the namespace's; a selector one under
        // ENABLE_SELECTOR_BASED_K8S_GATEWAY_POLICY only.
        let gw = labels(&[("gateway.networking.k8s.io/gateway-name", "waypoint"), ("app", "web")]);
        assert_eq!(applicable(&m, "shop", Some(&gw)).len(), 4, "root, namespace, selector, targetRefs");
        let mut off = m.clone();
        off.mesh = std::sync::Arc::new(crate::meshconfig::MeshSettings {
            features: crate::meshconfig::Features { selector_k8s_gateway_policy: false, ..Default::default() },
            ..(*m.mesh).clone()
        });
        assert_eq!(applicable(&off, "shop", Some(&gw)).len(), 3, "root, namespace, targetRefs");
        assert_eq!(applicable(&off, "shop", Some(&web)).len(), 3, "a sidecar's are as they were");
        let removed = MetricConfig {
            name: "requests_total".into(),
            tags_to_remove: vec!["request_protocol".into()],
            ..Default::default()
        };
        // The mesh-wide Telemetry names the provider; the root's removal
        // applies to both directions, the namespace's tag to the server.
        let db_metrics = metrics(&m, "shop", Some(&db));
        assert_eq!(db_metrics.client.unwrap().metrics, std::slice::from_ref(&removed));
        let server = db_metrics.server.unwrap();
        assert_eq!(server.metrics[0].dimensions, BTreeMap::from([("team".to_owned(), "'shop'".to_owned())]));
        assert_eq!(server.metrics[0].tags_to_remove, ["request_protocol"]);
        // web's own Telemetry turns CLIENT metrics off; SERVER stays.
        let web_metrics = metrics(&m, "shop", Some(&web));
        assert_eq!(web_metrics.client, None);
        assert!(web_metrics.server.is_some());
        // A Telemetry naming only a non-Prometheus provider: no stats.
        let m = model(
            "",
            &format!(
                "{T}metadata: {{name: mesh, namespace: istio-system}}\nspec:\n  metrics:\n  - providers: [{{name: stackdriver}}]\n"
            ),
        );
        assert_eq!(mesh_metrics(&m), Metrics::default());
    }

    /// telemetry_logging.go: one log per provider, the gRPC services and
    /// OpenTelemetry to their collector's cluster, istiod's log names and
    /// filter-state objects; a provider whose service is missing logs
    /// nothing.
    #[test]
    fn grpc_and_opentelemetry_access_log_providers() {
        use istiod_proto::envoy::config::accesslog::v3::access_log::ConfigType;
        use istiod_proto::envoy::extensions::access_loggers::grpc::v3 as als;
        use istiod_proto::envoy::extensions::access_loggers::open_telemetry::v3::OpenTelemetryAccessLogConfig;
        use istiod_proto::prost::Message;
        let mesh = "extensionProviders:\n\
            - name: als\n  envoyHttpAls:\n    service: collector.obs.svc.cluster.local\n    port: 9000\n    additionalRequestHeadersToLog: [x-team]\n\
            - name: otel\n  envoyOtelAls:\n    service: obs/collector.obs.svc.cluster.local\n    port: 4317\n    logFormat:\n      labels: {team: storefront}\n\
            - name: gone\n  envoyTcpAls:\n    service: nowhere.example\n    port: 1\n\
            defaultProviders:\n  accessLogging: [als, otel, gone]\n";
        let svc = "apiVersion: v1\nkind: Service\nmetadata: {name: collector, namespace: obs}\n\
                   spec: {clusterIP: 10.96.7.7, ports: [{name: grpc, port: 9000}, {name: grpc-otlp, port: 4317}]}\n";
        let logs = access_log(&model(mesh, svc), "shop", None);
        let names: Vec<&str> = logs.iter().map(|l| l.name.as_str()).collect();
        assert_eq!(names, ["envoy.access_loggers.http_grpc", "envoy.access_loggers.open_telemetry"]);
        let value = |i: usize| match &logs[i].config_type {
            Some(ConfigType::TypedConfig(a)) => a.value.clone(),
            None => panic!(),
        };
        let http = als::HttpGrpcAccessLogConfig::decode(&value(0)[..]).unwrap();
        let common = http.common_config.unwrap();
        assert_eq!(common.log_name, "http_envoy_accesslog");
        assert_eq!(common.filter_state_objects_to_log, ["upstream_peer", "downstream_peer"]);
        assert_eq!(http.additional_request_headers_to_log, ["x-team"]);
        let otel = OpenTelemetryAccessLogConfig::decode(&value(1)[..]).unwrap();
        let grpc = otel.common_config.unwrap().grpc_service.unwrap();
        let Some(istiod_proto::envoy::config::core::v3::grpc_service::TargetSpecifier::EnvoyGrpc(g)) =
            grpc.target_specifier
        else {
            panic!()
        };
        assert_eq!(g.cluster_name, "outbound|4317||collector.obs.svc.cluster.local");
        assert!(otel.disable_builtin_labels);
        assert_eq!(otel.attributes.unwrap().values[0].key, "team");
    }
}
