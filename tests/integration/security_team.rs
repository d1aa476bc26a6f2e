//! A narrow key stays narrow in the team (issue 54, items 7 and 9): making or raising an Owner
//! or an Admin needs a credential holding every scope of that role (a key holding only
//! `team:manage` cannot make an Owner whose `*` key then reads the organisation's keys); adding
//! a member passes the MFA gate as changing one's role does; a delegated OAuth token, even with
//! `team:manage`, makes no member; and another organisation cannot give itself your e-mail
//! address, in any letter case (nor can the operator's YAML take one a tenant's user holds).

use crate::api_mfa::mfa_on;
use crate::common::*;
use serde_json::{json, Value};
use std::collections::HashMap;
use std::sync::OnceLock;

const PASSWORD: &str = "team passphrase number one";

struct Fx {
    srv: TestServer,
    keys: HashMap<&'static str, String>,
}

/// One user per test where MFA or a password is set: tests run in parallel.
const KEYS: &[KeySpec] = &[
    ("owner_star", "usr_nt_owner", "owner", "org_nt", &["*"]),
    ("owner_team", "usr_nt_owner", "owner", "org_nt", &["team:manage"]),
    (
        "owner_most",
        "usr_nt_owner",
        "owner",
        "org_nt",
        &["gateways:*", "apps:*", "logs:read", "sessions:manage", "team:manage", "billing:manage"],
    ),
    ("viewer_star", "usr_nt_viewer", "viewer", "org_nt", &["*"]),
    ("mfa_star", "usr_nt_mfa", "owner", "org_nt", &["*"]),
    ("oauth_star", "usr_nt_oauth", "owner", "org_nt", &["*"]),
    ("b_star", "usr_nt_b", "owner", "org_nt_b", &["*"]),
];

fn fx() -> &'static Fx {
    static FX: OnceLock<Fx> = OnceLock::new();
    FX.get_or_init(|| {
        // The Owner of org_nt has the address another organisation will try to take.
        let email = |user: &str| if user == "usr_nt_owner" { "owner@nt-a.test".into() } else { format!("{user}@nt.test") };
        let (declared, keys) = declared_users_and_keys(KEYS, email);
        let srv = TestServer::start(&format!(
            "rate_limits:\n  unauthenticated: {{ requests_per_hour: 100000, requests_per_minute: 100000, burst: 10000 }}\n\
             organizations:\n  - {{ id: org_nt, name: Narrow Team, tier: enterprise }}\n\
             \x20 - {{ id: org_nt_b, name: Other Team, tier: enterprise }}\n{declared}"
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

fn add(k: &str, email: &str, role: &str, mfa: Option<&str>) -> Resp {
    let body = json!({ "email": email, "name": "New", "role": role });
    let headers: Vec<(&str, &str)> = mfa.map(|m| vec![("x-mfa-token", m)]).unwrap_or_default();
    srv().request("POST", "/v1/team/members", Some(k), Some(body), &headers)
}

fn set_role(k: &str, id: &str, role: &str) -> Resp {
    srv().api("PATCH", &format!("/v1/team/members/{id}"), Some(k), Some(json!({ "role": role })))
}

/// The members of `k`'s organisation.
fn members(k: &str) -> Vec<Value> {
    members_on(srv(), k)
}

fn members_on(srv: &TestServer, k: &str) -> Vec<Value> {
    ok(&srv.api("GET", "/v1/team/members", Some(k), None), 200)["members"].as_array().unwrap().clone()
}

fn member_with<'a>(list: &'a [Value], email: &str) -> Option<&'a Value> {
    list.iter().find(|m| m["email"].as_str().is_some_and(|e| e.eq_ignore_ascii_case(email)))
}

#[test]
fn a_team_manage_key_cannot_make_or_raise_an_owner_or_an_admin() {
    let narrow = key("owner_team");
    // Neither a key holding only `team:manage`, nor one holding every scope but `admin`.
    for k in [narrow, key("owner_most")] {
        for role in ["owner", "admin"] {
            let email = format!("{role}-{}@nt.test", random_alnum(8));
            let e = err(&add(k, &email, role, None), 403, "INSUFFICIENT_SCOPE");
            assert!(e["message"].as_str().unwrap().contains("`admin`"), "{e}");
            assert!(member_with(&members(key("owner_star")), &email).is_none(), "{email} was made");
        }
    }
    // Nor does it raise the Viewer, whose `*` key would then read the organisation's keys.
    for role in ["owner", "admin"] {
        err(&set_role(narrow, "usr_nt_viewer", role), 403, "INSUFFICIENT_SCOPE");
    }
    let viewer = members(key("owner_star")).into_iter().find(|m| m["id"] == "usr_nt_viewer").unwrap();
    assert_eq!(viewer["role"], "viewer", "{viewer}");
    err(&srv().api("GET", "/v1/api-keys", Some(key("viewer_star")), None), 403, "INSUFFICIENT_SCOPE");

    // What administers nothing, the narrow key still gives.
    let dev = ok(&add(narrow, &format!("dev-{}@nt.test", random_alnum(8)), "viewer", None), 201);
    let dev_id = dev["id"].as_str().unwrap();
    assert_eq!(ok(&set_role(narrow, dev_id, "developer"), 200)["role"], "developer");
    // A key holding the whole role makes and raises Owners and Admins.
    let owner = ok(&add(key("owner_star"), &format!("o-{}@nt.test", random_alnum(8)), "owner", None), 201);
    assert_eq!(owner["role"], "owner", "{owner}");
    assert_eq!(ok(&set_role(key("owner_star"), dev_id, "admin"), 200)["role"], "admin");
}

#[test]
fn adding_a_member_passes_the_mfa_gate_as_changing_a_role_does() {
    let k = key("mfa_star");
    let (_, backup) = mfa_on(srv(), k);
    let email = format!("mfa-owner-{}@nt.test", random_alnum(8).to_lowercase());
    let challenge = err(&add(k, &email, "owner", None), 403, "MFA_REQUIRED")["challenge_id"]
        .as_str()
        .expect("error.challenge_id")
        .to_string();
    assert!(member_with(&members(k), &email).is_none(), "made without the code");
    // A Viewer too: every new member is a new sign-in.
    err(&add(k, &format!("mfa-viewer-{}@nt.test", random_alnum(8)), "viewer", None), 403, "MFA_REQUIRED");

    // The challenge answered, its token lets the same request through.
    let body = json!({ "challenge_id": challenge, "code": backup[0] });
    let token = ok(&srv().api("POST", "/v1/auth/mfa/verify", Some(k), Some(body)), 200)["mfa_token"]
        .as_str()
        .unwrap()
        .to_string();
    let made = ok(&add(k, &email, "owner", Some(&token)), 201);
    assert_eq!((made["email"].as_str(), made["role"].as_str()), (Some(email.as_str()), Some("owner")), "{made}");
    // A backup code in the header does too.
    ok(&add(k, &format!("mfa-dev-{}@nt.test", random_alnum(8)), "developer", Some(&backup[1])), 201);
}

#[test]
fn a_delegated_oauth_token_makes_no_member() {
    let (user, k) = ("usr_nt_oauth", key("oauth_star"));
    ok_message(&srv().request("PUT", "/v1/user/password", Some(k), Some(json!({ "new_password": PASSWORD })), &[]));
    let b = Browser::new(srv(), "nt.test");
    assert_eq!(b.sign_in(user, PASSWORD, "").status, 303);
    let (client, secret) = oauth_client_for(srv(), k, "Team app", "team:manage");
    let r = exchange_code(srv(), &client, &secret, &b.consent_for(&client, "team:manage"));
    let token = ok_token(&r);
    // The token holds `team:manage`: it reads the team...
    assert!(!members(&token).is_empty());
    // ...but makes nobody, of any role, and raises nobody.
    for role in ["owner", "viewer"] {
        let email = format!("delegated-{role}-{}@nt.test", random_alnum(8));
        let e = err(&add(&token, &email, role, None), 403, "FORBIDDEN");
        assert!(e["message"].as_str().unwrap().contains("delegated OAuth token"), "{e}");
        assert!(member_with(&members(k), &email).is_none(), "{email} was made");
    }
    err(&set_role(&token, "usr_nt_viewer", "owner"), 403, "FORBIDDEN");
}

fn ok_token(r: &Resp) -> String {
    assert_eq!(r.status, 200, "{r:?}");
    r.json["access_token"].as_str().unwrap_or_else(|| panic!("access_token: {r:?}")).to_string()
}

#[test]
fn another_organisation_cannot_claim_an_address() {
    let other = key("b_star");
    for taken in ["OWNER@nt-a.test", "  Owner@NT-A.TEST ", "owner@nt-a.test"] {
        for role in ["owner", "viewer"] {
            let e = err(&add(other, taken, role, None), 409, "CONFLICT");
            let message = e["message"].as_str().unwrap();
            assert!(!message.contains("org_nt") && !message.contains("Narrow Team"), "names the holder: {e}");
        }
    }
    assert!(member_with(&members(other), "owner@nt-a.test").is_none(), "org_nt_b holds the address");
    // The address is still its owner's alone.
    let holders: Vec<Value> =
        members(key("owner_star")).into_iter().filter(|m| m["email"] == "owner@nt-a.test").collect();
    assert_eq!(holders.len(), 1, "{holders:?}");
    assert_eq!(holders[0]["id"], "usr_nt_owner");

    // And the other way round: an address org_nt_b gave first is org_nt_b's.
    let fresh = format!("fresh-{}@nt-b.test", random_alnum(8));
    ok(&add(other, &fresh, "viewer", None), 201);
    err(&add(key("owner_star"), &fresh.to_uppercase(), "viewer", None), 409, "CONFLICT");
}

#[test]
fn the_operator_cannot_declare_an_address_another_organisations_user_holds() {
    let (y, y_yaml) = declared_key("key_nty_owner", "usr_nty_owner", &["*"]);
    let (z, z_yaml) = declared_key("key_ntz_owner", "usr_ntz_owner", &["*"]);
    let mut srv = TestServer::start(&format!(
        "organizations:\n  - {{ id: org_nty, name: Y, tier: free }}\n  - {{ id: org_ntz, name: Z, tier: free }}\n\
         users:\n  - {{ id: usr_nty_owner, email: owner@nty.test, name: Y, role: owner, organization: org_nty }}\n\
         \x20 - {{ id: usr_ntz_owner, email: owner@ntz.test, name: Z, role: owner, organization: org_ntz }}\n\
         api_keys:\n{y_yaml}{z_yaml}"
    ));
    let taken = ok(
        &srv.api(
            "POST",
            "/v1/team/members",
            Some(&z),
            Some(json!({ "email": "claimed@ntz.test", "name": "C", "role": "viewer" })),
        ),
        201,
    );
    let original = std::fs::read_to_string(srv.config_path()).unwrap();
    let declared =
        "  - { id: usr_nty_late, email: ' Claimed@NTZ.test', name: Late, role: viewer, organization: org_nty }\n";
    let text = original.replace("api_keys:\n", &format!("{declared}api_keys:\n"));
    assert_ne!(text, original, "the user is declared");
    std::fs::write(srv.config_path(), &text).unwrap();

    // A reload is refused naming the field and the user who holds the address; nothing changes.
    let e = validation(&srv.api("POST", "/v1/admin/reload", Some(srv.admin_key()), None), "users[2].email");
    assert!(e["message"].as_str().unwrap().contains(taken["id"].as_str().unwrap()), "{e}");
    assert!(member_with(&members_on(&srv, &y), "claimed@ntz.test").is_none(), "declared all the same");
    // And so is a start on that configuration.
    srv.kill9();
    let out = run_until_exit(srv.config_path());
    assert!(!out.status.success(), "{}", describe_output(&out));
    assert!(String::from_utf8_lossy(&out.stderr).contains("users[2].email"), "{}", describe_output(&out));
}
