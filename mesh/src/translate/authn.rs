//! RequestAuthentication as Envoy's `envoy.filters.http.jwt_authn` filter
//! on a workload's inbound HTTP chains, after istiod's
//! pilot/pkg/security/authn/policy_applier.go: the JWT rules of the
//! RequestAuthentications that select the workload (or have no selector in
//! its namespace or the root namespace), sorted by issuer, one provider
//! `origins-<i>` each, the verified payload in the filter's dynamic
//! metadata under `payload` (where RBAC reads `request.auth.*`). A request
//! with an invalid token is rejected (401); one without a token passes
//! (`allow_missing`): requiring one is AuthorizationPolicy's job.

use crate::node::ProxyClass;
use istiod_config::istio::IstioSpec;
use istiod_config::istio::security::{JwtRule, MtlsMode};
use istiod_proto::envoy::config::core::v3 as core;
use istiod_proto::envoy::config::route::v3 as route;
use istiod_proto::envoy::extensions::filters::http::jwt_authn::v3 as jwt;
use istiod_proto::envoy::extensions::filters::network::http_connection_manager::v3 as hcm;
use istiod_proto::prost_types::Duration;

use crate::meshconfig::JwksFetch;
use crate::model::{JwksKey, Model};

/// The filter's name; RBAC's metadata matchers name it too.
pub const JWT_FILTER: &str = "envoy.filters.http.jwt_authn";
/// Where the filter puts a verified token's payload in its metadata.
pub const PAYLOAD: &str = "payload";

/// A key set no token verifies against: an RSA public key whose private key
/// was discarded. istiod serves this very text (`model.PublicOnlyJwks`,
/// pilot/pkg/model/jwks_resolver.go) when it has no key set for a rule:
/// every token is rejected, requests without one still pass.
pub const PUBLIC_ONLY_JWKS: &str = r#"{
  "keys": [
    {
      "kty": "RSA",
      "e": "AQAB",
      "n": "0xObjM0UvS_oaazjpEYlAbwctEJ4L8pH3OuTb7qth7gUwqet-EzQB4dgFdvSdMgrLnSncQGRjpEYz3F3viIbH-3EN3TxSlPNviHxeOdyiBVfumN8dMxbLvVJUpfNOnvmMxJcl-8NNjAwcOjk4otSALaYgYYyOPyvKtgVdrQr-FoubWX4yrjxW-MJ2-7OBeepUUNOsVwGV23YX03sVkkyvY3otRflkBcY3_HKpBxJl9wk2GyOShN4_PNUF9-vwfnvOXMbCDX-w4PTef4geeb_GiT40YCKHTKMSPVanGRn5GExIWmki-mmqh94-mPTJyBR74ShspL3BxPZitDL574T1w"
    }
  ]
}"#;

/// The key sets translation wants istiod to fetch: rules without inline
/// keys whose keys istiod (not Envoy) fetches in `model`'s mode.
pub fn wanted_jwks(model: &Model) -> std::collections::BTreeSet<JwksKey> {
    let mut out = std::collections::BTreeSet::new();
    for o in model.security.iter() {
        let IstioSpec::RequestAuthentication(ra) = &o.spec else { continue };
        for rule in &ra.jwt_rules {
            if rule.jwks.is_empty()
                && !(rule.issuer.is_empty() && rule.jwks_uri.is_empty())
                && istiod_fetches(model, rule)
            {
                out.insert((rule.issuer.clone(), rule.jwks_uri.clone()));
            }
        }
    }
    out
}

/// Whether istiod (rather than Envoy) fetches `rule`'s keys.
fn istiod_fetches(model: &Model, rule: &JwtRule) -> bool {
    if rule.jwks_uri.is_empty() {
        return true; // OpenID discovery is istiod's
    }
    match model.mesh.jwks_fetch {
        JwksFetch::Istiod => true,
        JwksFetch::Envoy => false,
        JwksFetch::Hybrid => !mesh_host(model, &rule.jwks_uri),
    }
}

/// Whether a URI's host and port are a service of the mesh.
fn mesh_host(model: &Model, uri: &str) -> bool {
    jwks_host(uri).is_some_and(|(host, port)| {
        model.services.get(host.as_str()).is_some_and(|s| s.ports.iter().any(|p| p.port == port))
    })
}

/// The JWT rules in force for `class`, sorted by issuer.
pub fn jwt_rules(model: &Model, class: &ProxyClass) -> Vec<JwtRule> {
    let mut rules = Vec::new();
    for o in model.security.iter() {
        let IstioSpec::RequestAuthentication(ra) = &o.spec else { continue };
        let selector = ra.selector.as_ref().map(|s| &s.match_labels);
        let refs = super::scope::target_refs(ra.target_ref.as_ref(), &ra.target_refs);
        let selected = super::scope::policy_applies(model, class, o.meta.ns(), selector, &refs);
        if selected {
            rules.extend(ra.jwt_rules.iter().cloned());
        }
    }
    rules.sort_by(|a, b| a.issuer.cmp(&b.issuer));
    rules
}

/// Where a provider gets its keys (istiod's `buildJwtProvider`): inline
/// when the rule carries them; `remote_jwks` when Envoy fetches; else the
/// key set istiod fetched (`model.jwks`), or [`PUBLIC_ONLY_JWKS`] until it
/// has one, as istiod's `BuildLocalJwks`.
fn jwks(model: &Model, rule: &JwtRule, timeout: Duration) -> jwt::jwt_provider::JwksSourceSpecifier {
    use jwt::jwt_provider::JwksSourceSpecifier as S;
    let inline = |s: &str| {
        S::LocalJwks(core::DataSource {
            specifier: Some(core::data_source::Specifier::InlineString(s.to_owned())),
            ..Default::default()
        })
    };
    if !rule.jwks.is_empty() {
        return inline(&rule.jwks);
    }
    if istiod_fetches(model, rule) {
        let key = (rule.issuer.clone(), rule.jwks_uri.clone());
        return inline(model.jwks.get(&key).map_or(PUBLIC_ONLY_JWKS, String::as_str));
    }
    let Some((host, port)) = jwks_host(&rule.jwks_uri) else { return inline(PUBLIC_ONLY_JWKS) };
    S::RemoteJwks(jwt::RemoteJwks {
        http_uri: Some(core::HttpUri {
            uri: rule.jwks_uri.clone(),
            http_upstream_type: Some(core::http_uri::HttpUpstreamType::Cluster(format!("outbound|{port}||{host}"))),
            timeout: Some(timeout),
        }),
        cache_duration: Some(Duration { seconds: 300, nanos: 0 }),
    })
}

/// The host and port of an http(s) URI (istiod's `ParseJwksURI`).
pub fn jwks_host(uri: &str) -> Option<(String, u16)> {
    let (rest, default) = match uri.split_once("://")? {
        ("https", r) => (r, 443),
        ("http", r) => (r, 80),
        _ => return None,
    };
    let authority = rest.split(['/', '?', '#']).next()?;
    let (host, port) = match authority.strip_prefix('[') {
        // [v6]:port
        Some(v6) => {
            let (h, after) = v6.split_once(']')?;
            (h, after.strip_prefix(':'))
        }
        None => match authority.rsplit_once(':') {
            Some((h, p)) => (h, Some(p)),
            None => (authority, None),
        },
    };
    let port = match port {
        Some(p) => p.parse().ok()?,
        None => default,
    };
    Some((host.to_owned(), port))
}

/// A requirement on one provider that also lets a request without its
/// token through.
fn optional(provider: &str) -> jwt::JwtRequirement {
    use jwt::jwt_requirement::RequiresType as R;
    jwt::JwtRequirement {
        requires_type: Some(R::RequiresAny(jwt::JwtRequirementOrList {
            requirements: vec![
                jwt::JwtRequirement { requires_type: Some(R::ProviderName(provider.to_owned())) },
                jwt::JwtRequirement { requires_type: Some(R::AllowMissing(())) },
            ],
        })),
    }
}

/// The jwt_authn filter for `class`'s inbound HTTP chains, if any
/// RequestAuthentication applies to it.
pub fn jwt_filter(model: &Model, class: &ProxyClass) -> Option<hcm::HttpFilter> {
    jwt_filter_of(model, jwt_rules(model, class))
}

/// The jwt_authn filter of `rules` (sorted by issuer), if any.
pub fn jwt_filter_of(model: &Model, rules: Vec<JwtRule>) -> Option<hcm::HttpFilter> {
    use jwt::jwt_requirement::RequiresType as R;
    if rules.is_empty() {
        return None;
    }
    let mut providers = std::collections::BTreeMap::new();
    let mut names = Vec::new();
    for (i, r) in rules.iter().enumerate() {
        let timeout = r.timeout.as_deref().and_then(|t| istiod_config::duration::parse(t).ok()).map_or(
            Duration { seconds: 5, nanos: 0 },
            |d| Duration { seconds: d.as_secs() as i64, nanos: d.subsec_nanos() as i32 },
        );
        let mut claims: Vec<String> =
            r.space_delimited_claims.iter().cloned().chain(["permission".into(), "scope".into()]).collect();
        claims.sort();
        claims.dedup();
        let name = format!("origins-{i}");
        providers.insert(
            name.clone(),
            jwt::JwtProvider {
                issuer: r.issuer.clone(),
                audiences: r.audiences.clone(),
                jwks_source_specifier: Some(jwks(model, r, timeout)),
                forward: r.forward_original_token,
                from_headers: r
                    .from_headers
                    .iter()
                    .map(|h| jwt::JwtHeader { name: h.name.clone(), value_prefix: h.prefix.clone() })
                    .collect(),
                from_params: r.from_params.clone(),
                from_cookies: r.from_cookies.clone(),
                forward_payload_header: r.output_payload_to_header.clone(),
                payload_in_metadata: PAYLOAD.into(),
                claim_to_headers: r
                    .output_claim_to_headers
                    .iter()
                    .map(|c| jwt::JwtClaimToHeader { header_name: c.header.clone(), claim_name: c.claim.clone() })
                    .collect(),
                normalize_payload_in_metadata: Some(jwt::jwt_provider::NormalizePayload {
                    space_delimited_claims: claims,
                }),
                ..Default::default()
            },
        );
        names.push(name);
    }
    // One provider: its token or none. Several: any one of them, and every
    // token present must be valid (istiod's requires_any over the providers
    // and a requires_all of the optional ones).
    let requires = if names.len() == 1 {
        optional(&names[0])
    } else {
        let mut any: Vec<jwt::JwtRequirement> =
            names.iter().map(|n| jwt::JwtRequirement { requires_type: Some(R::ProviderName(n.clone())) }).collect();
        any.push(jwt::JwtRequirement {
            requires_type: Some(R::RequiresAll(jwt::JwtRequirementAndList {
                requirements: names.iter().map(|n| optional(n)).collect(),
            })),
        });
        jwt::JwtRequirement { requires_type: Some(R::RequiresAny(jwt::JwtRequirementOrList { requirements: any })) }
    };
    let config = jwt::JwtAuthentication {
        providers,
        rules: vec![jwt::RequirementRule {
            r#match: Some(route::RouteMatch {
                path_specifier: Some(route::route_match::PathSpecifier::Prefix("/".into())),
                ..Default::default()
            }),
            requirement_type: Some(jwt::requirement_rule::RequirementType::Requires(requires)),
        }],
        bypass_cors_preflight: true,
        ..Default::default()
    };
    Some(super::envoy::http_filter(JWT_FILTER, &config))
}

/// The mTLS mode a service's workloads accept on `port`, as far as it can
/// be known without looking at each workload (istiod's
/// `BestEffortInferServiceMTLSMode`): unknown (`None`) when some
/// workload-level PeerAuthentication exists in the service's namespace,
/// else the namespace's or the mesh's mode. Auto mTLS sends plaintext to a
/// service known to be DISABLE.
pub fn service_mtls_mode(model: &Model, svc: &crate::model::Service, port: u16) -> Option<MtlsMode> {
    let workload_level = model.security.iter().any(|o| {
        matches!(&o.spec, IstioSpec::PeerAuthentication(pa)
            if o.meta.ns() == svc.namespace && pa.selector.as_ref().is_some_and(|s| !s.match_labels.is_empty()))
    });
    if workload_level {
        return None;
    }
    let class = ProxyClass {
        node_type: crate::node::NodeType::Sidecar,
        namespace: svc.namespace.as_str().into(),
        generator: "".into(),
        labels: Vec::new(),
        locality: "".into(),
        verified: false,
        service_account: "".into(),
        ips: Vec::new(),
        mesh_id: "".into(),
        cluster_id: "".into(),
        version: "".into(),
        metadata: Vec::new(),
    };
    Some(mtls_mode(model, &class, port))
}

/// The ports the workload's own PeerAuthentication sets a port-level mode
/// for (istiod's `PortLevelSetting`).
pub fn port_level_ports(model: &Model, class: &ProxyClass) -> Vec<u16> {
    let workload = model.security.iter().find_map(|o| match &o.spec {
        IstioSpec::PeerAuthentication(pa)
            if o.meta.ns() == &*class.namespace
                && pa
                    .selector
                    .as_ref()
                    .map(|s| &s.match_labels)
                    .filter(|m| !m.is_empty())
                    .is_some_and(|sel| crate::model::has_labels(&class.labels, sel)) =>
        {
            Some(pa)
        }
        _ => None,
    });
    let mut ports: Vec<u16> = workload
        .and_then(|pa| pa.port_level_mtls.as_ref())
        .map(|m| m.keys().filter_map(|p| u16::try_from(*p).ok()).collect())
        .unwrap_or_default();
    ports.sort_unstable();
    ports
}

/// The mTLS mode of `port` for a workload: the workload's own
/// PeerAuthentication (port-level first), else its namespace's, else the
/// mesh-wide one in the root namespace, else PERMISSIVE (istiod's rules; UNSET
/// inherits from the level above).
pub fn mtls_mode(model: &Model, class: &ProxyClass, port: u16) -> MtlsMode {
    let mut workload = None;
    let mut namespace = None;
    let mut mesh = None;
    for o in model.security.iter() {
        let IstioSpec::PeerAuthentication(pa) = &o.spec else { continue };
        let sel = pa.selector.as_ref().map(|s| &s.match_labels).filter(|m| !m.is_empty());
        match sel {
            Some(sel) if o.meta.ns() == &*class.namespace && crate::model::has_labels(&class.labels, sel) => {
                workload.get_or_insert(pa);
            }
            None if o.meta.ns() == &*class.namespace => {
                namespace.get_or_insert(pa);
            }
            None if o.meta.ns() == model.mesh.root_namespace => {
                mesh.get_or_insert(pa);
            }
            _ => {}
        }
    }
    if let Some(mode) = workload
        .and_then(|pa| pa.port_level_mtls.as_ref())
        .and_then(|ports| ports.get(&u32::from(port)))
        .map(|m| m.mode)
        .filter(|m| *m != MtlsMode::Unset)
    {
        return mode;
    }
    [workload, namespace, mesh]
        .into_iter()
        .flatten()
        .filter_map(|pa| pa.mtls.as_ref().map(|m| m.mode))
        .find(|m| *m != MtlsMode::Unset)
        .unwrap_or(MtlsMode::Permissive)
}

#[cfg(test)]
mod tests;
