//! The identity service's own functions, on a state over an embedded store.

use super::*;
use crate::data::model::OAuthGrant;
use crate::data::store::Kind;

/// The identity service on a fresh embedded store in `dir`.
async fn service(dir: &tempfile::TempDir) -> IdentityService {
    let yaml =
        format!("server:\n  listen: 127.0.0.1:0\nstorage:\n  backend: embedded\n  path: {}\n", dir.path().display());
    let config = Arc::new(crate::config::Config::parse(&yaml).unwrap());
    let state = State::open(config, Some("tg_test_key".into())).await.unwrap().0;
    let courier = Arc::new(crate::outbound::courier::Courier::default());
    let mfa = mfa::Mfa::load(state.store.clone(), courier, Arc::new(Guesses::local())).await.unwrap();
    let audit = Arc::new(crate::data::audit::Audit::new(state.store.clone(), vec![7; 32]));
    IdentityService::new(state, Arc::new(mfa), audit)
}

fn grant(user: &User) -> OAuthGrant {
    OAuthGrant {
        id: "grt_1".into(),
        org_id: user.org_id.clone(),
        user_id: user.id.clone(),
        client_id: "tgc_1".into(),
        scopes: Vec::new(),
        created_at: chrono::Utc::now(),
        access_hash: String::new(),
        access_expires_ms: 0,
        refresh_hash: String::new(),
        refresh_expires_ms: crate::base::time::now_ms() + 60_000,
        used_refresh: Vec::new(),
        resource: None,
    }
}

/// Removing a user is one function: its record, web sessions, OAuth grants, MFA enrolment and
/// password all go, and the password's removal is published on the feed like a change of it.
#[tokio::test]
async fn removing_a_user_ends_its_record_sessions_grants_mfa_and_password() {
    let dir = tempfile::tempdir().unwrap();
    let identity = service(&dir).await;
    let state = identity.state.clone();
    let user = User {
        id: "usr_gone".into(),
        org_id: "org_1".into(),
        email: "gone@example.com".into(),
        name: "Gone".into(),
        role: "developer".into(),
        created_at: chrono::Utc::now(),
        notification_preferences: Default::default(),
        declared: false,
    };
    let user = state.save_user(user).await.unwrap();
    let hash = signin::passwords::hash("a long enough passphrase".into()).await.unwrap();
    signin::passwords::save(&state, &user, hash).await.unwrap();
    let idle = Duration::from_secs(600);
    identity.signin.sessions.start(&user, "127.0.0.1".into(), "test".into(), idle, 10).await.unwrap();
    state.save_grant(grant(&user)).await.unwrap();
    let totp = mfa::NewMethod::Totp { account: user.email.clone() };
    identity.mfa.enroll(&state.sealer, &user.id, totp).await.unwrap();
    let mut heard = state.changes.subscribe();

    let lock = state.lock_writes(&user.org_id).await.unwrap();
    let removed = identity.remove_user(&user, lock).await.unwrap();

    assert_eq!(removed.grants, 1);
    assert!(state.user(&user.id).is_none(), "the record");
    assert!(state.store.get(Kind::User, &user.id).await.unwrap().is_none(), "the stored record");
    assert!(identity.signin.sessions.of_user(&user.id).await.unwrap().is_empty(), "the web sessions");
    assert!(state.grants_of_user(&user.id).is_empty(), "the grants");
    assert!(!identity.mfa.remove(&user.id).await.unwrap(), "the MFA enrolment was already gone");
    assert!(signin::passwords::stored(state.store.as_ref(), &user.id).await.unwrap().is_none(), "the password");
    let changes: Vec<_> = std::iter::from_fn(|| heard.try_recv().ok()).collect();
    let password_published = changes
        .iter()
        .any(|c| matches!(c, crate::data::changes::Change::PasswordChanged { user_id, .. } if *user_id == user.id));
    assert!(password_published, "{changes:?}");
}

/// The `.rs` files under `dir` (a path from the crate's root), with their text.
fn sources(dir: &str) -> Vec<(std::path::PathBuf, String)> {
    let mut out = Vec::new();
    let mut todo = vec![std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join(dir)];
    while let Some(d) = todo.pop() {
        for entry in std::fs::read_dir(&d).unwrap() {
            let path = entry.unwrap().path();
            if path.is_dir() {
                todo.push(path);
            } else if path.extension().is_some_and(|e| e == "rs") {
                let text = std::fs::read_to_string(&path).unwrap();
                out.push((path, text));
            }
        }
    }
    out
}

/// The sign-in and the authorization server do not import each other: the authorization
/// server's page sits on the sign-in's sessions (`oauth_server/authorize.rs` uses `signin`),
/// and the router and the state both read are `identity`'s, so nothing of `signin` names
/// `oauth_server` (comments aside).
#[test]
fn signin_names_nothing_of_the_authorization_server() {
    let files = sources("src/identity/signin");
    assert!(files.len() > 5, "{files:?}");
    for (path, text) in files {
        for (n, line) in text.lines().enumerate() {
            let code = line.split("//").next().unwrap_or_default();
            assert!(!code.contains("oauth_server"), "{}:{}: {line}", path.display(), n + 1);
        }
    }
}
