//! Where a request goes, decided once from its path. A leaf: the proxy routes by it and the
//! metrics label by it, without either knowing the other.

/// Where a request goes.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Route {
    /// Management API; the number is the length of the version prefix (`/v1` or `/api/v1`).
    Management(usize),
    Gateway(String),
    /// A gateway's protected-resource metadata (RFC 9728), for MCP clients that sign in with OAuth.
    ResourceMetadata(String),
    /// toolgate's authorization-server metadata (RFC 8414).
    AuthorizationServerMetadata,
    /// The identity service's pages (`web.path`, `{auth_url}`); the number is the prefix's length.
    Identity(usize),
    Health,
    Ready,
    NotFound,
}

impl Route {
    /// `identity` is `web.path`, the identity service's prefix.
    pub fn of(path: &str, identity: &str) -> Route {
        for prefix in ["/v1", "/api/v1"] {
            if let Some(rest) = path.strip_prefix(prefix) {
                if rest.is_empty() || rest.starts_with('/') {
                    return Route::Management(prefix.len());
                }
            }
        }
        if let Some(rest) = path.strip_prefix("/gateway/") {
            if let Some((id, "mcp" | "mcp/")) = rest.split_once('/') {
                if !id.is_empty() {
                    return Route::Gateway(id.to_string());
                }
            }
        }
        if let Some(rest) = path.strip_prefix("/.well-known/oauth-protected-resource/gateway/") {
            if let Some((id, "mcp")) = rest.split_once('/') {
                if !id.is_empty() {
                    return Route::ResourceMetadata(id.to_string());
                }
            }
        }
        if path == "/.well-known/oauth-authorization-server" {
            return Route::AuthorizationServerMetadata;
        }
        if let Some(rest) = path.strip_prefix(identity) {
            if rest.is_empty() || rest.starts_with('/') {
                return Route::Identity(identity.len());
            }
        }
        match path {
            "/healthz" => Route::Health,
            "/readyz" => Route::Ready,
            _ => Route::NotFound,
        }
    }

    /// Every value [`Route::label`] gives: the metrics' `route` label.
    pub(crate) const LABELS: [&'static str; 6] = ["management", "gateway", "health", "unknown", "metadata", "identity"];

    pub fn label(&self) -> &'static str {
        Self::LABELS[match self {
            Route::Management(_) => 0,
            Route::Gateway(_) => 1,
            Route::Health | Route::Ready => 2,
            Route::NotFound => 3,
            Route::ResourceMetadata(_) | Route::AuthorizationServerMetadata => 4,
            Route::Identity(_) => 5,
        }]
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn paths_route_by_prefix_and_the_gateway_segment() {
        assert_eq!(Route::of("/v1/gateways", "/auth"), Route::Management(3));
        assert_eq!(Route::of("/api/v1", "/auth"), Route::Management(7));
        assert_eq!(Route::of("/v1x", "/auth"), Route::NotFound);
        assert_eq!(Route::of("/gateway/gw_1/mcp", "/auth"), Route::Gateway("gw_1".into()));
        assert_eq!(Route::of("/gateway/gw_1/mcp/", "/auth"), Route::Gateway("gw_1".into()));
        assert_eq!(Route::of("/gateway//mcp", "/auth"), Route::NotFound);
        assert_eq!(Route::of("/gateway/gw_1/other", "/auth"), Route::NotFound);
        assert_eq!(
            Route::of("/.well-known/oauth-protected-resource/gateway/gw_1/mcp", "/auth"),
            Route::ResourceMetadata("gw_1".into())
        );
        assert_eq!(Route::of("/.well-known/oauth-protected-resource/gateway/gw_1/x", "/auth"), Route::NotFound);
        assert_eq!(Route::of("/.well-known/oauth-authorization-server", "/auth"), Route::AuthorizationServerMetadata);
        assert_eq!(Route::of("/auth/signin", "/auth"), Route::Identity(5));
        assert_eq!(Route::of("/auth", "/auth"), Route::Identity(5));
        assert_eq!(Route::of("/authx", "/auth"), Route::NotFound);
        assert_eq!(Route::of("/healthz", "/auth").label(), "health");
        assert_eq!(Route::of("/nope", "/auth").label(), "unknown");
    }
}
