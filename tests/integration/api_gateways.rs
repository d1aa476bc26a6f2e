//! `/v1/gateways`: list (pagination, sorting, validation), detail, create, patch, delete, with
//! their 400/401/403/404/409 paths, and cross-organisation isolation of gateways, keys,
//! service accounts and MCP sessions. One server for the whole file; each test works in its
//! own organisation where counts matter.

use crate::common;

use common::*;
use serde_json::{json, Value};
use std::sync::OnceLock;
use std::thread::sleep;
use std::time::Duration;

struct Fx {
    srv: TestServer,
    /// Admin (role) with `*`, organisation A.
    a: String,
    /// Admin with `*`, organisation B.
    b: String,
    /// Owner of an organisation used only by the list test.
    list: String,
    /// Viewer of organisation A, key with `*`.
    viewer: String,
}

fn fx() -> &'static Fx {
    static FX: OnceLock<Fx> = OnceLock::new();
    FX.get_or_init(|| {
        let (a, ya) = declared_key("key_a", "usr_a", &["*"]);
        let (b, yb) = declared_key("key_b", "usr_b", &["*"]);
        let (list, yl) = declared_key("key_list", "usr_list", &["*"]);
        let (viewer, yv) = declared_key("key_a_viewer", "usr_a_viewer", &["*"]);
        let yaml = format!(
            "rate_limits:\n  unauthenticated: {{ requests_per_hour: 100000, requests_per_minute: 100000, burst: 10000 }}\n\
             organizations:\n\
             \x20 - {{ id: org_a, name: Acme, tier: professional }}\n\
             \x20 - {{ id: org_b, name: Globex, tier: professional }}\n\
             \x20 - {{ id: org_list, name: Lister, tier: professional }}\n\
             users:\n\
             \x20 - {{ id: usr_a, email: a@acme.test, name: Alice, role: admin, organization: org_a }}\n\
             \x20 - {{ id: usr_a_viewer, email: v@acme.test, name: Vic, role: viewer, organization: org_a }}\n\
             \x20 - {{ id: usr_b, email: b@globex.test, name: Bob, role: admin, organization: org_b }}\n\
             \x20 - {{ id: usr_list, email: l@list.test, name: Lee, role: owner, organization: org_list }}\n\
             api_keys:\n{ya}{yb}{yl}{yv}"
        );
        let srv = TestServer::start(&yaml);
        reap_on_exit(&srv);
        Fx { srv, a, b, list, viewer }
    })
}

fn create(srv: &TestServer, key: &str, body: Value) -> Value {
    let r = srv.api("POST", "/v1/gateways", Some(key), Some(body));
    ok(&r, 201)
}

fn names(data: &Value) -> Vec<String> {
    data["gateways"]
        .as_array()
        .expect("gateways array")
        .iter()
        .map(|g| g["name"].as_str().unwrap().to_string())
        .collect()
}

#[test]
fn list_defaults_sorting_and_pagination() {
    let f = fx();
    let (srv, k) = (&f.srv, f.list.as_str());
    for name in ["charlie", "Alpha", "bravo"] {
        create(srv, k, json!({ "name": name, "servers": ["time"] }));
        sleep(Duration::from_millis(15)); // distinct created_at (milliseconds)
    }

    // Defaults: page 1, limit 20, created_at desc.
    let d = ok(&srv.api("GET", "/v1/gateways", Some(k), None), 200);
    assert_eq!(names(&d), ["bravo", "Alpha", "charlie"], "default order is created_at desc: {d}");
    let p = &d["pagination"];
    assert_eq!((p["page"].as_u64(), p["limit"].as_u64(), p["total"].as_u64()), (Some(1), Some(20), Some(3)), "{p}");
    assert_eq!(p["has_next"], json!(false));
    assert_eq!(p["has_prev"], json!(false));
    // List view: servers as ids, functions_count, status.
    for g in d["gateways"].as_array().unwrap() {
        assert_eq!(g["servers"], json!(["time"]), "{g}");
        assert_eq!(g["functions_count"].as_u64(), Some(1), "the time app has one function: {g}");
        assert_eq!(g["status"], "active", "{g}");
        let id = g["id"].as_str().unwrap();
        assert_eq!(g["endpoint"].as_str().unwrap(), format!("http://localhost:8080/gateway/{id}/mcp"));
        for f in ["created_at", "updated_at"] {
            assert!(chrono::DateTime::parse_from_rfc3339(g[f].as_str().unwrap()).is_ok(), "{f}: {g}");
        }
        assert!(g.get("api_key").is_none(), "the access key is never listed: {g}");
    }

    let get = |q: &str| ok(&srv.api("GET", &format!("/v1/gateways?{q}"), Some(k), None), 200);
    assert_eq!(names(&get("sort=name&order=asc")), ["Alpha", "bravo", "charlie"]);
    assert_eq!(names(&get("sort=name")), ["charlie", "bravo", "Alpha"], "order defaults to desc");
    assert_eq!(names(&get("sort=created_at&order=asc")), ["charlie", "Alpha", "bravo"]);

    let page2 = get("sort=created_at&order=asc&limit=2&page=2");
    assert_eq!(names(&page2), ["bravo"]);
    let p = &page2["pagination"];
    assert_eq!((p["page"].as_u64(), p["limit"].as_u64(), p["total"].as_u64()), (Some(2), Some(2), Some(3)), "{p}");
    assert_eq!(p["pages"].as_u64(), Some(2), "{p}");
    assert_eq!((p["has_next"].clone(), p["has_prev"].clone()), (json!(false), json!(true)), "{p}");
    let page1 = get("sort=created_at&order=asc&limit=2&page=1");
    assert_eq!(names(&page1), ["charlie", "Alpha"]);
    assert_eq!(page1["pagination"]["has_next"], json!(true));
    assert_eq!(names(&get("page=5")), Vec::<String>::new(), "a page past the end is empty, not an error");
    assert_eq!(get("limit=100")["pagination"]["limit"].as_u64(), Some(100), "100 is the maximum and is allowed");
    assert_eq!(get("limit=1")["gateways"].as_array().unwrap().len(), 1);

    // updated_at: patching the oldest makes it the most recently updated.
    let charlie = get("sort=name&order=desc")["gateways"][0]["id"].as_str().unwrap().to_string();
    ok(&srv.api("PATCH", &format!("/v1/gateways/{charlie}"), Some(k), Some(json!({"description": "touched"}))), 200);
    assert_eq!(names(&get("sort=updated_at"))[0], "charlie");
    assert_eq!(names(&get("sort=updated_at&order=asc"))[2], "charlie");

    // Decision 11: bad pagination is a 400 naming the field.
    for (q, field) in [
        ("limit=0", "limit"),
        ("limit=101", "limit"),
        ("limit=-1", "limit"),
        ("limit=ten", "limit"),
        ("page=abc", "page"),
        ("page=0", "page"),
        ("page=1.5", "page"),
        ("sort=size", "sort"),
        ("order=up", "order"),
    ] {
        let r = srv.api("GET", &format!("/v1/gateways?{q}"), Some(k), None);
        validation(&r, field);
    }
}

#[test]
fn create_returns_key_and_endpoint_and_validates() {
    let f = fx();
    let (srv, k) = (&f.srv, f.a.as_str());
    let d = create(
        srv,
        k,
        json!({
            "name": "create-ok", "description": "made by a test", "servers": ["time"],
            "allowed_tools": { "time": "*" },
            "configuration": { "rate_limit": 77, "cache_ttl": 12, "cache_enabled": false }
        }),
    );
    let id = d["id"].as_str().unwrap();
    assert_eq!(d["name"], "create-ok");
    let api_key = d["api_key"].as_str().unwrap();
    assert!(api_key.starts_with("ag_") && api_key.len() >= 35, "gateway access key `{api_key}`");
    assert_eq!(d["endpoint"].as_str().unwrap(), format!("http://localhost:8080/gateway/{id}/mcp"));
    assert!(chrono::DateTime::parse_from_rfc3339(d["created_at"].as_str().unwrap()).is_ok(), "{d}");

    // Side effects: it is there, with what was asked; the key is never shown again.
    let r = srv.api("GET", &format!("/v1/gateways/{id}"), Some(k), None);
    let g = ok(&r, 200);
    assert_eq!(g["description"], "made by a test");
    assert_eq!(g["configuration"]["rate_limit"], 77, "{g}");
    assert_eq!(g["configuration"]["cache_ttl"], 12, "{g}");
    assert_eq!(g["configuration"]["cache_enabled"], false, "{g}");
    assert_eq!(g["allowed_tools"], json!({ "time": "*" }));
    assert!(!r.text.contains(api_key), "detail must not show the access key");
    let r = srv.api("GET", "/v1/gateways?limit=100", Some(k), None);
    assert!(!r.text.contains(api_key), "list must not show the access key");
    // The access key is bound to the gateway's MCP endpoint: not a management credential.
    err(&srv.api("GET", "/v1/gateways", Some(api_key), None), 401, "UNAUTHORIZED");

    // A gateway with no servers is allowed (servers default to none).
    let bare = create(srv, k, json!({ "name": "create-bare" }));
    let g = ok(&srv.api("GET", &format!("/v1/gateways/{}", bare["id"].as_str().unwrap()), Some(k), None), 200);
    assert_eq!(g["servers"], json!([]));

    // 409: the name is unique per organisation (case-insensitively), not across them.
    err(&srv.api("POST", "/v1/gateways", Some(k), Some(json!({"name": "create-ok"}))), 409, "CONFLICT");
    err(&srv.api("POST", "/v1/gateways", Some(k), Some(json!({"name": "CREATE-OK"}))), 409, "CONFLICT");
    create(srv, &f.b, json!({ "name": "create-ok" }));

    // 400s, each naming the field.
    let post = |body: Value| srv.api("POST", "/v1/gateways", Some(k), Some(body));
    validation(&post(json!({ "name": "" })), "name");
    validation(&post(json!({ "name": "   " })), "name");
    validation(&post(json!({ "name": "x".repeat(101) })), "name");
    validation(&post(json!({ "name": "bad-server", "servers": ["time", "nope"] })), "servers[1]");
    validation(
        &post(json!({ "name": "bad-tools", "servers": ["time"], "allowed_tools": { "other": "*" } })),
        "allowed_tools.other",
    );
    validation(
        &post(json!({ "name": "bad-star", "servers": ["time"], "allowed_tools": { "time": "all" } })),
        "allowed_tools.time",
    );
    validation(&post(json!({ "name": "bad-rl", "configuration": { "rate_limit": 0 } })), "configuration.rate_limit");
    validation(&post(json!({ "name": 5 })), "name");
    let e = err(&post(json!({ "name": "extra", "colour": "red" })), 400, "VALIDATION_ERROR");
    assert!(e["details"]["field"].is_string(), "{e}");
    let r = srv
        .client()
        .post(srv.url("/v1/gateways"))
        .bearer_auth(k)
        .header("content-type", "application/json")
        .body("{not json")
        .send()
        .unwrap();
    let r = Resp::from_blocking(r);
    err(&r, 400, "VALIDATION_ERROR");
    // None of the refused creates left a gateway behind.
    let all = ok(&srv.api("GET", "/v1/gateways?limit=100", Some(k), None), 200);
    for n in names(&all) {
        assert!(!n.starts_with("bad-") && n != "extra", "a refused create was stored: {n}");
    }
}

#[test]
fn create_without_name_names_the_field() {
    // The spec: `name` is required on create; Decision 7: VALIDATION_ERROR names the field.
    let f = fx();
    let r = f.srv.api("POST", "/v1/gateways", Some(&f.a), Some(json!({ "servers": ["time"] })));
    validation(&r, "name");
    // An empty body reads as `{}`: name is missing too.
    let r = f.srv.request("POST", "/v1/gateways", Some(&f.a), None, &[("content-type", "application/json")]);
    validation(&r, "name");
}

#[test]
fn detail_shows_servers_with_functions_and_metrics() {
    let f = fx();
    let (srv, k) = (&f.srv, f.a.as_str());
    let all = create(srv, k, json!({ "name": "detail-all", "servers": ["time"] }));
    let none = create(srv, k, json!({ "name": "detail-none", "servers": ["time"], "allowed_tools": { "time": [] } }));

    let g = ok(&srv.api("GET", &format!("/v1/gateways/{}", all["id"].as_str().unwrap()), Some(k), None), 200);
    assert_eq!(g["id"], all["id"]);
    assert_eq!(g["status"], "active");
    assert_eq!(
        g["servers"],
        json!([{ "id": "time", "name": "Time", "status": "connected", "functions": ["get_current_time"] }]),
        "servers are objects in the detail view: {g}"
    );
    for m in ["requests_today", "errors_today", "avg_response_time"] {
        assert!(g["metrics"][m].is_u64(), "metrics.{m} must be an integer: {g}");
    }
    for c in ["rate_limit", "cache_ttl"] {
        assert!(g["configuration"][c].is_u64(), "configuration.{c}: {g}");
    }
    assert!(g["configuration"]["cache_enabled"].is_boolean(), "{g}");
    assert!(g["allowed_tools"].is_object(), "{g}");

    let g = ok(&srv.api("GET", &format!("/v1/gateways/{}", none["id"].as_str().unwrap()), Some(k), None), 200);
    assert_eq!(g["servers"][0]["functions"], json!([]), "allowed_tools filters the functions: {g}");

    err(&srv.api("GET", "/v1/gateways/gw_does_not_exist", Some(k), None), 404, "NOT_FOUND");
}

#[test]
fn patch_updates_and_validates() {
    let f = fx();
    let (srv, k) = (&f.srv, f.a.as_str());
    let d = create(srv, k, json!({ "name": "patch-me", "servers": ["time"] }));
    create(srv, k, json!({ "name": "patch-taken" }));
    let id = d["id"].as_str().unwrap();
    let path = format!("/v1/gateways/{id}");
    let before = ok(&srv.api("GET", &path, Some(k), None), 200);
    sleep(Duration::from_millis(10)); // a later updated_at (milliseconds)

    let g = ok(
        &srv.api(
            "PATCH",
            &path,
            Some(k),
            Some(json!({
                "name": "patched", "description": "new words", "allowed_tools": { "time": ["get_current_time"] },
                "configuration": { "cache_ttl": 5 }
            })),
        ),
        200,
    );
    assert_eq!(g["name"], "patched");
    assert_eq!(g["description"], "new words");
    assert_eq!(g["allowed_tools"], json!({ "time": ["get_current_time"] }));
    assert_eq!(g["configuration"]["cache_ttl"], 5);
    assert_eq!(g["created_at"], before["created_at"], "created_at never changes");
    assert_ne!(g["updated_at"], before["updated_at"], "updated_at moves on a change");
    // The change is stored, not just echoed.
    let again = ok(&srv.api("GET", &path, Some(k), None), 200);
    assert_eq!(again["name"], "patched");
    assert_eq!(again["configuration"]["cache_ttl"], 5);
    assert_eq!(again["configuration"]["rate_limit"], before["configuration"]["rate_limit"], "untouched fields stay");

    // Same name as itself is fine; another gateway's name is a 409.
    ok(&srv.api("PATCH", &path, Some(k), Some(json!({ "name": "PATCHED" }))), 200);
    err(&srv.api("PATCH", &path, Some(k), Some(json!({ "name": "patch-taken" }))), 409, "CONFLICT");
    validation(&srv.api("PATCH", &path, Some(k), Some(json!({ "name": "" }))), "name");
    validation(&srv.api("PATCH", &path, Some(k), Some(json!({ "servers": ["nope"] }))), "servers[0]");
    validation(
        &srv.api("PATCH", &path, Some(k), Some(json!({ "allowed_tools": { "nope": "*" } }))),
        "allowed_tools.nope",
    );
    validation(
        &srv.api("PATCH", &path, Some(k), Some(json!({ "configuration": { "rate_limit": 0 } }))),
        "configuration.rate_limit",
    );
    // Refused patches changed nothing.
    let after = ok(&srv.api("GET", &path, Some(k), None), 200);
    assert_eq!(after["name"], "PATCHED");
    assert_eq!(after["servers"][0]["id"], "time");

    // Removing an app drops its allowed_tools entry.
    let g = ok(&srv.api("PATCH", &path, Some(k), Some(json!({ "servers": [] }))), 200);
    assert_eq!(g["servers"], json!([]));
    assert_eq!(g["allowed_tools"], json!({}));

    err(&srv.api("PATCH", "/v1/gateways/gw_nope", Some(k), Some(json!({ "name": "x" }))), 404, "NOT_FOUND");
}

#[test]
fn delete_removes_gateway_and_its_access_key() {
    let f = fx();
    let (srv, k) = (&f.srv, f.a.as_str());
    let d = create(srv, k, json!({ "name": "delete-me", "servers": ["time"] }));
    let id = d["id"].as_str().unwrap();
    let gw_key = d["api_key"].as_str().unwrap();
    let path = format!("/v1/gateways/{id}");

    let msg = ok_message(&srv.api("DELETE", &path, Some(k), None));
    assert!(msg.contains(id), "message names the gateway: {msg}");
    err(&srv.api("GET", &path, Some(k), None), 404, "NOT_FOUND");
    err(&srv.api("DELETE", &path, Some(k), None), 404, "NOT_FOUND");
    err(&srv.api("PATCH", &path, Some(k), Some(json!({"name": "zombie"}))), 404, "NOT_FOUND");
    let all = ok(&srv.api("GET", "/v1/gateways?limit=100", Some(k), None), 200);
    assert!(!names(&all).contains(&"delete-me".to_string()));
    // The name is free again.
    create(srv, k, json!({ "name": "delete-me" }));

    // The gateway's access key died with it.
    let r = mcp::initialize_raw(srv, id, gw_key, "t");
    assert_eq!(r.status, 401, "a deleted gateway's key is refused: {}", r.body);
}

#[test]
fn credentials_are_required_and_checked() {
    let f = fx();
    let srv = &f.srv;
    for path in ["/v1/gateways", "/v1/gateways/gw_x", "/api/v1/gateways"] {
        err(&srv.api("GET", path, None, None), 401, "UNAUTHORIZED");
        err(&srv.api("GET", path, Some(&random_key()), None), 401, "UNAUTHORIZED");
        let r = srv.request("GET", path, None, None, &[("authorization", "Basic dXNlcjpwYXNz")]);
        err(&r, 401, "UNAUTHORIZED");
        let r = srv.request("GET", path, None, None, &[("authorization", "Bearer")]);
        err(&r, 401, "UNAUTHORIZED");
    }
    err(&srv.api("POST", "/v1/gateways", None, Some(json!({"name": "anon"}))), 401, "UNAUTHORIZED");
    err(&srv.api("DELETE", "/v1/gateways/gw_x", None, None), 401, "UNAUTHORIZED");
    // ?api_key= is accepted as well (and a bad one refused).
    let r = srv.api("GET", &format!("/v1/gateways?api_key={}", f.a), None, None);
    ok(&r, 200);
    err(&srv.api("GET", &format!("/v1/gateways?api_key={}", random_key()), None, None), 401, "UNAUTHORIZED");
    // A viewer can read but not write, whatever the key's scopes say (role intersection).
    ok(&srv.api("GET", "/v1/gateways", Some(&f.viewer), None), 200);
    let e = err(
        &srv.api("POST", "/v1/gateways", Some(&f.viewer), Some(json!({"name": "by-viewer"}))),
        403,
        "INSUFFICIENT_SCOPE",
    );
    assert!(e["message"].as_str().unwrap().contains("gateways:write"), "{e}");
    err(&srv.api("POST", "/v1/gateways", Some(&f.viewer), Some(json!({"name": ""}))), 403, "INSUFFICIENT_SCOPE");
}

#[test]
fn another_organisations_resources_are_not_found() {
    let f = fx();
    let (srv, a, b) = (&f.srv, f.a.as_str(), f.b.as_str());
    let g = create(srv, a, json!({ "name": "iso-a", "servers": ["time"] }));
    let id = g["id"].as_str().unwrap();
    let path = format!("/v1/gateways/{id}");

    // Gateways: 404 (never 403) for every verb; lists never show it.
    err(&srv.api("GET", &path, Some(b), None), 404, "NOT_FOUND");
    err(&srv.api("PATCH", &path, Some(b), Some(json!({ "name": "stolen" }))), 404, "NOT_FOUND");
    err(&srv.api("DELETE", &path, Some(b), None), 404, "NOT_FOUND");
    let lb = srv.api("GET", "/v1/gateways?limit=100", Some(b), None);
    ok(&lb, 200);
    assert!(!lb.text.contains(id), "B's list shows A's gateway: {lb:?}");
    // Even the admin of another organisation (the bootstrap owner, scope *) does not see it.
    err(&srv.api("GET", &path, Some(srv.admin_key()), None), 404, "NOT_FOUND");
    let detail = ok(&srv.api("GET", &path, Some(a), None), 200);
    assert_eq!(detail["name"], "iso-a", "B's attempts changed nothing");
    // A's gateway access key cannot be used on a gateway of B.
    let gb = create(srv, b, json!({ "name": "iso-b", "servers": ["time"] }));
    let r = mcp::initialize_raw(srv, gb["id"].as_str().unwrap(), g_key(&g), "t");
    assert_eq!(r.status, 401, "A's gateway key on B's gateway: {}", r.body);

    // API keys.
    let k = ok(
        &srv.api("POST", "/v1/api-keys", Some(a), Some(json!({ "name": "iso key", "scopes": ["gateways:read"] }))),
        201,
    );
    let kid = k["id"].as_str().unwrap();
    err(&srv.api("GET", &format!("/v1/api-keys/{kid}/usage"), Some(b), None), 404, "NOT_FOUND");
    err(
        &srv.api("POST", &format!("/v1/api-keys/{kid}/rotate"), Some(b), Some(json!({ "grace_period_hours": 0 }))),
        404,
        "NOT_FOUND",
    );
    err(&srv.api("DELETE", &format!("/v1/api-keys/{kid}"), Some(b), None), 404, "NOT_FOUND");
    ok(&srv.api("GET", "/v1/gateways", Some(k["key"].as_str().unwrap()), None), 200);
    ok(&srv.api("GET", &format!("/v1/api-keys/{kid}/usage"), Some(a), None), 200);

    // Service accounts.
    let sa = ok(
        &srv.api(
            "POST",
            "/v1/service-accounts",
            Some(a),
            Some(json!({ "name": "iso-sa", "scopes": ["gateways:read"] })),
        ),
        201,
    );
    let said = sa["id"].as_str().unwrap();
    err(
        &srv.api("POST", &format!("/v1/service-accounts/{said}/keys"), Some(b), Some(json!({ "name": "x" }))),
        404,
        "NOT_FOUND",
    );
    // The same name in another organisation is not a conflict.
    ok(
        &srv.api(
            "POST",
            "/v1/service-accounts",
            Some(b),
            Some(json!({ "name": "iso-sa", "scopes": ["gateways:read"] })),
        ),
        201,
    );

    // MCP sessions.
    let sid = mcp::initialize(srv, id, g_key(&g), "claude-ai");
    let la = ok(&srv.api("GET", "/v1/sessions", Some(a), None), 200);
    assert!(la["sessions"].as_array().unwrap().iter().any(|s| s["id"] == sid), "A sees its session: {la}");
    let lb = srv.api("GET", "/v1/sessions", Some(b), None);
    ok(&lb, 200);
    assert!(!lb.text.contains(&sid), "B's session list shows A's session: {lb:?}");
    err(&srv.api("GET", &format!("/v1/sessions/{sid}"), Some(b), None), 404, "NOT_FOUND");
    err(&srv.api("DELETE", &format!("/v1/sessions/{sid}"), Some(b), None), 404, "NOT_FOUND");
    let s = ok(&srv.api("GET", &format!("/v1/sessions/{sid}"), Some(a), None), 200);
    assert_eq!(s["gateway_id"], id);
    assert_eq!(s["status"], "active", "B's DELETE did not end it: {s}");
    ok_message(&srv.api("DELETE", &format!("/v1/sessions/{sid}"), Some(a), None));
}

fn g_key(g: &Value) -> &str {
    g["api_key"].as_str().unwrap()
}

#[test]
fn the_apps_per_gateway_cap_is_a_configuration_key() {
    // The default (50) is the OpenAPI document's `maxItems`; `limits.gateway_max_servers` moves
    // it, here down to 2 so that three apps are one too many.
    let apps: String = (1..=2)
        .map(|i| format!("  - {{ id: clock{i}, name: Clock {i}, description: Time again, category: utilities, builtin: time }}\n"))
        .collect();
    let srv = TestServer::start(&format!("{apps}limits:\n  gateway_max_servers: 2\n"));
    let k = srv.admin_key();
    let post = |name: &str, servers: &[&str]| {
        srv.api("POST", "/v1/gateways", Some(k), Some(json!({ "name": name, "servers": servers })))
    };
    let e = validation(&post("three", &["time", "clock1", "clock2"]), "servers");
    assert!(e["message"].as_str().unwrap_or_default().contains("at most 2 apps"), "{e}");
    let g = ok(&post("two", &["time", "clock1"]), 201);
    let id = g["id"].as_str().unwrap();
    let patch = |servers: &[&str]| {
        srv.api("PATCH", &format!("/v1/gateways/{id}"), Some(k), Some(json!({ "servers": servers })))
    };
    validation(&patch(&["time", "clock1", "clock2"]), "servers");
    ok(&patch(&["clock1", "clock2"]), 200);
    // Out of range (0) is refused at start: `conf_files`.
}
