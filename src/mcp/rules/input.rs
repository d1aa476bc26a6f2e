//! What the rules read, made CEL values: the caller's variables (`caller`, `client`), made once
//! per request, and the call's arguments; each with its size, which a rule whose cost depends
//! on it checks against `mcp.rules` before it runs (`RuleSet::walk`).

use super::RuleSet;
use crate::config::RulesConfig;
use crate::data::model::OAuthGrant;
use cel::objects::{Key, Map};
use cel::Value;
use serde_json::value::RawValue;
use std::collections::HashMap;
use std::net::IpAddr;
use std::sync::Arc;
use toolgate_filters::{CredentialKind, Principal};

/// How large a value read from the call is: its longest list or map, and its text in bytes.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub(super) struct Size {
    pub items: usize,
    pub bytes: usize,
}

impl Size {
    /// Why `what` is beyond the sizes the rules were bounded for, if it is.
    pub(super) fn beyond(self, limits: &RulesConfig, what: &str) -> Option<String> {
        if self.items > limits.max_input_items {
            return Some(format!(
                "{what} hold a list or map of {} entries; the rules are bounded for {} (mcp.rules.max_input_items)",
                self.items, limits.max_input_items
            ));
        }
        if self.bytes > limits.max_input_bytes {
            return Some(format!(
                "{what} are {} bytes; the rules are bounded for {} (mcp.rules.max_input_bytes)",
                self.bytes, limits.max_input_bytes
            ));
        }
        None
    }
}

/// The call's arguments as the rules read them.
pub(super) struct Args {
    pub(super) value: Value,
    pub(super) size: Size,
}

impl Args {
    /// For a rule set that does not read them.
    pub(super) fn unread() -> Args {
        Args { value: Value::Null, size: Size::default() }
    }
}

/// The call's `arguments` (JSON text) as a CEL value: absent is an empty map. Text that is not
/// JSON the rules can read (a lone surrogate `"\ud800"`, which the app's parser may well take)
/// is an error, never an empty map: a rule on `args.repo` must see what the app runs.
pub(super) fn read_args(args: Option<&RawValue>) -> Result<Args, String> {
    let Some(text) = args else {
        return Ok(Args { value: Value::Map(Map { map: Arc::new(HashMap::new()) }), size: Size::default() });
    };
    let json: serde_json::Value = serde_json::from_str(text.get()).map_err(|e| e.to_string())?;
    let mut size = Size { items: 0, bytes: text.get().len() };
    let value = json_value(&json, &mut size.items);
    Ok(Args { value, size })
}

/// JSON as CEL: integers that fit `i64` are `int` (as CEL literals are), larger ones `uint`,
/// the rest `double`. `items` is raised to the longest list or map met.
pub(super) fn json_value(v: &serde_json::Value, items: &mut usize) -> Value {
    match v {
        serde_json::Value::Null => Value::Null,
        serde_json::Value::Bool(b) => Value::Bool(*b),
        serde_json::Value::Number(n) => match (n.as_i64(), n.as_u64()) {
            (Some(i), _) => Value::Int(i),
            (None, Some(u)) => Value::UInt(u),
            _ => Value::Float(n.as_f64().unwrap_or(f64::NAN)),
        },
        serde_json::Value::String(s) => Value::from(s.as_str()),
        serde_json::Value::Array(a) => {
            *items = (*items).max(a.len());
            Value::List(Arc::new(a.iter().map(|x| json_value(x, items)).collect()))
        }
        serde_json::Value::Object(o) => {
            *items = (*items).max(o.len());
            let map: HashMap<Key, Value> =
                o.iter().map(|(k, v)| (Key::from(k.as_str()), json_value(v, items))).collect();
            Value::Map(Map { map: Arc::new(map) })
        }
    }
}

/// Where a token's claims come from, when some rule reads them.
pub enum Claims<'a> {
    /// The caller's credential has none (an API key).
    None,
    /// A JWT, verified by the credential filter for this very request: its payload is read.
    Jwt(&'a str),
    /// An access token of toolgate's authorization server: its grant says what the token says.
    Grant { grant: &'a OAuthGrant, issuer: &'a str },
}

/// The caller's variables (`caller`, `client`), made once per request.
pub struct Subject {
    pub(super) caller: Value,
    pub(super) client: Value,
    pub(super) key_id: String,
    /// The largest of what `caller` holds (its token's claims, its scopes, its strings).
    pub(super) size: Size,
}

impl Subject {
    /// The caller of this request. `claims` is read only when `set` reads them.
    pub fn new(set: &RuleSet, p: &Principal, client_ip: IpAddr, claims: Claims<'_>) -> Subject {
        let (claims, claims_bytes) = if set.reads_claims { claims_value(claims) } else { (None, 0) };
        let scopes: Vec<Value> = match claims.as_ref().and_then(|c| c.get("scope").and_then(|s| s.as_str())) {
            Some(scope) => scope.split(' ').filter(|s| !s.is_empty()).map(Value::from).collect(),
            None => p.scopes.names().into_iter().map(Value::from).collect(),
        };
        let service_account = match &p.credential {
            CredentialKind::ServiceAccount { account_id } => Value::from(account_id.as_str()),
            _ => Value::Null,
        };
        // What the caller brings: its token's claims and its scopes (the map `caller` itself
        // has its eight members, which `mcp.rules.max_input_items` is never below).
        let strings = [p.key_id.len(), p.user_id.len(), p.org_id.len()].into_iter().max().unwrap_or(0);
        let mut size = Size { items: scopes.len(), bytes: claims_bytes.max(strings) };
        let claims = match claims {
            Some(c) => json_value(&c, &mut size.items),
            None => Value::Map(Map { map: Arc::new(HashMap::new()) }),
        };
        let caller: HashMap<Key, Value> = HashMap::from([
            (Key::from("kind"), Value::from(p.credential.as_str())),
            (Key::from("key_id"), Value::from(p.key_id.as_str())),
            (Key::from("user_id"), Value::from(p.user_id.as_str())),
            (Key::from("org_id"), Value::from(p.org_id.as_str())),
            (Key::from("service_account"), service_account),
            (Key::from("role"), Value::from(p.role.as_str())),
            (Key::from("scopes"), Value::List(Arc::new(scopes))),
            (Key::from("claims"), claims),
        ]);
        let client = HashMap::from([(Key::from("ip"), Value::from(client_ip.to_string()))]);
        Subject { caller: Value::from(caller), client: Value::from(client), key_id: p.key_id.clone(), size }
    }
}

/// A token's claims as JSON, and the bytes of their text; `None` for a credential without any.
fn claims_value(claims: Claims<'_>) -> (Option<serde_json::Value>, usize) {
    use base64::Engine;
    match claims {
        Claims::None => (None, 0),
        Claims::Jwt(token) => {
            let decoded = token.split('.').nth(1).and_then(|payload| {
                let bytes = base64::engine::general_purpose::URL_SAFE_NO_PAD.decode(payload).ok()?;
                let json =
                    serde_json::from_slice::<serde_json::Value>(&bytes).ok().filter(serde_json::Value::is_object)?;
                Some((json, bytes.len()))
            });
            decoded.map_or((None, 0), |(json, len)| (Some(json), len))
        }
        Claims::Grant { grant, issuer } => {
            let mut c = serde_json::json!({
                "iss": issuer,
                "sub": grant.user_id,
                "client_id": grant.client_id,
                "scope": grant.scopes.join(" "),
                "exp": grant.access_expires_ms / 1000,
            });
            if let Some(aud) = &grant.resource {
                c["aud"] = serde_json::Value::String(aud.clone());
            }
            let len = c.to_string().len();
            (Some(c), len)
        }
    }
}
