//! The organisation's IP allowlist on the identity service (security issue 39, item C13),
//! against the real binary. The edge knows no organisation, so the list is checked once the
//! user (or the grant) names one: a sign-in with the right password from an address the list
//! refuses gets a 403 page, no session and no MFA challenge, while a wrong password is still
//! answered as a wrong password; from an address the list holds it signs in. OAuth: the consent
//! page sends `access_denied` back to the client, and the token endpoint answers a code
//! exchange or a refresh with `invalid_grant` (400), the grant kept for an allowed address.
//!
//! No proxy is trusted here: every request comes from 127.0.0.1, which the "outside" lists
//! (203.0.113.0/24) leave out and the "inside" list holds.

use crate::api_mfa::{code_at, step_now, totp};
use crate::common::*;
use serde_json::json;
use std::collections::HashMap;
use std::sync::OnceLock;

const PASSWORD: &str = "allowlist passphrase one";
const REFUSED_PAGE: &str = "does not allow signing in from this address";

struct Fx {
    srv: TestServer,
    keys: HashMap<&'static str, String>,
}

/// (key name, user, organisation, bypass_ip_whitelist). One user and organisation per test.
const KEYS: &[(&str, &str, &str, bool)] = &[
    ("out", "usr_al_out", "org_al_out", true),
    ("in", "usr_al_in", "org_al_in", false),
    ("oauth", "usr_al_oauth", "org_al_oauth", true),
];

fn fx() -> &'static Fx {
    static FX: OnceLock<Fx> = OnceLock::new();
    FX.get_or_init(|| {
        let (mut orgs, mut users, mut yk) = (String::new(), String::new(), String::new());
        let mut keys = HashMap::new();
        for (name, user, org, bypass) in KEYS {
            orgs += &format!("  - {{ id: {org}, name: {org}, tier: enterprise }}\n");
            users += &format!("  - {{ id: {user}, email: {user}@al.test, name: {user}, role: owner, organization: {org} }}\n");
            let (k, y) = declared_key(&format!("key_{name}"), user, &["*"]);
            yk += &y.replace(" }\n", &format!(", bypass_ip_whitelist: {bypass} }}\n"));
            keys.insert(*name, k);
        }
        let srv = TestServer::start(&format!(
            "rate_limits:\n  unauthenticated: {{ requests_per_hour: 100000, requests_per_minute: 100000, burst: 10000 }}\n\
             organizations:\n{orgs}users:\n{users}api_keys:\n{yk}"
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

/// Sets the organisation's list with `k`, even when it refuses the caller's own address.
fn allowlist(k: &str, networks: &[&str], enforce: bool) {
    let body = json!({ "ip_whitelist": networks, "enforce_ip_whitelist": enforce, "allow_lockout": true });
    ok(&srv().api("PATCH", "/v1/account/security", Some(k), Some(body)), 200);
}

fn set_password(k: &str) {
    ok_message(&srv().api("PUT", "/v1/user/password", Some(k), Some(json!({ "new_password": PASSWORD }))));
}

fn refresh(client: &str, secret: &str, refresh_token: &str) -> Resp {
    oauth_token(
        srv(),
        &[
            ("grant_type", "refresh_token"),
            ("refresh_token", refresh_token),
            ("client_id", client),
            ("client_secret", secret),
        ],
    )
}

fn refresh_token_of(r: &Resp) -> String {
    assert_eq!(r.status, 200, "{r:?}");
    r.json["refresh_token"].as_str().expect("a refresh token").to_string()
}

fn refused_grant(r: &Resp) {
    assert_eq!((r.status, r.json["error"].as_str()), (400, Some("invalid_grant")), "{r:?}");
    let description = r.json["error_description"].as_str().unwrap_or_default();
    assert!(description.contains("IP allowlist"), "{r:?}");
}

#[test]
fn a_sign_in_from_outside_the_allowlist_is_refused_once_the_password_is_right() {
    let (user, k) = ("usr_al_out", key("out"));
    set_password(k);
    allowlist(k, &["203.0.113.0/24"], true);
    // MFA on: a refused address must not even get a challenge.
    let e = ok(&srv().api("POST", "/v1/auth/mfa/enroll", Some(k), None), 200);
    let t = totp(e["secret"].as_str().unwrap());
    ok(&srv().api("POST", "/v1/auth/mfa/activate", Some(k), Some(json!({ "code": code_at(&t, step_now()) }))), 200);

    // A wrong password is a wrong password: the list is not shown to who lacks it.
    let b = Browser::new(srv(), "al.test");
    let wrong = b.sign_in(user, "not the passphrase at all", "");
    assert_eq!(wrong.status, 401, "{wrong:?}");
    assert!(wrong.text.contains("The e-mail or the password is wrong."), "{wrong:?}");
    assert!(!wrong.text.contains(REFUSED_PAGE), "{wrong:?}");

    // The right one, from 127.0.0.1: refused, no session, no MFA step.
    let r = b.sign_in(user, PASSWORD, "");
    assert_eq!(r.status, 403, "{r:?}");
    assert!(r.text.contains(REFUSED_PAGE), "{r:?}");
    assert!(!r.text.contains("challenge_id"), "no code page: {r:?}");
    assert_eq!(b.cookie("toolgate_session"), None, "{r:?}");
    assert_eq!(b.cookie("toolgate_mfa"), None, "no MFA challenge was opened: {r:?}");
    assert!(!b.signed_in());
}

#[test]
fn a_sign_in_from_inside_the_allowlist_succeeds_and_oauth_works() {
    let (user, k) = ("usr_al_in", key("in"));
    set_password(k);
    // The key has no bypass: the list holding 127.0.0.1 is what lets it through.
    allowlist(k, &["203.0.113.0/24", "127.0.0.1/32"], true);
    let b = Browser::new(srv(), "al.test");
    let r = b.sign_in(user, PASSWORD, "");
    assert_eq!(r.status, 303, "{r:?}");
    assert!(b.signed_in());
    let (client, secret) = oauth_client(srv(), k, "Allowlist app");
    let first = refresh_token_of(&exchange_code(srv(), &client, &secret, &b.consent(&client)));
    refresh_token_of(&refresh(&client, &secret, &first));
}

#[test]
fn oauth_from_outside_the_allowlist_is_refused_and_the_grant_kept() {
    let (user, k) = ("usr_al_oauth", key("oauth"));
    set_password(k);
    let b = Browser::new(srv(), "al.test");
    assert_eq!(b.sign_in(user, PASSWORD, "").status, 303);
    let (client, secret) = oauth_client(srv(), k, "Allowlist app");
    let tokens = exchange_code(srv(), &client, &secret, &b.consent(&client));
    let rt = refresh_token_of(&tokens);
    let waiting = b.consent(&client);

    allowlist(k, &["203.0.113.0/24"], true);
    // The refresh, the exchange of a waiting code and the consent are refused from 127.0.0.1.
    refused_grant(&refresh(&client, &secret, &rt));
    refused_grant(&exchange_code(srv(), &client, &secret, &waiting));
    let back = back_at_client(&b.allow(&client));
    assert_eq!(back.get("error").map(String::as_str), Some("access_denied"), "{back:?}");
    assert_eq!(back.get("state").map(String::as_str), Some("st"), "{back:?}");
    assert!(!back.contains_key("code"), "{back:?}");
    // The access token is refused by the management API's own check, as before.
    let access = tokens.json["access_token"].as_str().unwrap();
    err(&srv().api("GET", "/v1/gateways", Some(access), None), 403, "IP_NOT_ALLOWED");

    // The refusal was the list's alone: with it off, the same refresh token works.
    allowlist(k, &["203.0.113.0/24"], false);
    refresh_token_of(&refresh(&client, &secret, &rt));
}
