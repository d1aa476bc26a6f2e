//! Nothing acknowledged is lost: resources answered 2xx survive `kill -9` and a restart on the
//! same data directory; the bootstrap admin key still works; and a fresh store started without
//! `TOOLGATE_ADMIN_KEY` prints an owner key on stderr once, never on later starts.

use crate::common;

use common::*;
use serde_json::json;
use totp_rs::{Algorithm, Secret, TOTP};

/// `requests_today` of key `id` as the embedded store holds it (its usage record, written in
/// the background), 0 while there is none.
fn stored_requests_today(srv: &TestServer, id: &str) -> u64 {
    let db = rusqlite::Connection::open_with_flags(
        srv.data_dir().join("toolgate.sqlite3"),
        rusqlite::OpenFlags::SQLITE_OPEN_READ_ONLY,
    )
    .expect("open the store");
    db.busy_timeout(std::time::Duration::from_secs(5)).unwrap();
    let body: Option<String> = db
        .query_row("SELECT body FROM records WHERE kind = 'key_usage' AND id LIKE ?1", [format!("%{id}%")], |r| {
            r.get(0)
        })
        .ok();
    body.and_then(|b| serde_json::from_str::<serde_json::Value>(&b).ok())
        .and_then(|v| v["requests_today"].as_u64())
        .unwrap_or(0)
}

#[test]
fn acknowledged_writes_survive_kill_9() {
    let (alice, ya) = declared_key("key_alice", "usr_alice", &["*"]);
    let (mfa_user_key, ym) = declared_key("key_mfa", "usr_mfa", &["*"]);
    let mut srv = TestServer::start(&format!(
        "  - id: crm\n    name: CRM\n    category: sales\n    auth_types: [api_key]\n    url: http://127.0.0.1:9/mcp\n\
         organizations:\n  - {{ id: org_d, name: Durable, tier: professional }}\n\
         users:\n  - {{ id: usr_alice, email: a@d.test, name: Alice, role: owner, organization: org_d }}\n\
         \x20 - {{ id: usr_mfa, email: m@d.test, name: Mfa, role: owner, organization: org_d }}\n\
         api_keys:\n{ya}{ym}"
    ));
    let a = alice.as_str();

    // Gateways: created, patched, one deleted.
    let g1 = ok(&srv.api("POST", "/v1/gateways", Some(a), Some(json!({ "name": "keep", "servers": ["time"] }))), 201);
    let g1_id = g1["id"].as_str().unwrap().to_string();
    let g1_key = g1["api_key"].as_str().unwrap().to_string();
    ok(
        &srv.api(
            "PATCH",
            &format!("/v1/gateways/{g1_id}"),
            Some(a),
            Some(json!({ "description": "patched", "configuration": { "cache_ttl": 9 } })),
        ),
        200,
    );
    let g2 = ok(&srv.api("POST", "/v1/gateways", Some(a), Some(json!({ "name": "gone" }))), 201);
    let g2_id = g2["id"].as_str().unwrap().to_string();
    ok_message(&srv.api("DELETE", &format!("/v1/gateways/{g2_id}"), Some(a), None));
    let admin_gw = ok(&srv.api("POST", "/v1/gateways", Some(srv.admin_key()), Some(json!({ "name": "admins" }))), 201);

    // Keys: one created, one created then revoked, one rotated without grace.
    let k = ok(
        &srv.api("POST", "/v1/api-keys", Some(a), Some(json!({ "name": "kept", "scopes": ["gateways:read"] }))),
        201,
    );
    let kept = k["key"].as_str().unwrap().to_string();
    let r = ok(
        &srv.api("POST", "/v1/api-keys", Some(a), Some(json!({ "name": "revoked", "scopes": ["gateways:read"] }))),
        201,
    );
    let revoked = r["key"].as_str().unwrap().to_string();
    ok_message(&srv.api("DELETE", &format!("/v1/api-keys/{}", r["id"].as_str().unwrap()), Some(a), None));
    let o = ok(&srv.api("POST", "/v1/api-keys", Some(a), Some(json!({ "name": "rot", "scopes": ["apps:read"] }))), 201);
    let rot = ok(
        &srv.api(
            "POST",
            &format!("/v1/api-keys/{}/rotate", o["id"].as_str().unwrap()),
            Some(a),
            Some(json!({ "grace_period_hours": 0 })),
        ),
        201,
    );
    let (old_rot, new_rot) = (o["key"].as_str().unwrap().to_string(), rot["key"].as_str().unwrap().to_string());

    // Service account and its key; connection; user; allowlist entry; MFA.
    let sa = ok(
        &srv.api(
            "POST",
            "/v1/service-accounts",
            Some(a),
            Some(json!({ "name": "bot", "scopes": ["gateways:read"], "rate_limit_multiplier": 4 })),
        ),
        201,
    );
    let sak = ok(
        &srv.api(
            "POST",
            &format!("/v1/service-accounts/{}/keys", sa["id"].as_str().unwrap()),
            Some(a),
            Some(json!({ "name": "bot-1", "expires_in_days": 7 })),
        ),
        201,
    );
    let sa_key = sak["key"].as_str().unwrap().to_string();
    ok(
        &srv.api(
            "POST",
            "/v1/apps/crm/connect",
            Some(a),
            Some(json!({ "auth_type": "api_key", "credentials": { "api_key": "crm-secret-123456" } })),
        ),
        200,
    );
    ok(
        &srv.api(
            "PATCH",
            "/v1/user",
            Some(a),
            Some(json!({ "name": "Alice Durable", "notification_preferences": { "slack": true } })),
        ),
        200,
    );
    ok(
        &srv.api(
            "POST",
            "/v1/account/whitelist",
            Some(a),
            Some(json!({ "ip": "192.0.2.44", "rate_limit_multiplier": 3, "description": "office" })),
        ),
        201,
    );
    let e = ok(&srv.api("POST", "/v1/auth/mfa/enroll", Some(&mfa_user_key), None), 200);
    let t = TOTP::new_unchecked(
        Algorithm::SHA1,
        6,
        1,
        30,
        Secret::Encoded(e["secret"].as_str().unwrap().into()).to_bytes().unwrap(),
        None,
        String::new(),
    );
    let code = t.generate(unix_now());
    ok(&srv.api("POST", "/v1/auth/mfa/activate", Some(&mfa_user_key), Some(json!({ "code": code }))), 200);
    let mfa_gw =
        ok(&srv.api("POST", "/v1/gateways", Some(&mfa_user_key), Some(json!({ "name": "mfa-protected" }))), 201);

    // Usage is flushed in the background every 500 ms, and nothing outside the store shows
    // that a flush has happened: the kill comes once the store holds the three uses (the
    // writer's own progress, read from the store; usage this old survives a kill -9).
    for _ in 0..3 {
        ok(&srv.api("GET", "/v1/gateways", Some(&kept), None), 200);
    }
    let kept_id = k["id"].as_str().unwrap().to_string();
    wait_until("the three uses reach the store", std::time::Duration::from_secs(10), || {
        stored_requests_today(&srv, &kept_id) >= 3
    });
    // The last write is killed right after its 2xx: no time for any background flush.
    let last = ok(&srv.api("POST", "/v1/gateways", Some(a), Some(json!({ "name": "last-word" }))), 201);

    srv.kill9();
    srv.restart();

    let g = ok(&srv.api("GET", &format!("/v1/gateways/{g1_id}"), Some(a), None), 200);
    assert_eq!(g["name"], "keep");
    assert_eq!(g["description"], "patched");
    assert_eq!(g["configuration"]["cache_ttl"], 9);
    assert_eq!(g["servers"][0]["id"], "time");
    err(&srv.api("GET", &format!("/v1/gateways/{g2_id}"), Some(a), None), 404, "NOT_FOUND");
    let list = ok(&srv.api("GET", "/v1/gateways", Some(a), None), 200);
    assert_eq!(list["pagination"]["total"], 3, "{list}");
    ok(&srv.api("GET", &format!("/v1/gateways/{}", last["id"].as_str().unwrap()), Some(a), None), 200);
    // Bootstrap admin key, and its gateway.
    ok(
        &srv.api("GET", &format!("/v1/gateways/{}", admin_gw["id"].as_str().unwrap()), Some(srv.admin_key()), None),
        200,
    );
    assert_eq!(ok(&srv.api("GET", "/v1/user", Some(srv.admin_key()), None), 200)["role"], "Owner");
    // Keys.
    ok(&srv.api("GET", "/v1/gateways", Some(&kept), None), 200);
    err(&srv.api("GET", "/v1/gateways", Some(&revoked), None), 401, "UNAUTHORIZED");
    err(&srv.api("GET", "/v1/apps", Some(&old_rot), None), 401, "UNAUTHORIZED");
    ok(&srv.api("GET", "/v1/apps", Some(&new_rot), None), 200);
    let u = ok(&srv.api("GET", &format!("/v1/api-keys/{}/usage", k["id"].as_str().unwrap()), Some(a), None), 200);
    assert!(u["requests_today"].as_u64().is_some_and(|n| n >= 3), "usage after restart: {u}");
    // The gateway access key still opens its gateway.
    let r = common::mcp::initialize_raw(&srv, &g1_id, &g1_key, "t");
    assert_eq!(r.status, 200, "gateway key after restart: {}", r.body);
    // Service account key with its multiplier.
    let d = ok(&srv.api("GET", "/v1/auth/debug", Some(&sa_key), None), 200);
    assert_eq!(d["credential_type"], "service_account");
    assert_eq!(d["rate_limit_multiplier"], 4.0);
    // Connection, user, allowlist entry.
    let app = ok(&srv.api("GET", "/v1/apps/crm", Some(a), None), 200);
    assert_eq!(app["status"], "connected", "{app}");
    assert_eq!(app["current_auth"], "api_key");
    let user = ok(&srv.api("GET", "/v1/user", Some(a), None), 200);
    assert_eq!(user["name"], "Alice Durable");
    assert_eq!(user["notification_preferences"]["slack"], true);
    let sec = ok(&srv.api("PATCH", "/v1/account/security", Some(a), Some(json!({}))), 200);
    assert_eq!(sec["whitelist"][0]["ip"], "192.0.2.44", "{sec}");
    assert_eq!(sec["whitelist"][0]["rate_limit_multiplier"], 3.0, "{sec}");
    // MFA is still on for its user.
    let r = srv.api("DELETE", &format!("/v1/gateways/{}", mfa_gw["id"].as_str().unwrap()), Some(&mfa_user_key), None);
    err(&r, 403, "MFA_REQUIRED");
    // And the crm credential is still not in clear anywhere.
    assert!(!srv.all_logs().contains("crm-secret-123456"));
}

/// The first `ag_` key printed in `text`.
fn printed_key(text: &str) -> Option<String> {
    let at = text.find("ag_")?;
    Some(text[at..].chars().take_while(|c| c.is_ascii_alphanumeric() || *c == '_').collect())
}

#[test]
fn first_start_without_admin_key_prints_one_once() {
    let mut srv = TestServer::start_opts(ServerOptions { no_admin_key: true, ..Default::default() });
    let stderr = srv.stderr();
    let key = printed_key(&stderr).unwrap_or_else(|| panic!("no ag_ key on the first start's stderr:\n{stderr}"));
    assert!(key.len() >= 35, "{key}");
    assert_eq!(stderr.matches("ag_").count(), 1, "printed once:\n{stderr}");
    assert!(!srv.stdout().contains(&key), "the key goes to stderr only");
    let u = ok(&srv.api("GET", "/v1/user", Some(&key), None), 200);
    assert_eq!(u["role"], "Owner");
    let v = ok(&srv.api("GET", "/v1/auth/verify", Some(&key), None), 200);
    assert_eq!(v["scopes"], json!(["*"]));
    ok(&srv.api("POST", "/v1/gateways", Some(&key), Some(json!({ "name": "first" }))), 201);

    srv.kill9();
    srv.restart();
    let again = srv.stderr();
    assert!(printed_key(&again).is_none(), "a second start printed a key:\n{again}");
    ok(&srv.api("GET", "/v1/user", Some(&key), None), 200);
    assert_eq!(ok(&srv.api("GET", "/v1/gateways", Some(&key), None), 200)["pagination"]["total"], 1);

    // A start with TOOLGATE_ADMIN_KEY prints nothing either.
    let with = TestServer::start("");
    assert!(printed_key(&with.stderr()).is_none(), "{}", with.stderr());
}

/// The request log's backlog and drops are exported, so that a store that falls behind shows.
#[test]
fn request_log_backlog_metrics_are_exported() {
    let srv = TestServer::start("");
    let metrics = srv.metrics();
    for name in ["toolgate_request_log_pending", "toolgate_request_log_dropped_total"] {
        let line =
            metrics.lines().find(|l| l.starts_with(name)).unwrap_or_else(|| panic!("{name} missing:\n{metrics}"));
        assert_eq!(line.split_whitespace().nth(1), Some("0"), "{line}");
    }
}

/// `GET /v1/metrics/rate-limits` reads per-minute counts from the store: they survive a restart
/// (SIGTERM writes the last ones; a read writes them too, so they survive `kill -9` after it),
/// and `period` selects how far back they are summed.
#[test]
fn rate_limit_usage_survives_restarts_and_follows_its_period() {
    let mut srv = TestServer::start("");
    let key = srv.admin_key().to_string();
    let report = |srv: &TestServer, query: &str| {
        let r = srv.api("GET", &format!("/v1/metrics/rate-limits{query}"), Some(&key), None);
        ok(&r, 200)
    };
    for _ in 0..3 {
        ok(&srv.api("GET", "/v1/user", Some(&key), None), 200);
    }
    let m = report(&srv, "");
    assert_eq!((&m["period"], &m["usage"]["total_requests"]), (&json!("1h"), &json!(4)), "{m}");
    let peak = m["usage"]["peak_usage"]["requests"].as_u64().unwrap_or(0);
    assert!((2..=4).contains(&peak), "four requests in one minute, or two: {m}");

    // SIGTERM: the last minute's counts are written on the way out.
    ok(&srv.api("GET", "/v1/user", Some(&key), None), 200);
    assert!(srv.sigterm().success());
    srv.restart();
    let m = report(&srv, "?period=24h");
    assert_eq!((&m["period"], &m["usage"]["total_requests"]), (&json!("24h"), &json!(6)), "{m}");

    // kill -9 after a read: what the read counted is in the store.
    srv.kill9();
    srv.restart();
    let m = report(&srv, "?period=30d");
    assert_eq!(m["usage"]["total_requests"], 7, "{m}");
    assert_eq!(m["usage"]["rate_limited_requests"], 0, "{m}");
    assert!(m["usage"]["average_remaining"].as_f64().is_some_and(|a| a > 0.0), "{m}");
    assert!(m["usage"]["peak_usage"]["timestamp"].as_str().is_some_and(|t| t.ends_with(":00.000Z")), "{m}");

    let r = srv.api("GET", "/v1/metrics/rate-limits?period=2h", Some(&key), None);
    validation(&r, "period");
}
