use std::sync::Arc;

use istiod_proto::envoy::config::listener::v3::{Listener, filter};
use istiod_proto::envoy::config::rbac::v3 as rbac;
use istiod_proto::envoy::extensions::filters::http::rbac::v3::Rbac;
use istiod_proto::envoy::extensions::filters::network::http_connection_manager::v3::HttpConnectionManager;
use istiod_proto::prost::Message;
use istiod_xds_api::snapshot::Kind;

use super::*;
use crate::testing::{class, istio_objects, served};

fn bookinfo_with(yaml: &str, fetch: JwksFetch) -> Arc<Model> {
    let dir = std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("../examples/bookinfo");
    let objs = istiod_kubewatch::config_dir::load(&dir).unwrap().objects;
    let mesh = crate::meshconfig::MeshSettings { jwks_fetch: fetch, ..Default::default() };
    let mut m = Model::build_in(&objs, "cluster.local", Arc::new(mesh));
    Arc::make_mut(&mut m.security).extend(istio_objects(yaml));
    Arc::new(m)
}

const RA: &str = "apiVersion: security.istio.io/v1\nkind: RequestAuthentication\nmetadata: {name: jwt, namespace: bookinfo}\n\
    spec:\n  selector: {matchLabels: {app: reviews}}\n  jwtRules:\n  - issuer: b-issuer\n    jwks: '{\"keys\":[]}'\n\
    \x20 - issuer: a-issuer\n    jwksUri: https://keys.example.com:8443/jwks\n";

/// The HTTP filters of reviews' inbound chain for port 9080, as served.
fn http_filters(m: &Arc<Model>) -> Vec<hcm::HttpFilter> {
    let l = Listener::decode(
        served(m, &class("bookinfo", &[("app", "reviews")]), Kind::Listener, "virtualInbound").unwrap(),
    )
    .unwrap();
    let chain = l.filter_chains.iter().find(|c| c.name == "0.0.0.0_9080").expect("a chain of 9080");
    let Some(filter::ConfigType::TypedConfig(a)) = &chain.filters.last().unwrap().config_type else { panic!() };
    HttpConnectionManager::decode(a.value.as_slice()).unwrap().http_filters
}

fn jwt_config(filters: &[hcm::HttpFilter]) -> jwt::JwtAuthentication {
    let f = filters.iter().find(|f| f.name == JWT_FILTER).expect("a jwt_authn filter");
    let Some(hcm::http_filter::ConfigType::TypedConfig(a)) = &f.config_type else { panic!() };
    jwt::JwtAuthentication::decode(a.value.as_slice()).unwrap()
}

/// policy_applier.go: providers `origins-<i>` by issuer order, payload in
/// metadata, any one token or none, every present one valid.
#[test]
fn request_authentication_becomes_jwt_authn_before_rbac() {
    let deny = "apiVersion: security.istio.io/v1\nkind: AuthorizationPolicy\nmetadata: {name: no-admin, namespace: bookinfo}\n\
        spec: {selector: {matchLabels: {app: reviews}}, action: DENY, rules: [{to: [{operation: {paths: [/admin]}}]}]}\n";
    let m = bookinfo_with(&format!("{RA}---\n{deny}"), JwksFetch::Istiod);
    let filters = http_filters(&m);
    let names: Vec<&str> = filters.iter().map(|f| f.name.as_str()).collect();
    let jwt_at = names.iter().position(|n| *n == JWT_FILTER).expect("jwt_authn");
    let rbac_at = names.iter().position(|n| *n == "envoy.filters.http.rbac").expect("the DENY policy");
    assert!(jwt_at < rbac_at, "{names:?}");
    let c = jwt_config(&filters);
    assert_eq!(c.providers.keys().collect::<Vec<_>>(), ["origins-0", "origins-1"]);
    assert_eq!(c.providers["origins-0"].issuer, "a-issuer", "sorted by issuer");
    assert_eq!(c.providers["origins-0"].payload_in_metadata, PAYLOAD);
    assert!(c.bypass_cors_preflight);
    let inline = |p: &jwt::JwtProvider| match &p.jwks_source_specifier {
        Some(jwt::jwt_provider::JwksSourceSpecifier::LocalJwks(d)) => match &d.specifier {
            Some(core::data_source::Specifier::InlineString(s)) => s.clone(),
            other => panic!("{other:?}"),
        },
        other => panic!("{other:?}"),
    };
    assert_eq!(inline(&c.providers["origins-1"]), "{\"keys\":[]}");
    assert_eq!(
        inline(&c.providers["origins-0"]),
        PUBLIC_ONLY_JWKS,
        "keys istiod has not fetched (yet): no token verifies"
    );
    // Once the resolver has them, they are inlined.
    assert_eq!(
        wanted_jwks(&m).into_iter().collect::<Vec<_>>(),
        vec![("a-issuer".to_owned(), "https://keys.example.com:8443/jwks".to_owned())]
    );
    let keys = r#"{"keys":[{"kid":"fetched"}]}"#;
    let mut fetched = (*m).clone();
    fetched.jwks = Arc::new(crate::model::FetchedJwks::from([(
        ("a-issuer".to_owned(), "https://keys.example.com:8443/jwks".to_owned()),
        keys.to_owned(),
    )]));
    let fetched = Arc::new(fetched);
    assert_eq!(inline(&jwt_config(&http_filters(&fetched)).providers["origins-0"]), keys);
    use jwt::jwt_requirement::RequiresType as R;
    let Some(jwt::requirement_rule::RequirementType::Requires(req)) = &c.rules[0].requirement_type else { panic!() };
    let Some(R::RequiresAny(any)) = &req.requires_type else { panic!("{req:?}") };
    assert_eq!(any.requirements.len(), 3, "each provider, then all present tokens valid");
    assert!(matches!(&any.requirements[2].requires_type, Some(R::RequiresAll(all)) if all.requirements.len() == 2));
    // Workloads it does not select get no filter.
    let l = served(&m, &class("bookinfo", &[("app", "ratings")]), Kind::Listener, "virtualInbound").unwrap();
    assert!(!l.windows(JWT_FILTER.len()).any(|w| w == JWT_FILTER.as_bytes()));
}

#[test]
fn envoy_fetches_the_keys_when_told_to() {
    let c = jwt_config(&http_filters(&bookinfo_with(RA, JwksFetch::Envoy)));
    let Some(jwt::jwt_provider::JwksSourceSpecifier::RemoteJwks(r)) = &c.providers["origins-0"].jwks_source_specifier
    else {
        panic!()
    };
    let uri = r.http_uri.as_ref().unwrap();
    assert_eq!(uri.uri, "https://keys.example.com:8443/jwks");
    assert_eq!(
        uri.http_upstream_type,
        Some(core::http_uri::HttpUpstreamType::Cluster("outbound|8443||keys.example.com".into()))
    );
    assert_eq!(uri.timeout, Some(Duration { seconds: 5, nanos: 0 }));
    // Hybrid: Envoy only for a host of the mesh.
    let c = jwt_config(&http_filters(&bookinfo_with(RA, JwksFetch::Hybrid)));
    assert!(matches!(
        c.providers["origins-0"].jwks_source_specifier,
        Some(jwt::jwt_provider::JwksSourceSpecifier::LocalJwks(_))
    ));
    assert_eq!(JwksFetch::parse("true"), JwksFetch::Hybrid);
    assert_eq!(JwksFetch::parse("false"), JwksFetch::Istiod);
    assert_eq!(jwks_host("http://[::1]/k"), Some(("::1".into(), 80)));
    assert_eq!(jwks_host("https://h:9/k?x"), Some(("h".into(), 9)));
    assert_eq!(jwks_host("ftp://h/k"), None);
}

/// generator.go requestPrincipalGenerator and the claim matchers: metadata
/// of the jwt_authn filter under `payload`.
#[test]
fn request_principals_and_claims_match_the_verified_payload() {
    let ap = "apiVersion: security.istio.io/v1\nkind: AuthorizationPolicy\nmetadata: {name: jwt-only, namespace: bookinfo}\n\
        spec:\n  selector: {matchLabels: {app: reviews}}\n  rules:\n  - from: [{source: {requestPrincipals: [\"iss.example/alice\"]}}]\n\
        \x20   when: [{key: \"request.auth.claims[groups]\", values: [admins]}]\n";
    let m = bookinfo_with(&format!("{RA}---\n{ap}"), JwksFetch::Istiod);
    let filters = http_filters(&m);
    let allow = filters
        .iter()
        .filter(|f| f.name == "envoy.filters.http.rbac")
        .filter_map(|f| match &f.config_type {
            Some(hcm::http_filter::ConfigType::TypedConfig(a)) => Rbac::decode(a.value.as_slice()).ok()?.rules,
            _ => None,
        })
        .find(|r| r.action == rbac::rbac::Action::Allow as i32)
        .unwrap();
    let policy = &allow.policies["ns[bookinfo]-policy[jwt-only]-rule[0]"];
    let text = format!("{:?}", policy.principals);
    for want in [
        "filter: \"envoy.filters.http.jwt_authn\"",
        "Key(\"payload\")",
        "Key(\"iss\")",
        "Exact(\"iss.example\")",
        "Key(\"sub\")",
        "Exact(\"alice\")",
        "Key(\"groups\")",
        "ListMatch",
        "Exact(\"admins\")",
    ] {
        assert!(text.contains(want), "{want} missing from {text}");
    }
    // A TCP port: an ALLOW rule on JWT claims cannot match there; it is left out.
    let tcp = rbac_tcp(&m);
    assert!(!tcp.iter().any(|p| p.contains("jwt-only")), "{tcp:?}");
}

/// The RBAC of `action` on reviews' port 9080 made TCP, as served: the
/// network RBAC filter of that chain of virtualInbound.
fn served_tcp_rbac(m: &Arc<Model>, action: rbac::rbac::Action) -> Option<rbac::Rbac> {
    use istiod_proto::envoy::extensions::filters::network::rbac::v3::Rbac as NetworkRbac;
    let mut m = (**m).clone();
    let s = Arc::make_mut(m.services.get_mut("reviews.bookinfo.svc.cluster.local").unwrap());
    for p in &mut s.ports {
        p.protocol = crate::model::Protocol::Tcp;
    }
    let l = Listener::decode(
        served(&Arc::new(m), &class("bookinfo", &[("app", "reviews")]), Kind::Listener, "virtualInbound").unwrap(),
    )
    .unwrap();
    let chain = l.filter_chains.iter().find(|c| c.name == "0.0.0.0_9080").expect("a chain of 9080");
    assert_eq!(chain.filters.last().unwrap().name, "envoy.filters.network.tcp_proxy", "RBAC before the proxy");
    chain
        .filters
        .iter()
        .filter(|f| f.name == "envoy.filters.network.rbac")
        .filter_map(|f| match &f.config_type {
            Some(filter::ConfigType::TypedConfig(a)) => NetworkRbac::decode(a.value.as_slice()).ok()?.rules,
            _ => None,
        })
        .find(|r| r.action == action as i32)
}

/// The names of the ALLOW policies on reviews' TCP chain, as served.
fn rbac_tcp(m: &Arc<Model>) -> Vec<String> {
    let allow = served_tcp_rbac(m, rbac::rbac::Action::Allow).expect("an ALLOW RBAC on the TCP chain");
    allow.policies.keys().cloned().collect()
}

#[test]
fn the_selection_follows_namespace_and_selector() {
    let ns_wide = "apiVersion: security.istio.io/v1\nkind: RequestAuthentication\nmetadata: {name: all, namespace: bookinfo}\n\
        spec: {jwtRules: [{issuer: x, jwks: '{\"keys\":[]}'}]}\n---\napiVersion: security.istio.io/v1\nkind: RequestAuthentication\n\
        metadata: {name: other, namespace: elsewhere}\nspec: {jwtRules: [{issuer: y, jwks: '{\"keys\":[]}'}]}\n";
    let m = bookinfo_with(ns_wide, JwksFetch::Istiod);
    let issuers =
        |ns: &str| jwt_rules(&m, &class(ns, &[("app", "z")])).into_iter().map(|r| r.issuer).collect::<Vec<_>>();
    assert_eq!(issuers("bookinfo"), ["x"]);
    assert_eq!(issuers("elsewhere"), ["y"]);
    assert!(issuers("third").is_empty());
}

/// A DENY rule whose source is only `notRequestPrincipals` keeps, on a TCP
/// chain, a principal that matches everyone (the HTTP-only field dropped,
/// the rule broader, as in istiod) rather than an empty set Envoy rejects.
#[test]
fn a_jwt_only_deny_source_on_tcp_is_not_an_empty_set() {
    let deny = "apiVersion: security.istio.io/v1\nkind: AuthorizationPolicy\nmetadata: {name: require-jwt, namespace: bookinfo}\n\
        spec: {action: DENY, rules: [{from: [{source: {notRequestPrincipals: [\"*\"]}}]}]}\n";
    let m = bookinfo_with(deny, JwksFetch::Istiod);
    let deny = served_tcp_rbac(&m, rbac::rbac::Action::Deny).expect("the DENY policy stays on TCP");
    let policy = &deny.policies["ns[bookinfo]-policy[require-jwt]-rule[0]"];
    let text = format!("{:?}", policy.principals);
    assert!(!text.contains("ids: []"), "{text}");
    assert!(text.contains("Any(true)"), "{text}");
}

/// model.go `New`: `when` keys become permissions (destination.ip,
/// destination.port, connection.sni) or principals (remote.ip, source.*);
/// a value that does not parse skips the rule for either action ("skipped
/// invalid rule"; unknown keys are refused when the policy is read); a key
/// istiod knows and istiod-rs does not build (`experimental.envoy.filters.*`)
/// leaves an ALLOW rule out (never allowing more than istiod) and makes a
/// DENY rule broader. Service accounts and trust domains as generator.go
/// builds them, in `when` and in `from`.
#[test]
fn when_conditions_as_istiod_builds_them_and_invalid_rules_skipped() {
    let ap = |name: &str, action: &str, key: &str, value: &str| {
        format!(
            "apiVersion: security.istio.io/v1\nkind: AuthorizationPolicy\nmetadata: {{name: {name}, namespace: bookinfo}}\n\
             spec: {{selector: {{matchLabels: {{app: reviews}}}}, action: {action}, rules: [{{from: [{{source: {{namespaces: [bookinfo]}}}}], when: [{{key: \"{key}\", values: [\"{value}\"]}}]}}]}}\n"
        )
    };
    let yaml = [
        ap("dst-port", "ALLOW", "destination.port", "9080"),
        ap("dst-ip", "ALLOW", "destination.ip", "10.0.0.0/8"),
        ap("sni", "ALLOW", "connection.sni", "*.example.com"),
        ap("remote", "ALLOW", "remote.ip", "192.168.0.1"),
        ap("bad-port", "ALLOW", "destination.port", "http"),
        ap("sa", "ALLOW", "source.serviceAccount", "productpage"),
        ap("sa-other-ns", "ALLOW", "source.serviceAccount", "other/productpage"),
        ap("td", "ALLOW", "source.trustDomain", "cluster.local"),
        ap("td-wild", "ALLOW", "source.trustDomain", "*.example.com"),
        ap("filter-allow", "ALLOW", "experimental.envoy.filters.network.mysql_proxy[db.table]", "[update]"),
        ap("filter-deny", "DENY", "experimental.envoy.filters.network.mysql_proxy[db.table]", "[update]"),
        "apiVersion: security.istio.io/v1\nkind: AuthorizationPolicy\nmetadata: {name: from-fields, namespace: bookinfo}\n\
         spec: {selector: {matchLabels: {app: reviews}}, rules: [{from: [{source: {serviceAccounts: [ratings], notTrustDomains: [evil.org], remoteIpBlocks: [10.1.0.0/16]}}]}]}\n"
            .to_owned(),
    ]
    .join("---\n");
    let m = bookinfo_with(&yaml, JwksFetch::Istiod);
    let rb = crate::translate::authz::rbacs(&m, &class("bookinfo", &[("app", "reviews")]), true);
    let allow = rb.allow.unwrap().policies;
    let deny = rb.deny.unwrap().policies;
    let key = |n: &str| format!("ns[bookinfo]-policy[{n}]-rule[0]");
    let text = |p: &rbac::Policy| format!("{p:?}");
    assert!(text(&allow[&key("dst-port")]).contains("DestinationPort(9080)"));
    assert!(text(&allow[&key("dst-ip")]).contains("DestinationIp(CidrRange { address_prefix: \"10.0.0.0\""));
    let sni = text(&allow[&key("sni")]);
    assert!(sni.contains("RequestedServerName(") && sni.contains("Suffix(\".example.com\")"), "{sni}");
    assert!(text(&allow[&key("remote")]).contains("RemoteIp(CidrRange { address_prefix: \"192.168.0.1\""));
    for skipped in ["bad-port", "filter-allow"] {
        assert!(!allow.contains_key(&key(skipped)), "{skipped} is left out");
    }
    // Unsupported on DENY: the rule stays, without the condition (broader).
    let d = text(&deny[&key("filter-deny")]);
    assert!(d.contains("bookinfo") && !d.contains("mysql"), "{d}");
    // The policy's namespace when the value names none.
    let sa = text(&allow[&key("sa")]);
    assert!(sa.contains(r#"regex: "spiffe://.+/ns/bookinfo/(.+/|)sa/productpage(/.+)?""#), "{sa}");
    let sa = text(&allow[&key("sa-other-ns")]);
    assert!(sa.contains(r#"regex: "spiffe://.+/ns/other/(.+/|)sa/productpage(/.+)?""#), "{sa}");
    assert!(text(&allow[&key("td")]).contains(r#"Prefix("spiffe://cluster.local/")"#));
    let wild = text(&allow[&key("td-wild")]);
    assert!(wild.contains(r#"regex: "spiffe://[^/]*\\.example\\.com/.*""#), "{wild}");
    // `from` fields are built, none silently dropped (an ALLOW on
    // serviceAccounts alone once allowed everyone).
    let from = text(&allow[&key("from-fields")]);
    for part in ["sa/ratings", "NotId", "spiffe://evil.org/", "RemoteIp(CidrRange { address_prefix: \"10.1.0.0\""] {
        assert!(from.contains(part), "{part} in {from}");
    }
}

/// istiod's trust domain migration (security/authz/model/model.go
/// `MigrateTrustDomain`, trustdomain/bundle.go): with `trustDomain:
/// new.example` and `trustDomainAliases: [old.example]`, a principal of
/// either (or of `cluster.local`) matches the identity in both; a principal
/// of another trust domain stays as written; `trustDomains` and
/// `source.trustDomain` naming one of them name both.
#[test]
fn trust_domain_aliases_widen_principals_as_istiod_does() {
    let yaml = "apiVersion: security.istio.io/v1\nkind: AuthorizationPolicy\nmetadata: {name: td, namespace: bookinfo}\n\
         spec: {selector: {matchLabels: {app: reviews}}, rules: [\
         {from: [{source: {principals: [cluster.local/ns/bookinfo/sa/productpage, other.org/ns/x/sa/y]}}]},\
         {from: [{source: {trustDomains: [old.example]}}]},\
         {from: [{source: {namespaces: [bookinfo]}}], when: [{key: source.principal, values: [old.example/ns/a/sa/b]}]}]}\n";
    let dir = tempfile::tempdir().unwrap();
    std::fs::write(dir.path().join("t.yaml"), yaml).unwrap();
    let objs = istiod_kubewatch::config_dir::load(dir.path()).unwrap().objects;
    let mesh = crate::meshconfig::MeshSettings::parse("trustDomain: new.example\ntrustDomainAliases: [old.example]\n")
        .unwrap();
    let m = Model::build_in(&objs, "cluster.local", Arc::new(mesh));
    let rb = crate::translate::authz::rbacs(&m, &class("bookinfo", &[("app", "reviews")]), true);
    let allow = rb.allow.unwrap().policies;
    let text = |i: usize| format!("{:?}", allow[&format!("ns[bookinfo]-policy[td]-rule[{i}]")]);
    let principals = text(0);
    for p in [
        "spiffe://new.example/ns/bookinfo/sa/productpage",
        "spiffe://old.example/ns/bookinfo/sa/productpage",
        "spiffe://other.org/ns/x/sa/y",
    ] {
        assert!(principals.contains(p), "{p} in {principals}");
    }
    assert!(!principals.contains("spiffe://cluster.local/"), "cluster.local stands for the mesh's: {principals}");
    let domains = text(1);
    assert!(
        domains.contains(r#"Prefix("spiffe://new.example/")"#)
            && domains.contains(r#"Prefix("spiffe://old.example/")"#)
    );
    let when = text(2);
    assert!(
        when.contains("spiffe://new.example/ns/a/sa/b") && when.contains("spiffe://old.example/ns/a/sa/b"),
        "{when}"
    );
    // Without aliases, under the default trust domain, nothing changes.
    let plain = Model::build_in(&objs, "cluster.local", Arc::new(crate::meshconfig::MeshSettings::default()));
    let rb = crate::translate::authz::rbacs(&plain, &class("bookinfo", &[("app", "reviews")]), true);
    let p = format!("{:?}", rb.allow.unwrap().policies["ns[bookinfo]-policy[td]-rule[0]"]);
    assert!(p.contains("spiffe://cluster.local/ns/bookinfo/sa/productpage") && !p.contains("new.example"));
}

/// istiod's builder.go: a dry-run policy (`istio.io/dry-run: "true"`)
/// becomes shadow rules with the action's stat prefix, never enforced; a
/// policy without rules is the explicit never-matching policy; a
/// workload's CUSTOM policies naming two providers deny (their rules,
/// renamed) unless PILOT_ENABLE_MULTIPLE_CUSTOM_AUTHZ_PROVIDERS is set.
#[test]
fn dry_run_no_rules_and_several_custom_providers_as_istiod_builds_them() {
    let yaml = "\
apiVersion: security.istio.io/v1\nkind: AuthorizationPolicy\n\
metadata: {name: dry, namespace: bookinfo, annotations: {istio.io/dry-run: \"true\"}}\n\
spec: {action: DENY, rules: [{from: [{source: {namespaces: [evil]}}]}]}\n---\n\
apiVersion: security.istio.io/v1\nkind: AuthorizationPolicy\nmetadata: {name: none, namespace: bookinfo}\n\
spec: {action: ALLOW}\n---\n\
apiVersion: security.istio.io/v1\nkind: AuthorizationPolicy\nmetadata: {name: a, namespace: bookinfo}\n\
spec: {action: CUSTOM, provider: {name: one}, rules: [{}]}\n---\n\
apiVersion: security.istio.io/v1\nkind: AuthorizationPolicy\nmetadata: {name: b, namespace: bookinfo}\n\
spec: {action: CUSTOM, provider: {name: two}, rules: [{}]}\n";
    let m = bookinfo_with(yaml, JwksFetch::Istiod);
    let who = class("bookinfo", &[("app", "reviews")]);
    let rb = crate::translate::authz::rbacs(&m, &who, true);
    assert!(rb.deny.is_none(), "a dry run is not enforced");
    let shadow = rb.dry_run[1].as_ref().unwrap();
    assert!(shadow.policies.contains_key("ns[bookinfo]-policy[dry]-rule[0]"));
    let never = &rb.allow.as_ref().unwrap().policies["ns[bookinfo]-policy[none]-rule[0]"];
    assert!(format!("{never:?}").contains("NotRule"), "{never:?}");
    assert!(rb.custom_conflict);
    let filters = rb.http_filters();
    assert!(filters.iter().all(|f| f.name == "envoy.filters.http.rbac"), "{filters:?}");
    let decoded: Vec<String> = filters
        .iter()
        .map(|f| {
            use istiod_proto::envoy::extensions::filters::network::http_connection_manager::v3::http_filter::ConfigType;
            let Some(ConfigType::TypedConfig(any)) = &f.config_type else { panic!("{f:?}") };
            let r = <istiod_proto::envoy::extensions::filters::http::rbac::v3::Rbac as prost::Message>::decode(
                &any.value[..],
            )
            .unwrap();
            format!("{r:?}")
        })
        .collect();
    let text = decoded.join("\n");
    assert!(
        text.contains("istio-ext-authz-one-ns[bookinfo]-policy[a]-rule[0]-deny-due-to-bad-CUSTOM-action"),
        "{text}"
    );
    assert!(text.contains("istio_dry_run_deny_"), "{text}");
    let mut m = (*m).clone();
    std::sync::Arc::make_mut(&mut m.mesh).multiple_custom_authz_providers = true;
    assert!(!crate::translate::authz::rbacs(&m, &who, true).custom_conflict);
}
