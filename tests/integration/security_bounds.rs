//! Bounded resources and the allowlist's own protection (security issue, defects 5, 7 and 8):
//! field limits that the OpenAPI document states and the server enforces with a 400 naming the
//! field; per-organisation quotas by tier (409 `CONFLICT` naming the quota); every allowlist
//! change behind the MFA gate, entries listed and deleted; what an entry means under an enforced
//! list; rate-limit multipliers bounded by the tier and their product capped.

use crate::api_mfa::{code_at, step_now, totp};
use crate::common::*;
use serde_json::{json, Value};
use std::collections::HashMap;
use std::sync::OnceLock;

struct Fx {
    srv: TestServer,
    keys: HashMap<&'static str, String>,
}

/// (key name, user, organisation). One organisation per test where quotas or the allowlist are
/// at stake: tests run in parallel.
const KEYS: &[(&str, &str, &str)] = &[
    ("lim", "usr_lim", "org_lim"),
    ("quota", "usr_quota", "org_quota"),
    ("free", "usr_free", "org_free"),
    ("mfa", "usr_mfa", "org_mfa"),
    ("stranger", "usr_stranger", "org_stranger"),
    ("mult", "usr_mult", "org_mult"),
    ("starter", "usr_starter", "org_starter"),
    ("ip", "usr_ip", "org_ip"),
];

fn fx() -> &'static Fx {
    static FX: OnceLock<Fx> = OnceLock::new();
    FX.get_or_init(|| {
        let (mut users, mut yk) = (String::new(), String::new());
        let mut keys = HashMap::new();
        for (name, user, org) in KEYS {
            users += &format!("  - {{ id: {user}, email: {user}@b.test, name: {user}, role: owner, organization: {org} }}\n");
            let (k, y) = declared_key(&format!("key_{name}"), user, &["*"]);
            yk += &y;
            keys.insert(*name, k);
        }
        let tier = |org: &str| match org {
            "org_lim" | "org_ip" => "professional",
            "org_quota" => "small",
            "org_starter" => "starter",
            _ => "free",
        };
        let orgs: String = KEYS
            .iter()
            .map(|(_, _, org)| format!("  - {{ id: {org}, name: {org}, tier: {} }}\n", tier(org)))
            .collect();
        // Generous buckets, so that only quotas and multipliers are under test; the free tier
        // keeps its quota row (gateways 10, max_multiplier 2: the built-in defaults).
        let generous = "{ requests_per_hour: 100000, requests_per_minute: 10000, burst: 1000, concurrent: 50 }";
        let config = BASE_CONFIG.replace("trusted_proxies: []", "trusted_proxies: [127.0.0.1/32]")
            + &format!(
                "rate_limits:\n  unauthenticated: {{ requests_per_hour: 100000, requests_per_minute: 100000, burst: 10000 }}\n\
                 \x20 tiers:\n    free: {generous}\n    small: {generous}\n\
                 limits:\n  quotas:\n\
                 \x20   small: {{ gateways: 3, service_accounts: 2, whitelist_entries: 2, api_keys: 4 }}\n\
                 \x20   starter: {{ max_multiplier: 3 }}\n\
                 organizations:\n{orgs}users:\n{users}api_keys:\n{yk}"
            );
        let srv = TestServer::start_with_config(&config);
        reap_on_exit(&srv);
        Fx { srv, keys }
    })
}

fn key(name: &str) -> &'static str {
    fx().keys[name].as_str()
}

fn srv() -> &'static TestServer {
    &fx().srv
}

fn post(k: &str, path: &str, body: Value) -> Resp {
    srv().api("POST", path, Some(k), Some(body))
}

fn gateway(k: &str) -> Resp {
    post(k, "/v1/gateways", json!({ "name": format!("b-{}", random_alnum(10)) }))
}

/// A property of a request-body schema in the served OpenAPI document.
fn schema_property(doc: &Value, schema: &str, property: &str) -> Value {
    doc["components"]["schemas"][schema]["properties"][property].clone()
}

// ------------------------------------------------------------------------------------------------
// Field limits (defect 5)

#[test]
fn field_limits_are_in_the_openapi_document_and_enforced_with_a_400_naming_the_field() {
    let k = key("lim");
    let r = srv().api("GET", "/v1/openapi.json", None, None);
    assert_eq!(r.status, 200, "{r:?}");
    let doc = r.json;
    let max = |schema: &str, property: &str, what: &str| -> usize {
        let p = schema_property(&doc, schema, property);
        p[what].as_u64().unwrap_or_else(|| panic!("{schema}.{property} has no {what}: {p}")) as usize
    };
    let desc_max = max("CreateGateway", "description", "maxLength");
    assert_eq!(desc_max, 1000);
    for schema in ["UpdateGateway", "CreateServiceAccount", "AddWhitelistEntry"] {
        assert_eq!(max(schema, "description", "maxLength"), desc_max, "{schema}");
    }
    let name_max = max("CreateGateway", "name", "maxLength");
    assert_eq!(name_max, 100);
    for schema in ["UpdateGateway", "CreateServiceAccount"] {
        assert_eq!(max(schema, "name", "maxLength"), name_max, "{schema}");
    }
    let servers_max = max("CreateGateway", "servers", "maxItems");
    let scopes_max = max("CreateServiceAccount", "scopes", "maxItems");
    let networks_max = max("UpdateSecurity", "ip_whitelist", "maxItems");

    // Exactly the documented maximum is accepted (counted in characters, not bytes); one more
    // is refused, on create and on update, and nothing is stored.
    let at_max = "é".repeat(desc_max);
    let over = "é".repeat(desc_max + 1);
    let g =
        ok(&post(k, "/v1/gateways", json!({ "name": format!("lim-{}", random_alnum(8)), "description": at_max })), 201);
    let gw = format!("/v1/gateways/{}", g["id"].as_str().unwrap());
    validation(&post(k, "/v1/gateways", json!({ "name": "lim-over", "description": over })), "description");
    validation(&srv().api("PATCH", &gw, Some(k), Some(json!({ "description": over }))), "description");
    assert_eq!(ok(&srv().api("GET", &gw, Some(k), None), 200)["description"], json!(at_max));

    // Names: 1-100 characters without control characters (NUL, escape sequences).
    let long_name = "n".repeat(name_max + 1);
    for bad in ["a\u{0}b", "\u{1b}[31mred", "tab\tname", "", "   ", long_name.as_str()] {
        validation(&post(k, "/v1/gateways", json!({ "name": bad })), "name");
        validation(&srv().api("PATCH", &gw, Some(k), Some(json!({ "name": bad }))), "name");
        validation(&post(k, "/v1/service-accounts", json!({ "name": bad, "scopes": ["gateways:read"] })), "name");
        validation(&post(k, "/v1/api-keys", json!({ "name": bad, "scopes": ["gateways:read"] })), "name");
    }
    ok(&post(k, "/v1/gateways", json!({ "name": "n".repeat(name_max) })), 201);
    // A description is text: line breaks and tabs are fine, other control characters are not.
    ok(&srv().api("PATCH", &gw, Some(k), Some(json!({ "description": "two\nlines\tand a tab" }))), 200);
    validation(&srv().api("PATCH", &gw, Some(k), Some(json!({ "description": "nul\u{0}" }))), "description");

    // Lists.
    let servers = vec!["time"; servers_max + 1];
    validation(&post(k, "/v1/gateways", json!({ "name": "lim-servers", "servers": servers })), "servers");
    let names: Vec<String> = (0..501).map(|i| format!("f{i}")).collect();
    let body = json!({ "name": "lim-tools", "servers": ["time"], "allowed_tools": { "time": names } });
    validation(&post(k, "/v1/gateways", body), "allowed_tools.time");
    let body =
        json!({ "name": "lim-tools", "servers": ["time"], "allowed_tools": { "time": ["ok", "x".repeat(257)] } });
    validation(&post(k, "/v1/gateways", body), "allowed_tools.time[1]");
    let scopes = vec!["gateways:read"; scopes_max + 1];
    validation(&post(k, "/v1/service-accounts", json!({ "name": "lim-sa", "scopes": scopes })), "scopes");
    validation(&post(k, "/v1/api-keys", json!({ "name": "lim-key", "scopes": scopes })), "scopes");
    let nets: Vec<String> = (0..=networks_max).map(|i| format!("10.{}.{}.0/24", i / 256, i % 256)).collect();
    validation(
        &srv().api("PATCH", "/v1/account/security", Some(k), Some(json!({ "ip_whitelist": nets }))),
        "ip_whitelist",
    );

    // Service-account and whitelist descriptions.
    let body = json!({ "name": "lim-sa", "description": over, "scopes": ["gateways:read"] });
    validation(&post(k, "/v1/service-accounts", body), "description");
    validation(&post(k, "/v1/account/whitelist", json!({ "ip": "192.0.2.1", "description": over })), "description");
    let e = ok(&post(k, "/v1/account/whitelist", json!({ "ip": "192.0.2.1", "description": at_max })), 201);
    assert_eq!(e["description"], json!(at_max));
}

// ------------------------------------------------------------------------------------------------
// Quotas (defect 5)

/// 409 `CONFLICT` naming the quota and its limit.
fn quota_exceeded(r: &Resp, quota: &str, limit: u64) {
    let e = err(r, 409, "CONFLICT");
    assert_eq!(e["details"]["quota"], quota, "{r:?}");
    assert_eq!(e["details"]["limit"], limit, "{r:?}");
    assert!(e["message"].as_str().unwrap().contains("limits.quotas."), "{r:?}");
}

#[test]
fn quotas_per_tier_refuse_one_more_with_409_naming_the_quota() {
    // Tier `small`: gateways 3, service accounts 2, whitelist entries 2 (limits.quotas.small).
    let k = key("quota");
    let ids: Vec<String> = (0..3).map(|_| ok(&gateway(k), 201)["id"].as_str().unwrap().to_string()).collect();
    quota_exceeded(&gateway(k), "gateways", 3);
    // Deleting one frees its place.
    ok(&srv().api("DELETE", &format!("/v1/gateways/{}", ids[0]), Some(k), None), 200);
    ok(&gateway(k), 201);
    quota_exceeded(&gateway(k), "gateways", 3);
    assert_eq!(ok(&srv().api("GET", "/v1/gateways", Some(k), None), 200)["pagination"]["total"], 3);

    let sa =
        |n: usize| post(k, "/v1/service-accounts", json!({ "name": format!("q-{n}"), "scopes": ["gateways:read"] }));
    let account = ok(&sa(1), 201)["id"].as_str().unwrap().to_string();
    ok(&sa(2), 201);
    quota_exceeded(&sa(3), "service_accounts", 2);

    let wl = |ip: &str| post(k, "/v1/account/whitelist", json!({ "ip": ip }));
    let first = ok(&wl("192.0.2.1"), 201);
    ok(&wl("192.0.2.2"), 201);
    quota_exceeded(&wl("192.0.2.3"), "whitelist_entries", 2);
    ok(&srv().api("DELETE", &format!("/v1/account/whitelist/{}", first["id"].as_str().unwrap()), Some(k), None), 200);
    ok(&wl("192.0.2.3"), 201);

    // API keys: usable account and service-account keys count (the declared key of this
    // organisation is one of the four); a revoked one frees its place.
    let mk_key = || post(k, "/v1/api-keys", json!({ "name": "q-key", "scopes": ["gateways:read"] }));
    let first_key = ok(&mk_key(), 201);
    ok(&mk_key(), 201);
    ok(&post(k, &format!("/v1/service-accounts/{account}/keys"), json!({ "name": "q-sa-key" })), 201);
    quota_exceeded(&mk_key(), "api_keys", 4);
    quota_exceeded(&post(k, &format!("/v1/service-accounts/{account}/keys"), json!({ "name": "q" })), "api_keys", 4);
    ok_message(&srv().api("DELETE", &format!("/v1/api-keys/{}", first_key["id"].as_str().unwrap()), Some(k), None));
    ok(&mk_key(), 201);
    quota_exceeded(&mk_key(), "api_keys", 4);

    // The built-in free row: 10 gateways per organisation.
    let f = key("free");
    for _ in 0..10 {
        ok(&gateway(f), 201);
    }
    quota_exceeded(&gateway(f), "gateways", 10);
}

// ------------------------------------------------------------------------------------------------
// The allowlist behind the MFA gate (defect 7)

fn with_mfa(method: &str, path: &str, k: &str, body: Option<Value>, code: &str) -> Resp {
    srv().request(method, path, Some(k), body, &[("x-mfa-token", code)])
}

#[test]
fn every_allowlist_change_needs_mfa_and_entries_are_listed_and_deleted_within_the_organisation() {
    let k = key("mfa");
    let e = ok(&post(k, "/v1/auth/mfa/enroll", json!({})), 200);
    let t = totp(e["secret"].as_str().unwrap());
    let backup: Vec<String> =
        e["backup_codes"].as_array().unwrap().iter().map(|c| c.as_str().unwrap().to_string()).collect();
    ok(&post(k, "/v1/auth/mfa/activate", json!({ "code": code_at(&t, step_now()) })), 200);

    // Adding an entry (here: one that admits every address) is as protected as PATCH.
    let body = json!({ "ip": "0.0.0.0/0", "description": "everyone" });
    let ch = err(&post(k, "/v1/account/whitelist", body.clone()), 403, "MFA_REQUIRED");
    assert!(ch["challenge_id"].is_string(), "{ch}");
    let entry = ok(&with_mfa("POST", "/v1/account/whitelist", k, Some(body), &backup[0]), 201);
    let id = entry["id"].as_str().unwrap();

    // Listed (reading needs no MFA), and only within the organisation.
    let list = ok(&srv().api("GET", "/v1/account/whitelist", Some(k), None), 200);
    assert_eq!(list["whitelist"], json!([entry]), "{list}");
    let theirs = ok(&srv().api("GET", "/v1/account/whitelist", Some(key("stranger")), None), 200);
    assert_eq!(theirs["whitelist"], json!([]), "another organisation sees nothing: {theirs}");
    let path = format!("/v1/account/whitelist/{id}");
    err(&srv().api("DELETE", &path, Some(key("stranger")), None), 404, "NOT_FOUND");

    // Deleting is protected too; then it is gone.
    err(&srv().api("DELETE", &path, Some(k), None), 403, "MFA_REQUIRED");
    ok_message(&with_mfa("DELETE", &path, k, None, &backup[1]));
    assert_eq!(ok(&srv().api("GET", "/v1/account/whitelist", Some(k), None), 200)["whitelist"], json!([]));
    err(&with_mfa("DELETE", &path, k, None, &backup[2]), 404, "NOT_FOUND");

    // A key that skips the allowlist needs MFA; an ordinary one does not.
    let bypass = json!({ "name": "bypass", "scopes": ["gateways:read"], "bypass_ip_whitelist": true });
    err(&post(k, "/v1/api-keys", bypass.clone()), 403, "MFA_REQUIRED");
    let made = ok(&with_mfa("POST", "/v1/api-keys", k, Some(bypass), &backup[3]), 201);
    assert_eq!(made["bypass_ip_whitelist"], true);
    ok(&post(k, "/v1/api-keys", json!({ "name": "plain", "scopes": ["gateways:read"] })), 201);

    // Raising a service account's limits (multiplier above 1) needs MFA; x1 does not.
    let sa = |name: &str, m: f64| json!({ "name": name, "scopes": ["gateways:read"], "rate_limit_multiplier": m });
    err(&post(k, "/v1/service-accounts", sa("raised", 2.0)), 403, "MFA_REQUIRED");
    ok(&post(k, "/v1/service-accounts", sa("plain", 1.0)), 201);
    let raised = ok(&with_mfa("POST", "/v1/service-accounts", k, Some(sa("raised", 2.0)), &backup[4]), 201);
    assert_eq!(raised["rate_limit_multiplier"], 2.0);
}

#[test]
fn an_entry_admits_its_address_under_an_enforced_list_and_deleting_it_cannot_lock_out_by_accident() {
    let k = key("ip");
    let from = |ip: &str, method: &str, path: &str, body: Option<Value>| {
        srv().request(method, path, Some(k), body, &[("x-forwarded-for", ip)])
    };
    let entry = ok(
        &from(
            "198.18.0.1",
            "POST",
            "/v1/account/whitelist",
            Some(json!({ "ip": "192.0.2.10", "rate_limit_multiplier": 2 })),
        ),
        201,
    );
    let security = json!({ "ip_whitelist": ["198.18.0.0/15"], "enforce_ip_whitelist": true });
    ok(&from("198.18.0.1", "PATCH", "/v1/account/security", Some(security)), 200);

    // Enforced: the list's networks and the entry's address are admitted, nothing else; the
    // entry's multiplier applies to its address.
    let base = rate_limit_headers(&ok_resp(from("198.18.0.1", "GET", "/v1/user", None))).0;
    let r = ok_resp(from("192.0.2.10", "GET", "/v1/user", None));
    assert_eq!(rate_limit_headers(&r).0, base * 2, "{r:?}");
    err(&from("192.0.2.11", "GET", "/v1/user", None), 403, "IP_NOT_ALLOWED");

    // From the address that only the entry admits, deleting it would refuse the caller: a 400
    // unless it insists, and the entry stays.
    let path = format!("/v1/account/whitelist/{}", entry["id"].as_str().unwrap());
    validation(&from("192.0.2.10", "DELETE", &path, None), "ip_whitelist");
    validation(&from("192.0.2.10", "DELETE", &format!("{path}?allow_lockout=maybe"), None), "allow_lockout");
    let list = ok(&from("192.0.2.10", "GET", "/v1/account/whitelist", None), 200);
    assert_eq!(list["whitelist"].as_array().map(Vec::len), Some(1), "{list}");
    ok_message(&from("192.0.2.10", "DELETE", &format!("{path}?allow_lockout=true"), None));
    err(&from("192.0.2.10", "GET", "/v1/user", None), 403, "IP_NOT_ALLOWED");
    ok(&from("198.18.0.1", "PATCH", "/v1/account/security", Some(json!({ "enforce_ip_whitelist": false }))), 200);
    ok(&from("192.0.2.10", "GET", "/v1/user", None), 200);
}

fn ok_resp(r: Resp) -> Resp {
    ok(&r, 200);
    r
}

// ------------------------------------------------------------------------------------------------
// Multipliers (defect 8)

#[test]
fn multipliers_are_bounded_by_the_tier_and_their_product_is_capped() {
    let k = key("mult");
    let sa = |name: &str, m: Option<f64>| {
        let mut body = json!({ "name": name, "scopes": ["gateways:read"] });
        if let Some(m) = m {
            body["rate_limit_multiplier"] = json!(m);
        }
        post(k, "/v1/service-accounts", body)
    };
    // Free: at most x5 (limits.quotas.free.max_multiplier), Decision 1's default.
    for m in [5.5, 100.0, 0.0, -1.0] {
        validation(&sa("too-much", Some(m)), "rate_limit_multiplier");
    }
    validation(
        &post(k, "/v1/account/whitelist", json!({ "ip": "192.0.2.20", "rate_limit_multiplier": 100 })),
        "rate_limit_multiplier",
    );
    let dflt = ok(&sa("default", None), 201);
    assert_eq!(dflt["rate_limit_multiplier"], 5.0, "{dflt}");

    // x3 account key from a x3 entry's address: min(3 x 3, 5) = 5, not 9.
    let acct = ok(&sa("bot", Some(3.0)), 201);
    let sak = ok(
        &post(k, &format!("/v1/service-accounts/{}/keys", acct["id"].as_str().unwrap()), json!({ "name": "b" })),
        201,
    );
    let sak = sak["key"].as_str().unwrap();
    ok(&post(k, "/v1/account/whitelist", json!({ "ip": "192.0.2.20", "rate_limit_multiplier": 3 })), 201);
    let limit = |key: &str, ip: &str| {
        let r = srv().request("GET", "/v1/user", Some(key), None, &[("x-forwarded-for", ip)]);
        rate_limit_headers(&ok_resp(r)).0
    };
    let base = limit(k, "192.0.2.99");
    assert_eq!(limit(k, "192.0.2.20"), base * 3);
    assert_eq!(limit(sak, "192.0.2.99"), base * 3);
    assert_eq!(limit(sak, "192.0.2.20"), base * 5, "the product of two multipliers is capped at the tier's x5");
    let rl = ok(&srv().request("GET", "/v1/rate-limit", Some(sak), None, &[("x-forwarded-for", "192.0.2.20")]), 200);
    assert_eq!(rl["buckets"]["global"]["limit"], base * 5, "{rl}");

    // Configured per tier: starter's row says 3 (its default would be 5).
    let s = key("starter");
    let body = json!({ "name": "four", "scopes": ["gateways:read"], "rate_limit_multiplier": 4 });
    validation(&post(s, "/v1/service-accounts", body), "rate_limit_multiplier");
    let body = json!({ "name": "three", "scopes": ["gateways:read"], "rate_limit_multiplier": 3 });
    let acct = ok(&post(s, "/v1/service-accounts", body), 201);
    let sk = ok(
        &post(s, &format!("/v1/service-accounts/{}/keys", acct["id"].as_str().unwrap()), json!({ "name": "s" })),
        201,
    );
    let sk = sk["key"].as_str().unwrap();
    ok(&post(s, "/v1/account/whitelist", json!({ "ip": "192.0.2.30", "rate_limit_multiplier": 3 })), 201);
    let starter_base = limit(s, "192.0.2.99");
    assert_eq!(limit(sk, "192.0.2.99"), starter_base * 3);
    assert_eq!(limit(sk, "192.0.2.30"), starter_base * 3, "x3 times x3 is capped at x3");
}
