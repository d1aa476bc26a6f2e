//! Web sign-in, the identity service's first part (`{auth_url}`, `web.path`, default `/auth`):
//! server-rendered pages where a user signs in with e-mail and password (and the TOTP code or a
//! backup code when MFA is on), a web session held in a cookie, and sign-out. The OAuth
//! authorization server's page (`oauth_server/authorize.rs`) sits on these sessions; this
//! module knows nothing of it. The prefix's router is `identity/router.rs`.
//!
//! Decisions (README "Web sign-in"):
//! - Cookies: `toolgate_session` (the session token; `HttpOnly`, `Secure`, `SameSite=Lax` so a
//!   top-level navigation from another site, an OAuth redirect, still carries it, `Path=/`) and
//!   `toolgate_csrf` (`HttpOnly`, `Secure`, `SameSite=Strict`, on the prefix); both `__Host-`
//!   prefixed (and on `/`) where TLS is on. Every form carries the CSRF token in a hidden field,
//!   equal to the cookie and issued by this server for this session (or, before sign-in, for no
//!   session): a POST without both, with two that differ, with a token the server did not issue
//!   for this binding, or that a browser says came from another site, is a 403 (`csrf`).
//! - Guessing is bounded as MFA bounds it: five wrong passwords in a row for an e-mail lock it
//!   for 30 s, doubling up to 15 minutes (429 with `Retry-After`), and an address gets fifty
//!   password checks per ten minutes, counted before the check (so concurrent attempts count
//!   too). An unknown e-mail is refused after checking a decoy hash, in the same words and time
//!   as a wrong password. At most `web.password_checks` checks run at once (`passwords`).
//! - The per-address bounds and the per-e-mail lockout count in [`crate::data::limiter::Guesses`]
//!   (the one MFA counts its wrong codes in): shared by the instances on Redis, so several allow
//!   together what one allows.
//! - A form's body must arrive within `web.body_timeout_secs` (408) and is read as it comes,
//!   never reserved to its declared length.
//! - Pages say nothing about which part was wrong, are never cached or framed, and load nothing
//!   (`Content-Security-Policy: default-src 'none'`).
//! - The MFA step continues only its own sign-in: the answer that opens a challenge sets the
//!   `toolgate_mfa` cookie and the challenge keeps its hash; the step takes only that browser's
//!   challenge, and wrong codes count against that browser's sign-in (never the user's).
//! - `next` (where to go once signed in) is a path that resolves to this server's origin only.
//! - The organisation's IP allowlist is checked once the user is known (the password, provider
//!   or SAML assertion proved it), before any MFA challenge or session: an address it refuses
//!   gets a 403 page in the same words whatever the way in. A wrong password stays a wrong
//!   password, so the list is shown to no one who lacks it.

pub(crate) mod csrf;
mod oidc;
pub(crate) mod pages;
pub(crate) mod passwords;
mod saml;
pub(crate) mod sessions;
pub(crate) mod trail;
pub(crate) mod turns;

use crate::data::model::User;
use crate::data::store::Store;
use crate::edge::error::ApiError;
use crate::edge::exchange::Exchange;
use crate::edge::forms;
use crate::identity::IdentityService;
use http::header::{HeaderName, HeaderValue};
use pingora::Result;
use std::net::IpAddr;
use std::sync::Arc;
use std::time::Duration;
use toolgate_filters::ip_allowlist::IpPolicySource;

pub(crate) use pages::escape;
pub(crate) use sessions::{WebSession, WebSessions};

/// Set on the answer of a password check (or a provider's sign-in) that opens an MFA challenge:
/// the challenge is bound to its hash, so only this browser continues this sign-in.
const MFA_COOKIE: &str = "toolgate_mfa";
/// Wrong passwords an e-mail may get in a row before it is locked.
const FREE_FAILURES: u32 = 5;
const FIRST_LOCKOUT: Duration = Duration::from_secs(30);
const MAX_LOCKOUT: Duration = Duration::from_secs(15 * 60);
/// Password checks (sign-in attempts) from one address per window.
const ADDRESS_ATTEMPTS: u32 = 50;
/// Sign-ins through a provider one address may start per window (each is a stored record).
const ADDRESS_STARTS: u32 = 30;
/// Largest sign-in form accepted.
const MAX_FORM_BYTES: usize = 8 * 1024;

/// The sign-in's state: web sessions, and the bounds its password checks count in.
pub struct SignIn {
    pub sessions: WebSessions,
    store: Arc<dyn Store>,
    /// The identity service's guessing bounds (`IdentityService::guesses`): per-address
    /// password checks and sign-ins started, and wrong passwords in a row per e-mail.
    guesses: Arc<crate::data::limiter::Guesses>,
}

/// The group an e-mail's (lower case) wrong passwords in a row count under.
fn email_group(email: &str) -> String {
    format!("wrong passwords:{email}")
}

/// How long an e-mail with `count` wrong passwords in a row is locked after the last: none
/// below [`FREE_FAILURES`], then [`FIRST_LOCKOUT`] doubling with each further one, up to
/// [`MAX_LOCKOUT`].
fn lockout(count: u32) -> Option<Duration> {
    let doublings = count.checked_sub(FREE_FAILURES)?.min(10);
    Some((FIRST_LOCKOUT * 2u32.pow(doublings)).min(MAX_LOCKOUT))
}

/// How long wrong passwords in a row are remembered after the last, once no lockout runs.
const FORGET_AFTER: Duration = Duration::from_secs(60 * 60);

/// The `next` of the request's query (where to go once signed in), unchecked.
fn next_in_query(ex: &Exchange<'_>) -> Option<String> {
    forms::first(&forms::parse_query(ex.request().uri.query()), "next").map(str::to_string)
}

impl SignIn {
    /// The identity service on `store`; its web sessions are published on (and follow)
    /// `changes`; its bounds count in `guesses` (the shared limiter).
    pub fn new(
        store: Arc<dyn Store>,
        changes: crate::data::changes::Feed,
        config: &crate::config::Config,
        guesses: Arc<crate::data::limiter::Guesses>,
    ) -> SignIn {
        turns::configure(config.web.password_checks);
        SignIn { sessions: WebSessions::new(store.clone(), changes), store, guesses }
    }

    /// How long until `email` may try a password again, when it is locked.
    async fn locked(&self, email: &str) -> Option<Duration> {
        let (count, ago) = self.guesses.streak(&email_group(email), "", FORGET_AFTER).await?;
        lockout(count)?.checked_sub(ago).filter(|left| !left.is_zero())
    }

    /// Counts one more `what` from `ip` against `limit` per window (`count_per_address`).
    async fn count(&self, what: &str, ip: IpAddr, limit: u32) -> Result<(), ApiError> {
        crate::identity::count_per_address(&self.guesses, what, ip, limit).await
    }

    async fn failed(&self, email: &str) {
        self.guesses.miss(&email_group(email), "", FORGET_AFTER).await;
    }

    /// Checks a user's current password (`PUT /v1/user/password`) under the sign-in's guessing
    /// bounds: refused (429) while the e-mail is locked out or the address has had its checks, and a wrong one
    /// counted as a wrong sign-in, so that an API key cannot guess the password faster than
    /// the sign-in form lets anyone.
    pub(crate) async fn check_current_password(
        &self,
        email: &str,
        ip: IpAddr,
        stored_hash: String,
        given: String,
    ) -> std::result::Result<bool, ApiError> {
        let email = email.trim().to_lowercase();
        if let Some(wait) = self.locked(&email).await {
            return Err(ApiError::too_many("wrong passwords", wait));
        }
        let _place = turns::admit(ip, &email)?;
        // Counted before the check, as the sign-in form counts its checks.
        self.count("password checks from this address", ip, ADDRESS_ATTEMPTS).await?;
        if passwords::verify(Some(stored_hash), given).await {
            self.succeeded(&email).await;
            Ok(true)
        } else {
            self.failed(&email).await;
            Ok(false)
        }
    }

    async fn succeeded(&self, email: &str) {
        self.guesses.clear(&email_group(email), Some("")).await;
    }
}

/// The sign-in's page for `method` and `path` (after the prefix), or `None` when the path is
/// none of the sign-in's (the router, `identity/router.rs`, answers those).
pub(crate) async fn page(
    identity: &IdentityService,
    ex: &mut Exchange<'_>,
    method: &str,
    path: &str,
) -> Option<std::result::Result<Page, ApiError>> {
    Some(match (method, path) {
        ("GET", "" | "/") => account(identity, ex).await,
        ("GET", "/signin") => Ok(sign_in_form(identity, ex, None)),
        ("POST", "/signin") => sign_in(identity, ex).await,
        ("POST", "/signin/mfa") => sign_in_mfa(identity, ex).await,
        ("POST", "/signout") => sign_out(identity, ex).await,
        ("GET", p) if p.starts_with("/signin/") => start_with_provider(identity, ex, &p["/signin/".len()..]).await,
        ("GET", p) if p.starts_with("/callback/") => back_from_provider(identity, ex, &p["/callback/".len()..]).await,
        ("GET", "/saml/metadata") => Ok(Page::xml(saml::metadata(identity))),
        ("GET", p) if p.starts_with("/saml/login/") => saml_start(identity, ex, &p["/saml/login/".len()..]).await,
        ("POST", "/saml/callback") => saml_callback(identity, ex).await,
        (_, "" | "/" | "/signin" | "/signin/mfa" | "/signout") => Err(ApiError::MethodNotAllowed(method.to_string())),
        _ => return None,
    })
}

/// The identity pages' security headers: nothing loaded, never framed or cached by referrer.
const PAGE_HEADERS: &[(HeaderName, &str)] = &[
    (
        http::header::CONTENT_SECURITY_POLICY,
        "default-src 'none'; style-src 'unsafe-inline'; form-action 'self'; frame-ancestors 'none'",
    ),
    (http::header::X_FRAME_OPTIONS, "DENY"),
    (http::header::REFERRER_POLICY, "no-referrer"),
    (http::header::X_CONTENT_TYPE_OPTIONS, "nosniff"),
];

/// A response of the identity service (its pages and the console's): an HTML page, a redirect
/// or a file, with its cookies and headers, written with its security headers (the identity
/// pages' unless [`Page::secured_by`] set others).
pub(crate) struct Page {
    pub(crate) status: u16,
    body: Vec<u8>,
    content_type: &'static str,
    headers: Vec<(HeaderName, HeaderValue)>,
    security: &'static [(HeaderName, &'static str)],
}

impl Page {
    /// An answer of `content_type`.
    pub(crate) fn of(status: u16, content_type: &'static str, body: impl Into<Vec<u8>>) -> Page {
        Page { status, body: body.into(), content_type, headers: Vec::new(), security: PAGE_HEADERS }
    }

    pub(crate) fn html(status: u16, body: String) -> Page {
        Page::of(status, "text/html; charset=utf-8", body)
    }

    /// The SAML service provider's metadata.
    fn xml(body: String) -> Page {
        Page::of(200, "application/samlmetadata+xml", body)
    }

    pub(crate) fn redirect(to: &str) -> Page {
        Page::html(303, String::new()).header(http::header::LOCATION, to)
    }

    pub(crate) fn error(e: &ApiError) -> Page {
        if e.status() >= 500 {
            tracing::error!(error = ?e, "identity service request failed");
        }
        Page::html(e.status(), pages::message("Something went wrong", &e.to_string())).retry_after(e)
    }

    /// `Retry-After` when `e` has one.
    pub(crate) fn retry_after(self, e: &ApiError) -> Page {
        match e.retry_after() {
            Some(secs) => self.header(http::header::RETRY_AFTER, &secs.to_string()),
            None => self,
        }
    }

    /// One more header (dropped when `value` is not a valid header value).
    pub(crate) fn header(mut self, name: HeaderName, value: &str) -> Page {
        if let Ok(v) = HeaderValue::from_str(value) {
            self.headers.push((name, v));
        }
        self
    }

    pub(crate) fn cookie(self, value: impl AsRef<str>) -> Page {
        self.header(http::header::SET_COOKIE, value.as_ref())
    }

    /// Written with `headers` instead of the identity pages' security headers.
    pub(crate) fn secured_by(mut self, headers: &'static [(HeaderName, &'static str)]) -> Page {
        self.security = headers;
        self
    }

    pub(crate) async fn write(mut self, ex: &mut Exchange<'_>) -> Result<()> {
        for (name, value) in self.security {
            self.headers.push((name.clone(), HeaderValue::from_static(value)));
        }
        ex.respond(self.status, self.content_type, self.body, &self.headers).await
    }
}

/// The value of cookie `name` in the request (the console reads its notice with it).
pub(crate) fn cookie<'a>(ex: &'a Exchange<'_>, name: &str) -> Option<&'a str> {
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

pub(crate) fn prefix(identity: &IdentityService) -> String {
    identity.state.config().web.path.clone()
}

/// Where to go once signed in: a path of this server, else the account page.
fn next_of(identity: &IdentityService, next: Option<&str>) -> String {
    let origin = identity.state.config().server.public_url.clone();
    next.and_then(|n| same_origin_path(&origin, n)).unwrap_or_else(|| format!("{}/", prefix(identity)))
}

/// `next` as a path (with its query) of the server at `public_url`, or `None` when a browser
/// could read it as anything else. Refused: anything but one `/` first (`//host`, `/\host`,
/// `https:host`), control characters, whitespace and backslashes anywhere (browsers drop a tab
/// or a line break inside a URL, so `/<TAB>/host` becomes `//host`, and read `\` as `/`), and
/// the same in the percent-decoded path (`/%2F%2Fhost`, `/%09/host`, `/%5Chost`). What remains
/// must resolve, against the server's own origin, to that origin; the answer is the resolved
/// path and query, as the URL parser wrote them.
fn same_origin_path(public_url: &str, next: &str) -> Option<String> {
    let bad = |c: char| c.is_control() || c.is_whitespace() || c == '\\';
    let leads_elsewhere = |p: &str| !p.starts_with('/') || p.starts_with("//") || p.contains(bad);
    if leads_elsewhere(next) {
        return None;
    }
    let path = next.split(['?', '#']).next().unwrap_or_default();
    let decoded = percent_encoding::percent_decode_str(path).decode_utf8().ok()?;
    if leads_elsewhere(&decoded) {
        return None;
    }
    let base = url::Url::parse(public_url).ok().filter(|u| u.has_host())?;
    let resolved = base.join(next).ok()?;
    if resolved.origin() != base.origin() {
        return None;
    }
    Some(resolved[url::Position::BeforePath..].to_string())
}

/// The sign-in form, with a fresh CSRF token (cookie and field).
fn sign_in_form(identity: &IdentityService, ex: &Exchange<'_>, error: Option<&str>) -> Page {
    let next = next_in_query(ex);
    let csrf = csrf::issue(&identity.state, csrf::Binding::PreSession);
    let path = prefix(identity);
    // Where each way of signing in starts, and its name: the OpenID providers, then SAML.
    let web = &identity.state.config().web;
    let providers: Vec<(String, String)> = (web.oidc_providers.iter())
        .map(|p| (format!("/signin/{}", p.id), p.name.clone()))
        .chain(web.saml.iter().map(|s| (format!("/saml/login/{}", s.organization), s.name.clone())))
        .collect();
    Page::html(
        if error.is_some() { 401 } else { 200 },
        pages::sign_in(&path, &csrf, next.as_deref(), &providers, error),
    )
    .cookie(csrf::cookie(&identity.state.config(), &csrf))
}

/// The session cookie (`Max-Age=0` with an empty `token` removes it).
fn session_cookie(identity: &IdentityService, token: &str, idle: Duration) -> String {
    let name = csrf::session_cookie_name(&identity.state.config());
    format!("{name}={token}; Path=/; HttpOnly; Secure; SameSite=Lax; Max-Age={}", idle.as_secs())
}

/// The token of the request's session cookie, if any (live or not).
pub(crate) fn session_token<'a>(identity: &IdentityService, ex: &'a Exchange<'_>) -> Option<&'a str> {
    cookie(ex, csrf::session_cookie_name(&identity.state.config()))
}

/// The fields of a form POST, after its CSRF token was checked for `binding` (`csrf::check`).
pub(crate) async fn form(
    identity: &IdentityService,
    ex: &mut Exchange<'_>,
    binding: csrf::Binding<'_>,
) -> std::result::Result<Vec<(String, String)>, ApiError> {
    let fields = forms::parse(&ex.read_body_within(MAX_FORM_BYTES).await?);
    csrf::check(&identity.state, ex, field(&fields, "csrf"), binding)?;
    Ok(fields)
}

pub(crate) fn field<'a>(fields: &'a [(String, String)], name: &str) -> &'a str {
    forms::first(fields, name).unwrap_or("")
}

/// The users an e-mail names (one in practice; in several organisations, the first whose
/// password matches signs in).
fn users_with(identity: &IdentityService, email: &str) -> Vec<Arc<User>> {
    let mut users = identity.state.users_where(|u| crate::config::same_email(&u.email, email));
    users.sort_by(|a, b| a.id.cmp(&b.id));
    users
}

async fn sign_in(identity: &IdentityService, ex: &mut Exchange<'_>) -> std::result::Result<Page, ApiError> {
    let fields = form(identity, ex, csrf::Binding::PreSession).await?;
    let email = field(&fields, "email").trim().to_lowercase();
    let password = field(&fields, "password").to_string();
    let next = next_of(identity, Some(field(&fields, "next")));
    let ip = ex.ctx.client_ip;
    if let Some(wait) = identity.signin.locked(&email).await {
        return Err(ApiError::too_many("wrong passwords", wait));
    }
    // A place in the checks' queue, within the address's and the account's share (`turns`).
    let place = turns::admit(ip, &email)?;
    // Counted before the check, so that attempts made at once count as much as one after another.
    identity.signin.count("password checks from this address", ip, ADDRESS_ATTEMPTS).await?;
    let mut signed_in = None;
    let candidates = users_with(identity, &email);
    if candidates.is_empty() {
        passwords::verify(None, password.clone()).await;
    }
    for user in &candidates {
        let stored = passwords::stored(identity.signin.store.as_ref(), &user.id).await?;
        if passwords::verify(stored.map(|p| p.hash), password.clone()).await {
            signed_in = Some(user.clone());
            break;
        }
    }
    drop(place);
    let Some(user) = signed_in else {
        for user in &candidates {
            trail::refused(identity, user, "wrong_password", ip);
        }
        identity.signin.failed(&email).await;
        return Ok(sign_in_form(identity, ex, Some("The e-mail or the password is wrong.")));
    };
    identity.signin.succeeded(&email).await;
    signed_in_as(identity, ex, &user, &next).await
}

/// Refused (403 `IP_NOT_ALLOWED`) when the user's organisation enforces an IP allowlist that
/// does not hold `ip`: one page, whatever proved who the user is.
fn admitted(identity: &IdentityService, user: &User, ip: IpAddr) -> std::result::Result<(), ApiError> {
    if identity.state.refuses_address(&user.org_id, ip) {
        tracing::info!(user = user.id, %ip, "web sign-in refused by the organisation's IP allowlist");
        trail::refused(identity, user, "ip_not_allowed", ip);
        return Err(ApiError::Rejected {
            status: 403,
            code: "IP_NOT_ALLOWED",
            message: "Your organisation does not allow signing in from this address.".into(),
            retry_after: None,
        });
    }
    Ok(())
}

/// The user proved who it is (password, or a provider): the second factor when MFA is on, else
/// a session. The challenge opened here is bound to this browser: a fresh random cookie is set
/// on this answer and the challenge keeps its hash, so only this browser, holding the proof of
/// this check, continues this sign-in (not a challenge a key was given by the API, nor this one
/// from another browser).
async fn signed_in_as(
    identity: &IdentityService,
    ex: &Exchange<'_>,
    user: &User,
    next: &str,
) -> std::result::Result<Page, ApiError> {
    admitted(identity, user, ex.ctx.client_ip)?;
    if identity.mfa.is_active(&user.id).await? {
        let browser = crate::base::secrets::new_session_id();
        let challenge = identity.mfa.web_challenge(&user.id, &crate::base::secrets::hash_key(&browser)).await?;
        // A sign-in that arrives from a provider has no form yet: it gets a CSRF token here.
        let kept = csrf::kept(&identity.state, ex, csrf::Binding::PreSession).map(str::to_string);
        let fresh = kept.is_none();
        let csrf = kept.unwrap_or_else(|| csrf::issue(&identity.state, csrf::Binding::PreSession));
        let path = prefix(identity);
        let page = Page::html(200, pages::code(&path, &csrf, &challenge.id, next, Some(&challenge.prompt), None))
            .cookie(mfa_cookie(&path, &browser, crate::identity::mfa::MFA_TTL));
        return Ok(if fresh { page.cookie(csrf::cookie(&identity.state.config(), &csrf)) } else { page });
    }
    start_session(identity, ex, user, next).await
}

/// The cookie that binds an MFA challenge to its browser (`Max-Age=0` with an empty value
/// removes it).
fn mfa_cookie(path: &str, value: &str, max_age: Duration) -> String {
    format!(
        "{MFA_COOKIE}={value}; Path={path}/signin/mfa; HttpOnly; Secure; SameSite=Strict; Max-Age={}",
        max_age.as_secs()
    )
}

fn redirect_uri(identity: &IdentityService, provider: &str) -> String {
    let config = identity.state.config();
    format!("{}{}/callback/{provider}", config.server.public_url, config.web.path)
}

async fn start_with_provider(
    identity: &IdentityService,
    ex: &Exchange<'_>,
    id: &str,
) -> std::result::Result<Page, ApiError> {
    let config = identity.state.config();
    let provider = config.web.oidc_providers.iter().find(|p| p.id == id).cloned();
    drop(config);
    let provider = provider.ok_or_else(|| ApiError::NoRoute(ex.request().uri.path().to_string()))?;
    let next = next_of(identity, next_in_query(ex).as_deref());
    identity.signin.count("sign-ins started from this address", ex.ctx.client_ip, ADDRESS_STARTS).await?;
    let to = oidc::start(identity.signin.store.as_ref(), &provider, &redirect_uri(identity, id), &next).await?;
    Ok(Page::redirect(&to))
}

async fn back_from_provider(
    identity: &IdentityService,
    ex: &Exchange<'_>,
    callback: &str,
) -> std::result::Result<Page, ApiError> {
    let params = forms::parse_query(ex.request().uri.query());
    if let Some((_, error)) = params.iter().find(|(k, _)| k == "error") {
        return Err(ApiError::Unauthorized(format!("the provider did not sign you in ({error})")));
    }
    let (state, code) = (field(&params, "state"), field(&params, "code"));
    if state.is_empty() || code.is_empty() {
        return Err(ApiError::validation("code", "the provider sent back no code and state"));
    }
    let providers = identity.state.config().web.oidc_providers.clone();
    let store = identity.signin.store.as_ref();
    let done = oidc::finish(store, &providers, |id| redirect_uri(identity, id), callback, state, code).await?;
    // `finish` took only a sign-in started with this callback's provider.
    let organization = providers.iter().find(|p| p.id == callback).and_then(|p| p.organization.as_deref());
    let user = provider_user(identity, &done.email, organization)?;
    signed_in_as(identity, ex, &user, &done.next).await
}

/// The user a provider's verified e-mail names: the one with it in the provider's organisation
/// (`organization`), or, for a provider configured for none, the only user with it. An e-mail
/// that users of several organisations hold is refused, never settled by picking one: the
/// provider vouches for an address, not for an organisation.
fn provider_user(
    identity: &IdentityService,
    email: &str,
    organization: Option<&str>,
) -> std::result::Result<Arc<User>, ApiError> {
    let mut users = users_with(identity, email);
    if let Some(org) = organization {
        users.retain(|u| u.org_id == org);
    }
    match (users.pop(), users.is_empty()) {
        (Some(user), true) => Ok(user),
        (None, _) => Err(ApiError::Forbidden(format!("no toolgate user has the e-mail address {email}"))),
        (Some(_), false) => Err(ApiError::Forbidden(format!(
            "users of several organisations have the e-mail address {email}: this provider names no organisation \
             (`web.oidc_providers[].organization`), so it signs none of them in"
        ))),
    }
}

async fn saml_start(identity: &IdentityService, ex: &Exchange<'_>, org: &str) -> std::result::Result<Page, ApiError> {
    let next = next_of(identity, next_in_query(ex).as_deref());
    identity.signin.count("sign-ins started from this address", ex.ctx.client_ip, ADDRESS_STARTS).await?;
    let started = saml::start(identity, org, &next).await?;
    let cookie = format!(
        "{}={}; Path={}/saml/callback; HttpOnly; Secure; SameSite=None; Max-Age={}",
        saml::BROWSER_COOKIE,
        started.browser,
        prefix(identity),
        saml::REQUEST_TTL.as_secs()
    );
    Ok(Page::redirect(&started.redirect_to).cookie(cookie))
}

/// The IdP's answer (HTTP-POST binding). Cross-site by nature, so no CSRF token: the request it
/// answers is single use and bound to the browser that started it (a cookie).
async fn saml_callback(identity: &IdentityService, ex: &mut Exchange<'_>) -> std::result::Result<Page, ApiError> {
    let body = ex.read_body_within(saml::MAX_RESPONSE_FORM_BYTES).await?;
    let fields = forms::parse(&body);
    let browser = cookie(ex, saml::BROWSER_COOKIE).unwrap_or("");
    let done = saml::finish(identity, field(&fields, "RelayState"), field(&fields, "SAMLResponse"), browser).await?;
    let page = signed_in_as(identity, ex, &done.user, &done.next).await?;
    let expired = format!(
        "{}=; Path={}/saml/callback; HttpOnly; Secure; SameSite=None; Max-Age=0",
        saml::BROWSER_COOKIE,
        prefix(identity)
    );
    Ok(page.cookie(expired))
}

async fn sign_in_mfa(identity: &IdentityService, ex: &mut Exchange<'_>) -> std::result::Result<Page, ApiError> {
    let fields = form(identity, ex, csrf::Binding::PreSession).await?;
    let challenge = field(&fields, "challenge_id");
    let next = next_of(identity, Some(field(&fields, "next")));
    let stale = || ApiError::validation("challenge_id", "the sign-in took too long or was used up: sign in again");
    // Only the challenge this browser's password check opened (its cookie's hash) is answered.
    let browser = cookie(ex, MFA_COOKIE).map(crate::base::secrets::hash_key).ok_or_else(stale)?;
    let user_id = identity.mfa.web_challenge_user(challenge, &browser).await?.ok_or_else(stale)?;
    let user = identity.state.user(&user_id).ok_or(ApiError::NotFound("user"))?;
    // Checked again: the code may come from another address than the password did.
    admitted(identity, &user, ex.ctx.client_ip)?;
    let code = field(&fields, "code");
    match identity.mfa.verify_web(&identity.state.sealer, &user.id, challenge, code, &browser).await {
        Ok(()) => {
            let page = start_session(identity, ex, &user, &next).await?;
            Ok(page.cookie(mfa_cookie(&prefix(identity), "", Duration::ZERO)))
        }
        Err(e @ ApiError::Rejected { .. }) => Err(e),
        Err(e) => {
            let csrf = field(&fields, "csrf").to_string();
            let still_open = identity.mfa.web_challenge_user(challenge, &browser).await?.is_some();
            if !still_open {
                return Err(e);
            }
            let page = pages::code(&prefix(identity), &csrf, challenge, &next, None, Some("That code is not valid."));
            Ok(Page::html(401, page))
        }
    }
}

async fn start_session(
    identity: &IdentityService,
    ex: &Exchange<'_>,
    user: &User,
    next: &str,
) -> std::result::Result<Page, ApiError> {
    let web = identity.state.config().web.clone();
    let ua = ex.header("user-agent").unwrap_or("").to_string();
    let token = identity
        .signin
        .sessions
        .start(user, ex.ctx.client_ip.to_string(), ua, web.session_idle, web.max_sessions_per_user)
        .await?;
    tracing::info!(user = user.id, "web sign-in");
    trail::signed_in(identity, user, ex.ctx.client_ip);
    // The CSRF token is renewed with the session: the one of the sign-in form was bound to none.
    let csrf = csrf::issue(&identity.state, csrf::Binding::Session(&token));
    Ok(Page::redirect(next)
        .cookie(session_cookie(identity, &token, web.session_idle))
        .cookie(csrf::cookie(&identity.state.config(), &csrf)))
}

/// The signed-in user's session, if the request carries a live one.
pub(crate) async fn current(
    identity: &IdentityService,
    ex: &Exchange<'_>,
) -> std::result::Result<Option<WebSession>, ApiError> {
    let Some(token) = session_token(identity, ex) else { return Ok(None) };
    let idle = identity.state.config().web.session_idle;
    Ok(identity.signin.sessions.find(token, idle).await?)
}

async fn account(identity: &IdentityService, ex: &mut Exchange<'_>) -> std::result::Result<Page, ApiError> {
    let Some(session) = current(identity, ex).await? else {
        return Ok(Page::redirect(&format!("{}/signin", prefix(identity))));
    };
    let user = identity.state.user(&session.user_id).ok_or(ApiError::NotFound("user"))?;
    let sessions = identity.signin.sessions.of_user(&user.id).await?;
    let token = session_token(identity, ex).unwrap_or_default();
    let csrf = csrf::issue(&identity.state, csrf::Binding::Session(token));
    let page = pages::account(&prefix(identity), &csrf, &user, &session, &sessions);
    Ok(Page::html(200, page).cookie(csrf::cookie(&identity.state.config(), &csrf)))
}

/// Ends the request's session (a form bound to it), or only drops the cookie of one that is
/// no longer live (nothing to protect).
async fn sign_out(identity: &IdentityService, ex: &mut Exchange<'_>) -> std::result::Result<Page, ApiError> {
    let token = session_token(identity, ex).map(str::to_string);
    if let (Some(token), Some(_)) = (&token, current(identity, ex).await?) {
        form(identity, ex, csrf::Binding::Session(token)).await?;
        identity.signin.sessions.end_token(token).await?;
    }
    let gone = session_cookie(identity, "", Duration::ZERO);
    Ok(Page::redirect(&format!("{}/signin", prefix(identity))).cookie(gone))
}

#[cfg(test)]
mod tests {
    use super::*;

    const ORIGIN: &str = "https://tg.example";

    #[test]
    fn next_is_a_path_of_this_server_or_nothing() {
        for good in [
            "/auth/",
            "/auth/?from=test",
            "/auth/oauth/authorize?client_id=c&redirect_uri=https%3A%2F%2Fapp.example%2Fcb",
        ] {
            assert_eq!(same_origin_path(ORIGIN, good).as_deref(), Some(good), "{good}");
        }
        // Dot segments are resolved, and stay on the server.
        assert_eq!(same_origin_path(ORIGIN, "/a/../../b").as_deref(), Some("/b"));
        for bad in [
            "//evil.example",
            "///evil.example",
            "/\\evil.example",
            "/\\/evil.example",
            "\\\\evil.example",
            "/\t/evil.example",
            "/%09/evil.example",
            "/\n/evil.example",
            "/%0a/evil.example",
            "/\r/evil.example",
            "/ /evil.example",
            "/%2F%2Fevil.example",
            "/%2f/evil.example",
            "/%5Cevil.example",
            "/%5c%5cevil.example",
            "https:evil.example",
            "https://evil.example",
            "http:/evil.example",
            "javascript:alert(1)",
            "evil.example",
            "",
            "/\u{0}x",
            "/\u{2028}/evil.example",
            "/\u{a0}/evil.example",
            "/%E2%80%A8/evil.example",
        ] {
            assert_eq!(same_origin_path(ORIGIN, bad), None, "{bad:?}");
        }
    }

    #[tokio::test]
    async fn five_wrong_passwords_in_a_row_lock_the_e_mail_until_a_success_clears_them() {
        let dir = tempfile::tempdir().unwrap();
        let store: Arc<dyn Store> = Arc::new(crate::data::store::EmbeddedStore::open(dir.path()).unwrap());
        let feed = crate::data::changes::Feed::new();
        let guesses = Arc::new(crate::data::limiter::Guesses::local());
        let signin = SignIn::new(store, feed, &crate::config::Config::parse("{}").unwrap(), guesses);
        for _ in 0..FREE_FAILURES - 1 {
            signin.failed("a@example.com").await;
        }
        assert!(signin.locked("a@example.com").await.is_none());
        signin.succeeded("a@example.com").await;
        for _ in 0..FREE_FAILURES - 1 {
            signin.failed("a@example.com").await;
        }
        assert!(signin.locked("a@example.com").await.is_none(), "a success ended the streak");
        signin.failed("a@example.com").await;
        let wait = signin.locked("a@example.com").await.unwrap();
        assert!(wait > Duration::from_secs(25) && wait <= FIRST_LOCKOUT, "{wait:?}");
        assert!(signin.locked("b@example.com").await.is_none());
        signin.failed("a@example.com").await;
        assert!(signin.locked("a@example.com").await.unwrap() > FIRST_LOCKOUT, "doubled");
        assert_eq!(lockout(FREE_FAILURES + 10), Some(MAX_LOCKOUT));
        assert!(MAX_LOCKOUT < FORGET_AFTER, "a lockout ends before its streak is forgotten");
    }
}
