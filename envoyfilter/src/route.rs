//! ROUTE_CONFIGURATION, VIRTUAL_HOST and HTTP_ROUTE patches (rc_patch.go
//! `ApplyRouteConfigurationPatches`): MERGE into a matching route
//! configuration; per virtual host REMOVE, MERGE, REPLACE, then ADD; per
//! route REMOVE and MERGE, then ADD, INSERT_BEFORE, INSERT_AFTER,
//! INSERT_FIRST. A route configuration matches by name and by the port its
//! name carries (a sidecar's `80` or `inbound|8080||`); a gateway's by its
//! `http.<port>` or `https.<port>.<port name>.<gateway>.<namespace>` name,
//! the port through the gateway's port map.

use std::collections::{BTreeMap, BTreeSet};

use prost_reflect::{DynamicMessage, Value};

use crate::cluster::Outcome;
use crate::fields::{list_field, set_list, str_field};
use crate::filters::{Applied, ApplyTo, Context, Operation, Patch};
use crate::merge::merge;

/// A gateway's service ports by target port (`GatewayPortMap`).
pub type PortMap = BTreeMap<u32, BTreeSet<u32>>;

/// `ParseGatewayRDSRouteName`: port, port name, `namespace/gateway`.
pub fn parse_gateway_route_name(name: &str) -> (u32, String, String) {
    if let Some(port) = name.strip_prefix("http.") {
        return (port.parse().unwrap_or(0), String::new(), String::new());
    }
    if let Some(rest) = name.strip_prefix("https.").filter(|_| name.matches('.').count() == 4) {
        let mut parts = rest.splitn(4, '.');
        let port = parts.next().and_then(|p| p.parse().ok()).unwrap_or(0);
        let port_name = parts.next().unwrap_or("").to_owned();
        let gw = parts.next().unwrap_or("");
        let ns = parts.next().unwrap_or("");
        return (port, port_name, format!("{ns}/{gw}"));
    }
    (0, String::new(), String::new())
}

/// `getListenerPortFromName`.
fn sidecar_port(name: &str) -> u32 {
    if name.starts_with("inbound") {
        return crate::cluster::parse_name(name).map_or(0, |(_, p, _, _)| p);
    }
    name.parse().unwrap_or(0)
}

/// `routeConfigurationMatch`.
pub fn rc_matches(ctx: Context, rc_name: &str, p: &Patch, ports: &PortMap) -> bool {
    let Some(m) = &p.route_configuration else { return true };
    if !m.name.is_empty() && m.name != rc_name {
        return false;
    }
    if ctx != Context::Gateway {
        return m.port_number == 0 || m.port_number == sidecar_port(rc_name);
    }
    let (port, port_name, gateway) = parse_gateway_route_name(rc_name);
    if !m.port_name.is_empty() && m.port_name != port_name {
        return false;
    }
    if !m.gateway.is_empty() && m.gateway != gateway {
        return false;
    }
    m.port_number == 0
        || match ports.get(&port) {
            Some(service_ports) => service_ports.contains(&m.port_number),
            None => port == m.port_number,
        }
}

/// `virtualHostMatch`.
fn vhost_matches(vh: &DynamicMessage, p: &Patch) -> bool {
    let Some(m) = p.route_configuration.as_ref().and_then(|r| r.vhost.as_ref()) else { return true };
    (m.name.is_empty() || m.name == str_field(vh, "name"))
        && (m.domain_name.is_empty()
            || matches!(vh.get_field_by_name("domains").map(|v| v.into_owned()),
                Some(Value::List(d)) if d.iter().any(|x| x.as_str() == Some(m.domain_name.as_str()))))
}

fn has_route_match(p: &Patch) -> bool {
    p.route_configuration.as_ref().and_then(|r| r.vhost.as_ref()).is_some_and(|v| v.route.is_some())
}

/// `routeMatch`.
fn route_matches(r: &DynamicMessage, p: &Patch) -> bool {
    let Some(m) = p.route_configuration.as_ref().and_then(|r| r.vhost.as_ref()).and_then(|v| v.route.as_ref()) else {
        return true;
    };
    if !m.name.is_empty() && m.name != str_field(r, "name") {
        return false;
    }
    let action = match () {
        _ if r.has_field_by_name("route") => "ROUTE",
        _ if r.has_field_by_name("redirect") => "REDIRECT",
        _ if r.has_field_by_name("direct_response") => "DIRECT_RESPONSE",
        _ => return true,
    };
    matches!(m.action.as_str(), "" | "ANY") || m.action == action
}

/// Applies the route-level patches of `applied` in `ctx` to `rc`.
pub fn apply(
    applied: &Applied,
    ctx: Context,
    mut rc: DynamicMessage,
    ports: &PortMap,
    outcomes: &mut Vec<Outcome>,
) -> DynamicMessage {
    let name = str_field(&rc, "name");
    let note = |outcomes: &mut Vec<Outcome>, p: &Patch, kind: &'static str, ok: bool| {
        outcomes.push(Outcome { key: p.filter.clone(), kind, applied: ok });
    };
    for p in applied.of(ApplyTo::RouteConfiguration) {
        if !p.operation.merges() {
            continue;
        }
        let ok = p.in_context(ctx) && rc_matches(ctx, &name, p, ports);
        if let (true, Some(v)) = (ok, &p.value) {
            merge(&mut rc, v, p.operation.lists());
        }
        note(outcomes, p, "route", ok);
    }
    let here = |p: &Patch| p.in_context(ctx) && rc_matches(ctx, &name, p, ports);
    let mut vhosts = list_field(&rc, "virtual_hosts");
    let mut removed = BTreeSet::new();
    for vh in vhosts.iter_mut() {
        let mut gone = false;
        for p in applied.of(ApplyTo::VirtualHost) {
            let ok = here(p) && vhost_matches(vh, p);
            note(outcomes, p, "vhost", ok);
            if !ok {
                continue;
            }
            match p.operation {
                Operation::Remove => {
                    removed.insert(str_field(vh, "name"));
                    gone = true;
                    break;
                }
                op if op.merges() => {
                    if let Some(v) = &p.value {
                        merge(vh, v, op.lists());
                    }
                }
                Operation::Replace => {
                    if let Some(v) = &p.value {
                        *vh = v.clone();
                    }
                }
                _ => {}
            }
        }
        if !gone {
            patch_routes(applied, vh, &here, outcomes);
        }
    }
    for p in applied.of(ApplyTo::VirtualHost).iter().filter(|p| p.operation == Operation::Add) {
        let ok = here(p);
        if let (true, Some(v)) = (ok, &p.value) {
            vhosts.push(v.clone());
        }
        outcomes.push(Outcome { key: p.filter.clone(), kind: "vhost", applied: ok });
    }
    vhosts.retain(|vh| !removed.contains(&str_field(vh, "name")));
    set_list(&mut rc, "virtual_hosts", vhosts);
    rc
}

/// `patchHTTPRoutes`.
fn patch_routes(
    applied: &Applied,
    vh: &mut DynamicMessage,
    here: &dyn Fn(&Patch) -> bool,
    outcomes: &mut Vec<Outcome>,
) {
    let patches = applied.of(ApplyTo::HttpRoute);
    if patches.is_empty() {
        return;
    }
    let mut routes: Vec<Option<DynamicMessage>> = list_field(vh, "routes").into_iter().map(Some).collect();
    for slot in routes.iter_mut() {
        for p in patches {
            let Some(r) = slot.as_mut() else { break };
            let ok = here(p) && vhost_matches(vh, p) && route_matches(r, p);
            outcomes.push(Outcome { key: p.filter.clone(), kind: "route", applied: ok });
            if !ok {
                continue;
            }
            if p.operation == Operation::Remove {
                *slot = None;
                break;
            }
            if let (true, Some(v)) = (p.operation.merges(), &p.value) {
                merge(r, v, p.operation.lists());
            }
        }
    }
    let mut routes: Vec<DynamicMessage> = routes.into_iter().flatten().collect();
    for p in patches {
        if !here(p) || !vhost_matches(vh, p) {
            outcomes.push(Outcome { key: p.filter.clone(), kind: "route", applied: false });
            continue;
        }
        let Some(value) = p.value.clone() else { continue };
        let position = |routes: &[DynamicMessage]| routes.iter().position(|r| route_matches(r, p));
        let ok = match p.operation {
            Operation::Add => {
                routes.push(value);
                true
            }
            Operation::InsertAfter if !has_route_match(p) => {
                routes.push(value);
                continue;
            }
            Operation::InsertAfter => match position(&routes) {
                Some(i) => {
                    routes.insert(i + 1, value);
                    true
                }
                None => false,
            },
            Operation::InsertBefore | Operation::InsertFirst if !has_route_match(p) => {
                routes.insert(0, value);
                continue;
            }
            Operation::InsertBefore => match position(&routes) {
                Some(i) => {
                    routes.insert(i, value);
                    true
                }
                None => false,
            },
            Operation::InsertFirst => match position(&routes) {
                Some(_) => {
                    routes.insert(0, value);
                    true
                }
                None => continue,
            },
            _ => false,
        };
        outcomes.push(Outcome { key: p.filter.clone(), kind: "route", applied: ok });
    }
    set_list(vh, "routes", routes);
}

#[cfg(test)]
mod tests {
    use std::sync::Arc;

    use serde_json::{Value as Json, json};

    use super::*;
    use crate::filters::{EnvoyFilters, Filter, Proxy};
    use crate::schema;

    fn data() -> Json {
        serde_json::from_str(include_str!("../testdata/rc_patch.json")).unwrap()
    }

    fn message(name: &str, v: &Json) -> DynamicMessage {
        schema::from_json(schema::message(name).unwrap(), v).unwrap()
    }

    /// One patch with `route_configuration` as its match.
    fn patch_with(context: &str, rc: Json) -> Arc<Patch> {
        let spec = json!({"configPatches": [{"applyTo": "HTTP_ROUTE",
            "match": {"context": context, "routeConfiguration": rc}, "patch": {"operation": "MERGE"}}]});
        Filter::read("ns", "f", "", &spec).patches[0].clone()
    }

    fn context(s: &str) -> Context {
        match s {
            "GATEWAY" => Context::Gateway,
            "SIDECAR_INBOUND" => Context::SidecarInbound,
            _ => Context::SidecarOutbound,
        }
    }

    fn port_map(v: &Json) -> PortMap {
        v.as_object()
            .into_iter()
            .flatten()
            .map(|(k, ports)| {
                (k.parse().unwrap(), ports.as_array().unwrap().iter().map(|p| p.as_u64().unwrap() as u32).collect())
            })
            .collect()
    }

    /// Upstream `Test_virtualHostMatch`, `Test_routeConfigurationMatch`
    /// and `Test_routeMatch` (rc_patch_test.go), as data
    /// (testdata/rc_patch.json); a nil object matches only where the patch
    /// asks for nothing of it, as in istiod.
    #[test]
    fn route_configurations_match_as_istiod_matches_them() {
        let d = data();
        let cases = d["match_cases"].as_array().unwrap();
        assert_eq!(cases.len(), 21);
        for c in cases {
            let (test, name, want) =
                (c["test"].as_str().unwrap(), c["name"].as_str().unwrap(), c["want"].as_bool().unwrap());
            let got = match test {
                "Test_virtualHostMatch" => {
                    let p = patch_with("ANY", json!({"vhost": c["match"]}));
                    match &c["vhost"] {
                        Json::Null => p.route_configuration.as_ref().and_then(|r| r.vhost.as_ref()).is_none(),
                        vh => vhost_matches(&message("envoy.config.route.v3.VirtualHost", vh), &p),
                    }
                }
                "Test_routeMatch" => {
                    let p = patch_with("ANY", json!({"vhost": {"route": c["match"]}}));
                    match &c["route"] {
                        Json::Null => !has_route_match(&p),
                        r => route_matches(&message("envoy.config.route.v3.Route", r), &p),
                    }
                }
                "Test_routeConfigurationMatch" => {
                    let ctx = context(c["context"].as_str().unwrap_or("SIDECAR_OUTBOUND"));
                    let p = match &c["match"] {
                        Json::Null => patch_with("ANY", Json::Null),
                        m => patch_with("ANY", m.clone()),
                    };
                    let rc_name = c["route_configuration"]["name"].as_str().unwrap_or("");
                    rc_matches(ctx, rc_name, &p, &port_map(&c["port_map"]))
                }
                other => panic!("unknown test {other}"),
            };
            assert_eq!(got, want, "{test}/{name}");
        }
    }

    /// Upstream `TestApplyRouteConfigurationPatches`, `TestReplaceVhost`,
    /// `TestMergeAndReplaceListVhost` and `TestPatchHTTPRoute`
    /// (rc_patch_test.go): filters, inputs and istiod's outputs as data.
    #[test]
    fn route_configurations_are_patched_as_istiods_tests() {
        let d = data();
        let cases = d["patch_cases"].as_array().unwrap();
        assert_eq!(cases.len(), 9);
        for c in cases {
            let name = format!("{}/{}", c["test"].as_str().unwrap(), c["name"].as_str().unwrap());
            let filters: Vec<(String, String, String, Json)> = c["filters"]
                .as_array()
                .unwrap()
                .iter()
                .map(|f| {
                    (
                        f["namespace"].as_str().unwrap().to_owned(),
                        f["name"].as_str().unwrap().to_owned(),
                        format!("{:06}", f["creation_order"].as_u64().unwrap_or(0)),
                        f["spec"].clone(),
                    )
                })
                .collect();
            let filters = EnvoyFilters::new(
                c["root_namespace"].as_str().unwrap_or(""),
                filters.iter().map(|(ns, n, t, s)| (ns.as_str(), n.as_str(), t.as_str(), s)),
            );
            let ns = c["proxy"]["namespace"].as_str().unwrap_or("not-default");
            let applied = filters.applied(&Proxy { namespace: ns, labels: &[], version: "", metadata: &[] });
            let ctx = context(c["context"].as_str().unwrap());
            let ports = port_map(&c["port_map"]);
            let mut input = c["input"].clone();
            let direct = !c["direct_call"].is_null();
            if direct {
                // Go patches the one virtual host it is given.
                input["virtual_hosts"] = json!([input["virtual_hosts"][0]]);
            }
            let rc = message("envoy.config.route.v3.RouteConfiguration", &input);
            let got = serde_json::to_value(apply(&applied, ctx, rc, &ports, &mut Vec::new())).unwrap();
            let want = serde_json::to_value(message("envoy.config.route.v3.RouteConfiguration", &c["output"])).unwrap();
            if direct {
                assert_eq!(got["virtualHosts"][0], want["virtualHosts"][0], "{name}");
            } else {
                assert_eq!(got, want, "{name}");
            }
        }
    }
}
