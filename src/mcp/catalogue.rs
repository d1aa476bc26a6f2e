//! A gateway's catalogue: the tools, prompts, resources and resource templates of its connected
//! apps, filtered by `allowed_tools` and named per DESIGN Decision 5, with the map back from an
//! exposed name to (app, upstream name).

use crate::base::hidden_text;
use crate::data::model::{DescriptionPolicy, Gateway, PendingReason, ToolPolicy};
use crate::data::tool_pins::{self, GatewayPins, Verdict};
use crate::mcp::apps::AppClients;
use crate::mcp::clean::{self, Finding, Kind, Withheld};
use crate::mcp::modern::{self, ParamHeader};
use crate::mcp::search_index::SearchIndex;
use crate::mcp::shaped::{self, Shape};
use crate::mcp::upstream::ListMethod;
use crate::observe::metrics;
use serde_json::Value;
use sha2::{Digest, Sha256};
use std::collections::HashMap;
use std::sync::{Arc, OnceLock};
use std::time::{Duration, Instant};

/// Longest tool name every major LLM client accepts.
const MAX_NAME: usize = 64;

/// Where an exposed name leads.
#[derive(Debug, Clone, PartialEq)]
pub struct Target {
    pub app_id: String,
    pub name: String,
    /// The `Mcp-Param-*` headers a tool declares (`x-mcp-header`), checked on stateless calls.
    pub param_headers: Vec<ParamHeader>,
    /// What the gateway's `tool_overrides` do to the tool's calls, if anything.
    pub shape: Option<Arc<Shape>>,
}

impl Target {
    /// The tool's name at the gateway before an override renamed it; empty when not renamed.
    pub fn renamed_from(&self) -> &str {
        self.shape.as_ref().and_then(|s| s.renamed_from.as_deref()).unwrap_or_default()
    }
}

#[derive(Debug, Default)]
pub struct Catalogue {
    pub tools: Vec<Value>,
    pub prompts: Vec<Value>,
    pub resources: Vec<Value>,
    pub templates: Vec<Value>,
    tool_targets: HashMap<String, Target>,
    prompt_targets: HashMap<String, Target>,
    /// Resource URI -> app.
    resource_apps: HashMap<String, String>,
    /// (resource template, app), in listing order.
    template_apps: Vec<(UriTemplate, String)>,
    /// The app of a single-app gateway: every resource URI is its to serve.
    single_app: Option<String>,
    /// Tools and prompts (by their names at the gateway) and resources (by URI) not listed for
    /// the hidden text in their definitions (`clean.rs`).
    withheld_tools: HashMap<String, Withheld>,
    withheld_prompts: HashMap<String, Withheld>,
    withheld_resources: HashMap<String, Withheld>,
    /// App id -> why it is missing from the catalogue.
    pub failures: HashMap<String, String>,
    /// Exposed name -> why a tool the apps list is held back (`tool_policy`): it awaits an
    /// admin's approval (`changed`, `added`, `hidden_text`) or was rejected.
    pending_tools: HashMap<String, Held>,
    /// What the build found that must be recorded: definitions to pin, changes now pending.
    /// Taken by the runtime, which writes them before it shares the catalogue.
    pub found: Vec<Found>,
    /// A renamed tool's name before its override -> its alias (empty without overrides).
    renamed: HashMap<String, String>,
    /// Per list (tools, prompts, resources, resource templates): the smallest `ttlMs` its apps
    /// gave it (apps of the 2026-07-28 revision), if any did.
    pub app_ttl_ms: [Option<u64>; 4],
    pub built: Option<Instant>,
    /// The ranking of `search_tools` over `tools`, built at the first search and dropped with
    /// the catalogue (`search_index.rs`).
    search: OnceLock<SearchIndex>,
}

/// A tool held back by the gateway's `tool_policy`: why, and under `description_policy: block`
/// the hidden text its definition carries (what a refused call names).
#[derive(Debug, Clone)]
pub struct Held {
    /// `changed`, `added`, `hidden_text` or `rejected`.
    pub reason: &'static str,
    pub findings: Vec<Finding>,
}

/// The classes of hidden text among `findings`, each once, in the order found.
fn classes(findings: &[Finding]) -> Vec<String> {
    let mut out: Vec<String> = Vec::new();
    for f in findings {
        let class = f.hit.class.as_str();
        if !out.iter().any(|c| c == class) {
            out.push(class.to_string());
        }
    }
    out
}

/// Counts and logs the findings in one definition (`action`: `stripped` or `withheld`).
/// An app's URI may carry the very text found: logs show it stripped.
fn noted(gw: &Gateway, app_id: &str, kind: Kind, name: &str, findings: &[Finding], action: &str) {
    if findings.is_empty() {
        return;
    }
    let name = hidden_text::strip(name).0;
    for f in findings {
        metrics::hidden_text(f.hit.class.as_str(), action, "definition");
        tracing::warn!(gateway = %gw.id, app = app_id, kind = kind.as_str(), name = %name,
            class = f.hit.class.as_str(), field = %f.field, code_point = f.hit.code_point, action,
            "hidden text in an app's definition");
    }
}

/// A listed tool whose verdict must be recorded ([`Verdict::PinNow`] or [`Verdict::Pending`]).
#[derive(Debug)]
pub struct Found {
    pub app_id: String,
    pub tool: String,
    pub hash: String,
    pub definition: Value,
    pub verdict: Verdict,
}

/// One app's four lists. Tools are required (an app that cannot list them is left out, with
/// the reason); the other three are empty when the app fails to list them.
#[derive(Debug, Default, Clone)]
pub struct AppLists {
    pub tools: Arc<Vec<Value>>,
    pub prompts: Arc<Vec<Value>>,
    pub resources: Arc<Vec<Value>>,
    pub templates: Arc<Vec<Value>>,
}

async fn lists_of(apps: &AppClients, org_id: &str, app_id: &str) -> Result<AppLists, String> {
    // The reason is shown to the gateway's clients and its tenant: the cause in words; the
    // error in full (the app's address, Pingora's chain) goes to the process log only.
    let tools = apps.list(org_id, app_id, ListMethod::Tools).await.map_err(|e| match e {
        crate::mcp::apps::AppError::Upstream { error, .. } => {
            tracing::warn!(org = org_id, app = app_id, %error, "cannot list the app's tools");
            error.in_words().into_owned()
        }
        other => other.to_string(),
    })?;
    let (prompts, resources, templates) = tokio::join!(
        apps.list(org_id, app_id, ListMethod::Prompts),
        apps.list(org_id, app_id, ListMethod::Resources),
        apps.list(org_id, app_id, ListMethod::ResourceTemplates),
    );
    let or_empty = |r: Result<Arc<Vec<Value>>, _>| r.unwrap_or_default();
    Ok(AppLists { tools, prompts: or_empty(prompts), resources: or_empty(resources), templates: or_empty(templates) })
}

/// Whether `s` is a tool name every major LLM client accepts (Decision 5).
pub fn valid_name(s: &str) -> bool {
    !s.is_empty() && s.len() <= MAX_NAME && s.bytes().all(|b| b.is_ascii_alphanumeric() || b"_.-".contains(&b))
}

/// The name a client sees for `name` of `app_id` (Decision 5).
pub(crate) fn exposed_name(app_id: &str, name: &str, separator: &str, single_app: bool) -> String {
    let full = if single_app { name.to_string() } else { format!("{app_id}{separator}{name}") };
    if valid_name(&full) {
        return full;
    }
    // Keep what is legal, then shorten with a hash of the full name so it stays unique.
    let cleaned: String =
        full.chars().map(|c| if c.is_ascii_alphanumeric() || "_.-".contains(c) { c } else { '_' }).collect();
    let hash = hex::encode(&Sha256::digest(full.as_bytes())[..4]);
    let keep = cleaned.len().min(MAX_NAME - 1 - hash.len());
    format!("{}_{hash}", &cleaned[..keep])
}

impl Catalogue {
    /// Asks every connected app of the gateway for its lists. A failing app drops out (its
    /// reason is kept in `failures`); the others stay.
    /// Under a `tool_policy` other than `off`, `pins` are the gateway's pins: a tool is served
    /// only with its approved definition (or pinned now, on its app's first list under `pin`).
    pub async fn build(apps: &AppClients, gw: &Gateway, deadline: Duration, pins: Option<&GatewayPins>) -> Catalogue {
        // Every app is asked at once, each within `deadline`; the answers are put together in
        // the gateway's order of apps, so the lists come out the same whichever answered first.
        let answers = futures_util::future::join_all(gw.servers.iter().map(|app_id| async move {
            match tokio::time::timeout(deadline, lists_of(apps, &gw.org_id, app_id)).await {
                Ok(lists) => lists,
                Err(_) => {
                    Err(format!("did not list its tools within {} ms (mcp.list_deadline_ms)", deadline.as_millis()))
                }
            }
        }))
        .await;
        let mut c = Catalogue::assemble(gw, answers, pins);
        for app_id in &gw.servers {
            let methods =
                [ListMethod::Tools, ListMethod::Prompts, ListMethod::Resources, ListMethod::ResourceTemplates];
            for (slot, method) in c.app_ttl_ms.iter_mut().zip(methods) {
                if let Some(t) = apps.list_ttl(&gw.org_id, app_id, method) {
                    *slot = Some(slot.map_or(t, |m| m.min(t)));
                }
            }
        }
        c
    }

    /// The catalogue of the apps' answers (one per app of the gateway, in its order): what a
    /// first list costs beyond asking the apps (`benches/catalogue.rs`).
    pub fn assemble(gw: &Gateway, answers: Vec<Result<AppLists, String>>, pins: Option<&GatewayPins>) -> Catalogue {
        let mut c = Catalogue::default();
        let single = gw.servers.len() == 1;
        if single {
            c.single_app = gw.servers.first().cloned();
        }
        let sep = &gw.configuration.tool_name_separator;
        let dp = gw.configuration.description_policy;
        for (app_id, answer) in gw.servers.iter().zip(answers) {
            let lists = match answer {
                Ok(lists) => lists,
                Err(reason) => {
                    c.failures.insert(app_id.clone(), reason);
                    continue;
                }
            };
            let allowed = gw.allowed_tools.get(app_id);
            for tool in lists.tools.iter() {
                let Some(name) = tool.get("name").and_then(Value::as_str) else { continue };
                let allowed_here = allowed.is_none_or(|a| a.allows(name));
                let policy = gw.configuration.tool_policy;
                let pins = pins.filter(|_| policy != ToolPolicy::Off);
                if !allowed_here && pins.is_none() {
                    continue;
                }
                let exposed = exposed_name(app_id, name, sep, single);
                let mut t = tool.clone();
                if let Some(pins) = pins {
                    // Every tool of the app is judged (its first list is pinned whole, whatever
                    // `allowed_tools` says); one outside `allowed_tools` stays unknown. Under
                    // `block`, hidden text makes the tool a pending change of its own: it is
                    // stripped here and served so once approved.
                    let shown = allowed_here.then_some(exposed.as_str());
                    if !c.admit(pins, gw, app_id, tool, &mut t, shown) || !allowed_here {
                        continue;
                    }
                } else if !c.checked(gw, app_id, Kind::Tool, &exposed, &mut t, gw.configuration.description_policy) {
                    continue;
                }
                t["name"] = Value::String(exposed.clone());
                c.tools.push(t);
                let param_headers = tool.get("inputSchema").map(modern::param_headers).unwrap_or_default();
                let target = Target { app_id: app_id.clone(), name: name.to_string(), param_headers, shape: None };
                c.tool_targets.insert(exposed, target);
            }
            for p in lists.prompts.iter() {
                let Some(name) = p.get("name").and_then(Value::as_str) else { continue };
                let exposed = exposed_name(app_id, name, sep, single);
                let mut p = p.clone();
                if !c.checked(gw, app_id, Kind::Prompt, &exposed, &mut p, dp) {
                    continue;
                }
                p["name"] = Value::String(exposed.clone());
                c.prompts.push(p);
                let target =
                    Target { app_id: app_id.clone(), name: name.to_string(), param_headers: Vec::new(), shape: None };
                c.prompt_targets.insert(exposed, target);
            }
            for r in lists.resources.iter() {
                if let Some(uri) = r.get("uri").and_then(Value::as_str) {
                    let mut r = r.clone();
                    if !c.checked(gw, app_id, Kind::Resource, uri, &mut r, dp) {
                        continue;
                    }
                    c.resource_apps.entry(uri.to_string()).or_insert_with(|| app_id.clone());
                    c.resources.push(r);
                }
            }
            for t in lists.templates.iter() {
                if let Some(tpl) = t.get("uriTemplate").and_then(Value::as_str) {
                    let mut t = t.clone();
                    if !c.checked(gw, app_id, Kind::ResourceTemplate, tpl, &mut t, dp) {
                        continue;
                    }
                    c.template_apps.push((UriTemplate::parse(tpl), app_id.clone()));
                    c.templates.push(t);
                }
            }
        }
        if !gw.tool_overrides.is_empty() {
            c.shape_tools(gw);
        }
        c.built = Some(Instant::now());
        c
    }

    /// Applies the gateway's `tool_overrides` to the tools as built: each shaped definition
    /// replaces the app's in the list, and its target carries the [`Shape`] its calls go
    /// through. A tool held back or withheld is known by its alias too, so a call of the alias
    /// is told why. An alias that another tool has taken since the override was saved (an app
    /// listed a new tool of that name) is not applied: the tool keeps its name, and the clash is
    /// logged.
    fn shape_tools(&mut self, gw: &Gateway) {
        let at: HashMap<String, usize> = self
            .tools
            .iter()
            .enumerate()
            .filter_map(|(i, t)| Some((t.get("name")?.as_str()?.to_string(), i)))
            .collect();
        for o in &gw.tool_overrides {
            let alias = o.name.as_deref().filter(|a| *a != o.tool);
            let Some(mut target) = self.tool_targets.remove(&o.tool) else {
                if let Some(alias) = alias {
                    if let Some(held) = self.pending_tools.get(&o.tool).cloned() {
                        self.pending_tools.insert(alias.to_string(), held);
                    }
                }
                continue;
            };
            let alias = alias.filter(|a| {
                let free = !self.tool_targets.contains_key(*a);
                if !free {
                    tracing::warn!(gateway = %gw.id, tool = %o.tool, alias = a, "a tool override's alias is taken by another tool: not renamed");
                }
                free
            });
            let exposed = alias.unwrap_or(&o.tool).to_string();
            if let Some(def) = at.get(&o.tool).and_then(|i| self.tools.get_mut(*i)) {
                shaped::definition(def, o, &exposed);
            }
            if alias.is_some() {
                self.renamed.insert(o.tool.clone(), exposed.clone());
            }
            target.shape = Some(Arc::new(Shape::of(o, alias.is_some())));
            self.tool_targets.insert(exposed, target);
        }
    }

    /// Checks an app's definition for hidden text under `policy` (`clean.rs`): stripped in
    /// place and `true` when it may be listed; else it is withheld, kept by its name (`name`: the
    /// gateway's name, or a resource's URI) for the refusal of a call, and `false`. Each finding
    /// is counted and logged.
    fn checked(
        &mut self,
        gw: &Gateway,
        app_id: &str,
        kind: Kind,
        name: &str,
        def: &mut Value,
        policy: DescriptionPolicy,
    ) -> bool {
        match clean::check(def, policy) {
            Ok(findings) => {
                noted(gw, app_id, kind, name, &findings, "stripped");
                true
            }
            Err(findings) => {
                self.withhold(gw, app_id, kind, name, findings);
                false
            }
        }
    }

    /// Keeps a definition's findings by its name for the refusal of a call, counted and logged.
    fn withhold(&mut self, gw: &Gateway, app_id: &str, kind: Kind, name: &str, findings: Vec<Finding>) {
        // An app's URI may carry the very text found: errors show it stripped.
        let name = hidden_text::strip(name).0;
        noted(gw, app_id, kind, &name, &findings, "withheld");
        let withheld = Withheld { kind, name: name.to_string(), findings };
        let map = match kind {
            Kind::Tool => &mut self.withheld_tools,
            Kind::Prompt => &mut self.withheld_prompts,
            Kind::Resource | Kind::ResourceTemplate => &mut self.withheld_resources,
        };
        map.insert(withheld.name.clone(), withheld);
    }

    /// Why a tool (or, with `prompt`, a prompt) the catalogue does not list was withheld, if it
    /// was.
    pub fn withheld(&self, exposed: &str, prompt: bool) -> Option<&Withheld> {
        if prompt { &self.withheld_prompts } else { &self.withheld_tools }.get(exposed)
    }

    /// Why a resource URI was withheld, if it was.
    pub(crate) fn withheld_resource(&self, uri: &str) -> Option<&Withheld> {
        self.withheld_resources.get(uri)
    }

    /// A catalogue with no entries: every app left out for the reason given.
    pub fn failed(failures: HashMap<String, String>) -> Catalogue {
        Catalogue { failures, built: Some(Instant::now()), ..Catalogue::default() }
    }

    /// Whether a listed tool (it has a `name`) is served, given the gateway's pins; what must be
    /// recorded goes to `found`, a tool held back to `pending_tools` under its `exposed` name
    /// (`None`: outside `allowed_tools`, so unknown to callers). `t` is the tool's copy, stripped
    /// of its hidden text: under `block`, a definition with hidden text that is not the approved
    /// one is a `hidden_text` change; hidden text in an identifier withholds it under either
    /// policy.
    fn admit(
        &mut self,
        pins: &GatewayPins,
        gw: &Gateway,
        app_id: &str,
        tool: &Value,
        t: &mut Value,
        exposed: Option<&str>,
    ) -> bool {
        let name = tool.get("name").and_then(Value::as_str).unwrap_or_default();
        let findings = match clean::check(t, DescriptionPolicy::Strip) {
            Ok(findings) => findings,
            Err(findings) => {
                if let Some(exposed) = exposed {
                    self.withhold(gw, app_id, Kind::Tool, exposed, findings);
                }
                return false;
            }
        };
        let hash = tool_pins::canonical_hash(tool);
        let mut verdict = pins.judge(gw.configuration.tool_policy, app_id, name, &hash);
        let block = gw.configuration.description_policy == DescriptionPolicy::Block;
        if block && !findings.is_empty() && matches!(verdict, Verdict::PinNow | Verdict::Pending(_)) {
            verdict = Verdict::Pending(PendingReason::HiddenText {
                findings: findings.iter().map(Finding::to_string).collect(),
                classes: classes(&findings),
            });
        }
        let served = matches!(verdict, Verdict::Serve | Verdict::PinNow);
        if let Some(exposed) = exposed {
            noted(gw, app_id, Kind::Tool, exposed, &findings, if served { "stripped" } else { "withheld" });
        }
        if let (false, Some(exposed)) = (served, exposed) {
            let reason = match &verdict {
                Verdict::Pending(reason) => reason.kind(),
                _ => match pins.get(app_id, name) {
                    Some(p) if p.pending.as_ref().is_some_and(|d| d.hash == hash) => {
                        p.pending.as_ref().map_or("changed", |d| d.reason.kind())
                    }
                    _ => "rejected",
                },
            };
            let findings = if block { findings } else { Vec::new() };
            self.pending_tools.insert(exposed.to_string(), Held { reason, findings });
        }
        if matches!(verdict, Verdict::PinNow | Verdict::Pending(_)) {
            self.found.push(Found {
                app_id: app_id.to_string(),
                tool: name.to_string(),
                hash,
                definition: tool.clone(),
                verdict,
            });
        }
        served
    }

    /// Whether the tool `name` of `app_id` is listed and callable on `gw` (not held back,
    /// withheld, nor outside `allowed_tools`).
    pub fn serves(&self, gw: &Gateway, app_id: &str, name: &str) -> bool {
        let sep = &gw.configuration.tool_name_separator;
        let exposed = exposed_name(app_id, name, sep, gw.servers.len() == 1);
        let exposed = self.renamed.get(&exposed).unwrap_or(&exposed);
        self.tool_targets.get(exposed).is_some_and(|t| t.app_id == app_id && t.name == name)
    }

    /// The search index of the listed tools: built once, by the first search of this catalogue.
    pub(crate) fn search_index(&self) -> &SearchIndex {
        self.search.get_or_init(|| SearchIndex::build(&self.tools))
    }

    /// Why a tool the apps list is held back by the gateway's `tool_policy`, if it is.
    pub(crate) fn pending_tool(&self, exposed: &str) -> Option<&Held> {
        self.pending_tools.get(exposed)
    }

    pub fn prompt(&self, exposed: &str) -> Option<&Target> {
        self.prompt_targets.get(exposed)
    }

    /// The gateway's name of a tool (or, with `prompt`, a prompt), borrowed from the catalogue,
    /// and where it goes.
    pub fn entry(&self, exposed: &str, prompt: bool) -> Option<(&str, &Target)> {
        let targets = if prompt { &self.prompt_targets } else { &self.tool_targets };
        targets.get_key_value(exposed).map(|(k, t)| (k.as_str(), t))
    }

    /// The app that can own a resource URI. Servers may serve URIs they do not list (templates,
    /// resources made at run time), so a URI no listing shows is not "not found": a listed
    /// resource's app, else the app of the most specific template that matches it, else the
    /// only app of a single-app gateway. `None` only when several apps could and none claims it.
    pub(crate) fn resource_app(&self, uri: &str) -> Option<&str> {
        if let Some(app) = self.resource_apps.get(uri) {
            return Some(app);
        }
        let mut best: Option<(usize, &str)> = None;
        for (template, app) in &self.template_apps {
            // The first of equally specific templates wins: listing order is the apps' order.
            if best.is_none_or(|(len, _)| template.literal_len > len) && template.matches(uri) {
                best = Some((template.literal_len, app));
            }
        }
        best.map(|(_, app)| app).or(self.single_app.as_deref())
    }
}

/// An RFC 6570 URI template reduced to what routing needs: its literal text and the kind of each
/// expression, so that a URI is matched by shape (`notes://{owner}/note/{id}` takes
/// `notes://a/note/7` but not `notes://a/todo/7` nor `notes://a/b/note/7`), not by its prefix
/// alone.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct UriTemplate {
    parts: Vec<Part>,
    /// Bytes of literal text: the more, the more specific the template.
    literal_len: usize,
}

#[derive(Debug, Clone, PartialEq, Eq)]
enum Part {
    Literal(String),
    /// An expression, by its operator (`+ # . / ; ? &`, or 0 for a simple `{var}`).
    Expr(u8),
}

impl UriTemplate {
    pub(crate) fn parse(template: &str) -> UriTemplate {
        let mut parts = Vec::new();
        let mut literal_len = 0;
        let mut rest = template;
        while !rest.is_empty() {
            let (literal, expr) = match rest.find('{') {
                Some(open) => match rest[open..].find('}') {
                    Some(close) => (&rest[..open], Some(&rest[open + 1..open + close])),
                    // An unclosed brace is text.
                    None => (rest, None),
                },
                None => (rest, None),
            };
            if !literal.is_empty() {
                literal_len += literal.len();
                parts.push(Part::Literal(literal.to_string()));
            }
            match expr {
                Some(e) => {
                    let op = e.bytes().next().filter(|b| b"+#./;?&".contains(b)).unwrap_or(0);
                    parts.push(Part::Expr(op));
                    rest = &rest[literal.len() + e.len() + 2..];
                }
                None => rest = "",
            }
        }
        UriTemplate { parts, literal_len }
    }

    /// Whether some values of the template's variables expand to `uri`. Linear in the URI per
    /// part: the positions the URI can be read up to are carried from part to part.
    pub(crate) fn matches(&self, uri: &str) -> bool {
        let b = uri.as_bytes();
        let n = b.len();
        let mut at = vec![false; n + 1];
        at[0] = true;
        let mut next = vec![false; n + 1];
        for part in &self.parts {
            next.iter_mut().for_each(|x| *x = false);
            match part {
                Part::Literal(lit) => {
                    for p in 0..=n.saturating_sub(lit.len()) {
                        if at[p] && b[p..].starts_with(lit.as_bytes()) {
                            next[p + lit.len()] = true;
                        }
                    }
                }
                Part::Expr(op) => {
                    // What a value may contain, and the character an operator puts before it.
                    let (prefix, stop): (Option<u8>, &[u8]) = match op {
                        0 => (None, b"/?#"),
                        b'+' => (None, b""),
                        b'#' => (Some(b'#'), b""),
                        b'/' => (Some(b'/'), b"?#"),
                        b'?' => (Some(b'?'), b"#"),
                        b'&' => (Some(b'&'), b"#"),
                        _ => (Some(*op), b"/?#"),
                    };
                    // Where a value may start. An operator's expression may also be empty (its
                    // variables undefined); a simple or reserved one must hold something, so
                    // `a/{id}/b` does not take `a//b`.
                    let mut starts = vec![false; n + 1];
                    for p in 0..=n {
                        if !at[p] {
                            continue;
                        }
                        match prefix {
                            None => starts[p] = true,
                            Some(c) => {
                                next[p] = true;
                                if b.get(p) == Some(&c) {
                                    starts[p + 1] = true;
                                    next[p + 1] = true;
                                }
                            }
                        }
                    }
                    let mut open = false;
                    for j in 0..n {
                        open |= starts[j];
                        if stop.contains(&b[j]) {
                            open = false;
                        } else if open {
                            next[j + 1] = true;
                        }
                    }
                }
            }
            std::mem::swap(&mut at, &mut next);
            if !at.contains(&true) {
                return false;
            }
        }
        at[n]
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn m(template: &str, uri: &str) -> bool {
        UriTemplate::parse(template).matches(uri)
    }

    #[test]
    fn a_template_matches_by_shape() {
        assert!(m("notes://{owner}/note/{id}", "notes://alice/note/7"));
        assert!(!m("notes://{owner}/note/{id}", "notes://alice/todo/7"));
        assert!(!m("notes://{owner}/note/{id}", "notes://a/b/note/7"), "a simple value holds no `/`");
        assert!(!m("notes://{owner}/note/{id}", "notes:///note/7"), "nor is it empty");
        assert!(!m("notes://{owner}/note/{id}", "notes://alice/note/7/more"));
        assert!(m("demo://resource/dynamic/text/{resourceId}", "demo://resource/dynamic/text/12"));
        assert!(m("file:///{+path}", "file:///etc/hosts"), "a reserved value holds `/`");
        assert!(m("{scheme}://x/{id}", "s3://x/1"), "no literal prefix");
        assert!(m("api://items{?page,limit}", "api://items"), "a query expression may be empty");
        assert!(m("api://items{?page,limit}", "api://items?page=2&limit=5"));
        assert!(m("api://items{/id*}", "api://items/a/b"));
        assert!(m("api://doc{#section}", "api://doc#intro"));
        assert!(m("api://doc{.ext}", "api://doc.json"));
        assert!(!m("api://doc{.ext}", "api://doc/json"));
        assert!(m("test://watched-resource", "test://watched-resource"), "no expression: the text itself");
        assert!(!m("test://watched-resource", "test://watched-resource2"));
        assert!(m("weird{", "weird{"), "an unclosed brace is text");
        assert!(!m("a/{x}", ""));
        // Linear per part: a long URI against a long template stays cheap.
        let long = format!("x://{}", "a/".repeat(50_000));
        assert!(!m("x://{a}/{b}/{c}/{d}/{e}/{f}/end", &long));
    }

    fn catalogue(servers: &[&str], listed: &[(&str, &str)], templates: &[(&str, &str)]) -> Catalogue {
        Catalogue {
            resource_apps: listed.iter().map(|(u, a)| (u.to_string(), a.to_string())).collect(),
            template_apps: templates.iter().map(|(t, a)| (UriTemplate::parse(t), a.to_string())).collect(),
            single_app: (servers.len() == 1).then(|| servers[0].to_string()),
            ..Catalogue::default()
        }
    }

    #[test]
    fn a_resource_goes_to_the_app_that_can_own_it() {
        let c = catalogue(
            &["a", "b"],
            &[("notes://alice/note/1", "b")],
            &[("notes://{owner}/note/{id}", "a"), ("notes://{owner}/todo/{id}", "b"), ("{+any}", "b")],
        );
        assert_eq!(c.resource_app("notes://alice/note/1"), Some("b"), "a listed resource first");
        assert_eq!(c.resource_app("notes://alice/note/7"), Some("a"));
        assert_eq!(c.resource_app("notes://alice/todo/7"), Some("b"), "same prefix, another shape");
        assert_eq!(c.resource_app("other://x"), Some("b"), "the catch-all template, least specific");
        let c = catalogue(&["a", "b"], &[], &[("notes://{owner}/note/{id}", "a")]);
        assert_eq!(c.resource_app("memo://1"), None, "several apps and none claims it");
        let c = catalogue(&["only"], &[], &[]);
        assert_eq!(
            c.resource_app("test://watched-resource"),
            Some("only"),
            "a single app serves what it does not list"
        );
    }

    #[test]
    fn names_follow_decision_5() {
        assert_eq!(exposed_name("time", "get_current_time", "__", true), "get_current_time");
        assert_eq!(exposed_name("time", "get_current_time", "__", false), "time__get_current_time");
        let long = exposed_name("an-app-with-a-long-id", &"x".repeat(80), "__", false);
        assert!(valid_name(&long), "{long}");
        assert_ne!(long, exposed_name("an-app-with-a-long-id", &"x".repeat(81), "__", false));
        let odd = exposed_name("a", "has space/slash", "__", false);
        assert!(valid_name(&odd), "{odd}");
    }
}
