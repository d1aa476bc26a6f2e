//! `GET /v1/logs`: the request log of the caller's organisation, newest first, as the spec's Log
//! entry, with its filters validated (a bad value is a 400 naming the field) and organisations
//! kept apart. Entries are made by real `tools/call`s through a gateway to the built-in `time` app.

use crate::common::mcp::Mcp;
use crate::common::{declared_key, err, TestServer};
use serde_json::{json, Value};

/// Initializes an MCP session on `gw` with `key` and makes one `tools/call` per `timezone`.
pub(crate) fn call_time(srv: &TestServer, gw: &str, key: &str, timezones: &[&str]) {
    let session = Mcp::open(srv, gw, key);
    for (i, tz) in timezones.iter().enumerate() {
        // HTTP 200 with the caller's id (`Mcp::call` asserts both).
        let body = session.call(i as u64 + 1, "get_current_time", json!({"timezone": tz, "format": "YYYY"}));
        assert!(body["result"].is_object(), "a tool result (isError or not): {body}");
    }
}

fn logs(srv: &TestServer, key: &str, query: &str) -> Value {
    let r = srv.api("GET", &format!("/v1/logs{query}"), Some(key), None);
    assert_eq!(r.status, 200, "{query}: {r:?}");
    r.data().clone()
}

fn refused_field(srv: &TestServer, key: &str, query: &str) -> String {
    let r = srv.api("GET", &format!("/v1/logs{query}"), Some(key), None);
    assert_eq!((r.status, r.error_code()), (400, "VALIDATION_ERROR"), "{query}: {r:?}");
    r.json["error"]["details"]["field"].as_str().unwrap_or_default().to_string()
}

#[test]
fn the_log_lists_calls_newest_first_filters_them_and_keeps_organisations_apart() {
    let (other_key, other_yaml) = declared_key("key_other", "usr_other", &["*"]);
    let srv = TestServer::start(&format!(
        "organizations:\n  - {{ id: org_other, name: Other, tier: free }}\n\
         users:\n  - {{ id: usr_other, email: o@other.test, name: O, role: owner, organization: org_other }}\n\
         api_keys:\n{other_yaml}"
    ));
    let admin = srv.admin_key().to_string();
    let g = srv.api("POST", "/v1/gateways", Some(&admin), Some(json!({"name": "logged", "servers": ["time"]})));
    assert_eq!(g.status, 201, "{g:?}");
    let (gw, gw_key) =
        (g.data()["id"].as_str().unwrap().to_string(), g.data()["api_key"].as_str().unwrap().to_string());
    assert_eq!(logs(&srv, &admin, "")["logs"], json!([]), "nothing called yet");

    // A success, then a tool error (an unknown zone is an `isError` result).
    call_time(&srv, &gw, &gw_key, &["UTC", "Not/AZone"]);
    let all = logs(&srv, &admin, "");
    let entries = all["logs"].as_array().unwrap();
    assert_eq!(entries.len(), 2, "{all}");
    assert_eq!(all["pagination"]["total"], 2, "{all}");
    let (newest, oldest) = (&entries[0], &entries[1]);
    assert_eq!(newest["status"], "error", "newest first: {all}");
    assert_eq!(oldest["status"], "success", "{all}");
    for e in entries {
        assert!(e["id"].as_str().is_some_and(|id| !id.is_empty()), "{e}");
        let ts = e["timestamp"].as_str().unwrap();
        assert!(chrono::DateTime::parse_from_rfc3339(ts).is_ok() && ts.contains('.'), "ISO 8601 with ms: {e}");
        assert_eq!(
            (&e["gateway_id"], &e["app"], &e["function"]),
            (&json!(gw), &json!("time"), &json!("get_current_time"))
        );
        assert!(e["duration"].is_u64(), "{e}");
        assert_eq!(e["response"]["status"], 200, "{e}");
    }
    assert_eq!(oldest["request"]["params"], json!({"timezone": "UTC", "format": "YYYY"}), "{oldest}");
    assert_eq!(newest["request"]["params"], json!({"timezone": "Not/AZone", "format": "YYYY"}), "{newest}");
    assert!(oldest["timestamp"].as_str() <= newest["timestamp"].as_str());

    // Filters.
    let only = |q: &str| logs(&srv, &admin, q)["logs"].as_array().unwrap().len();
    assert_eq!(only("?status=error"), 1);
    assert_eq!(only("?status=success"), 1);
    assert_eq!(only("?app_id=time"), 2);
    assert_eq!(only("?app_id=other"), 0);
    assert_eq!(only(&format!("?gateway_id={gw}")), 2);
    assert_eq!(only("?gateway_id=gw_elsewhere"), 0);
    assert_eq!(only("?start_date=2999-01-01"), 0, "a range in the future");
    assert_eq!(only("?start_date=2000-01-01T00:00:00Z&end_date=2999-12-31"), 2);
    // Pages of one, newest first.
    let page2 = logs(&srv, &admin, "?limit=1&page=2");
    assert_eq!(page2["logs"][0]["id"], oldest["id"], "{page2}");
    assert_eq!(
        (page2["pagination"]["pages"].clone(), page2["pagination"]["has_next"].clone()),
        (json!(2), json!(false))
    );

    // Bad filters name their field.
    assert_eq!(refused_field(&srv, &admin, "?status=failed"), "status");
    assert_eq!(refused_field(&srv, &admin, "?start_date=yesterday"), "start_date");
    assert_eq!(refused_field(&srv, &admin, "?end_date=2026-13-40"), "end_date");
    assert_eq!(refused_field(&srv, &admin, "?start_date=2026-02-01&end_date=2026-01-01"), "end_date");
    assert_eq!(refused_field(&srv, &admin, "?limit=101"), "limit");
    assert_eq!(refused_field(&srv, &admin, "?page=0"), "page");

    // Analytics of the same two calls.
    let analytics = |key: &str, q: &str| {
        let r = srv.api("GET", &format!("/v1/logs/analytics{q}"), Some(key), None);
        assert_eq!(r.status, 200, "{q}: {r:?}");
        r.data().clone()
    };
    let a = analytics(&admin, "?period=1h");
    assert_eq!(a["period"], "1h");
    assert_eq!(
        (&a["summary"]["total_requests"], &a["summary"]["error_count"], &a["summary"]["success_rate"]),
        (&json!(2), &json!(1), &json!(0.5)),
        "{a}"
    );
    let series = a["time_series"].as_array().unwrap();
    assert!((60..=61).contains(&series.len()), "one point a minute over the hour: {}", series.len());
    assert_eq!(series.iter().map(|p| p["requests"].as_u64().unwrap()).sum::<u64>(), 2, "{a}");
    assert_eq!(
        series.last().unwrap()["requests"].as_u64().unwrap() + series[series.len() - 2]["requests"].as_u64().unwrap(),
        2,
        "the calls are in the latest buckets: {a}"
    );
    assert_eq!(
        a["top_functions"],
        json!([{"function": "time.get_current_time", "count": 2, "errors": 1,
                "avg_duration": a["top_functions"][0]["avg_duration"], "error_rate": 0.5}]),
        "{a}"
    );
    assert!(a.get("groups").is_none(), "no group_by, no groups: {a}");
    let by_status = analytics(&admin, &format!("?gateway_id={gw}&group_by=status"));
    let keys: Vec<(&str, u64)> = by_status["groups"]
        .as_array()
        .unwrap()
        .iter()
        .map(|g| (g["key"].as_str().unwrap(), g["count"].as_u64().unwrap()))
        .collect();
    assert_eq!(keys, [("error", 1), ("success", 1)], "{by_status}");
    assert_eq!(by_status["time_series"].as_array().unwrap().len(), 25, "24h: hourly points: {by_status}");
    assert_eq!(analytics(&admin, "?period=30d&gateway_id=gw_elsewhere")["summary"]["total_requests"], 0);
    for (q, field) in [("?period=2h", "period"), ("?group_by=day", "group_by")] {
        let r = srv.api("GET", &format!("/v1/logs/analytics{q}"), Some(&admin), None);
        assert_eq!((r.status, r.json["error"]["details"]["field"].as_str()), (400, Some(field)), "{r:?}");
    }
    assert_eq!(analytics(&other_key, "?period=30d")["summary"]["total_requests"], 0, "another organisation's");

    // Gateway and app metrics of the same calls: counts and recorded-duration percentiles.
    let metrics = |key: &str, path: &str| srv.api("GET", &format!("/v1/metrics/{path}"), Some(key), None);
    let m = metrics(&admin, &format!("gateway/{gw}?period=1h"));
    assert_eq!(m.status, 200, "{m:?}");
    let d = m.data();
    assert_eq!((&d["gateway_id"], &d["period"], &d["resolution"]), (&json!(gw), &json!("1h"), &json!("1m")), "{d}");
    assert_eq!((&d["metrics"]["requests"], &d["metrics"]["errors"]), (&json!(2), &json!(1)), "{d}");
    // Milliseconds with microsecond precision, from the recorded durations' histogram.
    let ms = |f: &str| d["metrics"][f].as_f64().unwrap_or_else(|| panic!("{f}: {d}"));
    assert!(ms("p50_latency") > 0.0, "a call takes some time: {d}");
    assert!(ms("p50_latency") <= ms("p95_latency") && ms("p95_latency") <= ms("p99_latency"), "{d}");
    assert!(ms("avg_latency") > 0.0 && ms("p99_latency") < 5_000.0, "{d}");
    let points = d["time_series"].as_array().unwrap();
    assert!((60..=61).contains(&points.len()), "{}", points.len());
    assert_eq!(points.iter().map(|p| p["requests"].as_u64().unwrap()).sum::<u64>(), 2);
    assert_eq!(metrics(&admin, &format!("gateway/{gw}?period=24h&resolution=5m")).status, 200, "288 points");
    for q in ["period=7d&resolution=1m", "period=7d&resolution=5m", "period=24h&resolution=1m"] {
        let r = metrics(&admin, &format!("gateway/{gw}?{q}"));
        assert_eq!((r.status, r.json["error"]["details"]["field"].as_str()), (400, Some("resolution")), "{q}: {r:?}");
    }
    let r = metrics(&admin, &format!("gateway/{gw}?period=2d"));
    assert_eq!((r.status, r.json["error"]["details"]["field"].as_str()), (400, Some("period")), "{r:?}");
    let app = metrics(&admin, "app/time?period=7d");
    assert_eq!((app.status, &app.json["data"]["metrics"]["requests"]), (200, &json!(2)), "{app:?}");
    assert_eq!(app.json["data"]["time_series"].as_array().unwrap().len(), 169, "7d: hourly points");
    assert_eq!(metrics(&admin, "app/no_such_app").status, 404);
    // Another organisation: the gateway is not found; the app has none of these calls.
    assert_eq!(metrics(&other_key, &format!("gateway/{gw}")).status, 404);
    assert_eq!(metrics(&other_key, "app/time").json["data"]["metrics"]["requests"], 0);

    // Another organisation sees none of it, even naming the gateway.
    assert_eq!(logs(&srv, &other_key, "")["logs"], json!([]));
    assert_eq!(logs(&srv, &other_key, &format!("?gateway_id={gw}"))["logs"], json!([]));
    // The gateway's own key is no management credential for the log.
    err(&srv.api("GET", "/v1/logs", Some(&gw_key), None), 401, "UNAUTHORIZED");
}
