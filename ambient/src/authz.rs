//! AuthorizationPolicies and PeerAuthentications as ztunnel's L4
//! `Authorization`s (istiod's `convertAuthorizationPolicy`,
//! `convertPeerAuthentication` and the static STRICT policy,
//! `pilot/pkg/serviceregistry/ambient/authorization.go`, `policies.go`).

use std::collections::{BTreeMap, BTreeSet};
use std::sync::Arc;

use istiod_config::istio::security::{
    Action as ApiAction, AuthorizationPolicy, MtlsMode, MutualTls, PeerAuthentication, Rule,
};
use istiod_config::istio::{IstioObject, IstioSpec};
use istiod_proto::istio::security::{
    Action, Address, Authorization, Group, Match, Rules, Scope, ServiceAccountMatch, StringMatch, string_match,
};
use serde_json::{Value, json};

use crate::{Inputs, Settings};

/// The policy every workload under an effective STRICT PeerAuthentication
/// lists: deny a peer without an identity.
pub const STATIC_STRICT: &str = "istio_converted_static_strict";
/// The prefix of a converted PeerAuthentication's name.
pub const CONVERTED_PEER_AUTHN: &str = "converted_peer_authentication_";
/// The annotation of a dry-run policy.
pub const DRY_RUN: &str = "istio.io/dry-run";

/// `<ns>/<name>`.
pub fn resource_name(a: &Authorization) -> Arc<str> {
    Arc::from(format!("{}/{}", a.namespace, a.name))
}

/// Every Authorization: the converted AuthorizationPolicies, the
/// converted port-level PeerAuthentications and, when any
/// PeerAuthentication exists, the static STRICT policy.
pub fn all(inputs: &Inputs, settings: &Settings) -> Vec<Authorization> {
    let root = settings.root_namespace.as_str();
    let mut out = Vec::new();
    for o in inputs.policies_of("AuthorizationPolicy") {
        if let IstioSpec::AuthorizationPolicy(p) = &o.spec
            && let Ok(Some(a)) = convert_policy(root, o, p)
        {
            out.push(a);
        }
    }
    let mut any_peer_authn = false;
    for o in inputs.policies_of("PeerAuthentication") {
        any_peer_authn = true;
        let IstioSpec::PeerAuthentication(pa) = &o.spec else { continue };
        if o.meta.ns() == root || pa.selector.is_none() || pa.port_level_mtls.as_ref().is_none_or(|m| m.is_empty()) {
            continue;
        }
        // The parents: the oldest policies without a selector
        // (istiod's `PeerAuthByNamespace`).
        let selectorless = |o: &&IstioObject| peer_authn(Some(o)).is_some_and(|p| p.selector.is_none());
        let ns_policy = oldest(inputs.policies_in("PeerAuthentication", o.meta.ns()).filter(selectorless));
        let root_policy = oldest(inputs.policies_in("PeerAuthentication", root).filter(selectorless));
        if let Some(a) = convert_peer_authn(o, pa, ns_policy, root_policy) {
            out.push(a);
        }
    }
    if any_peer_authn {
        out.push(Authorization {
            name: STATIC_STRICT.into(),
            namespace: root.into(),
            scope: Scope::WorkloadSelector as i32,
            action: Action::Deny as i32,
            groups: vec![Group { rules: vec![Rules { matches: vec![no_identity()] }] }],
            ..Authorization::default()
        });
    }
    out
}

/// What ztunnel does not apply of policy `o` as written, in istiod's
/// words (its status message): a policy it drops (dry run, AUDIT, CUSTOM)
/// or the HTTP attributes it leaves out; `None` when it applies as written
/// (or is a waypoint's).
pub fn ztunnel_note(root: &str, o: &IstioObject) -> Option<String> {
    let IstioSpec::AuthorizationPolicy(p) = &o.spec else { return None };
    match converted(root, o, p) {
        Err(status) => Some(status),
        Ok(Some((a, l7))) => l7_warning(&a, &l7),
        Ok(None) => None,
    }
}

/// The `ZtunnelAccepted` condition istiod writes on AuthorizationPolicy
/// `o` (`WorkloadAuthorization.GetConditions`, with `AMBIENT_ENABLE_STATUS`):
/// whether ztunnel takes it, the reason and the message. `None` for a
/// waypoint's (`targetRef`), which gets none.
pub fn ztunnel_condition(root: &str, o: &IstioObject) -> Option<(bool, &'static str, String)> {
    let IstioSpec::AuthorizationPolicy(p) = &o.spec else { return None };
    match converted(root, o, p) {
        Err(status) => Some((false, "UnsupportedValue", status)),
        Ok(Some((a, l7))) => Some(match l7_warning(&a, &l7) {
            Some(w) => (true, "UnsupportedValue", w),
            None => (true, "Accepted", "attached to ztunnel".to_owned()),
        }),
        Ok(None) => None,
    }
}

/// `convertAuthorizationPolicy`: `Ok(None)` for a policy meant for a
/// waypoint (`targetRef`); `Err` (istiod's status message) for one ztunnel
/// does not apply (AUDIT, CUSTOM, dry run).
pub(crate) fn convert_policy(
    root: &str,
    o: &IstioObject,
    p: &AuthorizationPolicy,
) -> Result<Option<Authorization>, String> {
    Ok(converted(root, o, p)?.map(|(a, _)| a))
}

/// Whether ztunnel takes policy `o` at all, and with which action:
/// `Ok(None)` for one meant for a waypoint (`targetRef`), `Err` (istiod's
/// status message) for a dry run, AUDIT or CUSTOM. What both the
/// conversion and a workload's list of policies go by.
fn ztunnel_action(o: &IstioObject, p: &AuthorizationPolicy) -> Result<Option<Action>, String> {
    let dry_run = o
        .meta
        .annotations
        .get(DRY_RUN)
        .is_some_and(|v| matches!(v.as_str(), "true" | "1" | "t" | "T" | "TRUE" | "True"));
    if dry_run {
        return Err(format!(
            "found policy \"{}/{}\" using dry-run annotation, but support for ambient dry-run authorizationPolicies isn't enabled",
            o.meta.ns(),
            o.meta.name
        ));
    }
    if p.target_ref.is_some() || !p.target_refs.is_empty() {
        return Ok(None);
    }
    match p.action {
        ApiAction::Allow => Ok(Some(Action::Allow)),
        ApiAction::Deny => Ok(Some(Action::Deny)),
        other => Err(format!("ztunnel does not support the {} action", other.name())),
    }
}

/// [`convert_policy`], with the HTTP-only attributes its rules name.
fn converted(
    root: &str,
    o: &IstioObject,
    p: &AuthorizationPolicy,
) -> Result<Option<(Authorization, BTreeSet<String>)>, String> {
    let (ns, name) = (o.meta.ns(), o.meta.name.as_str());
    let Some(action) = ztunnel_action(o, p)? else { return Ok(None) };
    let scope = match (&p.selector, ns == root) {
        (Some(_), _) => Scope::WorkloadSelector,
        (None, true) => Scope::Global,
        (None, false) => Scope::Namespace,
    };
    let mut a = Authorization {
        name: name.into(),
        namespace: ns.into(),
        scope: scope as i32,
        action: action as i32,
        ..Authorization::default()
    };
    // HTTP attributes are dropped (see `l7_warning`, the status istiod
    // gives such a policy): it is still sent.
    let mut l7 = BTreeSet::new();
    for rule in &p.rules {
        let (rules, found) = handle_rule(action, rule, ns);
        if let Some(rules) = rules {
            a.groups.push(Group { rules });
        }
        l7.extend(found);
    }
    Ok(Some((a, l7)))
}

/// The warning istiod gives converted policy `a` whose rules named the
/// HTTP attributes `l7` (the policy is sent without them).
fn l7_warning(a: &Authorization, l7: &BTreeSet<String>) -> Option<String> {
    if l7.is_empty() {
        return None;
    }
    let groups = &a.groups;
    let action = Action::try_from(a.action).unwrap_or(Action::Allow);
    let boilerplate = match action {
        Action::Deny if !has_effective_rules(groups) => {
            "After omitting unsupported HTTP attributes, this DENY policy has no enforceable rules at ztunnel and will have no effect. Deploy a waypoint proxy and use a targetRef to enforce this policy."
        }
        Action::Deny => {
            "DENY policy with HTTP attributes is enforced without the HTTP rules. This will be more restrictive than requested."
        }
        Action::Allow => {
            "Within an ALLOW policy, rules matching HTTP attributes are omitted. This will be more restrictive than requested."
        }
    };
    let found: Vec<&str> = l7.iter().map(String::as_str).collect();
    Some(format!(
        "ztunnel does not support HTTP attributes (found: {}). In ambient mode you must use a waypoint proxy to enforce HTTP rules. {boilerplate}",
        found.join(", ")
    ))
}

/// Whether some group will ever match at ztunnel (one whose every clause
/// has a non-empty match; a group without clauses matches everything).
fn has_effective_rules(groups: &[Group]) -> bool {
    groups.iter().any(|g| g.rules.iter().all(|r| r.matches.iter().any(|m| *m != Match::default())))
}

/// `handleRule`: the clauses of one rule (its `to`, its `from`, one per
/// `when`), and the HTTP-only attributes it names. An ALLOW rule with any
/// of those never matches (`None`); a DENY rule keeps its L4 parts.
fn handle_rule(action: Action, rule: &Rule, ns: &str) -> (Option<Vec<Rules>>, Vec<String>) {
    let mut l7: Vec<String> = Vec::new();
    let mut to = Vec::new();
    for t in &rule.to {
        let op = t.operation.clone().unwrap_or_default();
        for (field, set) in [
            ("hosts", &op.hosts),
            ("notHosts", &op.not_hosts),
            ("methods", &op.methods),
            ("notMethods", &op.not_methods),
            ("paths", &op.paths),
            ("notPaths", &op.not_paths),
        ] {
            if !set.is_empty() {
                l7.push(field.into());
            }
        }
        to.push(Match {
            destination_ports: ports(&op.ports),
            not_destination_ports: ports(&op.not_ports),
            ..Match::default()
        });
    }
    let mut from = Vec::new();
    for f in &rule.from {
        let s = f.source.clone().unwrap_or_default();
        for (field, set) in [
            ("remoteIpBlocks", &s.remote_ip_blocks),
            ("notRemoteIpBlocks", &s.not_remote_ip_blocks),
            ("requestPrincipals", &s.request_principals),
            ("notRequestPrincipals", &s.not_request_principals),
        ] {
            if !set.is_empty() {
                l7.push(field.into());
            }
        }
        from.push(Match {
            source_ips: ips(&s.ip_blocks),
            not_source_ips: ips(&s.not_ip_blocks),
            namespaces: strings(&s.namespaces),
            not_namespaces: strings(&s.not_namespaces),
            service_accounts: service_accounts(&s.service_accounts, ns),
            not_service_accounts: service_accounts(&s.not_service_accounts, ns),
            principals: strings(&s.principals),
            not_principals: strings(&s.not_principals),
            ..Match::default()
        });
    }
    let mut rules = Vec::new();
    if !to.is_empty() {
        rules.push(Rules { matches: to });
    }
    if !from.is_empty() {
        rules.push(Rules { matches: from });
    }
    for w in &rule.when {
        const L4: [&str; 5] =
            ["source.ip", "source.namespace", "source.principal", "destination.ip", "destination.port"];
        if !L4.contains(&w.key.as_str()) {
            l7.push(w.key.clone());
        }
        let on = |key: &str, negated: bool| -> &[String] {
            match (w.key == key, negated) {
                (false, _) => &[],
                (true, false) => &w.values,
                (true, true) => &w.not_values,
            }
        };
        rules.push(Rules {
            matches: vec![Match {
                namespaces: strings(on("source.namespace", false)),
                principals: strings(on("source.principal", false)),
                source_ips: ips(on("source.ip", false)),
                destination_ports: ports(on("destination.port", false)),
                destination_ips: ips(on("destination.ip", false)),
                not_namespaces: strings(on("source.namespace", true)),
                not_principals: strings(on("source.principal", true)),
                not_source_ips: ips(on("source.ip", true)),
                not_destination_ports: ports(on("destination.port", true)),
                not_destination_ips: ips(on("destination.ip", true)),
                ..Match::default()
            }],
        });
    }
    if action == Action::Allow && !l7.is_empty() {
        return (None, l7);
    }
    (Some(rules), l7)
}

/// `stringToMatch`: `*` any value, `*x` a suffix, `x*` a prefix.
fn strings(values: &[String]) -> Vec<StringMatch> {
    values
        .iter()
        .map(|v| {
            let m = if v == "*" {
                string_match::MatchType::Presence(())
            } else if let Some(s) = v.strip_prefix('*') {
                string_match::MatchType::Suffix(s.into())
            } else if let Some(p) = v.strip_suffix('*') {
                string_match::MatchType::Prefix(p.into())
            } else {
                string_match::MatchType::Exact(v.clone())
            };
            StringMatch { match_type: Some(m) }
        })
        .collect()
}

/// `stringToServiceAccountMatch`: `ns/sa`, or `sa` in the policy's
/// namespace.
fn service_accounts(values: &[String], ns: &str) -> Vec<ServiceAccountMatch> {
    values
        .iter()
        .map(|v| match v.split_once('/') {
            Some((n, sa)) => ServiceAccountMatch { namespace: n.into(), service_account: sa.into() },
            None => ServiceAccountMatch { namespace: ns.into(), service_account: v.clone() },
        })
        .collect()
}

/// `stringToPort`: numbers up to 65535; others are dropped.
fn ports(values: &[String]) -> Vec<u32> {
    values.iter().filter_map(|v| v.parse::<u32>().ok().filter(|p| *p <= 65535)).collect()
}

/// `stringToIP`: addresses and CIDRs; others are dropped.
fn ips(values: &[String]) -> Vec<Address> {
    values
        .iter()
        .filter_map(|v| {
            let (ip, len) = match v.split_once('/') {
                Some((ip, bits)) => {
                    let ip: std::net::IpAddr = ip.parse().ok()?;
                    let bits: u32 = bits.parse().ok()?;
                    let max = if ip.is_ipv4() { 32 } else { 128 };
                    if bits > max {
                        return None;
                    }
                    (ip, bits)
                }
                None => {
                    let ip: std::net::IpAddr = v.parse().ok()?;
                    (ip, if ip.is_ipv4() { 32 } else { 128 })
                }
            };
            Some(Address { address: crate::ip_bytes(ip), length: len })
        })
        .collect()
}

/// A match of peers without an identity (`notPrincipals: [presence]`).
fn no_identity() -> Match {
    Match {
        not_principals: vec![StringMatch { match_type: Some(string_match::MatchType::Presence(())) }],
        ..Match::default()
    }
}

fn mode(m: Option<&MutualTls>) -> MtlsMode {
    m.map_or(MtlsMode::Unset, |m| m.mode)
}

/// The oldest of some PeerAuthentications (istiod's `getOldestPeerAuthn`).
fn oldest<'a>(policies: impl Iterator<Item = &'a IstioObject>) -> Option<&'a IstioObject> {
    policies.min_by(|a, b| {
        (a.meta.creation_timestamp.as_deref().unwrap_or(""), a.meta.ns(), &a.meta.name).cmp(&(
            b.meta.creation_timestamp.as_deref().unwrap_or(""),
            b.meta.ns(),
            &b.meta.name,
        ))
    })
}

fn peer_authn(o: Option<&IstioObject>) -> Option<&PeerAuthentication> {
    match &o?.spec {
        IstioSpec::PeerAuthentication(pa) => Some(pa),
        _ => None,
    }
}

/// `convertPeerAuthentication`: a workload PeerAuthentication with
/// port-level modes as a DENY policy, or `None` where the static STRICT
/// policy (or nothing) says it all.
pub(crate) fn convert_peer_authn(
    o: &IstioObject,
    pa: &PeerAuthentication,
    ns_cfg: Option<&IstioObject>,
    root_cfg: Option<&IstioObject>,
) -> Option<Authorization> {
    let m = mode(pa.mtls.as_ref());
    let ns_mode = peer_authn(ns_cfg).map(|p| mode(p.mtls.as_ref()));
    let root_mode = peer_authn(root_cfg).map(|p| mode(p.mtls.as_ref()));
    let mut rules: Vec<Rules> = Vec::new();
    let mut groups: Vec<Group> = Vec::new();
    if m == MtlsMode::Strict {
        rules.push(Rules { matches: vec![no_identity()] });
    }
    let mut non_strict_port = false;
    let port_modes: BTreeMap<u32, MtlsMode> = pa.port_level_mtls.iter().flatten().map(|(p, t)| (*p, t.mode)).collect();
    for (port, pm) in port_modes {
        match pm {
            MtlsMode::Strict => {
                let parent_strict = m == MtlsMode::Strict
                    || (m == MtlsMode::Unset && ns_mode == Some(MtlsMode::Strict))
                    || (matches!(ns_mode, None | Some(MtlsMode::Unset)) && root_mode == Some(MtlsMode::Strict));
                if parent_strict {
                    continue;
                }
                let mut only = no_identity();
                only.destination_ports = vec![port];
                groups.push(Group { rules: vec![Rules { matches: vec![only] }] });
            }
            MtlsMode::Permissive | MtlsMode::Disable => {
                if matches!(m, MtlsMode::Permissive | MtlsMode::Disable) {
                    continue;
                }
                if m == MtlsMode::Unset
                    && ((ns_mode.is_some() && ns_mode != Some(MtlsMode::Strict))
                        || (ns_mode.is_none() && root_mode.is_some() && root_mode != Some(MtlsMode::Strict))
                        || (ns_mode.is_none() && root_mode.is_none()))
                {
                    continue;
                }
                non_strict_port = true;
                rules.push(Rules { matches: vec![Match { not_destination_ports: vec![port], ..Match::default() }] });
            }
            MtlsMode::Unset => {}
        }
    }
    if m == MtlsMode::Strict && !non_strict_port {
        return None;
    }
    if rules.is_empty() && groups.is_empty() {
        return None;
    }
    let merge_strict = (root_mode == Some(MtlsMode::Strict)
        && matches!(ns_mode, None | Some(MtlsMode::Unset) | Some(MtlsMode::Strict)))
        || ns_mode == Some(MtlsMode::Strict);
    if merge_strict && non_strict_port {
        rules.push(Rules { matches: vec![no_identity()] });
    }
    if !rules.is_empty() {
        groups.push(Group { rules });
    }
    Some(Authorization {
        name: format!("{CONVERTED_PEER_AUTHN}{}", o.meta.name),
        namespace: o.meta.ns().into(),
        scope: Scope::WorkloadSelector as i32,
        action: Action::Deny as i32,
        groups,
        ..Authorization::default()
    })
}

/// The policies a workload of namespace `ns` with `labels` lists
/// (`buildWorkloadPolicies`): the selector AuthorizationPolicies of its
/// namespace and the root's that select it, sorted, then the
/// PeerAuthentication-derived ones in force for it.
pub fn workload_policies(
    inputs: &Inputs,
    settings: &Settings,
    ns: &str,
    labels: &BTreeMap<String, String>,
) -> Vec<String> {
    let root = settings.root_namespace.as_str();
    let mut out: Vec<String> = Vec::new();
    for o in inputs.policies_of("AuthorizationPolicy") {
        let IstioSpec::AuthorizationPolicy(p) = &o.spec else { continue };
        // `selector: {}` is WORKLOAD_SELECTOR-scoped, yet attached to no
        // workload (istiod's `GetLabelSelector()` is nil for it).
        let Some(sel) = p.selector.as_ref().filter(|s| !s.match_labels.is_empty()) else { continue };
        let pns = o.meta.ns();
        if (pns != root && pns != ns) || !sel.match_labels.iter().all(|(k, v)| labels.get(k) == Some(v)) {
            continue;
        }
        if !matches!(ztunnel_action(o, p), Ok(Some(_))) {
            continue;
        }
        out.push(format!("{pns}/{}", o.meta.name));
    }
    out.sort();
    // fetchPeerAuthentications: the namespace's without a selector or
    // selecting it, and the root's without a selector.
    let applies = |o: &&IstioObject| {
        peer_authn(Some(o)).is_some_and(|pa| {
            pa.selector.as_ref().is_none_or(|s| s.match_labels.iter().all(|(k, v)| labels.get(k) == Some(v)))
        })
    };
    let mut auths: Vec<&IstioObject> = inputs.policies_in("PeerAuthentication", ns).filter(applies).collect();
    if ns != root {
        auths.extend(
            inputs
                .policies_in("PeerAuthentication", root)
                .filter(|o| peer_authn(Some(o)).is_some_and(|pa| pa.selector.is_none())),
        );
    }
    out.extend(converted_keys(root, &auths));
    out
}

/// `convertedSelectorPeerAuthentications`: which PeerAuthentication
/// policies a workload lists (the static STRICT one, its own converted
/// one, or neither).
fn converted_keys(root: &str, auths: &[&IstioObject]) -> Vec<String> {
    // Oldest first; equal times (a second's precision, or none in files)
    // by namespace and name, so every build picks the same one.
    let age = |o: &IstioObject| {
        (o.meta.creation_timestamp.clone().unwrap_or_default(), o.meta.ns().to_owned(), o.meta.name.clone())
    };
    let older = |a: &IstioObject, b: Option<&IstioObject>| b.is_none_or(|b| age(a) < age(b));
    let (mut mesh, mut namespace, mut workload): (Option<&IstioObject>, Option<&IstioObject>, Option<&IstioObject>) =
        (None, None, None);
    for o in auths {
        let Some(pa) = peer_authn(Some(o)) else { continue };
        let selectorless = pa.selector.as_ref().is_none_or(|s| s.match_labels.is_empty());
        if selectorless {
            if o.meta.ns() == root {
                if older(o, mesh) {
                    mesh = Some(o);
                }
            } else if older(o, namespace) {
                namespace = Some(o);
            }
        } else if o.meta.ns() != root && older(o, workload) {
            workload = Some(o);
        }
    }
    let mut strict = peer_authn(mesh).is_some_and(|p| mode(p.mtls.as_ref()) == MtlsMode::Strict);
    if let Some(p) = peer_authn(namespace)
        && mode(p.mtls.as_ref()) != MtlsMode::Unset
    {
        strict = mode(p.mtls.as_ref()) == MtlsMode::Strict;
    }
    let mut port_key = None;
    if let Some(w) = workload
        && let Some(pa) = peer_authn(Some(w))
    {
        let wm = mode(pa.mtls.as_ref());
        if wm == MtlsMode::Strict {
            strict = true;
        }
        if matches!(wm, MtlsMode::Permissive | MtlsMode::Disable) {
            strict = false;
        }
        if let Some(ports) = &pa.port_level_mtls {
            let key = format!("{}/{CONVERTED_PEER_AUTHN}{}", w.meta.ns(), w.meta.name);
            let any = |f: &dyn Fn(MtlsMode) -> bool| ports.values().any(|m| f(m.mode));
            match wm {
                MtlsMode::Strict => {
                    if any(&|m| matches!(m, MtlsMode::Permissive | MtlsMode::Disable)) {
                        port_key = Some(key);
                        strict = false;
                    }
                }
                MtlsMode::Permissive | MtlsMode::Disable => {
                    if any(&|m| m == MtlsMode::Strict) {
                        port_key = Some(key);
                    }
                }
                MtlsMode::Unset => {
                    if strict {
                        if any(&|m| m == MtlsMode::Permissive) {
                            port_key = Some(key);
                            strict = false;
                        }
                    } else {
                        strict = false;
                        if any(&|m| m == MtlsMode::Strict) {
                            port_key = Some(key);
                        }
                    }
                }
            }
        }
    }
    let mut keys = BTreeSet::new();
    if strict {
        keys.insert(format!("{root}/{STATIC_STRICT}"));
    }
    keys.extend(port_key);
    keys.into_iter().collect()
}

/// A policy as protojson writes it (before [`crate::prune`] leaves out
/// the defaults): `/debug/ambientz`'s form, and the one istiod's policy
/// goldens are written in.
pub fn describe(a: &Authorization) -> Value {
    let sm = |m: &StringMatch| match &m.match_type {
        Some(string_match::MatchType::Exact(s)) => json!({"exact": s}),
        Some(string_match::MatchType::Prefix(s)) => json!({"prefix": s}),
        Some(string_match::MatchType::Suffix(s)) => json!({"suffix": s}),
        Some(string_match::MatchType::Presence(())) => json!({"presence": {}}),
        None => Value::Null,
    };
    // Bytes as protojson writes them (base64), a zero length left out.
    let addr = |a: &Address| {
        let mut o = serde_json::Map::new();
        o.insert("address".into(), crate::base64(&a.address).into());
        if a.length != 0 {
            o.insert("length".into(), a.length.into());
        }
        Value::Object(o)
    };
    let matches = |m: &Match| {
        let mut o = serde_json::Map::new();
        let mut put = |k: &str, v: Vec<Value>| {
            if !v.is_empty() {
                o.insert(k.into(), v.into());
            }
        };
        put("namespaces", m.namespaces.iter().map(sm).collect());
        put("notNamespaces", m.not_namespaces.iter().map(sm).collect());
        put("principals", m.principals.iter().map(sm).collect());
        put("notPrincipals", m.not_principals.iter().map(sm).collect());
        let sa = |s: &ServiceAccountMatch| json!({"namespace": s.namespace, "serviceAccount": s.service_account});
        put("serviceAccounts", m.service_accounts.iter().map(sa).collect());
        put("notServiceAccounts", m.not_service_accounts.iter().map(sa).collect());
        put("sourceIps", m.source_ips.iter().map(addr).collect());
        put("notSourceIps", m.not_source_ips.iter().map(addr).collect());
        put("destinationIps", m.destination_ips.iter().map(addr).collect());
        put("notDestinationIps", m.not_destination_ips.iter().map(addr).collect());
        put("destinationPorts", m.destination_ports.iter().map(|p| (*p).into()).collect());
        put("notDestinationPorts", m.not_destination_ports.iter().map(|p| (*p).into()).collect());
        Value::Object(o)
    };
    json!({
        "name": a.name,
        "namespace": a.namespace,
        "scope": crate::enum_name(a.scope, |v| Scope::try_from(v).ok().map(|s| s.as_str_name())),
        "action": crate::enum_name(a.action, |v| Action::try_from(v).ok().map(|s| s.as_str_name())),
        "groups": a.groups.iter().map(|g| json!({"rules": g.rules.iter().map(|r| json!({"matches": r.matches.iter().map(matches).collect::<Vec<_>>()})).collect::<Vec<_>>()})).collect::<Vec<_>>(),
        "dryRun": a.dry_run,
    })
}
