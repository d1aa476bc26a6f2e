//! Multi-factor authentication (DESIGN Decision 9): per user one method, an authenticator app
//! (TOTP, RFC 6238, SHA-1, 6 digits, 30 s), a code sent by e-mail, or a code sent by text
//! message; backup codes with each; challenges and short-lived MFA tokens.
//!
//! The TOTP seed is sealed at rest like app credentials; backup codes are stored as SHA-256 hashes
//! and each works once. A code sent by e-mail or SMS belongs to one challenge (or to the
//! enrolment it confirms): six random digits, kept as a hash, valid 5 minutes, used once. Sending
//! is bounded (five codes per user per ten minutes, per instance) so that asking for challenges
//! cannot flood someone's inbox or phone; past the bound, or when sending fails, the challenge
//! still opens and a backup code answers it. The MFA records are read from the store at each use
//! (protected actions and sign-ins are rare), so every instance sharing a store enforces MFA as
//! soon as any of them activated it. Challenges and tokens live 5 minutes and are single use; they are
//! records of the store that expire (so a challenge asked of one instance can be answered on
//! another, and a token is used once across all: the store's `take` reads and removes it in one
//! step). A code is accepted once per 30-second step per user, so a code seen on the wire cannot
//! be replayed. The wrong-code bounds below count in the shared limiter
//! ([`Guesses`]): on Redis every instance counts in the same place, so several instances allow
//! together what one allows; on the embedded store they count in memory. The count of codes
//! sent stays in memory per instance, and forgets what bounds nothing any more (a [`Sweeper`]).
//!
//! A web sign-in's challenge is bound to the browser whose password check opened it (the hash
//! of a cookie set on that answer): only that browser answers it, at the web step, and an API
//! challenge is never answered there.
//!
//! Guessing is bounded. Wrong codes are counted per credential (user and key; for a web
//! sign-in, the browser's binding), forgotten an hour after the last once no lockout runs: five in a row
//! lock that credential out for 30 s, doubling with each further failure up to 15 minutes, and a
//! challenge is used up after three wrong answers. Wrong TOTP codes are also counted per user
//! across credentials (twenty per ten minutes, then TOTP codes are refused until the window
//! ends). The lockout cannot be turned against the owner: a leaked key guessing codes locks only
//! itself, and the per-user bound refuses TOTP codes only; backup codes (ten digits each, too
//! many to guess) and MFA tokens keep working, and an owner or the operator can reset MFA.

use crate::base::secrets::{self, Sealer};
use crate::base::time::now_ms;
use crate::data::limiter::Guesses;
use crate::data::store::{Kind, PutRecord, Store, StoreError, NO_PARTITION};
use crate::edge::error::ApiError;
use crate::outbound::courier::Courier;
use chrono::Utc;
use dashmap::DashMap;
use rand::rngs::OsRng;
use rand::Rng;
use serde::{Deserialize, Serialize};
use std::sync::Arc;
use std::time::{Duration, Instant};
use totp_rs::{Algorithm, Secret, TOTP};

/// How long a challenge, a sent code or an MFA token stays valid.
pub(crate) const MFA_TTL: Duration = Duration::from_secs(300);
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
pub(crate) const USER_WINDOW: Duration = Duration::from_secs(10 * 60);
/// Wrong answers a challenge (or a sent enrolment code) takes before it is used up.
const CHALLENGE_FAILURES: u8 = 3;
/// Codes sent to one user (e-mail or SMS) per [`USER_WINDOW`].
const SENDS_PER_WINDOW: u32 = 5;
/// How long a credential's wrong codes in a row are remembered after the last one, once its
/// lockout (if any) is over: past it, the entry is forgotten (and may be swept out).
const FORGET_AFTER: Duration = Duration::from_secs(60 * 60);
/// Entries a guess counter holds before a write sweeps out the expired ones.
pub(crate) const SWEEP_ABOVE: usize = 4096;
/// Least time between two sweeps of one counter.
const SWEEP_EVERY: Duration = Duration::from_secs(1);

/// How a user receives its codes.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum Method {
    /// An authenticator app (TOTP).
    #[default]
    Totp,
    Email,
    Sms,
}

impl Method {
    pub fn as_str(self) -> &'static str {
        match self {
            Method::Totp => "totp",
            Method::Email => "email",
            Method::Sms => "sms",
        }
    }
}

/// What enrolment is asked for: the method, and where its codes go.
#[derive(Debug, Clone)]
pub enum NewMethod {
    Totp { account: String },
    Email { address: String },
    Sms { phone_number: String },
}

/// A code sent by e-mail or SMS, as stored: its hash, when it expires, wrong answers so far.
#[derive(Debug, Clone, Serialize, Deserialize)]
struct SentCode {
    hash: String,
    expires_at_ms: i64,
    #[serde(default)]
    failures: u8,
}

/// An open challenge, as stored (kind `mfa_challenge`, expiring with it).
#[derive(Debug, Clone, Serialize, Deserialize)]
struct ChallengeRecord {
    user_id: String,
    /// Wrong answers so far.
    failures: u8,
    expires_at_ms: i64,
    /// The hash of the code sent for it (e-mail and SMS methods; none when sending failed or
    /// was bounded: then a backup code answers).
    #[serde(default)]
    code_hash: Option<String>,
    /// A web sign-in's challenge: the SHA-256 of the cookie set on the answer of the password
    /// check that opened it. Only the web sign-in's MFA step answers such a challenge, and only
    /// from the browser holding that cookie; `/auth/mfa/verify` answers only challenges without.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    browser: Option<String>,
}

/// An unused MFA token, as stored under the SHA-256 of its value (kind `mfa_token`).
#[derive(Debug, Clone, Serialize, Deserialize)]
struct TokenRecord {
    user_id: String,
}

#[derive(Debug, Clone, Serialize, Deserialize)]
pub(crate) struct MfaRecord {
    pub user_id: String,
    #[serde(default)]
    pub method: Method,
    /// Base32 TOTP seed, sealed (the TOTP method only; empty otherwise).
    #[serde(default)]
    pub sealed_secret: String,
    /// Where codes are sent: the e-mail address or the E.164 phone number.
    #[serde(default)]
    pub destination: Option<String>,
    /// Confirmed with a first code; until then MFA is not enforced.
    pub active: bool,
    /// SHA-256 of each unused backup code.
    pub backup_code_hashes: Vec<String>,
    /// Last accepted TOTP step, against replays.
    #[serde(default)]
    pub last_step: u64,
    /// The code sent at enrolment, which activation must give back (e-mail and SMS).
    #[serde(default)]
    enrolment_code: Option<SentCode>,
}

pub struct Enrolment {
    pub method: Method,
    /// The TOTP seed and its `otpauth://` URI (the TOTP method).
    pub totp: Option<(String, String)>,
    /// Where the first code went, partly hidden (e-mail and SMS).
    pub sent_to: Option<String>,
    pub backup_codes: Vec<String>,
}

/// A challenge just opened, and what the user is told about answering it.
pub struct Challenge {
    pub id: String,
    pub prompt: String,
}

pub struct Mfa {
    store: Arc<dyn Store>,
    courier: Arc<Courier>,
    /// When expired challenges and tokens were last swept from the store (ms since the epoch).
    last_sweep_ms: std::sync::atomic::AtomicI64,
    /// The wrong codes: in a row per credential (group: the user, member: the key id), and
    /// TOTP codes per user in a window ([`user_window`]); shared with the sign-in's bounds.
    guesses: Arc<Guesses>,
    /// user id -> codes sent in the current window.
    sends: DashMap<String, (u32, Instant)>,
    /// The sweep of `sends`.
    sends_sweep: Sweeper,
}

/// The group a user's credentials count their wrong codes in a row under.
fn credential_group(user_id: &str) -> String {
    format!("mfa codes:{user_id}")
}

/// The window a user's wrong TOTP codes (all credentials together) count in.
fn user_window(user_id: &str) -> String {
    format!("mfa totp codes:{user_id}")
}

/// How long a credential with `count` wrong codes in a row is locked after the last: none below
/// [`FREE_FAILURES`], then [`FIRST_LOCKOUT`] doubling with each further one, up to [`MAX_LOCKOUT`].
fn lockout(count: u32) -> Option<Duration> {
    let doublings = count.checked_sub(FREE_FAILURES)?.min(10);
    Some(FIRST_LOCKOUT.saturating_mul(1 << doublings).min(MAX_LOCKOUT))
}

/// Whether a fixed-window count (how many, since when) is still in its `window` at `now`.
pub(crate) fn in_window(window: Duration) -> impl Fn(&(u32, Instant), Instant) -> bool {
    move |count: &(u32, Instant), now: Instant| now.saturating_duration_since(count.1) < window
}

/// The sweep of one in-memory guess counter (wrong codes, wrong passwords, codes sent, events
/// per address): keyed by whoever guesses, such a map would otherwise keep an entry for every
/// credential, e-mail or address ever seen. A write calls [`Sweeper::sweep`] before it inserts;
/// once the map holds more than [`SWEEP_ABOVE`] entries, the entries that bound nothing any
/// more go, at most once a second (so a map full of live entries costs one pass a second).
#[derive(Debug)]
pub(crate) struct Sweeper {
    last: parking_lot::Mutex<Option<Instant>>,
}

impl Default for Sweeper {
    fn default() -> Self {
        Sweeper { last: parking_lot::Mutex::new(None) }
    }
}

impl Sweeper {
    /// Sweeps out of `map` the entries that are not `live` now, when it is due.
    pub(crate) fn sweep<K, V>(&self, map: &DashMap<K, V>, live: impl FnMut(&V, Instant) -> bool)
    where
        K: Eq + std::hash::Hash,
    {
        self.sweep_at(map, Instant::now(), live)
    }

    /// [`Sweeper::sweep`] as at `now`.
    pub(crate) fn sweep_at<K, V>(&self, map: &DashMap<K, V>, now: Instant, mut live: impl FnMut(&V, Instant) -> bool)
    where
        K: Eq + std::hash::Hash,
    {
        if map.len() <= SWEEP_ABOVE {
            return;
        }
        {
            let Some(mut last) = self.last.try_lock() else { return };
            if last.is_some_and(|l| now.saturating_duration_since(l) < SWEEP_EVERY) {
                return;
            }
            *last = Some(now);
        }
        map.retain(|_, v| live(v, now));
    }
}

/// Who is answering: the user the code belongs to and the credential sending it. Failures are
/// counted per credential, so that a leaked key guessing codes locks out itself, not the owner.
#[derive(Debug, Clone, Copy)]
pub struct Caller<'a> {
    pub user_id: &'a str,
    pub key_id: &'a str,
}

/// What a six-digit code is checked against.
#[derive(Debug, Clone, Copy)]
enum Expected<'a> {
    /// The authenticator app's current code.
    Authenticator,
    /// The code sent by e-mail or SMS, by its hash; `None` when none was sent (bounded or
    /// failed): then only a backup code answers.
    Sent(Option<&'a str>),
}

/// What kind of code was sent.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum CodeKind {
    Totp,
    /// A code toolgate sent by e-mail or SMS.
    Sent,
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

fn new_code() -> String {
    format!("{:06}", OsRng.gen_range(0..1_000_000))
}

fn expiry_ms() -> i64 {
    now_ms() + MFA_TTL.as_millis() as i64
}

/// An address or number with most of it hidden, for telling the user where a code went:
/// `a***@example.com`, `+*******4567`.
pub(crate) fn masked(destination: &str) -> String {
    match destination.split_once('@') {
        Some((local, domain)) => format!("{}***@{domain}", local.chars().next().unwrap_or('*')),
        None => {
            let keep = destination.len().saturating_sub(4);
            format!("+{}{}", "*".repeat(keep.saturating_sub(1)), &destination[keep..])
        }
    }
}

impl Mfa {
    /// The MFA service on `store`, counting wrong codes in `guesses` (the shared limiter).
    pub async fn load(store: Arc<dyn Store>, courier: Arc<Courier>, guesses: Arc<Guesses>) -> Result<Mfa, StoreError> {
        Ok(Mfa {
            store,
            courier,
            last_sweep_ms: std::sync::atomic::AtomicI64::new(0),
            guesses,
            sends: DashMap::new(),
            sends_sweep: Default::default(),
        })
    }

    /// The guessing bounds this service counts in, for the sign-in's to count in too.
    pub(crate) fn guesses(&self) -> &Arc<Guesses> {
        &self.guesses
    }

    async fn record(&self, user_id: &str) -> Result<Option<MfaRecord>, ApiError> {
        let Some(json) = self.store.get(Kind::Mfa, user_id).await? else { return Ok(None) };
        match serde_json::from_str::<MfaRecord>(&json) {
            Ok(r) => Ok(Some(r)),
            Err(e) => Err(ApiError::Internal(format!("unreadable MFA record of {user_id}: {e}"))),
        }
    }

    async fn save(&self, r: &MfaRecord) -> Result<(), ApiError> {
        self.store.put_record(Kind::Mfa, NO_PARTITION, &r.user_id, r).await?;
        Ok(())
    }

    pub(crate) async fn is_active(&self, user_id: &str) -> Result<bool, ApiError> {
        Ok(self.record(user_id).await?.is_some_and(|r| r.active))
    }

    /// The active method of a user, if MFA is on.
    pub(crate) async fn active_method(&self, user_id: &str) -> Result<Option<Method>, ApiError> {
        Ok(self.record(user_id).await?.filter(|r| r.active).map(|r| r.method))
    }

    /// Starts (or restarts, while not active) enrolment: a new seed or a first code sent, and
    /// new backup codes.
    pub async fn enroll(&self, sealer: &Sealer, user_id: &str, method: NewMethod) -> Result<Enrolment, ApiError> {
        if self.is_active(user_id).await? {
            return Err(ApiError::Conflict("MFA is already active for this user".into()));
        }
        let backup_codes: Vec<String> = (0..BACKUP_CODES)
            .map(|_| format!("{:05}-{:05}", OsRng.gen_range(0..100_000), OsRng.gen_range(0..100_000)))
            .collect();
        let mut record = MfaRecord {
            user_id: user_id.to_string(),
            method: Method::Totp,
            sealed_secret: String::new(),
            destination: None,
            active: false,
            backup_code_hashes: backup_codes.iter().map(|c| secrets::hash_key(c)).collect(),
            last_step: 0,
            enrolment_code: None,
        };
        let mut enrolment = Enrolment { method: Method::Totp, totp: None, sent_to: None, backup_codes };
        match method {
            NewMethod::Totp { account } => {
                let secret = Secret::generate_secret().to_encoded().to_string();
                let uri = totp(&secret, &account)?.get_url();
                record.sealed_secret = sealer.seal(secret.as_bytes());
                enrolment.totp = Some((secret, uri));
            }
            NewMethod::Email { address: to } | NewMethod::Sms { phone_number: to } => {
                let sms = to.starts_with('+');
                record.method = if sms { Method::Sms } else { Method::Email };
                if !self.may_send(user_id) {
                    return Err(ApiError::too_many("MFA codes sent to this user", USER_WINDOW));
                }
                let code = new_code();
                self.send(record.method, &to, &code).await.map_err(|e| {
                    ApiError::validation(
                        if sms { "phone_number" } else { "method" },
                        format!("the first code could not be sent: {e}"),
                    )
                })?;
                record.enrolment_code =
                    Some(SentCode { hash: secrets::hash_key(&code), expires_at_ms: expiry_ms(), failures: 0 });
                enrolment.method = record.method;
                enrolment.sent_to = Some(masked(&to));
                record.destination = Some(to);
            }
        }
        self.save(&record).await?;
        Ok(enrolment)
    }

    /// Counts a code about to be sent to `user_id`; `false` past the bound.
    fn may_send(&self, user_id: &str) -> bool {
        self.sends_sweep.sweep(&self.sends, in_window(USER_WINDOW));
        let mut entry = self.sends.entry(user_id.to_string()).or_insert((0, Instant::now()));
        if entry.1.elapsed() >= USER_WINDOW {
            *entry = (0, Instant::now());
        }
        if entry.0 >= SENDS_PER_WINDOW {
            return false;
        }
        entry.0 += 1;
        true
    }

    async fn send(&self, method: Method, to: &str, code: &str) -> Result<(), crate::outbound::courier::CourierError> {
        let text = format!("Your toolgate verification code is {code}. It expires in 5 minutes.");
        match method {
            Method::Sms => self.courier.text(to, &text).await,
            _ => {
                let body = format!("{text}\n\nIf you did not ask for it, someone may know your password.\n");
                // The code stays out of the subject: subjects show on lock screens and in
                // notification previews, and mail systems log them.
                self.courier.email(to, "toolgate verification code", body, None).await
            }
        }
    }

    /// Checks a current TOTP code, once per step; updates the record on success.
    async fn check_totp(&self, sealer: &Sealer, user_id: &str, code: &str) -> Result<bool, ApiError> {
        let Some(mut r) = self.record(user_id).await?.filter(|r| r.method == Method::Totp) else {
            return Ok(false);
        };
        let secret =
            String::from_utf8(sealer.open(&r.sealed_secret).map_err(|e| ApiError::failed("opening a TOTP seed", e))?)
                .map_err(|_| ApiError::Internal("bad TOTP seed".into()))?;
        let t = totp(&secret, user_id)?;
        let now = Utc::now().timestamp().max(0) as u64;
        // The current step and one on each side, for clock skew.
        for step in [now / 30, now / 30 - 1, now / 30 + 1] {
            if step > r.last_step && subtle_eq(&t.generate(step * 30), code) {
                r.last_step = step;
                self.save(&r).await?;
                return Ok(true);
            }
        }
        Ok(false)
    }

    /// Refuses a credential (or, for TOTP codes, a user) that has sent too many wrong codes.
    async fn check_lockout(&self, caller: Caller<'_>, kind: CodeKind) -> Result<(), ApiError> {
        let group = credential_group(caller.user_id);
        if let Some((count, ago)) = self.guesses.streak(&group, caller.key_id, FORGET_AFTER).await {
            if let Some(left) = lockout(count).and_then(|l| l.checked_sub(ago)).filter(|l| !l.is_zero()) {
                return Err(too_many(left));
            }
        }
        if kind == CodeKind::Totp {
            if let Some(left) = self.guesses.full(&user_window(caller.user_id), USER_TOTP_FAILURES, USER_WINDOW).await {
                return Err(too_many(left));
            }
        }
        Ok(())
    }

    /// Counts a wrong code against the credential (and the user, for TOTP codes).
    async fn record_failure(&self, caller: Caller<'_>, kind: CodeKind) {
        self.guesses.miss(&credential_group(caller.user_id), caller.key_id, FORGET_AFTER).await;
        if kind == CodeKind::Totp {
            // Refused past the limit, which is what the check above reads.
            let _ = self.guesses.count(&user_window(caller.user_id), USER_TOTP_FAILURES, USER_WINDOW).await;
        }
    }

    async fn record_success(&self, caller: Caller<'_>) {
        self.guesses.clear(&credential_group(caller.user_id), Some(caller.key_id)).await;
    }

    /// Checks a code under the lockout rules: a backup code, or a six-digit code against what
    /// `expected` says. `Ok(false)` for a wrong code (counted), `Err` while locked out.
    async fn attempt(
        &self,
        sealer: &Sealer,
        caller: Caller<'_>,
        code: &str,
        expected: Expected<'_>,
    ) -> Result<bool, ApiError> {
        let kind = match (is_code(code), expected) {
            (false, _) => CodeKind::Backup,
            (true, Expected::Sent(_)) => CodeKind::Sent,
            (true, Expected::Authenticator) => CodeKind::Totp,
        };
        self.check_lockout(caller, kind).await?;
        let ok = if kind == CodeKind::Backup {
            is_backup_code(code) && self.use_backup(caller.user_id, code).await?
        } else {
            match expected {
                Expected::Authenticator => self.check_totp(sealer, caller.user_id, code).await?,
                Expected::Sent(hash) => hash.is_some_and(|hash| secrets::hashes_equal(hash, &secrets::hash_key(code))),
            }
        };
        if ok {
            self.record_success(caller).await;
        } else {
            self.record_failure(caller, kind).await;
        }
        Ok(ok)
    }

    /// Confirms enrolment with a first code: the authenticator's, or the one sent.
    pub async fn activate(&self, sealer: &Sealer, caller: Caller<'_>, code: &str) -> Result<(), ApiError> {
        let user_id = caller.user_id;
        let Some(mut r) = self.record(user_id).await? else {
            return Err(ApiError::validation("code", "start with POST /auth/mfa/enroll"));
        };
        if r.active {
            return Err(ApiError::Conflict("MFA is already active for this user".into()));
        }
        if !is_code(code) {
            return Err(ApiError::validation("code", "must be the six-digit code (authenticator, e-mail or SMS)"));
        }
        let sent = match (&r.method, &r.enrolment_code) {
            (Method::Totp, _) => None,
            (_, Some(c)) if c.expires_at_ms > now_ms() => Some(c.hash.clone()),
            (_, _) => return Err(ApiError::validation("code", "the code expired: enrol again for a new one")),
        };
        let expected = match (&r.method, &sent) {
            (Method::Totp, _) => Expected::Authenticator,
            (_, hash) => Expected::Sent(hash.as_deref()),
        };
        if !self.attempt(sealer, caller, code, expected).await? {
            if let Some(c) = r.enrolment_code.as_mut() {
                c.failures += 1;
                if c.failures >= CHALLENGE_FAILURES {
                    r.enrolment_code = None;
                    self.save(&r).await?;
                    return Err(ApiError::validation("code", "invalid code; it is used up, enrol again for a new one"));
                }
                self.save(&r).await?;
            }
            return Err(ApiError::validation("code", "invalid or expired code"));
        }
        // Read again: a TOTP check has just saved its step.
        let mut r = self.record(user_id).await?.ok_or(ApiError::NotFound("mfa"))?;
        r.active = true;
        r.enrolment_code = None;
        self.save(&r).await
    }

    /// A new challenge for a protected action of the API, stored so that any instance can
    /// answer it. For the e-mail and SMS methods a code is sent with it.
    pub async fn challenge(&self, user_id: &str) -> Result<Challenge, ApiError> {
        self.open_challenge(user_id, None).await
    }

    /// A new challenge for a web sign-in whose password check just passed, bound to the browser
    /// by `browser`, the SHA-256 of a cookie set on that check's answer: only
    /// [`Mfa::verify_web`] with the same hash answers it.
    pub(crate) async fn web_challenge(&self, user_id: &str, browser: &str) -> Result<Challenge, ApiError> {
        self.open_challenge(user_id, Some(browser.to_string())).await
    }

    async fn open_challenge(&self, user_id: &str, browser: Option<String>) -> Result<Challenge, ApiError> {
        self.sweep_now_and_then().await;
        let id = secrets::new_id("mfa_ch");
        let record = self.record(user_id).await?.filter(|r| r.active);
        let mut rec = ChallengeRecord {
            user_id: user_id.to_string(),
            failures: 0,
            expires_at_ms: expiry_ms(),
            code_hash: None,
            browser,
        };
        let prompt = match record.as_ref().map(|r| (r.method, r.destination.as_deref())) {
            None | Some((Method::Totp, _)) => "Enter the code of your authenticator app, or a backup code.".to_string(),
            Some((method, Some(to))) => {
                let by = if method == Method::Sms { "text message" } else { "e-mail" };
                if !self.may_send(user_id) {
                    "Too many codes were sent recently: answer with a backup code, or wait ten minutes.".to_string()
                } else {
                    let code = new_code();
                    match self.send(method, to, &code).await {
                        Ok(()) => {
                            rec.code_hash = Some(secrets::hash_key(&code));
                            format!("A code was sent by {by} to {}; it expires in 5 minutes.", masked(to))
                        }
                        Err(e) => {
                            tracing::error!(user = user_id, method = method.as_str(), error = %e, "cannot send an MFA code");
                            format!("The code could not be sent by {by}: answer with a backup code.")
                        }
                    }
                }
            }
            Some((_, None)) => "Answer with a backup code.".to_string(),
        };
        self.store.put_record_until(Kind::MfaChallenge, NO_PARTITION, &id, &rec, rec.expires_at_ms).await?;
        Ok(Challenge { id, prompt })
    }

    /// The user a web sign-in's open challenge was asked of, when `browser` (the SHA-256 of the
    /// browser's cookie) is the one it is bound to (`None` when it is unknown, expired, used up,
    /// an API challenge, or another browser's): web sign-in learns whom it is signing in from
    /// the challenge and the browser alone.
    pub(crate) async fn web_challenge_user(
        &self,
        challenge_id: &str,
        browser: &str,
    ) -> Result<Option<String>, ApiError> {
        let stored = self.store.get(Kind::MfaChallenge, challenge_id).await?;
        let now = now_ms();
        Ok(stored
            .and_then(|json| serde_json::from_str::<ChallengeRecord>(&json).ok())
            .filter(|c| c.expires_at_ms > now && bound_to(c, Some(browser)))
            .map(|c| c.user_id))
    }

    /// Expired challenges and tokens are never read; this removes them from the store, at most
    /// once a minute, on the way of a new challenge.
    async fn sweep_now_and_then(&self) {
        use std::sync::atomic::Ordering;
        let now = now_ms();
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

    /// Answers an API challenge (an `MFA_REQUIRED` answer's) with a code (the authenticator's,
    /// or the one sent for it) or a backup code; returns an MFA token (single use). A web
    /// sign-in's challenge is not answered here.
    pub async fn verify(
        &self,
        sealer: &Sealer,
        caller: Caller<'_>,
        challenge_id: &str,
        code: &str,
    ) -> Result<String, ApiError> {
        self.answer(sealer, caller, challenge_id, code, None).await?;
        let token = format!("mfa_{}", secrets::new_session_id());
        let rec = TokenRecord { user_id: caller.user_id.to_string() };
        let hash = secrets::hash_key(&token);
        self.store.put_record_until(Kind::MfaToken, NO_PARTITION, &hash, &rec, expiry_ms()).await?;
        Ok(token)
    }

    /// Answers a web sign-in's challenge from the browser whose cookie hashes to `browser`.
    /// Wrong codes count against that browser's sign-in (the credential a browser holds), so
    /// nobody else's wrong codes lock the user out of web sign-in.
    pub(crate) async fn verify_web(
        &self,
        sealer: &Sealer,
        user_id: &str,
        challenge_id: &str,
        code: &str,
        browser: &str,
    ) -> Result<(), ApiError> {
        let key_id = format!("web:{browser}");
        let caller = Caller { user_id, key_id: &key_id };
        self.answer(sealer, caller, challenge_id, code, Some(browser)).await
    }

    /// Checks `code` against an open challenge of the caller's user bound to `browser` (none
    /// for the API's), and takes the challenge when it is right.
    async fn answer(
        &self,
        sealer: &Sealer,
        caller: Caller<'_>,
        challenge_id: &str,
        code: &str,
        browser: Option<&str>,
    ) -> Result<(), ApiError> {
        let user_id = caller.user_id;
        let unknown = || ApiError::validation("challenge_id", "unknown or expired challenge");
        let stored = self.store.get(Kind::MfaChallenge, challenge_id).await?;
        let mut challenge = stored
            .and_then(|json| serde_json::from_str::<ChallengeRecord>(&json).ok())
            .filter(|c| c.user_id == user_id && c.expires_at_ms > now_ms() && bound_to(c, browser))
            .ok_or_else(unknown)?;
        let sends_codes = self.record(user_id).await?.is_some_and(|r| r.active && r.method != Method::Totp);
        let expected = if sends_codes || challenge.code_hash.is_some() {
            Expected::Sent(challenge.code_hash.as_deref())
        } else {
            Expected::Authenticator
        };
        if !self.attempt(sealer, caller, code, expected).await? {
            // A challenge takes a few wrong answers, then a new one must be asked for.
            challenge.failures += 1;
            if challenge.failures >= CHALLENGE_FAILURES {
                self.store.delete(Kind::MfaChallenge, challenge_id).await?;
                return Err(ApiError::validation("code", "invalid code; this challenge is used up, ask for a new one"));
            }
            let until = challenge.expires_at_ms;
            self.store.put_record_until(Kind::MfaChallenge, NO_PARTITION, challenge_id, &challenge, until).await?;
            return Err(ApiError::validation("code", "invalid or expired code"));
        }
        // Used once: of two answers racing on one challenge, only the one that takes it wins.
        self.store.take(Kind::MfaChallenge, challenge_id).await?.ok_or_else(unknown)?;
        Ok(())
    }

    async fn use_backup(&self, user_id: &str, code: &str) -> Result<bool, ApiError> {
        let Some(mut r) = self.record(user_id).await? else { return Ok(false) };
        let h = secrets::hash_key(code.trim());
        let Some(pos) = r.backup_code_hashes.iter().position(|c| secrets::hashes_equal(c, &h)) else {
            return Ok(false);
        };
        r.backup_code_hashes.remove(pos);
        self.save(&r).await?;
        Ok(true)
    }

    /// The gate of a protected action: passes when the user has no active MFA, or when
    /// `X-MFA-Token` holds a current authenticator code, a backup code or an unused token;
    /// otherwise `MFA_REQUIRED` with a fresh challenge (which, for the e-mail and SMS methods,
    /// sends a code: those codes are given to `POST /auth/mfa/verify`, not to the header).
    pub(crate) async fn check_gate(
        &self,
        sealer: &Sealer,
        caller: Caller<'_>,
        header: Option<&str>,
    ) -> Result<(), ApiError> {
        let user_id = caller.user_id;
        let Some(method) = self.active_method(user_id).await? else {
            return Ok(());
        };
        let message = match header.map(str::trim) {
            None | Some("") => "this action requires MFA: verify the challenge and retry with X-MFA-Token",
            Some(v) if is_code(v) && method != Method::Totp => {
                "a sent code answers its challenge: POST it to /auth/mfa/verify and retry with the MFA token"
            }
            Some(v) if is_code(v) || is_backup_code(v) => {
                if self.attempt(sealer, caller, v, Expected::Authenticator).await? {
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
        let challenge = self.challenge(user_id).await?;
        Err(ApiError::MfaRequired { challenge_id: challenge.id, message: format!("{message}. {}", challenge.prompt) })
    }
}

impl Mfa {
    /// Turns MFA off for a user (its own choice after the MFA gate, an owner's reset, or the
    /// operator's recovery): the seed and backup codes are forgotten, so enrolment starts anew.
    /// `false` when the user had no MFA record.
    pub async fn remove(&self, user_id: &str) -> Result<bool, ApiError> {
        if !self.store.delete(Kind::Mfa, user_id).await? {
            return Ok(false);
        }
        // Its open challenges and unused tokens go too (a reset is rare: a scan is fine).
        for kind in [Kind::MfaChallenge, Kind::MfaToken] {
            for (id, json) in self.store.load_all(kind).await? {
                let owner = serde_json::from_str::<TokenRecord>(&json).map(|r| r.user_id).unwrap_or_default();
                if owner == user_id {
                    self.store.delete(kind, &id).await?;
                }
            }
        }
        self.guesses.clear(&credential_group(user_id), None).await;
        self.guesses.forget(&user_window(user_id)).await;
        Ok(true)
    }
}

/// Whether challenge `c` is bound to `browser`: an API challenge to none, a web sign-in's to
/// the hash of its browser's cookie (compared in constant time).
fn bound_to(c: &ChallengeRecord, browser: Option<&str>) -> bool {
    match (c.browser.as_deref(), browser) {
        (None, None) => true,
        (Some(bound), Some(given)) => secrets::hashes_equal(bound, given),
        _ => false,
    }
}

fn subtle_eq(a: &str, b: &str) -> bool {
    secrets::hashes_equal(a, b)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn mfa(dir: &std::path::Path) -> Mfa {
        let store: Arc<dyn Store> = Arc::new(crate::data::store::EmbeddedStore::open(dir).unwrap());
        let rt = tokio::runtime::Builder::new_current_thread().build().unwrap();
        rt.block_on(Mfa::load(store, Arc::new(Courier::default()), Arc::new(Guesses::local()))).unwrap()
    }

    #[tokio::test]
    async fn five_wrong_codes_in_a_row_lock_the_credential_and_twenty_totp_codes_the_user() {
        let dir = tempfile::tempdir().unwrap();
        let store: Arc<dyn Store> = Arc::new(crate::data::store::EmbeddedStore::open(dir.path()).unwrap());
        let mfa = Mfa::load(store, Arc::new(Courier::default()), Arc::new(Guesses::local())).await.unwrap();
        let key = |k| Caller { user_id: "usr_a", key_id: k };
        for _ in 0..FREE_FAILURES - 1 {
            mfa.record_failure(key("k1"), CodeKind::Backup).await;
        }
        mfa.check_lockout(key("k1"), CodeKind::Backup).await.unwrap();
        // A success ends the streak: four more are still free.
        mfa.record_success(key("k1")).await;
        for _ in 0..FREE_FAILURES - 1 {
            mfa.record_failure(key("k1"), CodeKind::Backup).await;
        }
        mfa.check_lockout(key("k1"), CodeKind::Backup).await.unwrap();
        mfa.record_failure(key("k1"), CodeKind::Backup).await;
        assert!(mfa.check_lockout(key("k1"), CodeKind::Backup).await.is_err(), "the fifth in a row locks");
        mfa.check_lockout(key("k2"), CodeKind::Backup).await.unwrap();

        // Wrong TOTP codes from many credentials: the twentieth refuses TOTP codes for the user.
        for i in 0..USER_TOTP_FAILURES {
            let id = format!("t{i}");
            mfa.check_lockout(Caller { user_id: "usr_a", key_id: &id }, CodeKind::Totp).await.unwrap();
            mfa.record_failure(Caller { user_id: "usr_a", key_id: &id }, CodeKind::Totp).await;
        }
        assert!(mfa.check_lockout(key("fresh"), CodeKind::Totp).await.is_err());
        mfa.check_lockout(key("fresh"), CodeKind::Backup).await.unwrap();
    }

    #[test]
    fn codes_sent_are_swept_out_once_their_window_ended() {
        let dir = tempfile::tempdir().unwrap();
        let mfa = mfa(dir.path());
        let now = Instant::now();
        for i in 0..SWEEP_ABOVE + 10 {
            mfa.sends.insert(format!("usr_{i}"), (5, now));
        }
        let during = now + USER_WINDOW - Duration::from_secs(1);
        mfa.sends_sweep.sweep_at(&mfa.sends, during, in_window(USER_WINDOW));
        assert_eq!(mfa.sends.len(), SWEEP_ABOVE + 10, "still in their window");
        let after = now + USER_WINDOW;
        mfa.sends_sweep.sweep_at(&mfa.sends, after + SWEEP_EVERY, in_window(USER_WINDOW));
        assert!(mfa.sends.is_empty());
    }

    #[test]
    fn the_lockout_is_thirty_seconds_doubling_up_to_fifteen_minutes() {
        assert_eq!(lockout(FREE_FAILURES - 1), None);
        assert_eq!(lockout(FREE_FAILURES), Some(Duration::from_secs(30)));
        assert_eq!(lockout(FREE_FAILURES + 1), Some(Duration::from_secs(60)));
        assert_eq!(lockout(FREE_FAILURES + 4), Some(Duration::from_secs(480)));
        assert_eq!(lockout(FREE_FAILURES + 5), Some(MAX_LOCKOUT));
        assert_eq!(lockout(u32::MAX), Some(MAX_LOCKOUT));
        assert!(lockout(FREE_FAILURES + 5).unwrap() < FORGET_AFTER, "a lockout ends before its streak is forgotten");
    }
}
