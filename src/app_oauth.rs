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
//! Decisions: the token endpoint is the operator's configuration, so it is reached as given
//! (no egress filtering), with no redirects followed and a 10 s time-out; the client
//! authenticates with `client_secret_post` when a secret is configured, and by PKCE alone
//! otherwise (a public client).

use crate::config::OAuthConfig;
use base64::Engine;
use serde::{Deserialize, Serialize};
use sha2::{Digest, Sha256};
use std::sync::OnceLock;
use std::time::Duration;

/// How long before its expiry an access token is renewed: at most this, at most half its life.
const RENEW_AHEAD_SECS: i64 = 30;

#[derive(Debug, Clone, thiserror::Error)]
pub enum OAuthError {
    #[error("the app's token endpoint cannot be reached: {0}")]
    Unreachable(String),
    #[error("the app's token endpoint refused: {error}{}", .description.as_deref().map(|d| format!(" ({d})")).unwrap_or_default())]
    Refused { error: String, description: Option<String> },
    #[error("the app's token endpoint answered without a usable token: {0}")]
    Malformed(String),
    #[error("the access token expired and the provider gave no refresh token: connect the app again")]
    NoRefreshToken,
}

/// A PKCE pair: the verifier kept sealed, the S256 challenge sent in the authorization URL.
pub struct Pkce {
    pub verifier: String,
    pub challenge: String,
}

pub fn pkce() -> Pkce {
    // 64 characters of the unreserved alphabet: 380 bits, within RFC 7636's 43-128.
    let verifier = crate::secrets::random_alnum(64);
    let challenge = base64::engine::general_purpose::URL_SAFE_NO_PAD.encode(Sha256::digest(verifier.as_bytes()));
    Pkce { verifier, challenge }
}

/// What a pending OAuth connection keeps sealed until the code comes back.
#[derive(Serialize, Deserialize)]
pub struct Pending {
    pub pkce_verifier: String,
}

/// What a connected OAuth connection keeps sealed.
#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct Tokens {
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
    pub fn due(&self, now: i64) -> bool {
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

fn http() -> &'static reqwest::Client {
    static CLIENT: OnceLock<reqwest::Client> = OnceLock::new();
    CLIENT.get_or_init(|| {
        reqwest::Client::builder()
            .timeout(Duration::from_secs(10))
            .redirect(reqwest::redirect::Policy::none())
            .build()
            .expect("an HTTP client with default TLS settings")
    })
}

/// Exchanges an authorization code (with the PKCE verifier it was asked with).
pub async fn exchange_code(
    oauth: &OAuthConfig,
    code: &str,
    redirect_uri: &str,
    verifier: &str,
) -> Result<Tokens, OAuthError> {
    let form = [
        ("grant_type", "authorization_code"),
        ("code", code),
        ("redirect_uri", redirect_uri),
        ("code_verifier", verifier),
    ];
    token_request(oauth, &form, None).await
}

/// Renews `tokens` with their refresh token; the provider may rotate it (else it is kept).
pub async fn refresh(oauth: &OAuthConfig, tokens: &Tokens) -> Result<Tokens, OAuthError> {
    let Some(refresh_token) = tokens.refresh_token.as_deref() else { return Err(OAuthError::NoRefreshToken) };
    let form = [("grant_type", "refresh_token"), ("refresh_token", refresh_token)];
    token_request(oauth, &form, Some(refresh_token)).await
}

async fn token_request(
    oauth: &OAuthConfig,
    grant: &[(&str, &str)],
    kept_refresh_token: Option<&str>,
) -> Result<Tokens, OAuthError> {
    let mut form: Vec<(&str, &str)> = grant.to_vec();
    form.push(("client_id", &oauth.client_id));
    if let Some(secret) = &oauth.client_secret {
        form.push(("client_secret", secret));
    }
    let response = http()
        .post(&oauth.token_url)
        .header("Accept", "application/json")
        .form(&form)
        .send()
        .await
        .map_err(|e| OAuthError::Unreachable(e.without_url().to_string()))?;
    let status = response.status();
    let body = response.bytes().await.map_err(|e| OAuthError::Unreachable(e.without_url().to_string()))?;
    let answer: TokenAnswer = serde_json::from_slice(&body)
        .map_err(|_| OAuthError::Malformed(format!("HTTP {status}, not a JSON token response")))?;
    if let Some(error) = answer.error {
        return Err(OAuthError::Refused { error, description: answer.error_description });
    }
    if !status.is_success() {
        return Err(OAuthError::Malformed(format!("HTTP {status}")));
    }
    let Some(access_token) = answer.access_token.filter(|t| !t.is_empty()) else {
        return Err(OAuthError::Malformed("no access_token".into()));
    };
    if answer.token_type.as_deref().is_some_and(|t| !t.eq_ignore_ascii_case("bearer")) {
        return Err(OAuthError::Malformed(format!("token_type {:?}, expected Bearer", answer.token_type)));
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
    fn a_token_is_renewed_ahead_of_its_expiry() {
        let t = Tokens { access_token: "a".into(), refresh_token: None, expires_at: Some(100), renew_at: Some(70) };
        assert!(!t.due(69) && t.due(70));
        let unknown = Tokens { renew_at: None, ..t };
        assert!(!unknown.due(i64::MAX), "without an expiry only a 401 renews it");
    }
}
