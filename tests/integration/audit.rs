//! The audit trail (issue 42, item 4): management writes become entries of a per-organisation
//! hash chain, paged by `GET /v1/audit` (scope `admin`, one organisation's), exported as JSON
//! lines and checked offline by the real binary's `toolgate audit verify`, which names the first
//! broken entry of an export edited, cut or reordered, and of an export of a store edited behind
//! toolgate's back. On Redis, two instances writing to one organisation make one chain.

use crate::common::*;
use serde_json::{json, Value};
use std::path::Path;
use std::process::{Command, Output};
use std::time::{Duration, Instant};

const KEY_VAR: &str = "TG_AUDIT_TEST_KEY";

/// `toolgate audit verify FILE [ARGS]` with `env`.
pub(crate) fn verify(file: &Path, args: &[&str], env: &[(&str, &str)]) -> Output {
    let mut cmd = Command::new(TestServer::binary());
    cmd.args(["audit", "verify"]).arg(file).args(args);
    for (k, v) in env {
        cmd.env(k, v);
    }
    cmd.output().expect("run toolgate audit verify")
}

/// Asserts `verify` refused the export and named `line` and `seq`.
fn refused(out: &Output, line: usize, seq: u64) {
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert_eq!(out.status.code(), Some(1), "{}", describe_output(out));
    assert!(stderr.contains(&format!("line {line} (seq {seq})")), "expected line {line} (seq {seq}): {stderr}");
}

/// The organisation's export, after asserting its content type.
pub(crate) fn export(srv: &TestServer, key: &str) -> String {
    let r = srv.api("GET", "/v1/audit/export", Some(key), None);
    assert_eq!(r.status, 200, "{r:?}");
    assert_eq!(r.header("content-type"), Some("application/x-ndjson"), "{r:?}");
    r.text
}

/// Waits up to 5 s for an export with a checkpoint signing seq `seq` or later.
fn export_signed_up_to(srv: &TestServer, key: &str, seq: u64) -> String {
    let started = Instant::now();
    loop {
        let text = export(srv, key);
        let signed = text
            .lines()
            .filter_map(|l| serde_json::from_str::<Value>(l).ok())
            .any(|v| v["checkpoint"]["seq"].as_u64().is_some_and(|s| s >= seq));
        if signed {
            return text;
        }
        assert!(started.elapsed() < Duration::from_secs(5), "no checkpoint signs seq {seq}: {text}");
        std::thread::sleep(Duration::from_millis(100));
    }
}

fn entries(srv: &TestServer, key: &str, query: &str) -> Vec<Value> {
    let r = srv.api("GET", &format!("/v1/audit{query}"), Some(key), None);
    r.data()["entries"].as_array().expect("entries").clone()
}

pub(crate) fn write_lines(path: &Path, lines: &[&str]) {
    std::fs::write(path, lines.join("\n") + "\n").expect("write the export");
}

#[test]
fn writes_are_entries_of_one_organisation_and_an_export_verifies_until_edited() {
    let (key_a, yaml_a) = declared_key("key_aa", "usr_aa", &["*"]);
    let (narrow, yaml_narrow) = declared_key("key_an", "usr_aa", &["gateways:*"]);
    let (key_b, yaml_b) = declared_key("key_ab", "usr_ab", &["*"]);
    let secret = "audit checkpoint key of this test, 40 b!";
    let srv = TestServer::start_opts(ServerOptions {
        extra_yaml: format!(
            "audit:\n  checkpoint_key_env: {KEY_VAR}\n  checkpoint_interval_secs: 1\n\
             organizations:\n  - {{ id: org_aa, name: AuditA, tier: enterprise }}\n  - {{ id: org_ab, name: AuditB, tier: enterprise }}\n\
             users:\n  - {{ id: usr_aa, email: a@audit.test, name: A, role: owner, organization: org_aa }}\n\
             \x20 - {{ id: usr_ab, email: b@audit.test, name: B, role: owner, organization: org_ab }}\n\
             api_keys:\n{yaml_a}{yaml_narrow}{yaml_b}"
        ),
        env: vec![(KEY_VAR.into(), secret.into())],
        ..Default::default()
    });

    let gw = srv.api("POST", "/v1/gateways", Some(&key_a), Some(json!({ "name": "audited" })));
    let gw_id = gw.data()["id"].as_str().expect("gateway id").to_string();
    srv.api("PATCH", &format!("/v1/gateways/{gw_id}"), Some(&key_a), Some(json!({ "name": "audited-2" }))).data();
    // Another organisation's write to it is a 404 and no entry.
    let foreign = srv.api("PATCH", &format!("/v1/gateways/{gw_id}"), Some(&key_b), Some(json!({ "name": "x" })));
    assert_eq!(foreign.status, 404, "{foreign:?}");
    // A refused write is no entry either.
    assert_eq!(srv.api("POST", "/v1/gateways", Some(&key_a), Some(json!({ "name": "" }))).status, 400);
    srv.api("DELETE", &format!("/v1/gateways/{gw_id}"), Some(&key_a), None).data();

    let all = entries(&srv, &key_a, "");
    let actions: Vec<&str> = all.iter().map(|e| e["action"].as_str().unwrap()).collect();
    assert_eq!(actions, ["gateway.create", "gateway.update", "gateway.delete"], "{all:#?}");
    for (i, e) in all.iter().enumerate() {
        assert_eq!(e["seq"], json!(i + 1), "{e}");
        assert_eq!(e["org_id"], "org_aa");
        assert_eq!(e["actor"], json!({ "kind": "api_key", "id": "key_aa" }), "{e}");
        assert_eq!(e["target"], json!({ "kind": "gateway", "id": gw_id }), "{e}");
        assert_eq!(e["hash"].as_str().map(str::len), Some(64), "{e}");
    }
    let hash = |e: &Value, f: &str| e[f].as_str().map(str::to_string);
    assert!(hash(&all[0], "before_hash").is_none() && hash(&all[0], "after_hash").is_some(), "{}", all[0]);
    assert_eq!(hash(&all[1], "before_hash"), hash(&all[0], "after_hash"), "the update starts from the created record");
    assert_ne!(hash(&all[1], "before_hash"), hash(&all[1], "after_hash"));
    assert!(hash(&all[2], "before_hash").is_some() && hash(&all[2], "after_hash").is_none(), "{}", all[2]);
    assert_eq!(all[2]["detail"]["mfa"], "always", "a protected action says so: {}", all[2]);
    assert_eq!(all[1]["prev_hash"], all[0]["hash"]);

    // Pages and filters.
    let page = srv.api("GET", "/v1/audit?after_seq=1&limit=1", Some(&key_a), None);
    assert_eq!(page.data()["entries"][0]["seq"], 2, "{page:?}");
    assert_eq!(page.data()["pagination"]["next_after_seq"], 2, "{page:?}");
    assert_eq!(entries(&srv, &key_a, "?action=gateway.update").len(), 1);
    assert_eq!(entries(&srv, &key_a, "?actor=key_ab").len(), 0);
    assert_eq!(srv.api("GET", "/v1/audit?after_seq=-1", Some(&key_a), None).status, 400);
    // Another organisation sees none of it; a key without `admin` sees nothing.
    assert!(entries(&srv, &key_b, "").is_empty());
    assert!(export(&srv, &key_b).trim().is_empty());
    let r = srv.api("GET", "/v1/audit", Some(&narrow), None);
    assert_eq!((r.status, r.error_code()), (403, "INSUFFICIENT_SCOPE"), "{r:?}");
    assert_eq!(srv.api("GET", "/v1/audit/export", Some(&narrow), None).status, 403);

    // The export verifies with the key, and fails edited, cut or reordered.
    let text = export_signed_up_to(&srv, &key_a, 3);
    let file = srv.dir().join("audit.jsonl");
    std::fs::write(&file, &text).unwrap();
    let key_env = [(KEY_VAR, secret)];
    let ok = verify(&file, &["--key-env", KEY_VAR], &key_env);
    assert!(ok.status.success(), "{}", describe_output(&ok));
    assert!(String::from_utf8_lossy(&ok.stdout).contains("3 entries"), "{}", describe_output(&ok));
    let wrong = verify(&file, &["--key-env", "TG_WRONG"], &[("TG_WRONG", "another key of forty bytes, not the one")]);
    assert_eq!(wrong.status.code(), Some(1), "{}", describe_output(&wrong));
    assert!(String::from_utf8_lossy(&wrong.stderr).contains("MAC"), "{}", describe_output(&wrong));

    let lines: Vec<&str> = text.lines().collect();
    let edited_line = lines[1].replace("gateway.update", "gateway.read");
    let mut edited = lines.clone();
    edited[1] = &edited_line;
    write_lines(&file, &edited);
    refused(&verify(&file, &[], &[]), 2, 2);
    let mut deleted = lines.clone();
    deleted.remove(1);
    write_lines(&file, &deleted);
    refused(&verify(&file, &[], &[]), 2, 3);
    let mut swapped = lines.clone();
    swapped.swap(1, 2);
    write_lines(&file, &swapped);
    refused(&verify(&file, &[], &[]), 2, 3);

    // An entry edited, then one deleted, in the store itself: a fresh export names it.
    let db = rusqlite::Connection::open(srv.data_dir().join("toolgate.sqlite3")).expect("open the store");
    db.busy_timeout(Duration::from_secs(5)).unwrap();
    let original: String = db
        .query_row("SELECT body FROM audit_entries WHERE org_id = 'org_aa' AND seq = 2", [], |r| r.get(0))
        .expect("entry 2");
    db.execute(
        "UPDATE audit_entries SET body = replace(body, 'gateway.update', 'gateway.read') WHERE org_id = 'org_aa' AND seq = 2",
        [],
    )
    .unwrap();
    std::fs::write(&file, export(&srv, &key_a)).unwrap();
    refused(&verify(&file, &[], &[]), 2, 2);
    db.execute("UPDATE audit_entries SET body = ?1 WHERE org_id = 'org_aa' AND seq = 2", [&original]).unwrap();
    std::fs::write(&file, export(&srv, &key_a)).unwrap();
    let restored = verify(&file, &["--key-env", KEY_VAR], &key_env);
    assert!(restored.status.success(), "restored: {}", describe_output(&restored));
    db.execute("DELETE FROM audit_entries WHERE org_id = 'org_aa' AND seq = 2", []).unwrap();
    std::fs::write(&file, export(&srv, &key_a)).unwrap();
    refused(&verify(&file, &[], &[]), 2, 3);
}

#[test]
fn two_instances_on_redis_write_one_chain_in_redis_order() {
    let redis = spawn_redis();
    let prefix = format!("tgau{}", random_alnum(6).to_lowercase());
    let (key, key_yaml) = declared_key("key_ar", "usr_ar", &["*"]);
    let yaml = format!(
        "environment: development\nserver:\n  listen: 127.0.0.1:0\n  metrics_listen: 127.0.0.2:0\n  \
         public_url: http://localhost:8080\nstorage:\n  backend: redis\n  url: {}\n  key_prefix: {prefix}\n\
         audit:\n  checkpoint_interval_secs: 1\n\
         rate_limits:\n  unauthenticated: {{ requests_per_hour: 100000, requests_per_minute: 100000, burst: 10000 }}\n\
         organizations:\n  - {{ id: org_ar, name: AuditRedis, tier: enterprise }}\n\
         users:\n  - {{ id: usr_ar, email: ar@audit.test, name: ar, role: owner, organization: org_ar }}\n\
         api_keys:\n{key_yaml}",
        redis_url(&redis)
    );
    let master = "ab".repeat(32);
    let start = || {
        TestServer::start_opts(ServerOptions {
            full_config: Some(yaml.clone()),
            env: vec![("TOOLGATE_SECRET_KEY".into(), master.clone())],
            ..Default::default()
        })
    };
    let (a, b) = (start(), start());
    let gw = a.api("POST", "/v1/gateways", Some(&key), Some(json!({ "name": "shared" })));
    let gw_id = gw.data()["id"].as_str().unwrap().to_string();
    // Both instances write to the organisation at once.
    const EACH: usize = 12;
    std::thread::scope(|s| {
        for (n, srv) in [&a, &b].into_iter().enumerate() {
            let (key, gw_id) = (&key, &gw_id);
            s.spawn(move || {
                for i in 0..EACH {
                    let body = json!({ "description": format!("instance {n} write {i}") });
                    let r = srv.api("PATCH", &format!("/v1/gateways/{gw_id}"), Some(key), Some(body));
                    assert_eq!(r.status, 200, "{r:?}");
                }
            });
        }
    });
    let total = (1 + 2 * EACH) as u64;
    let text = export_signed_up_to(&a, &key, total);
    assert_eq!(text.lines().filter(|l| !l.contains("\"checkpoint\"")).count() as u64, total, "{text}");
    let from_b = export(&b, &key);
    let entries_of =
        |t: &str| t.lines().filter(|l| !l.contains("\"checkpoint\"")).map(str::to_string).collect::<Vec<_>>();
    assert_eq!(entries_of(&text), entries_of(&from_b), "both instances export the one chain");
    let file = a.dir().join("audit.jsonl");
    std::fs::write(&file, &text).unwrap();
    let env = [("TOOLGATE_SECRET_KEY", master.as_str())];
    let ok = verify(&file, &["--master-key-env", "TOOLGATE_SECRET_KEY"], &env);
    assert!(ok.status.success(), "{}", describe_output(&ok));
    assert!(String::from_utf8_lossy(&ok.stdout).contains(&format!("{total} entries")), "{}", describe_output(&ok));

    // An entry removed from the list in Redis: a fresh export names the gap.
    let client = redis::Client::open(redis_url(&redis)).unwrap();
    let mut conn = client.get_connection().unwrap();
    let list = format!("{prefix}:{{org_ar}}:audit");
    let fifth: String = redis::cmd("LINDEX").arg(&list).arg(4).query(&mut conn).unwrap();
    let removed: i64 = redis::cmd("LREM").arg(&list).arg(1).arg(&fifth).query(&mut conn).unwrap();
    assert_eq!(removed, 1);
    std::fs::write(&file, export(&b, &key)).unwrap();
    refused(&verify(&file, &[], &[]), 5, 6);
}
