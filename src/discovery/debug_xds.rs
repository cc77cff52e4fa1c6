//! Debug over xDS, which `istioctl proxy-status` and `istioctl x
//! internal-debug` use in a cluster (through istiod's 15012): the cores
//! forward `istio.io/debug/*` requests that passed the generator's checks
//! (`generator.rs` `debug_access`) here, where every core's state can be
//! asked.
//!
//! - `istio.io/debug/syncz`: istiod's status generator
//!   (`pilot/pkg/xds/statusgen.go` debugSyncz): one
//!   `envoy.service.status.v3.ClientConfig` per connected proxy, its node
//!   (id, and `CLUSTER_ID`, `NAMESPACE`, `ISTIO_VERSION` metadata) and one
//!   `GenericXdsConfig` per watched type with its status.
//! - `istio.io/debug/config_dump` naming a proxy: its config dump's parts,
//!   each an unnamed resource (`debugConfigDump`).
//! - `istio.io/debug` naming a debug path (`syncz`,
//!   `config_dump?proxyID=...`): the path's HTTP body as one resource of
//!   type `istio.io/debug` (`debuggen.go`).
//!
//! A caller outside the root namespace sees only its namespace's proxies
//! (`callerNamespaceFilter`).

use std::rc::Rc;

use istiod_proto::envoy::admin::v3::UpdateFailureState;
use istiod_proto::envoy::config::core::v3::Node;
use istiod_proto::envoy::service::status::v3::{ClientConfig, ConfigStatus, client_config::GenericXdsConfig};
use istiod_proto::prost::{Message, Name};
use istiod_proto::prost_types::{Struct, Timestamp, Value as PbValue, value::Kind as PbKind};
use istiod_xds::ads::{Forwarded, ForwardedResource};
use serde_json::Value;

use super::debug::{Debug, config_dump, debug, syncz_rows};
use istiod_mesh::generator::{DEBUG_PREFIX, DEBUG_TYPE};
use istiod_mesh::node::ProxyClass;

/// Answers forwarded requests until the cores are gone.
pub(super) async fn serve(rx: async_channel::Receiver<Forwarded<ProxyClass>>, d: Rc<Debug>) {
    while let Ok(f) = rx.recv().await {
        let d = d.clone();
        tokio::task::spawn_local(async move {
            let resources = answer(&f, &d).await;
            let _ = f.reply.send(resources).await;
        });
    }
}

/// The namespace a caller is limited to: its own, unless it is the root
/// namespace's or `ENABLE_DEBUG_ENDPOINT_AUTH` is off; for the status
/// types (`status`: syncz, config_dump) also unless it is one of
/// `DEBUG_ENDPOINT_AUTH_ALLOWED_NAMESPACES` (istiod's
/// `callerNamespaceFilter`; its debug generator reads only the root).
fn caller_namespace(d: &Debug, class: &ProxyClass, status: bool) -> Option<String> {
    let mesh = d.mesh();
    let allowed = status && d.allowed_namespaces.iter().any(|a| **a == *class.namespace);
    (mesh.debug_endpoint_auth && class.verified && *class.namespace != *mesh.root_namespace && !allowed)
        .then(|| class.namespace.to_string())
}

async fn answer(f: &Forwarded<ProxyClass>, d: &Debug) -> Vec<ForwardedResource> {
    let caller = caller_namespace(d, &f.class, f.type_url != DEBUG_TYPE);
    let caller = caller.as_deref();
    match f.type_url.strip_prefix(DEBUG_PREFIX) {
        // Proxies only (istiod's `isProxy`): streams that watch no xDS type,
        // such as istioctl's own, are left out.
        Some("syncz") => syncz_rows(&d.publisher, caller)
            .await
            .iter()
            .filter(|row| row["status"]["resources"].as_object().is_some_and(|r| !r.is_empty()))
            .map(|row| {
                let c = client_config(row);
                let name = c.node.as_ref().map(|n| n.id.clone()).unwrap_or_default();
                ForwardedResource { name, type_url: ClientConfig::type_url(), value: c.encode_to_vec().into() }
            })
            .collect(),
        Some("config_dump") => {
            let [id] = &f.names[..] else {
                tracing::info!(target: "ads", names = f.names.len(), "istio.io/debug/config_dump wants one proxy");
                return Vec::new();
            };
            match config_dump(&d.publisher, id, caller, false, "").await {
                Some(dump) => dump
                    .configs
                    .into_iter()
                    .map(|a| ForwardedResource { name: String::new(), type_url: a.type_url, value: a.value.into() })
                    .collect(),
                None => {
                    tracing::info!(target: "ads", proxy = %id, "istio.io/debug/config_dump: no such proxy connected");
                    Vec::new()
                }
            }
        }
        None if f.type_url == DEBUG_TYPE => {
            let [name] = &f.names[..] else { return Vec::new() };
            let req = crate::control::http::parse_target(&format!("/debug/{name}"));
            let resp = debug(req, d, caller).await;
            vec![ForwardedResource { name: name.clone(), type_url: DEBUG_TYPE.into(), value: resp.body }]
        }
        _ => Vec::new(),
    }
}

/// A proxy's `ClientConfig` from its syncz row (`status` as istiod's
/// `SyncStatus`, `sent_unix_us` the send times).
fn client_config(row: &Value) -> ClientConfig {
    let status = &row["status"];
    let s = |k: &str| status[k].as_str().unwrap_or("").to_owned();
    let mut metadata = Struct::default();
    for (key, field) in [("CLUSTER_ID", "cluster_id"), ("NAMESPACE", ""), ("ISTIO_VERSION", "istio_version")] {
        let v = if field.is_empty() { row["namespace"].as_str().unwrap_or("").to_owned() } else { s(field) };
        if !v.is_empty() {
            metadata.fields.insert(key.into(), PbValue { kind: Some(PbKind::StringValue(v)) });
        }
    }
    let mut configs: Vec<GenericXdsConfig> = status["resources"]
        .as_object()
        .into_iter()
        .flatten()
        .map(|(type_url, r)| {
            let get = |k: &str| r[k].as_str().unwrap_or("");
            let (sent, acked, error) = (get("sent"), get("acked"), get("lastError"));
            // statusgen.go debugSyncStatus.
            let config_status = if !error.is_empty() {
                ConfigStatus::Error
            } else if sent.is_empty() {
                ConfigStatus::NotSent
            } else if acked == sent {
                ConfigStatus::Synced
            } else {
                ConfigStatus::Stale
            };
            let last_updated = row["sent_unix_us"][type_url]
                .as_u64()
                .map(|us| Timestamp { seconds: (us / 1_000_000) as i64, nanos: (us % 1_000_000 * 1000) as i32 });
            GenericXdsConfig {
                type_url: type_url.clone(),
                config_status: config_status as i32,
                error_state: (!error.is_empty()).then(|| UpdateFailureState {
                    last_update_attempt: last_updated,
                    details: error.to_owned(),
                    ..Default::default()
                }),
                last_updated,
                ..Default::default()
            }
        })
        .collect();
    configs.sort_by(|a, b| a.type_url.cmp(&b.type_url));
    ClientConfig {
        node: Some(Node { id: s("proxy"), metadata: Some(metadata), ..Default::default() }),
        generic_xds_configs: configs,
        ..Default::default()
    }
}

#[cfg(test)]
mod tests {
    use serde_json::json;

    use super::*;

    #[test]
    fn client_config_follows_statusgen() {
        let cds = istiod_proto::type_url::CLUSTER;
        let lds = istiod_proto::type_url::LISTENER;
        let eds = istiod_proto::type_url::CLUSTER_LOAD_ASSIGNMENT;
        let rds = istiod_proto::type_url::ROUTE_CONFIGURATION;
        let row = json!({
            "namespace": "shop",
            "status": {
                "proxy": "cart-1.shop", "cluster_id": "Kubernetes", "istio_version": "1.28.0",
                "resources": {
                    cds: {"sent": "n2", "acked": "n2", "sentTime": "x"},
                    lds: {"sent": "n3", "acked": "n2"},
                    eds: {"sent": "n4", "lastError": "bad endpoint"},
                    rds: {},
                },
            },
            "sent_unix_us": { cds: 1_795_000_000_123_456u64 },
        });
        let c = client_config(&row);
        let node = c.node.unwrap();
        assert_eq!(node.id, "cart-1.shop");
        let meta = node.metadata.unwrap().fields;
        assert_eq!(meta.keys().collect::<Vec<_>>(), ["CLUSTER_ID", "ISTIO_VERSION", "NAMESPACE"]);
        let by_type: Vec<(&str, i32)> =
            c.generic_xds_configs.iter().map(|g| (g.type_url.as_str(), g.config_status)).collect();
        assert_eq!(
            by_type,
            [
                (cds, ConfigStatus::Synced as i32),
                (eds, ConfigStatus::Error as i32),
                (lds, ConfigStatus::Stale as i32),
                (rds, ConfigStatus::NotSent as i32),
            ],
            "sorted by type URL"
        );
        let cluster = &c.generic_xds_configs[0];
        assert_eq!(cluster.last_updated, Some(Timestamp { seconds: 1_795_000_000, nanos: 123_456_000 }));
        assert_eq!(c.generic_xds_configs[1].error_state.as_ref().unwrap().details, "bad endpoint");
    }
}
