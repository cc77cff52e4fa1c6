//! The pods node authorization reads (`CA_TRUSTED_NODE_ACCOUNTS`): each
//! pod's uid, service account and node, and which service accounts run on
//! which node (istiod's pod informer and node index, `node_auth.go`).
//! Kept by the control thread from the objects it reads, changed per pod;
//! read by the serving cores' CA.

use std::collections::HashMap;
use std::sync::RwLock;

use istiod_ca::{PodDirectory, PodEntry};
use istiod_config::manifest::ObjectRef;
use istiod_config::objects::{Objects, Pod};

#[derive(Debug, Default)]
struct Inner {
    pods: HashMap<(String, String), PodEntry>,
    /// (node, namespace, service account) -> pods.
    on_node: HashMap<(String, String, String), usize>,
}

impl Inner {
    fn remove(&mut self, key: &(String, String)) {
        if let Some(old) = self.pods.remove(key) {
            let k = (old.node, key.0.clone(), old.service_account);
            if let Some(n) = self.on_node.get_mut(&k) {
                *n -= 1;
                if *n == 0 {
                    self.on_node.remove(&k);
                }
            }
        }
    }

    fn insert(&mut self, pod: &Pod) {
        let key = (pod.metadata.ns().to_owned(), pod.metadata.name.clone());
        self.remove(&key);
        // A pod that ended holds no identity on its node any more.
        if matches!(pod.status.phase.as_deref(), Some("Succeeded" | "Failed")) {
            return;
        }
        let entry = PodEntry {
            uid: pod.metadata.uid.clone().unwrap_or_default(),
            service_account: pod
                .spec
                .service_account_name
                .clone()
                .filter(|s| !s.is_empty())
                .unwrap_or("default".into()),
            node: pod.spec.node_name.clone().unwrap_or_default(),
        };
        if !entry.node.is_empty() {
            *self.on_node.entry((entry.node.clone(), key.0.clone(), entry.service_account.clone())).or_default() += 1;
        }
        self.pods.insert(key, entry);
    }
}

/// The directory.
#[derive(Debug, Default)]
pub(super) struct NodePods(RwLock<Inner>);

impl NodePods {
    /// Follows the objects now in force; `changed`: the objects that
    /// changed (`None`: all are read again).
    pub(super) fn update(&self, objects: &Objects, changed: Option<&[ObjectRef]>) {
        let mut inner = self.0.write().unwrap_or_else(|e| e.into_inner());
        match changed {
            None => {
                *inner = Inner::default();
                for p in &objects.pods {
                    inner.insert(p);
                }
            }
            Some(refs) => {
                // A namespace's pods come and go with it under
                // `discoverySelectors`: read them again.
                for r in refs.iter().filter(|r| r.kind == "Namespace") {
                    let gone: Vec<(String, String)> =
                        inner.pods.keys().filter(|(ns, _)| *ns == r.name).cloned().collect();
                    for k in gone {
                        inner.remove(&k);
                    }
                    for p in objects.pods.iter().filter(|p| p.metadata.ns() == r.name) {
                        inner.insert(p);
                    }
                }
                for r in refs.iter().filter(|r| r.kind == "Pod") {
                    let now =
                        objects.pods.iter().rev().find(|p| p.metadata.name == r.name && p.metadata.ns() == r.namespace);
                    match now {
                        Some(p) => inner.insert(p),
                        None => inner.remove(&(r.namespace.clone(), r.name.clone())),
                    }
                }
            }
        }
    }
}

impl PodDirectory for NodePods {
    fn pod(&self, namespace: &str, name: &str) -> Option<PodEntry> {
        self.0.read().unwrap_or_else(|e| e.into_inner()).pods.get(&(namespace.to_owned(), name.to_owned())).cloned()
    }

    fn runs_on(&self, node: &str, namespace: &str, service_account: &str) -> bool {
        let inner = self.0.read().unwrap_or_else(|e| e.into_inner());
        inner.on_node.contains_key(&(node.to_owned(), namespace.to_owned(), service_account.to_owned()))
    }
}
