//! The console (issue 43) against the real binary, as a browser drives it: every page sends the
//! security headers; no session is a 303 to the sign-in page (and `next` brings the user back);
//! a form without its CSRF token, or with another, is a 403; a viewer sees no write form and a
//! forged one is refused by the API's own scope check; another organisation's gateway is a 404;
//! a gateway made in the console is the API's (one authority) and its key is shown once; an
//! MFA-gated delete needs the code; a page of 50 rows stays under 100 KB; an Owner manages the
//! team where an Admin sees no team form; the key list shows no secret; a log entry has its page,
//! another organisation's a 404. A CSRF token the client chose, or another session's, is
//! refused, and so is a form a browser says came from another site (issue 55).

use crate::api_mfa::totp;
use crate::common::*;
use serde_json::json;
use std::collections::HashMap;
use std::sync::OnceLock;
use std::time::{Duration, Instant};

const PASSWORD: &str = "console passphrase one";

struct Fx {
    srv: TestServer,
    keys: HashMap<&'static str, String>,
}

/// (user, organisation, role). One organisation per test where a test counts records: the tests
/// run in parallel.
const USERS: &[(&str, &str, &str)] = &[
    ("usr_co_pages", "org_co_pages", "owner"),
    ("usr_co_csrf", "org_co_csrf", "owner"),
    ("usr_co_make", "org_co_make", "owner"),
    ("usr_co_view", "org_co_view", "viewer"),
    ("usr_co_view_owner", "org_co_view", "owner"),
    ("usr_co_other", "org_co_other", "owner"),
    ("usr_co_mfa", "org_co_mfa", "owner"),
    ("usr_co_fifty", "org_co_fifty", "owner"),
    ("usr_co_team", "org_co_team", "owner"),
    ("usr_co_team_admin", "org_co_team", "admin"),
    ("usr_co_keys", "org_co_keys", "owner"),
    ("usr_co_logs", "org_co_logs", "owner"),
    ("usr_co_oauth", "org_co_oauth", "owner"),
    ("usr_co_forged", "org_co_forged", "owner"),
    ("usr_co_forger", "org_co_forger", "owner"),
    ("usr_co_site", "org_co_site", "owner"),
    ("usr_co_home", "org_co_home", "owner"),
    ("usr_co_home_viewer", "org_co_home", "viewer"),
    ("usr_co_shape", "org_co_shape", "owner"),
];

/// An app that connects with OAuth only; its authorization server is never reached (the
/// browser would go there; these tests stop at the redirect).
const OAUTH_APP: &str = "  - id: oauthy\n    name: OAuthy\n    category: testing\n    auth_types: [oauth]\n    \
                         url: http://127.0.0.1:9/mcp\n    oauth: { authorize_url: https://auth.example.test/authorize, \
                         token_url: https://auth.example.test/token, client_id: console-test }\n";

fn fx() -> &'static Fx {
    static FX: OnceLock<Fx> = OnceLock::new();
    FX.get_or_init(|| {
        let (mut orgs, mut users, mut yk) = (String::new(), String::new(), String::new());
        let mut seen = std::collections::BTreeSet::new();
        let mut keys = HashMap::new();
        for (user, org, role) in USERS {
            if seen.insert(*org) {
                orgs += &format!("  - {{ id: {org}, name: {org}, tier: enterprise }}\n");
            }
            users += &format!("  - {{ id: {user}, email: {user}@co.test, name: {user}, role: {role}, organization: {org} }}\n");
            let (k, y) = declared_key(&format!("key_{user}"), user, &["*"]);
            yk += &y;
            keys.insert(*user, k);
        }
        // BASE_CONFIG ends inside `apps:`: OAUTH_APP joins the built-in time app.
        let srv = TestServer::start(&format!(
            "{OAUTH_APP}rate_limits:\n  unauthenticated: {{ requests_per_hour: 100000, requests_per_minute: 100000, burst: 10000 }}\n\
             \x20 identity: {{ requests_per_hour: 100000, requests_per_minute: 100000, burst: 10000 }}\n\
             webhooks:\n  allowed_hosts: [\"127.0.0.1\"]\norganizations:\n{orgs}users:\n{users}api_keys:\n{yk}"
        ));
        reap_on_exit(&srv);
        for (user, _, _) in USERS {
            let r = srv.request("PUT", "/v1/user/password", Some(&keys[user]), Some(json!({ "new_password": PASSWORD })), &[]);
            ok_message(&r);
        }
        Fx { srv, keys }
    })
}

fn srv() -> &'static TestServer {
    &fx().srv
}

fn key(user: &str) -> &'static str {
    fx().keys[user].as_str()
}

/// Sign-ins to the shared server take turns. The tests all sign in from one address, and the
/// server lets an address hold only a few sign-ins at once (`identity::signin::turns`: an
/// eighth of the places, two on a two-core machine); tests running in parallel (`--test-threads=4`)
/// got its 429 "too many sign-ins at once from this address" when three signed in together.
static SIGN_INS: parking_lot::Mutex<()> = parking_lot::Mutex::new(());

/// `sign_in` holding the turn.
fn in_turn<T>(sign_in: impl FnOnce() -> T) -> T {
    let _turn = SIGN_INS.lock();
    sign_in()
}

/// A browser signed in as `user`.
fn signed_in(user: &str) -> Browser {
    let b = Browser::new(srv(), "co.test");
    let r = in_turn(|| b.sign_in(user, PASSWORD, ""));
    assert_eq!(r.status, 303, "{r:?}");
    b
}

/// The CSRF token a console page gave the browser.
fn csrf(b: &Browser) -> String {
    let page = b.send("GET", "/auth/console", None);
    assert_eq!(page.status, 200, "{page:?}");
    b.cookie("toolgate_csrf").expect("a CSRF cookie")
}

fn gateway_ids(user: &str) -> Vec<String> {
    let d = ok(&srv().api("GET", "/v1/gateways?limit=100", Some(key(user)), None), 200);
    d["gateways"].as_array().unwrap().iter().map(|g| g["id"].as_str().unwrap().to_string()).collect()
}

fn make_gateway(user: &str, name: &str) -> String {
    crate::common::mcp::create_gateway(srv(), key(user), json!({ "name": name })).0
}

const CSP: &str = "default-src 'none'; style-src 'self'; script-src 'self'; img-src 'self' data:; \
                   form-action 'self'; frame-ancestors 'none'; base-uri 'none'";

fn assert_secure(r: &Resp, what: &str) {
    assert_eq!(r.header("content-security-policy"), Some(CSP), "{what}");
    assert_eq!(r.header("x-frame-options"), Some("DENY"), "{what}");
    assert_eq!(r.header("referrer-policy"), Some("no-referrer"), "{what}");
    assert_eq!(r.header("cache-control"), Some("no-store"), "{what}");
    assert_eq!(r.header("x-content-type-options"), Some("nosniff"), "{what}");
}

#[test]
fn without_a_session_a_page_is_a_redirect_to_sign_in_and_next_brings_the_user_back() {
    let b = Browser::new(srv(), "co.test");
    let r = b.send("GET", "/auth/console/gateways?sort=name", None);
    assert_eq!(r.status, 303, "{r:?}");
    assert_eq!(r.header("location"), Some("/auth/signin?next=%2Fauth%2Fconsole%2Fgateways%3Fsort%3Dname"));
    assert_secure(&r, "the redirect");
    let r = in_turn(|| b.sign_in("usr_co_pages", PASSWORD, "/auth/console/gateways?sort=name"));
    assert_eq!(r.status, 303, "{r:?}");
    assert_eq!(r.header("location"), Some("/auth/console/gateways?sort=name"));
    let account = b.send("GET", "/auth/", None);
    assert!(account.text.contains("href=\"/auth/console\""), "the account page links to the console: {}", account.text);
    // A made-up session is no session.
    let forged = Browser::new(srv(), "co.test");
    let r = forged.send("GET", "/auth/console", None);
    assert_eq!(r.status, 303);
}

#[test]
fn every_page_sends_the_security_headers_and_nothing_inline() {
    let b = signed_in("usr_co_pages");
    for page in [
        "",
        "/gateways",
        "/apps",
        "/keys",
        "/service-accounts",
        "/sessions",
        "/logs",
        "/analytics",
        "/webhooks",
        "/alerts",
        "/ip-allowlist",
        "/mfa",
        "/team",
        "/tool-changes",
    ] {
        let r = b.send("GET", &format!("/auth/console{page}"), None);
        assert_eq!(r.status, 200, "{page}: {}", r.text);
        assert_secure(&r, page);
        assert!(r.text.contains("<main id=\"main\">") && r.text.contains("<nav aria-label=\"Console\">"), "{page}");
        assert!(!r.text.contains(" style=") && !r.text.contains("<style"), "{page}: inline style");
        assert!(!r.text.contains("<script>") && !r.text.contains("onclick"), "{page}: inline script");
    }
    // The stylesheet and the script: named by their content's hash, kept a year; pages are not.
    let page = b.send("GET", "/auth/console", None);
    for (ext, kind) in [("css", "text/css"), ("js", "text/javascript")] {
        let url = page.text.split("\"/auth/console/static/").nth(if ext == "css" { 1 } else { 2 }).unwrap();
        let file = url.split('"').next().unwrap();
        let hash = file.strip_prefix("console.").and_then(|f| f.strip_suffix(&format!(".{ext}"))).unwrap();
        assert!(hash.len() == 16 && hash.chars().all(|c| c.is_ascii_hexdigit()), "{file}");
        let r = b.send("GET", &format!("/auth/console/static/{file}"), None);
        assert_eq!(r.status, 200, "{file}");
        assert!(r.header("content-type").unwrap().starts_with(kind), "{file}");
        assert_eq!(r.header("cache-control"), Some("public, max-age=31536000, immutable"), "{file}");
        assert_eq!(r.header("content-security-policy"), Some(CSP), "{file}");
        assert_eq!(r.header("x-content-type-options"), Some("nosniff"), "{file}");
        // Another content is another name: the unhashed one, or another hash, is no file.
        for other in [format!("console.{ext}"), format!("console.{}.{ext}", "0".repeat(16))] {
            let r = b.send("GET", &format!("/auth/console/static/{other}"), None);
            assert_eq!(r.status, 404, "{other}");
            assert_secure(&r, &other);
        }
    }
    assert_eq!(page.header("cache-control"), Some("no-store"), "a page is never kept");
    // An error page too.
    let r = b.send("GET", "/auth/console/gateways/gw_nope", None);
    assert_eq!(r.status, 404);
    assert_secure(&r, "a 404 page");
}

#[test]
fn a_post_without_its_csrf_token_or_with_another_is_refused() {
    let b = signed_in("usr_co_csrf");
    let token = csrf(&b);
    let before = gateway_ids("usr_co_csrf").len();
    let wrong = "0".repeat(token.len());
    let forms: [&[(&str, &str)]; 2] = [&[("name", "no token")], &[("csrf", &wrong), ("name", "wrong")]];
    for form in forms {
        let r = b.send("POST", "/auth/console/gateways", Some(form));
        assert_eq!(r.status, 403, "{r:?}");
        assert!(r.text.contains("CSRF"), "{}", r.text);
        assert_secure(&r, "the refusal");
    }
    assert_eq!(gateway_ids("usr_co_csrf").len(), before, "nothing was made");
    let r = b.send("POST", "/auth/console/gateways", Some(&[("csrf", &token), ("name", "with token")]));
    assert_eq!(r.status, 200, "{}", r.text);
    assert_eq!(gateway_ids("usr_co_csrf").len(), before + 1);
}

/// Issue 55 B7: a CSRF token the client made up is refused, cookie and field alike, on the
/// sign-in form (before any session) and on the console's forms; so is the token the server
/// issued to another session (an attacker's own, planted in the victim's browser). The double
/// submit accepted both, as long as the cookie and the field agreed.
#[test]
fn a_csrf_token_the_client_chose_or_another_sessions_is_refused() {
    let chosen = "ab".repeat(32);
    let b = Browser::new(srv(), "co.test");
    b.plant_cookie("toolgate_csrf", &chosen);
    let form = [("csrf", chosen.as_str()), ("email", "usr_co_forged@co.test"), ("password", PASSWORD), ("next", "")];
    let r = in_turn(|| b.send("POST", "/auth/signin", Some(&form)));
    assert_eq!(r.status, 403, "a made-up token on the sign-in form: {r:?}");
    assert!(b.cookie("toolgate_session").is_none(), "no session");

    let victim = signed_in("usr_co_forged");
    let theirs = csrf(&signed_in("usr_co_forger"));
    let before = gateway_ids("usr_co_forged").len();
    for token in [chosen.as_str(), theirs.as_str()] {
        victim.plant_cookie("toolgate_csrf", token);
        let r = victim.send("POST", "/auth/console/gateways", Some(&[("csrf", token), ("name", "Forged")]));
        assert_eq!(r.status, 403, "{r:?}");
        assert!(r.text.contains("CSRF"), "{}", r.text);
        let r = victim.send("POST", "/auth/signout", Some(&[("csrf", token)]));
        assert_eq!(r.status, 403, "sign-out with a planted token: {r:?}");
    }
    assert_eq!(gateway_ids("usr_co_forged").len(), before, "nothing was made");
    assert!(victim.signed_in(), "the victim is still signed in");
    // The next page gives the browser a token of its own session again, and its forms work.
    let own = csrf(&victim);
    assert_ne!(own, theirs);
    let r = victim.send("POST", "/auth/console/gateways", Some(&[("csrf", &own), ("name", "Own")]));
    assert_eq!(r.status, 200, "{}", r.text);
    assert_eq!(gateway_ids("usr_co_forged").len(), before + 1);
}

/// Issue 55 B7: a console write that a browser says came from another site (`Origin`,
/// `Sec-Fetch-Site`) is refused even with the right token; the browser's own form, and a
/// client that sends neither header (curl), are judged by the token.
#[test]
fn a_console_form_sent_from_another_site_is_refused() {
    let b = signed_in("usr_co_site");
    let token = csrf(&b);
    let before = gateway_ids("usr_co_site").len();
    let form = [("csrf", token.as_str()), ("name", "From afar")];
    let base = srv().base_url();
    let refused: [&[(&str, &str)]; 5] = [
        &[("origin", "https://evil.example")],
        &[("origin", "null"), ("sec-fetch-site", "cross-site")],
        &[("sec-fetch-site", "cross-site")],
        &[("sec-fetch-site", "same-site")],
        &[("origin", &base), ("sec-fetch-site", "cross-site")],
    ];
    for headers in refused {
        let r = b.send_with("POST", "/auth/console/gateways", Some(&form), headers);
        assert_eq!(r.status, 403, "{headers:?}: {r:?}");
        assert!(r.text.contains("another"), "{}", r.text);
        assert_secure(&r, "the refusal");
    }
    assert_eq!(gateway_ids("usr_co_site").len(), before, "nothing was made");
    // `Origin: null` is what a browser sends from a page with `Referrer-Policy: no-referrer`.
    let accepted: [(&[(&str, &str)], &str); 3] = [
        (&[("origin", &base), ("sec-fetch-site", "same-origin")], "From here"),
        (&[("origin", "null"), ("sec-fetch-site", "same-origin")], "From here, no referrer"),
        (&[], "From curl"),
    ];
    for (headers, name) in accepted {
        let r = b.send_with("POST", "/auth/console/gateways", Some(&[("csrf", &token), ("name", name)]), headers);
        assert_eq!(r.status, 200, "{headers:?}: {}", r.text);
    }
    assert_eq!(gateway_ids("usr_co_site").len(), before + 3);
    // The sign-in form too.
    let other = Browser::new(srv(), "co.test");
    let csrf = other.csrf();
    let form = [("csrf", csrf.as_str()), ("email", "usr_co_site@co.test"), ("password", PASSWORD), ("next", "")];
    let r = in_turn(|| other.send_with("POST", "/auth/signin", Some(&form), &[("origin", "https://evil.example")]));
    assert_eq!(r.status, 403, "{r:?}");
    assert_eq!(in_turn(|| other.send("POST", "/auth/signin", Some(&form))).status, 303);
}

#[test]
fn a_gateway_made_in_the_console_is_the_apis_and_its_key_is_shown_once() {
    let b = signed_in("usr_co_make");
    let token = csrf(&b);
    let r = b.send(
        "POST",
        "/auth/console/gateways",
        Some(&[("csrf", &token), ("name", "Made <here>"), ("description", "by the console"), ("servers", "time")]),
    );
    assert_eq!(r.status, 200, "{}", r.text);
    assert!(r.text.contains("Made &lt;here&gt;") && !r.text.contains("Made <here>"), "escaped: {}", r.text);
    let listed = ok(&srv().api("GET", "/v1/gateways", Some(key("usr_co_make")), None), 200);
    let g =
        listed["gateways"].as_array().unwrap().iter().find(|g| g["name"] == "Made <here>").expect("listed by the API");
    let id = g["id"].as_str().unwrap();
    assert_eq!(g["servers"], json!(["time"]));
    // The key shown is the gateway's.
    let shown = r.text.split("<code id=\"secret\">").nth(1).and_then(|s| s.split('<').next()).expect("the key");
    let r = mcp::initialize_raw(srv(), id, shown, "console-test");
    assert_eq!(r.status, 200, "the gateway takes its key: {:?}", r.body);
    // Never shown again.
    let page = b.send("GET", &format!("/auth/console/gateways/{id}"), None);
    assert_eq!(page.status, 200);
    assert!(!page.text.contains(shown), "the key is shown once");
    assert!(page.text.contains("claude mcp add --transport http") && page.text.contains("mcpServers"));
    assert!(page.text.contains("streamable_http_client") && page.text.contains("&quot;servers&quot;"));
    // An edit: post, redirect, get, with a notice shown once.
    let r = b.send("POST", &format!("/auth/console/gateways/{id}"), Some(&[("csrf", &token), ("name", "Renamed")]));
    assert_eq!(r.status, 303, "{}", r.text);
    assert_eq!(r.header("location"), Some(format!("/auth/console/gateways/{id}").as_str()));
    let page = b.send("GET", &format!("/auth/console/gateways/{id}"), None);
    assert!(page.text.contains("Gateway saved."), "{}", page.text);
    assert!(!b.send("GET", &format!("/auth/console/gateways/{id}"), None).text.contains("Gateway saved."));
    let g = ok(&srv().api("GET", &format!("/v1/gateways/{id}"), Some(key("usr_co_make")), None), 200);
    assert_eq!(g["name"], "Renamed");
    // The audit trail names the web session as the actor.
    let audit = srv().api("GET", "/v1/audit?limit=100", Some(key("usr_co_make")), None);
    assert!(audit.text.contains("\"web_session\""), "{}", audit.text);
    // The search is the API's.
    let found = b.send("GET", "/auth/console/gateways?q=renam", None);
    assert!(found.text.contains(id), "{}", found.text);
    let none = b.send("GET", "/auth/console/gateways?q=zzzz", None);
    assert!(!none.text.contains(id));
}

#[test]
fn a_viewer_sees_no_write_form_and_a_forged_one_is_refused_by_the_apis_scope_check() {
    let id = make_gateway("usr_co_view_owner", "Kept");
    let b = signed_in("usr_co_view");
    for page in ["/gateways".to_string(), format!("/gateways/{id}"), "/keys".into(), "/apps".into()] {
        let r = b.send("GET", &format!("/auth/console{page}"), None);
        assert_eq!(r.status, 200, "{page}: {}", r.text);
        assert!(!r.text.contains("method=\"post\" action=\"/auth/console"), "{page} shows a write form: {}", r.text);
    }
    let token = csrf(&b);
    let before = gateway_ids("usr_co_view_owner");
    let r = b.send("POST", "/auth/console/gateways", Some(&[("csrf", &token), ("name", "Forged")]));
    assert_eq!(r.status, 403, "{}", r.text);
    assert!(r.text.contains("INSUFFICIENT_SCOPE"), "the API's refusal: {}", r.text);
    let r = b.send("POST", &format!("/auth/console/gateways/{id}/delete"), Some(&[("csrf", &token)]));
    assert_eq!(r.status, 403, "{}", r.text);
    let r = b.send("POST", &format!("/auth/console/gateways/{id}"), Some(&[("csrf", &token), ("name", "Changed")]));
    assert_eq!(r.status, 403, "{}", r.text);
    assert_eq!(gateway_ids("usr_co_view_owner"), before, "nothing made or deleted");
    let g = ok(&srv().api("GET", &format!("/v1/gateways/{id}"), Some(key("usr_co_view_owner")), None), 200);
    assert_eq!(g["name"], "Kept");
}

#[test]
fn another_organisations_gateway_is_a_404_page() {
    let theirs = make_gateway("usr_co_make", "Not yours");
    let b = signed_in("usr_co_other");
    let r = b.send("GET", &format!("/auth/console/gateways/{theirs}"), None);
    assert_eq!(r.status, 404, "{}", r.text);
    assert!(!r.text.contains("Not yours"));
    let token = csrf(&b);
    let r = b.send("POST", &format!("/auth/console/gateways/{theirs}/delete"), Some(&[("csrf", &token)]));
    assert_eq!(r.status, 404, "{}", r.text);
    ok(&srv().api("GET", &format!("/v1/gateways/{theirs}"), Some(key("usr_co_make")), None), 200);
}

#[test]
fn deleting_a_gateway_asks_for_the_mfa_code_when_mfa_is_on() {
    let user = "usr_co_mfa";
    let id = make_gateway(user, "Protected");
    let b = signed_in(user);
    // MFA turned on after the sign-in: the session goes on, the gate now asks.
    let e = ok(&srv().api("POST", "/v1/auth/mfa/enroll", Some(key(user)), None), 200);
    let t = totp(e["secret"].as_str().unwrap());
    let step = crate::api_mfa::step_now();
    let code = crate::api_mfa::code_at(&t, step);
    ok(&srv().api("POST", "/v1/auth/mfa/activate", Some(key(user)), Some(json!({ "code": code }))), 200);
    let backup = e["backup_codes"][0].as_str().unwrap();
    let page = b.send("GET", &format!("/auth/console/gateways/{id}"), None);
    assert!(page.text.contains("name=\"mfa_code\""), "the delete form asks for the code");
    let token = csrf(&b);
    let r = b.send("POST", &format!("/auth/console/gateways/{id}/delete"), Some(&[("csrf", &token), ("mfa_code", "")]));
    assert_eq!(r.status, 403, "{}", r.text);
    assert!(r.text.contains("MFA_REQUIRED"), "{}", r.text);
    ok(&srv().api("GET", &format!("/v1/gateways/{id}"), Some(key(user)), None), 200);
    let r =
        b.send("POST", &format!("/auth/console/gateways/{id}/delete"), Some(&[("csrf", &token), ("mfa_code", backup)]));
    assert_eq!(r.status, 303, "{}", r.text);
    err(&srv().api("GET", &format!("/v1/gateways/{id}"), Some(key(user)), None), 404, "NOT_FOUND");
}

#[test]
fn a_page_of_fifty_rows_is_under_100_kb() {
    let user = "usr_co_fifty";
    let description = "a gateway with a description long enough to count ".repeat(4);
    for i in 0..55 {
        let body = json!({ "name": format!("Gateway number {i:02} <of many>"), "description": description, "servers": ["time"] });
        ok(&srv().api("POST", "/v1/gateways", Some(key(user)), Some(body)), 201);
    }
    let b = signed_in(user);
    let r = b.send("GET", "/auth/console/gateways", None);
    assert_eq!(r.status, 200);
    let rows = r.text.matches("<tr><td><a href=\"/auth/console/gateways/").count();
    assert_eq!(rows, 50, "a page of 50");
    assert!(r.text.contains("<td>Time</td>") && !r.text.contains("[&quot;time&quot;]"), "apps by name");
    assert!(r.text.len() < 100 * 1024, "{} bytes", r.text.len());
    assert!(r.text.contains("rel=\"next\""), "a next page");
    let r = b.send("GET", "/auth/console/gateways?page=2", None);
    assert_eq!(r.text.matches("<tr><td><a href=\"/auth/console/gateways/").count(), 5);
}

#[test]
fn a_session_token_planted_before_sign_in_is_never_the_signed_in_session() {
    let http =
        reqwest::blocking::Client::builder().redirect(reqwest::redirect::Policy::none()).no_proxy().build().unwrap();
    let planted = "ab".repeat(32);
    let set_cookie = |r: &reqwest::blocking::Response, name: &str| {
        r.headers()
            .get_all("set-cookie")
            .iter()
            .filter_map(|v| v.to_str().ok())
            .find_map(|v| v.strip_prefix(&format!("{name}=")).map(|v| v.split(';').next().unwrap().to_string()))
    };
    let form =
        http.get(srv().url("/auth/signin")).header("cookie", format!("toolgate_session={planted}")).send().unwrap();
    let csrf = set_cookie(&form, "toolgate_csrf").expect("a CSRF cookie");
    let email = "usr_co_pages@co.test";
    let r = in_turn(|| {
        http.post(srv().url("/auth/signin"))
            .header("cookie", format!("toolgate_session={planted}; toolgate_csrf={csrf}"))
            .form(&[("csrf", csrf.as_str()), ("email", email), ("password", PASSWORD), ("next", "/auth/console")])
            .send()
            .unwrap()
    });
    assert_eq!(r.status().as_u16(), 303);
    let issued = set_cookie(&r, "toolgate_session").expect("a session cookie");
    assert_ne!(issued, planted, "the session is a token toolgate made at sign-in");
    let console = |token: &str| {
        let r =
            http.get(srv().url("/auth/console")).header("cookie", format!("toolgate_session={token}")).send().unwrap();
        r.status().as_u16()
    };
    assert_eq!(console(&planted), 303, "the planted token is no session");
    assert_eq!(console(&issued), 200);
}

#[test]
fn an_owner_manages_the_team_and_an_admin_sees_no_team_form() {
    let b = signed_in("usr_co_team");
    let page = b.send("GET", "/auth/console/team", None);
    assert_eq!(page.status, 200, "{}", page.text);
    assert!(page.text.contains("usr_co_team_admin@co.test"), "{}", page.text);
    assert!(page.text.contains("action=\"/auth/console/team/usr_co_team_admin/role\""), "{}", page.text);
    let token = csrf(&b);
    let add = [("csrf", token.as_str()), ("email", "joiner@co.test"), ("name", "Joiner"), ("role", "viewer")];
    let r = b.send("POST", "/auth/console/team", Some(&add));
    assert_eq!(r.status, 303, "{}", r.text);
    let members = |user: &str| ok(&srv().api("GET", "/v1/team/members", Some(key(user)), None), 200)["members"].clone();
    let joined = members("usr_co_team").as_array().unwrap().iter().find(|m| m["email"] == "joiner@co.test").cloned();
    let id = joined.expect("the member the form added")["id"].as_str().unwrap().to_string();
    let r = b.send(
        "POST",
        &format!("/auth/console/team/{id}/role"),
        Some(&[("csrf", &token), ("role", "developer"), ("mfa_code", "")]),
    );
    assert_eq!(r.status, 303, "{}", r.text);
    assert!(members("usr_co_team")
        .as_array()
        .unwrap()
        .iter()
        .any(|m| m["id"] == id.as_str() && m["role"] == "developer"));
    let r = b.send("POST", &format!("/auth/console/team/{id}/remove"), Some(&[("csrf", &token), ("mfa_code", "")]));
    assert_eq!(r.status, 303, "{}", r.text);
    assert!(members("usr_co_team").as_array().unwrap().iter().all(|m| m["id"] != id.as_str()));

    // An Admin's role does not hold `team:manage`: no form, and a forged one is the API's 403.
    let a = signed_in("usr_co_team_admin");
    let page = a.send("GET", "/auth/console/team", None);
    assert_eq!(page.status, 200, "{}", page.text);
    assert!(!page.text.contains("method=\"post\" action=\"/auth/console/team"), "{}", page.text);
    assert!(!page.text.contains("usr_co_team@co.test"), "the members are not shown: {}", page.text);
    let token = csrf(&a);
    let r = a.send("POST", "/auth/console/team/usr_co_team/remove", Some(&[("csrf", &token), ("mfa_code", "")]));
    assert_eq!(r.status, 403, "{}", r.text);
    assert!(r.text.contains("INSUFFICIENT_SCOPE"), "{}", r.text);
    let r = a.send(
        "POST",
        "/auth/console/team",
        Some(&[("csrf", &token), ("email", "x@co.test"), ("name", "X"), ("role", "owner")]),
    );
    assert_eq!(r.status, 403, "{}", r.text);
    assert_eq!(members("usr_co_team").as_array().unwrap().len(), 2, "nothing added or removed");
}

#[test]
fn the_key_list_shows_no_secret_and_revokes_from_its_row() {
    let user = "usr_co_keys";
    let made = ok(
        &srv().api(
            "POST",
            "/v1/api-keys",
            Some(key(user)),
            Some(json!({"name": "listed in the console", "scopes": ["gateways:read"]})),
        ),
        201,
    );
    let (id, secret) = (made["id"].as_str().unwrap(), made["key"].as_str().unwrap());
    let sa = json!({"name": "console account", "scopes": ["logs:read"], "rate_limit_multiplier": 1.0});
    let sa = ok(&srv().api("POST", "/v1/service-accounts", Some(key(user)), Some(sa)), 201);
    let b = signed_in(user);
    let page = b.send("GET", "/auth/console/keys", None);
    assert_eq!(page.status, 200, "{}", page.text);
    assert!(page.text.contains(id) && page.text.contains("listed in the console"), "{}", page.text);
    for s in [secret.to_string(), sha256_hex(secret), key(user).to_string(), sha256_hex(key(user))] {
        assert!(!page.text.contains(&s), "a secret on the page");
    }
    assert!(page.text.contains(&format!("action=\"/auth/console/keys/{id}/revoke\"")), "{}", page.text);
    assert!(page.text.len() < 100 * 1024, "{} bytes", page.text.len());
    let accounts = b.send("GET", "/auth/console/service-accounts", None);
    assert!(accounts.text.contains(sa["id"].as_str().unwrap()), "{}", accounts.text);
    let token = csrf(&b);
    let r = b.send("POST", &format!("/auth/console/keys/{id}/revoke"), Some(&[("csrf", &token), ("mfa_code", "")]));
    assert_eq!(r.status, 303, "{}", r.text);
    err(&srv().api("GET", "/v1/gateways", Some(secret), None), 401, "UNAUTHORIZED");
}

#[test]
fn a_log_entry_has_its_page_and_another_organisations_is_a_404() {
    let user = "usr_co_logs";
    let g = ok(
        &srv().api("POST", "/v1/gateways", Some(key(user)), Some(json!({"name": "logged", "servers": ["time"]}))),
        201,
    );
    crate::api_logs::call_time(srv(), g["id"].as_str().unwrap(), g["api_key"].as_str().unwrap(), &["Europe/Paris"]);
    let logs = ok(&srv().api("GET", "/v1/logs", Some(key(user)), None), 200);
    let id = logs["logs"][0]["id"].as_str().unwrap().to_string();
    let b = signed_in(user);
    let list = b.send("GET", "/auth/console/logs", None);
    assert!(list.text.contains(&format!("href=\"/auth/console/logs/{id}\"")), "{}", list.text);
    let page = b.send("GET", &format!("/auth/console/logs/{id}"), None);
    assert_eq!(page.status, 200, "{}", page.text);
    assert_secure(&page, "the entry page");
    assert!(page.text.contains(&id) && page.text.contains("Europe/Paris"), "{}", page.text);
    let other = signed_in("usr_co_other");
    let r = other.send("GET", &format!("/auth/console/logs/{id}"), None);
    assert_eq!(r.status, 404, "{}", r.text);
    assert!(!r.text.contains("Europe/Paris"));
}

#[test]
fn connect_with_oauth_sends_the_browser_to_the_provider_and_its_answer_comes_back_to_the_apps_page() {
    let user = "usr_co_oauth";
    let b = signed_in(user);
    let token = csrf(&b);
    let apps = b.send("GET", "/auth/console/apps", None);
    assert!(apps.text.contains("action=\"/auth/console/apps/oauthy/oauth\""), "{}", apps.text);
    assert!(
        !apps.text.contains("action=\"/auth/console/apps/oauthy/connect\""),
        "no API key form for an OAuth-only app"
    );
    assert!(!apps.text.contains("action=\"/auth/console/apps/time/oauth\""), "no OAuth form for an app without it");
    assert!(
        apps.text.contains("<td>oauth</td>") && !apps.text.contains("[&quot;oauth&quot;]"),
        "the ways to connect, as words"
    );

    // Connect: a CSRF-checked POST, then the page that sends the browser to the authorization
    // server by itself (a 303 would be blocked by the page's own `form-action 'self'`).
    let refused = b.send("POST", "/auth/console/apps/oauthy/oauth", Some(&[("csrf", "forged")]));
    assert_eq!(refused.status, 403, "{refused:?}");
    let r = b.send("POST", "/auth/console/apps/oauthy/oauth", Some(&[("csrf", &token)]));
    assert_eq!(r.status, 200, "{}", r.text);
    assert_secure(&r, "the way to the authorization server");
    let link =
        r.text.split("<a id=\"authorize\" href=\"").nth(1).unwrap().split('"').next().unwrap().replace("&amp;", "&");
    assert!(r
        .text
        .contains(&format!("<meta http-equiv=\"refresh\" content=\"0; url={}\">", link.replace('&', "&amp;"))));
    let to = url::Url::parse(&link).unwrap();
    assert_eq!(&to[..url::Position::AfterPath], "https://auth.example.test/authorize");
    let query: HashMap<String, String> = to.query_pairs().into_owned().collect();
    assert_eq!(query["redirect_uri"], "http://localhost:8080/auth/console/apps/oauthy/oauth/back");
    assert_eq!(query["client_id"], "console-test");
    let state = query["state"].clone();
    let status = || ok(&srv().api("GET", "/v1/apps/oauthy", Some(key(user)), None), 200)["connection_status"].clone();
    assert_eq!(status(), "pending");

    // The way back needs the web session: without one, sign in first (and come back).
    let back = format!("/auth/console/apps/oauthy/oauth/back?state={state}&code=c0de");
    let stranger = Browser::new(srv(), "co.test");
    let r = stranger.send("GET", &back, None);
    assert_eq!(r.status, 303);
    assert!(r.header("location").unwrap().starts_with("/auth/signin?next=%2Fauth%2Fconsole%2Fapps%2Foauthy"), "{r:?}");
    assert_eq!(status(), "pending", "nothing ran");

    // A state that is not the pending one (a forged link) is refused by the API, and says so.
    let r = b.send("GET", "/auth/console/apps/oauthy/oauth/back?state=forged&code=c0de", None);
    assert_eq!(r.status, 303, "{r:?}");
    assert_eq!(r.header("location"), Some("/auth/console/apps"));
    assert!(
        r.headers
            .get_all("set-cookie")
            .iter()
            .filter_map(|v| v.to_str().ok())
            .any(|c| c.starts_with("toolgate_notice=") && c.contains("SameSite=Lax")),
        "{r:?}"
    );
    let page = b.send("GET", "/auth/console/apps", None);
    assert!(page.text.contains("App oauthy was not connected: 400 VALIDATION_ERROR"), "{}", page.text);
    assert_eq!(status(), "pending", "a wrong state leaves the authorization pending");

    // The user refused at the provider: the authorization is over, and the page says why.
    let r = b.send("GET", &format!("/auth/console/apps/oauthy/oauth/back?state={state}&error=access_denied"), None);
    assert_eq!(r.status, 303, "{r:?}");
    let page = b.send("GET", "/auth/console/apps", None);
    assert!(page.text.contains("the provider refused the authorization (access_denied)"), "{}", page.text);
    assert_eq!(status(), "error");
    // Used once: the same state again finds nothing pending.
    b.send("GET", &back, None);
    let page = b.send("GET", "/auth/console/apps", None);
    assert!(page.text.contains("App oauthy was not connected: 404"), "{}", page.text);
}

/// The server's own time for the requests of `path` (its access lines' `duration_ms`: from the
/// request's arrival to the answer written), once `count` of them are logged: median and largest.
fn server_ms(srv: &TestServer, path: &str, count: usize) -> (f64, f64) {
    let deadline = Instant::now() + Duration::from_secs(10);
    loop {
        let (text, json) = (format!("path=\"{path}\" "), format!("\"path\":\"{path}\","));
        let mut ms: Vec<f64> = (srv.stderr().lines())
            .filter(|l| l.contains(&text) || l.contains(&json))
            .filter_map(|l| l.split("duration_ms").nth(1))
            .filter_map(|v| v.trim_start_matches(['"', ':', '=']).split([' ', ',', '}']).next()?.parse().ok())
            .collect();
        if ms.len() >= count {
            ms.sort_by(f64::total_cmp);
            return (ms[ms.len() / 2], ms[ms.len() - 1]);
        }
        assert!(Instant::now() < deadline, "{} of {count} access lines of {path}", ms.len());
        std::thread::sleep(Duration::from_millis(100));
    }
}

/// The render time of a 50-row page, server side (issue 43's target: under 10 ms), printed for
/// BENCHMARKS.md; no timed assertion (a shared machine's figure is not a verdict). Its own server,
/// so that only these requests are in its access log.
#[test]
fn render_time_of_fifty_row_pages_is_printed() {
    let (k, y) = declared_key("key_rt", "usr_rt", &["*"]);
    let srv = TestServer::start(&format!(
        "rate_limits:\n  unauthenticated: {{ requests_per_hour: 100000, requests_per_minute: 100000, burst: 10000 }}\n\
             \x20 identity: {{ requests_per_hour: 100000, requests_per_minute: 100000, burst: 10000 }}\n\
         organizations:\n  - {{ id: org_rt, name: rt, tier: enterprise }}\n\
         users:\n  - {{ id: usr_rt, email: usr_rt@rt.test, name: rt, role: owner, organization: org_rt }}\napi_keys:\n{y}"
    ));
    ok_message(&srv.request("PUT", "/v1/user/password", Some(&k), Some(json!({ "new_password": PASSWORD })), &[]));
    let description = "a gateway with a description long enough to count ".repeat(4);
    let mut gateway = (String::new(), String::new());
    for i in 0..55 {
        let body = json!({ "name": format!("Gateway number {i:02} <of many>"), "description": description, "servers": ["time"] });
        let d = ok(&srv.api("POST", "/v1/gateways", Some(&k), Some(body)), 201);
        gateway = (d["id"].as_str().unwrap().to_string(), d["api_key"].as_str().unwrap().to_string());
    }
    crate::api_logs::call_time(&srv, &gateway.0, &gateway.1, &["UTC"; 55]);
    let b = Browser::new(&srv, "rt.test");
    assert_eq!(b.sign_in("usr_rt", PASSWORD, "").status, 303);
    const ROUNDS: usize = 30;
    for (page, rows) in [
        ("/auth/console/gateways", "<tr><td><a href=\"/auth/console/gateways/"),
        ("/auth/console/logs", "<tr><td class=\"id\"><a href=\"/auth/console/logs/"),
    ] {
        for _ in 0..ROUNDS {
            let r = b.send("GET", page, None);
            assert_eq!(r.status, 200, "{page}");
            assert_eq!(r.text.matches(rows).count(), 50, "{page}: a page of 50 rows");
            assert!(r.text.len() < 100 * 1024, "{page}: {} bytes", r.text.len());
        }
        let (median, largest) = server_ms(&srv, page, ROUNDS);
        eprintln!("render time of {page} (50 rows), server side, {ROUNDS} requests: median {median:.3} ms, largest {largest:.3} ms");
    }
}

/// A person who opens the gateway's address in a browser lands in the console (issue 56); API
/// clients (JSON, `*/*` or no `Accept`) keep the JSON 404, and so does every other unknown path.
#[test]
fn the_root_sends_a_browser_to_the_console_and_api_clients_get_the_json_404() {
    let http =
        reqwest::blocking::Client::builder().redirect(reqwest::redirect::Policy::none()).no_proxy().build().unwrap();
    let send = |method: reqwest::Method, path: &str, accept: Option<&str>| {
        let mut req = http.request(method, srv().url(path));
        if let Some(a) = accept {
            req = req.header("accept", a);
        }
        Resp::from_blocking(req.send().unwrap_or_else(|e| panic!("{path}: {e}")))
    };
    let browser = "text/html,application/xhtml+xml,application/xml;q=0.9,*/*;q=0.8";
    let r = send(reqwest::Method::GET, "/", Some(browser));
    assert_eq!((r.status, r.header("location")), (303, Some("/auth/console")), "{r:?}");
    // Followed: the console, once signed in (its own 303 to the sign-in page otherwise).
    assert_eq!(Browser::new(srv(), "co.test").send("GET", "/auth/console", None).status, 303);
    assert_eq!(signed_in("usr_co_pages").send("GET", "/auth/console", None).status, 200);

    for accept in [None, Some("application/json"), Some("*/*"), Some("text/html, application/json")] {
        let r = send(reqwest::Method::GET, "/", accept);
        assert_eq!((r.status, r.error_code()), (404, "NOT_FOUND"), "Accept {accept:?}: {r:?}");
        assert!(r.header("content-type").is_some_and(|t| t.starts_with("application/json")), "{r:?}");
    }
    let r = send(reqwest::Method::GET, "/elsewhere", Some(browser));
    assert_eq!((r.status, r.error_code()), (404, "NOT_FOUND"), "only / sends a browser on: {r:?}");
    let r = send(reqwest::Method::POST, "/", Some(browser));
    assert_eq!((r.status, r.error_code()), (404, "NOT_FOUND"), "{r:?}");
}

/// The figure of the home's card `id` (`<a id="home-<id>"><span class="figure">N</span>`).
fn figure(page: &str, id: &str) -> Option<String> {
    let at = page.find(&format!("id=\"home-{id}\"><span class=\"figure\">"))?;
    let rest = &page[at..];
    let rest = &rest[rest.find("\"figure\">")? + "\"figure\">".len()..];
    Some(rest[..rest.find('<')?].to_string())
}

/// The home is an overview (issue 60, A.2): the organisation's gateways, calls and errors, apps
/// down, pending tool changes and the keys expiring within 14 days, each a link to its page,
/// read through the API as the user: another organisation's records are not counted, and a
/// viewer (no `admin` scope) sees no keys.
#[test]
fn the_home_is_an_overview_of_the_organisation_within_the_role() {
    let owner = key("usr_co_home");
    make_gateway("usr_co_home", "Home one");
    make_gateway("usr_co_home", "Home two");
    make_gateway("usr_co_other", "Not ours");
    let soon = (chrono::Utc::now() + chrono::Duration::days(5)).to_rfc3339();
    let later = (chrono::Utc::now() + chrono::Duration::days(60)).to_rfc3339();
    let expiring = ok(
        &srv().api(
            "POST",
            "/v1/api-keys",
            Some(owner),
            Some(json!({"name": "soon", "scopes": ["logs:read"], "expires_at": soon})),
        ),
        201,
    );
    let kept = ok(
        &srv().api(
            "POST",
            "/v1/api-keys",
            Some(owner),
            Some(json!({"name": "later", "scopes": ["logs:read"], "expires_at": later})),
        ),
        201,
    );
    let b = signed_in("usr_co_home");
    let home = b.send("GET", "/auth/console", None);
    assert_eq!(home.status, 200, "{}", home.text);
    assert_eq!(figure(&home.text, "gateways").as_deref(), Some("2"), "{}", home.text);
    assert_eq!(figure(&home.text, "keys-expiring").as_deref(), Some("1"), "{}", home.text);
    assert_eq!(figure(&home.text, "tool-changes").as_deref(), Some("0"), "{}", home.text);
    for card in ["calls", "errors", "apps-down"] {
        assert!(figure(&home.text, card).is_some_and(|n| n.parse::<u64>().is_ok()), "{card}: {}", home.text);
    }
    assert!(home.text.contains(expiring["id"].as_str().unwrap()), "the expiring key is named: {}", home.text);
    assert!(!home.text.contains(kept["id"].as_str().unwrap()), "a key of 60 days is not: {}", home.text);
    for to in [
        "/auth/console/gateways\" id=\"home-gateways",
        "/auth/console/apps\" id=\"home-apps-down",
        "/auth/console/keys\" id=\"home-keys",
    ] {
        assert!(home.text.contains(to), "{to}: {}", home.text);
    }
    let viewer = signed_in("usr_co_home_viewer").send("GET", "/auth/console", None);
    assert_eq!(viewer.status, 200, "{}", viewer.text);
    assert_eq!(figure(&viewer.text, "gateways").as_deref(), Some("2"), "{}", viewer.text);
    assert_eq!(figure(&viewer.text, "keys-expiring"), None, "a viewer reads no keys: {}", viewer.text);
    assert!(!viewer.text.contains(expiring["id"].as_str().unwrap()));
}

/// What a gateway does to its tools is on its page, and a refused call stands out in the logs
/// (issue 61): the page shows the gateway's overrides (the alias, the replaced description,
/// escaped, the default argument) and "none" for the tool limits it has not; on the logs page a
/// call a rule denied is marked `denied`, the call that ran is not.
#[test]
fn the_gateway_page_shows_its_tool_shaping_and_the_logs_mark_a_refused_call() {
    let user = "usr_co_shape";
    let shaped = json!([{ "tool": "get_current_time", "name": "now", "description": "The time <b>now</b>.",
                          "default_arguments": { "format": "YYYY" } }]);
    let rules = json!([{ "name": "not-tokyo", "effect": "deny", "when": "args.timezone == \"Asia/Tokyo\"" }]);
    let body = json!({ "name": "shaped", "servers": ["time"], "tool_overrides": shaped, "rules": rules });
    let (gw, gw_key) = crate::common::mcp::create_gateway(srv(), key(user), body);
    let b = signed_in(user);
    let page = b.send("GET", &format!("/auth/console/gateways/{gw}"), None);
    assert_eq!(page.status, 200, "{}", page.text);
    let t = &page.text;
    assert!(t.contains("<caption>Tool overrides</caption>"), "{t}");
    assert!(
        t.contains("<td class=\"id\"><code>get_current_time</code></td><td class=\"id\"><code>now</code></td>"),
        "{t}"
    );
    assert!(t.contains("The time &lt;b&gt;now&lt;/b&gt;.") && !t.contains("<b>now</b>"), "escaped: {t}");
    assert!(t.contains("<li>default <code>format</code> = <code>&quot;YYYY&quot;</code></li>"), "{t}");
    assert!(t.contains("id=\"tool-limits-none\""), "no limits: none: {t}");

    let mcp = crate::common::mcp::Mcp::open(srv(), &gw, &gw_key);
    assert!(mcp.call(1, "now", json!({ "timezone": "UTC" }))["result"].is_object());
    let (code, _) = crate::common::mcp::rpc_error(&mcp.call(2, "now", json!({ "timezone": "Asia/Tokyo" })));
    assert_eq!(code, -32012, "the rule denies it");
    let logs = b.send("GET", &format!("/auth/console/logs?gateway_id={gw}"), None);
    assert_eq!(logs.status, 200, "{}", logs.text);
    let rows: Vec<&str> = logs.text.split("<tr>").skip(2).collect();
    assert_eq!(rows.len(), 2, "{}", logs.text);
    // Newest first: the denied call, then the one that ran.
    assert!(rows[0].contains("<span class=\"badge refused\">denied</span>"), "{}", rows[0]);
    assert!(!rows[1].contains("badge"), "{}", rows[1]);
    // The denied call's own page says so too, and names its gateway.
    let href = rows[0].split("href=\"").nth(1).and_then(|h| h.split('"').next()).expect("the entry's link");
    let entry = b.send("GET", href, None);
    assert!(entry.text.contains("<span class=\"badge refused\">denied</span>"), "{}", entry.text);
    assert!(entry.text.contains(&format!("<dd>shaped ({gw})</dd>")), "{}", entry.text);
    // The logs name the gateway beside its id, and the filter is a list of gateways by name.
    assert!(rows[1].contains(&format!("<td>shaped ({gw})</td>")), "{}", rows[1]);
    assert!(logs.text.contains(&format!("<option value=\"{gw}\" selected>shaped ({gw})</option>")), "{}", logs.text);
    // Analytics: the success rate as a percentage (one of two calls was refused), the picker.
    let stats = b.send("GET", &format!("/auth/console/analytics?gateway_id={gw}&period=1h"), None);
    assert!(stats.text.contains("<dd id=\"success-rate\">50.0 %</dd>"), "{}", stats.text);
    assert!(stats.text.contains(&format!("<option value=\"{gw}\" selected>")), "{}", stats.text);
    assert!(stats.text.contains("— failed</text>") && stats.text.contains("chart-bar series-1"), "{}", stats.text);
}

/// A gateway's external guards are in the gateway list as in the gateway (never a secret), and
/// on its page: URL, phases, tools, mode, failure and time-out, in the order they are asked.
#[test]
fn the_gateway_list_and_page_show_its_guards_without_their_secret() {
    let user = "usr_co_shape";
    let guards = json!([
        { "url": "http://127.0.0.1:9/dlp?x=<y>", "on": ["response"], "tools": "get_*", "timeout_ms": 1500 },
        { "url": "http://127.0.0.1:9/try", "on": ["request"], "mode": "log", "failure": "open" },
    ]);
    let body = json!({ "name": "guarded-console", "servers": ["time"], "guards": guards });
    let r = srv().request("POST", "/v1/gateways", Some(key(user)), Some(body), &[]);
    assert_eq!(r.status, 201, "{}", r.text);
    let gw = r.json["data"]["id"].as_str().expect("id").to_string();
    let secret = r.json["data"]["guards"][0]["secret"].as_str().expect("shown once").to_string();
    let one = srv().request("GET", &format!("/v1/gateways/{gw}"), Some(key(user)), None, &[]).json;
    let list = srv().request("GET", "/v1/gateways?q=guarded-console", Some(key(user)), None, &[]).json;
    let listed = &list["data"]["gateways"][0];
    assert_eq!(listed["id"], gw.as_str(), "{list}");
    assert_eq!(listed["guards"], one["data"]["guards"], "the list shows a gateway's guards as GET does: {list}");
    assert_eq!(listed["guards"][1]["mode"], "log", "{list}");
    let shown = listed["guards"].as_array().expect("guards");
    assert!(shown.iter().all(|g| g.get("secret").is_none()) && !list.to_string().contains(&secret), "{list}");
    let page = signed_in(user).send("GET", &format!("/auth/console/gateways/{gw}"), None);
    assert_eq!(page.status, 200, "{}", page.text);
    let t = &page.text;
    assert!(t.contains("<caption>External guards</caption>"), "{t}");
    assert!(
        t.contains("<code>http://127.0.0.1:9/dlp?x=&lt;y&gt;</code></td><td class=\"id\">response</td><td class=\"id\"><code>get_*</code></td><td class=\"id\">enforce</td>"),
        "{t}"
    );
    assert!(t.contains("closed: the call is refused</td><td class=\"id\">1500 ms"), "{t}");
    assert!(t.contains(">log</td>") && t.contains("open: the call goes on"), "{t}");
    assert!(!t.contains(&secret), "no secret on the page");
}
