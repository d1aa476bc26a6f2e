//! The lists the console needs: `GET /v1/api-keys` (never a key nor its hash), `GET
//! /v1/service-accounts` with their key counts, and `GET /v1/logs/{id}` (one entry as the list
//! shows it). Each keeps organisations apart (another organisation's record is not listed, or a
//! 404) and is refused without its scope.

use crate::api_logs::call_time;
use crate::common::*;
use serde_json::{json, Value};
use std::sync::OnceLock;

struct Fx {
    srv: TestServer,
    admin: String,
    other: String,
    dev: String,
}

fn fx() -> &'static Fx {
    static FX: OnceLock<Fx> = OnceLock::new();
    FX.get_or_init(|| {
        let (other, other_yaml) = declared_key("key_lists_other", "usr_lists_other", &["*"]);
        let (dev, dev_yaml) = declared_key("key_lists_dev", "usr_lists_dev", &["*"]);
        let (admin, admin_yaml) = declared_key("key_lists_owner", "usr_lists_owner", &["*"]);
        let srv = TestServer::start(&format!(
            "rate_limits:\n  unauthenticated: {{ requests_per_hour: 100000, requests_per_minute: 100000, burst: 10000 }}\n\
             organizations:\n  - {{ id: org_lists_other, name: Other, tier: professional }}\n\
               \x20 - {{ id: org_lists, name: Lists, tier: professional }}\n\
             users:\n  - {{ id: usr_lists_other, email: o@lists.test, name: O, role: owner, organization: org_lists_other }}\n\
               \x20 - {{ id: usr_lists_owner, email: w@lists.test, name: W, role: owner, organization: org_lists }}\n\
               \x20 - {{ id: usr_lists_dev, email: d@lists.test, name: D, role: developer, organization: org_lists }}\n\
             api_keys:\n{other_yaml}{admin_yaml}{dev_yaml}"
        ));
        reap_on_exit(&srv);
        Fx { srv, admin, other, dev }
    })
}

fn ids(list: &Value, name: &str) -> Vec<String> {
    list[name].as_array().unwrap().iter().map(|k| k["id"].as_str().unwrap().to_string()).collect()
}

#[test]
fn api_keys_are_listed_without_their_secret_with_their_state_and_owner() {
    let f = fx();
    let srv = &f.srv;
    let made = ok(
        &srv.api("POST", "/v1/api-keys", Some(&f.admin), Some(json!({"name": "listed", "scopes": ["gateways:read"]}))),
        201,
    );
    let (id, key) = (made["id"].as_str().unwrap(), made["key"].as_str().unwrap());
    let sa = ok(
        &srv.api(
            "POST",
            "/v1/service-accounts",
            Some(&f.admin),
            Some(json!({"name": "lister", "scopes": ["logs:read"], "rate_limit_multiplier": 1.0})),
        ),
        201,
    );
    let sa_id = sa["id"].as_str().unwrap();
    let sa_key = ok(
        &srv.api(
            "POST",
            &format!("/v1/service-accounts/{sa_id}/keys"),
            Some(&f.admin),
            Some(json!({"name": "sa key"})),
        ),
        201,
    );
    let sa_key_id = sa_key["id"].as_str().unwrap();
    ok(&srv.api("GET", "/v1/gateways", Some(key), None), 200);

    let r = srv.api("GET", "/v1/api-keys?limit=100", Some(&f.admin), None);
    let list = ok(&r, 200);
    for secret in [key, &sha256_hex(key), sa_key["key"].as_str().unwrap(), &sha256_hex(sa_key["key"].as_str().unwrap())]
    {
        assert!(!r.text.contains(secret), "a key or its hash is in the list: {}", r.text);
    }
    let items = list["api_keys"].as_array().unwrap();
    assert!(items.iter().all(|k| k.get("key").is_none() && k.get("hash").is_none()), "{list}");
    let mine = items.iter().find(|k| k["id"] == id).unwrap_or_else(|| panic!("{id} not listed: {list}"));
    assert_eq!(mine["name"], "listed");
    assert_eq!(mine["scopes"], json!(["gateways:read"]));
    assert_eq!(mine["user_id"], "usr_lists_owner");
    assert_eq!(mine["service_account_id"], Value::Null);
    assert_eq!(mine["state"], "active");
    assert!(mine["last_used_at"].is_string(), "used once: {mine}");
    assert!(mine["created_at"].is_string() && mine["expires_at"].is_null(), "{mine}");
    let of_sa = items.iter().find(|k| k["id"] == sa_key_id).unwrap();
    assert_eq!((&of_sa["service_account_id"], &of_sa["user_id"]), (&json!(sa_id), &Value::Null), "{of_sa}");
    assert_eq!(list["pagination"]["total"], items.len(), "{list}");
    // The developer's declared key is the organisation's too.
    assert!(ids(&list, "api_keys").contains(&"key_lists_dev".to_string()), "{list}");
    assert!(!ids(&list, "api_keys").contains(&"key_lists_other".to_string()), "another organisation's: {list}");

    // Filters and pages.
    let by_sa = ok(&srv.api("GET", &format!("/v1/api-keys?service_account_id={sa_id}"), Some(&f.admin), None), 200);
    assert_eq!(ids(&by_sa, "api_keys"), [sa_key_id], "{by_sa}");
    let by_user = ok(&srv.api("GET", "/v1/api-keys?user_id=usr_lists_dev", Some(&f.admin), None), 200);
    assert_eq!(ids(&by_user, "api_keys"), ["key_lists_dev"], "{by_user}");
    let page = ok(&srv.api("GET", "/v1/api-keys?limit=1&page=2", Some(&f.admin), None), 200);
    assert_eq!(page["api_keys"].as_array().unwrap().len(), 1, "{page}");
    assert_eq!((&page["pagination"]["page"], &page["pagination"]["has_prev"]), (&json!(2), &json!(true)), "{page}");
    validation(&srv.api("GET", "/v1/api-keys?limit=101", Some(&f.admin), None), "limit");
    validation(&srv.api("GET", "/v1/api-keys?page=0", Some(&f.admin), None), "page");

    // Rotating and revoking show in the state.
    ok(
        &srv.api("POST", &format!("/v1/api-keys/{id}/rotate"), Some(&f.admin), Some(json!({"grace_period_hours": 1}))),
        201,
    );
    ok(&srv.api("DELETE", &format!("/v1/api-keys/{sa_key_id}"), Some(&f.admin), None), 200);
    let after = ok(&srv.api("GET", "/v1/api-keys?limit=100", Some(&f.admin), None), 200);
    let state =
        |id: &str| after["api_keys"].as_array().unwrap().iter().find(|k| k["id"] == id).unwrap()["state"].clone();
    assert_eq!(state(id), "rotating", "{after}");
    assert_eq!(state(sa_key_id), "revoked", "{after}");

    // Another organisation sees only its own; a role without `admin` is refused.
    let theirs = ok(&srv.api("GET", "/v1/api-keys", Some(&f.other), None), 200);
    assert_eq!(ids(&theirs, "api_keys"), ["key_lists_other"], "{theirs}");
    err(&srv.api("GET", "/v1/api-keys", Some(&f.dev), None), 403, "INSUFFICIENT_SCOPE");
}

#[test]
fn service_accounts_are_listed_with_their_key_counts() {
    let f = fx();
    let srv = &f.srv;
    let sa = ok(
        &srv.api(
            "POST",
            "/v1/service-accounts",
            Some(&f.admin),
            Some(json!({"name": "counted", "description": "two keys", "scopes": ["gateways:read"], "rate_limit_multiplier": 1.0})),
        ),
        201,
    );
    let sa_id = sa["id"].as_str().unwrap();
    for name in ["one", "two"] {
        ok(
            &srv.api(
                "POST",
                &format!("/v1/service-accounts/{sa_id}/keys"),
                Some(&f.admin),
                Some(json!({"name": name})),
            ),
            201,
        );
    }
    let list = ok(&srv.api("GET", "/v1/service-accounts?limit=100", Some(&f.admin), None), 200);
    let a = list["service_accounts"].as_array().unwrap().iter().find(|a| a["id"] == sa_id).unwrap();
    assert_eq!((&a["name"], &a["description"]), (&json!("counted"), &json!("two keys")), "{a}");
    assert_eq!((&a["key_count"], &a["keys_total"]), (&json!(2), &json!(2)), "{a}");
    assert_eq!(a["scopes"], json!(["gateways:read"]));
    assert_eq!(a["created_by"], "usr_lists_owner");
    assert!(list["pagination"]["total"].as_u64().unwrap() >= 1, "{list}");
    let theirs = ok(&srv.api("GET", "/v1/service-accounts", Some(&f.other), None), 200);
    assert_eq!(theirs["service_accounts"], json!([]), "another organisation's accounts: {theirs}");
    err(&srv.api("GET", "/v1/service-accounts", Some(&f.dev), None), 403, "INSUFFICIENT_SCOPE");
    validation(&srv.api("GET", "/v1/service-accounts?limit=0", Some(&f.admin), None), "limit");
}

#[test]
fn one_log_entry_is_read_by_its_id_within_its_organisation() {
    let f = fx();
    let srv = &f.srv;
    let g = ok(
        &srv.api("POST", "/v1/gateways", Some(&f.admin), Some(json!({"name": "one entry", "servers": ["time"]}))),
        201,
    );
    let (gw, gw_key) = (g["id"].as_str().unwrap(), g["api_key"].as_str().unwrap());
    call_time(srv, gw, gw_key, &["UTC"]);
    let list = ok(&srv.api("GET", &format!("/v1/logs?gateway_id={gw}"), Some(&f.admin), None), 200);
    let listed = &list["logs"][0];
    let id = listed["id"].as_str().unwrap();
    let one = ok(&srv.api("GET", &format!("/v1/logs/{id}"), Some(&f.admin), None), 200);
    assert_eq!(&one, listed, "the entry as the list shows it");
    assert_eq!(one["request"]["params"], json!({"timezone": "UTC", "format": "YYYY"}), "{one}");
    // `logs:read` is enough (a Developer holds it); a key without it is refused.
    ok(&srv.api("GET", &format!("/v1/logs/{id}"), Some(&f.dev), None), 200);
    let narrow = ok(
        &srv.api("POST", "/v1/api-keys", Some(&f.admin), Some(json!({"name": "no logs", "scopes": ["gateways:read"]}))),
        201,
    );
    err(&srv.api("GET", &format!("/v1/logs/{id}"), narrow["key"].as_str(), None), 403, "INSUFFICIENT_SCOPE");
    // Another organisation's entry, an unknown id and a malformed one are all "not found".
    err(&srv.api("GET", &format!("/v1/logs/{id}"), Some(&f.other), None), 404, "NOT_FOUND");
    let unknown = format!("{}zzzzzzzz", &id[..id.len() - 8]);
    err(&srv.api("GET", &format!("/v1/logs/{unknown}"), Some(&f.admin), None), 404, "NOT_FOUND");
    for bad in ["nope", "log_", "log_zzzzzzzzzzzzzzzzzzzz", "log_%C3%A9%C3%A9%C3%A9%C3%A9%C3%A9%C3%A9%C3%A9%C3%A9"] {
        err(&srv.api("GET", &format!("/v1/logs/{bad}"), Some(&f.admin), None), 404, "NOT_FOUND");
    }
}
