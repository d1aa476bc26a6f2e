//! Passwords for web sign-in: argon2id hashes (the `argon2` crate's defaults, OWASP's minimum:
//! 19 MiB, 2 passes, 1 lane), the rules a new password must meet, and the stored record.
//!
//! Each hash or check holds 19 MiB while it runs, and anyone may ask for one (a sign-in form),
//! so each waits for a turn (`turns`: at most `web.password_checks` at once, and a sign-in's
//! place in the queue shared fairly between addresses and accounts).

use super::turns::in_turn;
use crate::data::changes::Change;
use crate::data::model::User;
use crate::data::state::State;
use crate::data::store::{Kind, PutRecord, Store, StoreError};
use crate::edge::error::ApiError;
use argon2::password_hash::{rand_core::OsRng, PasswordHash, PasswordHasher, PasswordVerifier, SaltString};
use argon2::Argon2;
use serde::{Deserialize, Serialize};
use std::sync::OnceLock;

/// Shortest and longest password accepted, in characters (NIST SP 800-63B: at least 8; 12
/// here, which the guessing bounds of a sign-in form make ample; a long limit for passphrases).
pub(crate) const MIN_CHARS: usize = 12;
pub(crate) const MAX_CHARS: usize = 128;

/// Passwords seen most in breaches that meet the length rule (and their like with digits): a
/// short list, since the lockout bounds online guessing; a user picks anything else.
const COMMON: &[&str] = &[
    "123456789012",
    "1234567890123",
    "12345678901234",
    "qwertyuiopas",
    "qwertyuiop123",
    "password1234",
    "password12345",
    "passwordpassword",
    "111111111111",
    "000000000000",
    "iloveyou1234",
    "abcdefghijkl",
    "abc123abc123",
    "qwerty123456",
    "1q2w3e4r5t6y",
    "letmein12345",
    "welcome12345",
    "administrator",
    "changeme1234",
    "trustno1trustno1",
];

/// A user's password, as stored (kind `password`, by user id).
#[derive(Debug, Clone, Serialize, Deserialize)]
pub(crate) struct PasswordRecord {
    pub user_id: String,
    /// The PHC string of an argon2id hash.
    pub hash: String,
    pub changed_at: crate::data::model::Timestamp,
}

/// Why a new password is refused, or `Ok`.
pub(crate) fn check(password: &str, email: &str) -> Result<(), String> {
    let chars = password.chars().count();
    if chars < MIN_CHARS {
        return Err(format!("must be at least {MIN_CHARS} characters"));
    }
    if chars > MAX_CHARS {
        return Err(format!("must be at most {MAX_CHARS} characters"));
    }
    let lower = password.to_lowercase();
    let local = email.split('@').next().unwrap_or("").to_lowercase();
    if lower == email.to_lowercase() || (local.chars().count() >= 4 && lower.contains(&local)) {
        return Err("must not contain the e-mail address".into());
    }
    let mut distinct = password.chars().collect::<Vec<_>>();
    distinct.sort_unstable();
    distinct.dedup();
    if distinct.len() < 4 {
        return Err("must use at least 4 different characters".into());
    }
    if COMMON.contains(&lower.as_str()) {
        return Err("is one of the most common passwords".into());
    }
    Ok(())
}

/// The argon2id hash of `password` (tens of milliseconds of CPU: off the proxy's threads).
pub(crate) async fn hash(password: String) -> Result<String, ApiError> {
    in_turn(move || {
        let salt = SaltString::generate(&mut OsRng);
        Argon2::default().hash_password(password.as_bytes(), &salt).map(|h| h.to_string())
    })
    .await
    .ok_or_else(|| ApiError::Internal("the password hash did not finish".into()))?
    .map_err(|e| ApiError::Internal(format!("argon2: {e}")))
}

/// Whether `password` is the one `phc` was made from (off the proxy's threads). With `None`,
/// a decoy hash is checked, so that an unknown e-mail takes as long to refuse as a wrong password.
pub(crate) async fn verify(phc: Option<String>, password: String) -> bool {
    in_turn(move || {
        let phc = phc.as_deref().unwrap_or_else(|| decoy());
        let Ok(parsed) = PasswordHash::new(phc) else { return false };
        Argon2::default().verify_password(password.as_bytes(), &parsed).is_ok()
    })
    .await
    .unwrap_or(false)
}

fn decoy() -> &'static str {
    static DECOY: OnceLock<String> = OnceLock::new();
    DECOY.get_or_init(|| {
        let salt = SaltString::generate(&mut OsRng);
        let random = crate::base::secrets::new_session_id();
        Argon2::default().hash_password(random.as_bytes(), &salt).map(|h| h.to_string()).unwrap_or_default()
    })
}

pub(crate) async fn stored(store: &dyn Store, user_id: &str) -> Result<Option<PasswordRecord>, StoreError> {
    Ok(store.get(Kind::Password, user_id).await?.and_then(|json| serde_json::from_str(&json).ok()))
}

/// Sets `user`'s password to the argon2id hash `hash` and publishes the change (the caller
/// ends its sessions and grants, which publish their own).
pub(crate) async fn save(state: &State, user: &User, hash: String) -> Result<(), StoreError> {
    let record = PasswordRecord { user_id: user.id.clone(), hash, changed_at: chrono::Utc::now() };
    state.store.put_record(Kind::Password, crate::data::store::NO_PARTITION, &user.id, &record).await?;
    state.changes.publish(Change::PasswordChanged { org_id: user.org_id.clone(), user_id: user.id.clone() });
    Ok(())
}

/// Removes `user`'s password (the user is being removed: `IdentityService::remove_user`) and
/// publishes the change, as a new password does, so whatever follows passwords follows this too.
/// `false` when the user had none.
pub(crate) async fn remove(state: &State, user: &User) -> Result<bool, StoreError> {
    let removed = state.store.delete(Kind::Password, &user.id).await?;
    if removed {
        state.changes.publish(Change::PasswordChanged { org_id: user.org_id.clone(), user_id: user.id.clone() });
    }
    Ok(removed)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_rules_refuse_short_common_repetitive_and_email_passwords() {
        let email = "alice.smith@example.com";
        assert!(check("correct horse battery", email).is_ok());
        assert_eq!(check("short1!", email).unwrap_err(), "must be at least 12 characters");
        assert!(check(&"x".repeat(129), email).unwrap_err().contains("at most 128"));
        assert!(check("Password1234", email).unwrap_err().contains("most common"));
        assert!(check("abababababab", email).unwrap_err().contains("4 different"));
        assert!(check("my-alice.smith-pw", email).unwrap_err().contains("e-mail"));
    }

    #[tokio::test]
    async fn a_hash_verifies_its_password_only() {
        let h = hash("correct horse battery".into()).await.unwrap();
        assert!(h.starts_with("$argon2id$"), "{h}");
        assert!(verify(Some(h.clone()), "correct horse battery".into()).await);
        assert!(!verify(Some(h), "correct horse batterY".into()).await);
        assert!(!verify(None, "anything at all".into()).await, "the decoy matches nothing");
        assert!(!verify(Some("not a hash".into()), "x".into()).await);
    }
}
