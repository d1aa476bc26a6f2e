//! The MCP protocol facts every part agrees on, in one place: the versions toolgate speaks, to
//! clients and to apps alike (DESIGN Decision 6). A leaf: it imports nothing, so the
//! configuration may read it to validate an app's `protocol_version`. It also holds the one list
//! of JSON-RPC error codes the gateway answers with ([`RpcCode`]).

/// Protocol versions toolgate speaks, newest first. A client asking for one of these gets it
/// echoed, any other gets the newest; an upstream answering with one of these is accepted.
pub const VERSIONS: &[&str] = &["2025-11-25", "2025-06-18", "2025-03-26", "2024-11-05"];

/// The stateless revision (no `initialize`, no session; `modern` has its rules). Here so that the
/// configuration can accept it as an app's `protocol_version`.
pub const STATELESS: &str = "2026-07-28";

/// The newest version: offered to apps in `initialize`, given to clients that ask for an unknown one.
pub const LATEST: &str = VERSIONS[0];

/// The version answered to an `initialize` that asked for `requested`: the same one when toolgate
/// speaks it, else the newest.
pub fn negotiate(requested: Option<&str>) -> &'static str {
    requested.and_then(|r| VERSIONS.iter().find(|v| **v == r).copied()).unwrap_or(LATEST)
}

/// What answers the client takes (its `Accept` header), as the transport read it.
pub struct Accept {
    /// Takes `application/json`.
    pub json: bool,
    /// Takes `text/event-stream`: a call whose app streams may be answered as a stream.
    pub sse: bool,
}

/// Cookie that carries the session (the spec's mechanism), beside `Mcp-Session-Id`.
pub const SESSION_COOKIE: &str = "mcp_session";

/// Every JSON-RPC error code the gateway itself answers with, each with one meaning, so that a
/// client can tell "initialize again" from "bad key" from "the app failed". Errors an app
/// answers are relayed with the app's own code.
///
/// MCP leaves -32000..-32019 to implementations and reserves -32020..-32099 for codes the
/// specification allocates (2026-07-28), so toolgate's own codes stay in the first band. The
/// first two match the official SDKs' Streamable HTTP servers, whose clients know them.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum RpcCode {
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
    /// MCP 2026-07-28: the request's protocol version is not one this server speaks (the answer
    /// to `server/discover`).
    UnsupportedProtocolVersion,
}

impl RpcCode {
    pub const fn code(self) -> i64 {
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
            RpcCode::UnsupportedProtocolVersion => -32022,
        }
    }

    /// The code of a refusal that has only an HTTP status (the edge filters', the management-style
    /// errors of the endpoint).
    pub const fn for_status(status: u16) -> RpcCode {
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
    pub const ALL: [RpcCode; 17] = [
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
        RpcCode::UnsupportedProtocolVersion,
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
        for c in RpcCode::ALL {
            let n = c.code();
            assert!(
                !(-32099..=-32020).contains(&n) || c == RpcCode::UnsupportedProtocolVersion,
                "{c:?} ({n}) is in the specification's band"
            );
        }
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
