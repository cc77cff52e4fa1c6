//! Gateway API status, written as istiod writes it
//! (`pilot/pkg/status`, `pilot/pkg/config/kube/gateway/conditions.go`): by
//! the replica holding the `istio-gateway-status-leader-<revision>` Lease
//! only (istiod's per-revision election), each
//! object's `status` through its status subresource when what istiod would
//! say changed. A condition keeps its `lastTransitionTime` while its
//! status, reason and message stay; `observedGeneration` is the object's
//! generation. Route parents and policy ancestors of other controllers are
//! kept.

use std::collections::BTreeMap;
use std::sync::Arc;
use std::time::SystemTime;

use serde_json::{Value, json};
use tokio::sync::watch;

use istiod_config::backend_tls::MESH_CONTROLLER;
use istiod_config::gateway_convert::{ObjectStatus, controller};
use istiod_kubewatch::kapi::{Api, Write};
use istiod_kubewatch::leader::{Elector, Leadership, Lock, Timings};

/// istiod's lease for status writes.
pub(super) const ELECTION: &str = "istio-gateway-status-leader";
/// istiod's lease for ambient status writes (`leaderelection.StatusController`).
pub(super) const AMBIENT_ELECTION: &str = "istio-status-leader";
/// istiod's election for analysis statuses (`AnalyzeController`).
pub(super) const ANALYSIS_ELECTION: &str = "istio-analyze-leader";
/// istiod's election for Ingress status (`IngressController`).
pub(super) const INGRESS_ELECTION: &str = "istio-leader";

fn now() -> String {
    let t = SystemTime::now().duration_since(SystemTime::UNIX_EPOCH).unwrap_or_default().as_secs() as i64;
    // RFC 3339, UTC, seconds (metav1.Time).
    let (days, secs) = (t.div_euclid(86_400), t.rem_euclid(86_400));
    let (y, m, d) = civil(days);
    format!("{y:04}-{m:02}-{d:02}T{:02}:{:02}:{:02}Z", secs / 3600, secs % 3600 / 60, secs % 60)
}

/// Days since 1970-01-01 → (year, month, day) (Howard Hinnant's algorithm).
fn civil(days: i64) -> (i64, u32, u32) {
    let z = days + 719_468;
    let era = z.div_euclid(146_097);
    let doe = z.rem_euclid(146_097);
    let yoe = (doe - doe / 1460 + doe / 36_524 - doe / 146_096) / 365;
    let doy = doe - (365 * yoe + yoe / 4 - yoe / 100);
    let mp = (5 * doy + 2) / 153;
    let d = (doy - (153 * mp + 2) / 5 + 1) as u32;
    let m = if mp < 10 { mp + 3 } else { mp - 9 } as u32;
    (yoe + era * 400 + i64::from(m <= 2), m, d)
}

/// Conditions compared without their times.
fn bare(v: &Value) -> Value {
    match v {
        Value::Object(m) => Value::Object(
            m.iter().filter(|(k, _)| *k != "lastTransitionTime").map(|(k, v)| (k.clone(), bare(v))).collect(),
        ),
        Value::Array(a) => Value::Array(a.iter().map(bare).collect()),
        other => other.clone(),
    }
}

/// Stamps `desired`'s conditions: the existing time where a condition of
/// the same type says the same, else `now`; the generation.
fn stamp(desired: &mut Value, existing: &Value, now: &str, generation: &Value) {
    if let Some(conds) = desired.get_mut("conditions").and_then(Value::as_array_mut) {
        for c in conds {
            let same = existing["conditions"].as_array().into_iter().flatten().find(|e| {
                e["type"] == c["type"]
                    && e["status"] == c["status"]
                    && e["reason"] == c["reason"]
                    && e["message"] == c["message"]
            });
            c["lastTransitionTime"] = same.map_or(json!(now), |e| e["lastTransitionTime"].clone());
            if !generation.is_null() {
                c["observedGeneration"] = generation.clone();
            }
        }
    }
    for (list, key) in [("listeners", "name"), ("parents", "parentRef"), ("ancestors", "ancestorRef")] {
        if let Some(items) = desired.get_mut(list).and_then(Value::as_array_mut) {
            for item in items {
                let old = existing[list].as_array().into_iter().flatten().find(|e| e[key] == item[key]).cloned();
                stamp(item, &old.unwrap_or(Value::Null), now, generation);
            }
        }
    }
}

/// The status to write on `object` for `desired`, or `None` when it says
/// that already. `shared`: an Istio object's or a core object's (a
/// Service's) status, which other writers share (istiod applies its
/// conditions server-side, one field manager per controller): their
/// condition types and other fields stay, and a desired condition marked
/// `"remove": true` takes ours of that type off.
fn next_status(object: &Value, desired: &Value, shared: bool) -> Option<Value> {
    let existing = &object["status"];
    let mut want = desired.clone();
    let ours: Vec<Value> = want["conditions"].as_array().into_iter().flatten().map(|c| c["type"].clone()).collect();
    // A condition of ours marked `remove`: taken off where it is.
    if let Some(conds) = want.get_mut("conditions").and_then(Value::as_array_mut) {
        conds.retain(|c| c["remove"] != true);
        if conds.is_empty() && existing.get("conditions").is_none() {
            want.as_object_mut().map(|m| m.remove("conditions"));
        }
    }
    if shared && let (Some(old), Some(new)) = (existing.as_object(), want.as_object_mut()) {
        let theirs: Vec<Value> = old
            .get("conditions")
            .and_then(Value::as_array)
            .into_iter()
            .flatten()
            .filter(|c| !ours.contains(&c["type"]))
            .cloned()
            .collect();
        let mine = new.remove("conditions").and_then(|c| c.as_array().cloned()).unwrap_or_default();
        let all: Vec<Value> = theirs.into_iter().chain(mine).collect();
        if !all.is_empty() || old.contains_key("conditions") {
            new.insert("conditions".into(), Value::Array(all));
        }
        for (k, v) in old {
            new.entry(k.clone()).or_insert_with(|| v.clone());
        }
    }
    if existing.is_null() && want.as_object().is_some_and(|m| m.is_empty()) {
        return None; // nothing to say, nothing said
    }
    // Keep other controllers' route parents.
    if let Some(parents) = want.get_mut("parents").and_then(Value::as_array_mut) {
        let others = existing["parents"]
            .as_array()
            .into_iter()
            .flatten()
            .filter(|p| p["controllerName"] != controller())
            .cloned();
        parents.extend(others.collect::<Vec<_>>());
    }
    // A policy's ancestors: other controllers' first, as they were, then
    // ours; 16 at most (istiod's mergeAncestors).
    if let Some(ancestors) = want.get_mut("ancestors").and_then(Value::as_array_mut) {
        let ours = [controller(), MESH_CONTROLLER];
        let mut merged: Vec<Value> = existing["ancestors"]
            .as_array()
            .into_iter()
            .flatten()
            .filter(|a| !ours.iter().any(|c| a["controllerName"] == *c))
            .cloned()
            .collect();
        merged.append(ancestors);
        merged.truncate(16);
        *ancestors = merged;
    }
    stamp(&mut want, existing, &now(), &object["metadata"]["generation"]);
    (bare(existing) != bare(&want)).then_some(want)
}

/// Where a status may be: its path, and for TCPRoutes and TLSRoutes (`v1`
/// since Gateway API 1.5, what istiod writes) `v1alpha2` where the
/// cluster's CRDs serve only that.
fn paths(path: &str) -> Vec<String> {
    let mut out = vec![path.to_owned()];
    if path.contains("/tcproutes/") || path.contains("/tlsroutes/") {
        out.push(path.replacen("/v1/", "/v1alpha2/", 1));
    }
    out
}

/// Writes one status if it changed; whether it now says what is desired.
async fn write(api: &Api, s: &ObjectStatus) -> Result<bool, String> {
    let mut found = None;
    for path in paths(&s.path) {
        if let Some(object) = api.get(&path).await? {
            found = Some((path, object));
            break;
        }
    }
    let Some((path, mut object)) = found else { return Ok(false) };
    let shared = s.path.contains(".istio.io/") || s.path.starts_with("/api/v1/");
    let Some(status) = next_status(&object, &s.status, shared) else { return Ok(true) };
    object["status"] = status;
    match api.replace(&format!("{path}/status"), &object).await? {
        Write::Done(_) => Ok(true),
        Write::Conflict => Ok(false), // read again next round
    }
}

/// Runs the election (`lock`: its name and kind) and, while leading,
/// keeps the statuses of `desired`.
pub(super) async fn run(
    api: Api,
    leadership: std::rc::Rc<Leadership>,
    mut desired: watch::Receiver<Arc<Vec<ObjectStatus>>>,
    (lease, lock): (String, Lock),
) {
    let timings = Timings::istiod();
    let mut elector = Elector::new(api.clone(), &lease, lock, &leadership, timings);
    // What was last written (or found) per path: not read again until it
    // changes.
    let mut done: BTreeMap<String, ObjectStatus> = BTreeMap::new();
    let mut leading = false;
    loop {
        let now_leading = elector.lead().await;
        if now_leading != leading {
            leading = now_leading;
            done.clear();
            tracing::info!(target: "model", lease = %lease, leading, "leader election for status writes");
        }
        if leading {
            let statuses = desired.borrow_and_update().clone();
            for s in statuses.iter() {
                if done.get(&s.path) == Some(s) {
                    continue;
                }
                match write(&api, s).await {
                    Ok(true) => {
                        done.insert(s.path.clone(), s.clone());
                    }
                    Ok(false) => {}
                    Err(e) => {
                        tracing::warn!(target: "model", path = %s.path, error = %e, "cannot write status")
                    }
                }
            }
        }
        tokio::select! {
            _ = tokio::time::sleep(timings.retry) => {}
            r = desired.changed() => if r.is_err() { return },
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn times_are_kept_while_a_condition_says_the_same() {
        let desired = json!({"conditions": [
            {"type": "Accepted", "status": "True", "reason": "Accepted", "message": "ok"},
            {"type": "Programmed", "status": "False", "reason": "Invalid", "message": "bad"},
        ]});
        let object = json!({"metadata": {"generation": 3}, "status": {"conditions": [
            {"type": "Accepted", "status": "True", "reason": "Accepted", "message": "ok", "lastTransitionTime": "2020-01-01T00:00:00Z"},
            {"type": "Programmed", "status": "True", "reason": "Programmed", "message": "fine", "lastTransitionTime": "2020-01-01T00:00:00Z"},
        ]}});
        let s = next_status(&object, &desired, false).unwrap();
        assert_eq!(s["conditions"][0]["lastTransitionTime"], "2020-01-01T00:00:00Z");
        assert_ne!(s["conditions"][1]["lastTransitionTime"], "2020-01-01T00:00:00Z");
        assert_eq!(s["conditions"][1]["observedGeneration"], 3);
        let written = json!({"metadata": {"generation": 3}, "status": s});
        assert!(next_status(&written, &desired, false).is_none(), "nothing to write when it says the same");
        let edited = json!({"metadata": {"generation": 4}, "status": written["status"]});
        let again = next_status(&edited, &desired, false).expect("a new generation is reported");
        assert_eq!(again["conditions"][0]["observedGeneration"], 4);
        assert_eq!(again["conditions"][0]["lastTransitionTime"], "2020-01-01T00:00:00Z", "the time stays");
        assert_eq!(civil(0), (1970, 1, 1));
        assert_eq!(civil(20_000), (2024, 10, 4));
    }

    /// Upstream testdata backend-tls-policy (`existing-status`): another
    /// controller's ancestor stays, before ours.
    #[test]
    fn other_controllers_policy_ancestors_are_kept() {
        let ours = json!({"ancestorRef": {"group": "", "kind": "Service", "name": "httpbin"},
            "controllerName": MESH_CONTROLLER, "conditions": [{"type": "Accepted", "status": "True", "reason": "Accepted", "message": "Configuration is valid"}]});
        let desired = json!({"ancestors": [ours]});
        let theirs = json!({"ancestorRef": {"group": "", "kind": "Service", "name": "httpbin"},
            "controllerName": "example.com/some-other-controller", "conditions": [{"type": "Accepted", "status": "True", "reason": "Accepted", "message": "hello", "lastTransitionTime": "2020-01-01T00:00:00Z"}]});
        let stale = json!({"ancestorRef": {"group": "", "kind": "Service", "name": "gone"},
            "controllerName": MESH_CONTROLLER, "conditions": []});
        let object = json!({"metadata": {"generation": 2}, "status": {"ancestors": [theirs, stale]}});
        let s = next_status(&object, &desired, false).unwrap();
        let a = s["ancestors"].as_array().unwrap();
        assert_eq!(a.len(), 2, "{s}");
        assert_eq!(a[0]["controllerName"], "example.com/some-other-controller");
        assert_eq!(a[0]["conditions"][0]["lastTransitionTime"], "2020-01-01T00:00:00Z");
        assert_eq!(a[1]["controllerName"], MESH_CONTROLLER);
        assert_eq!(a[1]["conditions"][0]["observedGeneration"], 2);
        let written = json!({"metadata": {"generation": 2}, "status": s});
        assert!(next_status(&written, &desired, false).is_none(), "nothing to write when it says the same");
    }

    /// An Istio object's status is shared: another writer's condition and
    /// fields stay beside ours (istiod applies its own server-side).
    #[test]
    fn an_istio_objects_other_conditions_are_kept() {
        let desired = json!({"conditions": [{"type": "ZtunnelAccepted", "status": "True", "reason": "Accepted", "message": "attached to ztunnel"}]});
        let object = json!({"metadata": {"generation": 1}, "status": {
        "validationMessages": [{"type": {"code": "IST0101"}}],
        "conditions": [
            {"type": "WaypointAccepted", "status": "True", "reason": "Accepted", "message": "bound", "lastTransitionTime": "2020-01-01T00:00:00Z"},
            {"type": "ZtunnelAccepted", "status": "False", "reason": "UnsupportedValue", "message": "old", "lastTransitionTime": "2020-01-01T00:00:00Z"},
        ]}});
        let s = next_status(&object, &desired, true).unwrap();
        let types: Vec<&str> =
            s["conditions"].as_array().unwrap().iter().map(|c| c["type"].as_str().unwrap()).collect();
        assert_eq!(types, ["WaypointAccepted", "ZtunnelAccepted"]);
        assert_eq!(s["conditions"][1]["status"], "True");
        assert_eq!(s["validationMessages"][0]["type"]["code"], "IST0101");
        let written = json!({"metadata": {"generation": 1}, "status": s});
        assert!(next_status(&written, &desired, true).is_none(), "nothing to write when it says the same");
    }

    /// A condition marked `remove` takes ours off a Service's status and
    /// leaves the rest; where there is none, nothing is written.
    #[test]
    fn a_removed_condition_goes_and_the_rest_stays() {
        let desired = json!({"conditions": [{"type": "istio.io/WaypointBound", "remove": true}]});
        let object = json!({"status": {"loadBalancer": {"ingress": [{"ip": "1.2.3.4"}]}, "conditions": [
            {"type": "istio.io/WaypointBound", "status": "True", "reason": "WaypointAccepted", "message": "m", "lastTransitionTime": "2020-01-01T00:00:00Z"},
            {"type": "Other", "status": "True", "reason": "R", "message": "m", "lastTransitionTime": "2020-01-01T00:00:00Z"},
        ]}});
        let s = next_status(&object, &desired, true).unwrap();
        assert_eq!(s["conditions"].as_array().unwrap().len(), 1, "{s}");
        assert_eq!(s["conditions"][0]["type"], "Other");
        assert_eq!(s["loadBalancer"]["ingress"][0]["ip"], "1.2.3.4");
        let clean = json!({"status": {"loadBalancer": {}}});
        assert!(next_status(&clean, &desired, true).is_none(), "nothing to remove: no write");
    }

    #[test]
    fn other_controllers_route_parents_are_kept() {
        let desired =
            json!({"parents": [{"parentRef": {"name": "gw"}, "controllerName": controller(), "conditions": []}]});
        let object = json!({"status": {"parents": [{"parentRef": {"name": "other"}, "controllerName": "example.com/gw", "conditions": []}]}});
        let s = next_status(&object, &desired, false).unwrap();
        assert_eq!(s["parents"].as_array().unwrap().len(), 2);
    }
}
