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
pub const KEY_PREFIX: &str = "ag_";
/// Random characters after the prefix: 40 alphanumerics, about 238 bits.
const KEY_RANDOM_LEN: usize = 40;

/// Random alphanumerics from the thread's CSPRNG (ChaCha, seeded and periodically reseeded from
/// the OS): one `getrandom` syscall per character would cost more than the rest of a request.
pub(crate) fn random_alnum(len: usize) -> String {
    rand::thread_rng().sample_iter(&Alphanumeric).take(len).map(char::from).collect()
}

/// A new API key: `ag_` + 40 CSPRNG alphanumerics.
pub fn new_api_key() -> String {
    format!("{KEY_PREFIX}{}", random_alnum(KEY_RANDOM_LEN))
}

/// A new identifier such as `gw_3kF9...`.
pub fn new_id(prefix: &str) -> String {
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
    let rng = rand::thread_rng();
    out.extend(rng.sample_iter(&Alphanumeric).take(8).map(|b| char::from(b.to_ascii_lowercase())));
}

/// A session id: 32 CSPRNG bytes as hex.
pub fn new_session_id() -> String {
    let mut b = [0u8; 32];
    rand::thread_rng().fill_bytes(&mut b);
    hex::encode(b)
}

/// Lower-case hex SHA-256 of a key: what the store keeps.
pub fn hash_key(key: &str) -> String {
    hex::encode(Sha256::digest(key.as_bytes()))
}

/// SHA-256 of a key as bytes: the in-memory index key.
pub fn hash_key_bytes(key: &str) -> [u8; 32] {
    Sha256::digest(key.as_bytes()).into()
}

/// A stored hex digest as bytes.
pub fn hash_from_hex(hex_digest: &str) -> Option<[u8; 32]> {
    let mut out = [0u8; 32];
    hex::decode_to_slice(hex_digest, &mut out).ok()?;
    Some(out)
}

/// Constant-time equality of two digests.
pub fn digests_equal(a: &[u8; 32], b: &[u8; 32]) -> bool {
    bool::from(a.ct_eq(b))
}

/// Constant-time equality of two hex hashes.
pub fn hashes_equal(a: &str, b: &str) -> bool {
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
pub fn hmac_sha256(key: &[u8], message: &[u8]) -> [u8; 32] {
    use hmac::Mac;
    let mut mac = <hmac::Hmac<Sha256> as Mac>::new_from_slice(key).expect("HMAC takes a key of any length");
    mac.update(message);
    mac.finalize().into_bytes().into()
}

/// Seals and opens app credentials.
pub struct Sealer {
    cipher: Aes256Gcm,
    /// The master key itself, from which [`Sealer::derive`] makes keys of other uses.
    key: [u8; 32],
}

impl Sealer {
    /// Uses `TOOLGATE_SECRET_KEY` (64 hex chars) if set, else `dir/secret.key`, made on first use
    /// with mode 0600.
    pub fn load(dir: &Path) -> Result<Sealer, SealError> {
        let key_bytes = match std::env::var("TOOLGATE_SECRET_KEY") {
            Ok(hexkey) => hex::decode(hexkey.trim())
                .ok()
                .filter(|b| b.len() == 32)
                .ok_or_else(|| SealError::KeyFile("TOOLGATE_SECRET_KEY".into(), "must be 64 hex characters".into()))?,
            Err(_) => {
                let path = dir.join("secret.key");
                let err = |e: std::io::Error| SealError::KeyFile(path.display().to_string(), e.to_string());
                match std::fs::read_to_string(&path) {
                    Ok(s) => hex::decode(s.trim())
                        .ok()
                        .filter(|b| b.len() == 32)
                        .ok_or_else(|| SealError::KeyFile(path.display().to_string(), "corrupt".into()))?,
                    Err(e) if e.kind() == std::io::ErrorKind::NotFound => {
                        {
                            use std::os::unix::fs::DirBuilderExt;
                            std::fs::DirBuilder::new().recursive(true).mode(0o700).create(dir).map_err(err)?;
                        }
                        let mut b = [0u8; 32];
                        OsRng.fill_bytes(&mut b);
                        write_private(&path, &hex::encode(b)).map_err(err)?;
                        b.to_vec()
                    }
                    Err(e) => return Err(err(e)),
                }
            }
        };
        let key = <[u8; 32]>::try_from(key_bytes).map_err(|_| SealError::Open)?;
        Ok(Sealer::from_key(key))
    }

    /// Uses `TOOLGATE_SECRET_KEY`, which several instances sharing one store must all be given
    /// (each seals what the others open): no key file is made.
    pub fn shared() -> Result<Sealer, SealError> {
        let hexkey = std::env::var("TOOLGATE_SECRET_KEY").map_err(|_| {
            SealError::KeyFile(
                "TOOLGATE_SECRET_KEY".into(),
                "required with storage.backend: redis (the same 64 hex characters on every instance)".into(),
            )
        })?;
        let key = hex::decode(hexkey.trim())
            .ok()
            .and_then(|b| <[u8; 32]>::try_from(b).ok())
            .ok_or_else(|| SealError::KeyFile("TOOLGATE_SECRET_KEY".into(), "must be 64 hex characters".into()))?;
        Ok(Sealer::from_key(key))
    }

    /// A sealer with the given key (tests; a key from elsewhere than the environment or the file).
    pub fn from_key(key: [u8; 32]) -> Sealer {
        Sealer { cipher: Aes256Gcm::new(&key.into()), key }
    }

    /// A key for another use than sealing, derived from the master key:
    /// HMAC-SHA256(master key, `label`). Whoever holds the master key derives the same.
    pub fn derive(&self, label: &[u8]) -> [u8; 32] {
        hmac_sha256(&self.key, label)
    }

    pub fn seal(&self, plaintext: &[u8]) -> String {
        let mut nonce = [0u8; 12];
        OsRng.fill_bytes(&mut nonce);
        let ct = self.cipher.encrypt(Nonce::from_slice(&nonce), plaintext).expect("AES-GCM encryption cannot fail");
        let mut out = nonce.to_vec();
        out.extend_from_slice(&ct);
        B64.encode(out)
    }

    pub fn open(&self, sealed: &str) -> Result<Vec<u8>, SealError> {
        let raw = B64.decode(sealed).map_err(|_| SealError::Open)?;
        if raw.len() < 12 {
            return Err(SealError::Open);
        }
        let (nonce, ct) = raw.split_at(12);
        self.cipher.decrypt(Nonce::from_slice(nonce), ct).map_err(|_| SealError::Open)
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
}
