//! The Pingora `ProxyHttp` implementation: routing by path and the filter chains, before a
//! request is handed to `api` (management) or `mcp` (gateways). No request is proxied by Pingora
//! itself: `mcp` talks to the apps with its own pooled clients, so `request_filter` always
//! answers and returns `Ok(true)`. Answers are written through [`Exchange`].

use crate::api::{self, Access, Call};
use crate::error::ApiError;
use crate::exchange::{success_body, Exchange, RequestCtx, RequestId};
use crate::gateway_oauth;
use crate::route::Route;
use crate::server::Server;
use crate::trace::{self, Span, SpanKind, TraceContext};
use crate::{logging, metrics};
use async_trait::async_trait;
use ipnet::IpNet;
use pingora::prelude::*;
use pingora::proxy::{ProxyHttp, Session};
use serde_json::{json, Value};
use std::net::{IpAddr, Ipv4Addr};
use std::sync::Arc;
use std::time::{Instant, SystemTime};
use toolgate_filters::auth::AuthError;
use toolgate_filters::{client_ip::client_ip, FilterChain, RequestView, RouteClass};

pub struct Proxy {
    pub server: Arc<Server>,
    pub management: FilterChain,
    /// The gateway routes' chain: the management chain's filters, then the Origin check.
    pub gateway: FilterChain,
    pub trusted_proxies: Vec<IpNet>,
    /// `web.path`, read once at start.
    pub identity_path: String,
}

/// What the filters see of a request.
fn request_view<'r>(
    req: &'r pingora::http::RequestHeader,
    client_ip: std::net::IpAddr,
    route: &'r Route,
    client_certificate: Option<&'r str>,
    class: RouteClass,
) -> RequestView<'r> {
    let gateway_id = match route {
        Route::Gateway(id) => Some(id.as_str()),
        _ => None,
    };
    RequestView {
        method: &req.method,
        path: req.uri.path(),
        query: req.uri.query(),
        headers: &req.headers,
        client_ip,
        route: class,
        gateway_id,
        client_certificate,
    }
}

impl Proxy {
    /// A 401 from a gateway that takes OAuth access tokens says where to get one (RFC 9728); a
    /// 403 for a token's scope says which scope to ask for (step-up, RFC 6750 section 3.1).
    fn challenge(&self, ex: &mut Exchange<'_>, gateway_id: &str) {
        let state = &self.server.state;
        if state.oauth_gateway(gateway_id).is_none() {
            return;
        }
        let config = state.config();
        let refused = ex.ctx.filters.credential_error;
        let value =
            gateway_oauth::challenge(config.gateway_oauth.as_ref(), &config.server.public_url, gateway_id, refused);
        if let Ok(value) = http::HeaderValue::from_str(&value) {
            ex.ctx.filters.response_headers.push((http::header::WWW_AUTHENTICATE, value));
        }
    }

    /// A gateway's protected-resource metadata; a 404, as for any unknown path, when the gateway
    /// does not take OAuth access tokens.
    async fn resource_metadata(&self, ex: &mut Exchange<'_>, gateway_id: &str) -> Result<()> {
        match self.server.state.oauth_gateway(gateway_id) {
            Some(gateway) => {
                let config = self.server.state.config();
                let doc = gateway_oauth::metadata(config.gateway_oauth.as_ref(), &config.server.public_url, &gateway);
                drop(config);
                ex.json(200, serde_json::to_vec(&doc).unwrap_or_default()).await
            }
            None => {
                let path = ex.request().uri.path().to_string();
                ex.respond_error(ApiError::NoRoute(path)).await
            }
        }
    }

    async fn management(&self, ex: &mut Exchange<'_>, prefix: usize) -> Result<()> {
        let (method, path, query) = {
            let req = ex.request();
            (req.method.clone(), req.uri.path().to_string(), req.uri.query().map(str::to_string))
        };
        let rest = &path[prefix..];
        let Some((endpoint, id)) = api::route(rest) else {
            // Unknown paths are a 404 whoever asks; the chain still runs so that the request is
            // counted and carries its rate-limit headers.
            let _ = self.run_chain(ex, RouteClass::Management).await;
            return ex.respond_error(ApiError::NoRoute(path.clone())).await;
        };
        let public = matches!(api::access(endpoint, &method), Ok(Access::Public));
        // Public endpoints run the chain too, so that they are counted and carry the rate-limit
        // headers (Decision 2); of its refusals only the rate limit applies to them: they need no
        // credential, so a bad key or address does not bar them.
        if let Err(rejection) = self.run_chain(ex, RouteClass::Management).await {
            if !public || rejection.status() == 429 {
                return ex.respond_error(rejection).await;
            }
        }
        let body = match ex.read_body().await {
            Ok(b) => b,
            Err(e) => return ex.respond_error(e).await,
        };
        // A batch's per-operation cost, charged before any operation runs (a batch over the
        // limit of operations is refused by its handler, uncharged).
        let operations = if endpoint == api::Endpoint::Batch { api::batch::operations_in(&body) } else { 0 };
        if operations > 0 && operations <= self.server.state.config().limits.batch_max_operations {
            let extra = toolgate_filters::rate_limit::batch_extra_cost(operations);
            if let Err(rejection) = self.charge_extra(ex, extra).await {
                return ex.respond_error(rejection).await;
            }
        }
        let call = Call {
            server: &self.server,
            principal: ex.ctx.filters.principal.clone(),
            method,
            id: id.map(|s| percent_encoding::percent_decode_str(s).decode_utf8_lossy().into_owned()),
            query: api::parse_query(query.as_deref()),
            body,
            client_ip: ex.ctx.client_ip,
            ip_multiplier: ex.ctx.filters.ip_rate_limit_multiplier,
            headers: ex.headers(),
        };
        match api::dispatch(endpoint, call).await {
            Ok(reply) => {
                let body = if reply.raw {
                    serde_json::to_vec(&reply.data.unwrap_or(Value::Null)).unwrap_or_default()
                } else {
                    success_body(reply.data, reply.message, ex.ctx)
                };
                ex.respond(reply.status, "application/json", body, &[]).await
            }
            Err(e) => ex.respond_error(e).await,
        }
    }

    /// Charges `extra` more tokens to the bucket the chain charged this request to.
    async fn charge_extra(&self, ex: &mut Exchange<'_>, extra: u32) -> std::result::Result<(), ApiError> {
        let (req, ctx) = ex.parts();
        let view =
            request_view(req, ctx.client_ip, &ctx.route, ctx.client_certificate.as_deref(), RouteClass::Management);
        self.server.limiter.charge_extra(&view, &mut ctx.filters, extra)?;
        // `exact`: the extra tokens are taken in the shared backend.
        match self.server.limiter.settle(&mut ctx.filters).await {
            Some(Err(limited)) => Err(ApiError::from(limited)),
            _ => Ok(()),
        }
    }

    /// Runs the chain of a route class; the principal and response headers land in the context.
    async fn run_chain(&self, ex: &mut Exchange<'_>, class: RouteClass) -> std::result::Result<(), ApiError> {
        let (req, ctx) = ex.parts();
        let view = request_view(req, ctx.client_ip, &ctx.route, ctx.client_certificate.as_deref(), class);
        let chain = match class {
            RouteClass::Gateway => &self.gateway,
            _ => &self.management,
        };
        let chain_started = (ctx.trace.is_some() && trace::exporting()).then(|| (SystemTime::now(), Instant::now()));
        let mut ran = chain.run(&view, &mut ctx.filters);
        // `rate_limits.distributed: exact`: the rate limit left its charge for one round trip
        // to the shared backend; a refusal there answers instead of the chain's (as a refusal
        // of the rate-limit filter in the chain would).
        if let Some(Err(limited)) = self.server.limiter.settle(&mut ctx.filters).await {
            ctx.filters.rejected_by = Some("rate_limit");
            ran = Err(limited);
        }
        if let (Some((start, clock)), Some(t)) = (chain_started, &ctx.trace) {
            let mut attributes = vec![("toolgate.filters", json!(chain.names().join(",")))];
            if let Some(by) = ctx.filters.rejected_by {
                attributes.push(("toolgate.filter.rejected_by", json!(by)));
            }
            trace::record(Span {
                trace_id: t.trace_id,
                span_id: trace::new_span_id(),
                parent_id: Some(t.span_id),
                name: "filter chain".into(),
                kind: SpanKind::Internal,
                start,
                duration: clock.elapsed(),
                error: ran.is_err(),
                attributes,
            });
        }
        if let Err(rejection) = ran {
            let f = &ctx.filters;
            let bucket = f.rate_limit.as_ref().filter(|_| rejection.status == 429).map(|c| c.bucket.as_str());
            metrics::filter_rejected(f.rejected_by.unwrap_or("unknown"), rejection.code, bucket);
            return Err(ApiError::from(rejection));
        }
        if let Some(p) = &ctx.filters.principal {
            // Several instances on Redis, and Redis silent past the grace: the keys and gateways
            // this instance holds may be stale (a key revoked elsewhere), so no caller is served.
            if let Some(secs) = self.server.state.shared_store_lost_for() {
                return Err(ApiError::Unavailable(format!(
                    "the shared store has not answered for {secs} s: this instance cannot vouch for credentials"
                )));
            }
            // `rate_limits.outage: closed`: no call is admitted on this instance's count alone.
            if let Some(lost) = self.server.sharing.lost_for() {
                if self.server.state.config().rate_limits.outage == "closed" {
                    return Err(ApiError::Unavailable(format!(
                        "rate limits cannot be shared (Redis has not answered for {} ms) and rate_limits.outage is closed",
                        lost.as_millis()
                    )));
                }
            }
            self.server.state.record_usage(&p.key_id, ctx.client_ip);
        }
        Ok(())
    }

    /// A gateway's MCP endpoint: the chain first, its refusals answered in JSON-RPC form.
    async fn gateway(&self, ex: &mut Exchange<'_>, gateway_id: &str) -> Result<()> {
        if let Err(e) = self.run_chain(ex, RouteClass::Gateway).await {
            if e.status() == 401 || ex.ctx.filters.credential_error == Some(AuthError::InsufficientScope) {
                self.challenge(ex, gateway_id);
            }
            return crate::mcp::reply::api_error(ex, e).await;
        }
        crate::mcp::transport::handle(&self.server.mcp, ex, gateway_id).await
    }
}

#[async_trait]
impl ProxyHttp for Proxy {
    type CTX = RequestCtx;

    fn new_ctx(&self) -> RequestCtx {
        RequestCtx::default()
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
        ctx.request_id = RequestId::generate();
        let peer =
            session.client_addr().and_then(|a| a.as_inet()).map(|a| a.ip()).unwrap_or(IpAddr::V4(Ipv4Addr::LOCALHOST));
        let forwarded = session.req_header().headers.get("x-forwarded-for").and_then(|v| v.to_str().ok());
        ctx.client_ip = client_ip(peer, forwarded, &self.trusted_proxies);
        ctx.route = Route::of(session.req_header().uri.path(), &self.identity_path);
        ctx.client_certificate = crate::tls::client_certificate(session.digest()).map(|c| c.subject);
        let headers = &session.req_header().headers;
        let header = |name: &str| headers.get(name).and_then(|v| v.to_str().ok());
        ctx.trace = TraceContext::start(header("traceparent"), header("tracestate"));
        Ok(())
    }

    /// Answers every request: `Ok(true)` tells Pingora the response is written and no upstream
    /// is to be contacted.
    async fn request_filter(&self, session: &mut Session, ctx: &mut RequestCtx) -> Result<bool> {
        let route = ctx.route.clone();
        let mut ex = Exchange::new(session, ctx, self.server.state.config().server.max_body_bytes);
        match route {
            Route::Health => {
                let body = serde_json::to_vec(&json!({ "status": "ok" })).unwrap_or_default();
                ex.json(200, body).await?;
            }
            Route::Ready => {
                let (status, body) = match self.server.state.store.ping().await {
                    Ok(()) => (200, json!({ "status": "ready" })),
                    Err(e) => (503, json!({ "status": "unavailable", "reason": e.to_string() })),
                };
                ex.json(status, serde_json::to_vec(&body).unwrap_or_default()).await?;
            }
            // Boxed: these futures are several KB, and Pingora's own per-request futures hold
            // this one inline, so each move of theirs (one per level, per request) would copy
            // it; boxed, the bytes are allocated once and never moved.
            Route::Management(prefix) => Box::pin(self.management(&mut ex, prefix)).await?,
            Route::Gateway(id) => Box::pin(self.gateway(&mut ex, &id)).await?,
            Route::ResourceMetadata(id) => Box::pin(self.resource_metadata(&mut ex, &id)).await?,
            Route::AuthorizationServerMetadata => {
                let doc = crate::oauth_server::metadata(&self.server.state.config());
                ex.json(200, serde_json::to_vec(&doc).unwrap_or_default()).await?;
            }
            Route::Identity(prefix) => Box::pin(crate::signin::handle(&self.server, &mut ex, prefix)).await?,
            Route::NotFound => {
                let path = ex.request().uri.path().to_string();
                ex.respond_error(ApiError::NoRoute(path)).await?
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
        let elapsed = ctx.started.elapsed();
        metrics::observe_request(ctx.route.label(), status, elapsed);
        if let Some(t) = ctx.trace.as_ref().filter(|_| trace::exporting()) {
            let method = session.req_header().method.as_str();
            let mut attributes = vec![
                ("http.request.method", json!(method)),
                ("url.path", json!(session.req_header().uri.path())),
                ("http.response.status_code", json!(status)),
                ("toolgate.route", json!(ctx.route.label())),
                ("toolgate.request_id", json!(ctx.request_id.as_str())),
            ];
            if let Some(p) = &ctx.filters.principal {
                attributes.push(("toolgate.principal", json!(p.key_id)));
            }
            trace::record(Span {
                trace_id: t.trace_id,
                span_id: t.span_id,
                parent_id: t.parent_id,
                name: format!("{method} {}", ctx.route.label()),
                kind: SpanKind::Server,
                start: SystemTime::now() - elapsed,
                duration: elapsed,
                error: status >= 500,
                attributes,
            });
        }
        // The access log: one line per request (target `toolgate::access`, so that
        // `toolgate::access=off` turns it off).
        logging::access(&logging::AccessLine {
            request_id: ctx.request_id.as_str(),
            method: session.req_header().method.as_str(),
            path: session.req_header().uri.path(),
            route: ctx.route.label(),
            status,
            elapsed,
            client_ip: ctx.client_ip,
            principal: ctx.filters.principal.as_ref().map(|p| p.key_id.as_str()),
            client_certificate: ctx.client_certificate.as_deref(),
        });
    }
}
