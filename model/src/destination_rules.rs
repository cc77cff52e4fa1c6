//! Which DestinationRule shapes a proxy's traffic to a host, as istiod's
//! `PushContext.destinationRule` (pilot/pkg/model/push_context.go) and
//! `SidecarScope.DestinationRule` (sidecar.go) decide it:
//!
//! 1. a rule in the proxy's own namespace visible there (`exportTo` empty,
//!    `*`, `.` or that namespace), whatever it exports elsewhere; one whose
//!    `workloadSelector` matches the proxy's labels wins over the others;
//! 2. else a rule in the service's namespace exported to the proxy's;
//! 3. else a rule in the mesh's root namespace exported to it.
//!
//! In each namespace the most specific host wins (an exact host, then the
//! longest wildcard suffix). Rules of one namespace for the same host, with
//! the same `exportTo` and selector, are merged as istiod's
//! `mergeDestinationRule` merges them (destination_rule.go): subsets are
//! united by name (the first keeps a duplicated name), and the first
//! top-level traffic policy stands.

use std::collections::{BTreeMap, HashMap};
use std::sync::Arc;

use istiod_config::istio::{IstioObject, IstioSpec, networking::DestinationRule};

/// One DestinationRule as it applies: the rules of one namespace for one
/// host, merged.
#[derive(Debug, Clone, PartialEq)]
pub struct AppliedRule {
    /// A name for it that does not depend on the other rules:
    /// `<namespace>/<first rule's name>` (cluster forms are keyed by it, so
    /// adding or removing another rule leaves them valid).
    pub id: Arc<str>,
    /// Namespace of the rules.
    pub namespace: String,
    /// The host they name, resolved (`*.ns.svc.cluster.local` stays a
    /// wildcard).
    pub host: String,
    /// The rules merged into this one (`name` of each), in order.
    pub names: Vec<String>,
    /// Namespaces it is exported to (`.` resolved); `None`: everywhere.
    pub export: Option<Vec<String>>,
    /// Workload labels it is limited to (`workloadSelector`); empty: none.
    pub selector: BTreeMap<String, String>,
    /// The merged rule.
    pub rule: DestinationRule,
    /// Whether the rule is a BackendTLSPolicy's alone (no user rule merged).
    pub synthetic: bool,
}

impl AppliedRule {
    fn exported_to(&self, ns: &str) -> bool {
        self.export.as_ref().is_none_or(|e| e.iter().any(|n| n == ns))
    }

    /// Visible in its own namespace (istiod's `namespaceLocal`).
    fn local(&self) -> bool {
        self.exported_to(&self.namespace)
    }

    /// Visible in its own namespace only (exportTo `.` or that namespace).
    fn private(&self) -> bool {
        self.export.as_ref().is_some_and(|e| e.len() == 1 && e[0] == self.namespace)
    }
}

/// Tests a rule's `workloadSelector` against the proxy's labels.
pub type Selects<'a> = &'a dyn Fn(&BTreeMap<String, String>) -> bool;

/// The rules of one namespace: by exact host, and the wildcard ones.
#[derive(Debug, Clone, Default)]
struct NamespaceRules {
    exact: HashMap<String, Vec<usize>>,
    wildcard: Vec<usize>,
}

/// Every DestinationRule of a model, indexed by namespace and host.
#[derive(Debug, Clone, Default)]
pub struct DestinationRules {
    rules: Vec<AppliedRule>,
    by_namespace: HashMap<String, NamespaceRules>,
    /// Whether some rule has a `workloadSelector` (then which rule applies
    /// depends on the proxy's labels, not only its namespace).
    pub selecting: bool,
    /// Hosts whose merged rules named a subset twice (the later one was
    /// dropped): istiod's `pilot_destrule_subsets`.
    pub duplicate_subsets: std::collections::BTreeSet<String>,
}

/// Whether `pattern` (a host or `*.suffix` / `*`) covers `host`.
pub fn host_matches(pattern: &str, host: &str) -> bool {
    match pattern.strip_prefix('*') {
        Some(suffix) => host.ends_with(suffix),
        None => pattern == host,
    }
}

/// How specific a matching pattern is: exact beats any wildcard, a longer
/// wildcard beats a shorter one (istiod's `host.MoreSpecific`).
fn specificity(pattern: &str) -> (bool, usize) {
    (!pattern.starts_with('*'), pattern.len())
}

impl DestinationRules {
    /// Indexes the DestinationRules among `routing` (ordered by namespace
    /// and name); `resolve` turns a host written in namespace `ns` into an
    /// FQDN.
    pub fn build<'a>(
        routing: impl IntoIterator<Item = &'a IstioObject>,
        resolve: impl Fn(&str, &str) -> String,
    ) -> Self {
        let mut out = DestinationRules::default();
        for o in routing {
            let IstioSpec::DestinationRule(dr) = &o.spec else { continue };
            let ns = o.meta.ns().to_owned();
            let host = if dr.host.starts_with('*') { dr.host.clone() } else { resolve(&dr.host, &ns) };
            let selector = dr.workload_selector.as_ref().map(|w| w.match_labels.clone()).unwrap_or_default();
            // A rule with a selector is private to its namespace (istiod
            // forces its exportTo to ".").
            let export = if !selector.is_empty() {
                Some(vec![ns.clone()])
            } else if dr.export_to.is_empty() || dr.export_to.iter().any(|e| e == "*") {
                None
            } else {
                let mut e: Vec<String> =
                    dr.export_to.iter().map(|e| if e == "." { ns.clone() } else { e.clone() }).collect();
                e.sort();
                e.dedup();
                Some(e)
            };
            out.selecting |= !selector.is_empty();
            let slots = out.by_namespace.entry(ns.clone()).or_default();
            // Only the rules of the same host can merge: look there, not
            // through the whole namespace (quadratic in its rules).
            let same_host: &[usize] = match host.starts_with('*') {
                true => &slots.wildcard,
                false => slots.exact.get(&host).map_or(&[], Vec::as_slice),
            };
            let same = same_host.iter().copied().find(|i| {
                let r = &out.rules[*i];
                r.host == host && r.export == export && r.selector == selector
            });
            match same {
                Some(i) => {
                    let merged = &mut out.rules[i];
                    merged.names.push(o.meta.name.clone());
                    // A BackendTLSPolicy's rule fills what the user's leaves
                    // unset, whichever comes first (`mergeDestinationRule`).
                    let synthetic = istiod_config::backend_tls::is_synthetic(o);
                    if merged.synthetic && !synthetic {
                        let mut tp = dr.traffic_policy.clone();
                        istiod_config::backend_tls::fill(&mut tp, &merged.rule.traffic_policy);
                        merged.rule.traffic_policy = tp;
                        merged.synthetic = false;
                    } else if synthetic {
                        istiod_config::backend_tls::fill(&mut merged.rule.traffic_policy, &dr.traffic_policy);
                        continue;
                    }
                    for s in &dr.subsets {
                        if !merged.rule.subsets.iter().any(|m| m.name == s.name) {
                            merged.rule.subsets.push(s.clone());
                        } else {
                            out.duplicate_subsets.insert(merged.host.clone());
                        }
                    }
                    if merged.rule.traffic_policy.is_none() {
                        merged.rule.traffic_policy = dr.traffic_policy.clone();
                    }
                }
                None => {
                    let i = out.rules.len();
                    if host.starts_with('*') {
                        slots.wildcard.push(i);
                    } else {
                        slots.exact.entry(host.clone()).or_default().push(i);
                    }
                    out.rules.push(AppliedRule {
                        id: format!("{ns}/{}", o.meta.name).into(),
                        namespace: ns,
                        host,
                        names: vec![o.meta.name.clone()],
                        export,
                        selector,
                        rule: dr.clone(),
                        synthetic: istiod_config::backend_tls::is_synthetic(o),
                    });
                }
            }
        }
        out
    }

    /// The rule with index `i` (from [`DestinationRules::select`] or
    /// [`DestinationRules::candidates`]).
    pub fn get(&self, i: usize) -> &AppliedRule {
        &self.rules[i]
    }

    /// Every rule that may apply to `host` for some proxy.
    pub fn candidates(&self, host: &str) -> Vec<usize> {
        let mut out: Vec<usize> = self
            .by_namespace
            .values()
            .flat_map(|ns| {
                let exact = ns.exact.get(host).into_iter().flatten().copied();
                exact.chain(ns.wildcard.iter().copied().filter(|i| host_matches(&self.rules[*i].host, host)))
            })
            .collect();
        // In rule order: forms and their digests must not depend on a
        // hash map's iteration order.
        out.sort_unstable();
        out
    }

    /// The rule in force for traffic from a proxy in `proxy_ns` (whose
    /// labels `labels` tests) to `host`, a service of namespace `svc_ns`.
    pub fn select(
        &self,
        proxy_ns: &str,
        labels: Selects<'_>,
        root_ns: &str,
        host: &str,
        svc_ns: &str,
    ) -> Option<usize> {
        // 1. The proxy's namespace: what is visible there. A proxy of the
        //    root namespace sees here only the root's private rules
        //    (istiod's rootNamespaceLocal); its public ones come in step 3.
        let own: &dyn Fn(&AppliedRule) -> bool =
            if proxy_ns == root_ns { &|r: &AppliedRule| r.private() } else { &|r: &AppliedRule| r.local() };
        if let Some(i) = self.in_namespace(proxy_ns, host, own, Some(labels)) {
            return Some(i);
        }
        // 2 and 3. The service's, then the root namespace: what they export.
        for ns in [svc_ns, root_ns] {
            if ns.is_empty() || (ns == proxy_ns && ns != root_ns) {
                continue;
            }
            if let Some(i) = self.in_namespace(ns, host, &|r: &AppliedRule| r.exported_to(proxy_ns), None) {
                return Some(i);
            }
        }
        None
    }

    /// The most specific host of `ns` matching `host`; among its rules the
    /// visible ones, a selector match first (when `labels` is given), else
    /// the last without a selector (istiod's `catchAllDr`). Does not fall
    /// back to a less specific host.
    fn in_namespace(
        &self,
        ns: &str,
        host: &str,
        visible: &dyn Fn(&AppliedRule) -> bool,
        labels: Option<Selects<'_>>,
    ) -> Option<usize> {
        let slots = self.by_namespace.get(ns)?;
        // Among the visible rules only (istiod indexes by visibility, then
        // matches): an exact host is the most specific; else the longest
        // wildcard.
        let exact: Vec<usize> =
            slots.exact.get(host).into_iter().flatten().copied().filter(|i| visible(&self.rules[*i])).collect();
        let candidates: Vec<usize> = if !exact.is_empty() {
            exact
        } else {
            let seen: Vec<usize> = slots
                .wildcard
                .iter()
                .copied()
                .filter(|i| visible(&self.rules[*i]) && host_matches(&self.rules[*i].host, host))
                .collect();
            let best = seen.iter().map(|i| &self.rules[*i].host).max_by_key(|p| specificity(p))?.clone();
            seen.into_iter().filter(|i| self.rules[*i].host == best).collect()
        };
        if let Some(labels) = labels
            && let Some(i) = candidates.iter().copied().find(|i| {
                let r = &self.rules[*i];
                !r.selector.is_empty() && labels(&r.selector)
            })
        {
            return Some(i);
        }
        candidates.into_iter().rev().find(|i| self.rules[*i].selector.is_empty())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn rules(yaml: &str) -> DestinationRules {
        let objs = crate::testing::istio_objects(yaml);
        let resolve = |h: &str, ns: &str| match h.contains('.') || h == "*" {
            false => format!("{h}.{ns}.svc.cluster.local"),
            true => h.to_owned(),
        };
        DestinationRules::build(&objs, resolve)
    }

    fn names(r: &DestinationRules, i: Option<usize>) -> Option<String> {
        i.map(|i| format!("{}/{}", r.get(i).namespace, r.get(i).names.join("+")))
    }

    const NONE: &dyn Fn(&BTreeMap<String, String>) -> bool = &|_| false;

    /// pilot/pkg/model/push_context.go `destinationRule`: the proxy's
    /// namespace, then the service's, then the root namespace.
    #[test]
    fn precedence_is_client_then_service_then_root_namespace() {
        let r = rules(
            "apiVersion: networking.istio.io/v1\nkind: DestinationRule\nmetadata: {name: root, namespace: istio-system}\nspec: {host: reviews.shop.svc.cluster.local}\n---\n\
             apiVersion: networking.istio.io/v1\nkind: DestinationRule\nmetadata: {name: svc, namespace: shop}\nspec: {host: reviews}\n---\n\
             apiVersion: networking.istio.io/v1\nkind: DestinationRule\nmetadata: {name: client, namespace: web}\nspec: {host: reviews.shop.svc.cluster.local}\n",
        );
        let host = "reviews.shop.svc.cluster.local";
        let sel = |ns: &str| names(&r, r.select(ns, NONE, "istio-system", host, "shop"));
        assert_eq!(sel("web").as_deref(), Some("web/client"));
        assert_eq!(sel("shop").as_deref(), Some("shop/svc"));
        assert_eq!(sel("other").as_deref(), Some("shop/svc"));
        assert_eq!(r.candidates(host).len(), 3);
    }

    #[test]
    fn export_to_limits_the_service_and_root_namespace_rules() {
        let r = rules(
            "apiVersion: networking.istio.io/v1\nkind: DestinationRule\nmetadata: {name: root, namespace: istio-system}\nspec: {host: reviews.shop.svc.cluster.local, exportTo: [web]}\n---\n\
             apiVersion: networking.istio.io/v1\nkind: DestinationRule\nmetadata: {name: svc, namespace: shop}\nspec: {host: reviews, exportTo: [.]}\n",
        );
        let host = "reviews.shop.svc.cluster.local";
        let sel = |ns: &str| names(&r, r.select(ns, NONE, "istio-system", host, "shop"));
        assert_eq!(sel("shop").as_deref(), Some("shop/svc"), "private to its own namespace");
        assert_eq!(sel("web").as_deref(), Some("istio-system/root"));
        assert_eq!(sel("other"), None, "exported to neither");
    }

    #[test]
    fn the_most_specific_host_wins_and_same_host_rules_merge() {
        let r = rules(
            "apiVersion: networking.istio.io/v1\nkind: DestinationRule\nmetadata: {name: a-wide, namespace: shop}\nspec: {host: '*.shop.svc.cluster.local'}\n---\n\
             apiVersion: networking.istio.io/v1\nkind: DestinationRule\nmetadata: {name: b, namespace: shop}\nspec:\n  host: reviews\n  subsets: [{name: v1, labels: {version: v1}}]\n---\n\
             apiVersion: networking.istio.io/v1\nkind: DestinationRule\nmetadata: {name: c, namespace: shop}\nspec:\n  host: reviews\n  trafficPolicy: {loadBalancer: {simple: RANDOM}}\n  subsets: [{name: v1, labels: {version: x}}, {name: v2, labels: {version: v2}}]\n",
        );
        let i = r.select("shop", NONE, "istio-system", "reviews.shop.svc.cluster.local", "shop").unwrap();
        let merged = r.get(i);
        assert_eq!(merged.names, ["b", "c"]);
        let subsets: Vec<(&str, &str)> =
            merged.rule.subsets.iter().map(|s| (s.name.as_str(), s.labels["version"].as_str())).collect();
        assert_eq!(subsets, [("v1", "v1"), ("v2", "v2")], "the first keeps a duplicated subset");
        // istiod's pilot_destrule_subsets counts the host.
        assert_eq!(r.duplicate_subsets.iter().collect::<Vec<_>>(), ["reviews.shop.svc.cluster.local"]);
        assert!(merged.rule.traffic_policy.is_some(), "the first traffic policy present stands");
        let other = r.select("shop", NONE, "istio-system", "ratings.shop.svc.cluster.local", "shop").unwrap();
        assert_eq!(r.get(other).names, ["a-wide"], "the wildcard covers the rest");
    }

    /// push_context.go: visibility first, then the most specific host; a
    /// root-namespace proxy sees the root's private rules first and its
    /// public ones only after the service's namespace.
    #[test]
    fn visibility_comes_before_specificity_and_the_root_proxy_is_last() {
        let r = rules(
            "apiVersion: networking.istio.io/v1\nkind: DestinationRule\nmetadata: {name: private, namespace: shop}\nspec: {host: reviews, exportTo: [.]}\n---\n\
             apiVersion: networking.istio.io/v1\nkind: DestinationRule\nmetadata: {name: wide, namespace: shop}\nspec: {host: '*.shop.svc.cluster.local'}\n---\n\
             apiVersion: networking.istio.io/v1\nkind: DestinationRule\nmetadata: {name: mesh, namespace: istio-system}\nspec: {host: '*.local'}\n",
        );
        let host = "reviews.shop.svc.cluster.local";
        let sel = |ns: &str| names(&r, r.select(ns, NONE, "istio-system", host, "shop"));
        assert_eq!(sel("web").as_deref(), Some("shop/wide"), "the private exact host is not visible from web");
        assert_eq!(sel("shop").as_deref(), Some("shop/private"));
        assert_eq!(
            sel("istio-system").as_deref(),
            Some("shop/wide"),
            "the service's namespace before the root's public rule"
        );
        assert_eq!(
            names(&r, r.select("istio-system", NONE, "istio-system", "x.other.svc.cluster.local", "other")).as_deref(),
            Some("istio-system/mesh")
        );
    }

    #[test]
    fn a_workload_selector_applies_to_the_workloads_it_selects() {
        let r = rules(
            "apiVersion: networking.istio.io/v1\nkind: DestinationRule\nmetadata: {name: all, namespace: shop}\nspec: {host: reviews}\n---\n\
             apiVersion: networking.istio.io/v1\nkind: DestinationRule\nmetadata: {name: web-only, namespace: shop}\nspec: {host: reviews, workloadSelector: {matchLabels: {app: web}}}\n",
        );
        assert!(r.selecting);
        let host = "reviews.shop.svc.cluster.local";
        let web = |l: &BTreeMap<String, String>| l.get("app").is_some_and(|v| v == "web");
        assert_eq!(names(&r, r.select("shop", &web, "istio-system", host, "shop")).as_deref(), Some("shop/web-only"));
        assert_eq!(names(&r, r.select("shop", NONE, "istio-system", host, "shop")).as_deref(), Some("shop/all"));
        assert_eq!(
            names(&r, r.select("other", &web, "istio-system", host, "shop")).as_deref(),
            Some("shop/all"),
            "a selector never reaches past its namespace"
        );
    }

    const ECHO: &str = "\
apiVersion: v1
kind: Service
metadata: {name: echo-https, namespace: default}
spec:
  selector: {app: echo}
  ports: [{name: http, port: 80}, {name: https, port: 443}]
";

    /// A user's DestinationRule for the same host keeps its fields and takes
    /// the policy's TLS where it sets none (`mergeDestinationRule`).
    #[test]
    fn a_users_rule_keeps_its_fields_and_takes_a_backend_tls_policys_rest() {
        use istiod_config::istio::networking::ClientTlsMode;
        let yaml = format!(
            "{ECHO}---
apiVersion: networking.istio.io/v1
kind: DestinationRule
metadata: {{name: mine, namespace: default}}
spec:
  host: echo-https
  trafficPolicy:
    loadBalancer: {{simple: ROUND_ROBIN}}
    portLevelSettings: [{{port: {{number: 443}}, tls: {{mode: DISABLE}}}}]
---
apiVersion: gateway.networking.k8s.io/v1
kind: BackendTLSPolicy
metadata: {{name: p, namespace: default}}
spec:
  targetRefs:
  - {{group: '', kind: Service, name: echo-https}}
  - {{group: '', kind: Service, name: echo-https, sectionName: https}}
  validation: {{hostname: echo.example.com}}
"
        );
        let model = crate::testing::model_in("", &yaml);
        let rules = model.destination_rules();
        let i = model.rule_index_for("default", &[], "echo-https.default.svc.cluster.local").unwrap();
        let tp = rules.get(i).rule.traffic_policy.clone().unwrap();
        assert!(tp.load_balancer.is_some(), "the user's");
        assert_eq!(tp.tls.as_ref().map(|t| t.sni.as_str()), Some("echo.example.com"), "the policy's, where unset");
        let p443 = &tp.port_level_settings[0];
        assert_eq!(p443.tls.as_ref().map(|t| t.mode), Some(ClientTlsMode::Disable), "the user's port wins");
    }
}
