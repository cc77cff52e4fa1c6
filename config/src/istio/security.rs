//! `security.istio.io` specs: PeerAuthentication, AuthorizationPolicy and
//! RequestAuthentication, with the field names of Istio's API (the JSON
//! names of `istio.security.v1beta1`, which `v1` shares). As in
//! [`super::networking`], unknown fields are rejected and absent scalars
//! read as their zero values.

use std::collections::BTreeMap;

use serde::Deserialize;

use super::{PolicyTargetReference, WorkloadSelector};

// ------------------------------------------------------------------ PeerAuthentication

/// A PeerAuthentication: which mutual TLS a workload accepts.
#[derive(Debug, Clone, Default, PartialEq, Eq, Deserialize)]
#[serde(default, deny_unknown_fields, rename_all = "camelCase")]
pub struct PeerAuthentication {
    /// Workloads it applies to (none: the namespace, or the mesh in the root namespace).
    pub selector: Option<WorkloadSelector>,
    /// Mode for all ports.
    pub mtls: Option<MutualTls>,
    /// Mode per workload port (needs a selector); `None` when absent, so an
    /// empty map written as `{}` can be told apart.
    pub port_level_mtls: Option<BTreeMap<u32, MutualTls>>,
}

/// `PeerAuthentication.MutualTLS`.
#[derive(Debug, Clone, Default, PartialEq, Eq, Deserialize)]
#[serde(default, deny_unknown_fields, rename_all = "camelCase")]
pub struct MutualTls {
    /// Mode.
    pub mode: MtlsMode,
}

/// `PeerAuthentication.MutualTLS.Mode`.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Deserialize)]
pub enum MtlsMode {
    /// Inherit from the parent (namespace, then mesh; PERMISSIVE at the top).
    #[default]
    #[serde(rename = "UNSET")]
    Unset,
    /// Plain text only.
    #[serde(rename = "DISABLE")]
    Disable,
    /// Plain text or mutual TLS.
    #[serde(rename = "PERMISSIVE")]
    Permissive,
    /// Mutual TLS only.
    #[serde(rename = "STRICT")]
    Strict,
}

// ------------------------------------------------------------------ AuthorizationPolicy

/// An AuthorizationPolicy: access control on workloads.
#[derive(Debug, Clone, Default, PartialEq, Eq, Deserialize)]
#[serde(default, deny_unknown_fields, rename_all = "camelCase")]
pub struct AuthorizationPolicy {
    /// Workloads it applies to (exclusive with `targetRef(s)`).
    pub selector: Option<WorkloadSelector>,
    /// Resource it is attached to.
    pub target_ref: Option<PolicyTargetReference>,
    /// Resources it is attached to.
    pub target_refs: Vec<PolicyTargetReference>,
    /// Rules; a request matching any of them gets the action.
    pub rules: Vec<Rule>,
    /// Action.
    pub action: Action,
    /// External authorizer (`CUSTOM` only).
    pub provider: Option<ExtensionProvider>,
}

/// `AuthorizationPolicy.Action`.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Deserialize)]
pub enum Action {
    /// Allow matching requests.
    #[default]
    #[serde(rename = "ALLOW")]
    Allow,
    /// Deny matching requests.
    #[serde(rename = "DENY")]
    Deny,
    /// Audit matching requests.
    #[serde(rename = "AUDIT")]
    Audit,
    /// Ask an external authorizer.
    #[serde(rename = "CUSTOM")]
    Custom,
}

impl Action {
    /// The name in the API.
    pub fn name(self) -> &'static str {
        match self {
            Action::Allow => "ALLOW",
            Action::Deny => "DENY",
            Action::Audit => "AUDIT",
            Action::Custom => "CUSTOM",
        }
    }
}

/// `AuthorizationPolicy.ExtensionProvider`.
#[derive(Debug, Clone, Default, PartialEq, Eq, Deserialize)]
#[serde(default, deny_unknown_fields, rename_all = "camelCase")]
pub struct ExtensionProvider {
    /// Name of an extension provider of the mesh config.
    pub name: String,
}

/// `Rule`: `from`, `to` and `when`, ANDed; entries within each ORed.
#[derive(Debug, Clone, Default, PartialEq, Eq, Deserialize)]
#[serde(default, deny_unknown_fields, rename_all = "camelCase")]
pub struct Rule {
    /// Sources.
    pub from: Vec<RuleFrom>,
    /// Operations.
    pub to: Vec<RuleTo>,
    /// Further conditions.
    pub when: Vec<Condition>,
}

/// `Rule.From`.
#[derive(Debug, Clone, Default, PartialEq, Eq, Deserialize)]
#[serde(default, deny_unknown_fields, rename_all = "camelCase")]
pub struct RuleFrom {
    /// The source (required).
    pub source: Option<Source>,
}

/// `Rule.To`.
#[derive(Debug, Clone, Default, PartialEq, Eq, Deserialize)]
#[serde(default, deny_unknown_fields, rename_all = "camelCase")]
pub struct RuleTo {
    /// The operation (required).
    pub operation: Option<Operation>,
}

/// `Source`: fields ANDed, values within a field ORed.
#[derive(Debug, Clone, Default, PartialEq, Eq, Deserialize)]
#[serde(default, deny_unknown_fields, rename_all = "camelCase")]
pub struct Source {
    /// Peer identities (`cluster.local/ns/NS/sa/SA`).
    pub principals: Vec<String>,
    /// Negated `principals`.
    pub not_principals: Vec<String>,
    /// JWT principals (`iss/sub`).
    pub request_principals: Vec<String>,
    /// Negated `requestPrincipals`.
    pub not_request_principals: Vec<String>,
    /// Peer namespaces.
    pub namespaces: Vec<String>,
    /// Negated `namespaces`.
    pub not_namespaces: Vec<String>,
    /// Peer service accounts (`SA` or `NS/SA`).
    pub service_accounts: Vec<String>,
    /// Negated `serviceAccounts`.
    pub not_service_accounts: Vec<String>,
    /// Peer IPs or CIDRs.
    pub ip_blocks: Vec<String>,
    /// Negated `ipBlocks`.
    pub not_ip_blocks: Vec<String>,
    /// Original client IPs or CIDRs.
    pub remote_ip_blocks: Vec<String>,
    /// Negated `remoteIpBlocks`.
    pub not_remote_ip_blocks: Vec<String>,
    /// Peer trust domains.
    pub trust_domains: Vec<String>,
    /// Negated `trustDomains`.
    pub not_trust_domains: Vec<String>,
}

/// `Operation`: fields ANDed, values within a field ORed.
#[derive(Debug, Clone, Default, PartialEq, Eq, Deserialize)]
#[serde(default, deny_unknown_fields, rename_all = "camelCase")]
pub struct Operation {
    /// Hosts (`Host` header).
    pub hosts: Vec<String>,
    /// Negated `hosts`.
    pub not_hosts: Vec<String>,
    /// Ports (as strings).
    pub ports: Vec<String>,
    /// Negated `ports`.
    pub not_ports: Vec<String>,
    /// Methods.
    pub methods: Vec<String>,
    /// Negated `methods`.
    pub not_methods: Vec<String>,
    /// Paths.
    pub paths: Vec<String>,
    /// Negated `paths`.
    pub not_paths: Vec<String>,
}

/// `Condition`: an attribute and the values it may (or may not) have.
#[derive(Debug, Clone, Default, PartialEq, Eq, Deserialize)]
#[serde(default, deny_unknown_fields, rename_all = "camelCase")]
pub struct Condition {
    /// Attribute (`source.ip`, `request.headers[x-foo]`...).
    pub key: String,
    /// Accepted values.
    pub values: Vec<String>,
    /// Rejected values.
    pub not_values: Vec<String>,
}

// ------------------------------------------------------------------ RequestAuthentication

/// A RequestAuthentication: which JWTs a workload accepts.
#[derive(Debug, Clone, Default, PartialEq, Eq, Deserialize)]
#[serde(default, deny_unknown_fields, rename_all = "camelCase")]
pub struct RequestAuthentication {
    /// Workloads it applies to (exclusive with `targetRef(s)`).
    pub selector: Option<WorkloadSelector>,
    /// Resource it is attached to.
    pub target_ref: Option<PolicyTargetReference>,
    /// Resources it is attached to.
    pub target_refs: Vec<PolicyTargetReference>,
    /// Accepted issuers.
    pub jwt_rules: Vec<JwtRule>,
}

/// `JWTRule`.
#[derive(Debug, Clone, Default, PartialEq, Eq, Deserialize)]
#[serde(default, deny_unknown_fields, rename_all = "camelCase")]
pub struct JwtRule {
    /// Issuer (`iss`).
    pub issuer: String,
    /// Accepted audiences (`aud`).
    pub audiences: Vec<String>,
    /// URL of the key set (`jwks_uri` is accepted too).
    #[serde(alias = "jwks_uri")]
    pub jwks_uri: String,
    /// Inline key set (JSON).
    pub jwks: String,
    /// Headers carrying the token.
    pub from_headers: Vec<JwtHeader>,
    /// Query parameters carrying the token.
    pub from_params: Vec<String>,
    /// Forward the verified payload in this header.
    pub output_payload_to_header: String,
    /// Cookies carrying the token.
    pub from_cookies: Vec<String>,
    /// Keep the token in the forwarded request.
    pub forward_original_token: bool,
    /// Copy claims into headers.
    pub output_claim_to_headers: Vec<ClaimToHeader>,
    /// Timeout fetching the key set (duration).
    pub timeout: Option<String>,
    /// Claims whose value is a space-separated list.
    pub space_delimited_claims: Vec<String>,
    /// Whether the token must be present (`OPTIONAL`, `REQUIRED`); kept,
    /// not translated yet.
    pub presence: Option<JwtPresence>,
}

/// `JWTRule.presence`.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Deserialize)]
pub enum JwtPresence {
    /// The token may be absent.
    #[serde(rename = "OPTIONAL")]
    Optional,
    /// The token must be present.
    #[serde(rename = "REQUIRED")]
    Required,
}

/// `JWTHeader`.
#[derive(Debug, Clone, Default, PartialEq, Eq, Deserialize)]
#[serde(default, deny_unknown_fields, rename_all = "camelCase")]
pub struct JwtHeader {
    /// Header name (required).
    pub name: String,
    /// Prefix before the token (`Bearer `).
    pub prefix: String,
}

/// `ClaimToHeader`.
#[derive(Debug, Clone, Default, PartialEq, Eq, Deserialize)]
#[serde(default, deny_unknown_fields, rename_all = "camelCase")]
pub struct ClaimToHeader {
    /// Header to set (required).
    pub header: String,
    /// Claim to copy (required).
    pub claim: String,
}
