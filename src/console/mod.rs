//! The console: server-rendered pages under `{auth_url}/console` (`web.path`, default `/auth`)
//! where a signed-in user sees and manages what the management API manages, within their role.
//!
//! Decisions (docs/console.md):
//! - **One authority.** A page reads and writes only through the API: it builds a call for the
//!   signed-in user ([`crate::identity::credentials::web_session_principal`]: their role, every
//!   scope of it, their organisation; credential `web_session`, key id `web:ws_...`) and runs it
//!   through [`crate::api::batch::operation`], the path a batch's operations take: the same
//!   bucket and cost, route table, scope check, MFA gate, audit trail and change feed. The pages
//!   hide what the role cannot do, but never decide it: a forged form is refused by the API.
//! - **The session.** The identity service's web session cookie (`toolgate_session`); without a
//!   live one a page is a 303 to `{auth_url}/signin?next=...`. The organisation's IP allowlist is
//!   checked on every request, as the sign-in checks it.
//! - **Forms.** Every POST carries the identity service's CSRF token, bound to the web session
//!   (`signin::csrf`: equal to the cookie and issued for this session), and a browser's
//!   `Origin`/`Sec-Fetch-Site` must name this server; else a 403 page. A protected action's form has an "MFA code" field, sent to
//!   the API as `X-MFA-Token`. A POST that succeeds answers 303 to its page with a one-time
//!   notice (a cookie read once), except one that makes a secret (a gateway's key, an API key):
//!   its answer is the page that shows the secret, once, never stored anywhere to be shown again.
//! - **Headers.** Every answer carries a strict CSP (no inline script or style, nothing from
//!   another origin), `frame-ancestors 'none'` and `X-Frame-Options: DENY`, `no-referrer`,
//!   `no-store` and `nosniff`; the one stylesheet and script are served from the binary.

mod apps;
mod chart;
mod connect;
mod gateways;
mod home;
mod html;
mod insight;
mod keys;
mod notifications;
mod playground;
mod security;
mod sessions;
mod shaping;
mod snippets;
mod team;
mod tool_changes;

use crate::api::{ApiResult, Reply};
use crate::data::model::User;
use crate::edge::error::ApiError;
use crate::edge::exchange::Exchange;
use crate::edge::forms;
use crate::identity::signin::{self, csrf, Page};
use crate::server::Server;
use http::header::{HeaderName, HeaderValue};
use http::Method;
use serde_json::Value;
use std::net::IpAddr;
use std::sync::Arc;
use toolgate_filters::ip_allowlist::IpPolicySource;
use toolgate_filters::{Principal, Scope};

/// The console's path under the identity service's prefix.
pub(crate) const PATH: &str = "/console";
/// The one-time notice shown by the page a successful POST redirects to.
const NOTICE_COOKIE: &str = "toolgate_notice";
/// Largest console form accepted.
const MAX_FORM_BYTES: usize = 64 * 1024;

/// Every console answer's headers (docs/console.md says why each).
const SECURITY_HEADERS: &[(HeaderName, &str)] = &[
    (
        http::header::CONTENT_SECURITY_POLICY,
        "default-src 'none'; style-src 'self'; script-src 'self'; img-src 'self' data:; form-action 'self'; \
         frame-ancestors 'none'; base-uri 'none'",
    ),
    (http::header::X_FRAME_OPTIONS, "DENY"),
    (http::header::REFERRER_POLICY, "no-referrer"),
    (http::header::X_CONTENT_TYPE_OPTIONS, "nosniff"),
];

/// Whether a path under the identity service's prefix is the console's.
pub(crate) fn is_console(rest: &str) -> bool {
    rest.strip_prefix(PATH).is_some_and(|r| r.is_empty() || r.starts_with('/'))
}

/// The signed-in user's side of one console request: who acts, the CSRF token its forms carry,
/// and the notice left by the POST that redirected here.
pub(crate) struct Ctx<'s> {
    server: &'s Server,
    principal: Arc<Principal>,
    user: Arc<User>,
    /// `web.path`.
    prefix: String,
    /// The token the page's forms carry, bound to the session.
    csrf: String,
    /// Whether `csrf` was issued for this answer (the request's cookie held no valid one).
    csrf_fresh: bool,
    /// The session cookie's token: what a form's token must be bound to.
    session_token: String,
    client_ip: IpAddr,
    notice: Option<String>,
    /// The request's path below the console and its query.
    path: String,
    query: Vec<(String, String)>,
}

impl Ctx<'_> {
    /// Runs one management operation as the signed-in user, exactly as a batch's operation runs
    /// (`api::batch::operation`): its bucket, the route table, the scope check, the MFA gate
    /// (`mfa`, the form's code, is sent as `X-MFA-Token`), the audit trail and the change feed.
    async fn api(&self, method: Method, path: &str, body: Option<Value>, mfa: Option<&str>) -> ApiResult {
        let mut headers = http::HeaderMap::new();
        if let Some(code) = mfa.map(str::trim).filter(|c| !c.is_empty()) {
            let value =
                HeaderValue::from_str(code).map_err(|_| ApiError::validation("mfa_code", "not a valid code"))?;
            headers.insert(HeaderName::from_static("x-mfa-token"), value);
        }
        let call = crate::api::Call {
            server: self.server,
            principal: Some(self.principal.clone()),
            method: Method::GET,
            id: None,
            sub_id: None,
            query: Vec::new(),
            body: bytes::Bytes::new(),
            client_ip: self.client_ip,
            ip_multiplier: None,
            headers: &headers,
        };
        let body = body.map(|b| bytes::Bytes::from(serde_json::to_vec(&b).unwrap_or_default())).unwrap_or_default();
        crate::api::batch::operation(&call, method, path, body).await
    }

    /// A read: the envelope's `data`.
    async fn get(&self, path: &str) -> Result<Value, ApiError> {
        Ok(self.api(Method::GET, path, None, None).await?.data.unwrap_or(Value::Null))
    }

    /// Whether the user's role holds `scope`: what decides whether a write form is shown (the
    /// API decides whether the write is done).
    fn can(&self, scope: Scope) -> bool {
        self.principal.scopes.contains(scope)
    }

    /// A query parameter of the page's request.
    fn query(&self, name: &str) -> Option<&str> {
        forms::first(&self.query, name).filter(|v| !v.is_empty())
    }

    /// A page of the console in its frame.
    fn page(&self, title: &str, current: &str, body: &str) -> Page {
        Page::html(200, html::frame(self, title, current, body))
    }

    /// The answer of a POST that succeeded: back to `to` (under the console) with `notice`.
    fn done(&self, to: &str, notice: &str) -> Page {
        self.done_with(to, notice, "Strict")
    }

    /// [`Ctx::done`] with the notice cookie's `SameSite`: `Lax` for the answer to a navigation
    /// that came from another site (an OAuth provider sending the browser back), whose redirect
    /// would not carry a `Strict` cookie to the page that shows it.
    fn done_with(&self, to: &str, notice: &str, same_site: &str) -> Page {
        let value: String = url::form_urlencoded::byte_serialize(notice.as_bytes()).collect();
        Page::redirect(&format!("{}{PATH}{to}", self.prefix)).cookie(format!(
            "{NOTICE_COOKIE}={value}; Path={}{PATH}; HttpOnly; Secure; SameSite={same_site}; Max-Age=60",
            self.prefix
        ))
    }

    /// A console URL (`to` under the console), escaped for an attribute.
    fn href(&self, to: &str) -> String {
        html::escape(&format!("{}{PATH}{to}", self.prefix))
    }
}

/// Answers a request under `{auth_url}/console`; `prefix` is the length of `web.path` in the
/// path. The identity service's chain (the per-address bucket) has run.
pub(crate) async fn handle(server: &Server, ex: &mut Exchange<'_>, prefix: usize) -> pingora::Result<()> {
    let rest = ex.request().uri.path()[prefix + PATH.len()..].to_string();
    if let Some(file) = rest.strip_prefix("/static/") {
        return html::asset(file).secured_by(SECURITY_HEADERS).write(ex).await;
    }
    let answer = match signed_in(server, ex, prefix, rest).await {
        Ok(Ok(mut ctx)) => {
            let had_notice = ctx.notice.is_some();
            let mut answer = route(&mut ctx, ex).await.unwrap_or_else(|e| error_page(&ctx, &e));
            if ctx.csrf_fresh {
                answer = answer.cookie(csrf::cookie(&server.state.config(), &ctx.csrf));
            }
            if had_notice && answer.status == 200 {
                let gone = format!(
                    "{NOTICE_COOKIE}=; Path={}{PATH}; HttpOnly; Secure; SameSite=Strict; Max-Age=0",
                    ctx.prefix
                );
                answer = answer.cookie(&gone);
            }
            answer
        }
        Ok(Err(answer)) => answer,
        Err(e) => Page::html(e.status(), html::bare("Something went wrong", &e.to_string())),
    };
    answer.secured_by(SECURITY_HEADERS).write(ex).await
}

/// The request's signed-in user as a [`Ctx`], or the answer for a request without one (a 303
/// to the sign-in page, a 403 from the organisation's IP allowlist).
async fn signed_in<'s>(
    server: &'s Server,
    ex: &mut Exchange<'_>,
    prefix: usize,
    path: String,
) -> Result<Result<Ctx<'s>, Page>, ApiError> {
    let web_path = ex.request().uri.path()[..prefix].to_string();
    let session = signin::current(&server.identity, ex).await?;
    let found = session.as_ref().and_then(|s| {
        let principal = crate::identity::credentials::web_session_principal(&server.state, s)?;
        Some((principal, server.state.user(&s.user_id)?))
    });
    let Some((principal, user)) = found else {
        let here = ex.request().uri.path_and_query().map_or(String::new(), |p| p.as_str().to_string());
        let next: String = url::form_urlencoded::byte_serialize(here.as_bytes()).collect();
        return Ok(Err(Page::redirect(&format!("{web_path}/signin?next={next}"))));
    };
    if server.state.refuses_address(&user.org_id, ex.ctx.client_ip) {
        let text = "Your organisation does not allow the console from this address.";
        return Ok(Err(Page::html(403, html::bare("Not allowed", text))));
    }
    let principal = Arc::new(principal);
    // The access line and the trace name the web session, as they name a key.
    ex.ctx.filters.principal = Some(principal.clone());
    let session_token = signin::session_token(&server.identity, ex).unwrap_or_default().to_string();
    let binding = csrf::Binding::Session(&session_token);
    let kept = csrf::kept(&server.state, ex, binding).map(str::to_string);
    let csrf_fresh = kept.is_none();
    let csrf = kept.unwrap_or_else(|| csrf::issue(&server.state, binding));
    let notice = signin::cookie(ex, NOTICE_COOKIE).map(|n| {
        url::form_urlencoded::parse(format!("n={n}").as_bytes()).map(|(_, v)| v.into_owned()).collect::<String>()
    });
    Ok(Ok(Ctx {
        server,
        principal,
        user,
        prefix: web_path,
        csrf,
        csrf_fresh,
        session_token,
        client_ip: ex.ctx.client_ip,
        notice,
        query: forms::parse_query(ex.request().uri.query()),
        path,
    }))
}

/// A POST's fields, once the browser's `Origin`/`Sec-Fetch-Site` named this server and its CSRF
/// token matched the cookie and was issued for this session (a 403 otherwise).
async fn form(ctx: &Ctx<'_>, ex: &mut Exchange<'_>) -> Result<Vec<(String, String)>, ApiError> {
    let fields = forms::parse(&ex.read_body_within(MAX_FORM_BYTES).await?);
    let sent = forms::first(&fields, "csrf").unwrap_or("");
    csrf::check(&ctx.server.state, ex, sent, csrf::Binding::Session(&ctx.session_token))?;
    Ok(fields)
}

/// A form field, trimmed; empty when absent.
fn field<'a>(fields: &'a [(String, String)], name: &str) -> &'a str {
    forms::first(fields, name).unwrap_or("").trim()
}

/// A path segment percent-encoded, for a management path built from a page's path.
fn seg(s: &str) -> String {
    const SEGMENT: &percent_encoding::AsciiSet =
        &percent_encoding::NON_ALPHANUMERIC.remove(b'-').remove(b'_').remove(b'.').remove(b'~');
    percent_encoding::utf8_percent_encode(s, SEGMENT).to_string()
}

/// The page of a request, by method and path below the console.
async fn route(ctx: &mut Ctx<'_>, ex: &mut Exchange<'_>) -> Result<Page, ApiError> {
    let method = ex.request().method.clone();
    let path = ctx.path.clone();
    let parts: Vec<&str> = path.trim_matches('/').split('/').filter(|p| !p.is_empty()).collect();
    if method == Method::GET {
        return match parts.as_slice() {
            [] => home::page(ctx).await,
            ["gateways"] => gateways::list(ctx).await,
            ["gateways", id] => gateways::show(ctx, id).await,
            ["keys"] => keys::page(ctx).await,
            ["service-accounts"] => keys::accounts(ctx).await,
            ["logs"] => insight::logs(ctx).await,
            ["logs", id] => insight::entry_page(ctx, id).await,
            ["analytics"] => insight::analytics(ctx).await,
            ["sessions"] => sessions::page(ctx).await,
            ["apps"] => apps::page(ctx).await,
            ["apps", id, "oauth", "back"] => {
                apps::oauth_back(ctx, id, signin::cookie(ex, connect::CONNECT_COOKIE)).await
            }
            ["tool-changes"] => tool_changes::page(ctx).await,
            ["mfa"] => Ok(security::mfa(ctx)),
            ["ip-allowlist"] => security::allowlist(ctx).await,
            ["webhooks"] => notifications::webhooks(ctx).await,
            ["alerts"] => notifications::alerts(ctx).await,
            ["team"] => team::page(ctx).await,
            _ => Err(ApiError::NoRoute(ex.request().uri.path().to_string())),
        };
    }
    if method != Method::POST {
        return Err(ApiError::MethodNotAllowed(method.to_string()));
    }
    let fields = form(ctx, ex).await?;
    match parts.as_slice() {
        ["gateways"] => gateways::create(ctx, &fields).await,
        ["gateways", id] => gateways::update(ctx, id, &fields).await,
        ["gateways", id, "delete"] => gateways::delete(ctx, id, &fields).await,
        ["gateways", id, "call"] => playground::call(ctx, id, &fields).await,
        ["keys"] => keys::create(ctx, &fields).await,
        ["keys", id, action] => keys::act(ctx, id, action, &fields).await,
        ["service-accounts"] => keys::create_account(ctx, &fields).await,
        ["service-accounts", id, "keys"] => keys::account_key(ctx, id, &fields).await,
        ["sessions", rest @ ..] => sessions::post(ctx, rest, &fields).await,
        ["apps", rest @ ..] => apps::post(ctx, rest, &fields).await,
        ["tool-changes", rest @ ..] => tool_changes::post(ctx, rest, &fields).await,
        ["mfa", rest @ ..] => security::post_mfa(ctx, rest, &fields).await,
        ["ip-allowlist", rest @ ..] => security::post_allowlist(ctx, rest, &fields).await,
        ["webhooks", rest @ ..] => notifications::post_webhooks(ctx, rest, &fields).await,
        ["alerts", rest @ ..] => notifications::post_alerts(ctx, rest, &fields).await,
        ["team", rest @ ..] => team::post(ctx, rest, &fields).await,
        _ => Err(ApiError::NoRoute(ex.request().uri.path().to_string())),
    }
}

/// The page of an error the API (or the console) answered: its status, its code and words.
fn error_page(ctx: &Ctx<'_>, e: &ApiError) -> Page {
    if e.status() >= 500 {
        tracing::error!(error = ?e, "console request failed");
    }
    let body = format!(
        "<p class=\"error\" role=\"alert\"><strong>{}</strong> <code>{}</code>: {}</p><p><a href=\"{}\">Back to the console</a></p>",
        e.status(),
        e.code(),
        html::escape(&e.to_string()),
        ctx.href(""),
    );
    Page::html(e.status(), html::frame(ctx, "Refused", "", &body)).retry_after(e)
}

/// No page answers a POST to `page/rest...` below the console.
fn no_route(ctx: &Ctx<'_>, page: &str, rest: &[&str]) -> ApiError {
    ApiError::NoRoute(format!("{}/console/{page}/{}", ctx.prefix, rest.join("/")))
}

/// `s` as one value of a query string.
fn encode(s: &str) -> String {
    url::form_urlencoded::byte_serialize(s.as_bytes()).collect()
}

/// The records of a list answer's `key` (none when it has no such list).
fn rows(v: &Value, key: &str) -> Vec<Value> {
    v[key].as_array().cloned().unwrap_or_default()
}

/// The `data` of a reply (what a write answered).
fn data(reply: Reply) -> Value {
    reply.data.unwrap_or(Value::Null)
}

#[cfg(test)]
mod tests {
    /// Each console file reads as its code, found by its name: none is over 1,000 lines with
    /// its tests (large tests live in a sibling file, as `chart_tests.rs` does).
    #[test]
    fn no_console_file_is_over_1000_lines() {
        let dir = std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("src/console");
        let mut seen = 0;
        for entry in std::fs::read_dir(dir).unwrap() {
            let path = entry.unwrap().path();
            if path.extension().is_some_and(|e| e == "rs") {
                let lines = std::fs::read_to_string(&path).unwrap().lines().count();
                assert!(lines <= 1000, "{} has {lines} lines", path.display());
                seen += 1;
            }
        }
        assert!(seen >= 10, "{seen} files");
    }
}
