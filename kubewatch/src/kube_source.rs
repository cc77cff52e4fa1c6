//! Kubernetes as a source: one kube-rs watcher per kind (list, then watch
//! from the list's version with bookmarks; relist on 410 Gone), each
//! keeping a store that is swapped whole on a relist, so a relist neither
//! loses nor duplicates objects. Objects arrive as JSON and are read into
//! the same typed structs as the config directory's, so both sources give
//! the same model for the same objects.
//!
//! During an API outage the last state stays in force (the watchers retry
//! with backoff); the source is ready once every kind has been listed.

use std::collections::BTreeMap;
use std::sync::{Arc, Mutex};

use futures_util::StreamExt;
use kube::api::{Api, ApiResource, DynamicObject, GroupVersionKind};
use kube::runtime::WatchStreamExt;
use kube::runtime::watcher::{self, Event};
use serde_json::Value;
use tokio::sync::watch;

use crate::objects::{EndpointSlice, Namespace, Node, Objects, Pod, Service};

/// The kinds watched, in the order of [`Stores`]: (group, version, kind,
/// plural). The first five are Kubernetes' own; the rest are Istio CRDs,
/// which may not be installed.
pub const KINDS: [(&str, &str, &str, &str); 14] = [
    ("", "v1", "Service", "services"),
    ("discovery.k8s.io", "v1", "EndpointSlice", "endpointslices"),
    ("", "v1", "Pod", "pods"),
    ("", "v1", "Node", "nodes"),
    ("", "v1", "Namespace", "namespaces"),
    ("networking.istio.io", "v1", "VirtualService", "virtualservices"),
    ("networking.istio.io", "v1", "DestinationRule", "destinationrules"),
    ("networking.istio.io", "v1", "Gateway", "gateways"),
    ("networking.istio.io", "v1", "ServiceEntry", "serviceentries"),
    ("networking.istio.io", "v1", "WorkloadEntry", "workloadentries"),
    ("networking.istio.io", "v1", "Sidecar", "sidecars"),
    ("security.istio.io", "v1", "PeerAuthentication", "peerauthentications"),
    ("security.istio.io", "v1", "AuthorizationPolicy", "authorizationpolicies"),
    ("security.istio.io", "v1", "RequestAuthentication", "requestauthentications"),
];

/// Kinds from here on are CRDs: absent ones count as synced and empty.
const FIRST_CRD: usize = 5;

#[derive(Default)]
struct Stores {
    objects: [BTreeMap<(String, String), Value>; 14],
    synced: [bool; 14],
}

fn key(v: &Value) -> (String, String) {
    let m = &v["metadata"];
    (m["namespace"].as_str().unwrap_or_default().to_owned(), m["name"].as_str().unwrap_or_default().to_owned())
}

fn build(stores: &Stores) -> Objects {
    fn read<T: serde::de::DeserializeOwned>(map: &BTreeMap<(String, String), Value>, out: &mut Vec<T>) {
        for v in map.values() {
            match serde_json::from_value(v.clone()) {
                Ok(t) => out.push(t),
                Err(e) => tracing::warn!(target: "model", object = ?key(v), error = %e, "rejected object"),
            }
        }
    }
    let mut o = Objects::default();
    read::<Service>(&stores.objects[0], &mut o.services);
    read::<EndpointSlice>(&stores.objects[1], &mut o.endpoint_slices);
    read::<Pod>(&stores.objects[2], &mut o.pods);
    read::<Node>(&stores.objects[3], &mut o.nodes);
    read::<Namespace>(&stores.objects[4], &mut o.namespaces);
    for map in &stores.objects[FIRST_CRD..] {
        for v in map.values() {
            let parsed = serde_yaml_ng::to_value(v)
                .map_err(|e| e.to_string())
                .and_then(|y| crate::istio::parse(&y).map_err(|e| e.to_string()));
            match parsed {
                Ok(obj) => o.istio.push(obj),
                Err(e) => tracing::warn!(target: "model", object = ?key(v), error = %e, "rejected Istio object"),
            }
        }
    }
    o
}

/// Watches every kind and publishes the full object set, once all kinds
/// have synced and after every change. Runs until the receiver is gone.
pub async fn run(client: kube::Client, tx: watch::Sender<Option<Objects>>) {
    let stores = Arc::new(Mutex::new(Stores::default()));
    let (changed_tx, mut changed_rx) = tokio::sync::mpsc::unbounded_channel::<()>();
    for (i, (group, version, kind, plural)) in KINDS.into_iter().enumerate() {
        let ar = ApiResource::from_gvk_with_plural(&GroupVersionKind::gvk(group, version, kind), plural);
        let api: Api<DynamicObject> = Api::all_with(client.clone(), &ar);
        let (stores, changed) = (stores.clone(), changed_tx.clone());
        tokio::spawn(async move {
            let mut buffer: BTreeMap<(String, String), Value> = BTreeMap::new();
            let mut events = watcher::watcher(api, watcher::Config::default()).default_backoff().boxed();
            while let Some(ev) = events.next().await {
                let ev = match ev {
                    Ok(ev) => ev,
                    Err(e) => {
                        let absent =
                            matches!(&e, watcher::Error::InitialListFailed(kube::Error::Api(s)) if s.code == 404);
                        if absent && i >= FIRST_CRD {
                            // A CRD that is not installed: nothing of that kind,
                            // and keep looking in case it appears.
                            let mut s = stores.lock().unwrap_or_else(|e| e.into_inner());
                            if !s.synced[i] {
                                tracing::warn!(target: "model", kind, "CRD not installed; skipping it until it appears");
                                s.synced[i] = true;
                                drop(s);
                                let _ = changed.send(());
                            }
                        } else {
                            // Outage or error: keep the last state; the watcher retries.
                            tracing::warn!(target: "model", kind, error = %e, "watch failed; keeping the last state and retrying");
                        }
                        continue;
                    }
                };
                let json = |o: &DynamicObject| serde_json::to_value(o).unwrap_or(Value::Null);
                let mut s = stores.lock().unwrap_or_else(|e| e.into_inner());
                match ev {
                    Event::Init => buffer.clear(),
                    Event::InitApply(o) => {
                        let v = json(&o);
                        buffer.insert(key(&v), v);
                        continue;
                    }
                    Event::InitDone => {
                        // A (re)list is complete: it replaces the store whole.
                        s.objects[i] = std::mem::take(&mut buffer);
                        s.synced[i] = true;
                    }
                    Event::Apply(o) => {
                        let v = json(&o);
                        s.objects[i].insert(key(&v), v);
                    }
                    Event::Delete(o) => {
                        let v = json(&o);
                        s.objects[i].remove(&key(&v));
                    }
                }
                drop(s);
                if changed.send(()).is_err() {
                    return;
                }
            }
        });
    }
    drop(changed_tx);
    while changed_rx.recv().await.is_some() {
        while changed_rx.try_recv().is_ok() {}
        let objects = {
            let s = stores.lock().unwrap_or_else(|e| e.into_inner());
            if !s.synced.iter().all(|x| *x) {
                continue;
            }
            build(&s)
        };
        if tx.send(Some(objects)).is_err() {
            return;
        }
    }
}

/// A client for `url` (plain HTTP, e.g. the fake API server).
pub fn client_for(url: &str) -> Result<kube::Client, String> {
    let uri = url.parse().map_err(|e| format!("{url}: {e}"))?;
    kube::Client::try_from(kube::Config::new(uri)).map_err(|e| e.to_string())
}
