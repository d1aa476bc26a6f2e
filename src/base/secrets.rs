//! Secret material: API key generation and hashing, random identifiers, and sealing of app
//! credentials at rest (AES-256-GCM under a key kept beside the data or given in the
//! environment).

use aes_gcm::aead::{Aead, KeyInit};
use aes_gcm::{Aes256Gcm, Nonce};
use base64::engine::general_purpose::STANDARD as B64;
use base64::Engine;
use rand::distributions::Alphanumeric;
use rand::rngs::OsRng;
use rand::{Rng, RngCore};
use sha2::{Digest, Sha256};
use std::path::Path;
use subtle::ConstantTimeEq;

/// Every key starts with this prefix (DESIGN contract).
pub(crate) const KEY_PREFIX: &str = "ag_";
/// Random characters after the prefix: 40 alphanumerics, about 238 bits.
const KEY_RANDOM_LEN: usize = 40;

/// Random alphanumerics from the thread's CSPRNG (ChaCha, seeded and periodically reseeded from
/// the OS): one `getrandom` syscall per character would cost more than the rest of a request.
pub(crate) fn random_alnum(len: usize) -> String {
    rand::thread_rng().sample_iter(&Alphanumeric).take(len).map(char::from).collect()
}

/// A new API key: `ag_` + 40 CSPRNG alphanumerics.
pub(crate) fn new_api_key() -> String {
    format!("{KEY_PREFIX}{}", random_alnum(KEY_RANDOM_LEN))
}

/// A new identifier such as `gw_3kF9...`.
pub(crate) fn new_id(prefix: &str) -> String {
    format!("{prefix}_{}", random_alnum(16).to_ascii_lowercase())
}

/// An identifier that sorts by creation time (`log_0193a5f3c2e1ab12cd34`), so that the request
/// log's inserts append to its index instead of landing at random places. Written into `out`
/// (cleared first), so that a writer of thousands of rows reuses one buffer.
pub fn write_ordered_id(out: &mut String, prefix: &str, ts_ms: i64) {
    use std::fmt::Write as _;
    out.clear();
    // Writing into a String cannot fail.
    let _ = write!(out, "{prefix}_{:012x}", ts_ms.max(0));
    // Eight characters of 32 (40 bits), one random byte each: a fifth of what sampling the
    // alphanumerics cost, and every entry of the request log pays it.
    const ALPHABET: &[u8; 32] = b"abcdefghijklmnopqrstuvwxyz234567";
    let mut bytes = [0u8; 8];
    rand::thread_rng().fill_bytes(&mut bytes);
    out.extend(bytes.iter().map(|b| char::from(ALPHABET[usize::from(b & 31)])));
}

/// A session id: 32 CSPRNG bytes as hex.
pub(crate) fn new_session_id() -> String {
    let mut b = [0u8; 32];
    rand::thread_rng().fill_bytes(&mut b);
    hex::encode(b)
}

/// An MCP session id: 64 hex characters like [`new_session_id`]'s, the first 12 the creation
/// time in milliseconds and the other 52 from 26 CSPRNG bytes (208 bits, still unguessable).
/// Why ordered: a store keeps sessions in a B-tree by id, and random ids put each new session on
/// a page of its own, so a group commit of a hundred sessions rewrote some 200 pages (the table's
/// and its index's) and the checkpoint copied them back; ids that sort by time land side by side
/// on a few pages at the tree's edge.
pub(crate) fn new_ordered_session_id(ts_ms: i64) -> String {
    use std::fmt::Write as _;
    let mut b = [0u8; 26];
    rand::thread_rng().fill_bytes(&mut b);
    let mut id = String::with_capacity(64);
    // Writing into a String cannot fail; 12 hex digits hold milliseconds until the year 10889.
    let _ = write!(id, "{:012x}", ts_ms.clamp(0, 0xffff_ffff_ffff));
    id.push_str(&hex::encode(b));
    id
}

/// Lower-case hex SHA-256 of a key: what the store keeps.
pub(crate) fn hash_key(key: &str) -> String {
    hex::encode(Sha256::digest(key.as_bytes()))
}

/// SHA-256 of a key as bytes: the in-memory index key.
pub(crate) fn hash_key_bytes(key: &str) -> [u8; 32] {
    Sha256::digest(key.as_bytes()).into()
}

/// A stored hex digest as bytes.
pub(crate) fn hash_from_hex(hex_digest: &str) -> Option<[u8; 32]> {
    let mut out = [0u8; 32];
    hex::decode_to_slice(hex_digest, &mut out).ok()?;
    Some(out)
}

/// Constant-time equality of two digests.
pub(crate) fn digests_equal(a: &[u8; 32], b: &[u8; 32]) -> bool {
    bool::from(a.ct_eq(b))
}

/// Constant-time equality of two hex hashes.
pub(crate) fn hashes_equal(a: &str, b: &str) -> bool {
    a.len() == b.len() && bool::from(a.as_bytes().ct_eq(b.as_bytes()))
}

#[derive(Debug, thiserror::Error)]
pub enum SealError {
    #[error("credential key file {0}: {1}")]
    KeyFile(String, String),
    #[error("sealed credentials cannot be opened")]
    Open,
}

/// HMAC-SHA256 of `message` under `key`.
pub(crate) fn hmac_sha256(key: &[u8], message: &[u8]) -> [u8; 32] {
    use hmac::Mac;
    let mut mac = <hmac::Hmac<Sha256> as Mac>::new_from_slice(key).expect("HMAC takes a key of any length");
    mac.update(message);
    mac.finalize().into_bytes().into()
}

/// The master key's file in the embedded store's directory (`storage.path`).
pub(crate) const KEY_FILE: &str = "secret.key";
/// The key a rotation moves to (`toolgate keys rotate`): while it is there, values are sealed
/// under it and opened under either key, so that a rotation stopped midway loses nothing and
/// running it again finishes it.
pub(crate) const NEXT_KEY_FILE: &str = "secret.key.next";
/// The master key from the environment (every instance sharing a Redis store).
pub(crate) const KEY_ENV: &str = "TOOLGATE_SECRET_KEY";
/// The master key before a rotation, from the environment: opened, never sealed under.
pub(crate) const PREVIOUS_KEY_ENV: &str = "TOOLGATE_SECRET_KEY_PREVIOUS";

/// Seals and opens app credentials.
pub struct Sealer {
    cipher: Aes256Gcm,
    /// The master key itself, from which [`Sealer::derive`] makes keys of other uses.
    key: [u8; 32],
    /// The key of a rotation under way ([`NEXT_KEY_FILE`], [`PREVIOUS_KEY_ENV`]): what was
    /// sealed under it still opens, nothing new is sealed under it.
    previous: Option<Aes256Gcm>,
}

/// 64 hex characters (surrounding blanks aside) as a key; `what` names where they came from.
pub(crate) fn parse_key(text: &str, what: &str) -> Result<[u8; 32], SealError> {
    hex::decode(text.trim())
        .ok()
        .and_then(|b| <[u8; 32]>::try_from(b).ok())
        .ok_or_else(|| SealError::KeyFile(what.into(), "must be 64 hex characters".into()))
}

/// The key in `path`, `None` when there is no such file.
pub(crate) fn read_key_file(path: &Path) -> Result<Option<[u8; 32]>, SealError> {
    match std::fs::read_to_string(path) {
        Ok(text) => parse_key(&text, &path.display().to_string()).map(Some),
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => Ok(None),
        Err(e) => Err(SealError::KeyFile(path.display().to_string(), e.to_string())),
    }
}

/// Writes `key` to `path` (mode 0600) whole or not at all: a temporary file synced, renamed,
/// and the directory synced, so that a crash leaves either no file or the key.
pub(crate) fn write_key_file(path: &Path, key: &[u8; 32]) -> Result<(), SealError> {
    let err = |e: std::io::Error| SealError::KeyFile(path.display().to_string(), e.to_string());
    let tmp = path.with_extension("tmp");
    let _ = std::fs::remove_file(&tmp);
    write_private(&tmp, &hex::encode(key)).map_err(err)?;
    std::fs::rename(&tmp, path).map_err(err)?;
    sync_parent(path).map_err(err)
}

/// Syncs the directory holding `path`, so that a rename or a new file in it survives a crash.
pub(crate) fn sync_parent(path: &Path) -> std::io::Result<()> {
    match path.parent() {
        Some(dir) => std::fs::File::open(dir)?.sync_all(),
        None => Ok(()),
    }
}

/// A new random master key.
pub(crate) fn new_master_key() -> [u8; 32] {
    let mut b = [0u8; 32];
    OsRng.fill_bytes(&mut b);
    b
}

impl Sealer {
    /// Uses `TOOLGATE_SECRET_KEY` (64 hex chars) if set, else `dir/secret.key`, made on first use
    /// with mode 0600. While a rotation is under way (`dir/secret.key.next`, or
    /// `TOOLGATE_SECRET_KEY_PREVIOUS` beside the variable) it seals under the new key and opens
    /// under either.
    pub fn load(dir: &Path) -> Result<Sealer, SealError> {
        if std::env::var_os(KEY_ENV).is_some() {
            return Sealer::from_env();
        }
        let path = dir.join(KEY_FILE);
        let current = match read_key_file(&path)? {
            Some(key) => key,
            None => {
                let err = |e: std::io::Error| SealError::KeyFile(path.display().to_string(), e.to_string());
                {
                    use std::os::unix::fs::DirBuilderExt;
                    std::fs::DirBuilder::new().recursive(true).mode(0o700).create(dir).map_err(err)?;
                }
                let key = new_master_key();
                write_private(&path, &hex::encode(key)).map_err(err)?;
                key
            }
        };
        Ok(match read_key_file(&dir.join(NEXT_KEY_FILE))? {
            Some(next) => Sealer::rotating(next, current),
            None => Sealer::from_key(current),
        })
    }

    /// Uses `TOOLGATE_SECRET_KEY`, which several instances sharing one store must all be given
    /// (each seals what the others open): no key file is made.
    pub fn shared() -> Result<Sealer, SealError> {
        if std::env::var_os(KEY_ENV).is_none() {
            return Err(SealError::KeyFile(
                KEY_ENV.into(),
                "required with storage.backend: redis (the same 64 hex characters on every instance)".into(),
            ));
        }
        Sealer::from_env()
    }

    /// `TOOLGATE_SECRET_KEY`, and `TOOLGATE_SECRET_KEY_PREVIOUS` when a rotation is under way.
    fn from_env() -> Result<Sealer, SealError> {
        let text = std::env::var(KEY_ENV).map_err(|_| SealError::KeyFile(KEY_ENV.into(), "must be set".into()))?;
        let key = parse_key(&text, KEY_ENV)?;
        Ok(match std::env::var(PREVIOUS_KEY_ENV).ok().filter(|v| !v.trim().is_empty()) {
            Some(previous) => Sealer::rotating(key, parse_key(&previous, PREVIOUS_KEY_ENV)?),
            None => Sealer::from_key(key),
        })
    }

    /// A sealer with the given key (tests; a key from elsewhere than the environment or the file).
    pub(crate) fn from_key(key: [u8; 32]) -> Sealer {
        Sealer { cipher: Aes256Gcm::new(&key.into()), key, previous: None }
    }

    /// A sealer in the middle of a rotation from `previous` to `key`.
    pub fn rotating(key: [u8; 32], previous: [u8; 32]) -> Sealer {
        Sealer { previous: Some(Aes256Gcm::new(&previous.into())), ..Sealer::from_key(key) }
    }

    /// Whether a rotation is under way (values may still be sealed under the previous key).
    #[cfg(test)]
    pub(crate) fn is_rotating(&self) -> bool {
        self.previous.is_some()
    }

    /// A key for another use than sealing, derived from the master key:
    /// HMAC-SHA256(master key, `label`). Whoever holds the master key derives the same.
    pub fn derive(&self, label: &[u8]) -> [u8; 32] {
        hmac_sha256(&self.key, label)
    }

    pub(crate) fn seal(&self, plaintext: &[u8]) -> String {
        let mut nonce = [0u8; 12];
        OsRng.fill_bytes(&mut nonce);
        let ct = self.cipher.encrypt(Nonce::from_slice(&nonce), plaintext).expect("AES-GCM encryption cannot fail");
        let mut out = nonce.to_vec();
        out.extend_from_slice(&ct);
        B64.encode(out)
    }

    /// Opens a value sealed under the key, or under the previous one during a rotation (AES-GCM's
    /// tag tells which: a value opens under one key only).
    pub fn open(&self, sealed: &str) -> Result<Vec<u8>, SealError> {
        let raw = B64.decode(sealed).map_err(|_| SealError::Open)?;
        if raw.len() < 12 {
            return Err(SealError::Open);
        }
        let (nonce, ct) = raw.split_at(12);
        let nonce = Nonce::from_slice(nonce);
        match self.cipher.decrypt(nonce, ct) {
            Ok(plain) => Ok(plain),
            Err(_) => match &self.previous {
                Some(previous) => previous.decrypt(nonce, ct).map_err(|_| SealError::Open),
                None => Err(SealError::Open),
            },
        }
    }

    /// `sealed` sealed under the key: `None` when it already is (a rotation run again skips
    /// it), the value sealed anew when it was under the previous key, an error when neither
    /// key opens it.
    pub(crate) fn reseal(&self, sealed: &str) -> Result<Option<String>, SealError> {
        let raw = B64.decode(sealed).map_err(|_| SealError::Open)?;
        if raw.len() < 12 {
            return Err(SealError::Open);
        }
        let (nonce, ct) = raw.split_at(12);
        if self.cipher.decrypt(Nonce::from_slice(nonce), ct).is_ok() {
            return Ok(None);
        }
        let previous = self.previous.as_ref().ok_or(SealError::Open)?;
        let plain = previous.decrypt(Nonce::from_slice(nonce), ct).map_err(|_| SealError::Open)?;
        Ok(Some(self.seal(&plain)))
    }
}

fn write_private(path: &Path, content: &str) -> std::io::Result<()> {
    use std::io::Write;
    use std::os::unix::fs::OpenOptionsExt;
    let mut f = std::fs::OpenOptions::new().write(true).create_new(true).mode(0o600).open(path)?;
    f.write_all(content.as_bytes())?;
    f.sync_all()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn ordered_session_ids_are_hex_of_the_same_length_and_sort_by_time() {
        let a = new_ordered_session_id(0x0193_a5f3_c2e1);
        let b = new_ordered_session_id(0x0193_a5f3_c2e1);
        let c = new_ordered_session_id(0x0193_a5f3_c2e2);
        assert_eq!(a.len(), new_session_id().len(), "{a}");
        assert!(a.bytes().all(|x| x.is_ascii_hexdigit() && !x.is_ascii_uppercase()), "{a}");
        assert!(a.starts_with("0193a5f3c2e1") && c.starts_with("0193a5f3c2e2"), "{a} {c}");
        assert_ne!(a, b, "the same millisecond, different random parts");
        assert!(a < c && b < c, "later ids sort after earlier ones");
        assert!(new_ordered_session_id(-5).starts_with("000000000000"), "a time before 1970 is clamped");
    }

    #[test]
    fn ordered_ids_sort_by_time_and_reuse_the_buffer() {
        let mut a = String::new();
        write_ordered_id(&mut a, "log", 0x0193_a5f3_c2e1);
        assert_eq!(a.len(), "log_".len() + 12 + 8, "{a}");
        assert!(a.starts_with("log_0193a5f3c2e1"), "{a}");
        assert!(a[16..].chars().all(|c| c.is_ascii_lowercase() || c.is_ascii_digit()), "{a}");
        let mut b = String::from("left over");
        write_ordered_id(&mut b, "log", 0x0193_a5f3_c2e2);
        assert!(b.starts_with("log_0193a5f3c2e2") && b.len() == a.len(), "cleared first: {b}");
        assert!(a < b, "later ids sort after earlier ones");
        write_ordered_id(&mut b, "log", -5);
        assert!(b.starts_with("log_000000000000"), "a time before 1970 is clamped: {b}");
    }

    #[test]
    fn keys_have_prefix_and_entropy() {
        let k = new_api_key();
        assert!(k.starts_with("ag_") && k.len() == 43);
        assert_ne!(k, new_api_key());
        assert!(hashes_equal(&hash_key(&k), &hash_key(&k)));
        assert!(!hashes_equal(&hash_key(&k), &hash_key("ag_other")));
    }

    #[test]
    fn seal_round_trip_and_tamper() {
        let dir = tempfile::tempdir().unwrap();
        let s = Sealer::load(dir.path()).unwrap();
        let sealed = s.seal(b"secret");
        assert_eq!(s.open(&sealed).unwrap(), b"secret");
        let mut bad = B64.decode(&sealed).unwrap();
        *bad.last_mut().unwrap() ^= 1;
        assert!(s.open(&B64.encode(bad)).is_err());
    }

    #[test]
    fn a_rotation_opens_under_either_key_and_reseals_only_the_old() {
        let (old, new) = (Sealer::from_key([1; 32]), Sealer::rotating([2; 32], [1; 32]));
        let under_old = old.seal(b"credential");
        assert_eq!(new.open(&under_old).unwrap(), b"credential", "the previous key still opens");
        let resealed = new.reseal(&under_old).unwrap().expect("sealed anew");
        assert!(old.open(&resealed).is_err(), "no longer under the old key");
        assert_eq!(Sealer::from_key([2; 32]).open(&resealed).unwrap(), b"credential");
        assert!(new.reseal(&resealed).unwrap().is_none(), "already under the new key: left alone");
        assert!(Sealer::from_key([3; 32]).reseal(&under_old).is_err(), "neither key opens it");
    }

    #[test]
    fn a_staged_next_key_is_sealed_under_and_the_current_one_still_opens() {
        let dir = tempfile::tempdir().unwrap();
        let before = Sealer::load(dir.path()).unwrap();
        let sealed = before.seal(b"x");
        write_key_file(&dir.path().join(NEXT_KEY_FILE), &[9; 32]).unwrap();
        let during = Sealer::load(dir.path()).unwrap();
        assert!(during.is_rotating());
        assert_eq!(during.open(&sealed).unwrap(), b"x");
        assert_eq!(Sealer::from_key([9; 32]).open(&during.seal(b"y")).unwrap(), b"y", "sealed under the next key");
    }
}
