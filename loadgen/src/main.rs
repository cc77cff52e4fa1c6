//! The `loadgen` command line.

use std::path::PathBuf;
use std::process::ExitCode;

use clap::{Parser, Subcommand};
use istiod_loadgen::{mesh, scenario::Scenario};

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
}

fn main() -> ExitCode {
    let cli = Cli::parse();
    match cli.command {
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
