//! Stamps `pilot-discovery version` with what the binary was built from,
//! as istiod's build stamps pkg/version: the git revision, the tag on it
//! (if any) and whether the tree had changes. Values given in the
//! environment at build time (ISTIOD_GIT_REVISION, ISTIOD_GIT_TAG,
//! ISTIOD_BUILD_STATUS, as a release build sets them) win; outside a git
//! checkout they stay `unknown`.

use std::process::Command;

fn git(args: &[&str]) -> Option<String> {
    let out = Command::new("git").args(args).output().ok()?;
    out.status.success().then(|| String::from_utf8_lossy(&out.stdout).trim().to_owned())
}

fn main() {
    for var in ["ISTIOD_GIT_REVISION", "ISTIOD_GIT_TAG", "ISTIOD_BUILD_STATUS"] {
        println!("cargo:rerun-if-env-changed={var}");
    }
    // A new commit or checkout stamps again (the index would rebuild on
    // every `git add`; the status is the one at the last commit's build).
    if let Some(dir) = git(&["rev-parse", "--git-dir"]) {
        println!("cargo:rerun-if-changed={dir}/HEAD");
        if let Some(head) = git(&["symbolic-ref", "-q", "HEAD"]) {
            println!("cargo:rerun-if-changed={dir}/{head}");
        }
    }
    let set = |var: &str, value: Option<String>| {
        if std::env::var_os(var).is_none()
            && let Some(v) = value.filter(|v| !v.is_empty())
        {
            println!("cargo:rustc-env={var}={v}");
        }
    };
    set("ISTIOD_GIT_REVISION", git(&["rev-parse", "HEAD"]));
    set("ISTIOD_GIT_TAG", git(&["describe", "--tags", "--exact-match"]));
    set(
        "ISTIOD_BUILD_STATUS",
        git(&["status", "--porcelain", "--untracked-files=no"])
            .map(|s| if s.is_empty() { "Clean" } else { "Modified" }.into()),
    );
}
