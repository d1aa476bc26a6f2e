//! The end of users' own connections (issue 63, docs/identity.md "Per-user connections"): a
//! connection removed, its member removed or a service account deleted has its OAuth tokens
//! revoked at the app's provider when it offers revocation (RFC 7009), in the background, never
//! holding up nor failing the removal; a provider without revocation, or one that refuses, is
//! counted and logged (never with the token). A deleted service account's keys stop working and
//! its upstream sessions are closed. Against the real binary and the recording upstream, which is
//! also the apps' authorization server (`mcp_upstreams::Recorder`, `/oauth/...`).

use crate::common;
use crate::mcp_upstreams::{config, Recorder, Seen};

use common::mcp::{create_gateway, result_text, Mcp};
use common::{declared_users_and_keys, ok, ok_message, wait_until, KeySpec, TestServer};
use serde_json::json;
use std::collections::HashMap;
use std::time::Duration;

const MEMBERS: &[KeySpec] =
    &[("dana", "usr_dana", "owner", "org_end", &["*"]), ("alice", "usr_alice", "developer", "org_end", &["*"])];

/// Three per-user OAuth apps on the recorder: `revoking` names its revocation endpoint,
/// `silent` none (its provider offers no revocation), `busy` one that answers 503.
fn start() -> (TestServer, Recorder, HashMap<&'static str, String>) {
    let up = Recorder::start();
    let (members, keys) = declared_users_and_keys(MEMBERS, |u| format!("{u}@end.test"));
    let mut apps = String::new();
    for (id, revocation) in [("revoking", Some("revoke")), ("silent", None), ("busy", Some("revoke-busy"))] {
        let revocation = revocation.map(|r| format!(", revocation_url: \"{}\"", up.url(&format!("/oauth/{r}"))));
        apps += &format!(
            "  - {{ id: {id}, name: {id}, url: \"{}\", auth_types: [api_key, oauth], connection_scope: user,\n      \
             oauth: {{ authorize_url: \"{}\", token_url: \"{}\", client_id: toolgate{} }} }}\n",
            up.url("/crm/mcp"),
            up.url("/oauth/authorize"),
            up.url("/oauth/token"),
            revocation.unwrap_or_default()
        );
    }
    let org = "organizations:\n  - { id: org_end, name: Ends, tier: enterprise }\n";
    let srv = TestServer::start_with_config(&config(&apps, &format!("{org}{members}")));
    (srv, up, keys)
}

/// Connects `app` for the caller of `key` with OAuth: the recorder's token endpoint answers the
/// code `code` with `at-<code>` and `rt-<code>`.
fn connect_oauth(srv: &TestServer, key: &str, app: &str, code: &str) {
    let body = json!({"auth_type": "oauth", "redirect_uri": "http://localhost/back"});
    let started = ok(&srv.api("POST", &format!("/v1/apps/{app}/connect"), Some(key), Some(body)), 200);
    let url = started["authorization_url"].as_str().expect("an authorization URL").to_string();
    let state = url::Url::parse(&url).unwrap().query_pairs().find(|(k, _)| k == "state").unwrap().1.to_string();
    let back = json!({"state": state, "code": code});
    let done = ok(&srv.api("POST", &format!("/v1/apps/{app}/connect/callback"), Some(key), Some(back)), 200);
    assert_eq!(done["status"], "connected", "{done}");
}

fn revocations(up: &Recorder) -> Vec<Seen> {
    up.seen().into_iter().filter(|s| s.path.contains("/oauth/revoke")).collect()
}

fn counted(srv: &TestServer, app: &str, outcome: &str) -> bool {
    srv.metrics().contains(&format!("toolgate_token_revocations_total{{app=\"{app}\",outcome=\"{outcome}\"}} 1"))
}

/// A member's own removal of a connection revokes its refresh token, then its access token, at
/// the provider; removing the member ends the rest: a provider without revocation is counted as
/// `unsupported`, one that answers 503 as `failed`, logged without the token; neither holds up
/// the removal.
#[test]
fn ended_connections_have_their_tokens_revoked_where_the_provider_offers_it() {
    let (srv, up, keys) = start();
    for app in ["revoking", "silent", "busy"] {
        connect_oauth(&srv, &keys["alice"], app, &format!("alice-{app}"));
    }
    assert!(revocations(&up).is_empty());

    ok(&srv.api("DELETE", "/v1/apps/revoking/connection", Some(&keys["alice"]), None), 200);
    wait_until("the provider heard both revocations", Duration::from_secs(10), || revocations(&up).len() == 2);
    let forms: Vec<String> = revocations(&up).iter().map(|s| s.body.clone()).collect();
    assert!(
        forms[0].contains("token=rt-alice-revoking") && forms[0].contains("token_type_hint=refresh_token"),
        "{forms:?}"
    );
    assert!(
        forms[1].contains("token=at-alice-revoking") && forms[1].contains("token_type_hint=access_token"),
        "{forms:?}"
    );
    assert!(forms.iter().all(|f| f.contains("client_id=toolgate")), "{forms:?}");
    wait_until("the revocation is counted", Duration::from_secs(5), || counted(&srv, "revoking", "revoked"));

    // Alice leaves the team: her two other connections end with her, and the removal answers
    // whatever their providers do.
    ok(&srv.api("DELETE", "/v1/team/members/usr_alice", Some(&keys["dana"]), None), 200);
    wait_until("both ends are counted", Duration::from_secs(10), || {
        counted(&srv, "silent", "unsupported") && counted(&srv, "busy", "failed")
    });
    let busy = revocations(&up).into_iter().filter(|s| s.path.ends_with("/revoke-busy")).count();
    assert_eq!(busy, 1, "the refusal of the refresh token's revocation ends the attempt");
    wait_until("the failure is logged", Duration::from_secs(5), || {
        srv.all_logs().contains("an ended connection's tokens could not be revoked")
    });
    let logs = srv.all_logs();
    assert!(logs.contains("temporarily_unavailable"), "the provider's reason is logged");
    for token in ["rt-alice-busy", "at-alice-busy", "rt-alice-silent", "rt-alice-revoking"] {
        assert!(!logs.contains(token), "{token} was logged");
    }
    assert!(!counted(&srv, "silent", "revoked") && !counted(&srv, "busy", "revoked"));
}

/// Deleting a service account revokes its keys, ends its own connections of per-user apps (as
/// removing a member does) and closes its upstream sessions.
#[test]
fn deleting_a_service_account_ends_its_connections_and_closes_its_upstreams() {
    let (srv, up, keys) = start();
    let dana = keys["dana"].as_str();
    let body = json!({"name": "robot", "scopes": ["gateways:read", "gateways:write"]});
    let sa =
        ok(&srv.api("POST", "/v1/service-accounts", Some(dana), Some(body)), 201)["id"].as_str().unwrap().to_string();
    let key = ok(
        &srv.api("POST", &format!("/v1/service-accounts/{sa}/keys"), Some(dana), Some(json!({"name": "robot key"}))),
        201,
    )["key"]
        .as_str()
        .unwrap()
        .to_string();
    let connect = |who: &str, query: &str, secret: &str| {
        let body = json!({"auth_type": "api_key", "credentials": {"api_key": secret}});
        ok(&srv.api("POST", &format!("/v1/apps/revoking/connect{query}"), Some(who), Some(body)), 200)
    };
    connect(dana, "?organization=true", "org-secret");
    connect(dana, &format!("?user_id={sa}"), "robot-secret");
    let (gw, _) = create_gateway(&srv, dana, json!({"name": "robots", "servers": ["revoking"]}));
    let robot = Mcp::open(&srv, &gw, &key);
    assert_eq!(result_text(&robot.call(2, "echo", json!({"message": "robot-1"}))), "Echo: robot-1");
    let robots_session = up
        .seen()
        .iter()
        .find(|s| s.rpc_method == "tools/call" && s.body.contains("robot-1"))
        .and_then(|s| s.headers.iter().find(|(k, _)| k == "mcp-session-id").map(|(_, v)| v.clone()))
        .expect("the robot's call went on an upstream session");

    let deleted = ok_message(&srv.api("DELETE", &format!("/v1/service-accounts/{sa}"), Some(dana), None));
    assert!(deleted.contains("1 API key(s) revoked") && deleted.contains("1 app connection(s) ended"), "{deleted}");
    let listed = ok(&srv.api("GET", "/v1/service-accounts", Some(dana), None), 200);
    assert!(listed["service_accounts"].as_array().unwrap().iter().all(|a| a["id"] != sa.as_str()), "{listed}");
    wait_until("the robot's upstream session is ended", Duration::from_secs(10), || {
        up.seen().iter().any(|s| {
            s.method == "DELETE" && s.headers.iter().any(|(k, v)| k == "mcp-session-id" && *v == robots_session)
        })
    });
    // Its key no longer works, and its connection went with it.
    let r = srv.api("GET", "/v1/gateways", Some(&key), None);
    assert_eq!(r.status, 401, "{r:?}");
    let again = srv.api("DELETE", &format!("/v1/apps/revoking/connection?user_id={sa}"), Some(dana), None);
    assert_eq!(again.status, 404, "{again:?}");
    let twice = srv.api("DELETE", &format!("/v1/service-accounts/{sa}"), Some(dana), None);
    assert_eq!(twice.status, 404, "{twice:?}");
    assert!(!srv.all_logs().contains("robot-secret"), "a connection's credential is never logged");
}
