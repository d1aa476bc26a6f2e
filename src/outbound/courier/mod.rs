//! Messages that leave toolgate for a person: e-mail through the SMTP server of `smtp:` (alerts'
//! notifications, MFA codes) and text messages through the SMS provider of `sms:` (MFA codes).
//!
//! One owner for both so that every sender (events, MFA) uses the same pooled transports, and a
//! reload replaces them in one place: [`Courier::prepare`] builds the new transports (and fails
//! with the field named, before anything is replaced), [`Courier::install`] puts them in place.

mod mail;
mod sms;

use crate::config::Config;
use arc_swap::ArcSwapOption;
use std::sync::Arc;

pub(crate) use mail::Mailer;
pub(crate) use sms::{is_phone_number, SmsSender};

/// Why a message did not leave.
#[derive(Debug, thiserror::Error)]
pub enum CourierError {
    #[error("no {0} is configured")]
    NotConfigured(&'static str),
    #[error("{0}")]
    Address(String),
    #[error("{0}")]
    Send(String),
}

/// The transports built from one configuration, not yet in use.
pub struct Prepared {
    mailer: Option<Arc<Mailer>>,
    sms: Option<Arc<SmsSender>>,
}

#[derive(Default)]
pub struct Courier {
    mailer: ArcSwapOption<Mailer>,
    sms: ArcSwapOption<SmsSender>,
}

impl Courier {
    pub fn new(config: &Config) -> Result<Courier, crate::config::ConfigError> {
        let courier = Courier::default();
        courier.install(Courier::prepare(config)?);
        Ok(courier)
    }

    /// The transports `config` describes (built, not yet used).
    pub(crate) fn prepare(config: &Config) -> Result<Prepared, crate::config::ConfigError> {
        let invalid = |field: &str, e: String| crate::config::ConfigError::Invalid {
            field: field.into(),
            message: format!("cannot set up the client: {e}"),
        };
        let mailer = config.smtp.as_ref().map(Mailer::new).transpose().map_err(|e| invalid("smtp", e))?;
        let sms = config.sms.as_ref().map(SmsSender::new).transpose().map_err(|e| invalid("sms", e))?;
        Ok(Prepared { mailer: mailer.map(Arc::new), sms: sms.map(Arc::new) })
    }

    /// Puts prepared transports in place: the next message goes through them.
    pub fn install(&self, prepared: Prepared) {
        self.mailer.store(prepared.mailer);
        self.sms.store(prepared.sms);
    }

    pub(crate) fn can_email(&self) -> bool {
        self.mailer.load().is_some()
    }

    pub(crate) fn can_text(&self) -> bool {
        self.sms.load().is_some()
    }

    /// Sends a plain-text e-mail; `message_id` (without the angle brackets' domain) lets a
    /// retried notification keep one identity.
    pub async fn email(
        &self,
        to: &str,
        subject: &str,
        body: String,
        message_id: Option<&str>,
    ) -> Result<(), CourierError> {
        let mailer = self.mailer.load_full().ok_or(CourierError::NotConfigured("smtp server"))?;
        mailer.send(to, subject, body, message_id).await
    }

    /// Sends a text message to an E.164 number.
    pub async fn text(&self, to: &str, body: &str) -> Result<(), CourierError> {
        let sms = self.sms.load_full().ok_or(CourierError::NotConfigured("sms provider"))?;
        sms.send(to, body).await
    }
}
