//! A gateway's per-tool rules: CEL expressions over the call (the tool, its app and function,
//! its arguments), the caller (credential, key, service account, role, token claims, scopes) and
//! the client's address, each allowing or denying. First match wins; no match allows (within
//! `allowed_tools`, which the catalogue applied already). A rule set is compiled once, when the
//! gateway is saved (`compile` refuses an expression that does not parse, with its line and
//! column) and when an instance first meets the gateway's record (`McpRuntime::rules`); a call
//! evaluates only when its gateway has rules.

use crate::base::fast_map::FastMap;
use crate::data::model::{Gateway, OAuthGrant, Rule, RuleEffect, Timestamp};
use cel::objects::{Key, Map};
use cel::{Context, Program, Value};
use serde_json::value::RawValue;
use std::collections::HashMap;
use std::net::IpAddr;
use std::sync::Arc;
use toolgate_filters::{CredentialKind, Principal, Role, ScopeSet};

/// Most decisions a rule set remembers; past it the memo starts again empty.
const MEMO_MAX: usize = 4096;

/// Most rules on one gateway.
pub const MAX_RULES: usize = 64;
/// Longest rule name, in characters (letters, digits, `_ . -`).
pub const MAX_NAME_CHARS: usize = 64;
/// Longest `when` expression, in characters.
pub const MAX_WHEN_CHARS: usize = 2048;

/// Why a gateway's rules cannot be saved; `field` names the member at fault.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum RuleError {
    #[error("at most {MAX_RULES} rules")]
    TooMany,
    #[error("must be 1-{MAX_NAME_CHARS} characters of A-Z a-z 0-9 _ . -")]
    BadName { index: usize },
    #[error("rule `{name}`: another rule has this name")]
    Duplicate { index: usize, name: String },
    #[error("rule `{name}`: the expression is empty or longer than {MAX_WHEN_CHARS} characters")]
    Length { index: usize, name: String },
    #[error("rule `{name}` does not compile at line {line}, column {column}: {message}")]
    Syntax { index: usize, name: String, line: isize, column: isize, message: String },
}

impl RuleError {
    /// The request member the error is about (`rules[2].when`).
    pub fn field(&self) -> String {
        match self {
            RuleError::TooMany => "rules".into(),
            RuleError::BadName { index } | RuleError::Duplicate { index, .. } => format!("rules[{index}].name"),
            RuleError::Length { index, .. } | RuleError::Syntax { index, .. } => format!("rules[{index}].when"),
        }
    }
}

/// One compiled rule.
struct Compiled {
    name: Arc<str>,
    effect: RuleEffect,
    program: Program,
    /// The expression reads `args`: it cannot be decided for a list, only for a call.
    reads_args: bool,
}

/// A gateway's rules, compiled, with the root context of CEL's functions they run under (made
/// once: building it registers every standard function).
pub struct RuleSet {
    rules: Vec<Compiled>,
    root: Context<'static>,
    /// The gateway record's `updated_at` they were compiled from (a newer record recompiles).
    pub compiled_from: Timestamp,
    /// Some rule reads `args` (so a call's arguments are parsed).
    reads_args: bool,
    /// Some rule reads `caller.claims` or `caller.scopes` (so a token's claims are read).
    reads_claims: bool,
    /// Decisions already made, for rule sets that do not read `args` (see `decide_call`).
    memo: Memo,
}

/// What the rules decided for one caller and one tool, remembered: a rule that does not read the
/// call's arguments decides from the caller, its address and the tool alone, so the same caller
/// calling the same tool gets the same answer without running the interpreter again (whose
/// scope and variable maps cost about 5 us per call, the whole budget of the feature several
/// times over). The memo lives in the compiled set, so a changed rule starts a new one; a
/// caller whose role, scopes or address changed is another key. Keyed by a hash drawn from
/// the process's randomness, each entry keeps its full key and is compared field by field, so
/// a collision can only cost a miss, never borrow another caller's answer.
#[derive(Default)]
struct Memo {
    hasher: ahash::RandomState,
    entries: FastMap<u64, Vec<(MemoKey, Outcome)>>,
}

/// Everything a decision without `args` (and without a token's claims) depends on.
#[derive(PartialEq, Eq)]
struct MemoKey {
    credential: &'static str,
    service_account: String,
    key_id: String,
    user_id: String,
    org_id: String,
    role: Role,
    scopes: ScopeSet,
    ip: IpAddr,
    tool: String,
    app: String,
    function: String,
}

/// `None` allows; otherwise the deny rule's name and why it could not be evaluated, if so.
type Outcome = Option<(Arc<str>, Option<String>)>;

/// A `MemoKey` borrowed from the call, hashed and compared without copying anything.
#[derive(Hash)]
struct MemoProbe<'a> {
    credential: &'static str,
    service_account: &'a str,
    key_id: &'a str,
    user_id: &'a str,
    org_id: &'a str,
    role: Role,
    scopes: ScopeSet,
    ip: IpAddr,
    tool: &'a str,
    app: &'a str,
    function: &'a str,
}

impl<'a> MemoProbe<'a> {
    fn new(p: &'a Principal, ip: IpAddr, t: ToolFacts<'a>) -> MemoProbe<'a> {
        let service_account = match &p.credential {
            CredentialKind::ServiceAccount { account_id } => account_id.as_str(),
            _ => "",
        };
        MemoProbe {
            credential: p.credential.as_str(),
            service_account,
            key_id: &p.key_id,
            user_id: &p.user_id,
            org_id: &p.org_id,
            role: p.role,
            scopes: p.scopes,
            ip,
            tool: t.tool,
            app: t.app,
            function: t.function,
        }
    }

    fn is(&self, k: &MemoKey) -> bool {
        self.credential == k.credential
            && self.service_account == k.service_account
            && self.key_id == k.key_id
            && self.user_id == k.user_id
            && self.org_id == k.org_id
            && self.role == k.role
            && self.scopes == k.scopes
            && self.ip == k.ip
            && self.tool == k.tool
            && self.app == k.app
            && self.function == k.function
    }

    fn owned(&self) -> MemoKey {
        MemoKey {
            credential: self.credential,
            service_account: self.service_account.to_string(),
            key_id: self.key_id.to_string(),
            user_id: self.user_id.to_string(),
            org_id: self.org_id.to_string(),
            role: self.role,
            scopes: self.scopes,
            ip: self.ip,
            tool: self.tool.to_string(),
            app: self.app.to_string(),
            function: self.function.to_string(),
        }
    }
}

impl Memo {
    fn get(&self, hash: u64, probe: &MemoProbe<'_>) -> Option<Outcome> {
        let bucket = self.entries.get(&hash)?;
        bucket.iter().find(|(k, _)| probe.is(k)).map(|(_, o)| o.clone())
    }

    fn put(&self, hash: u64, probe: &MemoProbe<'_>, outcome: Outcome) {
        if self.entries.len() >= MEMO_MAX {
            self.entries.clear();
        }
        let mut bucket = self.entries.entry(hash).or_default();
        if !bucket.iter().any(|(k, _)| probe.is(k)) {
            bucket.push((probe.owned(), outcome));
        }
    }

    fn len(&self) -> usize {
        self.entries.iter().map(|b| b.len()).sum()
    }
}

/// Checks and compiles `rules`: names unique and well formed, expressions within bounds and
/// parsing. The first fault is the error.
pub fn compile(rules: &[Rule], compiled_from: Timestamp) -> Result<RuleSet, RuleError> {
    if rules.len() > MAX_RULES {
        return Err(RuleError::TooMany);
    }
    let mut compiled: Vec<Compiled> = Vec::with_capacity(rules.len());
    for (index, r) in rules.iter().enumerate() {
        let name_ok = |c: char| c.is_ascii_alphanumeric() || "_.-".contains(c);
        if r.name.is_empty() || r.name.chars().count() > MAX_NAME_CHARS || !r.name.chars().all(name_ok) {
            return Err(RuleError::BadName { index });
        }
        if compiled.iter().any(|c| *c.name == *r.name) {
            return Err(RuleError::Duplicate { index, name: r.name.clone() });
        }
        let len = r.when.chars().count();
        if r.when.trim().is_empty() || len > MAX_WHEN_CHARS {
            return Err(RuleError::Length { index, name: r.name.clone() });
        }
        let program = Program::compile(&r.when).map_err(|e| {
            let first = e.errors.first();
            let (line, column) = first.map_or((1, 1), |p| p.pos);
            let message = first.map_or_else(|| e.to_string(), |p| p.msg.clone());
            RuleError::Syntax { index, name: r.name.clone(), line: line.max(1), column: column.max(1), message }
        })?;
        let reads_args = program.references().has_variable("args");
        compiled.push(Compiled { name: Arc::from(r.name.as_str()), effect: r.effect, program, reads_args });
    }
    Ok(RuleSet {
        reads_args: compiled.iter().any(|c| c.reads_args),
        reads_claims: rules.iter().any(|r| r.when.contains("claims") || r.when.contains("scopes")),
        rules: compiled,
        root: Context::default(),
        compiled_from,
        memo: Memo::default(),
    })
}

/// The rules of a stored record that does not compile (written around the API's check): every
/// call is denied, by a rule named `invalid-rules`, rather than let through unchecked.
pub fn deny_all(compiled_from: Timestamp) -> RuleSet {
    let program = Program::compile("true").expect("`true` compiles");
    let rule = Compiled { name: Arc::from("invalid-rules"), effect: RuleEffect::Deny, program, reads_args: false };
    RuleSet {
        rules: vec![rule],
        root: Context::default(),
        compiled_from,
        reads_args: false,
        reads_claims: false,
        memo: Memo::default(),
    }
}

/// A call refused by a rule: the typed value the answer, the metrics, the logs (and an audit
/// trail) are made from.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Denied {
    /// The rule's name.
    pub rule: Arc<str>,
    /// The tool as the gateway exposes it.
    pub tool: String,
    /// The caller's key id (or token subject), as in the access line.
    pub key_id: String,
    /// Why the rule could not be evaluated, when that is what denied the call (a missing key,
    /// a value of the wrong type, a result that is not a boolean).
    pub failed: Option<String>,
}

impl Denied {
    /// The message of the JSON-RPC error.
    pub fn message(&self) -> String {
        match &self.failed {
            None => format!("Tool call denied by rule `{}`", self.rule),
            Some(why) => format!("Tool call denied by rule `{}`: it could not be evaluated ({why})", self.rule),
        }
    }
}

/// The tool a call or a list entry names.
#[derive(Clone, Copy)]
pub struct ToolFacts<'a> {
    /// As the gateway exposes it (`crm__get_ticket`).
    pub tool: &'a str,
    pub app: &'a str,
    /// The app's own name for it (`get_ticket`).
    pub function: &'a str,
}

/// The caller's variables (`caller`, `client`), made once per request.
pub struct Subject {
    caller: Value,
    client: Value,
    key_id: String,
}

/// What a rule came to for one tool.
enum Verdict {
    Allow,
    Deny(Arc<str>, Option<String>),
    /// A rule that reads `args` came first (a list cannot decide it).
    Undecided,
}

impl RuleSet {
    /// Whether a token's claims are needed (some rule reads `caller.claims` or `caller.scopes`).
    pub fn reads_claims(&self) -> bool {
        self.reads_claims
    }

    /// Whether a call's arguments are needed.
    pub fn reads_args(&self) -> bool {
        self.reads_args
    }

    /// Decides a call: `Err` names the first matching deny rule (or a rule that failed).
    /// `args` is the call's `arguments` as sent, read only when a rule reads them.
    pub fn decide(&self, who: &Subject, t: ToolFacts<'_>, args: Option<&RawValue>) -> Result<(), Denied> {
        let args = if self.reads_args { json_text_value(args) } else { Value::Null };
        match self.walk(who, t, Some(args)) {
            Verdict::Allow | Verdict::Undecided => Ok(()),
            Verdict::Deny(rule, failed) => {
                Err(Denied { rule, tool: t.tool.to_string(), key_id: who.key_id.clone(), failed })
            }
        }
    }

    /// Decides a call by `p` from `ip`, as `decide`, remembering the answer when it cannot
    /// depend on the call itself: no rule reads `args`, and no rule reads a token's claims or
    /// the caller holds none (a key). `subject` makes the caller's variables, only on a miss.
    pub fn decide_call(
        &self,
        p: &Principal,
        ip: IpAddr,
        t: ToolFacts<'_>,
        args: Option<&RawValue>,
        subject: impl FnOnce() -> Subject,
    ) -> Result<(), Denied> {
        let claimless = matches!(
            p.credential,
            CredentialKind::ApiKey | CredentialKind::GatewayKey { .. } | CredentialKind::ServiceAccount { .. }
        );
        if self.reads_args || (self.reads_claims && !claimless) {
            return self.decide(&subject(), t, args);
        }
        let probe = MemoProbe::new(p, ip, t);
        let hash = self.memo.hasher.hash_one(&probe);
        let outcome = match self.memo.get(hash, &probe) {
            Some(known) => known,
            None => {
                let outcome = match self.walk(&subject(), t, Some(Value::Null)) {
                    Verdict::Allow | Verdict::Undecided => None,
                    Verdict::Deny(rule, failed) => Some((rule, failed)),
                };
                self.memo.put(hash, &probe, outcome.clone());
                outcome
            }
        };
        match outcome {
            None => Ok(()),
            Some((rule, failed)) => Err(Denied { rule, tool: t.tool.to_string(), key_id: p.key_id.clone(), failed }),
        }
    }

    /// How many decisions are remembered (for tests).
    pub fn remembered(&self) -> usize {
        self.memo.len()
    }

    /// Whether a list shows the tool to this caller: hidden when the first rule that matches
    /// without the arguments is a deny, before any rule that reads `args`.
    pub fn listed(&self, who: &Subject, t: ToolFacts<'_>) -> bool {
        !matches!(self.walk(who, t, None), Verdict::Deny(..))
    }

    fn walk(&self, who: &Subject, t: ToolFacts<'_>, args: Option<Value>) -> Verdict {
        let mut ctx = self.root.new_inner_scope();
        ctx.add_variable_from_value("tool", t.tool);
        ctx.add_variable_from_value("app", t.app);
        ctx.add_variable_from_value("function", t.function);
        ctx.add_variable_from_value("caller", who.caller.clone());
        ctx.add_variable_from_value("client", who.client.clone());
        let listing = args.is_none();
        if let Some(args) = args {
            ctx.add_variable_from_value("args", args);
        }
        for r in &self.rules {
            if listing && r.reads_args {
                return Verdict::Undecided;
            }
            let failed = match r.program.execute(&ctx) {
                Ok(Value::Bool(false)) => continue,
                Ok(Value::Bool(true)) => None,
                Ok(other) => Some(format!("gives {:?}, not a boolean", other.type_of())),
                Err(e) => Some(e.to_string()),
            };
            return match (r.effect, failed) {
                (RuleEffect::Allow, None) => Verdict::Allow,
                (_, failed) => Verdict::Deny(r.name.clone(), failed),
            };
        }
        Verdict::Allow
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

impl Subject {
    /// The caller of this request. `claims` is read only when `set` reads them.
    pub fn new(set: &RuleSet, p: &Principal, client_ip: IpAddr, claims: Claims<'_>) -> Subject {
        let claims = if set.reads_claims { claims_value(claims) } else { None };
        let scopes: Vec<Value> = match claims.as_ref().and_then(|c| c.get("scope").and_then(|s| s.as_str())) {
            Some(scope) => scope.split(' ').filter(|s| !s.is_empty()).map(Value::from).collect(),
            None => p.scopes.names().into_iter().map(Value::from).collect(),
        };
        let service_account = match &p.credential {
            CredentialKind::ServiceAccount { account_id } => Value::from(account_id.as_str()),
            _ => Value::Null,
        };
        let claims = claims.map_or_else(|| Value::Map(Map { map: Arc::new(HashMap::new()) }), |c| json_value(&c));
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
        Subject { caller: Value::from(caller), client: Value::from(client), key_id: p.key_id.clone() }
    }
}

/// A token's claims as JSON; `None` for a credential without any.
fn claims_value(claims: Claims<'_>) -> Option<serde_json::Value> {
    use base64::Engine;
    match claims {
        Claims::None => None,
        Claims::Jwt(token) => {
            let payload = token.split('.').nth(1)?;
            let bytes = base64::engine::general_purpose::URL_SAFE_NO_PAD.decode(payload).ok()?;
            serde_json::from_slice::<serde_json::Value>(&bytes).ok().filter(serde_json::Value::is_object)
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
            Some(c)
        }
    }
}

/// The call's arguments (JSON text) as a CEL value: absent or unreadable is an empty map.
fn json_text_value(args: Option<&RawValue>) -> Value {
    match args.and_then(|a| serde_json::from_str::<serde_json::Value>(a.get()).ok()) {
        Some(v) => json_value(&v),
        None => Value::Map(Map { map: Arc::new(HashMap::new()) }),
    }
}

/// JSON as CEL: integers that fit `i64` are `int` (as CEL literals are), larger ones `uint`,
/// the rest `double`.
pub fn json_value(v: &serde_json::Value) -> Value {
    match v {
        serde_json::Value::Null => Value::Null,
        serde_json::Value::Bool(b) => Value::Bool(*b),
        serde_json::Value::Number(n) => match (n.as_i64(), n.as_u64()) {
            (Some(i), _) => Value::Int(i),
            (None, Some(u)) => Value::UInt(u),
            _ => Value::Float(n.as_f64().unwrap_or(f64::NAN)),
        },
        serde_json::Value::String(s) => Value::from(s.as_str()),
        serde_json::Value::Array(a) => Value::List(Arc::new(a.iter().map(json_value).collect())),
        serde_json::Value::Object(o) => {
            let map: HashMap<Key, Value> = o.iter().map(|(k, v)| (Key::from(k.as_str()), json_value(v))).collect();
            Value::Map(Map { map: Arc::new(map) })
        }
    }
}

/// Whether the gateway's compiled rules are those of this record.
pub fn current(set: &RuleSet, gw: &Gateway) -> bool {
    set.compiled_from == gw.updated_at
}

#[cfg(test)]
mod tests {
    use super::*;
    use toolgate_filters::{Role, ScopeSet};

    fn rule(name: &str, effect: RuleEffect, when: &str) -> Rule {
        Rule { name: name.into(), effect, when: when.into() }
    }

    fn set(rules: &[Rule]) -> RuleSet {
        compile(rules, chrono::Utc::now()).unwrap()
    }

    fn principal(role: Role, credential: CredentialKind) -> Principal {
        Principal {
            key_id: "key_1".into(),
            user_id: "usr_1".into(),
            org_id: "org_1".into(),
            role,
            credential,
            scopes: ScopeSet::parse(["gateways:read"]).unwrap(),
            tier: "free".into(),
            rate_limit_multiplier: 1.0,
            bypass_ip_whitelist: false,
            expires_at: None,
        }
    }

    fn who(s: &RuleSet, role: Role) -> Subject {
        Subject::new(s, &principal(role, CredentialKind::ApiKey), "10.0.0.7".parse().unwrap(), Claims::None)
    }

    const GET: ToolFacts<'static> = ToolFacts { tool: "crm__get_ticket", app: "crm", function: "get_ticket" };
    const DELETE: ToolFacts<'static> = ToolFacts { tool: "crm__delete_ticket", app: "crm", function: "delete_ticket" };

    #[test]
    fn a_rule_that_does_not_compile_is_refused_with_its_line_and_column() {
        let e = compile(
            &[rule("ok", RuleEffect::Allow, "true"), rule("bad", RuleEffect::Deny, "tool ==\n  && true")],
            chrono::Utc::now(),
        )
        .err()
        .unwrap();
        match &e {
            RuleError::Syntax { index, name, line, column, .. } => {
                assert_eq!((*index, name.as_str(), *line), (1, "bad", 2), "{e}");
                assert!(*column >= 1, "{e}");
            }
            other => panic!("{other:?}"),
        }
        assert_eq!(e.field(), "rules[1].when");
        assert!(e.to_string().starts_with("rule `bad` does not compile at line 2, column"), "{e}");
        let e = compile(&[rule("x", RuleEffect::Deny, "tool.startsWith(")], chrono::Utc::now()).err().unwrap();
        assert!(matches!(e, RuleError::Syntax { line: 1, .. }), "{e:?}");
    }

    #[test]
    fn names_are_unique_and_bounded() {
        let now = chrono::Utc::now();
        let dup = [rule("a", RuleEffect::Deny, "true"), rule("a", RuleEffect::Allow, "true")];
        assert_eq!(compile(&dup, now).err().unwrap().field(), "rules[1].name");
        assert!(matches!(compile(&[rule("a b", RuleEffect::Deny, "true")], now), Err(RuleError::BadName { index: 0 })));
        assert!(matches!(compile(&[rule("a", RuleEffect::Deny, " ")], now), Err(RuleError::Length { .. })));
        let long = "true && ".repeat(300) + "true";
        assert!(matches!(compile(&[rule("a", RuleEffect::Deny, &long)], now), Err(RuleError::Length { .. })));
        let many: Vec<Rule> = (0..=MAX_RULES).map(|i| rule(&format!("r{i}"), RuleEffect::Deny, "true")).collect();
        assert_eq!(compile(&many, now).err(), Some(RuleError::TooMany));
    }

    #[test]
    fn the_first_matching_rule_decides_and_no_match_allows() {
        let s = set(&[
            rule("support-reads", RuleEffect::Allow, r#"caller.role == "developer" && tool.startsWith("crm__get")"#),
            rule("no-deletes", RuleEffect::Deny, r#"function.startsWith("delete")"#),
            rule("developers-only", RuleEffect::Deny, r#"caller.role != "developer""#),
        ]);
        let dev = who(&s, Role::Developer);
        assert_eq!(s.decide(&dev, GET, None), Ok(()));
        let denied = s.decide(&dev, DELETE, None).unwrap_err();
        assert_eq!(
            (&*denied.rule, denied.tool.as_str(), denied.key_id.as_str()),
            ("no-deletes", "crm__delete_ticket", "key_1")
        );
        assert_eq!(denied.message(), "Tool call denied by rule `no-deletes`");
        let viewer = who(&s, Role::Viewer);
        assert_eq!(&*s.decide(&viewer, GET, None).unwrap_err().rule, "developers-only");
        let other = ToolFacts { tool: "time__now", app: "time", function: "now" };
        assert_eq!(s.decide(&dev, other, None), Ok(()), "no rule matches: allowed");
    }

    #[test]
    fn arguments_and_the_caller_are_variables() {
        let s = set(&[
            rule("acme-only", RuleEffect::Deny, r#"!args.repo.startsWith("acme/") || args.count > 5"#),
            rule("from-office", RuleEffect::Deny, r#"client.ip != "10.0.0.7" || caller.key_id != "key_1""#),
        ]);
        let dev = who(&s, Role::Developer);
        let args = |t: &str| serde_json::value::RawValue::from_string(t.to_string()).unwrap();
        assert_eq!(s.decide(&dev, GET, Some(&args(r#"{"repo":"acme/api","count":2}"#))), Ok(()));
        assert_eq!(
            &*s.decide(&dev, GET, Some(&args(r#"{"repo":"evil/api","count":2}"#))).unwrap_err().rule,
            "acme-only"
        );
        assert_eq!(
            &*s.decide(&dev, GET, Some(&args(r#"{"repo":"acme/api","count":9}"#))).unwrap_err().rule,
            "acme-only"
        );
        // No `repo`: the rule cannot be evaluated, which denies (fail closed).
        let d = s.decide(&dev, GET, Some(&args("{}"))).unwrap_err();
        assert!(d.failed.is_some() && d.message().contains("could not be evaluated"), "{d:?}");
        // A list cannot decide a rule that reads `args`: the tool is listed.
        assert!(s.listed(&dev, GET));
    }

    #[test]
    fn claims_are_read_from_a_jwt_or_a_grant_and_empty_for_a_key() {
        use base64::Engine;
        let s =
            set(&[rule("team", RuleEffect::Deny, r#"caller.claims.team != "support" || !("mcp" in caller.scopes)"#)]);
        let b64 = |v: serde_json::Value| base64::engine::general_purpose::URL_SAFE_NO_PAD.encode(v.to_string());
        let jwt = format!(
            "{}.{}.sig",
            b64(serde_json::json!({"alg": "RS256"})),
            b64(serde_json::json!({"team": "support", "scope": "mcp read"}))
        );
        let token = principal(Role::Viewer, CredentialKind::GatewayToken { gateway_id: "gw_1".into() });
        let ip: IpAddr = "::1".parse().unwrap();
        assert_eq!(s.decide(&Subject::new(&s, &token, ip, Claims::Jwt(&jwt)), GET, None), Ok(()));
        let other =
            format!("{}.{}.sig", b64(serde_json::json!({})), b64(serde_json::json!({"team": "sales", "scope": "mcp"})));
        assert!(s.decide(&Subject::new(&s, &token, ip, Claims::Jwt(&other)), GET, None).is_err());
        // A key has no claims: `caller.claims` is an empty map, so `.team` fails and denies.
        let key = Subject::new(&s, &principal(Role::Admin, CredentialKind::ApiKey), ip, Claims::None);
        assert!(s.decide(&key, GET, None).unwrap_err().failed.is_some());
        let guarded =
            set(&[rule("g", RuleEffect::Deny, r#"has(caller.claims.team) && caller.claims.team == "sales""#)]);
        let key = Subject::new(&guarded, &principal(Role::Admin, CredentialKind::ApiKey), ip, Claims::None);
        assert_eq!(guarded.decide(&key, GET, None), Ok(()));
        let grant = OAuthGrant {
            id: "grt_1".into(),
            org_id: "org_1".into(),
            user_id: "usr_1".into(),
            client_id: "tgc_1".into(),
            scopes: vec!["mcp".into()],
            created_at: chrono::Utc::now(),
            access_hash: String::new(),
            access_expires_ms: 0,
            refresh_hash: String::new(),
            refresh_expires_ms: 0,
            used_refresh: Vec::new(),
            resource: Some("https://tg.example/gateway/gw_1/mcp".into()),
        };
        let by_client = set(&[rule(
            "client",
            RuleEffect::Deny,
            r#"caller.claims.client_id != "tgc_1" || !("mcp" in caller.scopes)"#,
        )]);
        let who = Subject::new(&by_client, &token, ip, Claims::Grant { grant: &grant, issuer: "https://tg.example" });
        assert_eq!(by_client.decide(&who, GET, None), Ok(()));
    }

    /// Expressions at the length bound, deeply nested or long chains, are refused or run without
    /// exhausting the stack (a request thread's 2 MiB, as this test's).
    #[test]
    fn the_deepest_and_longest_expressions_stay_within_the_stack() {
        let now = chrono::Utc::now();
        let nested = format!("{}true{}", "(".repeat(1000), ")".repeat(1000));
        assert!(matches!(compile(&[rule("n", RuleEffect::Deny, &nested)], now), Err(RuleError::Syntax { .. })));
        let negations = format!("{}true", "!".repeat(2000));
        let _ = compile(&[rule("n", RuleEffect::Deny, &negations)], now);
        let sum = format!("{}1 > 0", "1 + ".repeat(500));
        let members = format!("{}size(tool) > 0", "tool.size() > 0 && ".repeat(100));
        for when in [sum, members] {
            if let Ok(s) = compile(&[rule("long", RuleEffect::Deny, &when)], now) {
                let _ = s.decide(&who(&s, Role::Admin), GET, None);
            }
        }
    }

    #[test]
    fn a_list_hides_what_the_first_rule_without_args_denies() {
        let s = set(&[
            rule("no-deletes", RuleEffect::Deny, r#"function.startsWith("delete")"#),
            rule("acme", RuleEffect::Deny, r#"!args.repo.startsWith("acme/")"#),
            rule("never", RuleEffect::Deny, "true"),
        ]);
        let dev = who(&s, Role::Developer);
        assert!(!s.listed(&dev, DELETE));
        assert!(s.listed(&dev, GET), "an args rule comes before `never`: undecided, listed");
        assert!(s.reads_args() && !s.reads_claims());
    }

    #[test]
    fn a_call_decision_is_remembered_per_caller_address_and_tool() {
        let s = set(&[rule("developers-only", RuleEffect::Deny, r#"caller.role != "developer""#)]);
        let ip: IpAddr = "10.0.0.7".parse().unwrap();
        let dev = principal(Role::Developer, CredentialKind::ApiKey);
        let made = std::cell::Cell::new(0);
        let call = |p: &Principal, ip: IpAddr, t: ToolFacts<'_>| {
            s.decide_call(p, ip, t, None, || {
                made.set(made.get() + 1);
                Subject::new(&s, p, ip, Claims::None)
            })
        };
        assert_eq!(call(&dev, ip, GET), Ok(()));
        assert_eq!(call(&dev, ip, GET), Ok(()));
        assert_eq!((made.get(), s.remembered()), (1, 1), "the second call is answered from the memo");
        // Another tool, address or role is another decision, made afresh.
        assert_eq!(call(&dev, ip, DELETE), Ok(()));
        assert_eq!(call(&dev, "10.0.0.8".parse().unwrap(), GET), Ok(()));
        let viewer = principal(Role::Viewer, CredentialKind::ApiKey);
        let denied = call(&viewer, ip, GET).unwrap_err();
        assert_eq!(
            (&*denied.rule, denied.key_id.as_str(), denied.tool.as_str()),
            ("developers-only", "key_1", GET.tool)
        );
        assert_eq!(call(&viewer, ip, GET).unwrap_err(), denied, "a remembered denial is the same denial");
        assert_eq!((made.get(), s.remembered()), (4, 4));
    }

    #[test]
    fn a_decision_that_reads_the_call_or_a_token_is_never_remembered() {
        let ip: IpAddr = "10.0.0.7".parse().unwrap();
        let dev = principal(Role::Developer, CredentialKind::ApiKey);
        let by_args = set(&[rule("acme", RuleEffect::Deny, r#"!args.repo.startsWith("acme/")"#)]);
        for (repo, allowed) in [("acme/api", true), ("evil/api", false), ("acme/web", true)] {
            let a = RawValue::from_string(format!(r#"{{"repo":"{repo}"}}"#)).unwrap();
            let got = by_args.decide_call(&dev, ip, GET, Some(&a), || Subject::new(&by_args, &dev, ip, Claims::None));
            assert_eq!(got.is_ok(), allowed, "{repo}");
        }
        assert_eq!(by_args.remembered(), 0);
        let by_claims = set(&[rule("tenant", RuleEffect::Deny, r#"caller.claims.tenant != "acme""#)]);
        let token = principal(Role::Developer, CredentialKind::Jwt { jti: None });
        for (tenant, allowed) in [("acme", true), ("evil", false)] {
            use base64::Engine;
            let b64 = base64::engine::general_purpose::URL_SAFE_NO_PAD;
            let jwt = format!("h.{}.s", b64.encode(format!(r#"{{"tenant":"{tenant}"}}"#)));
            let got = by_claims
                .decide_call(&token, ip, GET, None, || Subject::new(&by_claims, &token, ip, Claims::Jwt(&jwt)));
            assert_eq!(got.is_ok(), allowed, "{tenant}");
        }
        assert_eq!(by_claims.remembered(), 0, "a token's claims are not part of the memo's key");
        // A key holds no claims: its decision is remembered even under a claims rule.
        assert!(by_claims
            .decide_call(&dev, ip, GET, None, || Subject::new(&by_claims, &dev, ip, Claims::None))
            .is_err());
        assert_eq!(by_claims.remembered(), 1);
    }
}
