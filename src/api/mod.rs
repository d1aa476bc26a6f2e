//! The management REST API (`/v1` and `/api/v1`): the call a handler sees, dispatch through the
//! route table (`routes.rs`: the scope each operation needs, Decision 8), request parsing
//! helpers. One file per resource.

pub(crate) mod account;
pub(crate) mod admin;
pub(crate) mod alerts;
pub(crate) mod app_connections;
pub(crate) mod apps;
pub(crate) mod audit;
pub(crate) mod auth;
pub(crate) mod authority;
pub(crate) mod batch;
pub(crate) mod envelope;
pub(crate) mod gateway_guards;
pub(crate) mod gateways;
pub(crate) mod guard_callouts;
pub(crate) mod keys;
pub(crate) mod limits;
pub(crate) mod logs;
pub(crate) mod mfa;
pub(crate) mod oauth_clients;
pub(crate) mod openapi;
pub(crate) mod quotas;
pub(crate) mod routes;
pub(crate) mod service_accounts;
pub(crate) mod sessions;
pub(crate) mod team;
pub(crate) mod tool_changes;
mod tool_limits;
mod tool_overrides;
pub(crate) mod user;
pub(crate) mod webhooks;

use crate::edge::error::ApiError;
use crate::server::Server;
use bytes::Bytes;
use http::Method;
use serde::de::DeserializeOwned;
use serde_json::Value;
use std::net::IpAddr;
use std::sync::Arc;
use toolgate_filters::Principal;

pub use routes::ROUTES;
pub(crate) use routes::{route, Endpoint};

/// One management call, as a handler sees it.
pub struct Call<'a> {
    pub server: &'a Server,
    pub principal: Option<Arc<Principal>>,
    pub method: Method,
    pub id: Option<String>,
    /// The `{sub_id}` of a path under a record (a gateway's tool change).
    pub sub_id: Option<String>,
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
    /// The whole body as is, with its content type, instead of `data` (the audit export).
    pub bytes: Option<(&'static str, Vec<u8>)>,
    /// Members the write's audit entry adds to its `detail` (a gateway's guards before and
    /// after); never sent.
    pub audit: Option<Value>,
}

impl Reply {
    pub fn ok(data: Value) -> Reply {
        Reply { status: 200, data: Some(data), message: None, raw: false, bytes: None, audit: None }
    }
    pub fn created(data: Value) -> Reply {
        Reply { status: 201, data: Some(data), message: None, raw: false, bytes: None, audit: None }
    }
    pub fn message(msg: impl Into<String>) -> Reply {
        Reply { status: 200, data: None, message: Some(msg.into()), raw: false, bytes: None, audit: None }
    }
}

pub(crate) type ApiResult = Result<Reply, ApiError>;

impl Call<'_> {
    /// The authenticated caller; handlers of non-public endpoints always have one.
    pub fn who(&self) -> Result<&Principal, ApiError> {
        self.principal.as_deref().ok_or_else(|| ApiError::Unauthorized("missing credentials".into()))
    }

    pub fn id(&self) -> &str {
        self.id.as_deref().unwrap_or_default()
    }

    pub fn sub_id(&self) -> &str {
        self.sub_id.as_deref().unwrap_or_default()
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
    pub(crate) fn query_choice(&self, name: &str, allowed: &[&str]) -> Result<Option<String>, ApiError> {
        match self.query(name) {
            None => Ok(None),
            Some(v) if allowed.contains(&v) => Ok(Some(v.to_string())),
            Some(v) => Err(ApiError::validation(name, format!("`{v}` is not one of {}", allowed.join(", ")))),
        }
    }
}

/// Longest description, in characters: what a tenant stores is kept in memory and copied into
/// every list answer, so it is bounded.
pub(crate) const MAX_DESCRIPTION_CHARS: usize = 1000;

/// A free-text description: at most [`MAX_DESCRIPTION_CHARS`] characters; line breaks and tabs
/// are text, other control characters and hidden text are refused.
pub fn description(field: &str, text: &str) -> Result<(), ApiError> {
    if text.chars().count() > MAX_DESCRIPTION_CHARS {
        return Err(ApiError::validation(field, format!("must be at most {MAX_DESCRIPTION_CHARS} characters")));
    }
    if text.chars().any(|c| c.is_control() && !matches!(c, '\n' | '\r' | '\t')) {
        return Err(ApiError::validation(field, "must not contain control characters other than line breaks and tabs"));
    }
    crate::edge::forms::refuse_hidden_text(field, text)
}

/// Most entries in a `scopes` list (keys, service accounts).
pub(crate) const MAX_SCOPES: usize = 32;

/// Scopes a caller hands out (to a key or a service account): known, at least one, and no
/// escalation: never more than the caller holds.
pub(crate) fn granted_scopes(who: &Principal, names: &[String]) -> Result<toolgate_filters::ScopeSet, ApiError> {
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
pub(crate) fn pagination_json(page: u32, limit: u32, total: usize) -> Value {
    let pages = total.div_ceil(limit as usize).max(1);
    serde_json::json!({
        "page": page, "limit": limit, "total": total, "pages": pages,
        "has_next": (page as usize) < pages, "has_prev": page > 1,
    })
}

/// Slices one page of an already sorted list.
pub(crate) fn page_of<T>(items: Vec<T>, page: u32, limit: u32) -> Vec<T> {
    let start = (page as usize - 1).saturating_mul(limit as usize);
    items.into_iter().skip(start).take(limit as usize).collect()
}

/// Runs the route `call.method` names on `endpoint`, after its access rule: a method the path
/// does not serve is a 405, a caller the rule refuses a 401 or a 403. A write answered 2xx is
/// answered only once its audit entry is durable (`audit.rs`), and so is a protected action
/// refused at the MFA gate; a write refused with 403 or 409 is recorded without waiting.
pub(crate) async fn dispatch(endpoint: &Endpoint, call: Call<'_>) -> ApiResult {
    let route = endpoint.operation(&call.method)?;
    if !audit::Trail::records(route) {
        route.admit(&call)?;
        return (route.handler)(&call).await;
    }
    if let Err(e) = route.admit(&call) {
        audit::Trail::refused(&call, route, &e).await;
        return Err(e);
    }
    let trail = audit::Trail::before(&call, route).await;
    let reply = match (route.handler)(&call).await {
        Ok(reply) => reply,
        Err(e) => {
            audit::Trail::refused(&call, route, &e).await;
            return Err(e);
        }
    };
    trail.after(&call, route, &reply).await?;
    Ok(reply)
}

/// ISO 8601 with milliseconds, UTC (`2026-11-22T03:42:13.123Z`).
/// A path parameter as the handler reads it: percent-decoded.
pub(crate) fn path_param(s: &str) -> String {
    percent_encoding::percent_decode_str(s).decode_utf8_lossy().into_owned()
}

pub fn iso(t: &chrono::DateTime<chrono::Utc>) -> String {
    t.to_rfc3339_opts(chrono::SecondsFormat::Millis, true)
}
