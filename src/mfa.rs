//! Multi-factor authentication (DESIGN Decision 9): TOTP (RFC 6238, SHA-1, 6 digits, 30 s) per
//! user with backup codes, challenges and short-lived MFA tokens.
//!
//! The TOTP seed is sealed at rest like app credentials; backup codes are stored as SHA-256 hashes
//! and each works once. Challenges and tokens live 5 minutes, are single use, and are kept in
//! memory: losing them on restart only means asking for a new one. A code is accepted once per
//! 30-second step per user, so a code seen on the wire cannot be replayed.

use crate::error::ApiError;
use crate::secrets::{self, Sealer};
use crate::store::{Kind, Store, StoreError};
use chrono::Utc;
use dashmap::DashMap;
use rand::rngs::OsRng;
use rand::Rng;
use serde::{Deserialize, Serialize};
use std::sync::Arc;
use std::time::{Duration, Instant};
use totp_rs::{Algorithm, Secret, TOTP};

/// How long a challenge or an MFA token stays valid.
pub const MFA_TTL: Duration = Duration::from_secs(300);
const BACKUP_CODES: usize = 10;

#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct MfaRecord {
    pub user_id: String,
    /// Base32 TOTP seed, sealed.
    pub sealed_secret: String,
    /// Confirmed with a first code; until then MFA is not enforced.
    pub active: bool,
    /// SHA-256 of each unused backup code.
    pub backup_code_hashes: Vec<String>,
    /// Last accepted TOTP step, against replays.
    #[serde(default)]
    pub last_step: u64,
}

pub struct Enrolment {
    pub secret: String,
    pub otpauth_uri: String,
    pub backup_codes: Vec<String>,
}

pub struct Mfa {
    store: Arc<dyn Store>,
    records: DashMap<String, MfaRecord>,
    /// challenge id -> (user id, issued).
    challenges: DashMap<String, (String, Instant)>,
    /// SHA-256 of an MFA token -> (user id, issued).
    tokens: DashMap<String, (String, Instant)>,
}

fn totp(secret_b32: &str, account: &str) -> Result<TOTP, ApiError> {
    let bytes =
        Secret::Encoded(secret_b32.to_string()).to_bytes().map_err(|_| ApiError::Internal("bad TOTP seed".into()))?;
    TOTP::new(Algorithm::SHA1, 6, 1, 30, bytes, Some("toolgate".into()), account.to_string())
        .map_err(|e| ApiError::Internal(format!("TOTP: {e}")))
}

fn is_code(s: &str) -> bool {
    s.len() == 6 && s.bytes().all(|b| b.is_ascii_digit())
}

impl Mfa {
    pub async fn load(store: Arc<dyn Store>) -> Result<Mfa, StoreError> {
        let records = DashMap::new();
        for (id, body) in store.load_all(Kind::Mfa).await? {
            match serde_json::from_str::<MfaRecord>(&body) {
                Ok(r) => {
                    records.insert(id, r);
                }
                Err(e) => tracing::warn!(user = id, error = %e, "skipping corrupt MFA record"),
            }
        }
        Ok(Mfa { store, records, challenges: DashMap::new(), tokens: DashMap::new() })
    }

    async fn save(&self, r: MfaRecord) -> Result<(), ApiError> {
        let json = serde_json::to_string(&r).map_err(|e| ApiError::Internal(e.to_string()))?;
        self.store.put(Kind::Mfa, &r.user_id, json).await?;
        self.records.insert(r.user_id.clone(), r);
        Ok(())
    }

    pub fn is_active(&self, user_id: &str) -> bool {
        self.records.get(user_id).is_some_and(|r| r.active)
    }

    /// Starts (or restarts, while not active) enrolment: a new seed and backup codes.
    pub async fn enroll(&self, sealer: &Sealer, user_id: &str, account: &str) -> Result<Enrolment, ApiError> {
        if self.is_active(user_id) {
            return Err(ApiError::Conflict("MFA is already active for this user".into()));
        }
        let secret = Secret::generate_secret().to_encoded().to_string();
        let uri = totp(&secret, account)?.get_url();
        let backup_codes: Vec<String> = (0..BACKUP_CODES)
            .map(|_| format!("{:05}-{:05}", OsRng.gen_range(0..100_000), OsRng.gen_range(0..100_000)))
            .collect();
        self.save(MfaRecord {
            user_id: user_id.to_string(),
            sealed_secret: sealer.seal(secret.as_bytes()),
            active: false,
            backup_code_hashes: backup_codes.iter().map(|c| secrets::hash_key(c)).collect(),
            last_step: 0,
        })
        .await?;
        Ok(Enrolment { secret, otpauth_uri: uri, backup_codes })
    }

    /// Checks a current TOTP code, once per step; updates the record on success.
    async fn check_code(&self, sealer: &Sealer, user_id: &str, code: &str) -> Result<bool, ApiError> {
        let Some(mut r) = self.records.get(user_id).map(|r| r.clone()) else { return Ok(false) };
        let secret = String::from_utf8(sealer.open(&r.sealed_secret).map_err(|e| ApiError::Internal(e.to_string()))?)
            .map_err(|_| ApiError::Internal("bad TOTP seed".into()))?;
        let t = totp(&secret, user_id)?;
        let now = Utc::now().timestamp().max(0) as u64;
        // The current step and one on each side, for clock skew.
        for step in [now / 30, now / 30 - 1, now / 30 + 1] {
            if step > r.last_step && subtle_eq(&t.generate(step * 30), code) {
                r.last_step = step;
                self.save(r).await?;
                return Ok(true);
            }
        }
        Ok(false)
    }

    /// Confirms enrolment with a first code.
    pub async fn activate(&self, sealer: &Sealer, user_id: &str, code: &str) -> Result<(), ApiError> {
        let Some(r) = self.records.get(user_id).map(|r| r.clone()) else {
            return Err(ApiError::validation("code", "start with POST /auth/mfa/enroll"));
        };
        if r.active {
            return Err(ApiError::Conflict("MFA is already active for this user".into()));
        }
        if !is_code(code) || !self.check_code(sealer, user_id, code).await? {
            return Err(ApiError::validation("code", "invalid or expired code"));
        }
        let mut r = self.records.get(user_id).map(|r| r.clone()).ok_or(ApiError::NotFound("mfa"))?;
        r.active = true;
        self.save(r).await
    }

    /// A new challenge for a protected action.
    pub fn challenge(&self, user_id: &str) -> String {
        self.challenges.retain(|_, (_, t)| t.elapsed() < MFA_TTL);
        let id = secrets::new_id("mfa_ch");
        self.challenges.insert(id.clone(), (user_id.to_string(), Instant::now()));
        id
    }

    /// Answers a challenge with a TOTP or backup code; returns an MFA token (single use).
    pub async fn verify(
        &self,
        sealer: &Sealer,
        user_id: &str,
        challenge_id: &str,
        code: &str,
    ) -> Result<String, ApiError> {
        let valid_challenge =
            self.challenges.get(challenge_id).is_some_and(|c| c.0 == user_id && c.1.elapsed() < MFA_TTL);
        if !valid_challenge {
            return Err(ApiError::validation("challenge_id", "unknown or expired challenge"));
        }
        let ok = if is_code(code) {
            self.check_code(sealer, user_id, code).await?
        } else {
            self.use_backup(user_id, code).await?
        };
        if !ok {
            return Err(ApiError::validation("code", "invalid or expired code"));
        }
        self.challenges.remove(challenge_id);
        let token = format!("mfa_{}", secrets::new_session_id());
        self.tokens.retain(|_, (_, t)| t.elapsed() < MFA_TTL);
        self.tokens.insert(secrets::hash_key(&token), (user_id.to_string(), Instant::now()));
        Ok(token)
    }

    async fn use_backup(&self, user_id: &str, code: &str) -> Result<bool, ApiError> {
        let Some(mut r) = self.records.get(user_id).map(|r| r.clone()) else { return Ok(false) };
        let h = secrets::hash_key(code.trim());
        let Some(pos) = r.backup_code_hashes.iter().position(|c| secrets::hashes_equal(c, &h)) else {
            return Ok(false);
        };
        r.backup_code_hashes.remove(pos);
        self.save(r).await?;
        Ok(true)
    }

    /// The gate of a protected action: passes when the user has no active MFA, or when
    /// `X-MFA-Token` holds a current code or an unused token; otherwise `MFA_REQUIRED` with a
    /// fresh challenge.
    pub async fn require(&self, sealer: &Sealer, user_id: &str, header: Option<&str>) -> Result<(), ApiError> {
        if !self.is_active(user_id) {
            return Ok(());
        }
        let message = match header.map(str::trim) {
            None | Some("") => "this action requires MFA: verify the challenge and retry with X-MFA-Token",
            Some(v) if is_code(v) => {
                if self.check_code(sealer, user_id, v).await? {
                    return Ok(());
                }
                "invalid or already used MFA code"
            }
            Some(v) => {
                let h = secrets::hash_key(v);
                match self.tokens.remove(&h) {
                    Some((_, (owner, issued))) if owner == user_id && issued.elapsed() < MFA_TTL => return Ok(()),
                    _ => "invalid, expired or already used MFA token",
                }
            }
        };
        Err(ApiError::MfaRequired { challenge_id: self.challenge(user_id), message: message.into() })
    }
}

fn subtle_eq(a: &str, b: &str) -> bool {
    secrets::hashes_equal(a, b)
}
