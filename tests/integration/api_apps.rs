//! `/v1/apps`: the catalogue (filters), detail with functions discovered from the real app,
//! connect with an API key (credentials never shown again, encrypted at rest) and with OAuth
//! (authorization URL), disconnect, and the live test. The app with credentials is the
//! reference MCP server `server-everything`; organisations keep their connections apart.

use crate::common;

use common::*;
use serde_json::{json, Value};
use std::sync::OnceLock;

struct Fx {
    srv: TestServer,
    _everything: Peer,
    /// One organisation per test that changes connections, so tests do not race.
    keys: std::collections::HashMap<&'static str, String>,
}

const ORGS: [&str; 4] = ["list", "conn", "oauth", "other"];

fn fx() -> &'static Fx {
    static FX: OnceLock<Fx> = OnceLock::new();
    FX.get_or_init(|| {
        let everything = spawn_everything();
        reap_peer_on_exit(&everything);
        let mut keys = std::collections::HashMap::new();
        let (mut orgs, mut users, mut key_yaml) = (String::new(), String::new(), String::new());
        for o in ORGS {
            orgs += &format!("  - {{ id: org_{o}, name: Org {o}, tier: professional }}\n");
            users += &format!("  - {{ id: usr_{o}, email: {o}@t.test, name: U {o}, role: admin, organization: org_{o} }}\n");
            let (k, y) = declared_key(&format!("key_{o}"), &format!("usr_{o}"), &["*"]);
            key_yaml += &y;
            keys.insert(o, k);
        }
        let yaml = format!(
            "  - id: everything\n    name: Everything\n    description: The reference MCP server\n    \
             long_description: Every MCP feature, for tests.\n    category: testing\n    icon: https://icons.test/e.svg\n    \
             auth_types: [api_key, oauth]\n    url: {url}\n    rate_limit: 120\n    oauth:\n      \
             authorize_url: https://auth.example.test/oauth/authorize\n      token_url: https://auth.example.test/oauth/token\n      \
             client_id: toolgate-test-client\n      scopes: [tools, read]\n\
             \x20 - id: labs\n    name: Labs\n    description: Experimental things\n    category: labs\n    status: beta\n    \
             auth_types: [api_key]\n    url: http://127.0.0.1:9/mcp\n\
             rate_limits:\n  unauthenticated: {{ requests_per_hour: 100000, requests_per_minute: 100000, burst: 10000 }}\n\
             organizations:\n{orgs}users:\n{users}api_keys:\n{key_yaml}",
            url = everything_url(&everything)
        );
        // BASE_CONFIG ends inside `apps:`, so the two apps above join the built-in time app.
        let srv = TestServer::start(&yaml);
        reap_on_exit(&srv);
        Fx { srv, _everything: everything, keys }
    })
}

fn key(o: &str) -> &'static str {
    fx().keys[o].as_str()
}

fn ids(data: &Value) -> Vec<String> {
    data["apps"].as_array().expect("apps array").iter().map(|a| a["id"].as_str().unwrap().to_string()).collect()
}

#[test]
fn list_and_filters() {
    let srv = &fx().srv;
    let k = key("list");
    let get = |q: &str| ok(&srv.api("GET", &format!("/v1/apps{q}"), Some(k), None), 200);
    let all = get("");
    assert_eq!(ids(&all), ["time", "everything", "labs"]);
    let by_id = |id: &str| all["apps"].as_array().unwrap().iter().find(|a| a["id"] == id).unwrap().clone();
    let time = by_id("time");
    assert_eq!(time["status"], "connected", "an app without credentials is connected from the start: {time}");
    assert_eq!(time["functions_count"], 1, "{time}");
    assert_eq!(time["auth_types"], json!([]));
    assert_eq!(time["category"], "utilities");
    let e = by_id("everything");
    assert_eq!(e["status"], "available", "{e}");
    assert_eq!(e["auth_types"], json!(["api_key", "oauth"]));
    assert_eq!(e["icon"], "https://icons.test/e.svg");
    assert_eq!(e["description"], "The reference MCP server");
    assert!(e["functions_count"].is_u64(), "{e}");
    assert_eq!(by_id("labs")["status"], "beta");

    assert_eq!(ids(&get("?category=testing")), ["everything"]);
    assert_eq!(ids(&get("?category=nothing-here")), Vec::<String>::new());
    assert_eq!(ids(&get("?status=beta")), ["labs"]);
    assert_eq!(ids(&get("?status=connected")), ["time"]);
    assert_eq!(ids(&get("?status=available")), ["everything"]);
    assert_eq!(ids(&get("?search=reference")), ["everything"], "search matches the description");
    assert_eq!(ids(&get("?search=TIME")), ["time"], "search matches the name, case-insensitively");
    assert_eq!(ids(&get("?search=experimental&status=beta&category=labs")), ["labs"], "filters combine");
    assert_eq!(ids(&get("?search=experimental&status=available")), Vec::<String>::new());
    validation(&srv.api("GET", "/v1/apps?status=broken", Some(k), None), "status");
    err(&srv.api("GET", "/v1/apps", None, None), 401, "UNAUTHORIZED");
}

#[test]
fn detail_of_the_builtin_app() {
    let srv = &fx().srv;
    let k = key("list");
    let d = ok(&srv.api("GET", "/v1/apps/time", Some(k), None), 200);
    assert_eq!(d["id"], "time");
    assert_eq!(d["name"], "Time");
    assert_eq!(d["status"], "connected");
    assert!(d["long_description"].is_string() && d["current_auth"].is_string(), "{d}");
    let f = &d["functions"];
    assert_eq!(f.as_array().map(Vec::len), Some(1), "{d}");
    assert_eq!(f[0]["name"], "get_current_time");
    assert!(f[0]["description"].as_str().is_some_and(|s| !s.is_empty()), "{d}");
    assert_eq!(f[0]["parameters"], json!({ "format": "string", "timezone": "string" }), "parameters: name -> type");
    assert!(d["configuration"]["base_url"].is_string(), "{d}");
    assert!(d["configuration"].get("rate_limit").is_some(), "{d}");
    for (m, p) in [("GET", "/v1/apps/nope"), ("POST", "/v1/apps/nope/test"), ("DELETE", "/v1/apps/nope/connection")] {
        err(&srv.api(m, p, Some(k), None), 404, "NOT_FOUND");
    }
    let r = srv.api(
        "POST",
        "/v1/apps/nope/connect",
        Some(k),
        Some(json!({ "auth_type": "api_key", "credentials": {"api_key": "x"} })),
    );
    err(&r, 404, "NOT_FOUND");
    // The live test of the built-in app.
    let t = ok(&srv.api("POST", "/v1/apps/time/test", Some(k), None), 200);
    assert_eq!(t["status"], "ok", "{t}");
    assert!(t["latency"].is_u64(), "{t}");
    assert!(t["message"].is_string(), "{t}");
}

#[test]
fn connect_with_api_key_test_and_disconnect() {
    let f = fx();
    let srv = &f.srv;
    let k = key("conn");
    let secret = format!("sk_live_{}", random_alnum(24));
    let secret2 = format!("sec_{}", random_alnum(24));

    // Not connected yet: the test says so.
    let t = ok(&srv.api("POST", "/v1/apps/everything/test", Some(k), None), 200);
    assert_eq!(t["status"], "error", "{t}");
    assert!(t["latency"].is_u64() && t["message"].is_string(), "{t}");
    err(&srv.api("DELETE", "/v1/apps/everything/connection", Some(k), None), 404, "NOT_FOUND");

    // Validation.
    let connect = |body: Value| srv.api("POST", "/v1/apps/everything/connect", Some(k), Some(body));
    validation(&connect(json!({ "auth_type": "password" })), "auth_type");
    validation(&connect(json!({ "auth_type": "api_key" })), "credentials");
    validation(&connect(json!({ "auth_type": "api_key", "credentials": { "api_key": "  " } })), "credentials.api_key");
    let r = srv.api(
        "POST",
        "/v1/apps/time/connect",
        Some(k),
        Some(json!({ "auth_type": "api_key", "credentials": { "api_key": "k" } })),
    );
    validation(&r, "auth_type");
    let r = srv.api(
        "POST",
        "/v1/apps/labs/connect",
        Some(k),
        Some(json!({ "auth_type": "oauth", "redirect_uri": "https://x.test/cb" })),
    );
    validation(&r, "auth_type");
    assert_eq!(
        ok(&srv.api("GET", "/v1/apps/everything", Some(k), None), 200)["status"],
        "available",
        "refused connects changed nothing"
    );

    let r = connect(json!({ "auth_type": "api_key", "credentials": { "api_key": secret, "api_secret": secret2 } }));
    let c = ok(&r, 200);
    assert_eq!(c["app_id"], "everything");
    assert_eq!(c["status"], "connected");
    assert!(c["connection_id"].as_str().is_some_and(|s| !s.is_empty()), "{c}");
    let mut seen = vec![r.text.clone()];

    // Connected: detail lists the functions discovered from the real server.
    let r = srv.api("GET", "/v1/apps/everything", Some(k), None);
    let d = ok(&r, 200);
    seen.push(r.text.clone());
    assert_eq!(d["status"], "connected");
    assert_eq!(d["current_auth"], "api_key");
    assert_eq!(d["long_description"], "Every MCP feature, for tests.");
    assert_eq!(d["configuration"]["rate_limit"], 120);
    let functions = d["functions"].as_array().expect("functions");
    let echo = functions.iter().find(|f| f["name"] == "echo").unwrap_or_else(|| panic!("no echo function: {d}"));
    assert_eq!(echo["parameters"]["message"], "string", "{echo}");
    for f in functions {
        assert!(f["name"].is_string() && f["description"].is_string() && f["parameters"].is_object(), "{f}");
        for (_, ty) in f["parameters"].as_object().unwrap() {
            assert!(ty.is_string(), "parameter types are type names: {f}");
        }
    }
    let r = srv.api("GET", "/v1/apps?status=connected", Some(k), None);
    assert_eq!(ids(&ok(&r, 200)), ["time", "everything"]);
    let listed = ok(&r, 200)["apps"][1].clone();
    assert_eq!(listed["functions_count"].as_u64(), Some(functions.len() as u64), "{listed}");
    seen.push(r.text.clone());

    // The live test reaches the app.
    let r = srv.api("POST", "/v1/apps/everything/test", Some(k), None);
    let t = ok(&r, 200);
    seen.push(r.text.clone());
    assert_eq!(t["status"], "ok", "{t}");
    assert!(t["latency"].is_u64(), "{t}");
    assert!(t["message"].as_str().is_some_and(|m| !m.is_empty()), "{t}");

    // A gateway over the connected app shows it connected with its functions.
    let g = ok(
        &srv.api("POST", "/v1/gateways", Some(k), Some(json!({ "name": "conn-gw", "servers": ["everything"] }))),
        201,
    );
    let r = srv.api("GET", &format!("/v1/gateways/{}", g["id"].as_str().unwrap()), Some(k), None);
    let gd = ok(&r, 200);
    seen.push(r.text.clone());
    assert_eq!(gd["servers"][0]["status"], "connected", "{gd}");
    assert!(gd["servers"][0]["functions"].as_array().unwrap().iter().any(|f| f == "echo"), "{gd}");
    let r = srv.api("GET", "/v1/auth/debug", Some(k), None);
    seen.push(r.text.clone());

    // Another organisation is not connected; it sees the app's functions as listed, not its auth.
    let other = ok(&srv.api("GET", "/v1/apps/everything", Some(key("other")), None), 200);
    assert_eq!(other["status"], "available", "connections belong to one organisation: {other}");
    assert_eq!(other["functions"], d["functions"], "the catalogue shows the functions before connection");
    assert_eq!(other["current_auth"], "none", "{other}");

    // Credentials are never returned, logged, or stored in clear.
    for text in &seen {
        assert!(!text.contains(&secret) && !text.contains(&secret2), "a response shows the credentials: {text}");
    }
    srv.api("GET", "/readyz", None, None); // let the flusher run a little
    let logs = srv.all_logs();
    assert!(!logs.contains(&secret) && !logs.contains(&secret2), "the logs show the credentials");
    for entry in walk(&srv.data_dir()) {
        let bytes = std::fs::read(&entry).unwrap_or_default();
        for s in [&secret, &secret2] {
            assert!(
                !bytes.windows(s.len()).any(|w| w == s.as_bytes()),
                "{} holds a credential in clear",
                entry.display()
            );
        }
    }

    // Disconnect.
    let msg = ok_message(&srv.api("DELETE", "/v1/apps/everything/connection", Some(k), None));
    assert!(msg.contains("everything"), "{msg}");
    let after = ok(&srv.api("GET", "/v1/apps/everything", Some(k), None), 200);
    assert_ne!(after["status"], "connected", "{after}");
    assert_eq!(after["current_auth"], "none", "{after}");
    assert_eq!(after["functions"], d["functions"], "the catalogue still shows the app's functions");
    let t = ok(&srv.api("POST", "/v1/apps/everything/test", Some(k), None), 200);
    assert_eq!(t["status"], "error", "a disconnected app fails its test: {t}");
    err(&srv.api("DELETE", "/v1/apps/everything/connection", Some(k), None), 404, "NOT_FOUND");
}

fn walk(dir: &std::path::Path) -> Vec<std::path::PathBuf> {
    let mut out = Vec::new();
    for e in std::fs::read_dir(dir).into_iter().flatten().flatten() {
        let p = e.path();
        if p.is_dir() {
            out.extend(walk(&p));
        } else {
            out.push(p);
        }
    }
    out
}

#[test]
fn connect_with_oauth_returns_the_authorization_url() {
    let srv = &fx().srv;
    let k = key("oauth");
    let connect = |body: Value| srv.api("POST", "/v1/apps/everything/connect", Some(k), Some(body));
    validation(&connect(json!({ "auth_type": "oauth" })), "redirect_uri");
    validation(&connect(json!({ "auth_type": "oauth", "redirect_uri": "not a url" })), "redirect_uri");
    validation(&connect(json!({ "auth_type": "oauth", "redirect_uri": "ftp://x.test/cb" })), "redirect_uri");

    let redirect = "https://client.example.test/callback?x=1";
    let c = ok(&connect(json!({ "auth_type": "oauth", "redirect_uri": redirect })), 200);
    assert_eq!(c["app_id"], "everything");
    assert!(c["connection_id"].as_str().is_some_and(|s| !s.is_empty()), "{c}");
    assert!(c["status"].is_string(), "{c}");
    let url = url::Url::parse(c["authorization_url"].as_str().expect("authorization_url")).unwrap();
    assert_eq!(url.scheme(), "https");
    assert_eq!(url.host_str(), Some("auth.example.test"));
    assert_eq!(url.path(), "/oauth/authorize");
    let q: std::collections::HashMap<String, String> = url.query_pairs().into_owned().collect();
    assert_eq!(q.get("client_id").map(String::as_str), Some("toolgate-test-client"), "{url}");
    assert_eq!(q.get("redirect_uri").map(String::as_str), Some(redirect), "{url}");
    assert_eq!(q.get("response_type").map(String::as_str), Some("code"), "{url}");
    assert_eq!(q.get("scope").map(String::as_str), Some("tools read"), "{url}");
    let state = q.get("state").expect("state");
    assert!(state.len() >= 16, "state must be unguessable: {state}");
    assert_eq!(q.get("code_challenge_method").map(String::as_str), Some("S256"), "{url}");
    assert_eq!(q.get("code_challenge").map(String::len), Some(43), "{url}");
    // The answer comes back to the organisation that asked: another one has nothing pending,
    // and a wrong state is refused naming it.
    let callback = |k: &str, state: &str| {
        srv.api("POST", "/v1/apps/everything/connect/callback", Some(k), Some(json!({ "state": state, "code": "c" })))
    };
    assert_eq!(callback(key("other"), state).status, 404);
    validation(&callback(k, &"0".repeat(64)), "state");
    // A second authorization gets a fresh state.
    let c2 = ok(&connect(json!({ "auth_type": "oauth", "redirect_uri": redirect })), 200);
    let url2 = url::Url::parse(c2["authorization_url"].as_str().unwrap()).unwrap();
    let state2 = url2.query_pairs().find(|(k, _)| k == "state").unwrap().1.into_owned();
    assert_ne!(&state2, state);
    // Pending: the user has not come back, so the app is not connected yet and no auth is in
    // use (issue 12: `current_auth` said `oauth`).
    let d = ok(&srv.api("GET", "/v1/apps/everything", Some(k), None), 200);
    assert_ne!(d["status"], "connected", "{d}");
    assert_eq!(d["current_auth"], "none", "{d}");
}

#[test]
fn connect_without_auth_type_names_the_field() {
    // Decision 7: a VALIDATION_ERROR names the field; a missing required field is no exception.
    let srv = &fx().srv;
    let r = srv.api("POST", "/v1/apps/everything/connect", Some(key("other")), Some(json!({})));
    validation(&r, "auth_type");
}

/// Issue 12: before connection the catalogue showed no functions (`functions: []`,
/// `functions_count: 0`), `configuration.rate_limit` was `null` for an app without one, and a
/// pending connection's auth type was shown as the auth in use. Now: the functions the app
/// declares in YAML, else the latest listing any organisation got; the rate limit an integer
/// (0: no limit); `current_auth` only for a connection that is connected. Its own server, so
/// that no other test's listing is seen.
#[test]
fn catalogue_before_connection() {
    let everything = spawn_everything();
    let url = everything_url(&everything);
    let (mut orgs, mut users, mut key_yaml, mut keys) = (String::new(), String::new(), String::new(), Vec::new());
    for o in ["a", "b"] {
        orgs += &format!("  - {{ id: org_{o}, name: Org {o}, tier: professional }}\n");
        users +=
            &format!("  - {{ id: usr_{o}, email: {o}@t.test, name: U {o}, role: admin, organization: org_{o} }}\n");
        let (k, y) = declared_key(&format!("key_{o}"), &format!("usr_{o}"), &["*"]);
        key_yaml += &y;
        keys.push(k);
    }
    let yaml = format!(
        "  - id: declared\n    name: Declared\n    category: testing\n    auth_types: [api_key]\n    url: {url}\n    \
         functions:\n      - {{ name: echo, description: Echoes, parameters: {{ message: string }} }}\n      \
         - {{ name: add, parameters: {{ a: number, b: number }} }}\n\
         \x20 - id: listed\n    name: Listed\n    category: testing\n    auth_types: [api_key, oauth]\n    url: {url}\n    \
         oauth: {{ authorize_url: https://auth.test/a, token_url: https://auth.test/t, client_id: c }}\n\
         organizations:\n{orgs}users:\n{users}api_keys:\n{key_yaml}"
    );
    let srv = TestServer::start(&yaml);
    let (a, b) = (keys[0].as_str(), keys[1].as_str());
    let detail = |k: &str, id: &str| ok(&srv.api("GET", &format!("/v1/apps/{id}"), Some(k), None), 200);
    let count = |k: &str, id: &str| {
        let list = ok(&srv.api("GET", "/v1/apps", Some(k), None), 200);
        let app = list["apps"].as_array().unwrap().iter().find(|x| x["id"] == id).cloned().unwrap();
        app["functions_count"].as_u64().unwrap_or_else(|| panic!("functions_count: {app}"))
    };

    // Declared in YAML: shown to an organisation that has not connected the app.
    let d = detail(a, "declared");
    assert_eq!(d["status"], "available", "{d}");
    assert_eq!(d["current_auth"], "none", "{d}");
    assert_eq!(
        d["functions"],
        json!([{ "name": "echo", "description": "Echoes", "parameters": { "message": "string" } },
               { "name": "add", "description": "", "parameters": { "a": "number", "b": "number" } }]),
        "{d}"
    );
    assert_eq!(count(a, "declared"), 2);
    // No rate limit declared: an integer, 0 for "no limit", never null.
    assert_eq!(d["configuration"]["rate_limit"], 0, "{d}");

    // Never listed by anyone and nothing declared: no functions known yet.
    assert_eq!(detail(a, "listed")["functions"], json!([]));
    assert_eq!(count(a, "listed"), 0);

    // Organisation a starts an OAuth connection and does not finish it: nothing in use yet.
    let r = srv.api(
        "POST",
        "/v1/apps/listed/connect",
        Some(a),
        Some(json!({ "auth_type": "oauth", "redirect_uri": "https://client.test/cb" })),
    );
    assert_eq!(ok(&r, 200)["status"], "pending", "{r:?}");
    let d = detail(a, "listed");
    assert_eq!((d["status"].as_str(), d["current_auth"].as_str()), (Some("available"), Some("none")), "{d}");

    // Organisation b connects with a key and lists the real tools.
    let r = srv.api(
        "POST",
        "/v1/apps/listed/connect",
        Some(b),
        Some(json!({ "auth_type": "api_key", "credentials": { "api_key": "sk_test" } })),
    );
    assert_eq!(ok(&r, 200)["status"], "connected", "{r:?}");
    let live = detail(b, "listed");
    assert_eq!(live["current_auth"], "api_key", "{live}");
    let functions = live["functions"].as_array().expect("functions").clone();
    assert!(functions.iter().any(|f| f["name"] == "echo"), "{live}");

    // From then on organisation a, still pending, sees the listing too (but not b's auth).
    let d = detail(a, "listed");
    assert_eq!(d["functions"], json!(functions), "{d}");
    assert_eq!(d["current_auth"], "none", "{d}");
    assert_eq!(count(a, "listed"), functions.len() as u64);

    // The OpenAPI document states the views' fields, so schemathesis checks them.
    let doc = srv.api("GET", "/v1/openapi.json", None, None).json;
    let schemas = &doc["components"]["schemas"];
    assert_eq!(schemas["AppConfiguration"]["properties"]["rate_limit"]["type"], "integer", "{schemas}");
    for (schema, field) in
        [("AppDetail", "current_auth"), ("AppDetail", "functions"), ("AppListItem", "functions_count")]
    {
        assert!(
            schemas[schema]["required"].as_array().is_some_and(|r| r.iter().any(|f| f == field)),
            "{schema}.{field}"
        );
    }
    let get = &doc["paths"]["/v1/apps/{app_id}"]["get"]["responses"]["200"]["content"]["application/json"]["schema"];
    assert_eq!(get["$ref"], "#/components/schemas/AppDetailEnvelope", "{get}");
    drop(srv);
    drop(everything);
}
