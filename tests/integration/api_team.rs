//! `/v1/team/members` (scope `team:manage`, which only an Owner's role holds): members listed,
//! added, their role changed and removed; the organisation never loses its last Owner, nobody
//! removes themself, an e-mail is unique in the organisation and across organisations, another
//! organisation's member is a 404, and a removed member's key stops working at once while the
//! service accounts they made keep working for the organisation.

use crate::common::*;
use serde_json::{json, Value};
use std::sync::OnceLock;

struct Fx {
    srv: TestServer,
    owner: String,
    admin: String,
    other: String,
}

fn fx() -> &'static Fx {
    static FX: OnceLock<Fx> = OnceLock::new();
    FX.get_or_init(|| {
        let (owner, owner_yaml) = declared_key("key_team_owner", "usr_team_owner", &["*"]);
        let (admin, admin_yaml) = declared_key("key_team_admin", "usr_team_admin", &["*"]);
        let (other, other_yaml) = declared_key("key_team_other", "usr_team_other", &["*"]);
        let srv = TestServer::start(&format!(
            "organizations:\n  - {{ id: org_team, name: Team, tier: professional }}\n\
               \x20 - {{ id: org_team_other, name: Other, tier: professional }}\n\
             users:\n  - {{ id: usr_team_owner, email: owner@team.test, name: Owner, role: owner, organization: org_team }}\n\
               \x20 - {{ id: usr_team_admin, email: admin@team.test, name: Admin, role: admin, organization: org_team }}\n\
               \x20 - {{ id: usr_team_other, email: other@team.test, name: Other, role: owner, organization: org_team_other }}\n\
             api_keys:\n{owner_yaml}{admin_yaml}{other_yaml}"
        ));
        reap_on_exit(&srv);
        Fx { srv, owner, admin, other }
    })
}

fn members(f: &Fx) -> Vec<Value> {
    ok(&f.srv.api("GET", "/v1/team/members", Some(&f.owner), None), 200)["members"].as_array().unwrap().clone()
}

#[test]
fn owners_manage_members_within_the_rules() {
    let f = fx();
    let srv = &f.srv;
    let listed = members(f);
    let owner = listed.iter().find(|m| m["id"] == "usr_team_owner").unwrap_or_else(|| panic!("{listed:?}"));
    assert_eq!(
        (&owner["email"], &owner["role"], &owner["mfa_enabled"]),
        (&json!("owner@team.test"), &json!("owner"), &json!(false))
    );
    assert!(owner["created_at"].is_string(), "{owner}");
    assert!(listed.iter().all(|m| m["id"] != "usr_team_other"), "another organisation's member: {listed:?}");

    // An Admin's role does not hold `team:manage`, whatever its key's scopes.
    for (m, p, body) in [
        ("GET", "/v1/team/members", None),
        ("POST", "/v1/team/members", Some(json!({"email": "x@team.test", "name": "X", "role": "viewer"}))),
    ] {
        err(&srv.api(m, p, Some(&f.admin), body), 403, "INSUFFICIENT_SCOPE");
    }
    err(&srv.api("DELETE", "/v1/team/members/usr_team_owner", Some(&f.admin), None), 403, "INSUFFICIENT_SCOPE");

    let add = |body: Value| srv.api("POST", "/v1/team/members", Some(&f.owner), Some(body));
    let m = ok(&add(json!({"email": "New@Team.test", "name": "New", "role": "developer"})), 201);
    let id = m["id"].as_str().unwrap();
    assert_eq!(
        (&m["email"], &m["role"], &m["mfa_enabled"]),
        (&json!("new@team.test"), &json!("developer"), &json!(false)),
        "{m}"
    );
    assert!(members(f).iter().any(|x| x["id"] == id));
    err(&add(json!({"email": "NEW@team.test", "name": "Again", "role": "viewer"})), 409, "CONFLICT");
    // One e-mail, one organisation: another organisation cannot take it (`security_team.rs`).
    err(
        &srv.api(
            "POST",
            "/v1/team/members",
            Some(&f.other),
            Some(json!({"email": "new@team.test", "name": "N", "role": "viewer"})),
        ),
        409,
        "CONFLICT",
    );
    validation(&add(json!({"email": "nobody", "name": "N", "role": "viewer"})), "email");
    validation(&add(json!({"email": "a@b.test", "name": "", "role": "viewer"})), "name");
    validation(&add(json!({"email": "a@b.test", "name": "N", "role": "Owner"})), "role");
    validation(&add(json!({"email": "a@b.test", "name": "N", "role": "viewer", "password": "x"})), "password");

    let patch = |id: &str, role: &str| {
        srv.api("PATCH", &format!("/v1/team/members/{id}"), Some(&f.owner), Some(json!({"role": role})))
    };
    let changed = ok(&patch(id, "admin"), 200);
    assert_eq!(changed["role"], "admin", "{changed}");
    validation(&patch(id, "superuser"), "role");
    // The last Owner can be neither demoted nor removed; nobody removes themself.
    let e = err(&patch("usr_team_owner", "admin"), 409, "CONFLICT");
    assert!(e["message"].as_str().unwrap().contains("last Owner"), "{e}");
    err(&srv.api("DELETE", "/v1/team/members/usr_team_owner", Some(&f.owner), None), 409, "CONFLICT");
    // Another organisation's member, or an unknown id, is not found.
    err(&patch("usr_team_other", "viewer"), 404, "NOT_FOUND");
    err(&srv.api("DELETE", "/v1/team/members/usr_team_other", Some(&f.owner), None), 404, "NOT_FOUND");
    err(&patch("usr_nope", "viewer"), 404, "NOT_FOUND");

    // With a second Owner, the first may step down (and the list says so).
    ok(&patch(id, "owner"), 200);
    ok(&patch("usr_team_owner", "owner"), 200);
    ok(&srv.api("DELETE", &format!("/v1/team/members/{id}"), Some(&f.owner), None), 200);
    assert!(members(f).iter().all(|x| x["id"] != id));
    err(&srv.api("DELETE", &format!("/v1/team/members/{id}"), Some(&f.owner), None), 404, "NOT_FOUND");
}

#[test]
fn a_removed_members_key_stops_at_once_and_their_service_accounts_stay() {
    let (gone, gone_yaml) = declared_key("key_team_gone", "usr_team_gone", &["*"]);
    let (boss, boss_yaml) = declared_key("key_team_boss", "usr_team_boss", &["*"]);
    let srv = TestServer::start(&format!(
        "organizations:\n  - {{ id: org_team2, name: Team2, tier: professional }}\n\
         users:\n  - {{ id: usr_team_boss, email: boss@team2.test, name: Boss, role: owner, organization: org_team2 }}\n\
           \x20 - {{ id: usr_team_gone, email: gone@team2.test, name: Gone, role: admin, organization: org_team2 }}\n\
         api_keys:\n{gone_yaml}{boss_yaml}"
    ));
    // The member about to go made a service account and a key of it, and a key of their own.
    let sa = ok(
        &srv.api(
            "POST",
            "/v1/service-accounts",
            Some(&gone),
            Some(json!({"name": "ci", "scopes": ["gateways:*", "logs:read"], "rate_limit_multiplier": 1.0})),
        ),
        201,
    );
    let sa_id = sa["id"].as_str().unwrap();
    let sa_key = ok(
        &srv.api("POST", &format!("/v1/service-accounts/{sa_id}/keys"), Some(&gone), Some(json!({"name": "ci"}))),
        201,
    );
    let sa_key = sa_key["key"].as_str().unwrap();
    let own = ok(
        &srv.api("POST", "/v1/api-keys", Some(&gone), Some(json!({"name": "mine", "scopes": ["gateways:read"]}))),
        201,
    );
    let own = own["key"].as_str().unwrap();
    ok(&srv.api("GET", "/v1/gateways", Some(own), None), 200);

    let r = srv.api("DELETE", "/v1/team/members/usr_team_gone", Some(&boss), None);
    assert!(ok_message(&r).contains("2 API key(s) revoked"), "{r:?}");
    for key in [gone.as_str(), own] {
        err(&srv.api("GET", "/v1/gateways", Some(key), None), 401, "UNAUTHORIZED");
    }
    // The account works on, now the Owner's, with no more than it could do under an Admin.
    ok(&srv.api("GET", "/v1/gateways", Some(sa_key), None), 200);
    err(&srv.api("GET", "/v1/team/members", Some(sa_key), None), 403, "INSUFFICIENT_SCOPE");
    let accounts = ok(&srv.api("GET", "/v1/service-accounts", Some(&boss), None), 200);
    assert_eq!(accounts["service_accounts"][0]["created_by"], "usr_team_boss", "{accounts}");
    assert_eq!(accounts["service_accounts"][0]["key_count"], 1, "{accounts}");
    let listed = ok(&srv.api("GET", "/v1/team/members", Some(&boss), None), 200);
    assert_eq!(listed["members"].as_array().unwrap().len(), 1, "{listed}");
    // The removal is in the audit trail.
    let audit = ok(&srv.api("GET", "/v1/audit", Some(&boss), None), 200);
    let text = audit.to_string();
    assert!(text.contains("team.delete") && text.contains("usr_team_gone"), "{audit}");
}
