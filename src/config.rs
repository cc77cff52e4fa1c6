//! The typed configuration of a `pilot-discovery discovery` process, built
//! once at startup from its flags and istiod's environment variables. No
//! code reads the environment after this.
//!
//! Defaults are istiod's (1.24 to 1.30, `pilot/pkg/features/*.go`); each
//! field says where its default comes from. As istiod's `env` package, a
//! variable whose value does not parse is logged and its default used; one
//! that parses but is out of range is an error (exit status 2). A variable
//! that is set but empty counts as unset.

pub mod env;

use std::collections::BTreeMap;
use std::fmt;
use std::path::PathBuf;
use std::time::Duration;

use crate::cli::{DiscoveryArgs, TlsVersion};
use env::Vars;
pub use env::{Env, ProcessEnv};

/// Why the configuration could not be built. The process exits with
/// status 2, as for a bad flag.
#[derive(Debug, thiserror::Error)]
pub enum ConfigError {
    /// An environment variable has a value of the wrong form.
    #[error("environment variable {name}={value:?} is invalid: {reason}")]
    Env {
        /// The variable.
        name: &'static str,
        /// Its value.
        value: String,
        /// What was expected.
        reason: String,
    },
    /// A flag's value is well-formed for its type but not acceptable.
    #[error("flag --{flag}={value:?} is invalid: {reason}")]
    Flag {
        /// The flag, without dashes.
        flag: &'static str,
        /// Its value.
        value: String,
        /// What was expected.
        reason: String,
    },
}

/// Everything the server needs to know about how it was started.
#[derive(Debug, Clone, PartialEq)]
pub struct Config {
    /// Where mesh state comes from.
    pub source: Source,
    /// `--registries`: service registries (istiod: Kubernetes, Mock).
    pub registries: Vec<Registry>,
    /// `--domain`: DNS suffix of service hostnames (`cluster.local`).
    pub domain: String,
    /// `--clusterID`, else `CLUSTER_ID`, else `Kubernetes` (features/pilot.go).
    pub cluster_id: String,
    /// `--clusterAliases`: alias to cluster ID.
    pub cluster_aliases: BTreeMap<String, String>,
    /// `PILOT_REMOTE_CLUSTER_TIMEOUT` (30 s): how long a remote cluster
    /// may take to sync before it is reported as timed out.
    pub remote_cluster_timeout: Duration,
    /// WorkloadEntry auto-registration and health checks.
    pub workload_entries: WorkloadEntries,
    /// `PILOT_IP_AUTOALLOCATE_IPV4_PREFIX` (240.240.0.0/16) and
    /// `PILOT_IP_AUTOALLOCATE_IPV6_PREFIX` (2001:2::/48): where
    /// ServiceEntry addresses are allocated.
    pub ip_autoallocate_prefixes: (String, String),
    /// `--meshConfig`: mesh configuration file (built-in defaults if absent).
    pub mesh_config: PathBuf,
    /// `--networksConfig`: mesh networks file.
    pub networks_config: PathBuf,
    /// `--injectionDir`: the injector's `config` and `values`; `None` when
    /// `INJECT_ENABLED` is false.
    pub injection_dir: Option<PathBuf>,
    /// Listen addresses; `None` where istiod would not listen (empty flag).
    pub listen: Listeners,
    /// Serving certificate files (`--tlsCertFile`, `--tlsKeyFile`,
    /// `--caCertFile`); empty when istiod's own CA issues them.
    pub tls: TlsFiles,
    /// gRPC keepalive and connection limits.
    pub keepalive: Keepalive,
    /// Push debounce and throttling.
    pub push: PushTuning,
    /// Where this istiod runs and what it is called.
    pub identity: Identity,
    /// The CA's certificate lifetimes.
    pub ca: istiod_ca::CaConfig,
    /// Logging.
    pub log: LogConfig,
    /// The webhook configurations this server patches (`caBundle`, the
    /// validation failure policy): off where `INJECTION_WEBHOOK_CONFIG_NAME`
    /// or `VALIDATION_WEBHOOK_CONFIG_NAME` is set empty, as in istiod.
    pub webhook_patching: istiod_webhook::patch::Kinds,
    /// `PILOT_CA_CERT_CONFIGMAP`: the root ConfigMap written to every
    /// namespace (`istio-ca-root-cert`).
    pub ca_cert_configmap: String,
    /// `PILOT_ENABLE_CA_CRL` (true) and `PILOT_CRL_CONFIGMAP`
    /// (`istio-ca-crl`): the CRL ConfigMap written beside the root one.
    pub ca_crl_configmap: Option<String>,
    /// `PILOT_FILTER_GATEWAY_CLUSTER_CONFIG` (false): routers get only the
    /// clusters their Gateways' VirtualServices route to.
    pub filter_gateway_clusters: bool,
    /// `ENABLE_CLUSTER_TRUST_BUNDLE_API` (false): the root goes to the
    /// `istio.io:istiod-ca:root-cert` ClusterTrustBundle instead of the
    /// ConfigMaps.
    pub cluster_trust_bundle: bool,
    /// `--ctrlz_address`/`--ctrlz_port`: ControlZ's listener
    /// (`localhost:9876`; `*` for every address).
    pub ctrlz: std::net::SocketAddr,
    /// `--shutdownDuration`: how long a graceful shutdown may take (10s).
    pub shutdown_duration: Duration,
    /// `--profile`: serve /debug/pprof (istiod: true).
    pub profile: bool,
    /// `--cores`: serving cores; `None` means every available core.
    pub cores: Option<usize>,
    /// `--kubernetesApiQPS` (80) and `--kubernetesApiBurst` (160).
    pub kube_api_qps: f32,
    /// See `kube_api_qps`.
    pub kube_api_burst: u32,
    /// `ISTIO_DELTA_XDS` (features/experimental.go): serve delta xDS;
    /// true since Istio 1.22.
    pub delta_xds: bool,
    /// `PILOT_ENABLE_AMBIENT` (features/ambient.go, false): build the
    /// ambient index and serve ztunnels.
    pub ambient: bool,
    /// `AMBIENT_ENABLE_STATUS` (features/ambient.go, true): with ambient,
    /// the elected replica writes the ambient status conditions.
    pub ambient_status: bool,
    /// `NETWORK`: the network of this cluster's workloads (empty).
    pub network: String,
    /// `PILOT_ENABLE_XDS_CACHE` (features/xds.go, true): cache generated
    /// resources.
    pub xds_cache: bool,
    /// `PILOT_JWT_ENABLE_REMOTE_JWKS` (features/pilot.go, "false" = istiod
    /// fetches): who fetches a RequestAuthentication's `jwksUri`.
    pub jwks_fetch: istiod_mesh::meshconfig::JwksFetch,
    /// `PILOT_SCOPE_GATEWAY_TO_NAMESPACE`: a router only takes the
    /// Gateways of its own namespace.
    pub scope_gateway_to_namespace: bool,
    /// `PILOT_ENABLE_ROUTE_COLLAPSE_OPTIMIZATION`: a gateway's virtual
    /// hosts with the same routes become one.
    pub route_collapse: bool,
    /// `PILOT_ENABLE_MULTIPLE_CUSTOM_AUTHZ_PROVIDERS`: a workload's CUSTOM
    /// policies may name several providers (else their rules deny).
    pub multiple_custom_authz_providers: bool,
    /// `ENABLE_TLS_ON_SIDECAR_INGRESS`: a Sidecar `ingress` listener's
    /// `tls` terminates TLS on its port (where mTLS is disabled).
    pub tls_on_sidecar_ingress: bool,
    /// `PILOT_ALLOW_ANY_DYNAMIC_DNS_MAX_HOSTS` (1024): the dynamic forward
    /// proxy's DNS cache size under ALLOW_ANY_DYNAMIC_DNS.
    pub dynamic_dns_max_hosts: u32,
    /// `K8S_INGRESS_NS` (istio-system): where the Gateways made of
    /// Kubernetes Ingresses live (the ingress gateway's namespace).
    pub ingress_namespace: String,
    /// `ENABLE_DEBUG_ON_HTTP` (true): the debug handlers are served on the
    /// monitoring port too (loopback callers only), as istiod serves them.
    pub debug_on_http: bool,
    /// `ENABLE_XDS_API_GENERATOR_AUTH` (true): types the server does not
    /// serve are answered only to authenticated callers of the root
    /// namespace (istiod's api generator).
    pub xds_api_generator_auth: bool,
    /// `ENABLE_DEBUG_ENDPOINT_AUTH` (true): debug over xDS needs an
    /// authenticated caller, and one outside the root namespace sees only
    /// its namespace's proxies and `config_dump`/`edsz`/`ndsz`.
    pub debug_endpoint_auth: bool,
    /// `UNSAFE_ENABLE_ADMIN_ENDPOINTS` (false): `/debug/force_disconnect`.
    pub unsafe_admin_endpoints: bool,
    /// `ENABLE_MULTICLUSTER_HEADLESS`, `ISTIO_DUAL_STACK` and
    /// `PILOT_ENABLE_IP_AUTOALLOCATE`: how name tables are made.
    pub dns: istiod_mesh::meshconfig::DnsSettings,
    /// `PILOT_ENABLE_K8S_SELECT_WORKLOAD_ENTRIES` and
    /// `PILOT_ENABLE_SERVICEENTRY_SELECT_PODS` (both true).
    pub cross_selection: (bool, bool),
    /// `PILOT_SEND_UNHEALTHY_ENDPOINTS` (false),
    /// `PILOT_AUTO_SEND_UNHEALTHY_ENDPOINTS` (true).
    pub unhealthy: istiod_mesh::meshconfig::UnhealthyEndpoints,
    /// `PILOT_PERSISTENT_SESSION_LABEL`,
    /// `PILOT_PERSISTENT_SESSION_HEADER_LABEL`.
    pub persistent_session_labels: [String; 2],
    /// `PILOT_DRAINING_LABEL`.
    pub draining_label: String,
    /// `METRICS_LOCALHOST_ACCESS_ONLY` (false): `/metrics` for loopback
    /// callers only.
    pub metrics_localhost_only: bool,
    /// `JWKS_RESOLVER_INSECURE_SKIP_VERIFY` (false).
    pub jwks_insecure_skip_verify: bool,
    /// `BLOCKED_CIDRS_IN_JWKS_URIS` (comma-separated CIDRs).
    pub jwks_blocked_cidrs: String,
    /// `PILOT_SKIP_VALIDATE_TRUST_DOMAIN` (false).
    pub skip_validate_trust_domain: bool,
    /// `PILOT_DISABLE_MX_ALPN` (false).
    pub disable_mx_alpn: bool,
    /// `DISABLE_TRACK_REMAINING_CB_METRICS` (true), inverted.
    pub track_remaining: bool,
    /// `PILOT_ENABLE_MONGO_FILTER` (true), `PILOT_ENABLE_REDIS_FILTER` (false).
    pub protocol_filters: istiod_mesh::meshconfig::ProtocolFilters,
    /// `PILOT_ENABLE_EDS_FOR_HEADLESS_SERVICES` (false).
    pub eds_for_headless: bool,
    /// `PILOT_DNS_CARES_UDP_MAX_QUERIES` and `PILOT_DNS_JITTER_DURATION`:
    /// DNS clusters' resolver.
    pub dns_resolver: istiod_mesh::meshconfig::DnsResolver,
    /// `PILOT_ENABLE_TELEMETRY_LABEL`, `PILOT_ENDPOINT_TELEMETRY_LABEL`.
    pub telemetry_labels: (bool, bool),
    /// `PILOT_HTTP10`, `PILOT_SIDECAR_USE_REMOTE_ADDRESS`,
    /// `ENABLE_HCM_INTERNAL_NETWORKS` (all false).
    pub http_switches: (bool, bool, bool),
    /// The switches each read in one place of translation
    /// (`PILOT_ENABLE_ABSOLUTE_FQDN_VHOST_DOMAIN`, ...).
    pub features: istiod_mesh::meshconfig::Features,
    /// `PILOT_ENABLE_METADATA_EXCHANGE` (true), `PILOT_ENABLE_ALPN_FILTER`
    /// (true), `PILOT_MX_ADDITIONAL_LABELS` (comma-separated; sorted, each
    /// once, as istiod's).
    pub mx: (bool, bool, Vec<String>),
    /// `ENABLE_100_CONTINUE_HEADERS` (true), `DISABLE_SHADOW_HOST_SUFFIX`
    /// (true), `MAX_CONNECTIONS_PER_SOCKET_EVENT_LOOP` (1).
    pub http_defaults: (bool, bool, u32),
    /// `PILOT_GATEWAY_TRANSPORT_SOCKET_CONNECT_TIMEOUT` (15s; 0: none).
    pub gateway_handshake_timeout: Option<Duration>,
    /// `PILOT_HBONE_INITIAL_STREAM_WINDOW_SIZE`,
    /// `PILOT_HBONE_INITIAL_CONNECTION_WINDOW_SIZE`.
    pub hbone_window_sizes: [u32; 2],
    /// `PILOT_TRACE_SAMPLING` (1.0): the percentage of requests traced.
    pub trace_sampling: f64,
    /// `PILOT_ENVOY_FILTER_STATS` (features/pilot.go, false):
    /// `pilot_envoy_filter_status` is recorded.
    pub envoy_filter_stats: bool,
    /// `PILOT_GATEWAY_API_CONTROLLER_NAME` (`istio.io/gateway-controller`)
    /// and `PILOT_GATEWAY_API_DEFAULT_GATEWAYCLASS_NAME` (`istio`): the
    /// controller the GatewayClasses handled name, and the default class.
    pub gateway_api_names: (String, String),
    /// `ISTIO_WATCH_NAMESPACE` (empty: all): the one namespace whose
    /// namespaced objects are read, and whose root ConfigMap is kept.
    pub watch_namespace: String,
    /// `K_REVISION` set (istiod runs in Knative): the first xDS stream is
    /// refused with `Unavailable` (ads.go `firstRequest`).
    pub knative: bool,
    /// `DEBUG_ENDPOINT_AUTH_ALLOWED_NAMESPACES` (comma-separated, as
    /// istiod splits it): callers of these namespaces reach every debug
    /// path, as the root namespace's do.
    pub debug_allowed_namespaces: Vec<String>,
    /// `ISTIOD_RS_WHATIF_MAX_CLASSES` (50; istiod-rs only): the classes of
    /// proxies one page of a what-if answer (`/debug/whatif`) carries in
    /// full; the rest are counted and paged (`?page=`).
    pub whatif_max_classes: usize,
    /// Environment values that did not parse, each replaced by its default
    /// (logged at start, as istiod's `env` package logs them).
    pub env_warnings: Vec<String>,
    /// The kinds read: `PILOT_ENABLE_GATEWAY_API` (true),
    /// `PILOT_IGNORE_RESOURCES`, `PILOT_INCLUDE_RESOURCES`.
    pub read_filter: istiod_config::objects::ReadFilter,
    /// `PILOT_ENABLE_ANALYSIS` (false): istiod's analyzers run after
    /// changes; their messages go to the log, `/debug/config_report` and,
    /// in a cluster, the objects' `status.validationMessages`.
    pub analysis: bool,
    /// `PILOT_ANALYSIS_INTERVAL` (10s): the analysis runs once changes have
    /// been quiet for a second, or this long after the first of them
    /// (istiod's debouncer); under a second is taken as 10s, with
    /// istiod's warning.
    pub analysis_interval: Duration,
    /// `PILOT_ENABLE_NODE_UNTAINT_CONTROLLERS` (false): the taint
    /// (`PILOT_NODE_UNTAINT_CONTROLLERS_TAINT_NAME`) removed from nodes
    /// whose istio-cni pod is ready.
    pub node_untaint: Option<String>,
    /// `PILOT_ENABLE_GATEWAY_API_GATEWAYCLASS_CONTROLLER` (true): the
    /// built-in GatewayClasses are created where missing.
    pub gateway_classes: bool,
    /// `PILOT_MULTI_NETWORK_DISCOVER_GATEWAY_API` (true): Gateway API
    /// Gateways labelled with a network are east-west gateways, and the
    /// `istio-remote` GatewayClass is created.
    pub discover_gateway_api_gateways: bool,
    /// `ISTIO_MULTIROOT_MESH` (false): PCDS sends the workload trust bundle.
    pub multiroot_mesh: bool,
    /// `PILOT_ENABLE_GATEWAY_API_STATUS` (true): Gateway API objects get
    /// their status conditions (with `PILOT_ENABLE_GATEWAY_API`).
    pub gateway_api_status: bool,
    /// `PILOT_ENABLE_GATEWAY_API_DEPLOYMENT_CONTROLLER` (true): Gateway API
    /// Gateways get a Deployment, Service and ServiceAccount.
    pub gateway_deployment: bool,
    /// The deployment controller's other switches
    /// (`PILOT_ENABLE_GATEWAY_API_COPY_LABELS_ANNOTATIONS`,
    /// `PILOT_ENABLE_AMBIENT_WAYPOINTS`,
    /// `ENABLE_GATEWAY_API_MANUAL_DEPLOYMENT`, `CLUSTER_ID`).
    pub gateway_deployment_settings: istiod_webhook::inject::gateway::Settings,
    /// `PILOT_JWT_PUB_KEY_REFRESH_INTERVAL` (features/pilot.go, 20m): how
    /// often istiod refetches the key sets it fetched.
    pub jwks_refresh: Duration,
    /// istiod-rs's own bounds on what clients and files may cost
    /// (docs/security.md).
    pub limits: InputLimits,
}

/// Bounds on hostile or careless input that istiod has no setting for
/// (`ISTIOD_RS_*`; docs/security.md lists each with what a client sees).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct InputLimits {
    /// `ISTIOD_RS_MAX_NODE_BYTES` (64 KiB): largest node (id and metadata)
    /// a stream's first request may carry.
    pub max_node_bytes: usize,
    /// `ISTIOD_RS_MAX_RESPONSE_BYTES` (2 GiB - 1, grpc-go's send limit):
    /// largest xDS response; a larger one ends its stream with
    /// RESOURCE_EXHAUSTED.
    pub max_response_bytes: usize,
    /// `ISTIOD_RS_MAX_NAMES_PER_STREAM` (200,000): resource names one xDS
    /// stream may subscribe to.
    pub max_names_per_stream: usize,
    /// `ISTIOD_RS_CONFIG_MAX_FILE_BYTES` (32 MiB) and
    /// `ISTIOD_RS_CONFIG_MAX_DOCUMENTS` (10,000): what `--configDir` reads
    /// of one file.
    pub config_dir: istiod_kubewatch::config_dir::Limits,
}

/// Where the mesh model is read from.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Source {
    /// `--configDir`: a directory of YAML/JSON manifests.
    ConfigDir(PathBuf),
    /// A Kubernetes API server: `--kubeconfig`, or in-cluster config when
    /// `None`.
    Kubernetes {
        /// The kubeconfig file.
        kubeconfig: Option<PathBuf>,
    },
}

/// `--registries` values istiod accepts.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Registry {
    /// Services from Kubernetes (or `--configDir`).
    Kubernetes,
    /// istiod's in-memory test registry; accepted for compatibility and
    /// empty here.
    Mock,
}

/// A Go-style listen address: `host:port`, where an empty host means every
/// local address (`:15010`).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ListenAddr {
    /// Host name or IP literal (IPv6 without brackets); empty for all.
    pub host: String,
    /// TCP port; 0 asks the kernel for one.
    pub port: u16,
}

impl ListenAddr {
    /// Parses Go's `net.Listen` address form: `:8080`, `127.0.0.1:8080`,
    /// `[::1]:8080`, `localhost:8080`.
    pub fn parse(s: &str) -> Result<Self, String> {
        let (host, port) =
            s.rsplit_once(':').ok_or_else(|| "expected host:port, e.g. :15010 or 127.0.0.1:15010".to_owned())?;
        let host = if let Some(inner) = host.strip_prefix('[') {
            inner.strip_suffix(']').ok_or_else(|| "unbalanced [ in IPv6 host".to_owned())?
        } else if host.contains(':') {
            return Err("an IPv6 host must be in brackets, e.g. [::1]:15010".to_owned());
        } else {
            host
        };
        if host.contains(['[', ']', '/', ' ']) {
            return Err(format!("invalid host {host:?}"));
        }
        let port = port.parse::<u16>().map_err(|_| format!("invalid port {port:?}: expected 0-65535"))?;
        Ok(Self { host: host.to_owned(), port })
    }
}

impl fmt::Display for ListenAddr {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        if self.host.contains(':') {
            write!(f, "[{}]:{}", self.host, self.port)
        } else {
            write!(f, "{}:{}", self.host, self.port)
        }
    }
}

/// The ports istiod listens on.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Listeners {
    /// `--grpcAddr` (`:15010`): plaintext xDS.
    pub grpc: Option<ListenAddr>,
    /// `--secureGRPCAddr` (`:15012`): TLS xDS and CA.
    pub secure_grpc: Option<ListenAddr>,
    /// `--httpAddr` (`:8080`): debug endpoints and `/ready`.
    pub http: Option<ListenAddr>,
    /// `--httpsAddr` (`:15017`): injection and validation webhooks.
    pub https: Option<ListenAddr>,
    /// `--monitoringAddr` (`:15014`): Prometheus `/metrics`.
    pub monitoring: Option<ListenAddr>,
}

/// Serving certificate files and TLS policy.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct TlsFiles {
    /// `--tlsCertFile`.
    pub cert: Option<PathBuf>,
    /// `--tlsKeyFile`.
    pub key: Option<PathBuf>,
    /// `--caCertFile`.
    pub ca_cert: Option<PathBuf>,
    /// `--tls-min-version` (1.2).
    pub min_version: TlsVersion,
    /// `--tls-cipher-suites`: Go cipher suite names; empty for defaults.
    pub cipher_suites: Vec<String>,
    /// `COMPLIANCE_POLICY` (empty, `fips-140-2`, `fips-140-3`, `pqc`).
    pub compliance: String,
}

/// WorkloadEntry auto-registration and health checks
/// (`pilot/pkg/autoregistration`).
#[derive(Debug, Clone, PartialEq)]
pub struct WorkloadEntries {
    /// `PILOT_ENABLE_WORKLOAD_ENTRY_AUTOREGISTRATION` (true).
    pub autoregistration: bool,
    /// `PILOT_ENABLE_WORKLOAD_ENTRY_HEALTHCHECKS` (true).
    pub health_checks: bool,
    /// `PILOT_WORKLOAD_ENTRY_GRACE_PERIOD` (10s): how long a disconnected
    /// proxy's entry stays.
    pub grace: Duration,
    /// `ISTIO_WORKLOAD_ENTRY_VALIDATE_IDENTITY` (true): the proxy's
    /// verified identity must be the entry's namespace and service account.
    pub validate_identity: bool,
}

/// gRPC connection keepalive (istiod pkg/keepalive).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Keepalive {
    /// `--keepaliveInterval`, else `GRPC_KEEPALIVE_INTERVAL`, else 30s: idle
    /// time before a PING.
    pub interval: Duration,
    /// `--keepaliveTimeout`, else `GRPC_KEEPALIVE_TIMEOUT`, else 10s: how
    /// long a PING may go unanswered.
    pub timeout: Duration,
    /// `--keepaliveMaxServerConnectionAge`: connection lifetime before a
    /// graceful GOAWAY; `None` is unlimited (istiod: max int64).
    pub max_connection_age: Option<Duration>,
    /// Grace period after the age GOAWAY before the connection is closed;
    /// istiod fixes it at 10s.
    pub max_connection_age_grace: Duration,
    /// `ISTIO_GPRC_MAXSTREAMS` (sic; features/tuning.go, 100000): concurrent
    /// streams per connection.
    pub max_concurrent_streams: u32,
    /// `ISTIO_GPRC_MAXRECVMSGSIZE` (sic; 4 MiB): largest gRPC message
    /// accepted.
    pub max_recv_msg_size: u32,
}

/// When pushes happen (istiod features/tuning.go).
#[derive(Debug, Clone, PartialEq)]
pub struct PushTuning {
    /// `PILOT_DEBOUNCE_AFTER` (100ms): quiet period after a change before
    /// a push.
    pub debounce_after: Duration,
    /// `PILOT_DEBOUNCE_MAX` (10s): longest a push waits while changes keep
    /// coming.
    pub debounce_max: Duration,
    /// `PILOT_ENABLE_EDS_DEBOUNCE` (true): endpoint-only changes are
    /// debounced too; when false they push at once.
    pub eds_debounce: bool,
    /// `PILOT_PUSH_THROTTLE` (0 = automatic since 1.21, istiod's
    /// `min(15 + 5 * cores, 100)`): connections a core pushes a snapshot to
    /// before it lets its connections read and write again.
    pub push_throttle: u32,
    /// `PILOT_MAX_REQUESTS_PER_SECOND` (0 = automatic since 1.21): new xDS
    /// streams accepted per second, same automatic rule.
    pub max_requests_per_second: f64,
    /// `ISTIOD_RS_WRITE_COPY_BELOW` (32; istiod-rs only, for benchmarks):
    /// response pieces shorter than this are copied next to the frame
    /// heads, longer ones written from where they are (shared by every
    /// connection). A huge value copies everything into one buffer.
    pub write_copy_below: usize,
    /// `ISTIOD_RS_RING_DEPTH` (4096; istiod-rs only, for benchmarks):
    /// submission entries of each of a serving core's io_uring rings, 1 to
    /// 32768 (`istiod_xds::server::RING_DEPTH`).
    pub ring_depth: usize,
}

/// Names and namespace of this istiod.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Identity {
    /// `POD_NAME` (empty).
    pub pod_name: String,
    /// `POD_NAMESPACE` (`istio-system`), overridden by `--namespace`.
    pub namespace: String,
    /// `--cniNamespace`, else the namespace.
    pub cni_namespace: String,
    /// `--clusterRegistriesNamespace`, else the namespace.
    pub cluster_registries_namespace: String,
    /// `REVISION` (empty, meaning `default`): the `istio.io/rev` served.
    pub revision: String,
    /// `ISTIOD_CUSTOM_HOST`: extra hostnames for the serving certificate.
    pub custom_hosts: Vec<String>,
    /// `PILOT_CERT_PROVIDER` (`istiod`): who issues istiod's own
    /// serving certificate: `istiod` its CA; `none` nobody (and the root
    /// is not distributed); `kubernetes` is refused, as istiod refuses
    /// it; any other (`k8s.io/<signer>`, `custom`) issues none, with
    /// istiod's warning, unless `--tlsCertFile` gives one.
    pub cert_provider: String,
    /// `SHARED_MESH_CONFIG` (empty): a ConfigMap in istiod's namespace
    /// whose `mesh` the mesh configuration applies over.
    pub shared_mesh_config: String,
    /// `EXTERNAL_ISTIOD` (false): istiod runs outside the clusters it
    /// serves; it keeps the root ConfigMaps and the webhooks' `caBundle`
    /// of the remote clusters whose system namespace names this cluster in
    /// `topology.istio.io/controlPlaneClusters`.
    pub external_istiod: bool,
    /// `ENABLE_LEADER_ELECTION` (true): false makes this replica lead
    /// every election without asking (one replica only).
    pub leader_election: bool,
}

impl Identity {
    /// istiod's serving certificate names (`getDNSNames`):
    /// `ISTIOD_CUSTOM_HOST` and `istiod`, `istiod-remote`, `istio-pilot`
    /// (and `istiod-<revision>`) in `<namespace>.svc`, sorted.
    pub fn dns_names(&self) -> Vec<String> {
        let mut known = vec!["istiod".to_owned(), "istiod-remote".into(), "istio-pilot".into()];
        if !self.revision.is_empty() && self.revision != "default" {
            known.push(format!("istiod-{}", self.revision));
        }
        let mut names: Vec<String> = known.iter().map(|h| format!("{h}.{}.svc", self.namespace)).collect();
        names.extend(self.custom_hosts.iter().cloned());
        names.sort();
        names.dedup();
        names
    }
}

/// Log levels istiod's `--log_output_level` accepts.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord)]
pub enum LogLevel {
    /// Nothing at all.
    None,
    /// Fatal errors only.
    Fatal,
    /// Errors.
    Error,
    /// Warnings and errors.
    Warn,
    /// The default.
    Info,
    /// Everything.
    Debug,
}

impl LogLevel {
    fn parse(s: &str) -> Option<Self> {
        Some(match s {
            "none" => Self::None,
            "fatal" => Self::Fatal,
            "error" => Self::Error,
            "warn" => Self::Warn,
            "info" => Self::Info,
            "debug" => Self::Debug,
            _ => return None,
        })
    }
}

/// Logging settings.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct LogConfig {
    /// Level of scopes not named in `scopes` (istiod: `default:info`).
    pub default: LogLevel,
    /// Levels of named scopes (istiod's base sets `grpc:none`).
    pub scopes: BTreeMap<String, LogLevel>,
    /// `--log_as_json`.
    pub json: bool,
    /// `--log_target`: `stdout`, `stderr` or files.
    pub targets: Vec<String>,
    /// `--log_caller`: scopes that log their caller.
    pub caller: Vec<String>,
    /// `--log_stacktrace_level`: the level from which lines of scopes not
    /// in `stack_scopes` carry a stack trace (istiod: `default:none`).
    pub stack_default: LogLevel,
    /// Stack trace levels of named scopes.
    pub stack_scopes: BTreeMap<String, LogLevel>,
}

impl LogConfig {
    /// Parses `scope:level,...` on top of istiod's base `default:info,grpc:none`.
    pub fn parse_levels(spec: &str) -> Result<(LogLevel, BTreeMap<String, LogLevel>), String> {
        Self::parse_levels_on(spec, LogLevel::Info, BTreeMap::from([("grpc".to_owned(), LogLevel::None)]))
    }

    /// Parses `scope:level,...` on top of a base.
    pub fn parse_levels_on(
        spec: &str,
        mut default: LogLevel,
        mut scopes: BTreeMap<String, LogLevel>,
    ) -> Result<(LogLevel, BTreeMap<String, LogLevel>), String> {
        let mut all = None;
        for item in spec.split(',').map(str::trim).filter(|s| !s.is_empty()) {
            let (scope, level) = item.rsplit_once(':').unwrap_or(("default", item));
            let level = LogLevel::parse(level).ok_or_else(|| format!("invalid level {level:?} for scope {scope:?}"))?;
            match scope {
                "default" => default = level,
                "all" => all = Some(level),
                _ => {
                    scopes.insert(scope.to_owned(), level);
                }
            }
        }
        if let Some(level) = all {
            default = level;
            scopes.values_mut().for_each(|l| *l = level);
        }
        Ok((default, scopes))
    }
}

/// ControlZ's address as istiod resolves it: `localhost` is loopback,
/// `*` every address, anything else an IP address.
fn ctrlz_addr(address: &str, port: u16) -> Result<std::net::SocketAddr, ConfigError> {
    let ip = match address {
        "localhost" => std::net::IpAddr::from([127, 0, 0, 1]),
        "*" | "" => std::net::IpAddr::from([0, 0, 0, 0]),
        other => other.trim_matches(['[', ']']).parse().map_err(|_| ConfigError::Flag {
            flag: "ctrlz_address",
            value: other.to_owned(),
            reason: "expected localhost, * or an IP address".into(),
        })?,
    };
    Ok(std::net::SocketAddr::new(ip, port))
}

/// Default listen addresses must parse; a helper for the flags.
fn listen(flag: &'static str, value: &str) -> Result<Option<ListenAddr>, ConfigError> {
    if value.is_empty() {
        return Ok(None);
    }
    ListenAddr::parse(value).map(Some).map_err(|reason| ConfigError::Flag { flag, value: value.to_owned(), reason })
}

/// A duration where zero stands for `default` (grpc-go's reading of a zero
/// keepalive setting).
fn nonzero(d: Duration, default: Duration) -> Duration {
    if d.is_zero() { default } else { d }
}

/// A size or count that must be at least 1.
fn positive(vars: &Vars<'_>, name: &'static str, default: usize) -> Result<usize, ConfigError> {
    match vars.int(name, default)? {
        0 => Err(ConfigError::Env { name, value: "0".into(), reason: "must be at least 1".into() }),
        n => Ok(n),
    }
}

fn opt_path(s: &str) -> Option<PathBuf> {
    (!s.is_empty()).then(|| PathBuf::from(s))
}

impl Config {
    /// The effective configuration in one line: what an operator checks
    /// first (the source, the listeners, cores, identity), not every knob.
    pub fn summary(&self) -> String {
        let source = match &self.source {
            Source::ConfigDir(d) => format!("configDir={}", d.display()),
            Source::Kubernetes { kubeconfig: Some(k) } => format!("kubeconfig={}", k.display()),
            Source::Kubernetes { kubeconfig: None } => "kubernetes=in-cluster".into(),
        };
        let addr = |a: &Option<ListenAddr>| a.as_ref().map_or_else(|| "off".to_owned(), ToString::to_string);
        format!(
            "configuration: {source} grpc={} secureGRPC={} http={} https={} monitoring={} cores={} cluster={} \
             domain={} namespace={} revision={} meshConfig={} logLevel={}",
            addr(&self.listen.grpc),
            addr(&self.listen.secure_grpc),
            addr(&self.listen.http),
            addr(&self.listen.https),
            addr(&self.listen.monitoring),
            self.cores.map_or_else(|| "all".to_owned(), |c| c.to_string()),
            self.cluster_id,
            self.domain,
            self.identity.namespace,
            istiod_kubewatch::kapi::revision_label(&self.identity.revision),
            self.mesh_config.display(),
            format!("{:?}", self.log.default).to_lowercase(),
        )
    }

    /// The settings given that istiod-rs accepts, as istiod does, but does
    /// not act on yet: one line each, for the log at start (istiod logs the
    /// settings it deprecates the same way). Defaults are not listed.
    pub fn not_yet_supported(&self) -> Vec<String> {
        let mut out = Vec::new();
        let p = &self.push;
        if p.max_requests_per_second != 0.0 {
            out.push(format!(
                "PILOT_MAX_REQUESTS_PER_SECOND={}: new xDS streams are not rate-limited",
                p.max_requests_per_second
            ));
        }
        if !self.delta_xds {
            out.push("ISTIO_DELTA_XDS=false: delta xDS is served all the same".into());
        }
        if !self.xds_cache {
            out.push("PILOT_ENABLE_XDS_CACHE=false: generated resources are cached all the same".into());
        }
        out
    }

    /// Builds the configuration from parsed flags and an environment.
    pub fn new(args: &DiscoveryArgs, env: &dyn Env) -> Result<Self, ConfigError> {
        let vars = Vars::new(env);

        let registries = args
            .registries
            .iter()
            .map(|r| match r.as_str() {
                "Kubernetes" => Ok(Registry::Kubernetes),
                "Mock" => Ok(Registry::Mock),
                _ => Err(ConfigError::Flag {
                    flag: "registries",
                    value: r.clone(),
                    reason: "expected Kubernetes or Mock".into(),
                }),
            })
            .collect::<Result<Vec<_>, _>>()?;

        let mut cluster_aliases = BTreeMap::new();
        for alias in args.cluster_aliases.iter().filter(|a| !a.is_empty()) {
            let bad = |reason: &str| ConfigError::Flag {
                flag: "clusterAliases",
                value: alias.clone(),
                reason: reason.into(),
            };
            let (from, to) = alias.split_once('=').ok_or_else(|| bad("expected alias=clusterID"))?;
            if cluster_aliases.values().any(|v| v == to) {
                return Err(bad("a cluster ID may have only one alias"));
            }
            cluster_aliases.insert(from.to_owned(), to.to_owned());
        }

        let source = if args.config_dir.is_empty() {
            Source::Kubernetes { kubeconfig: opt_path(&args.kubeconfig) }
        } else {
            Source::ConfigDir(PathBuf::from(&args.config_dir))
        };

        let namespace = args.namespace.clone().unwrap_or_else(|| vars.string("POD_NAMESPACE", "istio-system"));
        let (default_level, scopes) = LogConfig::parse_levels(&args.log_output_level).map_err(|reason| {
            ConfigError::Flag { flag: "log_output_level", value: args.log_output_level.clone(), reason }
        })?;
        let (stack_default, stack_scopes) =
            LogConfig::parse_levels_on(&args.log_stacktrace_level, LogLevel::None, BTreeMap::new()).map_err(
                |reason| ConfigError::Flag {
                    flag: "log_stacktrace_level",
                    value: args.log_stacktrace_level.clone(),
                    reason,
                },
            )?;

        let cores = match args.cores {
            0 => None,
            n => Some(n),
        };
        let max_recv_msg_size = vars.int("ISTIO_GPRC_MAXRECVMSGSIZE", 4 * 1024 * 1024_u32)?;
        if max_recv_msg_size == 0 {
            return Err(ConfigError::Env {
                name: "ISTIO_GPRC_MAXRECVMSGSIZE",
                value: "0".into(),
                reason: "must be at least 1 byte".into(),
            });
        }

        let gateway_api = vars.bool("PILOT_ENABLE_GATEWAY_API", true)?;
        let cert_provider = vars.string("PILOT_CERT_PROVIDER", "istiod");
        if cert_provider == "kubernetes" {
            // istiod's log.Fatal: no mitigation, the user must choose another.
            return Err(ConfigError::Env {
                name: "PILOT_CERT_PROVIDER",
                value: cert_provider,
                reason: "PILOT_CERT_PROVIDER=kubernetes is no longer supported by upstream K8S".into(),
            });
        }
        // istiod's maybeCreateCA / createIstioRA: a Kubernetes RA needs
        // the API server, and no other external CA exists.
        // (Only where the CA serves, as istiod reads them.)
        let external_ca = vars.string("EXTERNAL_CA", "");
        let external_signer = match external_ca.as_str() {
            "" => None,
            _ if !vars.bool("ENABLE_CA_SERVER", true)? => None,
            istiod_ca::k8s_signer::KUBERNETES_API if matches!(source, Source::ConfigDir(_)) => {
                return Err(ConfigError::Env {
                    name: "EXTERNAL_CA",
                    value: external_ca,
                    reason: "failed to create RA: kubeClient is nil".into(),
                });
            }
            istiod_ca::k8s_signer::KUBERNETES_API => Some(vars.string("K8S_SIGNER", "")),
            _ => {
                return Err(ConfigError::Env {
                    name: "EXTERNAL_CA",
                    reason: format!("failed to create RA: invalid CA Name {external_ca}"),
                    value: external_ca,
                });
            }
        };
        // PILOT_CERT_PROVIDER=k8s.io/<signer>: istiod signs its own
        // certificate through its Kubernetes RA (initDNSCertsK8SRA uses
        // it); without one istiod cannot start (it dereferences none).
        let k8s_serving_signer = cert_provider.strip_prefix("k8s.io/").map(str::to_owned);
        if k8s_serving_signer.is_some() && external_signer.is_none() && vars.bool("ENABLE_CA_SERVER", true)? {
            return Err(ConfigError::Env {
                name: "PILOT_CERT_PROVIDER",
                value: cert_provider,
                reason: "a k8s.io/ signer needs the Kubernetes RA (EXTERNAL_CA=ISTIOD_RA_KUBERNETES_API)".into(),
            });
        }
        let mut config = Self {
            source,
            registries,
            domain: args.domain.clone(),
            cluster_id: args.cluster_id.clone().unwrap_or_else(|| vars.string("CLUSTER_ID", "Kubernetes")),
            remote_cluster_timeout: vars.duration("PILOT_REMOTE_CLUSTER_TIMEOUT", Duration::from_secs(30))?,
            ip_autoallocate_prefixes: (
                vars.string("PILOT_IP_AUTOALLOCATE_IPV4_PREFIX", "240.240.0.0/16"),
                vars.string("PILOT_IP_AUTOALLOCATE_IPV6_PREFIX", "2001:2::/48"),
            ),
            workload_entries: WorkloadEntries {
                autoregistration: vars.bool("PILOT_ENABLE_WORKLOAD_ENTRY_AUTOREGISTRATION", true)?,
                health_checks: vars.bool("PILOT_ENABLE_WORKLOAD_ENTRY_HEALTHCHECKS", true)?,
                grace: vars.duration("PILOT_WORKLOAD_ENTRY_GRACE_PERIOD", Duration::from_secs(10))?,
                validate_identity: vars.bool("ISTIO_WORKLOAD_ENTRY_VALIDATE_IDENTITY", true)?,
            },
            cluster_aliases,
            mesh_config: PathBuf::from(&args.mesh_config),
            networks_config: PathBuf::from(&args.networks_config),
            injection_dir: vars.bool("INJECT_ENABLED", true)?.then(|| PathBuf::from(&args.injection_dir)),
            listen: Listeners {
                grpc: listen("grpcAddr", &args.grpc_addr)?,
                secure_grpc: listen("secureGRPCAddr", &args.secure_grpc_addr)?,
                http: listen("httpAddr", &args.http_addr)?,
                https: listen("httpsAddr", &args.https_addr)?,
                monitoring: listen("monitoringAddr", &args.monitoring_addr)?,
            },
            tls: TlsFiles {
                cert: opt_path(&args.tls_cert_file),
                key: opt_path(&args.tls_key_file),
                ca_cert: opt_path(&args.ca_cert_file),
                min_version: args.tls_min_version,
                cipher_suites: args.tls_cipher_suites.iter().filter(|s| !s.is_empty()).cloned().collect(),
                compliance: vars.string("COMPLIANCE_POLICY", ""),
            },
            // Zero means what it means to grpc-go, which istiod hands these
            // to (internal/transport/http2_server.go): keepalive time 2h,
            // timeout 20s, no connection age limit, no stream limit.
            keepalive: Keepalive {
                interval: nonzero(
                    match args.keepalive_interval {
                        Some(d) => d,
                        None => vars.duration("GRPC_KEEPALIVE_INTERVAL", Duration::from_secs(30))?,
                    },
                    Duration::from_secs(2 * 3600),
                ),
                timeout: nonzero(
                    match args.keepalive_timeout {
                        Some(d) => d,
                        None => vars.duration("GRPC_KEEPALIVE_TIMEOUT", Duration::from_secs(10))?,
                    },
                    Duration::from_secs(20),
                ),
                max_connection_age: args.keepalive_max_server_connection_age.filter(|d| !d.is_zero()),
                max_connection_age_grace: Duration::from_secs(10),
                max_concurrent_streams: match vars.int("ISTIO_GPRC_MAXSTREAMS", 100_000)? {
                    0 => u32::MAX,
                    n => n,
                },
                max_recv_msg_size,
            },
            push: PushTuning {
                debounce_after: vars.duration("PILOT_DEBOUNCE_AFTER", Duration::from_millis(100))?,
                debounce_max: vars.duration("PILOT_DEBOUNCE_MAX", Duration::from_secs(10))?,
                eds_debounce: vars.bool("PILOT_ENABLE_EDS_DEBOUNCE", true)?,
                push_throttle: vars.int::<i64>("PILOT_PUSH_THROTTLE", 0)?.clamp(0, i64::from(u32::MAX)) as u32,
                max_requests_per_second: vars.float("PILOT_MAX_REQUESTS_PER_SECOND", 0.0)?.max(0.0),
                write_copy_below: vars
                    .int::<i64>("ISTIOD_RS_WRITE_COPY_BELOW", istiod_xds::h2::out::COPY_BELOW as i64)?
                    .max(0) as usize,
                ring_depth: match vars.int("ISTIOD_RS_RING_DEPTH", istiod_xds::server::RING_DEPTH)? {
                    d @ 1..=istiod_xds::server::MAX_RING_DEPTH => d,
                    d => {
                        return Err(ConfigError::Env {
                            name: "ISTIOD_RS_RING_DEPTH",
                            value: d.to_string(),
                            reason: format!("must be 1 to {}", istiod_xds::server::MAX_RING_DEPTH),
                        });
                    }
                },
            },
            identity: Identity {
                pod_name: vars.string("POD_NAME", ""),
                cni_namespace: args.cni_namespace.clone().unwrap_or_else(|| namespace.clone()),
                cluster_registries_namespace: args
                    .cluster_registries_namespace
                    .clone()
                    .unwrap_or_else(|| namespace.clone()),
                namespace,
                revision: vars.string("REVISION", ""),
                custom_hosts: vars
                    .string("ISTIOD_CUSTOM_HOST", "")
                    .split(',')
                    .map(str::trim)
                    .filter(|h| !h.is_empty())
                    .map(str::to_owned)
                    .collect(),
                cert_provider,
                shared_mesh_config: vars.string("SHARED_MESH_CONFIG", ""),
                external_istiod: vars.bool("EXTERNAL_ISTIOD", false)?,
                leader_election: vars.bool("ENABLE_LEADER_ELECTION", true)?,
            },
            ca: istiod_ca::CaConfig {
                enabled: vars.bool("ENABLE_CA_SERVER", true)?,
                default_workload_cert_ttl: vars
                    .duration("DEFAULT_WORKLOAD_CERT_TTL", Duration::from_secs(24 * 3600))?,
                max_workload_cert_ttl: vars.duration("MAX_WORKLOAD_CERT_TTL", Duration::from_secs(2160 * 3600))?,
                self_signed_ca_cert_ttl: vars
                    .duration("CITADEL_SELF_SIGNED_CA_CERT_TTL", Duration::from_secs(87_600 * 3600))?,
                self_signed_rsa_bits: match vars.raw("CITADEL_SELF_SIGNED_CA_RSA_KEY_SIZE") {
                    None => None,
                    Some(v) => Some(
                        v.trim()
                            .parse::<usize>()
                            .ok()
                            .filter(|b| (2048..=istiod_pki::ca::MAX_RSA_BITS).contains(b))
                            .ok_or_else(|| ConfigError::Env {
                                name: "CITADEL_SELF_SIGNED_CA_RSA_KEY_SIZE",
                                value: v.clone(),
                                reason: format!(
                                    "expected an RSA key size, 2048 to {} bits",
                                    istiod_pki::ca::MAX_RSA_BITS
                                ),
                            })?,
                    ),
                },
                root_ca_dir: PathBuf::from(vars.string("ROOT_CA_DIR", "./etc/cacerts")),
                self_signed_dir: vars.raw("ISTIOD_RS_SELF_SIGNED_CA_DIR").map(PathBuf::from),
                plugged_check_interval: vars.duration("ISTIOD_RS_PLUGGED_CA_CHECK_INTERVAL", Duration::from_secs(5))?,
                root_check_interval: vars
                    .duration("CITADEL_SELF_SIGNED_ROOT_CERT_CHECK_INTERVAL", Duration::from_secs(3600))?,
                root_check_jitter: vars.bool("CITADEL_ENABLE_JITTER_FOR_ROOT_CERT_ROTATOR", true)?,
                root_grace_percentile: {
                    let v = vars.string("CITADEL_SELF_SIGNED_ROOT_CERT_GRACE_PERIOD_PERCENTILE", "20");
                    v.trim().parse::<u32>().ok().filter(|p| *p <= 100).ok_or_else(|| ConfigError::Env {
                        name: "CITADEL_SELF_SIGNED_ROOT_CERT_GRACE_PERIOD_PERCENTILE",
                        value: v.clone(),
                        reason: "expected a percentage, 0 to 100".into(),
                    })?
                },
                external_signer,
                cert_signer_domain: vars.string("CERT_SIGNER_DOMAIN", ""),
                k8s_serving_signer,
                xds_auth: vars.bool("XDS_AUTH", true)?,
                xds_auth_plaintext: vars.bool("XDS_AUTH_PLAINTEXT", false)?,
                xds_identity_check: vars.bool("PILOT_ENABLE_XDS_IDENTITY_CHECK", true)?,
                // `ns/sa,...`; istiod skips (and warns of) an entry
                // without a `/`.
                trusted_node_accounts: vars
                    .string("CA_TRUSTED_NODE_ACCOUNTS", "")
                    .split(',')
                    .map(str::trim)
                    .filter(|a| !a.is_empty())
                    .filter_map(|a| match a.split_once('/') {
                        Some((ns, sa)) if !ns.is_empty() && !sa.is_empty() => Some((ns.to_owned(), sa.to_owned())),
                        _ => {
                            vars.warn(format!(
                                "CA_TRUSTED_NODE_ACCOUNTS: {a:?} is not <namespace>/<service account>; ignored"
                            ));
                            None
                        }
                    })
                    .collect(),
                token_audiences: vars
                    .string("TOKEN_AUDIENCES", "istio-ca")
                    .split(',')
                    .map(str::trim)
                    .filter(|a| !a.is_empty())
                    .map(str::to_owned)
                    .collect(),
                jwt_rule: match vars.raw("JWT_RULE") {
                    None => None,
                    Some(v) => Some(serde_json::from_str(&v).map_err(|e| ConfigError::Env {
                        name: "JWT_RULE",
                        value: v.clone(),
                        reason: format!("expected {{\"issuer\": ..., \"jwks_uri\": ..., \"audiences\": [...]}}: {e}"),
                    })?),
                },
            },
            log: LogConfig {
                default: default_level,
                scopes,
                json: args.log_as_json,
                targets: args.log_target.clone(),
                caller: args.log_caller.split(',').filter(|s| !s.is_empty()).map(str::to_owned).collect(),
                stack_default,
                stack_scopes,
            },
            ctrlz: ctrlz_addr(&args.ctrlz_address, args.ctrlz_port)?,
            ca_cert_configmap: vars.string("PILOT_CA_CERT_CONFIGMAP", istiod_ca::namespaces::ROOT_CONFIGMAP),
            cluster_trust_bundle: vars.bool("ENABLE_CLUSTER_TRUST_BUNDLE_API", false)?,
            filter_gateway_clusters: vars.bool("PILOT_FILTER_GATEWAY_CLUSTER_CONFIG", false)?,
            ca_crl_configmap: vars
                .bool("PILOT_ENABLE_CA_CRL", true)?
                .then(|| vars.string("PILOT_CRL_CONFIGMAP", istiod_ca::namespaces::CRL_CONFIGMAP)),
            webhook_patching: istiod_webhook::patch::Kinds {
                injection: !vars.set_empty("INJECTION_WEBHOOK_CONFIG_NAME"),
                validation: !vars.set_empty("VALIDATION_WEBHOOK_CONFIG_NAME"),
            },
            shutdown_duration: args.shutdown_duration,
            profile: args.profile,
            cores,
            kube_api_qps: args.kubernetes_api_qps,
            kube_api_burst: args.kubernetes_api_burst,
            delta_xds: vars.bool("ISTIO_DELTA_XDS", true)?,
            ambient: vars.bool("PILOT_ENABLE_AMBIENT", false)?,
            ambient_status: vars.bool("AMBIENT_ENABLE_STATUS", true)?,
            network: vars.string("NETWORK", ""),
            xds_cache: vars.bool("PILOT_ENABLE_XDS_CACHE", true)?,
            scope_gateway_to_namespace: vars.bool("PILOT_SCOPE_GATEWAY_TO_NAMESPACE", false)?,
            route_collapse: vars.bool("PILOT_ENABLE_ROUTE_COLLAPSE_OPTIMIZATION", true)?,
            multiple_custom_authz_providers: vars.bool("PILOT_ENABLE_MULTIPLE_CUSTOM_AUTHZ_PROVIDERS", false)?,
            tls_on_sidecar_ingress: vars.bool("ENABLE_TLS_ON_SIDECAR_INGRESS", false)?,
            dynamic_dns_max_hosts: vars.int("PILOT_ALLOW_ANY_DYNAMIC_DNS_MAX_HOSTS", 1024_u32)?,
            ingress_namespace: vars.string("K8S_INGRESS_NS", "istio-system"),
            xds_api_generator_auth: vars.bool("ENABLE_XDS_API_GENERATOR_AUTH", true)?,
            debug_on_http: vars.bool("ENABLE_DEBUG_ON_HTTP", true)?,
            debug_endpoint_auth: vars.bool("ENABLE_DEBUG_ENDPOINT_AUTH", true)?,
            unsafe_admin_endpoints: vars.bool("UNSAFE_ENABLE_ADMIN_ENDPOINTS", false)?,
            cross_selection: (
                vars.bool("PILOT_ENABLE_K8S_SELECT_WORKLOAD_ENTRIES", true)?,
                vars.bool("PILOT_ENABLE_SERVICEENTRY_SELECT_PODS", true)?,
            ),
            unhealthy: istiod_mesh::meshconfig::UnhealthyEndpoints {
                always: vars.bool("PILOT_SEND_UNHEALTHY_ENDPOINTS", false)?,
                by_default: vars.bool("PILOT_AUTO_SEND_UNHEALTHY_ENDPOINTS", true)?,
            },
            persistent_session_labels: [
                vars.string("PILOT_PERSISTENT_SESSION_LABEL", "istio.io/persistent-session"),
                vars.string("PILOT_PERSISTENT_SESSION_HEADER_LABEL", "istio.io/persistent-session-header"),
            ],
            draining_label: vars.string("PILOT_DRAINING_LABEL", "istio.io/draining"),
            metrics_localhost_only: vars.bool("METRICS_LOCALHOST_ACCESS_ONLY", false)?,
            skip_validate_trust_domain: vars.bool("PILOT_SKIP_VALIDATE_TRUST_DOMAIN", false)?,
            disable_mx_alpn: vars.bool("PILOT_DISABLE_MX_ALPN", false)?,
            track_remaining: !vars.bool("DISABLE_TRACK_REMAINING_CB_METRICS", true)?,
            protocol_filters: istiod_mesh::meshconfig::ProtocolFilters {
                mongo: vars.bool("PILOT_ENABLE_MONGO_FILTER", true)?,
                redis: vars.bool("PILOT_ENABLE_REDIS_FILTER", false)?,
            },
            eds_for_headless: vars.bool("PILOT_ENABLE_EDS_FOR_HEADLESS_SERVICES", false)?,
            telemetry_labels: (
                vars.bool("PILOT_ENABLE_TELEMETRY_LABEL", true)?,
                vars.bool("PILOT_ENDPOINT_TELEMETRY_LABEL", true)?,
            ),
            dns_resolver: istiod_mesh::meshconfig::DnsResolver {
                udp_max_queries: vars.int("PILOT_DNS_CARES_UDP_MAX_QUERIES", 100_u32)?,
                jitter: vars.duration("PILOT_DNS_JITTER_DURATION", Duration::from_millis(100))?,
            },
            mx: (vars.bool("PILOT_ENABLE_METADATA_EXCHANGE", true)?, vars.bool("PILOT_ENABLE_ALPN_FILTER", true)?, {
                let labels = vars.string("PILOT_MX_ADDITIONAL_LABELS", "");
                let set: std::collections::BTreeSet<String> =
                    labels.split(',').map(str::trim).filter(|l| !l.is_empty()).map(str::to_owned).collect();
                set.into_iter().collect()
            }),
            features: {
                let d = istiod_mesh::meshconfig::Features::default();
                istiod_mesh::meshconfig::Features {
                    absolute_fqdn_vhost: vars.bool("PILOT_ENABLE_ABSOLUTE_FQDN_VHOST_DOMAIN", d.absolute_fqdn_vhost)?,
                    locality_weighted_lb: vars.bool("ENABLE_LOCALITY_WEIGHTED_LB_CONFIG", d.locality_weighted_lb)?,
                    ipv4_outbound_for_ipv6: vars
                        .bool("ISTIO_ENABLE_IPV4_OUTBOUND_LISTENER_FOR_IPV6_CLUSTERS", d.ipv4_outbound_for_ipv6)?,
                    selector_k8s_gateway_policy: vars
                        .bool("ENABLE_SELECTOR_BASED_K8S_GATEWAY_POLICY", d.selector_k8s_gateway_policy)?,
                    strict_gateway_merging: vars
                        .bool("PILOT_ENABLE_STRICT_GATEWAY_MERGING", d.strict_gateway_merging)?,
                    sidecar_inbound_merge: vars
                        .bool("PILOT_ALLOW_SIDECAR_SERVICE_INBOUND_LISTENER_MERGE", d.sidecar_inbound_merge)?,
                }
            },
            http_switches: (
                vars.bool("PILOT_HTTP10", false)?,
                vars.bool("PILOT_SIDECAR_USE_REMOTE_ADDRESS", false)?,
                vars.bool("ENABLE_HCM_INTERNAL_NETWORKS", false)?,
            ),
            http_defaults: (
                vars.bool("ENABLE_100_CONTINUE_HEADERS", true)?,
                vars.bool("DISABLE_SHADOW_HOST_SUFFIX", true)?,
                // (istiod reads an int; zero or less is Envoy's default.)
                vars.int("MAX_CONNECTIONS_PER_SOCKET_EVENT_LOOP", 1_i64)?.clamp(0, i64::from(u32::MAX)) as u32,
            ),
            jwks_insecure_skip_verify: vars.bool("JWKS_RESOLVER_INSECURE_SKIP_VERIFY", false)?,
            jwks_blocked_cidrs: vars.string("BLOCKED_CIDRS_IN_JWKS_URIS", ""),
            gateway_handshake_timeout: Some(
                vars.duration("PILOT_GATEWAY_TRANSPORT_SOCKET_CONNECT_TIMEOUT", Duration::from_secs(15))?,
            )
            .filter(|t| !t.is_zero()),
            hbone_window_sizes: [
                vars.int("PILOT_HBONE_INITIAL_STREAM_WINDOW_SIZE", 0_u32)?,
                vars.int("PILOT_HBONE_INITIAL_CONNECTION_WINDOW_SIZE", 0_u32)?,
            ],
            dns: istiod_mesh::meshconfig::DnsSettings {
                multicluster_headless: vars.bool("ENABLE_MULTICLUSTER_HEADLESS", true)?,
                dual_stack: vars.bool("ISTIO_DUAL_STACK", false)?,
                ip_autoallocate: vars.bool("PILOT_ENABLE_IP_AUTOALLOCATE", true)?,
            },
            envoy_filter_stats: vars.bool("PILOT_ENVOY_FILTER_STATS", false)?,
            knative: vars.raw("K_REVISION").is_some(),
            watch_namespace: vars.string("ISTIO_WATCH_NAMESPACE", ""),
            gateway_api_names: (
                vars.string("PILOT_GATEWAY_API_CONTROLLER_NAME", "istio.io/gateway-controller"),
                vars.string("PILOT_GATEWAY_API_DEFAULT_GATEWAYCLASS_NAME", "istio"),
            ),
            debug_allowed_namespaces: vars
                .string("DEBUG_ENDPOINT_AUTH_ALLOWED_NAMESPACES", "")
                .split(',')
                .filter(|n| !n.is_empty())
                .map(str::to_owned)
                .collect(),
            whatif_max_classes: vars.int::<usize>("ISTIOD_RS_WHATIF_MAX_CLASSES", 50)?.max(1),
            // istiod (features/telemetry.go): outside 0..=100 it warns and
            // keeps the default.
            trace_sampling: match vars.float("PILOT_TRACE_SAMPLING", 1.0)? {
                s if (0.0..=100.0).contains(&s) => s,
                s => {
                    tracing::warn!(target: "default", value = s, "PILOT_TRACE_SAMPLING out of range 0.0-100.0; using 1.0");
                    1.0
                }
            },
            gateway_deployment: vars.bool("PILOT_ENABLE_GATEWAY_API_DEPLOYMENT_CONTROLLER", true)?,
            read_filter: istiod_config::objects::ReadFilter {
                gateway_api,
                ignore: istiod_config::objects::ReadFilter::parse_list(&vars.string("PILOT_IGNORE_RESOURCES", "")),
                include: istiod_config::objects::ReadFilter::parse_list(&vars.string("PILOT_INCLUDE_RESOURCES", "")),
            },
            gateway_api_status: gateway_api && vars.bool("PILOT_ENABLE_GATEWAY_API_STATUS", true)?,
            gateway_classes: vars.bool("PILOT_ENABLE_GATEWAY_API_GATEWAYCLASS_CONTROLLER", true)?,
            discover_gateway_api_gateways: vars.bool("PILOT_MULTI_NETWORK_DISCOVER_GATEWAY_API", true)?,
            multiroot_mesh: vars.bool("ISTIO_MULTIROOT_MESH", false)?,
            analysis: vars.bool("PILOT_ENABLE_ANALYSIS", false)?,
            analysis_interval: match vars.duration("PILOT_ANALYSIS_INTERVAL", Duration::from_secs(10))? {
                d if d < Duration::from_secs(1) => {
                    vars.warn(format!(
                        "PILOT_ANALYSIS_INTERVAL {d:?} is too small, it will be set to default 10 seconds"
                    ));
                    Duration::from_secs(10)
                }
                d => d,
            },
            node_untaint: vars
                .bool("PILOT_ENABLE_NODE_UNTAINT_CONTROLLERS", false)?
                .then(|| vars.string("PILOT_NODE_UNTAINT_CONTROLLERS_TAINT_NAME", "cni.istio.io/not-ready")),
            gateway_deployment_settings: istiod_webhook::inject::gateway::Settings {
                cluster_id: args.cluster_id.clone().unwrap_or_else(|| vars.string("CLUSTER_ID", "Kubernetes")),
                kube_version: -1,
                copy_labels_annotations: vars.bool("PILOT_ENABLE_GATEWAY_API_COPY_LABELS_ANNOTATIONS", true)?,
                // registerAmbient: only with PILOT_ENABLE_AMBIENT.
                ambient_waypoints: vars.bool("PILOT_ENABLE_AMBIENT", false)?
                    && vars.bool("PILOT_ENABLE_AMBIENT_WAYPOINTS", true)?,
                manual_deployment: vars.bool("ENABLE_GATEWAY_API_MANUAL_DEPLOYMENT", true)?,
            },
            jwks_fetch: istiod_mesh::meshconfig::JwksFetch::parse(
                &vars.string("PILOT_JWT_ENABLE_REMOTE_JWKS", "false"),
            ),
            jwks_refresh: nonzero(
                vars.duration("PILOT_JWT_PUB_KEY_REFRESH_INTERVAL", Duration::from_secs(20 * 60))?,
                Duration::from_secs(20 * 60),
            ),
            limits: InputLimits {
                max_node_bytes: positive(
                    &vars,
                    "ISTIOD_RS_MAX_NODE_BYTES",
                    istiod_xds::ads::node::DEFAULT_MAX_NODE_BYTES,
                )?,
                max_response_bytes: positive(
                    &vars,
                    "ISTIOD_RS_MAX_RESPONSE_BYTES",
                    istiod_xds::grpc::GrpcLimits::default().max_send_message,
                )?,
                max_names_per_stream: positive(
                    &vars,
                    "ISTIOD_RS_MAX_NAMES_PER_STREAM",
                    istiod_xds::ads::DEFAULT_MAX_NAMES,
                )?,
                config_dir: {
                    let d = istiod_kubewatch::config_dir::Limits::default();
                    istiod_kubewatch::config_dir::Limits {
                        max_file_bytes: positive(&vars, "ISTIOD_RS_CONFIG_MAX_FILE_BYTES", d.max_file_bytes as usize)?
                            as u64,
                        max_documents: positive(&vars, "ISTIOD_RS_CONFIG_MAX_DOCUMENTS", d.max_documents)?,
                    }
                },
            },
            env_warnings: Vec::new(),
        };
        config.env_warnings = vars.invalid();
        Ok(config)
    }

    /// istiod's automatic push concurrency and stream rate:
    /// `min(15 + 5 * cores, 100)` (features/tuning.go), used when
    /// `PILOT_PUSH_THROTTLE` / `PILOT_MAX_REQUESTS_PER_SECOND` are 0.
    pub fn automatic_throttle(cores: usize) -> u32 {
        (15 + 5 * cores).min(100) as u32
    }
}

#[cfg(test)]
mod tests;
