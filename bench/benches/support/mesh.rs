//! The setups the mesh benchmarks share (`benches/mesh.rs` for wall
//! clock, `benches/icount.rs` for instruction counts): the scenarios'
//! objects, their builds and snapshots, a warm per-core cache, a core with
//! 1,000 streams, and one change from the source to the snapshot.

use std::sync::Arc;
use std::time::Instant;

use istiod_config::objects::Objects;
use istiod_loadgen::scenario::Scenario;
use istiod_mesh::generator::{MeshGenerator, MeshInput};
use istiod_mesh::meshconfig::MeshSettings;
use istiod_mesh::node::{Proxy, ProxyClass};
use istiod_mesh::update;
use istiod_proto::envoy::config::core::v3::Node;
use istiod_proto::envoy::service::discovery::v3::{DiscoveryRequest, DiscoveryResponse};
use istiod_proto::prost::Message;
use istiod_xds::ads::cache::Cache;
use istiod_xds::ads::node::Peer;
use istiod_xds::ads::stream::{AdsStream, Changes, Ctx, Protocol};
use istiod_xds::ads::wire::{self, Encoded};
use istiod_xds::ads::{Kind, SimpleModel, Snapshot};

/// What the control thread builds from one set of objects.
pub(crate) type Built = Arc<MeshInput>;

pub(crate) fn objects(scenario: &str) -> Objects {
    let (name, filters) = match scenario.strip_suffix("+100ef") {
        Some(base) => (base, true),
        None => (scenario, false),
    };
    let s = Scenario::load(name).unwrap();
    let dir = tempfile::tempdir().unwrap();
    istiod_loadgen::mesh::write(&s, dir.path()).unwrap();
    if filters {
        std::fs::write(dir.path().join("envoyfilters.yaml"), envoy_filters(&s)).unwrap();
    }
    istiod_kubewatch::config_dir::load(dir.path()).unwrap().objects
}

/// 100 EnvoyFilters of the kinds meshes carry: in the root namespace,
/// five inbound HTTP filters (Lua before the router) for every proxy,
/// three cluster merges and two virtual host merges on given services;
/// per workload, ninety inbound local rate limits, each selecting one
/// service's pods.
pub(crate) fn envoy_filters(s: &Scenario) -> String {
    use istiod_loadgen::mesh::{PORT, namespace};
    let mut out = String::new();
    let mut doc = |ns: &str, name: &str, selector: Option<String>, patch: String| {
        let selector =
            selector.map(|app| format!("  workloadSelector: {{labels: {{app: {app}}}}}\n")).unwrap_or_default();
        out.push_str(&format!(
            "---\napiVersion: networking.istio.io/v1alpha3\nkind: EnvoyFilter\nmetadata: {{name: {name}, namespace: {ns}}}\nspec:\n{selector}  configPatches:\n{patch}"
        ));
    };
    let lua = |k: u32| {
        format!(
            "  - applyTo: HTTP_FILTER\n    match: {{context: SIDECAR_INBOUND, listener: {{filterChain: {{filter: {{name: envoy.filters.network.http_connection_manager, subFilter: {{name: envoy.filters.http.router}}}}}}}}}}\n    patch: {{operation: INSERT_BEFORE, value: {{name: lua-{k}, typed_config: {{'@type': type.googleapis.com/envoy.extensions.filters.http.lua.v3.Lua, default_source_code: {{inline_string: 'function envoy_on_request(h) end'}}}}}}}}\n"
        )
    };
    for k in 0..5 {
        doc("istio-system", &format!("mesh-lua-{k}"), None, lua(k));
    }
    let host = |i: u32| format!("svc-{i}.{}.svc.cluster.local", namespace(i % s.namespaces));
    for i in 0..3 {
        doc(
            "istio-system",
            &format!("mesh-cluster-{i}"),
            None,
            format!(
                "  - applyTo: CLUSTER\n    match: {{context: SIDECAR_OUTBOUND, cluster: {{service: {}, portNumber: {PORT}}}}}\n    patch: {{operation: MERGE, value: {{connect_timeout: 2s}}}}\n",
                host(i)
            ),
        );
    }
    for i in 0..2 {
        doc(
            "istio-system",
            &format!("mesh-vhost-{i}"),
            None,
            format!(
                "  - applyTo: VIRTUAL_HOST\n    match: {{context: SIDECAR_OUTBOUND, routeConfiguration: {{vhost: {{name: '{}:{PORT}'}}}}}}\n    patch: {{operation: MERGE, value: {{response_headers_to_add: [{{header: {{key: x-mesh, value: '1'}}}}]}}}}\n",
                host(i)
            ),
        );
    }
    for i in 0..90 {
        doc(
            &namespace(i % s.namespaces),
            &format!("ratelimit-{i}"),
            Some(format!("svc-{i}")),
            "  - applyTo: HTTP_FILTER\n    match: {context: SIDECAR_INBOUND, listener: {filterChain: {filter: {name: envoy.filters.network.http_connection_manager}}}}\n    patch: {operation: INSERT_FIRST, value: {name: envoy.filters.http.local_ratelimit, typed_config: {'@type': type.googleapis.com/envoy.extensions.filters.http.local_ratelimit.v3.LocalRateLimit, stat_prefix: rl, token_bucket: {max_tokens: 10, fill_interval: 1s}}}}\n".to_owned(),
        );
    }
    out
}

/// What the cores receive: the engine's model and the generator's input.
pub(crate) type Snap = Snapshot<MeshInput>;

pub(crate) fn snapshot(version: u64, model: SimpleModel, built: &Built) -> Snap {
    let mut snap = Snapshot::new(version, Instant::now(), Arc::new(model));
    snap.mesh = Some(built.clone());
    snap
}

/// istio-perf built as the control thread builds it, its shared
/// resources as the first published model, and that snapshot.
pub(crate) fn istio_perf() -> (Built, SimpleModel, Snap) {
    mesh_of("istio-perf")
}

/// [`istio_perf`] for `scenario`.
pub(crate) fn mesh_of(scenario: &str) -> (Built, SimpleModel, Snap) {
    let built = update::build(&objects(scenario), "cluster.local", &Arc::new(MeshSettings::default()));
    let (model, _) = SimpleModel::default()
        .apply(1, istiod_mesh::translate::diff_maps(&Default::default(), &built.translation.resources));
    let snap = snapshot(1, model.clone(), &built);
    (built, model, snap)
}

/// What a serving core hands its streams when they flush.
pub(crate) fn core_ctx<'a>(
    snap: &'a Snap,
    cache: &'a mut Cache<ProxyClass>,
    nonce: &'a mut dyn FnMut() -> Arc<str>,
    now: Instant,
) -> Ctx<'a, MeshInput, ProxyClass> {
    Ctx { generator: &MeshGenerator, snap, cache, nonce, control_plane: "bench", now }
}

/// A serving core's classification, without interning.
pub(crate) fn identify(node: Option<&Node>) -> Result<(Peer, Arc<ProxyClass>), String> {
    let c = Proxy::classify(node, false)?;
    Ok((c.peer, Arc::new(c.class)))
}

pub(crate) fn class_of(s: &Scenario, i: u32) -> Arc<ProxyClass> {
    Arc::new(Proxy::from_node(Some(&istiod_loadgen::run::node(s, i))).unwrap().class)
}

/// A SotW response of `names` for `class`, through `cache`.
pub(crate) fn response(
    cache: &mut Cache<ProxyClass>,
    snap: &Snap,
    class: &Arc<ProxyClass>,
    kind: Kind,
    names: &[Arc<str>],
) -> istiod_xds::grpc::Chain {
    let got: Vec<Encoded> = names.iter().filter_map(|n| cache.get(&MeshGenerator, snap, class, kind, n)).collect();
    let refs: Vec<&Encoded> = got.iter().collect();
    wire::sotw_response("1", kind.type_url(), "nonce", &refs, "istiod-rs")
}

/// What the `assemble` benchmarks share: the istio-perf snapshot, one
/// sidecar's class, a warm cache and the names of each type.
pub(crate) struct Assemble {
    pub(crate) snap: Snap,
    pub(crate) class: Arc<ProxyClass>,
    pub(crate) warm: Cache<ProxyClass>,
    pub(crate) names: [Vec<Arc<str>>; 4],
}

pub(crate) fn assemble_setup(scenario: &str) -> Assemble {
    let s = Scenario::load("istio-perf").unwrap();
    let (_, _, snap) = mesh_of(scenario);
    let class = class_of(&s, 7);
    let mut warm = Cache::default();
    let clusters = warm.wildcard_names(&MeshGenerator, &snap, &class, Kind::Cluster).to_vec();
    let listeners = warm.wildcard_names(&MeshGenerator, &snap, &class, Kind::Listener).to_vec();
    let endpoints: Vec<Arc<str>> = clusters
        .iter()
        .filter(|n| warm.get(&MeshGenerator, &snap, &class, Kind::Endpoint, n).is_some())
        .cloned()
        .collect();
    let routes = vec![Arc::from(istiod_loadgen::mesh::PORT.to_string())];
    let mut a = Assemble { snap, class, warm, names: [clusters, endpoints, listeners, routes] };
    for kind in
        Kind::ALL.into_iter().filter(|k| matches!(k, Kind::Cluster | Kind::Endpoint | Kind::Listener | Kind::Route))
    {
        let names = a.names[kind as usize].clone();
        response(&mut a.warm, &a.snap, &a.class, kind, &names);
    }
    a
}

/// A serving core's state: 1,000 SotW streams that hold CDS and EDS.
pub(crate) struct Core {
    /// The mesh with one endpoint fewer, and as it was.
    builts: [Built; 2],
    model: SimpleModel,
    cache: Cache<ProxyClass>,
    streams: Vec<AdsStream<ProxyClass>>,
    /// The changes to the one, and back to the other.
    changes: [Vec<istiod_mesh::translate::Change>; 2],
    version: u64,
}

impl Core {
    /// One endpoint change (there, then back on the next call) applied
    /// to the published model and pushed to every stream it concerns, as
    /// a serving core does; returns the bytes pushed.
    pub(crate) fn push_one_change(&mut self, now: Instant, nonce: &mut dyn FnMut() -> Arc<str>) -> usize {
        self.version += 1;
        let which = (self.version % 2) as usize;
        let (next, delta) = self.model.apply(self.version, self.changes[which].clone());
        self.model = next;
        let snap = snapshot(self.version, self.model.clone(), &self.builts[which]);
        let mut ctx = core_ctx(&snap, &mut self.cache, nonce, now);
        let mut bytes = 0;
        let mut pushed = 0;
        let changes = Changes::of(&delta);
        for st in &mut self.streams {
            st.on_delta_update(&changes, now, false);
            if st.is_dirty() {
                pushed += 1;
                bytes += st.flush(&mut ctx).iter().map(|o| o.bytes.len()).sum::<usize>();
            }
        }
        assert!(pushed > 0, "the proxies of the changed service's namespace get a push");
        bytes
    }
}

pub(crate) fn core_setup() -> Core {
    let s = Scenario::load("istio-perf").unwrap();
    let (built, model, snap) = istio_perf();
    let mut cache = Cache::default();
    let mut seq = 0u64;
    let mut nonce = move || -> Arc<str> {
        seq += 1;
        seq.to_string().into()
    };
    let now = Instant::now();
    // 1,000 streams: CDS wildcard, then EDS for their EDS clusters, ACKed.
    let mut streams = Vec::new();
    for i in 0..1000 {
        let mut st = AdsStream::new(Protocol::Sotw, now);
        let node = istiod_loadgen::run::node(&s, i);
        let cds =
            DiscoveryRequest { node: Some(node), type_url: Kind::Cluster.type_url().into(), ..Default::default() };
        st.on_sotw(cds, &mut identify, now).unwrap();
        let mut ctx = core_ctx(&snap, &mut cache, &mut nonce, now);
        let out = st.flush(&mut ctx);
        let r = DiscoveryResponse::decode(out[0].bytes.to_bytes()).unwrap();
        let class = st.class.clone().unwrap();
        let eds: Vec<String> = ctx
            .cache
            .wildcard_names(&MeshGenerator, &snap, &class, Kind::Cluster)
            .iter()
            .filter(|n| model.resources[Kind::Endpoint as usize].contains_key(*n))
            .map(|n| n.to_string())
            .collect();
        let ack = DiscoveryRequest {
            type_url: Kind::Cluster.type_url().into(),
            version_info: r.version_info.clone(),
            response_nonce: r.nonce.clone(),
            ..Default::default()
        };
        st.on_sotw(ack, &mut identify, now).unwrap();
        let req =
            DiscoveryRequest { type_url: Kind::Endpoint.type_url().into(), resource_names: eds, ..Default::default() };
        st.on_sotw(req, &mut identify, now).unwrap();
        let mut ctx = core_ctx(&snap, &mut cache, &mut nonce, now);
        st.flush(&mut ctx);
        streams.push(st);
    }
    let target: Arc<str> = istiod_loadgen::churn::cluster(&s, 0, "").into();
    // The same mesh with one endpoint fewer in the target's service, as the
    // control thread would build it after that EndpointSlice changed.
    let host = target.rsplit('|').next().unwrap().to_owned();
    let mut fewer = (*built.model).clone();
    let svc = Arc::make_mut(fewer.services.get_mut(host.as_str()).unwrap());
    let drop_ip = svc.endpoints[0].address.clone();
    svc.endpoints.retain(|e| e.address != drop_ip);
    let scaled: Built = Arc::new(MeshInput::new(Arc::new(fewer)));
    let changes = [
        istiod_mesh::translate::diff_maps(&built.translation.resources, &scaled.translation.resources),
        istiod_mesh::translate::diff_maps(&scaled.translation.resources, &built.translation.resources),
    ];
    assert!(changes[0].iter().any(|(k, n, _)| *k == Kind::Endpoint && *n == target), "one endpoint fewer");
    Core { builts: [scaled, built], model, cache, streams, changes, version: 1 }
}

/// One change from the source to the snapshot the cores receive: the
/// source's objects compared with the previous ones, the model and
/// translation updated (in place where a fast path takes the change, rebuilt for
/// anything else), the changed names found and applied to the published
/// model. Alternates between two versions of the mesh.
pub(crate) struct Change {
    objs: [Objects; 2],
    /// What the source reports changed (as the config directory does).
    refs: Vec<istiod_config::manifest::ObjectRef>,
    builts: [Built; 2],
    model: SimpleModel,
    version: u64,
    settings: Arc<MeshSettings>,
}

impl Change {
    pub(crate) fn new(scenario: &str, edit: fn(&mut Objects) -> istiod_config::manifest::ObjectRef) -> Change {
        Change::of_many(scenario, |o| vec![edit(o)])
    }

    /// A change of several objects at once (`edit` says which).
    pub(crate) fn of_many(
        scenario: &str,
        edit: impl FnOnce(&mut Objects) -> Vec<istiod_config::manifest::ObjectRef>,
    ) -> Change {
        let settings = Arc::new(MeshSettings::default());
        let a = objects(scenario);
        let mut b = a.clone();
        let refs = edit(&mut b);
        assert!(a != b, "the edit changes something");
        let builts = [update::build(&a, "cluster.local", &settings), update::build(&b, "cluster.local", &settings)];
        let (model, _) = SimpleModel::default()
            .apply(1, istiod_mesh::translate::diff_maps(&Default::default(), &builts[0].translation.resources));
        Change { objs: [a, b], refs, builts, model, version: 1, settings }
    }

    /// Applies the change from the current version to the other; returns
    /// how many names changed and whether the update was incremental.
    pub(crate) fn step(&mut self) -> (usize, bool) {
        let from = (self.version % 2) as usize;
        let to = 1 - from;
        let (next, incremental) = update::update(
            Some(&self.builts[from]),
            &self.objs[to],
            Some(&self.refs),
            "cluster.local",
            &self.settings,
            &Arc::default(),
        );
        let changes =
            istiod_mesh::translate::diff_maps(&self.builts[from].translation.resources, &next.translation.resources);
        let n = changes.len();
        self.version += 1;
        let (model, _delta) = self.model.apply(self.version, changes);
        // Only the base is kept: the next iteration starts from it again.
        let snap = snapshot(self.version, model, &next);
        assert!(snap.version > 0);
        (n, incremental)
    }
}

/// One endpoint fewer in the first EndpointSlice (a scale-down).
pub(crate) fn drop_endpoint(o: &mut Objects) -> istiod_config::manifest::ObjectRef {
    let slice = o.endpoint_slices.iter_mut().find(|s| s.endpoints.len() > 1).expect("a slice with two endpoints");
    slice.endpoints.pop();
    istiod_config::manifest::ObjectRef::of(&istiod_config::manifest::Object::EndpointSlice(slice.clone()))
}

/// The first VirtualService's first weighted destination shifted by one.
pub(crate) fn shift_weight(o: &mut Objects) -> istiod_config::manifest::ObjectRef {
    use istiod_config::istio::IstioSpec;
    let obj = o
        .istio
        .iter_mut()
        .find(
            |x| matches!(&x.spec, IstioSpec::VirtualService(vs) if vs.http.first().is_some_and(|r| r.route.len() > 1)),
        )
        .expect("a VirtualService with a weighted route");
    if let IstioSpec::VirtualService(vs) = &mut obj.spec {
        let r = &mut vs.http[0].route;
        r[0].weight -= 1;
        r[1].weight += 1;
    }
    istiod_config::manifest::ObjectRef::of(&istiod_config::manifest::Object::Istio(obj.clone()))
}

/// The first Service with a cluster IP gets another address (a new VIP:
/// its listeners, virtual hosts and scoping change, not only endpoints).
pub(crate) fn readdress_service(o: &mut Objects) -> istiod_config::manifest::ObjectRef {
    let svc = o
        .services
        .iter_mut()
        .find(|s| s.spec.cluster_ip.as_deref().is_some_and(|ip| ip != "None"))
        .expect("a Service with a cluster IP");
    svc.spec.cluster_ip = Some("10.255.255.254".into());
    svc.spec.cluster_ips = vec!["10.255.255.254".into()];
    istiod_config::manifest::ObjectRef::of(&istiod_config::manifest::Object::Service(svc.clone()))
}

/// A Helm install of one app (a mixed change): its Service, ten Pods, their
/// EndpointSlice, a DestinationRule with two subsets and a VirtualService
/// splitting between them, in the first namespace.
pub(crate) fn install_app(o: &mut Objects) -> Vec<istiod_config::manifest::ObjectRef> {
    use std::fmt::Write;
    let ns = o.services.first().expect("a Service").metadata.ns().to_owned();
    let mut yaml = format!(
        "apiVersion: v1\nkind: Service\nmetadata: {{name: helm-app, namespace: {ns}}}\n\
         spec: {{clusterIP: 10.255.255.253, ports: [{{name: http, port: 8080}}], selector: {{app: helm-app}}}}\n"
    );
    let mut endpoints = String::new();
    for k in 0..10u32 {
        let version = if k.is_multiple_of(2) { "v1" } else { "v2" };
        let _ = write!(
            yaml,
            "---\napiVersion: v1\nkind: Pod\nmetadata: {{name: helm-app-{k}, namespace: {ns}, \
             labels: {{app: helm-app, version: {version}, security.istio.io/tlsMode: istio}}}}\n\
             spec: {{serviceAccountName: helm-app}}\nstatus: {{podIP: 10.255.254.{k}}}\n"
        );
        let _ = writeln!(
            endpoints,
            "- {{addresses: [10.255.254.{k}], conditions: {{ready: true}}, targetRef: {{kind: Pod, name: helm-app-{k}, namespace: {ns}}}}}"
        );
    }
    let _ = write!(
        yaml,
        "---\napiVersion: discovery.k8s.io/v1\nkind: EndpointSlice\nmetadata: {{name: helm-app-1, namespace: {ns}, \
         labels: {{kubernetes.io/service-name: helm-app}}}}\naddressType: IPv4\nports: [{{name: http, port: 8080}}]\n\
         endpoints:\n{endpoints}\
         ---\napiVersion: networking.istio.io/v1\nkind: DestinationRule\nmetadata: {{name: helm-app, namespace: {ns}}}\n\
         spec: {{host: helm-app, subsets: [{{name: v1, labels: {{version: v1}}}}, {{name: v2, labels: {{version: v2}}}}]}}\n\
         ---\napiVersion: networking.istio.io/v1\nkind: VirtualService\nmetadata: {{name: helm-app, namespace: {ns}}}\n\
         spec: {{hosts: [helm-app], http: [{{route: [{{destination: {{host: helm-app, subset: v1}}, weight: 90}}, \
         {{destination: {{host: helm-app, subset: v2}}, weight: 10}}]}}]}}\n"
    );
    istiod_mesh::testing::add(o, &yaml)
}
