//! `loadgen multicluster`: a mesh of several clusters on fake Kubernetes
//! API servers (`istiod_kubewatch::fake`, real list/watch over HTTP). The
//! config cluster holds a scenario's mesh (its Istio config, its pods, the
//! proxies' namespaces); each remote cluster holds another scenario's
//! registry (the same service names, so every service spans every
//! cluster; its pods on `10.<128+k>.0.0/16`), registered with the config
//! cluster by a remote Secret. The churn ([`RemoteEds`]) scales endpoints
//! of the remotes' services up and down through their API servers, and a
//! proxy has converged when its load assignment holds every cluster's
//! endpoints.

use std::collections::BTreeMap;
use std::sync::Arc;
use std::time::Instant;

use istiod_kubewatch::fake::{self, FakeApi};
use serde_json::{Value, json};

use crate::churn::{Change, Changes, Expect, Stepper, cluster};
use crate::mesh::{self, Tweak};
use crate::scenario::{ChurnKind, Scenario};

/// The fake clusters of a run.
pub struct Clusters {
    /// The config cluster.
    pub primary: FakeApi,
    /// The remotes, by cluster ID.
    pub remotes: Vec<(String, FakeApi)>,
}

/// A remote cluster's ID.
pub fn remote_id(k: u32) -> String {
    format!("remote-{k}")
}

/// Pod address `ip` (10.128.0.0/16 as `mesh` writes it) in remote `k`.
fn remote_ip(ip: &str, k: u32) -> String {
    match ip.strip_prefix("10.128.") {
        Some(rest) => format!("10.{}.{rest}", 129 + k),
        None => ip.to_owned(),
    }
}

fn plural(kind: &str) -> Option<&'static str> {
    Some(match kind {
        "Service" => "services",
        "Pod" => "pods",
        "EndpointSlice" => "endpointslices",
        "Namespace" => "namespaces",
        "Node" => "nodes",
        "DestinationRule" => "destinationrules",
        "VirtualService" => "virtualservices",
        "Sidecar" => "sidecars",
        _ => return None,
    })
}

/// Applies `yaml`'s documents to `api`; for remote `k`, only the registry's
/// kinds, pod addresses moved to its range.
fn apply_docs(api: &FakeApi, yaml: &str, remote: Option<u32>) {
    for doc in yaml.split("\n---\n").map(|d| d.trim_start_matches("---\n")).filter(|d| !d.trim().is_empty()) {
        let Ok(mut v) = serde_yaml_ng::from_str::<Value>(doc) else { continue };
        let Some(plural) = v["kind"].as_str().and_then(plural) else { continue };
        if let Some(k) = remote {
            if !matches!(plural, "services" | "pods" | "endpointslices" | "namespaces" | "nodes") {
                continue;
            }
            move_addresses(&mut v, k);
        }
        api.apply(plural, v);
    }
}

fn move_addresses(v: &mut Value, k: u32) {
    if let Some(ip) = v["status"]["podIP"].as_str() {
        v["status"]["podIP"] = json!(remote_ip(ip, k));
    }
    for e in v["endpoints"].as_array_mut().into_iter().flatten() {
        for a in e["addresses"].as_array_mut().into_iter().flatten() {
            if let Some(ip) = a.as_str() {
                *a = json!(remote_ip(ip, k));
            }
        }
    }
}

/// Writes scenario `s`'s mesh into `api` (remote `k`: its registry only).
pub fn populate(api: &FakeApi, s: &Scenario, remote: Option<u32>) {
    let dir = std::env::temp_dir().join(format!("loadgen-mc-{}-{}", std::process::id(), remote.map_or(0, |k| k + 1)));
    // The nodes and namespaces as `mesh::write` writes them.
    if mesh::write(&Scenario { services: 0, sidecars: 0, ..s.clone() }, &dir).is_ok() {
        for entry in walk(&dir) {
            if let Ok(text) = std::fs::read_to_string(&entry) {
                apply_docs(api, &format!("---\n{text}"), remote);
            }
        }
    }
    let _ = std::fs::remove_dir_all(&dir);
    for i in 0..s.services {
        apply_docs(api, &mesh::service_yaml(s, i, Tweak::default()), remote);
    }
}

fn walk(dir: &std::path::Path) -> Vec<std::path::PathBuf> {
    let mut out = Vec::new();
    for e in std::fs::read_dir(dir).into_iter().flatten().flatten() {
        let p = e.path();
        if p.is_dir() {
            out.extend(walk(&p));
        } else {
            out.push(p);
        }
    }
    out.sort();
    out
}

/// A kubeconfig for `url` (no credentials: the fake asks none).
pub fn kubeconfig(url: &str) -> String {
    format!(
        "apiVersion: v1\nkind: Config\nclusters: [{{name: c, cluster: {{server: \"{url}\"}}}}]\n\
         users: [{{name: u, user: {{}}}}]\ncontexts: [{{name: c, context: {{cluster: c, user: u}}}}]\ncurrent-context: c\n"
    )
}

impl Clusters {
    /// Starts the config cluster (scenario `s`) and `remotes` remote
    /// clusters (scenario `r` each) on the current runtime, and registers
    /// the remotes with Secrets in `istio-system`.
    pub async fn start(s: &Scenario, r: &Scenario, remotes: u32) -> std::io::Result<Clusters> {
        let primary = FakeApi::start().await?;
        for res in fake::core_resources().into_iter().chain(fake::write_resources()).chain(fake::istio_resources()) {
            primary.install(res);
        }
        populate(&primary, s, None);
        let mut out = Vec::new();
        for k in 0..remotes {
            let api = FakeApi::start().await?;
            for res in fake::core_resources() {
                api.install(res);
            }
            populate(&api, r, Some(k));
            out.push((remote_id(k), api));
        }
        Ok(Clusters { primary, remotes: out })
    }

    /// Registers every remote with the config cluster (one Secret each).
    pub fn register(&self) {
        use base64::Engine;
        for (id, api) in &self.remotes {
            let data = json!({id.as_str(): base64::engine::general_purpose::STANDARD.encode(kubeconfig(&api.url()))});
            self.primary.apply(
                "secrets",
                json!({"apiVersion": "v1", "kind": "Secret", "type": "Opaque",
                       "metadata": {"name": format!("istio-remote-secret-{id}"), "namespace": "istio-system",
                                    "labels": {"istio/multiCluster": "true"}},
                       "data": data}),
            );
        }
    }
}

/// EDS churn in the remotes: each step drops (or restores) the last
/// endpoint of one service in one remote, through its API server.
pub struct RemoteEds {
    s: Scenario,
    r: Scenario,
    remotes: Vec<FakeApi>,
    dropped: BTreeMap<(usize, u32), bool>,
    stride: u32,
    next: u32,
    changes: Changes,
}

impl RemoteEds {
    /// Churn over `clusters`' remotes (scenario `r`), the config cluster
    /// being scenario `s`.
    pub fn new(s: &Scenario, r: &Scenario, clusters: &Clusters, changes: Changes) -> RemoteEds {
        let stride = [7919, 7907, 7901].into_iter().find(|p| !r.services.is_multiple_of(*p)).unwrap_or(1);
        RemoteEds {
            s: s.clone(),
            r: r.clone(),
            remotes: clusters.remotes.iter().map(|(_, a)| a.clone()).collect(),
            dropped: BTreeMap::new(),
            stride,
            next: 0,
            changes,
        }
    }

    /// Service `i`'s endpoints over every cluster as they stand.
    fn total(&self, i: u32) -> usize {
        let here = mesh::pods_of(&self.s, i).count();
        let there = mesh::pods_of(&self.r, i).count();
        let dropped = (0..self.remotes.len()).filter(|k| self.dropped.get(&(*k, i)).copied().unwrap_or(false)).count();
        here + there * self.remotes.len() - dropped
    }
}

impl Stepper for RemoteEds {
    fn step(&mut self) -> std::io::Result<Arc<Change>> {
        if self.remotes.is_empty() {
            return Err(std::io::Error::other("no remote clusters"));
        }
        let services = self.r.services.min(self.s.services).max(1);
        let mut i = 0;
        for _ in 0..services {
            i = ((u64::from(self.next) * u64::from(self.stride)) % u64::from(services)) as u32;
            self.next += 1;
            if mesh::pods_of(&self.r, i).nth(1).is_some() {
                break;
            }
        }
        let k = (self.next as usize) % self.remotes.len();
        let now = !self.dropped.get(&(k, i)).copied().unwrap_or(false);
        self.dropped.insert((k, i), now);
        let tweak = Tweak { dropped_endpoints: u32::from(now), ..Tweak::default() };
        let yaml = mesh::service_yaml(&self.r, i, tweak);
        let slice = yaml
            .split("\n---\n")
            .filter_map(|d| serde_yaml_ng::from_str::<Value>(d.trim_start_matches("---\n")).ok())
            .find(|v| v["kind"] == "EndpointSlice")
            .ok_or_else(|| std::io::Error::other("no EndpointSlice"))?;
        let mut slice = slice;
        move_addresses(&mut slice, k as u32);
        let id = self.changes.lock().map(|c| c.len() as u32).unwrap_or(0);
        let name = cluster(&self.s, i, "");
        let change = Arc::new(Change {
            id,
            at: Instant::now(),
            kind: ChurnKind::Eds,
            cluster: name.clone(),
            resource: name,
            expect: Expect::Endpoints(self.total(i)),
        });
        if let Ok(mut c) = self.changes.lock() {
            c.push(change.clone());
        }
        self.remotes[k].apply("endpointslices", slice);
        Ok(change)
    }
}
