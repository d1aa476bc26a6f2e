//! Build-time facts the binary reports: the commit it was built from, for
//! `toolgate_build_info{commit}` (docs/operations.md, "Metrics").
//!
//! `TOOLGATE_COMMIT` set at build time wins (a build from a tarball or in a container, where
//! `.git` is absent); otherwise `git rev-parse` of the source tree; otherwise `unknown`, so a
//! build without git still succeeds and is the same build every time.

use std::process::Command;

fn main() {
    println!("cargo:rerun-if-env-changed=TOOLGATE_COMMIT");
    let commit = std::env::var("TOOLGATE_COMMIT")
        .ok()
        .filter(|c| !c.trim().is_empty())
        .or_else(git_commit)
        .unwrap_or_else(|| "unknown".to_string());
    println!("cargo:rustc-env=TOOLGATE_COMMIT={}", commit.trim());
}

/// The short hash of `HEAD`, and the files whose change means a new commit is checked out
/// (watched so that a commit rebuilds this, and nothing else does).
fn git_commit() -> Option<String> {
    let git = |args: &[&str]| -> Option<String> {
        let out = Command::new("git").args(args).output().ok()?;
        out.status.success().then(|| String::from_utf8_lossy(&out.stdout).trim().to_string())
    };
    let commit = git(&["rev-parse", "--short=12", "HEAD"]).filter(|c| !c.is_empty())?;
    let mut watched = vec!["HEAD".to_string(), "packed-refs".to_string()];
    watched.extend(git(&["symbolic-ref", "-q", "HEAD"]));
    for name in watched {
        // A path that does not exist would make cargo run this script at every build.
        if let Some(path) = git(&["rev-parse", "--git-path", &name]).filter(|p| std::path::Path::new(p).exists()) {
            println!("cargo:rerun-if-changed={path}");
        }
    }
    Some(commit)
}
