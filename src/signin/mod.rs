//! Web sign-in, the identity service's first part (`{auth_url}`, `web.path`, default `/auth`):
//! server-rendered pages where a user signs in with e-mail and password (and the TOTP code or a
//! backup code when MFA is on), a web session held in a cookie, and sign-out. The OAuth
//! authorization server's consent page (`consent.rs`) sits on these sessions.
//!
//! Decisions (README "Web sign-in"):
//! - Cookies: `toolgate_session` (the session token; `HttpOnly`, `Secure`, `SameSite=Lax` so a
//!   top-level navigation from another site, an OAuth redirect, still carries it, `Path=/`) and
//!   `toolgate_csrf` (`HttpOnly`, `Secure`, `SameSite=Strict`, on the prefix). Every form carries
//!   the CSRF token in a hidden field, compared in constant time with the cookie (the double-submit
//!   pattern): a POST without both, or with two that differ, is a 403.
//! - Guessing is bounded as MFA bounds it: five wrong passwords in a row for an e-mail lock it
//!   for 30 s, doubling up to 15 minutes (429 with `Retry-After`), and an address gets fifty
//!   password checks per ten minutes, counted before the check (so concurrent attempts count
//!   too). An unknown e-mail is refused after checking a decoy hash, in the same words and time
//!   as a wrong password. At most `web.password_checks` checks run at once (`passwords`).
//! - The per-address bounds are [`crate::limiter::Guesses`]: shared by the instances on Redis.
//! - A form's body must arrive within `web.body_timeout_secs` (408) and is read as it comes,
//!   never reserved to its declared length.
//! - Pages say nothing about which part was wrong, are never cached or framed, and load nothing
//!   (`Content-Security-Policy: default-src 'none'`).
//! - `next` (where to go once signed in) is a path on this server only.

mod consent;
mod oidc;
mod pages;
pub mod passwords;
mod saml;
pub mod sessions;

use crate::error::ApiError;
use crate::exchange::Exchange;
use crate::model::User;
use crate::server::Server;
use crate::store::Store;
use dashmap::DashMap;
use http::header::{HeaderName, HeaderValue};
use pingora::Result;
use std::net::IpAddr;
use std::sync::Arc;
use std::time::{Duration, Instant};

pub use sessions::{WebSession, WebSessions};

const SESSION_COOKIE: &str = "toolgate_session";
const CSRF_COOKIE: &str = "toolgate_csrf";
/// Wrong passwords an e-mail may get in a row before it is locked.
const FREE_FAILURES: u32 = 5;
const FIRST_LOCKOUT: Duration = Duration::from_secs(30);
const MAX_LOCKOUT: Duration = Duration::from_secs(15 * 60);
/// Password checks (sign-in attempts) from one address per window.
const ADDRESS_ATTEMPTS: u32 = 50;
/// Sign-ins through a provider one address may start per window (each is a stored record).
const ADDRESS_STARTS: u32 = 30;
/// OAuth clients one address block (/24, /56) may register per window (each is a stored record).
pub(crate) const BLOCK_REGISTRATIONS: u32 = 20;
pub(crate) const ADDRESS_WINDOW: Duration = Duration::from_secs(10 * 60);
/// Largest sign-in form accepted.
const MAX_FORM_BYTES: usize = 8 * 1024;

/// The identity service's state: web sessions and the guessing bounds.
pub struct SignIn {
    pub sessions: WebSessions,
    store: Arc<dyn Store>,
    /// e-mail (lower case) -> wrong passwords in a row and the lockout they earned.
    by_email: DashMap<String, (u32, Option<Instant>)>,
    /// Per-address bounds (password checks, sign-ins started, registrations, documents
    /// fetched), shared by the instances on Redis.
    pub(crate) guesses: crate::limiter::Guesses,
    /// Self-registered OAuth clients and when this instance last extended their life
    /// (`oauth_server`: a client unused for `web.registration_unused_secs` expires).
    pub(crate) registrations_kept: DashMap<String, Instant>,
    /// Client metadata documents fetched and kept (`oauth_server`).
    pub(crate) client_documents: crate::oauth_server::ClientDocuments,
}

/// The `next` of the request's query (where to go once signed in), unchecked.
fn next_in_query(ex: &Exchange<'_>) -> Option<String> {
    let query = ex.request().uri.query().unwrap_or("");
    url::form_urlencoded::parse(query.as_bytes()).find(|(k, _)| k == "next").map(|(_, v)| v.into_owned())
}

impl SignIn {
    pub fn new(store: Arc<dyn Store>, config: &crate::config::Config) -> SignIn {
        passwords::configure(config.web.password_checks);
        SignIn {
            sessions: WebSessions::new(store.clone()),
            store,
            by_email: DashMap::new(),
            guesses: crate::limiter::Guesses::open(&config.storage),
            registrations_kept: DashMap::new(),
            client_documents: Default::default(),
        }
    }

    /// How long until `email` may try a password again, when it is locked.
    fn locked(&self, email: &str) -> Option<Duration> {
        let now = Instant::now();
        self.by_email.get(email).and_then(|f| f.1).and_then(|until| until.checked_duration_since(now))
    }

    /// Counts one more `what` from `ip` (by address, IPv6 by /64) against `limit` per
    /// [`ADDRESS_WINDOW`]: a 429 with `Retry-After` when the address has had its share.
    pub(crate) async fn count(&self, what: &str, ip: IpAddr, limit: u32) -> Result<(), ApiError> {
        let key = format!("{what}:{}", crate::limiter::address_block(ip, false));
        self.guesses.count(&key, limit, ADDRESS_WINDOW).await.map_err(|wait| ApiError::too_many(what, wait))
    }

    fn failed(&self, email: &str) {
        let mut f = self.by_email.entry(email.to_string()).or_default();
        f.0 += 1;
        if f.0 >= FREE_FAILURES {
            let doublings = (f.0 - FREE_FAILURES).min(10);
            f.1 = Some(Instant::now() + (FIRST_LOCKOUT * 2u32.pow(doublings)).min(MAX_LOCKOUT));
        }
    }

    fn succeeded(&self, email: &str) {
        self.by_email.remove(email);
    }
}

/// Answers a request under the prefix (`prefix` is its length in the path).
pub async fn handle(server: &Server, ex: &mut Exchange<'_>, prefix: usize) -> Result<()> {
    let path = ex.request().uri.path()[prefix..].to_string();
    let method = ex.request().method.clone();
    if matches!(path.as_str(), "/oauth/token" | "/oauth/revoke" | "/oauth/register") {
        return crate::oauth_server::handle(server, ex, &path).await;
    }
    let page = match (method.as_str(), path.as_str()) {
        ("GET", "" | "/") => account(server, ex).await,
        ("GET", "/signin") => Ok(sign_in_form(server, ex, None)),
        ("POST", "/signin") => sign_in(server, ex).await,
        ("POST", "/signin/mfa") => sign_in_mfa(server, ex).await,
        ("POST", "/signout") => sign_out(server, ex).await,
        ("GET", "/oauth/authorize") => consent::authorize(server, ex).await,
        ("POST", "/oauth/authorize") => consent::decide(server, ex).await,
        ("GET", p) if p.starts_with("/signin/") => start_with_provider(server, ex, &p["/signin/".len()..]).await,
        ("GET", p) if p.starts_with("/callback/") => back_from_provider(server, ex, &p["/callback/".len()..]).await,
        ("GET", "/saml/metadata") => Ok(Page::xml(saml::metadata(server))),
        ("GET", p) if p.starts_with("/saml/login/") => saml_start(server, ex, &p["/saml/login/".len()..]).await,
        ("POST", "/saml/callback") => saml_callback(server, ex).await,
        (_, "" | "/" | "/signin" | "/signin/mfa" | "/signout" | "/oauth/authorize") => {
            Err(ApiError::MethodNotAllowed(method.to_string()))
        }
        _ => Err(ApiError::NoRoute(ex.request().uri.path().to_string())),
    };
    let page = page.unwrap_or_else(|e| Page::error(&e));
    page.write(ex).await
}

/// A refusal at the identity service's edge (its filter chain, e.g. the address's bucket): an
/// OAuth error on the machine endpoints, a page elsewhere; `Retry-After` either way.
pub async fn refuse(ex: &mut Exchange<'_>, prefix: usize, e: ApiError) -> Result<()> {
    let path = &ex.request().uri.path()[prefix..];
    if matches!(path, "/oauth/token" | "/oauth/revoke" | "/oauth/register") {
        return crate::oauth_server::refuse(ex, e).await;
    }
    Page::error(&e).write(ex).await
}

/// A response of the identity service: an HTML page or a redirect, with its cookies.
struct Page {
    status: u16,
    body: String,
    content_type: &'static str,
    headers: Vec<(HeaderName, HeaderValue)>,
}

impl Page {
    fn html(status: u16, body: String) -> Page {
        Page { status, body, content_type: "text/html; charset=utf-8", headers: Vec::new() }
    }

    /// The SAML service provider's metadata.
    fn xml(body: String) -> Page {
        Page { status: 200, body, content_type: "application/samlmetadata+xml", headers: Vec::new() }
    }

    fn redirect(to: &str) -> Page {
        let mut p = Page::html(303, String::new());
        if let Ok(v) = HeaderValue::from_str(to) {
            p.headers.push((http::header::LOCATION, v));
        }
        p
    }

    fn error(e: &ApiError) -> Page {
        if e.status() >= 500 {
            tracing::error!(error = ?e, "identity service request failed");
        }
        let mut page = Page::html(e.status(), pages::message("Something went wrong", &e.to_string()));
        if let Some(secs) = e.retry_after() {
            page.headers.push((http::header::RETRY_AFTER, HeaderValue::from(secs)));
        }
        page
    }

    fn cookie(mut self, value: String) -> Page {
        if let Ok(v) = HeaderValue::from_str(&value) {
            self.headers.push((http::header::SET_COOKIE, v));
        }
        self
    }

    async fn write(mut self, ex: &mut Exchange<'_>) -> Result<()> {
        for (name, value) in [
            (
                http::header::CONTENT_SECURITY_POLICY,
                "default-src 'none'; style-src 'unsafe-inline'; form-action 'self'; frame-ancestors 'none'",
            ),
            (http::header::X_FRAME_OPTIONS, "DENY"),
            (http::header::REFERRER_POLICY, "no-referrer"),
            (http::header::X_CONTENT_TYPE_OPTIONS, "nosniff"),
        ] {
            self.headers.push((name, HeaderValue::from_static(value)));
        }
        ex.respond(self.status, self.content_type, self.body.into_bytes(), &self.headers).await
    }
}

/// The value of cookie `name` in the request.
fn cookie<'a>(ex: &'a Exchange<'_>, name: &str) -> Option<&'a str> {
    ex.headers()
        .get_all(http::header::COOKIE)
        .iter()
        .filter_map(|v| v.to_str().ok())
        .flat_map(|v| v.split(';'))
        .filter_map(|pair| pair.trim().split_once('='))
        .find(|(n, _)| *n == name)
        .map(|(_, v)| v)
        .filter(|v| !v.is_empty())
}

fn prefix(server: &Server) -> String {
    server.state.config().web.path.clone()
}

/// Where to go once signed in: a path of this server, else the account page.
fn next_of(server: &Server, next: Option<&str>) -> String {
    match next {
        Some(n) if n.starts_with('/') && !n.starts_with("//") && !n.contains(['\\', '\r', '\n']) => n.to_string(),
        _ => format!("{}/", prefix(server)),
    }
}

/// The sign-in form, with a fresh CSRF token (cookie and field).
fn sign_in_form(server: &Server, ex: &Exchange<'_>, error: Option<&str>) -> Page {
    let next = next_in_query(ex);
    let csrf = crate::secrets::new_session_id();
    let path = prefix(server);
    // Where each way of signing in starts, and its name: the OpenID providers, then SAML.
    let web = &server.state.config().web;
    let providers: Vec<(String, String)> = (web.oidc_providers.iter())
        .map(|p| (format!("/signin/{}", p.id), p.name.clone()))
        .chain(web.saml.iter().map(|s| (format!("/saml/login/{}", s.organization), s.name.clone())))
        .collect();
    Page::html(
        if error.is_some() { 401 } else { 200 },
        pages::sign_in(&path, &csrf, next.as_deref(), &providers, error),
    )
    .cookie(csrf_cookie(&path, &csrf))
}

fn csrf_cookie(path: &str, token: &str) -> String {
    format!("{CSRF_COOKIE}={token}; Path={path}; HttpOnly; Secure; SameSite=Strict")
}

fn session_cookie(token: &str, idle: Duration) -> String {
    format!("{SESSION_COOKIE}={token}; Path=/; HttpOnly; Secure; SameSite=Lax; Max-Age={}", idle.as_secs())
}

/// The fields of a form POST, after its CSRF token was checked against the cookie.
async fn form(ex: &mut Exchange<'_>) -> std::result::Result<Vec<(String, String)>, ApiError> {
    let body = ex.read_body_within(MAX_FORM_BYTES).await?;
    let fields: Vec<(String, String)> = url::form_urlencoded::parse(&body).into_owned().collect();
    let sent = fields.iter().find(|(k, _)| k == "csrf").map(|(_, v)| v.as_str()).unwrap_or("");
    let expected = cookie(ex, CSRF_COOKIE).unwrap_or("");
    if sent.is_empty() || expected.is_empty() || !crate::secrets::hashes_equal(sent, expected) {
        return Err(ApiError::Forbidden("the form's CSRF token is missing or does not match: reload the page".into()));
    }
    Ok(fields)
}

fn field<'a>(fields: &'a [(String, String)], name: &str) -> &'a str {
    fields.iter().find(|(k, _)| k == name).map(|(_, v)| v.as_str()).unwrap_or("")
}

/// The users an e-mail names (one in practice; in several organisations, the first whose
/// password matches signs in).
fn users_with(server: &Server, email: &str) -> Vec<Arc<User>> {
    let mut users = server.state.users_where(|u| u.email.eq_ignore_ascii_case(email));
    users.sort_by(|a, b| a.id.cmp(&b.id));
    users
}

async fn sign_in(server: &Server, ex: &mut Exchange<'_>) -> std::result::Result<Page, ApiError> {
    let fields = form(ex).await?;
    let email = field(&fields, "email").trim().to_lowercase();
    let password = field(&fields, "password").to_string();
    let next = next_of(server, Some(field(&fields, "next")));
    let ip = ex.ctx.client_ip;
    if let Some(wait) = server.signin.locked(&email) {
        return Err(ApiError::too_many("wrong passwords", wait));
    }
    if passwords::overloaded() {
        return Err(ApiError::Rejected {
            status: 503,
            code: "UNAVAILABLE",
            message: "too many sign-ins at once; try again in a moment".into(),
            retry_after: Some(1),
        });
    }
    // Counted before the check, so that attempts made at once count as much as one after another.
    server.signin.count("password checks from this address", ip, ADDRESS_ATTEMPTS).await?;
    let mut signed_in = None;
    let candidates = users_with(server, &email);
    if candidates.is_empty() {
        passwords::verify(None, password.clone()).await;
    }
    for user in candidates {
        let stored = passwords::stored(server.signin.store.as_ref(), &user.id).await?;
        if passwords::verify(stored.map(|p| p.hash), password.clone()).await {
            signed_in = Some(user);
            break;
        }
    }
    let Some(user) = signed_in else {
        server.signin.failed(&email);
        return Ok(sign_in_form(server, ex, Some("The e-mail or the password is wrong.")));
    };
    server.signin.succeeded(&email);
    signed_in_as(server, ex, &user, &next).await
}

/// The user proved who it is (password, or a provider): the second factor when MFA is on, else
/// a session.
async fn signed_in_as(
    server: &Server,
    ex: &Exchange<'_>,
    user: &User,
    next: &str,
) -> std::result::Result<Page, ApiError> {
    if server.mfa.is_active(&user.id).await? {
        let challenge = server.mfa.challenge(&user.id).await?;
        // A sign-in that arrives from a provider has no form yet: it gets a CSRF token here.
        let (csrf, fresh) = match cookie(ex, CSRF_COOKIE) {
            Some(c) => (c.to_string(), false),
            None => (crate::secrets::new_session_id(), true),
        };
        let path = prefix(server);
        let page = Page::html(200, pages::code(&path, &csrf, &challenge.id, next, Some(&challenge.prompt), None));
        return Ok(if fresh { page.cookie(csrf_cookie(&path, &csrf)) } else { page });
    }
    start_session(server, ex, user, next).await
}

fn redirect_uri(server: &Server, provider: &str) -> String {
    let config = server.state.config();
    format!("{}{}/callback/{provider}", config.server.public_url, config.web.path)
}

async fn start_with_provider(server: &Server, ex: &Exchange<'_>, id: &str) -> std::result::Result<Page, ApiError> {
    let config = server.state.config();
    let provider = config.web.oidc_providers.iter().find(|p| p.id == id).cloned();
    drop(config);
    let provider = provider.ok_or_else(|| ApiError::NoRoute(ex.request().uri.path().to_string()))?;
    let next = next_of(server, next_in_query(ex).as_deref());
    server.signin.count("sign-ins started from this address", ex.ctx.client_ip, ADDRESS_STARTS).await?;
    let to = oidc::start(server.signin.store.as_ref(), &provider, &redirect_uri(server, id), &next).await?;
    Ok(Page::redirect(&to))
}

async fn back_from_provider(server: &Server, ex: &Exchange<'_>, callback: &str) -> std::result::Result<Page, ApiError> {
    let params = crate::api::parse_query(ex.request().uri.query());
    if let Some((_, error)) = params.iter().find(|(k, _)| k == "error") {
        return Err(ApiError::Unauthorized(format!("the provider did not sign you in ({error})")));
    }
    let (state, code) = (field(&params, "state"), field(&params, "code"));
    if state.is_empty() || code.is_empty() {
        return Err(ApiError::validation("code", "the provider sent back no code and state"));
    }
    let providers = server.state.config().web.oidc_providers.clone();
    let store = server.signin.store.as_ref();
    let done = oidc::finish(store, &providers, |id| redirect_uri(server, id), callback, state, code).await?;
    let user = users_with(server, &done.email)
        .into_iter()
        .next()
        .ok_or_else(|| ApiError::Forbidden(format!("no toolgate user has the e-mail address {}", done.email)))?;
    signed_in_as(server, ex, &user, &done.next).await
}

async fn saml_start(server: &Server, ex: &Exchange<'_>, org: &str) -> std::result::Result<Page, ApiError> {
    let next = next_of(server, next_in_query(ex).as_deref());
    server.signin.count("sign-ins started from this address", ex.ctx.client_ip, ADDRESS_STARTS).await?;
    let started = saml::start(server, org, &next).await?;
    let cookie = format!(
        "{}={}; Path={}/saml/callback; HttpOnly; Secure; SameSite=None; Max-Age={}",
        saml::BROWSER_COOKIE,
        started.browser,
        prefix(server),
        saml::REQUEST_TTL.as_secs()
    );
    Ok(Page::redirect(&started.redirect_to).cookie(cookie))
}

/// The IdP's answer (HTTP-POST binding). Cross-site by nature, so no CSRF token: the request it
/// answers is single use and bound to the browser that started it (a cookie).
async fn saml_callback(server: &Server, ex: &mut Exchange<'_>) -> std::result::Result<Page, ApiError> {
    let body = ex.read_body_within(saml::MAX_RESPONSE_FORM_BYTES).await?;
    let fields: Vec<(String, String)> = url::form_urlencoded::parse(&body).into_owned().collect();
    let browser = cookie(ex, saml::BROWSER_COOKIE).unwrap_or("");
    let done = saml::finish(server, field(&fields, "RelayState"), field(&fields, "SAMLResponse"), browser).await?;
    let page = signed_in_as(server, ex, &done.user, &done.next).await?;
    let expired = format!(
        "{}=; Path={}/saml/callback; HttpOnly; Secure; SameSite=None; Max-Age=0",
        saml::BROWSER_COOKIE,
        prefix(server)
    );
    Ok(page.cookie(expired))
}

async fn sign_in_mfa(server: &Server, ex: &mut Exchange<'_>) -> std::result::Result<Page, ApiError> {
    let fields = form(ex).await?;
    let challenge = field(&fields, "challenge_id");
    let next = next_of(server, Some(field(&fields, "next")));
    let user_id = server.mfa.challenge_user(challenge).await?.ok_or_else(|| {
        ApiError::validation("challenge_id", "the sign-in took too long or was used up: sign in again")
    })?;
    let user = server.state.user(&user_id).ok_or(ApiError::NotFound("user"))?;
    let caller = crate::mfa::Caller { user_id: &user.id, key_id: "web-sign-in" };
    match server.mfa.verify(&server.state.sealer, caller, challenge, field(&fields, "code")).await {
        Ok(_) => start_session(server, ex, &user, &next).await,
        Err(e @ ApiError::Rejected { .. }) => Err(e),
        Err(e) => {
            let csrf = field(&fields, "csrf").to_string();
            let still_open = server.mfa.challenge_user(challenge).await?.is_some();
            if !still_open {
                return Err(e);
            }
            let page = pages::code(&prefix(server), &csrf, challenge, &next, None, Some("That code is not valid."));
            Ok(Page::html(401, page))
        }
    }
}

async fn start_session(
    server: &Server,
    ex: &Exchange<'_>,
    user: &User,
    next: &str,
) -> std::result::Result<Page, ApiError> {
    let web = server.state.config().web.clone();
    let ua = ex.header("user-agent").unwrap_or("").to_string();
    let token = server
        .signin
        .sessions
        .start(user, ex.ctx.client_ip.to_string(), ua, web.session_idle, web.max_sessions_per_user)
        .await?;
    tracing::info!(user = user.id, "web sign-in");
    Ok(Page::redirect(next).cookie(session_cookie(&token, web.session_idle)))
}

/// The signed-in user's session, if the request carries a live one.
pub async fn current(server: &Server, ex: &Exchange<'_>) -> std::result::Result<Option<WebSession>, ApiError> {
    let Some(token) = cookie(ex, SESSION_COOKIE) else { return Ok(None) };
    let idle = server.state.config().web.session_idle;
    Ok(server.signin.sessions.find(token, idle).await?)
}

async fn account(server: &Server, ex: &mut Exchange<'_>) -> std::result::Result<Page, ApiError> {
    let Some(session) = current(server, ex).await? else {
        return Ok(Page::redirect(&format!("{}/signin", prefix(server))));
    };
    let user = server.state.user(&session.user_id).ok_or(ApiError::NotFound("user"))?;
    let sessions = server.signin.sessions.of_user(&user.id).await?;
    let csrf = crate::secrets::new_session_id();
    let path = prefix(server);
    Ok(Page::html(200, pages::account(&path, &csrf, &user, &session, &sessions)).cookie(csrf_cookie(&path, &csrf)))
}

async fn sign_out(server: &Server, ex: &mut Exchange<'_>) -> std::result::Result<Page, ApiError> {
    form(ex).await?;
    if let Some(token) = cookie(ex, SESSION_COOKIE) {
        server.signin.sessions.end_token(token).await?;
    }
    let gone = format!("{SESSION_COOKIE}=; Path=/; HttpOnly; Secure; SameSite=Lax; Max-Age=0");
    Ok(Page::redirect(&format!("{}/signin", prefix(server))).cookie(gone))
}
