//! The `pilot-discovery` binary as a user runs it: exit codes and messages.

use std::process::{Command, Output};

fn run(args: &[&str], env: &[(&str, &str)]) -> Output {
    let mut cmd = Command::new(env!("CARGO_BIN_EXE_pilot-discovery"));
    cmd.args(args).env_clear();
    for (k, v) in env {
        cmd.env(k, v);
    }
    cmd.output().expect("run pilot-discovery")
}

fn stderr(o: &Output) -> String {
    String::from_utf8_lossy(&o.stderr).into_owned()
}

/// istiod whitelists unknown flags (pilot/cmd/pilot-discovery/app/cmd.go
/// `FParseErrWhitelist{UnknownFlags: true}`); pflag drops an unknown
/// flag's separate value too. The log names them; the known flags around
/// them still apply (a malformed one after them still exits 2).
#[test]
fn unknown_flags_are_ignored_and_logged() {
    let o = run(
        &[
            "discovery",
            "--grpcAdress=:15010",
            "--someFutureFlag",
            "value",
            // A known flag whose value is optional takes no argument; a
            // known flag's separate value is its own.
            "--profile",
            "--configDir",
            "/nonexistent/istiod-rs",
            "--newSwitch",
            "-z",
            "zvalue",
            "--log_target=stderr",
        ],
        &[],
    );
    let err = stderr(&o);
    assert_eq!(o.status.code(), Some(2), "{err}");
    assert!(err.contains("--configDir is not a directory"), "the known flags applied: {err}");
    assert!(err.contains("unknown flags ignored"), "{err}");
    for f in ["--grpcAdress=:15010", "--someFutureFlag", "value", "--newSwitch", "-z", "zvalue"] {
        assert!(err.contains(&format!("\"{f}\"")), "{f} named: {err}");
    }
    let o = run(&["discovery", "--unknown", "--keepaliveMaxServerConnectionAge=30"], &[]);
    assert_eq!(o.status.code(), Some(2));
    assert!(stderr(&o).contains("missing unit"), "{}", stderr(&o));
}

#[test]
fn malformed_flag_value_exits_2() {
    let o = run(&["discovery", "--keepaliveMaxServerConnectionAge=30"], &[]);
    assert_eq!(o.status.code(), Some(2));
    assert!(stderr(&o).contains("missing unit"), "{}", stderr(&o));
    let o = run(&["discovery", "--grpcAddr=15010"], &[]);
    assert_eq!(o.status.code(), Some(2));
    assert!(stderr(&o).contains("--grpcAddr"), "{}", stderr(&o));
}

#[test]
fn missing_config_dir_exits_2() {
    let o = run(&["discovery", "--configDir=/nonexistent/istiod-rs", "--log_target=stderr"], &[]);
    assert_eq!(o.status.code(), Some(2));
    assert!(stderr(&o).contains("--configDir is not a directory"), "{}", stderr(&o));
}

#[test]
fn version_json() {
    let o = run(&["version", "-o", "json"], &[]);
    assert!(o.status.success());
    let out = String::from_utf8(o.stdout).unwrap();
    assert!(out.contains(&format!("\"version\": \"{}\"", env!("CARGO_PKG_VERSION"))), "{out}");
    // Stamped by build.rs from the checkout, as istiod's build stamps
    // pkg/version: the commit, and Clean or Modified.
    let v: serde_json::Value = serde_json::from_str(&out).unwrap();
    let head = std::process::Command::new("git")
        .args(["rev-parse", "HEAD"])
        .current_dir(env!("CARGO_MANIFEST_DIR"))
        .output()
        .ok()
        .filter(|o| o.status.success())
        .map(|o| String::from_utf8_lossy(&o.stdout).trim().to_owned());
    if let Some(head) = head.filter(|_| std::env::var_os("ISTIOD_GIT_REVISION").is_none()) {
        assert_eq!(v["clientVersion"]["revision"], head.as_str(), "{out}");
        let status = v["clientVersion"]["status"].as_str().unwrap();
        assert!(status == "Clean" || status == "Modified", "{out}");
    }
    let o = run(&["version", "--short"], &[]);
    assert_eq!(String::from_utf8(o.stdout).unwrap(), format!("client version: {}\n", env!("CARGO_PKG_VERSION")));
    let o = run(&["version", "-o", "xml"], &[]);
    assert_eq!(o.status.code(), Some(2));
}
