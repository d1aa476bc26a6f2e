//! What a webhook delivery, and a call to a gateway's external guard (Standard Webhooks' way
//! only: `guard_client.rs`), is signed with, two ways over the same key. The key is the secret's
//! bytes: for a `whsec_` secret (the form toolgate makes) the bytes its base64 after `whsec_`
//! decodes to, as Standard Webhooks reads it; for any other secret (one the client chose) the
//! UTF-8 bytes of the string itself, as the specification's "HMAC-SHA256 under the secret" reads.
//!
//! - the specification's: the body's `signature` member and the `X-Webhook-Signature` header,
//!   `sha256=` + hex HMAC-SHA256 of the payload, which is the body without its `signature`
//!   member: the body's bytes up to `,"signature":` followed by `}`;
//! - Standard Webhooks': `webhook-id`, `webhook-timestamp` (Unix seconds of the attempt) and
//!   `webhook-signature: v1,<base64 HMAC-SHA256 of "id.timestamp.body">`, which the official
//!   `standardwebhooks` libraries verify (given the key: the `whsec_` string, or the bytes of a
//!   client's own secret).

use base64::engine::general_purpose::STANDARD as B64;
use base64::Engine;
use hmac::{Hmac, Mac};
use rand::RngCore;
use sha2::Sha256;

/// Prefix of a webhook secret.
pub(crate) const SECRET_PREFIX: &str = "whsec_";

/// A new secret: `whsec_` + base64 of 32 random bytes.
pub(crate) fn new_secret() -> String {
    let mut key = [0u8; 32];
    rand::thread_rng().fill_bytes(&mut key);
    format!("{SECRET_PREFIX}{}", B64.encode(key))
}

/// Shortest client-chosen secret, in bytes: RFC 2104 discourages HMAC keys shorter than the
/// hash's output (32 bytes for SHA-256), and a shorter string is within reach of guessing offline
/// from one signed delivery.
pub(crate) const MIN_PLAIN_SECRET: usize = 32;
/// Longest secret, in bytes (a longer key is hashed to 32 bytes by HMAC anyway).
pub(crate) const MAX_PLAIN_SECRET: usize = 256;

/// Why a secret is refused (the message of the 400 naming `secret`).
#[derive(Debug, Clone, Copy, PartialEq, Eq, thiserror::Error)]
pub(crate) enum SecretError {
    #[error("a secret starting with whsec_ must be whsec_ followed by the base64 of 24-64 bytes")]
    BadWhsec,
    #[error("must be 32-256 printable ASCII characters (no spaces), or whsec_ followed by the base64 of 24-64 bytes")]
    BadPlain,
}

/// The key a secret signs with: a `whsec_` secret's decoded bytes (24-64 of them), or a client's
/// own secret's bytes (32-256 printable ASCII characters, no spaces: it must survive being typed
/// into a receiver's configuration unchanged).
pub(crate) fn key_of(secret: &str) -> Result<Vec<u8>, SecretError> {
    if let Some(encoded) = secret.strip_prefix(SECRET_PREFIX) {
        let key = B64.decode(encoded).map_err(|_| SecretError::BadWhsec)?;
        return if (24..=64).contains(&key.len()) { Ok(key) } else { Err(SecretError::BadWhsec) };
    }
    let printable = secret.bytes().all(|b| b.is_ascii_graphic());
    if printable && (MIN_PLAIN_SECRET..=MAX_PLAIN_SECRET).contains(&secret.len()) {
        Ok(secret.as_bytes().to_vec())
    } else {
        Err(SecretError::BadPlain)
    }
}

fn hmac(key: &[u8], parts: &[&[u8]]) -> [u8; 32] {
    let mut mac = Hmac::<Sha256>::new_from_slice(key).expect("HMAC takes a key of any length");
    for p in parts {
        mac.update(p);
    }
    mac.finalize().into_bytes().into()
}

/// The body of a delivery: `{"event":...,"timestamp":...,"data":...,"signature":"sha256=..."}`,
/// and the signature (also sent as `X-Webhook-Signature`).
pub(crate) fn body(key: &[u8], event: &str, timestamp: &str, data: &serde_json::Value) -> (Vec<u8>, String) {
    let payload = serde_json::to_vec(&serde_json::json!({ "event": event, "timestamp": timestamp, "data": data }))
        .expect("a JSON value serialises");
    let signature = format!("sha256={}", hex::encode(hmac(key, &[&payload])));
    let mut body = payload;
    body.pop();
    body.extend_from_slice(format!(",\"signature\":\"{signature}\"}}").as_bytes());
    (body, signature)
}

/// `webhook-signature` of Standard Webhooks for one attempt.
pub(crate) fn standard(key: &[u8], id: &str, timestamp: i64, body: &[u8]) -> String {
    let mac = hmac(key, &[id.as_bytes(), b".", timestamp.to_string().as_bytes(), b".", body]);
    format!("v1,{}", B64.encode(mac))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_payload_is_the_body_without_its_signature_member() {
        let secret = new_secret();
        let key = key_of(&secret).unwrap();
        let data = serde_json::json!({ "gateway_id": "gw_1", "name": "a \"quoted\" name" });
        let (body, signature) = body(&key, "gateway.created", "2026-11-25T06:00:00.000Z", &data);
        let text = String::from_utf8(body).unwrap();
        let cut = text.rfind(",\"signature\":").unwrap();
        let payload = format!("{}}}", &text[..cut]);
        assert_eq!(format!("sha256={}", hex::encode(hmac(&key, &[payload.as_bytes()]))), signature);
        let v: serde_json::Value = serde_json::from_str(&text).unwrap();
        assert_eq!((v["event"].as_str(), v["signature"].as_str()), (Some("gateway.created"), Some(signature.as_str())));
        assert_eq!(v["data"], data);
        // Any changed byte of the payload fails.
        let tampered = payload.replace("gw_1", "gw_2");
        assert_ne!(format!("sha256={}", hex::encode(hmac(&key, &[tampered.as_bytes()]))), signature);
    }

    #[test]
    fn secrets_are_whsec_and_24_to_64_bytes_or_the_clients_own_string() {
        assert_eq!(key_of(&new_secret()).map(|k| k.len()), Ok(32));
        assert_eq!(key_of("whsec_"), Err(SecretError::BadWhsec));
        assert_eq!(key_of(&format!("whsec_{}", B64.encode([1u8; 16]))), Err(SecretError::BadWhsec), "too short");
        assert_eq!(key_of(&format!("whsec_{}", B64.encode([1u8; 65]))), Err(SecretError::BadWhsec), "too long");
        assert_eq!(key_of("whsec_not base64!"), Err(SecretError::BadWhsec));
        // Without the prefix, the string is the key: its own bytes, not a decoding of them.
        let b64 = B64.encode([1u8; 32]);
        assert_eq!(key_of(&b64), Ok(b64.as_bytes().to_vec()));
        let plain = "spec-literal-secret-0123456789abcdef";
        assert_eq!(key_of(plain), Ok(plain.as_bytes().to_vec()));
        assert_eq!(key_of(&"x".repeat(32)).map(|k| k.len()), Ok(32));
        assert_eq!(key_of(&"x".repeat(256)).map(|k| k.len()), Ok(256));
        for bad in
            ["x".repeat(31), "x".repeat(257), format!("{plain} with spaces"), format!("{plain}\n"), format!("{plain}é")]
        {
            assert_eq!(key_of(&bad), Err(SecretError::BadPlain), "{bad:?}");
        }
        // The Standard Webhooks example vector.
        let key = key_of("whsec_MfKQ9r8GKYqrTwjUPD8ILPZIo2LaLaSw").unwrap();
        let sig = standard(&key, "msg_p5jXN8AQM9LWM0D4loKWxJek", 1614265330, br#"{"test": 2432232314}"#);
        assert_eq!(sig, "v1,g0hM9SsE+OTPJTGt/tmIKtSyZlE3uFJELVlNIOLJ1OE=");
    }

    #[test]
    fn a_plain_secret_signs_with_its_own_bytes() {
        let secret = "spec-literal-secret-0123456789abcdef";
        let key = key_of(secret).unwrap();
        let (body, signature) = body(&key, "gateway.created", "2026-11-25T06:00:00.000Z", &serde_json::json!({}));
        let text = String::from_utf8(body).unwrap();
        let payload = format!("{}}}", &text[..text.rfind(",\"signature\":").unwrap()]);
        let mut mac = Hmac::<Sha256>::new_from_slice(secret.as_bytes()).unwrap();
        mac.update(payload.as_bytes());
        assert_eq!(signature, format!("sha256={}", hex::encode(mac.finalize().into_bytes())));
    }
}
