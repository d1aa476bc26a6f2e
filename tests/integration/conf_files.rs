//! Every configuration we ship loads, and bad ones are refused with the offending field named.
//!
//! `toolgate check-config FILE` is the contract: exit 0 for a valid file; non-zero with the
//! field named on stderr for an invalid one.

use crate::common;

use std::path::{Path, PathBuf};
use std::process::{Command, Output};

use common::BASE_CONFIG;

fn check_config(file: &Path) -> Output {
    Command::new(common::TestServer::binary())
        .arg("check-config")
        .arg(file)
        .current_dir(env!("CARGO_MANIFEST_DIR"))
        .env_remove("TOOLGATE_ADMIN_KEY")
        .output()
        .expect("run toolgate check-config")
}

/// Toolgate's configurations under `dir`; `conf/prometheus` holds Prometheus's files (alert
/// rules and their tests), which `metrics_prometheus` checks with `promtool`.
fn yaml_files(dir: &Path, out: &mut Vec<PathBuf>) {
    let mut entries: Vec<_> = std::fs::read_dir(dir)
        .unwrap_or_else(|e| panic!("read {}: {e}", dir.display()))
        .map(|e| e.expect("dir entry").path())
        .collect();
    entries.sort();
    for path in entries {
        if path.ends_with("conf/prometheus") {
            continue;
        }
        if path.is_dir() {
            yaml_files(&path, out);
        } else if matches!(path.extension().and_then(|e| e.to_str()), Some("yaml" | "yml")) {
            out.push(path);
        }
    }
}

fn describe(out: &Output) -> String {
    common::describe_output(out)
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

/// Issue 12: `check-config` refuses every value the server would refuse at start, naming the
/// field, and the start refuses it with the same message. Before the fix `check-config` said
/// `ok` to each of these: the Redis backend (then not built) was refused only when the store opened, a
/// `max_stdio_processes` above the semaphore's maximum and session times that overflow when
/// added panicked in the server, and a metrics port already held by a wildcard `listen` failed
/// to bind.
#[test]
fn check_config_refuses_what_the_start_refuses() {
    // A CA file for Redis over TLS that does not exist is refused by both (the start would fail
    // to connect, much later).
    let base_apps = BASE_CONFIG.replace(
        "backend: embedded\n  path: {data_dir}",
        "backend: redis\n  url: rediss://127.0.0.1:6379\n  tls_ca_file: /nonexistent/ca.pem",
    );
    assert!(base_apps.contains("backend: redis"), "test setup: base config changed shape");
    let cases: [(&str, String, &str); 6] = [
        ("redis_tls", base_apps, "storage.tls_ca_file: `/nonexistent/ca.pem`"),
        (
            "stdio_processes",
            format!("{BASE_CONFIG}mcp:\n  max_stdio_processes: 18446744073709551615\n"),
            "mcp.max_stdio_processes",
        ),
        (
            "idle_timeout",
            format!("{BASE_CONFIG}mcp:\n  session_idle_timeout_secs: 18446744073709551615\n"),
            "mcp.session_idle_timeout_secs",
        ),
        (
            "metrics_port_taken",
            BASE_CONFIG
                .replace("listen: 127.0.0.1:0", "listen: 0.0.0.0:39517")
                .replace("metrics_listen: 127.0.0.2:0", "metrics_listen: 127.0.0.2:39517"),
            "server.metrics_listen",
        ),
        ("app_rate_limit_zero", format!("{BASE_CONFIG}    rate_limit: 0\n"), "apps[0].rate_limit"),
        (
            "gateway_max_servers_zero",
            format!("{BASE_CONFIG}limits:\n  gateway_max_servers: 0\n"),
            "limits.gateway_max_servers",
        ),
    ];
    for (name, yaml, field) in cases {
        assert_refused(name, &yaml, &[&[field]]);
        let dir = tempfile::tempdir().expect("tempdir");
        let file = dir.path().join(format!("{name}.yaml"));
        std::fs::write(&file, yaml.replace("{data_dir}", &dir.path().join("data").to_string_lossy())).expect("write");
        let out = common::run_until_exit(&file);
        let stderr = String::from_utf8_lossy(&out.stderr);
        assert!(!out.status.success() && out.status.code().is_some(), "{name}: {}", describe(&out));
        assert!(
            stderr.contains("bad configuration") && stderr.contains(field) && !stderr.contains("panicked"),
            "{name}: the start does not refuse it as check-config does, naming {field}:\n{}",
            describe(&out)
        );
    }
}

/// A stdio app whose program is on no directory of `PATH`, or a path that is no executable, is
/// a warning of `check-config` (the file is valid: the program may be installed later), naming
/// the app; a program that is found is not.
#[test]
fn check_config_warns_of_a_stdio_program_it_cannot_find() {
    let dir = tempfile::tempdir().expect("tempdir");
    let file = dir.path().join("stdio.yaml");
    // Written without the execute bits.
    let plain = dir.path().join("plain.sh");
    std::fs::write(&plain, "#!/bin/sh\n").expect("write");
    let plain = plain.to_string_lossy().into_owned();
    let apps = format!(
        "  - {{ id: ghost, name: Ghost, command: [toolgate-no-such-program-q7, --stdio] }}\n\
         \x20 - {{ id: notexec, name: NotExec, command: [{plain:?}] }}\n\
         \x20 - {{ id: shell, name: Shell, command: [sh, -c, cat] }}\n"
    );
    let yaml = format!("{BASE_CONFIG}{apps}").replace("{data_dir}", &dir.path().join("data").to_string_lossy());
    std::fs::write(&file, yaml).expect("write");
    let out = check_config(&file);
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(out.status.success(), "a warning, not a refusal: {}", describe(&out));
    let warnings: Vec<&str> = stderr.lines().filter(|l| l.contains(": warning: ")).collect();
    assert_eq!(warnings.len(), 2, "{}", describe(&out));
    assert!(
        warnings[0].ends_with(
            "warning: apps[1].command (app ghost): `toolgate-no-such-program-q7` is not found on PATH; \
             the app will fail to start"
        ),
        "{}",
        describe(&out)
    );
    let not_executable = format!("apps[2].command (app notexec): `{plain}` is not an executable file");
    assert!(warnings[1].contains(&not_executable), "{stderr}");
}
