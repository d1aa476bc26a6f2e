//! The management REST API (`/v1` and `/api/v1`): routing, the scope each endpoint needs
//! (Decision 8), request parsing helpers and the envelope. One file per resource.

pub mod account;
pub mod admin;
pub mod alerts;
pub mod apps;
pub mod auth;
pub mod authority;
pub mod batch;
pub mod envelope;
pub mod gateways;
pub mod keys;
pub mod limits;
pub mod logs;
pub mod mfa;
pub mod oauth_clients;
pub mod openapi;
pub mod quotas;
pub mod service_accounts;
pub mod sessions;
pub mod user;
pub mod webhooks;

use crate::edge::error::ApiError;
pub use crate::edge::forms::{display_name, parse_query, MAX_NAME_CHARS};
use crate::server::Server;
use bytes::Bytes;
use http::Method;
use serde::de::DeserializeOwned;
use serde_json::Value;
use std::net::IpAddr;
use std::sync::{Arc, OnceLock};
use toolgate_filters::{CredentialKind, Principal, Scope};

/// Every management endpoint (a path shape; methods are matched in [`route`]).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Endpoint {
    Gateways,
    Gateway,
    Apps,
    App,
    AppConnect,
    AppConnectCallback,
    AppConnection,
    AppTest,
    Sessions,
    Session,
    User,
    UserPassword,
    WebSessions,
    WebSession,
    ApiKeys,
    ApiKey,
    ApiKeyRotate,
    ApiKeyUsage,
    ServiceAccounts,
    ServiceAccountKeys,
    AccountSecurity,
    AccountWhitelist,
    AccountWhitelistEntry,
    RateLimit,
    RateLimitMetrics,
    Logs,
    LogAnalytics,
    GatewayMetrics,
    AppMetrics,
    AuthVerify,
    AuthDebug,
    MfaEnroll,
    MfaActivate,
    MfaVerify,
    Mfa,
    MfaReset,
    Webhooks,
    Webhook,
    WebhookDeliveries,
    WebhookRotate,
    WebhookTest,
    Alerts,
    Alert,
    Batch,
    OAuthClients,
    OAuthClient,
    AdminReload,
    OpenApi,
}

/// Path shapes, relative to the version prefix.
pub const PATHS: &[(&str, Endpoint)] = &[
    ("/gateways", Endpoint::Gateways),
    ("/gateways/{id}", Endpoint::Gateway),
    ("/apps", Endpoint::Apps),
    ("/apps/{id}", Endpoint::App),
    ("/apps/{id}/connect", Endpoint::AppConnect),
    ("/apps/{id}/connect/callback", Endpoint::AppConnectCallback),
    ("/apps/{id}/connection", Endpoint::AppConnection),
    ("/apps/{id}/test", Endpoint::AppTest),
    ("/sessions", Endpoint::Sessions),
    ("/sessions/{id}", Endpoint::Session),
    ("/user", Endpoint::User),
    ("/user/password", Endpoint::UserPassword),
    ("/user/web-sessions", Endpoint::WebSessions),
    ("/user/web-sessions/{id}", Endpoint::WebSession),
    ("/api-keys", Endpoint::ApiKeys),
    ("/api-keys/{id}", Endpoint::ApiKey),
    ("/api-keys/{id}/rotate", Endpoint::ApiKeyRotate),
    ("/api-keys/{id}/usage", Endpoint::ApiKeyUsage),
    ("/service-accounts", Endpoint::ServiceAccounts),
    ("/service-accounts/{id}/keys", Endpoint::ServiceAccountKeys),
    ("/account/security", Endpoint::AccountSecurity),
    ("/account/whitelist", Endpoint::AccountWhitelist),
    ("/account/whitelist/{id}", Endpoint::AccountWhitelistEntry),
    ("/rate-limit", Endpoint::RateLimit),
    ("/metrics/rate-limits", Endpoint::RateLimitMetrics),
    ("/logs", Endpoint::Logs),
    ("/logs/analytics", Endpoint::LogAnalytics),
    ("/metrics/gateway/{id}", Endpoint::GatewayMetrics),
    ("/metrics/app/{id}", Endpoint::AppMetrics),
    ("/auth/verify", Endpoint::AuthVerify),
    ("/auth/debug", Endpoint::AuthDebug),
    ("/auth/mfa/enroll", Endpoint::MfaEnroll),
    ("/auth/mfa/activate", Endpoint::MfaActivate),
    ("/auth/mfa/verify", Endpoint::MfaVerify),
    ("/auth/mfa", Endpoint::Mfa),
    ("/auth/mfa/reset", Endpoint::MfaReset),
    ("/webhooks", Endpoint::Webhooks),
    ("/webhooks/{id}", Endpoint::Webhook),
    ("/webhooks/{id}/deliveries", Endpoint::WebhookDeliveries),
    ("/webhooks/{id}/rotate-secret", Endpoint::WebhookRotate),
    ("/webhooks/{id}/test", Endpoint::WebhookTest),
    ("/alerts", Endpoint::Alerts),
    ("/alerts/{id}", Endpoint::Alert),
    ("/batch", Endpoint::Batch),
    ("/oauth/clients", Endpoint::OAuthClients),
    ("/oauth/clients/{id}", Endpoint::OAuthClient),
    ("/admin/reload", Endpoint::AdminReload),
    ("/openapi.json", Endpoint::OpenApi),
];

/// What a (endpoint, method) pair needs: a scope, any valid credential, a credential that can
/// do everything its user's role allows, or no credential at all (public).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Access {
    Public,
    AnyCredential,
    Scope(Scope),
    /// Every scope the caller's role allows (`admin` for an Owner or an Admin; a Developer's
    /// five or a Viewer's three `:read` for them): what changing one's own sign-in (the
    /// password, MFA) needs, since a password or a second factor signs in with the whole role.
    WholeRole,
}

/// The scope a credential lacks to do everything its role allows (`admin` first, when the
/// role allows it), or `None` when it holds them all.
pub fn missing_for_whole_role(who: &Principal) -> Option<Scope> {
    let allowed = who.role.allowed();
    if allowed.contains(Scope::Admin) {
        return (!who.scopes.contains(Scope::Admin)).then_some(Scope::Admin);
    }
    Scope::ALL.into_iter().find(|s| allowed.contains(*s) && !who.scopes.contains(*s))
}

/// The scope table (Decision 8). `Err` when the method is not served on that path.
pub fn access(endpoint: Endpoint, method: &Method) -> Result<Access, ApiError> {
    use Access::*;
    use Endpoint as E;
    let m = method.as_str();
    let a = match (endpoint, m) {
        (E::Gateways, "GET") | (E::Gateway, "GET") => Scope(crate::api::Scope::GatewaysRead),
        (E::Gateways, "POST") | (E::Gateway, "PATCH") => Scope(crate::api::Scope::GatewaysWrite),
        (E::Gateway, "DELETE") => Scope(crate::api::Scope::GatewaysDelete),
        (E::Apps, "GET") | (E::App, "GET") => Scope(crate::api::Scope::AppsRead),
        (E::AppConnect, "POST")
        | (E::AppConnectCallback, "POST")
        | (E::AppConnection, "DELETE")
        | (E::AppTest, "POST") => Scope(crate::api::Scope::AppsWrite),
        (E::Sessions, "GET") | (E::Session, "GET") | (E::Session, "DELETE") => Scope(crate::api::Scope::SessionsManage),
        (E::User, "GET") | (E::User, "PATCH") | (E::AuthVerify, "GET") => AnyCredential,
        // One's own sign-in: the handlers refuse credentials that speak for no person.
        (E::WebSessions, "GET") | (E::WebSession, "DELETE") => AnyCredential,
        // A password or a second factor signs in with the whole role: setting them needs a
        // credential that already holds it (a leaked narrow key must not become the user).
        (E::UserPassword, "PUT") => WholeRole,
        // Answering a challenge needs the code, not rights; changing MFA is account security.
        (E::MfaVerify, "POST") => AnyCredential,
        (E::MfaEnroll, "POST") | (E::MfaActivate, "POST") | (E::Mfa, "DELETE") => WholeRole,
        (E::MfaReset, "POST") => Scope(crate::api::Scope::Admin),
        (E::ApiKeys, "POST") | (E::ApiKey, "DELETE") | (E::ApiKeyRotate, "POST") | (E::ApiKeyUsage, "GET") => {
            Scope(crate::api::Scope::Admin)
        }
        (E::ServiceAccounts, "POST") | (E::ServiceAccountKeys, "POST") => Scope(crate::api::Scope::Admin),
        (E::AccountSecurity, "PATCH") | (E::AccountWhitelist, "POST") => Scope(crate::api::Scope::Admin),
        (E::AccountWhitelist, "GET") | (E::AccountWhitelistEntry, "DELETE") => Scope(crate::api::Scope::Admin),
        (E::RateLimit, "GET") | (E::AuthDebug, "GET") => AnyCredential,
        (E::RateLimitMetrics | E::Logs | E::LogAnalytics | E::GatewayMetrics | E::AppMetrics, "GET") => {
            Scope(crate::api::Scope::LogsRead)
        }
        (E::Webhooks, "GET" | "POST")
        | (E::Webhook, "PATCH" | "DELETE")
        | (E::WebhookDeliveries, "GET")
        | (E::WebhookRotate | E::WebhookTest, "POST") => Scope(crate::api::Scope::Admin),
        (E::Alerts, "GET" | "POST") | (E::Alert, "GET" | "DELETE") => Scope(crate::api::Scope::Admin),
        (E::OAuthClients, "GET" | "POST") | (E::OAuthClient, "GET" | "DELETE") => Scope(crate::api::Scope::Admin),
        // Each operation is checked as if sent alone.
        (E::Batch, "POST") => AnyCredential,
        // The operator's owner with `admin` (checked by the handler); to everyone else a 404.
        (E::AdminReload, "POST") => AnyCredential,
        (E::OpenApi, "GET") => Public,
        _ => return Err(ApiError::MethodNotAllowed(m.to_string())),
    };
    Ok(a)
}

fn router() -> &'static matchit::Router<Endpoint> {
    static ROUTER: OnceLock<matchit::Router<Endpoint>> = OnceLock::new();
    ROUTER.get_or_init(|| {
        let mut r = matchit::Router::new();
        for (path, ep) in PATHS {
            r.insert(*path, *ep).expect("route table is valid");
        }
        r
    })
}

/// Finds the endpoint and its `{id}` for a path relative to the version prefix.
pub fn route(path: &str) -> Option<(Endpoint, Option<&str>)> {
    let path = if path.len() > 1 { path.trim_end_matches('/') } else { path };
    let m = router().at(path).ok()?;
    Some((*m.value, m.params.get("id")))
}

/// One management call, as a handler sees it.
pub struct Call<'a> {
    pub server: &'a Server,
    pub principal: Option<Arc<Principal>>,
    pub method: Method,
    pub id: Option<String>,
    pub query: Vec<(String, String)>,
    pub body: Bytes,
    pub client_ip: IpAddr,
    /// The rate-limit multiplier of the caller's allowlist entry, if any.
    pub ip_multiplier: Option<f64>,
    pub headers: &'a http::HeaderMap,
}

/// A handler's success: HTTP status and the envelope's `data` (or a `message`).
pub struct Reply {
    pub status: u16,
    pub data: Option<Value>,
    pub message: Option<String>,
    /// Send `data` as the whole body, without the envelope (the OpenAPI document).
    pub raw: bool,
}

impl Reply {
    pub fn ok(data: Value) -> Reply {
        Reply { status: 200, data: Some(data), message: None, raw: false }
    }
    pub fn created(data: Value) -> Reply {
        Reply { status: 201, data: Some(data), message: None, raw: false }
    }
    pub fn message(msg: impl Into<String>) -> Reply {
        Reply { status: 200, data: None, message: Some(msg.into()), raw: false }
    }
}

pub type ApiResult = Result<Reply, ApiError>;

impl Call<'_> {
    /// The authenticated caller; handlers of non-public endpoints always have one.
    pub fn who(&self) -> Result<&Principal, ApiError> {
        self.principal.as_deref().ok_or_else(|| ApiError::Unauthorized("missing credentials".into()))
    }

    pub fn id(&self) -> &str {
        self.id.as_deref().unwrap_or_default()
    }

    pub fn query(&self, name: &str) -> Option<&str> {
        self.query.iter().find(|(k, _)| k == name).map(|(_, v)| v.as_str())
    }

    /// Parses the JSON body, naming the offending field on error.
    pub fn json<T: DeserializeOwned>(&self) -> Result<T, ApiError> {
        let body: &[u8] = if self.body.iter().all(u8::is_ascii_whitespace) { b"{}" } else { &self.body };
        let de = &mut serde_json::Deserializer::from_slice(body);
        serde_path_to_error::deserialize(de).map_err(|e| {
            let path = e.path().to_string();
            let inner = e.into_inner();
            let text = inner.to_string();
            // serde reports a missing field at its parent's path; name the field itself.
            let missing = text.strip_prefix("missing field `").and_then(|r| r.split_once('`')).map(|(f, _)| f);
            let field = match (path.as_str(), missing) {
                (".", Some(f)) => f.to_string(),
                (".", None) => "body".to_string(),
                (p, Some(f)) => format!("{p}.{f}"),
                (p, None) => p.to_string(),
            };
            let issue = match inner.classify() {
                serde_json::error::Category::Syntax | serde_json::error::Category::Eof => {
                    format!("body is not valid JSON: {inner}")
                }
                _ => inner.to_string(),
            };
            ApiError::validation(field, issue)
        })
    }

    /// `page` and `limit` per Decision 11.
    pub fn pagination(&self) -> Result<(u32, u32), ApiError> {
        let page = match self.query("page") {
            None => 1,
            Some(p) => p
                .parse::<u32>()
                .ok()
                .filter(|p| *p >= 1)
                .ok_or_else(|| ApiError::validation("page", "must be an integer >= 1"))?,
        };
        let limit = match self.query("limit") {
            None => 20,
            Some(l) => l
                .parse::<u32>()
                .ok()
                .filter(|l| (1..=100).contains(l))
                .ok_or_else(|| ApiError::validation("limit", "must be an integer between 1 and 100"))?,
        };
        Ok((page, limit))
    }

    /// A query parameter restricted to a set of values.
    pub fn query_choice(&self, name: &str, allowed: &[&str]) -> Result<Option<String>, ApiError> {
        match self.query(name) {
            None => Ok(None),
            Some(v) if allowed.contains(&v) => Ok(Some(v.to_string())),
            Some(v) => Err(ApiError::validation(name, format!("`{v}` is not one of {}", allowed.join(", ")))),
        }
    }
}

/// Longest description, in characters: what a tenant stores is kept in memory and copied into
/// every list answer, so it is bounded.
pub const MAX_DESCRIPTION_CHARS: usize = 1000;

/// A free-text description: at most [`MAX_DESCRIPTION_CHARS`] characters; line breaks and tabs
/// are text, other control characters are refused.
pub fn description(field: &str, text: &str) -> Result<(), ApiError> {
    if text.chars().count() > MAX_DESCRIPTION_CHARS {
        return Err(ApiError::validation(field, format!("must be at most {MAX_DESCRIPTION_CHARS} characters")));
    }
    if text.chars().any(|c| c.is_control() && !matches!(c, '\n' | '\r' | '\t')) {
        return Err(ApiError::validation(field, "must not contain control characters other than line breaks and tabs"));
    }
    Ok(())
}

/// Most entries in a `scopes` list (keys, service accounts).
pub const MAX_SCOPES: usize = 32;

/// Scopes a caller hands out (to a key or a service account): known, at least one, and no
/// escalation: never more than the caller holds.
pub fn granted_scopes(who: &Principal, names: &[String]) -> Result<toolgate_filters::ScopeSet, ApiError> {
    if names.is_empty() {
        return Err(ApiError::validation("scopes", "at least one scope is required"));
    }
    // There are a dozen scope names; a longer list only repeats them, and it is stored as sent.
    if names.len() > MAX_SCOPES {
        return Err(ApiError::validation("scopes", format!("at most {MAX_SCOPES} entries")));
    }
    let requested = toolgate_filters::ScopeSet::parse(names.iter().map(String::as_str))
        .map_err(|bad| ApiError::validation("scopes", format!("unknown scope `{bad}`")))?;
    if !requested.is_subset_of(who.scopes) {
        return Err(ApiError::validation("scopes", "cannot grant scopes the calling key does not hold"));
    }
    Ok(requested)
}

/// The pagination object.
pub fn pagination_json(page: u32, limit: u32, total: usize) -> Value {
    let pages = total.div_ceil(limit as usize).max(1);
    serde_json::json!({
        "page": page, "limit": limit, "total": total, "pages": pages,
        "has_next": (page as usize) < pages, "has_prev": page > 1,
    })
}

/// Slices one page of an already sorted list.
pub fn page_of<T>(items: Vec<T>, page: u32, limit: u32) -> Vec<T> {
    let start = (page as usize - 1).saturating_mul(limit as usize);
    items.into_iter().skip(start).take(limit as usize).collect()
}

/// Endpoints that make or change credentials. A third party acting for a user with an OAuth
/// access token may not call them, whatever scopes it was granted: a token that expires must not
/// mint a key that does not, nor take over the user's MFA.
fn makes_credentials(endpoint: Endpoint, method: &str) -> bool {
    use Endpoint as E;
    matches!(
        (endpoint, method),
        (E::ApiKeys | E::ApiKeyRotate | E::ServiceAccounts | E::ServiceAccountKeys | E::OAuthClients, "POST")
            | (E::MfaEnroll | E::MfaActivate | E::MfaReset, "POST")
            | (E::Mfa, "DELETE")
            | (E::UserPassword, "PUT")
    )
}

/// Runs the handler of `endpoint` for `call`, after the scope check.
pub async fn dispatch(endpoint: Endpoint, call: Call<'_>) -> ApiResult {
    use Endpoint as E;
    match access(endpoint, &call.method)? {
        Access::Public => {}
        Access::AnyCredential => {
            call.who()?;
        }
        Access::Scope(scope) => {
            if !call.who()?.scopes.contains(scope) {
                return Err(ApiError::InsufficientScope(scope.as_str()));
            }
        }
        Access::WholeRole => {
            if let Some(scope) = missing_for_whole_role(call.who()?) {
                return Err(ApiError::InsufficientScope(scope.as_str()));
            }
        }
    }
    let m = call.method.as_str();
    if makes_credentials(endpoint, m)
        && call.principal.as_deref().is_some_and(|p| matches!(p.credential, CredentialKind::OAuthToken { .. }))
    {
        return Err(ApiError::Forbidden(
            "a delegated OAuth token cannot make or change credentials (keys, service accounts, MFA, passwords, OAuth clients)"
                .into(),
        ));
    }
    match (endpoint, m) {
        (E::Gateways, "GET") => gateways::list(&call).await,
        (E::Gateways, "POST") => gateways::create(&call).await,
        (E::Gateway, "GET") => gateways::get(&call).await,
        (E::Gateway, "PATCH") => gateways::update(&call).await,
        (E::Gateway, "DELETE") => gateways::delete(&call).await,
        (E::Apps, "GET") => apps::list(&call).await,
        (E::App, "GET") => apps::get(&call).await,
        (E::AppConnect, "POST") => apps::connect(&call).await,
        (E::AppConnectCallback, "POST") => apps::connect_callback(&call).await,
        (E::AppConnection, "DELETE") => apps::disconnect(&call).await,
        (E::AppTest, "POST") => apps::test(&call).await,
        (E::Sessions, "GET") => sessions::list(&call).await,
        (E::Session, "GET") => sessions::get(&call).await,
        (E::Session, "DELETE") => sessions::delete(&call).await,
        (E::User, "GET") => user::get(&call).await,
        (E::User, "PATCH") => user::update(&call).await,
        (E::UserPassword, "PUT") => user::set_password(&call).await,
        (E::WebSessions, "GET") => user::web_sessions(&call).await,
        (E::WebSession, "DELETE") => user::end_web_session(&call).await,
        (E::ApiKeys, "POST") => keys::create(&call).await,
        (E::ApiKey, "DELETE") => keys::revoke(&call).await,
        (E::ApiKeyRotate, "POST") => keys::rotate(&call).await,
        (E::ApiKeyUsage, "GET") => keys::usage(&call).await,
        (E::ServiceAccounts, "POST") => service_accounts::create(&call).await,
        (E::ServiceAccountKeys, "POST") => service_accounts::create_key(&call).await,
        (E::AccountSecurity, "PATCH") => account::update_security(&call).await,
        (E::AccountWhitelist, "POST") => account::add_whitelist(&call).await,
        (E::AccountWhitelist, "GET") => account::list_whitelist(&call).await,
        (E::AccountWhitelistEntry, "DELETE") => account::delete_whitelist(&call).await,
        (E::RateLimit, "GET") => limits::status(&call).await,
        (E::RateLimitMetrics, "GET") => limits::report(&call).await,
        (E::Logs, "GET") => logs::list(&call).await,
        (E::LogAnalytics, "GET") => logs::analytics(&call).await,
        (E::GatewayMetrics, "GET") => logs::gateway_metrics(&call).await,
        (E::AppMetrics, "GET") => logs::app_metrics(&call).await,
        (E::AuthDebug, "GET") => auth::debug(&call).await,
        (E::AuthVerify, "GET") => auth::verify(&call).await,
        (E::MfaEnroll, "POST") => mfa::enroll(&call).await,
        (E::MfaActivate, "POST") => mfa::activate(&call).await,
        (E::MfaVerify, "POST") => mfa::verify(&call).await,
        (E::Mfa, "DELETE") => mfa::disable(&call).await,
        (E::MfaReset, "POST") => mfa::reset(&call).await,
        (E::Webhooks, "GET") => webhooks::list(&call).await,
        (E::Webhooks, "POST") => webhooks::create(&call).await,
        (E::Webhook, "PATCH") => webhooks::update(&call).await,
        (E::Webhook, "DELETE") => webhooks::delete(&call).await,
        (E::WebhookDeliveries, "GET") => webhooks::deliveries(&call).await,
        (E::WebhookRotate, "POST") => webhooks::rotate(&call).await,
        (E::WebhookTest, "POST") => webhooks::test(&call).await,
        (E::Alerts, "GET") => alerts::list(&call).await,
        (E::Alerts, "POST") => alerts::create(&call).await,
        (E::Alert, "GET") => alerts::get(&call).await,
        (E::Alert, "DELETE") => alerts::delete(&call).await,
        (E::Batch, "POST") => batch::run(&call).await,
        (E::OAuthClients, "GET") => oauth_clients::list(&call).await,
        (E::OAuthClients, "POST") => oauth_clients::create(&call).await,
        (E::OAuthClient, "GET") => oauth_clients::get(&call).await,
        (E::OAuthClient, "DELETE") => oauth_clients::delete(&call).await,
        (E::AdminReload, "POST") => admin::reload(&call).await,
        (E::OpenApi, "GET") => Ok(Reply { raw: true, ..Reply::ok(openapi::document()) }),
        _ => Err(ApiError::MethodNotAllowed(m.to_string())),
    }
}

/// ISO 8601 with milliseconds, UTC (`2026-11-22T03:42:13.123Z`).
pub fn iso(t: &chrono::DateTime<chrono::Utc>) -> String {
    t.to_rfc3339_opts(chrono::SecondsFormat::Millis, true)
}
