//! E-mail through the SMTP server of `smtp:` (`lettre`: the message builder, headers encoded as
//! RFC 2047 wants, and an async SMTP client with STARTTLS, implicit TLS, authentication and a
//! connection pool; none of which is worth writing again).

use super::CourierError;
use crate::config::{SmtpConfig, SmtpTls};
use lettre::message::{header::ContentType, Mailbox};
use lettre::transport::smtp::authentication::Credentials;
use lettre::transport::smtp::client::{Certificate, Tls, TlsParameters};
use lettre::{AsyncSmtpTransport, AsyncTransport, Message, Tokio1Executor};

pub(crate) struct Mailer {
    transport: AsyncSmtpTransport<Tokio1Executor>,
    from: Mailbox,
}

impl Mailer {
    pub(crate) fn new(c: &SmtpConfig) -> Result<Mailer, String> {
        let tls = || {
            let mut params = TlsParameters::builder(c.host.clone());
            if let Some(pem) = &c.ca_pem {
                params =
                    params.add_root_certificate(Certificate::from_pem(pem).map_err(|e| format!("smtp.ca_file: {e}"))?);
            }
            params.build().map_err(|e| e.to_string())
        };
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

    pub(crate) async fn send(
        &self,
        to: &str,
        subject: &str,
        body: String,
        message_id: Option<&str>,
    ) -> Result<(), CourierError> {
        let to = to.parse::<Mailbox>().map_err(|e| CourierError::Address(format!("the e-mail address: {e}")))?;
        let message = Message::builder()
            .from(self.from.clone())
            .to(to)
            .subject(subject)
            .message_id(message_id.map(|id| format!("<{id}@toolgate>")))
            .header(ContentType::TEXT_PLAIN)
            .body(body)
            .map_err(|e| CourierError::Send(format!("cannot build the message: {e}")))?;
        self.transport.send(message).await.map(|_| ()).map_err(|e| CourierError::Send(format!("smtp: {e}")))
    }
}
