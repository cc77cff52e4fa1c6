//! The Kubernetes Gateway API kinds istiod reads (`gateway.networking.k8s.io`):
//! GatewayClass, Gateway, HTTPRoute and GRPCRoute (v1), ReferenceGrant
//! (v1beta1 and v1), TCPRoute and TLSRoute (v1, v1alpha2), BackendTLSPolicy
//! and ListenerSet (v1). Typed as the API server serves them; the model turns
//! them into Istio Gateways and VirtualServices as istiod does
//! ([`crate::gateway_convert`]). Unknown fields are ignored: the API
//! evolves, and the API server has already validated what it stores.

use std::collections::BTreeMap;

use serde::Deserialize;

use crate::meta::Meta;

/// The API group.
pub const GROUP: &str = "gateway.networking.k8s.io";

/// A Gateway API object.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct GatewayApiObject {
    /// Metadata.
    pub meta: Meta,
    /// Spec.
    pub spec: GatewayApiSpec,
    /// As written.
    pub raw: crate::meta::Raw,
}

/// The kinds read.
#[derive(Debug, Clone, PartialEq, Eq)]
#[allow(clippy::large_enum_variant, reason = "built once per document, never moved around in bulk")]
pub enum GatewayApiSpec {
    /// GatewayClass.
    GatewayClass(GatewayClassSpec),
    /// Gateway.
    Gateway(GatewaySpec),
    /// HTTPRoute.
    HttpRoute(HttpRouteSpec),
    /// GRPCRoute.
    GrpcRoute(GrpcRouteSpec),
    /// ReferenceGrant.
    ReferenceGrant(ReferenceGrantSpec),
    /// TCPRoute (v1, or v1alpha2).
    TcpRoute(L4RouteSpec),
    /// TLSRoute (v1, or v1alpha2).
    TlsRoute(L4RouteSpec),
    /// BackendTLSPolicy (v1).
    BackendTlsPolicy(BackendTlsPolicySpec),
    /// ListenerSet (v1): listeners added to a Gateway that allows them.
    ListenerSet(ListenerSetSpec),
}

impl GatewayApiObject {
    /// The kind's name (`HTTPRoute`, ...).
    pub fn kind(&self) -> &'static str {
        match &self.spec {
            GatewayApiSpec::GatewayClass(_) => "GatewayClass",
            GatewayApiSpec::Gateway(_) => "Gateway",
            GatewayApiSpec::HttpRoute(_) => "HTTPRoute",
            GatewayApiSpec::GrpcRoute(_) => "GRPCRoute",
            GatewayApiSpec::ReferenceGrant(_) => "ReferenceGrant",
            GatewayApiSpec::TcpRoute(_) => "TCPRoute",
            GatewayApiSpec::TlsRoute(_) => "TLSRoute",
            GatewayApiSpec::BackendTlsPolicy(_) => "BackendTLSPolicy",
            GatewayApiSpec::ListenerSet(_) => "ListenerSet",
        }
    }
}

/// Whether `api_version` is the Gateway API's.
pub fn is_gateway_api(api_version: &str) -> bool {
    api_version.split_once('/').is_some_and(|(g, _)| g == GROUP)
}

#[derive(Deserialize)]
#[serde(default)]
struct Doc<S> {
    kind: String,
    metadata: Meta,
    spec: S,
}

impl<S: Default> Default for Doc<S> {
    fn default() -> Self {
        Doc { kind: String::new(), metadata: Meta::default(), spec: S::default() }
    }
}

/// Reads a Gateway API object of `kind` from its JSON (a YAML document
/// converts losslessly).
pub fn parse(kind: &str, value: serde_json::Value) -> Result<GatewayApiObject, String> {
    fn read<S: serde::de::DeserializeOwned + Default>(v: serde_json::Value) -> Result<(Meta, S), String> {
        let d: Doc<S> = serde_json::from_value(v).map_err(|e| e.to_string())?;
        let _ = d.kind;
        Ok((d.metadata, d.spec))
    }
    let raw = crate::meta::Raw::of(&value);
    let (meta, spec) = match kind {
        "GatewayClass" => read(value).map(|(m, s)| (m, GatewayApiSpec::GatewayClass(s)))?,
        "Gateway" => {
            let uid = value["metadata"]["uid"].as_str().unwrap_or_default().to_owned();
            let status_addresses: Vec<GatewayAddress> =
                serde_json::from_value(value["status"]["addresses"].clone()).unwrap_or_default();
            read(value).map(|(m, s)| (m, GatewayApiSpec::Gateway(GatewaySpec { uid, status_addresses, ..s })))?
        }
        "HTTPRoute" => read(value).map(|(m, s)| (m, GatewayApiSpec::HttpRoute(s)))?,
        "GRPCRoute" => read(value).map(|(m, s)| (m, GatewayApiSpec::GrpcRoute(s)))?,
        "ReferenceGrant" => read(value).map(|(m, s)| (m, GatewayApiSpec::ReferenceGrant(s)))?,
        "TCPRoute" => read(value).map(|(m, s)| (m, GatewayApiSpec::TcpRoute(s)))?,
        "TLSRoute" => read(value).map(|(m, s)| (m, GatewayApiSpec::TlsRoute(s)))?,
        "BackendTLSPolicy" => read(value).map(|(m, s)| (m, GatewayApiSpec::BackendTlsPolicy(s)))?,
        "ListenerSet" => read(value).map(|(m, s)| (m, GatewayApiSpec::ListenerSet(s)))?,
        other => return Err(format!("{other:?} of {GROUP} is not read here")),
    };
    if meta.name.is_empty() {
        return Err("metadata.name is required".into());
    }
    Ok(GatewayApiObject { meta, spec, raw })
}

/// Whether istiod-rs reads `kind` of the Gateway API.
pub fn reads(kind: &str) -> bool {
    matches!(
        kind,
        "GatewayClass"
            | "Gateway"
            | "HTTPRoute"
            | "GRPCRoute"
            | "ReferenceGrant"
            | "TCPRoute"
            | "TLSRoute"
            | "BackendTLSPolicy"
            | "ListenerSet"
    )
}

/// `GatewayClassSpec`.
#[derive(Debug, Clone, Default, PartialEq, Eq, Deserialize)]
#[serde(default, rename_all = "camelCase")]
pub struct GatewayClassSpec {
    /// The controller handling the class.
    pub controller_name: String,
}

/// `GatewaySpec`.
#[derive(Debug, Clone, Default, PartialEq, Eq, Deserialize)]
#[serde(default, rename_all = "camelCase")]
pub struct GatewaySpec {
    /// The class.
    pub gateway_class_name: String,
    /// Listeners.
    pub listeners: Vec<Listener>,
    /// Addresses.
    pub addresses: Vec<GatewayAddress>,
    /// Which namespaces' ListenerSets may add listeners (none unless
    /// given).
    pub allowed_listeners: Option<AllowedListeners>,
    /// `tls`: client certificate validation (`frontend`), as written.
    pub tls: Option<serde_json::Value>,
    /// `infrastructure`: labels, annotations and parameters for what the
    /// deployment controller makes.
    pub infrastructure: Option<GatewayInfrastructure>,
    /// The Gateway's `metadata.uid` (what its deployment's owner
    /// references name), copied here by [`parse`].
    #[serde(skip)]
    pub uid: String,
    /// `status.addresses`, as the controller that deployed the Gateway
    /// wrote them (a waypoint is usable once it has one), copied here by
    /// [`parse`].
    #[serde(skip)]
    pub status_addresses: Vec<GatewayAddress>,
}

/// `AllowedListeners`.
#[derive(Debug, Clone, Default, PartialEq, Eq, Deserialize)]
#[serde(default, rename_all = "camelCase")]
pub struct AllowedListeners {
    /// `from`: `None` (default), `Same`, `All`, `Selector`.
    pub namespaces: Option<RouteNamespaces>,
}

/// `ListenerSetSpec`.
#[derive(Debug, Clone, Default, PartialEq, Eq, Deserialize)]
#[serde(default, rename_all = "camelCase")]
pub struct ListenerSetSpec {
    /// The Gateway the listeners join.
    pub parent_ref: ParentReference,
    /// The listeners (`ListenerEntry`: a [`Listener`] whose port may be
    /// left 0, meaning 80 for HTTP and 443 for HTTPS).
    pub listeners: Vec<Listener>,
}

/// `GatewayInfrastructure`.
#[derive(Debug, Clone, Default, PartialEq, Eq, Deserialize)]
#[serde(default, rename_all = "camelCase")]
pub struct GatewayInfrastructure {
    /// Labels for the generated objects (`None`: not given).
    pub labels: Option<BTreeMap<String, String>>,
    /// Annotations for the generated objects (`None`: not given).
    pub annotations: Option<BTreeMap<String, String>>,
    /// A ConfigMap of overlays (`group`, `kind`, `name`).
    pub parameters_ref: Option<ParametersRef>,
}

/// `LocalParametersReference`.
#[derive(Debug, Clone, Default, PartialEq, Eq, Deserialize)]
#[serde(default, rename_all = "camelCase")]
pub struct ParametersRef {
    /// Group ("" for core).
    pub group: String,
    /// Kind.
    pub kind: String,
    /// Name.
    pub name: String,
}

/// `GatewaySpecAddress`.
#[derive(Debug, Clone, Default, PartialEq, Eq, Deserialize)]
#[serde(default, rename_all = "camelCase")]
pub struct GatewayAddress {
    /// `IPAddress` (default), `Hostname`, or another.
    #[serde(rename = "type")]
    pub type_: Option<String>,
    /// The address.
    pub value: String,
}

/// `Listener`.
#[derive(Debug, Clone, Default, PartialEq, Eq, Deserialize)]
#[serde(default, rename_all = "camelCase")]
pub struct Listener {
    /// Name (unique in the Gateway).
    pub name: String,
    /// Hostname (none: every host).
    pub hostname: Option<String>,
    /// Port.
    pub port: u32,
    /// `HTTP`, `HTTPS`, `TLS`, `TCP`, ...
    pub protocol: String,
    /// TLS.
    pub tls: Option<ListenerTls>,
    /// Which routes may attach.
    pub allowed_routes: Option<AllowedRoutes>,
}

/// `GatewayTLSConfig`.
#[derive(Debug, Clone, Default, PartialEq, Eq, Deserialize)]
#[serde(default, rename_all = "camelCase")]
pub struct ListenerTls {
    /// `Terminate` (default) or `Passthrough`.
    pub mode: Option<String>,
    /// Certificates (Secrets).
    pub certificate_refs: Vec<ObjectReference>,
    /// Implementation options (`gateway.istio.io/tls-terminate-mode`, ...).
    pub options: BTreeMap<String, String>,
}

/// A reference to an object (`SecretObjectReference`, `BackendObjectReference`, ...).
#[derive(Debug, Clone, Default, PartialEq, Eq, Deserialize)]
#[serde(default, rename_all = "camelCase")]
pub struct ObjectReference {
    /// API group ("" is core).
    pub group: Option<String>,
    /// Kind.
    pub kind: Option<String>,
    /// Name.
    pub name: String,
    /// Namespace (none: the referrer's).
    pub namespace: Option<String>,
    /// Port (backends).
    pub port: Option<u32>,
    /// Weight (backends; default 1).
    pub weight: Option<i64>,
    /// A backend's own filters (`HTTPBackendRef`, `GRPCBackendRef`).
    pub filters: Vec<HttpRouteFilter>,
}

/// `AllowedRoutes`.
#[derive(Debug, Clone, Default, PartialEq, Eq, Deserialize)]
#[serde(default, rename_all = "camelCase")]
pub struct AllowedRoutes {
    /// Namespaces routes may come from.
    pub namespaces: Option<RouteNamespaces>,
    /// Kinds of routes.
    pub kinds: Vec<RouteGroupKind>,
}

/// `RouteNamespaces`.
#[derive(Debug, Clone, Default, PartialEq, Eq, Deserialize)]
#[serde(default, rename_all = "camelCase")]
pub struct RouteNamespaces {
    /// `Same` (default), `All`, `Selector`.
    pub from: Option<String>,
    /// For `Selector`.
    pub selector: Option<LabelSelector>,
}

/// A label selector (`matchLabels`, `matchExpressions`).
#[derive(Debug, Clone, Default, PartialEq, Eq, Deserialize)]
#[serde(default, rename_all = "camelCase")]
pub struct LabelSelector {
    /// Labels to match.
    pub match_labels: BTreeMap<String, String>,
    /// Expressions to match.
    pub match_expressions: Vec<LabelExpression>,
}

/// A selector requirement.
#[derive(Debug, Clone, Default, PartialEq, Eq, Deserialize)]
#[serde(default, rename_all = "camelCase")]
pub struct LabelExpression {
    /// Label key.
    pub key: String,
    /// `In`, `NotIn`, `Exists`, `DoesNotExist`.
    pub operator: String,
    /// Values.
    pub values: Vec<String>,
}

impl LabelSelector {
    /// Whether `labels` match (`metav1.LabelSelectorAsSelector`); an
    /// unknown operator matches nothing.
    pub fn matches(&self, labels: &BTreeMap<String, String>) -> bool {
        self.match_labels.iter().all(|(k, v)| labels.get(k) == Some(v))
            && self.match_expressions.iter().all(|e| match e.operator.as_str() {
                "In" => labels.get(&e.key).is_some_and(|v| e.values.contains(v)),
                "NotIn" => labels.get(&e.key).is_none_or(|v| !e.values.contains(v)),
                "Exists" => labels.contains_key(&e.key),
                "DoesNotExist" => !labels.contains_key(&e.key),
                _ => false,
            })
    }
}

/// `RouteGroupKind`.
#[derive(Debug, Clone, Default, PartialEq, Eq, Deserialize)]
#[serde(default, rename_all = "camelCase")]
pub struct RouteGroupKind {
    /// Group.
    pub group: Option<String>,
    /// Kind.
    pub kind: String,
}

/// `ParentReference`.
#[derive(Debug, Clone, Default, PartialEq, Eq, Deserialize)]
#[serde(default, rename_all = "camelCase")]
pub struct ParentReference {
    /// Group (default the Gateway API's).
    pub group: Option<String>,
    /// Kind (default Gateway).
    pub kind: Option<String>,
    /// Namespace (default the route's).
    pub namespace: Option<String>,
    /// Name.
    pub name: String,
    /// A listener's name.
    pub section_name: Option<String>,
    /// A listener's port.
    pub port: Option<u32>,
}

/// `HTTPRouteSpec`.
#[derive(Debug, Clone, Default, PartialEq, Eq, Deserialize)]
#[serde(default, rename_all = "camelCase")]
pub struct HttpRouteSpec {
    /// Parents.
    pub parent_refs: Vec<ParentReference>,
    /// Hostnames (none: every host).
    pub hostnames: Vec<String>,
    /// Rules.
    pub rules: Vec<HttpRouteRule>,
}

/// `HTTPRouteRule`.
#[derive(Debug, Clone, Default, PartialEq, Eq, Deserialize)]
#[serde(default, rename_all = "camelCase")]
pub struct HttpRouteRule {
    /// Name.
    pub name: Option<String>,
    /// Matches (none: every request).
    pub matches: Vec<HttpRouteMatch>,
    /// Filters.
    pub filters: Vec<HttpRouteFilter>,
    /// Backends.
    pub backend_refs: Vec<ObjectReference>,
    /// Timeouts.
    pub timeouts: Option<HttpRouteTimeouts>,
}

/// `HTTPRouteMatch`.
#[derive(Debug, Clone, Default, PartialEq, Eq, Deserialize)]
#[serde(default, rename_all = "camelCase")]
pub struct HttpRouteMatch {
    /// Path.
    pub path: Option<ValueMatch>,
    /// Headers.
    pub headers: Vec<NamedMatch>,
    /// Query parameters.
    pub query_params: Vec<NamedMatch>,
    /// Method.
    pub method: Option<String>,
}

/// A path match (`type`: `Exact`, `PathPrefix`, `RegularExpression`).
#[derive(Debug, Clone, Default, PartialEq, Eq, Deserialize)]
#[serde(default, rename_all = "camelCase")]
pub struct ValueMatch {
    /// Type.
    #[serde(rename = "type")]
    pub type_: Option<String>,
    /// Value.
    pub value: Option<String>,
}

/// A header or query parameter match.
#[derive(Debug, Clone, Default, PartialEq, Eq, Deserialize)]
#[serde(default, rename_all = "camelCase")]
pub struct NamedMatch {
    /// `Exact` (default) or `RegularExpression`.
    #[serde(rename = "type")]
    pub type_: Option<String>,
    /// Name.
    pub name: String,
    /// Value.
    pub value: String,
}

/// `HTTPRouteFilter`.
#[derive(Debug, Clone, Default, PartialEq, Eq, Deserialize)]
#[serde(default, rename_all = "camelCase")]
pub struct HttpRouteFilter {
    /// Type.
    #[serde(rename = "type")]
    pub type_: String,
    /// `RequestHeaderModifier`.
    pub request_header_modifier: Option<HeaderModifier>,
    /// `ResponseHeaderModifier`.
    pub response_header_modifier: Option<HeaderModifier>,
    /// `RequestRedirect`.
    pub request_redirect: Option<RequestRedirect>,
    /// `URLRewrite`.
    #[serde(rename = "urlRewrite")]
    pub url_rewrite: Option<UrlRewrite>,
    /// `RequestMirror`.
    pub request_mirror: Option<RequestMirror>,
    /// `CORS`.
    pub cors: Option<CorsFilter>,
}

/// `HTTPCORSFilter`.
#[derive(Debug, Clone, Default, PartialEq, Eq, Deserialize)]
#[serde(default, rename_all = "camelCase")]
pub struct CorsFilter {
    /// Origins (`*` wildcards).
    pub allow_origins: Vec<String>,
    /// Credentials.
    pub allow_credentials: Option<bool>,
    /// Methods.
    pub allow_methods: Vec<String>,
    /// Request headers.
    pub allow_headers: Vec<String>,
    /// Response headers exposed.
    pub expose_headers: Vec<String>,
    /// Seconds.
    pub max_age: Option<i64>,
}

/// `HTTPHeaderFilter`.
#[derive(Debug, Clone, Default, PartialEq, Eq, Deserialize)]
#[serde(default, rename_all = "camelCase")]
pub struct HeaderModifier {
    /// Set.
    pub set: Vec<HeaderValue>,
    /// Add.
    pub add: Vec<HeaderValue>,
    /// Remove.
    pub remove: Vec<String>,
}

/// A header name and value.
#[derive(Debug, Clone, Default, PartialEq, Eq, Deserialize)]
#[serde(default, rename_all = "camelCase")]
pub struct HeaderValue {
    /// Name.
    pub name: String,
    /// Value.
    pub value: String,
}

/// `HTTPRequestRedirectFilter`.
#[derive(Debug, Clone, Default, PartialEq, Eq, Deserialize)]
#[serde(default, rename_all = "camelCase")]
pub struct RequestRedirect {
    /// Scheme.
    pub scheme: Option<String>,
    /// Hostname.
    pub hostname: Option<String>,
    /// Path.
    pub path: Option<PathModifier>,
    /// Port.
    pub port: Option<u32>,
    /// Status code (302 default).
    pub status_code: Option<u32>,
}

/// `HTTPURLRewriteFilter`.
#[derive(Debug, Clone, Default, PartialEq, Eq, Deserialize)]
#[serde(default, rename_all = "camelCase")]
pub struct UrlRewrite {
    /// Hostname.
    pub hostname: Option<String>,
    /// Path.
    pub path: Option<PathModifier>,
}

/// `HTTPPathModifier`.
#[derive(Debug, Clone, Default, PartialEq, Eq, Deserialize)]
#[serde(default, rename_all = "camelCase")]
pub struct PathModifier {
    /// `ReplaceFullPath` or `ReplacePrefixMatch`.
    #[serde(rename = "type")]
    pub type_: String,
    /// For `ReplaceFullPath`.
    pub replace_full_path: Option<String>,
    /// For `ReplacePrefixMatch`.
    pub replace_prefix_match: Option<String>,
}

/// `HTTPRequestMirrorFilter`.
#[derive(Debug, Clone, Default, PartialEq, Eq, Deserialize)]
#[serde(default, rename_all = "camelCase")]
pub struct RequestMirror {
    /// The backend.
    pub backend_ref: ObjectReference,
    /// Percent.
    pub percent: Option<u32>,
    /// Fraction.
    pub fraction: Option<Fraction>,
}

/// `Fraction`.
#[derive(Debug, Clone, Default, PartialEq, Eq, Deserialize)]
#[serde(default, rename_all = "camelCase")]
pub struct Fraction {
    /// Numerator.
    pub numerator: u32,
    /// Denominator (100 default).
    pub denominator: Option<u32>,
}

/// `HTTPRouteTimeouts`.
#[derive(Debug, Clone, Default, PartialEq, Eq, Deserialize)]
#[serde(default, rename_all = "camelCase")]
pub struct HttpRouteTimeouts {
    /// Request.
    pub request: Option<String>,
    /// Backend request.
    pub backend_request: Option<String>,
}

/// `GRPCRouteSpec`.
#[derive(Debug, Clone, Default, PartialEq, Eq, Deserialize)]
#[serde(default, rename_all = "camelCase")]
pub struct GrpcRouteSpec {
    /// Parents.
    pub parent_refs: Vec<ParentReference>,
    /// Hostnames.
    pub hostnames: Vec<String>,
    /// Rules.
    pub rules: Vec<GrpcRouteRule>,
}

/// `GRPCRouteRule`.
#[derive(Debug, Clone, Default, PartialEq, Eq, Deserialize)]
#[serde(default, rename_all = "camelCase")]
pub struct GrpcRouteRule {
    /// Name.
    pub name: Option<String>,
    /// Matches.
    pub matches: Vec<GrpcRouteMatch>,
    /// Filters (header modifiers, mirror).
    pub filters: Vec<HttpRouteFilter>,
    /// Backends.
    pub backend_refs: Vec<ObjectReference>,
}

/// `GRPCRouteMatch`.
#[derive(Debug, Clone, Default, PartialEq, Eq, Deserialize)]
#[serde(default, rename_all = "camelCase")]
pub struct GrpcRouteMatch {
    /// Method.
    pub method: Option<GrpcMethodMatch>,
    /// Headers.
    pub headers: Vec<NamedMatch>,
}

/// `GRPCMethodMatch`.
#[derive(Debug, Clone, Default, PartialEq, Eq, Deserialize)]
#[serde(default, rename_all = "camelCase")]
pub struct GrpcMethodMatch {
    /// `Exact` (default) or `RegularExpression`.
    #[serde(rename = "type")]
    pub type_: Option<String>,
    /// Service.
    pub service: Option<String>,
    /// Method.
    pub method: Option<String>,
}

/// `TCPRouteSpec` and `TLSRouteSpec` (TCP routes have no hostnames).
#[derive(Debug, Clone, Default, PartialEq, Eq, Deserialize)]
#[serde(default, rename_all = "camelCase")]
pub struct L4RouteSpec {
    /// Parents.
    pub parent_refs: Vec<ParentReference>,
    /// SNI hostnames (TLSRoute).
    pub hostnames: Vec<String>,
    /// Rules.
    pub rules: Vec<L4RouteRule>,
}

/// `TCPRouteRule`, `TLSRouteRule`.
#[derive(Debug, Clone, Default, PartialEq, Eq, Deserialize)]
#[serde(default, rename_all = "camelCase")]
pub struct L4RouteRule {
    /// Name.
    pub name: Option<String>,
    /// Backends.
    pub backend_refs: Vec<ObjectReference>,
}

/// `ReferenceGrantSpec`.
#[derive(Debug, Clone, Default, PartialEq, Eq, Deserialize)]
#[serde(default, rename_all = "camelCase")]
pub struct ReferenceGrantSpec {
    /// Who may refer.
    pub from: Vec<GrantFrom>,
    /// To what (in the grant's namespace).
    pub to: Vec<GrantTo>,
}

/// `ReferenceGrantFrom`.
#[derive(Debug, Clone, Default, PartialEq, Eq, Deserialize)]
#[serde(default, rename_all = "camelCase")]
pub struct GrantFrom {
    /// Group.
    pub group: String,
    /// Kind.
    pub kind: String,
    /// Namespace.
    pub namespace: String,
}

/// `ReferenceGrantTo`.
#[derive(Debug, Clone, Default, PartialEq, Eq, Deserialize)]
#[serde(default, rename_all = "camelCase")]
pub struct GrantTo {
    /// Group ("" core).
    pub group: String,
    /// Kind.
    pub kind: String,
    /// Name (none: all).
    pub name: Option<String>,
}

/// `BackendTLSPolicySpec`: how gateways and proxies originate TLS to the
/// Services (or ServiceEntries) it targets.
#[derive(Debug, Clone, Default, PartialEq, Eq, Deserialize)]
#[serde(default, rename_all = "camelCase")]
pub struct BackendTlsPolicySpec {
    /// The backends, in the policy's namespace; `sectionName` a port name.
    pub target_refs: Vec<PolicyTargetReference>,
    /// How the backend's certificate is verified.
    pub validation: BackendTlsValidation,
    /// Implementation-specific TLS options (istiod reads none).
    pub options: BTreeMap<String, String>,
}

/// `LocalPolicyTargetReferenceWithSectionName`.
#[derive(Debug, Clone, Default, PartialEq, Eq, Deserialize)]
#[serde(default, rename_all = "camelCase")]
pub struct PolicyTargetReference {
    /// Group (`""`: core).
    pub group: String,
    /// Kind.
    pub kind: String,
    /// Name.
    pub name: String,
    /// A port name of the target.
    pub section_name: Option<String>,
}

/// `BackendTLSPolicyValidation`.
#[derive(Debug, Clone, Default, PartialEq, Eq, Deserialize)]
#[serde(default, rename_all = "camelCase")]
pub struct BackendTlsValidation {
    /// CA certificates (ConfigMaps, for istiod).
    pub ca_certificate_refs: Vec<LocalObjectReference>,
    /// `System`: the platform's trusted roots.
    pub well_known_ca_certificates: Option<String>,
    /// The server name sent and expected.
    pub hostname: String,
    /// Names the certificate must carry instead of `hostname`.
    pub subject_alt_names: Vec<SubjectAltName>,
}

/// `LocalObjectReference`.
#[derive(Debug, Clone, Default, PartialEq, Eq, Deserialize)]
#[serde(default, rename_all = "camelCase")]
pub struct LocalObjectReference {
    /// Group (`""`: core).
    pub group: String,
    /// Kind.
    pub kind: String,
    /// Name.
    pub name: String,
}

/// `SubjectAltName`: a DNS name or a URI.
#[derive(Debug, Clone, Default, PartialEq, Eq, Deserialize)]
#[serde(default, rename_all = "camelCase")]
pub struct SubjectAltName {
    /// `Hostname` or `URI`.
    #[serde(rename = "type")]
    pub kind: String,
    /// For `Hostname`.
    pub hostname: String,
    /// For `URI`.
    pub uri: String,
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn an_http_route_reads_with_its_filters_and_backends() {
        let yaml = "apiVersion: gateway.networking.k8s.io/v1\nkind: HTTPRoute\nmetadata: {name: r, namespace: ns}\n\
            spec:\n  parentRefs: [{name: gw, sectionName: http}]\n  hostnames: [a.example.com]\n  rules:\n  \
            - matches: [{path: {type: PathPrefix, value: /api}, headers: [{name: x, value: y}], method: GET}]\n    \
            filters: [{type: URLRewrite, urlRewrite: {path: {type: ReplacePrefixMatch, replacePrefixMatch: /v2}}}]\n    \
            backendRefs: [{name: svc, port: 8080, weight: 3}]\n    unknownField: kept-out\n";
        let v: serde_json::Value = serde_yaml_ng::from_str(yaml).unwrap();
        let o = parse("HTTPRoute", v).unwrap();
        let GatewayApiSpec::HttpRoute(r) = &o.spec else { panic!() };
        assert_eq!(r.parent_refs[0].section_name.as_deref(), Some("http"));
        let rule = &r.rules[0];
        assert_eq!(rule.matches[0].path.as_ref().unwrap().value.as_deref(), Some("/api"));
        assert_eq!(rule.matches[0].method.as_deref(), Some("GET"));
        let rw = rule.filters[0].url_rewrite.as_ref().unwrap();
        assert_eq!(rw.path.as_ref().unwrap().replace_prefix_match.as_deref(), Some("/v2"));
        assert_eq!((rule.backend_refs[0].port, rule.backend_refs[0].weight), (Some(8080), Some(3)));
        assert!(parse("HTTPRoute", serde_json::json!({"kind": "HTTPRoute"})).is_err(), "a name is required");
    }
}
