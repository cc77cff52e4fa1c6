//! AuthorizationPolicy as Envoy RBAC on a workload's inbound chains, after
//! istiod's `authz/builder`: the policies of the workload (selector), its
//! namespace and the mesh (the root namespace, `istio-system` by default), DENY before ALLOW; each rule a
//! policy `ns[<ns>]-policy[<name>]-rule[<i>]` whose permissions are the
//! `to` operations (methods, paths, hosts, ports, `request.headers[..]`
//! conditions) and whose principals are the `from` sources (principals,
//! namespaces, IP blocks). A TCP chain keeps only rules without HTTP
//! fields: an ALLOW rule that needs HTTP cannot match plain TCP, so it is
//! dropped; a DENY rule keeps its TCP part and is broader, as in istiod.

use std::collections::BTreeMap;

use istiod_kubewatch::istio::IstioSpec;
use istiod_kubewatch::istio::security::{Action, AuthorizationPolicy, Rule};
use istiod_proto::envoy::config::core::v3 as core;
use istiod_proto::envoy::config::rbac::v3 as rbac;
use istiod_proto::envoy::config::route::v3 as route;
use istiod_proto::envoy::r#type::matcher::v3 as matcher;
use istiod_xds::ads::node::ProxyClass;

use crate::model::Model;

/// An RBAC configuration per action, for one workload and protocol.
#[derive(Debug, Default)]
pub struct Rbacs {
    /// DENY policies (checked first).
    pub deny: Option<rbac::Rbac>,
    /// ALLOW policies (when any exists, everything else is denied).
    pub allow: Option<rbac::Rbac>,
}

fn string(p: &str) -> matcher::StringMatcher {
    use matcher::string_matcher::MatchPattern;
    // istiod's wildcard rules: `*` alone is presence, `x*` prefix, `*x` suffix.
    let pattern = if p == "*" {
        MatchPattern::SafeRegex(matcher::RegexMatcher { regex: ".+".into() })
    } else if let Some(prefix) = p.strip_suffix('*') {
        MatchPattern::Prefix(prefix.into())
    } else if let Some(suffix) = p.strip_prefix('*') {
        MatchPattern::Suffix(suffix.into())
    } else {
        MatchPattern::Exact(p.into())
    };
    matcher::StringMatcher { match_pattern: Some(pattern), ignore_case: false }
}

fn header_perm(name: &str, v: &str) -> rbac::Permission {
    rbac::Permission {
        rule: Some(rbac::permission::Rule::Header(route::HeaderMatcher {
            name: name.into(),
            header_match_specifier: Some(route::header_matcher::HeaderMatchSpecifier::StringMatch(string(v))),
            ..Default::default()
        })),
    }
}

fn or_perms(items: Vec<rbac::Permission>) -> rbac::Permission {
    rbac::Permission { rule: Some(rbac::permission::Rule::OrRules(rbac::permission::Set { rules: items })) }
}

fn not_perm(p: rbac::Permission) -> rbac::Permission {
    rbac::Permission { rule: Some(rbac::permission::Rule::NotRule(Box::new(p))) }
}

fn or_ids(items: Vec<rbac::Principal>) -> rbac::Principal {
    rbac::Principal { identifier: Some(rbac::principal::Identifier::OrIds(rbac::principal::Set { ids: items })) }
}

fn not_id(p: rbac::Principal) -> rbac::Principal {
    rbac::Principal { identifier: Some(rbac::principal::Identifier::NotId(Box::new(p))) }
}

fn principal_name(m: matcher::StringMatcher) -> rbac::Principal {
    rbac::Principal {
        identifier: Some(rbac::principal::Identifier::Authenticated(rbac::principal::Authenticated {
            principal_name: Some(m),
        })),
    }
}

fn spiffe(p: &str) -> rbac::Principal {
    if p == "*" {
        return principal_name(string("*"));
    }
    principal_name(string(&format!("spiffe://{p}")))
}

fn namespace_id(ns: &str) -> rbac::Principal {
    principal_name(matcher::StringMatcher {
        match_pattern: Some(matcher::string_matcher::MatchPattern::SafeRegex(matcher::RegexMatcher {
            regex: format!(".*/ns/{}/.*", ns.replace('.', "\\\\.")),
        })),
        ignore_case: false,
    })
}

fn cidr(block: &str) -> Option<rbac::Principal> {
    let (addr, len) = match block.split_once('/') {
        Some((a, l)) => (a, l.parse().ok()?),
        None => (block, if block.contains(':') { 128 } else { 32 }),
    };
    Some(rbac::Principal {
        identifier: Some(rbac::principal::Identifier::DirectRemoteIp(core::CidrRange {
            address_prefix: addr.into(),
            prefix_len: Some(len),
        })),
    })
}

/// Returns (permissions, principals, whether it uses HTTP fields).
fn rule(r: &Rule) -> (Vec<rbac::Permission>, Vec<rbac::Principal>, bool) {
    let mut http = false;
    let mut perms = Vec::new();
    let mut to_alts = Vec::new();
    for t in &r.to {
        let Some(op) = &t.operation else { continue };
        let mut all = Vec::new();
        let mut field = |items: &[String], negate: bool, make: &dyn Fn(&str) -> rbac::Permission, is_http: bool| {
            if items.is_empty() {
                return;
            }
            http |= is_http;
            let p = or_perms(items.iter().map(|v| make(v)).collect());
            all.push(if negate { not_perm(p) } else { p });
        };
        field(&op.methods, false, &|m| header_perm(":method", m), true);
        field(&op.not_methods, true, &|m| header_perm(":method", m), true);
        field(&op.paths, false, &|p| header_perm(":path", p), true);
        field(&op.not_paths, true, &|p| header_perm(":path", p), true);
        field(&op.hosts, false, &|h| header_perm(":authority", h), true);
        field(&op.not_hosts, true, &|h| header_perm(":authority", h), true);
        let port =
            |p: &str| rbac::Permission { rule: Some(rbac::permission::Rule::DestinationPort(p.parse().unwrap_or(0))) };
        field(&op.ports, false, &port, false);
        field(&op.not_ports, true, &port, false);
        to_alts.push(rbac::Permission {
            rule: Some(rbac::permission::Rule::AndRules(rbac::permission::Set { rules: all })),
        });
    }
    if !to_alts.is_empty() {
        perms.push(or_perms(to_alts));
    }
    for c in &r.when {
        if let Some(h) = c.key.strip_prefix("request.headers[").and_then(|k| k.strip_suffix(']')) {
            http = true;
            if !c.values.is_empty() {
                perms.push(or_perms(c.values.iter().map(|v| header_perm(h, v)).collect()));
            }
            if !c.not_values.is_empty() {
                perms.push(not_perm(or_perms(c.not_values.iter().map(|v| header_perm(h, v)).collect())));
            }
        }
    }
    if perms.is_empty() {
        perms.push(rbac::Permission { rule: Some(rbac::permission::Rule::Any(true)) });
    }
    let mut ids = Vec::new();
    let mut from_alts = Vec::new();
    for f in &r.from {
        let Some(src) = &f.source else { continue };
        let mut all = Vec::new();
        let mut add = |items: &[String], negate: bool, make: &dyn Fn(&str) -> Option<rbac::Principal>| {
            if items.is_empty() {
                return;
            }
            let p = or_ids(items.iter().filter_map(|v| make(v)).collect());
            all.push(if negate { not_id(p) } else { p });
        };
        add(&src.principals, false, &|p| Some(spiffe(p)));
        add(&src.not_principals, true, &|p| Some(spiffe(p)));
        add(&src.namespaces, false, &|n| Some(namespace_id(n)));
        add(&src.not_namespaces, true, &|n| Some(namespace_id(n)));
        add(&src.ip_blocks, false, &cidr);
        add(&src.not_ip_blocks, true, &cidr);
        from_alts.push(rbac::Principal {
            identifier: Some(rbac::principal::Identifier::AndIds(rbac::principal::Set { ids: all })),
        });
    }
    for c in &r.when {
        match c.key.as_str() {
            "source.namespace" => ids.push(or_ids(c.values.iter().map(|n| namespace_id(n)).collect())),
            "source.principal" => ids.push(or_ids(c.values.iter().map(|p| spiffe(p)).collect())),
            "source.ip" => ids.push(or_ids(c.values.iter().filter_map(|b| cidr(b)).collect())),
            _ => {}
        }
    }
    if !from_alts.is_empty() {
        ids.push(or_ids(from_alts));
    }
    if ids.is_empty() {
        ids.push(rbac::Principal { identifier: Some(rbac::principal::Identifier::Any(true)) });
    }
    (perms, ids, http)
}

fn applies(model: &Model, class: &ProxyClass) -> Vec<(String, String, AuthorizationPolicy)> {
    let mut out = Vec::new();
    for o in model.security.iter() {
        let IstioSpec::AuthorizationPolicy(ap) = &o.spec else { continue };
        let ns = o.meta.ns();
        let selected = match ap.selector.as_ref().map(|s| &s.match_labels).filter(|m| !m.is_empty()) {
            Some(sel) => {
                (ns == &*class.namespace || ns == model.mesh.root_namespace)
                    && sel.iter().all(|(k, v)| class.labels.iter().any(|(lk, lv)| **lk == **k && **lv == **v))
            }
            None => {
                ap.target_ref.is_none()
                    && ap.target_refs.is_empty()
                    && (ns == &*class.namespace || ns == model.mesh.root_namespace)
            }
        };
        if selected {
            out.push((ns.to_owned(), o.meta.name.clone(), ap.clone()));
        }
    }
    out
}

/// The RBAC of a workload's inbound chains (`http`: an HTTP chain).
pub fn rbacs(model: &Model, class: &ProxyClass, http: bool) -> Rbacs {
    let mut deny: BTreeMap<String, rbac::Policy> = BTreeMap::new();
    let mut allow: BTreeMap<String, rbac::Policy> = BTreeMap::new();
    let mut any_allow = false;
    for (ns, name, ap) in applies(model, class) {
        let target = match ap.action {
            Action::Allow => {
                any_allow = true;
                &mut allow
            }
            Action::Deny => &mut deny,
            // AUDIT needs the audit sink; CUSTOM an ext_authz provider.
            Action::Audit | Action::Custom => continue,
        };
        if ap.rules.is_empty() {
            continue; // ALLOW with no rules allows nothing; DENY with none denies nothing
        }
        for (i, r) in ap.rules.iter().enumerate() {
            let (permissions, principals, uses_http) = rule(r);
            if uses_http && !http && ap.action == Action::Allow {
                continue;
            }
            target.insert(format!("ns[{ns}]-policy[{name}]-rule[{i}]"), rbac::Policy { permissions, principals });
        }
    }
    let make = |action: rbac::rbac::Action, policies: BTreeMap<String, rbac::Policy>| rbac::Rbac {
        action: action as i32,
        policies,
        ..Default::default()
    };
    Rbacs {
        deny: (!deny.is_empty()).then(|| make(rbac::rbac::Action::Deny, deny)),
        allow: any_allow.then(|| make(rbac::rbac::Action::Allow, allow)),
    }
}
