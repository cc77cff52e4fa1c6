//! What a config change will do, before it is applied (`/debug/whatif`,
//! and `istio.io/debug` naming `whatif?config=...` over xDS).
//!
//! A question is one or more Kubernetes or Istio objects (YAML or JSON,
//! as `kubectl apply --dry-run` sends them) to create or replace, or with
//! `?delete=true` to delete. Each is judged as the validation webhook
//! judges it (`/validate`, istiod's words); an invalid one refuses the
//! whole question (400). Otherwise the answer is computed off the control
//! thread, on a copy of the objects the model was built from and of the
//! snapshot the cores serve: the model is updated as the source's change
//! would update it (`istiod_mesh::update`), and for every class of proxy
//! (the connected ones, and the pods not connected, as the sidecars or
//! gateways they would be) the change's delta (what the cores would be
//! sent: `sources::touched_names` and the shared resources that change)
//! is compared, before and after, with the same generator the cores serve
//! from. A resource whose input generation did not move is not generated
//! again (the generation is the cores' cache key: the same generation is
//! the same bytes); a type with nothing in the delta is not looked at;
//! names that do not read the whole class are compared once per reduced
//! class.
//!
//! The answer says, per class reached: its proxies and pods, and by type
//! the resources added, removed and changed, with a line diff of each
//! changed one as a config dump renders it (proto3 JSON). Classes are
//! paged (`ISTIOD_RS_WHATIF_MAX_CLASSES` per page, `?page=`); the counts
//! cover them all. Warnings: istiod's analysis messages that the change
//! brings (or that its objects carry), and, when nobody's configuration
//! changes, why that may be (a selector matching no pod, a host no service
//! has, an `exportTo` hiding the object). What is served does not change.
//!
//! Every type is predicted: secrets and extension configs by the names the
//! class's listeners and clusters give; ambient by applying the change to
//! a copy of the ambient index (ztunnels' workloads, services and
//! policies, and the waypoint bindings waypoint proxies read). Not
//! predicted: remote clusters' objects (taken as they are).

pub mod client;
mod diff;

use std::collections::{BTreeMap, BTreeSet, HashMap};
use std::sync::Arc;
use std::time::Instant;

use bytes::Bytes;
use istiod_config::manifest::{Object, ObjectRef};
use istiod_config::objects::Objects;
use istiod_mesh::generator::MeshInput;
use istiod_mesh::node::{NodeType, ProxyClass};
use istiod_proto::prost::{Message, Name};
pub use istiod_webhook::question::{Asked, Refused, judge};
use istiod_xds::ads::{Kind, Snapshot};
use istiod_xds_api::snapshot::Generator;
use serde_json::{Value, json};

use crate::control::http::{Request, Response};

/// The generator the cores serve with.
const GENERATOR: istiod_waypoint::generator::WithWaypoints = istiod_waypoint::generator::WithWaypoints;

/// How long a question may compare classes: past it, the rest are left
/// out and the answer says so (the debug port answers within 30 s).
const MAX_COMPARING: std::time::Duration = std::time::Duration::from_secs(20);

/// Names listed per class, type and change (added, removed, changed), at
/// most; `counts` has them all.
const MAX_NAMES: usize = 100;

/// Lines of a changed resource's diff shown, at most.
const MAX_DIFF_LINES: usize = 400;

/// The types compared: every type istiod serves (by name, those its
/// listeners and clusters name).
const KINDS: [Kind; 10] = [
    Kind::Cluster,
    Kind::Endpoint,
    Kind::Listener,
    Kind::Route,
    Kind::Secret,
    Kind::ExtensionConfig,
    Kind::Address,
    Kind::Authorization,
    Kind::NameTable,
    Kind::ProxyConfig,
];

/// What a prediction reads of the running server.
pub struct World {
    /// The objects the served model was built from.
    pub objects: Arc<Objects>,
    /// The snapshot the cores serve.
    pub snapshot: Arc<Snapshot<MeshInput>>,
    /// `--domain`.
    pub domain: String,
    /// `CLUSTER_ID` (pods' classes carry it, as their injected proxies).
    pub cluster_id: String,
    /// The connected proxies: id and class.
    pub connected: Vec<(String, ProxyClass)>,
    /// The one namespace the caller may see (debug callers limited to
    /// theirs).
    pub namespace: Option<String>,
    /// The source is filtered by the mesh's `discoverySelectors`
    /// (Kubernetes).
    pub namespace_filter: bool,
    /// The ambient index the served snapshot was built with
    /// (`PILOT_ENABLE_AMBIENT`), taken (and let go of) once copied: while
    /// it is held, a change the control thread applies copies it there.
    /// With the names it is built with that come from the flags (those of
    /// the mesh are the served model's).
    pub ambient: Option<(std::sync::Mutex<Option<Arc<istiod_ambient::Index>>>, istiod_ambient::Settings)>,
}

/// How much of the answer to render.
#[derive(Debug, Clone, Copy)]
pub struct Page {
    /// Classes per page.
    pub size: usize,
    /// Which page (from 0).
    pub index: usize,
    /// Render diffs of changed resources.
    pub diffs: bool,
}

/// What one class would see change, by type.
#[derive(Debug, Default, Clone, PartialEq)]
pub struct ClassChanges {
    /// By type: names added, removed, and changed with their bytes before
    /// and after.
    pub kinds: BTreeMap<Kind, KindChanges>,
}

/// One type's changes for one class.
#[derive(Debug, Default, Clone, PartialEq)]
pub struct KindChanges {
    /// Names served after and not before.
    pub added: Vec<Arc<str>>,
    /// Names served before and not after.
    pub removed: Vec<Arc<str>>,
    /// Names served both times, with different bytes: (name, before, after).
    pub changed: Vec<(Arc<str>, Bytes, Bytes)>,
}

impl KindChanges {
    fn is_empty(&self) -> bool {
        self.added.is_empty() && self.removed.is_empty() && self.changed.is_empty()
    }
}

/// One class the question considers: who has it, and what changes.
#[derive(Debug, Clone)]
pub struct Reached {
    /// The class.
    pub class: ProxyClass,
    /// Connected proxies of the class.
    pub proxies: Vec<String>,
    /// Pods of the class without a connected proxy (`name.namespace`).
    pub pods: Vec<String>,
    /// What changes.
    pub changes: ClassChanges,
}

/// The server after the change, and what the change was.
pub struct After {
    /// The snapshot the cores would serve.
    pub snapshot: Arc<Snapshot<MeshInput>>,
    /// The snapshot the cores serve, generating as `snapshot` does (asking
    /// the API server nothing).
    pub before: Arc<Snapshot<MeshInput>>,
    /// The objects.
    pub objects: Objects,
    /// What each asked object did: `created`, `updated`, `unchanged`,
    /// `deleted` or `not found`.
    pub operations: Vec<&'static str>,
    /// The resources that may have changed (the cores' delta).
    pub delta: Delta,
}

/// Applies the asked objects to a copy of the world's objects and builds
/// the snapshot that would follow.
pub fn apply(world: &World, asked: &[Asked]) -> Option<After> {
    let prev = world.snapshot.mesh.clone()?;
    let mut objects = (*world.objects).clone();
    let mut refs = Vec::new();
    let mut operations = Vec::new();
    for a in asked {
        if !a.read {
            operations.push("not read");
            continue;
        }
        let op = match &a.object {
            Some(o) => {
                refs.push(a.head.clone());
                // A slice moved to another Service: the one it leaves too.
                if let Object::EndpointSlice(new) = o
                    && let Some(old) = objects
                        .endpoint_slices
                        .iter()
                        .find(|x| x.metadata.ns() == new.metadata.ns() && x.metadata.name == new.metadata.name)
                    && old.service_name() != new.service_name()
                {
                    refs.push(ObjectRef::of(&Object::EndpointSlice(old.clone())));
                }
                replace(&mut objects, o.clone())
            }
            None => {
                // The removed object's own reference (an EndpointSlice's
                // names its Service).
                let (op, removed) = remove(&mut objects, &a.head);
                refs.push(removed.unwrap_or_else(|| a.head.clone()));
                op
            }
        };
        operations.push(op);
    }
    let settings = prev.model.mesh.clone();
    // As the source reads them: outside the discovery selectors, nothing.
    if world.namespace_filter {
        super::sources::discovery_filter(&mut objects, Some(&mut refs), &settings);
    }
    refs.sort();
    refs.dedup();
    let (mut next, _) =
        istiod_mesh::update::update(Some(&prev), &objects, Some(&refs), &world.domain, &settings, &prev.model.jwks);
    // Both sides generate with a copy of the API server's answers on who
    // may read Secrets that asks nothing: a prediction makes no request.
    let quiet = Arc::new(prev.model.secret_access.quiet());
    next = Arc::new(next.with_secret_access(quiet.clone()));
    let mut before = Snapshot::new(world.snapshot.version, world.snapshot.changed_at, world.snapshot.model.clone());
    before.mesh = Some(Arc::new(prev.with_secret_access(quiet)));
    // Ambient: the change applied to a copy of the index, as the source
    // applies it (ztunnels' workloads, services and policies; the waypoint
    // bindings waypoint proxies read).
    let mut ambient = Vec::new();
    match &world.ambient {
        // (Taken: a world is applied once; were it applied again, its
        // bindings would stay as they are.)
        Some((index, names)) if let Some(taken) = index.lock().unwrap_or_else(|e| e.into_inner()).take() => {
            // Copied, and let go of: the control thread then changes its
            // own in place again (the copy is this prediction's own where
            // the control thread has copied it since).
            let mut index = Arc::unwrap_or_clone(taken);
            // As the served model was built: its mesh settings.
            let settings = istiod_ambient::Settings {
                domain: world.domain.clone(),
                trust_domain: settings.trust_domain.clone(),
                root_namespace: settings.root_namespace.clone(),
                ..names.clone()
            };
            ambient = index.apply(&objects, Some(&refs), &settings);
            next = super::sources::with_waypoints(next, &index);
        }
        // Without an index the bindings stay what they are.
        _ if next.waypoints != prev.waypoints
            || next.ingress_waypoints != prev.ingress_waypoints
            || next.waypoint_workloads != prev.waypoint_workloads =>
        {
            let mut with = (*next).clone();
            with.waypoints = prev.waypoints.clone();
            with.ingress_waypoints = prev.ingress_waypoints.clone();
            with.waypoint_workloads = prev.waypoint_workloads.clone();
            next = Arc::new(with);
        }
        _ => {}
    }
    let mut changes = istiod_mesh::translate::diff_maps(&prev.translation.resources, &next.translation.resources);
    changes.extend(ambient);
    let mut delta = Delta::new();
    let touched = super::sources::touched_names(Some(&prev), &next, &changes);
    for (kind, name) in changes.iter().map(|(k, n, _)| (*k, n.clone())).chain(touched) {
        delta.entry(kind).or_default().insert(name);
    }
    let version = world.snapshot.version + 1;
    let (model, _) = world.snapshot.model.apply(version, changes);
    let mut snap = Snapshot::new(version, Instant::now(), Arc::new(model));
    snap.mesh = Some(next);
    Some(After { snapshot: Arc::new(snap), before: Arc::new(before), objects, operations, delta })
}

/// Puts `o` in place of the element `is` finds, or adds it.
fn put<T: PartialEq>(list: &mut Vec<T>, o: T, is: impl Fn(&T) -> bool) -> &'static str {
    match list.iter().position(is) {
        Some(i) if list[i] == o => "unchanged",
        Some(i) => {
            list[i] = o;
            "updated"
        }
        None => {
            list.push(o);
            "created"
        }
    }
}

/// Puts `obj` in place of the object it names, or adds it.
fn replace(objects: &mut Objects, obj: Object) -> &'static str {
    let r = ObjectRef::of(&obj);
    let m = |meta: &istiod_config::meta::Meta| meta.ns() == r.namespace && meta.name == r.name;
    match obj {
        Object::Service(o) => put(&mut objects.services, o, |x| m(&x.metadata)),
        Object::EndpointSlice(o) => put(&mut objects.endpoint_slices, o, |x| m(&x.metadata)),
        Object::Pod(o) => put(&mut objects.pods, o, |x| m(&x.metadata)),
        Object::Node(o) => put(&mut objects.nodes, o, |x| m(&x.metadata)),
        Object::Namespace(o) => put(&mut objects.namespaces, o, |x| m(&x.metadata)),
        Object::Secret(o) => put(&mut objects.secrets, o, |x| m(&x.metadata)),
        Object::Ingress(o) => put(&mut objects.ingresses, o, |x| m(&x.metadata)),
        Object::IngressClass(o) => put(&mut objects.ingress_classes, o, |x| m(&x.metadata)),
        Object::ConfigMap(o) => put(&mut objects.config_maps, o, |x| m(&x.metadata)),
        Object::GatewayApi(o) => {
            let kind = o.kind();
            put(&mut objects.gateway_api, o, |x| x.kind() == kind && m(&x.meta))
        }
        Object::Istio(o) => {
            let kind = o.kind();
            put(&mut objects.istio, o, |x| x.kind() == kind && m(&x.meta))
        }
        Object::Skipped(_) => "unchanged",
    }
}

/// Removes the object `r` names; with its own reference when it was
/// there.
fn remove(objects: &mut Objects, r: &ObjectRef) -> (&'static str, Option<ObjectRef>) {
    let m = |meta: &istiod_config::meta::Meta| meta.ns() == r.namespace && meta.name == r.name;
    fn drop_where<T>(list: &mut Vec<T>, is: impl Fn(&T) -> bool) -> bool {
        let before = list.len();
        list.retain(|x| !is(x));
        before != list.len()
    }
    if r.kind == "EndpointSlice"
        && let Some(i) = objects.endpoint_slices.iter().position(|x| m(&x.metadata))
    {
        let slice = objects.endpoint_slices.remove(i);
        return ("deleted", Some(ObjectRef::of(&Object::EndpointSlice(slice))));
    }
    let removed = match r.kind.as_str() {
        "Service" => drop_where(&mut objects.services, |x| m(&x.metadata)),
        "EndpointSlice" => drop_where(&mut objects.endpoint_slices, |x| m(&x.metadata)),
        "Pod" => drop_where(&mut objects.pods, |x| m(&x.metadata)),
        "Node" => drop_where(&mut objects.nodes, |x| m(&x.metadata)),
        "Namespace" => drop_where(&mut objects.namespaces, |x| m(&x.metadata)),
        "Secret" => drop_where(&mut objects.secrets, |x| m(&x.metadata)),
        "Ingress" => drop_where(&mut objects.ingresses, |x| m(&x.metadata)),
        "IngressClass" => drop_where(&mut objects.ingress_classes, |x| m(&x.metadata)),
        "ConfigMap" => drop_where(&mut objects.config_maps, |x| m(&x.metadata)),
        k => match k.strip_suffix(istiod_config::gateway_api::GROUP).and_then(|k| k.strip_suffix('.')) {
            Some(kind) => drop_where(&mut objects.gateway_api, |x| x.kind() == kind && m(&x.meta)),
            None => drop_where(&mut objects.istio, |x| x.kind().name() == k && m(&x.meta)),
        },
    };
    if removed { ("deleted", Some(r.clone())) } else { ("not found", None) }
}

/// The classes to compare: the connected proxies', then the pods' that no
/// connected proxy stands for (as the sidecar, or the gateway a Gateway
/// selects, each would run), one class per namespace, labels and service
/// account. Pods of `objects` before and after the change.
pub fn classes(world: &World, after: &Objects) -> Vec<Reached> {
    let mut out: Vec<Reached> = Vec::new();
    let mut index: HashMap<ProxyClass, usize> = HashMap::new();
    let visible = |ns: &str| world.namespace.as_deref().is_none_or(|n| n == ns);
    for (id, class) in &world.connected {
        if !visible(&class.namespace) {
            continue;
        }
        let i = *index.entry(class.clone()).or_insert_with(|| {
            out.push(Reached {
                class: class.clone(),
                proxies: Vec::new(),
                pods: Vec::new(),
                changes: Default::default(),
            });
            out.len() - 1
        });
        out[i].proxies.push(id.clone());
    }
    // `pod.namespace` of the connected proxies (the node id's third field;
    // a namespace has no dot).
    let connected: std::collections::HashSet<(&str, &str)> =
        world.connected.iter().filter_map(|(id, _)| id.split('~').nth(2)?.rsplit_once('.')).collect();
    let selectors: Vec<&BTreeMap<String, String>> = after
        .istio
        .iter()
        .chain(&world.objects.istio)
        .filter_map(|o| match &o.spec {
            istiod_config::istio::IstioSpec::Gateway(g) if !g.selector.is_empty() => Some(&g.selector),
            _ => None,
        })
        .collect();
    // (type, namespace, labels, service account) -> the class's place.
    type PodKey<'a> = (NodeType, &'a str, &'a BTreeMap<String, String>, &'a str);
    let mut by_key: HashMap<PodKey<'_>, usize> = HashMap::new();
    let mut seen = std::collections::HashSet::new();
    // Namespaces before and after, and the pods before.
    let before_pods: HashMap<(&str, &str), &istiod_config::objects::Pod> =
        world.objects.pods.iter().map(|p| ((p.metadata.name.as_str(), p.metadata.ns()), p)).collect();
    type Namespaces<'a> = HashMap<&'a str, &'a istiod_config::objects::Namespace>;
    fn by_name(o: &Objects) -> Namespaces<'_> {
        o.namespaces.iter().map(|n| (n.metadata.name.as_str(), n)).collect()
    }
    let (ns_before, ns_after) = (by_name(&world.objects), by_name(after));
    for pod in after.pods.iter().chain(&world.objects.pods) {
        let ns = pod.metadata.ns();
        let at = (pod.metadata.name.as_str(), ns);
        if !visible(ns) || pod.spec.host_network || connected.contains(&at) || !seen.insert(at) {
            continue;
        }
        let Some(ip) = pod.status.pod_ip.clone().filter(|ip| !ip.is_empty()) else { continue };
        let labels = &pod.metadata.labels;
        let router = labels.contains_key("gateway.networking.k8s.io/gateway-name")
            || selectors.iter().any(|s| s.iter().all(|(k, v)| labels.get(k) == Some(v)));
        // A pod that was there runs what its namespace gave it then (a
        // sidecar stays until the pod restarts); one the question creates
        // or changes, what its namespace gives it after.
        let was_there = before_pods.get(&at).is_some_and(|old| *old == pod);
        let namespaces = if was_there { &ns_before } else { &ns_after };
        if !runs_proxy(pod, namespaces.get(ns).copied(), router) {
            continue;
        }
        let node_type = if router { NodeType::Router } else { NodeType::Sidecar };
        let sa = pod.spec.service_account_name.as_deref().unwrap_or("default");
        let name = format!("{}.{ns}", pod.metadata.name);
        let key = (node_type, ns, labels, sa);
        if let Some(i) = by_key.get(&key) {
            out[*i].pods.push(name);
            continue;
        }
        let class = ProxyClass {
            node_type,
            namespace: ns.into(),
            generator: "".into(),
            labels: labels.iter().map(|(k, v)| (Arc::from(k.as_str()), Arc::from(v.as_str()))).collect(),
            locality: "".into(),
            // Its proxy would connect with the pod's identity.
            verified: true,
            service_account: sa.into(),
            ips: vec![ip.into()],
            mesh_id: "".into(),
            cluster_id: world.cluster_id.as_str().into(),
            version: "".into(),
            metadata: Vec::new(),
        };
        by_key.insert(key, out.len());
        out.push(Reached { class, proxies: Vec::new(), pods: vec![name], changes: Default::default() });
    }
    out
}

/// Whether `pod` (of namespace `ns`) may run a proxy, unless something
/// says it runs none: ztunnel captures it (ambient: what it changes
/// reaches the ztunnels), injection is turned off for it or its namespace
/// (a gateway's, `router`, is not injected: its deployment names the
/// proxy, and turns injection off), or it has finished. (Pods are
/// otherwise taken to be injected: a configuration directory lists them
/// without the injected container.)
fn runs_proxy(pod: &istiod_config::objects::Pod, ns: Option<&istiod_config::objects::Namespace>, router: bool) -> bool {
    let (labels, annotations) = (&pod.metadata.labels, &pod.metadata.annotations);
    let ns_labels = ns.map(|n| &n.metadata.labels);
    let ns_label = |k: &str| ns_labels.and_then(|l| l.get(k)).map(String::as_str);
    let captured = annotations.get(istiod_ambient::workload::REDIRECTION).is_some_and(|v| v == "enabled")
        || match labels.get("istio.io/dataplane-mode").map(String::as_str) {
            Some(mode) => mode == "ambient",
            None => ns_label("istio.io/dataplane-mode") == Some("ambient"),
        };
    let off = |v: Option<&String>| v.is_some_and(|v| v == "false");
    let not_injected = !router
        && (off(labels.get("sidecar.istio.io/inject"))
            || off(annotations.get("sidecar.istio.io/inject"))
            || ns_label("istio-injection") == Some("disabled"));
    let finished = matches!(pod.status.phase.as_deref(), Some("Succeeded" | "Failed"));
    !(captured && !router || not_injected || finished)
}

#[cfg(test)]
mod redact_tests {
    use serde_json::json;

    /// The pull secret sits in the Wasm VM's environment, a map in the
    /// extension config's JSON; every field of that name goes.
    #[test]
    fn a_pull_secret_is_redacted_at_any_depth() {
        let mut v = json!({"typedConfig": {"config": {"vmConfig": {"environmentVariables": {"keyValues": {
            "ISTIO_META_WASM_IMAGE_PULL_SECRET": "{\"auths\":{\"x\":{\"auth\":\"dG9rZW4=\"}}}",
            "ISTIO_META_WASM_IMAGE_PULL_POLICY": "Always"}}}}}, "list": [{"ISTIO_META_WASM_IMAGE_PULL_SECRET": "x"}]});
        super::redact_key(&mut v, istiod_mesh::translate::extensions::PULL_SECRET_ENV);
        let env = &v["typedConfig"]["config"]["vmConfig"]["environmentVariables"]["keyValues"];
        assert_eq!(env["ISTIO_META_WASM_IMAGE_PULL_SECRET"], "[redacted]");
        assert_eq!(env["ISTIO_META_WASM_IMAGE_PULL_POLICY"], "Always");
        assert_eq!(v["list"][0]["ISTIO_META_WASM_IMAGE_PULL_SECRET"], "[redacted]");
        assert!(!v.to_string().contains("dG9rZW4="));
    }
}

#[cfg(test)]
mod runs_proxy_tests {
    use super::runs_proxy;
    use istiod_config::objects::{Namespace, Pod};

    fn pod(meta: &str) -> Pod {
        serde_yaml_ng::from_str(&format!("metadata: {{name: p, namespace: n{meta}}}\nstatus: {{phase: Running}}"))
            .unwrap()
    }

    fn ns(labels: &str) -> Namespace {
        serde_yaml_ng::from_str(&format!("metadata: {{name: n, labels: {{{labels}}}}}")).unwrap()
    }

    #[test]
    fn pods_without_a_proxy_are_known_by_what_says_so() {
        assert!(runs_proxy(&pod(""), None, false));
        assert!(runs_proxy(&pod(""), Some(&ns("istio-injection: enabled")), false));
        assert!(!runs_proxy(&pod(", annotations: {ambient.istio.io/redirection: enabled}"), None, false));
        assert!(!runs_proxy(&pod(""), Some(&ns("istio.io/dataplane-mode: ambient")), false));
        assert!(runs_proxy(
            &pod(", labels: {istio.io/dataplane-mode: none}"),
            Some(&ns("istio.io/dataplane-mode: ambient")),
            false
        ));
        assert!(!runs_proxy(&pod(", labels: {sidecar.istio.io/inject: 'false'}"), None, false));
        assert!(!runs_proxy(&pod(", annotations: {sidecar.istio.io/inject: 'false'}"), None, false));
        assert!(!runs_proxy(&pod(""), Some(&ns("istio-injection: disabled")), false));
        // A gateway's deployment turns injection off and names the proxy.
        let gateway = pod(", labels: {sidecar.istio.io/inject: 'false', gateway.networking.k8s.io/gateway-name: gw}");
        assert!(runs_proxy(&gateway, Some(&ns("istio.io/dataplane-mode: ambient")), true));
        let mut done = pod("");
        done.status.phase = Some("Succeeded".into());
        assert!(!runs_proxy(&done, None, false));
    }
}

/// What a comparison remembers across classes, keyed as the cores' cache
/// keys it (so two classes that share an entry there share one here): a
/// resource's bytes by (type, name, input generation, the class the cores
/// key it by); a class's reduction per type; the wildcard names shared by
/// a reduced class; the names of the types served by name a class's
/// listeners and clusters name. Each on both sides (`false` before, `true` after).
#[derive(Default)]
struct Memo {
    bodies: HashMap<BodyKey, Option<Bytes>>,
    /// By the class being compared (its index), type and side.
    reduced: HashMap<(usize, Kind, bool), Option<ProxyClass>>,
    /// The class being compared.
    current: usize,
    shared: HashMap<(Kind, ProxyClass, bool), NameSet>,
    /// The names of a type served by name a class's listeners (and
    /// clusters) name, by type, class (reduced, for routes) and side.
    named: HashMap<(Kind, ProxyClass, bool), NameSet>,
    /// What each listener and cluster names, as [`Memo::body`] keys it,
    /// and by its bytes (classes with different keys often share them).
    refs: HashMap<BodyKey, Arc<Refs>>,
    refs_by_body: HashMap<(Kind, Bytes), Arc<Refs>>,
    /// Whether the model has extension configs, before or after.
    extensions: Option<bool>,
    /// The changes of the names that do not read the whole class, by
    /// type and the reductions that decide them.
    compared: HashMap<(Kind, Vec<ProxyClass>), Arc<KindChanges>>,
}

/// (type, name, input generation, the class the cores key it by, side).
type BodyKey = (Kind, Arc<str>, u64, ProxyClass, bool);

/// A set of names, shared.
type NameSet = Arc<BTreeSet<Arc<str>>>;

/// One side of the comparison.
struct Side<'a> {
    snap: &'a Snapshot<MeshInput>,
    after: bool,
}

/// A class's wildcard names of one type: the part its reduced class
/// shares, and its own.
struct Names {
    shared: Arc<BTreeSet<Arc<str>>>,
    own: BTreeSet<Arc<str>>,
}

impl Names {
    fn contains(&self, name: &str) -> bool {
        self.shared.contains(name) || self.own.contains(name)
    }
}

impl Memo {
    /// `reduce` of `class` for `kind` (`None`: the whole class matters).
    fn reduced(&mut self, side: &Side<'_>, class: &ProxyClass, kind: Kind) -> Option<ProxyClass> {
        self.reduced
            .entry((self.current, kind, side.after))
            .or_insert_with(|| GENERATOR.reduce(side.snap, class, kind))
            .clone()
    }

    fn key_class(&mut self, side: &Side<'_>, class: &ProxyClass, kind: Kind, name: &str) -> ProxyClass {
        if GENERATOR.whole_class(kind, name) {
            return class.clone();
        }
        self.reduced(side, class, kind).unwrap_or_else(|| class.clone())
    }

    fn body(
        &mut self,
        side: &Side<'_>,
        class: &ProxyClass,
        kind: Kind,
        name: &Arc<str>,
        generation: u64,
    ) -> Option<Bytes> {
        let key_class = self.key_class(side, class, kind, name);
        self.bodies
            .entry((kind, name.clone(), generation, key_class, side.after))
            .or_insert_with(|| GENERATOR.generate(side.snap, class, kind, name))
            .clone()
    }

    /// The wildcard names of `kind` a proxy of `class` is served, as the
    /// cores' cache finds them (`Cache::wildcard_names`).
    fn wildcard(&mut self, side: &Side<'_>, class: &ProxyClass, kind: Kind) -> Names {
        match self.reduced(side, class, kind) {
            None => Names {
                shared: Arc::default(),
                own: GENERATOR.wildcard_names(side.snap, class, kind).into_iter().collect(),
            },
            Some(reduced) => Names {
                shared: self.shared_set(side, reduced, kind),
                own: GENERATOR.class_wildcard_names(side.snap, class, kind).into_iter().collect(),
            },
        }
    }

    /// The wildcard names of `kind` that `reduced` shares.
    fn shared_set(&mut self, side: &Side<'_>, reduced: ProxyClass, kind: Kind) -> NameSet {
        let snap = side.snap;
        self.shared
            .entry((kind, reduced, side.after))
            .or_insert_with_key(|(_, r, _)| {
                Arc::new(GENERATOR.shared_wildcard_names(snap, r, kind).into_iter().collect())
            })
            .clone()
    }

    /// The wildcard names of `kind` a reduced class shares, without the
    /// class's own.
    fn shared_only(&mut self, side: &Side<'_>, class: &ProxyClass, kind: Kind) -> Names {
        match self.reduced(side, class, kind) {
            None => self.wildcard(side, class, kind),
            Some(reduced) => Names { shared: self.shared_set(side, reduced, kind), own: BTreeSet::new() },
        }
    }

    /// The names of `kind` (a type served by name) the listeners, and for
    /// secrets the clusters, of `class` name. Route configurations: of
    /// the reduced class's listeners (those that depend on the whole
    /// class, inbound, carry their routes inline). Secrets and extension
    /// configs: of every listener and cluster of the class.
    fn named(&mut self, side: &Side<'_>, class: &ProxyClass, kind: Kind) -> NameSet {
        let key = match kind {
            Kind::Route => self.reduced(side, class, Kind::Listener).unwrap_or_else(|| class.clone()),
            _ => class.clone(),
        };
        if let Some(r) = self.named.get(&(kind, key.clone(), side.after)) {
            return r.clone();
        }
        let mut out = BTreeSet::new();
        for &by in deciding(kind) {
            let served = self.wildcard(side, class, by);
            for name in served.shared.iter().chain(&served.own) {
                if kind == Kind::Route && GENERATOR.whole_class(by, name) {
                    continue;
                }
                if let Some(refs) = self.refs(side, class, by, name) {
                    out.extend(refs.of(kind).iter().cloned());
                }
            }
        }
        let out = Arc::new(out);
        self.named.insert((kind, key, side.after), out.clone());
        out
    }

    /// Whether the secrets or extension configs (`kind`) `class` is
    /// served may change by its listeners and clusters naming others:
    /// secrets are credentials of verified gateways (a sidecar's ConfigMap
    /// CA, a BackendTLSPolicy's, is predicted when it changes, not when a
    /// sidecar comes to name one); extension configs exist only with
    /// WasmPlugins or EnvoyFilters that add them.
    fn may_name(&mut self, b: &Side<'_>, a: &Side<'_>, class: &ProxyClass, kind: Kind) -> bool {
        match kind {
            Kind::Secret => class.verified && class.node_type == NodeType::Router,
            Kind::ExtensionConfig => *self.extensions.get_or_insert_with(|| {
                [b, a].iter().any(|side| {
                    side.snap
                        .mesh
                        .as_ref()
                        .is_some_and(|m| !istiod_mesh::generator::extensions::all_names(&m.model).is_empty())
                })
            }),
            _ => true,
        }
    }

    /// What listener or cluster `name` of `class` names on `side` (`None`:
    /// the class is not served it).
    fn refs(&mut self, side: &Side<'_>, class: &ProxyClass, kind: Kind, name: &Arc<str>) -> Option<Arc<Refs>> {
        let g = GENERATOR.input_generation(side.snap, class, kind, name)?;
        let key = (kind, name.clone(), g, self.key_class(side, class, kind, name), side.after);
        if let Some(r) = self.refs.get(&key) {
            return Some(r.clone());
        }
        let body = self.body(side, class, kind, name, g)?;
        let refs = self
            .refs_by_body
            .entry((kind, body))
            .or_insert_with_key(|(k, b)| Arc::new(Refs::of_resource(*k, b)))
            .clone();
        self.refs.insert(key, refs.clone());
        Some(refs)
    }
}

/// What a listener or cluster names of the types served by name.
#[derive(Debug, Default, PartialEq)]
struct Refs {
    /// Route configurations (an HTTP connection manager's RDS).
    routes: Vec<Arc<str>>,
    /// Secrets (its TLS contexts' SDS configs).
    secrets: Vec<Arc<str>>,
    /// Extension configs (filters configured by discovery: ECDS).
    extensions: Vec<Arc<str>>,
}

impl Refs {
    fn of(&self, kind: Kind) -> &[Arc<str>] {
        match kind {
            Kind::Route => &self.routes,
            Kind::Secret => &self.secrets,
            Kind::ExtensionConfig => &self.extensions,
            _ => &[],
        }
    }

    /// The names an encoded listener or cluster holds (nothing for what
    /// does not decode).
    fn of_resource(kind: Kind, body: &Bytes) -> Refs {
        use istiod_proto::envoy::config::cluster::v3::Cluster;
        use istiod_proto::envoy::config::core::v3::{TransportSocket, transport_socket};
        use istiod_proto::envoy::config::listener::v3::{Listener, filter, listener_filter};
        use istiod_proto::envoy::extensions::filters::network::http_connection_manager::v3::{
            HttpConnectionManager, http_connection_manager::RouteSpecifier, http_filter,
        };
        use istiod_proto::envoy::extensions::transport_sockets::tls::v3::{
            CommonTlsContext, DownstreamTlsContext, UpstreamTlsContext, common_tls_context::ValidationContextType,
        };
        let mut out = Refs::default();
        let tls = |socket: Option<&TransportSocket>, out: &mut Refs| {
            let Some(transport_socket::ConfigType::TypedConfig(a)) = socket.and_then(|t| t.config_type.as_ref()) else {
                return;
            };
            let common: Option<CommonTlsContext> = if a.type_url == DownstreamTlsContext::type_url() {
                DownstreamTlsContext::decode(a.value.as_slice()).ok().and_then(|t| t.common_tls_context)
            } else if a.type_url == UpstreamTlsContext::type_url() {
                UpstreamTlsContext::decode(a.value.as_slice()).ok().and_then(|t| t.common_tls_context)
            } else {
                None
            };
            let Some(c) = common else { return };
            let validation = match &c.validation_context_type {
                Some(ValidationContextType::ValidationContextSdsSecretConfig(v)) => Some(&v.name),
                Some(ValidationContextType::CombinedValidationContext(v)) => {
                    v.validation_context_sds_secret_config.as_ref().map(|v| &v.name)
                }
                _ => None,
            };
            let certificates = c.tls_certificate_sds_secret_configs.iter().map(|c| &c.name);
            out.secrets.extend(certificates.chain(validation).map(|n| Arc::from(n.as_str())));
        };
        match kind {
            Kind::Cluster => {
                let Ok(c) = Cluster::decode(body.clone()) else { return out };
                tls(c.transport_socket.as_ref(), &mut out);
                for m in &c.transport_socket_matches {
                    tls(m.transport_socket.as_ref(), &mut out);
                }
            }
            Kind::Listener => {
                let Ok(l) = Listener::decode(body.clone()) else { return out };
                for f in &l.listener_filters {
                    if let Some(listener_filter::ConfigType::ConfigDiscovery(_)) = f.config_type {
                        out.extensions.push(Arc::from(f.name.as_str()));
                    }
                }
                for fc in l.filter_chains.iter().chain(l.default_filter_chain.as_ref()) {
                    tls(fc.transport_socket.as_ref(), &mut out);
                    for f in &fc.filters {
                        let a = match &f.config_type {
                            Some(filter::ConfigType::ConfigDiscovery(_)) => {
                                out.extensions.push(Arc::from(f.name.as_str()));
                                continue;
                            }
                            Some(filter::ConfigType::TypedConfig(a)) => a,
                            None => continue,
                        };
                        if a.type_url != HttpConnectionManager::type_url() {
                            continue;
                        }
                        let Ok(h) = HttpConnectionManager::decode(a.value.as_slice()) else { continue };
                        if let Some(RouteSpecifier::Rds(r)) = &h.route_specifier {
                            out.routes.push(Arc::from(r.route_config_name.as_str()));
                        }
                        for f in &h.http_filters {
                            if let Some(http_filter::ConfigType::ConfigDiscovery(_)) = f.config_type {
                                out.extensions.push(Arc::from(f.name.as_str()));
                            }
                        }
                    }
                }
            }
            _ => {}
        }
        out
    }
}

/// The resources that may have changed, by type: the snapshot delta the
/// cores would be sent.
pub type Delta = BTreeMap<Kind, BTreeSet<Arc<str>>>;

/// What changes for `class` between `before` and `after`. Per type: the
/// names `delta` holds (the cores would look at those and no others) and
/// those the class gains or loses. The part that depends on the reduced
/// class only (`Generator::reduce`, the cores' cache key) is compared
/// once per reduced class and shared; the class's own names
/// (`Generator::class_wildcard_names`: a sidecar's inbound, a gateway's
/// listeners, the name table, names EnvoyFilters add) and those that read
/// the whole class (`Generator::whole_class`) per class.
fn compare(
    memo: &mut Memo,
    before: &Snapshot<MeshInput>,
    after: &Snapshot<MeshInput>,
    delta: &Delta,
    class: &ProxyClass,
) -> ClassChanges {
    let (b, a) = (Side { snap: before, after: false }, Side { snap: after, after: true });
    let mut out = ClassChanges::default();
    for kind in KINDS {
        // The reductions that decide this type's answer: the type's own,
        // and those of the types that name its resources.
        let decides = deciding(kind);
        // Nothing of the type, or of what decides it, may have changed:
        // the cores would push none of it.
        let may = |k: &Kind| delta.get(k).is_some_and(|d| !d.is_empty());
        if !may(&kind) && !decides.iter().any(may) {
            continue;
        }
        let mut key = Vec::with_capacity(6);
        let mut whole = false;
        for &k in std::iter::once(&kind).chain(decides) {
            for side in [&b, &a] {
                match memo.reduced(side, class, k) {
                    Some(r) => key.push(r),
                    None => whole = true,
                }
            }
        }
        // Secrets and extension configs: what the class's own listeners
        // (inbound) name too, so per class.
        if matches!(kind, Kind::Secret | Kind::ExtensionConfig) {
            whole = true;
        }
        // The shared part, once per reduced class (or, where the type
        // does not reduce, everything, per class).
        let shared_key = if whole { (kind, vec![class.clone()]) } else { (kind, key) };
        let shared = match memo.compared.get(&shared_key) {
            Some(c) => c.clone(),
            None => {
                let c = Arc::new(compare_names(memo, &b, &a, kind, class, delta, Part::Shared { whole }));
                memo.compared.insert(shared_key, c.clone());
                c
            }
        };
        // The class's own part.
        let own = if whole {
            KindChanges::default()
        } else {
            let names = if kind.is_wildcard() {
                let set = |side: &Side<'_>| -> BTreeSet<Arc<str>> {
                    GENERATOR.class_wildcard_names(side.snap, class, kind).into_iter().collect()
                };
                Some((set(&b), set(&a)))
            } else {
                None
            };
            let touches_own = delta.get(&kind).into_iter().flatten().any(|n| {
                GENERATOR.whole_class(kind, n) || names.as_ref().is_some_and(|(o, n2)| o.contains(n) || n2.contains(n))
            });
            let moved = names.as_ref().is_some_and(|(o, n)| o != n);
            if touches_own || moved {
                compare_names(memo, &b, &a, kind, class, delta, Part::Own(names))
            } else {
                KindChanges::default()
            }
        };
        if shared.is_empty() && own.is_empty() {
            continue;
        }
        let mut k = (*shared).clone();
        k.added.extend(own.added);
        k.removed.extend(own.removed);
        k.changed.extend(own.changed);
        // A name served by one part before and the other after (an
        // EnvoyFilter's added cluster a new ServiceEntry now makes) is
        // served both times: not added, not removed.
        let both: BTreeSet<Arc<str>> = k.added.iter().filter(|n| k.removed.contains(n)).cloned().collect();
        if !both.is_empty() {
            k.added.retain(|n| !both.contains(n));
            k.removed.retain(|n| !both.contains(n));
        }
        if k.is_empty() {
            continue;
        }
        out.kinds.insert(kind, k);
    }
    out
}

/// The types whose resources name those of `kind`, deciding which of
/// them a proxy is served: clusters their load assignments, listeners
/// their route configurations and extension configs, listeners and
/// clusters their secrets.
fn deciding(kind: Kind) -> &'static [Kind] {
    match kind {
        Kind::Endpoint => &[Kind::Cluster],
        Kind::Route | Kind::ExtensionConfig => &[Kind::Listener],
        Kind::Secret => &[Kind::Listener, Kind::Cluster],
        _ => &[],
    }
}

/// A class's own wildcard names of one type, before and after.
type BeforeAfter = (BTreeSet<Arc<str>>, BTreeSet<Arc<str>>);

/// Which names of a type [`compare_names`] compares.
enum Part {
    /// Those the reduced class shares (`whole`: every name, where the
    /// type does not reduce).
    Shared { whole: bool },
    /// The class's own: its own wildcard names before and after (wildcard
    /// types), and the names that read the whole class.
    Own(Option<BeforeAfter>),
}

/// The changes of `kind` for `class`, of the names `part` says.
///
/// A name's input generations are compared first; what the class is
/// served (its wildcard names, its clusters, the routes its listeners
/// name) is computed only where they differ, or where the delta says
/// those sets may have changed (it holds names of the type that decides
/// them): where it does not, no proxy's set changes, as the cores assume.
fn compare_names(
    memo: &mut Memo,
    b: &Side<'_>,
    a: &Side<'_>,
    kind: Kind,
    class: &ProxyClass,
    delta: &Delta,
    part: Part,
) -> KindChanges {
    let decides = match deciding(kind) {
        [] => std::slice::from_ref(&kind),
        d => d,
    };
    let sets_may_differ = decides.iter().any(|k| delta.get(k).is_some_and(|d| !d.is_empty()));
    let touched = delta.get(&kind).into_iter().flatten();
    let mut candidates: BTreeSet<Arc<str>>;
    let mut served: Option<Served> = None;
    match &part {
        Part::Own(Some((old, new))) => {
            // Wildcard types: the class's own names, before and after.
            candidates = touched
                .filter(|n| GENERATOR.whole_class(kind, n) || old.contains(*n) || new.contains(*n))
                .cloned()
                .collect();
            candidates.extend(old.symmetric_difference(new).cloned());
            let names = |own: &BTreeSet<Arc<str>>| Names { shared: Arc::default(), own: own.clone() };
            served = Some(Served::Wildcard(names(old), names(new)));
        }
        Part::Own(None) => {
            candidates = touched.filter(|n| GENERATOR.whole_class(kind, n)).cloned().collect();
        }
        Part::Shared { whole } => {
            let whole = *whole;
            candidates = touched.filter(|n| whole || !GENERATOR.whole_class(kind, n)).cloned().collect();
            if sets_may_differ && matches!(kind, Kind::Secret | Kind::ExtensionConfig) {
                // A secret or extension config the class gains or loses is
                // named by one of its listeners or clusters that changed:
                // those are read (every one only for a name that exists).
                if memo.may_name(b, a, class, kind) {
                    for &by in decides {
                        // A listener or cluster the class is served on one
                        // side only names what it gains or loses, whatever
                        // its generation.
                        let (wb, wa) = (memo.wildcard(b, class, by), memo.wildcard(a, class, by));
                        for n in delta.get(&by).into_iter().flatten() {
                            // (The same generation, the same names.)
                            let (og, ng) = (
                                GENERATOR.input_generation(b.snap, class, by, n),
                                GENERATOR.input_generation(a.snap, class, by, n),
                            );
                            if og == ng && wb.contains(n) == wa.contains(n) {
                                continue;
                            }
                            for side in [b, a] {
                                if let Some(r) = memo.refs(side, class, by, n) {
                                    candidates.extend(r.of(kind).iter().cloned());
                                }
                            }
                        }
                    }
                }
            } else if sets_may_differ {
                // The names the class gains or loses are candidates too.
                let s = served_of(memo, b, a, kind, class, whole);
                match &s {
                    Served::Wildcard(old, new) | Served::Endpoints(old, new) => {
                        if old.shared != new.shared {
                            candidates.extend(old.shared.symmetric_difference(&new.shared).cloned());
                        }
                        candidates.extend(old.own.symmetric_difference(&new.own).cloned());
                    }
                    Served::Named(old, new) => {
                        if old != new {
                            candidates.extend(old.symmetric_difference(new).cloned());
                        }
                    }
                }
                candidates.retain(|n| whole || !GENERATOR.whole_class(kind, n));
                served = Some(s);
            }
        }
    }
    let must_look = sets_may_differ || matches!(part, Part::Own(Some(_)));
    let mut k = KindChanges::default();
    for name in &candidates {
        let (og, ng) = (
            GENERATOR.input_generation(b.snap, class, kind, name),
            GENERATOR.input_generation(a.snap, class, kind, name),
        );
        if og.is_none() && ng.is_none() || (og == ng && !must_look) {
            continue;
        }
        let served = served.get_or_insert_with(|| {
            let whole = matches!(part, Part::Shared { whole: true });
            served_of(memo, b, a, kind, class, whole)
        });
        // (A generation is the resource's existence for the class.)
        let og = og.filter(|_| served.has(b, name));
        let ng = ng.filter(|_| served.has(a, name));
        match (og, ng) {
            (None, None) => {}
            (Some(_), None) => k.removed.push(name.clone()),
            (None, Some(g)) => {
                if memo.body(a, class, kind, name, g).is_some() {
                    k.added.push(name.clone());
                }
            }
            (Some(o), Some(n)) if o == n => {}
            (Some(o), Some(n)) => {
                let (ob, nb) = (memo.body(b, class, kind, name, o), memo.body(a, class, kind, name, n));
                match (ob, nb) {
                    (Some(ob), Some(nb)) if ob != nb => k.changed.push((name.clone(), ob, nb)),
                    (Some(_), None) => k.removed.push(name.clone()),
                    (None, Some(_)) => k.added.push(name.clone()),
                    _ => {}
                }
            }
        }
    }
    k
}

/// What a class is served of `kind` before and after, for the shared part
/// (`whole`: the type does not reduce, every name).
fn served_of(memo: &mut Memo, b: &Side<'_>, a: &Side<'_>, kind: Kind, class: &ProxyClass, whole: bool) -> Served {
    match kind {
        Kind::Endpoint => {
            Served::Endpoints(memo.wildcard(b, class, Kind::Cluster), memo.wildcard(a, class, Kind::Cluster))
        }
        Kind::Route | Kind::Secret | Kind::ExtensionConfig => {
            Served::Named(memo.named(b, class, kind), memo.named(a, class, kind))
        }
        k if whole => Served::Wildcard(memo.wildcard(b, class, k), memo.wildcard(a, class, k)),
        k => Served::Wildcard(memo.shared_only(b, class, k), memo.shared_only(a, class, k)),
    }
}

/// What a class is served of one type, before and after.
enum Served {
    /// Wildcard types: their names.
    Wildcard(Names, Names),
    /// Load assignments: those of its clusters (these) that have one.
    Endpoints(Names, Names),
    /// Types served by name: those its listeners (and clusters) name.
    Named(NameSet, NameSet),
}

impl Served {
    /// Whether the class is served `name` on `side`, given that the
    /// resource exists there (a load assignment: that its cluster is
    /// served).
    fn has(&self, side: &Side<'_>, name: &str) -> bool {
        match self {
            Served::Wildcard(old, new) | Served::Endpoints(old, new) => {
                if side.after {
                    new.contains(name)
                } else {
                    old.contains(name)
                }
            }
            Served::Named(old, new) => {
                if side.after {
                    new.contains(name)
                } else {
                    old.contains(name)
                }
            }
        }
    }
}

/// Computes what changes for every class, and the analysis messages the
/// change brings.
pub fn predict(world: &World, asked: &[Asked], page: Page) -> Value {
    // (Credential problems met while generating are not the served ones:
    // neither counted nor logged.)
    istiod_mesh::generator::router::quietly(|| predict_quietly(world, asked, page))
}

fn predict_quietly(world: &World, asked: &[Asked], page: Page) -> Value {
    let started = Instant::now();
    let Some(after) = apply(world, asked) else {
        return json!({"error": "no model built yet"});
    };
    let applied = started.elapsed();
    let mut reached = classes(world, &after.objects);
    let classified = started.elapsed();
    let mut memo = Memo::default();
    let mut stopped = None;
    for (i, r) in reached.iter_mut().enumerate() {
        if started.elapsed() > MAX_COMPARING {
            stopped = Some(i);
            break;
        }
        memo.current = i;
        r.changes = compare(&mut memo, &after.before, &after.snapshot, &after.delta, &r.class);
    }
    let compared = started.elapsed();
    let mut warnings = warnings(world, asked, &after, &reached, stopped.is_none());
    if let Some(n) = stopped {
        warnings.insert(
            0,
            format!(
                "the comparison stopped after {} s with {n} of {} classes compared: the answer covers those only",
                MAX_COMPARING.as_secs(),
                reached.len()
            ),
        );
    }
    let computed_ms = started.elapsed().as_secs_f64() * 1000.0;
    tracing::debug!(target: "model", classes = reached.len(), generated = memo.bodies.len(),
        apply_ms = applied.as_secs_f64() * 1000.0, classes_ms = (classified - applied).as_secs_f64() * 1000.0,
        compare_ms = (compared - classified).as_secs_f64() * 1000.0, total_ms = computed_ms, "what-if answered");
    render(world, asked, &after, reached, warnings, page, computed_ms)
}

/// istiod's analysis messages the change brings (new after it) or that
/// its objects carry, and why it reaches nobody when it does.
fn warnings(world: &World, asked: &[Asked], after: &After, reached: &[Reached], complete: bool) -> Vec<String> {
    let raw = world.snapshot.mesh.as_ref().map(|m| m.model.mesh.raw.clone()).unwrap_or(Value::Null);
    // The messages of what is served, kept while it is (questions come
    // in a row about one state).
    type Analyzed = Option<(usize, u64, Arc<BTreeSet<String>>)>;
    static BEFORE: std::sync::Mutex<Analyzed> = std::sync::Mutex::new(None);
    let key = (Arc::as_ptr(&world.objects) as usize, world.snapshot.version);
    let kept = BEFORE.lock().unwrap_or_else(|e| e.into_inner()).clone().filter(|(p, v, _)| (*p, *v) == key);
    let before = match kept {
        Some((_, _, b)) => b,
        None => {
            let b: Arc<BTreeSet<String>> =
                Arc::new(istiod_analysis::analyze(&world.objects, &raw).iter().map(|m| m.line()).collect());
            *BEFORE.lock().unwrap_or_else(|e| e.into_inner()) = Some((key.0, key.1, b.clone()));
            b
        }
    };
    let mine = |m: &istiod_analysis::Message| {
        asked.iter().any(|a| a.head.kind == m.kind && a.head.namespace == m.namespace && a.head.name == m.name)
    };
    let mut out: Vec<String> = istiod_analysis::analyze(&after.objects, &raw)
        .iter()
        .filter(|m| mine(m) || !before.contains(&m.line()))
        .map(|m| m.line())
        .collect();
    if complete && reached.iter().all(|r| r.changes.kinds.is_empty()) {
        for a in asked {
            out.push(format!(
                "{} {}/{} changes no proxy's configuration{}",
                a.head.kind,
                a.head.namespace,
                a.head.name,
                why_nobody(world, a, &after.objects)
            ));
        }
    }
    out
}

/// Why an object may reach nobody: a selector matching no pod, hosts no
/// service has, an `exportTo` that hides it.
fn why_nobody(world: &World, a: &Asked, objects: &Objects) -> String {
    use istiod_config::istio::IstioSpec;
    let Some(Object::Istio(o)) = &a.object else { return String::new() };
    let raw = o.raw.value().unwrap_or(Value::Null);
    let spec = &raw["spec"];
    let mut why = Vec::new();
    let selector = spec["workloadSelector"]["labels"].as_object().or(spec["selector"]["matchLabels"].as_object());
    if let Some(sel) = selector.filter(|s| !s.is_empty()) {
        let root = world.snapshot.mesh.as_ref().map(|m| m.model.mesh.root_namespace.clone()).unwrap_or_default();
        let ns = o.meta.ns();
        let matches = objects.pods.iter().any(|p| {
            (ns == root || p.metadata.ns() == ns)
                && sel.iter().all(|(k, v)| p.metadata.labels.get(k).map(String::as_str) == v.as_str())
        });
        if !matches {
            let shown: Vec<String> =
                sel.iter().map(|(k, v)| format!("{k}={}", v.as_str().unwrap_or_default())).collect();
            why.push(format!("its selector {} matches no pod", shown.join(",")));
        }
    }
    let hosts: Vec<String> = match &o.spec {
        IstioSpec::VirtualService(_) => {
            spec["hosts"].as_array().into_iter().flatten().filter_map(|h| h.as_str().map(str::to_owned)).collect()
        }
        IstioSpec::DestinationRule(_) => spec["host"].as_str().map(|h| vec![h.to_owned()]).unwrap_or_default(),
        _ => Vec::new(),
    };
    if let Some(m) = world.snapshot.mesh.as_ref() {
        let known =
            |h: &str| h.contains('*') || m.model.services.contains_key(m.model.resolve_host(h, o.meta.ns()).as_str());
        let unknown: Vec<&String> = hosts.iter().filter(|h| !known(h)).collect();
        if !unknown.is_empty() && !matches!(&o.spec, IstioSpec::VirtualService(_) if !spec["gateways"].is_null()) {
            why.push(format!(
                "no service has host {}",
                unknown.iter().map(|h| h.as_str()).collect::<Vec<_>>().join(", ")
            ));
        }
    }
    if let Some(export) = spec["exportTo"].as_array().filter(|e| !e.iter().any(|x| x == "*")) {
        let shown: Vec<&str> = export.iter().filter_map(Value::as_str).collect();
        why.push(format!("its exportTo [{}] hides it from other namespaces", shown.join(",")));
    }
    if why.is_empty() { String::new() } else { format!(": {}", why.join("; ")) }
}

/// The answer.
fn render(
    world: &World,
    asked: &[Asked],
    after: &After,
    reached: Vec<Reached>,
    warnings: Vec<String>,
    page: Page,
    computed_ms: f64,
) -> Value {
    let considered = reached.len();
    let mut hit: Vec<Reached> = reached.into_iter().filter(|r| !r.changes.kinds.is_empty()).collect();
    // Connected proxies first, then by namespace and labels.
    hit.sort_by(|a, b| {
        (a.proxies.is_empty(), &a.class.namespace, &a.class.labels).cmp(&(
            b.proxies.is_empty(),
            &b.class.namespace,
            &b.class.labels,
        ))
    });
    let mut by_type: BTreeMap<&str, usize> = BTreeMap::new();
    let mut namespaces = BTreeSet::new();
    for r in &hit {
        namespaces.insert(r.class.namespace.to_string());
        for (k, c) in &r.changes.kinds {
            *by_type.entry(k.short()).or_default() += c.added.len() + c.removed.len() + c.changed.len();
        }
    }
    let pages = hit.len().div_ceil(page.size.max(1)).max(1);
    // Diffs are listed once and named by number: classes that share a
    // resource's change share its diff.
    let mut diffs = Diffs::default();
    let shown: Vec<Value> = hit
        .iter()
        .skip(page.index.saturating_mul(page.size))
        .take(page.size)
        .map(|r| class_json(r, page.diffs.then_some(&mut diffs)))
        .collect();
    let objects: Vec<Value> = asked
        .iter()
        .zip(&after.operations)
        .map(|(a, op)| {
            let mut v = json!({
                "apiVersion": a.api_version,
                "kind": a.head.kind,
                "namespace": a.head.namespace,
                "name": a.head.name,
                "operation": op,
            });
            if !a.warnings.is_empty() {
                v["warnings"] = json!(a.warnings);
            }
            v
        })
        .collect();
    json!({
        "valid": true,
        "objects": objects,
        "summary": {
            "classesConsidered": considered,
            "classesReached": hit.len(),
            "proxiesReached": hit.iter().map(|r| r.proxies.len()).sum::<usize>(),
            "podsReached": hit.iter().map(|r| r.pods.len()).sum::<usize>(),
            "namespacesReached": namespaces,
            "resourcesByType": by_type,
            "computeMillis": (computed_ms * 1000.0).round() / 1000.0,
        },
        "page": page.index,
        "pages": pages,
        "classes": shown,
        "diffs": diffs.list,
        "warnings": warnings,
        "servedVersion": world.snapshot.version,
        "notPredicted": [
            "remote clusters' objects (taken as they are)",
            "ztunnels asking on demand (compared as subscribed to everything)",
            "namespaces newly selected by discoverySelectors (their objects were never read)",
            "credentials of gateways whose service account the API server has not been asked about yet (what-if asks nothing)",
        ],
    })
}

/// The diffs of an answer, each once: by (type, before, after).
#[derive(Default)]
struct Diffs {
    index: HashMap<(Kind, Bytes, Bytes), usize>,
    list: Vec<Value>,
}

impl Diffs {
    /// The number of the diff of `name` from `before` to `after`.
    fn of(&mut self, kind: Kind, name: &str, before: &Bytes, after: &Bytes) -> usize {
        let next = self.list.len();
        let list = &mut self.list;
        *self.index.entry((kind, before.clone(), after.clone())).or_insert_with(|| {
            let (b, a) = (pretty(kind, before), pretty(kind, after));
            list.push(json!({
                "id": next,
                "type": kind.short(),
                "name": name,
                "diff": diff::unified(&b, &a, 3, MAX_DIFF_LINES),
            }));
            next
        })
    }
}

/// One class of the answer; its changed resources name their diffs in
/// `diffs` (none without).
fn class_json(r: &Reached, mut diffs: Option<&mut Diffs>) -> Value {
    let mut kinds = serde_json::Map::new();
    for (kind, c) in &r.changes.kinds {
        let changed: Vec<Value> = c
            .changed
            .iter()
            .take(MAX_NAMES)
            .map(|(name, before, after)| {
                let mut v = json!({"name": &**name});
                if let Some(d) = diffs.as_deref_mut() {
                    v["diff"] = d.of(*kind, name, before, after).into();
                }
                v
            })
            .collect();
        kinds.insert(
            kind.short().to_owned(),
            json!({
                "added": c.added.iter().take(MAX_NAMES).map(|n| &**n).collect::<Vec<_>>(),
                "removed": c.removed.iter().take(MAX_NAMES).map(|n| &**n).collect::<Vec<_>>(),
                "changed": changed,
                "counts": {"added": c.added.len(), "removed": c.removed.len(), "changed": c.changed.len()},
            }),
        );
    }
    json!({
        "class": {
            "nodeType": r.class.node_type.as_str(),
            "namespace": &*r.class.namespace,
            "labels": r.class.labels.iter().map(|(k, v)| (k.to_string(), Value::from(&**v))).collect::<serde_json::Map<_, _>>(),
            "serviceAccount": &*r.class.service_account,
        },
        "proxies": r.proxies,
        "pods": r.pods,
        "changes": kinds,
    })
}

/// A resource as a config dump shows it, pretty-printed, with what a
/// credential holds redacted (a secret's private key, as the config dump
/// redacts it; a Wasm extension's image pull secret).
fn pretty(kind: Kind, body: &Bytes) -> String {
    let mut v = super::config_dump::resource_json(kind, body);
    if kind == Kind::ExtensionConfig {
        redact_key(&mut v, istiod_mesh::translate::extensions::PULL_SECRET_ENV);
    }
    serde_json::to_string_pretty(&v).unwrap_or_default()
}

/// Replaces the value of every field named `key`, at any depth.
fn redact_key(v: &mut Value, key: &str) {
    match v {
        Value::Object(m) => {
            for (k, x) in m.iter_mut() {
                if k == key {
                    *x = Value::String("[redacted]".into());
                } else {
                    redact_key(x, key);
                }
            }
        }
        Value::Array(a) => a.iter_mut().for_each(|x| redact_key(x, key)),
        _ => {}
    }
}

/// The answer while the source's change is on its way to the cores (the
/// client asks again).
pub(super) const PUBLISHING: &str = "a change is being published; retry";

/// What an answer reads of the running server.
pub(super) struct Server<'a> {
    /// The cores: the snapshot they serve, their connected proxies.
    pub(super) publisher: &'a istiod_xds::ads::Publisher<MeshInput>,
    /// The model sent to the cores last and the objects it was built
    /// from.
    pub(super) objects: Option<(std::sync::Weak<MeshInput>, Arc<Objects>)>,
    /// `--domain`.
    pub(super) domain: &'a str,
    /// `CLUSTER_ID`.
    pub(super) cluster_id: &'a str,
    /// `ISTIOD_RS_WHATIF_MAX_CLASSES`.
    pub(super) max_classes: usize,
    /// The source is filtered by `discoverySelectors`.
    pub(super) namespace_filter: bool,
    /// The ambient index as published, and the names it is built with.
    /// (Moved into the prediction: no other reference of this request's
    /// keeps the control thread copying it.)
    pub(super) ambient: std::cell::Cell<Option<(Arc<istiod_ambient::Index>, istiod_ambient::Settings)>>,
}

/// The connected proxies' node ids and classes, from every core.
async fn connected_classes(publisher: &istiod_xds::ads::Publisher<MeshInput>) -> Vec<(String, ProxyClass)> {
    let cores = publisher.query(istiod_xds::ads::DebugQuery::Adsz).await;
    cores
        .iter()
        .flat_map(|c| c["clients"].as_array().into_iter().flatten())
        .filter_map(|c| {
            let class = ProxyClass::from_detail(&c["istiodRs"]["class"])?;
            Some((c["istiodRs"]["node"].as_str()?.to_owned(), class))
        })
        .collect()
}

/// Answers `/debug/whatif`: the question from the body (or `?config=`),
/// judged here, predicted off this thread.
pub(super) async fn answer(req: &Request, d: &Server<'_>, caller: Option<&str>) -> Response {
    let text = if req.body.is_empty() {
        req.param("config").unwrap_or_default().to_owned()
    } else {
        String::from_utf8_lossy(&req.body).into_owned()
    };
    if text.trim().is_empty() {
        return Response::text(
            400,
            "a what-if question names objects: POST them (YAML or JSON) to /debug/whatif, or pass them as ?config=\n",
        );
    }
    let delete = req.param("delete").is_some_and(|v| v == "true" || v == "1");
    let page = Page {
        size: d.max_classes,
        index: req.param("page").and_then(|p| p.parse().ok()).unwrap_or(0),
        diffs: req.param("diff").is_none_or(|v| v != "false" && v != "0"),
    };
    // One question at a time: each may take a core for a while (judging
    // it too: a body of megabytes).
    static ANSWERING: std::sync::atomic::AtomicBool = std::sync::atomic::AtomicBool::new(false);
    struct Answering;
    impl Drop for Answering {
        fn drop(&mut self) {
            ANSWERING.store(false, std::sync::atomic::Ordering::Release);
        }
    }
    if ANSWERING.swap(true, std::sync::atomic::Ordering::AcqRel) {
        return Response::text(503, "another what-if is being answered; retry\n");
    }
    let answering = Answering;
    let limit = caller.map(str::to_owned);
    let judged = tokio::task::spawn_blocking(move || judge(&text, delete, limit.as_deref())).await;
    let asked = match judged {
        Ok(Ok(a)) => a,
        Ok(Err(r)) => {
            let mut resp = Response::json(&json!({"valid": false, "objects": r.objects}));
            resp.status = 400;
            return resp;
        }
        Err(e) => return Response::text(500, format!("the question could not be read: {e}\n")),
    };
    let Some(snapshot) = d.publisher.latest().filter(|s| s.mesh.is_some()) else {
        return Response::text(503, "not ready: no model built yet\n");
    };
    // The objects the served model was built from: a change the source
    // has read and the cores have not been sent yet (debouncing) would
    // be taken for the question's.
    let served = snapshot.mesh.as_ref().map(Arc::as_ptr);
    let objects = match &d.objects {
        Some((mesh, objects)) if Some(mesh.as_ptr()) == served => objects.clone(),
        _ => return Response::text(503, format!("{PUBLISHING}\n")),
    };
    let connected = connected_classes(d.publisher).await;
    let world = World {
        ambient: d.ambient.take().map(|(index, names)| (std::sync::Mutex::new(Some(index)), names)),
        objects,
        snapshot,
        domain: d.domain.to_owned(),
        cluster_id: d.cluster_id.to_owned(),
        connected,
        namespace: caller.map(str::to_owned),
        namespace_filter: d.namespace_filter,
    };
    match tokio::task::spawn_blocking(move || {
        let _answering = answering;
        predict(&world, &asked, page)
    })
    .await
    {
        Ok(v) => Response::json(&v),
        Err(e) => Response::text(500, format!("the prediction failed: {e}\n")),
    }
}
