//! Instances of different versions fail closed (issue 54, item 10), against the real binary: a
//! gateway record written by a newer toolgate (a higher `schema_version`, or a member this
//! build does not know) is neither served nor changed, the refusals say why and are counted,
//! the instance still starts and serves the others, and the stored bytes stay as they were.

use crate::common::{self, err, ok, TestServer};
use serde_json::{json, Value};
use std::time::Duration;

/// The stored body of gateway `id` (the embedded store: SQLite, one row per record).
pub(crate) fn stored(srv: &TestServer, id: &str) -> String {
    let db = rusqlite::Connection::open(srv.data_dir().join("toolgate.sqlite3")).expect("open the store");
    db.busy_timeout(Duration::from_secs(5)).unwrap();
    db.query_row("SELECT body FROM records WHERE kind = 'gateway' AND id = ?1", [id], |r| r.get(0)).expect(id)
}

/// Rewrites gateway `id`'s stored body as `edit` makes it.
pub(crate) fn rewrite(srv: &TestServer, id: &str, edit: impl FnOnce(&mut Value)) -> String {
    let mut body: Value = serde_json::from_str(&stored(srv, id)).unwrap();
    edit(&mut body);
    let text = body.to_string();
    let db = rusqlite::Connection::open(srv.data_dir().join("toolgate.sqlite3")).expect("open the store");
    db.busy_timeout(Duration::from_secs(5)).unwrap();
    db.execute("UPDATE records SET body = ?1 WHERE kind = 'gateway' AND id = ?2", [&text, id]).unwrap();
    text
}

/// `initialize` at gateway `gw`: (HTTP status, body).
fn initialize(srv: &TestServer, gw: &str, key: &str) -> (u16, Value) {
    let r = common::mcp::initialize_raw(srv, gw, key, "v");
    (r.status, serde_json::from_str(&r.body).unwrap_or_default())
}

/// The value of the series `series` (its whole name with labels), if scraped.
fn metric(srv: &TestServer, series: &str) -> Option<f64> {
    srv.metrics().lines().find_map(|l| l.strip_prefix(series)?.trim().parse().ok())
}

#[test]
fn a_gateway_written_by_a_newer_toolgate_is_neither_served_nor_written_back() {
    let mut srv = TestServer::start("");
    let admin = srv.admin_key().to_string();
    let make = |name: &str| {
        let g =
            ok(&srv.api("POST", "/v1/gateways", Some(&admin), Some(json!({"name": name, "servers": ["time"]}))), 201);
        g["id"].as_str().unwrap().to_string()
    };
    let (bumped, unknown, plain) = (make("bumped"), make("unknown"), make("plain"));
    for gw in [&bumped, &unknown, &plain] {
        assert_eq!(initialize(&srv, gw, &admin).0, 200, "served before");
    }
    // A newer toolgate rewrote two of them: one says it is version 2, the other (at version 1)
    // holds a guard this build does not know.
    srv.sigterm();
    let bumped_body = rewrite(&srv, &bumped, |b| b["schema_version"] = json!(2));
    let unknown_body = rewrite(&srv, &unknown, |b| b["configuration"]["guard_from_the_future"] = json!("strict"));
    srv.restart();

    for (gw, body) in [(&bumped, &bumped_body), (&unknown, &unknown_body)] {
        let (status, answer) = initialize(&srv, gw, &admin);
        assert_eq!(status, 503, "{answer}");
        let message = answer["error"]["message"].as_str().unwrap_or_else(|| panic!("{answer}"));
        assert!(message.contains("written by a newer toolgate"), "{message}");
        assert_eq!(answer["error"]["data"]["code"], "UNAVAILABLE", "{answer}");
        // The management API neither shows nor changes it.
        let path = format!("/v1/gateways/{gw}");
        let e = err(&srv.api("GET", &path, Some(&admin), None), 503, "UNAVAILABLE");
        assert!(e["message"].as_str().unwrap().contains("written by a newer toolgate"), "{e}");
        let patch = json!({"configuration": {"tool_policy": "off"}, "rules": []});
        err(&srv.api("PATCH", &path, Some(&admin), Some(patch)), 503, "UNAVAILABLE");
        err(&srv.api("DELETE", &path, Some(&admin), None), 503, "UNAVAILABLE");
        assert_eq!(&stored(&srv, gw), body, "never written back");
    }
    assert!(
        srv.all_logs().contains("written by a newer toolgate"),
        "the instance says what it holds apart:\n{}",
        srv.logs_for_humans()
    );
    // Counted: held apart, and each refusal.
    assert_eq!(metric(&srv, "toolgate_newer_records{kind=\"gateway\"}"), Some(2.0));
    let refused = metric(&srv, "toolgate_newer_record_refusals_total{kind=\"gateway\"}").unwrap_or_default();
    assert!(refused >= 8.0, "{refused}");
    // The others are served and changed as before; this build writes its version.
    assert_eq!(initialize(&srv, &plain, &admin).0, 200);
    ok(&srv.api("PATCH", &format!("/v1/gateways/{plain}"), Some(&admin), Some(json!({"name": "renamed"}))), 200);
    let as_written = serde_json::from_str::<Value>(&stored(&srv, &plain)).unwrap();
    assert_eq!(as_written["schema_version"], 1, "{as_written}");

    // Still untouched after the background work of a while and a clean stop.
    std::thread::sleep(Duration::from_secs(2));
    srv.sigterm();
    assert_eq!(stored(&srv, &bumped), bumped_body);
    assert_eq!(stored(&srv, &unknown), unknown_body);
    // Once an instance reads it again (here: the record back at this version), it is served.
    rewrite(&srv, &bumped, |b| b["schema_version"] = json!(1));
    srv.restart();
    assert_eq!(initialize(&srv, &bumped, &admin).0, 200);
    common::wait_until("the gauge follows", Duration::from_secs(5), || {
        metric(&srv, "toolgate_newer_records{kind=\"gateway\"}") == Some(1.0)
    });
}
