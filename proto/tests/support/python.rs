#![allow(dead_code, reason = "each test binary uses part of this support code")]

//! Runs the Python side of the upstream tests (`tests/py/*.py`) with the
//! venv that `scripts/test` prepares (grpcio, xds-protos).

use std::path::PathBuf;
use std::process::{Command, Output};

/// The interpreter: `$ISTIOD_RS_PYTHON`, else the workspace's `.venv`.
/// Missing is a failure, not a skip: these tests are the proof that our
/// schemas equal upstream's, and `scripts/test` always provides them.
pub(crate) fn python() -> PathBuf {
    if let Some(p) = std::env::var_os("ISTIOD_RS_PYTHON") {
        return PathBuf::from(p);
    }
    // The venv sits at the workspace root: above a member crate, or here.
    let here = PathBuf::from(env!("CARGO_MANIFEST_DIR"));
    let venv = [here.join(".venv/bin/python"), here.join("../.venv/bin/python")]
        .into_iter()
        .find(|p| p.exists())
        .unwrap_or_else(|| here.join(".venv/bin/python"));
    assert!(
        venv.exists(),
        "no Python with xds-protos: run scripts/test (it creates .venv), or set ISTIOD_RS_PYTHON \
         to a python that has `pip install -r scripts/requirements.txt`"
    );
    venv
}

/// Runs `tests/py/<script>` with `args`; returns its output.
pub(crate) fn run(script: &str, args: &[&std::ffi::OsStr]) -> Output {
    let path = PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("tests/py").join(script);
    Command::new(python())
        .arg(&path)
        .args(args)
        .output()
        .unwrap_or_else(|e| panic!("cannot run {}: {e}", path.display()))
}

/// Output as text for assertion messages.
pub(crate) fn text(out: &Output) -> String {
    format!("{}{}", String::from_utf8_lossy(&out.stdout), String::from_utf8_lossy(&out.stderr))
}
