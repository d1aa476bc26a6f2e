//! `smtp:` and `sms:`: where e-mail and text messages leave (alerts' notifications, MFA codes).

use crate::config::*;
use serde::Deserialize;

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
    /// A PEM file of certificate authorities trusted for the server's certificate besides the
    /// public ones (a relay with a private CA).
    ca_file: Option<std::path::PathBuf>,
    /// `tls: none` to a host that is not loopback, in production: only when this says so.
    allow_plaintext: Option<bool>,
}

impl RawSmtp {
    pub(super) fn build(self, environment: Environment) -> Result<SmtpConfig, ConfigError> {
        if self.host.is_empty() || self.host.contains(['/', ' ', '@']) {
            return Err(invalid("smtp.host", format!("`{}` is not a host name or address", self.host)));
        }
        let tls = match self.tls.as_deref().unwrap_or("starttls") {
            "none" => SmtpTls::None,
            "starttls" => SmtpTls::StartTls,
            "tls" => SmtpTls::Tls,
            other => return Err(invalid("smtp.tls", format!("`{other}`: expected none, starttls or tls"))),
        };
        // Plain SMTP carries MFA codes and the relay's password readable on the way: in
        // production only to a relay on this host, or when the operator says the path is safe.
        let loopback = self.host.eq_ignore_ascii_case("localhost")
            || self
                .host
                .trim_start_matches('[')
                .trim_end_matches(']')
                .parse::<std::net::IpAddr>()
                .is_ok_and(|ip| ip.is_loopback());
        if tls == SmtpTls::None
            && environment == Environment::Production
            && !loopback
            && !self.allow_plaintext.unwrap_or(false)
        {
            return Err(invalid(
                "smtp.tls",
                format!(
                    "`none` sends MFA codes and the SMTP password unencrypted to `{}`: use starttls or tls, \
                     or set smtp.allow_plaintext: true if the path to the relay is private (or environment: development)",
                    self.host
                ),
            ));
        }
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
        let ca_pem = match self.ca_file {
            Some(_) if tls == SmtpTls::None => {
                return Err(invalid(
                    "smtp.ca_file",
                    "only with tls: starttls or tls (a plain connection checks no certificate)",
                ))
            }
            Some(path) => Some(read_ca(&path)?),
            None => None,
        };
        Ok(SmtpConfig {
            host: self.host,
            port,
            tls,
            username: self.username,
            password,
            from: self.from,
            timeout: std::time::Duration::from_millis(timeout),
            ca_pem,
        })
    }
}

/// `smtp.ca_file`'s bytes, refused unless they hold at least one PEM certificate.
fn read_ca(path: &std::path::Path) -> Result<Vec<u8>, ConfigError> {
    use rustls::pki_types::{pem::PemObject, CertificateDer};
    let pem = std::fs::read(path).map_err(|e| invalid("smtp.ca_file", format!("{}: {e}", path.display())))?;
    match CertificateDer::pem_slice_iter(&pem).collect::<Result<Vec<_>, _>>() {
        Ok(certs) if !certs.is_empty() => Ok(pem),
        _ => Err(invalid("smtp.ca_file", format!("{}: no PEM certificate in it", path.display()))),
    }
}

#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
pub(super) struct RawSms {
    url: String,
    token_env: Option<String>,
    from: Option<String>,
    timeout_ms: Option<u64>,
}

impl RawSms {
    pub(super) fn build(self, environment: Environment) -> Result<SmsConfig, ConfigError> {
        let url = url::Url::parse(&self.url)
            .ok()
            .filter(|u| matches!(u.scheme(), "http" | "https") && u.host().is_some())
            .ok_or_else(|| invalid("sms.url", format!("`{}` is not an absolute http(s) URL", self.url)))?;
        if !url.username().is_empty() || url.password().is_some() {
            return Err(invalid("sms.url", "must not carry credentials: put the token in token_env"));
        }
        let loopback = match url.host() {
            Some(url::Host::Domain(d)) => d == "localhost",
            Some(url::Host::Ipv4(ip)) => ip.is_loopback(),
            Some(url::Host::Ipv6(ip)) => ip.is_loopback(),
            None => false,
        };
        if url.scheme() == "http" && !loopback && !environment.allows_http() {
            return Err(invalid("sms.url", "must use https (http only to a loopback relay, or in development)"));
        }
        let token = match &self.token_env {
            Some(name) => match std::env::var(name) {
                Ok(t) if !t.is_empty() => Some(t),
                _ => return Err(invalid("sms.token_env", format!("the environment variable `{name}` is not set"))),
            },
            None => None,
        };
        if let Some(from) = &self.from {
            if from.is_empty() || from.len() > 32 || from.chars().any(char::is_control) {
                return Err(invalid("sms.from", "must be 1 to 32 printable characters"));
            }
        }
        let timeout = self.timeout_ms.unwrap_or(10_000);
        if !(100..=120_000).contains(&timeout) {
            return Err(invalid("sms.timeout_ms", "must be between 100 and 120000"));
        }
        Ok(SmsConfig { url, token, from: self.from, timeout: std::time::Duration::from_millis(timeout) })
    }
}
