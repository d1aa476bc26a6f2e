//! The facts of MCP 2026-07-28, the stateless revision, as plain functions of a header map and a
//! request: which era a POST speaks, the per-request envelope (`_meta` with the protocol version
//! and the client's capabilities), the routing headers (`MCP-Protocol-Version`, `Mcp-Method`,
//! `Mcp-Name`, `Mcp-Param-*`) checked against the body, and the members a result gains
//! (`resultType`, the caching hints). No I/O: `stateless.rs` does the exchange; the HTTP status
//! of each error code is `RpcCode`'s. The decisions are in `README.md` ("MCP 2026-07-28").

use crate::data::model::Gateway;
use crate::mcp::jsonrpc::{RawJson, RawMembers};
use crate::mcp::protocol::{self, RpcCode};
use base64::engine::general_purpose::STANDARD as B64;
use base64::Engine;
use serde::Deserialize;
use serde_json::value::RawValue;
use serde_json::{json, Value};
use std::borrow::Cow;

/// Stateless revisions toolgate serves, newest first.
pub(crate) const VERSIONS: &[&str] = &[protocol::STATELESS];

#[cfg(test)]
pub(crate) const META_PROTOCOL_VERSION: &str = "io.modelcontextprotocol/protocolVersion";
pub(crate) const META_CLIENT_CAPABILITIES: &str = "io.modelcontextprotocol/clientCapabilities";
pub(crate) const META_SERVER_INFO: &str = "io.modelcontextprotocol/serverInfo";
pub(crate) const META_SUBSCRIPTION_ID: &str = "io.modelcontextprotocol/subscriptionId";

/// The tasks extension's identifier, under `capabilities.extensions` (relayed by `tasks.rs`).
pub(crate) const TASKS_EXTENSION: &str = "io.modelcontextprotocol/tasks";

/// toolgate's own `_meta` keys towards apps: the stateless client's capabilities (to a
/// handshake-era app, which takes no envelope), and the key a question is answered under.
pub(crate) const META_TOOLGATE_CLIENT_CAPABILITIES: &str = "toolgate.dev/clientCapabilities";
pub(crate) const META_INPUT_KEY: &str = "toolgate.dev/inputKey";

/// Whether a POST speaks the stateless revision. As the official SDKs' servers decide it: an
/// `MCP-Protocol-Version` header that names no handshake version (2024-11-05 .. 2025-11-25). An
/// unknown version lands here too, where the envelope check answers it with the versions this
/// server speaks. `server/discover` is stateless whatever the header says.
pub(crate) fn is_stateless(headers: &http::HeaderMap, method: Option<&str>) -> bool {
    if method == Some("server/discover") {
        return true;
    }
    headers
        .get("mcp-protocol-version")
        .is_some_and(|v| !protocol::VERSIONS.iter().any(|h| v.as_bytes() == h.as_bytes()))
}

/// Methods of the handshake era that this revision removed: a stateless request naming one is
/// answered 404 -32601, as the specification says of any method the server does not implement.
pub(crate) fn removed(method: &str) -> bool {
    matches!(method, "initialize" | "ping" | "logging/setLevel" | "resources/subscribe" | "resources/unsubscribe")
}

/// The server->client requests a stateless client said it takes, from
/// `_meta["io.modelcontextprotocol/clientCapabilities"]` on each request.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub(crate) struct ClientCaps {
    pub sampling: bool,
    pub elicitation: bool,
    /// `elicitation.url`: the client takes URL-mode elicitations (an app's connect page, asked
    /// for in an input-required result: `rpc_errors::app_refusal`).
    pub elicitation_url: bool,
    pub roots: bool,
    /// `extensions["io.modelcontextprotocol/tasks"]`: the client follows tasks (`tasks.rs`).
    pub tasks: bool,
}

impl ClientCaps {
    /// The capability an app's request to the client needs, when the client lacks it.
    pub(crate) fn missing_for(self, method: &str) -> Option<&'static str> {
        match method {
            "sampling/createMessage" if !self.sampling => Some("sampling"),
            "elicitation/create" if !self.elicitation => Some("elicitation"),
            "roots/list" if !self.roots => Some("roots"),
            _ => None,
        }
    }
}

/// What a stateless request says about itself in its envelope.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct Envelope {
    pub version: String,
    pub caps: ClientCaps,
    /// `_meta["io.modelcontextprotocol/logLevel"]` was set: the client wants the app's log
    /// messages on the response stream (without it, none are sent).
    pub wants_logs: bool,
    /// The request carries `requestState` or `inputResponses`: it continues, or answers ahead,
    /// an input-required exchange.
    pub continues: bool,
}

/// A request refused by the envelope or header checks, as a JSON-RPC error.
#[derive(Debug, Clone, PartialEq)]
pub(crate) struct Rejection {
    pub code: i64,
    pub message: Cow<'static, str>,
    pub data: Option<Value>,
}

impl Rejection {
    fn new(code: i64, message: impl Into<Cow<'static, str>>) -> Self {
        Rejection { code, message: message.into(), data: None }
    }

    pub(crate) fn status(&self) -> u16 {
        RpcCode::stateless_status(self.code)
    }
}

#[derive(Deserialize)]
struct EnvelopeParams<'a> {
    #[serde(rename = "_meta", borrow, default)]
    meta: Option<MetaFields<'a>>,
    #[serde(borrow, default)]
    name: Option<&'a RawValue>,
    #[serde(borrow, default)]
    uri: Option<&'a RawValue>,
    #[serde(rename = "taskId", borrow, default)]
    task_id: Option<&'a RawValue>,
    #[serde(rename = "requestState", borrow, default)]
    request_state: Option<&'a RawValue>,
    #[serde(rename = "inputResponses", borrow, default)]
    input_responses: Option<&'a RawValue>,
}

#[derive(Deserialize)]
struct MetaFields<'a> {
    #[serde(rename = "io.modelcontextprotocol/protocolVersion", borrow, default)]
    version: Option<&'a RawValue>,
    #[serde(rename = "io.modelcontextprotocol/clientCapabilities", borrow, default)]
    capabilities: Option<&'a RawValue>,
    #[serde(rename = "io.modelcontextprotocol/logLevel", borrow, default)]
    log_level: Option<&'a RawValue>,
}

#[derive(Deserialize, Default)]
struct CapsFields<'a> {
    #[serde(borrow, default)]
    sampling: Option<&'a RawValue>,
    #[serde(borrow, default)]
    elicitation: Option<&'a RawValue>,
    #[serde(borrow, default)]
    roots: Option<&'a RawValue>,
    #[serde(borrow, default)]
    extensions: Option<Extensions<'a>>,
}

/// The modes a client's `elicitation` capability names: only `url` matters to the gateway.
#[derive(Deserialize, Default)]
struct ElicitationModes<'a> {
    #[serde(borrow, default)]
    url: Option<&'a RawValue>,
}

#[derive(Deserialize, Default)]
struct Extensions<'a> {
    #[serde(rename = "io.modelcontextprotocol/tasks", borrow, default)]
    tasks: Option<&'a RawValue>,
}

fn is_object(v: Option<&RawValue>) -> bool {
    v.is_some_and(|v| v.get().starts_with('{'))
}

/// A JSON string's value, or `None` for any other JSON.
fn string_of(v: &RawValue) -> Option<Cow<'_, str>> {
    serde_json::from_str::<Cow<str>>(v.get()).ok()
}

/// The one value of a routing header; `Err` when it is sent more than once, since a reader of
/// the first copy and a reader of the last would route the request differently.
fn single_header<'h>(headers: &'h http::HeaderMap, name: &'static str) -> Result<Option<&'h str>, Rejection> {
    let mut values = headers.get_all(name).iter();
    let first = values.next();
    if values.next().is_some() {
        return Err(Rejection::new(
            RpcCode::HeaderMismatch.code(),
            format!("the {name} header appears more than once"),
        ));
    }
    Ok(first.map(|v| v.to_str().unwrap_or("\u{fffd}")))
}

/// A header value as the client meant it: verbatim, or the text inside the `=?base64?...?=`
/// form that carries values a header cannot (non-ASCII, edge whitespace). `None` for a broken
/// form, so that it never matches a body value by accident.
pub(crate) fn decode_header_value(v: &str) -> Option<Cow<'_, str>> {
    let Some(payload) = v.strip_prefix("=?base64?").and_then(|p| p.strip_suffix("?=")) else {
        return Some(Cow::Borrowed(v));
    };
    let bytes = B64.decode(payload).ok()?;
    // Only the canonical encoding, as the encoders write it.
    if B64.encode(&bytes) != payload {
        return None;
    }
    String::from_utf8(bytes).ok().map(Cow::Owned)
}

/// A value as a header carries it: verbatim when it is printable ASCII without edge spaces, else
/// the `=?base64?...?=` form ([`decode_header_value`] reads both).
pub(crate) fn encode_header_value(v: &str) -> Cow<'_, str> {
    let plain = v.bytes().all(|b| (0x20..0x7f).contains(&b)) && v.trim() == v && !v.starts_with("=?base64?");
    if plain {
        Cow::Borrowed(v)
    } else {
        Cow::Owned(format!("=?base64?{}?=", B64.encode(v)))
    }
}

/// The envelope and header checks of a stateless request, in the specification's order (as the
/// official SDKs' servers run them): the envelope is present (-32602), the routing headers agree
/// with the body (-32020), the version is one this server speaks (-32022). Which method it names
/// is not checked here: the dispatcher answers unknown ones.
pub(crate) fn classify(
    headers: &http::HeaderMap,
    method: &str,
    params: Option<&RawJson>,
) -> Result<Envelope, Rejection> {
    let invalid = |m: &'static str| Rejection::new(RpcCode::InvalidParams.code(), m);
    let read = match params {
        Some(p) => p.read::<EnvelopeParams>().map_err(|_| {
            invalid("params must be an object whose _meta is an object (name and uri, when present, strings)")
        })?,
        None => EnvelopeParams {
            meta: None,
            name: None,
            uri: None,
            task_id: None,
            request_state: None,
            input_responses: None,
        },
    };
    let Some(meta) = read.meta else {
        // A request without any envelope whose header names a version of neither era (a
        // handshake-era client with a wrong header, most likely) hears about the version.
        if let Ok(Some(v)) = single_header(headers, "mcp-protocol-version") {
            if !VERSIONS.contains(&v) {
                return Err(unsupported_version(v));
            }
        }
        return Err(invalid(
            "params._meta must be an object carrying io.modelcontextprotocol/protocolVersion and io.modelcontextprotocol/clientCapabilities",
        ));
    };
    let (Some(version), Some(capabilities)) = (meta.version, meta.capabilities) else {
        let missing = match (meta.version, meta.capabilities) {
            (None, None) => "io.modelcontextprotocol/protocolVersion, io.modelcontextprotocol/clientCapabilities",
            (None, _) => "io.modelcontextprotocol/protocolVersion",
            _ => "io.modelcontextprotocol/clientCapabilities",
        };
        return Err(Rejection::new(
            RpcCode::InvalidParams.code(),
            format!("params._meta is missing the required key(s): {missing}"),
        ));
    };
    let version = string_of(version);
    let named = name_field(method).and_then(|field| {
        let value = match field {
            "name" => read.name,
            "uri" => read.uri,
            _ => read.task_id,
        };
        value.map(|v| (field, v))
    });
    check_routing_headers(headers, method, version.as_deref(), named)?;
    let Some(version) = version else {
        return Err(invalid("io.modelcontextprotocol/protocolVersion must be a string"));
    };
    if !VERSIONS.contains(&version.as_ref()) {
        return Err(unsupported_version(&version));
    }
    let caps = serde_json::from_str::<CapsFields>(capabilities.get()).unwrap_or_default();
    Ok(Envelope {
        version: version.into_owned(),
        caps: ClientCaps {
            sampling: is_object(caps.sampling),
            elicitation: is_object(caps.elicitation),
            elicitation_url: is_object(caps.elicitation)
                && caps
                    .elicitation
                    .and_then(|e| serde_json::from_str::<ElicitationModes>(e.get()).ok())
                    .is_some_and(|m| is_object(m.url)),
            roots: is_object(caps.roots),
            tasks: caps.extensions.is_some_and(|e| is_object(e.tasks)),
        },
        wants_logs: meta.log_level.is_some(),
        continues: read.request_state.is_some() || read.input_responses.is_some(),
    })
}

/// The routing headers against the body, each sent once: `MCP-Protocol-Version` against the
/// envelope's `version`, `Mcp-Method` against the method, and `Mcp-Name` against the params'
/// name, uri or task id (`named`: the field and its value).
fn check_routing_headers(
    headers: &http::HeaderMap,
    method: &str,
    version: Option<&str>,
    named: Option<(&'static str, &RawValue)>,
) -> Result<(), Rejection> {
    let header_version = single_header(headers, "mcp-protocol-version")?;
    if header_version.is_none() || header_version != version {
        return Err(Rejection::new(
            RpcCode::HeaderMismatch.code(),
            "the MCP-Protocol-Version header does not match params._meta's io.modelcontextprotocol/protocolVersion",
        ));
    }
    if single_header(headers, "mcp-method")? != Some(method) {
        return Err(Rejection::new(
            RpcCode::HeaderMismatch.code(),
            "the Mcp-Method header does not match the request's method",
        ));
    }
    let header_name = single_header(headers, "mcp-name")?;
    if let Some((field, value)) = named {
        let value = string_of(value);
        if header_name.and_then(decode_header_value).as_deref() != value.as_deref() {
            return Err(Rejection::new(
                RpcCode::HeaderMismatch.code(),
                format!("the Mcp-Name header does not match the request's params.{field}"),
            ));
        }
    }
    Ok(())
}

/// `_meta` as a handshake-era app takes it (see `stateless::for_handshake_app`), member by member from its
/// text, without building a tree (the hot path of a stateless `tools/call`); `None` when nothing
/// is left of it. A `_meta` that is not an object is passed on as it is.
pub(crate) fn translate_meta(meta: &RawValue) -> Option<RawJson> {
    let Ok(RawMembers(members)) = serde_json::from_str::<RawMembers>(meta.get()) else {
        return RawJson::from_text(meta.get().to_string());
    };
    let kept: Vec<(Cow<str>, &RawValue)> = members
        .into_iter()
        .filter_map(|(k, v)| match k.as_ref() {
            META_CLIENT_CAPABILITIES => Some((Cow::Borrowed(META_TOOLGATE_CLIENT_CAPABILITIES), v)),
            k if k.starts_with("io.modelcontextprotocol/") => None,
            _ => Some((k, v)),
        })
        .collect();
    (!kept.is_empty()).then(|| RawJson::from_value(&RawMembers(kept)))
}

/// The member of `params` that names what a method acts on, which `Mcp-Name` carries: a tool's
/// or prompt's `name`, a resource's `uri`, a task's `taskId` (the tasks extension's methods).
pub(crate) fn name_field(method: &str) -> Option<&'static str> {
    match method {
        "tools/call" | "prompts/get" => Some("name"),
        "resources/read" => Some("uri"),
        "tasks/get" | "tasks/update" | "tasks/cancel" => Some("taskId"),
        _ => None,
    }
}

/// Every version the endpoint speaks: the stateless ones, then the handshake ones.
pub(crate) fn supported_versions() -> Vec<&'static str> {
    VERSIONS.iter().chain(protocol::VERSIONS).copied().collect()
}

/// UNSUPPORTED_PROTOCOL_VERSION naming what this endpoint speaks and echoing what was asked.
pub(crate) fn unsupported_version(requested: &str) -> Rejection {
    Rejection {
        code: RpcCode::UnsupportedProtocolVersion.code(),
        message: Cow::Owned(format!("Unsupported protocol version `{requested}`")),
        data: Some(json!({ "supported": supported_versions(), "requested": requested })),
    }
}

/// MissingRequiredClientCapabilityError: the app needs `capability` of a client that did not
/// declare it. `requiredCapabilities` is a ClientCapabilities object, as the schema defines it.
pub(crate) fn missing_capability(capability: &str, method: &str) -> (i64, String, Value) {
    (
        RpcCode::MissingRequiredClientCapability.code(),
        format!(
            "the app asks for {method}, which needs the client capability `{capability}` this request did not declare"
        ),
        json!({ "requiredCapabilities": { capability: {} } }),
    )
}

/// The capabilities and identity the gateway describes itself with (`server/discover`): the same
/// as it answers `initialize` with, less what the stateless revision removed (`resources.subscribe`
/// as a method; `logging/setLevel`), plus the tasks extension, whose requests toolgate relays to
/// the app that created the task (whether a call becomes a task is the app's decision).
pub(crate) fn discover_result(gw: &Gateway, environment: &str) -> Value {
    json!({
        "resultType": "complete",
        "ttlMs": 0,
        "cacheScope": "private",
        "supportedVersions": supported_versions(),
        "capabilities": {
            "tools": { "listChanged": true },
            "prompts": { "listChanged": true },
            "resources": { "listChanged": true },
            "completions": {},
            "extensions": { TASKS_EXTENSION: {} },
        },
        "instructions": format!("Gateway `{}`: tools of its apps {}.", shown_name(gw), gw.servers.join(", ")),
        "_meta": { META_SERVER_INFO: server_info(gw, environment) },
    })
}

/// The gateway's name as a client is shown it, in `serverInfo` and `instructions`: the API and
/// the configuration refuse a name with hidden text, and one stored before they did is sent
/// stripped of it (borrowed when it has none).
pub(crate) fn shown_name(gw: &Gateway) -> std::borrow::Cow<'_, str> {
    crate::base::hidden_text::strip(&gw.name).0
}

/// The gateway's identity, as `initialize`'s `serverInfo` gives it: `environment` says which
/// deployment answers (Decision 12: `production` or `development`).
pub(crate) fn server_info(gw: &Gateway, environment: &str) -> Value {
    json!({
        "name": "toolgate",
        "title": format!("toolgate: {}", shown_name(gw)),
        "version": env!("CARGO_PKG_VERSION"),
        "environment": environment,
    })
}

/// The result members of a complete answer (written in by `jsonrpc::response_bytes_with_members`).
pub(crate) const COMPLETE: &str = r#""resultType":"complete""#;

/// The caching hints of a list: how long it may be kept (the gateway's catalogue TTL, 0 when the
/// gateway does not cache, and never longer than any of its apps said of its own lists) and that
/// it is the caller's alone (a key may see a filtered list).
pub(crate) fn list_hints(gw: &Gateway, app_ttl_ms: Option<u64>) -> String {
    let gateway_ms =
        if gw.configuration.cache_enabled { u64::from(gw.configuration.cache_ttl).saturating_mul(1000) } else { 0 };
    let ttl_ms = app_ttl_ms.map_or(gateway_ms, |a| a.min(gateway_ms));
    format!(r#""resultType":"complete","ttlMs":{ttl_ms},"cacheScope":"private""#)
}

/// `resources/read` through the gateway: not cached by it, so not to be cached by the client
/// beyond what the app itself says (which a stateless app puts in its own result).
pub(crate) const READ_HINTS: &str = r#""resultType":"complete","ttlMs":0,"cacheScope":"private""#;

/// One `Mcp-Param-*` header a tool declares with `x-mcp-header` on a property of its input
/// schema: the property's path in the arguments, the header name (lower case), and whether the
/// property is an integer (compared by value: `42` matches `42.0`).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ParamHeader {
    pub path: Vec<String>,
    pub header: String,
    pub integer: bool,
}

/// The `x-mcp-header` declarations of an input schema, on properties reached through
/// `properties` alone and of type string, integer or boolean; anything else is not a valid
/// declaration and declares nothing (conforming clients drop such a tool's headers).
pub(crate) fn param_headers(schema: &Value) -> Vec<ParamHeader> {
    fn walk(node: &Value, path: &mut Vec<String>, out: &mut Vec<ParamHeader>) {
        let Some(props) = node.get("properties").and_then(Value::as_object) else { return };
        for (name, sub) in props {
            path.push(name.clone());
            if let Some(token) = sub.get("x-mcp-header").and_then(Value::as_str) {
                let ty = sub.get("type").and_then(Value::as_str);
                let token_ok = !token.is_empty()
                    && token.bytes().all(|b| b.is_ascii_alphanumeric() || b"!#$%&'*+-.^_`|~".contains(&b));
                if token_ok && matches!(ty, Some("string" | "integer" | "boolean")) {
                    out.push(ParamHeader {
                        path: path.clone(),
                        header: format!("mcp-param-{}", token.to_ascii_lowercase()),
                        integer: ty == Some("integer"),
                    });
                }
            }
            walk(sub, path, out);
            path.pop();
        }
    }
    let mut out = Vec::new();
    walk(schema, &mut Vec::new(), &mut out);
    out
}

/// The `Mcp-Param-*` headers a call of a tool declaring them carries to its app, from its
/// arguments (an app of this revision checks them; a handshake-era app ignores them).
pub(crate) fn param_header_values(
    declared: &[ParamHeader],
    arguments: &Value,
) -> Vec<(http::HeaderName, http::HeaderValue)> {
    let mut out = Vec::new();
    for h in declared {
        let value = h.path.iter().try_fold(arguments, |node, key| node.get(key));
        let rendered = match value {
            Some(Value::Bool(b)) => Cow::Borrowed(if *b { "true" } else { "false" }),
            Some(Value::String(s)) => Cow::Borrowed(s.as_str()),
            Some(Value::Number(n)) => Cow::Owned(n.to_string()),
            _ => continue,
        };
        let name = http::HeaderName::from_bytes(h.header.as_bytes());
        let value = http::HeaderValue::from_str(&encode_header_value(&rendered));
        if let (Ok(name), Ok(value)) = (name, value) {
            out.push((name, value));
        }
    }
    out
}

/// Checks a `tools/call`'s `Mcp-Param-*` headers against its arguments: each declared header
/// and its argument are present together and equal (after the base64 form is decoded), or
/// absent together. An intermediary may route on these headers, so a header the body does not
/// back is refused rather than ignored.
pub(crate) fn check_param_headers(
    declared: &[ParamHeader],
    arguments: &Value,
    headers: &http::HeaderMap,
) -> Result<(), Rejection> {
    let mismatch = |h: &ParamHeader, why: &str| {
        Rejection::new(
            RpcCode::HeaderMismatch.code(),
            format!("the {} header {why} the argument `{}`", h.header, h.path.join(".")),
        )
    };
    for h in declared {
        let mut values = headers.get_all(h.header.as_str()).iter();
        let raw = values.next();
        if raw.is_some() && values.next().is_some() {
            return Err(mismatch(h, "appears more than once; it must match"));
        }
        let value = h.path.iter().try_fold(arguments, |node, key| node.get(key)).filter(|v| !v.is_null());
        let rendered = match value {
            None => None,
            Some(Value::Bool(b)) => Some(Cow::Borrowed(if *b { "true" } else { "false" })),
            Some(Value::String(s)) => Some(Cow::Borrowed(s.as_str())),
            Some(Value::Number(n)) => Some(Cow::Owned(n.to_string())),
            Some(_) => None,
        };
        match (raw, value, rendered) {
            (None, None, _) | (None, Some(_), None) => {}
            (Some(_), None, _) => return Err(mismatch(h, "is present without")),
            (Some(_), Some(_), None) => return Err(mismatch(h, "cannot carry")),
            (None, Some(_), Some(_)) => return Err(mismatch(h, "is missing for")),
            (Some(raw), Some(value), Some(rendered)) => {
                let Some(decoded) = raw.to_str().ok().and_then(decode_header_value) else {
                    return Err(mismatch(h, "carries a malformed base64 form of"));
                };
                let equal = if h.integer && value.is_number() {
                    decoded.parse::<f64>().ok() == value.as_f64()
                } else {
                    decoded == rendered
                };
                if !equal {
                    return Err(mismatch(h, "does not match"));
                }
            }
        }
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;
    use http::{HeaderName, HeaderValue};

    fn headers(pairs: &[(&str, &str)]) -> http::HeaderMap {
        let mut h = http::HeaderMap::new();
        for (n, v) in pairs {
            h.append(HeaderName::from_bytes(n.as_bytes()).unwrap(), HeaderValue::from_str(v).unwrap());
        }
        h
    }

    fn params(v: Value) -> RawJson {
        RawJson::from_value(&v)
    }

    fn meta(caps: Value) -> Value {
        json!({ META_PROTOCOL_VERSION: "2026-07-28", META_CLIENT_CAPABILITIES: caps })
    }

    const OK_HEADERS: &[(&str, &str)] =
        &[("mcp-protocol-version", "2026-07-28"), ("mcp-method", "tools/call"), ("mcp-name", "echo")];

    #[test]
    fn the_era_is_chosen_by_the_version_header() {
        assert!(is_stateless(&headers(&[("mcp-protocol-version", "2026-07-28")]), Some("tools/list")));
        assert!(
            is_stateless(&headers(&[("mcp-protocol-version", "v999")]), Some("tools/list")),
            "unknown: answered -32022"
        );
        assert!(!is_stateless(&headers(&[("mcp-protocol-version", "2025-06-18")]), Some("tools/list")));
        assert!(!is_stateless(&headers(&[]), Some("tools/list")), "no header: the handshake era");
        assert!(is_stateless(&headers(&[("mcp-protocol-version", "2025-11-25")]), Some("server/discover")));
    }

    #[test]
    fn a_task_request_names_its_task_in_mcp_name_and_the_extension_is_read_from_the_capabilities() {
        let caps = json!({ "extensions": { TASKS_EXTENSION: {} } });
        let body = json!({ "taskId": "tgt1.abc", "_meta": meta(caps) });
        let h = |name: &str| {
            headers(&[("mcp-protocol-version", "2026-07-28"), ("mcp-method", "tasks/get"), ("mcp-name", name)])
        };
        let env = classify(&h("tgt1.abc"), "tasks/get", Some(&params(body.clone()))).unwrap();
        assert!(env.caps.tasks && !env.caps.elicitation, "{env:?}");
        let e = classify(&h("tgt1.other"), "tasks/get", Some(&params(body))).unwrap_err();
        assert_eq!((e.code, e.status()), (RpcCode::HeaderMismatch.code(), 400));
        assert!(e.message.contains("params.taskId"), "{e:?}");
        // An extension of another name, or the key with a value that is not an object: no tasks.
        for caps in
            [json!({ "extensions": { "x.example/other": {} } }), json!({ "extensions": { TASKS_EXTENSION: true } })]
        {
            let body = json!({ "taskId": "tgt1.abc", "_meta": meta(caps) });
            assert!(!classify(&h("tgt1.abc"), "tasks/get", Some(&params(body))).unwrap().caps.tasks);
        }
    }

    #[test]
    fn the_envelope_is_checked_before_the_headers_and_the_version_last() {
        let call = |h: &[(&str, &str)], p: Value| classify(&headers(h), "tools/call", Some(&params(p)));
        let env = call(OK_HEADERS, json!({ "name": "echo", "_meta": meta(json!({ "elicitation": {} })) })).unwrap();
        assert_eq!(env.caps, ClientCaps { elicitation: true, ..ClientCaps::default() });
        assert!(!env.wants_logs);
        // URL mode is named under `elicitation.url` (an empty object is form mode alone).
        let caps = json!({ "elicitation": { "form": {}, "url": {} } });
        let env = call(OK_HEADERS, json!({ "name": "echo", "_meta": meta(caps) })).unwrap();
        assert_eq!(env.caps, ClientCaps { elicitation: true, elicitation_url: true, ..ClientCaps::default() });
        // No _meta, or one without the required keys: -32602 (HTTP 400).
        let e = call(OK_HEADERS, json!({ "name": "echo" })).unwrap_err();
        assert_eq!((e.code, e.status()), (-32602, 400));
        let e =
            call(OK_HEADERS, json!({ "name": "echo", "_meta": { META_PROTOCOL_VERSION: "2026-07-28" } })).unwrap_err();
        assert!(e.message.contains("clientCapabilities"), "{e:?}");
        let e = classify(&headers(OK_HEADERS), "tools/call", None).unwrap_err();
        assert_eq!(e.code, -32602);
        // clientInfo is optional; a logLevel asks for the app's log messages.
        let mut m = meta(json!({}));
        m["io.modelcontextprotocol/logLevel"] = json!("info");
        assert!(call(OK_HEADERS, json!({ "name": "echo", "_meta": m })).unwrap().wants_logs);
        // Each routing header against the body: -32020.
        let body = json!({ "name": "echo", "_meta": meta(json!({})) });
        for (h, what) in [
            (&[("mcp-method", "tools/call"), ("mcp-name", "echo")][..], "no version header"),
            (&[("mcp-protocol-version", "2026-07-28"), ("mcp-name", "echo")][..], "no Mcp-Method"),
            (
                &[("mcp-protocol-version", "2026-07-28"), ("mcp-method", "tools/list"), ("mcp-name", "echo")][..],
                "method",
            ),
            (&[("mcp-protocol-version", "2026-07-28"), ("mcp-method", "tools/call")][..], "no Mcp-Name"),
            (
                &[("mcp-protocol-version", "2026-07-28"), ("mcp-method", "tools/call"), ("mcp-name", "other")][..],
                "name",
            ),
            (
                &[
                    ("mcp-protocol-version", "2026-07-28"),
                    ("mcp-method", "tools/call"),
                    ("mcp-method", "tools/call"),
                    ("mcp-name", "echo"),
                ][..],
                "a routing header twice",
            ),
        ] {
            let e = call(h, body.clone()).unwrap_err();
            assert_eq!((e.code, e.status()), (RpcCode::HeaderMismatch.code(), 400), "{what}: {e:?}");
        }
        // The base64 form of Mcp-Name.
        let h =
            [("mcp-protocol-version", "2026-07-28"), ("mcp-method", "tools/call"), ("mcp-name", "=?base64?ZWNobw==?=")];
        assert!(call(&h, body.clone()).is_ok());
        // The version: header and body agree on one this server does not speak -> -32022 naming both.
        let h = [("mcp-protocol-version", "v9"), ("mcp-method", "server/discover")];
        let p = json!({ "_meta": { META_PROTOCOL_VERSION: "v9", META_CLIENT_CAPABILITIES: {} } });
        let e = classify(&headers(&h), "server/discover", Some(&params(p))).unwrap_err();
        assert_eq!((e.code, e.status()), (-32022, 400));
        let data = e.data.unwrap();
        assert_eq!(data["requested"], "v9");
        assert_eq!(data["supported"][0], "2026-07-28");
        // The header says one version and the body another: a mismatch, not an unsupported version.
        let h = [("mcp-protocol-version", "2026-07-28"), ("mcp-method", "server/discover")];
        let p = json!({ "_meta": { META_PROTOCOL_VERSION: "v9", META_CLIENT_CAPABILITIES: {} } });
        assert_eq!(
            classify(&headers(&h), "server/discover", Some(&params(p))).unwrap_err().code,
            RpcCode::HeaderMismatch.code()
        );
    }

    #[test]
    fn a_list_is_kept_no_longer_than_the_gateway_or_any_app_says() {
        let mut gw = Gateway::for_tests("gw_1", "org_1");
        gw.configuration.cache_enabled = true;
        gw.configuration.cache_ttl = 300;
        let ttl = |app: Option<u64>, gw: &Gateway| {
            let hints: Value = serde_json::from_str(&format!("{{{}}}", list_hints(gw, app))).unwrap();
            hints["ttlMs"].as_u64().unwrap()
        };
        assert_eq!(ttl(None, &gw), 300_000);
        assert_eq!(ttl(Some(7000), &gw), 7000);
        assert_eq!(ttl(Some(900_000), &gw), 300_000);
        gw.configuration.cache_enabled = false;
        assert_eq!(ttl(Some(7000), &gw), 0, "a gateway that does not cache: nothing to keep");
    }

    #[test]
    fn statuses_follow_the_specification_table() {
        assert_eq!(RpcCode::stateless_status(-32601), 404);
        for c in [-32700, -32600, -32602, -32020, -32021, -32022] {
            assert_eq!(RpcCode::stateless_status(c), 400, "{c}");
        }
        assert_eq!(RpcCode::stateless_status(-32603), 200);
        assert_eq!(RpcCode::stateless_status(-32004), 200, "an app's failure is a JSON-RPC answer");
    }

    #[test]
    fn members_are_written_into_the_result_text() {
        use crate::mcp::jsonrpc::{response_bytes_with_members, Id};
        let answer = |text: &str| {
            let r = RawJson::from_text(text.into()).unwrap();
            let bytes = response_bytes_with_members(&Id::from(1u64), &r, COMPLETE);
            serde_json::from_slice::<Value>(&bytes).unwrap()["result"].clone()
        };
        let out = response_bytes_with_members(
            &Id::from(1u64),
            &RawJson::from_text(r#"{"content":[{"type":"text","text":"1.50"}]}"#.into()).unwrap(),
            COMPLETE,
        );
        assert_eq!(
            std::str::from_utf8(&out).unwrap(),
            r#"{"jsonrpc":"2.0","id":1,"result":{"resultType":"complete","content":[{"type":"text","text":"1.50"}]}}"#,
            "the result's text is kept as it came"
        );
        assert_eq!(answer("{ }"), json!({ "resultType": "complete" }));
        assert_eq!(
            answer(r#"{"resultType":"input_required"}"#),
            json!({ "resultType": "input_required" }),
            "an app's own stays"
        );
        assert_eq!(answer("[1]"), json!([1]));
    }

    #[test]
    fn param_headers_are_declared_on_simple_properties_and_match_the_arguments() {
        let schema = json!({ "type": "object", "properties": {
            "region": { "type": "string", "x-mcp-header": "Region" },
            "n": { "type": "integer", "x-mcp-header": "N" },
            "bad": { "type": "object", "x-mcp-header": "Bad" },
            "nested": { "type": "object", "properties": { "flag": { "type": "boolean", "x-mcp-header": "Flag" } } },
        }});
        let declared = param_headers(&schema);
        let names: Vec<&str> = declared.iter().map(|d| d.header.as_str()).collect();
        assert_eq!(declared.len(), 3, "{names:?}");
        assert!(
            names.contains(&"mcp-param-region") && names.contains(&"mcp-param-n") && names.contains(&"mcp-param-flag")
        );
        assert!(!names.contains(&"mcp-param-bad"), "objects cannot be headers");
        let args = json!({ "region": "eu west", "n": 42, "nested": { "flag": true } });
        let ok = headers(&[("mcp-param-region", "eu west"), ("mcp-param-n", "42.0"), ("mcp-param-flag", "true")]);
        assert!(check_param_headers(&declared, &args, &ok).is_ok());
        let wrong = headers(&[("mcp-param-region", "us"), ("mcp-param-n", "42"), ("mcp-param-flag", "true")]);
        assert_eq!(check_param_headers(&declared, &args, &wrong).unwrap_err().code, RpcCode::HeaderMismatch.code());
        let missing = headers(&[("mcp-param-n", "42"), ("mcp-param-flag", "true")]);
        assert!(check_param_headers(&declared, &args, &missing).unwrap_err().message.contains("missing"));
        let extra = headers(&[("mcp-param-region", "eu"), ("mcp-param-n", "1")]);
        let e = check_param_headers(&declared, &json!({ "region": "eu", "n": 1 }), &extra);
        assert!(e.is_ok(), "{e:?}");
        let unbacked = headers(&[("mcp-param-region", "eu")]);
        assert!(check_param_headers(&declared, &json!({}), &unbacked).unwrap_err().message.contains("without"));
        let b64 = headers(&[
            ("mcp-param-region", "=?base64?ZXUgd2VzdA==?="),
            ("mcp-param-n", "42"),
            ("mcp-param-flag", "true"),
        ]);
        assert!(check_param_headers(&declared, &args, &b64).is_ok());
        assert_eq!(decode_header_value("=?base64?!!?="), None);
        for v in ["plain-name", " edge", "naïve", "=?base64?x?="] {
            assert_eq!(decode_header_value(&encode_header_value(v)).as_deref(), Some(v), "{v}");
        }
    }
}
