//! What the process itself tells an operator and a supervisor (issue 56): a listening address
//! that is taken ends the start at once with one line naming its setting (no retrying, no
//! process left running without its listener); `/metrics` carries the standard process series
//! and the build.

use crate::common::{self, TestServer, BASE_CONFIG};
use std::net::TcpListener;

/// Starts the binary with `yaml` and waits for it to exit (a start still running after 20 s
/// fails the test: the old behaviour, a process alive without its listener).
fn start_until_exit(yaml: &str) -> std::process::Output {
    let dir = tempfile::tempdir().expect("tempdir");
    let file = dir.path().join("toolgate.yaml");
    std::fs::write(&file, yaml.replace("{data_dir}", &dir.path().join("data").to_string_lossy())).expect("write");
    common::run_until_exit(&file)
}

#[test]
fn a_taken_listening_address_ends_the_start_with_one_line_naming_its_setting() {
    for (setting, base_line, host) in [
        ("server.listen", "  listen: 127.0.0.1:0\n", "127.0.0.1"),
        ("server.metrics_listen", "  metrics_listen: 127.0.0.2:0\n", "127.0.0.2"),
    ] {
        // Held for the whole run: the port is taken, as by another process.
        let taken = TcpListener::bind(format!("{host}:0")).expect("occupy a port");
        let addr = taken.local_addr().unwrap();
        assert!(BASE_CONFIG.contains(base_line), "test setup: the base config changed shape");
        let key = setting.trim_start_matches("server.");
        let out = start_until_exit(&BASE_CONFIG.replace(base_line, &format!("  {key}: {addr}\n")));
        let stderr = String::from_utf8_lossy(&out.stderr);
        let described = common::describe_output(&out);
        assert!(!out.status.success() && out.status.code().is_some(), "{setting}: {described}");
        let line = format!("toolgate: cannot start: {setting} {addr} is in use");
        assert_eq!(stderr.lines().filter(|l| **l == *line).count(), 1, "{setting}: no line `{line}`:\n{described}");
        assert_eq!(stderr.matches(&addr.to_string()).count(), 1, "one line names the address:\n{described}");
        assert!(!stderr.contains("panicked") && !stderr.contains("backtrace"), "{setting}: {described}");
        drop(taken);
    }
}

/// The value of the series `name` (without labels) in an exposition.
fn value(exposition: &str, name: &str) -> f64 {
    let line = exposition
        .lines()
        .find(|l| l.split_once(' ').is_some_and(|(n, _)| n == name))
        .unwrap_or_else(|| panic!("no series {name} in /metrics:\n{exposition}"));
    line.rsplit(' ').next().and_then(|v| v.parse().ok()).unwrap_or_else(|| panic!("not a number: {line}"))
}

#[test]
fn metrics_carry_the_standard_process_series_and_the_build() {
    let srv = TestServer::start("");
    let text = srv.metrics();
    let now = std::time::SystemTime::now().duration_since(std::time::UNIX_EPOCH).unwrap().as_secs_f64();
    let started = value(&text, "process_start_time_seconds");
    assert!(started > now - 3600.0 && started <= now + 1.0, "started {started}, now {now}");
    assert!(value(&text, "process_resident_memory_bytes") > 1_000_000.0, "{text}");
    let (open, max) = (value(&text, "process_open_fds"), value(&text, "process_max_fds"));
    assert!(open > 0.0 && open <= max, "open fds {open}, max {max}");
    assert!(value(&text, "process_cpu_seconds_total") >= 0.0);
    // The build: version and commit (the short hash, or `unknown` for a build without git).
    let build = text.lines().find(|l| l.starts_with("toolgate_build_info{")).expect("toolgate_build_info");
    assert!(build.ends_with("} 1"), "{build}");
    assert!(build.contains(&format!("version=\"{}\"", env!("CARGO_PKG_VERSION"))), "{build}");
    let commit = build.split("commit=\"").nth(1).and_then(|r| r.split('"').next()).expect("a commit label");
    assert!(commit == "unknown" || (commit.len() >= 7 && commit.chars().all(|c| c.is_ascii_hexdigit())), "{build}");
}
