use std::collections::BTreeMap;
use std::time::Duration;

use clap::Parser;

use super::*;
use crate::cli::{Cli, Command};

fn args(flags: &[&str]) -> DiscoveryArgs {
    let mut argv = vec!["pilot-discovery", "discovery"];
    argv.extend_from_slice(flags);
    match Cli::try_parse_from(argv).expect("flags parse").command {
        Command::Discovery(a) => *a,
        Command::Version(_) | Command::Whatif(_) => unreachable!(),
    }
}

fn build(flags: &[&str], env: &[(&str, &str)]) -> Result<Config, ConfigError> {
    let env: BTreeMap<&str, &str> = env.iter().copied().collect();
    Config::new(&args(flags), &env)
}

#[test]
fn defaults_are_istiods() {
    let c = build(&[], &[]).unwrap();
    assert_eq!(c.listen.grpc, Some(ListenAddr { host: String::new(), port: 15010 }));
    assert_eq!(c.listen.secure_grpc.as_ref().unwrap().port, 15012);
    assert_eq!(c.listen.http.as_ref().unwrap().port, 8080);
    assert_eq!(c.listen.https.as_ref().unwrap().port, 15017);
    assert_eq!(c.listen.monitoring.as_ref().unwrap().port, 15014);
    assert_eq!(c.domain, "cluster.local");
    assert_eq!(c.cluster_id, "Kubernetes");
    assert_eq!(c.source, Source::Kubernetes { kubeconfig: None });
    assert_eq!(c.registries, vec![Registry::Kubernetes]);
    assert_eq!(c.push.debounce_after, Duration::from_millis(100));
    assert_eq!(c.push.debounce_max, Duration::from_secs(10));
    assert!(c.push.eds_debounce);
    assert_eq!(c.push.push_throttle, 0);
    assert_eq!(c.keepalive.interval, Duration::from_secs(30));
    assert_eq!(c.keepalive.timeout, Duration::from_secs(10));
    assert_eq!(c.keepalive.max_connection_age, None);
    assert_eq!(c.keepalive.max_recv_msg_size, 4 << 20);
    assert_eq!(c.keepalive.max_concurrent_streams, 100_000);
    assert_eq!(c.identity.namespace, "istio-system");
    assert_eq!(c.identity.cni_namespace, "istio-system");
    assert_eq!(c.ca.default_workload_cert_ttl, Duration::from_secs(86_400));
    assert_eq!(c.ca.max_workload_cert_ttl, Duration::from_secs(90 * 86_400));
    assert_eq!(c.log.default, LogLevel::Info);
    assert_eq!(c.log.scopes.get("grpc"), Some(&LogLevel::None));
    assert!(c.delta_xds && c.xds_cache && c.profile);
    assert_eq!(c.shutdown_duration, Duration::from_secs(10));
}

#[test]
fn flags_as_the_helm_chart_passes_them() {
    let c = build(
        &[
            "--configDir",
            "examples/bookinfo",
            "--grpcAddr=127.0.0.1:0",
            "--secureGRPCAddr",
            "",
            "--httpAddr",
            "[::1]:18080",
            "--monitoringAddr=:0",
            "--domain",
            "mesh.example",
            "--clusterID",
            "east",
            "--keepaliveMaxServerConnectionAge",
            "30m",
            "--log_output_level=default:debug,ads:warn",
            "--log_as_json",
            "--profile=false",
            "--registries=Kubernetes,Mock",
            "--clusterAliases=old=east",
        ],
        &[],
    )
    .unwrap();
    assert_eq!(c.source, Source::ConfigDir("examples/bookinfo".into()));
    assert_eq!(c.listen.grpc, Some(ListenAddr { host: "127.0.0.1".into(), port: 0 }));
    assert_eq!(c.listen.secure_grpc, None, "an empty address disables the listener");
    assert_eq!(c.listen.http, Some(ListenAddr { host: "::1".into(), port: 18080 }));
    assert_eq!(c.listen.http.as_ref().unwrap().to_string(), "[::1]:18080");
    assert_eq!(c.domain, "mesh.example");
    assert_eq!(c.cluster_id, "east");
    assert_eq!(c.keepalive.max_connection_age, Some(Duration::from_secs(1800)));
    assert_eq!(c.log.default, LogLevel::Debug);
    assert_eq!(c.log.scopes.get("ads"), Some(&LogLevel::Warn));
    assert!(c.log.json);
    assert!(!c.profile);
    assert_eq!(c.registries, vec![Registry::Kubernetes, Registry::Mock]);
    assert_eq!(c.cluster_aliases.get("old").map(String::as_str), Some("east"));
}

#[test]
fn environment_variables_are_read_through_the_trait() {
    let c = build(
        &[],
        &[
            ("PILOT_DEBOUNCE_AFTER", "5ms"),
            ("PILOT_DEBOUNCE_MAX", "1s"),
            ("PILOT_ENABLE_EDS_DEBOUNCE", "false"),
            ("PILOT_PUSH_THROTTLE", "42"),
            ("PILOT_MAX_REQUESTS_PER_SECOND", "12.5"),
            ("POD_NAMESPACE", "istio-canary"),
            ("POD_NAME", "istiod-abc"),
            ("CLUSTER_ID", "west"),
            ("REVISION", "canary"),
            ("ISTIOD_CUSTOM_HOST", "istiod.example, other.example"),
            ("GRPC_KEEPALIVE_INTERVAL", "1m"),
            ("ISTIO_DELTA_XDS", "0"),
            ("DEFAULT_WORKLOAD_CERT_TTL", "12h"),
            ("ISTIO_GPRC_MAXRECVMSGSIZE", "1048576"),
        ],
    )
    .unwrap();
    assert_eq!(c.push.debounce_after, Duration::from_millis(5));
    assert_eq!(c.push.debounce_max, Duration::from_secs(1));
    assert!(!c.push.eds_debounce);
    assert_eq!(c.push.push_throttle, 42);
    assert_eq!(c.push.max_requests_per_second, 12.5);
    assert_eq!(c.identity.namespace, "istio-canary");
    assert_eq!(c.identity.cluster_registries_namespace, "istio-canary");
    assert_eq!(c.identity.pod_name, "istiod-abc");
    assert_eq!(c.identity.revision, "canary");
    assert_eq!(c.identity.custom_hosts, vec!["istiod.example", "other.example"]);
    assert_eq!(c.cluster_id, "west");
    assert_eq!(c.keepalive.interval, Duration::from_secs(60));
    assert!(!c.delta_xds);
    assert_eq!(c.ca.default_workload_cert_ttl, Duration::from_secs(12 * 3600));
    assert_eq!(c.keepalive.max_recv_msg_size, 1 << 20);
}

#[test]
fn flags_win_over_environment() {
    let c = build(
        &["--clusterID=flag", "-n", "ns-flag", "--keepaliveInterval=5s"],
        &[("CLUSTER_ID", "env"), ("POD_NAMESPACE", "ns-env"), ("GRPC_KEEPALIVE_INTERVAL", "1m")],
    )
    .unwrap();
    assert_eq!(c.cluster_id, "flag");
    assert_eq!(c.identity.namespace, "ns-flag");
    assert_eq!(c.keepalive.interval, Duration::from_secs(5));
}

#[test]
fn empty_environment_values_count_as_unset() {
    let c = build(&[], &[("PILOT_DEBOUNCE_AFTER", ""), ("POD_NAMESPACE", "")]).unwrap();
    assert_eq!(c.push.debounce_after, Duration::from_millis(100));
    assert_eq!(c.identity.namespace, "istio-system");
}

#[test]
fn bad_environment_values_name_the_variable() {
    let cases = [
        ("PILOT_DEBOUNCE_AFTER", "100"),
        ("PILOT_DEBOUNCE_MAX", "ten seconds"),
        ("PILOT_ENABLE_EDS_DEBOUNCE", "yes"),
        ("PILOT_PUSH_THROTTLE", "1e3"),
        ("PILOT_MAX_REQUESTS_PER_SECOND", "NaN"),
        ("ISTIO_GPRC_MAXRECVMSGSIZE", "0"),
        ("ISTIO_GPRC_MAXRECVMSGSIZE", "-1"),
        ("MAX_WORKLOAD_CERT_TTL", "90d"),
        ("CITADEL_SELF_SIGNED_CA_RSA_KEY_SIZE", "1024"),
        ("CITADEL_SELF_SIGNED_ROOT_CERT_GRACE_PERIOD_PERCENTILE", "120"),
        ("CITADEL_SELF_SIGNED_ROOT_CERT_CHECK_INTERVAL", "hourly"),
        ("XDS_AUTH", "maybe"),
        ("PILOT_ENABLE_XDS_IDENTITY_CHECK", "2"),
    ];
    // A value that does not parse is noted and its default used (istiod's
    // env package); one that parses but is out of range stops the start.
    for (name, value) in cases {
        let text = match build(&[], &[(name, value)]) {
            Err(e) => e.to_string(),
            Ok(c) => c.env_warnings.join("\n"),
        };
        assert!(text.contains(name) && text.contains(value), "{name}={value}: {text}");
    }
    let c = build(&[], &[("PILOT_DEBOUNCE_AFTER", "100"), ("XDS_AUTH", "maybe")]).unwrap();
    assert_eq!(c.push.debounce_after, std::time::Duration::from_millis(100), "the default");
    assert!(c.ca.xds_auth, "the default");
    assert_eq!(c.env_warnings.len(), 2, "{:?}", c.env_warnings);
    // istiod's PILOT_ANALYSIS_INTERVAL: under a second is 10s, with its
    // warning; a second or more stands.
    let c = build(&[], &[("PILOT_ANALYSIS_INTERVAL", "500ms")]).unwrap();
    assert_eq!(c.analysis_interval, std::time::Duration::from_secs(10));
    assert_eq!(c.env_warnings, ["PILOT_ANALYSIS_INTERVAL 500ms is too small, it will be set to default 10 seconds"]);
    let c = build(&[], &[("PILOT_ANALYSIS_INTERVAL", "2s")]).unwrap();
    assert_eq!((c.analysis_interval, c.env_warnings.len()), (std::time::Duration::from_secs(2), 0));
    // A trusted node account without `/` is skipped with a word, as istiod
    // skips it; the others stand.
    let c = build(&[], &[("CA_TRUSTED_NODE_ACCOUNTS", "istio-system/ztunnel, ztunnel")]).unwrap();
    assert_eq!(c.ca.trusted_node_accounts, vec![("istio-system".to_owned(), "ztunnel".to_owned())]);
    assert!(
        c.env_warnings.iter().any(|w| w.contains("CA_TRUSTED_NODE_ACCOUNTS") && w.contains("\"ztunnel\"")),
        "{:?}",
        c.env_warnings
    );
}

#[test]
fn bad_flag_values_are_errors() {
    for (flags, needle) in [
        (&["--grpcAddr=15010"][..], "grpcAddr"),
        (&["--httpAddr=::1:80"][..], "brackets"),
        (&["--monitoringAddr=:99999"][..], "port"),
        (&["--registries=Consul"][..], "Kubernetes or Mock"),
        (&["--log_output_level=ads:loud"][..], "loud"),
        (&["--clusterAliases=a=x,b=x"][..], "only one alias"),
    ] {
        let err = build(flags, &[]).expect_err(needle).to_string();
        assert!(err.contains(needle), "{flags:?}: {err}");
    }
}

#[test]
fn clap_rejects_unknown_flags_and_malformed_values_with_exit_code_2() {
    for argv in [
        &["pilot-discovery", "discovery", "--grpcAdr=:1"][..],
        &["pilot-discovery", "discovery", "--keepaliveMaxServerConnectionAge=forever"],
        &["pilot-discovery", "discovery", "--profile=maybe"],
        &["pilot-discovery", "discovery", "--tls-min-version=1.1"],
        &["pilot-discovery", "discovery", "extra"],
        &["pilot-discovery", "frobnicate"],
    ] {
        let err = Cli::try_parse_from(argv).expect_err("must fail");
        assert_eq!(err.exit_code(), 2, "{argv:?}");
    }
}

#[test]
fn log_levels_follow_istio_rules() {
    let (d, s) = LogConfig::parse_levels("debug").unwrap();
    assert_eq!(d, LogLevel::Debug);
    assert_eq!(s.get("grpc"), Some(&LogLevel::None));
    let (d, s) = LogConfig::parse_levels("ads:debug,all:error").unwrap();
    assert_eq!(d, LogLevel::Error);
    assert_eq!(s.get("ads"), Some(&LogLevel::Error), "`all` overrides every scope");
    assert!(LogConfig::parse_levels("default:verbose").is_err());
}

#[test]
fn listen_addresses_parse_like_go() {
    assert_eq!(ListenAddr::parse(":15010").unwrap(), ListenAddr { host: String::new(), port: 15010 });
    assert_eq!(ListenAddr::parse("localhost:1").unwrap().host, "localhost");
    assert_eq!(ListenAddr::parse("[::]:2").unwrap().host, "::");
    for bad in ["", "15010", ":", ":-1", "[::1:5", "::1:5", "a b:1"] {
        assert!(ListenAddr::parse(bad).is_err(), "{bad:?}");
    }
}

#[test]
fn automatic_throttle_matches_istiod() {
    assert_eq!(Config::automatic_throttle(2), 25);
    assert_eq!(Config::automatic_throttle(64), 100);
}

#[test]
fn settings_without_effect_are_listed_for_the_log() {
    let quiet = build(&[], &[]).unwrap();
    assert_eq!(quiet.not_yet_supported(), Vec::<String>::new(), "--profile is served");
    let c = build(
        &["--profile=false", "--kubernetesApiQPS", "10"],
        &[("PILOT_PUSH_THROTTLE", "20"), ("PILOT_ENABLE_XDS_CACHE", "false")],
    )
    .unwrap();
    let lines = c.not_yet_supported();
    assert_eq!(lines.len(), 1, "PILOT_PUSH_THROTTLE and --kubernetesApiQPS are acted on: {lines:?}");
    assert!(lines.iter().any(|l| l.starts_with("PILOT_ENABLE_XDS_CACHE=false")), "{lines:?}");
    assert_eq!(c.kube_api_qps, 10.0);
}

/// `--ctrlz_address` as istiod reads it: `localhost` is loopback, `*`
/// every address; `--log_stacktrace_level` has its own base (none).
#[test]
fn controlz_address_and_stack_trace_levels() {
    let c = build(&[], &[]).unwrap();
    assert_eq!(c.ctrlz, "127.0.0.1:9876".parse().unwrap());
    let c = build(&["--ctrlz_address", "*", "--ctrlz_port", "0", "--log_stacktrace_level", "ads:error"], &[]).unwrap();
    assert_eq!(c.ctrlz, "0.0.0.0:0".parse().unwrap());
    assert_eq!(c.log.stack_default, LogLevel::None);
    assert_eq!(c.log.stack_scopes.get("ads"), Some(&LogLevel::Error));
    assert!(build(&["--ctrlz_address", "not-an-ip"], &[]).is_err());
}

#[test]
fn zero_keepalive_and_stream_settings_mean_what_they_mean_to_grpc_go() {
    // Issue #19, item 6: zero sent a PING per event-loop turn, killed every
    // connection at its first PING or at once, or opened no stream.
    let c = build(
        &["--keepaliveInterval=0s", "--keepaliveTimeout=0s", "--keepaliveMaxServerConnectionAge=0s"],
        &[("ISTIO_GPRC_MAXSTREAMS", "0")],
    )
    .unwrap();
    assert_eq!(c.keepalive.interval, Duration::from_secs(7200), "grpc-go's defaultServerKeepaliveTime");
    assert_eq!(c.keepalive.timeout, Duration::from_secs(20), "grpc-go's defaultServerKeepaliveTimeout");
    assert_eq!(c.keepalive.max_connection_age, None, "no age limit");
    assert_eq!(c.keepalive.max_concurrent_streams, u32::MAX, "no stream limit");
    let c = build(&[], &[("GRPC_KEEPALIVE_INTERVAL", "0s"), ("GRPC_KEEPALIVE_TIMEOUT", "0")]).unwrap();
    assert_eq!((c.keepalive.interval, c.keepalive.timeout), (Duration::from_secs(7200), Duration::from_secs(20)));
}

#[test]
fn input_limits_have_defaults_and_refuse_zero() {
    let c = build(&[], &[]).unwrap();
    assert_eq!(c.limits.max_node_bytes, 64 * 1024);
    assert_eq!(c.limits.config_dir, istiod_kubewatch::config_dir::Limits::default());
    let c = build(&[], &[("ISTIOD_RS_CONFIG_MAX_DOCUMENTS", "5"), ("ISTIOD_RS_MAX_NODE_BYTES", "1000")]).unwrap();
    assert_eq!((c.limits.config_dir.max_documents, c.limits.max_node_bytes), (5, 1000));
    let e = build(&[], &[("ISTIOD_RS_MAX_NODE_BYTES", "0")]).unwrap_err().to_string();
    assert!(e.contains("ISTIOD_RS_MAX_NODE_BYTES") && e.contains("at least 1"), "{e}");
}

/// `docs/environment.md` lists every variable istiod reads with its state
/// here: one marked honoured (or read) is read by some source file (but
/// for those kube-rs reads), and one marked not yet or not applicable is
/// read by none. A variable that starts being read must have its row
/// changed, and a row cannot claim what the code does not do.
#[test]
fn every_istiod_variable_has_its_state() {
    let root = std::path::Path::new(env!("CARGO_MANIFEST_DIR"));
    let page = std::fs::read_to_string(root.join("docs/environment.md")).unwrap();
    let istiods = page.split("\n## istiod-rs's own").next().unwrap();
    let mut sources = String::new();
    let mut dirs = vec![root.to_path_buf()];
    while let Some(d) = dirs.pop() {
        for e in std::fs::read_dir(&d).unwrap().flatten() {
            let p = e.path();
            let name = e.file_name().to_string_lossy().into_owned();
            if p.is_dir() {
                if !matches!(name.as_str(), "target" | ".git" | ".venv" | "tests" | "fuzz" | "docs") {
                    dirs.push(p);
                }
            } else if name.ends_with(".rs") && !name.ends_with("tests.rs") {
                sources.push_str(&std::fs::read_to_string(&p).unwrap());
            }
        }
    }
    let (mut rows, mut wrong) = (0, Vec::new());
    let mut states: std::collections::BTreeMap<String, usize> = Default::default();
    for line in istiods.lines().filter(|l| l.starts_with("| `")) {
        *states.entry(line.split(" | ").nth(2).unwrap_or_default().to_owned()).or_default() += 1;
        let cells: Vec<&str> = line.split(" | ").collect();
        let name = cells[0].trim_start_matches("| ").trim_matches('`');
        if name.contains(' ') {
            continue; // HTTPS_PROXY / HTTP_PROXY / NO_PROXY
        }
        rows += 1;
        let (state, note) = (cells[2], cells.get(3).copied().unwrap_or(""));
        let read = sources.contains(&format!("\"{name}\""));
        match state {
            "honoured" | "read, not applied" if !read && !note.contains("kube-rs") => {
                wrong.push(format!("{name}: {state}, but no source reads it"))
            }
            "not yet" | "not applicable" if read => wrong.push(format!("{name}: {state}, but a source reads it")),
            "honoured" | "read, not applied" | "not yet" | "not applicable" => {}
            other => wrong.push(format!("{name}: unknown state {other:?}")),
        }
    }
    assert!(rows > 190, "every variable of istiod's: {rows} rows");
    // The summary at the top counts the table.
    let total: usize = states.values().sum();
    assert!(page.contains(&format!("\n{total} rows in all")), "the page says another total than its {total} rows");
    for (state, n) in &states {
        assert!(page.contains(&format!("\n- {state}: {n}\n")), "the page's count of {state:?} is not {n}");
    }
    assert!(wrong.is_empty(), "docs/environment.md disagrees with the sources:\n{}", wrong.join("\n"));
}

#[test]
fn the_ring_depth_is_a_benchmark_knob_within_io_urings_bounds() {
    assert_eq!(build(&[], &[]).unwrap().push.ring_depth, 4096);
    assert_eq!(build(&[], &[("ISTIOD_RS_RING_DEPTH", "128")]).unwrap().push.ring_depth, 128);
    assert_eq!(build(&[], &[("ISTIOD_RS_RING_DEPTH", "32768")]).unwrap().push.ring_depth, 32768);
    // A number out of io_uring's range is refused at start.
    for bad in ["0", "32769"] {
        let e = build(&[], &[("ISTIOD_RS_RING_DEPTH", bad)]).unwrap_err().to_string();
        assert!(e.contains("ISTIOD_RS_RING_DEPTH") && e.contains("must be 1 to 32768"), "{bad}: {e}");
    }
    // What is not a number is warned about and the default taken, as for
    // every variable read through the environment.
    for bad in ["-1", "deep"] {
        let c = build(&[], &[("ISTIOD_RS_RING_DEPTH", bad)]).unwrap();
        assert_eq!(c.push.ring_depth, 4096);
        assert!(c.env_warnings.iter().any(|w| w.contains("ISTIOD_RS_RING_DEPTH")), "{bad}: {:?}", c.env_warnings);
    }
}
