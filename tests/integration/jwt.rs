//! JWT bearer tokens on the management API (issue 4): RS256 only, kid lookup, exp/iat with
//! leeway, sub -> user, scopes within the role, and every bad token a 401.

use crate::common;

use common::TestServer;
use jsonwebtoken::{encode, Algorithm, EncodingKey, Header};
use serde_json::{json, Value};
use std::path::PathBuf;

pub(crate) fn fixture(name: &str) -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("tests/fixtures/jwt").join(name)
}

fn server() -> TestServer {
    TestServer::start(&format!(
        "organizations:\n  - {{ id: org_jwt, name: JWT Inc, tier: free }}\n\
         users:\n  - {{ id: usr_dev, email: dev@jwt.test, name: Dev, role: developer, organization: org_jwt }}\n\
         jwt:\n  leeway_secs: 5\n  keys:\n    - {{ kid: test, pem_file: {} }}\n",
        fixture("test_rsa_public.pem").display()
    ))
}

fn now() -> i64 {
    chrono::Utc::now().timestamp()
}

pub(crate) fn sign(kid: Option<&str>, claims: Value, key_file: &str) -> String {
    let mut header = Header::new(Algorithm::RS256);
    header.kid = kid.map(str::to_string);
    let pem = std::fs::read(fixture(key_file)).unwrap();
    encode(&header, &claims, &EncodingKey::from_rsa_pem(&pem).unwrap()).unwrap()
}

pub(crate) fn claims(scopes: &[&str]) -> Value {
    json!({ "sub": "usr_dev", "iat": now(), "exp": now() + 300, "scopes": scopes, "jti": "jti-1" })
}

#[test]
fn valid_token_is_the_user_with_scopes_within_the_role() {
    let srv = server();
    let token =
        sign(Some("test"), claims(&["gateways:read", "gateways:write", "billing:manage"]), "test_rsa_private.pem");
    let r = srv.api("GET", "/v1/auth/debug", Some(&token), None);
    let d = r.data();
    assert_eq!(d["credential_type"], "jwt");
    assert_eq!(d["user_id"], "usr_dev");
    assert_eq!(d["organization_id"], "org_jwt");
    assert_eq!(d["jti"], "jti-1");
    // `billing:manage` is outside a developer's role, so it is not granted.
    assert_eq!(d["scopes"], json!(["gateways:read", "gateways:write"]));
    assert_eq!(srv.api("GET", "/v1/gateways", Some(&token), None).status, 200);
    let r = srv.api("POST", "/v1/api-keys", Some(&token), Some(json!({"name": "x", "scopes": ["gateways:read"]})));
    assert_eq!((r.status, r.error_code()), (403, "INSUFFICIENT_SCOPE"), "{r:?}");
}

#[test]
fn bad_tokens_are_401() {
    let srv = server();
    let expired =
        sign(Some("test"), json!({"sub": "usr_dev", "iat": now() - 600, "exp": now() - 60}), "test_rsa_private.pem");
    let future_iat =
        sign(Some("test"), json!({"sub": "usr_dev", "iat": now() + 600, "exp": now() + 900}), "test_rsa_private.pem");
    let unknown_kid = sign(Some("nope"), claims(&["gateways:read"]), "test_rsa_private.pem");
    let no_kid = sign(None, claims(&["gateways:read"]), "test_rsa_private.pem");
    let wrong_key = sign(Some("test"), claims(&["gateways:read"]), "other_rsa_private.pem");
    let unknown_user = sign(Some("test"), json!({"sub": "usr_ghost", "exp": now() + 300}), "test_rsa_private.pem");
    // HS256 signed with the public key as the HMAC secret: the classic algorithm confusion.
    let public_pem = std::fs::read(fixture("test_rsa_public.pem")).unwrap();
    let mut hs = Header::new(Algorithm::HS256);
    hs.kid = Some("test".into());
    let confused = encode(&hs, &claims(&["gateways:read"]), &EncodingKey::from_secret(&public_pem)).unwrap();
    // alg: none.
    let b64 = |v: &Value| {
        use base64::Engine;
        base64::engine::general_purpose::URL_SAFE_NO_PAD.encode(serde_json::to_vec(v).unwrap())
    };
    let none =
        format!("{}.{}.", b64(&json!({"alg": "none", "typ": "JWT", "kid": "test"})), b64(&claims(&["gateways:read"])));
    for (name, token) in [
        ("expired", expired),
        ("iat in the future", future_iat),
        ("unknown kid", unknown_kid),
        ("no kid", no_kid),
        ("signed by another key", wrong_key),
        ("unknown user", unknown_user),
        ("HS256", confused),
        ("alg none", none),
        ("garbage", "not.a.jwt".to_string()),
    ] {
        let r = srv.api("GET", "/v1/gateways", Some(&token), None);
        assert_eq!((r.status, r.error_code()), (401, "UNAUTHORIZED"), "{name}: {r:?}");
    }
}

#[test]
fn unreadable_key_file_fails_the_config_check() {
    let dir = tempfile::tempdir().unwrap();
    let cfg = dir.path().join("c.yaml");
    std::fs::write(&cfg, "jwt:\n  keys:\n    - { kid: k, pem_file: /nonexistent.pem }\n").unwrap();
    let out = std::process::Command::new(TestServer::binary()).arg("check-config").arg(&cfg).output().unwrap();
    assert!(!out.status.success());
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(err.contains("jwt.keys[k].pem_file"), "{err}");
}

/// Serves `body` to every request on an OS-chosen port, for the JWKS URL.
pub(crate) fn serve_jwks(body: String) -> String {
    use std::io::{Read, Write};
    let listener = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
    let addr = listener.local_addr().unwrap();
    std::thread::spawn(move || {
        for mut conn in listener.incoming().flatten() {
            let mut buf = [0u8; 4096];
            let _ = conn.read(&mut buf);
            let head = format!(
                "HTTP/1.1 200 OK\r\nContent-Type: application/json\r\nContent-Length: {}\r\nConnection: close\r\n\r\n",
                body.len()
            );
            let _ = conn.write_all(head.as_bytes());
            let _ = conn.write_all(body.as_bytes());
        }
    });
    format!("http://{addr}/jwks.json")
}

#[test]
fn keys_from_a_jwks_file_and_a_jwks_url() {
    let jwks = std::fs::read_to_string(fixture("jwks.json")).unwrap();
    // The URL serves the same key under another kid, so each source is proven on its own.
    let url = serve_jwks(jwks.replace("jwks-test", "from-url"));
    let srv = TestServer::start(&format!(
        "organizations:\n  - {{ id: org_jwt, name: JWT Inc, tier: free }}\n\
         users:\n  - {{ id: usr_dev, email: dev@jwt.test, name: Dev, role: developer, organization: org_jwt }}\n\
         jwt:\n  jwks_file: {}\n  jwks_url: {url}\n",
        fixture("jwks.json").display()
    ));
    let from_file = sign(Some("jwks-test"), claims(&["gateways:read"]), "test_rsa_private.pem");
    assert_eq!(srv.api("GET", "/v1/gateways", Some(&from_file), None).status, 200);
    // The URL is fetched by the background refresher shortly after start.
    let from_url = sign(Some("from-url"), claims(&["gateways:read"]), "test_rsa_private.pem");
    let deadline = std::time::Instant::now() + std::time::Duration::from_secs(10);
    loop {
        let r = srv.api("GET", "/v1/gateways", Some(&from_url), None);
        if r.status == 200 {
            break;
        }
        assert!(std::time::Instant::now() < deadline, "the JWKS URL key was never used: {r:?}");
        std::thread::sleep(std::time::Duration::from_millis(200));
    }
    let unknown = sign(Some("nope"), claims(&["gateways:read"]), "test_rsa_private.pem");
    assert_eq!(srv.api("GET", "/v1/gateways", Some(&unknown), None).status, 401);
}

/// In production a JWT section binds tokens to one issuer and audience, or says explicitly that
/// it does not (security issue, low: tokens of any issuer for any audience were accepted).
#[test]
fn production_requires_issuer_and_audience() {
    let dir = tempfile::tempdir().unwrap();
    let pem = fixture("test_rsa_public.pem");
    let check = |jwt: &str| {
        let cfg = dir.path().join("c.yaml");
        std::fs::write(&cfg, format!("jwt:\n  keys:\n    - {{ kid: k, pem_file: {} }}\n{jwt}", pem.display())).unwrap();
        let out = std::process::Command::new(TestServer::binary()).arg("check-config").arg(&cfg).output().unwrap();
        (out.status.success(), String::from_utf8_lossy(&out.stderr).to_string())
    };
    let (ok, err) = check("");
    assert!(!ok && err.contains("jwt.issuer"), "no issuer in production: {err}");
    let (ok, err) = check("  issuer: https://idp.test\n");
    assert!(!ok && err.contains("jwt.audience"), "no audience in production: {err}");
    let (ok, err) = check("  issuer: https://idp.test\n  audience: toolgate\n");
    assert!(ok, "both set: {err}");
    let (ok, err) = check("  insecure_skip_issuer_audience: true\n");
    assert!(ok, "explicitly disabled: {err}");
    let (ok, err) = check("  issuer: https://idp.test\n  audience: toolgate\n  max_lifetime_secs: 0\n");
    assert!(!ok && err.contains("jwt.max_lifetime_secs"), "{err}");
}

/// A token living longer than `jwt.max_lifetime_secs` (default one day) is refused, whether it
/// says when it was issued or not.
#[test]
fn token_lifetime_is_capped() {
    let srv = TestServer::start(&format!(
        "organizations:\n  - {{ id: org_jwt, name: JWT Inc, tier: free }}\n\
         users:\n  - {{ id: usr_dev, email: dev@jwt.test, name: Dev, role: developer, organization: org_jwt }}\n\
         jwt:\n  max_lifetime_secs: 3600\n  keys:\n    - {{ kid: test, pem_file: {} }}\n",
        fixture("test_rsa_public.pem").display()
    ));
    let token = |claims: Value| sign(Some("test"), claims, "test_rsa_private.pem");
    let within = token(json!({ "sub": "usr_dev", "iat": now(), "exp": now() + 3000 }));
    assert_eq!(srv.api("GET", "/v1/user", Some(&within), None).status, 200);
    let long = token(json!({ "sub": "usr_dev", "iat": now(), "exp": now() + 7200 }));
    let r = srv.api("GET", "/v1/user", Some(&long), None);
    assert_eq!((r.status, r.error_code()), (401, "UNAUTHORIZED"), "a two-hour token: {r:?}");
    let no_iat = token(json!({ "sub": "usr_dev", "exp": now() + 30 * 86_400 }));
    let r = srv.api("GET", "/v1/user", Some(&no_iat), None);
    assert_eq!((r.status, r.error_code()), (401, "UNAUTHORIZED"), "a month-long token without iat: {r:?}");
}
