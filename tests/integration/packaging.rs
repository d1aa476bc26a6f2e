//! Packaging for the edge (issue 17): the `Dockerfile` builds with the documented build step and
//! runs as a non-root user on the shipped configuration; the systemd unit passes
//! `systemd-analyze verify` with the binary under test in place of the installed one.

use crate::common;
use crate::docs::read;

use std::path::Path;
use std::process::Command;

/// The documented build command: the line of the block after `<!-- build -->` in
/// docs/operations.md.
fn documented_build_step() -> String {
    let page = read("docs/operations.md");
    let after = page.split("<!-- build -->").nth(1).expect("docs/operations.md has no `<!-- build -->` block");
    let block = after.split("```").nth(1).expect("a fenced block after `<!-- build -->`");
    let line = block.lines().map(str::trim).find(|l| l.starts_with("cargo build")).expect("a cargo build line");
    line.split('#').next().unwrap().trim().to_string()
}

#[test]
fn the_image_builds_with_the_documented_build_step_and_runs_unprivileged() {
    let dockerfile = read("Dockerfile");
    let step = documented_build_step();
    assert!(step.contains("--locked") && step.contains("--release"), "{step}");
    assert!(
        dockerfile.lines().any(|l| l.trim() == format!("RUN {step}")),
        "the Dockerfile does not build with docs/operations.md's step `{step}`"
    );
    assert!(dockerfile.contains("install -y --no-install-recommends cmake"), "the build stage needs cmake");
    let user = dockerfile.lines().rev().find_map(|l| l.trim().strip_prefix("USER ")).expect("a USER line");
    assert!(user != "root" && user != "0", "the image runs as {user}");
    assert_eq!(dockerfile.matches("FROM ").count(), 2, "a build stage and a runtime stage");
    // The configuration the image ships is the one the entrypoint names, and it loads.
    assert!(dockerfile.contains("COPY conf/toolgate.yaml /etc/toolgate/toolgate.yaml"));
    assert!(dockerfile.contains(r#""--config", "/etc/toolgate/toolgate.yaml""#));
    let checked = Command::new(common::TestServer::binary())
        .args(["check-config", "conf/toolgate.yaml"])
        .current_dir(env!("CARGO_MANIFEST_DIR"))
        .output()
        .expect("run toolgate check-config");
    assert!(checked.status.success(), "{}", String::from_utf8_lossy(&checked.stderr));
    let ignored = read(".dockerignore");
    for dir in ["target", "tests/node/node_modules", "tests/py/.venv"] {
        assert!(ignored.lines().any(|l| l.trim() == dir), ".dockerignore should leave out {dir}");
    }
}

#[test]
fn the_systemd_unit_verifies() {
    let analyze = which("systemd-analyze")
        .expect("systemd-analyze is not installed: tests/run.sh installs it (Debian package systemd)");
    let unit = read("conf/examples/toolgate.service");
    assert!(unit.contains("ExecStart=/usr/local/bin/toolgate --config /etc/toolgate/toolgate.yaml"));
    assert!(unit.contains("KillSignal=SIGTERM") && unit.contains("DynamicUser=yes"), "{unit}");
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("toolgate.service");
    std::fs::write(&path, unit.replace("/usr/local/bin/toolgate", common::TestServer::binary())).unwrap();
    let out = Command::new(analyze).arg("verify").arg(&path).output().expect("run systemd-analyze verify");
    let said = format!("{}{}", String::from_utf8_lossy(&out.stdout), String::from_utf8_lossy(&out.stderr));
    assert!(out.status.success(), "systemd-analyze verify: {said}");
    assert!(!said.contains("toolgate.service"), "systemd-analyze warns about the unit: {said}");
}

fn which(name: &str) -> Option<std::path::PathBuf> {
    std::env::var_os("PATH")?.to_str()?.split(':').map(|d| Path::new(d).join(name)).find(|p| p.is_file())
}
