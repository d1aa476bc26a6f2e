//! Identity and the API's frame: `GET/PATCH /user`, `POST/DELETE /api-keys`, `/auth/verify`,
//! `/auth/debug`, service accounts and their keys, `/v1` = `/api/v1`, unknown paths, health,
//! and the OpenAPI document.

use crate::common;

use common::*;
use serde_json::{json, Value};
use std::sync::OnceLock;

struct Fx {
    srv: TestServer,
    /// Admin role, key `*`, organisation Acme (professional).
    admin: String,
    /// Viewer role, key `*`.
    viewer: String,
    /// Developer role, key `*`.
    dev: String,
}

fn fx() -> &'static Fx {
    static FX: OnceLock<Fx> = OnceLock::new();
    FX.get_or_init(|| {
        let (admin, ya) = declared_key("key_admin", "usr_admin", &["*"]);
        let (viewer, yv) = declared_key("key_viewer", "usr_viewer", &["*"]);
        let (dev, yd) = declared_key("key_dev", "usr_dev", &["*"]);
        let yaml = format!(
            "rate_limits:\n  unauthenticated: {{ requests_per_hour: 100000, requests_per_minute: 100000, burst: 10000 }}\n\
             organizations:\n  - {{ id: org_acme, name: Acme, tier: professional }}\n\
             users:\n\
             \x20 - {{ id: usr_admin, email: alice@acme.test, name: Alice, role: admin, organization: org_acme }}\n\
             \x20 - {{ id: usr_viewer, email: vic@acme.test, name: Vic, role: viewer, organization: org_acme }}\n\
             \x20 - {{ id: usr_dev, email: dee@acme.test, name: Dee, role: developer, organization: org_acme }}\n\
             api_keys:\n{ya}{yv}{yd}"
        );
        let srv = TestServer::start(&yaml);
        reap_on_exit(&srv);
        Fx { srv, admin, viewer, dev }
    })
}

#[test]
fn user_get_and_patch() {
    let f = fx();
    let srv = &f.srv;
    let u = ok(&srv.api("GET", "/v1/user", Some(&f.dev), None), 200);
    assert_eq!(u["id"], "usr_dev");
    assert_eq!(u["email"], "dee@acme.test");
    assert_eq!(u["name"], "Dee");
    assert_eq!(u["role"], "Developer");
    assert_eq!(u["organization"], json!({ "id": "org_acme", "name": "Acme" }));
    assert!(chrono::DateTime::parse_from_rfc3339(u["created_at"].as_str().unwrap()).is_ok(), "{u}");

    // The bootstrap owner.
    let o = ok(&srv.api("GET", "/v1/user", Some(srv.admin_key()), None), 200);
    assert_eq!(o["role"], "Owner", "{o}");

    let p = ok(
        &srv.api(
            "PATCH",
            "/v1/user",
            Some(&f.dev),
            Some(json!({ "name": "Dee Renamed", "notification_preferences": { "email": false, "slack": true } })),
        ),
        200,
    );
    assert_eq!(p["name"], "Dee Renamed");
    let u = ok(&srv.api("GET", "/v1/user", Some(&f.dev), None), 200);
    assert_eq!(u["name"], "Dee Renamed", "the change is stored");
    assert_eq!(u["notification_preferences"], json!({ "email": false, "slack": true }));
    assert_eq!(u["email"], "dee@acme.test", "untouched fields stay");
    // Only one preference: the other stays.
    ok(
        &srv.api("PATCH", "/v1/user", Some(&f.dev), Some(json!({ "notification_preferences": { "email": true } }))),
        200,
    );
    let u = ok(&srv.api("GET", "/v1/user", Some(&f.dev), None), 200);
    assert_eq!(u["notification_preferences"], json!({ "email": true, "slack": true }));

    validation(&srv.api("PATCH", "/v1/user", Some(&f.dev), Some(json!({ "name": "" }))), "name");
    validation(&srv.api("PATCH", "/v1/user", Some(&f.dev), Some(json!({ "name": "n".repeat(101) }))), "name");
    validation(&srv.api("PATCH", "/v1/user", Some(&f.dev), Some(json!({ "name": 3 }))), "name");
    validation(
        &srv.api("PATCH", "/v1/user", Some(&f.dev), Some(json!({ "notification_preferences": { "email": "yes" } }))),
        "notification_preferences.email",
    );
    // Any valid credential may read and change its own user: a viewer too.
    ok(&srv.api("PATCH", "/v1/user", Some(&f.viewer), Some(json!({ "name": "Vic V" }))), 200);
    err(&srv.api("GET", "/v1/user", None, None), 401, "UNAUTHORIZED");
    err(&srv.api("PATCH", "/v1/user", Some(&random_key()), Some(json!({ "name": "x" }))), 401, "UNAUTHORIZED");
}

#[test]
fn api_keys_create_use_verify_and_revoke() {
    let f = fx();
    let srv = &f.srv;
    let r = srv.api(
        "POST",
        "/v1/api-keys",
        Some(&f.admin),
        Some(json!({ "name": "ci reader", "scopes": ["gateways:read", "apps:read"] })),
    );
    let k = ok(&r, 201);
    let key = k["key"].as_str().unwrap().to_string();
    let id = k["id"].as_str().unwrap().to_string();
    assert!(key.starts_with("ag_") && key.len() >= 35, "{key}");
    assert_eq!(k["name"], "ci reader");
    assert_eq!(k["scopes"], json!(["gateways:read", "apps:read"]));
    assert!(k["expires_at"].is_null(), "{k}");
    assert!(chrono::DateTime::parse_from_rfc3339(k["created_at"].as_str().unwrap()).is_ok());

    // It works, within its scopes.
    ok(&srv.api("GET", "/v1/gateways", Some(&key), None), 200);
    ok(&srv.api("GET", "/v1/apps", Some(&key), None), 200);
    err(&srv.api("POST", "/v1/gateways", Some(&key), Some(json!({ "name": "nope" }))), 403, "INSUFFICIENT_SCOPE");
    err(&srv.api("GET", "/v1/metrics/rate-limits", Some(&key), None), 403, "INSUFFICIENT_SCOPE");

    // /auth/verify describes it; nothing shows the key again.
    let r = srv.api("GET", "/v1/auth/verify", Some(&key), None);
    let v = ok(&r, 200);
    assert_eq!(v["valid"], true);
    assert_eq!(v["key_id"], id.as_str());
    assert_eq!(v["user_id"], "usr_admin");
    assert_eq!(v["scopes"], json!(["gateways:read", "apps:read"]));
    assert!(v.get("expires_at").is_some() && v["expires_at"].is_null(), "{v}");
    let mut texts = vec![r.text];
    for p in ["/v1/auth/debug", "/v1/user", "/v1/rate-limit"] {
        texts.push(srv.api("GET", p, Some(&key), None).text);
    }
    texts.push(srv.api("GET", &format!("/v1/api-keys/{id}/usage"), Some(&f.admin), None).text);
    for t in &texts {
        assert!(!t.contains(&key), "the key is shown again: {t}");
        assert!(!t.contains(&sha256_hex(&key)), "the key's hash is shown: {t}");
    }
    assert!(!srv.all_logs().contains(&key), "the key is in the logs");

    // Revocation is immediate.
    let msg = ok_message(&srv.api("DELETE", &format!("/v1/api-keys/{id}"), Some(&f.admin), None));
    assert!(msg.contains(&id), "{msg}");
    err(&srv.api("GET", "/v1/gateways", Some(&key), None), 401, "UNAUTHORIZED");
    err(&srv.api("GET", "/v1/auth/verify", Some(&key), None), 401, "UNAUTHORIZED");
    err(&srv.api("DELETE", &format!("/v1/api-keys/{id}"), Some(&f.admin), None), 404, "NOT_FOUND");
    err(&srv.api("DELETE", "/v1/api-keys/key_does_not_exist", Some(&f.admin), None), 404, "NOT_FOUND");
    err(&srv.api("DELETE", &format!("/v1/api-keys/{id}"), None, None), 401, "UNAUTHORIZED");
}

#[test]
fn api_key_creation_is_validated_and_cannot_escalate() {
    let f = fx();
    let srv = &f.srv;
    let post = |key: &str, body: Value| srv.api("POST", "/v1/api-keys", Some(key), Some(body));
    validation(&post(&f.admin, json!({ "name": "", "scopes": ["gateways:read"] })), "name");
    validation(&post(&f.admin, json!({ "name": "x", "scopes": [] })), "scopes");
    validation(&post(&f.admin, json!({ "name": "x", "scopes": ["gateways:fly"] })), "scopes");
    validation(
        &post(&f.admin, json!({ "name": "x", "scopes": ["gateways:read"], "expires_at": "tomorrow" })),
        "expires_at",
    );
    validation(
        &post(&f.admin, json!({ "name": "x", "scopes": ["gateways:read"], "expires_at": "2001-01-01T00:00:00Z" })),
        "expires_at",
    );
    validation(&post(&f.admin, json!({ "name": "x", "scopes": "gateways:read" })), "scopes");
    // An Admin's key holds everything but billing and team: it cannot hand those out.
    validation(&post(&f.admin, json!({ "name": "x", "scopes": ["billing:manage"] })), "scopes");
    validation(&post(&f.admin, json!({ "name": "x", "scopes": ["*"] })), "scopes");
    // The owner can.
    let k = ok(&post(srv.admin_key(), json!({ "name": "billing", "scopes": ["billing:manage"] })), 201);
    assert_eq!(k["scopes"], json!(["billing:manage"]));
    // Only `admin` may create keys at all (Decision 8).
    err(&post(&f.dev, json!({ "name": "x", "scopes": ["gateways:read"] })), 403, "INSUFFICIENT_SCOPE");
    err(&post(&f.viewer, json!({ "name": "x", "scopes": ["gateways:read"] })), 403, "INSUFFICIENT_SCOPE");
    err(
        &srv.api("POST", "/v1/api-keys", None, Some(json!({ "name": "x", "scopes": ["gateways:read"] }))),
        401,
        "UNAUTHORIZED",
    );

    // expires_at and bypass_ip_whitelist are returned.
    let at = (chrono::Utc::now() + chrono::Duration::days(2)).to_rfc3339();
    let k = ok(
        &post(
            &f.admin,
            json!({ "name": "exp", "scopes": ["gateways:read"], "expires_at": at, "bypass_ip_whitelist": true }),
        ),
        201,
    );
    let got = chrono::DateTime::parse_from_rfc3339(k["expires_at"].as_str().unwrap()).unwrap();
    let want = chrono::DateTime::parse_from_rfc3339(&at).unwrap();
    assert!((got - want).num_milliseconds().abs() < 1000, "{k}");
    assert_eq!(k["bypass_ip_whitelist"], true);
    let v = ok(&srv.api("GET", "/v1/auth/verify", Some(k["key"].as_str().unwrap()), None), 200);
    assert_eq!(v["expires_at"], k["expires_at"], "{v}");
}

#[test]
fn a_viewers_key_with_star_cannot_write() {
    let f = fx();
    let srv = &f.srv;
    let v = ok(&srv.api("GET", "/v1/auth/verify", Some(&f.viewer), None), 200);
    let scopes: Vec<&str> = v["scopes"].as_array().unwrap().iter().map(|s| s.as_str().unwrap()).collect();
    assert!(!scopes.contains(&"*") && !scopes.contains(&"gateways:write"), "effective scopes of a Viewer's `*`: {v}");
    // Every role connects an app for itself (`apps:connect_self`, docs/identity.md); nothing else
    // a Viewer holds writes.
    for s in &scopes {
        assert!(s.ends_with(":read") || *s == "apps:connect_self", "a Viewer holds only :read scopes, got {s}");
    }
    ok(&srv.api("GET", "/v1/gateways", Some(&f.viewer), None), 200);
    err(&srv.api("POST", "/v1/gateways", Some(&f.viewer), Some(json!({ "name": "v" }))), 403, "INSUFFICIENT_SCOPE");
    let r = srv.api("POST", "/v1/apps/time/test", Some(&f.viewer), None);
    err(&r, 403, "INSUFFICIENT_SCOPE");
    err(&srv.api("GET", "/v1/sessions", Some(&f.viewer), None), 403, "INSUFFICIENT_SCOPE");
    // A Developer's `*`: gateways read/write, apps, logs; not delete, not admin.
    let g = ok(&srv.api("POST", "/v1/gateways", Some(&f.dev), Some(json!({ "name": "dev-gw" }))), 201);
    err(
        &srv.api("DELETE", &format!("/v1/gateways/{}", g["id"].as_str().unwrap()), Some(&f.dev), None),
        403,
        "INSUFFICIENT_SCOPE",
    );
    err(
        &srv.api("POST", "/v1/api-keys", Some(&f.dev), Some(json!({"name": "d", "scopes": ["gateways:read"]}))),
        403,
        "INSUFFICIENT_SCOPE",
    );
}

#[test]
fn service_accounts_and_their_keys() {
    let f = fx();
    let srv = &f.srv;
    let post = |body: Value| srv.api("POST", "/v1/service-accounts", Some(&f.admin), Some(body));
    let sa = ok(
        &post(
            json!({ "name": "deployer", "description": "CI", "scopes": ["gateways:read", "gateways:write"], "rate_limit_multiplier": 3 }),
        ),
        201,
    );
    assert_eq!(sa["name"], "deployer");
    assert_eq!(sa["description"], "CI");
    assert_eq!(sa["rate_limit_multiplier"], 3.0);
    let said = sa["id"].as_str().unwrap();
    let dflt = ok(&post(json!({ "name": "default-mult", "scopes": ["gateways:read"] })), 201);
    assert_eq!(dflt["rate_limit_multiplier"], 5.0, "Decision 1: service accounts default to x5");

    err(&post(json!({ "name": "DEPLOYER", "scopes": ["gateways:read"] })), 409, "CONFLICT");
    validation(&post(json!({ "name": "", "scopes": ["gateways:read"] })), "name");
    validation(&post(json!({ "name": "s1", "scopes": [] })), "scopes");
    validation(&post(json!({ "name": "s2", "scopes": ["nope"] })), "scopes");
    validation(&post(json!({ "name": "s3", "scopes": ["billing:manage"] })), "scopes");
    validation(
        &post(json!({ "name": "s4", "scopes": ["gateways:read"], "rate_limit_multiplier": 0 })),
        "rate_limit_multiplier",
    );
    validation(
        &post(json!({ "name": "s5", "scopes": ["gateways:read"], "rate_limit_multiplier": -2 })),
        "rate_limit_multiplier",
    );

    let keys = format!("/v1/service-accounts/{said}/keys");
    let k = ok(&srv.api("POST", &keys, Some(&f.admin), Some(json!({ "name": "ci-1", "expires_in_days": 30 }))), 201);
    let key = k["key"].as_str().unwrap().to_string();
    assert!(key.starts_with("ag_"), "{k}");
    assert_eq!(k["service_account_id"], said);
    let exp = chrono::DateTime::parse_from_rfc3339(k["expires_at"].as_str().unwrap()).unwrap();
    let days = (exp.with_timezone(&chrono::Utc) - chrono::Utc::now()).num_hours();
    assert!((29 * 24..=30 * 24).contains(&days), "expires_in_days 30 gives {exp}");
    let forever = ok(&srv.api("POST", &keys, Some(&f.admin), Some(json!({ "name": "ci-2" }))), 201);
    assert!(forever["expires_at"].is_null(), "{forever}");
    for bad in [0, -1, 3651] {
        let r = srv.api("POST", &keys, Some(&f.admin), Some(json!({ "name": "bad", "expires_in_days": bad })));
        validation(&r, "expires_in_days");
    }
    validation(&srv.api("POST", &keys, Some(&f.admin), Some(json!({ "name": "" }))), "name");
    err(
        &srv.api("POST", "/v1/service-accounts/sa_nope/keys", Some(&f.admin), Some(json!({ "name": "x" }))),
        404,
        "NOT_FOUND",
    );

    // The key acts with the account's scopes and its multiplier.
    ok(&srv.api("GET", "/v1/gateways", Some(&key), None), 200);
    err(&srv.api("GET", "/v1/apps", Some(&key), None), 403, "INSUFFICIENT_SCOPE");
    let r = srv.api("GET", "/v1/auth/debug", Some(&key), None);
    let d = ok(&r, 200);
    assert_eq!(d["credential_type"], "service_account", "{d}");
    assert_eq!(d["service_account_id"], said);
    assert_eq!(d["key_id"], k["id"]);
    assert_eq!(d["rate_limit_multiplier"], 3.0, "{d}");
    assert_eq!(d["organization_id"], "org_acme");
    assert_eq!(d["tier"], "professional");
    assert!(!r.text.contains(&key) && !r.text.contains(&sha256_hex(&key)), "debug shows a secret: {r:?}");
    // Professional: global burst 200, x3.
    let (limit, ..) = rate_limit_headers(&r);
    assert_eq!(limit, 600, "X-RateLimit-Limit of a x3 service-account key on professional: {r:?}");
    let rl = ok(&srv.api("GET", "/v1/rate-limit", Some(&key), None), 200);
    assert_eq!(rl["buckets"]["global"]["limit"], 600, "{rl}");
    let v = ok(&srv.api("GET", "/v1/auth/verify", Some(&key), None), 200);
    assert_eq!(v["expires_at"], k["expires_at"]);
}

#[test]
fn auth_debug_shows_the_caller_and_no_secret() {
    let f = fx();
    let srv = &f.srv;
    let r = srv.api("GET", "/v1/auth/debug", Some(&f.admin), None);
    let d = ok(&r, 200);
    assert_eq!(d["credential_type"], "api_key");
    assert_eq!(d["key_id"], "key_admin");
    assert_eq!(d["user_id"], "usr_admin");
    assert_eq!(d["organization_id"], "org_acme");
    assert_eq!(d["client_ip"], "127.0.0.1");
    assert_eq!(d["tier"], "professional");
    assert!(d["scopes"].is_array());
    for b in ["global", "write", "analytics"] {
        let bucket = &d["buckets"][b];
        for field in ["limit", "remaining", "reset"] {
            assert!(bucket[field].is_u64(), "buckets.{b}.{field}: {d}");
        }
    }
    assert!(!r.text.contains(&f.admin), "debug shows the key");
    assert!(!r.text.contains(&sha256_hex(&f.admin)), "debug shows the key hash");
    err(&srv.api("GET", "/v1/auth/debug", None, None), 401, "UNAUTHORIZED");
    err(&srv.api("GET", "/v1/auth/verify", None, None), 401, "UNAUTHORIZED");
    err(&srv.api("GET", "/v1/auth/verify", Some(&random_key()), None), 401, "UNAUTHORIZED");
}

#[test]
fn v1_and_api_v1_are_the_same_api() {
    let f = fx();
    let srv = &f.srv;
    let g = ok(
        &srv.api(
            "POST",
            "/api/v1/gateways",
            Some(&f.admin),
            Some(json!({ "name": "both-prefixes", "servers": ["time"] })),
        ),
        201,
    );
    let id = g["id"].as_str().unwrap();
    for p in [format!("/gateways/{id}"), "/user".to_string(), "/apps/time".to_string(), "/auth/verify".to_string()] {
        let a = ok(&srv.api("GET", &format!("/v1{p}"), Some(&f.admin), None), 200);
        let b = ok(&srv.api("GET", &format!("/api/v1{p}"), Some(&f.admin), None), 200);
        assert_eq!(a, b, "{p} differs between /v1 and /api/v1");
    }
    err(&srv.api("GET", "/api/v1/gateways/gw_nope", Some(&f.admin), None), 404, "NOT_FOUND");
    validation(&srv.api("GET", "/api/v1/gateways?limit=0", Some(&f.admin), None), "limit");
    ok_message(&srv.api("DELETE", &format!("/api/v1/gateways/{id}"), Some(&f.admin), None));
    err(&srv.api("GET", &format!("/v1/gateways/{id}"), Some(&f.admin), None), 404, "NOT_FOUND");
    let a: Value = srv.client().get(srv.url("/v1/openapi.json")).send().unwrap().json().unwrap();
    let b: Value = srv.client().get(srv.url("/api/v1/openapi.json")).send().unwrap().json().unwrap();
    assert_eq!(a, b);
}

#[test]
fn unknown_paths_are_404_envelopes() {
    let f = fx();
    let srv = &f.srv;
    for p in ["/v1/nope", "/v1/gateways/x/y/z", "/api/v1/nothing", "/nope", "/v2/gateways", "/", "/v1"] {
        err(&srv.api("GET", p, Some(&f.admin), None), 404, "NOT_FOUND");
        err(&srv.api("GET", p, None, None), 404, "NOT_FOUND");
    }
    err(&srv.api("POST", "/v1/nope", Some(&f.admin), Some(json!({}))), 404, "NOT_FOUND");
    // A known path with a method it does not serve is refused in the envelope too.
    let r = srv.api("PUT", "/v1/gateways", Some(&f.admin), Some(json!({})));
    err(&r, 405, "METHOD_NOT_ALLOWED");
}

#[test]
fn health_and_readiness() {
    let srv = &fx().srv;
    for (p, want) in [("/healthz", "ok"), ("/readyz", "ready")] {
        let r = srv.api("GET", p, None, None);
        assert_eq!(r.status, 200, "{r:?}");
        assert_eq!(r.json["status"], want, "{r:?}");
        assert!(r.header("x-request-id").is_some(), "{r:?}");
    }
}

fn normalise(path: &str) -> String {
    // `{gateway_id}` and `{id}` are the same shape.
    let mut out = String::new();
    let mut in_param = false;
    for c in path.chars() {
        match c {
            '{' => {
                in_param = true;
                out.push_str("{}");
            }
            '}' => in_param = false,
            _ if in_param => {}
            _ => out.push(c),
        }
    }
    out
}

fn openapi() -> Value {
    let srv = &fx().srv;
    let r = srv.api("GET", "/v1/openapi.json", None, None);
    assert_eq!(r.status, 200, "{r:?}");
    assert!(r.header("content-type").is_some_and(|c| c.starts_with("application/json")), "{r:?}");
    r.json
}

/// Every (method, path) the router serves, from the route table itself.
fn served() -> Vec<(String, String)> {
    toolgate::api::ROUTES.iter().map(|r| (r.method.to_string(), r.path.to_string())).collect()
}

#[test]
fn openapi_3_1_lists_every_endpoint() {
    let doc = openapi();
    assert!(doc["openapi"].as_str().is_some_and(|v| v.starts_with("3.1")), "not OpenAPI 3.1: {}", doc["openapi"]);
    assert!(doc["info"]["title"].is_string());
    let paths = doc["paths"].as_object().expect("paths");
    let documented: std::collections::HashMap<String, &Value> = paths.iter().map(|(p, v)| (normalise(p), v)).collect();
    let mut missing = Vec::new();
    for (m, p) in served() {
        if p == "/openapi.json" {
            continue; // see openapi_documents_itself
        }
        let want = normalise(&format!("/v1{p}"));
        match documented.get(&want) {
            Some(item) if item.get(m.to_lowercase()).is_some() => {}
            _ => missing.push(format!("{m} /v1{p}")),
        }
    }
    assert!(missing.is_empty(), "served but not in /v1/openapi.json: {missing:?}");
    // And nothing documented that is not served.
    let served: std::collections::HashSet<(String, String)> =
        served().into_iter().map(|(m, p)| (m.to_lowercase(), normalise(&format!("/v1{p}")))).collect();
    for (p, item) in paths {
        for m in item.as_object().unwrap().keys() {
            if ["get", "post", "put", "patch", "delete"].contains(&m.as_str()) {
                assert!(served.contains(&(m.clone(), normalise(p))), "documented but not served: {m} {p}");
            }
        }
    }
}

#[test]
fn openapi_documents_itself() {
    // The brief: the document lists every path of the route table (`ROUTES`); `/openapi.json` is one of them.
    let doc = openapi();
    let paths: Vec<String> = doc["paths"].as_object().unwrap().keys().cloned().collect();
    assert!(paths.iter().any(|p| p == "/v1/openapi.json"), "GET /v1/openapi.json is not in the document: {paths:?}");
}
