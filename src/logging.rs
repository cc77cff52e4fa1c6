//! Logging with istiod's flags: per-scope levels from `--log_output_level`,
//! console or JSON lines, written to `--log_target`. A scope is a `tracing`
//! target: code logs with `target: "ads"` for istiod's `ads` scope, and
//! anything else falls under `default`.

use std::fs::OpenOptions;
use std::io;
use std::sync::Mutex;

use tracing::level_filters::LevelFilter;
use tracing_subscriber::filter::Targets;
use tracing_subscriber::fmt::writer::BoxMakeWriter;
use tracing_subscriber::prelude::*;

use crate::config::{LogConfig, LogLevel};

fn filter(level: LogLevel) -> LevelFilter {
    match level {
        LogLevel::None => LevelFilter::OFF,
        // tracing has no fatal; fatal messages are logged as errors.
        LogLevel::Fatal | LogLevel::Error => LevelFilter::ERROR,
        LogLevel::Warn => LevelFilter::WARN,
        LogLevel::Info => LevelFilter::INFO,
        LogLevel::Debug => LevelFilter::DEBUG,
    }
}

/// The filter that `--log_output_level` describes.
pub fn targets(cfg: &LogConfig) -> Targets {
    cfg.scopes.iter().fold(Targets::new().with_default(filter(cfg.default)), |t, (scope, level)| {
        t.with_target(scope.clone(), filter(*level))
    })
}

/// Installs the global subscriber. Only the first `--log_target` is used;
/// an unopenable file is an error that names it.
pub fn init(cfg: &LogConfig) -> io::Result<()> {
    let writer = match cfg.targets.first().map(String::as_str) {
        None | Some("stdout") => BoxMakeWriter::new(io::stdout),
        Some("stderr") => BoxMakeWriter::new(io::stderr),
        Some(path) => {
            let file = OpenOptions::new()
                .create(true)
                .append(true)
                .open(path)
                .map_err(|e| io::Error::new(e.kind(), format!("--log_target {path}: {e}")))?;
            BoxMakeWriter::new(Mutex::new(file))
        }
    };
    let with_caller = !cfg.caller.is_empty();
    let fmt = tracing_subscriber::fmt::layer().with_writer(writer).with_file(with_caller).with_line_number(with_caller);
    let registry = tracing_subscriber::registry().with(targets(cfg));
    let result = if cfg.json { registry.with(fmt.json()).try_init() } else { registry.with(fmt).try_init() };
    result.map_err(|e| io::Error::other(format!("logging already initialised: {e}")))
}

#[cfg(test)]
mod tests {
    use tracing::Level;

    use super::*;

    #[test]
    fn scopes_become_targets() {
        let (default, scopes) = LogConfig::parse_levels("warn,ads:debug").unwrap();
        let cfg = LogConfig { default, scopes, json: false, targets: vec![], caller: vec![] };
        let t = targets(&cfg);
        assert!(t.would_enable("ads", &Level::DEBUG));
        assert!(!t.would_enable("model", &Level::INFO));
        assert!(t.would_enable("model", &Level::WARN));
        assert!(!t.would_enable("grpc", &Level::ERROR), "istiod's base turns grpc off");
    }
}
