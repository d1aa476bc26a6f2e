//! A gateway's `guards`: external services toolgate asks before a tool call reaches its app
//! (`request`) and before its result reaches the client (`response`). The record keeps each
//! guard's signing secret sealed; the API shows it once, when the guard is made
//! (`api/guard_callouts.rs`), and the call path is `mcp/callout/`.

use serde::{Deserialize, Serialize};

/// One external guard of a gateway.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize, utoipa::ToSchema)]
#[serde(deny_unknown_fields)]
pub struct Callout {
    /// `grd_...`, made when the guard is added; an update names it to keep the guard (and its
    /// secret).
    pub id: String,
    /// Where the call is POSTed (the webhooks' egress rules apply).
    pub url: String,
    /// When it is asked: before the call (`request`), on the result (`response`), or both.
    pub on: Vec<CalloutPhase>,
    /// The tools it is asked about, by their names at the gateway: a glob (`*` any run of
    /// characters, `?` one).
    pub tools: String,
    /// How long toolgate waits for its answer.
    pub timeout_ms: u32,
    /// What a time-out, an error, a malformed answer or a full bound does to the call.
    pub failure: CalloutFailure,
    /// `enforce` acts on the answer; `log` records it and lets the call go on.
    pub mode: CalloutMode,
    /// The signing secret (`whsec_` + base64), sealed with the master key; never shown again.
    #[schema(ignore)]
    pub sealed_secret: String,
}

/// When a guard is asked.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize, Deserialize, utoipa::ToSchema)]
#[serde(rename_all = "snake_case")]
pub enum CalloutPhase {
    Request,
    Response,
}

impl CalloutPhase {
    pub fn as_str(self) -> &'static str {
        match self {
            CalloutPhase::Request => "request",
            CalloutPhase::Response => "response",
        }
    }
}

/// What a guard that cannot answer does to the call.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Serialize, Deserialize, utoipa::ToSchema)]
#[serde(rename_all = "snake_case")]
pub enum CalloutFailure {
    /// The call is refused.
    #[default]
    Closed,
    /// The call goes on as if the guard had allowed it.
    Open,
}

/// Whether a guard's answer is acted on.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Serialize, Deserialize, utoipa::ToSchema)]
#[serde(rename_all = "snake_case")]
pub enum CalloutMode {
    #[default]
    Enforce,
    /// Recorded only: a guard tried on live traffic first.
    Log,
}

impl Callout {
    /// Whether the guard is asked in `phase` about the tool named `tool` at the gateway.
    pub fn applies(&self, phase: CalloutPhase, tool: &str) -> bool {
        self.on.contains(&phase) && glob_matches(self.tools.as_bytes(), tool.as_bytes())
    }
}

/// Whether `text` matches `pattern`, where `*` is any run of bytes and `?` one character;
/// linear in the text for each star (the classic greedy match with one back-track point).
pub fn glob_matches(pattern: &[u8], text: &[u8]) -> bool {
    let (mut p, mut t) = (0, 0);
    let mut star: Option<(usize, usize)> = None;
    while t < text.len() {
        match pattern.get(p) {
            Some(b'*') => {
                star = Some((p, t));
                p += 1;
            }
            Some(&c) if c == b'?' || c == text[t] => {
                p += 1;
                t += 1;
            }
            _ => match star {
                Some((sp, st)) => {
                    p = sp + 1;
                    t = st + 1;
                    star = Some((sp, st + 1));
                }
                None => return false,
            },
        }
    }
    pattern[p..].iter().all(|&c| c == b'*')
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn globs_match_names() {
        let m = |p: &str, t: &str| glob_matches(p.as_bytes(), t.as_bytes());
        assert!(m("*", "anything") && m("*", ""));
        assert!(m("everything__*", "everything__echo"));
        assert!(!m("everything__*", "other__echo"));
        assert!(m("*echo", "everything__echo") && m("e?ho", "echo") && m("a*b*c", "axxbyyc"));
        assert!(!m("a*b*c", "axxbyy") && !m("echo", "echoes") && !m("", "x"));
    }
}
