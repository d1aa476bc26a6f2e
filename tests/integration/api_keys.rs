//! The key lifecycle (issue 4): `expires_at` enforced, rotation with a grace period (both keys
//! valid, then `grace_period_hours: 0` refuses the old key at once), revocation, and the usage
//! record.

use crate::common;

use common::*;
use serde_json::{json, Value};
use std::sync::OnceLock;
use std::thread::sleep;
use std::time::Duration;

struct Fx {
    srv: TestServer,
    admin: String,
    expired: String,
}

fn fx() -> &'static Fx {
    static FX: OnceLock<Fx> = OnceLock::new();
    FX.get_or_init(|| {
        let (admin, ya) = declared_key("key_admin", "usr_k", &["*"]);
        let (expired, ye) = declared_key("key_expired", "usr_k", &["*"]);
        let ye = ye.replace(" }\n", ", expires_at: \"2020-01-01T00:00:00Z\" }\n");
        let srv = TestServer::start(&format!(
            "rate_limits:\n  unauthenticated: {{ requests_per_hour: 100000, requests_per_minute: 100000, burst: 10000 }}\n\
             organizations:\n  - {{ id: org_k, name: Keys, tier: professional }}\n\
             users:\n  - {{ id: usr_k, email: k@k.test, name: K, role: owner, organization: org_k }}\n\
             api_keys:\n{ya}{ye}"
        ));
        reap_on_exit(&srv);
        Fx { srv, admin, expired }
    })
}

fn new_key(body: Value) -> Value {
    let f = fx();
    ok(&f.srv.api("POST", "/v1/api-keys", Some(&f.admin), Some(body)), 201)
}

#[test]
fn expires_at_is_enforced() {
    let f = fx();
    let srv = &f.srv;
    let e = err(&srv.api("GET", "/v1/user", Some(&f.expired), None), 401, "UNAUTHORIZED");
    assert!(e["message"].as_str().unwrap().contains("expired"), "{e}");

    let at = chrono::Utc::now() + chrono::Duration::seconds(3);
    let k = new_key(json!({ "name": "short", "scopes": ["gateways:read"], "expires_at": at.to_rfc3339() }));
    let key = k["key"].as_str().unwrap();
    ok(&srv.api("GET", "/v1/gateways", Some(key), None), 200);
    let v = ok(&srv.api("GET", "/v1/auth/verify", Some(key), None), 200);
    assert!(v["expires_at"].is_string(), "{v}");
    let left = (at - chrono::Utc::now()).num_milliseconds().max(0) as u64;
    // Time passing is the behaviour under test: the key's expiry.
    sleep(Duration::from_millis(left + 300));
    let e = err(&srv.api("GET", "/v1/gateways", Some(key), None), 401, "UNAUTHORIZED");
    assert!(e["message"].as_str().unwrap().contains("expired"), "{e}");
    err(&srv.api("GET", "/v1/auth/verify", Some(key), None), 401, "UNAUTHORIZED");
    err(&srv.api("GET", &format!("/v1/gateways?api_key={key}"), None, None), 401, "UNAUTHORIZED");
}

#[test]
fn rotation_keeps_both_keys_for_the_grace_period() {
    let f = fx();
    let srv = &f.srv;
    let k1 = new_key(json!({ "name": "rotating", "scopes": ["gateways:read", "apps:read"] }));
    let (id1, key1) = (k1["id"].as_str().unwrap(), k1["key"].as_str().unwrap());
    let rotate =
        |id: &str, body: Value| srv.api("POST", &format!("/v1/api-keys/{id}/rotate"), Some(&f.admin), Some(body));

    validation(&rotate(id1, json!({ "grace_period_hours": -1 })), "grace_period_hours");
    validation(&rotate(id1, json!({ "grace_period_hours": 721 })), "grace_period_hours");
    validation(&rotate(id1, json!({ "grace_period_hours": "soon" })), "grace_period_hours");
    err(&rotate("key_nope", json!({ "grace_period_hours": 1 })), 404, "NOT_FOUND");

    let r = rotate(id1, json!({ "grace_period_hours": 2 }));
    let k2 = ok(&r, 201);
    let (id2, key2) = (k2["id"].as_str().unwrap(), k2["key"].as_str().unwrap());
    assert_ne!(id1, id2);
    assert!(key2.starts_with("ag_") && key2 != key1, "{k2}");
    assert_eq!(k2["name"], "rotating");
    assert_eq!(k2["scopes"], json!(["gateways:read", "apps:read"]), "a rotated key keeps its scopes");
    let old_until =
        chrono::DateTime::parse_from_rfc3339(k2["old_key_expires_at"].as_str().expect("old_key_expires_at")).unwrap();
    let hours = (old_until.with_timezone(&chrono::Utc) - chrono::Utc::now()).num_minutes();
    assert!((115..=120).contains(&hours), "grace of 2 h: old key until {old_until}");

    // Both valid during the grace period.
    for k in [key1, key2] {
        ok(&srv.api("GET", "/v1/gateways", Some(k), None), 200);
        ok(&srv.api("GET", "/v1/apps", Some(k), None), 200);
    }
    let v = ok(&srv.api("GET", "/v1/auth/verify", Some(key1), None), 200);
    assert!(v["expires_at"].is_string(), "the old key now has an end: {v}");

    // Rotating again with no grace refuses the key being replaced at once.
    let k3 = ok(&rotate(id2, json!({ "grace_period_hours": 0 })), 201);
    let key3 = k3["key"].as_str().unwrap();
    let e = err(&srv.api("GET", "/v1/gateways", Some(key2), None), 401, "UNAUTHORIZED");
    assert!(e["message"].is_string());
    ok(&srv.api("GET", "/v1/gateways", Some(key3), None), 200);
    ok(&srv.api("GET", "/v1/gateways", Some(key1), None), 200); // still in its own grace period
                                                                // A key that no longer works cannot be rotated.
    let r = rotate(id2, json!({ "grace_period_hours": 1 }));
    assert_eq!(r.status, 400, "rotating an expired key: {r:?}");
    // Revocation of the first key is immediate despite its grace.
    ok_message(&srv.api("DELETE", &format!("/v1/api-keys/{id1}"), Some(&f.admin), None));
    err(&srv.api("GET", "/v1/gateways", Some(key1), None), 401, "UNAUTHORIZED");
    ok(&srv.api("GET", "/v1/gateways", Some(key3), None), 200);
}

#[test]
fn usage_is_recorded() {
    let f = fx();
    let srv = &f.srv;
    let k = new_key(json!({ "name": "used", "scopes": ["gateways:read"] }));
    let (id, key) = (k["id"].as_str().unwrap(), k["key"].as_str().unwrap());
    let usage = || ok(&srv.api("GET", &format!("/v1/api-keys/{id}/usage"), Some(&f.admin), None), 200);
    let u = usage();
    assert_eq!(u["requests_today"], 0, "{u}");
    assert_eq!(u["requests_this_month"], 0, "{u}");
    assert!(u["last_used"].is_null(), "{u}");

    let before = chrono::Utc::now() - chrono::Duration::seconds(1);
    for _ in 0..3 {
        ok(&srv.api("GET", "/v1/gateways", Some(key), None), 200);
    }
    let u = usage();
    assert_eq!(u["requests_today"], 3, "{u}");
    assert_eq!(u["requests_this_month"], 3, "{u}");
    assert_eq!(u["last_ip"], "127.0.0.1", "{u}");
    let last = chrono::DateTime::parse_from_rfc3339(u["last_used"].as_str().expect("last_used")).unwrap();
    assert!(last >= before && last <= chrono::Utc::now() + chrono::Duration::seconds(1), "{u}");
    // Requests refused for scope still used the key.
    err(&srv.api("POST", "/v1/gateways", Some(key), Some(json!({ "name": "u" }))), 403, "INSUFFICIENT_SCOPE");
    ok(&srv.api("GET", "/v1/gateways", Some(key), None), 200);
    let u2 = usage();
    assert_eq!(u2["requests_today"], 5, "{u2}");
    assert_eq!(u2["requests_this_month"], 5, "{u2}");
    assert!(u2["last_used"].as_str() >= u["last_used"].as_str(), "{u2}");
    err(&srv.api("GET", "/v1/api-keys/key_nope/usage", Some(&f.admin), None), 404, "NOT_FOUND");
}
