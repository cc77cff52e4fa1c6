//! istiod's GatewayClass controller (`gatewaycommon/gatewayclass.go`,
//! `PILOT_ENABLE_GATEWAY_API_GATEWAYCLASS_CONTROLLER`): the built-in
//! GatewayClasses are created where they are missing, and again when
//! deleted; an existing class is never changed (users may manage it). As
//! in istiod, every replica does it without an election: only creates are
//! made, and the first wins (the others' get a conflict, which is fine).
//! Classes are read from the watched objects, as istiod reads its
//! informer.

use std::cell::RefCell;
use std::rc::Rc;
use std::time::Duration;

use istiod_config::gateway_api::GatewayApiSpec;
use istiod_kubewatch::kapi::{Api, Write};
use serde_json::json;

use super::sources::State;

/// A built-in class: name, controller, description (istiod's
/// `GetClassInfos`).
pub(super) type Class = (&'static str, &'static str, &'static str);

/// The default class (`istio`, `istio.io/gateway-controller`, unless
/// `PILOT_GATEWAY_API_DEFAULT_GATEWAYCLASS_NAME` and
/// `PILOT_GATEWAY_API_CONTROLLER_NAME` say otherwise).
fn default() -> Class {
    use istiod_config::gateway_convert::{controller, default_class};
    (default_class(), controller(), "The default Istio GatewayClass")
}
/// `istio-remote` (istiod's `PILOT_MULTI_NETWORK_DISCOVER_GATEWAY_API`,
/// on by default).
const REMOTE: Class =
    ("istio-remote", "istio.io/unmanaged-gateway", "Remote to this cluster. Does not deploy or affect configuration.");
/// `istio-waypoint`, with ambient waypoints.
const WAYPOINT: Class = ("istio-waypoint", "istio.io/mesh-controller", "The default Istio waypoint GatewayClass");

/// The built-in classes: istiod's, less `istio-east-west`
/// (`AMBIENT_ENABLE_MULTI_NETWORK`, not supported); `istio-remote` with
/// `PILOT_MULTI_NETWORK_DISCOVER_GATEWAY_API`.
pub(super) fn builtin(remote: bool, ambient_waypoints: bool) -> Vec<Class> {
    let mut out = vec![default()];
    if remote {
        out.push(REMOTE);
    }
    if ambient_waypoints {
        out.push(WAYPOINT);
    }
    out
}

/// How often the watched classes are looked at again (a deleted class comes
/// back within this).
const EVERY: Duration = Duration::from_secs(2);

const PATH: &str = "/apis/gateway.networking.k8s.io/v1/gatewayclasses";

/// A class that could not be created is asked for again after this.
const AGAIN: Duration = Duration::from_secs(60);
/// A class created (or found created) is expected in the watched objects
/// within this; asked for again after it if not.
const SEEN_SOON: Duration = Duration::from_secs(8);

/// Creates the missing classes, for as long as the control thread runs.
pub(super) async fn run(api: Api, state: Rc<RefCell<State>>, classes: Vec<Class>) {
    let mut crd_missing_logged = false;
    // Classes asked for and not seen yet in the watched objects: not asked
    // again for a while (a class the filters hide, or refused by RBAC,
    // would otherwise cost a write every round).
    let mut asked: std::collections::BTreeMap<&'static str, tokio::time::Instant> = Default::default();
    let now = tokio::time::Instant::now;
    loop {
        tokio::time::sleep(EVERY).await;
        // Only once the objects were read: the classes that exist are known.
        let missing: Vec<Class> = {
            let s = state.borrow();
            if s.mesh.is_none() {
                continue;
            }
            let present: std::collections::BTreeSet<&str> = s
                .objects
                .gateway_api
                .iter()
                .filter(|o| matches!(o.spec, GatewayApiSpec::GatewayClass(_)))
                .map(|o| o.meta.name.as_str())
                .collect();
            asked.retain(|name, until| !present.contains(name) && now() < *until);
            classes.iter().copied().filter(|c| !present.contains(c.0) && !asked.contains_key(c.0)).collect()
        };
        for (name, controller, description) in missing {
            // Written (or someone else's): the watch shows it soon.
            asked.insert(name, now() + SEEN_SOON);
            let class = json!({
                "apiVersion": "gateway.networking.k8s.io/v1",
                "kind": "GatewayClass",
                "metadata": {"name": name},
                "spec": {"controllerName": controller, "description": description},
            });
            match api.create(PATH, &class).await {
                Ok(Write::Done(_)) => tracing::info!(target: "model", class = name, "created GatewayClass"),
                Ok(Write::Conflict) => {
                    tracing::info!(target: "model", "Attempted to create GatewayClass/{name}, but it was already created")
                }
                // No GatewayClass CRD (yet): istiod waits for it.
                Err(e) if e.contains("404") => {
                    asked.insert(name, now() + AGAIN);
                    if !crd_missing_logged {
                        tracing::info!(target: "model", "GatewayClass CRD not installed: no GatewayClass created until it is");
                        crd_missing_logged = true;
                    }
                    break;
                }
                Err(e) => {
                    asked.insert(name, now() + AGAIN);
                    tracing::warn!(target: "model", class = name, error = %e, "cannot create GatewayClass")
                }
            }
        }
    }
}
