//! The mesh configuration (istio's `MeshConfig` as YAML): the settings
//! translation reads. Where it comes from and how it is followed is
//! `discovery/mesh_watch.rs`: at start an unreadable or invalid one stops
//! the server; later, an invalid one is logged and the last good one
//! stays. Fields this server does not use are accepted, kept in `raw` and
//! shown by `/debug/mesh`.

use serde::Deserialize;

/// What sidecars do with traffic to hosts not in the registry
/// (`outboundTrafficPolicy.mode`).
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub enum OutboundPolicy {
    /// Pass it through to its original destination (the default).
    #[default]
    AllowAny,
    /// Drop it (`BlackHoleCluster`, `block_all`).
    RegistryOnly,
    /// `ALLOW_ANY_DYNAMIC_DNS` (Istio 1.28): as `ALLOW_ANY`, except that
    /// plaintext HTTP to unknown hosts is resolved by its `Host` through
    /// Envoy's dynamic forward proxy (`AllowAnyDynamicDNSCluster`,
    /// `translate::dfp`).
    AllowAnyDynamicDns,
}

impl OutboundPolicy {
    /// Whether traffic to unknown destinations passes through.
    pub fn allows_any(self) -> bool {
        self != OutboundPolicy::RegistryOnly
    }

    /// The mode's name in the mesh config.
    pub fn as_str(self) -> &'static str {
        match self {
            OutboundPolicy::AllowAny => "ALLOW_ANY",
            OutboundPolicy::RegistryOnly => "REGISTRY_ONLY",
            OutboundPolicy::AllowAnyDynamicDns => "ALLOW_ANY_DYNAMIC_DNS",
        }
    }
}

/// istiod's environment switches read in one place of translation each
/// (pilot/pkg/features), at istiod's defaults.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Features {
    /// `PILOT_ENABLE_ABSOLUTE_FQDN_VHOST_DOMAIN` (true): a service's
    /// virtual host also answers its absolute name (`<fqdn>.`).
    pub absolute_fqdn_vhost: bool,
    /// `ENABLE_LOCALITY_WEIGHTED_LB_CONFIG` (false): every outbound
    /// cluster balances by locality weight, not only those whose locality
    /// setting distributes or fails over.
    pub locality_weighted_lb: bool,
    /// `ISTIO_ENABLE_IPV4_OUTBOUND_LISTENER_FOR_IPV6_CLUSTERS` (false): an
    /// IPv6 proxy's `virtualOutbound` also listens on `0.0.0.0`, and its
    /// DNS clusters look up both families.
    pub ipv4_outbound_for_ipv6: bool,
    /// `ENABLE_SELECTOR_BASED_K8S_GATEWAY_POLICY` (true): policies with a
    /// workload selector (no `targetRef`) apply to Gateway API gateways'
    /// deployments too.
    pub selector_k8s_gateway_policy: bool,
    /// `PILOT_ENABLE_STRICT_GATEWAY_MERGING` (true): a router behind a
    /// Gateway API Gateway with a managed deployment takes no other
    /// namespace's Istio Gateways (`gateway_merge::strict`).
    pub strict_gateway_merging: bool,
    /// `PILOT_ALLOW_SIDECAR_SERVICE_INBOUND_LISTENER_MERGE` (false): a
    /// Sidecar's `ingress` listeners come with the workload's services'
    /// other ports (chains and clusters), not instead of them.
    pub sidecar_inbound_merge: bool,
}

impl Default for Features {
    fn default() -> Self {
        Features {
            absolute_fqdn_vhost: true,
            locality_weighted_lb: false,
            ipv4_outbound_for_ipv6: false,
            selector_k8s_gateway_policy: true,
            strict_gateway_merging: true,
            sidecar_inbound_merge: false,
        }
    }
}

/// The mesh settings translation uses (from the mesh configuration, and
/// the few istiod environment variables that shape translation).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct MeshSettings {
    /// `rootNamespace`: where mesh-wide policies live (`istio-system`).
    pub root_namespace: String,
    /// `trustDomain` (`cluster.local`).
    pub trust_domain: String,
    /// `outboundTrafficPolicy.mode`.
    pub outbound: OutboundPolicy,
    /// `enableAutoMtls` (true).
    pub enable_auto_mtls: bool,
    /// `PILOT_JWT_ENABLE_REMOTE_JWKS`: who fetches a `jwksUri`.
    pub jwks_fetch: crate::meshconfig::JwksFetch,
    /// `PILOT_SCOPE_GATEWAY_TO_NAMESPACE`.
    pub scope_gateway_to_namespace: bool,
    /// `PILOT_ENABLE_ROUTE_COLLAPSE_OPTIMIZATION`.
    pub route_collapse: bool,
    /// How Kubernetes Ingresses are read (`ingressClass`,
    /// `ingressControllerMode`, `ingressService`, `ingressSelector`, and
    /// `K8S_INGRESS_NS`).
    pub ingress: IngressSettings,
    /// `PILOT_ENABLE_MULTIPLE_CUSTOM_AUTHZ_PROVIDERS` (false): a workload's
    /// CUSTOM policies may name several providers.
    pub multiple_custom_authz_providers: bool,
    /// `ENABLE_TLS_ON_SIDECAR_INGRESS` (false): a Sidecar `ingress`
    /// listener's `tls` terminates TLS on a port whose mTLS is disabled.
    pub tls_on_sidecar_ingress: bool,
    /// `PILOT_ALLOW_ANY_DYNAMIC_DNS_MAX_HOSTS` (1024): the hosts the
    /// dynamic forward proxy's DNS cache holds under ALLOW_ANY_DYNAMIC_DNS.
    pub dynamic_dns_max_hosts: u32,
    /// `ENABLE_XDS_API_GENERATOR_AUTH`.
    pub xds_api_generator_auth: bool,
    /// `ENABLE_DEBUG_ENDPOINT_AUTH`.
    pub debug_endpoint_auth: bool,
    /// What the environment sets of the name tables (NDS).
    pub dns: DnsSettings,
    /// `PILOT_ENABLE_K8S_SELECT_WORKLOAD_ENTRIES` (true): a Kubernetes
    /// Service's selector picks WorkloadEntries too.
    pub k8s_select_workload_entries: bool,
    /// `PILOT_ENABLE_SERVICEENTRY_SELECT_PODS` (true): a ServiceEntry's
    /// `workloadSelector` picks Pods too.
    pub service_entry_select_pods: bool,
    /// Which clusters take unhealthy endpoints, and so have Envoy's panic
    /// threshold off.
    pub unhealthy: UnhealthyEndpoints,
    /// `PILOT_PERSISTENT_SESSION_LABEL` (`istio.io/persistent-session`)
    /// and `PILOT_PERSISTENT_SESSION_HEADER_LABEL`
    /// (`istio.io/persistent-session-header`): a service labelled with
    /// either keeps its draining endpoints (empty: never).
    pub persistent_session_labels: [String; 2],
    /// `PILOT_DRAINING_LABEL` (`istio.io/draining`): an endpoint whose
    /// workload carries it (non-empty) is draining (empty: none is).
    pub draining_label: String,
    /// `PILOT_HBONE_INITIAL_STREAM_WINDOW_SIZE` and
    /// `PILOT_HBONE_INITIAL_CONNECTION_WINDOW_SIZE` (0: Envoy's own) on
    /// HBONE CONNECT clusters.
    pub hbone_window_sizes: [u32; 2],
    /// `PILOT_GATEWAY_TRANSPORT_SOCKET_CONNECT_TIMEOUT` (15s): the TLS
    /// handshake limit on gateway listener chains; `None` (0) for none.
    pub gateway_handshake_timeout: Option<std::time::Duration>,
    /// `PILOT_SKIP_VALIDATE_TRUST_DOMAIN` (false): inbound mTLS does not
    /// match the peer's trust domain.
    pub skip_validate_trust_domain: bool,
    /// The file as written (`/debug/mesh` shows it over istiod's defaults).
    pub raw: serde_json::Value,
    /// `enableTracing` (true, istiod's default).
    pub enable_tracing: bool,
    /// `defaultProviders.tracing`.
    pub default_tracing_providers: Vec<String>,
    /// `defaultConfig.tracing` as written (`sampling`, `custom_tags`,
    /// `max_path_tag_length`, `enableIstioTags`, and the bootstrap's
    /// tracer, which istio-agent reads).
    pub proxy_tracing: serde_json::Value,
    /// `PILOT_TRACE_SAMPLING` (1.0): the percentage of requests traced
    /// unless `defaultConfig.tracing.sampling` says otherwise.
    pub trace_sampling: Percent,
    /// `tlsDefaults`: what gateways' SIMPLE and MUTUAL servers take unless
    /// the server says otherwise.
    pub tls_defaults: TlsDefaults,
    /// `meshMTLS`: the minimum TLS version and cipher suites of sidecars'
    /// inbound mesh mTLS (istiod's `BuildInboundTLS`); its `ecdhCurves`
    /// are refused, as istiod's `ValidateMeshTLSConfig`.
    pub mesh_mtls: TlsDefaults,
    /// `h2UpgradePolicy: UPGRADE`: HTTP/1.1 to named HTTP ports upgraded
    /// to HTTP/2 upstream unless a DestinationRule says otherwise.
    pub h2_upgrade: bool,
    /// `tcpKeepalive`: TCP keepalive of every outbound cluster, under a
    /// DestinationRule's own.
    pub tcp_keepalive: Option<crate::istio::networking::TcpKeepalive>,
    /// `defaultTrafficPolicy`: the connection pool and outlier detection
    /// every cluster takes where its DestinationRule sets none (istiod's
    /// `applyDefaultTrafficPolicy`; the pool also caps inbound clusters
    /// and the passthrough clusters' circuit breakers).
    pub default_traffic_policy: DefaultTrafficPolicy,
    /// `PILOT_DISABLE_MX_ALPN` (false): mesh mTLS offers no
    /// `istio-peer-exchange` ALPN.
    pub disable_mx_alpn: bool,
    /// Not `DISABLE_TRACK_REMAINING_CB_METRICS` (true): circuit breakers
    /// track what remains of each threshold.
    pub track_remaining: bool,
    /// `PILOT_ENABLE_MONGO_FILTER` (true) and `PILOT_ENABLE_REDIS_FILTER`
    /// (false): Mongo and Redis ports' TCP chains get Envoy's protocol
    /// filter.
    pub protocol_filters: ProtocolFilters,
    /// `ENABLE_100_CONTINUE_HEADERS` (true): HTTP managers proxy
    /// `100-continue` (`proxy_100_continue`).
    pub proxy_100_continue: bool,
    /// `DISABLE_SHADOW_HOST_SUFFIX` (true): mirrored requests keep their
    /// host (`disable_shadow_host_suffix_append`).
    pub disable_shadow_host_suffix: bool,
    /// `MAX_CONNECTIONS_PER_SOCKET_EVENT_LOOP` (1): connections a listener
    /// accepts per socket event (0: Envoy's unlimited).
    pub max_accept_per_event: u32,
    /// `PILOT_ENABLE_EDS_FOR_HEADLESS_SERVICES` (false): a Kubernetes
    /// headless service's cluster is EDS, not original destination.
    pub eds_for_headless: bool,
    /// `dnsRefreshRate` (60s): how often DNS clusters resolve again when
    /// a query fails (a success follows its TTL).
    pub dns_refresh_rate: std::time::Duration,
    /// DNS clusters' resolver: `PILOT_DNS_CARES_UDP_MAX_QUERIES` (100) and
    /// `PILOT_DNS_JITTER_DURATION` (100ms).
    pub dns_resolver: DnsResolver,
    /// `PILOT_ENABLE_TELEMETRY_LABEL` (true) and
    /// `PILOT_ENDPOINT_TELEMETRY_LABEL` (true): clusters carry their
    /// services (`istio.services`) and endpoints their workload
    /// (`istio.workload`) for the stats filter's labels.
    pub telemetry_labels: (bool, bool),
    /// `ISTIO_DUAL_STACK` (false): dual-stack proxies get both families'
    /// listener addresses, passthrough bind addresses and DNS lookups, and
    /// endpoints carry every address of their pod.
    pub dual_stack: bool,
    /// istiod's feature switches that shape translation in one place each
    /// ([`Features`]).
    pub features: Features,
    /// `PILOT_HTTP10` (false): HTTP managers accept HTTP/1.0, and
    /// plaintext HTTP is told by `http/1.0` too.
    pub http10: bool,
    /// `PILOT_SIDECAR_USE_REMOTE_ADDRESS` (false): sidecars' outbound HTTP
    /// managers trust the connection's address as the client's.
    pub sidecar_use_remote_address: bool,
    /// `ENABLE_HCM_INTERNAL_NETWORKS` (false): HTTP managers count the
    /// meshNetworks `fromCidr` ranges as internal (those that use the
    /// remote address always do).
    pub hcm_internal_networks: bool,
    /// `PILOT_ENABLE_METADATA_EXCHANGE` (true): Istio's metadata exchange
    /// filters (HTTP, network, upstream) and its ALPN.
    pub metadata_exchange: bool,
    /// `PILOT_MX_ADDITIONAL_LABELS`: labels metadata exchange also carries
    /// (sorted, each once).
    pub mx_additional_labels: Vec<String>,
    /// `PILOT_ENABLE_ALPN_FILTER` (true): outbound HTTP managers get
    /// `istio.alpn`.
    pub alpn_filter: bool,
    /// `discoverySelectors`: the namespaces istiod looks after (any
    /// selector matching; none means all): only their objects are read
    /// (`discovery/sources.rs` `discovery_filter`), and only they get the
    /// root ConfigMap.
    pub discovery_selectors: Vec<LabelSelector>,
    /// `defaultProviders.metrics`: the providers sidecars report metrics
    /// to when no Telemetry names one (istiod's Go default: none; the
    /// Helm chart's: `prometheus`).
    pub default_metrics_providers: Vec<String>,
    /// `extensionProviders` by name: the kind of each (`prometheus`,
    /// `envoyFileAccessLog`, ...) and its settings, over istiod's built-in
    /// `prometheus`, `stackdriver` and `envoy` (a file log to /dev/stdout).
    pub extension_providers: std::collections::BTreeMap<String, (String, serde_json::Value)>,
    /// `defaultProviders.accessLogging`.
    pub default_access_log_providers: Vec<String>,
    /// `accessLogFile`: where sidecars log requests when no Telemetry or
    /// default provider says (empty: no log).
    pub access_log_file: String,
    /// `accessLogEncoding`: `TEXT` (the default) or `JSON`.
    pub access_log_json: bool,
    /// `accessLogFormat`: the text format, or the JSON object as text
    /// (empty: istiod's).
    pub access_log_format: String,
    /// `connectTimeout` (10s): the clusters' connect timeout unless a
    /// DestinationRule sets one.
    pub connect_timeout: std::time::Duration,
    /// `defaultServiceExportTo` (`*`): a service's `exportTo` when it has
    /// none.
    pub default_service_export_to: Vec<String>,
    /// `defaultVirtualServiceExportTo` (`*`).
    pub default_virtual_service_export_to: Vec<String>,
    /// `defaultDestinationRuleExportTo` (`*`): `.` when it names `.`, else
    /// none (istiod honours only `.` and `*` here).
    pub default_destination_rule_export_to: Vec<String>,
    /// `inboundTrafficPolicy.mode: LOCALHOST`: inbound clusters send to
    /// 127.0.0.1 instead of the pod's address (`PASSTHROUGH`, the default).
    pub inbound_localhost: bool,
    /// `trustDomainAliases`: trust domains also accepted as this mesh's in
    /// AuthorizationPolicy principals and trust domains.
    pub trust_domain_aliases: Vec<String>,
    /// `localityLbSetting`: locality load balancing where no
    /// DestinationRule sets it (istiod's default `{enabled: true}`).
    pub locality_lb_setting: Option<crate::istio::networking::LocalityLoadBalancerSetting>,
    /// The mesh networks (`--networksConfig`, else the `meshNetworks` key
    /// of the mesh ConfigMap, read beside this configuration) and this
    /// cluster's ID (`CLUSTER_ID`).
    pub networks: crate::networks::Networks,
    /// What was read and is not applied (a value from a newer Istio, a
    /// feature not generated), one sentence each: logged when the
    /// configuration is loaded, never fatal.
    pub notes: Vec<String>,
    /// `caCertificates`: extra roots (`MeshConfig.CertificateData`).
    pub ca_certificates: Vec<CertificateData>,
    /// The workload trust bundle PCDS sends under `ISTIO_MULTIROOT_MESH`
    /// (istiod's `trustbundle`): the CA's and RA's roots and the
    /// `caCertificates` PEMs, each once, sorted; `None` when the switch is
    /// off. Filled in by the process, which knows its CA.
    pub trust_bundle: Option<Vec<String>>,
}

/// Which protocol filters TCP chains get (istiod's `buildNetworkFiltersStack`).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct ProtocolFilters {
    /// `envoy.filters.network.mongo_proxy` before the tcp_proxy.
    pub mongo: bool,
    /// `envoy.filters.network.redis_proxy` instead of the tcp_proxy, and
    /// Maglev balancing on Redis clusters.
    pub redis: bool,
}

impl Default for ProtocolFilters {
    /// istiod's defaults: Mongo's on, Redis's off.
    fn default() -> Self {
        ProtocolFilters { mongo: true, redis: false }
    }
}

/// `MeshConfig.CertificateData`: a root, by PEM or SPIFFE bundle URL, for
/// signers and trust domains.
#[derive(Debug, Clone, Default, PartialEq, Eq, Deserialize)]
#[serde(default, rename_all = "camelCase")]
pub struct CertificateData {
    /// The PEM data of the root.
    pub pem: String,
    /// A SPIFFE bundle endpoint to fetch the roots from.
    pub spiffe_bundle_url: String,
    /// The Kubernetes signers (`<domain>/<signer>`) this root is for.
    pub cert_signers: Vec<String>,
    /// The trust domains this root is for.
    pub trust_domains: Vec<String>,
}

/// `MeshConfig.TLSConfig` (`tlsDefaults`).
#[derive(Debug, Clone, Default, PartialEq, Eq, Deserialize)]
#[serde(default, rename_all = "camelCase")]
pub struct TlsDefaults {
    /// `TLS_AUTO` (none), `TLSV1_2` or `TLSV1_3`.
    pub min_protocol_version: Option<String>,
    /// ECDH curves.
    pub ecdh_curves: Vec<String>,
    /// Cipher suites.
    pub cipher_suites: Vec<String>,
}

/// A Kubernetes label selector (`matchLabels`, `matchExpressions`).
#[derive(Debug, Clone, Default, PartialEq, Eq, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct LabelSelector {
    /// Labels that must be present with these values.
    #[serde(default)]
    pub match_labels: std::collections::BTreeMap<String, String>,
    /// Expressions that must all hold.
    #[serde(default)]
    pub match_expressions: Vec<LabelExpression>,
}

/// One `matchExpressions` entry.
#[derive(Debug, Clone, PartialEq, Eq, Deserialize)]
pub struct LabelExpression {
    /// The label.
    pub key: String,
    /// `In`, `NotIn`, `Exists`, `DoesNotExist`.
    pub operator: String,
    /// For `In` and `NotIn`.
    #[serde(default)]
    pub values: Vec<String>,
}

impl LabelSelector {
    /// Whether `labels` are selected (an empty selector selects all).
    pub fn matches(&self, labels: &std::collections::BTreeMap<String, String>) -> bool {
        self.match_labels.iter().all(|(k, v)| labels.get(k) == Some(v))
            && self.match_expressions.iter().all(|e| {
                let got = labels.get(&e.key);
                match e.operator.as_str() {
                    "In" => got.is_some_and(|v| e.values.contains(v)),
                    "NotIn" => got.is_none_or(|v| !e.values.contains(v)),
                    "Exists" => got.is_some(),
                    "DoesNotExist" => got.is_none(),
                    _ => false,
                }
            })
    }
}

impl MeshSettings {
    /// Whether a namespace with `labels` is selected by
    /// `discoverySelectors`.
    pub fn discovers(&self, labels: &std::collections::BTreeMap<String, String>) -> bool {
        self.discovery_selectors.is_empty() || self.discovery_selectors.iter().any(|s| s.matches(labels))
    }
}

/// istiod's switches of unhealthy endpoints (features/experimental.go).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub struct UnhealthyEndpoints {
    /// `PILOT_SEND_UNHEALTHY_ENDPOINTS` (false): every cluster takes them,
    /// whatever its outlier detection says, with the panic threshold off
    /// (istiod's `ForcesSupportUnhealthyEndpoints`, which a Service's
    /// traffic distribution also forces).
    pub always: bool,
    /// `PILOT_AUTO_SEND_UNHEALTHY_ENDPOINTS` (true): clusters take them
    /// unless their outlier detection sets `minHealthPercent` (istiod's
    /// `DefaultSendUnhealthyEndpoints`).
    pub by_default: bool,
}

impl Default for UnhealthyEndpoints {
    fn default() -> Self {
        UnhealthyEndpoints { always: false, by_default: true }
    }
}

/// How DNS clusters resolve (istiod's `PILOT_DNS_CARES_UDP_MAX_QUERIES`
/// and `PILOT_DNS_JITTER_DURATION`).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub struct DnsResolver {
    /// Queries on one UDP channel before c-ares opens another (0: no
    /// limit).
    pub udp_max_queries: u32,
    /// The random delay added to each refresh (0: none).
    pub jitter: std::time::Duration,
}

impl Default for DnsResolver {
    fn default() -> Self {
        DnsResolver { udp_max_queries: 100, jitter: std::time::Duration::from_millis(100) }
    }
}

/// The environment's switches of the name tables istiod sends
/// istio-agent's DNS proxy.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub struct DnsSettings {
    /// `ENABLE_MULTICLUSTER_HEADLESS` (true): a headless service's other
    /// clusters' endpoints (of the proxy's network) are among its
    /// addresses.
    pub multicluster_headless: bool,
    /// `ISTIO_DUAL_STACK` (false), or ambient on: a dual-stack proxy gets
    /// both families of a service's addresses.
    pub dual_stack: bool,
    /// `PILOT_ENABLE_IP_AUTOALLOCATE` (true): ServiceEntry hosts without
    /// addresses are given some, which proxies capturing DNS use.
    pub ip_autoallocate: bool,
}

impl Default for DnsSettings {
    fn default() -> Self {
        DnsSettings { multicluster_headless: true, dual_stack: false, ip_autoallocate: true }
    }
}

impl Default for MeshSettings {
    fn default() -> Self {
        MeshSettings {
            root_namespace: "istio-system".into(),
            trust_domain: "cluster.local".into(),
            outbound: OutboundPolicy::AllowAny,
            enable_auto_mtls: true,
            jwks_fetch: crate::meshconfig::JwksFetch::Istiod,
            scope_gateway_to_namespace: false,
            route_collapse: true,
            multiple_custom_authz_providers: false,
            tls_on_sidecar_ingress: false,
            dynamic_dns_max_hosts: 1024,
            ingress: IngressSettings::default(),
            xds_api_generator_auth: true,
            debug_endpoint_auth: true,
            dns: DnsSettings::default(),
            k8s_select_workload_entries: true,
            service_entry_select_pods: true,
            unhealthy: UnhealthyEndpoints::default(),
            persistent_session_labels: [
                "istio.io/persistent-session".into(),
                "istio.io/persistent-session-header".into(),
            ],
            draining_label: "istio.io/draining".into(),
            hbone_window_sizes: [0, 0],
            gateway_handshake_timeout: Some(std::time::Duration::from_secs(15)),
            skip_validate_trust_domain: false,
            raw: serde_json::Value::Null,
            enable_tracing: true,
            default_tracing_providers: Vec::new(),
            proxy_tracing: serde_json::Value::Null,
            trace_sampling: Percent(1.0),
            tls_defaults: TlsDefaults::default(),
            mesh_mtls: TlsDefaults::default(),
            h2_upgrade: false,
            tcp_keepalive: None,
            default_traffic_policy: DefaultTrafficPolicy::default(),
            disable_mx_alpn: false,
            track_remaining: false,
            protocol_filters: ProtocolFilters::default(),
            proxy_100_continue: true,
            disable_shadow_host_suffix: true,
            max_accept_per_event: 1,
            dns_refresh_rate: std::time::Duration::from_secs(60),
            dns_resolver: DnsResolver::default(),
            dual_stack: false,
            telemetry_labels: (true, true),
            eds_for_headless: false,
            features: Features::default(),
            http10: false,
            sidecar_use_remote_address: false,
            hcm_internal_networks: false,
            metadata_exchange: true,
            mx_additional_labels: Vec::new(),
            alpn_filter: true,
            discovery_selectors: Vec::new(),
            default_metrics_providers: Vec::new(),
            extension_providers: [
                ("prometheus", "prometheus", serde_json::json!({})),
                ("stackdriver", "stackdriver", serde_json::json!({})),
                ("envoy", "envoyFileAccessLog", serde_json::json!({"path": "/dev/stdout"})),
            ]
            .into_iter()
            .map(|(n, k, v)| (n.to_owned(), (k.to_owned(), v)))
            .collect(),
            default_access_log_providers: Vec::new(),
            access_log_file: String::new(),
            access_log_json: false,
            access_log_format: String::new(),
            connect_timeout: std::time::Duration::from_secs(10),
            default_service_export_to: Vec::new(),
            default_virtual_service_export_to: Vec::new(),
            default_destination_rule_export_to: Vec::new(),
            locality_lb_setting: None,
            networks: crate::networks::Networks {
                cluster_id: "Kubernetes".into(),
                system_namespace: "istio-system".into(),
                ..Default::default()
            },
            notes: Vec::new(),
            trust_domain_aliases: Vec::new(),
            inbound_localhost: false,
            ca_certificates: Vec::new(),
            trust_bundle: None,
        }
    }
}

impl MeshSettings {
    /// `/debug/mesh`: the mesh configuration in force as istiod shows it
    /// (`debug.go` meshHandler): istiod's defaults
    /// (`pkg/config/mesh/mesh.go` DefaultMeshConfig, as proto3 JSON leaves
    /// out zero values) with the file's fields over them; extension
    /// providers are merged by name, as `ApplyMeshConfig` merges them.
    pub fn debug_json(&self) -> serde_json::Value {
        let mut out = serde_json::json!({
            "proxyListenPort": 15001,
            "proxyInboundListenPort": 15006,
            "connectTimeout": "10s",
            "protocolDetectionTimeout": "0s",
            "ingressClass": "istio",
            "ingressService": "istio-ingressgateway",
            "ingressControllerMode": "STRICT",
            "enableTracing": true,
            "defaultConfig": {
                "configPath": "./etc/istio/proxy",
                "binaryPath": "/usr/local/bin/envoy",
                "serviceCluster": "istio-proxy",
                "drainDuration": "45s",
                "terminationDrainDuration": "5s",
                "discoveryAddress": "istiod.istio-system.svc:15012",
                "proxyAdminPort": 15000,
                "controlPlaneAuthPolicy": "MUTUAL_TLS",
                "statNameLength": 189,
                "statusPort": 15020,
            },
            "outboundTrafficPolicy": {"mode": "ALLOW_ANY"},
            "inboundTrafficPolicy": {"mode": "PASSTHROUGH"},
            "enableAutoMtls": true,
            "trustDomain": "cluster.local",
            "defaultServiceExportTo": ["*"],
            "defaultVirtualServiceExportTo": ["*"],
            "defaultDestinationRuleExportTo": ["*"],
            "rootNamespace": "istio-system",
            "localityLbSetting": {"enabled": true},
            "dnsRefreshRate": "60s",
            "enablePrometheusMerge": true,
            "defaultProviders": {},
            "extensionProviders": [
                {"name": "prometheus", "prometheus": {}},
                {"name": "stackdriver", "stackdriver": {}},
                {"name": "envoy", "envoyFileAccessLog": {"path": "/dev/stdout"}},
            ],
        });
        if let (Some(base), Some(file)) = (out.as_object_mut(), self.raw.as_object()) {
            for (k, v) in file {
                match (k.as_str(), base.get_mut(k)) {
                    ("extensionProviders", Some(serde_json::Value::Array(have))) => {
                        for p in v.as_array().into_iter().flatten() {
                            match have.iter_mut().find(|h| h.get("name").is_some_and(|n| Some(n) == p.get("name"))) {
                                Some(h) => *h = p.clone(),
                                None => have.push(p.clone()),
                            }
                        }
                    }
                    ("defaultConfig", Some(serde_json::Value::Object(have))) => {
                        for (dk, dv) in v.as_object().into_iter().flatten() {
                            have.insert(dk.clone(), dv.clone());
                        }
                    }
                    _ => {
                        base.insert(k.clone(), v.clone());
                    }
                }
            }
        }
        out
    }

    /// Whether the provider called `name` is a Prometheus one.
    pub fn is_prometheus(&self, name: &str) -> bool {
        self.extension_providers.get(name).is_some_and(|(k, _)| k == "prometheus")
    }
}

/// meshConfig `defaultTrafficPolicy`: the mesh-wide baseline below
/// DestinationRules.
#[derive(Debug, Clone, Default, PartialEq, Eq, Deserialize)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct DefaultTrafficPolicy {
    /// Where a cluster's rule sets no connection pool.
    pub connection_pool: Option<crate::istio::networking::ConnectionPoolSettings>,
    /// Where a cluster's rule sets no outlier detection.
    pub outlier_detection: Option<crate::istio::networking::OutlierDetection>,
}

type RawDefaultTrafficPolicy = DefaultTrafficPolicy;

/// istiod's `validateMeshConfigDefaultTrafficPolicy`, in its words; the
/// first problem.
fn validate_default_traffic_policy(p: &RawDefaultTrafficPolicy) -> Result<(), String> {
    use crate::istio::networking::H2UpgradePolicy;
    // istiod's ValidateDuration.
    let duration = |d: &Option<String>| -> Result<(), String> {
        let Some(d) = d else { return Ok(()) };
        let d = crate::duration::parse(d).map_err(|e| e.to_string())?;
        if d < std::time::Duration::from_millis(1) {
            return Err("duration must be greater than 1ms".into());
        }
        if d.subsec_nanos() % 1_000_000 != 0 {
            return Err("only durations to ms precision are supported".into());
        }
        Ok(())
    };
    let non_negative = |v: i32, what: &str| match v < 0 {
        true => Err(format!("{what} must be non-negative")),
        false => Ok(()),
    };
    if let Some(cp) = &p.connection_pool {
        if cp.http.is_none() && cp.tcp.is_none() {
            return Err("connection pool must have at least one field".into());
        }
        if let Some(h) = &cp.http {
            non_negative(h.http1_max_pending_requests, "http1 max pending requests")?;
            non_negative(h.http2_max_requests, "http2 max requests")?;
            non_negative(h.max_requests_per_connection, "max requests per connection")?;
            non_negative(h.max_retries, "max retries")?;
            non_negative(h.max_concurrent_streams, "max concurrent streams")?;
            duration(&h.idle_timeout)?;
            if h.h2_upgrade_policy == H2UpgradePolicy::Upgrade && h.use_client_protocol {
                return Err("use client protocol must not be true when H2UpgradePolicy is UPGRADE".into());
            }
        }
        if let Some(t) = &cp.tcp {
            non_negative(t.max_connections, "max connections")?;
            duration(&t.connect_timeout)?;
            duration(&t.max_connection_duration)?;
            if t.idle_timeout.as_deref().and_then(|d| crate::duration::parse(d).ok()).is_none_or(|d| d.as_millis() != 0)
            {
                duration(&t.idle_timeout)?;
            }
            if let Some(k) = &t.tcp_keepalive {
                duration(&k.time)?;
                duration(&k.interval)?;
            }
        }
    }
    if let Some(o) = &p.outlier_detection {
        duration(&o.base_ejection_time)?;
        duration(&o.interval)?;
        if !o.split_external_local_origin_errors && o.consecutive_local_origin_failures.is_some_and(|n| n > 0) {
            return Err("outlier detection consecutive local origin failures is specified, but split external local origin errors is set to false".into());
        }
        for v in [o.max_ejection_percent, o.min_health_percent] {
            if !(0..=100).contains(&v) {
                return Err(format!("percentage {v} is not in range 0..100"));
            }
        }
    }
    Ok(())
}

#[derive(Deserialize)]
#[serde(rename_all = "camelCase")]
struct Raw {
    tls_defaults: Option<TlsDefaults>,
    #[serde(rename = "meshMTLS")]
    mesh_mtls: Option<TlsDefaults>,
    h2_upgrade_policy: Option<String>,
    tcp_keepalive: Option<crate::istio::networking::TcpKeepalive>,
    default_traffic_policy: Option<RawDefaultTrafficPolicy>,
    root_namespace: Option<String>,
    trust_domain: Option<String>,
    outbound_traffic_policy: Option<RawOutbound>,
    enable_auto_mtls: Option<bool>,
    discovery_selectors: Option<Vec<LabelSelector>>,
    default_providers: Option<RawDefaultProviders>,
    extension_providers: Option<Vec<serde_json::Value>>,
    access_log_file: Option<String>,
    access_log_encoding: Option<String>,
    access_log_format: Option<String>,
    enable_tracing: Option<bool>,
    connect_timeout: Option<String>,
    dns_refresh_rate: Option<String>,
    default_service_export_to: Option<Vec<String>>,
    default_virtual_service_export_to: Option<Vec<String>>,
    default_destination_rule_export_to: Option<Vec<String>>,
    locality_lb_setting: Option<crate::istio::networking::LocalityLoadBalancerSetting>,
    trust_domain_aliases: Option<Vec<String>>,
    inbound_traffic_policy: Option<RawInbound>,
    ca_certificates: Option<Vec<CertificateData>>,
}

#[derive(Deserialize)]
#[serde(rename_all = "camelCase")]
struct RawDefaultProviders {
    metrics: Option<Vec<String>>,
    access_logging: Option<Vec<String>>,
    tracing: Option<Vec<String>>,
}

/// A percentage (compared by its bits, so settings stay `Eq`).
#[derive(Debug, Clone, Copy)]
pub struct Percent(pub f64);

impl PartialEq for Percent {
    fn eq(&self, other: &Percent) -> bool {
        self.0.to_bits() == other.0.to_bits()
    }
}

impl Eq for Percent {}

#[derive(Deserialize)]
struct RawInbound {
    mode: Option<String>,
}

#[derive(Deserialize)]
struct RawOutbound {
    mode: Option<String>,
    /// ALLOW_ANY_DYNAMIC_DNS's upstream TLS (Istio 1.28): read, reported.
    tls: Option<serde_json::Value>,
}

/// Which Ingresses istiod's ingress controller processes
/// (`shouldProcessIngressWithClass`).
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub enum IngressMode {
    /// None.
    Off,
    /// Those of the `istio` class (annotation or IngressClass), the
    /// default.
    #[default]
    Strict,
    /// Also those without a class.
    Default,
}

/// How Kubernetes Ingresses become Gateways and VirtualServices.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct IngressSettings {
    /// `ingressClass` (`istio`).
    pub class: String,
    /// `ingressControllerMode` (STRICT).
    pub mode: IngressMode,
    /// `ingressService` (`istio-ingressgateway`).
    pub service: String,
    /// `ingressSelector` (empty).
    pub selector: String,
    /// `K8S_INGRESS_NS`: the namespace of the Gateways made
    /// (`istio-system`).
    pub namespace: String,
}

impl Default for IngressSettings {
    fn default() -> IngressSettings {
        IngressSettings {
            class: "istio".into(),
            mode: IngressMode::Strict,
            service: "istio-ingressgateway".into(),
            selector: String::new(),
            namespace: "istio-system".into(),
        }
    }
}

/// Why the mesh configuration cannot be used.
#[derive(Debug, thiserror::Error)]
#[error("--meshConfig {path}: {reason}")]
pub struct MeshConfigError {
    /// The file.
    pub path: String,
    /// What is wrong.
    pub reason: String,
}

impl MeshSettings {
    /// Parses mesh configuration YAML over the defaults; empty means defaults.
    pub fn parse(yaml: &str) -> Result<MeshSettings, String> {
        let mut m = MeshSettings::default();
        if yaml.trim().is_empty() {
            return Ok(m);
        }
        let raw: Raw = serde_yaml_ng::from_str(yaml).map_err(|e| e.to_string())?;
        m.raw = serde_yaml_ng::from_str(yaml).map_err(|e| e.to_string())?;
        if let Some(ns) = raw.root_namespace.filter(|s| !s.is_empty()) {
            m.root_namespace = ns;
        }
        if let Some(td) = raw.trust_domain.filter(|s| !s.is_empty()) {
            m.trust_domain = td;
        }
        if raw.outbound_traffic_policy.as_ref().is_some_and(|o| o.tls.as_ref().is_some_and(|t| !t.is_null())) {
            m.notes.push(
                "outboundTrafficPolicy.tls: AllowAnyDynamicDNSCluster is built without upstream TLS (its mode DISABLE)"
                    .into(),
            );
        }
        match raw.outbound_traffic_policy.and_then(|o| o.mode).as_deref() {
            None | Some("ALLOW_ANY") => {}
            Some("REGISTRY_ONLY") => m.outbound = OutboundPolicy::RegistryOnly,
            Some("ALLOW_ANY_DYNAMIC_DNS") => m.outbound = OutboundPolicy::AllowAnyDynamicDns,
            Some(other) => m
                .notes
                .push(format!("outboundTrafficPolicy.mode {other:?} is unknown to this version; using ALLOW_ANY")),
        }
        if let Some(b) = raw.enable_auto_mtls {
            m.enable_auto_mtls = b;
        }
        if let Some(t) = raw.tls_defaults {
            if let Some(v) =
                t.min_protocol_version.as_deref().filter(|v| !["TLS_AUTO", "TLSV1_2", "TLSV1_3"].contains(v))
            {
                return Err(format!("tlsDefaults.minProtocolVersion: unknown version {v:?}"));
            }
            m.tls_defaults = t;
        }
        if let Some(t) = raw.mesh_mtls {
            if !t.ecdh_curves.is_empty() {
                return Err("mesh TLS does not support ECDH curves configuration".into());
            }
            if let Some(v) =
                t.min_protocol_version.as_deref().filter(|v| !["TLS_AUTO", "TLSV1_2", "TLSV1_3"].contains(v))
            {
                return Err(format!("meshMTLS.minProtocolVersion: unknown version {v:?}"));
            }
            m.mesh_mtls = t;
        }
        match raw.h2_upgrade_policy.as_deref() {
            None | Some("DO_NOT_UPGRADE") => {}
            Some("UPGRADE") => m.h2_upgrade = true,
            Some(other) => return Err(format!("h2UpgradePolicy: {other:?} is neither DO_NOT_UPGRADE nor UPGRADE")),
        }
        if let Some(k) = raw.tcp_keepalive {
            for (what, d) in [("time", &k.time), ("interval", &k.interval)] {
                if let Some(d) = d {
                    crate::duration::parse(d).map_err(|e| format!("tcpKeepalive.{what}: {e}"))?;
                }
            }
            m.tcp_keepalive = Some(k);
        }
        if let Some(p) = raw.default_traffic_policy {
            validate_default_traffic_policy(&p).map_err(|e| format!("defaultTrafficPolicy: {e}"))?;
            m.default_traffic_policy = p;
        }
        if let Some(d) = raw.default_providers {
            m.default_metrics_providers = d.metrics.unwrap_or_default();
            m.default_access_log_providers = d.access_logging.unwrap_or_default();
            m.default_tracing_providers = d.tracing.unwrap_or_default();
        }
        m.access_log_file = raw.access_log_file.unwrap_or_default();
        m.access_log_json = match raw.access_log_encoding.as_deref().unwrap_or("TEXT") {
            "TEXT" => false,
            "JSON" => true,
            other => return Err(format!("accessLogEncoding: {other:?} is neither TEXT nor JSON")),
        };
        m.access_log_format = raw.access_log_format.unwrap_or_default();
        if let Some(b) = raw.enable_tracing {
            m.enable_tracing = b;
        }
        m.proxy_tracing = m.raw.pointer("/defaultConfig/tracing").cloned().unwrap_or_default();
        let text = |k: &str| m.raw.get(k).and_then(serde_json::Value::as_str).map(str::to_owned);
        if let Some(c) = text("ingressClass") {
            m.ingress.class = c;
        }
        if let Some(s) = text("ingressService") {
            m.ingress.service = s;
        }
        if let Some(s) = text("ingressSelector") {
            m.ingress.selector = s;
        }
        match text("ingressControllerMode").as_deref() {
            None | Some("STRICT") => {}
            Some("OFF") => m.ingress.mode = IngressMode::Off,
            Some("DEFAULT") => m.ingress.mode = IngressMode::Default,
            // UNSPECIFIED, or a newer value: istiod processes nothing.
            Some(other) => {
                m.ingress.mode = IngressMode::Off;
                m.notes.push(format!("ingressControllerMode {other}: no Ingress is read"));
            }
        }
        for p in raw.extension_providers.unwrap_or_default() {
            let Some(name) = p.get("name").and_then(serde_json::Value::as_str) else {
                return Err("extensionProviders: a provider without a name".into());
            };
            // The provider's kind is its one key besides `name`.
            let (kind, settings) = p
                .as_object()
                .and_then(|o| o.iter().find(|(k, _)| *k != "name"))
                .map(|(k, v)| (k.clone(), v.clone()))
                .unwrap_or_default();
            m.extension_providers.insert(name.to_owned(), (kind, settings));
        }
        if let Some(t) = raw.connect_timeout {
            m.connect_timeout = crate::duration::parse(&t).map_err(|e| format!("connectTimeout: {t:?}: {e}"))?;
            // ValidateMeshConfig: at least 1ms, in whole milliseconds
            // (Envoy refuses a zero connect timeout on every cluster).
            if m.connect_timeout < std::time::Duration::from_millis(1)
                || m.connect_timeout.subsec_nanos() % 1_000_000 != 0
            {
                return Err(format!("connectTimeout: {t:?}: must be at least 1ms, in whole milliseconds"));
            }
        }
        if let Some(t) = raw.dns_refresh_rate {
            m.dns_refresh_rate = crate::duration::parse(&t).map_err(|e| format!("dnsRefreshRate: {t:?}: {e}"))?;
        }
        let export = |what: &str, v: Option<Vec<String>>| -> Result<Vec<String>, String> {
            let v = v.unwrap_or_default();
            match v.iter().find(|e| e.is_empty()) {
                Some(_) => Err(format!("{what}: an empty namespace")),
                // `*` alone is the default: kept as none, so nothing is scoped.
                None if v.iter().any(|e| e == "*") => Ok(Vec::new()),
                None => Ok(v),
            }
        };
        m.default_service_export_to = export("defaultServiceExportTo", raw.default_service_export_to)?;
        m.default_virtual_service_export_to =
            export("defaultVirtualServiceExportTo", raw.default_virtual_service_export_to)?;
        // istiod honours only `.` and `*` here (push_context.go
        // setDestinationRules): with `.` among them a rule without
        // `exportTo` is its namespace's, else everyone's.
        let dr = raw.default_destination_rule_export_to.unwrap_or_default();
        export("defaultDestinationRuleExportTo", Some(dr.clone()))?;
        m.default_destination_rule_export_to = if dr.iter().any(|e| e == ".") { vec![".".into()] } else { Vec::new() };
        m.locality_lb_setting = raw.locality_lb_setting;
        m.trust_domain_aliases = raw.trust_domain_aliases.unwrap_or_default();
        m.ca_certificates = raw.ca_certificates.unwrap_or_default();
        m.inbound_localhost = match raw.inbound_traffic_policy.and_then(|p| p.mode).as_deref() {
            None | Some("PASSTHROUGH") => false,
            Some("LOCALHOST") => true,
            Some(other) => {
                return Err(format!("inboundTrafficPolicy.mode: {other:?} is neither PASSTHROUGH nor LOCALHOST"));
            }
        };
        m.discovery_selectors = raw.discovery_selectors.unwrap_or_default();
        for s in &m.discovery_selectors {
            for e in &s.match_expressions {
                if !["In", "NotIn", "Exists", "DoesNotExist"].contains(&e.operator.as_str()) {
                    return Err(format!("discoverySelectors: unknown operator {:?}", e.operator));
                }
            }
        }
        Ok(m)
    }
}

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

#[cfg(test)]
mod tests {
    use super::*;

    /// Upstream `TestValidateMeshConfigDefaultTrafficPolicy`
    /// (pkg/config/validation/agent), in istiod's words; and the parsed
    /// baseline; and `dnsRefreshRate`.
    #[test]
    fn upstream_validate_mesh_config_default_traffic_policy() {
        let parse = |dtp: &str| MeshSettings::parse(&format!("defaultTrafficPolicy: {dtp}"));
        let m = parse("{connectionPool: {tcp: {maxConnections: 100}}, outlierDetection: {maxEjectionPercent: 50}}")
            .unwrap();
        assert_eq!(m.default_traffic_policy.connection_pool.unwrap().tcp.unwrap().max_connections, 100);
        assert_eq!(m.default_traffic_policy.outlier_detection.unwrap().max_ejection_percent, 50);
        for (dtp, err) in [
            ("{connectionPool: {}}", "connection pool must have at least one field"),
            ("{connectionPool: {tcp: {maxConnections: -1}}}", "max connections must be non-negative"),
            ("{outlierDetection: {maxEjectionPercent: 101}}", "percentage 101 is not in range 0..100"),
            ("{connectionPool: {tcp: {connectTimeout: 1.5ms}}}", "only durations to ms precision are supported"),
            (
                "{connectionPool: {http: {h2UpgradePolicy: UPGRADE, useClientProtocol: true}}}",
                "use client protocol must not be true when H2UpgradePolicy is UPGRADE",
            ),
        ] {
            assert_eq!(parse(dtp), Err(format!("defaultTrafficPolicy: {err}")), "{dtp}");
        }
        assert_eq!(MeshSettings::default().dns_refresh_rate, std::time::Duration::from_secs(60));
        assert_eq!(
            MeshSettings::parse("dnsRefreshRate: 5s").unwrap().dns_refresh_rate,
            std::time::Duration::from_secs(5)
        );
    }

    #[test]
    fn defaults_and_overrides() {
        assert_eq!(MeshSettings::parse("").unwrap(), MeshSettings::default());
        let m = MeshSettings::parse(
            "rootNamespace: mesh-root\ntrustDomain: example.org\noutboundTrafficPolicy:\n  mode: REGISTRY_ONLY\n\
             enableAutoMtls: false\naccessLogFile: /dev/stdout\ndefaultConfig:\n  discoveryAddress: istiod:15012\n",
        )
        .unwrap();
        assert_eq!(m.root_namespace, "mesh-root");
        assert_eq!(m.trust_domain, "example.org");
        assert_eq!(m.outbound, OutboundPolicy::RegistryOnly);
        assert!(!m.enable_auto_mtls);
    }

    #[test]
    fn discovery_selectors_select_namespaces() {
        let m = MeshSettings::parse(
            "discoverySelectors:\n- matchLabels: {team: a}\n- matchExpressions:\n  - {key: env, operator: In, values: [prod]}\n  - {key: skip, operator: DoesNotExist}\n",
        )
        .unwrap();
        let l = |pairs: &[(&str, &str)]| pairs.iter().map(|(k, v)| ((*k).to_owned(), (*v).to_owned())).collect();
        assert!(m.discovers(&l(&[("team", "a")])));
        assert!(m.discovers(&l(&[("env", "prod")])));
        assert!(!m.discovers(&l(&[("env", "prod"), ("skip", "")])));
        assert!(!m.discovers(&l(&[("team", "b")])));
        assert!(MeshSettings::default().discovers(&l(&[])), "no selectors: every namespace");
        assert!(MeshSettings::parse("discoverySelectors:\n- matchExpressions: [{key: a, operator: Near}]\n").is_err());
    }

    /// istiod's `ValidateMeshTLSConfig` (upstream `TestValidateMeshConfig`'s
    /// "mesh TLS does not support ECDH curves" case), and the fields
    /// clusters read: `meshMTLS`, `h2UpgradePolicy`, `tcpKeepalive`.
    #[test]
    fn mesh_mtls_h2_upgrade_and_keepalive_are_read_and_checked() {
        let m = MeshSettings::parse(
            "meshMTLS: {minProtocolVersion: TLSV1_3, cipherSuites: [ECDHE-RSA-AES256-GCM-SHA384]}\n\
             h2UpgradePolicy: UPGRADE\ntcpKeepalive: {time: 11s, probes: 3}\n",
        )
        .unwrap();
        assert_eq!(m.mesh_mtls.min_protocol_version.as_deref(), Some("TLSV1_3"));
        assert_eq!(m.mesh_mtls.cipher_suites, ["ECDHE-RSA-AES256-GCM-SHA384"]);
        assert!(m.h2_upgrade);
        assert_eq!(m.tcp_keepalive.as_ref().map(|k| (k.time.as_deref(), k.probes)), Some((Some("11s"), 3)));
        assert!(!MeshSettings::default().h2_upgrade, "DO_NOT_UPGRADE by default");
        assert_eq!(
            MeshSettings::parse("meshMTLS: {ecdhCurves: [P-256]}\n").unwrap_err(),
            "mesh TLS does not support ECDH curves configuration"
        );
        assert!(MeshSettings::parse("h2UpgradePolicy: SOMETIMES\n").is_err());
        assert!(MeshSettings::parse("tcpKeepalive: {time: 1x}\n").is_err());
    }

    #[test]
    fn tls_defaults_are_read_and_checked() {
        let m = MeshSettings::parse("tlsDefaults:\n  minProtocolVersion: TLSV1_3\n  ecdhCurves: [P-256]\n").unwrap();
        assert_eq!(m.tls_defaults.min_protocol_version.as_deref(), Some("TLSV1_3"));
        assert_eq!(m.tls_defaults.ecdh_curves, ["P-256"]);
        assert!(
            MeshSettings::parse("tlsDefaults: {minProtocolVersion: TLSV1_0}\n").is_err(),
            "istiod allows 1.2 and 1.3"
        );
    }

    #[test]
    fn invalid_values_are_errors() {
        assert!(MeshSettings::parse("enableAutoMtls: [1]\n").is_err());
        assert!(MeshSettings::parse(": : :\n- x").is_err());
    }

    /// A mode from a newer Istio (or one this version does not know)
    /// starts with ALLOW_ANY's behaviour and is reported, never fatal
    /// (issue #33).
    #[test]
    fn newer_outbound_modes_start_and_are_reported() {
        let m = MeshSettings::parse("outboundTrafficPolicy:\n  mode: SOMETIMES\n").unwrap();
        assert_eq!(m.outbound, OutboundPolicy::AllowAny);
        assert!(m.notes.iter().any(|n| n.contains("\"SOMETIMES\" is unknown")), "{:?}", m.notes);
        let m = MeshSettings::parse("outboundTrafficPolicy: {mode: ALLOW_ANY_DYNAMIC_DNS}\n").unwrap();
        assert_eq!(m.outbound, OutboundPolicy::AllowAnyDynamicDns);
        assert!(m.outbound.allows_any());
        assert!(m.notes.is_empty(), "{:?}", m.notes);
        assert!(MeshSettings::parse("outboundTrafficPolicy: {mode: REGISTRY_ONLY}\n").unwrap().notes.is_empty());
    }

    #[test]
    fn malformed_text_is_an_error() {
        assert!(MeshSettings::parse("enableAutoMtls: [1]\n").is_err());
        assert!(MeshSettings::parse(": : :\n- x").is_err());
    }
}
