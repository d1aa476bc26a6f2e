//! The `Origin` check of the MCP endpoint (DNS-rebinding protection, as the MCP Streamable HTTP
//! transport asks of servers): a browser request from a page whose origin is not on
//! `mcp.allowed_origins` is refused. Requests without `Origin` (every non-browser client) pass.
//!
//! It runs last in the gateway routes' chain, so a refusal is counted by the rate limit and
//! carries its headers, like every other answer.

use crate::{FilterContext, Rejection, RequestFilter, RequestView};
use arc_swap::ArcSwap;
use std::sync::Arc;

/// Cheap to clone: clones share the list, so the server can replace it ([`OriginCheck::set`],
/// a configuration reload) while the chain owns another clone.
#[derive(Clone)]
pub struct OriginCheck {
    /// Exact origins (`https://app.example.com`); `*` allows any.
    allowed: Arc<ArcSwap<Vec<String>>>,
}

impl OriginCheck {
    pub fn new(allowed: Vec<String>) -> Self {
        OriginCheck { allowed: Arc::new(ArcSwap::from_pointee(allowed)) }
    }

    /// Replaces the allowed origins for the requests that start from now on.
    pub fn set(&self, allowed: Vec<String>) {
        self.allowed.store(Arc::new(allowed));
    }

    fn allows(&self, origin: &str) -> bool {
        self.allowed.load().iter().any(|o| o == origin || o == "*")
    }
}

impl RequestFilter for OriginCheck {
    fn name(&self) -> &'static str {
        "origin"
    }

    fn filter(&self, req: &RequestView<'_>, _ctx: &mut FilterContext) -> Result<(), Rejection> {
        let Some(origin) = req.headers.get(http::header::ORIGIN) else { return Ok(()) };
        match origin.to_str() {
            Ok(origin) if self.allows(origin) => Ok(()),
            Ok(origin) => Err(Rejection::forbidden("FORBIDDEN", format!("Origin `{origin}` is not allowed"))),
            // Not text, so on no list: refused rather than waved through unread.
            Err(_) => Err(Rejection::forbidden("FORBIDDEN", "Origin is not allowed")),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::RouteClass;
    use std::net::{IpAddr, Ipv4Addr};

    fn check(filter: &OriginCheck, origin: Option<&[u8]>) -> Result<(), Rejection> {
        let mut headers = http::HeaderMap::new();
        if let Some(o) = origin {
            headers.insert(http::header::ORIGIN, http::HeaderValue::from_bytes(o).unwrap());
        }
        let view = RequestView {
            method: &http::Method::POST,
            path: "/gateway/gw_1/mcp",
            query: None,
            headers: &headers,
            client_ip: IpAddr::V4(Ipv4Addr::LOCALHOST),
            route: RouteClass::Gateway,
            gateway_id: Some("gw_1"),
            client_certificate: None,
        };
        filter.filter(&view, &mut FilterContext::default())
    }

    #[test]
    fn a_replaced_list_applies_to_every_clone() {
        let f = OriginCheck::new(vec!["https://a.example".into()]);
        let in_chain = f.clone();
        assert!(check(&in_chain, Some(b"https://b.example")).is_err());
        f.set(vec!["https://b.example".into()]);
        assert!(check(&in_chain, Some(b"https://b.example")).is_ok());
        assert!(check(&in_chain, Some(b"https://a.example")).is_err());
    }

    #[test]
    fn only_listed_origins_pass_and_requests_without_one_always_do() {
        let f = OriginCheck::new(vec!["https://app.example.com".into()]);
        assert!(check(&f, None).is_ok());
        assert!(check(&f, Some(b"https://app.example.com")).is_ok());
        let r = check(&f, Some(b"https://evil.example")).unwrap_err();
        assert_eq!((r.status, r.code), (403, "FORBIDDEN"));
        assert_eq!(r.message, "Origin `https://evil.example` is not allowed");
        assert_eq!(check(&f, Some(b"\xff")).unwrap_err().status, 403, "an Origin that is not text");
        assert!(check(&OriginCheck::new(vec!["*".into()]), Some(b"https://any.example")).is_ok());
        assert!(check(&OriginCheck::new(vec![]), Some(b"null")).is_err());
    }
}
