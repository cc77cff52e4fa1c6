//! LISTENER, LISTENER_FILTER, FILTER_CHAIN, NETWORK_FILTER and
//! HTTP_FILTER patches (listener_patch.go `ApplyListenerPatches`), over
//! dynamic listeners. For each listener: its LISTENER patches (REMOVE,
//! MERGE), its listener filters', then each filter chain (the default one
//! too): FILTER_CHAIN REMOVE and MERGE (a transport socket of the same
//! name merged at its typed config), NETWORK_FILTER ADD, INSERT_*, REPLACE,
//! REMOVE, then MERGE into each filter (its typed config merged as its
//! message, its name replaced), and, in an HTTP connection manager,
//! HTTP_FILTER operations likewise; FILTER_CHAIN ADD after; chains left
//! without filters dropped. LISTENER ADD appends listeners (with context
//! ANY, only a sidecar's outbound side and gateways).

use prost_reflect::{DynamicMessage, Value};

use crate::cluster::Outcome;
use crate::fields::{list_field, msg_field, set_list, str_field};
use crate::filters::{Applied, ApplyTo, Context, Operation, Patch};
use crate::merge::{merge, merge_any, to_any};

/// The listeners istiod names virtual (their ports are filter chains').
const VIRTUAL: [&str; 2] = ["virtualInbound", "virtualOutbound"];
/// The HTTP connection manager's name.
const HCM: &str = "envoy.filters.network.http_connection_manager";
/// Its config's type.
const HCM_TYPE: &str = "envoy.extensions.filters.network.http_connection_manager.v3.HttpConnectionManager";

fn strings(m: &DynamicMessage, name: &str) -> Vec<String> {
    match m.get_field_by_name(name).map(|v| v.into_owned()) {
        Some(Value::List(items)) => items.into_iter().filter_map(|v| v.as_str().map(str::to_owned)).collect(),
        _ => Vec::new(),
    }
}

/// The port of a listener's socket address (`None`: not a socket).
fn listener_port(l: &DynamicMessage) -> Option<u32> {
    let addr = msg_field(l, "address")?;
    let sock = msg_field(&addr, "socket_address")?;
    sock.get_field_by_name("port_value").and_then(|v| v.as_u32())
}

/// A filter chain match's destination port (`None`: not set).
fn destination_port(fc: &DynamicMessage) -> Option<u32> {
    let m = msg_field(fc, "filter_chain_match")?;
    let p = msg_field(&m, "destination_port")?;
    p.get_field_by_name("value").and_then(|v| v.as_u32())
}

/// `listenerMatch`.
fn listener_matches(l: &DynamicMessage, p: &Patch) -> bool {
    let Some(m) = &p.listener else { return true };
    let name = str_field(l, "name");
    if !m.name.is_empty() && m.name != name {
        return false;
    }
    if p.apply_to != ApplyTo::Listener && VIRTUAL.contains(&name.as_str()) {
        return true;
    }
    m.port_number == 0 || listener_port(l) == Some(m.port_number)
}

/// `filterChainMatch` (the listener matched).
fn chain_matches(l: &DynamicMessage, fc: &DynamicMessage, p: &Patch) -> bool {
    let Some(m) = &p.listener else { return true };
    let virtual_ = VIRTUAL.contains(&str_field(l, "name").as_str());
    if virtual_ && m.port_number > 0 && destination_port(fc).unwrap_or(0) != m.port_number {
        return false;
    }
    let Some(c) = &m.filter_chain else { return true };
    if !c.name.is_empty() && c.name != str_field(fc, "name") {
        return false;
    }
    let fcm = msg_field(fc, "filter_chain_match");
    if !c.sni.is_empty() && !fcm.as_ref().is_some_and(|x| strings(x, "server_names").contains(&c.sni)) {
        return false;
    }
    if !c.transport_protocol.is_empty()
        && fcm.as_ref().is_none_or(|x| str_field(x, "transport_protocol") != c.transport_protocol)
    {
        return false;
    }
    if !c.application_protocols.is_empty() {
        let Some(x) = &fcm else { return false };
        let have = strings(x, "application_protocols");
        if !c.application_protocols.split(',').all(|p| have.iter().any(|h| h == p)) {
            return false;
        }
    }
    c.destination_port == 0 || destination_port(fc) == Some(c.destination_port)
}

fn network_filter_name(p: &Patch) -> Option<&str> {
    p.listener.as_ref()?.filter_chain.as_ref()?.filter.as_ref().map(|f| f.name.as_str())
}

fn http_filter_name(p: &Patch) -> Option<&str> {
    p.listener.as_ref()?.filter_chain.as_ref()?.filter.as_ref()?.sub_filter.as_ref().map(|s| s.name.as_str())
}

fn listener_filter_name(p: &Patch) -> Option<&str> {
    p.listener.as_ref().map(|l| l.listener_filter.as_str()).filter(|n| !n.is_empty())
}

/// The list operations on filters (`ADD`, `INSERT_*`, `REPLACE`,
/// `REMOVE`) every level shares: whether the patch applied.
fn list_op(items: &mut Vec<DynamicMessage>, p: &Patch, target: Option<&str>) -> bool {
    let Some(value) = p.value.clone().or_else(|| {
        (p.operation == Operation::Remove)
            .then(|| DynamicMessage::new(crate::schema::message(p.apply_to.value_type()).expect("in the schema")))
    }) else {
        return false;
    };
    let hit = |f: &DynamicMessage| target.is_none_or(|t| str_field(f, "name") == t);
    match p.operation {
        Operation::Add => {
            items.push(value);
            true
        }
        Operation::InsertFirst => {
            items.insert(0, value);
            // istiod counts an HTTP filter's INSERT_FIRST as not applied.
            p.apply_to != ApplyTo::HttpFilter
        }
        Operation::InsertAfter => match target {
            None => {
                items.push(value);
                false
            }
            Some(_) => match items.iter().position(hit) {
                Some(i) => {
                    items.insert(i + 1, value);
                    true
                }
                None => false,
            },
        },
        Operation::InsertBefore => match target {
            None => {
                items.insert(0, value);
                false
            }
            Some(_) => match items.iter().position(hit) {
                Some(i) => {
                    items.insert(i, value);
                    true
                }
                None => false,
            },
        },
        Operation::Replace if target.is_some() => match items.iter().position(hit) {
            Some(i) => {
                items[i] = value;
                true
            }
            None => false,
        },
        Operation::Remove if target.is_some() => {
            items.retain(|f| !hit(f));
            false
        }
        _ => false,
    }
}

/// MERGE into one filter (`patchNetworkFilter`, `mergeHTTPFilter`,
/// `mergeListenerFilter`): its typed config merged with the patch's (kept
/// when they do not merge), its name replaced by the patch's; a filter
/// without a typed config is left alone. Whether it applied.
/// `mergeListenerFilter` is the same but never renames (`rename`).
fn merge_filter(f: &mut DynamicMessage, p: &Patch, rename: bool) -> bool {
    let Some(value) = &p.value else { return false };
    let Some(own) = msg_field(f, "typed_config") else { return false };
    let name = if rename { str_field(value, "name") } else { String::new() };
    if let Some(theirs) = msg_field(value, "typed_config") {
        let Some(merged) = merge_any(&own, &theirs) else {
            // Configs of two types do not merge: istiod's merge panics and
            // the patch is counted an error; the filter stays as it was.
            crate::status::error(match p.apply_to {
                ApplyTo::HttpFilter => "httpfilter",
                ApplyTo::ListenerFilter => "listenerfilter",
                _ => "networkfilter",
            });
            return false;
        };
        f.set_field_by_name("typed_config", Value::Message(merged));
    }
    if !name.is_empty() {
        f.set_field_by_name("name", Value::String(name));
    }
    true
}

/// Applies the LISTENER-level and lower patches of `applied` in `ctx` to
/// `l`; `None` when a patch removes it.
pub fn apply(
    applied: &Applied,
    ctx: Context,
    mut l: DynamicMessage,
    outcomes: &mut Vec<Outcome>,
) -> Option<DynamicMessage> {
    let mut note = |p: &Patch, kind: &'static str, ok: bool| {
        outcomes.push(Outcome { key: p.filter.clone(), kind, applied: ok });
    };
    for p in applied.of(ApplyTo::Listener) {
        if !p.in_context(ctx) || !listener_matches(&l, p) {
            note(p, "listener", false);
            continue;
        }
        note(p, "listener", true);
        if p.operation == Operation::Remove {
            return None;
        }
        if let (true, Some(v)) = (p.operation.merges(), &p.value) {
            merge(&mut l, v, p.operation.lists());
        }
    }
    // Listener filters.
    let mut lfs = list_field(&l, "listener_filters");
    for p in applied.of(ApplyTo::ListenerFilter) {
        if !p.in_context(ctx) || !listener_matches(&l, p) {
            note(p, "listenerfilter", false);
            continue;
        }
        let target = listener_filter_name(p);
        let ok = match p.operation {
            // istiod merges into every listener filter, whatever its name,
            // and never renames one (mergeListenerFilter).
            Operation::Merge if target.is_some() => {
                let mut any = false;
                for f in lfs.iter_mut() {
                    any |= merge_filter(f, p, false);
                }
                any
            }
            Operation::Merge | Operation::MergeAndReplaceList => false,
            _ => list_op(&mut lfs, p, target),
        };
        note(p, "listenerfilter", ok);
    }
    if l.has_field_by_name("listener_filters") || !lfs.is_empty() {
        set_list(&mut l, "listener_filters", lfs);
    }
    // Filter chains.
    let mut chains = list_field(&l, "filter_chains");
    for fc in chains.iter_mut() {
        if list_field(fc, "filters").is_empty() {
            continue;
        }
        patch_chain(applied, ctx, &l, fc, outcomes);
    }
    if let Some(mut fc) = msg_field(&l, "default_filter_chain").filter(|fc| !list_field(fc, "filters").is_empty()) {
        patch_chain(applied, ctx, &l, &mut fc, outcomes);
        if list_field(&fc, "filters").is_empty() {
            l.clear_field_by_name("default_filter_chain");
        } else {
            l.set_field_by_name("default_filter_chain", Value::Message(fc));
        }
    }
    for p in applied.of(ApplyTo::FilterChain).iter().filter(|p| p.operation == Operation::Add) {
        let ok = p.in_context(ctx) && listener_matches(&l, p);
        outcomes.push(Outcome { key: p.filter.clone(), kind: "filterchain", applied: ok });
        if let (true, Some(v)) = (ok, &p.value) {
            chains.push(v.clone());
        }
    }
    chains.retain(|fc| !list_field(fc, "filters").is_empty());
    set_list(&mut l, "filter_chains", chains);
    Some(l)
}

/// `patchFilterChain`: a chain whose filters end up empty is dropped by
/// the caller.
fn patch_chain(
    applied: &Applied,
    ctx: Context,
    l: &DynamicMessage,
    fc: &mut DynamicMessage,
    outcomes: &mut Vec<Outcome>,
) {
    for p in applied.of(ApplyTo::FilterChain) {
        if !p.in_context(ctx) || !listener_matches(l, p) || !chain_matches(l, fc, p) {
            outcomes.push(Outcome { key: p.filter.clone(), kind: "filterchain", applied: false });
            continue;
        }
        outcomes.push(Outcome { key: p.filter.clone(), kind: "filterchain", applied: true });
        if p.operation == Operation::Remove {
            fc.clear_field_by_name("filters");
            return;
        }
        if let (true, Some(v)) = (p.operation.merges(), &p.value) {
            match merge_transport_socket(fc, v) {
                Err(()) => continue,
                Ok(true) => {}
                Ok(false) => merge(fc, v, p.operation.lists()),
            }
        }
    }
    // Network filters: list operations, then MERGE into each.
    let mut filters = list_field(fc, "filters");
    for p in applied.of(ApplyTo::NetworkFilter) {
        if !p.in_context(ctx) || !listener_matches(l, p) || !chain_matches(l, fc, p) {
            outcomes.push(Outcome { key: p.filter.clone(), kind: "networkfilter", applied: false });
            continue;
        }
        if p.operation.merges() {
            continue;
        }
        let ok = list_op(&mut filters, p, network_filter_name(p));
        outcomes.push(Outcome { key: p.filter.clone(), kind: "networkfilter", applied: ok });
    }
    for f in filters.iter_mut() {
        for p in applied.of(ApplyTo::NetworkFilter) {
            let here = p.in_context(ctx)
                && listener_matches(l, p)
                && chain_matches(l, fc, p)
                && network_filter_name(p).is_none_or(|n| n == str_field(f, "name"));
            if !here {
                outcomes.push(Outcome { key: p.filter.clone(), kind: "networkfilter", applied: false });
                continue;
            }
            if p.operation == Operation::Merge && merge_filter(f, p, true) {
                outcomes.push(Outcome { key: p.filter.clone(), kind: "networkfilter", applied: true });
            }
        }
        if str_field(f, "name") == HCM {
            patch_http_filters(applied, ctx, l, fc, f, outcomes);
        }
    }
    set_list(fc, "filters", filters);
}

/// `patchHTTPFilters`: HTTP_FILTER operations on an HTTP connection
/// manager's filters, then MERGE into each.
fn patch_http_filters(
    applied: &Applied,
    ctx: Context,
    l: &DynamicMessage,
    fc: &DynamicMessage,
    f: &mut DynamicMessage,
    outcomes: &mut Vec<Outcome>,
) {
    let patches = applied.of(ApplyTo::HttpFilter);
    if patches.is_empty() {
        return;
    }
    let Some(any) = msg_field(f, "typed_config") else { return };
    // Only an HTTP connection manager's config is read as one
    // (UnmarshalTo checks the type).
    if !str_field(&any, "type_url").ends_with(&format!("/{HCM_TYPE}")) {
        return;
    }
    let Some(desc) = crate::schema::message(HCM_TYPE) else { return };
    let Some(bytes) = any.get_field_by_name("value").and_then(|v| v.as_bytes().cloned()) else { return };
    let Ok(mut hcm) = DynamicMessage::decode(desc, bytes) else { return };
    let mut http = list_field(&hcm, "http_filters");
    let net = str_field(f, "name");
    let here = |p: &Patch| {
        p.in_context(ctx)
            && listener_matches(l, p)
            && chain_matches(l, fc, p)
            && network_filter_name(p).is_none_or(|n| n == net)
    };
    for p in patches {
        if !here(p) {
            outcomes.push(Outcome { key: p.filter.clone(), kind: "httpfilter", applied: false });
            continue;
        }
        if p.operation.merges() {
            continue;
        }
        let ok = list_op(&mut http, p, http_filter_name(p));
        outcomes.push(Outcome { key: p.filter.clone(), kind: "httpfilter", applied: ok });
    }
    for hf in http.iter_mut() {
        for p in patches {
            let ok = here(p)
                && http_filter_name(p).is_none_or(|n| n == str_field(hf, "name"))
                && p.operation == Operation::Merge
                && merge_filter(hf, p, true);
            outcomes.push(Outcome { key: p.filter.clone(), kind: "httpfilter", applied: ok });
        }
    }
    set_list(&mut hcm, "http_filters", http);
    f.set_field_by_name("typed_config", Value::Message(to_any(&hcm)));
}

/// `mergeTransportSocketListener`: a patch's transport socket merges into
/// the chain's of the same name at its typed config. Whether it handled
/// the patch (`false`: merge it whole).
fn merge_transport_socket(fc: &mut DynamicMessage, value: &DynamicMessage) -> Result<bool, ()> {
    let Some(theirs) = msg_field(value, "transport_socket") else { return Ok(false) };
    let Some(mut own) = msg_field(fc, "transport_socket") else { return Ok(false) };
    if str_field(&theirs, "name") != str_field(&own, "name") {
        return Ok(false);
    }
    if let (Some(dst), Some(src)) = (msg_field(&own, "typed_config"), msg_field(&theirs, "typed_config")) {
        let merged = merge_any(&dst, &src).ok_or(())?;
        own.set_field_by_name("typed_config", Value::Message(merged));
        fc.set_field_by_name("transport_socket", Value::Message(own));
    }
    Ok(true)
}

/// The listener levels' patches that could change a listener in `ctx`
/// named `name` on `port` (by its name and port).
pub fn touching<'a>(
    applied: &'a Applied,
    ctx: Context,
    name: &'a str,
    port: Option<u32>,
) -> impl Iterator<Item = &'a std::sync::Arc<Patch>> + 'a {
    let levels =
        [ApplyTo::Listener, ApplyTo::ListenerFilter, ApplyTo::FilterChain, ApplyTo::NetworkFilter, ApplyTo::HttpFilter];
    levels.into_iter().flat_map(|t| applied.of(t)).filter(move |p| {
        p.in_context(ctx)
            && p.listener.as_ref().is_none_or(|m| {
                (m.name.is_empty() || m.name == name)
                    && (m.port_number == 0
                        || (p.apply_to != ApplyTo::Listener && VIRTUAL.contains(&name))
                        || port == Some(m.port_number))
            })
    })
}

/// Whether a LISTENER REMOVE patch drops listener `name` on `port`.
pub fn removed(applied: &Applied, ctx: Context, name: &str, port: Option<u32>) -> bool {
    applied.of(ApplyTo::Listener).iter().any(|p| {
        p.operation == Operation::Remove
            && p.in_context(ctx)
            && p.listener.as_ref().is_none_or(|m| {
                (m.name.is_empty() || m.name == name) && (m.port_number == 0 || port == Some(m.port_number))
            })
    })
}

/// istiod patches an inbound HTTP route configuration as it builds it
/// (`buildSidecarInboundHTTPRouteConfig`): the route configurations inline
/// in `l`'s HTTP connection managers, patched in `ctx`. Whether any was.
pub fn patch_inline_routes(
    applied: &Applied,
    ctx: Context,
    l: &mut DynamicMessage,
    outcomes: &mut Vec<Outcome>,
) -> bool {
    let levels = [ApplyTo::RouteConfiguration, ApplyTo::VirtualHost, ApplyTo::HttpRoute];
    if levels.iter().all(|t| applied.of(*t).is_empty()) {
        return false;
    }
    let Some(desc) = crate::schema::message(HCM_TYPE) else { return false };
    let mut changed = false;
    let mut patch_chain = |fc: &mut DynamicMessage| {
        let mut filters = list_field(fc, "filters");
        for f in filters.iter_mut().filter(|f| str_field(f, "name") == HCM) {
            let Some(any) = msg_field(f, "typed_config") else { continue };
            let Some(bytes) = any.get_field_by_name("value").and_then(|v| v.as_bytes().cloned()) else { continue };
            let Ok(mut hcm) = DynamicMessage::decode(desc.clone(), bytes) else { continue };
            let Some(rc) = msg_field(&hcm, "route_config") else { continue };
            let rc = crate::route::apply(applied, ctx, rc, &crate::route::PortMap::new(), outcomes);
            hcm.set_field_by_name("route_config", Value::Message(rc));
            f.set_field_by_name("typed_config", Value::Message(to_any(&hcm)));
            changed = true;
        }
        set_list(fc, "filters", filters);
    };
    let mut chains = list_field(l, "filter_chains");
    chains.iter_mut().for_each(&mut patch_chain);
    set_list(l, "filter_chains", chains);
    changed
}

#[cfg(test)]
mod tests {
    use serde_json::Value as Json;

    use super::*;
    use crate::filters::{EnvoyFilters, Proxy};
    use crate::schema;

    fn listener(v: &Json) -> DynamicMessage {
        schema::from_json(schema::message("envoy.config.listener.v3.Listener").unwrap(), v).unwrap()
    }

    /// Upstream `TestApplyListenerPatches` (listener_patch_test.go): its
    /// 52 patches, the listeners of its five cases and istiod's outputs,
    /// as data (testdata/listener_patch.yaml).
    #[test]
    fn listeners_are_patched_as_istiods_apply_listener_patches_test() {
        let d: Json = serde_yaml_ng::from_str(include_str!("../testdata/listener_patch.yaml")).unwrap();
        let read = |key: &str| {
            let list: Vec<(String, String, String, Json)> = d[key]
                .as_array()
                .unwrap()
                .iter()
                .map(|f| {
                    let s = |k: &str| f[k].as_str().unwrap_or("").to_owned();
                    (s("namespace"), s("name"), s("creation_timestamp"), f["spec"].clone())
                })
                .collect();
            EnvoyFilters::new(
                d["root_namespace"].as_str().unwrap_or(""),
                list.iter().map(|(ns, n, t, s)| (ns.as_str(), n.as_str(), t.as_str(), s)),
            )
        };
        let (default, priorities) = (read("filters"), read("priority_filters"));
        for c in d["cases"].as_array().unwrap() {
            let name = c["name"].as_str().unwrap();
            let filters = if c["push"] == "priorities" { &priorities } else { &default };
            let p = &c["proxy"];
            let metadata: Vec<(&str, &str)> =
                p["metadata"].as_object().unwrap().iter().map(|(k, v)| (k.as_str(), v.as_str().unwrap())).collect();
            let proxy = Proxy {
                namespace: p["namespace"].as_str().unwrap(),
                labels: &[],
                version: p["version"].as_str().unwrap(),
                metadata: &metadata,
            };
            let applied = filters.applied(&proxy);
            let ctx = match c["context"].as_str().unwrap() {
                "GATEWAY" => Context::Gateway,
                "SIDECAR_INBOUND" => Context::SidecarInbound,
                _ => Context::SidecarOutbound,
            };
            let mut got = Vec::new();
            for l in c["input"].as_array().unwrap() {
                got.extend(apply(&applied, ctx, listener(l), &mut Vec::new()));
            }
            if c["skip_adds"] != true {
                got.extend(applied.added(ApplyTo::Listener, ctx).cloned());
            }
            let json = |v: &[DynamicMessage]| v.iter().map(|m| serde_json::to_value(m).unwrap()).collect::<Vec<_>>();
            let want: Vec<DynamicMessage> = c["output"].as_array().unwrap().iter().map(listener).collect();
            let (got, want) = (json(&got), json(&want));
            assert_eq!(got.len(), want.len(), "{name}: {:?}", got.iter().map(|l| &l["name"]).collect::<Vec<_>>());
            for (g, w) in got.iter().zip(&want) {
                assert_eq!(g, w, "{name}: listener {}", w["name"]);
            }
        }
    }
}
