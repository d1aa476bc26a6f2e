//! Where OAuth metadata lives: the well-known URIs of RFC 8414 (authorization servers), RFC 9728
//! (protected resources) and OpenID Connect discovery. Asked by app OAuth (an app's authorization
//! server) and by the gateways' token verifier (an issuer's keys).

/// The well-known URIs of `name` for `url`: with the URL's path after the well-known part (RFC
/// 8414 section 3.1, RFC 9728 section 3.1), then at the root.
pub(crate) fn urls(url: &url::Url, name: &str) -> Vec<String> {
    let origin = url.origin().ascii_serialization();
    let path = url.path().trim_end_matches('/');
    let mut all = Vec::new();
    if !path.is_empty() {
        all.push(format!("{origin}/.well-known/{name}{path}"));
    }
    all.push(format!("{origin}/.well-known/{name}"));
    all
}

/// Where the metadata of the authorization server `issuer` may be, in the order to ask: RFC
/// 8414's URIs, then OpenID discovery's (which also puts the well-known part after an issuer's
/// path). Empty when `issuer` is not a URL.
pub(crate) fn authorization_server_metadata(issuer: &str) -> Vec<String> {
    let Ok(url) = url::Url::parse(issuer) else { return Vec::new() };
    let mut all = urls(&url, "oauth-authorization-server");
    all.extend(urls(&url, "openid-configuration"));
    if !url.path().trim_end_matches('/').is_empty() {
        all.push(format!("{}/.well-known/openid-configuration", issuer.trim_end_matches('/')));
    }
    all
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn well_known_uris_put_the_path_after_the_well_known_part_then_try_the_root() {
        let u = url::Url::parse("https://mcp.example.com/tenant/mcp").unwrap();
        assert_eq!(
            urls(&u, "oauth-protected-resource"),
            [
                "https://mcp.example.com/.well-known/oauth-protected-resource/tenant/mcp",
                "https://mcp.example.com/.well-known/oauth-protected-resource"
            ]
        );
        let root = url::Url::parse("https://auth.example.com/").unwrap();
        assert_eq!(urls(&root, "openid-configuration"), ["https://auth.example.com/.well-known/openid-configuration"]);
    }

    #[test]
    fn an_issuer_with_a_path_is_asked_with_the_path_inserted_then_appended() {
        assert_eq!(
            authorization_server_metadata("https://id.example/tenant1"),
            [
                "https://id.example/.well-known/oauth-authorization-server/tenant1",
                "https://id.example/.well-known/oauth-authorization-server",
                "https://id.example/.well-known/openid-configuration/tenant1",
                "https://id.example/.well-known/openid-configuration",
                "https://id.example/tenant1/.well-known/openid-configuration",
            ]
        );
        assert_eq!(
            authorization_server_metadata("https://id.example"),
            [
                "https://id.example/.well-known/oauth-authorization-server",
                "https://id.example/.well-known/openid-configuration"
            ]
        );
        assert!(authorization_server_metadata("not a url").is_empty());
    }
}
