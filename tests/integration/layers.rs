//! The layer rule: `src/` is a stack of areas, and a file may use (`crate::...`, `super::...`
//! outside `#[cfg(test)]`, comments aside) only its own area and the areas below it.
//!
//! The map is ARCHITECTURE.md itself: its "Areas" table gives each area's floor and the areas it
//! uses, and its "Named exceptions" table the files any area may use. These tests read the code
//! and the document and fail on an upward import (naming the file, the line and the rule), on a
//! "uses" cell that is not what the code uses, on a file in no area, and on a function longer
//! than the house allows. So the document cannot drift from the code again.

use std::collections::{BTreeMap, BTreeSet};
use std::path::{Path, PathBuf};

/// The longest function outside tests (ARCHITECTURE.md, Rules).
const MAX_FUNCTION_LINES: usize = 150;
/// At most this many entries directly under `src/` (areas and the top files).
const MAX_SRC_ENTRIES: usize = 16;

/// The repository (also the docs and packaging tests' root).
pub(crate) fn root() -> &'static Path {
    Path::new(env!("CARGO_MANIFEST_DIR"))
}

/// One row of ARCHITECTURE.md's "Areas" table.
#[derive(Debug)]
struct Area {
    floor: usize,
    /// The module names (first segment after `crate::`) the area holds: `data` for `data/`,
    /// `proxy` for `proxy.rs`.
    modules: Vec<String>,
    /// What the "uses" cell says, as area names (the first module of each area).
    uses: BTreeSet<String>,
}

struct Map {
    areas: Vec<Area>,
    /// Module paths any area may use (`mcp::protocol`), from "Named exceptions".
    exceptions: Vec<String>,
}

impl Map {
    fn read() -> Map {
        let doc = std::fs::read_to_string(root().join("ARCHITECTURE.md")).expect("ARCHITECTURE.md");
        let areas = table_rows(&doc, "## Areas")
            .into_iter()
            .map(|cells| {
                assert!(cells.len() >= 4, "ARCHITECTURE.md, Areas: a row needs floor | area | owns | uses: {cells:?}");
                let floor =
                    cells[0].trim().parse().unwrap_or_else(|_| panic!("ARCHITECTURE.md, Areas: floor {:?}", cells[0]));
                let modules = code_spans(&cells[1]).iter().map(|s| module_of_entry(s)).collect();
                let uses = code_spans(&cells[3]).iter().map(|s| module_of_entry(s)).collect();
                Area { floor, modules, uses }
            })
            .collect::<Vec<_>>();
        assert!(!areas.is_empty(), "ARCHITECTURE.md has no '## Areas' table");
        let exceptions = table_rows(&doc, "## Named exceptions")
            .into_iter()
            .flat_map(|cells| code_spans(&cells[0]))
            .map(|file| module_path_of(Path::new(&file)).join("::"))
            .collect();
        Map { areas, exceptions }
    }

    fn area_of_module(&self, module: &str) -> Option<&Area> {
        self.areas.iter().find(|a| a.modules.iter().any(|m| m == module))
    }

    fn name(area: &Area) -> &str {
        &area.modules[0]
    }

    fn exception(&self, target: &[String]) -> bool {
        self.exceptions.iter().any(|e| {
            let e: Vec<&str> = e.split("::").collect();
            target.len() >= e.len() && target.iter().zip(&e).all(|(a, b)| a == b)
        })
    }
}

/// `src/data/` -> `data`, `src/proxy.rs` -> `proxy`, `data/` -> `data`.
fn module_of_entry(entry: &str) -> String {
    let e = entry.trim_start_matches("src/").trim_end_matches('/');
    e.trim_end_matches(".rs").to_string()
}

/// The rows (cells without the outer pipes) of the first Markdown table after `heading`.
fn table_rows(doc: &str, heading: &str) -> Vec<Vec<String>> {
    let Some(start) = doc.find(&format!("\n{heading}\n")) else { return Vec::new() };
    let rest = &doc[start + heading.len() + 2..];
    let rest = &rest[..rest.find("\n## ").unwrap_or(rest.len())];
    rest.lines()
        .filter(|l| l.starts_with('|'))
        .skip(2) // the header and its rule
        .map(|l| l.trim().trim_matches('|').split(" | ").map(str::to_string).collect())
        .collect()
}

/// The `code spans` of a Markdown cell.
fn code_spans(cell: &str) -> Vec<String> {
    cell.split('`').skip(1).step_by(2).map(str::to_string).collect()
}

/// `src/identity/signin/mod.rs` -> [identity, signin]; `src/lib.rs` -> [].
fn module_path_of(file: &Path) -> Vec<String> {
    let rel = file.strip_prefix("src").unwrap_or(file);
    let mut parts: Vec<String> = rel.iter().map(|p| p.to_string_lossy().into_owned()).collect();
    let last = parts.pop().unwrap_or_default();
    match last.as_str() {
        "mod.rs" | "lib.rs" | "main.rs" => {}
        other => parts.push(other.trim_end_matches(".rs").to_string()),
    }
    parts
}

/// Every `.rs` file under `dir`, recursively, appended to `out` (also the docs test's walk).
pub(crate) fn rust_files(dir: &Path, out: &mut Vec<PathBuf>) {
    for entry in std::fs::read_dir(dir).unwrap_or_else(|e| panic!("{}: {e}", dir.display())) {
        let path = entry.unwrap().path();
        if path.is_dir() {
            rust_files(&path, out);
        } else if path.extension().is_some_and(|e| e == "rs") {
            out.push(path);
        }
    }
}

/// Every `.rs` file of `src/`, as paths relative to the repository root.
fn sources() -> Vec<PathBuf> {
    let mut files = Vec::new();
    rust_files(&root().join("src"), &mut files);
    files.sort();
    files.into_iter().map(|f| f.strip_prefix(root()).unwrap().to_path_buf()).collect()
}

/// The code of a file with comments, string and char literals blanked out (newlines kept, so
/// line numbers hold) and every `#[cfg(test)]` item removed.
fn code_of(text: &str) -> String {
    strip_test_items(&blank_comments_and_literals(text))
}

fn blank_comments_and_literals(text: &str) -> String {
    let c: Vec<char> = text.chars().collect();
    let mut out = String::with_capacity(text.len());
    let blank = |out: &mut String, ch: char| out.push(if ch == '\n' { '\n' } else { ' ' });
    let mut i = 0;
    while i < c.len() {
        let next = c.get(i + 1).copied();
        if c[i] == '/' && next == Some('/') {
            while i < c.len() && c[i] != '\n' {
                blank(&mut out, c[i]);
                i += 1;
            }
        } else if c[i] == '/' && next == Some('*') {
            let mut depth = 0;
            while i < c.len() {
                if c[i] == '/' && c.get(i + 1) == Some(&'*') {
                    depth += 1;
                    out.push_str("  ");
                    i += 2;
                } else if c[i] == '*' && c.get(i + 1) == Some(&'/') {
                    depth -= 1;
                    out.push_str("  ");
                    i += 2;
                    if depth == 0 {
                        break;
                    }
                } else {
                    blank(&mut out, c[i]);
                    i += 1;
                }
            }
        } else if c[i] == 'r' && (next == Some('"') || next == Some('#')) && !ident_char(c.get(i.wrapping_sub(1))) {
            // A raw string: r"..." or r#"..."#.
            let mut j = i + 1;
            while c.get(j) == Some(&'#') {
                j += 1;
            }
            if c.get(j) != Some(&'"') {
                out.push(c[i]);
                i += 1;
                continue;
            }
            let hashes = j - i - 1;
            let mut k = j + 1;
            while k < c.len() && !(c[k] == '"' && (0..hashes).all(|h| c.get(k + 1 + h) == Some(&'#'))) {
                k += 1;
            }
            let end = (k + 1 + hashes).min(c.len());
            for &ch in &c[i..end] {
                blank(&mut out, ch);
            }
            i = end;
        } else if c[i] == '"' {
            blank(&mut out, c[i]);
            i += 1;
            while i < c.len() && c[i] != '"' {
                if c[i] == '\\' {
                    blank(&mut out, c[i]);
                    i += 1;
                }
                if i < c.len() {
                    blank(&mut out, c[i]);
                    i += 1;
                }
            }
            if i < c.len() {
                blank(&mut out, c[i]);
                i += 1;
            }
        } else if c[i] == '\'' {
            // A char literal ('x', '\n', '\u{..}') or a lifetime ('a).
            let end = if next == Some('\\') {
                (i + 2..c.len()).find(|&k| c[k] == '\'').map(|k| k + 1)
            } else if c.get(i + 2) == Some(&'\'') {
                Some(i + 3)
            } else {
                None
            };
            match end {
                Some(end) => {
                    for &ch in &c[i..end] {
                        blank(&mut out, ch);
                    }
                    i = end;
                }
                None => {
                    out.push(c[i]);
                    i += 1;
                }
            }
        } else {
            out.push(c[i]);
            i += 1;
        }
    }
    out
}

fn ident_char(c: Option<&char>) -> bool {
    c.is_some_and(|c| c.is_alphanumeric() || *c == '_')
}

/// Removes each item that follows a `#[cfg(test)]` (up to its matching closing brace, or its
/// semicolon), keeping its newlines.
fn strip_test_items(code: &str) -> String {
    let c: Vec<char> = code.chars().collect();
    let marker: Vec<char> = "#[cfg(test)]".chars().collect();
    let mut out = String::with_capacity(code.len());
    let mut i = 0;
    while i < c.len() {
        if c[i..].starts_with(&marker) {
            let mut depth = 0usize;
            let mut j = i + marker.len();
            while j < c.len() {
                match c[j] {
                    '{' => depth += 1,
                    '}' => {
                        depth -= 1;
                        if depth == 0 {
                            j += 1;
                            break;
                        }
                    }
                    ';' if depth == 0 => {
                        j += 1;
                        break;
                    }
                    _ => {}
                }
                j += 1;
            }
            out.extend(c[i..j.min(c.len())].iter().map(|&ch| if ch == '\n' { '\n' } else { ' ' }));
            i = j;
        } else {
            out.push(c[i]);
            i += 1;
        }
    }
    out
}

/// One path the code names: where it stands and the modules it names from the crate's root.
struct Use {
    line: usize,
    written: String,
    target: Vec<String>,
}

/// Every `crate::...` and `super::...` path of a file's code, resolved from the crate's root;
/// `crate::{a::b, c}` gives one path per branch.
fn uses_of(file: &Path, code: &str) -> Vec<Use> {
    let here = module_path_of(file);
    // `super` in `foo/mod.rs` is foo's parent; in `foo/bar.rs` it is foo.
    let mut found = Vec::new();
    let bytes = code.as_bytes();
    let mut i = 0;
    while i < code.len() {
        if !code.is_char_boundary(i) {
            i += 1;
            continue;
        }
        let starts_word = i == 0 || !ident_char(Some(&(bytes[i - 1] as char))) && bytes[i - 1] != b':';
        let rest = &code[i..];
        let (base, len): (Option<Vec<String>>, usize) = if starts_word && rest.starts_with("crate::") {
            (Some(Vec::new()), "crate::".len())
        } else if starts_word && rest.starts_with("super::") {
            let mut base = here.clone();
            let mut len = 0;
            while code[i + len..].starts_with("super::") {
                base.pop();
                len += "super::".len();
            }
            (Some(base), len)
        } else {
            (None, 0)
        };
        match base {
            Some(base) => {
                let line = code[..i].matches('\n').count() + 1;
                let (tree, end) = path_tree(&code[i + len..]);
                for branch in tree {
                    let mut target = base.clone();
                    target.extend(branch.iter().filter(|s| *s != "self").cloned());
                    let written = code[i..i + len + end].split_whitespace().collect::<Vec<_>>().join(" ");
                    found.push(Use { line, written, target });
                }
                i += len + end.max(1);
            }
            None => i += 1,
        }
    }
    found
}

/// The module paths at the start of `s` (`a::b::{c, d::e}` -> [a b c], [a b d e]) and how many
/// bytes they took. Items past the modules (types, functions) are kept; only the first two
/// segments decide an area and a named exception.
fn path_tree(s: &str) -> (Vec<Vec<String>>, usize) {
    let mut prefix = Vec::new();
    let mut i = 0;
    let b = s.as_bytes();
    loop {
        if s[i..].starts_with('{') {
            let mut depth = 0;
            let mut j = i;
            while j < b.len() {
                match b[j] {
                    b'{' => depth += 1,
                    b'}' => {
                        depth -= 1;
                        if depth == 0 {
                            break;
                        }
                    }
                    _ => {}
                }
                j += 1;
            }
            let mut branches = Vec::new();
            for part in split_top_level(&s[i + 1..j.min(s.len())]) {
                let part = part.trim();
                if part.is_empty() || part == "*" || part == "self" {
                    branches.push(prefix.clone());
                    continue;
                }
                for branch in path_tree(part).0 {
                    let mut p = prefix.clone();
                    p.extend(branch);
                    branches.push(p);
                }
            }
            return (branches, (j + 1).min(s.len()));
        }
        let start = i;
        while i < b.len() && (b[i] == b'_' || b[i].is_ascii_alphanumeric()) {
            i += 1;
        }
        if i > start {
            prefix.push(s[start..i].to_string());
        }
        if i > start && s[i..].starts_with("::") {
            i += 2;
            continue;
        }
        return (vec![prefix], i);
    }
}

fn split_top_level(s: &str) -> Vec<&str> {
    let mut parts = Vec::new();
    let (mut depth, mut start) = (0, 0);
    for (i, ch) in s.char_indices() {
        match ch {
            '{' => depth += 1,
            '}' => depth -= 1,
            ',' if depth == 0 => {
                parts.push(&s[start..i]);
                start = i + 1;
            }
            _ => {}
        }
    }
    parts.push(&s[start..]);
    parts
}

/// Each file's area, or the message saying why it has none.
fn area_of_file<'m>(map: &'m Map, file: &Path) -> Result<&'m Area, String> {
    let module = module_path_of(file);
    let first = module.first().map(String::as_str).unwrap_or(match file.file_name().and_then(|n| n.to_str()) {
        Some("main.rs") => "main",
        _ => "lib",
    });
    map.area_of_module(first).ok_or_else(|| {
        format!("{}: `{first}` is in no area of ARCHITECTURE.md's Areas table; put the file in an area", file.display())
    })
}

#[test]
fn every_import_points_to_the_own_or_a_lower_area() {
    let map = Map::read();
    let mut refused = Vec::new();
    for file in sources() {
        let text = std::fs::read_to_string(root().join(&file)).unwrap();
        let area = match area_of_file(&map, &file) {
            Ok(a) => a,
            Err(e) => {
                refused.push(e);
                continue;
            }
        };
        for u in uses_of(&file, &code_of(&text)) {
            let Some(first) = u.target.first() else { continue };
            let Some(target) = map.area_of_module(first) else {
                refused.push(format!(
                    "{}:{}: `{}` names `{first}`, which is in no area",
                    file.display(),
                    u.line,
                    u.written
                ));
                continue;
            };
            if target.floor > area.floor && !map.exception(&u.target) {
                refused.push(format!(
                    "{}:{}: `{}` imports {} (floor {}) from {} (floor {}): an area may use only its own \
                     floor and the floors below (ARCHITECTURE.md, Areas; named exceptions: {:?})",
                    file.display(),
                    u.line,
                    u.written,
                    Map::name(target),
                    target.floor,
                    Map::name(area),
                    area.floor,
                    map.exceptions
                ));
            }
        }
    }
    assert!(refused.is_empty(), "{} upward import(s):\n{}", refused.len(), refused.join("\n"));
}

#[test]
fn the_areas_table_says_what_each_area_uses() {
    let map = Map::read();
    let mut used: BTreeMap<String, BTreeSet<String>> = BTreeMap::new();
    for file in sources() {
        let Ok(area) = area_of_file(&map, &file) else { continue };
        let text = std::fs::read_to_string(root().join(&file)).unwrap();
        let entry = used.entry(Map::name(area).to_string()).or_default();
        for u in uses_of(&file, &code_of(&text)) {
            let Some(target) = u.target.first().and_then(|m| map.area_of_module(m)) else { continue };
            if !std::ptr::eq(target, area) && !map.exception(&u.target) {
                entry.insert(Map::name(target).to_string());
            }
        }
    }
    let mut wrong = Vec::new();
    for area in &map.areas {
        let name = Map::name(area);
        let actual = used.remove(name).unwrap_or_default();
        if actual != area.uses {
            let missing: Vec<_> = actual.difference(&area.uses).collect();
            let extra: Vec<_> = area.uses.difference(&actual).collect();
            wrong.push(format!(
                "{name}: the code uses {actual:?}; the table misses {missing:?} and names {extra:?} it does not use"
            ));
        }
    }
    assert!(wrong.is_empty(), "ARCHITECTURE.md's Areas table is not the code's:\n{}", wrong.join("\n"));
}

#[test]
fn every_entry_of_src_is_an_area_and_there_are_few() {
    let map = Map::read();
    let entries: Vec<String> = std::fs::read_dir(root().join("src"))
        .unwrap()
        .map(|e| e.unwrap().file_name().to_string_lossy().into_owned())
        .collect();
    let strays: Vec<&String> = entries.iter().filter(|e| map.area_of_module(&module_of_entry(e)).is_none()).collect();
    assert!(strays.is_empty(), "src/ entries in no area of ARCHITECTURE.md: {strays:?}");
    assert!(
        entries.len() <= MAX_SRC_ENTRIES,
        "src/ has {} entries (at most {MAX_SRC_ENTRIES}): {entries:?}",
        entries.len()
    );
    let floors: Vec<usize> = map.areas.iter().map(|a| a.floor).collect();
    assert!(floors.windows(2).all(|w| w[0] < w[1]), "the Areas table's floors must rise row by row: {floors:?}");
}

#[test]
fn the_named_exceptions_are_leaves() {
    // A file any area may use must itself use nothing above the ground floor but the other
    // exceptions, or the exception would carry a whole area in with it.
    let map = Map::read();
    assert!(!map.exceptions.is_empty(), "ARCHITECTURE.md has no Named exceptions table");
    let ground = map.areas.iter().map(|a| a.floor).min().unwrap();
    for file in sources() {
        let module = module_path_of(&file).join("::");
        if !map.exceptions.contains(&module) {
            continue;
        }
        let text = std::fs::read_to_string(root().join(&file)).unwrap();
        for u in uses_of(&file, &code_of(&text)) {
            let ground_use = u.target.first().and_then(|m| map.area_of_module(m)).is_some_and(|a| a.floor == ground);
            assert!(
                ground_use || map.exception(&u.target),
                "{}:{}: `{}`: a named exception may use only the ground floor and the other exceptions",
                file.display(),
                u.line,
                u.written
            );
        }
    }
}

#[test]
fn every_path_architecture_md_names_exists() {
    let doc = std::fs::read_to_string(root().join("ARCHITECTURE.md")).unwrap();
    let missing: Vec<String> = code_spans(&doc)
        .into_iter()
        .filter(|s| (s.starts_with("src/") || s.starts_with("filters/")) && !s.contains(' ') && !s.contains('*'))
        .filter(|s| !root().join(s.split("::").next().unwrap()).exists())
        .collect();
    assert!(missing.is_empty(), "ARCHITECTURE.md names paths that do not exist: {missing:?}");
}

#[test]
fn no_function_is_longer_than_the_house_allows() {
    let mut long = Vec::new();
    for file in sources() {
        let text = std::fs::read_to_string(root().join(&file)).unwrap();
        for (name, line, lines) in functions(&code_of(&text)) {
            if lines > MAX_FUNCTION_LINES {
                long.push(format!(
                    "{}:{line}: fn {name} has {lines} lines (at most {MAX_FUNCTION_LINES})",
                    file.display()
                ));
            }
        }
    }
    assert!(long.is_empty(), "functions to split into named steps:\n{}", long.join("\n"));
}

/// Each `fn` with a body: its name, first line and length in lines (signature to closing brace).
fn functions(code: &str) -> Vec<(String, usize, usize)> {
    let mut found = Vec::new();
    let b = code.as_bytes();
    let mut i = 0;
    while let Some(at) = code[i..].find("fn ") {
        let start = i + at;
        i = start + 3;
        if start > 0 && ident_char(Some(&(b[start - 1] as char))) {
            continue;
        }
        let name: String = code[i..].chars().take_while(|c| c.is_alphanumeric() || *c == '_').collect();
        if name.is_empty() {
            continue;
        }
        // The body opens at the first `{` before any `;` (a `;` first: a declaration in a trait).
        let Some(open) = code[i..].find(['{', ';']).map(|k| i + k) else { break };
        if b[open] == b';' {
            continue;
        }
        let mut depth = 0;
        let mut close = open;
        for (k, &ch) in b.iter().enumerate().skip(open) {
            match ch {
                b'{' => depth += 1,
                b'}' => {
                    depth -= 1;
                    if depth == 0 {
                        close = k;
                        break;
                    }
                }
                _ => {}
            }
        }
        let first = code[..start].matches('\n').count() + 1;
        let last = code[..close].matches('\n').count() + 1;
        found.push((name, first, last - first + 1));
    }
    found
}

#[test]
fn the_reader_sees_through_comments_strings_and_tests() {
    let code = code_of(
        "use crate::a::b; // crate::hidden\nlet s = \"crate::in_string\";\nlet r = r#\"crate::raw\"#;\n\
         let c = '\"'; use crate::{x::{y, z}, w};\n#[cfg(test)]\nmod tests { use crate::tested; }\nfn f<'a>() { super::up::v(); }\n",
    );
    let got: Vec<String> =
        uses_of(Path::new("src/data/state/mod.rs"), &code).iter().map(|u| u.target.join("::")).collect();
    assert_eq!(got, ["a::b", "x::y", "x::z", "w", "data::up::v"]);
    let lines: Vec<usize> = uses_of(Path::new("src/x.rs"), &code).iter().map(|u| u.line).collect();
    assert_eq!(lines, [1, 4, 4, 4, 7]);
    let f = functions("fn a() {\n  let x = { 1 };\n}\ntrait T { fn d(&self); }\nfn b() {}\n");
    assert_eq!(f, [("a".to_string(), 1, 3), ("b".to_string(), 5, 1)]);
}
