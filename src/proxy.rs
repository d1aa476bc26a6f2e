//! toolgate's HTTP app on Pingora: routing by path and the filter chains, before a request is
//! handed to `api` (management) or `mcp` (gateways), then the request's metrics, span and
//! access line. Answers are written through [`Exchange`].
//!
//! Why an `HttpServerApp` of its own and not Pingora's `ProxyHttp`: no request is proxied by
//! Pingora (`mcp` talks to the apps with its own pooled clients), so every request would be
//! answered in `request_filter`, and the proxy layer around it (a per-request `Session` with
//! its cache and module state, a boxed future per hook) was about 5 % of the CPU of a call at
//! saturation and about 10 allocations per request for nothing (BENCHMARKS.md). What that layer did
//! for toolgate is done here: CONNECT refused, an error answer when a failure leaves none, the
//! connection handed back for keep-alive.

use crate::api::{self, Call, Reply};
use crate::base::route::Route;
use crate::edge::conn_limits::{Answer, Next};
use crate::edge::error::ApiError;
use crate::edge::exchange::{success_body, EventStream, Exchange, RequestCtx, RequestId};
use crate::identity::gateway_oauth;
use crate::observe::trace::{self, Span, SpanKind, TraceContext};
use crate::server::Server;
use crate::{observe::logging, observe::metrics};
use async_trait::async_trait;
use ipnet::IpNet;
use pingora::apps::{HttpPersistentSettings, HttpServerApp, HttpServerOptions, ReusedHttpStream};
use pingora::prelude::*;
use pingora::protocols::http::ServerSession;
use pingora::server::ShutdownWatch;
use pingora::ErrorSource;
use serde_json::{json, Value};
use std::net::{IpAddr, Ipv4Addr};
use std::sync::Arc;
use std::time::{Instant, SystemTime};
use toolgate_filters::auth::AuthError;
use toolgate_filters::{client_ip::client_ip, FilterChain, RequestView, RouteClass};

pub(crate) struct Proxy {
    pub server: Arc<Server>,
    pub management: FilterChain,
    /// The gateway routes' chain: the management chain's filters, then the Origin check.
    pub gateway: FilterChain,
    /// The identity service's chain: the per-address bucket (`rate_limits.identity`). No
    /// credential is presented at this edge, so neither authentication nor the organisations'
    /// allowlists (which need one to know the organisation) run here.
    pub identity: FilterChain,
    pub trusted_proxies: Vec<IpNet>,
    /// `web.path`, read once at start.
    pub identity_path: String,
    /// Pingora's HTTP options: `h2c` (`server.h2c`).
    pub server_options: HttpServerOptions,
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
        let Some((endpoint, id, sub_id)) = api::route(rest) else {
            // Unknown paths are a 404 whoever asks; the chain still runs so that the request is
            // counted and carries its rate-limit headers.
            let _ = self.run_chain(ex, RouteClass::Management).await;
            return ex.respond_error(ApiError::NoRoute(path.clone())).await;
        };
        let public = endpoint.is_public(&method);
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
        let operations = if endpoint.is_batch() { api::batch::operations_in(&body) } else { 0 };
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
            id: id.map(api::path_param),
            sub_id: sub_id.map(api::path_param),
            query: crate::edge::forms::parse_query(query.as_deref()),
            body,
            client_ip: ex.ctx.client_ip,
            ip_multiplier: ex.ctx.filters.ip_rate_limit_multiplier,
            headers: ex.headers(),
        };
        match api::dispatch(endpoint, call).await {
            Ok(Reply { status, bytes: Some((content_type, bytes)), .. }) => {
                ex.respond(status, content_type, bytes, &[]).await
            }
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
            RouteClass::Identity => &self.identity,
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

    /// The identity service: its chain first (a 429 page or OAuth error past the address's
    /// bucket), then its pages with a deadline on request bodies (`web.body_timeout_secs`); the
    /// console's pages (`{auth_url}/console`) go to `console`, which runs each of its API calls
    /// through the signed-in user's own bucket.
    async fn identity(&self, ex: &mut Exchange<'_>, prefix: usize) -> Result<()> {
        if let Err(e) = self.run_chain(ex, RouteClass::Identity).await {
            return crate::identity::refuse(ex, prefix, e).await;
        }
        ex.set_body_deadline(self.server.state.config().web.body_timeout);
        if crate::console::is_console(&ex.request().uri.path()[prefix..]) {
            return crate::console::handle(&self.server, ex, prefix).await;
        }
        crate::identity::handle(&self.server.identity, ex, prefix).await
    }

    /// A gateway's MCP endpoint: the chain first, its refusals answered in JSON-RPC form.
    async fn gateway(&self, ex: &mut Exchange<'_>, gateway_id: &str) -> Result<()> {
        if self.gateway_chain(ex, gateway_id).await? {
            crate::mcp::transport::handle(&self.server.mcp, ex, gateway_id).await?;
        }
        Ok(())
    }

    /// A GET to a gateway's MCP endpoint, as [`Proxy::gateway`], in a future of the GET's size.
    async fn gateway_stream(&self, ex: &mut Exchange<'_>, gateway_id: &str) -> Result<()> {
        if self.gateway_chain(ex, gateway_id).await? {
            crate::mcp::transport::listen(&self.server.mcp, ex, gateway_id).await?;
        }
        Ok(())
    }

    /// The gateway routes' filter chain; `false` once its refusal is answered.
    async fn gateway_chain(&self, ex: &mut Exchange<'_>, gateway_id: &str) -> Result<bool> {
        let Err(e) = self.run_chain(ex, RouteClass::Gateway).await else { return Ok(true) };
        if e.status() == 401 || ex.ctx.filters.credential_error == Some(AuthError::InsufficientScope) {
            self.challenge(ex, gateway_id);
        }
        crate::mcp::rpc_errors::api_error(ex, e).await?;
        Ok(false)
    }
}

impl Proxy {
    /// What every later step (and every error answer) needs of a request, from its header: the
    /// request id, the client's address, the route, the client certificate's subject and the
    /// trace context.
    fn begin(&self, session: &ServerSession) -> RequestCtx {
        let req = session.req_header();
        let peer =
            session.client_addr().and_then(|a| a.as_inet()).map(|a| a.ip()).unwrap_or(IpAddr::V4(Ipv4Addr::LOCALHOST));
        let header = |name: &str| req.headers.get(name).and_then(|v| v.to_str().ok());
        RequestCtx {
            request_id: RequestId::generate(),
            client_ip: client_ip(peer, header("x-forwarded-for"), &self.trusted_proxies),
            route: Route::of(req.uri.path(), &self.identity_path),
            filters: Default::default(),
            started: Instant::now(),
            status: 0,
            trace: TraceContext::start(header("traceparent"), header("tracestate")),
            client_certificate: crate::edge::tls::client_certificate(session.digest()).map(|c| c.subject),
            denied_by: None,
            tool_pending: false,
            tail: None,
        }
    }

    /// Answers a request by its route. `Err` only when the answer could not be written (mostly a
    /// client that has gone): every refusal and failure of toolgate's own is an answer.
    /// `draining`: a graceful shutdown has begun (see [`Proxy::answer`]).
    async fn route(&self, session: &mut ServerSession, ctx: &mut RequestCtx, draining: bool) -> Result<()> {
        let route = ctx.route.clone();
        let mut ex = Exchange::new(session, ctx, self.server.state.config().server.max_body_bytes);
        match route {
            Route::Health => {
                let body = serde_json::to_vec(&json!({ "status": "ok" })).unwrap_or_default();
                ex.json(200, body).await
            }
            // Draining, the instance is leaving: a readiness probe (or a load balancer asking on a
            // connection still open) is told to send new work elsewhere, whatever the store says.
            Route::Ready if draining => ex.json(503, br#"{"status":"draining"}"#.to_vec()).await,
            Route::Ready => {
                let (status, body) = match self.server.state.store.ping().await {
                    Ok(()) => (200, json!({ "status": "ready" })),
                    Err(e) => (503, json!({ "status": "unavailable", "reason": e.to_string() })),
                };
                ex.json(status, serde_json::to_vec(&body).unwrap_or_default()).await
            }
            // Boxed: these futures are several KB (a gateway's about 11), and the connection's
            // future, allocated for the connection's whole life (idle or slow ones included),
            // holds this one inline; boxed, a request pays one copy into its box instead of every
            // connection carrying the largest handler (BENCHMARKS.md, the slowloris bound).
            Route::Management(prefix) => Box::pin(self.management(&mut ex, prefix)).await,
            // A GET (a stream, open as long as the client listens) in a box of its own size.
            Route::Gateway(id) if ex.request().method == http::Method::GET => {
                Box::pin(self.gateway_stream(&mut ex, &id)).await
            }
            Route::Gateway(id) => Box::pin(self.gateway(&mut ex, &id)).await,
            Route::ResourceMetadata(id) => Box::pin(self.resource_metadata(&mut ex, &id)).await,
            Route::AuthorizationServerMetadata => {
                let doc = crate::identity::oauth_server::metadata(&self.server.state.config());
                ex.json(200, serde_json::to_vec(&doc).unwrap_or_default()).await
            }
            Route::Identity(prefix) => Box::pin(self.identity(&mut ex, prefix)).await,
            Route::NotFound => {
                if let Some(console) = self.browser_home(&ex) {
                    return ex.respond(303, "text/plain", Vec::new(), &[(http::header::LOCATION, console)]).await;
                }
                let path = ex.request().uri.path().to_string();
                ex.respond_error(ApiError::NoRoute(path)).await
            }
        }
    }

    /// Where `GET /` from a browser (its `Accept` ranks HTML above JSON) goes: a person who
    /// typed the gateway's address, sent on to the console (`{auth_url}/console`, which signs
    /// them in first). `None` for every other client, and every other unknown path: the JSON 404.
    fn browser_home(&self, ex: &Exchange<'_>) -> Option<http::HeaderValue> {
        let req = ex.request();
        let home = req.uri.path() == "/"
            && matches!(req.method, http::Method::GET | http::Method::HEAD)
            && crate::edge::negotiate::prefers_html(&req.headers);
        home.then(|| http::HeaderValue::from_str(&format!("{}{}", self.identity_path, crate::console::PATH)).ok())?
    }

    /// After a failure under [`Proxy::route`]: an answer when none has been written and the
    /// connection can still carry one, and a log line. The connection is not reused.
    async fn failed(&self, session: &mut ServerSession, ctx: &RequestCtx, e: &pingora::Error) {
        let status = failure_status(e);
        if status == 0 {
            tracing::debug!(request_id = %ctx.request_id, error = %e, "the connection failed under the answer");
            return;
        }
        tracing::warn!(request_id = %ctx.request_id, error = %e, status, "request failed");
        if session.response_written().is_none() {
            let _ = session.respond_error(status).await;
        }
    }

    /// The request's metrics, span and access line, once it is answered (or has failed).
    fn record(&self, session: &ServerSession, ctx: &RequestCtx) {
        let status =
            if ctx.status == 0 { session.response_written().map_or(0, |r| r.status.as_u16()) } else { ctx.status };
        let elapsed = ctx.started.elapsed();
        let req = session.req_header();
        metrics::observe_request(ctx.route.label(), status, elapsed);
        if let Some(t) = ctx.trace.as_ref().filter(|_| trace::exporting()) {
            let method = req.method.as_str();
            let mut attributes = vec![
                ("http.request.method", json!(method)),
                ("url.path", json!(req.uri.path())),
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
            method: req.method.as_str(),
            path: req.uri.path(),
            route: ctx.route.label(),
            status,
            elapsed,
            client_ip: ctx.client_ip,
            principal: ctx.filters.principal.as_ref().map(|p| p.key_id.as_str()),
            client_certificate: ctx.client_certificate.as_deref(),
            rule: ctx.denied_by.as_deref(),
            tool_pending: ctx.tool_pending,
        });
    }
}

/// The status of the answer to a request that failed before one was written: the error's own,
/// 502 for an upstream's, 400 for the client's, 500 otherwise (as Pingora's proxy answers); 0
/// when reading or writing the connection failed, as nothing can be written to it then.
fn failure_status(e: &pingora::Error) -> u16 {
    match (e.etype(), e.esource()) {
        (ErrorType::HTTPStatus(code), _) => *code,
        (ErrorType::WriteError | ErrorType::ReadError | ErrorType::ConnectionClosed, _) => 0,
        (_, ErrorSource::Upstream) => 502,
        (_, ErrorSource::Downstream) => 400,
        _ => 500,
    }
}

impl Answer for Proxy {
    /// One request, header read: answered, recorded, and the connection handed back for the
    /// next request when it can carry one.
    ///
    /// Not an `async fn`, and two steps boxed, for the connection's memory: this future is held
    /// inline in the connection's (`conn_limits`), allocated at its largest for as long as the
    /// connection lives, an idle or streaming one included. An `async fn` keeps its argument
    /// twice (the argument's slot and the local it is moved into: a `ServerSession` is 680
    /// bytes); the block below uses the captured `session` in place. Pingora's `finish` (3.7 KB)
    /// and the failure's answer (1.4 KB, rare) are boxed: one allocation per request instead of
    /// every connection carrying 5.6 KB (BENCHMARKS.md, "Scale on one instance", streams).
    #[allow(clippy::manual_async_fn)]
    fn answer(
        self: &Arc<Self>,
        mut session: ServerSession,
        shutdown: &ShutdownWatch,
    ) -> impl std::future::Future<Output = Next> + Send {
        async move {
            // CONNECT changes how the message is framed, and toolgate tunnels nothing: refused
            // and closed, as Pingora's proxy does.
            if session.req_header().method == http::Method::CONNECT {
                let _ = session.respond_error(405).await;
                session.shutdown().await;
                return Next::Close;
            }
            let draining = *shutdown.borrow();
            if draining {
                // Shutting down: this answer is the connection's last.
                session.set_keepalive(None);
            }
            let mut ctx = self.begin(&session);
            let answered = self.route(&mut session, &mut ctx, draining).await;
            if let Err(e) = &answered {
                Box::pin(self.failed(&mut session, &ctx, e)).await;
            }
            self.record(&session, &ctx);
            match answered {
                Ok(()) => {
                    // An event stream that goes on by itself (`Exchange::stream_on`, HTTP/1
                    // only): its access line and metrics are the opening's.
                    if let Some(tail) = ctx.tail.take() {
                        let ServerSession::H1(h1) = session else { return Next::Close };
                        return Next::Alone(tail(EventStream::new(h1.into_inner())));
                    }
                    let settings = HttpPersistentSettings::for_session(&session);
                    match Box::pin(session.finish()).await {
                        Ok(Some(reusable)) => Next::Request(ReusedHttpStream::from_reusable_stream(reusable, settings)),
                        _ => Next::Close,
                    }
                }
                Err(e) => {
                    // An HTTP/2 stream is reset with the error's code; an HTTP/1 connection
                    // closes.
                    session.on_proxy_failure(e);
                    Next::Close
                }
            }
        }
    }
}

/// HTTP/2 streams come here, from Pingora's HTTP/2 loop (HTTP/1 requests come through
/// [`Answer::answer`], from `conn_limits`' loop).
#[async_trait]
impl HttpServerApp for Proxy {
    async fn process_new_http(
        self: &Arc<Self>,
        mut session: ServerSession,
        shutdown: &ShutdownWatch,
    ) -> Option<ReusedHttpStream> {
        let read = session.read_request().await;
        if !crate::edge::conn_limits::header_read(&mut session, read).await {
            return None;
        }
        self.answer(session, shutdown).await.reused()
    }

    /// `h2c` is read here by Pingora's loop for plain HTTP/2 connections.
    fn server_options(&self) -> Option<&HttpServerOptions> {
        Some(&self.server_options)
    }
}

/// The console's calls to a gateway (`server::gateway_calls`): each an HTTP request to the
/// gateway's endpoint over an in-memory connection, answered by a [`Proxy`] whose gateway chain
/// is the rate limit and the Origin check: the caller (the signed-in user's web session) is
/// set before the chain runs instead of read from a header, and the console has checked the
/// organisation's IP allowlist already. From there the call is any call: the gateway's quotas,
/// its rules, the catalogue, the log entry and the access line.
pub(crate) struct InProcess {
    /// Weak: the server holds this, and a strong reference would keep it alive forever.
    server: std::sync::Weak<Server>,
}

/// The most of an in-process answer that is read (an answer past it is a 502).
const IN_PROCESS_MAX_ANSWER: u64 = 8 * 1024 * 1024;

impl InProcess {
    /// Installs the server's in-process gateway calls.
    pub(crate) fn install(server: &Arc<Server>) {
        let calls = InProcess { server: Arc::downgrade(server) };
        let _ = server.gateway_calls.set(Box::new(calls));
    }
}

impl crate::server::gateway_calls::GatewayCalls for InProcess {
    fn call<'a>(
        &'a self,
        call: crate::server::gateway_calls::GatewayCall<'a>,
    ) -> futures_util::future::BoxFuture<'a, std::result::Result<crate::server::gateway_calls::GatewayAnswer, ApiError>>
    {
        Box::pin(async move {
            let server = self.server.upgrade().ok_or_else(|| ApiError::Unavailable("shutting down".into()))?;
            let config = server.state.config();
            let proxy = Proxy {
                management: FilterChain::new(),
                gateway: FilterChain::new().with(server.limiter.clone()).with(server.origin_check.clone()),
                identity: FilterChain::new(),
                trusted_proxies: Vec::new(),
                identity_path: config.web.path.clone(),
                server_options: HttpServerOptions::default(),
                server: server.clone(),
            };
            proxy.in_process(call).await
        })
    }
}

impl Proxy {
    /// One in-process call (see [`InProcess`]): the request written on one end of an in-memory
    /// connection, served on the other as any request is, the answer read back.
    async fn in_process(
        &self,
        call: crate::server::gateway_calls::GatewayCall<'_>,
    ) -> std::result::Result<crate::server::gateway_calls::GatewayAnswer, ApiError> {
        use tokio::io::{AsyncReadExt, AsyncWriteExt};
        let request = in_process_request(&call)?;
        let (mut client, served) = tokio::io::duplex(64 * 1024);
        let mut request_id = String::new();
        let serve = async {
            let mut session = ServerSession::new_http1(Box::new(served));
            if !session.read_request().await.unwrap_or(false) {
                return;
            }
            let mut ctx = self.begin(&session);
            ctx.client_ip = call.client_ip;
            ctx.filters.principal = Some(call.principal.clone());
            request_id = ctx.request_id.as_str().to_string();
            let answered = self.route(&mut session, &mut ctx, false).await;
            if let Err(e) = &answered {
                self.failed(&mut session, &ctx, e).await;
            }
            self.record(&session, &ctx);
            // Dropped here: the client's end reads the end of the answer.
        };
        let talk = async {
            let mut out = Vec::new();
            if client.write_all(&request).await.is_ok() {
                let _ = (&mut client).take(IN_PROCESS_MAX_ANSWER).read_to_end(&mut out).await;
            }
            out
        };
        let ((), raw) = tokio::join!(serve, talk);
        let (status, body) = parse_in_process_answer(&raw)
            .ok_or_else(|| ApiError::Internal("the gateway's in-process answer could not be read".into()))?;
        let body = serde_json::from_slice(&body)
            .map_err(|_| ApiError::Internal(format!("the gateway answered {status} with no JSON-RPC message")))?;
        Ok(crate::server::gateway_calls::GatewayAnswer { status, body, request_id })
    }
}

/// The HTTP/1.1 request of an in-process call: a stateless (2026-07-28) POST, its `_meta` and
/// routing headers added, JSON only.
fn in_process_request(call: &crate::server::gateway_calls::GatewayCall<'_>) -> std::result::Result<Vec<u8>, ApiError> {
    let mut params = call.params.clone();
    if !params.is_object() {
        params = json!({});
    }
    if let Some(name) = call.name {
        params["name"] = json!(name);
    }
    params["_meta"] = json!({
        "io.modelcontextprotocol/protocolVersion": "2026-07-28",
        "io.modelcontextprotocol/clientCapabilities": {},
    });
    let body = serde_json::to_vec(&json!({ "jsonrpc": "2.0", "id": 1, "method": call.method, "params": params }))
        .map_err(|e| ApiError::Internal(e.to_string()))?;
    // The id is a path segment and the names header values: anything else is refused, never
    // written into the request.
    let id_safe = |v: &str| !v.is_empty() && v.bytes().all(|b| b.is_ascii_alphanumeric() || b == b'_' || b == b'-');
    let header_safe = |v: &str| v.bytes().all(|b| b.is_ascii_graphic());
    let name = call.name.unwrap_or("");
    if !id_safe(call.gateway_id) {
        return Err(ApiError::NotFound("gateway"));
    }
    if !header_safe(call.method) || !header_safe(name) {
        return Err(ApiError::validation("tool", "not a name toolgate can send in a header"));
    }
    let mut head = format!(
        "POST /gateway/{}/mcp HTTP/1.1\r\nHost: toolgate.internal\r\nContent-Type: application/json\r\n\
         Accept: application/json\r\nMCP-Protocol-Version: 2026-07-28\r\nMcp-Method: {}\r\nContent-Length: {}\r\n\
         Connection: close\r\n",
        call.gateway_id,
        call.method,
        body.len()
    );
    if call.name.is_some() {
        head.push_str(&format!("Mcp-Name: {name}\r\n"));
    }
    head.push_str("\r\n");
    let mut out = head.into_bytes();
    out.extend_from_slice(&body);
    Ok(out)
}

/// The status and body of an HTTP/1.1 answer (`Content-Length` or chunked).
fn parse_in_process_answer(raw: &[u8]) -> Option<(u16, Vec<u8>)> {
    let end = raw.windows(4).position(|w| w == b"\r\n\r\n")?;
    let head = std::str::from_utf8(&raw[..end]).ok()?;
    let status = head.split(' ').nth(1)?.parse().ok()?;
    let rest = &raw[end + 4..];
    let chunked = head.lines().any(|l| {
        let l = l.to_ascii_lowercase();
        l.starts_with("transfer-encoding:") && l.contains("chunked")
    });
    if !chunked {
        return Some((status, rest.to_vec()));
    }
    let (mut body, mut at) = (Vec::new(), rest);
    loop {
        let line_end = at.windows(2).position(|w| w == b"\r\n")?;
        let size =
            usize::from_str_radix(std::str::from_utf8(&at[..line_end]).ok()?.split(';').next()?.trim(), 16).ok()?;
        at = &at[line_end + 2..];
        if size == 0 {
            return Some((status, body));
        }
        body.extend_from_slice(at.get(..size)?);
        at = at.get(size + 2..)?;
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_failure_is_answered_with_its_status_unless_the_connection_itself_failed() {
        let e = |etype: ErrorType, source: ErrorSource| {
            let mut e = Error::new(etype);
            e.esource = source;
            e
        };
        assert_eq!(failure_status(&e(ErrorType::HTTPStatus(413), ErrorSource::Unset)), 413);
        for dead in [ErrorType::WriteError, ErrorType::ReadError, ErrorType::ConnectionClosed] {
            for source in [ErrorSource::Downstream, ErrorSource::Internal, ErrorSource::Unset] {
                assert_eq!(failure_status(&e(dead.clone(), source.clone())), 0, "{dead:?} from {source:?}");
            }
        }
        assert_eq!(failure_status(&e(ErrorType::ConnectTimedout, ErrorSource::Upstream)), 502);
        assert_eq!(failure_status(&e(ErrorType::InvalidHTTPHeader, ErrorSource::Downstream)), 400);
        assert_eq!(failure_status(&e(ErrorType::InternalError, ErrorSource::Internal)), 500);
        assert_eq!(failure_status(&e(ErrorType::InternalError, ErrorSource::Unset)), 500);
    }
}
