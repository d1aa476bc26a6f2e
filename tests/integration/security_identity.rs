//! The identity edge (security issue 39, part C), against the real binary as a browser and an
//! OAuth client drive it: setting a password needs a credential holding the whole role (a
//! narrow key cannot become the user), plus MFA when active, and ends every web session and
//! OAuth grant; wrong current passwords lock out as wrong sign-ins do; the web MFA step takes
//! only the challenge its own browser's password check opened, and wrong codes lock only that
//! browser's sign-in; `next` never leaves the server; a Developer turns MFA on with its `*` key;
//! a code shown to the wrong client stays usable by its own.

use crate::api_mfa::{code_at, step_now, wrong_code};
use crate::common::*;
use serde_json::json;
use std::collections::HashMap;
use std::sync::OnceLock;

const PASSWORD: &str = "identity passphrase one";

struct Fx {
    srv: TestServer,
    keys: HashMap<&'static str, String>,
}

/// (key name, user, role, scopes). One user per test: tests run in parallel, and passwords,
/// MFA and lockouts are per user.
const KEYS: &[(&str, &str, &str, &[&str])] = &[
    ("narrow_star", "usr_si_narrow", "owner", &["*"]),
    ("narrow_read", "usr_si_narrow", "owner", &["gateways:read"]),
    ("narrow_most", "usr_si_narrow", "owner", &["gateways:*", "apps:*", "logs:read", "sessions:manage"]),
    ("guess", "usr_si_guess", "owner", &["*"]),
    ("dev_star", "usr_si_dev", "developer", &["*"]),
    ("dev_read", "usr_si_dev", "developer", &["gateways:read"]),
    ("revoke", "usr_si_revoke", "owner", &["*"]),
    ("api_star", "usr_si_api", "owner", &["*"]),
    ("api_gateways", "usr_si_api", "owner", &["gateways:*"]),
    ("web", "usr_si_web", "owner", &["*"]),
    ("lock", "usr_si_lock", "owner", &["*"]),
    ("next", "usr_si_next", "owner", &["*"]),
    ("code", "usr_si_code", "owner", &["*"]),
];

fn fx() -> &'static Fx {
    static FX: OnceLock<Fx> = OnceLock::new();
    FX.get_or_init(|| {
        let (mut users, mut yk) = (String::new(), String::new());
        let mut seen = std::collections::BTreeSet::new();
        let mut keys = HashMap::new();
        for (name, user, role, scopes) in KEYS {
            if seen.insert(*user) {
                users += &format!(
                    "  - {{ id: {user}, email: {user}@si.test, name: {user}, role: {role}, organization: org_si }}\n"
                );
            }
            let (k, y) = declared_key(&format!("key_{name}"), user, scopes);
            yk += &y;
            keys.insert(*name, k);
        }
        let srv = TestServer::start(&format!(
            "rate_limits:\n  unauthenticated: {{ requests_per_hour: 100000, requests_per_minute: 100000, burst: 10000 }}\n\
             organizations:\n  - {{ id: org_si, name: SecIdentity, tier: enterprise }}\n\
             users:\n{users}api_keys:\n{yk}"
        ));
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

fn set_password(k: &str, new: &str, current: Option<&str>, mfa: Option<&str>) -> Resp {
    let mut body = json!({ "new_password": new });
    if let Some(c) = current {
        body["current_password"] = json!(c);
    }
    let headers: Vec<(&str, &str)> = mfa.map(|m| vec![("x-mfa-token", m)]).unwrap_or_default();
    srv().request("PUT", "/v1/user/password", Some(k), Some(body), &headers)
}

/// Enrols and activates TOTP MFA with `k`; returns the TOTP and the backup codes.
fn enable_mfa(k: &str) -> (totp_rs::TOTP, Vec<String>) {
    crate::api_mfa::mfa_on(srv(), k)
}

#[test]
fn a_narrow_key_cannot_set_the_password_and_become_the_owner() {
    let user = "usr_si_narrow";
    // The Owner has no password (a declared user): its narrow key, or one holding every scope
    // but `admin`, is refused for lacking `admin`.
    for k in ["narrow_read", "narrow_most"] {
        let r = set_password(key(k), PASSWORD, None, None);
        let e = err(&r, 403, "INSUFFICIENT_SCOPE");
        assert!(e["message"].as_str().unwrap().contains("`admin`"), "{r:?}");
    }
    let b = Browser::new(srv(), "si.test");
    let r = b.sign_in(user, PASSWORD, "");
    assert_eq!(r.status, 401, "no password was set: {r:?}");
    assert!(!b.signed_in());

    // The Owner's `*` key sets it, and the password signs in.
    ok_message(&set_password(key("narrow_star"), PASSWORD, None, None));
    let r = b.sign_in(user, PASSWORD, "");
    assert_eq!(r.status, 303, "{r:?}");
    assert!(b.signed_in());
    // Once set, the narrow key cannot change it either, even knowing it.
    let r = set_password(key("narrow_read"), "another long passphrase", Some(PASSWORD), None);
    err(&r, 403, "INSUFFICIENT_SCOPE");
}

#[test]
fn wrong_current_passwords_lock_out_like_wrong_sign_ins() {
    let (user, k) = ("usr_si_guess", key("guess"));
    ok_message(&set_password(k, PASSWORD, None, None));
    for i in 0..5 {
        let r = set_password(k, "a new long passphrase", Some(&format!("wrong guess number {i}")), None);
        validation(&r, "current_password");
    }
    // The sixth, with the right password, is refused until the lockout ends.
    let r = set_password(k, "a new long passphrase", Some(PASSWORD), None);
    err(&r, 429, "RATE_LIMITED");
    let wait: u64 = r.header("retry-after").expect("Retry-After").parse().unwrap();
    assert!((1..=30).contains(&wait), "{r:?}");
    // It is the sign-in's own bound: the e-mail is locked there too.
    let signed = Browser::new(srv(), "si.test").sign_in(user, PASSWORD, "");
    assert_eq!(signed.status, 429, "{signed:?}");
}

#[test]
fn a_developer_sets_its_password_and_turns_mfa_on_with_its_whole_role_key() {
    let user = "usr_si_dev";
    // A Developer's narrow key lacks what its role allows: refused, naming a missing scope.
    let r = set_password(key("dev_read"), PASSWORD, None, None);
    let e = err(&r, 403, "INSUFFICIENT_SCOPE");
    assert!(e["message"].as_str().unwrap().contains("gateways:write"), "{r:?}");
    err(&srv().api("POST", "/v1/auth/mfa/enroll", Some(key("dev_read")), None), 403, "INSUFFICIENT_SCOPE");

    // Its `*` key holds all a Developer may: MFA goes on (a Developer could not before)...
    let (t, backup) = enable_mfa(key("dev_star"));
    // ...and a password then needs MFA.
    let r = set_password(key("dev_star"), PASSWORD, None, None);
    let e = err(&r, 403, "MFA_REQUIRED");
    assert!(e["challenge_id"].as_str().is_some(), "{r:?}");
    ok_message(&set_password(key("dev_star"), PASSWORD, None, Some(&backup[0])));
    // The web sign-in asks for the second factor, and takes it.
    let b = Browser::new(srv(), "si.test");
    let page = b.sign_in(user, PASSWORD, "");
    assert_eq!(page.status, 200, "the code page: {page:?}");
    let step = step_now();
    let r = b.answer(&hidden(&page.text, "challenge_id"), &code_at(&t, step + 1));
    assert_eq!(r.status, 303, "{r:?}");
    assert!(b.signed_in());
}

#[test]
fn a_password_change_revokes_oauth_grants_and_ends_web_sessions() {
    let (user, k) = ("usr_si_revoke", key("revoke"));
    ok_message(&set_password(k, PASSWORD, None, None));
    let b = Browser::new(srv(), "si.test");
    assert_eq!(b.sign_in(user, PASSWORD, "").status, 303);
    let (client, secret) = oauth_client(srv(), k, "Identity app");
    let r = exchange_code(srv(), &client, &secret, &b.consent(&client));
    assert_eq!(r.status, 200, "{r:?}");
    let (access, refresh) = (r.json["access_token"].as_str().unwrap(), r.json["refresh_token"].as_str().unwrap());
    assert_eq!(srv().api("GET", "/v1/gateways", Some(access), None).status, 200, "the grant works");
    // A code issued but not yet exchanged.
    let waiting = b.consent(&client);

    let changed = ok_message(&set_password(k, "a second long passphrase", Some(PASSWORD), None));
    assert!(!b.signed_in(), "the web session ended");
    err(&srv().api("GET", "/v1/gateways", Some(access), None), 401, "UNAUTHORIZED");
    let r = oauth_token(
        srv(),
        &[
            ("grant_type", "refresh_token"),
            ("refresh_token", refresh),
            ("client_id", &client),
            ("client_secret", &secret),
        ],
    );
    assert_eq!((r.status, r.json["error"].as_str()), (400, Some("invalid_grant")), "{r:?}");
    let r = exchange_code(srv(), &client, &secret, &waiting);
    assert_eq!((r.status, r.json["error"].as_str()), (400, Some("invalid_grant")), "the waiting code: {r:?}");
    assert!(changed.contains("1 OAuth grant(s) revoked"), "{changed}");
}

#[test]
fn a_code_shown_to_another_client_stays_usable_by_its_own() {
    let (user, k) = ("usr_si_code", key("code"));
    ok_message(&set_password(k, PASSWORD, None, None));
    let b = Browser::new(srv(), "si.test");
    assert_eq!(b.sign_in(user, PASSWORD, "").status, 303);
    let (mine, my_secret) = oauth_client(srv(), k, "Identity app");
    let (other, other_secret) = oauth_client(srv(), k, "Identity app");
    let code = b.consent(&mine);
    let r = exchange_code(srv(), &other, &other_secret, &code);
    assert_eq!((r.status, r.json["error"].as_str()), (400, Some("invalid_grant")), "{r:?}");
    let r = exchange_code(srv(), &mine, &my_secret, &code);
    assert_eq!(r.status, 200, "the wrong client did not burn the code: {r:?}");
    assert!(r.json["access_token"].as_str().is_some_and(|t| t.starts_with("tga_")), "{r:?}");
}

#[test]
fn an_api_challenge_does_not_continue_a_web_sign_in() {
    let (_, backup) = enable_mfa(key("api_star"));
    // A key that can delete gateways (no password in hand) gets an API challenge...
    let k = key("api_gateways");
    let gw = ok(&srv().api("POST", "/v1/gateways", Some(k), Some(json!({ "name": "si-api" }))), 201);
    let r = srv().api("DELETE", &format!("/v1/gateways/{}", gw["id"].as_str().unwrap()), Some(k), None);
    let e = err(&r, 403, "MFA_REQUIRED");
    let challenge = e["challenge_id"].as_str().unwrap().to_string();
    // ...which the web MFA step does not take, even with a good code.
    let b = Browser::new(srv(), "si.test");
    let r = b.answer(&challenge, &backup[0]);
    assert_eq!(r.status, 400, "{r:?}");
    assert!(!b.signed_in(), "signed in with no password");
    // The API challenge still answers at the API, with that same (unused) backup code.
    let r = srv().api(
        "POST",
        "/v1/auth/mfa/verify",
        Some(k),
        Some(json!({ "challenge_id": challenge, "code": backup[0] })),
    );
    assert!(ok(&r, 200)["mfa_token"].as_str().is_some());
}

#[test]
fn a_web_challenge_continues_only_in_the_browser_whose_password_opened_it() {
    let (user, k) = ("usr_si_web", key("web"));
    let (_, backup) = enable_mfa(k);
    ok_message(&set_password(k, PASSWORD, None, Some(&backup[0])));
    let a = Browser::new(srv(), "si.test");
    let page = a.sign_in(user, PASSWORD, "");
    assert_eq!(page.status, 200, "{page:?}");
    let challenge = hidden(&page.text, "challenge_id");
    // Another browser (no binding cookie) and one with another sign-in's cookie are refused.
    let other = Browser::new(srv(), "si.test");
    let r = other.answer(&challenge, &backup[1]);
    assert_eq!(r.status, 400, "{r:?}");
    assert!(!other.signed_in());
    let third = Browser::new(srv(), "si.test");
    assert_eq!(third.sign_in(user, PASSWORD, "").status, 200);
    let r = third.answer(&challenge, &backup[1]);
    assert_eq!(r.status, 400, "{r:?}");
    assert!(!third.signed_in());
    // The browser that opened it signs in; the binding cookie goes.
    assert!(a.cookie("toolgate_mfa").is_some(), "the password check set the browser's binding");
    let r = a.answer(&challenge, &backup[1]);
    assert_eq!(r.status, 303, "{r:?}");
    assert!(a.signed_in() && a.cookie("toolgate_mfa").is_none());
}

#[test]
fn wrong_codes_from_one_browser_do_not_lock_the_owner_out() {
    let (user, k) = ("usr_si_lock", key("lock"));
    let (t, backup) = enable_mfa(k);
    ok_message(&set_password(k, PASSWORD, None, Some(&backup[0])));
    let wrong = wrong_code(&t, step_now());
    // Browser A knows the password but not the code: three wrong codes use its challenge up...
    let a = Browser::new(srv(), "si.test");
    let page = a.sign_in(user, PASSWORD, "");
    let first = hidden(&page.text, "challenge_id");
    assert_eq!(a.answer(&first, &wrong).status, 401);
    assert_eq!(a.answer(&first, &wrong).status, 401);
    assert_eq!(a.answer(&first, &wrong).status, 400, "used up");
    assert_eq!(a.answer(&first, &backup[1]).status, 400, "A's challenge is gone, even for a good code");
    // ...and two more on a second sign-in: five wrong codes for this user in all.
    let page = a.sign_in(user, PASSWORD, "");
    let second = hidden(&page.text, "challenge_id");
    assert_eq!(a.answer(&second, &wrong).status, 401);
    assert_eq!(a.answer(&second, &wrong).status, 401);
    // The owner, in its own browser, with the password and a good code, signs in.
    let b = Browser::new(srv(), "si.test");
    let page = b.sign_in(user, PASSWORD, "");
    assert_eq!(page.status, 200, "{page:?}");
    let r = b.answer(&hidden(&page.text, "challenge_id"), &backup[1]);
    assert_eq!(r.status, 303, "{r:?}");
    assert!(b.signed_in());
}

#[test]
fn next_never_sends_the_browser_off_the_server() {
    let (user, k) = ("usr_si_next", key("next"));
    ok_message(&set_password(k, PASSWORD, None, None));
    for bad in ["/\t/evil.example", "//evil.example", "/\\evil.example", "/%2F%2Fevil.example", "https:evil.example"] {
        let r = Browser::new(srv(), "si.test").sign_in(user, PASSWORD, bad);
        assert_eq!((r.status, r.header("location")), (303, Some("/auth/")), "next={bad:?}: {r:?}");
    }
    let r = Browser::new(srv(), "si.test").sign_in(user, PASSWORD, "/auth/?from=test");
    assert_eq!((r.status, r.header("location")), (303, Some("/auth/?from=test")), "{r:?}");
}
