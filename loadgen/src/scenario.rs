//! Scenarios: the shape of a simulated mesh and what changes in it, read
//! from YAML (`bench/testdata/<name>.yaml` holds the presets).

use std::path::{Path, PathBuf};

use serde::Deserialize;

/// What changes during a run.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum ChurnKind {
    /// Endpoints of random services scaled up and down.
    Eds,
    /// VirtualService weights changed.
    Config,
    /// The weights of VirtualServices bound to the ingress Gateway changed
    /// (only the gateways see them).
    Gateway,
}

/// A churn setting.
#[derive(Debug, Clone, PartialEq, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Churn {
    /// What changes.
    pub kind: ChurnKind,
    /// Changes per second.
    pub per_second: f64,
}

/// How the proxies connect.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum Connect {
    /// A few at a time.
    #[default]
    Ramp,
    /// All at once (an istiod restart).
    Storm,
}

/// A scenario.
#[derive(Debug, Clone, PartialEq, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Scenario {
    /// Its name.
    pub name: String,
    /// Namespaces the services are spread over.
    pub namespaces: u32,
    /// Services (one HTTP port each, subsets v1 and v2).
    pub services: u32,
    /// Sidecars (pods), spread over the services.
    pub sidecars: u32,
    /// Fraction of namespaces whose Sidecar limits egress to `./*` and
    /// `istio-system/*`.
    #[serde(default)]
    pub isolated_fraction: f64,
    /// Zones (nodes) the pods are spread over, in one region.
    #[serde(default = "one")]
    pub zones: u32,
    /// What changes during a run.
    #[serde(default)]
    pub churn: Option<Churn>,
    /// How the proxies connect.
    #[serde(default)]
    pub connect: Connect,
    /// Ingress gateways (routers of `istio-system` labelled
    /// `istio=ingressgateway`): the first proxies of a run play them.
    #[serde(default)]
    pub gateways: u32,
    /// VirtualServices bound to the ingress Gateway, one host and one
    /// route each, to the scenario's services in turn.
    #[serde(default)]
    pub gateway_routes: u32,
}

fn one() -> u32 {
    1
}

/// Why a scenario cannot be used.
#[derive(Debug, thiserror::Error)]
pub enum ScenarioError {
    /// Neither a preset nor a readable file.
    #[error("unknown scenario {0:?}: not a preset ({presets}) nor a file", presets = PRESETS.join(", "))]
    Unknown(String),
    /// A file that does not parse.
    #[error("{path}: {reason}")]
    Invalid {
        /// The file.
        path: PathBuf,
        /// What is wrong.
        reason: String,
    },
}

/// The presets in `bench/testdata/`.
pub const PRESETS: &[&str] =
    &["istio-perf", "large", "eds-churn", "config-churn", "connect-storm", "gateway", "fanout"];

/// The directory of the presets.
pub fn presets_dir() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("../bench/testdata")
}

impl Scenario {
    /// A preset by name, or a scenario file by path.
    pub fn load(name_or_path: &str) -> Result<Scenario, ScenarioError> {
        let path = if PRESETS.contains(&name_or_path) {
            presets_dir().join(format!("{name_or_path}.yaml"))
        } else {
            PathBuf::from(name_or_path)
        };
        let text = std::fs::read_to_string(&path).map_err(|_| ScenarioError::Unknown(name_or_path.to_owned()))?;
        let s: Scenario = serde_yaml_ng::from_str(&text)
            .map_err(|e| ScenarioError::Invalid { path: path.clone(), reason: e.to_string() })?;
        s.check().map_err(|reason| ScenarioError::Invalid { path, reason })?;
        Ok(s)
    }

    fn check(&self) -> Result<(), String> {
        if self.namespaces == 0 || self.services == 0 || self.zones == 0 {
            return Err("namespaces, services and zones must be at least 1".into());
        }
        if self.services < self.namespaces {
            return Err(format!("{} services cannot fill {} namespaces", self.services, self.namespaces));
        }
        if self.gateways > 10_000 || self.gateway_routes > 100_000 {
            return Err("at most 10,000 gateways and 100,000 gateway routes".into());
        }
        if self.services > 60_000 || self.sidecars > 1_000_000 {
            return Err("at most 60,000 services and 1,000,000 sidecars".into());
        }
        if !(0.0..=1.0).contains(&self.isolated_fraction) {
            return Err(format!("isolated_fraction {} is not within 0..1", self.isolated_fraction));
        }
        if let Some(c) = &self.churn
            && !(c.per_second > 0.0 && c.per_second.is_finite())
        {
            return Err(format!("churn per_second {} must be positive", c.per_second));
        }
        if self.churn.as_ref().is_some_and(|c| c.kind == ChurnKind::Gateway) && self.gateway_routes == 0 {
            return Err("a gateway churn needs gateway_routes".into());
        }
        Ok(())
    }
}
