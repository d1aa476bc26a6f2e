//! The front door and its reference pages stay true to the repository: every configuration field
//! the code reads is named in `docs/configuration.md` with the reload rule the code applies; every
//! command and snippet of the README and `docs/` is run by a test or marked as an example; the
//! README's run command is the repository's script, and that script's package check finds nothing
//! missing on a machine that builds and tests toolgate.

use std::collections::{BTreeMap, BTreeSet};
use std::path::PathBuf;
use std::process::Command;

use crate::layers::{root, rust_files};

/// A file of the repository, by its path from the root (also the packaging test's reader).
pub(crate) fn read(rel: &str) -> String {
    let path = root().join(rel);
    std::fs::read_to_string(&path).unwrap_or_else(|e| panic!("read {}: {e}", path.display()))
}

// ------------------------------------------------------------------------------------------------
// The configuration's fields, read from the serde structs that deserialise the YAML file

/// One field of a `#[derive(Deserialize)]` struct: its YAML name (after `rename`/`rename_all`),
/// its Rust type as written, and whether it is flattened into its parent.
#[derive(Debug, Clone)]
struct Field {
    yaml: String,
    ty: String,
    flatten: bool,
}

fn serde_value(attr: &str, key: &str) -> Option<String> {
    let at = attr.find(&format!("{key} = \""))? + key.len() + 4;
    Some(attr[at..].split('"').next()?.to_string())
}

fn apply_rename_all(rule: Option<&str>, name: &str) -> String {
    match rule {
        None | Some("snake_case") => name.to_string(),
        Some("kebab-case") => name.replace('_', "-"),
        Some("camelCase") => {
            let mut out = String::new();
            let mut upper = false;
            for c in name.chars() {
                if c == '_' {
                    upper = true;
                } else if upper {
                    out.extend(c.to_uppercase());
                    upper = false;
                } else {
                    out.push(c);
                }
            }
            out
        }
        Some(other) => panic!("serde rename_all = {other:?}: teach tests/integration/docs.rs this rule"),
    }
}

/// Every struct deriving `Deserialize` in `files`, by name. Fields are one per line, as rustfmt
/// writes them; a struct's name met twice is kept as a conflict and refused if it is reached.
fn deserialize_structs(files: &[PathBuf]) -> BTreeMap<String, Result<Vec<Field>, String>> {
    let mut structs: BTreeMap<String, Result<Vec<Field>, String>> = BTreeMap::new();
    for file in files {
        let text = std::fs::read_to_string(file).unwrap();
        let lines: Vec<&str> = text.lines().collect();
        let mut i = 0;
        while i < lines.len() {
            let line = lines[i].trim();
            let is_struct = line.contains("struct ") && line.ends_with('{') && !line.starts_with("//");
            if !is_struct {
                i += 1;
                continue;
            }
            // The attributes above the struct (doc comments between them are skipped).
            let mut attrs = Vec::new();
            let mut j = i;
            while j > 0 {
                let above = lines[j - 1].trim();
                if above.starts_with("#[") {
                    attrs.push(above);
                } else if !above.starts_with("///") {
                    break;
                }
                j -= 1;
            }
            let derives = attrs.iter().any(|a| a.starts_with("#[derive(") && a.contains("Deserialize"));
            let name = line.split("struct ").nth(1).unwrap().split(['{', '<', ' ']).next().unwrap().to_string();
            let rename_all = attrs.iter().find_map(|a| serde_value(a, "rename_all"));
            let mut fields = Vec::new();
            let mut field_attrs: Vec<&str> = Vec::new();
            i += 1;
            while i < lines.len() && lines[i].trim() != "}" {
                let l = lines[i].trim();
                i += 1;
                if l.starts_with("//") || l.is_empty() {
                    continue;
                }
                if l.starts_with("#[") {
                    field_attrs.push(l);
                    continue;
                }
                if !derives {
                    continue;
                }
                let decl =
                    l.trim_start_matches("pub(crate) ").trim_start_matches("pub(super) ").trim_start_matches("pub ");
                let Some((ident, ty)) = decl.split_once(": ") else {
                    panic!("{}: cannot read the field line {l:?} of struct {name}", file.display())
                };
                let serde: Vec<&str> = field_attrs.drain(..).filter(|a| a.starts_with("#[serde(")).collect();
                if serde.iter().any(|a| a.contains("skip)") || a.contains("skip,") || a.contains("skip_deserializing"))
                {
                    continue;
                }
                let yaml = serde
                    .iter()
                    .find_map(|a| serde_value(a, "rename"))
                    .unwrap_or_else(|| apply_rename_all(rename_all.as_deref(), ident.trim_start_matches("r#")));
                let flatten = serde.iter().any(|a| a.contains("flatten"));
                fields.push(Field { yaml, ty: ty.trim_end_matches(',').trim().to_string(), flatten });
            }
            if derives {
                let entry = if structs.contains_key(&name) {
                    Err(format!("struct {name} is defined twice (second in {})", file.display()))
                } else {
                    Ok(fields)
                };
                structs.insert(name, entry);
            }
        }
    }
    structs
}

/// `Option<T>` -> T; `Vec<T>` -> `[]` and T; `BTreeMap<String, T>` (or HashMap) -> `.<>` and T;
/// otherwise the type's last path segment.
fn layers(ty: &str) -> (String, String) {
    let ty = ty.trim();
    let (head, inner) = match ty.find('<') {
        Some(at) if ty.ends_with('>') => (&ty[..at], &ty[at + 1..ty.len() - 1]),
        _ => return (String::new(), ty.rsplit("::").next().unwrap().to_string()),
    };
    let head = head.rsplit("::").next().unwrap();
    match head {
        "Option" | "Box" => layers(inner),
        "Vec" => {
            let (suffix, base) = layers(inner);
            (format!("[]{suffix}"), base)
        }
        "BTreeMap" | "HashMap" | "IndexMap" => {
            let value = inner.split_once(',').expect("a map's key and value").1;
            let (suffix, base) = layers(value);
            (format!(".<>{suffix}"), base)
        }
        other => panic!("the configuration type {ty:?} ({other}) is new: teach tests/integration/docs.rs to walk it"),
    }
}

/// The dotted YAML keys of every leaf field of `RawConfig` (`server.tls.certificates[].cert_file`,
/// `limits.quotas.<>.gateways`, `apps[].env`).
fn configuration_keys() -> Vec<String> {
    let mut files = Vec::new();
    rust_files(&root().join("src/config"), &mut files);
    rust_files(&root().join("filters/src"), &mut files);
    let structs = deserialize_structs(&files);
    let mut keys = Vec::new();
    fn walk(
        structs: &BTreeMap<String, Result<Vec<Field>, String>>,
        name: &str,
        prefix: &str,
        keys: &mut Vec<String>,
        depth: usize,
    ) {
        assert!(depth < 12, "the configuration's types nest too deep at {prefix}");
        let fields = structs[name].as_ref().unwrap_or_else(|e| panic!("{e}"));
        for f in fields {
            let (suffix, base) = layers(&f.ty);
            // A list or map of plain values is one key (`apps[].env`); of structs, its entries'
            // fields are (`apps[].timeouts.connect_ms`, `limits.quotas.<>.gateways`).
            let nested = structs.contains_key(&base);
            let suffix = if nested { suffix.as_str() } else { "" };
            let key = match (f.flatten, prefix.is_empty()) {
                (true, _) => prefix.to_string(),
                (false, true) => format!("{}{suffix}", f.yaml),
                (false, false) => format!("{prefix}.{}{suffix}", f.yaml),
            };
            if nested {
                walk(structs, &base, &key, keys, depth + 1);
            } else {
                keys.push(key);
            }
        }
    }
    walk(&structs, "RawConfig", "", &mut keys, 0);
    keys
}

/// The reload rules of `src/server/reload.rs`, read from its constants: whether `key` applies in
/// place.
fn reloads_in_place(reload_rs: &str, key: &str) -> bool {
    fn quoted(s: &str) -> Vec<String> {
        s.split('"').skip(1).step_by(2).map(str::to_string).collect()
    }
    /// The text of `const NAME: ... = &[ ... ];` after its `= &[`.
    fn constant<'a>(src: &'a str, name: &str) -> &'a str {
        let start = src.find(&format!("const {name}:")).unwrap_or_else(|| panic!("reload.rs has no const {name}"));
        let body = &src[start..];
        let body = &body[body.find("= &[").expect("the constant's value") + 4..];
        &body[..body.find("];\n").expect("the constant's end")]
    }
    let in_place = quoted(constant(reload_rs, "IN_PLACE"));
    let read_at_start: Vec<(String, String)> =
        quoted(constant(reload_rs, "READ_AT_START")).chunks(2).map(|c| (c[0].clone(), c[1].clone())).collect();
    // `("section", &["field", ...])`, one entry per `(`, however rustfmt wraps it.
    let mut fields_in_place: BTreeMap<String, Vec<String>> = BTreeMap::new();
    for entry in constant(reload_rs, "FIELDS_IN_PLACE").split('(').map(quoted).filter(|n| !n.is_empty()) {
        fields_in_place.insert(entry[0].clone(), entry[1..].to_vec());
    }
    assert!(
        !in_place.is_empty() && !read_at_start.is_empty() && fields_in_place.contains_key("webhooks"),
        "src/server/reload.rs's constants did not read: {in_place:?} {read_at_start:?} {fields_in_place:?}"
    );
    let mut segments = key.split('.').map(|s| s.trim_end_matches("[]"));
    let section = segments.next().unwrap().to_string();
    let field = segments.next().unwrap_or("").to_string();
    if let Some(fields) = fields_in_place.get(&section) {
        return fields.contains(&field);
    }
    in_place.contains(&section) && !read_at_start.contains(&(section, field))
}

/// `<tier>`, `<name>` ... in the page stand for any map key: `<>` in the keys the code gives.
fn placeholders_to_empty(text: &str) -> String {
    let mut out = String::with_capacity(text.len());
    let mut rest = text;
    while let Some(at) = rest.find('<') {
        out.push_str(&rest[..at]);
        let tail = &rest[at + 1..];
        match tail.find('>') {
            Some(end) if end > 0 && tail[..end].bytes().all(|b| b.is_ascii_lowercase() || b == b'_' || b == b'-') => {
                out.push_str("<>");
                rest = &tail[end + 1..];
            }
            _ => {
                out.push('<');
                rest = tail;
            }
        }
    }
    out.push_str(rest);
    out
}

#[test]
fn every_configuration_field_is_in_the_reference_with_its_reload_rule() {
    let keys = configuration_keys();
    // The walk itself is checked against fields it must find, so a parser gone blind fails here.
    for known in [
        "environment",
        "server.tls.certificates[].cert_file",
        "apps[].timeouts.connect_ms",
        "rate_limits.tiers.<>.requests_per_hour",
        "limits.quotas.<>.max_multiplier",
        "web.saml[].group_roles",
        "web.client_id_metadata_documents.fetches_in_all",
    ] {
        assert!(keys.iter().any(|k| k == known), "the walk of src/config missed {known}: {keys:#?}");
    }
    assert!(keys.len() > 150, "only {} configuration keys found: {keys:#?}", keys.len());

    let page = placeholders_to_empty(&read("docs/configuration.md"));
    let reload_rs = read("src/server/reload.rs");
    let mut missing = Vec::new();
    let mut wrong_reload = Vec::new();
    let mut seen = BTreeSet::new();
    for key in &keys {
        assert!(seen.insert(key.clone()), "{key} twice");
        let cell = format!("`{key}`");
        let Some(row) = page.lines().find(|l| l.starts_with(&format!("| {cell} |"))) else {
            missing.push(key.clone());
            continue;
        };
        let reload = row.split('|').nth(3).unwrap_or("").trim();
        let expected = if reloads_in_place(&reload_rs, key) { "yes" } else { "no" };
        if !reload.starts_with(expected) {
            wrong_reload.push(format!("{key}: the page says {reload:?}, src/server/reload.rs says {expected}"));
        }
    }
    assert!(
        missing.is_empty(),
        "docs/configuration.md has no row `| `key` | default | reloads | meaning |` for these fields of \
         src/config (add one each):\n{}",
        missing.join("\n")
    );
    assert!(wrong_reload.is_empty(), "reload column of docs/configuration.md:\n{}", wrong_reload.join("\n"));
}

// ------------------------------------------------------------------------------------------------
// Snippets: run by a test, or marked as examples

/// What marks a fenced block, on the line before it. `example` is a snippet no test runs as
/// written (its placeholders, such as `$GW` or `ag_...`, are the reader's); the others name the
/// test that runs or reads the block. `<!-- guide: file NAME -->` (any NAME, see
/// [`GUIDE_FILE`]) is a file a guide has the reader save, which its test saves and uses.
const MARKERS: &[(&str, &str)] = &[
    ("<!-- example -->", "shown, not run as written"),
    ("<!-- run -->", "tests/integration/docs.rs::the_readme_run_command_is_the_repositorys_script"),
    ("<!-- tour -->", "tests/py/test_docs_tour.py"),
    ("<!-- tour: python -->", "tests/py/test_docs_tour.py"),
    (
        "<!-- client: claude-code -->",
        "src/console/snippets.rs (the console's own, run by tests/py/test_console_snippets.py)",
    ),
    ("<!-- client: cursor -->", "src/console/snippets.rs"),
    ("<!-- client: vscode -->", "src/console/snippets.rs"),
    ("<!-- client: claude-desktop -->", "src/console/snippets.rs"),
    ("<!-- client: inspector -->", "src/console/snippets.rs"),
    ("<!-- client: python -->", "src/console/snippets.rs"),
    ("<!-- client: typescript -->", "src/console/snippets.rs and tests/py/test_docs_tour.py"),
    ("<!-- build -->", "tests/integration/packaging.rs"),
    ("<!-- verify a delivery -->", "tests/py/test_webhooks.py"),
    ("<!-- example guard -->", "tests/py/test_guards.py"),
    ("<!-- guide: run -->", "tests/py/test_guides.py"),
];

/// The marker of a file a guide has the reader save (`<!-- guide: file toolgate.yaml -->`), run
/// by `tests/py/test_guides.py`.
const GUIDE_FILE: (&str, &str) = ("<!-- guide: file ", " -->");

fn is_marker(line: &str) -> bool {
    let guide_file = line
        .strip_prefix(GUIDE_FILE.0)
        .and_then(|rest| rest.strip_suffix(GUIDE_FILE.1))
        .is_some_and(|name| !name.is_empty() && !name.contains(char::is_whitespace));
    guide_file || MARKERS.iter().any(|(m, _)| line == *m)
}

/// The guides by task (`docs/guides/`), and the files they use: each page has a block a test
/// runs.
#[test]
fn every_guide_has_a_block_a_test_runs_and_is_linked_from_the_readme() {
    let readme = read("README.md");
    let index = read("docs/guides/README.md");
    let mut guides = 0;
    for entry in std::fs::read_dir(root().join("docs/guides")).expect("docs/guides/") {
        let path = entry.unwrap().path();
        let name = path.file_name().unwrap().to_string_lossy().into_owned();
        if path.extension().is_none_or(|e| e != "md") || name == "README.md" {
            continue;
        }
        guides += 1;
        let text = std::fs::read_to_string(&path).unwrap();
        assert!(text.contains("\n<!-- guide: run -->\n```sh\n"), "docs/guides/{name} has no block a test runs");
        assert!(index.contains(&format!("]({name})")), "docs/guides/README.md does not link {name}");
        assert!(readme.contains(&format!("](docs/guides/{name})")), "README.md does not link docs/guides/{name}");
    }
    assert_eq!(guides, 7, "the guides by task of issue 60");
}

/// README.md, then the pages of `docs/` and of `docs/guides/`.
fn markdown_files() -> Vec<PathBuf> {
    let mut files = vec![root().join("README.md")];
    for dir in ["docs", "docs/guides"] {
        let mut docs: Vec<PathBuf> = std::fs::read_dir(root().join(dir))
            .unwrap_or_else(|e| panic!("{dir}/: {e}"))
            .map(|e| e.unwrap().path())
            .filter(|p| p.extension().is_some_and(|e| e == "md"))
            .collect();
        docs.sort();
        files.extend(docs);
    }
    files
}

#[test]
fn every_snippet_of_the_readme_and_docs_is_run_or_marked_as_an_example() {
    let mut unmarked = Vec::new();
    let mut blocks = 0;
    for file in markdown_files() {
        let text = std::fs::read_to_string(&file).unwrap();
        let lines: Vec<&str> = text.lines().collect();
        let mut in_block = false;
        for (i, line) in lines.iter().enumerate() {
            let t = line.trim_start();
            if !t.starts_with("```") {
                continue;
            }
            if in_block {
                in_block = false;
                continue;
            }
            in_block = true;
            blocks += 1;
            if t == "```mermaid" {
                continue; // a diagram, not a snippet
            }
            let before = lines[..i].iter().rev().find(|l| !l.trim().is_empty()).map(|l| l.trim()).unwrap_or("");
            if !is_marker(before) {
                unmarked.push(format!("{}:{}: {t}", file.strip_prefix(root()).unwrap().display(), i + 1));
            }
        }
        assert!(!in_block, "{}: a fenced block is not closed", file.display());
    }
    assert!(blocks > 40, "only {blocks} fenced blocks found in README.md and docs/");
    assert!(
        unmarked.is_empty(),
        "these blocks are neither run by a test nor marked; put one of {:?} (or `{}NAME{}`) on the line before each:\n{}",
        MARKERS.iter().map(|m| m.0).collect::<Vec<_>>(),
        GUIDE_FILE.0,
        GUIDE_FILE.1,
        unmarked.join("\n")
    );
}

/// The links between the pages (`[text](docs/x.md#anchor)`) lead to a file that exists and,
/// with an anchor, to a heading of it.
#[test]
fn the_links_between_the_pages_resolve() {
    fn anchor_of(heading: &str) -> String {
        let text = heading.trim_start_matches('#').trim().to_lowercase();
        text.chars()
            .filter_map(|c| match c {
                'a'..='z' | '0'..='9' | '_' | '-' => Some(c),
                ' ' => Some('-'),
                _ => None,
            })
            .collect()
    }
    let mut broken = Vec::new();
    let mut links = 0;
    for file in markdown_files() {
        let text = std::fs::read_to_string(&file).unwrap();
        let dir = file.parent().unwrap();
        for (at, _) in text.match_indices("](") {
            let target = text[at + 2..].split(')').next().unwrap();
            if target.starts_with("http") || target.contains(' ') || target.is_empty() {
                continue;
            }
            links += 1;
            let (path, anchor) = target.split_once('#').unwrap_or((target, ""));
            let linked = if path.is_empty() { file.clone() } else { dir.join(path) };
            let Ok(body) = std::fs::read_to_string(&linked) else {
                if !linked.exists() {
                    broken.push(format!("{}: {target}", file.display()));
                }
                continue;
            };
            if !anchor.is_empty() && !body.lines().filter(|l| l.starts_with('#')).any(|h| anchor_of(h) == anchor) {
                broken.push(format!("{}: {target} (no such heading)", file.display()));
            }
        }
    }
    // A reader gone blind would find nothing broken: the pages link to each other this much.
    assert!(links > 30, "only {links} links between README.md and docs/ found");
    assert!(broken.is_empty(), "broken links:\n{}", broken.join("\n"));
}

// ------------------------------------------------------------------------------------------------
// The run command and its package check

/// The README's run command: the first line of the block after `<!-- run -->`.
fn readme_run_command() -> String {
    let readme = read("README.md");
    let after = readme.split("<!-- run -->").nth(1).expect("README.md has no `<!-- run -->` block");
    let block = after.split("```").nth(1).expect("a fenced block after `<!-- run -->`");
    let line = block.lines().skip(1).map(str::trim).find(|l| !l.is_empty()).expect("a command line");
    line.split(" #").next().unwrap().trim().to_string()
}

#[test]
fn the_readme_run_command_is_the_repositorys_script() {
    let command = readme_run_command();
    assert_eq!(command, "./run.sh", "the README's first command");
    let script = root().join("run.sh");
    let mode = std::os::unix::fs::PermissionsExt::mode(&std::fs::metadata(&script).expect("run.sh").permissions());
    assert!(mode & 0o111 != 0, "run.sh is not executable ({mode:o})");
    let text = read("run.sh");
    // It installs the build's packages through the shared script, then runs the release build.
    let install = text.find("scripts/install-deps.sh\n").expect("run.sh calls scripts/install-deps.sh (no flag)");
    let run = text.find("exec cargo run --release").expect("run.sh runs `cargo run --release`");
    assert!(install < run, "the packages come first");
    // tests/run.sh installs through the same script, so the list lives in one place.
    let tests_run = read("tests/run.sh");
    assert!(tests_run.contains("scripts/install-deps.sh\" --tests"), "tests/run.sh uses scripts/install-deps.sh");
    assert!(!tests_run.contains("apt-get"), "tests/run.sh keeps its own apt-get step");
    // What the README says `cargo run --release` uses is the shipped configuration, which loads.
    let checked = Command::new(crate::common::TestServer::binary())
        .args(["check-config", "conf/toolgate.yaml"])
        .current_dir(root())
        .env_remove("TOOLGATE_ADMIN_KEY")
        .output()
        .expect("run toolgate check-config");
    assert!(checked.status.success(), "{}", crate::common::describe_output(&checked));
}

#[test]
fn the_package_check_finds_nothing_missing_on_a_machine_that_builds_and_tests() {
    for args in [&["--check"][..], &["--check", "--tests"][..]] {
        let out = Command::new(root().join("scripts/install-deps.sh"))
            .args(args)
            .current_dir(root())
            .output()
            .expect("run scripts/install-deps.sh");
        let said = String::from_utf8_lossy(&out.stdout);
        assert!(out.status.success(), "install-deps.sh {args:?}: {}", crate::common::describe_output(&out));
        assert!(said.starts_with("install-deps: nothing missing for the build"), "{args:?}: {said}");
    }
    // With cmake out of sight (a PATH of every other command), the check names it, and only it,
    // and installs nothing.
    let dir = tempfile::tempdir().unwrap();
    let path = std::env::var("PATH").unwrap();
    for bin in path.split(':').filter(|d| !d.is_empty()) {
        let Ok(entries) = std::fs::read_dir(bin) else { continue };
        for entry in entries.flatten() {
            let name = entry.file_name();
            let link = dir.path().join(&name);
            if name != "cmake" && !link.exists() {
                let _ = std::os::unix::fs::symlink(entry.path(), link);
            }
        }
    }
    let out = Command::new(root().join("scripts/install-deps.sh"))
        .arg("--check")
        .env("PATH", dir.path())
        .output()
        .expect("run scripts/install-deps.sh without cmake");
    let said = String::from_utf8_lossy(&out.stdout);
    assert_eq!(out.status.code(), Some(1), "{}", crate::common::describe_output(&out));
    assert_eq!(said.trim(), "install-deps: missing for the build: cmake", "{}", crate::common::describe_output(&out));
    // An unknown flag is refused rather than taken for an install.
    let out = Command::new(root().join("scripts/install-deps.sh")).arg("--chek").output().unwrap();
    assert_eq!(out.status.code(), Some(2), "{}", crate::common::describe_output(&out));
}

#[test]
fn the_shell_scripts_are_shellcheck_clean() {
    let out = Command::new("shellcheck")
        .args(["run.sh", "scripts/install-deps.sh", "tests/run.sh"])
        .current_dir(root())
        .output()
        .expect("shellcheck is not installed: scripts/install-deps.sh --tests installs it (Debian package shellcheck)");
    assert!(out.status.success(), "shellcheck: {}", crate::common::describe_output(&out));
}

/// `tests/run.sh` reads cargo test's output with `tests/test-counts.awk`: a binary that ran no
/// test, an ignored test, a binary without a result line, or no test at all fails the step; a
/// doc-test binary with no test is a crate without doc examples, allowed and named.
#[test]
fn the_test_command_fails_a_cargo_test_that_ran_nothing() {
    let counts = |output: &str| {
        let file = std::env::temp_dir().join(format!("toolgate-test-counts-{}", crate::common::random_alnum(12)));
        std::fs::write(&file, output).unwrap();
        let out =
            Command::new("awk").arg("-f").arg(root().join("tests/test-counts.awk")).arg(&file).output().expect("awk");
        std::fs::remove_file(&file).unwrap();
        (out.status.code(), String::from_utf8_lossy(&out.stdout).into_owned())
    };
    let binary = |source: &str, crate_name: &str, passed: u32, ignored: u32| {
        format!(
            "     Running {source} (target/release/deps/{crate_name}-0123456789abcdef)\n\nrunning {} tests\n\
             test result: ok. {passed} passed; 0 failed; {ignored} ignored; 0 measured; 0 filtered out; finished in 0.01s\n\n",
            passed + ignored
        )
    };
    let empty_doc = "   Doc-tests toolgate\n\nrunning 0 tests\n\
                     test result: ok. 0 passed; 0 failed; 0 ignored; 0 measured; 0 filtered out; finished in 0.00s\n";

    let good = binary("unittests src/lib.rs", "toolgate", 213, 0)
        + &binary("tests/integration/main.rs", "integration", 175, 0);
    assert_eq!(
        counts(&(good.clone() + empty_doc)),
        (Some(0), "388 tests in 3 binaries; no doc examples in toolgate\n".into())
    );

    let (code, text) = counts(&(good.clone() + &binary("unittests src/main.rs", "toolgate", 0, 0)));
    assert_eq!(code, Some(1), "{text}");
    assert!(text.contains("cargo test: toolgate unittests src/main.rs: ran no test"), "{text}");

    let (code, text) = counts(&(good.clone() + &binary("tests/chain_order.rs", "chain_order", 1, 1)));
    assert_eq!(code, Some(1), "{text}");
    assert!(text.contains("cargo test: chain_order tests/chain_order.rs: 1 ignored test(s)"), "{text}");

    let crashed =
        "     Running tests/x.rs (target/release/deps/x-0123456789abcdef)\n\nrunning 2 tests\nerror: test failed\n";
    let (code, text) = counts(&(good + crashed));
    assert_eq!(code, Some(1), "{text}");
    assert!(text.contains("cargo test: x tests/x.rs: no `test result` line"), "{text}");

    let (code, text) = counts(empty_doc);
    assert_eq!(code, Some(1), "{text}");
    assert!(text.contains("cargo test: no test ran at all"), "{text}");
}

/// Every file of `tests/integration/` is a module of `main.rs`: a file left out would compile to
/// nothing and its tests would never run, while the suite still passed.
#[test]
fn every_integration_test_file_is_a_module_of_main() {
    let dir = root().join("tests/integration");
    let main = std::fs::read_to_string(dir.join("main.rs")).expect("tests/integration/main.rs");
    let declared: std::collections::BTreeSet<String> = main
        .lines()
        .filter_map(|l| l.trim().strip_prefix("mod ").or_else(|| l.trim().strip_prefix("pub mod ")))
        .map(|m| m.trim_end_matches(';').trim().to_string())
        .collect();
    let mut missing = Vec::new();
    let mut files = 0;
    for entry in std::fs::read_dir(&dir).expect("tests/integration/") {
        let path = entry.unwrap().path();
        let name = match path.extension() {
            Some(e) if e == "rs" => path.file_stem().unwrap().to_string_lossy().into_owned(),
            None if path.join("mod.rs").exists() => path.file_name().unwrap().to_string_lossy().into_owned(),
            _ => continue,
        };
        if name == "main" {
            continue;
        }
        files += 1;
        if !declared.contains(&name) {
            missing.push(name);
        }
    }
    assert!(files > 40, "only {files} files found in tests/integration/");
    assert!(missing.is_empty(), "files of tests/integration/ that main.rs does not declare (`mod x;`): {missing:?}");
}
