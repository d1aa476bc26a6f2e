//! Text messages through an SMS provider's HTTP API (`sms:`). Providers differ in their
//! request shapes; toolgate sends one plain JSON shape (see [`crate::config::SmsConfig`]) that a
//! provider taking JSON accepts directly or a small relay adapts. The URL is the operator's, so
//! it is not held to the webhooks' egress rules; it must be https unless it is a loopback relay.

use super::CourierError;
use crate::config::SmsConfig;

pub(crate) struct SmsSender {
    client: reqwest::Client,
    url: url::Url,
    token: Option<String>,
    from: Option<String>,
}

/// An E.164 number: `+`, a non-zero digit, then 6 to 14 digits.
pub(crate) fn is_phone_number(s: &str) -> bool {
    let Some(digits) = s.strip_prefix('+') else { return false };
    (7..=15).contains(&digits.len()) && !digits.starts_with('0') && digits.bytes().all(|b| b.is_ascii_digit())
}

impl SmsSender {
    pub(crate) fn new(c: &SmsConfig) -> Result<SmsSender, String> {
        let client = crate::outbound::client::builder().timeout(c.timeout).build().map_err(|e| e.to_string())?;
        Ok(SmsSender { client, url: c.url.clone(), token: c.token.clone(), from: c.from.clone() })
    }

    pub(crate) async fn send(&self, to: &str, body: &str) -> Result<(), CourierError> {
        if !is_phone_number(to) {
            return Err(CourierError::Address(format!("`{to}` is not an E.164 phone number")));
        }
        let mut request = self.client.post(self.url.clone()).json(&serde_json::json!({
            "to": to,
            "from": self.from,
            "body": body,
        }));
        if let Some(token) = &self.token {
            request = request.bearer_auth(token);
        }
        let response = request.send().await.map_err(|e| CourierError::Send(format!("sms provider: {e}")))?;
        let status = response.status();
        if status.is_success() {
            Ok(())
        } else {
            Err(CourierError::Send(format!("sms provider answered {status}")))
        }
    }
}
