//! `pilot-discovery version`: build information in istiod's shapes
//! (pkg/version), so tooling that reads `-o json` finds the same keys.

use std::fmt::Write as _;

use crate::cli::{VersionArgs, VersionOutput};

/// What this binary was built from. Fields not stamped at build time read
/// `unknown`, as in istiod.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct BuildInfo {
    /// Release version (the workspace version).
    pub version: &'static str,
    /// Git commit, from `ISTIOD_GIT_REVISION` at build time.
    pub git_revision: &'static str,
    /// istiod reports its Go version here; we report the Rust one.
    pub golang_version: &'static str,
    /// `Clean` or `Modified`, from `ISTIOD_BUILD_STATUS` at build time.
    pub build_status: &'static str,
    /// Git tag, from `ISTIOD_GIT_TAG` at build time.
    pub git_tag: &'static str,
}

/// This binary's build information.
pub const BUILD: BuildInfo = BuildInfo {
    version: env!("CARGO_PKG_VERSION"),
    git_revision: match option_env!("ISTIOD_GIT_REVISION") {
        Some(v) => v,
        None => "unknown",
    },
    golang_version: concat!("rust", env!("CARGO_PKG_RUST_VERSION")),
    build_status: match option_env!("ISTIOD_BUILD_STATUS") {
        Some(v) => v,
        None => "unknown",
    },
    git_tag: match option_env!("ISTIOD_GIT_TAG") {
        Some(v) => v,
        None => "unknown",
    },
};

impl BuildInfo {
    /// istiod's `BuildInfo.String()` (`pkg/version/version.go`):
    /// `version-revision-status`, what `/version` on the monitoring port
    /// answers and `pilot_info` carries.
    pub fn short(&self) -> String {
        format!("{}-{}-{}", self.version, self.git_revision, self.build_status)
    }
}

/// When the server started (`istiod_uptime_seconds`).
static STARTED: std::sync::OnceLock<std::time::Instant> = std::sync::OnceLock::new();

/// Notes the server's start (the first call wins).
pub fn mark_start() {
    STARTED.get_or_init(std::time::Instant::now);
}

/// istiod's build and uptime metrics: `istio_build{component,tag}`
/// (`pkg/version/stats.go`, recorded for component `pilot`),
/// `istiod_uptime_seconds` and `pilot_info{version}`
/// (`pilot/pkg/bootstrap/monitoring.go`).
pub fn collect_metrics(info: &BuildInfo, out: &mut istiod_xds::metrics::Exposition) {
    use istiod_xds::metrics::label;
    let uptime = STARTED.get().map_or(0.0, |s| s.elapsed().as_secs_f64());
    out.gauge(
        "istio_build",
        "Istio component build info",
        [(vec![("component", "pilot".to_owned()), ("tag", info.git_tag.to_owned())], 1.0)],
    );
    out.gauge("istiod_uptime_seconds", "Current istiod server uptime in seconds", [(vec![], uptime)]);
    out.gauge("pilot_info", "Pilot version and build information.", [(label("version", info.short()), 1.0)]);
}

/// Renders `version` output for the given flags.
/// istiod's `ControlPlane.identifier` on debug answers over xDS
/// (`pilot/pkg/xds/xdsgen.go` IstioControlPlaneInstance): istioctl reads
/// the instance from it (`multixds.CpInfo`) to tell replicas apart.
pub fn control_plane_identifier(info: &BuildInfo, pod_name: &str) -> String {
    serde_json::json!({
        "Component": "istiod",
        "ID": pod_name,
        "Info": {
            "version": info.version,
            "revision": info.git_revision,
            "golang_version": info.golang_version,
            "status": info.build_status,
            "tag": info.git_tag,
        },
    })
    .to_string()
}

pub fn render(info: &BuildInfo, args: &VersionArgs) -> String {
    let q = |s: &str| format!("{s:?}");
    match (args.output, args.short) {
        (Some(VersionOutput::Json), _) => {
            let mut out = String::from("{\n  \"clientVersion\": {\n");
            let fields = [
                ("version", info.version),
                ("revision", info.git_revision),
                ("golang_version", info.golang_version),
                ("status", info.build_status),
                ("tag", info.git_tag),
            ];
            for (i, (k, v)) in fields.iter().enumerate() {
                let comma = if i + 1 < fields.len() { "," } else { "" };
                let _ = writeln!(out, "    \"{k}\": {}{comma}", q(v));
            }
            out.push_str("  }\n}\n");
            out
        }
        (Some(VersionOutput::Yaml), _) => format!(
            "clientVersion:\n  golang_version: {}\n  revision: {}\n  status: {}\n  tag: {}\n  version: {}\n",
            info.golang_version, info.git_revision, info.build_status, info.git_tag, info.version
        ),
        (None, true) => format!("client version: {}\n", info.version),
        (None, false) => format!(
            "client version: version.BuildInfo{{Version:{}, GitRevision:{}, GolangVersion:{}, BuildStatus:{}, GitTag:{}}}\n",
            q(info.version),
            q(info.git_revision),
            q(info.golang_version),
            q(info.build_status),
            q(info.git_tag)
        ),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const INFO: BuildInfo = BuildInfo {
        version: "1.2.3",
        git_revision: "abc",
        golang_version: "rust1.95",
        build_status: "Clean",
        git_tag: "1.2.3",
    };

    fn args(short: bool, output: Option<VersionOutput>) -> VersionArgs {
        VersionArgs { short, output }
    }

    #[test]
    fn default_is_istiods_go_syntax() {
        assert_eq!(
            render(&INFO, &args(false, None)),
            "client version: version.BuildInfo{Version:\"1.2.3\", GitRevision:\"abc\", \
             GolangVersion:\"rust1.95\", BuildStatus:\"Clean\", GitTag:\"1.2.3\"}\n"
        );
        assert_eq!(render(&INFO, &args(true, None)), "client version: 1.2.3\n");
    }

    #[test]
    fn json_has_istiods_keys() {
        let out = render(&INFO, &args(false, Some(VersionOutput::Json)));
        assert!(out.starts_with("{\n  \"clientVersion\": {\n    \"version\": \"1.2.3\",\n"), "{out}");
        for key in ["revision", "golang_version", "status", "tag"] {
            assert!(out.contains(&format!("\"{key}\": ")), "{key} in {out}");
        }
        assert!(out.ends_with("\"tag\": \"1.2.3\"\n  }\n}\n"), "{out}");
    }

    #[test]
    fn yaml_keys_are_sorted() {
        let out = render(&INFO, &args(false, Some(VersionOutput::Yaml)));
        let keys: Vec<&str> = out.lines().skip(1).map(|l| l.trim().split(':').next().unwrap()).collect();
        let mut sorted = keys.clone();
        sorted.sort_unstable();
        assert_eq!(keys, sorted);
        assert_eq!(keys.len(), 5);
    }
}
