//! AuthorizationPolicy as Envoy RBAC on a workload's inbound chains (the
//! HTTP filter on HTTP ports, the network filter on TCP ports and the
//! catch-all chains), after istiod's `authz/builder`: the policies of the
//! workload (selector), its namespace and the mesh (the root namespace,
//! `istio-system` by default): CUSTOM first (per provider an RBAC filter
//! that marks what its rules match and the provider's ext_authz filter,
//! see [`super::extauthz`]), then AUDIT (Envoy's LOG action), DENY and
//! ALLOW, a dry-run policy's rules as shadow rules; each rule a policy
//! `ns[<ns>]-policy[<name>]-rule[<i>]` whose permissions are the `to`
//! operations and the destination `when` conditions and whose principals
//! are the `from` sources and the source `when` conditions, built as
//! istiod's `authz/model/generator.go` builds each key. On a TCP chain
//! an ALLOW rule that needs HTTP fields cannot match, so it is dropped; a
//! DENY rule loses those fields and is broader, as in istiod.

use std::collections::BTreeMap;

use super::extauthz::ExtAuthz;
use crate::node::ProxyClass;
use istiod_config::istio::security::{Action, AuthorizationPolicy, Rule};
use istiod_config::istio::{IstioObject, IstioSpec};
use istiod_proto::envoy::config::core::v3 as core;
use istiod_proto::envoy::config::rbac::v3 as rbac;
use istiod_proto::envoy::config::route::v3 as route;
use istiod_proto::envoy::r#type::matcher::v3 as matcher;

use crate::model::Model;

/// An RBAC configuration per action, for one workload and protocol:
/// istiod's `authz/builder` output, rendered as HTTP or network filters.
#[derive(Debug, Default, Clone)]
pub struct Rbacs {
    /// CUSTOM policies by provider (sorted): each an RBAC filter that only
    /// marks the requests its rules match, then the provider's ext_authz
    /// filter enabled by that mark.
    pub custom: Vec<Custom>,
    /// `PILOT_ENABLE_MULTIPLE_CUSTOM_AUTHZ_PROVIDERS` is off and the
    /// workload's CUSTOM policies name several providers: each provider's
    /// rules deny instead.
    pub custom_conflict: bool,
    /// AUDIT policies (Envoy's LOG action: matching requests are marked
    /// for the access log), enforced rules.
    pub audit: Option<rbac::Rbac>,
    /// DENY policies (checked first), enforced rules.
    pub deny: Option<rbac::Rbac>,
    /// ALLOW policies (when any exists, everything else is denied),
    /// enforced rules.
    pub allow: Option<rbac::Rbac>,
    /// The dry-run (`istio.io/dry-run: "true"`) policies of each action:
    /// evaluated as shadow rules, never enforced. Indexed audit, deny,
    /// allow.
    pub dry_run: [Option<rbac::Rbac>; 3],
}

/// The CUSTOM policies of one provider.
#[derive(Debug, Clone)]
pub struct Custom {
    /// The mesh config's extension provider name.
    pub provider: String,
    /// Rules of the enforced policies.
    pub rules: rbac::Rbac,
    /// Rules of the dry-run policies.
    pub dry_run: rbac::Rbac,
    /// The provider's ext_authz filters, or why there are none (an
    /// unknown or invalid provider: istiod then denies what the rules
    /// match).
    pub ext_authz: Result<ExtAuthz, String>,
}

const HTTP_RBAC: &str = "envoy.filters.http.rbac";
const NETWORK_RBAC: &str = "envoy.filters.network.rbac";
/// `authzmodel.RBACExtAuthzShadowRulesStatPrefix`.
const EXT_AUTHZ_STAT_PREFIX: &str = "istio_ext_authz_";
/// `extAuthzMatchPrefix`.
const EXT_AUTHZ_MATCH_PREFIX: &str = "istio-ext-authz";
/// `badCustomActionSuffix`.
const BAD_CUSTOM_SUFFIX: &str = "-deny-due-to-bad-CUSTOM-action";

/// `shadowRuleStatPrefix`.
fn shadow_prefix(shadow: &Option<rbac::Rbac>) -> String {
    match shadow.as_ref().map(|r| r.action()) {
        Some(rbac::rbac::Action::Allow) => "istio_dry_run_allow_".into(),
        Some(rbac::rbac::Action::Deny) => "istio_dry_run_deny_".into(),
        _ => String::new(),
    }
}

/// `getBadCustomDenyRules`: the provider's rules, denying.
fn bad_custom_deny(rules: &rbac::Rbac) -> rbac::Rbac {
    rbac::Rbac {
        action: rbac::rbac::Action::Deny as i32,
        policies: rules.policies.iter().map(|(k, v)| (format!("{k}{BAD_CUSTOM_SUFFIX}"), v.clone())).collect(),
        ..Default::default()
    }
}

/// `generateFilterMatcherForProvider`: the ext_authz filter runs when the
/// RBAC filter `filter` marked the request with one of `provider`'s rules.
fn provider_matcher(filter: &str, provider: &str) -> matcher::MetadataMatcher {
    use matcher::metadata_matcher::{PathSegment, path_segment::Segment};
    matcher::MetadataMatcher {
        filter: filter.into(),
        path: vec![PathSegment {
            segment: Some(Segment::Key(format!("{EXT_AUTHZ_STAT_PREFIX}shadow_effective_policy_id"))),
        }],
        value: Some(matcher::ValueMatcher {
            match_pattern: Some(matcher::value_matcher::MatchPattern::StringMatch(matcher::StringMatcher {
                match_pattern: Some(matcher::string_matcher::MatchPattern::Prefix(format!(
                    "{EXT_AUTHZ_MATCH_PREFIX}-{provider}"
                ))),
                ..Default::default()
            })),
        }),
        invert: false,
    }
}

impl Rbacs {
    /// Peer identities read from the filter state ztunnel's HBONE leaves
    /// (`io.istio.peer_principal`) instead of the TLS peer: a waypoint's
    /// rules (istiod's `UseFilterState`).
    pub fn peer_from_filter_state(&mut self) {
        fn walk(p: &mut rbac::Principal) {
            use rbac::principal::Identifier as I;
            match p.identifier.as_mut() {
                Some(I::Authenticated(a)) if a.principal_name.is_some() => {
                    p.identifier = Some(I::FilterState(matcher::FilterStateMatcher {
                        key: "io.istio.peer_principal".into(),
                        matcher: a.principal_name.take().map(matcher::filter_state_matcher::Matcher::StringMatch),
                    }));
                }
                Some(I::AndIds(set) | I::OrIds(set)) => set.ids.iter_mut().for_each(walk),
                Some(I::NotId(inner)) => walk(inner),
                _ => {}
            }
        }
        let rules = self.custom.iter_mut().flat_map(|c| [&mut c.rules, &mut c.dry_run]).chain(
            [&mut self.audit, &mut self.deny, &mut self.allow].into_iter().chain(self.dry_run.iter_mut()).flatten(),
        );
        for r in rules {
            r.policies.values_mut().flat_map(|p| p.principals.iter_mut()).for_each(walk);
        }
    }

    /// The non-CUSTOM actions in istiod's order (AUDIT, DENY, ALLOW), each
    /// with its enforced and dry-run rules.
    fn local(&self) -> impl Iterator<Item = (&Option<rbac::Rbac>, &Option<rbac::Rbac>)> {
        [&self.audit, &self.deny, &self.allow]
            .into_iter()
            .zip(&self.dry_run)
            .filter(|(rules, shadow)| rules.is_some() || shadow.is_some())
    }

    /// As HTTP filters: the CUSTOM pairs, then AUDIT, DENY, ALLOW
    /// (istiod's `BuildHTTP` of its custom builder, then of its local one).
    /// The CUSTOM policies' filters, and the local ones' (AUDIT, DENY,
    /// ALLOW, dry run): istiod puts authentication between them
    /// (`buildHTTPConnectionManager`: CUSTOM, authn, authz).
    pub fn split_custom(self) -> (Rbacs, Rbacs) {
        let mut custom = self.clone();
        (custom.audit, custom.deny, custom.allow, custom.dry_run) = (None, None, None, [None, None, None]);
        let mut local = self;
        local.custom.clear();
        (custom, local)
    }

    pub fn http_filters(
        &self,
    ) -> Vec<istiod_proto::envoy::extensions::filters::network::http_connection_manager::v3::HttpFilter> {
        use istiod_proto::envoy::extensions::filters::http::rbac::v3::Rbac;
        let rbac = |rules: Option<rbac::Rbac>, shadow: Option<rbac::Rbac>, prefix: String| {
            super::envoy::http_filter(
                HTTP_RBAC,
                &Rbac { rules, shadow_rules: shadow, shadow_rules_stat_prefix: prefix, ..Default::default() },
            )
        };
        let mut out = Vec::new();
        for c in &self.custom {
            match (&c.ext_authz, self.custom_conflict) {
                (Ok(ext), false) => {
                    let dry = (!c.dry_run.policies.is_empty()).then(|| c.dry_run.clone());
                    out.push(rbac(dry, Some(c.rules.clone()), EXT_AUTHZ_STAT_PREFIX.into()));
                    let mut http = ext.http.clone();
                    http.filter_enabled_metadata = Some(provider_matcher(HTTP_RBAC, &c.provider));
                    out.push(super::envoy::http_filter("envoy.filters.http.ext_authz", &http));
                }
                _ => out.push(rbac(Some(bad_custom_deny(&c.rules)), None, String::new())),
            }
        }
        for (rules, shadow) in self.local() {
            out.push(rbac(rules.clone(), shadow.clone(), shadow_prefix(shadow)));
        }
        out
    }

    /// As network filters (before a tcp_proxy), stat prefix `tcp.`
    /// (istiod's `BuildTCP`): a CUSTOM provider without a TCP filter (an
    /// HTTP provider) adds nothing.
    pub fn network_filters(&self) -> Vec<istiod_proto::envoy::config::listener::v3::Filter> {
        use istiod_proto::envoy::config::listener::v3::{Filter, filter};
        use istiod_proto::envoy::extensions::filters::network::rbac::v3::Rbac;
        let typed =
            |name: &str, any| Filter { name: name.into(), config_type: Some(filter::ConfigType::TypedConfig(any)) };
        let rbac = |rules: Option<rbac::Rbac>, shadow: Option<rbac::Rbac>, prefix: String| {
            typed(
                NETWORK_RBAC,
                super::envoy::any(&Rbac {
                    rules,
                    shadow_rules: shadow,
                    shadow_rules_stat_prefix: prefix,
                    stat_prefix: "tcp.".into(),
                    ..Default::default()
                }),
            )
        };
        let mut out = Vec::new();
        for c in &self.custom {
            match (&c.ext_authz, self.custom_conflict) {
                (Ok(ExtAuthz { tcp: None, .. }), false) => {}
                (Ok(ExtAuthz { tcp: Some(tcp), .. }), false) => {
                    let dry = (!c.dry_run.policies.is_empty()).then(|| c.dry_run.clone());
                    out.push(rbac(dry, Some(c.rules.clone()), EXT_AUTHZ_STAT_PREFIX.into()));
                    let mut tcp = tcp.clone();
                    tcp.filter_enabled_metadata = Some(provider_matcher(NETWORK_RBAC, &c.provider));
                    out.push(typed("envoy.filters.network.ext_authz", super::envoy::any(&tcp)));
                }
                _ => out.push(rbac(Some(bad_custom_deny(&c.rules)), None, String::new())),
            }
        }
        for (rules, shadow) in self.local() {
            out.push(rbac(rules.clone(), shadow.clone(), shadow_prefix(shadow)));
        }
        out
    }
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

/// Go's `regexp.QuoteMeta`: `s` as a literal in an RE2 pattern.
fn quote_meta(s: &str) -> String {
    let mut out = String::with_capacity(s.len());
    for c in s.chars() {
        if r"\.+*?()|[]{}^$".contains(c) {
            out.push('\\');
        }
        out.push(c);
    }
    out
}

fn regex_id(regex: String) -> rbac::Principal {
    principal_name(matcher::StringMatcher {
        match_pattern: Some(matcher::string_matcher::MatchPattern::SafeRegex(matcher::RegexMatcher { regex })),
        ignore_case: false,
    })
}

/// `source.namespace` / `namespaces` (generator.go `srcNamespaceGenerator`):
/// `*` in the value matches anything.
fn namespace_id(ns: &str) -> rbac::Principal {
    let literal: Vec<String> = ns.split('*').map(quote_meta).collect();
    regex_id(format!(".*/ns/{}/.*", literal.join(".*")))
}

/// `source.serviceAccount` / `serviceAccounts` (generator.go
/// `serviceAccountRegex`): `<sa>` in the policy's namespace or `<ns>/<sa>`.
fn service_account_id(policy_ns: &str, value: &str) -> rbac::Principal {
    let (ns, sa) = value.split_once('/').unwrap_or((policy_ns, value));
    regex_id(format!("spiffe://.+/ns/{}/(.+/|)sa/{}(/.+)?", quote_meta(ns), quote_meta(sa)))
}

/// `source.trustDomain` / `trustDomains` (generator.go
/// `srcTrustDomainGenerator`): `*` any, a plain value by prefix, one `*`
/// within a label by regex.
fn trust_domain_id(value: &str) -> rbac::Principal {
    let prefix = |p: String| {
        principal_name(matcher::StringMatcher {
            match_pattern: Some(matcher::string_matcher::MatchPattern::Prefix(p)),
            ignore_case: false,
        })
    };
    match value.split_once('*') {
        _ if value == "*" => prefix("spiffe://".into()),
        None => prefix(format!("spiffe://{value}/")),
        Some((a, b)) => regex_id(format!("spiffe://{}[^/]*{}/.*", quote_meta(a), quote_meta(b))),
    }
}

/// A match on the verified JWT payload, where jwt_authn put it
/// (`request.auth.*`, istiod's MetadataStringMatcherForJWTClaim).
fn claim(path: &[&str], value: matcher::value_matcher::MatchPattern) -> rbac::Principal {
    use matcher::metadata_matcher::{PathSegment, path_segment::Segment};
    let path = std::iter::once(crate::translate::authn::PAYLOAD)
        .chain(path.iter().copied())
        .map(|k| PathSegment { segment: Some(Segment::Key(k.to_owned())) })
        .collect();
    rbac::Principal {
        identifier: Some(rbac::principal::Identifier::Metadata(matcher::MetadataMatcher {
            filter: crate::translate::authn::JWT_FILTER.into(),
            path,
            value: Some(matcher::ValueMatcher { match_pattern: Some(value) }),
            invert: false,
        })),
    }
}

/// `requestPrincipals` / `request.auth.principal`: `<iss>/<sub>` (split at
/// the last `/`) as matches on the payload's `iss` and `sub`, with istiod's
/// wildcards (generator.go requestPrincipalGenerator).
fn request_principal(v: &str) -> rbac::Principal {
    use matcher::string_matcher::MatchPattern as P;
    let m = |p: P| matcher::StringMatcher { match_pattern: Some(p), ignore_case: false };
    let exact = |s: &str| m(P::Exact(s.to_owned()));
    let (iss, sub) = if v == "*" {
        (string("*"), string("*"))
    } else if let Some(rest) = v.strip_prefix('*') {
        match v.rsplit_once('/') {
            Some((i, s)) => (if i == "*" { string("*") } else { m(P::Suffix(i[1..].to_owned())) }, exact(s)),
            None => (string("*"), m(P::Suffix(rest.to_owned()))),
        }
    } else if let Some(rest) = v.strip_suffix('*') {
        match v.rsplit_once('/') {
            Some((i, s)) => (exact(i), if s == "*" { string("*") } else { m(P::Prefix(s[..s.len() - 1].to_owned())) }),
            None => (m(P::Prefix(rest.to_owned())), string("*")),
        }
    } else {
        match v.rsplit_once('/') {
            Some((i, s)) => (exact(i), exact(s)),
            None => (exact(v), exact("")),
        }
    };
    use matcher::value_matcher::MatchPattern as V;
    rbac::Principal {
        identifier: Some(rbac::principal::Identifier::AndIds(rbac::principal::Set {
            ids: vec![claim(&["iss"], V::StringMatch(iss)), claim(&["sub"], V::StringMatch(sub))],
        })),
    }
}

/// `request.auth.audiences`, `.presenter`, `.claims[..]`: the claim at
/// `path` equal to one of `values`, whether the claim is a list or a
/// string (istiod's MetadataListMatcher: or(list one_of V, V)).
fn claim_values(path: &[&str], values: &[String]) -> rbac::Principal {
    use matcher::value_matcher::MatchPattern as V;
    let one = |v: &String| matcher::ValueMatcher { match_pattern: Some(V::StringMatch(string(v))) };
    let v = if values.len() == 1 {
        one(&values[0])
    } else {
        matcher::ValueMatcher {
            match_pattern: Some(V::OrMatch(matcher::OrMatcher { value_matchers: values.iter().map(one).collect() })),
        }
    };
    let list = matcher::ValueMatcher {
        match_pattern: Some(V::ListMatch(Box::new(matcher::ListMatcher {
            match_pattern: Some(matcher::list_matcher::MatchPattern::OneOf(Box::new(v.clone()))),
        }))),
    };
    claim(path, V::OrMatch(matcher::OrMatcher { value_matchers: vec![list, v] }))
}

/// The payload path of a `request.auth.*` condition key, when it is one.
fn auth_key(key: &str) -> Option<Vec<String>> {
    match key {
        "request.auth.audiences" => Some(vec!["aud".into()]),
        "request.auth.presenter" => Some(vec!["azp".into()]),
        _ => {
            let rest = key.strip_prefix("request.auth.claims")?;
            let parts: Vec<String> =
                rest.split(']').filter(|p| !p.is_empty()).map(|p| p.trim_start_matches('[').to_owned()).collect();
            (!parts.is_empty() && rest.starts_with('[')).then_some(parts)
        }
    }
}

/// An address or CIDR block (`10.1.2.3`, `10.1.0.0/16`, `::1`).
fn cidr_range(block: &str) -> Option<core::CidrRange> {
    let (addr, len) = match block.split_once('/') {
        Some((a, l)) => (a, l.parse().ok()?),
        None => (block, if block.contains(':') { 128 } else { 32 }),
    };
    Some(core::CidrRange { address_prefix: addr.into(), prefix_len: Some(len) })
}

fn cidr(block: &str) -> Option<rbac::Principal> {
    Some(rbac::Principal { identifier: Some(rbac::principal::Identifier::DirectRemoteIp(cidr_range(block)?)) })
}

/// `remote.ip`: the original client address (X-Forwarded-For or PROXY
/// protocol), istiod's `principalRemoteIP`.
fn remote_cidr(block: &str) -> Option<rbac::Principal> {
    Some(rbac::Principal { identifier: Some(rbac::principal::Identifier::RemoteIp(cidr_range(block)?)) })
}

/// Why a rule cannot be built as written.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Skip {
    /// A `when` key istiod does not know, or a value that does not parse
    /// (an address, a port): istiod skips the rule ("skipped invalid
    /// rule"), whatever the action.
    Invalid,
    /// A key istiod knows and istiod-rs does not build yet
    /// (`experimental.envoy.filters.*`): an ALLOW rule is left out (it
    /// allows less, never more); a DENY rule keeps its other conditions
    /// and denies more broadly.
    Unsupported,
}

/// A `when` condition's permission (destination side), for the keys istiod
/// makes permissions of (model.go: destination.ip, destination.port,
/// connection.sni).
fn when_permission(key: &str, v: &str) -> Option<Option<rbac::Permission>> {
    use rbac::permission::Rule;
    Some(match key {
        "destination.ip" => cidr_range(v).map(|c| rbac::Permission { rule: Some(Rule::DestinationIp(c)) }),
        "destination.port" => {
            v.parse::<u16>().ok().map(|p| rbac::Permission { rule: Some(Rule::DestinationPort(p.into())) })
        }
        "connection.sni" => Some(rbac::Permission { rule: Some(Rule::RequestedServerName(string(v))) }),
        _ => return None,
    })
}

/// Makes the principal one value of a source field or condition names.
type MakePrincipal<'a> = Box<dyn Fn(&str) -> Option<rbac::Principal> + 'a>;

/// The principal maker of a source `when` key (model.go: source.ip,
/// remote.ip, source.namespace, source.trustDomain, source.serviceAccount,
/// source.principal), for a policy of namespace `ns`.
fn source_key<'a>(key: &str, ns: &'a str) -> Option<MakePrincipal<'a>> {
    Some(match key {
        "source.namespace" => Box::new(|n| Some(namespace_id(n))),
        "source.principal" => Box::new(|p| Some(spiffe(p))),
        "source.serviceAccount" => Box::new(move |a| Some(service_account_id(ns, a))),
        "source.trustDomain" => Box::new(|t| Some(trust_domain_id(t))),
        "source.ip" => Box::new(cidr),
        "remote.ip" => Box::new(remote_cidr),
        _ => return None,
    })
}

/// istiod's `MigrateTrustDomain` (security/authz/model/model.go,
/// trustdomain/bundle.go): with the mesh's trust domain and aliases
/// (`domains`, the trust domain first), a source principal of any of them
/// or of `cluster.local` stands for the same identity in each; a source
/// trust domain among them stands for all of them. Nothing changes for the
/// default `cluster.local` without aliases.
fn migrate_trust_domain<'a>(r: &'a Rule, domains: &[String]) -> std::borrow::Cow<'a, Rule> {
    let names_identities = r.from.iter().any(|f| {
        f.source.as_ref().is_some_and(|s| {
            !s.principals.is_empty()
                || !s.not_principals.is_empty()
                || !s.trust_domains.is_empty()
                || !s.not_trust_domains.is_empty()
        })
    }) || r.when.iter().any(|c| c.key == "source.principal" || c.key == "source.trustDomain");
    if !names_identities || (domains.len() == 1 && domains[0] == "cluster.local") {
        return std::borrow::Cow::Borrowed(r);
    }
    let mut r = r.clone();
    for f in &mut r.from {
        if let Some(src) = &mut f.source {
            src.principals = replace_trust_domains(&src.principals, domains);
            src.not_principals = replace_trust_domains(&src.not_principals, domains);
            src.trust_domains = expand_trust_domains(&src.trust_domains, domains);
            src.not_trust_domains = expand_trust_domains(&src.not_trust_domains, domains);
        }
    }
    for c in &mut r.when {
        match c.key.as_str() {
            "source.principal" => {
                c.values = replace_trust_domains(&c.values, domains);
                c.not_values = replace_trust_domains(&c.not_values, domains);
            }
            "source.trustDomain" => {
                c.values = expand_trust_domains(&c.values, domains);
                c.not_values = expand_trust_domains(&c.not_values, domains);
            }
            _ => {}
        }
    }
    std::borrow::Cow::Owned(r)
}

/// trustdomain.Bundle's `ReplaceTrustDomainAliases`.
fn replace_trust_domains(principals: &[String], domains: &[String]) -> Vec<String> {
    // util.go's matches: `*` suffix and prefix patterns either way.
    let prefix = |a: &str, p: &str| p.strip_suffix('*').is_some_and(|p| a.starts_with(p));
    let suffix = |a: &str, p: &str| p.strip_prefix('*').is_some_and(|p| a.ends_with(p));
    let matches = |a: &str| {
        domains.iter().any(|s| a == s || s == "*" || prefix(a, s) || prefix(s, a) || suffix(a, s) || suffix(s, a))
    };
    let mut out = Vec::new();
    for p in principals {
        let parts: Vec<&str> = p.split('/').collect();
        let td = parts[0];
        if parts.len() != 5 || td == "*" || !(matches(td) || td == "cluster.local") {
            out.push(p.clone());
            continue;
        }
        let mut these: Vec<String> = Vec::new();
        for d in domains {
            let n = if suffix(d, td) { p.clone() } else { format!("{d}/{}", parts[1..].join("/")) };
            if !these.contains(&n) {
                these.push(n);
            }
        }
        out.extend(these);
    }
    out
}

/// trustdomain.Bundle's `ExpandTrustDomainAliases`.
fn expand_trust_domains(values: &[String], domains: &[String]) -> Vec<String> {
    let mut out: Vec<String> = Vec::new();
    for v in values {
        let add: Vec<String> = if domains.contains(v) { domains.to_vec() } else { vec![v.clone()] };
        for a in add {
            if !out.contains(&a) {
                out.push(a);
            }
        }
    }
    out
}

/// Returns (permissions, principals, whether it uses HTTP fields, why it
/// cannot be built as written). On a TCP chain (`tcp`) the HTTP-only fields
/// (methods, paths, hosts, `request.headers`, request principals and JWT
/// claims) are left out: an ALLOW rule that uses them is dropped by the
/// caller, a DENY rule matches more broadly, as in istiod.
fn rule(r: &Rule, ns: &str, tcp: bool) -> (Vec<rbac::Permission>, Vec<rbac::Principal>, bool, Option<Skip>) {
    let mut skip = None;
    for c in &r.when {
        let k = c.key.as_str();
        let known = k.starts_with("request.headers[")
            || k == "request.auth.principal"
            || auth_key(k).is_some()
            || source_key(k, ns).is_some()
            || when_permission(k, "").is_some();
        let istiod_only = k.starts_with("experimental.envoy.filters.");
        // A value that does not parse makes the rule invalid too (istiod's
        // generators return an error; an empty set would be NACKed).
        let bad_value = c.values.iter().chain(&c.not_values).any(|v| match k {
            "source.ip" | "remote.ip" => cidr_range(v).is_none(),
            _ => matches!(when_permission(k, v), Some(None)),
        });
        if istiod_only {
            skip = skip.or(Some(Skip::Unsupported));
        }
        if !(known || istiod_only) || bad_value {
            skip = Some(Skip::Invalid);
        }
    }
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
            if is_http && tcp {
                // HTTP fields cannot match on a TCP chain: an ALLOW rule
                // using them is dropped by the caller, a DENY rule loses
                // them and matches more broadly (istiod's builder).
                return;
            }
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
        to_alts.push(if all.is_empty() {
            rbac::Permission { rule: Some(rbac::permission::Rule::Any(true)) }
        } else {
            rbac::Permission { rule: Some(rbac::permission::Rule::AndRules(rbac::permission::Set { rules: all })) }
        });
    }
    if !to_alts.is_empty() {
        perms.push(or_perms(to_alts));
    }
    for c in &r.when {
        let make = |v: &String| when_permission(&c.key, v).flatten();
        if when_permission(&c.key, "").is_some() {
            if !c.values.is_empty() {
                perms.push(or_perms(c.values.iter().filter_map(make).collect()));
            }
            if !c.not_values.is_empty() {
                perms.push(not_perm(or_perms(c.not_values.iter().filter_map(make).collect())));
            }
            continue;
        }
        if let Some(h) = c.key.strip_prefix("request.headers[").and_then(|k| k.strip_suffix(']')) {
            http = true;
            if tcp {
                continue;
            }
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
        add(&src.remote_ip_blocks, false, &remote_cidr);
        add(&src.not_remote_ip_blocks, true, &remote_cidr);
        add(&src.trust_domains, false, &|t| Some(trust_domain_id(t)));
        add(&src.not_trust_domains, true, &|t| Some(trust_domain_id(t)));
        add(&src.service_accounts, false, &|a| Some(service_account_id(ns, a)));
        add(&src.not_service_accounts, true, &|a| Some(service_account_id(ns, a)));
        if !src.request_principals.is_empty() || !src.not_request_principals.is_empty() {
            http = true;
            if !tcp {
                add(&src.request_principals, false, &|p| Some(request_principal(p)));
                add(&src.not_request_principals, true, &|p| Some(request_principal(p)));
            }
        }
        // A source left with nothing to match (only HTTP-only fields on a
        // TCP chain) matches everyone; Envoy rejects an empty set.
        from_alts.push(if all.is_empty() {
            rbac::Principal { identifier: Some(rbac::principal::Identifier::Any(true)) }
        } else {
            rbac::Principal { identifier: Some(rbac::principal::Identifier::AndIds(rbac::principal::Set { ids: all })) }
        });
    }
    for c in &r.when {
        let auth = c.key == "request.auth.principal" || auth_key(&c.key).is_some();
        if auth {
            http = true;
            if tcp {
                continue;
            }
        }
        if c.key == "request.auth.principal" {
            if !c.values.is_empty() {
                ids.push(or_ids(c.values.iter().map(|v| request_principal(v)).collect()));
            }
            if !c.not_values.is_empty() {
                ids.push(not_id(or_ids(c.not_values.iter().map(|v| request_principal(v)).collect())));
            }
            continue;
        }
        if let Some(path) = auth_key(&c.key) {
            let path: Vec<&str> = path.iter().map(String::as_str).collect();
            if !c.values.is_empty() {
                ids.push(claim_values(&path, &c.values));
            }
            if !c.not_values.is_empty() {
                ids.push(not_id(claim_values(&path, &c.not_values)));
            }
            continue;
        }
        if let Some(make) = source_key(&c.key, ns) {
            if !c.values.is_empty() {
                ids.push(or_ids(c.values.iter().filter_map(|v| make(v)).collect()));
            }
            if !c.not_values.is_empty() {
                ids.push(not_id(or_ids(c.not_values.iter().filter_map(|v| make(v)).collect())));
            }
        }
    }
    if !from_alts.is_empty() {
        ids.push(or_ids(from_alts));
    }
    if ids.is_empty() {
        ids.push(rbac::Principal { identifier: Some(rbac::principal::Identifier::Any(true)) });
    }
    (perms, ids, http, skip)
}

fn applies<'m>(model: &'m Model, class: &ProxyClass) -> Vec<(&'m IstioObject, &'m AuthorizationPolicy)> {
    let mut out = Vec::new();
    for o in model.security.iter() {
        let IstioSpec::AuthorizationPolicy(ap) = &o.spec else { continue };
        let selector = ap.selector.as_ref().map(|s| &s.match_labels);
        let refs = super::scope::target_refs(ap.target_ref.as_ref(), &ap.target_refs);
        if super::scope::policy_applies(model, class, o.meta.ns(), selector, &refs) {
            out.push((o, ap));
        }
    }
    out
}

/// istiod's `rbacPolicyMatchNever`: what a policy without rules becomes.
fn match_never() -> rbac::Policy {
    rbac::Policy {
        permissions: vec![not_perm(rbac::Permission { rule: Some(rbac::permission::Rule::Any(true)) })],
        principals: vec![not_id(rbac::Principal { identifier: Some(rbac::principal::Identifier::Any(true)) })],
    }
}

/// Whether a policy is a dry run (`istio.io/dry-run`, as Go's
/// `strconv.ParseBool` reads it; a value that does not parse is not).
fn dry_run(o: &istiod_config::istio::IstioObject) -> bool {
    matches!(
        o.meta.annotations.get("istio.io/dry-run").map(String::as_str),
        Some("1" | "t" | "T" | "TRUE" | "true" | "True")
    )
}

/// The RBAC of a workload's inbound chains (`http`: an HTTP chain).
pub fn rbacs(model: &Model, class: &ProxyClass, http: bool) -> Rbacs {
    rbacs_of(model, applies(model, class), http)
}

/// The RBAC of `policies` (those that apply, in the model's order).
pub fn rbacs_of(model: &Model, policies: Vec<(&IstioObject, &AuthorizationPolicy)>, http: bool) -> Rbacs {
    let trust_domains: Vec<String> =
        std::iter::once(&model.mesh.trust_domain).chain(&model.mesh.trust_domain_aliases).cloned().collect();
    // Per action (audit, deny, allow): enforced and dry-run policies, and
    // whether any policy of each kind exists.
    let mut local: [[(BTreeMap<String, rbac::Policy>, bool); 2]; 3] = Default::default();
    // Per CUSTOM provider: enforced and dry-run.
    let mut custom: BTreeMap<String, [BTreeMap<String, rbac::Policy>; 2]> = BTreeMap::new();
    for (o, ap) in policies {
        let (ns, name) = (o.meta.ns(), o.meta.name.as_str());
        let dry = usize::from(dry_run(o));
        let (target, prefix) = match ap.action {
            Action::Custom => {
                let provider = ap.provider.as_ref().map(|p| p.name.clone()).unwrap_or_default();
                let prefix = if provider.is_empty() {
                    format!("{EXT_AUTHZ_MATCH_PREFIX}-")
                } else {
                    format!("{EXT_AUTHZ_MATCH_PREFIX}-{provider}-")
                };
                (&mut custom.entry(provider).or_default()[dry], prefix)
            }
            action => {
                let i = match action {
                    Action::Audit => 0,
                    Action::Deny => 1,
                    _ => 2,
                };
                let slot = &mut local[i][dry];
                slot.1 = true;
                (&mut slot.0, String::new())
            }
        };
        if ap.rules.is_empty() {
            target.insert(format!("{prefix}ns[{ns}]-policy[{name}]-rule[0]"), match_never());
            continue;
        }
        for (i, r) in ap.rules.iter().enumerate() {
            let r = migrate_trust_domain(r, &trust_domains);
            let (permissions, principals, uses_http, skip) = rule(&r, ns, !http);
            // Only an ALLOW rule that cannot be built is left out; the
            // others (DENY, AUDIT, CUSTOM, which istiod builds as DENY)
            // lose the condition and match more broadly.
            if uses_http && !http && ap.action == Action::Allow {
                continue;
            }
            match (skip, ap.action) {
                (Some(Skip::Invalid), _) | (Some(Skip::Unsupported), Action::Allow) => continue,
                _ => {}
            }
            target
                .insert(format!("{prefix}ns[{ns}]-policy[{name}]-rule[{i}]"), rbac::Policy { permissions, principals });
        }
    }
    let make = |action: rbac::rbac::Action, (policies, any): (BTreeMap<String, rbac::Policy>, bool)| {
        any.then(|| rbac::Rbac { action: action as i32, policies, ..Default::default() })
    };
    let actions = [rbac::rbac::Action::Log, rbac::rbac::Action::Deny, rbac::rbac::Action::Allow];
    let mut enforced = Vec::new();
    let mut dry_run = Vec::new();
    for (action, [e, d]) in actions.into_iter().zip(local) {
        enforced.push(make(action, e));
        dry_run.push(make(action, d));
    }
    let [audit, deny, allow]: [Option<rbac::Rbac>; 3] = enforced.try_into().unwrap_or_default();
    let custom_conflict = custom.len() > 1 && !model.mesh.multiple_custom_authz_providers;
    if custom_conflict && first_time(&custom.keys().collect::<Vec<_>>()) {
        tracing::warn!(
            target: "authorization",
            providers = ?custom.keys().collect::<Vec<_>>(),
            "multiple CUSTOM authorization providers per workload requires PILOT_ENABLE_MULTIPLE_CUSTOM_AUTHZ_PROVIDERS feature flag; their rules deny"
        );
    }
    let custom = custom
        .into_iter()
        .map(|(provider, [rules, dry])| {
            let deny = |policies| rbac::Rbac { action: rbac::rbac::Action::Deny as i32, policies, ..Default::default() };
            let ext_authz = super::extauthz::provider(model, &provider);
            if let Err(e) = &ext_authz
                && first_time(&(provider.clone(), e.clone()))
            {
                tracing::warn!(target: "authorization", provider, "failed to process CUSTOM action for provider {provider}, will generate deny configs: {e}");
            }
            Custom { provider, rules: deny(rules), dry_run: deny(dry), ext_authz }
        })
        .collect();
    Rbacs { custom, custom_conflict, audit, deny, allow, dry_run: dry_run.try_into().unwrap_or_default() }
}

/// Whether a problem is seen for the first time (a workload's policies
/// are built per chain and per push: said once).
fn first_time<T: std::hash::Hash>(what: &T) -> bool {
    use std::hash::{BuildHasher, BuildHasherDefault, DefaultHasher};
    static SAID: std::sync::Mutex<Vec<u64>> = std::sync::Mutex::new(Vec::new());
    let h = BuildHasherDefault::<DefaultHasher>::default().hash_one(what);
    let mut said = SAID.lock().unwrap_or_else(|e| e.into_inner());
    if said.contains(&h) {
        return false;
    }
    if said.len() >= 1024 {
        said.clear();
    }
    said.push(h);
    true
}
