//! A rule's worst-case cost, read from its parsed expression before it ever runs.
//!
//! The `cel` crate has no cost estimator and no step counter, and a synchronous evaluation
//! cannot be pre-empted, so a rule's cost is bounded statically: every node of the expression
//! is given an upper bound on the work it does (in *steps*, about one node of the interpreter)
//! and on the size of the value it gives ([`Shape`]), from the sizes of the values it reads.
//! Comprehensions (`exists`, `all`, `exists_one`, `map`, `filter`) multiply their body by the
//! length of what they range over; a list or string that comes from the call (its arguments,
//! the caller's token) is bounded by [`Inputs`], which the call is checked against before such
//! a rule runs (`RuleSet::walk`), so the estimate is a bound and not a guess. A rule whose bound
//! is over the budget is refused when it is saved.
//!
//! One refinement keeps ordinary rules affordable: a loop body whose work on its entry is linear
//! (a search, a comparison; no loop inside it) is charged its entry-independent part once per
//! turn and its entry-dependent part once for the whole list, since the entries together hold
//! no more text than the list does (`Walk::comprehension`). Without it, `exists` over a
//! thousand strings of the arguments with a `contains` would be charged a thousand times the
//! longest string the arguments may hold.
//!
//! The walk visits each node a bounded number of times (a loop body at most four), so
//! estimating costs about as much as parsing.

use cel::common::ast::{operators, CallExpr, ComprehensionExpr, EntryExpr, Expr, IdedExpr};
use cel::common::value::CelVal;

/// Bytes one step stands for when an operation walks text (a copy, a comparison, a search).
const BYTES_PER_STEP: f64 = 64.0;
/// A `matches` search walks its text at most this many times slower than a comparison: the
/// `regex` crate searches in time linear in the text (times the pattern's size, which
/// [`MAX_PATTERN_BYTES`] bounds), its patterns compiled once per rule set.
const REGEX_STEPS_PER_BYTE_STEP: f64 = 16.0;
/// Most memory one `matches` pattern may compile to.
pub(super) const MAX_PATTERN_BYTES: usize = 256 * 1024;

/// The most a value read from the call may hold: each of its lists and maps at most `items`
/// entries, its JSON text at most `bytes` bytes (so each string too).
#[derive(Debug, Clone, Copy, PartialEq)]
pub(super) struct Inputs {
    pub items: f64,
    pub bytes: f64,
}

impl Inputs {
    /// No bound: what a rule costs when the call may be as large as it likes.
    pub(super) const UNBOUNDED: Inputs = Inputs { items: f64::INFINITY, bytes: f64::INFINITY };

    fn shape(self) -> Shape {
        // A JSON value of `bytes` bytes has at most about one value per two bytes (`[0,0,0]`).
        let weight = self.bytes / 2.0 + 1.0 + self.bytes / BYTES_PER_STEP;
        let (items, bytes) = (self.items, self.bytes);
        Shape { items, inner: items, chars: bytes, bytes, weight, each: weight, blob: false, var: false }
    }
}

/// Why a rule cannot be given a bound.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum Unbounded {
    #[error("`matches` takes a string literal as its pattern (a pattern from the call could cost anything)")]
    PatternNotLiteral,
    #[error("the pattern `{pattern}` is not a valid regular expression or is too large: {reason}")]
    BadPattern { pattern: String, reason: String },
    #[error("{0} are not supported in rules")]
    Unsupported(&'static str),
}

/// An upper bound on a value: its length as a list or map (`items`), the longest list or map
/// inside it (`inner`), its longest string (`chars`) and all its strings together (`bytes`),
/// what walking all of it costs (`weight`, in steps) and walking one of its entries (`each`);
/// `blob` when it may be bytes (whose `contains` compares window by window); `var` when it
/// comes from a loop's entry (see `Walk::cap`).
#[derive(Debug, Clone, Copy, PartialEq)]
struct Shape {
    items: f64,
    inner: f64,
    chars: f64,
    bytes: f64,
    weight: f64,
    each: f64,
    blob: bool,
    var: bool,
}

impl Shape {
    const SCALAR: Shape =
        Shape { items: 0.0, inner: 0.0, chars: 0.0, bytes: 0.0, weight: 1.0, each: 1.0, blob: false, var: false };

    /// A string (or `blob`) of `bytes` bytes, made from a value that is a loop's entry if `var`.
    fn text(bytes: f64, blob: bool, var: bool) -> Shape {
        let weight = 1.0 + bytes / BYTES_PER_STEP;
        Shape { items: 0.0, inner: 0.0, chars: bytes, bytes, weight, each: weight, blob, var }
    }

    fn join(self, o: Shape) -> Shape {
        Shape {
            items: self.items.max(o.items),
            inner: self.inner.max(o.inner),
            chars: self.chars.max(o.chars),
            bytes: self.bytes.max(o.bytes),
            weight: self.weight.max(o.weight),
            each: self.each.max(o.each),
            blob: self.blob || o.blob,
            var: self.var || o.var,
        }
    }

    /// One entry of a list (or a key or value of a map) of this shape.
    fn entry(self) -> Shape {
        Shape { items: self.inner, weight: self.each, ..self }
    }

    /// This shape without its text and its weight: what a loop's turn costs apart from them.
    fn bare(self) -> Shape {
        Shape { chars: 0.0, bytes: 0.0, weight: 1.0, each: 1.0, ..self }
    }
}

/// A node's bound: the value it gives and the steps it takes.
#[derive(Debug, Clone, Copy)]
struct Est {
    shape: Shape,
    cost: f64,
}

/// `a * b` where a count of zero stays zero even against an unbounded factor.
fn times(a: f64, b: f64) -> f64 {
    if a == 0.0 || b == 0.0 {
        0.0
    } else {
        a * b
    }
}

/// The families of fields of a [`Shape`] a loop's entry is charged by: its text (`chars` no
/// more than `bytes`) and its weight (`each` no more than `weight`). An entry at most a
/// fraction `t` of the largest in each field costs at most `t` of the largest's charged part
/// (that part is convex in them and zero without them); `t` is at most the entry's fraction of
/// the list's text plus its fraction of the list's weight, so the fractions of all the entries
/// add up to at most this many times the list's share (`Walk::comprehension`).
const CHARGED_FIELDS: f64 = 2.0;

/// `a / b` for the ratio of a whole to its largest part: at least one.
fn ratio(whole: f64, part: f64) -> f64 {
    if part > 0.0 && whole > part {
        whole / part
    } else {
        1.0
    }
}

/// The bound of one expression, and the `matches` patterns it uses (to compile once).
#[derive(Debug)]
pub(super) struct Estimate {
    /// Steps, at most.
    pub steps: f64,
    /// Each pattern compiled (what `matches` searches with).
    pub patterns: Vec<(String, regex::Regex)>,
}

/// Bounds `expr` with the call's values within `inputs`.
pub(super) fn estimate(expr: &IdedExpr, inputs: Inputs) -> Result<Estimate, Unbounded> {
    let mut walk =
        Walk { input: inputs.shape(), scopes: Vec::new(), patterns: Vec::new(), linear: false, nonlinear: false };
    let est = walk.expr(expr)?;
    Ok(Estimate { steps: est.cost, patterns: walk.patterns })
}

/// The walk's state: the shapes of the comprehension variables in scope, innermost last;
/// `linear` while a loop body is bounded by a convex function of its entry (every `min` of two
/// costs taken as their sum, which is no smaller), and `nonlinear` once that bound met a
/// product of two sizes.
struct Walk {
    input: Shape,
    scopes: Vec<(String, Shape)>,
    patterns: Vec<(String, regex::Regex)>,
    linear: bool,
    nonlinear: bool,
}

impl Walk {
    fn expr(&mut self, e: &IdedExpr) -> Result<Est, Unbounded> {
        match &e.expr {
            Expr::Literal(v) => Ok(literal(v)),
            Expr::Ident(name) => {
                let shape = self.scopes.iter().rev().find(|(n, _)| n == name).map_or(self.input, |(_, s)| *s);
                Ok(Est { shape, cost: 1.0 })
            }
            Expr::Select(s) => {
                let o = self.expr(&s.operand)?;
                if s.test {
                    // `has(a.b)` compares `b` with every key of `a`, each made a string.
                    let keys = o.shape.items + o.shape.bytes / BYTES_PER_STEP;
                    return Ok(Est { shape: Shape::SCALAR, cost: o.cost + 1.0 + keys });
                }
                Ok(Est { shape: o.shape.entry(), cost: o.cost + 2.0 })
            }
            Expr::List(l) => {
                let mut est = Est { shape: Shape { items: l.elements.len() as f64, ..Shape::SCALAR }, cost: 1.0 };
                for el in &l.elements {
                    let x = self.expr(el)?;
                    est = contain(est, x);
                }
                Ok(est)
            }
            Expr::Map(m) => {
                let mut est = Est { shape: Shape { items: m.entries.len() as f64, ..Shape::SCALAR }, cost: 1.0 };
                for entry in &m.entries {
                    let EntryExpr::MapEntry(entry) = &entry.expr else {
                        return Err(Unbounded::Unsupported("messages"));
                    };
                    let (k, v) = (self.expr(&entry.key)?, self.expr(&entry.value)?);
                    est = contain(contain(est, k), v);
                    est.cost += 1.0 + k.shape.chars / BYTES_PER_STEP;
                }
                Ok(est)
            }
            Expr::Comprehension(c) => self.comprehension(c),
            Expr::Call(call) => self.call(call),
            Expr::Struct(_) => Err(Unbounded::Unsupported("messages")),
            Expr::Unspecified => Err(Unbounded::Unsupported("empty expressions")),
        }
    }

    /// The smaller of two costs, each with whether it grows with a loop's entry. While a
    /// loop's body is bounded by a convex function of its entry: the one that does not grow
    /// (no smaller than the `min`, and constant), else their sum.
    fn cap(&self, (a, a_var): (f64, bool), (b, b_var): (f64, bool)) -> f64 {
        match (self.linear, a_var, b_var) {
            (false, ..) => a.min(b),
            (true, _, false) => b,
            (true, false, true) => a,
            (true, true, true) => a + b,
        }
    }

    /// A macro's loop: its body once per entry of its range. The accumulator of the five
    /// macros is a boolean or a count (`exists`, `all`, `exists_one`) or a list that grows by
    /// at most one entry a turn (`map`, `filter`); anything else is refused, so that a walk of
    /// the body bounds every turn.
    fn comprehension(&mut self, c: &ComprehensionExpr) -> Result<Est, Unbounded> {
        let scalar = matches!(c.accu_init.expr, Expr::Literal(CelVal::Boolean(_) | CelVal::Int(_)));
        let list = matches!(&c.accu_init.expr, Expr::List(l) if l.elements.is_empty());
        if !(scalar || list) || c.iter_var2.is_some() {
            return Err(Unbounded::Unsupported("comprehensions other than the macros"));
        }
        let range = self.expr(&c.iter_range)?;
        let init = self.expr(&c.accu_init)?;
        let turns = range.shape.items;
        // A boolean or a count stays one; a list grows by one entry a turn.
        let growing = if scalar { init.shape } else { Shape { items: init.shape.items + turns, ..init.shape } };
        let entry = Shape { var: true, ..range.shape.entry() };
        let (per_turn, step) = self.turn(c, entry, growing)?;
        let mut body = times(turns, per_turn);
        // A body without a loop of its own is bounded by a convex function of its entry that
        // is its bare cost (the entry without text or weight) plus a part growing with the
        // entry: that part is charged for all the entries together (which hold no more than
        // the range: `share` times its largest), the bare cost once a turn. Bounded with every
        // `min` as a sum (a `min` is not convex), and not at all past a product of sizes.
        if !self.linear && !loops(&c.loop_cond) && !loops(&c.loop_step) {
            (self.linear, self.nonlinear) = (true, false);
            let full = self.turn(c, entry, growing);
            let bare = full.and_then(|full| Ok((full.0, self.turn(c, entry.bare(), growing)?.0)));
            let nonlinear = self.nonlinear;
            (self.linear, self.nonlinear) = (false, false);
            let (full, bare) = bare?;
            if !nonlinear {
                let share =
                    ratio(range.shape.weight, range.shape.each).max(ratio(range.shape.bytes, range.shape.chars));
                body = body.min(times(turns, bare) + times(full - bare, CHARGED_FIELDS * share));
            }
        }
        let accu = if scalar {
            init.shape.join(step)
        } else {
            Shape {
                items: (init.shape.items + turns).max(step.items),
                inner: init.shape.inner.max(step.inner),
                chars: init.shape.chars.max(step.chars),
                bytes: init.shape.bytes + times(turns, step.bytes),
                weight: init.shape.weight + times(turns, step.each),
                each: init.shape.each.max(step.each),
                blob: init.shape.blob || step.blob,
                var: init.shape.var || step.var,
            }
        };
        let depth = self.scopes.len();
        self.scopes.push((c.accu_var.clone(), accu));
        let result = self.expr(&c.result);
        self.scopes.truncate(depth);
        let result = result?;
        Ok(Est { shape: result.shape, cost: 2.0 + range.cost + init.cost + body + result.cost })
    }

    /// One turn of a loop with its entry of shape `entry`: its cost (the condition, the step,
    /// binding the two variables) and the step's shape.
    fn turn(&mut self, c: &ComprehensionExpr, entry: Shape, growing: Shape) -> Result<(f64, Shape), Unbounded> {
        let depth = self.scopes.len();
        self.scopes.push((c.iter_var.clone(), entry));
        self.scopes.push((c.accu_var.clone(), growing));
        let cond = self.expr(&c.loop_cond);
        let step = cond.and_then(|cond| Ok((cond, self.expr(&c.loop_step)?)));
        self.scopes.truncate(depth);
        let (cond, step) = step?;
        Ok((cond.cost + step.cost + 3.0, step.shape))
    }

    fn call(&mut self, call: &CallExpr) -> Result<Est, Unbounded> {
        let name = call.func_name.as_str();
        let mut operands = Vec::with_capacity(call.args.len() + 1);
        for x in call.target.iter().map(|t| &**t).chain(&call.args) {
            operands.push(self.expr(x)?);
        }
        let below: f64 = operands.iter().map(|o| o.cost).sum();
        let shape = |i: usize| operands.get(i).map_or(Shape::SCALAR, |o: &Est| o.shape);
        let (a, b) = (shape(0), shape(1));
        let (out, own) = match name {
            operators::CONDITIONAL => {
                // One branch runs: the dearer one bounds it.
                let branch = operands.iter().skip(1).map(|o| o.cost).fold(0.0, f64::max);
                let cost = operands.first().map_or(0.0, |o| o.cost) + branch + 1.0;
                return Ok(Est { shape: b.join(shape(2)), cost });
            }
            operators::LOGICAL_AND | operators::LOGICAL_OR | operators::LOGICAL_NOT => (Shape::SCALAR, 1.0),
            operators::NEGATE | operators::NOT_STRICTLY_FALSE => (Shape::SCALAR, 1.0),
            operators::SUBSTRACT | operators::MULTIPLY | operators::DIVIDE | operators::MODULO => (Shape::SCALAR, 1.0),
            // Lists are copied entry by entry, strings byte by byte.
            operators::ADD => {
                let sum = Shape {
                    items: a.items + b.items,
                    inner: a.inner.max(b.inner),
                    chars: a.chars + b.chars,
                    bytes: a.bytes + b.bytes,
                    weight: a.weight + b.weight,
                    each: a.each.max(b.each),
                    blob: a.blob || b.blob,
                    var: a.var || b.var,
                };
                (sum, 1.0 + a.items + b.items + (a.chars + b.chars) / BYTES_PER_STEP)
            }
            // Equal values are walked together; the smaller one ends the walk.
            operators::EQUALS
            | operators::NOT_EQUALS
            | operators::LESS
            | operators::LESS_EQUALS
            | operators::GREATER
            | operators::GREATER_EQUALS => (Shape::SCALAR, 1.0 + self.cap((a.weight, a.var), (b.weight, b.var))),
            operators::IN => (Shape::SCALAR, 1.0 + self.member_of(a, b)),
            // An entry is no larger than what holds it.
            operators::INDEX => (a.entry(), 1.0 + b.chars / BYTES_PER_STEP),
            _ => self.function(call, name, a, b)?,
        };
        // A function other than an operator is handed a copy of its argument expressions.
        let copied = if is_operator(name) { 0.0 } else { call.args.iter().map(nodes).sum::<f64>() };
        Ok(Est { shape: out, cost: below + own + copied })
    }

    /// The standard functions: the shape they give and their own work, from their receiver
    /// (or first argument) `a` and their next argument `b`.
    fn function(&mut self, call: &CallExpr, name: &str, a: Shape, b: Shape) -> Result<(Shape, f64), Unbounded> {
        let text = |bytes: f64| bytes / BYTES_PER_STEP;
        Ok(match name {
            "size" => (Shape::SCALAR, 1.0),
            // Bytes are searched window by window (the length of one times the other); a
            // string, for a substring, in linear time; a list, entry by entry.
            "contains" if a.blob => {
                self.nonlinear |= self.linear;
                (Shape::SCALAR, 1.0 + text(times(a.chars, b.chars)))
            }
            "contains" => (Shape::SCALAR, 1.0 + self.member_of(b, a)),
            "startsWith" | "endsWith" => (Shape::SCALAR, 1.0 + text(self.cap((a.chars, a.var), (b.chars, b.var)))),
            "matches" => {
                let pattern = match call.args.as_slice() {
                    [p] if call.target.is_some() => p,
                    [_, p] if call.target.is_none() => p,
                    _ => return Ok((Shape::SCALAR, 1.0)),
                };
                let Expr::Literal(CelVal::String(pattern)) = &pattern.expr else {
                    return Err(Unbounded::PatternNotLiteral);
                };
                if !self.patterns.iter().any(|(p, _)| p == pattern) {
                    self.patterns.push((pattern.clone(), check_pattern(pattern)?));
                }
                (Shape::SCALAR, 1.0 + text(times(a.chars, REGEX_STEPS_PER_BYTE_STEP)))
            }
            "string" => (Shape::text(a.chars.max(64.0), false, a.var), 1.0 + text(a.chars)),
            "bytes" => (Shape::text(a.chars, true, a.var), 1.0 + text(a.chars)),
            // Each entry compared with the largest so far.
            "max" | "min" => {
                let all = a.join(b);
                (all.entry(), 1.0 + all.items + all.weight)
            }
            // Conversions and the time functions parse at most their text.
            _ => (Shape::SCALAR, 1.0 + text(a.chars.max(b.chars))),
        })
    }

    /// `x in list` (or a map's key, or a substring): each entry compared with `x`, the
    /// comparisons together never walking more than the list holds.
    fn member_of(&self, x: Shape, list: Shape) -> f64 {
        let text = (x.chars + list.chars) / BYTES_PER_STEP;
        let one = self.cap((x.weight, x.var), (list.each, list.var));
        let one_var = self.linear && x.var && list.var;
        list.items + self.cap((times(list.items, one), one_var), (list.weight, list.var)) + text
    }
}

/// A literal: a string is copied out of the expression each time it is read.
fn literal(v: &CelVal) -> Est {
    let shape = match v {
        CelVal::String(s) => Shape::text(s.len() as f64, false, false),
        CelVal::Bytes(b) => Shape::text(b.len() as f64, true, false),
        _ => return Est { shape: Shape::SCALAR, cost: 1.0 },
    };
    Est { shape, cost: shape.weight }
}

/// A list or map built of `x` and what `held` already holds.
fn contain(held: Est, x: Est) -> Est {
    let (h, s) = (held.shape, x.shape);
    let shape = Shape {
        items: h.items,
        inner: h.inner.max(s.items).max(s.inner),
        chars: h.chars.max(s.chars),
        bytes: h.bytes + s.bytes,
        weight: h.weight + s.weight,
        each: h.each.max(s.weight),
        blob: h.blob || s.blob,
        var: h.var || s.var,
    };
    Est { shape, cost: held.cost + x.cost }
}

fn is_operator(name: &str) -> bool {
    name.starts_with('_') || name.starts_with('@') || name.starts_with('!') || name.starts_with('-')
}

/// Whether an expression holds a loop.
fn loops(e: &IdedExpr) -> bool {
    match &e.expr {
        Expr::Comprehension(_) => true,
        Expr::Call(c) => c.target.iter().any(|t| loops(t)) || c.args.iter().any(loops),
        Expr::Select(s) => loops(&s.operand),
        Expr::List(l) => l.elements.iter().any(loops),
        Expr::Map(m) => m.entries.iter().any(|en| match &en.expr {
            EntryExpr::MapEntry(me) => loops(&me.key) || loops(&me.value),
            EntryExpr::StructField(f) => loops(&f.value),
        }),
        _ => false,
    }
}

/// The nodes of an expression (what copying it costs).
fn nodes(e: &IdedExpr) -> f64 {
    1.0 + match &e.expr {
        Expr::Call(c) => c.target.iter().map(|t| nodes(t)).sum::<f64>() + c.args.iter().map(nodes).sum::<f64>(),
        Expr::Select(s) => nodes(&s.operand),
        Expr::List(l) => l.elements.iter().map(nodes).sum(),
        Expr::Map(m) => m
            .entries
            .iter()
            .map(|en| match &en.expr {
                EntryExpr::MapEntry(me) => nodes(&me.key) + nodes(&me.value),
                EntryExpr::StructField(f) => nodes(&f.value),
            })
            .sum(),
        Expr::Comprehension(c) => {
            nodes(&c.iter_range) + nodes(&c.accu_init) + nodes(&c.loop_cond) + nodes(&c.loop_step) + nodes(&c.result)
        }
        Expr::Literal(CelVal::String(s)) => s.len() as f64 / BYTES_PER_STEP,
        _ => 0.0,
    }
}

/// A pattern `matches` may take: one the `regex` crate compiles within [`MAX_PATTERN_BYTES`].
pub(super) fn check_pattern(pattern: &str) -> Result<regex::Regex, Unbounded> {
    regex::RegexBuilder::new(pattern)
        .size_limit(MAX_PATTERN_BYTES)
        .dfa_size_limit(MAX_PATTERN_BYTES)
        .build()
        .map_err(|e| Unbounded::BadPattern { pattern: pattern.chars().take(64).collect(), reason: e.to_string() })
}

#[cfg(test)]
#[path = "cost_tests.rs"]
mod tests;
