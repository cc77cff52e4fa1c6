//! The command line: `pilot-discovery discovery` with every flag istiod
//! registers (pilot/cmd/pilot-discovery/app/cmd.go, pkg/log, pkg/ctrlz,
//! pkg/keepalive), and `pilot-discovery version`.
//!
//! Flags keep istiod's spelling (`--grpcAddr`, `--log_output_level`) so the
//! Helm chart's arguments work unchanged. As istiod (`cmd.go`:
//! `FParseErrWhitelist{UnknownFlags: true}`), an unknown flag of
//! `discovery` is ignored, with its value as pflag takes it; unlike
//! istiod, the log names each one ([`parse_lenient`]), so a typo is seen.
//! A malformed value of a known flag is an error (exit 2). Values are kept
//! as given here; [`crate::config::Config`] turns them into typed settings.

use std::time::Duration;

use clap::{Args, Parser, Subcommand, ValueEnum};

use istiod_config::duration;

/// Istio control plane (istiod-rs): xDS server, CA and webhooks.
#[derive(Debug, Parser)]
#[command(name = "pilot-discovery", disable_version_flag = true)]
pub struct Cli {
    /// What to run.
    #[command(subcommand)]
    pub command: Command,
}

/// The subcommands.
#[derive(Debug, Subcommand)]
pub enum Command {
    /// Start the control plane: xDS, CA, webhooks, debug and metrics.
    Discovery(Box<DiscoveryArgs>),
    /// Print build information.
    Version(VersionArgs),
    /// Ask a running istiod-rs what a config change would do, before it
    /// is applied (beyond istiod): which proxies' configuration changes,
    /// and how. Exit status: 0 the change is valid and stays within the
    /// allowed namespaces; 1 an object is invalid; 2 it reaches a
    /// namespace not allowed; 3 the server could not be asked.
    Whatif(WhatifArgs),
}

/// Flags of `pilot-discovery whatif`.
#[derive(Debug, Args)]
pub struct WhatifArgs {
    /// Files of Kubernetes or Istio objects (YAML or JSON, several
    /// documents each); `-` reads standard input.
    #[arg(long = "filename", short = 'f', required = true)]
    pub files: Vec<String>,
    /// The server's debug address (`--httpAddr`).
    #[arg(long = "server", default_value = "http://127.0.0.1:8080")]
    pub server: String,
    /// Ask about deleting the objects instead of creating or replacing
    /// them.
    #[arg(long = "delete")]
    pub delete: bool,
    /// Namespaces the change may reach (comma-separated or repeated):
    /// reaching a proxy or pod in another makes the exit status 2.
    #[arg(long = "allow-namespace", value_delimiter = ',')]
    pub allow_namespaces: Vec<String>,
    /// Which page of the classes reached (the server's
    /// `ISTIOD_RS_WHATIF_MAX_CLASSES` per page).
    #[arg(long = "page", default_value_t = 0)]
    pub page: usize,
    /// Leave out the diffs of changed resources.
    #[arg(long = "no-diff")]
    pub no_diff: bool,
    /// Output: `text` (a summary table and the diffs) or `json` (the
    /// server's answer).
    #[arg(long = "output", short = 'o', default_value = "text")]
    pub output: WhatifOutput,
}

/// `whatif -o` formats.
#[derive(Debug, Clone, Copy, PartialEq, Eq, ValueEnum)]
pub enum WhatifOutput {
    /// A table and diffs.
    Text,
    /// The answer as the server gave it.
    Json,
}

/// Flags of `pilot-discovery discovery`, istiod's names and defaults.
/// Options whose default comes from an environment variable are `None`
/// here and resolved in [`crate::config`]. A flag given twice takes its
/// last value, as Go's flag packages do.
#[derive(Debug, Args)]
#[command(args_override_self = true)]
pub struct DiscoveryArgs {
    /// Comma-separated list of platform service registries to read from
    /// (Kubernetes, Mock).
    #[arg(long = "registries", value_delimiter = ',', default_value = "Kubernetes")]
    pub registries: Vec<String>,
    /// Namespace of the multicluster secrets [default: $POD_NAMESPACE].
    #[arg(long = "clusterRegistriesNamespace")]
    pub cluster_registries_namespace: Option<String>,
    /// Kubeconfig file; in-cluster configuration when empty.
    #[arg(long = "kubeconfig", default_value = "")]
    pub kubeconfig: String,
    /// Mesh configuration file, followed as it changes; when it does not
    /// exist, the `istio[-<REVISION>]` ConfigMap (Kubernetes), else
    /// built-in defaults.
    #[arg(long = "meshConfig", default_value = "./etc/istio/config/mesh")]
    pub mesh_config: String,
    /// The sidecar injector's configuration directory (the mounted
    /// `istio-sidecar-injector` ConfigMap: files `config` and `values`);
    /// istiod's fixed `./var/lib/istio/inject`.
    #[arg(long = "injectionDir", default_value = "./var/lib/istio/inject")]
    pub injection_dir: String,
    /// Mesh networks configuration file (accepted; not read yet: mesh
    /// networks are not served).
    #[arg(long = "networksConfig", default_value = "./etc/istio/config/meshNetworks")]
    pub networks_config: String,
    /// Namespace istiod runs in [default: $POD_NAMESPACE].
    #[arg(long = "namespace", short = 'n')]
    pub namespace: Option<String>,
    /// Namespace of istio-cni [default: $POD_NAMESPACE].
    #[arg(long = "cniNamespace")]
    pub cni_namespace: Option<String>,
    /// Longest a graceful shutdown may take.
    #[arg(long = "shutdownDuration", default_value = "10s", value_parser = duration::parse)]
    pub shutdown_duration: Duration,
    /// Read Kubernetes and Istio objects from the YAML/JSON files below this
    /// directory instead of a Kubernetes API server.
    #[arg(long = "configDir", default_value = "")]
    pub config_dir: String,
    /// DNS domain suffix of the cluster.
    #[arg(long = "domain", default_value = "cluster.local")]
    pub domain: String,
    /// ID of the cluster this istiod serves [default: $CLUSTER_ID or Kubernetes].
    #[arg(long = "clusterID")]
    pub cluster_id: Option<String>,
    /// Alias names for clusters, `alias=clusterID,...`.
    #[arg(long = "clusterAliases", value_delimiter = ',')]
    pub cluster_aliases: Vec<String>,
    /// Debug HTTP listen address (`/debug/*`, `/ready`); empty disables.
    #[arg(long = "httpAddr", default_value = ":8080")]
    pub http_addr: String,
    /// Webhook HTTPS listen address; empty disables.
    #[arg(long = "httpsAddr", default_value = ":15017")]
    pub https_addr: String,
    /// Plaintext xDS gRPC listen address; empty disables.
    #[arg(long = "grpcAddr", default_value = ":15010")]
    pub grpc_addr: String,
    /// TLS xDS gRPC listen address; empty disables.
    #[arg(long = "secureGRPCAddr", default_value = ":15012")]
    pub secure_grpc_addr: String,
    /// Prometheus metrics listen address; empty disables.
    #[arg(long = "monitoringAddr", default_value = ":15014")]
    pub monitoring_addr: String,
    /// Serve profiling endpoints under /debug/pprof.
    #[arg(long = "profile", default_value = "true", num_args = 0..=1, require_equals = true,
          default_missing_value = "true", value_parser = parse_go_bool)]
    pub profile: bool,
    /// CA certificate of the serving certificate.
    #[arg(long = "caCertFile", default_value = "")]
    pub ca_cert_file: String,
    /// Serving certificate for :15012 and :15017.
    #[arg(long = "tlsCertFile", default_value = "")]
    pub tls_cert_file: String,
    /// Private key of `--tlsCertFile`.
    #[arg(long = "tlsKeyFile", default_value = "")]
    pub tls_key_file: String,
    /// Allowed TLS 1.2 cipher suites, by Go name.
    #[arg(long = "tls-cipher-suites", value_delimiter = ',')]
    pub tls_cipher_suites: Vec<String>,
    /// Minimum TLS version of the servers.
    #[arg(long = "tls-min-version", default_value = "1.2")]
    pub tls_min_version: TlsVersion,
    /// Queries per second allowed to the Kubernetes API.
    #[arg(long = "kubernetesApiQPS", default_value_t = 80.0)]
    pub kubernetes_api_qps: f32,
    /// Burst allowed to the Kubernetes API.
    #[arg(long = "kubernetesApiBurst", default_value_t = 160)]
    pub kubernetes_api_burst: u32,
    /// Interval between keepalive pings on an idle gRPC connection
    /// [default: $GRPC_KEEPALIVE_INTERVAL or 30s].
    #[arg(long = "keepaliveInterval", value_parser = duration::parse)]
    pub keepalive_interval: Option<Duration>,
    /// How long to wait for a keepalive ping's answer [default:
    /// $GRPC_KEEPALIVE_TIMEOUT or 10s].
    #[arg(long = "keepaliveTimeout", value_parser = duration::parse)]
    pub keepalive_timeout: Option<Duration>,
    /// Longest a gRPC connection may live before a graceful GOAWAY
    /// [default: unlimited].
    #[arg(long = "keepaliveMaxServerConnectionAge", value_parser = duration::parse)]
    pub keepalive_max_server_connection_age: Option<Duration>,
    /// Port of the ControlZ introspection server.
    #[arg(long = "ctrlz_port", default_value_t = 9876)]
    pub ctrlz_port: u16,
    /// Listen address of ControlZ; `*` means every address.
    #[arg(long = "ctrlz_address", default_value = "localhost")]
    pub ctrlz_address: String,
    /// Where logs go: `stdout`, `stderr` or a file path; repeatable.
    #[arg(long = "log_target", default_value = "stdout")]
    pub log_target: Vec<String>,
    /// Log as JSON instead of console text.
    #[arg(long = "log_as_json", default_value = "false", num_args = 0..=1, require_equals = true,
          default_missing_value = "true", value_parser = parse_go_bool)]
    pub log_as_json: bool,
    /// Minimum level per scope, `scope:level,...`; a bare level applies to
    /// `default`, the scope `all` to every scope. Levels: debug, info, warn,
    /// error, fatal, none.
    #[arg(long = "log_output_level", default_value = "")]
    pub log_output_level: String,
    /// Level per scope at which stack traces are captured.
    #[arg(long = "log_stacktrace_level", default_value = "default:none")]
    pub log_stacktrace_level: String,
    /// Scopes whose log lines carry the caller (comma-separated, or `all`).
    #[arg(long = "log_caller", default_value = "")]
    pub log_caller: String,
    /// Verbosity of the Kubernetes client's logs.
    #[arg(long = "vklog", default_value_t = 0)]
    pub vklog: u8,
    /// Serving cores (glommio executors); 0 means every available core.
    /// Not an istiod flag: istiod-rs's own.
    #[arg(long = "cores", default_value_t = 0)]
    pub cores: usize,
}

/// `--tls-min-version` values istiod accepts.
#[derive(Debug, Clone, Copy, PartialEq, Eq, ValueEnum)]
pub enum TlsVersion {
    /// TLS 1.2.
    #[value(name = "1.2")]
    V1_2,
    /// TLS 1.3.
    #[value(name = "1.3")]
    V1_3,
}

/// Flags of `pilot-discovery version`.
#[derive(Debug, Args)]
pub struct VersionArgs {
    /// Print only the version number.
    #[arg(long = "short", short = 's', default_value = "false", num_args = 0..=1, require_equals = true,
          default_missing_value = "true", value_parser = parse_go_bool)]
    pub short: bool,
    /// Output format: yaml or json.
    #[arg(long = "output", short = 'o')]
    pub output: Option<VersionOutput>,
}

/// `version -o` formats.
#[derive(Debug, Clone, Copy, PartialEq, Eq, ValueEnum)]
pub enum VersionOutput {
    /// YAML, keys sorted.
    Yaml,
    /// JSON, indented.
    Json,
}

/// Boolean flags follow pflag: `--flag` or `--flag=<bool>` with Go's
/// `strconv.ParseBool` spellings.
fn parse_go_bool(v: &str) -> Result<bool, String> {
    parse_bool(v)
        .ok_or_else(|| format!("invalid boolean {v:?}: expected true or false (or 1, t, T, TRUE, True, 0, f, ...)"))
}

/// Parses `args` (the program name first) as [`Cli`], leaving out the
/// unknown `--flags` of `discovery` as istiod's pflag does with unknown
/// flags whitelisted: `--name=value` alone, `--name value` with the value
/// (the next argument, unless it starts with `-`), `--name` alone.
/// Returns the command line and the arguments left out.
pub fn parse_lenient(args: Vec<std::ffi::OsString>) -> Result<(Cli, Vec<String>), clap::Error> {
    use clap::CommandFactory;
    let mut cmd = Cli::command();
    cmd.build();
    let Some(discovery) = cmd.find_subcommand("discovery") else {
        return Cli::try_parse_from(args).map(|c| (c, vec![]));
    };
    // Only when the subcommand is `discovery` (the first argument), and
    // only its flags; positional arguments are clap's to judge.
    if args.get(1).is_none_or(|a| a != "discovery") {
        return Cli::try_parse_from(args).map(|c| (c, vec![]));
    }
    // Every long name, and whether it takes a value.
    let known: std::collections::HashMap<String, bool> = discovery
        .get_arguments()
        .flat_map(|a| {
            // `--x` whose value is optional (`num_args(0..=1)`) takes no
            // separate argument.
            let takes = a.get_action().takes_values() && a.get_num_args().is_none_or(|n| n.min_values() > 0);
            a.get_long().into_iter().chain(a.get_all_aliases().unwrap_or_default()).map(move |n| (n.to_owned(), takes))
        })
        .chain([("help".to_owned(), false)])
        .collect();
    let shorts: std::collections::HashSet<char> = discovery
        .get_arguments()
        .flat_map(|a| a.get_short().into_iter().chain(a.get_all_short_aliases().unwrap_or_default()))
        .chain(['h'])
        .collect();
    let mut kept: Vec<std::ffi::OsString> = args[..2].to_vec();
    let mut dropped = Vec::new();
    let mut rest = args[2..].iter().peekable();
    while let Some(a) = rest.next() {
        let text = a.to_string_lossy();
        if text == "--" {
            kept.push(a.clone());
            kept.extend(rest.cloned());
            break;
        }
        // Whether `a` is an unknown flag, and whether a value may follow it
        // as a separate argument (`--x v`, `-x v`; not `--x=v`, `-xv`).
        let unknown = match text.strip_prefix("--") {
            Some(flag) => {
                let (name, inline) = flag.split_once('=').map_or((flag, false), |(n, _)| (n, true));
                match known.get(name) {
                    // A known flag's separate value is its own, whatever it
                    // looks like (`--x -1`).
                    Some(true) if !inline => {
                        kept.push(a.clone());
                        kept.extend(rest.next().cloned());
                        continue;
                    }
                    Some(_) => None,
                    None => Some(!inline),
                }
            }
            None => match text.strip_prefix('-').and_then(|f| f.chars().next()) {
                Some(c) if !shorts.contains(&c) => Some(text.len() == 2),
                _ => None,
            },
        };
        let Some(may_take_value) = unknown else {
            kept.push(a.clone());
            continue;
        };
        dropped.push(text.into_owned());
        // With its value, as pflag's stripUnknownFlagValue.
        if may_take_value && rest.peek().is_some_and(|v| !v.to_string_lossy().starts_with('-')) {
            dropped.extend(rest.next().map(|v| v.to_string_lossy().into_owned()));
        }
    }
    Cli::try_parse_from(kept).map(|c| (c, dropped))
}

/// Go's `strconv.ParseBool`, which istiod's `env` package uses: exactly
/// these spellings, nothing else (`yes`, `on` are errors).
pub fn parse_bool(v: &str) -> Option<bool> {
    match v {
        "1" | "t" | "T" | "TRUE" | "true" | "True" => Some(true),
        "0" | "f" | "F" | "FALSE" | "false" | "False" => Some(false),
        _ => None,
    }
}
