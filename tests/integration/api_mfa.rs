//! MFA (Decision 9), driven by a real TOTP computation (RFC 6238: SHA-1, 6 digits, 30 s) from
//! the secret that enrolment returns: enrol, activate, the challenge flow with `MFA_REQUIRED`,
//! `/auth/mfa/verify` and `X-MFA-Token`, single-use tokens and challenges, a current code
//! directly in the header once per step, backup codes once each, and every protected action.

use crate::common;

use common::*;
use serde_json::{json, Value};
use std::collections::HashMap;
use std::sync::OnceLock;
use totp_rs::{Algorithm, Secret, TOTP};

struct Fx {
    srv: TestServer,
    keys: HashMap<&'static str, String>,
}

const USERS: [&str; 4] = ["flow", "code", "prot", "other"];

fn fx() -> &'static Fx {
    static FX: OnceLock<Fx> = OnceLock::new();
    FX.get_or_init(|| {
        let (mut users, mut yk) = (String::new(), String::new());
        let mut keys = HashMap::new();
        for u in USERS {
            users += &format!("  - {{ id: usr_{u}, email: {u}@m.test, name: {u}, role: owner, organization: org_m }}\n");
            let (k, y) = declared_key(&format!("key_{u}"), &format!("usr_{u}"), &["*"]);
            yk += &y;
            keys.insert(u, k);
        }
        let srv = TestServer::start(&format!(
            "rate_limits:\n  unauthenticated: {{ requests_per_hour: 100000, requests_per_minute: 100000, burst: 10000 }}\n\
             organizations:\n  - {{ id: org_m, name: Mfa, tier: professional }}\nusers:\n{users}api_keys:\n{yk}"
        ));
        reap_on_exit(&srv);
        Fx { srv, keys }
    })
}

fn key(u: &str) -> &'static str {
    fx().keys[u].as_str()
}

pub(crate) fn totp(secret: &str) -> TOTP {
    let bytes = Secret::Encoded(secret.to_string()).to_bytes().expect("base32 secret");
    TOTP::new_unchecked(Algorithm::SHA1, 6, 1, 30, bytes, None, String::new())
}

/// The current 30-second step, waiting for the next one if this one is about to end (so that a
/// code computed now is still current when the server checks it).
pub(crate) fn step_now() -> u64 {
    let now = unix_now();
    if now % 30 >= 27 {
        std::thread::sleep(std::time::Duration::from_secs(30 - now % 30));
    }
    unix_now() / 30
}

pub(crate) fn code_at(t: &TOTP, step: u64) -> String {
    t.generate(step * 30)
}

/// A code that is not valid at any step near now.
pub(crate) fn wrong_code(t: &TOTP, step: u64) -> String {
    let near: Vec<String> = (step - 2..=step + 2).map(|s| code_at(t, s)).collect();
    (0..).map(|i| format!("{:06}", (123_457 + i * 7919) % 1_000_000)).find(|c| !near.contains(c)).unwrap()
}

/// Turns MFA on for the user of `key` on `srv`: its TOTP and its backup codes.
pub(crate) fn mfa_on(srv: &TestServer, key: &str) -> (TOTP, Vec<String>) {
    let e = ok(&srv.api("POST", "/v1/auth/mfa/enroll", Some(key), None), 200);
    let t = totp(e["secret"].as_str().unwrap());
    let backup = e["backup_codes"].as_array().unwrap().iter().map(|c| c.as_str().unwrap().to_string()).collect();
    ok(&srv.api("POST", "/v1/auth/mfa/activate", Some(key), Some(json!({ "code": code_at(&t, step_now()) }))), 200);
    (t, backup)
}

/// Enrols and activates `user`; returns the TOTP, the backup codes and the step used.
fn enable(user: &str, activation_step_offset: i64) -> (TOTP, Vec<String>, u64) {
    let srv = &fx().srv;
    let k = key(user);
    let r = srv.api("POST", "/v1/auth/mfa/enroll", Some(k), None);
    let e = ok(&r, 200);
    let secret = e["secret"].as_str().expect("secret").to_string();
    let uri = e["otpauth_uri"].as_str().expect("otpauth_uri");
    assert!(uri.starts_with("otpauth://totp/"), "{uri}");
    assert!(uri.contains(&format!("secret={secret}")), "{uri}");
    assert_eq!(e["active"], false);
    let backup: Vec<String> =
        e["backup_codes"].as_array().unwrap().iter().map(|c| c.as_str().unwrap().to_string()).collect();
    assert!(backup.len() >= 5, "{e}");
    let t = totp(&secret);
    let step = step_now();
    validation(
        &srv.api("POST", "/v1/auth/mfa/activate", Some(k), Some(json!({ "code": wrong_code(&t, step) }))),
        "code",
    );
    let s = (step as i64 + activation_step_offset) as u64;
    let a = ok(&srv.api("POST", "/v1/auth/mfa/activate", Some(k), Some(json!({ "code": code_at(&t, s) }))), 200);
    assert_eq!(a["active"], true);
    // The seed is never shown again.
    for p in ["/v1/auth/debug", "/v1/user"] {
        let r = srv.api("GET", p, Some(k), None);
        assert!(!r.text.contains(&secret), "{p} shows the TOTP seed");
    }
    assert!(!srv.all_logs().contains(&secret), "the logs show the TOTP seed");
    (t, backup, s)
}

fn gateway(user: &str) -> String {
    crate::common::mcp::create_gateway(&fx().srv, key(user), json!({ "name": format!("mfa-{}", random_alnum(10)) })).0
}

fn delete(user: &str, gw: &str, mfa: Option<&str>) -> Resp {
    let headers: Vec<(&str, &str)> = mfa.map(|m| vec![("x-mfa-token", m)]).unwrap_or_default();
    fx().srv.request("DELETE", &format!("/v1/gateways/{gw}"), Some(key(user)), None, &headers)
}

fn challenge(r: &Resp) -> String {
    let e = err(r, 403, "MFA_REQUIRED");
    e["challenge_id"].as_str().unwrap_or_else(|| panic!("error.challenge_id: {r:?}")).to_string()
}

fn verify(user: &str, challenge_id: &str, code: &str) -> Resp {
    fx().srv.api(
        "POST",
        "/v1/auth/mfa/verify",
        Some(key(user)),
        Some(json!({ "challenge_id": challenge_id, "code": code })),
    )
}

#[test]
fn challenge_token_flow_and_backup_codes() {
    let srv = &fx().srv;
    let u = "flow";
    // Not enforced before activation.
    let g0 = gateway(u);
    ok_message(&delete(u, &g0, None));

    let (t, backup, step) = enable(u, 0);
    err(&srv.api("POST", "/v1/auth/mfa/enroll", Some(key(u)), None), 409, "CONFLICT");
    err(
        &srv.api("POST", "/v1/auth/mfa/activate", Some(key(u)), Some(json!({ "code": code_at(&t, step + 1) }))),
        409,
        "CONFLICT",
    );
    assert_eq!(ok(&srv.api("GET", "/v1/auth/debug", Some(key(u)), None), 200)["mfa_enabled"], true);

    // The protected action without the header: MFA_REQUIRED with a challenge; nothing deleted.
    let g = gateway(u);
    let ch = challenge(&delete(u, &g, None));
    ok(&srv.api("GET", &format!("/v1/gateways/{g}"), Some(key(u)), None), 200);

    validation(&verify(u, &ch, &wrong_code(&t, step)), "code");
    validation(&verify(u, "mfa_ch_nope", &code_at(&t, step + 1)), "challenge_id");
    // Another user cannot answer this user's challenge.
    validation(&verify("other", &ch, &code_at(&t, step + 1)), "challenge_id");
    let v = ok(&verify(u, &ch, &code_at(&t, step + 1)), 200);
    let token = v["mfa_token"].as_str().expect("mfa_token").to_string();
    assert_eq!(v["expires_in"].as_u64(), Some(300), "{v}");
    // The challenge is spent.
    validation(&verify(u, &ch, &backup[5]), "challenge_id");

    // Retry with the token: done.
    ok_message(&delete(u, &g, Some(&token)));
    err(&srv.api("GET", &format!("/v1/gateways/{g}"), Some(key(u)), None), 404, "NOT_FOUND");
    // The token is single use.
    let g2 = gateway(u);
    let ch2 = challenge(&delete(u, &g2, Some(&token)));
    challenge(&delete(u, &g2, Some("mfa_not_a_real_token")));
    ok(&srv.api("GET", &format!("/v1/gateways/{g2}"), Some(key(u)), None), 200);

    // A backup code answers a challenge, once.
    let v = ok(&verify(u, &ch2, &backup[0]), 200);
    ok_message(&delete(u, &g2, Some(v["mfa_token"].as_str().unwrap())));
    let g3 = gateway(u);
    let ch3 = challenge(&delete(u, &g3, None));
    validation(&verify(u, &ch3, &backup[0]), "code");
    let v = ok(&verify(u, &ch3, &backup[1]), 200);
    let tok = v["mfa_token"].as_str().unwrap().to_string();
    ok_message(&delete(u, &g3, Some(&tok)));
    // Backup codes never show up again.
    let r = srv.api("GET", "/v1/auth/debug", Some(key(u)), None);
    assert!(!backup.iter().any(|b| r.text.contains(b.as_str())));
}

#[test]
fn a_current_code_in_the_header_works_once_per_step() {
    let u = "code";
    // Activate with the previous step's code (accepted for clock skew), leaving the current
    // step's code unused.
    let (t, _, step) = enable(u, -1);
    let current = code_at(&t, step + 1);
    let g = gateway(u);
    let g2 = gateway(u);
    // The activation code itself cannot be replayed.
    challenge(&delete(u, &g, Some(&code_at(&t, step))));
    ok_message(&delete(u, &g, Some(&current)));
    // Replay of the same code (same step) is refused with a new challenge.
    challenge(&delete(u, &g2, Some(&current)));
    challenge(&delete(u, &g2, Some(&wrong_code(&t, step + 1))));
    ok(&fx().srv.api("GET", &format!("/v1/gateways/{g2}"), Some(key(u)), None), 200);
}

#[test]
fn every_protected_action_requires_mfa() {
    let srv = &fx().srv;
    let u = "prot";
    let k = key(u);
    let mk_key = |scopes: &[&str]| {
        let r = srv.api(
            "POST",
            "/v1/api-keys",
            Some(k),
            Some(json!({ "name": format!("p-{}", random_alnum(6)), "scopes": scopes })),
        );
        let d = ok(&r, 201);
        (d["id"].as_str().unwrap().to_string(), d["key"].as_str().unwrap().to_string())
    };
    let (_t, backup, _) = enable(u, 0);
    // Not protected: reading, creating.
    // A key as strong as the caller's: revoking one's own strictly weaker key is never gated
    // (tests/integration/security_mfa.rs), revoking an equal one is.
    let (victim, victim_key) = mk_key(&["*"]);
    let (rotated, rotated_key) = mk_key(&["gateways:read"]);
    let gw = gateway(u);

    let actions: Vec<(&str, String, Option<Value>)> = vec![
        ("DELETE", format!("/v1/gateways/{gw}"), None),
        ("DELETE", format!("/v1/api-keys/{victim}"), None),
        ("POST", format!("/v1/api-keys/{rotated}/rotate"), Some(json!({ "grace_period_hours": 0 }))),
        ("PATCH", "/v1/account/security".into(), Some(json!({ "enforce_ip_whitelist": false }))),
    ];
    for (i, (m, p, body)) in actions.iter().enumerate() {
        let r = srv.api(m, p, Some(k), body.clone());
        let ch = challenge(&r);
        let v = ok(&verify(u, &ch, &backup[i]), 200);
        let tok = v["mfa_token"].as_str().unwrap();
        let r = srv.request(m, p, Some(k), body.clone(), &[("x-mfa-token", tok)]);
        assert!((200..300).contains(&r.status), "{m} {p} with a fresh MFA token: {r:?}");
    }
    // They took effect.
    err(&srv.api("GET", &format!("/v1/gateways/{gw}"), Some(k), None), 404, "NOT_FOUND");
    err(&srv.api("GET", "/v1/user", Some(&victim_key), None), 401, "UNAUTHORIZED");
    err(&srv.api("GET", "/v1/user", Some(&rotated_key), None), 401, "UNAUTHORIZED");
}
