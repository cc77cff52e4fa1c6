//! istiod's node untaint controller (`pilot/pkg/controllers/untaint`,
//! `PILOT_ENABLE_NODE_UNTAINT_CONTROLLERS`): istio-cni installs nodes with
//! a readiness taint (`PILOT_NODE_UNTAINT_CONTROLLERS_TAINT_NAME`,
//! `cni.istio.io/not-ready`) so that no pod is scheduled before the CNI
//! plugin runs there; once the node's `istio-cni-node` pod (label
//! `k8s-app: istio-cni-node`, in `--cniNamespace`, else istiod's) is
//! ready, the replica holding the `istio-node-untaint` lock removes the
//! taint with istiod's JSON patch, which tests the taints it read.

use std::collections::BTreeSet;
use std::rc::Rc;
use std::sync::Arc;
use std::time::Duration;

use serde_json::{Value, json};
use tokio::sync::watch;

use istiod_config::objects::Objects;
use istiod_kubewatch::kapi::{Api, Write};
use istiod_kubewatch::leader::{Elector, Leadership, Lock, Timings};

/// Where the nodes to untaint go, with the istio-cni pods' namespace and
/// the taint.
pub(super) type Desired = (watch::Sender<Arc<BTreeSet<String>>>, String, String);

/// istiod's lock (`leaderelection.NodeUntaintController`).
pub(super) const ELECTION: &str = "istio-node-untaint";

/// The nodes to untaint: tainted with `taint`, with a ready istio-cni pod
/// of `namespace` on them.
pub(super) fn tainted_ready_nodes(objects: &Objects, namespace: &str, taint: &str) -> BTreeSet<String> {
    let ready: BTreeSet<&str> = objects
        .pods
        .iter()
        .filter(|p| p.metadata.ns() == namespace)
        .filter(|p| p.metadata.labels.get("k8s-app").is_some_and(|v| v == "istio-cni-node"))
        .filter(|p| p.status.phase.as_deref() != Some("Failed"))
        .filter(|p| p.status.conditions.iter().any(|c| c.type_ == "Ready" && c.status == "True"))
        .filter_map(|p| p.spec.node_name.as_deref())
        .collect();
    objects
        .nodes
        .iter()
        .filter(|n| ready.contains(n.metadata.name.as_str()) && n.spec.taints.iter().any(|t| t.key == taint))
        .map(|n| n.metadata.name.clone())
        .collect()
}

/// The controller's settings.
pub(super) struct Context {
    pub(super) api: Api,
    pub(super) leadership: Rc<Leadership>,
    pub(super) taint: String,
}

/// Removes the taint from the nodes `desired` names while this replica
/// leads.
pub(super) async fn run(cx: Context, mut desired: watch::Receiver<Arc<BTreeSet<String>>>) {
    let timings = Timings::istiod();
    let mut elector = Elector::new(cx.api.clone(), ELECTION, Lock::ConfigMap, &cx.leadership, timings);
    loop {
        let (leading, changed) = elector.lead_paced().await;
        if changed {
            tracing::info!(target: "untaint", lease = ELECTION, leading, "leader election for the node untaint controller");
        }
        if leading && elector.still_leading() {
            let nodes = (**desired.borrow_and_update()).clone();
            for node in nodes {
                if let Err(e) = untaint(&cx.api, &node, &cx.taint).await {
                    tracing::error!(target: "untaint", node, "failed to remove readiness taint '{}' from node {node}: {e}", cx.taint);
                }
            }
        }
        tokio::select! {
            _ = tokio::time::sleep(Duration::from_secs(1)) => {}
            r = desired.changed() => if r.is_err() { return },
        }
    }
}

/// istiod's `removeReadinessTaint`: every taint of that key removed, the
/// rest kept, as istiod's JSON patch (the `patch` verb its RBAC grants):
/// a `test` of the taints read, then their `replace`.
async fn untaint(api: &Api, node: &str, taint: &str) -> Result<(), String> {
    let path = format!("/api/v1/nodes/{node}");
    let Some(n) = api.get(&path).await? else { return Ok(()) };
    let taints: Vec<Value> = n["spec"]["taints"].as_array().cloned().unwrap_or_default();
    let kept: Vec<Value> = taints.iter().filter(|t| t["key"] != taint).cloned().collect();
    if kept.len() == taints.len() {
        return Ok(());
    }
    let ops = json!([
        {"op": "test", "path": "/spec/taints", "value": taints},
        {"op": "replace", "path": "/spec/taints", "value": kept},
    ]);
    match api.json_patch(&path, &ops).await? {
        Write::Done(_) => {
            tracing::info!(target: "untaint", node, "removed readiness taint from node");
            Ok(())
        }
        // The taints changed meanwhile: read again next round.
        Write::Conflict => Ok(()),
    }
}
