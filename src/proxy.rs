//! The Pingora `ProxyHttp` implementation: routing, the filter chains, and writing every response
//! toolgate produces. No request is proxied by Pingora itself: management calls are answered by
//! `api`, MCP calls by `mcp` (which talks to the apps with its own pooled clients), so
//! `request_filter` always answers and returns `Ok(true)`.

use crate::api::{self, Access, Call};
use crate::error::ApiError;
use crate::metrics;
use crate::server::Server;
use async_trait::async_trait;
use bytes::Bytes;
use http::{HeaderName, HeaderValue};
use ipnet::IpNet;
use pingora::http::ResponseHeader;
use pingora::prelude::*;
use pingora::proxy::{ProxyHttp, Session};
use serde_json::{json, Value};
use std::net::{IpAddr, Ipv4Addr};
use std::sync::Arc;
use std::time::Instant;
use toolgate_filters::{client_ip::client_ip, FilterChain, FilterContext, RequestView, RouteClass};

/// Every answer carries the request's id (also in its logs and error bodies).
pub const X_REQUEST_ID: HeaderName = HeaderName::from_static("x-request-id");

/// Where a request goes, decided once from its path.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Route {
    /// Management API; the number is the length of the version prefix (`/v1` or `/api/v1`).
    Management(usize),
    Gateway(String),
    Health,
    Ready,
    NotFound,
}

impl Route {
    pub fn of(path: &str) -> Route {
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
        match path {
            "/healthz" => Route::Health,
            "/readyz" => Route::Ready,
            _ => Route::NotFound,
        }
    }

    /// Every value [`Route::label`] gives: the metrics' `route` label.
    pub const LABELS: [&'static str; 4] = ["management", "gateway", "health", "unknown"];

    fn label(&self) -> &'static str {
        Self::LABELS[match self {
            Route::Management(_) => 0,
            Route::Gateway(_) => 1,
            Route::Health | Route::Ready => 2,
            Route::NotFound => 3,
        }]
    }
}

/// A request's id: a UUID v4, hyphenated, kept inline (no allocation per request).
#[derive(Clone, Copy)]
pub struct RequestId([u8; uuid::fmt::Hyphenated::LENGTH]);

impl RequestId {
    fn new() -> RequestId {
        let mut text = [0u8; uuid::fmt::Hyphenated::LENGTH];
        uuid::Uuid::new_v4().hyphenated().encode_lower(&mut text);
        RequestId(text)
    }

    pub fn as_str(&self) -> &str {
        // Hex digits and hyphens only.
        std::str::from_utf8(&self.0).unwrap_or_default()
    }
}

impl std::fmt::Display for RequestId {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(self.as_str())
    }
}

pub struct RequestCtx {
    pub request_id: RequestId,
    pub client_ip: IpAddr,
    pub route: Route,
    pub filters: FilterContext,
    pub started: Instant,
    pub status: u16,
}

pub struct Proxy {
    pub server: Arc<Server>,
    pub management: FilterChain,
    pub gateway: FilterChain,
    pub trusted_proxies: Vec<IpNet>,
}

/// The envelope's `meta`.
fn meta(ctx: &RequestCtx) -> Value {
    json!({ "timestamp": api::iso(&chrono::Utc::now()), "request_id": ctx.request_id.as_str() })
}

pub fn error_body(err: &ApiError, ctx: &RequestCtx) -> Vec<u8> {
    serde_json::to_vec(&json!({ "success": false, "error": err.to_error_object(), "meta": meta(ctx) }))
        .unwrap_or_default()
}

/// The head of an answer with its status, the request id and the filters' headers (rate limits),
/// with room for `more` headers.
///
/// Built as `http` parts and handed to Pingora whole: `ResponseHeader::insert_header` turns every
/// name into a title-cased copy and parses that back into a name (two allocations for each header
/// that is not a standard one, seven of them here), while these names are already `HeaderName`s.
/// With no header-case map, names go out lower-case, as HTTP/2 and HTTP/3 require anyway.
pub fn response_head(status: u16, more: usize, ctx: &mut RequestCtx) -> Result<http::response::Parts> {
    let (mut h, ()) = http::Response::new(()).into_parts();
    h.status = http::StatusCode::from_u16(status)
        .map_err(|_| Error::explain(ErrorType::InternalError, format!("invalid status {status}")))?;
    // The filters' headers are answered once: moved, not copied.
    let filters = std::mem::take(&mut ctx.filters.response_headers);
    h.headers.reserve(1 + filters.len() + more);
    let id = HeaderValue::from_str(ctx.request_id.as_str())
        .map_err(|_| Error::explain(ErrorType::InternalError, "request id is not a header value"))?;
    h.headers.insert(X_REQUEST_ID, id);
    for (k, v) in filters {
        h.headers.append(k, v);
    }
    Ok(h)
}

impl Proxy {
    /// Writes a complete response with the request id and the filters' headers.
    pub async fn respond(
        &self,
        session: &mut Session,
        ctx: &mut RequestCtx,
        status: u16,
        content_type: &'static str,
        body: Vec<u8>,
        extra: &[(HeaderName, HeaderValue)],
    ) -> Result<()> {
        let mut h = response_head(status, 4 + extra.len(), ctx)?;
        h.headers.insert(http::header::CONTENT_TYPE, HeaderValue::from_static(content_type));
        h.headers.insert(http::header::CONTENT_LENGTH, HeaderValue::from(body.len()));
        h.headers.insert(http::header::CACHE_CONTROL, HeaderValue::from_static("no-store"));
        for (k, v) in extra {
            h.headers.append(k.clone(), v.clone());
        }
        ctx.status = status;
        session.write_response_header(Box::new(ResponseHeader::from(h)), false).await?;
        session.write_response_body(Some(Bytes::from(body)), true).await?;
        Ok(())
    }

    pub async fn respond_error(&self, session: &mut Session, ctx: &mut RequestCtx, err: ApiError) -> Result<()> {
        let mut extra = Vec::new();
        if let ApiError::Rejected { retry_after: Some(r), .. } = &err {
            extra.push((http::header::RETRY_AFTER, HeaderValue::from(*r)));
        }
        if err.status() >= 500 {
            tracing::error!(request_id = %ctx.request_id, error = ?err, "request failed");
        }
        let body = error_body(&err, ctx);
        self.respond(session, ctx, err.status(), "application/json", body, &extra).await
    }

    /// Reads the whole request body, refusing more than `max_body_bytes`.
    pub async fn read_body(&self, session: &mut Session) -> std::result::Result<Bytes, ApiError> {
        let limit = self.server.state.config.server.max_body_bytes;
        let declared = session
            .req_header()
            .headers
            .get(http::header::CONTENT_LENGTH)
            .and_then(|v| v.to_str().ok())
            .and_then(|v| v.parse::<usize>().ok());
        if declared.is_some_and(|n| n > limit) {
            return Err(ApiError::PayloadTooLarge(limit));
        }
        let mut buf = bytes::BytesMut::with_capacity(declared.unwrap_or(0));
        loop {
            match session.read_request_body().await {
                Ok(Some(chunk)) => {
                    if buf.len() + chunk.len() > limit {
                        return Err(ApiError::PayloadTooLarge(limit));
                    }
                    buf.extend_from_slice(&chunk);
                }
                Ok(None) => break,
                Err(e) => return Err(ApiError::validation("body", format!("cannot read request body: {e}"))),
            }
        }
        Ok(buf.freeze())
    }

    async fn management(&self, session: &mut Session, ctx: &mut RequestCtx, prefix: usize) -> Result<()> {
        let (method, path, query) = {
            let req = session.req_header();
            (req.method.clone(), req.uri.path().to_string(), req.uri.query().map(str::to_string))
        };
        let rest = &path[prefix..];
        let Some((endpoint, id)) = api::route(rest) else {
            // Unknown paths are a 404 whoever asks; the chain still runs so that the request is
            // counted and carries its rate-limit headers.
            let _ = self.run_chain(session, ctx, RouteClass::Management, &method, &path, query.as_deref());
            return self.respond_error(session, ctx, ApiError::NoRoute(path.clone())).await;
        };
        let public = matches!(api::access(endpoint, &method), Ok(Access::Public));
        // Public endpoints run the chain too, so that they are counted and carry the rate-limit
        // headers (Decision 2); of its refusals only the rate limit applies to them: they need no
        // credential, so a bad key or address does not bar them.
        if let Err(rejection) = self.run_chain(session, ctx, RouteClass::Management, &method, &path, query.as_deref()) {
            if !public || rejection.status() == 429 {
                return self.respond_error(session, ctx, rejection).await;
            }
        }
        let body = match self.read_body(session).await {
            Ok(b) => b,
            Err(e) => return self.respond_error(session, ctx, e).await,
        };
        let call = Call {
            server: &self.server,
            principal: ctx.filters.principal.clone(),
            method,
            id: id.map(|s| percent_encoding::percent_decode_str(s).decode_utf8_lossy().into_owned()),
            query: api::parse_query(query.as_deref()),
            body,
            client_ip: ctx.client_ip,
            ip_multiplier: ctx.filters.ip_rate_limit_multiplier,
            headers: &session.req_header().headers,
        };
        match api::dispatch(endpoint, call).await {
            Ok(reply) => {
                let body = if reply.raw {
                    serde_json::to_vec(&reply.data.unwrap_or(Value::Null))
                } else {
                    let mut env = json!({ "success": true, "meta": meta(ctx) });
                    if let Some(d) = reply.data {
                        env["data"] = d;
                    }
                    if let Some(m) = reply.message {
                        env["message"] = Value::String(m);
                    }
                    serde_json::to_vec(&env)
                }
                .unwrap_or_default();
                self.respond(session, ctx, reply.status, "application/json", body, &[]).await
            }
            Err(e) => self.respond_error(session, ctx, e).await,
        }
    }

    /// Runs the chain of a route class; the principal and response headers land in `ctx`.
    pub fn run_chain(
        &self,
        session: &Session,
        ctx: &mut RequestCtx,
        class: RouteClass,
        method: &http::Method,
        path: &str,
        query: Option<&str>,
    ) -> std::result::Result<(), ApiError> {
        let gateway_id = match &ctx.route {
            Route::Gateway(id) => Some(id.as_str()),
            _ => None,
        };
        let view = RequestView {
            method,
            path,
            query,
            headers: &session.req_header().headers,
            client_ip: ctx.client_ip,
            route: class,
            gateway_id,
        };
        let chain = match class {
            RouteClass::Gateway => &self.gateway,
            _ => &self.management,
        };
        chain.run(&view, &mut ctx.filters).map_err(ApiError::from)?;
        if let Some(p) = &ctx.filters.principal {
            self.server.state.record_usage(&p.key_id, ctx.client_ip);
        }
        Ok(())
    }
}

#[async_trait]
impl ProxyHttp for Proxy {
    type CTX = RequestCtx;

    fn new_ctx(&self) -> RequestCtx {
        RequestCtx {
            request_id: RequestId([b'0'; uuid::fmt::Hyphenated::LENGTH]),
            client_ip: IpAddr::V4(Ipv4Addr::UNSPECIFIED),
            route: Route::NotFound,
            filters: FilterContext::default(),
            started: Instant::now(),
            status: 0,
        }
    }

    /// Runs once a request's header has been read, before `early_request_filter`, with the
    /// connection's context (which `conn_limits::BoundedHttp` sets for every request, the first
    /// included): stops the connection's header deadline.
    fn on_connection_reuse(
        &self,
        _session: &mut Session,
        _ctx: &mut RequestCtx,
        connection: Box<dyn std::any::Any + Send + Sync>,
    ) {
        crate::conn_limits::mark_header_read(&*connection);
    }

    /// Runs first: request id, client address and route, so every later step (and every error
    /// response) has them.
    async fn early_request_filter(&self, session: &mut Session, ctx: &mut RequestCtx) -> Result<()> {
        ctx.request_id = RequestId::new();
        let peer =
            session.client_addr().and_then(|a| a.as_inet()).map(|a| a.ip()).unwrap_or(IpAddr::V4(Ipv4Addr::LOCALHOST));
        let forwarded = session.req_header().headers.get("x-forwarded-for").and_then(|v| v.to_str().ok());
        ctx.client_ip = client_ip(peer, forwarded, &self.trusted_proxies);
        ctx.route = Route::of(session.req_header().uri.path());
        Ok(())
    }

    /// Answers every request: `Ok(true)` tells Pingora the response is written and no upstream
    /// is to be contacted.
    async fn request_filter(&self, session: &mut Session, ctx: &mut RequestCtx) -> Result<bool> {
        match ctx.route.clone() {
            Route::Health => {
                let body = serde_json::to_vec(&json!({ "status": "ok" })).unwrap_or_default();
                self.respond(session, ctx, 200, "application/json", body, &[]).await?;
            }
            Route::Ready => {
                let (status, body) = match self.server.state.store.ping().await {
                    Ok(()) => (200, json!({ "status": "ready" })),
                    Err(e) => (503, json!({ "status": "unavailable", "reason": e.to_string() })),
                };
                self.respond(
                    session,
                    ctx,
                    status,
                    "application/json",
                    serde_json::to_vec(&body).unwrap_or_default(),
                    &[],
                )
                .await?;
            }
            Route::Management(prefix) => self.management(session, ctx, prefix).await?,
            Route::Gateway(id) => crate::mcp::endpoint::handle(self, session, ctx, &id).await?,
            Route::NotFound => {
                let path = session.req_header().uri.path().to_string();
                self.respond_error(session, ctx, ApiError::NoRoute(path)).await?
            }
        }
        Ok(true)
    }

    async fn upstream_peer(&self, _session: &mut Session, _ctx: &mut RequestCtx) -> Result<Box<HttpPeer>> {
        // request_filter answers every request, so Pingora never asks for a peer.
        Err(Error::explain(ErrorType::InternalError, "toolgate does not proxy through Pingora's upstream path"))
    }

    async fn logging(&self, session: &mut Session, _e: Option<&pingora::Error>, ctx: &mut RequestCtx) {
        let status =
            if ctx.status == 0 { session.response_written().map_or(0, |r| r.status.as_u16()) } else { ctx.status };
        metrics::observe_request(ctx.route.label(), status, ctx.started.elapsed());
        tracing::debug!(
            request_id = %ctx.request_id,
            method = %session.req_header().method,
            path = session.req_header().uri.path(),
            status,
            client_ip = %ctx.client_ip,
            elapsed_us = ctx.started.elapsed().as_micros() as u64,
            "request"
        );
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_request_id_is_a_fresh_uuid_v4() {
        let (a, b) = (RequestId::new(), RequestId::new());
        let parsed = uuid::Uuid::parse_str(a.as_str()).expect("a UUID");
        assert_eq!(parsed.get_version_num(), 4);
        assert_eq!(a.as_str(), parsed.hyphenated().to_string());
        assert_eq!(a.to_string(), a.as_str());
        assert_ne!(a.as_str(), b.as_str());
    }
}
