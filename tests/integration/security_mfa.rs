//! MFA that cannot be turned against its owner (security issue, defects 1 and 6): enrolment,
//! activation and disabling need scope `admin` (and MFA once active); revoking one's own
//! narrower key is never held up by MFA; an owner resets another user's MFA, the operator's
//! `TOOLGATE_ADMIN_KEY` resets anyone's; wrong codes lock out the guessing credential (not the
//! owner) and use up a challenge.

use crate::api_mfa::{code_at, step_now, totp, wrong_code};
use crate::common::*;
use serde_json::{json, Value};
use std::collections::HashMap;
use std::sync::OnceLock;
use totp_rs::TOTP;

struct Fx {
    srv: TestServer,
    keys: HashMap<&'static str, String>,
}

/// (key name, user, role, organisation, scopes). One user per test: tests run in parallel and
/// MFA state is per user.
const KEYS: &[KeySpec] = &[
    ("takeover_star", "usr_takeover", "owner", "org_sm", &["*"]),
    ("takeover_leaked", "usr_takeover", "owner", "org_sm", &["gateways:read"]),
    ("disable", "usr_disable", "owner", "org_sm", &["*"]),
    ("target", "usr_target", "admin", "org_sm", &["*"]),
    ("peer_admin", "usr_peer_admin", "admin", "org_sm", &["*"]),
    ("resetter", "usr_resetter", "owner", "org_sm", &["*"]),
    ("guarded_owner", "usr_guarded_owner", "owner", "org_sm", &["*"]),
    ("lost", "usr_lost", "owner", "org_sm", &["*"]),
    ("victim_a", "usr_victim", "owner", "org_sm", &["*"]),
    ("victim_b", "usr_victim", "owner", "org_sm", &["*"]),
    ("challenged", "usr_challenged", "owner", "org_sm", &["*"]),
    ("foreign_owner", "usr_foreign", "owner", "org_sx", &["*"]),
];

fn fx() -> &'static Fx {
    static FX: OnceLock<Fx> = OnceLock::new();
    FX.get_or_init(|| {
        let (declared, keys) = declared_users_and_keys(KEYS, |user| format!("{user}@sm.test"));
        let srv = TestServer::start(&format!(
            "rate_limits:\n  unauthenticated: {{ requests_per_hour: 100000, requests_per_minute: 100000, burst: 10000 }}\n\
             organizations:\n  - {{ id: org_sm, name: SecMfa, tier: enterprise }}\n  - {{ id: org_sx, name: Other, tier: enterprise }}\n\
             {declared}"
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

/// Enrols and activates MFA with `k`; returns the TOTP, the backup codes and the step used.
fn enable(k: &str) -> (TOTP, Vec<String>, u64) {
    let e = ok(&srv().api("POST", "/v1/auth/mfa/enroll", Some(k), None), 200);
    let t = totp(e["secret"].as_str().unwrap());
    let backup = e["backup_codes"].as_array().unwrap().iter().map(|c| c.as_str().unwrap().to_string()).collect();
    let step = step_now();
    ok(&srv().api("POST", "/v1/auth/mfa/activate", Some(k), Some(json!({ "code": code_at(&t, step) }))), 200);
    (t, backup, step)
}

fn mfa_enabled(k: &str) -> bool {
    ok(&srv().api("GET", "/v1/auth/debug", Some(k), None), 200)["mfa_enabled"].as_bool().unwrap()
}

fn gateway(k: &str) -> String {
    crate::common::mcp::create_gateway(srv(), k, json!({ "name": format!("sm-{}", random_alnum(10)) })).0
}

fn delete_gateway(k: &str, gw: &str, mfa: Option<&str>) -> Resp {
    let headers: Vec<(&str, &str)> = mfa.map(|m| vec![("x-mfa-token", m)]).unwrap_or_default();
    srv().request("DELETE", &format!("/v1/gateways/{gw}"), Some(k), None, &headers)
}

fn key_id(k: &str) -> String {
    ok(&srv().api("GET", "/v1/auth/verify", Some(k), None), 200)["key_id"].as_str().unwrap().to_string()
}

#[test]
fn a_leaked_narrow_key_cannot_take_over_mfa() {
    let leaked = key("takeover_leaked");
    for (m, p, body) in [
        ("POST", "/v1/auth/mfa/enroll", None),
        ("POST", "/v1/auth/mfa/activate", Some(json!({ "code": "123456" }))),
        ("DELETE", "/v1/auth/mfa", None),
        ("POST", "/v1/auth/mfa/reset", Some(json!({ "user_id": "usr_takeover" }))),
    ] {
        err(&srv().api(m, p, Some(leaked), body), 403, "INSUFFICIENT_SCOPE");
    }
    assert!(!mfa_enabled(key("takeover_star")), "the narrow key turned MFA on");

    // The owner turns MFA on, then takes the leaked key out of use: its own `*` key holds more
    // than the leaked one, so no MFA code is asked for.
    let owner = key("takeover_star");
    enable(owner);
    let leaked_id = key_id(leaked);
    ok_message(&srv().api("DELETE", &format!("/v1/api-keys/{leaked_id}"), Some(owner), None));
    err(&srv().api("GET", "/v1/user", Some(leaked), None), 401, "UNAUTHORIZED");
}

#[test]
fn disabling_mfa_needs_mfa_and_a_backup_code_counts() {
    let k = key("disable");
    err(&srv().api("DELETE", "/v1/auth/mfa", Some(k), None), 404, "NOT_FOUND");
    let (_, backup, _) = enable(k);
    let e = err(&srv().api("DELETE", "/v1/auth/mfa", Some(k), None), 403, "MFA_REQUIRED");
    assert!(e["challenge_id"].is_string(), "{e}");
    assert!(mfa_enabled(k));
    // A backup code works directly in X-MFA-Token, once.
    let r = srv().request("DELETE", "/v1/auth/mfa", Some(k), None, &[("x-mfa-token", &backup[0])]);
    ok_message(&r);
    assert!(!mfa_enabled(k));
    // Protected actions no longer ask; enrolment starts anew.
    let g = gateway(k);
    ok_message(&delete_gateway(k, &g, None));
    let (_, backup2, _) = enable(k);
    assert_ne!(backup, backup2, "a new enrolment has new backup codes");
    let r = srv().request("DELETE", "/v1/auth/mfa", Some(k), None, &[("x-mfa-token", &backup[1])]);
    err(&r, 403, "MFA_REQUIRED");
}

#[test]
fn an_owner_resets_another_users_mfa() {
    let target = key("target");
    enable(target);
    let g = gateway(target);
    let reset =
        |k: &str, user: &str| srv().api("POST", "/v1/auth/mfa/reset", Some(k), Some(json!({ "user_id": user })));
    // Not an Admin, not another organisation's owner (404: the user is not theirs to see).
    err(&reset(key("peer_admin"), "usr_target"), 403, "FORBIDDEN");
    err(&reset(key("foreign_owner"), "usr_target"), 404, "NOT_FOUND");
    err(&reset(key("resetter"), "usr_nobody"), 404, "NOT_FOUND");
    validation(&srv().api("POST", "/v1/auth/mfa/reset", Some(key("resetter")), Some(json!({}))), "user_id");
    assert!(mfa_enabled(target));
    ok_message(&reset(key("resetter"), "usr_target"));
    assert!(!mfa_enabled(target));
    ok_message(&delete_gateway(target, &g, None));
    err(&reset(key("resetter"), "usr_target"), 404, "NOT_FOUND");

    // An owner whose own MFA is on passes its own gate first.
    let guarded = key("guarded_owner");
    let (t, _, step) = enable(guarded);
    enable(target);
    err(&reset(guarded, "usr_target"), 403, "MFA_REQUIRED");
    assert!(mfa_enabled(target));
    let r = srv().request(
        "POST",
        "/v1/auth/mfa/reset",
        Some(guarded),
        Some(json!({ "user_id": "usr_target" })),
        &[("x-mfa-token", &code_at(&t, step + 1))],
    );
    ok_message(&r);
    assert!(!mfa_enabled(target));
}

#[test]
fn the_operator_key_recovers_any_user_without_a_code() {
    let lost = key("lost");
    enable(lost);
    let operator = srv().admin_key();
    let r = srv().api("POST", "/v1/auth/mfa/reset", Some(operator), Some(json!({ "user_id": "usr_lost" })));
    ok_message(&r);
    assert!(!mfa_enabled(lost));
    // Its own user too, once it has MFA on and has lost the device.
    enable(operator);
    err(&srv().api("DELETE", "/v1/auth/mfa", Some(operator), None), 403, "MFA_REQUIRED");
    let r = srv().api("POST", "/v1/auth/mfa/reset", Some(operator), Some(json!({ "user_id": "usr_owner" })));
    ok_message(&r);
    assert!(!mfa_enabled(operator));
}

#[test]
fn wrong_codes_lock_out_the_guessing_credential_not_the_owner() {
    let (guesser, owner) = (key("victim_a"), key("victim_b"));
    let (t, _, _) = enable(owner);
    let g = gateway(owner);
    let step = step_now();
    for i in 0..5 {
        let r = delete_gateway(guesser, &g, Some(&wrong_code(&t, step)));
        assert_eq!((r.status, r.error_code()), (403, "MFA_REQUIRED"), "wrong code {i}: {r:?}");
    }
    // Locked out now, even with the right code (which therefore stays unused).
    let good = code_at(&t, step + 1);
    let r = delete_gateway(guesser, &g, Some(&good));
    let e = err(&r, 429, "RATE_LIMITED");
    let retry = e["retry_after"].as_u64().expect("error.retry_after");
    assert!((1..=30).contains(&retry), "{e}");
    assert!(r.header("retry-after").is_some(), "{r:?}");
    let ch = err(&delete_gateway(owner, &g, None), 403, "MFA_REQUIRED")["challenge_id"].as_str().unwrap().to_string();
    let r = srv().api("POST", "/v1/auth/mfa/verify", Some(guesser), Some(json!({ "challenge_id": ch, "code": good })));
    err(&r, 429, "RATE_LIMITED");
    ok(&srv().api("GET", &format!("/v1/gateways/{g}"), Some(owner), None), 200);
    // The owner's own credential is not locked out.
    ok_message(&delete_gateway(owner, &g, Some(&good)));
}

#[test]
fn a_challenge_is_used_up_after_three_wrong_answers() {
    let k = key("challenged");
    let (t, _, _) = enable(k);
    let g = gateway(k);
    let ch = err(&delete_gateway(k, &g, None), 403, "MFA_REQUIRED")["challenge_id"].as_str().unwrap().to_string();
    let verify = |code: &str| {
        srv().api("POST", "/v1/auth/mfa/verify", Some(k), Some(json!({ "challenge_id": ch, "code": code })))
    };
    let step = step_now();
    validation(&verify(&wrong_code(&t, step)), "code");
    validation(&verify("00000-00000"), "code");
    let v: Value = validation(&verify(&wrong_code(&t, step)), "code");
    assert!(v["details"]["issue"].as_str().unwrap().contains("used up"), "{v}");
    validation(&verify(&code_at(&t, step + 1)), "challenge_id");
}

/// Challenges and tokens are records of the store (they expire with it): one asked before a
/// restart is answered after it, and a token survives a restart and still works once.
#[test]
fn challenges_and_tokens_survive_a_restart_and_stay_single_use() {
    let (k, yk) = declared_key("key_restart", "usr_restart", &["*"]);
    let mut srv = TestServer::start(&format!(
        "organizations:\n  - {{ id: org_r, name: R, tier: enterprise }}\n\
         users:\n  - {{ id: usr_restart, email: r@r.test, name: R, role: owner, organization: org_r }}\n\
         api_keys:\n{yk}"
    ));
    let e = ok(&srv.api("POST", "/v1/auth/mfa/enroll", Some(&k), None), 200);
    let t = totp(e["secret"].as_str().unwrap());
    let step = step_now();
    ok(&srv.api("POST", "/v1/auth/mfa/activate", Some(&k), Some(json!({ "code": code_at(&t, step) }))), 200);
    let gw = |srv: &TestServer| {
        let r = srv.api("POST", "/v1/gateways", Some(&k), Some(json!({ "name": format!("r-{}", random_alnum(8)) })));
        ok(&r, 201)["id"].as_str().unwrap().to_string()
    };
    let (g1, g2) = (gw(&srv), gw(&srv));
    let del = |srv: &TestServer, g: &str, tok: Option<&str>| {
        let h: Vec<(&str, &str)> = tok.map(|t| vec![("x-mfa-token", t)]).unwrap_or_default();
        srv.request("DELETE", &format!("/v1/gateways/{g}"), Some(&k), None, &h)
    };
    let ch = err(&del(&srv, &g1, None), 403, "MFA_REQUIRED")["challenge_id"].as_str().unwrap().to_string();
    srv.kill9();
    srv.restart();
    let verify = |srv: &TestServer, code: &str| {
        srv.api("POST", "/v1/auth/mfa/verify", Some(&k), Some(json!({ "challenge_id": ch, "code": code })))
    };
    let token = ok(&verify(&srv, &code_at(&t, step + 1)), 200)["mfa_token"].as_str().unwrap().to_string();
    validation(&verify(&srv, &code_at(&t, step + 1)), "challenge_id");
    srv.kill9();
    srv.restart();
    ok_message(&del(&srv, &g1, Some(&token)));
    err(&del(&srv, &g2, Some(&token)), 403, "MFA_REQUIRED");
}
