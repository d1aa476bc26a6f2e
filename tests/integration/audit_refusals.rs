//! Refusals in the audit trail (issue 55, item A2), against the real binary: a management write
//! refused with 403 (a narrow key) or 409 (a taken name) is an entry `write.refused` naming the
//! caller, the action and the error code; a flood of them is recorded up to a share per minute
//! and folded into a count past it, while every refusal is still answered at once; a call to a
//! tool awaiting approval is `tool_call.refused` (`governance_pins`); web sign-ins, refused and
//! made, and OAuth consents are in the trail of the user's organisation, an unknown e-mail in
//! none.

use crate::common::*;
use serde_json::{json, Value};
use std::time::Duration;

const PASSWORD: &str = "refusals passphrase one";
/// Refusals of one action an organisation records one by one per minute (`audit::refusals`).
const PER_WINDOW: usize = 20;

struct Fx {
    srv: TestServer,
    owner: String,
    narrow: String,
}

fn start() -> Fx {
    let (owner, owner_yaml) = declared_key("key_rf_owner", "usr_rf", &["*"]);
    let (narrow, narrow_yaml) = declared_key("key_rf_narrow", "usr_rf_dev", &["gateways:read"]);
    let srv = TestServer::start(&format!(
        "rate_limits:\n  unauthenticated: {{ requests_per_hour: 100000, requests_per_minute: 100000, burst: 10000 }}\n\
         organizations:\n  - {{ id: org_rf, name: Refusals, tier: enterprise }}\n\
         users:\n  - {{ id: usr_rf, email: owner@rf.test, name: Owner, role: owner, organization: org_rf }}\n\
         \x20 - {{ id: usr_rf_dev, email: dev@rf.test, name: Dev, role: developer, organization: org_rf }}\n\
         api_keys:\n{owner_yaml}{narrow_yaml}"
    ));
    Fx { srv, owner, narrow }
}

/// The organisation's entries of `action` (the first page is enough here).
fn entries(fx: &Fx, action: &str) -> Vec<Value> {
    let r = fx.srv.api("GET", &format!("/v1/audit?action={action}&limit=100"), Some(&fx.owner), None);
    ok(&r, 200)["entries"].as_array().expect("entries").clone()
}

/// Waits until the entries of `action` satisfy `done` (they are appended in the background).
fn until(fx: &Fx, action: &str, done: impl Fn(&[Value]) -> bool) -> Vec<Value> {
    let mut seen = Vec::new();
    wait_until(&format!("entries {action}"), Duration::from_secs(20), || {
        seen = entries(fx, action);
        done(&seen)
    });
    seen
}

#[test]
fn refused_writes_are_entries_and_a_flood_of_them_is_folded_past_a_share() {
    let fx = start();
    let create = |key: &str, name: &str| {
        fx.srv.api("POST", "/v1/gateways", Some(key), Some(json!({"name": name, "servers": ["time"]})))
    };
    err(&create(&fx.narrow, "narrow"), 403, "INSUFFICIENT_SCOPE");
    ok(&create(&fx.owner, "taken"), 201);
    err(&create(&fx.owner, "taken"), 409, "CONFLICT");

    let refused = until(&fx, "write.refused", |e| e.len() >= 2);
    let by = |code: &str| refused.iter().find(|e| e["detail"]["code"] == code).unwrap_or_else(|| panic!("{refused:?}"));
    let scope = by("INSUFFICIENT_SCOPE");
    assert_eq!(scope["actor"], json!({"kind": "api_key", "id": "key_rf_narrow"}), "{scope}");
    assert_eq!(scope["detail"]["action"], "gateway.create", "{scope}");
    assert_eq!(
        (scope["detail"]["status"].as_u64(), scope["detail"]["route"].as_str()),
        (Some(403), Some("POST /v1/gateways"))
    );
    let conflict = by("CONFLICT");
    assert_eq!(
        (conflict["actor"]["id"].as_str(), conflict["detail"]["status"].as_u64()),
        (Some("key_rf_owner"), Some(409))
    );
    // A refused read is not a refused write.
    err(&fx.srv.api("GET", "/v1/api-keys", Some(&fx.narrow), None), 403, "INSUFFICIENT_SCOPE");

    // A flood: each refusal answered, only the share recorded one by one.
    for i in 0..2 * PER_WINDOW {
        err(&create(&fx.narrow, &format!("flood-{i}")), 403, "INSUFFICIENT_SCOPE");
    }
    // The share is the organisation's, per action: the two refusals above count in it.
    until(&fx, "write.refused", |e| e.len() >= PER_WINDOW);
    // Each refusal's entry task starts at once: once the share is in, no later one adds to it.
    std::thread::sleep(Duration::from_millis(500));
    let all = entries(&fx, "write.refused");
    assert_eq!(all.len(), PER_WINDOW, "the flood beyond the share is folded, not recorded: {all:?}");
    assert!(
        entries(&fx, "write.refused").iter().all(|e| e["detail"]["action"] != "api_key.list"),
        "reads are not in it"
    );
}

#[test]
fn sign_ins_refused_and_made_and_consents_are_in_the_users_organisation_s_trail() {
    let fx = start();
    ok_message(&fx.srv.api("PUT", "/v1/user/password", Some(&fx.owner), Some(json!({"new_password": PASSWORD}))));
    let browser = Browser::new(&fx.srv, "rf.test");
    let wrong = browser.sign_in("owner", "not the passphrase at all", "");
    assert_eq!(wrong.status, 401, "a wrong password is the form again: {wrong:?}");
    assert!(!browser.signed_in());
    Browser::new(&fx.srv, "nobody.test").sign_in("stranger", "not the passphrase at all", "");

    let failed = until(&fx, "signin.failed", |e| !e.is_empty());
    assert_eq!(failed.len(), 1, "only the known user's refusal, in its organisation: {failed:?}");
    assert_eq!(failed[0]["actor"], json!({"kind": "user", "id": "usr_rf"}), "{failed:?}");
    assert_eq!(failed[0]["target"], json!({"kind": "user", "id": "usr_rf"}), "{failed:?}");
    assert_eq!(
        (failed[0]["detail"]["reason"].as_str(), failed[0]["detail"]["address"].as_str()),
        (Some("wrong_password"), Some("127.0.0.1"))
    );
    assert!(!failed[0].to_string().contains("not the passphrase"), "a password is never in the trail");

    let signed = browser.sign_in("owner", PASSWORD, "");
    assert_eq!(signed.status, 303, "{signed:?}");
    assert!(browser.signed_in());
    let made = until(&fx, "signin.succeeded", |e| !e.is_empty());
    assert_eq!(
        (made[0]["actor"]["id"].as_str(), made[0]["detail"]["outcome"].as_str()),
        (Some("usr_rf"), Some("signed_in"))
    );

    // A consent, allowed, names the client and the decision.
    let (client, _) = oauth_client(&fx.srv, &fx.owner, "refusals-client");
    browser.consent(&client);
    let consents = until(&fx, "oauth.consent", |e| !e.is_empty());
    assert_eq!(consents[0]["target"], json!({"kind": "oauth_client", "id": client}), "{consents:?}");
    assert_eq!(consents[0]["detail"]["decision"], "allow", "{consents:?}");
}
