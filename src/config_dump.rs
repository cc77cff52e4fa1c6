//! `/debug/config_dump?proxyID=`: what a proxy was sent, as JSON in the
//! shape of Envoy's own config dump (`envoy.admin.v3.*ConfigDump`), so the
//! tools that read one read the other. The cores say which resources and
//! versions a proxy has; the bytes come from the control thread's current
//! resources and are rendered through the descriptors of `proto/` (Anys
//! unpacked by type URL).

use std::sync::OnceLock;

use bytes::Bytes;
use istiod_xds::ads::Kind;
use prost_reflect::{DescriptorPool, DynamicMessage, SerializeOptions};
use serde_json::{Value, json};

fn pool() -> &'static DescriptorPool {
    static POOL: OnceLock<DescriptorPool> = OnceLock::new();
    POOL.get_or_init(|| {
        let mut pool =
            DescriptorPool::decode(istiod_proto::FILE_DESCRIPTOR_SET).expect("our own descriptor set decodes");
        // istio-proxy's own filter configs (the stats filter, the ALPN
        // override), which are not among the schema files.
        for f in crate::translate::telemetry::descriptors() {
            pool.add_file_descriptor_proto(f).expect("istio-proxy's descriptors fit the pool");
        }
        pool
    })
}

/// A resource as proto3 JSON with its `@type`, or an error note.
pub fn to_json(kind: Kind, bytes: &Bytes) -> Value {
    let name = kind.type_url().trim_start_matches(istiod_proto::type_url::PREFIX);
    let Some(desc) = pool().get_message_by_name(name) else {
        return json!({"error": format!("no descriptor for {name}")});
    };
    match DynamicMessage::decode(desc, bytes.clone()) {
        Ok(msg) => {
            let opts = SerializeOptions::new().stringify_64_bit_integers(true);
            let mut ser = serde_json::Serializer::new(Vec::new());
            match msg.serialize_with_options(&mut ser, &opts) {
                Ok(()) => {
                    let mut v: Value = serde_json::from_slice(&ser.into_inner()).unwrap_or(Value::Null);
                    if let Value::Object(m) = &mut v {
                        m.insert("@type".into(), json!(kind.type_url()));
                    }
                    v
                }
                Err(e) => json!({"error": e.to_string()}),
            }
        }
        Err(e) => json!({"error": e.to_string()}),
    }
}

/// Builds the dump from a core's answer (`configs[]` of type URL, version
/// and resources with their name, version and body in hex, as the core
/// generates them for the proxy's class).
pub fn render(core_answer: &Value) -> Value {
    let mut configs = Vec::new();
    for c in core_answer["configs"].as_array().into_iter().flatten() {
        let Some(kind) = c["type_url"].as_str().and_then(Kind::from_type_url) else { continue };
        let version = c["version_info"].clone();
        let items: Vec<(String, Value, Value)> = c["resources"]
            .as_array()
            .into_iter()
            .flatten()
            .filter_map(|r| {
                let name = r["name"].as_str()?.to_owned();
                let body = unhex(r["body"].as_str()?)?;
                Some((name, r["version"].clone(), to_json(kind, &body)))
            })
            .collect();
        configs.push(match kind {
            Kind::Cluster => json!({
                "@type": "type.googleapis.com/envoy.admin.v3.ClustersConfigDump",
                "version_info": version,
                "dynamic_active_clusters": items.iter().map(|(_, v, b)| json!({"version_info": v, "cluster": b})).collect::<Vec<_>>(),
            }),
            Kind::Endpoint => json!({
                "@type": "type.googleapis.com/envoy.admin.v3.EndpointsConfigDump",
                "dynamic_endpoint_configs": items.iter().map(|(_, v, b)| json!({"version_info": v, "endpoint_config": b})).collect::<Vec<_>>(),
            }),
            Kind::Listener => json!({
                "@type": "type.googleapis.com/envoy.admin.v3.ListenersConfigDump",
                "version_info": version,
                "dynamic_listeners": items.iter().map(|(n, v, b)| json!({"name": n, "active_state": {"version_info": v, "listener": b}})).collect::<Vec<_>>(),
            }),
            Kind::Route => json!({
                "@type": "type.googleapis.com/envoy.admin.v3.RoutesConfigDump",
                "dynamic_route_configs": items.iter().map(|(_, v, b)| json!({"version_info": v, "route_config": b})).collect::<Vec<_>>(),
            }),
            // Private keys never leave: Envoy's own dump shows them as
            // "[redacted]".
            Kind::Secret => json!({
                "@type": "type.googleapis.com/envoy.admin.v3.SecretsConfigDump",
                "dynamic_active_secrets": items.iter().map(|(n, v, b)| json!({"name": n, "version_info": v, "secret": redact(b.clone())})).collect::<Vec<_>>(),
            }),
        });
    }
    json!({ "configs": configs })
}

/// A Secret's JSON with its private key replaced by `[redacted]`.
fn redact(mut secret: Value) -> Value {
    for cert in ["tlsCertificate", "tls_certificate"] {
        if let Some(c) = secret.get_mut(cert).and_then(Value::as_object_mut) {
            for key in ["privateKey", "private_key"] {
                if c.contains_key(key) {
                    c.insert(key.into(), json!({"inlineString": "[redacted]"}));
                }
            }
        }
    }
    secret
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
    use istiod_proto::prost::Message;

    use super::*;

    #[test]
    fn clusters_render_in_envoys_shape() {
        let body = Bytes::from(Cluster { name: "outbound|80||a".into(), ..Default::default() }.encode_to_vec());
        let hex: String = body.iter().map(|x| format!("{x:02x}")).collect();
        let answer = json!({"configs": [{"type_url": Kind::Cluster.type_url(), "version_info": "3",
                                         "resources": [{"name": "outbound|80||a", "version": "2", "body": hex}]}]});
        let dump = render(&answer);
        let c = &dump["configs"][0];
        assert_eq!(c["@type"], "type.googleapis.com/envoy.admin.v3.ClustersConfigDump");
        assert_eq!(c["dynamic_active_clusters"][0]["version_info"], "2");
        assert_eq!(c["dynamic_active_clusters"][0]["cluster"]["name"], "outbound|80||a");
        assert_eq!(c["dynamic_active_clusters"][0]["cluster"]["@type"], Kind::Cluster.type_url());
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
        let hex: String = secret.encode_to_vec().iter().map(|x| format!("{x:02x}")).collect();
        let answer = json!({"configs": [{"type_url": Kind::Secret.type_url(), "version_info": "1",
                                         "resources": [{"name": "kubernetes://cert", "version": "1", "body": hex}]}]});
        let dump = render(&answer);
        let text = dump.to_string();
        let c = &dump["configs"][0];
        assert_eq!(c["@type"], "type.googleapis.com/envoy.admin.v3.SecretsConfigDump");
        assert_eq!(c["dynamic_active_secrets"][0]["name"], "kubernetes://cert");
        assert!(!text.contains(&base64_of(b"SECRET-KEY")), "{text}");
        assert!(text.contains("[redacted]"), "{text}");
        assert!(text.contains(&base64_of(b"CERT")), "the certificate stays: {text}");
    }

    fn base64_of(b: &[u8]) -> String {
        use base64::Engine;
        base64::engine::general_purpose::STANDARD.encode(b)
    }
}
