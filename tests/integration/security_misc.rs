//! Smaller leaks (security issue, "low"): an app's upstream address or command line is shown
//! only to the operator; the embedded store is readable by its owner only.

use crate::common::*;
use serde_json::json;
use std::os::unix::fs::PermissionsExt;

#[test]
fn app_upstreams_are_shown_to_the_operator_only() {
    let (tenant, yt) = declared_key("key_tenant", "usr_tenant", &["*"]);
    let srv = TestServer::start(&format!(
        "  - {{ id: remote, name: Remote, category: testing, url: \"http://10.1.2.3:7000/mcp\", auth_types: [api_key] }}\n\
         \x20 - {{ id: local, name: Local, category: testing, command: [/opt/internal/bin/secret-tool, --token-file, /etc/x], auth_types: [api_key] }}\n\
         organizations:\n  - {{ id: org_t, name: Tenant, tier: free }}\n\
         users:\n  - {{ id: usr_tenant, email: t@t.test, name: T, role: owner, organization: org_t }}\n\
         api_keys:\n{yt}"
    ));
    let base_url = |key: &str, app: &str| {
        let d = ok(&srv.api("GET", &format!("/v1/apps/{app}"), Some(key), None), 200);
        d["configuration"]["base_url"].as_str().unwrap().to_string()
    };
    assert_eq!(base_url(&tenant, "remote"), "remote");
    assert_eq!(base_url(&tenant, "local"), "stdio");
    assert_eq!(base_url(&tenant, "time"), "builtin:time");
    for app in ["remote", "local"] {
        let text = srv.api("GET", &format!("/v1/apps/{app}"), Some(&tenant), None).text;
        assert!(!text.contains("10.1.2.3") && !text.contains("secret-tool"), "{app}: {text}");
    }
    let list = srv.api("GET", "/v1/apps", Some(&tenant), None).text;
    assert!(!list.contains("10.1.2.3") && !list.contains("secret-tool"), "{list}");
    // The operator (the owner of the organisation made for TOOLGATE_ADMIN_KEY) sees them.
    assert_eq!(base_url(srv.admin_key(), "remote"), "http://10.1.2.3:7000/mcp");
    assert!(base_url(srv.admin_key(), "local").contains("secret-tool"));
}

#[test]
fn the_embedded_store_is_owner_only() {
    let dir = tempfile::tempdir().unwrap();
    let store = dir.path().join("nested/store");
    let srv = TestServer::start_with_config(&format!(
        "environment: development\nserver:\n  listen: 127.0.0.1:0\n  metrics_listen: 127.0.0.2:0\n\
         storage:\n  backend: embedded\n  path: {}\n",
        store.display()
    ));
    // A write, so that the write-ahead log exists too.
    ok(&srv.api("POST", "/v1/gateways", Some(srv.admin_key()), Some(json!({ "name": "perm" }))), 201);
    let mode = |p: &std::path::Path| std::fs::metadata(p).unwrap().permissions().mode() & 0o777;
    assert_eq!(mode(&store), 0o700, "the store directory toolgate made");
    let mut files = 0;
    for entry in std::fs::read_dir(&store).unwrap() {
        let path = entry.unwrap().path();
        assert_eq!(mode(&path) & 0o077, 0, "{} is readable by others: {:o}", path.display(), mode(&path));
        files += 1;
    }
    assert!(files >= 2, "the database and secret.key at least");
}
