//! The `loadgen` command line.

use std::path::PathBuf;
use std::process::ExitCode;

use clap::{Parser, Subcommand};
use istiod_loadgen::{mesh, run, scenario::Scenario};

#[derive(Parser)]
#[command(name = "loadgen", about = "Simulated Envoys and meshes for istiod-rs")]
struct Cli {
    #[command(subcommand)]
    command: Command,
}

#[derive(Subcommand)]
enum Command {
    /// Writes a scenario's mesh as a --configDir directory.
    Mesh {
        /// A preset (istio-perf, large, eds-churn, config-churn,
        /// connect-storm) or a scenario file.
        #[arg(long)]
        scenario: String,
        /// The directory to write.
        #[arg(long)]
        out: PathBuf,
    },
    /// Connects simulated sidecars to a running pilot-discovery (serving
    /// the scenario's mesh) and reports how fast they synced.
    Run {
        /// A preset or a scenario file (the proxies are its pods).
        #[arg(long)]
        scenario: String,
        /// pilot-discovery's gRPC address.
        #[arg(long, default_value = "127.0.0.1:15010")]
        server: std::net::SocketAddr,
        /// Proxies to run [default: the scenario's sidecars].
        #[arg(long)]
        proxies: Option<u32>,
        /// Proxies connecting at the same time.
        #[arg(long, default_value_t = 200)]
        concurrency: usize,
        /// Upper bound of the run, in seconds.
        #[arg(long, default_value_t = 120)]
        duration: u64,
        /// Also write the report as JSON here.
        #[arg(long)]
        json: Option<PathBuf>,
    },
}

#[allow(clippy::print_stdout, clippy::print_stderr, reason = "the command's output")]
fn run_cmd(
    scenario: &str,
    server: std::net::SocketAddr,
    proxies: Option<u32>,
    concurrency: usize,
    duration: u64,
    json: Option<PathBuf>,
) -> ExitCode {
    let s = match Scenario::load(scenario) {
        Ok(s) => s,
        Err(e) => {
            eprintln!("loadgen: {e}");
            return ExitCode::from(2);
        }
    };
    let proxies = proxies.unwrap_or(s.sidecars);
    let rt = match tokio::runtime::Builder::new_current_thread().enable_all().build() {
        Ok(rt) => rt,
        Err(e) => {
            eprintln!("loadgen: runtime: {e}");
            return ExitCode::from(1);
        }
    };
    let report =
        rt.block_on(run::run(&s, server, proxies, concurrency, std::time::Duration::from_secs(duration.max(1))));
    let j = report.json(&s.name);
    println!(
        "loadgen: {} proxies, {} connected, {} synced; sync ms {}; {} bytes; {} errors",
        report.proxies, report.connected, report.synced, j["sync_ms"], report.bytes_received, report.error_count
    );
    for e in &report.errors {
        eprintln!("loadgen: error: {e}");
    }
    if let Some(path) = json
        && let Err(e) = std::fs::write(&path, serde_json::to_vec_pretty(&j).unwrap_or_default())
    {
        eprintln!("loadgen: cannot write {}: {e}", path.display());
        return ExitCode::from(1);
    }
    if report.connected == 0 {
        eprintln!("loadgen: no proxy could connect to {server}");
        return ExitCode::from(1);
    }
    if report.synced < report.proxies { ExitCode::from(1) } else { ExitCode::SUCCESS }
}

fn main() -> ExitCode {
    let cli = Cli::parse();
    match cli.command {
        Command::Run { scenario, server, proxies, concurrency, duration, json } => {
            run_cmd(&scenario, server, proxies, concurrency, duration, json)
        }
        Command::Mesh { scenario, out } => {
            let s = match Scenario::load(&scenario) {
                Ok(s) => s,
                Err(e) => {
                    #[allow(clippy::print_stderr, reason = "the command's error output")]
                    {
                        eprintln!("loadgen: {e}");
                    }
                    return ExitCode::from(2);
                }
            };
            match mesh::write(&s, &out) {
                Ok(files) => {
                    #[allow(clippy::print_stdout, reason = "the command's output")]
                    {
                        println!(
                            "loadgen: wrote {} ({} services, {} sidecars, {} namespaces) to {} in {files} files",
                            s.name,
                            s.services,
                            s.sidecars,
                            s.namespaces,
                            out.display()
                        );
                    }
                    ExitCode::SUCCESS
                }
                Err(e) => {
                    #[allow(clippy::print_stderr, reason = "the command's error output")]
                    {
                        eprintln!("loadgen: cannot write {}: {e}", out.display());
                    }
                    ExitCode::from(1)
                }
            }
        }
    }
}
