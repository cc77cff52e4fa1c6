//! The EnvoyFilters of a mesh, read once (istiod's `EnvoyFilterWrapper`:
//! each patch's value built as its type, `proxyVersion` compiled), and the
//! patches that apply to one proxy, in istiod's order (push_context.go
//! `EnvoyFilters`): the root namespace's filters and the proxy
//! namespace's that attach to it (`ShouldAttachPolicy`: a selector's labels
//! for a workload, `targetRefs` naming its Gateway for a Gateway API
//! gateway), ordered by priority, then the root namespace's first, then
//! creation time, then `name.namespace`; their patches whose proxy match
//! (version, metadata) holds, grouped by what they apply to.

use std::collections::BTreeMap;
use std::sync::Arc;

use prost_reflect::DynamicMessage;

use crate::spec::{ClusterMatch, ConfigPatch, EnvoyFilterSpec, ListenerMatch, RouteConfigurationMatch};

/// What a patch applies to (`EnvoyFilter.ApplyTo`).
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub enum ApplyTo {
    /// A listener.
    Listener,
    /// A filter chain.
    FilterChain,
    /// A network filter.
    NetworkFilter,
    /// An HTTP filter.
    HttpFilter,
    /// A route configuration.
    RouteConfiguration,
    /// A virtual host.
    VirtualHost,
    /// A route.
    HttpRoute,
    /// A cluster.
    Cluster,
    /// An extension configuration (ECDS).
    ExtensionConfig,
    /// The bootstrap (istiod ignores it).
    Bootstrap,
    /// A listener filter.
    ListenerFilter,
}

impl ApplyTo {
    fn parse(s: &str) -> Option<ApplyTo> {
        Some(match s {
            "LISTENER" => ApplyTo::Listener,
            "FILTER_CHAIN" => ApplyTo::FilterChain,
            "NETWORK_FILTER" => ApplyTo::NetworkFilter,
            "HTTP_FILTER" => ApplyTo::HttpFilter,
            "ROUTE_CONFIGURATION" => ApplyTo::RouteConfiguration,
            "VIRTUAL_HOST" => ApplyTo::VirtualHost,
            "HTTP_ROUTE" => ApplyTo::HttpRoute,
            "CLUSTER" => ApplyTo::Cluster,
            "EXTENSION_CONFIG" => ApplyTo::ExtensionConfig,
            "BOOTSTRAP" => ApplyTo::Bootstrap,
            "LISTENER_FILTER" => ApplyTo::ListenerFilter,
            _ => return None,
        })
    }

    /// The Envoy type a patch value of this target is read as
    /// (`xds.BuildXDSObjectFromStruct`).
    pub fn value_type(self) -> &'static str {
        match self {
            ApplyTo::Listener => "envoy.config.listener.v3.Listener",
            ApplyTo::FilterChain => "envoy.config.listener.v3.FilterChain",
            ApplyTo::NetworkFilter => "envoy.config.listener.v3.Filter",
            ApplyTo::HttpFilter => "envoy.extensions.filters.network.http_connection_manager.v3.HttpFilter",
            ApplyTo::RouteConfiguration => "envoy.config.route.v3.RouteConfiguration",
            ApplyTo::VirtualHost => "envoy.config.route.v3.VirtualHost",
            ApplyTo::HttpRoute => "envoy.config.route.v3.Route",
            ApplyTo::Cluster => "envoy.config.cluster.v3.Cluster",
            ApplyTo::ExtensionConfig => "envoy.config.core.v3.TypedExtensionConfig",
            ApplyTo::Bootstrap => "envoy.config.bootstrap.v3.Bootstrap",
            ApplyTo::ListenerFilter => "envoy.config.listener.v3.ListenerFilter",
        }
    }
}

/// A patch's operation (`Patch.Operation`).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum Operation {
    /// Merged into the match.
    Merge,
    /// Merged, its lists replacing the match's.
    MergeAndReplaceList,
    /// Added.
    Add,
    /// The match removed.
    Remove,
    /// Inserted before the match.
    InsertBefore,
    /// Inserted after the match.
    InsertAfter,
    /// Inserted first.
    InsertFirst,
    /// The match replaced.
    Replace,
    /// Anything else (`INVALID`, a newer value): applies nowhere.
    Invalid,
}

impl Operation {
    fn parse(s: &str) -> Operation {
        match s {
            "MERGE" => Operation::Merge,
            "MERGE_AND_REPLACE_LIST" => Operation::MergeAndReplaceList,
            "ADD" => Operation::Add,
            "REMOVE" => Operation::Remove,
            "INSERT_BEFORE" => Operation::InsertBefore,
            "INSERT_AFTER" => Operation::InsertAfter,
            "INSERT_FIRST" => Operation::InsertFirst,
            "REPLACE" => Operation::Replace,
            _ => Operation::Invalid,
        }
    }

    /// MERGE or MERGE_AND_REPLACE_LIST.
    pub fn merges(self) -> bool {
        matches!(self, Operation::Merge | Operation::MergeAndReplaceList)
    }

    /// How a merge treats lists.
    pub fn lists(self) -> crate::merge::Lists {
        match self {
            Operation::MergeAndReplaceList => crate::merge::Lists::Replace,
            _ => crate::merge::Lists::Append,
        }
    }
}

/// Where a resource is, for a patch's `context`.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum Context {
    /// A sidecar's inbound side.
    SidecarInbound,
    /// A sidecar's outbound side.
    SidecarOutbound,
    /// A gateway.
    Gateway,
}

/// A patch's `context`: `None` is ANY (or no match).
fn context(s: &str) -> Result<Option<Context>, ()> {
    match s {
        "" | "ANY" => Ok(None),
        "SIDECAR_INBOUND" => Ok(Some(Context::SidecarInbound)),
        "SIDECAR_OUTBOUND" => Ok(Some(Context::SidecarOutbound)),
        "GATEWAY" => Ok(Some(Context::Gateway)),
        // WAYPOINT (istiod applies no patch of it) and newer values match
        // nothing.
        _ => Err(()),
    }
}

/// One patch, ready (`EnvoyFilterConfigPatchWrapper`).
#[derive(Debug, Clone)]
pub struct Patch {
    /// `namespace/name` of its EnvoyFilter.
    pub filter: Arc<str>,
    /// What it applies to.
    pub apply_to: ApplyTo,
    /// Its context (`None`: any; `Err`: one that matches nothing).
    context: Result<Option<Context>, ()>,
    /// Its operation.
    pub operation: Operation,
    /// `proxy.proxyVersion`, compiled (`Err`: never matches).
    version: Option<Result<regex::Regex, ()>>,
    /// `proxy.metadata`.
    metadata: BTreeMap<String, String>,
    /// The listener match.
    pub listener: Option<ListenerMatch>,
    /// The route configuration match.
    pub route_configuration: Option<RouteConfigurationMatch>,
    /// The cluster match.
    pub cluster: Option<ClusterMatch>,
    /// Its value, read as its type (`None` for REMOVE).
    pub value: Option<DynamicMessage>,
}

impl Patch {
    /// Whether it applies in `ctx` (`patchContextMatch`).
    pub fn in_context(&self, ctx: Context) -> bool {
        match self.context {
            Ok(None) => true,
            Ok(Some(c)) => c == ctx,
            Err(()) => false,
        }
    }

    /// Whether its context is ANY.
    pub fn any_context(&self) -> bool {
        self.context == Ok(None)
    }
}

/// One EnvoyFilter, read.
#[derive(Debug, Clone)]
pub struct Filter {
    /// Namespace.
    pub namespace: String,
    /// Name.
    pub name: String,
    /// `creationTimestamp` (RFC 3339, compares in order).
    pub created: String,
    /// The spec's parts that select proxies.
    pub spec: EnvoyFilterSpec,
    /// Its patches.
    pub patches: Vec<Arc<Patch>>,
    /// Patches that could not be read, with why (istiod logs and skips
    /// them).
    pub errors: Vec<String>,
    /// A hash of what it is (identity and spec): what a resource it
    /// patches is cached under.
    pub hash: u64,
}

impl Filter {
    /// Reads the EnvoyFilter `namespace/name` from its kept spec.
    pub fn read(namespace: &str, name: &str, created: &str, raw: &serde_json::Value) -> Filter {
        let spec = EnvoyFilterSpec::read(raw);
        let full: Arc<str> = format!("{namespace}/{name}").into();
        let mut patches = Vec::new();
        let mut errors = Vec::new();
        for cp in &spec.config_patches {
            match patch(&full, cp) {
                Ok(Some(p)) => patches.push(Arc::new(p)),
                Ok(None) => {}
                Err(e) => errors.push(format!("envoyfilter {full} failed to build envoy filter value: {e}")),
            }
        }
        let hash = {
            use std::hash::{Hash, Hasher};
            let mut h = std::collections::hash_map::DefaultHasher::new();
            (namespace, name, created, raw.to_string()).hash(&mut h);
            h.finish()
        };
        Filter { namespace: namespace.into(), name: name.into(), created: created.into(), spec, patches, errors, hash }
    }
}

/// A patch value read as its type; each distinct value once per process
/// (a full rebuild reads every EnvoyFilter again).
fn value_of(apply_to: ApplyTo, v: &serde_json::Value) -> Result<DynamicMessage, String> {
    use std::hash::{Hash, Hasher};
    type Read = Result<DynamicMessage, String>;
    type Values = std::collections::HashMap<u64, (ApplyTo, String, Read)>;
    // By a hash of the value; the value's text is kept to tell two apart.
    static CACHE: std::sync::Mutex<Option<Values>> = std::sync::Mutex::new(None);
    let text = v.to_string();
    let mut h = std::collections::hash_map::DefaultHasher::new();
    (apply_to, &text).hash(&mut h);
    let key = h.finish();
    let cached = CACHE
        .lock()
        .unwrap_or_else(|e| e.into_inner())
        .as_ref()
        .and_then(|c| c.get(&key))
        .and_then(|(to, t, read)| (*to == apply_to && *t == text).then(|| read.clone()));
    if let Some(read) = cached {
        return read;
    }
    let read = crate::schema::message(apply_to.value_type())
        .ok_or_else(|| "type not in the schema".to_owned())
        .and_then(|desc| crate::schema::from_json(desc, v).map_err(|e| format!("Envoy filter: {e}")));
    let mut cache = CACHE.lock().unwrap_or_else(|e| e.into_inner());
    let cache = cache.get_or_insert_with(Default::default);
    if cache.len() >= 16_384 {
        cache.clear();
    }
    cache.insert(key, (apply_to, text, read.clone()));
    read
}

fn patch(filter: &Arc<str>, cp: &ConfigPatch) -> Result<Option<Patch>, String> {
    // Should be refused by validation; istiod skips it.
    let Some(p) = &cp.patch else { return Ok(None) };
    let Some(apply_to) = ApplyTo::parse(&cp.apply_to) else {
        return Err(format!("Envoy filter: unknown object type for applyTo {}", cp.apply_to));
    };
    let value = match &p.value {
        None => None,
        Some(v) => Some(value_of(apply_to, v)?),
    };
    let m = cp.match_.clone().unwrap_or_default();
    // istiod fails closed on pathological patterns, and ignores one that
    // does not compile (no version check at all).
    let version = m.proxy.as_ref().filter(|p| !p.proxy_version.is_empty()).and_then(|p| {
        if p.proxy_version.len() > 1024 {
            return Some(Err(()));
        }
        regex::Regex::new(&p.proxy_version).ok().map(Ok)
    });
    // INSERT_* where a level has no order is an ADD (convertToEnvoyFilterWrapper).
    let ordered =
        matches!(apply_to, ApplyTo::HttpFilter | ApplyTo::NetworkFilter | ApplyTo::HttpRoute | ApplyTo::ListenerFilter);
    let mut operation = Operation::parse(&p.operation);
    if !ordered && matches!(operation, Operation::InsertBefore | Operation::InsertAfter | Operation::InsertFirst) {
        operation = Operation::Add;
    }
    Ok(Some(Patch {
        filter: filter.clone(),
        apply_to,
        context: context(&m.context),
        operation,
        version,
        metadata: m.proxy.map(|p| p.metadata).unwrap_or_default(),
        listener: m.listener,
        route_configuration: m.route_configuration,
        cluster: m.cluster,
        value,
    }))
}

impl Filter {
    /// What of it is read and not applied, and why.
    pub fn not_applied(&self) -> Vec<String> {
        let mut out = self.errors.clone();
        for cp in &self.spec.config_patches {
            let context = cp.match_.as_ref().map_or("", |m| m.context.as_str());
            let operation = cp.patch.as_ref().map_or("", |p| p.operation.as_str());
            if cp.apply_to == "EXTENSION_CONFIG" && operation != "ADD" {
                out.push(format!("applyTo EXTENSION_CONFIG: only ADD applies, as in istiod (not {operation})"));
            }
            if context == "WAYPOINT" {
                out.push(
                    "context WAYPOINT: istiod applies no patch of this context (a waypoint's listeners take SIDECAR_INBOUND patches, its outbound clusters SIDECAR_OUTBOUND ones)"
                        .into(),
                );
            }
        }
        out.sort();
        out.dedup();
        out
    }
}

/// A proxy, as far as EnvoyFilters select it.
#[derive(Debug, Clone, Copy)]
pub struct Proxy<'a> {
    /// Its namespace.
    pub namespace: &'a str,
    /// Its workload labels.
    pub labels: &'a [(&'a str, &'a str)],
    /// Its `ISTIO_VERSION`.
    pub version: &'a str,
    /// Its node metadata (string values).
    pub metadata: &'a [(&'a str, &'a str)],
}

impl Proxy<'_> {
    fn label(&self, k: &str) -> Option<&str> {
        self.labels.iter().find(|(lk, _)| *lk == k).map(|(_, v)| *v)
    }
}

/// The label naming a Gateway API gateway's Gateway.
pub const GATEWAY_NAME: &str = "gateway.networking.k8s.io/gateway-name";

/// istiod's `ShouldAttachPolicy` (`pilot/pkg/model/policyattachment.go`)
/// for a sidecar or gateway, of a policy of `policy_namespace` that
/// selects by `selector` or attaches by `target_refs`, and a workload of
/// `namespace` whose labels `label` reads (waypoints, which take Service
/// targets, do not exist yet): a Gateway API gateway takes the policies
/// that name its Gateway in its namespace, and those without targets
/// (selectors or namespace-wide) only under
/// `ENABLE_SELECTOR_BASED_K8S_GATEWAY_POLICY` (`gateway_selectors`); any
/// other workload only those without targets.
pub fn should_attach<'a>(
    policy_namespace: &str,
    selector: Option<&BTreeMap<String, String>>,
    target_refs: &[crate::spec::TargetRef],
    namespace: &str,
    label: impl Fn(&str) -> Option<&'a str>,
    gateway_selectors: bool,
) -> bool {
    if target_refs.is_empty() {
        if !gateway_selectors && label(GATEWAY_NAME).is_some() {
            return false;
        }
        return selector.is_none_or(|s| s.iter().all(|(k, v)| label(k) == Some(v.as_str())));
    }
    let Some(gateway) = label(GATEWAY_NAME) else { return false };
    policy_namespace == namespace
        && target_refs.iter().any(|t| {
            (t.namespace.is_empty() || t.namespace == namespace)
                && t.kind == "Gateway"
                && t.group == "gateway.networking.k8s.io"
                && t.name == gateway
        })
}

/// [`should_attach`] for an EnvoyFilter of the proxy's namespace or the
/// root's.
fn attaches(f: &Filter, proxy: &Proxy<'_>, gateway_selectors: bool) -> bool {
    let selector = f.spec.workload_selector.as_ref().map(|s| &s.labels);
    should_attach(&f.namespace, selector, &f.spec.target_refs, proxy.namespace, |k| proxy.label(k), gateway_selectors)
}

/// Whether a patch's proxy match holds (`proxyMatch`).
fn proxy_matches(p: &Patch, proxy: &Proxy<'_>) -> bool {
    if let Some(v) = &p.version {
        // istiod's proxyMatch: a version pattern never matches a proxy
        // that sent no version.
        if proxy.version.is_empty() {
            return false;
        }
        match v {
            Ok(re) if re.is_match(proxy.version) => {}
            _ => return false,
        }
    }
    p.metadata.iter().all(|(k, v)| proxy.metadata.iter().any(|(mk, mv)| mk == k && mv == v))
}

/// Every EnvoyFilter of a mesh.
#[derive(Debug, Default)]
pub struct EnvoyFilters {
    /// The root namespace.
    pub root: String,
    /// The filters, by namespace.
    pub by_namespace: BTreeMap<String, Vec<Arc<Filter>>>,
    /// Not `ENABLE_SELECTOR_BASED_K8S_GATEWAY_POLICY` (true): Gateway API
    /// gateways take only filters with `targetRefs` ([`should_attach`]).
    pub no_gateway_selectors: bool,
    /// What applies to proxies already asked about, by a hash of what
    /// selects (namespace, labels, version, metadata): every resource of a
    /// proxy asks, the answer is the same.
    memo: std::sync::Mutex<Memo>,
}

/// Memoised selections, by a hash of what selects (each entry with its
/// key, so that two that hash alike stay apart).
type Memo = std::collections::HashMap<u64, Vec<(Selected, Arc<Applied>)>>;

/// What selects a proxy's patches, owned (a memo entry's key).
#[derive(Debug)]
struct Selected {
    namespace: String,
    labels: Vec<(String, String)>,
    version: String,
    metadata: Vec<(String, String)>,
}

impl Selected {
    fn of(p: &Proxy<'_>) -> Selected {
        let own = |v: &[(&str, &str)]| v.iter().map(|(k, v)| ((*k).to_owned(), (*v).to_owned())).collect();
        Selected {
            namespace: p.namespace.to_owned(),
            labels: own(p.labels),
            version: p.version.to_owned(),
            metadata: own(p.metadata),
        }
    }

    fn is(&self, p: &Proxy<'_>) -> bool {
        let same = |a: &[(String, String)], b: &[(&str, &str)]| {
            a.len() == b.len() && a.iter().zip(b).all(|((ak, av), (bk, bv))| ak == bk && av == bv)
        };
        self.namespace == p.namespace
            && self.version == p.version
            && same(&self.labels, p.labels)
            && same(&self.metadata, p.metadata)
    }
}

impl Clone for EnvoyFilters {
    fn clone(&self) -> Self {
        EnvoyFilters {
            root: self.root.clone(),
            by_namespace: self.by_namespace.clone(),
            no_gateway_selectors: self.no_gateway_selectors,
            memo: Default::default(),
        }
    }
}

/// Two sets of filters are the same when their filters are (by hash).
impl PartialEq for EnvoyFilters {
    fn eq(&self, other: &Self) -> bool {
        let hashes = |e: &EnvoyFilters| e.all().map(|f| f.hash).collect::<Vec<_>>();
        self.root == other.root && hashes(self) == hashes(other)
    }
}

/// The patches that apply to one proxy, in order, by target.
#[derive(Debug, Clone, Default)]
pub struct Applied {
    /// The filters (`namespace/name`) they came from, in order.
    pub filters: Vec<Arc<str>>,
    /// A hash of those filters (identity and spec), in order: `0` when
    /// none applies.
    pub digest: u64,
    /// Patches by target.
    pub patches: BTreeMap<ApplyTo, Vec<Arc<Patch>>>,
}

impl Applied {
    /// What the ADD patches for `to` add in `ctx` (`InsertedClusters`, and
    /// the listener ADDs of `patchListeners`): with context ANY, only on a
    /// sidecar's outbound side and gateways.
    pub fn added(&self, to: ApplyTo, ctx: Context) -> impl Iterator<Item = &DynamicMessage> {
        self.of(to)
            .iter()
            .filter(|p| p.operation == Operation::Add)
            .filter(move |p| !(p.any_context() && ctx == Context::SidecarInbound))
            .filter(move |p| p.in_context(ctx))
            .filter_map(|p| p.value.as_ref())
    }

    /// The patches for `to`.
    pub fn of(&self, to: ApplyTo) -> &[Arc<Patch>] {
        self.patches.get(&to).map_or(&[], Vec::as_slice)
    }
}

impl EnvoyFilters {
    /// The filters of `filters` (namespace, name, creation time, kept
    /// spec), the mesh's root namespace being `root`.
    pub fn new<'a>(
        root: &str,
        filters: impl IntoIterator<Item = (&'a str, &'a str, &'a str, &'a serde_json::Value)>,
    ) -> Self {
        let mut by_namespace: BTreeMap<String, Vec<Arc<Filter>>> = BTreeMap::new();
        for (ns, name, created, spec) in filters {
            by_namespace.entry(ns.to_owned()).or_default().push(Arc::new(Filter::read(ns, name, created, spec)));
        }
        EnvoyFilters { root: root.to_owned(), by_namespace, no_gateway_selectors: false, memo: Default::default() }
    }

    /// Whether there are none.
    pub fn is_empty(&self) -> bool {
        self.by_namespace.is_empty()
    }

    fn all(&self) -> impl Iterator<Item = &Arc<Filter>> {
        self.by_namespace.values().flatten()
    }

    /// Whether a filter selects proxies by their labels (a selector, or
    /// `targetRefs` naming a gateway's Gateway by label).
    pub fn reads_labels(&self) -> bool {
        self.all().any(|f| f.spec.workload_selector.is_some() || !f.spec.target_refs.is_empty())
    }

    /// Whether a patch matches proxies by version.
    pub fn reads_version(&self) -> bool {
        self.all().flat_map(|f| &f.patches).any(|p| p.version.is_some())
    }

    /// The node metadata keys patches match.
    pub fn metadata_keys(&self) -> std::collections::BTreeSet<&str> {
        self.all().flat_map(|f| &f.patches).flat_map(|p| p.metadata.keys().map(String::as_str)).collect()
    }

    /// The patches that apply to `proxy`.
    pub fn applied(&self, proxy: &Proxy<'_>) -> Arc<Applied> {
        use std::hash::{Hash, Hasher};
        let mut h = std::collections::hash_map::DefaultHasher::new();
        (proxy.namespace, proxy.labels, proxy.version, proxy.metadata).hash(&mut h);
        let key = h.finish();
        let hit = |memo: &Memo| memo.get(&key)?.iter().find(|(k, _)| k.is(proxy)).map(|(_, a)| a.clone());
        if let Some(a) = hit(&self.memo.lock().unwrap_or_else(|e| e.into_inner())) {
            return a;
        }
        let a = Arc::new(self.compute(proxy));
        let mut memo = self.memo.lock().unwrap_or_else(|e| e.into_inner());
        // Bounded: a mesh of many distinct workloads starts again.
        if memo.len() >= 4096 {
            memo.clear();
        }
        memo.entry(key).or_default().push((Selected::of(proxy), a.clone()));
        a
    }

    fn compute(&self, proxy: &Proxy<'_>) -> Applied {
        let of = |ns: &str| {
            self.by_namespace
                .get(ns)
                .into_iter()
                .flatten()
                .filter(|f| attaches(f, proxy, !self.no_gateway_selectors))
                .cloned()
                .collect::<Vec<_>>()
        };
        let mut matched = if self.root.is_empty() { Vec::new() } else { of(&self.root) };
        if proxy.namespace != self.root {
            matched.extend(of(proxy.namespace));
        }
        let root = self.root.as_str();
        matched.sort_by(|a, b| {
            a.spec
                .priority
                .cmp(&b.spec.priority)
                .then_with(|| {
                    // The root namespace's first.
                    if a.namespace != b.namespace && (a.namespace == root || b.namespace == root) {
                        (b.namespace == root).cmp(&(a.namespace == root))
                    } else {
                        std::cmp::Ordering::Equal
                    }
                })
                .then_with(|| a.created.cmp(&b.created))
                .then_with(|| format!("{}.{}", a.name, a.namespace).cmp(&format!("{}.{}", b.name, b.namespace)))
        });
        let mut out = Applied::default();
        let mut h = std::collections::hash_map::DefaultHasher::new();
        for f in &matched {
            use std::hash::{Hash, Hasher};
            f.hash.hash(&mut h);
            out.digest = h.finish();
        }
        for f in matched {
            out.filters.push(format!("{}/{}", f.namespace, f.name).into());
            for p in &f.patches {
                if proxy_matches(p, proxy) {
                    out.patches.entry(p.apply_to).or_default().push(p.clone());
                }
            }
        }
        out
    }
}

/// istiod's check of a patch value at validation (`ValidateEnvoyFilter`:
/// `BuildXDSObjectFromStruct`): `Err` when it does not read as its type,
/// an unknown `@type` said as istiod says it.
pub fn check_value(apply_to: &str, value: &serde_json::Value) -> Result<(), String> {
    let Some(to) = ApplyTo::parse(apply_to) else { return Ok(()) };
    value_of(to, value).map(|_| ()).map_err(|e| {
        if e.contains("not found") || e.contains("unknown type") || e.contains("type_url") {
            format!("referenced type unknown: {e}")
        } else {
            e
        }
    })
}

#[cfg(test)]
mod tests {
    use serde_json::json;

    /// Upstream `TestPolicyMatcher` (pilot/pkg/model/policyattachment_test.go),
    /// its cases for workloads that are not waypoints (waypoints are
    /// `istiod-waypoint`'s), with `ENABLE_SELECTOR_BASED_K8S_GATEWAY_POLICY`
    /// as each case sets it.
    #[test]
    fn upstream_policy_matcher() {
        use super::{GATEWAY_NAME, should_attach};
        use crate::spec::TargetRef;
        use std::collections::BTreeMap;
        let gateway = |name: &str| TargetRef {
            group: "gateway.networking.k8s.io".into(),
            kind: "Gateway".into(),
            name: name.into(),
            namespace: String::new(),
        };
        let (sample, waypoint) = (gateway("sample-gateway"), gateway("sample-waypoint"));
        let app: BTreeMap<String, String> = [("app".to_owned(), "my-app".to_owned())].into();
        let gw_selector: BTreeMap<String, String> = [(GATEWAY_NAME.to_owned(), "sample-gateway".to_owned())].into();
        let regular = [("app", "my-app")];
        let sample_gateway = [(GATEWAY_NAME, "sample-gateway")];
        let attach = |labels: &[(&'static str, &'static str)],
                      selector: Option<&BTreeMap<String, String>>,
                      refs: &[TargetRef],
                      flag: bool| {
            let labels = labels.to_vec();
            should_attach(
                "default",
                selector,
                refs,
                "default",
                move |k| labels.iter().find(|(l, _)| *l == k).map(|(_, v)| *v),
                flag,
            )
        };
        let cases = [
            (
                "non-gateway API workload and a targetRef",
                attach(&regular, None, std::slice::from_ref(&sample), true),
                false,
            ),
            ("non-gateway API workload and a selector", attach(&regular, Some(&app), &[], true), true),
            (
                "non-gateway API workload and both a targetRef and a selector",
                attach(&regular, Some(&app), std::slice::from_ref(&sample), true),
                false,
            ),
            ("non-gateway API workload and no targetRef or selector", attach(&regular, None, &[], true), true),
            (
                "gateway API ingress and a targetRef",
                attach(&sample_gateway, None, std::slice::from_ref(&sample), false),
                true,
            ),
            ("gateway API ingress and a selector", attach(&sample_gateway, Some(&gw_selector), &[], true), true),
            (
                "gateway API ingress and a selector (policy attachment only)",
                attach(&sample_gateway, Some(&gw_selector), &[], false),
                false,
            ),
            (
                "gateway API ingress and both a targetRef and a selector",
                attach(&sample_gateway, Some(&gw_selector), std::slice::from_ref(&sample), false),
                true,
            ),
            (
                "gateway API ingress and non-matching targetRef",
                attach(&sample_gateway, None, std::slice::from_ref(&waypoint), true),
                false,
            ),
            ("gateway API ingress and no targetRef or selector", attach(&sample_gateway, None, &[], true), true),
        ];
        for (name, got, want) in cases {
            assert_eq!(got, want, "{name}");
        }
        // (And with the flag off, a namespace-wide policy does not attach
        // to a gateway either: ShouldAttachPolicy's len(targetRefs) == 0.)
        assert!(!attach(&sample_gateway, None, &[], false));
        assert!(attach(&regular, None, &[], false));
    }

    #[test]
    fn values_that_do_not_read_are_refused_as_istiod_refuses_them() {
        assert!(super::check_value("CLUSTER", &json!({"name": "x", "connect_timeout": "1s"})).is_ok());
        let e = super::check_value(
            "HTTP_FILTER",
            &json!({"name": "x", "typed_config": {"@type": "type.googleapis.com/not.a.Type"}}),
        )
        .unwrap_err();
        assert!(e.starts_with("referenced type unknown: "), "{e}");
        assert!(super::check_value("CLUSTER", &json!({"connect_timeout": 5})).is_err());
        // Unknown fields are dropped (istiod's non-strict read).
        assert!(super::check_value("CLUSTER", &json!({"no_such_field": 1})).is_ok());
    }

    /// istiod's proxyMatch: a version pattern never matches a proxy that
    /// sent no version; metadata must all match.
    #[test]
    fn proxies_match_by_version_and_metadata_as_istiod_matches_them() {
        let spec = json!({"configPatches": [{"applyTo": "CLUSTER",
            "match": {"proxy": {"proxyVersion": ".*", "metadata": {"A": "1"}}}, "patch": {"operation": "REMOVE"}}]});
        let f = super::EnvoyFilters::new("istio-system", [("istio-system", "f", "", &spec)]);
        let count = |version: &str, metadata: &[(&str, &str)]| {
            let p = super::Proxy { namespace: "a", labels: &[], version, metadata };
            f.applied(&p).of(super::ApplyTo::Cluster).len()
        };
        assert_eq!(count("1.28.0", &[("A", "1")]), 1);
        assert_eq!(count("", &[("A", "1")]), 0, "no version sent");
        assert_eq!(count("1.28.0", &[("A", "2")]), 0);
    }
}
