//! A refused request, as a value. `src/proxy` turns it into the management envelope or a JSON-RPC
//! error; filters never write responses themselves.

use std::borrow::Cow;

#[derive(Debug, Clone, PartialEq)]
pub struct Rejection {
    pub status: u16,
    /// The envelope's `error.code`, e.g. `UNAUTHORIZED`, `IP_NOT_ALLOWED`, `RATE_LIMITED`.
    pub code: &'static str,
    pub message: Cow<'static, str>,
    /// Seconds until a retry can succeed (429 only): `Retry-After` and `error.retry_after`.
    pub retry_after: Option<u64>,
}

impl Rejection {
    pub fn new(status: u16, code: &'static str, message: impl Into<Cow<'static, str>>) -> Self {
        Rejection { status, code, message: message.into(), retry_after: None }
    }

    pub fn unauthorized(message: impl Into<Cow<'static, str>>) -> Self {
        Rejection::new(401, "UNAUTHORIZED", message)
    }

    pub fn forbidden(code: &'static str, message: impl Into<Cow<'static, str>>) -> Self {
        Rejection::new(403, code, message)
    }

    pub fn rate_limited(retry_after: u64) -> Self {
        Rejection {
            status: 429,
            code: "RATE_LIMITED",
            message: Cow::Borrowed("Rate limit exceeded"),
            retry_after: Some(retry_after),
        }
    }
}
