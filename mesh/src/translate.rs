//! Translation of the mesh model into Envoy and proxyless-gRPC resources,
//! after istiod's `pilot/pkg/networking/core`: one module per resource type
//! ([`cluster`], [`endpoint`], [`listener`], [`route`]), the sidecar's own
//! workload side ([`inbound`], [`authn`], [`authz`] with [`extauthz`]), proxyless gRPC ([`grpc`]), what
//! a proxy may see ([`scope`], [`locality`]), and the Envoy builders they
//! share ([`envoy`]). [`translate`] makes the resources every proxy class
//! shares; `generator.rs` makes the per-class ones on the serving cores.

use std::collections::{HashMap, HashSet};
use std::sync::Arc;

use bytes::Bytes;
use istiod_xds_api::snapshot::{Kind, SimpleModel};

use crate::model::Model;

pub mod authn;
pub mod authz;
pub mod cluster;
pub mod dfp;
pub mod dns;
pub mod endpoint;
pub mod envoy;
pub mod extauthz;
pub mod extensions;
pub mod family;
pub mod gateway;
pub mod grpc;
pub mod inbound;
pub(crate) mod l4;
pub mod listener;
pub mod locality;
pub mod network;
pub mod route;
pub mod scope;
pub mod telemetry;
pub mod tracing;
pub mod traffic_policy;

/// One resource change for the engine's model.
pub type Change = (Kind, Arc<str>, Option<Bytes>);

/// Every resource name with its bytes (see [`Translation::resources`]).
pub type Resources = imbl::OrdMap<(Kind, Arc<str>), Bytes>;

/// What translation makes of one model: typed values that the generator
/// renders per proxy class, and for every resource name bytes that change
/// when the resource may change for some proxy. Cloning is cheap (persistent
/// maps and shared tables): an update clones and changes a few entries.
#[derive(Debug, Clone, Default)]
pub struct Translation {
    /// Every resource name. Where all proxies get the same resource (fixed
    /// clusters, outbound and API listeners) these are its encoded bytes,
    /// served as they are; otherwise a digest of what rendering reads
    /// (outbound clusters and endpoints: [`cluster::ClusterForms::digest`];
    /// routes: [`route::RouteTable::digest`]). The control thread diffs
    /// them to find what changed.
    pub resources: Resources,
    /// Outbound clusters and their load assignments, a form per
    /// DestinationRule that may apply.
    pub clusters: imbl::HashMap<Arc<str>, cluster::ClusterForms>,
    /// Route configurations, before rendering per proxy.
    pub routes: Arc<HashMap<Arc<str>, route::RouteTable>>,
    /// The proxyless gRPC API listeners (never sent to Envoy).
    pub api_listeners: Arc<HashSet<Arc<str>>>,
    /// The outbound cluster names of each service.
    pub by_host: imbl::HashMap<Arc<str>, Vec<Arc<str>>>,
}

impl Translation {
    /// Sets (or with `None` removes) the bytes of `key`.
    fn set(&mut self, key: (Kind, Arc<str>), bytes: Option<Bytes>) {
        match bytes {
            Some(b) => self.resources.insert(key, b),
            None => self.resources.remove(&key),
        };
    }

    /// Replaces the outbound clusters of `host` (and their load
    /// assignments) with what `model` makes of it now. Routes and listeners
    /// do not read endpoints, so an endpoint-only change of a service ends
    /// here.
    pub fn update_service(&mut self, model: &Model, host: &Arc<str>) {
        self.set_service(host, outbound(model, host));
    }

    /// Replaces the outbound clusters of `host` with `after`.
    fn set_service(&mut self, host: &Arc<str>, after: Vec<Outbound>) {
        for name in self.by_host.get(host).cloned().unwrap_or_default() {
            if !after.iter().any(|o| o.name == name) {
                self.clusters.remove(&name);
                self.set((Kind::Cluster, name.clone()), None);
                self.set((Kind::Endpoint, name), None);
            }
        }
        let names: Vec<Arc<str>> = after.iter().map(|o| o.name.clone()).collect();
        for Outbound { name, forms, cds, eds } in after {
            self.set((Kind::Cluster, name.clone()), Some(cds));
            self.set((Kind::Endpoint, name.clone()), eds);
            self.clusters.insert(name, forms);
        }
        if names.is_empty() {
            self.by_host.remove(host);
        } else {
            self.by_host.insert(host.clone(), names);
        }
    }

    /// Brings everything translated of the services `hosts` from `old` to
    /// `new`, where their shape (addresses, ports, resolution) changed or
    /// they came or went: clusters, load assignments, outbound listeners,
    /// virtual hosts, proxyless gRPC listeners and routes.
    pub fn update_hosts(&mut self, old: &Model, new: &Model, hosts: &[Arc<str>]) {
        for host in hosts {
            self.update_service(new, host);
        }
        grpc::update_hosts(old, new, hosts, self);
        listener::update_hosts(old, new, hosts, self);
    }

    /// Re-translates the virtual hosts of `hosts` (their VirtualServices
    /// changed) in the sidecar route tables of their HTTP ports and in
    /// their proxyless gRPC tables; other hosts' entries are shared.
    pub fn update_routes(&mut self, model: &Model, hosts: &std::collections::BTreeSet<Arc<str>>) {
        let tables = Arc::make_mut(&mut self.routes);
        let mut touched = std::collections::BTreeSet::new();
        for host in hosts {
            let Some(svc) = model.services.get(host) else { continue };
            for port in &svc.ports {
                if port.protocol.is_http()
                    && let Some(t) = tables.get_mut(port.port.to_string().as_str())
                    && let Ok(i) = t.hosts.binary_search_by(|vh| vh.host.cmp(host))
                {
                    t.hosts[i] = route::ServiceRoutes::new(model, svc, port.port, route::Flavor::Envoy);
                    touched.insert(Arc::<str>::from(port.port.to_string()));
                }
                let grpc = format!("outbound|{}||{host}", port.port);
                if let Some(t) = tables.get_mut(grpc.as_str()) {
                    t.hosts = vec![route::ServiceRoutes::new(model, svc, port.port, route::Flavor::Grpc)];
                    touched.insert(Arc::from(grpc));
                }
            }
        }
        // Route configuration 80 reads the VirtualServices naming services
        // without port 80 (their hosts get virtual hosts there); every
        // table, the special ones, which a change of services earlier in a
        // mixed change may have made (a Service uninstalled before its
        // VirtualService).
        let digests = route::special_virtual_services_digests(model, tables.contains_key("80"));
        for (name, t) in tables.iter_mut().filter(|(_, t)| t.flavor == route::Flavor::Envoy) {
            let digest = name.parse().map_or(t.vs_digest, |port| route::special_digest_of(port, digests));
            if t.vs_digest != digest {
                t.vs_digest = digest;
                touched.insert(name.clone());
            }
        }
        for name in touched {
            let digest = self.routes.get(&name).map(route::RouteTable::digest);
            self.set((Kind::Route, name), digest);
        }
    }
}

/// Translates `model`.
pub fn translate(model: &Model) -> Translation {
    let mut t = Translation::default();
    let hosts: Vec<&Arc<str>> = model.services.keys().collect();
    for (host, after) in hosts.iter().zip(outbound_all(model, &hosts)) {
        t.set_service(host, after);
    }
    cluster::fixed(&model.mesh, &mut t.resources);
    grpc::translate(model, &mut t);
    listener::translate(model, &mut t);
    let digests: Vec<_> = t.routes.iter().map(|(name, table)| ((Kind::Route, name.clone()), table.digest())).collect();
    t.resources.extend(digests);
    t
}

/// The outbound clusters of `host` in `model`, each in its forms.
fn outbound(model: &Model, host: &Arc<str>) -> Vec<Outbound> {
    // (An ExternalName alias has no clusters: cluster.go skips Alias.)
    let Some(svc) = model.services.get(host).filter(|_| !model.is_alias(host)) else { return Vec::new() };
    cluster::outbound_of(model, svc)
        .into_iter()
        .map(|(name, forms)| Outbound {
            cds: forms.digest(Kind::Cluster),
            eds: forms.forms.iter().any(|f| f.endpoints.is_some()).then(|| forms.digest(Kind::Endpoint)),
            name,
            forms,
        })
        .collect()
}

/// One outbound cluster of a service, with its CDS digest and, where it
/// is sent over EDS, its load assignment's (digested where it is built,
/// on the build's threads).
struct Outbound {
    name: Arc<str>,
    forms: cluster::ClusterForms,
    cds: Bytes,
    eds: Option<Bytes>,
}

/// [`outbound`] of every host, in order: most of a full translation of a
/// large mesh, one service at a time and each independent of the others.
fn outbound_all(model: &Model, hosts: &[&Arc<str>]) -> Vec<Vec<Outbound>> {
    crate::model::par_map(hosts, |h| outbound(model, h))
}

/// The changes that turn `model` into exactly `want`.
pub fn diff(model: &SimpleModel, want: &Resources) -> Vec<Change> {
    let mut changes: Vec<Change> = want.iter().map(|((k, n), b)| (*k, n.clone(), Some(b.clone()))).collect();
    for kind in Kind::ALL {
        for name in model.resources[kind as usize].keys() {
            if !want.contains_key(&(kind, name.clone())) {
                changes.push((kind, name.clone(), None));
            }
        }
    }
    changes
}

/// The changes from one set of resources to another: O(changed) where the
/// two share structure (one was made from the other).
pub fn diff_maps(old: &Resources, new: &Resources) -> Vec<Change> {
    use imbl::ordmap::DiffItem;
    old.diff(new)
        .map(|d| match d {
            DiffItem::Add((k, n), b) | DiffItem::Update { new: ((k, n), b), .. } => (*k, n.clone(), Some(b.clone())),
            DiffItem::Remove((k, n), _) => (*k, n.clone(), None),
        })
        .collect()
}

#[cfg(test)]
mod tests {
    use istiod_proto::envoy::config::cluster::v3::Cluster;
    use istiod_proto::envoy::config::core::v3 as core;
    use istiod_proto::envoy::config::endpoint::v3::{ClusterLoadAssignment, LbEndpoint};
    use istiod_proto::prost::Message;
    use std::path::Path;

    use super::*;

    #[test]
    fn bookinfo_clusters_and_endpoints() {
        let dir = Path::new(env!("CARGO_MANIFEST_DIR")).join("../examples/bookinfo");
        let objs = istiod_kubewatch::config_dir::load(&dir).unwrap().objects;
        let model = Arc::new(Model::build(&objs, "cluster.local"));
        let client = crate::testing::class("bookinfo", &[("app", "productpage")]);
        let served = |kind, name: &str| crate::testing::served(&model, &client, kind, name).unwrap();
        let reviews = "outbound|9080||reviews.bookinfo.svc.cluster.local";
        let c = Cluster::decode(served(Kind::Cluster, reviews)).unwrap();
        assert_eq!(c.eds_cluster_config.unwrap().service_name, reviews);
        let cla = ClusterLoadAssignment::decode(served(Kind::Endpoint, reviews)).unwrap();
        let eps: Vec<&LbEndpoint> = cla.endpoints.iter().flat_map(|l| &l.lb_endpoints).collect();
        // v2's terminating pod is not sent (istiod's filterIstioEndpoint).
        assert_eq!(eps.len(), 3, "reviews v1, v2, v3");
        assert!(eps.iter().all(|e| e.health_status == core::HealthStatus::Healthy as i32));
        assert!(
            cla.endpoints
                .iter()
                .all(|l| l.locality.as_ref().is_some_and(|l| !l.zone.is_empty() && !l.region.is_empty()))
        );
    }

    #[test]
    fn mesh_config_shapes_outbound_traffic_and_auto_mtls() {
        use istiod_proto::envoy::config::listener::v3::Listener;
        use istiod_proto::envoy::config::route::v3::{RouteConfiguration, route};
        use istiod_proto::envoy::extensions::filters::network::tcp_proxy::v3::{TcpProxy, tcp_proxy};

        let dir = Path::new(env!("CARGO_MANIFEST_DIR")).join("../examples/bookinfo");
        let objs = istiod_kubewatch::config_dir::load(&dir).unwrap().objects;
        let client = crate::testing::class("bookinfo", &[("app", "productpage")]);
        let served =
            |m: &Model, kind, name: &str| crate::testing::served(&Arc::new(m.clone()), &client, kind, name).unwrap();
        let catchall = |m: &Model| {
            let l = Listener::decode(served(m, Kind::Listener, "virtualOutbound")).unwrap();
            let chain = l.filter_chains.iter().find(|c| c.name == "virtualOutbound-catchall-tcp").unwrap();
            let any = chain.filters.last().unwrap().config_type.clone();
            let Some(istiod_proto::envoy::config::listener::v3::filter::ConfigType::TypedConfig(any)) = any else {
                panic!("no tcp_proxy config")
            };
            match TcpProxy::decode(any.value.as_slice()).unwrap().cluster_specifier {
                Some(tcp_proxy::ClusterSpecifier::Cluster(c)) => c,
                other => panic!("{other:?}"),
            }
        };
        let fallback = |m: &Model| {
            let rc = RouteConfiguration::decode(served(m, Kind::Route, "9080")).unwrap();
            let vh = rc.virtual_hosts.last().unwrap().clone();
            (vh.name, vh.routes[0].action.clone())
        };
        let details: Arc<str> = "outbound|9080||details.bookinfo.svc.cluster.local".into();

        let open = Model::build(&objs, "cluster.local");
        assert_eq!(catchall(&open), "PassthroughCluster");
        assert_eq!(fallback(&open).0, "allow_any");
        let c = Cluster::decode(served(&open, Kind::Cluster, &details)).unwrap();
        assert!(!c.transport_socket_matches.is_empty(), "auto mTLS is on by default");

        let mesh = crate::meshconfig::MeshSettings::parse(
            "outboundTrafficPolicy:\n  mode: REGISTRY_ONLY\nenableAutoMtls: false\n",
        )
        .unwrap();
        let closed = Model::build_in(&objs, "cluster.local", Arc::new(mesh));
        assert_eq!(catchall(&closed), "BlackHoleCluster");
        let (name, action) = fallback(&closed);
        assert_eq!(name, "block_all");
        assert!(matches!(action, Some(route::Action::DirectResponse(d)) if d.status == 502));
        let c = Cluster::decode(served(&closed, Kind::Cluster, &details)).unwrap();
        assert!(c.transport_socket_matches.is_empty(), "enableAutoMtls: false");
    }

    /// The mesh config's cluster defaults and default `exportTo`s
    /// (pkg/config/mesh/mesh.go, istiod's `exportToDefaults` in
    /// push_context.go, cluster_builder.go's `ConnectTimeout`,
    /// `getLocalityLbSetting`): `connectTimeout` on every cluster a rule
    /// does not time; `defaultServiceExportTo: ["."]` hides services
    /// without `exportTo` from other namespaces, while one exported by its
    /// own annotation stays visible; `defaultVirtualServiceExportTo` and
    /// `defaultDestinationRuleExportTo` do the same for routing rules; the
    /// mesh's `localityLbSetting` applies where no rule sets one.
    #[test]
    fn mesh_config_defaults_for_clusters_and_export_to() {
        use istiod_proto::envoy::config::route::v3::RouteConfiguration;
        let extra = "apiVersion: v1\nkind: Service\nmetadata: {name: open, namespace: shop, annotations: {networking.istio.io/exportTo: \"*\"}}\n\
                     spec: {clusterIP: 10.96.7.7, ports: [{name: http, port: 8080}]}\n---\n\
                     apiVersion: v1\nkind: Service\nmetadata: {name: closed, namespace: shop}\n\
                     spec: {clusterIP: 10.96.7.8, ports: [{name: http, port: 8080}]}\n---\n\
                     apiVersion: networking.istio.io/v1\nkind: VirtualService\nmetadata: {name: open, namespace: shop}\n\
                     spec: {hosts: [open.shop.svc.cluster.local], http: [{route: [{destination: {host: open.shop.svc.cluster.local}}], timeout: 7s}]}\n---\n\
                     apiVersion: networking.istio.io/v1\nkind: DestinationRule\nmetadata: {name: open, namespace: shop}\n\
                     spec: {host: open.shop.svc.cluster.local, trafficPolicy: {connectionPool: {tcp: {connectTimeout: 2s}}}}\n";
        let mesh = "connectTimeout: 3s\ndefaultServiceExportTo: [\".\"]\ndefaultVirtualServiceExportTo: [\".\"]\n\
                    defaultDestinationRuleExportTo: [\".\"]\n\
                    localityLbSetting: {enabled: true, failover: [{from: us-east, to: us-west}]}\n";
        let m = Arc::new(crate::testing::model_in(mesh, extra));
        let client = crate::testing::class("bookinfo", &[]);
        let local = crate::testing::class("shop", &[]);
        let cluster = |class, name: &str| {
            crate::testing::served(&m, class, Kind::Cluster, name).map(|b| Cluster::decode(b).unwrap())
        };
        let open = cluster(&client, "outbound|8080||open.shop.svc.cluster.local").expect("exported by its annotation");
        assert_eq!(
            open.connect_timeout.as_ref().map(|d| (d.seconds, d.nanos)),
            Some((3, 0)),
            "the mesh's: the shop DestinationRule is shop's only (defaultDestinationRuleExportTo)"
        );
        let own = cluster(&local, "outbound|8080||open.shop.svc.cluster.local").unwrap();
        assert_eq!(own.connect_timeout.as_ref().map(|d| d.seconds), Some(2), "the rule's, in its namespace");
        assert!(cluster(&client, "outbound|8080||closed.shop.svc.cluster.local").is_none(), "defaultServiceExportTo");
        assert!(cluster(&local, "outbound|8080||closed.shop.svc.cluster.local").is_some(), "its own namespace sees it");
        let black_hole = cluster(&client, "BlackHoleCluster").unwrap();
        assert_eq!(black_hole.connect_timeout.as_ref().map(|d| d.seconds), Some(3));
        // The VirtualService (no exportTo) is the shop namespace's only: the
        // bookinfo client routes to `open` without its 7 s timeout.
        let timeout_of = |class| {
            let rc =
                RouteConfiguration::decode(crate::testing::served(&m, class, Kind::Route, "8080").unwrap()).unwrap();
            let vh = rc.virtual_hosts.iter().find(|v| v.name == "open.shop.svc.cluster.local:8080").unwrap().clone();
            match vh.routes[0].action.clone() {
                Some(istiod_proto::envoy::config::route::v3::route::Action::Route(r)) => r.timeout.map(|d| d.seconds),
                other => panic!("{other:?}"),
            }
        };
        assert_eq!(timeout_of(&local), Some(7));
        assert_ne!(timeout_of(&client), Some(7), "defaultVirtualServiceExportTo");
        let forms = crate::translate::cluster::outbound_of(&m, &m.services["open.shop.svc.cluster.local"]);
        let locality = forms[0].1.forms[0].locality.clone().expect("the mesh's localityLbSetting");
        assert_eq!(locality.failover[0].from, "us-east");
        // A mesh-wide `distribute`: weights on the served cluster too.
        let weighted = Arc::new(crate::testing::model_in(
            "localityLbSetting: {distribute: [{from: \"us-east/*\", to: {\"us-east/*\": 80, \"us-west/*\": 20}}]}\n",
            extra,
        ));
        let c =
            crate::testing::served(&weighted, &local, Kind::Cluster, "outbound|8080||closed.shop.svc.cluster.local")
                .map(|b| Cluster::decode(b).unwrap())
                .unwrap();
        assert!(format!("{:?}", c.common_lb_config).contains("LocalityWeightedLbConfig"), "{:?}", c.common_lb_config);
        assert!(
            crate::meshconfig::MeshSettings::parse("connectTimeout: 0s\n").is_err(),
            "Envoy refuses a zero timeout"
        );
        let defaults = crate::testing::model_in("", extra);
        let forms =
            crate::translate::cluster::outbound_of(&defaults, &defaults.services["open.shop.svc.cluster.local"]);
        assert!(forms[0].1.forms[0].locality.is_none());
    }

    /// `inboundTrafficPolicy` (cluster.go
    /// `buildInboundClustersFromServiceInstances`): PASSTHROUGH (the
    /// default) sends to the original destination from 127.0.0.6;
    /// LOCALHOST makes a static cluster to 127.0.0.1 on the port, with no
    /// bind address; served that way to the workload.
    #[test]
    fn inbound_traffic_policy_localhost_sends_to_loopback() {
        use istiod_proto::envoy::config::cluster::v3::cluster;
        let extra = "apiVersion: v1\nkind: Service\nmetadata: {name: web, namespace: shop}\n\
                     spec: {clusterIP: 10.96.7.9, selector: {app: web}, ports: [{name: http, port: 80, targetPort: 8080}]}\n---\n\
                     apiVersion: v1\nkind: Pod\nmetadata: {name: web-0, namespace: shop, labels: {app: web}}\n\
                     spec: {containers: [{name: c}]}\nstatus: {podIP: 10.244.0.9, phase: Running}\n";
        let web = crate::testing::class("shop", &[("app", "web")]);
        let inbound = |mesh: &str| {
            let m = Arc::new(crate::testing::model_in(mesh, extra));
            let b = crate::testing::served(&m, &web, Kind::Cluster, "inbound|8080||").expect("served");
            Cluster::decode(b).unwrap()
        };
        let passthrough = inbound("");
        assert_eq!(passthrough.lb_policy, cluster::LbPolicy::ClusterProvided as i32);
        assert_eq!(passthrough.upstream_bind_config.unwrap().source_address.unwrap().address, "127.0.0.6");
        let local = inbound("inboundTrafficPolicy: {mode: LOCALHOST}\n");
        assert_eq!(
            local.cluster_discovery_type,
            Some(cluster::ClusterDiscoveryType::Type(cluster::DiscoveryType::Static as i32))
        );
        assert!(local.upstream_bind_config.is_none());
        let cla = local.load_assignment.unwrap();
        let ep = &cla.endpoints[0].lb_endpoints[0];
        let text = format!("{ep:?}");
        assert!(text.contains("\"127.0.0.1\"") && text.contains("PortValue(8080)"), "{text}");
        assert!(crate::meshconfig::MeshSettings::parse("inboundTrafficPolicy: {mode: SOMETIMES}\n").is_err());
    }

    /// A VirtualService bound to a Gateway only is not a sidecar's, and a
    /// match block naming gateways is a sidecar's only with `mesh` among
    /// them (istiod's getGatewayNames and mesh route building).
    #[test]
    fn gateway_bound_routes_stay_off_sidecars() {
        use istiod_proto::envoy::config::route::v3::{Route, RouteConfiguration, route, route_match};
        let dir = Path::new(env!("CARGO_MANIFEST_DIR")).join("../examples/bookinfo");
        let mut objs = istiod_kubewatch::config_dir::load(&dir).unwrap().objects;
        objs.istio.retain(|o| !matches!(&o.spec, istiod_config::istio::IstioSpec::VirtualService(_)));
        objs.istio.extend(crate::testing::istio_objects(
            "apiVersion: networking.istio.io/v1\nkind: VirtualService\nmetadata: {name: edge, namespace: bookinfo}\n\
             spec: {hosts: [reviews], gateways: [bookinfo-gateway], http: [{route: [{destination: {host: reviews, subset: v3}}]}]}\n\
             ---\napiVersion: networking.istio.io/v1\nkind: VirtualService\nmetadata: {name: both, namespace: bookinfo}\n\
             spec: {hosts: [ratings], gateways: [bookinfo-gateway, mesh], http: [\
             {match: [{uri: {prefix: /edge}, gateways: [bookinfo-gateway]}], route: [{destination: {host: ratings, subset: v2}}]},\
             {route: [{destination: {host: ratings, subset: v1}}]}]}\n",
        ));
        let model = Arc::new(Model::build(&objs, "cluster.local"));
        let client = crate::testing::class("bookinfo", &[("app", "productpage")]);
        let rc =
            RouteConfiguration::decode(crate::testing::served(&model, &client, Kind::Route, "9080").unwrap()).unwrap();
        let routes_of = |host: &str| {
            rc.virtual_hosts.iter().find(|v| v.domains.iter().any(|d| d.starts_with(host))).unwrap().routes.clone()
        };
        let cluster = |r: &Route| match &r.action {
            Some(route::Action::Route(a)) => format!("{:?}", a.cluster_specifier),
            other => format!("{other:?}"),
        };
        let reviews = routes_of("reviews.bookinfo");
        assert!(reviews.iter().all(|r| !cluster(r).contains("|v3|")), "the gateway's VirtualService: {reviews:?}");
        let ratings = routes_of("ratings.bookinfo");
        assert_eq!(ratings.len(), 1, "the gateway's match block is left out: {ratings:?}");
        assert!(cluster(&ratings[0]).contains("|v1|"));
        assert!(
            matches!(ratings[0].r#match.as_ref().and_then(|m| m.path_specifier.as_ref()), Some(route_match::PathSpecifier::Prefix(p)) if p == "/")
        );
    }

    #[test]
    fn diff_removes_what_is_gone() {
        let mut want = Resources::new();
        want.insert((Kind::Cluster, Arc::<str>::from("a")), Bytes::from_static(b"1"));
        let (model, _) = SimpleModel::default().apply(1, diff(&SimpleModel::default(), &want));
        let changes = diff(&model, &Resources::new());
        assert_eq!(changes, vec![(Kind::Cluster, Arc::from("a"), None)]);
    }

    /// A full build on several threads (the model's services, the copies
    /// of its rules, their clusters, the sidecar and gRPC route tables,
    /// each split over scoped threads) is the build on one: 1,200 services
    /// in 6 namespaces, each with a pod behind an EndpointSlice, every 2nd
    /// with a subset rule and every 7th with a VirtualService (772 rules:
    /// three threads' worth), built on one thread and on three.
    #[test]
    fn a_build_on_several_threads_is_the_build_on_one() {
        use std::fmt::Write as _;
        let mut yaml = String::new();
        for i in 0..1200 {
            let (ns, a, b) = (format!("ns{}", i % 6), i / 250, i % 250);
            write!(
                yaml,
                "---\napiVersion: v1\nkind: Service\nmetadata: {{name: s{i}, namespace: {ns}}}\n\
                 spec: {{clusterIP: 10.96.{a}.{b}, selector: {{app: s{i}}}, ports: [{{name: http, port: 8080}}, {{name: grpc, port: 9090}}]}}\n\
                 ---\napiVersion: v1\nkind: Pod\nmetadata: {{name: s{i}-0, namespace: {ns}, \
                 labels: {{app: s{i}, version: v{}, security.istio.io/tlsMode: istio}}}}\n\
                 spec: {{serviceAccountName: s{i}}}\nstatus: {{podIP: 10.244.{a}.{b}}}\n\
                 ---\napiVersion: discovery.k8s.io/v1\nkind: EndpointSlice\nmetadata: {{name: s{i}-1, namespace: {ns}, \
                 labels: {{kubernetes.io/service-name: s{i}}}}}\naddressType: IPv4\n\
                 ports: [{{name: http, port: 8080}}, {{name: grpc, port: 9090}}]\n\
                 endpoints: [{{addresses: [10.244.{a}.{b}], targetRef: {{kind: Pod, name: s{i}-0, namespace: {ns}}}}}]\n",
                i % 3
            )
            .unwrap();
            if i % 2 == 0 {
                write!(
                    yaml,
                    "---\napiVersion: networking.istio.io/v1\nkind: DestinationRule\nmetadata: {{name: s{i}, namespace: {ns}}}\n\
                     spec: {{host: s{i}, subsets: [{{name: v0, labels: {{version: v0}}}}, {{name: v1, labels: {{version: v1}}}}]}}\n"
                )
                .unwrap();
            }
            if i % 7 == 0 {
                write!(
                    yaml,
                    "---\napiVersion: networking.istio.io/v1\nkind: VirtualService\nmetadata: {{name: s{i}, namespace: {ns}}}\n\
                     spec: {{hosts: [s{i}], http: [{{timeout: 3s, route: [{{destination: {{host: s{i}}}}}]}}]}}\n"
                )
                .unwrap();
            }
        }
        let objs = crate::testing::objects(&yaml);
        assert_eq!(objs.services.len(), 1200);
        let settings = Arc::new(crate::meshconfig::MeshSettings::default());
        crate::model::set_rebuild_threads(1);
        let one = crate::update::build(&objs, "cluster.local", &settings);
        crate::model::set_rebuild_threads(3);
        let three = crate::update::build(&objs, "cluster.local", &settings);
        assert_eq!(one.model.services, three.model.services);
        assert_eq!(one.model.routing.len(), 772);
        assert!(one.model.routing == three.model.routing, "the rules differ");
        let (a, b) = (&one.translation, &three.translation);
        assert_eq!(a.resources.len(), b.resources.len());
        assert!(a.resources == b.resources, "the resources' digests differ");
        assert_eq!(a.by_host, b.by_host);
        assert_eq!(a.routes, b.routes);
        assert_eq!(a.api_listeners, b.api_listeners);
        let forms = |t: &Translation| -> Vec<(Arc<str>, Vec<Bytes>)> {
            let mut v: Vec<_> = t
                .clusters
                .iter()
                .map(|(n, f)| (n.clone(), f.forms.iter().map(|f| f.bytes.clone()).collect()))
                .collect();
            v.sort();
            v
        };
        assert_eq!(forms(a), forms(b));
        // The subsets and routes are there to compare.
        assert!(a.clusters.contains_key("outbound|8080|v1|s10.ns4.svc.cluster.local"));
        assert!(a.routes.contains_key("8080") && a.routes.contains_key("outbound|9090||s7.ns1.svc.cluster.local"));
    }
}
