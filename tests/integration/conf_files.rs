//! Every configuration we ship loads, and bad ones are refused with the offending field named.
//!
//! `toolgate check-config FILE` is the contract: exit 0 for a valid file; non-zero with the
//! field named on stderr for an invalid one.

use crate::common;

use std::path::{Path, PathBuf};
use std::process::{Command, Output};

use common::BASE_CONFIG;

fn check_config(file: &Path) -> Output {
    Command::new(env!("CARGO_BIN_EXE_toolgate"))
        .arg("check-config")
        .arg(file)
        .current_dir(env!("CARGO_MANIFEST_DIR"))
        .env_remove("TOOLGATE_ADMIN_KEY")
        .output()
        .expect("run toolgate check-config")
}

fn yaml_files(dir: &Path, out: &mut Vec<PathBuf>) {
    let mut entries: Vec<_> = std::fs::read_dir(dir)
        .unwrap_or_else(|e| panic!("read {}: {e}", dir.display()))
        .map(|e| e.expect("dir entry").path())
        .collect();
    entries.sort();
    for path in entries {
        if path.is_dir() {
            yaml_files(&path, out);
        } else if matches!(path.extension().and_then(|e| e.to_str()), Some("yaml" | "yml")) {
            out.push(path);
        }
    }
}

fn describe(out: &Output) -> String {
    format!(
        "exit status {}\n--- stderr ---\n{}\n--- stdout ---\n{}",
        out.status,
        String::from_utf8_lossy(&out.stderr),
        String::from_utf8_lossy(&out.stdout)
    )
}

#[test]
fn every_shipped_config_is_valid() {
    let conf = Path::new(env!("CARGO_MANIFEST_DIR")).join("conf");
    let mut files = Vec::new();
    yaml_files(&conf, &mut files);
    assert!(
        files.iter().any(|f| f.ends_with("conf/toolgate.yaml")),
        "conf/toolgate.yaml (the default config) is missing; found {files:?}"
    );
    let mut failures = Vec::new();
    for file in &files {
        let out = check_config(file);
        if !out.status.success() {
            failures.push(format!("{}: {}", file.display(), describe(&out)));
        }
    }
    assert!(failures.is_empty(), "shipped configs that do not load:\n\n{}", failures.join("\n\n"));
    eprintln!("checked {} config file(s): {files:?}", files.len());
}

/// The harness's own base config is valid, so a schema change shows up here first.
#[test]
fn harness_base_config_is_valid() {
    let dir = tempfile::tempdir().expect("tempdir");
    let file = dir.path().join("base.yaml");
    let data = dir.path().join("data");
    std::fs::create_dir_all(&data).expect("data dir");
    std::fs::write(&file, BASE_CONFIG.replace("{data_dir}", &data.to_string_lossy())).expect("write");
    let out = check_config(&file);
    assert!(out.status.success(), "tests/common BASE_CONFIG is refused: {}", describe(&out));
}

/// Writes `yaml` to a file, asserts `check-config` refuses it without panicking, and that
/// stderr names every one of `fields` (each given as alternatives: any one of them will do).
fn assert_refused(name: &str, yaml: &str, fields: &[&[&str]]) {
    let dir = tempfile::tempdir().expect("tempdir");
    let file = dir.path().join(format!("{name}.yaml"));
    std::fs::write(&file, yaml.replace("{data_dir}", &dir.path().join("data").to_string_lossy())).expect("write");
    let out = check_config(&file);
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(!out.status.success(), "{name}: a bad config was accepted\n{yaml}\n{}", describe(&out));
    assert!(out.status.code().is_some(), "{name}: check-config died of a signal: {}", describe(&out));
    assert!(!stderr.contains("panicked"), "{name}: check-config panicked: {}", describe(&out));
    for alternatives in fields {
        assert!(
            alternatives.iter().any(|f| stderr.contains(f)),
            "{name}: stderr does not name the offending field (expected one of {alternatives:?})\n{}",
            describe(&out)
        );
    }
}

#[test]
fn unknown_field_is_named() {
    let yaml = BASE_CONFIG.replace("  listen: 127.0.0.1:0\n", "  lisen: 127.0.0.1:0\n");
    assert!(yaml.contains("lisen"), "test setup: base config changed shape");
    assert_refused("unknown_field", &yaml, &[&["lisen"]]);
}

#[test]
fn bad_storage_backend_is_named() {
    let yaml = BASE_CONFIG.replace("backend: embedded", "backend: floppy");
    assert!(yaml.contains("floppy"), "test setup: base config changed shape");
    assert_refused("bad_backend", &yaml, &[&["backend"]]);
}

#[test]
fn app_with_url_and_command_is_named() {
    let yaml = format!(
        "{BASE_CONFIG}  - id: twice
    name: Twice
    description: Two upstreams at once
    category: testing
    url: http://127.0.0.1:9/mcp
    command: [mcp-server-time]
"
    );
    // The app is `apps[1]`; the message must point at it and at the conflicting keys.
    assert_refused("url_and_command", &yaml, &[&["apps"], &["url", "command"]]);
}

#[test]
fn missing_file_is_an_error() {
    let out = check_config(Path::new("/nonexistent/toolgate.yaml"));
    assert!(!out.status.success(), "a missing file was accepted: {}", describe(&out));
    assert!(
        !String::from_utf8_lossy(&out.stderr).contains("panicked"),
        "check-config panicked on a missing file: {}",
        describe(&out)
    );
}
