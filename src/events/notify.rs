//! E-mail for alerts' notifications, through the SMTP server of `smtp:` (`lettre`: the
//! message builder, headers encoded as RFC 2047 wants, and an async SMTP client with STARTTLS,
//! implicit TLS, authentication and a connection pool; none of which is worth writing again).

use crate::config::{SmtpConfig, SmtpTls};
use crate::model::Delivery;
use lettre::message::{header::ContentType, Mailbox};
use lettre::transport::smtp::authentication::Credentials;
use lettre::transport::smtp::client::{Tls, TlsParameters};
use lettre::{AsyncSmtpTransport, AsyncTransport, Message, Tokio1Executor};

pub struct Mailer {
    transport: AsyncSmtpTransport<Tokio1Executor>,
    from: Mailbox,
}

impl Mailer {
    pub fn new(c: &SmtpConfig) -> Result<Mailer, String> {
        let tls = || TlsParameters::new(c.host.clone()).map_err(|e| e.to_string());
        let mut builder = AsyncSmtpTransport::<Tokio1Executor>::builder_dangerous(&c.host)
            .port(c.port)
            .timeout(Some(c.timeout))
            .tls(match c.tls {
                SmtpTls::None => Tls::None,
                SmtpTls::StartTls => Tls::Required(tls()?),
                SmtpTls::Tls => Tls::Wrapper(tls()?),
            });
        if let (Some(user), Some(password)) = (&c.username, &c.password) {
            builder = builder.credentials(Credentials::new(user.clone(), password.clone()));
        }
        let from = c.from.parse::<Mailbox>().map_err(|e| format!("smtp.from: {e}"))?;
        Ok(Mailer { transport: builder.build(), from })
    }

    /// Sends one notification; the subject is its summary, the body the summary and its data.
    pub async fn send(&self, to: &str, d: &Delivery) -> Result<(), String> {
        let to = to.parse::<Mailbox>().map_err(|e| format!("the alert's e-mail: {e}"))?;
        let summary = d.data.get("summary").and_then(serde_json::Value::as_str).unwrap_or("toolgate: usage alert");
        let body = format!(
            "{summary}\n\nEvent: {}\nNotification id: {}\n\n{}\n",
            d.event,
            d.id,
            serde_json::to_string_pretty(&d.data).unwrap_or_default()
        );
        let message = Message::builder()
            .from(self.from.clone())
            .to(to)
            .subject(summary)
            .message_id(Some(format!("<{}@toolgate>", d.id)))
            .header(ContentType::TEXT_PLAIN)
            .body(body)
            .map_err(|e| format!("cannot build the message: {e}"))?;
        self.transport.send(message).await.map(|_| ()).map_err(|e| format!("smtp: {e}"))
    }
}
