//! `/debug/config_dump?proxyID=` and `istio.io/debug/config_dump`: what a
//! proxy was sent, as Envoy's own config dump (`envoy.admin.v3.ConfigDump`),
//! so the tools that read one read the other. The cores say which resources
//! and versions a proxy has, with their bytes; the dump is built as a
//! protobuf message and, for HTTP, rendered as proto3 JSON through the
//! complete Envoy API's descriptors (Anys unpacked by type URL).

use std::sync::OnceLock;

use bytes::Bytes;
use istiod_proto::envoy::admin::v3 as admin;
use istiod_proto::prost::{Message, Name};
use istiod_proto::prost_types::Any;
use istiod_xds_api::snapshot::Kind;
use prost_reflect::{DescriptorPool, DynamicMessage, ReflectMessage, SerializeOptions};
use serde_json::{Value, json};

fn pool() -> &'static DescriptorPool {
    static POOL: OnceLock<DescriptorPool> = OnceLock::new();
    POOL.get_or_init(|| {
        // The complete Envoy API with ours (EnvoyFilters' schema): a typed
        // config istiod-rs never builds itself (a patch's, an ECDS Lua or
        // Wasm filter) renders too.
        let mut pool = istiod_envoyfilter::schema::pool().clone();
        // istio-proxy's own filter configs (the stats filter, the ALPN
        // override), which are not among the schema files.
        for f in istiod_proto::istio_proxy::descriptors() {
            if pool.get_file_by_name(f.name()).is_none() {
                pool.add_file_descriptor_proto(f).expect("istio-proxy's descriptors fit the pool");
            }
        }
        // The workload API (a ztunnel's dump).
        let ours =
            istiod_proto::prost_types::FileDescriptorSet::decode(istiod_proto::FILE_DESCRIPTOR_SET).unwrap_or_default();
        for f in ours.file {
            let package = f.package().to_owned();
            let wanted = (package == "istio.workload" || package == "istio.security")
                && pool.get_file_by_name(f.name()).is_none();
            if wanted && let Err(e) = pool.add_file_descriptor_proto(f) {
                tracing::warn!(target: "debug", error = %e, "the workload API's descriptors do not fit the pool");
            }
        }
        pool
    })
}

/// istiod's short type names for `?types=` (`pilot/pkg/xds/v3/model.go`
/// GetResourceType): the resources of those kinds, each as its own `Any`.
pub(super) fn kinds_of(types: &str) -> Vec<Kind> {
    let mut out = Vec::new();
    for t in types.split(',') {
        let k = match t.trim().to_ascii_lowercase().as_str() {
            "cds" => Kind::Cluster,
            "eds" => Kind::Endpoint,
            "lds" => Kind::Listener,
            "rds" => Kind::Route,
            "sds" => Kind::Secret,
            "ecds" => Kind::ExtensionConfig,
            "wds" => Kind::Address,
            "wads" => Kind::Authorization,
            "nds" => Kind::NameTable,
            _ => match Kind::from_type_url(t.trim()) {
                Some(k) => k,
                None => continue,
            },
        };
        if !out.contains(&k) {
            out.push(k);
        }
    }
    out
}

/// What a core said one proxy was sent, by kind: (type version, [(name,
/// resource version, body)]), bodies as its class is served them now.
type Sent = Vec<(Kind, String, Vec<(String, String, Bytes)>)>;

fn sent(core_answer: &Value) -> Sent {
    let mut out = Vec::new();
    for c in core_answer["configs"].as_array().into_iter().flatten() {
        let Some(kind) = c["type_url"].as_str().and_then(Kind::from_type_url) else { continue };
        let version = c["version_info"].as_str().unwrap_or("").to_owned();
        let items = c["resources"]
            .as_array()
            .into_iter()
            .flatten()
            .filter_map(|r| {
                let body = unhex(r["body"].as_str()?)?;
                let body = if kind == Kind::Secret { redact(body) } else { body };
                Some((r["name"].as_str()?.to_owned(), r["version"].as_str().unwrap_or("").to_owned(), body))
            })
            .collect();
        out.push((kind, version, items));
    }
    out
}

/// A resource's bytes as an `Any` of its kind.
fn any(kind: Kind, body: &Bytes) -> Any {
    Any { type_url: kind.type_url().to_owned(), value: body.to_vec() }
}

/// The dump of one proxy as istiod builds it (`debug.go`
/// connectionConfigDump): bootstrap (empty), clusters, endpoints (only
/// with `include_eds`), listeners, scoped routes (empty), routes, secrets
/// (private keys redacted), extension configs (none here). With `types`
/// (`?types=`, `getConfigDumpByResourceType`) the resources of those kinds
/// instead, each its own `Any`.
pub(super) fn build(core_answer: &Value, include_eds: bool, types: &[Kind]) -> admin::ConfigDump {
    let sent = sent(core_answer);
    // A ztunnel (the one proxy served the workload API): its addresses
    // alone, as istiod dumps one.
    let ztunnel = [Kind::Address];
    let types = if types.is_empty() && sent.iter().any(|(k, _, _)| *k == Kind::Address) { &ztunnel[..] } else { types };
    if !types.is_empty() {
        let configs = types
            .iter()
            .flat_map(|k| sent.iter().filter(move |(kind, _, _)| kind == k))
            .flat_map(|(k, _, items)| items.iter().map(|(_, _, b)| any(*k, b)))
            .collect();
        return admin::ConfigDump { configs };
    }
    let of = |k: Kind| sent.iter().find(|(kind, _, _)| *kind == k);
    let items = |k: Kind| of(k).map(|(_, _, i)| i.as_slice()).unwrap_or_default();
    let version = |k: Kind| of(k).map(|(_, v, _)| v.clone()).unwrap_or_default();
    let mut configs = vec![Any::from_msg(&admin::BootstrapConfigDump::default())];
    configs.push(Any::from_msg(&admin::ClustersConfigDump {
        version_info: version(Kind::Cluster),
        dynamic_active_clusters: items(Kind::Cluster)
            .iter()
            .map(|(_, v, b)| admin::clusters_config_dump::DynamicCluster {
                version_info: v.clone(),
                cluster: Some(any(Kind::Cluster, b)),
                ..Default::default()
            })
            .collect(),
        ..Default::default()
    }));
    if include_eds {
        configs.push(Any::from_msg(&admin::EndpointsConfigDump {
            dynamic_endpoint_configs: items(Kind::Endpoint)
                .iter()
                .map(|(_, v, b)| admin::endpoints_config_dump::DynamicEndpointConfig {
                    version_info: v.clone(),
                    endpoint_config: Some(any(Kind::Endpoint, b)),
                    ..Default::default()
                })
                .collect(),
        }));
    }
    configs.push(Any::from_msg(&admin::ListenersConfigDump {
        version_info: version(Kind::Listener),
        dynamic_listeners: items(Kind::Listener)
            .iter()
            .map(|(n, v, b)| admin::listeners_config_dump::DynamicListener {
                name: n.clone(),
                active_state: Some(admin::listeners_config_dump::DynamicListenerState {
                    version_info: v.clone(),
                    listener: Some(any(Kind::Listener, b)),
                    last_updated: None,
                }),
                ..Default::default()
            })
            .collect(),
    }));
    configs.push(Any::from_msg(&admin::ScopedRoutesConfigDump::default()));
    configs.push(Any::from_msg(&admin::RoutesConfigDump {
        dynamic_route_configs: items(Kind::Route)
            .iter()
            .map(|(_, v, b)| admin::routes_config_dump::DynamicRouteConfig {
                version_info: v.clone(),
                route_config: Some(any(Kind::Route, b)),
                ..Default::default()
            })
            .collect(),
    }));
    configs.push(Any::from_msg(&admin::SecretsConfigDump {
        dynamic_active_secrets: items(Kind::Secret)
            .iter()
            .map(|(n, v, b)| admin::secrets_config_dump::DynamicSecret {
                name: n.clone(),
                version_info: v.clone(),
                secret: Some(any(Kind::Secret, b)),
                ..Default::default()
            })
            .collect(),
        ..Default::default()
    }));
    configs.push(Any::from_msg(&admin::EcdsConfigDump::default()));
    admin::ConfigDump { configs: configs.into_iter().filter_map(Result::ok).collect() }
}

/// A message as proto3 JSON (lowerCamelCase names, `Any`s unpacked, 64-bit
/// integers as strings), as istiod's `protomarshal` writes it.
pub(super) fn message_json<T: Message + Name>(msg: &T) -> Value {
    let Some(desc) = pool().get_message_by_name(&T::full_name()) else {
        return json!({"error": format!("no descriptor for {}", T::full_name())});
    };
    decoded_json(desc, msg.encode_to_vec().as_slice())
}

/// The message `desc` describes, encoded in `bytes`, as proto3 JSON
/// ([`message_json`]'s options); what does not decode says why.
fn decoded_json(desc: prost_reflect::MessageDescriptor, bytes: impl bytes::Buf) -> Value {
    let serialize = |m: &DynamicMessage| {
        let opts = SerializeOptions::new().stringify_64_bit_integers(true);
        let mut ser = serde_json::Serializer::new(Vec::new());
        m.serialize_with_options(&mut ser, &opts)
            .map(|()| serde_json::from_slice(&ser.into_inner()).unwrap_or(Value::Null))
    };
    match DynamicMessage::decode(desc, bytes) {
        Ok(mut m) => serialize(&m).unwrap_or_else(|e| {
            // An empty `Any` (no type: istiod sends a Wasm filter's absent
            // plugin configuration so) has no JSON form: shown absent.
            clear_empty_anys(&mut m, 0);
            serialize(&m).unwrap_or_else(|_| json!({"error": e.to_string()}))
        }),
        Err(e) => json!({"error": e.to_string()}),
    }
}

/// Clears the `Any` fields of `m` that name no type, at any depth (inside
/// other `Any`s too, which are decoded, cleared and encoded again).
fn clear_empty_anys(m: &mut DynamicMessage, depth: usize) {
    const ANY: &str = "google.protobuf.Any";
    // (Envoy's messages nest a few dozen levels at most.)
    if depth > 64 {
        return;
    }
    let is_empty_any = |x: &DynamicMessage| {
        x.descriptor().full_name() == ANY
            && x.get_field_by_name("type_url").is_none_or(|u| u.as_str().is_none_or(str::is_empty))
    };
    let nested = |x: &mut DynamicMessage| {
        if x.descriptor().full_name() != ANY {
            return clear_empty_anys(x, depth + 1);
        }
        let url = x.get_field_by_name("type_url").and_then(|u| u.as_str().map(str::to_owned)).unwrap_or_default();
        let Some(desc) = pool().get_message_by_name(url.rsplit('/').next().unwrap_or_default()) else { return };
        let Some(value) = x.get_field_by_name("value").and_then(|v| v.as_bytes().cloned()) else { return };
        if let Ok(mut inner) = DynamicMessage::decode(desc, value) {
            clear_empty_anys(&mut inner, depth + 1);
            x.set_field_by_name("value", prost_reflect::Value::Bytes(inner.encode_to_vec().into()));
        }
    };
    let mut empty = Vec::new();
    for (fd, v) in m.fields_mut() {
        match v {
            prost_reflect::Value::Message(x) if is_empty_any(x) => empty.push(fd.clone()),
            prost_reflect::Value::Message(x) => nested(x),
            prost_reflect::Value::List(items) => items.iter_mut().for_each(|i| {
                if let prost_reflect::Value::Message(x) = i {
                    nested(x)
                }
            }),
            prost_reflect::Value::Map(map) => map.values_mut().for_each(|i| {
                if let prost_reflect::Value::Message(x) = i {
                    nested(x)
                }
            }),
            _ => {}
        }
    }
    for fd in empty {
        m.clear_field(&fd);
    }
}

/// One resource of `kind` as proto3 JSON, as a config dump shows it
/// (Secrets without their private key). What does not decode says why.
pub(super) fn resource_json(kind: Kind, body: &Bytes) -> Value {
    let body = if kind == Kind::Secret { redact(body.clone()) } else { body.clone() };
    let name = kind.type_url().rsplit('/').next().unwrap_or_default();
    let Some(desc) = pool().get_message_by_name(name) else {
        return json!({"error": format!("no descriptor for {name}")});
    };
    decoded_json(desc, body)
}

/// A Secret with its private key replaced by `[redacted]`, as istiod's
/// dump shows it (`getConfigDumpByResourceType`).
fn redact(body: Bytes) -> Bytes {
    use istiod_proto::envoy::config::core::v3::{DataSource, data_source::Specifier};
    use istiod_proto::envoy::extensions::transport_sockets::tls::v3::{Secret, secret::Type};
    // What does not decode is not shown at all (it might hold a key).
    let Ok(mut secret) = Secret::decode(body.clone()) else { return Bytes::new() };
    match &mut secret.r#type {
        Some(Type::TlsCertificate(c)) if c.private_key.is_some() => {
            c.private_key = Some(DataSource {
                specifier: Some(Specifier::InlineBytes(b"[redacted]".to_vec())),
                ..Default::default()
            });
            Bytes::from(secret.encode_to_vec())
        }
        _ => body,
    }
}

fn unhex(s: &str) -> Option<Bytes> {
    let b = s.as_bytes();
    let digit = |c: u8| (c as char).to_digit(16).map(|d| d as u8);
    b.chunks(2)
        .map(|p| Some(digit(*p.first()?)? << 4 | digit(*p.get(1)?)?))
        .collect::<Option<Vec<u8>>>()
        .map(Bytes::from)
}

#[cfg(test)]
mod tests {
    use istiod_proto::envoy::config::cluster::v3::Cluster;

    use super::*;

    /// istiod sends a Wasm filter without a plugin configuration with an
    /// empty `Any` (`cfg := &anypb.Any{}` in `buildPluginConfig`,
    /// `pilot/pkg/model/extensions.go`): the resource is shown, without it
    /// (istiod's protojson writes `{}` there).
    #[test]
    fn an_empty_any_is_shown_absent() {
        use prost_reflect::Value as V;
        let desc = |n: &str| pool().get_message_by_name(n).unwrap();
        let mut config = DynamicMessage::new(desc("envoy.extensions.wasm.v3.PluginConfig"));
        config.set_field_by_name("name", V::String("auth".into()));
        config.set_field_by_name("configuration", V::Message(DynamicMessage::new(desc("google.protobuf.Any"))));
        let mut wasm = DynamicMessage::new(desc("envoy.extensions.filters.http.wasm.v3.Wasm"));
        wasm.set_field_by_name("config", V::Message(config));
        let mut ecds = DynamicMessage::new(desc("envoy.config.core.v3.TypedExtensionConfig"));
        ecds.set_field_by_name("name", V::String("auth".into()));
        let typed = Any {
            type_url: "type.googleapis.com/envoy.extensions.filters.http.wasm.v3.Wasm".into(),
            value: wasm.encode_to_vec(),
        };
        let mut any = DynamicMessage::new(desc("google.protobuf.Any"));
        any.set_field_by_name("type_url", V::String(typed.type_url.clone()));
        any.set_field_by_name("value", V::Bytes(typed.value.clone().into()));
        ecds.set_field_by_name("typed_config", V::Message(any));
        let v = resource_json(Kind::ExtensionConfig, &Bytes::from(ecds.encode_to_vec()));
        assert_eq!(v["typedConfig"]["config"]["name"], "auth", "{v}");
        assert!(v["typedConfig"]["config"].get("configuration").is_none(), "{v}");
        assert_eq!(v["typedConfig"]["@type"], typed.type_url, "{v}");
    }

    fn hex(b: &[u8]) -> String {
        b.iter().map(|x| format!("{x:02x}")).collect()
    }

    fn answer(kind: Kind, name: &str, body: &[u8]) -> Value {
        json!({"configs": [{"type_url": kind.type_url(), "version_info": "3",
                            "resources": [{"name": name, "version": "2", "body": hex(body)}]}]})
    }

    #[test]
    fn clusters_render_in_istiods_shape() {
        let body = Cluster { name: "outbound|80||a".into(), ..Default::default() }.encode_to_vec();
        let dump = message_json(&build(&answer(Kind::Cluster, "outbound|80||a", &body), false, &[]));
        let types: Vec<&str> =
            dump["configs"].as_array().unwrap().iter().map(|c| c["@type"].as_str().unwrap()).collect();
        // istiod's order (debug.go connectionConfigDump), no endpoints
        // unless asked for.
        let want = ["Bootstrap", "Clusters", "Listeners", "ScopedRoutes", "Routes", "Secrets", "Ecds"]
            .map(|t| format!("type.googleapis.com/envoy.admin.v3.{t}ConfigDump"));
        assert_eq!(types, want);
        let c = &dump["configs"][1];
        assert_eq!(c["versionInfo"], "3");
        assert_eq!(c["dynamicActiveClusters"][0]["versionInfo"], "2");
        assert_eq!(c["dynamicActiveClusters"][0]["cluster"]["name"], "outbound|80||a");
        assert_eq!(c["dynamicActiveClusters"][0]["cluster"]["@type"], Kind::Cluster.type_url());
        let with_eds = build(&answer(Kind::Cluster, "outbound|80||a", &body), true, &[]);
        assert_eq!(with_eds.configs[2].type_url, "type.googleapis.com/envoy.admin.v3.EndpointsConfigDump");
        // `?types=cds`: the clusters themselves.
        let typed = build(&answer(Kind::Cluster, "outbound|80||a", &body), false, &kinds_of("cds,lds"));
        assert_eq!(typed.configs.len(), 1);
        assert_eq!(typed.configs[0].type_url, Kind::Cluster.type_url());
    }

    #[test]
    fn secrets_are_dumped_without_their_private_key() {
        use istiod_proto::envoy::config::core::v3::{DataSource, data_source::Specifier};
        use istiod_proto::envoy::extensions::transport_sockets::tls::v3 as tls;
        let inline =
            |b: &[u8]| Some(DataSource { specifier: Some(Specifier::InlineBytes(b.to_vec())), ..Default::default() });
        let secret = tls::Secret {
            name: "kubernetes://cert".into(),
            r#type: Some(tls::secret::Type::TlsCertificate(tls::TlsCertificate {
                certificate_chain: inline(b"CERT"),
                private_key: inline(b"SECRET-KEY"),
                ..Default::default()
            })),
        };
        let dump = build(&answer(Kind::Secret, "kubernetes://cert", &secret.encode_to_vec()), false, &[]);
        let bytes = dump.encode_to_vec();
        assert!(!bytes.windows(10).any(|w| w == b"SECRET-KEY"), "the key never leaves, in any form");
        let json = message_json(&dump);
        let text = json.to_string();
        let secrets = &json["configs"][5];
        assert_eq!(secrets["@type"], "type.googleapis.com/envoy.admin.v3.SecretsConfigDump");
        assert_eq!(secrets["dynamicActiveSecrets"][0]["name"], "kubernetes://cert");
        assert!(!text.contains(&base64_of(b"SECRET-KEY")), "{text}");
        assert!(text.contains(&base64_of(b"[redacted]")), "{text}");
        assert!(text.contains(&base64_of(b"CERT")), "the certificate stays: {text}");
    }

    fn base64_of(b: &[u8]) -> String {
        use base64::Engine;
        base64::engine::general_purpose::STANDARD.encode(b)
    }
}
