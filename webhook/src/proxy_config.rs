//! ProxyConfig as the injector reads it: istiod's defaults, the overlay
//! of one config on another, and the `proxy.istio.io/config` annotation's
//! check as istiod's injection webhook makes it (`pkg/kube/inject/validate.go` `validateProxyConfig`):
//!
//! 1. `protomarshal.ApplyYAML(value, mesh.DefaultProxyConfig())`: the text
//!    goes through `sigs.k8s.io/yaml.YAMLToJSON` (go-yaml v2, so YAML 1.1:
//!    plain `yes`/`off` are bools, `0777` is octal, a later duplicate key
//!    wins, only the first document counts, NaN and infinities are refused
//!    by `json.Marshal`), then golang/protobuf's legacy `jsonpb` unmarshals
//!    the JSON onto the defaults, strictly and, when that fails, again with
//!    `AllowUnknownFields`. So unknown fields pass at any depth but a wrong
//!    type does not, and the error is the second pass's: the first field in
//!    proto declaration order that does not decode. Legacy `jsonpb` is not
//!    protojson: both the JSON and the proto field names count (the JSON
//!    name wins), `null` leaves a field alone, a number may come quoted
//!    (`trimQuote`), enums are names or any int32, and a Duration is
//!    anything Go's `time.ParseDuration` takes (`1m30s`, not only `90s`).
//! 2. `agent.ValidateMeshConfigProxyConfig` on the result; its errors (not
//!    its warnings) come back as one go-multierror text.
//!
//! The messages are the Go libraries' own (`encoding/json`,
//! `time.ParseDuration`, `net.SplitHostPort`, `strconv`), which is why the
//! decoder walks a table of istio/api's `mesh/v1alpha1/proxy.proto`
//! messages rather than serde derives. Approximated: YAML syntax errors
//! (serde_yaml_ng's text after `yaml: `), `<<` merge keys (not merged),
//! custom tags, float and null map keys, and `strconv.Quote`'s idea of a
//! printable rune outside ASCII.

use std::collections::BTreeMap;
use std::fmt;
use std::net::{Ipv4Addr, Ipv6Addr};

use serde::de::{self, DeserializeSeed, Deserializer, EnumAccess, MapAccess, SeqAccess, VariantAccess, Visitor};
use serde_json::{Map, Value as Json, json};

/// Checks a `proxy.istio.io/config` value (YAML or JSON) as istiod's
/// `validateProxyConfig` does; the error is its text, without the
/// `invalid value '…' for annotation '…': ` the caller adds.
pub fn validate(text: &str) -> Result<(), String> {
    // Nesting the scanner cannot read in linear time is refused first.
    istiod_config::yaml::check_depth(text).map_err(|e| e.to_string())?;
    let mut config = default_proxy_config();
    yaml_to_json(text)
        .and_then(|json| decode_message(PROXY_CONFIG, &json, &mut config))
        .map_err(|e| format!("failed to convert to apply proxy config: {e}"))?;
    let errors = validate_proxy_config(&config);
    if errors.is_empty() { Ok(()) } else { Err(multierror(&errors)) }
}

// ---------------------------------------------------------------------------
// YAML to JSON, as sigs.k8s.io/yaml does it.

/// A node as go-yaml v2 decodes it into `interface{}`.
enum Yaml {
    Null,
    Bool(bool),
    Int(i128),
    Float(f64),
    Str(String),
    Seq(Vec<Yaml>),
    Map(Vec<(Yaml, Yaml)>),
}

/// The JSON `YAMLToJSON` makes of it: string keys, a later duplicate
/// winning.
enum Node {
    Null,
    Bool(bool),
    Int(i128),
    Float(f64),
    Str(String),
    Seq(Vec<Node>),
    Map(BTreeMap<String, Node>),
}

fn yaml_to_json(text: &str) -> Result<Node, String> {
    let yaml = match serde_yaml_ng::Deserializer::from_str(text).next() {
        Some(document) => Load(text).deserialize(document).map_err(|e| format!("yaml: {e}"))?,
        None => Yaml::Null,
    };
    let json = jsonable(yaml)?;
    finite(&json)?;
    Ok(json)
}

/// Loads a document of `.0`. serde_yaml_ng resolves plain scalars by YAML
/// 1.2 and lends the rest from the input; a lent string not right after a
/// quote was plain, and gets go-yaml's YAML 1.1 resolution.
#[derive(Clone, Copy)]
struct Load<'de>(&'de str);

impl<'de> DeserializeSeed<'de> for Load<'de> {
    type Value = Yaml;

    fn deserialize<D: Deserializer<'de>>(self, d: D) -> Result<Yaml, D::Error> {
        d.deserialize_any(self)
    }
}

impl<'de> Visitor<'de> for Load<'de> {
    type Value = Yaml;

    fn expecting(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str("a YAML value")
    }

    fn visit_bool<E: de::Error>(self, v: bool) -> Result<Yaml, E> {
        Ok(Yaml::Bool(v))
    }

    fn visit_i64<E: de::Error>(self, v: i64) -> Result<Yaml, E> {
        Ok(Yaml::Int(v.into()))
    }

    fn visit_u64<E: de::Error>(self, v: u64) -> Result<Yaml, E> {
        Ok(Yaml::Int(v.into()))
    }

    fn visit_i128<E: de::Error>(self, v: i128) -> Result<Yaml, E> {
        Ok(wide_int(v))
    }

    fn visit_u128<E: de::Error>(self, v: u128) -> Result<Yaml, E> {
        Ok(i128::try_from(v).map_or(Yaml::Float(v as f64), wide_int))
    }

    fn visit_f64<E: de::Error>(self, v: f64) -> Result<Yaml, E> {
        Ok(Yaml::Float(v))
    }

    fn visit_str<E: de::Error>(self, v: &str) -> Result<Yaml, E> {
        Ok(Yaml::Str(v.to_owned()))
    }

    fn visit_borrowed_str<E: de::Error>(self, v: &'de str) -> Result<Yaml, E> {
        Ok(if is_plain(self.0, v) { resolve_plain(v) } else { Yaml::Str(v.to_owned()) })
    }

    fn visit_unit<E: de::Error>(self) -> Result<Yaml, E> {
        Ok(Yaml::Null)
    }

    fn visit_none<E: de::Error>(self) -> Result<Yaml, E> {
        Ok(Yaml::Null)
    }

    fn visit_seq<A: SeqAccess<'de>>(self, mut seq: A) -> Result<Yaml, A::Error> {
        let mut items = Vec::new();
        while let Some(item) = seq.next_element_seed(self)? {
            items.push(item);
        }
        Ok(Yaml::Seq(items))
    }

    fn visit_map<A: MapAccess<'de>>(self, mut map: A) -> Result<Yaml, A::Error> {
        let mut entries = Vec::new();
        while let Some(key) = map.next_key_seed(self)? {
            entries.push((key, map.next_value_seed(self)?));
        }
        Ok(Yaml::Map(entries))
    }

    /// A custom tag (`!foo …`): the node without it.
    fn visit_enum<A: EnumAccess<'de>>(self, data: A) -> Result<Yaml, A::Error> {
        let (de::IgnoredAny, value) = data.variant()?;
        value.newtype_variant_seed(self)
    }
}

/// go-yaml makes integers beyond int64 and uint64 floats.
fn wide_int(v: i128) -> Yaml {
    if (i128::from(i64::MIN)..=i128::from(u64::MAX)).contains(&v) { Yaml::Int(v) } else { Yaml::Float(v as f64) }
}

fn is_plain(input: &str, v: &str) -> bool {
    let offset = (v.as_ptr() as usize).wrapping_sub(input.as_ptr() as usize);
    offset <= input.len() && (offset == 0 || !matches!(input.as_bytes()[offset - 1], b'"' | b'\''))
}

/// go-yaml v2's `resolve` for the plain scalars YAML 1.2 leaves strings:
/// the 1.1 booleans, and integers with `_`, a leading-zero octal or an
/// upper-case base prefix.
fn resolve_plain(s: &str) -> Yaml {
    match s {
        "y" | "Y" | "yes" | "Yes" | "YES" | "on" | "On" | "ON" => return Yaml::Bool(true),
        "n" | "N" | "no" | "No" | "NO" | "off" | "Off" | "OFF" => return Yaml::Bool(false),
        _ => {}
    }
    if s.starts_with(|c: char| c.is_ascii_digit() || c == '+' || c == '-') {
        let plain = s.replace('_', "");
        if let Some(i) = go_parse_int(&plain) {
            return Yaml::Int(i);
        }
        if is_yaml_float(&plain)
            && let Ok(f) = plain.parse::<f64>()
            && f.is_finite()
        {
            return Yaml::Float(f);
        }
    }
    Yaml::Str(s.to_owned())
}

/// `strconv.ParseInt(s, 0, 64)`, else `strconv.ParseUint(s, 0, 64)`.
fn go_parse_int(s: &str) -> Option<i128> {
    let (sign, body) = match s.as_bytes().first()? {
        b'-' => (-1, &s[1..]),
        b'+' => (1, &s[1..]),
        _ => (0, s),
    };
    let (radix, digits) = match body.get(..2) {
        Some("0x" | "0X") => (16, &body[2..]),
        Some("0o" | "0O") => (8, &body[2..]),
        Some("0b" | "0B") => (2, &body[2..]),
        _ if body.len() > 1 && body.starts_with('0') => (8, &body[1..]),
        _ => (10, body),
    };
    if digits.is_empty() || !digits.chars().all(|c| c.is_digit(radix)) {
        return None;
    }
    let v = i128::try_from(u128::from_str_radix(digits, radix).ok()?).ok()?;
    match sign {
        -1 => (v <= 1 << 63).then_some(-v),
        // ParseUint takes no sign.
        1 => (v <= i128::from(i64::MAX)).then_some(v),
        _ => (v <= i128::from(u64::MAX)).then_some(v),
    }
}

/// go-yaml's `^[-+]?(\.[0-9]+|[0-9]+(\.[0-9]*)?)([eE][-+]?[0-9]+)?$`.
fn is_yaml_float(s: &str) -> bool {
    let digits = |t: &str| !t.is_empty() && t.bytes().all(|b| b.is_ascii_digit());
    let s = s.strip_prefix(['-', '+']).unwrap_or(s);
    let (mantissa, exponent) = match s.find(['e', 'E']) {
        Some(i) => (&s[..i], Some(&s[i + 1..])),
        None => (s, None),
    };
    let mantissa_ok = match mantissa.split_once('.') {
        Some(("", fraction)) => digits(fraction),
        Some((int, fraction)) => digits(int) && (fraction.is_empty() || digits(fraction)),
        None => digits(mantissa),
    };
    mantissa_ok && exponent.is_none_or(|e| digits(e.strip_prefix(['-', '+']).unwrap_or(e)))
}

/// `convertToJSONableObject`: keys become strings.
fn jsonable(yaml: Yaml) -> Result<Node, String> {
    Ok(match yaml {
        Yaml::Null => Node::Null,
        Yaml::Bool(b) => Node::Bool(b),
        Yaml::Int(i) => Node::Int(i),
        Yaml::Float(f) => Node::Float(f),
        Yaml::Str(s) => Node::Str(s),
        Yaml::Seq(items) => Node::Seq(items.into_iter().map(jsonable).collect::<Result<_, _>>()?),
        Yaml::Map(entries) => {
            let mut map = BTreeMap::new();
            for (key, value) in entries {
                let key = match &key {
                    Yaml::Str(s) => s.clone(),
                    Yaml::Int(i) => i.to_string(),
                    Yaml::Bool(b) => b.to_string(),
                    Yaml::Float(f) => go_float(*f),
                    Yaml::Null => {
                        return Err(format!(
                            "unsupported map key of type: %!s(<nil>), key: <nil>, value: {}",
                            go_value(&value)
                        ));
                    }
                    Yaml::Seq(_) | Yaml::Map(_) => return Err(format!("yaml: invalid map key: {}", go_value(&key))),
                };
                map.insert(key, jsonable(value)?);
            }
            Node::Map(map)
        }
    })
}

/// Go's `%#v` of what go-yaml decoded, near enough for an error message.
fn go_value(yaml: &Yaml) -> String {
    let join = |items: Vec<String>| items.join(", ");
    match yaml {
        Yaml::Null => "<nil>".into(),
        Yaml::Bool(b) => b.to_string(),
        Yaml::Int(i) => i.to_string(),
        Yaml::Float(f) => go_float(*f),
        Yaml::Str(s) => go_quote(s),
        Yaml::Seq(items) => format!("[]interface {{}}{{{}}}", join(items.iter().map(go_value).collect())),
        Yaml::Map(entries) => format!(
            "map[interface {{}}]interface {{}}{{{}}}",
            join(entries.iter().map(|(k, v)| format!("{}:{}", go_value(k), go_value(v))).collect())
        ),
    }
}

/// `json.Marshal` refuses NaN and the infinities (keys in sorted order).
fn finite(json: &Node) -> Result<(), String> {
    match json {
        Node::Float(f) if !f.is_finite() => {
            let v = if f.is_nan() {
                "NaN"
            } else if *f > 0.0 {
                "+Inf"
            } else {
                "-Inf"
            };
            Err(format!("json: unsupported value: {v}"))
        }
        Node::Seq(items) => items.iter().try_for_each(finite),
        Node::Map(map) => map.values().try_for_each(finite),
        _ => Ok(()),
    }
}

// ---------------------------------------------------------------------------
// ProxyConfig's messages (istio/api `mesh/v1alpha1/proxy.proto` and what it
// imports), fields in declaration order, which is jsonpb's order.

#[derive(Clone, Copy)]
enum Kind {
    Str,
    /// Also `google.protobuf.BoolValue` (a wrapper's JSON is its value's).
    Bool,
    /// Also `Int32Value` and `Int64Value`.
    Int(IntType),
    Double,
    Enum(&'static EnumType),
    Duration,
    Message(&'static [Field]),
}

#[derive(Clone, Copy)]
enum IntType {
    I32,
    U32,
    I64,
}

impl IntType {
    fn go_type(self) -> &'static str {
        match self {
            IntType::I32 => "int32",
            IntType::U32 => "uint32",
            IntType::I64 => "int64",
        }
    }

    /// A JSON number literal as `strconv.ParseInt`/`ParseUint` and the
    /// type's range take it.
    fn parse(self, literal: &str) -> Option<i64> {
        match self {
            IntType::I32 => literal.parse::<i32>().ok().map(i64::from),
            IntType::U32 => literal.parse::<u32>().ok().map(i64::from),
            IntType::I64 => literal.parse::<i64>().ok(),
        }
    }
}

struct EnumType {
    name: &'static str,
    values: &'static [(&'static str, i32)],
}

impl EnumType {
    /// The generated `String()`: the value's name, else its number.
    fn name_of(&self, n: i64) -> String {
        self.values.iter().find(|(_, v)| i64::from(*v) == n).map_or_else(|| n.to_string(), |(name, _)| (*name).into())
    }
}

#[derive(Clone, Copy)]
enum Card {
    One,
    List,
    /// `map<string, kind>`.
    Map,
}

struct Field {
    /// The proto name; the JSON name is its lowerCamelCase.
    name: &'static str,
    kind: Kind,
    card: Card,
    /// Members of the message's nth `oneof` share n (0: none).
    oneof: u8,
}

const fn field(name: &'static str, kind: Kind) -> Field {
    Field { name, kind, card: Card::One, oneof: 0 }
}

const fn list(name: &'static str, kind: Kind) -> Field {
    Field { name, kind, card: Card::List, oneof: 0 }
}

const fn map(name: &'static str, kind: Kind) -> Field {
    Field { name, kind, card: Card::Map, oneof: 0 }
}

const fn oneof(group: u8, name: &'static str, kind: Kind) -> Field {
    Field { name, kind, card: Card::One, oneof: group }
}

const STR: Kind = Kind::Str;
const BOOL: Kind = Kind::Bool;
const I32: Kind = Kind::Int(IntType::I32);
const U32: Kind = Kind::Int(IntType::U32);
const I64: Kind = Kind::Int(IntType::I64);
const DURATION: Kind = Kind::Duration;

const AUTHENTICATION_POLICY: &EnumType = &EnumType {
    name: "istio.mesh.v1alpha1.AuthenticationPolicy",
    values: &[("NONE", 0), ("MUTUAL_TLS", 1), ("INHERIT", 1000)],
};
const TRACING_SERVICE_NAME: &EnumType = &EnumType {
    name: "istio.mesh.v1alpha1.ProxyConfig.TracingServiceName",
    values: &[("APP_LABEL_AND_NAMESPACE", 0), ("CANONICAL_NAME_ONLY", 1), ("CANONICAL_NAME_AND_NAMESPACE", 2)],
};
const INTERCEPTION_MODE: &EnumType = &EnumType {
    name: "istio.mesh.v1alpha1.ProxyConfig.InboundInterceptionMode",
    values: &[("REDIRECT", 0), ("TPROXY", 1), ("NONE", 2)],
};
const TRACE_CONTEXT: &EnumType = &EnumType {
    name: "istio.mesh.v1alpha1.Tracing.OpenCensusAgent.TraceContext",
    values: &[("UNSPECIFIED", 0), ("W3C_TRACE_CONTEXT", 1), ("GRPC_BIN", 2), ("CLOUD_TRACE_CONTEXT", 3), ("B3", 4)],
};
const FORWARD_CLIENT_CERT_DETAILS: &EnumType = &EnumType {
    name: "istio.mesh.v1alpha1.ForwardClientCertDetails",
    values: &[
        ("UNDEFINED", 0),
        ("SANITIZE", 1),
        ("FORWARD_ONLY", 2),
        ("APPEND_FORWARD", 3),
        ("SANITIZE_SET", 4),
        ("ALWAYS_FORWARD_ONLY", 5),
    ],
};
const METADATA_EXCHANGE_MODE: &EnumType = &EnumType {
    name: "istio.mesh.v1alpha1.ProxyConfig.ProxyHeaders.MetadataExchangeMode",
    values: &[("UNDEFINED", 0), ("IN_MESH", 1)],
};
const PROFILE: &EnumType = &EnumType {
    name: "istio.mesh.v1alpha1.ProxyConfig.ConnectionSettings.Profile",
    values: &[("SIDECAR", 0), ("EDGE", 1)],
};
const HEADERS_WITH_UNDERSCORES_ACTION: &EnumType = &EnumType {
    name: "istio.mesh.v1alpha1.ProxyConfig.ConnectionSettings.HeadersWithUnderscoresAction",
    values: &[
        ("HEADERS_WITH_UNDERSCORES_UNSPECIFIED", 0),
        ("HEADERS_WITH_UNDERSCORES_ALLOW", 1),
        ("HEADERS_WITH_UNDERSCORES_REJECT_REQUEST", 2),
        ("HEADERS_WITH_UNDERSCORES_DROP_HEADER", 3),
    ],
};
const PATH_WITH_ESCAPED_SLASHES_ACTION: &EnumType = &EnumType {
    name: "istio.mesh.v1alpha1.ProxyConfig.ConnectionSettings.PathWithEscapedSlashesAction",
    values: &[
        ("PATH_WITH_ESCAPED_SLASHES_UNSPECIFIED", 0),
        ("KEEP_UNCHANGED", 1),
        ("REJECT_REQUEST", 2),
        ("UNESCAPE_AND_REDIRECT", 3),
        ("UNESCAPE_AND_FORWARD", 4),
    ],
};
const TLS_MODE: &EnumType = &EnumType {
    name: "istio.networking.v1alpha3.ClientTLSSettings.TLSmode",
    values: &[("DISABLE", 0), ("SIMPLE", 1), ("MUTUAL", 2), ("ISTIO_MUTUAL", 3)],
};

/// `istio.networking.v1alpha3.ClientTLSSettings`.
const CLIENT_TLS_SETTINGS: &[Field] = &[
    field("mode", Kind::Enum(TLS_MODE)),
    field("client_certificate", STR),
    field("private_key", STR),
    field("ca_certificates", STR),
    field("credential_name", STR),
    list("subject_alt_names", STR),
    field("sni", STR),
    field("insecure_skip_verify", BOOL),
    field("ca_crl", STR),
];
/// `Tracing.Zipkin`, `Tracing.Datadog`.
const ADDRESS: &[Field] = &[field("address", STR)];
const LIGHTSTEP: &[Field] = &[field("address", STR), field("access_token", STR)];
const STACKDRIVER: &[Field] = &[
    field("debug", BOOL),
    field("max_number_of_attributes", I64),
    field("max_number_of_annotations", I64),
    field("max_number_of_message_events", I64),
];
const OPEN_CENSUS_AGENT: &[Field] = &[field("address", STR), list("context", Kind::Enum(TRACE_CONTEXT))];
const LITERAL: &[Field] = &[field("value", STR)];
/// `Tracing.Environment`, `Tracing.RequestHeader`.
const NAME_AND_DEFAULT: &[Field] = &[field("name", STR), field("default_value", STR)];
const CUSTOM_TAG: &[Field] = &[
    oneof(1, "literal", Kind::Message(LITERAL)),
    oneof(1, "environment", Kind::Message(NAME_AND_DEFAULT)),
    oneof(1, "header", Kind::Message(NAME_AND_DEFAULT)),
];
const TRACING: &[Field] = &[
    oneof(1, "zipkin", Kind::Message(ADDRESS)),
    oneof(1, "lightstep", Kind::Message(LIGHTSTEP)),
    oneof(1, "datadog", Kind::Message(ADDRESS)),
    oneof(1, "stackdriver", Kind::Message(STACKDRIVER)),
    oneof(1, "open_census_agent", Kind::Message(OPEN_CENSUS_AGENT)),
    map("custom_tags", Kind::Message(CUSTOM_TAG)),
    field("max_path_tag_length", U32),
    field("sampling", Kind::Double),
    field("tls_settings", Kind::Message(CLIENT_TLS_SETTINGS)),
    field("enable_istio_tags", BOOL),
];
const SDS: &[Field] = &[field("enabled", BOOL), field("k8s_sa_jwt_path", STR)];
const TOPOLOGY: &[Field] = &[
    field("num_trusted_proxies", U32),
    field("forward_client_cert_details", Kind::Enum(FORWARD_CLIENT_CERT_DETAILS)),
    field("proxy_protocol", Kind::Message(&[])),
];
const TCP_KEEPALIVE: &[Field] = &[field("probes", U32), field("time", DURATION), field("interval", DURATION)];
const REMOTE_SERVICE: &[Field] = &[
    field("address", STR),
    field("tls_settings", Kind::Message(CLIENT_TLS_SETTINGS)),
    field("tcp_keepalive", Kind::Message(TCP_KEEPALIVE)),
];
const HTTP_HEADER: &[Field] = &[field("name", STR), field("value", STR)];
const HTTP_GET: &[Field] = &[
    field("path", STR),
    field("port", U32),
    field("host", STR),
    field("scheme", STR),
    list("http_headers", Kind::Message(HTTP_HEADER)),
];
const READINESS_PROBE: &[Field] = &[
    field("initial_delay_seconds", I32),
    field("timeout_seconds", I32),
    field("period_seconds", I32),
    field("success_threshold", I32),
    field("failure_threshold", I32),
    oneof(1, "http_get", Kind::Message(HTTP_GET)),
    oneof(1, "tcp_socket", Kind::Message(TCP_SOCKET)),
    oneof(1, "exec", Kind::Message(EXEC)),
    oneof(1, "grpc", Kind::Message(GRPC)),
];
const TCP_SOCKET: &[Field] = &[field("host", STR), field("port", U32)];
const EXEC: &[Field] = &[list("command", STR)];
const GRPC: &[Field] = &[field("port", U32), field("service", STR)];
const PROXY_STATS_MATCHER: &[Field] =
    &[list("inclusion_prefixes", STR), list("inclusion_suffixes", STR), list("inclusion_regexps", STR)];
/// `PrivateKeyProvider.CryptoMb`, `PrivateKeyProvider.QAT`.
const POLLER: &[Field] = &[field("poll_delay", DURATION), field("fallback", BOOL)];
const PRIVATE_KEY_PROVIDER: &[Field] =
    &[oneof(1, "cryptomb", Kind::Message(POLLER)), oneof(1, "qat", Kind::Message(POLLER))];
const DISABLED: &[Field] = &[field("disabled", BOOL)];
const ENABLED: &[Field] = &[field("enabled", BOOL)];
const PROXY_HEADERS: &[Field] = &[
    field("forwarded_client_cert", Kind::Enum(FORWARD_CLIENT_CERT_DETAILS)),
    field("set_current_client_cert_details", Kind::Message(CLIENT_CERT_DETAILS)),
    field("request_id", Kind::Message(DISABLED)),
    field("server", Kind::Message(SERVER)),
    field("attempt_count", Kind::Message(DISABLED)),
    field("envoy_debug_headers", Kind::Message(DISABLED)),
    field("metadata_exchange_headers", Kind::Message(METADATA_EXCHANGE_HEADERS)),
    field("preserve_http1_header_case", BOOL),
    field("x_forwarded_host", Kind::Message(ENABLED)),
    field("x_forwarded_port", Kind::Message(ENABLED)),
];
const CLIENT_CERT_DETAILS: &[Field] =
    &[field("subject", BOOL), field("cert", BOOL), field("chain", BOOL), field("dns", BOOL), field("uri", BOOL)];
const SERVER: &[Field] = &[field("disabled", BOOL), field("value", STR)];
const METADATA_EXCHANGE_HEADERS: &[Field] = &[field("mode", Kind::Enum(METADATA_EXCHANGE_MODE))];
const PROXY_IMAGE: &[Field] = &[field("image_type", STR)];
const CONNECTION_SETTINGS: &[Field] = &[
    field("profile", Kind::Enum(PROFILE)),
    field("listener_per_connection_buffer_limit_bytes", I32),
    field("cluster_per_connection_buffer_limit_bytes", I32),
    field("http_idle_timeout", DURATION),
    field("http_max_connection_duration", DURATION),
    field("http_drain_timeout", DURATION),
    field("http_request_timeout", DURATION),
    field("http_request_headers_timeout", DURATION),
    field("http_stream_idle_timeout", DURATION),
    field("http_max_stream_duration", DURATION),
    field("http_max_concurrent_streams", I32),
    field("http2_initial_stream_window_size", I32),
    field("http2_initial_connection_window_size", I32),
    field("http_headers_with_underscores_action", Kind::Enum(HEADERS_WITH_UNDERSCORES_ACTION)),
    field("http_merge_slashes", BOOL),
    field("http_path_with_escaped_slashes_action", Kind::Enum(PATH_WITH_ESCAPED_SLASHES_ACTION)),
    field("listener_connection_limit", I32),
    field("global_downstream_connection_limit", I32),
];
const PROXY_CONFIG: &[Field] = &[
    field("config_path", STR),
    field("binary_path", STR),
    oneof(1, "service_cluster", STR),
    oneof(1, "tracing_service_name", Kind::Enum(TRACING_SERVICE_NAME)),
    field("drain_duration", DURATION),
    field("discovery_address", STR),
    field("discovery_refresh_delay", DURATION),
    field("zipkin_address", STR),
    field("statsd_udp_address", STR),
    field("envoy_metrics_service_address", STR),
    field("proxy_admin_port", I32),
    field("availability_zone", STR),
    field("control_plane_auth_policy", Kind::Enum(AUTHENTICATION_POLICY)),
    field("custom_config_file", STR),
    field("stat_name_length", I32),
    field("concurrency", I32),
    field("proxy_bootstrap_template_path", STR),
    field("interception_mode", Kind::Enum(INTERCEPTION_MODE)),
    field("tracing", Kind::Message(TRACING)),
    field("sds", Kind::Message(SDS)),
    field("envoy_access_log_service", Kind::Message(REMOTE_SERVICE)),
    field("envoy_metrics_service", Kind::Message(REMOTE_SERVICE)),
    map("proxy_metadata", STR),
    map("runtime_values", STR),
    field("status_port", I32),
    list("extra_stat_tags", STR),
    field("gateway_topology", Kind::Message(TOPOLOGY)),
    field("termination_drain_duration", DURATION),
    field("mesh_id", STR),
    field("readiness_probe", Kind::Message(READINESS_PROBE)),
    field("proxy_stats_matcher", Kind::Message(PROXY_STATS_MATCHER)),
    field("hold_application_until_proxy_starts", BOOL),
    list("ca_certificates_pem", STR),
    field("image", Kind::Message(PROXY_IMAGE)),
    field("private_key_provider", Kind::Message(PRIVATE_KEY_PROVIDER)),
    field("proxy_headers", Kind::Message(PROXY_HEADERS)),
    field("file_flush_interval", DURATION),
    field("file_flush_min_size_kb", U32),
    field("stats_compression", BOOL),
    field("connection_settings", Kind::Message(CONNECTION_SETTINGS)),
];

// ---------------------------------------------------------------------------
// Legacy jsonpb onto the defaults.

/// A decoded value, as much of it as the checks read.
enum Value {
    Str(String),
    Bool(bool),
    /// Integers and enums.
    Int(i64),
    /// Nanoseconds.
    Duration(i64),
    Message(Message),
    List(Vec<Value>),
    /// Doubles and maps.
    Other,
}

/// The fields set, by proto name (a wrapper or message is set when here).
type Message = BTreeMap<&'static str, Value>;

const MILLISECOND: i64 = 1_000_000;
const SECOND: i64 = 1_000_000_000;

/// `mesh.DefaultProxyConfig()`.
fn default_proxy_config() -> Message {
    let s = |v: &str| Value::Str(v.to_owned());
    Message::from([
        ("config_path", s("./etc/istio/proxy")),
        ("binary_path", s("/usr/local/bin/envoy")),
        ("service_cluster", s("istio-proxy")),
        ("drain_duration", Value::Duration(45 * SECOND)),
        ("termination_drain_duration", Value::Duration(5 * SECOND)),
        ("proxy_admin_port", Value::Int(15000)),
        ("control_plane_auth_policy", Value::Int(1)),
        ("discovery_address", s("istiod.istio-system.svc:15012")),
        ("stat_name_length", Value::Int(189)),
        ("status_port", Value::Int(15020)),
    ])
}

/// protoc's `json_name`.
fn json_name(proto: &str) -> String {
    let mut out = String::with_capacity(proto.len());
    let mut upper = false;
    for c in proto.chars() {
        if c == '_' {
            upper = true;
        } else {
            out.push(if upper { c.to_ascii_uppercase() } else { c });
            upper = false;
        }
    }
    out
}

/// `unmarshalMessage`: sets the fields `json` has, field by field (a
/// message field is replaced, not merged), stopping at the first error.
fn decode_message(fields: &'static [Field], json: &Node, into: &mut Message) -> Result<(), String> {
    let object = match json {
        Node::Null => return Ok(()),
        Node::Map(object) => object,
        other => return Err(type_error(other, "map[string]json.RawMessage")),
    };
    for f in fields {
        let raw = object.get(json_name(f.name).as_str()).or_else(|| object.get(f.name));
        let Some(raw) = raw.filter(|raw| !matches!(raw, Node::Null)) else { continue };
        let value = decode_field(f, raw)?;
        if f.oneof != 0 {
            into.retain(|name, _| !fields.iter().any(|o| o.oneof == f.oneof && o.name == *name));
        }
        into.insert(f.name, value);
    }
    Ok(())
}

fn decode_field(f: &Field, raw: &Node) -> Result<Value, String> {
    match f.card {
        Card::One => decode_value(f.kind, raw),
        Card::List => match raw {
            Node::Seq(items) => {
                items.iter().map(|item| decode_value(f.kind, item)).collect::<Result<_, _>>().map(Value::List)
            }
            other => Err(type_error(other, "[]json.RawMessage")),
        },
        Card::Map => match raw {
            Node::Map(entries) => {
                entries.values().try_for_each(|v| decode_value(f.kind, v).map(drop)).map(|()| Value::Other)
            }
            other => Err(type_error(other, "map[string]json.RawMessage")),
        },
    }
}

/// `unmarshalSingularValue` (a `null` inside a list or map is the zero
/// value, an empty message included).
fn decode_value(kind: Kind, json: &Node) -> Result<Value, String> {
    match (kind, json) {
        (Kind::Str, Node::Str(s)) => Ok(Value::Str(s.clone())),
        (Kind::Str, Node::Null) => Ok(Value::Str(String::new())),
        (Kind::Str, other) => Err(type_error(other, "string")),
        (Kind::Bool, Node::Bool(b)) => Ok(Value::Bool(*b)),
        (Kind::Bool, Node::Null) => Ok(Value::Bool(false)),
        (Kind::Bool, other) => Err(type_error(other, "bool")),
        (Kind::Int(t), json) => json_int(json, t.go_type(), true, |literal| t.parse(literal)).map(Value::Int),
        (Kind::Double, Node::Str(s)) if matches!(s.as_str(), "NaN" | "Infinity" | "-Infinity") => Ok(Value::Other),
        (Kind::Double, json) => match json_number(json, "float64", true)? {
            Some(literal) if !literal.parse::<f64>().is_ok_and(f64::is_finite) => Err(not_in_type(&literal, "float64")),
            _ => Ok(Value::Other),
        },
        (Kind::Enum(e), Node::Str(s)) => {
            let name = go_json_body(s);
            e.values
                .iter()
                .find(|(n, _)| *n == name)
                .map(|(_, v)| Value::Int(i64::from(*v)))
                .ok_or_else(|| format!("unknown value {} for enum {}", go_quote(&format!("\"{name}\"")), e.name))
        }
        (Kind::Enum(_), json) => {
            json_int(json, "protoreflect.EnumNumber", false, |l| l.parse::<i32>().ok().map(i64::from)).map(Value::Int)
        }
        // A Duration is `time.ParseDuration` of a JSON string.
        (Kind::Duration, Node::Str(s)) => {
            parse_duration(s).map(Value::Duration).map_err(|e| format!("bad Duration: {e}"))
        }
        (Kind::Duration, Node::Null) => Ok(Value::Duration(0)),
        (Kind::Duration, other) => Err(type_error(other, "string")),
        (Kind::Message(fields), json) => {
            let mut message = Message::new();
            decode_message(fields, json, &mut message)?;
            Ok(Value::Message(message))
        }
    }
}

/// `json.Unmarshal` of an integer into `go_type` (`null` leaves 0).
fn json_int(json: &Node, go_type: &str, trim_quote: bool, parse: impl Fn(&str) -> Option<i64>) -> Result<i64, String> {
    match json_number(json, go_type, trim_quote)? {
        None => Ok(0),
        Some(literal) => parse(&literal).ok_or_else(|| not_in_type(&literal, go_type)),
    }
}

/// The number literal `json.Unmarshal` finds for a number type, `None`
/// for `null`. With `trim_quote` a string's JSON text counts without its
/// quotes, however odd what is left (jsonpb's `trimQuote`).
fn json_number(json: &Node, go_type: &str, trim_quote: bool) -> Result<Option<String>, String> {
    let text = match json {
        Node::Null => return Ok(None),
        Node::Bool(b) => b.to_string(),
        Node::Int(i) => i.to_string(),
        Node::Float(f) => go_float(*f),
        Node::Str(s) if trim_quote => go_json_body(s),
        other => return Err(type_error(other, go_type)),
    };
    match scan_json(&text)? {
        Top::Null => Ok(None),
        Top::Number(literal) => Ok(Some(literal.to_owned())),
        Top::Other(kind) => Err(format!("json: cannot unmarshal {kind} into Go value of type {go_type}")),
    }
}

/// A number out of the type's range or syntax (`1.5` for an int32).
fn not_in_type(literal: &str, go_type: &str) -> String {
    format!("json: cannot unmarshal number {literal} into Go value of type {go_type}")
}

/// encoding/json's `UnmarshalTypeError`.
fn type_error(json: &Node, go_type: &str) -> String {
    let kind = match json {
        Node::Null => "null",
        Node::Bool(_) => "bool",
        Node::Int(_) | Node::Float(_) => "number",
        Node::Str(_) => "string",
        Node::Seq(_) => "array",
        Node::Map(_) => "object",
    };
    format!("json: cannot unmarshal {kind} into Go value of type {go_type}")
}

/// What a valid JSON text holds, to `json.Unmarshal`.
enum Top<'a> {
    Null,
    Number(&'a str),
    Other(&'static str),
}

const END_OF_INPUT: &str = "unexpected end of JSON input";

/// encoding/json's `checkValid`, with its messages, then the kind of value.
fn scan_json(text: &str) -> Result<Top<'_>, String> {
    let mut scan = Scanner { b: text.as_bytes(), i: 0 };
    scan.value()?;
    scan.space();
    if let Some(c) = scan.peek() {
        return Err(invalid_character(c, "after top-level value"));
    }
    let value = text.trim_matches([' ', '\t', '\n', '\r']);
    Ok(match value.as_bytes()[0] {
        b'n' => Top::Null,
        b't' | b'f' => Top::Other("bool"),
        b'"' => Top::Other("string"),
        b'[' => Top::Other("array"),
        b'{' => Top::Other("object"),
        _ => Top::Number(value),
    })
}

fn invalid_character(c: u8, context: &str) -> String {
    format!("invalid character {} {context}", quote_char(c))
}

struct Scanner<'a> {
    b: &'a [u8],
    i: usize,
}

impl Scanner<'_> {
    fn peek(&self) -> Option<u8> {
        self.b.get(self.i).copied()
    }

    /// The scanner's `eof` steps once more with a space: where a space is
    /// wrong, that is the error rather than the end of input.
    fn peek_or_space(&self) -> u8 {
        self.peek().unwrap_or(b' ')
    }

    fn space(&mut self) {
        while matches!(self.peek(), Some(b' ' | b'\t' | b'\n' | b'\r')) {
            self.i += 1;
        }
    }

    fn digits(&mut self) {
        while self.peek().is_some_and(|c| c.is_ascii_digit()) {
            self.i += 1;
        }
    }

    fn value(&mut self) -> Result<(), String> {
        self.space();
        match self.peek() {
            None => Err(END_OF_INPUT.into()),
            Some(b'{') => self.object(),
            Some(b'[') => self.array(),
            Some(b'"') => self.string(),
            Some(b'-' | b'0'..=b'9') => self.number(),
            Some(b't') => self.literal("true"),
            Some(b'f') => self.literal("false"),
            Some(b'n') => self.literal("null"),
            Some(c) => Err(invalid_character(c, "looking for beginning of value")),
        }
    }

    fn object(&mut self) -> Result<(), String> {
        self.i += 1;
        self.space();
        if self.peek() == Some(b'}') {
            self.i += 1;
            return Ok(());
        }
        loop {
            match self.peek() {
                Some(b'"') => self.string()?,
                Some(c) => return Err(invalid_character(c, "looking for beginning of object key string")),
                None => return Err(END_OF_INPUT.into()),
            }
            self.space();
            match self.peek() {
                Some(b':') => self.i += 1,
                Some(c) => return Err(invalid_character(c, "after object key")),
                None => return Err(END_OF_INPUT.into()),
            }
            self.value()?;
            self.space();
            match self.peek() {
                Some(b',') => {
                    self.i += 1;
                    self.space();
                }
                Some(b'}') => {
                    self.i += 1;
                    return Ok(());
                }
                Some(c) => return Err(invalid_character(c, "after object key:value pair")),
                None => return Err(END_OF_INPUT.into()),
            }
        }
    }

    fn array(&mut self) -> Result<(), String> {
        self.i += 1;
        self.space();
        if self.peek() == Some(b']') {
            self.i += 1;
            return Ok(());
        }
        loop {
            self.value()?;
            self.space();
            match self.peek() {
                Some(b',') => self.i += 1,
                Some(b']') => {
                    self.i += 1;
                    return Ok(());
                }
                Some(c) => return Err(invalid_character(c, "after array element")),
                None => return Err(END_OF_INPUT.into()),
            }
        }
    }

    fn string(&mut self) -> Result<(), String> {
        self.i += 1;
        loop {
            let Some(c) = self.peek() else { return Err(END_OF_INPUT.into()) };
            self.i += 1;
            match c {
                b'"' => return Ok(()),
                b'\\' => {
                    let e = self.peek_or_space();
                    self.i += 1;
                    match e {
                        b'"' | b'\\' | b'/' | b'b' | b'f' | b'n' | b'r' | b't' => {}
                        b'u' => {
                            for _ in 0..4 {
                                let h = self.peek_or_space();
                                if !h.is_ascii_hexdigit() {
                                    return Err(invalid_character(h, "in \\u hexadecimal character escape"));
                                }
                                self.i += 1;
                            }
                        }
                        _ => return Err(invalid_character(e, "in string escape code")),
                    }
                }
                c if c < 0x20 => return Err(invalid_character(c, "in string literal")),
                _ => {}
            }
        }
    }

    fn number(&mut self) -> Result<(), String> {
        if self.peek() == Some(b'-') {
            self.i += 1;
            let c = self.peek_or_space();
            if !c.is_ascii_digit() {
                return Err(invalid_character(c, "in numeric literal"));
            }
        }
        if self.peek() == Some(b'0') {
            self.i += 1;
        } else {
            self.digits();
        }
        if self.peek() == Some(b'.') {
            self.i += 1;
            let c = self.peek_or_space();
            if !c.is_ascii_digit() {
                return Err(invalid_character(c, "after decimal point in numeric literal"));
            }
            self.digits();
        }
        if matches!(self.peek(), Some(b'e' | b'E')) {
            self.i += 1;
            if matches!(self.peek(), Some(b'+' | b'-')) {
                self.i += 1;
            }
            let c = self.peek_or_space();
            if !c.is_ascii_digit() {
                return Err(invalid_character(c, "in exponent of numeric literal"));
            }
            self.digits();
        }
        Ok(())
    }

    fn literal(&mut self, word: &str) -> Result<(), String> {
        self.i += 1;
        for want in word.bytes().skip(1) {
            let c = self.peek_or_space();
            if c != want {
                return Err(invalid_character(c, &format!("in literal {word} (expecting {})", quote_char(want))));
            }
            self.i += 1;
        }
        Ok(())
    }
}

// ---------------------------------------------------------------------------
// ValidateMeshConfigProxyConfig (pkg/config/validation/agent/validation.go).

fn text<'a>(m: &'a Message, name: &str) -> &'a str {
    match m.get(name) {
        Some(Value::Str(s)) => s,
        _ => "",
    }
}

fn number(m: &Message, name: &str) -> i64 {
    match m.get(name) {
        Some(Value::Int(v)) => *v,
        _ => 0,
    }
}

/// A set wrapper's value.
fn wrapped(m: &Message, name: &str) -> Option<i64> {
    match m.get(name) {
        Some(Value::Int(v)) => Some(*v),
        _ => None,
    }
}

fn flag(m: &Message, name: &str) -> bool {
    match m.get(name) {
        Some(Value::Bool(b)) => *b,
        _ => false,
    }
}

fn duration(m: &Message, name: &str) -> Option<i64> {
    match m.get(name) {
        Some(Value::Duration(d)) => Some(*d),
        _ => None,
    }
}

fn message<'a>(m: &'a Message, name: &str) -> Option<&'a Message> {
    match m.get(name) {
        Some(Value::Message(v)) => Some(v),
        _ => None,
    }
}

/// A repeated field is non-nil once it has an element.
fn listed(m: &Message, name: &str) -> bool {
    matches!(m.get(name), Some(Value::List(items)) if !items.is_empty())
}

/// `multierror.Prefix(err, p)`: errwrap fills the template `"p {{err}}"`,
/// so a `{{err}}` inside `p` is filled in too.
fn prefix(p: &str, err: &str) -> String {
    format!("{p} {{{{err}}}}").replace("{{err}}", err)
}

/// go-multierror's `ListFormatFunc`.
fn multierror(errors: &[String]) -> String {
    if let [one] = errors {
        return format!("1 error occurred:\n\t* {one}\n\n");
    }
    format!("{} errors occurred:\n\t* {}\n\n", errors.len(), errors.join("\n\t* "))
}

/// Its errors, flattened as `multierror.Append` flattens them.
fn validate_proxy_config(pc: &Message) -> Vec<String> {
    let mut errs: Vec<String> = Vec::new();
    if text(pc, "config_path").is_empty() {
        errs.push("config path must be set".into());
    }
    if text(pc, "binary_path").is_empty() {
        errs.push("binary path must be set".into());
    }
    match pc.get("service_cluster") {
        Some(Value::Str(s)) if s.is_empty() => errs.push("service cluster must be specified".into()),
        Some(_) => {}
        None if pc.contains_key("tracing_service_name") => {}
        None => errs.push("oneof service cluster or tracing service name must be specified".into()),
    }
    errs.extend(drain_duration(duration(pc, "drain_duration").unwrap_or(0)));
    let discovery = text(pc, "discovery_address");
    if discovery.is_empty() {
        errs.push("discovery address must be set to the proxy discovery service".into());
    } else if let Err(e) = proxy_address(discovery) {
        errs.push(prefix("invalid discovery address:", &e));
    }
    let tracing = message(pc, "tracing");
    if let Some(lightstep) = tracing.and_then(|t| message(t, "lightstep")) {
        errs.extend(lightstep_collector(lightstep).iter().map(|e| prefix("invalid lightstep config:", e)));
    }
    for tracer in ["zipkin", "datadog"] {
        if let Some(t) = tracing.and_then(|t| message(t, tracer))
            && let Err(e) = proxy_address(&text(t, "address").replacen("$(HOST_IP)", "127.0.0.1", 1))
        {
            errs.push(prefix(&format!("invalid {tracer} config:"), &e));
        }
    }
    if let Some(tls) = tracing.and_then(|t| message(t, "tls_settings")) {
        errs.extend(client_tls(tls).iter().map(|e| prefix("invalid tracing TLS config:", e)));
    }
    // `invalid tracing custom tags:` needs a nil tag, which JSON cannot
    // give: a `null` tag decodes to an empty one.
    for (name, what) in [
        ("statsd_udp_address", "statsd udp address"),
        ("envoy_metrics_service_address", "envoy metrics service address"),
    ] {
        let address = text(pc, name);
        if !address.is_empty()
            && let Err(e) = proxy_address(address)
        {
            errs.push(prefix(&format!("invalid {what} {}:", go_quote(address)), &e));
        }
    }
    // `ISTIO_META_DNS_AUTO_ALLOCATE` in proxyMetadata is a warning, which
    // the webhook drops.
    for (name, what) in
        [("envoy_metrics_service", "envoy metrics service"), ("envoy_access_log_service", "envoy access log service")]
    {
        let address = message(pc, name).map_or("", |m| text(m, "address"));
        if !address.is_empty()
            && let Err(e) = proxy_address(address)
        {
            errs.push(prefix(&format!("invalid {what} address {}:", go_quote(address)), &e));
        }
    }
    if let Err(e) = port(number(pc, "proxy_admin_port")) {
        errs.push(prefix("invalid proxy admin port:", &e));
    }
    let policy = number(pc, "control_plane_auth_policy");
    if !matches!(policy, 0 | 1) {
        let e = format!("unrecognized control plane auth policy {}", go_quote(&AUTHENTICATION_POLICY.name_of(policy)));
        errs.push(prefix("invalid authentication policy:", &e));
    }
    if let Err(e) = port(number(pc, "status_port")) {
        errs.push(prefix("invalid status port:", &e));
    }
    if let Some(provider) = message(pc, "private_key_provider") {
        errs.extend(
            private_key_provider(provider).iter().map(|e| prefix("invalid private key provider configuration:", e)),
        );
    }
    if let Some(settings) = message(pc, "connection_settings") {
        errs.extend(connection_settings(settings).iter().map(|e| prefix("invalid connection settings:", e)));
    }
    errs
}

/// `ValidateDrainDuration`.
fn drain_duration(d: i64) -> Option<String> {
    if d < MILLISECOND {
        Some(prefix("invalid drain duration:", "duration must be greater than 1ms"))
    } else if d % MILLISECOND != 0 {
        Some(prefix("invalid drain duration:", "only durations to ms precision are supported"))
    } else if d % SECOND != 0 {
        Some("drain time only supports durations to seconds precision".into())
    } else {
        None
    }
}

/// `ValidatePort`.
fn port(p: i64) -> Result<(), String> {
    if (1..=65535).contains(&p) { Ok(()) } else { Err(format!("port number {p} must be in the range 1..65535")) }
}

/// `ValidateLightstepCollector`.
fn lightstep_collector(ls: &Message) -> Vec<String> {
    let mut errs = Vec::new();
    let address = text(ls, "address");
    if address.is_empty() {
        errs.push("address is required".into());
    }
    if let Err(e) = proxy_address(address) {
        errs.push(prefix("invalid lightstep address:", &e));
    }
    if text(ls, "access_token").is_empty() {
        errs.push("access token is required".into());
    }
    errs
}

/// `ValidateTLS("", settings)`.
fn client_tls(tls: &Message) -> Vec<String> {
    const SIMPLE: i64 = 1;
    const MUTUAL: i64 = 2;
    let mut errs = Vec::new();
    let credential = text(tls, "credential_name");
    if let Some(resource) = credential.strip_prefix("configmap://") {
        // `credentials.ParseResourceName`; parsed, its namespace still is
        // not the configuration's, which is "".
        let parts: Vec<&str> = resource.split('/').collect();
        let name = go_quote(credential);
        let e = if parts.len() <= 1 {
            format!("invalid resource name {name}. Expected namespace and name")
        } else if parts[0].is_empty() {
            format!("invalid resource name {name}. Expected namespace")
        } else if parts[1].is_empty() {
            format!("invalid resource name {name}. Expected name")
        } else {
            r#"namespace must match the configuration namespace """#.to_owned()
        };
        errs.push(format!("invalid configmap:// credentialName: {e}"));
    }
    let mode = number(tls, "mode");
    let ca = text(tls, "ca_certificates");
    let sans = listed(tls, "subject_alt_names");
    if flag(tls, "insecure_skip_verify") {
        if mode == SIMPLE && (!ca.is_empty() || !credential.is_empty() || sans) {
            errs.push(
                "cannot specify CaCertificates or CredentialName or SubjectAltNames when InsecureSkipVerify is set true"
                    .into(),
            );
        }
        if mode == MUTUAL && (!ca.is_empty() || sans) {
            errs.push("cannot specify CaCertificates or SubjectAltNames when InsecureSkipVerify is set true".into());
        }
    }
    if (mode == SIMPLE || mode == MUTUAL) && !credential.is_empty() {
        if ["client_certificate", "ca_certificates", "private_key", "ca_crl"].iter().any(|f| !text(tls, f).is_empty()) {
            errs.push("cannot specify client certificates or CA certificate or CA CRL If credentialName is set".into());
        }
        return errs;
    }
    if mode == MUTUAL {
        if text(tls, "client_certificate").is_empty() {
            errs.push("client certificate required for mutual tls".into());
        }
        if text(tls, "private_key").is_empty() {
            errs.push("private key required for mutual tls".into());
        }
    }
    errs
}

/// `validatePrivateKeyProvider`.
fn private_key_provider(p: &Message) -> Vec<String> {
    let Some(provider) = message(p, "cryptomb").or_else(|| message(p, "qat")) else {
        return vec!["private key provider configuration is required".into(), "unknown private key provider".into()];
    };
    match duration(provider, "poll_delay") {
        None => vec!["pollDelay is required".into()],
        Some(0) => vec!["pollDelay must be non zero".into()],
        Some(_) => Vec::new(),
    }
}

/// `validateConnectionSettings`.
fn connection_settings(cs: &Message) -> Vec<String> {
    let mut errs = Vec::new();
    for name in ["listener_per_connection_buffer_limit_bytes", "cluster_per_connection_buffer_limit_bytes"] {
        if wrapped(cs, name).is_some_and(|v| v < 0) {
            errs.push(format!("{name} must be non-negative"));
        }
    }
    for name in [
        "http_idle_timeout",
        "http_max_connection_duration",
        "http_drain_timeout",
        "http_request_timeout",
        "http_request_headers_timeout",
        "http_stream_idle_timeout",
        "http_max_stream_duration",
    ] {
        if duration(cs, name).is_some_and(|d| d < 0) {
            errs.push(format!("{name} must be non-negative"));
        }
    }
    if wrapped(cs, "http_max_concurrent_streams").is_some_and(|v| v <= 0) {
        errs.push("http_max_concurrent_streams must be positive".into());
    }
    for name in ["http2_initial_stream_window_size", "http2_initial_connection_window_size"] {
        if wrapped(cs, name).is_some_and(|v| v < 65535) {
            errs.push(format!("{name} must be at least 65535"));
        }
    }
    for name in ["listener_connection_limit", "global_downstream_connection_limit"] {
        if wrapped(cs, name).is_some_and(|v| v <= 0) {
            errs.push(format!("{name} must be positive"));
        }
    }
    errs
}

/// `ValidateProxyAddress`.
fn proxy_address(address: &str) -> Result<(), String> {
    let (host, p) = split_host_port(address).map_err(|e| format!("unable to split {}: {e}", go_quote(address)))?;
    let p = atoi(p).map_err(|e| format!("port ({p}) is not a number: {e}"))?;
    port(p)?;
    if !is_fqdn(host) && !is_ip(host) {
        return Err(format!("{} is not a valid hostname or an IP address", go_quote(host)));
    }
    Ok(())
}

/// Go's `net.SplitHostPort`.
fn split_host_port(hostport: &str) -> Result<(&str, &str), String> {
    let fail = |why: &str| {
        if hostport.is_empty() { why.to_owned() } else { format!("address {hostport}: {why}") }
    };
    let Some(i) = hostport.rfind(':') else { return Err(fail("missing port in address")) };
    let (host, j, k) = if hostport.starts_with('[') {
        let Some(end) = hostport.find(']') else { return Err(fail("missing ']' in address")) };
        if end + 1 == hostport.len() {
            return Err(fail("missing port in address"));
        }
        if end + 1 != i {
            let why = if hostport.as_bytes()[end + 1] == b':' {
                "too many colons in address"
            } else {
                "missing port in address"
            };
            return Err(fail(why));
        }
        (&hostport[1..end], 1, end + 1)
    } else {
        let host = &hostport[..i];
        if host.contains(':') {
            return Err(fail("too many colons in address"));
        }
        (host, 0, 0)
    };
    if hostport[j..].contains('[') {
        return Err(fail("unexpected '[' in address"));
    }
    if hostport[k..].contains(']') {
        return Err(fail("unexpected ']' in address"));
    }
    Ok((host, &hostport[i + 1..]))
}

/// `strconv.Atoi`.
fn atoi(s: &str) -> Result<i64, String> {
    let fail = |why: &str| format!("strconv.Atoi: parsing {}: {why}", go_quote(s));
    let digits = s.strip_prefix(['+', '-']).unwrap_or(s);
    if digits.is_empty() || !digits.bytes().all(|b| b.is_ascii_digit()) {
        return Err(fail("invalid syntax"));
    }
    s.parse::<i64>().map_err(|_| fail("value out of range"))
}

/// `ValidateFQDN` succeeds.
fn is_fqdn(name: &str) -> bool {
    if name.is_empty() || name.len() > 255 {
        return false;
    }
    let labels: Vec<&str> = name.split('.').collect();
    if atoi(labels[labels.len() - 1]).is_ok() {
        return false;
    }
    for (i, label) in labels.iter().enumerate() {
        // A last empty label (`istio.io.`) is fine.
        if i == labels.len() - 1 && label.is_empty() {
            return true;
        }
        let b = label.as_bytes();
        let ok = !b.is_empty()
            && b.len() <= 63
            && b[0].is_ascii_alphanumeric()
            && b[b.len() - 1].is_ascii_alphanumeric()
            && b.iter().all(|c| c.is_ascii_alphanumeric() || *c == b'-');
        if !ok {
            return false;
        }
    }
    true
}

/// `netip.ParseAddr` succeeds (the first of `.`, `:`, `%` decides).
fn is_ip(s: &str) -> bool {
    match s.find(['.', ':', '%']).map(|i| s.as_bytes()[i]) {
        Some(b'.') => s.parse::<Ipv4Addr>().is_ok(),
        Some(b':') => match s.split_once('%') {
            Some((address, zone)) => !zone.is_empty() && address.parse::<Ipv6Addr>().is_ok(),
            None => s.parse::<Ipv6Addr>().is_ok(),
        },
        _ => false,
    }
}

// ---------------------------------------------------------------------------
// Go's texts.

/// `time.ParseDuration`, in nanoseconds, with Go's error texts and
/// negative values (which a ProxyConfig may carry, to be refused by the
/// checks with istiod's message). `istiod_config::duration::parse` is
/// the same grammar for knobs, where a negative value is an error of its
/// own and the message names the knob's syntax instead.
fn parse_duration(orig: &str) -> Result<i64, String> {
    const LIMIT: u64 = 1 << 63;
    let invalid = || format!("time: invalid duration {}", time_quote(orig));
    let (neg, mut s) = match orig.as_bytes().first() {
        Some(b'-') => (true, &orig[1..]),
        Some(b'+') => (false, &orig[1..]),
        _ => (false, orig),
    };
    if s == "0" {
        return Ok(0);
    }
    if s.is_empty() {
        return Err(invalid());
    }
    let mut d: u64 = 0;
    while !s.is_empty() {
        if !(s.starts_with('.') || s.starts_with(|c: char| c.is_ascii_digit())) {
            return Err(invalid());
        }
        let int_len = s.bytes().take_while(u8::is_ascii_digit).count();
        let mut v: u64 = 0;
        for c in s[..int_len].bytes() {
            if v > LIMIT / 10 {
                return Err(invalid());
            }
            v = v * 10 + u64::from(c - b'0');
            if v > LIMIT {
                return Err(invalid());
            }
        }
        s = &s[int_len..];
        let (mut f, mut scale, mut post) = (0u64, 1f64, false);
        if let Some(rest) = s.strip_prefix('.') {
            let fraction_len = rest.bytes().take_while(u8::is_ascii_digit).count();
            let mut overflow = false;
            // Digits past what fits are ignored.
            for c in rest[..fraction_len].bytes() {
                if overflow || f > (LIMIT - 1) / 10 {
                    overflow = true;
                    continue;
                }
                let y = f * 10 + u64::from(c - b'0');
                if y > LIMIT {
                    overflow = true;
                    continue;
                }
                f = y;
                scale *= 10.0;
            }
            post = fraction_len > 0;
            s = &rest[fraction_len..];
        }
        if int_len == 0 && !post {
            return Err(invalid());
        }
        let unit_len = s.bytes().take_while(|c| *c != b'.' && !c.is_ascii_digit()).count();
        if unit_len == 0 {
            return Err(format!("time: missing unit in duration {}", time_quote(orig)));
        }
        let (u, rest) = s.split_at(unit_len);
        s = rest;
        let unit: u64 = match u {
            "ns" => 1,
            "us" | "µs" | "μs" => 1_000,
            "ms" => 1_000_000,
            "s" => 1_000_000_000,
            "m" => 60_000_000_000,
            "h" => 3_600_000_000_000,
            _ => return Err(format!("time: unknown unit {} in duration {}", time_quote(u), time_quote(orig))),
        };
        if v > LIMIT / unit {
            return Err(invalid());
        }
        v *= unit;
        if f > 0 {
            v += (f as f64 * (unit as f64 / scale)) as u64;
            if v > LIMIT {
                return Err(invalid());
            }
        }
        // Go's uint64 wraps here.
        d = d.wrapping_add(v);
        if d > LIMIT {
            return Err(invalid());
        }
    }
    if neg {
        return Ok((d as i64).wrapping_neg());
    }
    i64::try_from(d).map_err(|_| invalid())
}

/// The time package's `quote`: bytes of non-ASCII and control characters
/// as `\x..`.
fn time_quote(s: &str) -> String {
    let mut out = String::from('"');
    for c in s.chars() {
        if !(' '..'\u{80}').contains(&c) {
            for b in c.encode_utf8(&mut [0; 4]).bytes() {
                out.push_str(&format!("\\x{b:02x}"));
            }
        } else {
            if c == '"' || c == '\\' {
                out.push('\\');
            }
            out.push(c);
        }
    }
    out.push('"');
    out
}

/// `strconv.Quote`.
fn go_quote(s: &str) -> String {
    let mut out = String::from('"');
    for c in s.chars() {
        match c {
            '"' => out.push_str("\\\""),
            '\\' => out.push_str("\\\\"),
            '\u{7}' => out.push_str("\\a"),
            '\u{8}' => out.push_str("\\b"),
            '\u{c}' => out.push_str("\\f"),
            '\n' => out.push_str("\\n"),
            '\r' => out.push_str("\\r"),
            '\t' => out.push_str("\\t"),
            '\u{b}' => out.push_str("\\v"),
            c if c < ' ' || c == '\u{7f}' => out.push_str(&format!("\\x{:02x}", u32::from(c))),
            c if is_print(c) => out.push(c),
            c if u32::from(c) < 0x10000 => out.push_str(&format!("\\u{:04x}", u32::from(c))),
            c => out.push_str(&format!("\\U{:08x}", u32::from(c))),
        }
    }
    out.push('"');
    out
}

/// `unicode.IsPrint`, without Unicode's tables: controls, spaces other
/// than ' ', the common format characters and private use are not.
fn is_print(c: char) -> bool {
    c == ' '
        || !(c.is_control()
            || c.is_whitespace()
            || matches!(u32::from(c),
                0xAD | 0x600..=0x605 | 0x61C | 0x6DD | 0x70F | 0x180E | 0x200B..=0x200F | 0x202A..=0x202E
                | 0x2060..=0x2064 | 0x2066..=0x206F | 0xFEFF | 0xFFF9..=0xFFFB | 0xE000..=0xF8FF
                | 0xE0001 | 0xE0020..=0xE007F | 0xF0000..))
}

/// encoding/json's `quoteChar`: the byte read as the rune of that value.
fn quote_char(c: u8) -> String {
    match c {
        b'\'' => r"'\''".to_owned(),
        b'"' => "'\"'".to_owned(),
        _ => {
            let quoted = go_quote(char::from(c).encode_utf8(&mut [0; 4]));
            format!("'{}'", &quoted[1..quoted.len() - 1])
        }
    }
}

/// A string's JSON as `json.Marshal` writes it, without the quotes (HTML
/// characters, U+2028 and U+2029 escaped).
fn go_json_body(s: &str) -> String {
    let mut out = String::with_capacity(s.len());
    for c in s.chars() {
        match c {
            '"' => out.push_str("\\\""),
            '\\' => out.push_str("\\\\"),
            '\u{8}' => out.push_str("\\b"),
            '\u{c}' => out.push_str("\\f"),
            '\n' => out.push_str("\\n"),
            '\r' => out.push_str("\\r"),
            '\t' => out.push_str("\\t"),
            c if c < ' ' || matches!(c, '<' | '>' | '&' | '\u{2028}' | '\u{2029}') => {
                out.push_str(&format!("\\u{:04x}", u32::from(c)));
            }
            c => out.push(c),
        }
    }
    out
}

/// A float64 as `json.Marshal` writes it: shortest digits, in exponent
/// form below 1e-6 and from 1e21 (`e-7`, `e+21`).
fn go_float(f: f64) -> String {
    let abs = f.abs();
    if abs == 0.0 || (1e-6..1e21).contains(&abs) {
        return format!("{f}");
    }
    let s = format!("{f:e}");
    let Some((mantissa, exponent)) = s.split_once('e') else { return s };
    match exponent.strip_prefix('-') {
        Some(e) => format!("{mantissa}e-{e}"),
        None => format!("{mantissa}e+{exponent:0>2}"),
    }
}

/// istiod's `mesh.DefaultProxyConfig()` in proto JSON.
pub fn defaults() -> Map<String, Json> {
    let Json::Object(m) = json!({
        "configPath": "./etc/istio/proxy",
        "binaryPath": "/usr/local/bin/envoy",
        "serviceCluster": "istio-proxy",
        "drainDuration": "45s",
        "terminationDrainDuration": "5s",
        "proxyAdminPort": 15000,
        "controlPlaneAuthPolicy": "MUTUAL_TLS",
        "discoveryAddress": "istiod.istio-system.svc:15012",
        "statNameLength": 189,
        "statusPort": 15020,
    }) else {
        unreachable!()
    };
    m
}

/// Lays `over` on `pc` as istiod's `ApplyYAML` + `MergeProxyConfig` do:
/// fields given replace, `proxyMetadata` merges key by key.
pub fn overlay(pc: &mut Map<String, Json>, over: &Map<String, Json>) {
    for (k, v) in over {
        match (k.as_str(), pc.get_mut(k), v) {
            ("proxyMetadata", Some(Json::Object(old)), Json::Object(new)) => {
                old.extend(new.iter().map(|(k, v)| (k.clone(), v.clone())));
            }
            _ => {
                pc.insert(k.clone(), v.clone());
            }
        }
    }
}

#[cfg(test)]
mod tests {
    /// Replays what the `proxy_config` fuzz target keeps (fuzz/regressions/
    /// proxy_config/, deep-nesting seeds among them): an answer each.
    #[test]
    fn kept_fuzz_inputs_get_an_answer() {
        let dir = std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("../fuzz/regressions/proxy_config");
        let mut n = 0;
        for e in std::fs::read_dir(dir).unwrap() {
            let text = std::fs::read_to_string(e.unwrap().path()).unwrap();
            let checked = super::validate(&text);
            if istiod_config::yaml::check_depth(&text).is_err() {
                assert!(checked.unwrap_err().contains("nests deeper"));
            }
            n += 1;
        }
        assert!(n >= 4);
    }

    use super::*;

    /// What `validateProxyConfig` returns when the checks fail.
    fn refused(errors: &[&str]) -> Result<(), String> {
        Err(multierror(&errors.iter().map(|e| (*e).to_owned()).collect::<Vec<_>>()))
    }

    /// What it returns when `protomarshal.ApplyYAML` fails.
    fn unparsable(e: &str) -> Result<(), String> {
        Err(format!("failed to convert to apply proxy config: {e}"))
    }

    #[test]
    fn the_probes_annotations() {
        assert_eq!(
            validate("statusPort: 99999"),
            refused(&["invalid status port: port number 99999 must be in the range 1..65535"])
        );
        assert_eq!(validate("concurrency: abc"), unparsable("invalid character 'a' looking for beginning of value"));
        assert_eq!(validate("drainDuration: forever"), unparsable(r#"bad Duration: time: invalid duration "forever""#));
        let good = "discoveryAddress: istiod.istio-system.svc:15012
proxyMetadata:
  ISTIO_META_DNS_CAPTURE: \"true\"
  ISTIO_META_DNS_AUTO_ALLOCATE: \"true\"
tracing:
  sampling: 100
  zipkin:
    address: zipkin.istio-system:9411
holdApplicationUntilProxyStarts: true
concurrency: 2
terminationDrainDuration: 30s
image:
  imageType: distroless
";
        assert_eq!(validate(good), Ok(()));
        let json = r#"{"holdApplicationUntilProxyStarts": true, "proxyMetadata": {"A": "b"}, "statusPort": 15021}"#;
        assert_eq!(validate(json), Ok(()));
    }

    /// `TestValidateMeshConfigProxyConfig`'s cases, as annotations over its
    /// `valid` config (a later key replaces an earlier one).
    #[test]
    fn upstream_proxy_config_cases() {
        const VALID: &str = r#"configPath: /etc/istio/proxy
binaryPath: /usr/local/bin/envoy
discoveryAddress: istio-pilot.istio-system:15010
proxyAdminPort: 15000
drainDuration: 45s
serviceCluster: istio-proxy
statsdUdpAddress: istio-statsd-prom-bridge.istio-system:9125
envoyMetricsService: {address: "metrics-service.istio-system:15000"}
envoyAccessLogService: {address: "accesslog-service.istio-system:15000"}
controlPlaneAuthPolicy: MUTUAL_TLS
statusPort: 15020
"#;
        let split = |a: &str| format!(r#"unable to split "{a}": address {a}: missing port in address"#);
        let cases: Vec<(&str, &str, Vec<String>)> = vec![
            ("valid proxy config", "", vec![]),
            ("config path invalid", "configPath: ''", vec!["config path must be set".into()]),
            ("binary path invalid", "binaryPath: ''", vec!["binary path must be set".into()]),
            (
                "discovery address invalid",
                "discoveryAddress: 10.0.0.100",
                vec![format!("invalid discovery address: {}", split("10.0.0.100"))],
            ),
            (
                "proxy admin port invalid",
                "proxyAdminPort: 0",
                vec!["invalid proxy admin port: port number 0 must be in the range 1..65535".into()],
            ),
            (
                "proxy admin port invalid",
                "proxyAdminPort: 65536",
                vec!["invalid proxy admin port: port number 65536 must be in the range 1..65535".into()],
            ),
            (
                "validate status port",
                "statusPort: 0",
                vec!["invalid status port: port number 0 must be in the range 1..65535".into()],
            ),
            (
                "validate vstatus port",
                "statusPort: 65536",
                vec!["invalid status port: port number 65536 must be in the range 1..65535".into()],
            ),
            (
                "drain duration invalid",
                "drainDuration: -1s",
                vec!["invalid drain duration: duration must be greater than 1ms".into()],
            ),
            ("service cluster invalid", "serviceCluster: ''", vec!["service cluster must be specified".into()]),
            (
                "statsd udp address invalid",
                "statsdUdpAddress: 10.0.0.100",
                vec![format!(r#"invalid statsd udp address "10.0.0.100": {}"#, split("10.0.0.100"))],
            ),
            (
                "envoy metrics service address invalid",
                "envoyMetricsService: {address: metrics-service.istio-system}",
                vec![format!(
                    r#"invalid envoy metrics service address "metrics-service.istio-system": {}"#,
                    split("metrics-service.istio-system")
                )],
            ),
            (
                "envoy access log service address invalid",
                "envoyAccessLogService: {address: accesslog-service.istio-system}",
                vec![format!(
                    r#"invalid envoy access log service address "accesslog-service.istio-system": {}"#,
                    split("accesslog-service.istio-system")
                )],
            ),
            (
                "control plane auth policy invalid",
                "controlPlaneAuthPolicy: -1",
                vec![r#"invalid authentication policy: unrecognized control plane auth policy "-1""#.into()],
            ),
            ("zipkin address is valid", "tracing:\n  zipkin:\n    address: zipkin.istio-system:9411", vec![]),
            ("zipkin address with $(HOST_IP) is valid", "tracing:\n  zipkin:\n    address: $(HOST_IP):9411", vec![]),
            (
                "zipkin config invalid",
                "tracing: {zipkin: {address: 10.0.0.100}}",
                vec![format!("invalid zipkin config: {}", split("10.0.0.100"))],
            ),
            (
                "lightstep config is valid",
                r#"tracing: {lightstep: {address: "collector.lightstep:8080", accessToken: abcdefg1234567}}"#,
                vec![],
            ),
            (
                "lightstep address invalid",
                "tracing: {lightstep: {address: 10.0.0.100, accessToken: abcdefg1234567}}",
                vec![format!("invalid lightstep config: invalid lightstep address: {}", split("10.0.0.100"))],
            ),
            (
                "lightstep address empty but lightstep access token is not",
                "tracing: {lightstep: {address: '', accessToken: abcdefg1234567}}",
                vec![
                    "invalid lightstep config: address is required".into(),
                    r#"invalid lightstep config: invalid lightstep address: unable to split "": missing port in address"#
                        .into(),
                ],
            ),
            (
                "lightstep address is valid but access token is empty",
                r#"tracing: {lightstep: {address: "collector.lightstep:8080", accessToken: ""}}"#,
                vec!["invalid lightstep config: access token is required".into()],
            ),
            (
                "lightstep access token empty but lightstep address is not",
                "tracing: {lightstep: {address: 10.0.0.100, accessToken: ''}}",
                vec![
                    format!("invalid lightstep config: invalid lightstep address: {}", split("10.0.0.100")),
                    "invalid lightstep config: access token is required".into(),
                ],
            ),
            (
                "lightstep address and lightstep token both empty",
                "tracing: {lightstep: {}}",
                vec![
                    "invalid lightstep config: address is required".into(),
                    r#"invalid lightstep config: invalid lightstep address: unable to split "": missing port in address"#
                        .into(),
                    "invalid lightstep config: access token is required".into(),
                ],
            ),
            (
                "datadog without address",
                "tracing: {datadog: {}}",
                vec![r#"invalid datadog config: unable to split "": missing port in address"#.into()],
            ),
            ("datadog with correct address", r#"tracing: {datadog: {address: "datadog-agent:8126"}}"#, vec![]),
            (
                "datadog with invalid address",
                "tracing: {datadog: {address: address-missing-port-number}}",
                vec![format!("invalid datadog config: {}", split("address-missing-port-number"))],
            ),
            ("custom tags with a literal value", "tracing: {customTags: {clusterID: {literal: {value: cluster1}}}}", vec![]),
            // Upstream sets a nil tag; through JSON `null` is an empty tag.
            ("custom tags with a nil value", "tracing: {customTags: {clusterID: null}}", vec![]),
            (
                "private key provider with empty provider",
                "privateKeyProvider: {}",
                vec![
                    "invalid private key provider configuration: private key provider configuration is required".into(),
                    "invalid private key provider configuration: unknown private key provider".into(),
                ],
            ),
            (
                "private key provider with cryptomb without poll_delay",
                "privateKeyProvider: {cryptomb: {}}",
                vec!["invalid private key provider configuration: pollDelay is required".into()],
            ),
            (
                "private key provider with cryptomb zero poll_delay",
                "privateKeyProvider: {cryptomb: {pollDelay: 0s}}",
                vec!["invalid private key provider configuration: pollDelay must be non zero".into()],
            ),
            ("private key provider with cryptomb", "privateKeyProvider: {cryptomb: {pollDelay: 10us}}", vec![]),
            (
                "private key provider with qat without poll_delay",
                "privateKeyProvider: {qat: {}}",
                vec!["invalid private key provider configuration: pollDelay is required".into()],
            ),
            (
                "private key provider with qat zero poll_delay",
                "privateKeyProvider: {qat: {pollDelay: 0s}}",
                vec!["invalid private key provider configuration: pollDelay must be non zero".into()],
            ),
            ("private key provider with qat", "privateKeyProvider: {qat: {pollDelay: 1us}}", vec![]),
            // A warning, which the webhook does not return.
            ("ISTIO_META_DNS_AUTO_ALLOCATE is deprecated", "proxyMetadata: {ISTIO_META_DNS_AUTO_ALLOCATE: 'true'}", vec![]),
        ];
        for (name, change, errors) in cases {
            let want = if errors.is_empty() { Ok(()) } else { Err(multierror(&errors)) };
            assert_eq!(validate(&format!("{VALID}{change}")), want, "{name}");
        }
    }

    /// The upstream test's `invalid` config: an error for each of its 12
    /// fields, in `ValidateMeshConfigProxyConfig`'s order.
    #[test]
    fn upstream_invalid_config_has_twelve_errors() {
        let invalid = r#"{"configPath": "", "binaryPath": "", "discoveryAddress": "10.0.0.100", "proxyAdminPort": 0,
            "drainDuration": "-1s", "serviceCluster": "", "statsdUdpAddress": "10.0.0.100",
            "envoyMetricsService": {"address": "metrics-service"}, "envoyAccessLogService": {"address": "accesslog-service"},
            "controlPlaneAuthPolicy": -1, "statusPort": 0, "tracing": {"zipkin": {"address": "10.0.0.100"}}}"#;
        let split = |a: &str| format!(r#"unable to split "{a}": address {a}: missing port in address"#);
        let errors = [
            "config path must be set".to_owned(),
            "binary path must be set".into(),
            "service cluster must be specified".into(),
            "invalid drain duration: duration must be greater than 1ms".into(),
            format!("invalid discovery address: {}", split("10.0.0.100")),
            format!("invalid zipkin config: {}", split("10.0.0.100")),
            format!(r#"invalid statsd udp address "10.0.0.100": {}"#, split("10.0.0.100")),
            format!(r#"invalid envoy metrics service address "metrics-service": {}"#, split("metrics-service")),
            format!(r#"invalid envoy access log service address "accesslog-service": {}"#, split("accesslog-service")),
            "invalid proxy admin port: port number 0 must be in the range 1..65535".into(),
            r#"invalid authentication policy: unrecognized control plane auth policy "-1""#.into(),
            "invalid status port: port number 0 must be in the range 1..65535".into(),
        ];
        assert_eq!(validate(invalid), Err(multierror(&errors)));
        assert!(validate(invalid).unwrap_err().starts_with("12 errors occurred:\n\t* config path must be set\n\t* "));
    }

    /// `TestValidateConnectionSettings`.
    #[test]
    fn upstream_connection_settings_cases() {
        let cases: [(&str, &str, &[&str]); 7] = [
            (
                "valid EDGE settings",
                "{profile: EDGE, listenerPerConnectionBufferLimitBytes: 32768, httpIdleTimeout: 3600s, \
                 httpMaxConcurrentStreams: 100, http2InitialStreamWindowSize: 65536, \
                 http2InitialConnectionWindowSize: 1048576}",
                &[],
            ),
            (
                "negative buffer limit",
                "{listenerPerConnectionBufferLimitBytes: -1}",
                &["invalid connection settings: listener_per_connection_buffer_limit_bytes must be non-negative"],
            ),
            (
                "zero concurrent streams",
                "{httpMaxConcurrentStreams: 0}",
                &["invalid connection settings: http_max_concurrent_streams must be positive"],
            ),
            (
                "small HTTP/2 window and negative duration",
                "{http2InitialStreamWindowSize: 100, httpIdleTimeout: -1s}",
                &[
                    "invalid connection settings: http_idle_timeout must be non-negative",
                    "invalid connection settings: http2_initial_stream_window_size must be at least 65535",
                ],
            ),
            (
                "HTTP/2 connection window size below minimum",
                "{http2InitialConnectionWindowSize: 1000}",
                &["invalid connection settings: http2_initial_connection_window_size must be at least 65535"],
            ),
            (
                "negative stream window size",
                "{http2InitialStreamWindowSize: -1}",
                &["invalid connection settings: http2_initial_stream_window_size must be at least 65535"],
            ),
            ("empty ConnectionSettings validates clean", "{}", &[]),
        ];
        for (name, settings, errors) in cases {
            let want = if errors.is_empty() { Ok(()) } else { refused(errors) };
            assert_eq!(validate(&format!("connectionSettings: {settings}")), want, "{name}");
        }
    }

    /// `TestValidateProxyAddress` and `TestValidateFQDN`, through the
    /// discovery address.
    #[test]
    fn upstream_address_cases() {
        let long = format!("{}:80", "x".repeat(256));
        let long_error = format!("{} is not a valid hostname or an IP address", go_quote(&"x".repeat(256)));
        let cases: Vec<(&str, Option<String>)> = vec![
            ("istio-pilot:80", None),
            (
                "istio-pilot",
                Some(r#"unable to split "istio-pilot": address istio-pilot: missing port in address"#.into()),
            ),
            ("isti..:80", Some(r#""isti.." is not a valid hostname or an IP address"#.into())),
            ("10.0.0.100:9090", None),
            ("10.0.0.100", Some(r#"unable to split "10.0.0.100": address 10.0.0.100: missing port in address"#.into())),
            (
                "istio-pilot:port",
                Some(r#"port (port) is not a number: strconv.Atoi: parsing "port": invalid syntax"#.into()),
            ),
            ("istio-pilot:100000", Some("port number 100000 must be in the range 1..65535".into())),
            ("[2001:db8::100]:80", None),
            ("[2001:db8::10::20]:80", Some(r#""2001:db8::10::20" is not a valid hostname or an IP address"#.into())),
            (
                "[2001:db8::100]",
                Some(r#"unable to split "[2001:db8::100]": address [2001:db8::100]: missing port in address"#.into()),
            ),
            (
                "[2001:db8::100]:port",
                Some(r#"port (port) is not a number: strconv.Atoi: parsing "port": invalid syntax"#.into()),
            ),
            (
                "2001:db8::100:80",
                Some(
                    r#"unable to split "2001:db8::100:80": address 2001:db8::100:80: too many colons in address"#
                        .into(),
                ),
            ),
            ("[fe80::1%eth0]:15012", None),
            (":80", Some(r#""" is not a valid hostname or an IP address"#.into())),
            (long.as_str(), Some(long_error)),
            ("istio.io:80", None),
            ("istio.io.:80", None),
            ("istio-pilot.istio-system.svc.cluster.local:80", None),
            ("istio-pilot.istio-system.svc.cluster.local.:80", None),
        ];
        for (address, error) in cases {
            let want = error.map_or(Ok(()), |e| refused(&[format!("invalid discovery address: {e}").as_str()]));
            assert_eq!(validate(&format!(r#"{{"discoveryAddress": "{address}"}}"#)), want, "{address}");
        }
    }

    /// How `ApplyYAML` reads the text: sigs.k8s.io/yaml, then legacy jsonpb.
    #[test]
    fn decoding_follows_yaml_to_json_and_legacy_jsonpb() {
        let status_0 = refused(&["invalid status port: port number 0 must be in the range 1..65535"]);
        let cases: Vec<(&str, Result<(), String>)> = vec![
            ("", Ok(())),
            ("null", Ok(())),
            ("{}", Ok(())),
            (
                "just a string",
                unparsable("json: cannot unmarshal string into Go value of type map[string]json.RawMessage"),
            ),
            (
                "[statusPort]",
                unparsable("json: cannot unmarshal array into Go value of type map[string]json.RawMessage"),
            ),
            // Unknown fields pass, at any depth.
            ("bogus: 1\ntracing: {zipkin: {address: 'z:9411'}, bogus: 2}", Ok(())),
            // Proto names count; the JSON name wins; a later key wins.
            ("status_port: 0", status_0.clone()),
            (r#"{"status_port": 0, "statusPort": 15021}"#, Ok(())),
            ("statusPort: 0\nstatusPort: 15021", Ok(())),
            // Only the first document counts.
            ("statusPort: 15021\n---\nstatusPort: 0", Ok(())),
            // Numbers: quoted ones count (trimQuote), whole floats print as integers.
            ("statusPort: '15021'", Ok(())),
            ("concurrency: '2'", Ok(())),
            ("statusPort: 15021.0", Ok(())),
            ("statusPort: 'null'", status_0),
            ("statusPort: 1.5", unparsable("json: cannot unmarshal number 1.5 into Go value of type int32")),
            ("statusPort: 1e21", unparsable("json: cannot unmarshal number 1e+21 into Go value of type int32")),
            (
                "statusPort: 99999999999",
                unparsable("json: cannot unmarshal number 99999999999 into Go value of type int32"),
            ),
            ("statusPort: true", unparsable("json: cannot unmarshal bool into Go value of type int32")),
            ("statusPort: [1]", unparsable("json: cannot unmarshal array into Go value of type int32")),
            ("statusPort: '1.5s'", unparsable("invalid character 's' after top-level value")),
            ("statusPort: ''", unparsable("unexpected end of JSON input")),
            ("statusPort: '-'", unparsable("invalid character ' ' in numeric literal")),
            ("statusPort: '<1>'", unparsable(r"invalid character '\\' looking for beginning of value")),
            ("statusPort: .inf", unparsable("json: unsupported value: +Inf")),
            ("extraStatTags: tag", unparsable("json: cannot unmarshal string into Go value of type []json.RawMessage")),
            (
                "tracing: zipkin",
                unparsable("json: cannot unmarshal string into Go value of type map[string]json.RawMessage"),
            ),
            ("discoveryAddress: 15012", unparsable("json: cannot unmarshal number into Go value of type string")),
            (
                "proxyMetadata: {ISTIO_META_DNS_CAPTURE: true}",
                unparsable("json: cannot unmarshal bool into Go value of type string"),
            ),
            (
                "holdApplicationUntilProxyStarts: 'true'",
                unparsable("json: cannot unmarshal string into Go value of type bool"),
            ),
            // YAML 1.1: plain yes/on are bools, a leading 0 is octal (0177777 = 65535).
            ("holdApplicationUntilProxyStarts: yes", Ok(())),
            ("discoveryAddress: on", unparsable("json: cannot unmarshal bool into Go value of type string")),
            ("statusPort: 0177777", Ok(())),
            // Quoted, they stay strings.
            ("statusPort: '0177777'", unparsable("invalid character '1' after top-level value")),
            (
                "holdApplicationUntilProxyStarts: \"yes\"",
                unparsable("json: cannot unmarshal string into Go value of type bool"),
            ),
            ("statusPort: 15_021", Ok(())),
            ("statusPort: 0x3AAD", Ok(())),
            // Enums: names or int32 numbers.
            (
                "interceptionMode: FOO",
                unparsable(
                    r#"unknown value "\"FOO\"" for enum istio.mesh.v1alpha1.ProxyConfig.InboundInterceptionMode"#,
                ),
            ),
            ("interceptionMode: 1", Ok(())),
            (
                "interceptionMode: 1.5",
                unparsable("json: cannot unmarshal number 1.5 into Go value of type protoreflect.EnumNumber"),
            ),
            (
                "controlPlaneAuthPolicy: INHERIT",
                refused(&[r#"invalid authentication policy: unrecognized control plane auth policy "INHERIT""#]),
            ),
            (
                "proxyHeaders: {forwardedClientCert: FOO}",
                unparsable(r#"unknown value "\"FOO\"" for enum istio.mesh.v1alpha1.ForwardClientCertDetails"#),
            ),
            // Durations: a JSON string, as time.ParseDuration reads it.
            ("drainDuration: 1m30s", Ok(())),
            ("drainDuration: 10", unparsable("json: cannot unmarshal number into Go value of type string")),
            ("drainDuration: '10'", unparsable(r#"bad Duration: time: missing unit in duration "10""#)),
            ("drainDuration: 5x", unparsable(r#"bad Duration: time: unknown unit "x" in duration "5x""#)),
            ("drainDuration: ٣s", unparsable(r#"bad Duration: time: invalid duration "\xd9\xa3s""#)),
            (
                "drainDuration: 9223372036854775808ns",
                unparsable(r#"bad Duration: time: invalid duration "9223372036854775808ns""#),
            ),
            ("drainDuration: 1.5s", refused(&["drain time only supports durations to seconds precision"])),
            (
                "drainDuration: 1500us",
                refused(&["invalid drain duration: only durations to ms precision are supported"]),
            ),
            ("drainDuration: 0s", refused(&["invalid drain duration: duration must be greater than 1ms"])),
            ("tracing: {sampling: 'NaN'}", Ok(())),
            ("tracing: {sampling: abc}", unparsable("invalid character 'a' looking for beginning of value")),
            // The first field in proto order fails (concurrency before statusPort).
            ("statusPort: true\nconcurrency: abc", unparsable("invalid character 'a' looking for beginning of value")),
            // A oneof keeps its last member in proto order.
            ("serviceCluster: ''\ntracingServiceName: CANONICAL_NAME_ONLY", Ok(())),
            ("tracing:\n  zipkin: {address: '10.0.0.100'}\n  datadog: {address: 'datadog:8126'}", Ok(())),
        ];
        for (annotation, want) in cases {
            assert_eq!(validate(annotation), want, "{annotation:?}");
        }
        let syntax = validate("statusPort: [").unwrap_err();
        assert!(syntax.starts_with("failed to convert to apply proxy config: yaml: "), "{syntax}");
    }

    #[test]
    fn tracing_tls_settings_follow_validate_tls() {
        assert_eq!(
            validate("tracing: {tlsSettings: {mode: MUTUAL}}"),
            refused(&[
                "invalid tracing TLS config: client certificate required for mutual tls",
                "invalid tracing TLS config: private key required for mutual tls",
            ])
        );
        assert_eq!(
            validate("tracing: {tlsSettings: {mode: SIMPLE, credentialName: 'configmap://ns/name'}}"),
            refused(&[
                r#"invalid tracing TLS config: invalid configmap:// credentialName: namespace must match the configuration namespace """#
            ])
        );
        assert_eq!(
            validate("tracing: {tlsSettings: {mode: SIMPLE, credentialName: 'configmap://name'}}"),
            refused(&[
                r#"invalid tracing TLS config: invalid configmap:// credentialName: invalid resource name "configmap://name". Expected namespace and name"#
            ])
        );
        assert_eq!(
            validate("tracing: {tlsSettings: {mode: SIMPLE, insecureSkipVerify: true, caCertificates: /ca.pem}}"),
            refused(&[
                "invalid tracing TLS config: cannot specify CaCertificates or CredentialName or SubjectAltNames when InsecureSkipVerify is set true"
            ])
        );
        assert_eq!(
            validate("tracing: {tlsSettings: {mode: SIMPLE, subjectAltNames: [], insecureSkipVerify: true}}"),
            Ok(())
        );
    }

    /// errwrap fills `{{err}}` wherever it is, the prefix included.
    #[test]
    fn prefixes_are_errwrap_templates() {
        let e = r#"unable to split "{{err}}": address {{err}}: missing port in address"#;
        let want = format!(r#"invalid statsd udp address "{e}": {e}"#);
        assert_eq!(validate("statsdUdpAddress: '{{err}}'"), refused(&[want.as_str()]));
    }

    #[test]
    fn go_texts() {
        assert_eq!(go_float(1e21), "1e+21");
        assert_eq!(go_float(1.5e-7), "1.5e-7");
        assert_eq!(go_float(15021.0), "15021");
        assert_eq!(go_quote("a\"b\\\u{7f}\u{a0}é"), r#""a\"b\\\x7f\u00a0é""#);
        assert_eq!(quote_char(b'\''), r"'\''");
        assert_eq!(quote_char(0xc3), "'Ã'");
        assert_eq!(parse_duration("1h1m1.5s"), Ok(3_661_500_000_000));
        assert_eq!(parse_duration("-1.5h"), Ok(-5_400_000_000_000));
        assert_eq!(parse_duration(".s"), Err(r#"time: invalid duration ".s""#.into()));
        assert_eq!(scan_json("[1,]").err(), Some("invalid character ']' looking for beginning of value".into()));
        assert_eq!(scan_json("tru").err(), Some("invalid character ' ' in literal true (expecting 'e')".into()));
        assert_eq!(
            scan_json(r#""\u12"#).err(),
            Some(r"invalid character ' ' in \u hexadecimal character escape".into())
        );
    }
}
