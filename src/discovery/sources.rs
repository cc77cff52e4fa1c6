//! The sources the control thread follows (`--configDir` or Kubernetes),
//! what it keeps of them for the debug endpoints, and how each new set of
//! objects reaches the store.

use std::cell::RefCell;
use std::collections::BTreeMap;
use std::rc::Rc;
use std::sync::Arc;

use istiod_kubewatch::config_dir::{ConfigDir, DirEvent, Loaded};
use serde_json::{Value, json};
use tokio::sync::mpsc;

use istiod_xds::ads;

use super::StartError;
use istiod_mesh::generator::MeshInput;
use istiod_mesh::translate;
use istiod_mesh::update::update;

/// What the in-cluster analysis reads: the objects and the mesh
/// configuration, as of the last change it concerns.
pub(super) type AnalysisInput = Option<Arc<(istiod_config::objects::Objects, Value)>>;

/// What the control thread keeps between changes, and the debug endpoints
/// show.
#[derive(Default)]
pub(super) struct State {
    /// What `/debug/config_report` shows of the source: counts, rejected
    /// documents, gateway problems.
    pub(super) configz: Value,
    /// The objects the model was last built from (after the discovery
    /// filter): `/debug/configz` shows their Istio and Gateway API ones,
    /// and what-if predictions (`whatif.rs`) change a copy.
    pub(super) objects: Arc<istiod_config::objects::Objects>,
    /// The model last sent to the cores (weak: only to know it again in
    /// the cores' snapshot; its allocation, hence its address, outlives
    /// it) and the objects it was built from: what-if starts from what is
    /// served.
    pub(super) published: Option<(std::sync::Weak<MeshInput>, Arc<istiod_config::objects::Objects>)>,
    /// EndpointSlice endpoints whose Pod is not known, by service host
    /// (istiod's `endpoint_no_pod`, `pilot_k8s_endpoints_pending_pod`).
    pub(super) pending_pods: BTreeMap<String, std::collections::BTreeSet<String>>,
    /// The generators' input last published (its model, translation and
    /// fingerprints are what the next change is compared with).
    pub(super) mesh: Option<Arc<MeshInput>>,
    /// The mesh settings in force, as `mesh_watch.rs` publishes them (the
    /// next model is built with them).
    pub(super) settings: Option<tokio::sync::watch::Receiver<Arc<istiod_mesh::meshconfig::MeshSettings>>>,
    /// The source is Kubernetes: `discoverySelectors` filter its objects
    /// (istiod's file config store is not filtered).
    pub(super) namespace_filter: bool,
    /// A rebuild from every object was asked for (a new mesh configuration
    /// or revision tags): the next whole update is not the objects'
    /// changes, so it counts no inbound updates.
    pub(super) rebuild: bool,
    /// The JWT key sets the resolver has (`jwks.rs`); every model built
    /// carries them.
    pub(super) jwks: Arc<istiod_mesh::model::FetchedJwks>,
    /// Tells the resolver which key sets the newest model wants.
    pub(super) jwks_wanted: Option<mpsc::UnboundedSender<std::collections::BTreeSet<istiod_mesh::model::JwksKey>>>,
    /// Which gateways may read Secrets, as the API server said
    /// (`secret_access.rs`); every model built carries it.
    pub(super) secret_access: Arc<istiod_mesh::model::credentials::SecretAccess>,
    /// The webhooks, which read the ProxyConfig resources in force.
    pub(super) webhooks: Option<std::rc::Rc<istiod_webhook::Webhooks>>,
    /// Where the Gateways to deploy go (the elected replica deploys
    /// them), with this instance's revision.
    pub(super) gateway_deploy:
        Option<(tokio::sync::watch::Sender<Arc<super::gateway_deploy::Desired>>, super::revisions::Tags)>,
    /// Where the ServiceEntries go for IP auto-allocation (the elected
    /// replica writes their addresses).
    pub(super) ipallocate: Option<tokio::sync::watch::Sender<Arc<Vec<super::ipallocate::Entry>>>>,
    /// Where the nodes to untaint go, with the istio-cni pods' namespace
    /// and the taint (`PILOT_ENABLE_NODE_UNTAINT_CONTROLLERS`).
    pub(super) untaint: Option<super::untaint::Desired>,
    /// Where the analysis messages go as statuses (`PILOT_ENABLE_ANALYSIS`
    /// in a cluster: the `istio-analyze-leader` writes them).
    pub(super) analysis_status:
        Option<tokio::sync::watch::Sender<Arc<Vec<istiod_config::gateway_convert::ObjectStatus>>>>,
    /// `PILOT_ENABLE_ANALYSIS`: what the analysis reads, as of the last
    /// change it concerns (the objects and the mesh configuration); the
    /// debouncing task ([`analysis_loop`]) runs it.
    pub(super) analysis_input: Option<tokio::sync::watch::Sender<AnalysisInput>>,
    /// `PILOT_ENABLE_ANALYSIS`: the last messages, by object path (logged
    /// when new; an object whose messages went away is written empty).
    pub(super) analysis: Option<BTreeMap<String, Vec<istiod_analysis::Message>>>,
    /// Every object that had analysis messages while this replica ran:
    /// its status is kept emptied while it has none (the writer writes a
    /// status once per change, and only while it leads).
    pub(super) analysis_ever: std::collections::BTreeSet<String>,
    /// Where the Gateway API statuses go (the elected replica writes them).
    pub(super) gateway_status:
        Option<tokio::sync::watch::Sender<Arc<Vec<istiod_config::gateway_convert::ObjectStatus>>>>,
    /// Where the ambient statuses go (the `istio-status-leader` writes
    /// them).
    pub(super) ambient_status:
        Option<tokio::sync::watch::Sender<Arc<Vec<istiod_config::gateway_convert::ObjectStatus>>>>,
    /// Where the Ingress statuses go (the `istio-leader` writes them).
    pub(super) ingress_status:
        Option<tokio::sync::watch::Sender<Arc<Vec<istiod_config::gateway_convert::ObjectStatus>>>>,
    /// The ambient index, with `PILOT_ENABLE_AMBIENT` (its resources go
    /// to the store with the translation's).
    pub(super) ambient: Option<Ambient>,
    /// The pods node authorization reads (`CA_TRUSTED_NODE_ACCOUNTS`,
    /// Kubernetes only).
    pub(super) node_pods: Option<Arc<super::node_pods::NodePods>>,
    /// The remote clusters (Kubernetes only).
    pub(super) remotes: Option<super::remotes::Remotes>,
    /// The remote registries the last model was built with.
    pub(super) remote_objects: Vec<(String, Arc<istiod_config::objects::Objects>)>,
}

/// The ambient index and the names it is built with that come from the
/// flags (the rest come from the mesh configuration in force).
pub(super) struct Ambient {
    /// Shared with a what-if prediction while one runs (it applies its
    /// change to a copy); changed in place otherwise.
    pub(super) index: Arc<istiod_ambient::Index>,
    pub(super) cluster_id: String,
    pub(super) network: String,
    pub(super) system_namespace: String,
}

impl Ambient {
    /// The names the index is built with, under the mesh settings `mesh`.
    pub(super) fn settings(
        &self,
        domain: &str,
        mesh: &istiod_mesh::meshconfig::MeshSettings,
    ) -> istiod_ambient::Settings {
        istiod_ambient::Settings {
            cluster_id: self.cluster_id.clone(),
            domain: domain.to_owned(),
            trust_domain: mesh.trust_domain.clone(),
            root_namespace: mesh.root_namespace.clone(),
            network: self.network.clone(),
            system_namespace: self.system_namespace.clone(),
        }
    }
}

/// `mesh` with the waypoint bindings `index` makes (the services each
/// waypoint serves, the ingress waypoints, the waypoints' workloads), for
/// waypoint proxies; `mesh` itself when they are the same.
pub(super) fn with_waypoints(mesh: Arc<MeshInput>, index: &istiod_ambient::Index) -> Arc<MeshInput> {
    let waypoints = istiod_waypoint::attachments(index);
    let ingress = istiod_waypoint::ingress_waypoints(index);
    let workloads = index.waypoint_workloads();
    if *mesh.waypoints == waypoints && *mesh.ingress_waypoints == ingress && *mesh.waypoint_workloads == workloads {
        return mesh;
    }
    let mut with = (*mesh).clone();
    with.waypoints = Arc::new(waypoints);
    with.ingress_waypoints = Arc::new(ingress);
    with.waypoint_workloads = Arc::new(workloads);
    Arc::new(with)
}

/// `/debug/config_report` for a config directory (its errors are logged
/// too).
pub(super) fn configz(dir: &std::path::Path, loaded: &Loaded) -> Value {
    for e in &loaded.errors {
        tracing::warn!(target: "model", error = %e, "rejected document; its last good version stays in force");
    }
    json!({
        "configDir": dir.display().to_string(),
        "services": loaded.objects.services.len(),
        "endpointSlices": loaded.objects.endpoint_slices.len(),
        "pods": loaded.objects.pods.len(),
        "nodes": loaded.objects.nodes.len(),
        "namespaces": loaded.objects.namespaces.len(),
        "istioConfig": istio_counts(&loaded.objects),
        "skippedDocuments": loaded.skipped,
        "errors": loaded.errors.iter().map(|e| json!({
            "file": e.file.display().to_string(),
            "document": e.index,
            "message": e.message,
        })).collect::<Vec<_>>(),
    })
}

/// Istio objects in force, by kind.
fn istio_counts(objects: &istiod_config::objects::Objects) -> Value {
    let mut counts = std::collections::BTreeMap::new();
    for o in &objects.istio {
        *counts.entry(format!("{:?}", o.kind())).or_insert(0u32) += 1;
    }
    json!(counts)
}

/// EndpointSlice endpoints whose `targetRef` names a Pod that is not
/// there, by their service's host.
fn endpoints_without_pods(
    objects: &istiod_config::objects::Objects,
    domain: &str,
) -> BTreeMap<String, std::collections::BTreeSet<String>> {
    let pods: std::collections::HashSet<(&str, &str)> =
        objects.pods.iter().map(|p| (p.metadata.ns(), p.metadata.name.as_str())).collect();
    let mut out: BTreeMap<String, std::collections::BTreeSet<String>> = BTreeMap::new();
    for slice in &objects.endpoint_slices {
        let Some(svc) = slice.service_name() else { continue };
        let ns = slice.metadata.ns();
        for ep in &slice.endpoints {
            let Some(r) = ep.target_ref.as_ref().filter(|r| r.kind == "Pod") else { continue };
            if !pods.contains(&(r.namespace.as_deref().unwrap_or(ns), r.name.as_str())) {
                out.entry(format!("{svc}.{ns}.svc.{domain}")).or_default().extend(ep.addresses.iter().cloned());
            }
        }
    }
    out
}

/// istiod's in-cluster analysis controller (`incluster/controller.go`):
/// the analysis runs once what it reads has not changed for a second, or
/// `interval` (`PILOT_ANALYSIS_INTERVAL`) after the first change of a
/// burst, whichever comes first (istiod's `Debouncer`), on the latest
/// objects; never while nothing changes. Off the publishing path: a
/// change is pushed without waiting for it.
pub(super) async fn analysis_loop(
    state: Rc<RefCell<State>>,
    mut rx: tokio::sync::watch::Receiver<AnalysisInput>,
    interval: std::time::Duration,
) {
    const QUIET: std::time::Duration = std::time::Duration::from_secs(1);
    loop {
        if rx.changed().await.is_err() {
            return;
        }
        let first = tokio::time::Instant::now();
        let mut last = first;
        loop {
            let deadline = std::cmp::min(last + QUIET, first + interval);
            tokio::select! {
                changed = rx.changed() => match changed {
                    Ok(()) => last = tokio::time::Instant::now(),
                    Err(_) => return,
                },
                () = tokio::time::sleep_until(deadline) => break,
            }
        }
        let input = rx.borrow_and_update().clone();
        if let Some(input) = input {
            // The analyzers run on a blocking thread: the control thread
            // goes on publishing meanwhile.
            let ran = tokio::task::spawn_blocking(move || {
                let messages = istiod_analysis::analyze(&input.0, &input.1);
                (messages, present_paths(&input.0))
            })
            .await;
            match ran {
                Ok((messages, present)) => record_analysis(&state, messages, &present),
                Err(e) => tracing::error!(target: "analysis", error = %e, "the analysis did not finish"),
            }
        }
    }
}

/// The API paths of the Istio objects in force.
fn present_paths(objects: &istiod_config::objects::Objects) -> std::collections::BTreeSet<String> {
    objects
        .istio
        .iter()
        .filter_map(|o| {
            let kind = o.kind().name();
            let (g, v, _, plural) = istiod_config::objects::KINDS.iter().find(|k| k.2 == kind)?;
            Some(format!("/apis/{g}/{v}/namespaces/{}/{plural}/{}", o.meta.ns(), o.meta.name))
        })
        .collect()
}

/// istiod's in-cluster analysis: the messages in `/debug/config_report`,
/// new ones logged (`Configuration analysis: ...`), and, in a cluster,
/// each object's `status.validationMessages` (emptied where its messages
/// went away).
fn record_analysis(
    state: &RefCell<State>,
    messages: Vec<istiod_analysis::Message>,
    present: &std::collections::BTreeSet<String>,
) {
    let mut s = state.borrow_mut();
    let Some(previous) = s.analysis.take() else { return };
    let mut by_path: BTreeMap<String, Vec<istiod_analysis::Message>> = BTreeMap::new();
    for m in messages {
        let Some((g, v, _, plural)) = istiod_config::objects::KINDS.iter().find(|k| k.2 == m.kind) else { continue };
        by_path.entry(format!("/apis/{g}/{v}/namespaces/{}/{plural}/{}", m.namespace, m.name)).or_default().push(m);
    }
    for m in by_path.values().flatten() {
        if !previous.values().flatten().any(|p| p == m) {
            let line = format!("Configuration analysis: {}", m.line());
            match m.level {
                "Error" => tracing::error!(target: "analysis", "{line}"),
                "Warning" => tracing::warn!(target: "analysis", "{line}"),
                _ => tracing::info!(target: "analysis", "{line}"),
            }
        }
    }
    s.configz["analysis"] = json!(by_path.values().flatten().map(|m| m.line()).collect::<Vec<_>>());
    // Objects gone are forgotten: their status is gone with them.
    s.analysis_ever.retain(|p| present.contains(p));
    s.analysis_ever.extend(by_path.keys().cloned());
    if let Some(tx) = &s.analysis_status {
        let mut statuses: Vec<istiod_config::gateway_convert::ObjectStatus> = by_path
            .iter()
            .map(|(path, msgs)| istiod_config::gateway_convert::ObjectStatus {
                path: path.clone(),
                status: json!({"validationMessages": msgs.iter().map(|m| m.base()).collect::<Vec<_>>()}),
                generation: None,
            })
            .collect();
        for path in s.analysis_ever.iter().filter(|p| !by_path.contains_key(*p)) {
            statuses.push(istiod_config::gateway_convert::ObjectStatus {
                path: path.clone(),
                status: json!({"validationMessages": []}),
                generation: None,
            });
        }
        tx.send_if_modified(|current| {
            let changed = **current != statuses;
            if changed {
                *current = Arc::new(statuses);
            }
            changed
        });
    }
    s.analysis = Some(by_path);
}

/// Rebuilds the model from `objects` and sends the resource changes.
pub(super) fn apply(
    state: &RefCell<State>,
    objects: istiod_config::objects::Objects,
    changed: Option<Vec<istiod_config::manifest::ObjectRef>>,
    configz: Value,
    domain: &str,
    tx: &Tx,
) {
    let started = std::time::Instant::now();
    let settings = state.borrow().settings.as_ref().map(|s| s.borrow().clone()).unwrap_or_default();
    let mesh = &settings;
    let (mut objects, mut changed) = (objects, changed);
    // Remote clusters follow their Secrets (before the discovery filter:
    // istiod's secret controller reads its namespace whatever the
    // selectors say); their registries join the objects, and a change
    // among them rebuilds whole.
    // A remote's objects changed: its refs join this update's (a ref
    // names no cluster; the services fast path rebuilds their hosts from
    // every cluster).
    let mut remotes = state.borrow_mut().remotes.take();
    let mut remote_changed = Some(Vec::new());
    if let Some(r) = remotes.as_mut() {
        r.reconcile(&objects);
        objects.remotes = r.objects();
        remote_changed = r.take_changed();
    }
    state.borrow_mut().remotes = remotes;
    {
        let mut s = state.borrow_mut();
        let same = s.remote_objects.len() == objects.remotes.len()
            && s.remote_objects.iter().zip(&objects.remotes).all(|(a, b)| a.0 == b.0 && Arc::ptr_eq(&a.1, &b.1));
        match (changed.as_mut(), remote_changed) {
            (Some(c), Some(r)) if !same || !r.is_empty() => {
                c.extend(r);
                c.sort();
                c.dedup();
            }
            (_, None) => changed = None,
            _ => {}
        }
        s.remote_objects.clone_from(&objects.remotes);
    }
    // Nodes to untaint, before the discovery filter: istiod's untainter
    // reads the CNI namespace's pods whatever the selectors say.
    let untaint = state.borrow().untaint.as_ref().and_then(|(_, namespace, taint)| {
        changed
            .as_deref()
            .is_none_or(|c| c.iter().any(|r| r.kind == "Pod" || r.kind == "Node"))
            .then(|| super::untaint::tainted_ready_nodes(&objects, namespace, taint))
    });
    if state.borrow().namespace_filter {
        discovery_filter(&mut objects, changed.as_mut(), mesh);
    }
    // The injector reads ProxyConfigs and nodes of the same objects.
    if let Some(hooks) = &state.borrow().webhooks {
        let inputs = istiod_webhook::inject::ClusterInputs::of(&objects, &mesh.root_namespace);
        *hooks.proxy_configs.borrow_mut() = std::sync::Arc::new(inputs);
    }
    // Endpoints naming a Pod not known (yet): istiod's endpoint resync
    // metrics; looked for again when slices or pods changed.
    let pods_touched =
        changed.as_deref().is_none_or(|c| c.iter().any(|r| r.kind == "EndpointSlice" || r.kind == "Pod"));
    if pods_touched {
        let pending = endpoints_without_pods(&objects, domain);
        let mut s = state.borrow_mut();
        let new: usize = pending
            .iter()
            .map(|(h, addrs)| {
                addrs.iter().filter(|a| !s.pending_pods.get(h).is_some_and(|old| old.contains(*a))).count()
            })
            .sum();
        if new > 0 {
            istiod_kubewatch::events::endpoints_without_pods(new as u64);
        }
        s.pending_pods = pending;
    }
    let (prev, jwks) = {
        let s = state.borrow();
        (s.mesh.clone(), s.jwks.clone())
    };
    let rebuild = std::mem::take(&mut state.borrow_mut().rebuild);
    if !(rebuild && changed.is_none()) {
        count_inbound_updates(&objects, changed.as_deref());
    }
    let (mut mesh, incremental) = update(prev.as_ref(), &objects, changed.as_deref(), domain, mesh, &jwks);
    let access = state.borrow().secret_access.clone();
    if !Arc::ptr_eq(&mesh.model.secret_access, &access) {
        mesh = Arc::new(mesh.with_secret_access(access));
    }
    if let Some(w) = &state.borrow().jwks_wanted {
        let _ = w.send(translate::authn::wanted_jwks(&mesh.model));
    }
    let mut ambient_changes = Vec::new();
    if let Some(pods) = &state.borrow().node_pods {
        pods.update(&objects, changed.as_deref());
    }
    if let Some(a) = state.borrow_mut().ambient.as_mut() {
        let s = a.settings(domain, &settings);
        let started = std::time::Instant::now();
        // (A copy only while a what-if prediction holds the index.)
        let index = Arc::make_mut(&mut a.index);
        let (ambient, rebuilt) = index.apply_counted(&objects, changed.as_deref(), &s);
        if !ambient.is_empty() {
            tracing::debug!(target: "ambient", changes = ambient.len(), ?rebuilt, us = started.elapsed().as_micros() as u64, "ambient index changed");
        }
        ambient_changes = ambient;
        mesh = with_waypoints(mesh, &a.index);
    }
    let empty = translate::Resources::default();
    let (old, new) = (prev.as_ref().map_or(&empty, |p| &p.translation.resources), &mesh.translation.resources);
    let mut changes = translate::diff_maps(old, new);
    changes.extend(ambient_changes);
    let touched = touched_names(prev.as_ref(), &mesh, &changes);
    let mut configz = configz;
    let gateways = istiod_mesh::generator::router::report(&mesh.model);
    if state.borrow().configz.get("gateways") != Some(&gateways) {
        // istiod's `RecordRejectedConfig`: each gateway server refused at
        // merging (counted here when the problems change).
        for r in gateways["rejectedServers"].as_array().into_iter().flatten() {
            let name = r["gateway"].as_str().unwrap_or_default().to_owned();
            istiod_xds::metrics::count_event(
                "pilot_total_rejected_configs",
                vec![("type", "gateway".to_owned()), ("name", name)],
            );
        }
        for (what, items) in gateways.as_object().into_iter().flatten() {
            for item in items.as_array().into_iter().flatten() {
                tracing::warn!(target: "model", kind = %what, "gateway configuration problem: {item}");
            }
        }
    }
    configz["gateways"] = gateways;
    // Read and not applied: logged once when it appears.
    let mut not_applied: Vec<String> =
        istiod_mesh::model::report::not_applied(&objects, &mesh.model).iter().map(|n| n.to_string()).collect();
    not_applied.extend(settings.notes.iter().map(|n| format!("mesh config: {n}")));
    // What ztunnels do not enforce of a policy, in istiod's status words.
    if state.borrow().ambient.is_some() {
        for o in &objects.istio {
            if let Some(note) = istiod_ambient::authz::ztunnel_note(&settings.root_namespace, o) {
                not_applied.push(format!("AuthorizationPolicy {}/{} at ztunnel: {note}", o.meta.ns(), o.meta.name));
            }
        }
    }
    let before: std::collections::BTreeSet<String> = state.borrow().configz["notApplied"]
        .as_array()
        .into_iter()
        .flatten()
        .filter_map(|v| v.as_str().map(str::to_owned))
        .collect();
    for n in not_applied.iter().filter(|n| !before.contains(*n)) {
        tracing::warn!(target: "model", "read and not applied: {n}");
    }
    configz["notApplied"] = json!(not_applied);
    // (Only when what the analyzers read may have changed.)
    if changed.as_deref().is_none_or(|c| {
        c.iter().any(|r| {
            matches!(
                r.kind.as_str(),
                "VirtualService"
                    | "DestinationRule"
                    | "Gateway"
                    | "ServiceEntry"
                    | "Telemetry"
                    | "EnvoyFilter"
                    | "Sidecar"
                    | "AuthorizationPolicy"
                    | "Service"
                    | "Pod"
                    | "Node"
                    | "Namespace"
                    | "Secret"
                    | "RequestAuthentication"
                    | "WasmPlugin"
            )
        })
    }) && let Some(tx) = &state.borrow().analysis_input
    {
        // (A copy: the analysis runs later, on the latest of a burst.)
        tx.send_replace(Some(Arc::new((objects.clone(), settings.raw.clone()))));
    }
    if state.borrow().analysis.is_some() {
        configz["analysis"] = state.borrow().configz["analysis"].clone();
    }
    // (Only when ServiceEntries may have changed.)
    let entries_changed = changed.as_deref().is_none_or(|c| c.iter().any(|r| r.kind == "ServiceEntry"));
    if let Some(tx) = state.borrow().ipallocate.as_ref().filter(|_| entries_changed) {
        let entries = super::ipallocate::entries(&objects);
        tx.send_if_modified(|current| {
            let changed = **current != entries;
            if changed {
                *current = Arc::new(entries);
            }
            changed
        });
    }
    if let (Some((tx, _, _)), Some(nodes)) = (state.borrow().untaint.as_ref(), untaint) {
        tx.send_if_modified(|current| {
            let changed = **current != nodes;
            if changed {
                *current = Arc::new(nodes);
            }
            changed
        });
    }
    if let Some((tx, tags)) = &state.borrow().gateway_deploy {
        let desired = super::gateway_deploy::desired(&objects, tags);
        tx.send_if_modified(|current| {
            let changed = **current != desired;
            if changed {
                *current = Arc::new(desired);
            }
            changed
        });
    }
    let state_now = state.borrow();
    // Only a replica that may write them needs them.
    let ingress = match state_now.ingress_status {
        Some(_) => istiod_mesh::model::ingress::statuses(&objects, &mesh.model.mesh.ingress),
        None => Vec::new(),
    };
    for (tx, statuses) in
        [(&state_now.gateway_status, &mesh.model.gateway_api.statuses), (&state_now.ingress_status, &ingress)]
    {
        let Some(tx) = tx else { continue };
        tx.send_if_modified(|current| {
            let changed = current.as_slice() != statuses.as_slice();
            if changed {
                *current = Arc::new(statuses.clone());
            }
            changed
        });
    }
    if let (Some(tx), Some(a)) = (&state_now.ambient_status, &state_now.ambient) {
        let statuses = a.index.statuses();
        tx.send_if_modified(|current| {
            let changed = !Arc::ptr_eq(current, &statuses);
            if changed {
                *current = statuses;
            }
            changed
        });
    }
    drop(state_now);
    let mut s = state.borrow_mut();
    let first = s.configz.is_null();
    s.configz = configz;
    // The objects replaced are freed on another thread: freeing a
    // thousand took about half a millisecond here, between the change and
    // its push (the control task that pushes runs on this thread after).
    let old_objects = std::mem::replace(&mut s.objects, Arc::new(objects));
    let old_published = s.published.take();
    s.mesh = Some(mesh.clone());
    if first || !changes.is_empty() || !touched.is_empty() {
        tracing::info!(
            target: "model",
            changes = changes.len(),
            touched = touched.len(),
            incremental,
            build_ms = started.elapsed().as_secs_f64() * 1000.0,
            "mesh changed"
        );
        crate::control::metrics::PUSHCONTEXT_INIT.record(started.elapsed());
        s.published = Some((Arc::downgrade(&mesh), s.objects.clone()));
        // The first publish is a full push.
        let reasons = if first { push_reasons(None) } else { push_reasons(changed.as_deref()) };
        let _ = tx.send(crate::control::Input { changes, mesh: Some(mesh), touched, reasons, full: false });
    } else if let Some((served, _)) = old_published.as_ref() {
        // Nothing served changed: what is served is these objects' too
        // (what-if starts from them, and from the ambient index that has
        // taken them in).
        s.published = Some((served.clone(), s.objects.clone()));
    }
    drop(s);
    istiod_xds::ads::drop_elsewhere((old_published, old_objects));
    // (After an update in place the old mesh shares nearly everything
    // with the new one: freed here, at once.)
    reap(prev.filter(|_| !incremental));
}

/// The per-class resources whose inputs may have changed from `prev` to
/// `mesh` (`changes`: the shared resources that did): every name they
/// may have, before and after. The cores generate them, so only their
/// names are known here; with `changes` they are the snapshot's delta.
pub(super) fn touched_names(
    prev: Option<&Arc<MeshInput>>,
    mesh: &Arc<MeshInput>,
    changes: &[translate::Change],
) -> Vec<(ads::Kind, Arc<str>)> {
    let empty = translate::Resources::default();
    let (old, new) = (prev.map_or(&empty, |p| &p.translation.resources), &mesh.translation.resources);
    let mut touched = Vec::new();
    let differs = |f: fn(&MeshInput) -> u64| prev.as_ref().is_some_and(|p| f(p) != f(mesh));
    if prev.as_ref().is_none_or(|p| p.inbound_generation() != mesh.inbound_generation()) {
        touched.extend(prev.as_ref().map(|p| istiod_mesh::generator::all_names(&p.model)).unwrap_or_default());
        touched.extend(istiod_mesh::generator::all_names(&mesh.model));
    }
    // Waypoints' resources read services, routes and endpoints: every
    // name they may have, before and after (generations tell whose changed).
    // Only where some waypoint exists, and only when something changed:
    // an update that changes nothing publishes nothing.
    let exist = |m: &MeshInput| !m.waypoints.is_empty() || !m.waypoint_workloads.is_empty();
    let waypoints_exist = exist(mesh) || prev.as_ref().is_some_and(|p| exist(p));
    let changed_anything = prev
        .as_ref()
        .is_none_or(|p| p.waypoints != mesh.waypoints || !changes.is_empty() || !mesh.changes.touched().is_empty());
    if waypoints_exist && changed_anything {
        touched.extend(prev.as_ref().map(|p| istiod_waypoint::all_names(p)).unwrap_or_default());
        touched.extend(istiod_waypoint::all_names(mesh));
    }
    // Sidecars' and gateways' load assignments whose HBONE endpoints (or
    // ingress waypoints) changed.
    if let Some(p) = prev.as_ref().filter(|_| istiod_mesh::node::ambient()) {
        touched.extend(istiod_waypoint::hbone::changed(p, mesh));
    }
    let mut touch = |wanted: &dyn Fn(ads::Kind) -> bool| {
        touched.extend(old.keys().chain(new.keys()).filter(|k| wanted(k.0)).cloned());
    };
    // DestinationRules changed: endpoints balanced by locality, and the
    // hash policies routes are rendered with per class, may differ.
    if differs(MeshInput::routing_generation) {
        touch(&|k| matches!(k, ads::Kind::Endpoint | ads::Kind::Route));
    }
    // What each proxy may see changed: every outbound name may have
    // appeared or gone for some of them.
    if differs(MeshInput::scope_generation) {
        touch(&|_| true);
    }
    // EnvoyFilters and extensions are applied per proxy as resources are
    // generated: when they change, every name they may touch, before and
    // after (generations then tell which ones changed for whom).
    let patched = |p: &MeshInput| {
        p.model.envoy_filters != mesh.model.envoy_filters || p.model.extensions != mesh.model.extensions
    };
    if let Some(p) = prev.as_ref().filter(|p| patched(p)) {
        touch(&|k| matches!(k, ads::Kind::Cluster | ads::Kind::Listener | ads::Kind::Route));
        for m in [p, &mesh] {
            touched.extend(istiod_mesh::generator::all_names(&m.model));
            touched.extend(istiod_mesh::generator::router::all_names(&m.model));
            touched.extend(istiod_mesh::generator::extensions::all_names(&m.model));
            // Waypoints take EnvoyFilters and extensions too.
            touched.extend(istiod_waypoint::all_names(m));
        }
    }
    // A new mesh configuration reaches the HBONE originate resources
    // (connect timeout, trust domains) and every waypoint resource.
    if let Some(p) = prev.as_ref().filter(|p| p.model.mesh != mesh.model.mesh) {
        for kind in [ads::Kind::Cluster, ads::Kind::Listener] {
            touched.push((kind, Arc::from(istiod_waypoint::CONNECT_ORIGINATE)));
        }
        touched.extend(istiod_waypoint::all_names(p));
        touched.extend(istiod_waypoint::all_names(mesh));
    }
    // PCDS's one ProxyConfig reads the trust bundle alone.
    if prev.as_ref().is_none_or(|p| p.model.mesh.trust_bundle != mesh.model.mesh.trust_bundle) {
        touched.push((ads::Kind::ProxyConfig, Arc::from(istiod_mesh::generator::PROXY_CONFIG)));
    }
    // Name tables read the services, the scoping and the mesh's DNS
    // switches: their one name, whenever any of those may have changed
    // (generations tell whose table did).
    let dns = |p: &MeshInput| (p.dns_digest, p.scope_generation(), p.model.mesh.dns);
    if prev.as_ref().is_none_or(|p| dns(p) != dns(mesh) || !mesh.changes.touched().is_empty()) {
        touched.push((ads::Kind::NameTable, Arc::from(istiod_mesh::generator::NAME_TABLE)));
    }
    // What routers read changed: every listener and route name a router
    // may have, before and after.
    if prev.as_ref().is_none_or(|p| p.router_generation() != mesh.router_generation()) {
        touched.extend(prev.as_ref().map(|p| istiod_mesh::generator::router::all_names(&p.model)).unwrap_or_default());
        touched.extend(istiod_mesh::generator::router::all_names(&mesh.model));
        // PILOT_FILTER_GATEWAY_CLUSTER_CONFIG: which clusters a router is
        // sent follows its routes; every outbound cluster name may have
        // come or gone (other proxies' unchanged ones are not re-sent).
        if istiod_mesh::generator::router::filtering_clusters() {
            touched.extend(old.keys().chain(new.keys()).filter(|k| k.0 == ads::Kind::Cluster).cloned());
        }
    }
    // AUTO_PASSTHROUGH routers' SNI-DNAT clusters copy outbound clusters:
    // when any cluster or what routers read changed, every such name.
    let clusters_changed = changes.iter().any(|(k, _, _)| *k == ads::Kind::Cluster);
    if clusters_changed || prev.as_ref().is_none_or(|p| p.router_generation() != mesh.router_generation()) {
        touched.extend(
            prev.as_ref().map(|p| istiod_mesh::generator::router::all_sni_dnat_names(&p.model)).unwrap_or_default(),
        );
        touched.extend(istiod_mesh::generator::router::all_sni_dnat_names(&mesh.model));
    }
    // Secrets: the SDS names of the ones that changed, and only those.
    if let Some(p) = &prev {
        touched.extend(istiod_mesh::generator::router::changed_secret_names(&p.model.secrets, &mesh.model.secrets));
        // Wasm pull secrets ride in ECDS resources.
        if p.model.secrets != mesh.model.secrets {
            touched.extend(istiod_mesh::generator::extensions::pulling_names(&mesh.model));
        }
        touched.extend(istiod_mesh::generator::router::changed_config_map_names(
            &p.model.config_maps,
            &mesh.model.config_maps,
        ));
    }
    touched
}

/// Hands the mesh a full rebuild replaced to a thread that frees it once
/// nothing else holds it (the cores let go of it as they take the new
/// one), waiting at most a second for them. Nothing of it is shared with
/// its successor, and freeing it (tens of milliseconds on a mesh of 10,000
/// pods) would hold up the control thread's next change, or the proxies
/// of a serving core, were that core the last to let go of it. At most two
/// wait: past that (rebuilds back to back), it is freed here, as before.
fn reap(old: Option<Arc<MeshInput>>) {
    use std::sync::mpsc;
    use std::time::{Duration, Instant};
    static REAPER: std::sync::OnceLock<Option<mpsc::SyncSender<Arc<MeshInput>>>> = std::sync::OnceLock::new();
    let Some(old) = old else { return };
    let reaper = REAPER.get_or_init(|| {
        let (tx, rx) = mpsc::sync_channel::<Arc<MeshInput>>(2);
        let spawned = std::thread::Builder::new().name("mesh-reaper".into()).spawn(move || {
            for mesh in rx {
                let until = Instant::now() + Duration::from_secs(1);
                while Arc::strong_count(&mesh) > 1 && Instant::now() < until {
                    std::thread::sleep(Duration::from_millis(5));
                }
                drop(mesh);
            }
        });
        spawned.ok().map(|_| tx)
    });
    match reaper {
        // (Full, or no thread: freed here.)
        Some(tx) => drop(tx.try_send(old)),
        None => drop(old),
    }
}

/// istiod's discovery namespace filter (`pkg/kube/namespace/filter.go`,
/// with `ENABLE_ENHANCED_RESOURCE_SCOPING`, istiod's default): with
/// `discoverySelectors`, only the selected Namespaces and the namespaced
/// objects in them are read (Services, EndpointSlices, Pods, Secrets,
/// Istio and Gateway API config), and only their changes count; Nodes
/// all are. Nothing is done without selectors.
pub(super) fn discovery_filter(
    objects: &mut istiod_config::objects::Objects,
    changed: Option<&mut Vec<istiod_config::manifest::ObjectRef>>,
    mesh: &istiod_mesh::meshconfig::MeshSettings,
) {
    if mesh.discovery_selectors.is_empty() {
        return;
    }
    let selected: std::collections::HashSet<String> = objects
        .namespaces
        .iter()
        .filter(|n| mesh.discovers(&n.metadata.labels))
        .map(|n| n.metadata.name.clone())
        .collect();
    let keep = |ns: &str| ns.is_empty() || selected.contains(ns);
    objects.services.retain(|o| keep(o.metadata.ns()));
    objects.endpoint_slices.retain(|o| keep(o.metadata.ns()));
    objects.pods.retain(|o| keep(o.metadata.ns()));
    objects.secrets.retain(|o| keep(o.metadata.ns()));
    objects.config_maps.retain(|o| keep(o.metadata.ns()));
    objects.istio.retain(|o| keep(o.meta.ns()));
    objects.gateway_api.retain(|o| keep(o.meta.ns()));
    objects.ingresses.retain(|o| keep(o.metadata.ns()));
    objects.namespaces.retain(|n| selected.contains(&n.metadata.name));
    if let Some(changed) = changed {
        changed.retain(|r| if r.kind == "Namespace" { true } else { keep(&r.namespace) });
    }
}

/// istiod's `pilot_inbound_updates`: one per object changed (`None`: a
/// list, every object), as its `ConfigUpdate`, `EDSUpdate` and `SvcUpdate`
/// handlers count them: endpoints as `eds`, Services and ServiceEntries as
/// `svc` (`svcdelete` when gone), everything else as `config`.
fn count_inbound_updates(
    objects: &istiod_config::objects::Objects,
    changed: Option<&[istiod_config::manifest::ObjectRef]>,
) {
    use crate::control::metrics::inbound_update;
    let Some(changed) = changed else {
        for _ in &objects.services {
            inbound_update("svc");
        }
        for _ in 0..objects.endpoint_slices.len() + objects.pods.len() {
            inbound_update("eds");
        }
        for o in &objects.istio {
            let service = o.kind() == istiod_config::istio::IstioKind::ServiceEntry;
            inbound_update(if service { "svc" } else { "config" });
        }
        return;
    };
    // The Services in force, looked up once for all changed ones.
    let mut present: Option<std::collections::HashSet<(&str, &str)>> = None;
    for r in changed {
        inbound_update(match r.kind.as_str() {
            "EndpointSlice" | "Endpoints" | "Pod" | "WorkloadEntry" => "eds",
            "Service" => {
                let present = present.get_or_insert_with(|| {
                    objects
                        .services
                        .iter()
                        .map(|s| (s.metadata.namespace.as_deref().unwrap_or(""), s.metadata.name.as_str()))
                        .collect()
                });
                if present.contains(&(r.namespace.as_str(), r.name.as_str())) { "svc" } else { "svcdelete" }
            }
            "ServiceEntry" => "svc",
            _ => "config",
        });
    }
}

/// istiod's push trigger reasons for the objects that changed, one event
/// per object (`None`: a first list or relist, a full push).
fn push_reasons(changed: Option<&[istiod_config::manifest::ObjectRef]>) -> istiod_xds_api::Reasons {
    let mut out = istiod_xds_api::Reasons::default();
    let Some(changed) = changed else {
        out.add("global", 1);
        return out;
    };
    for r in changed {
        out.add(
            match r.kind.as_str() {
                "EndpointSlice" | "Endpoints" | "Pod" | "WorkloadEntry" => "endpoint",
                "Service" | "ServiceEntry" => "service",
                "Secret" => "secret",
                "Namespace" => "namespace",
                _ => "config",
            },
            1,
        );
    }
    out
}

pub(super) type Tx = mpsc::UnboundedSender<crate::control::Input>;

/// What wakes the config directory's watch.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(super) enum Wake {
    /// Files changed; `whole`: what changed since the last quiet period
    /// was only files written aside and renamed into place, and nothing
    /// followed them ([`forward_dir_events`]), so it can be read at once.
    Files { whole: bool },
    /// A new mesh configuration: reload, and rebuild from every object.
    Mesh,
}

/// A burst of file events ends after this much quiet: [`watch_dir`]
/// reads it then, and [`forward_dir_events`] starts a new one.
const DIR_QUIET: std::time::Duration = std::time::Duration::from_millis(3);

/// A burst of file events as [`forward_dir_events`] follows it.
#[derive(Default)]
struct Burst {
    /// Files not read written to and not (yet) renamed away.
    aside: std::collections::HashSet<std::path::PathBuf>,
    /// A manifest was renamed into place.
    landed: bool,
    /// Anything else came.
    other: bool,
}

impl Burst {
    fn add(&mut self, e: DirEvent) {
        match e {
            DirEvent::Aside(p) => {
                self.aside.insert(p);
            }
            // A file not read that was not written in this burst (a
            // directory of manifests, maybe) renamed away: not known whole.
            DirEvent::AsideMoved(p) => self.other |= !self.aside.remove(&p),
            DirEvent::Landed => self.landed = true,
            DirEvent::Other => self.other = true,
        }
    }

    fn whole(&self) -> bool {
        self.landed && !self.other && self.aside.is_empty()
    }

    fn is_empty(&self) -> bool {
        !self.landed && !self.other && self.aside.is_empty()
    }
}

/// Forwards the config directory's file events to [`watch_dir`] until
/// either side is gone: each as it comes (the reload waits for
/// [`DIR_QUIET`] after the last), and, where a burst was whole, that it
/// was once nothing more came for `SETTLE`, so that it is read at once.
/// Whole is only files written aside and renamed into place: a manifest
/// written in place may be appended to in another open, an editor's save
/// moves the manifest away before writing it anew. Several files renamed
/// in a row (`mv *.yaml`, `sed -i` over two files: the next file's write
/// aside starts at once) are one burst. Timed here, on a thread, to the
/// microsecond: tokio's timers tick in milliseconds.
pub(super) fn forward_dir_events(events: &std::sync::mpsc::Receiver<DirEvent>, to: &mpsc::UnboundedSender<Wake>) {
    use std::sync::mpsc::RecvTimeoutError;
    const SETTLE: std::time::Duration = std::time::Duration::from_micros(300);
    let mut burst = Burst::default();
    loop {
        let next = if burst.is_empty() {
            events.recv().map_err(|_| RecvTimeoutError::Disconnected)
        } else {
            events.recv_timeout(if burst.whole() { SETTLE } else { DIR_QUIET })
        };
        match next {
            Ok(e) => {
                burst.add(e);
                if to.send(Wake::Files { whole: false }).is_err() {
                    return;
                }
            }
            Err(RecvTimeoutError::Timeout) => {
                if burst.whole() && to.send(Wake::Files { whole: true }).is_err() {
                    return;
                }
                burst = Burst::default();
            }
            Err(RecvTimeoutError::Disconnected) => return,
        }
    }
}

/// Reloads the directory on every burst of file events; a new mesh
/// configuration rebuilds from every object.
pub(super) async fn watch_dir(
    mut source: ConfigDir,
    dir: std::path::PathBuf,
    mut wake: mpsc::UnboundedReceiver<Wake>,
    tx: Tx,
    state: Rc<RefCell<State>>,
    domain: String,
) {
    // Editors write in several steps: a burst of events is read as one
    // once it has been quiet for DIR_QUIET, or after MOST at the latest; a
    // burst of files written aside and renamed into place, at once
    // ([`forward_dir_events`]).
    const MOST: std::time::Duration = std::time::Duration::from_millis(20);
    // A read taken at once that more events followed while it ran (the
    // next step of the same change, maybe): put off, until MOST after the
    // first such read at most, and applied with the next read, which names
    // what both changed (or, should that read fail, as it is). With
    // whether it was to rebuild everything, and when the first was read.
    let mut put_off: Option<(Loaded, bool, std::time::Instant)> = None;
    // A rebuild asked for whose read failed: owed to the next read.
    let mut owed = false;
    // What a read found is in force: named, or (`whole`) rebuilt from.
    let put_in_force = |loaded: Loaded, whole: bool| {
        let configz = configz(&dir, &loaded);
        let changed = (!whole).then_some(loaded.changed);
        apply(&state, loaded.objects, changed, configz, &domain, &tx)
    };
    while let Some(first) = wake.recv().await {
        let mut whole = std::mem::take(&mut owed) || first == Wake::Mesh;
        let mut now = first == Wake::Files { whole: true };
        let mut until = tokio::time::Instant::now() + MOST;
        if let Some((_, _, since)) = &put_off {
            until = until.min(tokio::time::Instant::from_std(*since + MOST));
        }
        loop {
            // At once only if nothing came after the burst was said whole
            // (what is queued behind it may be another change begun).
            while let Ok(w) = wake.try_recv() {
                whole |= w == Wake::Mesh;
                now = w == Wake::Files { whole: true };
            }
            if now {
                break;
            }
            let quiet = (tokio::time::Instant::now() + DIR_QUIET).min(until);
            match tokio::time::timeout_at(quiet, wake.recv()).await {
                Ok(Some(w)) => {
                    whole |= w == Wake::Mesh;
                    now = w == Wake::Files { whole: true };
                }
                Ok(None) => return,
                Err(_) => break,
            }
            if tokio::time::Instant::now() >= until {
                break;
            }
        }
        if !now {
            while let Ok(w) = wake.try_recv() {
                whole |= w == Wake::Mesh;
            }
        }
        // Reading and parsing the files runs on a blocking thread: a large
        // or hostile file must not hold the control thread (readiness,
        // debug, publishing).
        let (back, reloaded) = match tokio::task::spawn_blocking(move || {
            let r = source.reload();
            (source, r)
        })
        .await
        {
            Ok(done) => done,
            Err(e) => {
                tracing::error!(target: "model", error = %e, "--configDir reload failed; no longer watching");
                // What was read before it and put off is in force.
                if let Some((loaded, w, _)) = put_off.take() {
                    put_in_force(loaded, whole || w);
                }
                return;
            }
        };
        source = back;
        match reloaded {
            Ok(mut loaded) => {
                let mut since = std::time::Instant::now();
                if let Some((earlier, w, first)) = put_off.take() {
                    loaded.changed.extend(earlier.changed);
                    loaded.changed.sort();
                    loaded.changed.dedup();
                    whole |= w;
                    since = first;
                }
                if now && !wake.is_empty() && since.elapsed() < MOST {
                    put_off = Some((loaded, whole, since));
                    continue;
                }
                put_in_force(loaded, whole);
            }
            Err(e) => {
                tracing::warn!(target: "model", error = %e, "cannot reload --configDir; keeping the current state");
                // What was read before it and put off is in force.
                match put_off.take() {
                    Some((loaded, w, _)) => put_in_force(loaded, whole || w),
                    None => owed = whole,
                }
            }
        }
    }
}

/// Follows the Kubernetes source: every update is applied (in place where
/// it names only objects a fast path handles).
pub(super) async fn watch_kube(
    updates: Arc<istiod_kubewatch::kube_source::Updates>,
    tx: Tx,
    state: Rc<RefCell<State>>,
    domain: String,
    cluster_id: String,
) {
    loop {
        // Everything since the last update taken (the source merges what
        // queued up while the last one was applied).
        let update = updates.next().await;
        let objects = update.objects;
        let configz = json!({
            "source": "kubernetes",
            "clusterID": cluster_id,
            "services": objects.services.len(),
            "endpointSlices": objects.endpoint_slices.len(),
            "pods": objects.pods.len(),
            "nodes": objects.nodes.len(),
            "namespaces": objects.namespaces.len(),
            "istioConfig": istio_counts(&objects),
        });
        apply(&state, objects, update.changed, configz, &domain, &tx);
    }
}

pub(super) async fn kube_client(kubeconfig: Option<&std::path::Path>) -> Result<kube::Client, StartError> {
    let err = |e: String| StartError::Unsupported(format!("Kubernetes client: {e}"));
    let config = match kubeconfig {
        Some(path) => {
            let kc = kube::config::Kubeconfig::read_from(path).map_err(|e| err(format!("{}: {e}", path.display())))?;
            kube::Config::from_custom_kubeconfig(kc, &kube::config::KubeConfigOptions::default())
                .await
                .map_err(|e| err(e.to_string()))?
        }
        None => kube::Config::infer().await.map_err(|e| err(format!("no kubeconfig and not in a cluster: {e}")))?,
    };
    istiod_kubewatch::limit::client(config).map_err(|e| err(e.to_string()))
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Whether `forward_dir_events` says a burst of `events` (all queued
    /// before it starts, so that no pause between them can end the burst
    /// early) was whole, within `patience` of the last event forwarded:
    /// long where it should be (a whole burst is said so 300 µs after its
    /// last event, but a busy machine may not run the forwarder for a
    /// while, and once the channel closes it says nothing more), short
    /// where it should not.
    fn whole(events: &[DirEvent], patience: std::time::Duration) -> bool {
        let (tx, rx) = std::sync::mpsc::channel();
        for e in events {
            tx.send(e.clone()).unwrap();
        }
        let (to, mut woken) = mpsc::unbounded_channel();
        let forwarder = std::thread::spawn(move || forward_dir_events(&rx, &to));
        // Every event is forwarded as it comes; then, if whole, that it
        // was. Then the channel closes.
        let (mut forwarded, mut said) = (0, false);
        let start = std::time::Instant::now();
        let mut all_at: Option<std::time::Instant> = None;
        while !said
            && start.elapsed() < patience + std::time::Duration::from_secs(10)
            && all_at.is_none_or(|t| t.elapsed() < patience)
        {
            std::thread::sleep(std::time::Duration::from_millis(2));
            while let Ok(w) = woken.try_recv() {
                said |= w == Wake::Files { whole: true };
                forwarded += usize::from(w == Wake::Files { whole: false });
            }
            if forwarded == events.len() && all_at.is_none() {
                all_at = Some(std::time::Instant::now());
            }
        }
        drop(tx);
        forwarder.join().unwrap();
        let mut rest = std::iter::from_fn(|| woken.try_recv().ok());
        said || rest.any(|w| w == Wake::Files { whole: true })
    }

    #[test]
    fn a_burst_is_whole_only_when_files_written_aside_were_renamed_into_place() {
        use DirEvent::*;
        let tmp = |n: &str| std::path::PathBuf::from(format!("/d/{n}.yaml.tmp"));
        // Waits for a burst that should be said whole, and for one that
        // should not.
        let is = |events: &[DirEvent]| whole(events, std::time::Duration::from_secs(10));
        let is_not = |events: &[DirEvent]| !whole(events, std::time::Duration::from_millis(100));
        // Written aside and renamed into place (the rename's end and its
        // pair are two events).
        let one = [Aside(tmp("a")), Aside(tmp("a")), AsideMoved(tmp("a")), Landed, Landed];
        assert!(is(&one));
        // Two files so, in a row.
        let two = [Aside(tmp("a")), AsideMoved(tmp("a")), Landed, Aside(tmp("b")), AsideMoved(tmp("b")), Landed];
        assert!(is(&two));
        // Moved in from elsewhere.
        assert!(is(&[Landed]));
        // Anything else in the burst: read after the quiet period, as ever.
        assert!(is_not(&[Other, Landed]));
        assert!(is_not(&[Landed, Landed, Other]));
        // A file written aside and not renamed (yet), or renamed away
        // without being written in the burst; nothing renamed into place.
        assert!(is_not(&[Aside(tmp("b")), Aside(tmp("a")), AsideMoved(tmp("a")), Landed]));
        assert!(is_not(&[AsideMoved(tmp("c")), Landed]));
        assert!(is_not(&[Aside(tmp("a")), AsideMoved(tmp("a"))]));
    }

    /// A Service named `name` on `port`, as a manifest.
    fn service(name: &str, port: u16) -> String {
        format!(
            "apiVersion: v1\nkind: Service\nmetadata:\n  name: {name}\n  namespace: default\nspec:\n  selector:\n    app: {name}\n  ports:\n  - name: http\n    port: {port}\n"
        )
    }

    /// `watch_dir`'s own decisions, woken by hand (no file watch): a burst
    /// is read and applied naming what changed, a new mesh configuration
    /// rebuilds from every object, and one asked for while the directory
    /// cannot be read is owed to the next read that can. Observed as the
    /// push reasons of what reaches the control loop, istiod's trigger
    /// reasons (`TriggerReason` in pilot/pkg/model/push_context.go):
    /// "global" is a rebuild from every object, "service" a change applied
    /// by name.
    #[test]
    fn watch_dir_applies_what_changed_and_owes_a_rebuild_a_failed_read_asked_for() {
        let root = tempfile::tempdir().unwrap();
        let dir = root.path().join("mesh");
        std::fs::create_dir(&dir).unwrap();
        std::fs::write(dir.join("a.yaml"), service("a", 80)).unwrap();
        std::fs::write(dir.join("b.yaml"), service("b", 80)).unwrap();
        let rt = tokio::runtime::Builder::new_current_thread().enable_all().build().unwrap();
        tokio::task::LocalSet::new().block_on(&rt, async {
            let mut source = ConfigDir::new(&dir);
            let loaded = source.reload().unwrap();
            let state = Rc::new(RefCell::new(State::default()));
            let (tx, mut rx) = mpsc::unbounded_channel();
            let domain = "cluster.local".to_owned();
            let configz = configz(&dir, &loaded);
            apply(&state, loaded.objects, Some(loaded.changed), configz, &domain, &tx);
            assert!(rx.recv().await.is_some(), "the first read is published");
            let (wake, woken) = mpsc::unbounded_channel();
            let watch = tokio::task::spawn_local(watch_dir(source, dir.clone(), woken, tx, state.clone(), domain));
            let next = async |rx: &mut mpsc::UnboundedReceiver<crate::control::Input>| {
                let input = tokio::time::timeout(std::time::Duration::from_secs(10), rx.recv())
                    .await
                    .expect("a change reaches the control loop")
                    .expect("the watch goes on");
                input.reasons.iter().collect::<Vec<_>>()
            };
            // A file renamed into place, said whole: read and named.
            std::fs::write(dir.join("a.yaml"), service("a", 81)).unwrap();
            wake.send(Wake::Files { whole: true }).unwrap();
            assert_eq!(next(&mut rx).await, vec![("service", 1)]);
            // A burst not said whole: read once it is quiet, also named.
            std::fs::write(dir.join("b.yaml"), service("b", 81)).unwrap();
            wake.send(Wake::Files { whole: false }).unwrap();
            wake.send(Wake::Files { whole: false }).unwrap();
            assert_eq!(next(&mut rx).await, vec![("service", 1)]);
            // A new mesh configuration: every object again.
            std::fs::write(dir.join("a.yaml"), service("a", 82)).unwrap();
            wake.send(Wake::Mesh).unwrap();
            assert_eq!(next(&mut rx).await, vec![("global", 1)]);
            // Asked for while the directory is gone: nothing is applied,
            // and the rebuild is owed to the next read, whatever wakes it.
            let aside = root.path().join("away");
            std::fs::rename(&dir, &aside).unwrap();
            wake.send(Wake::Mesh).unwrap();
            // (Time for the failed read to be done before the directory
            // comes back: a read made after would pass without owing.)
            let nothing = tokio::time::timeout(std::time::Duration::from_secs(1), rx.recv()).await;
            assert!(nothing.is_err(), "a failed read applies nothing");
            std::fs::rename(&aside, &dir).unwrap();
            std::fs::write(dir.join("b.yaml"), service("b", 82)).unwrap();
            wake.send(Wake::Files { whole: true }).unwrap();
            assert_eq!(next(&mut rx).await, vec![("global", 1)]);
            // Owed once: the next change is named again.
            std::fs::write(dir.join("a.yaml"), service("a", 83)).unwrap();
            wake.send(Wake::Files { whole: true }).unwrap();
            assert_eq!(next(&mut rx).await, vec![("service", 1)]);
            assert_eq!(state.borrow().objects.services.len(), 2);
            drop(wake);
            watch.await.unwrap();
        });
    }

    #[test]
    fn bursts_apart_are_each_their_own() {
        use DirEvent::*;
        let (tx, rx) = std::sync::mpsc::channel();
        let (to, mut woken) = mpsc::unbounded_channel();
        let forwarder = std::thread::spawn(move || forward_dir_events(&rx, &to));
        let said = |woken: &mut mpsc::UnboundedReceiver<Wake>| {
            (0..500).any(|_| {
                std::thread::sleep(std::time::Duration::from_millis(2));
                std::iter::from_fn(|| woken.try_recv().ok()).any(|w| w == Wake::Files { whole: true })
            })
        };
        // Something else, then (once quiet) a file renamed into place: the
        // second burst is whole.
        tx.send(Other).unwrap();
        assert!(!said(&mut woken), "something else is not whole");
        tx.send(Landed).unwrap();
        assert!(said(&mut woken), "a burst after quiet is its own");
        tx.send(Landed).unwrap();
        assert!(said(&mut woken), "and so is the next");
        drop(tx);
        forwarder.join().unwrap();
    }
}
