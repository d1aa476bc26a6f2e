//! The one place where errors become HTTP statuses and envelope codes (DESIGN Decision 7).
//! Handlers return [`ApiError`]; filters return a [`Rejection`]; both are written by
//! [`crate::edge::exchange`] (or as JSON-RPC errors by `crate::mcp::protocol`) through [`ApiError::status`] and [`ApiError::code`].
//! The authorization server's machine endpoints answer in RFC 6749's form instead: an
//! [`OAuthServerError`], whose status and body are mapped here too.

use serde_json::{json, Value};
use toolgate_filters::Rejection;

#[derive(Debug, thiserror::Error)]
pub enum ApiError {
    #[error("{issue}")]
    Validation { field: String, issue: String },
    #[error("{0}")]
    Unauthorized(String),
    #[error("this key lacks the `{0}` scope")]
    InsufficientScope(&'static str),
    #[error("{0}")]
    Forbidden(String),
    #[error("{0} not found")]
    NotFound(&'static str),
    #[error("no route for {0}")]
    NoRoute(String),
    #[error("method {0} is not allowed here")]
    MethodNotAllowed(String),
    #[error("{0}")]
    Conflict(String),
    /// An organisation holds as many of a resource as its tier allows (`limits.quotas`): 409
    /// `CONFLICT` (the request is fine; the account's state refuses it until something is
    /// deleted), with `details.quota` and `details.limit`.
    #[error("quota exceeded: tier `{tier}` allows {limit} {quota} per organisation (limits.quotas.{tier}.{quota})")]
    QuotaExceeded { quota: &'static str, limit: u32, tier: String },
    #[error("request body exceeds the limit of {0} bytes")]
    PayloadTooLarge(usize),
    #[error("{message}")]
    Rejected { status: u16, code: &'static str, message: String, retry_after: Option<u64> },
    #[error("{message}")]
    MfaRequired { challenge_id: String, message: String },
    #[error("{0}")]
    Unavailable(String),
    #[error("internal error")]
    Internal(String),
    /// A failure of toolgate's own (a value that would not serialise, a sealed secret that
    /// would not open, a task that panicked): 500 `INTERNAL_ERROR`, shown as "internal error";
    /// `context` and the cause are kept for the process log.
    #[error("internal error")]
    Failed {
        context: &'static str,
        #[source]
        source: Cause,
    },
    /// Something the request needs outside toolgate is not answering (an app's authorization
    /// server): 503 `UNAVAILABLE` with its words, and the cause kept.
    #[error("{context}: {source}")]
    UnavailableBecause {
        context: &'static str,
        #[source]
        source: Cause,
    },
}

/// The cause an error keeps (`#[source]`), so the process log shows the chain.
pub(crate) type Cause = Box<dyn std::error::Error + Send + Sync>;

/// `e` and each of its causes, joined with ": ": what the process log writes of an error whose
/// `Display` is its own words alone.
pub(crate) fn chain(e: &(dyn std::error::Error + 'static)) -> String {
    let mut out = e.to_string();
    let mut cause = e.source();
    while let Some(c) = cause {
        let words = c.to_string();
        // A `Display` that already ends with its cause's words says it once.
        if !out.ends_with(&words) {
            out.push_str(": ");
            out.push_str(&words);
        }
        cause = c.source();
    }
    out
}

impl ApiError {
    pub fn validation(field: impl Into<String>, issue: impl Into<String>) -> Self {
        ApiError::Validation { field: field.into(), issue: issue.into() }
    }

    /// A failure of toolgate's own while `context`, its cause kept ([`ApiError::Failed`]).
    pub fn failed(context: &'static str, cause: impl Into<Cause>) -> Self {
        ApiError::Failed { context, source: cause.into() }
    }

    pub fn status(&self) -> u16 {
        match self {
            ApiError::Validation { .. } => 400,
            ApiError::Unauthorized(_) => 401,
            ApiError::InsufficientScope(_) | ApiError::Forbidden(_) | ApiError::MfaRequired { .. } => 403,
            ApiError::NotFound(_) | ApiError::NoRoute(_) => 404,
            ApiError::MethodNotAllowed(_) => 405,
            ApiError::Conflict(_) | ApiError::QuotaExceeded { .. } => 409,
            ApiError::PayloadTooLarge(_) => 413,
            ApiError::Rejected { status, .. } => *status,
            ApiError::Unavailable(_) | ApiError::UnavailableBecause { .. } => 503,
            ApiError::Internal(_) | ApiError::Failed { .. } => 500,
        }
    }

    pub fn code(&self) -> &'static str {
        match self {
            ApiError::Validation { .. } => "VALIDATION_ERROR",
            ApiError::Unauthorized(_) => "UNAUTHORIZED",
            ApiError::InsufficientScope(_) => "INSUFFICIENT_SCOPE",
            ApiError::Forbidden(_) => "FORBIDDEN",
            ApiError::NotFound(_) | ApiError::NoRoute(_) => "NOT_FOUND",
            ApiError::MethodNotAllowed(_) => "METHOD_NOT_ALLOWED",
            ApiError::Conflict(_) | ApiError::QuotaExceeded { .. } => "CONFLICT",
            ApiError::PayloadTooLarge(_) => "PAYLOAD_TOO_LARGE",
            ApiError::Rejected { code, .. } => code,
            ApiError::MfaRequired { .. } => "MFA_REQUIRED",
            ApiError::Unavailable(_) | ApiError::UnavailableBecause { .. } => "UNAVAILABLE",
            ApiError::Internal(_) | ApiError::Failed { .. } => "INTERNAL_ERROR",
        }
    }

    /// Seconds until a retry can succeed: a rate-limit refusal's `Retry-After`.
    pub fn retry_after(&self) -> Option<u64> {
        match self {
            ApiError::Rejected { retry_after, .. } => *retry_after,
            _ => None,
        }
    }

    /// The envelope's `error` object.
    pub(crate) fn to_error_object(&self) -> Value {
        let mut obj = json!({ "code": self.code(), "message": self.to_string(), "details": {} });
        match self {
            ApiError::Validation { field, issue } => {
                obj["details"] = json!({ "field": field, "issue": issue });
            }
            ApiError::QuotaExceeded { quota, limit, .. } => {
                obj["details"] = json!({ "quota": quota, "limit": limit });
            }
            ApiError::Rejected { retry_after: Some(r), .. } => {
                obj["retry_after"] = json!(r);
            }
            ApiError::MfaRequired { challenge_id, .. } => {
                obj["challenge_id"] = json!(challenge_id);
            }
            _ => {}
        }
        obj
    }
}

impl ApiError {
    /// 429 after too many `what` (wrong codes, wrong passwords, ...), retry after `wait`.
    pub(crate) fn too_many(what: &str, wait: std::time::Duration) -> ApiError {
        let secs = wait.as_secs().max(1);
        ApiError::Rejected {
            status: 429,
            code: "RATE_LIMITED",
            message: format!("too many {what}; try again in {secs} s"),
            retry_after: Some(secs),
        }
    }
}

impl From<Rejection> for ApiError {
    fn from(r: Rejection) -> Self {
        ApiError::Rejected {
            status: r.status,
            code: r.code,
            message: r.message.into_owned(),
            retry_after: r.retry_after,
        }
    }
}

impl From<crate::data::store::StoreError> for ApiError {
    fn from(e: crate::data::store::StoreError) -> Self {
        if let crate::data::store::StoreError::Newer { .. } = e {
            // Another instance (upgraded) serves and changes it: retry there.
            return ApiError::Unavailable(format!("{e}: retry on an upgraded instance"));
        }
        tracing::error!(error = %chain(&e), "store error");
        ApiError::Unavailable("storage is unavailable, try again".into())
    }
}

impl From<crate::data::state::NewUserError> for ApiError {
    fn from(e: crate::data::state::NewUserError) -> Self {
        use crate::data::state::NewUserError;
        match e {
            NewUserError::EmailElsewhere => ApiError::Conflict(e.to_string()),
            NewUserError::Store(e) => e.into(),
        }
    }
}

/// An error of toolgate's OAuth authorization server, in RFC 6749's words (section 5.2 for the token endpoint,
/// 4.1.2.1 for the authorization endpoint's redirect). On the wire (`identity::oauth_server`'s
/// endpoints) it is [`OAuthServerError::status`] and [`OAuthServerError::to_body`].
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("{code}: {description}")]
pub(crate) struct OAuthServerError {
    pub code: &'static str,
    pub description: String,
    /// Seconds to wait before retrying (`Retry-After`), for `temporarily_unavailable` and
    /// `rate_limited`.
    pub retry_after: Option<u64>,
    /// The status when not the code's own: that of the [`ApiError`] it stands for (a body that
    /// was too large or too slow, a refusal at the edge).
    status: Option<u16>,
}

impl OAuthServerError {
    pub(crate) fn new(code: &'static str, description: impl Into<String>) -> OAuthServerError {
        OAuthServerError { code, description: description.into(), retry_after: None, status: None }
    }

    pub(crate) fn with_retry_after(mut self, secs: u64) -> OAuthServerError {
        self.retry_after = Some(secs);
        self
    }

    pub(crate) fn invalid_grant(description: impl Into<String>) -> OAuthServerError {
        OAuthServerError::new("invalid_grant", description)
    }

    /// A request body that could not be read: `invalid_request` with the read's status (413,
    /// 408, 400).
    pub(crate) fn body(e: ApiError) -> OAuthServerError {
        OAuthServerError { status: Some(e.status()), ..OAuthServerError::new("invalid_request", e.to_string()) }
    }

    /// A refusal at the edge (the address's bucket): `rate_limited`, with the refusal's status
    /// and `Retry-After`.
    pub(crate) fn refused(e: &ApiError) -> OAuthServerError {
        OAuthServerError {
            status: Some(e.status()),
            retry_after: e.retry_after(),
            ..OAuthServerError::new("rate_limited", e.to_string())
        }
    }

    /// The endpoint's status: 401 for a client that failed to authenticate, 429 and 503 for a
    /// retry later, 500 for the server's own failure, 400 for the rest.
    pub(crate) fn status(&self) -> u16 {
        if let Some(s) = self.status {
            return s;
        }
        match self.code {
            "invalid_client" => 401,
            "rate_limited" => 429,
            "temporarily_unavailable" => 503,
            "server_error" => 500,
            _ => 400,
        }
    }

    /// The body (RFC 6749 section 5.2): `error`, `error_description`, and `retry_after` when
    /// there is one.
    pub(crate) fn to_body(&self) -> Value {
        let mut body = json!({ "error": self.code, "error_description": self.description });
        if let Some(secs) = self.retry_after {
            body["retry_after"] = json!(secs);
        }
        body
    }
}

impl From<crate::data::store::StoreError> for OAuthServerError {
    fn from(e: crate::data::store::StoreError) -> Self {
        tracing::error!(error = %chain(&e), "authorization server: store failed");
        OAuthServerError::new("server_error", "the server could not complete the request")
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn oauth_errors_map_to_their_status_and_rfc_6749_body() {
        for (code, status) in [
            ("invalid_client", 401),
            ("rate_limited", 429),
            ("temporarily_unavailable", 503),
            ("server_error", 500),
            ("invalid_grant", 400),
            ("invalid_request", 400),
        ] {
            assert_eq!(OAuthServerError::new(code, "why").status(), status, "{code}");
        }
        let busy = OAuthServerError::new("temporarily_unavailable", "later").with_retry_after(3);
        assert_eq!(
            busy.to_body(),
            json!({ "error": "temporarily_unavailable", "error_description": "later", "retry_after": 3 })
        );
        assert_eq!(
            OAuthServerError::invalid_grant("no").to_body(),
            json!({ "error": "invalid_grant", "error_description": "no" })
        );
        let unread = OAuthServerError::body(ApiError::PayloadTooLarge(10));
        assert_eq!((unread.code, unread.status()), ("invalid_request", 413));
        let refused = OAuthServerError::refused(&ApiError::too_many("requests", std::time::Duration::from_secs(7)));
        assert_eq!((refused.code, refused.status(), refused.retry_after), ("rate_limited", 429, Some(7)));
    }

    #[test]
    fn a_store_failure_is_a_server_error_to_oauth_and_unavailable_to_the_api() {
        let failed = || crate::data::store::StoreError::Backend("disk gone".into());
        let oauth = OAuthServerError::from(failed());
        assert_eq!((oauth.code, oauth.status()), ("server_error", 500));
        assert!(!oauth.description.contains("disk gone"), "the backend's words stay in the log: {oauth:?}");
        let api = ApiError::from(failed());
        assert_eq!((api.status(), api.code()), (503, "UNAVAILABLE"));
        assert!(!api.to_string().contains("disk gone"), "{api:?}");
    }

    /// The errors that wrapped another kept it as their cause (they once held only its words),
    /// so the process log writes the chain down to the parser's or the driver's own error,
    /// while the answer says no more than before.
    #[test]
    fn wrapped_errors_keep_their_cause_and_the_log_shows_the_chain() {
        use std::error::Error as _;
        let not_json = serde_json::from_str::<Value>("{").unwrap_err();
        let words = not_json.to_string();
        let api = ApiError::failed("showing a gateway", not_json);
        assert_eq!((api.status(), api.code(), api.to_string().as_str()), (500, "INTERNAL_ERROR", "internal error"));
        assert!(api.source().is_some_and(|c| c.is::<serde_json::Error>()), "{api:?}");
        assert_eq!(chain(&api), format!("internal error: {words}"));

        let redis = redis::RedisError::from((redis::ErrorKind::Io, "connection refused"));
        let store = crate::data::store::StoreError::BackendFailed { context: "redis", source: redis.into() };
        assert!(store.source().is_some_and(|c| c.is::<redis::RedisError>()), "{store:?}");
        assert!(
            chain(&store).starts_with("storage backend error: redis: ") && chain(&store).contains("connection refused")
        );
        let api = ApiError::from(store);
        assert_eq!((api.status(), api.code()), (503, "UNAVAILABLE"), "{api:?}");

        let unparsable = crate::outbound::egress::Egress::default().check_url("not a url").unwrap_err();
        assert!(unparsable.source().is_some_and(|c| c.is::<url::ParseError>()), "{unparsable:?}");
        let audit = crate::data::audit::AuditError::Json("entry", serde_json::from_str::<Value>("[").unwrap_err());
        assert!(audit.source().is_some_and(|c| c.is::<serde_json::Error>()), "{audit:?}");
    }

    /// An error type's name says which error it is: no two error types of `src/` share one (an
    /// `OAuthError` of the authorization server beside one of the apps' OAuth client was
    /// each read as the other), so a `use` never brings in the wrong one.
    #[test]
    fn no_two_error_types_share_a_name() {
        let mut names = std::collections::BTreeMap::<String, Vec<String>>::new();
        let mut todo = vec![std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("src")];
        while let Some(dir) = todo.pop() {
            for entry in std::fs::read_dir(&dir).unwrap() {
                let path = entry.unwrap().path();
                if path.is_dir() {
                    todo.push(path);
                    continue;
                }
                let Ok(text) = std::fs::read_to_string(&path) else { continue };
                for line in text.lines() {
                    let Some(rest) = line
                        .trim_start()
                        .strip_prefix("pub ")
                        .or_else(|| line.trim_start().strip_prefix("pub(crate) "))
                    else {
                        continue;
                    };
                    let Some(rest) = rest.strip_prefix("enum ").or_else(|| rest.strip_prefix("struct ")) else {
                        continue;
                    };
                    let name: String = rest.chars().take_while(|c| c.is_alphanumeric() || *c == '_').collect();
                    if name.ends_with("Error") {
                        names.entry(name).or_default().push(path.display().to_string());
                    }
                }
            }
        }
        assert!(names.contains_key("ApiError") && names.contains_key("OAuthServerError"), "{names:?}");
        let twice: Vec<_> = names.iter().filter(|(_, files)| files.len() > 1).collect();
        assert!(twice.is_empty(), "error types named alike: {twice:?}");
    }
}
