//! JWT bearer tokens on the management API: RS256 only, the signing key chosen by `kid` among the
//! public keys of the configuration (PEM files, a JWKS file, a JWKS URL; the JWKS sources are
//! re-read every `refresh_secs`). The verifier holds the keys; fetching the remote ones is
//! outbound work, done by `outbound::jwks`.
//!
//! Only RS256 is accepted: `alg: none`, HS256 (which would let a public key act as an HMAC
//! secret) and every other algorithm are refused before any key is looked at.

use arc_swap::ArcSwap;
use chrono::Utc;
use jsonwebtoken::jwk::JwkSet;
use jsonwebtoken::{Algorithm, DecodingKey, Validation};
use serde::Deserialize;
use std::collections::HashMap;
use std::sync::Arc;
use toolgate_filters::auth::AuthError;

/// The verifier's settings, as the configuration builds them from its JWT section.
#[derive(Debug, Clone)]
pub struct JwtConfig {
    pub issuer: Option<String>,
    pub audience: Option<String>,
    /// Seconds of clock skew tolerated on `exp` and `iat`.
    pub leeway_secs: u64,
    pub keys: Vec<JwtKeyConfig>,
    pub jwks_file: Option<std::path::PathBuf>,
    pub jwks_url: Option<String>,
    /// How often the JWKS file and URL are re-read.
    pub refresh_secs: u64,
    /// Longest accepted token life (`exp - iat`, or `exp - now` without `iat`): a leaked
    /// long-lived token stays useful for at most this long.
    pub max_lifetime_secs: u64,
    /// Without `jwks_url`: the issuer's metadata (RFC 8414, then OpenID discovery) says where
    /// its keys are, asked again at each refresh (a provider may move them).
    pub discover_jwks: bool,
}

#[derive(Debug, Clone)]
pub struct JwtKeyConfig {
    pub kid: String,
    pub pem_file: std::path::PathBuf,
}

/// The claims toolgate reads.
#[derive(Debug, Clone, Deserialize)]
pub struct Claims {
    pub sub: String,
    pub exp: i64,
    pub iat: Option<i64>,
    #[serde(default)]
    pub scopes: Vec<String>,
    pub jti: Option<String>,
    /// An OAuth access token's scopes, space-separated (RFC 9068).
    pub scope: Option<String>,
    /// The OAuth client the token was issued to (RFC 9068).
    pub client_id: Option<String>,
    /// An OpenID Connect ID token's: the value the sign-in request carried, and the user's address.
    pub nonce: Option<String>,
    pub email: Option<String>,
    pub email_verified: Option<bool>,
}

/// The shortest time between two fetches of the keys that unknown key ids bring forward.
const EARLY_REFRESH_AFTER: std::time::Duration = std::time::Duration::from_secs(10);

pub struct JwtVerifier {
    config: JwtConfig,
    keys: ArcSwap<Keys>,
    /// A token named a key id this verifier does not hold: the issuer may have rotated its
    /// keys, so the server's flusher fetches them before the period is up.
    unknown_kid_seen: std::sync::atomic::AtomicBool,
}

/// The configuration and the key ids, never key material.
impl std::fmt::Debug for JwtVerifier {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        let kids: Vec<String> = self.keys.load().keys().cloned().collect();
        f.debug_struct("JwtVerifier").field("config", &self.config).field("kids", &kids).finish()
    }
}

#[derive(Debug, thiserror::Error)]
pub enum JwtSetupError {
    #[error("{0}")]
    Key(String),
}

/// Verification keys by key id.
pub(crate) type Keys = HashMap<String, DecodingKey>;

/// The keys of a JWKS document with a key id; `source` names it in the error.
pub(crate) fn keys_from_jwks(text: &str, source: &str) -> Result<Keys, JwtSetupError> {
    let set: JwkSet =
        serde_json::from_str(text).map_err(|e| JwtSetupError::Key(format!("{source}: not a JWKS: {e}")))?;
    let mut keys = HashMap::new();
    for jwk in set.keys {
        let Some(kid) = jwk.common.key_id.clone() else { continue };
        if let Ok(k) = DecodingKey::from_jwk(&jwk) {
            keys.insert(kid, k);
        }
    }
    Ok(keys)
}

impl JwtVerifier {
    /// Loads the PEM files and the JWKS file; the JWKS URL is fetched by `outbound::jwks::refresh`.
    pub fn new(config: JwtConfig) -> Result<JwtVerifier, JwtSetupError> {
        let verifier =
            JwtVerifier { keys: ArcSwap::from_pointee(HashMap::new()), unknown_kid_seen: Default::default(), config };
        verifier.keys.store(Arc::new(verifier.load_local()?));
        Ok(verifier)
    }

    fn load_local(&self) -> Result<Keys, JwtSetupError> {
        let mut keys = HashMap::new();
        for k in &self.config.keys {
            let pem = std::fs::read(&k.pem_file)
                .map_err(|e| JwtSetupError::Key(format!("jwt.keys[{}].pem_file: {e}", k.kid)))?;
            let key = DecodingKey::from_rsa_pem(&pem)
                .map_err(|e| JwtSetupError::Key(format!("jwt.keys[{}].pem_file: not an RSA public key: {e}", k.kid)))?;
            keys.insert(k.kid.clone(), key);
        }
        if let Some(path) = &self.config.jwks_file {
            let text = std::fs::read_to_string(path).map_err(|e| JwtSetupError::Key(format!("jwt.jwks_file: {e}")))?;
            keys.extend(keys_from_jwks(&text, "jwt.jwks_file")?);
        }
        Ok(keys)
    }

    /// The settings the verifier was built with.
    pub fn config(&self) -> &JwtConfig {
        &self.config
    }

    /// Begins a refresh (`outbound::jwks` fetches the remote keys): forgets that an unknown key
    /// id was seen, and reads the PEM files and the JWKS file again. `Err`: keep the keys in use.
    pub(crate) fn begin_refresh(&self) -> Result<Keys, JwtSetupError> {
        self.unknown_kid_seen.store(false, std::sync::atomic::Ordering::Relaxed);
        self.load_local()
    }

    /// Adds the keys in use to `keys` where it has none of that id: what a failed fetch keeps.
    pub(crate) fn keep_previous(&self, keys: &mut Keys) {
        for (kid, k) in self.keys.load().iter() {
            keys.entry(kid.clone()).or_insert_with(|| k.clone());
        }
    }

    /// Puts the keys of a refresh in use.
    pub fn install(&self, keys: Keys) {
        self.keys.store(Arc::new(keys));
    }

    pub(crate) fn refresh_period(&self) -> std::time::Duration {
        std::time::Duration::from_secs(self.config.refresh_secs)
    }

    /// Whether the keys are due for a fetch, `since` the last one: the period is up, or a token
    /// named an unknown key id and [`EARLY_REFRESH_AFTER`] has passed (so that a stream of forged
    /// key ids cannot make toolgate hammer the issuer).
    pub(crate) fn refresh_due(&self, since: Option<std::time::Duration>) -> bool {
        let Some(since) = since else { return true };
        since >= self.refresh_period()
            || (since >= EARLY_REFRESH_AFTER && self.unknown_kid_seen.load(std::sync::atomic::Ordering::Relaxed))
    }

    /// Verifies a token for the configured audience (if any); every failure is a 401.
    pub fn verify(&self, token: &str) -> Result<Claims, AuthError> {
        self.verify_for(token, self.config.audience.as_deref())
    }

    /// Verifies a token that must name `audience` (an OAuth resource, RFC 8707) in `aud`.
    pub(crate) fn verify_for_audience(&self, token: &str, audience: &str) -> Result<Claims, AuthError> {
        self.verify_for(token, Some(audience))
    }

    fn verify_for(&self, token: &str, audience: Option<&str>) -> Result<Claims, AuthError> {
        let header = jsonwebtoken::decode_header(token).map_err(|_| AuthError::Malformed)?;
        if header.alg != Algorithm::RS256 {
            return Err(AuthError::Unknown);
        }
        let kid = header.kid.ok_or(AuthError::Unknown)?;
        let keys = self.keys.load();
        let Some(key) = keys.get(&kid) else {
            self.unknown_kid_seen.store(true, std::sync::atomic::Ordering::Relaxed);
            return Err(AuthError::Unknown);
        };
        let mut v = Validation::new(Algorithm::RS256);
        v.leeway = self.config.leeway_secs;
        v.set_required_spec_claims(&["exp", "sub"]);
        if let Some(iss) = &self.config.issuer {
            v.set_issuer(&[iss]);
        }
        match audience {
            Some(aud) => v.set_audience(&[aud]),
            None => v.validate_aud = false,
        }
        let data = jsonwebtoken::decode::<Claims>(token, key, &v).map_err(|e| match e.kind() {
            jsonwebtoken::errors::ErrorKind::ExpiredSignature => AuthError::Expired,
            _ => AuthError::Unknown,
        })?;
        let claims = data.claims;
        let now = Utc::now().timestamp();
        // A token issued in the future (beyond the leeway) is not trusted.
        if claims.iat.is_some_and(|iat| iat > now + self.config.leeway_secs as i64) {
            return Err(AuthError::Unknown);
        }
        // Nor one that lives longer than the configured cap: its whole life when it says when it
        // was issued, what is left of it otherwise.
        let lifetime = claims.exp.saturating_sub(claims.iat.unwrap_or(now));
        if lifetime > self.config.max_lifetime_secs as i64 {
            return Err(AuthError::Unknown);
        }
        Ok(claims)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use base64::Engine;
    use std::time::Duration;

    #[test]
    fn an_unknown_key_id_brings_the_next_fetch_forward_but_not_before_ten_seconds() {
        let config = JwtConfig {
            issuer: None,
            audience: None,
            leeway_secs: 0,
            keys: Vec::new(),
            jwks_file: None,
            jwks_url: None,
            refresh_secs: 300,
            max_lifetime_secs: 60,
            discover_jwks: false,
        };
        let verifier = JwtVerifier::new(config).unwrap();
        let b64 = |v: &str| base64::engine::general_purpose::URL_SAFE_NO_PAD.encode(v);
        let token =
            format!("{}.{}.{}", b64(r#"{"alg":"RS256","kid":"rotated"}"#), b64(r#"{"sub":"a","exp":1}"#), b64("sig"));
        assert!(verifier.refresh_due(None), "never fetched");
        assert!(!verifier.refresh_due(Some(Duration::from_secs(60))), "within the period");
        assert_eq!(verifier.verify(&token).unwrap_err(), AuthError::Unknown);
        assert!(!verifier.refresh_due(Some(Duration::from_secs(5))), "not sooner than ten seconds");
        assert!(verifier.refresh_due(Some(Duration::from_secs(11))), "an unknown key id was seen");
        assert!(verifier.refresh_due(Some(Duration::from_secs(300))), "the period is up");
    }
}
