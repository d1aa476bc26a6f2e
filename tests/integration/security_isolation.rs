//! Cross-organisation isolation, swept over the route table: for every management path with an
//! `{id}` that names an organisation's resource, each method the server serves there answers 404
//! to the Owner (scope `*`) of another organisation, and the resource is unchanged. The sweep is
//! checked against `toolgate::api::ROUTES`, so a new `{id}` endpoint cannot be added without a row.

use crate::common::*;
use serde_json::{json, Value};
use std::collections::BTreeSet;

/// `{id}` paths that are not an organisation's resource: the app catalogue is the operator's and
/// the same for everyone (an organisation's connection to an app is checked in api_apps.rs; an
/// app's metrics count only the caller's organisation's calls, checked in api_logs.rs).
const SHARED: &[&str] = &[
    "/apps/{id}",
    "/apps/{id}/connect",
    "/apps/{id}/connect/callback",
    "/apps/{id}/connection",
    "/apps/{id}/test",
    "/metrics/app/{id}",
];

/// A body that would be valid for the owner, so that a 404 cannot come from validation.
fn body(method: &str, path: &str) -> Option<Value> {
    Some(match (method, path) {
        ("PATCH", "/gateways/{id}") => json!({ "description": "taken" }),
        ("POST", "/api-keys/{id}/rotate") => json!({ "grace_period_hours": 0 }),
        ("POST", "/service-accounts/{id}/keys") => json!({ "name": "stolen" }),
        ("PATCH", "/team/members/{id}") => json!({ "role": "owner" }),
        _ => return None,
    })
}

/// Signs `email` (whose key is `key`) in through the web pages; returns the web session's id.
fn web_session_of(srv: &TestServer, key: &str, email: &str) -> String {
    let password = "isolation passphrase one";
    ok(&srv.api("PUT", "/v1/user/password", Some(key), Some(json!({ "new_password": password }))), 200);
    let http = reqwest::blocking::Client::builder().redirect(reqwest::redirect::Policy::none()).build().unwrap();
    let page = http.get(srv.url("/auth/signin")).send().unwrap();
    let set = page.headers().get("set-cookie").and_then(|v| v.to_str().ok()).expect("a CSRF cookie").to_string();
    let csrf = set.split(';').next().unwrap().trim_start_matches("toolgate_csrf=").to_string();
    let form = [("csrf", csrf.as_str()), ("email", email), ("password", password), ("next", "")];
    let signed =
        http.post(srv.url("/auth/signin")).header("Cookie", format!("toolgate_csrf={csrf}")).form(&form).send();
    assert_eq!(signed.unwrap().status(), 303, "signed in");
    let listed = ok(&srv.api("GET", "/v1/user/web-sessions", Some(key), None), 200);
    listed["sessions"][0]["id"].as_str().expect("the web session").to_string()
}

#[test]
fn another_organisations_resources_are_404_on_every_id_path() {
    let (a, ya) = declared_key("key_iso_a", "usr_iso_a", &["*"]);
    let (b, yb) = declared_key("key_iso_b", "usr_iso_b", &["*"]);
    let srv = TestServer::start(&format!(
        "rate_limits:\n  unauthenticated: {{ requests_per_hour: 100000, requests_per_minute: 100000, burst: 10000 }}\n\
         organizations:\n  - {{ id: org_iso_a, name: A, tier: enterprise }}\n  - {{ id: org_iso_b, name: B, tier: enterprise }}\n\
         users:\n  - {{ id: usr_iso_a, email: a@iso.test, name: A, role: owner, organization: org_iso_a }}\n\
         \x20 - {{ id: usr_iso_b, email: b@iso.test, name: B, role: owner, organization: org_iso_b }}\n\
         api_keys:\n{ya}{yb}"
    ));
    // One resource of A for each kind of `{id}`.
    let gw = ok(
        &srv.api(
            "POST",
            "/v1/gateways",
            Some(&a),
            Some(json!({ "name": "iso", "description": "A's", "servers": ["time"] })),
        ),
        201,
    );
    let gw_id = gw["id"].as_str().unwrap().to_string();
    let key = ok(
        &srv.api("POST", "/v1/api-keys", Some(&a), Some(json!({ "name": "iso", "scopes": ["gateways:read"] }))),
        201,
    );
    let sa = ok(
        &srv.api("POST", "/v1/service-accounts", Some(&a), Some(json!({ "name": "iso", "scopes": ["gateways:read"] }))),
        201,
    );
    let wl = ok(
        &srv.api(
            "POST",
            "/v1/account/whitelist",
            Some(&a),
            Some(json!({ "ip": "198.51.100.7", "description": "iso" })),
        ),
        201,
    );
    let webhook = ok(
        &srv.api(
            "POST",
            "/v1/webhooks",
            Some(&a),
            Some(json!({ "url": "https://93.184.216.34/hook", "events": ["error.critical"] })),
        ),
        201,
    );
    let alert = ok(
        &srv.api(
            "POST",
            "/v1/alerts",
            Some(&a),
            Some(json!({ "type": "rate_limit", "threshold": 90, "notification": { "slack": "https://93.184.216.34/s" } })),
        ),
        201,
    );
    let oauth_client = ok(
        &srv.api(
            "POST",
            "/v1/oauth/clients",
            Some(&a),
            Some(json!({ "name": "iso", "redirect_uris": ["https://client.example/cb"], "scopes": ["logs:read"] })),
        ),
        201,
    );
    let member = ok(
        &srv.api(
            "POST",
            "/v1/team/members",
            Some(&a),
            Some(json!({ "email": "m@iso.test", "name": "M", "role": "viewer" })),
        ),
        201,
    );
    crate::api_logs::call_time(&srv, &gw_id, gw["api_key"].as_str().unwrap(), &["UTC"]);
    let log = ok(&srv.api("GET", "/v1/logs", Some(&a), None), 200)["logs"][0]["id"].as_str().unwrap().to_string();
    let session = mcp::initialize(&srv, &gw_id, gw["api_key"].as_str().unwrap(), "claude-ai");
    let web_session = web_session_of(&srv, &a, "a@iso.test");
    let id_for = |path: &str| -> String {
        match path {
            p if p.starts_with("/gateways/") || p.starts_with("/metrics/gateway/") => gw_id.clone(),
            p if p.starts_with("/api-keys/") => key["id"].as_str().unwrap().to_string(),
            p if p.starts_with("/service-accounts/") => sa["id"].as_str().unwrap().to_string(),
            p if p.starts_with("/sessions/") => session.clone(),
            p if p.starts_with("/account/whitelist/") => wl["id"].as_str().unwrap().to_string(),
            p if p.starts_with("/webhooks/") => webhook["id"].as_str().unwrap().to_string(),
            p if p.starts_with("/alerts/") => alert["id"].as_str().unwrap().to_string(),
            p if p.starts_with("/user/web-sessions/") => web_session.clone(),
            p if p.starts_with("/oauth/clients/") => oauth_client["client_id"].as_str().unwrap().to_string(),
            p if p.starts_with("/team/members/") => member["id"].as_str().unwrap().to_string(),
            p if p.starts_with("/logs/") => log.clone(),
            other => panic!("no resource of organisation A for {other}: add a row to this sweep"),
        }
    };

    let mut swept = BTreeSet::new();
    for route in toolgate::api::ROUTES {
        let path = &route.path;
        if !path.contains("{id}") || SHARED.contains(path) {
            continue;
        }
        let m = route.method.as_str();
        if !["GET", "POST", "PATCH", "DELETE"].contains(&m) {
            continue;
        }
        let url = format!("/v1{}", path.replace("{id}", &id_for(path)));
        let r = srv.api(m, &url, Some(&b), body(m, path));
        assert_eq!((r.status, r.error_code()), (404, "NOT_FOUND"), "B: {m} {url}: {r:?}");
        swept.insert(format!("{m} {path}"));
    }
    assert!(swept.len() >= 9, "the sweep covered too little: {swept:?}");
    // Nothing of A's changed: every resource is still there and usable.
    let g = ok(&srv.api("GET", &format!("/v1/gateways/{gw_id}"), Some(&a), None), 200);
    assert_eq!(g["description"], "A's", "B's PATCH changed A's gateway");
    ok(&srv.api("GET", &format!("/v1/sessions/{session}"), Some(&a), None), 200);
    ok(&srv.api("GET", "/v1/gateways", Some(key["key"].as_str().unwrap()), None), 200);
    let entries = ok(&srv.api("GET", "/v1/account/whitelist", Some(&a), None), 200);
    assert!(entries.to_string().contains(wl["id"].as_str().unwrap()), "{entries}");
    ok(&srv.api("GET", &format!("/v1/logs/{log}"), Some(&a), None), 200);
    let members = ok(&srv.api("GET", "/v1/team/members", Some(&a), None), 200);
    assert!(members.to_string().contains("\"role\":\"viewer\""), "B changed or removed A's member: {members}");
    let hooks = ok(&srv.api("GET", "/v1/webhooks", Some(&a), None), 200);
    assert!(hooks.to_string().contains(webhook["id"].as_str().unwrap()), "B's DELETE removed A's webhook: {hooks}");
    let alerts = ok(&srv.api("GET", "/v1/alerts", Some(&a), None), 200);
    assert!(alerts.to_string().contains(alert["id"].as_str().unwrap()), "B's DELETE removed A's alert: {alerts}");
    let sessions = ok(&srv.api("GET", "/v1/user/web-sessions", Some(&a), None), 200);
    assert!(sessions.to_string().contains(&web_session), "B's DELETE ended A's web session: {sessions}");
    let client_id = oauth_client["client_id"].as_str().unwrap();
    ok(&srv.api("GET", &format!("/v1/oauth/clients/{client_id}"), Some(&a), None), 200);
    let b_clients = ok(&srv.api("GET", "/v1/oauth/clients", Some(&b), None), 200);
    assert_eq!(b_clients["clients"], json!([]), "B lists A's OAuth client: {b_clients}");
    let b_alerts = ok(&srv.api("GET", "/v1/alerts", Some(&b), None), 200);
    assert_eq!(b_alerts["alerts"], json!([]), "B lists A's alert: {b_alerts}");
}
