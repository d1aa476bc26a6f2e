//! The MCP protocol facts every part agrees on, in one place: the versions toolgate speaks, to
//! clients and to apps alike (DESIGN Decision 6). A leaf: it imports nothing, so the
//! configuration may read it to validate an app's `protocol_version`. It also holds the one list
//! of JSON-RPC error codes the gateway answers with ([`RpcCode`]).

/// Protocol versions toolgate speaks, newest first. A client asking for one of these gets it
/// echoed, any other gets the newest; an upstream answering with one of these is accepted.
pub(crate) const VERSIONS: &[&str] = &["2025-11-25", "2025-06-18", "2025-03-26", "2024-11-05"];

/// The stateless revision (no `initialize`, no session; `modern` has its rules). Here so that the
/// configuration can accept it as an app's `protocol_version`.
pub(crate) const STATELESS: &str = "2026-07-28";

/// The newest version: offered to apps in `initialize`, given to clients that ask for an unknown one.
pub(crate) const LATEST: &str = VERSIONS[0];

/// The version answered to an `initialize` that asked for `requested`: the same one when toolgate
/// speaks it, else the newest.
pub(crate) fn negotiate(requested: Option<&str>) -> &'static str {
    requested.and_then(|r| VERSIONS.iter().find(|v| **v == r).copied()).unwrap_or(LATEST)
}

/// What answers the client takes (its `Accept` header), as the transport read it.
pub(crate) struct Accept {
    /// Takes `application/json`.
    pub json: bool,
    /// Takes `text/event-stream`: a call whose app streams may be answered as a stream.
    pub sse: bool,
}

/// Cookie that carries the session (the spec's mechanism), beside `Mcp-Session-Id`.
pub(crate) const SESSION_COOKIE: &str = "mcp_session";

/// Every JSON-RPC error code the gateway itself answers with, each with one meaning, so that a
/// client can tell "initialize again" from "bad key" from "the app failed", and the HTTP status
/// each is answered under (in a session, [`RpcCode::status`]; in the stateless revision,
/// [`RpcCode::stateless_status`]; in the request log, [`RpcCode::logged_status`]). The one table:
/// no other part spells a code or maps one to a status. Errors an app answers are relayed with
/// the app's own code.
///
/// MCP leaves -32000..-32019 to implementations and reserves -32020..-32099 for codes the
/// specification allocates (2026-07-28), so toolgate's own codes stay in the first band. The
/// first two match the official SDKs' Streamable HTTP servers, whose clients know them.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum RpcCode {
    /// JSON-RPC: the body is not JSON.
    ParseError,
    /// JSON-RPC: not a valid request (also a batch, a body over the size limit, a bad
    /// `MCP-Protocol-Version`, a method other than GET, POST and DELETE).
    InvalidRequest,
    /// JSON-RPC: no such method, or a server->client request the client cannot take.
    MethodNotFound,
    /// JSON-RPC: bad params; MCP also uses it for an unknown tool or prompt.
    InvalidParams,
    /// JSON-RPC: the gateway failed (storage unavailable).
    InternalError,
    /// HTTP 400: a request other than `initialize` came without a session: send `initialize`.
    NotInitialized,
    /// HTTP 404: the session is unknown, ended, expired or another credential's: initialize again.
    SessionNotFound,
    /// MCP: no app serves this resource URI.
    ResourceNotFound,
    /// The app did not answer in time (HTTP 504 in the request log).
    UpstreamTimeout,
    /// The app is unreachable, crashed, or answered something that is not MCP.
    UpstreamFailure,
    /// HTTP 401: no credential, or one that does not work: the client must fix its key.
    Unauthorized,
    /// HTTP 403: the credential works but may not do this (scope, IP allowlist, Origin).
    Forbidden,
    /// HTTP 404: no such gateway for this credential.
    GatewayNotFound,
    /// HTTP 406: `Accept` does not allow what this request is answered with.
    NotAcceptable,
    /// HTTP 415: the body is not `application/json`.
    UnsupportedMediaType,
    /// HTTP 429: a rate limit, a gateway or app quota, or the session cap is reached.
    LimitExceeded,
    /// A rule of the gateway denies this call (named in the message and `data.rule`); 403 in
    /// the request log.
    DeniedByRule,
    /// What the app answered was refused by the gateway's content checks (hidden text under
    /// `content_policy: block` or in an identifier, a result over `max_result_bytes`), naming
    /// why in `data.reason` and whether the tool ran (`data.tool_ran`): an answer about the call
    /// (200); 502 in the request log, as the app's.
    ContentRefused,
    /// The tool's definition awaits an admin's approval (the gateway's `tool_policy`), or was
    /// rejected: an answer about the call (200).
    ToolPending,
    /// MCP 2026-07-28 `HEADER_MISMATCH`: a routing header (`Mcp-Method`, `Mcp-Name`,
    /// `Mcp-Param-*`, `MCP-Protocol-Version`) disagrees with the body or appears twice.
    HeaderMismatch,
    /// MCP 2026-07-28: the app asks the client for what the request did not declare
    /// (`data.requiredCapabilities`).
    MissingRequiredClientCapability,
    /// MCP 2026-07-28: the request's protocol version is not one this server speaks (the answer
    /// to `server/discover`).
    UnsupportedProtocolVersion,
    /// MCP 2025-11-25 `URLElicitationRequiredError`: the caller must visit a URL first (its own
    /// connection of a per-user app, `data.elicitations`); only to a client that declared
    /// URL-mode elicitation. An answer about the call (200).
    UrlElicitationRequired,
}

impl RpcCode {
    pub(crate) const fn code(self) -> i64 {
        match self {
            RpcCode::ParseError => -32700,
            RpcCode::InvalidRequest => -32600,
            RpcCode::MethodNotFound => -32601,
            RpcCode::InvalidParams => -32602,
            RpcCode::InternalError => -32603,
            RpcCode::NotInitialized => -32000,
            RpcCode::SessionNotFound => -32001,
            RpcCode::ResourceNotFound => -32002,
            RpcCode::UpstreamTimeout => -32003,
            RpcCode::UpstreamFailure => -32004,
            RpcCode::Unauthorized => -32005,
            RpcCode::Forbidden => -32006,
            RpcCode::GatewayNotFound => -32007,
            RpcCode::NotAcceptable => -32008,
            RpcCode::UnsupportedMediaType => -32009,
            RpcCode::LimitExceeded => -32010,
            RpcCode::ToolPending => -32011,
            RpcCode::DeniedByRule => -32012,
            RpcCode::ContentRefused => -32013,
            RpcCode::HeaderMismatch => -32020,
            RpcCode::MissingRequiredClientCapability => -32021,
            RpcCode::UnsupportedProtocolVersion => -32022,
            RpcCode::UrlElicitationRequired => -32042,
        }
    }

    /// The gateway's meaning of a code, if it has one (an app's own codes may have none).
    pub(crate) const fn from_code(code: i64) -> Option<RpcCode> {
        let mut i = 0;
        while i < RpcCode::ALL.len() {
            if RpcCode::ALL[i].code() == code {
                return Some(RpcCode::ALL[i]);
            }
            i += 1;
        }
        None
    }

    /// The HTTP status a handshake-era (session) request is refused under with this code. A
    /// JSON-RPC answer about the call itself (its method, its params, its app) is 200, like any
    /// answer; a refusal of the HTTP request is its HTTP status. The transport's two exceptions:
    /// a body over `server.max_body_bytes` (413) and a method other than GET, POST and DELETE
    /// (405) are -32600 too.
    pub(crate) const fn status(self) -> u16 {
        match self {
            RpcCode::ParseError
            | RpcCode::InvalidRequest
            | RpcCode::NotInitialized
            | RpcCode::HeaderMismatch
            | RpcCode::MissingRequiredClientCapability
            | RpcCode::UnsupportedProtocolVersion => 400,
            RpcCode::MethodNotFound
            | RpcCode::InvalidParams
            | RpcCode::ResourceNotFound
            | RpcCode::UpstreamTimeout
            | RpcCode::UpstreamFailure
            | RpcCode::ToolPending
            | RpcCode::DeniedByRule
            | RpcCode::ContentRefused
            | RpcCode::UrlElicitationRequired => 200,
            RpcCode::InternalError => 500,
            RpcCode::Unauthorized => 401,
            RpcCode::Forbidden => 403,
            RpcCode::SessionNotFound | RpcCode::GatewayNotFound => 404,
            RpcCode::NotAcceptable => 406,
            RpcCode::UnsupportedMediaType => 415,
            RpcCode::LimitExceeded => 429,
        }
    }

    /// The HTTP status of a stateless (2026-07-28) request's error, by the specification's table
    /// (the same as the official SDKs' servers): the request's own faults are 400, an unknown
    /// method 404; every other code, the apps' own included, is 200.
    pub(crate) const fn stateless_status(code: i64) -> u16 {
        match RpcCode::from_code(code) {
            Some(
                RpcCode::ParseError
                | RpcCode::InvalidRequest
                | RpcCode::InvalidParams
                | RpcCode::HeaderMismatch
                | RpcCode::MissingRequiredClientCapability
                | RpcCode::UnsupportedProtocolVersion,
            ) => 400,
            Some(RpcCode::MethodNotFound) => 404,
            _ => 200,
        }
    }

    /// The HTTP status a call's JSON-RPC error is written down with in the request log, which
    /// says where it came from: the caller's fault (400), a rule's denial (403), a bound of the
    /// caller's that its answer's 429 names, the app's time-out (504), the transport's own 5xx,
    /// else the app's failure (502).
    pub(crate) const fn logged_status(code: i64, transport_status: u16) -> u16 {
        match RpcCode::from_code(code) {
            Some(RpcCode::InvalidParams | RpcCode::HeaderMismatch) => 400,
            Some(RpcCode::ToolPending | RpcCode::DeniedByRule) => 403,
            Some(RpcCode::LimitExceeded) if transport_status == 429 => 429,
            Some(RpcCode::UpstreamTimeout) => 504,
            _ if transport_status >= 500 => transport_status,
            _ => 502,
        }
    }

    /// The code of a refusal that has only an HTTP status (the edge filters', the management-style
    /// errors of the endpoint).
    pub(crate) const fn for_status(status: u16) -> RpcCode {
        match status {
            400 | 413 => RpcCode::InvalidRequest,
            401 => RpcCode::Unauthorized,
            403 => RpcCode::Forbidden,
            404 => RpcCode::GatewayNotFound,
            406 => RpcCode::NotAcceptable,
            415 => RpcCode::UnsupportedMediaType,
            429 => RpcCode::LimitExceeded,
            _ => RpcCode::InternalError,
        }
    }

    /// Every code, for the tests and the README's table.
    pub(crate) const ALL: [RpcCode; 23] = [
        RpcCode::ParseError,
        RpcCode::InvalidRequest,
        RpcCode::MethodNotFound,
        RpcCode::InvalidParams,
        RpcCode::InternalError,
        RpcCode::NotInitialized,
        RpcCode::SessionNotFound,
        RpcCode::ResourceNotFound,
        RpcCode::UpstreamTimeout,
        RpcCode::UpstreamFailure,
        RpcCode::Unauthorized,
        RpcCode::Forbidden,
        RpcCode::GatewayNotFound,
        RpcCode::NotAcceptable,
        RpcCode::UnsupportedMediaType,
        RpcCode::LimitExceeded,
        RpcCode::ToolPending,
        RpcCode::DeniedByRule,
        RpcCode::ContentRefused,
        RpcCode::HeaderMismatch,
        RpcCode::MissingRequiredClientCapability,
        RpcCode::UnsupportedProtocolVersion,
        RpcCode::UrlElicitationRequired,
    ];
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn every_code_has_one_meaning() {
        let mut codes: Vec<i64> = RpcCode::ALL.iter().map(|c| c.code()).collect();
        codes.sort_unstable();
        codes.dedup();
        assert_eq!(codes.len(), RpcCode::ALL.len(), "two meanings share a code");
        // toolgate's own codes stay out of the band MCP reserves for the specification.
        let allocated = [
            RpcCode::HeaderMismatch,
            RpcCode::MissingRequiredClientCapability,
            RpcCode::UnsupportedProtocolVersion,
            RpcCode::UrlElicitationRequired,
        ];
        for c in RpcCode::ALL {
            let n = c.code();
            assert!(
                !(-32099..=-32020).contains(&n) || allocated.contains(&c),
                "{c:?} ({n}) is in the specification's band"
            );
            assert_eq!(RpcCode::from_code(n), Some(c));
        }
        assert_eq!(RpcCode::from_code(-32099), None, "an app's own code has no meaning of the gateway's");
    }

    /// Every variant is in `ALL` (the match fails to compile when one is added without a place
    /// here), so `from_code` and the README's table know it.
    #[test]
    fn every_variant_is_listed() {
        for c in RpcCode::ALL {
            match c {
                RpcCode::ParseError
                | RpcCode::InvalidRequest
                | RpcCode::MethodNotFound
                | RpcCode::InvalidParams
                | RpcCode::InternalError
                | RpcCode::NotInitialized
                | RpcCode::SessionNotFound
                | RpcCode::ResourceNotFound
                | RpcCode::UpstreamTimeout
                | RpcCode::UpstreamFailure
                | RpcCode::Unauthorized
                | RpcCode::Forbidden
                | RpcCode::GatewayNotFound
                | RpcCode::NotAcceptable
                | RpcCode::UnsupportedMediaType
                | RpcCode::LimitExceeded
                | RpcCode::ToolPending
                | RpcCode::DeniedByRule
                | RpcCode::ContentRefused
                | RpcCode::HeaderMismatch
                | RpcCode::MissingRequiredClientCapability
                | RpcCode::UnsupportedProtocolVersion
                | RpcCode::UrlElicitationRequired => {}
            }
        }
        let mut listed = RpcCode::ALL.to_vec();
        listed.dedup();
        assert_eq!(listed.len(), 23);
    }

    /// The table's statuses, in a session and in the stateless revision, as `src/mcp/README.md`
    /// states them to clients (its "Errors" table: code, HTTP status, meaning).
    #[test]
    fn the_statuses_are_the_readme_table() {
        let readme = include_str!("README.md");
        for c in RpcCode::ALL {
            let row = format!("| {} | ", c.code());
            let line = readme.lines().find(|l| l.trim_start().starts_with(&row));
            let line = line.unwrap_or_else(|| panic!("README.md has no row for {c:?} ({})", c.code()));
            let cell = line.trim_start()[row.len()..].split('|').next().unwrap_or_default().trim();
            let first = cell.split(',').next().unwrap_or_default().trim();
            let status = c.status();
            assert!(
                first == status.to_string() || (first == "5xx" && status >= 500),
                "{c:?}: the README says {cell}, the table {status}"
            );
            // A refusal of the HTTP request maps back to its code (the edge filters' refusals).
            if matches!(status, 401 | 403 | 406 | 415 | 429) {
                assert_eq!(RpcCode::for_status(status), c);
            }
        }
        let stateless = |c: RpcCode| RpcCode::stateless_status(c.code());
        assert_eq!(stateless(RpcCode::MethodNotFound), 404);
        for c in [
            RpcCode::ParseError,
            RpcCode::InvalidRequest,
            RpcCode::InvalidParams,
            RpcCode::HeaderMismatch,
            RpcCode::MissingRequiredClientCapability,
            RpcCode::UnsupportedProtocolVersion,
        ] {
            assert_eq!(stateless(c), 400, "{c:?}");
        }
        assert_eq!(stateless(RpcCode::InternalError), 200);
        assert_eq!(stateless(RpcCode::UpstreamFailure), 200, "an app's failure is a JSON-RPC answer");
        assert_eq!(RpcCode::stateless_status(-32099), 200, "an app's own code");
    }

    #[test]
    fn a_logged_error_says_where_it_came_from() {
        let logged = |c: RpcCode, transport: u16| RpcCode::logged_status(c.code(), transport);
        assert_eq!(logged(RpcCode::InvalidParams, 200), 400, "bad arguments");
        assert_eq!(logged(RpcCode::HeaderMismatch, 200), 400, "headers that disagree");
        assert_eq!(logged(RpcCode::UpstreamTimeout, 200), 504, "the app timed out");
        assert_eq!(logged(RpcCode::ResourceNotFound, 503), 503, "the transport's own 5xx");
        assert_eq!(logged(RpcCode::ResourceNotFound, 200), 502, "any other failure of the app");
        assert_eq!(RpcCode::logged_status(-32099, 200), 502, "an app's own code");
        assert_eq!(logged(RpcCode::LimitExceeded, 429), 429, "a bound of the caller's, answered 429");
        assert_eq!(logged(RpcCode::LimitExceeded, 200), 502, "an app's own -32010");
    }

    #[test]
    fn initialize_again_is_not_bad_key_and_not_a_header_problem() {
        let distinct = [
            RpcCode::SessionNotFound,
            RpcCode::NotInitialized,
            RpcCode::for_status(401),
            RpcCode::for_status(403),
            RpcCode::for_status(404),
            RpcCode::for_status(406),
            RpcCode::for_status(415),
        ];
        for (i, a) in distinct.iter().enumerate() {
            for b in &distinct[i + 1..] {
                assert_ne!(a.code(), b.code(), "{a:?} and {b:?}");
            }
        }
        assert_eq!(RpcCode::for_status(429), RpcCode::LimitExceeded);
        assert_eq!(RpcCode::for_status(503), RpcCode::InternalError);
    }

    #[test]
    fn negotiation_echoes_a_known_version_and_offers_the_newest_otherwise() {
        assert_eq!(negotiate(Some("2025-03-26")), "2025-03-26");
        assert_eq!(negotiate(Some("1999-01-01")), LATEST);
        assert_eq!(negotiate(None), LATEST);
    }
}
