//! OAuth 2.0 Token Revocation (RFC 7009) toward the apps' authorization servers: when a user's
//! own connection of an app ends (the member removed, the user's password changed, a service
//! account deleted, the connection removed), its tokens are revoked at the provider, so that a
//! copy of them (a backup of the store, a log of the provider's) stops working too.
//!
//! Where: the app's `oauth.revocation_url`, else the `revocation_endpoint` its authorization
//! server's metadata names (when the endpoints were discovered). A provider that names none
//! offers no revocation: the tokens are forgotten with the connection and expire on their own.
//! The refresh token goes first (many providers end the whole grant with it), then the access
//! token, each with its `token_type_hint`, the client authenticated as for the token requests
//! (`client_secret_post`, or the `client_id` alone for a public client). The caller runs this in
//! the background: a removal never waits for a provider, nor fails with it.

use super::app_oauth::{endpoints, http, send_form, AppOAuthError, Tokens};
use crate::config::AppConfig;

/// What became of an ended connection's tokens.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Revoked {
    /// The provider accepted the revocation of each of them.
    Done,
    /// The provider offers no revocation (no endpoint configured nor announced).
    Unsupported,
}

/// Revokes `tokens`, tokens of `app`'s authorization server, at its revocation endpoint.
/// `allow_http`: a discovered endpoint may be plain http (development).
pub(crate) async fn revoke(app: &AppConfig, allow_http: bool, tokens: &Tokens) -> Result<Revoked, AppOAuthError> {
    let Some(oauth) = app.oauth.as_ref() else { return Ok(Revoked::Unsupported) };
    let url = match &oauth.revocation_url {
        Some(url) => url.clone(),
        None if oauth.endpoints.is_some() => return Ok(Revoked::Unsupported),
        None => match endpoints(app, allow_http).await?.revocation_url.clone() {
            Some(url) => url,
            None => return Ok(Revoked::Unsupported),
        },
    };
    let hinted =
        [(tokens.refresh_token.as_deref(), "refresh_token"), (Some(tokens.access_token.as_str()), "access_token")];
    for (token, hint) in hinted {
        let Some(token) = token.filter(|t| !t.is_empty()) else { continue };
        let mut form = vec![("token", token), ("token_type_hint", hint), ("client_id", oauth.client_id.as_str())];
        if let Some(secret) = &oauth.client_secret {
            form.push(("client_secret", secret));
        }
        let (status, body) = send_form(http().post(&url), &form).await?;
        if !status.is_success() {
            return Err(refusal(status, &body));
        }
    }
    Ok(Revoked::Done)
}

/// A revocation endpoint's refusal: its `error` (RFC 7009 section 2.2.1, RFC 6749 section 5.2)
/// when it names one, else the status.
fn refusal(status: reqwest::StatusCode, body: &[u8]) -> AppOAuthError {
    #[derive(serde::Deserialize)]
    struct Refusal {
        error: String,
        error_description: Option<String>,
    }
    match serde_json::from_slice::<Refusal>(body) {
        Ok(r) => AppOAuthError::Refused { error: r.error, description: r.error_description },
        Err(_) => AppOAuthError::Malformed(format!("the revocation endpoint answered HTTP {}", status.as_u16())),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_refusal_names_the_providers_error_or_the_status() {
        let named = refusal(reqwest::StatusCode::BAD_REQUEST, br#"{"error":"unsupported_token_type"}"#);
        assert!(matches!(named, AppOAuthError::Refused { ref error, .. } if error == "unsupported_token_type"));
        let bare = refusal(reqwest::StatusCode::SERVICE_UNAVAILABLE, b"busy");
        assert!(bare.to_string().contains("HTTP 503"), "{bare}");
    }
}
