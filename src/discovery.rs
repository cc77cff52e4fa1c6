//! `pilot-discovery discovery`: wires the serving cores (glommio, xDS on
//! `--grpcAddr`) to the control thread (tokio, on the calling thread: the
//! config store, debounce, publishing, debug and monitoring HTTP). The
//! sources are in `sources.rs`, the model's updates in `update.rs`, the
//! debug endpoints in `debug.rs`.

mod autoregister;
mod config_dump;
mod debug;
mod debug_xds;
mod debugz;
mod gateway_classes;
mod gateway_deploy;
mod gateway_status;
mod ipallocate;
mod jwks;
mod mesh_watch;
mod node_pods;
mod remotes;
mod revisions;
mod secret_access;
mod sources;
mod untaint;
pub mod whatif;

use debug::{Debug, monitoring, serve_http};
use sources::{State, Wake, apply, configz, forward_dir_events, kube_client, watch_dir, watch_kube};

use std::cell::RefCell;
use std::net::{SocketAddr, ToSocketAddrs};
use std::rc::Rc;
use std::sync::Arc;
use std::sync::atomic::AtomicBool;
use std::time::Instant;

use istiod_xds::ads::{self, AdsFactory, Snapshot};
use istiod_xds::grpc::GrpcLimits;
use istiod_xds::h2::Limits;
use istiod_xds::server::{self, ListenerConfig, MuxFactory, ServerConfig, tls};
use tokio::sync::mpsc;

use crate::config::{Config, ListenAddr, Source};
use crate::control::http::{self};
use crate::control::{self, Control, debounce::Debouncer};
use istiod_kubewatch::config_dir::ConfigDir;

/// Why the server could not start.
#[derive(Debug, thiserror::Error)]
pub enum StartError {
    /// A source that is not implemented yet.
    #[error("{0}")]
    Unsupported(String),
    /// An address that does not resolve.
    #[error("--{flag} {addr}: {reason}")]
    Address {
        /// Flag.
        flag: &'static str,
        /// Value.
        addr: String,
        /// Why.
        reason: String,
    },
    /// The config directory could not be read.
    #[error(transparent)]
    ConfigDir(#[from] istiod_kubewatch::config_dir::LoadError),
    /// The mesh configuration file.
    #[error(transparent)]
    MeshConfig(#[from] istiod_mesh::meshconfig::MeshConfigError),
    /// The serving cores did not start.
    #[error(transparent)]
    Server(#[from] server::ServerError),
    /// TLS files.
    #[error("TLS certificate files: {0}")]
    Tls(String),
    /// `--tls-cipher-suites` (istiod's words).
    #[error("{0}")]
    TlsPolicy(String),
    /// The CA could not be set up.
    #[error("CA: {0}")]
    Ca(String),
    /// A debug or monitoring port.
    #[error("cannot listen on {addr}: {source}")]
    Listen {
        /// Address.
        addr: SocketAddr,
        /// Error.
        source: std::io::Error,
    },
}

fn resolve(flag: &'static str, a: &ListenAddr) -> Result<SocketAddr, StartError> {
    // An empty host listens on every IPv4 address.
    let host = if a.host.is_empty() { "0.0.0.0" } else { &a.host };
    (host, a.port)
        .to_socket_addrs()
        .map_err(|e| StartError::Address { flag, addr: a.to_string(), reason: e.to_string() })?
        .next()
        .ok_or_else(|| StartError::Address { flag, addr: a.to_string(), reason: "resolves to nothing".into() })
}

/// A webhook request on the HTTP port (`--httpsAddr=""`), answered by the
/// webhooks' own handler.
async fn webhook_on_http(hooks: Rc<istiod_webhook::Webhooks>, req: http::Request) -> http::Response {
    let mut r = ::http::Request::new(http_body_util::Full::new(req.body));
    *r.method_mut() = ::http::Method::POST;
    match req.target.parse() {
        Ok(u) => *r.uri_mut() = u,
        Err(_) => return http::Response::text(400, "invalid request target\n"),
    }
    if let Some(ct) = req.content_type.as_deref().and_then(|c| ::http::HeaderValue::from_str(c).ok()) {
        r.headers_mut().insert(::http::header::CONTENT_TYPE, ct);
    }
    let resp = istiod_webhook::handle_plain(hooks, r).await;
    let status = resp.status().as_u16();
    let json =
        resp.headers().get(::http::header::CONTENT_TYPE).is_some_and(|v| v.as_bytes().starts_with(b"application/json"));
    let body = http_body_util::BodyExt::collect(resp.into_body()).await.map(|b| b.to_bytes()).unwrap_or_default();
    http::Response { status, content_type: if json { "application/json" } else { "text/plain; charset=utf-8" }, body }
}

/// Runs the server until SIGINT or SIGTERM.
pub fn run(config: Config) -> Result<(), StartError> {
    crate::version::mark_start();
    istiod_ca::namespaces::set_configmap_name(&config.ca_cert_configmap);
    istiod_ca::namespaces::set_crl_configmap(config.ca_crl_configmap.as_deref());
    istiod_ca::namespaces::set_cluster_trust_bundle(config.cluster_trust_bundle);
    istiod_mesh::generator::router::set_filter_clusters(config.filter_gateway_clusters);
    istiod_kubewatch::kube_source::set_remote_gateways(config.discover_gateway_api_gateways);
    debug::set_metrics_localhost_only(config.metrics_localhost_only);
    istiod_ca::jwks::set_resolver_insecure_skip_verify(config.jwks_insecure_skip_verify);
    istiod_ca::jwks::set_blocked_cidrs(&config.jwks_blocked_cidrs);
    istiod_config::objects::set_read_filter(config.read_filter.clone());
    istiod_kubewatch::kube_source::set_config_cluster(&config.cluster_id);
    istiod_kubewatch::kube_source::set_watch_namespace(&config.watch_namespace);
    istiod_config::gateway_convert::set_names(&config.gateway_api_names.0, &config.gateway_api_names.1);
    istiod_mesh::node::set_ambient(config.ambient);
    for invalid in &config.env_warnings {
        tracing::warn!(target: "default", "invalid environment variable value: {invalid}");
    }
    if let Some(n) = config.cores.filter(|n| std::thread::available_parallelism().is_ok_and(|cpus| *n > cpus.get())) {
        tracing::warn!(
            target: "default",
            cores = n,
            cpus = std::thread::available_parallelism().map_or(0, |c| c.get()),
            "--cores is above the CPUs this process may use: serving cores will share CPUs"
        );
    }
    // The TLS policy of every server (15012, the webhooks), checked as
    // istiod checks it at start.
    let tls_policy = istiod_xds::server::tls::TlsPolicy {
        min_tls13: config.tls.min_version == crate::cli::TlsVersion::V1_3,
        cipher_suites: config.tls.cipher_suites.clone(),
        compliance: config.tls.compliance.clone(),
    };
    for n in tls_policy.check().map_err(StartError::TlsPolicy)? {
        tracing::warn!(target: "default", "read and not applied: {n}");
    }
    // COMPLIANCE_POLICY holds for the TLS contexts sent to Envoy too.
    istiod_mesh::translate::envoy::set_compliance_policy(&tls_policy.compliance);
    let compliance = !tls_policy.compliance.is_empty();
    istiod_xds::server::tls::set_policy(tls_policy);
    // And for the TLS clients that take the process's provider: the
    // Kubernetes API clients (the config cluster's and the remotes').
    if compliance {
        istiod_xds::server::tls::install_client_default();
    }
    // client-go's rate limit of every API server client.
    istiod_kubewatch::limit::set_default(f64::from(config.kube_api_qps), config.kube_api_burst);
    for setting in config.not_yet_supported() {
        tracing::warn!(target: "default", "accepted but not yet supported: {setting}");
    }
    istiod_envoyfilter::status::set_enabled(config.envoy_filter_stats);
    // The CA's and RA's roots, for ISTIO_MULTIROOT_MESH's trust bundle
    // (filled once the CA is up, and again when it changes).
    let ca_roots: Arc<std::sync::RwLock<Vec<String>>> = Arc::default();
    // The mesh configuration's caCertificates last accepted for it.
    let mesh_anchors: Rc<std::cell::RefCell<Vec<String>>> = Rc::default();
    // What the environment sets over the mesh configuration.
    let env: mesh_watch::Env = {
        let (jwks_fetch, scope, collapse) =
            (config.jwks_fetch, config.scope_gateway_to_namespace, config.route_collapse);
        let multiple_custom = config.multiple_custom_authz_providers;
        let tls_on_sidecar_ingress = config.tls_on_sidecar_ingress;
        let dynamic_dns_max_hosts = config.dynamic_dns_max_hosts;
        let ingress_ns = config.ingress_namespace.clone();
        let (generator_auth, debug_auth, sampling) =
            (config.xds_api_generator_auth, config.debug_endpoint_auth, config.trace_sampling);
        let (cluster_id, system_namespace) = (config.cluster_id.clone(), config.identity.namespace.clone());
        let cluster_aliases = config.cluster_aliases.clone();
        let no_gateway_api_gateways = !config.discover_gateway_api_gateways;
        let mut dns = config.dns;
        let (dual_stack, dns_resolver, telemetry_labels) =
            (dns.dual_stack, config.dns_resolver, config.telemetry_labels);
        dns.dual_stack |= config.ambient;
        let cross_selection = config.cross_selection;
        let (unhealthy, session_labels) = (config.unhealthy, config.persistent_session_labels.clone());
        let (draining_label, hbone_windows) = (config.draining_label.clone(), config.hbone_window_sizes);
        let (handshake, skip_td) = (config.gateway_handshake_timeout, config.skip_validate_trust_domain);
        let (no_mx_alpn, track_remaining) = (config.disable_mx_alpn, config.track_remaining);
        let (protocol_filters, http_defaults) = (config.protocol_filters, config.http_defaults);
        let (eds_for_headless, http_switches) = (config.eds_for_headless, config.http_switches);
        let features = config.features;
        let mx = config.mx.clone();
        let (multiroot, roots, last_good) = (config.multiroot_mesh, ca_roots.clone(), mesh_anchors.clone());
        Rc::new(move |mesh: &mut istiod_mesh::meshconfig::MeshSettings| {
            if multiroot {
                let roots = roots.read().unwrap_or_else(|e| e.into_inner());
                // An invalid set keeps the last good one (trustbundle.go's
                // UpdateTrustAnchor leaves the source as it was).
                let anchors = mesh_trust_anchors(&mesh.ca_certificates).unwrap_or_else(|e| {
                    tracing::error!(target: "default", error = %e, "failed to update meshConfig PEM trustAnchors");
                    last_good.borrow().clone()
                });
                *last_good.borrow_mut() = anchors.clone();
                mesh.trust_bundle = Some(trust_bundle(&roots, &anchors));
            }
            mesh.dns = dns;
            mesh.unhealthy = unhealthy;
            mesh.persistent_session_labels.clone_from(&session_labels);
            mesh.draining_label.clone_from(&draining_label);
            mesh.hbone_window_sizes = hbone_windows;
            mesh.gateway_handshake_timeout = handshake;
            mesh.skip_validate_trust_domain = skip_td;
            mesh.disable_mx_alpn = no_mx_alpn;
            mesh.track_remaining = track_remaining;
            mesh.protocol_filters = protocol_filters;
            mesh.eds_for_headless = eds_for_headless;
            (mesh.dual_stack, mesh.dns_resolver, mesh.telemetry_labels) = (dual_stack, dns_resolver, telemetry_labels);
            (mesh.http10, mesh.sidecar_use_remote_address, mesh.hcm_internal_networks) = http_switches;
            mesh.features = features;
            (mesh.metadata_exchange, mesh.alpn_filter) = (mx.0, mx.1);
            mesh.mx_additional_labels.clone_from(&mx.2);
            (mesh.proxy_100_continue, mesh.disable_shadow_host_suffix, mesh.max_accept_per_event) = http_defaults;
            (mesh.k8s_select_workload_entries, mesh.service_entry_select_pods) = cross_selection;
            mesh.jwks_fetch = jwks_fetch;
            mesh.scope_gateway_to_namespace = scope;
            mesh.route_collapse = collapse;
            mesh.multiple_custom_authz_providers = multiple_custom;
            mesh.tls_on_sidecar_ingress = tls_on_sidecar_ingress;
            mesh.dynamic_dns_max_hosts = dynamic_dns_max_hosts;
            mesh.ingress.namespace = ingress_ns.clone();
            mesh.xds_api_generator_auth = generator_auth;
            mesh.debug_endpoint_auth = debug_auth;
            mesh.trace_sampling = istiod_mesh::meshconfig::Percent(sampling);
            mesh.networks.cluster_id = cluster_id.clone();
            mesh.networks.system_namespace = system_namespace.clone();
            mesh.networks.cluster_aliases.clone_from(&cluster_aliases);
            mesh.networks.no_gateway_api_gateways = no_gateway_api_gateways;
        })
    };
    // The config directory is read before the cores start, so a bad
    // directory fails fast; Kubernetes is watched on the control thread.
    let mut dir_source = match &config.source {
        Source::ConfigDir(dir) => {
            let mut source = ConfigDir::new(dir.clone()).with_limits(config.limits.config_dir);
            let loaded = source.reload()?;
            Some((source, loaded))
        }
        Source::Kubernetes { .. } => None,
    };

    // The control thread's runtime, made first: in Kubernetes the CA's
    // root is read from (or created in) the API server before anything
    // is served.
    let rt = tokio::runtime::Builder::new_current_thread().enable_all().build().expect("tokio runtime");
    let kube = match &config.source {
        Source::Kubernetes { kubeconfig } => Some(rt.block_on(kube_client(kubeconfig.as_deref()))?),
        Source::ConfigDir(_) => None,
    };
    // The mesh configuration: the file, else the revision's ConfigMap
    // (with SHARED_MESH_CONFIG under either), else the defaults.
    let mesh_sources = mesh_watch::Sources::choose(
        &config.mesh_config,
        kube.as_ref().map(|c| istiod_kubewatch::kapi::Api::new(c.clone())),
        &config.identity.namespace,
        &config.identity.revision,
        &config.identity.shared_mesh_config,
        env,
    );
    let (mut mesh, mesh_texts) = rt.block_on(mesh_sources.load())?;
    if mesh_texts.1.is_none() {
        tracing::info!(target: "default", path = %config.mesh_config.display(), "no mesh configuration file or ConfigMap; using defaults");
    }
    // The mesh networks, from their own file or key: an invalid one is
    // reported and none are used (the start goes on).
    let net_sources = mesh_watch::Sources::networks(
        &config.networks_config,
        kube.as_ref().map(|c| istiod_kubewatch::kapi::Api::new(c.clone())),
        &config.identity.namespace,
        &config.identity.revision,
        &config.identity.shared_mesh_config,
    );
    let (networks, net_texts) = rt.block_on(net_sources.load_networks());
    match networks {
        Ok(n) => {
            if !n.networks.is_empty() {
                tracing::info!(target: "default", source = %net_sources.describe(), networks = n.networks.len(), "mesh networks");
            }
            mesh.networks.mesh = n;
        }
        Err(e) => {
            tracing::error!(target: "default", source = %net_sources.describe(), error = %e, "invalid mesh networks; using none until they are fixed")
        }
    }
    let root_store = istiod_ca::store::RootStore::of(&config.ca, &config.identity.namespace, kube.as_ref());
    // `ca_server` authenticates (xDS and the CA); `ca_signing` is it when
    // it also signs (ENABLE_CA_SERVER).
    let ca_server =
        rt.block_on(istiod_ca::from_config(&config.ca, &mesh.trust_domain, &root_store)).map_err(StartError::Ca)?;
    let ca_signing = ca_server.clone().filter(|c| c.signing);
    // ISTIO_MULTIROOT_MESH: the trust bundle starts with the CA's roots.
    let roots_changed = match (&ca_signing, config.multiroot_mesh) {
        (Some(ca), true) => {
            *ca_roots.write().unwrap_or_else(|e| e.into_inner()) = ca.trust_anchors();
            // istiod's initWorkloadTrustBundle fails the start on an
            // invalid caCertificates PEM.
            let anchors = mesh_trust_anchors(&mesh.ca_certificates)
                .map_err(|e| StartError::Ca(format!("failed to update meshConfig PEM trustAnchors: {e}")))?;
            mesh.trust_bundle = Some(trust_bundle(&ca.trust_anchors(), &anchors));
            Some(ca.changed.subscribe())
        }
        _ => None,
    };
    let mesh = Arc::new(mesh);
    let (mesh_tx, mesh_rx) = tokio::sync::watch::channel(mesh.clone());
    let cores = config.cores.unwrap_or_else(|| std::thread::available_parallelism().map_or(1, |n| n.get()));
    let (publisher, receivers) = ads::channels(cores);
    let control_plane =
        format!("istiod-rs-{}", if config.identity.pod_name.is_empty() { "local" } else { &config.identity.pod_name });
    // Debug over xDS (`istio.io/debug/*`): the cores forward it here.
    let (forward_tx, forward_rx) = async_channel::unbounded();
    // The streams of VMs' proxies (WorkloadGroups, health-checked
    // WorkloadEntries): the cores report them here. Their connections and
    // ends are never lost (two per stream); their health reports are
    // dropped when the controller is behind.
    let (streams_tx, streams_rx) = async_channel::unbounded();
    let (reports_tx, reports_rx) = async_channel::bounded(4096);
    let lifecycle_tx = istiod_xds::ads::LifecycleTx { streams: streams_tx, reports: reports_tx };
    let lifecycle_rx = (streams_rx, reports_rx);
    if config.knative {
        ads::refuse_first_stream();
    }
    let factory = AdsFactory::new(
        Arc::new(istiod_waypoint::generator::WithWaypoints),
        receivers,
        Arc::new(Snapshot::empty(Instant::now())),
        &control_plane,
    )
    .forward_to(forward_tx, crate::version::control_plane_identifier(&crate::version::BUILD, &config.identity.pod_name))
    .lifecycle_to(lifecycle_tx)
    .max_node_bytes(config.limits.max_node_bytes)
    .max_names(config.limits.max_names_per_stream)
    .push_throttle(match config.push.push_throttle {
        0 => Config::automatic_throttle(cores) as usize,
        n => n as usize,
    });
    // ADS and, on the same ports, the CA (which answers over TLS only).
    let auth = istiod_ca::xds_auth::XdsAuth {
        server: ca_server.clone(),
        enabled: config.ca.xds_auth,
        plaintext: config.ca.xds_auth_plaintext,
        identity_check: config.ca.xds_identity_check,
    };
    let factory = istiod_ca::xds_auth::AuthFactory::new(factory, auth);
    let factory = MuxFactory::new(factory, istiod_ca::CaFactory(ca_signing.clone()), istiod_ca::PATHS);

    let k = &config.keepalive;
    let limits = Limits {
        max_concurrent_streams: k.max_concurrent_streams,
        keepalive_interval: k.interval,
        keepalive_timeout: k.timeout,
        max_connection_age: k.max_connection_age,
        max_connection_age_grace: k.max_connection_age_grace,
        write_copy_below: config.push.write_copy_below,
        ..Limits::default()
    };
    let mut listeners = Vec::new();
    // Plaintext gRPC (15010) is accepted on a thread with istiod's backlog
    // and handed to the cores (server::accept_on_thread says why).
    let mut grpc_accept = match &config.listen.grpc {
        Some(a) => Some(server::accept_on_thread(resolve("grpcAddr", a)?)?),
        None => None,
    };
    // istiod's own certificate for :15012 and the webhooks, from its CA
    // (no flags needed), or the files given; kept current by
    // `store::serve_tls`.
    let files = match (&config.tls.cert, &config.tls.key) {
        (Some(cert), Some(key)) => {
            let read =
                |p: &std::path::Path| std::fs::read(p).map_err(|e| StartError::Tls(format!("{}: {e}", p.display())));
            Some((read(cert)?, read(key)?))
        }
        _ => None,
    };
    // PILOT_CERT_PROVIDER=k8s.io/<signer>: signed through the API.
    let k8s_signer = ca_signing.as_ref().and_then(|c| c.k8s_signing.clone());
    let cert = istiod_ca::store::ServingCert {
        names: config.identity.dns_names(),
        ttl: config.ca.max_workload_cert_ttl,
        files,
        kubernetes: k8s_signer.clone().zip(kube.clone()).map(|(signer, client)| {
            (istiod_kubewatch::kapi::Api::new(client), signer, config.ca.self_signed_ca_cert_ttl)
        }),
    };
    if let Some(ext) = ca_signing.as_ref().and_then(|c| c.external.as_ref()) {
        ext.set_mesh_roots(&mesh.ca_certificates);
    }
    let wanted = config.listen.secure_grpc.is_some() || config.listen.https.is_some();
    let provider = config.identity.cert_provider.as_str();
    let mut renew = None;
    let tls_configs = match (&ca_signing, &cert.files) {
        _ if !wanted => None,
        // istiod's initDNSCertsK8SRA: its certificate from the signer, the
        // root from the mesh configuration; a failure stops the start.
        (Some(ca), None) if k8s_signer.is_some() => {
            tracing::info!(target: "default", "initializing Istiod DNS certificates using K8S RA:{provider}");
            let (grpc, webhook, after) = rt.block_on(cert.issue_configs(ca)).map_err(StartError::Tls)?;
            renew = Some(after);
            Some((grpc, webhook))
        }
        // istiod's initIstiodCerts: without files, only the `istiod`
        // provider is its CA.
        (_, None) if provider != "istiod" => {
            tracing::warn!(target: "default", "PILOT_CERT_PROVIDER={provider} is not implemented");
            None
        }
        (Some(ca), _) => Some(cert.tls_configs(ca).map_err(StartError::Tls)?),
        (None, Some(_)) => Some(cert.tls_configs_from_files().map_err(StartError::Tls)?),
        (None, None) => {
            tracing::warn!(
                target: "default",
                "--secureGRPCAddr and --httpsAddr are not served: no --tlsCertFile/--tlsKeyFile and the CA is disabled"
            );
            None
        }
    };
    let (mut grpc_tls, mut webhook_tls) = (None, None);
    if let Some((grpc_cfg, webhook_cfg)) = tls_configs {
        match (&cert.files, &k8s_signer) {
            (None, None) => {
                tracing::info!(target: "ca", names = ?cert.names, "istiod's serving certificate issued by its CA")
            }
            (None, Some(signer)) => {
                tracing::info!(target: "ca", names = ?cert.names, signer, "istiod's serving certificate signed by the Kubernetes signer")
            }
            _ => {}
        }
        if let Some(a) = &config.listen.secure_grpc {
            let reloadable = tls::Reloadable::new(grpc_cfg);
            listeners.push(ListenerConfig { addr: resolve("secureGRPCAddr", a)?, tls: Some(reloadable.clone()) });
            grpc_tls = Some(reloadable);
        }
        if config.listen.https.is_some() {
            webhook_tls = Some(tls::Reloadable::new(webhook_cfg));
        }
    }
    // Only what is served is kept current.
    let serving = (grpc_tls.is_some() || webhook_tls.is_some()).then(|| (cert, grpc_tls, webhook_tls.clone(), renew));
    // Every port is bound before anything is served or published: a port in
    // use stops the start with the address named, and nothing half-runs.
    let bind_http = |flag: &'static str, a: &Option<ListenAddr>| -> Result<Option<std::net::TcpListener>, StartError> {
        let Some(a) = a else { return Ok(None) };
        let addr = resolve(flag, a)?;
        let l = std::net::TcpListener::bind(addr).map_err(|source| StartError::Listen { addr, source })?;
        l.set_nonblocking(true).map_err(|source| StartError::Listen { addr, source })?;
        Ok(Some(l))
    };
    let http_listener = bind_http("httpAddr", &config.listen.http)?;
    let monitoring_listener = bind_http("monitoringAddr", &config.listen.monitoring)?;
    let https_listener = match webhook_tls {
        Some(_) => bind_http("httpsAddr", &config.listen.https)?,
        None => None,
    };
    let webhooks = Rc::new(istiod_webhook::Webhooks::default());
    // istiod serves the webhooks on its plaintext mux when `--httpsAddr`
    // is empty.
    let webhooks_on_http = config.listen.https.is_none() && http_listener.is_some();
    let webhooks_served = https_listener.is_some() || webhooks_on_http;
    // istiod multiplexes gRPC on the HTTP port when `--grpcAddr` is empty:
    // cleartext HTTP/2 connections there go to the serving cores.
    let (grpc_on_http, grpc_handoff) = match (&config.listen.grpc, &http_listener) {
        (None, Some(l)) => {
            let (tx, rx) = async_channel::bounded(http::MAX_CONNECTIONS);
            if let Ok(addr) = l.local_addr() {
                tracing::info!(target: "default", %addr, "multiplexing gRPC on http addr");
            }
            (Some(tx), Some(rx))
        }
        _ => (None, grpc_accept.as_ref().map(|(_, rx, _)| rx.clone())),
    };
    let handle = server::start(
        ServerConfig {
            cores,
            pin: false,
            ring_depth: config.push.ring_depth,
            listeners,
            limits,
            grpc: GrpcLimits {
                max_recv_message: k.max_recv_msg_size as usize,
                max_send_message: config.limits.max_response_bytes,
                ..GrpcLimits::default()
            },
            shutdown: config.shutdown_duration,
            handoff: grpc_handoff,
        },
        factory,
    )?;
    for a in grpc_accept.iter().map(|(a, _, _)| a).chain(handle.addrs()) {
        tracing::info!(target: "default", addr = %a, cores, "serving xDS");
    }

    let mut cores = Some(handle);
    let local = tokio::task::LocalSet::new();
    let result = local.block_on(&rt, async {
        let ready = Arc::new(AtomicBool::new(false));
        let p = &config.push;
        let control = Control::new(
            publisher.clone(),
            Debouncer::new(p.debounce_after, p.debounce_max, p.eds_debounce),
            ready.clone(),
        );
        let (tx, rx) = mpsc::unbounded_channel();
        tokio::task::spawn_local(control::run(control, rx));
        // This replica's elections (every singleton controller's), released
        // on shutdown.
        let leadership = istiod_kubewatch::leader::Leadership::new(
            config.identity.leader_election,
            istiod_kubewatch::leader::identity(&config.identity.pod_name),
            &config.identity.revision,
            config.identity.namespace.clone(),
        );
        let state = Rc::new(RefCell::new(State::default()));
        state.borrow_mut().webhooks = Some(webhooks.clone());
        state.borrow_mut().settings = Some(mesh_rx.clone());
        if config.ambient {
            state.borrow_mut().ambient = Some(sources::Ambient {
                index: Default::default(),
                cluster_id: config.cluster_id.clone(),
                network: config.network.clone(),
                system_namespace: config.identity.namespace.clone(),
            });
        }
        // Gateway API status: written by the elected replica (Kubernetes
        // only; `PILOT_ENABLE_GATEWAY_API_STATUS`).
        if let Some(client) = &kube {
            use istiod_kubewatch::leader::Lock;
            if config.gateway_api_status {
                let (status_tx, status_rx) = tokio::sync::watch::channel(Arc::new(Vec::new()));
                state.borrow_mut().gateway_status = Some(status_tx);
                tokio::task::spawn_local(gateway_status::run(
                    istiod_kubewatch::kapi::Api::new(client.clone()),
                    leadership.clone(),
                    status_rx,
                    (leadership.per_revision(gateway_status::ELECTION), Lock::Lease),
                ));
            }
            // Ambient status (`AMBIENT_ENABLE_STATUS`, on by default):
            // istiod's `istio-status-leader`.
            if config.ambient && config.ambient_status {
                let (ambient_tx, ambient_rx) = tokio::sync::watch::channel(Arc::new(Vec::new()));
                state.borrow_mut().ambient_status = Some(ambient_tx);
                tokio::task::spawn_local(gateway_status::run(
                    istiod_kubewatch::kapi::Api::new(client.clone()),
                    leadership.clone(),
                    ambient_rx,
                    // Not per revision: istiod's `NewLeaseLeaderElection`.
                    (gateway_status::AMBIENT_ELECTION.to_owned(), Lock::Lease),
                ));
            }
            // Ingress status: istiod's `istio-leader` (a ConfigMap lock).
            let (ingress_tx, ingress_rx) = tokio::sync::watch::channel(Arc::new(Vec::new()));
            state.borrow_mut().ingress_status = Some(ingress_tx);
            tokio::task::spawn_local(gateway_status::run(
                istiod_kubewatch::kapi::Api::new(client.clone()),
                leadership.clone(),
                ingress_rx,
                (gateway_status::INGRESS_ELECTION.to_owned(), Lock::ConfigMap),
            ));
        }
        let dbg = Rc::new(Debug {
            publisher: publisher.clone(),
            ready: ready.clone(),
            draining: Arc::new(AtomicBool::new(false)),
            state: state.clone(),
            cluster_id: config.cluster_id.clone(),
            unsafe_admin: config.unsafe_admin_endpoints,
            on_http: config.debug_on_http,
            endpoint_auth: config.debug_endpoint_auth,
            allowed_namespaces: config.debug_allowed_namespaces.clone(),
            authn: ca_server.clone(),
            profile: config.profile,
            updates: tx.clone(),
            domain: config.domain.clone(),
            whatif_max_classes: config.whatif_max_classes,
        });
        tokio::task::spawn_local(debug_xds::serve(forward_rx, dbg.clone()));
        let tokio_listener = |l: std::net::TcpListener| {
            let addr =
                l.local_addr().map_err(|source| StartError::Listen { addr: ([0, 0, 0, 0], 0).into(), source })?;
            tokio::net::TcpListener::from_std(l).map_err(|source| StartError::Listen { addr, source })
        };
        // The debug and monitoring ports are served from threads of their
        // own; `/ready` is answered there, the rest on this thread.
        let spawn_http = |l: std::net::TcpListener, name: &str, handler: http::Handler, quick: http::Quick| {
            let addr =
                l.local_addr().map_err(|source| StartError::Listen { addr: ([0, 0, 0, 0], 0).into(), source })?;
            http::spawn(l, name, handler, quick).map_err(|source| StartError::Listen { addr, source })?;
            Ok::<_, StartError>(addr)
        };
        if let Some(l) = http_listener {
            let dbg2 = dbg.clone();
            // Without a monitoring port, its handlers are on this one
            // (istiod's shared mux).
            let shared = monitoring_listener.is_none().then(|| (ca_signing.clone(), webhooks.clone()));
            let hooks = webhooks_on_http.then(|| webhooks.clone());
            let handler: http::Handler = Rc::new(move |req| {
                let dbg = dbg2.clone();
                let shared = shared.clone();
                let hooks = hooks.clone();
                Box::pin(async move {
                    if req.method == ::http::Method::POST && req.path != http::WHATIF_PATH {
                        return match hooks {
                            Some(hooks) if istiod_webhook::is_webhook_path(&req.path) => {
                                webhook_on_http(hooks, req).await
                            }
                            _ => http::Response::text(405, "only GET and HEAD are supported here\n"),
                        };
                    }
                    match shared {
                        Some((ca, hooks)) if req.path == "/metrics" || req.path == "/version" => {
                            monitoring(req, &dbg, ca.as_deref(), &hooks).await
                        }
                        _ => serve_http(req, &dbg).await,
                    }
                })
            });
            let (ready, draining) = (dbg.ready.clone(), dbg.draining.clone());
            let quick: http::Quick =
                Arc::new(move |req| (req.path == "/ready").then(|| debug::readiness(&ready, &draining)));
            let addr = l.local_addr().map_err(|source| StartError::Listen { addr: ([0, 0, 0, 0], 0).into(), source })?;
            let options = http::Options { put: false, post: webhooks_on_http, grpc: grpc_on_http.clone(), whatif: true };
            http::spawn_with(l, "istiod-debug-http", handler, quick, options)
                .map_err(|source| StartError::Listen { addr, source })?;
            tracing::info!(target: "default", %addr, "serving debug HTTP");
        }
        if let Some(l) = monitoring_listener {
            let (dbg, ca, hooks) = (dbg.clone(), ca_signing.clone(), webhooks.clone());
            let handler: http::Handler = Rc::new(move |req| {
                let (dbg, ca, hooks) = (dbg.clone(), ca.clone(), hooks.clone());
                Box::pin(async move { monitoring(req, &dbg, ca.as_deref(), &hooks).await })
            });
            spawn_http(l, "istiod-monitoring-http", handler, Arc::new(|_| None))?;
        }
        // ControlZ: answered on its own thread; a port in use is logged,
        // not fatal, as in istiod.
        if let Some(scopes) = crate::logging::scopes() {
            let started = std::net::TcpListener::bind(config.ctrlz).and_then(|l| {
                let addr = l.local_addr()?;
                let quick: http::Quick = Arc::new(move |req| Some(crate::control::ctrlz::answer(req, &scopes)));
                let unused: http::Handler = Rc::new(|_| Box::pin(async { http::Response::text(404, "") }));
                http::spawn_with(l, "istiod-ctrlz", unused, quick, http::Options { put: true, post: false, grpc: None, whatif: false }).map(|()| addr)
            });
            match started {
                Ok(addr) => tracing::info!(target: "default", %addr, "ControlZ available"),
                Err(e) => tracing::error!(target: "default", addr = %config.ctrlz, "Unable to start ControlZ: {e}"),
            }
        }
        if let (Some(l), Some(tls)) = (https_listener, webhook_tls) {
            let l = tokio_listener(l)?;
            if let Ok(addr) = l.local_addr() {
                tracing::info!(target: "default", %addr, "serving the webhooks (HTTPS)");
            }
            tokio::task::spawn_local(istiod_webhook::serve(l, tls, webhooks.clone()));
        }
        // The injector's configuration: the webhook's, and the Gateway API
        // deployment controller's templates.
        let deploying = kube.is_some() && config.gateway_deployment;
        if let Some(dir) = config.injection_dir.as_ref().filter(|_| webhooks_served || deploying) {
            let env = istiod_webhook::inject::Env::from_env();
            let api = kube.as_ref().map(|client| {
                let name = istiod_webhook::injector_configmap_name(&config.identity.revision);
                (istiod_kubewatch::kapi::Api::new(client.clone()), config.identity.namespace.clone(), name)
            });
            let src = istiod_webhook::InjectorSource { dir: dir.clone(), mesh: mesh_rx.clone(), api, env };
            tokio::task::spawn_local(istiod_webhook::watch_injector(webhooks.clone(), src));
        }
        // istiod's in-cluster analysis (`PILOT_ENABLE_ANALYSIS`): messages
        // always; statuses written by the `istio-analyze-leader` in a cluster.
        if config.analysis {
            state.borrow_mut().analysis = Some(Default::default());
            let (tx, rx) = tokio::sync::watch::channel(None);
            state.borrow_mut().analysis_input = Some(tx);
            tokio::task::spawn_local(sources::analysis_loop(state.clone(), rx, config.analysis_interval));
            if let Some(client) = &kube {
                let (tx, rx) = tokio::sync::watch::channel(Arc::new(Vec::new()));
                state.borrow_mut().analysis_status = Some(tx);
                tokio::task::spawn_local(gateway_status::run(
                    istiod_kubewatch::kapi::Api::new(client.clone()),
                    leadership.clone(),
                    rx,
                    (gateway_status::ANALYSIS_ELECTION.to_owned(), istiod_kubewatch::leader::Lock::ConfigMap),
                ));
            }
        }
        // istio-cni's readiness taint (`PILOT_ENABLE_NODE_UNTAINT_CONTROLLERS`).
        if let Some(client) = kube.as_ref().filter(|_| config.node_untaint.is_some()) {
            let (tx, rx) = tokio::sync::watch::channel(Arc::new(std::collections::BTreeSet::new()));
            let taint = config.node_untaint.clone().unwrap_or_default();
            state.borrow_mut().untaint = Some((tx, config.identity.cni_namespace.clone(), taint.clone()));
            let cx = untaint::Context { api: istiod_kubewatch::kapi::Api::new(client.clone()), leadership: leadership.clone(), taint };
            tokio::task::spawn_local(untaint::run(cx, rx));
        }
        // The built-in GatewayClasses (every replica, as istiod's).
        if let Some(client) = kube.as_ref().filter(|_| config.gateway_classes && config.read_filter.gateway_api) {
            let classes = gateway_classes::builtin(
                config.discover_gateway_api_gateways,
                config.gateway_deployment_settings.ambient_waypoints,
            );
            let api = istiod_kubewatch::kapi::Api::new(client.clone());
            tokio::task::spawn_local(gateway_classes::run(api, state.clone(), classes));
        }
        if let Some(client) = kube.as_ref().filter(|_| deploying) {
            let (deploy_tx, deploy_rx) = tokio::sync::watch::channel(Arc::new(gateway_deploy::Desired::default()));
            let tags = revisions::Tags::revision_only(&config.identity.revision);
            state.borrow_mut().gateway_deploy = Some((deploy_tx, tags));
            let cx = gateway_deploy::Context {
                api: istiod_kubewatch::kapi::Api::new(client.clone()),
                leadership: leadership.clone(),
                webhooks: webhooks.clone(),
                settings: config.gateway_deployment_settings.clone(),
            };
            tokio::task::spawn_local(gateway_deploy::run(cx, deploy_rx));
        }
        // ServiceEntry addresses (PILOT_ENABLE_IP_AUTOALLOCATE): the
        // elected replica allocates and writes them.
        if let Some(client) = kube.as_ref().filter(|_| config.dns.ip_autoallocate) {
            let (tx, rx) = tokio::sync::watch::channel(Arc::new(Vec::new()));
            state.borrow_mut().ipallocate = Some(tx);
            let cx = ipallocate::Context {
                api: istiod_kubewatch::kapi::Api::new(client.clone()),
                leadership: leadership.clone(),
                v4: config.ip_autoallocate_prefixes.0.clone(),
                v6: config.ip_autoallocate_prefixes.1.clone(),
            };
            tokio::task::spawn_local(ipallocate::run(cx, rx));
        }
        // WorkloadEntry auto-registration and health checks: against the
        // API server; without one, what VMs' proxies ask is reported once.
        {
            let w = &config.workload_entries;
            let max_connection_age = config.keepalive.max_connection_age.map(|a| a + a / 2);
            let settings = autoregister::Settings {
                autoregistration: w.autoregistration,
                health_checks: w.health_checks,
                grace: w.grace,
                validate_identity: w.validate_identity,
                max_connection_age,
                instance: config.identity.pod_name.clone(),
                hbone: config.ambient,
            };
            match kube.as_ref().filter(|_| w.autoregistration || w.health_checks) {
                Some(client) => {
                    // Reads go to the watched objects first, as istiod's
                    // store reads its informers.
                    let watched = state.clone();
                    let lookup = Rc::new(move |kind: &str, ns: &str, name: &str| {
                        let st = watched.borrow();
                        st.objects.istio.iter().find(|o| o.meta.ns() == ns && o.meta.name == name && o.kind().name() == kind)
                            .and_then(|o| o.raw.value())
                    });
                    let store = autoregister::CachedApi { api: istiod_kubewatch::kapi::Api::new(client.clone()), lookup };
                    let c = autoregister::Controller::new(store, settings);
                    tokio::task::spawn_local(autoregister::run(c, lifecycle_rx));
                }
                None => {
                    tokio::task::spawn_local(autoregister::unserved(lifecycle_rx, kube.is_none()));
                }
            }
        }
        // The JWKS resolver hears which key sets each new model wants.
        let (jwks_tx, jwks_rx) = mpsc::unbounded_channel();
        state.borrow_mut().jwks_wanted = Some(jwks_tx);
        tokio::task::spawn_local(jwks::run(jwks_rx, state.clone(), tx.clone(), config.jwks_refresh));
        if let Some(auth) = ca_server.as_ref().and_then(|c| c.jwt.clone()) {
            tokio::task::spawn_local(istiod_ca::refresh_keys(auth, config.jwks_refresh));
        }
        if let Some(ca) = &ca_signing {
            use istiod_ca::store::{self, RootStore};
            // (Kubernetes signing: istiod has no CA of its own to keep.)
            let own_ca = if ca.k8s_signing.is_none() { &root_store } else { &RootStore::Memory };
            match own_ca {
                RootStore::Plugged(dir) => {
                    let every = config.ca.plugged_check_interval;
                    tokio::task::spawn_local(istiod_ca::watch_plugged(ca.clone(), dir.clone(), every, config.multiroot_mesh));
                }
                RootStore::Secret { .. } | RootStore::Dir(_) => {
                    let (every, grace) = (config.ca.root_check_interval, config.ca.root_grace_percentile);
                    let jitter = config.ca.root_check_jitter;
                    tokio::task::spawn_local(store::rotate_roots(ca.clone(), root_store.clone(), every, grace, jitter));
                }
                RootStore::Memory => {}
            }
            if let Some((cert, grpc, webhook, renew)) = serving {
                tokio::task::spawn_local(store::serve_tls(ca.clone(), cert, grpc, webhook, renew));
            }
            match (&root_store, &kube) {
                // One replica keeps the root ConfigMaps (none with
                // `PILOT_CERT_PROVIDER=none`: istiod's shouldDistributeCACert).
                (_, Some(client)) if config.identity.cert_provider != "none" => {
                    let api = istiod_kubewatch::kapi::Api::new(client.clone());
                    // Every replica patches its own revision's webhooks,
                    // elected or not (istiod: "different istiod revisions
                    // will patch their own cert", sidecarinjector.go,
                    // validation.go): a canary's webhooks must not wait for
                    // a lock the default revision holds. Writes are only
                    // made where the caBundle differs; a 409 is read again
                    // next round. Validation fails closed only once the API
                    // server is seen to reach this webhook (istiod's dry run
                    // of an invalid Gateway).
                    let (patcher, ns, rev) = (api.clone(), leadership.namespace.clone(), leadership.revision.clone());
                    let mut rounds = istiod_webhook::patch::Rounds::default();
                    let kinds = config.webhook_patching;
                    let patch_webhooks = async move |root: &str| {
                        let served = webhooks_served;
                        let done =
                            istiod_webhook::patch::reconcile(&patcher, &ns, &rev, root, served, &mut rounds, kinds);
                        if let Err(e) = done.await {
                            tracing::warn!(target: "webhook", error = %e, "cannot reconcile the webhook configurations");
                        }
                    };
                    tokio::task::spawn_local(istiod_ca::namespaces::run(
                        api,
                        leadership.clone(),
                        ca.clone(),
                        mesh_rx.clone(),
                        istiod_kubewatch::leader::Timings::istiod(),
                        patch_webhooks,
                    ));
                }
                // Without Kubernetes, a file next to the self-signed CA.
                (RootStore::Dir(dir), None) => {
                    tokio::task::spawn_local(store::write_root_file(ca.clone(), dir.clone()));
                }
                _ => {}
            }
        }
        let rebuild = match (&config.source, dir_source.take()) {
            (Source::ConfigDir(dir), Some((source, loaded))) => {
                let configz = configz(dir, &loaded);
                apply(&state, loaded.objects, Some(loaded.changed), configz, &config.domain, &tx);
                // Watch the directory: every change reloads it and sends
                // what changed; a new mesh configuration reloads it whole.
                let (watcher, events) = source.watch()?;
                let (wake_tx, wake_rx) = mpsc::unbounded_channel();
                let files_changed = wake_tx.clone();
                std::thread::spawn(move || {
                    let _watcher = watcher;
                    forward_dir_events(&events, &files_changed);
                });
                let rebuild = wake_tx.clone();
                tokio::task::spawn_local(watch_dir(
                    source,
                    dir.clone(),
                    wake_rx,
                    tx.clone(),
                    state.clone(),
                    config.domain.clone(),
                ));
                rebuild_on(&state, move || {
                    let _ = rebuild.send(Wake::Mesh);
                })
            }
            (Source::Kubernetes { .. }, _) => {
                let client = kube.clone().expect("a Kubernetes client was made at start");
                state.borrow_mut().namespace_filter = true;
                if let Some(ca) = &ca_server {
                    // istiod's Kubernetes JWT authenticator: the cores send
                    // tokens here for a TokenReview.
                    let (reviews, rx) = mpsc::unbounded_channel();
                    let _ = ca.reviewer.set(reviews);
                    if !ca.trusted_node_accounts.is_empty() {
                        let pods = Arc::new(node_pods::NodePods::default());
                        let _ = ca.pods.set(pods.clone());
                        state.borrow_mut().node_pods = Some(pods);
                    }
                    let audiences = config.ca.token_audiences.clone();
                    tokio::task::spawn_local(istiod_ca::tokenreview::run(client.clone(), audiences, rx));
                    // The Kubernetes RA: the cores queue checked CSRs here.
                    if let Some(ext) = &ca.external {
                        let (queue, rx) = mpsc::unbounded_channel();
                        let _ = ext.queue.set(queue);
                        // istiod's SetCACertificatesFromMeshConfig, again
                        // with every mesh configuration.
                        let (ca, mut settings) = (ca.clone(), mesh_rx.clone());
                        tokio::task::spawn_local(async move {
                            loop {
                                let certs = settings.borrow_and_update().ca_certificates.clone();
                                let before = ca.distributed_root();
                                if let Some(ext) = &ca.external {
                                    ext.set_mesh_roots(&certs);
                                }
                                // Under k8s signing that root is istiod's:
                                // what follows it (its certificate, the
                                // root ConfigMaps) is told, as istiod's
                                // mesh handler regenerates them.
                                if ca.k8s_signing.is_some() && ca.distributed_root() != before {
                                    ca.changed.send_modify(|n| *n += 1);
                                }
                                if settings.changed().await.is_err() {
                                    return;
                                }
                            }
                        });
                        tokio::task::spawn_local(istiod_ca::k8s_signer::run(
                            istiod_kubewatch::kapi::Api::new(client.clone()),
                            ext.signer.clone(),
                            istiod_ca::k8s_signer::CERT_WAIT,
                            rx,
                        ));
                    }
                }
                // Which gateways may read Secrets: the API server says
                // (before the first model, so none is served unasked).
                let (asks, asked) = mpsc::unbounded_channel();
                state.borrow_mut().secret_access =
                    Arc::new(istiod_mesh::model::credentials::SecretAccess { asks: Some(istiod_mesh::model::credentials::Asks::new(move |ns, sa| { let _ = asks.send((ns, sa)); })), ..Default::default() });
                tokio::task::spawn_local(secret_access::run(
                    istiod_kubewatch::kapi::Api::new(client.clone()),
                    asked,
                    state.clone(),
                    tx.clone(),
                    secret_access::Ttl::istiod(),
                ));
                let updates = Arc::new(istiod_kubewatch::kube_source::Updates::default());
                tokio::spawn(istiod_kubewatch::kube_source::run_updates(client.clone(), updates.clone()));
                let resend = updates.clone();
                let rebuild = rebuild_on(&state, move || resend.resend_all());
                // Remote clusters, from their Secrets (followed in `apply`).
                let mut remotes = remotes::Remotes::new(
                    config.identity.cluster_registries_namespace.clone(),
                    config.cluster_id.clone(),
                    config.remote_cluster_timeout,
                );
                let poke = updates.clone();
                remotes.on_change(Rc::new(move || poke.poke()));
                if let (true, Some(ca)) = (config.identity.external_istiod, &ca_server) {
                    remotes.distribute_roots(remotes::Roots {
                        ca: ca.clone(),
                        mesh: mesh_rx.clone(),
                        identity: istiod_kubewatch::leader::identity(&config.identity.pod_name),
                        revision: config.identity.revision.clone(),
                        namespace: config.identity.namespace.clone(),
                        elect: config.identity.leader_election,
                        patching: config.webhook_patching,
                    });
                }
                state.borrow_mut().remotes = Some(remotes);
                // The revision's tags decide which Gateways are deployed
                // here: read before the first model, then followed.
                if state.borrow().gateway_deploy.is_some() {
                    let api = istiod_kubewatch::kapi::Api::new(client.clone());
                    let (rev, ns) = (&config.identity.revision, &config.identity.namespace);
                    let tags = revisions::initial(&api, rev, ns).await;
                    if let Some((_, t)) = state.borrow_mut().gateway_deploy.as_mut() {
                        t.clone_from(&tags);
                    }
                    let (st, rebuild) = (state.clone(), rebuild.clone());
                    tokio::task::spawn_local(revisions::follow(api, rev.clone(), ns.clone(), tags, move |tags| {
                        if let Some((_, t)) = st.borrow_mut().gateway_deploy.as_mut() {
                            *t = tags;
                        }
                        rebuild();
                    }));
                }
                tokio::task::spawn_local(watch_kube(
                    updates,
                    tx.clone(),
                    state.clone(),
                    config.domain.clone(),
                    config.cluster_id.clone(),
                ));
                rebuild
            }
            _ => unreachable!("the config directory was read above"),
        };
        // A new mesh configuration rebuilds from every object.
        // (The CA's roots are read again before the settings are.)
        let roots_changed = roots_changed.map(|mut rx| {
            let (tx, out) = tokio::sync::watch::channel(0u64);
            let (ca, cell) = (ca_signing.clone(), ca_roots.clone());
            tokio::task::spawn_local(async move {
                while rx.changed().await.is_ok() {
                    if let Some(ca) = &ca {
                        *cell.write().unwrap_or_else(|e| e.into_inner()) = ca.trust_anchors();
                    }
                    tx.send_modify(|n| *n += 1);
                }
            });
            out
        });
        tokio::task::spawn_local(mesh_watch::run(
            mesh_sources,
            net_sources,
            mesh_texts,
            net_texts,
            mesh_tx,
            roots_changed,
            move || rebuild(),
        ));

        shutdown_signal().await;
        tracing::info!(target: "default", "shutting down");
        dbg.draining.store(true, std::sync::atomic::Ordering::SeqCst);
        // Another replica takes over at its next try, not a lease later.
        leadership.release_all().await;
        drop(tx);
        // The cores stop accepting and drain their connections over
        // --shutdownDuration; the debug port answers meanwhile (`/ready`
        // says 503).
        if let Some((_, queue, thread)) = grpc_accept.as_mut() {
            thread.stop();
            // What it queued and no core took is closed with the port, as
            // a closed listener's queue is.
            while let Ok(queued) = queue.try_recv() {
                drop(queued);
            }
        }
        if let Some(h) = cores.take() {
            let _ = tokio::task::spawn_blocking(move || h.shutdown()).await;
        }
        Ok::<(), StartError>(())
    });
    drop(grpc_accept);
    if let Some(h) = cores.take() {
        h.shutdown();
    }
    result
}

/// A request for a rebuild from every object (a new mesh configuration,
/// new revision tags): marked in `state`, so that update counts no inbound
/// updates, then `trigger` asks the source for it.
fn rebuild_on(state: &Rc<RefCell<State>>, trigger: impl Fn() + 'static) -> Rc<dyn Fn()> {
    let state = state.clone();
    Rc::new(move || {
        state.borrow_mut().rebuild = true;
        trigger();
    })
}

async fn shutdown_signal() {
    let mut term = tokio::signal::unix::signal(tokio::signal::unix::SignalKind::terminate()).ok();
    tokio::select! {
        _ = tokio::signal::ctrl_c() => {}
        _ = async { match term.as_mut() { Some(t) => { t.recv().await; } None => std::future::pending().await } } => {}
    }
}

/// istiod's workload trust bundle (`pilot/pkg/trustbundle`): the CA's and
/// RA's roots and the mesh configuration's `caCertificates` PEMs, each
/// once, sorted.
fn trust_bundle(roots: &[String], mesh_anchors: &[String]) -> Vec<String> {
    let mut out: Vec<String> = roots.iter().chain(mesh_anchors).cloned().collect();
    out.sort();
    out.dedup();
    out
}

/// The mesh configuration's `caCertificates` PEMs, all or none
/// (`AddMeshConfigUpdate`): each must be a CA certificate
/// (`verifyTrustAnchor`). SPIFFE bundle URLs are not fetched.
fn mesh_trust_anchors(certs: &[istiod_mesh::meshconfig::CertificateData]) -> Result<Vec<String>, String> {
    if certs.iter().any(|c| c.pem.is_empty() && !c.spiffe_bundle_url.is_empty()) {
        tracing::warn!(target: "default", "read and not applied: caCertificates spiffeBundleUrl (remote trust anchors are not fetched)");
    }
    let pems: Vec<String> = certs.iter().filter(|c| !c.pem.is_empty()).map(|c| c.pem.clone()).collect();
    for pem in &pems {
        istiod_pki::ca::trust_anchor(pem)?;
    }
    Ok(pems)
}
