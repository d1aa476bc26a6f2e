//! A gateway's per-tool quotas (`tool_limits`, docs/mcp.md "Per-tool limits").
//!
//! Each entry names tools by a glob over the names the gateway exposes and counts their calls
//! in one bucket per caller, user, organisation or gateway. The buckets are counters of the
//! callers' own limiter (`RateLimit::charge_named`), so they are decided the same way as a
//! key's buckets: in memory on one instance; on Redis merged every `rate_limits.sync_ms`
//! (`leased`) or taken in Redis per call (`exact`); `concurrent` per instance.
//!
//! Cost: a gateway without limits pays one `is_empty` (no lock, no allocation). With limits,
//! the entries are compiled when the gateway's record is first seen (its globs parsed once,
//! its windows computed, a `gateway` bucket's name made), and a call matches the globs over
//! bytes with no allocation; each matching entry then builds its bucket's name once.

use crate::base::fast_map::FastMap;
use crate::data::model::{Gateway, LimitPer, Timestamp, ToolLimit, ToolLimitAnswer};
use serde_json::{json, Value};
use std::sync::Arc;
use toolgate_filters::rate_limit::{
    Bucket, BucketLimits, ConcurrencyGuard, InFlightSlot, Outcome, RateLimit, RateLimiter, Window,
};
use toolgate_filters::Principal;

/// Most entries on one gateway.
pub const MAX_TOOL_LIMITS: usize = 100;
/// Longest glob.
pub const MAX_GLOB: usize = 128;

const SECOND_NS: u64 = 1_000_000_000;

/// A glob over tool names: `*` any run of characters (none included), `?` exactly one; every
/// other character stands for itself. Matched over bytes (tool names are ASCII), without
/// allocating.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Glob(Box<str>);

impl Glob {
    /// The glob `s`, if it is one: 1-128 characters of a tool name (`A-Z a-z 0-9 _ . -`) and
    /// the wildcards.
    pub fn parse(s: &str) -> Result<Glob, String> {
        if s.is_empty() || s.len() > MAX_GLOB {
            return Err(format!("must be 1-{MAX_GLOB} characters"));
        }
        if let Some(c) = s.chars().find(|c| !(c.is_ascii_alphanumeric() || "_.-*?".contains(*c))) {
            return Err(format!(
                "`{c}` cannot be in a tool name: a glob is made of A-Z a-z 0-9 _ . - and the wildcards * and ?"
            ));
        }
        Ok(Glob(s.into()))
    }

    pub fn as_str(&self) -> &str {
        &self.0
    }

    fn literal(&self) -> bool {
        !self.0.contains(['*', '?'])
    }

    /// Whether `name` matches (the one glob matcher, shared with the external guards' `tools`).
    pub fn matches(&self, name: &str) -> bool {
        crate::data::model::glob_matches(self.0.as_bytes(), name.as_bytes())
    }

    /// Whether every name `other` matches is matched by this glob too, when that is plain to
    /// see (the same glob, `*`, or a literal name this one matches); `false` when unsure.
    pub fn covers(&self, other: &Glob) -> bool {
        self == other || self.0.bytes().all(|c| c == b'*') || (other.literal() && self.matches(&other.0))
    }
}

/// Which window of an entry refused.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Span {
    Minute,
    Hour,
    Day,
    Concurrent,
}

impl Span {
    pub fn as_str(self) -> &'static str {
        match self {
            Span::Minute => "minute",
            Span::Hour => "hour",
            Span::Day => "day",
            Span::Concurrent => "concurrent",
        }
    }

    const fn period_ns(self) -> u64 {
        match self {
            Span::Minute => 60 * SECOND_NS,
            Span::Hour => 3600 * SECOND_NS,
            Span::Day => 86_400 * SECOND_NS,
            Span::Concurrent => 0,
        }
    }
}

/// One entry, ready for calls: up to three windows in two charges of the entry's counter (a
/// bucket holds two windows: the first charge the minute and hour, the second the day).
#[derive(Debug)]
struct Entry {
    glob: Glob,
    per: LimitPer,
    /// The counter's name up to its subject: `tl:<gateway>:<per>:<glob>:<rpm>/<rph>/<rpd>:`.
    prefix: String,
    charges: [Option<(BucketLimits, [Span; 2])>; 2],
    concurrent: Option<u32>,
}

/// A window of `n` calls per `span`: all `n` at once at most, one back every `span / n`.
fn window(n: u32, span: Span) -> Window {
    let n = u64::from(n.max(1));
    Window { capacity: n, interval_ns: (span.period_ns() / n).max(1) }
}

impl Entry {
    fn of(gateway_id: &str, l: &ToolLimit) -> Result<Entry, String> {
        let glob = Glob::parse(&l.tool)?;
        let windows: Vec<(Window, Span)> =
            [(l.requests_per_minute, Span::Minute), (l.requests_per_hour, Span::Hour), (l.requests_per_day, Span::Day)]
                .into_iter()
                .filter_map(|(n, span)| n.map(|n| (window(n, span), span)))
                .collect();
        let mut charges = [None, None];
        for (slot, pair) in charges.iter_mut().zip(windows.chunks(2)) {
            let second = pair.get(1).copied();
            let limits = BucketLimits { minute: pair[0].0, hour: second.map(|s| s.0) };
            *slot = Some((limits, [pair[0].1, second.map_or(pair[0].1, |s| s.1)]));
        }
        Ok(Entry {
            // The figures are in the name: a changed entry counts afresh under its new figures
            // (GCRA keeps a window's debt in time, which under other figures would mean
            // another number of calls, so a raised limit would not free a call at once).
            prefix: format!(
                "tl:{gateway_id}:{}:{}:{}/{}/{}:",
                l.per.as_str(),
                glob.as_str(),
                l.requests_per_minute.unwrap_or(0),
                l.requests_per_hour.unwrap_or(0),
                l.requests_per_day.unwrap_or(0)
            ),
            glob,
            per: l.per,
            charges,
            concurrent: l.concurrent,
        })
    }

    /// The counter of this entry that `who`'s calls count in.
    fn counter(&self, who: &Principal) -> String {
        let subject = match self.per {
            LimitPer::Caller => who.key_id.as_str(),
            LimitPer::User => who.user_id.as_str(),
            LimitPer::Organization => who.org_id.as_str(),
            LimitPer::Gateway => "",
        };
        let mut name = String::with_capacity(self.prefix.len() + subject.len());
        name.push_str(&self.prefix);
        name.push_str(subject);
        name
    }
}

/// A gateway's entries, compiled from its record as of `compiled_from`.
#[derive(Debug)]
pub struct GatewayLimits {
    compiled_from: Timestamp,
    entries: Vec<Entry>,
    answer: ToolLimitAnswer,
}

impl GatewayLimits {
    /// The gateway's `tool_limits`, compiled; an entry that does not compile (a record written
    /// by hand) is left out and logged: the API refuses such entries.
    pub fn compile(gw: &Gateway) -> GatewayLimits {
        let entries = gw
            .tool_limits
            .iter()
            .filter_map(|l| {
                Entry::of(&gw.id, l)
                    .inspect_err(|e| tracing::error!(gateway = %gw.id, tool = %l.tool, error = %e, "a stored tool limit does not compile: left out"))
                    .ok()
            })
            .collect();
        GatewayLimits { compiled_from: gw.updated_at, entries, answer: gw.configuration.tool_limit_answer }
    }
}

/// A call past a limit: what the client and the log are told.
#[derive(Debug, Clone, PartialEq)]
pub struct Refusal {
    /// The tool as the client called it.
    pub tool: String,
    /// The entry's glob and whose calls it counts together.
    pub glob: String,
    pub per: LimitPer,
    pub limit: u64,
    pub span: Span,
    pub retry_after_ms: u64,
    pub answer: ToolLimitAnswer,
}

impl Refusal {
    /// What a model reads: "`crm__delete` is limited to 5 calls a minute for you; try again
    /// in 41 s".
    pub fn message(&self) -> String {
        let calls = if self.limit == 1 { "call" } else { "calls" };
        let whose = match self.per {
            LimitPer::Caller => "for you",
            LimitPer::User => "for your user",
            LimitPer::Organization => "for your organisation",
            LimitPer::Gateway => "for everyone on this gateway",
        };
        let with = if self.glob == self.tool {
            String::new()
        } else {
            format!(" (counted with every tool matching `{}`)", self.glob)
        };
        let (tool, limit) = (&self.tool, self.limit);
        match self.span {
            Span::Concurrent => format!(
                "`{tool}` is limited to {limit} {calls} at once {whose}{with}; try again when one ends (in about {} s)",
                self.retry_after_ms.div_ceil(1000)
            ),
            span => format!(
                "`{tool}` is limited to {limit} {calls} a{} {} {whose}{with}; try again in {} s",
                if span == Span::Hour { "n" } else { "" },
                span.as_str(),
                self.retry_after_ms.div_ceil(1000).max(1)
            ),
        }
    }

    /// The figures a client reads: the result's `_meta`, the error's `data`.
    pub fn data(&self) -> Value {
        json!({
            "tool": self.tool,
            "limit": self.limit,
            "window": self.span.as_str(),
            "retry_after_ms": self.retry_after_ms,
            "per": self.per.as_str(),
            "glob": self.glob,
        })
    }

    /// The tool result a client hands to its model: `isError`, the message, the figures.
    pub fn result(&self) -> Value {
        json!({
            "content": [{ "type": "text", "text": self.message() }],
            "isError": true,
            "_meta": self.data(),
        })
    }
}

/// How long a full in-flight cap is reported to last: a second, a retry's usual pause.
const CONCURRENT_RETRY_MS: u64 = 1000;

/// The slots a call holds under `concurrent` limits, released with the request's own slot.
struct Held {
    _own: Option<ConcurrencyGuard>,
    _tools: Vec<ConcurrencyGuard>,
}

impl InFlightSlot for Held {
    /// Nothing to do: dropping the last handle drops the guards, which release their slots.
    fn release(&self) {}
}

/// Joins the slots a call took under `concurrent` limits to the request's own in-flight slot
/// (`ctx.concurrency`), so that they are released together, however the call ends (a call that
/// goes on alone carries that slot to its end).
pub fn hold_with(own: &mut Option<ConcurrencyGuard>, taken: Vec<ConcurrencyGuard>) {
    if !taken.is_empty() {
        *own = Some(ConcurrencyGuard::new(Arc::new(Held { _own: own.take(), _tools: taken })));
    }
}

/// The gateways' compiled limits and the limiter they count in.
pub struct ToolLimits {
    limiter: RateLimit<dyn RateLimiter>,
    compiled: FastMap<String, Arc<GatewayLimits>>,
}

impl ToolLimits {
    pub fn new(limiter: RateLimit<dyn RateLimiter>) -> ToolLimits {
        ToolLimits { limiter, compiled: FastMap::default() }
    }

    /// The gateway's limits compiled, from the cache while its record is the one compiled.
    pub fn of(&self, gw: &Gateway) -> Arc<GatewayLimits> {
        if let Some(c) = self.compiled.get(&gw.id).filter(|c| c.compiled_from == gw.updated_at) {
            return c.clone();
        }
        let c = Arc::new(GatewayLimits::compile(gw));
        self.compiled.insert(gw.id.clone(), c.clone());
        c
    }

    /// Forgets a gateway's compiled limits (it changed or is gone).
    pub fn forget(&self, gateway_id: &str) {
        self.compiled.remove(gateway_id);
    }

    /// Counts a call of `tool` by `who` in every entry of the gateway whose glob matches it, in
    /// the entries' order: the in-flight slots it took, or the first refusal. A call refused by
    /// one entry still counts in the entries before it (and a day window's refusal in its
    /// entry's minute and hour): a refused call is rare, and a retry is then refused anyway.
    pub async fn admit(&self, gw: &Gateway, tool: &str, who: &Principal) -> Result<Vec<ConcurrencyGuard>, Refusal> {
        let limits = self.of(gw);
        let mut held = Vec::new();
        for e in limits.entries.iter().filter(|e| e.glob.matches(tool)) {
            let name = e.counter(who);
            for (bucket, charge) in [Bucket::Gateway, Bucket::Global].into_iter().zip(&e.charges) {
                let Some((windows, spans)) = charge else { continue };
                if let Outcome::Limited { snapshot, retry_after_ns } =
                    self.limiter.charge_named(&name, bucket, *windows).await
                {
                    // The window that refused: the one whose size the snapshot reports, the
                    // longer of two of the same size.
                    let span =
                        if windows.hour.is_some_and(|h| h.capacity == snapshot.limit) { spans[1] } else { spans[0] };
                    return Err(limits.refusal(e, tool, snapshot.limit, span, retry_after_ns.div_ceil(1_000_000)));
                }
            }
            if let Some(max) = e.concurrent {
                match self.limiter.take_named_slot(&name, max) {
                    Some(g) => held.push(g),
                    None => return Err(limits.refusal(e, tool, u64::from(max), Span::Concurrent, CONCURRENT_RETRY_MS)),
                }
            }
        }
        Ok(held)
    }

    /// Each bucket `who` has on the gateway (the entries' windows as they stand), for `GET
    /// /v1/rate-limit`: `{gateway, tool, per, window, limit, remaining, reset}`.
    pub async fn status(&self, gw: &Gateway, who: &Principal) -> Vec<Value> {
        let limits = self.of(gw);
        let mut out = Vec::new();
        for e in &limits.entries {
            let name = e.counter(who);
            let row = |window: &str| json!({ "gateway": gw.id, "tool": e.glob.as_str(), "per": e.per.as_str(), "window": window });
            for (bucket, charge) in [Bucket::Gateway, Bucket::Global].into_iter().zip(&e.charges) {
                let Some((windows, spans)) = charge else { continue };
                // A bucket reports the window closest to refusing: each is read on its own,
                // the second behind a first window too large ever to be the closer one.
                let mut alone = vec![(BucketLimits { minute: windows.minute, hour: None }, spans[0])];
                if let Some(h) = windows.hour {
                    let roomy = Window { capacity: u64::MAX / 4, interval_ns: 1 };
                    alone.push((BucketLimits { minute: roomy, hour: Some(h) }, spans[1]));
                }
                for (one, span) in alone {
                    let s = self.limiter.peek_named(&name, bucket, &one).await;
                    let mut r = row(span.as_str());
                    r["limit"] = json!(s.limit);
                    r["remaining"] = json!(s.remaining);
                    r["reset"] = json!(s.reset_at_unix);
                    out.push(r);
                }
            }
            if let Some(max) = e.concurrent {
                let mut r = row("concurrent");
                r["limit"] = json!(max);
                out.push(r);
            }
        }
        out
    }
}

impl GatewayLimits {
    fn refusal(&self, e: &Entry, tool: &str, limit: u64, span: Span, retry_after_ms: u64) -> Refusal {
        Refusal {
            tool: tool.to_string(),
            glob: e.glob.as_str().to_string(),
            per: e.per,
            limit,
            span,
            retry_after_ms,
            answer: self.answer,
        }
    }

    /// Whether the gateway has any entry (a record with none is never compiled).
    pub fn is_empty(&self) -> bool {
        self.entries.is_empty()
    }
}

#[cfg(test)]
mod tests;
