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
use istiod_kubewatch::istio::IstioSpec;
use istiod_kubewatch::istio::security::JwtRule;
use istiod_proto::envoy::config::core::v3 as core;
use istiod_proto::envoy::config::route::v3 as route;
use istiod_proto::envoy::extensions::filters::http::jwt_authn::v3 as jwt;
use istiod_proto::envoy::extensions::filters::network::http_connection_manager::v3 as hcm;
use istiod_proto::prost_types::Duration;

use crate::model::Model;

/// The filter's name; RBAC's metadata matchers name it too.
pub const JWT_FILTER: &str = "envoy.filters.http.jwt_authn";
/// Where the filter puts a verified token's payload in its metadata.
pub const PAYLOAD: &str = "payload";

/// Who fetches a `jwksUri`'s key set (`PILOT_JWT_ENABLE_REMOTE_JWKS`,
/// pkg/jwt/jwt.go: `false`/`istiod` (the default), `true`/`hybrid`,
/// `envoy`).
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub enum JwksFetch {
    /// istiod fetches and inlines the key set.
    #[default]
    Istiod,
    /// Envoy fetches when the URI's host is a mesh service, else istiod.
    Hybrid,
    /// Envoy fetches, through `outbound|<port>||<host>`.
    Envoy,
}

impl JwksFetch {
    /// Parses the variable's value as istiod does (anything else: istiod).
    pub fn parse(v: &str) -> JwksFetch {
        match v {
            "hybrid" | "true" => JwksFetch::Hybrid,
            "envoy" => JwksFetch::Envoy,
            _ => JwksFetch::Istiod,
        }
    }
}

/// A key set no token verifies against: an RSA public key whose private key
/// nobody has. istiod serves the same kind of key set (`PublicOnlyJwks`)
/// when it cannot fetch one: every token is rejected, requests without one
/// still pass.
pub const PUBLIC_ONLY_JWKS: &str = r#"{"keys":[{"kty":"RSA","e":"AQAB","n":"4qysDcu5BnC389pcO6VzZCPfEAwaNynIZ1q4V1IjCQtxqEsgq30ayIr5dHKiBexextz4orgm-beGvFUqw06AyOvmiZwz3cU2sNBU3vvMgtq4HRjqwWXoOCQLnDcMoyfSwZ0RMRS079qo0FcXkSsnRLlN5heHgKpvesQBEz0lFoMHw6oup2XqCfSQIvw4-f_KPdfD0zbuwLqMPE4oWhLzvO2LUkd0m-ZVD40O8xN2TyqS1LOfFxBU6H_YxS0ULS2spbGgiugRG7ObVasTyBgenAswhO4AdyCwVLCIDiALZ7xOkbZJdanIKd3SANMGv875FI3ig9S4ndnnDXq__sIPCw"}]}"#;

/// The JWT rules in force for `class`, sorted by issuer.
pub fn jwt_rules(model: &Model, class: &ProxyClass) -> Vec<JwtRule> {
    let mut rules = Vec::new();
    for o in model.security.iter() {
        let IstioSpec::RequestAuthentication(ra) = &o.spec else { continue };
        let selector = ra.selector.as_ref().map(|s| &s.match_labels);
        let targeted = ra.target_ref.is_some() || !ra.target_refs.is_empty();
        let selected = super::authz::policy_applies(model, class, o.meta.ns(), selector, targeted);
        if selected {
            rules.extend(ra.jwt_rules.iter().cloned());
        }
    }
    rules.sort_by(|a, b| a.issuer.cmp(&b.issuer));
    rules
}

/// Where a provider gets its keys: inline when the rule carries them;
/// `remote_jwks` when Envoy fetches; else istiod's fetch, which istiod-rs
/// does not do yet (the key set no token verifies, as istiod when a fetch
/// fails).
fn jwks(model: &Model, rule: &JwtRule, timeout: Duration) -> jwt::jwt_provider::JwksSourceSpecifier {
    use jwt::jwt_provider::JwksSourceSpecifier as S;
    let inline = |s: &str| {
        S::LocalJwks(core::DataSource {
            specifier: Some(core::data_source::Specifier::InlineString(s.to_owned())),
            ..Default::default()
        })
    };
    let remote = |cluster: String| {
        S::RemoteJwks(jwt::RemoteJwks {
            http_uri: Some(core::HttpUri {
                uri: rule.jwks_uri.clone(),
                http_upstream_type: Some(core::http_uri::HttpUpstreamType::Cluster(cluster)),
                timeout: Some(timeout),
            }),
            cache_duration: Some(Duration { seconds: 300, nanos: 0 }),
        })
    };
    if rule.jwks_uri.is_empty() || model.mesh.jwks_fetch == JwksFetch::Istiod {
        if !rule.jwks.is_empty() {
            return inline(&rule.jwks);
        }
        return inline(PUBLIC_ONLY_JWKS);
    }
    let Some((host, port)) = jwks_host(&rule.jwks_uri) else { return inline(PUBLIC_ONLY_JWKS) };
    let known = model.services.get(host.as_str()).is_some_and(|s| s.ports.iter().any(|p| p.port == port));
    match (model.mesh.jwks_fetch, known) {
        (JwksFetch::Hybrid, false) if !rule.jwks.is_empty() => inline(&rule.jwks),
        (JwksFetch::Hybrid, false) => inline(PUBLIC_ONLY_JWKS),
        _ => remote(format!("outbound|{port}||{host}")),
    }
}

/// Warns, once per model (on the control thread, not per proxy class),
/// about each JWT rule whose keys istiod would fetch and istiod-rs does
/// not: its tokens are all rejected.
pub fn warn_unfetched(model: &Model) {
    for o in model.security.iter() {
        let IstioSpec::RequestAuthentication(ra) = &o.spec else { continue };
        for rule in ra.jwt_rules.iter().filter(|r| r.jwks.is_empty() && !r.jwks_uri.is_empty()) {
            let served = jwks(model, rule, Duration::default());
            let unfetched = matches!(&served, jwt::jwt_provider::JwksSourceSpecifier::LocalJwks(d)
                if matches!(&d.specifier, Some(core::data_source::Specifier::InlineString(k)) if k == PUBLIC_ONLY_JWKS));
            if unfetched {
                tracing::warn!(target: "authn", policy = %format!("{}/{}", o.meta.ns(), o.meta.name), issuer = %rule.issuer, uri = %rule.jwks_uri,
                    "istiod-rs does not fetch JWKS itself yet: tokens of this issuer are rejected; set PILOT_JWT_ENABLE_REMOTE_JWKS=envoy (or hybrid, for a mesh host) or put the keys in jwks");
            }
        }
    }
}

/// The host and port of an http(s) URI (istiod's `ParseJwksURI`).
fn jwks_host(uri: &str) -> Option<(String, u16)> {
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
    use jwt::jwt_requirement::RequiresType as R;
    let rules = jwt_rules(model, class);
    if rules.is_empty() {
        return None;
    }
    let mut providers = std::collections::BTreeMap::new();
    let mut names = Vec::new();
    for (i, r) in rules.iter().enumerate() {
        let timeout = r.timeout.as_deref().and_then(|t| istiod_kubewatch::duration::parse(t).ok()).map_or(
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

#[cfg(test)]
mod tests;
