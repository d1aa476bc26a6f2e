//! The checkpoints' Ed25519 signatures: anyone holding the public key can check a checkpoint
//! without a secret, so an export verifies against someone who can edit the store and re-hash
//! its chain (an HMAC would need the verifier to hold the key that forges).
//!
//! The signing key never lives in the store: its 32-byte seed is HMAC-SHA256(master key,
//! [`SIGNING_KEY_LABEL`]) (the master key being `TOOLGATE_SECRET_KEY` or `storage.path`'s
//! `secret.key`), or HMAC-SHA256(the configured checkpoint key, the same label) when
//! `audit.checkpoint_key_env` names one: a label of its own, so the seed is none of the other
//! keys derived from the same secret. Whoever holds that secret can sign, and so forge.
//!
//! What is signed is [`SIGNED_PREFIX`] followed by the canonical JSON of the checkpoint's head
//! (the same bytes its MAC and its hash cover). A key's id is `ed25519:` and the first 8 bytes
//! (hex) of the SHA-256 of its public key; each signature names the key that made it.

use super::chain::{canonical, Checkpoint, Head};
use base64::engine::general_purpose::STANDARD as B64;
use base64::Engine;
use ed25519_dalek::{Signature, Signer as _, SigningKey, VerifyingKey};
use serde_json::{json, Value};
use sha2::{Digest, Sha256};

/// The label the signing key's seed is derived under.
pub(crate) const SIGNING_KEY_LABEL: &[u8] = b"toolgate audit checkpoint signing key (ed25519) v1";

/// What precedes a head's canonical JSON in the signed message: a signature over a checkpoint
/// can be taken for nothing else.
pub(crate) const SIGNED_PREFIX: &[u8] = b"toolgate audit checkpoint v1\n";

/// This instance's checkpoint signing key.
pub(crate) struct Signer {
    key: SigningKey,
    key_id: String,
}

impl std::fmt::Debug for Signer {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        // The key is a secret.
        f.debug_struct("Signer").field("key_id", &self.key_id).finish_non_exhaustive()
    }
}

impl Signer {
    /// The signer whose key is made from `seed` (32 bytes derived as the module says).
    pub(crate) fn from_seed(seed: [u8; 32]) -> Signer {
        let key = SigningKey::from_bytes(&seed);
        let key_id = key_id_of(&key.verifying_key());
        Signer { key, key_id }
    }

    #[cfg(test)]
    pub(crate) fn key_id(&self) -> &str {
        &self.key_id
    }

    pub(crate) fn public_key(&self) -> VerifyingKey {
        self.key.verifying_key()
    }

    /// `GET /v1/audit/key`'s answer and the start's log line: the public key in base64 and hex.
    pub(crate) fn public_key_json(&self) -> Value {
        let public = self.public_key().to_bytes();
        json!({
            "algorithm": "ed25519",
            "key_id": self.key_id,
            "public_key": B64.encode(public),
            "public_key_hex": hex::encode(public),
        })
    }

    /// Sets the checkpoint's `key_id` and `signature`.
    pub(crate) fn sign(&self, cp: &mut Checkpoint) {
        let signature = self.key.sign(&message(&cp.checkpoint));
        cp.key_id = Some(self.key_id.clone());
        cp.signature = Some(B64.encode(signature.to_bytes()));
    }
}

/// `ed25519:` and the first 8 bytes (hex) of SHA-256 of the public key.
pub(crate) fn key_id_of(public: &VerifyingKey) -> String {
    let digest = Sha256::digest(public.as_bytes());
    format!("ed25519:{}", hex::encode(&digest[..8]))
}

fn message(head: &Head) -> Vec<u8> {
    let mut text = String::with_capacity(256);
    canonical(&json!(head), &mut text);
    let mut out = SIGNED_PREFIX.to_vec();
    out.extend_from_slice(text.as_bytes());
    out
}

/// Whether the checkpoint carries a signature of its head under `public` (strictly checked:
/// no weak keys, no malleable signatures).
pub(crate) fn signature_valid(cp: &Checkpoint, public: &VerifyingKey) -> bool {
    let Some(bytes) = cp.signature.as_deref().and_then(|s| B64.decode(s).ok()) else { return false };
    let Ok(signature) = Signature::from_slice(&bytes) else { return false };
    public.verify_strict(&message(&cp.checkpoint), &signature).is_ok()
}

/// A public key as an operator passes it: 64 hex characters, base64 of 32 bytes, either with an
/// `ed25519:` prefix, or the JSON `GET /v1/audit/key` answers (its envelope or its `data`).
pub fn parse_public_key(text: &str) -> Result<VerifyingKey, String> {
    let text = text.trim();
    let from_json;
    let text = if text.starts_with('{') {
        let v: Value = serde_json::from_str(text).map_err(|e| format!("not JSON: {e}"))?;
        let found = v.pointer("/data/public_key").or_else(|| v.get("public_key")).and_then(Value::as_str);
        from_json = found.ok_or("the JSON has no `public_key` (nor `data.public_key`)")?.to_string();
        from_json.as_str()
    } else {
        text
    };
    let text = text.strip_prefix("ed25519:").unwrap_or(text);
    let bytes = if text.len() == 64 && text.bytes().all(|b| b.is_ascii_hexdigit()) {
        hex::decode(text).map_err(|e| e.to_string())?
    } else {
        B64.decode(text).map_err(|_| "neither 64 hex characters nor base64".to_string())?
    };
    let bytes: [u8; 32] = bytes.try_into().map_err(|_| "an Ed25519 public key is 32 bytes".to_string())?;
    VerifyingKey::from_bytes(&bytes).map_err(|e| format!("not an Ed25519 public key: {e}"))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn checkpoint() -> Checkpoint {
        let head = Head {
            org_id: "org_1".into(),
            seq: 3,
            head_hash: "ab".repeat(32),
            at: 1_700_000_000_000,
            prev_checkpoint: Some(super::super::chain::GENESIS.into()),
            interval_ms: Some(60_000),
        };
        Checkpoint::sign(head, b"k")
    }

    #[test]
    fn a_signature_verifies_under_its_public_key_only_and_breaks_with_any_change() {
        let signer = Signer::from_seed([7; 32]);
        let mut cp = checkpoint();
        signer.sign(&mut cp);
        assert_eq!(cp.key_id.as_deref(), Some(signer.key_id()));
        assert!(signature_valid(&cp, &signer.public_key()));
        assert!(!signature_valid(&cp, &Signer::from_seed([8; 32]).public_key()), "another key");
        let mut edited = cp.clone();
        edited.checkpoint.seq = 2;
        assert!(!signature_valid(&edited, &signer.public_key()), "an edited head");
        let mut unchained = cp.clone();
        unchained.checkpoint.prev_checkpoint = None;
        assert!(!signature_valid(&unchained, &signer.public_key()), "the link is signed too");
    }

    #[test]
    fn a_public_key_reads_as_hex_base64_prefixed_or_the_routes_json() {
        let signer = Signer::from_seed([9; 32]);
        let j = signer.public_key_json();
        let (b64, hexed) = (j["public_key"].as_str().unwrap(), j["public_key_hex"].as_str().unwrap());
        for text in [b64.to_string(), hexed.to_string(), format!("ed25519:{hexed}"), format!(" {b64}\n")] {
            assert_eq!(parse_public_key(&text).unwrap(), signer.public_key(), "{text}");
        }
        let envelope = json!({ "success": true, "data": j }).to_string();
        assert_eq!(parse_public_key(&envelope).unwrap(), signer.public_key());
        assert!(parse_public_key("abcd").is_err());
        assert!(parse_public_key("{}").is_err());
    }
}
