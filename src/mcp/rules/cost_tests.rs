//! The cost bound's own tests: what it charges, and what it refuses to bound.

use super::*;

fn steps(when: &str, inputs: Inputs) -> Result<f64, Unbounded> {
    let program = cel::Program::compile(when).expect("compiles");
    estimate(program.expression(), inputs).map(|e| e.steps)
}

/// The default bounds of `mcp.rules`.
const CAPS: Inputs = Inputs { items: 256.0, bytes: 1024.0 * 1024.0 };

/// A list literal of `n` short strings.
fn literal_list(n: usize) -> String {
    format!("[{}]", (0..n).map(|i| format!("\"v{i}\"")).collect::<Vec<_>>().join(","))
}

#[test]
fn nesting_multiplies_by_the_length_of_each_range() {
    let l = literal_list(40);
    let one = steps(&format!("{l}.exists(a, a == tool)"), CAPS).unwrap();
    let two = steps(&format!("{l}.exists(a, {l}.exists(b, a == b))"), CAPS).unwrap();
    let three = steps(&format!("{l}.exists(a, {l}.exists(b, {l}.exists(c, a == c)))"), CAPS).unwrap();
    assert!(one > 40.0 && one < 1_000.0, "{one}");
    assert!(two > 40.0 * one * 0.5 && two < 40.0 * one * 2.0, "{one} {two}");
    assert!(three > 40.0 * two * 0.5, "{two} {three}");
    // The issue's rule: five levels over 40-element lists, about 10^8 turns of the body.
    let five = format!(
        "{l}.exists(a, {l}.exists(b, {l}.exists(c, {l}.exists(d, {l}.exists(e, a + b + c + d + e == \"x\")))))"
    );
    assert!(steps(&five, CAPS).unwrap() > 1e8);
}

#[test]
fn what_the_call_holds_is_bounded_by_the_inputs() {
    // Over the arguments: as long as the longest list the bound allows.
    let over = steps(r#"args.list.exists(x, x == "a")"#, CAPS).unwrap();
    assert!((256.0..5_000.0).contains(&over), "{over}");
    assert_eq!(steps(r#"args.list.exists(x, x == "a")"#, Inputs::UNBOUNDED).unwrap(), f64::INFINITY);
    // A comparison with a literal stops at the literal: no bound needed.
    let eq = r#"args.repo == "prod" && tool.startsWith("crm__")"#;
    assert_eq!(steps(eq, CAPS).unwrap(), steps(eq, Inputs::UNBOUNDED).unwrap());
    // A search walks the whole text.
    assert!(steps(r#"args.text.contains("x")"#, Inputs::UNBOUNDED).unwrap().is_infinite());
    // Two lists of the call ranged over together: their lengths multiply.
    let pairs = steps("args.a.exists(x, args.b.exists(y, x == y))", CAPS).unwrap();
    assert!(pairs > 256.0 * 256.0 * 1024.0, "{pairs}");
}

#[test]
fn map_and_filter_copy_their_growing_list_each_turn() {
    // `map` appends to a copy of its list each turn: quadratic in the length.
    let map = steps(r#"args.list.map(x, x).size() > 0"#, CAPS).unwrap();
    assert!(map > 256.0 * 256.0 / 2.0, "{map}");
    let exists = steps(r#"args.list.exists(x, x == "a")"#, CAPS).unwrap();
    assert!(map > 10.0 * exists, "{map} {exists}");
}

#[test]
fn what_cannot_be_bounded_is_refused() {
    assert_eq!(steps(r#"tool.matches(args.pattern)"#, CAPS), Err(Unbounded::PatternNotLiteral));
    assert_eq!(steps(r#"matches(tool, args.pattern)"#, CAPS), Err(Unbounded::PatternNotLiteral));
    assert!(matches!(steps(r#"tool.matches("(")"#, CAPS), Err(Unbounded::BadPattern { .. })));
    // A pattern that compiles past the size bound (a counted repetition of a large class).
    assert!(matches!(steps(r#"tool.matches("\\w{1000}")"#, CAPS), Err(Unbounded::BadPattern { .. })));
    assert!(matches!(steps("Msg{a: 1}.a == 1", CAPS), Err(Unbounded::Unsupported(_))));
    // A literal pattern is compiled once, with the rule.
    let program = cel::Program::compile(r#"tool.matches("^crm__") || app.matches("^crm__")"#).unwrap();
    let e = estimate(program.expression(), CAPS).unwrap();
    assert_eq!(e.patterns.len(), 1);
    assert!(e.patterns[0].1.is_match("crm__get"));
}

#[test]
fn a_loop_that_searches_its_entries_is_charged_the_text_once() {
    // The entries together hold at most the arguments' text: searching each is charged for
    // that text once (times the families it is charged by), not for 256 of the longest.
    let search = steps(r#"args.list.exists(x, x.contains("..") || x.matches("^/etc/"))"#, CAPS).unwrap();
    let text = 1024.0 * 1024.0 / BYTES_PER_STEP;
    assert!(search < 1e6, "{search}");
    assert!(search > text * (1.0 + REGEX_STEPS_PER_BYTE_STEP), "{search}");
    // A product of two sizes of the entry is not linear: charged a turn at a time.
    let bytes = steps(r#"args.list.exists(x, bytes(x).contains(bytes(x)))"#, CAPS).unwrap();
    assert!(bytes > 256.0 * text * text / 2.0, "{bytes}");
    // Over a literal list the share is its length: the same as a turn at a time, at most.
    let l = literal_list(40);
    let each = steps(&format!("{l}.exists(x, args.s.contains(x))"), CAPS).unwrap();
    let per_turn = steps("args.s.contains(\"v1\")", CAPS).unwrap();
    assert!(each > 40.0 * text && each <= 40.0 * (per_turn + 20.0) + 100.0, "{each} {per_turn}");
}

#[test]
fn string_building_grows_with_what_it_joins() {
    let l = literal_list(40);
    // Each turn of `map` joins two strings of the call: their lengths add.
    let joined = steps(&format!("{l}.map(a, args.s + args.s).exists(s, s.contains(\"x\"))"), CAPS).unwrap();
    assert!(joined > 40.0 * 2.0 * 1024.0 * 1024.0 / BYTES_PER_STEP, "{joined}");
}
