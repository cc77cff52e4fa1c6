//! Hand-written prost messages for istio-proxy's own filter configs,
//! which istiod sends Envoy as typed configs and no xDS schema package
//! carries (field numbers from istio/proxy: `istio_stats/config.proto`,
//! the ALPN filter's `config.proto`), with descriptors so config dumps can
//! render them as JSON.

use std::collections::BTreeMap;

use prost::Name;

/// istio-proxy's stats filter config (`stats.PluginConfig`, istio/proxy
/// `source/extensions/filters/http/istio_stats/config.proto`); only the
/// fields istiod sets for sidecars.
#[derive(Clone, PartialEq, prost::Message)]
pub struct PluginConfig {
    /// Set on inbound: the host header comes from outside the mesh.
    #[prost(bool, tag = "6")]
    pub disable_host_header_fallback: bool,
    /// Telemetry `reportingInterval`.
    #[prost(message, optional, tag = "7")]
    pub tcp_reporting_duration: Option<prost_types::Duration>,
    /// Metric overrides.
    #[prost(message, repeated, tag = "8")]
    pub metrics: Vec<MetricConfig>,
}

impl Name for PluginConfig {
    const NAME: &'static str = "PluginConfig";
    const PACKAGE: &'static str = "stats";
    fn type_url() -> String {
        format!("{}{}", crate::type_url::PREFIX, Self::full_name())
    }
}

/// One metric's override (`stats.MetricConfig`).
#[derive(Clone, PartialEq, prost::Message)]
pub struct MetricConfig {
    /// Tags added or replaced: name to expression.
    #[prost(btree_map = "string, string", tag = "1")]
    pub dimensions: BTreeMap<String, String>,
    /// The metric (`requests_total`, ...); empty: all.
    #[prost(string, tag = "2")]
    pub name: String,
    /// Tags removed.
    #[prost(string, repeated, tag = "3")]
    pub tags_to_remove: Vec<String>,
    /// Not reported.
    #[prost(bool, tag = "5")]
    pub drop: bool,
}

/// istio-proxy's ALPN override filter config
/// (`istio.envoy.config.filter.http.alpn.v2alpha1.FilterConfig`).
#[derive(Clone, PartialEq, prost::Message)]
pub struct AlpnConfig {
    /// Per upstream protocol.
    #[prost(message, repeated, tag = "1")]
    pub alpn_override: Vec<AlpnOverride>,
}

impl Name for AlpnConfig {
    const NAME: &'static str = "FilterConfig";
    const PACKAGE: &'static str = "istio.envoy.config.filter.http.alpn.v2alpha1";
    fn type_url() -> String {
        format!("{}{}", crate::type_url::PREFIX, Self::full_name())
    }
}

/// The ALPN to offer for one upstream protocol.
#[derive(Clone, PartialEq, prost::Message)]
pub struct AlpnOverride {
    /// `HTTP10` (0), `HTTP11` (1), `HTTP2` (2).
    #[prost(int32, tag = "1")]
    pub upstream_protocol: i32,
    /// The ALPN offered.
    #[prost(string, repeated, tag = "2")]
    pub alpn_override: Vec<String>,
}

/// The descriptors of istio-proxy's configs above (field numbers from
/// istio/proxy), for `/debug/config_dump`, which renders every `Any` it
/// can describe as JSON.
pub fn descriptors() -> Vec<prost_types::FileDescriptorProto> {
    use prost_types::field_descriptor_proto::{Label, Type};
    use prost_types::{
        DescriptorProto, EnumDescriptorProto, EnumValueDescriptorProto, FieldDescriptorProto, FileDescriptorProto,
        MessageOptions,
    };
    let field = |name: &str, number: i32, t: Type, label: Label, type_name: Option<&str>| FieldDescriptorProto {
        name: Some(name.into()),
        number: Some(number),
        r#type: Some(t as i32),
        label: Some(label as i32),
        type_name: type_name.map(str::to_owned),
        json_name: None,
        ..Default::default()
    };
    let (opt, rep) = (Label::Optional, Label::Repeated);
    let enum_of = |name: &str, values: &[&str]| EnumDescriptorProto {
        name: Some(name.into()),
        value: values
            .iter()
            .enumerate()
            .map(|(i, v)| EnumValueDescriptorProto {
                name: Some((*v).into()),
                number: Some(i as i32),
                ..Default::default()
            })
            .collect(),
        ..Default::default()
    };
    let stats = FileDescriptorProto {
        name: Some("istio_proxy/stats.proto".into()),
        package: Some("stats".into()),
        syntax: Some("proto3".into()),
        dependency: vec!["google/protobuf/duration.proto".into()],
        enum_type: vec![enum_of("Reporter", &["UNSPECIFIED", "SERVER_GATEWAY"])],
        message_type: vec![
            DescriptorProto {
                name: Some("MetricConfig".into()),
                field: vec![
                    field("dimensions", 1, Type::Message, rep, Some(".stats.MetricConfig.DimensionsEntry")),
                    field("name", 2, Type::String, opt, None),
                    field("tags_to_remove", 3, Type::String, rep, None),
                    field("drop", 5, Type::Bool, opt, None),
                ],
                nested_type: vec![DescriptorProto {
                    name: Some("DimensionsEntry".into()),
                    field: vec![field("key", 1, Type::String, opt, None), field("value", 2, Type::String, opt, None)],
                    options: Some(MessageOptions { map_entry: Some(true), ..Default::default() }),
                    ..Default::default()
                }],
                ..Default::default()
            },
            DescriptorProto {
                name: Some("PluginConfig".into()),
                field: vec![
                    field("disable_host_header_fallback", 6, Type::Bool, opt, None),
                    field("tcp_reporting_duration", 7, Type::Message, opt, Some(".google.protobuf.Duration")),
                    field("metrics", 8, Type::Message, rep, Some(".stats.MetricConfig")),
                    field("reporter", 10, Type::Enum, opt, Some(".stats.Reporter")),
                ],
                ..Default::default()
            },
        ],
        ..Default::default()
    };
    let alpn_pkg = AlpnConfig::PACKAGE;
    let alpn = FileDescriptorProto {
        name: Some("istio_proxy/alpn.proto".into()),
        package: Some(alpn_pkg.into()),
        syntax: Some("proto3".into()),
        message_type: vec![DescriptorProto {
            name: Some("FilterConfig".into()),
            field: vec![field(
                "alpn_override",
                1,
                Type::Message,
                rep,
                Some(&format!(".{alpn_pkg}.FilterConfig.AlpnOverride")),
            )],
            nested_type: vec![DescriptorProto {
                name: Some("AlpnOverride".into()),
                field: vec![
                    field("upstream_protocol", 1, Type::Enum, opt, Some(&format!(".{alpn_pkg}.FilterConfig.Protocol"))),
                    field("alpn_override", 2, Type::String, rep, None),
                ],
                ..Default::default()
            }],
            enum_type: vec![enum_of("Protocol", &["HTTP10", "HTTP11", "HTTP2"])],
            ..Default::default()
        }],
        ..Default::default()
    };
    vec![stats, alpn]
}
