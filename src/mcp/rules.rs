//! A gateway's per-tool rules: CEL expressions over the call (the tool, its app and function,
//! its arguments), the caller (credential, key, service account, role, token claims, scopes) and
//! the client's address, each allowing or denying. First match wins; no match allows (within
//! `allowed_tools`, which the catalogue applied already). A rule set is compiled once, when the
//! gateway is saved (`compile` refuses an expression that does not parse, with its line and
//! column, or whose worst case is over `mcp.rules.max_cost`) and when an instance first meets
//! the gateway's record (`McpRuntime::rules`); a call evaluates only when its gateway has rules.
//!
//! A rule's cost is bounded where it is saved and where it runs (Decision 23): `cost` bounds
//! the expression's worst case from the sizes of what it reads; a call larger than those sizes
//! is denied before a rule whose cost depends on them runs (`walk`), so the bound holds; and a
//! rule set whose bound is more than a few microseconds runs on the blocking pool within its
//! organisation's slots (`slots`), never on the threads that serve the other organisations.
//! Arguments the rules cannot read are refused as invalid, never decided as empty.

mod cost;
mod input;
mod memo;
mod slots;

pub(crate) use cost::Unbounded;
pub use input::{Claims, Subject};
pub(crate) use slots::{RuleSlots, SlotError};

use crate::config::RulesConfig;
use crate::data::model::{Gateway, Rule, RuleEffect, RuleMethod, Timestamp};
use cel::extractors::This;
use cel::{Context, ExecutionError, FunctionContext, Program, Value};
use input::{read_args, Args, Size};
use memo::{Memo, MemoProbe, Outcome};
use serde_json::value::RawValue;
use std::collections::HashMap;
use std::net::IpAddr;
use std::panic::AssertUnwindSafe;
use std::sync::Arc;
use toolgate_filters::{CredentialKind, Principal};

/// Most rules on one gateway.
pub(crate) const MAX_RULES: usize = 64;
/// Longest rule name, in characters (letters, digits, `_ . -`).
pub(crate) const MAX_NAME_CHARS: usize = 64;
/// Longest `when` expression, in characters.
pub(crate) const MAX_WHEN_CHARS: usize = 2048;
/// A rule set whose worst case is at most this many steps runs where the call is: a few
/// microseconds (BENCHMARKS.md, "Rules"), less than the hop to the blocking pool and back.
const INLINE_STEPS: f64 = 2_000.0;
/// A list decided where it is: at most this many steps for all its tools together (about a
/// millisecond, what reading a large request costs anyway).
const LIST_INLINE_STEPS: f64 = 100_000.0;

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
    #[error("rule `{name}` cannot be bounded: {why}")]
    Unbounded { index: usize, name: String, why: Unbounded },
    #[error(
        "rule `{name}` may take up to {steps} steps a call{}, over the budget of {budget} (mcp.rules.max_cost): \
         nest fewer comprehensions (exists, all, exists_one, map, filter) or range over shorter lists",
        if *.together { " with the rules before it" } else { "" }
    )]
    TooCostly { index: usize, name: String, steps: u64, budget: u64, together: bool },
    #[error("rule `{name}`: `methods` names no method, or one twice")]
    Methods { index: usize, name: String },
}

impl RuleError {
    /// The request member the error is about (`rules[2].when`).
    pub fn field(&self) -> String {
        match self {
            RuleError::TooMany => "rules".into(),
            RuleError::BadName { index } | RuleError::Duplicate { index, .. } => format!("rules[{index}].name"),
            RuleError::Length { index, .. }
            | RuleError::Syntax { index, .. }
            | RuleError::Unbounded { index, .. }
            | RuleError::TooCostly { index, .. } => format!("rules[{index}].when"),
            RuleError::Methods { index, .. } => format!("rules[{index}].methods"),
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
    /// Its cost depends on the size of the call (it ranges over, searches or compares what the
    /// call holds): the call is checked against `mcp.rules`' sizes before it runs.
    sized: bool,
    /// The methods it decides (`tools/call` when the rule names none).
    methods: Methods,
}

/// A set of [`RuleMethod`]s, one bit each.
#[derive(Clone, Copy, PartialEq, Eq)]
struct Methods(u8);

impl Methods {
    const TOOLS_CALL: Methods = Methods(1);

    fn bit(m: RuleMethod) -> u8 {
        1 << m as u8
    }

    /// A rule's `methods`: `None` when it names none or one twice.
    fn of(named: Option<&[RuleMethod]>) -> Option<Methods> {
        let Some(named) = named else { return Some(Methods::TOOLS_CALL) };
        let mut bits = 0u8;
        for m in named {
            if bits & Methods::bit(*m) != 0 {
                return None;
            }
            bits |= Methods::bit(*m);
        }
        (bits != 0).then_some(Methods(bits))
    }

    fn has(self, m: RuleMethod) -> bool {
        self.0 & Methods::bit(m) != 0
    }
}

/// A gateway's rules, compiled, with the root context of CEL's functions they run under (made
/// once: building it registers every standard function, and `matches` with the rules'
/// patterns compiled).
pub struct RuleSet {
    rules: Vec<Compiled>,
    root: Context<'static>,
    /// The gateway record's `updated_at` they were compiled from (a newer record recompiles).
    pub compiled_from: Timestamp,
    /// The bounds they were compiled under (a reload that changes them recompiles).
    limits: RulesConfig,
    /// Their worst case together, in steps, for a call within `limits`.
    steps: f64,
    /// Some rule reads `args` (so a call's arguments are parsed).
    reads_args: bool,
    /// Some rule reads `caller.claims` or `caller.scopes` (so a token's claims are read).
    reads_claims: bool,
    /// Some rule reads `method`, `prompt` or `uri` (so they are made variables).
    reads_call_names: bool,
    /// Decisions already made, for rule sets that do not read `args` (see `decide_call`).
    memo: Memo,
}

/// Checks and compiles `rules`: names unique and well formed, expressions within bounds,
/// parsing, and costing at most `limits.max_cost` steps together for any call within
/// `limits`' sizes. The first fault is the error.
pub fn compile(rules: &[Rule], compiled_from: Timestamp, limits: &RulesConfig) -> Result<RuleSet, RuleError> {
    if rules.len() > MAX_RULES {
        return Err(RuleError::TooMany);
    }
    let inputs = cost::Inputs { items: limits.max_input_items as f64, bytes: limits.max_input_bytes as f64 };
    let budget = limits.max_cost as f64;
    let mut compiled: Vec<Compiled> = Vec::with_capacity(rules.len());
    let mut steps = 0.0;
    let mut patterns = HashMap::new();
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
        let unbounded = |why| RuleError::Unbounded { index, name: r.name.clone(), why };
        let bound = cost::estimate(program.expression(), inputs).map_err(unbounded)?;
        steps += bound.steps;
        if steps.is_nan() || steps > budget {
            let alone = bound.steps <= budget;
            let worst = if alone { steps } else { bound.steps };
            let (name, steps) = (r.name.clone(), worst.ceil() as u64);
            return Err(RuleError::TooCostly { index, name, steps, budget: limits.max_cost, together: alone });
        }
        // Its cost grows with the call when the bound without the sizes is not the same.
        let sized = match cost::estimate(program.expression(), cost::Inputs::UNBOUNDED) {
            Ok(u) => u.steps.is_nan() || u.steps > bound.steps,
            Err(_) => true,
        };
        patterns.extend(bound.patterns);
        let reads_args = program.references().has_variable("args");
        let methods = Methods::of(r.methods.as_deref()).ok_or(RuleError::Methods { index, name: r.name.clone() })?;
        compiled.push(Compiled {
            name: Arc::from(r.name.as_str()),
            effect: r.effect,
            program,
            reads_args,
            sized,
            methods,
        });
    }
    let names = |c: &Compiled| ["method", "prompt", "uri"].iter().any(|v| c.program.references().has_variable(v));
    Ok(RuleSet {
        reads_call_names: compiled.iter().any(names),
        reads_args: compiled.iter().any(|c| c.reads_args),
        reads_claims: rules.iter().any(|r| r.when.contains("claims") || r.when.contains("scopes")),
        rules: compiled,
        root: root_context(patterns),
        compiled_from,
        limits: *limits,
        steps,
        memo: Memo::default(),
    })
}

/// CEL's standard functions, with `matches` searching with the rules' patterns as compiled
/// once (the crate's own compiles the pattern at every call; `cost` admits only literal
/// patterns, each compiled within `cost::MAX_PATTERN_BYTES`).
fn root_context(patterns: HashMap<String, regex::Regex>) -> Context<'static> {
    let mut root = Context::default();
    let matches = move |ftx: &FunctionContext, This(text): This<Arc<String>>, pattern: Arc<String>| match patterns
        .get(pattern.as_str())
    {
        Some(re) => Ok(re.is_match(&text)),
        None => Err::<bool, ExecutionError>(ftx.error("the pattern is not one the rule was saved with")),
    };
    root.add_function("matches", matches);
    root
}

/// The rules of a stored record that does not compile (written around the API's check, or over
/// a budget lowered since): every call is denied, by a rule named `invalid-rules`, rather than
/// let through unchecked.
pub(crate) fn deny_all(compiled_from: Timestamp, limits: &RulesConfig) -> RuleSet {
    let program = Program::compile("true").expect("`true` compiles");
    let rule = Compiled {
        name: Arc::from("invalid-rules"),
        effect: RuleEffect::Deny,
        program,
        reads_args: false,
        sized: false,
        // Fail closed for every method a rule could have decided.
        methods: Methods(
            Methods::bit(RuleMethod::ToolsCall)
                | Methods::bit(RuleMethod::PromptsGet)
                | Methods::bit(RuleMethod::ResourcesRead),
        ),
    };
    RuleSet {
        rules: vec![rule],
        root: Context::default(),
        compiled_from,
        limits: *limits,
        steps: 1.0,
        reads_args: false,
        reads_claims: false,
        reads_call_names: false,
        memo: Memo::default(),
    }
}

/// Why a rule denied a call.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Cause {
    /// Its `when` held.
    Matched,
    /// It could not be evaluated (a missing key, a value of the wrong type, a result that is
    /// not a boolean): fail closed.
    Failed(String),
    /// The call is larger than the sizes its cost bound assumed (`mcp.rules`): it is not run.
    TooLarge(String),
}

impl Cause {
    /// The metric's and the log's word for it.
    pub fn as_str(&self) -> &'static str {
        match self {
            Cause::Matched => "matched",
            Cause::Failed(_) => "failed",
            Cause::TooLarge(_) => "input_too_large",
        }
    }
}

/// A call refused by a rule: the typed value the answer, the metrics, the logs (and an audit
/// trail) are made from.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Denied {
    /// The rule's name.
    pub rule: Arc<str>,
    /// The method denied.
    pub method: RuleMethod,
    /// What the call named: the tool or prompt as the gateway exposes it, or the resource's URI.
    pub tool: String,
    /// The caller's key id (or token subject), as in the access line.
    pub key_id: String,
    pub cause: Cause,
}

impl Denied {
    /// The message of the JSON-RPC error.
    pub fn message(&self) -> String {
        let what = match self.method {
            RuleMethod::ToolsCall => "Tool call",
            RuleMethod::PromptsGet => "Prompt request",
            RuleMethod::ResourcesRead => "Resource read",
        };
        match &self.cause {
            Cause::Matched => format!("{what} denied by rule `{}`", self.rule),
            Cause::Failed(why) => {
                format!("{what} denied by rule `{}`: it could not be evaluated ({why})", self.rule)
            }
            Cause::TooLarge(why) => {
                format!(
                    "{what} denied by rule `{}`: the call is larger than the rule's cost bound allows ({why})",
                    self.rule
                )
            }
        }
    }

    /// The member of the error's `data` that names what was denied.
    pub(crate) fn named_as(&self) -> &'static str {
        match self.method {
            RuleMethod::ToolsCall => "tool",
            RuleMethod::PromptsGet => "prompt",
            RuleMethod::ResourcesRead => "uri",
        }
    }
}

/// Why the rules refused a call.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Refused {
    /// A rule denied it.
    Denied(Denied),
    /// Its arguments are not JSON the rules can read: the call is invalid (JSON-RPC -32602).
    Unreadable { reason: String },
    /// Every slot of the organisation for dear rule sets is taken and as many calls wait.
    Busy,
}

/// What a call or a list entry names: the method, and the tool, prompt or resource.
#[derive(Clone, Copy)]
pub struct CallFacts<'a> {
    pub method: RuleMethod,
    /// The tool as the gateway exposes it (`crm__get_ticket`); empty for the other methods.
    pub tool: &'a str,
    pub app: &'a str,
    /// The app's own name for the tool or prompt (`get_ticket`).
    pub function: &'a str,
    /// The prompt as the gateway exposes it (`prompts/get`), else empty.
    pub prompt: &'a str,
    /// The resource's URI (`resources/read`), else empty.
    pub uri: &'a str,
    /// A tool renamed by the gateway's `tool_overrides`: its name at the gateway before the
    /// rename (else empty). A rule that names it still denies the alias (`RuleSet::verdict`).
    pub renamed_from: &'a str,
}

impl<'a> CallFacts<'a> {
    /// A `tools/call` of (or a list entry for) `tool`.
    pub const fn tool(tool: &'a str, app: &'a str, function: &'a str) -> CallFacts<'a> {
        CallFacts { method: RuleMethod::ToolsCall, tool, app, function, prompt: "", uri: "", renamed_from: "" }
    }

    /// The same call, of a tool renamed from `from` (empty: not renamed).
    pub const fn renamed(self, from: &'a str) -> CallFacts<'a> {
        CallFacts { renamed_from: from, ..self }
    }

    /// What the call names, as its denial names it.
    fn named(&self) -> &'a str {
        match self.method {
            RuleMethod::ToolsCall => self.tool,
            RuleMethod::PromptsGet => self.prompt,
            RuleMethod::ResourcesRead => self.uri,
        }
    }
}

/// `CallFacts` owned, to go with an evaluation to the blocking pool.
struct OwnedFacts {
    method: RuleMethod,
    names: [String; 6],
}

impl OwnedFacts {
    fn of(t: CallFacts<'_>) -> OwnedFacts {
        let names = [t.tool, t.app, t.function, t.prompt, t.uri, t.renamed_from].map(str::to_string);
        OwnedFacts { method: t.method, names }
    }

    fn facts(&self) -> CallFacts<'_> {
        let [tool, app, function, prompt, uri, renamed_from] = &self.names;
        CallFacts { method: self.method, tool, app, function, prompt, uri, renamed_from }
    }
}

/// What a rule came to for one tool.
enum Verdict {
    Allow,
    Deny(Arc<str>, Cause),
    /// A rule that reads `args` came first (a list cannot decide it).
    Undecided,
}

impl Verdict {
    fn outcome(self) -> Outcome {
        match self {
            Verdict::Allow | Verdict::Undecided => None,
            Verdict::Deny(rule, cause) => Some((rule, cause)),
        }
    }
}

/// A decision as the caller gets it.
fn answer(outcome: Outcome, t: CallFacts<'_>, key_id: &str) -> Result<(), Refused> {
    match outcome {
        None => Ok(()),
        Some((rule, cause)) => Err(Refused::Denied(Denied {
            rule,
            method: t.method,
            tool: t.named().to_string(),
            key_id: key_id.to_string(),
            cause,
        })),
    }
}

impl RuleSet {
    /// Whether a token's claims are needed (some rule reads `caller.claims` or `caller.scopes`).
    pub(crate) fn reads_claims(&self) -> bool {
        self.reads_claims
    }

    /// Whether a call's arguments are needed.
    #[cfg(test)]
    pub(crate) fn reads_args(&self) -> bool {
        self.reads_args
    }

    /// Whether a call is decided where it is, rather than on the blocking pool: the set's
    /// worst case is a few microseconds.
    pub fn inline(&self) -> bool {
        self.steps <= INLINE_STEPS
    }

    /// The set's worst case together, in steps, for a call within the sizes of `mcp.rules`.
    pub fn steps(&self) -> f64 {
        self.steps
    }

    /// Whether a list of `tools` tools is decided where it is (each tool is one evaluation).
    pub(crate) fn lists_inline(&self, tools: usize) -> bool {
        self.inline() && self.steps * tools as f64 <= LIST_INLINE_STEPS
    }

    /// Whether the set is compiled from this record under these bounds.
    pub fn current(&self, gw: &Gateway, limits: &RulesConfig) -> bool {
        self.compiled_from == gw.updated_at && self.limits == *limits
    }

    /// Decides a call: `Err` names the first matching deny rule (or a rule that failed, or
    /// the call's size), or says the arguments cannot be read. `args` is the call's
    /// `arguments` as sent, read only when a rule reads them.
    pub fn decide(&self, who: &Subject, t: CallFacts<'_>, args: Option<&RawValue>) -> Result<(), Refused> {
        let args = self.read(args)?;
        answer(self.verdict(who, t, Some(&args)).outcome(), t, &who.key_id)
    }

    /// Decides a call by `p` from `ip`, as `decide`, remembering the answer when it cannot
    /// depend on the call itself: no rule reads `args`, and no rule reads a token's claims or
    /// the caller holds none (a key). `subject` makes the caller's variables, only on a miss.
    pub fn decide_call(
        &self,
        p: &Principal,
        ip: IpAddr,
        t: CallFacts<'_>,
        args: Option<&RawValue>,
        subject: impl FnOnce() -> Subject,
    ) -> Result<(), Refused> {
        let memo = self.memo_probe(p, ip, t);
        if let Some(known) = memo.as_ref().and_then(|(probe, hash)| self.memo.get(*hash, probe)) {
            return answer(known, t, &p.key_id);
        }
        let args = self.read(args)?;
        let outcome = self.verdict(&subject(), t, Some(&args)).outcome();
        if let Some((probe, hash)) = &memo {
            self.memo.put(*hash, probe, outcome.clone());
        }
        answer(outcome, t, &p.key_id)
    }

    /// `decide_call`, for a dear set on the blocking pool within `p`'s organisation's slots
    /// (`inline` sets are decided at once, here). The caller's variables are made here; the
    /// arguments are read and the rules run there.
    pub(crate) async fn decide_call_bounded(
        self: &Arc<Self>,
        slots: &RuleSlots,
        p: &Principal,
        ip: IpAddr,
        t: CallFacts<'_>,
        args: Option<&RawValue>,
        subject: impl FnOnce() -> Subject,
    ) -> Result<(), Refused> {
        if self.inline() {
            return self.decide_call(p, ip, t, args, subject);
        }
        let memo = self.memo_probe(p, ip, t);
        if let Some(known) = memo.as_ref().and_then(|(probe, hash)| self.memo.get(*hash, probe)) {
            return answer(known, t, &p.key_id);
        }
        // The arguments' text goes along (a copy costs less than reading it here).
        let text = args.filter(|_| self.reads_args).map(RawValue::to_owned);
        let (set, who, facts) = (self.clone(), subject(), OwnedFacts::of(t));
        let run = move || -> Result<Verdict, Refused> {
            let args = set.read(text.as_deref())?;
            Ok(set.verdict(&who, facts.facts(), Some(&args)))
        };
        let outcome = match slots.run(&p.org_id, run).await {
            Ok(verdict) => verdict?.outcome(),
            Err(SlotError::Busy) => return Err(Refused::Busy),
            Err(SlotError::Lost) => {
                let why = Cause::Failed("its evaluation did not finish".into());
                let rule = self.rules.first().map_or_else(|| Arc::from("rules"), |r| r.name.clone());
                return answer(Some((rule, why)), t, &p.key_id);
            }
        };
        if let Some((probe, hash)) = &memo {
            self.memo.put(*hash, probe, outcome.clone());
        }
        answer(outcome, t, &p.key_id)
    }

    /// The memo's key for this call, when its decision may be remembered.
    fn memo_probe<'a>(&self, p: &'a Principal, ip: IpAddr, t: CallFacts<'a>) -> Option<(MemoProbe<'a>, u64)> {
        let claimless = matches!(
            p.credential,
            CredentialKind::ApiKey | CredentialKind::GatewayKey { .. } | CredentialKind::ServiceAccount { .. }
        );
        // Only a tool's decision is remembered (the memo's key is the tool).
        if self.reads_args || (self.reads_claims && !claimless) || t.method != RuleMethod::ToolsCall {
            return None;
        }
        let probe = MemoProbe::new(p, ip, t);
        let hash = self.memo.hasher.hash_one(&probe);
        Some((probe, hash))
    }

    /// The call's arguments, when a rule reads them.
    fn read(&self, args: Option<&RawValue>) -> Result<Args, Refused> {
        if !self.reads_args {
            return Ok(Args::unread());
        }
        read_args(args).map_err(|reason| Refused::Unreadable { reason })
    }

    /// How many decisions are remembered (for tests).
    pub fn remembered(&self) -> usize {
        self.memo.len()
    }

    /// Whether a list shows the tool to this caller: hidden when the first rule that matches
    /// without the arguments is a deny, before any rule that reads `args`.
    pub fn listed(&self, who: &Subject, t: CallFacts<'_>) -> bool {
        !matches!(self.verdict(who, t, None), Verdict::Deny(..))
    }

    /// [`walk`](Self::walk), and for a tool renamed by an override also under the name it had
    /// before: a rule that denies that name, and does not hold for the alias (so it named the
    /// tool, rather than every tool), denies the alias too. A rename cannot lift a rule written
    /// before it; a rule that holds for any name (a final `deny` of a default-deny list) is
    /// decided once, as the alias.
    fn verdict(&self, who: &Subject, t: CallFacts<'_>, args: Option<&Args>) -> Verdict {
        let first = self.walk(who, t, args);
        if t.renamed_from.is_empty() || matches!(first, Verdict::Deny(..)) {
            return first;
        }
        let before = CallFacts { tool: t.renamed_from, renamed_from: "", ..t };
        match self.walk(who, before, args) {
            Verdict::Deny(rule, cause) if !self.holds(&rule, who, t, args) => Verdict::Deny(rule, cause),
            _ => first,
        }
    }

    /// Whether the rule named `rule` holds for the call `t`.
    fn holds(&self, rule: &str, who: &Subject, t: CallFacts<'_>, args: Option<&Args>) -> bool {
        let Some(r) = self.rules.iter().find(|r| &*r.name == rule) else { return false };
        let ctx = self.scope(who, t, args);
        matches!(std::panic::catch_unwind(AssertUnwindSafe(|| r.program.execute(&ctx))), Ok(Ok(Value::Bool(true))))
    }

    /// The variables of a call (`args`) or a list entry (`None`) the rules read.
    fn scope(&self, who: &Subject, t: CallFacts<'_>, args: Option<&Args>) -> Context<'_> {
        let mut ctx = self.root.new_inner_scope();
        ctx.add_variable_from_value("tool", t.tool);
        ctx.add_variable_from_value("app", t.app);
        ctx.add_variable_from_value("function", t.function);
        if self.reads_call_names {
            ctx.add_variable_from_value("method", t.method.as_str());
            ctx.add_variable_from_value("prompt", t.prompt);
            ctx.add_variable_from_value("uri", t.uri);
        }
        ctx.add_variable_from_value("caller", who.caller.clone());
        ctx.add_variable_from_value("client", who.client.clone());
        if let Some(args) = args {
            ctx.add_variable_from_value("args", args.value.clone());
        }
        ctx
    }

    /// The rules in order, for a call (`args`) or a list (`None`). A rule whose cost depends on
    /// the call's size runs only when the call is within the sizes its bound assumed; the
    /// interpreter's panics (it has a few, on values a rule did not expect) deny, as any
    /// failure does.
    fn walk(&self, who: &Subject, t: CallFacts<'_>, args: Option<&Args>) -> Verdict {
        let ctx = self.scope(who, t, args);
        let listing = args.is_none();
        let mut beyond: Option<Option<String>> = None;
        for r in self.rules.iter().filter(|r| r.methods.has(t.method)) {
            if listing && r.reads_args {
                return Verdict::Undecided;
            }
            if r.sized {
                if let Some(why) = beyond.get_or_insert_with(|| self.beyond(who, t, args)) {
                    return Verdict::Deny(r.name.clone(), Cause::TooLarge(why.clone()));
                }
            }
            let failed = match std::panic::catch_unwind(AssertUnwindSafe(|| r.program.execute(&ctx))) {
                Ok(Ok(Value::Bool(false))) => continue,
                Ok(Ok(Value::Bool(true))) => None,
                Ok(Ok(other)) => Some(format!("gives {:?}, not a boolean", other.type_of())),
                Ok(Err(e)) => Some(e.to_string()),
                Err(_) => Some("the interpreter cannot evaluate it for this call".to_string()),
            };
            return match (r.effect, failed) {
                (RuleEffect::Allow, None) => Verdict::Allow,
                (_, None) => Verdict::Deny(r.name.clone(), Cause::Matched),
                (_, Some(why)) => Verdict::Deny(r.name.clone(), Cause::Failed(why)),
            };
        }
        Verdict::Allow
    }

    /// What of the call is beyond the sizes the rules' bound assumed, if anything.
    fn beyond(&self, who: &Subject, t: CallFacts<'_>, args: Option<&Args>) -> Option<String> {
        let limits = &self.limits;
        let longest = [t.tool, t.app, t.function, t.prompt, t.uri].iter().map(|n| n.len()).max().unwrap_or(0);
        let names = Size { items: 0, bytes: longest };
        args.and_then(|a| a.size.beyond(limits, "the arguments"))
            .or_else(|| who.size.beyond(limits, "the caller's token claims"))
            .or_else(|| names.beyond(limits, "the tool's names"))
    }
}

#[cfg(test)]
mod tests;
