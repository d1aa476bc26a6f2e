//! Decision 8, table-driven: for every (method, path) the API serves, a key lacking the
//! endpoint's scope gets 403 INSUFFICIENT_SCOPE and a key holding only that scope does not get
//! a 403 (or 401); endpoints open to any credential refuse none; the role bounds a key's scopes
//! (a Viewer's or a Developer's `*`). The table is written here from DESIGN.md, and checked to
//! cover exactly the route table of the server (`toolgate::api::ROUTES`), so a new endpoint
//! cannot be added without a row.

use crate::common;

use common::*;
use serde_json::{json, Value};
use std::collections::{BTreeSet, HashMap};

#[derive(Debug, Clone, Copy, PartialEq)]
enum Need {
    Public,
    Any,
    Scope(&'static str),
    /// Every scope the user's role allows: `admin` for an Owner, a Developer's or a Viewer's
    /// `*` (one's own password and MFA: they sign in with the whole role).
    WholeRole,
    /// The operator's owner's alone (with `admin`): to every other credential a 404, whatever
    /// its scopes (its own keys are in `spec_literal`).
    Hidden,
}
use Need::*;

/// (method, path shape as in ROUTES, what it needs). From DESIGN.md Decision 8.
const TABLE: &[(&str, &str, Need)] = &[
    ("GET", "/gateways", Scope("gateways:read")),
    ("POST", "/gateways", Scope("gateways:write")),
    ("GET", "/gateways/{id}", Scope("gateways:read")),
    ("PATCH", "/gateways/{id}", Scope("gateways:write")),
    ("DELETE", "/gateways/{id}", Scope("gateways:delete")),
    ("GET", "/gateways/{id}/tool-changes", Scope("gateways:read")),
    ("POST", "/gateways/{id}/tool-changes/{sub_id}/approve", Scope("gateways:write")),
    ("POST", "/gateways/{id}/tool-changes/{sub_id}/reject", Scope("gateways:write")),
    ("GET", "/apps", Scope("apps:read")),
    ("GET", "/apps/{id}", Scope("apps:read")),
    // Every role connects itself (`apps:connect_self`); `apps:write` allows it too.
    ("POST", "/apps/{id}/connect", Scope("apps:connect_self")),
    ("POST", "/apps/{id}/connect/callback", Scope("apps:connect_self")),
    ("DELETE", "/apps/{id}/connection", Scope("apps:connect_self")),
    ("POST", "/apps/{id}/test", Scope("apps:write")),
    ("GET", "/sessions", Scope("sessions:manage")),
    ("GET", "/sessions/{id}", Scope("sessions:manage")),
    ("DELETE", "/sessions/{id}", Scope("sessions:manage")),
    ("GET", "/user", Any),
    ("PATCH", "/user", Any),
    ("PUT", "/user/password", WholeRole),
    ("GET", "/user/web-sessions", Any),
    ("DELETE", "/user/web-sessions/{id}", Any),
    ("GET", "/api-keys", Scope("admin")),
    ("POST", "/api-keys", Scope("admin")),
    ("DELETE", "/api-keys/{id}", Scope("admin")),
    ("POST", "/api-keys/{id}/rotate", Scope("admin")),
    ("GET", "/api-keys/{id}/usage", Scope("admin")),
    ("GET", "/service-accounts", Scope("admin")),
    ("POST", "/service-accounts", Scope("admin")),
    ("POST", "/service-accounts/{id}/keys", Scope("admin")),
    ("DELETE", "/service-accounts/{id}", Scope("admin")),
    // Only an Owner's role holds `team:manage`.
    ("GET", "/team/members", Scope("team:manage")),
    ("POST", "/team/members", Scope("team:manage")),
    ("PATCH", "/team/members/{id}", Scope("team:manage")),
    ("DELETE", "/team/members/{id}", Scope("team:manage")),
    ("PATCH", "/account/security", Scope("admin")),
    ("POST", "/account/whitelist", Scope("admin")),
    ("GET", "/account/whitelist", Scope("admin")),
    ("DELETE", "/account/whitelist/{id}", Scope("admin")),
    ("GET", "/rate-limit", Any),
    ("GET", "/metrics/rate-limits", Scope("logs:read")),
    ("GET", "/logs", Scope("logs:read")),
    ("GET", "/logs/analytics", Scope("logs:read")),
    ("GET", "/logs/{id}", Scope("logs:read")),
    ("GET", "/metrics/gateway/{id}", Scope("logs:read")),
    ("GET", "/metrics/app/{id}", Scope("logs:read")),
    ("GET", "/auth/verify", Any),
    ("GET", "/auth/debug", Any),
    // Turning MFA on or off is account security (a leaked narrow key must not take it over),
    // open to every role with a credential holding all the role allows.
    ("POST", "/auth/mfa/enroll", WholeRole),
    ("POST", "/auth/mfa/activate", WholeRole),
    ("POST", "/auth/mfa/verify", Any),
    ("DELETE", "/auth/mfa", WholeRole),
    ("POST", "/auth/mfa/reset", Scope("admin")),
    ("GET", "/webhooks", Scope("admin")),
    ("POST", "/webhooks", Scope("admin")),
    ("PATCH", "/webhooks/{id}", Scope("admin")),
    ("DELETE", "/webhooks/{id}", Scope("admin")),
    ("GET", "/webhooks/{id}/deliveries", Scope("admin")),
    ("POST", "/webhooks/{id}/rotate-secret", Scope("admin")),
    ("POST", "/webhooks/{id}/test", Scope("admin")),
    ("GET", "/alerts", Scope("admin")),
    ("POST", "/alerts", Scope("admin")),
    ("GET", "/alerts/{id}", Scope("admin")),
    ("DELETE", "/alerts/{id}", Scope("admin")),
    ("GET", "/oauth/clients", Scope("admin")),
    ("POST", "/oauth/clients", Scope("admin")),
    ("GET", "/oauth/clients/{id}", Scope("admin")),
    ("DELETE", "/oauth/clients/{id}", Scope("admin")),
    ("GET", "/audit", Scope("admin")),
    ("GET", "/audit/export", Scope("admin")),
    ("GET", "/audit/key", Scope("admin")),
    // Each operation is checked as if sent alone.
    ("POST", "/batch", Any),
    // The operator's owner only: another holder of `admin` gets 404, and so does a key without.
    ("POST", "/admin/reload", Hidden),
    ("GET", "/openapi.json", Public),
];

const SCOPES: [&str; 11] = [
    "gateways:read",
    "gateways:write",
    "gateways:delete",
    "apps:read",
    "apps:write",
    "apps:connect_self",
    "logs:read",
    "sessions:manage",
    "team:manage",
    "billing:manage",
    "admin",
];

fn id_of(s: &str) -> String {
    s.replace(':', "_")
}

/// A body that the endpoint accepts (so a holder's call does real work, not a 400 only).
fn body(method: &str, path: &str, n: usize) -> Option<Value> {
    Some(match (method, path) {
        ("POST", "/gateways") => json!({ "name": format!("scopes-{n}-{}", random_alnum(8)), "servers": ["time"] }),
        ("PATCH", "/gateways/{id}") => json!({ "description": "scopes" }),
        ("POST", "/apps/{id}/connect") => json!({ "auth_type": "api_key", "credentials": { "api_key": "k" } }),
        ("POST", "/apps/{id}/connect/callback") => json!({ "state": "s", "code": "c" }),
        ("PATCH", "/user") => json!({ "name": format!("Scopes {n}") }),
        ("POST", "/api-keys") => {
            json!({ "name": format!("scopes-{n}-{}", random_alnum(8)), "scopes": ["gateways:read"] })
        }
        ("POST", "/api-keys/{id}/rotate") => json!({ "grace_period_hours": 1 }),
        ("POST", "/service-accounts") => {
            json!({ "name": format!("scopes-{n}-{}", random_alnum(8)), "scopes": ["gateways:read"] })
        }
        ("POST", "/service-accounts/{id}/keys") => json!({ "name": format!("scopes-{n}-{}", random_alnum(8)) }),
        ("PATCH", "/account/security") => json!({ "enforce_ip_whitelist": false }),
        ("POST", "/team/members") => {
            json!({ "email": format!("m{n}-{}@s.test", random_alnum(8)), "name": format!("M {n}"), "role": "viewer" })
        }
        ("PATCH", "/team/members/{id}") => json!({ "role": "developer" }),
        ("POST", "/account/whitelist") => json!({ "ip": format!("10.77.0.{}", n % 250) }),
        ("POST", "/auth/mfa/activate") => json!({ "code": "000000" }),
        ("POST", "/auth/mfa/verify") => json!({ "challenge_id": "mfa_ch_nope", "code": "000000" }),
        ("POST", "/auth/mfa/reset") => json!({ "user_id": "usr_viewer_s" }),
        // A public address literal (no DNS); only error.critical, which these tests never raise.
        ("POST", "/webhooks") => json!({ "url": "https://93.184.216.34/hook", "events": ["error.critical"] }),
        ("POST", "/alerts") => alert_body(),
        ("POST", "/oauth/clients") => oauth_client_body(),
        ("POST", "/batch") => json!({ "operations": [{ "method": "GET", "path": "/v1/rate-limit" }] }),
        ("POST", _) | ("PATCH", _) => json!({}),
        _ => return None,
    })
}

/// A confidential OAuth client.
fn oauth_client_body() -> serde_json::Value {
    json!({ "name": "Scopes app", "redirect_uris": ["https://client.example/cb"], "scopes": ["gateways:read"] })
}

/// An alert notifying a public address literal's Slack-like URL (no DNS, never reached here).
fn alert_body() -> serde_json::Value {
    json!({ "type": "rate_limit", "threshold": 90, "notification": { "slack": "https://93.184.216.34/slack" } })
}

struct Fx {
    srv: TestServer,
    /// Key holding only this scope.
    only: HashMap<&'static str, String>,
    /// Key holding every scope but this one (and but `admin`).
    without: HashMap<&'static str, String>,
    viewer: String,
    developer: String,
    /// Ids of real resources of the organisation, substituted for `{id}`.
    ids: HashMap<&'static str, String>,
}

fn start() -> Fx {
    let mut only = HashMap::new();
    let mut without = HashMap::new();
    let mut yaml_keys = String::new();
    for s in SCOPES {
        let (k, y) = declared_key(&format!("only_{}", id_of(s)), "usr_owner_s", &[s]);
        only.insert(s, k);
        yaml_keys += &y;
        // `admin` implies every scope, so a key lacking any scope lacks `admin` too.
        // `apps:write` allows connecting oneself: a key lacking `apps:connect_self` lacks it too.
        let implies = |x: &str| s == "apps:connect_self" && x == "apps:write";
        let rest: Vec<&str> = SCOPES.iter().copied().filter(|x| *x != s && *x != "admin" && !implies(x)).collect();
        let (k, y) = declared_key(&format!("without_{}", id_of(s)), "usr_owner_s", &rest);
        without.insert(s, k);
        yaml_keys += &y;
    }
    let (viewer, yv) = declared_key("viewer_star", "usr_viewer_s", &["*"]);
    let (developer, yd) = declared_key("developer_star", "usr_dev_s", &["*"]);
    let yaml = format!(
        "rate_limits:\n  unauthenticated: {{ requests_per_hour: 100000, requests_per_minute: 100000, burst: 10000 }}\n\
         \x20 webhook: {{ requests_per_hour: unlimited, requests_per_minute: 100000, burst: 10000 }}\n\
         organizations:\n  - {{ id: org_s, name: Scopes, tier: enterprise }}\n\
         users:\n\
         \x20 - {{ id: usr_owner_s, email: o@s.test, name: O, role: owner, organization: org_s }}\n\
         \x20 - {{ id: usr_viewer_s, email: v@s.test, name: V, role: viewer, organization: org_s }}\n\
         \x20 - {{ id: usr_dev_s, email: d@s.test, name: D, role: developer, organization: org_s }}\n\
         api_keys:\n{yaml_keys}{yv}{yd}"
    );
    let srv = TestServer::start(&yaml);
    Fx { srv, only, without, viewer, developer, ids: HashMap::new() }
}

/// Real resources for the `{id}` paths, made fresh for each call (deletes consume them).
fn real_id(f: &Fx, path: &str, n: usize) -> String {
    let owner = &f.only["admin"];
    match path {
        "/gateways/{id}"
        | "/metrics/gateway/{id}"
        | "/gateways/{id}/tool-changes"
        | "/gateways/{id}/tool-changes/{sub_id}/approve"
        | "/gateways/{id}/tool-changes/{sub_id}/reject" => {
            let r = f.srv.api(
                "POST",
                "/v1/gateways",
                Some(owner),
                Some(json!({ "name": format!("scoped-target-{n}-{}", random_alnum(8)) })),
            );
            ok(&r, 201)["id"].as_str().unwrap().to_string()
        }
        "/api-keys/{id}" | "/api-keys/{id}/rotate" | "/api-keys/{id}/usage" => {
            let r = f.srv.api(
                "POST",
                "/v1/api-keys",
                Some(owner),
                Some(json!({ "name": format!("target-{n}-{}", random_alnum(8)), "scopes": ["gateways:read"] })),
            );
            ok(&r, 201)["id"].as_str().unwrap().to_string()
        }
        "/service-accounts/{id}/keys" => f.ids["sa"].clone(),
        // A deletion takes its account with it: one of its own each time.
        "/service-accounts/{id}" => {
            let body = json!({ "name": format!("sa-target-{n}-{}", random_alnum(8)), "scopes": ["gateways:read"] });
            let r = f.srv.api("POST", "/v1/service-accounts", Some(owner), Some(body));
            ok(&r, 201)["id"].as_str().unwrap().to_string()
        }
        "/apps/{id}"
        | "/apps/{id}/connect"
        | "/apps/{id}/connect/callback"
        | "/apps/{id}/connection"
        | "/apps/{id}/test"
        | "/metrics/app/{id}" => "time".into(),
        "/webhooks/{id}" | "/webhooks/{id}/deliveries" | "/webhooks/{id}/rotate-secret" | "/webhooks/{id}/test" => {
            let body = json!({ "url": "https://93.184.216.34/hook", "events": ["error.critical"] });
            let r = f.srv.api("POST", "/v1/webhooks", Some(owner), Some(body));
            ok(&r, 201)["id"].as_str().unwrap().to_string()
        }
        "/alerts/{id}" => {
            let r = f.srv.api("POST", "/v1/alerts", Some(owner), Some(alert_body()));
            ok(&r, 201)["id"].as_str().unwrap().to_string()
        }
        "/oauth/clients/{id}" => {
            let r = f.srv.api("POST", "/v1/oauth/clients", Some(owner), Some(oauth_client_body()));
            ok(&r, 201)["client_id"].as_str().unwrap().to_string()
        }
        "/team/members/{id}" => {
            let body = json!({ "email": format!("t{n}-{}@s.test", random_alnum(8)), "name": "T", "role": "viewer" });
            let r = f.srv.api("POST", "/v1/team/members", Some(owner), Some(body));
            ok(&r, 201)["id"].as_str().unwrap().to_string()
        }
        "/logs/{id}" => "log_does_not_exist".into(),
        "/sessions/{id}" => "sess_does_not_exist".into(),
        "/user/web-sessions/{id}" => "ws_does_not_exist".into(),
        "/account/whitelist/{id}" => "wl_does_not_exist".into(),
        p if p.contains("{id}") => panic!("no id for {p}"),
        _ => String::new(),
    }
}

fn call(f: &Fx, method: &str, shape: &str, key: Option<&str>, n: usize) -> Resp {
    let id = real_id(f, shape, n);
    // A pending change that does not exist: a holder of the scope gets 404, not a refusal.
    let path = format!("/v1{}", shape.replace("{id}", &id).replace("{sub_id}", "tch_does_not_exist"));
    f.srv.api(method, &path, key, body(method, shape, n))
}

#[test]
fn the_table_covers_every_served_endpoint() {
    let served: BTreeSet<(String, String)> =
        toolgate::api::ROUTES.iter().map(|r| (r.method.to_string(), r.path.to_string())).collect();
    let table: BTreeSet<(String, String)> = TABLE.iter().map(|(m, p, _)| (m.to_string(), p.to_string())).collect();
    assert_eq!(table, served, "the scope table of this test and the server's route table differ");
}

#[test]
fn every_endpoint_enforces_its_scope() {
    let mut f = start();
    let sa = f.srv.api(
        "POST",
        "/v1/service-accounts",
        Some(&f.only["admin"]),
        Some(json!({ "name": "scopes-sa", "scopes": ["gateways:read"] })),
    );
    f.ids.insert("sa", ok(&sa, 201)["id"].as_str().unwrap().to_string());

    let mut failures = Vec::new();
    let mut n = 0;
    for &(method, shape, need) in TABLE {
        n += 1;
        let what = format!("{method} /v1{shape}");
        match need {
            Scope(s) => {
                // Lacking the scope: 403 INSUFFICIENT_SCOPE, whatever else is wrong.
                let r = call(&f, method, shape, Some(&f.without[s]), n);
                if r.status != 403 || r.error_code() != "INSUFFICIENT_SCOPE" {
                    failures.push(format!(
                        "{what} without `{s}`: want 403 INSUFFICIENT_SCOPE, got {} {}",
                        r.status, r.text
                    ));
                } else {
                    check_meta(&r);
                }
                // A key with nothing at all of use.
                let other = if s == "billing:manage" { "team:manage" } else { "billing:manage" };
                let r = call(&f, method, shape, Some(&f.only[other]), n);
                if r.status != 403 || r.error_code() != "INSUFFICIENT_SCOPE" {
                    failures.push(format!("{what} with only `{other}`: want 403, got {} {}", r.status, r.text));
                }
                // Holding exactly that scope: not refused for scope.
                n += 1;
                let r = call(&f, method, shape, Some(&f.only[s]), n);
                if r.status == 403 || r.status == 401 || r.status >= 500 {
                    failures.push(format!("{what} with only `{s}`: got {} {}", r.status, r.text));
                }
                // `*` (an owner's) implies it.
                n += 1;
                let r = call(&f, method, shape, Some(&f.only["admin"]), n);
                if r.status == 403 || r.status == 401 || r.status >= 500 {
                    failures.push(format!("{what} with `admin`: got {} {}", r.status, r.text));
                }
            }
            WholeRole => {
                // The Owner's keys: lacking `admin` (even with every other scope) is refused.
                for lacking in ["admin", "gateways:read"] {
                    let k = if lacking == "admin" { &f.without["admin"] } else { &f.only["gateways:read"] };
                    let r = call(&f, method, shape, Some(k), n);
                    if r.status != 403 || r.error_code() != "INSUFFICIENT_SCOPE" || !r.text.contains("`admin`") {
                        failures.push(format!(
                            "{what} (whole role) lacking `{lacking}`: want 403, got {} {}",
                            r.status, r.text
                        ));
                    }
                }
                n += 1;
                let r = call(&f, method, shape, Some(&f.only["admin"]), n);
                if r.status == 403 || r.status == 401 || r.status >= 500 {
                    failures.push(format!("{what} (whole role) with `admin`: got {} {}", r.status, r.text));
                }
            }
            Any => {
                for s in ["billing:manage", "gateways:read"] {
                    n += 1;
                    let r = call(&f, method, shape, Some(&f.only[s]), n);
                    if r.status == 403 || r.status == 401 || r.status >= 500 {
                        failures.push(format!("{what} (any credential) with only `{s}`: got {} {}", r.status, r.text));
                    }
                }
                let r = call(&f, method, shape, None, n);
                if r.status != 401 {
                    failures.push(format!("{what} without a credential: want 401, got {} {}", r.status, r.text));
                }
            }
            Hidden => {
                for s in ["billing:manage", "admin"] {
                    n += 1;
                    let r = call(&f, method, shape, Some(&f.only[s]), n);
                    if r.status != 404 || r.error_code() != "NOT_FOUND" {
                        failures
                            .push(format!("{what} with only `{s}`: want 404 NOT_FOUND, got {} {}", r.status, r.text));
                    }
                }
                let r = call(&f, method, shape, None, n);
                if r.status != 401 {
                    failures.push(format!("{what} without a credential: want 401, got {} {}", r.status, r.text));
                }
            }
            Public => {
                let r = call(&f, method, shape, None, n);
                if r.status != 200 {
                    failures.push(format!("{what} (public): want 200, got {} {}", r.status, r.text));
                }
            }
        }
        // Every non-public endpoint needs a credential first.
        if need != Public {
            let r = call(&f, method, shape, Some(&random_key()), n);
            if r.status != 401 {
                failures.push(format!("{what} with an unknown key: want 401, got {} {}", r.status, r.text));
            }
        }
    }
    assert!(failures.is_empty(), "{} scope failures:\n{}", failures.len(), failures.join("\n"));
}

#[test]
fn role_bounds_a_star_key() {
    let f = start();
    // Every role connects itself to an app connected by each user.
    let viewer_may = |s: &str| s.ends_with(":read") || s == "apps:connect_self";
    let developer_may = |s: &str| {
        ["gateways:read", "gateways:write", "apps:read", "apps:write", "logs:read", "apps:connect_self"].contains(&s)
    };
    let mut failures = Vec::new();
    let mut n = 1000;
    let mut f = f;
    let sa = f.srv.api(
        "POST",
        "/v1/service-accounts",
        Some(&f.only["admin"]),
        Some(json!({ "name": "roles-sa", "scopes": ["gateways:read"] })),
    );
    f.ids.insert("sa", ok(&sa, 201)["id"].as_str().unwrap().to_string());
    for &(method, shape, need) in TABLE {
        // A Developer's or a Viewer's `*` holds all its role allows: it sets its own password and MFA.
        let (s, whole) = match need {
            Scope(s) => (s, false),
            WholeRole => ("the whole role", true),
            _ => continue,
        };
        for (who, key, may) in
            [("Viewer", &f.viewer, whole || viewer_may(s)), ("Developer", &f.developer, whole || developer_may(s))]
        {
            n += 1;
            let r = call(&f, method, shape, Some(key), n);
            let refused = r.status == 403 && r.error_code() == "INSUFFICIENT_SCOPE";
            if may == refused {
                failures.push(format!(
                    "{who}'s `*` key on {method} /v1{shape} (needs {s}): {} {}",
                    r.status,
                    if may { "refused" } else { "allowed" }
                ));
            }
        }
    }
    assert!(failures.is_empty(), "{}", failures.join("\n"));
}
