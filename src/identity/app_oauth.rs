//! OAuth 2.0 for the apps that require it (`auth_types: [oauth]`), toolgate being the client
//! of the app's authorization server (RFC 6749 authorization code grant with PKCE, RFC 7636).
//!
//! The flow: `POST /v1/apps/{id}/connect` makes a PKCE verifier and a state, keeps the
//! verifier sealed in the pending connection and answers the authorization URL; the user
//! signs in at the provider, which sends the browser to the `redirect_uri` the caller gave
//! with `code` and `state`; the caller's page hands both to
//! `POST /v1/apps/{id}/connect/callback`, which checks the state, exchanges the code here and
//! keeps the tokens sealed. Calls to the app carry the access token as a bearer credential; it
//! is refreshed ([`refresh`]) before it expires and when the app answers 401, one refresh at a
//! time per connection, and a refresh the provider refuses marks the connection `error`.
//!
//! Where the authorization server is: `oauth.authorize_url` and `oauth.token_url` when the
//! operator gives them; otherwise discovered as the MCP authorization specification has a
//! client do ([`discover`]): the app's protected-resource metadata (RFC 9728), found through the
//! `resource_metadata` of the `WWW-Authenticate` challenge the app answers an unauthenticated
//! request with, else at its well-known URIs; then the first authorization server it names, whose
//! metadata (RFC 8414, or OpenID Connect discovery) must name itself as issuer and support PKCE
//! with S256. Discovered endpoints are kept for an hour; they must be https (http only in
//! `environment: development`). The `resource` the metadata names is sent with the
//! authorization and token requests (RFC 8707), so that tokens are minted for that app.
//!
//! Decisions: the token endpoint is the operator's configuration or the metadata of an app the
//! operator chose, so it is reached as given (no egress filtering), with no redirects followed
//! and a 10 s time-out; the client authenticates with `client_secret_post` when a secret is
//! configured, and by PKCE alone otherwise (a public client).

use crate::base::well_known;
use crate::config::{AppConfig, AppUpstream, OAuthConfig, OAuthEndpoints};
use base64::Engine;
use dashmap::DashMap;
use serde::{Deserialize, Serialize};
use sha2::{Digest, Sha256};
use std::sync::{Arc, OnceLock};
use std::time::{Duration, Instant};

/// How long before its expiry an access token is renewed: at most this, at most half its life.
const RENEW_AHEAD_SECS: i64 = 30;

/// Why toolgate, as an OAuth client of an app, holds no usable token for it (the app's
/// authorization server unreachable, refusing, or not discoverable): named for the app side, so
/// it is never taken for the authorization server's own answers (`edge::error::OAuthServerError`).
#[derive(Debug, Clone, thiserror::Error)]
pub enum AppOAuthError {
    #[error("the app's token endpoint cannot be reached: {0}")]
    Unreachable(String),
    #[error("the app's token endpoint refused: {error}{}", .description.as_deref().map(|d| format!(" ({d})")).unwrap_or_default())]
    Refused { error: String, description: Option<String> },
    #[error("the app's token endpoint answered without a usable token: {0}")]
    Malformed(String),
    #[error("the access token expired and the provider gave no refresh token: connect the app again")]
    NoRefreshToken,
    #[error("the app's authorization server could not be discovered: {0}")]
    Discovery(String),
}

/// How long discovered endpoints are used before they are looked up again.
const DISCOVERY_TTL: Duration = Duration::from_secs(3600);

type Discovered = DashMap<String, (Instant, Arc<OAuthEndpoints>)>;

/// Discovered endpoints by app URL.
fn discovered() -> &'static Discovered {
    static CACHE: OnceLock<Discovered> = OnceLock::new();
    CACHE.get_or_init(DashMap::new)
}

/// Where an app's authorization server takes the user and the code: as configured, or
/// discovered from the app (see the module's comment). `allow_http`: discovered endpoints may be
/// plain http (development).
pub(crate) async fn endpoints(app: &AppConfig, allow_http: bool) -> Result<Arc<OAuthEndpoints>, AppOAuthError> {
    let oauth = app.oauth.as_ref().ok_or_else(|| discovery_error("the app has no oauth settings"))?;
    if let Some(e) = &oauth.endpoints {
        return Ok(Arc::new(e.clone()));
    }
    let AppUpstream::Url(app_url) = &app.upstream else {
        return Err(discovery_error("only an app with a url can be discovered"));
    };
    if let Some(hit) = discovered().get(app_url).filter(|e| e.0.elapsed() < DISCOVERY_TTL) {
        return Ok(hit.1.clone());
    }
    let found = Arc::new(discover(app_url, allow_http).await?);
    tracing::info!(
        app = app.id,
        authorize_url = found.authorize_url,
        token_url = found.token_url,
        "discovered the app's authorization server"
    );
    discovered().insert(app_url.clone(), (Instant::now(), found.clone()));
    Ok(found)
}

/// The authorization URL the user is sent to: the code grant with PKCE (S256).
pub(crate) fn authorization_url(
    oauth: &OAuthConfig,
    endpoints: &OAuthEndpoints,
    redirect_uri: &str,
    state: &str,
    challenge: &str,
) -> Result<String, AppOAuthError> {
    let mut url = url::Url::parse(&endpoints.authorize_url).map_err(discovery_error)?;
    {
        let mut q = url.query_pairs_mut();
        q.append_pair("response_type", "code")
            .append_pair("client_id", &oauth.client_id)
            .append_pair("redirect_uri", redirect_uri)
            .append_pair("scope", &oauth.scopes.join(" "))
            .append_pair("state", state)
            .append_pair("code_challenge", challenge)
            .append_pair("code_challenge_method", "S256");
        if let Some(resource) = &endpoints.resource {
            q.append_pair("resource", resource);
        }
    }
    Ok(url.into())
}

/// RFC 9728's metadata of a protected resource: the part toolgate reads.
#[derive(Deserialize)]
struct ResourceMetadata {
    resource: Option<String>,
    #[serde(default)]
    authorization_servers: Vec<String>,
}

/// RFC 8414's metadata of an authorization server: the part toolgate reads.
#[derive(Deserialize)]
struct ServerMetadata {
    issuer: Option<String>,
    authorization_endpoint: Option<String>,
    token_endpoint: Option<String>,
    revocation_endpoint: Option<String>,
    #[serde(default)]
    code_challenge_methods_supported: Vec<String>,
}

fn discovery_error(what: impl std::fmt::Display) -> AppOAuthError {
    AppOAuthError::Discovery(what.to_string())
}

/// An http(s) URL, https unless `allow_http`.
fn usable(url: &str, allow_http: bool, what: &str) -> Result<url::Url, AppOAuthError> {
    let u = url::Url::parse(url).map_err(|e| discovery_error(format!("{what} `{url}`: {e}")))?;
    match u.scheme() {
        "https" => Ok(u),
        "http" if allow_http => Ok(u),
        _ => Err(discovery_error(format!("{what} `{url}` is not https (http only in environment: development)"))),
    }
}

/// The `resource_metadata` parameter of a `WWW-Authenticate: Bearer` challenge, if any.
fn resource_metadata_of(challenge: &str) -> Option<String> {
    let at = challenge.find("resource_metadata=")? + "resource_metadata=".len();
    let rest = &challenge[at..];
    let value = match rest.strip_prefix('"') {
        Some(quoted) => &quoted[..quoted.find('"')?],
        None => rest.split([',', ' ']).next()?,
    };
    (!value.is_empty()).then(|| value.to_string())
}

/// The first of `urls` that answers 200 with JSON of type `T`.
async fn first_json<T: serde::de::DeserializeOwned>(urls: &[String], what: &str) -> Result<T, AppOAuthError> {
    let mut tried = Vec::new();
    for url in urls {
        match http().get(url).header("Accept", "application/json").send().await {
            Ok(r) if r.status().is_success() => match r.json::<T>().await {
                Ok(v) => return Ok(v),
                Err(_) => tried.push(format!("{url}: not the expected JSON")),
            },
            Ok(r) => tried.push(format!("{url}: HTTP {}", r.status().as_u16())),
            Err(e) => tried.push(format!("{url}: {}", e.without_url())),
        }
    }
    Err(discovery_error(format!("no {what} ({})", tried.join("; "))))
}

/// Finds the app's authorization server, as the MCP authorization specification has a client do.
async fn discover(app_url: &str, allow_http: bool) -> Result<OAuthEndpoints, AppOAuthError> {
    let app = url::Url::parse(app_url).map_err(discovery_error)?;
    // An unauthenticated request: the app's 401 says where its metadata is.
    let probe = serde_json::json!({
        "jsonrpc": "2.0", "id": 0, "method": "initialize",
        "params": { "protocolVersion": "2025-11-25", "capabilities": {},
                    "clientInfo": { "name": "toolgate", "version": env!("CARGO_PKG_VERSION") } },
    });
    let mut candidates = Vec::new();
    let answer = http().post(app_url).header("Accept", "application/json, text/event-stream").json(&probe).send().await;
    if let Ok(r) = answer {
        let challenge = r.headers().get("www-authenticate").and_then(|v| v.to_str().ok());
        if let Some(url) = challenge.and_then(resource_metadata_of) {
            usable(&url, allow_http, "resource_metadata")?;
            candidates.push(url);
        }
    }
    candidates.extend(well_known::urls(&app, "oauth-protected-resource"));
    let resource: ResourceMetadata = first_json(&candidates, "protected-resource metadata").await?;
    // RFC 9728 section 3.3: the metadata is about this resource (its origin, at least).
    if let Some(r) = &resource.resource {
        let u = url::Url::parse(r).map_err(|e| discovery_error(format!("resource `{r}`: {e}")))?;
        if u.origin() != app.origin() {
            return Err(discovery_error(format!("the metadata is about `{r}`, not this app (`{app_url}`)")));
        }
    }
    let issuer = resource
        .authorization_servers
        .first()
        .ok_or_else(|| discovery_error("the protected-resource metadata names no authorization server"))?;
    usable(issuer, allow_http, "authorization server")?;
    let candidates = well_known::authorization_server_metadata(issuer);
    let meta: ServerMetadata = first_json(&candidates, "authorization-server metadata").await?;
    // RFC 8414 section 3.3: the issuer the metadata names is the one asked about.
    let same = |a: &str, b: &str| a.trim_end_matches('/') == b.trim_end_matches('/');
    if !meta.issuer.as_deref().is_some_and(|i| same(i, issuer)) {
        return Err(discovery_error(format!("the metadata's issuer {:?} is not `{issuer}`", meta.issuer)));
    }
    if !meta.code_challenge_methods_supported.iter().any(|m| m == "S256") {
        return Err(discovery_error(format!("`{issuer}` does not announce PKCE with S256")));
    }
    let endpoint = |v: Option<String>, what: &str| -> Result<String, AppOAuthError> {
        let v = v.ok_or_else(|| discovery_error(format!("the metadata of `{issuer}` has no {what}")))?;
        usable(&v, allow_http, what)?;
        Ok(v)
    };
    Ok(OAuthEndpoints {
        authorize_url: endpoint(meta.authorization_endpoint, "authorization_endpoint")?,
        token_url: endpoint(meta.token_endpoint, "token_endpoint")?,
        resource: resource.resource,
        // Optional: an unusable one is as none (the connection works; its tokens cannot be
        // revoked when it ends).
        revocation_url: meta.revocation_endpoint.filter(|u| usable(u, allow_http, "revocation_endpoint").is_ok()),
    })
}

/// A PKCE pair: the verifier kept sealed, the S256 challenge sent in the authorization URL.
pub(crate) struct Pkce {
    pub verifier: String,
    pub challenge: String,
}

pub(crate) fn pkce() -> Pkce {
    // 64 characters of the unreserved alphabet: 380 bits, within RFC 7636's 43-128.
    let verifier = crate::base::secrets::random_alnum(64);
    let challenge = pkce_challenge(&verifier);
    Pkce { verifier, challenge }
}

/// The S256 challenge of a PKCE verifier (RFC 7636 section 4.2): what a client sends, and what
/// toolgate's own authorization server checks a verifier against.
pub(crate) fn pkce_challenge(verifier: &str) -> String {
    base64::engine::general_purpose::URL_SAFE_NO_PAD.encode(Sha256::digest(verifier.as_bytes()))
}

/// What a pending OAuth connection keeps sealed until the code comes back.
#[derive(Serialize, Deserialize)]
pub(crate) struct Pending {
    pub pkce_verifier: String,
}

/// What a connected OAuth connection keeps sealed.
#[derive(Debug, Clone, Serialize, Deserialize)]
pub(crate) struct Tokens {
    pub access_token: String,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub refresh_token: Option<String>,
    /// Unix seconds; none when the provider did not say (then only a 401 renews it).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub expires_at: Option<i64>,
    /// Unix seconds from which it is renewed before use.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub renew_at: Option<i64>,
}

impl Tokens {
    /// Whether the token is due for renewal at `now` (Unix seconds).
    pub(crate) fn due(&self, now: i64) -> bool {
        self.renew_at.is_some_and(|at| now >= at)
    }
}

/// The token endpoint's answer (RFC 6749 section 5.1), and its error (section 5.2).
#[derive(Deserialize)]
struct TokenAnswer {
    access_token: Option<String>,
    token_type: Option<String>,
    expires_in: Option<i64>,
    refresh_token: Option<String>,
    error: Option<String>,
    error_description: Option<String>,
}

/// A token endpoint's successful answer: an access token, with what came beside it.
pub(crate) struct TokenIssued {
    pub(crate) access_token: String,
    pub(crate) token_type: Option<String>,
    pub(crate) expires_in: Option<i64>,
    pub(crate) refresh_token: Option<String>,
}

/// Reads a token endpoint's answer (the code grant's, a renewal's, a token exchange's): the
/// provider's refusal as it named it (`error`, RFC 6749 section 5.2), an answer that is not
/// JSON or not a success, or the issued token, which must not be empty.
pub(crate) fn token_answer(status: reqwest::StatusCode, body: &[u8]) -> Result<TokenIssued, AppOAuthError> {
    let answer: TokenAnswer = serde_json::from_slice(body)
        .map_err(|_| AppOAuthError::Malformed(format!("HTTP {status}, not a JSON token response")))?;
    if let Some(error) = answer.error {
        return Err(AppOAuthError::Refused { error, description: answer.error_description });
    }
    if !status.is_success() {
        return Err(AppOAuthError::Malformed(format!("HTTP {status}")));
    }
    let Some(access_token) = answer.access_token.filter(|t| !t.is_empty()) else {
        return Err(AppOAuthError::Malformed("no access_token".into()));
    };
    Ok(TokenIssued {
        access_token,
        token_type: answer.token_type,
        expires_in: answer.expires_in,
        refresh_token: answer.refresh_token,
    })
}

/// A form sent to one of an app's OAuth endpoints (token, revocation), asking for JSON: the
/// answer's status and body, or the endpoint unreachable (the error without its URL).
pub(crate) async fn send_form(
    request: reqwest::RequestBuilder,
    form: &[(&str, &str)],
) -> Result<(reqwest::StatusCode, bytes::Bytes), AppOAuthError> {
    let unreachable = |e: reqwest::Error| AppOAuthError::Unreachable(e.without_url().to_string());
    let response = request.header("Accept", "application/json").form(form).send().await.map_err(unreachable)?;
    let status = response.status();
    Ok((status, response.bytes().await.map_err(unreachable)?))
}

/// The client of OAuth and OpenID requests (apps' authorization servers, web sign-in's providers):
/// a short time-out, and redirects not followed (a token endpoint that redirects is refused).
pub(crate) fn http() -> &'static reqwest::Client {
    static CLIENT: OnceLock<reqwest::Client> = OnceLock::new();
    CLIENT.get_or_init(|| {
        crate::outbound::client::builder()
            .timeout(Duration::from_secs(10))
            .build()
            .expect("an HTTP client with default TLS settings")
    })
}

/// Exchanges an authorization code (with the PKCE verifier it was asked with).
pub(crate) async fn exchange_code(
    app: &AppConfig,
    allow_http: bool,
    code: &str,
    redirect_uri: &str,
    verifier: &str,
) -> Result<Tokens, AppOAuthError> {
    let form = [
        ("grant_type", "authorization_code"),
        ("code", code),
        ("redirect_uri", redirect_uri),
        ("code_verifier", verifier),
    ];
    token_request(app, allow_http, &form, None).await
}

/// Renews `tokens` with their refresh token; the provider may rotate it (else it is kept).
pub(crate) async fn refresh(app: &AppConfig, allow_http: bool, tokens: &Tokens) -> Result<Tokens, AppOAuthError> {
    let Some(refresh_token) = tokens.refresh_token.as_deref() else { return Err(AppOAuthError::NoRefreshToken) };
    let form = [("grant_type", "refresh_token"), ("refresh_token", refresh_token)];
    token_request(app, allow_http, &form, Some(refresh_token)).await
}

/// A request to the app's token endpoint (found by [`endpoints`]).
async fn token_request(
    app: &AppConfig,
    allow_http: bool,
    grant: &[(&str, &str)],
    kept_refresh_token: Option<&str>,
) -> Result<Tokens, AppOAuthError> {
    let oauth = app.oauth.as_ref().ok_or_else(|| discovery_error("the app has no oauth settings"))?;
    let endpoints = endpoints(app, allow_http).await?;
    let mut form: Vec<(&str, &str)> = grant.to_vec();
    form.push(("client_id", &oauth.client_id));
    if let Some(secret) = &oauth.client_secret {
        form.push(("client_secret", secret));
    }
    if let Some(resource) = &endpoints.resource {
        form.push(("resource", resource));
    }
    let (status, body) = send_form(http().post(&endpoints.token_url), &form).await?;
    let answer = token_answer(status, &body)?;
    let access_token = answer.access_token;
    if answer.token_type.as_deref().is_some_and(|t| !t.eq_ignore_ascii_case("bearer")) {
        return Err(AppOAuthError::Malformed(format!("token_type {:?}, expected Bearer", answer.token_type)));
    }
    let now = chrono::Utc::now().timestamp();
    let life = answer.expires_in.filter(|s| *s > 0);
    Ok(Tokens {
        access_token,
        refresh_token: answer.refresh_token.or_else(|| kept_refresh_token.map(str::to_string)),
        expires_at: life.map(|s| now + s),
        renew_at: life.map(|s| now + s - RENEW_AHEAD_SECS.min(s / 2)),
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_pkce_challenge_is_the_s256_of_the_verifier() {
        let p = pkce();
        assert_eq!(p.verifier.len(), 64);
        let expected = base64::engine::general_purpose::URL_SAFE_NO_PAD.encode(Sha256::digest(p.verifier.as_bytes()));
        assert_eq!(p.challenge, expected);
        assert_ne!(pkce().verifier, p.verifier);
    }

    #[test]
    fn the_resource_metadata_url_is_read_from_a_bearer_challenge() {
        let c = r#"Bearer error="invalid_token", resource_metadata="https://a.example/.well-known/oauth-protected-resource/mcp""#;
        assert_eq!(
            resource_metadata_of(c).as_deref(),
            Some("https://a.example/.well-known/oauth-protected-resource/mcp")
        );
        let bare = r#"Bearer resource_metadata=https://a.example/x, realm="r""#;
        assert_eq!(resource_metadata_of(bare).as_deref(), Some("https://a.example/x"));
        assert_eq!(resource_metadata_of(r#"Bearer realm="r""#), None);
        assert_eq!(resource_metadata_of(r#"Bearer resource_metadata="", realm="r""#), None);
    }

    #[test]
    fn discovered_endpoints_must_be_https_outside_development() {
        assert!(usable("https://a.example/token", false, "token_endpoint").is_ok());
        assert!(usable("http://a.example/token", true, "token_endpoint").is_ok());
        let e = usable("http://a.example/token", false, "token_endpoint").unwrap_err().to_string();
        assert!(e.contains("not https"), "{e}");
        assert!(usable("file:///etc/passwd", true, "token_endpoint").is_err());
    }

    #[test]
    fn a_token_is_renewed_ahead_of_its_expiry() {
        let t = Tokens { access_token: "a".into(), refresh_token: None, expires_at: Some(100), renew_at: Some(70) };
        assert!(!t.due(69) && t.due(70));
        let unknown = Tokens { renew_at: None, ..t };
        assert!(!unknown.due(i64::MAX), "without an expiry only a 401 renews it");
    }
}
