//! Tampering with the audit trail shows to someone outside the store (issue 55, item A1):
//! checkpoints are signed (Ed25519, the public key at `GET /v1/audit/key`), each names the one
//! before it, an export ends with a signed head, checkpoints leave the store as they are made
//! (the process log, an `audit.checkpoint` event, a file beside the master key), and
//! `toolgate audit verify --public-key [--anchor]` refuses an export edited and re-hashed, one
//! with a checkpoint deleted, one cut at its end, and one that lacks an anchor. A store
//! rewritten under a running instance raises `audit.tampered` before another checkpoint.

use crate::audit::{export, verify, write_lines};
use crate::common::*;
use serde_json::{json, Value};
use sha2::{Digest, Sha256};
use std::path::Path;
use std::process::Output;
use std::time::{Duration, Instant};

/// Keys sorted at every depth, no white space: the chain's canonical JSON.
fn canonical(v: &Value) -> String {
    match v {
        Value::Object(map) => {
            let mut keys: Vec<&String> = map.keys().collect();
            keys.sort();
            let members: Vec<String> =
                keys.iter().map(|k| format!("{}:{}", Value::String((*k).clone()), canonical(&map[*k]))).collect();
            format!("{{{}}}", members.join(","))
        }
        Value::Array(items) => format!("[{}]", items.iter().map(canonical).collect::<Vec<_>>().join(",")),
        scalar => scalar.to_string(),
    }
}

/// What an attacker with the store does: every entry's `prev_hash` and `hash` computed again
/// (after editing some), so the chain's arithmetic holds.
fn rehash(entries: &mut [Value]) {
    let mut prev = "0".repeat(64);
    for e in entries.iter_mut() {
        e["prev_hash"] = json!(prev);
        e.as_object_mut().unwrap().remove("hash");
        let hash = hex::encode(Sha256::digest(canonical(e).as_bytes()));
        e["hash"] = json!(hash);
        prev = hash;
    }
}

fn split(text: &str) -> (Vec<Value>, Vec<Value>) {
    let all: Vec<Value> = text.lines().map(|l| serde_json::from_str(l).expect("a JSON line")).collect();
    all.into_iter().partition(|v| v.get("checkpoint").is_none())
}

fn write_values(path: &Path, values: &[Value]) {
    let lines: Vec<String> = values.iter().map(Value::to_string).collect();
    write_lines(path, &lines.iter().map(String::as_str).collect::<Vec<_>>());
}

/// Asserts `verify` refused the export (exit 1) saying `why`.
fn refused_for(out: &Output, why: &str) {
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert_eq!(out.status.code(), Some(1), "{}", describe_output(out));
    assert!(stderr.contains(why), "expected `{why}`: {}", describe_output(out));
}

/// The public key as `GET /v1/audit/key` gives it (base64).
fn public_key(srv: &TestServer) -> String {
    let r = srv.api("GET", "/v1/audit/key", Some(srv.admin_key()), None);
    assert_eq!(r.status, 200, "{r:?}");
    assert_eq!(r.data()["algorithm"], "ed25519", "{r:?}");
    assert!(r.data()["key_id"].as_str().is_some_and(|id| id.starts_with("ed25519:")), "{r:?}");
    r.data()["public_key"].as_str().expect("public_key").to_string()
}

fn gateway_write(srv: &TestServer, gw_id: &str, n: u32) {
    let body = json!({ "description": format!("write {n}") });
    let r = srv.api("PATCH", &format!("/v1/gateways/{gw_id}"), Some(srv.admin_key()), Some(body));
    assert_eq!(r.status, 200, "{r:?}");
}

#[test]
fn an_untouched_export_verifies_with_the_public_key_alone_and_each_tampering_fails() {
    let srv = TestServer::start("audit:\n  checkpoint_interval_secs: 1\n");
    assert_eq!(srv.api("GET", "/v1/audit/key", None, None).status, 401);
    let key = public_key(&srv);
    assert!(srv.stderr().contains(&key), "the start logs the public key: {}", srv.logs_for_humans());
    let admin = srv.admin_key().to_string();
    let gw = srv.api("POST", "/v1/gateways", Some(&admin), Some(json!({ "name": "signed" })));
    let gw_id = gw.data()["id"].as_str().expect("gateway id").to_string();
    gateway_write(&srv, &gw_id, 1);
    let file = srv.dir().join("audit.jsonl");
    let pk = ["--public-key", key.as_str()];

    // An export ends with a checkpoint signing its head, and verifies with the key alone.
    let first = export(&srv, &admin);
    let (entries, checkpoints) = split(&first);
    assert_eq!(checkpoints.last().map(|c| c["checkpoint"]["seq"].clone()), Some(json!(entries.len())), "{first}");
    std::fs::write(&file, &first).unwrap();
    let ok = verify(&file, &pk, &[]);
    assert!(ok.status.success(), "{}", describe_output(&ok));
    assert!(String::from_utf8_lossy(&ok.stdout).contains("signatures verified"), "{}", describe_output(&ok));
    refused_for(&verify(&file, &[], &[]), "partial verification");

    // Edited and re-hashed, its checkpoints deleted (or kept, their heads edited to match).
    let mut forged = entries.clone();
    forged[1]["action"] = json!("gateway.read");
    rehash(&mut forged);
    write_values(&file, &forged);
    refused_for(&verify(&file, &pk, &[]), "no checkpoint");
    let mut resigned = checkpoints.clone();
    let last = resigned.len() - 1;
    resigned[last]["checkpoint"]["head_hash"] = forged[forged.len() - 1]["hash"].clone();
    write_values(&file, &[forged, resigned].concat());
    refused_for(&verify(&file, &pk, &[]), "signature does not verify");

    // A deleted checkpoint: the one after it does not follow.
    gateway_write(&srv, &gw_id, 2);
    let second = export(&srv, &admin);
    let (entries, checkpoints) = split(&second);
    assert!(checkpoints.len() >= 2, "{second}");
    let mut gap = checkpoints.clone();
    gap.remove(gap.len() - 2);
    write_values(&file, &[entries.clone(), gap].concat());
    refused_for(&verify(&file, &pk, &[]), "does not follow the checkpoint before it");

    // Cut at its end: the last checkpoint removed, an entry past the one before it by more than
    // the interval (1 s) stays unsigned.
    let signed_at = checkpoints.last().unwrap()["checkpoint"]["at"].as_i64().unwrap();
    while chrono::Utc::now().timestamp_millis() <= signed_at + 1_100 {
        std::thread::sleep(Duration::from_millis(50));
    }
    gateway_write(&srv, &gw_id, 3);
    let third = export(&srv, &admin);
    std::fs::write(&file, &third).unwrap();
    assert!(verify(&file, &pk, &[]).status.success(), "untouched");
    let (entries, checkpoints) = split(&third);
    write_values(&file, &[entries.clone(), checkpoints[..checkpoints.len() - 1].to_vec()].concat());
    refused_for(&verify(&file, &pk, &[]), "more than its interval");

    // Cut at its end, entries and checkpoint alike: only an anchor kept elsewhere shows it. The
    // process log is one: every checkpoint's line is in it, once the log has been read that far.
    let last_signature = checkpoints.last().unwrap()["signature"].as_str().expect("a signature").to_string();
    wait_for("the last checkpoint's line in the process log", &srv, || srv.stderr().contains(&last_signature));
    let anchors = srv.dir().join("anchors.log");
    std::fs::write(&anchors, srv.stderr()).unwrap();
    std::fs::write(&file, &third).unwrap();
    let with_anchor = verify(&file, &["--public-key", &key, "--anchor", anchors.to_str().unwrap()], &[]);
    assert!(with_anchor.status.success(), "{}", describe_output(&with_anchor));
    let n = entries.len();
    write_values(&file, &[entries[..n - 1].to_vec(), checkpoints[..checkpoints.len() - 1].to_vec()].concat());
    assert!(verify(&file, &pk, &[]).status.success(), "without the anchor the cut does not show");
    refused_for(
        &verify(&file, &["--public-key", &key, "--anchor", anchors.to_str().unwrap()], &[]),
        "does not contain it",
    );
    // The last checkpoint is kept beside the master key, outside the store.
    let kept: Value =
        serde_json::from_str(&std::fs::read_to_string(srv.data_dir().join("audit-checkpoints.json")).unwrap())
            .expect("the kept checkpoints");
    let org = entries[0]["org_id"].as_str().unwrap();
    assert_eq!(kept[org], *checkpoints.last().unwrap(), "{kept}");
}

/// The deliveries of `webhook` whose event is `event`.
fn deliveries_of(srv: &TestServer, webhook: &str, event: &str) -> Vec<Value> {
    let r = srv.api("GET", &format!("/v1/webhooks/{webhook}/deliveries?limit=100"), Some(srv.admin_key()), None);
    let all = r.data()["deliveries"].as_array().cloned().unwrap_or_default();
    all.into_iter().filter(|d| d["event"] == event).collect()
}

fn tampered_total(srv: &TestServer) -> u64 {
    srv.metrics()
        .lines()
        .filter(|l| l.starts_with("toolgate_audit_tampered_total{"))
        .filter_map(|l| l.rsplit(' ').next()?.parse::<u64>().ok())
        .sum()
}

/// Waits up to 10 s for `done`.
fn wait_for(what: &str, srv: &TestServer, mut done: impl FnMut() -> bool) {
    let started = Instant::now();
    while !done() {
        assert!(started.elapsed() < Duration::from_secs(10), "{what}: {}", srv.logs_for_humans());
        std::thread::sleep(Duration::from_millis(100));
    }
}

#[test]
fn a_store_rewritten_under_a_running_instance_raises_audit_tampered_and_is_not_signed() {
    let mut srv = TestServer::start("audit:\n  checkpoint_interval_secs: 1\nwebhooks:\n  allowed_hosts: [127.0.0.1]\n");
    let admin = srv.admin_key().to_string();
    let hook = json!({ "url": "http://127.0.0.1:9/hook", "events": ["audit.checkpoint", "audit.tampered"] });
    let r = srv.api("POST", "/v1/webhooks", Some(&admin), Some(hook));
    assert_eq!(r.status, 201, "{r:?}");
    let webhook = r.data()["id"].as_str().unwrap().to_string();
    let gw = srv.api("POST", "/v1/gateways", Some(&admin), Some(json!({ "name": "watched" })));
    let gw_id = gw.data()["id"].as_str().expect("gateway id").to_string();
    let (entries, checkpoints) = split(&export(&srv, &admin));
    let signed = checkpoints.len();
    wait_for("an audit.checkpoint delivery", &srv, || !deliveries_of(&srv, &webhook, "audit.checkpoint").is_empty());
    assert_eq!(tampered_total(&srv), 0);

    // An attacker with the store edits the first entry and re-hashes the chain.
    let org = entries[0]["org_id"].as_str().unwrap().to_string();
    let mut forged = entries.clone();
    forged[0]["detail"]["status"] = json!(299);
    rehash(&mut forged);
    let db = rusqlite::Connection::open(srv.data_dir().join("toolgate.sqlite3")).expect("open the store");
    db.busy_timeout(Duration::from_secs(5)).unwrap();
    for e in &forged {
        db.execute(
            "UPDATE audit_entries SET body = ?1, hash = ?2 WHERE org_id = ?3 AND seq = ?4",
            rusqlite::params![e.to_string(), e["hash"].as_str().unwrap(), org, e["seq"].as_i64().unwrap()],
        )
        .unwrap();
    }
    // The next write moves the chain; the next checkpoint finds the break instead of signing.
    gateway_write(&srv, &gw_id, 1);
    wait_for("toolgate_audit_tampered_total", &srv, || tampered_total(&srv) >= 1);
    wait_for("an audit.tampered delivery", &srv, || !deliveries_of(&srv, &webhook, "audit.tampered").is_empty());
    assert!(srv.stderr().contains("no longer extends the last checkpoint"), "{}", srv.logs_for_humans());
    let (_, after) = split(&export(&srv, &admin));
    assert_eq!(after.len(), signed, "no checkpoint was signed over the rewrite");

    // A restart still knows what it signed (the file beside the master key).
    srv.restart();
    assert_eq!(tampered_total(&srv), 0);
    let (_, after) = split(&export(&srv, &admin));
    assert_eq!(after.len(), signed, "no checkpoint after a restart either");
    assert!(tampered_total(&srv) >= 1, "raised again after the restart: {}", srv.logs_for_humans());
}
