//! Multi-factor authentication (DESIGN Decision 9): TOTP (RFC 6238, SHA-1, 6 digits, 30 s) per
//! user with backup codes, challenges and short-lived MFA tokens.
//!
//! The TOTP seed is sealed at rest like app credentials; backup codes are stored as SHA-256 hashes
//! and each works once. Challenges and tokens live 5 minutes and are single use; they are
//! records of the store that expire (so a challenge asked of one instance can be answered on
//! another, and a token is used once across all: the store's `take` reads and removes it in one
//! step). A code is accepted once per 30-second step per user, so a code seen on the wire cannot
//! be replayed. The failure counters below stay in memory: they bound guessing per instance.
//!
//! Guessing is bounded. Wrong codes are counted per credential (user and key): five in a row
//! lock that credential out for 30 s, doubling with each further failure up to 15 minutes, and a
//! challenge is used up after three wrong answers. Wrong TOTP codes are also counted per user
//! across credentials (twenty per ten minutes, then TOTP codes are refused until the window
//! ends). The lockout cannot be turned against the owner: a leaked key guessing codes locks only
//! itself, and the per-user bound refuses TOTP codes only; backup codes (ten digits each, too
//! many to guess) and MFA tokens keep working, and an owner or the operator can reset MFA.

use crate::error::ApiError;
use crate::secrets::{self, Sealer};
use crate::store::{Kind, Store, StoreError, NO_PARTITION};
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
/// Wrong codes a credential may send in a row before it is locked out.
const FREE_FAILURES: u32 = 5;
/// The first lockout; each further failure doubles it, up to [`MAX_LOCKOUT`].
const FIRST_LOCKOUT: Duration = Duration::from_secs(30);
const MAX_LOCKOUT: Duration = Duration::from_secs(15 * 60);
/// Wrong TOTP codes a user may receive (from all credentials together) per window, after which
/// TOTP codes are refused until the window ends; backup codes and MFA tokens still work, so
/// this bound on guessing cannot lock the owner out.
const USER_TOTP_FAILURES: u32 = 20;
const USER_WINDOW: Duration = Duration::from_secs(10 * 60);
/// Wrong answers a challenge takes before it is used up.
const CHALLENGE_FAILURES: u8 = 3;

/// An open challenge, as stored (kind `mfa_challenge`, expiring with it).
#[derive(Debug, Clone, Serialize, Deserialize)]
struct ChallengeRecord {
    user_id: String,
    /// Wrong answers so far.
    failures: u8,
    expires_at_ms: i64,
}

/// An unused MFA token, as stored under the SHA-256 of its value (kind `mfa_token`).
#[derive(Debug, Clone, Serialize, Deserialize)]
struct TokenRecord {
    user_id: String,
}

fn to_json<T: Serialize>(v: &T) -> Result<String, ApiError> {
    serde_json::to_string(v).map_err(|e| ApiError::Internal(e.to_string()))
}

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
    /// When expired challenges and tokens were last swept from the store (ms since the epoch).
    last_sweep_ms: std::sync::atomic::AtomicI64,
    /// (user id, credential key id) -> consecutive wrong codes and the lockout they earned.
    credential_failures: DashMap<(String, String), Failures>,
    /// user id -> wrong TOTP codes in the current window (all credentials).
    user_failures: DashMap<String, (u32, Instant)>,
}

/// Consecutive wrong codes of one credential.
#[derive(Debug, Default, Clone, Copy)]
struct Failures {
    count: u32,
    locked_until: Option<Instant>,
}

/// Who is answering: the user the code belongs to and the credential sending it. Failures are
/// counted per credential, so that a leaked key guessing codes locks out itself, not the owner.
#[derive(Debug, Clone, Copy)]
pub struct Caller<'a> {
    pub user_id: &'a str,
    pub key_id: &'a str,
}

/// What kind of code was sent.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum CodeKind {
    Totp,
    Backup,
}

fn too_many(retry_after: Duration) -> ApiError {
    ApiError::too_many("wrong MFA codes", retry_after)
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

/// A backup code as enrolment prints it: `12345-67890`.
fn is_backup_code(s: &str) -> bool {
    s.len() == 11 && s.bytes().enumerate().all(|(i, b)| if i == 5 { b == b'-' } else { b.is_ascii_digit() })
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
        Ok(Mfa {
            store,
            records,
            last_sweep_ms: std::sync::atomic::AtomicI64::new(0),
            credential_failures: DashMap::new(),
            user_failures: DashMap::new(),
        })
    }

    async fn save(&self, r: MfaRecord) -> Result<(), ApiError> {
        let json = serde_json::to_string(&r).map_err(|e| ApiError::Internal(e.to_string()))?;
        self.store.put(Kind::Mfa, NO_PARTITION, &r.user_id, json).await?;
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

    /// Refuses a credential (or, for TOTP codes, a user) that has sent too many wrong codes.
    fn check_lockout(&self, caller: Caller<'_>, kind: CodeKind) -> Result<(), ApiError> {
        let key = (caller.user_id.to_string(), caller.key_id.to_string());
        if let Some(until) = self.credential_failures.get(&key).and_then(|f| f.locked_until) {
            let now = Instant::now();
            if until > now {
                return Err(too_many(until - now));
            }
        }
        if kind == CodeKind::Totp {
            if let Some(f) = self.user_failures.get(caller.user_id) {
                let (count, since) = *f;
                if count >= USER_TOTP_FAILURES && since.elapsed() < USER_WINDOW {
                    return Err(too_many(USER_WINDOW - since.elapsed()));
                }
            }
        }
        Ok(())
    }

    /// Counts a wrong code against the credential (and the user, for TOTP codes).
    fn record_failure(&self, caller: Caller<'_>, kind: CodeKind) {
        let mut f =
            self.credential_failures.entry((caller.user_id.to_string(), caller.key_id.to_string())).or_default();
        f.count += 1;
        if f.count >= FREE_FAILURES {
            let doublings = (f.count - FREE_FAILURES).min(10);
            let lockout = FIRST_LOCKOUT.saturating_mul(1 << doublings).min(MAX_LOCKOUT);
            f.locked_until = Some(Instant::now() + lockout);
        }
        drop(f);
        if kind == CodeKind::Totp {
            let mut u = self.user_failures.entry(caller.user_id.to_string()).or_insert((0, Instant::now()));
            if u.1.elapsed() >= USER_WINDOW {
                *u = (0, Instant::now());
            }
            u.0 += 1;
        }
    }

    fn record_success(&self, caller: Caller<'_>) {
        self.credential_failures.remove(&(caller.user_id.to_string(), caller.key_id.to_string()));
    }

    /// Checks a TOTP or backup code under the lockout rules: `Ok(false)` for a wrong code
    /// (counted), `Err` while locked out.
    async fn attempt(&self, sealer: &Sealer, caller: Caller<'_>, code: &str) -> Result<bool, ApiError> {
        let kind = if is_code(code) { CodeKind::Totp } else { CodeKind::Backup };
        self.check_lockout(caller, kind)?;
        let ok = match kind {
            CodeKind::Totp => self.check_code(sealer, caller.user_id, code).await?,
            CodeKind::Backup => is_backup_code(code) && self.use_backup(caller.user_id, code).await?,
        };
        if ok {
            self.record_success(caller);
        } else {
            self.record_failure(caller, kind);
        }
        Ok(ok)
    }

    /// Confirms enrolment with a first code.
    pub async fn activate(&self, sealer: &Sealer, caller: Caller<'_>, code: &str) -> Result<(), ApiError> {
        let user_id = caller.user_id;
        let Some(r) = self.records.get(user_id).map(|r| r.clone()) else {
            return Err(ApiError::validation("code", "start with POST /auth/mfa/enroll"));
        };
        if r.active {
            return Err(ApiError::Conflict("MFA is already active for this user".into()));
        }
        if !is_code(code) {
            return Err(ApiError::validation("code", "must be the six-digit code of the authenticator"));
        }
        if !self.attempt(sealer, caller, code).await? {
            return Err(ApiError::validation("code", "invalid or expired code"));
        }
        let mut r = self.records.get(user_id).map(|r| r.clone()).ok_or(ApiError::NotFound("mfa"))?;
        r.active = true;
        self.save(r).await
    }

    /// A new challenge for a protected action, stored so that any instance can answer it.
    pub async fn challenge(&self, user_id: &str) -> Result<String, ApiError> {
        self.sweep_now_and_then().await;
        let id = secrets::new_id("mfa_ch");
        let expires_at_ms = Utc::now().timestamp_millis() + MFA_TTL.as_millis() as i64;
        let rec = ChallengeRecord { user_id: user_id.to_string(), failures: 0, expires_at_ms };
        self.store.put_expiring(Kind::MfaChallenge, NO_PARTITION, &id, to_json(&rec)?, expires_at_ms).await?;
        Ok(id)
    }

    /// The user an open challenge was asked of (`None` when it is unknown, expired or used up):
    /// web sign-in learns whom it is signing in from the challenge alone.
    pub async fn challenge_user(&self, challenge_id: &str) -> Result<Option<String>, ApiError> {
        let stored = self.store.get(Kind::MfaChallenge, challenge_id).await?;
        let now = Utc::now().timestamp_millis();
        Ok(stored
            .and_then(|json| serde_json::from_str::<ChallengeRecord>(&json).ok())
            .filter(|c| c.expires_at_ms > now)
            .map(|c| c.user_id))
    }

    /// Expired challenges and tokens are never read; this removes them from the store, at most
    /// once a minute, on the way of a new challenge.
    async fn sweep_now_and_then(&self) {
        use std::sync::atomic::Ordering;
        let now = Utc::now().timestamp_millis();
        let last = self.last_sweep_ms.load(Ordering::Relaxed);
        if now - last < 60_000
            || self.last_sweep_ms.compare_exchange(last, now, Ordering::Relaxed, Ordering::Relaxed).is_err()
        {
            return;
        }
        if let Err(e) = self.store.sweep_expired().await {
            tracing::warn!(error = %e, "cannot sweep expired MFA challenges and tokens");
        }
    }

    /// Answers a challenge with a TOTP or backup code; returns an MFA token (single use).
    pub async fn verify(
        &self,
        sealer: &Sealer,
        caller: Caller<'_>,
        challenge_id: &str,
        code: &str,
    ) -> Result<String, ApiError> {
        let user_id = caller.user_id;
        let unknown = || ApiError::validation("challenge_id", "unknown or expired challenge");
        let stored = self.store.get(Kind::MfaChallenge, challenge_id).await?;
        let mut challenge = stored
            .and_then(|json| serde_json::from_str::<ChallengeRecord>(&json).ok())
            .filter(|c| c.user_id == user_id)
            .ok_or_else(unknown)?;
        if !self.attempt(sealer, caller, code).await? {
            // A challenge takes a few wrong answers, then a new one must be asked for.
            challenge.failures += 1;
            if challenge.failures >= CHALLENGE_FAILURES {
                self.store.delete(Kind::MfaChallenge, challenge_id).await?;
                return Err(ApiError::validation("code", "invalid code; this challenge is used up, ask for a new one"));
            }
            let json = to_json(&challenge)?;
            self.store
                .put_expiring(Kind::MfaChallenge, NO_PARTITION, challenge_id, json, challenge.expires_at_ms)
                .await?;
            return Err(ApiError::validation("code", "invalid or expired code"));
        }
        // Used once: of two answers racing on one challenge, only the one that takes it wins.
        self.store.take(Kind::MfaChallenge, challenge_id).await?.ok_or_else(unknown)?;
        let token = format!("mfa_{}", secrets::new_session_id());
        let expires_at_ms = Utc::now().timestamp_millis() + MFA_TTL.as_millis() as i64;
        let rec = TokenRecord { user_id: user_id.to_string() };
        self.store
            .put_expiring(Kind::MfaToken, NO_PARTITION, &secrets::hash_key(&token), to_json(&rec)?, expires_at_ms)
            .await?;
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
    pub async fn require(&self, sealer: &Sealer, caller: Caller<'_>, header: Option<&str>) -> Result<(), ApiError> {
        let user_id = caller.user_id;
        if !self.is_active(user_id) {
            return Ok(());
        }
        let message = match header.map(str::trim) {
            None | Some("") => "this action requires MFA: verify the challenge and retry with X-MFA-Token",
            Some(v) if is_code(v) || is_backup_code(v) => {
                if self.attempt(sealer, caller, v).await? {
                    return Ok(());
                }
                "invalid or already used MFA code"
            }
            Some(v) => {
                let taken = self.store.take(Kind::MfaToken, &secrets::hash_key(v)).await?;
                match taken.and_then(|json| serde_json::from_str::<TokenRecord>(&json).ok()) {
                    Some(t) if t.user_id == user_id => return Ok(()),
                    _ => "invalid, expired or already used MFA token",
                }
            }
        };
        Err(ApiError::MfaRequired { challenge_id: self.challenge(user_id).await?, message: message.into() })
    }
}

impl Mfa {
    /// Turns MFA off for a user (its own choice after the MFA gate, an owner's reset, or the
    /// operator's recovery): the seed and backup codes are forgotten, so enrolment starts anew.
    /// `false` when the user had no MFA record.
    pub async fn remove(&self, user_id: &str) -> Result<bool, ApiError> {
        if !self.records.contains_key(user_id) {
            return Ok(false);
        }
        self.store.delete(Kind::Mfa, user_id).await?;
        self.records.remove(user_id);
        // Its open challenges and unused tokens go too (a reset is rare: a scan is fine).
        for kind in [Kind::MfaChallenge, Kind::MfaToken] {
            for (id, json) in self.store.load_all(kind).await? {
                let owner = serde_json::from_str::<TokenRecord>(&json).map(|r| r.user_id).unwrap_or_default();
                if owner == user_id {
                    self.store.delete(kind, &id).await?;
                }
            }
        }
        self.credential_failures.retain(|(owner, _), _| owner != user_id);
        self.user_failures.remove(user_id);
        Ok(true)
    }
}

fn subtle_eq(a: &str, b: &str) -> bool {
    secrets::hashes_equal(a, b)
}
