//! The mesh configuration as istiod follows it (`pilot/pkg/bootstrap/mesh.go`,
//! `pkg/config/mesh/meshwatcher/collection.go`):
//!
//! - the `--meshConfig` file when it exists (the chart mounts the `istio`
//!   ConfigMap at `/etc/istio/config/mesh`), else, in Kubernetes, the `mesh`
//!   key of the `istio` ConfigMap (`istio-<REVISION>` for a revision) in
//!   istiod's namespace, else the defaults;
//! - with `SHARED_MESH_CONFIG` (Kubernetes only), that ConfigMap's `mesh`
//!   applied first, the file or the revision's ConfigMap over it;
//! - followed: a kubelet's ConfigMap update is a symlink swap (`..data`),
//!   so the file is read again and compared every [`POLL`]; the ConfigMaps
//!   are read as often. A change that parses and changes the settings
//!   rebuilds the mesh and pushes what it affects; a file or ConfigMap
//!   that does not parse is logged and the last good configuration stays
//!   ("invalid mesh config, using last known state").

use std::path::PathBuf;
use std::rc::Rc;
use std::sync::Arc;
use std::time::Duration;

use serde_json::Value;

use crate::ca::kapi::Api;
use crate::mesh::{MeshConfigError, MeshSettings};

/// How often the sources are read again.
pub(super) const POLL: Duration = Duration::from_millis(500);

/// The ConfigMap key istiod reads (`kubemesh.MeshConfigKey`).
const KEY: &str = "mesh";

/// istiod's `getMeshConfigMapName`: `istio`, or `istio-<revision>`.
pub(crate) fn configmap_name(revision: &str) -> String {
    match revision {
        "" | "default" => "istio".to_owned(),
        r => format!("istio-{r}"),
    }
}

/// Where the mesh configuration comes from.
#[derive(Clone)]
pub(crate) struct Sources {
    /// `--meshConfig`, when it existed at start.
    pub(crate) file: Option<PathBuf>,
    /// The revision's ConfigMap, when no file: (namespace, name).
    pub(crate) configmap: Option<(String, String)>,
    /// `SHARED_MESH_CONFIG`'s ConfigMap: (namespace, name).
    pub(crate) shared: Option<(String, String)>,
    /// The API server, for the ConfigMaps.
    pub(crate) api: Option<Api>,
    /// Applies what the environment sets over what the mesh config says.
    pub(crate) env: Env,
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
        let exists = std::fs::symlink_metadata(file).is_ok();
        let configmap = (!exists && api.is_some()).then(|| (namespace.to_owned(), configmap_name(revision)));
        Sources { file: exists.then(|| file.to_owned()), configmap, shared, api, env }
    }

    /// What each source holds now: (shared, primary) YAML texts, `None`
    /// where the source is absent (no ConfigMap, no key). An error is a
    /// source that could not be read.
    async fn read(&self) -> Result<(Option<String>, Option<String>), String> {
        let shared = match &self.shared {
            Some((ns, name)) => self.configmap(ns, name).await?,
            None => None,
        };
        let primary = match (&self.file, &self.configmap) {
            (Some(path), _) => {
                Some(std::fs::read_to_string(path).map_err(|e| format!("--meshConfig {}: {e}", path.display()))?)
            }
            (None, Some((ns, name))) => self.configmap(ns, name).await?,
            (None, None) => None,
        };
        Ok((shared, primary))
    }

    async fn configmap(&self, ns: &str, name: &str) -> Result<Option<String>, String> {
        let Some(api) = &self.api else { return Ok(None) };
        let cm = api.get(&format!("/api/v1/namespaces/{ns}/configmaps/{name}")).await?;
        Ok(cm.and_then(|cm| cm["data"][KEY].as_str().map(str::to_owned)))
    }

    /// Reads the sources and makes the settings (the environment's over
    /// the merged configuration over istiod's defaults).
    pub(crate) async fn load(&self) -> Result<(MeshSettings, Texts), MeshConfigError> {
        let err = |reason: String| MeshConfigError { path: self.describe(), reason };
        let texts = self.read().await.map_err(err)?;
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

/// The settings the texts give: the shared configuration first, the primary
/// over it (objects merged key by key, anything else replaced, as
/// `ApplyMeshConfig` applies YAML over a message).
fn settings(texts: &Texts, env: &Env) -> Result<MeshSettings, String> {
    let mut merged = Value::Null;
    for (what, text) in [("SHARED_MESH_CONFIG", &texts.0), ("mesh config", &texts.1)] {
        let Some(text) = text.as_deref().filter(|t| !t.trim().is_empty()) else { continue };
        let v: Value = serde_yaml_ng::from_str(text).map_err(|e| format!("{what}: {e}"))?;
        if !v.is_object() && !v.is_null() {
            return Err(format!("{what}: not a mapping"));
        }
        merge(&mut merged, v);
    }
    let yaml = if merged.is_null() { String::new() } else { merged.to_string() };
    let mut m = MeshSettings::parse(&yaml)?;
    env(&mut m);
    Ok(m)
}

/// `over` applied onto `base`: objects merged key by key, anything else
/// replaced.
fn merge(base: &mut Value, over: Value) {
    match (base, over) {
        (Value::Object(b), Value::Object(o)) => {
            for (k, v) in o {
                merge(b.entry(k).or_insert(Value::Null), v);
            }
        }
        (b, o) => *b = o,
    }
}

/// Follows the sources: every change that parses and changes the settings
/// is published in `settings` and handed to `changed` (which rebuilds the
/// mesh); an invalid one is logged and the last good settings stay.
pub(super) async fn run(
    sources: Sources,
    mut last: Texts,
    settings_tx: tokio::sync::watch::Sender<Arc<MeshSettings>>,
    changed: impl Fn(Arc<MeshSettings>),
) {
    loop {
        tokio::time::sleep(POLL).await;
        let texts = match sources.read().await {
            Ok(t) => t,
            // A file being swapped, or the API server away: try again.
            Err(e) => {
                tracing::debug!(target: "default", error = %e, "cannot read the mesh configuration; trying again");
                continue;
            }
        };
        if texts == last {
            continue;
        }
        last = texts;
        let next = match settings(&last, &sources.env) {
            Ok(m) => m,
            Err(e) => {
                tracing::warn!(target: "default", source = %sources.describe(), error = %e,
                    "invalid mesh config, using last known state");
                continue;
            }
        };
        if *settings_tx.borrow().as_ref() == next {
            tracing::info!(target: "default", "mesh configuration rewritten; nothing istiod-rs reads changed");
            continue;
        }
        tracing::info!(target: "default", source = %sources.describe(), "mesh configuration changed; rebuilding");
        let next = Arc::new(next);
        settings_tx.send_replace(next.clone());
        changed(next);
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
        assert_eq!(m.proxy_tracing["zipkin"]["address"], "z:9411", "nested objects merge");
        assert_eq!(settings(&(None, None), &none()).unwrap(), MeshSettings::default());
        let e = settings(&(None, Some("outboundTrafficPolicy: [1]".into())), &none()).unwrap_err();
        assert!(e.contains("outboundTrafficPolicy") || e.contains("invalid"), "{e}");
        assert!(settings(&(Some("- a list".into()), None), &none()).unwrap_err().contains("SHARED_MESH_CONFIG"));
    }

    #[test]
    fn configmap_names_follow_the_revision() {
        assert_eq!(configmap_name(""), "istio");
        assert_eq!(configmap_name("default"), "istio");
        assert_eq!(configmap_name("canary"), "istio-canary");
    }
}
