//! An upstream failure in words: what a client and the apps' health are told (`app "spy" is
//! unavailable (connection refused)`), while the error's full text, which may carry Pingora's
//! error chain and the app's internal address, goes only to the operator's logs (Decision 25).

use super::UpstreamError;
use std::borrow::Cow;

impl UpstreamError {
    /// The cause in a few words, naming no address, command line or secret.
    pub(crate) fn in_words(&self) -> Cow<'static, str> {
        Cow::Borrowed(match self {
            UpstreamError::Timeout { .. } => "timed out",
            UpstreamError::Connect(text) => connect_cause(text),
            UpstreamError::Http { status, .. } => return Cow::Owned(format!("answered HTTP {status}")),
            UpstreamError::Protocol(_) => "answered outside the MCP protocol",
            UpstreamError::Initialize(_) => "refused the MCP handshake",
            UpstreamError::Closed => "closed the connection",
            UpstreamError::Spawn(_) => "could not be started",
            UpstreamError::Exited(_) => "exited",
            UpstreamError::Backoff { .. } => "restarting after a crash",
            UpstreamError::ProcessLimit { limit } => {
                return Cow::Owned(format!("toolgate's limit of {limit} stdio processes is reached"))
            }
            UpstreamError::ShutDown => "toolgate is shutting down",
            UpstreamError::Config(_) => "misconfigured",
        })
    }
}

/// What kind of connection failure `text` describes. The text is Pingora's (its error type's
/// name, `ConnectRefused`, `TLSHandshakeFailure`, ..., then its context) or reqwest's with its
/// sources (`https` apps), ending in the system's own words (`Connection refused (os error
/// 111)`): both are matched, case aside.
fn connect_cause(text: &str) -> &'static str {
    let t = text.to_ascii_lowercase();
    let has = |words: &[&str]| words.iter().any(|w| t.contains(w));
    if has(&["refused", "os error 111"]) {
        "connection refused"
    } else if has(&["tls", "certificate", "handshake"]) {
        "TLS failed"
    } else if has(&["resolve", "has no address", "dns"]) {
        "its address cannot be resolved"
    } else if has(&["timed out", "timedout"]) {
        "timed out"
    } else if has(&["reset", "broken pipe", "closed", "eof"]) {
        "closed the connection"
    } else if has(&["unreachable", "no route"]) {
        "unreachable"
    } else {
        "cannot connect"
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::mcp::upstream::TimeoutPhase;

    #[test]
    fn causes_name_no_address() {
        let cases = [
            (
                UpstreamError::Connect(
                    " ConnectRefused context: Fail to connect to addr: 127.0.0.1:52201 cause: Connection refused (os error 111)"
                        .into(),
                ),
                "connection refused",
            ),
            (UpstreamError::Connect("TLSHandshakeFailure context: 10.0.0.1:443".into()), "TLS failed"),
            (UpstreamError::Connect("error sending request: invalid peer certificate: UnknownIssuer".into()), "TLS failed"),
            (UpstreamError::Connect("cannot resolve mcp.internal: failed to lookup".into()), "its address cannot be resolved"),
            (UpstreamError::Connect("Connection reset by peer (os error 104)".into()), "closed the connection"),
            (UpstreamError::Connect("something else at 10.0.0.1:80".into()), "cannot connect"),
            (UpstreamError::Timeout { phase: TimeoutPhase::Connect }, "timed out"),
            (UpstreamError::Http { status: 503, body: "at 10.0.0.1".into() }, "answered HTTP 503"),
            (UpstreamError::Closed, "closed the connection"),
            (UpstreamError::Spawn("/opt/bin/x: not found".into()), "could not be started"),
        ];
        for (error, words) in cases {
            assert_eq!(error.in_words(), words, "{error}");
        }
    }
}
