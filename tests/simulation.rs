//! Istio's own simulation suites as the oracle (issue #33): the upstream
//! cases, ported as data (`tests/data/simulation/*.yaml`, each naming its
//! upstream test), run against the binary. Each case's objects go in a
//! `--configDir`, its proxy connects over ADS and is served listeners,
//! clusters and route configurations, and each call is matched through
//! them as Envoy would (tests/support/simulation.rs, after upstream's
//! `pilot/pkg/simulation/traffic.go`).
//!
//! Where we still differ from istiod, the case is listed with its reason in
//! `tests/data/simulation/known.yaml`; the test fails on any other
//! difference, and on a listed case that now passes (the list must shrink,
//! never hide a fix). `SIMULATION_FILTER=<substring>` runs the matching
//! cases only; `SIMULATION_VERBOSE=1` prints every failure in full.

use std::collections::{BTreeMap, BTreeSet};
use std::path::Path;
use std::sync::Mutex;

use istiod_proto::envoy::config::cluster::v3::Cluster;
use istiod_proto::envoy::config::core::v3::Node;
use istiod_proto::envoy::config::listener::v3::Listener;
use istiod_proto::envoy::config::route::v3::RouteConfiguration;
use istiod_proto::envoy::extensions::filters::network::http_connection_manager::v3::{
    HttpConnectionManager, http_connection_manager::RouteSpecifier,
};
use istiod_proto::envoy::service::discovery::v3::DiscoveryRequest;
use istiod_proto::prost::Message;
use istiod_proto::prost_types::{Struct, Value, value::Kind as ValueKind};
use istiod_proto::type_url;
use serde::Deserialize;

use crate::ads_client;
use crate::server::Server;
use crate::simulation_support::{Call, Outcome, Simulation, cluster_endpoints};

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct Suite {
    source: String,
    /// The domain upstream's config store gave its objects: `""` where the
    /// in-memory store leaves `config.Meta.Domain` empty, so that istiod's
    /// ResolveShortnameToFQDN made the short destination `a` into
    /// `a.default`. On a cluster (and here) the domain is `cluster.local`
    /// and the cluster is `outbound|80||a.default.svc.cluster.local`: the
    /// expected clusters are read as such.
    #[serde(default)]
    config_domain: Option<String>,
    tests: Vec<Case>,
}

/// `outbound|P|S|name.ns` (a short name resolved against an empty domain)
/// as istiod on a cluster names it: `outbound|P|S|name.ns.svc.cluster.local`.
fn qualify_short_clusters(c: &mut Case) {
    for e in &mut c.calls {
        let cl = &mut e.result.cluster;
        if let Some((prefix, host)) = cl.rsplit_once('|')
            && prefix.starts_with("outbound|")
            && host.matches('.').count() == 1
        {
            *cl = format!("{prefix}|{host}.svc.cluster.local");
        }
    }
}

#[derive(Deserialize, Clone)]
#[serde(deny_unknown_fields)]
struct Case {
    upstream: String,
    #[serde(default)]
    skip: Option<String>,
    #[serde(default)]
    mesh: Option<String>,
    #[serde(default)]
    env: BTreeMap<String, String>,
    #[serde(default)]
    config: String,
    #[serde(default)]
    proxy: ProxySpec,
    #[serde(default)]
    calls: Vec<Expect>,
    /// The inbound clusters served, exactly, when the case names any (and
    /// the endpoints of those given a list).
    #[serde(default)]
    clusters: Option<BTreeMap<String, Option<Vec<String>>>>,
    /// Route configuration name -> domain -> the sorted clusters of the
    /// virtual host holding it (`xdstest.ExtractVirtualHosts`); a null
    /// configuration: nothing expected.
    #[serde(default)]
    routes: BTreeMap<String, Option<Domains>>,
    /// Facts the loadbalancer suite states about a cluster after a Go
    /// function ran in memory; not read (the case says so in `skip`).
    #[serde(default)]
    #[allow(dead_code, reason = "documented in the data, not checked")]
    cluster_checks: Option<serde_yaml_ng::Value>,
}

/// Domain -> the sorted clusters of the virtual host holding it.
type Domains = BTreeMap<String, Option<Vec<String>>>;

#[derive(Deserialize, Clone)]
#[serde(deny_unknown_fields)]
struct Expect {
    #[serde(default)]
    name: String,
    call: Call,
    result: Outcome,
}

#[derive(Deserialize, Clone)]
#[serde(deny_unknown_fields)]
struct ProxySpec {
    #[serde(default = "sidecar")]
    r#type: String,
    #[serde(default = "default_ns")]
    namespace: String,
    #[serde(default = "default_ips")]
    ips: Vec<String>,
    #[serde(default)]
    labels: BTreeMap<String, String>,
    #[serde(default)]
    metadata: BTreeMap<String, serde_yaml_ng::Value>,
}

fn sidecar() -> String {
    "sidecar".into()
}
fn default_ns() -> String {
    "default".into()
}
fn default_ips() -> Vec<String> {
    vec!["1.1.1.1".into()]
}

impl Default for ProxySpec {
    fn default() -> Self {
        ProxySpec {
            r#type: sidecar(),
            namespace: default_ns(),
            ips: default_ips(),
            labels: BTreeMap::new(),
            metadata: BTreeMap::new(),
        }
    }
}

/// What one check came to.
#[derive(Debug, Clone, PartialEq, Eq)]
enum Verdict {
    Pass,
    Skip,
    Fail(String),
}

/// The suites, in the order of the issue.
const SUITES: [&str; 6] = ["sidecar_1", "sidecar_2", "gateway", "peer_authentication", "serviceentry", "loadbalancer"];

#[test]
#[allow(clippy::print_stderr, reason = "the per-suite table is the figure the issue asks for")]
fn upstream_simulation_cases_reach_what_istiod_serves() {
    let root = Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/data/simulation");
    let filter = std::env::var("SIMULATION_FILTER").unwrap_or_default();
    let verbose = std::env::var_os("SIMULATION_VERBOSE").is_some();
    let known: BTreeMap<String, String> =
        serde_yaml_ng::from_str(&std::fs::read_to_string(root.join("known.yaml")).unwrap()).unwrap();
    let mut work: Vec<(String, Case)> = Vec::new();
    for suite in SUITES {
        let path = root.join(format!("{suite}.yaml"));
        let Ok(text) = std::fs::read_to_string(&path) else { continue };
        let s: Suite = serde_yaml_ng::from_str(&text).unwrap_or_else(|e| panic!("{}: {e}", path.display()));
        assert!(s.source.starts_with("pilot/pkg/networking/core/"), "{}", s.source);
        let short_domain = s.config_domain.as_deref() == Some("");
        for mut c in s.tests {
            if short_domain {
                qualify_short_clusters(&mut c);
            }
            if filter.is_empty() || format!("{suite}::{}", c.upstream).contains(&filter) {
                work.push((suite.to_string(), c));
            }
        }
    }
    // Each case runs its own server; a few at once (the server is idle
    // while the harness matches).
    let queue = Mutex::new(work.into_iter());
    let verdicts: Mutex<Vec<(String, String, Verdict)>> = Mutex::new(Vec::new());
    std::thread::scope(|s| {
        for _ in 0..3 {
            s.spawn(|| {
                loop {
                    let Some((suite, case)) = queue.lock().unwrap().next() else { break };
                    let out = run_case(&case);
                    verdicts.lock().unwrap().extend(out.into_iter().map(|(check, v)| (suite.clone(), check, v)));
                }
            });
        }
    });
    let verdicts = verdicts.into_inner().unwrap();
    let mut table: BTreeMap<&str, [usize; 4]> = BTreeMap::new();
    let mut unexpected = Vec::new();
    let mut fixed = Vec::new();
    let mut seen = BTreeSet::new();
    for (suite, check, v) in &verdicts {
        let key = format!("{suite}::{check}");
        seen.insert(key.clone());
        let row = table.entry(suite.as_str()).or_default();
        match v {
            Verdict::Pass if known.contains_key(&key) => {
                row[0] += 1;
                fixed.push(key);
            }
            Verdict::Pass => row[0] += 1,
            Verdict::Skip => row[3] += 1,
            Verdict::Fail(why) if known.contains_key(&key) => {
                row[2] += 1;
                if verbose {
                    eprintln!("known: {key}: {why}");
                }
            }
            Verdict::Fail(why) => {
                row[1] += 1;
                unexpected.push(format!("{key}: {why}"));
            }
        }
    }
    eprintln!("suite                 pass  fail  known  skipped");
    for (suite, [p, f, k, s]) in &table {
        eprintln!("{suite:<20} {p:>5} {f:>5} {k:>6} {s:>8}");
    }
    if filter.is_empty() {
        let stale: Vec<&String> = known.keys().filter(|k| !seen.contains(*k)).collect();
        assert!(stale.is_empty(), "known.yaml names checks that do not exist: {stale:#?}");
    }
    assert!(
        fixed.is_empty() && unexpected.is_empty(),
        "{} checks differ from istiod:\n{}\n\n{} listed in known.yaml now pass (remove them): {fixed:#?}",
        unexpected.len(),
        unexpected.join("\n"),
        fixed.len()
    );
}

/// Runs one case: its checks (`<upstream>/<call name>`, or
/// `<upstream>/cluster <name>`) and their verdicts.
fn run_case(case: &Case) -> Vec<(String, Verdict)> {
    let clusters = case.clusters.clone().unwrap_or_default();
    let mut checks: Vec<String> = case
        .calls
        .iter()
        .enumerate()
        .map(|(i, e)| format!("{}/{}", case.upstream, if e.name.is_empty() { i.to_string() } else { e.name.clone() }))
        .chain(clusters.keys().map(|c| format!("{}/cluster {c}", case.upstream)))
        .chain(inbound_set(case).map(|_| format!("{}/inbound clusters", case.upstream)))
        .chain(case.routes.keys().map(|r| format!("{}/route {r}", case.upstream)))
        .collect();
    // Upstream repeats some names (Go's t.Run suffixes them `#01`).
    let mut seen: BTreeMap<String, usize> = BTreeMap::new();
    for c in &mut checks {
        let n = seen.entry(c.clone()).or_default();
        *n += 1;
        if *n > 1 {
            *c = format!("{c}#{:02}", *n - 1);
        }
    }
    if case.skip.is_some() {
        return checks.into_iter().map(|c| (c, Verdict::Skip)).collect();
    }
    let sim = match std::panic::catch_unwind(|| serve(case)) {
        Ok(Ok(sim)) => sim,
        Ok(Err(e)) => return checks.into_iter().map(|c| (c, Verdict::Fail(e.clone()))).collect(),
        Err(p) => {
            let e = p
                .downcast_ref::<String>()
                .cloned()
                .or_else(|| p.downcast_ref::<&str>().map(|s| s.to_string()))
                .unwrap_or_default();
            let e = format!("harness: {}", e.chars().take(600).collect::<String>());
            return checks.into_iter().map(|c| (c, Verdict::Fail(e.clone()))).collect();
        }
    };
    let mut out = Vec::new();
    let mut names = checks.into_iter();
    for e in &case.calls {
        let check = names.next().unwrap();
        let v = match sim.run(&e.call) {
            Err(err) => Verdict::Fail(format!("simulation: {err}")),
            Ok(got) => {
                let diff = got.mismatches(&e.result);
                if diff.is_empty() {
                    Verdict::Pass
                } else if got.error == Some(crate::simulation_support::SimError::NoListener) {
                    let names: Vec<&str> = sim.listeners.iter().map(|l| l.name.as_str()).collect();
                    Verdict::Fail(format!("{} (served listeners: {names:?})", diff.join("; ")))
                } else {
                    Verdict::Fail(format!("{} (got {got:?})", diff.join("; ")))
                }
            }
        };
        out.push((check, v));
    }
    for (name, want) in &clusters {
        let check = names.next().unwrap();
        let v = match sim.clusters.iter().find(|c| c.name == *name) {
            None => Verdict::Fail(format!(
                "cluster not served (served: {:?})",
                sim.clusters.iter().map(|c| c.name.as_str()).collect::<Vec<_>>()
            )),
            Some(c) => match want {
                None => Verdict::Pass,
                Some(want) => {
                    let mut got = cluster_endpoints(c);
                    let mut want = want.clone();
                    got.sort();
                    want.sort();
                    if got == want {
                        Verdict::Pass
                    } else {
                        Verdict::Fail(format!("endpoints: want {want:?} got {got:?}"))
                    }
                }
            },
        };
        out.push((check, v));
    }
    if inbound_set(case).is_some() {
        let check = names.next().unwrap();
        let got: BTreeSet<&str> =
            sim.clusters.iter().map(|c| c.name.as_str()).filter(|n| n.starts_with("inbound|")).collect();
        let want: BTreeSet<&str> = clusters.keys().map(|s| s.as_str()).collect();
        let v = if got == want { Verdict::Pass } else { Verdict::Fail(format!("want {want:?} got {got:?}")) };
        out.push((check, v));
    }
    for (name, want) in &case.routes {
        let check = names.next().unwrap();
        let rc = sim.routes.iter().find(|r| r.name == *name);
        let v = match (want, rc) {
            (None, _) => Verdict::Pass,
            (Some(_), None) => Verdict::Fail(format!(
                "route {name:?} not served (served: {:?})",
                sim.routes.iter().map(|r| r.name.as_str()).collect::<Vec<_>>()
            )),
            (Some(want), Some(rc)) => {
                let hosts = virtual_hosts(rc);
                let diff: Vec<String> = want
                    .iter()
                    .filter(|(d, w)| hosts.get(*d).cloned().flatten() != **w)
                    .map(|(d, w)| format!("{d:?}: want {w:?} got {:?}", hosts.get(d).cloned().flatten()))
                    .collect();
                if diff.is_empty() {
                    Verdict::Pass
                } else {
                    Verdict::Fail(format!("{} (have {:?})", diff.join("; "), hosts.keys().collect::<Vec<_>>()))
                }
            }
        };
        out.push((check, v));
    }
    out
}

/// The inbound clusters a case names, when it names only those (upstream's
/// TestInboundClusters compares the whole set).
fn inbound_set(case: &Case) -> Option<&BTreeMap<String, Option<Vec<String>>>> {
    case.clusters.as_ref().filter(|c| c.keys().all(|k| k.starts_with("inbound|")))
}

/// `xdstest.ExtractVirtualHosts`: each domain's sorted route clusters (Go's
/// nil when there are none).
fn virtual_hosts(rc: &RouteConfiguration) -> BTreeMap<String, Option<Vec<String>>> {
    use istiod_proto::envoy::config::route::v3::{route::Action, route_action::ClusterSpecifier};
    let mut out = BTreeMap::new();
    for vh in &rc.virtual_hosts {
        let mut dests: Vec<String> = vh
            .routes
            .iter()
            .filter_map(|r| match &r.action {
                Some(Action::Route(a)) => match &a.cluster_specifier {
                    Some(ClusterSpecifier::Cluster(c)) if !c.is_empty() => Some(c.clone()),
                    _ => None,
                },
                _ => None,
            })
            .collect();
        dests.sort();
        for d in &vh.domains {
            out.insert(d.clone(), if dests.is_empty() { None } else { Some(dests.clone()) });
        }
    }
    out
}

/// Kinds without a namespace.
const CLUSTER_SCOPED: [&str; 4] = ["Namespace", "GatewayClass", "Node", "MeshConfig"];

/// The case's objects with upstream's defaults applied (no namespace means
/// `default`), as one manifest.
fn manifest(config: &str) -> Result<String, String> {
    let mut out = String::new();
    for doc in serde_yaml_ng::Deserializer::from_str(config) {
        let mut v = serde_yaml_ng::Value::deserialize(doc).map_err(|e| format!("case config: {e}"))?;
        if v.is_null() {
            continue;
        }
        let kind = v.get("kind").and_then(|k| k.as_str()).unwrap_or_default().to_string();
        if !CLUSTER_SCOPED.contains(&kind.as_str())
            && let Some(meta) = v.get_mut("metadata").and_then(|m| m.as_mapping_mut())
            && meta.get("namespace").is_none()
        {
            meta.insert("namespace".into(), "default".into());
        }
        out.push_str("---\n");
        out.push_str(&serde_yaml_ng::to_string(&v).map_err(|e| e.to_string())?);
    }
    Ok(out)
}

fn yaml_to_value(v: &serde_yaml_ng::Value) -> Value {
    let kind = match v {
        serde_yaml_ng::Value::Bool(b) => ValueKind::BoolValue(*b),
        serde_yaml_ng::Value::Number(n) => ValueKind::StringValue(n.to_string()),
        serde_yaml_ng::Value::String(s) => ValueKind::StringValue(s.clone()),
        serde_yaml_ng::Value::Mapping(m) => ValueKind::StructValue(Struct {
            fields: m.iter().map(|(k, v)| (k.as_str().unwrap_or_default().to_string(), yaml_to_value(v))).collect(),
        }),
        serde_yaml_ng::Value::Sequence(s) => {
            ValueKind::ListValue(istiod_proto::prost_types::ListValue { values: s.iter().map(yaml_to_value).collect() })
        }
        _ => ValueKind::NullValue(0),
    };
    Value { kind: Some(kind) }
}

/// The ADS node of the case's proxy, as istio-agent describes it.
fn node(p: &ProxySpec) -> Node {
    let s = |v: &str| Value { kind: Some(ValueKind::StringValue(v.into())) };
    let mut fields: BTreeMap<String, Value> = BTreeMap::new();
    fields.insert("NAMESPACE".into(), s(&p.namespace));
    fields.insert("ISTIO_VERSION".into(), s("1.23.0"));
    fields.insert("INSTANCE_IPS".into(), s(&p.ips.join(",")));
    fields.insert("CLUSTER_ID".into(), s("Kubernetes"));
    fields.insert(
        "LABELS".into(),
        Value {
            kind: Some(ValueKind::StructValue(Struct {
                fields: p.labels.iter().map(|(k, v)| (k.clone(), s(v))).collect(),
            })),
        },
    );
    for (k, v) in &p.metadata {
        fields.insert(k.clone(), yaml_to_value(v));
    }
    let ip = p.ips.first().cloned().unwrap_or_default();
    Node {
        id: format!("{}~{ip}~app.test~{}.svc.cluster.local", p.r#type, p.namespace),
        metadata: Some(Struct { fields }),
        ..Default::default()
    }
}

/// Starts the binary on the case's objects and fetches what its proxy is
/// served.
fn serve(case: &Case) -> Result<Simulation, String> {
    let dir = tempfile::tempdir().unwrap();
    let objects = dir.path().join("objects");
    std::fs::create_dir(&objects).unwrap();
    std::fs::write(objects.join("case.yaml"), manifest(&case.config)?).unwrap();
    let mesh = dir.path().join("mesh");
    std::fs::write(&mesh, case.mesh.as_deref().unwrap_or("")).unwrap();
    let env: Vec<(&str, &str)> = case.env.iter().map(|(k, v)| (k.as_str(), v.as_str())).collect();
    let server = Server::start(&objects, &["--meshConfig", mesh.to_str().unwrap()], &env, None);
    let rt = ads_client::runtime();
    let served = rt.block_on(async {
        let mut ads = ads_client::connect(server.grpc, false).await;
        let fetch = |type_url: &str, names: Vec<String>, first: bool| DiscoveryRequest {
            node: first.then(|| node(&case.proxy)),
            type_url: type_url.into(),
            resource_names: names,
            ..Default::default()
        };
        ads.sotw(fetch(type_url::CLUSTER, vec![], true));
        let cds = ads.recv().await;
        ads.ack(&cds, &[]);
        ads.sotw(fetch(type_url::LISTENER, vec![], false));
        let lds = ads.recv().await;
        ads.ack(&lds, &[]);
        let clusters: Vec<Cluster> =
            cds.resources.iter().map(|a| Cluster::decode(a.value.as_slice()).unwrap()).collect();
        let listeners: Vec<Listener> =
            lds.resources.iter().map(|a| Listener::decode(a.value.as_slice()).unwrap()).collect();
        let mut route_names: BTreeSet<String> = BTreeSet::new();
        for l in &listeners {
            for fc in l.filter_chains.iter().chain(l.default_filter_chain.as_ref()) {
                for f in &fc.filters {
                    use istiod_proto::envoy::config::listener::v3::filter::ConfigType;
                    if let Some(ConfigType::TypedConfig(a)) = &f.config_type
                        && a.type_url == type_url::HTTP_CONNECTION_MANAGER
                        && let Some(RouteSpecifier::Rds(r)) =
                            HttpConnectionManager::decode(a.value.as_slice()).unwrap().route_specifier
                    {
                        route_names.insert(r.route_config_name);
                    }
                }
            }
        }
        let mut routes: Vec<RouteConfiguration> = Vec::new();
        if !route_names.is_empty() {
            ads.sotw(fetch(type_url::ROUTE_CONFIGURATION, route_names.into_iter().collect(), false));
            let rds = ads.recv().await;
            routes = rds.resources.iter().map(|a| RouteConfiguration::decode(a.value.as_slice()).unwrap()).collect();
        }
        Simulation { listeners, clusters, routes }
    });
    drop(server);
    Ok(served)
}
