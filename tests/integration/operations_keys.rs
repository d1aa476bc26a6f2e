//! What an operator runs on the store (issue 56, item 9): `toolgate keys rotate` seals every
//! app credential under a new master key, finishes when run again after being stopped midway,
//! and leaves a store toolgate runs on with the new key alone; `toolgate backup` copies the
//! embedded store under write load, and a new instance started from the copy finds every record
//! and an audit chain that verifies.

use crate::audit::{export, verify, write_lines};
use crate::common::mcp::{result_text, Mcp};
use crate::common::*;
use crate::mcp_upstreams::{config, create_gateway, Recorder};
use serde_json::{json, Value};
use std::collections::BTreeSet;
use std::fs;
use std::path::Path;
use std::process::{Command, Output};
use std::sync::atomic::{AtomicBool, AtomicU32, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

/// `toolgate --config <srv's> args...`.
fn toolgate(srv: &TestServer, args: &[&str]) -> Output {
    Command::new(TestServer::binary())
        .arg("--config")
        .arg(srv.config_path())
        .args(args)
        .env_remove("TOOLGATE_SECRET_KEY")
        .output()
        .expect("run toolgate")
}

fn key_file(path: &Path) -> String {
    fs::read_to_string(path).unwrap_or_default().trim().to_string()
}

/// Every file under `dir`, read whole.
fn files_under(dir: &Path) -> Vec<(String, Vec<u8>)> {
    let mut out = Vec::new();
    for entry in fs::read_dir(dir).unwrap().flatten() {
        if entry.file_type().unwrap().is_file() {
            out.push((entry.file_name().to_string_lossy().into_owned(), fs::read(entry.path()).unwrap()));
        }
    }
    out
}

/// A call through the gateway to each keyed app, and the credential each upstream was sent.
fn call_each(srv: &TestServer, up: &Recorder, gw: &str, key: &str, secrets: &[String], round: u32) {
    let before = up.seen().len();
    let mcp = Mcp::open(srv, gw, key);
    assert_eq!(mcp.tool_names(1).len(), secrets.len(), "every keyed app lists its tool");
    for (i, secret) in secrets.iter().enumerate() {
        let body = mcp.call(10 + i as u64, &format!("keyed{i}__echo"), json!({ "message": format!("r{round}") }));
        assert_eq!(result_text(&body), format!("Echo: r{round}"), "keyed{i} in round {round}: {body}");
        let sent: Vec<_> = up.seen()[before..]
            .iter()
            .filter(|s| s.path == format!("/keyed{i}/mcp"))
            .map(|s| s.headers.iter().find(|(k, _)| k == "authorization").map(|(_, v)| v.clone()))
            .collect();
        assert!(!sent.is_empty(), "keyed{i} was called in round {round}");
        for auth in sent {
            assert_eq!(auth.as_deref(), Some(format!("Bearer {secret}").as_str()), "keyed{i}, round {round}");
        }
    }
}

#[test]
fn a_master_key_rotation_stopped_midway_is_finished_by_running_it_again() {
    let up = Recorder::start();
    let apps: String = (0..3)
        .map(|i| {
            format!(
                "  - {{ id: keyed{i}, name: Keyed{i}, url: \"{}\", auth_types: [api_key], protocol_version: \"2025-06-18\" }}\n",
                up.url(&format!("/keyed{i}/mcp"))
            )
        })
        .collect();
    let mut srv = TestServer::start_with_config(&config(&apps, ""));
    let secrets: Vec<String> = (0..3).map(|i| format!("credential-{i}-{}", random_alnum(12))).collect();
    for (i, secret) in secrets.iter().enumerate() {
        let body = json!({ "auth_type": "api_key", "credentials": { "api_key": secret } });
        ok(&srv.api("POST", &format!("/v1/apps/keyed{i}/connect"), Some(srv.admin_key()), Some(body)), 200);
    }
    let (gw, gw_key) = create_gateway(&srv, &["keyed0", "keyed1", "keyed2"]);
    call_each(&srv, &up, &gw, &gw_key, &secrets, 0);

    let data = srv.data_dir();
    let old_key = key_file(&data.join("secret.key"));
    assert_eq!(old_key.len(), 64, "the first start made a master key");
    let new_key = hex::encode((0..32).map(|_| rand::random::<u8>()).collect::<Vec<u8>>());
    let new_key_path = srv.dir().join("new.key");
    fs::write(&new_key_path, format!("{new_key}\n")).unwrap();
    let new_arg = new_key_path.to_str().unwrap();

    // Not while toolgate runs: it would write the old sealed values back.
    let busy = toolgate(&srv, &["keys", "rotate", "--new-key-file", new_arg]);
    assert_eq!(busy.status.code(), Some(1), "{}", describe_output(&busy));
    assert!(
        String::from_utf8_lossy(&busy.stderr).contains("in use by another toolgate process"),
        "{}",
        describe_output(&busy)
    );
    assert!(!data.join("secret.key.next").exists(), "a refused rotation stages nothing");
    srv.sigterm();

    // Stopped after one record, as a crash would stop it.
    let stopped = toolgate(&srv, &["keys", "rotate", "--new-key-file", new_arg, "--stop-after", "1"]);
    assert_eq!(stopped.status.code(), Some(1), "{}", describe_output(&stopped));
    let stderr = String::from_utf8_lossy(&stopped.stderr);
    assert_eq!(stderr.matches("sealed anew: connection").count(), 1, "{}", describe_output(&stopped));
    assert_eq!(key_file(&data.join("secret.key")), old_key, "the current key stays until the end");
    assert_eq!(key_file(&data.join("secret.key.next")), new_key, "the new key is staged beside it");

    // Midway, toolgate opens values under either key.
    srv.restart();
    call_each(&srv, &up, &gw, &gw_key, &secrets, 1);
    srv.sigterm();

    // Another key while this rotation is unfinished is refused.
    let other = srv.dir().join("other.key");
    fs::write(&other, "ab".repeat(32)).unwrap();
    let refused = toolgate(&srv, &["keys", "rotate", "--new-key-file", other.to_str().unwrap()]);
    assert_eq!(refused.status.code(), Some(1), "{}", describe_output(&refused));
    assert!(
        String::from_utf8_lossy(&refused.stderr).contains("another key is under way"),
        "{}",
        describe_output(&refused)
    );

    // Run again: what is left is sealed anew, then the new key replaces the old one.
    let done = toolgate(&srv, &["keys", "rotate", "--new-key-file", new_arg]);
    assert_eq!(done.status.code(), Some(0), "{}", describe_output(&done));
    let stdout = String::from_utf8_lossy(&done.stdout);
    assert!(
        stdout.contains("sealed 2 values of 2 records anew (1 records were under the new key already)"),
        "{stdout}"
    );
    assert_eq!(key_file(&data.join("secret.key")), new_key);
    assert!(!data.join("secret.key.next").exists(), "the staged key was moved into place");
    for (name, bytes) in files_under(&data) {
        let text = String::from_utf8_lossy(&bytes);
        assert!(!text.contains(&old_key), "the old master key is left in {name}");
    }

    // The new key alone opens every credential.
    srv.restart();
    call_each(&srv, &up, &gw, &gw_key, &secrets, 2);
    let again = {
        srv.sigterm();
        toolgate(&srv, &["keys", "rotate", "--new-key-file", new_arg])
    };
    assert_eq!(again.status.code(), Some(1), "{}", describe_output(&again));
    assert!(
        String::from_utf8_lossy(&again.stderr).contains("the new key is the current master key"),
        "{}",
        describe_output(&again)
    );
}

/// The ids of a listing (`data` holds one array).
fn listed(srv: &TestServer, key: &str, path: &str) -> BTreeSet<String> {
    let data = ok(&srv.api("GET", path, Some(key), None), 200);
    let array = data.as_object().and_then(|o| o.values().find_map(Value::as_array)).expect("a listing");
    array.iter().map(|v| v["id"].as_str().expect("an id").to_string()).collect()
}

const LISTINGS: [&str; 3] = ["/v1/gateways?limit=100", "/v1/api-keys?limit=100", "/v1/sessions?limit=100"];

#[test]
fn a_backup_taken_under_write_load_starts_a_new_instance_with_every_record() {
    let (owner, yaml) = declared_key("key_bk", "usr_bk", &["*"]);
    let extra = format!(
        "  - {{ id: crm, name: CRM, category: sales, auth_types: [api_key], url: \"http://127.0.0.1:9/mcp\" }}\n\
         audit:\n  checkpoint_interval_secs: 1\n\
         organizations:\n  - {{ id: org_bk, name: Backed, tier: enterprise }}\n\
         users:\n  - {{ id: usr_bk, email: o@bk.test, name: Owner, role: owner, organization: org_bk }}\n\
         api_keys:\n{yaml}"
    );
    let srv = TestServer::start(&extra);
    let o = owner.as_str();
    let mut gateways = Vec::new();
    for i in 0..3 {
        let g = ok(
            &srv.api("POST", "/v1/gateways", Some(o), Some(json!({ "name": format!("bk-{i}"), "servers": ["time"] }))),
            201,
        );
        gateways.push((g["id"].as_str().unwrap().to_string(), g["api_key"].as_str().unwrap().to_string()));
    }
    for i in 0..2 {
        ok(
            &srv.api(
                "POST",
                "/v1/api-keys",
                Some(o),
                Some(json!({ "name": format!("k{i}"), "scopes": ["gateways:read"] })),
            ),
            201,
        );
    }
    let body = json!({ "auth_type": "api_key", "credentials": { "api_key": "crm-backed-up" } });
    ok(&srv.api("POST", "/v1/apps/crm/connect", Some(o), Some(body)), 200);
    for (id, key) in &gateways {
        Mcp::open(&srv, id, key);
    }
    let before: Vec<BTreeSet<String>> = LISTINGS.iter().map(|p| listed(&srv, o, p)).collect();
    assert_eq!(before[2].len(), 3, "three MCP sessions: {:?}", before[2]);

    // Writes go on while the backup is taken: each an update of a gateway and an audit entry.
    let stop = Arc::new(AtomicBool::new(false));
    let written = Arc::new(AtomicU32::new(0));
    let loader = {
        let (stop, written, url, key, gw) =
            (stop.clone(), written.clone(), srv.url(""), owner.clone(), gateways[0].0.clone());
        std::thread::spawn(move || {
            let client = reqwest::blocking::Client::builder().no_proxy().build().unwrap();
            while !stop.load(Ordering::SeqCst) {
                let n = written.load(Ordering::SeqCst) + 1;
                let r = client
                    .patch(format!("{url}/v1/gateways/{gw}"))
                    .bearer_auth(&key)
                    .json(&json!({ "description": format!("write {n}") }))
                    .send()
                    .unwrap();
                // The organisation's rate limit paces the writes.
                if r.status().as_u16() == 429 {
                    std::thread::sleep(Duration::from_millis(100));
                    continue;
                }
                assert_eq!(r.status().as_u16(), 200);
                written.store(n, Ordering::SeqCst);
            }
        })
    };
    let started = Instant::now();
    while written.load(Ordering::SeqCst) < 5 {
        assert!(started.elapsed() < Duration::from_secs(30), "the writes did not start");
        std::thread::sleep(Duration::from_millis(10));
    }
    // A checkpoint was signed and kept beside the store, so that the copy has one to extend.
    while !srv.data_dir().join("audit-checkpoints.json").exists() {
        assert!(started.elapsed() < Duration::from_secs(30), "no checkpoint kept: {}", srv.logs_for_humans());
        std::thread::sleep(Duration::from_millis(50));
    }
    let dest = srv.dir().join("backup");
    let out = Command::new(TestServer::binary())
        .arg("backup")
        .arg(&dest)
        .arg("--config")
        .arg(srv.config_path())
        .output()
        .expect("run toolgate backup");
    let during = written.load(Ordering::SeqCst);
    while written.load(Ordering::SeqCst) < during + 5 {
        assert!(started.elapsed() < Duration::from_secs(60), "the writes stopped during the backup");
        std::thread::sleep(Duration::from_millis(10));
    }
    stop.store(true, Ordering::SeqCst);
    loader.join().expect("the writes all succeeded");
    assert_eq!(out.status.code(), Some(0), "{}", describe_output(&out));
    let stdout = String::from_utf8_lossy(&out.stdout);
    for file in ["toolgate.sqlite3", "secret.key", "audit-checkpoints.json"] {
        assert!(stdout.contains(file), "{file} is in the backup: {stdout}");
    }
    use std::os::unix::fs::PermissionsExt;
    for (name, _) in files_under(&dest) {
        let mode = fs::metadata(dest.join(&name)).unwrap().permissions().mode() & 0o777;
        assert_eq!(mode, 0o600, "{name} is owner-only");
    }
    let again = Command::new(TestServer::binary())
        .arg("backup")
        .arg(&dest)
        .arg("--config")
        .arg(srv.config_path())
        .output()
        .unwrap();
    assert_eq!(again.status.code(), Some(1), "{}", describe_output(&again));
    assert!(String::from_utf8_lossy(&again.stderr).contains("is not empty"), "{}", describe_output(&again));

    // A new instance on the copy.
    let copy =
        TestServer::start_with_config(&format!("{BASE_CONFIG}{extra}").replace("{data_dir}", dest.to_str().unwrap()));
    for (path, was) in LISTINGS.iter().zip(&before) {
        assert_eq!(&listed(&copy, o, path), was, "{path} in the restored instance");
    }
    let g = ok(&copy.api("GET", &format!("/v1/gateways/{}", gateways[0].0), Some(o), None), 200);
    let n: u32 = g["description"].as_str().unwrap().trim_start_matches("write ").parse().unwrap();
    assert!(n >= 5 && n <= written.load(Ordering::SeqCst), "a write acknowledged before the copy: {g}");
    let crm = ok(&copy.api("GET", "/v1/apps/crm", Some(o), None), 200);
    assert_eq!(crm["status"], "connected", "{crm}");
    for (id, key) in &gateways {
        let mcp = Mcp::open(&copy, id, key);
        assert_eq!(mcp.tool_names(1), vec!["get_current_time"], "the restored gateway {id} serves its app");
    }

    // The audit chain goes on from the copy and verifies under the same checkpoint key.
    ok(
        &copy.api(
            "PATCH",
            &format!("/v1/gateways/{}", gateways[1].0),
            Some(o),
            Some(json!({ "description": "after" })),
        ),
        200,
    );
    let text = loop {
        let text = export(&copy, o);
        let lines: Vec<Value> = text.lines().filter_map(|l| serde_json::from_str(l).ok()).collect();
        let last_entry = lines.iter().filter_map(|v| v["seq"].as_u64()).max().unwrap_or_default();
        let last_signed = lines.iter().filter_map(|v| v["checkpoint"]["seq"].as_u64()).max().unwrap_or_default();
        if last_entry > 0 && last_signed >= last_entry {
            break text;
        }
        assert!(started.elapsed() < Duration::from_secs(90), "no checkpoint on the copy: {}", copy.logs_for_humans());
        std::thread::sleep(Duration::from_millis(100));
    };
    assert!(
        !copy.all_logs().contains("tampered"),
        "the copy's chain extends the kept checkpoint: {}",
        copy.logs_for_humans()
    );
    let public = ok(&copy.api("GET", "/v1/audit/key", Some(o), None), 200)["public_key"].as_str().unwrap().to_string();
    let file = copy.dir().join("export.ndjson");
    write_lines(&file, &text.lines().collect::<Vec<_>>());
    let checked = verify(&file, &["--public-key", &public], &[]);
    assert_eq!(checked.status.code(), Some(0), "{}", describe_output(&checked));
}
