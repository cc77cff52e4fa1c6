//! The mesh config's external authorizers (`extensionProviders` of kind
//! `envoyExtAuthzHttp` / `envoyExtAuthzGrpc`) as Envoy ext_authz filters,
//! after istiod's `authz/builder/extauthz.go`: the HTTP filter for both
//! kinds, the network filter for gRPC ones; the provider's service found
//! as istiod's `LookupCluster` finds it. A provider that is missing or
//! invalid is an error in istiod's words; the CUSTOM policies naming it
//! then deny what they match (see [`super::authz`]).

use istiod_proto::envoy::config::core::v3 as core;
use istiod_proto::envoy::extensions::filters::http::ext_authz::v3 as http;
use istiod_proto::envoy::extensions::filters::network::ext_authz::v3 as net;
use istiod_proto::envoy::r#type::matcher::v3 as matcher;
use istiod_proto::envoy::r#type::v3 as types;
use istiod_proto::prost_types::Duration;
use serde_json::Value;

use crate::model::Model;

/// An `envoyExtAuthzHttp` or `envoyExtAuthzGrpc` provider as filters.
#[derive(Debug, Clone)]
pub struct ExtAuthz {
    /// The HTTP filter.
    pub http: http::ExtAuthz,
    /// The network filter (gRPC providers only).
    pub tcp: Option<net::ExtAuthz>,
}

/// The ext_authz filters of provider `name`, or istiod's error for it.
pub fn provider(model: &Model, name: &str) -> Result<ExtAuthz, String> {
    let Some((kind, p)) = model.mesh.extension_providers.get(name) else {
        let known: Vec<&String> = model.mesh.extension_providers.keys().collect();
        return Err(format!("available providers are {known:?} but found {name:?}"));
    };
    let grpc = match kind.as_str() {
        "envoyExtAuthzHttp" => false,
        "envoyExtAuthzGrpc" => true,
        other => return Err(format!("provider {name:?} is of kind {other}, not an external authorizer")),
    };
    let mut errs = Vec::new();
    if let Err(e) = validate_name(name) {
        errs.push(format!("invalid provider name {name:?}: {e}"));
    }
    let port = p["port"].as_u64().unwrap_or(0);
    if !(1..=65535).contains(&port) {
        errs.push(format!("port must be in the range [1, 65535], found: {port}"));
    }
    let service = p["service"].as_str().unwrap_or("");
    let found = crate::model::telemetry::resolve_cluster(model, service, port);
    if let Err(e) = &found {
        crate::counters::provider_lookup_failure("authz");
        errs.push(e.clone());
    }
    let status = status_on_error(p["statusOnError"].as_str().unwrap_or("")).map_err(|e| errs.push(e)).ok().flatten();
    let timeout = match p["timeout"].as_str() {
        None => Duration { seconds: 600, nanos: 0 },
        Some(t) => match istiod_config::duration::parse(t) {
            Ok(d) => Duration { seconds: d.as_secs() as i64, nanos: d.subsec_nanos() as i32 },
            Err(e) => {
                errs.push(format!("invalid timeout {t:?}: {e}"));
                Duration::default()
            }
        },
    };
    let path_prefix = p["pathPrefix"].as_str().unwrap_or("");
    if !grpc {
        if !path_prefix.is_empty() && !path_prefix.starts_with('/') {
            errs.push(format!("pathPrefix must begin with `/`, found: {path_prefix:?}"));
        }
        for field in [
            "includeRequestHeadersInCheck",
            "includeHeadersInCheck",
            "headersToDownstreamOnDeny",
            "headersToDownstreamOnAllow",
            "headersToUpstreamOnAllow",
        ] {
            if strings(&p[field]).iter().any(|h| h == "*") {
                let go = go_field(field);
                errs.push(format!(
                    "a single wildcard (\"*\") is not supported, change it to either prefix or suffix match: {go}"
                ));
            }
        }
    }
    if !errs.is_empty() {
        return Err(format!("failed to parse extension provider {name:?}: {}", errs.join("; ")));
    }
    let (hostname, cluster) = found?;
    let fail_open = p["failOpen"].as_bool().unwrap_or(false);
    let body = p.get("includeRequestBodyInCheck").filter(|b| b.is_object()).map(|b| http::BufferSettings {
        max_request_bytes: b["maxRequestBytes"].as_u64().unwrap_or(0) as u32,
        allow_partial_message: b["allowPartialMessage"].as_bool().unwrap_or(false),
        pack_as_bytes: b["packAsBytes"].as_bool().unwrap_or(false),
    });
    if grpc {
        let service = core::GrpcService {
            target_specifier: Some(core::grpc_service::TargetSpecifier::EnvoyGrpc(core::grpc_service::EnvoyGrpc {
                cluster_name: cluster,
                authority: hostname,
                ..Default::default()
            })),
            timeout: Some(timeout),
            ..Default::default()
        };
        return Ok(ExtAuthz {
            http: http::ExtAuthz {
                services: Some(http::ext_authz::Services::GrpcService(service.clone())),
                status_on_error: status,
                failure_mode_allow: fail_open,
                transport_api_version: core::ApiVersion::V3 as i32,
                with_request_body: body,
                ..Default::default()
            },
            tcp: Some(net::ExtAuthz {
                stat_prefix: "tcp.".into(),
                grpc_service: Some(service),
                failure_mode_allow: fail_open,
                transport_api_version: core::ApiVersion::V3 as i32,
                ..Default::default()
            }),
        });
    }
    let mut service = http::HttpService {
        server_uri: Some(core::HttpUri {
            uri: format!("http://{hostname}"),
            http_upstream_type: Some(core::http_uri::HttpUpstreamType::Cluster(cluster)),
            timeout: Some(timeout),
        }),
        path_prefix: path_prefix.into(),
        ..Default::default()
    };
    // includeHeadersInCheck is the deprecated name, read only when the new
    // one is not set.
    let allowed = headers(&p["includeRequestHeadersInCheck"]).or_else(|| headers(&p["includeHeadersInCheck"]));
    let added: Vec<core::HeaderValue> = p["includeAdditionalHeadersInCheck"]
        .as_object()
        .map(|m| {
            let mut kv: Vec<(&String, &Value)> = m.iter().collect();
            kv.sort_by_key(|(k, _)| *k);
            kv.into_iter()
                .map(|(k, v)| core::HeaderValue {
                    key: k.clone(),
                    value: v.as_str().unwrap_or("").into(),
                    ..Default::default()
                })
                .collect()
        })
        .unwrap_or_default();
    if !added.is_empty() {
        service.authorization_request =
            Some(http::AuthorizationRequest { headers_to_add: added, ..Default::default() });
    }
    let (upstream, client_deny, client_allow) = (
        headers(&p["headersToUpstreamOnAllow"]),
        headers(&p["headersToDownstreamOnDeny"]),
        headers(&p["headersToDownstreamOnAllow"]),
    );
    if upstream.is_some() || client_deny.is_some() || client_allow.is_some() {
        service.authorization_response = Some(http::AuthorizationResponse {
            allowed_upstream_headers: upstream,
            allowed_client_headers: client_deny,
            allowed_client_headers_on_success: client_allow,
        });
    }
    Ok(ExtAuthz {
        http: http::ExtAuthz {
            services: Some(http::ext_authz::Services::HttpService(service)),
            status_on_error: status,
            failure_mode_allow: fail_open,
            transport_api_version: core::ApiVersion::V3 as i32,
            with_request_body: body,
            allowed_headers: allowed,
            ..Default::default()
        },
        tcp: None,
    })
}

/// The Go field name istiod's wildcard error names.
fn go_field(json: &str) -> String {
    let mut c = json.chars();
    c.next().map(|f| f.to_ascii_uppercase().to_string() + c.as_str()).unwrap_or_default()
}

fn strings(v: &Value) -> Vec<String> {
    v.as_array().map(|a| a.iter().filter_map(|s| s.as_str().map(str::to_owned)).collect()).unwrap_or_default()
}

/// `generateHeaders`: `*x` a suffix, `x*` a prefix, else exact; case
/// insensitive.
fn headers(v: &Value) -> Option<matcher::ListStringMatcher> {
    use matcher::string_matcher::MatchPattern;
    let hs = strings(v);
    if hs.is_empty() {
        return None;
    }
    let patterns = hs
        .into_iter()
        .map(|h| {
            let pattern = if let Some(s) = h.strip_prefix('*') {
                MatchPattern::Suffix(s.into())
            } else if let Some(p) = h.strip_suffix('*') {
                MatchPattern::Prefix(p.into())
            } else {
                MatchPattern::Exact(h)
            };
            matcher::StringMatcher { match_pattern: Some(pattern), ignore_case: true }
        })
        .collect();
    Some(matcher::ListStringMatcher { patterns })
}

/// `parseStatusOnError`: a status code Envoy knows.
fn status_on_error(s: &str) -> Result<Option<types::HttpStatus>, String> {
    if s.is_empty() {
        return Ok(None);
    }
    let code: i32 = s.parse().map_err(|e| format!("invalid statusOnError {s:?}: {e}"))?;
    if code == 0 || types::StatusCode::try_from(code).is_err() {
        return Err(format!("unsupported statusOnError {s}"));
    }
    Ok(Some(types::HttpStatus { code }))
}

/// `validateProviderName`: a DNS-1123 label (the name is part of metadata
/// keys and policy names).
fn validate_name(name: &str) -> Result<(), String> {
    if name.len() > 63 {
        return Err(format!("provider name too long (max 63 characters): {}", name.len()));
    }
    for (i, c) in name.chars().enumerate() {
        if c.is_ascii_lowercase() || c.is_ascii_digit() || c == '-' {
            continue;
        }
        if c.is_ascii_uppercase() {
            return Err(format!("uppercase letters not allowed (use lowercase): character {c:?} at position {i}"));
        }
        return Err(format!(
            "invalid character {c:?} at position {i} (only lowercase letters, digits, and hyphens allowed)"
        ));
    }
    if name.starts_with('-') || name.ends_with('-') {
        return Err("provider name cannot start or end with hyphen".into());
    }
    Ok(())
}
