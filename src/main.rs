//! `pilot-discovery`: parses the command line, builds the configuration
//! once, and runs the requested subcommand.
#![forbid(unsafe_code)]

use std::io::Write as _;
use std::process::ExitCode;

use istiod::cli::{Command, DiscoveryArgs};
use istiod::config::{Config, ProcessEnv, Source};
use istiod::{logging, version};

/// jemalloc, sampling the heap for `/debug/pprof/heap` (see
/// .cargo/config.toml for its configuration).
#[global_allocator]
static ALLOCATOR: tikv_jemallocator::Jemalloc = tikv_jemallocator::Jemalloc;

fn main() -> ExitCode {
    // Unknown flags of `discovery` are left out (and logged once logging
    // is up); clap exits with status 2 on a malformed value.
    let (cli, ignored) = match istiod::cli::parse_lenient(std::env::args_os().collect()) {
        Ok(parsed) => parsed,
        Err(e) => e.exit(),
    };
    match cli.command {
        Command::Version(args) => {
            let out = version::render(&version::BUILD, &args);
            match std::io::stdout().write_all(out.as_bytes()) {
                Ok(()) => ExitCode::SUCCESS,
                Err(_) => ExitCode::FAILURE,
            }
        }
        Command::Discovery(args) => discovery(&args, &ignored),
        Command::Whatif(args) => ExitCode::from(istiod::discovery::whatif::client::run(&args)),
    }
}

fn discovery(args: &DiscoveryArgs, ignored: &[String]) -> ExitCode {
    let config = match Config::new(args, &ProcessEnv) {
        Ok(c) => c,
        Err(e) => {
            let _ = writeln!(std::io::stderr(), "pilot-discovery: {e}");
            return ExitCode::from(2);
        }
    };
    if let Err(e) = logging::init(&config.log) {
        let _ = writeln!(std::io::stderr(), "pilot-discovery: {e}");
        return ExitCode::from(2);
    }
    tracing::info!("{}", config.summary());
    if !ignored.is_empty() {
        tracing::warn!(flags = ?ignored, "unknown flags ignored, as istiod ignores them");
    }
    if let Source::ConfigDir(dir) = &config.source
        && !dir.is_dir()
    {
        tracing::error!(dir = %dir.display(), "--configDir is not a directory");
        return ExitCode::from(2);
    }
    let log_to_file = config.log.targets.first().is_some_and(|t| t != "stdout" && t != "stderr");
    match istiod::discovery::run(config) {
        Ok(()) => ExitCode::SUCCESS,
        Err(e) => {
            // Printed once: on stderr, and in the log only when it is a
            // file (a terminal would show it twice).
            if log_to_file {
                tracing::error!("{e}");
            }
            let _ = writeln!(std::io::stderr(), "pilot-discovery: {e}");
            ExitCode::FAILURE
        }
    }
}
