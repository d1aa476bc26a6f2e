//! What a webhook delivery is signed with, two ways over the same key (the secret's bytes: the
//! base64 after `whsec_`):
//!
//! - the specification's: the body's `signature` member and the `X-Webhook-Signature` header,
//!   `sha256=` + hex HMAC-SHA256 of the payload, which is the body without its `signature`
//!   member: the body's bytes up to `,"signature":` followed by `}`;
//! - Standard Webhooks': `webhook-id`, `webhook-timestamp` (Unix seconds of the attempt) and
//!   `webhook-signature: v1,<base64 HMAC-SHA256 of "id.timestamp.body">`, which the official
//!   `standardwebhooks` libraries verify.

use base64::engine::general_purpose::STANDARD as B64;
use base64::Engine;
use hmac::{Hmac, Mac};
use rand::RngCore;
use sha2::Sha256;

/// Prefix of a webhook secret.
pub const SECRET_PREFIX: &str = "whsec_";

/// A new secret: `whsec_` + base64 of 32 random bytes.
pub fn new_secret() -> String {
    let mut key = [0u8; 32];
    rand::thread_rng().fill_bytes(&mut key);
    format!("{SECRET_PREFIX}{}", B64.encode(key))
}

/// The key a secret signs with; `None` for a secret that is not `whsec_` + base64 of 24-64 bytes.
pub fn key_of(secret: &str) -> Option<Vec<u8>> {
    let key = B64.decode(secret.strip_prefix(SECRET_PREFIX)?).ok()?;
    (24..=64).contains(&key.len()).then_some(key)
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
pub fn body(key: &[u8], event: &str, timestamp: &str, data: &serde_json::Value) -> (Vec<u8>, String) {
    let payload = serde_json::to_vec(&serde_json::json!({ "event": event, "timestamp": timestamp, "data": data }))
        .expect("a JSON value serialises");
    let signature = format!("sha256={}", hex::encode(hmac(key, &[&payload])));
    let mut body = payload;
    body.pop();
    body.extend_from_slice(format!(",\"signature\":\"{signature}\"}}").as_bytes());
    (body, signature)
}

/// `webhook-signature` of Standard Webhooks for one attempt.
pub fn standard(key: &[u8], id: &str, timestamp: i64, body: &[u8]) -> String {
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
    fn secrets_are_whsec_and_24_to_64_bytes() {
        assert_eq!(key_of(&new_secret()).map(|k| k.len()), Some(32));
        assert!(key_of("whsec_").is_none());
        assert!(key_of(&format!("whsec_{}", B64.encode([1u8; 16]))).is_none(), "too short");
        assert!(key_of(&format!("whsec_{}", B64.encode([1u8; 65]))).is_none(), "too long");
        assert!(key_of(&B64.encode([1u8; 32])).is_none(), "the prefix is required");
        assert!(key_of("whsec_not base64!").is_none());
        // The Standard Webhooks example vector.
        let key = key_of("whsec_MfKQ9r8GKYqrTwjUPD8ILPZIo2LaLaSw").unwrap();
        let sig = standard(&key, "msg_p5jXN8AQM9LWM0D4loKWxJek", 1614265330, br#"{"test": 2432232314}"#);
        assert_eq!(sig, "v1,g0hM9SsE+OTPJTGt/tmIKtSyZlE3uFJELVlNIOLJ1OE=");
    }
}
