//! Instruction counts of the hot paths (issue #40): the figures CI can
//! gate on, since a shared, noisy machine cannot time them but counts the
//! same instructions for the same binary and inputs. Criterion
//! (`benches/mesh.rs`, `ca.rs`, `inject.rs`) keeps the wall-clock figures.
//!
//! Each case sets up natively, warms up once, then runs its work once
//! inside [`measured`]; valgrind's callgrind counts only that function
//! (`--collect-atstart=no --toggle-collect`), one process per case.
//!
//! ```sh
//! scripts/icount                 # measure, compare with bench/icount.baseline, fail past +10%
//! scripts/icount --update        # write the baselines from this build
//! scripts/icount --self-test     # a deliberately slowed build must fail the gate
//! ```
//!
//! The gate runs only when asked (`--gate`, as `scripts/icount` asks):
//! `cargo bench -p istiod-bench` passes this target `--bench` alone, and
//! gets a line saying so. Run without `--bench` (as `cargo nextest` runs
//! it, or bare), every case's work runs once natively, so a case that
//! breaks fails the tests.

// A command-line tool: its table is its output.
#![allow(clippy::print_stdout, clippy::print_stderr)]

mod support;

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};
use std::process::{Command, ExitCode};
use std::sync::Arc;
use std::time::Instant;

use istiod_bench::icount::{self, Verdict};
use istiod_mesh::meshconfig::MeshSettings;
use istiod_mesh::update;
use istiod_xds::ads::Kind;
use support::mesh::*;

/// The work callgrind counts: everything `work` does, called from here.
/// The slowed build (`--features slowed-for-gate-test`, only for
/// `scripts/icount --self-test`) does it twice, as a regression would.
#[inline(never)]
fn measured<R>(work: &mut dyn FnMut() -> R) -> R {
    #[cfg(feature = "slowed-for-gate-test")]
    std::hint::black_box(work());
    std::hint::black_box(work())
}

/// The symbol callgrind toggles collection on.
const MEASURED: &str = "*icount::measured*";

/// A case: its name and its setup, which returns the work to count.
type Case = (&'static str, fn() -> Box<dyn FnMut()>);

const CASES: &[Case] = &[
    ("change/one_endpoint/large", one_endpoint_change_large),
    ("snapshot/build/large", build_large),
    ("assemble/cds/cached", cds_from_warm_cache),
    ("core/one_endpoint_change_1000_streams", push_to_1000_streams),
    ("ca/verify_and_sign_ecdsa_p256", sign_one_csr),
    ("inject/hello_deployment_pod", inject_one_pod),
    ("reload/one_endpoint/fanout", reload_one_endpoint_fanout),
];

/// One EndpointSlice loses an endpoint on `large` (10,000 pods): the
/// source's change to the snapshot the cores receive.
fn one_endpoint_change_large() -> Box<dyn FnMut()> {
    let mut change = Change::new("large", drop_endpoint);
    Box::new(move || {
        let (n, incremental) = change.step();
        assert!(incremental && n > 0, "an incremental update that changes something");
    })
}

/// A full rebuild of `large` from its objects (what a change no fast path
/// takes costs). What it builds is kept, not freed in the count: the
/// server frees the mesh a change replaced on a thread of its own
/// (`src/discovery/sources.rs` `reap`).
fn build_large() -> Box<dyn FnMut()> {
    let objs = objects("large");
    let settings = Arc::new(MeshSettings::default());
    let mut kept = Vec::with_capacity(4);
    Box::new(move || {
        let built = update::build(&objs, "cluster.local", &settings);
        assert!(!built.translation.resources.is_empty());
        kept.push(built);
    })
}

/// One sidecar's CDS state of the world from a warm per-core cache
/// (`istio-perf`).
fn cds_from_warm_cache() -> Box<dyn FnMut()> {
    let mut a = assemble_setup("istio-perf");
    Box::new(move || {
        let names = &a.names[Kind::Cluster as usize];
        let out = response(&mut a.warm, &a.snap, &a.class, Kind::Cluster, names);
        assert!(out.len() > 1000, "a CDS response");
    })
}

/// A serving core applies one endpoint change to 1,000 SotW streams and
/// builds their pushes.
fn push_to_1000_streams() -> Box<dyn FnMut()> {
    let mut core = core_setup();
    let now = Instant::now();
    let mut seq = 0u64;
    let mut nonce = move || -> Arc<str> {
        seq += 1;
        seq.to_string().into()
    };
    Box::new(move || {
        assert!(core.push_one_change(now, &mut nonce) > 0);
    })
}

/// One CreateCertificate's work: verify a P-256 CSR and sign its leaf.
fn sign_one_csr() -> Box<dyn FnMut()> {
    let ca = istiod_pki::Ca::generate(istiod_pki::Settings::default()).unwrap();
    let csr = support::ca::csrs(1).remove(0);
    let ids = [support::ca::ID.to_owned()];
    Box::new(move || {
        let chain = ca.sign(csr.as_bytes(), &ids, 3600).unwrap();
        assert_eq!(chain.len(), 2);
    })
}

/// `/inject`'s answer to one Deployment's pod.
fn inject_one_pod() -> Box<dyn FnMut()> {
    let inj = support::inject::injector();
    let body = support::inject::review();
    Box::new(move || {
        assert!(support::inject::answer(&inj, &body).len() > 1000, "a patch is returned");
    })
}

/// The `--configDir` source reads an edit of one service's file in
/// `fanout` (10 files of 104 documents, 1,000 pods): its EndpointSlice
/// loses an endpoint, or gets it back. The file is written, then read and
/// its changed document parsed, and every object in force is handed on,
/// as the server's watch does for each change.
fn reload_one_endpoint_fanout() -> Box<dyn FnMut()> {
    use istiod_loadgen::mesh::{self, Tweak};
    let s = istiod_loadgen::scenario::Scenario::load("fanout").unwrap();
    let dir = tempfile::tempdir().unwrap();
    mesh::write(&s, dir.path()).unwrap();
    let file = dir.path().join(mesh::service_file(&s, 0));
    let texts = [
        mesh::service_yaml(&s, 0, Tweak { dropped_endpoints: 1, ..Tweak::default() }),
        mesh::service_yaml(&s, 0, Tweak::default()),
    ];
    // Long enough after the writes that every file's stamp is trusted
    // (`config_dir::RACY`): the files not edited are not read again.
    std::thread::sleep(std::time::Duration::from_millis(100));
    let mut source = istiod_kubewatch::config_dir::ConfigDir::new(dir.path());
    source.reload().unwrap();
    let mut kept = Vec::with_capacity(4);
    let mut turn = 0;
    Box::new(move || {
        std::fs::write(&file, &texts[turn % 2]).unwrap();
        turn += 1;
        let parsed = source.documents_parsed();
        let loaded = source.reload().unwrap();
        assert_eq!(source.documents_parsed(), parsed + 1, "only the changed document is parsed");
        assert_eq!(loaded.changed.len(), 1, "the EndpointSlice changed: {:?}", loaded.changed);
        assert_eq!(loaded.objects.pods.len(), 1000);
        // What was read is kept, not freed in the count (the server hands
        // it on); the directory lives as long as the case.
        kept.push(loaded);
        let _ = &dir;
    })
}

/// Runs one case under callgrind's eye: set up, warm up (twice, so that a
/// case alternating between two states is measured from the same one),
/// then the counted run.
fn run_case(name: &str) -> Result<(), String> {
    let (_, setup) = CASES.iter().find(|(n, _)| *n == name).ok_or_else(|| format!("no case {name}"))?;
    let mut work = setup();
    work();
    work();
    measured(&mut *work);
    Ok(())
}

/// jemalloc (the server's allocator, `benches/support`) as the counts
/// need it: the same instructions for the same inputs, on any machine at
/// any speed.
/// - No heap sampling: a sample's backtrace (~37,000 instructions) lands
///   in a case's count or not by chance, as allocations before it move
///   with any change.
/// - The thread cache's garbage collection by bytes allocated, not by
///   time: the default (`experimental_tcache_gc`) collects when 10 ms have
///   passed, and under callgrind whether 10 ms pass inside a case depends
///   on how busy the host is. A collection in the count cost
///   `assemble/cds/cached` ~11,000 instructions (+12%) on a loaded host.
/// - No purging of unused pages, which is paced by time as well
///   (`dirty_decay_ms`, `muzzy_decay_ms`).
///
/// `abort_conf`: an option this jemalloc does not know stops the count
/// instead of being warned about and left at its default.
const ALLOCATOR_CONF: &str =
    "abort_conf:true,prof_active:false,experimental_tcache_gc:false,dirty_decay_ms:-1,muzzy_decay_ms:-1";

/// Counts one case's instructions in a callgrind child process.
fn count(exe: &Path, out_dir: &Path, name: &str) -> Result<u64, String> {
    let out = out_dir.join(format!("{}.callgrind", name.replace('/', "_")));
    let status = Command::new("valgrind")
        .arg("--tool=callgrind")
        .arg(format!("--callgrind-out-file={}", out.display()))
        .arg("--collect-atstart=no")
        .arg(format!("--toggle-collect={MEASURED}"))
        .arg("--quiet")
        .arg(exe)
        .args(["--case", name])
        .env("_RJEM_MALLOC_CONF", ALLOCATOR_CONF)
        .status()
        .map_err(|e| format!("valgrind: {e} (Debian's valgrind package)"))?;
    if !status.success() {
        return Err(format!("{name}: valgrind exited {status}"));
    }
    let text = std::fs::read_to_string(&out).map_err(|e| format!("{}: {e}", out.display()))?;
    match icount::callgrind_total(&text) {
        Some(0) | None => Err(format!("{name}: callgrind counted nothing in {MEASURED} ({})", out.display())),
        Some(n) => Ok(n),
    }
}

/// Where a regressed case's instructions went: callgrind_annotate's
/// costliest functions, so that a CI log (a host no one can log in to)
/// tells what to look at.
fn print_profile(out_dir: &Path, name: &str) {
    let file = out_dir.join(format!("{}.callgrind", name.replace('/', "_")));
    let out = match Command::new("callgrind_annotate").arg("--inclusive=no").arg(&file).output() {
        Ok(out) if out.status.success() => out,
        Ok(out) => {
            println!("    callgrind_annotate exited {}: {}", out.status, String::from_utf8_lossy(&out.stderr).trim());
            return;
        }
        Err(e) => {
            println!("    callgrind_annotate: {e}");
            return;
        }
    };
    // The function table's rows: a count, then a share in parentheses
    // (the Perl and the Python callgrind_annotate alike), after the
    // program's total.
    let text = String::from_utf8_lossy(&out.stdout);
    let rows: Vec<&str> = text
        .lines()
        .skip_while(|l| !l.contains("PROGRAM TOTALS"))
        .skip(1)
        .filter(|l| {
            let l = l.trim_start();
            l.starts_with(|c: char| c.is_ascii_digit()) && l.contains("%)")
        })
        .take(25)
        .collect();
    if rows.is_empty() {
        println!("    (no function table in callgrind_annotate's output for {})", file.display());
    }
    for row in rows {
        println!("    {row}");
    }
}

fn baseline_path() -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("icount.baseline")
}

/// Measures the cases (all, or `--only a,b`), compares them with the
/// baselines and says which regressed; `--update` writes the baselines,
/// `--expect-regression` (the gate's self-test) succeeds only if every
/// measured case regressed.
fn drive(args: &[String]) -> Result<ExitCode, String> {
    let update = args.iter().any(|a| a == "--update");
    let expect_regression = args.iter().any(|a| a == "--expect-regression");
    let only: Option<Vec<&str>> =
        args.iter().position(|a| a == "--only").and_then(|i| args.get(i + 1)).map(|v| v.split(',').collect());
    if let Some(unknown) = only.iter().flatten().find(|o| !CASES.iter().any(|(n, _)| n == *o)) {
        let known: Vec<&str> = CASES.iter().map(|(n, _)| *n).collect();
        return Err(format!("--only: no case {unknown:?} (cases: {})", known.join(", ")));
    }
    let exe = std::env::current_exe().map_err(|e| e.to_string())?;
    let out_dir = PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("../target/icount");
    std::fs::create_dir_all(&out_dir).map_err(|e| e.to_string())?;
    let path = baseline_path();
    let baseline = match std::fs::read_to_string(&path) {
        Ok(text) => icount::parse(&text).map_err(|e| format!("{}: {e}", path.display()))?,
        Err(_) if update => BTreeMap::new(),
        Err(e) => return Err(format!("{}: {e}", path.display())),
    };
    let mut counts = BTreeMap::new();
    let mut regressed = Vec::new();
    let mut missing = Vec::new();
    let mut measured_n = 0;
    println!("{:<40} {:>15} {:>15} {:>8}", "case", "baseline", "now", "change");
    for (name, _) in CASES {
        if only.as_ref().is_some_and(|o| !o.contains(name)) {
            continue;
        }
        let started = Instant::now();
        let n = count(&exe, &out_dir, name)?;
        measured_n += 1;
        counts.insert((*name).to_owned(), n);
        let base = baseline.get(*name).copied();
        let verdict = icount::judge(base, n, icount::THRESHOLD_PERCENT);
        let (change, note) = match verdict {
            Verdict::Within(c) => (format!("{:+.1}%", c * 100.0), ""),
            Verdict::Regressed(c) => (format!("{:+.1}%", c * 100.0), "  REGRESSED"),
            Verdict::Improved(c) => (format!("{:+.1}%", c * 100.0), "  improved: update the baseline"),
            Verdict::New => ("new".to_owned(), ""),
        };
        if matches!(verdict, Verdict::Regressed(_)) {
            regressed.push(*name);
        }
        if verdict == Verdict::New {
            missing.push(*name);
        }
        let base = base.map_or("-".to_owned(), |b| b.to_string());
        println!("{name:<40} {base:>15} {n:>15} {change:>8}{note}  ({:.0} s)", started.elapsed().as_secs_f64());
        if matches!(verdict, Verdict::Regressed(_)) && !expect_regression {
            print_profile(&out_dir, name);
        }
    }
    if measured_n == 0 {
        return Err("no case measured".into());
    }
    // A baseline line no case has any more (a case renamed or removed) is
    // a gate that silently stopped checking.
    let stale: Vec<&String> = baseline.keys().filter(|b| !CASES.iter().any(|(n, _)| n == b)).collect();
    if update {
        let mut all: BTreeMap<String, u64> =
            baseline.iter().filter(|(b, _)| !stale.contains(b)).map(|(b, n)| (b.clone(), *n)).collect();
        all.extend(counts);
        let header = "Instructions each case of bench/benches/icount.rs counts under valgrind's callgrind\n(release build, jemalloc paced by bytes, not time: ALLOCATOR_CONF). scripts/icount fails when one counts more than\n10% over its line, or a case and a line do not match; scripts/icount --update rewrites\nthis file.";
        std::fs::write(&path, icount::render(header, &all)).map_err(|e| e.to_string())?;
        println!("wrote {}", path.display());
        return Ok(ExitCode::SUCCESS);
    }
    if expect_regression {
        return if measured_n > 0 && regressed.len() == measured_n {
            println!("icount self-test: the slowed build failed the gate on all {measured_n} cases, as it should");
            Ok(ExitCode::SUCCESS)
        } else {
            println!(
                "icount self-test FAILED: the slowed build passed the gate on {} of {measured_n} cases",
                measured_n - regressed.len()
            );
            Ok(ExitCode::FAILURE)
        };
    }
    if !missing.is_empty() || !stale.is_empty() {
        println!(
            "icount: cases without a baseline: [{}]; baselines without a case: [{}] (scripts/icount --update writes them)",
            missing.join(", "),
            stale.iter().map(|s| s.as_str()).collect::<Vec<_>>().join(", ")
        );
        return Ok(ExitCode::FAILURE);
    }
    if regressed.is_empty() {
        println!("icount: {measured_n} cases within {}% of their baselines", icount::THRESHOLD_PERCENT);
        Ok(ExitCode::SUCCESS)
    } else {
        println!(
            "icount: {} regressed more than {}%: {} (if intended, scripts/icount --update and say why in the commit)",
            regressed.len(),
            icount::THRESHOLD_PERCENT,
            regressed.join(", ")
        );
        Ok(ExitCode::FAILURE)
    }
}

fn main() -> ExitCode {
    let args: Vec<String> = std::env::args().skip(1).collect();
    // A test runner's listing (nextest's protocol): one test that runs
    // every case once.
    if args.iter().any(|a| a == "--list") {
        if !args.iter().any(|a| a == "--ignored") {
            println!("every_case_runs: test");
        }
        return ExitCode::SUCCESS;
    }
    // One thread's instructions: a full rebuild would otherwise build its
    // clusters on as many threads as the machine has, which callgrind
    // counts as the threads interleave.
    istiod_mesh::model::set_rebuild_threads(1);
    let result = if let Some(i) = args.iter().position(|a| a == "--case") {
        run_case(args.get(i + 1).map_or("", String::as_str)).map(|()| ExitCode::SUCCESS)
    } else if args.iter().any(|a| a == "--gate") {
        drive(&args)
    } else if args.iter().any(|a| a == "--bench") {
        println!("icount: instruction counts run under valgrind with scripts/icount (bench/README.md)");
        Ok(ExitCode::SUCCESS)
    } else {
        // Under a test runner: each case's work once, natively.
        CASES.iter().try_for_each(|(name, _)| run_case(name)).map(|()| ExitCode::SUCCESS)
    };
    result.unwrap_or_else(|e| {
        eprintln!("icount: {e}");
        ExitCode::FAILURE
    })
}
