//! The mesh configuration as istiod follows it (`pilot/pkg/bootstrap/mesh.go`,
//! `pkg/config/mesh/meshwatcher/collection.go`):
//!
//! - the `--meshConfig` file when it exists (a ConfigMap mounted at
//!   `/etc/istio/config/mesh`; the current chart mounts none), else, in
//!   Kubernetes, the `mesh` key of the `istio` ConfigMap (`istio-<REVISION>`
//!   for a revision) in istiod's namespace, else the defaults;
//! - with `SHARED_MESH_CONFIG` (Kubernetes only), that ConfigMap's `mesh`
//!   applied first, the file or the revision's ConfigMap over it;
//! - followed: a kubelet's ConfigMap update is a symlink swap (`..data`),
//!   so the file is read again and compared every [`POLL`] (0.5 s); the
//!   ConfigMaps are asked for every 5 s. A change that parses and changes
//!   the settings rebuilds the mesh and pushes what it affects; a file or
//!   ConfigMap that does not parse is logged and the last good
//!   configuration stays ("invalid mesh config, using last known state").

use std::path::PathBuf;
use std::rc::Rc;
use std::sync::Arc;
use std::time::Duration;

use serde_json::Value;

use istiod_config::networks::MeshNetworks;
use istiod_kubewatch::kapi::Api;
use istiod_mesh::meshconfig::{MeshConfigError, MeshSettings};

/// How often the file is read again.
pub(super) const POLL: Duration = Duration::from_millis(500);
/// The ConfigMaps are asked for every this many [`POLL`]s (5 s).
const API_EVERY: u64 = 10;

/// The ConfigMap key istiod reads (`kubemesh.MeshConfigKey`).
const KEY: &str = "mesh";
/// The ConfigMap key of the mesh networks (`kubemesh.MeshNetworksKey`).
const NETWORKS_KEY: &str = "meshNetworks";

/// istiod's `getMeshConfigMapName`: `istio`, or `istio-<revision>`.
pub(crate) fn configmap_name(revision: &str) -> String {
    match istiod_kubewatch::kapi::revision_label(revision) {
        "default" => "istio".to_owned(),
        r => format!("istio-{r}"),
    }
}

/// Where the mesh configuration comes from.
pub(crate) struct Sources {
    /// `--meshConfig`, when it existed at start.
    file: Option<PathBuf>,
    /// The revision's ConfigMap, when no file: (namespace, name).
    configmap: Option<(String, String)>,
    /// `SHARED_MESH_CONFIG`'s ConfigMap: (namespace, name).
    shared: Option<(String, String)>,
    /// The API server, for the ConfigMaps.
    api: Option<Api>,
    /// Applies what the environment sets over what the mesh config says.
    env: Env,
    /// The ConfigMap key read.
    key: &'static str,
}

impl Sources {
    /// istiod's choice of sources (`getConfigurationSources`).
    pub(crate) fn choose(
        file: &std::path::Path,
        api: Option<Api>,
        namespace: &str,
        revision: &str,
        shared: &str,
        env: Env,
    ) -> Sources {
        let shared = (api.is_some() && !shared.is_empty()).then(|| (namespace.to_owned(), shared.to_owned()));
        // `os.Stat`: a dangling link is no file.
        let exists = std::fs::metadata(file).is_ok();
        let configmap = (!exists && api.is_some()).then(|| (namespace.to_owned(), configmap_name(revision)));
        Sources { file: exists.then(|| file.to_owned()), configmap, shared, api, env, key: KEY }
    }

    /// The mesh networks' sources, chosen as the mesh configuration's
    /// (istiod's `getConfigurationSources` with `--networksConfig` and the
    /// `meshNetworks` key).
    pub(crate) fn networks(
        file: &std::path::Path,
        api: Option<Api>,
        namespace: &str,
        revision: &str,
        shared: &str,
    ) -> Sources {
        let none: Env = Rc::new(|_: &mut MeshSettings| {});
        Sources { key: NETWORKS_KEY, ..Sources::choose(file, api, namespace, revision, shared, none) }
    }

    /// Reads the mesh networks: the networks, or why they cannot be used.
    pub(crate) async fn load_networks(&self) -> (Result<MeshNetworks, String>, Texts) {
        match self.read(true, &(None, None)).await {
            Ok(texts) => (networks(&texts), texts),
            Err(e) => (Err(e), (None, None)),
        }
    }

    /// What each source holds now: (shared, primary) YAML texts, `None`
    /// where the source is absent (no ConfigMap, no key). ConfigMaps are
    /// asked for only with `api` (else `last`'s are kept). An error is a
    /// source that could not be read.
    async fn read(&self, api: bool, last: &Texts) -> Result<Texts, String> {
        let shared = match &self.shared {
            Some((ns, name)) if api => self.configmap(ns, name).await?,
            _ => last.0.clone(),
        };
        let primary = match (&self.file, &self.configmap) {
            (Some(path), _) => Some(std::fs::read_to_string(path).map_err(|e| e.to_string())?),
            (None, Some((ns, name))) if api => self.configmap(ns, name).await?,
            _ => last.1.clone(),
        };
        Ok((shared, primary))
    }

    async fn configmap(&self, ns: &str, name: &str) -> Result<Option<String>, String> {
        let Some(api) = &self.api else { return Ok(None) };
        let cm = api.get(&format!("/api/v1/namespaces/{ns}/configmaps/{name}")).await?;
        Ok(cm.and_then(|cm| cm["data"][self.key].as_str().map(str::to_owned)))
    }

    /// Reads the sources and makes the settings (the environment's over
    /// the merged configuration over istiod's defaults).
    pub(crate) async fn load(&self) -> Result<(MeshSettings, Texts), MeshConfigError> {
        let err = |reason: String| MeshConfigError { path: self.describe(), reason };
        // The API server may not answer yet: istiod waits for its mesh
        // sources to sync; here, up to 30 s.
        let mut tries = 0;
        let texts = loop {
            match self.read(true, &(None, None)).await {
                Ok(t) => break t,
                Err(e) if self.api.is_some() && tries < 30 => {
                    tries += 1;
                    tracing::warn!(target: "default", error = %e, "cannot read the mesh configuration yet; trying again");
                    tokio::time::sleep(Duration::from_secs(1)).await;
                }
                Err(e) => return Err(err(e)),
            }
        };
        let settings = settings(&texts, &self.env).map_err(err)?;
        Ok((settings, texts))
    }

    /// The sources, for messages.
    pub(crate) fn describe(&self) -> String {
        let mut out = Vec::new();
        if let Some((ns, name)) = &self.shared {
            out.push(format!("ConfigMap {ns}/{name} (SHARED_MESH_CONFIG)"));
        }
        match (&self.file, &self.configmap) {
            (Some(f), _) => out.push(f.display().to_string()),
            (None, Some((ns, name))) => out.push(format!("ConfigMap {ns}/{name}")),
            (None, None) => out.push("istiod's defaults".into()),
        }
        out.join(" + ")
    }
}

/// What the environment sets over the mesh configuration.
pub(crate) type Env = Rc<dyn Fn(&mut MeshSettings)>;

/// The texts last read: (shared, primary).
pub(crate) type Texts = (Option<String>, Option<String>);

/// The settings the texts give, as istiod's `NewCollection` and
/// `ApplyMeshConfig` make them: the shared configuration first, the
/// primary over it. Each field a source names replaces the one before
/// (jsonpb sets each field it decodes anew), except: `defaultConfig`
/// replaces field by field with `proxyMetadata` merged key by key;
/// `defaultProviders` replaces field by field; `extensionProviders` merge
/// by name; `trustDomainAliases` are the sorted union. With two sources an
/// invalid one is logged and left out ("invalid mesh config, ignoring");
/// with one, it is an error (the caller keeps the last good settings).
fn settings(texts: &Texts, env: &Env) -> Result<MeshSettings, String> {
    let present: Vec<(&str, &str)> = [("SHARED_MESH_CONFIG", &texts.0), ("mesh config", &texts.1)]
        .into_iter()
        .filter_map(|(what, t)| Some((what, t.as_deref()?)))
        .collect();
    let mut merged = Value::Null;
    for (what, text) in &present {
        let parsed = parse_source(text).map_err(|e| format!("{what}: {e}"));
        match parsed {
            Ok(v) => merged = apply(merged, v),
            Err(e) if present.len() > 1 => {
                tracing::warn!(target: "default", error = %e, "invalid mesh config, ignoring");
            }
            Err(e) => return Err(e),
        }
    }
    let yaml = if merged.is_null() { String::new() } else { merged.to_string() };
    let mut m = MeshSettings::parse(&yaml)?;
    env(&mut m);
    for note in &m.notes {
        tracing::warn!(target: "default", "mesh config read and not applied: {note}");
    }
    Ok(m)
}

/// The mesh networks the texts give: the primary's networks over the
/// shared configuration's, by name; an invalid source is left out when
/// the other is good.
fn networks(texts: &Texts) -> Result<MeshNetworks, String> {
    let parsed = [&texts.0, &texts.1].map(|t| t.as_deref().map(MeshNetworks::parse));
    let mut out = MeshNetworks::default();
    let mut errs = Vec::new();
    for p in parsed.into_iter().flatten() {
        match p {
            Ok(n) => out.networks.extend(n.networks),
            Err(e) => errs.push(e),
        }
    }
    // istiod resolves hostname gateways (RESOLVE_HOSTNAME_GATEWAYS, on by
    // default); istiod-rs does not yet: said, not dropped silently.
    for (name, n) in &out.networks {
        for a in
            n.gateways.iter().filter_map(|g| g.address.as_deref()).filter(|a| a.parse::<std::net::IpAddr>().is_err())
        {
            tracing::warn!(target: "default", network = %name, gateway = %a,
                "read and not applied: a meshNetworks gateway named by hostname is not resolved (RESOLVE_HOSTNAME_GATEWAYS)");
        }
    }
    match (errs.is_empty(), texts.0.is_some() && texts.1.is_some() && errs.len() == 1) {
        (true, _) => Ok(out),
        (false, true) => {
            tracing::warn!(target: "default", error = %errs[0], "invalid mesh networks, ignoring");
            Ok(out)
        }
        (false, false) => Err(errs.join("; ")),
    }
}

/// One source's YAML, checked alone.
fn parse_source(text: &str) -> Result<Value, String> {
    if text.trim().is_empty() {
        return Ok(Value::Null);
    }
    let v: Value = serde_yaml_ng::from_str(text).map_err(|e| e.to_string())?;
    if !v.is_object() && !v.is_null() {
        return Err("not a mapping".into());
    }
    MeshSettings::parse(text)?;
    Ok(v)
}

/// `over` applied onto `base` as `ApplyMeshConfig` applies a source.
fn apply(base: Value, over: Value) -> Value {
    let (mut b, o) = match (base, over) {
        (Value::Object(b), Value::Object(o)) => (b, o),
        (base, Value::Null) => return base,
        (_, over) => return over,
    };
    for (k, v) in o {
        let next = match (k.as_str(), b.remove(&k), v) {
            ("defaultConfig", Some(prev), v) => fields(prev, v, Some("proxyMetadata")),
            ("defaultProviders", Some(prev), v) => fields(prev, v, None),
            ("extensionProviders", Some(Value::Array(mut out)), v) => {
                for p in v.as_array().cloned().unwrap_or_default() {
                    match out.iter_mut().find(|e| e.get("name").is_some() && e.get("name") == p.get("name")) {
                        Some(e) => *e = p,
                        None => out.push(p),
                    }
                }
                Value::Array(out)
            }
            ("trustDomainAliases", Some(Value::Array(prev)), v) => {
                let mut all: Vec<Value> = prev.into_iter().chain(v.as_array().cloned().unwrap_or_default()).collect();
                all.sort_by_key(|a| a.to_string());
                all.dedup();
                Value::Array(all)
            }
            (_, _, v) => v,
        };
        b.insert(k, next);
    }
    Value::Object(b)
}

/// A message `over` applied field by field onto `base` (each field
/// replaced), the map field `merged` (if any) merged key by key.
fn fields(base: Value, over: Value, merged: Option<&str>) -> Value {
    let (Value::Object(mut b), Value::Object(o)) = (base, over.clone()) else { return over };
    for (f, v) in o {
        let next = match (b.remove(&f), v) {
            (Some(Value::Object(mut m)), Value::Object(n)) if Some(f.as_str()) == merged => {
                m.extend(n);
                Value::Object(m)
            }
            (_, v) => v,
        };
        b.insert(f, next);
    }
    Value::Object(b)
}

/// Follows the sources: every change that parses and changes the settings
/// is published in `settings_tx`, then `changed` is called (which rebuilds
/// the mesh); an invalid one is logged and the last good settings stay.
pub(super) async fn run(
    sources: Sources,
    nets: Sources,
    mut last: Texts,
    mut last_nets: Texts,
    settings_tx: tokio::sync::watch::Sender<Arc<MeshSettings>>,
    mut roots: Option<tokio::sync::watch::Receiver<u64>>,
    changed: impl Fn(),
) {
    for round in 1u64.. {
        // The CA's roots changed (ISTIO_MULTIROOT_MESH's trust bundle):
        // the environment's part of the settings is made again.
        let roots_changed = async {
            match roots.as_mut() {
                Some(r) => r.changed().await.is_ok(),
                None => std::future::pending().await,
            }
        };
        tokio::select! {
            () = tokio::time::sleep(POLL) => {}
            alive = roots_changed => {
                if !alive {
                    roots = None;
                    continue;
                }
                let current = settings_tx.borrow().clone();
                let mut next = (*current).clone();
                (sources.env)(&mut next);
                if next != *current {
                    tracing::info!(target: "default", "the CA's roots changed; rebuilding");
                    settings_tx.send_replace(Arc::new(next));
                    changed();
                }
                continue;
            }
        }
        let api = round % API_EVERY == 0;
        let (texts, net_texts) = match (sources.read(api, &last).await, nets.read(api, &last_nets).await) {
            (Ok(t), Ok(n)) => (t, n),
            // A file being swapped, or the API server away: try again.
            (Err(e), _) | (_, Err(e)) => {
                tracing::debug!(target: "default", source = %sources.describe(), error = %e,
                    "cannot read the mesh configuration or networks; trying again");
                continue;
            }
        };
        if texts == last && net_texts == last_nets {
            continue;
        }
        let current = settings_tx.borrow().clone();
        let mut next = match (texts != last).then(|| settings(&texts, &sources.env)) {
            None => (*current).clone(),
            Some(Ok(m)) => m,
            Some(Err(e)) => {
                tracing::warn!(target: "default", source = %sources.describe(), error = %e,
                    "invalid mesh config, using last known state");
                (*current).clone()
            }
        };
        next.networks.mesh = match networks(&net_texts) {
            Ok(n) => n,
            Err(e) => {
                if net_texts != last_nets {
                    tracing::warn!(target: "default", source = %nets.describe(), error = %e,
                        "invalid mesh networks, using last known state");
                }
                current.networks.mesh.clone()
            }
        };
        let what = if texts != last { "mesh configuration" } else { "mesh networks" };
        (last, last_nets) = (texts, net_texts);
        if *current == next {
            tracing::info!(target: "default", "{what} rewritten; nothing istiod-rs reads changed");
            continue;
        }
        tracing::info!(target: "default", source = %sources.describe(), networks = %nets.describe(), "{what} changed; rebuilding");
        settings_tx.send_replace(Arc::new(next));
        changed();
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn none() -> Env {
        Rc::new(|_: &mut MeshSettings| {})
    }

    #[test]
    fn the_primary_applies_over_the_shared_configuration() {
        let shared = "rootNamespace: shared-root\ntrustDomain: shared.example\ndefaultConfig:\n  tracing:\n    sampling: 5\n    zipkin: {address: z:9411}\n";
        let primary = "trustDomain: primary.example\ndefaultConfig:\n  tracing:\n    sampling: 50\n";
        let m = settings(&(Some(shared.into()), Some(primary.into())), &none()).unwrap();
        assert_eq!(m.root_namespace, "shared-root", "kept from the shared configuration");
        assert_eq!(m.trust_domain, "primary.example", "the primary wins");
        assert_eq!(m.proxy_tracing["sampling"], 50.0);
        assert!(m.proxy_tracing.get("zipkin").is_none(), "defaultConfig.tracing replaced whole: {}", m.proxy_tracing);
        let m = settings(
            &(
                Some("defaultConfig: {proxyMetadata: {A: a, B: b}, concurrency: 2}\n".into()),
                Some("defaultConfig: {proxyMetadata: {B: c}}\ndiscoverySelectors: [{matchLabels: {x: y}}]\n".into()),
            ),
            &none(),
        )
        .unwrap();
        assert_eq!(
            m.raw["defaultConfig"]["proxyMetadata"],
            serde_json::json!({"A": "a", "B": "c"}),
            "proxyMetadata merges"
        );
        assert_eq!(m.raw["defaultConfig"]["concurrency"], 2, "other defaultConfig fields stay");
        assert_eq!(settings(&(None, None), &none()).unwrap(), MeshSettings::default());
        let e = settings(&(None, Some("outboundTrafficPolicy: [1]".into())), &none()).unwrap_err();
        assert!(e.contains("outboundTrafficPolicy") || e.contains("invalid"), "{e}");
        assert!(settings(&(Some("- a list".into()), None), &none()).unwrap_err().contains("SHARED_MESH_CONFIG"));
        // Two sources: an invalid one is left out, the other applies.
        let m = settings(&(Some("- a list".into()), Some("rootNamespace: r\n".into())), &none()).unwrap();
        assert_eq!(m.root_namespace, "r");
        let m = settings(&(Some("rootNamespace: s\n".into()), Some("outboundTrafficPolicy: [1]".into())), &none());
        assert_eq!(m.unwrap().root_namespace, "s");
        // Fields replace (an empty outboundTrafficPolicy is ALLOW_ANY, a
        // list is the primary's); providers merge by name; aliases are
        // the union; defaultConfig's fields replace one by one.
        let shared = "outboundTrafficPolicy: {mode: REGISTRY_ONLY}\ntrustDomainAliases: [a.example]\n\
                      extensionProviders: [{name: z, zipkin: {service: z.ns.svc, port: 9411}}, {name: keep, prometheus: {}}]\n";
        let primary = "outboundTrafficPolicy: {}\ntrustDomainAliases: [b.example]\n\
                       extensionProviders: [{name: z, zipkin: {service: z2.ns.svc, port: 9411}}]\n";
        let m = settings(&(Some(shared.into()), Some(primary.into())), &none()).unwrap();
        assert_eq!(
            m.outbound,
            istiod_mesh::meshconfig::OutboundPolicy::AllowAny,
            "replaced, as jsonpb sets each field anew"
        );
        assert_eq!(m.raw["trustDomainAliases"], serde_json::json!(["a.example", "b.example"]));
        assert_eq!(m.extension_providers["z"].1["service"], "z2.ns.svc");
        assert!(m.extension_providers.contains_key("keep"));
    }

    /// istiod's start: a missing file and no API server is istiod's
    /// defaults; a file that does not parse stops the start, naming it.
    #[test]
    fn a_missing_file_means_defaults_and_an_invalid_one_is_an_error() {
        let rt = tokio::runtime::Builder::new_current_thread().enable_all().build().unwrap();
        let dir = tempfile::tempdir().unwrap();
        let missing = Sources::choose(&dir.path().join("mesh"), None, "istio-system", "", "", none());
        let (m, texts) = rt.block_on(missing.load()).unwrap();
        assert_eq!((m, texts), (MeshSettings::default(), (None, None)));
        std::fs::write(dir.path().join("mesh"), "enableAutoMtls: [1]\n").unwrap();
        let bad = Sources::choose(&dir.path().join("mesh"), None, "istio-system", "", "", none());
        let e = rt.block_on(bad.load()).unwrap_err().to_string();
        assert!(e.contains("--meshConfig") && e.contains(&dir.path().display().to_string()), "{e}");
    }

    /// The mesh networks: the primary's networks over the shared ones by
    /// name; one invalid source of two is left out, a lone invalid one is
    /// an error naming what istiod's validation says.
    #[test]
    fn mesh_networks_merge_by_name_and_invalid_ones_are_refused() {
        let shared = "networks: {a: {gateways: [{address: 1.1.1.1, port: 15443}]}, b: {}}\n";
        let primary = "networks: {a: {gateways: [{address: 2.2.2.2, port: 15443}]}}\n";
        let n = networks(&(Some(shared.into()), Some(primary.into()))).unwrap();
        assert_eq!(n.networks.keys().collect::<Vec<_>>(), ["a", "b"]);
        assert_eq!(n.networks["a"].gateways[0].address.as_deref(), Some("2.2.2.2"));
        let bad = "networks: {a: {gateways: [{address: 1.1.1.1, port: 0}]}}\n";
        let e = networks(&(None, Some(bad.into()))).unwrap_err();
        assert_eq!(e, "invalid network a: port number 0 must be in the range 1..65535");
        assert_eq!(networks(&(Some(bad.into()), Some(primary.into()))).unwrap().networks.len(), 1);
        assert_eq!(networks(&(None, None)).unwrap(), MeshNetworks::default());
    }

    #[test]
    fn configmap_names_follow_the_revision() {
        assert_eq!(configmap_name(""), "istio");
        assert_eq!(configmap_name("default"), "istio");
        assert_eq!(configmap_name("canary"), "istio-canary");
    }
}
