//! Privilege boundaries of the key-minting paths (security issue, defects 2 and 4): a caller
//! rotates, revokes or mints only keys whose rights are within its own (its own keys, or keys of
//! a role it dominates); service-account keys act as the account; a rotated or revoked key that
//! YAML declares stays so across restarts, and a declared key whose hash changes stops working.

use crate::common::*;
use serde_json::{json, Value};
use std::sync::OnceLock;

struct Fx {
    srv: TestServer,
    owner: String,
    admin: String,
    peer_admin: String,
    developer: String,
    /// A developer's `gateways:read` key (developers cannot make keys themselves).
    developer_narrow: String,
}

fn fx() -> &'static Fx {
    static FX: OnceLock<Fx> = OnceLock::new();
    FX.get_or_init(|| {
        let (owner, yo) = declared_key("key_sk_owner", "usr_sk_owner", &["*"]);
        let (admin, ya) = declared_key("key_sk_admin", "usr_sk_admin", &["*"]);
        let (peer_admin, yp) = declared_key("key_sk_peer", "usr_sk_peer", &["*"]);
        let (developer, yd) = declared_key("key_sk_dev", "usr_sk_dev", &["*"]);
        let (developer_narrow, ydn) = declared_key("key_sk_dev_narrow", "usr_sk_dev", &["gateways:read"]);
        let srv = TestServer::start(&format!(
            "rate_limits:\n  unauthenticated: {{ requests_per_hour: 100000, requests_per_minute: 100000, burst: 10000 }}\n\
             organizations:\n  - {{ id: org_sk, name: SecKeys, tier: enterprise }}\n\
             users:\n\
             \x20 - {{ id: usr_sk_owner, email: o@sk.test, name: O, role: owner, organization: org_sk }}\n\
             \x20 - {{ id: usr_sk_admin, email: a@sk.test, name: A, role: admin, organization: org_sk }}\n\
             \x20 - {{ id: usr_sk_peer, email: p@sk.test, name: P, role: admin, organization: org_sk }}\n\
             \x20 - {{ id: usr_sk_dev, email: d@sk.test, name: D, role: developer, organization: org_sk }}\n\
             api_keys:\n{yo}{ya}{yp}{yd}{ydn}"
        ));
        reap_on_exit(&srv);
        Fx { srv, owner, admin, peer_admin, developer, developer_narrow }
    })
}

fn new_key(by: &str, scopes: &[&str]) -> (String, String) {
    let r = fx().srv.api(
        "POST",
        "/v1/api-keys",
        Some(by),
        Some(json!({ "name": format!("sk-{}", random_alnum(8)), "scopes": scopes })),
    );
    let d = ok(&r, 201);
    (d["id"].as_str().unwrap().to_string(), d["key"].as_str().unwrap().to_string())
}

fn rotate(by: &str, id: &str) -> Resp {
    fx().srv.api("POST", &format!("/v1/api-keys/{id}/rotate"), Some(by), Some(json!({ "grace_period_hours": 0 })))
}

fn revoke(by: &str, id: &str) -> Resp {
    fx().srv.api("DELETE", &format!("/v1/api-keys/{id}"), Some(by), None)
}

fn works(key: &str) -> bool {
    fx().srv.api("GET", "/v1/user", Some(key), None).status == 200
}

#[test]
fn an_admin_cannot_rotate_or_revoke_the_owners_keys() {
    let f = fx();
    let (id, owners_key) = new_key(&f.owner, &["*"]);
    err(&rotate(&f.admin, &id), 403, "FORBIDDEN");
    err(&revoke(&f.admin, &id), 403, "FORBIDDEN");
    // Not even a narrow one: it is the Owner's.
    let (narrow_id, narrow) = new_key(&f.owner, &["gateways:read"]);
    err(&rotate(&f.admin, &narrow_id), 403, "FORBIDDEN");
    // The Owner's declared key too.
    err(&rotate(&f.admin, "key_sk_owner"), 403, "FORBIDDEN");
    assert!(works(&owners_key) && works(&narrow) && works(&f.owner), "the Owner's keys were touched");
    // Peers cannot act on each other's keys either.
    let (peer_id, peer_key) = new_key(&f.peer_admin, &["gateways:read"]);
    err(&rotate(&f.admin, &peer_id), 403, "FORBIDDEN");
    err(&revoke(&f.admin, &peer_id), 403, "FORBIDDEN");
    assert!(works(&peer_key));
    // The Owner may act on all of them.
    ok(&rotate(&f.owner, &peer_id), 201);
    assert!(!works(&peer_key));
}

#[test]
fn an_admin_manages_a_developers_keys_and_its_own() {
    let f = fx();
    let (id, dev_key) = ("key_sk_dev_narrow", &f.developer_narrow);
    // The developer itself lacks `admin`.
    err(&rotate(&f.developer, id), 403, "INSUFFICIENT_SCOPE");
    let k = ok(&rotate(&f.admin, id), 201);
    assert_eq!(k["scopes"], json!(["gateways:read"]));
    assert!(!works(dev_key));
    let new = k["key"].as_str().unwrap();
    let v = ok(&fx().srv.api("GET", "/v1/auth/verify", Some(new), None), 200);
    assert_eq!(v["user_id"], "usr_sk_dev", "the rotated key stays the developer's: {v}");
    ok_message(&revoke(&f.admin, k["id"].as_str().unwrap()));
    let (own_id, own) = new_key(&f.admin, &["gateways:*", "logs:read"]);
    let k = ok(&rotate(&f.admin, &own_id), 201);
    assert!(!works(&own) && works(k["key"].as_str().unwrap()));
}

fn service_account(by: &str, scopes: &[&str]) -> String {
    let r = fx().srv.api(
        "POST",
        "/v1/service-accounts",
        Some(by),
        Some(json!({ "name": format!("sk-sa-{}", random_alnum(8)), "scopes": scopes })),
    );
    ok(&r, 201)["id"].as_str().unwrap().to_string()
}

fn mint(by: &str, account: &str) -> Resp {
    fx().srv.api(
        "POST",
        &format!("/v1/service-accounts/{account}/keys"),
        Some(by),
        Some(json!({ "name": format!("sk-{}", random_alnum(6)) })),
    )
}

#[test]
fn service_account_keys_are_minted_within_the_callers_rights() {
    let f = fx();
    // An account the Owner made with every scope: an Admin minting a key of it would hold the
    // Owner's rights.
    let owners = service_account(&f.owner, &["*"]);
    err(&mint(&f.admin, &owners), 403, "FORBIDDEN");
    let k = ok(&mint(&f.owner, &owners), 201);
    let account_key = k["key"].as_str().unwrap().to_string();
    // An Admin's account: the Admin and the Owner may mint; its keys stay within the Admin role.
    let admins = service_account(&f.admin, &["gateways:*", "apps:*", "logs:read", "sessions:manage"]);
    let k = ok(&mint(&f.admin, &admins), 201);
    let d = ok(&f.srv.api("GET", "/v1/auth/debug", Some(k["key"].as_str().unwrap()), None), 200);
    let scopes: Vec<&str> = d["scopes"].as_array().unwrap().iter().map(|s| s.as_str().unwrap()).collect();
    assert!(!scopes.contains(&"team:manage") && !scopes.contains(&"billing:manage"), "{d}");
    ok(&mint(&f.owner, &admins), 201);

    // A service account's key acts as the account, not as its creator: it cannot rotate or
    // revoke the creator's keys.
    let (id, owners_key) = new_key(&f.owner, &["gateways:read"]);
    err(&revoke(&account_key, &id), 403, "FORBIDDEN");
    err(&rotate(&account_key, &id), 403, "FORBIDDEN");
    assert!(works(&owners_key));
    // But it manages the keys of its own account.
    let (sibling_id, sibling) = {
        let k = ok(&mint(&f.owner, &owners), 201);
        (k["id"].as_str().unwrap().to_string(), k["key"].as_str().unwrap().to_string())
    };
    ok_message(&revoke(&account_key, &sibling_id));
    assert!(!works(&sibling));
}

/// Declared keys: rotation and revocation made through the API survive restarts, and a changed
/// `sha256` in YAML retires the old value at once.
#[test]
fn declared_keys_stay_rotated_revoked_and_rehashed_across_restarts() {
    let (owner, yo) = declared_key("key_d_owner", "usr_d", &["*"]);
    let (rotated, yr) = declared_key("key_d_rotated", "usr_d", &["gateways:read"]);
    let (revoked, yv) = declared_key("key_d_revoked", "usr_d", &["gateways:read"]);
    let (rehashed, yh) = declared_key("key_d_rehashed", "usr_d", &["gateways:read"]);
    let mut srv = TestServer::start(&format!(
        "organizations:\n  - {{ id: org_d, name: Decl, tier: enterprise }}\n\
         users:\n  - {{ id: usr_d, email: d@d.test, name: D, role: owner, organization: org_d }}\n\
         api_keys:\n{yo}{yr}{yv}{yh}"
    ));
    let get = |srv: &TestServer, k: &str| srv.api("GET", "/v1/gateways", Some(k), None).status;
    let r =
        srv.api("POST", "/v1/api-keys/key_d_rotated/rotate", Some(&owner), Some(json!({ "grace_period_hours": 0 })));
    let replacement = ok(&r, 201)["key"].as_str().unwrap().to_string();
    ok_message(&srv.api("DELETE", "/v1/api-keys/key_d_revoked", Some(&owner), None));
    assert_eq!((get(&srv, &rotated), get(&srv, &revoked), get(&srv, &replacement)), (401, 401, 200));

    let (new_value, new_item) = declared_key("key_d_rehashed", "usr_d", &["gateways:read"]);
    let config = std::fs::read_to_string(srv.config_path()).unwrap();
    assert!(config.contains(yh.trim_end()), "the declaration is in the file");
    std::fs::write(srv.config_path(), config.replace(yh.trim_end(), new_item.trim_end())).unwrap();
    srv.restart();
    assert_eq!(get(&srv, &rotated), 401, "a rotated declared key came back after a restart");
    assert_eq!(get(&srv, &revoked), 401, "a revoked declared key came back after a restart");
    assert_eq!(get(&srv, &replacement), 200);
    assert_eq!(get(&srv, &rehashed), 401, "the old value of a re-hashed declared key still works");
    assert_eq!(get(&srv, &new_value), 200);
    let v: Value = ok(&srv.api("GET", "/v1/auth/verify", Some(&new_value), None), 200);
    assert_eq!(v["key_id"], "key_d_rehashed");
}
