//! JSON-RPC 2.0 messages as the gateway sees them on its hot path.
//!
//! Every MCP message (client -> gateway, gateway -> upstream, upstream -> gateway) goes through
//! [`parse`] once and is written back with the `*_bytes` helpers, so both are kept cheap:
//!
//! * `id` is an [`Id`]: the id as the peer wrote it (string or number), echoed back byte for byte
//!   (`1` stays `1`, `"1"` stays `"1"`, `12345678901234567890123` and `1e3` are not turned into
//!   floats as a [`serde_json::Value`] would). JSON-RPC allows `null` ids only in error responses;
//!   requests with a `null` id are accepted (some clients send them) and answered with `null`.
//! * A response's `result` is [`RawJson`]: the text it arrived in, checked to be JSON but not
//!   built into a tree. The gateway relays results (often the largest messages: file contents,
//!   query rows) without looking inside, so a relayed result is copied once instead of parsed into
//!   a tree, serialised again and freed; the few readers that need a tree (the catalogue, the
//!   upstream `initialize`) parse it with [`RawJson::to_value`].
//! * `params` are [`RawJson`] too: a `tools/call` reads its `name` and relays the other members
//!   (`arguments`, `_meta`) as the text they arrived in (`dispatch::NamedParams`); the readers of
//!   other methods' params parse what they need. `error.data` is a [`serde_json::Value`].
//! * A message is first read into an envelope that borrows each member's text from the input, so
//!   `"jsonrpc"` is checked without a `String` and only the parts a message needs are converted.
//! * Parsing distinguishes a *parse error* (not JSON at all, -32700, answered with `id: null`) from
//!   an *invalid request* (JSON but not a JSON-RPC 2.0 message, -32600, answered with the id when one
//!   could be read).
//!
//! Batches (JSON arrays) are parsed item by item, each item valid or invalid on its own, as
//! JSON-RPC 2.0 says; MCP 2025-03-26 allows batches, 2025-06-18 removed them, so whether a batch is
//! accepted is the caller's decision.

use crate::base::strict_json;
use crate::mcp::protocol::RpcCode;
use serde::de::{self, Deserializer};
use serde::ser::{SerializeMap, Serializer};
use serde::{Deserialize, Serialize};
use serde_json::value::RawValue;
use serde_json::Value;
use std::borrow::Cow;
use std::fmt;

/// A JSON value kept as text (see the module documentation): relayed by copying, parsed only by
/// a reader that needs a tree.
#[derive(Clone)]
pub struct RawJson(Box<RawValue>);

impl RawJson {
    /// The JSON text of `v` (a `Value`, or any value that serialises with string keys).
    pub fn from_value<T: Serialize + ?Sized>(v: &T) -> RawJson {
        // Serialising a Value cannot fail (its keys are strings).
        RawJson(serde_json::value::to_raw_value(v).unwrap_or_else(|_| RawValue::NULL.to_owned()))
    }

    /// JSON text kept as it is, or `None` if it is not JSON.
    pub(crate) fn from_text(text: String) -> Option<RawJson> {
        RawValue::from_string(text).ok().map(RawJson)
    }

    pub fn get(&self) -> &str {
        self.0.get()
    }

    pub(crate) fn as_raw(&self) -> &RawValue {
        &self.0
    }

    /// The value as a tree (`Null` if it is nested deeper than serde_json's recursion limit,
    /// which a relayed result may be: the raw check does not recurse).
    pub fn to_value(&self) -> Value {
        serde_json::from_str(self.get()).unwrap_or(Value::Null)
    }

    /// Reads the members of an object that `T` names, ignoring the rest without building it.
    /// Anything but an object is an error: serde would otherwise read a struct from an array,
    /// member by member, and find a `name` or an `isError` in `["echo"]` or `[true]`.
    pub fn read<'a, T: Deserialize<'a>>(&'a self) -> Result<T, serde_json::Error> {
        if !self.get().starts_with('{') {
            return Err(de::Error::custom("not a JSON object"));
        }
        serde_json::from_str(self.get())
    }
}

impl fmt::Debug for RawJson {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.get())
    }
}

/// The same JSON value, whatever the spacing or the order of object members.
impl PartialEq for RawJson {
    fn eq(&self, other: &RawJson) -> bool {
        self.get() == other.get() || self.to_value() == other.to_value()
    }
}

impl PartialEq<Value> for RawJson {
    fn eq(&self, other: &Value) -> bool {
        self.to_value() == *other
    }
}

impl Serialize for RawJson {
    fn serialize<S: Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
        self.0.serialize(s)
    }
}

/// A JSON-RPC id: a string, a number or null, written back exactly as the peer wrote it.
///
/// Integers that `u64` or `i64` hold and writes back unchanged (the gateway's own ids, and those
/// of nearly every client) are kept as numbers, without allocating; any other number (beyond 64
/// bits, with a fraction or an exponent) and every string is kept as its JSON text, since
/// `serde_json::Value` would write `12345678901234567890123` or `1e3` back as a float.
#[derive(Clone, Default)]
pub struct Id(IdRepr);

#[derive(Clone, Default)]
enum IdRepr {
    #[default]
    Null,
    Unsigned(u64),
    Signed(i64),
    Text(Box<RawValue>),
}

impl Id {
    pub const NULL: Id = Id(IdRepr::Null);

    /// The id of a message member, or `None` when it is not a string, a number or null.
    fn from_raw(raw: &RawValue) -> Option<Id> {
        let text = raw.get();
        match text.as_bytes().first()? {
            b'"' => Some(Id(IdRepr::Text(raw.to_owned()))),
            b'n' => Some(Id::NULL),
            b'-' | b'0'..=b'9' => {
                let mut buf = itoa::Buffer::new();
                if let Some(n) = text.parse::<u64>().ok().filter(|n| buf.format(*n) == text) {
                    return Some(Id(IdRepr::Unsigned(n)));
                }
                if let Some(n) = text.parse::<i64>().ok().filter(|n| buf.format(*n) == text) {
                    return Some(Id(IdRepr::Signed(n)));
                }
                Some(Id(IdRepr::Text(raw.to_owned())))
            }
            _ => None,
        }
    }

    /// The id when it is an integer that fits a `u64` (the gateway's own ids are).
    pub fn as_u64(&self) -> Option<u64> {
        match self.0 {
            IdRepr::Unsigned(n) => Some(n),
            _ => None,
        }
    }

    pub fn is_null(&self) -> bool {
        matches!(self.0, IdRepr::Null)
    }

    /// The id as a tree (a number beyond 64 bits becomes a float: for reading, never for writing
    /// back).
    pub fn to_value(&self) -> Value {
        match &self.0 {
            IdRepr::Null => Value::Null,
            IdRepr::Unsigned(n) => Value::from(*n),
            IdRepr::Signed(n) => Value::from(*n),
            IdRepr::Text(raw) => serde_json::from_str(raw.get()).unwrap_or(Value::Null),
        }
    }
}

impl From<u64> for Id {
    fn from(n: u64) -> Id {
        Id(IdRepr::Unsigned(n))
    }
}

impl From<&str> for Id {
    fn from(s: &str) -> Id {
        // A string always serialises.
        Id(IdRepr::Text(serde_json::value::to_raw_value(s).unwrap_or_else(|_| RawValue::NULL.to_owned())))
    }
}

impl fmt::Display for Id {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match &self.0 {
            IdRepr::Null => f.write_str("null"),
            IdRepr::Unsigned(n) => write!(f, "{n}"),
            IdRepr::Signed(n) => write!(f, "{n}"),
            IdRepr::Text(raw) => f.write_str(raw.get()),
        }
    }
}

impl fmt::Debug for Id {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        fmt::Display::fmt(self, f)
    }
}

/// The same id: equal text, or the same string written with other escapes.
impl PartialEq for Id {
    fn eq(&self, other: &Id) -> bool {
        match (&self.0, &other.0) {
            (IdRepr::Null, IdRepr::Null) => true,
            (IdRepr::Unsigned(a), IdRepr::Unsigned(b)) => a == b,
            (IdRepr::Signed(a), IdRepr::Signed(b)) => a == b,
            (IdRepr::Text(a), IdRepr::Text(b)) => {
                a.get() == b.get()
                    || (a.get().starts_with('"')
                        && b.get().starts_with('"')
                        && serde_json::from_str::<String>(a.get()).ok() == serde_json::from_str::<String>(b.get()).ok())
            }
            _ => false,
        }
    }
}

impl PartialEq<Value> for Id {
    fn eq(&self, other: &Value) -> bool {
        self.to_value() == *other
    }
}

impl Serialize for Id {
    fn serialize<S: Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
        match &self.0 {
            IdRepr::Null => s.serialize_unit(),
            IdRepr::Unsigned(n) => s.serialize_u64(*n),
            IdRepr::Signed(n) => s.serialize_i64(*n),
            IdRepr::Text(raw) => raw.serialize(s),
        }
    }
}

// The standard codes, named as JSON-RPC 2.0 names them; their values and every other code the
// gateway answers with are in one list, `protocol::RpcCode`.
pub(crate) const PARSE_ERROR: i64 = RpcCode::ParseError.code();
pub(crate) const INVALID_REQUEST: i64 = RpcCode::InvalidRequest.code();
pub(crate) const METHOD_NOT_FOUND: i64 = RpcCode::MethodNotFound.code();
/// MCP also uses it for "Unknown tool: NAME".
pub(crate) const INVALID_PARAMS: i64 = RpcCode::InvalidParams.code();
pub(crate) const INTERNAL_ERROR: i64 = RpcCode::InternalError.code();

/// The JSON-RPC version string; anything else in `jsonrpc` makes a message invalid.
pub(crate) const VERSION: &str = "2.0";

/// The `error` member of a response.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct RpcErrorObject {
    pub code: i64,
    pub message: String,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub data: Option<Value>,
    /// What the operator's request log keeps beyond `message` (an app's failure in full, where
    /// the client is told one sentence): never written to a client, never read from one. A
    /// thin pointer, since every response carries the field.
    #[serde(skip)]
    pub detail: Option<Box<String>>,
}

impl RpcErrorObject {
    pub fn new(code: i64, message: impl Into<String>) -> Self {
        Self { code, message: message.into(), data: None, detail: None }
    }

    /// The error with the detail the request log keeps ([`RpcErrorObject::detail`]).
    pub(crate) fn with_detail(mut self, detail: impl Into<String>) -> Self {
        self.detail = Some(Box::new(detail.into()));
        self
    }

    pub(crate) fn with_data(mut self, data: Value) -> Self {
        self.data = Some(data);
        self
    }

    pub(crate) fn parse_error() -> Self {
        Self::new(PARSE_ERROR, "Parse error")
    }

    pub(crate) fn invalid_request(reason: impl fmt::Display) -> Self {
        Self::new(INVALID_REQUEST, format!("Invalid Request: {reason}"))
    }

    pub(crate) fn method_not_found(method: &str) -> Self {
        Self::new(METHOD_NOT_FOUND, format!("Method not found: {method}"))
    }

    pub(crate) fn invalid_params(message: impl Into<String>) -> Self {
        Self::new(INVALID_PARAMS, message)
    }

    /// The MCP error for a `tools/call` naming a tool that does not exist (or that the caller may
    /// not see: the two are deliberately indistinguishable).
    pub(crate) fn unknown_tool(name: &str) -> Self {
        Self::new(INVALID_PARAMS, format!("Unknown tool: {name}"))
    }

    pub fn internal(message: impl Into<String>) -> Self {
        Self::new(INTERNAL_ERROR, message)
    }
}

impl fmt::Display for RpcErrorObject {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "JSON-RPC error {}: {}", self.code, self.message)
    }
}

/// A request: has a `method` and an `id`, expects exactly one response.
#[derive(Debug, Clone, PartialEq)]
pub struct Request {
    /// String or number (or `null`, tolerated), echoed back as received.
    pub id: Id,
    pub method: String,
    /// An object or an array, as its text: relayed as it came; read with [`RawJson::read`] or
    /// [`RawJson::to_value`].
    pub params: Option<RawJson>,
}

/// A notification: has a `method` and no `id`, is never answered.
#[derive(Debug, Clone, PartialEq)]
pub struct Notification {
    pub method: String,
    pub params: Option<RawJson>,
}

/// A response: `result` or `error` for the request with the same `id`.
#[derive(Debug, Clone, PartialEq)]
pub struct Response {
    /// `null` only for errors about a request whose id could not be read.
    pub id: Id,
    pub outcome: Result<RawJson, RpcErrorObject>,
}

impl Response {
    pub fn success(id: Id, result: Value) -> Self {
        Self { id, outcome: Ok(RawJson::from_value(&result)) }
    }

    pub fn error(id: Id, error: RpcErrorObject) -> Self {
        Self { id, outcome: Err(error) }
    }

    /// The same response for another id (the gateway swaps its own upstream-facing id for the
    /// client's one).
    pub(crate) fn with_id(mut self, id: Id) -> Self {
        self.id = id;
        self
    }

    pub fn to_bytes(&self) -> Vec<u8> {
        match &self.outcome {
            Ok(result) => {
                // Sized exactly: a relayed answer becomes a `Bytes`, which takes a `Vec` whose
                // length is its capacity as is and allocates a header for any other.
                let len = RESPONSE_HEAD.len() + json_len(&self.id) + RESULT_KEY.len() + result.get().len() + 1;
                let out = write_response(Vec::with_capacity(len), &self.id, result);
                debug_assert_eq!(out.len(), len);
                out
            }
            Err(e) => error_bytes(&self.id, e.code, &e.message, e.data.as_ref()),
        }
    }
}

/// One JSON-RPC message.
#[derive(Debug, Clone, PartialEq)]
pub enum Message {
    Request(Request),
    Notification(Notification),
    Response(Response),
}

impl Message {
    pub fn method(&self) -> Option<&str> {
        match self {
            Message::Request(r) => Some(&r.method),
            Message::Notification(n) => Some(&n.method),
            Message::Response(_) => None,
        }
    }

    /// Serialises the message (always with `"jsonrpc":"2.0"` first).
    pub fn to_bytes(&self) -> Vec<u8> {
        match self {
            Message::Request(r) => request_bytes(&r.id, &r.method, r.params.as_ref()),
            Message::Notification(n) => notification_bytes(&n.method, n.params.as_ref()),
            Message::Response(r) => r.to_bytes(),
        }
    }
}

impl Serialize for Message {
    fn serialize<S: Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
        let mut m = s.serialize_map(None)?;
        m.serialize_entry("jsonrpc", VERSION)?;
        match self {
            Message::Request(r) => {
                m.serialize_entry("id", &r.id)?;
                m.serialize_entry("method", &r.method)?;
                if let Some(p) = &r.params {
                    m.serialize_entry("params", p)?;
                }
            }
            Message::Notification(n) => {
                m.serialize_entry("method", &n.method)?;
                if let Some(p) = &n.params {
                    m.serialize_entry("params", p)?;
                }
            }
            Message::Response(r) => {
                m.serialize_entry("id", &r.id)?;
                match &r.outcome {
                    Ok(v) => m.serialize_entry("result", v)?,
                    Err(e) => m.serialize_entry("error", e)?,
                }
            }
        }
        m.end()
    }
}

/// An item of a batch that is JSON but not a valid JSON-RPC message. It is answered with an
/// `INVALID_REQUEST` error carrying `id` (null when no usable id was present).
#[derive(Debug, Clone, PartialEq)]
pub struct InvalidMessage {
    pub id: Id,
    pub reason: String,
}

impl InvalidMessage {
    pub fn to_response(&self) -> Response {
        Response::error(self.id.clone(), RpcErrorObject::invalid_request(&self.reason))
    }
}

/// What one HTTP body / one stdio line / one SSE event contained.
#[derive(Debug, Clone, PartialEq)]
pub enum Incoming {
    Single(Message),
    /// A non-empty JSON array; every element parsed on its own.
    Batch(Vec<Result<Message, InvalidMessage>>),
}

/// Why a body could not be turned into [`Incoming`].
#[derive(Debug, Clone, PartialEq, thiserror::Error)]
pub enum ParseError {
    /// Not JSON (or not UTF-8): answer -32700 with `id: null`.
    #[error("parse error: {0}")]
    Parse(String),
    /// JSON, but not a JSON-RPC 2.0 message (or an empty batch): answer -32600.
    #[error("invalid request: {}", .0.reason)]
    Invalid(InvalidMessage),
    /// A client's message that reads two ways, or that a reader cannot take whole
    /// ([`parse_from_client`]): -32602 when the place is in `params`, else -32600.
    #[error("{what}")]
    Ambiguous { id: Id, what: strict_json::Ambiguous },
}

impl ParseError {
    /// The error response to send back for this parse failure.
    pub fn to_response(&self) -> Response {
        match self {
            ParseError::Parse(_) => Response::error(Id::NULL, RpcErrorObject::parse_error()),
            ParseError::Invalid(inv) => inv.to_response(),
            ParseError::Ambiguous { id, what } if in_params(what) => {
                Response::error(id.clone(), RpcErrorObject::invalid_params(format!("Invalid params: {what}")))
            }
            ParseError::Ambiguous { id, what } => Response::error(id.clone(), RpcErrorObject::invalid_request(what)),
        }
    }

    pub fn code(&self) -> i64 {
        match self {
            ParseError::Parse(_) => PARSE_ERROR,
            ParseError::Ambiguous { what, .. } if in_params(what) => INVALID_PARAMS,
            ParseError::Invalid(_) | ParseError::Ambiguous { .. } => INVALID_REQUEST,
        }
    }
}

/// Whether the place that reads two ways is inside the message's `params`.
fn in_params(what: &strict_json::Ambiguous) -> bool {
    let path = what.path();
    path == "params" || path.starts_with("params.") || path.starts_with("params[")
}

/// Wire shape of one message, borrowed from the bytes it was parsed from: every member is kept
/// as its JSON text and converted only as far as the message needs ([`classify`]), so that a
/// `tools/call` costs no tree of its `params`, no `String` for `"jsonrpc"` and no boxed envelope.
/// Presence is tracked with [`present`], so `"id": null` is told apart from an absent `id`.
#[derive(Deserialize)]
struct Envelope<'a> {
    #[serde(default, borrow, deserialize_with = "present")]
    jsonrpc: Option<&'a RawValue>,
    #[serde(default, borrow, deserialize_with = "present")]
    id: Option<&'a RawValue>,
    #[serde(default, borrow, deserialize_with = "present")]
    method: Option<&'a RawValue>,
    #[serde(default, borrow, deserialize_with = "present")]
    params: Option<&'a RawValue>,
    #[serde(default, borrow, deserialize_with = "present")]
    result: Option<&'a RawValue>,
    #[serde(default, borrow, deserialize_with = "present")]
    error: Option<&'a RawValue>,
}

/// Deserialises a member that is present (even as `null`) to `Some(text)`.
fn present<'de, D: Deserializer<'de>>(d: D) -> Result<Option<&'de RawValue>, D::Error> {
    <&RawValue>::deserialize(d).map(Some)
}

/// Either one envelope or an array of arbitrary values (validated one by one).
enum Raw<'a> {
    One(Envelope<'a>),
    Many(Vec<&'a RawValue>),
}

impl<'de> Deserialize<'de> for Raw<'de> {
    fn deserialize<D: Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        struct V;
        impl<'de> de::Visitor<'de> for V {
            type Value = Raw<'de>;
            fn expecting(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
                f.write_str("a JSON-RPC message object or an array of them")
            }
            fn visit_map<A: de::MapAccess<'de>>(self, map: A) -> Result<Raw<'de>, A::Error> {
                Envelope::deserialize(de::value::MapAccessDeserializer::new(map)).map(Raw::One)
            }
            fn visit_seq<A: de::SeqAccess<'de>>(self, mut seq: A) -> Result<Raw<'de>, A::Error> {
                let mut items = Vec::with_capacity(seq.size_hint().unwrap_or(0));
                while let Some(v) = seq.next_element::<&RawValue>()? {
                    items.push(v);
                }
                Ok(Raw::Many(items))
            }
        }
        d.deserialize_any(V)
    }
}

/// Parses one body / line / SSE event.
///
/// JSON that is neither an object nor an array (e.g. `42`) is an invalid request, not a parse
/// error, as JSON-RPC 2.0 prescribes.
pub fn parse(bytes: &[u8]) -> Result<Incoming, ParseError> {
    // Read as text when it is UTF-8 (checked once, a word at a time): serde then keeps the raw
    // members and reads the strings without checking each one's UTF-8 again. Bytes that are not
    // UTF-8 are read as bytes, for serde's own account of where.
    let read = match std::str::from_utf8(bytes) {
        Ok(text) => serde_json::from_str::<Raw>(text),
        Err(_) => serde_json::from_slice::<Raw>(bytes),
    };
    match read {
        Ok(Raw::One(env)) => classify(env).map(Incoming::Single).map_err(ParseError::Invalid),
        Ok(Raw::Many(items)) => {
            if items.is_empty() {
                return Err(ParseError::Invalid(InvalidMessage { id: Id::NULL, reason: "empty batch".into() }));
            }
            Ok(Incoming::Batch(items.into_iter().map(batch_item).collect()))
        }
        Err(e) if e.is_data() => {
            // Valid JSON of the wrong shape: a scalar at top level, or a member repeated.
            Err(ParseError::Invalid(InvalidMessage { id: Id::NULL, reason: "expected a JSON object or array".into() }))
        }
        Err(e) => Err(ParseError::Parse(e.to_string())),
    }
}

/// Parses a message a client sent, which toolgate decides on and forwards: it must also read one
/// way only (Decision 22 of the design; `base::strict_json`). A member written twice at any depth,
/// a lone surrogate, a number no reader holds or nesting beyond 128 is refused, naming the place,
/// instead of being read one way here and another way by the app. Messages from apps go through
/// [`parse`]: what toolgate decides on in them (definitions) is written out again, never relayed.
pub fn parse_from_client(bytes: &[u8]) -> Result<Incoming, ParseError> {
    let parsed = parse(bytes);
    let id = match &parsed {
        Ok(Incoming::Single(Message::Request(r))) => r.id.clone(),
        Ok(_) => Id::NULL,
        // Valid JSON refused for its shape: a member written twice at the top is named.
        Err(ParseError::Invalid(inv)) if inv.id.is_null() => match strict_json::check(bytes) {
            Err(what @ strict_json::Ambiguous::Duplicate { .. }) => {
                return Err(ParseError::Invalid(InvalidMessage { id: Id::NULL, reason: what.to_string() }))
            }
            _ => return parsed,
        },
        Err(_) => return parsed,
    };
    match strict_json::check(bytes) {
        Ok(()) => parsed,
        Err(what) => Err(ParseError::Ambiguous { id, what }),
    }
}

/// Parses bytes that must hold exactly one message (stdio lines, SSE events from an upstream).
/// A batch is flattened by the caller with [`parse`] if it wants to accept one.
pub fn parse_message(bytes: &[u8]) -> Result<Message, ParseError> {
    match parse(bytes)? {
        Incoming::Single(m) => Ok(m),
        Incoming::Batch(_) => {
            Err(ParseError::Invalid(InvalidMessage { id: Id::NULL, reason: "batch not allowed here".into() }))
        }
    }
}

/// Validates one batch element (already checked to be JSON).
fn batch_item(item: &RawValue) -> Result<Message, InvalidMessage> {
    // Checked first: serde would also read an envelope from an array, member by member.
    let env = item.get().starts_with('{').then(|| serde_json::from_str::<Envelope>(item.get()).ok()).flatten();
    match env {
        Some(env) => classify(env),
        None => Err(InvalidMessage { id: Id::NULL, reason: "batch element is not an object".into() }),
    }
}

fn classify(env: Envelope<'_>) -> Result<Message, InvalidMessage> {
    // Numbers, strings and null are all an id may be (`Some(None)`: present, but something
    // else); each is echoed back as its text came.
    let id: Option<Option<Id>> = env.id.map(Id::from_raw);
    // The id to put on an error about this message: only a well-formed one is echoed.
    fn invalid(id: Option<&Id>, reason: &str) -> InvalidMessage {
        InvalidMessage { id: id.cloned().unwrap_or(Id::NULL), reason: reason.to_string() }
    }
    if let Some(None) = id {
        let reason = match env.jsonrpc {
            Some(v) if v.get() == "\"2.0\"" || serde_json::from_str::<String>(v.get()).is_ok_and(|v| v == VERSION) => {
                "\"id\" must be a string or a number"
            }
            _ => "\"jsonrpc\" must be \"2.0\"",
        };
        return Err(invalid(None, reason));
    }
    let id = id.flatten();

    match env.jsonrpc {
        // The usual spelling is compared as text; an escaped one is read as a string.
        Some(v) if v.get() == "\"2.0\"" => {}
        Some(v) if serde_json::from_str::<String>(v.get()).is_ok_and(|v| v == VERSION) => {}
        Some(_) => return Err(invalid(id.as_ref(), "\"jsonrpc\" must be \"2.0\"")),
        None => return Err(invalid(id.as_ref(), "missing \"jsonrpc\": \"2.0\"")),
    }

    if let Some(method) = env.method {
        let Ok(method) = serde_json::from_str::<String>(method.get()) else {
            return Err(invalid(id.as_ref(), "\"method\" must be a string"));
        };
        if env.result.is_some() || env.error.is_some() {
            return Err(invalid(id.as_ref(), "a request cannot carry \"result\" or \"error\""));
        }
        let params = match env.params {
            None => None,
            Some(p) if p.get().starts_with(['{', '[']) => Some(RawJson(p.to_owned())),
            // Tolerated: `"params": null` means "no params" for several clients.
            Some(p) if p.get() == "null" => None,
            Some(_) => return Err(invalid(id.as_ref(), "\"params\" must be an object or an array")),
        };
        return Ok(match id {
            Some(id) => Message::Request(Request { id, method, params }),
            None => Message::Notification(Notification { method, params }),
        });
    }

    // A response.
    let Some(id) = id else {
        return Err(invalid(None, "missing \"method\" (request) or \"id\" (response)"));
    };
    if env.params.is_some() {
        return Err(invalid(Some(&id), "a response cannot carry \"params\""));
    }
    let outcome = match (env.result, env.error) {
        (Some(result), None) => Ok(RawJson(result.to_owned())),
        (None, Some(error)) => match serde_json::from_str::<RpcErrorObject>(error.get()) {
            Ok(e) => Err(e),
            Err(_) => return Err(invalid(Some(&id), "\"error\" must be {code: integer, message: string}")),
        },
        (Some(_), Some(_)) => return Err(invalid(Some(&id), "a response has \"result\" or \"error\", not both")),
        (None, None) => return Err(invalid(Some(&id), "a response needs \"result\" or \"error\"")),
    };
    Ok(Message::Response(Response { id, outcome }))
}

/// A JSON object as its members' texts, in order: read without building a tree, written back
/// by copying each member's text (a call's params, a `_meta`).
pub(crate) struct RawMembers<'a>(pub Vec<(Cow<'a, str>, &'a RawValue)>);

impl<'de> Deserialize<'de> for RawMembers<'de> {
    fn deserialize<D: serde::Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        struct V;
        impl<'de> serde::de::Visitor<'de> for V {
            type Value = RawMembers<'de>;
            fn expecting(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
                f.write_str("a JSON object")
            }
            fn visit_map<A: serde::de::MapAccess<'de>>(self, mut map: A) -> Result<Self::Value, A::Error> {
                #[derive(Deserialize)]
                struct Key<'a>(#[serde(borrow)] Cow<'a, str>);
                let mut out = Vec::new();
                while let Some(Key(k)) = map.next_key::<Key>()? {
                    out.push((k, map.next_value()?));
                }
                Ok(RawMembers(out))
            }
        }
        d.deserialize_map(V)
    }
}

impl Serialize for RawMembers<'_> {
    fn serialize<S: serde::Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
        use serde::ser::SerializeMap;
        let mut m = s.serialize_map(Some(self.0.len()))?;
        for (k, v) in &self.0 {
            m.serialize_entry(k, v)?;
        }
        m.end()
    }
}

// ---- writers --------------------------------------------------------------------------------
//
// Hand-rolled instead of `serde_json::to_vec(&json!{..})` so that no intermediate `Value` tree is
// built on the hot path; `serde_json::to_writer` on a `Vec` cannot fail for `Value`/`str`.

/// Appends `v`'s JSON to `out` (the writers here and the request log's entries).
#[inline]
pub(crate) fn put<T: Serialize + ?Sized>(out: &mut Vec<u8>, v: &T) {
    // Serialising a Value or a str into a Vec<u8> cannot fail (no I/O, string keys only).
    let _ = serde_json::to_writer(&mut *out, v);
}

/// `{"jsonrpc":"2.0","id":ID,"result":RESULT}` (a [`Value`] or [`RawJson`]).
pub(crate) fn response_bytes<T: Serialize + ?Sized>(id: &Id, result: &T) -> Vec<u8> {
    write_response(Vec::with_capacity(64), id, result)
}

const RESPONSE_HEAD: &[u8] = b"{\"jsonrpc\":\"2.0\",\"id\":";
const RESULT_KEY: &[u8] = b",\"result\":";

fn write_response<T: Serialize + ?Sized>(mut out: Vec<u8>, id: &Id, result: &T) -> Vec<u8> {
    out.extend_from_slice(RESPONSE_HEAD);
    put(&mut out, id);
    out.extend_from_slice(RESULT_KEY);
    put(&mut out, result);
    out.push(b'}');
    out
}

/// `{"jsonrpc":"2.0","id":ID,"result":RESULT}` with `members` (object members' text) written
/// first into RESULT when it is an object without a `resultType` of its own
/// (an app of the stateless revision writes its own), without building the result anew.
pub(crate) fn response_bytes_with_members(id: &Id, result: &RawJson, members: &str) -> Vec<u8> {
    let text = result.get();
    let Some(rest) = text.strip_prefix('{').filter(|_| !text.contains("\"resultType\"")) else {
        return response_bytes(id, result);
    };
    let mut out = Vec::with_capacity(48 + text.len() + members.len());
    out.extend_from_slice(RESPONSE_HEAD);
    put(&mut out, id);
    out.extend_from_slice(RESULT_KEY);
    out.push(b'{');
    out.extend_from_slice(members.as_bytes());
    if !rest.trim_start().starts_with('}') {
        out.push(b',');
    }
    out.extend_from_slice(rest.as_bytes());
    out.push(b'}');
    out
}

/// The length of a value's JSON text, measured without writing it anywhere.
fn json_len<T: Serialize + ?Sized>(v: &T) -> usize {
    struct Count(usize);
    impl std::io::Write for Count {
        fn write(&mut self, buf: &[u8]) -> std::io::Result<usize> {
            self.0 += buf.len();
            Ok(buf.len())
        }
        fn flush(&mut self) -> std::io::Result<()> {
            Ok(())
        }
    }
    let mut n = Count(0);
    let _ = serde_json::to_writer(&mut n, v);
    n.0
}

/// `{"jsonrpc":"2.0","id":ID,"error":{"code":CODE,"message":MSG[,"data":DATA]}}`
pub(crate) fn error_bytes(id: &Id, code: i64, message: &str, data: Option<&Value>) -> Vec<u8> {
    let mut out = Vec::with_capacity(96 + message.len());
    out.extend_from_slice(b"{\"jsonrpc\":\"2.0\",\"id\":");
    put(&mut out, id);
    out.extend_from_slice(b",\"error\":{\"code\":");
    out.extend_from_slice(code.to_string().as_bytes());
    out.extend_from_slice(b",\"message\":");
    put(&mut out, message);
    if let Some(d) = data {
        out.extend_from_slice(b",\"data\":");
        put(&mut out, d);
    }
    out.extend_from_slice(b"}}");
    out
}

/// `{"jsonrpc":"2.0","id":ID,"method":METHOD[,"params":PARAMS]}`
pub(crate) fn request_bytes(id: &Id, method: &str, params: Option<&RawJson>) -> Vec<u8> {
    let mut out = Vec::with_capacity(64);
    out.extend_from_slice(b"{\"jsonrpc\":\"2.0\",\"id\":");
    put(&mut out, id);
    out.extend_from_slice(b",\"method\":");
    put(&mut out, method);
    if let Some(p) = params {
        out.extend_from_slice(b",\"params\":");
        put(&mut out, p);
    }
    out.push(b'}');
    out
}

/// `{"jsonrpc":"2.0","method":METHOD[,"params":PARAMS]}`
pub(crate) fn notification_bytes(method: &str, params: Option<&RawJson>) -> Vec<u8> {
    let mut out = Vec::with_capacity(64);
    out.extend_from_slice(b"{\"jsonrpc\":\"2.0\",\"method\":");
    put(&mut out, method);
    if let Some(p) = params {
        out.extend_from_slice(b",\"params\":");
        put(&mut out, p);
    }
    out.push(b'}');
    out
}

/// A JSON array of already-serialised messages (the answer to a batch).
pub fn batch_bytes<I: IntoIterator<Item = Vec<u8>>>(items: I) -> Vec<u8> {
    let mut out = Vec::with_capacity(128);
    out.push(b'[');
    for (i, item) in items.into_iter().enumerate() {
        if i > 0 {
            out.push(b',');
        }
        out.extend_from_slice(&item);
    }
    out.push(b']');
    out
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    fn single(s: &str) -> Message {
        match parse(s.as_bytes()).unwrap() {
            Incoming::Single(m) => m,
            other => panic!("expected single, got {other:?}"),
        }
    }

    #[test]
    fn request_with_string_and_number_ids_roundtrip() {
        for raw_id in ["\"abc\"", "7", "-3", "18446744073709551615", "1.5"] {
            let s = format!(r#"{{"jsonrpc":"2.0","id":{raw_id},"method":"tools/list"}}"#);
            let Message::Request(r) = single(&s) else { panic!() };
            assert_eq!(r.method, "tools/list");
            assert_eq!(r.params, None);
            let out = String::from_utf8(response_bytes(&r.id, &json!({}))).unwrap();
            assert_eq!(out, format!(r#"{{"jsonrpc":"2.0","id":{raw_id},"result":{{}}}}"#));
        }
    }

    #[test]
    fn ids_beyond_64_bits_or_with_an_exponent_keep_their_spelling() {
        for raw_id in [
            "12345678901234567890",
            "9007199254740993",
            "-9223372036854775808",
            "-9223372036854775809",
            "123456789012345678901234567890",
            "1e3",
            "1.0",
            "-0",
            "0.1E-7",
            r#""\u0041b""#,
        ] {
            let s = format!(r#"{{"jsonrpc":"2.0","id":{raw_id},"method":"tools/list"}}"#);
            let Message::Request(r) = single(&s) else { panic!("{s}") };
            assert_eq!(r.id.to_string(), raw_id);
            let out = String::from_utf8(response_bytes(&r.id, &json!({}))).unwrap();
            assert_eq!(out, format!(r#"{{"jsonrpc":"2.0","id":{raw_id},"result":{{}}}}"#));
            let out =
                String::from_utf8(Response::error(r.id.clone(), RpcErrorObject::parse_error()).to_bytes()).unwrap();
            assert!(out.starts_with(&format!(r#"{{"jsonrpc":"2.0","id":{raw_id},"error":"#)), "{out}");
            let relayed = Response::success(Id::from(1), json!({})).with_id(r.id.clone()).to_bytes();
            assert_eq!(relayed.len(), relayed.capacity(), "sized exactly for {raw_id}");
            assert!(String::from_utf8(relayed).unwrap().contains(&format!(r#""id":{raw_id},"#)));
        }
        // The gateway's own ids are plain integers again.
        let Message::Response(r) = single(r#"{"jsonrpc":"2.0","id":42,"result":{}}"#) else { panic!() };
        assert_eq!(r.id.as_u64(), Some(42));
        assert_eq!(r.id, Id::from(42));
        let Message::Response(r) = single(r#"{"jsonrpc":"2.0","id":4.2e1,"result":{}}"#) else { panic!() };
        assert_eq!(r.id.as_u64(), None, "not the gateway's id 42");
        assert_eq!(Id::from("Ab"), single_id(r#""\u0041b""#), "the same string, escaped");
        let Message::Request(r) = single("{ \"jsonrpc\":\"2.0\", \"id\" :\n 12 , \"method\":\"m\"}") else { panic!() };
        assert_eq!(r.id.as_u64(), Some(12), "spacing around the id is not part of it");
    }

    fn single_id(raw: &str) -> Id {
        let Message::Request(r) = single(&format!(r#"{{"jsonrpc":"2.0","id":{raw},"method":"m"}}"#)) else { panic!() };
        r.id
    }

    #[test]
    fn notification_and_params() {
        let m = single(r#"{"jsonrpc":"2.0","method":"notifications/initialized","params":{"a":1}}"#);
        assert_eq!(
            m,
            Message::Notification(Notification {
                method: "notifications/initialized".into(),
                params: Some(RawJson::from_value(&json!({"a":1})))
            })
        );
        let m = single(r#"{"jsonrpc":"2.0","method":"x","params":null}"#);
        assert_eq!(m, Message::Notification(Notification { method: "x".into(), params: None }));
    }

    #[test]
    fn params_are_kept_as_the_text_they_arrived_in() {
        let Message::Request(r) = single(
            r#"{"jsonrpc":"2\u002e0","id":1,"method":"t","params":{ "b" : [1.50, 123456789012345678901234567890] }}"#,
        ) else {
            panic!()
        };
        assert_eq!(r.params.as_ref().unwrap().get(), r#"{ "b" : [1.50, 123456789012345678901234567890] }"#);
        let out = String::from_utf8(request_bytes(&Id::from(9), "t", r.params.as_ref())).unwrap();
        assert_eq!(
            out,
            r#"{"jsonrpc":"2.0","id":9,"method":"t","params":{ "b" : [1.50, 123456789012345678901234567890] }}"#
        );
    }

    #[test]
    fn a_relayed_answer_is_written_into_a_buffer_of_its_exact_size() {
        for id in [Id::from(7), Id::from("a \"quoted\" id"), Id::NULL, Id::from(18446744073709551615u64)] {
            let Message::Response(r) = single(r#"{"jsonrpc":"2.0","id":1,"result":{ "content" : [] }}"#) else {
                panic!()
            };
            let b = r.with_id(id.clone()).to_bytes();
            assert_eq!(b.len(), b.capacity(), "{id}");
            let v: Value = serde_json::from_slice(&b).unwrap();
            assert_eq!(v, json!({ "jsonrpc": "2.0", "id": id.to_value(), "result": { "content": [] } }));
        }
    }

    #[test]
    fn null_id_request_is_a_request_not_a_notification() {
        let Message::Request(r) = single(r#"{"jsonrpc":"2.0","id":null,"method":"ping"}"#) else { panic!() };
        assert_eq!(r.id, Value::Null);
    }

    #[test]
    fn responses() {
        let m = single(r#"{"jsonrpc":"2.0","id":1,"result":null}"#);
        assert_eq!(m, Message::Response(Response::success(Id::from(1), Value::Null)));
        let m = single(r#"{"jsonrpc":"2.0","id":"a","error":{"code":-32601,"message":"nope","data":[1]}}"#);
        assert_eq!(
            m,
            Message::Response(Response::error(
                Id::from("a"),
                RpcErrorObject::new(-32601, "nope").with_data(json!([1]))
            ))
        );
    }

    #[test]
    fn a_result_is_relayed_as_the_text_it_arrived_in() {
        // Spacing, member order, `1.50` and an integer beyond 64 bits all survive: nothing is
        // rebuilt from a tree.
        let text =
            r#"{ "n": 1.50, "content": [ {"type":"text","text":"\u00e9"} ], "big": 123456789012345678901234567890 }"#;
        let Message::Response(r) = single(&format!(r#"{{"jsonrpc":"2.0","id":7,"result":{text}}}"#)) else { panic!() };
        let out = String::from_utf8(r.clone().with_id(Id::from("client-1")).to_bytes()).unwrap();
        assert_eq!(out, format!(r#"{{"jsonrpc":"2.0","id":"client-1","result":{text}}}"#));
        let Ok(result) = &r.outcome else { panic!() };
        assert_eq!(result.to_value()["content"][0]["text"], "é");
        // Equal as JSON values, whatever the text.
        assert_eq!(*result, RawJson::from_value(&result.to_value()));
        assert_ne!(*result, RawJson::from_value(&json!({})));
        // A batch element (parsed as a tree first) keeps its result too.
        let Incoming::Batch(items) = parse(br#"[{"jsonrpc":"2.0","id":1,"result":{"a":[1]}}]"#).unwrap() else {
            panic!()
        };
        let Ok(Message::Response(r)) = &items[0] else { panic!() };
        assert_eq!(r.outcome.as_ref().unwrap().get(), r#"{"a":[1]}"#);
    }

    #[test]
    fn a_deeply_nested_result_is_relayed_without_recursing() {
        let deep = format!("{}{}", "[".repeat(10_000), "]".repeat(10_000));
        let Message::Response(r) = single(&format!(r#"{{"jsonrpc":"2.0","id":1,"result":{deep}}}"#)) else { panic!() };
        let Ok(result) = &r.outcome else { panic!() };
        assert_eq!(result.get(), deep);
        assert_eq!(result.to_value(), Value::Null, "too deep for a tree: read as null, no crash");
    }

    #[test]
    fn parse_errors() {
        for bad in ["", "{", "{\"jsonrpc\":", "nul", "\u{0}", "{\"a\":1}}"] {
            let e = parse(bad.as_bytes()).unwrap_err();
            assert_eq!(e.code(), PARSE_ERROR, "{bad:?}");
            assert_eq!(
                e.to_response().to_bytes(),
                br#"{"jsonrpc":"2.0","id":null,"error":{"code":-32700,"message":"Parse error"}}"#
            );
        }
        assert_eq!(parse(&[0xff, 0xfe]).unwrap_err().code(), PARSE_ERROR);
        // Not UTF-8 inside a member: read as bytes, still a parse error, not a message.
        let inside = b"{\"jsonrpc\":\"2.0\",\"id\":1,\"method\":\"ping\xff\"}";
        assert_eq!(parse(inside).unwrap_err().code(), PARSE_ERROR);
    }

    #[test]
    fn invalid_requests() {
        let cases = [
            (r#"42"#, Value::Null),
            (r#""x""#, Value::Null),
            (r#"[]"#, Value::Null),
            (r#"{"id":1,"method":"a"}"#, json!(1)),
            (r#"{"jsonrpc":"1.0","id":1,"method":"a"}"#, json!(1)),
            (r#"{"jsonrpc":2.0,"id":"q","method":"a"}"#, json!("q")),
            (r#"{"jsonrpc":"2.0","id":{},"method":"a"}"#, Value::Null),
            (r#"{"jsonrpc":"2.0","id":true,"method":"a"}"#, Value::Null),
            (r#"{"jsonrpc":"2.0","id":1,"method":5}"#, json!(1)),
            (r#"{"jsonrpc":"2.0","id":1,"method":"a","params":"s"}"#, json!(1)),
            (r#"{"jsonrpc":"2.0","id":1,"method":"a","result":1}"#, json!(1)),
            (r#"{"jsonrpc":"2.0","id":1}"#, json!(1)),
            (r#"{"jsonrpc":"2.0","id":1,"result":1,"error":{"code":1,"message":"m"}}"#, json!(1)),
            (r#"{"jsonrpc":"2.0","id":1,"error":{"code":"x","message":"m"}}"#, json!(1)),
            (r#"{"jsonrpc":"2.0","result":1}"#, Value::Null),
            (r#"{"jsonrpc":"2.0"}"#, Value::Null),
        ];
        let deep_id = format!(r#"{{"jsonrpc":"2.0","id":{}{},"method":"a"}}"#, "[".repeat(200), "]".repeat(200));
        let cases: Vec<(&str, Value)> = cases.into_iter().chain([(deep_id.as_str(), Value::Null)]).collect();
        for (s, id) in cases {
            match parse(s.as_bytes()) {
                Err(ParseError::Invalid(inv)) => assert_eq!(inv.id, id, "{s}"),
                other => panic!("{s}: expected invalid, got {other:?}"),
            }
        }
        let e = parse(br#"{"id":1,"method":"a"}"#).unwrap_err();
        let v: Value = serde_json::from_slice(&e.to_response().to_bytes()).unwrap();
        assert_eq!(v["error"]["code"], INVALID_REQUEST);
        assert_eq!(v["id"], 1);
    }

    #[test]
    fn batches() {
        let Incoming::Batch(items) = parse(
            br#"[{"jsonrpc":"2.0","id":1,"method":"a"},1,{"jsonrpc":"2.0","method":"n"},{"id":"z","method":"b"}]"#,
        )
        .unwrap() else {
            panic!()
        };
        assert_eq!(items.len(), 4);
        assert!(matches!(items[0], Ok(Message::Request(_))));
        assert_eq!(items[1].as_ref().unwrap_err().id, Value::Null);
        assert!(matches!(items[2], Ok(Message::Notification(_))));
        assert_eq!(items[3].as_ref().unwrap_err().id, json!("z"));
        assert!(parse_message(br#"[{"jsonrpc":"2.0","method":"n"}]"#).is_err());
    }

    #[test]
    fn writers_produce_valid_json() {
        let b = error_bytes(&Id::from("id\"1"), -32602, "Unknown tool: \"x\"\n", Some(&json!({"k":1})));
        let v: Value = serde_json::from_slice(&b).unwrap();
        assert_eq!(
            v,
            json!({"jsonrpc":"2.0","id":"id\"1","error":{"code":-32602,"message":"Unknown tool: \"x\"\n","data":{"k":1}}})
        );
        let b = request_bytes(&Id::from(3), "tools/call", Some(&RawJson::from_value(&json!({"name":"t"}))));
        assert_eq!(parse_message(&b).unwrap().to_bytes(), b);
        let b = notification_bytes("notifications/initialized", None);
        assert_eq!(b, br#"{"jsonrpc":"2.0","method":"notifications/initialized"}"#);
        let m = parse_message(&b).unwrap();
        assert_eq!(serde_json::to_vec(&m).unwrap(), b);
        let batch = batch_bytes(vec![b"1".to_vec(), b"2".to_vec()]);
        assert_eq!(batch, b"[1,2]");
        let r = Response::error(Id::from(1), RpcErrorObject::unknown_tool("nope"));
        let v: Value = serde_json::from_slice(&r.to_bytes()).unwrap();
        assert_eq!(v["error"]["message"], "Unknown tool: nope");
        assert_eq!(v["error"]["code"], -32602);
    }

    #[test]
    fn deep_nesting_is_an_error_not_a_crash() {
        let deep = "[".repeat(100_000);
        assert!(parse(deep.as_bytes()).is_err());
    }
}
