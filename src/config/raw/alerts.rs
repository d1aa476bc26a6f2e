//! `alerts:` and `smtp:`: when usage warnings are raised, and where e-mail leaves.

use crate::config::*;
use serde::Deserialize;

#[derive(Debug, Default, Deserialize)]
#[serde(deny_unknown_fields)]
pub(super) struct RawAlerts {
    limit_warning_percent: Option<u8>,
    app_failures: Option<u32>,
    app_failure_window_secs: Option<u64>,
}

impl RawAlerts {
    pub(super) fn build(self) -> Result<AlertsConfig, ConfigError> {
        let percent = self.limit_warning_percent.unwrap_or(80);
        if percent > 100 {
            return Err(invalid("alerts.limit_warning_percent", "must be between 0 (off) and 100"));
        }
        let app_failures = self.app_failures.unwrap_or(5);
        if app_failures > 10_000 {
            return Err(invalid("alerts.app_failures", "must be between 0 (off) and 10000"));
        }
        let window = self.app_failure_window_secs.unwrap_or(300);
        if !(1..=86_400).contains(&window) {
            return Err(invalid("alerts.app_failure_window_secs", "must be between 1 and 86400"));
        }
        Ok(AlertsConfig {
            limit_warning_percent: percent,
            app_failures,
            app_failure_window: std::time::Duration::from_secs(window),
        })
    }
}

#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
pub(super) struct RawSmtp {
    host: String,
    port: Option<u16>,
    tls: Option<String>,
    username: Option<String>,
    password_env: Option<String>,
    from: String,
    timeout_ms: Option<u64>,
}

impl RawSmtp {
    pub(super) fn build(self) -> Result<SmtpConfig, ConfigError> {
        if self.host.is_empty() || self.host.contains(['/', ' ', '@']) {
            return Err(invalid("smtp.host", format!("`{}` is not a host name or address", self.host)));
        }
        let tls = match self.tls.as_deref().unwrap_or("starttls") {
            "none" => SmtpTls::None,
            "starttls" => SmtpTls::StartTls,
            "tls" => SmtpTls::Tls,
            other => return Err(invalid("smtp.tls", format!("`{other}`: expected none, starttls or tls"))),
        };
        let port = self.port.unwrap_or(match tls {
            SmtpTls::None => 25,
            SmtpTls::StartTls => 587,
            SmtpTls::Tls => 465,
        });
        if port == 0 {
            return Err(invalid("smtp.port", "must be between 1 and 65535"));
        }
        if self.from.parse::<lettre::message::Mailbox>().is_err() {
            return Err(invalid("smtp.from", format!("`{}` is not an e-mail address", self.from)));
        }
        let password = match &self.password_env {
            Some(name) => match std::env::var(name) {
                Ok(p) if !p.is_empty() => Some(p),
                _ => return Err(invalid("smtp.password_env", format!("the environment variable `{name}` is not set"))),
            },
            None => None,
        };
        if password.is_some() != self.username.is_some() {
            return Err(invalid("smtp.username", "username and password_env go together"));
        }
        let timeout = self.timeout_ms.unwrap_or(10_000);
        if !(100..=120_000).contains(&timeout) {
            return Err(invalid("smtp.timeout_ms", "must be between 100 and 120000"));
        }
        Ok(SmtpConfig {
            host: self.host,
            port,
            tls,
            username: self.username,
            password,
            from: self.from,
            timeout: std::time::Duration::from_millis(timeout),
        })
    }
}
